"""The on-policy skeleton shared by PPO, PQN and A2C: the annealed step size, the schedule
fraction, epochs of minibatches, the shared state and update (through fake hooks on CartPole), the
config checks and the explained variance, each against a hand computation."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import envs
from rljax.agents.onpolicy import (OnPolicyConfig, OnPolicyContext, OnPolicyHooks, annealed_learning_rate,
                                   explained_variance, make_onpolicy_agent, minibatch_epochs)
from rljax.core.config import field
from rljax.core.counters import Count


def test_annealed_learning_rate_decays_linearly_to_zero_over_the_run():
    hp = SimpleNamespace(learning_rate=jnp.float32(0.01))
    for updates, expected in [(0, 0.01), (1, 0.0075), (3, 0.0025), (4, 0.0)]:
        np.testing.assert_allclose(annealed_learning_rate(hp, jnp.int32(updates), jnp.int32(4), True), expected,
                                   rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(annealed_learning_rate(hp, jnp.int32(3), jnp.int32(4), False), 0.01)


def test_context_fraction_counts_updates():
    ctx = OnPolicyContext(hyperparams=None, updates=jnp.int32(3), num_updates=jnp.int32(10),
                          learning_rate=jnp.float32(0.1), optimizer=optax.sgd(0.1), values={})
    np.testing.assert_allclose(ctx.fraction(0.5), 3 / 5)
    np.testing.assert_allclose(ctx.fraction(0.2), 1.0)   # the span (2 updates) is over
    np.testing.assert_allclose(ctx.fraction(0.0), 1.0)   # an empty span: over from the start


def test_minibatch_epochs_steps_once_per_minibatch_and_sees_every_sample_once_per_epoch():
    # loss = w * sum(x of the minibatch): each step's gradient is its minibatch's sum, so after SGD
    # with step 1 the weight has moved by -(sum over every step), which is num_epochs * sum(x) iff
    # every sample is used exactly once per epoch.
    x = jnp.arange(1.0, 13.0)                                   # 12 samples, sum 78
    batch = {"x": x, "pair": jnp.stack([x, -x], axis=1)}      # [12] and [12, 2] leaves, shuffled together

    def loss(params, mb):
        assert mb["x"].shape == (3,) and mb["pair"].shape == (3, 2)   # 12 samples / 4 minibatches
        same_rows = jnp.all(mb["pair"][:, 0] == mb["x"]).astype(jnp.float32)
        return params["w"] * jnp.sum(mb["x"]), {"n": jnp.float32(mb["x"].shape[0]), "same_rows": same_rows}

    tx = optax.sgd(1.0)
    params = {"w": jnp.float32(0.0)}
    new, _, metrics = jax.jit(lambda p, s, b, k: minibatch_epochs(loss, p, s, tx, b, k, num_epochs=2,
                                                                   num_minibatches=4))(params, tx.init(params),
                                                                                        batch, jax.random.key(0))
    np.testing.assert_allclose(new["w"], -2 * 78.0)
    assert float(metrics["n"]) == 3.0 and float(metrics["same_rows"]) == 1.0
    # grad_norm: |the minibatch's sum|, averaged over the 8 steps = 2 * 78 / 8.
    np.testing.assert_allclose(metrics["grad_norm"], 78.0 / 4)


def test_explained_variance_by_hand():
    t = jnp.array([1.0, 2.0, 3.0, 4.0])                       # Var = 1.25
    np.testing.assert_allclose(explained_variance(t, t), 1.0)
    np.testing.assert_allclose(explained_variance(t, jnp.zeros(4)), 0.0, atol=1e-7)
    # residual [0, 0, 0, -1]: mean -0.25, Var = (3 * 0.0625 + 0.5625) / 4 = 0.1875 -> 1 - 0.15.
    np.testing.assert_allclose(explained_variance(t, jnp.array([1.0, 2.0, 3.0, 5.0])), 0.85, rtol=1e-6)
    np.testing.assert_allclose(explained_variance(t, -t), 1.0 - 5.0 / 1.25, rtol=1e-6)  # worse than a constant
    # Constant targets: the variance floor 1e-8 keeps it finite.
    np.testing.assert_allclose(explained_variance(jnp.full(2, 2.0), jnp.full(2, 2.0)), 1.0)
    # Over two devices the moments are the global ones: the same 0.85 on each.
    per_device = jax.vmap(lambda a, b: explained_variance(a, b, "d"), axis_name="d")(
        t.reshape(2, 2), jnp.array([[1.0, 2.0], [3.0, 5.0]]))
    np.testing.assert_allclose(per_device, [0.85, 0.85], rtol=1e-6)


# ------------------------------------------------------------------------------ config checks

@dataclasses.dataclass(frozen=True)
class TinyConfig(OnPolicyConfig):
    learning_rate: float = field(0.4, "step size", sweepable=True)


TINY = TinyConfig(num_envs=2, num_steps=3, num_epochs=1, num_minibatches=2, total_timesteps=24)


@pytest.mark.parametrize("kw, match", [
    (dict(num_steps=0), r"num_steps must be a positive integer, got 0"),
    (dict(num_minibatches=4), r"2 \* 3 / 1 = 6 is not divisible by num_minibatches=4"),
    (dict(total_timesteps=5), r"total_timesteps=5 is less than one update \(num_envs \* num_steps = 6\)"),
    (dict(num_epochs=0), r"num_epochs must be a positive integer, got 0"),
])
def test_config_validation_names_the_value(kw, match):
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(TINY, **kw)


def test_config_sizes():
    assert TINY.env_steps_per_update == 6 and TINY.minibatch_size == 3


# ------------------------------------------------------------------------------ the shared update

def _hooks():
    """A linear 'network' on the observation; learn takes one SGD step of the context's optimiser on
    a constant gradient 1 and reports what it was given."""
    def learn(params, opt_state, traj, key, ctx):
        grads = jax.tree.map(jnp.ones_like, params)
        updates, opt_state = ctx.optimizer.update(grads, opt_state, params)
        seen = {"T": jnp.float32(traj.reward.shape[0]), "B": jnp.float32(traj.reward.shape[1]),
                "reward_sum": jnp.sum(traj.reward)}
        return optax.apply_updates(params, updates), opt_state, seen

    return OnPolicyHooks(
        init_params=lambda key, obs: {"w": jnp.zeros(obs.shape[1:], jnp.float32)},
        optimizer=lambda hp, lr: optax.sgd(lr),
        behaviour=lambda params, ctx: (lambda key, obs: (jnp.zeros(obs.shape[:1], jnp.int32), ())),
        learn=learn, act=lambda params, obs, key, exploration, deterministic: jnp.zeros(obs.shape[:1], jnp.int32),
        schedule=lambda ctx: {"frac": ctx.fraction(0.5)})


def test_state_and_update_on_cartpole_by_hand():
    env, params = envs.make("CartPole-v1")
    agent = make_onpolicy_agent(TINY, env, params, None, _hooks(), anneal_lr=True)
    state = agent.init(jax.random.key(0), 0, 4, TINY.hyperparams(), params)
    assert state.obs.shape == (2, 4) and state.params["w"].shape == (4,)
    assert int(state.updates) == 0 and int(state.num_updates) == 4 and agent.env_steps_per_update == 6
    update = jax.jit(agent.update)
    rows = []
    for _ in range(4):
        state, out = update(state)
        rows.append({k: float(v) for k, v in out.metrics.items()})
    # The step size 0.4 * (1 - u / 4) before update u, the schedule over the first 2 updates.
    np.testing.assert_allclose([r["learning_rate"] for r in rows], [0.4, 0.3, 0.2, 0.1], rtol=1e-6)
    np.testing.assert_allclose([r["frac"] for r in rows], [0.0, 0.5, 1.0, 1.0])
    assert all(r["T"] == 3 and r["B"] == 2 and r["reward_sum"] == 6.0 for r in rows)  # CartPole: reward 1
    assert all(r["param_desync"] == 0.0 for r in rows)
    # SGD on gradient 1 with those step sizes: w = -(0.4 + 0.3 + 0.2 + 0.1) everywhere.
    np.testing.assert_allclose(state.params["w"], np.full(4, -1.0), rtol=1e-6)
    assert int(state.updates) == 4 and state.obs.shape == (2, 4)
    # No annealing: the configured step size at every update.
    flat = make_onpolicy_agent(TINY, env, params, None, _hooks(), anneal_lr=False)
    s = flat.init(jax.random.key(0), 0, 4, TINY.hyperparams(), params)
    _, out = jax.jit(flat.update)(s.replace(updates=Count.of(3)))
    np.testing.assert_allclose(out.metrics["learning_rate"], 0.4)
