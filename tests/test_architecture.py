"""The library's shape: layering without cycles, no private imports across modules, short functions,
a documented public API, and an env registry that a user's own ``envs`` package cannot shadow."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import rljax

ROOT = pathlib.Path(__file__).resolve().parent.parent
LIBRARY = ROOT / "rljax"
MAX_FUNCTION_LINES = 80


def _modules() -> dict[str, ast.Module]:
    out = {}
    for path in sorted(LIBRARY.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = ast.parse(path.read_text(), filename=str(path))
    return out


def _imports(name: str, tree: ast.Module) -> list[tuple[str, list[str]]]:
    """``(module, names)`` of every import in ``tree`` (at any depth: lazy imports count too)."""
    is_package = (LIBRARY.parent / name.replace(".", "/") / "__init__.py").exists()
    package = name if is_package else name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                module = ".".join(base + ([module] if module else []))
            found.append((module, [alias.name for alias in node.names]))
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, tree in modules.items():
        for module, names in _imports(name, tree):
            targets = [module] + [f"{module}.{n}" for n in names]
            for target in targets:
                if target in modules and target != name and target != "rljax":
                    graph[name].add(target)
    return graph


def test_no_import_cycles():
    graph = _graph()
    cycles = []

    def visit(node, path, on_path, done):
        on_path.add(node)
        path.append(node)
        for nxt in sorted(graph[node]):
            if nxt in on_path:
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in done:
                visit(nxt, path, on_path, done)
        path.pop()
        on_path.discard(node)
        done.add(node)

    done: set[str] = set()
    for start in sorted(graph):
        if start not in done:
            visit(start, [], set(), done)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


# What each package may import from rljax (besides itself), as its __init__ docstring says:
# env < core < runtime < {agents, store} < policy < training < cli; suites and host beside core, the
# actor-learner path (host envs) beside training. The most
# specific entry names a module's package (rljax.training.hooks is inside rljax.training).
_BELOW_POLICY = {"rljax.env", "rljax.core", "rljax.runtime", "rljax.agents", "rljax.store"}
ALLOWED_IMPORTS: dict[str, set[str]] = {
    "rljax.env": set(),
    "rljax.core": {"rljax.env"},
    "rljax.suites": {"rljax.env", "rljax.core"},
    "rljax.host": {"rljax.env"},
    "rljax.actorlearner": {"rljax.env", "rljax.core", "rljax.runtime", "rljax.agents", "rljax.host", "rljax.store",
                           "rljax.training"},
    "rljax.runtime": {"rljax.env", "rljax.core"},
    "rljax.agents": {"rljax.env", "rljax.core", "rljax.runtime"},
    "rljax.store": {"rljax.env", "rljax.core", "rljax.runtime"},
    "rljax.policy": _BELOW_POLICY | {"rljax.host"},  # a host-env run's policy is evaluated on host envs
    "rljax.training": _BELOW_POLICY | {"rljax.policy", "rljax.suites", "rljax.training"},
    "rljax.training.hooks": _BELOW_POLICY | {"rljax.policy", "rljax.suites", "rljax.training"},
    # A bench runs sweeps and reports statistics over their runs: beside the actor-learner path.
    "rljax.bench": _BELOW_POLICY | {"rljax.policy", "rljax.suites", "rljax.training", "rljax.host", "rljax.bench"},
    # Serving a policy over the network: a trained policy (rljax.load) behind the env server's framing.
    "rljax.serve": _BELOW_POLICY | {"rljax.policy", "rljax.host"},
    "rljax.cli": {"rljax.env", "rljax.core", "rljax.runtime", "rljax.agents", "rljax.store", "rljax.policy",
                  "rljax.suites", "rljax.training", "rljax.host", "rljax.actorlearner", "rljax.bench", "rljax.serve",
                  "rljax.cli"},
}
FORBIDDEN_IMPORTS: dict[str, set[str]] = {
    "rljax.training.hooks": {"rljax.training.loop"},  # the loop calls its hooks, never the other way round
    # The actor-learner path shares the JAX path's run options and signal handling, not its loop.
    "rljax.actorlearner": {"rljax.training.loop", "rljax.training.program", "rljax.training.population",
                           "rljax.training.sweep"},
}
"""Modules a package may not import even though ALLOWED_IMPORTS admits the package they are in."""


def _package_of(module: str) -> str | None:
    """The most specific entry of :data:`ALLOWED_IMPORTS` that ``module`` is (or is inside), or None."""
    matches = [p for p in ALLOWED_IMPORTS if module == p or module.startswith(p + ".")]
    return max(matches, key=len) if matches else None


def _rljax_targets(module: str, names: list[str], known: set[str]) -> list[str]:
    """The rljax modules an import statement reaches: ``from rljax import core`` reaches rljax.core."""
    if not (module == "rljax" or module.startswith("rljax.")):
        return []
    subs = [f"{module}.{n}" for n in names if f"{module}.{n}" in known]
    return subs or [module]


def test_every_package_imports_only_the_layers_below_it():
    """Each import (lazy ones included) against the package table, which mirrors the packages'
    docstrings; a failure names the module, what it imports and what its package may import."""
    modules = _modules()
    known = set(modules)
    assert {m for m in known if m.count(".") == 1} <= set(ALLOWED_IMPORTS), \
        "a new top-level package needs its row in ALLOWED_IMPORTS"
    offenders = []
    for name, tree in modules.items():
        own = _package_of(name)
        if own is None:  # rljax/__init__.py: the public API, loaded lazily from every layer
            continue
        for module, names in _imports(name, tree):
            for target in _rljax_targets(module, names, known):
                target_package = _package_of(target)
                if target_package is None or target_package == own or target_package.startswith(own + "."):
                    continue
                allowed = ALLOWED_IMPORTS[own]
                if not any(target_package == a or target_package.startswith(a + ".") for a in allowed):
                    offenders.append(f"{name} imports {target} ({own} may import only "
                                     f"{', '.join(sorted(allowed)) or 'nothing in rljax'})")
            for target in _rljax_targets(module, names, known):
                for forbidden in FORBIDDEN_IMPORTS.get(own, ()):
                    if target == forbidden or target.startswith(forbidden + "."):
                        offenders.append(f"{name} imports {target} ({own} may not import {forbidden})")
    assert not offenders, "imports from a higher layer:\n" + "\n".join(sorted(set(offenders)))


@pytest.mark.parametrize("package", sorted(ALLOWED_IMPORTS))
def test_the_import_table_matches_the_package_docstrings(package):
    """A package docstring's ``May import ...`` paragraph names exactly the table's packages."""
    import importlib
    import re

    doc = importlib.import_module(package).__doc__ or ""
    assert "May import" in doc, f"{package}'s docstring has no 'May import' paragraph"
    paragraph = doc[doc.index("May import"):].split("\n\n")[0]
    named = set(re.findall(r":mod:`(rljax[\w.]*)`", paragraph))
    assert named == ALLOWED_IMPORTS[package] - {package}, paragraph


def test_only_the_env_contract_sits_directly_in_the_package():
    loose = sorted(p.name for p in LIBRARY.glob("*.py") if p.name not in ("__init__.py", "env.py"))
    assert not loose, f"modules directly in rljax/ (put them in their layer's package): {loose}"


def _test_module_for(path: pathlib.Path) -> pathlib.Path:
    """``rljax/<pkg>/<mod>.py`` -> ``tests/unit/<pkg>/test_<mod>.py`` (a leading underscore dropped)."""
    relative = path.relative_to(LIBRARY)
    return ROOT / "tests" / "unit" / relative.parent / f"test_{relative.stem.lstrip('_')}.py"


def test_every_library_module_has_its_unit_test_module():
    missing = [f"{path.relative_to(ROOT)} -> {_test_module_for(path).relative_to(ROOT)}"
               for path in sorted(LIBRARY.rglob("*.py"))
               if path.name != "__init__.py" and not _test_module_for(path).is_file()]
    assert not missing, "library modules without their unit test module:\n" + "\n".join(missing)


def test_cli_sits_on_top():
    """Nothing below the command line imports it."""
    graph = _graph()
    assert not [(m, d) for m, deps in graph.items() for d in deps
                if d.startswith("rljax.cli") and not m.startswith("rljax.cli")]


def test_no_module_imports_a_private_name_of_another():
    offenders = []
    for name, tree in _modules().items():
        for module, names in _imports(name, tree):
            if module.startswith("rljax") and module != name:
                offenders += [f"{name} imports {module}.{n}" for n in names if n.startswith("_") and n != "__future__"]
    assert not offenders, offenders


def test_the_library_never_imports_the_top_level_envs_package():
    offenders = [name for name, tree in _modules().items()
                 for module, _ in _imports(name, tree) if module == "envs" or module.startswith("envs.")]
    assert not offenders, offenders


def test_no_function_in_the_library_is_longer_than_80_lines():
    long = []
    for path in sorted(LIBRARY.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, long


@pytest.mark.parametrize("name", rljax.__all__)
def test_public_api_resolves_and_is_documented(name):
    value = getattr(rljax, name)
    assert (getattr(value, "__doc__", None) or "").strip(), f"rljax.{name} has no docstring"


def test_unknown_public_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'trian'"):
        rljax.trian  # noqa: B018


def test_a_users_own_envs_package_does_not_break_training(tmp_path):
    """A project with its own top-level ``envs`` package (first on sys.path, imported first)
    still trains on rljax's bundled environments, and its package is left alone."""
    user = tmp_path / "project"
    (user / "envs").mkdir(parents=True)
    (user / "envs" / "__init__.py").write_text("MINE = True\n")
    script = textwrap.dedent("""
        import envs
        import rljax
        assert envs.MINE and not hasattr(envs, "make")
        env, params = rljax.make("CartPole-v1")
        result = rljax.train(rljax.PPOConfig(env="CartPole-v1", total_timesteps=512, num_envs=4, num_steps=128),
                             options=rljax.RunOptions(quiet=True, handle_signals=False))
        assert len(result.rows) == 1 and result.rows[0]["env_steps"] == 512
        import sys
        assert sys.modules["envs"] is envs
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=user, env={"PYTHONPATH": str(user), "PATH": ""},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok")


def test_bundled_envs_package_and_library_share_one_registry():
    import envs

    assert envs.make is rljax.make
    assert "CartPole-v1" in rljax.registered_envs() and "CartPole-v1" in envs.registered()


def test_a2c_the_design_docs_adding_an_algorithm_example_is_one_module_that_trains():
    """docs/design.md's "Adding an algorithm" points at rljax/agents/a2c.py: one module, found by the
    registry's scan (no other file names it), that trains through the registry."""
    text = (ROOT / "docs" / "design.md").read_text()
    assert "rljax/agents/a2c.py" in text[text.index("## Adding an algorithm"):]
    naming = [name for name, tree in _modules().items() if name != "rljax.agents.a2c"
              for module, names in _imports(name, tree) if module == "rljax.agents.a2c" or "a2c" in names]
    assert not naming, naming
    from rljax.agents.a2c import A2CConfig

    assert rljax.algorithms()["a2c"].config_cls is A2CConfig
    result = rljax.train(A2CConfig(env="CartPole-v1", num_envs=4, num_steps=5, hidden_sizes=(16,),
                                   total_timesteps=400), options=rljax.RunOptions(quiet=True, handle_signals=False))
    assert result.rows[-1]["env_steps"] == 400
    assert all(np.isfinite(result.rows[-1][k]) for k in ("policy_loss", "value_loss", "entropy"))
