"""The algorithm registry: every built-in algorithm registers its action-space rule, an algorithm
registered without one fits every env, and ``rljax envs`` reads the rules from the registry."""

from __future__ import annotations

import dataclasses

import pytest

import rljax
from rljax.agents import algorithms, fits_env, register, unregister
from rljax.cli.envs import fitting_algorithms
from rljax.core.config import RunConfig


def test_each_builtin_rule_matches_its_action_spaces():
    cartpole, pendulum = rljax.make("CartPole-v1"), rljax.make("Pendulum-v1")
    names = ("a2c", "dqn", "impala", "ppo", "pqn", "sac", "td3")
    assert [n for n in names if fits_env(n, *cartpole)] == ["a2c", "dqn", "impala", "ppo", "pqn"]
    assert [n for n in names if fits_env(n, *pendulum)] == ["a2c", "impala", "ppo", "sac", "td3"]
    assert all(algorithms()[n].fits is not None for n in names)
    with pytest.raises(ValueError, match="DQN needs a Discrete action space"):
        algorithms()["dqn"].fits(*pendulum)


def test_an_algorithm_without_a_rule_fits_every_env():
    @dataclasses.dataclass(frozen=True)
    class NoRuleConfig(RunConfig):
        pass

    register("norule", NoRuleConfig, lambda *args: None)
    try:
        assert algorithms()["norule"].fits is None
        assert fits_env("norule", *rljax.make("Pendulum-v1"))
        assert "norule" in fitting_algorithms(*rljax.make("CartPole-v1"))
    finally:
        unregister("norule")
    with pytest.raises(KeyError, match="no algorithm is registered as 'norule'"):
        fits_env("norule", *rljax.make("CartPole-v1"))
    with pytest.raises(TypeError, match="fits must be a function"):
        register("badrule", NoRuleConfig, lambda *args: None, fits="Discrete")
