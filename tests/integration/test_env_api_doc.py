"""Runs the example environment of docs/env_api.md, so the documentation cannot rot."""

from __future__ import annotations

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np

import rljax
from tests.support.env_doc import DOC, load_doc_example


def test_doc_example_runs_and_keeps_contract():
    ns = load_doc_example()
    env, params = ns["env"], ns["params"]
    assert ns["obs"].shape == (2,) and ns["obs"].dtype == jnp.float32
    assert ns["terminated"].dtype == jnp.bool_ and ns["truncated"].dtype == jnp.bool_

    # Hand-computed physics: v' = v + dt * F / m, x' = x + dt * v'.
    state = ns["PointState"](x=jnp.float32(0.5), v=jnp.float32(0.0), time=jnp.int32(0))
    obs, state2, reward, term, trunc, info = env.step(jax.random.key(0), state, jnp.array([1.0]), params)
    np.testing.assert_allclose(np.asarray(obs), [0.5 + 0.1 * 0.1, 0.1], rtol=1e-6)
    np.testing.assert_allclose(float(reward), -0.51 * 0.1, rtol=1e-6)
    assert not bool(term) and not bool(trunc)

    # Leaving the track (|x| > x_limit = 2) terminates with reward -10: v' = 1 + 0.1, x' = 1.99 + 0.11.
    state = ns["PointState"](x=jnp.float32(1.99), v=jnp.float32(1.0), time=jnp.int32(5))
    obs, state2, reward, term, trunc, info = env.step(jax.random.key(0), state, jnp.array([1.0]), params)
    assert bool(term) and float(reward) == -10.0 and int(state2.time) == 0
    np.testing.assert_allclose(np.asarray(info["final_observation"]), [2.1, 1.1], rtol=1e-6)

    # Reaching the origin at rest terminates with reward 10, and auto-resets.
    state = ns["PointState"](x=jnp.float32(0.01), v=jnp.float32(0.0), time=jnp.int32(5))
    obs, state2, reward, term, trunc, info = env.step(jax.random.key(0), state, jnp.array([0.0]), params)
    assert bool(term) and float(reward) == 10.0 and int(state2.time) == 0
    np.testing.assert_allclose(np.asarray(info["final_observation"]), [0.01, 0.0], atol=1e-7)

    # The time limit truncates exactly at max_steps_in_episode, under jit and vmap.
    step = jax.jit(jax.vmap(env.step, in_axes=(0, 0, 0, None)))
    keys = jax.random.split(jax.random.key(1), 3)
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
    for t in range(1, params.max_steps_in_episode + 1):
        off_goal = state.replace(x=jnp.full((3,), 1.0))  # |v| <= 1: x stays in [0.9, 1.1], never terminates
        obs, state, _, term, trunc, _ = step(jax.random.split(jax.random.key(t), 3), off_goal, jnp.zeros((3, 1)),
                                             params)
        assert not bool(term.any())
        assert bool(trunc.all()) == (t == params.max_steps_in_episode)
    assert step._cache_size() == 1


def test_readme_env_example_is_the_tested_one():
    readme = (DOC.parents[1] / "README.md").read_text()
    doc_block = next(b for b in re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
                     if "class PointMass" in b)
    assert doc_block in readme


def test_readme_train_command_learns():
    """The README's ``rljax.train(rljax.PPOConfig(...), env=PointMass())`` learns to reach the origin.

    Greedy returns: doing nothing about -15, uniform random actions about -14 (both mostly leave the
    track, -10); reaching the origin gives +10 minus the distance cost, about 9.3 when learned. The
    example before the track limit (unbounded positions) trained to about -770 with this command.
    """
    readme = (DOC.parents[1] / "README.md").read_text()
    command = re.search(r"Train on it directly: `rljax\.train\((rljax\.PPOConfig\(.*?\)), env=PointMass\(\)\)`",
                        readme, flags=re.S)
    config = eval(command.group(1), {"rljax": rljax})  # noqa: S307 - our own documentation
    config = dataclasses.replace(config, eval_interval=1000)  # one greedy evaluation, after the last chunk
    result = rljax.train(config, env=load_doc_example()["PointMass"](), options=rljax.RunOptions(quiet=True))
    final_eval = result.final_eval
    assert result.final_return > 5.0, result.final_return
    assert final_eval["eval/return_mean"] > 5.0, final_eval
    assert final_eval["eval/return_median"] > 0.0, final_eval  # a positive return reached the origin
