"""``rljax status``, ``rljax stop`` and ``rljax inspect`` on a bench directory written by hand (no
training: ``bench.json``, each cell's ``sweep.json`` and ``status.json``, a ``scores.csv``), and the
bench directory's lock: a second bench on a directory a live process holds is refused with one line
naming it, before anything is written; a killed holder does not block the next bench. (A bench killed
mid-cell and run again, through the lock it left: tests/unit/bench/test_runner.py.)"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import threading

import pytest

from rljax.bench.report import write_report
from rljax.bench.runner import BenchStopped, bench_status, run_bench, write_scores
from rljax.bench.spec import load_spec
from rljax.cli.main import main
from rljax.store.runlock import RunLock, RunLockedError, RunLockWarning
from rljax.store.status import request_stop, write_status

from tests.conftest import cpu_subprocess_env
from tests.support.bench import SPEC

# Two cells, ppo/CartPole-v1 and dqn/CartPole-v1 (parsed, never trained here).
TWO_CELLS = SPEC.replace('[envs."CartPole-v1"]', '[algorithms.dqn]\n[envs."CartPole-v1"]')


@pytest.fixture
def spec_path(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(SPEC)
    return path


@pytest.fixture
def bench_dir(tmp_path):
    """A bench directory of TWO_CELLS, neither cell started."""
    path = tmp_path / "two.toml"
    path.write_text(TWO_CELLS)
    run_dir = tmp_path / "b"
    run_dir.mkdir()
    (run_dir / "bench.json").write_text(json.dumps(load_spec(path).to_dict()))
    return run_dir


def _cell(run_dir, algorithm, **status):
    """Writes a cell's ``sweep.json`` and ``status.json`` (from this process: alive)."""
    cell = run_dir / "cells" / algorithm / "CartPole-v1"
    cell.mkdir(parents=True, exist_ok=True)
    (cell / "sweep.json").write_text(json.dumps({"members": []}))
    write_status(cell, {"total_env_steps": 2048, "stall_after_s": 3600.0, **status})
    return cell


def _done(run_dir, algorithm, wall=20.0):
    return _cell(run_dir, algorithm, state="finished", env_steps=2048, wall_time_s=wall)


def _running(run_dir, algorithm):
    return _cell(run_dir, algorithm, state="running", env_steps=512, wall_time_s=4.0, eta_s=12.0)


def _one_line_error(capsys, command):
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"rljax {command}: error: "), err
    return err


