"""What the host loop runs at chunk boundaries: the :class:`~rljax.training.hooks.base.Hook` protocol and
the hooks (health checks, evaluation and tracking adapters, observability, the stall watchdog, PBT,
checkpointing, the caller's ``on_chunk``).

Part of the training layer: may import what :mod:`rljax.training` may, except the loop itself
(hooks are called by the loop, never the other way round).
"""
