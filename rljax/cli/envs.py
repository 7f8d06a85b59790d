"""``rljax envs [SUITE]``: the environments, their spaces, and the algorithms that fit them.

::

    rljax envs            # rljax's own envs and every gymnax env; one line per optional suite
    rljax envs brax       # a suite's envs (craftax, brax, navix, xminigrid, pgx), when its extra is installed

One line per env: its name (what ``--env`` takes), observation space, action space and the
registered algorithms whose action-space rule accepts it (PPO and A2C: ``Discrete`` or a flat
``Box``; DQN and PQN: ``Discrete``; SAC and TD3: a flat ``Box`` with finite bounds). The rules are
the ones each algorithm registers (``rljax.agents.register(..., fits=...)``), run on the spaces
alone: building an env and asking for its spaces compiles nothing, so the whole list takes seconds.
An env that cannot be built here is not listed as trainable: gymnax ids that need a download
(:data:`rljax.core.registry.GYMNAX_UNAVAILABLE`) and any env whose construction fails are listed
apart, with the reason. A suite whose package is missing is listed with the extra that installs it.

The command's own time goes to importing gymnax and building each env once. Two things keep it
short (:func:`run`): gymnax imports seaborn and matplotlib's pyplot only for its renderers, which
listing never calls, so the command defers them until first use; and building gymnax's envs runs
small eager JAX operations, each compiled once, so the command uses the experiments' persistent
compilation cache (keyed by what is compiled: nothing it holds can go stale).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import sys
import threading
import types
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ["describe_env", "fitting_algorithms", "list_envs", "add_parser", "run"]


# The package each optional suite imports (rljax.suites.<prefix> needs it); checked without importing it.
_SUITE_PACKAGES = {"craftax": "craftax", "brax": "brax", "navix": "navix", "xminigrid": "xminigrid", "pgx": "pgx",
                   "jaxmarl": "jaxmarl"}


def fitting_algorithms(env: Any, params: Any) -> list[str]:
    """The registered algorithms (:func:`rljax.agents.algorithms`, by name) whose action-space rule
    accepts ``env`` (:func:`rljax.agents.fits_env`; one registered without a rule fits every env)."""
    from rljax import agents

    return [name for name in agents.algorithms() if agents.fits_env(name, env, params)]


def describe_env(name: str) -> tuple[str, str, list[str]]:
    """``(observation space, action space, fitting algorithms)`` of the env ``name`` (built with its
    default arguments; nothing is compiled). Raises whatever building it raises."""
    from rljax.core import registry as env_registry
    from rljax.env import describe_space

    env, params = env_registry.make(name)
    return (describe_space(env.observation_space(params), compact=True),
            describe_space(env.action_space(params), compact=True), fitting_algorithms(env, params))


def _table(names: Sequence[str], out: list[str]) -> list[tuple[str, str]]:
    """Appends one aligned line per buildable env to ``out``; returns ``(name, why)`` of those that failed."""
    rows, failed = [], []
    for name in names:
        try:
            obs, act, algos = describe_env(name)
        except Exception as err:  # noqa: BLE001 - any failure to build means: not trainable here, say why
            failed.append((name, f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:200]))
            continue
        rows.append((name, obs, act, " ".join(algos) or "none of the built-in algorithms"))
    if rows:
        widths = [max(len(r[i]) for r in rows + [("env", "observations", "actions", "")]) for i in range(3)]
        out.append("  ".join(h.ljust(w) for h, w in zip(("env", "observations", "actions"), widths)) + "  algorithms")
        out += ["  ".join(c.ljust(w) for c, w in zip(r[:3], widths)) + "  " + r[3] for r in rows]
    return failed


def list_envs(suite: str | None = None) -> str:
    """The text ``rljax envs [SUITE]`` prints (see the module docstring)."""
    from rljax.core import registry as env_registry

    out: list[str] = []
    if suite is not None:
        if suite not in env_registry.SUITES:
            raise ValueError(f"unknown env suite {suite!r}; suites: {', '.join(sorted(env_registry.SUITES))}")
        if importlib.util.find_spec(_SUITE_PACKAGES[suite]) is None:
            return f"{suite}: not installed; pip install -e \".[{suite}]\" in the rljax checkout"
        failed = _table(env_registry.suite_registered(suite), out)
    else:
        gymnax = [n for n in env_registry.gymnax_registered()
                  if n[len(env_registry.GYMNAX_PREFIX):] not in env_registry.GYMNAX_UNAVAILABLE]
        failed = _table(env_registry.registered() + gymnax, out)
        failed += [(env_registry.GYMNAX_PREFIX + gid, why) for gid, why in env_registry.GYMNAX_UNAVAILABLE.items()]
        out.append("")
        out.append("Optional suites (`rljax envs SUITE` lists a suite's envs with their spaces; docs/suites.md):")
        for prefix in sorted(env_registry.SUITES):
            installed = importlib.util.find_spec(_SUITE_PACKAGES[prefix]) is not None
            state = "installed" if installed else f"not installed; pip install -e \".[{prefix}]\" in the rljax checkout"
            out.append(f"  {prefix}/<id>: {state}")
    if failed:
        out.append("")
        out.append("Cannot be built here (not listed above):")
        out += [f"  {name}: {why}" for name, why in failed]
    return "\n".join(out)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Adds ``envs`` to the ``rljax`` subcommands."""
    summary, examples = __doc__.split("\n\n")[0], __doc__.split("::\n\n")[1].split("\n\n")[0]
    parser = subparsers.add_parser("envs", help="each env's spaces and the algorithms that fit it",
                                   description=f"{summary}\n\n{examples}",
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("suite", nargs="?", metavar="SUITE",
                        help="an optional suite whose envs to list: " + ", ".join(sorted(_SUITE_PACKAGES)))
    return parser


class _Deferred(types.ModuleType):
    """A module that stands in ``sys.modules`` for one not imported yet, and imports it at the
    first use of any attribute it lacks (:func:`_render_imports_deferred`): from then on
    ``sys.modules`` (and the parent package) hold the real module, and this one forwards to it."""

    _lock = threading.Lock()

    def __getattr__(self, attr: str) -> Any:
        with self._lock:
            if sys.modules.get(self.__name__) is self:
                del sys.modules[self.__name__]
            real = importlib.import_module(self.__name__)
        return getattr(real, attr)


RENDER_IMPORTS = ("seaborn", "matplotlib.pyplot")
"""What gymnax imports for its renderers only (:func:`_render_imports_deferred`)."""


@contextlib.contextmanager
def _render_imports_deferred(names: Sequence[str] = RENDER_IMPORTS) -> Iterator[None]:
    """Within it, the modules ``names`` (:data:`RENDER_IMPORTS`), where not imported yet, are
    :class:`_Deferred` stand-ins: gymnax imports them at module level for its renderers, and
    listing envs renders nothing. On leaving, stand-ins still unused leave ``sys.modules`` (the
    modules that took one keep it, and it imports the real module when they use it), so the next
    ``import`` gets the real module. (``importlib.util.LazyLoader`` does not serve: Python 3.11
    loads such a module as soon as an ``import`` statement names it again.)"""
    placed = []
    for name in names:
        if name in sys.modules:
            continue
        spec = importlib.util.find_spec(name)  # imports the parent package (matplotlib of pyplot)
        if spec is None:
            continue
        module = _Deferred(name)
        module.__spec__ = spec
        sys.modules[name] = module
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, module)
        placed.append((name, module))
    try:
        yield
    finally:
        for name, module in placed:
            if sys.modules.get(name) is module:
                del sys.modules[name]
            parent, _, child = name.rpartition(".")
            if parent and getattr(sys.modules.get(parent), child, None) is module:
                delattr(sys.modules[parent], child)


def run(args: argparse.Namespace) -> int:
    """``rljax envs [SUITE]``; returns the exit status (2: an unknown suite). Defers gymnax's
    rendering imports and, unless a cache directory is set already (``JAX_COMPILATION_CACHE_DIR``),
    uses the persistent compilation cache (see the module docstring)."""
    from rljax.cli.process import enable_compilation_cache

    enable_compilation_cache()
    try:
        with _render_imports_deferred():
            text = list_envs(args.suite)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(text)
    return 0
