"""rljax's env-server wire protocol: batched reset and step as typed arrays over a byte stream.

A simulator in any language can serve a batch of envs to rljax by speaking this protocol over TCP
(``--env server:HOST:PORT``). Nothing received is unpickled or evaluated: a message is a fixed
12-byte header and a list of typed arrays, and every length is checked before anything is read or
allocated. All integers are little-endian.

Message::

    header   magic b"RLJX" | version u8 (1) | kind u8 | array count u8 | flags u8 (0) | payload bytes u32
    payload  per array: dtype code u8 | ndim u8 (<= 8) | reserved u16 (0) | dims u32 x ndim | data

An array's data is its ``prod(dims) * itemsize`` bytes in C order, little-endian; the payload holds
exactly its arrays, nothing after them. An array's dims may describe at most 2^34 elements, a zero
dim counted as 1 (an empty array carries no data, but may not declare absurd dims either). dtype
codes: 1 bool, 2 uint8, 3 int8, 4 uint16, 5 int16, 6 uint32, 7 int32, 8 uint64, 9 int64, 10 float16,
11 float32, 12 float64.

Conversation (client = rljax, server = the simulator; ``N`` envs, spaces of one env)::

    client HELLO  [token uint8 [T]]                       (T = 0 without a token)
    server SPEC   [num_envs int64 [1], obs_desc, obs_low, obs_high, act_desc, act_low, act_high]
    client RESET  [seed int64 [1]]                         (env i is seeded seed + i)
    server OBS    [obs [N, *obs_shape]]
    client STEP   [actions [N, *action_shape]]
    server RESULT [obs, reward float32 [N], terminated bool [N], truncated bool [N], final_obs]
    ...
    client CLOSE  []
    either ERROR  [utf-8 message uint8 [L]]                 (then closes the connection)

A space is three arrays: ``desc`` int64 ``[2 + ndim]`` = ``[kind, n, *shape]`` (kind 0: Box, n = 0;
kind 1: Discrete, n actions, shape ``[]``), then ``low`` and ``high`` of the space's dtype and
shape (a Discrete space: ``0`` and ``n - 1``). RESULT follows the auto-reset contract of
:mod:`rljax.host.base`: on a step that ended env i's episode, ``obs[i]`` is the next episode's
first observation and ``final_obs[i]`` the last one of the episode that ended.

A receiver checks the header (magic, version, kind, array count, size limit) before it reads the
payload, the payload's layout before it builds an array, and each array against the declared spaces
(:func:`rljax.host.base.check_batch`) before it uses it. Any violation is a :class:`ProtocolError`;
the connection is then closed.
"""

from __future__ import annotations

import enum
import math
import socket
import struct
from typing import Any, NamedTuple

import numpy as np

from rljax.env import Box, Discrete
from rljax.host.base import HostSpec

__all__ = ["ENV_FRAMING", "Framing", "HANDSHAKE_LIMIT", "HELLO_LIMIT", "Kind", "MAGIC", "PeerError",
           "ProtocolError", "VERSION", "decode_header", "decode_header_count", "decode_payload", "decode_spec",
           "encode", "encode_spec", "error_arrays", "error_text", "message_size", "read_message", "result_limit",
           "send_message", "step_limit"]

MAGIC = b"RLJX"
VERSION = 1
HEADER = struct.Struct("<4sBBBBI")
ARRAY_HEADER = struct.Struct("<BBH")
MAX_NDIM = 8
MAX_ELEMENTS = 1 << 34
"""The most elements an array's dims may describe (counting a zero dim as 1)."""
HANDSHAKE_LIMIT = 16 << 20
"""The largest SPEC or ERROR payload accepted (bytes): the spaces' bounds are the largest part."""
HELLO_LIMIT = 64 << 10
ERROR_LIMIT = 8 << 10
"""The largest ERROR payload read whatever the limit of the message expected (:func:`error_arrays` sends
at most 4,000 bytes of text)."""
"""The largest HELLO payload accepted (bytes): a token; read before the token is checked, so small."""


class ProtocolError(ValueError):
    """A message that breaks the protocol: bad header, layout, size, or arrays that do not match the spaces."""


class PeerError(ProtocolError):
    """The peer said ERROR (its text is the message): it refused this side, rather than this side it."""


class Kind(enum.IntEnum):
    HELLO = 1
    SPEC = 2
    RESET = 3
    OBS = 4
    STEP = 5
    RESULT = 6
    CLOSE = 7
    ERROR = 8


ARRAY_COUNTS = {Kind.HELLO: 1, Kind.SPEC: 7, Kind.RESET: 1, Kind.OBS: 1, Kind.STEP: 1, Kind.RESULT: 5,
                Kind.CLOSE: 0, Kind.ERROR: 1}
