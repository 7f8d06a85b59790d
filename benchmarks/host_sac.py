"""SAC on a Gymnasium MuJoCo task through rljax's actor-learner path, beside Stable-Baselines3's SAC.

    python -m benchmarks.host_sac --sb3-python /tmp/sb3/bin/python                  # speed, 3 interleaved rounds
    python -m benchmarks.host_sac --sb3-python /tmp/sb3/bin/python --learn --seeds 0,1,2 --steps 100000

Both run SB3's SAC configuration (RL Zoo's for MuJoCo): one env, one gradient step of 256 samples per
env step, 256x256 ReLU actor and critics, Adam 3e-4, gamma 0.99, tau 0.005, a learned temperature
(initial 1, target entropy -dim(A)), a 1e6 replay, ``--learning-starts`` uniform steps first; rljax
with no gradient clipping (SB3 has none) and log-std bounds -20..2 (SB3's). rljax's layouts: the
synchronous loop (``lag0``: ``--max-policy-lag 0``) and the pipelined one (``lag1``: the actor steps the
env while the learner updates) at ``--num-steps 1`` (an update per env step), and ``lag1-chunk8``: 8 env
steps and 8 gradient steps an update (the same replay ratio). ``--sb3-chunk8`` adds SB3 in that layout
(``train_freq=8, gradient_steps=8``), and the chunked layout's ratio to it ("same layout").

Speed (default): ``--rounds`` interleaved rounds of each layout and SB3, each ``--steps`` env steps in
a fresh process; env steps/s from the first env step after ``learning_starts + 500`` to the last
(compile and warm-up excluded); medians over rounds and each layout's ratio to SB3 in its round.
``--learn``: each seed trains ``--steps`` env steps with each side, then 10 greedy episodes
(deterministic actions) on Gymnasium's env seeded 10_000..; prints the mean and spread over seeds.
``--sb3-python`` names a Python with ``stable-baselines3`` and ``gymnasium[mujoco]`` (a venv of its
own: it brings PyTorch; ``torch.set_num_threads(1)``, SB3's advice for small networks on CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYOUTS = ("lag0", "lag1", "lag1-chunk8")


def _config(args: argparse.Namespace, layout: str):
    from rljax.agents.sac import SACConfig

    chunk = 8 if layout.endswith("chunk8") else 1
    return SACConfig(env=f"gymnasium/{args.env}", num_envs=1, num_steps=chunk, gradient_steps=chunk,
                     total_timesteps=args.steps, learning_starts=args.learning_starts, batch_size=256,
                     buffer_size=1_000_000, hidden_sizes=(256, 256), actor_learning_rate=3e-4,
                     critic_learning_rate=3e-4, alpha_learning_rate=3e-4, max_grad_norm=1e9, log_std_min=-20.0,
                     seed=args.seed)


def rljax_worker(layout: str, args: argparse.Namespace) -> dict:
    """Trains rljax's SAC in this process (a run directory in a scratch folder, checkpointed once at
    the end); returns env steps/s after warm-up and, with ``--learn``, the greedy return."""
    import rljax
    from rljax.actorlearner.learner import HostOptions
    from rljax.actorlearner.run import run_host
    from rljax.cli.process import request_caller_thread_cpu_ops
    from rljax.training.options import RunOptions

    request_caller_thread_cpu_ops()  # as rljax train does for host envs
    with tempfile.TemporaryDirectory() as scratch:
        run_dir = os.path.join(scratch, "run")
        rows = run_host(_config(args, layout), RunOptions(run_dir=run_dir, quiet=True, checkpoint_interval_s=1e9),
                        HostOptions(max_policy_lag=0 if layout == "lag0" else 1)).rows
        warm = next(r for r in rows if r["env_steps"] > args.learning_starts + 500)
        out = {"sps": (rows[-1]["env_steps"] - warm["env_steps"]) / (rows[-1]["wall_time_s"] - warm["wall_time_s"]),
               "wall_s": rows[-1]["wall_time_s"]}
        if args.learn:
            policy = rljax.load(run_dir)
            out["return"] = greedy_return(lambda obs: np.asarray(policy.act(np.asarray(obs, np.float32)[None]))[0],
                                          args.env)
    return out


def sb3_worker(args: argparse.Namespace) -> dict:
    """Stable-Baselines3's SAC; runs in the ``--sb3-python`` interpreter."""
    import gymnasium as gym
    import torch
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback

    torch.set_num_threads(1)

    class Clock(BaseCallback):
        def __init__(self):
            super().__init__()
            self.marks: list[tuple[float, int]] = []

        def _on_step(self) -> bool:
            if self.num_timesteps == args.learning_starts + 501 or self.num_timesteps == args.steps:
                self.marks.append((time.perf_counter(), self.num_timesteps))
            return True

    start = time.perf_counter()
    chunk = 8 if args.worker.endswith("chunk8") else 1
    model = SAC("MlpPolicy", gym.make(args.env), learning_starts=args.learning_starts, batch_size=256,
                buffer_size=1_000_000, learning_rate=3e-4, gamma=0.99, tau=0.005, train_freq=chunk,
                gradient_steps=chunk,
                policy_kwargs=dict(net_arch=[256, 256]), seed=args.seed, device="cpu", verbose=0)
    clock = Clock()
    model.learn(total_timesteps=args.steps, callback=clock)
    (t0, s0), (t1, s1) = clock.marks
    out = {"sps": (s1 - s0) / (t1 - t0), "wall_s": time.perf_counter() - start}
    if args.learn:
        out["return"] = greedy_return(lambda obs: model.predict(obs, deterministic=True)[0], args.env)
    return out


