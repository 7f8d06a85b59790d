"""The bench statistics: hand-computed values, a plain float64 loop reference, the bootstrap's
determinism and stratification, and agreement with scipy.stats.bootstrap and rliable 1.2.0."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import scipy.stats

from rljax.bench import stats

# 3 runs x 3 tasks; the arithmetic of the hand-computed tests is in their comments.
TINY = np.array([[0.0, 4.0, 1.0],
                 [2.0, 6.0, 1.0],
                 [1.0, 5.0, 4.0]])

# The fixed scores of the rliable comparison: 10 runs of X and 8 of Y on 5 tasks, two ties between
# X and Y (Y[0, 0] = X[0, 0], Y[1, 1] = X[2, 1]). 50 scores, so the IQM's quarter (12.5) is not whole.
X = np.array([[0.97, 0.58, 0.82, 0.86, 1.49],
              [0.82, 0.79, -0.06, 0.4, 0.57],
              [1.18, 0.67, 1.66, 0.69, 0.77],
              [1.07, 0.57, 1.13, 0.65, 1.09],
              [1.32, 0.86, 1.19, 0.26, 1.22],
              [0.71, 1.1, 2.32, 0.62, 0.19],
              [0.51, 1.09, 0.74, 1.25, 0.57],
              [1.34, 0.81, 0.96, 0.49, 1.14],
              [1.29, 0.56, 1.23, 0.42, 2.59],
              [1.42, 0.9, 0.98, 0.43, 1.81]])
Y = np.array([[0.97, 0.63, 0.58, 0.78, 1.6],
              [0.89, 0.67, 0.71, 0.36, 1.82],
              [0.82, 0.82, 0.99, 0.46, 0.05],
              [0.73, 0.07, 0.2, 0.23, 2.67],
              [1.16, 0.67, 1.29, 0.87, 0.86],
              [0.13, 0.66, 1.49, 0.48, 1.65],
              [1.34, 0.97, 0.75, 0.6, 1.42],
              [0.93, 0.88, 1.48, 0.09, 1.26]])
TAUS = np.linspace(0.0, 2.0, 9)
CURVE = X[..., None] * np.array([0.25, 0.5, 0.75, 1.0])  # [runs, tasks, points]

# rliable 1.2.0 (pip install rliable==1.2.0 'pandas<3'; numpy 2.4.6, scipy 1.17.1, arch 7.2.0):
#   from rliable import library as rly, metrics
#   [f(s) for f in (metrics.aggregate_iqm, metrics.aggregate_mean, metrics.aggregate_median,
#                   metrics.aggregate_optimality_gap)]                         for s in (X, Y)
#   metrics.probability_of_improvement(X, Y)
#   rly.score_distributions(X, TAUS); rly.average_score_distributions(X, TAUS)
RLIABLE_POINT = {"X": [0.8919230769230769, 0.9408000000000001, 1.0630000000000002, 0.2178],
                 "Y": [0.818, 0.87575, 0.8712499999999999, 0.27874999999999994]}
RLIABLE_POI_XY = 0.55125
RLIABLE_PROFILE_X = [0.98, 0.96, 0.86, 0.62, 0.4, 0.18, 0.08, 0.06, 0.04]
RLIABLE_AVERAGE_PROFILE_X = [1.0, 1.0, 1.0, 0.8, 0.6, 0.0, 0.0, 0.0, 0.0]
# Intervals, each call after np.random.seed(0) (rliable draws from numpy's global RandomState):
#   agg = lambda s: np.array([metrics.aggregate_iqm(s), metrics.aggregate_mean(s),
#                             metrics.aggregate_median(s), metrics.aggregate_optimality_gap(s)])
#   rly.get_interval_estimates({"X": X, "Y": Y}, agg, reps=50000)      -> [[lows], [highs]]
RLIABLE_AGGREGATE_CI = {
    "X": [[0.7784615384615385, 0.8212000000000002, 0.772, 0.15680000000000005],
          [1.0076923076923077, 1.0662, 1.1580000000000001, 0.2856000000000001]],
    "Y": [[0.7035000000000002, 0.7409999999999999, 0.6475, 0.19950000000000012],
          [0.9434999999999999, 1.0077500000000001, 1.0225, 0.36675]]}
#   rly.get_interval_estimates({"X,Y": [X, Y]}, metrics.probability_of_improvement, reps=20000)
RLIABLE_POI_CI = [0.42874999999999996, 0.67125]
#   rly.create_performance_profile({"X": X}, TAUS, reps=50000)
#   rly.create_performance_profile({"X": X}, TAUS, use_score_distribution=False, reps=50000)
RLIABLE_PROFILE_CI = [[0.94, 0.9, 0.78, 0.5, 0.28, 0.08, 0.02, 0.0, 0.0],
                      [1.0, 1.0, 0.94, 0.74, 0.52, 0.28, 0.16, 0.12, 0.1]]
RLIABLE_AVERAGE_PROFILE_CI = [[1.0, 1.0, 0.8, 0.6, 0.2, 0.0, 0.0, 0.0, 0.0],
                              [1.0, 1.0, 1.0, 1.0, 0.6, 0.4, 0.2, 0.0, 0.0]]
#   iqm = lambda s: np.array([metrics.aggregate_iqm(s[..., f]) for f in range(s.shape[-1])])
#   rly.get_interval_estimates({"X": CURVE}, iqm, reps=50000)
RLIABLE_CURVE_IQM = [0.22298076923076923, 0.44596153846153846, 0.6689423076923077, 0.8919230769230769]
RLIABLE_CURVE_CI = [[0.19499999999999998, 0.38942307692307687, 0.584423076923077, 0.7796153846153846],
                    [0.25134615384615383, 0.5032692307692307, 0.7554807692307691, 1.0057788461538468]]


# --- a plain float64 reference: loops over runs and tasks, no vectorisation -------------------


def _ref_task_means(s):
    return [sum(float(s[n, m]) for n in range(s.shape[0])) / s.shape[0] for m in range(s.shape[1])]


def _ref_mean(s):
    means = _ref_task_means(s)
    return sum(means) / len(means)


def _ref_median(s):
    means = sorted(_ref_task_means(s))
    k = len(means)
    return means[k // 2] if k % 2 else (means[k // 2 - 1] + means[k // 2]) / 2


def _ref_iqm(s):
    values = sorted(float(v) for row in s for v in row)
    cut = (len(values) * 25) // 100  # floor(K / 4): scipy.stats.trim_mean's int(0.25 * K)
    kept = values[cut:len(values) - cut]
    return sum(kept) / len(kept)


def _ref_optimality_gap(s, gamma=1.0):
    values = [float(v) for row in s for v in row]
    return sum(max(gamma - v, 0.0) for v in values) / len(values)


def _ref_poi(x, y):
    per_task = []
    for m in range(x.shape[1]):
        wins = 0.0
        for i in range(x.shape[0]):
            for j in range(y.shape[0]):
                wins += 1.0 if x[i, m] > y[j, m] else 0.5 if x[i, m] == y[j, m] else 0.0
        per_task.append(wins / (x.shape[0] * y.shape[0]))
    return sum(per_task) / len(per_task)


def _ref_profile(s, taus):
    values = [float(v) for row in s for v in row]
    return [sum(v > t for v in values) / len(values) for t in taus]


def _ref_average_profile(s, taus):
    means = _ref_task_means(s)
    return [sum(v > t for v in means) / len(means) for t in taus]


def _random_scores(seed, runs, tasks, ties=False):
    scores = np.random.default_rng(seed).normal(1.0, 0.7, (runs, tasks))
    return np.round(scores, 1) if ties else scores


SHAPES = [(1, 1), (3, 1), (2, 3), (5, 7), (10, 5), (7, 3)]  # 1, 3, 6, 35, 50, 21 scores: K mod 4 of every kind


# --- hand-computed values -------------------------------------------------------------------


def test_aggregates_by_hand():
    # Task means (0+2+1)/3 = 1, (4+6+5)/3 = 5, (1+1+4)/3 = 2: mean 8/3, median 2.
    assert stats.aggregate_mean(TINY) == pytest.approx(8 / 3, abs=1e-12)
    assert stats.aggregate_median(TINY) == pytest.approx(2.0, abs=1e-12)
    # Sorted 0,1,1,1,2,4,4,5,6; floor(9/4) = 2 cut from each end: (1+1+2+4+4)/5 = 2.4.
    assert stats.aggregate_iqm(TINY) == pytest.approx(2.4, abs=1e-12)
    # gamma = 1: only the 0 falls short, by 1: 1/9. gamma = 2: the 0 by 2 and the three 1s by 1: 5/9.
    assert stats.aggregate_optimality_gap(TINY) == pytest.approx(1 / 9, abs=1e-12)
    assert stats.aggregate_optimality_gap(TINY, gamma=2.0) == pytest.approx(5 / 9, abs=1e-12)


def test_median_is_of_the_task_means_not_of_all_scores():
    # Task means 0.5, 0.5, 10: median 0.5; the median of all six scores (0,0,1,1,10,10) is 1.
    scores = np.array([[0.0, 1.0, 10.0], [1.0, 0.0, 10.0]])
    assert stats.aggregate_median(scores) == pytest.approx(0.5, abs=1e-12)


def test_probability_of_improvement_by_hand():
    # Task 0: x = (1, 3), y = (2, 3): pairs (1,2) 0, (1,3) 0, (3,2) 1, (3,3) 1/2 -> 1.5/4 = 0.375.
    # Task 1: every x above every y -> 1. Average (0.375 + 1) / 2 = 0.6875.
    x = np.array([[1.0, 5.0], [3.0, 6.0]])
    y = np.array([[2.0, 0.0], [3.0, 1.0]])
    assert stats.probability_of_improvement(x, y) == pytest.approx(0.6875, abs=1e-12)
    # Ties count one half each way, so the two directions sum to 1: (0.625 + 0) / 2.
    assert stats.probability_of_improvement(y, x) == pytest.approx(0.3125, abs=1e-12)
    assert stats.probability_of_improvement(x, x) == pytest.approx(0.5, abs=1e-12)


def test_profiles_by_hand():
    # Above 0: eight of nine; above 1: 4, 2, 6, 5, 4; above 4.5: 6, 5; above 6: none (strictly above).
    np.testing.assert_allclose(stats.performance_profile(TINY, [0.0, 1.0, 4.5, 6.0]), [8 / 9, 5 / 9, 2 / 9, 0.0],
                               atol=1e-12)
    # Task means 1, 5, 2: above 0 all three; above 1: 5 and 2; above 4.5: 5; above 6: none.
    np.testing.assert_allclose(stats.average_performance_profile(TINY, [0.0, 1.0, 4.5, 6.0]),
                               [1.0, 2 / 3, 1 / 3, 0.0], atol=1e-12)


# --- the vectorised functions equal the loop reference ---------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("ties", [False, True])
def test_aggregates_equal_the_loop_reference(shape, ties):
    scores = _random_scores(sum(shape), *shape, ties=ties)
    for fn, ref in ((stats.aggregate_mean, _ref_mean), (stats.aggregate_median, _ref_median),
                    (stats.aggregate_iqm, _ref_iqm), (stats.aggregate_optimality_gap, _ref_optimality_gap)):
        assert abs(float(fn(scores)) - ref(scores)) <= 1e-9, fn.__name__
    assert abs(float(stats.aggregate_iqm(scores)) - scipy.stats.trim_mean(scores, 0.25, axis=None)) <= 1e-9
    taus = np.linspace(-0.5, 2.5, 13)
    np.testing.assert_allclose(stats.performance_profile(scores, taus), _ref_profile(scores, taus), atol=1e-12)
    np.testing.assert_allclose(stats.average_performance_profile(scores, taus), _ref_average_profile(scores, taus),
                               atol=1e-12)


@pytest.mark.parametrize("ties", [False, True])
def test_probability_of_improvement_equals_the_loop_reference_and_mann_whitney(ties):
    x, y = _random_scores(1, 6, 4, ties), _random_scores(2, 9, 4, ties)
    got = float(stats.probability_of_improvement(x, y))
    assert abs(got - _ref_poi(x, y)) <= 1e-9
    mwu = np.mean([scipy.stats.mannwhitneyu(x[:, m], y[:, m], alternative="greater").statistic / (6 * 9)
                   for m in range(4)])
    assert abs(got - mwu) <= 1e-9


def test_batched_inputs_equal_one_call_per_batch_element():
    batch = np.stack([_random_scores(s, 5, 3, ties=True) for s in range(4)]).reshape(2, 2, 5, 3)
    other = np.stack([_random_scores(9 + s, 4, 3, ties=True) for s in range(4)]).reshape(2, 2, 4, 3)
    for fn in stats.AGGREGATES.values():
        expected = [[float(fn(batch[i, j])) for j in range(2)] for i in range(2)]
        np.testing.assert_allclose(fn(batch), expected, atol=1e-12)
    expected = [[_ref_poi(batch[i, j], other[i, j]) for j in range(2)] for i in range(2)]
    np.testing.assert_allclose(stats.probability_of_improvement(batch, other), expected, atol=1e-12)


# --- the bootstrap ------------------------------------------------------------------------------


def test_bootstrap_equals_its_definition_written_as_a_loop():
    """Draws ``rng.integers(0, N, (reps, N, M))`` from ``default_rng(seed)``, resample ``r`` takes
    ``x[draws[r, n, m], m]``, and the bounds are np.percentile's 2.5 and 97.5 (linear)."""
    scores, reps = _random_scores(3, 4, 3), 50
    draws = np.random.default_rng(7).integers(0, 4, size=(reps, 4, 3))
    boots = []
    for r in range(reps):
        resample = np.array([[scores[draws[r, n, m], m] for m in range(3)] for n in range(4)])
        boots.append(_ref_iqm(resample))
    low, high = np.percentile(boots, [2.5, 97.5])
    got = stats.stratified_bootstrap(stats.aggregate_iqm, scores, reps=reps, seed=7)
    assert got.estimate == pytest.approx(_ref_iqm(scores), abs=1e-9)
    assert got.low == pytest.approx(low, abs=1e-9) and got.high == pytest.approx(high, abs=1e-9)


