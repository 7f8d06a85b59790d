"""The grid-world suite adapters, Navix (``navix/``) and XLand-MiniGrid (``xminigrid/``).

Each suite's tests are skipped, with the extra to install, when its package is missing. Per suite:
ids and errors (no compile); spaces of a jitted, vmapped reset and step for a few ids (traced, not
compiled); one jitted probe over ``VecEnv(batched_params=True)`` that checks the contract against
the adapter's own raw step; one PPO chunk with the default ``encoder='auto'`` (a CNN on the grid).

The probe: env 0 starts one step from the goal and walks onto it (a real end: ``terminated`` only),
envs 1 and 2 act at random under short time limits (``truncated`` only, exactly at the limit), and
the suite's OWN step limit is set below rljax's, to show that it does not fire. Every step's
``final_observation`` must equal the observation of the adapter's raw step (``step_env``, no reset)
from the same state, and after an episode ends the observation must be the reset's (both Empty
ids start every episode in the same place), so a final observation that happens to equal the first
one is no false alarm.
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rljax
from rljax.core import registry as env_registry
from rljax.core import wrappers
from rljax.agents.base import observation_layout
from rljax.env import Box, Discrete
from tests.unit.suites.test_adapter import NUM_ENVS, _check_ppo_chunk, _limited, _need

NUM_STEPS = 24
LIMITS = [20, 5, 7]  # env 0: long (its goal ends it first), envs 1-2: short, per-env (batched params)
SUITE_LIMIT = 3      # the suite's own step limit, below rljax's: it must not end an episode


def _grid_probe(env, params, kill, first_action):
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


def _check_grid_contract(env, obs0, out):
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
    # The clock: +1 per step, back to 0 when an episode ends; truncated exactly at rljax's limit
    # (never at the suite's own SUITE_LIMIT).
    length = np.zeros(NUM_ENVS, int)
    for t in range(NUM_STEPS):
        length += 1
        np.testing.assert_array_equal(trunc[t], length == np.asarray(LIMITS), err_msg=f"truncated at step {t}")
        length[done[t]] = 0
        np.testing.assert_array_equal(time[t], length, err_msg=f"clock at step {t}")
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


def test_grid_suites_are_registered():
    assert {"navix", "xminigrid"} <= set(env_registry.SUITES)


@pytest.mark.parametrize("prefix,module,extra", [("navix", "navix", "navix"), ("xminigrid", "xminigrid", "xminigrid")])
def test_missing_package_names_the_extra(monkeypatch, prefix, module, extra):
    monkeypatch.setitem(sys.modules, module, None)  # makes `import <module>` fail
    with pytest.raises(ImportError, match=rf"pip install -e \"\.\[{extra}\]\".*'rljax-chunked\[{extra}\]'"):
        rljax.make(f"{prefix}/Anything")
    with pytest.raises(ImportError, match=rf"rljax-chunked\[{extra}\]"):
        env_registry.suite_registered(prefix)


# --------------------------------------------------------------------------------------------------
# Navix
# --------------------------------------------------------------------------------------------------

NAVIX_EMPTY = "navix/Navix-Empty-5x5-v0"


def test_navix_ids_and_errors():
    _need("navix", "navix")
    names = env_registry.suite_registered("navix")
    assert {NAVIX_EMPTY, "navix/Navix-DoorKey-5x5-v0", "navix/Navix-FourRooms-v0"} <= set(names)
    with pytest.raises(ValueError, match=r"unknown navix environment 'Navix-Nope-v0'.*Navix-Empty-5x5-v0"):
        rljax.make("navix/Navix-Nope-v0")
    with pytest.raises(ValueError, match=r"navix observation 'pixels' is not one of symbolic, "):
        rljax.make(NAVIX_EMPTY, observation="pixels")
    with pytest.raises(ValueError, match=r"max_steps must be a positive int"):
        rljax.make(NAVIX_EMPTY, max_steps=0)
    env, params = rljax.make(NAVIX_EMPTY, max_steps=64)
    assert params.max_steps_in_episode == env.navix_env.max_steps == 64


def _check_traced_shapes(name, env, params, obs_shape):
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


@pytest.mark.parametrize("name,kwargs,obs_shape", [
    (NAVIX_EMPTY, {}, (5, 5, 3)),
    ("navix/Navix-DoorKey-5x5-v0", {}, (5, 5, 3)),
    ("navix/Navix-KeyCorridorS3R1-v0", {}, (3, 7, 3)),
    ("navix/Navix-DoorKey-8x8-v0", {"observation": "symbolic_first_person"}, (7, 7, 3)),
    (NAVIX_EMPTY, {"observation": "rgb"}, (40, 40, 3)),
])
def test_navix_spaces_under_jit_and_vmap(name, kwargs, obs_shape):
    """Shapes and dtypes of a jitted, vmapped reset and step (traced, not compiled); the default
    encoder takes each observation (a CNN on every one of these)."""
    _need("navix", "navix")
    env, params = rljax.make(name, **kwargs)
    space = env.observation_space(params)
    assert space.shape == obs_shape and space.dtype == jnp.uint8
    assert env.action_space(params).n == 7 and params.max_steps_in_episode == 100
    _check_traced_shapes(name, env, params, obs_shape)


def test_navix_keycorridor_observation_is_in_its_space():
    """Navix 0.7.4 writes 254 for KeyCorridor's locked door (its declared space says <= 8): the
    adapter's uint8 [0, 255] space holds what Navix really emits."""
    _need("navix", "navix")
    env, params = rljax.make("navix/Navix-KeyCorridorS3R1-v0")
    obs, _ = env.reset(jax.random.key(0), params)
    assert obs.dtype == jnp.uint8 and int(obs.max()) > 10
    assert bool(env.observation_space(params).contains(obs))


