"""Run observability: per-chunk time/memory columns, a hung chunk's stall report, ``rljax inspect``.

One tiny PPO run through the CLI (with evaluation and a checkpoint every chunk) and one tiny sweep
are shared by the tests that read their files; the watchdog's hanging-chunk test trains its own run
with an env whose step blocks in a host callback.
"""

from __future__ import annotations

import json
import math
import pathlib
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

import rljax
from rljax.agents.ppo import PPOConfig
from rljax.cli.main import main as cli_main, run_experiment
from rljax.env import Box, Discrete, EnvParams, EnvState, Environment
from rljax.cli.inspect import summary_text
from rljax.training.hooks.observe import (COST_COLUMNS, MEMORY_COLUMNS, TIME_COLUMNS, ChunkTiming, device_memory,
                                          is_measured)
from rljax.training.program import Plan
from rljax.store.tracking import read_metrics

TINY = dict(num_envs=4, num_steps=16, num_epochs=1, num_minibatches=2, hidden_sizes=(16,))
COLUMNS = [*TIME_COLUMNS, "time/interval_s", *MEMORY_COLUMNS]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    """A 4-chunk PPO run via the CLI: evaluated every 2 chunks, saved every chunk, stall options set."""
    run = tmp_path_factory.mktemp("obs") / "run"
    flags = ["--total-timesteps", str(4 * 16 * 4), "--num-envs", "4", "--num-steps", "16", "--num-epochs", "1",
             "--num-minibatches", "2", "--hidden-sizes", "16", "--updates-per-chunk", "1", "--eval-interval", "2",
             "--eval-episodes", "2", "--checkpoint-every", "1", "--stall-factor", "7", "--stall-first-chunk", "300",
             "--stall-min", "45", "--quiet", "--run-dir", str(run)]
    assert run_experiment(PPOConfig, dict(env="CartPole-v1"), flags) == 0
    return run


def test_every_row_has_time_and_memory_columns(cli_run):
    rows = read_metrics(cli_run)
    assert len(rows) == 4
    for row in rows:
        assert set(COLUMNS) <= set(row), sorted(set(COLUMNS) - set(row))
        for key in [*TIME_COLUMNS, "time/interval_s"]:
            assert isinstance(row[key], float) and row[key] >= 0.0, (key, row[key])
        assert row["time/compute_s"] > 0.0
        # The wait for the device and the evaluation happen inside the interval between two rows.
        assert row["time/host_wait_s"] <= row["time/interval_s"] and row["time/eval_s"] <= row["time/interval_s"]
        # sps is computed from the same chunk time.
        assert row["sps"] == pytest.approx(4 * 16 / row["time/compute_s"], rel=1e-9)
    # Evaluated chunks (every 2nd) and only they report evaluation time.
    assert [row["time/eval_s"] > 0 for row in rows] == [False, True, False, True]
    # A checkpoint after every chunk: each row but the first reports the previous boundary's save.
    assert rows[0]["time/checkpoint_s"] == 0.0 and all(row["time/checkpoint_s"] > 0 for row in rows[1:])
    # ...and the bytes it wrote: the same state each time, one device, no collectives.
    written = [row["cost/checkpoint_bytes"] for row in rows]
    assert written[0] == 0 and written[1] > 0 and len(set(written[1:])) == 1, written
    assert all(row["cost/collective_bytes_per_update"] == 0 for row in rows)
    assert all(row["cost/device_s"] == pytest.approx(row["time/interval_s"]) for row in rows)
    assert rows[0]["time/logging_s"] == 0.0 and all(row["time/logging_s"] > 0 for row in rows[1:])
    # Memory: exactly what the backend reports (CPU: null in every row, never missing).
    reports = jax.devices()[0].memory_stats() is not None
    for row in rows:
        for key in MEMORY_COLUMNS:
            assert (isinstance(row[key], int) and row[key] > 0) if reports else row[key] is None, (key, row[key])


