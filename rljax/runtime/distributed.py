"""Several processes (hosts) as one run, on JAX's multi-controller runtime.

A multi-host run is P copies of the same command, one per host (or per GPU), joined by
``jax.distributed.initialize``: every process sees the devices of all of them (``jax.devices()``),
its own ones are ``jax.local_devices()``, and one compiled program spans them all with XLA's
collectives between hosts (NCCL on GPUs, gloo on CPUs). rljax uses that runtime as it is and adds
what a training run needs on top:

* :func:`initialize_from_env`: joins the job when the environment says the command is one process of
  several: ``rljax launch`` (``RLJAX_COORDINATOR``, ``RLJAX_NUM_PROCESSES``, ``RLJAX_PROCESS_ID``),
  a Kubernetes Indexed Job or JobSet (the same three variables, set in the manifest: ``deploy/``),
  or SLURM ``srun`` / Open MPI ``mpirun`` with more than one task (JAX's own cluster detection).
* Process 0 is the *leader*: it alone writes the run directory and checkpoints. Every process
  computes the same metrics (they are reductions over all devices), so the leader's rows are the
  run's rows.
* :func:`agree`: at every chunk boundary the processes exchange a few numbers (a stop request, the
  leader's clock) so all of them take the same decisions (stop, save, evaluate) at the same chunk.
* :func:`fetch`, :func:`broadcast_json`, :func:`broadcast_arrays`, :func:`allgather_json`: moving
  host values between processes through the same collectives.

With one process every function here is the identity or a local operation: the single-host code
path is the multi-host one with ``P = 1``.

Environment variables read by :func:`initialize_from_env`:

==============================  =====================================================================
``RLJAX_COORDINATOR``           ``host:port`` of process 0's coordinator service
``RLJAX_NUM_PROCESSES``         P, the number of processes in the job
``RLJAX_PROCESS_ID``            this process's index, ``0 .. P-1``
``RLJAX_DEVICES_PER_PROCESS``   CPU only: the fake CPU devices each process makes (default 1)
``RLJAX_HEARTBEAT_TIMEOUT_S``   seconds without a heartbeat before a process counts as dead (30)
``RLJAX_INIT_TIMEOUT_S``        seconds to wait for every process to join (300)
``RLJAX_DISTRIBUTED``           ``auto`` (default): join when one of the above says so; ``off``:
                                never (a single-process command inside a multi-task allocation)
==============================  =====================================================================
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

__all__ = ["PeerLostError", "STOP_REQUEST", "GLOO_NOISE", "without_lines", "initialize_from_env", "launched_as_leader", "is_initialized", "process_index", "process_count",
           "is_leader", "Agreement", "agree", "fetch", "put", "broadcast_json", "broadcast_arrays", "allgather_json",
           "allgather_floats",
           "process_record", "is_peer_failure", "DEFAULT_HEARTBEAT_TIMEOUT_S"]

DEFAULT_HEARTBEAT_TIMEOUT_S = 30
"""Seconds without a heartbeat before JAX's coordination service declares a process dead and ends
the others (JAX's own default is 100 s)."""

_STATE: dict[str, Any] = {"initialized": False, "info": None}


class PeerLostError(RuntimeError):
    """Another process of a multi-host run died or became unreachable mid-run."""


def _int_env(env: Mapping[str, str], name: str, default: int | None = None) -> int | None:
    text = env.get(name)
    if text is None or text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not an integer") from None


def _cluster_request(env: Mapping[str, str]) -> dict[str, Any] | None:
    """What the environment asks for: None (a single process), or the arguments of
    ``jax.distributed.initialize`` (empty for JAX's own cluster detection)."""
    mode = env.get("RLJAX_DISTRIBUTED", "auto").lower()
    if mode not in ("auto", "off"):
        raise ValueError(f"RLJAX_DISTRIBUTED={mode!r}: expected 'auto' or 'off'")
    if mode == "off":
        return None
    num = _int_env(env, "RLJAX_NUM_PROCESSES")
    if num is not None:
        pid = _int_env(env, "RLJAX_PROCESS_ID")
        coordinator = env.get("RLJAX_COORDINATOR")
        if num < 1:
            raise ValueError(f"RLJAX_NUM_PROCESSES={num} must be >= 1")
        if num == 1:
            return None
        if pid is None or not 0 <= pid < num:
            raise ValueError(f"RLJAX_PROCESS_ID={env.get('RLJAX_PROCESS_ID')!r}: with RLJAX_NUM_PROCESSES={num} "
                             f"it must be an integer in 0..{num - 1}")
        if not coordinator or ":" not in coordinator:
            raise ValueError(f"RLJAX_COORDINATOR={coordinator!r}: expected host:port of process 0")
        return {"coordinator_address": coordinator, "num_processes": num, "process_id": pid}
    # SLURM's srun (one task per process) and Open MPI's mpirun: JAX detects the cluster itself.
    if (_int_env(env, "SLURM_NTASKS", 1) or 1) > 1 and "SLURM_STEP_ID" in env:
        return {}
    if (_int_env(env, "OMPI_COMM_WORLD_SIZE", 1) or 1) > 1:
        return {}
    return None


def initialize_from_env(env: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """Joins the multi-process job the environment describes, before JAX starts its backend.

    Call it first thing in a command's ``main`` (the experiment modules and ``rljax`` do). With no
    multi-process environment it does nothing and returns None. On a CPU it selects gloo
    collectives and makes ``RLJAX_DEVICES_PER_PROCESS`` CPU devices per process.

    Returns:
        None for a single process, else ``{"process_index", "process_count", "local_devices",
        "devices"}``.

    Raises:
        ValueError: the environment variables are inconsistent (the message names them).
        RuntimeError: JAX's backend already started (too late to join a job).
    """
    import jax
    from jax._src import xla_bridge

    env = os.environ if env is None else env
    if _STATE["initialized"]:
        return _STATE["info"]
    request = _cluster_request(env)
    if request is None:
        return None
    if xla_bridge.backends_are_initialized():
        raise RuntimeError("this process is one of several (RLJAX_*/SLURM/MPI environment), but JAX's backend "
                           "already started: call rljax.runtime.distributed.initialize_from_env() before using JAX")
    per_process = _int_env(env, "RLJAX_DEVICES_PER_PROCESS", 1)
    if per_process < 1:
        raise ValueError(f"RLJAX_DEVICES_PER_PROCESS={per_process} must be >= 1")
    platforms = env.get("JAX_PLATFORMS", "")
    if platforms in ("", "cpu") or platforms.startswith("cpu"):
        # Harmless where the platform turns out to be a GPU: these settings only shape the CPU client.
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        if per_process > 1 and "xla_force_host_platform_device_count" not in env.get("XLA_FLAGS", ""):
            jax.config.update("jax_num_cpu_devices", per_process)
    if jax.config.jax_cpu_collectives_implementation == "gloo":
        # gloo's C++ prints "[Gloo] Rank N is connected to M peer ranks ..." to stdout whenever a
        # program first connects a set of devices, at any point of the run: filtered until exit.
        stack = contextlib.ExitStack()
        stack.enter_context(without_lines(1, GLOO_NOISE))
        atexit.register(stack.close)
    jax.distributed.initialize(
        **request,
        initialization_timeout=_int_env(env, "RLJAX_INIT_TIMEOUT_S", 300),
        heartbeat_timeout_seconds=_int_env(env, "RLJAX_HEARTBEAT_TIMEOUT_S", DEFAULT_HEARTBEAT_TIMEOUT_S))
    _STATE["initialized"] = True
    _STATE["info"] = {"process_index": jax.process_index(), "process_count": jax.process_count(),
                      "local_devices": jax.local_device_count(), "devices": jax.device_count()}
    return _STATE["info"]


GLOO_NOISE = b"[Gloo] "
"""How the lines start that gloo prints to the process's stdout for every rank it connects."""


@contextlib.contextmanager
def without_lines(fd: int, prefix: bytes) -> Iterator[None]:
    """Drops the lines starting with ``prefix`` that anything in this process (Python or native
    code) writes to the file descriptor ``fd`` inside the block; every other byte goes through.

    ``fd`` is pointed at a pipe whose reader thread forwards what it reads to the original, whole
    lines at a time; on exit the original is restored and the thread drains the pipe first. (A
    process killed outright loses what the thread had not forwarded yet.)
    """
    stream = {1: sys.stdout, 2: sys.stderr}.get(fd)
    if stream is not None:
        stream.flush()
    saved = os.dup(fd)
    read_end, write_end = os.pipe()
    os.dup2(write_end, fd)
    os.close(write_end)

    def forward() -> None:
        pending = b""
        with os.fdopen(read_end, "rb", buffering=0) as pipe:
            while chunk := pipe.read(65536):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                kept = b"".join(line + b"\n" for line in lines if not line.startswith(prefix))
                if kept:
                    os.write(saved, kept)
        if pending and not pending.startswith(prefix):
            os.write(saved, pending)

    thread = threading.Thread(target=forward, name="rljax-output-filter", daemon=True)
    thread.start()
    try:
        yield
    finally:
        if stream is not None:
            stream.flush()
        os.dup2(saved, fd)  # closes the pipe's last write end: the thread reads to its end and stops
        thread.join(timeout=5.0)
        os.close(saved)


def launched_as_leader(env: Mapping[str, str] | None = None) -> bool:
    """Whether this process will be process 0 of its job (or is alone), read from the environment
    before JAX starts (for what a command prints before joining the job)."""
    env = os.environ if env is None else env
    for name in ("RLJAX_PROCESS_ID", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"):
        if env.get(name, "0") not in ("", "0"):
            return False
    return True


def is_initialized() -> bool:
    """Whether this process joined a multi-process job (:func:`initialize_from_env`)."""
    return bool(_STATE["initialized"])


def process_index() -> int:
    """This process's index in the job (0 for a single process)."""
    import jax

    return jax.process_index()


def process_count() -> int:
    """The number of processes in the job (1 for a single process)."""
    import jax

    return jax.process_count()


def is_leader() -> bool:
    """Whether this process writes the run directory (process 0)."""
    return process_index() == 0


def _allgather(x: np.ndarray) -> np.ndarray:
    """Every process's ``x`` (same shape and dtype everywhere), stacked: ``[P, ...]``."""
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(np.asarray(x)))


class Agreement(NamedTuple):
    """What :func:`agree` returns: identical on every process.

    Attributes:
        signum: the first stop signal received over all processes since the last agreement (0: none).
        process: the index of the process that received it (0 when none did).
        clock: the leader's run clock.
        times: ``[P, K]`` float64, row ``p`` the ``times`` process ``p`` passed (``[1, K]`` with
            one process; ``[P, 0]`` when none were passed).
    """

    signum: int
    process: int
    clock: float
    times: np.ndarray


def agree(signum: int, leader_clock: float, times: Sequence[float] = ()) -> Agreement:
    """The processes' common view at a chunk boundary (one small all-gather; a collective: every
    process calls it at the same points, with ``times`` of the same length).

    Args:
        signum: the stop signal this process received since the last agreement (0: none).
        leader_clock: this process's run clock (only the leader's is used).
        times: a few seconds this process measured (the loop's per-process chunk timings, from
            which :mod:`rljax.training.hooks.stragglers` names a slow process).

    Returns:
        The :class:`Agreement`. With one process: the inputs.
    """
    mine = np.asarray(times, np.float64).reshape(1, -1)
    if process_count() == 1:
        return Agreement(signum, 0, leader_clock, mine)
    # float32: collectives without jax_enable_x64 move 32-bit values (the clock counts from the
    # run's start: its resolution is still about 5 ms after a day, enough for a save cadence).
    rows = _allgather(np.asarray([float(signum), float(leader_clock), *mine[0]], np.float32))
    stopped = [i for i in range(rows.shape[0]) if rows[i, 0] != 0]
    first = stopped[0] if stopped else 0
    return Agreement(int(rows[first, 0]), first, float(rows[0, 1]), rows[:, 2:].astype(np.float64))


def fetch(tree: Any) -> Any:
    """``tree``'s arrays as host numpy arrays, whole, on every process.

    ``jax.device_get`` where every array is addressable here; otherwise (arrays spanning
    processes) an all-gather, which every process must call in the same order.
    """
    import jax

    leaves = jax.tree.leaves(tree)
    if all(getattr(x, "is_fully_addressable", True) for x in leaves):
        return jax.device_get(tree)
    from jax.experimental import multihost_utils

    return multihost_utils.process_allgather(tree, tiled=True)


def put(x: Any, sharding: Any) -> Any:
    """``jax.device_put(x, sharding)`` of a host array that every process holds whole.

    For a sharding that spans processes each process places its own shards from its copy, with no
    collective (``jax.device_put`` would first check, by an all-gather, that the copies agree).
    """
    import jax

    if getattr(sharding, "is_fully_addressable", True):
        return jax.device_put(x, sharding)
    if hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):  # typed keys: their data
        return jax.random.wrap_key_data(put(jax.random.key_data(x), sharding), impl=jax.random.key_impl(x))
    x = np.asarray(x)
    return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])


