"""rljax's MinAtar (``envs/minatar.py``: gymnax's games with bool observation planes) and the MinAtar
experiment modules."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rljax
from envs.minatar import GAMES


def _rollout(env, params, key, steps=300):
    obs, state = env.reset(key, params)

    def body(carry, k):
        obs, state = carry
        k_act, k_step = jax.random.split(k)
        obs, state, reward, term, trunc, info = env.step(k_step, state, env.action_space(params).sample(k_act), params)
        return (obs, state), (obs, info["final_observation"], reward, term, trunc)

    return obs, jax.lax.scan(body, (obs, state), jax.random.split(key, steps))[1]


# Two games by default (the wrapper is the same for every game; each game is stepped by the env contract in
# tests/unit/test_env.py), every game with --slow.
@pytest.mark.parametrize("game", [pytest.param(g, marks=() if g in ("Breakout", "SpaceInvaders") else pytest.mark.slow)
                                  for g in GAMES])
def test_minatar_is_gymnax_with_bool_planes(game):
    env, params = rljax.make(f"{game}-MinAtar")
    genv, gparams = rljax.make(f"gymnax/{game}-MinAtar")
    space = env.observation_space(params)
    assert space.dtype == jnp.bool_ and space.shape == tuple(genv.observation_space(gparams).shape)
    ours = jax.jit(lambda k: _rollout(env, params, k))(jax.random.key(1))
    theirs = jax.jit(lambda k: _rollout(genv, gparams, k))(jax.random.key(1))
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs)):
        if a.dtype == jnp.bool_ and b.dtype != jnp.bool_:
            assert set(np.unique(np.asarray(b)).tolist()) <= {0.0, 1.0}  # planes really are 0/1
            a = a.astype(b.dtype)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    obs0, (obs, final, *_rest) = ours
    assert obs.dtype == final.dtype == obs0.dtype == jnp.bool_
    assert bool(jnp.all(jax.vmap(space.contains)(obs)))


def test_unknown_game_lists_the_games():
    from envs.minatar import MinAtar

    with pytest.raises(ValueError, match="unknown MinAtar game 'Pong'; games: Asterix, Breakout"):
        MinAtar("Pong")


# Each MinAtar experiment module trains a few small updates (the README's commands run them at their
# full sizes with --slow: tests/integration/test_doc_commands.py, README_VARIANTS).
@pytest.mark.parametrize("module, algo", [("ppo_minatar", "ppo"), ("dqn_minatar", "dqn"), ("pqn_minatar", "pqn")])
def test_minatar_experiments_train(module, algo, capsys):
    import importlib

    mod = importlib.import_module(f"experiments.{module}")
    assert mod.DEFAULTS["env"] == "Breakout-MinAtar"
    tiny = {"ppo": ["--num-envs", "4", "--num-steps", "8", "--num-minibatches", "2", "--num-epochs", "1"],
            "dqn": ["--learning-starts", "16", "--batch-size", "8", "--buffer-size", "64"],
            "pqn": ["--num-envs", "4", "--num-steps", "8", "--num-minibatches", "2", "--num-epochs", "1"]}[algo]
    code = mod.main(["--total-timesteps", "64", "--hidden-sizes", "8", "--cnn-channels", "4", "--run-dir", "none",
                     *tiny])
    assert code == 0
    assert "done: 64 env steps" in capsys.readouterr().out


def test_ppo_minatar_defaults_are_purejaxrls():
    from experiments.ppo_minatar import DEFAULTS

    config = rljax.PPOConfig(**DEFAULTS)
    assert (config.num_envs, config.num_steps, config.num_epochs, config.num_minibatches) == (64, 128, 4, 8)
    assert (config.learning_rate, config.anneal_lr, config.activation, config.hidden_sizes) == (5e-3, True, "relu",
                                                                                               (64, 64))
    assert (config.gamma, config.gae_lambda, config.clip_eps, config.ent_coef, config.vf_coef,
            config.max_grad_norm, config.total_timesteps) == (0.99, 0.95, 0.2, 0.01, 0.5, 0.5, 10_000_000)