def test_navix_contract_truncation_and_termination():
    _need("navix", "navix")
    env, params = rljax.make(NAVIX_EMPTY, max_steps=SUITE_LIMIT)  # Navix's own limit: 3
    assert env.navix_env.max_steps == SUITE_LIMIT

    def kill(state):  # the player one cell west of the goal (3, 3), facing east
        timestep = state.inner
        entities = dict(timestep.state.entities)
        entities["player"] = entities["player"].replace(position=jnp.asarray([[3, 2]]), direction=jnp.asarray([0]))
        return state.replace(inner=timestep.replace(state=timestep.state.replace(entities=entities)))

    obs0, out = _grid_probe(env, _limited(params, LIMITS), kill, first_action=2)  # 2: forward
    _check_grid_contract(env, obs0, out)
    assert out["reward"][0, 0] == 1.0  # Navix's Empty pays 1 on the goal
    # The finished episode's last grid has the player (tag 10) on the goal's cell.
    assert out["final"][0, 0, 3, 3, 0] == 10 and out["obs"][0, 0, 1, 1, 0] == 10


def test_navix_ppo_chunk():
    _need("navix", "navix")
    config = rljax.PPOConfig(env=NAVIX_EMPTY, total_timesteps=4 * 8, updates_per_chunk=1, num_envs=4, num_steps=8,
                             num_epochs=1, num_minibatches=2, hidden_sizes=(16,))
    _check_ppo_chunk(config)


# --------------------------------------------------------------------------------------------------
# XLand-MiniGrid
# --------------------------------------------------------------------------------------------------

XM_EMPTY = "xminigrid/MiniGrid-Empty-5x5"


def test_xminigrid_ids_and_errors():
    _need("xminigrid", "xminigrid")
    names = env_registry.suite_registered("xminigrid")
    assert {XM_EMPTY, "xminigrid/MiniGrid-DoorKey-5x5", "xminigrid/XLand-MiniGrid-R1-9x9"} <= set(names)
    with pytest.raises(ValueError, match=r"unknown xminigrid environment 'MiniGrid-Nope'.*MiniGrid-Empty-5x5"):
        rljax.make("xminigrid/MiniGrid-Nope")
    with pytest.raises(ValueError, match=r"fields of its EnvParams"):
        rljax.make(XM_EMPTY, views=5)
    env, params = rljax.make(XM_EMPTY, max_steps=64, view_size=5)
    assert params.max_steps_in_episode == 64  # its max_steps becomes rljax's time limit ...
    assert params.inner.max_steps == 2**31 - 1  # ... and is off in the suite itself
    assert env.observation_space(params).shape == (5, 5, 2)


@pytest.mark.parametrize("name,obs_shape,limit", [
    (XM_EMPTY, (7, 7, 2), 100),
    ("xminigrid/MiniGrid-DoorKey-5x5", (7, 7, 2), 250),
    ("xminigrid/MiniGrid-MemoryS8", (3, 3, 2), 5 * 8**2),  # a 3 x 3 view: one 3x3 conv fits
    ("xminigrid/XLand-MiniGrid-R1-9x9", (5, 5, 2), 3 * 9 * 9),
])
def test_xminigrid_spaces_under_jit_and_vmap(name, obs_shape, limit):
    """Shapes and dtypes of a jitted, vmapped reset and step (traced, not compiled)."""
    _need("xminigrid", "xminigrid")
    env, params = rljax.make(name)
    space = env.observation_space(params)
    assert space.shape == obs_shape and space.dtype == jnp.uint8
    np.testing.assert_array_equal(space.high[0, 0], [12, 11])  # tiles 0..12, colours 0..11
    assert env.action_space(params).n == 6 and params.max_steps_in_episode == limit
    _check_traced_shapes(name, env, params, obs_shape)


def test_xminigrid_contract_truncation_and_termination():
    _need("xminigrid", "xminigrid")
    env, params = rljax.make(XM_EMPTY)
    assert params.max_steps_in_episode == 100
    # A user who sets the suite's own limit below rljax's: the adapter still switches it off.
    params = params.replace(inner=params.inner.replace(max_steps=SUITE_LIMIT))

    def kill(state):  # the agent one cell west of the goal (3, 3), facing east (direction 1)
        timestep = state.inner
        agent = timestep.state.agent.replace(position=jnp.asarray([3, 2]), direction=jnp.asarray(1))
        return state.replace(inner=timestep.replace(state=timestep.state.replace(agent=agent)))

    obs0, out = _grid_probe(env, _limited(params, LIMITS), kill, first_action=0)  # 0: forward
    term, _ = _check_grid_contract(env, obs0, out)
    # MiniGrid's reward 1 - 0.9 t / T with T rljax's (per-env) time limit: t = 1, T = 20.
    np.testing.assert_allclose(out["reward"][0, 0], 1 - 0.9 * 1 / LIMITS[0], rtol=1e-6)
    steps, envs = np.nonzero(term)
    lengths = out["time"]  # after a termination the clock is 0; recover t from the step before
    for s, e in zip(steps, envs):
        t = 1 + (lengths[s - 1, e] if s > 0 else 0)
        np.testing.assert_allclose(out["reward"][s, e], 1 - 0.9 * t / LIMITS[e], rtol=1e-6)


def test_xminigrid_ppo_chunk():
    _need("xminigrid", "xminigrid")
    config = rljax.PPOConfig(env=XM_EMPTY, total_timesteps=4 * 8, updates_per_chunk=1, num_envs=4, num_steps=8,
                             num_epochs=1, num_minibatches=2, hidden_sizes=(16,))
    _check_ppo_chunk(config)
