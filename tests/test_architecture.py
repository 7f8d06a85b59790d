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


def test_cli_sits_on_top():
    """Nothing in the library imports the command line; the sweep sits beside it."""
    graph = _graph()
    assert not [m for m, deps in graph.items() if "rljax.cli.main" in deps]
    assert "rljax.cli.main" not in graph["rljax.training.sweep"]


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
                             quiet=True, handle_signals=False)
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


def test_the_adding_an_algorithm_example_named_by_the_design_doc_trains():
    """The module that docs/design.md's "Adding an algorithm" points to registers itself and trains."""
    import importlib
    import re

    text = (ROOT / "docs" / "design.md").read_text()
    section = text[text.index("## Adding an algorithm"):]
    path = re.search(r"`(rljax/agents/\w+\.py)`", section).group(1)
    name = path[:-3].replace("/", ".")
    if not (ROOT / path).exists():
        pytest.skip(f"{path} is not in this tree yet")
    module = importlib.import_module(name)
    config_cls = next(entry.config_cls for entry in rljax.algorithms().values()
                      if entry.config_cls.__module__ == module.__name__)
    result = rljax.train(config_cls(env="CartPole-v1", num_envs=4, total_timesteps=400), quiet=True,
                         handle_signals=False)
    assert result.rows[-1]["env_steps"] == 400
    assert all(np.isfinite(v) for k, v in result.rows[-1].items() if k.endswith("_loss"))
