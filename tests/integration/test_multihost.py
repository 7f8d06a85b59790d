"""Multi-host runs on one machine: several processes joined by JAX's distributed runtime on loopback,
with gloo collectives between their fake CPU devices (rljax.runtime.distributed, rljax launch).

Every multi-process run is a subprocess with a hard timeout (a lost collective must fail a test,
not hang the suite). The reference runs use the same global batch in one process.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np
import pytest

from rljax.cli.launch import job_status, process_env
from rljax.training.hooks.observe import is_measured
from tests.conftest import suite_xla_flags

ROOT = pathlib.Path(__file__).resolve().parents[2]
TIMEOUT_S = 240
# A tiny PPO CartPole run: 4 envs over 4 devices, 128 steps, 8 updates in 4 chunks.
PPO = ["-m", "experiments.ppo_cartpole", "--num-devices", "4", "--total-timesteps", "4096",
       "--updates-per-chunk", "2", "--checkpoint-every", "1", "--no-tensorboard"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLJAX_")}
    env.update(XLA_FLAGS=suite_xla_flags(), JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT), RLJAX_HEARTBEAT_TIMEOUT_S="10", **extra)
    return env


def _run(args: list[str], **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=_env(**extra), capture_output=True, text=True,
                          timeout=TIMEOUT_S)


def _launch(args: list[str], n: int = 2, d: int = 2) -> subprocess.CompletedProcess:
    return _run(["-m", "rljax.cli.main", "launch", "-n", str(n), "-d", str(d), "--", sys.executable, *args])


def _start_processes(args: list[str], n: int = 2, d: int = 2) -> list[subprocess.Popen]:
    """The job's processes started directly (what rljax launch does), so a test can signal one."""
    from rljax.cli.launch import free_port

    port = free_port()
    return [subprocess.Popen([sys.executable, *args], cwd=ROOT, env=process_env(_env(), i, n, d, port),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(n)]


def _finish(procs: list[subprocess.Popen]) -> list[tuple[int, str]]:
    out = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        for p in procs:
            _, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            out.append((p.returncode, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return out


def _rows(run_dir: pathlib.Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if not is_measured(k)}
            for line in (run_dir / "chunks.jsonl").read_text().splitlines() if line.strip()]


def _final_checkpoint(run_dir: pathlib.Path) -> list[np.ndarray]:
    from rljax.store.checkpoint import Checkpointer

    ckpt = Checkpointer(run_dir, read_only=True)
    leaves, _ = ckpt.read(ckpt.steps()[-1])
    return leaves


def _wait_for_rows(run_dir: pathlib.Path, n: int, procs: list[subprocess.Popen]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    path = run_dir / "chunks.jsonl"
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().splitlines()) >= n:
            return
        if any(p.poll() is not None for p in procs):
            pytest.fail(f"a process ended before {n} rows: {[p.poll() for p in procs]}")
        time.sleep(0.1)
    pytest.fail(f"no {n} rows within {TIMEOUT_S} s")


@pytest.fixture(scope="module")
def two_by_two(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """An uninterrupted 2-process x 2-device run."""
    run_dir = tmp_path_factory.mktemp("mh") / "run"
    # No --num-devices: a multi-process run takes every device of the job (it used to refuse num_devices=1).
    at = PPO.index("--num-devices")
    without = PPO[:at] + PPO[at + 2:]
    done = _launch([*without, "--run-dir", str(run_dir)])
    assert done.returncode == 0, done.stderr[-3000:]
    # Regression: every rank printed gloo's "[Gloo] Rank N is connected to M peer ranks" lines.
    assert "[Gloo]" not in done.stdout and "[ 50.0%] steps" in done.stdout, done.stdout[-2000:]
    assert json.loads((run_dir / "config.json").read_text())["num_devices"] == 4
    return run_dir


@pytest.mark.timeout(600)
def test_two_processes_equal_one_process_with_the_same_devices(two_by_two, tmp_path):
    """2 processes x 2 devices = 1 process x 4 devices on the same global batch.

    Same envs, keys and episodes bit for bit; params and losses to float rounding: the gradient
    all-reduce sums the 4 devices' gradients in another order across processes (gloo's) than
    within one (XLA's), and float addition is not associative.
    """
    single = tmp_path / "single"
    done = _run([*PPO, "--run-dir", str(single)])
    assert done.returncode == 0, done.stderr[-3000:]
    multi_rows, single_rows = _rows(two_by_two), _rows(single)
    assert len(multi_rows) == len(single_rows) == 4
    for m, s in zip(multi_rows, single_rows):
        assert m.keys() == s.keys()
        for k in ("env_steps", "updates", "episodes", "episode_length_mean", "episode_return_mean"):
            assert m[k] == s[k], k
        for k, v in s.items():
            if isinstance(v, float):
                assert m[k] == pytest.approx(v, rel=1e-4, abs=1e-6), k
    # The same program: the same bytes handed to collectives per update, counted from it (PPO: one
    # all-reduce of the gradients per minibatch step, and a few metric scalars).
    raw = [[json.loads(line) for line in (d / "chunks.jsonl").read_text().splitlines()] for d in (two_by_two, single)]
    sent = {r["cost/collective_bytes_per_update"] for rows in raw for r in rows}
    assert len(sent) == 1 and sent.pop() > 0, sent
    multi, one = _final_checkpoint(two_by_two), _final_checkpoint(single)
    assert len(multi) == len(one)
    for a, b in zip(multi, one):
        assert a.shape == b.shape and a.dtype == b.dtype
        if np.issubdtype(a.dtype, np.floating):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
        else:
            np.testing.assert_array_equal(a, b)
    manifest = json.loads((two_by_two / "manifest.json").read_text())
    assert [p["process_index"] for p in manifest["processes"]] == [0, 1]
    assert [len(p["devices"]) for p in manifest["processes"]] == [2, 2]
    assert len(manifest["devices"]) == 4


@pytest.mark.slow  # by default the MLP equivalence above and the recurrent resume in test_data_parallel.py
@pytest.mark.timeout(600)
def test_a_recurrent_policy_over_two_processes_equals_it_in_one(tmp_path):
    """PPO-GRU, 2 processes x 2 devices against 1 x 4: the memory is split with the envs (one per
    device), reset and carried the same way; the same episodes, params to float rounding."""
    rnn = [a for a in PPO if a not in ("--num-devices", "4")] + [
        "--memory", "gru", "--memory-size", "8", "--hidden-sizes", "16", "--bptt-length", "32"]
    multi, single = tmp_path / "multi", tmp_path / "single"
    done = _launch([*rnn, "--run-dir", str(multi)])
    assert done.returncode == 0, done.stderr[-3000:]
    done = _run([*rnn, "--num-devices", "4", "--run-dir", str(single)])
    assert done.returncode == 0, done.stderr[-3000:]
    multi_rows, single_rows = _rows(multi), _rows(single)
    assert len(multi_rows) == len(single_rows) == 4
    for m, s in zip(multi_rows, single_rows):
        for k in ("env_steps", "episodes", "episode_length_mean", "episode_return_mean"):
            assert m[k] == s[k], k
    a, b = _final_checkpoint(multi), _final_checkpoint(single)
    assert len(a) == len(b) and any(x.shape == (4, 1, 8) for x in a)  # the memory: [devices, envs, memory_size]
    for x, y in zip(a, b):
        if np.issubdtype(x.dtype, np.floating):
            np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)
        else:
            np.testing.assert_array_equal(x, y)


# Slow, for the default suite's time (40 s): by default tests/unit/cli/test_stop.py (a stop ends a run at a chunk
# boundary with exit 75 and the resume is bit-exact) and the two-process equality test above (the collectives
# across processes) stand for it.
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sigterm_to_one_process_stops_both_and_resume_is_bit_exact(two_by_two, tmp_path):
    run_dir = tmp_path / "run"
    procs = _start_processes([*PPO, "--run-dir", str(run_dir)])
    _wait_for_rows(run_dir, 1, procs)
    procs[1].send_signal(signal.SIGTERM)  # the follower: the leader must learn of it at the boundary
    results = _finish(procs)
    assert [code for code, _ in results] == [75, 75], [err[-2000:] for _, err in results]
    assert "SIGTERM (process 1)" in results[0][1]
    stopped = _rows(run_dir)
    assert 1 <= len(stopped) < 4, "the stop came after the last chunk; nothing to resume"
    assert not any((run_dir / n).exists() for n in ("metrics.jsonl.1",)), "only the leader writes"
    resumed = _launch(["-m", "rljax.cli.main", "resume", str(run_dir)])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _rows(run_dir) == _rows(two_by_two)
    for a, b in zip(_final_checkpoint(run_dir), _final_checkpoint(two_by_two)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow  # by default tests/integration/test_elastic_resume.py and the README's launch + resume
@pytest.mark.timeout(600)
def test_a_two_by_two_run_continues_on_a_smaller_job_and_then_in_one_process(two_by_two, tmp_path):
    """Elastic resume across changed jobs: 2 processes x 2 devices, requeued as 2 x 1 (no flag: a
    multi-process resume takes the job's devices), then continued in 1 process on 1 device."""
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(two_by_two, run_dir)
    done = _launch(["-m", "rljax.cli.main", "resume", str(run_dir), "--total-timesteps", "6144"], n=2, d=1)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "saved on 4 devices and continues on 2" in done.stdout, done.stdout[-2000:]
    done = _run(["-m", "rljax.cli.main", "resume", str(run_dir), "--num-devices", "1", "--total-timesteps", "8192"])
    assert done.returncode == 0, done.stderr[-3000:]
    steps = [r["env_steps"] for r in _rows(run_dir)]
    assert steps == sorted(set(steps)) and steps[-1] == 8192 and steps[:4] == [r["env_steps"] for r in _rows(two_by_two)]
    resumes = json.loads((run_dir / "manifest.json").read_text())["resumes"]
    assert [r["layout"] for r in resumes] == [{"from_num_devices": 4, "num_devices": 2, "processes": 2},
                                              {"from_num_devices": 2, "num_devices": 1, "processes": 1}]


@pytest.mark.slow  # a learning run; the SIGTERM resume above (also slow) checks the resume's bits
@pytest.mark.timeout(1500)
def test_a_preempted_two_by_two_run_resumed_as_one_by_two_still_learns_cartpole(tmp_path):
    run_dir = tmp_path / "run"
    learn = ["-m", "experiments.ppo_cartpole", "--num-devices", "4", "--total-timesteps", "500000",
             "--updates-per-chunk", "2", "--no-tensorboard", "--run-dir", str(run_dir)]
    procs = _start_processes(learn)
    try:  # gloo's all-reduce over loopback makes the 2 x 2 part slow: a few chunks of 2 updates
        _wait_for_rows(run_dir, 8, procs)
    finally:
        procs[1].send_signal(signal.SIGTERM)
    assert [code for code, _ in _finish(procs)] == [75, 75]
    done = _run(["-m", "rljax.cli.main", "resume", str(run_dir), "--num-devices", "2"])
    assert done.returncode == 0, done.stderr[-3000:]
    returns = [r["episode_return_mean"] for r in _rows(run_dir) if r["episode_return_mean"] is not None]
    plan = json.loads((run_dir / "manifest.json").read_text())["plan"]
    planned = plan["num_updates"] * plan["env_steps_per_update"]
    assert _rows(run_dir)[-1]["env_steps"] == planned and sum(returns[-2:]) / 2 >= 475, returns[-10:]


@pytest.mark.slow  # by default tests/unit/cli/test_stop.py (one process); the SIGTERM-to-a-follower test above
@pytest.mark.timeout(600)
def test_rljax_stop_stops_every_process_of_a_job_through_the_run_directory(tmp_path):
    """``rljax stop`` from outside the job (any host that sees the run directory): the leader reads the
    request, the processes agree at the boundary, all of them save once and exit 75."""
    run_dir = tmp_path / "run"
    procs = _start_processes([*PPO, "--total-timesteps", "40960", "--run-dir", str(run_dir)])
    try:
        _wait_for_rows(run_dir, 1, procs)
        stop = _run(["-m", "rljax.cli.main", "stop", str(run_dir), "--wait", "120"])
    finally:
        results = _finish(procs)
    assert stop.returncode == 0 and ": preempted by rljax stop" in stop.stdout, (stop.stdout, stop.stderr)
    assert [code for code, _ in results] == [75, 75], [err[-2000:] for _, err in results]
    status = json.loads(_run(["-m", "rljax.cli.main", "status", str(run_dir), "--json"]).stdout)
    assert status["state"] == "preempted" and status["env_steps"] < status["total_env_steps"]
    assert status["last_checkpoint_env_steps"] == status["env_steps"] == _rows(run_dir)[-1]["env_steps"]


@pytest.mark.slow  # by default tests/unit/store/test_shards.py; the multi-process resume above with --slow
@pytest.mark.timeout(600)
def test_every_process_writes_its_own_shards_and_a_damaged_shard_falls_back_to_an_older_step(two_by_two, tmp_path):
    """Checkpoints in shards: each process writes its own devices' rows (Orbax's per-process
    subdirectories) with a CRC-32 per shard; a flipped byte in process 1's data of the newest step
    makes the resume skip that step and continue from the one before."""
    import shutil

    newest = max(int(p.name) for p in (two_by_two / "checkpoints").iterdir() if p.name.isdigit())
    state = two_by_two / "checkpoints" / str(newest) / "state"
    assert (state / "ocdbt.process_0").is_dir() and (state / "ocdbt.process_1").is_dir()
    meta = json.loads((two_by_two / "checkpoints" / str(newest) / "meta" / "metadata").read_text())
    assert meta["_shards"] == {"processes": 2, "devices": 4}
    shards = meta["_checksums"]["arrays"]["leaf_000000"]["shards"]
    assert sorted(shards) == ["0:1", "1:2", "2:3", "3:4"]  # one per device, from both processes
    run_dir = tmp_path / "run"
    shutil.copytree(two_by_two, run_dir)
    data = sorted((run_dir / "checkpoints" / str(newest) / "state" / "ocdbt.process_1" / "d").iterdir(),
                  key=lambda f: f.stat().st_size)[-1]
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))
    done = _launch(["-m", "rljax.cli.main", "resume", str(run_dir), "--total-timesteps", str(newest + 1024)])
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"skipping checkpoint step {newest}" in done.stderr, done.stderr[-3000:]
    # Continued from the step before (the extension changes the learning-rate annealing from there on).
    rows = _rows(run_dir)
    assert rows[:3] == _rows(two_by_two)[:3] and [r["env_steps"] for r in rows[3:]] == [newest, newest + 1024]


@pytest.mark.slow  # by default the run equivalence above and the device-split sweep of test_population.py
@pytest.mark.timeout(600)
def test_a_sweep_over_two_processes_equals_the_same_sweep_in_one(tmp_path):
    sweep = ["-m", "experiments.ppo_cartpole", "sweep", "--seeds", "4", "--num-devices", "4", "--total-timesteps",
             "2048", "--updates-per-chunk", "2", "--no-plots", "--no-tensorboard"]
    multi, single = tmp_path / "multi", tmp_path / "single"
    done = _launch([*sweep, "--run-dir", str(multi)])
    assert done.returncode == 0, done.stderr[-3000:]
    done = _run([*sweep, "--run-dir", str(single)])
    assert done.returncode == 0, done.stderr[-3000:]
    names = sorted(p.name for p in (single / "members").iterdir())
    assert len(names) == 4 and names == sorted(p.name for p in (multi / "members").iterdir())
    for name in names:  # members never communicate: bit for bit
        assert _rows(multi / "members" / name) == _rows(single / "members" / name)
    for a, b in zip(_final_checkpoint(multi), _final_checkpoint(single)):
        np.testing.assert_array_equal(a, b)
    assert (multi / "summary.md").exists()


@pytest.mark.slow  # by default the SIGTERM-to-a-follower test above and tests/unit/cli/test_supervise.py's restarts
@pytest.mark.timeout(300)
def test_a_killed_process_makes_the_other_fail_fast(tmp_path):
    run_dir = tmp_path / "run"
    procs = _start_processes([*PPO, "--total-timesteps", "40960", "--updates-per-chunk", "1",
                              "--run-dir", str(run_dir)])
    _wait_for_rows(run_dir, 1, procs)
    procs[1].kill()
    t0 = time.monotonic()
    try:
        procs[0].wait(timeout=60)  # heartbeat timeout 10 s, or at once when a collective loses its peer
    except subprocess.TimeoutExpired:
        pytest.fail("the surviving process still ran 60 s after its peer was killed")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    waited = time.monotonic() - t0
    err = procs[0].stderr.read()
    assert procs[0].returncode != 0
    assert ("lost contact with the other processes" in err
            or "JAX distributed service detected fatal errors" in err), err[-3000:]
    assert waited < 60
    assert (run_dir / "checkpoints").is_dir()  # the committed checkpoints stay for the restart


@pytest.mark.slow  # by default tests/unit/training/hooks/test_stragglers.py (the same reductions in one process)
@pytest.mark.timeout(300)
def test_a_process_that_sleeps_in_every_chunk_is_named_the_straggler(tmp_path):
    """Process 1 sleeps 0.5 s in every chunk's callback: from chunk 1 on it launches every chunk late,
    and process 0 waits for it inside the chunk's gradient all-reduce."""
    from rljax.cli.inspect import summary_text

    run_dir = tmp_path / "run"
    results = _finish(_start_processes(["tests/support/straggler_run.py", str(run_dir), "0.5"]))
    assert [code for code, _ in results] == [0, 0], [err[-2000:] for _, err in results]
    rows = [json.loads(line) for line in (run_dir / "chunks.jsonl").read_text().splitlines()]
    assert len(rows) == 6
    for row in rows[1:]:
        assert row["time/straggler"] == 1 and row["time/straggler_lag_s"] > 0.4, row
        assert row["time/boundary_s_max_process"] == 1 and row["time/boundary_s_max"] > 0.4, row
        assert row["time/compute_s_max_process"] == 0, row  # the one that waited inside the chunk
    warnings = [line for line in results[0][1].splitlines() if "is a straggler" in line]
    assert len(warnings) == 1 and warnings[0].startswith("warning: process 1 is a straggler"), results[0][1][-2000:]
    assert "is a straggler" not in results[1][1], "only the leader warns"
    assert "processes: process 1 kept the others waiting in 5 of 6 chunks" in summary_text(run_dir)


def test_launch_forwards_statuses_and_refuses_bad_arguments():
    assert job_status([0, 0], None) == 0
    assert job_status([75, 75], None) == 75
    assert job_status([0, 75], None) == 75
    assert job_status([1, -9], 0) == 1
    assert job_status([0, -9], 1) == 128 + 9
    env = process_env({}, 1, 2, 3, 1234)
    assert env["RLJAX_COORDINATOR"] == "127.0.0.1:1234" and env["RLJAX_PROCESS_ID"] == "1"
    assert env["RLJAX_NUM_PROCESSES"] == "2" and env["RLJAX_DEVICES_PER_PROCESS"] == "3"
    assert env["CUDA_VISIBLE_DEVICES"] == "3,4,5"
    assert process_env({"CUDA_VISIBLE_DEVICES": "7"}, 0, 2, 1, 1)["CUDA_VISIBLE_DEVICES"] == "7"
    for args, words in ((["-n", "0", "--", "true"], "--num-processes must be >= 1"),
                        (["-n", "2", "-d", "0", "--", "true"], "--devices-per-process must be >= 1"),
                        (["-n", "2"], "give the train command after --")):
        done = _run(["-m", "rljax.cli.main", "launch", *args])
        assert done.returncode == 2 and words in done.stderr, done.stderr
    done = _run(["-m", "rljax.cli.main", "launch", "-n", "2", "--", sys.executable, "-c", "import sys; sys.exit(3)"])
    assert done.returncode == 3 and "ended with status 3" in done.stderr


def test_a_multiprocess_run_must_use_every_device(tmp_path):
    """--num-devices that is not every process's devices is a one-line error on every process."""
    done = _launch(["-m", "experiments.ppo_cartpole", "--num-devices", "2", "--total-timesteps", "512",
                    "--run-dir", str(tmp_path / "r")])
    assert done.returncode == 2, done.stderr[-3000:]
    assert "this job has 2 processes x 2 devices = 4 devices" in done.stderr
    assert "--num-devices 4" in done.stderr


def _pids_with_env(marker: str, process_id: str) -> list[int]:
    """Processes whose command line holds ``marker`` and whose environment says RLJAX_PROCESS_ID."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(marker.encode() in part for part in cmdline) and f"RLJAX_PROCESS_ID={process_id}".encode() in environ:
            found.append(int(entry.name))
    return found


def _supervise_killing_process_1(cmd: list[str], run_dir: pathlib.Path, after_a_checkpoint: bool = False,
                                 before_the_kill: Any = None) -> str:
    """Runs the supervise command ``cmd``, SIGKILLs process 1 of its job once the run has a row (and
    a checkpoint, with ``after_a_checkpoint``), calling ``before_the_kill()`` first; asserts that the
    supervisor ends with status 0 and returns its stderr."""
    from rljax.cli.supervise import newest_checkpoint

    sup = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_rows(run_dir, 1, [sup])
        while after_a_checkpoint and newest_checkpoint(run_dir) is None and sup.poll() is None:
            time.sleep(0.05)
        if before_the_kill is not None:
            before_the_kill()
        victims = _pids_with_env(str(run_dir), "1")
        assert victims, "process 1 of the job not found"
        os.kill(victims[0], signal.SIGKILL)
        _, err = sup.communicate(timeout=TIMEOUT_S)
    finally:
        if sup.poll() is None:
            sup.kill()
    assert sup.returncode == 0, err[-3000:]
    return err


@pytest.mark.slow  # by default tests/unit/cli/test_supervise.py's real runs and the SIGTERM resume above
@pytest.mark.skipif(not pathlib.Path("/proc/self/environ").exists(), reason="finds the job's processes in /proc")
@pytest.mark.timeout(600)
def test_the_supervisor_restarts_a_job_that_lost_a_process(two_by_two, tmp_path):
    """rljax supervise -- rljax launch ...: one process killed mid-run, the whole job restarts from
    the newest checkpoint and ends bit-identical to the uninterrupted run."""
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "rljax.cli.main", "supervise", "--backoff", "0.5", "--", sys.executable, "-m", "rljax.cli.main",
           "launch", "-n", "2", "-d", "2", "--peer-timeout", "30", "--", sys.executable, *PPO, "--run-dir", str(run_dir)]
    _supervise_killing_process_1(cmd, run_dir)
    attempts = [json.loads(line) for line in (run_dir / "supervisor.jsonl").read_text().splitlines()]
    attempts = [a for a in attempts if a.get("event") == "attempt"]
    assert len(attempts) == 2, attempts
    assert attempts[0]["exit_status"] not in (0, 75) and attempts[0]["action"] == "restart"
    assert attempts[1]["exit_status"] == 0 and "--resume" in attempts[1]["argv"]
    assert _rows(run_dir) == _rows(two_by_two)
    for a, b in zip(_final_checkpoint(run_dir), _final_checkpoint(two_by_two)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow  # by default tests/unit/cli/test_supervise.py (--shrink-after) and the elastic resume tests
@pytest.mark.skipif(not pathlib.Path("/proc/self/environ").exists(), reason="finds the job's processes in /proc")
@pytest.mark.timeout(600)
def test_the_supervisor_continues_a_job_on_the_hosts_left_after_one_is_lost_for_good(tmp_path):
    """rljax supervise --shrink-after 1 -- rljax launch -n 2 ...: process 1 is killed mid-run and
    then dies at every start (its host is gone); the job restarts once as it was, then continues as
    one process on the devices left, resuming elastically, and finishes the run."""
    run_dir, marker = tmp_path / "run", tmp_path / "host-1-lost"
    inner = [sys.executable, str(ROOT / "tests" / "support" / "lost_host.py"), str(marker), "experiments.ppo_cartpole",
             "--num-devices", "2", "--total-timesteps", "4096", "--updates-per-chunk", "2", "--checkpoint-every", "1",
             "--no-tensorboard", "--run-dir", str(run_dir)]
    cmd = [sys.executable, "-m", "rljax.cli.main", "supervise", "--backoff", "0.2", "--shrink-after", "1", "--",
           sys.executable, "-m", "rljax.cli.main", "launch", "-n", "2", "-d", "1", "--peer-timeout", "3", "--", *inner]
    err = _supervise_killing_process_1(cmd, run_dir, after_a_checkpoint=True, before_the_kill=marker.touch)
    records = [json.loads(line) for line in (run_dir / "supervisor.jsonl").read_text().splitlines()]
    assert [r.get("action", r["event"]) for r in records] == ["restart", "restart", "shrink", "done"], records
    assert records[2]["from_processes"] == 2 and records[2]["to_processes"] == 1
    final = records[3]["argv"]
    assert final[final.index("-n") + 1] == "1" and final[final.index("--num-devices") + 1] == "1"
    manifest = json.loads((run_dir / "manifest.json").read_text())
    layout = manifest["resumes"][-1]["layout"]
    assert (layout["from_num_devices"], layout["num_devices"]) == (2, 1), manifest["resumes"]
    rows = [json.loads(line) for line in (run_dir / "chunks.jsonl").read_text().splitlines()]
    assert rows[-1]["env_steps"] == 4096 and "continuing with 1 process" in err


@pytest.mark.slow  # by default tests/unit/cli/test_supervise.py (--grow-when with a fake launch) stands for it
@pytest.mark.skipif(not pathlib.Path("/proc/self/environ").exists(), reason="finds the job's processes in /proc")
@pytest.mark.timeout(600)
def test_a_job_that_lost_a_host_grows_back_when_it_returns(tmp_path):
    """rljax supervise --shrink-after 1 --grow-when CMD -- rljax launch -n 2 ...: process 1 is killed and its
    host stays lost, so the job shrinks to 1 process; once the host is back (CMD passes) the supervisor stops
    the job cleanly and it continues on 2 processes again, resuming elastically, and finishes the run there.
    (Long enough that the shrunk job is still training when the probe passes: at 16,384 steps a loaded
    machine let it finish first.)"""
    run_dir, marker = tmp_path / "run", tmp_path / "host-1-lost"
    inner = [sys.executable, str(ROOT / "tests" / "support" / "lost_host.py"), str(marker), "experiments.ppo_cartpole",
             "--num-devices", "2", "--total-timesteps", "32768", "--updates-per-chunk", "2", "--checkpoint-every", "1",
             "--no-tensorboard", "--run-dir", str(run_dir)]
    cmd = [sys.executable, "-m", "rljax.cli.main", "supervise", "--backoff", "0.2", "--shrink-after", "1",
           "--grow-when", f"test ! -e {marker}", "--grow-interval", "1", "--",
           sys.executable, "-m", "rljax.cli.main", "launch", "-n", "2", "-d", "1", "--peer-timeout", "3", "--", *inner]
    log = run_dir / "supervisor.jsonl"

    def lose_host_until_the_shrink():
        marker.touch()

        def back():  # the host returns once the job has shrunk
            deadline = time.monotonic() + TIMEOUT_S
            while time.monotonic() < deadline:
                if log.exists() and '"event": "shrink"' in log.read_text():
                    marker.unlink()
                    return
                time.sleep(0.1)
        threading.Thread(target=back, daemon=True).start()

    err = _supervise_killing_process_1(cmd, run_dir, after_a_checkpoint=True, before_the_kill=lose_host_until_the_shrink)
    records = [json.loads(line) for line in log.read_text().splitlines()]
    events = [r.get("action", r["event"]) for r in records]
    assert "shrink" in events and "grow" in events and events[-1] == "done", records
    grow = next(r for r in records if r["event"] == "grow")
    assert (grow["from_processes"], grow["to_processes"]) == (1, 2)
    final = records[-1]["argv"]
    assert final[final.index("-n") + 1] == "2" and final[final.index("--num-devices") + 1] == "2"
    rows = [json.loads(line) for line in (run_dir / "chunks.jsonl").read_text().splitlines()]
    assert rows[-1]["env_steps"] == 32768 and "continuing with 2 processes" in err


# The actor-learner path over 2 processes x 1 device: each process its own actor and 4 CartPoles, one
# learner spanning both (synchronous mode: lag 0, so a resume continues the envs bit for bit); 40
# updates of 2 x 4 x 16 env steps in chunks of 2, a checkpoint after each.
HOST = ["-m", "rljax.cli.main", "train", "ppo", "--env", "gymnasium/CartPole-v1", "--num-envs", "4", "--num-steps", "16",
        "--num-minibatches", "2", "--total-timesteps", "5120", "--max-policy-lag", "0", "--updates-per-chunk", "2",
        "--checkpoint-every", "1", "--no-tensorboard"]
HOST_KEYS = ("env_steps", "updates", "episodes", "episode_return_mean", "episode_length_mean", "policy_loss",
             "value_loss", "host/policy_lag")


@pytest.fixture(scope="module")
def host_two_processes(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, str]:
    """An uninterrupted host-env run over 2 processes (``HOST``): its directory and its output."""
    run_dir = tmp_path_factory.mktemp("host") / "whole"
    done = _launch([*HOST, "--run-dir", str(run_dir)], d=1)
    assert done.returncode == 0, done.stderr[-3000:]
    return run_dir, done.stdout


def _host_lines(run_dir: pathlib.Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


# Slow: by default the two-process equivalence above (a learner spanning processes) and
# tests/unit/actorlearner/test_devices.py (the host-env learner split over two devices) stand for it.
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_host_envs_over_two_processes_learn_as_one_job(host_two_processes):
    """Host envs (rljax.actorlearner) with a learner spanning two processes: each update learns from
    both processes' rollouts, the leader alone writes and speaks for the job."""
    run_dir, stdout = host_two_processes
    assert stdout.count("done: 5,120 env steps") == 1, stdout[-2000:]
    plan = json.loads((run_dir / "manifest.json").read_text())["plan"]
    assert plan["processes"] == 2 and plan["env_steps_per_update"] == 128 and plan["num_updates"] == 40
    lines = _host_lines(run_dir)
    assert [r["env_steps"] for r in lines] == [128 * (u + 1) for u in range(40)]
    # Both processes' episodes are counted: about twice what one process's 4 CartPoles end.
    assert sum(r["episodes"] for r in lines[:4]) > 12, [r["episodes"] for r in lines[:4]]
    assert not list(run_dir.glob("stall-*")) and (run_dir / "checkpoints").is_dir()


@pytest.mark.slow  # by default tests/unit/actorlearner/test_run.py's resume, _own_envs' unit test and test_devices.py
@pytest.mark.timeout(600)
def test_host_envs_over_two_processes_stop_together_and_resume_bit_exact(host_two_processes, tmp_path):
    """SIGTERM to the follower stops both processes after the same update with a checkpoint of every
    process's envs; the resumed run equals the uninterrupted one, params and rows, bit for bit."""
    whole, _ = host_two_processes
    run_dir = tmp_path / "run"
    procs = _start_processes([*HOST, "--run-dir", str(run_dir)], d=1)
    _wait_for_rows(run_dir, 1, procs)
    procs[1].send_signal(signal.SIGTERM)
    results = _finish(procs)
    assert [code for code, _ in results] == [75, 75], [err[-2000:] for _, err in results]
    assert 2 <= len(_host_lines(run_dir)) < 40, "the stop came after the last update; nothing to resume"
    resumed = _launch(["-m", "rljax.cli.main", "resume", str(run_dir)], d=1)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "the envs continue from their saved state" in resumed.stdout, resumed.stdout[-2000:]
    pick = lambda rows: [{k: r[k] for k in HOST_KEYS} for r in rows]  # noqa: E731
    assert pick(_host_lines(run_dir)) == pick(_host_lines(whole))
    for a, b in zip(_final_checkpoint(run_dir), _final_checkpoint(whole), strict=True):
        np.testing.assert_array_equal(a, b)
