"""The reference env server: any host env (a Gymnasium env, by default) served over rljax's protocol.

Each connection gets its own batch of envs (``make_env()``), made after the client's HELLO and
closed with the connection; connections are served on their own threads, so a client that breaks
the protocol, or whose env raises, loses only its connection. The server:

* binds to loopback unless told otherwise; on any other address it requires a shared token (the
  ``RLJAX_ENV_SERVER_TOKEN`` environment variable, or ``token=``), compared in constant time and
  never logged or echoed;
* checks every message before it acts on it (:mod:`rljax.host.protocol`): header and size first
  (nothing larger than one STEP message is read after the handshake), then the layout, then the
  actions against the action space;
* answers a bad message, a bad token or an env that raised with an ERROR message saying why, then
  closes that connection; a client silent for ``idle_timeout_s`` is dropped.

``rljax env-server gymnasium/CartPole-v1 --num-envs 8 --port 5555`` runs it from the command line.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from rljax.host.base import HostEnv, check_actions, check_obs
from rljax.host.protocol import (HELLO_LIMIT, Kind, PeerError, ProtocolError, encode_spec, error_arrays,
                                 read_message, send_message, step_limit)

__all__ = ["EnvServer", "TOKEN_VARIABLE", "check_token", "is_loopback", "refuse", "serve_connection"]

TOKEN_VARIABLE = "RLJAX_ENV_SERVER_TOKEN"
"""The environment variable both sides read the shared token from."""

log = logging.getLogger(__name__)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) resolves to a loopback address only."""
    try:
        infos = socket.getaddrinfo(host, None)
    except socket.gaierror:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback for info in infos)


class EnvServer:
    """Serves ``make_env()`` batches over TCP (see the module docstring).

    Args:
        make_env: makes one batch of envs (a :class:`~rljax.host.base.HostEnv`) per connection.
        host, port: where to listen (port 0: any free port; :attr:`address` says which).
        token: the shared token; None reads ``RLJAX_ENV_SERVER_TOKEN``. Required off loopback.
        idle_timeout_s: how long a connection may stay silent before it is dropped.
    """

    def __init__(self, make_env: Callable[[], HostEnv], host: str = "127.0.0.1", port: int = 0,
                 token: str | None = None, idle_timeout_s: float = 600.0):
        token = os.environ.get(TOKEN_VARIABLE) if token is None else token
        if not is_loopback(host) and not token:
            raise ValueError(f"serving on {host!r}, beyond this machine, needs a shared token: set "
                             f"{TOKEN_VARIABLE} here and where rljax runs (or serve on 127.0.0.1)")
        if idle_timeout_s <= 0:
            raise ValueError(f"idle_timeout_s={idle_timeout_s}: must be > 0")
        self._make_env, self._token, self._idle = make_env, (token or "").encode(), float(idle_timeout_s)
        self._sock = socket.create_server((host, int(port)))
        self.address: tuple[str, int] = self._sock.getsockname()[:2]
        self._closed = threading.Event()
        self._open: dict[threading.Thread, socket.socket] = {}
        self._lock = threading.Lock()
        self.connections = 0
        """Connections accepted so far."""

    def serve_forever(self) -> None:
        """Accepts connections until :meth:`close`; each is served on its own daemon thread."""
        while not self._closed.is_set():
            try:
                conn, peer = self._sock.accept()
            except OSError:
                if self._closed.is_set():
                    return
                raise
            self.connections += 1
            thread = threading.Thread(target=self._serve, args=(conn, peer), daemon=True, name=f"rljax-env-{peer}")
            with self._lock:
                self._open[thread] = conn
            thread.start()

    def start(self) -> threading.Thread:
        """Serves on a daemon thread; returns it."""
        thread = threading.Thread(target=self.serve_forever, daemon=True, name="rljax-env-server")
        thread.start()
        return thread

    def close(self) -> None:
        """Stops accepting connections; the ones open finish on their own."""
        self._closed.set()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """:meth:`close`, then ends the open connections (their envs closed) and waits for their
        threads, so that none is left running when the process exits."""
        self.close()
        with self._lock:
            open_ = list(self._open.items())
        for _, conn in open_:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread, _ in open_:
            thread.join(timeout_s)

    def __enter__(self) -> "EnvServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _serve(self, conn: socket.socket, peer: Any) -> None:
        try:
            serve_connection(conn, peer, self._make_env, self._token, self._idle)
        finally:
            with self._lock:
                self._open.pop(threading.current_thread(), None)


