"""The training loop: compiled chunks of K updates, driven by a thin host loop.

Everything inside a chunk (rollouts, targets, every epoch and minibatch of K updates) is one compiled
program with the train state donated. Between chunks the host reads a fixed-size set of scalars,
checks the run's health (params in sync across devices, finite losses), logs, and (with
``rljax.checkpoint``) saves. One compile per run: the chunk's input and output states have the same
shapes, dtypes and shardings, so the compiled executable is reused for every chunk.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rljax.agents import build_agent
from rljax.agents.base import Agent, psum
from rljax.parallel import DataParallel, first_device, run_once, serial_map
from rljax.rollout import EpisodeSummary

__all__ = ["ChunkOutput", "Plan", "Population", "plan_updates", "make_chunk", "TrainResult", "DesyncError", "train",
           "build_agent", "ConfigMismatchError", "RESUMABLE_FIELDS", "check_resume_config", "NonFiniteError",
           "nonfinite_count"]


class DesyncError(RuntimeError):
    """Params differ across devices: the data-parallel run is no longer one run."""


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


@dataclasses.dataclass(frozen=True)
class Population:
    """The members of a sweep, trained together as one compiled program (vmapped over members).

    Built by :mod:`rljax.sweep`; every member is a single-device run of the same config except for
    its traced hyperparameters, env params and seed.

    Attributes:
        seeds: one seed per member, ``[P]``.
        hparams: the algorithm's hyperparameter pytree with leaves ``[P]``.
        env_params: env params with leaves ``[P]``.
        names: one directory name per member (``RUN_DIR/members/<name>``).
        configs: one resolved config per member (written to its ``config.json``).
        num_devices: devices the population is split over (``P`` must be a multiple).
        pbt: a :class:`rljax.pbt.PBTSpec` to evolve the population during training, or None.
    """

    seeds: tuple[int, ...]
    hparams: Any
    env_params: Any
    names: tuple[str, ...]
    configs: tuple[Any, ...]
    num_devices: int = 1
    pbt: Any = None

    @property
    def size(self) -> int:
        return len(self.seeds)


# The automatic chunk size: about AUTO_CHUNKS chunks of at most MAX_AUTO_CHUNK updates.
AUTO_CHUNKS = 10
MAX_AUTO_CHUNK = 200


def plan_updates(total_timesteps: int, env_steps_per_update: int, updates_per_chunk: int = 0) -> Plan:
    """Cuts ``total_timesteps`` into whole chunks of whole updates.

    The run does ``n = total_timesteps // env_steps_per_update`` updates (as PureJaxRL does). With
    ``updates_per_chunk = 0`` the chunk size K aims at ~10 chunks of at most 200 updates: each
    chunk boundary costs the host a few milliseconds (more on virtual machines whose idle memory is
    slow to touch again), so chunks of well under a second would show in the run time, while
    longer runs still log a row at least every 200 updates. When K does not divide n, a divisor
    of n within a factor 2 of K is preferred; otherwise n is rounded up to a whole number of
    chunks (fewer than one update per chunk extra), so every chunk runs the same compiled program.
    """
    if env_steps_per_update <= 0:
        raise ValueError(f"env_steps_per_update must be positive, got {env_steps_per_update}")
    n = max(1, total_timesteps // env_steps_per_update)
    target = updates_per_chunk if updates_per_chunk > 0 else max(1, min(MAX_AUTO_CHUNK, math.ceil(n / AUTO_CHUNKS)))
    target = min(target, n)
    if n % target and updates_per_chunk == 0:
        divisors = [d for d in range(max(1, (target + 1) // 2), min(n, 2 * target) + 1) if n % d == 0]
        if divisors:
            target = min(divisors, key=lambda d: (abs(d - target), -d))
    num_chunks = math.ceil(n / target)
    k = math.ceil(n / num_chunks)
    return Plan(num_updates=num_chunks * k, updates_per_chunk=k, num_chunks=num_chunks,
                env_steps_per_update=env_steps_per_update)


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


@dataclasses.dataclass
class TrainResult:
    """What :func:`train` returns.

    Attributes:
        state: the final train state (leading ``[num_devices]`` axis when data-parallel).
        rows: the metrics rows, one per chunk, as written to ``metrics.jsonl``.
        run_dir: the run directory, or None when the run was not tracked.
        timings: seconds spent compiling, computing and logging, and the plan.
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
    def final_return(self) -> float:
        """Mean episode return over the last few chunks that finished episodes (NaN if none)."""
        returns = [r["episode_return_mean"] for r in self.rows if r.get("episode_return_mean") is not None]
        return float(np.mean(returns[-2:])) if returns else float("nan")


