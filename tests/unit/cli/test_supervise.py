"""``rljax supervise``: restarts on preemption and crashes, stops on done/usage errors/spent budgets,
resumes, records every attempt, obeys signals. Fast tests use a fake train command that exits with a
scripted sequence of statuses; one end-to-end test restarts a real PPO run killed after its first
checkpoint."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from rljax.cli import supervise as supervise_module
from rljax.cli.supervise import LOG_FILE, attempt_command, backoff_delay, find_run_dir, newest_checkpoint

ROOT = pathlib.Path(__file__).resolve().parents[3]
# The supervisor loaded from its file: it needs only the standard library, and `python -m
# rljax.cli.supervise` would first import the rljax package (and JAX), seconds per test on a busy
# machine. The end-to-end tests use `-m rljax.cli.supervise`.
SUPERVISE = [sys.executable, "-c",
             "import importlib.util, sys\n"
             f"spec = importlib.util.spec_from_file_location('supervise', {str(ROOT / 'rljax' / 'cli' / 'supervise.py')!r})\n"
             "module = importlib.util.module_from_spec(spec)\n"
             "spec.loader.exec_module(module)\n"
             "assert 'jax' not in sys.modules\n"
             "sys.exit(module.main(sys.argv[1:]))\n"]

# A stand-in for a training command. FAKE_SCRIPT is a comma-separated list of steps, one per
# attempt (the last repeats); a step is '+'-separated actions: an exit status, 'kill' (SIGKILL
# itself), 'ckpt' (commit a checkpoint step), 'nap' (sleep 0.5 s), 'wait' (wait for a signal, then exit 75
# like a clean preemption). Every run appends its argv to STATE/argv.jsonl and counts itself in STATE/count.
FAKE = r"""
import json, os, signal, sys, time
argv = sys.argv[1:]
def flag(name):
    value = None
    for i, a in enumerate(argv):
        if a == name:
            value = argv[i + 1]
    return value
state = os.environ["FAKE_STATE"]
count_path = os.path.join(state, "count")
n = int(open(count_path).read()) if os.path.exists(count_path) else 0
open(count_path, "w").write(str(n + 1))
with open(os.path.join(state, "argv.jsonl"), "a") as f:
    f.write(json.dumps(argv) + "\n")
print(f"fake train attempt {n + 1} stdout", flush=True)
print(f"fake train attempt {n + 1} stderr", file=sys.stderr, flush=True)
run_dir = flag("--resume") or flag("--run-dir")
os.makedirs(run_dir, exist_ok=True)
if os.environ.get("FAKE_CONFIG", "1") == "1":
    open(os.path.join(run_dir, "config.json"), "w").write("{}")
steps = os.environ["FAKE_SCRIPT"].split(",")
for action in steps[min(n, len(steps) - 1)].split("+"):
    if action == "ckpt":
        os.makedirs(os.path.join(run_dir, "checkpoints", str(1000 * (n + 1))))
    elif action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "nap":
        time.sleep(0.5)
    elif action == "wait":
        got = []
        def handler(signum, frame):
            got.append(signum)
            with open(os.path.join(state, "signals"), "a") as f:
                f.write(signal.Signals(signum).name + "\n")
        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)
        open(os.path.join(state, "ready"), "w").close()
        while not got:
            time.sleep(0.02)
        time.sleep(0.5)  # a duplicate signal would arrive here and be counted
        sys.exit(75)
    else:
        sys.exit(int(action))
