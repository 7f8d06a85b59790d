"""Runs the example environment of docs/env_api.md, so the documentation cannot rot."""

from __future__ import annotations

import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np

DOC = pathlib.Path(__file__).resolve().parents[1] / "docs" / "env_api.md"


def load_doc_example() -> dict:
    """Executes the python blocks that define and use PointMass; returns their namespace."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    define = next(b for b in blocks if "class PointMass" in b)
    use = next(b for b in blocks if "env = PointMass()" in b)
    namespace: dict = {}
    exec(compile(define, str(DOC), "exec"), namespace)  # noqa: S102 - our own documentation
    exec(compile(use, str(DOC), "exec"), namespace)  # noqa: S102
    return namespace


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
        far = state.replace(x=jnp.full((3,), 5.0))  # never terminates
        obs, state, _, term, trunc, _ = step(jax.random.split(jax.random.key(t), 3), far, jnp.zeros((3, 1)), params)
        assert not bool(term.any())
        assert bool(trunc.all()) == (t == params.max_steps_in_episode)
    assert step._cache_size() == 1


def test_readme_env_example_is_the_tested_one():
    readme = (DOC.parents[1] / "README.md").read_text()
    doc_block = next(b for b in re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
                     if "class PointMass" in b)
    assert doc_block in readme
