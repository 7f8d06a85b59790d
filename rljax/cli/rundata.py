"""Reading a run or sweep directory as the inspecting commands need it (``rljax inspect``, one
directory or several): what kind it is, the env steps it is planned to reach, its JSON files, the
finite values of a column, wall times for every metrics row, and how a figure is printed. Reads
files only; compiles nothing."""

from __future__ import annotations

import json
import math
import pathlib
from typing import Any

import numpy as np

__all__ = ["NotARunError", "TRAIN", "EVAL", "read_json", "run_kind", "planned_total", "finite_values", "wall_times",
           "fmt_number"]

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


def planned_total(manifest: dict[str, Any], config: dict[str, Any]) -> int | None:
    """The env steps a run is planned to reach (its config's ``total_timesteps`` cut into the
    manifest plan's chunks), or None when the files do not say."""
    from rljax.training.program import plan_updates

    plan = manifest.get("plan") or {}
    try:
        return plan_updates(int(config["total_timesteps"]), int(plan["env_steps_per_update"]),
                            int(plan["updates_per_chunk"])).total_env_steps
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
