"""A pool of env servers (:mod:`rljax.host.pool`): its addresses from a list or a file read again when it
changes, bad input named; and a run on a pool whose server is killed while another starts at a new address:
the run finishes, collecting from the new one, with the lost server and its episodes reported."""

from __future__ import annotations

import os
import time

import pytest

from rljax.actorlearner.run import SCALING_LOG, run_host
from rljax.agents.ppo import PPOConfig
from rljax.host.gymnasium_env import GymnasiumEnv
from rljax.host.pool import ServerPool, is_server_pool
from rljax.host.server import TOKEN_VARIABLE, EnvServer
from rljax.training.options import RunOptions


def test_a_pool_is_a_list_or_a_file_read_again_when_it_changes(tmp_path):
    assert is_server_pool("server:a:1,b:2") and is_server_pool("server:@servers.txt")
    assert not is_server_pool("server:127.0.0.1:5555") and not is_server_pool("gymnasium/CartPole-v1")
    assert ServerPool("server:127.0.0.1:5555,[::1]:6000").addresses() == ["127.0.0.1:5555", "[::1]:6000"]
    listing = tmp_path / "servers.txt"
    listing.write_text("# the fleet\n10.0.0.1:5555\n\n10.0.0.2:5555  # rack 2\n")
    pool = ServerPool(f"server:@{listing}")
    assert pool.addresses() == ["10.0.0.1:5555", "10.0.0.2:5555"]
    listing.write_text("10.0.0.3:5555\n")
    os.utime(listing, ns=(time.time_ns(), time.time_ns() + 10**9))  # a new modification time, whatever the clock
    assert pool.addresses() == ["10.0.0.3:5555"]
    listing.write_text("not an address\n")
    os.utime(listing, ns=(time.time_ns(), time.time_ns() + 2 * 10**9))
    assert pool.addresses() == ["10.0.0.3:5555"]  # a bad edit while training keeps the last good list
    pool.bind(4, "10.0.0.3:5555")
    assert pool.env_name(4) == "server:10.0.0.3:5555" and pool.joinable("10.0.0.3:5555")
    pool.failed("10.0.0.3:5555")
    assert not pool.joinable("10.0.0.3:5555")


@pytest.mark.parametrize("name, message", [
    ("server:127.0.0.1:5555,nope", "--env, item 2: 'nope' is not HOST:PORT"),
    ("server:127.0.0.1:5555,127.0.0.1:5555", "the env server 127.0.0.1:5555 is listed twice"),
    ("server:@/no/such/file", "env server pool 'server:@/no/such/file': .*No such file"),
])
def test_bad_pools_are_refused_naming_what_is_wrong(name, message):
    with pytest.raises(ValueError, match=message):
        ServerPool(name)


def test_an_empty_pool_file_is_refused(tmp_path):
    (tmp_path / "empty.txt").write_text("# nothing yet\n")
    with pytest.raises(ValueError, match="lists no server"):
        ServerPool(f"server:@{tmp_path / 'empty.txt'}")


def test_a_run_survives_its_server_dying_and_follows_a_new_one(tmp_path, monkeypatch):
    monkeypatch.delenv(TOKEN_VARIABLE, raising=False)
    make = lambda: GymnasiumEnv("CartPole-v1", 4, max_episode_steps=50)  # noqa: E731
    first, second = EnvServer(make), EnvServer(make)
    first.start()
    listing = tmp_path / "servers.txt"
    listing.write_text(f"{first.address[0]}:{first.address[1]}\n")
    state = {}

    def switch(row):
        if row["updates"] == 4:  # the first server dies; a second starts elsewhere and is listed instead
            first.shutdown()
            second.start()
            listing.write_text(f"{second.address[0]}:{second.address[1]}\n")
            os.utime(listing, ns=(time.time_ns(), time.time_ns() + 10**9))
            state["switched"] = True

    config = PPOConfig(env=f"server:@{listing}", num_envs=4, num_steps=16, total_timesteps=4 * 16 * 12,
                       num_minibatches=1, num_epochs=1, hidden_sizes=(16,))
    from rljax.actorlearner import learner

    original = learner.train_host

    def with_switch(*args, **kwargs):
        inner = kwargs.get("on_update")

        def on_update(updates, params, opt_state, row, envs):
            if row is not None:
                switch(row)
            return inner(updates, params, opt_state, row, envs) if inner else None
        return original(*args, **{**kwargs, "on_update": on_update})

    monkeypatch.setattr("rljax.actorlearner.run.train_host", with_switch)
    from rljax.actorlearner.learner import HostOptions

    result = run_host(config, RunOptions(run_dir=str(tmp_path / "run"), quiet=True),
                      HostOptions(max_env_restarts=1, restart_backoff_s=0.05, max_policy_lag=1))
    second.shutdown()
    assert state["switched"] and result.updates == 12 and result.preempted is None
    events = [__import__("json").loads(line) for line in (tmp_path / "run" / SCALING_LOG).read_text().splitlines()]
    kinds = [e["kind"] for e in events]
    assert "server_joined" in kinds and ("server_lost" in kinds or "server_removed" in kinds)
    joined = next(e for e in events if e["kind"] == "server_joined")
    assert joined["address"] == f"{second.address[0]}:{second.address[1]}"
    late = result.rows[-1]
    assert late["host/actors"] == 1 and late["host/actor"] != 0  # the new server's actor collected the last rollouts


def test_a_pool_starts_with_the_servers_that_answer(tmp_path, monkeypatch):
    monkeypatch.delenv(TOKEN_VARIABLE, raising=False)
    import json
    import socket

    from rljax.actorlearner.learner import HostOptions

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    with EnvServer(lambda: GymnasiumEnv("CartPole-v1", 4, max_episode_steps=50)) as server:
        server.start()
        live = f"{server.address[0]}:{server.address[1]}"
        config = PPOConfig(env=f"server:127.0.0.1:{dead},{live}", num_envs=4, num_steps=16, total_timesteps=4 * 16 * 3,
                           num_minibatches=1, num_epochs=1, hidden_sizes=(16,))
        result = run_host(config, RunOptions(run_dir=str(tmp_path / "run"), quiet=True), HostOptions())
    assert result.updates == 3 and {r["host/actors"] for r in result.rows} == {1}
    events = [json.loads(line) for line in (tmp_path / "run" / SCALING_LOG).read_text().splitlines()]
    assert events[0]["kind"] == "server_unreachable" and events[0]["address"] == f"127.0.0.1:{dead}"
