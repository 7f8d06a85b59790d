"""``rljax envs [SUITE]`` (:mod:`rljax.cli.envs`): one env described from its spaces alone, the
arguments the command takes, and an unknown suite refused naming the known ones."""

from __future__ import annotations

from rljax.cli.envs import describe_env
from rljax.cli.main import main


def test_an_env_is_described_by_its_spaces_and_the_algorithms_that_fit():
    obs, act, algos = describe_env("CartPole-v1")
    assert obs.startswith("Box(4,) float32") and act == "Discrete(2)"
    assert "ppo" in algos and "dqn" in algos and "sac" not in algos      # SAC needs a bounded Box
    obs, act, algos = describe_env("Pendulum-v1")
    assert act == "Box(1,) float32 [-2, 2]" and "sac" in algos and "dqn" not in algos


def test_an_unknown_suite_names_the_suites(capsys):
    assert main(["envs", "gym"]) == 2
    assert capsys.readouterr().err == "error: unknown env suite 'gym'; suites: brax, craftax, navix, xminigrid\n"


def test_envs_takes_at_most_one_suite(capsys):
    assert main(["envs", "brax", "navix"]) == 2
    assert "rljax envs: error: unrecognized arguments: navix" in capsys.readouterr().err


def test_envs_help_shows_the_examples(capsys):
    assert main(["envs", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: rljax envs [-h] [SUITE]")
    assert "\n    rljax envs brax       # a suite's envs (craftax, brax, navix, xminigrid)" in out
