"""``rljax status``, ``rljax stop`` and ``rljax inspect`` on a bench directory written by hand (no
training: ``bench.json``, each cell's ``sweep.json`` and ``status.json``, a ``scores.csv``, workers
registered by holding ``DIR/workers/<name>``'s run lock), and a bench's workers: a cell another live
process holds is left to it; a killed worker's entry is forgotten. (A bench killed mid-cell and
continued by the next worker, and two workers sharing a bench: tests/unit/bench/test_runner.py.)"""

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
from rljax.bench.runner import bench_status, run_bench, write_scores
from rljax.bench.spec import load_spec
from rljax.cli.main import main
from rljax.store.runlock import RunLock, read_holder
from rljax.store.status import write_status

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
    assert out[0] == f"bench {bench_dir}: 1 cell done, 1 running, 0 left; time left about 12 s"
    assert re.fullmatch(r"  ppo/CartPole-v1 +done +2,048/2,048 env steps per run, 20 s spent", out[1]), out[1]
    assert re.fullmatch(r"  dqn/CartPole-v1 +running +512/2,048 env steps per run, 4 s spent", out[2]), out[2]
    assert main(["status", str(bench_dir), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record == json.loads(json.dumps(bench_status(bench_dir)))
    assert (record["done"], record["running"], record["left"], record["eta_s"], record["workers"]) == (1, 1, 0, 12.0,
                                                                                                      [])
    (bench_dir / "bench.json").write_text("{")
    assert main(["status", str(bench_dir)]) == 2
    assert f"{bench_dir / 'bench.json'} is damaged (" in _one_line_error(capsys, "status")


def test_the_time_left_counts_the_other_cells_at_the_finished_cells_rate(bench_dir):
    _done(bench_dir, "ppo", wall=30.0)  # 30 s for 2,048 env steps: the dqn cell, not started, takes as long
    status = bench_status(bench_dir)
    assert (status["eta_s"], status["left"]) == (30.0, 1)
    assert status["cells"][1] == {"cell": "dqn/CartPole-v1", "state": "not started", "env_steps": 0,
                                  "total_env_steps": 2048, "wall_time_s": None, "eta_s": None}


def test_stop_on_a_bench_asks_each_worker_and_waits_until_none_is_left(bench_dir, capsys):
    assert main(["stop", str(bench_dir)]) == 2  # no worker: nothing to stop
    assert "nothing to stop: no process runs the bench (bench " in _one_line_error(capsys, "stop")
    cell = _running(bench_dir, "dqn")
    assert main(["stop", str(bench_dir)]) == 2  # a cell's status says running, but no worker runs it
    capsys.readouterr()
    with _held(bench_dir / "workers" / "w0") as first, _held(bench_dir / "workers" / "w1") as second:
        whose = [f"{socket.gethostname()}:{p.pid}" for p in (first, second)]
        assert main(["stop", str(bench_dir), "--wait", "0.4"]) == 1
        out, err = capsys.readouterr()
        assert f"asked bench {bench_dir} (its 2 workers ({', '.join(whose)})) to stop: its running cell " \
               "dqn/CartPole-v1 stops at the next chunk boundary (saved) and each worker exits with status 75" in out
        assert err == f"rljax stop: bench still running after 0.4 s (workers {', '.join(whose)}); the request stands\n"
        for name in ("w0", "w1"):  # each worker's own request; none in the bench's or the cell's directory
            assert (bench_dir / "workers" / name / "stop.request").exists()
        assert not (bench_dir / "stop.request").exists() and not (cell / "stop.request").exists()
        first.kill()  # the workers end (as stopped ones do); --wait returns once the last has
        threading.Timer(0.3, second.kill).start()
        assert main(["stop", str(bench_dir), "--wait", "60"]) == 0
    assert f"bench {bench_dir}: 0 cells done, 1 running, 1 left" in capsys.readouterr().out
    assert main(["stop", str(bench_dir), "--wait", "-1"]) == 2
    assert "--wait is the seconds to wait" in _one_line_error(capsys, "stop")


def test_stop_asks_a_worker_between_cells(bench_dir, capsys):
    with RunLock(bench_dir / "workers" / "w0"):  # this process, as a worker between two cells
        assert bench_status(bench_dir)["workers"] == [
            {"host": socket.gethostname(), "pid": os.getpid(), "started": read_holder(bench_dir / "workers" / "w0")[
                "started"]}]
        assert main(["status", str(bench_dir)]) == 0
        assert f"; run by {socket.gethostname()}:{os.getpid()}" in capsys.readouterr().out.splitlines()[0]
        assert main(["stop", str(bench_dir)]) == 0
        assert "it stops before its next cell" in capsys.readouterr().out
    assert (bench_dir / "workers" / "w0" / "stop.request").exists() and bench_status(bench_dir)["workers"] == []


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


def test_a_cell_a_live_process_holds_is_left_to_it_and_a_killed_workers_entry_is_forgotten(spec_path, tmp_path,
                                                                                             capsys):
    run_dir = tmp_path / "b"
    dead = run_dir / "workers" / "gone"
    with _held(dead):  # a worker killed earlier: its entry stays until the next worker starts
        pass
    assert dead.is_dir()
    with _held(run_dir / "cells" / "ppo" / "CartPole-v1") as holder:  # another worker, running the only cell
        assert run_bench(load_spec(spec_path), run_dir, tensorboard=False) == {}
        out = capsys.readouterr().out
        who = f"{socket.gethostname()}:{holder.pid}"
        assert f"bench: cell 1/1 ppo/CartPole-v1: run by {who}, left to it\n" in out
        assert out.endswith(f"bench: 1 cell is run by other workers (ppo/CartPole-v1 by {who}); the report covers "
                            "them once they finish\n")
    assert (run_dir / "bench.json").exists() and not (run_dir / "report.json").exists()
    assert os.listdir(run_dir / "workers") == []  # the dead worker's entry and this one's are gone
    assert bench_status(run_dir)["cells"][0]["state"] == "not started"
