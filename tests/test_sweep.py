"""Sweeps: member specs, validation, one-program populations equal to single runs, outputs, resume."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import pathlib
import subprocess
import sys

import jax
import numpy as np
import pytest

import envs
import rljax
from rljax.agents.dqn import DQNConfig
from rljax.agents.ppo import PPOConfig
from rljax.agents.sac import SACConfig
from rljax.sweep import SweepSpec, build_members, parse_grid, parse_sample, run_sweep
from rljax.tracking import read_metrics

ROOT = pathlib.Path(__file__).resolve().parents[1]
PPO = PPOConfig(total_timesteps=8 * 16 * 6, updates_per_chunk=2, num_envs=8, num_steps=16, num_epochs=2,
                num_minibatches=2, hidden_sizes=(16,))
DQN = DQNConfig(total_timesteps=4 * 2 * 60, updates_per_chunk=10, num_envs=4, num_steps=2, batch_size=16,
                buffer_size=64, learning_starts=32, target_update_interval=16, hidden_sizes=(16,), n_step=3,
                prioritized=True)


def test_grid_sample_and_members():
    grid = parse_grid(["learning_rate=1e-4,3e-4,1e-3", "env.length=0.5,1"])
    assert grid == {"learning_rate": [1e-4, 3e-4, 1e-3], "env.length": [0.5, 1.0]}
    sample = parse_sample(["ent_coef=uniform:0:0.05", "clip_eps=log:0.1:0.3"])
    assert sample == {"ent_coef": ("uniform", 0.0, 0.05), "clip_eps": ("log", 0.1, 0.3)}
    _, params = envs.make("CartPole-v1")
    members = build_members(PPO, params, SweepSpec(grid=grid, sample=sample, num_samples=2, seeds=(0, 1)))
    assert len(members) == 3 * 2 * 2 * 2
    assert {m.seed for m in members} == {0, 1} and len({m.label for m in members}) == 12
    for m in members:
        assert 0.0 <= m.values["ent_coef"] <= 0.05 and 0.1 <= m.values["clip_eps"] <= 0.3
    # The random draw is reproducible.
    again = build_members(PPO, params, SweepSpec(grid=grid, sample=sample, num_samples=2, seeds=(0, 1)))
    assert [m.values for m in members] == [m.values for m in again]


@pytest.mark.parametrize("spec, match", [
    (SweepSpec(grid={"num_envs": [4, 8]}), r"'num_envs' is structural.*sweepable fields of PPOConfig: learning_rate"),
    (SweepSpec(grid={"env.pole_colour": [1.0]}), r"not a param of env 'CartPole-v1'.*env.length"),
    (SweepSpec(grid={"learning_rate": [-1.0]}), "learning_rate must be > 0"),
    (SweepSpec(sample={"gamma": ("log", 0.9, 0.99)}, num_samples=0), "--num-samples"),
])
def test_bad_sweeps_are_rejected_clearly(spec, match):
    with pytest.raises(ValueError, match=match):
        run_sweep(PPO, spec, quiet=True)


def _leaves(params, index=None):
    return [np.asarray(x) if index is None else np.asarray(x)[index] for x in jax.tree.leaves(params)]


SAC = SACConfig(total_timesteps=4 * 60, updates_per_chunk=10, num_envs=4, num_steps=1, batch_size=16,
                buffer_size=128, learning_starts=32, hidden_sizes=(16,))


@pytest.mark.parametrize("config, field", [(PPO, "learning_rate"), (DQN, "learning_rate"), (SAC, "critic_learning_rate")],
                         ids=["ppo", "dqn", "sac"])
def test_member_equals_single_run(config, field):
    spec = SweepSpec(grid={field: [1e-4, 1e-3]}, seeds=(0, 1))
    result, members, _ = run_sweep(config, spec, quiet=True)
    assert result.timings["num_chunks"] == len(result.member_rows[0])
    for idx in (0, 3):
        m = members[idx]
        single = rljax.train(dataclasses.replace(config, **{field: m.values[field]}, seed=m.seed), quiet=True)
        for a, b in zip(_leaves(single.agent.params_of(single.state)), _leaves(result.agent.params_of(result.state), idx)):
            np.testing.assert_allclose(a, b, atol=1e-5)
        assert [r["episode_return_mean"] for r in single.rows] == [r["episode_return_mean"] for r in result.member_rows[idx]]


@pytest.mark.parametrize("config", [PPO, DQN, SAC], ids=["ppo", "dqn", "sac"])
def test_population_init_has_no_batched_lapack_call(config):
    """A batched LAPACK QR (a vmapped orthogonal init) can deadlock XLA's CPU pool (it hung CI):
    every LAPACK call in the population's init program must be unbatched."""
    import re

    from rljax.agents import build_agent
    from rljax.loop import population_init
    from rljax.sweep import make_population

    env, params = envs.make(config.env)
    members = build_members(config, params, SweepSpec(seeds=(0, 1, 2)))
    population = make_population(config, params, members, 1)
    agent = build_agent(config, env, params, None)
    keys = jax.vmap(jax.random.key)(np.asarray(population.seeds, np.uint32))
    text = population_init(agent, 4).lower(keys, population.hparams, population.env_params).as_text()
    calls = [line for line in text.splitlines() if re.search(r"custom_call @lapack_", line)]
    assert calls, "expected the orthogonal initialiser's QR in the init program"
    batched = [line for line in calls if "num_batch_dims" in line and 'num_batch_dims = "0"' not in line]
    assert not batched, batched[0][:400]


