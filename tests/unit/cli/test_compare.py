"""``rljax inspect A B ...`` (:mod:`rljax.cli.compare`) on run and sweep directories written by hand:
the table's figures, the fields that differ (a sweep's seeds among them), the legend's labels, the
plot's data, and a directory that holds no run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rljax.cli.compare import compare_figure, comparison_text, curves, differing_fields, legend_labels
from rljax.cli.plotting import RAW_GID
from rljax.cli.rundata import smooth
from rljax.cli.main import main

PLAN = {"env_steps_per_update": 100, "updates_per_chunk": 2}


def _write_run(path, config, returns, walls, evals=None):
    """A run of len(returns) updates, 2 per chunk: metrics.jsonl per update, chunks.jsonl per chunk."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(config))
    (path / "manifest.json").write_text(json.dumps({"algorithm": "PPOConfig", "plan": PLAN}))
    rows = [{"env_steps": 100 * (i + 1), "episode_return_mean": r} for i, r in enumerate(returns)]
    chunks = []
    for c in range(len(returns) // 2):
        pair = rows[2 * c:2 * c + 2]
        chunk = {"env_steps": pair[1]["env_steps"], "wall_time_s": walls[c], "sps": 1000.0 * (c + 1),
                 "episode_return_mean": float(np.mean([r["episode_return_mean"] for r in pair]))}
        if evals:
            chunk["eval/return_mean"] = evals[c]
        pair[1].update({k: v for k, v in chunk.items() if k != "episode_return_mean"})
        chunks.append(chunk)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "chunks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in chunks))


BASE = {"env": "CartPole-v1", "seed": 0, "total_timesteps": 400, "learning_rate": 3e-4, "num_envs": 4}


@pytest.fixture
def runs(tmp_path):
    _write_run(tmp_path / "a", BASE, [10, 20, 30, 50], [1.0, 2.0])
    _write_run(tmp_path / "b", {**BASE, "learning_rate": 1e-3}, [10, 40, 80, 100], [1.5, 3.0], evals=[60.0, 90.0])
    sweep = tmp_path / "sw"
    members = [{"index": i, "seed": i, "values": {"num_envs": 8}, "name": f"m{i}", "label": "num_envs=8"}
               for i in range(2)]
    sweep.mkdir()
    (sweep / "sweep.json").write_text(json.dumps({"members": members}))
    for i, returns in enumerate(([0, 0, 10, 20], [0, 0, 30, 40])):
        _write_run(sweep / "members" / f"m{i}", {**BASE, "num_envs": 8, "seed": i}, returns, [2.0, 4.0])
    return tmp_path


def test_the_table_compares_runs_and_a_sweeps_config(runs):
    items = curves([runs / "a", runs / "b", runs / "sw"])
    assert [c.label for c in items] == ["a", "b", "sw:num_envs=8"]
    lines = comparison_text(items).splitlines()
    head = lines[1].split()
    assert head[:3] == ["run", "algorithm", "env"] and head[-3:] == ["learning_rate", "num_envs", "seed"]
    a, b, sw = (line.split() for line in lines[2:5])
    # final = the mean of the last 2 chunks' returns: a (15 + 40) / 2; best: the best chunk (as
    # rljax inspect RUN_DIR says it, whatever --log-every), not the best single update (50).
    assert a[:7] == ["a", "PPO", "400", "/", "400", "27.50", "40.00"] and a[7] == "n/a"
    assert b[5:8] == ["57.50", "90.00", "90.00"]  # final (25 + 90) / 2; best chunk 90; its last evaluation
    # The sweep's config: the mean over its 2 seeds (finals 7.5 and 17.5; best chunks 15 and 35).
    assert sw[:3] == ["sw:num_envs=8", "(2", "seeds)"] and sw[7:10] == ["12.50", "25.00", "n/a"]
    # A sweep's config shows its first seed's config, with the seeds it averages: the runs' seed 0 is
    # not "the same in every run" (it said seed=0 of the 2-seed config).
    assert sw[-4:] == ["0.0003", "8", "[0,", "1]"] and a[-1] == b[-1] == "0"
    assert lines[-1] == 'the same in every run: 2 config fields (env="CartPole-v1", total_timesteps=400, ...)'


def test_differing_fields_and_colliding_names(tmp_path):
    assert differing_fields([{"a": 1, "b": [1, 2]}, {"a": 1, "b": [1, 3], "c": 0}]) == ["b", "c"]
    _write_run(tmp_path / "x" / "run", BASE, [1, 2], [1.0])
    _write_run(tmp_path / "y" / "run", BASE, [1, 2], [1.0])
    assert [c.label for c in curves([tmp_path / "x" / "run", tmp_path / "y" / "run"])] == [
        str(tmp_path / "x" / "run"), str(tmp_path / "y" / "run")]


def test_inspect_with_several_directories_prints_the_table_and_plots(runs, tmp_path, capsys):
    assert main(["inspect", str(runs / "a"), str(runs / "b"), "--out", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("2 runs compared") and out.rstrip().endswith(f"plots: {tmp_path / 'cmp' / 'compare.png'}")
    assert (tmp_path / "cmp" / "compare.png").stat().st_size > 0
    assert main(["inspect", str(runs / "a"), str(tmp_path / "nothing")]) == 2
    assert "rljax inspect: error:" in capsys.readouterr().err


def test_the_legend_names_each_curve_by_the_fields_that_differ(runs):
    # It named the directories ("a", "b", "sw:num_envs=8"), so the legend did not say what was compared.
    items = curves([runs / "a", runs / "b", runs / "sw"])
    expected = ["lr=0.0003, num_envs=4 (seed 0)", "lr=0.001, num_envs=4 (seed 0)", "lr=0.0003, num_envs=8 (2 seeds)"]
    assert legend_labels(items) == expected
    fig = compare_figure(items, window=2)
    by_steps = fig.axes[0]
    assert [t.get_text() for t in by_steps.get_legend().get_texts()] == expected
    main_lines = [line for line in by_steps.lines if line.get_gid() != RAW_GID and line.get_linestyle() == "-"]
    np.testing.assert_allclose(main_lines[0].get_ydata(), smooth([10, 20, 30, 50], 2))  # run a, per update
    np.testing.assert_allclose(main_lines[2].get_ydata(), smooth([0, 0, 20, 30], 2))  # the sweep's mean of 2 seeds
    # Only the seed differs: named by it; nothing differs: by the run's name.
    assert legend_labels(curves([runs / "sw" / "members" / "m0", runs / "sw" / "members" / "m1"])) == ["seed 0",
                                                                                                       "seed 1"]
    assert legend_labels(curves([runs / "a", runs / "a"])) == ["a", "a"]
