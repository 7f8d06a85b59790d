"""Full-state checkpoints on Orbax, and preemption handling.

A checkpoint is the *whole* train state pytree (params, target params, optimiser state, env states and
observations, typed PRNG keys, normaliser statistics, the replay buffer with its cursor and priorities,
counters, traced hyperparameters) plus a JSON record of where the loop stood (chunk, env steps, plan)
and the config. Restoring it and running the same compiled chunk continues the run bit for bit.

Layout: ``RUN_DIR/checkpoints/<env_steps>/{state,meta}``. Saves are asynchronous (Orbax writes in a
background thread while the next chunk computes); the state is first copied to host memory, so the
donated device buffers can be reused at once. Orbax deletes old steps beyond ``keep`` only after a
newer one is committed, so the last valid checkpoint is never removed before its successor is
complete.

Resume walks the steps from newest to oldest and takes the first that restores; a step that fails
(truncated or corrupt files: Orbax still lists it as ``latest_step``) is skipped with a warning naming
it.
"""

from __future__ import annotations

import logging
import math
import os
import pathlib
import signal
import threading
import time
import warnings
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

__all__ = ["Checkpointer", "NoCheckpointError", "PreemptionGuard", "PREEMPTED_EXIT_CODE", "to_host", "from_host"]

PREEMPTED_EXIT_CODE = 75
"""Process exit status after a clean preemption (SIGTERM/SIGINT): EX_TEMPFAIL, "try again"."""


class NoCheckpointError(FileNotFoundError):
    """The run directory holds no checkpoint that can be restored."""


def _is_key(x: Any) -> bool:
    return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def to_host(state: Any) -> list[np.ndarray]:
    """The state's leaves as host numpy arrays (typed keys as their raw key data), in tree order."""
    leaves = jax.tree.leaves(state)
    return [np.asarray(jax.random.key_data(x)) if _is_key(x) else np.asarray(x) for x in leaves]


def from_host(host_leaves: list[np.ndarray], template: Any) -> Any:
    """Rebuilds a state shaped like ``template`` from host leaves, on the template's devices.

    Typed keys are re-wrapped with the template's key implementation; every leaf is placed with
    the template leaf's sharding, so a multi-device state restores onto the same layout.
    """
    t_leaves, treedef = jax.tree.flatten(template)
    if len(t_leaves) != len(host_leaves):
        raise ValueError(f"checkpoint has {len(host_leaves)} arrays but the train state has {len(t_leaves)}: "
                         f"it was written by a different algorithm or config")
    out = []
    for h, t in zip(host_leaves, t_leaves):
        if _is_key(t):
            expected = np.asarray(jax.random.key_data(t)).shape
            if h.shape != expected:
                raise ValueError(f"checkpoint key data shape {h.shape} != train state's {expected}")
            value = jax.random.wrap_key_data(h, impl=jax.random.key_impl(t))
        else:
            if h.shape != t.shape or h.dtype != t.dtype:
                raise ValueError(f"checkpoint array {h.shape} {h.dtype} does not match the train state's "
                                 f"{t.shape} {t.dtype}")
            value = h
        out.append(jax.device_put(value, t.sharding) if hasattr(t, "sharding") else value)
    return jax.tree.unflatten(treedef, out)


LAYOUT_KEY = "_array_layout"
"""Meta entry listing every leaf's shape, dtype and storage (see :func:`pack`)."""

PACK_MAX_BYTES = 1 << 20
"""Leaves up to this size are packed into one flat array per dtype; larger ones are stored alone."""


