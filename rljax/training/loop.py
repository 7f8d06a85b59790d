"""The training loop: compiled chunks of K updates, driven by a short host loop with boundary hooks.

Everything inside a chunk (rollouts, targets, every epoch and minibatch of K updates) is one compiled
program with the train state donated. One compile per run: the chunk's input and output states have
the same shapes, dtypes and shardings, so the executable is reused for every chunk.

Every run is a population (:mod:`rljax.training.population`): a single run is a population of one, a sweep
of P members is vmapped into the same kind of program. Between chunks the host reads a fixed-size
vector of scalars, turns it into one metrics row per member and hands the rows to the boundary
hooks, each a small object in the module that owns its concern:

* :class:`rljax.training.hooks.health.Health`: params in sync across devices, losses and state finite (stop or
  roll back);
* :class:`rljax.policy.evaluate.Evaluation`: the greedy policy's episodes every ``eval_interval`` chunks
  (the ``eval/*`` columns);
* :class:`rljax.training.hooks.observe.ChunkTiming`: the rows' per-chunk ``time/*`` and ``memory/*`` columns;
* :class:`rljax.store.tracking.Tracking`: metrics rows, tensorboard and progress lines;
* :class:`rljax.training.hooks.watchdog.StallWatchdog`: a warning with every thread's stack when chunks stop finishing;
* ``on_chunk``: the caller's callback (:class:`OnChunk`);
* :class:`rljax.training.hooks.pbt.PBT`: exploit/explore of a sweep's population;
* :class:`rljax.store.checkpoint.Checkpointing`: the save cadence, the final save and the save on a stop.

A hook has up to six methods, each optional: ``start(run)`` runs once after compiling, before the
first chunk (the stall watchdog starts its clock there); ``due(run, c, last)`` says whether it needs chunk
``c``'s state on the host (then the next chunk is not launched ahead); ``record(run, c, rows)`` sees
every chunk's rows; ``react(run, c, rows)`` and ``boundary(run, c, rows, last)`` may change the run
and return the chunk to continue from (a rollback); ``boundary`` runs only once the state of chunk
``c`` is the current one; ``close(run)`` runs when the loop ends, however it ends.

Several processes (:mod:`rljax.runtime.distributed`) run this same loop in lockstep: each launches the
same chunks, and at every boundary they first *agree* (one small all-gather): a stop signal that
reached any of them stops all of them after the same chunk, and time-based decisions use the
leader's clock (:attr:`Run.clock`). Every other decision is made from the rows, which are equal on
every process. Process 0 alone writes the run directory and checkpoints.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import pathlib
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rljax.agents.base import Agent, psum
from rljax.core.rollout import EpisodeSummary

__all__ = ["ChunkOutput", "Plan", "RunOptions", "Run", "OnChunk", "plan_updates", "resume_plan", "pack_output",
           "make_chunk", "chunk_row", "nonfinite_count", "TrainResult", "train"]


class ChunkOutput(NamedTuple):
    """What a chunk returns beside the state: fixed-size reductions over its K updates.

    Attributes:
        metrics: dict name -> float32 scalar, the mean over the chunk's updates (``param_desync``:
            the max).
        episodes: episode sums over the chunk and all devices.
    """

    metrics: dict[str, jax.Array]
    episodes: EpisodeSummary


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


def pack_output(chunk: Callable[[Any], tuple[Any, ChunkOutput]]
                ) -> tuple[Callable[[Any], tuple[Any, jax.Array]], Callable[[Any], ChunkOutput]]:
    """Makes a chunk return its :class:`ChunkOutput` as one float32 vector ``[..., n]``.

    One device-to-host transfer per chunk instead of one per metric. Returns ``(packed_chunk,
    unpack)``: ``unpack`` turns the fetched vector back into a ``ChunkOutput`` of numpy values
    (with the vector's leading axes, e.g. ``[P]`` for a population); the structure is recorded
    when ``packed_chunk`` is traced, so call ``unpack`` after compiling.
    """
    tree: list[Any] = []

    def packed_chunk(state: Any) -> tuple[Any, jax.Array]:
        state, out = chunk(state)
        leaves, treedef = jax.tree.flatten(out)
        tree[:] = [treedef]
        return state, jnp.stack([jnp.asarray(x, jnp.float32) for x in leaves], axis=-1)

    def unpack(vec: Any) -> ChunkOutput:
        vec = np.asarray(vec)
        return jax.tree.unflatten(tree[0], [vec[..., i] for i in range(vec.shape[-1])])

    return packed_chunk, unpack


def nonfinite_count(state: Any) -> jax.Array:
    """The number of NaN/inf values in the floating leaves of ``state`` outside its replay buffer.

    Params, optimiser state, normaliser statistics, env states and observations are watched; the
    replay storage (any leaf under an attribute named ``buffer``) is not, to keep the check cheap
    for large buffers: non-finite data in it shows up in the params it trains within a chunk.
    Returns a float32 scalar (exactly 0 for a healthy state).
    """
    total = jnp.zeros((), jnp.float32)
    for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
        if any(isinstance(k, jax.tree_util.GetAttrKey) and k.name == "buffer" for k in path):
            continue
        if hasattr(leaf, "dtype") and jnp.issubdtype(leaf.dtype, jnp.inexact):
            total = total + jnp.sum(~jnp.isfinite(leaf)).astype(jnp.float32)
    return total


def make_chunk(update: Callable[[Any], Any], num_updates: int, axis_name: str | None
               ) -> Callable[[Any], tuple[Any, ChunkOutput]]:
    """Scans ``update`` ``num_updates`` times and reduces its outputs to a :class:`ChunkOutput`.

    Besides the update's metrics (means over the chunk; ``param_desync``: the max), the output
    holds ``nonfinite_state``: :func:`nonfinite_count` of the chunk's final state, summed over
    devices.
    """

    def chunk(state: Any) -> tuple[Any, ChunkOutput]:
        state, outs = jax.lax.scan(lambda s, _: update(s), state, None, length=num_updates)
        metrics = {k: (jnp.max(v) if k == "param_desync" else jnp.mean(v)) for k, v in outs.metrics.items()}
        metrics["nonfinite_state"] = psum(nonfinite_count(state), axis_name)
        episodes = psum(jax.tree.map(jnp.sum, outs.episodes), axis_name)
        return state, ChunkOutput(metrics, episodes)

    return chunk


def chunk_row(plan: Plan, chunk_index: int, out: ChunkOutput, wall: float, chunk_s: float) -> dict[str, Any]:
    """One member's metrics row for chunk ``chunk_index``: counters, throughput, the mean return and
    length of the episodes that finished in the chunk (None when none did), reward components and
    the chunk's metrics."""
    metrics = {k: float(v) for k, v in out.metrics.items()}
    ep = out.episodes
    count = float(ep.count)
    updates = (chunk_index + 1) * plan.updates_per_chunk
    row: dict[str, Any] = {
        "env_steps": updates * plan.env_steps_per_update,
        "updates": updates,
        "wall_time_s": wall,
        "sps": plan.updates_per_chunk * plan.env_steps_per_update / max(chunk_s, 1e-9),
        "episode_return_mean": float(ep.return_sum) / count if count else None,
        "episode_length_mean": float(ep.length_sum) / count if count else None,
        "episodes": int(count),
    }
    for name, total in ep.components.items():
        row[f"reward_components/{name}"] = float(total) / count if count else None
    row.update(metrics)
    return row



@dataclasses.dataclass
class TrainResult:
    """What :func:`train` returns.

    Attributes:
        state: the final train state (leading ``[num_devices]`` axis when data-parallel).
        rows: the metrics rows, one per chunk, as written to ``metrics.jsonl``.
        run_dir: the run directory, or None when the run was not tracked.
        timings: seconds spent compiling, computing, waiting for the device (``host_wait_s``),
            logging, checkpointing and evaluating (``eval_s``), and the plan.
        agent: the agent that was trained (its ``act`` evaluates the final policy).
        preempted: the signal (or request) that stopped the run early, or None if it finished.
        member_rows: for a sweep (``population``), each member's rows; ``rows`` then holds
            member 0's.
    """

    state: Any
    rows: list[dict[str, Any]]
    run_dir: str | None
    timings: dict[str, float]
    agent: Agent
    preempted: str | None = None
    member_rows: list[list[dict[str, Any]]] | None = None

    @property
    def final_eval(self) -> dict[str, Any] | None:
        """The ``eval/*`` columns of the last evaluated chunk (``eval_interval``), or None."""
        for row in reversed(self.rows):
            if "eval/return_mean" in row:
                return {k: v for k, v in row.items() if k.startswith("eval/")}
        return None

    @property
    def final_return(self) -> float:
        """Mean episode return over the last few chunks that finished episodes (NaN if none)."""
        returns = [r["episode_return_mean"] for r in self.rows if r.get("episode_return_mean") is not None]
        return float(np.mean(returns[-2:])) if returns else float("nan")


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """How a run is saved and logged (recorded with the run and kept by a CLI resume).

    Attributes:
        checkpoint_every: save every this many chunks; 0 saves instead when
            ``checkpoint_interval_s`` seconds have passed since the last save. Either way a
            checkpoint is always saved after the last chunk and on a stop.
        checkpoint_interval_s: the time-based interval used when ``checkpoint_every`` is 0.
        keep_checkpoints: how many recent checkpoints to keep.
        checkpoints: False disables checkpointing entirely (the run cannot be resumed).
        tensorboard: write tensorboard events.
        stall_factor: warn (once, with every thread's stack in ``RUN_DIR/stall-*.txt``) when no
            chunk finished for this many times the median chunk interval; 0 turns the watchdog off
            (:mod:`rljax.training.hooks.watchdog`).
        stall_first_chunk_s: the stall threshold until the first chunk finishes (compiling does
            not count).
        stall_min_s: the threshold's floor after the first chunk.
        deterministic: ``"auto"``, ``"on"`` or ``"off"``: whether the run must be bit-identical
            when rerun or resumed in another process (:func:`rljax.cli.process.request_deterministic`;
            what each backend guarantees: docs/runbook.md). Recorded in ``manifest.json``.
    """

    checkpoint_every: int = 0
    checkpoint_interval_s: float = 60.0
    keep_checkpoints: int = 3
    checkpoints: bool = True
    tensorboard: bool = True
    stall_factor: float = 10.0
    stall_first_chunk_s: float = 600.0
    stall_min_s: float = 60.0
    deterministic: str = "auto"

    def __post_init__(self) -> None:
        every, interval, keep = self.checkpoint_every, self.checkpoint_interval_s, self.keep_checkpoints
        if not isinstance(every, int) or isinstance(every, bool) or every < 0:
            raise ValueError(f"checkpoint_every must be an integer >= 0 (0: every checkpoint_interval_s), "
                             f"got {every!r}")
        if not (isinstance(interval, (int, float)) and math.isfinite(interval) and interval > 0):
            raise ValueError(f"checkpoint_interval_s must be a finite number > 0, got {interval!r}")
        if not isinstance(keep, int) or isinstance(keep, bool) or keep < 1:
            raise ValueError(f"keep_checkpoints must be an integer >= 1, got {keep!r}")
        object.__setattr__(self, "checkpoint_interval_s", float(interval))
        for name in ("stall_factor", "stall_first_chunk_s", "stall_min_s"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                    and value >= 0 and (value > 0 or name == "stall_factor")):
                allowed = ">= 0 (0: no stall watchdog)" if name == "stall_factor" else "> 0"
                raise ValueError(f"{name} must be a finite number {allowed}, got {value!r}")
            object.__setattr__(self, name, float(value))
        from rljax.runtime.determinism import check_deterministic_mode

        check_deterministic_mode(self.deterministic)


@dataclasses.dataclass
class Run:
    """A run in progress, as the host loop and its boundary hooks see it.

    Attributes:
        config, program, plan: what runs (:class:`rljax.training.population.Program`, :class:`Plan`).
        state: the current train state (replaced by every chunk, a PBT step or a rollback).
        guard: the :class:`rljax.store.checkpoint.PreemptionGuard` (``requested`` once a stop is asked).
        options: the run options, as a dict.
        checkpointer: the :class:`rljax.store.checkpoint.Checkpointer`, or None.
        tracking: the :class:`rljax.store.tracking.Tracking` hook; health: the :class:`rljax.training.hooks.health.Health` hook.
        start_chunk: the first chunk this process runs.
        rollbacks: rollbacks so far (saved with each checkpoint).
        rows: member 0's rows; member_rows: every member's rows.
        timings: seconds spent per phase, and the plan.
        ahead: ``(state, output, launch time)`` of a chunk launched before the current one was read.
        clock: seconds on the run's clock since it started: time-based decisions (the checkpoint
            cadence) read it, so that every process of a multi-process run takes them at the same
            chunk (there it is the leader's clock at the last boundary).
        leader: this process writes the run directory (always, but for processes 1.. of a
            multi-process run).
        phase: what the host loop is doing, in words (read by the stall watchdog's report).
    """

    config: Any
    program: Any
    plan: Plan
    state: Any
    guard: Any
    options: dict[str, Any]
    checkpointer: Any = None
    tracking: Any = None
    health: Any = None
    start_chunk: int = 0
    rollbacks: int = 0
    rows: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    member_rows: list[list[dict[str, Any]]] = dataclasses.field(default_factory=list)
    timings: dict[str, Any] = dataclasses.field(default_factory=dict)
    ahead: tuple[Any, Any, float] | None = None
    clock: Callable[[], float] = time.perf_counter
    leader: bool = True
    phase: str = "setting up"

    def discard_ahead(self) -> None:
        """Drops the chunk launched ahead (it ran on a state being replaced); its output state is
        the only live one (the earlier state was donated to it)."""
        if self.ahead is not None:
            self.state, self.ahead = self.ahead[0], None
            jax.block_until_ready(self.state)


class OnChunk:
    """The caller's ``on_chunk(chunk_index, state, row)`` as a hook: returning True stops the run
    at this chunk as a preemption would (saved; ``result.preempted == "on_chunk"``)."""

    needs_every_state = True

    def __init__(self, callback: Callable[[int, Any, dict[str, Any]], Any]):
        self.callback = callback

    def react(self, run: Run, chunk_index: int, rows: list[dict[str, Any]]) -> None:
        if self.callback(chunk_index, run.state, rows[0]):
            run.guard.request("on_chunk")


def train(config: Any, env: Any = None, env_params: Any = None, *, run_dir: str | os.PathLike | None = None,
          resume: bool = False, checkpoint_every: int = 0, checkpoint_interval_s: float = 60.0,
          keep_checkpoints: int = 3, checkpoints: bool = True, quiet: bool = False, tensorboard: bool = True,
          handle_signals: bool = True, on_chunk: Callable[[int, Any, dict[str, Any]], Any] | None = None,
          population: Any = None, stall_factor: float = 10.0, stall_first_chunk_s: float = 600.0,
          stall_min_s: float = 60.0, deterministic: str = "auto") -> TrainResult:
    """Trains an agent (or a sweep's population); the Python entry point behind every experiment.

    Args:
        config: an algorithm config, e.g. :class:`rljax.agents.ppo.PPOConfig`; its ``on_nonfinite``,
            ``max_rollbacks`` and ``rollback_lr_factor`` say how divergence is met (:mod:`rljax.training.hooks.health`).
        env: an env object (rljax or gymnax contract); None: ``rljax.core.registry.make(config.env,
            **config.env_kwargs)``. For an object, ``config.json`` (and every checkpoint) records a
            name that rebuilds it when one does (so ``rljax resume RUN_DIR`` works), else
            ``python-object:<module>:<class>``, which only a resume from Python (passing the object
            again) continues (:func:`rljax.core.registry.resolve_run`).
        env_params: its params; ``env.default_params`` when None. ``config.env_params`` overrides
            are applied to them in either case.
        run_dir: where ``config.json``, ``manifest.json``, ``metrics.jsonl``, ``tb/`` and
            ``checkpoints/`` go; None keeps the run in memory (rows are still returned). The
            directory is locked for the run (:mod:`rljax.store.runlock`).
        resume: continue the run in ``run_dir`` from its newest valid checkpoint; the config must
            match except for :data:`rljax.store.rundir.RESUMABLE_FIELDS`. A run with no committed
            checkpoint starts over (its rows move to ``metrics.superseded.jsonl``).
        checkpoint_every, checkpoint_interval_s, keep_checkpoints, checkpoints, tensorboard,
        stall_factor, stall_first_chunk_s, stall_min_s, deterministic: the :class:`RunOptions`.
            ``deterministic="on"`` sets XLA's deterministic flags if JAX has not started yet, and
            raises ``ValueError`` on a GPU that started without them.
        quiet: no progress lines.
        handle_signals: SIGTERM/SIGINT stop the run cleanly at the next chunk boundary (saved,
            ``result.preempted`` set); during set-up or compilation, before the first chunk.
        on_chunk: ``on_chunk(chunk_index, state, row)`` after each chunk; True stops the run there.
        population: a sweep's :class:`rljax.training.population.Population` (see :mod:`rljax.training.sweep`): the
            state gets a leading ``[P]`` axis, member rows go to ``RUN_DIR/members/<name>``, and a
            diverged member is reported, not fatal.

    Returns:
        A :class:`TrainResult`.

    Raises:
        rljax.training.hooks.health.DesyncError: params diverged across devices.
        rljax.training.hooks.health.NonFiniteError: a loss or the state became NaN/inf and could not be rolled back.
        rljax.store.rundir.ConfigMismatchError: ``resume`` with a config that changes the run.
        rljax.store.checkpoint.NoCheckpointError: ``resume`` but every checkpoint is unreadable.
        rljax.store.runlock.RunLockedError: another live process holds ``run_dir``.
    """
    from rljax.runtime import distributed
    from rljax.store.checkpoint import PreemptionGuard
    from rljax.store.runlock import RunLock

    from rljax.runtime.determinism import request_deterministic

    options = RunOptions(checkpoint_every, checkpoint_interval_s, keep_checkpoints, checkpoints, tensorboard,
                         stall_factor, stall_first_chunk_s, stall_min_s, deterministic)
    request_deterministic(deterministic)
    if resume and run_dir is None:
        raise ValueError("resume=True needs the run_dir of the run to continue")
    if resume and not pathlib.Path(run_dir).is_dir():
        raise FileNotFoundError(f"{run_dir} does not exist; nothing to resume")
    with contextlib.ExitStack() as stack:
        if run_dir is not None and distributed.is_leader():
            stack.enter_context(RunLock(run_dir))
        # Several processes act on a signal only once all of them know of it (at the boundary's agreement).
        guard = stack.enter_context(PreemptionGuard(handle_signals, deferred=distributed.process_count() > 1))
        try:
            return _train(config, env, env_params, run_dir, resume, options, quiet, on_chunk, population, guard)
        except Exception as err:
            # Any collective, in set-up (restore, manifest) or in the loop, fails when a peer process
            # has died: say so (rljax.runtime.distributed.PeerLostError) rather than with XLA's words alone.
            if distributed.process_count() > 1:
                distributed.raise_if_peer_failure(err)
            raise


def _train(config: Any, env: Any, env_params: Any, run_dir: Any, resume: bool, options: RunOptions, quiet: bool,
           on_chunk: Any, population: Any, guard: Any) -> TrainResult:
    """:func:`train` inside its run-directory lock and signal guard: set up, compile, loop."""
    from rljax.runtime import distributed
    from rljax.core import registry as env_registry
    from rljax.store.checkpoint import Checkpointer
    from rljax.training.hooks.health import Health
    from rljax.training.population import Program
    from rljax.runtime.determinism import determinism_record
    from rljax.store.rundir import resume_from_scratch, saved_env
    from rljax.store.tracking import Tracking

    t_start = time.perf_counter()
    # The config records how to rebuild an env object (config.env). A resume whose config already
    # names the saved env keeps it: a run saved before rljax recorded env objects says CartPole-v1
    # (the default) for any object, and resumes from Python as it did then.
    config, env, env_params = env_registry.resolve_run(
        config, env, env_params, record=not (resume and saved_env(run_dir) == config.env), run_dir=run_dir)
    restart = resume and resume_from_scratch(run_dir, config)
    program = Program(config, env, env_params, population)
    if run_dir is not None and not resume and any((pathlib.Path(run_dir) / "checkpoints").glob("*")):
        raise FileExistsError(f"run directory {str(run_dir)!r} already holds checkpoints; resume it "
                              f"(`rljax resume {run_dir}`) or choose a new run directory")
    run = Run(config, program, None, None, guard, dataclasses.asdict(options), health=Health(config, program.isolated),
              member_rows=[[] for _ in range(program.size)], leader=distributed.is_leader())
    multiprocess = distributed.process_count() > 1
    guard.local_clock = lambda: time.perf_counter() - t_start
    run.clock = (lambda: guard.agreed_clock) if multiprocess else guard.local_clock
    if run_dir is not None and (options.checkpoints or (resume and not restart)):
        run.checkpointer = Checkpointer(run_dir, keep=options.keep_checkpoints, follower=not run.leader)
    saved_meta = _start(run, restore=resume and not restart)
    if not options.checkpoints and run.checkpointer is not None:
        run.checkpointer.close()
        run.checkpointer = None
    quiet = quiet or not run.leader
    manifest_extra = {"plan": dataclasses.asdict(run.plan), "algorithm": type(config).__name__,
                      "run_options": run.options, "determinism": determinism_record(options.deterministic)}
    if multiprocess:  # every host and device of the job
        manifest_extra["processes"] = distributed.process_record()
    # The run directory's files exist before compiling: a run stopped while compiling can be resumed.
    run.tracking = Tracking(
        run_dir if run.leader else None, program, run.plan.total_env_steps, run.options, quiet=quiet, resume=resume,
        resume_env_steps=None if not resume else (0 if restart else int(saved_meta["env_steps"])),
        saved_rows=(saved_meta or {}).get("rows"), manifest_extra=manifest_extra)
    hooks = _hooks(run, run_dir, resume, on_chunk, options)
    compiled, unpack = _compile(run, resume and not restart, quiet, run_dir)
    run.timings["setup_s"] = time.perf_counter() - t_start - run.timings["compile_s"]
    t_loop = time.perf_counter()
    wall_offset = float((saved_meta or {}).get("wall_time_s", 0.0)) if run_dir is not None else 0.0
    try:
        preempted = _host_loop(run, compiled, unpack, hooks, lambda: wall_offset + time.perf_counter() - t_start)
    finally:
        guard.finishing = True
        _close(hooks, run)
    run.timings["loop_s"] = time.perf_counter() - t_loop
    run.timings["total_s"] = time.perf_counter() - t_start
    if preempted and not quiet:
        where = f"; resume with: rljax resume {run_dir}" if run_dir is not None else ""
        at = f"after env step {run.rows[-1]['env_steps']:,}: checkpoint saved" if run.rows else "before its first chunk"
        print(f"stopped by {preempted} {at}{where}", flush=True)
    return TrainResult(state=run.state, rows=run.rows, run_dir=None if run_dir is None else str(run_dir),
                       timings=run.timings, agent=program.agent, preempted=preempted,
                       member_rows=run.member_rows if program.isolated else None)


def _start(run: Run, restore: bool) -> dict[str, Any] | None:
    """Sets the run's plan, initial state and first chunk: restored from the newest checkpoint
    (returning its meta), or fresh (returning None)."""
    from rljax.store.rundir import check_resume_config

    config, program = run.config, run.program
    steps_per_update = program.agent.env_steps_per_update
    if not restore:
        run.plan = plan_updates(config.total_timesteps, steps_per_update, config.updates_per_chunk)
        run.state = program.init_state(run.plan.num_updates)
        return None
    # The chunk size is part of the compiled program: keep the saved one so the continuation runs
    # the same program (bit-exact), even when total_timesteps was extended.
    probe = plan_updates(config.total_timesteps, steps_per_update, config.updates_per_chunk)
    state, meta, _ = run.checkpointer.restore(program.init_state(probe.num_updates))
    if isinstance(meta.get("config"), dict):  # the checkpoint is the record of the run
        check_resume_config(meta["config"], config)
    run.rollbacks = int(meta.get("rollbacks", 0))
    plan = resume_plan(config.total_timesteps, steps_per_update, int(meta["plan"]["updates_per_chunk"]))
    if plan.num_updates != int(meta["plan"]["num_updates"]):
        state = state.replace(num_updates=jax.device_put(
            jnp.full_like(state.num_updates, plan.num_updates), state.num_updates.sharding))
    run.plan, run.state, run.start_chunk = plan, state, int(meta["chunk_index"]) + 1
    return meta


def _hooks(run: Run, run_dir: Any, resume: bool, on_chunk: Any, options: RunOptions) -> list[Any]:
    """The boundary hooks of a run, in the order they see each chunk."""
    from rljax.store.checkpoint import Checkpointing
    from rljax.policy.evaluate import Evaluation
    from rljax.training.hooks.observe import ChunkTiming
    from rljax.training.hooks.pbt import PBT
    from rljax.training.hooks.watchdog import StallWatchdog

    hooks: list[Any] = [run.health]
    if run.config.eval_interval > 0:  # adds its columns to the rows before they are logged
        hooks.append(Evaluation(run.program, run.config.eval_interval, run.config.eval_episodes))
    # Device memory of this process's devices (several processes: the leader's stand for the run's).
    local = [d for d in run.program.parallel.devices if d.process_index == jax.process_index()]
    hooks.append(ChunkTiming(local))  # adds its columns before they are logged
    hooks.append(run.tracking)
    # Every process watches for its own stalls; only the leader writes reports to the run directory.
    hooks.append(StallWatchdog(run_dir if run.leader else None, options.stall_factor, options.stall_first_chunk_s,
                               options.stall_min_s))
    if on_chunk is not None:
        hooks.append(OnChunk(on_chunk))
    if run.program.pbt is not None:
        hooks.append(PBT(run.program.pbt, run.program, run_dir, resume, run.start_chunk, leader=run.leader))
    if run.checkpointer is not None:
        hooks.append(Checkpointing(run.checkpointer, options.checkpoint_every, options.checkpoint_interval_s,
                                   nonfinite_ok=run.program.isolated, start=run.clock()))
    return hooks


def _compile(run: Run, resuming: bool, quiet: bool, run_dir: Any) -> tuple[Any, Callable[[Any], ChunkOutput]]:
    """Compiles the chunk for the run's state; returns ``(executable, unpack)``."""
    program, plan = run.program, run.plan
    packed_chunk, unpack = pack_output(make_chunk(program.agent.update, plan.updates_per_chunk, program.axis_name))
    chunk_fn = program.map_chunk(packed_chunk)
    if not quiet:
        print(_header(run, resuming, run_dir), flush=True)
        num_devices, platform = program.parallel.num_devices, program.parallel.devices[0].platform
        if num_devices > 1 and platform == "cpu":
            # A 2-device PPO CartPole run on a 2-core VM was 3x slower than 1 device (issue 16), with no hint why.
            print(f"note: the {num_devices} CPU devices are fake devices sharing this machine's cores: expect the "
                  f"run to be slower than on 1 device (several CPU devices test a multi-device setup, they do not "
                  f"speed it up)", flush=True)
    t0 = time.perf_counter()
    compiled = chunk_fn.lower(run.state).compile()
    run.timings.update({
        "compile_s": time.perf_counter() - t0, "compute_s": 0.0, "host_wait_s": 0.0, "logging_s": 0.0,
        "checkpoint_s": 0.0, "eval_s": 0.0, "agree_s": 0.0,
        "num_chunks": plan.num_chunks, "updates_per_chunk": plan.updates_per_chunk, "num_updates": plan.num_updates,
        "total_env_steps": plan.total_env_steps, "start_chunk": run.start_chunk, "launched_ahead": 0, "rollbacks": 0})
    return compiled, unpack


def _header(run: Run, resuming: bool, run_dir: Any) -> str:
    """The line printed before compiling: what trains where, on which devices, and the plan."""
    program, plan, config = run.program, run.plan, run.config
    num_devices, platform = program.parallel.num_devices, program.parallel.devices[0].platform
    done = f", from chunk {run.start_chunk + 1}" if resuming else ""
    return (f"rljax: {'resuming' if resuming else 'training'} {type(config).__name__.removesuffix('Config')} on "
            f"{config.env}" + (f" ({program.size} members)" if program.isolated else "")
            + f", {num_devices} {platform} device{'s' if num_devices > 1 else ''}, "
            + (f"run directory {run_dir}" if run_dir is not None else "no run directory (in memory)")
            + f"; plan: {plan.num_chunks} chunks x {plan.updates_per_chunk} updates x {plan.env_steps_per_update} "
            f"env steps = {plan.total_env_steps:,} env steps" + (" per member" if program.isolated else "")
            + f"{done}; compiling ...")


def _close(hooks: list[Any], run: Run) -> None:
    """Closes every hook, the last first (a checkpoint commits before the metrics files close); an
    error in one does not keep the others open, and the first error is raised after all closed."""
    error: BaseException | None = None
    for hook in reversed(hooks):
        try:
            if hasattr(hook, "close"):
                hook.close(run)
        except BaseException as err:  # noqa: BLE001 - re-raised below, once every hook is closed
            error = error or err
    if error is not None:
        raise error


def _first_result(hooks: list[Any], method: str, *args: Any) -> int | None:
    """Calls ``method`` of each hook that has it, in order, until one returns a chunk to continue from."""
    for hook in hooks:
        fn = getattr(hook, method, None)
        if fn is not None:
            next_chunk = fn(*args)
            if next_chunk is not None:
                return next_chunk
    return None


def _host_loop(run: Run, compiled: Any, unpack: Callable[[Any], ChunkOutput], hooks: list[Any],
               wall: Callable[[], float]) -> str | None:
    """Runs chunks ``run.start_chunk ..`` through the hooks; returns what stopped it early, or None.

    A chunk is launched before the previous one's output is read whenever nothing needs that
    chunk's state on the host (no hook is due, no stop asked): the host's logging and the next
    launch then overlap the device's work. Programs over several CPU devices always wait, which
    avoids XLA's CPU collective-rendezvous deadlock between programs.
    """
    from rljax.runtime import distributed

    guard, plan, timings = run.guard, run.plan, run.timings
    launch_ahead = run.program.parallel.can_launch_ahead and not any(
        getattr(h, "needs_every_state", False) for h in hooks)
    t_done, c = -math.inf, run.start_chunk
    guard.agree()  # several processes: a signal during set-up or compilation stops all of them
    preempted = guard.signal_name if guard.requested else None
    for hook in hooks:
        if hasattr(hook, "start"):
            hook.start(run)
    while preempted is None and c < plan.num_chunks:
        run.phase = f"computing chunk {c} (the host waits for the device)"
        if run.ahead is None:
            t_launch = time.perf_counter()
            run.state, out = compiled(run.state)
        else:
            (run.state, out, t_launch), run.ahead = run.ahead, None
        last = c == plan.num_chunks - 1
        if launch_ahead and not (last or guard.requested or any(h.due(run, c, last) for h in hooks
                                                                 if hasattr(h, "due"))):
            run.ahead = (*compiled(run.state), time.perf_counter())
            timings["launched_ahead"] += 1
        t_wait = time.perf_counter()
        out = unpack(distributed.fetch(run.program.first_device(out)))  # waits for chunk c
        if run.ahead is None:
            jax.block_until_ready(run.state)
        t_agree = time.perf_counter()
        guard.agree()
        timings["agree_s"] += time.perf_counter() - t_agree
        # Device time of chunk c: from its launch, or from the previous chunk's end when it was queued behind it.
        now = time.perf_counter()
        chunk_s, t_done = now - max(t_launch, t_done), now
        timings["compute_s"] += chunk_s
        timings["host_wait_s"] += now - t_wait
        run.phase = f"boundary of chunk {c}: hooks (logging, evaluation, checkpoint, ...)"
        t_log, eval_before = time.perf_counter(), timings["eval_s"]
        wall_s = wall()
        rows = [chunk_row(plan, c, member, wall_s, chunk_s) for member in run.program.split(out)]
        run.rows.append(rows[0])
        for member_rows, row in zip(run.member_rows, rows):
            member_rows.append(row)
        for hook in hooks:
            if hasattr(hook, "record"):
                hook.record(run, c, rows)
        timings["logging_s"] += time.perf_counter() - t_log - (timings["eval_s"] - eval_before)
        next_chunk = _first_result(hooks, "react", run, c, rows)
        if next_chunk is None and run.ahead is None:  # the state of chunk c is the current one
            next_chunk = _first_result(hooks, "boundary", run, c, rows, last)
        if next_chunk is not None:
            c = next_chunk
            continue
        if run.ahead is None and guard.requested and not last:
            preempted = guard.signal_name
        c += 1
    return preempted
