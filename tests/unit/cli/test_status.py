"""``rljax status`` (:mod:`rljax.cli.status`): the line a person reads for each state, ``--json`` for
tools, and a directory that is not one. (Driving a live run with it: tests/unit/cli/test_stop.py; on a
bench directory: tests/unit/bench/test_bench_dir.py.)"""

from __future__ import annotations

import json

from rljax.cli.main import main
from rljax.cli.status import status_line
from rljax.store.status import write_status

BASE = {"run_dir": "runs/a", "env_steps": 1000, "total_env_steps": 4000, "sps": 2000.0, "eta_s": 90.0,
        "last_checkpoint_env_steps": 500, "host": "h", "pid": 7, "age_s": 3.0, "stall_after_s": 60.0}


def test_the_line_of_each_state():
    assert status_line({**BASE, "state": "running"}) == (
        "runs/a: running; 1,000 / 4,000 env steps (25 %); 2,000 steps/s, ETA 1m30s; last checkpoint at 500 env "
        "steps; h:7, written 0m03s ago")
    assert status_line({**BASE, "state": "stalled"}).startswith("runs/a: stalled (no chunk for longer than 60 s); ")
    assert status_line({**BASE, "state": "preempted", "stopped_by": "SIGTERM"}).startswith(
        "runs/a: preempted by SIGTERM: resume with `rljax resume runs/a`; 1,000 / 4,000 env steps (25 %); last")
    assert "no checkpoint yet" in status_line({**BASE, "state": "failed", "last_checkpoint_env_steps": None})
    assert status_line({"state": "not started", "run_dir": "runs/b"}).startswith("runs/b: not started")
    # While it runs, the line says what it is doing; once it has ended, only that it ended.
    assert status_line({**BASE, "state": "running", "phase": "compiling"}).startswith("runs/a: running (compiling); ")
    assert status_line({**BASE, "state": "stalled", "phase": "training"}).startswith(
        "runs/a: stalled while training (no chunk for longer than 60 s); ")
    assert status_line({**BASE, "state": "finished", "phase": "ended"}).startswith("runs/a: finished; 1,000 / 4,000")


def test_a_finished_run_is_not_said_to_be_training(tmp_path, capsys):
    """Regression: `rljax status --json` of a finished run said "phase": "training", the last phase
    the run wrote before it ended."""
    write_status(tmp_path, {**BASE, "state": "finished", "phase": "training", "run_dir": str(tmp_path),
                            "env_steps": 4000})
    assert main(["status", str(tmp_path), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert (record["state"], record["phase"]) == ("finished", "ended")
    assert main(["status", str(tmp_path)]) == 0
    line = capsys.readouterr().out
    assert line.startswith(f"{tmp_path}: finished; 4,000 / 4,000 env steps (100 %)") and "training" not in line


def test_the_command_prints_a_line_or_json(tmp_path, capsys):
    write_status(tmp_path, {**BASE, "state": "running", "run_dir": str(tmp_path)})
    assert main(["status", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith(f"{tmp_path}: running; 1,000 / 4,000 env steps")
    assert main(["status", str(tmp_path), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["state"] == "running" and record["env_steps"] == 1000 and record["age_s"] >= 0
    assert main(["status", str(tmp_path / "nope")]) == 2
    assert "is not a directory" in capsys.readouterr().err
    (tmp_path / "status.json").write_text("{")
    assert main(["status", str(tmp_path)]) == 2 and "not valid JSON" in capsys.readouterr().err
