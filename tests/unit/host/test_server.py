"""The reference env server: the same batch as the env itself, the token off loopback, and a bad
message, a bad token or an env that raises costing only that connection."""

from __future__ import annotations

import logging
import socket
import struct

import numpy as np
import pytest

from rljax.env import Box, Discrete
from rljax.host.base import HostSpec, HostStep
from rljax.host.client import ServerEnv
from rljax.host.gymnasium_env import GymnasiumEnv
from rljax.host.protocol import HEADER, Kind, ProtocolError, encode, read_message
from rljax.host.server import TOKEN_VARIABLE, EnvServer, is_loopback


@pytest.fixture
def server(monkeypatch):
    monkeypatch.delenv(TOKEN_VARIABLE, raising=False)
    with EnvServer(lambda: GymnasiumEnv("CartPole-v1", 4, max_episode_steps=25)) as srv:
        srv.start()
        yield srv


def test_a_served_batch_is_the_batch_itself(server):
    client, local = ServerEnv(*server.address), GymnasiumEnv("CartPole-v1", 4, max_episode_steps=25)
    try:
        assert client.spec.num_envs == 4 and client.spec.action_space.n == 2
        np.testing.assert_array_equal(client.reset(11), local.reset(11))
        rng, ended = np.random.default_rng(1), np.zeros(2, int)
        for _ in range(100):
            a = rng.integers(0, 2, 4)
            remote, here = client.step(a), local.step(a)
            for x, y in zip(remote, here):
                assert x.dtype == y.dtype
                np.testing.assert_array_equal(x, y)
            ended += [remote.terminated.sum(), remote.truncated.sum()]
        assert (ended > 0).all(), ended
    finally:
        client.close()
        local.close()


def test_off_loopback_a_token_is_required_and_checked(monkeypatch, caplog):
    monkeypatch.delenv(TOKEN_VARIABLE, raising=False)
    with pytest.raises(ValueError, match=f"needs a shared token: set {TOKEN_VARIABLE}"):
        EnvServer(lambda: GymnasiumEnv("CartPole-v1", 1), host="0.0.0.0")
    secret = "s3cr3t-token-value"
    caplog.set_level(logging.INFO, logger="rljax.host.server")
    with EnvServer(lambda: GymnasiumEnv("CartPole-v1", 1), host="0.0.0.0", token=secret) as srv:
        srv.start()
        port = srv.address[1]
        with pytest.raises(ProtocolError, match="the token sent does not match this server's") as wrong:
            ServerEnv("127.0.0.1", port, token="guess")
        assert "no token" not in str(wrong.value)
        with pytest.raises(ProtocolError, match=f"no token was sent, and this server requires one: set "
                                                f"{TOKEN_VARIABLE} on the client") as missing:
            ServerEnv("127.0.0.1", port)  # no token= and none in the environment: an empty token
        assert "does not match" not in str(missing.value)
        sock = socket.create_connection(srv.address, timeout=10)
        sock.sendall(encode(Kind.HELLO, [np.frombuffer(secret.encode(), np.uint8).view(np.int8)]))
        with pytest.raises(ProtocolError, match=r"the token must be a uint8 \[T\] array.*got int8 \(18,\)") as typed:
            read_message(sock, 1 << 20)
        sock.close()
        monkeypatch.setenv(TOKEN_VARIABLE, secret)  # the client reads it from the environment
        good = ServerEnv("127.0.0.1", port)
        assert good.reset(0).shape == (1, 4)
        good.close()
    assert all(secret not in text for text in (caplog.text, str(wrong.value), str(missing.value), str(typed.value)))
    assert "guess" not in caplog.text and "guess" not in str(wrong.value)


def test_loopback_names():
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("no-such-host.invalid")


def _raw(address) -> socket.socket:
    sock = socket.create_connection(address, timeout=10)
    sock.sendall(encode(Kind.HELLO, [np.zeros(0, np.uint8)]))
    assert read_message(sock, 1 << 20)[0] == Kind.SPEC
    return sock


