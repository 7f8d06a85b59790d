"""Layer 5, training runs: the compiled chunk program, the host loop around it, populations and sweeps.

:mod:`~rljax.training.program` builds and compiles the chunk program (K updates of every member);
:mod:`~rljax.training.loop` runs it chunk by chunk (:func:`~rljax.training.loop.train`, its options
in :mod:`~rljax.training.options`); :mod:`~rljax.training.population` stacks a sweep's members into
one population; :mod:`~rljax.training.sweep` builds sweeps and PBT on top;
:mod:`rljax.training.hooks` holds what runs at chunk boundaries (the :class:`~rljax.training.hooks.base.Hook`
protocol; health, evaluation, observability, stall watchdog, PBT, checkpointing);
:mod:`~rljax.training.signals` turns SIGTERM/SIGINT into a stop at the next boundary.

May import every layer below: :mod:`rljax.env`, :mod:`rljax.core`, :mod:`rljax.runtime`,
:mod:`rljax.agents`, :mod:`rljax.store`, :mod:`rljax.policy`, :mod:`rljax.suites`.
"""
