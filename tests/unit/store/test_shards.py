"""Checkpoints in shards (:mod:`rljax.store.shards`) in one process: shard checksums, their check on
whole and on placed arrays, and the restore targets. Saving and restoring in shards across real
processes (2 x 2 on loopback: bit-exact resume, a damaged shard skipped, another layout) is in
tests/integration/test_multihost.py."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.store.shards import _crc32, device_targets, host_targets, local_shards, shard_checksums, verify_shards


def test_one_device_holds_one_shard_of_every_row():
    arrays = {"a": jnp.arange(6.0).reshape(3, 2), "s": jnp.float32(2.0)}
    crcs = shard_checksums(local_shards(arrays))
    assert crcs == {"a": {"0:3": _crc32(np.arange(6.0, dtype=np.float32).reshape(3, 2))},
                    "s": {"all": _crc32(np.float32(2.0))}}
    verify_shards("a", arrays["a"], crcs["a"], step=5)  # the placed array: this process's shards


def test_a_whole_array_is_checked_shard_by_shard_and_damage_is_named():
    whole = np.arange(12, dtype=np.int32).reshape(4, 3)
    recorded = {"0:2": _crc32(whole[:2]), "2:4": _crc32(whole[2:])}
    verify_shards("leaf_000003", whole, recorded, step=7)
    damaged = whole.copy()
    damaged[3, 1] ^= 1
    with pytest.raises(ValueError, match=r"step 7: array 'leaf_000003', rows 2:4, fails its CRC-32 check"):
        verify_shards("leaf_000003", damaged, recorded, step=7)
    with pytest.raises(ValueError, match=r"rows 0:3\) without a checksum"):
        verify_shards("x", jnp.zeros((3,)), {"0:2": 0}, step=1)


def test_restore_targets_skip_zero_size_leaves_and_carry_the_template_shardings():
    layout = [{"shape": [4, 3], "dtype": "float32", "packed": False},
              {"shape": [0, 2], "dtype": "int32", "packed": False},
              {"shape": [2], "dtype": "uint32", "packed": False}]
    host = host_targets(layout)
    assert sorted(host) == ["leaf_000000", "leaf_000002"]
    assert host["leaf_000000"].shape == (4, 3) and host["leaf_000002"].dtype == np.uint32
    template = [jnp.zeros((4, 3)), jnp.zeros((0, 2), jnp.int32), jax.random.key(0)]
    placed = device_targets(layout, template)
    assert sorted(placed) == ["leaf_000000", "leaf_000002"]
    assert placed["leaf_000002"].sharding == template[2].sharding
