"""The environment registry: names -> env factories, for ``config.env`` and every ``--env`` flag.

The registry lives in the library, so ``rljax.train`` resolves ``config.env`` without importing a
top-level module name a user project may shadow (a project with its own ``envs`` package must not
break rljax). The environments bundled with rljax (the repository's ``envs/`` folder, installed
beside ``rljax/``) register themselves here; the library loads that folder by its location, not by
the name ``envs``. User environments register with :func:`register` (``envs.register`` is the same
function), or are named without registering as ``"package.module:Name"`` (a class or factory).

A run builds its env with :func:`resolve_run`: ``config.env`` with ``config.env_kwargs`` (constructor
arguments) and ``config.env_params`` (overrides of the params, :func:`parse_env_params`); for an env
object passed to ``rljax.train`` it records in ``config.env`` a name that rebuilds it
(:func:`rebuild_name`), or ``python-object:<module>:<class>`` when none does.

>>> from rljax.core.registry import make
>>> env, params = make("CartPole-v1")
>>> env, params = make("gymnax/Breakout-MinAtar")   # any gymnax >= 1.0 environment, unwrapped
>>> env, params = make("my_envs:GridWorld", size=8)  # a user env by module and class (or factory)
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib.util
import math
import os
import pathlib
import sys
import types
import typing
from collections.abc import Callable, Collection, Sequence
from typing import Any

__all__ = ["GYMNAX_PREFIX", "GYMNAX_UNAVAILABLE", "SUITES", "OBJECT_PREFIX", "import_spec", "EnvNotRebuildableError", "make", "register", "registered",
           "gymnax_registered", "suite_registered", "parse_env_params", "parse_env_kwargs", "rebuild_name",
           "object_name", "resolve_run"]

GYMNAX_PREFIX = "gymnax/"
OBJECT_PREFIX = "python-object:"
"""``config.env`` of a run trained on an env object that cannot be rebuilt by name:
``"python-object:<module>:<qualname>"`` names the object's class (:func:`resolve_run`)."""

# gymnax environments that cannot be built on a machine without internet access, and why. Every
# other gymnax id builds offline and trains (tests/integration/test_gymnax_envs.py runs them all).
GYMNAX_UNAVAILABLE: dict[str, str] = {
    "MNISTBandit-bsuite": "downloads the MNIST data set when built (gymnax.utils.load_mnist, into /tmp/mnist)",
}

# Optional env suites: "<prefix>/<id>" names are built by the module's ``make(id, **kwargs) ->
# (env, params)``; its ``ids() -> list[str]`` lists what it offers. A module is imported only when
# one of its names is used, and its package is an optional extra (``pip install -e ".[<extra>]"``).
SUITES: dict[str, str] = {
    "craftax": "rljax.suites.craftax",
    "brax": "rljax.suites.brax",
    "navix": "rljax.suites.navix",
    "xminigrid": "rljax.suites.xminigrid",
    "pgx": "rljax.suites.pgx",
    "jaxmarl": "rljax.suites.jaxmarl",
}

# The bundled environments: the envs/ package beside rljax/ (a source checkout or an installed wheel).
BUNDLED_DIR = pathlib.Path(__file__).resolve().parents[2] / "envs"
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
        name: the id, e.g. ``"MyEnv-v0"``; must be new and must not start with ``gymnax/``,
            ``python-object:`` or a suite prefix. (A registered name wins over the
            ``module:Name`` reading of :func:`make`.)
        factory: called with ``make``'s keyword arguments; returns an env object.

    Raises:
        ValueError: the name is empty, starts with a reserved prefix or is taken.
        TypeError: ``factory`` is not callable.
    """
    _load_bundled()
    if not isinstance(name, str) or not name or name.startswith((GYMNAX_PREFIX, OBJECT_PREFIX)) or _suite_of(name):
        raise ValueError(f"invalid env name {name!r}: use a non-empty id not starting with {GYMNAX_PREFIX!r}, "
                         f"{OBJECT_PREFIX!r} or a suite prefix ({', '.join(p + '/' for p in sorted(SUITES))})")
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


class EnvNotRebuildableError(ValueError):
    """The run's env was a Python object that no name rebuilds; the message says what to pass."""


