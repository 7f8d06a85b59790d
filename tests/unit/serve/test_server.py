"""The policy server: served actions are ``rljax.load(RUN).act``'s bits (deterministic and sampled, MLP and
GRU), concurrent requests are batched, bad input costs only the client that sent it, a pinned version is
refused rather than acted on, and a followed run's new checkpoints swap in under load with no request lost."""

from __future__ import annotations

import dataclasses
import shutil
import socket
import struct
import threading
import time

import jax
import numpy as np
import pytest

import rljax
from rljax.host.protocol import HEADER, VERSION, read_message
from rljax.serve import Client, PolicyServer, Refused, ServeError, load_model
from rljax.serve.protocol import FRAMING, MAGIC, Kind, text_array
from rljax.serve.stats import read_serve_status


@pytest.fixture(scope="module")
def cartpole(tiny_run):
    return tiny_run("ppo-cartpole")[0]


def _obs(n, shape, seed=0):
    return (np.random.default_rng(seed).normal(size=(n, *shape)) * 2).astype(np.float32)


def _serve_in_chunks(server, obs, clients=4, seed=0, **act):
    """Sends ``obs`` through ``clients`` concurrent clients in random batch sizes (1..max_batch); returns the
    actions in the order of ``obs`` and the versions the replies named."""
    parts = np.array_split(np.arange(len(obs)), clients)
    actions, versions, errors = [None] * clients, set(), []

    def work(c, rows):
        rng, out = np.random.default_rng(seed + c), []
        try:
            with Client(*server.address) as client:
                at = 0
                while at < len(rows):
                    n = int(rng.integers(1, server.max_batch + 1))
                    a, v = client.act(obs[rows[at:at + n]], **act)
                    out.append(np.asarray(a).reshape(len(rows[at:at + n]), *np.shape(a)[1:]))
                    versions.add(v)
                    at += n
            actions[c] = np.concatenate(out)
        except Exception as err:  # noqa: BLE001 - reported by the test
            errors.append(err)

    threads = [threading.Thread(target=work, args=(c, rows)) for c, rows in enumerate(parts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return np.concatenate(actions), versions


@pytest.mark.parametrize("name", ["ppo-cartpole", "ppo-pendulum"])
def test_served_actions_are_the_policys_bits_on_10000_observations(tiny_run, name):
    run_dir = tiny_run(name)[0]
    policy = rljax.load(run_dir)
    obs = _obs(10_000, policy.observation_spec.shape)
    with PolicyServer(load_model(run_dir), max_batch=32, max_wait_ms=1.0) as server:
        served, versions = _serve_in_chunks(server, obs)
        assert server.stats.totals["requests"] > 4 and server.stats.totals["batches"] <= server.stats.totals["requests"]
    np.testing.assert_array_equal(served, np.asarray(policy.act(obs)))
    assert versions == {policy.step}


def test_a_recurrent_policy_keeps_each_sessions_state_row_by_row(tiny_run):
    run_dir = tiny_run("ppo-gru")[0]
    policy = rljax.load(run_dir)
    sessions, rows, steps = 4, 16, 157  # 10,048 observations
    rng = np.random.default_rng(1)
    obs = _obs(sessions * rows * steps, (4,)).reshape(sessions, steps, rows, 4)
    resets = rng.random((sessions, steps, rows)) < 0.05
    expected = np.zeros((sessions, steps, rows), np.int32)
    for s in range(sessions):
        state = policy.initial_state(rows)
        for t in range(steps):
            state = jax.tree.map(lambda x: np.where(resets[s, t][:, None], 0, x), state)
            a, state = policy.act(obs[s, t], state)
            expected[s, t] = np.asarray(a)
    got = np.zeros_like(expected)
    with PolicyServer(load_model(run_dir), max_batch=64, max_wait_ms=1.0) as server:
        def work(s):
            with Client(*server.address) as client:
                for t in range(steps):
                    got[s, t] = client.act(obs[s, t], reset=resets[s, t] | (t == 0))[0]
        threads = [threading.Thread(target=work, args=(s,)) for s in range(sessions)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert max(int(k) for k in server.stats.record()["batch_requests"]) > 1  # sessions shared batches
        with Client(*server.address) as client:  # a session's batch changes only with every row reset
            first, _ = client.act(obs[0, 0])
            with pytest.raises(Refused, match="reset every row"):
                client.act(obs[0, 0, :3])
            with pytest.raises(Refused, match="was pinned"):  # refused: the session's state is untouched
                client.act(obs[0, 0, :3], reset=True, version=client.version + 1)
            assert client.act(obs[0, 1])[0].shape == (16,)  # still the 16-row session
            assert client.act(obs[0, 0, :3], reset=True)[0].shape == (3,)
    np.testing.assert_array_equal(got, expected)


def test_sampled_rows_are_keyed_by_the_requests_seed_and_their_position(tiny_run):
    run_dir = tiny_run("ppo-pendulum")[0]
    policy = rljax.load(run_dir)
    obs = _obs(64, (3,))
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(7), i))(np.arange(64))
    expected = np.asarray(jax.jit(jax.vmap(lambda o, k: policy.act(o, key=k, deterministic=False)))(obs, keys))
    with PolicyServer(load_model(run_dir), max_batch=64) as server, Client(*server.address) as client:
        got, _ = client.act(obs, deterministic=False, seed=7)
        again, _ = client.act(obs, deterministic=False, seed=8)
        with pytest.raises(Refused, match="seed"):
            client.act(obs, deterministic=False, seed=2 ** 31)
    np.testing.assert_array_equal(got, expected)
    assert not np.array_equal(got, again)


def test_an_export_is_served_with_its_own_bits_and_refuses_to_sample(tiny_run, tmp_path):
    from rljax.policy.export import export

    policy = rljax.load(tiny_run("ppo-pendulum")[0])
    export(policy, tmp_path / "out", onnx=False)
    exported = jax.export.deserialize(bytearray((tmp_path / "out" / "policy.stablehlo").read_bytes()))
    obs = _obs(200, (3,))
    with PolicyServer(load_model(tmp_path / "out"), max_batch=16) as server, Client(*server.address) as client:
        assert client.spec["source"] == "export" and client.version == policy.step
        got = np.concatenate([client.act(obs[i:i + 16])[0] for i in range(0, 200, 16)])
        with pytest.raises(Refused, match="deterministic policy only"):
            client.act(obs[:2], deterministic=False)
    np.testing.assert_array_equal(got, np.asarray(exported.call(obs)))
    (tmp_path / "out" / "policy.stablehlo").write_bytes(b"damaged")
    with pytest.raises(ValueError, match="sha256"):
        load_model(tmp_path / "out")


def test_a_pinned_version_is_refused_not_acted_on(cartpole):
    with PolicyServer(load_model(cartpole), max_batch=8) as server, Client(*server.address) as client:
        v = client.version
        assert client.act(np.zeros(4), version=v)[1] == v
        with pytest.raises(Refused, match=f"version {v + 1} was pinned.*serves version {v}") as info:
            client.act(np.zeros(4), version=v + 1)
        assert info.value.version == v
        assert client.act(np.zeros(4))[1] == v  # the session goes on


def _raw(server, token=b""):
    sock = socket.create_connection(server.address, timeout=10)
    sock.sendall(struct.pack("<4sBBBBI", MAGIC, VERSION, Kind.HELLO, 1, 0, 4 + 4 + len(token))
                 + struct.pack("<BBHI", 2, 1, 0, len(token)) + token)
    read_message(sock, 1 << 20, (Kind.SPEC,), FRAMING)
    return sock


def _expect_error(sock, match):
    with pytest.raises(Exception, match=match):
        read_message(sock, 1 << 20, (), FRAMING)
    sock.close()


def test_bad_input_costs_only_its_own_connection(cartpole):
    with PolicyServer(load_model(cartpole), max_batch=8, stall_timeout_s=0.5, idle_timeout_s=1.5) as server:
        stop, served, failed = threading.Event(), [], []

        def good():  # a client that keeps acting throughout
            with Client(*server.address) as client:
                while not stop.wait(0.05):
                    try:
                        served.append(client.act(np.zeros(4))[1])
                    except Exception as err:  # noqa: BLE001 - reported below
                        failed.append(err)
        thread = threading.Thread(target=good)
        thread.start()
        with Client(*server.address) as client:  # well-formed but unfit: refused, the session goes on
            for meta, arrays, match in [
                    ([0, -1, 0, 0], [np.zeros(1, bool), np.zeros((1, 5), np.float32)], "expected float32 [1, 4]"),
                    ([1, -1, 0, 0], [np.zeros(1, bool), np.zeros((1, 4), np.float64)], "got float64"),
                    ([2, -1, 4, 0], [np.zeros(1, bool), np.zeros((1, 4), np.float32)], "flags 4"),
                    ([3, -1, 0, 0], [np.zeros(2, bool), np.zeros((1, 4), np.float32)], "B = 2 rows"),
                    ([4, -1, 0, 0], [np.zeros(2, bool), np.array([[0, 0, 0, 0], [0, np.nan, 0, 0]], np.float32)],
                     "holds NaN or inf in row(s) [1]")]:
                client._sock.sendall(_encode_act(meta, arrays))
                kind, out = read_message(client._sock, 1 << 20, (), FRAMING)
                assert kind == Kind.REFUSED and match in out[1].tobytes().decode(), out[1].tobytes().decode()
            assert client.act(np.zeros(4))[1] == server.version
        sock = _raw(server)  # a header declaring more than the largest request
        sock.sendall(struct.pack("<4sBBBBI", MAGIC, VERSION, Kind.ACT, 3, 0, 1 << 30))
        _expect_error(sock, "over the limit")
        sock = _raw(server)  # garbage
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        _expect_error(sock, "not an rljax policy-protocol message")
        sock = _raw(server)  # a payload that ends inside an array
        sock.sendall(struct.pack("<4sBBBBI", MAGIC, VERSION, Kind.ACT, 3, 0, 8) + b"\x09\x01\x00\x00\x04\x00\x00\x00")
        _expect_error(sock, "needs 32 bytes, 0 are left")
        sock = _raw(server)  # a message left unfinished: dropped after the stall timeout
        sock.sendall(struct.pack("<4sBBBBI", MAGIC, VERSION, Kind.ACT, 3, 0, 100) + b"\x00" * 10)
        _expect_error(sock, "unfinished")
        _expect_error(socket.create_connection(server.address, timeout=10), "no HELLO")  # connects, says nothing
        _expect_error(_raw(server), "silent")  # says HELLO, then nothing
        stop.set()
        thread.join(10)
        assert not failed and len(served) > 20  # served throughout
        errors = server.stats.record()["errors_by_client"]["127.0.0.1"]
        assert errors == {"refused": 5, "protocol": 3, "stalled": 2, "idle": 1}


def _encode_act(meta, arrays):
    from rljax.host.protocol import encode

    return encode(Kind.ACT, [np.array(meta, np.int64), *arrays], FRAMING)


def test_a_token_is_required_when_set_and_never_echoed(cartpole):
    with PolicyServer(load_model(cartpole), max_batch=8, token="s3cret") as server:
        with pytest.raises(ServeError, match="no token was sent") as info:
            Client(*server.address, token="")
        with pytest.raises(ServeError, match="does not match"):
            Client(*server.address, token="wrong")
        assert "s3cret" not in str(info.value)
        with Client(*server.address, token="s3cret") as client:
            assert client.act(np.zeros(4))[1] == server.version
    with pytest.raises(ValueError, match="needs a shared token"):
        PolicyServer(load_model(cartpole), host="0.0.0.0", token="")


def test_bad_settings_are_named(cartpole):
    model = load_model(cartpole)
    for kwargs, match in [({"max_batch": 0}, "max_batch=0"), ({"max_wait_ms": -1}, "max_wait_ms=-1"),
                          ({"stall_timeout_s": 0}, "stall_timeout_s=0"), ({"max_wait_ms": float("inf")}, "inf"),
                          ({"max_wait_ms": float("nan")}, "nan"), ({"follow_s": float("inf")}, "follow_s=inf"),
                          ({"stats_every_s": 1e300}, "stats_every_s=1e"), ({"max_batch": 10 ** 8}, "at most 65536"),
                          ({"max_clients": 10 ** 8}, "open files")]:
        with pytest.raises(ValueError, match=match):
            PolicyServer(model, **kwargs)


def test_a_followed_run_swaps_in_its_new_checkpoints_under_load_without_losing_a_request(tiny_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(tiny_run("ppo-cartpole")[0], run_dir)
    first = rljax.load(run_dir)
    obs = _obs(64, (4,))
    stop, replies, failures = threading.Event(), [], []
    with PolicyServer(load_model(run_dir), max_batch=16, follow_s=0.05, stats_dir=tmp_path / "stats",
                      stats_every_s=0.2) as server:
        def work(c):
            with Client(*server.address) as client:
                while not stop.is_set():
                    try:
                        a, v = client.act(obs[c * 8:(c + 1) * 8])
                        replies.append((v, c, a))
                    except Exception as err:  # noqa: BLE001 - counted by the test
                        failures.append(err)
        threads = [threading.Thread(target=work, args=(c,)) for c in range(8)]
        for t in threads:
            t.start()
        # The run goes on: a checkpoint after every chunk, each swapped in while the clients ask.
        config = dataclasses.replace(first.config, total_timesteps=first.config.total_timesteps * 3)
        rljax.train(config, options=rljax.RunOptions(run_dir=run_dir, resume=True, quiet=True, handle_signals=False,
                                                     checkpoint_every=1, keep_checkpoints=100))
        steps = set(int(p.name) for p in (run_dir / "checkpoints").iterdir() if p.name.isdigit())
        deadline = time.monotonic() + 20
        while server.version != max(steps) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        stop.set()
        for t in threads:
            t.join(30)
        assert server.version == max(steps)
        record = server.stats.record()
    assert not failures and len(replies) > 100
    versions = {v for v, _, _ in replies}
    assert versions <= steps and len(versions) >= 3, (versions, steps)
    assert record["totals"]["reloads"] >= 2
    for v in versions:  # each reply's actions are its version's
        policy = rljax.load(run_dir, v)
        for got, c, a in replies[::7]:
            if got == v:
                np.testing.assert_array_equal(a, np.asarray(policy.act(obs[c * 8:(c + 1) * 8])))
    status = read_serve_status(tmp_path / "stats")
    assert status["state"] == "stopped" and status["version"] == max(steps)


def test_raw_protocol_text_array_is_utf8():
    assert text_array("é").tobytes().decode() == "é"
    assert HEADER.size == 12
