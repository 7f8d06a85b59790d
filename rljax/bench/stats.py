"""Aggregate performance over runs and tasks, with stratified bootstrap confidence intervals.

The estimators of Agarwal et al. 2021, "Deep Reinforcement Learning at the Edge of the Statistical
Precipice" (NeurIPS), with the definitions of its reference library rliable 1.2.0 (``metrics.py``,
``library.py``), on numpy alone and in float64.

Every statistic takes normalised scores ``[..., runs, tasks]`` (runs are seeds, tasks are envs) and
reduces the last two axes, so one call evaluates a whole batch of bootstrap resamples
``[reps, ..., runs, tasks]``. :func:`stratified_bootstrap` draws those resamples (runs with
replacement, independently within each task) and returns the percentile interval; the functions
ending in ``_intervals`` apply it to one score array per algorithm, the form a bench report takes.
"""

from __future__ import annotations

import functools
import itertools
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike

Statistic = Callable[..., np.ndarray]
"""A function of score arrays ``[..., runs, tasks]`` returning ``[..., *out]`` (the leading axes kept)."""

_CHUNK_ELEMENTS = 1 << 20  # resampled scores evaluated at once; bounds memory for long curves


class Interval(NamedTuple):
    """A statistic of the observed scores with its bootstrap confidence interval.

    Attributes:
        estimate: The statistic on the scores as given: a float, or an array ``[*out]`` (a profile's
            ``[taus]``, a curve's ``[points]``).
        low: The lower bound, the ``(1 - confidence) / 2`` quantile of the bootstrap statistics;
            same shape as ``estimate``.
        high: The upper bound, the ``(1 + confidence) / 2`` quantile; same shape as ``estimate``.
    """

    estimate: float | np.ndarray
    low: float | np.ndarray
    high: float | np.ndarray

    def as_dict(self) -> dict[str, Any]:
        """``{"estimate": x, "low": l, "high": h}`` with floats or lists of floats (JSON-ready)."""
        return {name: _plain(getattr(self, name)) for name in self._fields}


def as_plain(tree: Any) -> Any:
    """Nested mappings of :class:`Interval` (as the ``*_intervals`` functions return) as plain dicts.

    Args:
        tree: An :class:`Interval`, or a mapping whose values are such trees.

    Returns:
        The same nesting with each interval replaced by :meth:`Interval.as_dict`, e.g.
        ``{"ppo": {"iqm": {"estimate": 0.8, "low": 0.7, "high": 0.9}, ...}}``.
    """
    if isinstance(tree, Interval):
        return tree.as_dict()
    return {key: as_plain(value) for key, value in tree.items()}


# ----------------------------------------------------------------------------------------------
# Point estimates (rliable.metrics)


def aggregate_mean(scores: ArrayLike) -> np.ndarray:
    """The mean over tasks of the per-task mean score (rliable's ``aggregate_mean``).

    ``mean = (1/M) sum_m (1/N) sum_n x[n, m]`` for ``N`` runs and ``M`` tasks.

    Args:
        scores: Normalised scores ``[..., runs, tasks]``.

    Returns:
        ``[...]`` float64 (a 0-d array for a ``[runs, tasks]`` input).
    """
    scores = _scores(scores)
    return scores.mean(axis=-2).mean(axis=-1)


def aggregate_median(scores: ArrayLike) -> np.ndarray:
    """The median over tasks of the per-task mean score (rliable's ``aggregate_median``).

    ``median = median_m (1/N) sum_n x[n, m]``: the runs are averaged first, so this is not the
    median of all ``N M`` scores.

    Args:
        scores: Normalised scores ``[..., runs, tasks]``.

    Returns:
        ``[...]`` float64.
    """
    scores = _scores(scores)
    return np.median(scores.mean(axis=-2), axis=-1)


