"""Pure-JAX environments and their registry.

>>> import envs
>>> env, params = envs.make("CartPole-v1")
>>> env, params = envs.make("gymnax/Breakout-MinAtar")   # any gymnax >= 1.0 environment, unwrapped
>>> envs.registered()                                      # rljax's own names

Built-in: CartPole-v1, Pendulum-v1, Acrobot-v1, MountainCar-v0, MountainCarContinuous-v0 (dynamics
exact to Gymnasium's), and the probe environments of :mod:`envs.probes`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from envs.acrobot import Acrobot
from envs.cartpole import CartPole
from envs.mountain_car import MountainCar, MountainCarContinuous
from envs.pendulum import Pendulum
from envs.probes import PROBE_KINDS, ProbeEnv

__all__ = ["GYMNAX_PREFIX", "make", "register", "registered", "gymnax_registered"]

GYMNAX_PREFIX = "gymnax/"

_REGISTRY: dict[str, Callable[..., Any]] = {
    "CartPole-v1": CartPole,
    "Pendulum-v1": Pendulum,
    "Acrobot-v1": Acrobot,
    "MountainCar-v0": MountainCar,
    "MountainCarContinuous-v0": MountainCarContinuous,
}
for _kind in PROBE_KINDS:
    _REGISTRY[f"Probe{_kind}-v0"] = functools.partial(ProbeEnv, _kind, continuous=False)
    _REGISTRY[f"Probe{_kind}Continuous-v0"] = functools.partial(ProbeEnv, _kind, continuous=True)


def registered() -> list[str]:
    """Names of rljax's own environments, in registration order (gymnax's are not listed here:
    see :func:`gymnax_registered`)."""
    return list(_REGISTRY)


def gymnax_registered() -> list[str]:
    """Every gymnax environment id, prefixed with ``gymnax/`` (some may need downloads to build)."""
    import gymnax

    return [GYMNAX_PREFIX + name for name in gymnax.registered_envs]


def register(name: str, factory: Callable[..., Any]) -> None:
    """Registers a user environment so that ``make(name)`` and every experiment's ``--env`` find it.

    Args:
        name: the id, e.g. ``"MyEnv-v0"``; must be new and must not start with ``gymnax/``.
        factory: called with ``make``'s keyword arguments; returns an env object.
    """
    if not isinstance(name, str) or not name or name.startswith(GYMNAX_PREFIX):
        raise ValueError(f"invalid env name {name!r}: use a non-empty id not starting with {GYMNAX_PREFIX!r}")
    if name in _REGISTRY:
        raise ValueError(f"env {name!r} is already registered")
    if not callable(factory):
        raise TypeError(f"factory for {name!r} must be callable, got {type(factory).__name__}")
    _REGISTRY[name] = factory


def make(name: str, **kwargs: Any) -> tuple[Any, Any]:
    """Builds an environment by name.

    Args:
        name: a name from :func:`registered`, or ``"gymnax/<id>"`` for any gymnax environment.
        **kwargs: passed to the environment's constructor.

    Returns:
        ``(env, params)``, where ``params`` is ``env.default_params``.

    Raises:
        ValueError: the name is not registered; the message lists the valid names.
    """
    if isinstance(name, str) and name.startswith(GYMNAX_PREFIX):
        import gymnax

        gid = name[len(GYMNAX_PREFIX):]
        if gid not in gymnax.registered_envs:
            raise ValueError(
                f"unknown gymnax environment {gid!r}; gymnax has: {', '.join(gymnax.registered_envs)}")
        return gymnax.make(gid, **kwargs)
    if name not in _REGISTRY:
        raise ValueError(
            f"unknown environment {name!r}; registered: {', '.join(_REGISTRY)} "
            f"(and any gymnax id as '{GYMNAX_PREFIX}<id>', e.g. '{GYMNAX_PREFIX}Breakout-MinAtar')")
    env = _REGISTRY[name](**kwargs)
    return env, env.default_params
