"""DQN: the loss by hand, schedules, probe envs, truncation bootstrapping, variants, and learning."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
import rljax
from rljax.agents.dqn import DQNConfig, dqn_loss
from rljax.agents.offpolicy import ReplayItem
from rljax.core.networks import NOISE, QNetwork
from tests.support.endless import TRUE_VALUE, WRONG_VALUE, Endless


def _linear_q(w, obs):
    return obs @ w  # Q = obs @ W: one-hot observations pick rows of W


def _items(action, reward, discount, n=1):
    s, s2 = jnp.array([[1.0, 0.0]] * n), jnp.array([[0.0, 1.0]] * n)
    return ReplayItem(obs=s, action=jnp.array(action), reward=jnp.array(reward), discount=jnp.array(discount),
                      next_obs=s2, valid=jnp.ones(n, bool))


W_ONLINE = jnp.array([[1.0, 2.0], [3.0, 0.0]])   # Q(s) = [1, 2], Q(s') = [3, 0]
W_TARGET = jnp.array([[0.0, 0.0], [1.0, 5.0]])   # Q_target(s') = [1, 5]


def test_dqn_loss_by_hand():
    items = _items([0], [1.0], [0.9])
    # DQN: a* = argmax Q_target(s') = 1 -> y = 1 + 0.9 * 5 = 5.5; Q(s, 0) = 1 -> td = -4.5.
    loss, (td, m) = dqn_loss(W_ONLINE, W_TARGET, _linear_q, items, jnp.ones(1), double_q=False, loss="mse")
    np.testing.assert_allclose(loss, 0.5 * 4.5 ** 2)
    np.testing.assert_allclose(td, [4.5])
    # Double DQN: a* = argmax Q_online(s') = 0 -> y = 1 + 0.9 * Q_target(s', 0) = 1.9 -> td = -0.9.
    loss, (td, _) = dqn_loss(W_ONLINE, W_TARGET, _linear_q, items, jnp.ones(1), double_q=True, loss="mse")
    np.testing.assert_allclose(loss, 0.5 * 0.9 ** 2, rtol=1e-6)
    # Huber (delta 1) on td = -4.5: 4.5 - 0.5 = 4.0.
    loss, _ = dqn_loss(W_ONLINE, W_TARGET, _linear_q, items, jnp.ones(1), double_q=False, loss="huber")
    np.testing.assert_allclose(loss, 4.0)
    # Terminated (discount 0): y = r = 1 = Q(s, 0) -> zero loss.
    loss, _ = dqn_loss(W_ONLINE, W_TARGET, _linear_q, _items([0], [1.0], [0.0]), jnp.ones(1),
                       double_q=False, loss="mse")
    np.testing.assert_allclose(loss, 0.0)
    # Importance weights: a zero-weight item does not count, not even in the denominator.
    two = _items([0, 1], [1.0, 0.0], [0.9, 0.9], n=2)
    loss, _ = dqn_loss(W_ONLINE, W_TARGET, _linear_q, two, jnp.array([1.0, 0.0]), double_q=False, loss="mse")
    np.testing.assert_allclose(loss, 0.5 * 4.5 ** 2)
    loss, _ = dqn_loss(W_ONLINE, W_TARGET, _linear_q, two, jnp.array([0.5, 1.0]), double_q=False, loss="mse")
    # Item 2: a=1, Q(s,1) = 2, y = 0 + 0.9 * 5 = 4.5 -> td = -2.5. Weighted mean over 2 items.
    np.testing.assert_allclose(loss, (0.5 * 0.5 * 4.5 ** 2 + 1.0 * 0.5 * 2.5 ** 2) / 2)


@pytest.mark.parametrize("kw, match", [
    (dict(batch_size=127, num_devices=2, num_envs=10), "batch_size=127 is not divisible"),
    (dict(loss="l1"), "loss='l1'"),
    (dict(n_step=0), "n_step must be a positive integer"),
    (dict(buffer_size=5), "cannot hold one update"),
    (dict(epsilon_end=1.5), "epsilon_end must be in"),
])
def test_config_validation(kw, match):
    with pytest.raises(ValueError, match=match):
        DQNConfig(**kw)


def test_dqn_rejects_box_actions():
    with pytest.raises(ValueError, match="Discrete action space.*use SAC"):
        rljax.train(DQNConfig(env="Pendulum-v1", total_timesteps=1000), options=rljax.RunOptions(quiet=True))


PROBE = dict(num_envs=8, num_steps=4, batch_size=64, buffer_size=2048, learning_starts=256,
             target_update_interval=64, hidden_sizes=(32, 32), learning_rate=1e-3, gamma=0.5,
             exploration_fraction=0.3, epsilon_end=0.1, total_timesteps=8 * 4 * 400, updates_per_chunk=100)


def _q(result, obs, cfg, num_actions=2):
    net = QNetwork(num_actions=num_actions, hidden_sizes=cfg.hidden_sizes, activation=cfg.activation,
                   dueling=cfg.dueling)
    return np.asarray(net.apply(result.state.learner.params, jnp.asarray(obs, jnp.float32)))


@pytest.mark.parametrize("variant", [
    dict(),
    dict(double_q=True, dueling=True, n_step=3, prioritized=True, loss="huber", tau=0.1,
         target_update_interval=32),
])
def test_two_step_probe_values(variant):
    # V(0) = gamma * 1 = 0.5 and V(1) = 1 for both actions (the action does not matter).
    cfg = DQNConfig(env="ProbeTwoStep-v0", **{**PROBE, **variant})
    result = rljax.train(cfg, options=rljax.RunOptions(quiet=True))
    q = _q(result, [[0.0], [1.0]], cfg)
    np.testing.assert_allclose(q, [[0.5, 0.5], [1.0, 1.0]], atol=0.1)
    assert result.rows[-1]["buffer_size"] == 2048


def test_action_obs_probe_picks_the_right_action():
    cfg = DQNConfig(env="ProbeActionObsReward-v0", **PROBE)
    result = rljax.train(cfg, options=rljax.RunOptions(quiet=True))
    q = _q(result, [[-1.0], [1.0]], cfg)
    assert q[0, 0] > q[0, 1] + 0.5 and q[1, 1] > q[1, 0] + 0.5, q
    np.testing.assert_allclose([q[0, 0], q[1, 1]], [1.0, 1.0], atol=0.15)


@pytest.mark.parametrize("n_step", [1, 3])
def test_truncation_bootstraps_from_final_observation(n_step):
    cfg = DQNConfig(**{**PROBE, "n_step": n_step, "total_timesteps": 8 * 4 * 600})
    result = rljax.train(cfg, env=Endless(), options=rljax.RunOptions(quiet=True))
    q = _q(result, [[1.0]], cfg)
    np.testing.assert_allclose(q, [[TRUE_VALUE, TRUE_VALUE]], atol=0.12)
    assert abs(q.mean() - WRONG_VALUE) > 0.2


def test_epsilon_schedule_and_learning_starts_in_metrics():
    cfg = DQNConfig(env="CartPole-v1", num_envs=4, num_steps=5, total_timesteps=2000, learning_starts=500,
                    buffer_size=1000, batch_size=32, exploration_fraction=0.5, updates_per_chunk=10)
    result = rljax.train(cfg, options=rljax.RunOptions(quiet=True))
    eps = [r["epsilon"] for r in result.rows]
    # Chunks of 10 updates x 20 steps: epsilon decays 1 -> 0.05 over the first 1000 steps, then holds.
    assert eps[0] > eps[2] > eps[4] and abs(eps[-1] - 0.05) < 1e-6
    # No learning (zero loss) until 500 env steps are in the buffer.
    assert result.rows[0]["td_loss"] == 0.0 and result.rows[-1]["td_loss"] > 0.0


@pytest.mark.slow  # a learning run; by default the probe-env tests above and PPO's CartPole run stand for it
def test_cartpole_learns_end_to_end():
    """Seeds 0-2 as one compiled population (one seed alone is too noisy a judge: its final return
    at 1.5e5 steps ranges over ~230-500 with the seed and the XLA build)."""
    from rljax.training.sweep import SweepSpec, run_sweep

    _, _, (summary,) = run_sweep(DQNConfig(total_timesteps=150_000), SweepSpec(seeds=(0, 1, 2)), devices=1,
                                 quiet=True)
    # Random play scores ~22 and learning starts at 1e4 steps; by 1.5e5 steps the three seeds'
    # final returns average 461 +- 40.
    assert summary["final_mean"] > 300 and summary["final_mean"] - summary["final_std"] > 250, summary


# Slow (a training run): by default tests/unit/core/test_networks.py's NoisyDense and noisy QNetwork tests stand for it.
@pytest.mark.slow
def test_noisy_layers_learn_their_noise_scale_explore_and_act_on_their_mean(tmp_path):
    """With noisy layers and epsilon 0 the run still explores (the sigmas are trained: they move from
    their initial sigma0 / sqrt(p)); the loaded policy's greedy action is the argmax of the noise's
    mean, the same for every call; and the noisy network's draws differ from it."""
    cfg = DQNConfig(env="CartPole-v1", noisy=True, epsilon_start=0.0, epsilon_end=0.0, num_envs=4, num_steps=2,
                    batch_size=16, buffer_size=256, learning_starts=32, hidden_sizes=(16,), total_timesteps=4 * 2 * 40,
                    updates_per_chunk=20)
    rljax.train(cfg, options=rljax.RunOptions(run_dir=tmp_path / "run", quiet=True))
    policy = rljax.load(tmp_path / "run")
    params = policy.params[0]  # (the network's params, the final epsilon)
    sigma = np.asarray(params["params"]["torso"]["hidden_0"]["sigma_kernel"])
    assert not np.allclose(sigma, 0.5 / np.sqrt(4)), "the noise scale is learned"
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32) * 0.5
    network = QNetwork(num_actions=2, hidden_sizes=(16,), noisy=True)
    mean = np.asarray(jnp.argmax(network.apply(params, obs), axis=-1))
    np.testing.assert_array_equal(np.asarray(policy.act(obs)), mean)
    np.testing.assert_array_equal(np.asarray(policy.act(obs)), mean)
    drawn = [network.apply(params, obs, rngs={NOISE: jax.random.key(k)}) for k in range(2)]
    assert not np.allclose(np.asarray(drawn[0]), np.asarray(drawn[1]))
