"""Shows that ``rljax.core.buffers.add`` writes in place: no copy of the buffer per add.

A CartPole transition (obs float32[4], action int32, reward float32, terminated bool, truncated
bool, next_obs float32[4]) is 42 bytes, so a 1e6-slot buffer is 42 MB. Each case jits a function
that does ``--steps`` adds of a batch of ``--batch`` inside a ``lax.scan`` whose carry is the
buffer, with the buffer **donated** (``donate_argnums=0``), and reports:

* the compiled program's memory analysis (MB): argument, output, aliased (output written into the
  donated argument) and temporary. A copy of the buffer per step would need a temporary the size
  of the buffer; in place, the temporaries are a few KB and the output aliases the argument.
* the peak RSS of the process (each case runs in a fresh subprocess, so the peaks are comparable;
  it includes the ~0.3 GB of the JAX runtime).
* the time per add, and, for scale, the time of ONE copy of the whole state. In place, the time per
  add is the same at capacity 1e4 and 1e6 and thousands of times below one copy.

Cases:

* ``scatter`` -- the library's ``add``: one scatter per leaf at ``(cursor + arange(B)) % capacity``.
* ``slices`` -- the rejected alternative: two masked ``dynamic_update_slice`` windows. Its update
  reads the window it overwrites, and XLA:CPU then emits the fused dynamic-update-slice as a loop
  over the whole buffer: no temporary, but ``O(capacity)`` time per add.
* ``per`` -- ``prioritized_add`` plus ``update_priorities`` of ``--batch`` slots per step (sum- and
  min-tree recomputation, ``O(B log capacity)``). It grows sub-linearly with the capacity because
  the random root-to-leaf walks miss the CPU caches once the trees (16 MB at 1e6) no longer fit; it
  stays far below one copy.
* ``scatter-nodonate`` -- ``add`` without donation: the output cannot alias the input, so the
  buffer is copied once per *call* (1000 adds), visible as alias 0 and a per-add time that grows
  with the capacity by one copy / ``--steps``.
* ``full-select`` -- a strawman add written as a masked select over the whole buffer,
  ``O(capacity)`` per add by construction: what a per-step copy looks like in this table.

Usage::

    python benchmarks/replay_memory.py [--steps 1000] [--batch 10] [--reps 5] \\
        [--variants scatter,per]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

CAPACITIES = (10_000, 1_000_000)
VARIANTS = ("scatter", "slices", "per", "scatter-nodonate", "full-select")
MB = 1e6


def _child(variant: str, capacity: int, steps: int, batch: int, reps: int) -> dict:
    import jax
    import jax.numpy as jnp

    from rljax.core import buffers

    example = {
        "obs": jnp.zeros((4,), jnp.float32),
        "action": jnp.zeros((), jnp.int32),
        "reward": jnp.zeros((), jnp.float32),
        "terminated": jnp.zeros((), bool),
        "truncated": jnp.zeros((), bool),
        "next_obs": jnp.zeros((4,), jnp.float32),
    }

    def make_batch(t: jax.Array) -> dict:
        # Generated inside the program so the only large argument is the buffer itself.
        f = (t * batch + jnp.arange(batch)).astype(jnp.float32)
        return {
            "obs": jnp.broadcast_to(f[:, None], (batch, 4)),
            "action": (t + jnp.arange(batch)) % 2,
            "reward": jnp.ones((batch,), jnp.float32),
            "terminated": jnp.arange(batch) % 7 == 0,
            "truncated": jnp.zeros((batch,), bool),
            "next_obs": jnp.broadcast_to(f[:, None] + 1, (batch, 4)),
        }

    def full_select_add(state, b):
        # Strawman: every slot is rewritten (with its old value or a new one): O(capacity) per add.
        slots = jnp.arange(capacity)
        offset = (slots - state.cursor) % capacity
        is_new = offset < batch

        def write(buf, x):
            rows = x[jnp.clip(offset, 0, batch - 1)]
            return jnp.where(is_new.reshape((-1,) + (1,) * (buf.ndim - 1)), rows, buf)

        return state.replace(data=jax.tree.map(write, state.data, b),
                             cursor=(state.cursor + batch) % capacity,
                             size=jnp.minimum(state.size + batch, capacity))

    if variant == "per":
        state = buffers.prioritized_init(example, capacity, alpha=0.6)

        def step(s, t):
            s = buffers.prioritized_add(s, make_batch(t))
            idx = (t * 7919 + jnp.arange(batch) * 104729) % jnp.maximum(s.size, 1)
            s = buffers.update_priorities(s, idx, 1.0 + (idx % 13).astype(jnp.float32))
            return s, None
    else:
        state = buffers.init(example, capacity)
        write = {"scatter": buffers.add, "scatter-nodonate": buffers.add,
                 "slices": lambda s, b: buffers._add(s, b, buffers._write_slices),
                 "full-select": full_select_add}[variant]

        def step(s, t):
            return write(s, make_batch(t)), None

    def run(s):
        s, _ = jax.lax.scan(step, s, jnp.arange(steps))
        return s

    donate = () if variant == "scatter-nodonate" else (0,)
    fn = jax.jit(run, donate_argnums=donate)
    compiled = fn.lower(state).compile()
    mem = compiled.memory_analysis()
    buffer_bytes = sum(x.nbytes for x in jax.tree.leaves(state.data))

    state = jax.block_until_ready(fn(state))  # warm-up
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        state = jax.block_until_ready(fn(state))
        times.append(time.perf_counter() - t0)
    # Read before the copy measurement below, which allocates a second state.
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    # The cost of ONE copy of the whole state, for scale: a non-donated jitted one-row write must
    # copy every leaf into a fresh output buffer.
    copy_fn = jax.jit(lambda s: jax.tree.map(lambda x: x.at[0].set(x[-1]) if x.ndim else x, s))
    jax.block_until_ready(copy_fn(state))
    copy_times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(copy_fn(state))
        copy_times.append(time.perf_counter() - t0)
    # Sanity: the ring really advanced (each call adds steps * batch transitions).
    expected_cursor = ((reps + 1) * steps * batch) % capacity
    assert int(state.cursor) == expected_cursor, (int(state.cursor), expected_cursor)
    return {
        "variant": variant,
        "capacity": capacity,
        "buffer_mb": buffer_bytes / MB,
        "arg_mb": mem.argument_size_in_bytes / MB,
        "out_mb": mem.output_size_in_bytes / MB,
        "alias_mb": mem.alias_size_in_bytes / MB,
        "temp_mb": mem.temp_size_in_bytes / MB,
        "peak_rss_mb": peak_rss / MB,
        "us_per_add": min(times) / steps * 1e6,
        "copy_us": min(copy_times) * 1e6,
        "backend": jax.default_backend(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=1000, help="adds per compiled call")
    parser.add_argument("--batch", type=int, default=10, help="transitions per add")
    parser.add_argument("--reps", type=int, default=5, help="timed calls (min is reported)")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        variant, capacity = args.child.split(":")
        print(json.dumps(_child(variant, int(capacity), args.steps, args.batch, args.reps)))
        return

    rows = []
    for variant in args.variants.split(","):
        for capacity in CAPACITIES:
            # A fresh process per case so that peak RSS is this case's alone.
            out = subprocess.run(
                [sys.executable, __file__, "--child", f"{variant}:{capacity}",
                 "--steps", str(args.steps), "--batch", str(args.batch), "--reps", str(args.reps)],
                check=True, capture_output=True, text=True)
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))

    print(f"backend={rows[0]['backend']}  {args.steps} adds of batch {args.batch} per call, "
          f"min over {args.reps} calls; sizes in MB")
    header = (f"{'variant':<17} {'capacity':>9} {'buffer':>7} {'arg':>7} {'out':>7} {'alias':>7} "
              f"{'temp':>8} {'peakRSS':>8} {'us/add':>8} {'1 copy us':>9}")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['variant']:<17} {r['capacity']:>9,d} {r['buffer_mb']:>7.2f} {r['arg_mb']:>7.2f} "
              f"{r['out_mb']:>7.2f} {r['alias_mb']:>7.2f} {r['temp_mb']:>8.4f} "
              f"{r['peak_rss_mb']:>8.1f} {r['us_per_add']:>8.2f} {r['copy_us']:>9.1f}")
    by = {(r["variant"], r["capacity"]): r for r in rows}
    lo, hi = CAPACITIES
    print(f"\ntime per add at capacity {hi:,} / {lo:,}:")
    for variant in args.variants.split(","):
        if (variant, lo) in by and (variant, hi) in by:
            ratio = by[(variant, hi)]["us_per_add"] / by[(variant, lo)]["us_per_add"]
            print(f"  {variant:<17} x{ratio:.2f}")


if __name__ == "__main__":
    main()
