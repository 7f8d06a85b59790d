"""The experiment modules' ``main`` (:func:`rljax.cli.experiment.run_experiment`): a run by default,
a sweep after ``sweep``, each naming the command as the user typed it."""

from __future__ import annotations

import pytest

from rljax.agents.ppo import PPOConfig
from rljax.cli.experiment import run_experiment


@pytest.mark.parametrize("argv, usage", [
    (["--help"], "usage: python -m experiments.ppoconfig "),               # name: the config class, lower case
    (["sweep", "--help"], "usage: python -m experiments.ppoconfig sweep "),
])
def test_the_default_names(argv, usage, capsys):
    with pytest.raises(SystemExit) as exit_:
        run_experiment(PPOConfig, None, argv)
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith(usage)


def test_help_shows_the_description_and_the_experiments_defaults(capsys):
    with pytest.raises(SystemExit):
        run_experiment(PPOConfig, dict(env="Pendulum-v1", total_timesteps=4096), ["--help"],
                       description="PPO on a pendulum.\n\n    python -m experiments.mine --seed 3", name="mine")
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m experiments.mine ")
    assert "PPO on a pendulum.\n\n    python -m experiments.mine --seed 3\n" in out   # kept as written
    words = " ".join(out.split())
    assert "(default: Pendulum-v1)" in words and "(default: 4096)" in words
    assert "python -m experiments.mine sweep --help" in words


def test_a_given_prog_names_the_run_and_the_sweep(capsys):
    with pytest.raises(SystemExit) as exit_:
        run_experiment(PPOConfig, None, ["--bogus"], prog="my-tool", sweep_prog="my-tool sweep")
    assert exit_.value.code == 2
    assert capsys.readouterr().err.startswith("my-tool: error: unrecognized arguments: --bogus")
    with pytest.raises(SystemExit):
        run_experiment(PPOConfig, None, ["sweep", "--bogus"], prog="my-tool", sweep_prog="my-tool sweep")
    assert capsys.readouterr().err.startswith("my-tool sweep: error: unrecognized arguments: --bogus")