def pack(host_leaves: list[np.ndarray]) -> tuple[dict[str, np.ndarray], list[dict[str, Any]]]:
    """Packs host leaves into few arrays for Orbax, and the layout that undoes it.

    Orbax's cost per saved array (a tensorstore write and its metadata) is fixed, so a train state
    of a hundred small leaves costs several times more to save than its bytes; concatenating the
    small leaves into one flat array per dtype cut a PPO CartPole save from about 65 to 25 ms here.
    Leaves above :data:`PACK_MAX_BYTES` (replay buffers) are stored on their own, uncopied.
    Zero-size leaves (Orbax refuses them) are recorded in the layout only.

    Returns:
        ``(arrays, layout)``: the arrays to save, by name, and one JSON-able entry per leaf in tree
        order (``shape``, ``dtype``, ``packed``).
    """
    arrays: dict[str, np.ndarray] = {}
    parts: dict[str, list[np.ndarray]] = {}
    layout = []
    for i, x in enumerate(host_leaves):
        packed = x.nbytes <= PACK_MAX_BYTES
        layout.append({"shape": list(x.shape), "dtype": x.dtype.name, "packed": packed})
        if packed:
            parts.setdefault(x.dtype.name, []).append(x.ravel())
        elif x.size:
            arrays[f"leaf_{i:06d}"] = x
    for dtype, chunks in parts.items():
        flat = np.concatenate(chunks)
        if flat.size:
            arrays[f"packed_{dtype}"] = flat
    return arrays, layout


def unpack(arrays: Mapping[str, Any], layout: list[dict[str, Any]]) -> list[np.ndarray]:
    """The host leaves, in tree order, from :func:`pack`'s arrays and layout.

    Raises:
        ValueError: the arrays do not hold what the layout describes (a damaged checkpoint).
    """
    cursor: dict[str, int] = {}
    out = []
    for i, entry in enumerate(layout):
        shape, dtype = tuple(entry["shape"]), np.dtype(entry["dtype"])
        size = int(np.prod(shape, dtype=np.int64))
        if size == 0:
            x = np.zeros(shape, dtype)
        elif entry["packed"]:
            start = cursor.get(dtype.name, 0)
            flat = np.asarray(arrays[f"packed_{dtype.name}"])
            if flat.dtype != dtype or flat.size < start + size:
                raise ValueError(f"packed {dtype.name} array holds {flat.size} {flat.dtype} values; leaf {i} "
                                 f"needs {start + size}")
            x = flat[start:start + size].reshape(shape)
            cursor[dtype.name] = start + size
        else:
            x = np.asarray(arrays[f"leaf_{i:06d}"])
            if x.shape != shape or x.dtype != dtype:
                raise ValueError(f"leaf {i} is {x.shape} {x.dtype}, the layout says {shape} {dtype}")
        out.append(x)
    for dtype, used in cursor.items():
        if np.asarray(arrays[f"packed_{dtype}"]).size != used:
            raise ValueError(f"packed {dtype} array has values the layout does not account for")
    return out


