"""Runs a bench: each cell a compiled sweep over its seeds, then the scores and the report.

The bench directory::

    DIR/bench.json           the spec (BenchSpec.to_dict); a DIR holding another spec is refused
    DIR/random_scores.json   each env's random-policy score (measured once, then read back)
    DIR/cells/<algo>/<env>/  each cell: an ordinary sweep directory (rljax.training.sweep.run_sweep)
    DIR/scores.csv           algorithm,env,seed,score,normalized_score: one row per run
    DIR/curves.csv           every evaluation of every run (the learning curves)
    DIR/report.json, report.md   the statistics (rljax.bench.report), recomputable from scores.csv
    DIR/plots/               performance profile, sample-efficiency and per-env curves (rljax.bench.plots)

Any number of processes may run the same bench on one directory: a laptop's one command, the
processes of ``rljax launch -n N -- rljax bench ...``, the tasks of a SLURM array. Each is a *worker*
(registered, while it runs, as ``DIR/workers/<host>.<pid>.<token>/``, holding that directory's
:class:`rljax.store.runlock.RunLock`) and takes the cells no live process runs: before running a cell it
takes the cell directory's run lock without waiting, and a cell another live worker holds is left to
it. A worker that finishes the cells it could take exits; the cells other workers still run are
named, and finish with them. The kernel frees the locks of a killed worker, so its cell is taken by
the next worker that reaches it (a requeued task, the same command run again), which resumes it.
The spec, the random scores, ``scores.csv``, ``curves.csv``, the report and the plots are written
under a short exclusive lock (``DIR/.bench.lock``, held while they are written), so the last worker
to finish a cell writes results that cover every finished cell. ``rljax stop DIR`` asks every worker
(:func:`request_bench_stop`).

Cells are taken in spec order. A cell whose sweep finished (its ``status.json`` says ``finished``) is
not rerun; a cell killed mid-way is resumed from its newest checkpoint (``run_sweep(resume=True)``;
one killed before its first checkpoint starts over), so a bench killed at any moment and run again
with the same command gives the scores of an uninterrupted one, however its cells were spread over
workers (a cell's results depend on its config, its seeds and the kind of machine, not on the worker).
``scores.csv`` and the report are rewritten after every cell, so a killed bench keeps the results of
its finished cells.

A run's score is the mean greedy return (``eval/return_mean``) of its last ``evaluation.last``
evaluations; an env's random score is the mean return of :attr:`~rljax.bench.spec.Evaluation.random_episodes`
episodes of uniformly random actions, run as one compiled rollout with key 0. In a two-player game an
evaluation's episodes are games against the uniform random player and a return is the game's score (+1
a win, 0 a draw, -1 a loss; :func:`rljax.policy.evaluate.game_episodes`); the random score is the random
player's against itself.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import fcntl
import json
import math
import os
import pathlib
import secrets
import shutil
import socket
import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any

from rljax.bench.spec import TEXT_KEYS, BenchSpec, Cell, SpecError, check_spec, spec_differences

__all__ = ["BenchStopped", "BENCH_FILE", "RANDOM_FILE", "SCORES_FILE", "SCORE_COLUMNS", "EVAL_SCORE", "CURVES_FILE",
           "cell_dir", "cell_runs", "cell_state", "random_score", "random_scores", "run_score", "cell_scores",
           "bench_rows", "write_scores", "run_bench", "bench_workers", "request_bench_stop", "bench_status",
           "status_text"]

BENCH_FILE = "bench.json"
RANDOM_FILE = "random_scores.json"
SCORES_FILE = "scores.csv"
CURVES_FILE = "curves.csv"
WORKERS_DIR = "workers"
MUTEX_FILE = ".bench.lock"
SCORE_COLUMNS = ("algorithm", "env", "seed", "score", "normalized_score")
"""The columns of ``scores.csv``."""
EVAL_SCORE = "eval/return_mean"
"""The metrics column a run's score is read from: the mean greedy return of one evaluation."""