def test_bootstrap_resamples_runs_within_each_task():
    # Task 0 scores lie in [0, 2], task 1 in [10, 12]: every resampled column stays in its own range.
    scores = np.array([[0.0, 10.0], [1.0, 11.0], [2.0, 12.0]])
    extremes = stats.stratified_bootstrap(lambda s: np.stack([s.min(-2), s.max(-2)], -1), scores, reps=500,
                                          confidence=0.999)
    low, high = np.asarray(extremes.low), np.asarray(extremes.high)  # [tasks, (min, max)]
    assert low[0].min() >= 0.0 and high[0].max() <= 2.0
    assert low[1].min() >= 10.0 and high[1].max() <= 12.0
    assert high[0, 0] > 0.0  # and it does resample: some draw's minimum of task 0 is not 0


def test_same_seed_same_bits_other_seed_other_interval():
    first = stats.aggregate_intervals({"x": X, "y": Y}, seed=3)
    again = stats.aggregate_intervals({"x": X, "y": Y}, seed=3)
    other = stats.aggregate_intervals({"x": X, "y": Y}, seed=4)
    assert first == again
    assert first["x"]["iqm"].estimate == other["x"]["iqm"].estimate
    assert (first["x"]["iqm"].low, first["x"]["iqm"].high) != (other["x"]["iqm"].low, other["x"]["iqm"].high)


