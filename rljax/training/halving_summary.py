"""The results of a successive-halving sweep (:mod:`rljax.training.hooks.halving`): every trial's rungs,
ranked, as ``summary.csv``, ``summary.md`` and ``plots/halving.png``.

A halving sweep's members are slots; each slot's ``metrics.jsonl`` holds the trials it trained one
after another. :func:`trial_rows` cuts a slot's rows into its trials (by the chunks the schedule in
``halving.json`` says each trial held the slot) and counts each trial's env steps from its own start.
"""

from __future__ import annotations

import csv
import math
import pathlib
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["trial_rows", "halving_table", "summarize_halving", "plot_halving"]


def trial_rows(slot_rows: Sequence[Mapping[str, Any]], record: Mapping[str, Any], chunk_steps: int
               ) -> list[dict[str, Any]]:
    """The rows of one trial: its slot's rows from its ``start_chunk`` to its ``end_chunk``, with
    ``env_steps`` counted from the trial's start (its age in env steps)."""
    start = int(record["start_chunk"]) * chunk_steps
    end = math.inf if record.get("end_chunk") is None else (int(record["end_chunk"]) + 1) * chunk_steps
    return [{**r, "env_steps": int(r["env_steps"]) - start} for r in slot_rows if start < r["env_steps"] <= end]


def _ranked(trials: Sequence[Any], slot_rows: Sequence[Sequence[Mapping[str, Any]]], schedule: Mapping[str, Any]
            ) -> tuple[list[dict[str, Any]], dict[int, list[dict[str, Any]]]]:
    """Every started trial, best first, with its summary columns; and each trial's rows."""
    from rljax.training.hooks.halving import Schedule, rank_trials
    from rljax.training.hooks.pbt import final_and_auc

    sched = Schedule.from_dict(schedule)
    rows_of: dict[int, list[dict[str, Any]]] = {}
    out = []
    for t in rank_trials(sched):
        m = trials[t["trial"]]
        rows = trial_rows(slot_rows[t["slot"]], sched.trials[t["trial"]], sched.chunk_steps)
        rows_of[t["trial"]] = rows
        final, auc = final_and_auc(rows)
        end = t["end_chunk"]
        out.append({"rank": t["rank"], "trial": t["trial"], "config": m.label, "name": m.name, "seed": m.seed,
                    "values": dict(m.values), "slot": t["slot"], "level": t["level"], "score": t["score"],
                    "rung_scores": t["rung_scores"], "stopped_at_rung": t["stopped_at_rung"],
                    "started_env_steps": t["start_chunk"] * sched.chunk_steps,
                    "age_env_steps": None if end is None else (end + 1 - t["start_chunk"]) * sched.chunk_steps,
                    "final_return": final, "auc": auc})
    return out, rows_of


def _describe(trials: Sequence[Any], ranked: Sequence[Mapping[str, Any]], schedule: Mapping[str, Any],
              slots: int, evaluated: bool) -> str:
    """What the halving did, in words: the header of ``summary.md`` and the printed table."""
    steps = int(schedule["chunk_steps"])
    total = int(schedule["num_chunks"]) * steps
    rungs = ", ".join(f"{a * steps:,}" for a in schedule["rungs"])
    metric = ("greedy evaluation return (`eval/return_mean` of the chunk)" if evaluated else
              "training episode return (`episode_return_mean`, mean of the trial's last 10 % of chunks)")
    from rljax.training.hooks.halving import Schedule, decision_rung

    untried = len(trials) - len(ranked)
    sched = Schedule.from_dict(schedule)
    top = decision_rung(sched)
    reached = len(sched.records[top]) if top >= 0 else 0
    decided = (f"the highest rung at least {schedule['eta']} trials reached" if reached >= schedule["eta"] else
               f"no rung was reached by {schedule['eta']} trials: the highest any reached")
    return (f"Successive halving: {slots} slots trained {len(ranked)} of the space's {len(trials)} trials "
            f"(grid x samples x seeds) in one program, {slots} x {total:,} = {slots * total:,} env steps "
            f"({slots / len(trials):.3g} of a grid that trains every trial for {total:,}). Rungs at trial ages of "
            f"{rungs} env steps (eta {schedule['eta']}): a trial whose score was below the top 1/{schedule['eta']} "
            f"of the scores recorded at a rung stopped, and its slot started the next trial."
            + (f" {untried} trials never started." if untried else "") +
            f"\n\nscore: {metric}. Trials are compared at the same age: those that reached rung {top} ({decided}) "
            f"by their score there, then the others by the last rung they reached and their score at it (`level`: "
            f"the rungs a trial is ranked by).")


def _table(ranked: Sequence[Mapping[str, Any]], description: str, num_rungs: int) -> str:
    fmt = lambda x: "n/a" if x is None or not math.isfinite(x) else f"{x:.2f}"  # noqa: E731
    lines = [description, "", "| rank | config | seed | level | score | " +
             " | ".join(f"rung {k}" for k in range(num_rungs)) + " | started at | trained | final training return "
             "| AUC |", "|" + "---|" * (9 + num_rungs)]
    for r in ranked:
        rungs = [fmt(r["rung_scores"][k]) if k < len(r["rung_scores"]) else "" for k in range(num_rungs)]
        trained = "n/a" if r["age_env_steps"] is None else f"{r['age_env_steps']:,}"
        state = f" (stopped at rung {r['stopped_at_rung']})" if r["stopped_at_rung"] is not None else ""
        lines.append("| " + " | ".join([str(r["rank"]), r["config"], str(r["seed"]), str(r["level"]), fmt(r["score"]),
                                        *rungs, f"{r['started_env_steps']:,}", trained + state,
                                        fmt(r["final_return"]), fmt(r["auc"])]) + " |")
    return "\n".join(lines) + "\n"


