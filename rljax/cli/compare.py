"""``rljax inspect A B ...``: several runs or sweeps side by side, from their files alone.

Each directory given is a run or a sweep; a sweep contributes one *curve* per config (the mean
over its seeds, as ``configs.png`` draws it), a run one. The comparison prints one table row per
curve: what it trained, how far it got, its final and best training return, its last greedy
evaluation, its wall time and median steps/s, and the config fields in which the curves differ
(every other field is the same, and said once; a config of several seeds has their list as its
``seed``, so a sweep's seeds differ from a run's one). ``compare.png`` overlays the training-return
curves against env steps and against wall time (evaluations as dots), its legend naming each curve
by the config fields that differ (:func:`legend_labels`).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from rljax.cli.plotting import draw_curve, new_figure, save, steps_axis
from rljax.cli.rundata import (EVAL, TRAIN, config_label, finite_values, fmt_number, planned_total, read_json,
                               read_run_status, run_kind, smooth, wall_times)
from rljax.store.tracking import FINAL_RETURN_CHUNKS

__all__ = ["Curve", "curves", "comparison_text", "compare_figure", "compare_plot", "differing_fields", "legend_labels"]


@dataclasses.dataclass
class Curve:
    """One line of a comparison: a run, or one config of a sweep (its seeds averaged).

    Attributes:
        label: how the table and the legend name it (the directory's name; ``DIR:CONFIG`` for a
            sweep's config; the whole path where names collide).
        config: the resolved config (a sweep's config: its first member's, with ``seed`` the sorted
            list of its members' seeds when it has several).
        algorithm: the config class's name without ``Config``.
        member_rows: the ``metrics.jsonl`` rows of each seed (one list for a run).
        member_chunks: the ``chunks.jsonl`` rows of each seed.
        total: the env steps it is planned to reach per seed, or None when unknown.
    """

    label: str
    config: dict[str, Any]
    algorithm: str
    member_rows: list[list[dict[str, Any]]]
    member_chunks: list[list[dict[str, Any]]]
    total: int | None


def curves(run_dirs: Sequence[str | pathlib.Path]) -> list[Curve]:
    """The curves of ``run_dirs`` (runs or sweeps), labelled uniquely.

    Raises:
        rljax.cli.rundata.NotARunError: a directory that is neither (the message names it).
    """
    from rljax.store.tracking import read_chunks, read_metrics

    out: list[tuple[pathlib.Path, str, Curve]] = []
    for run_dir in map(pathlib.Path, run_dirs):
        kind = run_kind(run_dir)
        if kind == "run":
            manifest = read_json(run_dir / "manifest.json") or {}
            config = read_json(run_dir / "config.json") or {}
            out.append((run_dir, "", Curve("", config, str(manifest.get("algorithm") or "?").removesuffix("Config"),
                                           [read_metrics(run_dir)], [read_chunks(run_dir)],
                                           planned_total(manifest, config, read_run_status(run_dir)))))
            continue
        from rljax.training.sweep import Member

        record = read_json(run_dir / "sweep.json") or {}
        members = [Member(**m) for m in record.get("members", [])]
        by_label: dict[str, list[Any]] = {}
        for m in members:
            by_label.setdefault(m.label, []).append(m)
        status = read_run_status(run_dir)
        for label, group in by_label.items():
            first = run_dir / "members" / group[0].name
            manifest = read_json(first / "manifest.json") or {}
            config = read_json(first / "config.json") or {}
            seeds = sorted({m.seed for m in group})
            if len(seeds) > 1:
                config = {**config, "seed": seeds}
            out.append((run_dir, label, Curve(
                "", config, str(manifest.get("algorithm") or "?").removesuffix("Config"),
                [read_metrics(run_dir / "members" / m.name) for m in group],
                [read_chunks(run_dir / "members" / m.name) for m in group], planned_total(manifest, config, status))))
    names = [d.name for d, _, _ in out]
    for run_dir, label, curve in out:
        base = run_dir.name if names.count(run_dir.name) == sum(d == run_dir for d, _, _ in out) else str(run_dir)
        curve.label = f"{base}:{label}" if label else base
    return [curve for _, _, curve in out]


def _finite(rows: list[dict[str, Any]], key: str) -> list[float]:
    return [v for _, v in finite_values(rows, key)]


def _mean_over_seeds(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(np.mean(known)) if known else None


def _summary(curve: Curve) -> dict[str, Any]:
    """The table's figures of one curve (means over its seeds)."""
    finals, bests, evals, walls, sps, done = [], [], [], [], [], []
    for rows, chunks in zip(curve.member_rows, curve.member_chunks):
        train = _finite(chunks, TRAIN)
        finals.append(float(np.mean(train[-FINAL_RETURN_CHUNKS:])) if train else None)
        bests.append(max(train, default=None))  # per chunk, as rljax inspect RUN_DIR says it
        ev = _finite(chunks, EVAL)
        evals.append(ev[-1] if ev else None)
        walls.append(float(chunks[-1].get("wall_time_s") or 0.0) if chunks else None)
        rates = _finite(chunks, "sps")
        sps.append(float(np.median(rates)) if rates else None)
        done.append(int(chunks[-1]["env_steps"]) if chunks else 0)
    return {"final": _mean_over_seeds(finals), "best": _mean_over_seeds(bests), "eval": _mean_over_seeds(evals),
            "wall": _mean_over_seeds(walls), "sps": _mean_over_seeds(sps), "done": min(done, default=0)}


def differing_fields(configs: Sequence[dict[str, Any]]) -> list[str]:
    """The config fields whose values are not the same in every one of ``configs`` (sorted)."""
    keys = sorted({k for c in configs for k in c})
    return [k for k in keys if len({json.dumps(c.get(k), sort_keys=True) for c in configs}) > 1]


def legend_labels(items: Sequence[Curve]) -> list[str]:
    """How ``compare.png``'s legend names each curve: by the config fields in which the curves differ
    (``lr=0.001, ent=0.01``, :func:`~rljax.cli.rundata.config_label`), then its seeds when it has
    several (``(2 seeds)``) or when the seed differs (``(seed 0)``); by its :attr:`Curve.label` where
    no field differs or two would read the same (``name: ...``)."""
    differ = differing_fields([c.config for c in items])
    fields = [k for k in differ if k != "seed"]
    labels = []
    for c in items:
        text = config_label({k: c.config.get(k) for k in fields})
        n = len(c.member_rows)
        seeds = f"{n} seeds" if n > 1 else f"seed {c.config.get('seed')}" if "seed" in differ else ""
        labels.append(f"{text} ({seeds})" if text and seeds else text or seeds)
    return [c.label if not text else f"{c.label}: {text}" if labels.count(text) > 1 else text
            for c, text in zip(items, labels)]


def comparison_text(items: Sequence[Curve]) -> str:
    """The comparison table: one row per curve, then the config they share."""
    differ = differing_fields([c.config for c in items])
    head = ["run", "algorithm", "env steps", "final return", "best return", "last eval", "wall time", "steps/s"]
    head += differ
    table = []
    for c in items:
        s = _summary(c)
        steps = f"{s['done']:,}" + (f" / {c.total:,}" if c.total else "")
        seeds = f" ({len(c.member_rows)} seeds)" if len(c.member_rows) > 1 else ""
        table.append([c.label + seeds, c.algorithm, steps, fmt_number(s["final"]), fmt_number(s["best"]), fmt_number(s["eval"]),
                      "n/a" if s["wall"] is None else f"{s['wall']:.1f} s", fmt_number(s["sps"], 0)]
                     + [json.dumps(c.config.get(k)) for k in differ])
    widths = [max(len(str(row[i])) for row in [head, *table]) for i in range(len(head))]
    lines = [f"{len(items)} runs compared (final return: mean of the last {FINAL_RETURN_CHUNKS} chunks' training "
             f"episodes; a sweep's config: the mean over its seeds)"]
    lines += ["  ".join(str(v).ljust(w) for v, w in zip(row, widths)).rstrip() for row in [head, *table]]
    same = sorted(set(items[0].config) - set(differ)) if items else []
    if same:
        shared = ", ".join(f"{k}={json.dumps(items[0].config[k])}" for k in same if k in ("env", "total_timesteps",
                                                                                           "num_envs", "seed"))
        lines.append(f"the same in every run: {len(same)} config fields" + (f" ({shared}, ...)" if shared else ""))
    return "\n".join(lines)


def compare_figure(items: Sequence[Curve], window: int = 1) -> Any:
    """The figure of :func:`compare_plot` (its data and labels can be read from its axes)."""
    from rljax.training.sweep import mean_curve

    fig = new_figure((12, 4.5))
    by_steps, by_wall = fig.subplots(1, 2, sharey=True)
    for c, label in zip(items, legend_labels(items)):
        curve = mean_curve(c.member_rows, TRAIN)
        if curve is None:
            continue
        x, mean, std = curve
        line = draw_curve(by_steps, x, mean, window, linewidth=1.2, label=label)
        if len(c.member_rows) > 1:
            mean, std = smooth(mean, window), smooth(std, window)
            by_steps.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=0.15)
        evals = mean_curve(c.member_chunks, EVAL)
        if evals is not None:
            by_steps.plot(evals[0], evals[1], "o--", color=line.get_color(), markersize=3, linewidth=0.8)
        rows = c.member_rows[0]  # wall time: the first seed's (a sweep's seeds share the clock)
        wall, values = wall_times(rows), np.array([r.get(TRAIN) if r.get(TRAIN) is not None else np.nan
                                                    for r in rows], float)
        keep = np.isfinite(wall) & np.isfinite(values)
        draw_curve(by_wall, wall[keep], values[keep], window, linewidth=1.2, color=line.get_color())
    steps_axis(by_steps)
    by_wall.set_xlabel("wall time (s)")
    by_steps.set_ylabel("episode return (training; evaluations: dots)")
    if window > 1:
        by_steps.set_title(f"training return: centred mean over {window} points, raw faint", fontsize=9)
    for ax in (by_steps, by_wall):
        ax.grid(alpha=0.3)
    if by_steps.get_legend_handles_labels()[0]:
        by_steps.legend(fontsize=7)
    return fig


def compare_plot(items: Sequence[Curve], path: pathlib.Path, window: int = 1) -> pathlib.Path:
    """``path`` (a PNG): every curve's training return against env steps and against wall time,
    smoothed over ``window`` points (1: none; :func:`rljax.cli.plotting.draw_curve`)."""
    smooth([], window)  # a bad window is refused before anything is written
    return save(compare_figure(items, window), path)
