"""``rljax stop`` (:mod:`rljax.cli.stop`): a run driven from start to stop and resume with the
commands alone (``rljax status --json``, ``rljax stop --wait``, ``rljax resume``), exit status 75 and a
bit-exact continuation; ``--wait`` on a faked running run (status 1 when it is still running when the
time is up, 0 when it stops in time); and what it refuses (a run that is not running, a bad ``--wait``).
(On a bench directory: tests/unit/bench/test_bench_dir.py.)"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from rljax.cli.main import main

ROOT = pathlib.Path(__file__).resolve().parents[3]
# 24 chunks of one small PPO update each, paced by a checkpoint after every chunk. --no-compile-cache: the
# suite's compile cache (JAX_COMPILATION_CACHE_DIR, tests/conftest.py), which every process here shares, not
# the user's (~/.cache/rljax/xla).
TRAIN = ["-m", "experiments.ppo_cartpole", "--num-envs", "8", "--num-steps", "16", "--hidden-sizes", "16",
         "--num-epochs", "1", "--updates-per-chunk", "1", "--total-timesteps", str(24 * 128),
         "--checkpoint-every", "1", "--no-tensorboard", "--quiet", "--no-compile-cache"]


def _rljax(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rljax.cli.main", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})


def _final(run: pathlib.Path) -> list[np.ndarray]:
    from rljax.store.checkpoint import Checkpointer

    ckpt = Checkpointer(run, read_only=True)
    try:
        return ckpt.read(max(ckpt.steps()))[0]
    finally:
        ckpt.close()


def _status_json(run: pathlib.Path, capsys) -> dict:
    """``rljax status RUN --json`` run in this process (a poll costs no interpreter start); ``state`` "?" while
    RUN does not exist yet (status 2, nothing printed)."""
    capsys.readouterr()
    main(["status", str(run), "--json"])
    return json.loads(capsys.readouterr().out or '{"state": "?"}')


@pytest.mark.timeout(600)
def test_status_and_stop_drive_a_run_to_exit_75_and_resume_continues_bit_exactly(tmp_path, capsys):
    from experiments import ppo_cartpole

    run, ref = tmp_path / "run", tmp_path / "ref"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, *TRAIN, "--run-dir", str(run)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while True:  # until the run has finished a chunk
            status = _status_json(run, capsys)
            if status.get("state") == "running" and status.get("chunks_done", 0) >= 1:
                break
            assert proc.poll() is None and time.monotonic() < deadline, (status, proc.poll())
            time.sleep(0.2)
        stop = _rljax("stop", str(run), "--wait", "120")
        assert stop.returncode == 0, stop.stderr
        assert "asked" in stop.stdout and ": preempted by rljax stop" in stop.stdout
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 75, err[-2000:]
    status = json.loads(_rljax("status", str(run), "--json").stdout)
    assert status["state"] == "preempted" and status["env_steps"] < status["total_env_steps"]
    assert status["last_checkpoint_env_steps"] == status["env_steps"]  # the stop saved its chunk
    assert _rljax("stop", str(run)).returncode == 2  # nothing to stop now
    resumed = _rljax("resume", str(run), "--quiet", "--no-compile-cache")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads(_rljax("status", str(run), "--json").stdout)["state"] == "finished"
    # The uninterrupted run: the same command in this process, saving at its end only (the pacing above was for
    # the stop; the state does not depend on it).
    assert ppo_cartpole.main([*TRAIN[2:], "--checkpoint-every", "1000", "--run-dir", str(ref)]) == 0
    assert all(a.dtype == b.dtype and np.array_equal(a, b) for a, b in zip(_final(run), _final(ref)))


def test_stop_refuses_a_run_that_is_not_running(tmp_path, capsys):
    assert main(["stop", str(tmp_path)]) == 2
    assert "nothing to stop: " in capsys.readouterr().err and not (tmp_path / "stop.request").exists()


def _fake_running(run_dir: pathlib.Path) -> None:
    """A ``status.json`` of a run this test process holds: ``running``, and not stalled for an hour."""
    from rljax.store.status import write_status

    write_status(run_dir, {"state": "running", "stall_after_s": 3600.0, "env_steps": 128, "total_env_steps": 3072})


def test_wait_ends_with_status_1_while_the_run_is_still_running(tmp_path, capsys):
    _fake_running(tmp_path)
    start = time.monotonic()
    assert main(["stop", str(tmp_path), "--wait", "0.4"]) == 1
    assert 0.4 <= time.monotonic() - start < 10
    out, err = capsys.readouterr()
    assert "asked" in out and "still running after 0.4 s; the request stands" in err
    assert (tmp_path / "stop.request").exists()  # the request stands for the run to take


def test_wait_ends_with_status_0_when_the_run_stops_in_time(tmp_path, capsys):
    from rljax.store.status import write_status

    _fake_running(tmp_path)
    stopper = threading.Timer(0.3, write_status, (tmp_path, {"state": "preempted", "reason": "preempted by rljax stop",
                                                           "env_steps": 256, "total_env_steps": 3072}))
    stopper.start()
    try:
        assert main(["stop", str(tmp_path), "--wait", "60"]) == 0
    finally:
        stopper.join()
    assert "preempted" in capsys.readouterr().out


@pytest.mark.parametrize("wait", ["-1", "nan"])
def test_a_bad_wait_is_refused_before_asking(tmp_path, capsys, wait):
    _fake_running(tmp_path)
    assert main(["stop", str(tmp_path), "--wait", wait]) == 2
    assert f"--wait is the seconds to wait for the run to stop, >= 0 (0: ask and return, inf: until it stops); got " \
           f"{float(wait):g}" in capsys.readouterr().err
    assert not (tmp_path / "stop.request").exists()
