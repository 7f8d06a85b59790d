"""The run directory and every metric write: config, manifest, JSONL, tensorboard, progress.

Layout (a contract; ``docs/runbook.md`` describes each file)::

    RUN_DIR/
      config.json      the fully resolved config
      manifest.json    config hash, seed, git commit (+ dirty flag), package versions, devices, argv
      metrics.jsonl    one JSON object per log_every updates (per update by default); the row that ends a
                       chunk also has the chunk's columns (throughput, timings, evaluation)
      chunks.jsonl     one JSON object per chunk (what progress lines, health and PBT see)
      tb/              tensorboardX event files with metrics.jsonl's scalars
      tb/hparams/      the resolved config as tensorboard hparams and a "hyperparameters" text table
      checkpoints/     Orbax steps (written by rljax.store.checkpoint)

This is the only module that writes metrics. Nothing here runs inside compiled code: the host loop
calls :meth:`Tracker.log` once per chunk with already-reduced scalars (the chunk's row and its
finer rows). Run directories written before ``chunks.jsonl`` existed hold chunk rows in
``metrics.jsonl``: :func:`read_chunks` reads them there, and a resume starts ``chunks.jsonl`` from them.
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
import struct
import subprocess
import sys
import time
import warnings
from collections.abc import Mapping
from typing import Any, TextIO

__all__ = ["FINAL_RETURN_CHUNKS", "HPARAMS_DIR", "Tracker", "Tracking", "EventFile", "write_hparams", "write_hparams_metrics", "hparam_values", "json_scalar", "config_to_dict", "config_hash", "manifest", "provenance", "cost_totals",
           "read_metrics", "read_chunks", "boundary_line", "format_progress", "format_population_progress", "population_legend", "command_line",
           "package_version"]

FINAL_RETURN_CHUNKS = 2
"""How many of the last chunks that ended episodes a run's final training return averages
(:attr:`rljax.training.loop.TrainResult.final_return`, the ``done:`` line, ``rljax inspect``)."""

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


def _read_rows(path: pathlib.Path) -> list[dict[str, Any]]:
    rows = []
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


def read_metrics(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of ``RUN_DIR/metrics.jsonl``, one per ``log_every`` updates (a truncated last line,
    from a crash, is skipped): the learning curves."""
    return _read_rows(pathlib.Path(run_dir) / "metrics.jsonl")


