"""``Ticker``: a deterministic env whose values are all distinct, so a hand computation can say
exactly what each transition, n-step item and bootstrap must be.

The observation is ``time + 1`` (1, 2, 3), the reward of a step is ``time + 1`` (1, 2, 3), and a
time limit of :data:`LIMIT` = 3 truncates every episode, whose final observation (4) differs from
the next episode's first (1). Nothing terminates. A placeholder (all-zero) observation or reward
never occurs in a real step.
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import struct

from rljax.env import Box, Discrete, EnvParams, EnvState, Environment

LIMIT = 3
"""Ticker's time limit (its default ``max_steps_in_episode``)."""


@struct.dataclass
class TickerState(EnvState):
    pass


@struct.dataclass
class TickerParams(EnvParams):
    max_steps_in_episode: int = LIMIT


class Ticker(Environment[TickerState, TickerParams]):
    """The ticker (module docstring); ``continuous``: a ``Box(-1, 1, (1,))`` action space instead of
    ``Discrete(2)`` (actions are ignored either way)."""

    stochastic_transitions = False

    def __init__(self, continuous: bool = False):
        self.continuous = continuous

    @property
    def default_params(self) -> TickerParams:
        return TickerParams()

    def reset_env(self, key, params):
        return jnp.ones((1,), jnp.float32), TickerState(time=jnp.int32(0))

    def step_env(self, key, state, action, params):
        time = state.time + 1
        reward = time.astype(jnp.float32)  # the pre-step time + 1
        return (time + 1).astype(jnp.float32)[None], TickerState(time=time), reward, jnp.bool_(False), {}

    def observation_space(self, params):
        return Box(0.0, 10.0, (1,))

    def action_space(self, params):
        return Box(-1.0, 1.0, (1,)) if self.continuous else Discrete(2)
