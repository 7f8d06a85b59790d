"""The run-directory lock: one writer per directory, across processes, with stale records taken over."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings

import pytest

from rljax.store import runlock
from rljax.store.runlock import (LOCK_FILE, RunLock, RunLockedError, RunLockError, RunLockWarning, describe_holder,
                                 is_held, read_holder)

ROOT = pathlib.Path(__file__).resolve().parents[3]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

HOLDER = """
import sys
from rljax.store.runlock import RunLock
with RunLock(sys.argv[1]):
    print("locked", flush=True)
    sys.stdin.readline()  # held until the test closes stdin (or kills this process)
"""


def _start_holder(run_dir: pathlib.Path, script: str = HOLDER) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", script, str(run_dir)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, cwd=ROOT)
    line = proc.stdout.readline().strip()
    if line != "locked":
        proc.kill()
        raise AssertionError(f"holder did not take the lock: {line!r} {proc.stderr.read()[-2000:]}")
    return proc


def _os_lock_free(run_dir: pathlib.Path) -> bool:
    """Whether a new open file description can flock the lock file (False while anyone holds it)."""
    fd = os.open(run_dir / LOCK_FILE, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # releases it again when it was taken
    return True


def _acquire_quietly(run_dir) -> tuple[RunLock, list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lock = RunLock(run_dir).acquire()
    return lock, [w for w in caught if issubclass(w.category, RunLockWarning)]


@pytest.mark.timeout(60)
def test_a_second_process_is_refused_with_the_holders_details(tmp_path):
    run = tmp_path / "run"
    holder = _start_holder(run)
    try:
        with pytest.raises(RunLockedError) as info:
            RunLock(run).acquire()
        message = str(info.value)
        assert repr(str(run)) in message
        assert f"{socket.gethostname()}:{holder.pid}" in message
        assert "started " in message and "command: " in message
        assert f"kill -TERM {holder.pid}" in message and f"rljax resume {run}" in message
        assert info.value.holder["pid"] == holder.pid and isinstance(info.value, RuntimeError)
        # Refused by a third process too (not only by this one's bookkeeping).
        other = subprocess.run([sys.executable, "-c", "import sys; from rljax.store.runlock import RunLock; "
                                "RunLock(sys.argv[1]).acquire()", str(run)],
                               env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=30)
        assert other.returncode != 0 and "RunLockedError" in other.stderr and str(holder.pid) in other.stderr
        holder.stdin.close()  # a clean release
        assert holder.wait(timeout=30) == 0
    finally:
        holder.kill()
    assert (run / LOCK_FILE).read_text() == ""  # released: the record is emptied
    lock, taken_over = _acquire_quietly(run)
    lock.release()
    assert taken_over == []


@pytest.mark.timeout(60)
def test_a_killed_holders_lock_is_taken_over_with_one_warning(tmp_path):
    run = tmp_path / "run"
    holder = _start_holder(run)
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    assert read_holder(run)["pid"] == holder.pid  # the record is left behind...
    lock, taken_over = _acquire_quietly(run)  # ...but the kernel released the lock
    try:
        assert len(taken_over) == 1
        text = str(taken_over[0].message)
        assert f"stale lock on run directory {str(run)!r} left by {socket.gethostname()}:{holder.pid}" in text
        assert "that process is gone" in text
        assert read_holder(run)["pid"] == os.getpid() and read_holder(run)["token"] == lock.record["token"]
        assert not _os_lock_free(run)
    finally:
        lock.release()
    assert _os_lock_free(run)


def test_another_hosts_record_without_an_os_lock_is_taken_over_with_a_warning(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    record = {"host": "node-17.cluster", "pid": 4242, "started": "2024-05-01T10:00:00+00:00",
              "argv": ["python", "-m", "experiments.ppo_cartpole", "--run-dir", str(run)], "token": "x"}
    (run / LOCK_FILE).write_text(json.dumps(record))
    lock, taken_over = _acquire_quietly(run)
    lock.release()
    assert len(taken_over) == 1
    text = str(taken_over[0].message)
    assert "node-17.cluster:4242, started 2024-05-01T10:00:00+00:00" in text
    assert "experiments.ppo_cartpole --run-dir" in text and "stop this one now" in text


@pytest.mark.parametrize("content", [b"\x00\xffnot json", b'{"pid": "x"}', b"[1, 2]"])
def test_a_garbage_lock_file_is_taken_over_with_a_warning(tmp_path, content):
    run = tmp_path / "run"
    run.mkdir()
    (run / LOCK_FILE).write_bytes(content)
    lock, taken_over = _acquire_quietly(run)
    assert len(taken_over) == 1 and "unreadable record" in str(taken_over[0].message)
    assert read_holder(run)["pid"] == os.getpid()
    lock.release()
    assert (run / LOCK_FILE).read_bytes() == b""


@pytest.mark.timeout(60)
def test_a_held_lock_with_a_garbage_record_is_refused_without_a_traceback_from_parsing(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    script = ("import fcntl, os, sys\n"
              "fd = os.open(os.path.join(sys.argv[1], '.lock'), os.O_RDWR | os.O_CREAT)\n"
              "fcntl.flock(fd, fcntl.LOCK_EX)\n"
              "os.write(fd, b'garbage')\n"
              "print('locked', flush=True)\n"
              "sys.stdin.readline()\n")
    holder = _start_holder(run, script)
    try:
        with pytest.raises(RunLockedError, match="unknown holder") as info:
            RunLock(run).acquire()
        assert info.value.holder is None and "fuser" in str(info.value)
    finally:
        holder.kill()
        holder.wait(timeout=30)


def test_release_on_exception_and_sequential_reuse(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(ValueError, match="boom"):
        with RunLock(run):
            assert not _os_lock_free(run)
            raise ValueError("boom")
    assert _os_lock_free(run) and (run / LOCK_FILE).read_bytes() == b""
    for _ in range(2):  # train() twice in one process
        lock, taken_over = _acquire_quietly(run)
        assert taken_over == [] and lock.held
        lock.release()
        assert not lock.held and _os_lock_free(run)


def test_reentrant_in_the_holding_thread_refused_in_another(tmp_path):
    run = tmp_path / "run"
    with RunLock(run) as outer:
        token = outer.record["token"]
        with RunLock(run) as inner:  # a sweep's train() inside the sweep's hold
            assert inner.record["token"] == token
        assert not _os_lock_free(run) and read_holder(run)["token"] == token  # still held by the outer one
        errors = []

        def other_thread():
            try:
                RunLock(run).acquire()
            except RunLockedError as err:
                errors.append(str(err))

        t = threading.Thread(target=other_thread)
        t.start()
        t.join(timeout=30)
        assert len(errors) == 1 and "another thread of this process" in errors[0]
    assert _os_lock_free(run)
    with pytest.raises(RuntimeError, match="without a matching acquire"):
        outer.release()


@pytest.mark.timeout(60)
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # JAX's warning about fork in a threaded process
def test_a_forked_child_does_not_hold_or_release_the_parents_lock(tmp_path):
    run = tmp_path / "run"
    with RunLock(run) as lock:
        pid = os.fork()
        if pid == 0:  # the child: only os-level work, then _exit
            code = 3
            try:
                lock.release()  # must not release the parent's lock
                try:
                    RunLock(run).acquire()
                    code = 1  # wrongly acquired
                except RunLockedError as err:
                    code = 0 if str(os.getppid()) in str(err) else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert lock.held and not _os_lock_free(run) and read_holder(run)["pid"] == os.getpid()
    assert _os_lock_free(run)


@pytest.mark.timeout(60)
def test_subprocesses_do_not_inherit_the_lock(tmp_path):
    """A child started while the lock is held, even with ``close_fds=False``, holds no copy of it:
    it has no descriptor of the lock file, and the lock is free once this process releases it.

    Both are checked once the child runs its own code (its first line of output), not as soon as
    ``Popen`` returns: ``Popen`` uses ``posix_spawn`` here, which returns as soon as the child's
    ``execve`` has replaced its memory. The child closes its close-on-exec copy of the lock's
    descriptor later in ``execve``, and the kernel drops that last reference to the lock file (which
    is what releases an ``flock``) only when ``execve`` returns to user space. Until then the lock
    still reads as held, for a moment that a busy machine can stretch past this test's next line."""
    run = tmp_path / "run"
    lock = RunLock(run).acquire()
    script = "import time; print('running', flush=True); time.sleep(60)"
    with subprocess.Popen([sys.executable, "-c", script], close_fds=False, stdout=subprocess.PIPE, text=True) as child:
        try:
            assert child.stdout.readline() == "running\n"  # its execve has returned
            fd_dir = pathlib.Path(f"/proc/{child.pid}/fd")
            if fd_dir.is_dir():  # Linux: the child's open descriptors
                lock_file = os.path.realpath(run / LOCK_FILE)
                assert lock_file not in {os.path.realpath(fd) for fd in fd_dir.iterdir()}
            lock.release()
            assert _os_lock_free(run)  # the child still runs but holds no copy of the lock
        finally:
            child.kill()


