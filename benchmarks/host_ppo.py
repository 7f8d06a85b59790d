"""PPO on host envs: the actor-learner layouts beside the synchronous host loop, in one process.

    python -m benchmarks.host_ppo                        # gymnasium/CartPole-v1, 3 interleaved rounds
    python -m benchmarks.host_ppo --rounds 5 --num-envs 16 --updates 80 --layouts 0x1,1x1,1x2

A layout ``LxA`` is ``max_policy_lag = L`` with ``A`` actors (``0x1``: the synchronous host loop, each
rollout acted with the params of the update before it). Every layout trains the same config from
the same seed; the rounds interleave the layouts, and each row reports the medians over rounds of:
steady env steps/s (from update 5 to the last, compile excluded), its ratio to ``0x1`` in the same
round, the largest policy lag and queue depth seen, the actors' and the learner's busy fractions,
env step p50/p99, and the mean return of the last 5 rollouts.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np


def run(layout: str, args: argparse.Namespace) -> dict:
    from rljax.actorlearner.learner import HostOptions, train_host
    from rljax.agents.ppo import PPOConfig
    from rljax.host.sources import make_host_env

    lag, actors = (int(x) for x in layout.split("x"))
    config = PPOConfig(env="CartPole-v1", num_envs=args.num_envs, num_steps=args.num_steps,
                       total_timesteps=args.num_envs * args.num_steps * args.updates, learning_rate=1e-3,
                       anneal_lr=False)
    rows = train_host(config, lambda a: make_host_env(args.env, args.num_envs),
                          HostOptions(num_actors=actors, max_policy_lag=lag)).rows
    returns = [r["episode_return_mean"] for r in rows if r["episode_return_mean"] is not None]
    mean = lambda key: float(np.mean([r[key] for r in rows]))  # noqa: E731
    return dict(sps=(rows[-1]["env_steps"] - rows[4]["env_steps"]) / (rows[-1]["wall_time_s"] - rows[4]["wall_time_s"]),
                lag=max(r["host/policy_lag"] for r in rows), depth=max(r["host/queue_depth"] for r in rows),
                actor_busy=mean("host/actor_busy"), learner_busy=mean("host/learner_busy"),
                p50=mean("host/env_step_p50_ms"), p99=mean("host/env_step_p99_ms"), ret=float(np.mean(returns[-5:])))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", default="gymnasium/CartPole-v1")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--num-envs", type=int, default=8)
    ap.add_argument("--num-steps", type=int, default=64)
    ap.add_argument("--updates", type=int, default=60)
    ap.add_argument("--layouts", default="0x1,1x1,1x2", help="comma-separated LAGxACTORS; the first is the baseline")
    args = ap.parse_args()
    layouts = args.layouts.split(",")
    results: dict[str, list[dict]] = {layout: [] for layout in layouts}
    for _ in range(args.rounds):
        for layout in layouts:
            results[layout].append(run(layout, args))
        base = results[layouts[0]][-1]["sps"]
        for layout in layouts:
            results[layout][-1]["ratio"] = results[layout][-1]["sps"] / base
    print(f"{args.env}, {args.num_envs} envs x {args.num_steps} steps per rollout, {args.updates} updates; medians "
          f"of {args.rounds} interleaved rounds")
    print("| lag x actors | env steps/s | vs first | max lag | max queue | actor busy | learner busy | env step "
          "p50 / p99 ms | return (last 5) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for layout, rs in results.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        print(f"| {layout} | {med['sps']:,.0f} | {med['ratio']:.2f}x | {int(med['lag'])} | {int(med['depth'])} | "
              f"{med['actor_busy']:.2f} | {med['learner_busy']:.2f} | {med['p50']:.3f} / {med['p99']:.3f} | "
              f"{med['ret']:.0f} |")


if __name__ == "__main__":
    main()
