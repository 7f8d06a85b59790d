"""The drawing that ``rljax inspect``'s figures share (:mod:`rljax.cli.inspect`,
:mod:`rljax.cli.compare`): a figure without pyplot's global state, an env-steps axis with few
compact ticks (``100k``, ``1.5M``), a curve smoothed with its raw values faintly behind, and saving.
"""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np

from rljax.cli.rundata import fmt_compact, smooth

__all__ = ["RAW_GID", "new_figure", "steps_axis", "draw_curve", "save"]

RAW_GID = "raw"
"""The ``gid`` of the faint line of raw values drawn behind a smoothed one."""


def new_figure(figsize: tuple[float, float]) -> Any:
    """A matplotlib ``Figure`` with its own Agg canvas (no pyplot: nothing global, nothing to close)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig


def steps_axis(ax: Any, nbins: int = 5, label: str | None = "env steps") -> None:
    """Makes the x axis of ``ax`` an env-steps axis: at most ``nbins`` intervals between ticks,
    labelled ``500``, ``100k``, ``1.5M`` (:func:`~rljax.cli.rundata.fmt_compact`), so the labels of a
    small panel do not run into each other."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(nbins=nbins, steps=[1, 2, 2.5, 5, 10], min_n_ticks=2))
    ax.xaxis.set_major_formatter(FuncFormatter(fmt_compact))
    if label:
        ax.set_xlabel(label)


def draw_curve(ax: Any, x: Any, y: Any, window: int = 1, **kwargs: Any) -> Any:
    """Draws ``y`` against ``x`` on ``ax``; with ``window`` > 1 the centred rolling mean over
    ``window`` points (:func:`~rljax.cli.rundata.smooth`) in front of the raw values, drawn faint,
    thin, in the same colour and without a legend entry (``gid`` :data:`RAW_GID`). Returns the main
    line (its ``get_ydata()`` is what the curve shows)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if window <= 1:
        return ax.plot(x, y, **kwargs)[0]
    (raw,) = ax.plot(x, y, color=kwargs.get("color"), alpha=0.25, linewidth=0.7, label="_raw", gid=RAW_GID)
    return ax.plot(x, smooth(y, window), **{**kwargs, "color": raw.get_color()})[0]


def save(fig: Any, path: pathlib.Path, dpi: int = 90) -> pathlib.Path:
    """Writes ``fig`` to ``path`` (a PNG, its folder made) after laying it out; returns ``path``."""
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    return path
