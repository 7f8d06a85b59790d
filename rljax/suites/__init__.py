"""Adapters that bring JAX env suites into rljax's env contract, each behind an optional extra.

Every suite is a module here with ``make(id, **kwargs) -> (env, params)`` and ``ids()``, registered
under its prefix in :data:`rljax.core.registry.SUITES`, so ``rljax.make("craftax/<id>")``,
``config.env`` and every ``--env`` flag take its names. A module imports its suite's package only
when one of its environments is built; a missing package is an ``ImportError`` naming the extra
(``pip install -e ".[craftax]"``). The adapters share :mod:`rljax.suites._adapter`: the suite
supplies its reset and its step without time limit or reset, and rljax's base environment adds the
time limit (``truncated``), the auto-reset and ``info["final_observation"]``. See ``docs/suites.md``.

May import: :mod:`rljax.env`, :mod:`rljax.core`.
"""