def aggregate_iqm(scores: ArrayLike) -> np.ndarray:
    """The interquartile mean of all ``runs x tasks`` scores (rliable's ``aggregate_iqm``).

    The 25 % trimmed mean of ``scipy.stats.trim_mean(x, 0.25, axis=None)``: with the ``K = N M``
    scores sorted, ``x_(1) <= ... <= x_(K)``, and ``g = floor(K / 4)`` cut from each end,
    ``IQM = (1 / (K - 2g)) sum_{k=g+1}^{K-g} x_(k)``. When ``K`` is not a multiple of 4 the kept
    middle is more than half the scores (no fractional weights); below 4 scores it is the mean.

    Args:
        scores: Normalised scores ``[..., runs, tasks]``.

    Returns:
        ``[...]`` float64.
    """
    scores = _scores(scores)
    flat = np.sort(scores.reshape(scores.shape[:-2] + (-1,)), axis=-1)
    cut = int(0.25 * flat.shape[-1])
    return flat[..., cut:flat.shape[-1] - cut].mean(axis=-1)


def aggregate_optimality_gap(scores: ArrayLike, gamma: float = 1.0) -> np.ndarray:
    """How far the scores fall short of ``gamma`` on average (rliable's ``aggregate_optimality_gap``).

    ``gap = gamma - (1/(N M)) sum_{n,m} min(x[n, m], gamma) = (1/(N M)) sum_{n,m} max(gamma - x[n, m], 0)``;
    lower is better, and scores above ``gamma`` earn nothing extra.

    Args:
        scores: Normalised scores ``[..., runs, tasks]``.
        gamma: The target normalised score (1: the normalising reference, e.g. human level).

    Returns:
        ``[...]`` float64.
    """
    scores = _scores(scores)
    return gamma - np.minimum(scores, gamma).mean(axis=(-2, -1))


AGGREGATES: Mapping[str, Statistic] = {
    "iqm": aggregate_iqm,
    "mean": aggregate_mean,
    "median": aggregate_median,
    "optimality_gap": aggregate_optimality_gap,
}
"""The paper's four aggregate metrics by the names a report uses."""


def probability_of_improvement(scores_x: ArrayLike, scores_y: ArrayLike) -> np.ndarray:
    """P(X > Y): how likely a run of X beats a run of Y on a task, averaged over tasks.

    Per task ``m``, the Mann-Whitney U statistic over the ``N_x N_y`` pairs of runs, ties counted
    one half, divided by the number of pairs (rliable's ``probability_of_improvement``):
    ``P_m = (1/(N_x N_y)) sum_{i,j} ([x[i, m] > y[j, m]] + 1/2 [x[i, m] = y[j, m]])`` and
    ``P(X > Y) = (1/M) sum_m P_m``. So ``P(X > Y) + P(Y > X) = 1``.

    Args:
        scores_x: Normalised scores of X ``[..., runs_x, tasks]``.
        scores_y: Normalised scores of Y ``[..., runs_y, tasks]``, the same leading axes and tasks.

    Returns:
        ``[...]`` float64 in [0, 1].
    """
    x, y = _scores(scores_x, "scores_x"), _scores(scores_y, "scores_y")
    if x.shape[:-2] != y.shape[:-2] or x.shape[-1] != y.shape[-1]:
        raise ValueError(f"scores_x {x.shape} and scores_y {y.shape} must have the same tasks (last axis) "
                         f"and leading axes; only the runs axis (-2) may differ")
    total = np.zeros(x.shape[:-2])
    for m in range(x.shape[-1]):  # one task at a time bounds the pairs to [..., runs_x, runs_y]
        xs, ys = x[..., :, None, m], y[..., None, :, m]
        total += (xs > ys).mean(axis=(-2, -1)) + 0.5 * (xs == ys).mean(axis=(-2, -1))
    return total / x.shape[-1]


def performance_profile(scores: ArrayLike, taus: ArrayLike) -> np.ndarray:
    """The score distribution: the fraction of all run scores above each threshold.

    ``F(tau) = (1/(N M)) sum_{n,m} [x[n, m] > tau]`` (rliable's ``score_distributions``, the
    default profile of its ``create_performance_profile``).

    Args:
        scores: Normalised scores ``[..., runs, tasks]``.
        taus: Thresholds ``[taus]``.

    Returns:
        ``[..., taus]`` float64, non-increasing in ``tau``.
    """
    scores, taus = _scores(scores), _taus(taus)
    flat = np.sort(scores.reshape(scores.shape[:-2] + (-1,)), axis=-1)
    count = flat.shape[-1]
    rows = flat.reshape(-1, count)  # a sorted row counts the scores above each tau by bisection
    above = np.stack([count - np.searchsorted(row, taus, side="right") for row in rows])
    return (above / count).reshape(flat.shape[:-1] + taus.shape)


