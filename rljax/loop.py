"""The training loop: compiled chunks of K updates, driven by a thin host loop.

Everything inside a chunk (rollouts, targets, every epoch and minibatch of K updates) is one compiled
program with the train state donated. Between chunks the host reads a fixed-size set of scalars,
checks the run's health (params in sync across devices, finite losses), logs, and (with
``rljax.checkpoint``) saves. One compile per run: the chunk's input and output states have the same
shapes, dtypes and shardings, so the compiled executable is reused for every chunk.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rljax.agents.base import Agent, psum
from rljax.parallel import DataParallel, first_device
from rljax.rollout import EpisodeSummary

__all__ = ["ChunkOutput", "Plan", "plan_updates", "make_chunk", "TrainResult", "DesyncError", "train",
           "build_agent"]


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


def plan_updates(total_timesteps: int, env_steps_per_update: int, updates_per_chunk: int = 0) -> Plan:
    """Cuts ``total_timesteps`` into whole chunks of whole updates.

    The run does ``n = total_timesteps // env_steps_per_update`` updates (as PureJaxRL does). With
    ``updates_per_chunk = 0`` the chunk size K aims at ~20 chunks of at most 100 updates. When K does
    not divide n, a divisor of n within a factor 2 of K is preferred; otherwise n is rounded up to
    a whole number of chunks (fewer than one update per chunk extra), so every chunk runs the same
    compiled program.
    """
    if env_steps_per_update <= 0:
        raise ValueError(f"env_steps_per_update must be positive, got {env_steps_per_update}")
    n = max(1, total_timesteps // env_steps_per_update)
    target = updates_per_chunk if updates_per_chunk > 0 else max(1, min(100, math.ceil(n / 20)))
    target = min(target, n)
    if n % target:
        divisors = [d for d in range(max(1, (target + 1) // 2), min(n, 2 * target) + 1) if n % d == 0]
        if divisors and updates_per_chunk == 0:
            target = min(divisors, key=lambda d: (abs(d - target), -d))
    num_chunks = math.ceil(n / target)
    k = math.ceil(n / num_chunks)
    return Plan(num_updates=num_chunks * k, updates_per_chunk=k, num_chunks=num_chunks,
                env_steps_per_update=env_steps_per_update)


def make_chunk(update: Callable[[Any], Any], num_updates: int, axis_name: str | None
               ) -> Callable[[Any], tuple[Any, ChunkOutput]]:
    """Scans ``update`` ``num_updates`` times and reduces its outputs to a :class:`ChunkOutput`."""

    def chunk(state: Any) -> tuple[Any, ChunkOutput]:
        state, outs = jax.lax.scan(lambda s, _: update(s), state, None, length=num_updates)
        metrics = {k: (jnp.max(v) if k == "param_desync" else jnp.mean(v)) for k, v in outs.metrics.items()}
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
    """

    state: Any
    rows: list[dict[str, Any]]
    run_dir: str | None
    timings: dict[str, float]
    agent: Agent

    @property
    def final_return(self) -> float:
        """Mean episode return over the last few chunks that finished episodes (NaN if none)."""
        returns = [r["episode_return_mean"] for r in self.rows if r.get("episode_return_mean") is not None]
        return float(np.mean(returns[-2:])) if returns else float("nan")


# Algorithm registry: config class name -> (module, make function). Imported lazily, so a run only
# loads the algorithm it uses.
ALGORITHMS: dict[str, tuple[str, str]] = {
    "PPOConfig": ("rljax.agents.ppo", "make_ppo"),
    "DQNConfig": ("rljax.agents.dqn", "make_dqn"),
    "SACConfig": ("rljax.agents.sac", "make_sac"),
}


def build_agent(config: Any, env: Any, env_params: Any, axis_name: str | None) -> Agent:
    """Dispatches on the config type to the algorithm's ``make_<algo>``."""
    import importlib

    entry = ALGORITHMS.get(type(config).__name__)
    if entry is None:
        raise TypeError(f"no algorithm for config type {type(config).__name__}; known: {sorted(ALGORITHMS)}")
    module = importlib.import_module(entry[0])
    if not isinstance(config, getattr(module, type(config).__name__)):
        raise TypeError(f"{type(config).__name__} is not {entry[0]}.{type(config).__name__}")
    return getattr(module, entry[1])(config, env, env_params, axis_name)


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