def _row(plan: Plan, chunk_index: int, out: ChunkOutput, wall: float, chunk_s: float) -> dict[str, Any]:
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


def population_init(agent: Any, num_updates: int) -> Callable[[Any, Any, Any], Any]:
    """The jitted initialiser of a population: ``(keys [P], hparams [P], env_params [P]) -> state [P]``.

    Members are initialised one after another (:func:`rljax.parallel.serial_map`), never vmapped: a
    vmapped network init can deadlock XLA's CPU thread pool.
    """
    return jax.jit(lambda *xs: serial_map(lambda k, hp, ep: agent.init(k, 0, num_updates, hp, ep), *xs))


RESUMABLE_FIELDS = ("total_timesteps", "on_nonfinite", "max_rollbacks", "rollback_lr_factor")
"""Config fields that may differ when resuming (extending a run, changing how divergence is met);
every other difference is an error."""


class NonFiniteError(FloatingPointError):
    """The run diverged (a NaN/inf loss or train state) and ``on_nonfinite`` could not recover it."""


class ConfigMismatchError(ValueError):
    """A resumed run's config differs from the saved one in fields that change the run."""


def check_resume_config(saved: dict[str, Any], config: Any) -> None:
    """Raises :class:`ConfigMismatchError` naming every field that differs from the saved config,
    except :data:`RESUMABLE_FIELDS`."""
    from rljax.tracking import config_to_dict

    new = config_to_dict(config)
    diffs = [f"{k}: saved {saved.get(k)!r}, now {new.get(k)!r}" for k in sorted(set(saved) | set(new))
             if saved.get(k) != new.get(k) and k not in RESUMABLE_FIELDS]
    if diffs:
        raise ConfigMismatchError(
            "cannot resume with a different config; differing fields: " + "; ".join(diffs)
            + f". Fields that may change on resume: {', '.join(RESUMABLE_FIELDS)}")


