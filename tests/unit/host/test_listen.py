"""Central inference: rollout workers dial a learner that listens (``--env listen:HOST:PORT``), are checked
both ways, get an actor each, and may come and go while the run trains."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from rljax.host.base import EnvConnectionError
from rljax.host.gymnasium_env import GymnasiumEnv
from rljax.host.listen import WorkerListener, dial, is_listen, parse_listen
from rljax.host.protocol import ProtocolError


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker_thread(port, num_envs=4, token=None, retry_for_s=5.0):
    done = {}
    thread = threading.Thread(target=lambda: done.setdefault("code", dial(
        ("127.0.0.1", port), lambda: GymnasiumEnv("CartPole-v1", num_envs), token=token, retry_for_s=retry_for_s)[0]),
        daemon=True)
    thread.start()
    return thread, done


def test_names_are_parsed_and_bad_ones_named():
    assert is_listen("listen:127.0.0.1:5700") and not is_listen("server:127.0.0.1:5700")
    assert parse_listen("listen:[::1]:5700") == ("::1", 5700)
    for bad in ["listen:5700", "listen:host:70000", "listen:host:x"]:
        with pytest.raises(ValueError, match=r"listen:HOST:PORT with a port in 0..65535 \(0: any free port"):
            parse_listen(bad)
    with pytest.raises(ValueError, match="needs a shared token"):
        WorkerListener("listen:0.0.0.0:0", token="")


def test_a_worker_that_dials_in_is_a_batch_of_envs_comes_back_when_cut_off_and_goes_at_the_end():
    listener = WorkerListener("listen:127.0.0.1:0")
    port = listener.address[1]
    thread, done = _worker_thread(port)
    try:
        (address,) = listener.wait_for(1, 10)
        assert address.startswith("worker-0@127.0.0.1:") and listener.joinable(address)
        env = listener.make(address, 4)
        assert env.spec.num_envs == 4 and not listener.joinable(address) and listener.addresses() == [address]
        obs = env.reset(0)
        step = env.step(np.zeros(4, np.int64))
        np.testing.assert_array_equal(obs, GymnasiumEnv("CartPole-v1", 4).reset(0))
        assert step.obs.shape == (4, 4)
        with pytest.raises(EnvConnectionError, match="is gone .* reconnects joins as a new one"):
            listener.make(address, 4)  # an actor's restart: the worker must connect again
        env.close()  # the run stopped (a signal, a crash): no CLOSE, and the worker comes back as a new one
        listener.failed(address)
        (again,) = listener.wait_for(1, 10)
        assert again.startswith("worker-1@") and thread.is_alive()
        listener.finish()  # the run's end: CLOSE, and the worker goes
        listener.make(again, 4).close()
        thread.join(10)
        assert done["code"] == 0
    finally:
        listener.close()


def test_a_worker_of_another_batch_size_or_token_is_refused_and_told_why(caplog):
    listener = WorkerListener("listen:127.0.0.1:0", num_envs=4, token="s3cret")
    port = listener.address[1]
    try:
        thread, done = _worker_thread(port, token="wrong")
        thread.join(10)
        assert done["code"] == 1 and listener.addresses() == []  # refused at its HELLO, never listed
        assert "does not match this learner's" in caplog.text and "s3cret" not in caplog.text
        with caplog.at_level("WARNING"):
            code, why = dial(("127.0.0.1", port), lambda: GymnasiumEnv("CartPole-v1", 3), token="s3cret")
        assert code == 1 and "start the worker with --num-envs 4" in why and listener.addresses() == []
        with pytest.raises(TimeoutError, match="0 of the 1 rollout workers .* --connect 127.0.0.1"):
            listener.wait_for(1, 0.2)
    finally:
        listener.close()


def test_a_greeting_has_a_deadline_and_a_worker_backs_off_from_a_peer_that_is_no_learner(caplog):
    listener = WorkerListener("listen:127.0.0.1:0", hello_timeout_s=1.0)
    try:
        slow = socket.create_connection(listener.address, timeout=10)
        start, closed = time.monotonic(), False
        for _ in range(20):  # a byte every 0.25 s: each read is quick, the greeting is not
            try:
                slow.sendall(b"R")
            except OSError:
                closed = True
                break
            time.sleep(0.25)
        assert closed and time.monotonic() - start < 3
        assert "no HELLO within 1 s of connecting" in caplog.text and listener.addresses() == []
    finally:
        listener.close()
    with socket.socket() as closer:  # accepts and closes at once: no session ever begins
        closer.bind(("127.0.0.1", 0))
        closer.listen(64)
        accepted = []
        threading.Thread(target=lambda: [accepted.append(closer.accept()[0].close()) for _ in range(100)],
                         daemon=True).start()
        code, why = dial(closer.getsockname(), lambda: GymnasiumEnv("CartPole-v1", 1), retry_for_s=2.5)
        assert code == 1 and "no session with a learner" in why and len(accepted) <= 4


def _spawn_worker(port: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rljax.cli.main", "env-server", "gymnasium/CartPole-v1",
                             "--num-envs", "4", "--connect", f"127.0.0.1:{port}", "--retry-for", "60"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_workers_in_other_processes_train_a_run_and_may_leave_and_join(tmp_path):
    import rljax
    from rljax.actorlearner.learner import HostOptions
    from rljax.actorlearner.run import run_host
    from rljax.agents.ppo import PPOConfig

    port = _free_port()
    workers = [_spawn_worker(port) for _ in range(2)]

    def churn():  # after a few updates: one worker dies, a new one connects
        metrics = tmp_path / "run" / "metrics.jsonl"
        while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 6):
            time.sleep(0.1)
        workers[0].kill()
        workers.append(_spawn_worker(port))

    config = PPOConfig(env=f"listen:127.0.0.1:{port}", num_envs=4, num_steps=32, total_timesteps=4 * 32 * 60,
                       hidden_sizes=(16,))
    thread = threading.Thread(target=churn, daemon=True)
    thread.start()
    try:
        result = run_host(config, rljax.RunOptions(run_dir=tmp_path / "run", quiet=True, handle_signals=False),
                          HostOptions(num_actors=2, max_env_restarts=1, restart_backoff_s=0.1))
    finally:
        workers[0].kill()
    events = [json.loads(line) for line in (tmp_path / "run" / "scaling.jsonl").read_text().splitlines()]
    rows = result.rows
    assert rows[-1]["env_steps"] == config.total_timesteps
    kinds = [e["kind"] for e in events]
    assert "server_lost" in kinds and "server_joined" in kinds, kinds
    for w in workers[1:]:  # the learner let them go at its end: they exit 0
        assert w.wait(30) == 0
    policy = rljax.load(tmp_path / "run")  # the checkpoint records the spaces: loads without the workers
    assert policy.action_space.n == 2


@pytest.mark.slow  # a learning run; by default test_workers_in_other_processes_train_a_run_and_may_leave_and_join
def test_two_worker_processes_through_central_inference_train_cartpole_to_475(tmp_path):  # stands for it
    port = _free_port()
    workers = [_spawn_worker(port) for _ in range(2)]
    try:
        subprocess.run([sys.executable, "-m", "rljax.cli.main", "train", "ppo", "--env", f"listen:127.0.0.1:{port}",
                        "--num-envs", "4", "--num-actors", "2", "--total-timesteps", "500000", "--run-dir",
                        str(tmp_path / "run"), "--quiet"], check=True, timeout=900)
        assert all(w.wait(30) == 0 for w in workers)
    finally:
        for w in workers:
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    returns = [r["episode_return_mean"] for r in rows if r.get("episode_return_mean") is not None]
    assert np.mean(returns[-10:]) >= 475, returns[-10:]


def test_protocol_error_is_what_a_refused_learner_hello_raises():
    assert issubclass(ProtocolError, ValueError)


@pytest.mark.slow  # two runs of the CLI; by default test_a_worker_that_dials_in_..._goes_at_the_end stands for it
def test_a_preempted_learner_keeps_its_workers_and_the_resumed_run_gets_them_back(tmp_path):
    port, run_dir = _free_port(), tmp_path / "run"
    worker = _spawn_worker(port)
    try:
        learner = subprocess.Popen([sys.executable, "-m", "rljax.cli.main", "train", "ppo", "--env",
                                    f"listen:127.0.0.1:{port}", "--num-envs", "4", "--num-steps", "32",
                                    "--total-timesteps", str(4 * 32 * 200), "--run-dir", str(run_dir), "--quiet"])
        metrics = run_dir / "metrics.jsonl"
        deadline = time.monotonic() + 120
        while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 3) and time.monotonic() < deadline:
            time.sleep(0.2)
        learner.send_signal(signal.SIGTERM)
        assert learner.wait(60) == 75  # preempted: saved, resumable
        time.sleep(2)
        assert worker.poll() is None  # not released: it is connecting again
        subprocess.run([sys.executable, "-m", "rljax.cli.main", "resume", str(run_dir), "--quiet"], check=True,
                       timeout=300)
        assert worker.wait(30) == 0  # the resumed run took it back and released it at its end
    finally:
        if worker.poll() is None:
            worker.kill()
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert rows[-1]["env_steps"] == 4 * 32 * 200
