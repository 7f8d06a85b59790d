"""PQN: the loss by hand (its Q(lambda) targets: tests/unit/core/test_returns.py), the shared training pieces, probes (action values,
bootstrapping through truncation), config validation, CartPole end to end, a sweep, and resume."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rljax
from experiments import pqn_cartpole
from rljax.agents.base import epochs_of_minibatches, gradient_step, make_optimizer
from rljax.agents.pqn import PQNBatch, PQNConfig, pqn_loss
from rljax.core.networks import QNetwork
from rljax.training.sweep import SweepSpec, run_sweep
from rljax.store.tracking import read_chunks
from tests.support.endless import TRUE_VALUE, WRONG_VALUE, Endless
from tests.support.runs import assert_same_bits, strip

def _linear_q(w, obs):
    return obs @ w  # one-hot observations pick rows of W


def test_loss_and_gradient_step_by_hand():
    w = jnp.array([[1.0, 2.0], [3.0, 0.0]])
    batch = PQNBatch(obs=jnp.eye(2), action=jnp.array([1, 0]), target=jnp.array([0.0, 5.0]))
    # Q(s0, 1) = 2 vs 0 and Q(s1, 0) = 3 vs 5: td = [2, -2], loss = 0.5 * mean(4, 4) = 2.
    loss, m = pqn_loss(w, _linear_q, batch)
    np.testing.assert_allclose([loss, m["q_mean"], m["td_abs_mean"]], [2.0, 2.5, 2.0])
    # dL/dW = td_i / N at the taken entries: +1 at W[0, 1], -1 at W[1, 0]; norm sqrt(2), clipped to 0.5.
    tx = make_optimizer(0.1, 0.5)
    new_w, opt_state, aux, norm = gradient_step(pqn_loss, w, tx.init(w), tx, _linear_q, batch)
    np.testing.assert_allclose(norm, math.sqrt(2.0), rtol=1e-6)
    np.testing.assert_allclose(aux["td_loss"], 2.0)
    # Adam's first step moves each entry with a gradient by -lr * sign(g); its first moment holds
    # (1 - b1) times the *clipped* gradient.
    np.testing.assert_allclose(new_w, [[1.0, 1.9], [3.1, 0.0]], rtol=1e-6)
    np.testing.assert_allclose(opt_state[1].mu, 0.1 * 0.5 / math.sqrt(2.0) * np.array([[0, 1], [-1, 0]]), atol=1e-7)


def test_epochs_of_minibatches_visits_every_sample_once_per_epoch():
    batch = {"x": jnp.arange(12.0)}

    def step(carry, mb):
        return carry + jnp.sum(mb["x"]), {"size": jnp.float32(mb["x"].shape[0]), "sum": jnp.sum(mb["x"])}

    total, m = epochs_of_minibatches(step, jnp.float32(0), batch, jax.random.key(1), num_epochs=3, num_minibatches=4)
    assert float(total) == 3 * 66.0 and float(m["size"]) == 3.0 and float(m["sum"]) == 66.0 / 4


@pytest.mark.parametrize("kw, match", [
    (dict(num_envs=4, num_steps=10, num_minibatches=3), r"4 \* 10 / 1 = 40 is not divisible by num_minibatches=3"),
    (dict(q_lambda=1.5), r"q_lambda must be in \[0, 1\], got 1.5"),
    (dict(epsilon_end=-0.1), r"epsilon_end must be in \[0, 1\]"),
    (dict(reward_scale=0.0), "reward_scale must be > 0, got 0.0"),
    (dict(activation="swoosh"), "activation='swoosh' is not one of"),
    (dict(num_epochs=0), "num_epochs must be a positive integer, got 0"),
    (dict(total_timesteps=100), "total_timesteps=100 is less than one update"),
    (dict(layer_norm=1), "layer_norm must be a bool"),
])
def test_config_validation_names_the_values(kw, match):
    with pytest.raises(ValueError, match=match):
        PQNConfig(**kw)


def test_pqn_rejects_box_actions():
    with pytest.raises(ValueError, match="Discrete action space.*use SAC"):
        rljax.train(PQNConfig(env="Pendulum-v1", total_timesteps=4096), options=rljax.RunOptions(quiet=True))


def test_layer_norm_params():
    obs = jnp.zeros((1, 3))
    plain = jax.jit(QNetwork(2, (8, 8)).init)(jax.random.key(0), obs)["params"]["torso"]
    normed = jax.jit(QNetwork(2, (8, 8), layer_norm=True).init)(jax.random.key(0), obs)["params"]["torso"]
    assert sorted(plain) == ["hidden_0", "hidden_1"]
    assert sorted(normed) == ["hidden_0", "hidden_1", "layer_norm_0", "layer_norm_1"]
    for name in plain:  # the Dense layers draw the same weights either way
        np.testing.assert_array_equal(plain[name]["kernel"], normed[name]["kernel"])


# One hidden layer of 64: a chunk program compiles ~20 % faster than with two of 32, and the probes' values come out
# as exact (within 0.002 of 0.1 on seeds 0-3).
PROBE = dict(num_envs=16, num_steps=8, num_epochs=2, num_minibatches=2, hidden_sizes=(64,), learning_rate=3e-3,
             reward_scale=1.0, gamma=0.5, q_lambda=0.5, epsilon_end=0.2, exploration_fraction=0.3, anneal_lr=False,
             total_timesteps=16 * 8 * 150, updates_per_chunk=50)


def _q(result, cfg, obs):
    net = QNetwork(2, cfg.hidden_sizes, cfg.activation, layer_norm=cfg.layer_norm)
    return np.asarray(net.apply(result.state.params, jnp.asarray(obs, jnp.float32)))


def test_action_obs_probe_learns_action_values():
    # One step, obs +-1; action (obs + 1) / 2 pays 1, the other 0: Q(-1) = [1, 0], Q(+1) = [0, 1].
    cfg = PQNConfig(env="ProbeActionObsReward-v0", **PROBE)
    q = _q(rljax.train(cfg, options=rljax.RunOptions(quiet=True)), cfg, [[-1.0], [1.0]])
    np.testing.assert_allclose(q, [[1.0, 0.0], [0.0, 1.0]], atol=0.1)


def test_truncation_bootstraps_from_final_observation():
    # Endless: reward 1 forever, cut every 5 steps: Q = 1 / (1 - 0.5) = 2, not the 1.67 of a learner
    # that stops at the cut (purejaxql's targets do).
    cfg = PQNConfig(**PROBE)
    q = _q(rljax.train(cfg, env=Endless(), options=rljax.RunOptions(quiet=True)), cfg, [[1.0]])
    np.testing.assert_allclose(q, [[TRUE_VALUE, TRUE_VALUE]], atol=0.1)
    assert abs(q.mean() - WRONG_VALUE) > 0.2


# tests/conftest.py's tiny PQN run over 4 chunks: the same chunk program, which the persistent compile cache
# serves in a suite run (test_export.py, which starts first, trains the tiny run).
SMALL = PQNConfig(total_timesteps=16 * 16 * 8, updates_per_chunk=2, num_envs=16, num_steps=16, num_epochs=1,
                  num_minibatches=2, hidden_sizes=(16,))


@pytest.mark.slow  # a learning run; by default the probe-env tests above and PPO's CartPole run stand for it
def test_cartpole_learns_end_to_end():
    cfg = PQNConfig(**{**pqn_cartpole.DEFAULTS, "total_timesteps": 40_960, "updates_per_chunk": 10})
    result = rljax.train(cfg, options=rljax.RunOptions(quiet=True))
    returns = [r["episode_return_mean"] for r in result.rows]
    assert all(math.isfinite(v) for r in result.rows for k, v in r.items() if isinstance(v, float)), result.rows[-1]
    # The experiment's CartPole setup for 4e4 steps: random play scores ~22; seed 0 goes from 31 in the
    # first chunk to 478 (seeds 1 and 2: 140 and 292).
    assert returns[0] < 60 and result.final_return > 120, returns
    assert result.rows[0]["epsilon"] > 0.5 and result.rows[-1]["epsilon"] == pytest.approx(0.05)


def test_resume_is_bit_identical_and_a_sweep_member_equals_the_single_run(tmp_path):
    # Saves only where the run stops (chunk 2) and at its end.
    full = rljax.train(SMALL, options=rljax.RunOptions(run_dir=tmp_path / "full", quiet=True, checkpoint_every=100))
    part = rljax.train(SMALL, options=rljax.RunOptions(run_dir=tmp_path / "cut", quiet=True, checkpoint_every=100,
                                                       on_chunk=lambda c, state, row: c == 2))
    assert part.preempted == "on_chunk" and len(part.rows) == 3
    rest = rljax.train(SMALL, options=rljax.RunOptions(run_dir=tmp_path / "cut", quiet=True, checkpoint_every=100,
                                                       resume=True))
    assert rest.timings["start_chunk"] == 3
    assert_same_bits(full.state, rest.state)
    assert strip(full.rows) == strip(read_chunks(tmp_path / "cut"))

    spec = SweepSpec(grid={"learning_rate": [SMALL.learning_rate, 3e-3]})
    result, members, _ = run_sweep(SMALL, spec, quiet=True)
    assert len(members) == 2 and len(result.member_rows[1]) == len(full.rows)
    for a, b in zip(jax.tree.leaves(full.state.params), jax.tree.leaves(result.state.params)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b)[0], atol=1e-5)
    assert not np.allclose(*[np.asarray(x) for x in jax.tree.leaves(result.state.params)[0]])
    assert [r["episode_return_mean"] for r in full.rows] == [r["episode_return_mean"] for r in result.member_rows[0]]
