"""Metrics and provenance (:mod:`rljax.store.tracking`): config hashing (stable, order-free, sensitive
to every field), JSON values, the ``Tracker``'s rows round trip through ``read_metrics`` (which skips
damaged lines), a chunk's finer rows in ``metrics.jsonl`` and tensorboard beside its row in
``chunks.jsonl`` (and run directories from before ``chunks.jsonl``), its refusals, resume and rewind
(later rows kept aside, never lost), the manifest, and the progress lines."""

from __future__ import annotations

import dataclasses
import io
import json
import types

import numpy as np
import pytest

from rljax.agents.ppo import PPOConfig
from rljax.store.tracking import (REQUIRED_KEYS, Tracker, Tracking, config_hash, config_to_dict, cost_totals,
                                  format_population_progress, format_progress, json_scalar, manifest,
                                  population_legend, read_chunks, read_metrics)
from tests.support.runs import tb_events, tb_summaries

PROCESS = {"git_commit": "abc", "git_dirty": False, "packages": {}, "python": "3", "platform": "p", "devices": [],
           "backend": "cpu", "argv": ["x"]}
"""A stand-in for ``provenance()`` (which runs git and looks up packages)."""


def _row(steps: int, **extra) -> dict:
    return {k: 1.0 for k in REQUIRED_KEYS} | {"env_steps": steps} | extra


def _tracker(run_dir, **kwargs) -> Tracker:
    return Tracker(run_dir, PPOConfig(), quiet=True, tensorboard=False, process=PROCESS, **kwargs)


@dataclasses.dataclass(frozen=True)
class Small:
    a: int = 1
    b: tuple = (1, 2)
    c: float = 0.5


def test_config_hash_is_stable_and_sees_every_field():
    # sha256 of the sorted-key JSON, first 16 hex digits: the same for a dict with the keys reordered.
    assert config_to_dict(Small()) == {"a": 1, "b": [1, 2], "c": 0.5}
    assert config_hash(Small()) == config_hash({"c": 0.5, "b": [1, 2], "a": 1})
    import hashlib

    expected = hashlib.sha256(b'{"a": 1, "b": [1, 2], "c": 0.5}').hexdigest()[:16]
    assert config_hash(Small()) == expected and len(expected) == 16
    assert len({config_hash(Small()), config_hash(Small(a=2)), config_hash(Small(b=(2, 1))),
                config_hash(Small(c=0.25))}) == 4
    assert config_hash(PPOConfig()) == config_hash(PPOConfig())


def test_json_scalar():
    assert [json_scalar(v) for v in (None, True, 3, "s", 2.5)] == [None, True, 3, "s", 2.5]
    assert json_scalar(np.float32(0.5)) == 0.5 and json_scalar(np.int64(7)) == 7 and type(json_scalar(np.int64(7))) is int
    assert json_scalar(float("nan")) is None and json_scalar(np.float32(np.inf)) is None
    assert json_scalar(np.float32(2.0)) == 2.0 and type(json_scalar(np.float32(2.0))) is float
    assert json_scalar(object) == str(object)


def test_rows_round_trip_and_damaged_lines_are_skipped(tmp_path):
    with _tracker(tmp_path) as t:
        t.log(_row(10, loss=np.float32(0.25), bad=float("nan")))
        t.log(_row(20))
    rows = read_metrics(tmp_path)
    assert [r["env_steps"] for r in rows] == [10, 20] and rows[0]["loss"] == 0.25 and rows[0]["bad"] is None
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('[1, 2]\n{"no_steps": 1}\nnot json\n{"env_steps": 30}\n{"env_steps": 40, "cut')
    assert [r["env_steps"] for r in read_metrics(tmp_path)] == [10, 20, 30]
    assert read_metrics(tmp_path / "missing") == []


def _events(run_dir) -> list[tuple[int, dict]]:
    """``(step, {tag: value})`` of every summary event in ``run_dir/tb``."""
    return [(step, {v.tag: v.simple_value for v in values}) for step, values in tb_events(run_dir / "tb")]