def make(name: str, **kwargs: Any) -> tuple[Any, Any]:
    """Builds an environment by name.

    Args:
        name: a name from :func:`registered`; ``"gymnax/<id>"`` for any gymnax environment;
            ``"<suite>/<id>"`` for a suite's (:data:`SUITES`); or ``"package.module:Name"`` for a
            user env: the module is imported (the working directory is searched too, after
            ``sys.path``, as ``python -m`` would) and ``Name`` (a class or a factory function;
            ``Outer.Inner`` for a nested one) is called with ``kwargs``. It must return an env
            object (the contract of :mod:`rljax.env`) or an ``(env, params)`` pair, as
            ``gymnax.make`` does.
        **kwargs: passed to the environment's constructor or factory.

    Returns:
        ``(env, params)``, where ``params`` is ``env.default_params`` unless a factory returned
        its own.

    Raises:
        ValueError: an unknown name (the message lists the valid ones); for ``module:Name``, a
            module that is not found, a missing attribute (the message lists close names), an
            object that is not callable, or a result that is not an env.
        EnvNotRebuildableError: a ``python-object:`` record (:data:`OBJECT_PREFIX`).
    """
    suite = _suite_of(name)
    if suite is not None:
        return _call_factory(name, importlib.import_module(SUITES[suite]).make, (name[len(suite) + 1:],), kwargs)
    if isinstance(name, str) and name.startswith(GYMNAX_PREFIX):
        import gymnax

        gid = name[len(GYMNAX_PREFIX):]
        if gid not in gymnax.registered_envs:
            hint = _did_you_mean(gid, gymnax.registered_envs)
            raise ValueError(f"unknown gymnax environment {gid!r}: "
                             f"{hint or f'not one of its {len(gymnax.registered_envs)} ids'} (`rljax envs` lists them)")
        if gid in GYMNAX_UNAVAILABLE:
            try:
                return gymnax.make(gid, **kwargs)
            except OSError as e:  # urllib's URLError is an OSError
                raise ValueError(f"{name} {GYMNAX_UNAVAILABLE[gid]}, and that failed: {e}") from e
        return _call_factory(name, gymnax.make, (gid,), kwargs)
    if isinstance(name, str) and name.startswith(OBJECT_PREFIX):
        raise EnvNotRebuildableError(_not_rebuildable_message(name))
    _load_bundled()
    if name not in _REGISTRY:
        if isinstance(name, str) and ":" in name:
            return _make_from_spec(name, kwargs)
        hint = _did_you_mean(name, [*_REGISTRY, *_gymnax_ids()])
        raise ValueError(f"unknown environment {name!r}: " + (f"{hint} (`rljax envs` lists every env)" if hint else (
            f"not one of the {len(_REGISTRY)} registered (`rljax envs` lists them), nor a gymnax id as "
            f"'{GYMNAX_PREFIX}<id>', a suite's '<suite>/<id>' ({', '.join(p + '/' for p in sorted(SUITES))}) or a "
            f"user env as 'package.module:ClassName'")))
    env = _call_factory(name, _REGISTRY[name], (), kwargs)
    return env, env.default_params


def _did_you_mean(name: Any, candidates: Sequence[str]) -> str:
    """``"did you mean 'X'?"`` (up to two names, closest first, letter case ignored), or ``""``."""
    if not isinstance(name, str):
        return ""
    by_lower = {c.lower(): c for c in candidates}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=2, cutoff=0.75)
    return f"did you mean {' or '.join(repr(by_lower[c]) for c in close)}?" if close else ""


def _gymnax_ids() -> list[str]:
    """:func:`gymnax_registered`, or none when gymnax cannot be imported (a suggestion is only a hint)."""
    try:
        return gymnax_registered()
    except ImportError:
        return []


