"""Successive halving in one program (:mod:`rljax.training.hooks.halving`): the rung rule by hand, the
schedule's round trip and ranking, and a halving sweep end to end: a trial started in a freed slot trains
exactly as the same config and seed in a plain sweep, and a stopped sweep resumes bit for bit."""

from __future__ import annotations

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.agents.ppo import PPOConfig
from rljax.store.tracking import read_chunks, read_metrics
from rljax.training.hooks.halving import (HalvingSpec, Schedule, decision_rung, rank_trials, rung_ages, trial_order,
                                          validate_halving)
from rljax.training.sweep import SweepSpec, run_sweep

# tests/unit/training/test_sweep.py's PPO (8 members there, 8 slots here: the same compiled chunk program), over
# 5 chunks of 2 updates so that two rungs fit (ages 1 and 3 chunks).
PPO = PPOConfig(total_timesteps=8 * 16 * 10, updates_per_chunk=2, num_envs=8, num_steps=16, num_epochs=2,
                num_minibatches=2, hidden_sizes=(16,))
SPACE = dict(grid={"learning_rate": [1e-4, 3e-4, 1e-3, 3e-3], "ent_coef": [0.0, 0.01, 0.03]}, seeds=(0, 1))


def test_rung_ages():
    assert rung_ages(HalvingSpec(slots=9), 27, 100) == (3, 9)  # 27 // 3**2 = 3, then 9; 27 is the run's end
    assert rung_ages(HalvingSpec(slots=9), 5, 100) == (1, 3)  # at least one chunk
    assert rung_ages(HalvingSpec(slots=9, min_steps=250), 27, 100) == (3, 9)  # rounded up to whole chunks
    assert rung_ages(HalvingSpec(slots=9, eta=2, min_steps=100), 9, 100) == (1, 2, 4, 8)
    assert rung_ages(HalvingSpec(slots=9, min_steps=400), 27, 100, eval_interval=2) == (4, 12)
    with pytest.raises(ValueError, match=r"first rung \(3 chunks of 100 env steps\) must be a multiple of "
                                         r"eval_interval \(2 chunks\).*--halving-min-steps 400"):
        rung_ages(HalvingSpec(slots=9, min_steps=300), 27, 100, eval_interval=2)
    with pytest.raises(ValueError, match=r"first rung \(10 chunks\) is not before the end of the run \(10 chunks"):
        rung_ages(HalvingSpec(slots=9, min_steps=1000), 10, 100)


@pytest.mark.parametrize("spec, trials, match", [
    (HalvingSpec(slots=4, eta=1), 9, "--halving-eta must be an integer >= 2, got 1"),
    (HalvingSpec(slots=1), 9, "at least 2 slots .* with one, the first trial to reach a rung is never below"),
    (HalvingSpec(slots=10), 9, "--halving-slots 10 is more than the 9 trials"),
    (HalvingSpec(slots=9), 9, "nothing to halve: drop --halving for a plain sweep, or use fewer slots \\(e.g. 3\\)"),
    (HalvingSpec(slots=3, min_steps=-1), 9, "--halving-min-steps must be a number of env steps >= 0"),
])
def test_bad_halving_specs_are_refused(spec, trials, match):
    with pytest.raises(ValueError, match=match):
        validate_halving(spec, trials)


