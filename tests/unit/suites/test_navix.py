"""``navix/<id>`` (:mod:`rljax.suites.navix`): ids and errors (no compile), spaces of a jitted, vmapped
reset and step (traced), the contract probe (:func:`tests.support.suites.grid_probe`: the goal is the
only termination, rljax's limit the only truncation, the suite's own limit switched off), one PPO
chunk with the default CNN encoder. Skipped, naming the extra, without the ``navix`` package."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import rljax
from rljax.core import registry as env_registry
from tests.support.suites import (GRID_LIMITS, SUITE_LIMIT, check_grid_contract, check_ppo_chunk, check_traced_shapes,
                                  grid_probe, limited, need)


NAVIX_EMPTY = "navix/Navix-Empty-5x5-v0"


def test_navix_ids_and_errors():
    need("navix", "navix")
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
    need("navix", "navix")
    env, params = rljax.make(name, **kwargs)
    space = env.observation_space(params)
    assert space.shape == obs_shape and space.dtype == jnp.uint8
    assert env.action_space(params).n == 7 and params.max_steps_in_episode == 100
    check_traced_shapes(name, env, params, obs_shape)


def test_navix_keycorridor_observation_is_in_its_space():
    """Navix 0.7.4 writes 254 for KeyCorridor's locked door (its declared space says <= 8): the
    adapter's uint8 [0, 255] space holds what Navix really emits."""
    need("navix", "navix")
    env, params = rljax.make("navix/Navix-KeyCorridorS3R1-v0")
    obs, _ = env.reset(jax.random.key(0), params)
    assert obs.dtype == jnp.uint8 and int(obs.max()) > 10
    assert bool(env.observation_space(params).contains(obs))


def test_navix_contract_truncation_and_termination():
    need("navix", "navix")
    env, params = rljax.make(NAVIX_EMPTY, max_steps=SUITE_LIMIT)  # Navix's own limit: 3
    assert env.navix_env.max_steps == SUITE_LIMIT

    def kill(state):  # the player one cell west of the goal (3, 3), facing east
        timestep = state.inner
        entities = dict(timestep.state.entities)
        entities["player"] = entities["player"].replace(position=jnp.asarray([[3, 2]]), direction=jnp.asarray([0]))
        return state.replace(inner=timestep.replace(state=timestep.state.replace(entities=entities)))

    obs0, out = grid_probe(env, limited(params, GRID_LIMITS), kill, first_action=2)  # 2: forward
    check_grid_contract(env, obs0, out)
    assert out["reward"][0, 0] == 1.0  # Navix's Empty pays 1 on the goal
    # The finished episode's last grid has the player (tag 10) on the goal's cell.
    assert out["final"][0, 0, 3, 3, 0] == 10 and out["obs"][0, 0, 1, 1, 0] == 10


# Slow: by default the contract test above (the suite's envs through rljax's stack) and tests/unit/suites/
# test_xminigrid.py's spaces under jit and vmap stand for it.
@pytest.mark.slow
def test_navix_ppo_chunk():
    need("navix", "navix")
    config = rljax.PPOConfig(env=NAVIX_EMPTY, total_timesteps=4 * 8, updates_per_chunk=1, num_envs=4, num_steps=8,
                             num_epochs=1, num_minibatches=2, hidden_sizes=(16,))
    check_ppo_chunk(config)