class BenchStopped(RuntimeError):
    """A cell's sweep stopped before it finished (SIGTERM, a stop request); the same command continues it."""


def cell_dir(run_dir: str | os.PathLike, cell: Cell) -> pathlib.Path:
    """``DIR/cells/<algorithm>/<env>``, a ``/`` in the env id (``gymnax/CartPole-v1``) as ``--``."""
    return pathlib.Path(run_dir) / "cells" / cell.algorithm / cell.env.id.replace("/", "--")


def cell_state(path: str | os.PathLike) -> str:
    """``"done"`` (its sweep finished), ``"partial"`` (started, has a checkpoint to resume from) or
    ``"not started"`` (nothing, or nothing worth keeping: no committed checkpoint)."""
    from rljax.store.rundir import checkpoint_steps
    from rljax.store.status import read_status

    path = pathlib.Path(path)
    if not (path / "sweep.json").exists():
        return "not started"
    if read_status(path).get("state") == "finished":
        return "done"
    return "partial" if checkpoint_steps(path) else "not started"


def random_score(env_id: str, params: Mapping[str, Any], episodes: int, seed: int = 0,
                 kwargs: Mapping[str, Any] | None = None) -> float:
    """The mean return of ``episodes`` episodes of uniformly random actions on ``env_id`` (built with
    the constructor arguments ``kwargs``, with ``params`` over its defaults), each to its end or time
    limit, as one compiled rollout. In a two-player game, the mean score of the uniform random player
    against itself over ``episodes`` games (+1 a win, 0 a draw, -1 a loss; half moving first), as a
    trained policy's evaluation scores it (:func:`rljax.policy.evaluate.game_episodes`). In a
    multi-agent env, the team's mean return with every agent acting uniformly among its legal actions
    (:func:`rljax.policy.evaluate.team_episodes`)."""
    import jax
    import numpy as np

    from rljax.core import registry
    from rljax.env import legal_action_mask, num_agents, uniform_legal_action
    from rljax.policy.evaluate import game_episodes, max_episode_steps, run_episodes, team_episodes
    from rljax.policy.games import is_game, random_player

    constructor = registry.parse_env_kwargs([f"{k}={v}" for k, v in (kwargs or {}).items()])
    env, env_params = registry.make(env_id, **constructor)
    env_params, _ = registry.parse_env_params([f"{k}={v}" for k, v in params.items()], env_params)
    space = env.action_space(env_params)
    steps = max_episode_steps(env_params)

    def act(obs: Any, key: jax.Array) -> jax.Array:
        return jax.vmap(space.sample)(jax.random.split(key, episodes))

    def act_rows(rows: Any, key: jax.Array, memory: Any) -> tuple[jax.Array, Any]:
        mask = legal_action_mask(rows)
        if mask is not None:
            return uniform_legal_action(key, mask), memory
        return jax.vmap(space.sample)(jax.random.split(key, jax.tree.leaves(rows)[0].shape[0])), memory

    if is_game(env, env_params):
        run = jax.jit(lambda key: game_episodes(env, env_params, random_player(), key, episodes, steps))
    elif num_agents(env):
        run = jax.jit(lambda key: team_episodes(env, env_params, act_rows, key, episodes, steps))
    else:
        run = jax.jit(lambda key: run_episodes(env, env_params, act, key, episodes, steps))
    return float(np.mean(np.asarray(run(jax.random.key(seed)).returns, np.float64)))


def random_scores(run_dir: str | os.PathLike, spec: BenchSpec) -> dict[str, float]:
    """Each env's random score, read from ``DIR/random_scores.json`` or measured (and saved there)."""
    path = pathlib.Path(run_dir) / RANDOM_FILE
    saved = json.loads(path.read_text()) if path.exists() else {}
    out = {}
    for env in spec.envs:
        key = {"params": dict(env.params), "episodes": spec.evaluation.random_episodes, "seed": 0,
               **env.construction}
        entry = saved.get(env.id)
        if entry is None or {k: entry.get(k) for k in key} != key:
            entry = {**key, "score": random_score(env.registry_name, env.params, spec.evaluation.random_episodes,
                                                  kwargs=env.kwargs)}
            saved[env.id] = entry
            _write_atomic(path, json.dumps(saved, indent=2, sort_keys=True) + "\n")
        out[env.id] = entry["score"]
    return out


