"""The env-suite adapters (``rljax/suites``): each suite's environments keep rljax's env contract.

Each suite is an optional extra; its tests are skipped, with the extra to install, when its package
is missing. Per suite, one jitted program over rljax's ``VecEnv`` (vmapped copies, a short time
limit, random actions) checks spaces, dtypes and shapes, that a time limit is ``truncated`` and
only a time limit, that real ends of episodes are ``terminated``, that ``final_observation`` is the
finished episode's and that the clock restarts; then one chunk of PPO (SAC for Brax) trains on it.
Compiling a suite's step dominates (the step holds the suite's reset, for the auto-reset), so each
suite compiles one probe and one training chunk.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rljax
from rljax.core import registry as env_registry
from rljax.core import wrappers
from rljax.env import Box, Discrete

NUM_ENVS = 3
NUM_STEPS = 24
TIME_LIMIT = 5


def _need(module: str, extra: str) -> None:
    pytest.importorskip(module, reason=f"needs the {extra!r} extra: pip install -e '.[{extra}]'")


def _limited(params, limits):
    """``NUM_ENVS`` params, env i's time limit ``limits[i]``, for ``VecEnv(batched_params=True)``."""
    return wrappers.VecEnv.stack_params([params.replace(max_steps_in_episode=n) for n in limits])


def _probe(env, params, kill=None, push=False):
    """A jitted ``VecEnv`` rollout of random actions with per-env ``params`` (batched).
    ``kill(state)`` edits env 0's first state so that its first step ends the episode for real;
    ``push``: env 0 always takes the largest action of its Box instead."""
    venv = wrappers.VecEnv(env, NUM_ENVS, batched_params=True)
    act_space = env.action_space(env.default_params)
    obs_space = env.observation_space(env.default_params)

    def run(key):
        k_reset, k_run = jax.random.split(key)
        obs0, vstate = venv.reset(k_reset, params)
        if kill is not None:
            first = jax.tree.map(lambda x: x[0], vstate.env_state)
            killed = kill(first)
            vstate = vstate.replace(env_state=jax.tree.map(lambda x, k: x.at[0].set(k), vstate.env_state, killed))

        def body(carry, key):
            obs, vstate = carry
            k_act, k_step = jax.random.split(key)
            action = jax.vmap(act_space.sample)(jax.random.split(k_act, NUM_ENVS))
            if push:
                action = action.at[0].set(act_space.high)
            obs2, vstate2, reward, term, trunc, info = venv.step(k_step, vstate, action, params)
            out = dict(obs=obs2, final=info["final_observation"], reward=reward, term=term, trunc=trunc,
                       time=vstate2.env_state.time, in_space=jax.vmap(obs_space.contains)(obs2),
                       final_in_space=jax.vmap(obs_space.contains)(info["final_observation"]))
            return (obs2, vstate2), out

        _, out = jax.lax.scan(body, (obs0, vstate), jax.random.split(k_run, NUM_STEPS))
        return obs0, out

    return jax.jit(run)


def _check_contract(env, limits, out, obs0):
    params = env.default_params
    obs_space, act_space = env.observation_space(params), env.action_space(params)
    assert isinstance(obs_space, Box) and isinstance(act_space, (Box, Discrete))
    assert obs0.shape == (NUM_ENVS, *obs_space.shape) and obs0.dtype == obs_space.dtype
    assert out["obs"].shape == out["final"].shape == (NUM_STEPS, NUM_ENVS, *obs_space.shape)
    assert out["obs"].dtype == out["final"].dtype == obs_space.dtype
    assert out["reward"].dtype == jnp.float32 and out["reward"].shape == (NUM_STEPS, NUM_ENVS)
    assert out["term"].dtype == out["trunc"].dtype == jnp.bool_
    assert np.all(out["in_space"]) and np.all(out["final_in_space"])
    assert np.all(np.isfinite(out["reward"]))
    term, trunc, time = (np.asarray(out[k]) for k in ("term", "trunc", "time"))
    done = term | trunc
    # The clock: +1 per step, back to 0 on the step an episode ends; truncated exactly at the limit.
    length = np.zeros(NUM_ENVS, int)
    for t in range(NUM_STEPS):
        length += 1
        np.testing.assert_array_equal(trunc[t], length == np.asarray(limits), err_msg=f"truncated at step {t}")
        length[done[t]] = 0
        np.testing.assert_array_equal(time[t], length)
    # final_observation: the step's own observation while the episode runs, the finished
    # episode's last one (not the next episode's first) when it ends.
    obs, final = np.asarray(out["obs"]), np.asarray(out["final"])
    axes = tuple(range(2, obs.ndim))
    same = np.all(obs == final, axis=axes)
    assert np.all(same[~done]), "final_observation differs from obs on a step that did not end"
    assert not np.any(same[done]), "final_observation is the next episode's first observation"
    return term, trunc


def _check_ppo_chunk(config):
    result = rljax.train(config, options=rljax.RunOptions(quiet=True, checkpoints=False, tensorboard=False,
                                                          handle_signals=False))
    assert len(result.rows) == 1
    row = result.rows[0]
    assert row["env_steps"] == config.total_timesteps
    assert all(np.isfinite(v) for v in row.values() if isinstance(v, float))
    return row


