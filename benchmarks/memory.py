"""Memory tasks: PPO and PQN with and without ``--memory gru``, 3 seeds each, greedy returns.

    python -m benchmarks.memory                 # MemoryCue (delay 8) and gymnax MemoryChain (length 20)
    python -m benchmarks.memory --seeds 5 --tasks cue
    python -m benchmarks.memory --tasks minigrid --learners PPO-GRU PPO-MLP   # XLand-MiniGrid (the xminigrid extra)

Each learner runs its seeds as one sweep (vmapped in one program) and is evaluated greedily after
its last update (64 episodes per seed). Printed: per task and learner, each seed's greedy return,
their mean as a fraction of the optimum (1 on both tasks; chance is 0), the wall time of the sweep
(compile included) and its env steps/s.

Tasks: ``MemoryCue-v0`` with ``delay=8`` (a cue, 8 blank steps, a query: ``envs/memory.py``) and
``gymnax/MemoryChain-bsuite`` with ``memory_length=20`` (bsuite's memory chain: a context bit at the
start, a query after 20 steps); with ``--tasks minigrid``, XLand-MiniGrid's ``MiniGrid-MemoryS8`` (see
an object, walk a corridor, pick the matching one of two; ``pip install -e ".[xminigrid]"``), with
32 envs and 1e6 env steps, 128-wide networks.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from rljax.agents.ppo import PPOConfig
from rljax.agents.pqn import PQNConfig
from rljax.training.sweep import SweepSpec, run_sweep

TASKS = {
    "cue": dict(env="MemoryCue-v0", env_params=("delay=8",)),
    "chain": dict(env="gymnax/MemoryChain-bsuite", env_params=("memory_length=20",)),
    "minigrid": dict(env="xminigrid/MiniGrid-MemoryS8", num_envs=32, hidden_sizes=(128,), memory_size=128,
                     learning_rate=3e-4, total_timesteps=1_000_000, updates_per_chunk=61),
}
COMMON = dict(num_envs=16, num_steps=64, num_minibatches=4, hidden_sizes=(64,), memory_size=64, learning_rate=1e-3,
              total_timesteps=300_000, updates_per_chunk=73, eval_interval=1000, eval_episodes=64)
LEARNERS = {
    "PPO-GRU": (PPOConfig, dict(memory="gru", activation="relu", anneal_lr=False)),
    "PQN-GRU": (PQNConfig, dict(memory="gru")),
    "PPO-MLP": (PPOConfig, dict(activation="relu", anneal_lr=False)),
    "PQN-MLP": (PQNConfig, dict()),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--tasks", nargs="+", default=["cue", "chain"], choices=list(TASKS))
    ap.add_argument("--learners", nargs="+", default=list(LEARNERS), choices=list(LEARNERS))
    a = ap.parse_args()
    print("| task | learner | greedy return per seed | mean / optimum | wall s | env steps/s |")
    print("|---|---|---|---|---|---|")
    for task in a.tasks:
        for name in a.learners:
            config_cls, fields = LEARNERS[name]
            config = config_cls(**{**COMMON, **TASKS[task], **fields})
            t0 = time.perf_counter()
            result, _, _ = run_sweep(config, SweepSpec(seeds=tuple(range(a.seeds))), quiet=True)
            wall = time.perf_counter() - t0
            greedy = [rows[-1]["eval/return_mean"] for rows in result.member_rows]
            steps = config.total_timesteps // config.env_steps_per_update * config.env_steps_per_update * a.seeds
            print(f"| {TASKS[task]['env']} | {name} | {', '.join(f'{g:.2f}' for g in greedy)} | "
                  f"{np.mean(greedy):.2f} | {wall:.0f} | {steps / wall:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