def test_time_columns_add_up_to_the_run_totals():
    """The per-row columns are differences of the run's totals: they sum back to them."""
    cfg = PPOConfig(env="CartPole-v1", total_timesteps=4 * 16 * 3, updates_per_chunk=1, eval_interval=1,
                    eval_episodes=2, **TINY)
    result = rljax.train(cfg, options=rljax.RunOptions(quiet=True))
    rows, t = result.rows, result.timings
    assert len(rows) == 3
    for column, total in (("time/compute_s", "compute_s"), ("time/host_wait_s", "host_wait_s"),
                          ("time/eval_s", "eval_s")):
        assert sum(r[column] for r in rows) == pytest.approx(t[total], rel=1e-9, abs=1e-12)
    # The last row's own logging ends after it is written: the rows hold all but that.
    assert sum(r["time/logging_s"] for r in rows) <= t["logging_s"]
    assert all(is_measured(k) for k in COLUMNS) and not any(is_measured(k) for k in ("env_steps", "value_loss"))


def test_tensorboard_gets_the_time_columns(cli_run):
    from tensorboardX.proto import event_pb2

    tags = set()
    for path in (cli_run / "tb").glob("events.out.tfevents.*"):
        data, pos = path.read_bytes(), 0
        while pos < len(data):
            n = int.from_bytes(data[pos:pos + 8], "little")
            tags |= {v.tag for v in event_pb2.Event.FromString(data[pos + 12:pos + 12 + n]).summary.value}
            pos += 16 + n
    assert {*TIME_COLUMNS, "time/interval_s"} <= tags


def test_stall_options_are_run_options(cli_run):
    options = json.loads((cli_run / "manifest.json").read_text())["run_options"]
    assert (options["stall_factor"], options["stall_first_chunk_s"], options["stall_min_s"]) == (7.0, 300.0, 45.0)


def test_bad_stall_options_name_the_value():
    cfg = PPOConfig(total_timesteps=64, **TINY)
    with pytest.raises(ValueError, match=r"stall_min_s must be a finite number > 0, got -1"):
        rljax.train(cfg, options=rljax.RunOptions(quiet=True, stall_min_s=-1))
    with pytest.raises(ValueError, match=r"stall_factor must be .*>= 0 \(0: no stall watchdog\), got nan"):
        rljax.train(cfg, options=rljax.RunOptions(quiet=True, stall_factor=float("nan")))


class _FakeDevice:
    def __init__(self, stats):
        self.stats = stats

    def memory_stats(self):
        return self.stats


def test_device_memory_is_the_fullest_device_or_null():
    assert device_memory([_FakeDevice(None)]) == dict.fromkeys(MEMORY_COLUMNS)
    got = device_memory([_FakeDevice({"bytes_in_use": 5, "peak_bytes_in_use": 9}),
                         _FakeDevice({"bytes_in_use": 7, "peak_bytes_in_use": 8, "bytes_limit": 100})])
    assert got == {"memory/bytes_in_use": 7, "memory/peak_bytes_in_use": 9, "memory/bytes_limit": 100}


