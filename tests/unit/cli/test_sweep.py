"""``rljax sweep`` and the experiment modules' ``sweep`` (:mod:`rljax.cli.sweep`): the sweep flags as
a :class:`~rljax.training.sweep.SweepSpec`, and each bad input refused before anything is built."""

from __future__ import annotations

import json

import pytest

from rljax.agents.ppo import PPOConfig
from rljax.cli.main import main
from rljax.cli.sweep import sweep_command, sweep_parser


def test_sweep_help_lists_the_algorithms(capsys):
    assert main(["sweep", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: rljax sweep ALGO ") and ["ppo", "PPOConfig"] in [line.split() for line in out.splitlines()]


def test_the_sweep_flags_are_the_runs_plus_the_sweeps(capsys):
    parser = sweep_parser(PPOConfig, dict(total_timesteps=1024), "prog")
    args = parser.parse_args(["--grid", "learning_rate=1e-3,3e-3", "--grid", "env.length=0.5", "--seeds", "3",
                              "--sample", "ent_coef=uniform:0:0.1", "--num-samples", "4", "--pbt-interval", "2"])
    assert args.grid == ["learning_rate=1e-3,3e-3", "env.length=0.5"] and args.seeds == 3
    assert args.sample == ["ent_coef=uniform:0:0.1"] and args.num_samples == 4 and args.pbt_interval == 2
    assert args.total_timesteps == 1024   # the experiment's default
    with pytest.raises(SystemExit):
        parser.parse_args(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--num-devices NUM_DEVICES devices to split the population over" in out
    assert "python -m experiments.ppo_cartpole sweep --grid learning_rate=" in out   # the library's examples


@pytest.mark.parametrize("argv, message", [
    ([], "nothing to sweep: give --grid, --sample or --seeds N > 1"),
    (["--seeds", "0"], "--seeds must be >= 1, got 0"),
    (["--grid", "learning_rate"], "--grid 'learning_rate': expected FIELD=V1,V2,..."),
    (["--sample", "learning_rate=log:0:1"], "need LOW < HIGH (and LOW > 0 for log)"),
    (["--grid", "learning_rate=1e-3,3e-3", "--devices", "2", "--num-devices", "4"],
     "--devices 2 and --num-devices 4 disagree; give --num-devices"),
    (["--grid", "learning_rate=1e-3,3e-3", "--num-devices", "-1"],
     "--num-devices must be >= 1 (or 0: automatic), got -1"),
    (["--grid", "learning_rate=1e-3,3e-3", "--halving-slots", "1"],
     "--halving-slots configure successive halving: add --halving"),
    (["--grid", "learning_rate=1e-3,3e-3", "--halving", "--halving-slots", "3"],
     "--halving-slots 3 is more than the 2 trials"),
    (["--grid", "learning_rate=1e-3,3e-3", "--halving", "--halving-eta", "1"], "--halving-eta must be an integer >= 2"),
    (["--grid", "learning_rate=1e-3,3e-3", "--halving-eta", "3"], "--halving-eta configure successive halving"),
    (["--grid", "learning_rate=1e-3,3e-3", "--halving"], "--halving-slots 2 trains every one of the 2 trials at once"),
    (["--grid", "learning_rate=1e-3,3e-3,1e-2", "--halving", "--pbt-interval", "1", "--pbt", "learning_rate=1e-4:1e-1"],
     "--halving and --pbt are two ways to spend a sweep's budget: give one of them"),
])
def test_bad_sweep_input_exits_2_naming_it(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        sweep_command(PPOConfig, None, argv, "x", prog="rljax sweep ppo")
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "rljax sweep ppo: error: " in err and message in err, err


def test_halving_flags_make_the_spec():
    from rljax.cli.sweep import _new_spec

    parser = sweep_parser(PPOConfig, None, "prog")
    args = parser.parse_args(["--grid", "learning_rate=1e-4,3e-4,1e-3", "--grid", "ent_coef=0,0.01,0.03",
                              "--seeds", "2", "--halving", "--halving-min-steps", "5000", "--halving-seed", "4"])
    args.devices = 0
    spec = _new_spec(args, PPOConfig())
    assert spec.halving.slots == 6 and spec.halving.eta == 3 and spec.halving.min_steps == 5000  # 18 trials / 3
    assert spec.halving.seed == 4 and spec.grid["ent_coef"] == [0.0, 0.01, 0.03]


def test_a_resumed_sweep_refuses_halving_flags(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        sweep_command(PPOConfig, None, ["--resume", str(tmp_path), "--halving", "--halving-slots", "2"], "x", prog="p")
    assert exit_.value.code == 2
    assert "--halving, --halving-slots: a resumed sweep continues the spec it saved" in capsys.readouterr().err


def test_resume_needs_a_sweep_directory(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"env": "CartPole-v1"}))
    with pytest.raises(SystemExit) as exit_:
        sweep_command(PPOConfig, None, ["--resume", str(run)], "x", prog="prog")
    assert exit_.value.code == 2
    assert f"prog: error: --resume {run}: no sweep.json there" in capsys.readouterr().err


def test_the_default_prog_is_the_experiment_modules(capsys):
    with pytest.raises(SystemExit):
        sweep_command(PPOConfig, None, ["--bogus"], "ppo_cartpole")
    assert capsys.readouterr().err.startswith("python -m experiments.ppo_cartpole sweep: error: unrecognized")
