"""Reading a run or sweep directory as the inspecting commands need it (``rljax inspect``, one
directory or several): what kind it is, the env steps it is planned to reach and whether it got
there, its JSON files, the finite values of a column, which columns are algorithm metrics, wall
times for every metrics row, a curve smoothed, how a config is named in a legend, and how a figure
is printed. Reads files only; compiles nothing."""

from __future__ import annotations

import json
import math
import pathlib
from typing import Any

import numpy as np

__all__ = ["NotARunError", "TRAIN", "EVAL", "read_json", "run_kind", "read_run_status", "planned_total",
           "finite_values", "metric_columns", "wall_times", "smooth", "config_label", "fmt_number", "fmt_compact"]

TRAIN = "episode_return_mean"
"""The training-return column (the exploring policy's episodes)."""
EVAL = "eval/return_mean"
"""The greedy evaluation's column."""


class NotARunError(ValueError):
    """The directory holds neither a run nor a sweep."""


def read_json(path: pathlib.Path) -> Any:
    """The JSON in ``path``, or None when it is missing or damaged."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def run_kind(run_dir: pathlib.Path) -> str:
    """``"sweep"`` or ``"run"``; raises :class:`NotARunError` (naming ``run_dir`` and what a run
    holds) otherwise."""
    if not run_dir.is_dir():
        raise NotARunError(f"{run_dir} is not a directory")
    if (run_dir / "sweep.json").is_file():
        return "sweep"
    if any((run_dir / name).is_file() for name in ("metrics.jsonl", "manifest.json", "config.json")):
        return "run"
    raise NotARunError(f"{run_dir} is not a run directory: a run holds metrics.jsonl, manifest.json and "
                       f"config.json (with tb/ and checkpoints/), a sweep also sweep.json and members/")


def read_run_status(run_dir: pathlib.Path) -> dict[str, Any] | None:
    """The run's ``status.json`` as ``rljax status`` reads it (:func:`rljax.store.status.read_status`:
    ``state`` is ``running``, ``stalled``, ``preempted``, ``finished`` or ``failed``), or None when the
    directory has none (a run from before it was written, a copy without it) or it is damaged."""
    from rljax.store.status import read_status

    try:
        record = read_status(run_dir)
    except ValueError:
        return None
    return None if record.get("state") == "not started" else record


def planned_total(manifest: dict[str, Any], config: dict[str, Any], status: dict[str, Any] | None = None) -> int | None:
    """The env steps a run (a sweep: each member) is planned to reach, or None when the files do not say.

    ``status`` (the run's ``status.json``, :func:`read_run_status`) says it when it holds
    ``total_env_steps``: the plan of the run's latest session, as ``rljax status`` shows it. Without it
    the total is rebuilt from the config's ``total_timesteps`` (extended by a resume) and the plan in
    the manifest: a host-env run (its manifest has ``host``, :mod:`rljax.actorlearner.run`) makes
    ``total_timesteps // env_steps_per_update`` updates, its last chunk maybe shorter; a JAX-env run
    rounds its updates up to whole chunks of the manifest's ``updates_per_chunk``
    (:func:`rljax.training.program.resume_plan`, which a fresh run's plan also satisfies).
    """
    from rljax.training.program import resume_plan

    if status is not None and isinstance(status.get("total_env_steps"), int) and status["total_env_steps"] > 0:
        return status["total_env_steps"]
    plan = manifest.get("plan") or {}
    try:
        total, per_update = int(config["total_timesteps"]), int(plan["env_steps_per_update"])
        if isinstance(manifest.get("host"), dict):
            return max(1, total // per_update) * per_update if per_update > 0 else None
        return resume_plan(total, per_update, int(plan["updates_per_chunk"])).total_env_steps
    except (KeyError, TypeError, ValueError):
        return None


def finite_values(rows: list[dict[str, Any]], key: str) -> list[tuple[dict[str, Any], float]]:
    """``(row, value)`` for the rows whose ``key`` is a finite number (not a bool)."""
    out = []
    for r in rows:
        v = r.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out.append((r, float(v)))
    return out


def fmt_number(x: Any, digits: int = 2) -> str:
    """``x`` with thousands separators and ``digits`` decimals; ``n/a`` for None or a non-finite float."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return f"{x:,.{digits}f}"


def wall_times(rows: list[dict[str, Any]]) -> np.ndarray:
    """Each ``metrics.jsonl`` row's wall time: the rows that end a chunk carry ``wall_time_s``; the
    rows between two of them get it interpolated by env steps (NaN before the first and after the
    last, where nothing says)."""
    anchors = [(r["env_steps"], r["wall_time_s"]) for r in rows if isinstance(r.get("wall_time_s"), (int, float))]
    steps = np.array([r["env_steps"] for r in rows], float)
    if not anchors:
        return np.full(len(rows), np.nan)
    x, y = np.array(anchors, float).T
    return np.interp(steps, x, y, left=np.nan, right=np.nan)


NOT_ALGORITHM_METRICS = frozenset({
    "env_steps", "updates", "wall_time_s", "sps", "episodes", TRAIN, "episode_length_mean", "env_nonfinite",
    "nonfinite_state", "param_desync", "rollbacks", "buffer_size"})
"""The ``metrics.jsonl`` columns every algorithm writes (docs/metrics.md), which are not its metrics."""
NOT_ALGORITHM_PREFIXES = ("time/", "memory/", "cost/", "host/", "eval/", "reward_components/", "agent_return/")
"""Column prefixes of the host's, the device's, the env's and the evaluation's figures."""


def metric_columns(rows: list[dict[str, Any]]) -> tuple[list[str], dict[str, float]]:
    """The algorithm's metrics among the columns of ``rows`` (losses, entropy, ``approx_kl``,
    ``clip_fraction``, ``explained_variance``, grad norms, ``q_mean``, ``epsilon``, ``alpha``, ...:
    every numeric column but :data:`NOT_ALGORITHM_METRICS` and :data:`NOT_ALGORITHM_PREFIXES`).

    Returns:
        ``(varying, constant)``: the columns whose finite values change, the ``*_loss`` ones first,
        then the rest, each group sorted; and the columns with one value throughout, with it.
    """
    keys = sorted({k for r in rows for k in r if k not in NOT_ALGORITHM_METRICS
                   and not k.startswith(NOT_ALGORITHM_PREFIXES)})
    varying, constant = [], {}
    for key in keys:
        values = {v for _, v in finite_values(rows, key)}
        if len(values) == 1:
            constant[key] = values.pop()
        elif values:
            varying.append(key)
    varying.sort(key=lambda k: (not k.endswith("_loss"), k))
    return varying, constant


def smooth(values: Any, window: int) -> np.ndarray:
    """The centred rolling mean of ``values`` over ``window`` points: point i becomes the mean of
    the finite values among points ``i - (window - 1) // 2`` to ``i + window // 2`` (fewer at the
    ends, so the curve keeps its length and is not shifted along x; NaN where none is finite).

    Args:
        values: ``[N]`` numbers, NaN for a missing one.
        window: W >= 1 points; 1 returns the values unchanged.

    Raises:
        ValueError: ``window`` is not a whole number >= 1.
    """
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
        raise ValueError(f"the smoothing window must be a whole number of points >= 1 (1: no smoothing), "
                         f"got {window!r}")
    y = np.asarray(values, float)
    if window == 1 or y.size == 0:
        return y.copy()
    finite = np.isfinite(y)
    sums = np.concatenate([[0.0], np.cumsum(np.where(finite, y, 0.0))])
    counts = np.concatenate([[0], np.cumsum(finite)])
    i = np.arange(y.size)
    lo, hi = np.clip(i - (window - 1) // 2, 0, y.size), np.clip(i + window // 2 + 1, 0, y.size)
    n = counts[hi] - counts[lo]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, (sums[hi] - sums[lo]) / np.maximum(n, 1), np.nan)


SHORT_NAMES = {"learning_rate": "lr", "ent_coef": "ent"}
"""How a legend shortens the config fields most often swept."""


def config_label(values: dict[str, Any], max_fields: int = 4) -> str:
    """``values`` (config fields) as a legend names them: ``lr=0.001, ent=0.01`` (:data:`SHORT_NAMES`),
    strings bare, other values as JSON; after ``max_fields`` fields, ``+N more``."""
    parts = [f"{SHORT_NAMES.get(k, k)}={v if isinstance(v, str) else json.dumps(v)}"
             for k, v in list(values.items())[:max_fields]]
    if len(values) > max_fields:
        parts.append(f"+{len(values) - max_fields} more")
    return ", ".join(parts)


def fmt_compact(x: float, _pos: Any = None) -> str:
    """``x`` short enough for an axis tick: ``0``, ``500``, ``1.5k``, ``100k``, ``2M``, ``1.2G``
    (3 significant digits at most; a matplotlib ``FuncFormatter`` takes it as it is)."""
    if not math.isfinite(x):
        return str(x)
    x = float(f"{x:.3g}")  # 999,500 is 1M, not 1e+03k
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= size:
            return f"{x / size:.3g}{suffix}"
    return f"{x:.3g}"
