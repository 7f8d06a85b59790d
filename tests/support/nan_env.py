"""A test env whose reward turns NaN at a fixed step of every (long) episode.

Observations are ``[t / 1000]``, rewards 1, except at episode step ``nan_at`` where the reward is
NaN; episodes are truncated after ``max_steps_in_episode`` steps. A learner reaches the NaN after
``nan_at`` steps per env, whatever its learning rate, so a rollback cannot cure it: the run must give
up cleanly.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from rljax.env import Box, Discrete, EnvParams, EnvState, Environment


@struct.dataclass
class NaNState(EnvState):
    time: jax.Array


@struct.dataclass
class NaNParams(EnvParams):
    max_steps_in_episode: int = 1000
    nan_at: int = 60


class NaNReward(Environment[NaNState, NaNParams]):
    stochastic_transitions = False

    @property
    def default_params(self) -> NaNParams:
        return NaNParams()

    def reset_env(self, key, params):
        return jnp.zeros((1,), jnp.float32), NaNState(time=jnp.int32(0))

    def step_env(self, key, state, action, params):
        time = state.time + 1
        reward = jnp.where(time == params.nan_at, jnp.float32(jnp.nan), jnp.float32(1.0))
        obs = (time.astype(jnp.float32) / 1000.0)[None]
        return obs, NaNState(time=time), reward, jnp.bool_(False), {}

    def observation_space(self, params):
        return Box(0.0, 1.0, (1,))

    def action_space(self, params):
        return Discrete(2)
