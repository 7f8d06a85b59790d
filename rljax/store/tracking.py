"""The run directory and every metric write: config, manifest, JSONL, tensorboard, progress.

Layout (a contract; ``docs/runbook.md`` describes each file)::

    RUN_DIR/
      config.json      the fully resolved config
      manifest.json    config hash, seed, git commit (+ dirty flag), package versions, devices, argv
      metrics.jsonl    one JSON object per chunk
      tb/              tensorboardX event files with the same scalars
      checkpoints/     Orbax steps (written by rljax.store.checkpoint)

This is the only module that writes metrics. Nothing here runs inside compiled code: the host loop
calls :meth:`Tracker.log` once per chunk with already-reduced scalars.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import math
import os
import pathlib
import platform
import subprocess
import sys
import time
import warnings
from collections.abc import Mapping
from typing import Any, TextIO

__all__ = ["Tracker", "Tracking", "EventFile", "json_scalar", "config_to_dict", "config_hash", "manifest", "provenance",
           "read_metrics", "format_progress", "format_population_progress", "population_legend", "command_line",
           "package_version"]

REQUIRED_KEYS = ("env_steps", "updates", "wall_time_s", "sps", "episode_return_mean",
                 "episode_length_mean", "episodes")
PACKAGES = ("rljax", "jax", "jaxlib", "flax", "optax", "chex", "orbax-checkpoint", "gymnax", "numpy",
            "tensorboardX")


def config_to_dict(config: Any) -> dict[str, Any]:
    """A JSON-ready dict of a (frozen) config dataclass; tuples become lists."""
    if dataclasses.is_dataclass(config):
        config = dataclasses.asdict(config)
    return json.loads(json.dumps(config, default=_json_default))


def config_hash(config: Any) -> str:
    """A short, stable hash of the resolved config (sorted-key JSON, sha256, 16 hex digits)."""
    text = json.dumps(config_to_dict(config), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    return str(obj)


def _git_state() -> dict[str, Any]:
    """The commit and dirty flag of the rljax source tree, when it is a git checkout."""
    root = pathlib.Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                    capture_output=True, text=True, timeout=10, check=True).stdout.strip())
        return {"git_commit": commit, "git_dirty": dirty}
    except (OSError, subprocess.SubprocessError):
        return {"git_commit": None, "git_dirty": None}


def _versions() -> dict[str, str | None]:
    """Installed versions of :data:`PACKAGES` (None: not installed). ``rljax`` is the import name:
    its version is that of whichever distribution installed the package (``rljax-chunked``; the
    name ``rljax`` on PyPI belongs to an unrelated project, so it is not looked up by that name)."""
    return {name: package_version(name) for name in PACKAGES}


def package_version(name: str) -> str | None:
    """The installed version of distribution ``name`` (None: not installed); for ``rljax``, the
    version of whichever distribution installed this package (``rljax-chunked``: the name ``rljax``
    on PyPI belongs to an unrelated project, so it is never looked up by that name)."""
    dist = _own_distribution() if name == "rljax" else name
    try:
        return importlib.metadata.version(dist) if dist else None
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.cache
def _own_distribution() -> str | None:
    """The distribution that installed the ``rljax`` package, or None (a bare source tree). Cached:
    mapping packages to distributions reads every installed one (a quarter second), and a sweep
    writes one manifest per member."""
    return next(iter(importlib.metadata.packages_distributions().get("rljax", [])), None)


def command_line() -> list[str]:
    """The command that started this process, whole: the Python executable, then what it ran (``-m
    module`` or a script, a console script's path) and every argument, so ``python -m
    experiments.ppo_cartpole`` is recorded as that and not as the module's file path alone
    (``sys.argv`` loses the interpreter and the ``-m``)."""
    argv = list(getattr(sys, "orig_argv", None) or sys.argv)
    return [sys.executable or argv[0], *argv[1:]]


def provenance() -> dict[str, Any]:
    """The part of a manifest that describes the process, not the run: git commit and dirty flag,
    package versions, Python, platform, devices, backend, command line. Costly (two ``git``
    processes, ten package look-ups): a sweep computes it once for all its members."""
    import jax

    return {
        **_git_state(),
        "packages": _versions(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "devices": [str(d) for d in jax.devices()],
        "backend": jax.default_backend(),
        "argv": command_line(),
    }


def manifest(config: Any, seed: int | None = None, extra: Mapping[str, Any] | None = None,
             process: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What produced a run: config hash, seed, code version, packages, devices, command line.

    ``process``: this process's :func:`provenance`, when the caller already has it (computed here
    otherwise)."""
    return {
        "config_hash": config_hash(config),
        "seed": seed,
        **(dict(process) if process is not None else provenance()),
        "created_unix": time.time(),
        **(dict(extra) if extra else {}),
    }


def read_metrics(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of ``RUN_DIR/metrics.jsonl`` (a truncated last line, from a crash, is skipped)."""
    rows = []
    path = pathlib.Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return rows
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and "env_steps" in row:
            rows.append(row)
    return rows


def format_progress(row: Mapping[str, Any], total_env_steps: int) -> str:
    """One progress line: steps done, steps/s, ETA, the recent return and, on a chunk that was
    evaluated, the greedy evaluation's mean return."""
    steps = int(row["env_steps"])
    sps = float(row.get("sps") or 0.0)
    eta = (total_env_steps - steps) / sps if sps > 0 else float("nan")
    ret = row.get("episode_return_mean")
    ret_s = "   n/a" if ret is None or (isinstance(ret, float) and math.isnan(ret)) else f"{ret:8.2f}"
    pct = 100.0 * steps / max(total_env_steps, 1)
    evaluated = row.get("eval/return_mean")
    eval_s = "" if evaluated is None else f"  eval {evaluated:8.2f}"
    return (f"[{pct:5.1f}%] steps {steps:>10,d}/{total_env_steps:,d}  sps {sps:>9,.0f}  "
            f"eta {_fmt_s(eta)}  return {ret_s}{eval_s}")


def format_population_progress(rows: list[Mapping[str, Any]], total_env_steps: int) -> str:
    """A sweep's progress line: :func:`format_progress` of the whole population, whose return (and
    evaluation) is the mean over the members that finished an episode in the chunk (were
    evaluated), followed by the best member's; steps are per member, steps/s the population's."""
    def finite(key: str) -> list[float]:
        values = [r.get(key) for r in rows]
        return [float(v) for v in values if v is not None and math.isfinite(float(v))]

    returns, evals = finite("episode_return_mean"), finite("eval/return_mean")
    row = {"env_steps": rows[0]["env_steps"], "sps": float(rows[0].get("sps") or 0.0) * len(rows),
           "episode_return_mean": sum(returns) / len(returns) if returns else None,
           **({"eval/return_mean": sum(evals) / len(evals)} if evals else {})}
    best = f"  best {max(returns):8.2f}" if returns else ""
    best_eval = f"  best eval {max(evals):8.2f}" if evals else ""
    return format_progress(row, total_env_steps) + best + best_eval


def population_legend(size: int) -> str:
    """What a sweep's progress line (:func:`format_population_progress`) shows, printed once above them."""
    return (f"progress of {size} members: return = mean over the members, best = the best member's; steps are per "
            f"member, sps over all of them")


def _fmt_s(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "  --  "
    m, s = divmod(int(seconds + 0.5), 60)
    return f"{m:3d}m{s:02d}s"


class Tracker:
    """Owns a run directory: writes config and manifest once, then one metrics row per chunk.

    Rows go to ``metrics.jsonl`` (flushed per row; a row that cannot be written whole, say on a
    full disk, is cut back off so the file never ends in a partial row) and to tensorboard under
    ``tb/``. On resume, pass ``resume=True``: files are appended, never truncated, and rows whose
    ``env_steps`` is not beyond the last logged one are refused so curves never overlap.

    Args:
        run_dir: the run directory; created if missing.
        config: the resolved config (a dataclass); written to ``config.json``.
        seed: recorded in the manifest.
        resume: append to an existing run instead of starting one.
        tensorboard: also write tensorboardX events.
        quiet: do not print progress lines.
        total_env_steps: for the progress line's percentage and ETA.
        resume_env_steps: on resume, the env step of the checkpoint the run continues from (0: the
            run starts over from scratch). Rows logged after it (by chunks that ran after the last
            checkpoint) are moved to ``metrics.superseded.jsonl`` (kept, not deleted), and
            tensorboard is told to purge its events after that step, so the continued curves
            neither overlap nor restart.
        recovered_rows: rows saved with the checkpoint (its own chunk's row): any of them missing
            from ``metrics.jsonl`` (a deleted file, a last line cut short by a crash) is put back.
        process: this process's :func:`provenance` when the caller has it (a sweep's members share one).
    """

    def __init__(self, run_dir: str | os.PathLike, config: Any, *, seed: int | None = None,
                 resume: bool = False, tensorboard: bool = True, quiet: bool = False,
                 total_env_steps: int = 0, manifest_extra: Mapping[str, Any] | None = None,
                 stream: TextIO | None = None, resume_env_steps: int | None = None,
                 recovered_rows: list[Mapping[str, Any]] | None = None, process: Mapping[str, Any] | None = None):
        self.run_dir = pathlib.Path(run_dir)
        self.quiet = quiet
        self.total_env_steps = total_env_steps
        self.stream = stream or sys.stdout
        self._tensorboard = tensorboard
        metrics_path = self.run_dir / "metrics.jsonl"
        self._metrics_path = metrics_path
        if not resume and metrics_path.exists() and metrics_path.stat().st_size > 0:
            raise FileExistsError(
                f"run directory {str(self.run_dir)!r} already holds metrics; resume it "
                f"(`rljax resume {self.run_dir}`: from its newest checkpoint, or from scratch if it has none) "
                f"or choose a new --run-dir")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.last_env_steps = -1
        purge_step = None
        if resume:
            if resume_env_steps is not None:
                self._rewrite_metrics(resume_env_steps, recovered_rows or [])
                purge_step = resume_env_steps + 1
            rows = read_metrics(self.run_dir)
            if rows:
                self.last_env_steps = int(rows[-1]["env_steps"])
            # The resolved config may differ in resumable fields (an extended total_timesteps);
            # the manifest keeps the original provenance and records each resume.
            _atomic_write_json(self.run_dir / "config.json", config_to_dict(config))
            record = self._read_manifest()
            if record is None:
                record = manifest(config, seed, manifest_extra, process)
            git = _git_state() if process is None else {k: process[k] for k in ("git_commit", "git_dirty")}
            record.setdefault("resumes", []).append({
                "from_env_steps": resume_env_steps, "argv": command_line(), "unix_time": time.time(),
                "config_hash": config_hash(config), **git,
                **({"determinism": manifest_extra["determinism"]} if manifest_extra and "determinism" in manifest_extra
                   else {})})
            _atomic_write_json(self.run_dir / "manifest.json", record)
        else:
            _atomic_write_json(self.run_dir / "config.json", config_to_dict(config))
            _atomic_write_json(self.run_dir / "manifest.json", manifest(config, seed, manifest_extra, process))
        self._jsonl = open(metrics_path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._tb = None
        self._open_tensorboard(purge_step)

    def _open_tensorboard(self, purge_step: int | None) -> None:
        if self._tensorboard:
            self._tb = EventFile(self.run_dir / "tb", purge_step)

    def _read_manifest(self) -> dict[str, Any] | None:
        """The manifest, or None when it is missing; a damaged one is moved aside (kept) with a warning."""
        path = self.run_dir / "manifest.json"
        if not path.exists():
            return None
        try:
            record = json.loads(path.read_text())
            if not isinstance(record, dict):
                raise ValueError(f"expected a JSON object, got {type(record).__name__}")
            return record
        except (ValueError, UnicodeDecodeError) as err:
            aside = _aside_name(path)
            os.replace(path, aside)
            warnings.warn(f"{path} is not valid JSON ({err}); moved it to {aside.name} and wrote a new "
                          f"manifest (the run's provenance before this resume is in the damaged file)",
                          stacklevel=3)
            return None

    def _rewrite_metrics(self, keep_env_steps: int, recovered_rows: list[Mapping[str, Any]]) -> None:
        """Keeps the rows up to ``keep_env_steps`` (moving later ones to ``metrics.superseded.jsonl``),
        drops undecodable lines (kept in the superseded file) and puts back recovered rows."""
        path = self._metrics_path
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines() if path.exists() else []
        if not path.exists() and recovered_rows:
            warnings.warn(f"{path} is missing: starting a new one from the checkpoint's row; earlier rows are "
                          f"lost", stacklevel=3)
        kept: list[dict[str, Any]] = []
        superseded: list[str] = []
        for line in lines:
            try:
                row = json.loads(line)
                steps = int(row["env_steps"])
            except (ValueError, TypeError, KeyError):
                if line.strip():
                    superseded.append(line)  # a partial line from a crash: kept aside, never lost
                continue
            if steps <= keep_env_steps:
                kept.append(row)
            else:
                superseded.append(json.dumps(row))
        have = {int(r["env_steps"]) for r in kept}
        recovered = [dict(r) for r in recovered_rows
                     if int(r["env_steps"]) <= keep_env_steps and int(r["env_steps"]) not in have]
        if not (superseded or recovered) and len(kept) == len(lines):
            return
        kept = sorted(kept + recovered, key=lambda r: int(r["env_steps"]))
        if superseded:
            with open(self.run_dir / "metrics.superseded.jsonl", "a", encoding="utf-8") as f:
                f.write("".join(line + "\n" for line in superseded))
        tmp = path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
        os.replace(tmp, path)

    def rewind(self, env_steps: int, recovered_rows: list[Mapping[str, Any]] | None = None) -> None:
        """Takes the run back to ``env_steps`` (a rollback to a checkpoint, or 0): later rows move to
        ``metrics.superseded.jsonl`` and tensorboard purges the events after that step."""
        self.close()
        self._rewrite_metrics(env_steps, list(recovered_rows or []))
        rows = read_metrics(self.run_dir)
        self.last_env_steps = int(rows[-1]["env_steps"]) if rows else -1
        self._jsonl = open(self._metrics_path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._open_tensorboard(env_steps + 1)

    def record_incident(self, incident: Mapping[str, Any]) -> None:
        """Appends ``incident`` (JSON-able) to the manifest's ``incidents`` list."""
        record = self._read_manifest() or {}
        record.setdefault("incidents", []).append({"unix_time": time.time(), **dict(incident)})
        _atomic_write_json(self.run_dir / "manifest.json", record)

    def log(self, row: Mapping[str, Any]) -> None:
        """Writes one metrics row (must have ``env_steps``; all values scalars or None).

        Raises:
            OSError: the row could not be written (e.g. a full disk); the file is cut back to
                its last complete row first.
        """
        missing = [k for k in REQUIRED_KEYS if k not in row]
        if missing:
            raise ValueError(f"metrics row lacks required keys {missing}; has {sorted(row)}")
        steps = int(row["env_steps"])
        if steps <= self.last_env_steps:
            raise ValueError(f"env_steps {steps} does not advance past the last logged {self.last_env_steps}")
        clean = {k: json_scalar(v) for k, v in row.items()}
        line = json.dumps(clean) + "\n"
        offset = self._jsonl.tell()
        try:
            self._jsonl.write(line)
            self._jsonl.flush()
        except OSError as err:
            self._discard_partial_row(offset)
            raise OSError(err.errno, f"cannot write a metrics row to {self._metrics_path}: {err.strerror or err}"
                          ) from err
        if self._tb is not None:
            # One event holding every scalar of the row, written out with the row (one write per
            # chunk: a live TensorBoard sees the row as soon as metrics.jsonl does).
            from tensorboardX.proto.summary_pb2 import Summary

            values = [Summary.Value(tag=k, simple_value=float(v)) for k, v in clean.items()
                      if k != "env_steps" and isinstance(v, (int, float)) and math.isfinite(v)]
            self._tb.add_summary(Summary(value=values), steps)
            self._tb.flush()
        self.last_env_steps = steps
        if not self.quiet:
            print(format_progress(clean, self.total_env_steps), file=self.stream, flush=True)

    def _discard_partial_row(self, offset: int) -> None:
        """After a failed write: drops whatever part of the row reached the file (best effort)."""
        try:
            self._jsonl.close()
        except OSError:
            pass  # the buffered bytes could not be flushed either; truncating below removes any part
        try:
            os.truncate(self._metrics_path, offset)
        except OSError:
            pass
        self._jsonl = open(self._metrics_path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def flush(self) -> None:
        self._jsonl.flush()
        if self._tb is not None:
            self._tb.flush()

    def close(self) -> None:
        if self._jsonl.closed:
            return
        try:
            self.flush()
        finally:
            self._jsonl.close()
            if self._tb is not None:
                self._tb.close()
                self._tb = None

    def __enter__(self) -> "Tracker":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Tracking:
    """The boundary hook that logs every chunk's rows: one :class:`Tracker` per member.

    A single run logs to ``run_dir`` and prints its progress there (unless ``quiet``); a sweep's
    member ``i`` logs to ``run_dir/members/<name_i>`` and the hook prints one line per chunk for
    the whole population. Without ``run_dir`` rows are only printed.

    Args:
        run_dir: the run directory, or None.
        program: the run's :class:`rljax.training.program.Program` (members' names, configs, seeds).
        total_env_steps: the plan's total, for the progress line.
        options: the run options saved in the manifest (``tensorboard`` is read).
        quiet: no progress lines.
        resume: continue the run's files; ``resume_env_steps`` and ``saved_rows`` as in :class:`Tracker`.
        manifest_extra: recorded in each member's manifest.
    """

    def __init__(self, run_dir: Any, program: Any, total_env_steps: int, options: Mapping[str, Any], *,
                 quiet: bool, resume: bool, resume_env_steps: int | None, saved_rows: list[Any] | None,
                 manifest_extra: Mapping[str, Any]):
        self.trackers: list[Tracker] = []
        self.program = program
        self.total_env_steps = total_env_steps
        saved_rows = saved_rows or [None] * program.size
        if run_dir is not None:
            process = provenance()  # once, not once per member
            for i, name in enumerate(program.names):
                extra = dict(manifest_extra)
                if program.isolated:
                    extra.update(sweep_member=i, sweep_dir=str(run_dir))
                self.trackers.append(Tracker(
                    pathlib.Path(run_dir) / "members" / name if program.isolated else run_dir, program.configs[i],
                    seed=program.seeds[i], tensorboard=options["tensorboard"], quiet=quiet or program.isolated,
                    total_env_steps=total_env_steps, resume=resume, resume_env_steps=resume_env_steps,
                    manifest_extra=extra, recovered_rows=[r for r in saved_rows[i:i + 1] if r], process=process))
        self.print_progress = (program.isolated or not self.trackers) and not quiet
        self._legend = program.isolated  # a sweep's progress lines are explained once, above the first

    def record(self, run: Any, chunk_index: int, rows: list[dict[str, Any]]) -> None:
        """Logs member ``i``'s row to its tracker; prints the progress line."""
        for tracker, row in zip(self.trackers, rows):
            tracker.log(row)
        if self.print_progress:
            if self.program.isolated:
                if self._legend:
                    print(population_legend(len(rows)), flush=True)
                    self._legend = False
                print(format_population_progress(rows, self.total_env_steps), flush=True)
            else:
                print(format_progress(rows[0], self.total_env_steps), flush=True)

    def rewind(self, env_steps: int, recovered_rows: list[Mapping[str, Any]]) -> None:
        """Every member's :meth:`Tracker.rewind`."""
        for tracker in self.trackers:
            tracker.rewind(env_steps, recovered_rows)

    def record_incident(self, incident: Mapping[str, Any]) -> None:
        """Every member's :meth:`Tracker.record_incident`."""
        for tracker in self.trackers:
            tracker.record_incident(incident)

    def close(self, run: Any = None) -> None:
        for tracker in self.trackers:
            tracker.close()


class EventFile:
    """One tensorboard event file (``DIR/events.out.tfevents.<time>.<host>``), written in the
    calling thread.

    tensorboardX's ``SummaryWriter`` starts a writer thread per directory and ``fsync``s its file at
    every flush: for a sweep of hundreds of members that is seconds of host time for the threads,
    their closing and the ``fsync``s (``benchmarks/results.md``). Rows come once per chunk, so
    writing them directly costs less than handing them to a thread. The file is the same: TFRecord framing (length, masked
    CRC-32C, payload, masked CRC-32C), a ``brain.Event:2`` header, then one event per row;
    ``purge_step`` (on a resume or rollback) adds the session-start event at that step, which makes
    TensorBoard drop the events of an earlier file from that step on, as
    ``SummaryWriter(purge_step=...)`` does. :meth:`flush` hands the bytes to the OS, as
    ``metrics.jsonl``'s flush does (no ``fsync``).
    """

    def __init__(self, logdir: str | os.PathLike, purge_step: int | None = None):
        import socket

        from tensorboardX.proto.event_pb2 import Event, SessionLog

        os.makedirs(logdir, exist_ok=True)
        self._event = Event
        base = os.path.join(str(logdir), f"events.out.tfevents.{str(time.time())[:10]}.{socket.gethostname()}")
        path, k = base, 0
        while os.path.exists(path):  # a second file in the same second (a quick rollback): never overwrite
            k += 1
            path = f"{base}.{k}"
        self.path = path
        self._file = open(path, "wb")  # noqa: SIM115 - closed in close()
        self._write(Event(wall_time=time.time(), file_version="brain.Event:2"))
        if purge_step is not None:
            self._write(Event(step=purge_step, wall_time=time.time(), file_version="brain.Event:2"))
            self._write(Event(step=purge_step, wall_time=time.time(), session_log=SessionLog(status=SessionLog.START)))

    def _write(self, event: Any) -> None:
        import struct

        from tensorboardX.record_writer import masked_crc32c

        data = event.SerializeToString()
        header = struct.pack("Q", len(data))
        self._file.write(header + struct.pack("I", masked_crc32c(header)) + data
                         + struct.pack("I", masked_crc32c(data)))

    def add_summary(self, summary: Any, step: int) -> None:
        """Appends one ``Summary`` proto at ``step`` (buffered until :meth:`flush`)."""
        self._write(self._event(summary=summary, step=step, wall_time=time.time()))

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


def _aside_name(path: pathlib.Path) -> pathlib.Path:
    """A free name beside ``path`` for keeping a damaged file: ``NAME.damaged-<unix time>[-k]``."""
    stamp = int(time.time())
    candidate = path.with_name(f"{path.name}.damaged-{stamp}")
    k = 1
    while candidate.exists():
        candidate = path.with_name(f"{path.name}.damaged-{stamp}-{k}")
        k += 1
    return candidate


def json_scalar(v: Any) -> Any:
    """``v`` as a JSON value: None, bool, int, str or a finite float (non-finite floats become None)."""
    if v is None or isinstance(v, (bool, int, str)):
        return v
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    if float(f).is_integer() and hasattr(v, "dtype") and "int" in str(v.dtype):
        return int(f)
    return f if math.isfinite(f) else None


def _atomic_write_json(path: pathlib.Path, obj: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")
    os.replace(tmp, path)
