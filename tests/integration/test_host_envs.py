"""The actor-learner path against a real env server process that is killed twice mid-run: the actor
reconnects with back-off, the run finishes every update, and the lost episodes are counted."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rljax.actorlearner.learner import HostOptions, train_host
from rljax.agents.ppo import PPOConfig
from rljax.host.sources import make_host_env
from tests.conftest import cpu_subprocess_env


def _server(port: int) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-m", "rljax.cli.main", "env-server", "gymnasium/CartPole-v1",
                             "--num-envs", "4", "--port", str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=cpu_subprocess_env())
    line = proc.stdout.readline()
    assert line.startswith("serving"), line
    return proc, int(line.split("as server:127.0.0.1:")[1].split()[0])


@pytest.mark.timeout(300)
def test_a_server_killed_twice_mid_run_costs_episodes_not_the_run(monkeypatch):
    monkeypatch.delenv("RLJAX_ENV_SERVER_TOKEN", raising=False)
    proc, port = _server(0)
    procs = [proc]

    def kill_at_updates_3_and_6(row):
        if row["updates"] in (3, 6):
            procs[-1].kill()
            procs[-1].wait(30)
            procs.append(_server(port)[0])  # the same address, as a supervisor would restart it

    config = PPOConfig(env="CartPole-v1", num_envs=4, num_steps=16, total_timesteps=4 * 16 * 10, num_minibatches=2,
                       num_epochs=1, hidden_sizes=(16,))
    try:
        rows = train_host(config, lambda a: make_host_env(f"server:127.0.0.1:{port}", 4, timeout_s=20),
                              HostOptions(max_policy_lag=0, max_env_restarts=6, restart_backoff_s=0.2),
                              on_row=kill_at_updates_3_and_6).rows
    finally:
        for p in procs:
            p.kill()
            p.wait(30)
    assert [r["updates"] for r in rows] == list(range(1, 11))
    assert rows[-1]["host/env_restarts"] >= 2 and rows[-1]["host/lost_episodes"] >= 2 * 4, rows[-1]
    assert rows[2]["host/env_restarts"] == 0  # nothing was lost before the first kill
