"""PPO solving CartPole through a separate env-server process, end to end from the command line.

    python -m benchmarks.host_solve                       # server, seeds 0,1,2, PPO's defaults, lag 1
    python -m benchmarks.host_solve --source gymnasium --seeds 0 --total-timesteps 2e5
    python -m benchmarks.host_solve --source envpool      # needs the envpool extra
    python -m benchmarks.host_solve --source envpool --task Breakout-v5 --seeds 0 --total-timesteps 1e5 \
        --num-envs 8 --random-episodes 20 --train-flags "--encoder nature --shared-torso --hidden-sizes 512 \
        --activation relu --num-steps 128 --num-minibatches 4 --learning-rate 2.5e-4"   # Atari, beside random play

For each seed: ``rljax env-server gymnasium/CartPole-v1`` in its own process (``--source server``),
then ``rljax train ppo --env server:127.0.0.1:PORT --seed S --max-policy-lag L`` in another, as a user
runs them; the row reads the run directory: the mean return of the episodes of the last 10 updates,
env steps/s over the run (compile included), the largest policy lag, and the env restarts and lost
episodes. ``--source gymnasium`` / ``envpool`` train on ``gymnasium/<task>`` / ``envpool/<task>`` in
the training process instead (no server; ``--task`` other than CartPole-v1 needs one of them).
``--train-flags`` adds flags to ``rljax train ppo``; ``--random-episodes N`` also plays N episodes
with uniformly random actions through the same source and prints their mean return beside it.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shlex
import subprocess
import sys
import tempfile
import time


def _server(num_envs: int) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-m", "rljax.cli.main", "env-server", "gymnasium/CartPole-v1",
                             "--num-envs", str(num_envs), "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    if not line.startswith("serving"):
        proc.kill()
        raise RuntimeError(f"the env server did not start: {line!r}")
    return proc, int(line.split("as server:127.0.0.1:")[1].split()[0])


def run_seed(seed: int, args: argparse.Namespace, root: pathlib.Path) -> dict:
    server = None
    if args.source == "server":
        server, port = _server(args.num_envs)
        env = f"server:127.0.0.1:{port}"
    else:
        env = f"{args.source}/{args.task}"
    run_dir = root / f"s{seed}"
    try:
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "rljax.cli.main", "train", "ppo", "--env", env, "--seed", str(seed),
                               "--num-envs", str(args.num_envs), "--total-timesteps", str(args.total_timesteps),
                               "--max-policy-lag", str(args.lag), "--run-dir", str(run_dir), "--quiet",
                               *shlex.split(args.train_flags)],
                              capture_output=True, text=True, timeout=3600)
        wall = time.perf_counter() - start
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)
    if done.returncode != 0:
        raise RuntimeError(f"seed {seed}: exit {done.returncode}: {done.stderr[-2000:]}")
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    tail = [r for r in lines[-10:] if r["episodes"]]
    episodes = sum(r["episodes"] for r in tail)
    return dict(seed=seed, ret=sum(r["episode_return_mean"] * r["episodes"] for r in tail) / max(episodes, 1),
                sps=lines[-1]["env_steps"] / wall, lag=max(r["host/policy_lag"] for r in lines),
                restarts=lines[-1]["host/env_restarts"], lost=lines[-1]["host/lost_episodes"],
                steps=lines[-1]["env_steps"])


def random_play(args: argparse.Namespace, episodes: int) -> float:
    """The mean return of ``episodes`` episodes with uniformly random actions on ``args.source/args.task``."""
    import numpy as np

    from rljax.host.sources import make_host_env

    env, rng = make_host_env(f"{args.source}/{args.task}", args.num_envs), np.random.default_rng(0)
    try:
        env.reset(0)
        n, returns, done = env.spec.num_envs, np.zeros(env.spec.num_envs), []
        space = env.spec.action_space
        while len(done) < episodes:
            action = rng.integers(0, space.n, n) if hasattr(space, "n") else \
                rng.uniform(np.asarray(space.low), np.asarray(space.high), (n, *env.spec.action_shape))
            step = env.step(action.astype(env.spec.action_dtype))
            returns += step.reward
            for i in np.flatnonzero(step.terminated | step.truncated):
                done.append(returns[i])
                returns[i] = 0.0
        return float(np.mean(done[:episodes]))
    finally:
        env.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", choices=("server", "gymnasium", "envpool"), default="server")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--total-timesteps", type=lambda s: int(float(s)), default=500_000)
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--lag", type=int, default=1)
    parser.add_argument("--task", default="CartPole-v1", help="the env id (with --source gymnasium or envpool)")
    parser.add_argument("--train-flags", default="", help="more flags for rljax train ppo, as one string")
    parser.add_argument("--random-episodes", type=int, default=0, help="also play this many random episodes")
    args = parser.parse_args(argv)
    if args.source == "server" and args.task != "CartPole-v1":
        parser.error("--task with --source server: the reference server here serves CartPole-v1")
    print(f"PPO (rljax train ppo defaults{', ' + args.train_flags if args.train_flags else ''}) on {args.task} "
          f"through --source {args.source}, {args.num_envs} envs, lag <= {args.lag}, {args.total_timesteps:,} env "
          f"steps per seed")
    if args.random_episodes:
        print(f"random play: mean return {random_play(args, args.random_episodes):.2f} over {args.random_episodes} "
              f"episodes", flush=True)
    print("| seed | return (last 10 updates) | env steps/s (whole command) | largest lag | restarts | lost |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as root:
        for seed in (int(s) for s in args.seeds.split(",")):
            r = run_seed(seed, args, pathlib.Path(root))
            print(f"| {r['seed']} | {r['ret']:.1f} | {r['sps']:,.0f} | {r['lag']} | {r['restarts']} | {r['lost']} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
