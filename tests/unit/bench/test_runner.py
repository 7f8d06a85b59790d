"""rljax.bench.runner: one tiny bench (PPO on CartPole, 2 seeds, 2048 env steps) shared by the tests;
a bench killed with SIGKILL mid-cell and run again gives the same scores.csv and report.json; two
workers running one bench at once share its cells."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from rljax.bench.plots import read_curves
from rljax.bench.report import compute_report, read_scores
from rljax.bench.runner import (bench_status, bench_workers, cell_dir, cell_state, random_score, request_bench_stop,
                                run_bench, run_score, status_text)
from rljax.bench.spec import SpecError, load_spec, narrow
from rljax.store.runlock import RunLockWarning, read_holder
from tests.unit.bench.test_bench_dir import TWO_CELLS
from rljax.store.tracking import read_chunks

from tests.conftest import cpu_subprocess_env
from tests.support.bench import SPEC


# A bench run in a subprocess that SIGKILLs itself after its cell's chunk KILL_AT (the cell checkpoints
# every chunk, so the kill lands between a checkpoint and the end of the sweep).
KILLED = """
import os, signal, sys
from rljax.bench.runner import run_bench
from rljax.bench.spec import load_spec
kill_at = int(sys.argv[3])
def kill(index, state, row):
    if index + 1 >= kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
