"""The host env contract: a batch of ``N`` simulators stepped together on the CPU.

``reset(seed) -> obs [N, *obs_shape]`` starts every env (env ``i`` seeded ``seed + i``);
``step(actions [N, *action_shape]) -> HostStep`` steps all of them and auto-resets each env whose
episode ended, exactly as rljax's JAX envs do (:mod:`rljax.env`):

* ``obs[i]`` is the observation to act on next: on a step that ended env ``i``'s episode it is the
  first observation of its next episode;
* ``final_obs[i]`` is the observation the step reached: the last observation of the episode that
  ended (bootstrap from it after a truncation), equal to ``obs[i]`` on every other step;
* ``terminated[i]``: the MDP ended (its value after this step is 0); ``truncated[i]``: a time limit
  (or a lost simulator) cut the episode. Both may be true; ``terminated`` then wins for targets.

:func:`check_batch` holds every source to this: dtypes, shapes and value ranges against the declared
spaces, with an error that names the field, what came and what was declared.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

from rljax.env import Box, Discrete

__all__ = ["EnvConnectionError", "EnvTimeoutError", "HostEnv", "HostEnvError", "HostSpec", "HostStep", "check_actions",
           "check_batch", "check_obs", "parse_server"]


class HostEnvError(RuntimeError):
    """A batch of host envs failed: its simulator raised, hung or went away."""


class EnvTimeoutError(HostEnvError):
    """A reset or step took longer than its timeout."""


class EnvConnectionError(HostEnvError):
    """The connection to an env server failed or was closed."""


class HostStep(NamedTuple):
    """One batched step of ``N`` host envs (see the module docstring).

    Attributes:
        obs: ``[N, *obs_shape]``, the observation space's dtype: what to act on next.
        reward: float32 ``[N]``.
        terminated: bool ``[N]``.
        truncated: bool ``[N]``.
        final_obs: ``[N, *obs_shape]``: the observation the step reached.
    """

    obs: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    final_obs: np.ndarray


@dataclasses.dataclass(frozen=True)
class HostSpec:
    """What a batch of host envs is: its size and the spaces of one env.

    Attributes:
        num_envs: N.
        observation_space: a :class:`~rljax.env.Box` (any dtype) or :class:`~rljax.env.Discrete`.
        action_space: a :class:`~rljax.env.Discrete` or a :class:`~rljax.env.Box`.
    """

    num_envs: int
    observation_space: Any
    action_space: Any

    def __post_init__(self):
        if not isinstance(self.num_envs, (int, np.integer)) or isinstance(self.num_envs, bool) or self.num_envs < 1:
            raise ValueError(f"num_envs={self.num_envs!r}: a batch of host envs holds at least 1 env")
        for name in ("observation_space", "action_space"):
            space = getattr(self, name)
            if not isinstance(space, (Box, Discrete)):
                raise TypeError(f"{name}={space!r}: host envs declare rljax.env.Box or rljax.env.Discrete spaces")

    @property
    def obs_shape(self) -> tuple[int, ...]:
        return tuple(self.observation_space.shape)

    @property
    def obs_dtype(self) -> np.dtype:
        return np.dtype(self.observation_space.dtype)

    @property
    def action_shape(self) -> tuple[int, ...]:
        return tuple(self.action_space.shape)

    @property
    def action_dtype(self) -> np.dtype:
        return np.dtype(self.action_space.dtype)


@runtime_checkable
class HostEnv(Protocol):
    """A batch of host simulators (see the module docstring); ``spec`` says its size and spaces."""

    spec: HostSpec

    def reset(self, seed: int) -> np.ndarray: ...

    def step(self, actions: np.ndarray) -> HostStep: ...

    def close(self) -> None: ...


def _check_array(name: str, x: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name}: expected a numpy array of shape {shape} and dtype {dtype}, got {type(x).__name__}")
    if x.shape != shape or x.dtype != dtype:
        raise ValueError(f"{name}: got shape {x.shape} and dtype {x.dtype}; the spaces declare shape {shape} and "
                         f"dtype {dtype}")
    return x


def check_obs(spec: HostSpec, obs: Any, name: str = "obs") -> np.ndarray:
    """``obs`` if it is ``[N, *obs_shape]`` of the observation space's dtype, else a ValueError/TypeError."""
    return _check_array(name, obs, (spec.num_envs, *spec.obs_shape), spec.obs_dtype)


def check_actions(spec: HostSpec, actions: Any) -> np.ndarray:
    """``actions`` if they are ``[N, *action_shape]`` of the action space's dtype and, for a Discrete
    space, in ``[0, n)``; else an error naming the first bad value."""
    actions = _check_array("actions", actions, (spec.num_envs, *spec.action_shape), spec.action_dtype)
    space = spec.action_space
    if isinstance(space, Discrete):
        bad = np.flatnonzero((actions < 0) | (actions >= space.n))
        if bad.size:
            raise ValueError(f"actions[{bad[0]}] = {actions[bad[0]]} is not an action of Discrete({space.n}) "
                             f"(0 to {space.n - 1})")
    elif np.issubdtype(actions.dtype, np.floating) and not np.all(np.isfinite(actions)):
        env = int(np.flatnonzero(~np.isfinite(actions).reshape(len(actions), -1).all(axis=-1))[0])
        raise ValueError(f"actions[{env}] holds NaN or inf: {actions[env]}")
    return actions


def check_batch(spec: HostSpec, step: HostStep) -> HostStep:
    """``step`` if every field has the declared shape and dtype (reward float32 ``[N]``, flags bool
    ``[N]``, observations ``[N, *obs_shape]``) and the rewards are finite; else a ValueError/TypeError
    naming the field."""
    n = spec.num_envs
    check_obs(spec, step.obs, "obs")
    check_obs(spec, step.final_obs, "final_obs")
    _check_array("reward", step.reward, (n,), np.dtype(np.float32))
    _check_array("terminated", step.terminated, (n,), np.dtype(np.bool_))
    _check_array("truncated", step.truncated, (n,), np.dtype(np.bool_))
    if not np.all(np.isfinite(step.reward)):
        raise ValueError(f"reward[{np.flatnonzero(~np.isfinite(step.reward))[0]}] is not finite")
    return step


def parse_server(name: str) -> tuple[str, int]:
    """``(host, port)`` of ``server:HOST:PORT`` (an IPv6 host in brackets: ``server:[::1]:5555``)."""
    rest = name[len("server:"):]
    host, sep, port = rest.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"env {name!r}: an env server is named server:HOST:PORT with a port in 1..65535, e.g. "
                         f"server:127.0.0.1:5555")
    return host, int(port)