def broadcast_json(obj: Any) -> Any:
    """The leader's ``obj`` (anything ``json`` round-trips), on every process."""
    if process_count() == 1:
        return obj
    data = np.frombuffer(json.dumps(obj).encode(), np.uint8) if is_leader() else np.zeros(0, np.uint8)
    size = int(_allgather(np.asarray([data.size], np.int32))[0, 0])
    buf = np.zeros(size, np.uint8)
    if is_leader():
        buf[:] = data
    return json.loads(bytes(_broadcast(buf)).decode())


def _broadcast(x: np.ndarray) -> np.ndarray:
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.broadcast_one_to_all(x, is_source=is_leader()))


def broadcast_arrays(arrays: Sequence[np.ndarray] | None, like: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The leader's ``arrays`` on every process; the others pass None and get arrays shaped ``like``."""
    if process_count() == 1:
        return list(arrays)
    out = []
    for i, template in enumerate(like):
        x = np.asarray(arrays[i]) if is_leader() else np.zeros(template.shape, template.dtype)
        if x.dtype == np.bool_:  # collectives move numbers
            out.append(_broadcast(x.astype(np.uint8)).astype(np.bool_))
        else:
            out.append(_broadcast(x).astype(x.dtype, copy=False))
    return out


def allgather_floats(values: Sequence[float]) -> np.ndarray:
    """Every process's ``values`` (the same count on every process), ``[P, K]`` float64, in process
    order: one all-gather of a fixed shape, compiled once, for numbers exchanged often (moved as
    float32, as collectives move them without ``jax_enable_x64``: integers are exact below 2**24)."""
    mine = np.asarray(values, np.float32).reshape(-1)
    if process_count() == 1:
        return mine[None].astype(np.float64)
    return _allgather(mine).astype(np.float64)


def allgather_json(obj: Any) -> list[Any]:
    """Every process's ``obj`` (JSON), in process order, on every process."""
    if process_count() == 1:
        return [obj]
    data = np.frombuffer(json.dumps(obj).encode(), np.uint8)
    sizes = _allgather(np.asarray([data.size], np.int32))[:, 0]
    buf = np.zeros(int(sizes.max()), np.uint8)
    buf[:data.size] = data
    gathered = _allgather(buf)
    return [json.loads(bytes(gathered[i, :int(n)]).decode()) for i, n in enumerate(sizes)]


def process_record() -> list[dict[str, Any]]:
    """One entry per process for the manifest: index, host name, pid and devices."""
    import jax

    mine = {"process_index": process_index(), "host": socket.gethostname(), "pid": os.getpid(),
            "devices": [str(d) for d in jax.local_devices()]}
    return allgather_json(mine)


_PEER_FAILURE_MARKS = ("Connection closed by peer", "Connection reset by peer", "Gloo", "heartbeat",
                       "CoordinationService", "NCCL", "DEADLINE_EXCEEDED", "Socket closed",
                       "Broken pipe")


def is_peer_failure(err: BaseException) -> bool:
    """Whether ``err`` (raised by a collective in a multi-process run) means another process is gone."""
    if process_count() == 1:
        return False
    text = f"{type(err).__name__}: {err}"
    return any(mark.lower() in text.lower() for mark in _PEER_FAILURE_MARKS)


def raise_if_peer_failure(err: BaseException) -> None:
    """Raises :class:`PeerLostError` from ``err`` when it means another process is gone."""
    if isinstance(err, PeerLostError):
        raise err
    if is_peer_failure(err):
        raise PeerLostError(
            f"process {process_index()} of {process_count()} lost contact with the other processes of this run "
            f"(one died, was killed or became unreachable): {str(err).splitlines()[0][:300]}. The newest "
            f"committed checkpoint is intact; restart the whole job (rljax supervise restarts it) to resume") from err


STOP_REQUEST = 1000
"""The stop code :func:`agree` carries for a stop asked through the run directory (``rljax stop``);
not a signal number."""


def signal_name(signum: int) -> str:
    """``SIGTERM`` for 15, etc.; ``rljax stop`` for :data:`STOP_REQUEST`."""
    if signum == STOP_REQUEST:
        return "rljax stop"
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