def test_an_algorithms_interval_does_not_depend_on_the_others_in_the_report():
    alone = stats.aggregate_intervals({"x": X}, reps=300)["x"]
    with_y = stats.aggregate_intervals({"y": Y, "x": X}, reps=300)["x"]
    assert alone == with_y
    y = stats.aggregate_intervals({"y": Y, "x": X}, reps=300)["y"]["mean"]
    z = stats.aggregate_intervals({"z": Y, "x": X}, reps=300)["z"]["mean"]
    assert (y.low, y.high) != (z.low, z.high)  # two names with the same scores draw differently


def test_report_form_is_plain_json():
    import json

    report = stats.as_plain(stats.aggregate_intervals({"x": X}, reps=200))
    assert set(report["x"]) == {"iqm", "mean", "median", "optimality_gap"}
    row = report["x"]["iqm"]
    assert set(row) == {"estimate", "low", "high"} and row["low"] <= row["estimate"] <= row["high"]
    assert json.loads(json.dumps(report)) == report
    curve = stats.as_plain(stats.sample_efficiency_intervals({"x": CURVE}, reps=200))
    assert len(curve["x"]["low"]) == 4


@pytest.mark.parametrize("seed", [0, 1])
def test_a_single_tasks_mean_interval_matches_scipy_bootstrap(seed):
    """One task: the stratified bootstrap is the ordinary one; within 2 % of scipy's percentile interval.

    (With the same Generator seed scipy 1.17's draws coincide with ours, so the figures agree to
    rounding; the 2 % does not rely on that.)"""
    column = X[:, 4]
    ours = stats.stratified_bootstrap(stats.aggregate_mean, column[:, None], reps=4000, seed=seed)
    theirs = scipy.stats.bootstrap((column,), np.mean, method="percentile", n_resamples=4000,
                                   rng=np.random.default_rng(seed + 100)).confidence_interval
    assert ours.low == pytest.approx(theirs.low, rel=0.02)
    assert ours.high == pytest.approx(theirs.high, rel=0.02)


