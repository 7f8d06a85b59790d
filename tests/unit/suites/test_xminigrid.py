"""``xminigrid/<id>`` (:mod:`rljax.suites.xminigrid`): ids and errors (no compile), spaces of a jitted,
vmapped reset and step (traced), the contract probe (:func:`tests.support.suites.grid_probe`),
MiniGrid's time-discounted reward against rljax's per-env limit, one PPO chunk. Skipped, naming the
extra, without the ``xminigrid`` package."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import rljax
from rljax.core import registry as env_registry
from tests.support.suites import (GRID_LIMITS, SUITE_LIMIT, check_grid_contract, check_ppo_chunk, check_traced_shapes,
                                  grid_probe, limited, need)


XM_EMPTY = "xminigrid/MiniGrid-Empty-5x5"


def test_xminigrid_ids_and_errors():
    need("xminigrid", "xminigrid")
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
    need("xminigrid", "xminigrid")
    env, params = rljax.make(name)
    space = env.observation_space(params)
    assert space.shape == obs_shape and space.dtype == jnp.uint8
    np.testing.assert_array_equal(space.high[0, 0], [12, 11])  # tiles 0..12, colours 0..11
    assert env.action_space(params).n == 6 and params.max_steps_in_episode == limit
    check_traced_shapes(name, env, params, obs_shape)


def test_xminigrid_contract_truncation_and_termination():
    need("xminigrid", "xminigrid")
    env, params = rljax.make(XM_EMPTY)
    assert params.max_steps_in_episode == 100
    # A user who sets the suite's own limit below rljax's: the adapter still switches it off.
    params = params.replace(inner=params.inner.replace(max_steps=SUITE_LIMIT))

    def kill(state):  # the agent one cell west of the goal (3, 3), facing east (direction 1)
        timestep = state.inner
        agent = timestep.state.agent.replace(position=jnp.asarray([3, 2]), direction=jnp.asarray(1))
        return state.replace(inner=timestep.replace(state=timestep.state.replace(agent=agent)))

    obs0, out = grid_probe(env, limited(params, GRID_LIMITS), kill, first_action=0)  # 0: forward
    term, _ = check_grid_contract(env, obs0, out)
    # MiniGrid's reward 1 - 0.9 t / T with T rljax's (per-env) time limit: t = 1, T = 20.
    np.testing.assert_allclose(out["reward"][0, 0], 1 - 0.9 * 1 / GRID_LIMITS[0], rtol=1e-6)
    steps, envs = np.nonzero(term)
    lengths = out["time"]  # after a termination the clock is 0; recover t from the step before
    for s, e in zip(steps, envs):
        t = 1 + (lengths[s - 1, e] if s > 0 else 0)
        np.testing.assert_allclose(out["reward"][s, e], 1 - 0.9 * t / GRID_LIMITS[e], rtol=1e-6)


# Slow: by default the contract test above (the suite's envs through rljax's stack) stands for it.
@pytest.mark.slow
def test_xminigrid_ppo_chunk():
    need("xminigrid", "xminigrid")
    config = rljax.PPOConfig(env=XM_EMPTY, total_timesteps=4 * 8, updates_per_chunk=1, num_envs=4, num_steps=8,
                             num_epochs=1, num_minibatches=2, hidden_sizes=(16,))
    check_ppo_chunk(config)