def test_unusable_directories_give_a_clear_error(tmp_path):
    not_dir = tmp_path / "file"
    not_dir.write_text("x")
    with pytest.raises(RunLockError, match="cannot open the lock file .* must be a directory this user can write"):
        RunLock(not_dir).acquire()
    run = tmp_path / "run"
    (run / LOCK_FILE).mkdir(parents=True)  # a lock "file" that cannot be opened for writing
    with pytest.raises(RunLockError, match="IsADirectoryError"):
        RunLock(run).acquire()


def test_a_filesystem_without_locks_is_an_error_unless_locking_is_off(tmp_path, monkeypatch):
    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(runlock.fcntl, "flock", no_locks)
    run = tmp_path / "run"
    with pytest.raises(RunLockError, match="ENOLCK.*RLJAX_RUN_LOCK=0"):
        RunLock(run).acquire()
    monkeypatch.setenv("RLJAX_RUN_LOCK", "0")
    with RunLock(tmp_path / "other") as lock:
        assert lock.record is None
    assert not (tmp_path / "other").exists()


def test_holds_run_dir_locks_for_the_call_only(tmp_path):
    from rljax.store.runlock import holds_run_dir

    seen = []

    @holds_run_dir
    def train(config, env=None, *, run_dir=None, nested=False):
        """Docs."""
        seen.append(None if run_dir is None else read_holder(run_dir)["pid"])
        if nested:
            train(config, run_dir=run_dir)  # re-entrant, like a sweep's train
            assert not _os_lock_free(run_dir)
        return config

    assert train(1, run_dir=tmp_path / "a", nested=True) == 1 and train(2) == 2
    assert seen == [os.getpid(), os.getpid(), None] and train.__doc__ == "Docs."
    assert _os_lock_free(tmp_path / "a")
    with pytest.raises(TypeError, match="no run_dir parameter"):
        holds_run_dir(lambda x: x)


