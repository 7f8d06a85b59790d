"""SAC: the losses by hand with fake networks, config validation, probe environments, a short
Pendulum run that must clearly learn, and the 4-device learning step (in a subprocess)."""

from __future__ import annotations

import json
import math
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
import rljax
from rljax.agents.offpolicy import ReplayItem
from rljax.agents.sac import (SACConfig, SACNetworks, make_sac, make_sac_networks, sac_actor_loss, sac_alpha_loss,
                              sac_critic_loss)
from rljax.core.distributions import TanhGaussian
from tests.conftest import cpu_subprocess_env

GAMMA = 0.99


def _fake_nets(next_log_prob, q_of=None):
    """Fake networks: critics return ``params`` (a ``[2, N]`` array) and the policy returns zero
    actions with fixed log-probs, so targets and losses can be worked out by hand."""
    def critic(params, obs, action):
        return jnp.asarray(params) if q_of is None else q_of(params, action)

    def sample(params, obs, key):
        n = obs.shape[0]
        return jnp.zeros((n, 1)), jnp.broadcast_to(jnp.asarray(next_log_prob, jnp.float32), (n,))

    return SACNetworks(init=None, critic=critic, policy=None, sample=sample, mode=None)


def _items(reward, discount, valid=None):
    n = len(reward)
    return ReplayItem(obs=jnp.zeros((n, 1)), action=jnp.zeros((n, 1)), reward=jnp.asarray(reward, jnp.float32),
                      discount=jnp.asarray(discount, jnp.float32), next_obs=jnp.zeros((n, 1)),
                      valid=jnp.ones((n,), bool) if valid is None else jnp.asarray(valid))