def read_chunks(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of ``RUN_DIR/chunks.jsonl``, one per chunk; for a run directory written before
    that file existed, ``metrics.jsonl``'s (whose rows were per chunk then)."""
    path = pathlib.Path(run_dir) / "chunks.jsonl"
    return _read_rows(path if path.exists() else pathlib.Path(run_dir) / "metrics.jsonl")


def cost_totals(rows: list[Mapping[str, Any]], superseded: list[Mapping[str, Any]] = (),
                unlogged_checkpoint_bytes: int = 0) -> dict[str, Any]:
    """What a run cost so far (``manifest.json``'s ``cost``), from its chunk rows' ``cost/*`` and
    ``memory/*`` columns (``docs/metrics.md``).

    Args:
        rows: the run's chunk rows (``chunks.jsonl``; a sweep's member 0: the members share every chunk).
        superseded: the rows of chunks computed and then taken back (``chunks.superseded.jsonl``: a
            resume from an earlier checkpoint, a rollback): their device time was spent too.
        unlogged_checkpoint_bytes: bytes of the saves that are in no row (each session's last one).

    Returns:
        ``device_s`` (kept and superseded chunks), ``env_steps`` (the run's progress),
        ``env_steps_computed`` (kept and superseded), ``env_steps_per_device_s``
        (computed / device_s), ``checkpoint_bytes`` (rows + unlogged), ``unlogged_checkpoint_bytes``,
        ``collective_bytes_per_update`` (the last row's), ``peak_memory_bytes`` (the largest
        ``memory/peak_bytes_in_use``; None where the backend reports none), ``chunks`` and
        ``superseded_chunks``.
    """
    def total(column: str, of: Any) -> float:
        return float(sum(float(r.get(column) or 0.0) for r in of))

    every = [*rows, *superseded]
    device_s = total("cost/device_s", every)
    computed = float(sum(float(r.get("cost/env_steps_per_device_s") or 0.0) * float(r.get("cost/device_s") or 0.0)
                         for r in every))
    peaks = [int(r["memory/peak_bytes_in_use"]) for r in every if r.get("memory/peak_bytes_in_use") is not None]
    collective = [r["cost/collective_bytes_per_update"] for r in (rows or superseded)
                  if "cost/collective_bytes_per_update" in r]  # the layout the run ends on
    return {"device_s": device_s, "env_steps": int(rows[-1]["env_steps"]) if rows else 0,
            "env_steps_computed": round(computed), "env_steps_per_device_s": computed / device_s if device_s else None,
            "checkpoint_bytes": int(total("cost/checkpoint_bytes", every)) + int(unlogged_checkpoint_bytes),
            "unlogged_checkpoint_bytes": int(unlogged_checkpoint_bytes),
            "collective_bytes_per_update": int(collective[-1]) if collective else None,
            "peak_memory_bytes": max(peaks) if peaks else None, "chunks": len(rows),
            "superseded_chunks": len(superseded)}


def boundary_line(row: Mapping[str, Any], lines: list[Mapping[str, Any]] | None) -> dict[str, Any]:
    """The ``metrics.jsonl`` row that ends a chunk: its last finer row (``lines[-1]``), with the
    chunk row's other columns (throughput, timings, evaluation, ...) beside it; ``row`` itself
    when there are no finer rows."""
    return {**row, **(lines[-1] if lines else {})}


def format_progress(row: Mapping[str, Any], total_env_steps: int, members: int = 1) -> str:
    """One progress line: steps done, steps/s, ETA, the recent return and, on a chunk that was
    evaluated, the greedy evaluation's mean return. With ``members > 1`` (a sweep) the steps are
    each member's and the steps/s all members', so the ETA is ``(total - steps) * members / sps``."""
    steps = int(row["env_steps"])
    sps = float(row.get("sps") or 0.0)
    eta = (total_env_steps - steps) * members / sps if sps > 0 else float("nan")
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
    return format_progress(row, total_env_steps, len(rows)) + best + best_eval


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
    """Owns a run directory: writes config and manifest once, then each chunk's rows.

    A chunk's row goes to ``chunks.jsonl``; its finer rows (one per ``log_every`` updates, the last
    one with the chunk row's other columns: :func:`boundary_line`) to ``metrics.jsonl`` and
    tensorboard under ``tb/`` (flushed per chunk; rows that cannot be written whole, say on a full
    disk, are cut back off so a file never ends in a partial row). On resume, pass
    ``resume=True``: files are appended, never truncated, and rows whose ``env_steps`` is not
    beyond the last logged one are refused so curves never overlap.

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
            checkpoint) are moved to ``metrics.superseded.jsonl`` and ``chunks.superseded.jsonl``
            (kept, not deleted), and
            tensorboard is told to purge its events after that step, so the continued curves
            neither overlap nor restart.
        recovered_rows: rows saved with the checkpoint (its own chunk's row): any of them missing
            from ``chunks.jsonl`` (a deleted file, a last line cut short by a crash) is put back.
        recovered_lines: the same for ``metrics.jsonl`` (the chunk's :func:`boundary_line`).
        process: this process's :func:`provenance` when the caller has it (a sweep's members share one).
    """

    def __init__(self, run_dir: str | os.PathLike, config: Any, *, seed: int | None = None,
                 resume: bool = False, tensorboard: bool = True, quiet: bool = False,
                 total_env_steps: int = 0, manifest_extra: Mapping[str, Any] | None = None,
                 stream: TextIO | None = None, resume_env_steps: int | None = None,
                 recovered_rows: list[Mapping[str, Any]] | None = None, process: Mapping[str, Any] | None = None,
                 recovered_lines: list[Mapping[str, Any]] | None = None):
        self.run_dir = pathlib.Path(run_dir)
        self.quiet = quiet
        self.total_env_steps = total_env_steps
        self.stream = stream or sys.stdout
        self._tensorboard = tensorboard
        metrics_path = self.run_dir / "metrics.jsonl"
        self._metrics_path = metrics_path
        self._chunks_path = self.run_dir / "chunks.jsonl"
        if not resume and metrics_path.exists() and metrics_path.stat().st_size > 0:
            raise FileExistsError(
                f"run directory {str(self.run_dir)!r} already holds metrics; resume it "
                f"(`rljax resume {self.run_dir}`: from its newest checkpoint, or from scratch if it has none) "
                f"or choose a new --run-dir")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.last_env_steps = self.last_chunk_steps = -1
        purge_step = None
        if resume:
            if not self._chunks_path.exists() and metrics_path.exists():  # written before chunks.jsonl existed
                self._chunks_path.write_bytes(metrics_path.read_bytes())
            if resume_env_steps is not None:
                self._rewrite_rows(resume_env_steps, recovered_rows or [], recovered_lines or [])
                purge_step = resume_env_steps + 1
            self._read_last_steps()
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
                **{k: manifest_extra[k] for k in ("determinism", "layout") if manifest_extra and k in manifest_extra}})
            _atomic_write_json(self.run_dir / "manifest.json", record)
        else:
            _atomic_write_json(self.run_dir / "config.json", config_to_dict(config))
            _atomic_write_json(self.run_dir / "manifest.json", manifest(config, seed, manifest_extra, process))
        self._open_files()
        self._tb = None
        self._open_tensorboard(purge_step)
        self._hparams_last: dict[str, tuple[int, float]] = {}  # metric -> (env_steps, value), this session's
        if tensorboard:
            write_hparams(self.run_dir / "tb" / HPARAMS_DIR, config)

    def _open_files(self) -> None:
        self._jsonl = open(self._metrics_path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._chunks = open(self._chunks_path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def _read_last_steps(self) -> None:
        lines, rows = read_metrics(self.run_dir), read_chunks(self.run_dir)
        self.last_env_steps = int(lines[-1]["env_steps"]) if lines else -1
        self.last_chunk_steps = int(rows[-1]["env_steps"]) if rows else -1

    def _open_tensorboard(self, purge_step: int | None) -> None:
        if self._tensorboard:
            self._tb = EventFile(self.run_dir / "tb", purge_step)

    def add_image(self, tag: str, encoded: bytes, height: int, width: int, step: int) -> None:
        """Writes an encoded picture (PNG, or an animated GIF: TensorBoard shows it moving) to
        tensorboard at ``step`` and flushes; nothing without tensorboard."""
        if self._tb is not None:
            self._tb.add_image(tag, encoded, height, width, step)
            self._tb.flush()

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

    def _rewrite_rows(self, keep_env_steps: int, recovered_rows: list[Mapping[str, Any]],
                      recovered_lines: list[Mapping[str, Any]]) -> None:
        """Keeps the rows of both files up to ``keep_env_steps`` (later ones move to the file's
        ``.superseded.jsonl``), drops undecodable lines (kept there too) and puts back recovered rows."""
        _rewrite(self._chunks_path, keep_env_steps, recovered_rows)
        _rewrite(self._metrics_path, keep_env_steps, recovered_lines or recovered_rows)

    def rewind(self, env_steps: int, recovered_rows: list[Mapping[str, Any]] | None = None,
               recovered_lines: list[Mapping[str, Any]] | None = None) -> None:
        """Takes the run back to ``env_steps`` (a rollback to a checkpoint, or 0): later rows move to
        the ``.superseded.jsonl`` files and tensorboard purges the events after that step."""
        self._hparams_last = {}  # taken back with the rows
        self.close()
        self._rewrite_rows(env_steps, list(recovered_rows or []), list(recovered_lines or []))
        self._read_last_steps()
        self._open_files()
        self._open_tensorboard(env_steps + 1)

    def record_incident(self, incident: Mapping[str, Any]) -> None:
        """Appends ``incident`` (JSON-able) to the manifest's ``incidents`` list."""
        record = self._read_manifest() or {}
        record.setdefault("incidents", []).append({"unix_time": time.time(), **dict(incident)})
        _atomic_write_json(self.run_dir / "manifest.json", record)

    def log(self, row: Mapping[str, Any], lines: list[Mapping[str, Any]] | None = None) -> None:
        """Writes one chunk's rows: ``row`` (must have the :data:`REQUIRED_KEYS`; all values
        scalars or None) to ``chunks.jsonl``, and its finer ``lines`` (one per ``log_every``
        updates, each with ``env_steps``; None: ``row`` alone) to ``metrics.jsonl`` and
        tensorboard, the last one as :func:`boundary_line`.

        Raises:
            OSError: the rows could not be written (e.g. a full disk); each file is cut back to
                its last complete row first.
        """
        missing = [k for k in REQUIRED_KEYS if k not in row]
        if missing:
            raise ValueError(f"metrics row lacks required keys {missing}; has {sorted(row)}")
        steps = int(row["env_steps"])
        if steps <= self.last_chunk_steps:
            raise ValueError(f"env_steps {steps} does not advance past the last logged {self.last_chunk_steps}")
        clean = {k: json_scalar(v) for k, v in row.items()}
        dense = [{k: json_scalar(v) for k, v in line.items()}
                 for line in [*(lines or [])[:-1], boundary_line(row, lines)]]
        line_steps = [self.last_env_steps, *(int(line["env_steps"]) for line in dense)]
        if any(b <= a for a, b in zip(line_steps, line_steps[1:])) or line_steps[-1] != steps:
            raise ValueError(f"the rows of the chunk ending at env step {steps:,} do not advance past the last "
                             f"logged row one by one to the chunk's end: {line_steps}")
        self._append(self._jsonl, self._metrics_path, "".join(json.dumps(line) + "\n" for line in dense))
        self._append(self._chunks, self._chunks_path, json.dumps(clean) + "\n")
        for line in dense:
            for name in HPARAMS_METRICS:
                if isinstance(line.get(name), (int, float)) and not isinstance(line.get(name), bool):
                    self._hparams_last[name] = (int(line["env_steps"]), float(line[name]))
        if self._tb is not None:
            # One event per row holding every scalar of the row, written out with the chunk (a
            # live TensorBoard sees the rows as soon as metrics.jsonl does). json_scalar left
            # only finite floats, ints, bools, strings and None.
            for line in dense:
                self._tb.add_scalars({k: v for k, v in line.items() if k != "env_steps" and v is not None
                                      and not isinstance(v, str)}, int(line["env_steps"]))
            self._tb.flush()
        self.last_env_steps = self.last_chunk_steps = steps
        if not self.quiet:
            print(format_progress(clean, self.total_env_steps), file=self.stream, flush=True)

    def _append(self, file: TextIO, path: pathlib.Path, text: str) -> None:
        """Writes ``text`` (whole rows) to ``file`` and flushes; on failure cuts the file back to
        its length before (:meth:`_discard_partial_row`) and raises ``OSError`` naming it."""
        offset = file.tell()
        try:
            file.write(text)
            file.flush()
        except OSError as err:
            self._discard_partial_row(file, path, offset)
            raise OSError(err.errno, f"cannot write a metrics row to {path}: {err.strerror or err}") from err

    def _discard_partial_row(self, file: TextIO, path: pathlib.Path, offset: int) -> None:
        """After a failed write: drops whatever part of the rows reached ``path`` (best effort)."""
        try:
            file.close()
        except OSError:
            pass  # the buffered bytes could not be flushed either; truncating below removes any part
        try:
            os.truncate(path, offset)
        except OSError:
            pass
        reopened = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        if file is self._jsonl:
            self._jsonl = reopened
        else:
            self._chunks = reopened

    def flush(self) -> None:
        self._jsonl.flush()
        self._chunks.flush()
        if self._tb is not None:
            self._tb.flush()

    def close(self) -> None:
        if self._jsonl.closed:
            return
        try:
            if self._tb is not None and self._hparams_last:
                write_hparams_metrics(self.run_dir / "tb" / HPARAMS_DIR, self._hparams_last)
            self.flush()
        finally:
            self._jsonl.close()
            self._chunks.close()
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
        resume: continue the run's files; ``resume_env_steps``, ``saved_rows`` and ``saved_lines``
            (per member) as in :class:`Tracker`'s ``recovered_rows`` and ``recovered_lines``.
        manifest_extra: recorded in each member's manifest.
    """

    def __init__(self, run_dir: Any, program: Any, total_env_steps: int, options: Mapping[str, Any], *,
                 quiet: bool, resume: bool, resume_env_steps: int | None, saved_rows: list[Any] | None,
                 manifest_extra: Mapping[str, Any], saved_lines: list[Any] | None = None):
        self.trackers: list[Tracker] = []
        self.program = program
        self.total_env_steps = total_env_steps
        saved_rows = saved_rows or [None] * program.size
        saved_lines = saved_lines or [None] * program.size
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
                    manifest_extra=extra, recovered_rows=[r for r in saved_rows[i:i + 1] if r], process=process,
                    recovered_lines=[r for r in saved_lines[i:i + 1] if r]))
        self.print_progress = (program.isolated or not self.trackers) and not quiet
        self._legend = program.isolated  # a sweep's progress lines are explained once, above the first

    def record(self, run: Any, chunk_index: int, rows: list[dict[str, Any]]) -> None:
        """Logs member ``i``'s row and finer rows (``run.update_rows``) to its tracker; prints the
        progress line."""
        lines = getattr(run, "update_rows", None) or [None] * len(rows)
        for tracker, row, member_lines in zip(self.trackers, rows, lines):
            tracker.log(row, member_lines)
        if self.print_progress:
            if self.program.isolated:
                if self._legend:
                    print(population_legend(len(rows)), flush=True)
                    self._legend = False
                print(format_population_progress(rows, self.total_env_steps), flush=True)
            else:
                print(format_progress(rows[0], self.total_env_steps), flush=True)

    def rewind(self, env_steps: int, recovered_rows: list[Mapping[str, Any]],
               recovered_lines: list[Mapping[str, Any]] | None = None) -> None:
        """Every member's :meth:`Tracker.rewind`."""
        for tracker in self.trackers:
            tracker.rewind(env_steps, recovered_rows, recovered_lines)

    def record_incident(self, incident: Mapping[str, Any]) -> None:
        """Every member's :meth:`Tracker.record_incident`."""
        for tracker in self.trackers:
            tracker.record_incident(incident)

    def add_image(self, member: int, tag: str, encoded: bytes, height: int, width: int, step: int) -> None:
        """Member ``member``'s :meth:`Tracker.add_image` (nothing without a run directory)."""
        if self.trackers:
            self.trackers[member].add_image(tag, encoded, height, width, step)

    def close(self, run: Any = None) -> None:
        for tracker in self.trackers:
            tracker.close()

    def record_cost(self, unlogged_checkpoint_bytes: int) -> None:
        """Writes the run's :func:`cost_totals` into its ``manifest.json`` (a sweep's: the sweep
        directory's, from member 0's rows), adding ``unlogged_checkpoint_bytes`` (this session's saves
        that are in no row) to the earlier sessions'. Nothing without a run directory."""
        if not self.trackers:
            return
        rows_dir = pathlib.Path(self.trackers[0].run_dir)
        path = (rows_dir.parent.parent if self.program.isolated else rows_dir) / "manifest.json"
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            return  # a missing or damaged manifest is the resume's to report (Tracker), not overwritten here
        before = int((record.get("cost") or {}).get("unlogged_checkpoint_bytes") or 0)
        record["cost"] = cost_totals(read_chunks(rows_dir), _read_rows(rows_dir / "chunks.superseded.jsonl"),
                                     before + int(unlogged_checkpoint_bytes))
        _atomic_write_json(path, record)


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
        self._write_bytes(event.SerializeToString())

    def _write_bytes(self, data: bytes) -> None:
        from tensorboardX.record_writer import masked_crc32c

        header = struct.pack("Q", len(data))
        self._file.write(header + struct.pack("I", masked_crc32c(header)) + data
                         + struct.pack("I", masked_crc32c(data)))

    def add_scalars(self, values: Mapping[str, float], step: int) -> None:
        """Appends one event at ``step`` whose summary holds ``values`` (tag -> number) as
        ``simple_value`` float32 scalars (buffered until :meth:`flush`).

        The ``Summary`` is serialised by hand (field 1, repeated ``Value``: its ``tag``, field 1,
        and ``simple_value``, field 2, a fixed32) and appended to the event's step and time as
        field 5 (protobuf concatenation): building ``Summary`` and ``Event`` messages copied every
        value and cost more than the rest of a row's logging together."""
        body = bytearray()
        for tag, value in values.items():
            name = tag.encode()
            item = b"\x0a" + _varint(len(name)) + name + b"\x15" + _FLOAT32.pack(float(value))
            body += b"\x0a" + _varint(len(item)) + item
        head = self._event(step=step, wall_time=time.time()).SerializeToString()
        self._write_bytes(head + b"\x2a" + _varint(len(body)) + bytes(body))

    def add_summary(self, summary: Any, step: int) -> None:
        """Appends one event at ``step`` holding ``summary`` (a tensorboardX ``Summary``)."""
        self._write(self._event(step=step, wall_time=time.time(), summary=summary))

    def add_image(self, tag: str, encoded: bytes, height: int, width: int, step: int) -> None:
        """Appends an encoded RGB picture (PNG, or a GIF: TensorBoard's image tab animates it) at ``step``."""
        from tensorboardX.proto.summary_pb2 import Summary

        image = Summary.Image(height=int(height), width=int(width), colorspace=3, encoded_image_string=bytes(encoded))
        self.add_summary(Summary(value=[Summary.Value(tag=tag, image=image)]), step)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


HPARAMS_DIR = "hparams"
"""The folder under ``tb/`` that holds the run's hyperparameters (:func:`write_hparams`)."""

HPARAMS_METRICS = ("episode_return_mean", "eval/return_mean", "episode_length_mean")
"""The metrics TensorBoard's hparams table shows beside each run's hyperparameters (their last values,
:func:`write_hparams_metrics`)."""


def hparam_values(config: Any) -> dict[str, bool | int | float | str]:
    """The resolved config as hparam values: numbers, bools and strings as they are, anything else
    (tuples, dicts, None) as its JSON text."""
    return {k: v if isinstance(v, (bool, int, float, str)) else json.dumps(v)
            for k, v in sorted(config_to_dict(config).items())}


def write_hparams(logdir: str | os.PathLike, config: Any) -> pathlib.Path | None:
    """Writes the resolved config to tensorboard once: the hparams plugin's experiment and session
    (TensorBoard's HPARAMS tab) and CleanRL's ``hyperparameters`` text table (the TEXT tab).

    They go to an event file of their own in ``logdir`` (``tb/hparams``), a child run of the run's
    ``tb/`` (as tensorboardX's ``add_hparams`` does), so the scalar event files hold only the rows'
    scalars; the hparams table's metrics (:data:`HPARAMS_METRICS`) are read from the same child run,
    where each session's last values are written when it closes (:func:`write_hparams_metrics`).
    Nothing is written when ``logdir`` already holds an event file (a resumed run), so a run has its
    hyperparameters once.

    Args:
        logdir: the folder for the event file (created if missing).
        config: the resolved config (a dataclass).

    Returns:
        The event file written, or None when one was there already.
    """
    from tensorboardX.proto.api_pb2 import DataType, Experiment, HParamInfo, MetricInfo, MetricName
    from tensorboardX.proto.plugin_hparams_pb2 import HParamsPluginData, SessionStartInfo
    from tensorboardX.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboardX.summary import text

    logdir = pathlib.Path(logdir)
    if logdir.is_dir() and any(logdir.glob("events.out.tfevents.*")):
        return None
    values = hparam_values(config)
    start, infos = SessionStartInfo(), []
    for name, value in values.items():
        if isinstance(value, bool):
            start.hparams[name].bool_value = value
            kind = "DATA_TYPE_BOOL"
        elif isinstance(value, (int, float)):
            start.hparams[name].number_value = float(value)
            kind = "DATA_TYPE_FLOAT64"
        else:
            start.hparams[name].string_value = value
            kind = "DATA_TYPE_STRING"
        infos.append(HParamInfo(name=name, type=DataType.Value(kind)))
    experiment = Experiment(hparam_infos=infos,
                            metric_infos=[MetricInfo(name=MetricName(tag=t)) for t in HPARAMS_METRICS])

    def plugin(tag: str, data: Any) -> Any:
        metadata = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="hparams",
                                                                          content=data.SerializeToString()))
        return Summary(value=[Summary.Value(tag=tag, metadata=metadata)])

    table = "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in values.items())
    events = EventFile(logdir)
    try:
        events.add_summary(plugin("_hparams_/experiment", HParamsPluginData(experiment=experiment, version=0)), 0)
        events.add_summary(plugin("_hparams_/session_start_info", HParamsPluginData(session_start_info=start, version=0)), 0)
        events.add_summary(text("hyperparameters", table), 0)
    finally:
        events.close()
    return pathlib.Path(events.path)


