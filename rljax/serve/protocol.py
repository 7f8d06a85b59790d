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
from typing import Any

import numpy as np

from rljax.host.protocol import ARRAY_HEADER, Framing, ProtocolError

__all__ = ["FLAG_SAMPLE", "FRAMING", "Kind", "MAGIC", "MAX_LEAVES", "PROTOCOL", "SEED_LIMIT", "act_limit",
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