def test_no_directory_means_no_lock():
    with RunLock(None) as lock:
        assert lock.path is None and lock.record is None


@pytest.mark.timeout(240)
def test_a_second_run_or_a_resume_of_a_live_run_directory_is_refused(tmp_path, capsys):
    """The reported bug: a second run on a live run's --run-dir, or `rljax resume` of it, must exit 2
    naming the holder instead of writing into the directory."""
    from experiments import ppo_cartpole
    from rljax.cli.main import main
    from rljax.store.tracking import read_metrics

    run = tmp_path / "run"
    # A small program, tests/unit/cli/test_stop.py's (the suite's compile cache, which --no-compile-cache leaves
    # in use, serves one for the other; the commands run in this process below leave its cache alone).
    flags = ["--total-timesteps", "1e8", "--num-envs", "8", "--num-steps", "16", "--hidden-sizes", "16",
             "--num-epochs", "1", "--updates-per-chunk", "1", "--checkpoint-every", "1", "--quiet",
             "--no-compile-cache"]
    first = subprocess.Popen([sys.executable, "-m", "experiments.ppo_cartpole", *flags, "--run-dir", str(run)],
                             env=ENV, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and first.poll() is None and not read_metrics(run):
            time.sleep(0.1)
        assert read_metrics(run), "the first run did not start"
        # The second run and the resume are the same commands run in this process (another process than the
        # holder's, without an interpreter start each).
        commands = [lambda: ppo_cartpole.main([*flags, "--seed", "1", "--run-dir", str(run)]),
                    lambda: main(["resume", str(run), "--quiet", "--no-compile-cache"])]
        for command in commands:
            capsys.readouterr()
            try:
                status = command()
            except SystemExit as exit_:
                status = exit_.code
            err = capsys.readouterr().err
            assert status == 2, err[-2000:]
            assert "is in use by another run" in err and f":{first.pid}," in err, err
            assert "Traceback" not in err
        assert first.poll() is None  # undisturbed
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=120)
        assert first.returncode == 75, err[-2000:]
    finally:
        first.kill()


def _record(run, **record):
    run.mkdir(exist_ok=True)
    (run / LOCK_FILE).write_text(json.dumps({"started": "2026-12-03T05:00:00+00:00", "argv": ["rljax", "train"],
                                             "token": "t", **record}) if record else "")


def test_describe_holder_tells_a_live_run_from_a_finished_or_killed_one(tmp_path):
    run = tmp_path / "run"
    _record(run, host=socket.gethostname(), pid=os.getpid())
    assert describe_holder(run) == (f"still running ({socket.gethostname()}:{os.getpid()}, started "
                                    f"2026-12-03T05:00:00+00:00, command: rljax train)")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    _record(run, host=socket.gethostname(), pid=int(dead.stdout))
    assert describe_holder(run) is None   # killed without releasing: nothing runs there
    _record(run, host="node-17.cluster", pid=4242)
    assert describe_holder(run).startswith("held by node-17.cluster:4242, started")   # cannot be told from here
    _record(run)
    assert describe_holder(run) is None and describe_holder(tmp_path / "nowhere") is None
    with RunLock(run):   # describing never takes the lock
        assert describe_holder(run).startswith("still running")


def test_is_held_tells_a_live_holder_from_a_record_left_behind(tmp_path):
    run_dir = tmp_path / "run"
    assert not is_held(run_dir)  # no lock file
    lock = RunLock(run_dir).acquire()
    assert is_held(run_dir) and is_held(run_dir)  # probing never takes the lock
    lock.release()
    assert not is_held(run_dir)
    (run_dir / LOCK_FILE).write_text('{"host": "elsewhere", "pid": 1}\n')  # a record with no holder behind it
    assert not is_held(run_dir)
