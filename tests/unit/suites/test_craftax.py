"""``craftax/<id>`` (:mod:`rljax.suites.craftax`): ids and errors, spaces under jit and vmap (traced),
the contract with death as a termination and rljax's time limit as the only truncation, one PPO
chunk. Skipped, naming the extra, without the ``craftax`` package."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import rljax
from rljax.core import registry as env_registry
from rljax.core import wrappers
from tests.support.suites import NUM_ENVS, TIME_LIMIT, check_contract, check_ppo_chunk, limited, need, probe


CLASSIC = "craftax/Craftax-Classic-Symbolic-v1"


def test_craftax_ids_and_errors():
    need("craftax", "craftax")
    names = env_registry.suite_registered("craftax")
    assert {CLASSIC, "craftax/Craftax-Symbolic-v1"} <= set(names)
    with pytest.raises(ValueError, match=r"unknown craftax environment 'Craftax-Nope-v1'.*Craftax-Symbolic-v1"):
        rljax.make("craftax/Craftax-Nope-v1")
    with pytest.raises(ValueError, match=r"takes no constructor arguments"):
        rljax.make(CLASSIC, foo=1)


# Craftax-Classic by default, the full game with --slow (the same adapter).
@pytest.mark.parametrize("name,obs_size,num_actions", [(CLASSIC, 1345, 17), pytest.param("craftax/Craftax-Symbolic-v1",
                                                                                         8268, 43, marks=pytest.mark.slow)])
def test_craftax_spaces_under_jit_and_vmap(name, obs_size, num_actions):
    """Shapes and dtypes of a jitted, vmapped reset and step (traced, not compiled)."""
    need("craftax", "craftax")
    env, params = rljax.make(name)
    assert env.observation_space(params).shape == (obs_size,)
    assert env.action_space(params).n == num_actions
    venv = wrappers.VecEnv(env, NUM_ENVS)
    obs, state = jax.eval_shape(jax.jit(venv.reset), jax.random.key(0), params)
    out = jax.eval_shape(jax.jit(venv.step), jax.random.key(1), state,
                         jnp.zeros(NUM_ENVS, jnp.int32), params)
    assert obs.shape == out[0].shape == out[5]["final_observation"].shape == (NUM_ENVS, obs_size)
    assert obs.dtype == out[0].dtype == jnp.float32
    assert [x.dtype for x in out[2:5]] == [jnp.float32, jnp.bool_, jnp.bool_]
    assert jax.tree.structure(out[1]) == jax.tree.structure(state)


@pytest.mark.slow  # compiles Craftax's step for seconds; by default the jitted, vmapped reset and step above
def test_craftax_contract_truncation_and_termination():
    need("craftax", "craftax")
    env, params = rljax.make(CLASSIC)
    assert params.max_steps_in_episode == 10_000  # Craftax-Classic's own limit, now rljax's
    limits = [TIME_LIMIT] * NUM_ENVS

    def kill(state):  # no health left: the next step ends the game
        return state.replace(inner=state.inner.replace(player_health=jnp.zeros_like(state.inner.player_health)))

    obs0, out = jax.device_get(probe(env, limited(params, limits), kill)(jax.random.key(0)))
    term, trunc = check_contract(env, limits, out, obs0)
    assert term[0, 0] and not trunc[0, 0], "death is a termination, not a time limit"
    assert trunc[TIME_LIMIT - 1, 1:].all() and not term[TIME_LIMIT - 1, 1:].any()


@pytest.mark.slow  # by default the Navix and XLand-MiniGrid PPO chunks and the jitted, vmapped reset and step above
def test_craftax_ppo_chunk():
    need("craftax", "craftax")
    config = rljax.PPOConfig(env=CLASSIC, total_timesteps=4 * 8 * 1, updates_per_chunk=1, num_envs=4, num_steps=8,
                             num_epochs=1, num_minibatches=2, hidden_sizes=(16,))
    check_ppo_chunk(config)
