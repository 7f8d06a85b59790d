"""The policy server: many clients, one compiled policy, requests batched as they arrive.

Two threads do the work. The **I/O thread** owns every socket (non-blocking, one ``selectors`` loop):
it accepts clients, reads each message's header before its payload (:mod:`rljax.serve.protocol`),
checks a request against the policy's inputs, and queues it; a connection has at most one request in
flight, so its recurrent state is never raced. The **inference thread** takes the oldest request and
every request that arrives within ``max_wait_ms`` of it, up to ``max_batch`` rows, computes them as
one batch (:class:`~rljax.serve.model.ServedModel`), splits the actions, and hands the replies back.

Safety is the env server's (:mod:`rljax.host.server`): loopback unless told otherwise, and a token
(``RLJAX_SERVE_TOKEN``, compared in constant time, never logged) required off loopback; nothing is
unpickled; a message larger than the largest request (``max_batch`` rows) is refused at its header;
a client that stops in the middle of a message for ``stall_timeout_s`` (or does not say HELLO
within it), or says nothing for ``idle_timeout_s``, is dropped; a malformed message or a bad token
costs that client its connection (ERROR, then closed), while a well-formed request the policy
cannot act on gets REFUSED and the session goes on. No client can stop the others being served.

With ``follow_s``, a **follow thread** polls the run directory for a newer checkpoint, loads it
(:func:`rljax.load` verifies its checksums; a damaged one is skipped and named in the log) and swaps
the ``(params, version)`` pair in one assignment: a batch is computed entirely with one version, and
every reply names it. A request that pinned another version is refused, never acted on.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import selectors
import socket
import threading
import time
from typing import Any

import jax
import numpy as np

from rljax.host.protocol import (HEADER, ProtocolError, decode_header_count, decode_payload, encode, error_arrays)
from rljax.host.server import check_token, is_loopback
from rljax.serve.model import MIN_BUCKET, ServedModel
from rljax.serve.protocol import (FLAG_SAMPLE, FRAMING, SEED_LIMIT, Codec, Kind, act_limit, encode_description,
                                  text_array)
from rljax.serve.stats import ServeStats, write_serve_status

__all__ = ["PolicyServer", "TOKEN_VARIABLE"]

TOKEN_VARIABLE = "RLJAX_SERVE_TOKEN"
"""The environment variable the server and its clients read the shared token from."""

_HELLO_LIMIT = 64 << 10
MAX_ROWS = 1 << 16
"""The most rows a batch (``max_batch``, ``min_rows``) may have."""
_CLOSE_GRACE_S = 1.0

log = logging.getLogger(__name__)


class _Refused(Exception):
    """A well-formed request the policy cannot act on: REFUSED with this text, the session goes on."""


@dataclasses.dataclass(eq=False)
class _Conn:
    sock: socket.socket
    peer: str
    client: str
    buf: bytearray = dataclasses.field(default_factory=bytearray)
    out: bytearray = dataclasses.field(default_factory=bytearray)
    hello: bool = False
    busy: bool = False
    closing_at: float | None = None
    header: tuple[Any, int, int] | None = None
    last: float = dataclasses.field(default_factory=time.monotonic)
    accepted: float = dataclasses.field(default_factory=time.monotonic)
    partial_since: float | None = None
    out_since: float | None = None
    state: list[np.ndarray] | None = None
    events: int = selectors.EVENT_READ
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    """Held while writing to the socket: the inference thread sends a reply itself when nothing else is
    pending (it has time to spare; the I/O thread has none), the I/O thread sends the rest."""


@dataclasses.dataclass(eq=False)
class _Request:
    conn: _Conn
    rid: int
    pin: int
    seed: int | None
    reset: np.ndarray
    obs: list[np.ndarray]
    arrived: float
    fresh: bool = False
    """The session's state starts here (its first request, or a new batch size): initial rows, not its own."""

    @property
    def rows(self) -> int:
        return self.reset.shape[0]


