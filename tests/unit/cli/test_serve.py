"""``rljax serve``: serves a run until SIGTERM (exit 0), its figures in ``rljax status``; bad arguments are
one line and status 2."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from rljax.cli.main import main


def test_serve_answers_a_client_shows_in_status_and_stops_on_sigterm(tiny_run, tmp_path):
    from rljax.serve import Client

    run_dir = tiny_run("ppo-cartpole")[0]
    stats = tmp_path / "stats"
    proc = subprocess.Popen([sys.executable, "-m", "rljax.cli.main", "serve", str(run_dir), "--port", "0",
                             "--max-batch", "16", "--stats-dir", str(stats), "--stats-every", "0.2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        port = int(re.search(r"on 127\.0\.0\.1:(\d+)", line).group(1))
        assert "ppo on CartPole-v1" in line
        with Client("127.0.0.1", port) as client:
            for _ in range(5):
                client.act(np.zeros(4))
        time.sleep(0.5)
        assert main(["status", str(stats)]) == 0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        proc.kill()
    from rljax.serve.stats import read_serve_status

    record = read_serve_status(stats)
    assert record["state"] == "stopped" and record["totals"]["requests"] == 5


@pytest.mark.parametrize("argv, match", [
    ([], "give the directory to serve"),
    (["nope"], "nope is not a directory"),
    (["{run}", "--follow", "elsewhere"], "another directory than the one served"),
    (["{run}", "--follow", "--step", "1"], "--step 1 and --follow"),
    (["{run}", "--port", "70000"], "--port 70000"),
    (["{run}", "--max-batch", "0"], "--max-batch 0: 1 to 65536 rows"),
    (["{run}", "--max-wait-ms", "inf"], "max_wait_ms=inf"),
    (["{run}", "--host", "0.0.0.0"], "beyond this machine, needs a shared token: set RLJAX_SERVE_TOKEN"),
])
def test_bad_arguments_are_one_line_and_status_2(tiny_run, capsys, monkeypatch, argv, match):
    monkeypatch.delenv("RLJAX_SERVE_TOKEN", raising=False)
    run_dir = str(tiny_run("ppo-cartpole")[0])
    assert main(["serve", *[a.replace("{run}", run_dir) for a in argv]]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rljax serve: error: ") and match in err and err.count("\n") == 1