def _call_factory(name: str, factory: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> Any:
    """``factory(*args, **kwargs)``; a ``TypeError`` from constructor arguments the env does not take
    (``--env-kwarg``) becomes a ``ValueError`` naming the env and the arguments."""
    if not kwargs:
        return factory(*args)
    try:
        return factory(*args, **kwargs)
    except TypeError as e:
        given = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        raise ValueError(f"env {name!r} cannot be built with the constructor arguments {given} "
                         f"(--env-kwarg / config.env_kwargs): {e}") from None


_ENV_METHODS = ("reset", "step", "observation_space", "action_space")


def _ensure_cwd_importable() -> None:
    """Puts the working directory first on ``sys.path`` when it is not there: ``python -m`` puts
    it first, a console script (``rljax``) does not, and ``--env mymod:Env`` must mean the same in
    both (a user's own ``envs`` or ``experiments`` module must win over rljax's installed ones, as
    under ``python -m``)."""
    cwd = os.getcwd()
    for entry in sys.path:
        try:
            if os.path.samefile(entry or os.curdir, cwd):
                return
        except OSError:
            continue
    sys.path.insert(0, cwd)
    importlib.invalidate_caches()


def import_spec(spec: str, what: str = "env") -> tuple[Any, str]:
    """``(object, where)`` that ``"package.module:Name"`` names, imported from the working directory or
    ``sys.path``; a ``ValueError`` saying what is wrong (the module, the name, close matches), its
    messages naming the object as ``what`` (``"env"``, ``"opponent"``)."""
    module_name, _, attr = spec.partition(":")
    module_name, attr = module_name.strip(), attr.strip()
    parts = attr.split(".")
    if not all(p.isidentifier() for p in module_name.split(".")) or not all(p.isidentifier() for p in parts):
        raise ValueError(f"{what} {spec!r}: a user {what} is named 'package.module:Name' (a module path, a colon, and "
                         f"a name in it, e.g. 'my_project.{what}s:{'GridWorld' if what == 'env' else 'Player'}')")
    _ensure_cwd_importable()
    try:
        obj = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        missing = err.name or ""
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            first = module_name.split(".")[0]
            raise ValueError(
                f"{what} {spec!r}: no module named {missing!r} (searched the working directory {os.getcwd()} and "
                f"sys.path); run from the folder that holds {first}.py (or the {first}/ package), or add that "
                f"folder to PYTHONPATH") from None
        raise ValueError(f"{what} {spec!r}: importing module {module_name!r} failed: {type(err).__name__}: {err}") \
            from err
    except Exception as err:  # noqa: BLE001 - the user module's own error, named and chained
        raise ValueError(f"{what} {spec!r}: importing module {module_name!r} failed: {type(err).__name__}: {err}") \
            from err
    where = module_name
    for part in parts:
        if not hasattr(obj, part):
            names = [n for n in dir(obj) if not n.startswith("_")]
            close = difflib.get_close_matches(part, names, n=3, cutoff=0.6)
            hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
            shown = [n for n in names if callable(getattr(obj, n, None)) and not isinstance(getattr(obj, n), type(sys))]
            listing = ", ".join(shown[:20]) + (", ..." if len(shown) > 20 else "")
            raise ValueError(f"{what} {spec!r}: {where} ({getattr(obj, '__file__', None) or type(obj).__name__}) has no "
                             f"attribute {part!r}{hint}; its callables: {listing or 'none'}")
        obj = getattr(obj, part)
        where = f"{where}.{part}" if where != module_name else f"{module_name}:{part}"
    return obj, where


def _is_env(obj: Any) -> bool:
    return all(callable(getattr(obj, m, None)) for m in _ENV_METHODS)


def _make_from_spec(spec: str, kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """:func:`make` of a ``"package.module:Name"`` user env."""
    factory, where = import_spec(spec)
    if not callable(factory):
        raise ValueError(f"env {spec!r}: {where} is a {type(factory).__name__}, not callable; name a class or a "
                         f"factory function that returns an env")
    try:
        out = factory(**kwargs)
    except TypeError as err:
        shown = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        raise ValueError(f"env {spec!r}: calling {where}({shown}) failed: TypeError: {err}") from err
    params = None
    if isinstance(out, tuple) and len(out) == 2 and _is_env(out[0]):
        out, params = out
    if not _is_env(out):
        raise ValueError(f"env {spec!r}: {where}(...) returned {type(out).__name__}, not an env: it must return an "
                         f"env object (with {', '.join(_ENV_METHODS)} and default_params; see docs/env_api.md) or "
                         f"an (env, params) pair")
    return out, out.default_params if params is None else params


def _not_rebuildable_message(recorded: str, run_dir: Any = None) -> str:
    cls = recorded[len(OBJECT_PREFIX):]
    short = cls.split(":", 1)[-1].split(".")[-1]
    where = "RUN_DIR" if run_dir is None else str(run_dir)
    return (f"the run's env was a Python object of class {cls} that cannot be rebuilt by name (config env "
            f"{recorded!r}), so it cannot be resumed or loaded from the command line; pass the same env object "
            f"from Python: rljax.train(config, env={short}(...), options=rljax.RunOptions(run_dir={where!r}, "
            f"resume=True)) (or rljax.load({where!r}, env={short}(...))). To resume from the command line, start runs by name "
            f"instead: --env package.module:Name (a module-level class or factory; --env-kwarg and --env-param "
            f"for its arguments and params)")


def parse_env_kwargs(specs: Sequence[str]) -> dict[str, Any]:
    """``["size=8", "mode=hard"]`` -> ``{"size": 8, "mode": "hard"}``: constructor keyword arguments.

    Each value is read as a Python literal (``8``, ``0.5``, ``True``, ``(1, 2)``, ``'text'``;
    ``true``/``false``/``none`` in any case too), and is otherwise the string as written. A later
    entry for the same name wins.

    Raises:
        ValueError: an entry is not ``NAME=VALUE`` with ``NAME`` an identifier.
    """
    import ast

    out: dict[str, Any] = {}
    for spec in specs:
        name, sep, text = spec.partition("=")
        name, text = name.strip(), text.strip()
        if not sep or not name.isidentifier():
            raise ValueError(f"--env-kwarg {spec!r}: expected NAME=VALUE with NAME a Python identifier, e.g. size=8")
        lowered = text.lower()
        if lowered in ("true", "false", "none"):
            out[name] = {"true": True, "false": False, "none": None}[lowered]
            continue
        try:
            out[name] = ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            out[name] = text
    return out


def _same(a: Any, b: Any, depth: int = 0) -> bool:
    """Whether two env objects (or params) are the same value, structurally: same types, equal
    arrays and scalars, and equal attributes all the way down. Conservative: callables other than
    the very same object, and anything deeper than a few levels, are different."""
    import jax
    import numpy as np

    if a is b:
        return True
    if depth > 12 or type(a) is not type(b):
        return False
    if isinstance(a, (np.ndarray, np.generic, jax.Array)):
        try:
            x, y = np.asarray(a), np.asarray(b)
        except Exception:  # noqa: BLE001 - not readable as an array (a PRNG key, a tracer): unknown
            return False
        return x.shape == y.shape and x.dtype == y.dtype and bool(np.array_equal(x, y))
    if isinstance(a, (str, bytes, int, float, complex, bool, type(None))):
        return a == b
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y, depth + 1) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k], depth + 1) for k in a)
    if isinstance(a, type) or callable(a) and not hasattr(a, "__dict__"):
        return False  # distinct functions, builtins, classes
    if dataclasses.is_dataclass(a):
        return all(_same(getattr(a, f.name), getattr(b, f.name), depth + 1) for f in dataclasses.fields(a)) \
            and _same(_attrs(a, exclude={f.name for f in dataclasses.fields(a)}),
                      _attrs(b, exclude={f.name for f in dataclasses.fields(b)}), depth + 1)
    if isinstance(a, types.FunctionType | types.MethodType | functools.partial):
        if isinstance(a, functools.partial):
            return _same(a.func, b.func, depth + 1) and _same(a.args, b.args, depth + 1) \
                and _same(a.keywords, b.keywords, depth + 1)
        return False
    if hasattr(a, "__dict__") or hasattr(type(a), "__slots__"):
        return _same(_attrs(a), _attrs(b), depth + 1)
    try:
        return bool(a == b) is True
    except Exception:  # noqa: BLE001 - no usable equality: not known to be the same
        return False


