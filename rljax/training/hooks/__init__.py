"""What the host loop runs at chunk boundaries: the :class:`~rljax.training.hooks.base.Hook` protocol and
the hooks (health checks, evaluation and tracking adapters, videos of the greedy policy, observability,
the stall watchdog, PBT, checkpointing, the caller's ``on_chunk``).

Part of the training layer. May import: :mod:`rljax.env`, :mod:`rljax.core`, :mod:`rljax.runtime`,
:mod:`rljax.agents`, :mod:`rljax.store`, :mod:`rljax.policy`, :mod:`rljax.suites`, :mod:`rljax.training`
except its loop module (hooks are called by the loop, never the other way round).
"""