def test_a_chunks_finer_rows_go_to_metrics_and_tensorboard_and_its_row_to_chunks(tmp_path):
    lines = [{"env_steps": s, "updates": s // 10, "episode_return_mean": float(s), "loss": -float(s)} for s in (10, 20, 30)]
    chunk = _row(30, loss=-20.0, sps=123.0, extra=7.0)
    with Tracker(tmp_path, PPOConfig(), quiet=True, process=PROCESS) as t:
        t.log(chunk, lines)
        t.log(_row(40, loss=-40.0), [{"env_steps": 40, "updates": 4, "loss": -41.0}])
    rows = read_metrics(tmp_path)
    assert [(r["env_steps"], r["loss"]) for r in rows] == [(10, -10.0), (20, -20.0), (30, -30.0), (40, -41.0)]
    # The row that ends a chunk has the chunk's other columns too; the finer rows only their own.
    assert rows[2]["sps"] == 123.0 and rows[2]["extra"] == 7.0 and rows[2]["episode_return_mean"] == 30.0
    assert "sps" not in rows[0] and "extra" not in rows[1]
    assert [(r["env_steps"], r["loss"]) for r in read_chunks(tmp_path)] == [(30, -20.0), (40, -40.0)]
    events = _events(tmp_path)
    assert [step for step, _ in events] == [10, 20, 30, 40]
    assert events[0][1] == {"updates": 1.0, "episode_return_mean": 10.0, "loss": -10.0}
    assert events[2][1]["sps"] == 123.0 and events[3][1]["loss"] == -41.0


def test_finer_rows_must_advance_to_the_chunks_end(tmp_path):
    with _tracker(tmp_path) as t:
        with pytest.raises(ValueError, match="do not advance"):
            t.log(_row(30), [{"env_steps": 20}, {"env_steps": 10}, {"env_steps": 30}])
        with pytest.raises(ValueError, match="do not advance"):
            t.log(_row(30), [{"env_steps": 10}, {"env_steps": 20}])  # ends before the chunk does
        t.log(_row(30), [{"env_steps": 15}, {"env_steps": 30}])
        with pytest.raises(ValueError, match="do not advance"):
            t.log(_row(60), [{"env_steps": 30}, {"env_steps": 60}])  # 30 is logged already
    assert [r["env_steps"] for r in read_metrics(tmp_path)] == [15, 30]
    assert [r["env_steps"] for r in read_chunks(tmp_path)] == [30]


def test_a_run_directory_from_before_chunks_jsonl_reads_and_resumes(tmp_path):
    """Old run directories hold chunk rows in metrics.jsonl only: read_chunks reads them there, and
    a resume starts chunks.jsonl from them."""
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(_row(s)) + "\n" for s in (10, 20, 30)))
    assert [r["env_steps"] for r in read_chunks(tmp_path)] == [10, 20, 30]
    with _tracker(tmp_path, resume=True, resume_env_steps=20) as t:
        t.log(_row(40), [{"env_steps": 30}, {"env_steps": 40}])
    assert [r["env_steps"] for r in read_chunks(tmp_path)] == [10, 20, 40]
    assert [r["env_steps"] for r in read_metrics(tmp_path)] == [10, 20, 30, 40]
    for name in ("metrics", "chunks"):
        assert [json.loads(x)["env_steps"] for x in (tmp_path / f"{name}.superseded.jsonl").read_text().splitlines()
                ] == [30]


def test_a_resume_puts_back_the_checkpoints_rows_in_both_files(tmp_path):
    with _tracker(tmp_path) as t:
        t.log(_row(20, loss=1.0), [{"env_steps": 10, "loss": 0.5}, {"env_steps": 20, "loss": 1.5}])
    for name in ("metrics.jsonl", "chunks.jsonl"):  # both lost (say, deleted by hand)
        (tmp_path / name).unlink()
    with pytest.warns(UserWarning, match="is missing"):
        _tracker(tmp_path, resume=True, resume_env_steps=20, recovered_rows=[_row(20, loss=1.0)],
                 recovered_lines=[_row(20, loss=1.5)]).close()
    assert [(r["env_steps"], r["loss"]) for r in read_chunks(tmp_path)] == [(20, 1.0)]
    assert [(r["env_steps"], r["loss"]) for r in read_metrics(tmp_path)] == [(20, 1.5)]


