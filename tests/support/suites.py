"""Helpers shared by the env-suite adapter tests (``tests/unit/suites``): a jitted ``VecEnv`` probe
of random actions under per-env time limits, the contract checks over what it saw, traced
(uncompiled) shapes of a reset and a step, and one training chunk on a suite's env.

Compiling a suite's step dominates those tests (the step holds the suite's reset, for the
auto-reset), so each suite compiles one probe and one training chunk.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rljax
from rljax.agents.base import observation_layout
from rljax.core import wrappers
from rljax.env import Box, Discrete

NUM_ENVS = 3
NUM_STEPS = 24
TIME_LIMIT = 5


def need(module: str, extra: str) -> None:
    """Skips the calling test, naming the extra to install, when the suite's package is missing."""
    pytest.importorskip(module, reason=f"needs the {extra!r} extra: pip install -e '.[{extra}]'")


def limited(params, limits):
    """``NUM_ENVS`` params, env i's time limit ``limits[i]``, for ``VecEnv(batched_params=True)``."""
    return wrappers.VecEnv.stack_params([params.replace(max_steps_in_episode=n) for n in limits])


def probe(env, params, kill=None, push=False):
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


def check_clock(trunc, done, time, limits):
    """The episode clock ``time`` ``[T, B]``: +1 per step, back to 0 on the step an episode ends;
    ``truncated`` exactly on the step that reaches env i's limit ``limits[i]``."""
    length = np.zeros(NUM_ENVS, int)
    for t in range(NUM_STEPS):
        length += 1
        np.testing.assert_array_equal(trunc[t], length == np.asarray(limits), err_msg=f"truncated at step {t}")
        length[done[t]] = 0
        np.testing.assert_array_equal(time[t], length, err_msg=f"clock at step {t}")


def check_contract(env, limits, out, obs0):
    """Checks a :func:`probe`'s output against the env contract (spaces, dtypes, the episode clock,
    truncation exactly at ``limits``, ``final_observation``); returns ``(terminated, truncated)``."""
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
    check_clock(trunc, done, time, limits)
    # final_observation: the step's own observation while the episode runs, the finished
    # episode's last one (not the next episode's first) when it ends.
    obs, final = np.asarray(out["obs"]), np.asarray(out["final"])
    axes = tuple(range(2, obs.ndim))
    same = np.all(obs == final, axis=axes)
    assert np.all(same[~done]), "final_observation differs from obs on a step that did not end"
    assert not np.any(same[done]), "final_observation is the next episode's first observation"
    return term, trunc


def check_ppo_chunk(config):
    """Trains ``config`` (one chunk) without files; checks the row is finite and returns it."""
    result = rljax.train(config, options=rljax.RunOptions(quiet=True, checkpoints=False, tensorboard=False,
                                                          handle_signals=False))
    assert len(result.rows) == 1
    row = result.rows[0]
    assert row["env_steps"] == config.total_timesteps
    assert all(np.isfinite(v) for v in row.values() if isinstance(v, float))
    return row



GRID_LIMITS = [20, 5, 7]  # env 0: long (its goal ends it first), envs 1-2: short, per-env (batched params)
SUITE_LIMIT = 3      # the suite's own step limit, below rljax's: it must not end an episode


def grid_probe(env, params, kill, first_action):
    """Jitted ``VecEnv`` rollout, random actions; ``kill(state)`` edits env 0's first state and env 0
    takes ``first_action`` on step 0. Returns obs0 and per-step arrays, with the raw step's obs."""
    venv = wrappers.VecEnv(env, NUM_ENVS, batched_params=True)
    act_space, obs_space = env.action_space(env.default_params), env.observation_space(env.default_params)

    def run(key):
        k_reset, k_run = jax.random.split(key)
        obs0, vstate = venv.reset(k_reset, params)
        first = kill(jax.tree.map(lambda x: x[0], vstate.env_state))
        vstate = vstate.replace(env_state=jax.tree.map(lambda x, k: x.at[0].set(k), vstate.env_state, first))

        def body(carry, xs):
            vstate, t = carry
            k_act, k_step = jax.random.split(xs)
            action = jax.vmap(act_space.sample)(jax.random.split(k_act, NUM_ENVS))
            action = jnp.where((t == 0) & (jnp.arange(NUM_ENVS) == 0), first_action, action)
            raw_obs = jax.vmap(env.step_env)(jax.random.split(k_step, NUM_ENVS), vstate.env_state, action, params)[0]
            obs, vstate2, reward, term, trunc, info = venv.step(k_step, vstate, action, params)
            out = dict(obs=obs, final=info["final_observation"], raw=raw_obs, reward=reward, term=term, trunc=trunc,
                       time=vstate2.env_state.time, in_space=jax.vmap(obs_space.contains)(obs),
                       final_in_space=jax.vmap(obs_space.contains)(info["final_observation"]))
            return (vstate2, t + 1), out

        _, out = jax.lax.scan(body, (vstate, 0), jax.random.split(k_run, NUM_STEPS))
        return obs0, out

    return jax.device_get(jax.jit(run)(jax.random.key(0)))