def train(config: Any, env: Any = None, env_params: Any = None, *, run_dir: str | os.PathLike | None = None,
          resume: bool = False, checkpoint_every: int = 0, checkpoint_interval_s: float = 60.0,
          keep_checkpoints: int = 3, checkpoints: bool = True, quiet: bool = False,
          tensorboard: bool = True, handle_signals: bool = True,
          on_chunk: Callable[[int, Any, dict[str, Any]], None] | None = None,
          population: Population | None = None) -> TrainResult:
    """Trains an agent; the Python entry point behind every experiment module.

    Args:
        config: an algorithm config, e.g. :class:`rljax.agents.ppo.PPOConfig`. Its
            ``on_nonfinite``, ``max_rollbacks`` and ``rollback_lr_factor`` say how a diverged run
            is met (see Raises).
        env: an env object (rljax or gymnax contract, e.g. one you just wrote); when None,
            ``envs.make(config.env)``.
        env_params: its params; ``env.default_params`` when None.
        run_dir: where to write ``config.json``, ``manifest.json``, ``metrics.jsonl``, ``tb/`` and
            ``checkpoints/``; None keeps the run in memory (no checkpoints; rows are still returned).
            The directory is locked for the run (:mod:`rljax.runlock`): a second run or resume on
            it is refused while this one lives.
        resume: continue the run in ``run_dir`` from its newest valid checkpoint. The config must
            match the checkpoint's except for :data:`RESUMABLE_FIELDS`. A run that stopped before
            its first checkpoint committed starts over from scratch (its earlier metrics rows are
            kept in ``metrics.superseded.jsonl``).
        checkpoint_every: save every this many chunks; 0 (the default) saves instead when
            ``checkpoint_interval_s`` seconds have passed since the last save. Either way a
            checkpoint is always saved after the last chunk and on preemption.
        checkpoint_interval_s: the time-based interval used when ``checkpoint_every`` is 0.
        keep_checkpoints: how many recent checkpoints to keep.
        checkpoints: False disables checkpointing entirely (the run cannot be resumed).
        quiet: no progress lines.
        tensorboard: write tensorboard events (with ``run_dir``).
        handle_signals: turn SIGTERM/SIGINT into a clean stop at the next chunk boundary (save,
            flush, return with ``result.preempted``); a signal during set-up or compilation stops
            the run before its first chunk.
        on_chunk: called after each chunk as ``on_chunk(chunk_index, state, row)``; returning True
            stops the run there as a preemption would (saved, ``result.preempted == "on_chunk"``).
        population: train a sweep's members together (see :mod:`rljax.sweep`): the state gets a
            leading ``[P]`` axis, each member logs to ``RUN_DIR/members/<name>``, and a member whose
            loss or state diverges is reported, not fatal.

    Returns:
        A :class:`TrainResult`.

    Raises:
        DesyncError: params diverged across devices.
        NonFiniteError: a loss or the train state became NaN/inf (``nonfinite_state`` in the row
            counts the bad values) and ``config.on_nonfinite`` is ``"stop"``, or ``"rollback"`` gave
            up after ``config.max_rollbacks`` rollbacks. A rollback restores the newest checkpoint
            (or the initial state when none was saved), multiplies every learning rate by
            ``config.rollback_lr_factor``, moves the rows after it to ``metrics.superseded.jsonl``
            and records an incident in the manifest; rows carry the ``rollbacks`` so far. No
            checkpoint is ever written from a non-finite state.
        ConfigMismatchError: ``resume`` with a config that changes the run.
        rljax.checkpoint.NoCheckpointError: ``resume`` but every checkpoint in ``run_dir`` is
            unreadable.
        rljax.runlock.RunLockedError: another live process holds ``run_dir``.
    """
    import contextlib

    if not isinstance(checkpoint_every, int) or isinstance(checkpoint_every, bool) or checkpoint_every < 0:
        raise ValueError(f"checkpoint_every must be an integer >= 0 (0: every checkpoint_interval_s), "
                         f"got {checkpoint_every!r}")
    if not (isinstance(checkpoint_interval_s, (int, float)) and math.isfinite(checkpoint_interval_s)
            and checkpoint_interval_s > 0):
        raise ValueError(f"checkpoint_interval_s must be a finite number > 0, got {checkpoint_interval_s!r}")
    if not isinstance(keep_checkpoints, int) or isinstance(keep_checkpoints, bool) or keep_checkpoints < 1:
        raise ValueError(f"keep_checkpoints must be an integer >= 1, got {keep_checkpoints!r}")
    if resume and run_dir is None:
        raise ValueError("resume=True needs the run_dir of the run to continue")
    if resume and not pathlib.Path(run_dir).is_dir():
        raise FileNotFoundError(f"{run_dir} does not exist; nothing to resume")
    # The run options: saved with the run (checkpoint meta, manifest) and kept by a CLI resume.
    options = dict(checkpoint_every=checkpoint_every, checkpoint_interval_s=float(checkpoint_interval_s),
                   keep_checkpoints=keep_checkpoints, checkpoints=checkpoints, tensorboard=tensorboard)
    from rljax.checkpoint import PreemptionGuard

    with contextlib.ExitStack() as stack:
        if run_dir is not None:
            from rljax.runlock import RunLock

            stack.enter_context(RunLock(run_dir))
        guard = stack.enter_context(PreemptionGuard(handle_signals))
        return _train(config, env, env_params, run_dir=run_dir, resume=resume, options=options, quiet=quiet,
                      on_chunk=on_chunk, population=population, guard=guard)


