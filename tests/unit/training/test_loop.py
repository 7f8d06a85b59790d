"""What the loop reports for a chunk (the options it takes: tests/unit/training/test_options.py).

A chunk of K updates hands the host one row: each metric's mean over the K updates (the desync
checksum spread: its max, so one bad update is never averaged away), and the episodes that finished
in any of the K updates, summed; and one finer row per ``log_every`` updates, reduced the same way
over its updates. Checked on a fake update with known per-update outputs, through the same
compiled, packed path ``train()`` uses (``make_chunk``, ``pack_output``, ``chunk_row``,
``update_rows``), and on a real run's files.
"""

from __future__ import annotations

import types

import jax
import jax.numpy as jnp
import numpy as np

from rljax.agents.base import UpdateOutput
from rljax.training.program import Plan, make_chunk, pack_output
from rljax.training.loop import chunk_row, cpu_devices_note, update_rows
from rljax.core.rollout import EpisodeSummary

K = 4


def _fake_update(s: jax.Array) -> tuple[jax.Array, UpdateOutput]:
    """Update ``s`` (0, 1, 2, ...): loss ``s``, a desync only at update 1, one episode finished at
    odd updates with return ``10 s`` and length ``s + 1``."""
    f = s.astype(jnp.float32)
    finished = (s % 2).astype(jnp.float32)
    metrics = {"a_loss": f, "param_desync": jnp.where(s == 1, 2.0, 0.0).astype(jnp.float32)}
    episodes = EpisodeSummary(count=finished, return_sum=10.0 * f * finished, length_sum=(f + 1.0) * finished,
                              components={"bonus": finished})
    return s + 1, UpdateOutput(metrics, episodes)


def test_chunk_rows_average_updates_and_sum_episodes():
    packed, unpack = pack_output(make_chunk(_fake_update, K, None))
    compiled = jax.jit(packed).lower(jnp.int32(0)).compile()
    state, vec = compiled(jnp.int32(0))
    assert int(state) == K
    out = unpack(jax.device_get(vec))
    plan = Plan(num_updates=2 * K, updates_per_chunk=K, num_chunks=2, env_steps_per_update=3)
    row = chunk_row(plan, 0, out, wall=1.0, chunk_s=1.0)

    s = np.arange(K)
    odd = s % 2 == 1
    assert row["a_loss"] == np.mean(s)                           # mean over the chunk's updates
    assert row["param_desync"] == 2.0                            # max: update 1's desync survives
    assert row["episodes"] == odd.sum()                          # episodes of every update, summed
    assert row["episode_return_mean"] == np.sum(10.0 * s[odd]) / odd.sum()
    assert row["episode_length_mean"] == np.sum(s[odd] + 1.0) / odd.sum()
    assert row["reward_components/bonus"] == 1.0
    assert (row["updates"], row["env_steps"]) == (K, 3 * K)

    # The second chunk continues from the state: updates K .. 2K-1.
    _, vec = compiled(state)
    row = chunk_row(plan, 1, unpack(jax.device_get(vec)), wall=2.0, chunk_s=1.0)
    s2 = np.arange(K, 2 * K)
    assert row["a_loss"] == np.mean(s2) and row["param_desync"] == 0.0
    assert row["episode_return_mean"] == np.sum(10.0 * s2[s2 % 2 == 1]) / np.sum(s2 % 2 == 1)
    assert (row["updates"], row["env_steps"]) == (2 * K, 6 * K)


def test_update_rows_reduce_each_group_of_updates_by_hand():
    plan = Plan(num_updates=2 * K, updates_per_chunk=K, num_chunks=2, env_steps_per_update=3)
    for log_every, groups in [(1, [[0], [1], [2], [3]]), (3, [[0, 1, 2], [3]]), (K, [[0, 1, 2, 3]])]:
        packed, unpack = pack_output(make_chunk(_fake_update, K, None, log_every))
        compiled = jax.jit(packed).lower(jnp.int32(0)).compile()
        state, vec = compiled(jnp.int32(0))
        _, vec = compiled(state)  # the second chunk: updates K .. 2K-1
        rows = update_rows(plan, 1, unpack(jax.device_get(vec)).updates, log_every)
        assert len(rows) == len(groups)
        for row, group in zip(rows, groups):
            s = K + np.array(group)
            odd = s[s % 2 == 1]
            assert (row["updates"], row["env_steps"]) == (s[-1] + 1, 3 * (s[-1] + 1))  # at the group's end
            assert row["a_loss"] == np.mean(s) and row["param_desync"] == 0.0
            assert row["episodes"] == len(odd)
            assert row["episode_return_mean"] == (np.sum(10.0 * odd) / len(odd) if len(odd) else None)
            assert row["episode_length_mean"] == (np.sum(odd + 1.0) / len(odd) if len(odd) else None)
            assert row["reward_components/bonus"] == (1.0 if len(odd) else None)
            assert "wall_time_s" not in row and "sps" not in row  # the chunk's own columns are not a group's


def test_a_run_writes_a_row_per_update_and_one_per_chunk(tmp_path):
    import rljax
    from rljax.store.tracking import read_chunks, read_metrics
    from tests.support.runs import PPO_SMALL  # 6 chunks of 2 updates

    result = rljax.train(PPO_SMALL, options=rljax.RunOptions(run_dir=str(tmp_path), quiet=True, checkpoints=False))
    rows, chunks = read_metrics(tmp_path), read_chunks(tmp_path)
    assert [r["updates"] for r in rows] == list(range(1, 13)) and [r["updates"] for r in chunks] == list(range(2, 13, 2))
    assert chunks == [{k: v for k, v in r.items()} for r in result.rows]  # chunks.jsonl is what the hooks saw
    for i, chunk in enumerate(chunks):
        pair = rows[2 * i:2 * i + 2]
        assert sum(r["episodes"] for r in pair) == chunk["episodes"]
        np.testing.assert_allclose(np.mean([r["policy_loss"] for r in pair]), chunk["policy_loss"], rtol=1e-5, atol=1e-7)
        assert pair[1]["sps"] == chunk["sps"] and "sps" not in pair[0]  # the chunk's columns on its last row
    manifest = __import__("json").loads((tmp_path / "manifest.json").read_text())
    assert manifest["plan"]["log_every"] == 1
    # A row never spans two chunks: a log_every above the chunk's 2 updates is used, and recorded, as 2.
    rljax.train(PPO_SMALL, options=rljax.RunOptions(run_dir=str(tmp_path / "b"), quiet=True, checkpoints=False,
                                                    log_every=7))
    assert __import__("json").loads((tmp_path / "b" / "manifest.json").read_text())["plan"]["log_every"] == 2
    assert [r["updates"] for r in read_metrics(tmp_path / "b")] == list(range(2, 13, 2))


def _program(num_devices: int, platform: str = "cpu", isolated: bool = False):
    device = types.SimpleNamespace(platform=platform)
    return types.SimpleNamespace(parallel=types.SimpleNamespace(num_devices=num_devices, devices=[device] * num_devices),
                                 isolated=isolated)


def test_only_a_data_parallel_run_on_fake_cpu_devices_is_warned_it_will_be_slower():
    assert cpu_devices_note(_program(2)).startswith("note: the 2 CPU devices are fake devices sharing this machine's "
                                                    "cores: expect the run to be slower than on 1 device")
    # A sweep split over the cores runs faster than on one device: it used to get the same note.
    assert cpu_devices_note(_program(2, isolated=True)) is None
    assert cpu_devices_note(_program(1)) is None and cpu_devices_note(_program(4, platform="gpu")) is None
