"""A memory task: remember a cue over a delay, then name it.

``MemoryCue-v0`` (``Discrete`` actions) and ``MemoryCueContinuous-v0`` (``Box(-1, 1, (1,))``)::

    t = 0              obs = [one_hot(cue), 0]       the cue, drawn uniformly at reset
    t = 1 .. delay     obs = [0, ..., 0, 0]           blank: nothing tells the cues apart
    t = delay + 1      obs = [0, ..., 0, 1]           the query; the action there is judged and
                                                      the episode terminates

Every step before the query pays 0. At the query, the discrete task pays +1 for ``action == cue``
and -1 otherwise; the continuous one (two cues, ``c = -1`` or ``+1``) pays ``1 - (a - c)^2`` for
the action clipped to ``[-1, 1]``. So the optimal return is 1, and a policy without memory, which
sees the same blank query whatever the cue, is at chance: 0 in expectation with two cues (its best
constant action, ``a = 0``, also earns 0 in the continuous task). Episodes last ``delay + 2``
steps; ``delay`` is a traced param, so a sweep or ``--env-param delay=...`` can vary it.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from rljax.env import Box, Discrete, EnvParams, EnvState, Environment

__all__ = ["MemoryCue", "MemoryCueParams", "MemoryCueState"]


@struct.dataclass
class MemoryCueState(EnvState):
    """Attributes: cue: int32, the cue of this episode. time: steps taken in the episode."""

    cue: jax.Array
    time: jax.Array


@struct.dataclass
class MemoryCueParams(EnvParams):
    """Attributes: delay: blank steps between the cue and the query. max_steps_in_episode: a time
    limit the episode never reaches (it terminates at the query, ``delay + 2`` steps)."""

    delay: int = 8
    max_steps_in_episode: int = 10_000


class MemoryCue(Environment[MemoryCueState, MemoryCueParams]):
    """See the module docstring.

    Args:
        num_cues: how many cues (and discrete actions); 2 for the continuous task.
        continuous: ``Box(-1, 1, (1,))`` actions instead of ``Discrete(num_cues)``.

    Observations: float32 ``[num_cues + 1]``.
    """

    stochastic_transitions = False  # only resets draw

    def __init__(self, num_cues: int = 2, continuous: bool = False):
        if not isinstance(num_cues, int) or isinstance(num_cues, bool) or num_cues < 2:
            raise ValueError(f"num_cues must be an integer >= 2, got {num_cues!r}")
        if continuous and num_cues != 2:
            raise ValueError(f"the continuous memory task has 2 cues (-1 and +1), got num_cues={num_cues}")
        self.num_cues, self.continuous = num_cues, continuous

    @property
    def name(self) -> str:
        return "MemoryCueContinuous-v0" if self.continuous else "MemoryCue-v0"

    @property
    def default_params(self) -> MemoryCueParams:
        return MemoryCueParams()

    def _obs(self, cue: jax.Array, time: jax.Array, params: MemoryCueParams) -> jax.Array:
        shown = jax.nn.one_hot(cue, self.num_cues, dtype=jnp.float32) * (time == 0)
        query = (time == params.delay + 1).astype(jnp.float32)
        return jnp.concatenate([shown, query[None]])

    def reset_env(self, key: jax.Array, params: MemoryCueParams) -> tuple[jax.Array, MemoryCueState]:
        cue = jax.random.randint(key, (), 0, self.num_cues, jnp.int32)
        state = MemoryCueState(cue=cue, time=jnp.int32(0))
        return self._obs(cue, state.time, params), state

    def step_env(self, key: jax.Array, state: MemoryCueState, action: Any, params: MemoryCueParams
                 ) -> tuple[jax.Array, MemoryCueState, jax.Array, jax.Array, dict[str, Any]]:
        query = state.time == params.delay + 1
        if self.continuous:
            a = jnp.clip(jnp.reshape(action, ()), -1.0, 1.0)
            judged = 1.0 - (a - (2.0 * state.cue - 1.0)) ** 2
        else:
            judged = jnp.where(jnp.asarray(action) == state.cue, 1.0, -1.0)
        reward = jnp.where(query, judged, 0.0).astype(jnp.float32)
        time = state.time + 1
        return self._obs(state.cue, time, params), MemoryCueState(cue=state.cue, time=time), reward, query, {}

    def observation_space(self, params: MemoryCueParams) -> Box:
        return Box(0.0, 1.0, (self.num_cues + 1,), jnp.float32)

    def action_space(self, params: MemoryCueParams) -> Box | Discrete:
        return Box(-1.0, 1.0, (1,), jnp.float32) if self.continuous else Discrete(self.num_cues)
