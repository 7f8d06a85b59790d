"""Layer 6, the command line: ``rljax`` and its subcommands, and the experiment modules' runner.

:mod:`rljax.cli.main` builds one argparse parser with a subparser per command; each command is a
module here with ``add_parser(subparsers)`` and ``run(args)`` (``envs``, ``train``, ``sweep``,
``bench``, ``resume``, ``eval``, ``export``, ``inspect``, ``supervise``, ``launch``, ``status``, ``stop``,
``config``, ``env-server``, ``serve``). Shared pieces: the flags of a
config (:mod:`rljax.cli.flags`), exit statuses and the process around a run
(:mod:`rljax.cli.process`), the experiment modules' ``main`` (:mod:`rljax.cli.experiment`).

The top of the stack: may import every layer. Nothing below imports it.

May import: :mod:`rljax.env`, :mod:`rljax.core`, :mod:`rljax.runtime`, :mod:`rljax.agents`,
:mod:`rljax.store`, :mod:`rljax.policy`, :mod:`rljax.suites`, :mod:`rljax.training`, :mod:`rljax.host`,
:mod:`rljax.actorlearner`, :mod:`rljax.bench`, :mod:`rljax.serve`.
"""