def _attrs(obj: Any, exclude: Collection[str] = ()) -> dict[str, Any]:
    """An object's instance attributes (``__dict__`` and ``__slots__``), except ``exclude``."""
    out = {k: v for k, v in getattr(obj, "__dict__", {}).items() if k not in exclude}
    for cls in type(obj).__mro__:
        for slot in getattr(cls, "__slots__", ()):
            if slot not in exclude and slot not in ("__dict__", "__weakref__") and hasattr(obj, slot):
                out[slot] = getattr(obj, slot)
    return out


def _candidates(config_env: str, env: Any) -> list[str]:
    """Names that might rebuild ``env``: ``config_env``, the registered names built by its class,
    and its class as ``module:qualname`` (when importable by that name)."""
    out = [] if config_env.startswith(OBJECT_PREFIX) else [config_env]
    _load_bundled()
    cls = type(env)
    for name, factory in _REGISTRY.items():
        func = factory.func if isinstance(factory, functools.partial) else factory
        if func is cls:
            out.append(name)
    qualname = getattr(cls, "__qualname__", "")
    module = getattr(cls, "__module__", "") or ""
    if module.startswith("gymnax.") and isinstance(getattr(env, "name", None), str):
        out.append(GYMNAX_PREFIX + env.name)
    if _suite_of(getattr(env, "name", None)) is not None:  # a suite env carries its "<suite>/<id>" name
        out.append(env.name)
    if module not in ("__main__", "builtins") and "<" not in qualname and not module.startswith("rljax._"):
        out.append(f"{module}:{qualname}")
    return list(dict.fromkeys(out))


