"""The env protocol's codec: round trips, every header and layout check, the spaces, and a fuzzed decoder
that only ever returns arrays or raises ProtocolError."""

from __future__ import annotations

import socket
import struct

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from rljax.env import Box, Discrete
from rljax.host.base import HostSpec
from rljax.host.protocol import (DTYPES, HANDSHAKE_LIMIT, HEADER, Kind, ProtocolError, decode_header, decode_payload,
                                 decode_spec, encode, encode_spec, error_arrays, message_size, read_message,
                                 result_limit, step_limit)

DTYPE_LIST = [np.dtype(t) for t in DTYPES.values()]


class _Feed:
    """A socket stand-in that hands out ``data`` and records how much was asked for."""

    def __init__(self, data: bytes):
        self.data, self.asked = data, []

    def recv(self, n: int) -> bytes:
        self.asked.append(n)
        out, self.data = self.data[:n], self.data[n:]
        return out


def _roundtrip(kind: Kind, arrays: list[np.ndarray]) -> list[np.ndarray]:
    message = encode(kind, arrays)
    got_kind, length = decode_header(message[:HEADER.size], limit=len(message))
    assert got_kind == kind and length == len(message) - HEADER.size
    return decode_payload(kind, message[HEADER.size:])


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(st.sampled_from(DTYPE_LIST), hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)))
def test_every_dtype_and_shape_round_trips_bit_for_bit(x):
    (y,) = _roundtrip(Kind.STEP, [x])
    assert y.dtype == x.dtype and y.shape == x.shape and y.flags.writeable
    assert y.tobytes() == x.tobytes()  # NaNs and signed zeros included


def test_a_big_endian_array_arrives_with_its_values():
    x = np.arange(6, dtype=">f4").reshape(2, 3)
    (y,) = _roundtrip(Kind.OBS, [x])
    assert y.dtype == np.float32 and np.array_equal(y, x)


def test_the_header_layout_is_the_documented_one():
    message = encode(Kind.RESET, [np.array([7], np.int64)])
    # magic, version 1, kind 3, 1 array, flags 0, payload: array header (code 9, ndim 1, 0), dim 1, 8 bytes.
    assert message[:12] == b"RLJX" + bytes([1, 3, 1, 0]) + struct.pack("<I", 4 + 4 + 8)
    assert message[12:] == bytes([9, 1, 0, 0]) + struct.pack("<I", 1) + struct.pack("<q", 7)
    assert message_size([((1,), np.int64)]) == 16


@pytest.mark.parametrize("header, match", [
    (b"RLJY" + bytes([1, 3, 1, 0]) + struct.pack("<I", 16), "magic"),
    (b"RLJX" + bytes([2, 3, 1, 0]) + struct.pack("<I", 16), "version 2"),
    (b"RLJX" + bytes([1, 99, 1, 0]) + struct.pack("<I", 16), "unknown message kind 99"),
    (b"RLJX" + bytes([1, 3, 2, 0]) + struct.pack("<I", 16), "holds 1 arrays"),
    (b"RLJX" + bytes([1, 3, 1, 1]) + struct.pack("<I", 16), "flags 1"),
    (b"RLJX" + bytes([1, 3, 1, 0]) + struct.pack("<I", 2 ** 31), "over the limit of 1000 bytes"),
    (b"RLJX" + bytes([1, 3]), "is 12 bytes"),
])
def test_a_bad_header_is_refused_before_the_payload(header, match):
    with pytest.raises(ProtocolError, match=match):
        decode_header(header, limit=1000)


def test_an_unexpected_kind_is_refused_but_an_error_always_passes():
    with pytest.raises(ProtocolError, match="expected STEP or CLOSE, got RESET"):
        decode_header(encode(Kind.RESET, [np.array([1], np.int64)])[:12], 100, expect=(Kind.STEP, Kind.CLOSE))
    assert decode_header(encode(Kind.ERROR, error_arrays("x"))[:12], 100, expect=(Kind.STEP,))[0] == Kind.ERROR


@pytest.mark.parametrize("payload, match", [
    (bytes([9, 1]), "ends inside its header"),
    (bytes([0, 1, 0, 0]) + struct.pack("<I", 1) + b"\0", "dtype code 0"),
    (bytes([2, 9, 0, 0]), "ndim 9"),
    (bytes([2, 1, 1, 0]) + struct.pack("<I", 1) + b"\0", "reserved 1"),
    (bytes([2, 2, 0, 0]) + struct.pack("<I", 1), "ends inside its dims"),
    (bytes([11, 1, 0, 0]) + struct.pack("<I", 3) + b"\0" * 11, "needs 12 bytes, 11 are left"),
    (bytes([11, 2, 0, 0]) + struct.pack("<II", 2 ** 31, 2 ** 31) + b"\0" * 8, "is over 17179869184 elements"),
    (bytes([11, 2, 0, 0]) + struct.pack("<II", 0, 2 ** 32 - 1) + struct.pack("<I", 0), "1 bytes|4 bytes follow"),
    (bytes([11, 2, 0, 0]) + struct.pack("<II", 2 ** 16, 2 ** 10) + b"\0" * 8, "needs 268435456 bytes, 8 are left"),
    (bytes([2, 1, 0, 0]) + struct.pack("<I", 1) + b"\0\0", "1 bytes follow the last array"),
])
def test_a_bad_payload_layout_is_refused(payload, match):
    with pytest.raises(ProtocolError, match=match):
        decode_payload(Kind.STEP, payload)


