"""Runs past 2**31 and 2**32 updates and env steps: no counter overflows.

The train state counts in :class:`~rljax.core.counters.Count` words. These tests move a state's
counters (state surgery) to just below and above 2**31 and 2**32, run one compiled update, and check
every schedule and threshold it computed against a float64 / Python-integer reference: PPO's
annealed learning rate; DQN's epsilon and learning-rate schedules, ``learning_starts`` and the
target copies every ``target_update_interval`` env steps. A run configured for 5e9 env steps is
accepted, trains and checkpoints its exact counts.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

import rljax
from rljax.agents.dqn import DQNConfig, make_dqn
from rljax.agents.ppo import PPOConfig, make_ppo
from rljax.core.counters import Count, host_value
from rljax.core.registry import make

PAST = [2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**32 + 1, 3 * 2**32 + 11]
"""Update counts around the int32 and uint32 limits."""


def _same(a, b) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def test_ppo_learning_rate_anneals_exactly_past_2_to_the_32_updates():
    cfg = PPOConfig(num_envs=2, num_steps=4, num_epochs=1, num_minibatches=1, hidden_sizes=(8,), learning_rate=1e-3)
    env, params = make(cfg.env)
    agent = make_ppo(cfg, env, params)
    total = 4 * 2**32 + 3
    state = agent.init(jax.random.key(0), 0, total, cfg.hyperparams(), params)
    update = jax.jit(agent.update)
    for u in PAST:
        new, out = update(state.replace(updates=Count.of(u)))
        assert host_value(new.updates) == u + 1 and host_value(new.num_updates) == total
        np.testing.assert_allclose(float(out.metrics["learning_rate"]), 1e-3 * (1 - u / total), rtol=2e-6)


def _first_crossing(start: int, steps: int, interval: int) -> int:
    """The first update count >= start whose env steps cross a multiple of ``interval``."""
    u = start
    while (u * steps) % interval + steps < interval:
        u += 1
    return u


def test_dqn_schedules_learning_starts_and_target_copies_past_2_to_the_32_env_steps():
    steps, interval = 4, 1000  # env steps per update; target copy every 1000 env steps
    starts = (2**32 + 100) * steps  # learning starts after 2**32 + 100 updates: past the uint32 range
    cfg = DQNConfig(num_envs=4, num_steps=1, batch_size=4, buffer_size=64, learning_starts=starts,
                    target_update_interval=interval, tau=1.0, hidden_sizes=(8,), anneal_lr=True,
                    exploration_fraction=0.75)
    env, params = make(cfg.env)
    agent = make_dqn(cfg, env, params)
    total = 2**33 + 5  # updates in the run
    state = agent.init(jax.random.key(0), 0, total, cfg.hyperparams(), params)
    update = jax.jit(agent.update)
    crossing = _first_crossing(2**32 + 100, steps, interval)
    # Past the run's end the annealed learning rate is 0 (nothing learns): the cases stay inside it.
    cases = [*(u for u in PAST if u < total), 2**32 + 99, 2**32 + 100, crossing - 1, crossing, 2**33 - 2**20]
    seen = set()
    for u in cases:
        before = state.replace(updates=Count.of(u))
        new, out = update(before)
        s_before, s_total = u * steps, total * steps  # Python integers: the reference
        active = (u + 1) * steps >= starts
        synced = active and (s_before % interval) + steps >= interval
        frac = min(s_before / (0.75 * s_total), 1.0)
        progress = s_before / s_total
        np.testing.assert_allclose(float(out.metrics["epsilon"]), 1.0 + frac * (0.05 - 1.0), rtol=2e-6)
        # float32 holds the run's fraction to a few ulps of 1: the tolerance near the end of the run.
        np.testing.assert_allclose(float(out.metrics["learning_rate"]), 2.5e-4 * (1 - progress), rtol=2e-6,
                                   atol=2.5e-4 * 1e-6)
        assert host_value(new.updates) == u + 1
        learned = not _same(new.learner.params, before.learner.params)
        copied = not _same(new.learner.target_params, before.learner.target_params)
        assert (learned, copied) == (active, synced), (u, learned, copied)
        if copied:
            assert _same(new.learner.target_params, new.learner.params)  # tau = 1: a hard copy
        seen.add((active, synced))
    assert seen == {(False, False), (True, False), (True, True)}  # every branch was taken


def test_a_run_of_5e9_env_steps_is_accepted_trains_and_checkpoints_its_exact_counts(tmp_path):
    cfg = DQNConfig(total_timesteps=5_000_000_000, num_envs=1, num_steps=1, updates_per_chunk=4, batch_size=4,
                    buffer_size=32, learning_starts=8, hidden_sizes=(8,))
    result = rljax.train(cfg, options=rljax.RunOptions(run_dir=tmp_path, quiet=True, tensorboard=False,
                                                       checkpoint_every=1, on_chunk=lambda c, state, row: c == 2))
    assert result.preempted == "on_chunk"
    assert host_value(result.state.num_updates) == 5_000_000_000  # above 2**32: hi word 1
    assert int(result.state.num_updates.hi) == 1 and host_value(result.state.updates) == 12
    assert [r["env_steps"] for r in result.rows] == [4, 8, 12]
    rest = rljax.train(cfg, options=rljax.RunOptions(run_dir=tmp_path, quiet=True, tensorboard=False, resume=True,
                                                     on_chunk=lambda c, state, row: c == 3))
    assert rest.timings["start_chunk"] == 3 and host_value(rest.state.updates) == 16
    assert host_value(rest.state.num_updates) == 5_000_000_000


@pytest.mark.parametrize("total", [2**53])
def test_the_bound_is_what_the_counters_hold(total):
    from rljax.training.program import plan_updates

    # The largest run a config allows, rounded up to whole chunks, still fits a Count many times over.
    for per_update in (1, 3, 512, 2**30):
        for per_chunk in (0, 1, 7, 4097):
            plan = plan_updates(total, per_update, per_chunk)
            assert plan.num_updates * per_update < 2**64
    assert PPOConfig(total_timesteps=total).total_timesteps == total
