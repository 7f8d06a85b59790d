"""``brax/<id>`` (:mod:`rljax.suites.brax`): ids and errors, spaces under jit and vmap (traced), the
contract with Brax's ``done`` as a termination and rljax's time limit as the only truncation, one
SAC chunk. Skipped, naming the extra, without the ``brax`` package."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rljax
from rljax.core import registry as env_registry
from rljax.core import wrappers
from tests.support.suites import NUM_ENVS, TIME_LIMIT, check_contract, limited, need, probe


PENDULUM = "brax/inverted_pendulum"


def test_brax_ids_and_errors():
    need("brax", "brax")
    assert {"brax/ant", "brax/halfcheetah", "brax/hopper", PENDULUM} <= set(env_registry.suite_registered("brax"))
    with pytest.raises(ValueError, match=r"unknown brax environment 'antt'.*halfcheetah"):
        rljax.make("brax/antt")
    with pytest.raises(ValueError, match=r"brax backend 'warp' is not one of generalized, positional"):
        rljax.make(PENDULUM, backend="warp")


# hopper by default, the others with --slow (the adapter is the same for every Brax env).
@pytest.mark.parametrize("env_id,obs_size,act_size", [("hopper", 11, 3),
                                                      pytest.param("halfcheetah", 17, 6, marks=pytest.mark.slow),
                                                      pytest.param("ant", 27, 8, marks=pytest.mark.slow)])
def test_brax_spaces_under_jit_and_vmap(env_id, obs_size, act_size):
    """Shapes and dtypes of a jitted, vmapped reset and step (traced, not compiled)."""
    need("brax", "brax")
    env, params = rljax.make(f"brax/{env_id}", backend="positional")
    assert env.observation_space(params).shape == (obs_size,)
    act_space = env.action_space(params)
    assert act_space.shape == (act_size,) and act_space.bounded
    venv = wrappers.VecEnv(env, NUM_ENVS)
    obs, state = jax.eval_shape(jax.jit(venv.reset), jax.random.key(0), params)
    out = jax.eval_shape(jax.jit(venv.step), jax.random.key(1), state, jnp.zeros((NUM_ENVS, act_size)), params)
    assert obs.shape == out[0].shape == out[5]["final_observation"].shape == (NUM_ENVS, obs_size)
    assert [x.dtype for x in out[2:5]] == [jnp.float32, jnp.bool_, jnp.bool_]
    assert jax.tree.structure(out[1]) == jax.tree.structure(state)


def test_brax_contract_truncation_and_termination():
    need("brax", "brax")
    env, params = rljax.make(PENDULUM, backend="positional")
    assert params.max_steps_in_episode == 1000
    np.testing.assert_array_equal(env.action_space(params).high, [3.0])  # its actuator's range
    limits = [1000] + [TIME_LIMIT] * (NUM_ENVS - 1)  # env 0 pushes its cart until the pole falls
    obs0, out = jax.device_get(probe(env, limited(params, limits), push=True)(jax.random.key(0)))
    term, trunc = check_contract(env, limits, out, obs0)
    assert trunc[:, 1:].any(), "no episode reached the time limit"
    # Brax's done is a real end: here the pole leaving |angle| <= 0.2 (observation index 1).
    assert term[:, 0].any(), "no random episode ended with the pole down"
    np.testing.assert_array_equal(term, np.abs(out["final"][..., 1]) > 0.2)


@pytest.mark.slow  # by default Brax's contract above and the Navix and XLand-MiniGrid PPO chunks (the same adapter layer)
def test_brax_sac_chunk():
    need("brax", "brax")
    env, params = rljax.make(PENDULUM, backend="positional")
    config = rljax.SACConfig(env=PENDULUM, total_timesteps=2 * 16, updates_per_chunk=16, num_envs=2, batch_size=8,
                             buffer_size=64, learning_starts=8, hidden_sizes=(16,))
    result = rljax.train(config, env=env, env_params=params, options=rljax.RunOptions(quiet=True, checkpoints=False,
                         tensorboard=False, handle_signals=False))
    assert len(result.rows) == 1 and result.rows[0]["env_steps"] == 32