@pytest.mark.parametrize("message, match", [
    (b"GET / HTTP/1.1\r\n\r\n", "magic"),
    (b"RLJX" + bytes([1, Kind.STEP, 1, 0]) + struct.pack("<I", 2 ** 31), "over the limit"),
    (encode(Kind.STEP, [np.array([0, 1, 1, 0], np.int32)]), "dtype int32"),
    (encode(Kind.STEP, [np.array([0, 1, 5, 0], np.int64)[:, None]]), "STEP payload of 44 bytes is over the limit of 40"),
    (encode(Kind.STEP, [np.array([0, 1, 1], np.int64)]), r"got shape \(3,\)"),
    (encode(Kind.RESET, [np.array([1.5])]), "a RESET holds a seed"),
    (encode(Kind.OBS, [np.zeros((4, 4), np.float32)]), "expected RESET or STEP or CLOSE, got OBS"),
])
def test_a_bad_message_gets_an_error_and_loses_only_its_connection(server, message, match):
    sock = _raw(server.address)
    with sock:
        sock.sendall(message)
        with pytest.raises(ProtocolError, match=match):
            read_message(sock, 1 << 20)
        assert sock.recv(1) == b""  # the server closed this connection
    good = ServerEnv(*server.address)  # and still serves others
    assert good.reset(0).shape == (4, 4)
    good.close()


def test_out_of_range_actions_are_named(server):
    sock = _raw(server.address)
    with sock:
        sock.sendall(encode(Kind.STEP, [np.array([0, 1, 5, 0], np.int64)]))
        with pytest.raises(ProtocolError, match=r"actions\[2\] = 5 is not an action of Discrete\(2\)"):
            read_message(sock, 1 << 20)


class _Breaks:
    """A host env whose step raises after ``ok`` steps."""

    def __init__(self, ok: int):
        self.spec, self.ok, self.closed = HostSpec(2, Box(-1.0, 1.0, (1,)), Discrete(2, dtype=np.int64)), ok, False

    def reset(self, seed):
        return np.zeros((2, 1), np.float32)

    def step(self, actions):
        self.ok -= 1
        if self.ok < 0:
            raise RuntimeError("the simulator lost its licence")
        z = np.zeros(2, bool)
        return HostStep(np.zeros((2, 1), np.float32), np.ones(2, np.float32), z, z, np.zeros((2, 1), np.float32))

    def close(self):
        self.closed = True


def test_an_env_that_raises_is_reported_to_the_client_and_closed(monkeypatch):
    monkeypatch.delenv(TOKEN_VARIABLE, raising=False)
    made = []
    with EnvServer(lambda: made.append(_Breaks(ok=2)) or made[-1]) as srv:
        srv.start()
        client = ServerEnv(*srv.address)
        client.reset(0)
        assert client.step(np.array([0, 1])).reward.tolist() == [1.0, 1.0]
        client.step(np.array([0, 1]))
        with pytest.raises(ProtocolError, match="the env raised RuntimeError: the simulator lost its licence"):
            client.step(np.array([0, 1]))
        second = ServerEnv(*srv.address)  # a fresh batch for the next connection
        assert second.step(np.array([1, 1])).reward.tolist() == [1.0, 1.0]
        second.close()
    assert len(made) == 2
    for _ in range(50):
        if made[0].closed:
            break
        import time

        time.sleep(0.02)
    assert made[0].closed


def test_a_silent_client_is_dropped_after_the_idle_timeout(monkeypatch):
    monkeypatch.delenv(TOKEN_VARIABLE, raising=False)
    with EnvServer(lambda: GymnasiumEnv("CartPole-v1", 1), idle_timeout_s=0.3) as srv:
        srv.start()
        sock = _raw(srv.address)
        with sock:
            sock.settimeout(5)
            assert sock.recv(HEADER.size) == b""  # closed by the server, no reply
