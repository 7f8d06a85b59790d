"""Layer 5 beside training: benches, experiments made of ordinary runs and the statistics over them.

A bench is a directory of runs (each a sweep over seeds) and a report computed only from their
files. The report's statistics are pure numpy functions on score arrays ``[runs, tasks]``
(:mod:`~rljax.bench.stats`: the aggregates, probability of improvement, performance profiles and
sample-efficiency curves of Agarwal et al. 2021, with stratified bootstrap intervals), so a report
can be recomputed from ``scores.csv`` alone.

May import: :mod:`rljax.env`, :mod:`rljax.core`, :mod:`rljax.runtime`, :mod:`rljax.agents`,
:mod:`rljax.store`, :mod:`rljax.policy`, :mod:`rljax.suites`, :mod:`rljax.training`,
:mod:`rljax.host`.
"""

from rljax.bench.stats import (
    AGGREGATES,
    Interval,
    aggregate_intervals,
    aggregate_iqm,
    aggregate_mean,
    aggregate_median,
    aggregate_optimality_gap,
    as_plain,
    average_performance_profile,
    performance_profile,
    performance_profile_intervals,
    probability_of_improvement,
    probability_of_improvement_intervals,
    sample_efficiency_intervals,
    stratified_bootstrap,
)

__all__ = [
    "AGGREGATES",
    "Interval",
    "aggregate_intervals",
    "aggregate_iqm",
    "aggregate_mean",
    "aggregate_median",
    "aggregate_optimality_gap",
    "as_plain",
    "average_performance_profile",
    "performance_profile",
    "performance_profile_intervals",
    "probability_of_improvement",
    "probability_of_improvement_intervals",
    "sample_efficiency_intervals",
    "stratified_bootstrap",
]
