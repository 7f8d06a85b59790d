"""Recurrent policies through the whole stack: PPO and PQN with a GRU or LSTM solve a memory task
that a memoryless policy cannot; a recurrent run stopped (in process, and by SIGTERM on the command
line) resumes bit-identically; a loaded recurrent policy acts with its state exactly as the run's
own evaluation does; sweeps vmap the memory. The long version (3 seeds, longer delays):
``python -m benchmarks.memory``."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rljax
from rljax.agents.ppo import PPOConfig
from rljax.agents.pqn import PQNConfig
from rljax.store.checkpoint import PREEMPTED_EXIT_CODE
from rljax.policy.evaluate import evaluate
from rljax.store.tracking import read_chunks
from rljax.training.sweep import SweepSpec, run_sweep
from tests.conftest import cpu_subprocess_env
from tests.support.runs import assert_same_bits, final_leaves, sigterm_after_progress, strip

TASK = dict(env="MemoryCue-v0", env_params=("delay=4",), num_envs=16, num_steps=32, num_minibatches=4,
            hidden_sizes=(32,), memory_size=32, learning_rate=1e-3, eval_interval=1000, eval_episodes=64)
"""MemoryCue with a delay of 4 blank steps between the cue and the query: optimum 1, chance 0."""

SMALL = dict(env="MemoryCue-v0", env_params=("delay=3",), num_envs=4, num_steps=16, num_epochs=2, num_minibatches=2,
             hidden_sizes=(16,), memory_size=8, total_timesteps=4 * 16 * 8, updates_per_chunk=2)
RESUME = {
    "ppo-gru": PPOConfig(memory="gru", bptt_length=8, normalize_obs=True, **SMALL),
    "ppo-lstm-continuous": PPOConfig(memory="lstm", **{**SMALL, "env": "MemoryCueContinuous-v0"}),
    "pqn-lstm": PQNConfig(memory="lstm", bptt_length=4, **SMALL),
}

# PPO's GRU learns the task (TASK's delay of 4; PQN's LSTM learns TASK itself) with the network and batch of the
# GRU resumed below, so the module's GRU runs share one compiled program: seeds 0-9 reach a greedy evaluation of
# 1.0 within 7,700 env steps and keep it; 30,720 gives four times that, and the memoryless policy the same budget.
LEARNING = dict(env_params=TASK["env_params"], learning_rate=1e-3, total_timesteps=30_720, eval_interval=1000,
                eval_episodes=64)
LEARN = {
    "ppo-gru": dataclasses.replace(RESUME["ppo-gru"], **LEARNING),
    "pqn-lstm": PQNConfig(memory="lstm", total_timesteps=80_000, **TASK),
    "ppo-mlp": PPOConfig(normalize_obs=True, **{**SMALL, **LEARNING}),
}


@pytest.fixture(scope="module")
def learned(tmp_path_factory):
    """``learned(name) -> (run_dir, TrainResult)``: the :data:`LEARN` run ``name``, trained once per module."""
    cache = {}

    def get(name: str):
        if name not in cache:
            run_dir = tmp_path_factory.mktemp(name) / "run"
            cache[name] = run_dir, rljax.train(LEARN[name], options=rljax.RunOptions(run_dir=run_dir, quiet=True))
        return cache[name]

    return get


# PQN's LSTM with --slow only (by default PPO's GRU learns here and tests/unit/agents/test_recurrent.py checks the
# LSTM's mechanics).
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow if n == "pqn-lstm" else ()) for n in LEARN])
def test_memory_solves_a_memory_task_that_a_memoryless_policy_cannot(name, learned):
    _, result = learned(name)
    greedy = result.rows[-1]["eval/return_mean"]  # 64 greedy episodes after the last update
    if name.endswith("mlp"):
        # The query looks the same whatever the cue: a memoryless policy is right half the time.
        assert abs(greedy) <= 0.45, greedy
    else:
        assert greedy >= 0.9, (greedy, [r["episode_return_mean"] for r in result.rows])


# The LSTMs with --slow only (by default tests/unit/agents/test_recurrent.py carries an LSTM's state).
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow if "lstm" in n else ()) for n in RESUME])
def test_a_recurrent_run_stopped_and_resumed_is_bit_identical_and_its_policy_acts_with_state(name, tmp_path):
    config = RESUME[name]
    full = rljax.train(config, options=rljax.RunOptions(run_dir=tmp_path / "full", quiet=True, checkpoint_every=1))
    part = rljax.train(config, options=rljax.RunOptions(run_dir=tmp_path / "cut", quiet=True, checkpoint_every=1,
                                                        on_chunk=lambda c, state, row: c == 1))
    assert part.preempted == "on_chunk"
    assert np.any(np.asarray(jax.tree.leaves(part.state.memory)[0]) != 0)  # mid-episode memory was saved
    rest = rljax.train(config, options=rljax.RunOptions(run_dir=tmp_path / "cut", quiet=True, resume=True,
                                                        checkpoint_every=1))
    assert_same_bits(full.state, rest.state)
    assert strip(read_chunks(tmp_path / "full")) == strip(read_chunks(tmp_path / "cut"))

    policy = rljax.load(tmp_path / "full")
    assert policy.recurrent
    leaf = jax.tree.leaves(policy.initial_state())[0]
    assert leaf.shape == (8,) and not np.any(np.asarray(leaf))
    # The loaded policy, stepped by hand over a batch with its state reset at each episode's start,
    # acts as the run's agent does from the same memory. policy.act runs a compiled program of its
    # own, whose fusions may round the last bit of a float differently from the agent's call: the
    # memory and continuous actions agree to float32 rounding, discrete actions exactly.
    obs = full.state.obs
    action, state = policy.act(obs, full.state.memory)
    want, want_state = full.agent.policy(full.agent.policy_params(full.state), obs, None, True, full.state.memory)
    same = np.testing.assert_array_equal if policy.discrete else \
        (lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6))
    same(action, want)
    for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(want_state)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # One observation at a time gives the batch's actions.
    one, _ = policy.act(jax.tree.map(lambda x: x[2], obs), jax.tree.map(lambda m: m[2], full.state.memory))
    same(one, action[2])
    with pytest.raises(TypeError, match=r"recurrent: act with policy.act\(obs, state\)"):
        policy.act(obs)
    with pytest.raises(ValueError, match=r"does not fit 4 observations: it needs .*initial_state\(4\)"):
        policy.act(obs, policy.initial_state(3))


def test_a_loaded_recurrent_policy_plays_by_hand_the_episodes_evaluate_plays(learned):
    run_dir, _ = learned("ppo-gru")
    policy = rljax.load(run_dir)
    episodes = evaluate(policy, 16, seed=3)
    assert episodes.lengths.tolist() == [6] * 16 and float(episodes.returns.mean()) >= 0.9
    env, params = policy.env, policy.env_params
    act = jax.jit(policy.act)
    # evaluate's resets, by hand: the same cues; the task's steps and the greedy policy draw nothing.
    reset_keys = jax.random.split(jax.random.split(jax.random.key(3))[0], 16)
    for i in range(16):
        obs, env_state = env.reset(reset_keys[i], params)
        state, total, done = policy.initial_state(), 0.0, False
        while not done:
            action, state = act(obs, state)
            obs, env_state, reward, term, trunc, _ = env.step(jax.random.key(0), env_state, action, params)
            total, done = total + float(reward), bool(term | trunc)
        assert total == float(episodes.returns[i]), i


# Slow: by default tests/unit/training/test_sweep.py's test_member_equals_single_run (a member equals its single
# run) and this file's recurrent resume tests (the memory in the train state) stand for it.
@pytest.mark.slow
def test_a_sweep_vmaps_the_memory_and_each_member_equals_its_single_run():
    config = RESUME["ppo-gru"]
    spec = SweepSpec(grid={"learning_rate": [1e-4, 1e-3]})
    result, members, _ = run_sweep(config, spec, quiet=True)
    assert jax.tree.leaves(result.state.memory)[0].shape == (2, 4, 8)  # [members, envs, memory_size]
    single = rljax.train(dataclasses.replace(config, learning_rate=members[1].values["learning_rate"]),
                         options=rljax.RunOptions(quiet=True))
    for a, b in zip(jax.tree.leaves(single.agent.params_of(single.state)),
                    jax.tree.leaves(result.agent.params_of(result.state))):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b)[1], atol=1e-5)


@pytest.mark.slow  # by default the sweep above vmaps the memory and tests/unit/training/hooks/test_pbt.py copies members
def test_pbt_copies_a_members_memory_with_the_envs_it_belongs_to():
    """Exploit copies the donor's params, envs and memory together; a member whose memory came
    from other envs would act on episodes it never saw."""
    import functools

    from rljax.training.hooks.pbt import PBTSpec, exploit_explore

    config = RESUME["ppo-gru"]
    result, _, _ = run_sweep(config, SweepSpec(seeds=(0, 1, 2, 3)), quiet=True)
    state = result.state
    scores = jnp.asarray([1.0, 4.0, 3.0, 2.0])  # member 0 is replaced by member 1 (fraction 0.25)
    spec = PBTSpec(interval=1, fields={"learning_rate": (1e-4, 1e-3)}, fraction=0.25)
    new, source = jax.jit(functools.partial(exploit_explore, spec=spec))(state, scores, jnp.int32(0))
    assert np.asarray(source).tolist() == [1, 1, 2, 3]
    for leaf_new, leaf_old in zip(jax.tree.leaves((new.memory, new.obs)), jax.tree.leaves((state.memory, state.obs))):
        np.testing.assert_array_equal(np.asarray(leaf_new)[0], np.asarray(leaf_old)[1])
        np.testing.assert_array_equal(np.asarray(leaf_new)[2], np.asarray(leaf_old)[2])


@pytest.mark.slow  # by default the in-process recurrent resume above, test_data_parallel.py's and the CLI's SIGTERM resumes
@pytest.mark.requires_bitexact_backend
@pytest.mark.timeout(600)
def test_a_recurrent_run_preempted_by_sigterm_resumes_bit_exactly_from_the_command_line(tmp_path):
    flags = ["--env", "MemoryCue-v0", "--memory", "lstm", "--memory-size", "8", "--hidden-sizes", "16",
             "--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2", "--num-epochs", "2",
             "--updates-per-chunk", "2", "--checkpoint-every", "1", "--no-anneal-lr"]
    cmd = [sys.executable, "-m", "rljax.cli.main", "train", "ppo", *flags]
    run = tmp_path / "cut"
    returncode, err = sigterm_after_progress(cmd + ["--total-timesteps", str(10**8), "--run-dir", str(run)],
                                             cpu_subprocess_env(), tmp_path, tmp_path / "cut.stderr")
    assert returncode == PREEMPTED_EXIT_CODE, err[-2000:]
    cut_rows = read_chunks(run)
    total = 4 * 16 * 2 * (len(cut_rows) + 2)
    ref = subprocess.run(cmd + ["--total-timesteps", str(total), "--quiet", "--run-dir", str(tmp_path / "ref")],
                         env=cpu_subprocess_env(), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert ref.returncode == 0, ref.stderr[-2000:]
    resumed = subprocess.run([sys.executable, "-m", "rljax.cli.main", "resume", str(run), "--total-timesteps", str(total),
                              "--quiet"], env=cpu_subprocess_env(), cwd=tmp_path, capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    a, b = final_leaves(tmp_path / "ref"), final_leaves(run)
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))
    assert strip(read_chunks(run)) == strip(read_chunks(tmp_path / "ref"))