def _train(config: Any, env: Any, env_params: Any, *, run_dir: Any, resume: bool, options: dict[str, Any],
           quiet: bool, on_chunk: Any, population: Population | None, guard: Any) -> TrainResult:
    """:func:`train` inside its run-directory lock and signal guard."""
    import warnings

    from rljax.checkpoint import Checkpointer, NonFiniteStateError
    from rljax.rundir import RunDirError, checkpoint_steps, newest_checkpoint_meta, read_json
    from rljax.tracking import Tracker, config_to_dict, format_progress

    t_start = time.perf_counter()
    checkpoint_every = options["checkpoint_every"]
    if env is None:
        import envs

        env, default = envs.make(config.env)
        env_params = default if env_params is None else env_params
    elif env_params is None:
        env_params = env.default_params

    restart = False  # resume of a run that has no committed checkpoint: start it over
    if resume:
        root = pathlib.Path(run_dir)
        newest = newest_checkpoint_meta(root)
        if newest is not None:  # before restoring: a changed config must not make every step look unreadable
            check_resume_config(newest[1]["config"], config)
        if not checkpoint_steps(root):
            config_path = root / "config.json"
            if not config_path.exists():
                raise FileNotFoundError(f"{run_dir} is not a run directory (no config.json and no checkpoint); "
                                        f"nothing to resume")
            try:
                saved_config = read_json(config_path)
            except RunDirError:
                saved_config = None
            if isinstance(saved_config, dict):
                check_resume_config(saved_config, config)
            restart = True
            warnings.warn(f"{run_dir} has no committed checkpoint (the run stopped before its first save): "
                          f"starting it over from scratch; its earlier metrics rows move to "
                          f"metrics.superseded.jsonl", stacklevel=3)

    if population is None:
        par = DataParallel(config.num_devices, config.backend)
        agent = build_agent(config, env, env_params, par.axis_name)
        key = jax.random.key(config.seed)

        def init_state(num_updates: int) -> Any:
            return par.init(lambda k, i: agent.init(k, i, num_updates, config.hyperparams(), env_params), key)
    else:
        if config.num_devices != 1:
            raise ValueError(f"sweep members are single-device runs: num_devices={config.num_devices}; split "
                             f"the population over devices instead (the sweep's --devices)")
        par = DataParallel(population.num_devices, "shard_map")
        agent = build_agent(config, env, env_params, None)
        keys = jax.vmap(jax.random.key)(jnp.asarray(population.seeds, jnp.uint32))

        def init_state(num_updates: int) -> Any:
            members = run_once(population_init(agent, num_updates), keys, population.hparams,
                               population.env_params)
            return par.place_population(members)

    if run_dir is not None and not resume and any((pathlib.Path(run_dir) / "checkpoints").glob("*")):
        raise FileExistsError(f"run directory {str(run_dir)!r} already holds checkpoints; resume it "
                              f"(`rljax resume {run_dir}`) or choose a new run directory")
    checkpointer = (Checkpointer(run_dir, keep=options["keep_checkpoints"])
                    if run_dir is not None and (options["checkpoints"] or (resume and not restart)) else None)
    saved_meta: dict[str, Any] | None = None
    rollbacks = 0
    if resume and not restart:
        # The chunk size is part of the compiled program: keep the saved one so the continuation
        # runs the same program (bit-exact), even when total_timesteps was extended.
        probe = plan_updates(config.total_timesteps, agent.env_steps_per_update, config.updates_per_chunk)
        state, saved_meta, _ = checkpointer.restore(init_state(probe.num_updates))
        if isinstance(saved_meta.get("config"), dict):  # the checkpoint is the record of the run
            check_resume_config(saved_meta["config"], config)
        rollbacks = int(saved_meta.get("rollbacks", 0))
        k_saved = int(saved_meta["plan"]["updates_per_chunk"])
        plan = plan_updates(config.total_timesteps, agent.env_steps_per_update, k_saved)
        if plan.updates_per_chunk != k_saved:  # the new total is below one saved chunk
            plan = Plan(num_updates=k_saved * math.ceil(plan.num_updates / k_saved), updates_per_chunk=k_saved,
                        num_chunks=math.ceil(plan.num_updates / k_saved), env_steps_per_update=agent.env_steps_per_update)
        if plan.num_updates != int(saved_meta["plan"]["num_updates"]):
            state = state.replace(num_updates=jax.device_put(
                jnp.full_like(state.num_updates, plan.num_updates), state.num_updates.sharding))
        start_chunk = int(saved_meta["chunk_index"]) + 1
    else:
        plan = plan_updates(config.total_timesteps, agent.env_steps_per_update, config.updates_per_chunk)
        state = init_state(plan.num_updates)
        start_chunk = 0
    if not options["checkpoints"]:
        if checkpointer is not None:
            checkpointer.close()
        checkpointer = None

    # The run directory's files exist before compiling, so a run stopped during compilation can be
    # resumed (from scratch) like any other.
    trackers: list[Any] = []
    wall_offset = 0.0
    if run_dir is not None:
        resume_steps = None if not resume else (0 if restart else int(saved_meta["env_steps"]))
        extra = {"plan": dataclasses.asdict(plan), "algorithm": type(config).__name__, "run_options": options}
        saved_rows = (saved_meta or {}).get("rows") or [None] * (population.size if population else 1)
        if population is None:
            trackers.append(Tracker(run_dir, config, seed=config.seed, tensorboard=options["tensorboard"],
                                    quiet=quiet, total_env_steps=plan.total_env_steps, resume=resume,
                                    resume_env_steps=resume_steps, manifest_extra=extra,
                                    recovered_rows=[r for r in saved_rows[:1] if r]))
        else:
            for i, name in enumerate(population.names):
                trackers.append(Tracker(pathlib.Path(run_dir) / "members" / name, population.configs[i],
                                        seed=population.seeds[i], tensorboard=options["tensorboard"], quiet=True,
                                        total_env_steps=plan.total_env_steps, resume=resume,
                                        resume_env_steps=resume_steps,
                                        manifest_extra={**extra, "sweep_member": i, "sweep_dir": str(run_dir)},
                                        recovered_rows=[r for r in saved_rows[i:i + 1] if r]))
        if saved_meta is not None:
            wall_offset = float(saved_meta.get("wall_time_s", 0.0))

    packed_chunk, unpack_output = pack_output(
        make_chunk(agent.update, plan.updates_per_chunk, par.axis_name if population is None else None))
    if population is None:
        chunk_fn = par.map(packed_chunk, donate=True)
    else:
        chunk_fn = par.map_population(jax.vmap(packed_chunk), donate=True)

    if not quiet:
        what = "resuming" if resume and not restart else "training"
        print(f"rljax: {what} {type(config).__name__.removesuffix('Config')} on {config.env}"
              + (f" ({population.size} members)" if population is not None else "")
              + (f", run directory {run_dir}" if run_dir is not None else "")
              + f"; compiling {plan.updates_per_chunk} updates per chunk ...", flush=True)
    t0 = time.perf_counter()
    compiled = chunk_fn.lower(state).compile()
    timings: dict[str, Any] = {
        "compile_s": time.perf_counter() - t0, "compute_s": 0.0, "logging_s": 0.0, "checkpoint_s": 0.0,
        "num_chunks": plan.num_chunks, "updates_per_chunk": plan.updates_per_chunk,
        "num_updates": plan.num_updates, "total_env_steps": plan.total_env_steps, "start_chunk": start_chunk,
        "launched_ahead": 0, "rollbacks": 0}
    last_save = time.perf_counter()

    def save_due(chunk_index: int) -> bool:
        """Whether the cadence asks for a checkpoint after this chunk (the last chunk and a stop
        always save)."""
        if checkpointer is None:
            return False
        if checkpoint_every:
            return (chunk_index + 1) % checkpoint_every == 0
        return time.perf_counter() - last_save >= options["checkpoint_interval_s"]

    def save(chunk_index: int, member: list[dict[str, Any]]) -> None:
        from rljax.tracking import _scalar

        t_ckpt = time.perf_counter()
        row = member[0]
        meta = {"chunk_index": chunk_index, "env_steps": row["env_steps"], "updates": row["updates"],
                "wall_time_s": row["wall_time_s"], "plan": dataclasses.asdict(plan),
                "algorithm": type(config).__name__, "config": config_to_dict(config), "run_options": options,
                "rollbacks": rollbacks, "rows": [{k: _scalar(v) for k, v in r.items()} for r in member]}
        if population is None:
            checkpointer.save(row["env_steps"], state, meta)
        else:  # a diverged member is that member's result; it must not stop the others' checkpoints
            checkpointer.save(row["env_steps"], state, meta, nonfinite_ok=True)
        timings["checkpoint_s"] += time.perf_counter() - t_ckpt

    pbt_step = None
    if population is not None and population.pbt is not None:
        import functools

        from rljax.pbt import exploit_explore

        pbt_step = jax.jit(functools.partial(exploit_explore, spec=population.pbt), donate_argnums=0)
        pbt_log = None if run_dir is None else pathlib.Path(run_dir) / "pbt.jsonl"
        if pbt_log is not None and resume and pbt_log.exists():  # drop steps after the restored chunk
            kept = [line for line in pbt_log.read_text().splitlines()
                    if line.strip() and json.loads(line)["chunk"] < start_chunk]
            pbt_log.write_text("".join(line + "\n" for line in kept))

    def evolve(state: Any, chunk_index: int, member: list[dict[str, Any]]) -> Any:
        from rljax.pbt import scores_from_rows

        scores = scores_from_rows(member)
        new, source = pbt_step(state, jnp.asarray(scores), jnp.int32(chunk_index))
        new = par.place_population(new)
        source = np.asarray(jax.device_get(source))
        jax.block_until_ready(new)
        if pbt_log is not None:
            hp = jax.device_get(new.hparams)
            record = {"chunk": chunk_index, "env_steps": member[0]["env_steps"],
                      "scores": [None if not np.isfinite(x) else float(x) for x in scores],
                      "copies": {population.names[i]: population.names[int(j)]
                                 for i, j in enumerate(source) if int(j) != i},
                      "hparams": {k: np.asarray(getattr(hp, k)).tolist() for k in sorted(population.pbt.fields)}}
            with open(pbt_log, "a") as f:
                f.write(json.dumps(record) + "\n")
        return new

    def roll_back(chunk_index: int, row: dict[str, Any], reason: str) -> int:
        """Meets a diverged chunk as ``config.on_nonfinite`` says; returns the chunk to run next."""
        nonlocal state, rollbacks
        mode = getattr(config, "on_nonfinite", "stop")
        limit = getattr(config, "max_rollbacks", 0)
        where = f"after chunk {chunk_index} (env step {row['env_steps']:,})"
        incident = {"kind": "nonfinite", "chunk": chunk_index, "env_steps": row["env_steps"], "reason": reason}
        if mode != "rollback" or rollbacks >= limit:
            for tracker in trackers:
                tracker.record_incident({**incident, "action": "stop"})
            newest = f" The newest checkpoint ({checkpointer.steps()[-1]:,} env steps) is intact." if (
                checkpointer is not None and checkpointer.steps()) else ""
            if mode == "rollback":
                raise NonFiniteError(f"{reason} {where}, and {rollbacks} rollback(s) (max_rollbacks={limit}) did not "
                                     f"help: giving up.{newest} Lower the learning rate or look for non-finite "
                                     f"observations or rewards in the env")
            raise NonFiniteError(f"{reason} {where}: the run diverged.{newest} on_nonfinite='rollback' restores the "
                                 f"last good checkpoint with a lower learning rate instead of stopping")
        rollbacks += 1
        timings["rollbacks"] += 1
        if checkpointer is not None:
            checkpointer.wait()
        if checkpointer is not None and checkpointer.steps():
            state, meta, _ = checkpointer.restore(state)
            back_chunk, back_steps = int(meta["chunk_index"]), int(meta["env_steps"])
            recovered = meta.get("rows") or []
            state = _scale_learning_rates(state, config.rollback_lr_factor ** (rollbacks - int(meta.get("rollbacks", 0))))
        else:
            state = init_state(plan.num_updates)
            back_chunk, back_steps, recovered = -1, 0, []
            state = _scale_learning_rates(state, config.rollback_lr_factor ** rollbacks)
        record = {**incident, "action": "rollback", "rollback": rollbacks, "to_env_steps": back_steps,
                  "lr_factor": config.rollback_lr_factor ** rollbacks}
        for tracker in trackers:
            tracker.rewind(back_steps, recovered[:1])
            tracker.record_incident(record)
        rows[:] = [r for r in rows if r["env_steps"] <= back_steps]
        warnings.warn(f"{reason} {where}: rolled back to env step {back_steps:,} with the learning rate scaled by "
                      f"{config.rollback_lr_factor ** rollbacks:g} (rollback {rollbacks} of at most {limit})",
                      stacklevel=4)
        return back_chunk + 1

    timings["setup_s"] = time.perf_counter() - t_start - timings["compile_s"]
    t_loop = time.perf_counter()
    rows: list[dict[str, Any]] = []
    member_rows: list[list[dict[str, Any]]] = [[] for _ in range(population.size if population else 0)]
    diverged: set[int] = set()
    preempted = guard.signal_name if guard.requested else None  # a signal during set-up or compilation
    try:
        # A chunk is launched before the previous one's metrics are read whenever nothing needs
        # that chunk's state on the host (no checkpoint, PBT step, on_chunk or stop is due):
        # the host's logging and the next launch then overlap the device's work. Programs over
        # several CPU devices always wait, which avoids XLA's CPU collective-rendezvous
        # deadlock between programs.
        launch_ahead = par.can_launch_ahead and on_chunk is None
        ahead: tuple[Any, Any, float] | None = None  # (state, out, launch time) of the next chunk
        t_done = -math.inf
        c = start_chunk
        while preempted is None and c < plan.num_chunks:
            if ahead is None:
                t_launch = time.perf_counter()
                state, out = compiled(state)
            else:
                state, out, t_launch = ahead
                ahead = None
            last = c == plan.num_chunks - 1
            pbt_due = pbt_step is not None and (c + 1) % population.pbt.interval == 0 and not last
            if launch_ahead and not (last or pbt_due or save_due(c) or guard.requested):
                t_next = time.perf_counter()
                ahead = (*compiled(state), t_next)
                timings["launched_ahead"] += 1
            out = unpack_output(jax.device_get(first_device(out, config.num_devices)))  # waits for chunk c
            if ahead is None:
                jax.block_until_ready(state)
            # Device time of chunk c: from its launch, or from the previous chunk's end when it
            # was queued behind it.
            now = time.perf_counter()
            chunk_s = now - max(t_launch, t_done)
            t_done = now
            timings["compute_s"] += chunk_s

            t_log = time.perf_counter()
            wall = wall_offset + time.perf_counter() - t_start
            if population is None:
                row = _row(plan, c, out, wall, chunk_s)
                _check_desync(row, c)
                row["rollbacks"] = rollbacks
                rows.append(row)
                member = [row]
            else:
                member = [_row(plan, c, jax.tree.map(lambda x: x[i], out), wall, chunk_s)
                          for i in range(population.size)]
                row = member[0]
                for i, r in enumerate(member):
                    member_rows[i].append(r)
                    if i not in diverged and _nonfinite_reason(r):
                        diverged.add(i)
                        warnings.warn(f"sweep member {population.names[i]} diverged after chunk {c}: "
                                      f"{_nonfinite_reason(r)}; the others go on", stacklevel=3)
                rows.append(row)
            for tracker, r in zip(trackers, member):
                tracker.log(r)
            if (population is not None or not trackers) and not quiet:
                shown = row if population is None else {**row, "sps": row["sps"] * population.size}
                print(format_progress(shown, plan.total_env_steps)
                      + (f"  ({population.size} members; steps per member, sps in all)"
                         if population is not None else ""), flush=True)
            timings["logging_s"] += time.perf_counter() - t_log
            reason = _nonfinite_reason(row) if population is None else None
            if reason:
                if ahead is not None:  # chunk c + 1 ran on the diverged state: discard it
                    state = ahead[0]
                    ahead = None
                    jax.block_until_ready(state)
                c = roll_back(c, row, reason)
                continue
            if on_chunk is not None and on_chunk(c, state, row):
                guard.request("on_chunk")
            if ahead is not None:
                c += 1
                continue  # chunk c + 1 is running; its boundary handles what became due

            if pbt_due:
                state = evolve(state, c, member)
            if checkpointer is not None and (last or guard.requested or save_due(c)):
                guard.finishing = guard.requested or last
                try:
                    save(c, member)
                except NonFiniteStateError as err:  # non-finite where the per-chunk count does not look
                    guard.finishing = False
                    c = roll_back(c, row, str(err))
                    continue
                last_save = time.perf_counter()
            if guard.requested and not last:
                preempted = guard.signal_name
            c += 1
    finally:
        guard.finishing = True
        try:
            if checkpointer is not None:
                t_ckpt = time.perf_counter()
                checkpointer.close()  # waits for the pending save to commit
                timings["checkpoint_s"] += time.perf_counter() - t_ckpt
        finally:
            for tracker in trackers:
                tracker.close()
    timings["loop_s"] = time.perf_counter() - t_loop
    timings["total_s"] = time.perf_counter() - t_start
    if preempted and not quiet:
        where = f"; resume with: rljax resume {run_dir}" if run_dir is not None else ""
        at = f"after env step {rows[-1]['env_steps']:,}: checkpoint saved" if rows else "before its first chunk"
        print(f"stopped by {preempted} {at}{where}", flush=True)
    return TrainResult(state=state, rows=rows, run_dir=None if run_dir is None else str(run_dir),
                       timings=timings, agent=agent, preempted=preempted,
                       member_rows=member_rows if population is not None else None)