class Checkpointer:
    """Saves and restores a run's train state under ``RUN_DIR/checkpoints``.

    Args:
        run_dir: the run directory.
        keep: how many recent checkpoints to keep (older ones are deleted after a newer one commits).
        async_save: write in a background thread (the default).
    """

    def __init__(self, run_dir: str | os.PathLike, keep: int = 3, async_save: bool = True):
        import orbax.checkpoint as ocp

        if not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep must be a positive integer, got {keep!r}")
        self._ocp = ocp
        self.directory = pathlib.Path(run_dir).absolute() / "checkpoints"
        # Orbax logs every save at INFO; the run's own progress line is enough.
        logging.getLogger("absl").setLevel(logging.WARNING)
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                               enable_async_checkpointing=async_save)
        self.manager = ocp.CheckpointManager(self.directory, options=options, item_names=("state", "meta"))

    def save(self, step: int, state: Any, meta: Mapping[str, Any]) -> None:
        """Starts saving ``state`` (all of it) and ``meta`` (JSON) as checkpoint ``step``."""
        arrays, layout = pack(to_host(state))
        ocp = self._ocp
        self.manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(arrays),
                                                        meta=ocp.args.JsonSave({**meta, LAYOUT_KEY: layout})),
                          force=True)

    def wait(self) -> None:
        """Blocks until every pending save is committed."""
        self.manager.wait_until_finished()

    def steps(self) -> list[int]:
        return sorted(self.manager.all_steps())

    def read(self, step: int) -> tuple[list[np.ndarray], dict[str, Any]]:
        """The raw host leaves (tree order) and meta of checkpoint ``step``, without a template
        (for inspecting or comparing checkpoints)."""
        arrays, layout, meta = self._load(step)
        if layout is None:  # the per-leaf layout of earlier versions (zero-size leaves not stored)
            return [np.asarray(arrays[k]) for k in sorted(arrays)], meta
        return unpack(arrays, layout), meta

    def _load(self, step: int) -> tuple[Mapping[str, Any], list[dict[str, Any]] | None, dict[str, Any]]:
        """Checkpoint ``step``'s saved arrays, their layout (None in the earlier per-leaf layout) and meta."""
        ocp = self._ocp
        restored = self.manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(),
                                                                      meta=ocp.args.JsonRestore()))
        meta = dict(restored["meta"])
        return restored["state"], meta.pop(LAYOUT_KEY, None), meta

    def restore(self, template: Any) -> tuple[Any, dict[str, Any], list[int]]:
        """Restores the newest checkpoint that loads into ``template``'s structure.

        Returns:
            ``(state, meta, skipped)``: the state on the template's devices, the saved meta, and the
            newer steps that could not be read (each also reported with a warning).

        Raises:
            NoCheckpointError: no step restores.
        """
        skipped: list[int] = []
        template_host = to_host(template)
        n = sum(1 for t in template_host if t.size)
        for step in sorted(self.manager.all_steps(), reverse=True):
            try:
                arrays, layout, meta = self._load(step)
                if layout is not None:
                    leaves = unpack(arrays, layout)
                else:  # the per-leaf layout of earlier versions (zero-size leaves not stored)
                    if len(arrays) != n:
                        raise ValueError(f"checkpoint has {len(arrays)} arrays, the state {n}")
                    leaves = [np.asarray(arrays[f"{i:06d}"]) if t.size else t for i, t in enumerate(template_host)]
                state = from_host(leaves, template)
            except Exception as err:  # noqa: BLE001 - any unreadable step is skipped, never fatal
                warnings.warn(f"skipping checkpoint step {step} in {self.directory}: it cannot be restored "
                              f"({type(err).__name__}: {str(err)[:300]})", stacklevel=2)
                skipped.append(step)
                continue
            if skipped:
                self._set_aside(skipped)
            return state, meta, skipped
        raise NoCheckpointError(
            f"no restorable checkpoint in {self.directory}" + (f" (skipped unreadable steps {skipped})" if skipped
                                                               else " (it holds none)"))

    def _set_aside(self, steps: list[int]) -> None:
        """Moves unreadable steps to ``checkpoints_unreadable/`` (kept for inspection, never deleted)
        so the resumed run can write those step numbers again."""
        aside = self.directory.parent / "checkpoints_unreadable"
        aside.mkdir(exist_ok=True)
        for step in steps:
            src = self.directory / str(step)
            if src.exists():
                dst = aside / f"{step}-{int(time.time())}"
                os.replace(src, dst)
                warnings.warn(f"moved unreadable checkpoint step {step} to {dst}", stacklevel=3)
        self.manager.reload()

    def close(self) -> None:
        self.manager.wait_until_finished()
        self.manager.close()


FORCED_EXIT_GRACE_S = 10.0
"""After a second SIGTERM/SIGINT, how long the process gets to stop by itself before it is ended."""

DUPLICATE_SIGTERM_S = 1.0
"""SIGTERMs closer together than this count as one for the forced exit (a job-wide signal that also
reaches the process through a supervisor)."""


