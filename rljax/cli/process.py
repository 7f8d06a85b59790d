"""A training run as a process: exit statuses, SIGTERM around training, compile cache, CPU devices.

The command line (``rljax``, experiment modules, sweeps) calls training through
:func:`call_training`, which maps each way a run can end to an exit status a supervisor
(:mod:`rljax.cli.supervise`) or a batch scheduler acts on:

======  ==========================================================================
status  meaning
======  ==========================================================================
0       finished
2       usage error: bad flag or config, used or locked run directory, nothing to resume
65      diverged (non-finite loss or state, not recovered)
70      devices out of sync (a data-parallel bug)
69      multi-process run: another process died or became unreachable; restart the whole job
74      I/O error (a full disk, a read-only file system); the newest checkpoint is intact
75      preempted (SIGTERM/SIGINT): checkpoint saved, resume it
======  ==========================================================================
"""

from __future__ import annotations

import os
import sys
from typing import Any

__all__ = ["EXIT_USAGE", "EXIT_DIVERGED", "EXIT_SOFTWARE", "EXIT_IO", "EXIT_PEER_LOST", "EXIT_INTERRUPTED",
           "EXIT_BROKEN_PIPE", "TRACEBACK_ENV",
           "call_training", "raised_outside_rljax",
           "enable_compilation_cache", "request_cpu_devices", "request_caller_thread_cpu_ops", "finished_run", "report_finished", "setting_up_line"]


EXIT_USAGE = 2
"""Exit status of a usage error: a bad flag or config, a used or locked run directory, nothing to resume."""
EXIT_DIVERGED = 65
"""Exit status (EX_DATAERR) of a run stopped because it diverged (non-finite loss or state)."""
EXIT_SOFTWARE = 70
"""Exit status (EX_SOFTWARE) of a data-parallel run whose devices fell out of sync, or of a run whose env
(or another piece of code outside rljax that it called) raised an error."""
EXIT_IO = 74
"""Exit status (EX_IOERR) of a run stopped by an I/O error (a full disk, a read-only file system)."""
EXIT_PEER_LOST = 69
"""Exit status (EX_UNAVAILABLE) of a process of a multi-process run that lost another process."""
EXIT_INTERRUPTED = 130
"""Exit status (128 + SIGINT, as a shell reports it) of a run interrupted by a second Ctrl-C without saving."""
EXIT_BROKEN_PIPE = 141
"""Exit status (128 + SIGPIPE, as a shell reports a tool the signal killed) of a command whose reader closed
its standard output (``rljax status DIR | head``)."""
TRACEBACK_ENV = "RLJAX_TRACEBACK"
"""Environment variable: ``1`` lets an error raised by an env or a hook propagate with its whole
traceback instead of the one line :func:`call_training` prints."""


