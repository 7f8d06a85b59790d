"""``rljax train`` (:mod:`rljax.cli.train`): the algorithm argument, its help, the checks on
``--resume`` made before anything is built, and the summary line of a finished run."""

from __future__ import annotations

import json
import types

import pytest

from rljax.agents.dqn import DQNConfig
from rljax.agents.ppo import PPOConfig
from rljax.cli.main import main
from rljax.cli.train import done_line, train_command


def test_train_help_lists_the_algorithms(capsys):
    # `rljax train --help` used to fail: "train needs an algorithm ... got ['--help']".
    assert main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: rljax train ALGO ")
    lines = out.splitlines()
    for name, cls in [("a2c", "A2CConfig"), ("dqn", "DQNConfig"), ("impala", "IMPALAConfig"), ("ppo", "PPOConfig"),
                      ("pqn", "PQNConfig"), ("sac", "SACConfig"), ("td3", "TD3Config")]:
        assert [name, cls] in [line.split() for line in lines]


@pytest.mark.parametrize("argv, got", [(["train"], "[]"), (["train", "r2d2"], "['r2d2']")])
def test_train_without_a_known_algorithm_is_a_usage_error(argv, got, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"rljax train: error: train needs an algorithm, one of ['a2c', 'alphazero', 'c51', 'd4pg', 'dqn', 'impala', 'ippo', 'mappo', 'muzero', 'ppo', 'pqn', 'qrdqn', 'sac', 'td3']; got {got}" in err


def test_an_algorithms_help_is_its_config_parser(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["train", "dqn", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: rljax train dqn ") and "--buffer-size" in out and "rljax sweep dqn --help" in out


def _run_dir(tmp_path, algorithm):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"env": "CartPole-v1"}))
    (run / "manifest.json").write_text(json.dumps({"algorithm": algorithm}))
    return run


@pytest.mark.parametrize("config_cls, extra, message", [
    (DQNConfig, [], "--resume {run}: that run trained PPOConfig, not DQNConfig"),
    (PPOConfig, ["--run-dir", "elsewhere"], "--resume {run} continues that directory; do not also pass --run-dir "
                                             "elsewhere"),
])
def test_resume_is_checked_against_the_run_directory(tmp_path, capsys, config_cls, extra, message):
    run = _run_dir(tmp_path, "PPOConfig")
    with pytest.raises(SystemExit) as exit_:
        train_command(config_cls, None, ["--resume", str(run), *extra], name="x", prog="prog", sweep_prog="prog sweep")
    assert exit_.value.code == 2
    assert f"prog: error: {message.format(run=run)}" in capsys.readouterr().err


def test_resume_of_a_missing_directory_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        train_command(PPOConfig, None, ["--resume", str(tmp_path / "nope")], name="x", prog="prog",
                      sweep_prog="prog sweep")
    assert exit_.value.code == 2
    assert f"prog: error: --resume {tmp_path / 'nope'}: " in capsys.readouterr().err


def test_an_invalid_config_is_a_usage_error_naming_the_field(capsys):
    with pytest.raises(SystemExit) as exit_:
        train_command(PPOConfig, None, ["--num-envs", "0"], name="x", prog="prog", sweep_prog="prog sweep")
    assert exit_.value.code == 2
    assert "num_envs" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["train", "ppo", "--env", "CartPol-v1"],
    ["train", "ppo", "--env-param", "gravity=x"],
    ["train", "ppo", "--env-kwarg", "foo=1"],
    ["train", "ppo", "--encoder", "cnn"],
    ["train", "dqn", "--env", "Pendulum-v1"],
    ["sweep", "ppo", "--env", "CartPol-v1", "--seeds", "2"],
])
def test_a_failed_start_leaves_no_run_directory(argv, tmp_path, monkeypatch, capsys):
    # These used to exit 2 and leave runs/<name>/.lock behind.
    monkeypatch.chdir(tmp_path)
    assert main([*argv, "--run-dir", "runs/r"]) == 2
    assert "error: " in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_a_negative_value_reaches_the_range_check(capsys):
    with pytest.raises(SystemExit) as exit_:   # the algorithm's parser exits as an experiment module's does
        main(["train", "ppo", "--learning-rate", "-1e-3"])
    assert exit_.value.code == 2
    assert "rljax train ppo: error: learning_rate must be > 0, got -0.001" in capsys.readouterr().err


def test_the_done_line_adds_up_what_ran():
    # 2 chunks logged x 3 updates per chunk x (600 env steps / 6 updates) = 600 env steps in 2 s: 300 steps/s.
    timings = dict(total_env_steps=600, num_updates=6, updates_per_chunk=3, compile_s=1.25, compute_s=2.0,
                   logging_s=0.125, checkpoint_s=0.5, eval_s=0.75)
    rows = [{"episode_return_mean": 20.0}, {"episode_return_mean": 23.0}]
    result = types.SimpleNamespace(timings=timings, rows=rows, final_return=21.5, run_dir="runs/x",
                                   final_eval={"eval/return_mean": 30.0, "eval/episodes": 8})
    # The return says what it averages: it differs from the last progress line's (that chunk's alone).
    assert done_line(result) == ("done: 600 env steps, return 21.50 (mean of the last 2 chunks), greedy eval 30.00 over 8 episodes, compile 1.2s, "
                                 "compute 2.0s (300 steps/s), logging 0.12s, checkpoints 0.50s, evaluation 0.8s; "
                                 "run directory: runs/x")
    result.final_eval, result.run_dir = None, None
    rows[0]["episode_return_mean"] = None
    assert done_line(result) == ("done: 600 env steps, return 21.50 (the last chunk's episodes), compile 1.2s, "
                                 "compute 2.0s (300 steps/s), logging 0.12s, checkpoints 0.50s")
    result.rows, result.final_return = [{}, {}], float("nan")
    assert done_line(result).startswith("done: 600 env steps, return nan (no episode ended), compile")
