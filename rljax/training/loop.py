"""The host loop: runs the compiled chunk program chunk by chunk and calls the boundary hooks.

A run's device work is one compiled program of K updates (:mod:`rljax.training.program`); this
module is the short host loop around it. :func:`train` sets a run up (its options:
:class:`~rljax.training.options.RunOptions`), compiles the chunk once, then for every chunk reads
back a fixed-size vector of scalars, turns it into one metrics row per member (:func:`chunk_row`)
and hands the rows to the boundary hooks (:class:`~rljax.training.hooks.base.Hook`, in this order):

* :class:`rljax.training.hooks.health.Health`: params in sync across devices, losses and state
  finite (stop or roll back);
* :class:`rljax.training.hooks.adapters.EvaluationHook`: the greedy policy's episodes every
  ``eval_interval`` chunks (the ``eval/*`` columns);
* :class:`rljax.training.hooks.video.Video`: a GIF of a greedy episode every ``video_interval`` env steps;
* :class:`rljax.training.hooks.observe.ChunkTiming`: the rows' per-chunk ``time/*`` and ``memory/*`` columns;
* :class:`rljax.training.hooks.halving.Halving`: a sweep's successive halving (its columns are logged);
* :class:`rljax.training.hooks.adapters.TrackingHook`: metrics rows, tensorboard and progress lines;
* :class:`rljax.training.hooks.watchdog.StallWatchdog`: a warning with every thread's stack when
  chunks stop finishing;
* :class:`rljax.training.hooks.adapters.OnChunk`: the caller's ``on_chunk`` callback;
* :class:`rljax.training.hooks.pbt.PBT`: exploit/explore of a sweep's population;
* :class:`rljax.training.hooks.checkpointing.Checkpointing`: the save cadence, the final save and
  the save on a stop.

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
import pathlib
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rljax.agents.base import Agent
from rljax.core.counters import Count
from rljax.core.wrappers import AGENT_RETURN
from rljax.training.hooks.base import Hook, Row, Run
from rljax.training.hooks.stragglers import PROCESS_TIMES
from rljax.store.tracking import FINAL_RETURN_CHUNKS
from rljax.training.options import RunOptions
from rljax.training.program import (ChunkOutput, Plan, Program, UpdateRows, check_not_shrunk, plan_updates,
                                    resume_plan)

__all__ = ["TrainResult", "chunk_row", "cpu_devices_note", "train", "update_rows"]


def _episode_columns(count: Any, return_sum: Any, length_sum: Any, components: dict[str, Any],
                     env_nonfinite: Any) -> Row:
    """The episode columns of a row from its episode sums (means are None when no episode ended)."""
    count = float(count)
    row: Row = {
        "episode_return_mean": float(return_sum) / count if count else None,
        "episode_length_mean": float(length_sum) / count if count else None,
        "episodes": int(count),
        "env_nonfinite": int(env_nonfinite),
    }
    for name, total in components.items():  # an env's reward terms; a multi-agent env's agents' returns
        key = name if name.startswith(AGENT_RETURN) else f"reward_components/{name}"
        row[key] = float(total) / count if count else None
    return row


def chunk_row(plan: Plan, chunk_index: int, out: ChunkOutput, wall: float, chunk_s: float) -> Row:
    """One member's metrics row for chunk ``chunk_index``: counters, throughput, the mean return and
    length of the episodes that finished in the chunk (None when none did), the NaN/inf values the
    env returned (``env_nonfinite``), reward components and the chunk's metrics."""
    ep = out.episodes
    updates = (chunk_index + 1) * plan.updates_per_chunk
    row: Row = {
        "env_steps": updates * plan.env_steps_per_update,
        "updates": updates,
        "wall_time_s": wall,
        "sps": plan.updates_per_chunk * plan.env_steps_per_update / max(chunk_s, 1e-9),
        **_episode_columns(ep.count, ep.return_sum, ep.length_sum, ep.components, ep.env_nonfinite),
    }
    row.update({k: float(v) for k, v in out.metrics.items()})
    return row


