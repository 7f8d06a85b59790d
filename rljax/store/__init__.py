"""Layer 3, what a run keeps on disk: the run directory and everything written into it.

Metric writers, the manifest and config hashing (:mod:`~rljax.store.tracking`), the run directory's
layout and config checks (:mod:`~rljax.store.rundir`), the single-writer run lock
(:mod:`~rljax.store.runlock`), and checksummed Orbax checkpoints with fallback
(:mod:`~rljax.store.checkpoint`).

May import: :mod:`rljax.env`, :mod:`rljax.core`, :mod:`rljax.runtime`.
"""
