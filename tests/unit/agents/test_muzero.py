"""Gumbel MuZero's pieces by hand: the config's ranges, the unrolled targets around a termination, a time
limit and the trajectory's end, the unrolled loss against the network's functions called one by one (scalar
and categorical), the categorical scalar, and the search over the learned model (the root's mask, the
discount's sign in a two-player game). A short run stopped and resumed, and learning on Catch: the
integration tests (tests/integration/test_search_stack.py); CartPole's target: benchmarks/muzero_targets.py."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
from rljax.agents.muzero import MuZeroBatch, MuZeroConfig, MuZeroNetwork, muzero_fits, muzero_loss, muzero_network, \
    muzero_search, unroll_targets
from rljax.core.distributional import two_hot, value_rescale
from rljax.env import LEGAL_ACTION_MASK

SMALL = dict(env="CartPole-v1", hidden_sizes=(8,), latent_size=4, num_envs=4, num_steps=4, num_minibatches=1,
             total_timesteps=64)


@pytest.mark.parametrize("kw, match", [
    (dict(unroll_steps=0), r"unroll_steps"),
    (dict(latent_size=0), r"latent_size"),
    (dict(support_size=-1), r"support_size"),
    (dict(reward_coef=-1.0), r"reward_coef"),
    (dict(q_epsilon=0.0), r"q_epsilon"),
    (dict(memory="gru"), r"memory='gru': the search plans from the state it is given"),
])
def test_config_refuses_bad_values(kw, match):
    with pytest.raises(ValueError, match=match):
        MuZeroConfig(**{**SMALL, **kw})


def test_fits_discrete_envs_without_needing_their_model():
    muzero_fits(*envs.make("CartPole-v1"))
    muzero_fits(*envs.make("TicTacToe-v0"))
    with pytest.raises(ValueError, match="MuZero needs a Discrete action space"):
        muzero_fits(*envs.make("Pendulum-v1"))


def test_unroll_targets_by_hand():
    # One env, T = 5: the episode terminates at t = 1 and is truncated (time limit) at t = 3.
    reward = jnp.array([[1.0], [2.0], [3.0], [4.0], [5.0]])
    value = jnp.array([[10.0], [20.0], [30.0], [40.0], [50.0]])
    action = jnp.array([[0], [1], [0], [1], [0]])
    policy = jnp.stack([jnp.array([[t / 10, 1 - t / 10]]) for t in range(5)])
    terminated = jnp.array([[False], [True], [False], [False], [False]])
    truncated = jnp.array([[False], [False], [False], [True], [False]])
    obs = jnp.arange(5.0)[:, None, None]
    b = unroll_targets(obs, action, policy, value, reward, terminated, truncated, unroll_steps=2)
    np.testing.assert_array_equal(b.obs[:, 0], np.arange(5.0))
    np.testing.assert_array_equal(b.actions, [[0, 1], [1, 0], [0, 1], [1, 0], [0, 0]])
    # rewards of transitions t, t+1: after the termination at 1 the model is absorbing (target 0, trained);
    # after the time limit at 3, or past the end, nothing is trained
    np.testing.assert_array_equal(b.reward, [[1, 2], [2, 0], [3, 4], [4, 0], [5, 0]])
    np.testing.assert_array_equal(b.reward_mask, [[1, 1], [1, 1], [1, 1], [1, 0], [1, 0]])
    np.testing.assert_array_equal(b.value, [[10, 20, 0], [20, 0, 0], [30, 40, 0], [40, 0, 0], [50, 0, 0]])
    np.testing.assert_array_equal(b.value_mask, [[1, 1, 1], [1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 0, 0]])
    np.testing.assert_array_equal(b.policy_mask, [[1, 1, 0], [1, 0, 0], [1, 1, 0], [1, 0, 0], [1, 0, 0]])
    np.testing.assert_allclose(b.policy[0, 1], [0.1, 0.9])
    np.testing.assert_allclose(b.policy[2, 1], [0.3, 0.7])


def test_unroll_targets_keep_envs_apart():
    # Two envs in one trajectory: env 1 terminates at t = 0, env 0 never ends; row n = t * B + b.
    z = jnp.zeros((3, 2))
    b = unroll_targets(jnp.zeros((3, 2, 1)), jnp.zeros((3, 2), jnp.int32), jnp.full((3, 2, 2), 0.5),
                       jnp.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]), jnp.ones((3, 2)),
                       jnp.array([[False, True], [False, False], [False, False]]), z.astype(bool), unroll_steps=1)
    np.testing.assert_array_equal(b.value, [[1, 3], [2, 0], [3, 5], [4, 6], [5, 0], [6, 0]])
    np.testing.assert_array_equal(b.value_mask, [[1, 1], [1, 1], [1, 1], [1, 1], [1, 0], [1, 0]])


@pytest.mark.parametrize("support_size", [0, 3])
def test_loss_by_hand_against_the_functions_called_one_by_one(support_size):
    net = MuZeroNetwork(action_dim=3, hidden_sizes=(8,), latent_size=5, support_size=support_size)
    k = jax.random.split(jax.random.key(0), 8)
    n, K = 6, 2
    obs = jax.random.normal(k[0], (n, 4))
    params = net.init(k[1], obs, method=MuZeroNetwork.init_all)
    batch = MuZeroBatch(obs=obs, actions=jax.random.randint(k[2], (n, K), 0, 3),
                        policy=jax.nn.softmax(jax.random.normal(k[3], (n, K + 1, 3))),
                        value=jax.random.normal(k[4], (n, K + 1)) * 5, reward=jax.random.normal(k[5], (n, K)),
                        policy_mask=(jax.random.uniform(k[6], (n, K + 1)) < 0.7).astype(jnp.float32),
                        value_mask=jnp.ones((n, K + 1)).at[0, 2].set(0.0),
                        reward_mask=jnp.ones((n, K)).at[1, 1].set(0.0))
    loss, m = jax.jit(lambda p, b: muzero_loss(p, net, b, 0.5, 2.0))(params, batch)

    compiled = {m: jax.jit(functools.partial(net.apply, method=m))
                for m in (MuZeroNetwork.represent, MuZeroNetwork.predict, MuZeroNetwork.transition)}

    def call(method, *args):  # each function alone
        out = compiled[method](params, *args)
        if method is MuZeroNetwork.represent:
            return np.asarray(out, np.float64)
        return [np.asarray(x, np.float64) for x in out]
    atoms = np.arange(-support_size, support_size + 1)

    def scalar_loss(out, target):
        if support_size == 0:
            return 0.5 * (out[:, 0] - target) ** 2
        p = np.asarray(two_hot(value_rescale(jnp.asarray(target, jnp.float32)), jnp.asarray(atoms, jnp.float32)))
        return -np.sum(p * (out - np.log(np.sum(np.exp(out), -1, keepdims=True))), -1)

    def log_softmax(x):
        return x - np.log(np.sum(np.exp(x - x.max(-1, keepdims=True)), -1, keepdims=True)) - x.max(-1, keepdims=True)

    latent = call(MuZeroNetwork.represent, obs)
    want_p = want_v = want_r = 0.0
    for step in range(K + 1):
        w = 1.0 if step == 0 else 1.0 / K
        if step > 0:
            latent, r = call(MuZeroNetwork.transition, jnp.asarray(latent, jnp.float32), batch.actions[:, step - 1])
            mask, target = np.asarray(batch.reward_mask[:, step - 1]), np.asarray(batch.reward[:, step - 1])
            want_r += w * np.mean(mask * scalar_loss(r, target))
        logits, v = call(MuZeroNetwork.predict, jnp.asarray(latent, jnp.float32))
        ce = -np.sum(np.asarray(batch.policy[:, step]) * log_softmax(logits), -1)
        want_p += w * np.mean(np.asarray(batch.policy_mask[:, step]) * ce)
        want_v += w * np.mean(np.asarray(batch.value_mask[:, step]) * scalar_loss(v, np.asarray(batch.value[:, step])))
    np.testing.assert_allclose([m["policy_loss"], m["value_loss"], m["reward_loss"]], [want_p, want_v, want_r],
                               rtol=2e-5)
    np.testing.assert_allclose(loss, want_p + 0.5 * want_v + 2.0 * want_r, rtol=2e-5)


def test_the_latent_gradient_is_halved_at_each_dynamics_step():
    # Only the reward of the second step is trained: its gradient reaches the representation through two
    # dynamics steps, each halving it; scaling by 4 recovers the gradient of the same loss without the halving.
    net = MuZeroNetwork(action_dim=2, hidden_sizes=(8,), latent_size=4)
    obs = jax.random.normal(jax.random.key(1), (5, 3))
    params = net.init(jax.random.key(2), obs, method=MuZeroNetwork.init_all)
    zeros = jnp.zeros((5, 3))
    batch = MuZeroBatch(obs=obs, actions=jnp.ones((5, 2), jnp.int32), policy=jnp.full((5, 3, 2), 0.5),
                        value=zeros, reward=jnp.ones((5, 2)), policy_mask=zeros, value_mask=zeros,
                        reward_mask=jnp.array([[0.0, 1.0]] * 5))
    grad = jax.jit(jax.grad(lambda p: muzero_loss(p, net, batch, 1.0, 1.0)[0]))(params)["params"]["representation"]

    def plain(p):
        latent = net.apply(p, obs, method=MuZeroNetwork.represent)
        for _ in range(2):
            latent, r = net.apply(p, latent, jnp.ones(5, jnp.int32), method=MuZeroNetwork.transition)
        return 0.5 * jnp.mean(0.5 * jnp.square(r[:, 0] - 1.0))  # weight 1/K = 1/2
    want = jax.jit(jax.grad(plain))(params)["params"]["representation"]
    for g, w in zip(jax.tree.leaves(grad), jax.tree.leaves(want)):
        np.testing.assert_allclose(4.0 * np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-8)


def test_a_categorical_output_reads_as_the_inverse_rescaled_mean():
    net = MuZeroNetwork(action_dim=2, support_size=5)
    out = jnp.full((2, 11), -1e9).at[0, 5 + 3].set(0.0).at[1, 5 - 2].set(0.0)  # all mass on h = 3, on h = -2
    got = np.asarray(net.apply({}, out, method=MuZeroNetwork.scalar))
    inv = lambda y: np.sign(y) * (((np.sqrt(1 + 4e-3 * (abs(y) + 1 + 1e-3)) - 1) / 2e-3) ** 2 - 1)  # noqa: E731
    np.testing.assert_allclose(got, [inv(3.0), inv(-2.0)], rtol=1e-4)
    assert 14.8 < got[0] < 14.9 and -8.0 < got[1] < -7.9  # h(15) = 3.015, h(8) = 2.008: a little less than 15 and 8


@functools.cache
def _search(env_name):
    env, env_params = envs.make(env_name)
    config = MuZeroConfig(**{**SMALL, "env": env_name, "encoder": "mlp", "num_simulations": 4,
                             "dirichlet_fraction": 0.0})
    network = muzero_network(config, env, env_params)
    return env, env_params, network, jax.jit(muzero_search(network, config)), config.hyperparams()


@pytest.mark.parametrize("env_name, sign", [("TicTacToe-v0", -1.0), ("CartPole-v1", 1.0)])
def test_the_search_masks_the_root_and_flips_the_discount_in_a_game(env_name, sign):
    env, env_params, network, search, hyperparams = _search(env_name)
    keys = jax.random.split(jax.random.key(3), 4)
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(keys, env_params)
    if env_name == "TicTacToe-v0":  # take a few moves so the masks differ
        obs, *_ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys, state, jnp.array([0, 4, 8, 2]), env_params)
    params = network.init(jax.random.key(4), obs, method=MuZeroNetwork.init_all)
    out = search(params, jax.random.key(5), obs, hyperparams)
    weights = np.asarray(out.action_weights)
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-5)
    if env_name == "TicTacToe-v0":
        legal = np.asarray(obs[LEGAL_ACTION_MASK])
        assert np.all(weights[~legal] == 0.0) and legal[np.arange(4), np.asarray(out.action)].all()
    visited = np.asarray(out.search_tree.children_index[:, 0]) >= 0
    discounts = np.asarray(out.search_tree.children_discounts[:, 0])[visited]
    np.testing.assert_allclose(discounts, sign * float(hyperparams.gamma), rtol=1e-6)