def test_chunk_timing_reports_growth_since_the_previous_row():
    clock = iter([0.0, 10.0, 12.5, 13.0]).__next__
    run = type("R", (), {})()
    run.timings = {"compute_s": 0.0, "host_wait_s": 0.0, "logging_s": 0.0, "checkpoint_s": 0.0, "eval_s": 0.0,
                   "checkpoint_bytes": 100, "collective_bytes_per_update": 4096}
    # A population of 2 members over 4 devices, 3 updates of 8 env steps per chunk.
    run.plan = Plan(num_updates=30, updates_per_chunk=3, num_chunks=10, env_steps_per_update=8)
    run.program = type("P", (), {"size": 2})()
    hook = ChunkTiming([_FakeDevice(None)], clock=clock, num_devices=4)
    hook.start(run)  # t = 10
    run.timings.update(compute_s=2.0, host_wait_s=1.5)
    rows = [{}, {}]
    hook.record(run, 0, rows)  # t = 12.5
    assert rows[0] == rows[1] and rows[0]["time/compute_s"] == 2.0 and rows[0]["time/interval_s"] == 2.5
    # 2.5 s on 4 devices; 2 members x 3 updates x 8 steps = 48 env steps in 10 device-seconds.
    assert {k: rows[0][k] for k in COST_COLUMNS} == {
        "cost/device_s": 10.0, "cost/env_steps_per_device_s": 4.8, "cost/checkpoint_bytes": 0,
        "cost/collective_bytes_per_update": 4096}
    run.timings.update(compute_s=2.25, logging_s=0.125, checkpoint_s=0.25, checkpoint_bytes=1124)
    rows = [{}]
    hook.record(run, 1, rows)  # t = 13
    assert {k: rows[0][k] for k in ("time/compute_s", "time/logging_s", "time/checkpoint_s", "time/host_wait_s",
                                    "time/interval_s")} == {"time/compute_s": 0.25, "time/logging_s": 0.125,
                                                            "time/checkpoint_s": 0.25, "time/host_wait_s": 0.0,
                                                            "time/interval_s": 0.5}
    assert rows[0]["cost/device_s"] == 2.0 and rows[0]["cost/checkpoint_bytes"] == 1024  # the save since the last row
    assert all(is_measured(k) for k in COST_COLUMNS)


@struct.dataclass
class _HangState(EnvState):
    time: jax.Array


@struct.dataclass
class _HangParams(EnvParams):
    max_steps_in_episode: int = 20


class _Hang:
    """Host side of :class:`HangEnv`: once armed, the next env step blocks until a stall report appears."""

    armed = False
    run_dir: pathlib.Path | None = None
    released_by_report: bool | None = None

    @classmethod
    def step(cls, t):
        if not cls.armed:
            return
        cls.armed = False
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # the watchdog's report is what ends the hang
            if any(cls.run_dir.glob("stall-*.txt")):
                cls.released_by_report = True
                return
            time.sleep(0.05)
        cls.released_by_report = False


class HangEnv(Environment[_HangState, _HangParams]):
    """A trivial env whose step calls the host (``jax.debug.callback``), which can block there."""

    stochastic_transitions = False

    @property
    def default_params(self):
        return _HangParams()

    def reset_env(self, key, params):
        return jnp.zeros((1,), jnp.float32), _HangState(time=jnp.int32(0))

    def step_env(self, key, state, action, params):
        jax.debug.callback(_Hang.step, state.time)
        t = state.time + 1
        return (t.astype(jnp.float32) / 20.0)[None], _HangState(time=t), jnp.float32(1.0), jnp.bool_(False), {}

    def observation_space(self, params):
        return Box(0.0, 1.0, (1,))

    def action_space(self, params):
        return Discrete(2)


@pytest.mark.timeout(300)
def test_a_hung_chunk_gets_the_stall_warning_with_every_stack(tmp_path, capsys):
    """A chunk that hangs in a host callback is reported while it hangs, with the
    stacks of all threads (the callback's included) and what the run was doing, in the run directory."""
    run_dir = tmp_path / "run"
    _Hang.run_dir, _Hang.armed, _Hang.released_by_report = run_dir, False, None

    def arm(chunk_index, state, row):  # chunk 2 hangs
        if chunk_index == 1:
            _Hang.armed = True

    cfg = PPOConfig(total_timesteps=2 * 8 * 4, updates_per_chunk=1, num_envs=2, num_steps=8, num_epochs=1,
                    num_minibatches=1, hidden_sizes=(8,))
    result = rljax.train(cfg, HangEnv(), options=rljax.RunOptions(run_dir=run_dir, quiet=True, tensorboard=False,
                                                                  checkpoints=False, on_chunk=arm, stall_factor=3.0,
                                                                  stall_min_s=3.0, stall_first_chunk_s=120.0))
    assert len(result.rows) == 4 and _Hang.released_by_report is True
    (report,) = run_dir.glob("stall-*.txt")
    text = report.read_text()
    assert "phase: computing chunk 2" in text and "last finished chunk: 1" in text
    assert "stall_factor=3 x median chunk interval" in text and "stall_min_s=3" in text
    assert "in _host_loop" in text and "--- thread MainThread" in text  # the loop waiting for the device
    assert "in step\n" in text and "time.sleep(0.05)" in text  # the XLA thread blocked in the callback
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if "no chunk finished" in line]
    assert len(warnings) == 1 and str(report) in warnings[0]
    # The watchdog thread ended with the run.
    assert not any(t.name == "rljax-stall-watchdog" for t in threading.enumerate())


