"""Evaluation (:mod:`rljax.policy.evaluate`): whole first episodes in parallel, checked by hand on
a counting env and on the probe envs of ``envs/probes.py``; the step guard; the ``eval/*`` columns;
``evaluate`` of a loaded policy (seeded, changed dynamics); and the training loop's evaluation hook,
which must leave training bit-identical."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

import rljax
from envs.probes import ProbeEnv
from rljax.agents.ppo import PPOConfig
from rljax.agents.sac import SACConfig
from rljax.env import Box, Discrete, EnvParams, EnvState, Environment
from rljax.policy.evaluate import DEFAULT_MAX_STEPS, Episodes, eval_columns, evaluate, max_episode_steps, run_episodes

PPO_NORM = PPOConfig(total_timesteps=2048, num_envs=4, num_steps=64, updates_per_chunk=2, normalize_obs=True,
                     hidden_sizes=(16,))
SAC_NORM = SACConfig(env="Pendulum-v1", total_timesteps=240, num_envs=4, learning_starts=64, buffer_size=256,
                     batch_size=16, hidden_sizes=(16,), updates_per_chunk=20, normalize_obs=True)


@struct.dataclass
class _CountState(EnvState):
    horizon: jax.Array


@struct.dataclass
class _CountParams(EnvParams):
    max_steps_in_episode: int = 6


class _Count(Environment):
    """Reward t on step t; terminates after a horizon of 2..8 steps drawn at reset (seen as obs)."""

    def reset_env(self, key, params):
        horizon = jax.random.randint(key, (), 2, 9)
        return jnp.array([horizon], jnp.float32), _CountState(time=jnp.int32(0), horizon=horizon)

    def step_env(self, key, state, action, params):
        t = state.time + 1
        obs = jnp.array([state.horizon], jnp.float32)
        return obs, state.replace(time=t), t.astype(jnp.float32) + 0.0 * action, t >= state.horizon, {}

    @property
    def default_params(self):
        return _CountParams()

    def observation_space(self, params):
        return Box(0.0, 10.0, (1,))

    def action_space(self, params):
        return Discrete(2)


def test_run_episodes_counts_each_first_episode_and_honours_the_time_limit():
    env, params = _Count(), _CountParams(max_steps_in_episode=6)
    act = lambda obs, key: jnp.zeros(obs.shape[:1], jnp.int32)  # noqa: E731
    episodes = jax.jit(lambda k: run_episodes(env, params, act, k, 64, 100))(jax.random.key(3))
    horizons = np.asarray(jax.vmap(lambda k: env.reset(k, params)[0][0])(
        jax.random.split(jax.random.split(jax.random.key(3))[0], 64)))
    lengths = np.minimum(horizons, 6).astype(int)
    np.testing.assert_array_equal(np.asarray(episodes.lengths), lengths)
    np.testing.assert_array_equal(np.asarray(episodes.returns), lengths * (lengths + 1) / 2)
    # Cut by the time limit only when the horizon is beyond it; a horizon of exactly 6 terminates.
    np.testing.assert_array_equal(np.asarray(episodes.truncated), horizons > 6)
    assert {2, 6, 7, 8} <= set(horizons.astype(int).tolist())


def test_run_episodes_guard_cuts_endless_episodes():
    env, params = _Count(), _CountParams(max_steps_in_episode=1000)
    act = lambda obs, key: jnp.zeros(obs.shape[:1], jnp.int32)  # noqa: E731
    episodes = run_episodes(env, params, act, jax.random.key(0), 32, max_steps=3)
    horizons = np.asarray(jax.vmap(lambda k: env.reset(k, params)[0][0])(
        jax.random.split(jax.random.split(jax.random.key(0))[0], 32)))
    np.testing.assert_array_equal(np.asarray(episodes.lengths), np.minimum(horizons, 3))
    # Still running when the guard stops the loop: reported as truncated, not as terminated.
    np.testing.assert_array_equal(np.asarray(episodes.truncated), horizons > 3)
    assert {2, 3} & set(horizons.astype(int).tolist()) and (horizons > 3).any()
    assert DEFAULT_MAX_STEPS >= 10_000


def test_eval_columns_by_hand():
    cols = eval_columns(Episodes(np.array([1.0, 2.0, 3.0, 10.0], np.float32), np.array([1, 2, 3, 4]),
                                 np.zeros(4, bool)))
    assert cols == {"eval/return_mean": 4.0, "eval/return_std": pytest.approx(np.std([1, 2, 3, 10])),
                    "eval/return_median": 2.5, "eval/return_min": 1.0, "eval/return_max": 10.0,
                    "eval/length_mean": 2.5, "eval/episodes": 4}


def test_evaluate_is_seeded_and_takes_changed_dynamics(tiny_run):
    policy = rljax.load(tiny_run("ppo-cartpole")[0])
    a, b = evaluate(policy, 16, seed=1), evaluate(policy, 16, seed=1)
    np.testing.assert_array_equal(a.returns, b.returns)
    assert a.returns.shape == (16,) and a.lengths.dtype == np.int32
    np.testing.assert_array_equal(a.returns, a.lengths)  # CartPole pays 1 per step
    short = evaluate(policy, 16, seed=1, env_params=policy.env_params.replace(max_steps_in_episode=5))
    assert np.all(short.lengths <= 5)
    with pytest.raises(ValueError, match="num_episodes must be a positive integer, got 0"):
        evaluate(policy, 0)


@pytest.mark.parametrize("kind, action, returns, length", [
    ("ConstantReward", 0, 1.0, 1),  # one step paying 1
    ("TwoStep", 0, 1.0, 2),         # 0 then 1
    ("ActionReward", 1, 1.0, 1),    # the right action pays 1 ...
    ("ActionReward", 0, 0.0, 1),    # ... the wrong one 0
])
def test_probe_episodes_by_hand(kind, action, returns, length):
    env = ProbeEnv(kind)
    act = lambda obs, key: jnp.full(obs.shape[:1], action, jnp.int32)  # noqa: E731
    episodes = run_episodes(env, env.default_params, act, jax.random.key(0), 4, 10)
    np.testing.assert_array_equal(episodes.returns, [returns] * 4)
    np.testing.assert_array_equal(episodes.lengths, [length] * 4)
    assert not np.asarray(episodes.truncated).any()  # probes terminate on their own


def test_probe_returns_follow_the_observation_per_episode():
    # ActionObsReward: obs +-1 at random, reward 1 when the action is (obs + 1) / 2. Acting on the
    # observation earns 1 in every episode; always acting 1 earns exactly the episodes with obs +1.
    env = ProbeEnv("ActionObsReward")
    right = lambda obs, key: ((obs[:, 0] + 1) / 2).astype(jnp.int32)  # noqa: E731
    ones = lambda obs, key: jnp.ones(obs.shape[:1], jnp.int32)  # noqa: E731
    key = jax.random.key(5)
    np.testing.assert_array_equal(run_episodes(env, env.default_params, right, key, 16, 10).returns, np.ones(16))
    first_obs = jax.vmap(lambda k: env.reset(k, env.default_params)[0][0])(jax.random.split(jax.random.split(key)[0], 16))
    np.testing.assert_array_equal(run_episodes(env, env.default_params, ones, key, 16, 10).returns,
                                  (np.asarray(first_obs) > 0).astype(np.float32))


def test_max_episode_steps_reads_the_largest_limit():
    assert max_episode_steps(ProbeEnv("TwoStep").default_params) == 100
    stacked = ProbeEnv("TwoStep").default_params.replace(max_steps_in_episode=np.array([5, 9, 7]))
    assert max_episode_steps(stacked) == 9
    assert max_episode_steps(object()) == DEFAULT_MAX_STEPS


def _param_bytes(state):
    from rljax.store.checkpoint import to_host

    return [x.tobytes() for x in to_host(state)]


# SAC's with --slow: by default PPO's (the same evaluation hook beside a different update) stands for it.
@pytest.mark.parametrize("config", [PPO_NORM, pytest.param(SAC_NORM, marks=pytest.mark.slow)], ids=["ppo", "sac"])
def test_evaluation_leaves_training_bit_identical(config, tmp_path):
    """Same state bits with evaluation on; the columns at the due chunks; and the last evaluation is
    the loaded policy's greedy episodes on the evaluation key stream."""
    import dataclasses

    from rljax.policy.evaluate import EVAL_STREAM

    plain = rljax.train(config, options=rljax.RunOptions(quiet=True, checkpoints=False))
    evaluated = rljax.train(dataclasses.replace(config, eval_interval=2, eval_episodes=4),
                            options=rljax.RunOptions(quiet=True, run_dir=tmp_path / "run"))
    assert _param_bytes(plain.state) == _param_bytes(evaluated.state)  # the whole train state
    chunks = len(evaluated.rows)
    with_eval = [i for i, row in enumerate(evaluated.rows) if "eval/return_mean" in row]
    assert with_eval == sorted({i for i in range(chunks) if (i + 1) % 2 == 0} | {chunks - 1})
    assert all(row["eval/episodes"] == 4 for row in evaluated.rows if "eval/episodes" in row)
    assert not any("eval/return_mean" in row for row in plain.rows)
    assert evaluated.timings["eval_s"] > 0
    policy = rljax.load(tmp_path / "run")
    key = jax.random.fold_in(jax.random.fold_in(jax.random.key(config.seed), EVAL_STREAM), chunks - 1)
    episodes = run_episodes(policy.env, policy.env_params, lambda o, k: policy.act(o), key, 4,
                            max_episode_steps(policy.env_params))
    assert evaluated.rows[-1]["eval/return_mean"] == pytest.approx(float(np.mean(np.asarray(episodes.returns))))
    assert '"eval/return_mean"' in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1]


def test_eval_fields_are_validated_and_resumable(tmp_path):
    import dataclasses

    with pytest.raises(ValueError, match="eval_interval"):
        dataclasses.replace(PPO_NORM, eval_interval=-1)
    with pytest.raises(ValueError, match="eval_episodes"):
        dataclasses.replace(PPO_NORM, eval_episodes=0)
    config = dataclasses.replace(PPO_NORM, total_timesteps=1024)
    rljax.train(config, options=rljax.RunOptions(run_dir=tmp_path / "run", quiet=True))
    longer = dataclasses.replace(PPO_NORM, eval_interval=1, eval_episodes=2)
    resumed = rljax.train(longer, options=rljax.RunOptions(run_dir=tmp_path / "run", resume=True, quiet=True))
    assert "eval/return_mean" in resumed.rows[-1]
