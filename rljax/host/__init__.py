"""Layer 1 beside the numerics core: environments that run on the host, not in JAX.

A host env is a batch of simulators stepped by the CPU (:class:`~rljax.host.base.HostEnv`): Gymnasium
vector envs (:mod:`~rljax.host.gymnasium`) and env servers that speak rljax's wire protocol
(:mod:`~rljax.host.protocol`; the reference server :mod:`~rljax.host.server` and its client
:mod:`~rljax.host.client`). Every source keeps the contract of rljax's JAX envs: a step auto-resets,
``terminated`` and ``truncated`` are kept apart, and the last observation of an episode that ended
comes back beside the next episode's first. :func:`~rljax.host.sources.make_host_env` builds one from
a name (``gymnasium/CartPole-v1``, ``server:HOST:PORT``).

May import: :mod:`rljax.env` (its spaces) and third-party packages. Nothing else in rljax.
"""
