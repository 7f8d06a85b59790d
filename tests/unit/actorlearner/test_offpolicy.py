"""Off-policy algorithms on host envs: the actors' n-step items by hand and whatever the rollouts'
split, Ape-X's exploration rates and TD priorities, a resume that continues the replay to the same
bits, the policy of a saved run, and bad layouts refused by name."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.actorlearner.learner import HostOptions, train_host
from rljax.actorlearner.offpolicy import apex_epsilons, offpolicy_algorithm, offpolicy_program
from rljax.actorlearner.run import run_host
from rljax.agents.dqn import DQNConfig
from rljax.agents.sac import SACConfig
from rljax.core.rollout import Transition
from rljax.env import Box, Discrete
from rljax.host.base import HostSpec
from rljax.host.sources import make_host_env
from rljax.training.options import RunOptions
from tests.support.runs import leaves

DQN = DQNConfig(env="gymnasium/CartPole-v1", num_envs=2, num_steps=4, total_timesteps=2 * 4 * 12, learning_starts=32,
                batch_size=16, buffer_size=256, hidden_sizes=(16,), n_step=3, target_update_interval=16)
SAC = SACConfig(env="gymnasium/Pendulum-v1", num_envs=1, num_steps=8, total_timesteps=8 * 10, learning_starts=24,
                batch_size=16, buffer_size=128, gradient_steps=2, hidden_sizes=(16,), n_step=3)
SYNC = HostOptions(max_policy_lag=0)
MEASURED = ("sps", "wall_time_s", "host/")


def _spec(num_envs: int = 1) -> HostSpec:
    return HostSpec(num_envs=num_envs, observation_space=Box(-1.0, 1.0, (2,), np.float32), action_space=Discrete(2))


def _traj(rewards, terminated, truncated, num_envs=1):
    """A ``[T, B]`` host rollout: observation ``t`` is ``(t, 0)``, final observation ``(t, 1)``."""
    t = len(rewards)
    steps = np.arange(t, dtype=np.float32)[:, None, None]
    obs = np.broadcast_to(np.concatenate([steps, np.zeros_like(steps)], -1), (t, num_envs, 2)).copy()
    final = np.broadcast_to(np.concatenate([steps, np.ones_like(steps)], -1), (t, num_envs, 2)).copy()
    col = lambda x, dtype: np.broadcast_to(np.asarray(x, dtype)[:, None], (t, num_envs)).copy()  # noqa: E731
    return Transition(obs=obs, action=np.zeros((t, num_envs), np.int64), reward=col(rewards, np.float32),
                      terminated=col(terminated, bool), truncated=col(truncated, bool), next_obs=final,
                      extras=np.zeros((t, num_envs), np.float32))


def _finisher(n: int, gamma: float, num_envs: int = 1):
    config = DQNConfig(env="gymnasium/CartPole-v1", num_envs=num_envs, n_step=n, gamma=gamma, hidden_sizes=(4,))
    return offpolicy_algorithm(config, _spec(num_envs), 10).finisher


def test_the_actors_n_step_items_by_hand_through_a_termination_and_a_truncation():
    """n = 2, gamma = 0.5, rewards 1, 2, 3, 4; step 1 terminates, step 2 is truncated. The first item
    starts on the (invalid) placeholder tail; step 3 waits in the tail for the next rollout."""
    finisher = _finisher(2, 0.5)
    items, (tail, valid) = finisher.finish(_traj([1, 2, 3, 4], [0, 1, 0, 0], [0, 0, 1, 0]), finisher.init())
    np.testing.assert_array_equal(items.valid, [False, True, True, True])
    np.testing.assert_allclose(items.reward[1:], [1 + 0.5 * 2, 2, 3])
    np.testing.assert_allclose(items.discount[1:], [0, 0, 0.5])  # terminated: 0; truncated: bootstrap once
    np.testing.assert_array_equal(items.obs[1:, 0], [0, 1, 2])
    np.testing.assert_array_equal(items.next_obs[3], [2, 1])  # the truncated episode's final observation
    np.testing.assert_array_equal(valid, [True])
    np.testing.assert_array_equal(tail.obs[0, 0], [3, 0])
    items, _ = finisher.finish(_traj([5, 6], [0, 0], [0, 0]), (tail, valid))
    np.testing.assert_allclose(items.reward[0], 4 + 0.5 * 5)  # step 3 of the first rollout, completed
    np.testing.assert_allclose(items.discount[0], 0.25)


@pytest.mark.parametrize("split", [(12,), (5, 7), (1, 1, 10), (3, 3, 3, 3)])
def test_the_items_do_not_depend_on_how_the_steps_are_split_into_rollouts(split):
    rng = np.random.default_rng(0)
    whole = _traj(rng.normal(size=12), rng.random(12) < 0.2, rng.random(12) < 0.2, num_envs=3)
    finisher = _finisher(4, 0.9, num_envs=3)
    reference, _ = finisher.finish(whole, finisher.init())
    carry, parts, start = finisher.init(), [], 0
    for length in split:
        part = jax.tree.map(lambda x: x[start:start + length], whole)
        items, carry = finisher.finish(part, carry)
        parts.append(items)
        start += length
    joined = jax.tree.map(lambda *xs: np.concatenate(xs), *parts)
    for a, b in zip(jax.tree.leaves(reference), jax.tree.leaves(joined)):
        np.testing.assert_array_equal(a, b)


def test_ape_x_exploration_rates_by_hand_and_each_actor_acts_with_its_own():
    np.testing.assert_allclose(apex_epsilons(3, 0.4), [0.4, 0.4 ** 4.5, 0.4 ** 8], rtol=1e-6)
    np.testing.assert_allclose(apex_epsilons(1, 0.4), [0.4])
    algorithm = offpolicy_algorithm(DQN, _spec(64), 10, num_actors=3, apex_epsilon=0.4)
    assert [algorithm.rollout_args(5, a) for a in range(6)] == [(5, e) for e in apex_epsilons(3, 0.4)] * 2
    learner, _ = algorithm.init(jax.random.key(0), np.zeros((1, 2), np.float32))
    obs = np.random.default_rng(1).normal(size=(64, 2)).astype(np.float32)
    greedy, _ = algorithm.policy(learner, obs, jax.random.key(1), np.uint32(0), np.uint32(0), np.float32(0.0))
    program = offpolicy_program(DQN, _spec(64))
    q = program.hooks.act(learner.params, obs, None, 0.0, True)
    np.testing.assert_array_equal(greedy, q)  # rate 0 overrides the schedule's epsilon of 1 at the start
    scheduled = offpolicy_algorithm(DQN, _spec(64), 10)
    explored, _ = scheduled.policy(learner, obs, jax.random.key(1), np.uint32(0), np.uint32(0), np.float32(0.0))
    assert (np.asarray(explored) != np.asarray(q)).any()  # the schedule's epsilon 1: uniform actions


def test_td_initial_priorities_are_the_items_td_errors_under_the_learners_params():
    config = DQNConfig(**{**DQN.__dict__, "prioritized": True, "learning_starts": 10_000, "n_step": 1})
    algorithm = offpolicy_algorithm(config, _spec(2), 10, initial_priority="td")
    learner, buffer = algorithm.init(jax.random.key(0), np.zeros((1, 2), np.float32))
    finisher = algorithm.finisher
    items, _ = finisher.finish(_traj([1.0, -2.0, 0.5, 3.0], [0, 0, 1, 0], [0, 0, 0, 0], num_envs=2), finisher.init())
    _, buffer, _ = algorithm.update(learner, buffer, (items, 0), jax.random.key(2), np.uint32(0), np.uint32(10))
    program = offpolicy_program(config, _spec(2))
    ctx = program.context(_count(0), _count(10), config.hyperparams())
    _, td, _ = program.hooks.learn_step(learner, items, jnp.ones(8), jax.random.key(3), ctx)
    leaves_at = np.asarray(buffer.sum_tree)[buffer.sum_tree.shape[0] // 2:][:8]
    np.testing.assert_allclose(leaves_at, (np.asarray(td) + 1e-6) ** config.priority_alpha, rtol=1e-5)


def _count(n):
    from rljax.core.counters import Count

    return Count.of(n)


def _host(config):
    return lambda actor: make_host_env(config.env, config.num_envs)


class _Terminating:
    """A host env that sends this process SIGTERM at its ``at``-th step (once), otherwise ``env``."""

    def __init__(self, env, at: int):
        self._env, self._at, self._steps = env, at, 0

    def step(self, actions):
        import os
        import signal

        self._steps += 1
        if self._steps == self._at:
            os.kill(os.getpid(), signal.SIGTERM)
        return self._env.step(actions)

    def __getattr__(self, name):
        return getattr(self._env, name)


def test_a_resumed_run_continues_its_replay_and_n_step_tail_to_the_same_bits(tmp_path):
    """SAC, one actor at lag 0: stopped by SIGTERM during update 4 and resumed to 10, it equals a run
    never stopped, params, optimiser and replay buffer (a resume without the replay would differ)."""
    whole = run_host(SAC, RunOptions(run_dir=tmp_path / "whole", quiet=True), SYNC)
    cut = tmp_path / "cut"
    stopped = run_host(SAC, RunOptions(run_dir=cut, quiet=True), SYNC,
                       make_env=lambda actor: _Terminating(make_host_env(SAC.env, SAC.num_envs), at=8 * 3 + 5))
    # The signal comes during rollout 4 (index 3): the run stops once the update then running is saved.
    assert stopped.preempted == "SIGTERM" and 3 <= stopped.updates < 10
    resumed = run_host(SAC, RunOptions(run_dir=cut, resume=True, quiet=True))
    assert resumed.updates == 10 and len(resumed.rows) == 10 - stopped.updates
    for a, b in zip(leaves((whole.params, whole.opt_state)), leaves((resumed.params, resumed.opt_state))):
        np.testing.assert_array_equal(a, b)
    assert resumed.rows[-1]["buffer_size"] == 80


def test_the_synchronous_mode_is_deterministic_and_rows_carry_the_replay_figures():
    a = train_host(DQN, _host(DQN), SYNC)
    b = train_host(DQN, _host(DQN), SYNC)
    assert all(np.array_equal(x, y) for x, y in zip(leaves(a.params), leaves(b.params)))
    strip = lambda rows: [{k: v for k, v in r.items() if not k.startswith(MEASURED)} for r in rows]  # noqa: E731
    assert strip(a.rows) == strip(b.rows)
    row = a.rows[-1]
    assert row["replay_ratio"] == pytest.approx(1 / 8) and row["buffer_size"] == 96
    assert [r["td_loss"] == 0 for r in a.rows] == [True] * 3 + [False] * 9  # learning starts at 32 env steps


def test_several_actors_and_ape_x_on_host_envs():
    rows = train_host(DQNConfig(**{**DQN.__dict__, "prioritized": True}), _host(DQN),
                      HostOptions(num_actors=2, max_policy_lag=1, apex_epsilon=0.4, initial_priority="td")).rows
    assert len(rows) == 12 and {r["host/actor"] for r in rows} <= {0, 1}
    assert {r["host/policy_lag"] for r in rows} <= {0, 1}
    rates = apex_epsilons(2, 0.4)  # each row reports the rate its rollout's actor explored with
    assert [r["epsilon"] for r in rows] == pytest.approx([rates[r["host/actor"]] for r in rows])


def test_a_saved_off_policy_run_loads_as_a_policy(tmp_path):
    import rljax

    run_host(SAC, RunOptions(run_dir=tmp_path / "run", quiet=True), SYNC)
    policy = rljax.load(tmp_path / "run")
    action = np.asarray(policy.act(np.zeros((5, 3), np.float32)))
    assert action.shape == (5, 1) and np.all(np.abs(action) <= 2.0)


@pytest.mark.parametrize("config, options, message", [
    (SAC, dict(apex_epsilon=0.4), "does not explore with an epsilon"),
    (DQN, dict(initial_priority="td"), "add --prioritized"),
    (DQNConfig(**{**DQN.__dict__, "num_devices": 2, "batch_size": 16, "buffer_size": 256}), {}, "num_devices=2"),
    (DQNConfig(**{**DQN.__dict__, "total_timesteps": 7}), {}, "total_timesteps=7 is less than one update of "
                                                              "num_envs \\* num_steps = 8"),
    (DQNConfig(**{**DQN.__dict__, "env": "gymnasium/Pendulum-v1"}), {}, "gymnasium/Pendulum-v1"),
])
def test_bad_off_policy_layouts_are_refused_by_name(config, options, message):
    with pytest.raises((ValueError, TypeError), match=message):
        train_host(config, _host(config), HostOptions(max_policy_lag=0, **options))


@pytest.mark.parametrize("options, message", [
    (dict(apex_epsilon=1.0), "apex_epsilon=1.0"), (dict(initial_priority="min"), "initial_priority='min'"),
    (dict(apex_alpha=0.0), "apex_alpha=0.0"), (dict(apex_alpha=float("inf")), "apex_alpha=inf: must be finite"),
    (dict(frames_per_item=0.5), "frames_per_item=0.5"), (dict(replay="disk"), "replay='disk'"),
])
def test_bad_host_options_are_refused_by_name(options, message):
    with pytest.raises(ValueError, match=message):
        HostOptions(**options)


def test_observation_normalisation_acts_and_learns_on_statistics_of_the_raw_observations_replay_keeps(tmp_path):
    """``normalize_obs``: the learner's state is (learner, statistics); the statistics are those of every
    observation acted on (each once, placeholders left out), replay keeps raw observations, a lag-0
    resume is the same bits, and the loaded policy normalises with the saved statistics."""
    import rljax
    from rljax.core.wrappers import RunningMeanStd

    config = SACConfig(**{**SAC.__dict__, "normalize_obs": True})
    whole = run_host(config, RunOptions(run_dir=tmp_path / "whole", quiet=True), SYNC)
    learner, stats = whole.params
    raw = np.asarray(whole.opt_state.data.obs)[:80]  # every observation acted on, in order, raw
    assert np.abs(raw).max() > 1.5  # Pendulum's angular velocity: raw, not normalised
    expected = RunningMeanStd.init((3,)).merge(RunningMeanStd.from_batch(raw[2:]))  # the tail holds the last 2
    assert float(stats.count) == pytest.approx(float(expected.count), rel=1e-6)
    np.testing.assert_allclose(stats.mean, expected.mean, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(stats.var, expected.var, rtol=1e-4, atol=1e-5)
    cut = tmp_path / "cut"
    run_host(SACConfig(**{**config.__dict__, "total_timesteps": 8 * 4}), RunOptions(run_dir=cut, quiet=True), SYNC)
    resumed = run_host(config, RunOptions(run_dir=cut, resume=True, quiet=True))
    for a, b in zip(leaves((whole.params, whole.opt_state)), leaves((resumed.params, resumed.opt_state))):
        np.testing.assert_array_equal(a, b)
    policy = rljax.load(tmp_path / "whole")
    np.testing.assert_array_equal(policy.params.obs_stats.mean, stats.mean)
    env = make_host_env(config.env, 1)
    env.close()
    program = offpolicy_program(config, env.spec)
    obs = raw[:5]
    direct = program.hooks.act(learner.actor_params, np.asarray(stats.normalize(obs)), None, 0.0, True)
    np.testing.assert_allclose(policy.act(obs), np.clip(direct, -2.0, 2.0), rtol=1e-5, atol=1e-6)


def _failing_cartpole(**kwargs):
    """CartPole that raises on its 30th step (its step count is part of its pickled state)."""
    import gymnasium

    return _Failing(gymnasium.make("CartPole-v1", **kwargs))


def _failing_class():
    import gymnasium

    class Failing(gymnasium.Wrapper):
        count = 0

        def step(self, action):
            self.count += 1
            if self.count == 30:
                raise RuntimeError("the simulator fell over")
            return self.env.step(action)

    Failing.__qualname__ = "_Failing"  # picklable by name from this module
    return Failing


_Failing = _failing_class()


def test_an_env_restart_after_a_resume_reseeds_the_envs_as_the_run_never_stopped_would(tmp_path):
    """One actor at lag 0 whose envs fail on their 30th step: stopped after 5 updates (20 steps) and
    resumed to 12, the restart at step 30 reseeds the new envs as the uninterrupted run did (the
    snapshot keeps the actor's first seed and its restart count): the same bits."""
    import gymnasium

    gymnasium.register("rljax-test/FailingCartPole-v0", entry_point=_failing_cartpole)
    config = DQNConfig(**{**DQN.__dict__, "env": "gymnasium/rljax-test/FailingCartPole-v0", "n_step": 1,
                          "exploration_fraction": 0.0})
    layout = HostOptions(max_policy_lag=0, restart_backoff_s=0.01)
    whole = run_host(config, RunOptions(run_dir=tmp_path / "whole", quiet=True), layout)
    assert whole.rows[-1]["host/env_restarts"] == 1
    cut = DQNConfig(**{**config.__dict__, "total_timesteps": 8 * 5})
    run_host(cut, RunOptions(run_dir=tmp_path / "cut", quiet=True), layout)
    resumed = run_host(config, RunOptions(run_dir=tmp_path / "cut", resume=True, quiet=True))
    for a, b in zip(leaves((whole.params, whole.opt_state)), leaves((resumed.params, resumed.opt_state))):
        np.testing.assert_array_equal(a, b)


def test_a_resume_whose_state_would_not_fit_is_refused_and_leaves_the_run_as_it_was(tmp_path):
    """Another replay size or normaliser (the config), or the replay moved to host memory (the layout):
    refused by name before anything is written, never a run started over on top of the old one."""
    from rljax.store.rundir import ConfigMismatchError

    run = tmp_path / "run"
    run_host(SAC, RunOptions(run_dir=run, quiet=True), SYNC)
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    for config, layout, says in ((SACConfig(**{**SAC.__dict__, "buffer_size": 96}), None, "buffer_size"),
                                 (SACConfig(**{**SAC.__dict__, "normalize_obs": True}), None, "normalize_obs"),
                                 (SAC, HostOptions(max_policy_lag=0, replay="host"), "replay \\(saved 'device', now "
                                                                                     "'host'\\)")):
        with pytest.raises(ConfigMismatchError, match=says):
            run_host(config, RunOptions(run_dir=run, resume=True, quiet=True), layout)
    after = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    assert after.keys() == before.keys() and after["metrics.jsonl"] == before["metrics.jsonl"]