def run_score(rows: list[Mapping[str, Any]], last: int) -> float:
    """The mean of the last ``last`` evaluations (``eval/return_mean``) among a run's metrics rows.

    Raises:
        ValueError: the run was never evaluated.
    """
    evals = [r[EVAL_SCORE] for r in rows if EVAL_SCORE in r]
    if not evals:
        raise ValueError(f"the run has no {EVAL_SCORE} rows: it was never evaluated")
    kept = [float("nan") if v is None else float(v) for v in evals[-last:]]
    return float(sum(kept) / len(kept))


def cell_runs(path: str | os.PathLike) -> list[tuple[int, list[dict[str, Any]]]]:
    """``(seed, metrics rows)`` of each member of a cell's sweep, in member order."""
    from rljax.store.tracking import read_metrics

    path = pathlib.Path(path)
    members = json.loads((path / "sweep.json").read_text())["members"]
    return [(m["seed"], read_metrics(path / "members" / m["name"])) for m in members]


def cell_scores(path: str | os.PathLike, last: int) -> list[tuple[int, float]]:
    """``(seed, score)`` of each member of a finished cell's sweep, in member order (:func:`run_score`)."""
    return [(seed, run_score(rows, last)) for seed, rows in cell_runs(path)]


def _curve(rows: list[dict[str, Any]]) -> list[tuple[int, float, float]]:
    """``(env_steps, fraction of the run's env steps, return)`` of each evaluation among a run's rows."""
    evals = [(int(r["env_steps"]), float(r[EVAL_SCORE])) for r in rows if r.get(EVAL_SCORE) is not None]
    total = max(1, max(int(r.get("env_steps", 0)) for r in rows))
    return [(steps, steps / total, value) for steps, value in evals]