def train(config: Any, env: Any = None, env_params: Any = None, *, run_dir: str | None = None,
          quiet: bool = False, tensorboard: bool = True,
          on_chunk: Callable[[int, Any, dict[str, Any]], None] | None = None) -> TrainResult:
    """Trains an agent; the Python entry point behind every experiment module.

    Args:
        config: an algorithm config, e.g. :class:`rljax.agents.ppo.PPOConfig`.
        env: an env object (rljax or gymnax contract, e.g. one you just wrote); when None,
            ``envs.make(config.env)``.
        env_params: its params; ``env.default_params`` when None.
        run_dir: where to write ``config.json``, ``manifest.json``, ``metrics.jsonl`` and ``tb/``;
            None keeps the run in memory (rows are still returned).
        quiet: no progress lines.
        tensorboard: write tensorboard events (with ``run_dir``).
        on_chunk: called after each chunk as ``on_chunk(chunk_index, state, row)``.

    Returns:
        A :class:`TrainResult`.

    Raises:
        DesyncError: params diverged across devices.
        FloatingPointError: a loss became NaN or infinite (the message names it and the chunk).
    """
    from rljax.tracking import Tracker

    t_start = time.perf_counter()
    if env is None:
        import envs

        env, default = envs.make(config.env)
        env_params = default if env_params is None else env_params
    elif env_params is None:
        env_params = env.default_params

    par = DataParallel(config.num_devices, config.backend)
    agent = build_agent(config, env, env_params, par.axis_name)
    plan = plan_updates(config.total_timesteps, agent.env_steps_per_update, config.updates_per_chunk)

    key = jax.random.key(config.seed)
    state = par.init(lambda k, i: agent.init(k, i, plan.num_updates), key)
    chunk_fn = par.map(make_chunk(agent.update, plan.updates_per_chunk, par.axis_name), donate=True)

    t0 = time.perf_counter()
    compiled = chunk_fn.lower(state).compile()
    timings = {"compile_s": time.perf_counter() - t0, "compute_s": 0.0, "logging_s": 0.0,
               "num_chunks": plan.num_chunks, "updates_per_chunk": plan.updates_per_chunk,
               "num_updates": plan.num_updates, "total_env_steps": plan.total_env_steps}

    tracker = None
    if run_dir is not None:
        tracker = Tracker(run_dir, config, seed=config.seed, tensorboard=tensorboard, quiet=quiet,
                          total_env_steps=plan.total_env_steps,
                          manifest_extra={"plan": dataclasses.asdict(plan)})
    rows: list[dict[str, Any]] = []
    try:
        for c in range(plan.num_chunks):
            t_chunk = time.perf_counter()
            state, out = compiled(state)
            # Block before the next launch: reading metrics waits for the chunk, and waiting on the
            # state too avoids XLA's CPU collective-rendezvous deadlock between chained programs.
            out = jax.device_get(first_device(out, config.num_devices))
            jax.block_until_ready(state)
            chunk_s = time.perf_counter() - t_chunk
            timings["compute_s"] += chunk_s

            t_log = time.perf_counter()
            row = _row(plan, c, out, time.perf_counter() - t_start, chunk_s)
            _check_health(row, c)
            rows.append(row)
            if tracker is not None:
                tracker.log(row)
            elif not quiet:
                from rljax.tracking import format_progress

                print(format_progress(row, plan.total_env_steps), flush=True)
            if on_chunk is not None:
                on_chunk(c, state, row)
            timings["logging_s"] += time.perf_counter() - t_log
    finally:
        if tracker is not None:
            tracker.close()
    timings["total_s"] = time.perf_counter() - t_start
    return TrainResult(state=state, rows=rows, run_dir=None if run_dir is None else str(run_dir),
                       timings=timings, agent=agent)


def _check_health(row: dict[str, Any], chunk_index: int) -> None:
    desync = row.get("param_desync", 0.0)
    if desync != 0.0:
        raise DesyncError(
            f"params differ across devices after chunk {chunk_index} (checksum spread {desync!r}); "
            f"a data-parallel update must keep them identical: check that every gradient and "
            f"statistic is averaged over the device axis")
    for k, v in row.items():
        if k.endswith("_loss") and (v is None or not math.isfinite(v)):
            raise FloatingPointError(f"{k} is {v} after chunk {chunk_index} (env step {row['env_steps']})")
