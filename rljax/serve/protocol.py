"""rljax's policy-serving wire protocol: observations in, actions and the policy's version out.

It is the env protocol's framing (:mod:`rljax.host.protocol`: a 12-byte header, then typed arrays,
every length checked before anything is read or allocated, nothing unpickled) with its own magic
``b"RLJP"`` and kinds of message, so that a client that dials an env server, or an env-protocol
client that dials a policy server, is told so at the first header. All integers are little-endian.

Conversation (client = a simulator, robot or rollout worker; server = ``rljax serve``)::

    client HELLO   [token uint8 [T]]                              (T = 0 without a token)
    server SPEC    [description uint8 [L]]                        (UTF-8 JSON, below)
    client ACT     [meta int64 [4], reset bool [B], *obs leaves [B, ...]]
    server ACTION  [meta int64 [2], action [B, *action_shape]]    (meta = request id, version)
       or REFUSED  [meta int64 [2], message uint8 [L]]            (nothing was acted on; the session stays)
    ...
    client CLOSE   []
    either ERROR   [utf-8 message uint8 [L]]                      (then closes the connection)

ACT's ``meta`` is ``[request id, pinned version (-1: any), flags, seed]``: flags bit 0 asks for a
sampled action instead of the deterministic one (row ``i`` sampled with the key
``jax.random.fold_in(jax.random.key(seed), i)``, ``0 <= seed < 2^31``); other bits are 0. ``reset``
marks the rows whose episode starts here: a recurrent policy's state for that row starts from its
initial state (a memoryless policy ignores it). The obs leaves are the observation's arrays in the
order SPEC lists them, each ``[B, *shape]`` of its dtype, ``1 <= B <= max_batch``.

SPEC's description holds ``protocol`` (``"rljax-policy"``), ``version`` (the version served at the
handshake: the checkpoint's step), ``inputs`` (``[{name, shape, dtype}]`` per observation leaf, one
row's shape), ``action`` (``{shape, dtype}`` of one row), ``action_space`` and ``observation_space``
(as ``policy.json`` writes them), ``recurrent``, ``sampling`` (whether sampled actions are served),
``max_batch``, ``algorithm`` and ``env``.

A well-formed ACT that the policy cannot act on (a leaf of the wrong shape or dtype, a pinned version
that is not the one served, a seed out of range, a recurrent session's batch changed without a reset
of every row) gets REFUSED with the reason and the connection stays open; a message that breaks the
framing (bad header, oversized, truncated, garbage) or a bad token gets ERROR and the connection is
closed.
"""

from __future__ import annotations

import enum
import json
import math
import struct
from typing import Any

import numpy as np

from rljax.host.protocol import ARRAY_HEADER, CODES, HEADER, VERSION, Framing, ProtocolError

__all__ = ["Codec", "FLAG_SAMPLE", "FRAMING", "Kind", "MAGIC", "MAX_LEAVES", "PROTOCOL", "SEED_LIMIT", "act_limit",
           "decode_description", "encode_description", "text_array"]

MAGIC = b"RLJP"
PROTOCOL = "rljax-policy"
FLAG_SAMPLE = 1
"""ACT flags bit 0: a sampled action (the deterministic one otherwise)."""
SEED_LIMIT = 2 ** 31
"""A sampled request's seed is in ``[0, SEED_LIMIT)``."""
MAX_LEAVES = 64
"""The most observation leaves an ACT may carry."""


class Kind(enum.IntEnum):
    HELLO = 1
    SPEC = 2
    ACT = 3
    ACTION = 4
    REFUSED = 5
    CLOSE = 6
    ERROR = 7


FRAMING = Framing(MAGIC, "policy", Kind, {Kind.HELLO: 1, Kind.SPEC: 1, Kind.ACT: (3, 2 + MAX_LEAVES),
                                          Kind.ACTION: 2, Kind.REFUSED: 2, Kind.CLOSE: 0, Kind.ERROR: 1}, Kind.ERROR)
"""The policy protocol's framing (magic ``RLJP``)."""


def text_array(text: str, limit: int = 4000) -> np.ndarray:
    """``text`` as a uint8 array of its UTF-8 bytes (at most ``limit`` of them)."""
    return np.frombuffer(text.encode("utf-8")[:limit], dtype=np.uint8)


def encode_description(description: dict[str, Any]) -> list[np.ndarray]:
    """The one array of a SPEC message."""
    return [np.frombuffer(json.dumps(description, sort_keys=True).encode("utf-8"), np.uint8)]


