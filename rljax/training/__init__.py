"""Layer 5, training runs: the compiled chunk program, the host loop around it, populations and sweeps.

:mod:`~rljax.training.loop` runs one run (or one population) chunk by chunk;
:mod:`~rljax.training.population` vmaps members inside a chunk; :mod:`~rljax.training.sweep` builds
sweeps and PBT on top; :mod:`rljax.training.hooks` holds what runs at chunk boundaries (health,
observability, stall watchdog, PBT).

May import every layer below: :mod:`rljax.env`, :mod:`rljax.core`, :mod:`rljax.runtime`,
:mod:`rljax.agents`, :mod:`rljax.store`, :mod:`rljax.policy`, :mod:`rljax.suites`.
"""
