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

:meth:`MemoryCue.render` draws a state (``rljax eval --video``): the episode's timeline of
``delay + 2`` slots above (the cue's colour in the first, the query's black disc in the last, a red
mark under the current step) and, below, what the agent observes at this step (the cue's colour,
a blank, or the query).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rljax.env import Box, Discrete, EnvParams, EnvState, Environment

from .rendering import Canvas

__all__ = ["MemoryCue", "MemoryCueParams", "MemoryCueState", "CUE_COLORS"]

CUE_COLORS = ((31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75),
              (227, 119, 194), (188, 189, 34), (23, 190, 207), (127, 127, 127))
"""The colour :meth:`MemoryCue.render` draws cue ``i`` in (``CUE_COLORS[i % 10]``)."""


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
    render_fps = 4  # an episode of delay + 2 = 10 steps plays in 2.5 s

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

    def render(self, state: MemoryCueState, params: MemoryCueParams) -> np.ndarray:
        """Draws one unbatched state (host-side, Pillow); see the module docstring.

        Args:
            state: one env's state (scalar fields; jax or numpy values).
            params: its env params (the timeline has ``delay + 2`` slots).

        Returns:
            uint8 ``[160, 480, 3]``.
        """
        width, height = 480, 160
        delay, cue, time = int(params.delay), int(state.cue), int(state.time)
        slots, color = delay + 2, CUE_COLORS[cue % len(CUE_COLORS)]
        canvas = Canvas(width, height)
        slot, gap = width / slots, min(2.0, width / slots / 4)

        def box(x0: float, y0: float, x1: float, y1: float, fill: tuple[int, int, int]) -> None:
            canvas.polygon([(x0, y0), (x0, y1), (x1, y1), (x1, y0)], fill)

        for i in range(slots):  # the timeline
            x0, x1 = i * slot + gap, (i + 1) * slot - gap
            box(x0, 110, x1, 150, color if i == 0 else (225, 225, 225))
            if i == slots - 1:
                canvas.circle(((x0 + x1) / 2, 130), min(12.0, (x1 - x0) / 3), (0, 0, 0))
            if i == min(time, slots - 1):
                box(x0, 100, x1, 105, (214, 39, 40))
        shown = (width / 2 - 40, 10, width / 2 + 40, 90)  # what the agent observes now
        if time == 0:
            box(*shown, color)
        else:
            box(*shown, (225, 225, 225))
            if time == delay + 1:
                canvas.circle((width / 2, 50), 20, (0, 0, 0))
        return canvas.to_array()
