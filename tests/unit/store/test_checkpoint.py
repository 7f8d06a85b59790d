"""Checkpoints: bit-exact resume (PPO, DQN), preemption by signal, corrupt-checkpoint fallback,
config mismatch, and continuous metrics."""

from __future__ import annotations

import dataclasses
import json
import shutil
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import rljax
from rljax.agents.dqn import DQNConfig
from rljax.agents.ppo import PPOConfig
from rljax.agents.sac import SACConfig
from rljax.agents.td3 import TD3Config
from rljax.store.checkpoint import PREEMPTED_EXIT_CODE, Checkpointer, NoCheckpointError
from rljax.store.rundir import ConfigMismatchError
from rljax.store.tracking import read_chunks
from tests.support.runs import PPO_SMALL, assert_same_bits, final_leaves, sigterm_after_progress, strip

ROOT = pathlib.Path(__file__).resolve().parents[3]

DQN_SMALL = DQNConfig(total_timesteps=4 * 2 * 60, updates_per_chunk=10, num_envs=4, num_steps=2, batch_size=16,
                      buffer_size=64, learning_starts=32, target_update_interval=16, hidden_sizes=(16,),
                      n_step=3, prioritized=True, double_q=True)


DQN_ONE_STEP = DQNConfig(**{**DQN_SMALL.__dict__, "n_step": 1, "prioritized": False})  # empty n-step tail
SAC_SMALL = SACConfig(total_timesteps=4 * 60, updates_per_chunk=10, num_envs=4, num_steps=1, batch_size=16,
                      buffer_size=128, learning_starts=32, hidden_sizes=(16,), gradient_steps=2)


# gradient_steps=3 with TD3's policy_delay=2: the delay phase crosses update and chunk boundaries.
TD3_SMALL = TD3Config(total_timesteps=4 * 60, updates_per_chunk=10, num_envs=4, batch_size=16, buffer_size=128,
                      learning_starts=32, hidden_sizes=(16,), gradient_steps=3)


# DQN's one-step variant with --slow only (by default DQN with its n-step tail).
@pytest.mark.parametrize("config", [PPO_SMALL, DQN_SMALL, pytest.param(DQN_ONE_STEP, marks=pytest.mark.slow), SAC_SMALL,
                                    TD3_SMALL], ids=["ppo", "dqn", "dqn-1step", "sac", "td3"])
def test_interrupted_and_resumed_equals_uninterrupted(tmp_path, config):
    full = rljax.train(config, options=rljax.RunOptions(run_dir=tmp_path / "full", quiet=True, checkpoint_every=2))
    part = rljax.train(config, options=rljax.RunOptions(run_dir=tmp_path / "cut", quiet=True, checkpoint_every=2,
                                                        on_chunk=lambda c, state, row: c == 2))
    assert part.preempted == "on_chunk" and len(part.rows) == 3
    rest = rljax.train(config, options=rljax.RunOptions(run_dir=tmp_path / "cut", quiet=True, checkpoint_every=2,
                                                        resume=True))
    assert rest.timings["start_chunk"] == 3
    assert_same_bits(full.state, rest.state)
    rows_full, rows_cut = read_chunks(tmp_path / "full"), read_chunks(tmp_path / "cut")
    assert strip(rows_full) == strip(rows_cut)
    steps = [r["env_steps"] for r in rows_cut]
    assert steps == sorted(set(steps))  # monotonic, no duplicates
    # The manifest's cost adds up both sessions, with the saves that are in no row (each session's last).
    for run, sessions, rows in (("full", [full], rows_full), ("cut", [part, rest], rows_cut)):
        cost = json.loads((tmp_path / run / "manifest.json").read_text())["cost"]
        assert cost["checkpoint_bytes"] == sum(r.timings["checkpoint_bytes"] for r in sessions) > 0, run
        assert cost["device_s"] == pytest.approx(sum(r["cost/device_s"] for r in rows)), run
        assert (cost["chunks"], cost["superseded_chunks"], cost["env_steps"]) == (len(rows), 0, rows[-1]["env_steps"])


