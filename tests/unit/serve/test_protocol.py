"""The policy protocol: its own magic and kinds on the env protocol's framing, a SPEC description that is
checked, and the largest request a server reads."""

from __future__ import annotations

import numpy as np
import pytest

from rljax.host.protocol import ENV_FRAMING, HEADER, ProtocolError, decode_header, decode_payload, encode
from rljax.host.protocol import Kind as EnvKind
from rljax.serve.protocol import (FRAMING, MAX_LEAVES, PROTOCOL, Kind, act_limit, decode_description,
                                  encode_description, text_array)


def test_an_act_carries_a_varying_number_of_observation_arrays_within_its_range():
    arrays = [np.array([0, -1, 0, 0], np.int64), np.zeros(2, bool), np.zeros((2, 3), np.float32),
              np.zeros((2, 5), np.uint8)]
    data = encode(Kind.ACT, arrays, FRAMING)
    kind, length = decode_header(data[:HEADER.size], 1 << 20, (Kind.ACT,), FRAMING)
    back = decode_payload(kind, data[HEADER.size:], 4, FRAMING)
    assert kind == Kind.ACT and length == len(data) - HEADER.size
    assert all(a.dtype == b.dtype and np.array_equal(a, b) for a, b in zip(arrays, back))
    with pytest.raises(ProtocolError, match="holds 3 to 66 arrays"):
        encode(Kind.ACT, arrays[:2], FRAMING)
    with pytest.raises(ProtocolError, match=f"holds 3 to {2 + MAX_LEAVES} arrays"):
        encode(Kind.ACT, arrays[:1] * (3 + MAX_LEAVES), FRAMING)


def test_each_protocol_refuses_the_others_messages_at_the_header():
    env = encode(EnvKind.RESET, [np.array([0], np.int64)])
    with pytest.raises(ProtocolError, match="not an rljax policy-protocol message: magic b'RLJX'"):
        decode_header(env[:HEADER.size], 1 << 20, (), FRAMING)
    policy = encode(Kind.CLOSE, [], FRAMING)
    with pytest.raises(ProtocolError, match="not an rljax env-protocol message: magic b'RLJP'"):
        decode_header(policy[:HEADER.size], 1 << 20, (), ENV_FRAMING)


def test_a_description_round_trips_and_a_malformed_one_is_named():
    description = {"protocol": PROTOCOL, "version": 7, "max_batch": 64, "recurrent": False,
                   "inputs": [{"name": "obs", "shape": [4], "dtype": "float32"}],
                   "action": {"shape": [], "dtype": "int32"}}
    back = decode_description(encode_description(description))
    assert back["_inputs"] == [("obs", (4,), np.dtype(np.float32))] and back["_action"] == ((), np.dtype(np.int32))
    for bad, match in [({**description, "protocol": "other"}, "does not describe"),
                       ({k: v for k, v in description.items() if k != "inputs"}, "malformed: KeyError"),
                       ({**description, "inputs": []}, "lists 0 observation leaves")]:
        with pytest.raises(ProtocolError, match=match):
            decode_description(encode_description(bad))
    with pytest.raises(ProtocolError, match="not UTF-8 JSON"):
        decode_description([text_array("{not json")])


def test_the_request_limit_is_the_bytes_of_max_batch_rows():
    inputs = [("obs", (4,), np.float32)]
    data = encode(Kind.ACT, [np.zeros(4, np.int64), np.zeros(64, bool), np.zeros((64, 4), np.float32)], FRAMING)
    assert act_limit(inputs, 64) == len(data) - HEADER.size


def test_the_codec_is_the_generic_path_byte_for_byte_and_leaves_it_anything_else():
    from rljax.host.protocol import decode_payload
    from rljax.serve.protocol import Codec

    codec = Codec([("obs", (2, 3), np.float32), ("mask", (4,), np.bool_)], ((2,), np.float32), 8)
    rows = np.arange(6, dtype=np.float32).reshape(3, 2)
    assert codec.action(5, 77, rows) == encode(Kind.ACTION, [np.array([5, 77], np.int64), rows], FRAMING)
    obs, mask = np.random.default_rng(0).normal(size=(3, 2, 3)).astype(np.float32), np.ones((3, 4), bool)
    fit = [np.array([1, -1, 1, 9], np.int64), np.array([True, False, True]), obs, mask]
    payload = encode(Kind.ACT, fit, FRAMING)[HEADER.size:]
    fast, slow = codec.act(payload), decode_payload(Kind.ACT, payload, 4, FRAMING)
    assert all(a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b) for a, b in zip(fast, slow))
    assert all(a.flags.writeable and a.flags.aligned and a.flags.c_contiguous for a in fast)  # fresh arrays
    bool_byte = bytearray(payload)
    bool_byte[payload.index(bytes([1, 0, 1]))] = 7  # a bool byte other than 0/1 reads True, as the generic path
    bool_byte[-1] = 0x80  # in an observation's bool leaf too (a legal-action mask)
    fast, slow = codec.act(bytes(bool_byte)), decode_payload(Kind.ACT, bytes(bool_byte), 4, FRAMING)
    assert fast[1].tolist() == [True, False, True] and fast[3].dtype == np.bool_ and fast[3][-1, -1]
    assert all(np.array_equal(a, b) for a, b in zip(fast, slow))
    unfit = [[fit[0], fit[1], obs.astype(np.float64), mask], [fit[0], fit[1], obs[:, :1], mask],
             [fit[0], np.zeros(9, bool), np.zeros((9, 2, 3), np.float32), np.zeros((9, 4), bool)],
             [fit[0].astype(np.int32), *fit[1:]]]
    for arrays in unfit:
        assert codec.act(encode(Kind.ACT, arrays, FRAMING)[HEADER.size:]) is None
    assert codec.act(payload + b"\0") is None and codec.act(payload[:-1]) is None and codec.act(b"") is None
