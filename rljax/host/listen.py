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
from rljax.host.protocol import HELLO_LIMIT, Kind, ProtocolError, read_message, send_message
from rljax.host.server import TOKEN_VARIABLE, check_token, is_loopback, refuse, serve_connection

__all__ = ["LISTEN_PREFIX", "MAX_GREETING", "WorkerListener", "dial", "is_listen", "parse_listen"]

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

    A connecting worker is greeted on a thread of its own, off the learner's path: its HELLO must come
    within ``hello_timeout_s`` (a deadline, not a per-read timeout; at most :data:`MAX_GREETING` greetings
    at once), its token must match, then the learner's HELLO goes out and the worker's SPEC (it builds its
    envs first) must come within ``spec_timeout_s`` and be a batch of ``num_envs``; a worker refused on the
    way is told why (ERROR) and goes. Only then is it listed, waiting for an actor.

    Args:
        name: ``listen:HOST:PORT`` (port 0: any free port; :attr:`address` says which).
        num_envs: the batch every worker must step (None: any; :meth:`make` checks it).
        token: the shared token (both directions); None reads ``RLJAX_ENV_SERVER_TOKEN``. Required off
            loopback.
        hello_timeout_s, spec_timeout_s: see above.

    Raises:
        ValueError: a bad name, or an address beyond loopback without a token.
        OSError: the address cannot be listened on (in use, not this host's).
    """

    def __init__(self, name: str, num_envs: int | None = None, token: str | None = None,
                 hello_timeout_s: float = 10.0, spec_timeout_s: float = 120.0):
        host, port = parse_listen(name)
        self._token = (os.environ.get(TOKEN_VARIABLE, "") if token is None else token)
        if not is_loopback(host) and not self._token:
            raise ValueError(f"listening for workers on {host!r}, beyond this machine, needs a shared token: set "
                             f"{TOKEN_VARIABLE} here and on every worker (or listen on 127.0.0.1)")
        self.name, self.retry_s, self.num_envs = name, 0.0, num_envs
        self._hello_timeout, self._spec_timeout = float(hello_timeout_s), float(spec_timeout_s)
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        self._sock = socket.create_server((host, port), family=family)
        self.address = self._sock.getsockname()[:2]
        self._lock = threading.Condition()
        self._pending: dict[str, Any] = {}  # address -> its ServerEnv, waiting for an actor
        self._made: list[Any] = []  # the ServerEnvs handed to actors
        self._live: set[str] = set()
        self._greeting = 0
        self._ids = itertools.count()
        self._closed = False
        self.bound: dict[int, str] = {}
        threading.Thread(target=self._accept, daemon=True, name="rljax-listen").start()

    def _accept(self) -> None:
        while True:
            try:
                conn, peer = self._sock.accept()
            except OSError as err:
                if self._closed:
                    return
                log.warning("rollout workers: cannot accept a connection (%s); pausing 0.5 s", err)
                time.sleep(0.5)
                continue
            with self._lock:
                busy, self._greeting = self._greeting >= MAX_GREETING, self._greeting + 1
            if busy:
                refuse(conn, f"{MAX_GREETING} connections are being greeted already: try again")
                with self._lock:
                    self._greeting -= 1
                continue
            threading.Thread(target=self._greet, args=(conn, peer), daemon=True, name="rljax-listen-hello").start()

    def _greet(self, conn: socket.socket, peer: Any) -> None:
        """A new worker: its HELLO by the deadline and its token, then the learner's HELLO and its SPEC."""
        from rljax.host.client import ServerEnv

        where, fired = f"{peer[0]}:{peer[1]}", []
        deadline = threading.Timer(self._hello_timeout, lambda: (fired.append(True), _shutdown(conn)))
        deadline.start()
        try:
            conn.settimeout(self._hello_timeout)
            _, (token,) = read_message(conn, HELLO_LIMIT, expect=(Kind.HELLO,))
            check_token(token, self._token.encode(), "this learner")
            deadline.cancel()
            env = ServerEnv(peer[0], peer[1], token=self._token, connect_timeout_s=self._spec_timeout, sock=conn)
        except (ProtocolError, OSError, ConnectionError, ValueError) as err:
            deadline.cancel()
            why = f"no HELLO within {self._hello_timeout:g} s of connecting" if fired else str(err)
            log.warning("rollout worker from %s refused: %s", where, why)
            refuse(conn, why)
            return
        finally:
            with self._lock:
                self._greeting -= 1
        env.farewell = False  # CLOSE only at the run's end (finish): a worker cut off otherwise comes back
        if self.num_envs is not None and env.spec.num_envs != self.num_envs:
            why = (f"this worker steps {env.spec.num_envs} envs, and this run's actors {self.num_envs}: start the "
                   f"worker with --num-envs {self.num_envs}")
            log.warning("rollout worker from %s refused: %s", where, why)
            env.refuse(why)
            return
        with self._lock:
            if self._closed:
                env.close()
                return
            address = f"worker-{next(self._ids)}@{where}"
            self._pending[address] = env
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

    def make(self, address: str, num_envs: int) -> HostEnv:
        """Worker ``address``'s batch (its :class:`~rljax.host.client.ServerEnv`, greeted already), taken
        once: asked again (an actor's restart), an EnvConnectionError (the worker must connect again).

        Raises:
            ValueError: the worker's batch is not ``num_envs`` envs (the worker is told, and let go).
        """
        with self._lock:
            env = self._pending.pop(address, None)
        if env is None:
            raise EnvConnectionError(f"rollout worker {address} is gone (or already has an actor): a worker that "
                                     f"reconnects joins as a new one")
        if env.spec.num_envs != num_envs:
            why = (f"rollout worker {address} steps {env.spec.num_envs} envs, and this run's actors {num_envs} "
                   f"(--num-envs): start the worker with --num-envs {num_envs}")
            env.refuse(why)
            self.failed(address)
            raise ValueError(why)
        with self._lock:
            self._made.append(env)
        return env

    def failed(self, address: str) -> None:
        """Worker ``address`` left (its actor's envs failed): it is not listed again."""
        with self._lock:
            self._live.discard(address)
            env = self._pending.pop(address, None)
        if env is not None:
            env.close()

    def joinable(self, address: str) -> bool:
        """Whether ``address`` is a connected worker without an actor."""
        with self._lock:
            return address in self._pending

    def describe(self) -> dict[str, Any]:
        """The listener for a run's manifest: its name and the workers connected now."""
        return {"pool": self.name, "workers": self.addresses()}

    def finish(self) -> None:
        """The run has ended: every worker is let go with CLOSE (those with an actor when their envs close),
        so that they exit. Without it (a run stopped by a signal, or failed) the connections just close and
        the workers keep connecting until a resumed run takes them back (or ``--retry-for`` passes)."""
        with self._lock:
            for env in [*self._made, *self._pending.values()]:
                env.farewell = True

    def close(self) -> None:
        """Stops listening; workers still waiting for an actor are closed (with CLOSE after :meth:`finish`)."""
        with self._lock:
            self._closed = True
            pending, self._pending = list(self._pending.values()), {}
        try:
            self._sock.close()
        except OSError:
            pass
        for env in pending:
            env.close()


MAX_GREETING = 64
"""The most connections greeted at once (each has a thread until its HELLO and SPEC have come)."""


def _shutdown(conn: socket.socket) -> None:
    """Ends a greeting past its deadline: a blocked read returns at once."""
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def dial(address: tuple[str, int], make_env: Callable[[], HostEnv], token: str | None = None,
         idle_timeout_s: float = 600.0, retry_for_s: float = 600.0) -> tuple[int, str]:
    """A rollout worker: connects to the learner at ``address``, says HELLO with the token, and serves it
    a batch from ``make_env()`` as an env server would. Returns ``(exit status, why)``:

    * ``0``: the learner ended the session with CLOSE (the run finished);
    * ``1``: the learner refused this worker (a token, a batch size: ``why`` is its reason), or no session
      began for ``retry_for_s`` seconds (no learner, or one that never finished a handshake).

    A session that breaks after it began (the learner stopped by a signal, crashed, or its network went)
    is followed by a new connection, after 1 s and doubling to 10 s while sessions keep failing."""
    token = os.environ.get(TOKEN_VARIABLE, "") if token is None else token
    began, delay = time.monotonic(), 1.0
    while True:
        start = time.monotonic()
        how, why = "failed", ""
        try:
            conn = socket.create_connection(address, timeout=10)
        except OSError as err:
            why = str(err)
        else:
            try:
                send_message(conn, Kind.HELLO, [np.frombuffer(token.encode(), np.uint8)])
                how, why = serve_connection(conn, f"{address[0]}:{address[1]}", make_env, token.encode(),
                                            idle_timeout_s)
            except OSError as err:
                conn.close()
                why = str(err)
        if how == "closed":
            return 0, "the learner ended the session"
        if how == "refused":
            return 1, why
        now = time.monotonic()
        if how == "ended":  # a session began: the learner was there
            began = now
            delay = 1.0 if now - start > 10 else delay
        elif now - began > retry_for_s:
            return 1, f"no session with a learner at {address[0]}:{address[1]} for {retry_for_s:g} s ({why})"
        time.sleep(delay)
        delay = min(10.0, delay * 2)
