"""rljax.agents.d4pg: the categorical critic loss by hand (the projected target of the target actor's
action, the lower-mean critic of two, importance weights), the actor ascending the critic's mean, the
config's refusals, and that TD3's skeleton carries it (a short Pendulum run; its learning target is slow)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.agents.d4pg import D4PGConfig, d4pg_actor_loss, d4pg_critic_loss, make_d4pg
from rljax.agents.offpolicy import ReplayItem
from rljax.agents.td3 import TD3Networks
from rljax.core.distributional import support

ATOMS = support(0.0, 4.0, 5)  # 0, 1, 2, 3, 4


def _items(reward, discount):
    n = len(reward)
    return ReplayItem(obs=jnp.zeros((n, 1)), action=jnp.zeros((n, 1)), reward=jnp.asarray(reward, jnp.float32),
                      discount=jnp.asarray(discount, jnp.float32), next_obs=jnp.ones((n, 1)),
                      valid=jnp.ones((n,), bool))


def _onehot_logits(index, n):
    return jnp.log(jax.nn.one_hot(jnp.asarray(index), 5) + 1e-30) * jnp.ones((n, 1))


def _nets(critic):
    """Actor ``mu(s) = params * s``; ``critic(params, action) -> logits [C, N, 5]``."""
    return TD3Networks(init=None, actor=lambda p, obs: p * obs, critic=lambda p, obs, a: critic(p, a),
                       low=jnp.array([-1.0]), high=jnp.array([1.0]))


def test_the_critic_loss_is_the_cross_entropy_to_the_projected_target_of_the_target_action():
    # Target critic: all mass on atom 4 if a' > 0 else atom 0; target actor mu'(1) = 0.5 > 0 -> atom 4.
    # Online critic: the logits in its params (one critic), the action ignored.
    def critic(p, a):
        if isinstance(p, str):
            return jnp.where(a[:, :1] > 0, _onehot_logits(4, a.shape[0]), _onehot_logits(0, a.shape[0]))[None]
        return p

    probs = np.array([[0.1, 0.2, 0.4, 0.2, 0.1], [0.2, 0.2, 0.2, 0.2, 0.2], [0.05, 0.05, 0.1, 0.3, 0.5]])
    online = jnp.log(jnp.asarray(probs))[None]
    # Item 0 terminated with reward 2.5: half on atoms 2 and 3. Item 1: 1 + 0.5 * 4 = 3: atom 3.
    # Item 2 truncated-like (bootstraps) with reward 0, discount 0.25: 0.25 * 4 = 1: atom 1.
    items = _items([2.5, 1.0, 0.0], [0.0, 0.5, 0.25])
    target = np.array([[0, 0, 0.5, 0.5, 0], [0, 0, 0, 1, 0], [0, 1, 0, 0, 0]])
    ce = -np.sum(target * np.log(probs), axis=1)
    loss, (priority, m) = d4pg_critic_loss(online, "target", jnp.float32(0.5), _nets(critic), items, jnp.ones(3),
                                           jax.random.key(0), jnp.float32(0.0), jnp.float32(0.5), atoms=ATOMS)
    np.testing.assert_allclose(float(loss), ce.mean(), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(priority), ce, rtol=1e-5)
    np.testing.assert_allclose(float(m["target_mean"]), np.mean([2.5, 3.0, 1.0]), rtol=1e-5)
    np.testing.assert_allclose(float(m["q_mean"]), np.mean(probs @ np.arange(5.0)), rtol=1e-5)
    # Weights scale each item, a zero weight leaves it out; the gradient is softmax - target (per item / N).
    w = jnp.array([2.0, 0.5, 0.0])
    loss_w, _ = d4pg_critic_loss(online, "target", jnp.float32(0.5), _nets(critic), items, w, jax.random.key(0),
                                 jnp.float32(0.0), jnp.float32(0.5), atoms=ATOMS)
    np.testing.assert_allclose(float(loss_w), (2.0 * ce[0] + 0.5 * ce[1]) / 2, rtol=1e-5)
    grad = jax.grad(lambda q: d4pg_critic_loss(q, "target", jnp.float32(0.5), _nets(critic), items, jnp.ones(3),
                                               jax.random.key(0), jnp.float32(0.0), jnp.float32(0.5),
                                               atoms=ATOMS)[0])(online)
    np.testing.assert_allclose(np.asarray(grad[0]), (probs - target) / 3, atol=1e-6)
    # The target actor's action decides: mu'(1) = -0.5 puts the next distribution on atom 0.
    _, (_, m) = d4pg_critic_loss(online, "target", jnp.float32(-0.5), _nets(critic), items, jnp.ones(3),
                                 jax.random.key(0), jnp.float32(0.0), jnp.float32(0.5), atoms=ATOMS)
    np.testing.assert_allclose(float(m["target_mean"]), np.mean([2.5, 1.0, 0.0]), rtol=1e-5)


def test_with_two_critics_each_item_bootstraps_from_the_lower_mean_one():
    # Target critics: critic 0 on atom 3 for item 0 and atom 1 for item 1; critic 1 the other way round.
    def critic(p, a):
        if isinstance(p, str):
            c0 = jnp.stack([_onehot_logits(3, 1)[0], _onehot_logits(1, 1)[0]])
            c1 = jnp.stack([_onehot_logits(1, 1)[0], _onehot_logits(3, 1)[0]])
            return jnp.stack([c0, c1])
        return p

    online = jnp.zeros((2, 2, 5))  # two uniform online critics
    items = _items([0.0, 0.0], [1.0, 1.0])
    loss, (priority, m) = d4pg_critic_loss(online, "target", jnp.float32(0.0), _nets(critic), items, jnp.ones(2),
                                           jax.random.key(0), jnp.float32(0.0), jnp.float32(0.5), atoms=ATOMS)
    np.testing.assert_allclose(float(m["target_mean"]), 1.0, rtol=1e-5)  # atom 1 for both items
    # Each critic's cross-entropy to a one-hot target is log 5; the loss sums the critics, the priority averages.
    np.testing.assert_allclose(float(loss), 2 * np.log(5), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(priority), [np.log(5)] * 2, rtol=1e-5)


def test_the_actor_ascends_the_first_critics_mean():
    # Critic 0's distribution: mass (1 - a) / 2 on atom 0 and (1 + a) / 2 on atom 4: mean 2 + 2a; critic 1 ignored.
    def critic(p, a):
        p0 = (1 - a[:, 0]) / 2
        probs = jnp.stack([p0, 0 * p0, 0 * p0, 0 * p0, 1 - p0], axis=-1)
        return jnp.stack([jnp.log(probs + 1e-12), jnp.zeros_like(probs)])

    obs = jnp.ones((4, 1))
    loss, m = d4pg_actor_loss(jnp.float32(0.5), None, _nets(critic), obs, jnp.ones(4), atoms=ATOMS)
    np.testing.assert_allclose(float(loss), -3.0, rtol=1e-5)
    g = jax.grad(lambda p: d4pg_actor_loss(p, None, _nets(critic), obs, jnp.ones(4), atoms=ATOMS)[0])(jnp.float32(0.5))
    np.testing.assert_allclose(float(g), -2.0, rtol=1e-4)  # descent raises mu towards the higher mean


@pytest.mark.parametrize("kw, match", [
    (dict(num_atoms=1), "num_atoms must be"),
    (dict(v_min=0.0, v_max=-1.0), "v_min=0.0, v_max=-1.0: v_max must be greater than v_min"),
    (dict(num_critics=3), "num_critics must be"),
])
def test_bad_configs_are_refused_naming_the_value(kw, match):
    with pytest.raises(ValueError, match=match):
        D4PGConfig(**kw).validate()


def test_a_discrete_env_is_refused_by_name():
    import rljax

    env, params = rljax.make("CartPole-v1")
    with pytest.raises(ValueError, match="D4PG"):
        make_d4pg(D4PGConfig(env="CartPole-v1"), env, params)


def test_a_short_run_trains_the_distributional_critic_and_reports_its_spread(tiny_run):
    _, result = tiny_run("d4pg")  # the shared tiny D4PG run (tests/conftest.py): 11 atoms on [-1000, 0]
    row = result.rows[-1]
    assert np.isfinite(row["critic_loss"]) and row["z_std_mean"] > 0
    assert -1000.0 <= row["q_mean"] <= 0.0
    critic = result.agent.params_of(result.state)[1]
    assert jax.tree.leaves(critic)[0].shape[0] == 1  # one critic


# Slow (a learning run, 3 seeds x 2e4 steps): by default the losses by hand and the short run above stand for it.
@pytest.mark.slow
def test_d4pg_solves_pendulum_on_every_seed():
    from rljax.training.sweep import SweepSpec, run_sweep

    result, _, _ = run_sweep(D4PGConfig(eval_interval=5), SweepSpec(seeds=(0, 1, 2)), quiet=True, plots=False)
    greedy = [rows[-1]["eval/return_mean"] for rows in result.member_rows]
    assert min(greedy) >= -200, greedy