def test_env_param_sweep_changes_the_physics():
    spec = SweepSpec(grid={"env.length": [0.1, 2.0]}, seeds=(0,))
    result, members, _ = run_sweep(PPO, spec, quiet=True)
    np.testing.assert_allclose(np.asarray(result.state.env_params.length), [0.1, 2.0])
    lengths = [[r["episode_length_mean"] for r in rows] for rows in result.member_rows]
    assert lengths[0] != lengths[1]


def test_outputs_and_resume(tmp_path):
    spec = SweepSpec(grid={"learning_rate": [1e-4, 1e-3], "ent_coef": [0.0, 0.01]}, seeds=(0, 1))
    full, members, agg = run_sweep(PPO, spec, run_dir=tmp_path / "full", quiet=True, checkpoint_every=1)
    root = tmp_path / "full"
    rows = list(csv.DictReader(open(root / "summary.csv")))
    assert len(rows) == 8 and {"learning_rate", "ent_coef", "seed", "final_return", "auc"} <= set(rows[0])
    assert len(agg) == 4 and agg[0]["final_mean"] >= agg[-1]["final_mean"] and agg[0]["seeds"] == 2
    assert (root / "summary.md").read_text().count("\n") == 4 + 2
    assert len(list((root / "plots").glob("*.png"))) == 4
    for m in members:
        d = root / "members" / m.name
        assert len(read_metrics(d)) == 3 and json.loads((d / "config.json").read_text())["seed"] == m.seed
        assert (d / "tb").is_dir()
    assert json.loads((root / "members" / members[5].name / "config.json").read_text())["learning_rate"] == \
        members[5].values["learning_rate"]

    part, _, _ = run_sweep(PPO, spec, run_dir=tmp_path / "cut", quiet=True, checkpoint_every=1,
                           on_chunk=lambda c, s, r: c == 0)
    assert part.preempted == "on_chunk"
    rest, _, _ = run_sweep(PPO, spec, run_dir=tmp_path / "cut", quiet=True, resume=True, checkpoint_every=1)
    for a, b in zip(jax.tree.leaves(full.agent.params_of(full.state)), jax.tree.leaves(rest.agent.params_of(rest.state))):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    for m in members:
        strip = lambda rows: [{k: v for k, v in r.items() if k not in ("sps", "wall_time_s")} for r in rows]  # noqa: E731
        assert strip(read_metrics(tmp_path / "cut" / "members" / m.name)) == strip(read_metrics(root / "members" / m.name))
    # The resumed sweep's summary covers the whole run, not just the part after the resume.
    assert (tmp_path / "cut" / "summary.csv").read_text() == (root / "summary.csv").read_text()


def test_sweep_cli_and_structural_field_error(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "experiments.ppo_cartpole", "sweep", "--total-timesteps", "2048", "--num-steps", "64",
           "--no-compile-cache", "--quiet"]
    bad = subprocess.run(cmd + ["--grid", "num_envs=4,8"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "structural" in bad.stderr and "learning_rate" in bad.stderr
    ok = subprocess.run(cmd + ["--grid", "gamma=0.9,0.99", "--seeds", "2", "--run-dir", str(tmp_path / "s")], env=env,
                        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert len(list(csv.DictReader(open(tmp_path / "s" / "summary.csv")))) == 4