@pytest.mark.parametrize("dims", [(0, 2 ** 32 - 1, 2 ** 32 - 1), (0, 2 ** 17, 2 ** 17 + 1), (2 ** 17 + 1, 0, 2 ** 17)])
def test_an_empty_array_with_dims_over_the_element_limit_is_refused_without_a_payload(dims):
    """A zero dim makes the array empty, so no data follows; the other dims still count (as the
    largest non-empty array they could describe), and the refusal is the protocol's own error, not
    NumPy's (whose reshape raises ``ValueError`` only when the dims overflow its index type)."""
    payload = bytes([11, len(dims), 0, 0]) + struct.pack(f"<{len(dims)}I", *dims)
    with pytest.raises(ProtocolError, match=rf"array 0: shape \({dims[0]}, {dims[1]}, {dims[2]}\) is over "
                                            r"17179869184 elements"):
        decode_payload(Kind.STEP, payload)
    # At the limit exactly, an empty array is still an array.
    (empty,) = decode_payload(Kind.STEP, bytes([11, 3, 0, 0]) + struct.pack("<3I", 0, 2 ** 17, 2 ** 17))
    assert empty.shape == (0, 2 ** 17, 2 ** 17) and empty.dtype == np.float32
    # The sender refuses what the receiver would (NumPy holds such an empty array without complaint).
    with pytest.raises(ProtocolError, match=r"shape \(0, 1048576, 1048576\) cannot be sent: its dims describe over "
                                            r"17179869184 elements"):
        encode(Kind.STEP, [np.empty((0, 2 ** 20, 2 ** 20), np.float32)])


def test_bools_are_normalised_to_zero_and_one():
    payload = bytes([1, 1, 0, 0]) + struct.pack("<I", 3) + bytes([0, 1, 7])
    (x,) = decode_payload(Kind.STEP, payload)
    assert x.dtype == np.bool_ and x.tolist() == [False, True, True] and x.view(np.uint8).tolist() == [0, 1, 1]


def test_encode_refuses_what_it_cannot_carry():
    with pytest.raises(ProtocolError, match="complex64 cannot be sent"):
        encode(Kind.STEP, [np.zeros(2, np.complex64)])
    with pytest.raises(ProtocolError, match="a RESULT message holds 5 arrays, not 1"):
        encode(Kind.RESULT, [np.zeros(2)])
    with pytest.raises(ProtocolError, match="at most 8 dims"):
        encode(Kind.STEP, [np.zeros((1,) * 9, np.uint8)])


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.sampled_from(list(Kind)))
def test_fuzzed_payloads_decode_or_raise_protocol_error_only(payload, kind):
    try:
        arrays = decode_payload(kind, payload)
    except ProtocolError:
        return
    assert len(arrays) == {Kind.HELLO: 1, Kind.SPEC: 7, Kind.RESET: 1, Kind.OBS: 1, Kind.STEP: 1, Kind.RESULT: 5,
                           Kind.CLOSE: 0, Kind.ERROR: 1}[kind]


def _valid_result() -> bytes:
    return encode(Kind.RESULT, [np.arange(8, dtype=np.float32).reshape(2, 4), np.ones(2, np.float32),
                                np.array([True, False]), np.array([False, True]), np.zeros((2, 4), np.float32)])


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_mutated_messages_decode_or_raise_protocol_error_only(data):
    message = bytearray(_valid_result())
    how = data.draw(st.sampled_from(["flip", "cut", "extend"]))
    if how == "flip":
        i = data.draw(st.integers(0, len(message) - 1))
        message[i] ^= data.draw(st.integers(1, 255))
    elif how == "cut":
        message = message[:data.draw(st.integers(0, len(message) - 1))]
    else:
        message += data.draw(st.binary(min_size=1, max_size=16))
    try:  # read as a receiver reads: the header's length decides how much payload is read
        read_message(_Feed(bytes(message)), limit=4096)
    except (ProtocolError, ConnectionError):  # a bad message, or the stream ended inside one
        pass


SPECS = [
    HostSpec(3, Box(-np.inf, np.inf, (4,)), Discrete(2)),
    HostSpec(1, Box(0, 255, (10, 10, 4), dtype=np.uint8), Discrete(18, dtype=np.int64)),
    HostSpec(16, Box(np.array([-1.0, -1.0, -8.0]), np.array([1.0, 1.0, 8.0]), (3,)), Box(-2.0, 2.0, (1,))),
    HostSpec(2, Discrete(5), Box(-1.0, 1.0, (2, 3), dtype=np.float16)),
    HostSpec(4, Box(False, True, (2, 2), dtype=np.bool_), Discrete(3)),
]


