"""IPPO on MPE simple_spread with JaxMARL's configuration, beside JaxMARL's own script.

    python -m benchmarks.marl --jaxmarl SCRATCH/JaxMARL/baselines/IPPO --rounds 3      # interleaved rounds

JaxMARL's baselines (github:FLAIROx/JaxMARL, ``baselines/IPPO/ippo_ff_mpe.py`` and its
``config/ippo_ff_mpe.yaml``) are not in the wheel: fetch the repository to a scratch folder outside
this one. Its script runs in this venv (the ``jaxmarl`` extra gives jaxmarl and distrax) unmodified,
imported with ``hydra``, ``omegaconf`` and ``wandb`` stubbed: its per-update ``io_callback`` to
``wandb.log`` still runs (a no-op), as it does in the script.

Both sides train its config on ``MPE_simple_spread_v3`` for ``--total-timesteps`` joint steps, one seed:
16 games x 128 steps, 4 epochs x 4 minibatches, lr 2.5e-4 annealed, separate 2x64 tanh actor and
critic shared by the agents (``experiments/ippo_mpe.py``). rljax trains with a run directory, so with
its checkpoints (every chunk's newest kept, the default), its metrics rows and its progress files on;
its env steps/s are over the whole training loop (``timings["loop_s"]``: compute, logging,
checkpoints; compile excluded). JaxMARL's are over its compiled program's run (compile excluded).
Each run is a fresh process. Printed per round: env steps/s, compile s and the final return (rljax:
the team's return over the last chunks; JaxMARL: its ``returned_episode_returns`` over the last 10 %
of updates, which for MPE holds the team's return too); then the median paired ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from benchmarks import json_result

PEER = r"""
import json, sys, time, types
sys.path.insert(0, __DIR__)
for name in ("hydra", "omegaconf", "wandb"):
    sys.modules[name] = types.ModuleType(name)
sys.modules["hydra"].main = lambda **kw: (lambda f: f)
sys.modules["omegaconf"].OmegaConf = None
sys.modules["wandb"].log = lambda *a, **k: None
import yaml, jax, jax.numpy as jnp
from ippo_ff_mpe import make_train
cfg = yaml.safe_load(open(__DIR__ + "/config/ippo_ff_mpe.yaml"))
cfg.update(TOTAL_TIMESTEPS=__STEPS__, ENV_NAME="MPE_simple_spread_v3", ENV_KWARGS={}, WANDB_MODE="disabled")
train = jax.jit(make_train(cfg))
key = jax.random.PRNGKey(0)
t0 = time.perf_counter(); compiled = train.lower(key).compile(); compile_s = time.perf_counter() - t0
t0 = time.perf_counter(); out = jax.block_until_ready(compiled(key)); run_s = time.perf_counter() - t0
per_update = int(cfg["NUM_ENVS"] * cfg["NUM_STEPS"])
updates = int(cfg["TOTAL_TIMESTEPS"]) // per_update
ret = out["metrics"]["returned_episode_returns"]
ret = float(jnp.mean(ret[-max(1, updates // 10):]))
print(json.dumps(dict(compile_s=compile_s, sps=updates * per_update / run_s, final_return=ret)))
"""

RLJAX = r"""
import json, os, tempfile
import rljax
from experiments.ippo_mpe import DEFAULTS
from rljax.agents.mappo import IPPOConfig
config = IPPOConfig(**{**DEFAULTS, "total_timesteps": __STEPS__})
with tempfile.TemporaryDirectory() as tmp:
    r = rljax.train(config, options=rljax.RunOptions(run_dir=os.path.join(tmp, "run"), quiet=True))
t = r.timings
print(json.dumps(dict(compile_s=t["compile_s"], sps=t["total_env_steps"] / t["loop_s"],
                      final_return=r.final_return, checkpoints_s=t["checkpoint_s"], logging_s=t["logging_s"])))
"""


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jaxmarl", required=True, metavar="DIR", help="the folder holding ippo_ff_mpe.py and config/")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--total-timesteps", type=int, default=2_000_000)
    a = ap.parse_args(argv)
    steps = str(a.total_timesteps)
    ratios = []
    for r in range(a.rounds):
        ours = json_result([sys.executable, "-c", RLJAX.replace("__STEPS__", steps)], "rljax", timeout=3600)
        code = PEER.replace("__DIR__", repr(a.jaxmarl)).replace("__STEPS__", steps)
        peer = json_result([sys.executable, "-c", code], "jaxmarl", timeout=3600)
        ratios.append(ours["sps"] / peer["sps"])
        print(f"round {r + 1}: rljax {ours['sps']:,.0f} env steps/s (compile {ours['compile_s']:.2f}s, checkpoints "
              f"{ours['checkpoints_s']:.2f}s, logging {ours['logging_s']:.2f}s, return {ours['final_return']:.1f}); "
              f"JaxMARL {peer['sps']:,.0f} env steps/s (compile {peer['compile_s']:.2f}s, return "
              f"{peer['final_return']:.1f}); ratio {ratios[-1]:.2f}x", flush=True)
    print(f"rljax / JaxMARL env steps/s, median of {a.rounds} paired rounds: {statistics.median(ratios):.2f}x")


if __name__ == "__main__":
    sys.exit(main())
