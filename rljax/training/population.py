"""A sweep's members as one population: a single run is a population of one.

Every run trains P members with one program. A single run (``P = 1``) is data-parallel: its one
member's envs are split over ``config.num_devices`` devices, which average their gradients. A sweep
(:mod:`rljax.training.sweep`) trains P single-device members vmapped in one program, their traced
hyperparameters, env params and seeds stacked along a leading ``[P]`` axis (:class:`Population`),
the population split over devices (members never communicate, :func:`auto_devices`). The program
that steps them is :class:`rljax.training.program.Program`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["Population", "auto_devices"]


@dataclasses.dataclass(frozen=True)
class Population:
    """The members of a sweep, trained together as one compiled program (vmapped over members).

    Every member is a single-device run of the same structural config; members differ in their
    traced hyperparameters, env params and seed.

    Attributes:
        seeds: one seed per member, ``[P]``.
        hyperparams: the algorithm's hyperparameter pytree with leaves ``[P]``.
        env_params: env params with leaves ``[P]``.
        names: one directory name per member (``RUN_DIR/members/<name>``).
        configs: one resolved config per member (written to its ``config.json``).
        num_devices: devices the population is split over (``P`` must be a multiple).
        pbt: a :class:`rljax.training.hooks.pbt.PBTSpec` to evolve the population during training, or None.
        halving: a :class:`rljax.training.hooks.halving.HalvingSpec`: the members are slots that train
            the ``trials`` in turn (successive halving), or None.
        trials: with ``halving``, the population of every trial of the search space (their
            hyperparameters, env params and seeds; a slot's state is reset to a trial's initial one).
    """

    seeds: tuple[int, ...]
    hyperparams: Any
    env_params: Any
    names: tuple[str, ...]
    configs: tuple[Any, ...]
    num_devices: int = 1
    pbt: Any = None
    halving: Any = None
    trials: "Population | None" = None

    @property
    def size(self) -> int:
        return len(self.seeds)

    @classmethod
    def stack(cls, configs: Sequence[Any], env_params: Sequence[Any], names: Sequence[str],
              num_devices: int = 1) -> "Population":
        """The population of ``configs`` (one per member, differing only in sweepable fields and
        seed) with ``env_params`` (one per member), their hyperparameters stacked to ``[P]``."""
        if len(configs) % num_devices:
            raise ValueError(f"{len(configs)} sweep members cannot be split evenly over {num_devices} devices; "
                             f"use a member count that is a multiple of {num_devices}")
        hyperparams = jax.tree.map(lambda *xs: _stack(xs), *[c.hyperparams() for c in configs])
        return cls(seeds=tuple(c.seed for c in configs), hyperparams=hyperparams,
                   env_params=jax.tree.map(lambda *xs: _stack(xs), *env_params), names=tuple(names),
                   configs=tuple(configs), num_devices=num_devices)


# One compiled stack per leaf signature: stacking P scalars one jnp.asarray at a time costs a
# dispatch per member and leaf, seconds for hundreds of members (docs/design.md). Python numbers
# enter a jit weakly typed, so the stacked leaves keep exactly the dtype and weak type they had as
# jnp.asarray(x).
_stack = jax.jit(lambda xs: jnp.stack([jnp.asarray(x) for x in xs]))


def auto_devices(size: int, available: int) -> int:
    """How many devices a population of ``size`` members is split over by default: the most of
    the ``available`` devices that divide it evenly (members are never split unevenly).

    On a CPU the command line makes one fake device per core (``rljax.cli.sweep.sweep_command``): XLA
    runs one program on about one core at these batch sizes, while a population split over N
    devices runs its parts on N cores (figures: docs/design.md). Members never communicate, so
    the split adds no collective.
    """
    if size < 1 or available < 1:
        raise ValueError(f"need a population and a device: size={size}, available={available}")
    return max(d for d in range(1, min(size, available) + 1) if size % d == 0)