class PreemptionGuard:
    """Turns SIGTERM/SIGINT into a request to stop at the next chunk boundary.

    Signals arrive while the host waits for a compiled chunk; Python runs the handler when the
    chunk returns, so the current chunk always finishes. The guard is entered before anything is
    built (a signal during initialisation or compilation stops the run before its first chunk)
    and left only after the final checkpoint has committed, so a second signal during the stop's
    save never kills the process with its default action.

    A second SIGINT (Ctrl-C twice) raises ``KeyboardInterrupt`` as soon as Python runs, unless the
    run is already :attr:`finishing` (saving after a stop), which it lets complete. A second
    signal of either kind is also seen by a watcher thread (through :func:`signal.set_wakeup_fd`,
    which works while the main thread is blocked inside XLA): if the process has not left the
    guard :data:`FORCED_EXIT_GRACE_S` seconds later, it exits with status ``128 + signum`` without
    saving, so a stuck job always obeys a repeated signal. The newest committed checkpoint stays
    valid. SIGTERMs less than :data:`DUPLICATE_SIGTERM_S` apart count as one there (a scheduler
    that signals the whole job and a supervisor that forwards it). Handlers are installed only in
    the main thread and restored on exit. :meth:`request`
    asks for the same stop from code (tests, notebooks).
    """

    def __init__(self, enabled: bool = True, grace_s: float = FORCED_EXIT_GRACE_S):
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self.grace_s = grace_s
        self.signal_name: str | None = None
        self.finishing = False
        self._previous: dict[int, Any] = {}
        self._pipe: tuple[int, int] | None = None

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    def request(self, reason: str = "request") -> None:
        self.signal_name = reason

    def _handler(self, signum: int, frame: Any) -> None:
        if self.signal_name is not None and signum == signal.SIGINT and not self.finishing:
            raise KeyboardInterrupt
        self.signal_name = signal.Signals(signum).name

    def _watch(self, read_fd: int) -> None:
        try:
            self._watch_until_eof(read_fd)
        finally:
            os.close(read_fd)

    def _watch_until_eof(self, read_fd: int) -> None:
        seen = 0
        last_term = -math.inf
        while True:
            data = os.read(read_fd, 64)
            if not data:
                return
            now = time.monotonic()
            for b in data:
                if b == signal.SIGINT:
                    seen += 1
                elif b == signal.SIGTERM:
                    # A scheduler that signals every process of a job (plain scancel, systemd's
                    # control-group kill) and a supervisor forwarding it deliver one SIGTERM twice
                    # within moments: that is one request, not a second one.
                    seen += now - last_term >= DUPLICATE_SIGTERM_S
                    last_term = now
            if seen >= 2:
                signum = next(b for b in reversed(data) if b in (signal.SIGTERM, signal.SIGINT))
                deadline = time.monotonic() + self.grace_s
                while time.monotonic() < deadline:
                    if self._pipe is None:  # the guard exited: the process is stopping by itself
                        return
                    time.sleep(0.1)
                os.write(2, (f"\nrljax: second {signal.Signals(signum).name} and the run did not stop within "
                             f"{self.grace_s:g} s: exiting without saving; the newest committed checkpoint "
                             f"is intact\n").encode())
                os._exit(128 + signum)

    def __enter__(self) -> "PreemptionGuard":
        if self.enabled:
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._handler)
            read_fd, write_fd = os.pipe()
            os.set_blocking(write_fd, False)
            previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
            if previous != -1:  # someone else (an asyncio loop) listens: leave theirs in place
                signal.set_wakeup_fd(previous)
                os.close(read_fd), os.close(write_fd)
            else:
                self._pipe = (read_fd, write_fd)
                threading.Thread(target=self._watch, args=(read_fd,), name="rljax-signal-watcher",
                                 daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._pipe is not None:
            signal.set_wakeup_fd(-1)
            _, write_fd = self._pipe
            self._pipe = None
            os.close(write_fd)  # the watcher reads EOF and ends
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
