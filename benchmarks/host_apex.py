"""Ape-X on host envs beside one DQN actor: greedy return against env steps, seeds in turn.

    python -m benchmarks.host_apex                                  # CartPole-v1, 3 seeds, 200k env steps
    python -m benchmarks.host_apex --seeds 0,1,2,3,4 --steps 300000 --actors 4

Every variant trains rljax's DQN on ``gymnasium/CartPole-v1`` through the actor-learner path with the
DQN defaults (10 envs an actor, one gradient step of 128 samples per update, a 10k replay, target
copy every 500 env steps), ``--steps`` env steps in all, and checkpoints at every tenth of the run:

- ``dqn``: one actor, uniform replay, epsilon decaying 1 -> 0.05 over half the run;
- ``dqn-per``: the same with proportional prioritised replay (max-priority insertion);
- ``apex``: ``--actors`` actors (lag 1), prioritised replay with TD-error insertion
  (``--initial-priority td``) and Ape-X's fixed per-actor rates ``0.4^(1 + 7 i / (A - 1))``;
- ``apex-host``: ``apex`` with the replay's items in host memory (``--replay host``, the priorities on
  the device).

Each checkpoint's greedy policy plays 10 episodes (Gymnasium seeds 10_000..); the table gives the
mean over seeds at each tenth of the run (env steps, not wall time: the question is sample
efficiency) and their mean (the area under the curve, per env step).
"""

from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np

VARIANTS = ("dqn", "dqn-per", "apex", "apex-host")


def greedy_returns(run_dir: str, episodes: int = 10) -> list[tuple[int, float]]:
    """``(env steps, mean greedy return)`` of every checkpoint of ``run_dir``, oldest first."""
    import rljax
    from rljax.policy.evaluate import evaluate

    steps = sorted(int(p) for p in os.listdir(os.path.join(run_dir, "checkpoints")) if p.isdigit())
    out = []
    for step in steps:
        policy = rljax.load(run_dir, step)
        out.append((step, float(np.mean(evaluate(policy, episodes, seed=10_000).returns))))
    return out


def run(variant: str, seed: int, args: argparse.Namespace) -> list[tuple[int, float]]:
    from rljax.actorlearner.learner import HostOptions
    from rljax.actorlearner.run import run_host
    from rljax.agents.dqn import DQNConfig
    from rljax.training.options import RunOptions

    apex = variant.startswith("apex")
    actors = args.actors if apex else 1
    config = DQNConfig(env="gymnasium/CartPole-v1", total_timesteps=args.steps, seed=seed,
                       prioritized=variant != "dqn")
    chunk = max(1, args.steps // config.env_steps_per_update // 10)  # a checkpoint at every tenth of the run
    config = DQNConfig(**{**config.__dict__, "updates_per_chunk": chunk})
    host = HostOptions(num_actors=actors, max_policy_lag=1, replay="host" if variant == "apex-host" else "device",
                       **(dict(apex_epsilon=0.4, initial_priority="td") if apex else {}))
    with tempfile.TemporaryDirectory() as scratch:
        run_dir = os.path.join(scratch, "run")
        run_host(config, RunOptions(run_dir=run_dir, quiet=True, checkpoint_every=1, keep_checkpoints=20), host)
        return greedy_returns(run_dir)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=200_000)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--actors", type=int, default=2)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    args = ap.parse_args()
    from benchmarks.bench_vmap import cpu_model
    from rljax.cli.process import request_caller_thread_cpu_ops

    request_caller_thread_cpu_ops()
    seeds = [int(s) for s in args.seeds.split(",")]
    curves = {v: [] for v in args.variants.split(",")}
    for seed in seeds:
        for variant in curves:
            curves[variant].append(run(variant, seed, args))
            print(f"# {variant} seed {seed}: {[round(r) for _, r in curves[variant][-1]]}", flush=True)
    steps = [s for s, _ in next(iter(curves.values()))[0]]
    print(f"DQN on gymnasium/CartPole-v1, {args.steps:,} env steps, seeds {seeds}, greedy return (10 episodes) "
          f"at each checkpoint, mean over seeds; apex: {args.actors} actors; {cpu_model()}, {os.cpu_count()} cores")
    print("| variant | " + " | ".join(f"{s / 1000:g}k" for s in steps) + " | mean (AUC) |")
    print("|---|" + "---|" * (len(steps) + 1))
    for variant, runs in curves.items():
        mean = np.mean([[r for _, r in curve] for curve in runs], axis=0)
        print(f"| {variant} | " + " | ".join(f"{m:.0f}" for m in mean) + f" | {mean.mean():.0f} |")


if __name__ == "__main__":
    main()