def test_curves_resample_each_run_whole():
    # The same scores at both points: with one draw per run for the whole curve the two points'
    # intervals are the same numbers (independent draws per point would make them differ).
    curve = np.repeat(_random_scores(5, 6, 2)[..., None], 2, axis=-1)
    got = stats.sample_efficiency_intervals({"a": curve}, reps=300)["a"]
    assert got.low[0] == got.low[1] and got.high[0] == got.high[1]
    assert got.low[0] < got.high[0]


# --- agreement with rliable 1.2.0 ------------------------------------------------------------


def test_point_estimates_equal_rliable():
    for name, scores in (("X", X), ("Y", Y)):
        ours = [float(f(scores)) for f in stats.AGGREGATES.values()]  # iqm, mean, median, optimality_gap
        np.testing.assert_allclose(ours, RLIABLE_POINT[name], rtol=0, atol=1e-9)
    assert float(stats.probability_of_improvement(X, Y)) == pytest.approx(RLIABLE_POI_XY, abs=1e-9)
    np.testing.assert_allclose(stats.performance_profile(X, TAUS), RLIABLE_PROFILE_X, atol=1e-9)
    np.testing.assert_allclose(stats.average_performance_profile(X, TAUS), RLIABLE_AVERAGE_PROFILE_X, atol=1e-9)


