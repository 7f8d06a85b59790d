"""A sweep's host work scales with its population: one provenance for all members, tensorboard
events written without a thread per member, plots capped and drawn on demand, members stacked in
one compiled program; the files every reader relies on unchanged."""

from __future__ import annotations

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
import rljax.training.sweep as sweep
import rljax.store.tracking as tracking
from rljax.agents.ppo import PPOConfig
from rljax.training.population import Population
from rljax.training.sweep import SweepSpec, build_members, make_population, plot_configs, run_sweep
from rljax.store.tracking import read_chunks, read_metrics

# tests/unit/training/test_sweep.py's PPO, and its 8 members in every sweep here: one chunk program for this
# module and that one (the persistent compile cache serves the others).
PPO = PPOConfig(total_timesteps=8 * 16 * 6, updates_per_chunk=2, num_envs=8, num_steps=16, num_epochs=2,
                num_minibatches=2, hidden_sizes=(16,))


def _events(tb_dir):
    """Every event of every file in ``tb_dir``, file by file (TFRecord framing, checksums checked
    as TensorBoard checks them)."""
    from tensorboardX.proto import event_pb2
    from tensorboardX.record_writer import masked_crc32c

    files = []
    for path in sorted(tb_dir.glob("events.out.tfevents.*")):
        data, pos, events = path.read_bytes(), 0, []
        while pos < len(data):
            n = int.from_bytes(data[pos:pos + 8], "little")
            assert int.from_bytes(data[pos + 8:pos + 12], "little") == masked_crc32c(data[pos:pos + 8])
            payload = data[pos + 12:pos + 12 + n]
            assert int.from_bytes(data[pos + 12 + n:pos + 16 + n], "little") == masked_crc32c(payload)
            events.append(event_pb2.Event.FromString(payload))
            pos += 16 + n
        files.append(events)
    return files


def test_member_files_provenance_once_and_tensorboard_purged_on_resume(tmp_path, monkeypatch):
    """Each member keeps its config.json, manifest.json, metrics.jsonl, chunks.jsonl and tb/ events
    (one event per metrics.jsonl row, every finite scalar); git is asked once per process, not once per member; a resumed
    sweep's new event files start with the purge at the checkpoint's step."""
    calls = []
    real = tracking._git_state
    monkeypatch.setattr(tracking, "_git_state", lambda: calls.append(1) or real())
    spec = SweepSpec(grid={"learning_rate": [1e-4, 1e-3]}, seeds=(0, 1, 2, 3))
    part, members, _ = run_sweep(PPO, spec, run_dir=tmp_path / "s", quiet=True, plots=False, checkpoint_every=1,
                                 on_chunk=lambda c, s, r: c == 0)
    assert part.preempted == "on_chunk"
    assert len(calls) == 2  # the sweep's own manifest and one provenance for all 8 members
    root = tmp_path / "s"
    commits = set()
    for m in members:
        record = json.loads((root / "members" / m.name / "manifest.json").read_text())
        assert record["seed"] == m.seed and record["sweep_member"] == m.index and record["packages"]["jax"]
        commits.add(record["git_commit"])
    assert len(commits) == 1
    hashes = {json.loads((root / "members" / m.name / "manifest.json").read_text())["config_hash"] for m in members}
    assert len(hashes) == 8  # one config per member (learning rate x seed), not one shared record
    calls.clear()
    run_sweep(PPO, spec, run_dir=root, quiet=True, plots=False, checkpoint_every=1, resume=True)
    assert len(calls) == 1  # the resume's provenance, once
    first_chunk_steps = 8 * 16 * 2
    for m in members:
        d = root / "members" / m.name
        rows = read_chunks(d)
        assert len(rows) == 3
        files = _events(d / "tb")
        assert len(files) == 2
        assert files[0][0].file_version == "brain.Event:2" and files[1][0].file_version == "brain.Event:2"
        purge = [e for e in files[1] if e.HasField("session_log")]
        assert len(purge) == 1 and purge[0].step == first_chunk_steps + 1
        logged = {(v.tag, e.step): v.simple_value for f in files for e in f for v in e.summary.value}
        expected = {(k, r["env_steps"]): v for r in read_metrics(d) for k, v in r.items()
                    if k != "env_steps" and isinstance(v, (int, float)) and math.isfinite(v)}
        assert logged.keys() == expected.keys()
        assert all(np.float32(v) == np.float32(logged[k]) for k, v in expected.items())
        assert json.loads((d / "manifest.json").read_text())["resumes"][-1]["git_commit"] == real()["git_commit"]


def test_plots_are_capped_at_the_best_configs_and_drawn_on_demand(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep, "MAX_PLOTS", 2)
    spec = SweepSpec(grid={"learning_rate": [1e-4, 3e-4, 1e-3, 3e-3]}, seeds=(0, 1))
    _, members, agg = run_sweep(PPO, spec, run_dir=tmp_path / "s", quiet=True, checkpoints=False,
                                tensorboard=False)
    plots = tmp_path / "s" / "plots"
    assert len(list(plots.glob("*.png"))) == 2
    assert "plot_configs" in (tmp_path / "s" / "summary.md").read_text()
    worst = agg[-1]["config"]
    drawn = plot_configs(tmp_path / "s", [worst])
    assert len(drawn) == 1 and drawn[0].exists() and drawn[0].stat().st_size > 0
    assert len(list(plots.glob("*.png"))) == 3
    with pytest.raises(ValueError, match="is not a config of the sweep"):
        plot_configs(tmp_path / "s", ["learning_rate=42"])


def test_many_seeds_share_one_legend_entry(tmp_path, monkeypatch):
    """A config with more seeds than LEGEND_SEEDS is drawn as one line collection (what keeps a
    512-seed plot cheap), and the PNG is written."""
    monkeypatch.setattr(sweep, "LEGEND_SEEDS", 2)
    _, members, _ = run_sweep(PPO, SweepSpec(seeds=tuple(range(8))), run_dir=tmp_path / "s", quiet=True, checkpoints=False,
                              tensorboard=False)
    (png,) = (tmp_path / "s" / "plots").glob("*.png")
    assert png.stat().st_size > 0


def test_population_stack_keeps_each_leafs_dtype_and_weak_type():
    """The population's leaves are stacked by one compiled program; they must equal (values, dtype,
    weak type) what stacking member by member gave, so the init program and its results are unchanged."""
    cfg = PPOConfig()
    _, params = envs.make("CartPole-v1")
    members = build_members(cfg, params, SweepSpec(grid={"env.length": [0.5, 1.0]}, seeds=(0, 1)))
    pop = make_population(cfg, params, members)
    assert isinstance(pop, Population)
    configs = [sweep._member_config(cfg, m) for m in members]
    env_params = [sweep._member_env_params(params, m) for m in members]
    for stacked, per_member in ((pop.hyperparams, [c.hyperparams() for c in configs]), (pop.env_params, env_params)):
        reference = jax.tree.map(lambda *xs: jnp.stack([jnp.asarray(x) for x in xs]), *per_member)
        for a, b in zip(jax.tree.leaves(stacked), jax.tree.leaves(reference)):
            assert (a.dtype, a.weak_type) == (b.dtype, b.weak_type)
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(np.asarray(pop.env_params.length), [0.5, 0.5, 1.0, 1.0])