def _check_health(row: dict[str, Any], chunk_index: int) -> None:
    """Raises :class:`DesyncError` or :class:`NonFiniteError` when ``row`` shows either."""
    _check_desync(row, chunk_index)
    reason = _nonfinite_reason(row)
    if reason:
        raise NonFiniteError(f"{reason} after chunk {chunk_index} (env step {row['env_steps']})")


def _nonfinite_reason(row: dict[str, Any]) -> str | None:
    """What in ``row`` shows a diverged run (a non-finite loss or train state), or None."""
    bad = [f"{k} is {v}" for k, v in row.items() if k.endswith("_loss") and (v is None or not math.isfinite(v))]
    count = row.get("nonfinite_state", 0.0)
    if count is None or not math.isfinite(count) or count > 0:
        bad.append(f"the train state holds {count} non-finite values")
    return "; ".join(bad) or None


def _scale_learning_rates(state: Any, factor: float) -> Any:
    """``state`` with every traced hyperparameter named ``*learning_rate*`` multiplied by ``factor``."""
    hp = state.hparams
    names = [n for n in hp.__dataclass_fields__ if "learning_rate" in n]
    return state.replace(hparams=hp.replace(**{n: getattr(hp, n) * jnp.float32(factor) for n in names}))


def _check_desync(row: dict[str, Any], chunk_index: int) -> None:
    desync = row.get("param_desync", 0.0)
    if desync != 0.0:
        raise DesyncError(
            f"params differ across devices after chunk {chunk_index} (checksum spread {desync!r}); "
            f"a data-parallel update must keep them identical: check that every gradient and "
            f"statistic is averaged over the device axis")
