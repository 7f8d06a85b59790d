"""Full-state checkpoints on Orbax.

A checkpoint is the *whole* train state pytree (params, target params, optimiser state, env states and
observations, typed PRNG keys, normaliser statistics, the replay buffer with its cursor and priorities,
counters, traced hyperparameters) plus a JSON record of where the loop stood (chunk, env steps, plan)
and the config. Restoring it and running the same compiled chunk continues the run bit for bit.

Layout: ``RUN_DIR/checkpoints/<env_steps>/{state,meta}`` (a multi-process run saves in shards:
every process writes its own devices' shards into the same step, :mod:`rljax.store.shards`). Saves
are asynchronous (Orbax writes in a background thread while the next chunk computes); the state is
first copied to host memory, so the donated device buffers can be reused at once. Orbax deletes old
steps beyond ``keep`` only after a newer one is committed, so the last valid checkpoint is never
removed before its successor is complete.

Integrity: every save records a CRC-32 of each array handed to Orbax and of the JSON meta, and is
refused when a floating leaf holds NaN/inf (:class:`NonFiniteStateError`; ``nonfinite_ok=True``
records per-leaf counts instead). Resume walks the steps from newest to oldest and takes the first
that restores and verifies; a step that fails (truncated or corrupt files: Orbax still lists it as
``latest_step``; a checksum mismatch; NaN/inf its meta does not record) is skipped with a warning
naming it and why, then set aside. Uncommitted partial writes left by a killed save are removed
when a :class:`Checkpointer` is created.
"""

from __future__ import annotations

import json
import logging
import math
import os
import pathlib
import shutil
import time
import warnings
import zlib
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from rljax.core.counters import Count
from rljax.store.shards import SHARDS_KEY

__all__ = ["Checkpointer", "CheckpointIntegrityError", "NoCheckpointError", "NonFiniteStateError",
           "PREEMPTED_EXIT_CODE", "checksums", "from_host", "nonfinite_summary", "to_host", "verify"]

PREEMPTED_EXIT_CODE = 75
"""Process exit status after a clean preemption (SIGTERM/SIGINT): EX_TEMPFAIL, "try again"."""


class NoCheckpointError(FileNotFoundError):
    """The run directory holds no checkpoint that can be restored."""


def _is_key(x: Any) -> bool:
    return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def to_host(state: Any) -> list[np.ndarray]:
    """The state's leaves as host numpy arrays (typed keys as their raw key data), in tree order.

    Arrays that span several processes are gathered whole onto every process (a collective: every
    process of the run calls this at the same point).
    """
    from rljax.runtime.distributed import fetch

    leaves = [jax.random.key_data(x) if _is_key(x) else x for x in jax.tree.leaves(state)]
    return [np.asarray(x) for x in fetch(leaves)]


def _host_shapes(state: Any) -> list[tuple[tuple[int, ...], np.dtype]]:
    """``(shape, dtype)`` of each leaf as :func:`to_host` returns it, without moving any data."""
    out = []
    for x in jax.tree.leaves(state):
        x = jax.eval_shape(jax.random.key_data, x) if _is_key(x) else x
        out.append((tuple(np.shape(x)), np.dtype(x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype)))
    return out


def from_host(host_leaves: list[np.ndarray], template: Any, place: bool = True) -> Any:
    """Rebuilds a state shaped like ``template`` from host leaves, on the template's devices.

    Typed keys are re-wrapped with the template's key implementation; every leaf is placed with
    the template leaf's sharding, so a multi-device state restores onto the same layout (one that
    spans several processes too: each process places its own shards, and every process must call
    this together). With ``place=False`` the leaves are only checked against the template.

    Raises:
        ValueError: the leaves do not fit the template (count, shape or dtype).
    """
    from rljax.runtime.distributed import put

    t_leaves, treedef = jax.tree.flatten(template)
    if len(t_leaves) != len(host_leaves):
        raise ValueError(f"checkpoint has {len(host_leaves)} arrays but the train state has {len(t_leaves)}: "
                         f"it was written by a different algorithm or config")
    out = []
    for h, t in zip(host_leaves, t_leaves):
        if _is_key(t):
            expected = jax.eval_shape(jax.random.key_data, t).shape
            if h.shape != expected:
                raise ValueError(f"checkpoint key data shape {h.shape} != train state's {expected}")
        elif h.shape != t.shape or h.dtype != t.dtype:
            raise ValueError(f"checkpoint array {h.shape} {h.dtype} does not match the train state's "
                             f"{t.shape} {t.dtype}")
        if not place:
            continue
        if _is_key(t) and not getattr(t, "is_fully_addressable", True):
            out.append(jax.random.wrap_key_data(put(h, t.sharding), impl=jax.random.key_impl(t)))
        elif _is_key(t):
            value = jax.random.wrap_key_data(h, impl=jax.random.key_impl(t))
            out.append(jax.device_put(value, t.sharding) if hasattr(t, "sharding") else value)
        else:
            out.append(put(h, t.sharding) if hasattr(t, "sharding") else h)
    return jax.tree.unflatten(treedef, out) if place else None


LAYOUT_KEY = "_array_layout"
"""Meta entry listing every leaf's shape, dtype and storage (see :func:`pack`)."""