def average_performance_profile(scores: ArrayLike, taus: ArrayLike) -> np.ndarray:
    """The average score distribution: the fraction of tasks whose mean score is above each threshold.

    ``F_avg(tau) = (1/M) sum_m [(1/N) sum_n x[n, m] > tau]`` (rliable's
    ``average_score_distributions``, ``use_score_distribution=False``). Coarser (steps of ``1/M``)
    and with wider bands than :func:`performance_profile`, the profile the paper recommends.

    Args:
        scores: Normalised scores ``[..., runs, tasks]``.
        taus: Thresholds ``[taus]``.

    Returns:
        ``[..., taus]`` float64.
    """
    scores, taus = _scores(scores), _taus(taus)
    return (scores.mean(axis=-2)[..., None] > taus).mean(axis=-2)


# ----------------------------------------------------------------------------------------------
# Stratified bootstrap (rliable.library)


def stratified_bootstrap(statistic: Statistic, *scores: ArrayLike, reps: int = 2000, confidence: float = 0.95,
                         seed: int | Sequence[int] = 0) -> Interval:
    """A statistic of score arrays with its stratified bootstrap percentile interval.

    Each resample keeps the tasks and draws, independently for every task, ``N`` runs with
    replacement from that task's ``N`` runs, ``x*[n, m] = x[I[n, m], m]`` with ``I[n, m]`` uniform on
    ``{0, ..., N-1}`` (rliable's ``StratifiedBootstrap``; with several
    arrays each is resampled independently, its ``StratifiedIndependentBootstrap``). Leading axes
    of a score array (a curve's evaluation points) share the run draw, so a run is resampled whole.
    The interval is ``[q_{(1-c)/2}, q_{(1+c)/2}]`` of the ``reps`` bootstrap statistics (linear
    interpolation between order statistics, ``np.percentile``'s default, as arch's ``percentile``
    method): Efron & Tibshirani 1993, ch. 13.

    Args:
        statistic: Maps arrays ``[reps, ..., runs_i, tasks]`` (one per score array) to
            ``[reps, *out]``, and the unbatched arrays to ``[*out]``; every function of this module
            does (bind extra arguments with ``functools.partial``).
        *scores: Normalised score arrays ``[..., runs_i, tasks]``, float64 after conversion.
        reps: Number of bootstrap resamples.
        confidence: Coverage of the interval, in (0, 1).
        seed: Seed of the ``numpy.random.Generator`` (an int or a sequence of ints, as
            ``np.random.default_rng`` takes); the same seed gives the same interval bit for bit.

    Returns:
        The :class:`Interval` of the statistic, each field a float or ``[*out]`` array.
    """
    arrays = [_scores(s, f"scores[{i}]" if len(scores) > 1 else "scores") for i, s in enumerate(scores)]
    if not arrays:
        raise ValueError("stratified_bootstrap needs at least one score array")
    if not isinstance(reps, (int, np.integer)) or reps < 1:
        raise ValueError(f"reps must be a positive integer; got {reps!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1); got {confidence!r}")
    rng = np.random.default_rng(seed)
    draws = [rng.integers(0, a.shape[-2], size=(reps,) + a.shape[-2:]) for a in arrays]
    chunk = max(1, _CHUNK_ELEMENTS // max(a.size for a in arrays))
    samples = np.concatenate([
        np.asarray(statistic(*[_resample(a, d[start:start + chunk]) for a, d in zip(arrays, draws)]),
                   dtype=np.float64)
        for start in range(0, reps, chunk)])
    tail = 100.0 * (1.0 - confidence) / 2.0
    low, high = np.percentile(samples, [tail, 100.0 - tail], axis=0)
    return Interval(_squeeze(statistic(*arrays)), _squeeze(low), _squeeze(high))


def aggregate_intervals(scores_by_algorithm: Mapping[str, ArrayLike],
                        aggregates: Mapping[str, Statistic] = AGGREGATES, *, reps: int = 2000,
                        confidence: float = 0.95, seed: int = 0) -> dict[str, dict[str, Interval]]:
    """Each algorithm's aggregates with their stratified bootstrap intervals.

    All aggregates of an algorithm are evaluated on the same ``reps`` resamples, drawn with the seed
    ``(seed, crc32(name))``: an algorithm's figures do not depend on which others are in the report.

    Args:
        scores_by_algorithm: Normalised scores ``[runs, tasks]`` per algorithm name (the runs may
            differ between algorithms, the tasks may not).
        aggregates: Statistics of ``[..., runs, tasks]`` by the name the result gives them.
        reps: Number of bootstrap resamples.
        confidence: Coverage of the intervals.
        seed: Base seed.

    Returns:
        ``{algorithm: {aggregate: Interval}}``, e.g. ``result["ppo"]["iqm"].low``; :func:`as_plain`
        makes it ``{"ppo": {"iqm": {"estimate": x, "low": l, "high": h}, ...}}``.
    """
    table = _score_table(scores_by_algorithm, ndim=2)
    names = list(aggregates)
    if not names:
        raise ValueError("aggregates is empty: name at least one statistic")

    def stacked(scores: np.ndarray) -> np.ndarray:
        return np.stack([np.asarray(aggregates[n](scores), dtype=np.float64) for n in names], axis=-1)

    out = {}
    for algorithm, scores in table.items():
        both = stratified_bootstrap(stacked, scores, reps=reps, confidence=confidence,
                                    seed=(seed, _name_seed(algorithm)))
        out[algorithm] = {n: Interval(*(float(field[i]) for field in both)) for i, n in enumerate(names)}
    return out


def probability_of_improvement_intervals(scores_by_algorithm: Mapping[str, ArrayLike], *, reps: int = 2000,
                                         confidence: float = 0.95,
                                         seed: int = 0) -> dict[str, dict[str, Interval]]:
    """P(X > Y) for every ordered pair of algorithms, with stratified bootstrap intervals.

    Both algorithms' runs are resampled, independently and within each task (rliable's
    ``StratifiedIndependentBootstrap``), with the seed ``(seed, crc32(x), crc32(y))``.

    Args:
        scores_by_algorithm: Normalised scores ``[runs, tasks]`` per algorithm name, the same tasks.
        reps: Number of bootstrap resamples.
        confidence: Coverage of the intervals.
        seed: Base seed.

    Returns:
        ``{x: {y: Interval of P(X > Y)}}`` for every ``x != y``.
    """
    table = _score_table(scores_by_algorithm, ndim=2)
    out: dict[str, dict[str, Interval]] = {x: {} for x in table}
    for x, y in itertools.permutations(table, 2):
        out[x][y] = stratified_bootstrap(probability_of_improvement, table[x], table[y], reps=reps,
                                         confidence=confidence, seed=(seed, _name_seed(x), _name_seed(y)))
    return out


def performance_profile_intervals(scores_by_algorithm: Mapping[str, ArrayLike], taus: ArrayLike, *,
                                  average: bool = False, reps: int = 2000, confidence: float = 0.95,
                                  seed: int = 0) -> dict[str, Interval]:
    """Each algorithm's performance profile on a grid of thresholds, with bootstrap bands.

    Args:
        scores_by_algorithm: Normalised scores ``[runs, tasks]`` per algorithm name, the same tasks.
        taus: Thresholds ``[taus]``.
        average: The average score distribution (:func:`average_performance_profile`) instead of the
            score distribution (:func:`performance_profile`, rliable's default).
        reps: Number of bootstrap resamples.
        confidence: Coverage of the pointwise bands.
        seed: Base seed; an algorithm's resamples use ``(seed, crc32(name))``.

    Returns:
        ``{algorithm: Interval}`` with ``[taus]`` arrays.
    """
    table = _score_table(scores_by_algorithm, ndim=2)
    profile = functools.partial(average_performance_profile if average else performance_profile, taus=_taus(taus))
    return {name: stratified_bootstrap(profile, scores, reps=reps, confidence=confidence,
                                       seed=(seed, _name_seed(name)))
            for name, scores in table.items()}


def sample_efficiency_intervals(scores_by_algorithm: Mapping[str, ArrayLike], aggregate: Statistic = aggregate_iqm,
                                *, reps: int = 2000, confidence: float = 0.95,
                                seed: int = 0) -> dict[str, Interval]:
    """Each algorithm's aggregate at every evaluation point, with pointwise bootstrap intervals.

    A run is resampled whole (the same draw at every point), so a resampled curve is a curve of
    real runs; each point's interval has the distribution of rliable's, which draws every point
    anew.

    Args:
        scores_by_algorithm: Normalised scores ``[runs, tasks, points]`` per algorithm name, the same
            tasks and points.
        aggregate: A statistic of ``[..., runs, tasks]``; the interquartile mean by default.
        reps: Number of bootstrap resamples.
        confidence: Coverage of the pointwise intervals.
        seed: Base seed; an algorithm's resamples use ``(seed, crc32(name))``.

    Returns:
        ``{algorithm: Interval}`` with ``[points]`` arrays.
    """
    table = _score_table(scores_by_algorithm, ndim=3)
    return {name: stratified_bootstrap(aggregate, np.moveaxis(scores, -1, 0), reps=reps, confidence=confidence,
                                       seed=(seed, _name_seed(name)))
            for name, scores in table.items()}


# ----------------------------------------------------------------------------------------------
# Helpers


def _scores(scores: ArrayLike, name: str = "scores") -> np.ndarray:
    """``scores`` as float64 ``[..., runs, tasks]``; a ValueError naming what is wrong otherwise."""
    array = np.asarray(scores, dtype=np.float64)
    if array.ndim < 2:
        raise ValueError(f"{name} must be an array [runs, tasks] (or [..., runs, tasks]); got shape {array.shape}")
    if array.size == 0:
        raise ValueError(f"{name} is empty: shape {array.shape} (runs and tasks need at least one each)")
    bad = ~np.isfinite(array)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{name} has {int(bad.sum())} non-finite value(s) (NaN or inf) in shape {array.shape}, "
                         f"the first at index {where}")
    return array


