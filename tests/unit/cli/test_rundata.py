"""Reading run directories for ``rljax inspect`` (:mod:`rljax.cli.rundata`): the kind of a directory
(and the error naming what a run holds), the planned total of JAX-env, host-env and resumed runs, the
status a run wrote, damaged JSON, wall times between the rows that end chunks, which columns are
algorithm metrics, smoothing, legend labels and compact tick labels."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rljax.cli.rundata import (NotARunError, config_label, fmt_compact, metric_columns, planned_total, read_json,
                               read_run_status, run_kind, smooth, wall_times)


def test_the_kind_of_a_directory(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "manifest.json").write_text("{}")
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "sweep.json").write_text("{}")
    (tmp_path / "empty").mkdir()
    assert run_kind(tmp_path / "run") == "run" and run_kind(tmp_path / "sweep") == "sweep"
    with pytest.raises(NotARunError, match="empty is not a run directory: a run holds metrics.jsonl"):
        run_kind(tmp_path / "empty")
    with pytest.raises(NotARunError, match="missing is not a directory"):
        run_kind(tmp_path / "missing")


def test_planned_total_and_damaged_json(tmp_path):
    # 1,000 env steps of 100 per update, 3 updates a chunk: 10 updates become 4 chunks of 3 (1,200 steps).
    assert planned_total({"plan": {"env_steps_per_update": 100, "updates_per_chunk": 3}},
                         {"total_timesteps": 1000}) == 1200
    assert planned_total({}, {"total_timesteps": 1000}) is None
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "good.json").write_text(json.dumps({"a": 1}))
    assert read_json(tmp_path / "bad.json") is None and read_json(tmp_path / "nope.json") is None
    assert read_json(tmp_path / "good.json") == {"a": 1}


def test_wall_times_between_chunk_rows_are_interpolated_by_env_steps():
    rows = [{"env_steps": 100}, {"env_steps": 200, "wall_time_s": 2.0}, {"env_steps": 300},
            {"env_steps": 400, "wall_time_s": 4.0}, {"env_steps": 500}]
    np.testing.assert_array_equal(wall_times(rows), [np.nan, 2.0, 3.0, 4.0, np.nan])
    assert np.isnan(wall_times([{"env_steps": 1}])).all()


# A host-env run's manifest as rljax.actorlearner.run writes it: PPO on gymnasium/CartPole-v1 with
# --total-timesteps 20000 makes 20,000 // 512 = 39 updates in chunks of 4 (the last one of 3).
HOST_MANIFEST = {"algorithm": "PPOConfig", "host": {"num_actors": 1, "max_policy_lag": 1}, "plan": {
    "updates_per_chunk": 4, "num_updates": 39, "env_steps_per_update": 512, "log_every": 1, "processes": 1}}


def test_the_planned_total_of_a_host_env_run_is_its_updates_not_whole_chunks():
    # It was 40 x 512 = 20,480 (rounded up to whole chunks as the JAX path does), so `rljax inspect`
    # said "19,968 / 20,480 env steps (98 %, not finished)" of a finished run.
    assert planned_total(HOST_MANIFEST, {"total_timesteps": 20000}) == 39 * 512 == 19968
    # Resumed with an extended total: config.json has the new total, the manifest the first plan.
    assert planned_total(HOST_MANIFEST, {"total_timesteps": 30000}) == 58 * 512
    # Two processes: the plan's env steps per update are the whole job's.
    two = {**HOST_MANIFEST, "plan": {**HOST_MANIFEST["plan"], "env_steps_per_update": 1024}}
    assert planned_total(two, {"total_timesteps": 20000}) == 19 * 1024


def test_the_planned_total_of_a_resumed_jax_run_keeps_its_chunk_size():
    # A fresh run: 10 updates in chunks of 3 become 4 chunks (1,200 steps), as before.
    plan = {"plan": {"env_steps_per_update": 100, "updates_per_chunk": 3, "num_updates": 12}}
    assert planned_total(plan, {"total_timesteps": 1000}) == 1200
    # Resumed with a total below one saved chunk, the run still compiles its chunk of 3 updates.
    assert planned_total(plan, {"total_timesteps": 100}) == 300


def test_the_status_json_total_comes_first(tmp_path):
    # What the run planned in its latest session is what `rljax status` shows.
    assert planned_total(HOST_MANIFEST, {"total_timesteps": 20000}, {"total_env_steps": 5120}) == 5120
    assert planned_total(HOST_MANIFEST, {"total_timesteps": 20000}, {"state": "running"}) == 19968
    assert read_run_status(tmp_path) is None  # no status.json: an older run, or a copy without it
    (tmp_path / "status.json").write_text("{damaged")
    assert read_run_status(tmp_path) is None
    (tmp_path / "status.json").write_text(json.dumps({"state": "finished", "total_env_steps": 19968,
                                                      "updated_unix": 0.0}))
    assert read_run_status(tmp_path)["state"] == "finished"


def test_metric_columns_are_the_algorithms_losses_first_and_constants_apart():
    rows = [{"env_steps": 100, "updates": 1, "sps": 1.0, "episode_return_mean": 1.0, "episodes": 2,
             "policy_loss": 0.5, "value_loss": 2.0, "entropy": 0.69, "approx_kl": 0.01, "clip_fraction": 0.1,
             "explained_variance": 0.2, "grad_norm": 3.0, "learning_rate": 2.5e-4, "time/compute_s": 0.1,
             "host/policy_lag": 1, "memory/bytes_in_use": 10, "cost/device_s": 0.1, "eval/return_mean": 9.0,
             "reward_components/angle": -1.0, "param_desync": 0.0, "nonfinite_state": 0, "buffer_size": 10},
            {"env_steps": 200, "updates": 2, "sps": 2.0, "episode_return_mean": 2.0, "episodes": 3,
             "policy_loss": 0.4, "value_loss": 1.5, "entropy": 0.6, "approx_kl": 0.02, "clip_fraction": 0.2,
             "explained_variance": 0.4, "grad_norm": 2.0, "learning_rate": 2.5e-4, "time/compute_s": 0.2,
             "host/policy_lag": 0, "memory/bytes_in_use": 20, "cost/device_s": 0.2, "eval/return_mean": 8.0,
             "reward_components/angle": -2.0, "param_desync": 0.0, "nonfinite_state": 0, "buffer_size": 20}]
    varying, constant = metric_columns(rows)
    assert varying == ["policy_loss", "value_loss", "approx_kl", "clip_fraction", "entropy", "explained_variance",
                       "grad_norm"]
    assert constant == {"learning_rate": 2.5e-4}
    assert metric_columns([{"env_steps": 1, "td_loss": None}]) == ([], {})  # never a finite value: nothing to draw


def test_smooth_is_a_centred_rolling_mean_that_keeps_length_and_skips_nan():
    # W=3: the mean of i-1..i+1, fewer at the ends: (1+2)/2, (1+2+3)/3, ..., (4+5)/2.
    np.testing.assert_allclose(smooth([1, 2, 3, 4, 5], 3), [1.5, 2, 3, 4, 4.5])
    # W=2 (even): i..i+1, so (1+2)/2, (2+3)/2, ... and the last point alone.
    np.testing.assert_allclose(smooth([1, 2, 3, 4, 5], 2), [1.5, 2.5, 3.5, 4.5, 5])
    np.testing.assert_allclose(smooth([1, np.nan, 3], 3), [1, 2, 3])  # a missing value is left out of the mean
    assert np.isnan(smooth([np.nan, np.nan], 2)).all()
    np.testing.assert_array_equal(smooth([3, 1, 2], 1), [3, 1, 2])
    assert smooth([], 5).shape == (0,)
    for bad in (0, -2, 2.5, True):
        with pytest.raises(ValueError, match=r"whole number of points >= 1 \(1: no smoothing\), got "):
            smooth([1.0], bad)


def test_legend_labels_and_compact_ticks():
    assert config_label({"learning_rate": 0.001, "ent_coef": 0.01, "env": "CartPole-v1"}) == \
        "lr=0.001, ent=0.01, env=CartPole-v1"
    assert config_label({"a": 1, "b": [1, 2], "c": None}, max_fields=2) == "a=1, b=[1, 2], +1 more"
    assert [fmt_compact(x) for x in (0, 500, 1500, 100_000, 300_000, 1.5e6, 999_500, 2.5e9, -2000)] == [
        "0", "500", "1.5k", "100k", "300k", "1.5M", "1M", "2.5G", "-2k"]
