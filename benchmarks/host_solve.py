"""PPO solving CartPole through a separate env-server process, end to end from the command line.

    python -m benchmarks.host_solve                       # server, seeds 0,1,2, PPO's defaults, lag 1
    python -m benchmarks.host_solve --source gymnasium --seeds 0 --total-timesteps 2e5
    python -m benchmarks.host_solve --source envpool      # needs the envpool extra

For each seed: ``rljax env-server gymnasium/CartPole-v1`` in its own process (``--source server``),
then ``rljax train ppo --env server:127.0.0.1:PORT --seed S --max-policy-lag L`` in another, as a user
runs them; the row reads the run directory: the mean return of the episodes of the last 10 updates,
env steps/s over the run (compile included), the largest policy lag, and the env restarts and lost
episodes. ``--source gymnasium`` / ``envpool`` train on ``gymnasium/CartPole-v1`` /
``envpool/CartPole-v1`` in the training process instead (no server).
"""

from __future__ import annotations

import argparse
import json
import pathlib
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
        env = f"{args.source}/CartPole-v1"
    run_dir = root / f"s{seed}"
    try:
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "rljax.cli.main", "train", "ppo", "--env", env, "--seed", str(seed),
                               "--num-envs", str(args.num_envs), "--total-timesteps", str(args.total_timesteps),
                               "--max-policy-lag", str(args.lag), "--run-dir", str(run_dir), "--quiet"],
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", choices=("server", "gymnasium", "envpool"), default="server")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--total-timesteps", type=lambda s: int(float(s)), default=500_000)
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--lag", type=int, default=1)
    args = parser.parse_args(argv)
    print(f"PPO (rljax train ppo defaults) on CartPole-v1 through --source {args.source}, {args.num_envs} envs, "
          f"lag <= {args.lag}, {args.total_timesteps:,} env steps per seed")
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
