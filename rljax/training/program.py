"""The chunk program: how a run is cut into chunks, and the one compiled program that runs a chunk.

A chunk is K updates of every member, scanned into one jitted program with the train state
donated, that returns the state and one float32 vector of fixed-size reductions (the metrics'
means and the episodes' sums over the chunk, and the same per group of ``log_every`` updates:
:class:`ChunkOutput`), the only thing the host reads back per chunk.
The chunk's input and output states have the same shapes, dtypes and shardings, so the program
is compiled once per run and reused for every chunk.

This module owns every step from an agent's ``update`` to that executable:

* :func:`plan_updates` / :func:`resume_plan`: the number of chunks and K (:class:`Plan`);
* :func:`make_chunk`: ``update`` scanned K times, its outputs reduced (:func:`row_groups`);
* :func:`pack_output`: the reductions as one vector (one device-to-host transfer);
* :class:`Program`: the initial state of P members, the chunk mapped over members and devices
  (a single run: data-parallel over ``config.num_devices``; a sweep: vmapped members split over
  devices) and compiled (:meth:`Program.compile`), and each output split per member.

The host loop around the executable is :mod:`rljax.training.loop`; the device placement the
program is mapped with is :class:`rljax.runtime.devices.DataParallel`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import ClosedJaxpr, Jaxpr

from rljax.agents import build_agent
from rljax.agents.base import psum
from rljax.core.rollout import EpisodeSummary
from rljax.runtime.devices import DataParallel, first_device, run_once, serial_map
from rljax.training.options import ROW_BUDGET, auto_log_every
from rljax.training.population import Population

__all__ = ["COLLECTIVES", "collective_bytes", "AUTO_CHUNKS", "MAX_AUTO_CHUNK", "ROW_BUDGET", "ChunkOutput", "Plan", "Program", "UpdateRows",
           "auto_log_every", "make_chunk", "nonfinite_count", "pack_output", "plan_updates", "population_init",
           "resume_plan", "row_groups", "check_not_shrunk", "strong_types"]


class UpdateRows(NamedTuple):
    """A chunk's outputs per group of ``log_every`` consecutive updates (R groups, the last one
    possibly shorter): the finer rows of ``metrics.jsonl``.

    Attributes:
        metrics: dict name -> float32 ``[R]``, each group's mean (``param_desync``: its max).
        episodes: :class:`~rljax.core.rollout.EpisodeSummary` of ``[R]`` sums over each group
            (and all devices).
    """

    metrics: dict[str, jax.Array]
    episodes: EpisodeSummary


class ChunkOutput(NamedTuple):
    """What a chunk returns beside the state: fixed-size reductions over its K updates.

    Attributes:
        metrics: dict name -> float32 scalar, the mean over the chunk's updates (``param_desync``:
            the max).
        episodes: episode sums over the chunk and all devices.
        updates: the same per group of updates (:class:`UpdateRows`).
    """

    metrics: dict[str, jax.Array]
    episodes: EpisodeSummary
    updates: UpdateRows


@dataclasses.dataclass(frozen=True)
class Plan:
    """How a run is cut into chunks.

    Attributes:
        num_updates: updates in the whole run (``num_chunks * updates_per_chunk``).
        updates_per_chunk: K, updates compiled into one chunk.
        num_chunks: host-loop iterations.
        env_steps_per_update: env steps per update over all devices.
    """

    num_updates: int
    updates_per_chunk: int
    num_chunks: int
    env_steps_per_update: int

    @property
    def total_env_steps(self) -> int:
        return self.num_updates * self.env_steps_per_update


# The automatic chunk size: about AUTO_CHUNKS chunks of at most MAX_AUTO_CHUNK updates.
AUTO_CHUNKS = 10
MAX_AUTO_CHUNK = 200


def plan_updates(total_timesteps: int, env_steps_per_update: int, updates_per_chunk: int = 0) -> Plan:
    """Cuts ``total_timesteps`` into whole chunks of whole updates.

    The run does ``n = total_timesteps // env_steps_per_update`` updates (as PureJaxRL does). With
    ``updates_per_chunk = 0`` the chunk size K aims at ~10 chunks of at most 200 updates: each
    chunk boundary costs the host a fixed time (reading scalars, logging; figures in
    docs/design.md), so chunks of well under a second would show in the run time, while
    longer runs still log a row at least every 200 updates. When K does not divide n, the
    divisor of n nearest K between K/2 and min(2K, 200) is preferred (the automatic K stays at
    most 200); otherwise n is rounded up to a whole number of chunks (fewer than one update per
    chunk extra), so every chunk runs the same compiled program. An explicit ``updates_per_chunk``
    is kept as given (capped at n), with n rounded up the same way.
    """
    if env_steps_per_update <= 0:
        raise ValueError(f"env_steps_per_update must be positive, got {env_steps_per_update}")
    n = max(1, total_timesteps // env_steps_per_update)
    target = updates_per_chunk if updates_per_chunk > 0 else max(1, min(MAX_AUTO_CHUNK, math.ceil(n / AUTO_CHUNKS)))
    target = min(target, n)
    if n % target and updates_per_chunk == 0:
        divisors = [d for d in range(max(1, (target + 1) // 2), min(n, 2 * target, MAX_AUTO_CHUNK) + 1)
                    if n % d == 0]
        if divisors:
            target = min(divisors, key=lambda d: (abs(d - target), -d))
    num_chunks = math.ceil(n / target)
    k = math.ceil(n / num_chunks)
    return Plan(num_updates=num_chunks * k, updates_per_chunk=k, num_chunks=num_chunks,
                env_steps_per_update=env_steps_per_update)


def resume_plan(total_timesteps: int, env_steps_per_update: int, saved_updates_per_chunk: int) -> Plan:
    """The plan of a resumed run: ``total_timesteps`` (maybe extended) cut into chunks of the saved
    size, which is part of the compiled program (so the continuation runs the same program,
    bit-exact), even when the new total is below one saved chunk."""
    k = saved_updates_per_chunk
    plan = plan_updates(total_timesteps, env_steps_per_update, k)
    if plan.updates_per_chunk != k:  # the new total is below one saved chunk
        num_chunks = math.ceil(plan.num_updates / k)
        plan = Plan(num_updates=k * num_chunks, updates_per_chunk=k, num_chunks=num_chunks,
                    env_steps_per_update=env_steps_per_update)
    return plan


def check_not_shrunk(plan: Plan, done_chunks: int, env_steps: int, where: str = "the run") -> None:
    """Raises ``ValueError`` when a resume's ``plan`` ends before the ``done_chunks`` chunks
    (``env_steps`` env steps) already trained: a resume continues or extends a run, it cannot
    shorten what is done (an earlier state is an earlier checkpoint, ``rljax eval --step``)."""
    if done_chunks > plan.num_chunks:
        asked = plan.total_env_steps
        raise ValueError(f"cannot resume {where} with total_timesteps={asked:,}: it has already trained {env_steps:,} "
                         f"env steps. A resume continues a run to its end or extends it (total_timesteps >= "
                         f"{env_steps:,}); it cannot shorten what is trained")


def pack_output(chunk: Callable[[Any], tuple[Any, ChunkOutput]]
                ) -> tuple[Callable[[Any], tuple[Any, jax.Array]], Callable[[Any], ChunkOutput]]:
    """Makes a chunk return its :class:`ChunkOutput` as one float32 vector ``[..., n]``.

    One device-to-host transfer per chunk instead of one per metric: every leaf (a scalar or an
    ``[R]`` row vector) is flattened into the vector. Returns ``(packed_chunk, unpack)``:
    ``unpack`` turns the fetched vector back into a ``ChunkOutput`` of numpy values (with the
    vector's leading axes, e.g. ``[P]`` for a population); the structure is recorded when
    ``packed_chunk`` is traced, so call ``unpack`` after compiling.
    """
    tree: list[Any] = []

    def packed_chunk(state: Any) -> tuple[Any, jax.Array]:
        state, out = chunk(state)
        leaves, treedef = jax.tree.flatten(out)
        tree[:] = [treedef, [jnp.shape(x) for x in leaves]]
        return state, jnp.concatenate([jnp.ravel(jnp.asarray(x, jnp.float32)) for x in leaves], axis=-1)

    def unpack(vec: Any) -> ChunkOutput:
        vec = np.asarray(vec)
        treedef, shapes = tree
        leaves, offset = [], 0
        for shape in shapes:
            size = math.prod(shape)
            leaves.append(vec[..., offset:offset + size].reshape(vec.shape[:-1] + shape))
            offset += size
        return jax.tree.unflatten(treedef, leaves)

    return packed_chunk, unpack


def nonfinite_count(state: Any) -> jax.Array:
    """The number of NaN/inf values in the floating leaves of ``state`` outside its replay buffer.

    Params, optimiser state, normaliser statistics, env states and observations are watched; the
    replay storage (any leaf under an attribute named ``buffer``) is not, to keep the check cheap
    for large buffers: non-finite data in it shows up in the params it trains within a chunk.
    Returns a float32 scalar (exactly 0 for a healthy state).

    One copy of the watched leaves (cast to float32, flattened, concatenated) and one reduction over
    it, rather than one test per leaf: the count is computed once per chunk, but XLA makes each
    per-leaf test its own kernel, and compiling those kernels costs more than the copy. The
    optimisation barrier keeps XLA from splitting the reduction of the concatenation back into one
    per leaf. A float32 value is non-finite exactly when the original (float16/bfloat16/float32)
    value is; float64 values beyond float32's range would count as infinite.
    """
    watched = [jnp.ravel(leaf).astype(jnp.float32) for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]
               if not any(isinstance(k, jax.tree_util.GetAttrKey) and k.name == "buffer" for k in path)
               and hasattr(leaf, "dtype") and jnp.issubdtype(leaf.dtype, jnp.floating)]
    if not watched:
        return jnp.zeros((), jnp.float32)
    flat = jax.lax.optimization_barrier(jnp.concatenate(watched))
    return jnp.sum(~jnp.isfinite(flat), dtype=jnp.int32).astype(jnp.float32)


def row_groups(values: Any, log_every: int, reduce: str = "mean") -> Any:
    """Reduces each ``[K]`` leaf of ``values`` per group of ``log_every`` consecutive updates:
    ``[ceil(K / log_every)]`` means (``"sum"``: sums, ``"max"``: maxima); the last group holds the
    remaining ``K mod log_every`` updates when ``log_every`` does not divide K."""

    def reduce_leaf(v: jax.Array) -> jax.Array:
        k = v.shape[0]
        if log_every == 1:
            return v
        groups = math.ceil(k / log_every)
        ids = np.arange(k) // log_every
        if reduce == "max":
            return jax.ops.segment_max(v, ids, num_segments=groups, indices_are_sorted=True)
        total = jax.ops.segment_sum(v, ids, num_segments=groups, indices_are_sorted=True)
        return total if reduce == "sum" else total / np.bincount(ids).astype(np.float32)

    return jax.tree.map(reduce_leaf, values)


def make_chunk(update: Callable[[Any], Any], num_updates: int, axis_name: str | None, log_every: int = 0
               ) -> Callable[[Any], tuple[Any, ChunkOutput]]:
    """Scans ``update`` ``num_updates`` times and reduces its outputs to a :class:`ChunkOutput`.

    Besides the update's metrics (means over the chunk; ``param_desync``: the max), the output
    holds ``nonfinite_state``: :func:`nonfinite_count` of the chunk's final state, summed over
    devices, and the metrics and episodes per group of ``log_every`` updates (0: one group, the
    whole chunk) in :class:`UpdateRows`.
    """
    log_every = num_updates if log_every <= 0 else min(log_every, num_updates)

    def chunk(state: Any) -> tuple[Any, ChunkOutput]:
        state, outs = jax.lax.scan(lambda s, _: update(s), state, None, length=num_updates)
        metrics = {k: (jnp.max(v) if k == "param_desync" else jnp.mean(v)) for k, v in outs.metrics.items()}
        metrics["nonfinite_state"] = psum(nonfinite_count(state), axis_name)
        episodes = psum(jax.tree.map(jnp.sum, outs.episodes), axis_name)
        rows = UpdateRows(
            {k: row_groups(v, log_every, "max" if k == "param_desync" else "mean") for k, v in outs.metrics.items()},
            psum(row_groups(outs.episodes, log_every, "sum"), axis_name))
        return state, ChunkOutput(metrics, episodes, rows)

    return chunk


COLLECTIVES = frozenset({"psum", "pmax", "pmin", "all_gather", "all_to_all", "ppermute", "reduce_scatter",
                         "psum_scatter"})
"""The primitives that move data between devices (what :func:`collective_bytes` counts)."""


def collective_bytes(jaxpr: Any) -> int:
    """The bytes one device hands to collectives when ``jaxpr`` runs once: the operand bytes of every
    :data:`COLLECTIVES` equation, a ``scan`` body's counted ``length`` times, a ``cond`` by its
    largest branch, a ``while`` body once (its trip count is not in the program). E.g. a ``psum``
    of a float32 ``[3, 4]`` inside a scan of length 5 counts ``5 * 48`` bytes."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    total = 0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name in COLLECTIVES:
            total += sum(math.prod(v.aval.shape) * v.aval.dtype.itemsize for v in eqn.invars
                         if hasattr(v.aval, "shape"))
        inner = [collective_bytes(sub) for value in eqn.params.values()
                 for sub in (value if isinstance(value, (tuple, list)) else (value,))
                 if isinstance(sub, (Jaxpr, ClosedJaxpr))]
        if inner:  # a cond runs one branch; a scan runs its body `length` times
            total += (max(inner) if name == "cond" else sum(inner)) * int(eqn.params.get("length", 1))
    return total


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
        halving: the population's successive-halving spec, or None (its trials are the population's).
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
        self.halving = None if population is None else population.halving
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

    def resolve_log_every(self, log_every: int, plan: Plan) -> int:
        """The updates per row actually used for ``log_every`` (0: :func:`auto_log_every` for these
        members): at most the chunk's, since a row never spans two chunks."""
        return min(log_every or auto_log_every(plan.updates_per_chunk, self.size), plan.updates_per_chunk)

    def compile(self, state: Any, plan: Plan, log_every: int = 0) -> tuple[Any, Callable[[Any], ChunkOutput]]:
        """The chunk of ``plan.updates_per_chunk`` updates, compiled for ``state``, with one row of
        outputs per ``log_every`` updates (:meth:`resolve_log_every`).

        Returns ``(executable, unpack)``: ``executable(state) -> (state, vector)`` runs one chunk
        of every member (the state donated), ``unpack`` turns the fetched vector into a
        :class:`ChunkOutput` (leading ``[P]`` axis for a sweep).
        """
        log_every = self.resolve_log_every(log_every, plan)
        packed_chunk, unpack = pack_output(make_chunk(self.agent.update, plan.updates_per_chunk, self.axis_name,
                                                      log_every))
        return self.map_chunk(packed_chunk).lower(state).compile(), unpack

    def collective_bytes_per_update(self, state: Any) -> int:
        """The bytes each device hands to collectives in one update (:func:`collective_bytes` of the
        agent's update traced for one device of ``state``); 0 for a single device or a sweep, whose
        programs hold no collectives."""
        axis = self.axis_name
        if axis is None or self.parallel.num_devices == 1:
            return 0
        one = jax.eval_shape(lambda s: jax.tree.map(lambda x: x[0], s), state)
        return collective_bytes(jax.make_jaxpr(self.agent.update, axis_env=[(axis, self.parallel.num_devices)])(one))

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