def test_aggregate_intervals_within_2_percent_of_rliable():
    ours = stats.aggregate_intervals({"X": X, "Y": Y}, reps=10_000)
    for name in ("X", "Y"):
        for i, aggregate in enumerate(("iqm", "mean", "median", "optimality_gap")):
            got = ours[name][aggregate]
            assert got.estimate == pytest.approx(RLIABLE_POINT[name][i], abs=1e-9)
            assert got.low == pytest.approx(RLIABLE_AGGREGATE_CI[name][0][i], rel=0.02), (name, aggregate)
            assert got.high == pytest.approx(RLIABLE_AGGREGATE_CI[name][1][i], rel=0.02), (name, aggregate)


def test_probability_of_improvement_interval_within_2_percent_of_rliable():
    got = stats.stratified_bootstrap(stats.probability_of_improvement, X, Y, reps=10_000)
    assert got.estimate == pytest.approx(RLIABLE_POI_XY, abs=1e-9)
    assert got.low == pytest.approx(RLIABLE_POI_CI[0], rel=0.02)
    assert got.high == pytest.approx(RLIABLE_POI_CI[1], rel=0.02)


def test_profile_bands_within_2_percent_of_rliable():
    # Fractions of 50 scores (or of 5 tasks): 2 % is one step of the score distribution.
    for average, expected in ((False, RLIABLE_PROFILE_CI), (True, RLIABLE_AVERAGE_PROFILE_CI)):
        got = stats.performance_profile_intervals({"X": X}, TAUS, average=average, reps=10_000)["X"]
        np.testing.assert_allclose([got.low, got.high], expected, atol=0.02 + 1e-12)