# ----------------------------------------------------------------------------------------------
# rljax inspect.

def _assert_png(path):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 2000
    import matplotlib.image

    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    assert np.ptp(image[..., :3]) > 0  # not a blank canvas


def test_inspect_run(cli_run, capsys):
    assert cli_main(["inspect", str(cli_run)]) == 0
    out = capsys.readouterr().out
    rows = read_metrics(cli_run)
    returns = [r["episode_return_mean"] for r in rows if r["episode_return_mean"] is not None]
    evals = [r["eval/return_mean"] for r in rows if "eval/return_mean" in r]
    assert f"progress: {rows[-1]['env_steps']:,} / 256 env steps (100 %, finished), 4 chunks logged" in out
    assert f"latest {returns[-1]:,.2f} at 256, best {max(returns):,.2f}" in out
    assert f"final (mean of the last 2 chunks) {np.mean(returns[-2:]):,.2f}" in out
    assert f"greedy evaluation (eval/return_mean, 2 evaluations): latest {evals[-1]:,.2f}" in out
    assert f"steps/s: median {np.median([r['sps'] for r in rows]):,.0f}" in out
    assert "checkpoints: 3 kept, newest at 256 env steps" in out and "resumes: none" in out
    assert "host time per chunk, median: compute" in out
    # The run's cost: four saves of the same state (one per chunk; the last is in no row), the rows' device time.
    cost = json.loads((cli_run / "manifest.json").read_text())["cost"]
    saved = rows[1]["cost/checkpoint_bytes"]
    assert cost["checkpoint_bytes"] == 4 * saved and cost["unlogged_checkpoint_bytes"] == saved
    assert cost["device_s"] == pytest.approx(sum(r["cost/device_s"] for r in rows))
    assert cost["env_steps_computed"] == 256 and cost["env_steps_per_device_s"] == pytest.approx(256 / cost["device_s"])
    assert "cost of the run (manifest.json):" in out and "peak device memory" in out
    assert len(out.splitlines()) <= 25  # one screen
    for name in ("returns.png", "throughput.png", "losses.png"):
        _assert_png(cli_run / "inspect" / name)


def test_inspect_shows_resumes_and_stalls(cli_run, tmp_path, capsys):
    import shutil

    run = tmp_path / "copy"
    shutil.copytree(cli_run, run)
    record = json.loads((run / "manifest.json").read_text())
    record["resumes"] = [{"from_env_steps": 128, "unix_time": 0.0}]
    record["incidents"] = [{"unix_time": 0.0, "kind": "nonfinite", "action": "rollback", "reason": "value_loss is nan"}]
    (run / "manifest.json").write_text(json.dumps(record))
    (run / "stall-20261202-070000.txt").write_text("report")
    text = summary_text(run)
    assert "resumes: 1: 1970-01-01 00:00 UTC from env step 128" in text
    assert "incidents: 1" in text and "value_loss is nan" in text and "stall-20261202-070000.txt" in text