def test_the_rung_rule_by_hand():
    """3 slots, 6 trials, rungs at ages 1 and 3 chunks, eta 3: the cutoff is the 2/3 quantile (linear
    interpolation) of every score recorded at the rung, the arrivals of one chunk judged together."""
    s = Schedule.new(HalvingSpec(slots=3, eta=3, seed=5), (1, 3), num_chunks=6, chunk_steps=100, num_trials=6)
    order = trial_order(6, 5)
    assert sorted(order) == list(range(6)) and s.slot_trial == order[:3] and s.started == 3
    # chunk 0: everyone is at rung 0 with [10, 30, 20]: cutoff 20 + (30 - 20) / 3 = 23.3; slots 0 and 2 stop,
    # the worse (slot 0) taking the next trial first.
    s.observe([10.0, 30.0, 20.0])
    assert s.step(0) == [0, 2]
    assert s.slot_trial == [order[3], order[1], order[4]] and s.slot_start == [1, 0, 1] and s.started == 5
    assert s.records[0] == {order[0]: 10.0, order[1]: 30.0, order[2]: 20.0}
    assert s.trials[order[0]]["stopped_at_rung"] == 0 and s.trials[order[0]]["end_chunk"] == 0
    # chunk 1: the new trials arrive at rung 0 with 25 and 5 (record [5, 10, 20, 25, 30]: cutoff 23.3): 5 stops
    # and the last trial takes its slot; slot 1 is at age 2 (no rung).
    s.observe([25.0, 99.0, 5.0])
    assert s.step(1) == [2] and s.slot_trial[2] == order[5] and s.started == 6
    # chunk 2: slot 2's trial arrives at rung 0 with -inf (a diverged trial) and would stop, but the queue is
    # empty, so it keeps training; slot 1 arrives alone at rung 1 (ages 3) and continues.
    s.observe([26.0, 40.0, -math.inf])
    assert s.step(2) == []
    assert s.records[1] == {order[1]: 40.0} and s.records[0][order[5]] == -math.inf
    # chunk 3: slot 0 (started at chunk 1) reaches rung 1 with 39 < the cutoff of [40, 39] -> below, but nothing
    # is left to start: nothing stops.
    s.observe([39.0, 41.0, 1.0])
    assert s.step(3) == [] and s.records[1] == {order[1]: 40.0, order[3]: 39.0}
    # chunk 4: slot 2's trial (started at chunk 2) reaches rung 1 with 2.0 (its window [-inf, 1, 2]: the last one).
    s.observe([38.0, 42.0, 2.0])
    assert s.step(4) == [] and s.records[1] == {order[1]: 40.0, order[3]: 39.0, order[5]: 2.0}
    s.observe([37.0, 43.0, 3.0])
    assert s.step(5, last=True) == []
    assert s.trials[order[1]]["final_age"] == 6 and s.trials[order[1]]["final_score"] == 43.0  # completed the run
    assert s.trials[order[3]]["final_age"] == 5 and s.trials[order[5]]["final_score"] == 3.0
    # The result: rung 1, reached by 3 (= eta) trials, decides; below it the others by their rung-0 score.
    assert decision_rung(s) == 1
    ranked = rank_trials(s)
    assert [t["trial"] for t in ranked] == [order[1], order[3], order[5], order[2], order[0], order[4]]
    assert [t["score"] for t in ranked] == [40.0, 39.0, 2.0, 20.0, 10.0, 5.0]
    assert [t["level"] for t in ranked] == [2, 2, 2, 1, 1, 1] and ranked[0]["rung_scores"] == [30.0, 40.0]
    # With fewer than eta trials at rung 1, rung 0 decides: the first trial to reach a rung always continues.
    del s.records[1][order[5]]
    assert decision_rung(s) == 0 and [t["level"] for t in rank_trials(s)] == [1] * 6


def test_the_rung_score_is_the_mean_of_the_last_tenth_of_the_trials_chunks():
    s = Schedule.new(HalvingSpec(slots=1, eta=2, seed=0), (25,), num_chunks=40, chunk_steps=10, num_trials=2)
    for x in range(24):
        s.observe([float(x)])
        assert s.step(x) == []
    s.observe([24.0])
    assert s.rung_score(0) == 23.5  # the last 2 of 25 chunk scores: [23, 24]
    s.observe([math.nan])  # a chunk in which no episode ended: left out, as a sweep's final score leaves it out
    assert s.rung_score(0) == 23.5
    s.observe([-math.inf])
    assert s.rung_score(0) == -math.inf  # a non-finite return in the window (a diverged trial)
    assert Schedule.from_dict(json.loads(json.dumps(s.to_dict()))).slot_scores[0][-2:][1] == -math.inf


def test_a_resume_may_not_change_what_the_rungs_rank_by():
    from rljax.training.hooks.halving import check_resumed

    trained = Schedule.new(HalvingSpec(slots=2), (2, 6), 20, 10, 4)  # ranked by the training return
    check_resumed(trained, 0)
    with pytest.raises(ValueError, match="rank by episode_return_mean; resumed with eval_interval=2 they would "
                                         "rank by eval/return_mean"):
        check_resumed(trained, 2)
    evaluated = Schedule.new(HalvingSpec(slots=2), (2, 6), 20, 10, 4, score="eval/return_mean")
    check_resumed(evaluated, 2)
    with pytest.raises(ValueError, match=r"first rung \(2 chunks\) is not a multiple of eval_interval=4"):
        check_resumed(evaluated, 4)


def test_the_schedule_survives_json():
    s = Schedule.new(HalvingSpec(slots=2, eta=2, seed=1), (1, 2), num_chunks=4, chunk_steps=10, num_trials=4)
    s.observe([1.0, -math.inf])
    s.step(0)
    s.observe([math.nan, 2.0])
    back = Schedule.from_dict(json.loads(json.dumps(s.to_dict(), allow_nan=False)))
    assert math.isnan(back.slot_scores[0][-1]) and back.slot_scores[1:] == s.slot_scores[1:]
    back.slot_scores[0][-1] = s.slot_scores[0][-1] = 0.0
    assert back == s


def _leaves(state):
    return [np.asarray(jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else x)
            for x in jax.tree.leaves(state)]