def test_tracker_refuses_to_overwrite_or_go_backwards(tmp_path):
    cfg = PPOConfig()
    row = {k: 1.0 for k in REQUIRED_KEYS} | {"env_steps": 100}
    with Tracker(tmp_path, cfg, quiet=True, tensorboard=False) as t:
        t.log(row)
        with pytest.raises(ValueError, match="does not advance"):
            t.log(row)
        with pytest.raises(ValueError, match="lacks required keys"):
            t.log({"env_steps": 200})
    with pytest.raises(FileExistsError, match="already holds metrics"):
        Tracker(tmp_path, cfg, quiet=True, tensorboard=False)
    # Resume appends and keeps steps monotonic; the first run's row is never lost.
    with Tracker(tmp_path, cfg, quiet=True, tensorboard=False, resume=True) as t:
        with pytest.raises(ValueError, match="does not advance"):
            t.log(row)
        t.log(row | {"env_steps": 200})
    assert [r["env_steps"] for r in read_metrics(tmp_path)] == [100, 200]


def test_resume_sets_later_rows_aside_and_puts_back_recovered_ones(tmp_path):
    with _tracker(tmp_path, seed=3) as t:
        for steps in (10, 20, 30):
            t.log(_row(steps))
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"env_steps": 40, "cut')  # a crash mid-row
    # The checkpoint is at 20; its own row (say lost) comes back from the checkpoint.
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines[:1] + lines[2:]) + "\n")  # drop the 20 row
    with _tracker(tmp_path, resume=True, resume_env_steps=20, recovered_rows=[_row(20, note="back")]) as t:
        t.log(_row(25))
    assert [(r["env_steps"], r.get("note")) for r in read_metrics(tmp_path)] == [(10, None), (20, "back"), (25, None)]
    aside = (tmp_path / "metrics.superseded.jsonl").read_text().splitlines()
    assert [json.loads(aside[0])["env_steps"], aside[1]] == [30, '{"env_steps": 40, "cut']
    record = json.loads((tmp_path / "manifest.json").read_text())
    assert record["seed"] == 3 and [r["from_env_steps"] for r in record["resumes"]] == [20]


def test_rewind_and_incidents(tmp_path):
    with _tracker(tmp_path) as t:
        for steps in (10, 20, 30):
            t.log(_row(steps))
        t.rewind(10)
        assert t.last_env_steps == 10
        t.log(_row(20, again=True))
        t.record_incident({"kind": "nonfinite", "chunk": 2})
    assert [(r["env_steps"], r.get("again")) for r in read_metrics(tmp_path)] == [(10, None), (20, True)]
    assert [json.loads(x)["env_steps"] for x in (tmp_path / "metrics.superseded.jsonl").read_text().splitlines()] == [20, 30]
    incidents = json.loads((tmp_path / "manifest.json").read_text())["incidents"]
    assert [(i["kind"], i["chunk"]) for i in incidents] == [("nonfinite", 2)] and "unix_time" in incidents[0]


def test_a_damaged_manifest_is_kept_aside_on_resume(tmp_path):
    _tracker(tmp_path).close()
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.warns(UserWarning, match=r"manifest.json is not valid JSON .*moved it to manifest.json.damaged-"):
        _tracker(tmp_path, resume=True).close()
    assert [p.read_text() for p in tmp_path.glob("manifest.json.damaged-*")] == ["{not json"]
    assert json.loads((tmp_path / "manifest.json").read_text())["config_hash"] == config_hash(PPOConfig())


def test_manifest_records_the_config_hash_seed_and_extra():
    record = manifest(Small(), seed=4, extra={"algorithm": "X"}, process=PROCESS)
    assert record["config_hash"] == config_hash(Small()) and record["seed"] == 4 and record["algorithm"] == "X"
    assert record["git_commit"] == "abc" and isinstance(record["created_unix"], float)