@pytest.mark.parametrize("spec", SPECS, ids=range(len(SPECS)))
def test_a_spec_round_trips(spec):
    got = decode_spec(_roundtrip(Kind.SPEC, encode_spec(spec)))
    assert got.num_envs == spec.num_envs
    for a, b in ((got.observation_space, spec.observation_space), (got.action_space, spec.action_space)):
        assert type(a) is type(b) and a.shape == b.shape and np.dtype(a.dtype) == np.dtype(b.dtype)
        if isinstance(a, Discrete):
            assert a.n == b.n
        else:
            assert np.array_equal(np.asarray(a.low), np.asarray(b.low)) and np.array_equal(np.asarray(a.high),
                                                                                         np.asarray(b.high))


def _spec_arrays(**replace) -> list[np.ndarray]:
    arrays = encode_spec(SPECS[0])
    names = ["num_envs", "obs_desc", "obs_low", "obs_high", "act_desc", "act_low", "act_high"]
    return [replace.get(n, a) for n, a in zip(names, arrays)]


@pytest.mark.parametrize("replace, match", [
    (dict(num_envs=np.array([0], np.int64)), "num_envs is int64"),
    (dict(num_envs=np.array([2], np.int32)), "num_envs is int64"),
    (dict(act_desc=np.array([1, 0], np.int64)), "1 <= n < 2\\^31"),
    (dict(act_desc=np.array([1, 2, 3], np.int64)), "no shape"),
    (dict(act_desc=np.array([7, 2], np.int64)), "space kind 7"),
    (dict(act_desc=np.array([1, 2], np.int32)), "int64"),
    (dict(obs_low=np.full(4, np.nan, np.float32)), "never NaN"),
    (dict(obs_low=np.full(4, 1.0, np.float32), obs_high=np.zeros(4, np.float32)), "low > high"),
    (dict(obs_desc=np.array([0, 0, 5], np.int64)), "bounds of its shape"),
    (dict(obs_high=np.zeros(4, np.float64)), "differ in dtype or shape"),
    (dict(act_desc=np.array([0, 0, 1], np.int64), act_low=np.zeros(1, np.int32), act_high=np.ones(1, np.int32)),
     "a Box of actions is floating"),
])
def test_a_bad_spec_is_refused_with_the_reason(replace, match):
    with pytest.raises(ProtocolError, match=match):
        decode_spec(_spec_arrays(**replace))


def test_the_size_limits_are_the_exact_message_sizes():
    spec = SPECS[1]  # 1 env of 10x10x4 uint8, Discrete(18) int64
    obs = np.zeros((1, 10, 10, 4), np.uint8)
    result = encode(Kind.RESULT, [obs, np.zeros(1, np.float32), np.zeros(1, bool), np.zeros(1, bool), obs])
    assert result_limit(spec) == len(result) - HEADER.size
    assert step_limit(spec) == len(encode(Kind.STEP, [np.zeros(1, np.int64)])) - HEADER.size


def test_read_message_checks_the_size_before_reading_the_payload():
    feed = _Feed(b"RLJX" + bytes([1, 5, 1, 0]) + struct.pack("<I", 2 ** 31 - 1))
    with pytest.raises(ProtocolError, match="over the limit"):
        read_message(feed, limit=64)
    assert feed.asked == [HEADER.size]


def test_read_message_raises_the_peers_error_text_and_a_cut_stream_is_a_connection_error():
    with pytest.raises(ProtocolError, match="the peer reported an error: no such env"):
        read_message(_Feed(encode(Kind.ERROR, error_arrays("no such env"))), limit=HANDSHAKE_LIMIT)
    with pytest.raises(ConnectionError, match="closed 4 bytes into a 12-byte read"):
        read_message(_Feed(b"RLJX"), limit=100)


def test_read_message_over_a_real_socket_pair():
    a, b = socket.socketpair()
    with a, b:
        a.sendall(encode(Kind.STEP, [np.arange(3, dtype=np.int32)]))
        kind, (x,) = read_message(b, limit=100, expect=(Kind.STEP,))
    assert kind == Kind.STEP and x.tolist() == [0, 1, 2]


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_fuzzed_specs_decode_or_raise_protocol_error_only(data):
    arrays = list(encode_spec(data.draw(st.sampled_from(SPECS))))
    i = data.draw(st.integers(0, len(arrays) - 1))
    arrays[i] = data.draw(hnp.arrays(st.sampled_from(DTYPE_LIST), hnp.array_shapes(min_dims=0, max_dims=3, max_side=4)))
    try:
        decode_spec(arrays)
    except ProtocolError:
        pass
