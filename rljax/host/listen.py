"""Central inference for rollout workers: the learner listens (``--env listen:HOST:PORT``) and env workers
in other processes or on other hosts connect to it (``rljax env-server ENV --connect HOST:PORT``).

This is SEED RL's division of work: a worker only steps its envs; it sends observations, rewards and
episode ends and receives actions, and the policy runs in the learner's process, on its device, for
every worker (one actor per worker, each computing a batch of that worker's envs at a time). What
crosses the wire is the env protocol (:mod:`rljax.host.protocol`), checked the same way, so every
transition reaches the learner as an env server's would; only the direction of the connection differs,
which is what lets workers behind NAT or in an autoscaled group join a learner whose address they know.

Connecting::

    worker  dials HOST:PORT, then sends  HELLO [token]   (the learner checks it; required off loopback)
    learner HELLO [token]                                 (the worker checks it: the env protocol from here)
    worker  SPEC ..., and RESET/STEP as an env server answers them

A worker that connects gets an actor; a worker that goes away (its process ends, its connection
breaks) loses its actor after that actor's restarts fail (the rollout it was collecting goes to another
actor, its episodes in flight are counted lost), and a worker that connects again is a new worker. The
run trains while one actor is left, and waits for ``num_actors`` workers before it starts.
:class:`WorkerListener` has the pool interface of :class:`rljax.host.pool.ServerPool` that the learner
follows after every update.
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from rljax.host.base import EnvConnectionError, HostEnv
from rljax.host.protocol import HANDSHAKE_LIMIT, Kind, ProtocolError, error_arrays, read_message, send_message
from rljax.host.server import TOKEN_VARIABLE, check_token, is_loopback, serve_connection

__all__ = ["LISTEN_PREFIX", "WorkerListener", "dial", "is_listen", "parse_listen"]

LISTEN_PREFIX = "listen:"

log = logging.getLogger(__name__)


def is_listen(name: str) -> bool:
    """Whether ``name`` is ``listen:HOST:PORT`` (rollout workers connect to the learner)."""
    return isinstance(name, str) and name.startswith(LISTEN_PREFIX)


def parse_listen(name: str) -> tuple[str, int]:
    """``(host, port)`` of ``listen:HOST:PORT``; ValueError naming the form otherwise."""
    host, sep, port = name[len(LISTEN_PREFIX):].rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"env {name!r}: a learner that rollout workers connect to is named listen:HOST:PORT with a "
                         f"port in 0..65535 (0: any free port, printed), e.g. listen:127.0.0.1:5700")
    return host, int(port)


class WorkerListener:
    """Accepts rollout workers at ``listen:HOST:PORT`` (module docstring); the learner's pool of them.

    Args:
        name: ``listen:HOST:PORT``.
        token: the shared token (both directions); None reads ``RLJAX_ENV_SERVER_TOKEN``. Required off
            loopback.
        hello_timeout_s: how long a new connection has to send its HELLO.

    Raises:
        ValueError: a bad name, or an address beyond loopback without a token.
        OSError: the address cannot be listened on (in use, not this host's).
    """

    def __init__(self, name: str, token: str | None = None, hello_timeout_s: float = 10.0):
        host, port = parse_listen(name)
        self._token = (os.environ.get(TOKEN_VARIABLE, "") if token is None else token)
        if not is_loopback(host) and not self._token:
            raise ValueError(f"listening for workers on {host!r}, beyond this machine, needs a shared token: set "
                             f"{TOKEN_VARIABLE} here and on every worker (or listen on 127.0.0.1)")
        self.name, self.retry_s, self._hello_timeout = name, 0.0, float(hello_timeout_s)
        self._sock = socket.create_server((host, port))
        self.address = self._sock.getsockname()[:2]
        self._lock = threading.Condition()
        self._pending: dict[str, socket.socket] = {}
        self._live: set[str] = set()
        self._ids = itertools.count()
        self._closed = False
        self.bound: dict[int, str] = {}
        threading.Thread(target=self._accept, daemon=True, name="rljax-listen").start()

    def _accept(self) -> None:
        while True:
            try:
                conn, peer = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._greet, args=(conn, peer), daemon=True, name="rljax-listen-hello").start()

    def _greet(self, conn: socket.socket, peer: Any) -> None:
        """A new worker's HELLO, checked; the worker then waits for an actor."""
        where = f"{peer[0]}:{peer[1]}"
        try:
            conn.settimeout(self._hello_timeout)
            _, (token,) = read_message(conn, HANDSHAKE_LIMIT, expect=(Kind.HELLO,))
            check_token(token, self._token.encode(), "this learner")
        except (ProtocolError, OSError, ConnectionError) as err:
            log.warning("rollout worker from %s refused: %s", where, err)
            try:
                send_message(conn, Kind.ERROR, error_arrays(str(err)))
            except OSError:
                pass
            conn.close()
            return
        with self._lock:
            if self._closed:
                conn.close()
                return
            address = f"worker-{next(self._ids)}@{where}"
            self._pending[address] = conn
            self._live.add(address)
            self._lock.notify_all()

    def wait_for(self, count: int, timeout_s: float) -> list[str]:
        """Waits until ``count`` workers have connected (they wait for an actor); returns them.

        Raises:
            TimeoutError: fewer came within ``timeout_s``, naming how many and where they connect.
        """
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while len(self._pending) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{len(self._pending)} of the {count} rollout workers the run starts with "
                                       f"connected to {self.name} within {timeout_s:g} s: start them with `rljax "
                                       f"env-server ENV --num-envs N --connect {self.address[0]}:{self.address[1]}`")
                self._lock.wait(left)
            return list(self._pending)[:count]

    def addresses(self) -> list[str]:
        """The workers connected now: those with an actor and those waiting for one."""
        with self._lock:
            return sorted(self._live, key=lambda a: int(a.split("-")[1].split("@")[0]))

    def bind(self, actor: int, address: str) -> None:
        """Actor ``actor``'s envs are worker ``address``'s batch."""
        self.bound[actor] = address

    def make(self, address: str, num_envs: int, timeout_s: float = 60.0) -> HostEnv:
        """Worker ``address``'s batch (a :class:`~rljax.host.client.ServerEnv` over its connection), taken
        once: asked again (an actor's restart), an EnvConnectionError (the worker must connect again).

        Raises:
            ValueError: the worker's batch is not ``num_envs`` envs (the worker is let go).
        """
        from rljax.host.client import ServerEnv

        with self._lock:
            sock = self._pending.pop(address, None)
        if sock is None:
            raise EnvConnectionError(f"rollout worker {address} is gone (or already has an actor): a worker that "
                                     f"reconnects joins as a new one")
        host, port = sock.getpeername()[:2]
        try:
            env = ServerEnv(host, port, token=self._token, timeout_s=timeout_s, sock=sock)
        except BaseException:
            self.failed(address)
            raise
        if env.spec.num_envs != num_envs:
            env.close()
            self.failed(address)
            raise ValueError(f"rollout worker {address} steps {env.spec.num_envs} envs, and this run's actors "
                             f"{num_envs} (--num-envs): start the worker with --num-envs {num_envs}")
        return env

    def failed(self, address: str) -> None:
        """Worker ``address`` left (its actor's envs failed): it is not listed again."""
        with self._lock:
            self._live.discard(address)
            sock = self._pending.pop(address, None)
        if sock is not None:
            sock.close()

    def joinable(self, address: str) -> bool:
        """Whether ``address`` is a connected worker without an actor."""
        with self._lock:
            return address in self._pending

    def describe(self) -> dict[str, Any]:
        """The listener for a run's manifest: its name and the workers connected now."""
        return {"pool": self.name, "workers": self.addresses()}

    def close(self) -> None:
        """Stops listening; workers still waiting for an actor are let go."""
        with self._lock:
            self._closed = True
            pending, self._pending = list(self._pending.values()), {}
        try:
            self._sock.close()
        except OSError:
            pass
        for sock in pending:
            sock.close()


