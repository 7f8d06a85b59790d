"""A bench's figures, drawn from its files only (``scores.csv`` and ``curves.csv``) into ``DIR/plots/``.

- ``performance_profile.png``: per algorithm, the fraction of its runs whose normalised score is
  above each threshold (:func:`rljax.bench.stats.performance_profile`), with 95 % stratified
  bootstrap bands.
- ``sample_efficiency.png``: per algorithm, the IQM of the normalised evaluation scores at
  :data:`POINTS` fractions of each run's budget (each run's curve interpolated linearly in env steps
  onto them), with bands (:func:`rljax.bench.stats.sample_efficiency_intervals`).
- ``env_<env>.png``: per env, each algorithm's mean raw evaluation return against env steps, with
  the band of its runs' minimum and maximum.

Each algorithm's bands are computed over its own envs (as the report's aggregates are).
"""

from __future__ import annotations

import csv
import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rljax.bench.report import score_matrices
from rljax.bench.stats import performance_profile_intervals, sample_efficiency_intervals

__all__ = ["CURVE_COLUMNS", "POINTS", "read_curves", "curve_arrays", "plot_performance_profile",
           "plot_sample_efficiency", "plot_env_curves", "write_plots"]

CURVE_COLUMNS = ("algorithm", "env", "seed", "env_steps", "fraction", "score", "normalized_score")
"""The columns of ``curves.csv``: one row per evaluation of each run (``fraction``: of its budget)."""
POINTS = np.linspace(0.1, 1.0, 10)
"""The budget fractions at which the sample-efficiency curve is drawn."""


def read_curves(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of a ``curves.csv`` (numbers parsed)."""
    with open(path, newline="", encoding="utf-8") as f:
        return [{"algorithm": r["algorithm"], "env": r["env"], "seed": int(r["seed"]), "env_steps": int(r["env_steps"]),
                 "fraction": float(r["fraction"]), "score": float(r["score"]),
                 "normalized_score": float(r["normalized_score"])} for r in csv.DictReader(f)]


def curve_arrays(rows: Sequence[Mapping[str, Any]], points: np.ndarray = POINTS) -> dict[str, np.ndarray]:
    """Each algorithm's normalised curves ``[seeds, envs, points]``, each run's interpolated at ``points``
    (fractions of its budget); envs and seeds sorted."""
    runs: dict[tuple[str, str, int], list[tuple[float, float]]] = {}
    for r in rows:
        runs.setdefault((r["algorithm"], r["env"], r["seed"]), []).append((r["fraction"], r["normalized_score"]))
    out = {}
    for algo in sorted({k[0] for k in runs}):
        envs = sorted({k[1] for k in runs if k[0] == algo})
        seeds = sorted({k[2] for k in runs if k[0] == algo})
        array = np.full((len(seeds), len(envs), len(points)), np.nan)
        for i, s in enumerate(seeds):
            for j, e in enumerate(envs):
                curve = sorted(runs.get((algo, e, s), []))
                if curve:
                    array[i, j] = np.interp(points, [c[0] for c in curve], [c[1] for c in curve])
        out[algo] = array
    return out


def _figure(figsize: tuple[float, float] = (6.0, 4.0)) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: pathlib.Path) -> pathlib.Path:
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    return path


def plot_performance_profile(scores: Sequence[Mapping[str, Any]], path: pathlib.Path, *, reps: int = 2000) -> Any:
    """Draws the score distributions of ``scores.csv``'s rows with their bands into ``path``; returns the figure."""
    matrices = score_matrices(scores)
    top = max(1.0, max(float(m.max()) for _, m in matrices.values()))
    taus = np.linspace(0.0, top, 101)
    fig = _figure()
    ax = fig.add_subplot()
    for algo, (_, matrix) in matrices.items():
        band = performance_profile_intervals({algo: matrix}, taus, reps=reps)[algo]
        (line,) = ax.plot(taus, band.estimate, label=algo)
        ax.fill_between(taus, band.low, band.high, color=line.get_color(), alpha=0.2)
    ax.set_xlabel("normalised score τ")
    ax.set_ylabel("fraction of runs with score > τ")
    ax.legend()
    _save(fig, path)
    return fig


def plot_sample_efficiency(curves: Sequence[Mapping[str, Any]], path: pathlib.Path, *, reps: int = 2000) -> Any:
    """Draws each algorithm's IQM normalised score against the budget fraction, with bands; returns the figure."""
    fig = _figure()
    ax = fig.add_subplot()
    for algo, array in curve_arrays(curves).items():
        if np.isnan(array).any():
            continue  # a run without evaluations: no curve to draw for this algorithm
        band = sample_efficiency_intervals({algo: array}, reps=reps)[algo]
        (line,) = ax.plot(POINTS, band.estimate, marker="o", label=algo)
        ax.fill_between(POINTS, band.low, band.high, color=line.get_color(), alpha=0.2)
    ax.set_xlabel("fraction of the env-step budget")
    ax.set_ylabel("IQM normalised score")
    ax.legend()
    _save(fig, path)
    return fig


def plot_env_curves(curves: Sequence[Mapping[str, Any]], env: str, path: pathlib.Path) -> Any:
    """Draws ``env``'s learning curves (mean raw evaluation return over seeds, min-max band) per algorithm."""
    fig = _figure()
    ax = fig.add_subplot()
    for algo in sorted({r["algorithm"] for r in curves if r["env"] == env}):
        by_seed: dict[int, list[tuple[int, float]]] = {}
        for r in curves:
            if r["env"] == env and r["algorithm"] == algo:
                by_seed.setdefault(r["seed"], []).append((r["env_steps"], r["score"]))
        steps = sorted({s for c in by_seed.values() for s, _ in c})
        ys = np.array([np.interp(steps, *zip(*sorted(c))) for c in by_seed.values()])
        (line,) = ax.plot(steps, ys.mean(axis=0), label=algo)
        ax.fill_between(steps, ys.min(axis=0), ys.max(axis=0), color=line.get_color(), alpha=0.2)
    ax.set_title(env)
    ax.set_xlabel("env steps")
    ax.set_ylabel("evaluation return")
    ax.legend()
    _save(fig, path)
    return fig


def write_plots(run_dir: str | os.PathLike, *, reps: int = 2000) -> list[pathlib.Path]:
    """Draws every figure of the module docstring into ``DIR/plots/`` from ``scores.csv`` and
    ``curves.csv``; returns the paths written (none while no cell has finished)."""
    from rljax.bench.report import read_scores

    run_dir = pathlib.Path(run_dir)
    scores, curves = read_scores(run_dir / "scores.csv"), read_curves(run_dir / "curves.csv")
    if not scores:
        return []
    plots = run_dir / "plots"
    plot_performance_profile(scores, plots / "performance_profile.png", reps=reps)
    plot_sample_efficiency(curves, plots / "sample_efficiency.png", reps=reps)
    out = [plots / "performance_profile.png", plots / "sample_efficiency.png"]
    for env in sorted({r["env"] for r in curves}):
        path = plots / f"env_{env.replace('/', '--')}.png"
        plot_env_curves(curves, env, path)
        out.append(path)
    return out
