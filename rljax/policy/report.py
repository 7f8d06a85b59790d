"""Evaluation reports: summary statistics with a bootstrap confidence interval, and the files of
``RUN_DIR/eval/<step>/`` (``report.json``, ``report.md``, ``returns.png``).

:func:`summarize` turns per-episode values into the statistics a report shows; :func:`build_report`
assembles one evaluation's record; :func:`write_report` writes it. Every file is written to a
temporary name beside its target and moved into place with ``os.replace``, ``report.json`` last,
so a reader never sees a half-written file and a present ``report.json`` means the rest is there.

The bootstrap draws from ``numpy.random.default_rng(BOOTSTRAP_SEED)``: the same episodes always
give the same interval, so a report is reproducible from its per-episode values.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["BOOTSTRAP_SEED", "BOOTSTRAP_RESAMPLES", "summarize", "bootstrap_ci", "build_report", "write_report",
           "format_markdown", "replace_into", "REPORT_FILES"]

BOOTSTRAP_SEED = 0
"""Seed of the bootstrap's generator (fixed, so a report's interval is reproducible)."""
BOOTSTRAP_RESAMPLES = 10_000
"""Resamples of the percentile bootstrap."""
REPORT_FILES = ("report.json", "report.md", "returns.png")
"""The files :func:`write_report` writes into an evaluation's directory."""