"""How many arrays each kind of message holds."""


class Framing(NamedTuple):
    """A protocol on this framing: its magic, its kinds of message and how many arrays each holds
    (a count, or an inclusive ``(low, high)`` range for a kind whose arrays vary). The env protocol
    is :data:`ENV_FRAMING`; :mod:`rljax.serve.protocol` speaks another on the same framing."""

    magic: bytes
    name: str
    kinds: type[enum.IntEnum]
    counts: dict[int, int | tuple[int, int]]
    error: int

    def count_ok(self, kind: int, count: int) -> bool:
        want = self.counts[kind]
        return want[0] <= count <= want[1] if isinstance(want, tuple) else count == want

    def count_text(self, kind: int) -> str:
        want = self.counts[kind]
        return f"{want[0]} to {want[1]}" if isinstance(want, tuple) else str(want)


ENV_FRAMING = Framing(MAGIC, "env", Kind, ARRAY_COUNTS, Kind.ERROR)
"""The env protocol's framing."""

DTYPES = {1: np.bool_, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.uint32, 7: np.int32,
          8: np.uint64, 9: np.int64, 10: np.float16, 11: np.float32, 12: np.float64}
CODES = {np.dtype(t): c for c, t in DTYPES.items()}


def _array_bytes(x: np.ndarray) -> bytes:
    code = CODES.get(x.dtype.newbyteorder("="))
    if code is None:
        raise ProtocolError(f"dtype {x.dtype} cannot be sent; the protocol carries "
                            f"{', '.join(np.dtype(t).name for t in DTYPES.values())}")
    if x.ndim > MAX_NDIM or any(d >= 2 ** 32 for d in x.shape):
        raise ProtocolError(f"an array of shape {x.shape} cannot be sent: at most {MAX_NDIM} dims, each < 2^32")
    if math.prod(max(d, 1) for d in x.shape) > MAX_ELEMENTS:  # what the receiver refuses, even when empty
        raise ProtocolError(f"an array of shape {x.shape} cannot be sent: its dims describe over {MAX_ELEMENTS} "
                            f"elements (a zero dim counted as 1)")
    data = np.ascontiguousarray(x, dtype=x.dtype.newbyteorder("<")).tobytes()
    return ARRAY_HEADER.pack(code, x.ndim, 0) + struct.pack(f"<{x.ndim}I", *x.shape) + data


def encode(kind: Kind, arrays: list[np.ndarray], framing: Framing = ENV_FRAMING) -> bytes:
    """One message: the header and ``arrays`` (as many as ``kind`` holds)."""
    kind = framing.kinds(kind)
    if not framing.count_ok(kind, len(arrays)):
        raise ProtocolError(f"a {kind.name} message holds {framing.count_text(kind)} arrays, not {len(arrays)}")
    payload = b"".join(_array_bytes(np.asarray(a)) for a in arrays)
    if len(payload) >= 2 ** 32:
        raise ProtocolError(f"a payload of {len(payload)} bytes is over the protocol's 4 GiB limit")
    return HEADER.pack(framing.magic, VERSION, int(kind), len(arrays), 0, len(payload)) + payload


def message_size(shapes_dtypes: list[tuple[tuple[int, ...], Any]]) -> int:
    """The payload bytes of a message whose arrays have these ``(shape, dtype)``s."""
    return sum(ARRAY_HEADER.size + 4 * len(s) + math.prod(s) * np.dtype(d).itemsize for s, d in shapes_dtypes)


def decode_header(header: bytes, limit: int, expect: tuple[Kind, ...] = (),
                  framing: Framing = ENV_FRAMING) -> tuple[Kind, int]:
    """``(kind, payload bytes)`` of a 12-byte header, checked: magic, version, a known kind (one of
    ``expect`` when given, or ERROR), its array count, flags 0, and a payload of at most ``limit`` bytes."""
    return decode_header_count(header, limit, expect, framing)[:2]