def test_a_halving_sweep_trains_each_trial_as_a_plain_sweep_would_and_resumes_bit_exactly(tmp_path):
    spec = SweepSpec(**SPACE, halving=HalvingSpec(slots=8, eta=3, seed=0))
    full, slots, ranked = run_sweep(PPO, spec, run_dir=tmp_path / "full", quiet=True, checkpoint_every=1)
    schedule = json.loads((tmp_path / "full" / "halving.json").read_text())
    assert [m.name for m in slots] == [f"slot{i:02d}" for i in range(8)] and schedule["rungs"] == [1, 3]
    trials = json.loads((tmp_path / "full" / "sweep.json").read_text())["trials"]
    assert len(trials) == 24 and schedule["started"] > 8  # stopped trials' slots took new ones
    # Trials stopped at a rung scored below the best score recorded there; rows name each slot's trial and age.
    stopped = {int(t): r["stopped_at_rung"] for t, r in schedule["trials"].items() if r["stopped_at_rung"] is not None}
    assert stopped and all(schedule["records"][k][str(t)] < max(schedule["records"][k].values())
                           for t, k in stopped.items())
    rows = [read_chunks(tmp_path / "full" / "members" / m.name) for m in slots]
    later = next(int(t) for t, r in schedule["trials"].items() if r["start_chunk"] > 0)
    record = schedule["trials"][str(later)]
    slot, start, end = record["slot"], record["start_chunk"], record["end_chunk"]
    assert rows[slot][start]["halving/trial"] == later and rows[slot][start]["halving/age"] == 1
    assert rows[slot][start - 1]["halving/trial"] != later
    # That trial (started in a freed slot) trains exactly as its config and seed do from the start of a plain
    # sweep of as many members: its rows at each age equal that member's.
    t = trials[later]
    plain_spec = SweepSpec(grid={k: [v] for k, v in t["values"].items()},
                           seeds=(t["seed"], *[s for s in range(10, 17)]))
    plain, _, _ = run_sweep(PPO, plain_spec, quiet=True, plots=False, checkpoints=False)
    compared = 0
    for age, row in enumerate(rows[slot][start:end + 1]):
        for key, value in row.items():
            if key.startswith(("loss", "entropy", "episode_return", "grad")) and value is not None:
                assert value == plain.member_rows[0][age][key], (age, key)
                compared += 1
    assert compared >= 4
    # The result: every started trial in summary.csv, ranked in summary.md, the curves in plots/halving.png.
    summary = (tmp_path / "full" / "summary.md").read_text()
    assert summary.startswith("Successive halving: 8 slots trained") and "of the space's 24 trials" in summary
    assert (tmp_path / "full" / "plots" / "halving.png").stat().st_size > 0
    assert len(ranked) == schedule["started"] and [r["rank"] for r in ranked] == list(range(1, len(ranked) + 1))
    assert ranked[0]["level"] == max(r["level"] for r in ranked)
    lines = (tmp_path / "full" / "summary.csv").read_text().splitlines()
    assert len(lines) == 1 + len(ranked) and lines[0].startswith("rank,trial,name,seed,learning_rate,ent_coef,slot")
    # Stopped after chunk 1 (between the two rungs) and resumed: the same schedule and the same final bits.
    part, _, _ = run_sweep(PPO, spec, run_dir=tmp_path / "cut", quiet=True, checkpoint_every=1, plots=False,
                           on_chunk=lambda c, s, r: c == 1)
    assert part.preempted == "on_chunk"
    rest, _, _ = run_sweep(PPO, spec, run_dir=tmp_path / "cut", quiet=True, resume=True, checkpoint_every=1,
                           plots=False)
    assert all(np.array_equal(a, b) for a, b in zip(_leaves(full.state), _leaves(rest.state)))
    assert json.loads((tmp_path / "cut" / "halving.json").read_text()) == schedule
    assert (tmp_path / "cut" / "summary.md").read_text() == summary

    def learning(run):  # the columns of training, not of the machine's timing
        return [{k: v for k, v in r.items() if not k.startswith(("time/", "memory/", "cost/", "sps", "wall_time"))}
                for r in read_metrics(tmp_path / run / "members" / f"slot{slot:02d}")]

    assert learning("cut") == learning("full")
    from rljax.cli.inspect import summary_text

    assert "8 slots, successive halving over 24 trials" in summary_text(tmp_path / "full")


def test_a_halving_sweep_cuts_its_run_into_eta_cubed_chunks():
    from rljax.training.hooks.halving import halving_chunk

    assert halving_chunk(976, 3) == 37 and halving_chunk(4, 3) == 1 and halving_chunk(0, 3) == 1
    assert halving_chunk(100_000, 3) == 200  # at most MAX_AUTO_CHUNK updates: a row at least that often
    assert halving_chunk(64, 2) == 8