PACK_MAX_BYTES = 1 << 20
"""Leaves up to this size are packed into one flat array per dtype; larger ones are stored alone."""


def upgrade_counts(host_leaves: list[np.ndarray], template: Any) -> list[np.ndarray]:
    """Host leaves saved when the train state counted in int32 scalars, fitted to ``template``'s
    :class:`~rljax.core.counters.Count` counters (high word 0, low word the saved value).

    A checkpoint with exactly one leaf per Count fewer than the template is of that kind; any other
    leaf list is returned as it is (:func:`from_host` then names a mismatch).
    """
    nodes = jax.tree.leaves(template, is_leaf=lambda x: isinstance(x, Count))
    counts = sum(isinstance(n, Count) for n in nodes)
    if not counts or len(host_leaves) != len(nodes):  # one saved leaf per node: a Count's one int32 scalar
        return host_leaves
    out, saved = [], iter(host_leaves)
    for node in nodes:
        if not isinstance(node, Count):
            out.append(next(saved))
            continue
        old = np.asarray(next(saved))
        if old.dtype.kind not in "iu" or (old < 0).any():
            return host_leaves
        out += [np.zeros(old.shape, np.uint32), old.astype(np.uint32)]
    return out


def pack(host_leaves: list[np.ndarray]) -> tuple[dict[str, np.ndarray], list[dict[str, Any]]]:
    """Packs host leaves into few arrays for Orbax, and the layout that undoes it.

    Orbax's cost per saved array (a tensorstore write and its metadata) is fixed, so a train state
    of a hundred small leaves costs several times more to save than its bytes; concatenating the
    small leaves into one flat array per dtype removes most of that cost (figures in
    ``docs/design.md``, "Checkpoints").
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


CHECKSUM_KEY = "_checksums"
"""Meta entry holding a CRC-32 of every saved array (its bytes, shape and dtype) and of the meta itself."""

NONFINITE_KEY = "_nonfinite_leaves"
"""Meta entry of a save with ``nonfinite_ok=True`` whose state held NaN/inf: one ``{leaf, path, count}``
per such leaf (``leaf``: its index in tree order). Restored with the meta, so a resumed sweep can see
which leaves had diverged."""

INF_SENTINEL_FIELDS = frozenset({"min_tree"})
"""Leaf names whose ``+inf`` entries are sentinels, not divergence: the prioritized replay's min-tree
holds ``+inf`` for empty slots (:mod:`rljax.core.buffers`). NaN and ``-inf`` there still count."""

ORBAX_TMP_MARK = ".orbax-checkpoint-tmp"
"""In the name of a step directory Orbax has not committed: ``<step>.orbax-checkpoint-tmp`` (Orbax
0.12), ``<step>.orbax-checkpoint-tmp-<timestamp>`` (earlier versions)."""

_RESERVED_META_KEYS = (LAYOUT_KEY, CHECKSUM_KEY, NONFINITE_KEY, SHARDS_KEY)


class NonFiniteStateError(FloatingPointError):
    """A save was refused because floating leaves of the state hold NaN or inf; nothing was written.

    Attributes:
        counts: ``{leaf path: number of non-finite values}`` for every such leaf.
    """

    def __init__(self, message: str, counts: dict[str, int]):
        super().__init__(message)
        self.counts = counts


class LayoutError(ValueError):
    """A checkpoint that reads fine does not fit the run's device layout and cannot be made to
    (raised by a restore's ``adapt``); unlike a damaged step, it is not skipped for an older one."""


class CheckpointIntegrityError(ValueError):
    """A checkpoint's data is not what was saved: a checksum, shape or dtype differs, or it holds
    non-finite values that its meta does not record."""


def _is_sentinel_path(path: tuple[Any, ...]) -> bool:
    if not path:
        return False
    last = path[-1]
    return getattr(last, "name", getattr(last, "key", None)) in INF_SENTINEL_FIELDS


def _nonfinite_count(path: tuple[Any, ...], x: np.ndarray) -> int:
    """NaN/inf values in host array ``x`` (0 for integer, bool and key data; sentinel ``+inf`` excluded)."""
    if not jax.dtypes.issubdtype(x.dtype, jax.numpy.inexact):
        return 0
    finite = np.isfinite(x)
    if finite.all():  # the common case: one pass, no counting
        return 0
    count = x.size - int(np.count_nonzero(finite))
    if _is_sentinel_path(path):
        count -= int(np.count_nonzero(x == np.inf))
    return count


def _nonfinite_by_leaf(paths: list[tuple[Any, ...]], host_leaves: list[np.ndarray]) -> dict[int, int]:
    counts = {}
    for i, (path, x) in enumerate(zip(paths, host_leaves)):
        n = _nonfinite_count(path, x)
        if n:
            counts[i] = n
    return counts


def nonfinite_summary(state: Any) -> dict[str, int]:
    """``{leaf path: number of NaN/inf values}`` for every floating leaf of ``state`` that holds any.

    Paths are :func:`jax.tree_util.keystr` strings. Integer and boolean leaves and typed PRNG keys
    cannot be non-finite and are not read; floating leaves are copied to the host (one pass each).
    The ``+inf`` sentinels of :data:`INF_SENTINEL_FIELDS` leaves are not counted. An empty dict
    means the state is finite, which is what :meth:`Checkpointer.save` requires by default.
    """
    out = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
        if not hasattr(leaf, "dtype"):  # a Python number
            leaf = np.asarray(leaf)
        if not jax.dtypes.issubdtype(leaf.dtype, jax.numpy.inexact):
            continue
        n = _nonfinite_count(path, np.asarray(leaf))
        if n:
            out[jax.tree_util.keystr(path)] = n
    return out


def _crc32(x: np.ndarray) -> int:
    """CRC-32 of an array's dtype, shape and bytes (C order)."""
    x = np.ascontiguousarray(x)
    head = zlib.crc32(f"{x.dtype.name}{list(x.shape)}".encode())
    return zlib.crc32(x.reshape(-1).view(np.uint8), head)


def _meta_crc32(meta: Mapping[str, Any]) -> int:
    """CRC-32 of the meta's canonical JSON, without its checksum entry.

    The meta is first put through a JSON round trip (int keys become strings, tuples lists), so
    the meta as saved and as read back give the same text; JSON floats round-trip exactly.
    """
    body = json.loads(json.dumps({k: v for k, v in meta.items() if k != CHECKSUM_KEY}))
    return zlib.crc32(json.dumps(body, sort_keys=True).encode())


def checksums(arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> dict[str, Any]:
    """The :data:`CHECKSUM_KEY` entry for saved ``arrays`` (after :func:`pack`) and ``meta``.

    CRC-32 (``zlib.crc32``): as fast as anything in the standard library on CPUs, releases the GIL,
    and certain to catch any error confined to 32 consecutive bits (every flipped byte); for wider
    damage a mismatch is missed with probability 2**-32. It guards against accidental corruption
    (disk, copy, truncation), not against deliberate tampering.
    """
    return {"algorithm": "crc32",
            "arrays": {k: {"shape": list(v.shape), "dtype": v.dtype.name, "crc32": _crc32(v)}
                       for k, v in sorted(arrays.items())},
            "meta": _meta_crc32(meta)}


def verify(arrays: Mapping[str, Any], meta: Mapping[str, Any], step: int | str = "?") -> bool:
    """Checks restored ``arrays`` and ``meta`` against the checksums saved in the meta.

    Returns:
        True when verified, False when the checkpoint has no checksums (written before they existed).

    Raises:
        CheckpointIntegrityError: an array or the meta differs from what was saved, naming which.
    """
    record = meta.get(CHECKSUM_KEY)
    if record is None:
        return False
    if record.get("algorithm") != "crc32":
        raise CheckpointIntegrityError(f"step {step}: unknown checksum algorithm {record.get('algorithm')!r} "
                                       f"(this rljax knows 'crc32')")
    if _meta_crc32(meta) != record["meta"]:
        raise CheckpointIntegrityError(f"step {step}: the checkpoint's JSON meta fails its CRC-32 check")
    expected = record["arrays"]
    if sorted(arrays) != sorted(expected):
        raise CheckpointIntegrityError(f"step {step}: restored arrays {sorted(arrays)} but "
                                       f"{sorted(expected)} were saved")
    for name, want in expected.items():
        if "shards" in want:  # saved in shards: each shard's checksum (rljax.store.shards)
            from rljax.store.shards import verify_shards

            try:
                verify_shards(name, arrays[name], want["shards"], step)
            except ValueError as err:
                raise CheckpointIntegrityError(str(err)) from err
            continue
        x = np.asarray(arrays[name])
        if list(x.shape) != want["shape"] or x.dtype.name != want["dtype"]:
            raise CheckpointIntegrityError(f"step {step}: array {name!r} restored as {x.shape} {x.dtype.name}, "
                                           f"saved as {tuple(want['shape'])} {want['dtype']}")
        got = _crc32(x)
        if got != want["crc32"]:
            raise CheckpointIntegrityError(f"step {step}: array {name!r} ({tuple(want['shape'])} "
                                           f"{want['dtype']}) fails its CRC-32 check (saved {want['crc32']:#010x}, "
                                           f"read {got:#010x}): its data is damaged")
    return True


class Checkpointer:
    """Saves and restores a run's train state under ``RUN_DIR/checkpoints``.

    Every save carries a CRC-32 of each saved array and of its meta (:func:`checksums`), and is
    refused if the state holds NaN/inf (:class:`NonFiniteStateError`) unless ``nonfinite_ok``.
    Restore verifies both before building the state and falls back to the next older step. At
    creation, uncommitted partial writes (``*.orbax-checkpoint-tmp*`` step directories, left by a
    killed save) are removed with a warning.

    Args:
        run_dir: the run directory.
        keep: how many recent checkpoints to keep (older ones are deleted after a newer one commits).
        async_save: write in a background thread (the default).
        checksums: write checksums with every save (the default). Restores verify checksums
            whenever a checkpoint has them, whatever this says.
        read_only: only read (:meth:`read`): nothing in the run directory is created, removed or
            changed, not even partial writes, so a live run's checkpoints can be read beside it.
        follower: a process other than the leader (process 0) of a multi-process run: it touches no
            file. :meth:`save` takes part in gathering the state, which the leader writes;
            :meth:`restore` and :meth:`steps` return what the leader read (broadcast); ``wait``
            and ``close`` do nothing. The leader broadcasts in :meth:`restore` and :meth:`steps`
            whenever the run has several processes, so every process must call them together.
        sharded: in a multi-process run, save the state in shards (:mod:`rljax.store.shards`): every
            process writes only its own devices' shards, through Orbax's multi-process save, so no
            process holds the whole state at a save; a restore on the same layout reads only this
            process's shards. Every process must call :meth:`save`, :meth:`restore`, :meth:`wait`
            and :meth:`close` together. Ignored with one process.
    """

    def __init__(self, run_dir: str | os.PathLike, keep: int = 3, async_save: bool = True,
                 checksums: bool = True, read_only: bool = False, follower: bool = False, sharded: bool = False):
        import orbax.checkpoint as ocp

        if not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep must be a positive integer, got {keep!r}")
        self._ocp = ocp
        self.checksums = bool(checksums)
        self.directory = pathlib.Path(run_dir).absolute() / "checkpoints"
        self._stuck: set[int] = set()  # unreadable steps that could not be moved aside
        self._warned_unverified = False
        self.follower = follower
        self.sharded = bool(sharded) and not read_only and jax.process_count() > 1
        self.bytes_written = 0  # the state bytes handed to Orbax (sharded: by every process together)
        self.adapt: Any = None  # the restore's default ``adapt`` (an elastic run sets it: rollbacks use it too)
        self.manager = None
        if self.sharded:  # every process takes part in every save: Orbax's own multi-process mode
            if not follower:
                self._remove_orphans()
            logging.getLogger("absl").setLevel(logging.WARNING)
            options = ocp.CheckpointManagerOptions(max_to_keep=keep, enable_async_checkpointing=async_save)
            self.manager = ocp.CheckpointManager(self.directory, options=options, item_names=("state", "meta"))
            return
        if follower:
            return
        if read_only:
            self.manager = self._reader()
            return
        self._remove_orphans()
        # Orbax logs every save at INFO; the run's own progress line is enough.
        logging.getLogger("absl").setLevel(logging.WARNING)
        # Several processes: only the leader has a manager, so Orbax must not wait for the others
        # at its barriers; it writes the state that every process gathered (save).
        multi = {} if jax.process_count() == 1 else {"multiprocessing_options": ocp.options.MultiprocessingOptions(
            primary_host=jax.process_index(), active_processes={jax.process_index()})}
        if multi:  # Orbax creates the directory itself only when every process takes part
            self.directory.mkdir(parents=True, exist_ok=True)
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=not multi,
                                               enable_async_checkpointing=async_save, **multi)
        self.manager = ocp.CheckpointManager(self.directory, options=options, item_names=("state", "meta"))

    def _reader(self) -> Any:
        """A read-only Orbax manager of the checkpoints for this process alone (no barrier with the others)."""
        ocp = self._ocp
        absl = logging.getLogger("absl")
        level = absl.level
        absl.setLevel(logging.ERROR)  # Orbax warns that a read-only manager is read-only
        try:
            multi = {} if jax.process_count() == 1 else {
                "multiprocessing_options": ocp.options.MultiprocessingOptions(
                    primary_host=jax.process_index(), active_processes={jax.process_index()})}
            options = ocp.CheckpointManagerOptions(create=False, read_only=True, max_to_keep=None,
                                                   enable_async_checkpointing=False, **multi)
            return ocp.CheckpointManager(self.directory, options=options, item_names=("state", "meta"))
        finally:
            absl.setLevel(level)

    def _remove_orphans(self) -> None:
        """Deletes uncommitted step directories: partial writes of a save that never finished.

        Orbax's own ``cleanup_tmp_directories`` option does the same, but in a background task and
        silently; here it happens before anything else and says what it removed. Only safe while no
        other process writes to this directory (the run directory is one run's).
        """
        if not self.directory.is_dir():
            return
        removed, failed = [], []
        for path in sorted(self.directory.iterdir()):
            if ORBAX_TMP_MARK not in path.name:
                continue
            try:
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
                removed.append(path.name)
            except OSError as err:
                failed.append(f"{path.name} ({type(err).__name__}: {err})")
        if removed:
            warnings.warn(f"removed {len(removed)} uncommitted partial checkpoint write(s) in {self.directory} "
                          f"(a save interrupted before its commit): {', '.join(removed)}", stacklevel=3)
        if failed:
            warnings.warn(f"could not remove uncommitted partial checkpoint write(s) in {self.directory}: "
                          f"{'; '.join(failed)}", stacklevel=3)

    def save(self, step: int, state: Any, meta: Mapping[str, Any], *, nonfinite_ok: bool = False) -> None:
        """Starts saving ``state`` (all of it) and ``meta`` (JSON) as checkpoint ``step``.

        Args:
            step: the step number (the loop uses env steps).
            state: the train state pytree.
            meta: JSON-able record saved beside it; keys starting ``_`` that this module uses
                (:data:`LAYOUT_KEY`, :data:`CHECKSUM_KEY`, :data:`NONFINITE_KEY`) are reserved.
            nonfinite_ok: save even if floating leaves hold NaN/inf, recording per-leaf counts in
                the meta (:data:`NONFINITE_KEY`), e.g. for a sweep whose diverged member must not
                stop the others from being checkpointed. By default such a save is refused.

        Raises:
            NonFiniteStateError: the state holds NaN/inf and not ``nonfinite_ok``; nothing is written.
            ValueError: ``meta`` uses a reserved key.
        """
        clash = [k for k in _RESERVED_META_KEYS if k in meta]
        if clash:
            raise ValueError(f"meta keys {clash} are reserved for the checkpointer; rename them")
        if self.sharded:  # every process saves, or none: the leader's unreadable steps decide
            from rljax.runtime.distributed import broadcast_json

            leader = jax.process_index() == 0
            touched, skip = broadcast_json([step in self._stuck, step in self._stuck and not self._clear_stuck(step)]
                                           if leader else None)
            if touched:
                self.manager.reload()
            if skip:
                return
        elif step in self._stuck and not self._clear_stuck(step):
            return
        flat = jax.tree_util.tree_flatten_with_path(state)[0]
        if self.sharded:
            self._save_shards(step, flat, meta, nonfinite_ok)
            return
        host = to_host([x for _, x in flat])
        counts = _nonfinite_by_leaf([p for p, _ in flat], host)
        if counts and not nonfinite_ok:
            _refuse_nonfinite(step, flat, counts, [x.size for x in host])
        if self.follower:  # the leader writes what every process gathered
            return
        arrays, layout = pack(host)
        full = {**meta, LAYOUT_KEY: layout}
        if counts:
            full[NONFINITE_KEY] = [{"leaf": i, "path": jax.tree_util.keystr(flat[i][0]), "count": n}
                                   for i, n in sorted(counts.items())]
        if self.checksums:
            full[CHECKSUM_KEY] = checksums(arrays, full)
        ocp = self._ocp
        self.manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(arrays),
                                                        meta=ocp.args.JsonSave(full)),
                          force=True)
        self.bytes_written += sum(int(np.asarray(x).nbytes) for x in arrays.values())

    def _save_shards(self, step: int, flat: list[tuple[Any, Any]], meta: Mapping[str, Any], nonfinite_ok: bool) -> None:
        """:meth:`save` in shards: NaN/inf and checksums of this process's shards, added up over the
        processes (small all-gathers), then Orbax's multi-process save of the global arrays."""
        from rljax.runtime.distributed import allgather_json
        from rljax.store.shards import local_shards, shard_checksums

        leaves = [jax.random.key_data(x) if _is_key(x) else x for _, x in flat]
        arrays = {f"leaf_{i:06d}": x for i, x in enumerate(leaves) if x.size}
        local = local_shards(arrays)  # each shard copied to the host once, for NaN/inf and checksums
        mine = [np.concatenate([d.ravel() for d in local.get(f"leaf_{i:06d}", {}).values()] or [np.zeros(0, x.dtype)])
                for i, x in enumerate(leaves)]
        counts: dict[int, int] = {}
        for part in allgather_json({str(i): n for i, n in _nonfinite_by_leaf([p for p, _ in flat], mine).items()}):
            for i, n in part.items():
                counts[int(i)] = counts.get(int(i), 0) + n
        counts = dict(sorted(counts.items()))
        if counts and not nonfinite_ok:
            _refuse_nonfinite(step, flat, counts, [x.size for x in leaves])
        crcs: dict[str, dict[str, int]] = {}
        for part in allgather_json(shard_checksums(local)):
            for name, by_rows in part.items():
                crcs.setdefault(name, {}).update(by_rows)
        full = {**meta, LAYOUT_KEY: [{"shape": list(x.shape), "dtype": np.dtype(x.dtype).name, "packed": False}
                                     for x in leaves],
                SHARDS_KEY: {"processes": jax.process_count(), "devices": jax.device_count()}}
        if counts:
            full[NONFINITE_KEY] = [{"leaf": i, "path": jax.tree_util.keystr(flat[i][0]), "count": n}
                                   for i, n in counts.items()]
        full[CHECKSUM_KEY] = {"algorithm": "crc32", "meta": _meta_crc32(full),
                              "arrays": {name: {"shape": list(x.shape), "dtype": np.dtype(x.dtype).name,
                                                "shards": crcs.get(name, {})} for name, x in sorted(arrays.items())}}
        ocp = self._ocp
        self.manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(arrays),
                                                        meta=ocp.args.JsonSave(full)), force=True)
        self.bytes_written += sum(int(x.size) * np.dtype(x.dtype).itemsize for x in arrays.values())

    def wait(self) -> None:
        """Blocks until every pending save is committed."""
        if self.manager is not None:
            self.manager.wait_until_finished()

    def steps(self) -> list[int]:
        """The saved steps, oldest first (a multi-process run: the leader's list, on every process)."""
        from rljax.runtime.distributed import broadcast_json, process_count

        steps = None if self.follower else sorted(self.manager.all_steps())
        return broadcast_json(steps) if process_count() > 1 else steps

    def read(self, step: int) -> tuple[list[np.ndarray], dict[str, Any]]:
        """The raw host leaves (tree order) and meta of checkpoint ``step``, without a template
        (for inspecting or comparing checkpoints).

        Raises:
            CheckpointIntegrityError: the step's checksums do not match its data.
        """
        arrays, meta = self._load(step)
        self._verify(step, arrays, meta)
        layout, meta = meta.get(LAYOUT_KEY), _public(meta)
        if layout is None:  # the per-leaf layout of earlier versions (zero-size leaves not stored)
            return [np.asarray(arrays[k]) for k in sorted(arrays)], meta
        return unpack(arrays, layout), meta

    def _load(self, step: int, template: Any = None, manager: Any = None) -> tuple[Mapping[str, Any], dict[str, Any]]:
        """Checkpoint ``step``'s saved arrays and its whole meta (layout and checksums included).

        A step saved in shards is read whole as NumPy arrays, or, with ``template`` (the state on the
        devices it was saved from), onto them: each process then reads only its own shards."""
        from rljax.store.shards import device_targets, host_targets

        ocp, manager = self._ocp, manager or self.manager
        meta = dict(manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"])
        if SHARDS_KEY not in meta:
            restored = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(),
                                                                     meta=ocp.args.JsonRestore()))
            return restored["state"], dict(restored["meta"])
        layout = meta[LAYOUT_KEY]
        targets = host_targets(layout) if template is None else device_targets(layout, template)
        if not targets:
            return {}, meta
        restored = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(targets)))
        return restored["state"], meta

    def _verify(self, step: int, arrays: Mapping[str, Any], meta: Mapping[str, Any]) -> None:
        if not verify(arrays, meta, step) and not self._warned_unverified:
            self._warned_unverified = True
            warnings.warn(f"checkpoint step {step} in {self.directory} has no checksums (written by an "
                          f"earlier rljax): its data cannot be verified", stacklevel=3)

    def restore(self, template: Any, adapt: Any = None) -> tuple[Any, dict[str, Any], list[int]]:
        """Restores the newest checkpoint that loads into ``template``'s structure.

        ``adapt(host_leaves, meta) -> host_leaves``, when given, fits a step's leaves to the template
        first (an elastic resume re-deals them over another device count,
        :mod:`rljax.training.elastic`); a :class:`LayoutError` it raises ends the restore.

        A step is skipped (with a warning naming it and why) when Orbax cannot read it, its
        checksums do not match, it holds NaN/inf its meta does not record, or it does not fit the
        template. Once an older step restores, the skipped ones are set aside (:meth:`_set_aside`).

        Returns:
            ``(state, meta, skipped)``: the state on the template's devices, the saved meta, and the
            newer steps that could not be read (each also reported with a warning).

        Raises:
            NoCheckpointError: no step restores.
        """
        from rljax.runtime.distributed import broadcast_arrays, broadcast_json, process_count

        adapt = adapt if adapt is not None else self.adapt
        if process_count() == 1:
            return self._restore(template, adapt)[:3]
        if self.sharded:
            restored = self._restore_shards(template)
            if restored is not None:
                return restored
        # The leader reads, checks and sets aside as one process would (a step saved in shards whole),
        # the others get its result.
        shapes = _host_shapes(template)
        like = [np.zeros(shape, dtype) for shape, dtype in shapes]
        result, error = None, None
        leader, layout_error = jax.process_index() == 0, False
        if leader:
            # In shards, the shared manager reads with every process; the leader reads alone here.
            shared = self.manager
            if self.sharded:
                self.manager = self._reader()
            try:
                result = self._restore(template, adapt)
            except (NoCheckpointError, LayoutError) as err:  # every process raises it, not the leader alone
                error, layout_error = str(err), isinstance(err, LayoutError)
            finally:
                if self.sharded:
                    self.manager.close()
                    self.manager = shared
        verdict = broadcast_json(None if not leader else {"error": error, "layout": layout_error}
                                 if error is not None else {"meta": result[1], "skipped": result[2]})
        if self.sharded:
            self.manager.reload()  # after the leader's read, which may have set steps aside
        if verdict.get("error") is not None:
            raise (LayoutError if verdict["layout"] else NoCheckpointError)(verdict["error"])
        leaves = broadcast_arrays(None if not leader else result[3], like)
        return from_host(leaves, template), verdict["meta"], verdict["skipped"]

    def _restore_shards(self, template: Any) -> tuple[Any, dict[str, Any], list[int]] | None:
        """A restore in which every process reads only its own shards of the newest step saved in
        shards on this very layout that every process verified; None when the newest step was saved
        whole or on another layout (:meth:`restore` then reads it whole). A collective."""
        from rljax.runtime.distributed import allgather_json, broadcast_json

        layout_now = [[list(shape), np.dtype(dtype).name] for shape, dtype in _host_shapes(template)]
        leader = jax.process_index() == 0
        steps = broadcast_json(sorted(self.manager.all_steps()) if leader else None)
        stuck = set(broadcast_json(sorted(self._stuck) if leader else None))
        skipped: list[int] = []
        reader = self._reader()  # reads without Orbax's barriers: a process that fails must not strand the others
        try:
            for step in reversed(steps):
                arrays, meta, error, same = None, None, None, False
                try:
                    if step in stuck:
                        raise ValueError("it was found unreadable before")
                    meta = dict(reader.restore(step, args=self._ocp.args.Composite(
                        meta=self._ocp.args.JsonRestore()))["meta"])
                    saved = meta.get(SHARDS_KEY) or {}
                    same = (saved.get("processes") == jax.process_count()
                            and saved.get("devices") == jax.device_count()
                            and [[e["shape"], e["dtype"]] for e in meta[LAYOUT_KEY]] == layout_now)
                    if same:
                        arrays, meta = self._load(step, template, reader)
                        self._verify(step, arrays, meta)
                except Exception as err:  # noqa: BLE001 - every process reports; a bad shard skips the step
                    error = f"{type(err).__name__}: {str(err)[:300]}"
                verdicts = allgather_json([error, same])
                if not any(e for e, _ in verdicts) and not all(ok for _, ok in verdicts):
                    return None  # saved whole or on another layout
                bad = [f"process {i}: {e}" for i, (e, _) in enumerate(verdicts) if e]
                if bad:
                    if leader:
                        warnings.warn(f"skipping checkpoint step {step} in {self.directory}: it cannot be restored "
                                      f"({'; '.join(bad)})", stacklevel=3)
                    skipped.append(step)
                    continue
                self._agree_set_aside([s for s in skipped if s not in stuck])
                return self._placed(arrays, meta, template), _public(meta), skipped
        finally:
            reader.close()
        if not steps:
            return None
        self._agree_set_aside([s for s in skipped if s not in stuck])
        raise NoCheckpointError(f"no restorable checkpoint in {self.directory} (skipped unreadable steps {skipped})")

    def _agree_set_aside(self, steps: list[int]) -> None:
        """In shards: the leader sets ``steps`` aside, then every process refreshes its step list
        (after the leader's moves: the broadcast waits for them). A collective."""
        from rljax.runtime.distributed import broadcast_json

        if jax.process_index() == 0 and steps:
            self._set_aside(steps)
        if broadcast_json(bool(steps) if jax.process_index() == 0 else None):
            self.manager.reload()

    @staticmethod
    def _placed(arrays: Mapping[str, Any], meta: dict[str, Any], template: Any) -> Any:
        """The state from a step's arrays restored onto the template's devices (zero-size leaves,
        which are not saved, made anew; keys wrapped)."""
        t_leaves, treedef = jax.tree.flatten(template)
        out = []
        for i, (entry, t) in enumerate(zip(meta[LAYOUT_KEY], t_leaves)):
            x = arrays.get(f"leaf_{i:06d}")
            if x is None:
                x = jax.make_array_from_callback(tuple(entry["shape"]), t.sharding,
                                                 lambda index, e=entry: np.zeros(e["shape"], e["dtype"])[index])
            out.append(jax.random.wrap_key_data(x, impl=jax.random.key_impl(t)) if _is_key(t) else x)
        return jax.tree.unflatten(treedef, out)

    def _restore(self, template: Any, adapt: Any = None) -> tuple[Any, dict[str, Any], list[int], list[np.ndarray]]:
        """:meth:`restore` in this process alone; also returns the restored host leaves."""
        skipped: list[int] = []
        flat = jax.tree_util.tree_flatten_with_path(template)[0]
        paths = [p for p, _ in flat]
        template_shapes = _host_shapes(template)
        n = sum(1 for shape, _ in template_shapes if math.prod(shape))
        for step in sorted(self.manager.all_steps(), reverse=True):
            if step in self._stuck:  # reported when it was first skipped
                skipped.append(step)
                continue
            try:
                arrays, meta = self._load(step)
                self._verify(step, arrays, meta)
                layout, meta = meta.get(LAYOUT_KEY), _public(meta)
                if layout is not None:
                    leaves = unpack(arrays, layout)
                else:  # the per-leaf layout of earlier versions (zero-size leaves not stored)
                    if len(arrays) != n:
                        raise ValueError(f"checkpoint has {len(arrays)} arrays, the state {n}")
                    leaves = [np.asarray(arrays[f"{i:06d}"]) if math.prod(shape) else np.zeros(shape, dtype)
                              for i, (shape, dtype) in enumerate(template_shapes)]
                leaves = upgrade_counts(leaves, template)
                if adapt is not None:
                    leaves = adapt(leaves, meta)
                if len(leaves) == len(paths):  # else from_host names the mismatch
                    _check_recorded_nonfinite(step, paths, leaves, meta.get(NONFINITE_KEY) or [])
                # Several processes: the leader only checks here; all of them place the state together.
                state = from_host(leaves, template, place=jax.process_count() == 1)
            except LayoutError:
                raise
            except Exception as err:  # noqa: BLE001 - any unreadable step is skipped, never fatal
                warnings.warn(f"skipping checkpoint step {step} in {self.directory}: it cannot be restored "
                              f"({type(err).__name__}: {str(err)[:300]})", stacklevel=3)
                skipped.append(step)
                continue
            if skipped:
                self._set_aside([s for s in skipped if s not in self._stuck])
            return state, meta, skipped, leaves
        raise NoCheckpointError(
            f"no restorable checkpoint in {self.directory}" + (f" (skipped unreadable steps {skipped})" if skipped
                                                               else " (it holds none)"))

    def _set_aside(self, steps: list[int]) -> None:
        """Moves unreadable steps out of Orbax's sight (kept for inspection, never deleted) so the
        resumed run can write those step numbers again. Never raises.

        First choice: ``RUN_DIR/checkpoints_unreadable/<step>-<time>``. If that fails (no permission
        on the run directory, ``checkpoints/`` on another file system), the step is renamed in place
        to ``<step>.unreadable-<time>``, a name Orbax does not list. If that fails too, the step is
        left where it is and remembered: restores skip it, and a save of the same step number first
        tries again to move it and, failing, is skipped with a warning instead of colliding with it.
        """
        for step in steps:
            src = self.directory / str(step)
            if not src.exists():
                continue
            stamp = time.strftime("%Y%m%dT%H%M%S")
            reasons = []
            try:
                aside = self.directory.parent / "checkpoints_unreadable"
                aside.mkdir(exist_ok=True)
                dst = _unused(aside, f"{step}-{stamp}")
                os.replace(src, dst)
                warnings.warn(f"moved unreadable checkpoint step {step} to {dst}", stacklevel=4)
                continue
            except OSError as err:
                reasons.append(f"{type(err).__name__}: {err}")
            try:
                dst = _unused(self.directory, f"{step}.unreadable-{stamp}")
                os.replace(src, dst)
                warnings.warn(f"moved unreadable checkpoint step {step} to {dst} (could not move it to "
                              f"checkpoints_unreadable/: {reasons[0]})", stacklevel=4)
                continue
            except OSError as err:
                reasons.append(f"{type(err).__name__}: {err}")
            self._stuck.add(step)
            warnings.warn(f"could not move unreadable checkpoint step {step} out of {self.directory} "
                          f"({'; '.join(reasons)}); it is left in place and skipped, and a later save of "
                          f"step {step} in this run is skipped unless it can be moved by then", stacklevel=4)
        if self.sharded:  # every process refreshes its shared manager together (restore)
            return
        try:
            self.manager.reload()
        except Exception as err:  # noqa: BLE001 - the listing is refreshed again on the next call
            warnings.warn(f"could not refresh the checkpoint listing of {self.directory}: {err}", stacklevel=4)

    def _clear_stuck(self, step: int) -> bool:
        """Before saving ``step`` over an unreadable step left in place: whether it is gone now."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self._stuck.discard(step)
            self._set_aside([step])
        if step not in self._stuck:
            for w in caught:
                warnings.warn(w.message, w.category, stacklevel=3)
            return True
        warnings.warn(f"not saving checkpoint step {step}: an unreadable checkpoint of that step is still in "
                      f"{self.directory} and cannot be moved aside; the next save proceeds", stacklevel=3)
        return False

    def close(self) -> None:
        if self.manager is not None:
            self.manager.wait_until_finished()
            self.manager.close()


def _public(meta: Mapping[str, Any]) -> dict[str, Any]:
    """A restored meta without the checkpointer's own entries (layout, checksums, shards)."""
    return {k: v for k, v in meta.items() if k not in (LAYOUT_KEY, CHECKSUM_KEY, SHARDS_KEY)}


