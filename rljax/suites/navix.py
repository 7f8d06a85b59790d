"""Navix (Pignatelli et al. 2024), MiniGrid in JAX, as rljax environments: ``navix/<id>``.

Needs the ``navix`` extra (``pip install -e ".[navix]"``). Ids are Navix's own registry names
(``Navix-Empty-5x5-v0``, ``Navix-DoorKey-5x5-v0``, ``Navix-FourRooms-v0``, ...; :func:`ids` lists
the installed version's). Observations are Navix's symbolic grid by default: the whole map as
``(H, W, 3)`` uint8, each cell ``(object tag, colour, state)`` as in MiniGrid; 7 discrete actions
(MiniGrid's: turn left, turn right, forward, pick up, drop, toggle, done).

Terminated vs truncated: Navix's ``step`` is ``cond(previous step_type > 0, reset, _step)`` (it
resets on the step *after* an episode ended, dm_env style), and ``_step`` marks each timestep
``TRANSITION`` (0), ``TRUNCATION`` (1, its step counter reached ``max_steps``) or ``TERMINATION``
(2, the goal reached, lava, a ball hit; a termination on the last step is still 2). The adapter
calls ``_step`` (no reset) and reports only ``step_type == TERMINATION`` as ``terminated``; Navix's
own ``TRUNCATION`` is dropped, and the time limit is rljax's ``max_steps_in_episode`` (by default
Navix's ``max_steps``, 100 for every id), reported as ``truncated``.

>>> import rljax
>>> env, params = rljax.make("navix/Navix-Empty-5x5-v0")
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from rljax.env import Box, Discrete
from rljax.suites._adapter import SuiteEnv, SuiteParams, check_id, require

__all__ = ["OBSERVATIONS", "NavixEnv", "ids", "make"]

# Navix's observation functions this adapter offers, by the name ``make(observation=...)`` takes.
# All are uint8 arrays of 3 axes. Navix's own declared spaces are not used: version 0.7.4 declares
# the symbolic grid as {0..8} while its player tag is 10, and KeyCorridor's locked doors write 254
# in the state channel, so the adapter declares uint8's whole range [0, 255].
OBSERVATIONS = ("symbolic", "symbolic_first_person", "rgb", "rgb_first_person")


def _registry() -> dict[str, Any]:
    return require("navix", "navix").registry()


class NavixEnv(SuiteEnv):
    """One Navix environment, without Navix's own auto-reset or time limit (rljax adds both).

    Args:
        env_id: a Navix id (see :func:`ids`).
        max_steps: the time limit (``params.max_steps_in_episode``); None for Navix's default (100).
            Navix's own environment is built with the same ``max_steps``, which it only uses for its
            (by default zero) ``penality_coeff`` time penalty.
        observation: one of :data:`OBSERVATIONS`.
        **kwargs: passed to ``navix.make`` (e.g. ``reward_fn=navix.rewards.DEFAULT_TASK``).
    """

    def __init__(self, env_id: str, max_steps: int | None = None, observation: str = "symbolic", **kwargs: Any):
        registry = _registry()
        check_id("navix", env_id, sorted(registry))
        if observation not in OBSERVATIONS:
            raise ValueError(f"navix observation {observation!r} is not one of {', '.join(OBSERVATIONS)}")
        if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1):
            raise ValueError(f"navix max_steps must be a positive int or None, got {max_steps!r}")
        nx = require("navix", "navix")
        kwargs["observation_fn"] = getattr(nx.observations, observation)
        if max_steps is not None:
            kwargs["max_steps"] = max_steps
        self._inner = nx.make(env_id, **kwargs)
        obs = jax.eval_shape(lambda k: self._inner.reset(k).observation, jax.random.key(0))
        super().__init__(f"navix/{env_id}", Box(0, 255, obs.shape, jnp.uint8),
                         Discrete(len(self._inner.action_set)),
                         SuiteParams(max_steps_in_episode=int(self._inner.max_steps), inner=None),
                         stochastic_transitions=False)

    @property
    def navix_env(self) -> Any:
        """The wrapped ``navix.Environment``."""
        return self._inner

    def inner_reset(self, key: jax.Array, inner_params: Any) -> tuple[jax.Array, Any]:
        """Navix's reset; the state is its whole ``Timestep`` (``_step`` reads its clock and info)."""
        timestep = self._inner.reset(key)
        return timestep.observation, timestep

    def inner_step(self, key: jax.Array, inner_state: Any, action: Any, inner_params: Any
                   ) -> tuple[jax.Array, Any, jax.Array, jax.Array]:
        """Navix's ``_step`` (its step without the reset); only ``TERMINATION`` ends the episode.
        Deterministic given the state (``key`` is unused: Navix keeps its own key in the state)."""
        timestep = self._inner._step(inner_state, jnp.asarray(action, jnp.int32))
        return timestep.observation, timestep, timestep.reward, timestep.step_type == 2


def ids() -> list[str]:
    """Every Navix id of the installed version (use as ``navix/<id>``)."""
    return sorted(_registry())


def make(env_id: str, max_steps: int | None = None, observation: str = "symbolic", **kwargs: Any
         ) -> tuple[NavixEnv, SuiteParams]:
    """Builds ``navix/<env_id>``.

    Args:
        env_id: one of :func:`ids`.
        max_steps: the time limit; None for Navix's default (100).
        observation: one of :data:`OBSERVATIONS` (``"symbolic"``: the full map, ``(H, W, 3)``).
        **kwargs: passed to ``navix.make``.

    Returns:
        ``(env, env.default_params)``.

    Raises:
        ValueError: an unknown id or observation.
        ImportError: navix is not installed (names the extra).
    """
    env = NavixEnv(env_id, max_steps=max_steps, observation=observation, **kwargs)
    return env, env.default_params
