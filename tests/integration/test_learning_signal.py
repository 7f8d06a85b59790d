"""The learning signal itself: what the agents learn from, checked against hand computations.

Each test guards one way an agent's learning signal can go wrong (placeholder n-step items
marked valid, replay normalised with stale statistics, importance weights crushed by
placeholders, PBT and sweeps not reaching what they change, counts that stop growing, bootstraps
from the wrong observation, a one-sided PPO clip, a double-Q flag not reaching the loss), and
fails on code that has that fault.

``Ticker`` (:mod:`tests.support.ticker`) is a deterministic env whose values are all distinct, so a
hand computation can say exactly what each transition, n-step item and bootstrap must be. The
rollout's bootstrap observation and the running count's growth are checked in their modules'
unit tests (tests/unit/core/test_rollout.py, test_wrappers.py).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rljax.agents.dqn as dqn_module
import rljax.agents.ppo as ppo_module
import rljax.agents.onpolicy as onpolicy_module
from rljax.agents.dqn import DQNConfig, make_dqn
from rljax.agents.offpolicy import collect, init_collector, make_replay, replay_learning
from rljax.agents.ppo import PPOConfig, make_ppo
from rljax.agents.sac import SACConfig, make_sac
from rljax.training.hooks.pbt import PBTSpec, exploit_explore
from rljax.core.wrappers import EpisodeStatistics, VecEnv
from tests.support.ticker import LIMIT, Ticker

GAMMA = 0.5


def _ticker_item(start_obs: float, n: int) -> tuple[float, float, float]:
    """Hand computation of the n-step item starting at Ticker observation ``start_obs``:
    ``(reward sum, discount, bootstrap obs)``. From obs ``k`` the rewards are ``k, k+1, .., 3`` and
    the episode is truncated after the step with reward 3 (final observation 4)."""
    k = int(start_obs)
    rewards = list(range(k, LIMIT + 1))[:n]
    ret = sum(GAMMA ** i * r for i, r in enumerate(rewards))
    m = len(rewards)
    return ret, GAMMA ** m, float(k + m)


def _random_policy(num_actions=2):
    def act(key, obs):
        return jax.random.randint(key, obs.shape[:1], 0, num_actions, jnp.int32), ()
    return act


def _ticker_stack(num_envs=2):
    env = Ticker()
    return EpisodeStatistics(VecEnv(env, num_envs)), env.default_params


# ------------------------------------------------------------------------------------------------
# n-step collection and its bootstrap observation
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_steps, n", [(1, 3), (1, 4), (2, 4), (3, 3), (1, 1)])
def test_n_step_items_valid_exactly_when_real_and_equal_to_hand_computation(num_steps, n):
    """With ``n - 1 > num_steps`` the placeholder tail needs several updates to leave; no item that
    starts on a placeholder may be valid, and every valid item is the hand-computed n-step item."""
    venv, params = _ticker_stack()
    collector = init_collector(venv, params, _random_policy(), jax.random.key(0), n)
    step = jax.jit(lambda c, k: collect(venv, params, _random_policy(), c, k, num_steps, n, GAMMA))
    start = []  # the env observation each item starts at, per update (placeholders: none)
    real_steps = 0
    for u in range(6):
        collector, items, _ = step(collector, jax.random.key(10 + u))
        items = jax.tree.map(np.asarray, items)
        for t in range(num_steps):
            for b in range(2):
                i = t * 2 + b
                # Item i of this update starts at window step t, i.e. at env step real_steps + t - (n - 1).
                first = real_steps + t - (n - 1)
                if first < 0:
                    assert not items.valid[i], (u, t, items)
                    continue
                assert items.valid[i], (u, t, items)
                obs = 1 + first % LIMIT
                ret, disc, boot = _ticker_item(obs, n)
                assert items.obs[i, 0] == obs
                np.testing.assert_allclose(items.reward[i], ret, rtol=1e-6)
                np.testing.assert_allclose(items.discount[i], disc, rtol=1e-6)
                assert items.next_obs[i, 0] == boot
                start.append(obs)
        # No valid item carries a placeholder (all-zero) observation.
        assert np.all(items.obs[items.valid] > 0) and np.all(items.reward[items.valid] > 0)
        real_steps += num_steps
    assert len(start) == 2 * max(0, 6 * num_steps - (n - 1))


# ------------------------------------------------------------------------------------------------
# prioritised replay with placeholders
# ------------------------------------------------------------------------------------------------


def _prioritized_ticker_buffer(n, num_steps, updates):
    venv, params = _ticker_stack()
    collector = init_collector(venv, params, _random_policy(), jax.random.key(0), n)
    replay = make_replay(16, prioritized=True)
    _, items, _ = collect(venv, params, _random_policy(), collector, jax.random.key(1), num_steps, n, GAMMA)
    buffer = replay.init(jax.tree.map(lambda x: x[0], items), 0.6)
    for u in range(updates):
        collector, items, _ = collect(venv, params, _random_policy(), collector, jax.random.key(2 + u), num_steps,
                                      n, GAMMA)
        buffer = replay.add(buffer, items)
    return replay, buffer


# (n - 1 <= num_steps isolates the priorities from the n-step tail's validity; (3, 1) has both.)
# The one-step case with --slow only (by default the n-step tails, whose placeholders it has none of).
@pytest.mark.parametrize("n, num_steps", [pytest.param(1, 1, marks=pytest.mark.slow), (3, 2), (3, 1)])
def test_placeholders_do_not_distort_importance_weights(n, num_steps):
    replay, buffer = _prioritized_ticker_buffer(n, num_steps, updates=8 // (2 * num_steps))
    valid = np.asarray(buffer.data.valid[:8])
    assert valid.sum() == 8 - 2 * (n - 1)  # 2 envs x (n - 1) placeholders

    # One learning step that finds |TD| = 1 everywhere: priorities become 1 + eps.
    def learn_step(learner, items, weights, key):
        return learner, jnp.ones_like(weights), {"m": jnp.float32(0)}

    _, buffer, _ = replay_learning(learn_step, jnp.zeros(()), replay, buffer, jax.random.key(5), gradient_steps=3,
                                   batch_size=8, beta=jnp.float32(1.0), active=jnp.bool_(True))
    idx, items, w = replay.sample(buffer, jax.random.key(6), 8, jnp.float32(1.0))
    # Every real item has priority 1 (never sampled) or 1 + 1e-6 (sampled), so each weight
    # (p_i^a / p_min^a)^-beta is 1 to within 1e-6, the same as with n = 1; placeholders are never
    # drawn. (A placeholder with priority ~1e-6 as the buffer's minimum would scale every weight by
    # (1e-6)^0.6 ~ 2.5e-4.)
    assert np.all(np.asarray(items.valid)), np.asarray(idx)
    np.testing.assert_allclose(np.asarray(w), 1.0, rtol=1e-5)

    # Now distinct priorities 1..k on the real items: w_i = (p_i / min p)^(-alpha * beta), with the
    # minimum over the real items only.
    real = np.flatnonzero(valid)
    prios = np.arange(1, len(real) + 1, dtype=np.float32)
    buffer = replay.update(buffer, jnp.asarray(real, jnp.int32), jnp.asarray(prios) - 1e-6, jnp.ones(len(real), bool))
    idx, items, w = replay.sample(buffer, jax.random.key(7), 64, jnp.float32(0.5))
    p_of = dict(zip(real.tolist(), prios.tolist()))
    expected = [(p_of[i] / 1.0) ** (-0.6 * 0.5) for i in np.asarray(idx).tolist()]
    np.testing.assert_allclose(np.asarray(w), expected, rtol=1e-5)


# ------------------------------------------------------------------------------------------------
# normalize_obs with replay
# ------------------------------------------------------------------------------------------------


def _normalize(stats, x, eps=1e-8):
    return (np.asarray(x, np.float64) - np.asarray(stats.mean)) / np.sqrt(np.asarray(stats.var) + eps)


@pytest.mark.timeout(300)
def test_dqn_replay_stores_raw_obs_and_learns_on_current_normalisation(monkeypatch):
    seen = []

    real_loss = dqn_module.q_learning_loss

    def spy_loss(params, target_params, apply_fn, items, weights, **kw):
        jax.debug.callback(lambda o, n, v: seen.append((np.asarray(o), np.asarray(n), np.asarray(v))),
                           items.obs, items.next_obs, items.valid)
        return real_loss(params, target_params, apply_fn, items, weights, **kw)

    monkeypatch.setattr(dqn_module, "q_learning_loss", spy_loss)
    cfg = DQNConfig(num_envs=2, num_steps=1, batch_size=8, buffer_size=64, learning_starts=0, gradient_steps=1,
                    hidden_sizes=(8,), normalize_obs=True, n_step=2, total_timesteps=1000)
    env = Ticker()
    agent = make_dqn(cfg, env, env.default_params)
    state = agent.init(jax.random.key(0), 0, 20, cfg.hyperparams(), env.default_params)
    update = jax.jit(agent.update)
    for _ in range(12):
        state, _ = update(state)
        jax.effects_barrier()
    valid = np.asarray(state.buffer.data.valid[:state.buffer.size])
    stored = np.asarray(state.buffer.data.obs[:state.buffer.size])[valid]
    # Raw Ticker observations (1, 2, 3) and their 2-step bootstraps (3, 4, 4), not normalised
    # values (the uniform buffer also holds the first update's invalid placeholders).
    assert valid.sum() == 2 * 12 - 2
    assert set(np.unique(stored).tolist()) == {1.0, 2.0, 3.0}, np.unique(stored)
    stored_next = np.asarray(state.buffer.data.next_obs[:state.buffer.size])[valid]
    assert set(np.unique(stored_next).tolist()) == {3.0, 4.0}, np.unique(stored_next)

    # The last update's learner inputs are raw observations normalised with the statistics after
    # that update's collection (the state's), whatever the statistics were when they were stored.
    stats = state.collector.env_state.obs_stats
    obs, next_obs, valid = seen[-1]
    obs, next_obs = obs[valid], next_obs[valid]  # placeholders (weight 0) aside
    assert len(obs) >= 6
    candidates = {v: _normalize(stats, [v])[0] for v in (1.0, 2.0, 3.0, 4.0)}
    for x in obs[:, 0]:
        assert min(abs(x - candidates[v]) for v in (1.0, 2.0, 3.0)) < 1e-5, (x, candidates)
    for x in next_obs[:, 0]:
        assert min(abs(x - candidates[v]) for v in (3.0, 4.0)) < 1e-5, (x, candidates)
    # The acting policy sees today's statistics too: act() takes raw observations.
    q_raw = agent.act(state, jnp.asarray([[3.0]]), jax.random.key(0))
    from rljax.core.networks import QNetwork

    net = QNetwork(num_actions=2, hidden_sizes=cfg.hidden_sizes)
    q = net.apply(state.learner.params, jnp.asarray([[candidates[3.0]]], jnp.float32))
    assert int(q_raw[0]) == int(jnp.argmax(q[0]))


@pytest.mark.timeout(300)
def test_sac_replay_stores_raw_obs():
    cfg = SACConfig(num_envs=2, num_steps=1, batch_size=8, buffer_size=64, learning_starts=0, gradient_steps=1,
                    hidden_sizes=(8,), normalize_obs=True, total_timesteps=1000)
    env = Ticker(continuous=True)
    agent = make_sac(cfg, env, env.default_params)
    state = agent.init(jax.random.key(0), 0, 20, cfg.hyperparams(), env.default_params)
    update = jax.jit(agent.update)
    for _ in range(6):
        state, out = update(state)
    stored = np.asarray(state.buffer.data.obs[:state.buffer.size])  # n = 1: no placeholders
    assert set(np.unique(stored).tolist()) == {1.0, 2.0, 3.0}, np.unique(stored)
    assert np.isfinite(float(out.metrics["critic_loss"]))


# ------------------------------------------------------------------------------------------------
# PBT over priority_alpha
# ------------------------------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_pbt_perturbing_priority_alpha_changes_sampling_probabilities():
    cfg = DQNConfig(num_envs=2, num_steps=2, batch_size=8, buffer_size=32, learning_starts=0, gradient_steps=2,
                    hidden_sizes=(8,), prioritized=True, total_timesteps=1000)
    env = Ticker()
    agent = make_dqn(cfg, env, env.default_params)
    hp = jax.tree.map(lambda x: jnp.stack([x, x]), cfg.hyperparams())
    state = jax.vmap(lambda k, h: agent.init(k, 0, 20, h, env.default_params))(
        jax.random.split(jax.random.key(0), 2), hp)
    update = jax.jit(jax.vmap(agent.update))
    for _ in range(5):
        state, _ = update(state)
    leaves = np.asarray(state.buffer.sum_tree[:, 32:32 + 20], np.float64)
    assert len(np.unique(leaves[1])) > 2  # TD errors gave distinct priorities

    # Member 0 (worse) copies member 1, and its alpha is perturbed 0.6 -> 0.9.
    spec = PBTSpec(interval=1, fields={"priority_alpha": (0.1, 1.0)}, fraction=0.5, factors=(1.5,))
    new, source = jax.jit(lambda s: exploit_explore(s, jnp.array([0.0, 1.0]), jnp.int32(0), spec))(state)
    assert np.asarray(source).tolist() == [1, 1]
    np.testing.assert_allclose(np.asarray(new.hyperparams.priority_alpha), [0.9, 0.6], rtol=1e-6)
    # P(i) = p_i^alpha / sum_k p_k^alpha with the donor's priorities p_i = leaf_i^(1/0.6).
    p = leaves[1] ** (1 / 0.6)
    for member, alpha in ((0, 0.9), (1, 0.6)):
        got = np.asarray(new.buffer.sum_tree[member, 32:32 + 20], np.float64)
        np.testing.assert_allclose(got / got.sum(), p ** alpha / np.sum(p ** alpha), rtol=2e-5)
    # Sampling follows: the stratified draws of member 0 now favour high priorities more.
    assert float(new.buffer.alpha[0]) == pytest.approx(0.9)


# ------------------------------------------------------------------------------------------------
# Reward normalisation in a sweep uses each member's gamma
# ------------------------------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_sweep_reward_normalisation_uses_each_members_gamma():
    from rljax.training.sweep import SweepSpec, run_sweep
    from tests.support.endless import Endless

    # Endless: reward 1 every step, episodes cut at 5 steps, all envs in lockstep. Per episode the
    # normaliser sees G = 1, 1 + g, ..., 1 + g + ... + g^4; 2 updates x 5 steps = 2 episodes per env.
    cfg = PPOConfig(num_envs=2, num_steps=5, num_epochs=1, num_minibatches=1, hidden_sizes=(8,),
                    normalize_reward=True, total_timesteps=2 * 5 * 2, gamma=0.99)
    result, members, _ = run_sweep(cfg, SweepSpec(grid={"gamma": [0.5, 0.9]}), env=Endless(), run_dir=None,
                                   quiet=True, plots=False)
    stats = result.state.env_state.return_stats
    for m, g in enumerate([0.5, 0.9]):
        values = np.array([sum(g ** i for i in range(k + 1)) for k in range(5)])
        n = 4 * len(values)  # 2 envs x 2 episodes, each value once per episode
        # Merged with the prior (mean 0, var 1, count 1e-4).
        count = n + 1e-4
        mean = n * values.mean() / count
        var = (n * values.var() + 1e-4 * 1.0 + values.mean() ** 2 * n * 1e-4 / count) / count
        np.testing.assert_allclose(float(stats.mean[m]), mean, rtol=1e-5)
        np.testing.assert_allclose(float(stats.var[m]), var, rtol=1e-4)


# ------------------------------------------------------------------------------------------------
# PPO: the GAE inputs bootstrap from the final observation; the clip is two-sided
# ------------------------------------------------------------------------------------------------


def test_ppo_gae_bootstraps_from_the_final_observation(monkeypatch):
    seen = {}
    real_gae = onpolicy_module.gae

    def spy_gae(rewards, values, next_values, terminated, truncated, gamma, lambda_):
        jax.debug.callback(lambda r, nv, tr: seen.update(rewards=r, next_values=nv, truncated=tr),
                           rewards, next_values, truncated)
        return real_gae(rewards, values, next_values, terminated, truncated, gamma, lambda_)

    monkeypatch.setattr(onpolicy_module, "gae", spy_gae)  # the skeleton calls GAE for PPO
    cfg = PPOConfig(num_envs=2, num_steps=4, num_epochs=1, num_minibatches=1, hidden_sizes=(8,),
                    total_timesteps=8)
    env = Ticker()
    agent = make_ppo(cfg, env, env.default_params)
    state = agent.init(jax.random.key(0), 0, 1, cfg.hyperparams(), env.default_params)
    jax.block_until_ready(jax.jit(agent.update)(state))
    jax.effects_barrier()
    from rljax.core.networks import ActorCritic

    net = ActorCritic(action_dim=2, discrete=True, hidden_sizes=cfg.hidden_sizes)
    value = lambda o: np.asarray(net.apply(state.params, jnp.asarray(o, jnp.float32))[1])  # noqa: E731
    # obs 1 2 3 | 1; true successors 2 3 4 | 2 (4 = the truncated episode's final observation).
    expected_next = value(np.array([[2.0], [3.0], [4.0], [2.0]]))
    assert abs(float(value([[4.0]])[0] - value([[1.0]])[0])) > 1e-3  # the two bootstraps differ
    np.testing.assert_allclose(np.asarray(seen["next_values"]), np.repeat(expected_next[:, None], 2, 1), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(seen["rewards"])[:, 0], [1, 2, 3, 1])
    np.testing.assert_array_equal(np.asarray(seen["truncated"])[:, 0], [0, 0, 1, 0])


def test_ppo_clip_is_two_sided_by_hand():
    from rljax.agents.ppo import PPOBatch, ppo_loss
    from rljax.core.distributions import Categorical

    # New policy uniform (p = 0.5); old probabilities 1/3 and 1 give ratios 1.5 and 0.5.
    ratios = np.array([1.5, 1.5, 0.5, 0.5])
    adv = np.array([1.0, -1.0, 1.0, -1.0])
    batch = PPOBatch(obs=jnp.zeros((4, 1)), action=jnp.zeros(4, jnp.int32),
                     log_prob=jnp.log(jnp.asarray(0.5 / ratios, jnp.float32)), value=jnp.zeros(4),
                     advantage=jnp.asarray(adv, jnp.float32), target=jnp.zeros(4))

    def apply_fn(logits, obs):
        return Categorical(logits=logits), jnp.zeros(4)

    hp = dataclasses.replace(PPOConfig(), clip_eps=0.2, ent_coef=0.0, vf_coef=0.0).hyperparams()
    loss, m = ppo_loss(jnp.zeros((4, 2)), apply_fn, batch, hp, normalize_advantages=False)
    # min(r A, clip(r, 0.8, 1.2) A): r=1.5: min(1.5, 1.2) = 1.2 and min(-1.5, -1.2) = -1.5;
    # r=0.5: min(0.5, 0.8) = 0.5 and min(-0.5, -0.8) = -0.8. Loss -(1.2 - 1.5 + 0.5 - 0.8) / 4.
    np.testing.assert_allclose(m["policy_loss"], 0.15, rtol=1e-6)
    np.testing.assert_allclose(m["clip_fraction"], 1.0)
    grads = jax.grad(lambda lg: ppo_loss(lg, apply_fn, batch, hp, normalize_advantages=False)[0])(jnp.zeros((4, 2)))
    # The clipped samples (r above 1 + eps with A > 0, below 1 - eps with A < 0) give no gradient;
    # the others do.
    norms = np.abs(np.asarray(grads)).sum(1)
    assert norms[0] == 0.0 and norms[3] == 0.0 and norms[1] > 0.1 and norms[2] > 0.1, norms


# ------------------------------------------------------------------------------------------------
# DQN: double_q reaches the loss through the agent
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("double_q", [False, True])
def test_dqn_agent_target_follows_double_q(double_q):
    """Online Q ties at v for both actions (so the taken action does not matter and argmax picks
    action 0); the target net says Q_target = [t0, t1] with t1 > t0. Plain DQN bootstraps from
    max Q_target = t1, double DQN from Q_target(argmax Q_online = 0) = t0."""
    from tests.support.endless import Endless

    cfg = DQNConfig(num_envs=2, num_steps=1, batch_size=8, buffer_size=16, learning_starts=0, gradient_steps=1,
                    hidden_sizes=(8,), double_q=double_q, gamma=0.5, total_timesteps=1000)
    env = Endless()
    agent = make_dqn(cfg, env, env.default_params)
    state = agent.init(jax.random.key(0), 0, 10, cfg.hyperparams(), env.default_params)
    v, t0, t1 = 0.25, 1.0, 3.0

    def head(params, bias):
        q = params["params"]["q"]
        return {"params": {**params["params"], "q": {"kernel": jnp.zeros_like(q["kernel"]),
                                                      "bias": jnp.asarray(bias, jnp.float32)}}}

    state = state.replace(learner=state.learner._replace(params=head(state.learner.params, [v, v]),
                                                         target_params=head(state.learner.target_params, [t0, t1])))
    _, out = jax.jit(agent.update)(state)
    # Endless: reward 1, never terminates, obs 1 everywhere: y = 1 + gamma * bootstrap.
    y = 1.0 + 0.5 * (t0 if double_q else t1)
    np.testing.assert_allclose(float(out.metrics["td_loss"]), 0.5 * (v - y) ** 2, rtol=1e-6)