def _taus(taus: ArrayLike) -> np.ndarray:
    array = np.asarray(taus, dtype=np.float64)
    if array.ndim != 1 or array.size == 0 or not np.isfinite(array).all():
        raise ValueError(f"taus must be a non-empty 1-D array of finite thresholds; got shape {array.shape}")
    return array


def _score_table(scores_by_algorithm: Mapping[str, ArrayLike], ndim: int) -> dict[str, np.ndarray]:
    """Each algorithm's scores, checked: rank ``ndim`` and the same tasks (and points) for all."""
    if not scores_by_algorithm:
        raise ValueError("scores_by_algorithm is empty: give each algorithm's scores")
    layout = "[runs, tasks]" if ndim == 2 else "[runs, tasks, points]"
    table = {}
    for name, scores in scores_by_algorithm.items():
        array = _scores(scores, f"scores[{name!r}]")
        if array.ndim != ndim:
            raise ValueError(f"scores[{name!r}] must be {layout}; got shape {array.shape}")
        table[name] = array
    shapes = {name: a.shape for name, a in table.items()}
    if len({s[1:] for s in shapes.values()}) > 1:
        raise ValueError(f"the algorithms' scores must share the axes after runs ({layout}); got "
                         + ", ".join(f"{n}: {s}" for n, s in shapes.items()))
    return table


def _resample(scores: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """``out[r, ..., i, m] = scores[..., draws[r, i, m], m]``: ``[..., N, M]``, ``[R, N, M]`` -> ``[R, ..., N, M]``."""
    lead = scores.ndim - 2
    index = draws.reshape(draws.shape[:1] + (1,) * lead + draws.shape[1:])
    return np.take_along_axis(scores[None], index, axis=-2)


def _name_seed(name: str) -> int:
    """A stable integer for a name (not Python's salted ``hash``)."""
    return zlib.crc32(str(name).encode())


def _squeeze(value: ArrayLike) -> float | np.ndarray:
    array = np.asarray(value, dtype=np.float64)
    return float(array) if array.ndim == 0 else array


def _plain(value: float | np.ndarray) -> float | list:
    return float(value) if np.ndim(value) == 0 else np.asarray(value, dtype=np.float64).tolist()