def test_corrupt_newest_checkpoint_falls_back_with_a_warning(tmp_path):
    run = tmp_path / "run"
    full = rljax.train(PPO_SMALL, options=rljax.RunOptions(run_dir=tmp_path / "full", quiet=True, checkpoint_every=2))
    rljax.train(PPO_SMALL, options=rljax.RunOptions(run_dir=run, quiet=True, checkpoint_every=1, keep_checkpoints=3,
                                                    on_chunk=lambda c, state, row: c == 3))
    ckpt = Checkpointer(run)
    steps = ckpt.steps()
    ckpt.close()
    newest = max(steps)
    # Truncate every data file of the newest step: Orbax still lists it as the latest step.
    for f in (run / "checkpoints" / str(newest)).rglob("*"):
        if f.is_file() and f.stat().st_size > 0 and "state" in str(f):
            f.write_bytes(f.read_bytes()[: f.stat().st_size // 3])
    with pytest.warns(UserWarning, match=f"skipping checkpoint step {newest}"):
        rest = rljax.train(PPO_SMALL, options=rljax.RunOptions(run_dir=run, quiet=True, resume=True,
                                                               checkpoint_every=1))
    assert rest.timings["start_chunk"] == 3  # resumed from the chunk-2 checkpoint
    assert_same_bits(full.state, rest.state)
    # The chunk-3 row logged before the (corrupted) save is kept aside, not lost, and not duplicated.
    superseded = [json.loads(l) for l in (run / "chunks.superseded.jsonl").read_text().splitlines()]
    assert [r["env_steps"] for r in superseded] == [newest]
    assert strip(read_chunks(run)) == strip(read_chunks(tmp_path / "full"))


def test_keep_last_n_checkpoints(tmp_path):
    rljax.train(PPO_SMALL, options=rljax.RunOptions(run_dir=tmp_path, quiet=True, checkpoint_every=1,
                                                    keep_checkpoints=2))
    ckpt = Checkpointer(tmp_path)
    assert ckpt.steps() == [8 * 16 * 10, 8 * 16 * 12]
    leaves_, meta = ckpt.read(8 * 16 * 12)
    ckpt.close()
    assert meta["chunk_index"] == 5 and meta["config"]["num_envs"] == 8 and meta["algorithm"] == "PPOConfig"


def test_config_mismatch_names_the_fields_and_total_timesteps_may_grow_not_shrink(tmp_path):
    rljax.train(PPO_SMALL, options=rljax.RunOptions(run_dir=tmp_path, quiet=True, checkpoint_every=2))
    bad = PPOConfig(**{**PPO_SMALL.__dict__, "num_envs": 16, "learning_rate": 1e-3})
    with pytest.raises(ConfigMismatchError, match="learning_rate: saved 0.00025, now 0.001.*num_envs: saved 8, now 16"):
        rljax.train(bad, options=rljax.RunOptions(run_dir=tmp_path, quiet=True, resume=True))
    shorter = PPOConfig(**{**PPO_SMALL.__dict__, "total_timesteps": 8 * 16 * 4})
    with pytest.raises(ValueError, match="total_timesteps=512: it has already trained 1,536 env steps"):
        rljax.train(shorter, options=rljax.RunOptions(run_dir=tmp_path, quiet=True, resume=True))
    longer = PPOConfig(**{**PPO_SMALL.__dict__, "total_timesteps": 8 * 16 * 16})
    result = rljax.train(longer, options=rljax.RunOptions(run_dir=tmp_path, quiet=True, resume=True))
    steps = [r["env_steps"] for r in read_chunks(tmp_path)]
    assert steps == [8 * 16 * 2 * i for i in range(1, 9)]
    assert int(result.state.num_updates) == 16
    assert json.loads((tmp_path / "config.json").read_text())["total_timesteps"] == 8 * 16 * 16
    assert json.loads((tmp_path / "manifest.json").read_text())["resumes"][0]["from_env_steps"] == 8 * 16 * 12


def test_resume_with_a_longer_run_keeps_the_saved_auto_chunk_size(tmp_path):
    """The automatic chunk size depends on the run's length; a resumed run keeps the saved one.

    32 env steps per update: 40 updates plan ~10 chunks of ceil(40 / 10) = 4 updates; stopped after
    3 chunks and resumed with 100 updates in all, a fresh plan would take chunks of 10 (and its
    chunk 3 would end at update 40), but the continuation keeps chunks of 4: rows every 4 updates
    up to exactly 100.
    """
    steps_per_update = 4 * 8
    short = PPOConfig(total_timesteps=steps_per_update * 40, num_envs=4, num_steps=8, num_epochs=1,
                      num_minibatches=1, hidden_sizes=(8,))
    assert short.updates_per_chunk == 0  # automatic
    part = rljax.train(short, options=rljax.RunOptions(run_dir=tmp_path, quiet=True, tensorboard=False,
                                                       checkpoint_every=1, on_chunk=lambda c, state, row: c == 2))
    assert part.preempted == "on_chunk" and part.timings["updates_per_chunk"] == 4
    longer = dataclasses.replace(short, total_timesteps=steps_per_update * 100)
    rest = rljax.train(longer, options=rljax.RunOptions(run_dir=tmp_path, quiet=True, tensorboard=False,
                                                        checkpoint_every=1, resume=True))
    assert rest.timings["start_chunk"] == 3 and rest.timings["updates_per_chunk"] == 4
    updates = [4 * (i + 1) for i in range(100 // 4)]
    rows = read_chunks(tmp_path)
    assert [r["updates"] for r in rows] == updates
    assert [r["env_steps"] for r in rows] == [u * steps_per_update for u in updates]
    assert int(rest.state.updates) == int(rest.state.num_updates) == 100


def test_fresh_run_refuses_a_used_directory_and_resume_needs_readable_checkpoints(tmp_path):
    rljax.train(PPO_SMALL, options=rljax.RunOptions(run_dir=tmp_path / "a", quiet=True))
    with pytest.raises(FileExistsError, match="already holds"):
        rljax.train(PPO_SMALL, options=rljax.RunOptions(run_dir=tmp_path / "a", quiet=True))
    # Every committed step unreadable: refused, not silently restarted (that would throw progress
    # away); the unreadable steps are kept aside for inspection. (A run with no committed step at
    # all restarts from scratch: tests/integration/test_reliability.py.)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    steps = [p for p in (tmp_path / "b" / "checkpoints").iterdir() if p.name.isdigit()]
    for step in steps:
        shutil.rmtree(step / "state")
    with pytest.raises(NoCheckpointError, match="no restorable checkpoint"):
        rljax.train(PPO_SMALL, options=rljax.RunOptions(run_dir=tmp_path / "b", quiet=True, resume=True))
    kept = [p for d in ("checkpoints", "checkpoints_unreadable") if (tmp_path / "b" / d).exists()
            for p in (tmp_path / "b" / d).iterdir() if p.name.split("-")[0].isdigit()]
    assert len(kept) == len(steps)  # nothing deleted
    assert not (tmp_path / "b" / "metrics.superseded.jsonl").exists()  # and nothing restarted


@pytest.mark.slow  # by default the fault soak's SIGTERM-during-the-stop-save case and tests/unit/cli/test_stop.py
@pytest.mark.requires_bitexact_backend
@pytest.mark.timeout(900)
def test_sigterm_mid_run_then_resume_matches_uninterrupted(tmp_path):
    """SIGTERM stops a CLI run cleanly (exit 75, checkpoint saved); resuming it gives the bits and
    rows of a run that was never stopped.

    The run that gets the signal is planned for 10**8 env steps, so it cannot finish before the
    signal however fast the machine, and the signal is sent on its second progress line. The
    reference run is then planned to end 3 chunks after the point the run actually stopped, and the
    stopped run is resumed with that shorter total (``total_timesteps`` may change on resume). The
    learning rate is not annealed, so the total does not enter the computation.
    """
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    steps_per_chunk = 4 * 32 * 4  # num_envs * num_steps * updates_per_chunk
    flags = ["--updates-per-chunk", "4", "--num-steps", "32", "--hidden-sizes", "16", "--checkpoint-every", "3",
             "--no-anneal-lr", "--no-compile-cache", "--no-tensorboard"]
    cmd = [sys.executable, "-m", "experiments.ppo_cartpole"]

    run = tmp_path / "cut"
    returncode, err = sigterm_after_progress(cmd + flags + ["--total-timesteps", str(10**8), "--run-dir", str(run)],
                                             env, ROOT, tmp_path / "cut.stderr")
    assert returncode == PREEMPTED_EXIT_CODE, err[-2000:]
    assert "rljax resume" in err and str(run) in err
    cut_rows = read_chunks(run)
    planned = 10**8 // steps_per_chunk
    assert 2 <= len(cut_rows) < planned  # preempted: stopped after the signal, long before the end
    assert [r["env_steps"] for r in cut_rows] == [steps_per_chunk * (i + 1) for i in range(len(cut_rows))]

    total = steps_per_chunk * (len(cut_rows) + 3)
    ref = subprocess.run(cmd + flags + ["--total-timesteps", str(total), "--quiet", "--run-dir", str(tmp_path / "ref")],
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert ref.returncode == 0, ref.stderr[-2000:]
    resumed = subprocess.run([sys.executable, "-m", "rljax.cli.main", "resume", str(run), "--total-timesteps", str(total),
                              "--quiet"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    a, b = final_leaves(tmp_path / "ref"), final_leaves(run)
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))
    rows = read_chunks(run)
    assert len(rows) == len(cut_rows) + 3
    assert strip(rows) == strip(read_chunks(tmp_path / "ref"))


def test_a_second_signal_ends_a_stuck_run():
    """One SIGTERM waits for the chunk; a second one ends a process that cannot get back to Python
    (here: stuck in a long sleep standing in for a hung XLA call) after the grace period."""
    script = ("import sys, time\n"
              "from rljax.training.signals import PreemptionGuard\n"
              "with PreemptionGuard(grace_s=0.5) as guard:\n"
              "    print('ready', flush=True)\n"
              "    time.sleep(30)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=pathlib.Path(__file__).resolve().parents[3])
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        time.sleep(1.5)
        assert proc.poll() is None, "a single SIGTERM must let the current chunk finish"
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=20)
    finally:
        proc.kill()
    assert rc == 128 + signal.SIGTERM
    assert "second SIGTERM" in proc.stderr.read()


def test_pack_round_trip_keeps_every_leaf_exact():
    from rljax.store.checkpoint import PACK_MAX_BYTES, pack, unpack

    rng = np.random.default_rng(0)
    leaves = [rng.standard_normal((3, 4)).astype(np.float32), np.array(7, np.int32), np.zeros((0, 5), np.float32),
              np.array([True, False]), rng.integers(0, 2**32, (2,), dtype=np.uint32),
              rng.standard_normal(PACK_MAX_BYTES // 4 + 1).astype(np.float32),  # stored on its own
              np.float32(np.nan) * np.ones((2,), np.float32)]
    arrays, layout = pack(leaves)
    assert sorted(arrays) == ["leaf_000005", "packed_bool", "packed_float32", "packed_int32", "packed_uint32"]
    back = unpack(arrays, layout)
    for a, b in zip(leaves, back):
        assert a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()
    damaged = {**arrays, "packed_float32": arrays["packed_float32"][:-1]}
    with pytest.raises(ValueError, match="packed float32 array holds"):
        unpack(damaged, layout)


def test_a_checkpoint_with_int32_counters_resumes_bit_exactly(tmp_path):
    """Checkpoints written while the train state counted updates in int32 scalars (one leaf each where
    a Count has two words) restore into today's state and continue the same training."""
    import jax
    import jax.numpy as jnp

    from rljax.core.counters import Count, host_value

    options = dict(quiet=True, tensorboard=False, checkpoint_every=1)
    full = rljax.train(PPO_SMALL, options=rljax.RunOptions(run_dir=tmp_path / "full", **options))
    part = rljax.train(PPO_SMALL, options=rljax.RunOptions(run_dir=tmp_path / "cut", on_chunk=lambda c, s, r: c == 2,
                                                           **options))
    ckpt = Checkpointer(tmp_path / "cut")
    step = max(ckpt.steps())
    _, meta = ckpt.read(step)
    legacy = jax.tree.map(lambda x: jnp.asarray(host_value(x), jnp.int32) if isinstance(x, Count) else x, part.state,
                          is_leaf=lambda x: isinstance(x, Count))
    assert len(jax.tree.leaves(legacy)) == len(jax.tree.leaves(part.state)) - 2
    ckpt.close()
    shutil.rmtree(tmp_path / "cut" / "checkpoints" / str(step))
    ckpt = Checkpointer(tmp_path / "cut")
    ckpt.save(step, legacy, meta)
    ckpt.close()
    rest = rljax.train(PPO_SMALL, options=rljax.RunOptions(run_dir=tmp_path / "cut", resume=True, **options))
    assert rest.timings["start_chunk"] == 3
    assert_same_bits(full.state, rest.state)


def test_a_restore_without_adapt_uses_the_checkpointers_own(tmp_path):
    """An elastic resume sets Checkpointer.adapt, so a rollback (which restores with the run's state
    as template and no adapt) re-deals a step saved on the old layout too."""
    import jax.numpy as jnp

    from rljax.store.checkpoint import LayoutError

    ckpt = Checkpointer(tmp_path, async_save=False)
    ckpt.save(1, {"x": jnp.arange(4.0)}, {"chunk_index": 0})
    template = {"x": jnp.zeros(2)}
    ckpt.adapt = lambda leaves, meta: [leaves[0][:2] + 10.0]
    state, meta, _ = ckpt.restore(template)
    np.testing.assert_array_equal(np.asarray(state["x"]), [10.0, 11.0])
    ckpt.adapt = lambda leaves, meta: (_ for _ in ()).throw(LayoutError("cannot re-deal leaf x"))
    with pytest.raises(LayoutError, match="cannot re-deal leaf x"):  # not skipped as if damaged
        ckpt.restore(template)
    ckpt.close()