def decode_header_count(header: bytes, limit: int, expect: tuple[Kind, ...] = (),
                        framing: Framing = ENV_FRAMING) -> tuple[Kind, int, int]:
    """:func:`decode_header` with the array count the header declares: ``(kind, payload bytes, count)``."""
    if len(header) != HEADER.size:
        raise ProtocolError(f"a header is {HEADER.size} bytes, got {len(header)}")
    magic, version, kind, count, flags, length = HEADER.unpack(header)
    if magic != framing.magic:
        raise ProtocolError(f"not an rljax {framing.name}-protocol message: magic {magic!r}, expected "
                            f"{framing.magic!r}")
    if version != VERSION:
        raise ProtocolError(f"protocol version {version}; this side speaks version {VERSION}")
    kinds = framing.kinds
    if kind not in kinds._value2member_map_:
        raise ProtocolError(f"unknown message kind {kind}; known: {', '.join(f'{k.value} {k.name}' for k in kinds)}")
    kind = kinds(kind)
    if expect and kind not in expect and kind != framing.error:
        raise ProtocolError(f"expected {' or '.join(k.name for k in expect)}, got {kind.name}")
    if not framing.count_ok(kind, count) or flags != 0:
        raise ProtocolError(f"a {kind.name} message holds {framing.count_text(kind)} arrays and flags 0; got "
                            f"{count} arrays and flags {flags}")
    if length > (max(limit, ERROR_LIMIT) if kind == framing.error else limit):  # an ERROR is read whatever came
        raise ProtocolError(f"a {kind.name} payload of {length} bytes is over the limit of {limit} bytes here")
    return kind, length, count


def decode_payload(kind: Kind, payload: bytes, count: int | None = None,
                   framing: Framing = ENV_FRAMING) -> list[np.ndarray]:
    """The arrays of a ``kind`` message's payload (``count`` of them: the header's; None: the kind's
    fixed count), each a fresh (writable, native-order) array; the layout is checked before each
    array is built, and nothing may follow the last one."""
    arrays, offset, view = [], 0, memoryview(payload)
    kind = framing.kinds(kind)
    for i in range(framing.counts[kind] if count is None else count):
        if offset + ARRAY_HEADER.size > len(payload):
            raise ProtocolError(f"array {i} of a {kind.name} message: the payload ends inside its header")
        code, ndim, reserved = ARRAY_HEADER.unpack_from(payload, offset)
        offset += ARRAY_HEADER.size
        if code not in DTYPES or ndim > MAX_NDIM or reserved:
            raise ProtocolError(f"array {i}: dtype code {code} (known 1-{len(DTYPES)}), ndim {ndim} (at most "
                                f"{MAX_NDIM}), reserved {reserved} (must be 0)")
        if offset + 4 * ndim > len(payload):
            raise ProtocolError(f"array {i}: the payload ends inside its dims")
        dims = struct.unpack_from(f"<{ndim}I", payload, offset)
        offset += 4 * ndim
        if math.prod(max(d, 1) for d in dims) > MAX_ELEMENTS:  # an empty array may not hide huge dims either
            raise ProtocolError(f"array {i}: shape {tuple(dims)} is over {MAX_ELEMENTS} elements")
        dtype = np.dtype(DTYPES[code]).newbyteorder("<")
        nbytes = math.prod(dims) * dtype.itemsize
        if offset + nbytes > len(payload):
            raise ProtocolError(f"array {i}: shape {tuple(dims)} of {dtype.name} needs {nbytes} bytes, "
                                f"{len(payload) - offset} are left")
        data = np.frombuffer(view[offset:offset + nbytes], dtype=dtype).reshape(dims)
        # A bool is any nonzero byte: normalised, so that no array holds a bool byte other than 0 or 1.
        if code == 1:
            out = np.empty(dims, np.bool_)
            np.not_equal(data.view(np.uint8), 0, out=out)
            arrays.append(out)
        else:
            arrays.append(data.astype(dtype.newbyteorder("="), copy=True))
        offset += nbytes
    if offset != len(payload):
        raise ProtocolError(f"{len(payload) - offset} bytes follow the last array of a {kind.name} message")
    return arrays


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError(f"the connection closed {n - left} bytes into a {n}-byte read")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_message(sock: socket.socket, limit: int, expect: tuple[Kind, ...] = (),
                 framing: Framing = ENV_FRAMING) -> tuple[Kind, list[np.ndarray]]:
    """Reads one message from ``sock`` (its timeout applies to every read): the header is checked
    (:func:`decode_header`) before the payload is read. An ERROR from the peer raises
    :class:`ProtocolError` with its text. Returns ``(kind, arrays)``."""
    kind, length, count = decode_header_count(_recv_exact(sock, HEADER.size), limit, expect, framing)
    arrays = decode_payload(kind, _recv_exact(sock, length), count, framing)
    if kind == framing.error:
        raise PeerError(f"the peer reported an error: {error_text(arrays[0])}")
    return kind, arrays


def error_text(array: np.ndarray) -> str:
    """The text an ERROR message's array carries (at most 2000 bytes of it)."""
    return array.astype(np.uint8).tobytes()[:2000].decode("utf-8", "replace") if array.ndim == 1 else "?"


def send_message(sock: socket.socket, kind: Kind, arrays: list[np.ndarray], framing: Framing = ENV_FRAMING) -> None:
    sock.sendall(encode(kind, arrays, framing))