def dial(address: tuple[str, int], make_env: Callable[[], HostEnv], token: str | None = None,
         idle_timeout_s: float = 600.0, retry_for_s: float = 600.0, stop: threading.Event | None = None) -> int:
    """A rollout worker: connects to the learner at ``address``, says HELLO with the token, and serves it
    a batch from ``make_env()`` as an env server would; connects again (every 1 to 10 s) when the
    connection fails or breaks, until the learner ends the session with CLOSE (returns 0: the run
    finished or retired this worker), ``retry_for_s`` passes without a session (returns 1), or ``stop``
    is set (returns 0)."""
    token = os.environ.get(TOKEN_VARIABLE, "") if token is None else token
    stop = stop or threading.Event()
    last_ok, delay = time.monotonic(), 1.0
    while not stop.is_set():
        try:
            conn = socket.create_connection(address, timeout=10)
        except OSError as err:
            if time.monotonic() - last_ok > retry_for_s:
                log.warning("rollout worker: no learner at %s:%s for %g s (%s); giving up", *address, retry_for_s, err)
                return 1
            stop.wait(delay)
            delay = min(10.0, delay * 2)
            continue
        try:
            send_message(conn, Kind.HELLO, [np.frombuffer(token.encode(), np.uint8)])
        except OSError:
            conn.close()
            continue
        said_close = serve_connection(conn, f"{address[0]}:{address[1]}", make_env, token.encode(), idle_timeout_s)
        last_ok, delay = time.monotonic(), 1.0
        if said_close:
            return 0
    return 0
