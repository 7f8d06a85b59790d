"""Helpers for tests that compare whole runs: bit-exact states, metrics rows without their measured
columns, a checkpoint's final leaves, a checkpoint's meta alone, and a CLI run stopped by SIGTERM once it
has made progress."""

from __future__ import annotations

import json
import pathlib
import signal
import subprocess

import jax
import numpy as np

from rljax.agents.ppo import PPOConfig
from rljax.store.checkpoint import Checkpointer
from rljax.training.hooks.observe import is_measured

PPO_SMALL = PPOConfig(total_timesteps=8 * 16 * 12, updates_per_chunk=2, num_envs=8, num_steps=16, num_epochs=2,
                      num_minibatches=2, hidden_sizes=(16,), normalize_obs=True, normalize_reward=True)
"""A PPO run of 6 chunks (2 updates each) small enough to train several times in one test."""


def leaves(state) -> list[np.ndarray]:
    """``state``'s leaves as host numpy arrays (typed PRNG keys as their key data)."""
    return [np.asarray(jax.random.key_data(x)) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
            else np.asarray(x) for x in jax.tree.leaves(state)]


def assert_same_bits(a, b) -> None:
    """Asserts that two states have the same leaves, dtype for dtype and bit for bit."""
    la, lb = leaves(a), leaves(b)
    assert len(la) == len(lb)
    for i, (x, y) in enumerate(zip(la, lb)):
        assert x.dtype == y.dtype and np.array_equal(x, y), f"leaf {i} differs"


def strip(rows):
    """The rows without their measured columns (wall_time_s, sps, time/*, memory/*:
    :func:`rljax.training.hooks.observe.is_measured`), which differ between identical runs."""
    return [{k: v for k, v in r.items() if not is_measured(k)} for r in rows]


def checkpoint_meta(run_dir, step, config, meta_text=None, **meta) -> None:
    """Writes only the JSON meta of checkpoint ``step`` in ``run_dir`` (``{"config": config, **meta}``, or
    ``meta_text`` as it is): what a run directory's readers see, with no state behind it."""
    path = pathlib.Path(run_dir) / "checkpoints" / str(step) / "meta"
    path.mkdir(parents=True)
    (path / "metadata").write_text(meta_text if meta_text is not None else json.dumps({"config": config, **meta}))


def final_leaves(run_dir) -> list[np.ndarray]:
    """The leaves of the newest checkpoint in ``run_dir``, read without a template state."""
    ckpt = Checkpointer(run_dir)
    out = ckpt.read(max(ckpt.steps()))[0]
    ckpt.close()
    return out


def sigterm_after_progress(cmd: list, env: dict, cwd, stderr_path, lines: int = 2) -> tuple[int, str]:
    """Runs ``cmd``, sends it SIGTERM once it has printed ``lines`` progress lines, and returns its
    exit status and stderr (written to ``stderr_path``: a file, not a pipe nobody reads while we wait).
    The calling test's timeout ends a run that never prints."""
    with open(stderr_path, "w") as stderr:
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=stderr, text=True)
        try:
            progress = 0
            while progress < lines:
                line = proc.stdout.readline()
                assert line, f"the run ended before progress line {lines}: {proc.wait()} " \
                             f"{pathlib.Path(stderr_path).read_text()[-2000:]}"
                progress += line.startswith("[")
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=300)
        finally:
            proc.kill()
    return proc.returncode, pathlib.Path(stderr_path).read_text()


def tb_events(logdir) -> list:
    """``(step, [summary values])`` of every summary event of every tensorboard event file in ``logdir``
    (not below it), in file order: the TFRecord framing read by hand, the events with tensorboardX's protos."""
    import struct

    from tensorboardX.proto.event_pb2 import Event

    out = []
    for path in sorted(pathlib.Path(logdir).glob("events.out.tfevents.*")):
        data, offset = path.read_bytes(), 0
        while offset < len(data):
            (n,) = struct.unpack("Q", data[offset:offset + 8])
            event = Event.FromString(data[offset + 12:offset + 12 + n])
            offset += 16 + n
            if event.HasField("summary"):
                out.append((event.step, list(event.summary.value)))
    return out


def tb_summaries(logdir) -> list:
    """Every summary value of :func:`tb_events` of ``logdir``, as ``(step, value)``."""
    return [(step, v) for step, values in tb_events(logdir) for v in values]
