"""A batch of host envs behind an env server (``--env server:HOST:PORT``).

:class:`ServerEnv` connects, sends HELLO (with the shared token when there is one), learns the batch
size and spaces from the server's SPEC, and then resets and steps the batch over
:mod:`rljax.host.protocol`. What comes back is checked against the declared spaces before it is
returned. Failures are typed: a reply that takes longer than ``timeout_s`` raises
:class:`~rljax.host.base.EnvTimeoutError`, a closed or refused connection
:class:`~rljax.host.base.EnvConnectionError`, a malformed reply or an ERROR from the server
:class:`~rljax.host.protocol.ProtocolError`; after any of them the connection is closed and the
object unusable (make a new one to reconnect).
"""

from __future__ import annotations

import os
import socket
from typing import Any

import numpy as np

from rljax.host.base import EnvConnectionError, EnvTimeoutError, HostStep, check_actions, check_batch, check_obs
from rljax.host.protocol import (HANDSHAKE_LIMIT, Kind, ProtocolError, decode_spec, read_message, result_limit,
                                 send_message)
from rljax.host.server import TOKEN_VARIABLE, refuse

__all__ = ["ServerEnv"]


class ServerEnv:
    """The batch of envs an env server at ``host:port`` serves (see the module docstring).

    Args:
        host, port: the server.
        token: the shared token; None reads ``RLJAX_ENV_SERVER_TOKEN`` (none: an empty token).
        timeout_s: the longest wait for one reply (reset or step) before EnvTimeoutError.
        connect_timeout_s: the longest wait to connect and receive the SPEC.
        sock: a connection already made (a rollout worker that dialled the learner:
            :mod:`rljax.host.listen`), used instead of connecting to ``host:port``; it is closed with this.
    """

    def __init__(self, host: str, port: int, token: str | None = None, timeout_s: float = 60.0,
                 connect_timeout_s: float = 10.0, sock: socket.socket | None = None):
        if timeout_s <= 0 or connect_timeout_s <= 0:
            raise ValueError(f"timeout_s={timeout_s}, connect_timeout_s={connect_timeout_s}: both must be > 0")
        self.address = (host, int(port))
        self.timeout_s = float(timeout_s)
        token = os.environ.get(TOKEN_VARIABLE, "") if token is None else token
        try:
            self._sock: socket.socket | None = sock or socket.create_connection(self.address, timeout=connect_timeout_s)
        except OSError as err:
            raise EnvConnectionError(f"cannot connect to the env server at {host}:{port}: {err}") from None
        try:
            self._sock.settimeout(connect_timeout_s)
            send_message(self._sock, Kind.HELLO, [np.frombuffer(token.encode(), np.uint8)])
            _, arrays = self._call(lambda: read_message(self._sock, HANDSHAKE_LIMIT, expect=(Kind.SPEC,)), "its SPEC")
            self.spec = decode_spec(arrays)
            self._limit = result_limit(self.spec)
            self._sock.settimeout(self.timeout_s)
        except BaseException:
            self.close()
            raise

    def _call(self, fn: Any, what: str) -> Any:
        if self._sock is None:
            raise EnvConnectionError(f"the connection to the env server at {self._where} is closed")
        timeout = self._sock.gettimeout()
        try:
            return fn()
        except socket.timeout:
            self.close()
            raise EnvTimeoutError(f"the env server at {self._where} did not send {what} within {timeout:g} s") from None
        except ProtocolError:
            self.close()
            raise
        except (OSError, ConnectionError) as err:
            self.close()
            raise EnvConnectionError(f"the connection to the env server at {self._where} failed while waiting for "
                                     f"{what}: {err}") from None

    @property
    def _where(self) -> str:
        return f"{self.address[0]}:{self.address[1]}"

    def reset(self, seed: int) -> np.ndarray:
        """Starts every env, env ``i`` seeded ``seed + i``; returns ``obs [N, *obs_shape]``."""
        def call():
            send_message(self._sock, Kind.RESET, [np.array([int(seed)], np.int64)])
            return read_message(self._sock, self._limit, expect=(Kind.OBS,))

        _, (obs,) = self._call(call, "the reset's observations")
        return self._checked(lambda: check_obs(self.spec, obs))

    def step(self, actions: np.ndarray) -> HostStep:
        actions = check_actions(self.spec, np.asarray(actions, self.spec.action_dtype))

        def call():
            send_message(self._sock, Kind.STEP, [actions])
            return read_message(self._sock, self._limit, expect=(Kind.RESULT,))

        _, arrays = self._call(call, "a step's result")
        return self._checked(lambda: check_batch(self.spec, HostStep(*arrays)))

    def _checked(self, check: Any) -> Any:
        try:
            return check()
        except (ValueError, TypeError) as err:
            self.close()
            raise ProtocolError(f"the env server at {self._where} sent a reply that does not match its spaces: "
                                f"{err}") from None

    farewell = True
    """Whether :meth:`close` says CLOSE (a rollout worker takes CLOSE as the run's end, and goes; without
    it the worker connects again: :mod:`rljax.host.listen`)."""

    def close(self) -> None:
        """Says CLOSE (best effort; not when :attr:`farewell` is False) and closes the connection."""
        sock, self._sock = self._sock, None
        if sock is None:
            return
        try:
            if self.farewell:
                sock.settimeout(1.0)
                send_message(sock, Kind.CLOSE, [])
        except OSError:
            pass
        sock.close()

    def refuse(self, why: str) -> None:
        """Says ERROR with ``why`` (best effort) and closes the connection: the server is told it was refused."""
        sock, self._sock = self._sock, None
        if sock is not None:
            refuse(sock, why)

    def __repr__(self) -> str:
        return f"ServerEnv({self._where}, num_envs={self.spec.num_envs})" if hasattr(self, "spec") else "ServerEnv(?)"
