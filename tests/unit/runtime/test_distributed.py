"""Multi-process helpers (:mod:`rljax.runtime.distributed`) in a single process: reading the cluster
environment (and what it refuses, naming the variable), and the collectives, which reduce to the
identity on one process. Two real processes: tests/integration/test_multihost.py."""

from __future__ import annotations

import pathlib
import signal

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.runtime import distributed


def test_cluster_environment_is_read_and_checked():
    request = distributed._cluster_request
    assert request({}) is None
    assert request({"RLJAX_NUM_PROCESSES": "1"}) is None
    assert request({"RLJAX_NUM_PROCESSES": "2", "RLJAX_PROCESS_ID": "1", "RLJAX_COORDINATOR": "h:1"}) == {
        "coordinator_address": "h:1", "num_processes": 2, "process_id": 1}
    assert request({"SLURM_NTASKS": "4", "SLURM_STEP_ID": "0"}) == {}  # srun: JAX detects the rest
    assert request({"SLURM_NTASKS": "4"}) is None  # the batch script itself, outside srun
    assert request({"OMPI_COMM_WORLD_SIZE": "2"}) == {}
    assert request({"SLURM_NTASKS": "4", "SLURM_STEP_ID": "0", "RLJAX_DISTRIBUTED": "off"}) is None
    for env, words in (({"RLJAX_NUM_PROCESSES": "2", "RLJAX_PROCESS_ID": "2", "RLJAX_COORDINATOR": "h:1"},
                        "must be an integer in 0..1"),
                       ({"RLJAX_NUM_PROCESSES": "2", "RLJAX_PROCESS_ID": "0"}, "expected host:port"),
                       ({"RLJAX_NUM_PROCESSES": "two"}, "RLJAX_NUM_PROCESSES='two' is not an integer"),
                       ({"RLJAX_NUM_PROCESSES": "0"}, "RLJAX_NUM_PROCESSES=0 must be >= 1"),
                       ({"RLJAX_DISTRIBUTED": "yes"}, "expected 'auto' or 'off'")):
        with pytest.raises(ValueError, match=words):
            request(env)


def test_a_single_process_environment_initialises_nothing():
    assert distributed.initialize_from_env({}) is None
    assert not distributed.is_initialized()


def test_the_leader_is_read_from_the_environment():
    assert distributed.launched_as_leader({})
    assert distributed.launched_as_leader({"RLJAX_PROCESS_ID": "0", "SLURM_PROCID": ""})
    for name in ("RLJAX_PROCESS_ID", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"):
        assert not distributed.launched_as_leader({name: "1"})


def test_one_process_helpers_are_local():
    assert distributed.process_count() == 1 and distributed.process_index() == 0 and distributed.is_leader()
    assert distributed.broadcast_json({"a": [1, None]}) == {"a": [1, None]}
    assert distributed.allgather_json(3) == [3]
    floats = distributed.allgather_floats([3, 0.5, 2 ** 24])
    assert floats.dtype == np.float64 and floats.tolist() == [[3.0, 0.5, 2.0 ** 24]]
    assert distributed.agree(15, 2.5)[:3] == (15, 0, 2.5)
    agreed = distributed.agree(0, 7.0, (0.5, 1.25))
    assert agreed[:3] == (0, 0, 7.0) and agreed.times.tolist() == [[0.5, 1.25]]
    assert distributed.agree(0, 7.0).times.shape == (1, 0)
    x = np.arange(3)
    assert distributed.broadcast_arrays([x], [x])[0] is x
    assert np.array_equal(distributed.fetch({"x": x})["x"], x)
    record = distributed.process_record()
    assert len(record) == 1 and record[0]["process_index"] == 0 and record[0]["devices"]


def test_fetch_and_put_on_one_device():
    tree = {"a": jnp.arange(4.0), "b": (jnp.int32(7),)}
    host = distributed.fetch(tree)
    assert isinstance(host["a"], np.ndarray) and host["a"].tolist() == [0, 1, 2, 3] and int(host["b"][0]) == 7
    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    placed = distributed.put(np.arange(3, dtype=np.int32), sharding)
    assert isinstance(placed, jax.Array) and placed.sharding == sharding and placed.tolist() == [0, 1, 2]
    key = distributed.put(jax.random.key(3), sharding)
    assert jnp.array_equal(jax.random.key_data(key), jax.random.key_data(jax.random.key(3)))


def test_on_one_process_no_error_is_a_lost_peer():
    err = RuntimeError("Gloo: Connection closed by peer")
    assert not distributed.is_peer_failure(err)
    distributed.raise_if_peer_failure(err)  # returns: the caller re-raises the original
    with pytest.raises(distributed.PeerLostError):
        distributed.raise_if_peer_failure(distributed.PeerLostError("gone"))


def test_signal_names():
    assert distributed.signal_name(signal.SIGTERM) == "SIGTERM"
    assert distributed.signal_name(0) == "signal 0"


def test_without_lines_drops_only_the_prefixed_lines_even_from_native_writes(tmp_path):
    """What gloo's C++ writes to fd 1 is filtered (regression: every rank printed
    "[Gloo] Rank N is connected ..." lines); os.write stands in for a native write."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import os, sys
        from rljax.runtime.distributed import without_lines
        print("before", flush=True)
        with without_lines(1, b"[Gloo] "):
            os.write(1, b"[Gloo] Rank 0 is connected to 1 peer ranks. ")
            os.write(1, b"Expected number of connected peer ranks is : 1\\nkept 1\\n[Gloo] Rank 1 ...\\n")
            print("kept 2", flush=True)
            os.write(1, b"kept 3 without a newline")
        print("\\nafter", flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          cwd=pathlib.Path(__file__).resolve().parents[3])
    assert done.returncode == 0, done.stderr
    assert done.stdout == "before\nkept 1\nkept 2\nkept 3 without a newline\nafter\n"
