"""A run's members and the compiled program that steps them: a single run is a population of one.

Every run trains P members with one program. A single run (``P = 1``) is data-parallel: its one
member's envs are split over ``config.num_devices`` devices, which average their gradients. A sweep
(:mod:`rljax.training.sweep`) trains P single-device members vmapped in one program, their traced
hyperparameters, env params and seeds stacked along a leading ``[P]`` axis, the population split
over devices (members never communicate). :class:`Program` hides that difference from the host
loop (:func:`rljax.training.loop.train`): it builds the initial state, compiles the chunk and splits each
chunk's output into one output per member.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from rljax.agents import build_agent
from rljax.runtime.devices import DataParallel, first_device, run_once, serial_map

__all__ = ["Population", "Program", "auto_devices", "population_init", "strong_types"]


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
    """

    seeds: tuple[int, ...]
    hyperparams: Any
    env_params: Any
    names: tuple[str, ...]
    configs: tuple[Any, ...]
    num_devices: int = 1
    pbt: Any = None

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


def strong_types(tree: Any) -> Any:
    """``tree`` with every weakly typed leaf made strongly typed (same dtype and values).

    Env params given as Python numbers come out of a jitted ``init`` weakly typed; a state restored
    from a checkpoint never is. Making the initial state strong gives the fresh and the restored
    state one signature, so a resumed run finds its chunk in the persistent compilation cache
    instead of compiling it again. (Promotion with a weak float32 and with a strong float32 leaf
    gives the same float32 results here: the train state holds no lower-precision floats.)
    """
    def strong(x: Any) -> Any:
        if isinstance(x, (int, float, complex)) and not isinstance(x, bool):  # a Python number
            x = jnp.asarray(x)
        return jax.lax.convert_element_type(x, x.dtype) if getattr(x, "weak_type", False) else x

    return jax.tree.map(strong, tree)


def population_init(agent: Any, num_updates: int) -> Callable[[Any, Any, Any], Any]:
    """The jitted initialiser of a population: ``(keys [P], hyperparams [P], env_params [P]) -> state [P]``.

    Members are initialised one after another (:func:`rljax.runtime.devices.serial_map`), never vmapped: a
    vmapped network init can deadlock XLA's CPU thread pool.
    """
    return jax.jit(lambda *xs: strong_types(serial_map(
        lambda key, hyperparams, env_params: agent.init(key, 0, num_updates, hyperparams, env_params), *xs)))


class Program:
    """The device side of a run of P members (``P = 1``: a single, possibly data-parallel, run).

    Args:
        config: the run's config (for a sweep, the base config; ``num_devices`` must then be 1).
        env: the single, unbatched env.
        env_params: its params (a sweep's per-member params are in ``population``).
        population: the sweep's members, or None for a single run.

    Attributes:
        agent: the per-device :class:`~rljax.agents.base.Agent`.
        parallel: the :class:`~rljax.runtime.devices.DataParallel` placement.
        size: P.
        isolated: the members are independent runs (a sweep); False for a single run.
        names, configs, seeds: per member.
        pbt: the population's PBT spec, or None.
        env, env_params: the env and its params (a sweep's per-member params are the population's).
    """

    def __init__(self, config: Any, env: Any, env_params: Any, population: Population | None = None):
        self.config = config
        self.population = population
        self.isolated = population is not None
        if population is None:
            self.parallel = DataParallel(config.num_devices, config.backend)
            self.agent = build_agent(config, env, env_params, self.parallel.axis_name)
            self.names, self.configs, self.seeds = ("",), (config,), (config.seed,)
        else:
            if config.num_devices != 1:
                raise ValueError(f"sweep members are single-device runs: num_devices={config.num_devices}; split "
                                 f"the population over devices instead (the sweep's --num-devices)")
            self.parallel = DataParallel(population.num_devices, "shard_map")
            self.agent = build_agent(config, env, env_params, None)
            self.names, self.configs, self.seeds = population.names, population.configs, population.seeds
        self.size = len(self.names)
        self.pbt = None if population is None else population.pbt
        self.env, self.env_params = env, env_params

    def init_state(self, num_updates: int) -> Any:
        """The initial train state of every member for a run of ``num_updates`` updates, placed on
        its devices (leading ``[num_devices]`` axis when data-parallel, ``[P]`` for a sweep)."""
        if self.population is None:
            config, agent = self.config, self.agent
            state = self.parallel.init(
                lambda k, i: strong_types(agent.init(k, i, num_updates, config.hyperparams(), self.env_params)),
                jax.random.key(config.seed))
        else:
            keys = jax.vmap(jax.random.key)(jnp.asarray(self.seeds, jnp.uint32))
            members = run_once(population_init(self.agent, num_updates), keys, self.population.hyperparams,
                               self.population.env_params)
            state = self.parallel.place_population(members)
        # Committed to its device, as a state restored from a checkpoint is: the two then lower to
        # the same program, and a resumed run finds its chunk in the persistent compilation cache.
        return state if self.parallel.num_devices > 1 else jax.device_put(state, self.parallel.devices[0])

    def map_chunk(self, packed_chunk: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """The chunk as one jitted program over every member and device, its state donated."""
        if self.population is None:
            return self.parallel.map(packed_chunk, donate=True)
        return self.parallel.map_population(jax.vmap(packed_chunk), donate=True)

    @property
    def axis_name(self) -> str | None:
        """The device axis inside a member's program (None for a sweep's single-device members)."""
        return self.parallel.axis_name if self.population is None else None

    def first_device(self, out: Any) -> Any:
        """A chunk's output as the host needs it: one device's copy of a data-parallel output
        (identical on every device)."""
        return first_device(out, self.config.num_devices)

    def split(self, out: Any) -> list[Any]:
        """A fetched chunk output ``[P, ...]`` (no axis for a single run) as one output per member."""
        if self.population is None:
            return [out]
        return [jax.tree.map(lambda x, i=i: x[i], out) for i in range(self.size)]

    def place(self, state: Any) -> Any:
        """``state`` back on the devices after a host-side change (a PBT step)."""
        return self.parallel.place_population(state) if self.population is not None else state
