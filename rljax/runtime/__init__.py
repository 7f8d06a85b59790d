"""Layer 2, the runtime: devices, processes and determinism.

The device mesh and the per-device (pmap-style) wrapper (:mod:`~rljax.runtime.devices`),
``jax.distributed`` set-up and host-value collectives across processes
(:mod:`~rljax.runtime.distributed`), and deterministic-mode XLA flags
(:mod:`~rljax.runtime.determinism`).

May import: :mod:`rljax.env`, :mod:`rljax.core`.
"""
