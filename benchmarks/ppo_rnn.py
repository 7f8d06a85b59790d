"""PPO with a GRU (``--memory gru``) beside PureJaxRL's ``ppo_rnn.py`` on its CartPole configuration.

    python -m benchmarks.ppo_rnn --purejaxrl SCRATCH/purejaxrl/purejaxrl --peers-python PY   # 3 rounds
    python -m benchmarks.ppo_rnn --rounds 1                                                   # rljax only

Both sides train ``ppo_rnn.py``'s configuration: CartPole-v1, 4 envs x 128 steps, 4 epochs of 4
minibatches of whole sequences (one env's 128 steps each), 5e5 env steps, Adam 2.5e-4 annealed,
``Dense(128) -> ReLU -> GRU(128) -> Dense(128) -> ReLU`` heads. rljax runs ``rljax.train`` with a
temporary run directory (metrics.jsonl, tensorboard, checkpoints); PureJaxRL runs its own
``make_train`` under one ``jax.jit`` in the peers' virtual environment (``--peers-python``, from
the peers' ``setup.sh``), from a scratch checkout of github:luchris429/purejaxrl with the two
one-line fixes current flax needs (``nn.GRUCell(features=ins.shape[1])``, and
``ScannedRNN.initialize_carry`` returning ``jnp.zeros((batch_size, hidden_size))``).

Each round runs every side in a fresh process, interleaved (rljax, PureJaxRL, rljax, ...), and
prints: compile s, env steps/s of the training phase (env steps / seconds after compiling: rljax's
chunked loop with its logging and checkpoints, PureJaxRL's one monolithic call), the final return,
and the median ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

from benchmarks.chunk_program import PUREJAXRL_PRELUDE

RLJAX = r"""
import json, tempfile, time
import rljax
from rljax.agents.ppo import PPOConfig
config = PPOConfig(env="CartPole-v1", memory="gru", memory_size=128, hidden_sizes=(128,), activation="relu",
                   num_envs=4, num_steps=128, num_epochs=4, num_minibatches=4, total_timesteps=500_000,
                   seed=SEED)
t0 = time.perf_counter()
with tempfile.TemporaryDirectory() as run_dir:
    result = rljax.train(config, options=rljax.RunOptions(run_dir=run_dir + "/run", quiet=True))
total = time.perf_counter() - t0
t = result.timings
print(json.dumps({"compile_s": t["compile_s"], "train_s": t["loop_s"], "total_s": total,
                  "env_steps": t["total_env_steps"], "final_return": result.rows[-1]["episode_return_mean"]}))
"""

PUREJAXRL = PUREJAXRL_PRELUDE + r"""
import jax
from ppo_rnn import make_train
config = {"LR": 2.5e-4, "NUM_ENVS": 4, "NUM_STEPS": 128, "TOTAL_TIMESTEPS": 5e5, "UPDATE_EPOCHS": 4,
          "NUM_MINIBATCHES": 4, "GAMMA": 0.99, "GAE_LAMBDA": 0.95, "CLIP_EPS": 0.2, "ENT_COEF": 0.01,
          "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5, "ENV_NAME": "CartPole-v1", "ANNEAL_LR": True, "DEBUG": False}
t0 = time.perf_counter()
train = jax.jit(make_train(config)).lower(jax.random.PRNGKey(SEED)).compile()
t1 = time.perf_counter()
out = jax.block_until_ready(train(jax.random.PRNGKey(SEED)))
t2 = time.perf_counter()
info = out["metric"]
done = info["returned_episode"][-10:]
final = float((info["returned_episode_returns"][-10:] * done).sum() / max(done.sum(), 1))
steps = int(config["TOTAL_TIMESTEPS"]) // (4 * 128) * 4 * 128
print(json.dumps({"compile_s": t1 - t0, "train_s": t2 - t1, "total_s": t2 - t0, "env_steps": steps,
                  "final_return": final}))
"""


def run(python: str, code: str) -> dict:
    done = subprocess.run([python, "-c", code], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"a benchmark process failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--purejaxrl", metavar="DIR", help="the folder holding PureJaxRL's (fixed) ppo_rnn.py")
    ap.add_argument("--peers-python", metavar="PY", default=sys.executable, help="the python that runs PureJaxRL")
    a = ap.parse_args()
    sides = {"rljax --memory gru": (sys.executable, RLJAX)}
    if a.purejaxrl:
        sides["PureJaxRL ppo_rnn.py"] = (a.peers_python, f"DIR = {a.purejaxrl!r}\n" + PUREJAXRL)
    results: dict[str, list[dict]] = {name: [] for name in sides}
    print("| round | side | compile s | train s | env steps/s | final return |")
    print("|---|---|---|---|---|---|")
    for r in range(a.rounds):
        for name, (python, code) in sides.items():
            out = run(python, code.replace("SEED", str(r)))
            out["sps"] = out["env_steps"] / out["train_s"]
            results[name].append(out)
            print(f"| {r} | {name} | {out['compile_s']:.2f} | {out['train_s']:.1f} | {out['sps']:,.0f} | "
                  f"{out['final_return']:.1f} |", flush=True)
    if len(sides) == 2:
        ours, theirs = results.values()
        ratios = [x["sps"] / y["sps"] for x, y in zip(ours, theirs)]
        compile_ratios = [x["compile_s"] / y["compile_s"] for x, y in zip(ours, theirs)]
        print(f"median ratio rljax / PureJaxRL, env steps/s: {statistics.median(ratios):.2f} "
              f"(rounds: {', '.join(f'{x:.2f}' for x in ratios)}); compile s: {statistics.median(compile_ratios):.2f}")


if __name__ == "__main__":
    main()
