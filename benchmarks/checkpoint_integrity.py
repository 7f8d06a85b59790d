"""What checkpoint integrity costs: checksums and the finite check at save, verification at restore.

    python -m benchmarks.checkpoint_integrity            # PPO CartPole state and DQN with a 1e6 buffer
    python -m benchmarks.checkpoint_integrity --repeats 9

For each state, interleaved, ``repeats`` times each:
  * ``save+commit``: ``Checkpointer.save`` then ``wait`` (the whole write), with checksums and the
    finite check (the default), with checksums only off (``checksums=False``), and with both off
    (the finite check patched out: what a save cost before either existed);
  * ``save call``: the synchronous part of ``save`` alone (host copy, pack, checks, hand-off to
    Orbax), which is what the training loop waits for; the write itself overlaps the next chunk;
  * ``restore``: ``Checkpointer.restore`` of the newest step (checksums verified when present);
  * the checksum and finite check on their own, on the same host arrays, and their throughput.

The DQN replay buffer is filled with random values (an empty one is zeros, which compress to
nothing and would make the write look cheaper than in a real run).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
import warnings

import jax
import numpy as np

import envs
from rljax.store import checkpoint as ckpt_lib
from rljax.agents.dqn import DQNConfig
from rljax.agents.ppo import PPOConfig
from rljax.store.checkpoint import Checkpointer, pack, to_host
from rljax.agents import build_agent
from rljax.training.program import plan_updates

from benchmarks.ppo_cartpole import PUREJAXRL


def init_state(cfg) -> object:
    env, params = envs.make(cfg.env)
    agent = build_agent(cfg, env, params, None)
    plan = plan_updates(cfg.total_timesteps, agent.env_steps_per_update, cfg.updates_per_chunk)
    return jax.jit(lambda k: agent.init(k, 0, plan.num_updates, cfg.hyperparams(), params))(jax.random.key(0))


def fill_large_leaves(state, min_size: int = 100_000):
    """Random values in every leaf of at least ``min_size`` elements (the replay buffer)."""
    rng = np.random.default_rng(0)

    def fill(x):
        if getattr(x, "size", 0) < min_size or jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            return x
        if jax.numpy.issubdtype(x.dtype, jax.numpy.floating):
            return jax.numpy.asarray(rng.standard_normal(x.shape), x.dtype)
        if x.dtype == bool:
            return jax.numpy.asarray(rng.integers(0, 2, x.shape).astype(bool))
        return jax.numpy.asarray(rng.integers(0, 2, x.shape), x.dtype)

    return jax.tree.map(fill, state)


@contextlib.contextmanager
def finite_check_off():
    real = ckpt_lib._nonfinite_by_leaf
    ckpt_lib._nonfinite_by_leaf = lambda paths, leaves: {}
    try:
        yield
    finally:
        ckpt_lib._nonfinite_by_leaf = real


def best_and_median(xs: list[float]) -> str:
    return f"{1e3 * min(xs):8.2f} / {1e3 * statistics.median(xs):8.2f}"


def measure(label: str, state, repeats: int) -> dict:
    host = to_host(state)
    nbytes = sum(x.nbytes for x in host)
    paths = [p for p, _ in jax.tree_util.tree_flatten_with_path(state)[0]]
    arrays, layout = pack(host)
    meta = {"env_steps": 0, ckpt_lib.LAYOUT_KEY: layout}
    parts = {"checksum": [], "verify": [], "finite check": []}
    for _ in range(repeats):
        t0 = time.perf_counter()
        record = ckpt_lib.checksums(arrays, meta)
        parts["checksum"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        ckpt_lib.verify(arrays, {**meta, ckpt_lib.CHECKSUM_KEY: record})
        parts["verify"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        ckpt_lib._nonfinite_by_leaf(paths, host)
        parts["finite check"].append(time.perf_counter() - t0)

    variants = {"checksums + finite check": (True, False), "finite check only": (False, False),
                "neither (before)": (False, True)}
    save_call = {k: [] for k in variants}
    commit = {k: [] for k in variants}
    restore = {k: [] for k in variants}
    with tempfile.TemporaryDirectory() as tmp:
        ckpts = {k: Checkpointer(f"{tmp}/{i}", checksums=on) for i, (k, (on, _)) in enumerate(variants.items())}
        for step in range(1, repeats + 1):
            for name, (_, finite_off) in variants.items():
                c = ckpts[name]
                with finite_check_off() if finite_off else contextlib.nullcontext():
                    t0 = time.perf_counter()
                    c.save(step, state, {"env_steps": step})
                    t1 = time.perf_counter()
                    c.wait()
                    t2 = time.perf_counter()
                save_call[name].append(t1 - t0)
                commit[name].append(t2 - t0)
                t0 = time.perf_counter()
                with finite_check_off() if finite_off else contextlib.nullcontext():
                    c.restore(state)
                restore[name].append(time.perf_counter() - t0)
        for c in ckpts.values():
            c.close()

    print(f"\n{label}: {len(host)} leaves, {nbytes / 1e6:.2f} MB, {len(arrays)} arrays saved; "
          f"{repeats} repeats, ms best / median")
    print(f"  {'':28s} {'save call':>19s} {'save+commit':>19s} {'restore':>19s}")
    for name in variants:
        print(f"  {name:28s} {best_and_median(save_call[name]):>19s} {best_and_median(commit[name]):>19s} "
              f"{best_and_median(restore[name]):>19s}")
    for name, xs in parts.items():
        print(f"  {name:28s} {best_and_median(xs)}   ({nbytes / min(xs) / 1e9:.2f} GB/s)")
    base = statistics.median(commit["neither (before)"])
    full = statistics.median(commit["checksums + finite check"])
    print(f"  save+commit, median: {100 * (full / base - 1):+.1f}% with checksums and finite check")
    return dict(label=label, nbytes=nbytes,
                **{f"commit_{k}_ms": 1e3 * statistics.median(v) for k, v in commit.items()},
                **{f"{k}_ms": 1e3 * min(v) for k, v in parts.items()})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    warnings.filterwarnings("ignore", message=".*has no checksums")  # the "neither" variant's restores
    measure("PPO CartPole (PureJaxRL config)", init_state(PPOConfig(**PUREJAXRL)), a.repeats)
    dqn = DQNConfig(buffer_size=1_000_000, total_timesteps=2_000_000)
    measure("DQN CartPole, 1e6-transition buffer (filled)", fill_large_leaves(init_state(dqn)), a.repeats)


if __name__ == "__main__":
    main()