def update_rows(plan: Plan, chunk_index: int, rows: UpdateRows, log_every: int) -> list[Row]:
    """One member's finer rows of chunk ``chunk_index``, one per group of ``log_every`` updates
    (:class:`~rljax.training.program.UpdateRows`): ``env_steps`` and ``updates`` at the group's
    end, its episodes' means and its metrics' means (``metrics.jsonl``'s rows)."""
    first = chunk_index * plan.updates_per_chunk
    ep, out = rows.episodes, []
    for r in range(len(ep.count)):
        updates = first + min((r + 1) * log_every, plan.updates_per_chunk)
        row: Row = {"env_steps": updates * plan.env_steps_per_update, "updates": updates,
                    **_episode_columns(ep.count[r], ep.return_sum[r], ep.length_sum[r],
                                       {k: v[r] for k, v in ep.components.items()}, ep.env_nonfinite[r])}
        row.update({k: float(v[r]) for k, v in rows.metrics.items()})
        out.append(row)
    return out


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
        checkpoint_meta: what hooks keep in the checkpoints' meta, as the run ended (a halving
            sweep's schedule under ``"halving"``).
    """

    state: Any
    rows: list[Row]
    run_dir: str | None
    timings: dict[str, float]
    agent: Agent
    preempted: str | None = None
    member_rows: list[list[Row]] | None = None
    checkpoint_meta: dict[str, Any] = dataclasses.field(default_factory=dict)

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
        return float(np.mean(returns[-FINAL_RETURN_CHUNKS:])) if returns else float("nan")


def train(config: Any, env: Any = None, env_params: Any = None, *, options: RunOptions = RunOptions(),
          **unexpected: Any) -> TrainResult:
    """Trains an agent (or a sweep's population); the Python entry point behind every experiment.

    ``train(config, env, env_params, options=RunOptions(...))``. The env and its params stay
    beside the config, not in the options: together they are *what* is trained (the compiled
    program and every number it computes depend on them, and a resume must pass the same ones),
    while :class:`~rljax.training.options.RunOptions` says how the run is kept and watched.

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
        options: everything else (run directory, resume, checkpoints, logging, signals,
            ``on_chunk``, a sweep's population, the stall watchdog, determinism).

    Returns:
        A :class:`TrainResult`.

    Raises:
        TypeError: keyword arguments other than ``env``, ``env_params`` and ``options`` (the
            message says which belong in :class:`~rljax.training.options.RunOptions`), or
            ``options`` that is not a ``RunOptions``.
        rljax.training.hooks.health.DesyncError: params diverged across devices.
        rljax.training.hooks.health.NonFiniteError: a loss or the state became NaN/inf and could not be rolled back.
        rljax.store.rundir.ConfigMismatchError: ``resume`` with a config that changes the run.
        rljax.store.checkpoint.NoCheckpointError: ``resume`` but every checkpoint is unreadable.
        rljax.store.runlock.RunLockedError: another live process holds ``run_dir``.
    """
    from rljax.runtime import distributed
    from rljax.runtime.determinism import request_deterministic
    from rljax.store.rundir import removed_if_start_fails
    from rljax.store.runlock import RunLock
    from rljax.training.signals import PreemptionGuard

    _check_arguments(options, unexpected)
    request_deterministic(options.deterministic)
    run_dir = options.run_dir
    if options.resume and not pathlib.Path(run_dir).is_dir():
        raise FileNotFoundError(f"{run_dir} does not exist; nothing to resume")
    with contextlib.ExitStack() as stack:
        if run_dir is not None and distributed.is_leader():
            stack.enter_context(removed_if_start_fails(None if options.resume else run_dir))
            stack.enter_context(RunLock(run_dir))
        # Several processes act on a signal only once all of them know of it (at the boundary's agreement).
        guard = stack.enter_context(PreemptionGuard(options.handle_signals,
                                                    deferred=distributed.process_count() > 1,
                                                    announce=not options.quiet and distributed.is_leader()))
        try:
            return _train(config, env, env_params, options, guard)
        except Exception as err:
            # Any collective, in set-up (restore, manifest) or in the loop, fails when a peer process
            # has died: say so (rljax.runtime.distributed.PeerLostError) rather than with XLA's words alone.
            if distributed.process_count() > 1:
                distributed.raise_if_peer_failure(err)
            raise


def _check_arguments(options: Any, unexpected: dict[str, Any]) -> None:
    """Raises ``TypeError`` for keyword arguments :func:`train` does not take (naming the ones that
    are :class:`RunOptions` fields, and how to pass them) and for ``options`` of the wrong type."""
    if unexpected:
        fields = {f.name for f in dataclasses.fields(RunOptions)}
        moved = [k for k in unexpected if k in fields]
        unknown = [k for k in unexpected if k not in fields]
        if unknown:
            raise TypeError(f"train() got unexpected keyword argument(s) {', '.join(map(repr, unknown))}; it takes "
                            f"config, env, env_params and options=RunOptions(...) (fields: {', '.join(sorted(fields))})")
        given = ", ".join(f"{k}={v!r}" for k, v in unexpected.items())
        raise TypeError(f"train() no longer takes {', '.join(moved)} as keyword arguments: they are RunOptions "
                        f"fields. Call train(config, env, env_params, options=RunOptions({given})) "
                        f"(rljax.RunOptions, rljax.training.options.RunOptions)")
    if not isinstance(options, RunOptions):
        raise TypeError(f"train(options=...) must be a rljax.RunOptions, got {type(options).__name__}")


def _train(config: Any, env: Any, env_params: Any, options: RunOptions, guard: Any) -> TrainResult:
    """:func:`train` inside its run-directory lock and signal guard: set up, compile, loop."""
    from rljax.core import registry as env_registry
    from rljax.runtime import distributed
    from rljax.store.rundir import resume_from_scratch, saved_env
    from rljax.training.hooks.health import Health

    t_start = time.perf_counter()
    run_dir, resume = options.run_dir, options.resume
    # The config records how to rebuild an env object (config.env). A resume whose config already
    # names the saved env keeps that name rather than recording the object again.
    config, env, env_params = env_registry.resolve_run(
        config, env, env_params, record=not (resume and saved_env(run_dir) == config.env), run_dir=run_dir)
    restart = resume and resume_from_scratch(run_dir, config)
    program = Program(config, env, env_params, options.population)
    if run_dir is not None and not resume and any((pathlib.Path(run_dir) / "checkpoints").glob("*")):
        raise FileExistsError(f"run directory {str(run_dir)!r} already holds checkpoints; resume it "
                              f"(`rljax resume {run_dir}`) or choose a new run directory")
    leader = distributed.is_leader()
    checkpointer = _checkpointer(options, leader, restore=resume and not restart)
    plan, state, start_chunk, rollbacks, saved_meta = _start(config, program, checkpointer,
                                                             restore=resume and not restart)
    if not options.checkpoints and checkpointer is not None:
        checkpointer.close()
        checkpointer = None
    run = Run(config, program, plan, state, guard, options, checkpointer=checkpointer,
              health=Health(config, program.isolated), start_chunk=start_chunk, rollbacks=rollbacks,
              member_rows=[[] for _ in range(program.size)], leader=leader,
              log_every=program.resolve_log_every(options.log_every, plan), saved_meta=saved_meta)
    guard.local_clock = lambda: time.perf_counter() - t_start
    run.clock = (lambda: guard.agreed_clock) if distributed.process_count() > 1 else guard.local_clock
    quiet = options.quiet or not run.leader
    run.tracking = _tracking(run, quiet, restart, saved_meta)
    hooks = _hooks(run)
    compiled, unpack = _compile(run, resume and not restart, quiet)
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
                       member_rows=run.member_rows if program.isolated else None,
                       checkpoint_meta=dict(run.checkpoint_meta))


def _checkpointer(options: RunOptions, leader: bool, restore: bool) -> Any:
    """The run's checkpointer: None without a run directory, or with checkpoints off and nothing to
    restore (with checkpoints off, a resume still restores, then closes it)."""
    from rljax.store.checkpoint import Checkpointer

    if options.run_dir is None or not (options.checkpoints or restore):
        return None
    # Several processes save their own shards of the state, so none holds the whole state at a save.
    return Checkpointer(options.run_dir, keep=options.keep_checkpoints, follower=not leader, sharded=True)


def _start(config: Any, program: Program, checkpointer: Any, restore: bool
           ) -> tuple[Plan, Any, int, int, dict[str, Any] | None]:
    """The run's ``(plan, initial state, first chunk, rollbacks so far, saved meta)``: restored from
    the newest checkpoint, or fresh (meta None)."""
    from rljax.store.rundir import check_resume_config

    steps_per_update = program.agent.env_steps_per_update
    if not restore:
        chunk = config.updates_per_chunk
        if not chunk and program.halving is not None:  # rungs fall on chunk boundaries: eta**3 chunks
            from rljax.training.hooks.halving import halving_chunk

            chunk = halving_chunk(config.total_timesteps // steps_per_update, program.halving.eta)
        plan = plan_updates(config.total_timesteps, steps_per_update, chunk)
        return plan, program.init_state(plan.num_updates), 0, 0, None
    # The chunk size is part of the compiled program: keep the saved one so the continuation runs
    # the same program (bit-exact), even when total_timesteps was extended.
    probe = plan_updates(config.total_timesteps, steps_per_update, config.updates_per_chunk)
    template = program.init_state(probe.num_updates)

    def adapt(leaves: list[Any], meta: dict[str, Any]) -> list[Any]:
        """A data-parallel checkpoint saved on another device count, re-dealt (rljax.training.elastic)."""
        from rljax.training.elastic import resplit

        saved = saved_num_devices(meta, config)
        if program.population is not None or saved == config.num_devices:
            return leaves  # a sweep's state is [P, ...] on any device count
        return resplit(leaves, template, saved, config.num_devices, config.seed, int(meta["chunk_index"]) + 1)

    checkpointer.adapt = adapt  # also for a rollback before the first save on the new layout
    state, meta, _ = checkpointer.restore(template)
    if isinstance(meta.get("config"), dict):  # the checkpoint is the record of the run
        check_resume_config(meta["config"], config)
    plan = resume_plan(config.total_timesteps, steps_per_update, int(meta["plan"]["updates_per_chunk"]))
    check_not_shrunk(plan, int(meta["chunk_index"]) + 1, int(meta["env_steps"]), str(checkpointer.directory.parent))
    if plan.num_updates != int(meta["plan"]["num_updates"]):
        total = Count.of(plan.num_updates)
        state = state.replace(num_updates=jax.tree.map(
            lambda old, word: jax.device_put(jnp.full_like(old, word), old.sharding), state.num_updates, total))
    return plan, state, int(meta["chunk_index"]) + 1, int(meta.get("rollbacks", 0)), meta


def saved_num_devices(meta: dict[str, Any] | None, config: Any) -> int:
    """The device count a checkpoint's run used (its meta's config; ``config``'s when not recorded)."""
    saved = (meta or {}).get("config")
    return int(saved.get("num_devices", config.num_devices)) if isinstance(saved, dict) else config.num_devices


def _tracking(run: Run, quiet: bool, restart: bool, saved_meta: dict[str, Any] | None) -> Any:
    """The run's metrics files and progress lines; the run directory's files exist before compiling,
    so a run stopped while compiling can be resumed."""
    from rljax.runtime import distributed
    from rljax.runtime.determinism import determinism_record
    from rljax.store.tracking import Tracking

    options, resume = run.options, run.options.resume
    manifest_extra = {"plan": {**dataclasses.asdict(run.plan), "log_every": run.log_every},
                      "algorithm": type(run.config).__name__,
                      "run_options": options.saved(), "determinism": determinism_record(options.deterministic)}
    if distributed.process_count() > 1:  # every host and device of the job
        manifest_extra["processes"] = distributed.process_record()
    saved = saved_num_devices(saved_meta, run.config)
    if saved_meta is not None and saved != run.config.num_devices:
        manifest_extra["layout"] = {"from_num_devices": saved, "num_devices": run.config.num_devices,
                                    "processes": distributed.process_count()}
        if not quiet and run.program.population is None:
            print(f"note: the run was saved on {saved} devices and continues on {run.config.num_devices}: its envs, "
                  f"replay and parameters are re-dealt and each device gets a new random stream, so it continues "
                  f"the same training but not bit for bit (docs/scale-out.md, Elastic resume)", flush=True)
    return Tracking(
        options.run_dir if run.leader else None, run.program, run.plan.total_env_steps, options.saved(), quiet=quiet,
        resume=resume, resume_env_steps=None if not resume else (0 if restart else int(saved_meta["env_steps"])),
        saved_rows=(saved_meta or {}).get("rows"), saved_lines=(saved_meta or {}).get("lines"),
        manifest_extra=manifest_extra)


def _hooks(run: Run) -> list[Hook]:
    """The boundary hooks of a run, in the order they see each chunk."""
    from rljax.policy.evaluate import Evaluation
    from rljax.training.hooks.adapters import EvaluationHook, OnChunk, TrackingHook
    from rljax.training.hooks.checkpointing import Checkpointing
    from rljax.training.hooks.observe import ChunkTiming
    from rljax.training.hooks.pbt import PBT
    from rljax.training.hooks.stragglers import Stragglers
    from rljax.training.hooks.watchdog import StallWatchdog

    options, program = run.options, run.program
    hooks: list[Hook] = [run.health]
    if run.config.eval_interval > 0:  # adds its columns to the rows before they are logged
        hooks.append(EvaluationHook(Evaluation(program, run.config.eval_interval, run.config.eval_episodes)))
    if options.video_interval > 0:  # before ChunkTiming: its seconds are in time/eval_s
        from rljax.training.hooks.video import Video

        hooks.append(Video(program, options.video_interval, options.run_dir if run.leader else None))
    # Device memory of this process's devices (several processes: the leader's stand for the run's).
    local = [d for d in program.parallel.devices if d.process_index == jax.process_index()]
    hooks.append(ChunkTiming(local, num_devices=len(program.parallel.devices)))  # adds its columns before logging
    hooks.append(Stragglers(options.straggler_margin, leader=run.leader))  # reads ChunkTiming's interval
    if program.halving is not None:  # before tracking: its columns are in the rows it logs
        from rljax.training.hooks.halving import META_KEY, Halving

        hooks.append(Halving(program.halving, program, program.population.trials, run.plan,
                             options.run_dir, (run.saved_meta or {}).get(META_KEY), leader=run.leader))
    hooks.append(TrackingHook(run.tracking))
    if run.leader and options.run_dir is not None and (options.wandb or options.mlflow):
        from rljax.store.trackers import Trackers, backends
        from rljax.training.hooks.adapters import TrackersHook

        hooks.append(TrackersHook(Trackers(backends(options.wandb, options.mlflow, options.run_dir),
                                           options.run_dir, program, start_timeout_s=options.tracker_timeout_s,
                                           stream=None if options.quiet else sys.stdout)))
    # Every process watches for its own stalls; only the leader writes reports to the run directory.
    watchdog = StallWatchdog(options.run_dir if run.leader else None, options.stall_factor,
                             options.stall_first_chunk_s, options.stall_min_s)
    hooks.append(watchdog)
    if options.on_chunk is not None:
        hooks.append(OnChunk(options.on_chunk))
    if program.pbt is not None:
        hooks.append(PBT(program.pbt, program, options.run_dir, options.resume, run.start_chunk, leader=run.leader))
    checkpointing = None
    if run.checkpointer is not None:
        checkpointing = Checkpointing(run.checkpointer, options.checkpoint_every, options.checkpoint_interval_s,
                                      nonfinite_ok=program.isolated, start=run.clock())
        if run.start_chunk:  # resumed: the restored checkpoint is the newest
            checkpointing.last_saved = run.start_chunk * run.plan.updates_per_chunk * run.plan.env_steps_per_update
        hooks.append(checkpointing)
    if run.leader and options.run_dir is not None:  # last: it sees the chunk's checkpoint
        from rljax.training.hooks.status import RunStatus

        status = RunStatus(options.run_dir, watchdog, checkpointing)
        status.begin(run)
        hooks.append(status)
    return hooks


def _compile(run: Run, resuming: bool, quiet: bool) -> tuple[Any, Callable[[Any], ChunkOutput]]:
    """Prints what is compiled (unless ``quiet``), compiles the chunk for the run's state and
    starts the run's timings; returns ``(executable, unpack)``."""
    program, plan = run.program, run.plan
    if not quiet:
        print(_header(run, resuming), flush=True)
        note = cpu_devices_note(program)
        if note:
            print(note, flush=True)
    t0 = time.perf_counter()
    compiled, unpack = program.compile(run.state, plan, run.log_every)
    run.timings.update({
        "compile_s": time.perf_counter() - t0, "compute_s": 0.0, "host_wait_s": 0.0, "logging_s": 0.0,
        "checkpoint_s": 0.0, "eval_s": 0.0, "agree_s": 0.0, "checkpoint_bytes": 0,
        "collective_bytes_per_update": program.collective_bytes_per_update(run.state),
        "num_chunks": plan.num_chunks, "updates_per_chunk": plan.updates_per_chunk, "num_updates": plan.num_updates,
        "total_env_steps": plan.total_env_steps, "start_chunk": run.start_chunk, "launched_ahead": 0, "rollbacks": 0})
    return compiled, unpack


def cpu_devices_note(program: Any) -> str | None:
    """The note for a data-parallel run on several fake CPU devices, or None.

    Its collectives make such a run slower than on one device. A sweep gets no note: its members are
    independent, so splitting them over the cores speeds it up
    (:func:`rljax.training.population.auto_devices`).
    """
    num_devices, platform = program.parallel.num_devices, program.parallel.devices[0].platform
    if num_devices < 2 or platform != "cpu" or program.isolated:
        return None
    return (f"note: the {num_devices} CPU devices are fake devices sharing this machine's cores: expect the run to be "
            f"slower than on 1 device (several CPU devices test a multi-device setup, they do not speed it up)")


def _header(run: Run, resuming: bool) -> str:
    """The line printed before compiling: what trains where, on which devices, and the plan."""
    program, plan, config, run_dir = run.program, run.plan, run.config, run.options.run_dir
    num_devices, platform = program.parallel.num_devices, program.parallel.devices[0].platform
    done = f", from chunk {run.start_chunk + 1}" if resuming else ""
    return (f"rljax: {'resuming' if resuming else 'training'} {type(config).__name__.removesuffix('Config')} on "
            f"{config.env}" + (f" ({program.size} members)" if program.isolated else "")
            + f", {num_devices} {platform} device{'s' if num_devices > 1 else ''}, "
            + (f"run directory {run_dir}" if run_dir is not None else "no run directory (in memory)")
            + f"; plan: {plan.num_chunks} chunks x {plan.updates_per_chunk} updates x {plan.env_steps_per_update} "
            f"env steps = {plan.total_env_steps:,} env steps" + (" per member" if program.isolated else "")
            + f"{done}; compiling ...")


def _close(hooks: list[Hook], run: Run) -> None:
    """Closes every hook, the last first (a checkpoint commits before the metrics files close); an
    error in one does not keep the others open, and the first error is raised after all closed."""
    error: BaseException | None = None
    for hook in reversed(hooks):
        try:
            hook.close(run)
        except BaseException as err:  # noqa: BLE001 - re-raised below, once every hook is closed
            error = error or err
    if error is not None:
        raise error


def _first_result(hooks: list[Hook], call: Callable[[Hook], int | None]) -> int | None:
    """``call(hook)`` for each hook in order, until one returns a chunk to continue from."""
    for hook in hooks:
        next_chunk = call(hook)
        if next_chunk is not None:
            return next_chunk
    return None


def _host_loop(run: Run, compiled: Any, unpack: Callable[[Any], ChunkOutput], hooks: list[Hook],
               wall: Callable[[], float]) -> str | None:
    """Runs chunks ``run.start_chunk ..`` through the hooks; returns what stopped it early, or None.

    A chunk is launched before the previous one's output is read whenever nothing needs that
    chunk's state on the host (no hook is due, no stop asked): the host's logging and the next
    launch then overlap the device's work. Programs over several CPU devices always wait, which
    avoids XLA's CPU collective-rendezvous deadlock between programs.
    """
    from rljax.runtime import distributed

    guard, plan, timings = run.guard, run.plan, run.timings
    launch_ahead = run.program.parallel.can_launch_ahead and not any(h.needs_every_state for h in hooks)
    t_done, c, agree_s = -math.inf, run.start_chunk, 0.0
    guard.agree((0.0,) * len(PROCESS_TIMES))  # several processes: a signal during set-up or compilation stops all
    t_agreed = time.perf_counter()
    guard.raise_if_interrupted()  # Ctrl-C twice during set-up or compilation
    preempted = guard.signal_name if guard.requested else None
    for hook in hooks:
        hook.start(run)
    while preempted is None and c < plan.num_chunks:
        guard.raise_if_interrupted()
        run.phase = f"computing chunk {c} (the host waits for the device)"
        if run.ahead is None:
            t_launch = time.perf_counter()
            run.state, out = compiled(run.state)
        else:
            (run.state, out, t_launch), run.ahead = run.ahead, None
        last = c == plan.num_chunks - 1
        if launch_ahead and not (last or guard.requested or any(h.due(run, c, last) for h in hooks)):
            run.ahead = (*compiled(run.state), time.perf_counter())
            timings["launched_ahead"] += 1
        t_wait = time.perf_counter()
        out = unpack(distributed.fetch(run.program.first_device(out)))  # waits for chunk c
        if run.ahead is None:
            jax.block_until_ready(run.state)
        # Device time of chunk c: from its launch, or from the previous chunk's end when it was queued behind it.
        now = time.perf_counter()
        chunk_s, t_done = now - max(t_launch, t_done), now
        timings["compute_s"] += chunk_s
        timings["host_wait_s"] += now - t_wait
        # Every process's times ride on the agreement (PROCESS_TIMES; the agreement's own wait is the
        # previous one's): the host work before chunk c's launch names a process the others waited for.
        guard.agree((max(0.0, t_launch - t_agreed), chunk_s, now - t_wait, agree_s))
        t_agreed = time.perf_counter()
        agree_s = t_agreed - now
        timings["agree_s"] += agree_s
        run.process_times = guard.process_times if distributed.process_count() > 1 else None
        run.phase = f"boundary of chunk {c}: hooks (logging, evaluation, checkpoint, ...)"
        t_log, eval_before = time.perf_counter(), timings["eval_s"]
        wall_s = wall()
        members = run.program.split(out)
        rows = [chunk_row(plan, c, member, wall_s, chunk_s) for member in members]
        run.update_rows = [update_rows(plan, c, member.updates, run.log_every) for member in members]
        run.rows.append(rows[0])
        for member_rows, row in zip(run.member_rows, rows):
            member_rows.append(row)
        for hook in hooks:
            hook.record(run, c, rows)
        timings["logging_s"] += time.perf_counter() - t_log - (timings["eval_s"] - eval_before)
        next_chunk = _first_result(hooks, lambda h: h.react(run, c, rows))
        if next_chunk is None and run.ahead is None:  # the state of chunk c is the current one
            next_chunk = _first_result(hooks, lambda h: h.boundary(run, c, rows, last))
        if next_chunk is not None:
            c = next_chunk
            continue
        if run.ahead is None and guard.requested and not last:
            preempted = guard.signal_name
        c += 1
    return preempted
