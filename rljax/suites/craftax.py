"""Craftax (Matthews et al. 2024) as rljax environments: ``craftax/<id>``.

Needs the ``craftax`` extra (``pip install -e ".[craftax]"``). Ids: Craftax-Classic (the JAX
rewrite of Crafter) and Craftax, each with symbolic (a flat float32 vector) or pixel
(``(H, W, 3)`` float32) observations; 17 (Classic) or 43 discrete actions.

Terminated vs truncated: Craftax ends an episode (its ``done``) on death, on standing in lava
(Classic), on beating the final boss (Craftax), or when its step counter reaches
``max_timesteps``. The first three are ``terminated``; the last is a time limit, so the adapter
takes it over: the suite runs with no limit of its own and rljax's ``max_steps_in_episode``
(by default Craftax's own ``max_timesteps``: 10 000 for Classic, 100 000 for Craftax) marks the
step that reaches it ``truncated``.

>>> import rljax
>>> env, params = rljax.make("craftax/Craftax-Classic-Symbolic-v1")
"""

from __future__ import annotations

from typing import Any

import jax

from rljax.suites._adapter import NO_LIMIT, SuiteEnv, SuiteParams, check_id, convert_space, require

__all__ = ["IDS", "CraftaxEnv", "ids", "make"]

IDS = ("Craftax-Classic-Symbolic-v1", "Craftax-Symbolic-v1", "Craftax-Classic-Pixels-v1", "Craftax-Pixels-v1")


class CraftaxEnv(SuiteEnv):
    """One Craftax environment, without Craftax's own auto-reset or time limit (rljax adds both).

    Args:
        env_id: one of :data:`IDS`.
    """

    def __init__(self, env_id: str):
        check_id("craftax", env_id, IDS)
        craftax_env = require("craftax.craftax_env", "craftax")
        self._inner = craftax_env.make_craftax_env_from_name(env_id, auto_reset=False)
        inner_params = self._inner.default_params
        params = SuiteParams(max_steps_in_episode=int(inner_params.max_timesteps),
                             inner=inner_params.replace(max_timesteps=NO_LIMIT))
        super().__init__(f"craftax/{env_id}", convert_space(self._inner.observation_space(inner_params)),
                         convert_space(self._inner.action_space(inner_params)), params,
                         stochastic_transitions=True)

    def inner_reset(self, key: jax.Array, inner_params: Any) -> tuple[jax.Array, Any]:
        """Generates a new world."""
        return self._inner.reset_env(key, inner_params)

    def inner_step(self, key: jax.Array, inner_state: Any, action: Any, inner_params: Any
                   ) -> tuple[jax.Array, Any, jax.Array, jax.Array]:
        """One Craftax step; its ``done`` is a termination, as its own time limit is switched off
        (whatever ``inner_params.max_timesteps`` says: the time limit is rljax's)."""
        obs, state, reward, done, _ = self._inner.step_env(
            key, inner_state, action, inner_params.replace(max_timesteps=NO_LIMIT))
        return obs, state, reward, done


def ids() -> list[str]:
    """Every Craftax id this adapter offers (use as ``craftax/<id>``)."""
    return list(IDS)


def make(env_id: str, **kwargs: Any) -> tuple[CraftaxEnv, SuiteParams]:
    """Builds ``craftax/<env_id>``.

    Args:
        env_id: one of :data:`IDS`.
        **kwargs: none are accepted (Craftax's settings are its params: change them with
            ``params.replace(inner=params.inner.replace(...))``).

    Returns:
        ``(env, env.default_params)``.

    Raises:
        ValueError: an unknown id or any keyword argument.
        ImportError: craftax is not installed (names the extra).
    """
    if kwargs:
        raise ValueError(f"craftax/{env_id} takes no constructor arguments, got {sorted(kwargs)}; "
                         f"change its params instead (params.inner holds Craftax's EnvParams)")
    env = CraftaxEnv(env_id)
    return env, env.default_params
