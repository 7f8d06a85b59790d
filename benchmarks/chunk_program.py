"""The size and compile time of PPO CartPole's compiled program, beside PureJaxRL's.

    python -m benchmarks.chunk_program                      # rljax only, 5 interleaved rounds
    python -m benchmarks.chunk_program --purejaxrl DIR --peer-python PY   # and PureJaxRL's make_train

rljax's program is one chunk of the default run (PureJaxRL's configuration: 4 envs x 128 steps,
4 epochs x 4 minibatches, 2x64 tanh MLPs; 122 updates a chunk); PureJaxRL's is its whole ``train``
(the same updates in one scan), lowered and compiled the same way. Each round runs every program in
a fresh process (so neither finds its program in a compile cache) and prints: lowering s, XLA
compile s, the optimised HLO's instruction count and fusion calls (each fusion is one kernel
LLVM compiles), and for rljax the seconds of one chunk. ``DIR`` holds PureJaxRL's ``ppo.py`` (a
checkout of github:luchris429/purejaxrl, outside this repository); ``PY`` a python with its
dependencies (gymnax 0.0.9, distrax).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import textwrap

COUNT = r"""
import re
def counts(compiled):
    text = compiled.as_text()
    return (len(re.findall(r"^\s*(?:ROOT )?%?[\w.\-]+ = ", text, re.M)), len(re.findall(r" fusion\(", text)))
"""

RLJAX = COUNT + r"""
import json, time
import jax
from rljax.agents.ppo import PPOConfig
from rljax.core.registry import make
from rljax.training.program import Program, make_chunk, pack_output, plan_updates
config = PPOConfig(env="CartPole-v1")
env, params = make(config.env)
program = Program(config, env, params)
plan = plan_updates(config.total_timesteps, config.env_steps_per_update, config.updates_per_chunk)
state = program.init_state(plan.num_updates)
packed, _ = pack_output(make_chunk(program.agent.update, plan.updates_per_chunk, program.axis_name,
                                   program.resolve_log_every(0, plan)))  # the run's rows: one per update
t0 = time.perf_counter(); lowered = program.map_chunk(packed).lower(state); t1 = time.perf_counter()
compiled = lowered.compile(); t2 = time.perf_counter()
state, out = compiled(state); jax.block_until_ready(out)
t3 = time.perf_counter(); state, out = compiled(state); jax.block_until_ready(out); t4 = time.perf_counter()
instructions, fusions = counts(compiled)
print(json.dumps(dict(lower_s=t1 - t0, compile_s=t2 - t1, instructions=instructions, fusions=fusions,
                      chunk_s=t4 - t3, updates=plan.updates_per_chunk)))
"""

PUREJAXRL_PRELUDE = r"""
import json, sys, time, types
sys.path.insert(0, DIR)
for name in ["brax", "brax.envs", "brax.envs.wrappers", "brax.envs.wrappers.training", "navix"]:
    sys.modules.setdefault(name, types.ModuleType(name))
sys.modules["brax.envs"].State = object
sys.modules["brax.envs.wrappers.training"].EpisodeWrapper = object
sys.modules["brax.envs.wrappers.training"].AutoResetWrapper = object
"""
"""What a PureJaxRL script needs before importing its modules (``DIR`` set before it): its
``wrappers.py`` imports brax and navix at the top, stubbed (the classic-control paths never use them)."""

PUREJAXRL = COUNT + PUREJAXRL_PRELUDE + r"""
import jax
from ppo import make_train
config = {"LR": 2.5e-4, "NUM_ENVS": 4, "NUM_STEPS": 128, "TOTAL_TIMESTEPS": 5e5, "UPDATE_EPOCHS": 4,
          "NUM_MINIBATCHES": 4, "GAMMA": 0.99, "GAE_LAMBDA": 0.95, "CLIP_EPS": 0.2, "ENT_COEF": 0.01,
          "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5, "ACTIVATION": "tanh", "ENV_NAME": "CartPole-v1",
          "ANNEAL_LR": True, "DEBUG": False}
t0 = time.perf_counter(); lowered = jax.jit(make_train(config)).lower(jax.random.PRNGKey(0)); t1 = time.perf_counter()
compiled = lowered.compile(); t2 = time.perf_counter()
instructions, fusions = counts(compiled)
print(json.dumps(dict(lower_s=t1 - t0, compile_s=t2 - t1, instructions=instructions, fusions=fusions)))
"""


def run(python: str, code: str) -> dict:
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--purejaxrl", metavar="DIR", help="the folder holding PureJaxRL's ppo.py")
    ap.add_argument("--peer-python", metavar="PY", help="the python that runs PureJaxRL")
    a = ap.parse_args()
    programs = {"rljax (one chunk)": (sys.executable, RLJAX)}
    if a.purejaxrl:
        programs["PureJaxRL (whole train)"] = (a.peer_python or sys.executable,
                                               f"DIR = {a.purejaxrl!r}\n" + textwrap.dedent(PUREJAXRL))
    results: dict[str, list[dict]] = {name: [] for name in programs}
    for _ in range(a.rounds):
        for name, (python, code) in programs.items():
            results[name].append(run(python, code))
    print(f"medians of {a.rounds} interleaved rounds, a fresh process each")
    print("| program | instructions | fusions | lower s | compile s | one chunk s |")
    print("|---|---|---|---|---|---|")
    for name, rows in results.items():
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        chunk = f"{med['chunk_s']:.3f} ({int(med['updates'])} updates)" if "chunk_s" in med else "-"
        print(f"| {name} | {int(med['instructions'])} | {int(med['fusions'])} | {med['lower_s']:.2f} | "
              f"{med['compile_s']:.2f} | {chunk} |")


if __name__ == "__main__":
    main()
