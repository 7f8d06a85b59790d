"""PPO on MinAtar Breakout with PureJaxRL's MinAtar configuration, beside PureJaxRL in the same run.

    python -m benchmarks.ppo_minatar                                  # PureJaxRL, then rljax mlp and cnn, 3 seeds
    python -m benchmarks.ppo_minatar --encoders mlp --seeds 1 --total-timesteps 1e6
    python -m benchmarks.ppo_minatar --encoders cnn --shared-torso --no-peer --seeds 1 --total-timesteps 2e6
    RLJAX_PUREJAXRL_DIR=/scratch/purejaxrl/purejaxrl RLJAX_PEERS_PYTHON=/tmp/rljax-peers/bin/python \\
        python -m benchmarks.ppo_minatar                              # where PureJaxRL and its venv are

The configuration (PureJaxRL's MinAtar notebook): 64 envs x 128 steps, 4 epochs x 8 minibatches, lr
5e-3 annealed, relu, 64 x 64 actor and critic MLPs, gamma 0.99, lambda 0.95, clip 0.2, entropy 0.01,
value 0.5, max grad norm 0.5, 1e7 env steps. rljax trains on ``Breakout-MinAtar`` (gymnax's game with
bool observation planes) with each encoder in ``--encoders``: ``mlp`` flattens the [10, 10, 4]
planes into the MLP, as PureJaxRL does; ``cnn`` puts the 16-filter 3x3 conv torso before it.

PureJaxRL is not a package: fetch its repository to a scratch folder outside the project, build a
venv with ``setup.sh`` (gymnax 0.0.9, distrax) and point ``RLJAX_PUREJAXRL_DIR`` and
``RLJAX_PEERS_PYTHON`` at them, with ``RLJAX_PEERS_DIR`` holding ``purejaxrl_run.py``; without them
the PureJaxRL row is skipped, and its recorded figures (``benchmarks/results.md``) are printed instead.

Printed per rljax run: final return (the mean training-episode return of the last two chunks, as
``TrainResult.final_return``), training-phase env steps/s (env steps / seconds of compiled compute,
compile excluded, as PureJaxRL's figure is), compile s and wall s; then per encoder the mean return over
seeds and the ratio of rljax's median steps/s to PureJaxRL's.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import time

from rljax.agents.ppo import PPOConfig

CONFIG = dict(env="Breakout-MinAtar", num_envs=64, num_steps=128, num_epochs=4, num_minibatches=8,
              learning_rate=5e-3, anneal_lr=True, activation="relu", hidden_sizes=(64, 64), gamma=0.99,
              gae_lambda=0.95, clip_eps=0.2, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5)
PUREJAXRL_SET = ["ENV_NAME=Breakout-MinAtar", "LR=5e-3", "NUM_ENVS=64", "NUM_STEPS=128", "NUM_MINIBATCHES=8",
                 "UPDATE_EPOCHS=4", "ACTIVATION=relu"]
REFERENCE = ("PureJaxRL measured 2026-12-01 on a 2-core x86 CPU VM, jax 0.10.2, its own ppo.py (1 seed): "
             "1e7 steps return 39.1 at 72.6k steps/s, 138 s")


def purejaxrl(total_timesteps: float) -> dict | None:
    """PureJaxRL's own make_train with the same configuration, in its own venv; None when not set up."""
    pj_dir, python = os.environ.get("RLJAX_PUREJAXRL_DIR"), os.environ.get("RLJAX_PEERS_PYTHON")
    peers = os.environ.get("RLJAX_PEERS_DIR")  # outside this repository (see the module docstring)
    script = pathlib.Path(peers or "RLJAX_PEERS_DIR-not-set") / "purejaxrl_run.py"
    if not (pj_dir and python and peers and script.is_file()):
        print(f"PureJaxRL: not set up (RLJAX_PUREJAXRL_DIR, RLJAX_PEERS_PYTHON, {script}); {REFERENCE}", flush=True)
        return None
    t0 = time.perf_counter()
    out = subprocess.run([python, str(script), "--dir", pj_dir, "--repeats", "1", "--set", *PUREJAXRL_SET,
                          f"TOTAL_TIMESTEPS={total_timesteps:g}"], capture_output=True, text=True, check=True)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["wall_s"] = time.perf_counter() - t0
    print(f"PureJaxRL (flattened MLP, 1 seed): return {res['final_return']:.1f}, {res['sps']:,} steps/s, compile "
          f"{res['compile_s']:.1f} s, wall {res['wall_s']:.0f} s", flush=True)
    return res


def rljax_seeds(encoder: str, seeds: range, total_timesteps: int, shared_torso: bool = False) -> list[dict]:
    """One ``rljax.train`` per seed, in memory (logging on, no checkpoints), each timed."""
    import rljax

    rows = []
    for seed in seeds:
        t0 = time.perf_counter()
        r = rljax.train(PPOConfig(seed=seed, total_timesteps=total_timesteps, encoder=encoder,
                                  shared_torso=shared_torso, **CONFIG),
                        options=rljax.RunOptions(quiet=True, checkpoints=False, tensorboard=False,
                                                 handle_signals=False))
        t = r.timings
        rows.append(dict(encoder=encoder, shared_torso=shared_torso, seed=seed, final_return=r.final_return,
                         sps=t["total_env_steps"] / t["compute_s"], compile_s=t["compile_s"],
                         wall_s=time.perf_counter() - t0, env_steps=t["total_env_steps"]))
        label = f"{encoder} shared" if shared_torso else encoder
        print(f"rljax {label} seed {seed}: return {r.final_return:.1f}, {rows[-1]['sps']:,.0f} steps/s, "
              f"compile {t['compile_s']:.1f} s, wall {rows[-1]['wall_s']:.0f} s", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--encoders", default="mlp,cnn", help="comma-separated: mlp, cnn")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + seeds - 1")
    ap.add_argument("--total-timesteps", type=float, default=1e7)
    ap.add_argument("--shared-torso", action="store_true",
                    help="rljax: one encoder and torso for actor and critic (PureJaxRL's are separate)")
    ap.add_argument("--no-peer", action="store_true", help="skip PureJaxRL")
    ap.add_argument("--json", help="also write every figure to this file")
    a = ap.parse_args()
    encoders = [e for e in a.encoders.split(",") if e]
    bad = [e for e in encoders if e not in ("mlp", "cnn")]
    if bad:
        ap.error(f"--encoders: {bad} are not among mlp, cnn")
    peer = None if a.no_peer else purejaxrl(a.total_timesteps)
    seeds = range(a.first_seed, a.first_seed + a.seeds)
    runs = {e: rljax_seeds(e, seeds, int(a.total_timesteps), a.shared_torso) for e in encoders}
    summary = {}
    for e, rows in runs.items():
        sps = statistics.median(r["sps"] for r in rows)
        summary[e] = dict(mean_return=statistics.mean(r["final_return"] for r in rows), median_sps=sps,
                          ratio=(sps / peer["sps"]) if peer else None, shared_torso=a.shared_torso)
        ratio = f", {summary[e]['ratio']:.2f}x PureJaxRL's steps/s" if peer else ""
        if peer and a.shared_torso:
            ratio += " (a shared torso: not PureJaxRL's network)"
        label = f"{e} shared" if a.shared_torso else e
        print(f"rljax {label}: mean return {summary[e]['mean_return']:.1f} over {len(rows)} seed(s) "
              f"{[round(r['final_return'], 1) for r in rows]}, median {sps:,.0f} steps/s{ratio}", flush=True)
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(dict(peer=peer, runs=runs, summary=summary), indent=1))


if __name__ == "__main__":
    main()