def test_sample_efficiency_curve_within_2_percent_of_rliable():
    got = stats.sample_efficiency_intervals({"X": CURVE}, reps=2000)["X"]
    np.testing.assert_allclose(got.estimate, RLIABLE_CURVE_IQM, rtol=0, atol=1e-9)
    np.testing.assert_allclose([got.low, got.high], RLIABLE_CURVE_CI, rtol=0.02)


def test_any_aggregate_gets_an_interval():
    gap_at_2 = functools.partial(stats.aggregate_optimality_gap, gamma=2.0)
    got = stats.aggregate_intervals({"X": X}, {"gap2": gap_at_2}, reps=500)["X"]["gap2"]
    assert got.estimate == pytest.approx(_ref_optimality_gap(X, gamma=2.0), abs=1e-9)
    assert got.low < got.estimate < got.high


# --- validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize("bad, message", [
    (np.ones(5), r"\[runs, tasks\].*\(5,\)"),
    (np.ones((0, 3)), r"empty.*\(0, 3\)"),
    (np.array([[1.0, np.nan], [0.0, 1.0]]), r"non-finite.*\(2, 2\).*\(0, 1\)"),
    (np.array([[1.0, np.inf]]), r"non-finite"),
])
def test_bad_scores_are_named_with_their_shape(bad, message):
    with pytest.raises(ValueError, match=message):
        stats.aggregate_iqm(bad)
    with pytest.raises(ValueError, match=message.replace("\\[runs, tasks\\]", ".*")):
        stats.aggregate_intervals({"ppo": bad}, reps=10)


def test_mismatched_algorithms_are_refused_with_their_shapes():
    with pytest.raises(ValueError, match=r"x: \(10, 5\), y: \(8, 4\)"):
        stats.aggregate_intervals({"x": X, "y": Y[:, :4]})
    with pytest.raises(ValueError, match=r"scores_x \(10, 5\) and scores_y \(8, 4\)"):
        stats.probability_of_improvement(X, Y[:, :4])
    with pytest.raises(ValueError, match=r"\(10, 5, 4\).*\(10, 5, 3\)"):
        stats.sample_efficiency_intervals({"x": CURVE, "y": CURVE[..., :3]})
    with pytest.raises(ValueError, match=r"scores\['x'\] must be \[runs, tasks, points\]; got shape \(10, 5\)"):
        stats.sample_efficiency_intervals({"x": X})
    with pytest.raises(ValueError, match=r"empty"):
        stats.probability_of_improvement_intervals({})


def test_bad_bootstrap_settings_are_refused():
    with pytest.raises(ValueError, match="reps must be a positive integer; got 0"):
        stats.stratified_bootstrap(stats.aggregate_mean, X, reps=0)
    with pytest.raises(ValueError, match=r"confidence must be in \(0, 1\); got 1.5"):
        stats.stratified_bootstrap(stats.aggregate_mean, X, confidence=1.5)
    with pytest.raises(ValueError, match=r"taus must be a non-empty 1-D.*\(2, 2\)"):
        stats.performance_profile(X, np.zeros((2, 2)))
