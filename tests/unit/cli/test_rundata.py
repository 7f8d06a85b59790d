"""Reading run directories for ``rljax inspect`` (:mod:`rljax.cli.rundata`): the kind of a directory
(and the error naming what a run holds), the planned total, damaged JSON, and wall times between
the rows that end chunks."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rljax.cli.rundata import NotARunError, planned_total, read_json, run_kind, wall_times


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
