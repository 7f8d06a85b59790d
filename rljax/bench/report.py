"""A bench's report, computed from ``scores.csv`` alone.

``report.json`` (schema 1)::

    {"schema": 1, "score": "normalized_score", "confidence": 0.95, "reps": 2000, "seed": 0,
     "algorithms": {ALGO: {"iqm" | "mean" | "median" | "optimality_gap":
                               {"estimate": x, "low": l, "high": h},
                           "envs": [ENV, ...], "runs": N}},
     "probability_of_improvement": {X: {Y: {"estimate": p, "low": l, "high": h, "envs": [ENV, ...]}}},
     "per_env": {ENV: {ALGO: {"score": mean raw score, "normalized_score": its mean, "runs": N}}}}

Each algorithm's aggregates (:func:`rljax.bench.stats.aggregate_intervals`) are over its own envs
(a bench may run an algorithm on only the envs it fits): its normalised scores as a matrix
``[seeds, envs]``, with 95 % stratified bootstrap intervals. ``P(X > Y)`` is computed over the envs
both ran (listed with it), for every ordered pair that shares at least one. The bootstrap of an
algorithm is seeded by its name, so its figures do not depend on which others are in the report.
``report.md`` shows the same figures as tables, the per-env mean raw scores and, when the bench
directory holds them, each env's random score, reference and citation.
"""

from __future__ import annotations

import csv
import json
import math
import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rljax.bench.stats import aggregate_intervals, as_plain, probability_of_improvement_intervals

__all__ = ["SCHEMA", "REPORT_FILE", "MARKDOWN_FILE", "read_scores", "score_matrices", "compute_report",
           "report_markdown", "write_report"]

SCHEMA = 1
"""The version of ``report.json``'s layout (the module docstring)."""
REPORT_FILE = "report.json"
MARKDOWN_FILE = "report.md"