def test_status_of_a_bench_prints_its_cells_and_time_left_or_json(bench_dir, capsys):
    _done(bench_dir, "ppo")
    _running(bench_dir, "dqn")
    assert main(["status", str(bench_dir)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"bench {bench_dir}: 1 cells done, 1 running, 0 left; time left about 12 s"
    assert re.fullmatch(r"  ppo/CartPole-v1 +done +2,048/2,048 env steps per run, 20 s spent", out[1]), out[1]
    assert re.fullmatch(r"  dqn/CartPole-v1 +running +512/2,048 env steps per run, 4 s spent", out[2]), out[2]
    assert main(["status", str(bench_dir), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record == json.loads(json.dumps(bench_status(bench_dir)))
    assert (record["done"], record["running"], record["left"], record["eta_s"], record["holder"]) == (1, 1, 0, 12.0,
                                                                                                     None)
    (bench_dir / "bench.json").write_text("{")
    assert main(["status", str(bench_dir)]) == 2
    assert f"{bench_dir / 'bench.json'} is damaged (" in _one_line_error(capsys, "status")


def test_the_time_left_counts_the_other_cells_at_the_finished_cells_rate(bench_dir):
    _done(bench_dir, "ppo", wall=30.0)  # 30 s for 2,048 env steps: the dqn cell, not started, takes as long
    status = bench_status(bench_dir)
    assert (status["eta_s"], status["left"]) == (30.0, 1)
    assert status["cells"][1] == {"cell": "dqn/CartPole-v1", "state": "not started", "env_steps": 0,
                                  "total_env_steps": 2048, "wall_time_s": None, "eta_s": None}


def test_stop_on_a_bench_asks_it_to_stop_and_waits_until_no_cell_runs(bench_dir, capsys):
    assert main(["stop", str(bench_dir)]) == 2  # no cell running, nothing holds it
    assert "nothing to stop: no cell of the bench is running and no process here runs it (bench " in \
        _one_line_error(capsys, "stop")
    assert not (bench_dir / "stop.request").exists()
    cell = _running(bench_dir, "dqn")
    assert main(["stop", str(bench_dir), "--wait", "0.4"]) == 1
    out, err = capsys.readouterr()
    assert f"asked bench {bench_dir} to stop: its running cell dqn/CartPole-v1 stops at its next chunk" in out
    assert err == "rljax stop: bench still running after 0.4 s (cell dqn/CartPole-v1); the request stands\n"
    assert (bench_dir / "stop.request").exists() and not (cell / "stop.request").exists()  # the bench's, not the cell's
    stopper = threading.Timer(0.3, write_status, (cell, {"state": "preempted", "env_steps": 768,
                                                         "total_env_steps": 2048, "wall_time_s": 5.0}))
    stopper.start()
    try:
        assert main(["stop", str(bench_dir), "--wait", "60"]) == 0
    finally:
        stopper.join()
    assert f"bench {bench_dir}: 0 cells done, 0 running, 2 left" in capsys.readouterr().out
    assert main(["stop", str(bench_dir), "--wait", "-1"]) == 2
    assert "--wait is the seconds to wait" in _one_line_error(capsys, "stop")


def test_stop_asks_a_bench_between_cells_whose_process_holds_its_directory(bench_dir, capsys):
    with RunLock(bench_dir):  # this process, as a bench between two cells
        assert bench_status(bench_dir)["holder"]["alive"] is True
        assert main(["status", str(bench_dir)]) == 0
        assert f"; run by {socket.gethostname()}:{os.getpid()}" in capsys.readouterr().out.splitlines()[0]
        assert main(["stop", str(bench_dir)]) == 0
        assert "it stops before its next cell" in capsys.readouterr().out
    assert (bench_dir / "stop.request").exists() and bench_status(bench_dir)["holder"] is None


def test_inspect_prints_a_benchs_report_and_names_its_plots(bench_dir, tmp_path, capsys):
    assert main(["inspect", str(bench_dir)]) == 2
    assert f"bench {bench_dir} has no report yet: no cell has finished (0 of 2 cells done, 0 running)" in \
        _one_line_error(capsys, "inspect")
    _done(bench_dir, "ppo")
    _done(bench_dir, "dqn")
    ranks = {(a, s): s + 1 + (a == "ppo") for a in ("ppo", "dqn") for s in range(3)}  # ppo a bit better
    write_scores(bench_dir, [{"algorithm": a, "env": "CartPole-v1", "seed": s, "score": 100.0 * r,
                              "normalized_score": 0.2 * r} for (a, s), r in ranks.items()])
    write_report(bench_dir)
    (bench_dir / "plots").mkdir()
    for name in ("performance_profile.png", "env_CartPole-v1.png"):
        (bench_dir / "plots" / name).write_bytes(b"")
    assert main(["inspect", str(bench_dir)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"bench {bench_dir}: 2 cells done, 0 running, 0 left; time left about 0 s; the report "
                          "covers every cell\n\n# Bench report\n")
    for text in ("| algorithm | envs | runs | IQM | mean | median | optimality gap |", "| ppo | 1 | 3 | ",
                 "| X | Y | P(X > Y) | envs |", "| ppo | dqn | "):
        assert text in out, text
    plots = bench_dir / "plots"
    assert out.endswith(f"\nplots: {plots / 'env_CartPole-v1.png'}, {plots / 'performance_profile.png'}\n")
    assert main(["inspect", str(bench_dir), "--no-plots"]) == 0 and "plots:" not in capsys.readouterr().out
    assert not (bench_dir / "inspect").exists()  # nothing drawn
    for argv, words in ((["--out", "x"], "--out x: a bench draws its plots into"),
                        (["--smooth", "3"], "--smooth 3: a bench's plots are not smoothed"),
                        ([str(tmp_path)], f"{bench_dir} is a bench directory: compare runs and sweeps")):
        assert main(["inspect", str(bench_dir), *argv]) == 2
        assert words in _one_line_error(capsys, "inspect")


# Holds a directory's run lock until its stdin closes (or it is killed).
HOLD = ("import sys; from rljax.store.runlock import RunLock; RunLock(sys.argv[1]).acquire(); "
        "print('held', flush=True); sys.stdin.read()")


@contextlib.contextmanager
def _held(run_dir):
    """Another live process holding ``run_dir``'s lock, killed (SIGKILL) on exit."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=cpu_subprocess_env())
    try:
        assert proc.stdout.readline() == "held\n"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_a_bench_directory_held_by_a_live_process_is_refused_and_a_killed_holder_does_not_block(spec_path, tmp_path,
                                                                                                capsys):
    run_dir = tmp_path / "b"
    with _held(run_dir) as holder:
        who = f"{socket.gethostname()}:{holder.pid}"
        with pytest.raises(RunLockedError) as refused:
            run_bench(load_spec(spec_path), run_dir, quiet=True)
        message = str(refused.value)
        assert message.startswith(f"bench directory '{run_dir}' is in use by {who} (started ") and "\n" not in message
        assert f"`rljax stop {run_dir}`" in message
        assert main(["bench", str(spec_path), "--run-dir", str(run_dir), "--quiet", "--no-compile-cache"]) == 2
        assert _one_line_error(capsys, "bench") == f"rljax bench: error: {message}\n"
        assert os.listdir(run_dir) == [".lock"]  # refused before anything was written
    request_stop(run_dir)  # the next bench gets past the lock, writes its spec and stops before its first cell
    with pytest.warns(RunLockWarning, match=f"left by {who}, .*: that process is gone"):
        with pytest.raises(BenchStopped, match="stopped on request before cell ppo/CartPole-v1"):
            run_bench(load_spec(spec_path), run_dir, quiet=True)
    assert (run_dir / "bench.json").exists() and bench_status(run_dir)["holder"] is None
