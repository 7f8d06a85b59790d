"""Sweeps: member specs, validation, one-program populations equal to single runs, outputs, resume."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os

import jax
import numpy as np
import pytest

import envs
import rljax
from rljax.agents.dqn import DQNConfig
from rljax.agents.ppo import PPOConfig
from rljax.agents.sac import SACConfig
from rljax.training.hooks.observe import is_measured
from rljax.training.sweep import (Member, SweepSpec, build_members, make_population, parse_grid, parse_sample,
                                  rank_configs, run_sweep, summarize, swept_ranges_drawn)
from rljax.store.tracking import read_chunks

# The PPO sweeps of the default suite below (bar the randomised one, whose env differs) have 8 members of this
# PPO: one compiled chunk program for all of them (tests/conftest.py's persistent compile cache serves the
# others; a member count or a structural field of a test's own would compile another, ~4-8 s on 2 cores).
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


def test_a_randomisation_range_is_swept_by_its_bounds_and_refused_in_other_forms():
    for parse, spec in ((parse_grid, "randomize=length=0.5:1,length=0.25:2"), (parse_sample, "randomize=log:1:2"),
                        (parse_sample, "randomize.length=uniform:1:2")):
        with pytest.raises(ValueError, match=r"--grid: randomize.NAME=LOW:HIGH,LOW:HIGH,\.\.\. \(e.g. "
                                             r"randomize.length=0.25:1,0.25:2"):
            parse([spec])
    assert parse_grid(["randomize.length=0.25:1, log:0.5:2"]) == {"randomize.length": ["0.25:1", "log:0.5:2"]}
    with pytest.raises(ValueError, match="need finite LOW < HIGH, got LOW=2, HIGH=1"):
        parse_grid(["randomize.length=2:1"])
    base = dataclasses.replace(PPO, randomize=("length=0.25:2.0",))
    env, params = envs.make(base.env)
    with pytest.raises(ValueError, match=r"the base config draws length per episode; give it masscart=LOW:HIGH"):
        build_members(base, params, SweepSpec(grid={"randomize.masscart": ["1:2"]}))
    # run_sweep draws a swept range the base does not (swept_ranges_drawn), the grid's first range in
    # the base; uniform and log ranges of one param cannot share a program.
    spec = SweepSpec(grid={"randomize.masscart": ["1:2", "0.5:1"]})
    assert swept_ranges_drawn(base, spec).randomize == ("length=0.25:2.0", "masscart=1:2")
    assert swept_ranges_drawn(PPO, spec).randomize == ("masscart=1:2",)
    assert swept_ranges_drawn(base, SweepSpec(grid={"randomize.length": ["0.5:1"]})) is base
    with pytest.raises(ValueError, match=r"--grid randomize.masscart=1:2,log:1:2: the ranges of one param must all "
                                         r"be uniform \(LOW:HIGH\) or all log-uniform"):
        swept_ranges_drawn(PPO, SweepSpec(grid={"randomize.masscart": ["1:2", "log:1:2"]}))
    with pytest.raises(ValueError, match=r"the base run draws length uniformly \(length=0.25:2.0\); a sweep member "
                                         r"must too \(LOW:HIGH\)"):
        run_sweep(base, SweepSpec(grid={"randomize.length": ["log:1:2"]}), quiet=True)


def test_each_member_draws_from_its_own_range_and_equals_its_single_run():
    from rljax.core.wrappers import RandomizeParamsState

    # The base draws masscart only: every member draws length too, from its own range (the README's
    # `sweep --grid randomize.length=...` with no --randomize).
    base = dataclasses.replace(PPO, randomize=("masscart=log:0.5:2",))
    spec = SweepSpec(grid=parse_grid(["randomize.length=0.25:0.5,1.5:2", "randomize.masscart=log:1:1.1"]))
    result, members, _ = run_sweep(base, spec, quiet=True)
    assert [m.values for m in members] == [{"randomize.length": "0.25:0.5", "randomize.masscart": "log:1:1.1"},
                                           {"randomize.length": "1.5:2", "randomize.masscart": "log:1:1.1"}]
    drawn = [x for x in jax.tree.leaves(result.state, is_leaf=lambda x: isinstance(x, RandomizeParamsState))
             if isinstance(x, RandomizeParamsState)][0].params
    length, masscart = np.asarray(drawn.length), np.asarray(drawn.masscart)
    assert np.all((length[0] >= 0.25) & (length[0] < 0.5)) and np.all((length[1] >= 1.5) & (length[1] < 2.0))
    assert np.all((masscart >= 1.0) & (masscart < 1.1))
    single = rljax.train(dataclasses.replace(base, randomize=("masscart=log:1:1.1", "length=1.5:2")),
                         options=rljax.RunOptions(quiet=True))
    for a, b in zip(_leaves(single.agent.params_of(single.state)), _leaves(result.agent.params_of(result.state), 1)):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_typed_values_are_kept_exactly_in_labels_and_member_configs():
    # Neither a range's bounds nor a number lose digits (they were rounded to 6: log:0.123457:1.98765);
    # a number whose short form is the same number keeps it (1e-4 is 0.0001).
    _, params = envs.make("CartPole-v1")
    spec = SweepSpec(grid=parse_grid(["randomize.length=log:0.123456789:1.987654321",
                                      "learning_rate=0.123456789,0.1234567891,1e-4"]))
    base = swept_ranges_drawn(PPO, spec)
    members = build_members(base, params, spec)
    assert [m.label for m in members] == [
        "randomize.length=log:0.123456789:1.987654321,learning_rate=0.123456789",
        "randomize.length=log:0.123456789:1.987654321,learning_rate=0.1234567891",
        "randomize.length=log:0.123456789:1.987654321,learning_rate=0.0001"]
    configs = make_population(base, params, members).configs
    assert {c.randomize for c in configs} == {("length=log:0.123456789:1.987654321",)}
    assert [c.learning_rate for c in configs] == [0.123456789, 0.1234567891, 1e-4]


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


# With --slow only: by default test_each_member_draws_from_its_own_range_and_equals_its_single_run (PPO), PQN's
# member in tests/unit/agents/test_pqn.py, and replay-buffer members swept in tests/integration/test_learning_signal.py.
@pytest.mark.parametrize("config, field", [pytest.param(PPO, "learning_rate", marks=pytest.mark.slow),
                                           pytest.param(DQN, "learning_rate", marks=pytest.mark.slow),
                                           pytest.param(SAC, "critic_learning_rate", marks=pytest.mark.slow)],
                         ids=["ppo", "dqn", "sac"])
def test_member_equals_single_run(config, field):
    spec = SweepSpec(grid={field: [1e-4, 1e-3]}, seeds=(0, 1))
    result, members, _ = run_sweep(config, spec, quiet=True)
    assert result.timings["num_chunks"] == len(result.member_rows[0])
    for idx in (0, 3):
        m = members[idx]
        single = rljax.train(dataclasses.replace(config, **{field: m.values[field]}, seed=m.seed),
                             options=rljax.RunOptions(quiet=True))
        for a, b in zip(_leaves(single.agent.params_of(single.state)), _leaves(result.agent.params_of(result.state), idx)):
            np.testing.assert_allclose(a, b, atol=1e-5)
        assert [r["episode_return_mean"] for r in single.rows] == [r["episode_return_mean"] for r in result.member_rows[idx]]


def _qr_operand_shapes(jaxpr) -> list[tuple[int, ...]]:
    """The operand shape of every QR in ``jaxpr`` and the jaxprs nested in it (jit, scan, map)."""
    shapes = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "qr":
            shapes.append(tuple(eqn.invars[0].aval.shape))
        for param in eqn.params.values():
            for sub in param if isinstance(param, (list, tuple)) else [param]:
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    shapes += _qr_operand_shapes(inner)
    return shapes


@pytest.mark.parametrize("config", [PPO, DQN, SAC], ids=["ppo", "dqn", "sac"])
def test_population_init_has_no_batched_lapack_call(config):
    """A batched LAPACK QR (a vmapped orthogonal init) can deadlock XLA's CPU pool:
    every QR in the population's init program must be unbatched. Checked on every backend in the
    traced program (each QR's operand is one matrix), and on the CPU also in the lowered program
    (each LAPACK custom call has no batch dimension); other backends use other kernels (cuSOLVER),
    which this deadlock does not concern."""
    import re

    from rljax.agents import build_agent
    from rljax.training.program import population_init
    from rljax.training.sweep import make_population

    env, params = envs.make(config.env)
    members = build_members(config, params, SweepSpec(seeds=(0, 1, 2)))
    population = make_population(config, params, members, 1)
    agent = build_agent(config, env, params, None)
    keys = jax.vmap(jax.random.key)(np.asarray(population.seeds, np.uint32))
    init = population_init(agent, 4)
    shapes = _qr_operand_shapes(jax.make_jaxpr(init)(keys, population.hyperparams, population.env_params).jaxpr)
    assert shapes, "expected the orthogonal initialiser's QR in the init program"
    assert all(len(s) == 2 for s in shapes), shapes  # [rows, cols]: no member axis
    if jax.default_backend() != "cpu":
        return
    text = init.lower(keys, population.hyperparams, population.env_params).as_text()
    calls = [line for line in text.splitlines() if re.search(r"custom_call @lapack_", line)]
    assert calls, "expected the orthogonal initialiser's QR in the init program"
    batched = [line for line in calls if "num_batch_dims" in line and 'num_batch_dims = "0"' not in line]
    assert not batched, batched[0][:400]


def test_env_param_sweep_changes_the_physics():
    spec = SweepSpec(grid={"env.length": [0.1, 2.0]}, seeds=(0, 1, 2, 3))
    result, members, _ = run_sweep(PPO, spec, quiet=True)
    np.testing.assert_allclose(np.asarray(result.state.env_params.length), [0.1] * 4 + [2.0] * 4)
    lengths = [[r["episode_length_mean"] for r in rows] for rows in result.member_rows]
    assert members[0].seed == members[4].seed and lengths[0] != lengths[4]  # same seed, other pole


def test_outputs_and_resume(tmp_path):
    spec = SweepSpec(grid={"learning_rate": [1e-4, 1e-3], "ent_coef": [0.0, 0.01]}, seeds=(0, 1))
    full, members, agg = run_sweep(PPO, spec, run_dir=tmp_path / "full", quiet=True, checkpoint_every=1)
    root = tmp_path / "full"
    rows = list(csv.DictReader(open(root / "summary.csv")))
    assert len(rows) == 8 and {"learning_rate", "ent_coef", "seed", "final_return", "auc"} <= set(rows[0])
    assert len(agg) == 4 and agg[0]["final_mean"] >= agg[-1]["final_mean"] and agg[0]["seeds"] == 2
    assert agg[0]["score"] == "episode_return_mean" and agg[0]["score_mean"] == agg[0]["final_mean"]
    md = (root / "summary.md").read_text()
    assert md.startswith("score: training episode return") and md.count("\n| ") == 4 + 1
    assert len(list((root / "plots").glob("*.png"))) == 4
    for m in members:
        d = root / "members" / m.name
        assert len(read_chunks(d)) == 3 and json.loads((d / "config.json").read_text())["seed"] == m.seed
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
        strip = lambda rows: [{k: v for k, v in r.items() if not is_measured(k)} for r in rows]  # noqa: E731
        assert strip(read_chunks(tmp_path / "cut" / "members" / m.name)) == strip(read_chunks(root / "members" / m.name))
    # The resumed sweep's summary covers the whole run, not just the part after the resume.
    assert (tmp_path / "cut" / "summary.csv").read_text() == (root / "summary.csv").read_text()


def test_sweep_cli_and_structural_field_error(tmp_path, capsys):
    # The experiment module's sweep command in this process, with flags that make the module's PPO (so
    # its 8-member program is compiled once for the module); `python -m experiments.ppo_cartpole sweep`
    # in a subprocess: tests/integration/test_doc_commands.py (the README's sweeps) and test_population.py.
    from experiments import ppo_cartpole

    flags = ["sweep", "--total-timesteps", str(PPO.total_timesteps), "--updates-per-chunk", "2", "--num-envs", "8",
             "--num-steps", "16", "--num-epochs", "2", "--num-minibatches", "2", "--hidden-sizes", "16",
             "--no-compile-cache", "--quiet"]
    capsys.readouterr()
    assert ppo_cartpole.main(flags + ["--grid", "num_envs=4,8"]) == 2
    err = capsys.readouterr().err
    assert "structural" in err and "learning_rate" in err
    status = ppo_cartpole.main(flags + ["--grid", "gamma=0.9,0.99", "--seeds", "4", "--run-dir", str(tmp_path / "s")])
    assert status == 0, capsys.readouterr().err[-2000:]
    assert len(list(csv.DictReader(open(tmp_path / "s" / "summary.csv")))) == 8


# ------------------------------------------------------------------------------------------------
# Ranking: by the evaluation score when there is one, ties by AUC (never by member order)
# ------------------------------------------------------------------------------------------------


def _rows(returns, evals=None, episodes=16):
    """Hand-built metrics rows, one per chunk of 100 env steps; ``evals[i]`` (None: not evaluated)."""
    rows = []
    for i, ret in enumerate(returns):
        row = {"env_steps": 100 * (i + 1), "episode_return_mean": ret, "policy_loss": 0.1}
        if evals is not None and evals[i] is not None:
            row.update({"eval/return_mean": evals[i], "eval/return_std": 0.0, "eval/episodes": episodes})
        rows.append(row)
    return rows


def _members(labels, seeds=(0,)):
    out = []
    for label in labels:
        for seed in seeds:
            i = len(out)
            out.append(Member(index=i, seed=seed, values={"learning_rate": float(i // len(seeds))},
                              name=f"{i:03d}-s{seed}", label=label))
    return out


def _md_order(path):
    """(rank, config) of each table row of summary.md."""
    rows = [line.split(" | ") for line in path.read_text().splitlines() if line.startswith("| ") and "---" not in line]
    return [(int(r[0][2:]), r[1]) for r in rows[1:]]


def test_training_score_ties_are_ranked_by_auc_not_member_order(tmp_path):
    # a, b and c all end at 500; c got there first, then b, then a; d is worse; e equals c exactly.
    members = _members(["a", "b", "c", "d", "e"])
    rows = [_rows([10, 20, 500, 500]), _rows([10, 400, 500, 500]), _rows([300, 500, 500, 500]),
            _rows([10, 20, 30, 40]), _rows([300, 500, 500, 500])]
    agg = summarize(tmp_path, members, rows, plots=False, stream=open(os.devnull, "w"))
    assert [(a["rank"], a["config"]) for a in agg] == [(1, "c"), (1, "e"), (3, "b"), (4, "a"), (5, "d")]
    assert all(a["score"] == "episode_return_mean" for a in agg) and agg[0]["score_mean"] == 500.0
    assert _md_order(tmp_path / "summary.md") == [(1, "c"), (1, "e"), (3, "b"), (4, "a"), (5, "d")]
    md = (tmp_path / "summary.md").read_text()
    assert "score: training episode return (`episode_return_mean`" in md and "last 10 % of chunks" in md
    csv_rows = list(csv.DictReader(open(tmp_path / "summary.csv")))
    assert {r["score_metric"] for r in csv_rows} == {"episode_return_mean"}
    assert [float(r["score"]) for r in csv_rows] == [500.0, 500.0, 500.0, 40.0, 500.0]
    assert all(r["eval_return"] == "" for r in csv_rows)
    # Listed in the reverse order, the ranking is the same: member order never decides.
    back = summarize(tmp_path, _members(["e", "d", "c", "b", "a"]), rows[::-1], plots=False,
                     stream=open(os.devnull, "w"))
    assert [(a["rank"], a["config"]) for a in back] == [(1, "c"), (1, "e"), (3, "b"), (4, "a"), (5, "d")]


def test_the_table_shows_the_digits_that_decide_the_rank(tmp_path):
    """Regression: "1.00 ± 0.00" ranked above "1.00 ± 0.00" by a difference the table hid. "hi" beats
    "lo" by its score (1.004 > 1.0); "lo" beats "late" by its AUC alone (1.0 > 0.99925), both ending
    at 1.0. Each deciding column widens until its neighbours differ; the others keep 2 decimals."""
    members = _members(["lo", "late", "hi"])
    rows = [_rows([1.0, 1.0, 1.0]), _rows([0.997, 1.0, 1.0]), _rows([1.004, 1.004, 1.004])]
    agg = summarize(tmp_path, members, rows, plots=False, stream=open(os.devnull, "w"))
    assert [(a["rank"], a["config"]) for a in agg] == [(1, "hi"), (2, "lo"), (3, "late")]
    table = [line for line in (tmp_path / "summary.md").read_text().splitlines() if line.startswith("| ") and
             "---" not in line][1:]
    assert table == ["| 1 | hi | 1 | 1.004 ± 0.000 | 1.004 ± 0.000 | 0 |",
                     "| 2 | lo | 1 | 1.000 ± 0.000 | 1.000 ± 0.000 | 0 |",
                     "| 3 | late | 1 | 1.000 ± 0.000 | 0.999 ± 0.000 | 0 |"]
    # Scores that differ in the second decimal, AUC that ties nowhere: 2 decimals as before.
    agg = summarize(tmp_path, members[:2], [_rows([1.0, 1.0]), _rows([0.5, 0.99])], plots=False,
                    stream=open(os.devnull, "w"))
    assert "| 1 | lo | 1 | 1.00 ± 0.00 | 1.00 ± 0.00 | 0 |" in (tmp_path / "summary.md").read_text()


def test_evaluation_score_ranks_the_sweep(tmp_path):
    # Two seeds per config. "stoch" has the best training return but the worst evaluation; "slow"
    # and "fast" both evaluate at 500 on every seed: the faster learner (higher AUC) ranks first,
    # though "slow" comes first in the sweep. The score is the last evaluation, not an average.
    members = _members(["slow", "fast", "stoch", "late"], seeds=(0, 1))
    rows = [_rows([10, 100, 450, 500], [None, 50, None, 500]), _rows([10, 120, 480, 500], [None, 60, None, 500]),
            _rows([200, 480, 500, 500], [None, 500, None, 500]), _rows([250, 490, 500, 500], [None, 500, None, 500]),
            _rows([300, 500, 500, 500], [None, 400, None, 300]), _rows([300, 500, 500, 500], [None, 420, None, 320]),
            _rows([10, 10, 20, 400], [None, 5, None, 490]), _rows([10, 10, 20, 400], [None, 5, None, 480])]
    out = io.StringIO()
    agg = summarize(tmp_path, members, rows, plots=True, stream=out)
    assert [(a["rank"], a["config"]) for a in agg] == [(1, "fast"), (2, "slow"), (3, "late"), (4, "stoch")]
    by = {a["config"]: a for a in agg}
    assert by["late"]["score_mean"] == 485.0 and by["late"]["eval_mean"] == 485.0 and by["late"]["score_std"] == 5.0
    assert by["stoch"]["final_mean"] == 500.0 and by["stoch"]["score_mean"] == 310.0
    assert all(a["score"] == "eval/return_mean" for a in agg)
    text = out.getvalue()
    assert text == (tmp_path / "summary.md").read_text() + "\n"
    assert text.startswith("score: greedy evaluation return (`eval/return_mean` of each member's last evaluation, "
                           "16 episodes, at 400 env steps)")
    assert "| rank | config | seeds | eval return (score) | final training return | AUC | diverged |" in text
    csv_rows = list(csv.DictReader(open(tmp_path / "summary.csv")))
    assert {r["score_metric"] for r in csv_rows} == {"eval/return_mean"}
    assert [float(r["score"]) for r in csv_rows] == [500, 500, 500, 500, 300, 320, 490, 480]
    assert {(r["eval_episodes"], r["eval_env_steps"]) for r in csv_rows} == {("16", "400")}
    assert len(list((tmp_path / "plots").glob("*.png"))) == 4


def test_a_member_without_a_finite_evaluation_ranks_last(tmp_path):
    # "nan" diverged (its evaluation is NaN) and "none" was never evaluated: neither falls back to
    # its training return, both rank below every evaluated config.
    members = _members(["ok", "nan", "none"])
    rows = [_rows([10, 20], [None, 15]), _rows([400, 500], [None, float("nan")]), _rows([400, 500])]
    agg = summarize(tmp_path, members, rows, plots=False, stream=open(os.devnull, "w"))
    assert [(a["rank"], a["config"]) for a in agg] == [(1, "ok"), (2, "nan"), (2, "none")]
    assert agg[0]["score_mean"] == 15.0
    assert all(np.isnan(a["score_mean"]) for a in agg[1:])
    # Evaluations that stop before the last chunk (resumed with eval_interval=0) do not score
    # the final policies: the training return does.
    rows = [_rows([10, 20, 30], [None, 15, None]), _rows([400, 500, 500], [None, 5, None])]
    agg = summarize(tmp_path, members[:2], rows, plots=False, stream=open(os.devnull, "w"))
    assert [(a["config"], a["score"], a["score_mean"]) for a in agg] == [
        ("nan", "episode_return_mean", 500.0), ("ok", "episode_return_mean", 30.0)]


def test_a_sweep_that_evaluates_is_ranked_by_its_last_evaluation(tmp_path):
    config = dataclasses.replace(PPO, eval_interval=2, eval_episodes=4)
    spec = SweepSpec(grid={"learning_rate": [1e-4, 3e-3]}, seeds=(0, 1, 2, 3))
    _, members, agg = run_sweep(config, spec, run_dir=tmp_path, quiet=True, plots=False)
    history = [read_chunks(tmp_path / "members" / m.name) for m in members]
    assert [["eval/return_mean" in r for r in rows] for rows in history] == [[False, True, True]] * 8
    csv_rows = list(csv.DictReader(open(tmp_path / "summary.csv")))
    for rows, row in zip(history, csv_rows):
        assert row["score_metric"] == "eval/return_mean" and float(row["score"]) == rows[-1]["eval/return_mean"]
        assert (row["eval_episodes"], row["eval_env_steps"]) == ("4", str(rows[-1]["env_steps"]))
    assert all(a["score"] == "eval/return_mean" for a in agg) and [a["rank"] for a in agg] == [1, 2]
    for a in agg:
        seeds = [float(r["score"]) for r, m in zip(csv_rows, members) if m.label == a["config"]]
        assert a["score_mean"] == pytest.approx(np.mean(seeds))
    assert (tmp_path / "summary.md").read_text().startswith(
        "score: greedy evaluation return (`eval/return_mean` of each member's last evaluation, 4 episodes, at 768")
    assert agg == rank_configs([{**r, "score": float(r["score"]), "final_return": float(r["final_return"]),
                                 "auc": float(r["auc"]), "eval_return": float(r["eval_return"]),
                                 "diverged": r["diverged"] == "True"} for r in csv_rows], members)