def halving_table(trials: Sequence[Any], slot_rows: Sequence[Sequence[Mapping[str, Any]]],
                  schedule: Mapping[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """``(ranked trials, table text)`` from the slots' rows and the schedule, nothing written (a
    sweep without a run directory prints it)."""
    from rljax.training.hooks.pbt import EVAL_SCORE

    ranked, _ = _ranked(trials, slot_rows, schedule)
    evaluated = any(rows and EVAL_SCORE in rows[-1] for rows in slot_rows)
    text = _table(ranked, _describe(trials, ranked, schedule, len(slot_rows), evaluated), len(schedule["rungs"]))
    return ranked, text


def summarize_halving(run_dir: str | pathlib.Path, trials: Sequence[Any],
                      slot_rows: Sequence[Sequence[Mapping[str, Any]]], schedule: Mapping[str, Any],
                      plots: bool = True, stream: Any = None) -> list[dict[str, Any]]:
    """Writes ``summary.csv`` (one row per started trial: its config, seed, slot, start, rung scores,
    level, score, final training return, AUC), ``summary.md`` (the ranked table) and
    ``plots/halving.png`` (:func:`plot_halving`); prints the table.

    Returns:
        The started trials, best first (the dicts of :func:`halving_table`).
    """
    from rljax.training.hooks.pbt import EVAL_SCORE

    run_dir = pathlib.Path(run_dir)
    ranked, rows_of = _ranked(trials, slot_rows, schedule)
    evaluated = any(rows and EVAL_SCORE in rows[-1] for rows in slot_rows)
    num_rungs = len(schedule["rungs"])
    fields = list(dict.fromkeys(k for m in trials for k in m.values))
    with open(run_dir / "summary.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["rank", "trial", "name", "seed", *fields, "slot", "started_env_steps",
                                               "age_env_steps", "stopped_at_rung", "level", "score",
                                               *[f"rung_{k}" for k in range(num_rungs)], "final_return", "auc"])
        writer.writeheader()
        columns = ("rank", "trial", "name", "seed", "slot", "started_env_steps", "age_env_steps", "stopped_at_rung",
                   "level", "score", "final_return", "auc")
        for r in ranked:
            writer.writerow({**{k: r[k] for k in columns}, **r["values"],
                             **{f"rung_{k}": x for k, x in enumerate(r["rung_scores"])}})
    text = _table(ranked, _describe(trials, ranked, schedule, len(slot_rows), evaluated), num_rungs)
    (run_dir / "summary.md").write_text(text)
    print(text, file=stream or sys.stdout, flush=True)
    if plots:
        plot_halving(run_dir, ranked, rows_of, schedule)
    return ranked


def plot_halving(run_dir: pathlib.Path, ranked: Sequence[Mapping[str, Any]],
                 rows_of: Mapping[int, Sequence[Mapping[str, Any]]], schedule: Mapping[str, Any],
                 best: int = 5) -> pathlib.Path:
    """``plots/halving.png``: every trial's training return against its age in env steps, the rungs
    as dashed lines, each rung score as a dot (a cross where the trial stopped); the ``best`` trials
    in colour with their configs in the legend, the others grey."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    out = run_dir / "plots"
    out.mkdir(exist_ok=True)
    fig = Figure(figsize=(8, 5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    steps = int(schedule["chunk_steps"])
    for a in schedule["rungs"]:
        ax.axvline(a * steps, color="k", linestyle="--", linewidth=0.8, alpha=0.5)
    for r in reversed(ranked):  # the best drawn last, on top
        rows = [x for x in rows_of[r["trial"]] if x.get("episode_return_mean") is not None]
        x = np.array([row["env_steps"] for row in rows], float)
        y = np.array([row["episode_return_mean"] for row in rows], float)
        top = r["rank"] <= best
        kw = dict(linewidth=1.5, label=f"#{r['rank']} {r['config']} (seed {r['seed']})") if top else \
            dict(color="0.6", linewidth=0.7, alpha=0.6)
        (line,) = ax.plot(x, y, **kw)
        for k, score in enumerate(r["rung_scores"]):
            if math.isfinite(score):
                stop = r["stopped_at_rung"] == k
                ax.plot(schedule["rungs"][k] * steps, score, "x" if stop else "o", color=line.get_color(),
                        markersize=5 if stop else 3)
    ax.set_xlabel("trial age (env steps since the trial started)")
    ax.set_ylabel("episode return")
    ax.set_title(f"successive halving: {len(ranked)} trials, rungs dashed (x: stopped there)", fontsize=9)
    ax.legend(fontsize=7)
    fig.subplots_adjust(left=0.1, right=0.97, bottom=0.11, top=0.93)
    path = out / "halving.png"
    fig.savefig(path, dpi=90)
    return path
