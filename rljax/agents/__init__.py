"""The algorithm registry: every algorithm registers its config class and builder here.

An algorithm is one module in this package that ends with::

    register("ppo", PPOConfig, make_ppo, fits=ppo_fits)

``make_ppo(config, env, env_params, axis_name) -> rljax.agents.base.Agent`` builds the per-device
program; ``ppo_fits(env, env_params)`` is its action-space rule: it returns when the env's spaces
fit and raises ``ValueError`` saying why not (``rljax envs`` lists, for each env, the algorithms
whose rule accepts it; the builder runs the same check). An algorithm registered without a rule is
taken to fit every env: nothing is known about it before its builder runs, which then validates. The registry finds the algorithms of this package by importing its modules the first time
it is asked (:func:`algorithms`); an algorithm defined outside the package registers itself when its
module is imported, and is then trained, swept and resumed like a built-in one.

May import: :mod:`rljax.env`, :mod:`rljax.core`, :mod:`rljax.runtime`.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import Any, NamedTuple

from rljax.core.prng import unroll_threefry_on_cpu

__all__ = ["Algorithm", "register", "unregister", "algorithms", "algorithm_for", "build_agent", "fits_env"]


class Algorithm(NamedTuple):
    """A registered algorithm.

    Attributes:
        name: its command-line name (``rljax train <name>``), lower case.
        config_cls: its frozen config dataclass.
        make: ``make(config, env, env_params, axis_name) -> Agent``.
        fits: ``fits(env, env_params) -> None``, raising ``ValueError`` (naming the space and what
            would fit) when the env does not fit; None: no rule, taken to fit any env.
    """

    name: str
    config_cls: type
    make: Callable[..., Any]
    fits: Callable[[Any, Any], Any] | None = None


_REGISTRY: dict[str, Algorithm] = {}
_SCANNED = False
# Modules of this package that hold shared pieces, not algorithms.
_NOT_ALGORITHMS = frozenset({"base", "offpolicy", "onpolicy"})


def register(name: str, config_cls: type, make: Callable[..., Any],
             fits: Callable[[Any, Any], Any] | None = None) -> None:
    """Registers an algorithm under ``name``, with its action-space rule ``fits`` (see
    :class:`Algorithm`; None: taken to fit every env, its builder validates).

    Registering the same name again with the same config class (a module reloaded) replaces the
    entry; a different class under a taken name, or a class under a second name, is an error.
    """
    if fits is not None and not callable(fits):
        raise TypeError(f"fits must be a function (env, env_params) -> None that raises ValueError, or None; "
                        f"got {fits!r}")
    if not isinstance(name, str) or not name.isidentifier() or name != name.lower():
        raise ValueError(f"algorithm name must be a lower-case identifier, got {name!r}")
    old = _REGISTRY.get(name)
    if old is not None and old.config_cls.__qualname__ != config_cls.__qualname__:
        raise ValueError(f"algorithm name {name!r} is taken by {old.config_cls.__qualname__}")
    for other in _REGISTRY.values():
        if other.name != name and other.config_cls is config_cls:
            raise ValueError(f"{config_cls.__qualname__} is already registered as {other.name!r}")
    _REGISTRY[name] = Algorithm(name, config_cls, make, fits)


def unregister(name: str) -> None:
    """Removes the algorithm registered as ``name`` (e.g. one defined in a notebook cell that is
    about to be redefined); an unknown name is a ``KeyError`` naming the registered ones."""
    if name not in _REGISTRY:
        raise KeyError(f"no algorithm is registered as {name!r}; registered: {sorted(_REGISTRY)}")
    del _REGISTRY[name]


def _scan() -> None:
    """Imports every algorithm module of this package once, so each registers itself."""
    global _SCANNED
    if _SCANNED:
        return
    for info in pkgutil.iter_modules(__path__):
        if info.name not in _NOT_ALGORITHMS and not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")
    _SCANNED = True


def algorithms() -> dict[str, Algorithm]:
    """Every registered algorithm by name, sorted (the built-in ones are always included)."""
    _scan()
    return dict(sorted(_REGISTRY.items()))


def algorithm_for(config: Any) -> Algorithm:
    """The registered algorithm whose config class ``config`` is an instance of.

    Raises:
        TypeError: no algorithm is registered for ``type(config)``.
    """
    for entry in algorithms().values():
        if type(config) is entry.config_cls:
            return entry
    known = ", ".join(f"{a.name} ({a.config_cls.__name__})" for a in algorithms().values())
    raise TypeError(f"no algorithm is registered for config type {type(config).__qualname__}; known: {known}. "
                    f"An algorithm module registers itself with rljax.agents.register(name, ConfigClass, make)")


def build_agent(config: Any, env: Any, env_params: Any, axis_name: str | None) -> Any:
    """The per-device :class:`~rljax.agents.base.Agent` of ``config``'s algorithm for ``env``.

    Also registers rljax's CPU lowering of ``jax.random``'s hash (JAX's loop, or the straight-line hash
    where ``RLJAX_ROLLED_THREEFRY=0`` asks for it; the same bits either way:
    :func:`rljax.core.prng.unroll_threefry_on_cpu`)."""
    unroll_threefry_on_cpu()
    return algorithm_for(config).make(config, env, env_params, axis_name)


def fits_env(name: str, env: Any, env_params: Any) -> bool:
    """Whether the algorithm registered as ``name`` can train on ``env``: its action-space rule
    accepts the env's spaces (True for an algorithm registered without a rule). Nothing is compiled.

    Raises:
        KeyError: no algorithm is registered as ``name`` (the message names the registered ones).
    """
    registered = algorithms()
    if name not in registered:
        raise KeyError(f"no algorithm is registered as {name!r}; registered: {sorted(registered)}")
    rule = registered[name].fits
    if rule is None:
        return True
    try:
        rule(env, env_params)
    except ValueError:
        return False
    return True