def test_progress_lines():
    line = format_progress({"env_steps": 500, "sps": 100.0, "episode_return_mean": 12.5}, 1000)
    # 50 %, ETA (1000 - 500) / 100 = 5 s.
    assert line == "[ 50.0%] steps        500/1,000  sps       100  eta   0m05s  return    12.50"
    assert format_progress({"env_steps": 0, "sps": 0.0, "episode_return_mean": None}, 10).endswith("--    return    n/a")
    assert "eval     3.00" in format_progress({"env_steps": 1, "sps": 1.0, "eval/return_mean": 3.0}, 10)
    rows = [{"env_steps": 5, "sps": 10.0, "episode_return_mean": 1.0}, {"env_steps": 5, "episode_return_mean": 3.0},
            {"env_steps": 5, "episode_return_mean": float("nan")}]
    pop = format_population_progress(rows, 10)
    # mean over the finite members 2.0, best 3.0; population sps 3 x 10.
    assert "return     2.00  best     3.00" in pop and "sps        30" in pop
    assert pop.endswith("best     3.00")   # what the columns mean is printed once (population_legend), not per line
    # The ETA is the per-member steps left at each member's rate: (10 - 5) / 10 = 0.5 s, not / 30.
    rows = [{"env_steps": 500, "sps": 100.0}] * 9
    pop = format_population_progress(rows, 1000)
    assert "sps       900" in pop and "eta   0m05s" in pop


