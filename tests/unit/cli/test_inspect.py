"""``rljax inspect`` (:mod:`rljax.cli.inspect`) on run directories written by hand: the summary's
progress and score lines (of JAX-env and host-env runs, with and without ``status.json``), the
figures' data, smoothing and labels, the plots, and a directory that holds no run. (On a bench
directory: tests/unit/bench/test_bench_dir.py.)"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from rljax.cli.inspect import (configs_figure, metrics_figure, returns_figure, summary_text, throughput_figure,
                               write_plots)
from rljax.cli.plotting import RAW_GID
from rljax.cli.rundata import smooth
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


def _host_run(path, updates_done=39, status=None):
    """A host-env run as ``rljax train ppo --env gymnasium/CartPole-v1 --total-timesteps 20000`` writes
    it (rljax.actorlearner.run): 20,000 // 512 = 39 updates, chunks of 4 (the last of 3), a
    metrics.jsonl row per update with host/* columns, a chunks.jsonl row per chunk, status.json."""
    path.mkdir(parents=True)
    (path / "checkpoints").mkdir()
    (path / "config.json").write_text(json.dumps({"env": "gymnasium/CartPole-v1", "seed": 0, "total_timesteps": 20000,
                                                  "num_envs": 4, "num_steps": 128, "updates_per_chunk": 0}))
    (path / "manifest.json").write_text(json.dumps({
        "algorithm": "PPOConfig", "backend": "cpu", "host": {"num_actors": 1, "max_policy_lag": 1, "queue_size": 2},
        "plan": {"updates_per_chunk": 4, "num_updates": 39, "env_steps_per_update": 512, "log_every": 1,
                 "processes": 1}}))
    host = {"host/policy_lag": 1, "host/queue_depth": 0, "host/actor_busy": 0.9, "host/learner_busy": 0.2,
            "host/env_step_p50_ms": 0.15, "host/env_step_p99_ms": 0.3, "host/env_restarts": 0, "host/lost_episodes": 0}
    rows = [{"updates": u, "env_steps": 512 * u, "episode_return_mean": 20.0 + u, "policy_loss": -0.001,
             "value_loss": 40.0 - u, "entropy": 0.69 - 0.002 * u, "sps": 9000.0, "wall_time_s": 0.1 * u, **host}
            for u in range(1, updates_done + 1)]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    chunks = [{**rows[min(c + 3, updates_done - 1)], "host/slowest_actor": 0} for c in range(0, updates_done, 4)]
    (path / "chunks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in chunks))
    if status is not None:
        (path / "status.json").write_text(json.dumps({
            "state": status, "env_steps": 512 * updates_done, "total_env_steps": 19968, "host": "elsewhere", "pid": 1,
            "updated_unix": time.time(), "stall_after_s": 600.0, "run_dir": str(path)}))
    return path


def test_a_finished_host_env_run_is_finished(tmp_path):
    # It said "progress: 19,968 / 20,480 env steps (98 %, not finished)": the total rounded the 39
    # updates up to 10 whole chunks of 4 as a JAX-env run's plan does, while `rljax status` said finished.
    expected = "progress: 19,968 / 19,968 env steps (100 %, finished), 10 chunks logged, 3.9 s of run time"
    assert summary_text(_host_run(tmp_path / "with", status="finished")).splitlines()[1] == expected
    # A copy without status.json (or a run from before it): the total rebuilt from config and manifest.
    assert summary_text(_host_run(tmp_path / "without")).splitlines()[1] == expected


def test_progress_says_the_state_rljax_status_says(tmp_path):
    # Stopped after 20 of 39 updates: 10,240 of 19,968 env steps (51 %).
    line = summary_text(_host_run(tmp_path / "stopped", 20, status="preempted")).splitlines()[1]
    assert line.startswith("progress: 10,240 / 19,968 env steps (51 %, preempted (rljax resume continues it)), ")
    line = summary_text(_host_run(tmp_path / "going", 20, status="running")).splitlines()[1]
    assert line.startswith("progress: 10,240 / 19,968 env steps (51 %, running), ")
    line = summary_text(_host_run(tmp_path / "copy", 20)).splitlines()[1]
    assert line.startswith("progress: 10,240 / 19,968 env steps (51 %, not finished), ")
    # 39 of 40 updates is 97.5 %; one step short of the total never reads "100 %, not finished".
    from rljax.cli.inspect import _progress_line

    assert "(99 %, not finished)" in _progress_line([{"env_steps": 999}], 1000)


def test_the_returns_figure_is_smoothed_with_the_raw_values_behind_and_compact_ticks(tmp_path):
    rows = [{"env_steps": 1000 * i, "wall_time_s": 0.5 * i, "episode_return_mean": float(i % 3)} for i in range(1, 301)]
    rows[10]["episode_return_mean"] = None  # no episode ended in that chunk: left out
    rows[-1]["eval/return_mean"] = 9.0
    fig = returns_figure(rows, window=5)
    by_steps = fig.axes[0]
    raw = [line for line in by_steps.lines if line.get_gid() == RAW_GID]
    train = by_steps.lines[1]
    y = [r["episode_return_mean"] for r in rows if r["episode_return_mean"] is not None]
    assert len(raw) == 1 and raw[0].get_alpha() < 0.5
    np.testing.assert_array_equal(raw[0].get_ydata(), y)
    np.testing.assert_allclose(train.get_ydata(), smooth(y, 5))
    assert train.get_color() == raw[0].get_color()
    labels = [t.get_text() for t in by_steps.get_legend().get_texts()]
    assert labels == ["training (episode_return_mean; centred mean over 5 points, raw faint)",
                      "greedy evaluation (eval/return_mean)"]
    # 300k env steps: at most 6 ticks, labelled 0, 100k, ... (they were 50000, 100000, ... and ran together).
    fig.canvas.draw()
    ticks = [t.get_text() for t in by_steps.get_xticklabels() if t.get_text()]
    assert 3 <= len(ticks) <= 7 and "100k" in ticks and all(len(t) <= 5 for t in ticks), ticks
    unsmoothed = returns_figure(rows).axes[0]
    assert not [line for line in unsmoothed.lines if line.get_gid() == RAW_GID]
    np.testing.assert_array_equal(unsmoothed.lines[0].get_ydata(), y)


def test_the_metrics_figure_draws_every_algorithm_metric_in_small_panels():
    rng = np.random.default_rng(0)
    ppo = [{"env_steps": 100 * i, "updates": i, "sps": 1.0, "episode_return_mean": 1.0, "policy_loss": rng.normal(),
            "value_loss": rng.normal(), "entropy": rng.normal(), "approx_kl": rng.normal(),
            "clip_fraction": rng.normal(),
            "explained_variance": rng.normal(), "grad_norm": rng.normal(), "learning_rate": 2.5e-4,
            "time/compute_s": rng.normal(), "host/policy_lag": i % 2} for i in range(1, 41)]
    fig = metrics_figure(ppo, window=4)
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == ["policy_loss", "value_loss", "approx_kl", "clip_fraction", "entropy",
                                                  "explained_variance", "grad_norm"]
    assert len(fig.axes) == 7 and fig.axes[4].get_position().y1 < fig.axes[0].get_position().y0 + 1e-9  # 2 rows of 4
    entropy = panels[4].lines
    np.testing.assert_array_equal(entropy[0].get_ydata(), [r["entropy"] for r in ppo])  # raw, faint
    np.testing.assert_allclose(entropy[1].get_ydata(), smooth([r["entropy"] for r in ppo], 4))
    assert fig._suptitle.get_text() == "centred mean over 4 points, raw faint; constant: learning_rate=0.00025"
    # DQN's and SAC's columns, not just *_loss.
    dqn = [{"env_steps": i, "td_loss": i, "q_mean": -i, "epsilon": 1 / i, "td_abs_mean": i, "grad_norm": i}
           for i in range(1, 4)]
    assert [ax.get_title() for ax in metrics_figure(dqn).axes] == ["td_loss", "epsilon", "grad_norm", "q_mean",
                                                                   "td_abs_mean"]
    assert metrics_figure([{"env_steps": 1, "sps": 2.0, "episode_return_mean": 3.0}]) is None


def test_a_host_runs_throughput_figure_says_why_it_has_no_host_times(tmp_path):
    from rljax.store.tracking import read_chunks

    fig = throughput_figure(read_chunks(_host_run(tmp_path / "r", status="finished")))
    assert "host-env run logs its actors and learner as host/*" in fig.axes[1].texts[0].get_text()


def test_the_configs_figure_names_each_config_by_its_values_and_seeds():
    from rljax.training.sweep import Member

    members = [Member(index=i, seed=i % 2, values={"learning_rate": lr, "ent_coef": 0.01}, name=f"m{i}",
                      label=f"learning_rate={lr},ent_coef=0.01") for i, lr in enumerate((1e-3, 1e-3, 3e-4))]
    rows = [[{"env_steps": 100 * s, "episode_return_mean": float(s * (i + 1))} for s in range(1, 6)] for i in range(3)]
    ax = configs_figure(members, rows, window=3).axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["lr=0.001, ent=0.01 (2 seeds)",
                                                                    "lr=0.0003, ent=0.01 (1 seed)"]
    mean = [1.5 * s for s in range(1, 6)]  # the mean of seeds 1x and 2x
    np.testing.assert_allclose([line for line in ax.lines if line.get_gid() != RAW_GID][0].get_ydata(), smooth(mean, 3))
    assert "centred mean over 3 points" in ax.get_title()


def test_smooth_on_the_command_line(run, tmp_path, capsys):
    assert main(["inspect", str(run), "--smooth", "3", "--out", str(tmp_path / "p")]) == 0
    assert capsys.readouterr().out.rstrip().endswith(f"{tmp_path / 'p' / 'losses.png'}")
    for bad in ("0", "2.5", "x"):
        assert main(["inspect", str(run), "--smooth", bad]) == 2
        assert f"argument --smooth: expected a whole number of points >= 1 (1: no smoothing), got '{bad}'" in \
            capsys.readouterr().err
    with pytest.raises(ValueError, match="got 0"):
        write_plots(run, tmp_path / "never", window=0)
    assert not (tmp_path / "never").exists()  # refused before anything is written


def test_a_sweep_header_names_its_seeds(tmp_path):
    sweep = tmp_path / "sw"
    members = [{"index": i, "seed": i % 2, "values": {"lr": lr}, "name": f"m{i}", "label": f"lr={lr}"}
               for i, lr in enumerate((1, 1, 2, 2))]
    sweep.mkdir()
    (sweep / "sweep.json").write_text(json.dumps({"members": members}))
    (sweep / "config.json").write_text(json.dumps({"env": "CartPole-v1", "seed": 0}))
    for m in members:
        (sweep / "members" / m["name"]).mkdir(parents=True)
        (sweep / "members" / m["name"] / "metrics.jsonl").write_text(json.dumps(
            {"env_steps": 10, "episode_return_mean": 1.0, "sps": 1.0, "wall_time_s": 1.0}) + "\n")
    head = summary_text(sweep).splitlines()[0]
    assert ": ? on CartPole-v1, seeds 0, 1, started " in head and head.endswith("4 members (2 configs x 2 seeds)")
