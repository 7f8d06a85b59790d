"""``rljax resume RUN_DIR`` (:mod:`rljax.cli.resume`): the algorithm and the kind of run come from the
run directory; a directory that names neither is refused with status 2 and a way out."""

from __future__ import annotations

import json

import pytest

from rljax.cli.main import main


def _run_dir(tmp_path, algorithm, sweep=False):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"env": "CartPole-v1"}))
    (run / "manifest.json").write_text(json.dumps({"algorithm": algorithm}))
    if sweep:
        (run / "sweep.json").write_text(json.dumps({}))
    return run


def test_resume_needs_a_run_directory(capsys):
    assert main(["resume"]) == 2
    assert "rljax resume: error: resume needs a run directory" in capsys.readouterr().err


def test_a_missing_run_directory_is_a_usage_error(tmp_path, capsys):
    assert main(["resume", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path / 'nope'} is not a directory; nothing to resume\n"


def test_an_unknown_algorithm_points_to_the_experiment_module(tmp_path, capsys):
    run = _run_dir(tmp_path, "R2D2Config")
    assert main(["resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"cannot tell which algorithm {run} trained" in err and "'R2D2Config'" in err and "'PPOConfig'" in err
    assert f"python -m experiments.<name> --resume {run}" in err


@pytest.mark.parametrize("sweep, flag", [(False, "--checkpoint-every"), (True, "--grid")])
def test_a_run_resumes_as_a_run_and_a_sweep_as_a_sweep(tmp_path, capsys, sweep, flag):
    run = _run_dir(tmp_path, "DQNConfig", sweep=sweep)
    with pytest.raises(SystemExit) as exit_:
        main(["resume", str(run), "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: rljax resume {run}") and "--buffer-size" in out and flag in out
    assert ("--grid" in out) == sweep


def test_resume_help(capsys):
    assert main(["resume", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: rljax resume RUN_DIR [--total-timesteps N]") and "rljax resume runs/cp" in out