def test_suites_are_registered_and_unknown_ids_are_one_line_errors():
    assert {"craftax", "brax"} <= set(env_registry.SUITES)
    with pytest.raises(ValueError, match=r"unknown env suite 'nope'"):
        env_registry.suite_registered("nope")


# --------------------------------------------------------------------------------------------------
# Craftax
# --------------------------------------------------------------------------------------------------

CLASSIC = "craftax/Craftax-Classic-Symbolic-v1"


def test_craftax_ids_and_errors():
    _need("craftax", "craftax")
    names = env_registry.suite_registered("craftax")
    assert {CLASSIC, "craftax/Craftax-Symbolic-v1"} <= set(names)
    with pytest.raises(ValueError, match=r"unknown craftax environment 'Craftax-Nope-v1'.*Craftax-Symbolic-v1"):
        rljax.make("craftax/Craftax-Nope-v1")
    with pytest.raises(ValueError, match=r"takes no constructor arguments"):
        rljax.make(CLASSIC, foo=1)


@pytest.mark.parametrize("name,obs_size,num_actions", [(CLASSIC, 1345, 17), ("craftax/Craftax-Symbolic-v1", 8268, 43)])
def test_craftax_spaces_under_jit_and_vmap(name, obs_size, num_actions):
    """Shapes and dtypes of a jitted, vmapped reset and step (traced, not compiled)."""
    _need("craftax", "craftax")
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


def test_craftax_contract_truncation_and_termination():
    _need("craftax", "craftax")
    env, params = rljax.make(CLASSIC)
    assert params.max_steps_in_episode == 10_000  # Craftax-Classic's own limit, now rljax's
    limits = [TIME_LIMIT] * NUM_ENVS

    def kill(state):  # no health left: the next step ends the game
        return state.replace(inner=state.inner.replace(player_health=jnp.zeros_like(state.inner.player_health)))

    obs0, out = jax.device_get(_probe(env, _limited(params, limits), kill)(jax.random.key(0)))
    term, trunc = _check_contract(env, limits, out, obs0)
    assert term[0, 0] and not trunc[0, 0], "death is a termination, not a time limit"
    assert trunc[TIME_LIMIT - 1, 1:].all() and not term[TIME_LIMIT - 1, 1:].any()


def test_craftax_ppo_chunk():
    _need("craftax", "craftax")
    config = rljax.PPOConfig(env=CLASSIC, total_timesteps=4 * 8 * 1, updates_per_chunk=1, num_envs=4, num_steps=8,
                             num_epochs=1, num_minibatches=2, hidden_sizes=(16,))
    _check_ppo_chunk(config)


# --------------------------------------------------------------------------------------------------
# Brax
# --------------------------------------------------------------------------------------------------

PENDULUM = "brax/inverted_pendulum"


def test_brax_ids_and_errors():
    _need("brax", "brax")
    assert {"brax/ant", "brax/halfcheetah", "brax/hopper", PENDULUM} <= set(env_registry.suite_registered("brax"))
    with pytest.raises(ValueError, match=r"unknown brax environment 'antt'.*halfcheetah"):
        rljax.make("brax/antt")
    with pytest.raises(ValueError, match=r"brax backend 'warp' is not one of generalized, positional"):
        rljax.make(PENDULUM, backend="warp")


@pytest.mark.parametrize("env_id,obs_size,act_size", [("hopper", 11, 3), ("halfcheetah", 17, 6), ("ant", 27, 8)])
def test_brax_spaces_under_jit_and_vmap(env_id, obs_size, act_size):
    """Shapes and dtypes of a jitted, vmapped reset and step (traced, not compiled)."""
    _need("brax", "brax")
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
    _need("brax", "brax")
    env, params = rljax.make(PENDULUM, backend="positional")
    assert params.max_steps_in_episode == 1000
    np.testing.assert_array_equal(env.action_space(params).high, [3.0])  # its actuator's range
    limits = [1000] + [TIME_LIMIT] * (NUM_ENVS - 1)  # env 0 pushes its cart until the pole falls
    obs0, out = jax.device_get(_probe(env, _limited(params, limits), push=True)(jax.random.key(0)))
    term, trunc = _check_contract(env, limits, out, obs0)
    assert trunc[:, 1:].any(), "no episode reached the time limit"
    # Brax's done is a real end: here the pole leaving |angle| <= 0.2 (observation index 1).
    assert term[:, 0].any(), "no random episode ended with the pole down"
    np.testing.assert_array_equal(term, np.abs(out["final"][..., 1]) > 0.2)


def test_brax_sac_chunk():
    _need("brax", "brax")
    env, params = rljax.make(PENDULUM, backend="positional")
    config = rljax.SACConfig(env=PENDULUM, total_timesteps=2 * 16, updates_per_chunk=16, num_envs=2, batch_size=8,
                             buffer_size=64, learning_starts=8, hidden_sizes=(16,))
    result = rljax.train(config, env=env, env_params=params, options=rljax.RunOptions(quiet=True, checkpoints=False,
                         tensorboard=False, handle_signals=False))
    assert len(result.rows) == 1 and result.rows[0]["env_steps"] == 32
