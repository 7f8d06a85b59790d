"""The adapter every suite shares: one rljax environment over a suite's own reset and step.

A suite adapter subclasses :class:`SuiteEnv` and writes two functions over the suite's own state
and params, with *no* time limit and *no* reset:

* ``inner_reset(key, inner_params) -> (obs, inner_state)``
* ``inner_step(key, inner_state, action, inner_params) -> (obs, inner_state, reward, terminated)``

where ``terminated`` is true only when the MDP itself ended (death, goal, a fallen robot). The base
class :class:`rljax.env.Environment` then adds what the contract asks for: the time limit
(``params.max_steps_in_episode``, reported as ``truncated``), auto-reset, and
``info["final_observation"]``. The state carries the step count ``time`` beside the suite's state,
and the params carry the time limit beside the suite's params, so both stay pytrees
(``vmap`` over params works as for any rljax env).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rljax.env import Box, Discrete, EnvParams, EnvState, Environment, Space

__all__ = ["SuiteParams", "SuiteState", "SuiteEnv", "SuiteNotInstalledError", "require", "check_id", "convert_space", "NO_LIMIT"]

# A time limit no episode reaches: what an adapter gives a suite whose own time limit it replaces
# with rljax's (so the suite never reports the limit as its own ``done``).
NO_LIMIT = int(np.iinfo(np.int32).max)


@struct.dataclass
class SuiteState(EnvState):
    """An adapted suite's state.

    Attributes:
        time: int32 scalar, steps taken in the current episode (the base class's time limit).
        inner: the suite's own state pytree.
    """

    time: jax.Array
    inner: Any


@struct.dataclass
class SuiteParams(EnvParams):
    """An adapted suite's params.

    Attributes:
        max_steps_in_episode: the time limit; the step that reaches it is ``truncated``.
        inner: the suite's own params pytree (None for a suite without params, e.g. Brax).
    """

    max_steps_in_episode: int = 1000
    inner: Any = None


class SuiteNotInstalledError(ImportError):
    """A suite's package is missing; the message names the extra that installs it."""


def require(module: str, extra: str) -> ModuleType:
    """Imports a suite's package, or raises :class:`SuiteNotInstalledError` (an ``ImportError``) naming
    the extra that installs it.

    Args:
        module: the package to import, e.g. ``"craftax"``.
        extra: rljax's optional extra that installs it, e.g. ``"craftax"``.
    """
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise SuiteNotInstalledError(f"the {extra!r} env suite needs the package {module!r}, which is not installed: "
                          f"pip install -e \".[{extra}]\" in the rljax checkout (or pip install 'rljax-chunked[{extra}]', "
                          f"the published distribution's name)"
                          ) from err


def check_id(suite: str, env_id: Any, valid: Sequence[str]) -> str:
    """Returns ``env_id`` if it is one of ``valid``; else raises one ``ValueError`` listing them."""
    if env_id not in valid:
        raise ValueError(f"unknown {suite} environment {env_id!r}; {suite} has: {', '.join(valid)} "
                         f"(use them as '{suite}/<id>')")
    return env_id


def convert_space(space: Any) -> Space:
    """An rljax space equal to a suite's space (any object with an integer ``n``, or with ``low``,
    ``high``, ``shape`` and ``dtype``: gymnax's, Craftax's and Navix's spaces are such).

    Raises:
        TypeError: the space is neither discrete nor a box.
    """
    if hasattr(space, "n") and not hasattr(space, "low"):
        return Discrete(int(space.n))
    if all(hasattr(space, a) for a in ("low", "high", "shape")):
        return Box(space.low, space.high, tuple(space.shape), getattr(space, "dtype", jnp.float32))
    raise TypeError(f"cannot convert the space {space!r}: rljax has Discrete(n) and Box(low, high, shape)")


class SuiteEnv(Environment[SuiteState, SuiteParams]):
    """An rljax environment over a suite's reset and step (see the module docstring).

    Args:
        name: the registry name, e.g. ``"craftax/Craftax-Classic-Symbolic-v1"``.
        observation_space: one observation's space; observations are cast to its dtype.
        action_space: one action's space.
        default_params: the params :attr:`default_params` returns.
        stochastic_transitions: whether ``inner_step`` uses its key (see
            :class:`rljax.env.Environment`).
    """

    def __init__(self, name: str, observation_space: Space, action_space: Space,
                 default_params: SuiteParams, stochastic_transitions: bool):
        self._name = name
        self._observation_space = observation_space
        self._action_space = action_space
        self._default_params = default_params
        self.stochastic_transitions = bool(stochastic_transitions)

    @property
    def name(self) -> str:
        return self._name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._name!r})"

    @property
    def default_params(self) -> SuiteParams:
        return self._default_params

    def observation_space(self, params: SuiteParams | None = None) -> Space:
        return self._observation_space

    def action_space(self, params: SuiteParams | None = None) -> Space:
        return self._action_space

    def inner_reset(self, key: jax.Array, inner_params: Any) -> tuple[jax.Array, Any]:
        """The suite's reset: ``(obs, inner_state)``."""
        raise NotImplementedError

    def inner_step(self, key: jax.Array, inner_state: Any, action: Any, inner_params: Any
                   ) -> tuple[jax.Array, Any, jax.Array, jax.Array]:
        """The suite's step without time limit or reset: ``(obs, inner_state, reward, terminated)``."""
        raise NotImplementedError

    def _obs(self, obs: jax.Array) -> jax.Array:
        return jnp.asarray(obs, self._observation_space.dtype)

    def reset_env(self, key: jax.Array, params: SuiteParams) -> tuple[jax.Array, SuiteState]:
        """Starts an episode: the suite's reset with the episode clock at 0."""
        obs, inner = self.inner_reset(key, params.inner)
        return self._obs(obs), SuiteState(time=jnp.int32(0), inner=inner)

    def step_env(self, key: jax.Array, state: SuiteState, action: Any, params: SuiteParams
                 ) -> tuple[jax.Array, SuiteState, jax.Array, jax.Array, dict[str, Any]]:
        """One suite transition; the clock advances by one (the base class applies the limit)."""
        obs, inner, reward, terminated = self.inner_step(key, state.inner, action, params.inner)
        state = SuiteState(time=state.time + 1, inner=inner)
        return (self._obs(obs), state, jnp.asarray(reward, jnp.float32),
                jnp.asarray(terminated, jnp.bool_), {})