def rebuild_name(env: Any, env_params: Any, config_env: str = "", env_kwargs: Sequence[str] = (),
                 env_param_specs: Sequence[str] = ()) -> str | None:
    """A name that rebuilds ``(env, env_params)`` exactly, or None.

    A candidate (``config_env``, a registered name of the env's class, the class as
    ``module:qualname``) counts only when ``make(name, **env_kwargs)`` with ``env_param_specs``
    applied gives an env and params structurally equal to the given ones (:func:`_same`): the
    check is the rebuild itself, so a name is never claimed for an env it does not reproduce
    (an env constructed with other arguments, one holding a lambda, one defined in ``__main__``).
    """
    kwargs = parse_env_kwargs(env_kwargs)
    for name in _candidates(config_env, env):
        try:
            built, params = make(name, **kwargs)
            params, _ = parse_env_params(env_param_specs, params)
        except Exception:  # noqa: BLE001 - a candidate that cannot be built does not rebuild the env
            continue
        if _same(built, env) and _same(params, env_params):
            return name
    return None


def object_name(env: Any) -> str:
    """The ``python-object:<module>:<qualname>`` record of an env object no name rebuilds."""
    cls = type(env)
    return f"{OBJECT_PREFIX}{getattr(cls, '__module__', '?')}:{getattr(cls, '__qualname__', cls.__name__)}"


def resolve_run(config: Any, env: Any = None, env_params: Any = None, *, record: bool = True,
                run_dir: Any = None) -> tuple[Any, Any, Any]:
    """``(config, env, env_params)`` for a run: the env built from the config, or the env object
    given, and the config recording how to rebuild it.

    * ``env`` None: ``make(config.env, **config.env_kwargs)``; its params (``env_params`` when
      given) with ``config.env_params`` applied (:func:`parse_env_params`).
    * ``env`` given: its params (``env_params``, else ``env.default_params``) with
      ``config.env_params`` applied; with ``record``, ``config.env`` becomes a name that rebuilds
      this env and these params (:func:`rebuild_name`: ``config.env`` itself when it does, else a
      registered name or ``module:Class``), or ``python-object:<module>:<class>`` when none does.

    Raises:
        EnvNotRebuildableError: ``env`` is None and ``config.env`` is a ``python-object:`` record;
            the message says which object to pass.
        ValueError: a bad env name, ``env_kwargs`` or ``env_params`` entry (see :func:`make`,
            :func:`parse_env_params`).
    """
    specs = tuple(getattr(config, "env_params", ()))
    kwarg_specs = tuple(getattr(config, "env_kwargs", ()))
    if env is None:
        if config.env.startswith(OBJECT_PREFIX):
            raise EnvNotRebuildableError(_not_rebuildable_message(config.env, run_dir))
        env, default = make(config.env, **parse_env_kwargs(kwarg_specs))
        params, _ = parse_env_params(specs, default if env_params is None else env_params)
        _check_randomize(config, params)
        return config, env, params
    params, _ = parse_env_params(specs, env.default_params if env_params is None else env_params)
    _check_randomize(config, params)
    if record:
        name = rebuild_name(env, params, config.env, kwarg_specs, specs) or object_name(env)
        if name != config.env:
            config = dataclasses.replace(config, env=name)
    return config, env, params


def resolve(config_env: str, env: Any = None, env_params: Any = None) -> tuple[Any, Any]:
    """``(env, env_params)`` for an env name: ``make(config_env)`` when ``env`` is None, and the
    env's default params when ``env_params`` is None. (A run uses :func:`resolve_run`, which also
    applies the config's ``env_kwargs`` and ``env_params``.)"""
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
            import jax
            import numpy as np

            scalar = isinstance(current, (bool, int, float, np.generic)) or (
                isinstance(current, (np.ndarray, jax.Array)) and np.ndim(current) == 0)
            if not scalar:
                raise ValueError(f"--env-param {spec!r}: {name!r} holds a {type(current).__name__}, not a number or "
                                 f"bool, so it cannot be set from the command line; the scalar params of "
                                 f"{type(env_params).__name__} can")
            kind = _kind_of_value(current)
        overrides[name] = _cast(text, kind, name)
        if name == "max_steps_in_episode" and overrides[name] < 1:
            raise ValueError(f"--env-param {spec!r}: the time limit max_steps_in_episode must be >= 1")
    return env_params.replace(**{n: _like(getattr(env_params, n), v, n) for n, v in overrides.items()}), overrides


def _check_randomize(config: Any, params: Any) -> None:
    """Raises ``ValueError`` when ``config.randomize`` names a range that ``params`` cannot take
    (:func:`rljax.core.wrappers.check_param_ranges`)."""
    if getattr(config, "randomize", ()):
        from rljax.core.wrappers import check_param_ranges, param_ranges

        check_param_ranges(param_ranges(config.randomize), params)


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
