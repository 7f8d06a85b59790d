"""A policy server's figures: windows of rates and percentiles, the status file and its line."""

from __future__ import annotations

import json
import os

import pytest

from rljax.serve.stats import ServeStats, is_serve_dir, read_serve_status, serve_line, write_serve_status


def test_a_record_holds_the_windows_rates_batch_sizes_and_percentiles():
    stats = ServeStats()
    stats.replied([0.001] * 98 + [0.010, 0.020])
    stats.batch(64, 8, [0.0005] * 8)
    stats.batch(3, 1, [0.002])
    stats.count("requests", 9)
    stats.error("10.0.0.2", "refused")
    record = stats.record({"version": 5})
    assert record["version"] == 5 and record["totals"]["requests"] == 9 and record["batches"] == 2
    assert record["batch_rows"] == {"3": 1, "64": 1} and record["batch_requests"] == {"1": 1, "8": 1}
    assert record["mean_batch_rows"] == 33.5 and record["latency_ms"]["p50"] == 1.0
    assert record["latency_ms"]["max"] == 20.0 and 1.0 < record["latency_ms"]["p99"] <= 20.0
    assert record["errors_by_client"] == {"10.0.0.2": {"refused": 1}}
    again = stats.record()  # a new window: its rates start over, the totals go on
    assert again["batches"] == 0 and again["latency_ms"]["p50"] is None and again["totals"]["requests"] == 9


def test_the_status_file_is_read_back_with_its_state(tmp_path):
    stats = ServeStats()
    write_serve_status(tmp_path, stats.record({"address": "127.0.0.1:5600", "version": 3, "every_s": 10.0}))
    assert is_serve_dir(tmp_path) and (tmp_path / "serve.jsonl").read_text().count("\n") == 1
    record = read_serve_status(tmp_path)
    assert record["state"] == "serving" and "policy server 127.0.0.1:5600" in serve_line(record)
    write_serve_status(tmp_path, {"stopped": True})
    assert read_serve_status(tmp_path)["state"] == "stopped"
    gone = json.loads((tmp_path / "serve.json").read_text()) | {"stopped": False, "pid": 2 ** 22 + 12345}
    (tmp_path / "serve.json").write_text(json.dumps(gone))
    assert read_serve_status(tmp_path)["state"] == "gone"
    (tmp_path / "serve.json").write_text(json.dumps(gone | {"pid": os.getpid(), "updated_unix": 0}))
    assert read_serve_status(tmp_path)["state"] == "silent"
    (tmp_path / "serve.json").write_text("{")
    with pytest.raises(ValueError, match="serve.json cannot be read"):
        read_serve_status(tmp_path)
