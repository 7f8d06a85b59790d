"""A2C: the loss and one RMSprop step by hand, each RMSprop form (optax, PyTorch, TF1) against its
reference rule for several steps, config validation, the registry entry, a probe
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


# Reference update rules, written from each library's documented algorithm (float64), with decay
# rho = 0.99, eps = 1e-5, momentum 0, no weight decay, not centred; each returns a step's update
# (the parameter change) and the new average of squared gradients.


def _torch_rmsprop(g, v, lr):
    """torch.optim.RMSprop (SB3's A2C): square_avg starts at 0; p -= lr * g / (sqrt(square_avg) + eps)."""
    v = 0.99 * v + (1 - 0.99) * g * g
    return -lr * g / (np.sqrt(v) + 1e-5), v


def _tf1_rmsprop(g, v, lr):
    """TF1 tf.train.RMSPropOptimizer (Baselines' A2C): the "rms" slot starts at 1;
    ms = rho ms + (1 - rho) g^2; mom = lr g / sqrt(ms + eps); var -= mom."""
    v = 0.99 * v + (1 - 0.99) * g * g
    return -lr * g / np.sqrt(v + 1e-5), v


def _optax_rmsprop(g, v, lr):
    """optax.scale_by_rms(decay=0.99, eps=1e-5): nu starts at 0; u = g / sqrt(nu + eps)."""
    v = 0.99 * v + (1 - 0.99) * g * g
    return -lr * g / np.sqrt(v + 1e-5), v


@pytest.mark.parametrize("rmsprop, reference, v0", [("optax", _optax_rmsprop, 0.0), ("torch", _torch_rmsprop, 0.0),
                                                    ("tf1", _tf1_rmsprop, 1.0)])
def test_each_rmsprop_form_follows_its_reference_rule_for_several_steps(rmsprop, reference, v0):
    # Gradients under the clipping threshold (global norm <= 0.5), of mixed size and sign, so that
    # the average's start and where eps sits both show in every step.
    grads = np.array([[0.3, -0.004, 0.0], [0.01, 0.2, -0.05], [-0.25, 0.001, 0.1], [0.02, -0.3, 0.0003]])
    tx = a2c_optimizer("rmsprop", _hp(max_grad_norm=0.5), 0.1, rmsprop)
    state, v = tx.init(jnp.zeros(3, jnp.float32)), np.full(3, v0)
    for g in grads:
        updates, state = tx.update(jnp.asarray(g, jnp.float32), state)
        want, v = reference(g, v, 0.1)
        assert updates.dtype == jnp.float32
        np.testing.assert_allclose(updates, want, rtol=2e-5, atol=1e-9)


def test_the_rmsprop_forms_differ_where_their_rules_do():
    """One step on g = 0.01 (one element): 0.1 * 0.01 / sqrt(1e-6 + 1e-5) = 0.3015 (optax),
    0.1 * 0.01 / (1e-3 + 1e-5) = 0.9901 (torch), 0.1 * 0.01 / sqrt(0.99 + 1e-6 + 1e-5) = 0.001005 (tf1)."""
    steps = {}
    for form in ("optax", "torch", "tf1"):
        tx = a2c_optimizer("rmsprop", _hp(), 0.1, form)
        steps[form] = float(tx.update(jnp.array([0.01]), tx.init(jnp.zeros(1)))[0][0])
    np.testing.assert_allclose([steps["optax"], steps["torch"], steps["tf1"]], [-0.30151, -0.99010, -0.0010050],
                               rtol=1e-4)


def test_the_default_is_optax_rmsprop_and_adam_ignores_the_form():
    assert A2CConfig().optimizer == "rmsprop" and A2CConfig().rmsprop == "optax"
    g, params = jnp.array([0.3, -0.4, 0.01]), jnp.zeros(3)
    adam = [a2c_optimizer("adam", _hp(), 0.1, form) for form in ("optax", "torch", "tf1")]
    steps = [tx.update(g, tx.init(params))[0] for tx in adam]
    np.testing.assert_array_equal(steps[0], steps[1])
    np.testing.assert_array_equal(steps[0], steps[2])


def test_the_config_form_reaches_the_agents_optimiser():
    """tf1's average of squared gradients starts at 1 in the train state, optax's at 0."""
    import optax

    from rljax.agents import build_agent
    from rljax.core.registry import make

    starts = {}
    for form in ("optax", "tf1"):
        config = A2CConfig(env="CartPole-v1", num_envs=2, num_steps=4, hidden_sizes=(4,), rmsprop=form)
        env, env_params = make(config.env)
        state = build_agent(config, env, env_params, None).init(jax.random.key(0), 0, 2, config.hyperparams(),
                                                                 env_params)
        is_rms = lambda x: isinstance(x, optax.ScaleByRmsState)  # noqa: E731
        (rms,) = [x for x in jax.tree.leaves(state.opt_state, is_leaf=is_rms) if is_rms(x)]
        starts[form] = {float(v) for leaf in jax.tree.leaves(rms.nu) for v in np.unique(np.asarray(leaf))}
    assert starts == {"optax": {0.0}, "tf1": {1.0}}


@pytest.mark.parametrize("args, match", [
    (("rmsprop", "keras"), r"rmsprop='keras' \(one of \('optax', 'torch', 'tf1'\)\)"),
    (("sgd", "optax"), r"name='sgd' \(one of \('rmsprop', 'adam'\)\)"),
])
def test_a2c_optimizer_names_a_bad_choice_and_the_valid_ones(args, match):
    with pytest.raises(ValueError, match=match):
        a2c_optimizer(args[0], _hp(), 0.1, args[1])


@pytest.mark.parametrize("kw, match", [
    (dict(optimizer="sgd"), "optimizer='sgd'"),
    (dict(rmsprop="pytorch"), r"rmsprop='pytorch' is not one of \('optax', 'torch', 'tf1'\)"),
    (dict(optimizer="adam", rmsprop="torch"), r"rmsprop='torch' picks RMSprop's form, but optimizer='adam'"),
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
