"""The Python client: one observation or a batch, the version of each reply, and typed failures."""

from __future__ import annotations

import numpy as np
import pytest

import rljax
from rljax.serve import Client, PolicyServer, ServeError, load_model


@pytest.fixture(scope="module")
def server(tiny_run):
    with PolicyServer(load_model(tiny_run("ppo-cartpole")[0]), max_batch=8) as server:
        yield server


def test_one_observation_gives_one_action_and_a_batch_a_batch(server, tiny_run):
    policy = rljax.load(tiny_run("ppo-cartpole")[0])
    obs = np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4)
    with Client(*server.address) as client:
        assert client.spec["inputs"] == [{"name": "obs", "shape": [4], "dtype": "float32"}]
        one, version = client.act(obs[0].astype(np.float64))  # converted to the input's dtype
        batch, _ = client.act(obs)
    assert one.shape == () and batch.shape == (8,) and version == policy.step == client.version
    np.testing.assert_array_equal(batch, np.asarray(policy.act(np.concatenate([obs] * 8))[:8]))
    assert one == batch[0]


def test_observations_that_do_not_fit_are_refused_before_sending(server):
    with Client(*server.address) as client:
        with pytest.raises(ValueError, match=r"neither one row \(4,\) nor a batch"):
            client.act(np.zeros(3))
        with pytest.raises(ValueError, match="1 to 8 rows"):
            client.act(np.zeros((9, 4)))
        with pytest.raises(ValueError, match=r"obs lacks \['obs'\]; the server's inputs are \['obs'\]"):
            client.act({"x": np.zeros(4)})
        assert client.act(np.zeros(4))[1] == server.version  # nothing was sent: the session goes on


def test_an_unreachable_or_closed_server_is_a_serve_error(server):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ServeError, match=f"cannot connect to the policy server at 127.0.0.1:{port}"):
        Client("127.0.0.1", port, timeout_s=2)
    client = Client(*server.address)
    client.close()
    with pytest.raises(ServeError, match="closed"):
        client.act(np.zeros(4))