def write_hparams_metrics(logdir: str | os.PathLike, last: Mapping[str, tuple[int, float]]) -> None:
    """Writes the hparams table's metrics, ``{tag: (env_steps, value)}`` (a session's last value of each
    of :data:`HPARAMS_METRICS`), as scalars to a new event file in ``logdir`` (``tb/hparams``): the
    table shows each metric's value at its latest step, so a resumed run's later values win."""
    events = EventFile(logdir)
    try:
        for tag, (step, value) in sorted(last.items()):
            events.add_scalars({tag: value}, step)
    finally:
        events.close()


def _rewrite(path: pathlib.Path, keep_env_steps: int, recovered_rows: list[Mapping[str, Any]]) -> None:
    """Keeps the rows of the JSONL file ``path`` up to ``keep_env_steps`` (moving later ones to
    ``<name>.superseded.jsonl``), drops undecodable lines (kept there too) and puts back
    ``recovered_rows`` that are missing."""
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines() if path.exists() else []
    if not path.exists() and recovered_rows:
        warnings.warn(f"{path} is missing: starting a new one from the checkpoint's row; earlier rows are "
                      f"lost", stacklevel=4)
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
        with open(path.with_name(path.stem + ".superseded.jsonl"), "a", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in superseded))
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
    os.replace(tmp, path)


_FLOAT32 = struct.Struct("<f")


def _varint(n: int) -> bytes:
    """``n`` (>= 0) as a protobuf varint."""
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


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