"""


@pytest.fixture
def fake(tmp_path):
    script = tmp_path / "fake_train.py"
    script.write_text(FAKE)
    state = tmp_path / "state"
    state.mkdir()
    return script, state


def _env(state, script, **extra):
    return {**os.environ, "PYTHONPATH": str(ROOT), "FAKE_STATE": str(state), "FAKE_SCRIPT": script, **extra}


def supervise(fake, run_dir, steps, *options, extra_env=None, command=None, timeout=60):
    script, state = fake
    command = command or [sys.executable, str(script), "--run-dir", str(run_dir)]
    return subprocess.run([*SUPERVISE, "--backoff", "0", *options, "--", *command],
                          env=_env(state, steps, **(extra_env or {})), cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def records(run_dir):
    return [json.loads(line) for line in (pathlib.Path(run_dir) / LOG_FILE).read_text().splitlines()]


def argvs(state):
    return [json.loads(line) for line in (state / "argv.jsonl").read_text().splitlines()]


@pytest.mark.timeout(60)
def test_restarts_after_preemption_and_crashes_then_stops_when_done(fake, tmp_path):
    run = tmp_path / "run"
    proc = supervise(fake, run, "75,1,kill,0")
    assert proc.returncode == 0, proc.stderr
    recs = records(run)
    assert [(r["attempt"], r["exit_status"], r["signal"], r["action"]) for r in recs] == [
        (1, 75, None, "restart"), (2, 1, None, "restart"), (3, None, "SIGKILL", "restart"), (4, 0, None, "done")]
    assert all(r["backoff_s"] == 0 for r in recs[:3]) and recs[3]["backoff_s"] is None
    for r in recs:
        assert r["start_unix"] <= r["end_unix"] and r["start"] <= r["end"]
    assert len({r["supervisor_pid"] for r in recs}) == 1 and len({r["pid"] for r in recs}) == 4
    # Child output passes through unchanged, and every attempt is reported in one line.
    for i in range(1, 5):
        assert f"fake train attempt {i} stdout" in proc.stdout and f"fake train attempt {i} stderr" in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("rljax supervise: attempt")]
    assert any("attempt 1 was preempted (status 75)" in ln and "restarting" in ln for ln in lines)
    assert any("attempt 3 was killed by SIGKILL" in ln for ln in lines)
    assert any("attempt 4 exited with status 0 (done)" in ln for ln in lines)


@pytest.mark.timeout(60)
def test_restarts_resume_the_run(fake, tmp_path):
    script, state = fake
    run = tmp_path / "run"
    proc = supervise(fake, run, "1,75,0")
    assert proc.returncode == 0, proc.stderr
    base = ["--run-dir", str(run)]
    assert argvs(state) == [base, base + ["--resume", str(run)], base + ["--resume", str(run)]]
    assert [r["argv"][2:] for r in records(run)] == argvs(state)


@pytest.mark.timeout(60)
def test_without_config_json_a_restart_runs_the_command_unchanged(fake, tmp_path):
    script, state = fake
    run = tmp_path / "run"
    proc = supervise(fake, run, "1,0", extra_env={"FAKE_CONFIG": "0"})
    assert proc.returncode == 0, proc.stderr
    assert argvs(state) == [["--run-dir", str(run)]] * 2
    assert "unchanged (no config.json yet)" in proc.stderr


@pytest.mark.timeout(60)
def test_a_command_that_resumes_already_is_not_given_a_second_resume(fake, tmp_path):
    script, state = fake
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")  # a requeued job: the run started in an earlier job
    proc = supervise(fake, run, "75,0", command=[sys.executable, str(script), "--resume", str(run)])
    assert proc.returncode == 0, proc.stderr
    assert argvs(state) == [["--resume", str(run)]] * 2


@pytest.mark.timeout(60)
@pytest.mark.parametrize("status, why", [(2, "restarting cannot help"), (65, "diverged")])
def test_stops_on_a_status_that_a_restart_would_repeat(fake, tmp_path, status, why):
    """2: a usage error; 65: a divergence the run's on_nonfinite policy gave up on."""
    script, state = fake
    run = tmp_path / "run"
    proc = supervise(fake, run, f"{status},0")
    assert proc.returncode == status
    assert (state / "count").read_text() == "1"
    assert [r["action"] for r in records(run)] == ["stop"]
    assert why in proc.stderr


@pytest.mark.timeout(60)
def test_gives_up_with_the_last_status_when_the_budget_is_spent(fake, tmp_path):
    script, state = fake
    run = tmp_path / "run"
    proc = supervise(fake, run, "1,75,kill,0", "--max-restarts", "2")
    assert proc.returncode == 128 + signal.SIGKILL  # the last attempt was killed
    assert (state / "count").read_text() == "3"
    assert [r["action"] for r in records(run)] == ["restart", "restart", "give up"]
    assert "restart budget spent (2 restarts)" in proc.stderr and f"rljax resume {run}" in proc.stderr
    proc = supervise(fake, tmp_path / "r0", "1", "--max-restarts", "0")
    assert proc.returncode == 1 and [r["action"] for r in records(tmp_path / "r0")] == ["give up"]


