"""rljax.load and Policy.act (evaluation episodes and evaluation during training: test_evaluate.py)."""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rljax
from rljax.agents.ppo import PPOConfig
from rljax.training.sweep import SweepSpec, run_sweep
from tests.conftest import TINY_RUN_NAMES

PPO_NORM = PPOConfig(total_timesteps=2048, num_envs=4, num_steps=64, updates_per_chunk=2, normalize_obs=True,
                     hidden_sizes=(16,))



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
    # Epsilon-greedy may leave every greedy action in place (Rainbow's epsilon is 0: its exploration is the
    # training noise, and the policy outside training acts on the noise's mean).
    if name not in ("pqn", "dqn", "c51-rainbow"):
        assert not np.array_equal(sampled, np.asarray(expected))


@pytest.mark.parametrize("name", ["ppo-cartpole", "ppo-pendulum", "sac"])
def test_eager_act_is_compiled_once_per_shape_and_flag_with_the_same_bits(tiny_run, name, monkeypatch):
    """``policy.act`` in a Python loop (docs/evaluation.md) runs a cached jitted function, one trace per
    input shape and ``deterministic``, not per call. Greedy actions are the bits of the op-by-op
    ``apply`` it replaced; sampled ones those of ``jax.jit(policy.act)`` (XLA fuses a Gaussian's
    ``mean + std * noise``, which op by op rounds twice: 1 ulp apart at most)."""
    from rljax.policy.trained import Policy

    policy = rljax.load(tiny_run(name)[0])
    obs, key = np.asarray(_obs(policy, 8)), jax.random.key(2)
    expected = {True: np.asarray(policy.apply(policy.params, obs)),  # op by op, as act ran before
                False: np.asarray(jax.jit(policy.act, static_argnames="deterministic")(obs, key, deterministic=False))}
    np.testing.assert_allclose(expected[False], np.asarray(policy.apply(policy.params, obs, key, deterministic=False)),
                               rtol=2.5e-7, atol=2.5e-7)
    traces = []
    batch = Policy._batch
    monkeypatch.setattr(Policy, "_batch", lambda self, *args: (traces.append(args[0].shape), batch(self, *args))[1])
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(policy.act(obs)), expected[True])
        np.testing.assert_array_equal(np.asarray(policy.act(obs, key, deterministic=False)), expected[False])
        np.testing.assert_array_equal(np.asarray(policy.act(obs, key=key, deterministic=False)), expected[False])
    assert len(traces) == 2, traces  # one per flag (a keyword key is the same call)
    for _ in range(2):
        policy.act(obs[0])
    assert len(traces) == 3, traces  # one observation: a new shape, traced once
    with pytest.raises(TypeError):  # a bad call is refused as apply refuses it
        policy.act(obs, key, True, "extra")


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


def test_loading_a_live_run_before_its_first_checkpoint_says_so(tmp_path):
    # `rljax eval D` in a live run's first seconds used to ask "was it run with checkpoints=False?".
    from rljax.store.runlock import RunLock

    run = tmp_path / "run"
    with RunLock(run):
        with pytest.raises(FileNotFoundError, match=rf"{run} has no checkpoint yet: its run is still running \("
                                                    r".*saves its first checkpoint after a chunk"):
            rljax.load(run)
    with pytest.raises(FileNotFoundError, match="holds no checkpoint: .*so one killed before its first save has none "
                                                r"\(`rljax status .*was it run with checkpoints=False"):
        rljax.load(run)


def test_load_picks_steps_and_explains_bad_input(tmp_path):
    # The tiny PPO CartPole run's config (tests/conftest.py: 2 chunks, observation normalisation), saved after
    # each chunk: its program comes from the compile cache once the tiny run is trained (above, and in a suite run).
    from tests.conftest import _tiny_runs

    run = tmp_path / "run"
    rljax.train(_tiny_runs()["ppo-cartpole"], options=rljax.RunOptions(run_dir=run, quiet=True, checkpoint_every=1,
                                                                       keep_checkpoints=5))
    steps = sorted(int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit())
    assert len(steps) >= 2
    first, last = rljax.load(run, step=steps[0]), rljax.load(run)
    assert (first.step, last.step) == (steps[0], steps[-1])
    assert not all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(first.params), jax.tree.leaves(last.params)))
    with pytest.raises(ValueError, match=rf"no checkpoint step 12345; it has \[{steps[0]}"):
        rljax.load(run, step=12345)
    with pytest.raises(ValueError, match=r"single run, not a sweep: leave out --member x \(member= in Python\)"):
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
    # The messages name the CLI's flag as well as the Python argument (they used to say only "member=NAME").
    listed = ", ".join(names)
    with pytest.raises(ValueError, match=rf"sweep of 2 members: choose one by name or index with --member \(member= "
                                         rf"in Python\), e.g. --member {names[0]}; names: {listed}$"):
        rljax.load(tmp_path / "sweep")
    with pytest.raises(ValueError, match=f"no member 'nobody'; names: {listed}$"):
        rljax.load(tmp_path / "sweep", member="nobody")
    with pytest.raises(ValueError, match=r"out of range: the sweep in .* has 2 members \(indices 0 to 1\)"):
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
