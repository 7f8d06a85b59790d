"""Gumbel AlphaZero (rljax/agents/alphazero.py): the config's refusals, the loss by hand, the search on
positions with one right answer (it takes a win in one and blocks a loss in one with an untrained
network, never considers an illegal move, and puts no weight on one), the Dirichlet noise, and the
env fit rule. Training through the whole stack (an update's metrics, acting legally, resume, the command line):
tests/integration/test_search_stack.py."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
from rljax.agents.alphazero import (AlphaZeroBatch, AlphaZeroConfig, root_prior_logits, alphazero_fits, alphazero_loss,
                                    search_policy)
from rljax.agents.onpolicy import actor_critic_network
from rljax.core.distributions import Categorical
from rljax.env import LEGAL_ACTION_MASK

TTT = dict(env="TicTacToe-v0", encoder="mlp", hidden_sizes=(16,), num_envs=4, num_steps=4, num_minibatches=1,
           total_timesteps=64)


@pytest.mark.parametrize("kw, match", [
    (dict(memory="gru"), r"memory='gru': the search plans from the state it is given"),
    (dict(randomize=("gravity=9:10",)), r"randomize=\['gravity=9:10'\]: AlphaZero's search steps copies"),
    (dict(sample_moves=-2), r"sample_moves"),
    (dict(num_simulations=0), r"num_simulations"),
    (dict(dirichlet_fraction=1.5), r"dirichlet_fraction"),
    (dict(dirichlet_alpha=0.0), r"dirichlet_alpha"),
])
def test_config_refuses_bad_values(kw, match):
    with pytest.raises(ValueError, match=match):
        AlphaZeroConfig(**{**TTT, **kw})


def test_fits_discrete_envs_with_a_step_env_only():
    alphazero_fits(*envs.make("TicTacToe-v0"))
    alphazero_fits(*envs.make("CartPole-v1"))
    with pytest.raises(ValueError, match="AlphaZero needs a Discrete action space"):
        alphazero_fits(*envs.make("Pendulum-v1"))

    class NoModel:
        name = "NoModel"

        def action_space(self, params):
            from rljax.env import Discrete
            return Discrete(2)
    with pytest.raises(ValueError, match="NoModel has none"):
        alphazero_fits(NoModel(), None)


def test_loss_by_hand():
    logits = jnp.array([[0.0, np.log(3.0)], [np.log(2.0), 0.0]])  # p = [1/4, 3/4] and [2/3, 1/3]
    value = jnp.array([0.5, -1.0])

    def apply_fn(params, obs):
        return Categorical(logits=logits * params), value * params
    batch = AlphaZeroBatch(obs=jnp.zeros((2, 1)), search_policy=jnp.array([[1.0, 0.0], [0.5, 0.5]]),
                           target=jnp.array([1.0, 1.0]))
    loss, m = alphazero_loss(1.0, apply_fn, batch, vf_coef=2.0)
    ce = np.array([-np.log(0.25), -0.5 * np.log(2 / 3) - 0.5 * np.log(1 / 3)])
    vl = 0.5 * np.mean([(0.5 - 1.0) ** 2, (-1.0 - 1.0) ** 2])
    np.testing.assert_allclose(m["policy_loss"], ce.mean(), rtol=1e-6)
    np.testing.assert_allclose(m["value_loss"], vl, rtol=1e-6)
    np.testing.assert_allclose(loss, ce.mean() + 2.0 * vl, rtol=1e-6)
    kl = np.array([-np.log(0.25), ce[1] + 2 * 0.5 * np.log(0.5)])  # CE - H(pi)
    np.testing.assert_allclose(m["search_kl"], kl.mean(), rtol=1e-6)


def _position(moves):
    env, params = envs.make("TicTacToe-v0")
    obs, state = env.reset(jax.random.key(0), params)
    for move in moves:
        obs, state, *_ = env.step(jax.random.key(0), state, move, params)
    return env, params, obs, state


@functools.cache
def _compiled_search(num_simulations):
    """One compiled search per size for every position and network of this module."""
    env, params = envs.make("TicTacToe-v0")
    config = AlphaZeroConfig(**{**TTT, "num_simulations": num_simulations, "gumbel_scale": 0.0,
                                "dirichlet_fraction": 0.0})
    network = actor_critic_network(config, env, params, "AlphaZero")
    return network, jax.jit(search_policy(env, params, network.apply, config)), config.hyperparams()


def _search(moves, num_simulations, seed=0, zero=False):
    env, params, obs, state = _position(moves)
    network, search, hyperparams = _compiled_search(num_simulations)
    net_params = network.init(jax.random.key(seed), jax.tree.map(lambda x: x[None], obs))
    if zero:  # a uniform prior and zero values everywhere: only the game's own rewards move the search
        net_params = jax.tree.map(jnp.zeros_like, net_params)
    batch = lambda x: x[None]  # noqa: E731
    return search(net_params, jax.random.key(seed), jax.tree.map(batch, state), jax.tree.map(batch, obs),
                  hyperparams), obs


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_search_with_an_untrained_network_takes_a_win_in_one(seed):
    out, obs = _search([0, 3, 1, 4], 64, seed)  # X to move; 2 wins
    assert int(out.action[0]) == 2


@pytest.mark.parametrize("num_simulations", [64, 128])
def test_search_blocks_a_loss_in_one_from_the_movers_side(num_simulations):
    # X to move; O threatens 6 (2-4-6), X has no win in one. With a network of zeros (uniform prior, value 0)
    # only the game's rewards move the values: O's win under every other move is worth -1 to X only if the
    # search backs it up with the sign flipped where the turn passes (a sign error would make X give the win away).
    out, obs = _search([0, 4, 8, 2], num_simulations, zero=True)
    assert int(out.action[0]) == 6
    q = np.asarray(out.search_tree.qvalues(np.zeros(1, int)))[0]
    visited = np.asarray(out.search_tree.children_visits[0, 0]) > 0
    assert q[6] > 0 and np.all(q[visited & (np.arange(9) != 6)] < 0)  # blocking at 6 makes a double threat


def test_search_never_weighs_or_plays_an_illegal_move():
    out, obs = _search([4, 0, 8], 64)
    legal = np.asarray(obs[LEGAL_ACTION_MASK])
    weights = np.asarray(out.action_weights[0])
    assert legal[int(out.action[0])]
    assert np.all(weights[~legal] == 0.0) and np.isclose(weights.sum(), 1.0)


def test_root_noise_mixes_dirichlet_over_the_legal_moves_only():
    logits = jnp.log(jnp.array([[0.5, 0.5, 1e-30, 0.0]]))
    legal = jnp.array([[True, True, True, False]])
    dist = Categorical(logits=jnp.where(legal, logits, jnp.finfo(jnp.float32).min))
    hp = AlphaZeroConfig(**TTT).hyperparams()
    noisy = root_prior_logits(dist, legal, jax.random.key(0), hp)
    p = np.asarray(jax.nn.softmax(noisy))[0]
    assert p[3] == 0.0 and p[2] > 1e-6 and np.isclose(p.sum(), 1.0)  # noise reached the move the prior ruled out
    quiet = root_prior_logits(dist, legal, jax.random.key(0), hp.replace(dirichlet_fraction=jnp.float32(0.0)))
    np.testing.assert_array_equal(np.asarray(quiet), np.asarray(dist.logits))