def test_critic_loss_by_hand_with_fake_networks():
    # Online twins: Q1 = [1, 0, 2], Q2 = [3, 0, 2]; target twins: [5, 2, 1] and [4, 6, 1] -> min [4, 2, 1].
    # alpha = 0.5, log pi(a'|s') = -2 -> soft value min Q + 1 = [5, 3, 2].
    online = jnp.array([[1.0, 0.0, 2.0], [3.0, 0.0, 2.0]])
    target = jnp.array([[5.0, 2.0, 1.0], [4.0, 6.0, 1.0]])
    nets = _fake_nets(next_log_prob=-2.0)
    items = _items(reward=[1.0, 1.0, 0.0], discount=[0.0, GAMMA, GAMMA])
    # y = [1 + 0 (terminated), 1 + 0.99 * 3 = 3.97, 0 + 0.99 * 2 = 1.98]
    y = np.array([1.0, 1.0 + 3 * GAMMA, 2 * GAMMA])
    td = np.asarray(online) - y
    per_item = 0.5 * np.sum(td ** 2, axis=0)
    weights = jnp.ones(3)
    loss, (td_abs, m) = sac_critic_loss(online, target, None, jnp.float32(0.5), nets, items, weights,
                                        jax.random.key(0))
    np.testing.assert_allclose(loss, per_item.mean(), rtol=1e-6)
    np.testing.assert_allclose(td_abs, np.abs(td).mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(m["target_mean"], y.mean(), rtol=1e-6)
    np.testing.assert_allclose(m["q_mean"], np.asarray(online).mean(), rtol=1e-6)

    # Importance weights scale each item; a zero weight (an invalid item) is left out of the mean.
    w = jnp.array([2.0, 0.5, 0.0])
    loss_w, _ = sac_critic_loss(online, target, None, jnp.float32(0.5), nets, items, w, jax.random.key(0))
    np.testing.assert_allclose(loss_w, (2.0 * per_item[0] + 0.5 * per_item[1]) / 2, rtol=1e-6)

    # The gradient pushes each online critic towards y: dL/dQ_i = w (Q_i - y) / #valid.
    grad = jax.grad(lambda q: sac_critic_loss(q, target, None, jnp.float32(0.5), nets, items, weights,
                                              jax.random.key(0))[0])(online)
    np.testing.assert_allclose(grad, td / 3, rtol=1e-6)


def test_actor_loss_by_hand_and_its_gradient():
    # A fixed log-prob and Q = params - a^2 per twin: L = mean(alpha log pi - min Q).
    nets = _fake_nets(next_log_prob=-1.0, q_of=lambda p, a: jnp.stack([p[0] - a[:, 0] ** 2, p[1] - a[:, 0] ** 2]))
    loss, (log_prob, m) = sac_actor_loss(None, jnp.array([2.0, 3.0]), jnp.float32(0.1), nets, jnp.zeros((4, 1)),
                                         jnp.ones(4), jax.random.key(0))
    np.testing.assert_allclose(loss, 0.1 * -1.0 - 2.0, rtol=1e-6)
    np.testing.assert_allclose(m["entropy"], 1.0, rtol=1e-6)

    # A real squashed policy whose mean is the parameter, critics peaked at a = 0.5: the gradient
    # step (descent) moves the mean towards 0.5 from either side.
    def sample(params, obs, key):
        dist = TanhGaussian(jnp.full((obs.shape[0], 1), params), jnp.full((obs.shape[0], 1), -2.0), -1.0, 1.0)
        return dist.sample_and_log_prob(key)

    real = SACNetworks(init=None, policy=None, mode=None, sample=sample,
                       critic=lambda p, o, a: jnp.stack([-(a[:, 0] - 0.5) ** 2, -(a[:, 0] - 0.5) ** 2 + 0.1]))
    def grad(mean):
        loss = lambda p: sac_actor_loss(p, None, jnp.float32(0.01), real, jnp.zeros((256, 1)),  # noqa: E731
                                        jnp.ones(256), jax.random.key(1))[0]
        return jax.grad(loss)(jnp.float32(mean))

    assert grad(0.0) < 0 < grad(1.5)  # tanh(0) = 0 < 0.5 < tanh(1.5) = 0.91


def test_alpha_loss_by_hand_and_gradient_sign():
    mask = jnp.ones(2)
    # alpha = 2, log pi = [1, 3] (entropy -2), target -1: J = mean(-2 (log pi - 1)) = mean([0, -4]) = -2.
    loss, grad = jax.value_and_grad(sac_alpha_loss)(jnp.log(2.0), jnp.array([1.0, 3.0]), jnp.float32(-1.0), mask)
    np.testing.assert_allclose(loss, -2.0, rtol=1e-6)
    np.testing.assert_allclose(grad, -2.0, rtol=1e-6)  # dJ/dlog(alpha) = J here
    # Entropy below the target -> negative gradient -> descent raises alpha ...
    assert grad < 0
    # ... and above the target (log pi = -3, entropy 3 > -1) -> positive gradient -> alpha falls.
    g_high = jax.grad(sac_alpha_loss)(jnp.log(2.0), jnp.array([-3.0, -3.0]), jnp.float32(-1.0), mask)
    assert g_high > 0
    # Invalid items (mask 0) do not count.
    g_masked = jax.grad(sac_alpha_loss)(jnp.log(2.0), jnp.array([1.0, -30.0]), jnp.float32(-1.0),
                                        jnp.array([1.0, 0.0]))
    np.testing.assert_allclose(g_masked, 0.0, atol=1e-7)


def test_update_passes_minus_scale_times_action_dim_as_the_target_entropy(monkeypatch):
    """SAC's update hands ``sac_learn_step`` the target entropy ``-target_entropy_scale * |A|``, with
    the scale the train state holds (a sweepable hyperparameter: a sweep member's or PBT's value, not
    the config's). On a two-dimensional box with 0.75 in the state (1.0 in the config): -1.5. The
    learn step is replaced by one that only reports the value it was given."""
    from rljax.agents import sac as sac_module
    from tests.support.box_env import AsymmetricBox

    def report(learner, items, weights, key, hyperparams, nets, *, target_entropy, autotune, axis_name=None):
        return learner, jnp.zeros_like(weights), {"target_entropy": jnp.asarray(target_entropy, jnp.float32)}

    monkeypatch.setattr(sac_module, "sac_learn_step", report)
    env = AsymmetricBox()
    cfg = SACConfig(env="asymmetric-box", num_envs=1, batch_size=2, buffer_size=8, learning_starts=0,
                    hidden_sizes=(4,), total_timesteps=8)
    assert cfg.target_entropy_scale == 1.0
    agent = make_sac(cfg, env, env.default_params)
    hyperparams = cfg.hyperparams().replace(target_entropy_scale=jnp.float32(0.75))
    state = jax.jit(lambda key, hp: agent.init(key, 0, 8, hp, env.default_params))(jax.random.key(0), hyperparams)
    _, out = jax.jit(agent.update)(state)
    assert float(out.metrics["target_entropy"]) == -1.5


def test_networks_respect_the_box_and_the_log_std_range():
    nets = make_sac_networks(2, jnp.array([-2.0, 0.0]), jnp.array([2.0, 1.0]), (8,), log_std_min=-5.0,
                             log_std_max=2.0)

    @jax.jit  # one program: eager flax init compiles every initialiser on its own
    def run(key):
        k_obs, k_init, k_sample = jax.random.split(key, 3)
        obs = 10.0 * jax.random.normal(k_obs, (64, 3))
        actor, critic = nets.init(k_init, obs[:1], jnp.zeros((1, 2)))
        a, log_prob = nets.sample(actor, obs, k_sample)
        dist = nets.policy(actor, obs)
        return a, log_prob, dist.log_std, nets.mode(actor, obs), dist.mode(), nets.critic(critic, obs, a)

    a, log_prob, log_std, mode, dist_mode, q = run(jax.random.key(0))
    assert a.shape == (64, 2) and log_prob.shape == (64,) and q.shape == (2, 64)
    assert np.all((np.asarray(a) >= [-2.0, 0.0]) & (np.asarray(a) <= [2.0, 1.0]))
    assert np.all(np.isfinite(np.asarray(log_prob)))
    assert np.all((np.asarray(log_std) >= -5.0) & (np.asarray(log_std) <= 2.0))
    np.testing.assert_allclose(mode, dist_mode)


def test_discrete_env_is_rejected_with_the_space_named():
    env, params = envs.make("CartPole-v1")
    with pytest.raises(ValueError, match=r"SAC needs a Box action space; CartPole-v1 has Discrete"):
        make_sac(SACConfig(env="CartPole-v1"), env, params)


def test_unreachable_target_entropy_is_rejected():
    # On Box(-1, 1) the largest entropy is log 2; a target of +1 would drive alpha to infinity.
    env, params = envs.make("ProbeActionRewardContinuous-v0")
    with pytest.raises(ValueError, match=r"target entropy .* = 1 is not below the largest entropy"):
        make_sac(SACConfig(target_entropy_scale=-1.0), env, params)
    make_sac(SACConfig(target_entropy_scale=-1.0, autotune=False), env, params)  # fixed alpha: fine


@pytest.mark.parametrize("kw, match", [
    (dict(batch_size=255, num_devices=2, num_envs=4), "batch_size=255 is not divisible by num_devices=2"),
    (dict(buffer_size=2, num_envs=4), "buffer_size=2 cannot hold one update"),
    (dict(gradient_steps=0), "gradient_steps must be a positive integer, got 0"),
    (dict(n_step=3, num_steps=1), "n_step=3 must be <= num_steps=1"),
    (dict(tau=0.0), r"tau must be in \(0, 1\], got 0.0"),
    (dict(gamma=1.5), r"gamma must be in \[0, 1\], got 1.5"),
    (dict(critic_learning_rate=-1.0), "critic_learning_rate must be > 0, got -1.0"),
    (dict(initial_alpha=0.0), "initial_alpha must be > 0"),
    (dict(hidden_sizes=()), r"hidden_sizes must be one or more positive ints, got \(\)"),
    (dict(log_std_min=2.0, log_std_max=-5.0), "log_std_min=2.0 must be < log_std_max=-5.0"),
    (dict(learning_starts=-1), "learning_starts must be an integer >= 0, got -1"),
])
def test_config_validation_names_the_values(kw, match):
    with pytest.raises(ValueError, match=match):
        SACConfig(**kw)


# Probes: 8 envs of one-step (or two-step) episodes, small nets, a fast learning rate. One hidden layer of 64: a
# chunk program compiles in ~4.5 s on 2 cores, one with two layers of 32 in ~8 s; on seeds 0-3 the errors stay
# within a third of each probe's tolerance (two-step values <= 0.021 of 0.07, truncation <= 0.037 of 0.12).
PROBE_CFG = dict(num_envs=8, num_steps=1, gradient_steps=2, batch_size=64, buffer_size=1024, hidden_sizes=(64,),
                 learning_starts=256, actor_learning_rate=3e-3, critic_learning_rate=3e-3, alpha_learning_rate=3e-3,
                 initial_alpha=0.1, total_timesteps=2000, updates_per_chunk=250)


def _train_probe(name, **kw):
    cfg = SACConfig(env=name, **{**PROBE_CFG, **kw})
    result = rljax.train(cfg, options=rljax.RunOptions(quiet=True))
    assert all(r["param_desync"] == 0.0 for r in result.rows)
    return result


@pytest.mark.parametrize("name, obs, target, atol", [
    pytest.param("ProbeActionRewardContinuous-v0", [[0.0]], [0.5], 0.15, marks=pytest.mark.slow),  # a* = 0.5 (implied by the next)
    ("ProbeActionObsRewardContinuous-v0", [[-1.0], [1.0]], [-0.5, 0.5], 0.2),  # a* = 0.5 * obs
])
def test_probe_continuous_actions(name, obs, target, atol):
    r = _train_probe(name)
    action = np.asarray(r.agent.act(r.state, jnp.asarray(obs), jax.random.key(0)))[:, 0]
    np.testing.assert_allclose(action, target, atol=atol)


def test_probe_two_step_values_with_prioritized_replay():
    # V(1) = 1 (reward 1, then the episode ends); Q(0, a) = gamma * V(1) for every action, learned by
    # bootstrapping through the target critics. A tiny fixed alpha keeps the soft values close to
    # the plain ones (alpha * log pi <= ~0.03); prioritised replay weights the critic loss.
    r = _train_probe("ProbeTwoStepContinuous-v0", autotune=False, initial_alpha=0.01, gamma=0.9, tau=0.05,
                     prioritized=True)
    nets = make_sac_networks(1, -1.0, 1.0, PROBE_CFG["hidden_sizes"])
    a = jnp.array([[-0.5], [0.0], [0.5]])
    q0 = np.asarray(nets.critic(r.state.learner.critic_params, jnp.zeros((3, 1)), a))
    q1 = np.asarray(nets.critic(r.state.learner.critic_params, jnp.ones((3, 1)), a))
    np.testing.assert_allclose(q0, 0.9, atol=0.07)
    np.testing.assert_allclose(q1, 1.0, atol=0.07)
    np.testing.assert_allclose(r.rows[-1]["alpha"], 0.01, rtol=1e-5)  # autotune off: alpha fixed


@pytest.mark.slow  # a learning run; by default the probe-env tests above and PPO's CartPole run stand for it
def test_pendulum_learns_end_to_end():
    # Uniformly random actions score about -1200 to -1500 on Pendulum-v1; with one gradient step per
    # env step SAC reaches -234 within 5000 steps (seed 0; -410 and -192 with seeds 1 and 2).
    cfg = SACConfig(total_timesteps=5000, gradient_steps=4, learning_starts=500, updates_per_chunk=125, seed=0)
    result = rljax.train(cfg, options=rljax.RunOptions(quiet=True))
    returns = [r["episode_return_mean"] for r in result.rows if r["episode_return_mean"] is not None]
    assert returns[0] < -900, returns
    assert result.final_return > -450, returns
    last = result.rows[-1]
    for k in ("critic_loss", "actor_loss", "alpha_loss", "alpha", "entropy", "q_mean", "td_abs_mean",
              "buffer_size", "param_desync", "critic_grad_norm", "actor_grad_norm"):
        assert k in last and math.isfinite(last[k]), (k, last.get(k))
    assert last["param_desync"] == 0.0
    assert 0 < last["alpha"] < 1.0  # tuned down from 1 as the policy sharpens
    assert last["buffer_size"] <= 5000


SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "support" / "multidevice_sac_checks.py"


@pytest.mark.slow  # by default DQN's and PPO's 4-device equivalences in tests/integration/test_data_parallel.py
def test_four_device_learning_step_equals_single_device():
    proc = subprocess.run([sys.executable, str(SCRIPT), "learn", "train"], env=cpu_subprocess_env(4), capture_output=True,
                          text=True, timeout=240, cwd=SCRIPT.parents[1])
    results = {line.split()[1]: json.loads(line.split(" ", 2)[2]) for line in proc.stdout.splitlines()
               if line.startswith("RESULT ")}
    assert proc.returncode == 0 and len(results) == 2, f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"

    r = results["learn"]
    assert r["devices"] == 4
    assert r["param_change"] > 1e-4 and r["critic_change"] > 1e-4  # the steps did something
    assert r["max_param_diff_vs_single"] < 1e-5, r
    assert r["max_param_diff_across_devices"] == 0.0, r
    np.testing.assert_allclose(r["critic_loss"][1], r["critic_loss"][0], rtol=1e-5)
    np.testing.assert_allclose(r["actor_loss"][1], r["actor_loss"][0], rtol=1e-5)
    assert r["log_alpha"][0] == pytest.approx(r["log_alpha"][1], abs=1e-6) and r["log_alpha"][0] != r["log_alpha"][2]
    assert r["max_td_abs_diff"] < 1e-4 * max(1.0, max(r["critic_loss"][0]))

    t = results["train"]
    assert t["leading_axis"] == 4 and t["max_spread"] == 0.0
    assert all(d == 0.0 for d in t["desync"])
    assert all(math.isfinite(x) for x in t["critic_loss"]) and t["critic_loss"][-1] > 0
    assert t["buffer_size"][-1] == 256.0  # 4 shards of 64, full


def test_truncation_bootstraps_from_final_observation():
    """Never-ending MDP cut by a time limit: Q = 1 / (1 - gamma) = 2, not the 1.67 of a learner
    that stops bootstrapping at the cut (tiny fixed alpha keeps soft values near the plain ones)."""
    from tests.support.endless import TRUE_VALUE, WRONG_VALUE, Endless

    cfg = SACConfig(**{**PROBE_CFG, "autotune": False, "initial_alpha": 0.001, "gamma": 0.5, "tau": 0.05,
                       "total_timesteps": 4000})
    r = rljax.train(cfg, env=Endless(continuous=True), options=rljax.RunOptions(quiet=True))
    nets = make_sac_networks(1, -1.0, 1.0, PROBE_CFG["hidden_sizes"])
    q = np.asarray(nets.critic(r.state.learner.critic_params, jnp.ones((3, 1)), jnp.array([[-0.5], [0.0], [0.5]])))
    np.testing.assert_allclose(q, TRUE_VALUE, atol=0.12)
    assert abs(float(q.mean()) - WRONG_VALUE) > 0.2
