"""Checkpoints in shards against gathered ones: host memory and save time of a replay-heavy state.

    python -m benchmarks.checkpoint_shards                      # DQN, 1e6 transitions, 2 x 2 on loopback
    python -m benchmarks.checkpoint_shards --buffer 4000000

Starts a 2-process x 2-device job (``rljax launch``, fake CPU devices, gloo on loopback). Each
process builds the initial train state of a data-parallel DQN CartPole run whose replay holds
``--buffer`` transitions over the 4 devices (every slot counts the same whether or not it is filled),
then saves it ``--saves`` times, waiting for each save to commit; each way runs as its own job, so
the processes' peak memory is that mode's alone:

* **gathered** (``Checkpointer(sharded=False)``): every process gathers the whole state to its host,
  process 0 writes it;
* **sharded** (``Checkpointer(sharded=True)``, what multi-process runs use): every process writes its
  own devices' shards through Orbax's multi-process save.

Per process and mode it prints the median save time (hand-off and commit) and the growth of the
process's peak resident memory over the saves (``ru_maxrss``: the host memory a save needs on top
of the run), and the state's size. On one machine all processes share the cores and the disk: the
memory figures carry over to a cluster, the times are this machine's.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _worker(buffer: int, saves: int, out_dir: str, mode: str) -> None:
    from rljax.runtime import distributed

    distributed.initialize_from_env()
    import gc

    import jax

    from rljax.agents.dqn import DQNConfig
    from rljax.core.registry import resolve_run
    from rljax.store.checkpoint import Checkpointer
    from rljax.training.program import Program

    config, env, params = resolve_run(DQNConfig(env="CartPole-v1", num_envs=8, num_devices=4, buffer_size=buffer,
                                                learning_starts=1000), record=False)
    state = Program(config, env, params).init_state(100)
    jax.block_until_ready(state)
    nbytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(jax.tree.map(
        lambda x: jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x, state)))
    gc.collect()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    ckpt = Checkpointer(pathlib.Path(out_dir) / mode, keep=2, sharded=mode == "sharded",
                        follower=jax.process_index() != 0)
    times = []
    for i in range(saves):
        t0 = time.perf_counter()
        ckpt.save(i + 1, state, {"i": i})
        ckpt.wait()
        times.append(time.perf_counter() - t0)
    ckpt.close()
    results = {mode: {"save_s": statistics.median(times),
                      "peak_growth_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before}}
    print("RESULT " + json.dumps({"process": jax.process_index(), "state_bytes": int(nbytes), **results}), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--buffer", type=int, default=1_000_000, help="replay transitions over the 4 devices")
    parser.add_argument("--saves", type=int, default=3)
    parser.add_argument("--worker", choices=("gathered", "sharded"), default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args.buffer, args.saves, args.out, args.worker)
        return
    rows: dict[int, dict] = {}
    for mode in ("gathered", "sharded"):
        with tempfile.TemporaryDirectory() as out:
            env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
            env.pop("XLA_FLAGS", None)
            done = subprocess.run([sys.executable, "-m", "rljax.cli.main", "launch", "-n", "2", "-d", "2", "--",
                                   sys.executable, "-m", "benchmarks.checkpoint_shards", "--worker", mode,
                                   "--buffer", str(args.buffer), "--saves", str(args.saves), "--out", out],
                                  cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
        found = [json.loads(line[len("RESULT "):]) for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        if done.returncode != 0 or len(found) != 2:
            sys.exit(f"the {mode} job failed (status {done.returncode}):\n{done.stderr[-3000:]}")
        for row in found:
            rows.setdefault(row["process"], {}).update(row)
    mib = 2.0 ** 20
    print(f"DQN CartPole, {args.buffer:,} replay transitions over 2 processes x 2 devices; "
          f"state {rows[0]['state_bytes'] / mib:,.0f} MiB; median of {args.saves} saves")
    print("| process | mode | save (s) | peak host memory growth (MiB) |")
    print("|---|---|---|---|")
    for process, row in sorted(rows.items()):
        for mode in ("gathered", "sharded"):
            print(f"| {process} | {mode} | {row[mode]['save_s']:.2f} | {row[mode]['peak_growth_bytes'] / mib:,.0f} |")


if __name__ == "__main__":
    main()
