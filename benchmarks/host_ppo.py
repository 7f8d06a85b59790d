"""PPO on host envs: the actor-learner layouts beside the synchronous host loop, in one process.

    python -m benchmarks.host_ppo                        # gymnasium/CartPole-v1, 3 interleaved rounds
    python -m benchmarks.host_ppo --rounds 5 --num-envs 16 --updates 80 --layouts 0x1,1x1,1x2

    python -m benchmarks.host_ppo --sb3-python /tmp/sb3/bin/python   # and Stable-Baselines3's PPO beside them

A layout ``LxA`` is ``max_policy_lag = L`` with ``A`` actors (``0x1``: the synchronous host loop, each
rollout acted with the params of the update before it). Every layout trains the same config from
the same seed; the rounds interleave the layouts, and each row reports the medians over rounds of:
steady env steps/s (from update 5 to the last, compile excluded), its ratio to ``0x1`` in the same
round, the largest policy lag and queue depth seen, the actors' and the learner's busy fractions,
env step p50/p99, and the mean return of the last 5 rollouts.

``--sb3-python`` names a Python that has ``stable-baselines3`` (a venv of its own: it brings
PyTorch); each round then also runs, in that Python, Stable-Baselines3's PPO with the same
hyperparameters (``n_envs`` = num_envs, ``n_steps`` = num_steps, minibatch = rollout / 4, 4 epochs,
64x64 tanh actor and critic, lr, gamma 0.99, lambda 0.95, clip 0.2, ent 0.01, vf 0.5, grad norm 0.5)
on Gymnasium's CartPole-v1 through ``SubprocVecEnv`` (one process per env, what host-simulator users
run) and ``DummyVecEnv`` (in-process), timed the same way (from the end of rollout 5 to the last).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time

import numpy as np

SB3_VEC_ENVS = ("subproc", "dummy")


def run(layout: str, args: argparse.Namespace) -> dict:
    from rljax.actorlearner.learner import HostOptions, train_host
    from rljax.agents.ppo import PPOConfig
    from rljax.host.sources import make_host_env

    lag, actors = (int(x) for x in layout.split("x"))
    config = PPOConfig(env="CartPole-v1", num_envs=args.num_envs, num_steps=args.num_steps,
                       total_timesteps=args.num_envs * args.num_steps * args.updates, learning_rate=1e-3,
                       anneal_lr=False, num_epochs=args.num_epochs, num_minibatches=args.num_minibatches)
    kwargs = {"asynchronous": True} if args.async_envs else {}
    rows = train_host(config, lambda a: make_host_env(args.env, args.num_envs, **kwargs),
                          HostOptions(num_actors=actors, max_policy_lag=lag)).rows
    returns = [r["episode_return_mean"] for r in rows if r["episode_return_mean"] is not None]
    mean = lambda key: float(np.mean([r[key] for r in rows]))  # noqa: E731
    return dict(sps=(rows[-1]["env_steps"] - rows[4]["env_steps"]) / (rows[-1]["wall_time_s"] - rows[4]["wall_time_s"]),
                lag=max(r["host/policy_lag"] for r in rows), depth=max(r["host/queue_depth"] for r in rows),
                actor_busy=mean("host/actor_busy"), learner_busy=mean("host/learner_busy"),
                p50=mean("host/env_step_p50_ms"), p99=mean("host/env_step_p99_ms"), ret=float(np.mean(returns[-5:])))


def sb3_worker(vec: str, args: argparse.Namespace) -> dict:
    """Stable-Baselines3's PPO with ``run``'s hyperparameters; runs in the ``--sb3-python`` interpreter."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    torch.set_num_threads(1)  # SB3's CPU advice for small MLPs; the envs' processes get the other core

    class Clock(BaseCallback):
        def __init__(self):
            super().__init__()
            self.ends: list[tuple[float, int]] = []
            self.returns: list[float] = []

        def _on_step(self) -> bool:
            self.returns += [info["episode"]["r"] for info in self.locals["infos"] if "episode" in info]
            return True

        def _on_rollout_end(self) -> None:
            self.ends.append((time.perf_counter(), self.num_timesteps))

    env = make_vec_env("CartPole-v1", n_envs=args.num_envs, seed=0,
                       vec_env_cls=SubprocVecEnv if vec == "subproc" else DummyVecEnv)
    rollout = args.num_envs * args.num_steps
    model = PPO("MlpPolicy", env, n_steps=args.num_steps, batch_size=rollout // args.num_minibatches,
                n_epochs=args.num_epochs, learning_rate=1e-3,
                gamma=0.99, gae_lambda=0.95, clip_range=0.2, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5,
                policy_kwargs=dict(net_arch=dict(pi=[64, 64], vf=[64, 64])), seed=0, device="cpu", verbose=0)
    clock = Clock()
    model.learn(total_timesteps=rollout * args.updates, callback=clock)
    env.close()
    (t0, s0), (t1, s1) = clock.ends[4], clock.ends[-1]
    return dict(sps=(s1 - s0) / (t1 - t0), ret=float(np.mean(clock.returns[-20:])))


