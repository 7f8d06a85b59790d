"""TD3: the exploration action and losses by hand (its targets: tests/unit/core/test_returns.py), the
policy delay, config validation, a continuous probe, a short Pendulum run that must clearly learn, and a bit-identical resume."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
import rljax
from rljax.agents import algorithms
from rljax.agents.offpolicy import ReplayItem
from rljax.env import Box
from rljax.agents.td3 import (TD3Config, TD3Networks, exploration_action, init_learner, make_td3, make_td3_networks,
                              td3_actor_loss, td3_critic_loss, td3_learn_step)

GAMMA = 0.99


def _items(reward, discount, n_act=1):
    n = len(reward)
    return ReplayItem(obs=jnp.zeros((n, 1)), action=jnp.zeros((n, n_act)), reward=jnp.asarray(reward, jnp.float32),
                      discount=jnp.asarray(discount, jnp.float32), next_obs=jnp.ones((n, 1)),
                      valid=jnp.ones((n,), bool))


def test_exploration_action_scales_the_noise_by_the_box_and_clips():
    # Box [-2, 2] x [0, 1]: half-widths [2, 0.5]; exploration_noise 0.1 (half-widths), no noise clip.
    low, high = jnp.array([-2.0, 0.0]), jnp.array([2.0, 1.0])
    mu = jnp.array([[0.0, 0.5], [1.8, 0.9], [0.0, 0.5]])
    eps = jnp.array([[1.0, -1.0], [1.0, 1.0], [10.0, -10.0]])
    # 0.1 * eps * half: [0.2, -0.05], [0.2, 0.05] (1.8 + 0.2 = 2.0), [2, -0.5] -> 2.0 and 0.0 after the box clip.
    b = exploration_action(mu, eps, low, high, jnp.float32(0.1))
    np.testing.assert_allclose(b, [[0.2, 0.45], [2.0, 0.95], [2.0, 0.0]], rtol=1e-6)


def _fake_nets(q_of):
    """Actor: ``mu(s) = params * s`` (a scalar action); critics: ``q_of(params, action) -> [2, N]``."""
    return TD3Networks(init=None, actor=lambda p, obs: p * obs, critic=lambda p, obs, a: q_of(p, a),
                       low=jnp.array([-1.0]), high=jnp.array([1.0]))


def test_critic_loss_by_hand_at_the_smoothed_target_action():
    # Online twins ignore the action: Q = params ([2, 3]). Target twins: [a', a' + 1] -> min a'.
    # Target actor mu'(s'=1) = 0.5; policy_noise 0 -> a' = 0.5 exactly.
    def q_of(p, a):
        return p if p.ndim == 2 else jnp.stack([a[:, 0] + p, a[:, 0] + p + 1.0])

    nets = _fake_nets(q_of)
    online = jnp.array([[1.0, 0.0, 2.0], [3.0, 0.0, 2.0]])
    items = _items(reward=[1.0, 1.0, 0.0], discount=[0.0, GAMMA, GAMMA])
    # y = r + d * (0 + 0.5) = [1, 1 + 0.495, 0.495]
    y = np.array([1.0, 1.0 + 0.5 * GAMMA, 0.5 * GAMMA])
    td = np.asarray(online) - y
    per_item = np.sum(td ** 2, axis=0)
    loss, (td_abs, m) = td3_critic_loss(online, jnp.float32(0.0), jnp.float32(0.5), nets, items, jnp.ones(3),
                                        jax.random.key(0), jnp.float32(0.0), jnp.float32(0.5))
    np.testing.assert_allclose(loss, per_item.mean(), rtol=1e-6)
    np.testing.assert_allclose(td_abs, np.abs(td).mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(m["target_mean"], y.mean(), rtol=1e-6)

    # Importance weights scale each item; a zero weight is left out of the mean.
    w = jnp.array([2.0, 0.5, 0.0])
    loss_w, _ = td3_critic_loss(online, jnp.float32(0.0), jnp.float32(0.5), nets, items, w, jax.random.key(0),
                                jnp.float32(0.0), jnp.float32(0.5))
    np.testing.assert_allclose(loss_w, (2.0 * per_item[0] + 0.5 * per_item[1]) / 2, rtol=1e-6)
    # dL/dQ_i = 2 (Q_i - y) / #valid, and nothing flows into the target.
    grad = jax.grad(lambda q: td3_critic_loss(q, jnp.float32(0.0), jnp.float32(0.5), nets, items, jnp.ones(3),
                                              jax.random.key(0), jnp.float32(0.0), jnp.float32(0.5))[0])(online)
    np.testing.assert_allclose(grad, 2 * td / 3, rtol=1e-6)

    # With a huge policy_noise every smoothing draw is clipped to +-noise_clip = +-0.25: a' is
    # 0.25 or 0.75, so the target is r + d * a' with a' in {0.25, 0.75} (and both occur).
    many = _items(reward=[0.0] * 64, discount=[1.0] * 64)
    _, (_, m2) = td3_critic_loss(jnp.zeros((2, 64)), jnp.float32(0.0), jnp.float32(0.5), nets, many, jnp.ones(64),
                                 jax.random.key(1), jnp.float32(100.0), jnp.float32(0.25))
    frac_high = (float(m2["target_mean"]) - 0.25) / 0.5
    assert 0.2 < frac_high < 0.8, m2["target_mean"]


def test_actor_loss_is_minus_the_first_critic_and_ascends_it():
    # Q_1 = -(a - 0.3)^2, Q_2 = 5 (ignored by the actor); mu(s) = params * s with s = 1.
    nets = _fake_nets(lambda p, a: jnp.stack([-(a[:, 0] - 0.3) ** 2, jnp.full(a.shape[:1], 5.0)]))
    obs = jnp.ones((4, 1))
    loss, m = td3_actor_loss(jnp.float32(0.5), None, nets, obs, jnp.ones(4))
    np.testing.assert_allclose(loss, 0.04, rtol=1e-5)   # -Q_1 = (0.5 - 0.3)^2
    np.testing.assert_allclose(m["actor_loss"], 0.04, rtol=1e-5)
    g = jax.grad(lambda p: td3_actor_loss(p, None, nets, obs, jnp.ones(4))[0])
    np.testing.assert_allclose(g(jnp.float32(0.5)), 2 * 0.2, rtol=1e-5)   # descent moves mu towards 0.3
    assert g(jnp.float32(0.0)) < 0
    # Masked-out items do not count.
    loss_m, _ = td3_actor_loss(jnp.float32(0.5), None, nets, jnp.array([[1.0], [100.0]]), jnp.array([1.0, 0.0]))
    np.testing.assert_allclose(loss_m, 0.04, rtol=1e-5)


def test_actor_and_targets_change_only_every_policy_delay_th_step():
    cfg = TD3Config(hidden_sizes=(8,), tau=0.5)
    hp = cfg.hyperparams()
    nets = make_td3_networks(1, -2.0, 2.0, (8,))
    key = jax.random.key(0)
    learner = init_learner(nets, hp, key, jnp.zeros((1, 3)))
    k_obs, k_act, k_rew = jax.random.split(jax.random.key(1), 3)
    n = 32
    items = ReplayItem(obs=jax.random.normal(k_obs, (n, 3)), action=jax.random.uniform(k_act, (n, 1), minval=-2,
                                                                                       maxval=2),
                       reward=jax.random.normal(k_rew, (n,)), discount=jnp.full((n,), GAMMA),
                       next_obs=jax.random.normal(k_rew, (n, 3)), valid=jnp.ones((n,), bool))
    step = jax.jit(lambda l, k: td3_learn_step(l, items, jnp.ones(n), k, hp, nets, policy_delay=3))

    def same(a, b):
        return all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))

    for t in range(1, 7):
        new, _, metrics = step(learner, jax.random.key(10 + t))
        assert int(new.critic_steps) == t % 3  # a remainder: it never overflows
        assert not same(new.critic_params, learner.critic_params)        # critics: every step
        delayed = t % 3 == 0
        for name in ("actor_params", "target_actor_params", "target_critic_params", "actor_opt"):
            assert same(getattr(new, name), getattr(learner, name)) != delayed, (t, name)
        if delayed:  # targets move by tau = 0.5 towards the new online params
            tc = jax.tree.map(lambda o, t_: 0.5 * o + 0.5 * t_, new.critic_params, learner.target_critic_params)
            assert all(np.allclose(x, y, atol=1e-6) for x, y in zip(jax.tree.leaves(tc),
                                                                    jax.tree.leaves(new.target_critic_params)))
        assert all(math.isfinite(float(v)) for v in metrics.values())
        learner = new


@pytest.mark.parametrize("kw, match", [
    (dict(policy_delay=0), "policy_delay must be a positive integer, got 0"),
    (dict(policy_noise=-0.1), "policy_noise must be >= 0, got -0.1"),
    (dict(noise_clip=-1.0), "noise_clip must be >= 0, got -1.0"),
    (dict(exploration_noise=-0.5), "exploration_noise must be >= 0, got -0.5"),
    (dict(tau=0.0), r"tau must be in \(0, 1\], got 0.0"),
    (dict(gamma=1.5), r"gamma must be in \[0, 1\], got 1.5"),
    (dict(actor_learning_rate=0.0), "actor_learning_rate must be > 0, got 0.0"),
    (dict(batch_size=255, num_devices=2, num_envs=4), "batch_size=255 is not divisible by num_devices=2"),
    (dict(buffer_size=2, num_envs=4), "buffer_size=2 cannot hold one update"),
    (dict(hidden_sizes=()), r"hidden_sizes must be one or more positive ints, got \(\)"),
    (dict(policy_delay=2.0), "policy_delay must be an integer"),
])
def test_config_validation_names_the_values(kw, match):
    with pytest.raises(ValueError, match=match):
        TD3Config(**kw)


def test_registered_and_discrete_or_unbounded_actions_rejected():
    assert algorithms()["td3"].config_cls is TD3Config
    env, params = envs.make("CartPole-v1")
    with pytest.raises(ValueError, match=r"TD3 needs a Box action space; CartPole-v1 has Discrete"):
        make_td3(TD3Config(env="CartPole-v1"), env, params)
    env, params = envs.make("ProbeActionRewardContinuous-v0")
    unbounded = type("Unbounded", (), {"name": "Unbounded", "action_space": lambda self, p: Box(-np.inf, 1.0, (1,))})
    with pytest.raises(ValueError, match=r"TD3 needs a Box action space with finite bounds low < high; Unbounded"):
        make_td3(TD3Config(), unbounded(), params)


def test_probe_action_conditioned_on_the_observation():
    # One-step episodes, obs +-1, reward 1 - (a - 0.5 obs)^2: the actor must learn a* = 0.5 * obs.
    cfg = TD3Config(env="ProbeActionObsRewardContinuous-v0", num_envs=8, gradient_steps=2, batch_size=64,
                    buffer_size=1024, hidden_sizes=(32, 32), learning_starts=256, actor_learning_rate=3e-3,
                    critic_learning_rate=3e-3, total_timesteps=2000, updates_per_chunk=250)
    r = rljax.train(cfg, options=rljax.RunOptions(quiet=True))
    action = np.asarray(r.agent.act(r.state, jnp.array([[-1.0], [1.0]]), jax.random.key(0)))[:, 0]
    np.testing.assert_allclose(action, [-0.5, 0.5], atol=0.15)
    assert all(row["param_desync"] == 0.0 for row in r.rows)


@pytest.mark.slow  # a learning run; by default the probe-env tests above and PPO's CartPole run stand for it
def test_pendulum_learns_end_to_end():
    # Uniformly random actions score about -1200 to -1500 on Pendulum-v1.
    cfg = TD3Config(total_timesteps=6000, gradient_steps=4, learning_starts=500, updates_per_chunk=150, seed=0)
    result = rljax.train(cfg, options=rljax.RunOptions(quiet=True))
    returns = [r["episode_return_mean"] for r in result.rows if r["episode_return_mean"] is not None]
    # Seed 0 (seeds 1, 2): chunks from about -1100 to -99 (-169, -168); final return -467 (-340, -379).
    assert returns[0] < -900, returns
    assert result.final_return > -600 and max(returns) > -400, returns
    last = result.rows[-1]
    for k in ("critic_loss", "actor_loss", "q_mean", "td_abs_mean", "target_mean", "buffer_size", "param_desync",
              "critic_grad_norm", "actor_grad_norm"):
        assert k in last and math.isfinite(last[k]), (k, last.get(k))
    assert last["param_desync"] == 0.0 and last["buffer_size"] <= 6000