def serve_connection(conn: socket.socket, peer: Any, make_env: Callable[[], HostEnv], token: bytes,
                     idle_timeout_s: float) -> tuple[str, str]:
    """Serves one connection (HELLO, SPEC, then RESET/STEP until CLOSE) with a batch from ``make_env()``,
    made after the HELLO and closed at the end; a bad message, a bad ``token`` (checked when not empty)
    or an env that raised ends it with an ERROR saying why. The connection is closed on every way out.

    Returns:
        ``(how, why)``: ``"closed"`` (the client said CLOSE), ``"refused"`` (the client said ERROR: ``why``
        is its text), ``"ended"`` (it broke off after the SPEC was sent) or ``"failed"`` (before it).
    """
    env, how, why = None, "failed", ""
    conn.settimeout(idle_timeout_s)
    try:
        _, (sent,) = read_message(conn, HELLO_LIMIT, expect=(Kind.HELLO,))
        check_token(sent, token)
        env = make_env()
        send_message(conn, Kind.SPEC, encode_spec(env.spec))
        how = "ended"
        _loop(conn, env)
        how = "closed"
    except PeerError as err:
        how, why = "refused", str(err)
        log.warning("env server: %s refused this side: %s", peer, err)
    except (ProtocolError, ValueError, TypeError) as err:
        why = str(err)
        log.warning("env server: closing the connection from %s: %s", peer, err)
        _try_send_error(conn, str(err))
    except (OSError, ConnectionError) as err:
        why = str(err)
        log.info("env server: the connection from %s ended: %s", peer, err)
    except Exception as err:  # the env raised: the client is told, the server keeps serving
        why = f"the env raised {type(err).__name__}: {err}"
        log.warning("env server: the env raised %s for %s: %s", type(err).__name__, peer, err)
        _try_send_error(conn, why)
    finally:
        if env is not None:
            try:
                env.close()
            except Exception as err:  # closing a broken env must not take the server down
                log.warning("env server: closing the env of %s raised %s", peer, err)
        _close(conn)
    return how, why


def check_token(token: np.ndarray, expected: bytes, who: str = "this server", variable: str = TOKEN_VARIABLE) -> None:
    """Refuses a HELLO whose token is missing, not a ``uint8 [T]`` array, or not ``expected`` (compared in
    constant time; nothing is checked when ``expected`` is empty); the error says which (``who`` names
    the side that checks, ``variable`` where the token is set), never what either token is."""
    if not expected:
        return
    if token.dtype != np.uint8 or token.ndim != 1:
        raise ProtocolError(f"the token must be a uint8 [T] array (its UTF-8 bytes), got {token.dtype} "
                            f"{token.shape}")
    if token.size == 0:
        raise ProtocolError(f"no token was sent, and {who} requires one: set {variable} on the client (or "
                            f"pass token=) to {who}'s token")
    if not hmac.compare_digest(token.tobytes(), expected):
        raise ProtocolError(f"the token sent does not match {who}'s ({variable})")


def _loop(conn: socket.socket, env: HostEnv) -> None:
    spec, limit = env.spec, step_limit(env.spec)
    while True:
        kind, arrays = read_message(conn, limit, expect=(Kind.RESET, Kind.STEP, Kind.CLOSE))
        if kind == Kind.CLOSE:
            return
        if kind == Kind.RESET:
            seed = arrays[0]
            if seed.dtype != np.int64 or seed.shape != (1,):
                raise ProtocolError(f"a RESET holds a seed, int64 [1]; got {seed.dtype} {seed.shape}")
            send_message(conn, Kind.OBS, [check_obs(spec, env.reset(int(seed[0])))])
        else:
            step = env.step(check_actions(spec, arrays[0]))
            send_message(conn, Kind.RESULT, list(step))


def refuse(conn: socket.socket, why: str) -> None:
    """Says ERROR with ``why`` (best effort, within 1 s) and closes ``conn`` at once."""
    try:
        conn.settimeout(1.0)
    except OSError:
        pass
    _try_send_error(conn, why)
    conn.close()


def _try_send_error(conn: socket.socket, text: str) -> None:
    try:
        send_message(conn, Kind.ERROR, error_arrays(text))
    except OSError:
        pass


def _close(conn: socket.socket) -> None:
    """Closes ``conn`` so that the peer can read what was sent last (an ERROR): the write side first,
    then unread input drained (at most 1 MiB, 1 s) so that closing does not reset the connection."""
    try:
        conn.shutdown(socket.SHUT_WR)
        conn.settimeout(1.0)
        drained = 0
        while drained < 1 << 20:
            data = conn.recv(65536)
            if not data:
                break
            drained += len(data)
    except OSError:
        pass
    conn.close()