def bootstrap_ci(values: Sequence[float] | np.ndarray, confidence: float = 0.95,
                 resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the mean.

    Args:
        values: ``[N]`` per-episode values, N >= 1.
        confidence: the interval's coverage, in (0, 1).
        resamples: bootstrap resamples (each draws N values with replacement).
        seed: seed of ``numpy.random.default_rng``; the same values and seed give the same interval.

    Returns:
        ``(low, high)``: the ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles of the
        resampled means (``(v, v)`` for a single value or constant values).
    """
    x = np.asarray(values, np.float64).reshape(-1)
    if x.size == 0:
        raise ValueError("bootstrap_ci needs at least one value, got none")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [alpha, 1.0 - alpha])
    # Quantiles of means of identical values can differ from them in the last bit; an interval
    # must contain the mean it is about.
    mean = float(x.mean())
    return min(float(low), mean), max(float(high), mean)


def summarize(values: Sequence[float] | np.ndarray, confidence: float = 0.95) -> dict[str, float]:
    """Summary statistics of per-episode values.

    Args:
        values: ``[N]`` values (returns or lengths), N >= 1.
        confidence: coverage of the bootstrap interval of the mean.

    Returns:
        ``mean``, ``std`` (population standard deviation, numpy's default ``ddof=0``), ``median``,
        ``q25``, ``q75``, ``iqr`` (``q75 - q25``; quantiles by numpy's linear interpolation),
        ``min``, ``max``, ``ci_low`` and ``ci_high`` (:func:`bootstrap_ci`), all Python floats.
    """
    x = np.asarray(values, np.float64).reshape(-1)
    if x.size == 0:
        raise ValueError("summarize needs at least one value, got none")
    q25, median, q75 = np.quantile(x, [0.25, 0.5, 0.75])
    low, high = bootstrap_ci(x, confidence)
    return {"mean": float(x.mean()), "std": float(x.std()), "median": float(median), "q25": float(q25),
            "q75": float(q75), "iqr": float(q75 - q25), "min": float(x.min()), "max": float(x.max()),
            "ci_low": low, "ci_high": high}


def build_report(returns: Any, lengths: Any, truncated: Any, **fields: Any) -> dict[str, Any]:
    """One evaluation's record, as ``report.json`` holds it.

    Args:
        returns: ``[N]`` undiscounted episode returns.
        lengths: ``[N]`` episode lengths.
        truncated: ``[N]`` bool: the episode was cut by a time limit rather than terminated.
        **fields: what was evaluated and how, stored as given (JSON values): e.g. ``run_dir``,
            ``member``, ``algorithm``, ``env``, ``checkpoint_step``, ``config_hash``,
            ``deterministic``, ``seed``, ``env_param_overrides``, ``wall_s``.

    Returns:
        A JSON-ready dict: ``fields``, plus ``num_episodes``, ``return`` and ``length``
        (:func:`summarize`), ``truncated_fraction``, ``confidence`` (0.95), ``bootstrap``
        (seed and resamples), the per-episode ``returns``, ``lengths`` and ``truncated``, and
        ``created`` (UTC, ISO 8601).
    """
    returns = np.asarray(returns, np.float64).reshape(-1)
    lengths = np.asarray(lengths).reshape(-1).astype(np.int64)
    truncated = np.asarray(truncated).reshape(-1).astype(bool)
    if not returns.size == lengths.size == truncated.size:
        raise ValueError(f"returns, lengths and truncated differ in length: {returns.size}, {lengths.size}, "
                         f"{truncated.size}")
    report = dict(fields)
    report.update({
        "num_episodes": int(returns.size),
        "return": summarize(returns),
        "length": summarize(lengths),
        "truncated_fraction": float(truncated.mean()) if truncated.size else 0.0,
        "confidence": 0.95,
        "bootstrap": {"method": "percentile", "resamples": BOOTSTRAP_RESAMPLES, "seed": BOOTSTRAP_SEED},
        "returns": [float(r) for r in returns],
        "lengths": [int(n) for n in lengths],
        "truncated": [bool(t) for t in truncated],
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    })
    return report


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}" if math.isfinite(v) else str(v)
    return str(v)


def format_markdown(report: Mapping[str, Any]) -> str:
    """``report.md``: a short human-readable page of a :func:`build_report` record."""
    who = report.get("env", "?") + (f", member {report['member']}" if report.get("member") is not None else "")
    mode = "deterministic (greedy)" if report.get("deterministic", True) else "stochastic"
    lines = [f"# Evaluation: {report.get('algorithm', '?')} on {who}", ""]
    lines += [f"- {label}: {fmt.format(report[key])}" for key, label, fmt in (
        ("run_dir", "run directory", "`{}`"), ("checkpoint_step", "checkpoint step", "{}"),
        ("config_hash", "config hash", "`{}`")) if report.get(key) is not None]
    lines += [f"- policy: {mode}",
              f"- episodes: {report['num_episodes']}"
              + (f" (seed {report['seed']})" if report.get("seed") is not None else "") + "; "
              f"{100 * report['truncated_fraction']:.0f} % cut by the time limit",
              f"- env param overrides: {_overrides_text(report.get('env_param_overrides'))}",
              f"- created: {report.get('created')}", "",
              "| | mean | 95 % CI of the mean | std | median | IQR (q25 to q75) | min | max |",
              "|---|---|---|---|---|---|---|---|"]
    for name in ("return", "length"):
        s = report[name]
        lines.append(f"| {name} | {_fmt(s['mean'])} | {_fmt(s['ci_low'])} to {_fmt(s['ci_high'])} | {_fmt(s['std'])} "
                     f"| {_fmt(s['median'])} | {_fmt(s['iqr'])} ({_fmt(s['q25'])} to {_fmt(s['q75'])}) "
                     f"| {_fmt(s['min'])} | {_fmt(s['max'])} |")
    lines += ["", f"The interval is a percentile bootstrap ({report['bootstrap']['resamples']} resamples, "
              f"seed {report['bootstrap']['seed']}). Per-episode values are in `report.json`; the histogram "
              f"of returns is `returns.png`.", ""]
    return "\n".join(lines)


def _overrides_text(overrides: Mapping[str, Any] | None) -> str:
    if not overrides:
        return "none (the params the policy trained with)"
    return ", ".join(f"`{k}={v}`" for k, v in overrides.items())


def _bins(values: np.ndarray) -> Any:
    """Histogram bins: one per integer when the values are a few dozen integers apart (CartPole's
    returns), else numpy's automatic choice, at most 30."""
    low, high = float(values.min()), float(values.max())
    if np.all(values == np.round(values)) and high - low <= 60:
        return np.arange(low - 0.5, high + 1.5)
    return min(30, len(np.histogram_bin_edges(values, "auto")) - 1)


def _plot_histogram(report: Mapping[str, Any], path: pathlib.Path) -> None:
    """Writes a histogram of the report's returns as a PNG at ``path`` (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    returns = np.asarray(report["returns"], np.float64)
    finite = returns[np.isfinite(returns)]   # a NaN/inf return (a broken env) has no place on the axis
    stats = report["return"]
    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    if finite.size:
        ax.hist(finite, bins=_bins(finite), color="tab:blue", alpha=0.8)
    if all(np.isfinite([stats["mean"], stats["ci_low"], stats["ci_high"]])):
        ax.axvline(stats["mean"], color="k", linewidth=1.5, label=f"mean {stats['mean']:.4g}")
        ax.axvspan(stats["ci_low"], stats["ci_high"], color="k", alpha=0.15, label="95 % CI of the mean")
    missing = returns.size - finite.size
    ax.set_xlabel("episode return" + (f" ({missing} non-finite returns not drawn)" if missing else ""))
    ax.set_ylabel("episodes")
    mode = "greedy" if report.get("deterministic", True) else "stochastic"
    ax.set_title(f"{report.get('algorithm', '?')} {report.get('env', '?')}, step {report.get('checkpoint_step')}: "
                 f"{report['num_episodes']} episodes ({mode})", fontsize=9)
    if ax.get_legend_handles_labels()[1]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=90)


def _finite(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by None (JSON has no NaN or infinity)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def replace_into(path: pathlib.Path, write: Any) -> None:
    """Calls ``write(tmp)`` on a temporary name beside ``path``, then moves it into place
    (``os.replace``); the temporary file is removed however ``write`` ends."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_report(directory: str | os.PathLike, report: Mapping[str, Any]) -> pathlib.Path:
    """Writes ``report.json``, ``report.md`` and ``returns.png`` into ``directory`` (created if
    needed), each atomically, ``report.json`` last.

    Args:
        directory: the evaluation's directory, e.g. ``RUN_DIR/eval/<step>``.
        report: a :func:`build_report` record.

    Returns:
        The path of ``report.json``.
    """
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    replace_into(directory / "returns.png", lambda tmp: _plot_histogram(report, tmp))
    replace_into(directory / "report.md", lambda tmp: tmp.write_text(format_markdown(report), encoding="utf-8"))
    text = json.dumps(_finite(report), indent=2, sort_keys=True, allow_nan=False) + "\n"
    replace_into(directory / "report.json", lambda tmp: tmp.write_text(text, encoding="utf-8"))
    return directory / "report.json"