def test_a_sweeps_progress_lines_are_explained_once(capsys):
    program = types.SimpleNamespace(isolated=True, size=2, names=("a", "b"))
    tracking = Tracking(None, program, 20, {"tensorboard": False}, quiet=False, resume=False, resume_env_steps=None,
                        saved_rows=None, manifest_extra={})
    for steps in (10, 20):
        tracking.record(None, 0, [_row(steps, sps=5.0), _row(steps, sps=5.0)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == population_legend(2) == ("progress of 2 members: return = mean over the members, best = the "
                                                "best member's; steps are per member, sps over all of them")
    assert [line[:8] for line in lines[1:]] == ["[ 50.0%]", "[100.0%]"] and "members" not in "".join(lines[1:])


def test_progress_is_printed_unless_quiet(tmp_path):
    stream = io.StringIO()
    with Tracker(tmp_path, PPOConfig(), tensorboard=False, process=PROCESS, stream=stream, total_env_steps=20) as t:
        t.log(_row(10))
    assert stream.getvalue().startswith("[ 50.0%] steps         10/20")


def test_cost_totals_by_hand():
    rows = [{"env_steps": 100, "cost/device_s": 2.0, "cost/env_steps_per_device_s": 50.0, "cost/checkpoint_bytes": 0,
             "cost/collective_bytes_per_update": 8, "memory/peak_bytes_in_use": None},
            {"env_steps": 200, "cost/device_s": 4.0, "cost/env_steps_per_device_s": 25.0, "cost/checkpoint_bytes": 300,
             "cost/collective_bytes_per_update": 8, "memory/peak_bytes_in_use": 1000}]
    taken_back = [{"env_steps": 300, "cost/device_s": 1.0, "cost/env_steps_per_device_s": 100.0,
                   "cost/checkpoint_bytes": 300, "cost/collective_bytes_per_update": 8, "memory/peak_bytes_in_use": 4000}]
    cost = cost_totals(rows, taken_back, unlogged_checkpoint_bytes=50)
    assert cost == {"device_s": 7.0, "env_steps": 200, "env_steps_computed": 300, "env_steps_per_device_s": 300 / 7,
                    "checkpoint_bytes": 650, "unlogged_checkpoint_bytes": 50, "collective_bytes_per_update": 8,
                    "peak_memory_bytes": 4000, "chunks": 2, "superseded_chunks": 1}
    # Rows from before the cost columns, or none: zeros and nulls, never an error.
    assert cost_totals([{"env_steps": 5}])["device_s"] == 0.0
    assert cost_totals([])["env_steps_per_device_s"] is None


def test_the_config_is_written_to_tensorboard_as_hparams_and_a_text_table_once(tmp_path):
    from tensorboardX.proto.plugin_hparams_pb2 import HParamsPluginData

    config = PPOConfig(learning_rate=1e-3, hidden_sizes=(32, 16), normalize_obs=True)
    with Tracker(tmp_path, config, quiet=True, process=PROCESS) as t:
        t.log(_row(10), [{"env_steps": 10, "updates": 1, "loss": 0.5}])
    values = {tag: [v for _, v in tb_summaries(tmp_path / "tb" / "hparams") if v.tag == tag]
              for tag in ("_hparams_/experiment", "_hparams_/session_start_info", "hyperparameters/text_summary")}
    assert all(len(v) == 1 for v in values.values()), values
    plugin = lambda v: HParamsPluginData.FromString(v.metadata.plugin_data.content)  # noqa: E731
    experiment = plugin(values["_hparams_/experiment"][0]).experiment
    assert {h.name for h in experiment.hparam_infos} == set(config_to_dict(config))
    assert [m.name.tag for m in experiment.metric_infos] == ["episode_return_mean", "eval/return_mean",
                                                             "episode_length_mean"]
    start = plugin(values["_hparams_/session_start_info"][0]).session_start_info.hparams
    assert start["learning_rate"].number_value == 1e-3 and start["normalize_obs"].bool_value is True
    assert start["hidden_sizes"].string_value == "[32, 16]" and start["env"].string_value == config.env
    table = values["hyperparameters/text_summary"][0].tensor.string_val[0].decode()
    assert table.startswith("|param|value|\n|-|-|\n") and "|learning_rate|0.001|" in table.splitlines()
    # The table's metrics: the session's last values, in the same child run.
    assert {(v.tag, step, v.simple_value) for step, v in tb_summaries(tmp_path / "tb" / "hparams")
            if v.HasField("simple_value")} == {("episode_return_mean", 10, 1.0), ("episode_length_mean", 10, 1.0)}
    # The scalar event file holds only the rows' scalars.
    assert {v.tag for _, v in tb_summaries(tmp_path / "tb")} == {k for k in _row(10, loss=0.5) if k != "env_steps"}
    # A resume (even of a run whose tb/hparams was lost) leaves one copy.
    before = sorted((tmp_path / "tb" / "hparams").iterdir())
    Tracker(tmp_path, config, quiet=True, process=PROCESS, resume=True, resume_env_steps=10).close()
    assert sorted((tmp_path / "tb" / "hparams").iterdir()) == before
    for path in before:
        path.unlink()
    Tracker(tmp_path, config, quiet=True, process=PROCESS, resume=True, resume_env_steps=10).close()
    assert len([v for _, v in tb_summaries(tmp_path / "tb" / "hparams") if v.tag == "hyperparameters/text_summary"]) == 1


def test_no_tensorboard_writes_no_hparams(tmp_path):
    _tracker(tmp_path).close()
    assert not (tmp_path / "tb").exists()


def test_an_image_reaches_tensorboard(tmp_path):
    with Tracker(tmp_path, PPOConfig(), quiet=True, process=PROCESS) as t:
        t.add_image("video/greedy", b"GIF89a-bytes", 4, 6, 30)
    (step, value), = [(s, v) for s, v in tb_summaries(tmp_path / "tb") if v.tag == "video/greedy"]
    assert step == 30 and (value.image.height, value.image.width, value.image.colorspace) == (4, 6, 3)
    assert value.image.encoded_image_string == b"GIF89a-bytes"


def test_the_hparams_metrics_are_the_kept_rows_last_values(tmp_path):
    t = Tracker(tmp_path, PPOConfig(), quiet=True, process=PROCESS)
    t.log(_row(10, episode_return_mean=3.0))
    t.rewind(0)  # rows taken back: their values are not the run's
    t.log(_row(20, episode_return_mean=5.0))
    t.log(_row(30, episode_return_mean=None))  # no episode ended: the last value stays
    t.close()
    assert {(v.tag, step, v.simple_value) for step, v in tb_summaries(tmp_path / "tb" / "hparams")
            if v.HasField("simple_value")} == {("episode_return_mean", 20, 5.0), ("episode_length_mean", 30, 1.0)}
