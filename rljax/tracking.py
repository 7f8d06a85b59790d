"""The run directory and every metric write: config, manifest, JSONL, tensorboard, progress.

Layout (a contract; see ``docs/run_directory.md``)::

    RUN_DIR/
      config.json      the fully resolved config
      manifest.json    config hash, seed, git commit (+ dirty flag), package versions, devices, argv
      metrics.jsonl    one JSON object per chunk
      tb/              tensorboardX event files with the same scalars
      checkpoints/     Orbax steps (written by rljax.checkpoint)

This is the only module that writes metrics. Nothing here runs inside compiled code: the host loop
calls :meth:`Tracker.log` once per chunk with already-reduced scalars.
"""

from __future__ import annotations

import dataclasses
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
from collections.abc import Mapping
from typing import Any, TextIO

__all__ = ["Tracker", "config_to_dict", "config_hash", "manifest", "read_metrics", "format_progress"]

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
    root = pathlib.Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                    capture_output=True, text=True, timeout=10, check=True).stdout.strip())
        return {"git_commit": commit, "git_dirty": dirty}
    except (OSError, subprocess.SubprocessError):
        return {"git_commit": None, "git_dirty": None}


def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def manifest(config: Any, seed: int | None = None, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What produced a run: config hash, seed, code version, packages, devices, command line."""
    import jax

    return {
        "config_hash": config_hash(config),
        "seed": seed,
        **_git_state(),
        "packages": _versions(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "devices": [str(d) for d in jax.devices()],
        "backend": jax.default_backend(),
        "argv": list(sys.argv),
        "created_unix": time.time(),
        **(dict(extra) if extra else {}),
    }


def read_metrics(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of ``RUN_DIR/metrics.jsonl`` (a truncated last line, from a crash, is skipped)."""
    rows = []
    path = pathlib.Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return rows
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def format_progress(row: Mapping[str, Any], total_env_steps: int) -> str:
    """One progress line: steps done, steps/s, ETA and the recent return."""
    steps = int(row["env_steps"])
    sps = float(row.get("sps") or 0.0)
    eta = (total_env_steps - steps) / sps if sps > 0 else float("nan")
    ret = row.get("episode_return_mean")
    ret_s = "   n/a" if ret is None or (isinstance(ret, float) and math.isnan(ret)) else f"{ret:8.2f}"
    pct = 100.0 * steps / max(total_env_steps, 1)
    return (f"[{pct:5.1f}%] steps {steps:>10,d}/{total_env_steps:,d}  sps {sps:>9,.0f}  "
            f"eta {_fmt_s(eta)}  return {ret_s}")


def _fmt_s(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "  --  "
    m, s = divmod(int(seconds + 0.5), 60)
    return f"{m:3d}m{s:02d}s"


class Tracker:
    """Owns a run directory: writes config and manifest once, then one metrics row per chunk.

    Rows go to ``metrics.jsonl`` (flushed per row, so a crash loses at most the row being written)
    and to tensorboard under ``tb/``. On resume, pass ``resume=True``: files are appended, never
    truncated, and rows whose ``env_steps`` is not beyond the last logged one are refused so curves
    never overlap.

    Args:
        run_dir: the run directory; created if missing.
        config: the resolved config (a dataclass); written to ``config.json``.
        seed: recorded in the manifest.
        resume: append to an existing run instead of starting one.
        tensorboard: also write tensorboardX events.
        quiet: do not print progress lines.
        total_env_steps: for the progress line's percentage and ETA.
        resume_env_steps: on resume, the env step of the checkpoint the run continues from. Rows
            logged after it (by chunks that ran after the last checkpoint) are moved to
            ``metrics.superseded.jsonl`` (kept, not deleted), and tensorboard is told to purge its
            events after that step, so the continued curves neither overlap nor restart.
    """

    def __init__(self, run_dir: str | os.PathLike, config: Any, *, seed: int | None = None,
                 resume: bool = False, tensorboard: bool = True, quiet: bool = False,
                 total_env_steps: int = 0, manifest_extra: Mapping[str, Any] | None = None,
                 stream: TextIO | None = None, resume_env_steps: int | None = None):
        self.run_dir = pathlib.Path(run_dir)
        self.quiet = quiet
        self.total_env_steps = total_env_steps
        self.stream = stream or sys.stdout
        metrics_path = self.run_dir / "metrics.jsonl"
        if not resume and metrics_path.exists() and metrics_path.stat().st_size > 0:
            raise FileExistsError(
                f"run directory {str(self.run_dir)!r} already holds metrics; resume it "
                f"(`rljax resume {self.run_dir}`) or choose a new --run-dir")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.last_env_steps = -1
        purge_step = None
        if resume:
            rows = read_metrics(self.run_dir)
            if resume_env_steps is not None:
                kept = [r for r in rows if int(r["env_steps"]) <= resume_env_steps]
                superseded = [r for r in rows if int(r["env_steps"]) > resume_env_steps]
                if superseded or len(kept) != len(metrics_path.read_text().splitlines()):
                    with open(self.run_dir / "metrics.superseded.jsonl", "a", encoding="utf-8") as f:
                        for r in superseded:
                            f.write(json.dumps(r) + "\n")
                    tmp = metrics_path.with_suffix(".jsonl.tmp")
                    tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
                    os.replace(tmp, metrics_path)
                rows = kept
                purge_step = resume_env_steps + 1
            if rows:
                self.last_env_steps = int(rows[-1]["env_steps"])
            # The resolved config may differ in resumable fields (an extended total_timesteps);
            # the manifest keeps the original provenance and records each resume.
            _atomic_write_json(self.run_dir / "config.json", config_to_dict(config))
            manifest_path = self.run_dir / "manifest.json"
            record = json.loads(manifest_path.read_text()) if manifest_path.exists() else \
                manifest(config, seed, manifest_extra)
            record.setdefault("resumes", []).append({
                "from_env_steps": resume_env_steps, "argv": list(sys.argv), "unix_time": time.time(),
                "config_hash": config_hash(config), **_git_state()})
            _atomic_write_json(manifest_path, record)
        else:
            _atomic_write_json(self.run_dir / "config.json", config_to_dict(config))
            _atomic_write_json(self.run_dir / "manifest.json", manifest(config, seed, manifest_extra))
        self._jsonl = open(metrics_path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._tb = None
        if tensorboard:
            from tensorboardX import SummaryWriter

            self._tb = SummaryWriter(str(self.run_dir / "tb"), flush_secs=30, purge_step=purge_step)

    def log(self, row: Mapping[str, Any]) -> None:
        """Writes one metrics row (must have ``env_steps``; all values scalars or None)."""
        missing = [k for k in REQUIRED_KEYS if k not in row]
        if missing:
            raise ValueError(f"metrics row lacks required keys {missing}; has {sorted(row)}")
        steps = int(row["env_steps"])
        if steps <= self.last_env_steps:
            raise ValueError(f"env_steps {steps} does not advance past the last logged {self.last_env_steps}")
        clean = {k: _scalar(v) for k, v in row.items()}
        self._jsonl.write(json.dumps(clean) + "\n")
        self._jsonl.flush()
        if self._tb is not None:
            # One event holding every scalar of the row: the writer thread wakes once per chunk.
            from tensorboardX.proto.summary_pb2 import Summary

            values = [Summary.Value(tag=k, simple_value=float(v)) for k, v in clean.items()
                      if k != "env_steps" and isinstance(v, (int, float)) and math.isfinite(v)]
            self._tb._get_file_writer().add_summary(Summary(value=values), global_step=steps)
        self.last_env_steps = steps
        if not self.quiet:
            print(format_progress(clean, self.total_env_steps), file=self.stream, flush=True)

    def flush(self) -> None:
        self._jsonl.flush()
        if self._tb is not None:
            self._tb.flush()

    def close(self) -> None:
        if self._jsonl.closed:
            return
        self.flush()
        self._jsonl.close()
        if self._tb is not None:
            self._tb.close()

    def __enter__(self) -> "Tracker":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _scalar(v: Any) -> Any:
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
