"""The chunk program: the plan's arithmetic, the non-finite count, strong types, the per-update
row groups and their packing, and Program compiling one executable for a single run and for a
population (shapes, donation, member split)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

import envs
from rljax.agents.ppo import PPOConfig
from rljax.runtime.distributed import fetch
from rljax.agents.base import UpdateOutput
from rljax.core.rollout import EpisodeSummary
from rljax.training.program import (ROW_BUDGET, collective_bytes, ChunkOutput, Plan, Program, UpdateRows, auto_log_every, make_chunk,
                                    nonfinite_count, pack_output, plan_updates, resume_plan, row_groups, strong_types)
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
    # Leaves of several float dtypes and shapes, and a state with nothing to watch.
    mixed = {"half": jnp.array([jnp.nan], jnp.float16), "grid": jnp.full((2, 3), jnp.inf), "count": jnp.int32(1)}
    assert float(nonfinite_count(mixed)) == 7.0
    assert nonfinite_count({"count": jnp.int32(1)}).dtype == jnp.float32 and float(nonfinite_count({})) == 0.0


def test_strong_types_keeps_values_and_dtypes_and_drops_weak_types():
    weak = jnp.asarray(0.5)  # a Python float enters weakly typed
    out = strong_types({"a": weak, "b": 2.0, "c": jnp.int32(3)})
    assert weak.weak_type and not out["a"].weak_type and out["a"].dtype == jnp.float32 and float(out["a"]) == 0.5
    assert not out["b"].weak_type and float(out["b"]) == 2.0
    assert out["c"].dtype == jnp.int32 and int(out["c"]) == 3


def test_row_groups_by_hand():
    v = jnp.array([1.0, 2.0, 3.0, 4.0, 5.0])
    np.testing.assert_array_equal(row_groups(v, 1), v)  # one row per update: the values themselves
    np.testing.assert_allclose(row_groups(v, 2), [1.5, 3.5, 5.0])  # the last group holds the 5th update alone
    np.testing.assert_allclose(row_groups(v, 2, "sum"), [3.0, 7.0, 5.0])
    np.testing.assert_allclose(row_groups(v, 2, "max"), [2.0, 4.0, 5.0])
    np.testing.assert_allclose(row_groups({"a": v}, 5)["a"], [3.0])


def test_auto_log_every_keeps_a_chunks_rows_within_the_budget():
    assert auto_log_every(200) == 1  # a single run with the automatic chunk size: every update
    assert auto_log_every(98, members=2) == 1
    assert auto_log_every(200, members=4) == 4  # 50 rows per member
    assert auto_log_every(200, members=512) == 200  # one row per chunk
    for k, p in [(7, 1), (200, 3), (150, 64), (1, 1000)]:
        assert 1 <= math.ceil(k / auto_log_every(k, p)) * p <= max(ROW_BUDGET, p)


def _counting_update(state):
    """A stand-in update: counts, and reports metrics and one episode that are the update's index."""
    i = state.astype(jnp.float32)
    episodes = EpisodeSummary(count=jnp.float32(1.0), return_sum=10 * i, length_sum=i, components={}, env_nonfinite=i)
    return state + 1, UpdateOutput({"loss": i}, episodes)


def test_packing_flattens_scalars_and_rows_and_keeps_a_populations_leading_axis():
    packed, unpack = pack_output(make_chunk(_counting_update, num_updates=5, axis_name=None, log_every=2))
    _, vec = jax.jit(jax.vmap(packed))(jnp.array([0, 10], jnp.int32))
    out = unpack(vec)
    assert isinstance(out, ChunkOutput) and isinstance(out.updates, UpdateRows)
    assert vec.shape == (2, 2 + 4 + 3 * (1 + 4))  # 2 chunk metrics + 4 episode sums, then 3 rows of each
    np.testing.assert_allclose(out.metrics["loss"], [2.0, 12.0])
    np.testing.assert_allclose(out.updates.metrics["loss"][1], [10.5, 12.5, 14.0])
    np.testing.assert_allclose(out.updates.episodes.count, [[2, 2, 1], [2, 2, 1]])
    np.testing.assert_allclose(out.updates.episodes.env_nonfinite[0], [1, 5, 4])  # sums over each group


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


def test_collective_bytes_counts_every_collective_by_hand():
    def f(x):
        def body(c, _):
            return c + jax.lax.psum(x, "i"), None

        y, _ = jax.lax.scan(body, x, None, length=5)                                  # 5 x 48 bytes
        z = jax.lax.cond(x[0, 0] > 0, lambda: jax.lax.psum(x, "i"), lambda: x)      # the larger branch: 48
        return jax.lax.pmean(y, "i"), jax.lax.all_gather(x, "i"), jax.lax.pmax(x, "i"), z  # 3 x 48

    assert collective_bytes(jax.make_jaxpr(f, axis_env=[("i", 4)])(jnp.ones((3, 4)))) == 5 * 48 + 48 + 3 * 48


def test_a_data_parallel_ppo_update_all_reduces_its_gradients_once_per_minibatch_step():
    from rljax.agents.ppo import make_ppo
    from rljax.core.registry import make

    cfg = PPOConfig(num_envs=4, num_steps=8, num_epochs=3, num_minibatches=2, hidden_sizes=(16,))
    env, params = make(cfg.env)
    agent = make_ppo(cfg, env, params, axis_name="i")
    state = jax.eval_shape(lambda: agent.init(jax.random.key(0), 0, 10, cfg.hyperparams(), params))
    got = collective_bytes(jax.make_jaxpr(agent.update, axis_env=[("i", 2)])(state))
    grads = 3 * 2 * sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state.params))
    assert grads < got < grads + 1024  # the gradient all-reduces, and a few scalar metrics
