"""``rljax inspect`` (:mod:`rljax.cli.inspect`) on a run directory written by hand: the summary's
progress and score lines, the plots, and a directory that holds no run."""

from __future__ import annotations

import json

import pytest

from rljax.cli.inspect import summary_text, write_plots
from rljax.cli.rundata import NotARunError
from rljax.cli.main import main


@pytest.fixture
def run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    # 2 updates of 100 env steps each, one update a chunk: the plan reaches 200 env steps.
    (run / "config.json").write_text(json.dumps({"env": "CartPole-v1", "seed": 4, "total_timesteps": 200}))
    (run / "manifest.json").write_text(json.dumps({"algorithm": "PPOConfig", "backend": "cpu", "plan": {
        "env_steps_per_update": 100, "updates_per_chunk": 1}}))
    rows = [{"env_steps": 100, "wall_time_s": 1.0, "sps": 100.0, "episode_return_mean": 10.0, "policy_loss": 0.5},
            {"env_steps": 200, "wall_time_s": 2.5, "sps": 300.0, "episode_return_mean": 30.0, "policy_loss": 0.25}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_the_summary_of_a_run(run):
    lines = summary_text(run).splitlines()
    assert lines[0].startswith(f"run {run}: PPO on CartPole-v1, seed 4, started ") and lines[0].endswith("cpu backend")
    assert lines[1] == "progress: 200 / 200 env steps (100 %, finished), 2 chunks logged, 2.5 s of run time"
    # latest 30 at 200, best 30 at 200, final = the mean of the last 2 chunks' returns: (10 + 30) / 2.
    assert lines[2].endswith("latest 30.00 at 200, best 30.00 at 200, final (mean of the last 2 chunks) 20.00")
    assert "steps/s: median 200; first third of the chunks 100, last third 300 (+200 %); min 100, max 300" in lines
    assert "checkpoints: 0 kept" in lines and "resumes: none" in lines and "stall reports: none" in lines


def test_inspect_prints_the_summary_and_writes_the_plots(run, tmp_path, capsys):
    assert main(["inspect", str(run), "--no-plots"]) == 0
    assert capsys.readouterr().out.startswith(f"run {run}: PPO")
    assert not (run / "inspect").exists()
    paths = write_plots(run, tmp_path / "plots")
    assert sorted(p.name for p in paths) == ["losses.png", "returns.png", "throughput.png"]
    assert all(p.stat().st_size > 0 for p in paths)


def test_a_directory_without_a_run_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(NotARunError, match="is not a run directory: a run holds metrics.jsonl"):
        summary_text(tmp_path)
    assert main(["inspect", str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err == f"rljax inspect: error: {tmp_path / 'missing'} is not a directory\n"


def test_the_configs_plot_says_what_it_draws_and_counts_seeds_in_english():
    # Its y-label ran off both ends of the figure and spoke of "greedy eval: dots" with nothing evaluated;
    # a PBT legend said "(1 seeds)".
    from rljax.cli.inspect import configs_plot_title, seeds_text

    assert (seeds_text(1), seeds_text(4)) == ("1 seed", "4 seeds")
    assert configs_plot_title(False) == "training return: lines, mean ± std over seeds"
    assert configs_plot_title(True).endswith("; greedy evaluation: dots") and len(configs_plot_title(True)) < 80


def test_a_host_runs_actors_and_learner_in_one_line():
    from rljax.cli.inspect import _host_lines

    def row(lag, depth, p50, p99, slowest, restarts):
        return {"host/policy_lag": lag, "host/queue_depth": depth, "host/actor_busy": 0.5, "host/learner_busy": 0.25,
                "host/env_step_p50_ms": p50, "host/env_step_p99_ms": p99, "host/slowest_actor": slowest,
                "host/env_restarts": restarts, "host/lost_episodes": 4 * restarts}

    rows = [row(0, 1.0, 0.1, 2.0, 1, 0), row(1, 2.0, 0.3, 7.5, 1, 1), row(1, 0.0, 0.2, 3.0, 0, 2)]
    (line,) = _host_lines(rows, {"host": {"num_actors": 2, "max_policy_lag": 1}})
    assert line == ("host: 2 actor(s), policy lag <= 1 (largest seen 1), queue depth mean 1.00; busy: actors 50%, "
                    "learner 25%; env step p50 0.20 ms, p99 up to 7.50 ms, slowest actor 1; env restarts 2, lost "
                    "episodes 8")
    assert _host_lines(rows, {}) == [] and _host_lines([{"env_steps": 1}], {"host": {"num_actors": 1}}) == []
