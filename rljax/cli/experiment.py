"""The ``main`` of every experiment module: a config plus one call::

    def main(argv=None):
        return run_experiment(PPOConfig, dict(env="CartPole-v1"), argv, description=__doc__)

which gives ``python -m experiments.ppo_cartpole --seed 3 --total-timesteps 1e6 --run-dir runs/x``
with ``--help`` listing every field and its help line (:mod:`rljax.cli.train`), and
``python -m experiments.ppo_cartpole sweep --grid ...`` (:mod:`rljax.cli.sweep`). Exit statuses:
:mod:`rljax.cli.process`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["run_experiment"]


def run_experiment(config_cls: Any, defaults: dict[str, Any] | None = None,
                   argv: Sequence[str] | None = None, description: str | None = None,
                   name: str | None = None, prog: str | None = None, sweep_prog: str | None = None) -> int:
    """Parses flags, trains (or sweeps, when the first argument is ``sweep``), and prints a summary.
    Returns a process exit status.

    Args:
        config_cls: the algorithm's config class.
        defaults: this experiment's defaults (override the config class's).
        argv: flags (default ``sys.argv[1:]``).
        description: ``--help`` text.
        name: experiment name, used for the default run directory.
        prog: the command as usage and error lines show it (default ``python -m experiments.<name>``).
        sweep_prog: the command that sweeps this experiment (default ``<prog> sweep``).
    """
    from rljax.cli.sweep import sweep_command
    from rljax.cli.train import train_command

    name = name or config_cls.__name__.lower()
    prog = prog or f"python -m experiments.{name}"
    sweep_prog = sweep_prog or f"{prog} sweep"
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["sweep"]:
        return sweep_command(config_cls, defaults, argv[1:], name, prog=sweep_prog)
    return train_command(config_cls, defaults, argv, description=description, name=name, prog=prog,
                         sweep_prog=sweep_prog)
