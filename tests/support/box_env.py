"""A test env whose action box is not symmetric about zero and has different bounds per dimension.

The action space is ``Box(low=[0, -2], high=[1, 3])``: ``low`` is not ``-high`` in either dimension,
so clipping to ``[-high, high]`` (or to one dimension's bounds) gives other actions than clipping to
``[low, high]``. Episodes last :data:`EPISODE_LENGTH` steps; the observation at step ``t`` is row
``t`` of :data:`OBSERVATIONS` (each row chosen so that a policy acting ``a = obs`` is clipped in a
different way) and the reward is ``a[0] + a[1]`` of the action the env receives, so an episode's
return sums the actions that actually reached the env.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rljax.env import Box, EnvParams, EnvState, Environment

LOW = np.asarray([0.0, -2.0], np.float32)
HIGH = np.asarray([1.0, 3.0], np.float32)

OBSERVATIONS = np.asarray([
    [-0.5, -2.5],  # below low in both dimensions, but inside [-high, high]
    [-3.0, -5.0],  # below -high in both dimensions
    [0.25, 1.5],   # inside the box
    [2.0, 4.0],    # above high in both dimensions
], np.float32)
"""The observation at each step of an episode."""

EPISODE_LENGTH = len(OBSERVATIONS)


@struct.dataclass
class BoxState(EnvState):
    time: jax.Array


@struct.dataclass
class BoxParams(EnvParams):
    max_steps_in_episode: int = EPISODE_LENGTH


class AsymmetricBox(Environment[BoxState, BoxParams]):
    stochastic_transitions = False

    @property
    def default_params(self) -> BoxParams:
        return BoxParams()

    def reset_env(self, key, params):
        return jnp.asarray(OBSERVATIONS[0]), BoxState(time=jnp.int32(0))

    def step_env(self, key, state, action, params):
        time = state.time + 1
        obs = jnp.asarray(OBSERVATIONS)[jnp.minimum(time, EPISODE_LENGTH - 1)]
        reward = jnp.sum(jnp.asarray(action, jnp.float32))
        return obs, BoxState(time=time), reward, jnp.bool_(False), {}

    def observation_space(self, params):
        return Box(-5.0, 5.0, (2,))

    def action_space(self, params):
        return Box(LOW, HIGH, (2,))
