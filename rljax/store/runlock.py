"""One writer per run directory: an OS file lock plus a record of who holds it.

Two runs on one ``--run-dir`` (or ``rljax resume D`` while D is still training) would interleave
their metrics and mix their checkpoints. :class:`RunLock` is taken before anything is written in
the run directory and held until the run has closed its files::

    with RunLock(run_dir):
        ...  # the only process writing run_dir

The lock is ``fcntl.flock`` on ``RUN_DIR/.lock``, so the kernel releases it when the holder dies
in any way (SIGKILL and power loss included: a lock is never left held by a dead process). The same
file holds a JSON record of the holder (host, pid, start time, command line, a random token): it
names the holder when the lock is refused, and it is emptied on a clean release. A record found
non-empty by a process that gets the lock was therefore left by a holder that did not release
(killed, crashed, or a host that went away): it is taken over with one warning naming that holder.

Within one process the lock is re-entrant in the thread that holds it (a sweep holds its
directory while its population's :func:`rljax.training.loop.train` takes it again; ``train`` called twice
one after the other takes and releases it twice); another thread of the same process is refused
like another process. A child made by ``fork`` does not hold its parent's lock: its copies are
closed in the child (the parent keeps the lock), and a ``release()`` there does nothing.
Processes started with ``subprocess``/``exec`` never inherit the lock's file descriptor.

Shared filesystems: on Linux, ``flock`` on NFS is carried out with the server's byte-range locks,
so it excludes processes on other hosts when the filesystem is mounted with locking (the default;
not with ``nolock`` or ``local_lock=flock|all``). A host that dies keeps its lock until the
server's lease expires (about 90 s for NFSv4). Lustre needs the ``flock`` mount option
(``localflock`` only excludes processes on the same node). Where the filesystem refuses locks,
acquiring fails with a :class:`RunLockError` naming the error; ``RLJAX_RUN_LOCK=0`` in the
environment then turns the lock off (the run is unprotected). A record from another host whose OS
lock is free is trusted to be stale (the OS lock decides) and taken over with a warning that says
to check that host if a mount without shared locks is possible.
"""

from __future__ import annotations

import datetime
import errno
import fcntl
import functools
import inspect
import json
import os
import pathlib
import secrets
import shlex
import socket
import sys
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["RunLock", "RunLockError", "RunLockedError", "RunLockWarning", "LOCK_FILE", "DISABLE_ENV",
           "read_holder", "describe_holder", "is_held", "holds_run_dir"]

F = TypeVar("F", bound=Callable[..., Any])

LOCK_FILE = ".lock"
"""The lock file's name inside the run directory."""

DISABLE_ENV = "RLJAX_RUN_LOCK"
"""Environment variable: ``0`` turns run-directory locking off (filesystems without file locks)."""


class RunLockError(RuntimeError):
    """The run directory's lock cannot be taken (the directory or its lock file is unusable)."""


class RunLockedError(RunLockError):
    """Another live process (or another thread of this one) holds the run directory."""

    def __init__(self, message: str, run_dir: str, holder: dict[str, Any] | None):
        super().__init__(message)
        self.run_dir = run_dir
        self.holder = holder


class RunLockWarning(UserWarning):
    """A lock record left behind by a holder that did not release was taken over."""


class _Held:
    """This process's hold on one lock file: shared by every :class:`RunLock` of that directory."""

    def __init__(self, fd: int, record: dict[str, Any], thread: int):
        self.fd: int | None = fd
        self.record = record
        self.thread = thread
        self.count = 0


_HELD: dict[str, _Held] = {}
_HELD_LOCK = threading.Lock()


def _forget_after_fork() -> None:
    """In a forked child: close the inherited lock descriptors (the parent keeps its locks: a flock
    ends only when every descriptor of it is closed) and forget them."""
    for held in _HELD.values():
        if held.fd is not None:
            try:
                os.close(held.fd)
            except OSError:
                pass
            held.fd = None
        held.count = 0
    _HELD.clear()
    global _HELD_LOCK
    _HELD_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def _describe(record: dict[str, Any] | None) -> str:
    """``host:pid, started <time>, command: <argv>`` from a holder record (missing parts say so)."""
    if not record:
        return "an unknown holder (its record is empty or unreadable)"
    host = record.get("host", "?")
    pid = record.get("pid", "?")
    started = record.get("started") or "at an unknown time"
    argv = record.get("argv")
    command = shlex.join(str(a) for a in argv) if isinstance(argv, list) else "unknown"
    return f"{host}:{pid}, started {started}, command: {command}"


def describe_holder(run_dir: str | os.PathLike) -> str | None:
    """Who holds (or held, without releasing) ``run_dir``, for a message: ``"still running (host:pid,
    started ..., command: ...)"`` when the holder is a live process on this host, ``"held by host:pid
    ..."`` when it cannot be told from here (another host, or a holder that was killed), None when the
    lock file holds no record (no run is in it, or its last one ended cleanly). Reads only; never locks."""
    record = read_holder(run_dir)
    if not record:
        return None
    pid = record.get("pid")
    if record.get("host") == socket.gethostname() and isinstance(pid, int):
        return f"still running ({_describe(record)})" if _pid_alive(pid) else None
    return f"held by {_describe(record)}"