def _os_error(err: BaseException) -> OSError | None:
    """The first :class:`OSError` in ``err``'s chain (Orbax wraps them), or None."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and not isinstance(err, (FileExistsError, FileNotFoundError)):
            return err
        err = err.__cause__ or err.__context__
    return None


def _library_dirs() -> tuple[str, ...]:
    """The directories of the code a traceback through rljax passes that is neither rljax nor the
    user's: JAX and the libraries rljax builds on, and Python's own."""
    import importlib.util
    import sysconfig

    dirs = [sysconfig.get_paths()["stdlib"]]
    for name in ("jax", "jaxlib", "flax", "optax", "chex", "numpy", "orbax", "ml_dtypes", "tensorboardX"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            dirs += list(spec.submodule_search_locations)
    return tuple(os.path.realpath(d) + os.sep for d in dirs)


def raised_outside_rljax(err: BaseException) -> list[tuple[str, int, str]] | None:
    """Where ``err`` came from when it was raised by code outside rljax that rljax called (a user's
    env, a gymnax or suite env, a hook): that code's frames ``(file, line, qualified function name)``,
    innermost last; None when rljax itself (or nothing outside it) raised it.

    The innermost frame of the traceback that is neither JAX's, another library's nor Python's decides:
    an rljax frame means rljax raised it (a config check, a bug), any other frame is the code it called.
    (JAX's traceback filtering, on by default, has already removed JAX's own frames.)
    """
    import traceback

    rljax_dir = os.path.realpath(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep
    libraries = _library_dirs()
    outside: list[tuple[str, int, str]] = []
    for frame, line in reversed(list(traceback.walk_tb(err.__traceback__))):
        name = frame.f_code.co_filename
        path = os.path.realpath(name)
        if path.startswith(rljax_dir):
            return outside[::-1] or None
        if not (path.startswith(libraries) or name.startswith("<")):
            outside.append((name, line, getattr(frame.f_code, "co_qualname", frame.f_code.co_name)))
    return None


def _failure_status(err: Exception, resume_hint: str) -> int | None:
    """Prints the one line for a failed run and returns its exit status (see :func:`call_training`);
    None for an error that should propagate with its traceback (a bug in rljax)."""
    from rljax.runtime.distributed import PeerLostError
    from rljax.store.checkpoint import NoCheckpointError
    from rljax.store.rundir import RunDirError
    from rljax.store.runlock import RunLockError
    from rljax.suites._adapter import SuiteNotInstalledError
    from rljax.training.hooks.health import DesyncError, NonFiniteError

    io = _os_error(err) if isinstance(err, (ValueError, OSError)) else None
    if io is not None:  # wherever it was raised: a full disk is fixed and resumed the same way
        print(f"error: I/O error: {io}.{resume_hint} once it is fixed (the newest committed checkpoint is "
              f"intact)", file=sys.stderr)
        return EXIT_IO
    from rljax.actorlearner.engine import ActorFailedError

    if isinstance(err, ActorFailedError):  # host envs that kept failing: the run saved what it had first
        print(f"error: {err}.{resume_hint} once the envs work again", file=sys.stderr)
        return EXIT_SOFTWARE
    outside = raised_outside_rljax(err)
    if outside is not None:
        if os.environ.get(TRACEBACK_ENV):
            return None
        file, line, function = outside[-1]
        relative = os.path.relpath(file)
        where = file if relative.startswith("..") else relative
        print(f"error: {function} ({where}:{line}) raised {type(err).__name__}: {err}\n(code outside rljax that the "
              f"run called: its env, or a hook; {TRACEBACK_ENV}=1 prints the whole traceback)", file=sys.stderr)
        return EXIT_SOFTWARE
    if isinstance(err, NonFiniteError):
        print(f"error: {err}", file=sys.stderr)
        return EXIT_DIVERGED
    if isinstance(err, DesyncError):
        print(f"error: {err}", file=sys.stderr)
        return EXIT_SOFTWARE
    if isinstance(err, PeerLostError):
        # Exit at once: JAX's shutdown would wait at a barrier for the lost process until its
        # heartbeat times out, then abort.
        print(f"error: {err}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(EXIT_PEER_LOST)
    if isinstance(err, (RunLockError, RunDirError, NoCheckpointError, FileExistsError, FileNotFoundError,
                        SuiteNotInstalledError, ValueError)):
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    return None


def _hold_off_sigterm(signum: int, frame: Any) -> None:
    """SIGTERM handler of the command line around and after training: the run's own guard turns
    SIGTERM into a stop while it trains; before and after, the signal changes nothing."""


def _ignore_sigterm_at_exit() -> None:
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def call_training(run: Any, run_dir: Any) -> tuple[Any, int | None]:
    """Calls ``run()`` and maps its outcome to an exit status for the command line.

    Returns:
        ``(result, None)`` when training finished; ``(None, status)`` after printing one line for
        a usage error (2: bad config, used or locked directory, nothing to resume), a diverged run
        (65), devices out of sync or an error raised by code outside rljax that the run called, its env
        or a hook (70, naming the function, file and line: :func:`raised_outside_rljax`; with
        ``RLJAX_TRACEBACK=1`` such errors propagate with their traceback instead) or an I/O error
        such as a full disk (74) or a second Ctrl-C, which stops without saving (130); ``(result, 75)``
        after printing how to resume a preempted run. From the moment training starts, SIGTERM
        is held off until the process exits (the run's own guard turns it into a stop; once the
        run has returned, a no-op handler stays installed): a SIGTERM after the final or the stop's checkpoint
        committed cannot turn status 0 or 75 into death by signal.
    """
    import signal
    import threading

    from rljax.store.checkpoint import PREEMPTED_EXIT_CODE

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _hold_off_sigterm) if main_thread else None
    resume_hint = f" Resume with: {resume_command(run_dir)}" if run_dir is not None else ""
    try:
        out = run()
    except Exception as err:
        status = _failure_status(err, resume_hint)
        if status is None:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
            raise
        return None, status
    except KeyboardInterrupt:  # Ctrl-C twice: the run stops without saving; a traceback through JAX says nothing
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        print(f"interrupted (Ctrl-C twice): stopped without saving; the newest committed checkpoint, if any, is "
              f"intact.{resume_hint}", file=sys.stderr)
        return None, EXIT_INTERRUPTED
    except BaseException:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        raise
    # The run finished or stopped and its checkpoint committed: the process only has to exit now, so
    # a SIGTERM during the exit (interpreter shutdown can take a while) must not turn its status
    # into death by signal. The no-op handler stays installed (unlike SIG_IGN, a handler is not
    # inherited by programs this process starts later); Python drops its handlers during
    # finalisation, so at exit SIGTERM is ignored outright.
    if main_thread:
        import atexit

        atexit.unregister(_ignore_sigterm_at_exit)
        atexit.register(_ignore_sigterm_at_exit)
    result = out[0] if isinstance(out, tuple) else out
    if result.preempted:
        import jax

        if jax.process_index() == 0:  # a multi-process run: process 0 speaks for all of them
            print(f"preempted ({result.preempted}); exit status {PREEMPTED_EXIT_CODE}.{resume_hint}", file=sys.stderr)
        return out, PREEMPTED_EXIT_CODE
    return out, None


def resume_command(run_dir: str | os.PathLike) -> str:
    """How to resume ``run_dir``: ``rljax resume RUN_DIR``, run by every process of a multi-process
    job (as this job was started, e.g. ``rljax launch -n P -- ...``)."""
    from rljax.runtime.distributed import is_initialized, process_count

    if not is_initialized() or process_count() == 1:
        return f"rljax resume {run_dir}"
    n = process_count()
    return f"rljax resume {run_dir} in each of the job's {n} processes (e.g. rljax launch -n {n} -- rljax resume {run_dir})"


def enable_compilation_cache(path: str | None = None) -> str:
    """Turns on JAX's persistent compilation cache (a repeat run's compile drops from seconds to
    a fraction of a second). Experiment entry points call this; the library never does.

    Without ``path``, a cache directory the process has set already (``JAX_COMPILATION_CACHE_DIR``,
    a test harness, a notebook) is kept: JAX folds the directory into its cache keys, so repointing it
    would make every program in this process miss the cache it was given. Returns the directory in use."""
    import jax

    if path is None and jax.config.jax_compilation_cache_dir:
        path = jax.config.jax_compilation_cache_dir
    path = path or os.path.join(os.path.expanduser("~"), ".cache", "rljax", "xla")
    os.makedirs(path, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path


def request_cpu_devices(num_devices: int) -> None:
    """Makes ``num_devices`` CPU devices available when JAX has not started yet and the CPU is the
    platform (fake devices for data-parallel runs and tests on one machine).

    When the environment says this process is one of several (``rljax launch``, SLURM, a
    Kubernetes job: :func:`rljax.runtime.distributed.initialize_from_env`), it joins that job instead;
    ``num_devices`` then counts the devices of all processes.
    """
    import jax
    from jax._src import xla_bridge

    from rljax.runtime.distributed import initialize_from_env

    if initialize_from_env() is not None:
        return
    if num_devices <= 1 or xla_bridge.backends_are_initialized():
        return
    if "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", ""):
        return
    jax.config.update("jax_num_cpu_devices", num_devices)


CALLER_THREAD_CPU_OPS = "--xla_cpu_multi_thread_eigen=false"
"""The XLA flag :func:`request_caller_thread_cpu_ops` adds."""


def request_caller_thread_cpu_ops() -> bool:
    """Has XLA's CPU backend run each computation's matrix and convolution kernels on the thread
    that runs the computation, not in the process's shared intra-op thread pool
    (:data:`CALLER_THREAD_CPU_OPS` added to ``XLA_FLAGS``), when JAX has not started yet and
    ``XLA_FLAGS`` does not already set ``xla_cpu_multi_thread_eigen`` (a user's choice wins).

    ``rljax train`` does this for the actor-learner path: there an actor thread's small policy calls
    and the learner thread's update run at the same time, and in the shared pool the policy's kernels
    wait behind the update's (measured on 2 cores: the actor took twice as long a rollout while the
    learner ran). With the flag each thread computes on its own core. Returns whether it was added.
    """
    from jax._src import xla_bridge

    current = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_multi_thread_eigen" in current or xla_bridge.backends_are_initialized():
        return False
    os.environ["XLA_FLAGS"] = " ".join(filter(None, [current, CALLER_THREAD_CPU_OPS]))
    return True


def finished_run(run_dir: str | os.PathLike, config: Any) -> str | None:
    """What to tell a user who resumes a run that has nothing left to train, or None.

    A resume continues from the newest checkpoint; when that checkpoint is the run's last chunk under
    ``config.total_timesteps`` (as :func:`rljax.training.program.resume_plan` cuts it), the resume would compile
    the program only to run no chunk. Only the checkpoint's JSON meta is read: nothing is compiled
    or restored. Returns the message (the run's steps, and how to extend it with
    ``--total-timesteps``), or None when there is something to train (or no checkpoint).

    Raises:
        ValueError: ``config.total_timesteps`` ends before what the run has already trained
            (:func:`rljax.training.program.check_not_shrunk`).
    """
    from rljax.store.rundir import newest_checkpoint_meta
    from rljax.training.program import check_not_shrunk, resume_plan

    newest = newest_checkpoint_meta(run_dir)
    if newest is None:
        return None
    step, meta = newest
    if "plan" not in meta and "updates" in meta:  # a host-env run (the actor-learner path): updates, no chunk plan
        try:
            updates, env_steps = int(meta["updates"]), int(meta["env_steps"])
        except (TypeError, ValueError):
            return None
        if updates < 1 or updates < config.total_timesteps // max(1, env_steps // updates):
            return None
        return _finished_message(run_dir, step, env_steps, config.total_timesteps)
    try:
        saved = meta["plan"]
        plan = resume_plan(config.total_timesteps, int(saved["env_steps_per_update"]), int(saved["updates_per_chunk"]))
        done_chunks, env_steps = int(meta["chunk_index"]) + 1, int(meta["env_steps"])
    except (KeyError, TypeError, ValueError):
        return None  # an unexpected meta: let the resume itself decide (and say what is wrong)
    check_not_shrunk(plan, done_chunks, env_steps, str(run_dir))
    if done_chunks < plan.num_chunks:
        return None
    return _finished_message(run_dir, step, env_steps, config.total_timesteps)


def _finished_message(run_dir: Any, step: int, env_steps: int, total: int) -> str:
    return (f"{run_dir} has finished: its newest checkpoint (step {step}) is at {env_steps:,} env steps, the end of "
            f"a run of total_timesteps={total:,}; nothing to train, nothing compiled. To train it "
            f"further, extend it: rljax resume {run_dir} --total-timesteps N (N > {env_steps:,})")


def report_finished(run_dir: str | os.PathLike, config: Any, parser: Any = None) -> bool:
    """Prints :func:`finished_run`'s message (in process 0 only, in a multi-process job) and returns True
    when ``run_dir`` has nothing left to train (the command then exits 0 without compiling); False otherwise.
    A total that would shorten the run is ``parser.error`` (exit 2) when a parser is given, else the
    ``ValueError`` of :func:`finished_run`."""
    from rljax.runtime.distributed import launched_as_leader

    try:
        message = finished_run(run_dir, config)
    except ValueError as err:
        if parser is None:
            raise
        parser.error(str(err))
    if message is not None and launched_as_leader():  # every process of a job reads it; process 0 says it
        print(message, flush=True)
    return message is not None


def setting_up_line(config: Any, run_dir: Any, sweep: bool = False) -> str:
    """The command line's first line, printed before JAX is even imported: what is being set up and
    where its files go (importing JAX and building the initial state take seconds before the loop's
    own line, the plan and then the compile, can say more)."""
    what = f"a {type(config).__name__.removesuffix('Config')} sweep" if sweep else \
        type(config).__name__.removesuffix("Config")
    where = f"run directory {run_dir}" if run_dir is not None else "no run directory (in memory)"
    return f"rljax: setting up {what} on {config.env}, {where} ..."
