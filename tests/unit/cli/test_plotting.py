"""Tests for rljax.cli.plotting: the env-steps axis's compact, sparse ticks, a smoothed curve with its
raw values faint behind it, and saving a figure without pyplot."""

from __future__ import annotations

import numpy as np

from rljax.cli.plotting import RAW_GID, draw_curve, new_figure, save, steps_axis
from rljax.cli.rundata import smooth


def test_the_steps_axis_has_few_compact_tick_labels():
    fig = new_figure((3, 2))
    ax = fig.add_subplot()
    ax.plot([0, 432_640], [0, 1])
    steps_axis(ax)
    fig.canvas.draw()
    low, high = ax.get_xlim()
    labels = [t.get_text() for t, x in zip(ax.get_xticklabels(), ax.get_xticks()) if low <= x <= high]
    assert 2 <= len(labels) <= 6, labels
    assert "400k" in labels and all(len(label) <= 5 for label in labels), labels
    assert ax.get_xlabel() == "env steps"


def test_a_smoothed_curve_is_drawn_over_its_raw_values_in_the_same_colour():
    fig = new_figure((3, 2))
    ax = fig.add_subplot()
    x, y = np.arange(10.0), np.array([0, 4, 0, 4, 0, 4, 0, 4, 0, 4], float)
    line = draw_curve(ax, x, y, window=3, label="lr=0.001")
    raw = [other for other in ax.lines if other.get_gid() == RAW_GID]
    assert len(raw) == 1 and raw[0].get_color() == line.get_color()
    np.testing.assert_allclose(raw[0].get_ydata(), y)
    np.testing.assert_allclose(line.get_ydata(), smooth(y, 3))
    assert [h.get_label() for h in ax.get_legend_handles_labels()[0]] == ["lr=0.001"]  # the raw line has no entry
    plain = draw_curve(fig.add_subplot(2, 1, 2), x, y)  # window 1: the values as they are, alone
    np.testing.assert_allclose(plain.get_ydata(), y)
    assert [other.get_gid() for other in plain.axes.lines] == [None]


def test_save_writes_a_png_into_a_new_folder(tmp_path):
    fig = new_figure((2, 2))
    fig.add_subplot().plot([0, 1], [1, 0])
    path = save(fig, tmp_path / "made" / "plot.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