run_bench(load_spec(sys.argv[1]), sys.argv[2], quiet=True, tensorboard=False, on_chunk=kill)
"""


@pytest.fixture(scope="module")
def spec_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("spec") / "tiny.toml"
    path.write_text(SPEC)
    return path


@pytest.fixture(scope="module")
def bench(spec_path, tmp_path_factory):
    """An uninterrupted bench: its directory and the report run_bench returned."""
    run_dir = tmp_path_factory.mktemp("bench") / "b"
    return run_dir, run_bench(load_spec(spec_path), run_dir, quiet=True, tensorboard=False)


def test_a_bench_writes_its_spec_its_cells_sweep_and_one_score_row_per_run(bench, spec_path):
    run_dir, report = bench
    spec = load_spec(spec_path)
    assert json.loads((run_dir / "bench.json").read_text()) == spec.to_dict()
    cell = cell_dir(run_dir, spec.cells()[0])
    assert cell == run_dir / "cells" / "ppo" / "CartPole-v1" and cell_state(cell) == "done"
    rows = read_scores(run_dir / "scores.csv")
    assert [(r["algorithm"], r["env"], r["seed"]) for r in rows] == [("ppo", "CartPole-v1", 0),
                                                                     ("ppo", "CartPole-v1", 1)]
    random = json.loads((run_dir / "random_scores.json").read_text())["CartPole-v1"]["score"]
    for r in rows:  # normalised = (score - random) / (reference - random)
        assert r["normalized_score"] == pytest.approx((r["score"] - random) / (500.0 - random))
    assert json.loads((run_dir / "report.json").read_text()) == report == compute_report(rows)
    assert "the env's maximum return" in (run_dir / "report.md").read_text()
    curves = read_curves(run_dir / "curves.csv")
    for r in rows:  # a run's curve ends at its whole budget; its score is the mean of its last 2 evaluations
        mine = [c for c in curves if c["seed"] == r["seed"]]
        assert mine[-1]["fraction"] == 1.0 and len(mine) >= 2
        assert r["score"] == pytest.approx((mine[-1]["score"] + mine[-2]["score"]) / 2)
    assert sorted(p.name for p in (run_dir / "plots").iterdir()) == [
        "env_CartPole-v1.png", "performance_profile.png", "sample_efficiency.png"]


def test_a_runs_score_is_the_mean_of_its_last_evaluations(bench):
    rows = [{"env_steps": 1}, {"eval/return_mean": 10.0}, {"eval/return_mean": 20.0}, {"x": 1},
            {"eval/return_mean": 40.0}]
    assert run_score(rows, 2) == 30.0 and run_score(rows, 5) == pytest.approx(70 / 3)
    with pytest.raises(ValueError, match="never evaluated"):
        run_score([{"env_steps": 1}], 2)


def test_the_random_score_is_measured_once_and_repeatable(bench):
    run_dir, _ = bench
    saved = json.loads((run_dir / "random_scores.json").read_text())["CartPole-v1"]
    assert saved["episodes"] == 20 and 8.0 < saved["score"] < 60.0  # CartPole's random episodes last ~22 steps
    assert random_score("CartPole-v1", {}, 20) == saved["score"]


def test_a_games_random_score_is_the_random_player_against_itself():
    score = random_score("TicTacToe-v0", {}, 400)
    assert -0.2 < score < 0.2 and score == random_score("TicTacToe-v0", {}, 400)  # each seat half the time: 0 expected


def test_a_multi_agent_envs_random_score_is_the_teams_with_every_agent_acting():
    """The team's return with each agent drawing its own legal action (it once stepped the env with one
    action for all agents and crashed). MPE simple_spread: about -83 a team over its 26 steps."""
    pytest.importorskip("jaxmarl")
    score = random_score("jaxmarl/MPE_simple_spread_v3", {}, 200)
    assert -95.0 < score < -70.0 and score == random_score("jaxmarl/MPE_simple_spread_v3", {}, 200)


def test_a_finished_bench_run_again_trains_nothing_and_keeps_its_results(bench, spec_path):
    run_dir, report = bench
    metrics = cell_dir(run_dir, load_spec(spec_path).cells()[0]) / "members" / "000-base-s0" / "metrics.jsonl"
    before = (metrics.stat().st_mtime_ns, (run_dir / "scores.csv").read_text())
    assert run_bench(load_spec(spec_path), run_dir, quiet=True, tensorboard=False) == report
    assert (metrics.stat().st_mtime_ns, (run_dir / "scores.csv").read_text()) == before


def test_a_directory_holding_another_spec_is_refused_naming_what_differs(bench, spec_path):
    run_dir, _ = bench
    with pytest.raises(SpecError, match="holds a bench with another spec \\(seeds: 2 -> 3\\)"):
        run_bench(narrow(load_spec(spec_path), seeds=3), run_dir, quiet=True)


def test_a_spec_whose_text_alone_changed_continues_the_bench_with_the_new_text(bench, spec_path, capsys):
    # A corrected citation or description is the same experiment: nothing reruns, bench.json and the
    # report take the new text. A change in what runs beside it is still refused (above).
    import dataclasses

    run_dir, report = bench
    spec = load_spec(spec_path)
    env = dataclasses.replace(spec.envs[0], citation="corrected: " + spec.envs[0].citation)
    fixed = dataclasses.replace(spec, envs=(env, *spec.envs[1:]), description="a new description")
    saved = (run_dir / "bench.json").read_text()
    try:
        assert run_bench(fixed, run_dir, quiet=True, tensorboard=False) == report
        assert json.loads((run_dir / "bench.json").read_text()) == fixed.to_dict()
        assert "the spec's text changed (description, envs." in capsys.readouterr().err
        assert "corrected: " in (run_dir / "report.md").read_text()
    finally:
        (run_dir / "bench.json").write_text(saved)  # the module's bench stays the spec file's


def _killed(spec_path, run_dir, kill_at):
    done = subprocess.run([sys.executable, "-c", KILLED, str(spec_path), str(run_dir), str(kill_at)],
                          env=cpu_subprocess_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]


def _assert_same_results(run_dir, reference_dir):
    for name in ("scores.csv", "report.json", "curves.csv"):
        assert (run_dir / name).read_text() == (reference_dir / name).read_text(), name


def _walls(cell):
    """``{env steps: wall_time_s}`` of member 0's chunk rows in a cell's sweep."""
    return {r["env_steps"]: r["wall_time_s"] for r in read_chunks(cell / "members" / "000-base-s0")}


def test_a_bench_killed_mid_cell_and_run_again_gives_the_uninterrupted_results(bench, spec_path, tmp_path):
    reference_dir, _ = bench
    run_dir = tmp_path / "b"
    _killed(spec_path, run_dir, kill_at=4)
    cell = cell_dir(run_dir, load_spec(spec_path).cells()[0])
    assert cell_state(cell) == "partial" and not (run_dir / "scores.csv").exists()
    # The killed worker held the cell: its lock record stays, but a dead process holds nothing.
    assert read_holder(cell)["pid"] != os.getpid() and bench_workers(run_dir) == []
    status = bench_status(run_dir)  # killed: its process is gone, so the cell is stopped, not running
    assert (status["done"], status["running"], status["left"], status["eta_s"], status["workers"]) == (
        0, 0, 1, None, [])
    assert status["cells"][0]["state"] == "stopped" and 0 < status["cells"][0]["env_steps"] < 2048
    killed = _walls(cell)
    start = time.perf_counter()
    with pytest.warns(RunLockWarning, match=re.escape(f"taking over a stale lock on run directory '{cell}'")):
        run_bench(load_spec(spec_path), run_dir, quiet=True, tensorboard=False, plots=False)
    took = time.perf_counter() - start
    _assert_same_results(run_dir, reference_dir)
    # The cell's time counts both sessions: the killed one's up to the checkpoint the rerun resumed
    # from (the rows before it are the killed session's) and the rerun's, so more than the rerun took.
    walls = _walls(cell)
    kept = max(steps for steps, wall in killed.items() if walls.get(steps) == wall)
    spent = bench_status(run_dir)["cells"][0]["wall_time_s"]
    assert spent == walls[2048] and killed[kept] < spent and spent - killed[kept] <= took
    assert spent > took


# The default suite's test_a_bench_killed_mid_cell_and_run_again_gives_the_uninterrupted_results stands
# for this: the same, killed twice (at different chunks) before the run that finishes it.
@pytest.mark.slow
def test_a_bench_killed_twice_mid_cell_gives_the_uninterrupted_results(bench, spec_path, tmp_path):
    reference_dir, _ = bench
    run_dir = tmp_path / "b"
    _killed(spec_path, run_dir, kill_at=3)
    _killed(spec_path, run_dir, kill_at=2)
    run_bench(load_spec(spec_path), run_dir, quiet=True, tensorboard=False)
    _assert_same_results(run_dir, reference_dir)
    assert os.path.exists(run_dir / "report.md")


def test_the_status_of_a_finished_bench_counts_its_cells_and_has_no_time_left(bench, spec_path, tmp_path):
    run_dir, _ = bench
    status = bench_status(run_dir)
    assert (status["done"], status["running"], status["left"], status["eta_s"], status["workers"]) == (1, 0, 0, 0, [])
    swept = json.loads((cell_dir(run_dir, load_spec(spec_path).cells()[0]) / "status.json").read_text())
    assert status["cells"][0].pop("wall_time_s") == swept["wall_time_s"] > 0  # the seconds its sweep ran
    assert status["cells"] == [{"cell": "ppo/CartPole-v1", "state": "done", "env_steps": 2048,
                                "total_env_steps": 2048, "eta_s": None}]
    assert "1 cell done, 0 running, 0 left" in status_text(status)
    with pytest.raises(FileNotFoundError, match="not a bench directory"):
        bench_status(tmp_path)


def test_status_and_inspect_on_the_bench_directory(bench, capsys):
    from rljax.cli.main import main

    run_dir, _ = bench
    assert main(["status", str(run_dir), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cells"][0]["state"] == "done"
    assert main(["inspect", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"bench {run_dir}: 1 cell done, 0 running, 0 left; time left about 0 s; the report covers "
                          f"every cell\n\n{(run_dir / 'report.md').read_text()}")
    plots = run_dir / "plots"
    assert out.endswith(f"plots: {plots / 'env_CartPole-v1.png'}, {plots / 'performance_profile.png'}, "
                        f"{plots / 'sample_efficiency.png'}\n")


# Slow: by default test_a_bench_killed_mid_cell_and_run_again_gives_the_uninterrupted_results (a cell cut mid-way
# continues) and tests/unit/bench/test_bench_dir.py's stop tests (each worker asked) stand for it.
@pytest.mark.slow
def test_a_stop_request_stops_the_workers_cell_or_its_next_one_and_the_bench_continues(bench, spec_path, tmp_path):
    from rljax.bench.runner import BenchStopped

    reference_dir, _ = bench
    run_dir = tmp_path / "b"

    def request_at_chunk_2(index, state, row):  # as `rljax stop DIR` would, while the cell runs
        if index == 1:
            assert len(request_bench_stop(run_dir)) == 1

    with pytest.raises(BenchStopped, match="cell ppo/CartPole-v1 stopped before it finished"):
        run_bench(load_spec(spec_path), run_dir, quiet=True, tensorboard=False, on_chunk=request_at_chunk_2)
    assert bench_status(run_dir)["cells"][0]["state"] == "stopped" and os.listdir(run_dir / "workers") == []
    run_bench(load_spec(spec_path), run_dir, quiet=True, tensorboard=False)  # not asked: it finishes the cell
    _assert_same_results(run_dir, reference_dir)

    two = tmp_path / "two.toml"
    two.write_text(TWO_CELLS)
    run_dir = tmp_path / "b2"

    def request_at_the_last_chunk(index, state, row):  # the cell finishes; the worker stops before the next
        if row["env_steps"] >= 2048:
            request_bench_stop(run_dir)

    with pytest.raises(BenchStopped, match="stopped on request before cell dqn/CartPole-v1"):
        run_bench(load_spec(two), run_dir, quiet=True, tensorboard=False, on_chunk=request_at_the_last_chunk)
    assert [c["state"] for c in bench_status(run_dir)["cells"]] == ["done", "not started"]
    assert (run_dir / "scores.csv").read_text() == (reference_dir / "scores.csv").read_text()


# Slow: by default tests/unit/bench/test_bench_dir.py's
# test_a_cell_a_live_process_holds_is_left_to_it_and_a_killed_workers_entry_is_forgotten stands for it.
@pytest.mark.slow
def test_two_workers_started_together_share_the_cells_of_one_bench(bench, tmp_path):
    reference_dir, _ = bench
    spec = tmp_path / "two.toml"
    spec.write_text(TWO_CELLS)
    run_dir = tmp_path / "b"
    done = subprocess.run([sys.executable, "-m", "rljax.cli.main", "launch", "-n", "2", "--", sys.executable, "-m",
                           "rljax.cli.main", "bench", str(spec), "--run-dir", str(run_dir), "--no-tensorboard"],
                          env=cpu_subprocess_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    # Each cell was run by one worker. The first cell was left to the worker that took it by the other
    # (which waited for the first to measure the random score, and got there while it ran).
    for cell in ("ppo/CartPole-v1", "dqn/CartPole-v1"):
        assert len(re.findall(f"cell ./2 {cell}: not started, running", done.stdout)) == 1, done.stdout
    assert re.search("cell 1/2 ppo/CartPole-v1: run by .*, left to it", done.stdout), done.stdout
    status = bench_status(run_dir)
    assert (status["done"], status["workers"]) == (2, [])
    rows = read_scores(run_dir / "scores.csv")  # the last worker's results cover both cells
    assert [(r["algorithm"], r["seed"]) for r in rows] == [("ppo", 0), ("ppo", 1), ("dqn", 0), ("dqn", 1)]
    ppo = (reference_dir / "scores.csv").read_text().splitlines()
    assert (run_dir / "scores.csv").read_text().splitlines()[:3] == ppo
