"""The env-server client's failures, each typed and each leaving the connection closed: a server that
hangs, one that goes away, one that is not there, and replies that do not match the spaces."""

from __future__ import annotations

import socket
import threading
import time

import numpy as np
import pytest

from rljax.env import Box, Discrete
from rljax.host.base import EnvConnectionError, EnvTimeoutError, HostSpec
from rljax.host.client import ServerEnv
from rljax.host.protocol import HANDSHAKE_LIMIT, Kind, ProtocolError, encode_spec, read_message, send_message

SPEC = HostSpec(2, Box(-1.0, 1.0, (3,)), Discrete(2))


def _fake_server(after_spec) -> tuple[str, int]:
    """A one-connection server that answers HELLO with SPEC, then calls ``after_spec(conn)``."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve():
        conn, _ = listener.accept()
        with conn, listener:
            read_message(conn, HANDSHAKE_LIMIT)
            send_message(conn, Kind.SPEC, encode_spec(SPEC))
            after_spec(conn)

    threading.Thread(target=serve, daemon=True).start()
    return listener.getsockname()[:2]


def test_a_server_that_hangs_is_a_timeout_within_the_limit():
    release = threading.Event()
    env = ServerEnv(*_fake_server(lambda conn: release.wait(10)), timeout_s=0.3)
    start = time.monotonic()
    with pytest.raises(EnvTimeoutError, match="did not send a step's result within 0.3 s"):
        env.step(np.array([0, 1]))
    assert time.monotonic() - start < 3
    with pytest.raises(EnvConnectionError, match="is closed"):
        env.step(np.array([0, 1]))
    release.set()


def test_a_server_that_goes_away_is_a_connection_error():
    env = ServerEnv(*_fake_server(lambda conn: None))
    with pytest.raises(EnvConnectionError, match="failed while waiting for a step's result"):
        env.step(np.array([0, 1]))


def test_no_server_is_a_connection_error_naming_the_address():
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()
    with pytest.raises(EnvConnectionError, match=f"cannot connect to the env server at 127.0.0.1:{port}"):
        ServerEnv("127.0.0.1", port, connect_timeout_s=2)


def test_a_reply_that_does_not_match_the_spaces_is_a_protocol_error():
    def wrong_shape(conn):
        read_message(conn, 1 << 20)
        send_message(conn, Kind.OBS, [np.zeros((2, 4), np.float32)])

    env = ServerEnv(*_fake_server(wrong_shape))
    with pytest.raises(ProtocolError, match=r"does not match its spaces: obs: got shape \(2, 4\)"):
        env.reset(0)


def test_actions_are_checked_before_they_are_sent_and_bad_timeouts_refused():
    env = ServerEnv(*_fake_server(lambda conn: time.sleep(1)))
    with pytest.raises(ValueError, match=r"actions\[0\] = 3"):
        env.step(np.array([3, 0]))
    env.close()
    with pytest.raises(ValueError, match="timeout_s=0"):
        ServerEnv("127.0.0.1", 1, timeout_s=0)
