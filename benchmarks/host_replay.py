"""Replay in host memory against replay on the device: memory, adding, and an update's sampling.

    python -m benchmarks.host_replay                        # 1e5 Atari-sized items, 1e6 MinAtar-sized
    python -m benchmarks.host_replay --atari 1000000        # the 1e6-item Atari buffer (~7 GB of RAM)

Atari-sized items: 3-step items of ``[84, 84, 4]`` uint8 stacked frames (a new random frame a step,
episodes of ``--episode`` steps, 8 envs), as an actor makes them of EnvPool's Atari. MinAtar-sized:
``[10, 10, 4]`` uint8 observations with nothing shared between steps (MinAtar's channels are not a
frame stack), stored as they are (``frames_per_item=0``). For each: the buffer's bytes (host: :attr:`HostReplay.nbytes`;
device: the skeleton's ring buffer of the same items, allocated where it fits, else computed from
its shapes), items added per second, and one update's sampling of ``--gradient-steps`` batches of
``--batch-size``: host = the device's indices for the key (:func:`sample_indices`), the gather on the
host and the transfer to the device; device = the compiled sample of the same slots. Both read the
same items for the same key (checked on the first key). Prioritised (``--prioritized``): an update's
``--gradient-steps`` steps of proportional sampling, each setting the priorities of its batch (from
the items drawn) before the next draws; host = the sum tree on the device and each batch fetched from
host memory in the compiled loop (what ``--replay host --prioritized`` runs), device = the
skeleton's prioritised buffer. Both draw the same slots (checked on the first key).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def _stream(num_items: int, shape: tuple[int, ...], stacked: bool, episode: int, envs: int = 8,
            chunk: int = 4096):
    """Batches of items ``[chunk]`` (time-major over ``envs`` streams) of 3-step items: obs ``o_t``,
    next obs ``o_{t+3}`` (the episode's final observation near its end)."""
    from rljax.agents.offpolicy import ReplayItem

    rng = np.random.default_rng(0)
    k = shape[-1]
    frames = [list(rng.integers(0, 256, (k, *shape[:-1]), np.uint8)) for _ in range(envs)]
    t = np.zeros(envs, int)
    done = 0
    while done < num_items:
        rows = min(chunk, num_items - done)
        obs, nxt = np.empty((rows, *shape), np.uint8), np.empty((rows, *shape), np.uint8)
        for i in range(rows):
            e = i % envs
            if stacked:
                frames[e].append(rng.integers(0, 256, shape[:-1], np.uint8))
                window = frames[e][-(k + 3):]
                obs[i] = np.stack(window[:k], -1)
                nxt[i] = np.stack(window[-k:] if t[e] + 3 < episode else window[:k], -1)
                del frames[e][:-(k + 3)]
            else:
                obs[i], nxt[i] = rng.integers(0, 2, shape, np.uint8), rng.integers(0, 2, shape, np.uint8)
            t[e] = (t[e] + 1) % episode
        yield ReplayItem(obs=obs, action=np.zeros(rows, np.int32), reward=np.ones(rows, np.float32),
                         discount=np.full(rows, 0.97, np.float32), next_obs=nxt, valid=np.ones(rows, bool))
        done += rows


def measure(name: str, capacity: int, shape: tuple[int, ...], stacked: bool, args: argparse.Namespace) -> dict:
    import jax

    from rljax.actorlearner.hostreplay import HostReplay, sample_indices
    from rljax.agents.offpolicy import make_replay

    example = next(_stream(1, shape, stacked, args.episode))
    one = jax.tree.map(lambda x: x[0], example)
    host = HostReplay(one, capacity, n_step=3, frames_per_item=1.5 if stacked else 0)
    t0 = time.perf_counter()
    for batch in _stream(capacity, shape, stacked, args.episode):
        host.add(batch, num_envs=8)
    add_s = time.perf_counter() - t0
    item_bytes = sum(np.asarray(x).nbytes for x in jax.tree.leaves(one))
    device_bytes = capacity * item_bytes
    fits = device_bytes < args.device_limit_gb * 2**30
    device = make_replay(capacity, prioritized=False)
    prioritized = make_replay(capacity, prioritized=True)
    out = {"name": name, "items": capacity, "host_bytes": host.nbytes, "device_bytes": device_bytes,
           "add_per_s": capacity / add_s, "device_fits": fits}
    keys = [jax.random.key(i) for i in range(args.rounds)]
    times = []
    for key in keys:
        t0 = time.perf_counter()
        indices = sample_indices(key, host.size, args.gradient_steps, args.batch_size)
        batch = jax.block_until_ready(jax.device_put(host.gather(indices)))
        times.append(time.perf_counter() - t0)
    out["host_sample_ms"] = 1e3 * float(np.median(times[1:]))
    if args.prioritized:  # the learner's own sampling of items in host memory
        from rljax.actorlearner.offpolicy import host_sampled

        sampled = host_sampled(prioritized, lambda: host, lambda: one)
        tree = _host_tree(prioritized, host, capacity)
        out["host_per_ms"], host_slots, _ = _prioritized_update_ms(sampled, tree, keys, args)
    if fits:
        adder = jax.jit(prioritized.add if args.prioritized else device.add, donate_argnums=(0,))
        buffer = (prioritized if args.prioritized else device).init(jax.tree.map(np.asarray, one), 0.6)
        for items in _stream(capacity, shape, stacked, args.episode):
            buffer = adder(buffer, items)
        if args.prioritized:
            out["device_per_ms"], device_slots, buffer = _prioritized_update_ms(prioritized, buffer, keys, args)
            out["same_per_slots"] = bool(np.array_equal(host_slots, device_slots))
            buffer = buffer.replay  # the uniform sampling below reads the same ring

        def one_step(b, k):  # what replay_learning samples at a gradient step keyed k
            return device.sample(b, jax.random.split(k)[0], args.batch_size, 1.0)[1]

        sample = jax.jit(lambda b, k: jax.vmap(lambda kk: one_step(b, kk))(jax.random.split(k, args.gradient_steps)))
        first = jax.block_until_ready(sample(buffer, keys[0]))
        gathered = host.gather(sample_indices(keys[0], host.size, args.gradient_steps, args.batch_size))
        out["same_items"] = all(np.array_equal(np.asarray(getattr(first, name)), gathered[name])
                                for name in gathered)
        times = []
        for key in keys:
            t0 = time.perf_counter()
            jax.block_until_ready(sample(buffer, key))
            times.append(time.perf_counter() - t0)
        out["device_sample_ms"] = 1e3 * float(np.median(times[1:]))
    return out


def _host_tree(prioritized, host, capacity: int):
    """The sum tree of ``host``'s items at the largest priority, over one flag an item (as the learner keeps it)."""
    import jax

    from types import SimpleNamespace

    from rljax.actorlearner.offpolicy import flag_items

    def flags(valid):
        return flag_items(SimpleNamespace(valid=valid))

    tree = prioritized.init(flags(np.bool_(False)), 0.6)
    add = jax.jit(prioritized.add, donate_argnums=(0,))
    for first in range(0, capacity, 4096):
        tree = add(tree, flags(np.ones(min(4096, capacity - first), bool)))
    return tree


def _prioritized_update_ms(replay, tree, keys, args) -> tuple[float, np.ndarray, object]:
    """The median time of an update's prioritised sampling by ``replay`` (a prioritised
    :class:`~rljax.agents.offpolicy.Replay`), the first key's slots ``[gradient_steps, batch]``, and the
    buffer (``tree`` is donated). Each step sets its batch's priorities to the mean of its
    observations, so the next step's draw depends on this one's items."""
    import jax
    import jax.numpy as jnp

    def update(tree, key):
        def step(tree, k):
            slots, items, weights = replay.sample(tree, jax.random.split(k)[0], args.batch_size, 1.0)
            td = jnp.mean(items.obs.astype(jnp.float32), axis=tuple(range(1, items.obs.ndim))) * weights
            return replay.update(tree, slots, td, items.valid), slots

        return jax.lax.scan(step, tree, jax.random.split(key, args.gradient_steps))

    update = jax.jit(update, donate_argnums=(0,))
    tree, first = update(tree, keys[0])
    times = []
    for key in keys:
        t0 = time.perf_counter()
        tree, _ = jax.block_until_ready(update(tree, key))
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times)), np.asarray(first), tree


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--atari", type=int, default=100_000, help="Atari-sized items")
    ap.add_argument("--minatar", type=int, default=1_000_000, help="MinAtar-sized items")
    ap.add_argument("--episode", type=int, default=1000)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--gradient-steps", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--prioritized", action="store_true", help="also time prioritised sampling, host against device")
    ap.add_argument("--device-limit-gb", type=float, default=8.0, help="allocate the device replay up to this size")
    args = ap.parse_args()
    from benchmarks.bench_vmap import cpu_model

    rows = []
    for name, count, shape, stacked in (("Atari [84,84,4] uint8", args.atari, (84, 84, 4), True),
                                        ("MinAtar [10,10,4] uint8", args.minatar, (10, 10, 4), False)):
        rows.append(measure(name, count, shape, stacked, args))
        print(f"# {rows[-1]}", flush=True)
    print(f"host replay against device replay; {args.gradient_steps} x {args.batch_size} samples an update; "
          f"{cpu_model()}, {os.cpu_count()} cores")
    per = args.prioritized
    print("| items | count | host memory | device replay memory | added items/s | an update's sampling, host | "
          "device | same items |" + (" prioritised, host | device | same slots |" if per else ""))
    print("|---|---|---|---|---|---|---|---|" + ("---|---|---|" if per else ""))
    nan = float("nan")
    for r in rows:
        device = f"{r['device_bytes'] / 2**30:.2f} GiB" + ("" if r["device_fits"] else " (computed)")
        extra = (f" {r['host_per_ms']:.2f} ms | {r.get('device_per_ms', nan):.2f} ms | "
                 f"{r.get('same_per_slots', '-')} |") if per else ""
        print(f"| {r['name']} | {r['items']:,} | {r['host_bytes'] / 2**30:.2f} GiB | {device} | "
              f"{r['add_per_s']:,.0f} | {r['host_sample_ms']:.2f} ms | {r.get('device_sample_ms', nan):.2f} ms | "
              f"{r.get('same_items', '-')} |" + extra)


if __name__ == "__main__":
    main()
