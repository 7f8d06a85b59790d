"""``rljax bench`` (:func:`rljax.cli.bench.main`): bad specs exit 2 with one line before anything runs; a good
one runs and continues."""

import json

import pytest

from rljax.cli.bench import main
from tests.support.bench import SPEC


@pytest.fixture
def spec_path(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(SPEC)
    return path


def _refused(capsys, argv, *words):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("rljax bench: error: "), err
    for word in words:
        assert word in err, (word, err)


def test_a_spec_that_cannot_run_exits_2_with_one_line_naming_the_cell_and_value(capsys, spec_path, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(SPEC.replace("num_steps = 64", "num_steps = 64\nlearning_starts = 5"))
    _refused(capsys, [str(bad), "--run-dir", str(tmp_path / "b")], "cell ppo/CartPole-v1", "'learning_starts'")
    bad.write_text(SPEC.replace("[algorithms.ppo]", "[algorithms.sac]\n[algorithms.ppo]"))
    _refused(capsys, [str(bad), "--run-dir", str(tmp_path / "b")], "cell sac/CartPole-v1", "does not fit")
    _refused(capsys, ["nosuite", "--run-dir", str(tmp_path / "b")], "'nosuite'", "classic")
    _refused(capsys, [str(spec_path), "--seeds", "0", "--run-dir", str(tmp_path / "b")], "--seeds", "0")
    _refused(capsys, [str(spec_path), "--envs", "Pendulum-v1", "--run-dir", str(tmp_path / "b")],
             "'Pendulum-v1'", "CartPole-v1")
    assert not (tmp_path / "b").exists()  # refused before anything ran


def test_a_directory_of_another_bench_is_refused_naming_what_differs(capsys, spec_path, tmp_path):
    from rljax.bench.spec import load_spec, narrow

    run_dir = tmp_path / "b"
    run_dir.mkdir()
    (run_dir / "bench.json").write_text(json.dumps(narrow(load_spec(spec_path), seeds=3).to_dict()))
    _refused(capsys, [str(spec_path), "--run-dir", str(run_dir)], "seeds: 3 -> 2")


def test_help_names_the_flags(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for flag in ("--algorithms", "--envs", "--seeds", "--total-timesteps", "--run-dir"):
        assert flag in out


# Slow: by default tests/unit/bench/test_runner.py (the same bench through run_bench) and the usage tests
# here stand for it.
@pytest.mark.slow
def test_a_bench_runs_writes_its_files_and_run_again_continues_without_training(capsys, spec_path, tmp_path):
    run_dir = tmp_path / "b"
    assert main([str(spec_path), "--run-dir", str(run_dir), "--no-tensorboard"]) == 0
    out = capsys.readouterr().out
    assert "cell 1/1 ppo/CartPole-v1: not started" in out and "report in" in out
    for name in ("bench.json", "scores.csv", "report.json", "report.md", "random_scores.json"):
        assert (run_dir / name).exists(), name
    assert main([str(spec_path), "--run-dir", str(run_dir), "--no-tensorboard"]) == 0
    assert "cell 1/1 ppo/CartPole-v1: done" in capsys.readouterr().out
    assert main(["--status", "--run-dir", str(run_dir)]) == 0
    assert "1 cell done, 0 running, 0 left; time left about 0 s" in capsys.readouterr().out
    _refused(capsys, ["--status", "--run-dir", str(tmp_path)], "not a bench directory")
    _refused(capsys, ["--run-dir", str(run_dir)], "give a suite or a spec file")


def test_a_stopped_bench_exits_75_saying_how_to_continue(capsys, monkeypatch, spec_path, tmp_path):
    import rljax.bench.runner as runner

    def stopped(spec, run_dir, **kwargs):  # a worker asked to stop (rljax stop) before its next cell
        raise runner.BenchStopped("stopped on request before cell ppo/CartPole-v1; run the bench again to continue")

    monkeypatch.setattr(runner, "run_bench", stopped)
    run_dir = tmp_path / "b"
    assert main([str(spec_path), "--run-dir", str(run_dir), "--quiet"]) == 75
    assert f"run the bench again to continue: rljax bench {spec_path} --run-dir {run_dir}" in capsys.readouterr().err


def test_the_tracker_flags_reach_every_cells_sweep(monkeypatch, spec_path, tmp_path):
    import rljax.bench.runner as runner

    seen = {}
    monkeypatch.setattr(runner, "run_bench", lambda spec, run_dir, **kwargs: seen.update(kwargs) or {})
    assert main([str(spec_path), "--run-dir", str(tmp_path / "b"), "--wandb", "proj", "--mlflow", "file:/x",
                 "--quiet"]) == 0
    assert (seen["wandb"], seen["mlflow"], seen["tensorboard"]) == ("proj", "file:/x", True)
