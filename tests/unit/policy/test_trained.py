"""rljax.load, Policy.act, evaluation episodes and evaluation during training."""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

import rljax
from rljax.agents.ppo import PPOConfig
from rljax.agents.sac import SACConfig
from rljax.env import Box, Discrete, EnvParams, EnvState, Environment
from rljax.policy.evaluate import DEFAULT_MAX_STEPS, Episodes, eval_columns, evaluate, run_episodes
from rljax.training.sweep import SweepSpec, run_sweep
from tests.conftest import TINY_RUN_NAMES

PPO_NORM = PPOConfig(total_timesteps=2048, num_envs=4, num_steps=64, updates_per_chunk=2, normalize_obs=True,
                     hidden_sizes=(16,))
SAC_NORM = SACConfig(env="Pendulum-v1", total_timesteps=240, num_envs=4, learning_starts=64, buffer_size=256,
                     batch_size=16, hidden_sizes=(16,), updates_per_chunk=20, normalize_obs=True)


def _files(directory) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in pathlib.Path(directory).rglob("*")}


def _obs(policy, n=64, scale=3.0):
    shape = tuple(policy.observation_space.shape)
    return scale * jax.random.normal(jax.random.key(7), (n, *shape))


@pytest.mark.parametrize("name", TINY_RUN_NAMES)
def test_load_acts_as_the_trained_state_and_leaves_the_run_alone(tiny_run, name):
    run_dir, result = tiny_run(name)
    before = _files(run_dir)
    policy = rljax.load(run_dir)
    assert _files(run_dir) == before  # nothing written, not even a lock or a manifest entry
    assert policy.step == result.rows[-1]["env_steps"] and policy.member is None
    assert policy.algorithm == name.split("-")[0] and policy.config == result.agent.config
    obs = _obs(policy)
    expected = result.agent.act(result.state, obs)
    np.testing.assert_array_equal(np.asarray(policy.act(obs)), np.asarray(expected))
    np.testing.assert_array_equal(np.asarray(jax.jit(policy.act)(obs)), np.asarray(expected))
    single = policy.act(obs[0])
    assert single.shape == expected.shape[1:]
    # A batch of one may round differently from a row of a batch of 64 (another matmul blocking).
    np.testing.assert_allclose(np.asarray(single), np.asarray(expected[0]), rtol=1e-5, atol=1e-6)
    space = policy.action_space
    if policy.discrete:
        assert expected.dtype == jnp.int32
    else:
        assert np.all(np.asarray(expected) >= np.asarray(space.low)) and np.all(np.asarray(expected) <= np.asarray(space.high))
    sampled = np.asarray(policy.act(obs, jax.random.key(1), deterministic=False))
    assert sampled.shape == expected.shape
    if name != "pqn" and name != "dqn":  # epsilon-greedy may leave every greedy action in place
        assert not np.array_equal(sampled, np.asarray(expected))


@pytest.mark.parametrize("name", ["ppo-pendulum", "sac"])
def test_normalising_agents_act_on_raw_observations(tiny_run, name):
    """The issue's bug: PPO's act expected normalised observations. Policy.act applies the trained
    statistics: it equals the policy without them on observations normalised by hand."""
    policy = rljax.load(tiny_run(name)[0])
    stats = policy.params.obs_stats
    assert stats is not None and not np.allclose(np.asarray(stats.var), 1.0)
    obs = _obs(policy, 256)
    normalised = np.asarray(stats.normalize(obs))
    by_hand = policy.apply(policy.params._replace(obs_stats=None), normalised)
    np.testing.assert_allclose(np.asarray(policy.act(obs)), np.asarray(by_hand), rtol=0, atol=1e-6)
    unnormalised = policy.apply(policy.params._replace(obs_stats=None), obs)
    assert np.max(np.abs(np.asarray(unnormalised) - np.asarray(by_hand))) > 1e-3


def test_load_picks_steps_and_explains_bad_input(tmp_path):
    run = tmp_path / "run"
    rljax.train(PPO_NORM, options=rljax.RunOptions(run_dir=run, quiet=True, checkpoint_every=1, keep_checkpoints=5))
    steps = sorted(int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit())
    assert len(steps) >= 2
    first, last = rljax.load(run, step=steps[0]), rljax.load(run)
    assert (first.step, last.step) == (steps[0], steps[-1])
    assert not all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(first.params), jax.tree.leaves(last.params)))
    with pytest.raises(ValueError, match=rf"no checkpoint step 12345; it has \[{steps[0]}"):
        rljax.load(run, step=12345)
    with pytest.raises(ValueError, match="single run, not a sweep"):
        rljax.load(run, member="x")
    with pytest.raises(FileNotFoundError, match="not a directory"):
        rljax.load(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="holds no checkpoint"):
        rljax.load(tmp_path / "empty")
    with pytest.raises(ValueError, match="pass a PRNG key"):
        last.act(_obs(last), deterministic=False)
    with pytest.raises(ValueError, match=r"neither one observation \(4,\) nor a batch"):
        last.act(jnp.zeros((3, 5)))


