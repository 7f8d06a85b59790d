"""Layer 1, the numerics core: everything a compiled chunk is made of, and nothing about runs.

Env wrappers and the env registry (:mod:`~rljax.core.wrappers`, :mod:`~rljax.core.registry`), the
rollout scan (:mod:`~rljax.core.rollout`), return targets (:mod:`~rljax.core.returns`), on-device
replay (:mod:`~rljax.core.buffers`), action distributions and flax networks
(:mod:`~rljax.core.distributions`, :mod:`~rljax.core.networks`), exact step counters
(:mod:`~rljax.core.counters`), ``jax.random``'s bits from fewer CPU kernels (:mod:`~rljax.core.prng`),
and the config base class with its validation helpers (:mod:`~rljax.core.config`). Pure functions
over pytrees; no files, no devices beyond the current one, no host loop.

May import: :mod:`rljax.env` (the env contract) and third-party packages. Nothing else in rljax.
"""
