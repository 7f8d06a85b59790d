"""The off-policy skeleton shared by DQN, SAC and TD3: replay items (terminated vs truncated),
learning gated by ``learning_starts``, the update context, the config checks and the small helpers.

The env is ``Ticker`` (:mod:`tests.support.ticker`): observation ``time + 1``, reward ``time + 1``,
so every item's fields can be computed by hand; ``Stopper`` is the same env terminating after its
second step instead of being truncated there.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.agents.offpolicy import (OffPolicyConfig, OffPolicyHooks, ReplayItem, UpdateContext, collect,
                                    init_collector, make_offpolicy_agent, make_replay, masked_mean, periodic, polyak,
                                    replay_learning)
from rljax.core.wrappers import EpisodeStatistics, VecEnv
from tests.support.ticker import Ticker, TickerParams

GAMMA = 0.5


class Stopper(Ticker):
    """Ticker that terminates (not truncates) after the second step of each episode."""

    def step_env(self, key, state, action, params):
        obs, state, reward, _, info = super().step_env(key, state, action, params)
        return obs, state, reward, state.time >= 2, info


def _zero_policy(key, obs):
    return jnp.zeros(obs.shape[:1], jnp.int32), ()


@pytest.mark.parametrize("terminates", [False, True])
def test_collect_items_discount_zero_after_termination_and_bootstrap_from_final_obs_after_truncation(terminates):
    # Episodes of 2 steps: obs 1 -> (r 1) -> obs 2 -> (r 2) -> final obs 3, then again from obs 1.
    env, params = (Stopper(), TickerParams(max_steps_in_episode=10)) if terminates else \
        (Ticker(), TickerParams(max_steps_in_episode=2))
    venv = EpisodeStatistics(VecEnv(env, 1))
    collector = init_collector(venv, params, _zero_policy, jax.random.key(0), 2)
    collector, items, episodes = collect(venv, params, _zero_policy, collector, jax.random.key(1), 4, 2, GAMMA)
    items = jax.tree.map(np.asarray, items)
    # Item 0 starts on the placeholder tail (n - 1 = 1 step); items 1..3 start at steps 0..2.
    np.testing.assert_array_equal(items.valid, [False, True, True, True])
    np.testing.assert_array_equal(items.obs[1:, 0], [1.0, 2.0, 1.0])
    np.testing.assert_allclose(items.reward[1:], [1 + GAMMA * 2, 2.0, 1 + GAMMA * 2])  # cut at the episode end
    # Truncated: bootstrap gamma^m from the final observation 3; terminated: no bootstrap.
    expected = [0.0, 0.0, 0.0] if terminates else [GAMMA ** 2, GAMMA, GAMMA ** 2]
    np.testing.assert_allclose(items.discount[1:], expected)
    np.testing.assert_array_equal(items.next_obs[1:, 0], [3.0, 3.0, 3.0])
    assert float(episodes.count) == 2.0
    # The last step (obs 2, r 2) is carried: the next update's first item starts there, and is valid.
    np.testing.assert_array_equal(collector.tail_valid, [True])
    _, items, _ = collect(venv, params, _zero_policy, collector, jax.random.key(2), 1, 2, GAMMA)
    assert bool(items.valid[0]) and float(items.obs[0, 0]) == 2.0 and float(items.reward[0]) == 2.0
    assert float(items.discount[0]) == (0.0 if terminates else GAMMA)


def _buffer_of(valid):
    """A uniform replay of capacity 4 holding items with reward 10 + i and the given validity."""
    replay = make_replay(4, prioritized=False)
    n = len(valid)
    items = ReplayItem(obs=jnp.zeros((n, 1)), action=jnp.zeros((n,), jnp.int32),
                       reward=10.0 + jnp.arange(n, dtype=jnp.float32), discount=jnp.ones((n,)),
                       next_obs=jnp.zeros((n, 1)), valid=jnp.array(valid))
    buffer = replay.init(jax.tree.map(lambda x: x[0], items), 0.6)
    return replay, replay.add(buffer, items)


def _counting_step(learner, items, weights, key):
    """Counts its calls; reports the weights it got (0 exactly for invalid items)."""
    ok = jnp.all(weights == items.valid.astype(jnp.float32))
    return learner + 1, jnp.ones_like(weights), {"weights_are_validity": ok.astype(jnp.float32),
                                                  "step": learner.astype(jnp.float32)}


@pytest.mark.parametrize("active", [False, True])
def test_replay_learning_keeps_nothing_while_inactive_and_weights_invalid_items_zero(active):
    replay, buffer = _buffer_of([True, False, True, False])
    learner, _, metrics = replay_learning(_counting_step, jnp.int32(5), replay, buffer, jax.random.key(0),
                                          gradient_steps=3, batch_size=8, beta=jnp.float32(1.0),
                                          active=jnp.bool_(active))
    if active:
        assert int(learner) == 8  # three steps, each on the previous one's learner
        assert float(metrics["weights_are_validity"]) == 1.0
        assert float(metrics["step"]) == (5 + 6 + 7) / 3  # the mean over the steps
    else:
        assert int(learner) == 5 and float(metrics["step"]) == 0.0 and float(metrics["weights_are_validity"]) == 0.0


def test_prepare_is_applied_to_each_sampled_batch():
    replay, buffer = _buffer_of([True, True])

    def step(learner, items, weights, key):
        return learner, jnp.ones_like(weights), {"reward": jnp.mean(items.reward)}

    _, _, metrics = replay_learning(step, jnp.int32(0), replay, buffer, jax.random.key(0), gradient_steps=1,
                                    batch_size=64, beta=jnp.float32(1.0), active=jnp.bool_(True),
                                    prepare=lambda b: b._replace(reward=b.reward * 0 - 1.0))
    assert float(metrics["reward"]) == -1.0


def test_masked_mean_averages_over_the_weighted_items_only():
    x = jnp.array([1.0, 2.0, 4.0, 8.0])
    np.testing.assert_allclose(masked_mean(x, jnp.array([1.0, 0.0, 0.5, 0.0])), (1.0 + 2.0) / 2)
    np.testing.assert_allclose(masked_mean(x, jnp.zeros(4)), 0.0)  # no valid item: 0, not NaN


def test_periodic_and_polyak():
    assert bool(periodic(jnp.int32(400), jnp.int32(500), 500))
    assert not bool(periodic(jnp.int32(500), jnp.int32(600), 500))
    assert bool(periodic(jnp.int32(990), jnp.int32(1090), 500))
    np.testing.assert_allclose(polyak(jnp.array(10.0), jnp.array(0.0), 0.1), 1.0)
    np.testing.assert_allclose(polyak(jnp.array(10.0), jnp.array(0.0), 1.0), 10.0)


def test_update_context_fraction_by_hand():
    ctx = UpdateContext(hyperparams=None, steps_before=jnp.int32(250), steps_after=jnp.int32(260),
                        total_steps=jnp.int32(1000), progress=jnp.float32(0.25), warmup=jnp.bool_(False),
                        active=jnp.bool_(True), values={})
    np.testing.assert_allclose(ctx.fraction(0.5), 250 / 500)
    np.testing.assert_allclose(ctx.fraction(0.1), 1.0)  # past the span: clipped
    np.testing.assert_allclose(ctx.fraction(1.0), 0.25)
    np.testing.assert_allclose(ctx.fraction(0.0), 1.0)  # an empty span is over from the start


# ------------------------------------------------------------------------- the skeleton's update

CONFIG = OffPolicyConfig(num_envs=2, num_steps=2, gradient_steps=2, batch_size=4, buffer_size=16, learning_starts=8,
                         total_timesteps=16)


def _skeleton_hooks():
    """A learner that counts its gradient steps; the schedule reports the context it was given."""
    def learn_step(learner, items, weights, key, ctx):
        return learner + 1, jnp.ones_like(weights), {"loss": jnp.float32(1.0)}

    def schedule(ctx):
        return {"steps_before": ctx.steps_before.to_float(), "progress": ctx.progress,
                "warmup": ctx.warmup.astype(jnp.float32), "active": ctx.active.astype(jnp.float32)}

    return OffPolicyHooks(example_action=jnp.zeros((), jnp.int32), init_learner=lambda key, obs, hp: jnp.int32(0),
                          behaviour=lambda learner, ctx: (lambda key, obs: jnp.zeros(obs.shape[:1], jnp.int32)),
                          learn_step=learn_step, policy_params=lambda learner, hp: (learner, 0.0),
                          act=lambda params, obs, key, exploration, deterministic: jnp.zeros(obs.shape[:1], jnp.int32),
                          params_of=lambda learner: learner, schedule=schedule,
                          after_learning=lambda learner, ctx: (learner, {"after": learner.astype(jnp.float32)}))


def test_update_context_and_learning_starts_gating_by_hand():
    env = Ticker()
    agent = make_offpolicy_agent(CONFIG, env, env.default_params, None, _skeleton_hooks())
    state = agent.init(jax.random.key(0), 0, 4, CONFIG.hyperparams(), env.default_params)
    assert state.collector.obs.shape == (2, 1) and state.buffer.data.obs.shape == (16, 1)
    update = jax.jit(agent.update)
    rows = []
    for _ in range(4):
        state, out = update(state)
        rows.append({k: float(v) for k, v in out.metrics.items()})
    # 4 env steps per update, 16 in the run, learning from 8: update u covers steps (4u, 4u + 4]
    # (the boundary on an update's edge: update 1 ends at 8 and learns, update 2 starts at 8).
    assert [r["steps_before"] for r in rows] == [0, 4, 8, 12]
    assert [r["progress"] for r in rows] == [0.0, 0.25, 0.5, 0.75]
    assert [r["warmup"] for r in rows] == [1, 1, 0, 0]           # steps_before < 8
    assert [r["active"] for r in rows] == [0, 1, 1, 1]           # steps_after >= 8
    assert [r["after"] for r in rows] == [0, 2, 4, 6]            # 2 gradient steps per active update
    assert [r["loss"] for r in rows] == [0, 1, 1, 1]             # inactive updates report 0
    assert [r["buffer_size"] for r in rows] == [4, 8, 12, 16]
    assert int(state.updates) == 4 and int(state.learner) == 6


# ------------------------------------------------------------------------- config validation

@pytest.mark.parametrize("kw, match", [
    (dict(learning_starts=-1), r"learning_starts .*-1"),
    (dict(buffer_size=2 ** 30 + 1), r"buffer_size .*1073741825.*2\*\*30"),
    (dict(buffer_size=1001, num_devices=2), r"buffer_size=1001 is not divisible by num_devices=2"),
    (dict(gamma=1.5), r"gamma .*1.5"),
    (dict(tau=0.0), r"tau .*0.0"),
    (dict(max_grad_norm=0.0), r"max_grad_norm .*0.0"),
    (dict(priority_alpha=-0.5), r"priority_alpha .*-0.5"),
    (dict(gradient_steps=0), r"gradient_steps must be a positive integer, got 0"),
])
def test_config_validation_names_the_value(kw, match):
    with pytest.raises(ValueError, match=match):
        OffPolicyConfig(**kw)


def test_env_steps_per_update_and_a_valid_config():
    config = dataclasses.replace(CONFIG, num_envs=4, num_steps=3, buffer_size=24)
    assert config.env_steps_per_update == 12
