"""``rljax train ppo|impala --env gymnasium/<id>|server:...``: the host flags, devices by name, a run
directory, SIGTERM -> exit 75 -> ``rljax resume`` with the saved layout; misuse is one line and status 2."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import jax
import pytest

from rljax.cli.host import parse_device, parse_devices
from rljax.cli.main import main
from rljax.store.checkpoint import Checkpointer
from tests.conftest import cpu_subprocess_env

SMALL = ["--num-envs", "4", "--num-steps", "32", "--num-minibatches", "2", "--num-epochs", "1", "--hidden-sizes",
         "16", "--no-compile-cache"]


def test_devices_by_index_or_platform_and_index():
    assert parse_devices(None) == ()
    assert parse_device("0") == jax.devices()[0] and parse_device("cpu:0") == jax.devices("cpu")[0]
    assert parse_devices("cpu:0") == parse_devices(" 0 ") == (jax.devices()[0],)
    for bad in ("99", "cpu:99", "tpu:0", "first"):
        with pytest.raises(ValueError, match=rf"no device '{bad}': this process has cpu:0"):
            parse_device(bad)
    for bad, says in (("0,,1", "an empty item"), ("0,cpu:0", "names a device more than once"),
                      ("0,7", "no device '7'")):
        with pytest.raises(ValueError, match=says):
            parse_devices(bad)


def test_a_config_file_with_every_flag_at_its_default_trains_a_jax_env(tmp_path, capsys):
    """``rljax config ppo`` writes the host flags too, at their defaults: not a host layout."""
    assert main(["config", "ppo"]) == 0
    (tmp_path / "run.toml").write_text(capsys.readouterr().out)
    assert main(["train", "ppo", "--config", str(tmp_path / "run.toml"), "--total-timesteps", "512", "--hidden-sizes",
                 "8", "--run-dir", "none", "--quiet", "--no-compile-cache"]) == 0


def test_envpool_without_the_extra_is_one_line_and_status_2(monkeypatch, capsys, tmp_path):
    from rljax.cli import host

    monkeypatch.setattr(host, "_installed", lambda module: module != "envpool")
    with pytest.raises(SystemExit) as exit_:
        main(["train", "ppo", "--env", "envpool/Pong-v5", "--run-dir", str(tmp_path / "run")])
    assert exit_.value.code == 2 and not (tmp_path / "run").exists()
    assert 'needs EnvPool, which is not installed: pip install -e ".[envpool]"' in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["train", "ppo", "--num-actors", "2", "--env", "CartPole-v1"],
     "--num-actors lay out the actor-learner path for host envs"),
    (["train", "ppo", "--actor-devices", "0", "--max-policy-lag", "0"],
     "--actor-devices, --max-policy-lag lay out the actor-learner path"),
    (["train", "a2c", "--env", "gymnasium/CartPole-v1"],
     "trains with ppo, impala, pqn or an off-policy algorithm (dqn, c51, qrdqn, sac, td3, d4pg), not a2c"),
    (["train", "impala", "--env", "gymnasium/CartPole-v1", "--learner-devices", "gpu:3"],
     "no device 'gpu:3'"),
    (["train", "ppo", "--env", "gymnasium/CartPole-v1", "--num-actors", "0"], "num_actors=0: must be an integer >= 1"),
    (["train", "ppo", "--env", "gymnasium/CartPole-v1", "--video-interval", "1000"],
     "video_interval=1000: a run on host envs (gymnasium/CartPole-v1) records no videos while it trains"),
])
def test_misuse_is_one_line_and_status_2(argv, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--run-dir", str(tmp_path / "run")])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.timeout(300)
def test_sigterm_exits_75_and_resume_continues_with_the_saved_layout(tmp_path):
    run = tmp_path / "run"
    env = cpu_subprocess_env()
    cmd = [sys.executable, "-m", "rljax.cli.main", "train", "ppo", "--env", "gymnasium/CartPole-v1", *SMALL,
           "--total-timesteps", "1e6", "--updates-per-chunk", "1", "--max-policy-lag", "0", "--queue-size", "3",
           "--run-dir", str(run)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not ((run / "chunks.jsonl").exists() and (run / "chunks.jsonl").read_text().count("\n") >= 2):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 75, err[-2000:]
    assert "preempted (SIGTERM); exit status 75. Resume with: rljax resume" in err
    stopped = json.loads((run / "chunks.jsonl").read_text().splitlines()[-1])["updates"]
    resumed = subprocess.run([sys.executable, "-m", "rljax.cli.main", "resume", str(run), "--total-timesteps",
                              str(128 * (stopped + 2)), "--no-compile-cache"], env=env, capture_output=True,
                             text=True, timeout=180)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"resuming from update {stopped:,}" in resumed.stdout and "done: " in resumed.stdout
    chunks = [json.loads(line) for line in (run / "chunks.jsonl").read_text().splitlines()]
    assert [c["updates"] for c in chunks] == list(range(1, stopped + 3))
    assert all(c["host/policy_lag"] == 0 for c in chunks)  # --max-policy-lag 0 was kept
    assert json.loads((run / "manifest.json").read_text())["host"]["queue_size"] == 3


def test_the_done_line_says_over_which_episodes():
    """``rljax train`` prints the actor-learner path's own done line (its ``return nan`` fix included:
    tests/unit/actorlearner/test_run.py)."""
    from types import SimpleNamespace

    from rljax.actorlearner.run import done_line
    from rljax.cli import host

    assert not hasattr(host, "done_line")  # no second copy of the line in the command

    row = lambda u, ret, n: {"updates": u, "episodes": n, "episode_return_mean": ret, "sps": 1234.0,  # noqa: E731
                             "host/policy_lag": u % 2, "host/env_restarts": 1, "host/lost_episodes": 4}
    config = SimpleNamespace(env_steps_per_update=4 * 32)
    one = done_line(SimpleNamespace(rows=[row(1, 10.0, 2)], updates=1), config, "runs/x")
    assert one == ("done: 128 env steps, return 10.00 (the last update's episodes), 1,234 env steps/s, policy lag "
                   "<= 1, env restarts 1, lost episodes 4; run directory: runs/x")
    rows = [row(u, 10.0 * u, u % 3) for u in range(1, 21)]  # the last 2 updates: 19 (1 episode), 20 (2 episodes)
    many = done_line(SimpleNamespace(rows=rows, updates=20), config, None)
    assert many.startswith(f"done: 2,560 env steps, return {(190 + 2 * 200) / 3:.2f} (the episodes of the last 2 "
                           f"updates)")


def test_off_policy_on_host_envs_with_ape_x_from_the_command_line_and_a_resume_keeps_the_layout(tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["train", "dqn", "--env", "gymnasium/CartPole-v1", "--num-envs", "2", "--num-steps", "4", "--batch-size",
            "8", "--hidden-sizes", "8", "--learning-starts", "16", "--prioritized", "--num-actors", "2",
            "--apex-epsilon", "0.4", "--initial-priority", "td", "--no-compile-cache", "--quiet"]
    assert main([*argv, "--total-timesteps", "48", "--run-dir", str(run)]) == 0
    host = json.loads((run / "manifest.json").read_text())["host"]
    assert (host["apex_epsilon"], host["initial_priority"], host["num_actors"]) == (0.4, "td", 2)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["env_steps"] == 48 and rows[-1]["buffer_size"] == 48
    assert main(["resume", str(run), "--total-timesteps", "64", "--quiet"]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["env_steps"] == 64 and rows[-1]["buffer_size"] == 64  # the replay came back with the run
    assert main(["eval", str(run), "--episodes", "2"]) == 0
    assert "eval gymnasium/CartPole-v1 dqn step 64" in capsys.readouterr().out
    host = tmp_path / "host"  # the replay in host memory, checkpointed and resumed the same way
    argv = [a for a in argv if a not in ("--prioritized", "--apex-epsilon", "0.4", "--initial-priority", "td")]
    assert main([*argv, "--replay", "host", "--total-timesteps", "48", "--run-dir", str(host)]) == 0
    assert main(["resume", str(host), "--total-timesteps", "64", "--quiet"]) == 0
    rows = [json.loads(line) for line in (host / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["buffer_size"] == 64 and json.loads((host / "manifest.json").read_text())["host"]["replay"] == "host"


def test_ape_x_rates_for_an_algorithm_without_an_epsilon_are_refused_before_anything_is_written(tmp_path, capsys):
    status = main(["train", "sac", "--env", "gymnasium/Pendulum-v1", "--apex-epsilon", "0.4", "--total-timesteps", "64",
                   "--run-dir", str(tmp_path / "run"), "--no-compile-cache"])
    assert status == 2 and not (tmp_path / "run").exists()
    assert "apex_epsilon=0.4: SACConfig does not explore with an epsilon" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:  # an on-policy run has no such flag
        main(["train", "ppo", "--env", "gymnasium/CartPole-v1", "--apex-epsilon", "0.4"])
    assert exit_.value.code == 2


def test_an_off_policy_run_killed_with_sigkill_resumes_from_its_newest_checkpoint_with_its_replay(tmp_path):
    """SAC on Pendulum, a checkpoint every 4 updates: SIGKILL once 3 chunks are logged, then ``rljax
    resume``. It resumes from the newest checkpoint that committed (what is lost is what came after it),
    and its replay comes back with it: the first update after the resume holds every item collected
    up to the checkpoint plus its own rollout, not one rollout."""
    run = tmp_path / "run"
    env = cpu_subprocess_env()
    cmd = [sys.executable, "-m", "rljax.cli.main", "train", "sac", "--env", "gymnasium/Pendulum-v1", "--num-envs", "2",
           "--num-steps", "4", "--batch-size", "16", "--hidden-sizes", "16", "--learning-starts", "16",
           "--total-timesteps", "1e6", "--updates-per-chunk", "4", "--checkpoint-every", "1", "--run-dir", str(run),
           "--no-compile-cache", "--quiet"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not ((run / "chunks.jsonl").exists() and (run / "chunks.jsonl").read_text().count("\n") >= 3):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        logged = json.loads((run / "chunks.jsonl").read_text().splitlines()[-1])["updates"]
        committed = max(Checkpointer(run, read_only=True).steps(), default=0)  # before the kill: a floor
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    finally:
        proc.kill()
    resumed = subprocess.run([sys.executable, "-m", "rljax.cli.main", "resume", str(run), "--total-timesteps",
                              str(8 * (logged + 8)), "--no-compile-cache"], env=env, capture_output=True, text=True,
                             timeout=180)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    # The rows the killed run logged after the checkpoint it resumed from were set aside.
    superseded = run / "metrics.superseded.jsonl"
    lost = [json.loads(line)["updates"] for line in superseded.read_text().splitlines()] if superseded.exists() else []
    restored = min(lost) - 1 if lost else logged
    # The newest checkpoint that had committed when the run was killed (or a newer one): what was lost
    # is the chunks after it, whose saves were in flight (a checkpoint every chunk of 4 updates here).
    assert 8 * restored >= committed > 0 and restored % 4 == 0 and restored <= logged + 4
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    first = next(r for r in rows if r["updates"] == restored + 1)
    assert first["buffer_size"] == 8 * (restored + 1)
    assert rows[-1]["updates"] == logged + 8 and rows[-1]["buffer_size"] == 8 * (logged + 8)