def _parse_record(data: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """``(record, problem)``: the holder record, or None and why it cannot be used (None, None if empty)."""
    text = data.decode("utf-8", errors="replace").strip()
    if not text:
        return None, None
    try:
        record = json.loads(text)
    except ValueError:
        return None, f"not JSON: {text[:80]!r}"
    if not isinstance(record, dict) or not isinstance(record.get("pid"), int) or not isinstance(
            record.get("host"), str):
        return None, f"not a holder record (needs host and pid): {text[:80]!r}"
    return record, None


def _read_fd(fd: int) -> bytes:
    chunks = []
    offset = 0
    while True:
        data = os.pread(fd, 65536, offset)
        if not data:
            return b"".join(chunks)
        chunks.append(data)
        offset += len(data)


def read_holder(run_dir: str | os.PathLike) -> dict[str, Any] | None:
    """The holder record in ``run_dir``'s lock file, or None (no lock file, empty, or unreadable).

    A record does not say that the lock is held: a holder that was killed leaves its record behind.
    """
    try:
        data = (pathlib.Path(run_dir) / LOCK_FILE).read_bytes()
    except OSError:
        return None
    return _parse_record(data)[0]


def is_held(run_dir: str | os.PathLike) -> bool:
    """Whether a live process holds ``run_dir``'s lock (this one included, through another open file
    description): a non-blocking ``flock`` on its lock file fails. Works across hosts where the
    filesystem shares locks; False without a lock file; True where the filesystem refuses locks
    (nothing can be told, so the record is believed). Never leaves a lock taken."""
    try:
        fd = os.open(pathlib.Path(run_dir) / LOCK_FILE, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # BlockingIOError: held; any other: a filesystem without locks
        return True
    finally:
        os.close(fd)  # also releases a lock taken here
    return False


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def _now_iso() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


class RunLock:
    """Exclusive use of a run directory by this process (see the module docstring).

    Args:
        run_dir: the run directory; created if missing (the lock file lives in it). None gives a
            lock that does nothing (a run kept in memory has no directory to protect).
        argv: the command line recorded for the holder (default ``sys.argv``).

    Use as a context manager, or call :meth:`acquire` and :meth:`release` in pairs (nested pairs in
    one thread are counted; the OS lock goes with the last release).

    Raises (from :meth:`acquire` and ``__enter__``):
        RunLockedError: a live process, or another thread of this process, holds the directory.
            The message names the directory, the holder's host, pid, start time and command, and
            what to do.
        RunLockError: the directory or its lock file cannot be used (not a directory, no
            permission, a filesystem without file locks); the message names the path and error.
    """

    def __init__(self, run_dir: str | os.PathLike | None, *, argv: list[str] | None = None):
        self.run_dir = None if run_dir is None else pathlib.Path(run_dir)
        self.argv = list(sys.argv if argv is None else argv)
        self._held: _Held | None = None
        self._depth = 0
        self._pid = os.getpid()

    @property
    def path(self) -> pathlib.Path | None:
        """The lock file (None for a lock without a directory)."""
        return None if self.run_dir is None else self.run_dir / LOCK_FILE

    @property
    def record(self) -> dict[str, Any] | None:
        """This process's holder record while the lock is held, else None."""
        return self._held.record if self._held is not None and self._held.fd is not None else None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock (False in a forked child)."""
        return self._depth > 0 and self._pid == os.getpid() and self.record is not None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def acquire(self) -> "RunLock":
        """Takes the lock (or counts one more hold in the holding thread). Never blocks."""
        if self.run_dir is None or os.environ.get(DISABLE_ENV, "1").strip() == "0":
            self._depth += 1
            return self
        if self._pid != os.getpid():  # this object was copied into a forked child
            self._held, self._depth, self._pid = None, 0, os.getpid()
        key = os.path.realpath(self.run_dir)
        with _HELD_LOCK:
            held = _HELD.get(key)
            if held is not None:
                if held.thread != threading.get_ident():
                    raise RunLockedError(
                        f"run directory {str(self.run_dir)!r} is in use by another thread of this process "
                        f"({_describe(held.record)}); one run directory takes one run at a time: wait for that "
                        f"run to finish or give this one another run directory", str(self.run_dir), held.record)
            else:
                held = self._take(key)
                _HELD[key] = held
            held.count += 1
        self._held = held
        self._depth += 1
        return self

    def _take(self, key: str) -> _Held:
        """Opens and flocks the lock file, takes over a stale record, writes ours."""
        run_dir, path = self.run_dir, self.path
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as err:
            raise RunLockError(f"cannot open the lock file {str(path)!r} of run directory {str(run_dir)!r} "
                               f"({type(err).__name__}: {err.strerror or err}); the run directory must be a "
                               f"directory this user can write") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                record, _ = _parse_record(_read_fd(fd))
                raise RunLockedError(self._locked_message(record), str(run_dir), record) from None
            except OSError as err:
                code = errno.errorcode.get(err.errno, err.errno)
                raise RunLockError(
                    f"cannot lock {str(path)!r}: the filesystem refused a file lock ({code}: {err.strerror}); "
                    f"two runs on this directory would not be stopped. Mount it with locking (NFS without "
                    f"'nolock', Lustre with 'flock') or, at your own risk, set {DISABLE_ENV}=0 to run without "
                    f"the lock") from None
            previous, problem = _parse_record(_read_fd(fd))
            if previous is not None or problem is not None:
                warnings.warn(self._takeover_message(previous, problem), RunLockWarning, stacklevel=3)
            record = {"host": socket.gethostname(), "pid": os.getpid(), "started": _now_iso(),
                      "start_time": time.time(), "argv": self.argv, "cwd": os.getcwd(),
                      "run_dir": os.path.abspath(run_dir), "token": secrets.token_hex(16)}
            data = (json.dumps(record) + "\n").encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
            os.fsync(fd)
        except BaseException:
            os.close(fd)  # also releases the flock if it was taken
            raise
        return _Held(fd, record, threading.get_ident())

    def _locked_message(self, record: dict[str, Any] | None) -> str:
        run_dir = str(self.run_dir)
        text = f"run directory {run_dir!r} is in use by another run: {_describe(record)}."
        if record is None:
            return (text + f" Wait for that run to finish or stop it (`fuser -v {self.path}` shows its "
                    f"process), or choose another --run-dir.")
        pid, host = record.get("pid"), record.get("host")
        if pid == os.getpid() and host == socket.gethostname():
            return text + " That is this process: a run directory takes one run at a time."
        here = host == socket.gethostname()
        stop = f"`kill -TERM {pid}`" + ("" if here else f" on {host}")
        text += (f" Wait for it to finish, or stop it ({stop}: it saves a checkpoint and exits with status 75) "
                 f"and then continue it with `rljax resume {run_dir}`; or choose another --run-dir.")
        if not here:
            text += (f" If {host} is down, its lock on the shared filesystem is released when the server's "
                     f"lease expires (NFSv4: about 90 s).")
        return text

    def _takeover_message(self, previous: dict[str, Any] | None, problem: str | None) -> str:
        where = f"run directory {str(self.run_dir)!r}"
        if previous is None:
            return (f"taking over the lock of {where}: its lock file held an unreadable record ({problem}) and "
                    f"no process holds the lock")
        host, pid = previous.get("host"), previous.get("pid")
        who = _describe(previous)
        if host != socket.gethostname():
            return (f"taking over a lock on {where} left by {who}: no process holds it now, so that run ended "
                    f"without releasing it (killed, or its host went down). If that run could still be going "
                    f"(a filesystem mounted without shared locks, e.g. NFS 'nolock'), stop this one now")
        if _pid_alive(pid) and pid != os.getpid():
            return (f"taking over a lock on {where} left by {who}: no process holds it now (pid {pid} is "
                    f"alive, but it is another process that reused the id, or it closed the lock)")
        return f"taking over a stale lock on {where} left by {who}: that process is gone (killed or crashed)"

    def release(self) -> None:
        """Ends one hold; the last one empties the holder record and releases the OS lock.

        In a forked child, and for a lock without a directory, it only counts.
        """
        if self._depth <= 0:
            raise RuntimeError(f"RunLock({str(self.run_dir)!r}).release() without a matching acquire()")
        self._depth -= 1
        held = self._held
        if held is None or self._pid != os.getpid():
            return
        with _HELD_LOCK:
            if self._depth == 0:
                self._held = None
            if held.fd is None:  # forgotten after a fork
                return
            held.count -= 1
            if held.count > 0:
                return
            fd, held.fd = held.fd, None
            for key, value in list(_HELD.items()):
                if value is held:
                    del _HELD[key]
        try:
            record, _ = _parse_record(_read_fd(fd))
            if record is not None and record.get("token") == held.record["token"]:
                os.ftruncate(fd, 0)
            else:
                warnings.warn(f"the lock record of run directory {str(self.run_dir)!r} was replaced while this "
                              f"process held the lock (now: {_describe(record)}): another process wrote there, so "
                              f"the filesystem's locks are not shared (see rljax.store.runlock); check that directory",
                              RunLockWarning, stacklevel=2)
        except OSError:
            pass
        finally:
            os.close(fd)


def holds_run_dir(fn: F) -> F:
    """Decorates a function with a ``run_dir`` parameter so that each call holds that directory's
    :class:`RunLock` (none when ``run_dir`` is None) for as long as it runs::

        @holds_run_dir
        def train(config, env=None, env_params=None, *, run_dir=None, ...): ...
    """
    signature = inspect.signature(fn)
    if "run_dir" not in signature.parameters:
        raise TypeError(f"{fn.__qualname__} has no run_dir parameter to lock")

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        with RunLock(bound.arguments["run_dir"]):
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
