"""``rljax envs [SUITE]`` (:mod:`rljax.cli.envs`): one env described from its spaces alone, the
arguments the command takes, an unknown suite refused naming the known ones, and what keeps the
command quick (gymnax's rendering imports deferred; the whole list: tests/unit/cli/test_main.py)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from rljax.cli import envs as envs_cli
from rljax.cli.envs import describe_env
from rljax.cli.main import main

ROOT = pathlib.Path(__file__).resolve().parents[3]


def test_an_env_is_described_by_its_spaces_and_the_algorithms_that_fit():
    obs, act, algos = describe_env("CartPole-v1")
    assert obs.startswith("Box(4,) float32") and act == "Discrete(2)"
    assert "ppo" in algos and "dqn" in algos and "sac" not in algos      # SAC needs a bounded Box
    obs, act, algos = describe_env("Pendulum-v1")
    assert act == "Box(1,) float32 [-2, 2]" and "sac" in algos and "dqn" not in algos


def test_an_unknown_suite_names_the_suites(capsys):
    assert main(["envs", "gym"]) == 2
    assert capsys.readouterr().err == "error: unknown env suite 'gym'; suites: brax, craftax, jaxmarl, navix, pgx, xminigrid\n"


def test_envs_takes_at_most_one_suite(capsys):
    assert main(["envs", "brax", "navix"]) == 2
    assert "rljax envs: error: unrecognized arguments: navix" in capsys.readouterr().err


def test_envs_help_shows_the_examples(capsys):
    assert main(["envs", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: rljax envs [-h] [SUITE]")
    assert "\n    rljax envs brax       # a suite's envs (craftax, brax, navix, xminigrid, pgx)" in out


def test_a_deferred_module_is_imported_at_its_first_use_and_left_whole(tmp_path, monkeypatch):
    package = tmp_path / "fakeplots"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "pyplot.py").write_text("import os\nos.environ['FAKEPLOTS_LOADED'] = '1'\nvalue = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("FAKEPLOTS_LOADED", raising=False)
    with envs_cli._render_imports_deferred(["fakeplots.pyplot", "no_such_module_here"]):
        import fakeplots.pyplot as early    # what gymnax does at import: not executed yet
        assert "FAKEPLOTS_LOADED" not in os.environ and "no_such_module_here" not in sys.modules
    assert "fakeplots.pyplot" not in sys.modules and not hasattr(sys.modules["fakeplots"], "pyplot")
    assert early.value == 7 and os.environ["FAKEPLOTS_LOADED"] == "1"   # the first use imports it
    import fakeplots.pyplot as late

    assert type(late) is not type(early) and late.value == 7 and sys.modules["fakeplots"].pyplot is late
    for name in ("fakeplots", "fakeplots.pyplot"):
        sys.modules.pop(name, None)


def test_the_command_lists_what_list_envs_lists_without_gymnaxs_renderers():
    """Regression: `rljax envs` took 15 s on a 2-core VM, a third of its CPU time importing seaborn,
    scipy and pandas for gymnax renderers it never calls."""
    code = ("import sys\nfrom rljax.cli.main import main\nassert main(['envs']) == 0\n"
            "print('loaded:', [m for m in ('seaborn', 'scipy.stats', 'pandas', 'matplotlib.pyplot')\n"
            "                  if m in sys.modules])")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    listing, _, loaded = proc.stdout.rpartition("loaded: ")
    assert loaded.strip() == "[]"
    assert listing == envs_cli.list_envs() + "\n"
