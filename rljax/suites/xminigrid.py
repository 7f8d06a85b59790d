"""XLand-MiniGrid (Nikulin et al. 2024) as rljax environments: ``xminigrid/<id>``.

Needs the ``xminigrid`` extra (``pip install -e ".[xminigrid]"``). Ids are XLand-MiniGrid's own
registry names: its MiniGrid ports (``MiniGrid-Empty-5x5``, ``MiniGrid-DoorKey-5x5``,
``MiniGrid-FourRooms``, ...) and its XLand meta-RL grids (``XLand-MiniGrid-R1-9x9``, ...);
:func:`ids` lists the installed version's. Observations are the agent's egocentric view,
``(view_size, view_size, 2)`` uint8, each cell ``(tile, colour)``: tiles 0..12, colours 0..11
(7 x 7 for the MiniGrid ids, 5 x 5 for XLand); 6 discrete actions (forward, turn right, turn left,
pick up, put down, toggle).

Terminated vs truncated: XLand-MiniGrid's bare ``step`` does not reset (its auto-resets are the
``GymAutoResetWrapper`` / ``DmEnvAutoResetWrapper`` a user adds, and this adapter does not); it
marks both ends of an episode ``step_type == LAST`` and tells them apart by ``discount``: 0 for the
goal reached (a real end), 1 for its step counter reaching ``params.max_steps``. The adapter runs
every step with ``max_steps`` = 2^31 - 1, so the counter limit never fires and ``LAST`` is exactly a
termination, and the time limit is rljax's ``max_steps_in_episode`` (by default XLand-MiniGrid's own
``max_steps`` for the id), reported as ``truncated``.

Reward: XLand-MiniGrid pays ``1 - 0.9 * t / max_steps`` on success (MiniGrid's reward, ``t`` the
step count), 0 otherwise. Its ``max_steps`` is the time limit, so the adapter computes that reward
with rljax's ``max_steps_in_episode`` (which may be a traced, per-env value) in place of the disabled
``max_steps``: with the default limit the reward equals XLand-MiniGrid's.

>>> import rljax
>>> env, params = rljax.make("xminigrid/MiniGrid-Empty-5x5")
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from rljax.env import Box, Discrete
from rljax.suites._adapter import NO_LIMIT, SuiteEnv, SuiteParams, SuiteState, check_id, require

__all__ = ["XMiniGridEnv", "ids", "make"]


def _xminigrid() -> Any:
    return require("xminigrid", "xminigrid")


class XMiniGridEnv(SuiteEnv):
    """One XLand-MiniGrid environment, without its time limit (rljax adds it, and the auto-reset).

    Args:
        env_id: an XLand-MiniGrid id (see :func:`ids`).
        **kwargs: fields of its ``EnvParams`` to replace, as ``xminigrid.make`` takes them
            (``view_size``, ``height``, ``width``, ``max_steps``); ``max_steps`` becomes the time
            limit ``params.max_steps_in_episode``.
    """

    def __init__(self, env_id: str, **kwargs: Any):
        xm = _xminigrid()
        check_id("xminigrid", env_id, list(xm.registered_environments()))
        try:
            self._inner, inner_params = xm.make(env_id, **kwargs)
        except TypeError as err:  # a field its EnvParams does not have
            raise ValueError(f"xminigrid/{env_id}: {err} (keyword arguments are fields of its EnvParams, e.g. "
                             f"view_size, height, width, max_steps)") from None
        if inner_params.max_steps is None or int(inner_params.max_steps) < 1:
            raise ValueError(f"xminigrid/{env_id}: max_steps must be a positive int, got {inner_params.max_steps!r}")
        params = SuiteParams(max_steps_in_episode=int(inner_params.max_steps),
                             inner=inner_params.replace(max_steps=NO_LIMIT))
        obs = jax.eval_shape(lambda k: self._inner.reset(params.inner, k).observation, jax.random.key(0))
        if not hasattr(obs, "shape") or len(obs.shape) != 3:
            raise TypeError(f"xminigrid/{env_id}: expected a (view, view, 2) observation, got {obs!r}")
        constants = require("xminigrid.core.constants", "xminigrid")
        high = jnp.asarray([constants.NUM_TILES - 1, constants.NUM_COLORS - 1], jnp.uint8)
        super().__init__(f"xminigrid/{env_id}", Box(0, high, obs.shape, jnp.uint8),
                         Discrete(int(self._inner.num_actions(inner_params))), params,
                         stochastic_transitions=False)

    @property
    def xminigrid_env(self) -> Any:
        """The wrapped ``xminigrid.environment.Environment``."""
        return self._inner

    @staticmethod
    def _unlimited(inner_params: Any) -> Any:
        return inner_params.replace(max_steps=NO_LIMIT)

    def inner_reset(self, key: jax.Array, inner_params: Any) -> tuple[jax.Array, Any]:
        """Generates a new problem; the state is XLand-MiniGrid's whole ``TimeStep``."""
        timestep = self._inner.reset(self._unlimited(inner_params), key)
        return timestep.observation, timestep

    def inner_step(self, key: jax.Array, inner_state: Any, action: Any, inner_params: Any
                   ) -> tuple[jax.Array, Any, jax.Array, jax.Array]:
        """XLand-MiniGrid's step with its step limit off (so ``LAST`` is a goal reached; its
        reward is then ``1 - 0.9 * t / 2^31`` on success, which :meth:`step_env` rescales).
        Deterministic given the state (``key`` is unused)."""
        timestep = self._inner.step(self._unlimited(inner_params), inner_state, jnp.asarray(action, jnp.int32))
        return timestep.observation, timestep, timestep.reward, timestep.last()

    def step_env(self, key: jax.Array, state: SuiteState, action: Any, params: SuiteParams
                 ) -> tuple[jax.Array, SuiteState, jax.Array, jax.Array, dict[str, Any]]:
        """One step; the success reward is ``1 - 0.9 * t / params.max_steps_in_episode``."""
        obs, state, reward, terminated, info = super().step_env(key, state, action, params)
        decayed = 1.0 - 0.9 * state.time.astype(jnp.float32) / jnp.asarray(params.max_steps_in_episode, jnp.float32)
        return obs, state, jnp.where(reward > 0, decayed, 0.0).astype(jnp.float32), terminated, info


def ids() -> list[str]:
    """Every XLand-MiniGrid id of the installed version (use as ``xminigrid/<id>``)."""
    return list(_xminigrid().registered_environments())


def make(env_id: str, **kwargs: Any) -> tuple[XMiniGridEnv, SuiteParams]:
    """Builds ``xminigrid/<env_id>``.

    Args:
        env_id: one of :func:`ids`.
        **kwargs: ``EnvParams`` fields, as ``xminigrid.make`` takes them (e.g. ``view_size=5``).

    Returns:
        ``(env, env.default_params)``; XLand-MiniGrid's params are ``params.inner`` (for the XLand
        ids, ``params.inner.ruleset`` is the task: an empty one by default; vmap over rulesets with
        ``VecEnv(batched_params=True)``).

    Raises:
        ValueError: an unknown id.
        ImportError: xminigrid is not installed (names the extra).
    """
    env = XMiniGridEnv(env_id, **kwargs)
    return env, env.default_params