def error_arrays(text: str) -> list[np.ndarray]:
    """The arrays of an ERROR message saying ``text``."""
    return [np.frombuffer(text.encode("utf-8")[:4000], dtype=np.uint8)]


# ----- spaces -----


def _space_arrays(space: Any) -> list[np.ndarray]:
    if isinstance(space, Discrete):
        dtype = np.dtype(space.dtype)
        return [np.array([1, space.n], np.int64), np.array(0, dtype), np.array(space.n - 1, dtype)]
    dtype = np.dtype(space.dtype)
    return [np.array([0, 0, *space.shape], np.int64), np.asarray(space.low, dtype), np.asarray(space.high, dtype)]


def encode_spec(spec: HostSpec) -> list[np.ndarray]:
    """The seven arrays of a SPEC message for ``spec``."""
    return [np.array([spec.num_envs], np.int64), *_space_arrays(spec.observation_space),
            *_space_arrays(spec.action_space)]


def _space(name: str, desc: np.ndarray, low: np.ndarray, high: np.ndarray) -> Any:
    if desc.dtype != np.int64 or desc.ndim != 1 or not 2 <= desc.size <= 2 + MAX_NDIM:
        raise ProtocolError(f"{name}: the description is int64 [kind, n, *shape], got {desc.dtype} {desc.shape}")
    kind, n, shape = int(desc[0]), int(desc[1]), tuple(int(d) for d in desc[2:])
    if low.dtype != high.dtype or low.shape != high.shape:
        raise ProtocolError(f"{name}: low and high differ in dtype or shape ({low.dtype} {low.shape}, "
                            f"{high.dtype} {high.shape})")
    if kind == 1:
        if not 1 <= n < 2 ** 31 or shape or low.shape or not np.issubdtype(low.dtype, np.integer):
            raise ProtocolError(f"{name}: a Discrete space has 1 <= n < 2^31, no shape and integer bounds; got n={n}, "
                                f"shape {shape}, bounds {low.dtype} {low.shape}")
        return Discrete(n, dtype=low.dtype)
    if kind == 0:
        if n != 0 or low.shape != shape or any(d < 0 for d in shape):
            raise ProtocolError(f"{name}: a Box has n = 0 and bounds of its shape; got n={n}, shape {shape}, "
                                f"bounds {low.shape}")
        if np.issubdtype(low.dtype, np.floating) and (np.isnan(low).any() or np.isnan(high).any()):
            raise ProtocolError(f"{name}: a Box's bounds may be infinite, never NaN")
        if np.any(low > high):
            raise ProtocolError(f"{name}: low > high somewhere in the Box")
        return Box(low, high, shape, dtype=low.dtype)
    raise ProtocolError(f"{name}: space kind {kind} (0: Box, 1: Discrete)")


def decode_spec(arrays: list[np.ndarray]) -> HostSpec:
    """The :class:`~rljax.host.base.HostSpec` a SPEC message declares, checked."""
    try:
        return _decode_spec(arrays)
    except ProtocolError:
        raise
    except (ValueError, TypeError, OverflowError) as err:  # a space rljax cannot hold
        raise ProtocolError(f"the SPEC declares spaces rljax cannot use: {err}") from None


def _decode_spec(arrays: list[np.ndarray]) -> HostSpec:
    num_envs = arrays[0]
    if num_envs.dtype != np.int64 or num_envs.shape != (1,) or not 1 <= int(num_envs[0]) <= 1 << 20:
        raise ProtocolError(f"num_envs is int64 [1] in 1..2^20, got {num_envs.dtype} {num_envs.shape} {num_envs}")
    obs_space = _space("observation space", *arrays[1:4])
    action_space = _space("action space", *arrays[4:7])
    if isinstance(action_space, Box) and not np.issubdtype(np.dtype(action_space.dtype), np.floating):
        raise ProtocolError(f"action space: a Box of actions is floating, got {action_space.dtype}")
    return HostSpec(int(num_envs[0]), obs_space, action_space)


def result_limit(spec: HostSpec) -> int:
    """The payload bytes of a RESULT message for ``spec``: the largest message the server sends."""
    n, obs = spec.num_envs, ((spec.num_envs, *spec.obs_shape), spec.obs_dtype)
    return message_size([obs, ((n,), np.float32), ((n,), np.bool_), ((n,), np.bool_), obs])


def step_limit(spec: HostSpec) -> int:
    """The payload bytes of a STEP message for ``spec``: the largest message the client sends after HELLO."""
    return max(message_size([((spec.num_envs, *spec.action_shape), spec.action_dtype)]),
               message_size([((1,), np.int64)]))