@pytest.mark.timeout(60)
def test_backoff_doubles_up_to_the_cap_and_restarts_after_progress(fake, tmp_path):
    run = tmp_path / "run"
    proc = supervise(fake, run, "1,1,1,1,ckpt+1,1,0", "--backoff", "0.01", "--max-backoff", "0.03")
    assert proc.returncode == 0, proc.stderr
    recs = records(run)
    assert [r["backoff_s"] for r in recs] == [0.01, 0.02, 0.03, 0.03, 0.01, 0.02, None]
    assert [r["new_checkpoint"] for r in recs] == [False] * 4 + [True, False, False]
    assert recs[4]["checkpoint"] == 5000


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["SIGTERM to the supervisor", "SIGINT to its process group (Ctrl-C)"])
def test_a_signal_to_the_supervisor_is_forwarded_once_and_not_restarted(fake, tmp_path, how):
    script, state = fake
    run = tmp_path / "run"
    sup = subprocess.Popen([*SUPERVISE, "--backoff", "0", "--", sys.executable,
                            str(script), "--run-dir", str(run)], env=_env(state, "wait,0"), cwd=ROOT,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, process_group=0,
                           # As from a terminal: a suite started in the background (`cmd &` without job
                           # control) passes SIGINT on as ignored, and then no Ctrl-C could arrive.
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 30
        while not (state / "ready").exists() and time.monotonic() < deadline and sup.poll() is None:
            time.sleep(0.02)
        assert (state / "ready").exists(), sup.stderr.read() if sup.poll() is not None else "child not ready"
        if how.startswith("SIGTERM"):
            sup.send_signal(signal.SIGTERM)
            expected = "SIGTERM"
        else:
            os.killpg(sup.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the child is not in this group
            expected = "SIGINT"
        out, err = sup.communicate(timeout=30)
    finally:
        sup.kill()
    assert sup.returncode == 75, err
    assert (state / "signals").read_text() == expected + "\n"  # exactly one signal reached the child
    assert (state / "count").read_text() == "1"
    (rec,) = records(run)
    assert rec["exit_status"] == 75 and rec["action"] == "stop"
    assert f"got {expected}: forwarded {expected}" in err and "not restarted" in err


@pytest.mark.timeout(60)
def test_a_signal_during_the_backoff_stops_without_a_restart(fake, tmp_path):
    script, state = fake
    run = tmp_path / "run"
    sup = subprocess.Popen([*SUPERVISE, "--backoff", "300", "--", sys.executable,
                            str(script), "--run-dir", str(run)], env=_env(state, "1,0"), cwd=ROOT,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not ((run / LOG_FILE).exists() and records(run)):
            time.sleep(0.02)
        sup.send_signal(signal.SIGTERM)
        _, err = sup.communicate(timeout=30)
    finally:
        sup.kill()
    assert sup.returncode == 1, err
    assert (state / "count").read_text() == "1"
    assert [r["event"] for r in records(run)] == ["attempt", "stop"]
    assert "during the back-off: not restarting" in err


@pytest.mark.timeout(60)
@pytest.mark.parametrize("command, message", [
    (["python", "-m", "experiments.ppo_cartpole"], "must name its run directory"),
    (["python", "-m", "experiments.ppo_cartpole", "--run-dir", "none"], "must name its run directory"),
])
def test_a_command_without_a_run_directory_is_refused(fake, command, message):
    proc = supervise(fake, None, "0", command=command)
    assert proc.returncode == 2 and message in proc.stderr
    assert not (fake[1] / "count").exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("options, message", [
    (["--max-restarts", "-1", "--", "x", "--run-dir", "d"], "--max-restarts must be >= 0, got -1"),
    (["--backoff", "5", "--max-backoff", "1", "--", "x", "--run-dir", "d"], "--max-backoff must be"),
    (["--backoff", "soon", "--", "x", "--run-dir", "d"], "'soon' is not a number of seconds"),
    (["--max-restarts", "3"], "no training command: put it after --"),
    (["--retries", "3", "--", "x", "--run-dir", "d"], "unrecognized arguments: --retries"),
    (["--shrink-after", "-1", "--", "x", "--run-dir", "d"], "--shrink-after must be >= 0, got -1"),
    (["--grow-when", "true", "--", "x", "--run-dir", "d"], "--grow-when grows a job back after a shrink: it needs "
                                                           "--shrink-after K"),
    (["--min-processes", "0", "--", "x", "--run-dir", "d"], "--min-processes must be >= 1, got 0"),
    (["--shrink-after", "2", "--", "srun", "python", "--run-dir", "d"],
     "--shrink-after needs an `rljax launch -n P [-d D] -- ...` command"),
])
def test_bad_options_exit_2_naming_the_value(options, message, tmp_path):
    proc = subprocess.run([*SUPERVISE, *options], cwd=tmp_path, capture_output=True,
                          text=True, timeout=30, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert not (tmp_path / "d").exists()


@pytest.mark.timeout(60)
def test_a_command_that_cannot_start_is_not_restarted(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.run([*SUPERVISE, "--backoff", "0", "--",
                           str(tmp_path / "no-such-program"), "--run-dir", str(run)], cwd=ROOT, capture_output=True,
                          text=True, timeout=30, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 127 and "cannot start" in proc.stderr
    assert [r["action"] for r in records(run)] == ["stop"]


def _fake_rljax(fake, tmp_path) -> str:
    """An executable named ``rljax`` that behaves as the fake train command (so the supervisor
    reads its argv as an ``rljax launch`` command)."""
    script, _ = fake
    exe = tmp_path / "bin" / "rljax"
    exe.parent.mkdir()
    exe.write_text(f"#!{sys.executable}\n" + script.read_text())
    exe.chmod(0o755)
    return str(exe)


@pytest.mark.timeout(60)
def test_a_launch_job_that_keeps_failing_without_progress_continues_with_one_process_fewer(fake, tmp_path):
    run = tmp_path / "run"
    command = [_fake_rljax(fake, tmp_path), "launch", "-n", "3", "-d", "2", "--", "python", "-m", "x",
               "--num-devices", "6", "--run-dir", str(run)]
    # A checkpoint then a kill (restarted as it is), two failures without a checkpoint (the second
    # shrinks 3 -> 2 processes), one more (not enough for another shrink), then done.
    proc = supervise(fake, run, "ckpt+kill,1,1,1,0", "--shrink-after", "2", command=command)
    assert proc.returncode == 0, proc.stderr
    runs = argvs(fake[1])
    assert [a[a.index("-n") + 1] for a in runs] == ["3", "3", "3", "2", "2"]
    assert [a[a.index("--num-devices") + 1] for a in runs] == ["6", "6", "6", "4", "4"]
    assert "--resume" not in runs[0] and all("--resume" in a for a in runs[1:])
    shrinks = [r for r in records(run) if r["event"] == "shrink"]
    assert len(shrinks) == 1 and shrinks[0]["after_attempt"] == 3
    assert (shrinks[0]["from_processes"], shrinks[0]["to_processes"], shrinks[0]["devices_per_process"]) == (3, 2, 2)
    assert "continuing with 2 processes of 2 devices instead of 3" in proc.stderr
    # The floor: with --min-processes 3 the job is only restarted.
    other = tmp_path / "other"
    command[-1] = str(other)
    (fake[1] / "count").unlink()
    (fake[1] / "argv.jsonl").unlink()
    proc = supervise(fake, other, "1,1,1,0", "--shrink-after", "1", "--min-processes", "3", command=command)
    assert proc.returncode == 0 and [a[a.index("-n") + 1] for a in argvs(fake[1])] == ["3"] * 4
    assert not [r for r in records(other) if r["event"] == "shrink"]


@pytest.mark.timeout(60)
def test_a_shrunk_job_grows_back_when_the_grow_check_passes(fake, tmp_path):
    """2 processes fail twice without a checkpoint: the job shrinks to 1; while it runs, --grow-when passes
    (the lost host is back), so the supervisor stops it cleanly and it continues on 2 processes, then is done."""
    run = tmp_path / "run"
    command = [_fake_rljax(fake, tmp_path), "launch", "-n", "2", "-d", "1", "--", "python", "-m", "x",
               "--num-devices", "2", "--run-dir", str(run)]
    back = f"grep -qx 3 {fake[1] / 'count'}"  # passes while the third attempt (the shrunk job) runs
    proc = supervise(fake, run, "1,1,ckpt+wait,0", "--shrink-after", "2", "--grow-when", back, "--grow-interval",
                     "0.2", command=command)
    assert proc.returncode == 0, proc.stderr
    runs = argvs(fake[1])
    assert [a[a.index("-n") + 1] for a in runs] == ["2", "2", "1", "2"]
    assert [a[a.index("--num-devices") + 1] for a in runs] == ["2", "2", "1", "2"]
    events = [r.get("action", r["event"]) for r in records(run)]
    assert events == ["restart", "restart", "shrink", "grow", "grow", "done"], events
    grow = [r for r in records(run) if r["event"] == "grow"][0]
    assert (grow["from_processes"], grow["to_processes"]) == (1, 2) and grow["after_attempt"] == 3
    assert (fake[1] / "signals").read_text() == "SIGTERM\n"  # stopped cleanly, once
    assert "continuing with 2 processes of 1 device" in proc.stderr


@pytest.mark.timeout(60)
def test_a_job_that_ends_on_its_own_while_the_grow_check_runs_is_not_grown(fake, tmp_path):
    """The shrunk job exits with a usage error (2) while --grow-when is still running: the supervisor neither
    grows nor restarts it, and exits 2."""
    run = tmp_path / "run"
    command = [_fake_rljax(fake, tmp_path), "launch", "-n", "2", "-d", "1", "--", "python", "-m", "x",
               "--run-dir", str(run)]
    proc = supervise(fake, run, "1,1,nap+2", "--shrink-after", "2", "--grow-when", "sleep 1; true", "--grow-interval",
                     "0.2", command=command)
    assert proc.returncode == 2, proc.stderr
    assert [r.get("action", r["event"]) for r in records(run)] == ["restart", "restart", "shrink", "stop"]
    assert [a[a.index("-n") + 1] for a in argvs(fake[1])] == ["2", "2", "1"]


def test_launch_layout_and_shrunk_command():
    from rljax.cli.supervise import launch_layout, shrunk_command

    cmd = ["rljax", "launch", "-n", "2", "-d", "2", "--", "python", "-m", "e", "--num-devices", "4", "-n", "9"]
    assert launch_layout(cmd) == (2, 2)
    assert shrunk_command(cmd, 1) == ["rljax", "launch", "-n", "1", "-d", "2", "--", "python", "-m", "e",
                                      "--num-devices", "2", "-n", "9"]
    cmd = ["python", "-m", "rljax.cli.main", "launch", "--num-processes=3", "-d3", "--", "rljax", "resume", "r",
           "--num-devices=9"]
    assert launch_layout(cmd) == (3, 3)
    assert shrunk_command(cmd, 2)[4:6] == ["--num-processes=2", "-d3"] and shrunk_command(cmd, 2)[-1] == "--num-devices=6"
    assert launch_layout(["/usr/bin/rljax", "launch", "-n4", "--", "x"]) == (4, 1)
    assert shrunk_command(["rljax", "launch", "-n4", "--", "x"], 3) == ["rljax", "launch", "-n3", "--", "x"]
    assert launch_layout(["srun", "-n", "2", "x"]) is None
    assert launch_layout(["rljax", "launch", "-n", "two", "--", "x"]) is None
    with pytest.raises(ValueError, match="not an `rljax launch"):
        shrunk_command(["srun", "x"], 1)


def test_find_run_dir_and_attempt_command(tmp_path):
    assert find_run_dir(["p", "-m", "e", "--run-dir", "a"]) == ("a", False)
    assert find_run_dir(["p", "--run-dir=a", "--run-dir", "b"]) == ("b", False)
    assert find_run_dir(["p", "--run-dir", "a", "--resume=a"]) == ("a", True)
    assert find_run_dir(["/usr/bin/rljax", "resume", "runs/x", "--total-timesteps", "2e6"]) == ("runs/x", True)
    assert find_run_dir(["python", "-m", "rljax.cli.main", "resume", "runs/x"]) == ("runs/x", True)
    assert find_run_dir(["rljax", "train", "ppo"]) == (None, False)
    assert find_run_dir(["rljax", "train", "ppo", "--run-dir", "NONE"]) == (None, False)
    run = tmp_path / "r"
    cmd = ["rljax", "train", "ppo", "--run-dir", str(run)]
    assert attempt_command(cmd, str(run)) == cmd
    run.mkdir()
    (run / "config.json").write_text("{}")
    assert attempt_command(cmd, str(run)) == cmd + ["--resume", str(run)]
    assert attempt_command(["rljax", "resume", str(run)], str(run)) == ["rljax", "resume", str(run)]


def test_the_preempted_status_is_the_checkpoint_modules():
    from rljax.store.checkpoint import PREEMPTED_EXIT_CODE

    assert supervise_module.PREEMPTED_EXIT_CODE == PREEMPTED_EXIT_CODE


def test_backoff_delay_and_newest_checkpoint(tmp_path):
    assert [backoff_delay(10, 600, k) for k in (1, 2, 3, 6, 7, 1000)] == [10, 20, 40, 320, 600, 600]
    assert newest_checkpoint(tmp_path) is None
    for name in ("512", "2048", "4096.orbax-checkpoint-tmp-17"):
        (tmp_path / "checkpoints" / name).mkdir(parents=True)
    assert newest_checkpoint(tmp_path) == 2048


# The real thing: a PPO run SIGKILLed by a wrapper right after (or before) its first checkpoint
# commits, restarted by the supervisor with --resume until it completes.
KILL_ONCE = r"""
import os, runpy, signal, sys
marker = os.environ["KILL_MARKER"]
if not os.path.exists(marker):
    from rljax.store.checkpoint import Checkpointer
    save = Checkpointer.save
    def save_then_die(self, *args, **kwargs):
        if os.environ["KILL_WHEN"] == "after":
            save(self, *args, **kwargs)
            self.wait()  # committed
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    Checkpointer.save = save_then_die
module = sys.argv[1]
sys.argv = [module] + sys.argv[2:]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def _supervised_ppo(tmp_path, when):
    wrapper = tmp_path / "kill_once.py"
    wrapper.write_text(KILL_ONCE)
    run = tmp_path / "run"
    command = [sys.executable, str(wrapper), "experiments.ppo_cartpole", "--total-timesteps", "20000",
               "--num-envs", "4", "--checkpoint-every", "4", "--run-dir", str(run)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KILL_MARKER": str(tmp_path / "killed"), "KILL_WHEN": when}
    proc = subprocess.run([sys.executable, "-m", "rljax.cli.supervise", "--backoff", "0", "--max-restarts", "2", "--",
                           *command], env=env, cwd=ROOT, capture_output=True, text=True, timeout=150)
    return proc, run, command


def _assert_completed(proc, run, command):
    from rljax.store.tracking import read_metrics

    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = records(run)
    assert [(r["signal"], r["exit_status"], r["action"]) for r in recs] == [("SIGKILL", None, "restart"),
                                                                          (None, 0, "done")]
    assert recs[0]["argv"] == command and recs[1]["argv"] == command + ["--resume", str(run)]
    rows = read_metrics(run)
    steps = [r["env_steps"] for r in rows]
    plan = json.loads((run / "manifest.json").read_text())["plan"]
    assert steps == sorted(set(steps)) and steps[-1] == plan["num_updates"] * plan["env_steps_per_update"]
    assert newest_checkpoint(run) == steps[-1]
    assert "done:" in proc.stdout  # the child's summary line passed through


@pytest.mark.timeout(200)
def test_a_real_run_killed_after_its_first_checkpoint_is_resumed_to_completion(tmp_path):
    proc, run, command = _supervised_ppo(tmp_path, "after")
    _assert_completed(proc, run, command)
    assert records(run)[0]["checkpoint"] is not None  # it did commit one before it was killed
    assert len(json.loads((run / "manifest.json").read_text())["resumes"]) == 1


@pytest.mark.slow  # by default the run killed after its first checkpoint above and the fake-command restarts
@pytest.mark.timeout(200)
def test_a_real_run_killed_before_its_first_checkpoint_is_restarted_to_completion(tmp_path):
    proc, run, command = _supervised_ppo(tmp_path, "before")
    _assert_completed(proc, run, command)
