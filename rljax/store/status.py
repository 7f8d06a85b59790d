"""A run's state for operators and tools: ``RUN_DIR/status.json``, kept current by the run, and
``RUN_DIR/stop.request``, how anyone who sees the directory asks the run to stop.

The run's leader rewrites ``status.json`` (atomically) when it starts, after every chunk and when it
ends: its state (``running``, then ``finished``, ``preempted`` or ``failed``), env steps done and
planned, the last chunk's steps/s, an ETA, the newest checkpoint, the holder (host, pid), when it
was written and after how long without a new chunk the run counts as stalled (the stall watchdog's
threshold), and its ``phase`` while it runs (``compiling``, then ``training``). :func:`read_status`
adds what only a reader can tell: ``stalled`` (a running run that has not written for longer than
that), ``failed`` for a ``running`` run whose holder on this host is gone (killed outright), and
``not started`` for a directory without the file; a run that is no longer running (finished,
preempted or failed) is in phase ``ended``, whatever phase it last wrote.

:func:`request_stop` writes ``stop.request``; the run takes it (:func:`take_stop_request`) at its
next chunk boundary and stops there as after SIGTERM (saved, exit status 75), every process of a
multi-process run at the same chunk. It works from any host that sees the run directory.
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import time
from typing import Any

__all__ = ["STATUS_FILE", "STOP_FILE", "STATES", "PHASES", "write_status", "read_status", "request_stop",
           "take_stop_request", "writer_alive"]

STATUS_FILE = "status.json"
STOP_FILE = "stop.request"
STATES = ("not started", "running", "stalled", "preempted", "finished", "failed")
"""What :func:`read_status` can say a run is."""
PHASES = ("compiling", "training", "ended")
"""What :func:`read_status` can say a started run is doing: a running (or stalled) run compiles, then
trains; any other is ``ended``."""


def _atomic_write(path: pathlib.Path, record: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def write_status(run_dir: str | os.PathLike, record: dict[str, Any]) -> None:
    """Writes ``record`` (with ``updated_unix``, the writer's host and pid) as ``RUN_DIR/status.json``."""
    _atomic_write(pathlib.Path(run_dir) / STATUS_FILE,
                  {**record, "updated_unix": time.time(), "host": socket.gethostname(), "pid": os.getpid()})


def writer_alive(record: dict[str, Any]) -> bool | None:
    """Whether the writer of ``record`` (its ``host`` and ``pid``) is a live process (None: it ran on another
    host, which cannot be told from here)."""
    pid = record.get("pid")
    if record.get("host") != socket.gethostname() or not isinstance(pid, int):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_status(run_dir: str | os.PathLike, now: float | None = None) -> dict[str, Any]:
    """The run's status: ``status.json`` with ``state`` as a reader sees it (see the module
    docstring) and ``age_s``, the seconds since the run last wrote it. A directory without the file
    is ``not started``; a damaged file raises ``ValueError`` naming it."""
    path = pathlib.Path(run_dir) / STATUS_FILE
    if not path.exists():
        return {"state": "not started", "run_dir": str(run_dir)}
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as err:
        raise ValueError(f"{path} is not valid JSON ({err})") from None
    now = time.time() if now is None else now
    try:
        if not isinstance(record, dict):
            raise TypeError(f"expected a JSON object, got {type(record).__name__}")
        record["age_s"] = max(0.0, now - float(record.get("updated_unix", now)))
        float(record.get("stall_after_s", 0.0))
    except (TypeError, ValueError) as err:
        raise ValueError(f"{path} is damaged ({err}); the run rewrites it at its next chunk") from None
    if record.get("state") == "running":
        if writer_alive(record) is False:
            record["state"], record["reason"] = "failed", "its process is gone (killed without stopping)"
        elif record["age_s"] > float(record.get("stall_after_s", float("inf"))):
            record["state"] = "stalled"
    if record.get("state") not in ("running", "stalled"):
        # The run writes its phase while it runs, and not at its end: "training" would still stand.
        record["phase"] = "ended"
    return record


def request_stop(run_dir: str | os.PathLike, requester: str = "") -> pathlib.Path:
    """Asks the run in ``run_dir`` to stop at its next chunk boundary (``RUN_DIR/stop.request``)."""
    path = pathlib.Path(run_dir) / STOP_FILE
    _atomic_write(path, {"requested_unix": time.time(), "host": socket.gethostname(), "pid": os.getpid(),
                         "by": requester})
    return path


def take_stop_request(run_dir: str | os.PathLike) -> dict[str, Any] | None:
    """The stop request in ``run_dir`` (removed: it is acted on once), or None."""
    path = pathlib.Path(run_dir) / STOP_FILE
    try:
        text = path.read_text(encoding="utf-8")
        path.unlink()
    except FileNotFoundError:
        return None
    try:
        record = json.loads(text)
    except ValueError:
        record = {}
    return record if isinstance(record, dict) else {}