def _refuse_nonfinite(step: int, flat: list[tuple[Any, Any]], counts: dict[int, int], sizes: list[int]) -> None:
    """Raises the :class:`NonFiniteStateError` of a save whose leaves ``counts`` hold NaN/inf."""
    named = {jax.tree_util.keystr(flat[i][0]): n for i, n in counts.items()}
    shown = ", ".join(f"{jax.tree_util.keystr(flat[i][0])}: {n} of {sizes[i]}" for i, n in list(counts.items())[:5])
    more = f" and {len(named) - 5} more leaves" if len(named) > 5 else ""
    raise NonFiniteStateError(
        f"not saving checkpoint step {step}: the state holds NaN/inf values in {len(named)} leaves "
        f"({shown}{more}); the newest saved checkpoint is left as it was. Pass nonfinite_ok=True to "
        f"save it anyway (a sweep with a diverged member)", named)


def _unused(directory: pathlib.Path, name: str) -> pathlib.Path:
    """``directory / name``, or with ``-1``, ``-2``... appended if that exists."""
    path, i = directory / name, 0
    while path.exists():
        i += 1
        path = directory / f"{name}-{i}"
    return path


def _check_recorded_nonfinite(step: int, paths: list[tuple[Any, ...]], leaves: list[np.ndarray],
                              recorded: list[dict[str, Any]]) -> None:
    """Raises :class:`CheckpointIntegrityError` if restored leaves hold NaN/inf other than recorded."""
    expected = {int(r["leaf"]): int(r["count"]) for r in recorded}
    actual = _nonfinite_by_leaf(paths, leaves)
    wrong = [i for i in sorted(set(expected) | set(actual)) if expected.get(i, 0) != actual.get(i, 0)]
    if wrong:
        shown = ", ".join(f"{jax.tree_util.keystr(paths[i])}: {actual.get(i, 0)} (saved with {expected.get(i, 0)})"
                          for i in wrong[:5])
        raise CheckpointIntegrityError(f"step {step} holds NaN/inf values its meta does not record, in "
                                       f"{len(wrong)} leaves: {shown}")
