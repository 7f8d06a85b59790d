"""Domain randomisation on CartPole: a policy trained with a randomised pole length against one
trained at the default length, both evaluated greedily over pole lengths 0.25-2.0; and the same
randomised training with a GRU policy (``--memory gru``), which can infer the pole from the episode.

    python -m benchmarks.domain_randomization                        # 3 seeds, 1e6 env steps each
    python -m benchmarks.domain_randomization --seeds 1 --total-timesteps 5e5

The runs are PPO with ``experiments.ppo_cartpole``'s defaults (its MLP); the randomised ones add
``randomize=("length=0.25:2.0",)``, the GRU one also ``memory="gru", memory_size=128,
hidden_sizes=(128,), activation="relu"`` (PureJaxRL's ``ppo_rnn.py`` network). ``--modes`` picks
some of them (``fixed``, ``mlp``, ``gru``). Each (seed, length) cell is the mean greedy return of
``--episodes`` episodes (``rljax.evaluate.evaluate`` with ``env_params`` changed). Prints one table per
training mode (rows: seeds, columns: lengths) and the minimum over lengths of each seed.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time

import rljax
from experiments.ppo_cartpole import DEFAULTS
from rljax.agents.ppo import PPOConfig

LENGTHS = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0)


def train_and_evaluate(config: PPOConfig, episodes: int) -> tuple[list[float], float]:
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        rljax.train(config, options=rljax.RunOptions(run_dir=f"{tmp}/run", quiet=True, tensorboard=False))
        seconds = time.perf_counter() - t0
        policy = rljax.load(f"{tmp}/run")
        returns = [float(rljax.evaluate.evaluate(policy, episodes, env_params=policy.env_params.replace(length=length)).returns
                         .mean()) for length in LENGTHS]
    return returns, seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--total-timesteps", type=float, default=1e6)
    ap.add_argument("--episodes", type=int, default=32)
    ap.add_argument("--modes", nargs="+", default=["fixed", "mlp", "gru"], choices=["fixed", "mlp", "gru"])
    a = ap.parse_args()
    base = PPOConfig(**{**DEFAULTS, "total_timesteps": int(a.total_timesteps)})
    randomized = dict(randomize=("length=0.25:2.0",))
    modes = {"fixed": ("fixed length 0.5, MLP", {}), "mlp": ("randomised 0.25-2.0, MLP", randomized),
             "gru": ("randomised 0.25-2.0, GRU", dict(randomized, memory="gru", memory_size=128, hidden_sizes=(128,),
                                                       activation="relu"))}
    print(f"PPO CartPole, {int(a.total_timesteps):,} env steps, greedy return over {a.episodes} episodes per cell")
    print("| training | seed | " + " | ".join(f"{x:g}" for x in LENGTHS) + " | min | train s |")
    print("|---|---|" + "---|" * (len(LENGTHS) + 2))
    for mode, fields in (modes[m] for m in a.modes):
        for seed in range(a.seeds):
            returns, seconds = train_and_evaluate(dataclasses.replace(base, seed=seed, **fields), a.episodes)
            print(f"| {mode} | {seed} | " + " | ".join(f"{r:.0f}" for r in returns)
                  + f" | {min(returns):.0f} | {seconds:.1f} |", flush=True)


if __name__ == "__main__":
    main()
