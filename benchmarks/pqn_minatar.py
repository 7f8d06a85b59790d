"""PQN on Breakout-MinAtar with purejaxql's MinAtar configuration, beside purejaxql's own script.

    python -m benchmarks.pqn_minatar --purejaxql SCRATCH/purejaxql/purejaxql \\
        --peers-python /tmp/rljax-peers/bin/python --rounds 3            # interleaved rounds

purejaxql (github:mttga/purejaxql) is not a package: fetch it to a scratch folder outside this
repository; its ``pqn_minatar.py`` runs in the peers' venv (``setup.sh``'s gymnax 0.0.9, flax, optax,
plus ``hydra-core`` and ``omegaconf``, which it imports; ``wandb`` is stubbed, its logging is off).

Both sides train its ``config/alg/pqn_minatar.yaml`` on Breakout-MinAtar for ``--total-timesteps``
(its decays scaled to them, evaluation during training off): 128 envs x 32 steps, 2 epochs x 32
minibatches, lr 5e-4 annealed, Q(lambda) 0.65, epsilon 1 -> 0.05 over the first 10 %, max grad norm
10, one seed. The networks: purejaxql's is ``Conv(16, 3x3) -> LayerNorm -> relu -> Dense(128) ->
LayerNorm -> relu -> Dense(actions)`` (flax's ``nn.Conv``); rljax's ``--encoder cnn --hidden-sizes
128`` is the same without the LayerNorm after the convolution, its conv written as patches times a
matrix (:class:`rljax.core.networks.Conv3x3`). Each run is a fresh process (its own compile);
printed per round: env steps/s over compiled compute (compile excluded, as both measure), compile
s, final return; then the median paired ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

from benchmarks import json_result

PEER = r"""
import json, sys, time, types
sys.path.insert(0, __DIR__)
sys.modules["wandb"] = types.ModuleType("wandb")
import yaml, jax, jax.numpy as jnp
from pqn_minatar import make_train
cfg = yaml.safe_load(open(__DIR__ + "/config/alg/pqn_minatar.yaml"))
cfg = {k: (float(v) if isinstance(v, str) and v[:1].isdigit() else v) for k, v in cfg.items()}
cfg.update(ENV_NAME="Breakout-MinAtar", TOTAL_TIMESTEPS=__STEPS__, TOTAL_TIMESTEPS_DECAY=__STEPS__,
           TEST_DURING_TRAINING=False, WANDB_MODE="disabled")
train = jax.jit(jax.vmap(make_train(cfg)))
keys = jax.random.split(jax.random.PRNGKey(0), 1)
t0 = time.perf_counter(); compiled = train.lower(keys).compile(); compile_s = time.perf_counter() - t0
t0 = time.perf_counter(); out = jax.block_until_ready(compiled(keys)); run_s = time.perf_counter() - t0
per_update = int(cfg["NUM_ENVS"] * cfg["NUM_STEPS"])
steps = int(cfg["TOTAL_TIMESTEPS"]) // per_update * per_update
ret = float(jnp.mean(out["metrics"]["returned_episode_returns"][0, -10:]))
print(json.dumps(dict(compile_s=compile_s, sps=steps / run_s, final_return=ret)))
"""

RLJAX = r"""
import json, os, tempfile
import rljax
from rljax.agents.pqn import PQNConfig
config = PQNConfig(env="gymnax/Breakout-MinAtar", num_envs=128, num_steps=32, num_epochs=2, num_minibatches=32,
                   learning_rate=5e-4, q_lambda=0.65, epsilon_start=1.0, epsilon_end=0.05, exploration_fraction=0.1,
                   max_grad_norm=10.0, encoder="cnn", hidden_sizes=(128,), total_timesteps=__STEPS__)
with tempfile.TemporaryDirectory() as tmp:
    r = rljax.train(config, options=rljax.RunOptions(run_dir=os.path.join(tmp, "run"), quiet=True))
t = r.timings
print(json.dumps(dict(compile_s=t["compile_s"], sps=t["total_env_steps"] / t["compute_s"],
                      final_return=r.final_return)))
"""


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--purejaxql", required=True, metavar="DIR", help="the folder holding pqn_minatar.py")
    ap.add_argument("--peers-python", default=os.environ.get("RLJAX_PEERS_PYTHON", "/tmp/rljax-peers/bin/python"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--total-timesteps", type=int, default=500_000)
    a = ap.parse_args(argv)
    steps = str(a.total_timesteps)
    peer_env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    ratios = []
    for r in range(a.rounds):
        ours = json_result([sys.executable, "-c", RLJAX.replace("__STEPS__", steps)], "rljax", timeout=1800)
        code = PEER.replace("__DIR__", repr(a.purejaxql)).replace("__STEPS__", steps)
        peer = json_result([a.peers_python, "-c", code], "purejaxql", timeout=1800, env=peer_env)
        ratios.append(ours["sps"] / peer["sps"])
        print(f"round {r + 1}: rljax {ours['sps']:,.0f} steps/s (compile {ours['compile_s']:.2f}s, return "
              f"{ours['final_return']:.1f}); purejaxql {peer['sps']:,.0f} steps/s (compile {peer['compile_s']:.2f}s, "
              f"return {peer['final_return']:.1f}); ratio {ratios[-1]:.2f}x", flush=True)
    print(f"rljax / purejaxql steps/s, median of {a.rounds} paired rounds: {statistics.median(ratios):.2f}x")


if __name__ == "__main__":
    sys.exit(main())