def read_scores(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of a ``scores.csv`` (seed as int, scores as float).

    Raises:
        ValueError: a missing column or a value that is not a number, naming the line.
    """
    rows = []
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = {"algorithm", "env", "seed", "score", "normalized_score"} - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"{path}: missing columns {sorted(missing)}")
        for line, row in enumerate(reader, start=2):
            try:
                rows.append({"algorithm": row["algorithm"], "env": row["env"], "seed": int(row["seed"]),
                             "score": float(row["score"]), "normalized_score": float(row["normalized_score"])})
            except ValueError as err:
                raise ValueError(f"{path} line {line}: {err}") from None
    return rows


def score_matrices(rows: Sequence[Mapping[str, Any]], column: str = "normalized_score"
                   ) -> dict[str, tuple[list[str], np.ndarray]]:
    """Each algorithm's ``(envs, scores [seeds, envs])`` of ``column``, seeds and envs sorted.

    Raises:
        ValueError: an algorithm whose envs ran different seeds (its scores are not a matrix).
    """
    cells: dict[str, dict[str, dict[int, float]]] = {}
    for r in rows:
        cells.setdefault(r["algorithm"], {}).setdefault(r["env"], {})[int(r["seed"])] = float(r[column])
    out = {}
    for algo, by_env in sorted(cells.items()):
        envs = sorted(by_env)
        seeds = sorted(by_env[envs[0]])
        for env in envs:
            if sorted(by_env[env]) != seeds:
                raise ValueError(f"{algo}: env {env} has seeds {sorted(by_env[env])} but {envs[0]} has {seeds}; "
                                 "each algorithm needs the same seeds on every env")
        out[algo] = (envs, np.array([[by_env[e][s] for e in envs] for s in seeds], np.float64))
    return out


def _pairs(matrices: Mapping[str, tuple[list[str], np.ndarray]], reps: int, confidence: float,
           seed: int) -> dict[str, dict[str, Any]]:
    """``P(X > Y)`` for every ordered pair over the envs both ran."""
    out: dict[str, dict[str, Any]] = {}
    names = list(matrices)
    for i, x in enumerate(names):
        for y in names[i + 1:]:
            (envs_x, sx), (envs_y, sy) = matrices[x], matrices[y]
            shared = [e for e in envs_x if e in envs_y]
            if not shared:
                continue
            table = {x: sx[:, [envs_x.index(e) for e in shared]], y: sy[:, [envs_y.index(e) for e in shared]]}
            pair = as_plain(probability_of_improvement_intervals(
                table, reps=reps, confidence=confidence, seed=seed))
            for a, b in ((x, y), (y, x)):
                out.setdefault(a, {})[b] = {**pair[a][b], "envs": shared}
    return out


def compute_report(rows: Sequence[Mapping[str, Any]], *, reps: int = 2000, confidence: float = 0.95,
                   seed: int = 0) -> dict[str, Any]:
    """The report (``report.json``'s dict, the module docstring) of ``scores.csv``'s rows.

    Raises:
        ValueError: no rows, or scores that are not a matrix per algorithm.
    """
    if not rows:
        raise ValueError("no scores: the bench has no finished cell yet")
    matrices = score_matrices(rows)
    algorithms = {}
    for algo, (envs, scores) in matrices.items():
        plain = as_plain(aggregate_intervals({algo: scores}, reps=reps, confidence=confidence, seed=seed))
        algorithms[algo] = {**plain[algo], "envs": envs, "runs": int(scores.shape[0])}
    per_env: dict[str, dict[str, Any]] = {}
    raw = score_matrices(rows, "score")
    for algo, (envs, scores) in raw.items():
        for j, env in enumerate(envs):
            per_env.setdefault(env, {})[algo] = {"score": float(scores[:, j].mean()),
                                                 "normalized_score": float(matrices[algo][1][:, j].mean()),
                                                 "runs": int(scores.shape[0])}
    return {"schema": SCHEMA, "score": "normalized_score", "confidence": confidence, "reps": reps, "seed": seed,
            "algorithms": algorithms, "probability_of_improvement": _pairs(matrices, reps, confidence, seed),
            "per_env": dict(sorted(per_env.items()))}


def _interval(entry: Mapping[str, float]) -> str:
    return f"{entry['estimate']:.3f} [{entry['low']:.3f}, {entry['high']:.3f}]"


def report_markdown(report: Mapping[str, Any], references: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """``report.md``: aggregates per algorithm, probability of improvement, per-env mean scores and
    (given ``references``: env -> ``{"random", "reference", "citation"}``) the normalisation's sources."""
    pct = round(100 * report["confidence"])
    lines = ["# Bench report", "",
             f"Normalised scores `(score - random) / (reference - random)`; {pct} % stratified bootstrap intervals "
             f"({report['reps']} resamples, seed {report['seed']}).", "",
             "## Aggregates per algorithm", "",
             "| algorithm | envs | runs | IQM | mean | median | optimality gap |", "|---|---|---|---|---|---|---|"]
    for algo, a in report["algorithms"].items():
        lines.append(f"| {algo} | {len(a['envs'])} | {a['runs']} | {_interval(a['iqm'])} | {_interval(a['mean'])} | "
                     f"{_interval(a['median'])} | {_interval(a['optimality_gap'])} |")
    if report["probability_of_improvement"]:
        lines += ["", "## Probability of improvement", "", "| X | Y | P(X > Y) | envs |", "|---|---|---|---|"]
        for x, row in report["probability_of_improvement"].items():
            for y, p in row.items():
                lines.append(f"| {x} | {y} | {_interval(p)} | {len(p['envs'])} |")
    algos = list(report["algorithms"])
    lines += ["", "## Mean score per env (normalised in brackets)", "",
              "| env | " + " | ".join(algos) + " |", "|---|" + "---|" * len(algos)]
    for env, by_algo in report["per_env"].items():
        cells = [f"{by_algo[a]['score']:.2f} ({by_algo[a]['normalized_score']:.2f})" if a in by_algo else "-"
                 for a in algos]
        lines.append(f"| {env} | " + " | ".join(cells) + " |")
    if references:
        lines += ["", "## References", "", "| env | random | reference | citation |", "|---|---|---|---|"]
        for env, ref in references.items():
            lines.append(f"| {env} | {ref['random']:.2f} | {ref['reference']:g} | {ref['citation']} |")
    return "\n".join(lines) + "\n"


def _saved_references(run_dir: pathlib.Path) -> dict[str, dict[str, Any]] | None:
    """The references ``bench.json`` and ``random_scores.json`` in ``run_dir`` give, if both are there."""
    try:
        envs = json.loads((run_dir / "bench.json").read_text())["envs"]
        randoms = json.loads((run_dir / "random_scores.json").read_text())
        return {e: {"random": randoms[e]["score"], "reference": v["reference"], "citation": v["citation"]}
                for e, v in envs.items() if e in randoms and math.isfinite(randoms[e]["score"])}
    except (OSError, KeyError, ValueError):
        return None


def write_report(run_dir: str | os.PathLike, *, references: Mapping[str, Mapping[str, Any]] | None = None,
                 reps: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Recomputes ``report.json`` and ``report.md`` in ``run_dir`` from its ``scores.csv``; returns the report.

    ``references`` (for ``report.md``) default to those of the directory's ``bench.json`` and
    ``random_scores.json``. With no score yet, writes nothing and returns ``{}``.
    """
    run_dir = pathlib.Path(run_dir)
    rows = read_scores(run_dir / "scores.csv")
    if not rows:
        return {}
    report = compute_report(rows, reps=reps, seed=seed)
    for name, text in ((REPORT_FILE, json.dumps(report, indent=2) + "\n"),
                       (MARKDOWN_FILE, report_markdown(report, references or _saved_references(run_dir)))):
        tmp = run_dir / f".{name}.{os.getpid()}.tmp"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, run_dir / name)
    return report
