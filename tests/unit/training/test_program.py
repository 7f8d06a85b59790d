"""The chunk program: the plan's arithmetic, the non-finite count, strong types, and Program
compiling one executable for a single run and for a population (shapes, donation, member split)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

import envs
from rljax.agents.ppo import PPOConfig
from rljax.runtime.distributed import fetch
from rljax.training.program import Plan, Program, nonfinite_count, plan_updates, resume_plan, strong_types
from rljax.training.sweep import SweepSpec, build_members, make_population

TINY = PPOConfig(total_timesteps=4 * 8 * 2, updates_per_chunk=1, num_envs=4, num_steps=8, num_epochs=1,
                 num_minibatches=1, hidden_sizes=(8,))


@pytest.mark.parametrize("total, per_update, k, expected", [
    (1000, 10, 0, Plan(100, 10, 10, 10)),    # n = 100: ~10 chunks of 10
    (70, 10, 3, Plan(9, 3, 3, 10)),          # n = 7 with K = 3: rounded up to 3 chunks of 3
    (5, 10, 0, Plan(1, 1, 1, 10)),           # less than one update: still one
    (130, 10, 0, Plan(13, 1, 13, 10)),       # n = 13, K = 2 does not divide it: its divisor in [1, 4] is 1
])
def test_plan_updates(total, per_update, k, expected):
    assert plan_updates(total, per_update, k) == expected


def test_plan_refuses_a_non_positive_update_size():
    with pytest.raises(ValueError, match="env_steps_per_update must be positive, got 0"):
        plan_updates(100, 0)


def test_resume_plan_keeps_the_saved_chunk_size_even_below_one_chunk():
    assert resume_plan(200, 10, 5) == Plan(20, 5, 4, 10)
    assert resume_plan(30, 10, 5) == Plan(5, 5, 1, 10)  # 3 updates left in a chunk of 5


@struct.dataclass
class _State:
    params: jax.Array
    obs: jax.Array
    steps: jax.Array
    buffer: jax.Array


def test_nonfinite_count_watches_every_float_leaf_but_the_replay_buffer():
    state = _State(params=jnp.array([1.0, jnp.nan, jnp.inf]), obs=jnp.array([[-jnp.inf, 0.0]]),
                   steps=jnp.array([3], jnp.int32), buffer=jnp.array([jnp.nan, jnp.nan]))
    assert float(nonfinite_count(state)) == 3.0
    assert float(nonfinite_count(_State(jnp.zeros(2), jnp.zeros(1), jnp.zeros(1, jnp.int32), jnp.zeros(1)))) == 0.0


def test_strong_types_keeps_values_and_dtypes_and_drops_weak_types():
    weak = jnp.asarray(0.5)  # a Python float enters weakly typed
    out = strong_types({"a": weak, "b": 2.0, "c": jnp.int32(3)})
    assert weak.weak_type and not out["a"].weak_type and out["a"].dtype == jnp.float32 and float(out["a"]) == 0.5
    assert not out["b"].weak_type and float(out["b"]) == 2.0
    assert out["c"].dtype == jnp.int32 and int(out["c"]) == 3


def _run_chunk(program: Program):
    plan = plan_updates(TINY.total_timesteps, program.agent.env_steps_per_update, TINY.updates_per_chunk)
    state = program.init_state(plan.num_updates)
    compiled, unpack = program.compile(state, plan)
    new, vec = compiled(state)
    return plan, state, new, vec, unpack


def test_a_single_runs_chunk_is_one_executable_with_the_state_donated():
    env, params = envs.make(TINY.env)
    program = Program(TINY, env, params)
    assert (program.size, program.isolated, program.axis_name) == (1, False, None)
    plan, state, new, vec, unpack = _run_chunk(program)
    assert plan == Plan(2, 1, 2, 32)
    assert all(x.is_deleted() for x in jax.tree.leaves(state))  # donated to the chunk
    assert vec.dtype == jnp.float32 and vec.ndim == 1
    [out] = program.split(unpack(fetch(program.first_device(vec))))
    assert np.isfinite(out.metrics["policy_loss"]) and out.metrics["nonfinite_state"] == 0.0
    assert out.episodes.count >= 0
    assert jax.tree.structure(new) == jax.tree.structure(program.init_state(plan.num_updates))


def test_a_populations_chunk_has_a_member_axis_and_splits_per_member():
    env, params = envs.make(TINY.env)
    members = build_members(TINY, params, SweepSpec(seeds=(0, 1)))
    program = Program(TINY, env, params, make_population(TINY, params, members, 1))
    assert (program.size, program.isolated, program.names) == (2, True, tuple(m.name for m in members))
    _, _, new, vec, unpack = _run_chunk(program)
    assert vec.shape[0] == 2
    outs = program.split(unpack(fetch(vec)))
    assert len(outs) == 2 and all(np.ndim(o.metrics["policy_loss"]) == 0 for o in outs)
    # Members differ by seed: their losses are their own.
    assert outs[0].metrics["policy_loss"] != outs[1].metrics["policy_loss"]
    assert jax.tree.leaves(new)[0].shape[0] == 2


def test_a_sweep_member_must_be_a_single_device_run():
    env, params = envs.make(TINY.env)
    members = build_members(TINY, params, SweepSpec(seeds=(0, 1)))
    config = PPOConfig(**{**TINY.__dict__, "num_devices": 2})
    with pytest.raises(ValueError, match="sweep members are single-device runs: num_devices=2"):
        Program(config, env, params, make_population(TINY, params, members, 1))
