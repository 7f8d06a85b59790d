"""The environment registry: names -> env factories, for ``config.env`` and every ``--env`` flag.

The registry lives in the library, so ``rljax.train`` resolves ``config.env`` without importing a
top-level module name a user project may shadow (a project with its own ``envs`` package must not
break rljax). The environments bundled with rljax (the repository's ``envs/`` folder, installed
beside ``rljax/``) register themselves here; the library loads that folder by its location, not by
the name ``envs``. User environments register with :func:`register` (``envs.register`` is the same
function).

>>> from rljax.env_registry import make
>>> env, params = make("CartPole-v1")
>>> env, params = make("gymnax/Breakout-MinAtar")   # any gymnax >= 1.0 environment, unwrapped
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import math
import pathlib
import sys
import typing
from collections.abc import Callable
from typing import Any

__all__ = ["GYMNAX_PREFIX", "SUITES", "make", "register", "registered", "gymnax_registered", "suite_registered",
           "parse_env_params"]

GYMNAX_PREFIX = "gymnax/"

# Optional env suites: "<prefix>/<id>" names are built by the module's ``make(id, **kwargs) ->
# (env, params)``; its ``ids() -> list[str]`` lists what it offers. A module is imported only when
# one of its names is used, and its package is an optional extra (``pip install -e ".[<extra>]"``).
SUITES: dict[str, str] = {
    "craftax": "rljax.suites.craftax",
    "brax": "rljax.suites.brax",
}

# The bundled environments: the envs/ package beside rljax/ (a source checkout or an installed wheel).
BUNDLED_DIR = pathlib.Path(__file__).resolve().parent.parent / "envs"
_BUNDLED_MODULE = "rljax._bundled_envs"

_REGISTRY: dict[str, Callable[..., Any]] = {}
_BUILTIN: set[str] = set()


def _load_bundled() -> None:
    """Imports the bundled ``envs/`` package once (it registers its environments on import).

    If ``envs`` is already imported from that same folder it has registered them; otherwise the
    folder is imported under a private module name, whatever ``import envs`` would find first on
    ``sys.path``.
    """
    if _BUILTIN or not (BUNDLED_DIR / "__init__.py").is_file():
        return
    loaded = sys.modules.get("envs")
    if loaded is not None and pathlib.Path(getattr(loaded, "__file__", "") or "").resolve().parent == BUNDLED_DIR:
        return
    if _BUNDLED_MODULE in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(_BUNDLED_MODULE, BUNDLED_DIR / "__init__.py",
                                                  submodule_search_locations=[str(BUNDLED_DIR)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[_BUNDLED_MODULE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[_BUNDLED_MODULE]
        raise


def register_builtin(name: str, factory: Callable[..., Any]) -> None:
    """Registers one of the bundled environments (for ``envs/__init__.py``).

    Idempotent: the bundled package may be imported twice (as ``envs`` by the user and privately
    by the library), and its second registration replaces the first.
    """
    _REGISTRY[name] = factory
    _BUILTIN.add(name)


def register(name: str, factory: Callable[..., Any]) -> None:
    """Registers a user environment so that :func:`make` and every experiment's ``--env`` find it.

    Args:
        name: the id, e.g. ``"MyEnv-v0"``; must be new and must not start with ``gymnax/``.
        factory: called with ``make``'s keyword arguments; returns an env object.

    Raises:
        ValueError: the name is empty, starts with ``gymnax/`` or is taken.
        TypeError: ``factory`` is not callable.
    """
    _load_bundled()
    if not isinstance(name, str) or not name or name.startswith(GYMNAX_PREFIX) or _suite_of(name):
        raise ValueError(f"invalid env name {name!r}: use a non-empty id not starting with {GYMNAX_PREFIX!r} "
                         f"or a suite prefix ({', '.join(p + '/' for p in sorted(SUITES))})")
    if name in _REGISTRY:
        raise ValueError(f"env {name!r} is already registered")
    if not callable(factory):
        raise TypeError(f"factory for {name!r} must be callable, got {type(factory).__name__}")
    _REGISTRY[name] = factory


def registered() -> list[str]:
    """Names of rljax's own and user-registered environments, in registration order (gymnax's
    are listed by :func:`gymnax_registered`)."""
    _load_bundled()
    return list(_REGISTRY)


def gymnax_registered() -> list[str]:
    """Every gymnax environment id, prefixed with ``gymnax/`` (some may need downloads to build)."""
    import gymnax

    return [GYMNAX_PREFIX + name for name in gymnax.registered_envs]


def _suite_of(name: Any) -> str | None:
    """The suite prefix (a key of :data:`SUITES`) ``name`` starts with, or None."""
    if not isinstance(name, str) or "/" not in name:
        return None
    prefix = name.split("/", 1)[0]
    return prefix if prefix in SUITES else None


def suite_registered(prefix: str) -> list[str]:
    """Every name the suite ``prefix`` offers, each as ``"<prefix>/<id>"`` (imports the suite's
    package: raises ``ImportError`` naming the extra to install when it is missing)."""
    if prefix not in SUITES:
        raise ValueError(f"unknown env suite {prefix!r}; suites: {sorted(SUITES)}")
    return [f"{prefix}/{i}" for i in importlib.import_module(SUITES[prefix]).ids()]


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
    suite = _suite_of(name)
    if suite is not None:
        return importlib.import_module(SUITES[suite]).make(name[len(suite) + 1:], **kwargs)
    if isinstance(name, str) and name.startswith(GYMNAX_PREFIX):
        import gymnax

        gid = name[len(GYMNAX_PREFIX):]
        if gid not in gymnax.registered_envs:
            raise ValueError(
                f"unknown gymnax environment {gid!r}; gymnax has: {', '.join(gymnax.registered_envs)}")
        return gymnax.make(gid, **kwargs)
    _load_bundled()
    if name not in _REGISTRY:
        raise ValueError(
            f"unknown environment {name!r}; registered: {', '.join(_REGISTRY)} "
            f"(and any gymnax id as '{GYMNAX_PREFIX}<id>', e.g. '{GYMNAX_PREFIX}Breakout-MinAtar')")
    env = _REGISTRY[name](**kwargs)
    return env, env.default_params


def resolve(config_env: str, env: Any = None, env_params: Any = None) -> tuple[Any, Any]:
    """``(env, env_params)`` for a run: ``make(config_env)`` when ``env`` is None, and the env's
    default params when ``env_params`` is None."""
    if env is None:
        env, default = make(config_env)
        return env, default if env_params is None else env_params
    return env, env.default_params if env_params is None else env_params


def _field_types(params: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(type(params))
    except Exception:  # annotations that do not resolve: fall back to the values' types
        return {}


def _cast(text: str, kind: Any, name: str) -> Any:
    """``text`` as a value of ``kind`` (bool, int or float); ValueError naming the param otherwise."""
    text = text.strip()
    if kind is bool:
        lowered = text.lower()
        if lowered in ("true", "1", "yes"):
            return True
        if lowered in ("false", "0", "no"):
            return False
        raise ValueError(f"--env-param {name}={text}: {name} is a bool; give true or false")
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"--env-param {name}={text}: {text!r} is not a number ({name} is "
                         f"{getattr(kind, '__name__', kind)})") from None
    if not math.isfinite(value):
        raise ValueError(f"--env-param {name}={text}: {name} must be a finite number")
    if kind is int:
        if not value.is_integer():
            raise ValueError(f"--env-param {name}={text}: {name} is an int; {text!r} is not a whole number")
        return int(value)
    return value


def parse_env_params(specs: Sequence[str], env_params: Any) -> tuple[Any, dict[str, Any]]:
    """Applies ``NAME=VALUE`` overrides to env params.

    Args:
        specs: ``["length=0.7", ...]``; a later override of the same name wins.
        env_params: a dataclass of env params (rljax's or gymnax's ``struct.dataclass``).

    Returns:
        ``(params, overrides)``: ``env_params.replace(...)`` with each value cast to its field's type
        (bool, int or float; a field holding an array keeps that array's dtype), and
        ``{name: value}`` of the overrides as Python values.

    Raises:
        ValueError: a spec without ``=``, a name that is not a field (the message lists the valid
            ones), a value that does not cast (or is not finite, or does not fit the field's integer
            dtype), or a ``max_steps_in_episode`` below 1.
    """
    if not specs:
        return env_params, {}
    if not dataclasses.is_dataclass(env_params):
        raise ValueError(f"--env-param: the env params ({type(env_params).__name__}) are not a dataclass, so they "
                         f"cannot be overridden")
    fields = [f.name for f in dataclasses.fields(env_params)]
    hints = _field_types(env_params)
    overrides: dict[str, Any] = {}
    for spec in specs:
        name, sep, text = spec.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ValueError(f"--env-param {spec!r}: expected NAME=VALUE, e.g. {fields[0]}=1.0")
        if name not in fields:
            close = difflib.get_close_matches(name, fields, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"--env-param {spec!r}: {name!r} is not a param of {type(env_params).__name__}{hint}; "
                             f"valid names: {', '.join(fields)}")
        current = getattr(env_params, name)
        kind = hints.get(name)
        if kind not in (bool, int, float):
            kind = _kind_of_value(current)
        overrides[name] = _cast(text, kind, name)
        if name == "max_steps_in_episode" and overrides[name] < 1:
            raise ValueError(f"--env-param {spec!r}: the time limit max_steps_in_episode must be >= 1")
    return env_params.replace(**{n: _like(getattr(env_params, n), v, n) for n, v in overrides.items()}), overrides


def _kind_of_value(value: Any) -> Any:
    import numpy as np

    dtype = np.asarray(value).dtype
    if dtype == bool:
        return bool
    return int if np.issubdtype(dtype, np.integer) else float


def _like(current: Any, value: Any, name: str) -> Any:
    """``value`` in the form of ``current``: an array of its dtype if it is an array, else as is."""
    if hasattr(current, "dtype") and hasattr(current, "shape"):
        import jax.numpy as jnp
        import numpy as np

        dtype = np.dtype(current.dtype)
        if np.issubdtype(dtype, np.integer) and not np.iinfo(dtype).min <= value <= np.iinfo(dtype).max:
            raise ValueError(f"--env-param {name}={value}: out of range for {name}'s {dtype} "
                             f"({np.iinfo(dtype).min}..{np.iinfo(dtype).max})")
        return jnp.asarray(value, dtype=dtype)
    return value