def bench_rows(run_dir: str | os.PathLike, spec: BenchSpec, randoms: Mapping[str, float]
               ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(scores.csv rows, curves.csv rows)`` of the bench's finished cells, in cell and seed order.

    ``normalized_score = (score - random) / (reference - random)``; ``curves.csv`` has one row per
    evaluation of each run (:data:`rljax.bench.plots.CURVE_COLUMNS`).
    """
    rows, curves = [], []
    for cell in spec.cells():
        path = cell_dir(run_dir, cell)
        if cell_state(path) != "done":
            continue
        low, high = randoms[cell.env.id], cell.env.reference
        if high == low:
            raise ValueError(f"env {cell.env.id}: its reference score {high} equals its random score; the scores "
                             "cannot be normalised")
        for seed, metrics in cell_runs(path):
            score = run_score(metrics, spec.evaluation.last)
            rows.append({"algorithm": cell.algorithm, "env": cell.env.id, "seed": seed, "score": score,
                         "normalized_score": (score - low) / (high - low)})
            curves += [{"algorithm": cell.algorithm, "env": cell.env.id, "seed": seed, "env_steps": steps,
                        "fraction": fraction, "score": value, "normalized_score": (value - low) / (high - low)}
                       for steps, fraction, value in _curve(metrics)]
    return rows, curves


def _write_atomic(path: pathlib.Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_scores(run_dir: str | os.PathLike, rows: list[Mapping[str, Any]], name: str = SCORES_FILE,
                 columns: tuple[str, ...] = SCORE_COLUMNS) -> pathlib.Path:
    """Writes ``DIR/scores.csv`` (or another table ``name`` of ``columns``) atomically, floats with
    every digit (``repr``)."""
    import io

    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: repr(float(v)) if isinstance(v, float) else v for k, v in row.items()})
    path = pathlib.Path(run_dir) / name
    _write_atomic(path, buffer.getvalue())
    return path


def _claim(run_dir: pathlib.Path, spec: BenchSpec) -> None:
    """Writes ``bench.json``, or checks that the one there is this spec's. A spec that differs only in
    its text (:data:`~rljax.bench.spec.TEXT_KEYS`: a corrected citation or description) is the same
    bench: ``bench.json`` takes the new text, which the report then prints."""
    path = run_dir / BENCH_FILE
    record = spec.to_dict()
    if path.exists():
        saved = json.loads(path.read_text())
        diffs = spec_differences(saved, record, ignore=TEXT_KEYS)
        if diffs:
            raise SpecError(f"{run_dir} holds a bench with another spec ({'; '.join(diffs[:5])}"
                            f"{'; ...' if len(diffs) > 5 else ''}); run it with its own spec or choose a new --run-dir")
        if saved != record:
            changed = [line.split(":", 1)[0] for line in spec_differences(saved, record)]
            print(f"bench: {path}: the spec's text changed ({', '.join(changed)}); the bench continues with it",
                  file=sys.stderr, flush=True)
            _write_atomic(path, json.dumps(record, indent=2) + "\n")
    else:
        run_dir.mkdir(parents=True, exist_ok=True)
        _write_atomic(path, json.dumps(record, indent=2) + "\n")


def _run_cell(worker: pathlib.Path, config: Any, path: pathlib.Path, seeds: int, quiet: bool,
              train_kwargs: Mapping[str, Any]) -> None:
    """Runs (or resumes) one cell's sweep into ``path``, whose run lock the caller holds; a stop
    request to this worker (:func:`request_bench_stop`) stops it at its next chunk."""
    from rljax.store.runlock import LOCK_FILE
    from rljax.store.status import STOP_FILE
    from rljax.training.sweep import SweepSpec, run_sweep

    state = cell_state(path)
    if state == "not started":  # killed before its first checkpoint: nothing to keep, it starts over
        for entry in path.iterdir():
            if entry.name != LOCK_FILE:
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    caller = train_kwargs.get("on_chunk")

    def on_chunk(index: int, train_state: Any, row: dict[str, Any]) -> Any:
        # Left in place: a request seen at the cell's last chunk stops the worker before its next cell.
        stop = (worker / STOP_FILE).exists()
        return (caller(index, train_state, row) if caller is not None else False) or stop

    run_sweep(config, SweepSpec(seeds=tuple(range(seeds))), run_dir=path, resume=state == "partial", quiet=quiet,
              plots=False, **{"checkpoint_every": 1, **train_kwargs, "on_chunk": on_chunk})


def run_bench(spec: BenchSpec, run_dir: str | os.PathLike, *, quiet: bool = False, plots: bool = True,
              **train_kwargs: Any) -> dict[str, Any]:
    """Runs (or continues) the bench ``spec`` in ``run_dir`` as one of its workers, and writes its
    scores and report.

    Other processes may run the same bench on ``run_dir`` at the same time; each runs the cells no
    other live process runs (see the module docstring).

    Args:
        spec: the bench (:func:`rljax.bench.spec.load_spec`, :func:`~rljax.bench.spec.narrow`);
            checked (:func:`~rljax.bench.spec.check_spec`) before anything runs.
        run_dir: the bench directory (see the module docstring).
        quiet: no progress lines.
        plots: draw ``DIR/plots/`` (:mod:`rljax.bench.plots`) after every cell.
        **train_kwargs: run options for every cell's sweep (:class:`rljax.training.options.RunOptions`
            fields: ``checkpoint_every`` (default 1 chunk), ``tensorboard``, ``wandb``, ...).

    Returns:
        The report (:func:`rljax.bench.report.compute_report`'s dict) of the cells finished when this
        worker ends; it covers every cell unless other workers still run some (named in a progress
        line; the last of them to finish writes the whole report).

    Raises:
        SpecError: a spec that cannot run, or a ``run_dir`` that holds another spec.
        rljax.store.runlock.RunLockError: ``run_dir`` cannot be locked (not a writable directory, a
            filesystem without file locks).
        BenchStopped: a cell stopped before it finished (SIGTERM, a stop request to this worker or in
            the cell's directory, each taken at a chunk boundary and saved there), or a stop request
            found between cells; the same call continues the bench.
    """
    from rljax.store.runlock import RunLock

    configs = check_spec(spec)
    run_dir = pathlib.Path(run_dir)
    worker = run_dir / WORKERS_DIR / f"{socket.gethostname()}.{os.getpid()}.{secrets.token_hex(4)}"
    with _bench_mutex(run_dir):
        _claim(run_dir, spec)
        _forget_dead_workers(run_dir)
        lock = RunLock(worker).acquire()
    try:
        return _run_cells(spec, configs, run_dir, worker, quiet, plots, train_kwargs)
    finally:
        shutil.rmtree(worker, ignore_errors=True)
        lock.release()


@contextlib.contextmanager
def _bench_mutex(run_dir: pathlib.Path) -> Iterator[None]:
    """Holds ``DIR/.bench.lock`` exclusively (waiting for it) while the bench's shared files are written."""
    from rljax.store.runlock import DISABLE_ENV, RunLockError

    path = run_dir / MUTEX_FILE
    if os.environ.get(DISABLE_ENV, "1").strip() == "0":
        run_dir.mkdir(parents=True, exist_ok=True)
        yield
        return
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as err:
        raise RunLockError(f"cannot open {str(path)!r} ({type(err).__name__}: {err.strerror or err}); the bench "
                           "directory must be a directory this user can write") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as err:
            raise RunLockError(f"cannot lock {str(path)!r}: the filesystem refused a file lock "
                               f"({errno.errorcode.get(err.errno, err.errno)}: {err.strerror}); workers of one bench "
                               f"would overwrite each other's results. Mount it with locking (NFS without 'nolock', "
                               f"Lustre with 'flock') or, at your own risk, set {DISABLE_ENV}=0") from None
        yield
    finally:
        os.close(fd)


def bench_workers(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """The live workers of the bench in ``run_dir`` (``DIR/workers/*`` whose run lock a process
    holds), each ``{"host", "pid", "started"}`` from its lock record, oldest first. A killed worker's
    entry stays until the next worker starts, and is not listed."""
    from rljax.store.runlock import is_held, read_holder

    root = pathlib.Path(run_dir) / WORKERS_DIR
    workers = []
    for entry in root.iterdir() if root.is_dir() else ():
        if entry.is_dir() and is_held(entry):
            record = read_holder(entry) or {}
            workers.append({"host": record.get("host"), "pid": record.get("pid"), "started": record.get("started"),
                            "dir": str(entry)})
    return sorted(workers, key=lambda w: (str(w["started"]), w["dir"]))


def _forget_dead_workers(run_dir: pathlib.Path) -> None:
    """Removes the entries of workers no process holds (killed ones); called under the bench mutex."""
    from rljax.store.runlock import is_held

    root = run_dir / WORKERS_DIR
    for entry in root.iterdir() if root.is_dir() else ():
        if entry.is_dir() and not is_held(entry):
            shutil.rmtree(entry, ignore_errors=True)


def request_bench_stop(run_dir: str | os.PathLike, requester: str = "") -> list[dict[str, Any]]:
    """Asks every live worker of the bench in ``run_dir`` to stop (``stop.request`` in its entry): one
    in a cell stops it at its next chunk boundary, saved, and one between cells before its next cell;
    each then exits as stopped. Workers started afterwards are not asked. Returns the workers asked."""
    from rljax.store.status import request_stop

    workers = bench_workers(run_dir)
    for worker in workers:
        request_stop(worker["dir"], requester)
    return workers


def _who(record: Mapping[str, Any] | None) -> str:
    return "a process whose lock record is unreadable" if not record else f"{record.get('host')}:{record.get('pid')}"


def _run_cells(spec: BenchSpec, configs: list[Any], run_dir: pathlib.Path, worker: pathlib.Path, quiet: bool,
               plots: bool, train_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`run_bench` once it is a worker of ``run_dir``: each cell no live process runs, in order."""
    from rljax.store.runlock import RunLock, RunLockedError
    from rljax.store.status import take_stop_request

    with _bench_mutex(run_dir):
        randoms = random_scores(run_dir, spec)
    others: dict[str, tuple[str, pathlib.Path]] = {}  # cell name -> (the worker running it, its directory)
    report: dict[str, Any] | None = None
    for i, (cell, config) in enumerate(zip(spec.cells(), configs)):
        path = cell_dir(run_dir, cell)
        if cell_state(path) == "done":
            if not quiet:
                print(f"bench: cell {i + 1}/{len(configs)} {cell.name}: done", flush=True)
            continue
        if take_stop_request(worker) is not None:
            raise BenchStopped(f"stopped on request before cell {cell.name}; run the bench again to continue")
        try:
            lock = RunLock(path).acquire()
        except RunLockedError as err:
            others[cell.name] = (_who(err.holder), path)
            if not quiet:
                print(f"bench: cell {i + 1}/{len(configs)} {cell.name}: run by {others[cell.name][0]}, left to it",
                      flush=True)
            continue
        try:
            state = cell_state(path)  # read again under the lock: another worker may have finished it
            if not quiet:
                print(f"bench: cell {i + 1}/{len(configs)} {cell.name}: {state}"
                      + ("" if state == "done" else f", {'resuming' if state == 'partial' else 'running'} "
                         f"{spec.seeds} seeds x {cell.total_timesteps:,} env steps"), flush=True)
            if state == "done":
                continue
            t0 = time.perf_counter()
            _run_cell(worker, config, path, spec.seeds, quiet, train_kwargs)
            if cell_state(path) != "done":  # stopped (SIGTERM, a stop request): the bench stops with it
                raise BenchStopped(f"cell {cell.name} stopped before it finished; run the bench again to continue")
        finally:
            lock.release()
        if not quiet:
            print(f"bench: cell {cell.name} done in {time.perf_counter() - t0:.1f}s", flush=True)
        report = _write_results(run_dir, spec, randoms, plots)
    if report is None:  # this worker finished no cell: the results are rewritten once, from what is on disk
        report = _write_results(run_dir, spec, randoms, plots)
    left = {name: who for name, (who, path) in others.items() if cell_state(path) != "done"}
    if left and not quiet:
        print(f"bench: {len(left)} {'cell is' if len(left) == 1 else 'cells are'} run by other workers ("
              + ", ".join(f"{name} by {who}" for name, who in left.items())
              + "); the report covers them once they finish", flush=True)
    return report


def _write_results(run_dir: pathlib.Path, spec: BenchSpec, randoms: Mapping[str, float], plots: bool
                   ) -> dict[str, Any]:
    """Rewrites ``scores.csv``, ``curves.csv``, the report and the plots from the finished cells,
    under the bench mutex (so the last writer's results cover every cell finished before it)."""
    from rljax.bench.plots import CURVE_COLUMNS, write_plots
    from rljax.bench.report import write_report

    with _bench_mutex(run_dir):
        scores, curves = bench_rows(run_dir, spec, randoms)
        write_scores(run_dir, scores)
        write_scores(run_dir, curves, CURVES_FILE, CURVE_COLUMNS)
        report = write_report(run_dir, references=_references(spec, randoms))
        if plots:
            write_plots(run_dir)
    return report


def _references(spec: BenchSpec, randoms: Mapping[str, float]) -> dict[str, dict[str, Any]]:
    """Each env's random score, reference score and citation, for ``report.md``."""
    return {e.id: {"random": randoms[e.id], "reference": e.reference, "citation": e.citation} for e in spec.envs
            if math.isfinite(randoms[e.id])}


def bench_status(run_dir: str | os.PathLike) -> dict[str, Any]:
    """Where the bench in ``run_dir`` stands: each cell's state and progress, the counts of cells
    done, running and left, and an estimate of the time left.

    A cell is ``done``, ``running`` (its sweep's ``status.json`` says so and its process is alive),
    ``stopped`` (started and resumable, not running) or ``not started``. A cell's ``wall_time_s``
    is the seconds its sweep has run over all its sessions (its ``status.json``'s: a resumed sweep
    continues the clock saved with the checkpoint it resumes from, so each session's compilation is
    counted, and a killed session's work after its last checkpoint, done again by the next, is
    not); None before its first chunk. The estimate (``eta_s``, None until a cell has finished) is
    the running cell's own ETA plus, for every other unfinished cell, its env steps left at the
    seconds per env step the finished cells took. Env steps are per run (each of a cell's seeds
    runs them, in one compiled sweep). ``workers`` is :func:`bench_workers`'s: the live processes
    running the bench.

    Raises:
        FileNotFoundError: ``run_dir`` holds no ``bench.json``.
        ValueError: a damaged ``bench.json`` or cell ``status.json``, naming the file.
    """
    from rljax.bench.spec import parse_spec
    from rljax.store.status import read_status

    run_dir = pathlib.Path(run_dir)
    saved = run_dir / BENCH_FILE
    if not saved.is_file():
        raise FileNotFoundError(f"{run_dir} is not a bench directory (no {BENCH_FILE})")
    try:
        spec = parse_spec(json.loads(saved.read_text(encoding="utf-8")))
    except ValueError as err:  # SpecError too
        raise ValueError(f"{saved} is damaged ({err}); a bench writes it when it starts in a new directory") from None
    cells, spent, steps_done = [], 0.0, 0
    for cell in spec.cells():
        path, total = cell_dir(run_dir, cell), cell.total_timesteps
        record = read_status(path) if path.exists() else {"state": "not started"}
        state = cell_state(path)
        if state != "done":
            state = "running" if record.get("state") in ("running", "stalled") else \
                ("stopped" if state == "partial" else "not started")
        done_steps = total if state == "done" else int(record.get("env_steps") or 0)
        wall = record.get("wall_time_s") if state != "not started" else None
        if state == "done":
            spent, steps_done = spent + float(wall or 0.0), steps_done + total
        cells.append({"cell": cell.name, "state": state, "env_steps": done_steps, "total_env_steps": total,
                      "wall_time_s": wall, "eta_s": record.get("eta_s") if state == "running" else None})
    rate = spent / steps_done if steps_done else None
    eta = None
    if rate is not None:
        eta = sum((c["eta_s"] if c["state"] == "running" and c["eta_s"] is not None
                   else rate * (c["total_env_steps"] - c["env_steps"])) for c in cells if c["state"] != "done")
    counts = {s: sum(c["state"] == s for c in cells) for s in ("done", "running", "stopped", "not started")}
    return {"run_dir": str(run_dir), "cells": cells, "done": counts["done"], "running": counts["running"],
            "left": counts["stopped"] + counts["not started"], "eta_s": eta,
            "workers": [{k: w[k] for k in ("host", "pid", "started")} for w in bench_workers(run_dir)]}


def _seconds(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def status_text(status: Mapping[str, Any]) -> str:
    """:func:`bench_status` as lines: the counts and time left, then one line per cell."""
    seconds = status["eta_s"]
    eta = "unknown until a cell finishes" if seconds is None else f"about {_seconds(seconds)}"
    workers = [f"{w['host']}:{w['pid']}" for w in status.get("workers") or ()]
    held = "" if not workers else (f"; run by {workers[0]}" if len(workers) == 1 else
                                   f"; run by {len(workers)} workers ({', '.join(workers)})")
    done = status["done"]
    lines = [f"bench {status['run_dir']}: {done} cell{'' if done == 1 else 's'} done, {status['running']} running, "
             f"{status['left']} left; time left {eta}{held}"]
    for c in status["cells"]:
        wall = "" if c.get("wall_time_s") is None else f", {_seconds(c['wall_time_s'])} spent"
        lines.append(f"  {c['cell']:<40} {c['state']:<12} {c['env_steps']:>12,}/{c['total_env_steps']:,} env steps "
                     f"per run{wall}")
    return "\n".join(lines)
