"""The agent interface and the learning pieces every algorithm shares (rljax.agents.base)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import envs
from rljax.agents.base import (epochs_of_minibatches, gradient_step, make_optimizer, metric_names,
                               shuffled_minibatches)


def test_make_optimizer_is_clip_adam_step():
    params = {"w": jnp.array([1.0, -2.0, 3.0])}
    grads = {"w": jnp.array([30.0, 40.0, 0.0])}  # global norm 50
    manual = optax.chain(optax.clip_by_global_norm(5.0), optax.scale_by_adam(eps=1e-5), optax.scale(-0.1))
    tx = make_optimizer(0.1, 5.0, eps=1e-5)
    got, _ = tx.update(grads, tx.init(params), params)
    want, _ = manual.update(grads, manual.init(params), params)
    np.testing.assert_array_equal(got["w"], want["w"])
    # Without max_grad_norm there is no clipping stage: Adam and the step only.
    assert len(make_optimizer(0.1).init(params)) == 2
    assert len(tx.init(params)) == 3


def test_make_optimizer_takes_traced_values():
    params = jnp.ones(3)

    @jax.jit
    def step(lr, clip):
        tx = make_optimizer(lr, clip)
        return tx.update(jnp.full(3, 2.0), tx.init(params), params)[0]

    # Adam's first step is lr * sign(g) (up to eps), whatever the gradient's scale.
    np.testing.assert_allclose(step(0.5, 1.0), -0.5 * np.ones(3), rtol=1e-5)


def test_gradient_step_by_hand():
    def loss(w, x, *, scale):
        value = scale * jnp.sum(jnp.square(w - x))
        return value, {"loss": value}

    w, x = jnp.array([1.0, 2.0]), jnp.array([0.0, 0.0])
    tx = optax.sgd(0.25)
    params, opt_state, aux, grad_norm = gradient_step(loss, w, tx.init(w), tx, x, scale=0.5)
    # grad = scale * 2 (w - x) = w; one SGD step of 0.25.
    np.testing.assert_allclose(params, w - 0.25 * w)
    np.testing.assert_allclose(aux["loss"], 0.5 * 5.0)
    np.testing.assert_allclose(grad_norm, np.sqrt(5.0))


def test_gradient_step_averages_gradients_over_devices():
    def loss(w, x):
        return jnp.sum(w * x), ()

    tx = optax.sgd(1.0)
    xs = jnp.array([[1.0], [3.0]])  # per-device data; the mean gradient is 2
    params, _, _, grad_norm = jax.vmap(lambda x: gradient_step(loss, jnp.zeros(1), tx.init(jnp.zeros(1)), tx, x,
                                                               axis_name="d"), axis_name="d")(xs)
    np.testing.assert_allclose(params, [[-2.0], [-2.0]])  # identical on both devices
    np.testing.assert_allclose(grad_norm, [2.0, 2.0])


def test_shuffled_minibatches_is_one_permutation_split():
    batch = {"a": jnp.arange(12), "b": jnp.arange(24).reshape(12, 2)}
    mbs = shuffled_minibatches(jax.random.key(3), batch, 4)
    assert mbs["a"].shape == (4, 3) and mbs["b"].shape == (4, 3, 2)
    assert sorted(np.asarray(mbs["a"]).ravel().tolist()) == list(range(12))
    # The same permutation for every leaf.
    np.testing.assert_array_equal(mbs["b"][..., 0], 2 * mbs["a"])
    perm = jax.random.permutation(jax.random.key(3), 12)
    np.testing.assert_array_equal(mbs["a"].ravel(), perm)


def test_epochs_of_minibatches_visits_every_sample_each_epoch():
    batch = jnp.arange(8.0)

    def step(carry, mb):
        return carry + jnp.sum(mb), {"size": jnp.float32(mb.shape[0]), "first": mb[0]}

    total, metrics = epochs_of_minibatches(step, jnp.float32(0), batch, jax.random.key(0), num_epochs=3,
                                           num_minibatches=2)
    np.testing.assert_allclose(total, 3 * 28.0)
    np.testing.assert_allclose(metrics["size"], 4.0)  # the mean over the 6 steps
    keys = jax.random.split(jax.random.key(0), 3)
    firsts = [shuffled_minibatches(k, batch, 2)[:, 0] for k in keys]
    np.testing.assert_allclose(metrics["first"], np.mean(np.concatenate(firsts)))


@pytest.mark.parametrize("name, algo", [("CartPole-v1", "dqn"), ("Pendulum-v1", "sac"), ("CartPole-v1", "ppo")])
def test_metric_names_trace_without_compiling(name, algo):
    from rljax.agents import algorithms

    entry = algorithms()[algo]
    config = entry.config_cls(env=name, num_envs=2, total_timesteps=1000)
    env, env_params = envs.make(name)
    names = metric_names(entry.make(config, env, env_params, None), env_params)
    assert names == tuple(sorted(names)) and {"param_desync"} <= set(names)
    # The same names with a device axis bound.
    agent = entry.make(config, env, env_params, "devices")
    assert metric_names(agent, env_params, axis_name="devices") == names
