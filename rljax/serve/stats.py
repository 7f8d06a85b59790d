"""A policy server's figures: requests/s, batch sizes, queue wait, latency percentiles, errors per client.

:class:`ServeStats` is fed by the server's threads (thread-safe) and read as a :meth:`ServeStats.record`:
totals since the start, and for the last window (since the previous record) the rates, the batch size
distribution, and the p50/p99 of queue wait (a request's arrival to its batch's start) and latency
(its arrival to its reply's queueing). :func:`write_serve_status` keeps ``DIR/serve.json`` current
(atomically) and appends each record to ``DIR/serve.jsonl``; ``rljax status DIR`` reads it
(:func:`read_serve_status`, :func:`serve_line`).
"""

from __future__ import annotations

import collections
import json
import os
import pathlib
import socket
import threading
import time
from typing import Any

import numpy as np

from rljax.store.status import writer_alive

__all__ = ["SERVE_FILE", "SERVE_LOG", "ServeStats", "is_serve_dir", "read_serve_status", "serve_line",
           "write_serve_status"]

SERVE_FILE = "serve.json"
SERVE_LOG = "serve.jsonl"
_WINDOW = 100_000
"""The most latencies a window keeps (a uniform sample beyond that would bias nothing we report)."""


class ServeStats:
    """Counters and the current window's samples (see the module docstring)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.started = time.time()
        self._t0 = time.perf_counter()
        self.totals = collections.Counter()
        self.errors: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self._reset_window(self._t0)

    def _reset_window(self, now: float) -> None:
        self._window_start = now
        self._wait: list[float] = []
        self._latency: list[float] = []
        self._batch_rows: collections.Counter = collections.Counter()
        self._batch_requests: collections.Counter = collections.Counter()
        self._window = collections.Counter()

    def count(self, what: str, n: int = 1) -> None:
        """Adds ``n`` to the total and the window's count of ``what`` (``requests``, ``rows``, ``refused``,
        ``connections``, ``reloads``, ...)."""
        with self._lock:
            self.totals[what] += n
            self._window[what] += n

    def error(self, client: str, kind: str) -> None:
        """Counts an error of ``kind`` (``refused``, ``protocol``, ``token``, ``stalled``, ...) for ``client``
        (its address, without the port: one host's connections together)."""
        with self._lock:
            self.errors[client][kind] += 1
            self.totals[f"errors_{kind}"] += 1
            self._window["errors"] += 1

    def batch(self, rows: int, requests: int, waits: list[float]) -> None:
        """A batch of ``rows`` rows from ``requests`` requests, which waited ``waits`` seconds in the queue."""
        with self._lock:
            self._batch_rows[rows] += 1
            self._batch_requests[requests] += 1
            self.totals["batches"] += 1
            self._window["batches"] += 1
            if len(self._wait) < _WINDOW:
                self._wait.extend(waits)

    def replied(self, latencies_s: list[float]) -> None:
        """Replies were queued, each ``latencies_s[i]`` seconds after its request arrived."""
        with self._lock:
            if len(self._latency) < _WINDOW:
                self._latency.extend(latencies_s)

    def record(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """The figures now, and the window since the previous call (which starts a new one)."""
        now = time.perf_counter()
        with self._lock:
            span = max(now - self._window_start, 1e-9)
            window, wait, latency = self._window, np.asarray(self._wait), np.asarray(self._latency)
            rows, requests = dict(self._batch_rows), dict(self._batch_requests)
            totals, errors = dict(self.totals), {k: dict(v) for k, v in self.errors.items()}
            self._reset_window(now)
        ms = lambda x, q: None if x.size == 0 else round(float(np.percentile(x, q)) * 1e3, 3)  # noqa: E731
        batches = sum(rows.values())
        return {
            **(extra or {}), "uptime_s": round(now - self._t0, 3), "started_unix": self.started,
            "totals": totals, "errors_by_client": errors,
            "window_s": round(span, 3),
            "requests_per_s": round(window["requests"] / span, 2), "rows_per_s": round(window["rows"] / span, 2),
            "batches": batches,
            "mean_batch_rows": None if not batches else round(sum(k * v for k, v in rows.items()) / batches, 2),
            "batch_rows": {str(k): v for k, v in sorted(rows.items())},
            "batch_requests": {str(k): v for k, v in sorted(requests.items())},
            "queue_wait_ms": {"p50": ms(wait, 50), "p99": ms(wait, 99)},
            "latency_ms": {"p50": ms(latency, 50), "p99": ms(latency, 99), "max": ms(latency, 100)},
        }


def write_serve_status(directory: str | os.PathLike, record: dict[str, Any]) -> None:
    """``record`` (with ``updated_unix``, host and pid) as ``DIR/serve.json`` and a line of ``DIR/serve.jsonl``."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    record = {**record, "updated_unix": time.time(), "host": socket.gethostname(), "pid": os.getpid()}
    line = json.dumps(record, sort_keys=True)
    tmp = directory / f".{SERVE_FILE}.{os.getpid()}.tmp"
    tmp.write_text(line + "\n", encoding="utf-8")
    os.replace(tmp, directory / SERVE_FILE)
    with open(directory / SERVE_LOG, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def is_serve_dir(directory: str | os.PathLike) -> bool:
    """Whether ``directory`` holds a policy server's ``serve.json``."""
    return (pathlib.Path(directory) / SERVE_FILE).is_file()


def read_serve_status(directory: str | os.PathLike) -> dict[str, Any]:
    """The server's record with ``age_s`` and ``state``: ``serving``, ``stopped`` (it said so), ``gone``
    (its process is not alive on this host) or ``silent`` (not rewritten for 3 of its intervals).

    Raises:
        ValueError: the file is damaged, naming it.
    """
    path = pathlib.Path(directory) / SERVE_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(record, dict):
            raise TypeError(f"expected a JSON object, got {type(record).__name__}")
        record["age_s"] = max(0.0, time.time() - float(record.get("updated_unix", 0.0)))
    except (OSError, ValueError, TypeError) as err:
        raise ValueError(f"{path} cannot be read ({err})") from None
    if record.get("stopped"):
        record["state"] = "stopped"
    elif writer_alive(record) is False:
        record["state"] = "gone"
    elif record["age_s"] > 3 * float(record.get("every_s", 10.0)) + 5:
        record["state"] = "silent"
    else:
        record["state"] = "serving"
    return record


def serve_line(record: dict[str, Any]) -> str:
    """One line a person reads: state, address, version, rates, batch size, latency, errors."""
    latency, wait = record.get("latency_ms") or {}, record.get("queue_wait_ms") or {}
    totals = record.get("totals") or {}
    errors = sum(v for k, v in totals.items() if k.startswith("errors_"))
    fmt = lambda x: "?" if x is None else f"{x:g}"  # noqa: E731
    return (f"policy server {record.get('address', '?')} ({record.get('path', '?')}): {record['state']}; version "
            f"{record.get('version', '?')}; {record.get('requests_per_s', 0):,.1f} requests/s, "
            f"{record.get('rows_per_s', 0):,.1f} rows/s, mean batch {fmt(record.get('mean_batch_rows'))} rows; "
            f"latency p50 {fmt(latency.get('p50'))} ms, p99 {fmt(latency.get('p99'))} ms; queue wait p99 "
            f"{fmt(wait.get('p99'))} ms; {totals.get('requests', 0):,} requests, {errors} errors, "
            f"{record.get('clients', 0)} clients; written {record['age_s']:.0f} s ago")