class PolicyServer:
    """Serves a :class:`~rljax.serve.model.ServedModel` over TCP (see the module docstring).

    Args:
        model: what to serve (:func:`rljax.serve.model.load_model`).
        host, port: where to listen (port 0: any free port; :attr:`address` says which).
        token: the shared token; None reads ``RLJAX_SERVE_TOKEN``. Required off loopback.
        max_batch: the most rows computed at once (and the most one request may carry).
        max_wait_ms: how long the oldest queued request waits for others to join its batch.
        follow_s: poll the run for a newer checkpoint every this many seconds (None: never).
        idle_timeout_s: drop a client silent this long.
        stall_timeout_s: drop a client that leaves a message (sent or received) unfinished this long.
        max_clients: refuse connections beyond this many.
        min_rows: the fewest rows a batch is computed at (padded): the default keeps served actions the
            bits of ``policy.act`` on a large batch (:mod:`rljax.serve.model`); 1 computes a lone request
            alone (less work for a large network; a continuous action may then differ in its last bit).
        stats_dir: keep ``serve.json`` and ``serve.jsonl`` here every ``stats_every_s`` (None: not; the
            attribute :attr:`stats_dir` may be set until :meth:`start`).
    """

    def __init__(self, model: ServedModel, host: str = "127.0.0.1", port: int = 0, token: str | None = None,
                 max_batch: int = 64, max_wait_ms: float = 2.0, follow_s: float | None = None,
                 idle_timeout_s: float = 600.0, stall_timeout_s: float = 10.0, max_clients: int = 1024,
                 stats_dir: str | os.PathLike | None = None, stats_every_s: float = 10.0,
                 min_rows: int = MIN_BUCKET):
        token = os.environ.get(TOKEN_VARIABLE) if token is None else token
        if not is_loopback(host) and not token:
            raise ValueError(f"serving on {host!r}, beyond this machine, needs a shared token: set {TOKEN_VARIABLE} "
                             f"here and in the clients (or serve on 127.0.0.1)")
        _check_positive(max_batch=max_batch, min_rows=min_rows, idle_timeout_s=idle_timeout_s,
                        stall_timeout_s=stall_timeout_s, max_clients=max_clients, stats_every_s=stats_every_s,
                        **({} if follow_s is None else {"follow_s": follow_s}))
        if not (isinstance(max_wait_ms, (int, float)) and 0 <= max_wait_ms <= 10_000):
            raise ValueError(f"max_wait_ms={max_wait_ms}: must be within 0 and 10000 (10 s)")
        if max_batch > MAX_ROWS or min_rows > MAX_ROWS:
            raise ValueError(f"max_batch={max_batch}, min_rows={min_rows}: at most {MAX_ROWS} rows a batch")
        _fit_descriptors(int(max_clients))
        if follow_s is not None and model.reload is None:
            raise ValueError(f"{model.info.get('path')} is an export: there is no run to follow (serve the run "
                             f"directory to follow its checkpoints)")
        self.model, self.max_batch, self.max_wait_s = model, int(max_batch), float(max_wait_ms) / 1e3
        self._token, self._idle, self._stall = (token or "").encode(), float(idle_timeout_s), float(stall_timeout_s)
        self._max_clients, self._follow_s = int(max_clients), follow_s
        self.stats_dir, self._stats_every = stats_dir, float(stats_every_s)
        self._stop = threading.Event()
        model.warm(self.max_batch, int(min_rows))
        self._current = (jax.device_put(model.params), model.version)
        self._limit = act_limit(model.inputs, self.max_batch)
        self._codec = Codec(model.inputs, model.action, self.max_batch)
        self.stats = ServeStats()
        self._sock = _server_socket(host, int(port))
        self._sock.setblocking(False)
        self.address: tuple[str, int] = self._sock.getsockname()[:2]
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._sock, selectors.EVENT_READ, "listen")
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._queue = _Queue()
        self._done: list[tuple[_Conn, bytes, float, bool]] = []
        self._done_lock = threading.Lock()
        self._conns: set[_Conn] = set()
        self._accept_paused: float | None = None
        self._rbuf = bytearray(1 << 18)
        self._rview = memoryview(self._rbuf)
        self._waiting = 0
        """Connections past their HELLO with no request in flight (the I/O thread's count; the inference
        thread waits for more requests only while one of them could send one)."""
        self._closed = threading.Event()
        self._threads: list[threading.Thread] = []

    @property
    def version(self) -> int:
        """The version served now (the checkpoint step of the params)."""
        return self._current[1]

    # ----- running -----

    def start(self) -> "PolicyServer":
        """Starts the threads (I/O, inference, and follow and stats where asked); returns ``self``."""
        targets = [("io", self._io_loop), ("infer", self._infer_loop)]
        if self._follow_s is not None:
            targets.append(("follow", self._follow_loop))
        if self.stats_dir is not None:
            targets.append(("stats", self._stats_loop))
        for name, target in targets:
            thread = threading.Thread(target=target, daemon=True, name=f"rljax-serve-{name}")
            thread.start()
            self._threads.append(thread)
        return self

    def serve_forever(self) -> None:
        """:meth:`start`, then serves until :meth:`request_stop` or :meth:`close` (or a KeyboardInterrupt),
        and closes."""
        self.start()
        try:
            while not (self._stop.wait(0.5) or self._closed.is_set()):
                pass
        finally:
            self.close()

    def request_stop(self) -> None:
        """Makes :meth:`serve_forever` return (safe in a signal handler)."""
        self._stop.set()

    def close(self, timeout_s: float = 5.0) -> None:
        """Stops serving: the threads end, every connection is closed, a last status is written."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._wake()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout_s)
        for conn in list(self._conns):
            self._forget(conn)
        for s in (self._sock, self._wake_r, self._wake_w):
            s.close()
        self._sel.close()
        if self.stats_dir is not None:
            self._write_stats(stopped=True)

    def __enter__(self) -> "PolicyServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    # ----- the I/O thread -----

    def _io_loop(self) -> None:
        next_sweep = time.monotonic() + 0.5
        while not self._closed.is_set():
            for key, mask in self._sel.select(0.25):
                if key.data == "listen":
                    self._accept()
                elif key.data == "wake":
                    try:
                        while self._wake_r.recv(4096):
                            pass
                    except (BlockingIOError, OSError):
                        pass
                else:
                    conn = key.data
                    if mask & selectors.EVENT_WRITE:
                        self._flush(conn)
                    if mask & selectors.EVENT_READ and conn in self._conns:
                        self._read(conn)
            self._deliver()
            if self._accept_paused is not None and time.monotonic() >= self._accept_paused:
                self._accept_paused = None
                self._sel.register(self._sock, selectors.EVENT_READ, "listen")
            if time.monotonic() >= next_sweep:
                self._sweep()
                next_sweep = time.monotonic() + 0.5

    def _accept(self) -> None:
        try:
            sock, peer = self._sock.accept()
        except BlockingIOError:
            return
        except OSError as err:  # out of file descriptors: stop accepting a moment, not spin on it
            log.warning("rljax serve: cannot accept a connection (%s); pausing new connections for 0.5 s", err)
            self._sel.unregister(self._sock)
            self._accept_paused = time.monotonic() + 0.5
            return
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Conn(sock, f"{peer[0]}:{peer[1]}", str(peer[0]))
        self._conns.add(conn)
        self._sel.register(sock, selectors.EVENT_READ, conn)
        self.stats.count("connections")
        if len(self._conns) > self._max_clients:
            self._fail(conn, "full", f"the server has {self._max_clients} clients, its limit (--max-clients): try "
                                     f"later")

    def _read(self, conn: _Conn) -> None:
        try:
            n = conn.sock.recv_into(self._rbuf)  # (recv(N) allocates N bytes a call: most of a request's cost)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._forget(conn)
            return
        if not n:
            self._forget(conn)
            return
        now = time.monotonic()
        conn.last = now
        if conn.closing_at is not None:  # draining before the close: what comes is not read
            return
        conn.buf += self._rview[:n]
        if conn.busy and len(conn.buf) > 2 * (self._limit + HEADER.size):
            self._fail(conn, "protocol", "a client may have one request in flight; this one sent far more before "
                                         "its reply")
            return
        self._parse(conn, now)

    def _parse(self, conn: _Conn, now: float) -> None:
        try:
            while conn.closing_at is None and not conn.busy and len(conn.buf) >= HEADER.size:
                if conn.header is None:
                    expect = (Kind.ACT, Kind.CLOSE) if conn.hello else (Kind.HELLO,)
                    conn.header = decode_header_count(bytes(conn.buf[:HEADER.size]),
                                                      self._limit if conn.hello else _HELLO_LIMIT, expect, FRAMING)
                kind, length, count = conn.header
                if len(conn.buf) < HEADER.size + length:
                    break
                payload = bytes(conn.buf[HEADER.size:HEADER.size + length])
                del conn.buf[:HEADER.size + length]
                conn.header = None
                arrays = self._codec.act(payload) if kind == Kind.ACT else None
                self._handle(conn, kind, arrays or decode_payload(kind, payload, count, FRAMING), now)
        except ProtocolError as err:
            self._fail(conn, "protocol", str(err))
            return
        conn.partial_since = (conn.partial_since or now) if conn.buf and not conn.busy else None

    def _handle(self, conn: _Conn, kind: Kind, arrays: list[np.ndarray], now: float) -> None:
        if kind == Kind.ERROR:
            raise ProtocolError("the client sent an ERROR")
        if kind == Kind.HELLO:
            if not self._token_ok(conn, arrays[0]):
                return
            conn.hello = True
            self._waiting += 1
            self._send(conn, encode(Kind.SPEC, encode_description(self.model.description(self.max_batch,
                                                                                         self.version)), FRAMING))
        elif kind == Kind.CLOSE:
            self._forget(conn)
        else:
            try:
                request = self._request(conn, arrays, now)
            except _Refused as why:
                rid = int(arrays[0][0]) if arrays[0].dtype == np.int64 and arrays[0].shape == (4,) else -1
                self._refuse(conn, rid, str(why))
                return
            conn.busy = True
            self._waiting -= 1
            self._queue.put(request)

    def _token_ok(self, conn: _Conn, token: np.ndarray) -> bool:
        try:
            check_token(token, self._token, "this server", TOKEN_VARIABLE)
        except ProtocolError as why:
            self._fail(conn, "token", str(why))
            return False
        return True

    def _request(self, conn: _Conn, arrays: list[np.ndarray], now: float) -> _Request:
        """The checked request of an ACT; :class:`_Refused` naming what is wrong."""
        meta, reset, leaves = arrays[0], arrays[1], arrays[2:]
        if meta.dtype != np.int64 or meta.shape != (4,):
            raise _Refused(f"an ACT's first array is int64 [4] (request id, pinned version, flags, seed); got "
                           f"{meta.dtype} {meta.shape}")
        rid, pin, flags, seed = meta.tolist()
        if flags & ~FLAG_SAMPLE:
            raise _Refused(f"flags {flags}: only bit 0 (sample) is defined")
        if reset.dtype != np.bool_ or reset.ndim != 1 or not 1 <= reset.shape[0] <= self.max_batch:
            raise _Refused(f"reset is bool [B] with 1 <= B <= {self.max_batch} (--max-batch); got {reset.dtype} "
                           f"{reset.shape}")
        rows, inputs = reset.shape[0], self.model.inputs
        if len(leaves) != len(inputs):
            raise _Refused(f"{len(leaves)} observation arrays were sent; this policy takes {len(inputs)}: "
                           f"{', '.join(n for n, _, _ in inputs)}")
        for x, (name, shape, dtype) in zip(leaves, inputs):
            if x.dtype != dtype or x.shape != (rows, *shape):
                raise _Refused(f"observation {name}: expected {np.dtype(dtype).name} {[rows, *shape]} (B = {rows} "
                               f"rows, as reset has), got {x.dtype.name} {list(x.shape)}")
            if x.dtype.kind == "f" and not np.isfinite(x).all():  # a failed sensor: no action rather than a wild one
                bad = np.flatnonzero(~np.isfinite(x.reshape(rows, -1)).all(axis=1))
                raise _Refused(f"observation {name} holds NaN or inf in row(s) {bad[:10].tolist()}: nothing was "
                               f"acted on")
        sample = bool(flags & FLAG_SAMPLE)
        if sample and self.model.sampling is not None:
            raise _Refused(f"sampled actions are not served here: {self.model.sampling}")
        if sample and not 0 <= seed < SEED_LIMIT:
            raise _Refused(f"seed {seed}: a sampled request's seed is in [0, 2^31)")
        if pin < -1:
            raise _Refused(f"pinned version {pin}: give a version >= 0, or -1 for any")
        fresh = self.model.recurrent and (conn.state is None or conn.state[0].shape[0] != rows)
        if fresh and conn.state is not None and not reset.all():
            raise _Refused(f"this session's recurrent state has {conn.state[0].shape[0]} rows, the request "
                           f"{rows}: reset every row to start the session over with {rows}")
        return _Request(conn, rid, pin, seed if sample else None, reset, leaves, now, fresh)

    def _refuse(self, conn: _Conn, rid: int, why: str) -> None:
        self.stats.error(conn.client, "refused")
        self.stats.count("refused")
        self._send(conn, _refused(rid, self.version, why))

    def _send(self, conn: _Conn, data: bytes) -> None:
        if conn not in self._conns:
            return
        with conn.lock:
            conn.out += data
        self._flush(conn)

    def _flush(self, conn: _Conn) -> None:
        if conn not in self._conns:
            return
        try:
            with conn.lock:
                while conn.out:
                    sent = conn.sock.send(conn.out)
                    del conn.out[:sent]
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self._forget(conn)
            return
        now = time.monotonic()
        conn.out_since = (conn.out_since or now) if conn.out else None
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.out else 0)
        if conn.events != events:
            conn.events = events
            try:
                self._sel.modify(conn.sock, events, conn)
            except (KeyError, ValueError):
                pass
        if conn.closing_at is not None and not conn.out:
            try:
                conn.sock.shutdown(socket.SHUT_WR)
            except OSError:
                self._forget(conn)

    def _fail(self, conn: _Conn, kind: str, why: str) -> None:
        """ERROR to the client (best effort), then the connection closes once the client has read it."""
        if conn.closing_at is not None:
            return
        log.warning("rljax serve: closing the connection from %s: %s", conn.peer, why)
        self.stats.error(conn.client, kind)
        conn.closing_at, conn.buf, conn.header = time.monotonic(), bytearray(), None
        self._send(conn, encode(Kind.ERROR, error_arrays(why), FRAMING))

    def _forget(self, conn: _Conn) -> None:
        if conn not in self._conns:
            return
        self._conns.discard(conn)
        if conn.hello and not conn.busy:
            self._waiting -= 1
        try:
            self._sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        with conn.lock:  # never while the inference thread sends on it (its fd could be another's next)
            conn.sock.close()

    def _sweep(self) -> None:
        """Drops clients idle past ``idle_timeout_s``, stalled mid-message past ``stall_timeout_s``, and
        closing ones past their grace."""
        now = time.monotonic()
        for conn in list(self._conns):
            if conn.closing_at is not None:
                if now - conn.closing_at > _CLOSE_GRACE_S:
                    self._forget(conn)
            elif conn.busy:
                continue
            elif not conn.hello and now - conn.accepted > self._stall:
                self._fail(conn, "stalled", f"no HELLO within {self._stall:g} s of connecting (--stall-timeout)")
            elif conn.partial_since is not None and now - conn.partial_since > self._stall:
                self._fail(conn, "stalled", f"a message was left unfinished for {self._stall:g} s (--stall-timeout)")
            elif conn.out_since is not None and now - conn.out_since > self._stall:
                self._fail(conn, "stalled", f"the client read no reply for {self._stall:g} s (--stall-timeout)")
            elif now - conn.last > self._idle:
                self._fail(conn, "idle", f"the client was silent for {self._idle:g} s (--idle-timeout)")

    def _deliver(self) -> None:
        with self._done_lock:
            done, self._done = self._done, []
        if not done:
            return
        now, latencies = time.perf_counter(), []
        for conn, data, arrived, ok in done:
            conn.busy = False
            if ok:
                latencies.append(now - arrived)
            if conn in self._conns:
                self._waiting += 1
                if conn.closing_at is None:
                    if data:  # what the inference thread could not send at once
                        self._send(conn, data)
                    if conn.buf and conn in self._conns:  # a next request already waits in the buffer
                        self._parse(conn, time.monotonic())
        self.stats.replied(latencies)

    # ----- the inference thread -----

    def _infer_loop(self) -> None:
        carry = None
        while not self._closed.is_set():
            if carry is None:
                carry = self._queue.get(0.25)
                if carry is None:
                    continue
            batch, rows, carry = [carry], carry.rows, None
            deadline = batch[0].arrived + self.max_wait_s
            while rows < self.max_batch:
                request = self._queue.get(0.0)
                if request is None:
                    left = deadline - time.perf_counter()
                    if left <= 0 or self._waiting == 0:  # no client is free to send one: nothing to wait for
                        break
                    request = self._queue.get(left)
                    if request is None:
                        break
                if rows + request.rows > self.max_batch:
                    carry = request
                    break
                batch.append(request)
                rows += request.rows
            self._run(batch)

    def _run(self, batch: list[_Request]) -> None:
        params, version = self._current  # one version for the whole batch
        start = time.perf_counter()
        replies: list[tuple[_Conn, bytes, float, bool]] = []
        todo = []
        for r in batch:
            if r.pin >= 0 and r.pin != version:
                why = f"version {r.pin} was pinned, and this server serves version {version} now"
                self.stats.error(r.conn.client, "version")
                replies.append((r.conn, _refused(r.rid, version, why), r.arrived, False))
            else:
                todo.append(r)
        for group in ([r for r in todo if r.seed is None], [r for r in todo if r.seed is not None]):
            if group:
                replies.extend(self._compute(params, version, group))
        self.stats.batch(sum(r.rows for r in todo), len(todo), [start - r.arrived for r in batch])
        self.stats.count("requests", len(todo))
        self.stats.count("rows", sum(r.rows for r in todo))
        replies = [(conn, _send_now(conn, data), arrived, ok) for conn, data, arrived, ok in replies]
        with self._done_lock:
            self._done.extend(replies)
        self._wake()

    def _compute(self, params: Any, version: int, group: list[_Request]) -> list[tuple[_Conn, bytes, float, bool]]:
        model, join = self.model, (lambda xs: xs[0] if len(xs) == 1 else np.concatenate(xs))
        obs = [join([r.obs[i] for r in group]) for i in range(len(model.inputs))]
        states = [model.initial_state(r.rows) if r.fresh else r.conn.state for r in group]
        state = [join([x[i] for x in states]) for i in range(len(model.state))]
        reset = join([r.reset for r in group])
        seeds = None if group[0].seed is None else join(
            [np.stack([np.full(r.rows, r.seed, np.int32), np.arange(r.rows, dtype=np.int32)], 1) for r in group])
        try:
            action, new_state = model.compute(params, obs, state, reset, seeds)
        except Exception as err:  # noqa: BLE001 - the policy raised: the clients are told, the server goes on
            log.exception("rljax serve: the policy raised on a batch of %d rows", len(reset))
            why = f"the policy raised {type(err).__name__} on this batch: {err}"
            return [(r.conn, _refused(r.rid, version, why), r.arrived, False) for r in group]
        out, at = [], 0
        for r in group:
            if model.recurrent:
                r.conn.state = [x[at:at + r.rows] for x in new_state]
            out.append((r.conn, self._codec.action(r.rid, version, action[at:at + r.rows]), r.arrived, True))
            at += r.rows
        return out

    # ----- following a run, and the status -----

    def _follow_loop(self) -> None:
        failed: set[int] = set()
        while not self._closed.wait(self._follow_s):
            try:
                newer = [s for s in self.model.steps() if s > self.version and s not in failed]
            except OSError:
                continue
            if not newer:
                continue
            step = newer[-1]
            try:
                params = self.model.reload(step)
            except FileNotFoundError:  # removed while read (the run keeps only its newest): the next poll
                continue
            except Exception as err:  # noqa: BLE001 - a damaged checkpoint: keep serving the current one
                failed.add(step)
                self.stats.count("reload_failures")
                log.warning("rljax serve: checkpoint %d could not be served (%s: %s); still serving version %d",
                            step, type(err).__name__, err, self.version)
                continue
            self._current = (jax.device_put(params), int(step))
            self.stats.count("reloads")
            log.info("rljax serve: now serving version %d", step)

    def _stats_loop(self) -> None:
        while not self._closed.wait(self._stats_every):
            self._write_stats()

    def _write_stats(self, stopped: bool = False) -> None:
        host, port = self.address
        extra = {"address": f"{host}:{port}", "version": self.version, "path": self.model.info.get("path"),
                 "source": self.model.info.get("source"), "clients": len(self._conns), "max_batch": self.max_batch,
                 "max_wait_ms": self.max_wait_s * 1e3, "every_s": self._stats_every, "stopped": stopped,
                 "queued": len(self._queue)}
        try:
            write_serve_status(self.stats_dir, self.stats.record(extra))
        except OSError as err:
            log.warning("rljax serve: cannot write the status to %s: %s", self.stats_dir, err)


def _refused(rid: int, version: int, why: str) -> bytes:
    """A REFUSED message: request ``rid`` was not acted on, for ``why``; ``version`` is the one served."""
    return encode(Kind.REFUSED, [np.array([rid, version], np.int64), text_array(why)], FRAMING)


def _send_now(conn: _Conn, data: bytes) -> bytes:
    """Sends ``data`` on the inference thread when the connection has nothing pending; returns what is
    left for the I/O thread to send (all of it when something is pending or the socket is full)."""
    if conn.closing_at is not None:
        return data
    with conn.lock:
        if conn.out:
            return data
        try:
            sent = conn.sock.send(data)
        except (BlockingIOError, InterruptedError):
            return data
        except OSError:  # closed, or closing: the I/O thread finds out and forgets it
            return data
    return data[sent:]


class _Queue:
    """The requests waiting for the inference thread: a deque and an event (lighter than ``queue.Queue``,
    whose locks cost a few microseconds a request on the I/O thread's path)."""

    def __init__(self):
        self._items: collections.deque[_Request] = collections.deque()
        self._ready = threading.Event()

    def put(self, item: _Request) -> None:
        self._items.append(item)
        if not self._ready.is_set():  # set stays set until the inference thread finds the queue empty
            self._ready.set()

    def get(self, timeout_s: float) -> _Request | None:
        """The oldest request, waiting up to ``timeout_s`` for one (0: not at all); None if none came."""
        deadline = None
        while True:
            try:
                return self._items.popleft()
            except IndexError:
                pass
            self._ready.clear()
            if self._items:
                continue
            deadline = deadline or time.perf_counter() + timeout_s
            left = deadline - time.perf_counter()
            if left <= 0 or not self._ready.wait(left):
                return None

    def __len__(self) -> int:
        return len(self._items)


def _check_positive(**values: float) -> None:
    """Each value a finite number > 0 (NaN and infinity are not: a wait of either never ends)."""
    for name, value in values.items():
        if not (isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1e9):
            raise ValueError(f"{name}={value}: must be a number > 0 (and finite)")


def _fit_descriptors(max_clients: int) -> None:
    """Raises the process's soft limit of open files to fit ``max_clients`` connections (and 64 more for
    the rest); a hard limit below that is a ValueError naming both."""
    import resource

    need = max_clients + 64
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        try:
            if hard != resource.RLIM_INFINITY and hard < need:
                raise ValueError(f"the hard limit is {hard}")
            resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
        except (ValueError, OSError) as err:
            raise ValueError(f"max_clients={max_clients} needs {need} open files, and this process may open "
                             f"{soft} ({err}; ulimit -n): lower --max-clients or raise the limit") from None


def _server_socket(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (an IPv6 address too)."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    return socket.create_server((host, port), family=family)