def sb3(vec: str, args: argparse.Namespace) -> dict:
    """``sb3_worker`` in ``args.sb3_python``, as a row of this table (no lag, queue or busy figures)."""
    flags = ["--num-envs", str(args.num_envs), "--num-steps", str(args.num_steps), "--updates", str(args.updates),
             "--num-epochs", str(args.num_epochs), "--num-minibatches", str(args.num_minibatches)]
    done = subprocess.run([args.sb3_python, "-m", "benchmarks.host_ppo", "--sb3-worker", vec, *flags],
                          capture_output=True, text=True, timeout=1800,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if done.returncode != 0:
        raise RuntimeError(f"Stable-Baselines3 ({vec}) failed: {done.stderr[-2000:]}")
    return {"lag": 0, "depth": 0, "actor_busy": float("nan"), "learner_busy": float("nan"), "p50": float("nan"),
            "p99": float("nan"), **json.loads(done.stdout.splitlines()[-1])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", default="gymnasium/CartPole-v1")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--num-envs", type=int, default=8)
    ap.add_argument("--num-steps", type=int, default=64)
    ap.add_argument("--updates", type=int, default=60)
    ap.add_argument("--num-epochs", type=int, default=4)
    ap.add_argument("--num-minibatches", type=int, default=4)
    ap.add_argument("--layouts", default="0x1,1x1,1x2", help="comma-separated LAGxACTORS; the first is the baseline")
    ap.add_argument("--async-envs", action="store_true",
                    help="gymnasium/ envs in worker processes (Gymnasium's AsyncVectorEnv), one per env")
    ap.add_argument("--pooled-cpu-ops", action="store_true",
                    help="leave XLA's CPU kernels in its shared thread pool (rljax train runs them on the calling "
                         "thread for host envs: rljax.cli.process.request_caller_thread_cpu_ops)")
    ap.add_argument("--sb3-python", help="a Python with stable-baselines3: add its PPO (subproc and dummy vec envs)")
    ap.add_argument("--sb3-worker", choices=SB3_VEC_ENVS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.sb3_worker:
        print(json.dumps(sb3_worker(args.sb3_worker, args)))
        return
    if args.sb3_python and args.env != "gymnasium/CartPole-v1":
        ap.error(f"--sb3-python runs Stable-Baselines3 on CartPole-v1; --env {args.env} has no such row")
    if not args.pooled_cpu_ops:  # as rljax train does for host envs, before JAX starts
        from rljax.cli.process import request_caller_thread_cpu_ops

        request_caller_thread_cpu_ops()
    layouts = args.layouts.split(",")
    peers = [f"sb3-{vec}" for vec in SB3_VEC_ENVS] if args.sb3_python else []
    results: dict[str, list[dict]] = {name: [] for name in [*layouts, *peers]}
    for _ in range(args.rounds):
        for layout in layouts:
            results[layout].append(run(layout, args))
        for peer in peers:
            results[peer].append(sb3(peer.removeprefix("sb3-"), args))
        base = results[layouts[0]][-1]["sps"]
        for name in results:
            results[name][-1]["ratio"] = results[name][-1]["sps"] / base
    print(f"{args.env}, {args.num_envs} envs x {args.num_steps} steps per rollout, {args.num_epochs} epochs x "
          f"{args.num_minibatches} minibatches, {args.updates} updates; medians of {args.rounds} interleaved rounds; "
          f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}")
    print("| lag x actors | env steps/s | vs first | max lag | max queue | actor busy | learner busy | env step "
          "p50 / p99 ms | return (last 5) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for layout, rs in results.items():  # an SB3 row's lag, queue and busy columns do not apply
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        print(f"| {layout} | {med['sps']:,.0f} | {med['ratio']:.2f}x | {int(med['lag'])} | {int(med['depth'])} | "
              f"{med['actor_busy']:.2f} | {med['learner_busy']:.2f} | {med['p50']:.3f} / {med['p99']:.3f} | "
              f"{med['ret']:.0f} |")


if __name__ == "__main__":
    main()
