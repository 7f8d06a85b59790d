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
