"""Brax continuous control (Freeman et al. 2021) as rljax environments: ``brax/<id>``.

Needs the ``brax`` extra (``pip install -e ".[brax]"``). Ids are Brax's own environment names
(``brax.envs.get_environment``): ant, halfcheetah, hopper, humanoid, inverted_pendulum, ... .
Observations are Brax's float32 vectors; actions a ``Box`` of the actuators' control ranges (Brax
clips actions to them: ``[-1, 1]`` for most, ``[-3, 3]`` for inverted_pendulum).

Terminated vs truncated: a bare Brax environment has no time limit; its ``done`` is a real end of
the episode (hopper or walker2d falling, ant or humanoid leaving their healthy height,
inverted_pendulum tipping over), so it is ``terminated``. The time limit is rljax's
``max_steps_in_episode`` (1000, Brax's customary ``episode_length``) and is reported as
``truncated``, like the ``truncation`` field of Brax's own ``EpisodeWrapper``.

>>> import rljax
>>> env, params = rljax.make("brax/hopper", backend="positional")
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from rljax.env import Box
from rljax.suites._adapter import SuiteEnv, SuiteParams, check_id, require

__all__ = ["IDS", "BACKENDS", "EPISODE_LENGTH", "BraxEnv", "ids", "make"]

IDS = ("ant", "halfcheetah", "hopper", "humanoid", "humanoidstandup", "inverted_pendulum",
       "inverted_double_pendulum", "pusher", "reacher", "swimmer", "walker2d")
BACKENDS = ("generalized", "positional", "spring", "mjx")
EPISODE_LENGTH = 1000


class BraxEnv(SuiteEnv):
    """One Brax environment, without Brax's training wrappers (rljax adds time limit and reset).

    Args:
        env_id: one of :data:`IDS`.
        backend: a physics pipeline of :data:`BACKENDS`, or None for the environment's default.
        **kwargs: passed to the Brax environment's constructor (e.g. ``terminate_when_unhealthy``).
    """

    def __init__(self, env_id: str, backend: str | None = None, **kwargs: Any):
        check_id("brax", env_id, IDS)
        if backend is not None and backend not in BACKENDS:
            raise ValueError(f"brax backend {backend!r} is not one of {', '.join(BACKENDS)} (or None, "
                             f"the environment's default)")
        envs = require("brax.envs", "brax")
        if backend is not None:
            kwargs["backend"] = backend
        self._inner = envs.get_environment(env_id, **kwargs)
        obs = jax.eval_shape(self._inner.reset, jax.random.key(0)).obs
        ctrl_range = np.asarray(self._inner.sys.actuator.ctrl_range, np.float32)
        super().__init__(f"brax/{env_id}", Box(-np.inf, np.inf, obs.shape),
                         Box(ctrl_range[:, 0], ctrl_range[:, 1], (self._inner.action_size,)),
                         SuiteParams(max_steps_in_episode=EPISODE_LENGTH, inner=None),
                         stochastic_transitions=False)

    @property
    def backend(self) -> str:
        """The physics pipeline this environment runs."""
        return self._inner.backend

    def inner_reset(self, key: jax.Array, inner_params: Any) -> tuple[jax.Array, Any]:
        """Brax's reset: a randomised initial pose."""
        state = self._inner.reset(key)
        return state.obs, state

    def inner_step(self, key: jax.Array, inner_state: Any, action: Any, inner_params: Any
                   ) -> tuple[jax.Array, Any, jax.Array, jax.Array]:
        """Brax's step (deterministic: ``key`` is unused); its ``done`` is a termination."""
        state = self._inner.step(inner_state, action)
        return state.obs, state, state.reward, state.done > 0.5


def ids() -> list[str]:
    """Every Brax id this adapter offers (use as ``brax/<id>``)."""
    return list(IDS)


def make(env_id: str, backend: str | None = None, **kwargs: Any) -> tuple[BraxEnv, SuiteParams]:
    """Builds ``brax/<env_id>``.

    Args:
        env_id: one of :data:`IDS`.
        backend: a physics pipeline of :data:`BACKENDS`, or None for the environment's default.
        **kwargs: passed to the Brax environment's constructor.

    Returns:
        ``(env, env.default_params)``; the time limit is ``params.max_steps_in_episode`` (1000).

    Raises:
        ValueError: an unknown id or backend.
        ImportError: brax is not installed (names the extra).
    """
    env = BraxEnv(env_id, backend=backend, **kwargs)
    return env, env.default_params
