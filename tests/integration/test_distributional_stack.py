"""The distributional family through the whole stack: a Rainbow run (C51's head with double, dueling,
n-step, prioritised replay and noisy layers, whose noise is drawn from the train state's keys) stopped
and resumed is bit-identical to the uninterrupted run, a sweep member of it equals its single run, PBT
evolves it from the command line, and D4PG and QR-DQN resume bit-identically too (slow). Loading,
evaluation and export of each are in the shared tiny runs' tests (tests/conftest.py)."""

from __future__ import annotations

import dataclasses
import json

import jax
import numpy as np
import pytest

import rljax
from rljax.agents.d4pg import D4PGConfig
from rljax.agents.qrdqn import QRDQNConfig
from rljax.store.tracking import read_chunks
from rljax.training.sweep import SweepSpec, run_sweep
from tests.conftest import _tiny_runs
from tests.support.runs import assert_same_bits, leaves, strip

SMALL = dict(env="CartPole-v1", total_timesteps=4 * 2 * 48, updates_per_chunk=12, num_envs=4, num_steps=2,
             batch_size=16, buffer_size=64, learning_starts=32, hidden_sizes=(16,))
RESUME = {
    # The shared tiny Rainbow run's config (tests/conftest.py), so its chunk program is compiled once per suite.
    "rainbow": _tiny_runs()["c51-rainbow"],
    "qrdqn-noisy": QRDQNConfig(**SMALL, num_quantiles=8, noisy=True, n_step=2),
    "d4pg": D4PGConfig(total_timesteps=4 * 48, updates_per_chunk=12, num_envs=4, batch_size=16, buffer_size=128,
                       learning_starts=32, hidden_sizes=(16,), num_atoms=11, prioritized=True, num_critics=2),
}


# QR-DQN's and D4PG's with --slow only (by default Rainbow's, whose noise, PER and n-step cover the skeleton's
# state, and the losses by hand of tests/unit/agents/test_qrdqn.py and test_d4pg.py).
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow if n != "rainbow" else ()) for n in RESUME])
def test_a_run_stopped_and_resumed_is_bit_identical(name, tmp_path):
    config = RESUME[name]
    full = rljax.train(config, options=rljax.RunOptions(run_dir=tmp_path / "full", quiet=True, checkpoint_every=1))
    part = rljax.train(config, options=rljax.RunOptions(run_dir=tmp_path / "cut", quiet=True, checkpoint_every=1,
                                                        on_chunk=lambda c, state, row: c == 1))
    assert part.preempted == "on_chunk" and len(part.rows) == 2 < len(full.rows)
    rest = rljax.train(config, options=rljax.RunOptions(run_dir=tmp_path / "cut", quiet=True, resume=True,
                                                        checkpoint_every=1))
    assert_same_bits(full.state, rest.state)
    assert strip(read_chunks(tmp_path / "full")) == strip(read_chunks(tmp_path / "cut"))
    spread = "quantile_spread_mean" if name.startswith("qrdqn") else "z_std_mean"
    assert all(np.isfinite(r[spread]) and r[spread] > 0 for r in full.rows[1:])


# Slow: by default tests/unit/training/test_sweep.py's PPO member and the Rainbow resume above (the noise's keys
# are the state's, which a sweep vmaps like every other leaf) stand for it.
@pytest.mark.slow
def test_a_rainbow_sweep_member_equals_its_single_run():
    config = RESUME["rainbow"]
    result, members, _ = run_sweep(config, SweepSpec(grid={"learning_rate": [1e-3, 3e-3]}, seeds=(0, 1)), quiet=True)
    m = members[3]
    single = rljax.train(dataclasses.replace(config, learning_rate=m.values["learning_rate"], seed=m.seed),
                         options=rljax.RunOptions(quiet=True))
    for a, b in zip(leaves(single.agent.params_of(single.state)), leaves(result.agent.params_of(result.state))):
        np.testing.assert_allclose(a, b[3], atol=1e-5)
    assert [r["td_loss"] for r in single.rows] == pytest.approx([r["td_loss"] for r in result.member_rows[3]], rel=1e-4)


# Slow: by default tests/unit/training/hooks/test_pbt.py (any algorithm's sweepable fields) stands for it.
@pytest.mark.slow
def test_pbt_evolves_a_c51_population_from_the_command_line(tmp_path):
    from rljax.cli.main import main

    run = tmp_path / "pbt"
    code = main(["sweep", "c51", "--env", "CartPole-v1", "--total-timesteps", "768", "--updates-per-chunk", "12",
                 "--num-envs", "4", "--num-steps", "2", "--batch-size", "16", "--buffer-size", "64",
                 "--learning-starts", "32", "--hidden-sizes", "16", "--num-atoms", "11", "--noisy",
                 "--seeds", "4", "--eval-interval", "2", "--eval-episodes", "2", "--pbt-interval", "2",
                 "--pbt", "learning_rate=1e-4:1e-2", "--quiet", "--run-dir", str(run)])
    assert code == 0
    events = [json.loads(line) for line in (run / "pbt.jsonl").read_text().splitlines()]
    assert events and all("learning_rate" in json.dumps(e) for e in events)


def test_a_loaded_noisy_policy_explores_with_drawn_noise_and_is_greedy_on_its_mean(tiny_run):
    # The tiny Rainbow run (noisy layers, epsilon 0): exploring, policy.act draws the network noise as the
    # behaviour policy does in training (so actions change with the key); greedy, it acts on the noise's mean.
    policy = rljax.load(tiny_run("c51-rainbow")[0])
    obs = (np.random.default_rng(0).normal(size=(256, 4)) * 0.5).astype(np.float32)
    greedy = np.asarray(policy.act(obs))
    explored = [np.asarray(policy.act(obs, jax.random.key(k), deterministic=False)) for k in range(8)]
    assert any((e != greedy).any() for e in explored), "epsilon is 0: only the drawn noise can change an action"
    np.testing.assert_array_equal(np.asarray(policy.act(obs, jax.random.key(3), deterministic=False)), explored[3])
    np.testing.assert_array_equal(np.asarray(policy.act(obs)), greedy)