def test_load_beside_a_live_run_that_removes_the_step_being_read(tiny_run, tmp_path, monkeypatch):
    """A live run with keep_checkpoints removes its older steps while load reads them: loading the
    newest then falls back to the new newest, not a KeyError or a 'damaged data' error."""
    import shutil

    from rljax.store.checkpoint import Checkpointer

    run = tmp_path / "run"
    shutil.copytree(tiny_run("ppo-cartpole")[0], run)
    (old,) = [int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit()]
    shutil.copytree(run / "checkpoints" / str(old), run / "checkpoints" / str(2 * old))
    read = Checkpointer.read

    def removed_while_read(self, step):  # as the run's garbage collection does, mid-read
        if step == 2 * old and (run / "checkpoints" / str(step)).exists():
            shutil.rmtree(run / "checkpoints" / str(step))
            raise KeyError('Item "meta" was not found in the checkpoint.')
        return read(self, step)

    monkeypatch.setattr(Checkpointer, "read", removed_while_read)
    assert rljax.load(run).step == old
    shutil.copytree(run / "checkpoints" / str(old), run / "checkpoints" / str(2 * old))
    with pytest.raises(FileNotFoundError, match=rf"checkpoint {2 * old} .* was removed while it was read"):
        rljax.load(run, step=2 * old)

    def unreadable(self, step):
        raise KeyError('Item "meta" was not found in the checkpoint.')

    monkeypatch.setattr(Checkpointer, "read", unreadable)
    with pytest.raises(ValueError, match=rf"checkpoint {old} in .* cannot be read"):
        rljax.load(run, step=old)


def test_load_sweep_members_and_their_evaluations(tmp_path):
    """Each member loads as its own policy and is evaluated on its own (its eval/* columns); that
    evaluation leaves a split sweep's state bit-identical is checked on two devices
    (test_multidevice)."""
    import dataclasses

    spec = SweepSpec(grid={"learning_rate": [1e-4, 3e-3]}, seeds=(0,))
    config = dataclasses.replace(PPO_NORM, eval_interval=1, eval_episodes=4)
    result, members, _ = run_sweep(config, spec, run_dir=tmp_path / "sweep", quiet=True, plots=False)
    names = [m.name for m in members]
    assert all("eval/return_mean" in row for rows in result.member_rows for row in rows)
    finals = [rows[-1]["eval/return_mean"] for rows in result.member_rows]
    assert all(np.isfinite(finals)) and finals[0] != finals[1]
    with pytest.raises(ValueError, match="sweep of 2 members: choose one"):
        rljax.load(tmp_path / "sweep")
    with pytest.raises(ValueError, match="no member 'nobody'"):
        rljax.load(tmp_path / "sweep", member="nobody")
    with pytest.raises(ValueError, match="out of range"):
        rljax.load(tmp_path / "sweep", member=2)
    for i, name in enumerate(names):
        policy = rljax.load(tmp_path / "sweep", member=name)
        assert policy.member == name and policy.config.learning_rate == members[i].values["learning_rate"]
        member_state = jax.tree.map(lambda x, i=i: x[i], result.state)
        obs = _obs(policy)
        np.testing.assert_array_equal(np.asarray(policy.act(obs)), np.asarray(result.agent.act(member_state, obs)))
        by_index = rljax.load(tmp_path / "sweep", member=i)
        np.testing.assert_array_equal(np.asarray(by_index.act(obs)), np.asarray(policy.act(obs)))
    # without its sweep.json a sweep's checkpoint is not silently loaded as member 0 of a single run
    (tmp_path / "sweep" / "sweep.json").rename(tmp_path / "sweep.json")
    with pytest.raises(ValueError, match=r"holds a sweep's checkpoint \(2 members\) but its sweep.json, .* is missing"):
        rljax.load(tmp_path / "sweep")


# ------------------------------------------------------------------------------------------------
# Episodes, by hand
# ------------------------------------------------------------------------------------------------


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


# ------------------------------------------------------------------------------------------------
# Evaluation during training
# ------------------------------------------------------------------------------------------------


def _param_bytes(state):
    from rljax.store.checkpoint import to_host

    return [x.tobytes() for x in to_host(state)]


@pytest.mark.parametrize("config", [PPO_NORM, SAC_NORM], ids=["ppo", "sac"])
def test_evaluation_leaves_training_bit_identical(config, tmp_path):
    """Same state bits with evaluation on; the columns at the due chunks; and the last evaluation is
    the loaded policy's greedy episodes on the evaluation key stream."""
    import dataclasses

    from rljax.policy.evaluate import EVAL_STREAM, max_episode_steps

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
