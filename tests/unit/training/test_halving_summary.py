"""A halving sweep's results (:mod:`rljax.training.halving_summary`): a slot's rows cut into its trials by
hand, and the table of a schedule written by hand."""

from __future__ import annotations

import math

from rljax.training.halving_summary import halving_table, summarize_halving, trial_rows
from rljax.training.hooks.halving import HalvingSpec, Schedule
from rljax.training.sweep import Member


def _rows(returns, steps=10):
    return [{"env_steps": steps * (i + 1), "updates": i + 1, "episode_return_mean": r} for i, r in enumerate(returns)]


def test_a_slots_rows_are_cut_into_its_trials_counted_from_each_start():
    rows = _rows([1.0, 2.0, 3.0, 4.0, 5.0])
    first = trial_rows(rows, {"start_chunk": 0, "end_chunk": 1}, chunk_steps=10)
    second = trial_rows(rows, {"start_chunk": 2, "end_chunk": None}, chunk_steps=10)
    assert [(r["env_steps"], r["episode_return_mean"]) for r in first] == [(10, 1.0), (20, 2.0)]
    assert [(r["env_steps"], r["episode_return_mean"]) for r in second] == [(10, 3.0), (20, 4.0), (30, 5.0)]


def _schedule():
    """2 slots, 4 trials, one rung at age 1 of a 3-chunk run (eta 2): slot 1's trial stops after chunk 0."""
    s = Schedule.new(HalvingSpec(slots=2, eta=2, seed=0), (1,), num_chunks=3, chunk_steps=10, num_trials=4)
    s.observe([5.0, 1.0])
    assert s.step(0) == [1]
    for c, scores in ((1, [6.0, 2.0]), (2, [7.0, 3.0])):
        s.observe(scores)
        s.step(c, last=c == 2)
    return s


def test_the_table_ranks_the_trials_and_names_the_budget(tmp_path):
    s = _schedule()
    trials = [Member(index=i, seed=0, values={"learning_rate": lr}, name=f"t{i}", label=f"learning_rate={lr}")
              for i, lr in enumerate((1e-4, 3e-4, 1e-3, 3e-3))]
    slot_rows = [_rows([5.0, 6.0, 7.0]), _rows([1.0, 2.0, 3.0])]
    ranked, text = halving_table(trials, slot_rows, s.to_dict())
    first, stopped, second = s.order[0], s.order[1], s.order[2]
    assert [r["trial"] for r in ranked] == [first, second, stopped]  # rung 0: 5.0, 2.0 (its first chunk), 1.0
    assert [r["score"] for r in ranked] == [5.0, 2.0, 1.0] and ranked[2]["stopped_at_rung"] == 0
    assert ranked[0]["final_return"] == 7.0 and ranked[1]["final_return"] == 3.0  # the trial's own rows
    assert ranked[1]["started_env_steps"] == 10 and ranked[1]["age_env_steps"] == 20
    assert text.startswith("Successive halving: 2 slots trained 3 of the space's 4 trials") and "2 x 30 = 60" in text
    assert "1 trials never started" in text and "(stopped at rung 0)" in text
    out = summarize_halving(tmp_path, trials, slot_rows, s.to_dict(), plots=True, stream=open("/dev/null", "w"))
    assert out == ranked and (tmp_path / "plots" / "halving.png").exists()
    csv = (tmp_path / "summary.csv").read_text().splitlines()
    assert csv[0] == ("rank,trial,name,seed,learning_rate,slot,started_env_steps,age_env_steps,stopped_at_rung,level,"
                      "score,rung_0,final_return,auc") and len(csv) == 4
    assert not math.isnan(float(csv[1].split(",")[-1]))
