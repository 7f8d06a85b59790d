"""Reading a W&B offline run file (``run-<id>.wandb``) in tests: its history rows.

The file is a 7-byte header (``:W&B``, a magic, a version) followed by a LevelDB-style log of
32 KiB blocks whose records (CRC-32C, length, type: full, first, middle, last) carry serialised
``wandb_internal_pb2.Record`` protos; wandb 0.19+ no longer ships a Python reader.
"""

from __future__ import annotations

import json
import pathlib
import struct

BLOCK = 32 * 1024
HEADER = 7


def records(path: pathlib.Path) -> list[bytes]:
    """The payloads of the log's records, reassembled."""
    data, pos, out, pending = path.read_bytes(), HEADER, [], b""
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        pos += 7
        if kind == 0:  # zero padding to the end of the block
            pos += left - 7
            continue
        chunk, pos = data[pos:pos + length], pos + length
        if kind == 1:
            out.append(chunk)
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            out.append(pending + chunk)
    return out


def history(run_dir: pathlib.Path, run_id: str) -> list[dict]:
    """Every history row logged to the offline runs of ``run_id`` under ``run_dir/wandb``, in order."""
    from wandb.proto import wandb_internal_pb2

    rows = []
    for path in sorted((run_dir / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb")):
        for payload in records(path):
            record = wandb_internal_pb2.Record.FromString(payload)
            if record.WhichOneof("record_type") == "history":
                rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                             for item in record.history.item})
    return rows