def test_inspect_refuses_what_is_not_a_run(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("x")
    assert cli_main(["inspect", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(tmp_path) in err[0] and "metrics.jsonl" in err[0] and "sweep.json" in err[0]
    assert cli_main(["inspect", str(tmp_path / "missing")]) == 2


def test_inspect_sweep(tmp_path, capsys):
    from rljax.training.sweep import SweepSpec, run_sweep

    cfg = PPOConfig(env="CartPole-v1", total_timesteps=4 * 16 * 3, updates_per_chunk=1, **TINY)
    result, members, agg = run_sweep(cfg, SweepSpec(grid={"learning_rate": [1e-3, 3e-3]}, seeds=(0, 1)),
                                     run_dir=tmp_path / "sw", quiet=True, tensorboard=False, plots=False)
    capsys.readouterr()
    assert cli_main(["inspect", str(tmp_path / "sw")]) == 0
    out = capsys.readouterr().out
    assert "sweep " in out and "4 members (2 configs x 2 seeds)" in out
    assert "progress: 192 / 192 env steps per member (100 %, finished)" in out
    for a in agg:  # the ranking, with the numbers summary.md has
        assert f"| {a['rank']} | {a['config']} | 2 | {a['final_mean']:.2f} ± {a['final_std']:.2f} |" in out
    population_sps = np.median([r["sps"] * 4 for r in result.member_rows[0]])
    assert f"steps/s (population): median {population_sps:,.0f}" in out
    _assert_png(tmp_path / "sw" / "inspect" / "configs.png")
    _assert_png(tmp_path / "sw" / "inspect" / "throughput.png")
    # The population's cost goes to the sweep's manifest (its members share every chunk).
    cost = json.loads((tmp_path / "sw" / "manifest.json").read_text())["cost"]
    assert cost["chunks"] == 3 and cost["env_steps"] == 192 and cost["checkpoint_bytes"] > 0
    assert "cost of the run (manifest.json): " in out


# ----------------------------------------------------------------------------------------------
# docs/metrics.md: the SAC "-61.3 training vs -170.7 greedy" gap is not a counting bug.

def test_episode_counts_are_whole_episodes_per_chunk():
    """Pendulum's episodes all last 200 steps and its envs start together, so a chunk of 200 steps per
    env finishes exactly one episode per env: a training return is a mean of num_envs episodes."""
    from rljax.agents.sac import SACConfig

    cfg = SACConfig(env="Pendulum-v1", total_timesteps=4 * 200 * 2, num_envs=4, updates_per_chunk=200,
                    learning_starts=64, hidden_sizes=(16,), batch_size=32, buffer_size=1024)
    result = rljax.train(cfg, options=rljax.RunOptions(quiet=True))
    assert [r["env_steps"] for r in result.rows] == [800, 1600]
    assert all(r["episodes"] == 4 and r["episode_length_mean"] == 200.0 for r in result.rows)
    assert all(math.isfinite(r["episode_return_mean"]) for r in result.rows)
    assert result.final_return == pytest.approx(np.mean([r["episode_return_mean"] for r in result.rows]))


def test_inspect_a_run_stopped_before_its_first_chunk(tmp_path, capsys):
    """A run directory with no rows yet (stopped while compiling) is summarised, with no plots."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"env": "CartPole-v1", "seed": 3, "total_timesteps": 1000}))
    (run / "manifest.json").write_text(json.dumps({"algorithm": "PPOConfig", "plan": {
        "env_steps_per_update": 64, "updates_per_chunk": 2}}))
    (run / "metrics.jsonl").write_text("")
    assert cli_main(["inspect", str(run)]) == 0
    out = capsys.readouterr().out
    assert "run " in out and "PPO on CartPole-v1, seed 3" in out
    assert "progress: 0 / 1,024 env steps (0 %, not finished), 0 chunks logged" in out
    assert "no episode has finished yet" in out and "plots:" not in out
