"""HostEnvSpaces: the env an agent is built from for host envs. Its spaces (Gymnasium's int64
Discrete as int32), a zero observation, a step that is a traced template only, and making envs only
with a factory."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.env import Box, Discrete
from rljax.host.base import HostSpec
from rljax.host.spaces import HostEnvSpaces


def test_the_spaces_of_a_spec_with_gymnasiums_int64_discrete_as_int32():
    spec = HostSpec(3, Box(-1.0, 1.0, (4,), np.float32), Discrete(5, dtype=np.int64))
    env = HostEnvSpaces.of(spec, "gymnasium/X-v0")
    assert env.observation_space() is spec.observation_space
    assert env.action_space().n == 5 and np.dtype(env.action_space().dtype) == np.int32
    obs, state = env.reset(jax.random.key(0))
    assert obs.shape == (4,) and obs.dtype == jnp.float32 and not obs.any() and state == ()


def test_a_step_is_a_traced_template_and_refused_with_values():
    env = HostEnvSpaces("gymnasium/X-v0", Box(0, 255, (2, 2, 3), np.uint8), Box(-1.0, 1.0, (2,), np.float32))
    obs, _, reward, terminated, truncated, _ = jax.eval_shape(
        lambda a: env.step(jax.random.key(0), (), a), jnp.zeros(2))
    assert (obs.shape, obs.dtype, reward.dtype, terminated.dtype) == ((2, 2, 3), jnp.uint8, jnp.float32, jnp.bool_)
    assert truncated.dtype == jnp.bool_
    with pytest.raises(TypeError, match="gymnasium/X-v0 is a host env: it is stepped on the host"):
        env.step(jax.random.key(0), (), jnp.zeros(2))


def test_envs_are_made_only_with_a_factory():
    made = []
    env = HostEnvSpaces("gymnasium/X-v0", Discrete(3), Discrete(2), lambda name, n, render=False: made.append(
        (name, n, render)) or "envs")
    assert env.make(4, render=True) == "envs" and made == [("gymnasium/X-v0", 4, True)]
    with pytest.raises(ValueError, match=r"no factory to make the envs: build HostEnvSpaces with make="):
        HostEnvSpaces("gymnasium/X-v0", Discrete(3), Discrete(2)).make(1)
