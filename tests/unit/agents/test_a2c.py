"""A2C: the loss and one RMSprop step by hand, config validation, the registry entry, a probe
that bootstraps through truncation, and a short CartPole run that must clearly learn (the full
run to a return of 500 is ``python -m experiments.a2c_cartpole``)."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rljax
from rljax.agents.a2c import A2CBatch, A2CConfig, a2c_loss, a2c_optimizer
from rljax.core.distributions import Categorical
from tests.support.endless import assert_actor_critic_bootstraps_through_truncation


def _hp(**kw):
    return dataclasses.replace(A2CConfig(), **kw).hyperparams()


def _fixed_apply(logits, values):
    def apply_fn(params, obs):
        del params, obs
        return Categorical(logits=jnp.asarray(logits)), jnp.asarray(values)
    return apply_fn


def test_a2c_loss_by_hand():
    # Uniform policy over 2 actions: log pi = -log 2 for both samples, entropy log 2.
    batch = A2CBatch(obs=jnp.zeros((2, 1)), action=jnp.array([0, 1]), advantage=jnp.array([2.0, -1.0]),
                     target=jnp.array([2.0, 1.0]))
    apply_fn = _fixed_apply([[0.0, 0.0], [0.0, 0.0]], [1.0, 0.0])
    loss, m = a2c_loss(None, apply_fn, batch, _hp(vf_coef=0.5, ent_coef=0.01))
    # policy: -mean(-log 2 * 2, -log 2 * -1) = -(-2 log 2 + log 2) / 2 = 0.5 log 2
    np.testing.assert_allclose(m["policy_loss"], 0.5 * math.log(2.0), rtol=1e-6)
    # value: 0.5 * mean((1 - 2)^2, (0 - 1)^2) = 0.5
    np.testing.assert_allclose(m["value_loss"], 0.5, rtol=1e-6)
    np.testing.assert_allclose(m["entropy"], math.log(2.0), rtol=1e-6)
    np.testing.assert_allclose(loss, 0.5 * math.log(2.0) + 0.5 * 0.5 - 0.01 * math.log(2.0), rtol=1e-6)


def test_a2c_loss_gradient_raises_the_advantaged_action_and_ignores_the_targets():
    batch = A2CBatch(obs=jnp.zeros((1, 1)), action=jnp.array([1]), advantage=jnp.ones(1), target=jnp.zeros(1))

    def apply_fn(logits, obs):
        return Categorical(logits=jnp.broadcast_to(logits, (1, 2))), jnp.zeros(1)

    grads = jax.grad(lambda p: a2c_loss(p, apply_fn, batch, _hp(ent_coef=0.0))[0])(jnp.zeros(2))
    # d/dlogit_1 of -log softmax_1 = -(1 - 0.5) = -0.5; of logit_0: +0.5 (gradient descent raises action 1).
    np.testing.assert_allclose(grads, [0.5, -0.5], rtol=1e-6)
    # No gradient flows into the advantages or targets (they are constants of the rollout).
    g_adv = jax.grad(lambda a: a2c_loss(jnp.zeros(2), apply_fn, batch._replace(advantage=a), _hp())[0])(jnp.ones(1))
    np.testing.assert_array_equal(g_adv, [0.0])


def test_rmsprop_step_by_hand():
    # One RMSprop step (decay 0.99, eps 1e-5 inside the sqrt) on g = [0.3, -0.4] (norm 0.5, not clipped
    # at 0.5): nu = 0.01 g^2, update = -lr * g / sqrt(nu + eps) = -lr * g / sqrt(0.01 g^2 + 1e-5).
    g = np.array([0.3, -0.4], np.float32)
    tx = a2c_optimizer("rmsprop", _hp(max_grad_norm=0.5), 0.1)
    updates, _ = tx.update(jnp.asarray(g), tx.init(jnp.zeros(2)))
    np.testing.assert_allclose(updates, -0.1 * g / np.sqrt(0.01 * g ** 2 + 1e-5), rtol=1e-5)
    # Clipping: g = [3, -4] (norm 5) is scaled to norm 0.5 first, so the same step.
    updates, _ = tx.update(jnp.asarray(10 * g), tx.init(jnp.zeros(2)))
    np.testing.assert_allclose(updates, -0.1 * g / np.sqrt(0.01 * g ** 2 + 1e-5), rtol=1e-5)


@pytest.mark.parametrize("kw, match", [
    (dict(optimizer="sgd"), "optimizer='sgd'"),
    (dict(learning_rate=0.0), "learning_rate must be > 0"),
    (dict(gae_lambda=1.5), "gae_lambda must be in"),
    (dict(total_timesteps=100), "less than one update"),
])
def test_config_validation_names_the_values(kw, match):
    with pytest.raises(ValueError, match=match):
        A2CConfig(**kw)


def test_registered_with_its_action_space_rule():
    from rljax.agents import algorithms, fits_env

    entry = algorithms()["a2c"]
    assert entry.config_cls is A2CConfig
    cartpole, pendulum = rljax.make("CartPole-v1"), rljax.make("Pendulum-v1")
    assert fits_env("a2c", *cartpole) and fits_env("a2c", *pendulum)
    from rljax.env import Box

    class MatrixActions:
        name = "MatrixActions"

        def action_space(self, params):
            return Box(-1.0, 1.0, (2, 2))

    assert not fits_env("a2c", MatrixActions(), None)
    with pytest.raises(ValueError, match="A2C needs a Discrete action space or a flat Box"):
        entry.fits(MatrixActions(), None)


def test_value_bootstraps_through_truncation():
    """A never-ending MDP cut by a time limit: V = 1 / (1 - gamma) = 2, not the 1.67 of a learner
    that treats the cut as termination."""
    assert_actor_critic_bootstraps_through_truncation(A2CConfig)


def test_cartpole_learns_end_to_end():
    result = rljax.train(A2CConfig(total_timesteps=60_000, seed=0), options=rljax.RunOptions(quiet=True))
    # A random policy scores about 22.
    assert result.final_return > 100, [r["episode_return_mean"] for r in result.rows]
    assert result.rows[-1]["env_steps"] == result.timings["total_env_steps"]


@pytest.mark.slow  # a minute of training
def test_cartpole_reaches_500():
    """The experiment's configuration: the greedy policy returns 500 (the maximum) by 5e5 steps."""
    from experiments import a2c_cartpole

    cfg = A2CConfig(**{**a2c_cartpole.DEFAULTS, "seed": 0, "eval_interval": 4, "eval_episodes": 16})
    result = rljax.train(cfg, options=rljax.RunOptions(quiet=True))
    assert result.rows[-1]["eval/return_mean"] == 500.0, [r.get("eval/return_mean") for r in result.rows]