def greedy_return(act, env_id: str, episodes: int = 10) -> float:
    """The mean return of ``episodes`` greedy episodes on Gymnasium's ``env_id`` seeded 10_000 + i."""
    import gymnasium as gym

    env, total = gym.make(env_id), 0.0
    for i in range(episodes):
        obs, _ = env.reset(seed=10_000 + i)
        done = False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(act(obs))
            total += float(reward)
            done = terminated or truncated
    env.close()
    return total / episodes


def _child(args: argparse.Namespace, who: str, seed: int) -> dict:
    python = args.sb3_python if who.startswith("sb3") else sys.executable
    flags = ["--env", args.env, "--steps", str(args.steps), "--learning-starts", str(args.learning_starts),
             "--seed", str(seed), *(["--learn"] if args.learn else [])]
    done = subprocess.run([python, "-m", "benchmarks.host_sac", "--worker", who, *flags], capture_output=True,
                          text=True, timeout=36_000, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"{who} failed: {done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", default="HalfCheetah-v5")
    ap.add_argument("--steps", type=int, default=6_000)
    ap.add_argument("--learning-starts", type=int, default=1_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", default="0,1,2", help="--learn: comma-separated seeds")
    ap.add_argument("--layouts", default=",".join(LAYOUTS), help=f"rljax layouts among {', '.join(LAYOUTS)}")
    ap.add_argument("--learn", action="store_true", help="train --steps per seed and report the greedy returns")
    ap.add_argument("--sb3-python", help="a Python with stable-baselines3 and gymnasium[mujoco]")
    ap.add_argument("--sb3-chunk8", action="store_true",
                    help="also SB3 with train_freq=8, gradient_steps=8 (the layout of rljax's lag1-chunk8)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        if args.worker.startswith("sb3"):
            out = sb3_worker(args)
        else:
            out = rljax_worker(args.worker, args)
        print(json.dumps(out))
        return
    from benchmarks.bench_vmap import cpu_model

    layouts = [layout for layout in args.layouts.split(",") if layout]
    sb3 = ["sb3", *(["sb3-chunk8"] if args.sb3_chunk8 else [])] if args.sb3_python else []
    sides = [*layouts, *sb3]
    runs = [int(s) for s in args.seeds.split(",")] if args.learn else [args.seed] * args.rounds
    results: dict[str, list[dict]] = {side: [] for side in sides}
    for seed in runs:
        for side in sides:
            results[side].append(_child(args, side, seed))
            print(f"# {side} seed {seed}: {results[side][-1]}", flush=True)
        if "sb3" in results:
            for side in sides:
                results[side][-1]["ratio"] = results[side][-1]["sps"] / results["sb3"][-1]["sps"]
                twin = "sb3-chunk8" if side.endswith("chunk8") else "sb3"
                if twin in results:
                    results[side][-1]["same"] = results[side][-1]["sps"] / results[twin][-1]["sps"]
    what = f"{len(runs)} seeds" if args.learn else f"medians of {args.rounds} interleaved rounds"
    print(f"SAC on {args.env}, {args.steps:,} env steps ({args.learning_starts:,} uniform first); {what}; "
          f"{cpu_model()}, {os.cpu_count()} cores")
    returns_column = " greedy return (mean ± sd over seeds) |" if args.learn else ""
    print("| side | env steps/s | vs SB3 | vs SB3, same layout | wall s |" + returns_column)
    print("|---|---|---|---|---|" + ("---|" if args.learn else ""))
    for side, rs in results.items():
        med = {k: statistics.median(r[k] for r in rs) for k in ("sps", "wall_s")}
        ratio, same = (f"{statistics.median(r[k] for r in rs):.2f}x" if k in rs[0] else "-" for k in ("ratio", "same"))
        line = f"| {side} | {med['sps']:,.0f} | {ratio} | {same} | {med['wall_s']:,.0f} |"
        if args.learn:
            returns = [r["return"] for r in rs]
            line += f" {np.mean(returns):,.0f} ± {np.std(returns):,.0f} ({', '.join(f'{x:,.0f}' for x in returns)}) |"
        print(line)


if __name__ == "__main__":
    main()
