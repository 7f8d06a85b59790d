"""Layer 5 beside training: benches, experiments made of ordinary runs and the statistics over them.

A bench is a directory of runs (each a sweep over seeds) and a report computed only from their
files. The report's statistics are pure numpy functions on score arrays ``[runs, tasks]``
(:mod:`~rljax.bench.stats`: the aggregates, probability of improvement, performance profiles and
sample-efficiency curves of Agarwal et al. 2021, with stratified bootstrap intervals), so a report
can be recomputed from ``scores.csv`` alone.

A bench's spec (:mod:`~rljax.bench.spec`, a TOML file or a shipped suite: ``classic``, ``minatar``,
``bsuite``, ``memory``) names algorithms, envs, seeds, the budget and the evaluation protocol;
:func:`run_bench` (:mod:`~rljax.bench.runner`) runs each (algorithm, env) cell as one compiled sweep
over the seeds, continues a killed bench where it stopped, and writes ``scores.csv``; the report
(:mod:`~rljax.bench.report`) is a function of that file::

    from rljax.bench import load_spec, narrow, run_bench
    report = run_bench(narrow(load_spec("classic"), algorithms=["ppo"], seeds=3), "runs/classic-ppo")

May import: :mod:`rljax.env`, :mod:`rljax.core`, :mod:`rljax.runtime`, :mod:`rljax.agents`,
:mod:`rljax.store`, :mod:`rljax.policy`, :mod:`rljax.suites`, :mod:`rljax.training`,
:mod:`rljax.host`.
"""

from rljax.bench.plots import write_plots
from rljax.bench.report import compute_report, read_scores, write_report
from rljax.bench.runner import BenchStopped, random_score, run_bench
from rljax.bench.spec import BenchSpec, SpecError, check_spec, load_spec, narrow, shipped_suites
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
    "BenchSpec",
    "BenchStopped",
    "SpecError",
    "check_spec",
    "compute_report",
    "load_spec",
    "narrow",
    "random_score",
    "read_scores",
    "run_bench",
    "shipped_suites",
    "write_plots",
    "write_report",
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