def check_grid_contract(env, obs0, out):
    """Checks a :func:`grid_probe`'s output: uint8 grids, the clock and truncation at
    :data:`GRID_LIMITS` (never at the suite's own :data:`SUITE_LIMIT`), ``final_observation`` equal to
    the raw step's, the goal as the only termination and reward; returns ``(terminated, truncated)``."""
    obs_space = env.observation_space(env.default_params)
    assert isinstance(obs_space, Box) and isinstance(env.action_space(env.default_params), Discrete)
    assert obs_space.dtype == jnp.uint8  # the suite's integer grid, not cast to float
    assert obs0.shape == (NUM_ENVS, *obs_space.shape) and obs0.dtype == jnp.uint8
    for k in ("obs", "final", "raw"):
        assert out[k].shape == (NUM_STEPS, NUM_ENVS, *obs_space.shape) and out[k].dtype == jnp.uint8, k
    assert out["reward"].dtype == jnp.float32 and out["reward"].shape == (NUM_STEPS, NUM_ENVS)
    assert out["term"].dtype == out["trunc"].dtype == jnp.bool_
    assert np.all(out["in_space"]) and np.all(out["final_in_space"])
    term, trunc, time = out["term"], out["trunc"], out["time"]
    done = term | trunc
    check_clock(trunc, done, time, GRID_LIMITS)  # rljax's limit, never the suite's own SUITE_LIMIT
    assert time.max() > SUITE_LIMIT, "no episode outlived the suite's own step limit"
    assert trunc[:, 1:].any(), "no episode reached the time limit"
    # final_observation is the finished episode's (the raw step's), the next obs the reset's.
    np.testing.assert_array_equal(out["final"], out["raw"])
    np.testing.assert_array_equal(out["obs"][~done], out["raw"][~done])
    steps, envs = np.nonzero(done)
    np.testing.assert_array_equal(out["obs"][steps, envs], obs0[envs])
    # Empty rooms: the goal is the only real end, and the only reward.
    np.testing.assert_array_equal(term, out["reward"] > 0)
    assert term[0, 0] and not trunc[0, 0], "stepping onto the goal is a termination, not a time limit"
    assert not np.array_equal(out["final"][0, 0], obs0[0])
    return term, trunc


def check_traced_shapes(name, env, params, obs_shape):
    """``VecEnv`` reset and step traced under jit (nothing runs): uint8 grid observations of
    ``obs_shape``, float32 rewards, bool flags, a stable state structure; PPO's 'auto' encoder takes
    the grid through the CNN."""
    venv = wrappers.VecEnv(env, NUM_ENVS)
    obs, state = jax.eval_shape(jax.jit(venv.reset), jax.random.key(0), params)
    out = jax.eval_shape(jax.jit(venv.step), jax.random.key(1), state, jnp.zeros(NUM_ENVS, jnp.int32), params)
    assert obs.shape == out[0].shape == out[5]["final_observation"].shape == (NUM_ENVS, *obs_shape)
    assert obs.dtype == out[0].dtype == jnp.uint8
    assert [x.dtype for x in out[2:5]] == [jnp.float32, jnp.bool_, jnp.bool_]
    assert jax.tree.structure(out[1]) == jax.tree.structure(state)
    config = rljax.PPOConfig(env=name)
    assert [leaf.kind for leaf in observation_layout(config, env, params, "PPO")] == ["cnn"]
