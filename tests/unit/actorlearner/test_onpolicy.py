"""PQN on host envs: its own update behind the actors, deterministic at lag 0, the epsilon schedule
of the rollouts, a resume to the same bits, the command line, and algorithms that need what their
behaviour policy records refused by name."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rljax.actorlearner.learner import HostOptions, train_host
from rljax.actorlearner.onpolicy import onpolicy_algorithm
from rljax.actorlearner.run import run_host
from rljax.agents.a2c import A2CConfig
from rljax.agents.pqn import PQNConfig
from rljax.env import Box, Discrete
from rljax.host.base import HostSpec
from rljax.host.sources import make_host_env
from rljax.training.options import RunOptions
from tests.support.runs import leaves

PQN = PQNConfig(env="gymnasium/CartPole-v1", num_envs=4, num_steps=8, total_timesteps=4 * 8 * 8, num_minibatches=2,
                num_epochs=1, hidden_sizes=(16,), exploration_fraction=0.5, anneal_lr=False)
SYNC = HostOptions(max_policy_lag=0)
MEASURED = ("sps", "wall_time_s", "host/")


def _host(config):
    return lambda actor: make_host_env(config.env, config.num_envs)


def _strip(rows):
    return [{k: v for k, v in r.items() if not k.startswith(MEASURED)} for r in rows]


def test_pqn_at_lag_0_is_deterministic_and_follows_the_epsilon_schedule_of_its_rollouts():
    a = train_host(PQN, _host(PQN), SYNC)
    b = train_host(PQN, _host(PQN), SYNC)
    assert all(np.array_equal(x, y) for x, y in zip(leaves(a.params), leaves(b.params)))
    assert _strip(a.rows) == _strip(b.rows)
    # epsilon decays linearly from epsilon_start to epsilon_end over the first half of the 8 updates, then stays
    start, end = PQN.epsilon_start, PQN.epsilon_end
    expected = [start + min(u / 4, 1.0) * (end - start) for u in range(8)]
    np.testing.assert_allclose([r["epsilon"] for r in a.rows], expected, rtol=1e-6)
    assert all(np.isfinite(r["td_loss"]) and r["td_loss"] > 0 for r in a.rows)


def test_a_pqn_run_resumes_to_the_same_bits(tmp_path):
    """Cut after 3 updates by a shorter run, with a schedule that does not depend on the run's length
    (epsilon at its end from the start), and resumed to 8: the same bits as a run never stopped."""
    config = PQNConfig(**{**PQN.__dict__, "exploration_fraction": 0.0})
    whole = run_host(config, RunOptions(run_dir=tmp_path / "whole", quiet=True), SYNC)
    cut = PQNConfig(**{**config.__dict__, "total_timesteps": 4 * 8 * 3})
    run_host(cut, RunOptions(run_dir=tmp_path / "cut", quiet=True), SYNC)
    resumed = run_host(config, RunOptions(run_dir=tmp_path / "cut", resume=True, quiet=True))
    assert resumed.updates == 8
    for x, y in zip(leaves((whole.params, whole.opt_state)), leaves((resumed.params, resumed.opt_state))):
        np.testing.assert_array_equal(x, y)


def test_pqn_from_the_command_line_trains_and_evaluates(tmp_path, capsys):
    from rljax.cli.main import main

    run = tmp_path / "run"
    assert main(["train", "pqn", "--env", "gymnasium/CartPole-v1", "--num-envs", "4", "--num-steps", "8",
                 "--num-minibatches", "2", "--hidden-sizes", "8", "--total-timesteps", "96", "--num-actors", "2",
                 "--run-dir", str(run), "--quiet", "--no-compile-cache"]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["env_steps"] == 96 and "epsilon" in rows[-1]
    assert main(["eval", str(run), "--episodes", "2"]) == 0
    assert "eval gymnasium/CartPole-v1 pqn step 96" in capsys.readouterr().out


def test_an_algorithm_that_learns_from_what_its_behaviour_records_is_refused_by_name():
    spec = HostSpec(num_envs=4, observation_space=Box(-1.0, 1.0, (4,), np.float32), action_space=Discrete(2))
    with pytest.raises(ValueError, match="A2C's learning reads what its behaviour policy records"):
        onpolicy_algorithm(A2CConfig(env="gymnasium/CartPole-v1", num_envs=4), spec, 10)


def test_a_recurrent_pqn_is_refused_on_host_envs():
    with pytest.raises(ValueError, match="memory='gru'"):
        train_host(PQNConfig(**{**PQN.__dict__, "memory": "gru"}), _host(PQN), SYNC)