def decode_description(arrays: list[np.ndarray]) -> dict[str, Any]:
    """The description a SPEC message carries, checked for what a client relies on.

    Raises:
        ProtocolError: not UTF-8 JSON, not the policy protocol, or a field missing or malformed.
    """
    raw = arrays[0]
    if raw.dtype != np.uint8 or raw.ndim != 1:
        raise ProtocolError(f"a SPEC holds uint8 [L] UTF-8 JSON, got {raw.dtype} {raw.shape}")
    try:
        description = json.loads(raw.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ProtocolError(f"the SPEC is not UTF-8 JSON: {err}") from None
    if not isinstance(description, dict) or description.get("protocol") != PROTOCOL:
        raise ProtocolError(f"the SPEC does not describe an {PROTOCOL} server")
    try:
        inputs = [(str(x["name"]), tuple(int(d) for d in x["shape"]), np.dtype(x["dtype"]))
                  for x in description["inputs"]]
        action = (tuple(int(d) for d in description["action"]["shape"]), np.dtype(description["action"]["dtype"]))
        int(description["version"]), int(description["max_batch"]), bool(description["recurrent"])
    except (KeyError, TypeError, ValueError) as err:
        raise ProtocolError(f"the SPEC's description is malformed: {type(err).__name__}: {err}") from None
    if not 1 <= len(inputs) <= MAX_LEAVES:
        raise ProtocolError(f"the SPEC lists {len(inputs)} observation leaves; 1 to {MAX_LEAVES} are allowed")
    description["_inputs"], description["_action"] = inputs, action
    return description


def act_limit(inputs: list[tuple[str, tuple[int, ...], Any]], max_batch: int) -> int:
    """The payload bytes of the largest ACT a server with these observation ``inputs`` accepts:
    ``max_batch`` rows."""
    arrays = [((4,), np.int64), ((max_batch,), np.bool_)] + [((max_batch, *s), d) for _, s, d in inputs]
    return sum(ARRAY_HEADER.size + 4 * len(s) + int(np.prod(s)) * np.dtype(d).itemsize for s, d in arrays)


def _array_header(dtype: Any, shape: tuple[int, ...]) -> bytes:
    return ARRAY_HEADER.pack(CODES[np.dtype(dtype)], len(shape), 0) + struct.pack(f"<{len(shape)}I", *shape)


class Codec:
    """The messages a server sends and reads most, for one policy, without the generic path's per-array
    work: :meth:`action` is byte for byte ``encode(Kind.ACTION, [[rid, version], rows], FRAMING)``, and
    :meth:`act` reads an ACT payload whose every array header is exactly the one a fit request of its
    row count has (what :func:`rljax.host.protocol.decode_payload` would give, bools normalised, fresh
    arrays); it returns None for anything else, which the generic path then reads and judges.

    Args:
        inputs: the observation leaves ``[(name, shape, dtype)]`` of one row.
        action: ``(shape, dtype)`` of one row's action.
        max_batch: the most rows a request may carry.
    """

    _META = _array_header(np.int64, (4,))
    _REPLY_META = _array_header(np.int64, (2,))

    def __init__(self, inputs: list[tuple[str, tuple[int, ...], Any]], action: tuple[tuple[int, ...], Any],
                 max_batch: int):
        self._inputs = [(tuple(shape), np.dtype(dtype)) for _, shape, dtype in inputs]
        self._action_shape, self._action_dtype = tuple(action[0]), np.dtype(action[1])
        self._max_batch = int(max_batch)
        self._layouts: dict[int, tuple[list[tuple[int, bytes]], int]] = {}

    def action(self, rid: int, version: int, rows: np.ndarray) -> bytes:
        """An ACTION message: request ``rid``, ``version``, the action ``rows`` ``[B, *action_shape]``."""
        data = np.ascontiguousarray(rows, self._action_dtype.newbyteorder("<")).tobytes()
        body = (self._REPLY_META + struct.pack("<qq", rid, version)
                + _array_header(self._action_dtype, (rows.shape[0], *self._action_shape)) + data)
        return HEADER.pack(MAGIC, VERSION, int(Kind.ACTION), 2, 0, len(body)) + body

    def _layout(self, rows: int) -> tuple[list[tuple[int, bytes]], int]:
        """``([(offset, array header)], payload bytes)`` of a fit ACT of ``rows`` rows."""
        if rows not in self._layouts:
            arrays = [((4,), np.dtype(np.int64)), ((rows,), np.dtype(np.bool_))] + [
                ((rows, *shape), dtype) for shape, dtype in self._inputs]
            out, offset = [], 0
            for shape, dtype in arrays:
                header = _array_header(dtype, shape)
                out.append((offset, header))
                offset += len(header) + math.prod(shape) * dtype.itemsize
            self._layouts[rows] = (out, offset)
        return self._layouts[rows]

    def act(self, payload: bytes) -> list[np.ndarray] | None:
        """The arrays of a fit ACT's ``payload`` (see the class docstring), or None."""
        meta_end = len(self._META) + 32
        if payload[:len(self._META)] != self._META or len(payload) < meta_end + 8:
            return None
        rows = int.from_bytes(payload[meta_end + 4:meta_end + 8], "little")
        if not 1 <= rows <= self._max_batch:
            return None
        layout, size = self._layout(rows)
        if size != len(payload) or any(payload[o:o + len(h)] != h for o, h in layout):
            return None
        out = []
        for (offset, header), (shape, dtype) in zip(layout, [((4,), np.dtype(np.int64)), ((rows,), np.dtype(bool))]
                                                    + [((rows, *s), d) for s, d in self._inputs]):
            start, count = offset + len(header), math.prod(shape)
            if dtype == np.bool_:  # any nonzero byte is True (a legal-action mask's 0x80 too)
                out.append((np.frombuffer(payload, np.uint8, count, start) != 0).reshape(shape))
            else:
                little = np.frombuffer(payload, dtype.newbyteorder("<"), count, start).reshape(shape)
                out.append(little.astype(dtype.newbyteorder("="), copy=True))
        return out
