"""``rljax env-server``: serves a Gymnasium env until SIGTERM; bad arguments are one line and status 2."""

from __future__ import annotations

import signal
import subprocess
import sys

import numpy as np
import pytest

from rljax.cli.main import main
from rljax.host.client import ServerEnv
from tests.conftest import cpu_subprocess_env


@pytest.mark.timeout(120)
def test_it_serves_until_sigterm(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "rljax.cli.main", "env-server", "gymnasium/CartPole-v1",
                             "--num-envs", "3", "--port", "0", "--max-episode-steps", "5"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cpu_subprocess_env())
    try:
        line = proc.stdout.readline()
        assert line.startswith("serving gymnasium/CartPole-v1 x 3 per connection on 127.0.0.1:"), \
            (line, proc.stderr.read() if proc.poll() is not None else "")
        port = int(line.split("as server:127.0.0.1:")[1].split()[0])
        env = ServerEnv("127.0.0.1", port)
        assert env.reset(0).shape == (3, 4)
        steps = [env.step(np.zeros(3, np.int64)) for _ in range(5)]  # --max-episode-steps 5 reaches the server's env
        assert [s.truncated.tolist() for s in steps] == [[False] * 3] * 4 + [[True] * 3]
        assert not any(s.terminated.any() for s in steps)
        env.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()


@pytest.mark.parametrize("argv, message", [
    (["CartPole-v1", "--num-envs", "2"], "the reference server serves Gymnasium envs, named gymnasium/<id>"),
    (["gymnasium/CartPole-v1", "--num-envs", "0"], "--num-envs 0 (>= 1)"),
    (["gymnasium/CartPol-v1", "--num-envs", "2"], "did you mean CartPole-v1"),
    (["gymnasium/CartPole-v1", "--num-envs", "2", "--host", "0.0.0.0"], "needs a shared token"),
])
def test_bad_arguments_are_one_line_and_status_2(argv, message, capsys, monkeypatch):
    monkeypatch.delenv("RLJAX_ENV_SERVER_TOKEN", raising=False)
    assert main(["env-server", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
