"""Checkpoints in shards: every process of a multi-process run writes and reads only its own shards.

A multi-process train state is split over the devices of every process along its leading axis (the
``[D]`` device axis of a data-parallel run, the ``[P]`` member axis of a sweep). Gathering it into
one process at every save costs that process the whole state in host memory (a replay-heavy state
may not fit) and moves it over the network. A sharded save hands Orbax the global arrays
themselves: every process calls the save, Orbax writes each process's shards (its own OCDBT
subdirectory of the step) and commits the step once all of them have written, and no process copies
more than its own shards to the host. rljax adds what a whole checkpoint has:

* a CRC-32 of every shard (:func:`shard_checksums` of :func:`local_shards`, gathered from every process into the step's
  meta) and of the meta, checked at restore by each process on the shards it reads
  (:func:`verify_shards`) and by a whole read on all of them;
* NaN/inf counted on each process's shards and added up, so every process refuses (or records) the
  same save;
* a restore on the same layout in which each process reads only its shards; any other reader (a
  resume on another device or process count, ``rljax eval``/``export``/``inspect`` in one process)
  reads the whole arrays as NumPy (:func:`host_targets`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

__all__ = ["SHARDS_KEY", "local_shards", "shard_checksums", "verify_shards", "host_targets", "device_targets"]

SHARDS_KEY = "_shards"
"""Meta entry of a step saved in shards: ``{"processes": P, "devices": D}``, the layout it was saved on."""


def _rows(index: tuple[slice, ...], shape: tuple[int, ...]) -> str:
    """A shard's name in the checksums: ``"start:stop"`` of its leading axis (``"all"`` for a 0-d array)."""
    if not shape:
        return "all"
    first = index[0] if index else slice(None)
    return f"{first.start or 0}:{first.stop if first.stop is not None else shape[0]}"


def _crc32(x: np.ndarray) -> int:
    import zlib

    return zlib.crc32(np.ascontiguousarray(x).view(np.uint8).ravel()) & 0xFFFFFFFF


def local_shards(arrays: Mapping[str, Any]) -> dict[str, dict[str, np.ndarray]]:
    """The shards this process writes (``replica_id == 0``: one copy of each), copied to the host
    once, by array name and :func:`_rows` name. No collective."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for name, x in arrays.items():
        for shard in x.addressable_shards:
            if shard.replica_id == 0:
                out.setdefault(name, {})[_rows(shard.index, x.shape)] = np.asarray(shard.data)
    return out


def shard_checksums(local: Mapping[str, Mapping[str, np.ndarray]]) -> dict[str, dict[str, int]]:
    """The CRC-32 of each of :func:`local_shards`' shards, keyed alike. No collective: the caller
    gathers every process's."""
    return {name: {rows: _crc32(data) for rows, data in by_rows.items()} for name, by_rows in local.items()}


def verify_shards(name: str, x: Any, recorded: Mapping[str, int], step: Any) -> None:
    """Checks array ``name`` against its recorded shard checksums: every shard of a whole NumPy array,
    or the shards of a global array that this process holds.

    Raises:
        ValueError: a shard's data differs from what was saved (the message names it), or a shard
            has no checksum.
    """
    if isinstance(x, np.ndarray):
        pieces = [(rows, x if rows == "all" else x[int(rows.split(":")[0]):int(rows.split(":")[1])])
                  for rows in recorded]
    else:
        pieces = [(_rows(s.index, x.shape), np.asarray(s.data)) for s in x.addressable_shards if s.replica_id == 0]
    for rows, data in pieces:
        if rows not in recorded:
            raise ValueError(f"step {step}: array {name!r} has a shard (rows {rows}) without a checksum")
        got = _crc32(data)
        if got != recorded[rows]:
            raise ValueError(f"step {step}: array {name!r}, rows {rows}, fails its CRC-32 check (saved "
                             f"{recorded[rows]:#010x}, read {got:#010x}): its data is damaged")


def host_targets(layout: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Restore targets that make Orbax read a sharded step as whole NumPy arrays, in any process
    (``np.empty``: nothing is written until Orbax fills them)."""
    return {f"leaf_{i:06d}": np.empty(tuple(e["shape"]), np.dtype(e["dtype"])) for i, e in enumerate(layout)
            if int(np.prod(e["shape"], dtype=np.int64))}


def device_targets(layout: list[dict[str, Any]], template: Any) -> dict[str, jax.ShapeDtypeStruct]:
    """Restore targets that make Orbax read a sharded step onto ``template``'s devices: each process
    reads only the shards of its own devices."""
    leaves = jax.tree.leaves(template)
    return {f"leaf_{i:06d}": jax.ShapeDtypeStruct(tuple(e["shape"]), np.dtype(e["dtype"]), sharding=leaves[i].sharding)
            for i, e in enumerate(layout) if int(np.prod(e["shape"], dtype=np.int64))}
