"""The Python client of ``rljax serve``: ``Client(host, port).act(obs) -> (action, version)``.

One client is one session: the server keeps a recurrent policy's state for it (row by row; ``reset``
marks the rows whose episode starts). A client sends one request at a time; open several clients
for concurrency (the server batches them). ``docs/serving.md`` has a client in plain numpy for
programs that do not install rljax.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any

import numpy as np

from rljax.host.protocol import HANDSHAKE_LIMIT, ProtocolError, error_text, read_message, send_message
from rljax.serve.protocol import FLAG_SAMPLE, FRAMING, Kind, decode_description, text_array

__all__ = ["Client", "Refused", "ServeError"]


class ServeError(ConnectionError):
    """The server could not be reached, closed the connection, broke the protocol or said ERROR (the
    client is then closed)."""


class Refused(ValueError):
    """The server refused a request without acting on it (a pinned version it does not serve, an
    observation of the wrong shape or dtype, ...); the session goes on. ``version`` is the one it serves."""

    def __init__(self, message: str, version: int):
        super().__init__(message)
        self.version = version


class Client:
    """A session with a policy server.

    Args:
        host, port: the server (``rljax serve ... --port P`` listens on 127.0.0.1:P).
        token: the shared token; None reads ``RLJAX_SERVE_TOKEN`` (none: no token).
        timeout_s: the longest wait for a reply.

    Attributes:
        spec: the server's description (:mod:`rljax.serve.protocol`): inputs, action, version, ...
        version: the version the last reply named (at first, the one served at the handshake).
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 5600, token: str | None = None, timeout_s: float = 30.0):
        from rljax.serve.server import TOKEN_VARIABLE

        token = os.environ.get(TOKEN_VARIABLE, "") if token is None else token
        self.address = (host, int(port))
        try:
            self._sock: socket.socket | None = socket.create_connection(self.address, timeout=timeout_s)
        except OSError as err:
            raise ServeError(f"cannot connect to the policy server at {host}:{port}: {err}") from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._next_id = 0
        try:
            send_message(self._sock, Kind.HELLO, [text_array(token, 1 << 16)], FRAMING)
            _, arrays = self._read(HANDSHAKE_LIMIT, (Kind.SPEC,))
            self.spec = decode_description(arrays)
        except BaseException:
            self.close()
            raise
        self._inputs, (self._action_shape, self._action_dtype) = self.spec["_inputs"], self.spec["_action"]
        self.version = int(self.spec["version"])
        row = int(np.prod(self._action_shape)) * self._action_dtype.itemsize
        self._limit = 64 + self.spec["max_batch"] * row + 4096  # an ACTION of max_batch rows, or a REFUSED

    def _read(self, limit: int, expect: tuple[Kind, ...]) -> tuple[Kind, list[np.ndarray]]:
        if self._sock is None:
            raise ServeError(f"the connection to {self._where} is closed")
        try:
            return read_message(self._sock, limit, expect, FRAMING)
        except (ProtocolError, OSError, ConnectionError) as err:
            self.close()
            what = "timed out" if isinstance(err, socket.timeout) else f"{type(err).__name__}: {err}"
            raise ServeError(f"the policy server at {self._where}: {what}") from None

    @property
    def _where(self) -> str:
        return f"{self.address[0]}:{self.address[1]}"

    def act(self, obs: Any, *, reset: Any = None, deterministic: bool = True, seed: int = 0,
            version: int | None = None) -> tuple[np.ndarray, int]:
        """The policy's action for ``obs`` and the version that chose it.

        Args:
            obs: one observation or a batch ``[B, ...]`` (a dict of arrays for a dict observation),
                converted to the dtypes the server's inputs declare.
            reset: (recurrent policies) bool, or bool ``[B]``: the rows whose episode starts now
                (their state starts over). A session's first request starts every row.
            deterministic: the greedy/mean action; False samples it (row ``i`` with
                ``fold_in(key(seed), i)``).
            seed: the sampled request's seed, ``0 <= seed < 2^31``.
            version: act only with this version; the server refuses (:class:`Refused`) otherwise.

        Returns:
            ``(action, version)``: ``action`` of one row, or ``[B, ...]`` for a batch.

        Raises:
            Refused: the server did not act on this request (the session goes on).
            ServeError: the connection failed or the server said ERROR (the client is closed).
            ValueError: ``obs`` does not fit the server's inputs (nothing was sent).
        """
        if self._sock is None:
            raise ServeError(f"this client's connection to {self._where} is closed: make a new Client")
        leaves, single = self._leaves(obs)
        rows = leaves[0].shape[0]
        reset = np.broadcast_to(np.asarray(False if reset is None else reset, np.bool_), (rows,))
        rid, self._next_id = self._next_id, self._next_id + 1
        meta = np.array([rid, -1 if version is None else int(version), 0 if deterministic else FLAG_SAMPLE,
                         int(seed)], np.int64)
        try:
            send_message(self._sock, Kind.ACT, [meta, np.ascontiguousarray(reset), *leaves], FRAMING)
        except OSError as err:
            self.close()
            raise ServeError(f"cannot send to the policy server at {self._where}: {err}") from None
        kind, arrays = self._read(self._limit, (Kind.ACTION, Kind.REFUSED))
        got_id, got_version = (int(x) for x in arrays[0])
        if got_id != rid:
            self.close()
            raise ServeError(f"the policy server at {self._where} answered request {got_id}, not {rid}")
        self.version = got_version
        if kind == Kind.REFUSED:
            raise Refused(f"the policy server at {self._where} refused the request: {error_text(arrays[1])}",
                          got_version)
        action = arrays[1]
        return (action[0] if single else action), got_version

    def _leaves(self, obs: Any) -> tuple[list[np.ndarray], bool]:
        names = [n for n, _, _ in self._inputs]
        if isinstance(obs, Mapping):
            keys = [n[len("obs_"):] if n.startswith("obs_") else n for n in names]
            missing = [k for k in keys if k not in obs]
            if missing:
                raise ValueError(f"obs lacks {missing}; the server's inputs are {names}")
            values = [obs[k] for k in keys]
        elif len(self._inputs) == 1:
            values = [obs]
        else:
            raise ValueError(f"the server's policy takes {len(names)} observation arrays ({names}): pass a dict")
        out, single = [], None
        for x, (name, shape, dtype) in zip(values, self._inputs):
            x = np.asarray(x)
            one = x.shape == shape
            if not one and x.shape[1:] != shape:
                raise ValueError(f"observation {name} of shape {x.shape} is neither one row {shape} nor a batch "
                                 f"[B, *{shape}]")
            if single is not None and one != single:
                raise ValueError("mixing one observation and a batch across the observation's arrays")
            single = one
            out.append(np.ascontiguousarray((x[None] if one else x).astype(dtype, copy=False)))
        if not 1 <= out[0].shape[0] <= self.spec["max_batch"]:
            raise ValueError(f"a request carries 1 to {self.spec['max_batch']} rows (the server's --max-batch); got "
                             f"{out[0].shape[0]}")
        return out, bool(single)

    def close(self) -> None:
        """Says CLOSE (best effort) and closes the connection."""
        sock, self._sock = getattr(self, "_sock", None), None
        if sock is None:
            return
        try:
            sock.settimeout(1.0)
            send_message(sock, Kind.CLOSE, [], FRAMING)
        except OSError:
            pass
        sock.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client({self._where}, version={getattr(self, 'version', '?')})"
