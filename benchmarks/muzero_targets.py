"""MuZero's targets: a greedy 475 on CartPole-v1 and the optimum on Catch-bsuite, on three seeds.

    python -m benchmarks.muzero_targets                      # CartPole and Catch, seeds 0,1,2
    python -m benchmarks.muzero_targets --envs catch --seeds 0

CartPole: ``experiments.muzero_cartpole`` from its defaults. Catch (``gymnax/Catch-bsuite``, whose optimum is
a return of 1: every ball caught): the same experiment with ``--env gymnax/Catch-bsuite --q-epsilon 0.5
--learning-rate 1e-3 --total-timesteps 200000`` (:data:`CATCH`). Each run is the experiment module in a fresh
process (``--seed S --run-dir DIR``), then 100 greedy episodes of its network's policy (``rljax.load(RUN)``,
no search) and 100 with its search (its simulations, no noise). Printed: one line per seed with both returns,
whether the target is met (network policy: CartPole mean >= 475, Catch mean 1.0), the CPU.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

from benchmarks.bench_vmap import cpu_model

CATCH = ["--q-epsilon", "0.5", "--learning-rate", "1e-3", "--total-timesteps", "200000"]
"""Catch's changes to the CartPole experiment: its values lie in [-1, 1], so a Q-range floor of 0.5 (CartPole's 20
would hide every difference between its actions), and a larger step size for a shorter run."""
ENVS = {"cartpole": ("CartPole-v1", [], 475.0), "catch": ("gymnax/Catch-bsuite", CATCH, 1.0)}


def _searched_return(policy, env, env_params, episodes: int, seed: int) -> float:
    """The mean return of ``episodes`` episodes played by the run's search (no noise, its simulations)."""
    import jax

    from rljax.policy.evaluate import max_episode_steps, run_episodes
    from rljax.policy.games import search_player

    player = search_player(policy, env, env_params)
    act = lambda obs, key: player(key, None, obs)  # noqa: E731
    out = jax.jit(lambda key: run_episodes(env, env_params, act, key, episodes, max_episode_steps(env_params)))(
        jax.random.key(seed))
    return float(out.returns.mean())


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", default="cartpole,catch", help="comma-separated: cartpole, catch")
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    ap.add_argument("--keep", metavar="DIR", help="keep the runs under DIR (default: a temporary folder)")
    a = ap.parse_args(argv)
    import envs
    import rljax
    from rljax.policy.evaluate import evaluate

    print(f"experiments.muzero_cartpole, envs {a.envs}, seeds {a.seeds}, {cpu_model()}, {os.cpu_count()} cores",
          flush=True)
    root = a.keep or tempfile.mkdtemp(prefix="rljax-mz-")
    met, total = 0, 0
    for name in a.envs.split(","):
        env_id, extra, target = ENVS[name]
        env, env_params = envs.make(env_id)
        for seed in (int(s) for s in a.seeds.split(",")):
            run = os.path.join(root, f"muzero-{name}-s{seed}")
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "experiments.muzero_cartpole", "--env", env_id, *extra,
                            "--seed", str(seed), "--run-dir", run, "--quiet"], check=True)
            trained = time.perf_counter() - t0
            policy = rljax.load(run)
            greedy = float(evaluate(policy, 100, seed=seed).returns.mean())
            searched = _searched_return(policy, env, env_params, 100, seed)
            ok = greedy >= target
            met, total = met + ok, total + 1
            print(f"{env_id} seed {seed}: trained in {trained:.0f} s; greedy network {greedy:.2f}, search "
                  f"{searched:.2f} (100 episodes each); target {'met' if ok else 'NOT met'}", flush=True)
    print(f"target met on {met} of {total} runs")


if __name__ == "__main__":
    main()
