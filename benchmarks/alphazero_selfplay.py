"""AlphaZero self-play games per second on connect four, beside Pgx's own AlphaZero example.

    python -m benchmarks.alphazero_selfplay --pgx-example SCRATCH/pgx/examples/alphazero \\
        --peer-python /tmp/pgx-peer/bin/python --rounds 3          # interleaved rounds, fresh processes

Pgx's example (github:sotetsuk/pgx, ``examples/alphazero/train.py``) is a script, not a package: fetch
the repository to a scratch folder outside this one. Its ``selfplay`` runs in a venv with jax 0.10.2,
``pgx``, ``mctx``, ``dm-haiku``, ``optax``, ``omegaconf`` and ``pydantic`` (``wandb`` is stubbed and
``pgx.make_baseline_model``, which downloads weights, is not called: the script's module body runs
with both replaced; nothing of it is copied here). Its network ``AZNet`` (a ResNet) is replaced by
the network rljax's AlphaZero uses here, so both sides search with the same network: an MLP of two
ReLU layers of 128 on the flattened board, a policy head and a value head (``--encoder mlp
--hidden-sizes 128,128``, one torso). The same search on both sides: ``mctx.gumbel_muzero_policy``,
``--simulations`` simulations, 16 considered actions, Gumbel scale 1, the completed-Q transform's
defaults.

Each side plays ``--games-batch`` games at once for ``--steps`` moves (games restart as they end) in
one compiled program, timed after its compile (best of ``--reps`` calls); printed per round: finished
games per second and moves per second; then the median of the paired ratios (rljax / Pgx).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

from benchmarks import json_result
from benchmarks.bench_vmap import cpu_model

PEER = r"""
import json, sys, time, types
sys.path.insert(0, __DIR__)
sys.modules["wandb"] = types.ModuleType("wandb")
import haiku as hk, jax, jax.numpy as jnp
import pgx

class AZNet(hk.Module):  # the network rljax searches with here (the benchmark's docstring), in place of the ResNet
    def __init__(self, num_actions, num_channels=128, num_blocks=2, resnet_v2=True, name="az_net"):
        super().__init__(name=name)
        self.num_actions, self.width = num_actions, num_channels
    def __call__(self, x, is_training, test_local_stats):
        x = hk.Flatten()(x.astype(jnp.float32))
        x = jax.nn.relu(hk.Linear(self.width)(x))
        x = jax.nn.relu(hk.Linear(self.width)(x))
        return hk.Linear(self.num_actions)(x), hk.Linear(1)(x)[..., 0]

sys.modules["network"] = types.SimpleNamespace(AZNet=AZNet)
pgx.make_baseline_model = lambda name: None
sys.argv = ["train.py", "env_id=connect_four", "selfplay_batch_size=__BATCH__", "num_simulations=__SIMS__",
            "max_num_steps=__STEPS__", "num_channels=128"]
source = open(__DIR__ + "/train.py").read()
namespace = {"__name__": "pgx_example"}
exec(compile(source, "train.py", "exec"), namespace)
forward, env = namespace["forward"], namespace["env"]
devices = jax.local_devices()
dummy = jax.vmap(env.init)(jax.random.split(jax.random.PRNGKey(0), 2))
model = forward.init(jax.random.PRNGKey(0), dummy.observation)
model = jax.tree.map(lambda x: jnp.broadcast_to(x, (len(devices),) + x.shape), model)  # device_put_replicated's
keys = jax.random.split(jax.random.PRNGKey(1), len(devices))
selfplay = namespace["selfplay"]
t0 = time.perf_counter(); out = jax.block_until_ready(selfplay(model, keys)); compile_s = time.perf_counter() - t0
best = None
for rep in range(__REPS__):
    keys = jax.random.split(jax.random.PRNGKey(2 + rep), len(devices))
    t0 = time.perf_counter(); out = jax.block_until_ready(selfplay(model, keys)); t = time.perf_counter() - t0
    best = t if best is None else min(best, t)
games = float(jnp.sum(out.terminated))
print(json.dumps(dict(compile_s=compile_s, run_s=best, games=games, moves=__BATCH__ * __STEPS__)))
"""

RLJAX = r"""
import json, time, types
import jax, jax.numpy as jnp
import envs
from rljax.agents.alphazero import AlphaZeroConfig, search_policy, self_play
from rljax.agents.base import make_env_stack
from rljax.agents.onpolicy import actor_critic_network
from rljax.core.rollout import RolloutCarry, rollout
env, params = envs.make("ConnectFour-v0")
config = AlphaZeroConfig(env="ConnectFour-v0", num_envs=__BATCH__, num_steps=__STEPS__, num_simulations=__SIMS__,
                         encoder="mlp", hidden_sizes=(128, 128), dirichlet_fraction=0.0,
                         total_timesteps=__BATCH__ * __STEPS__)
network = actor_critic_network(config, env, params, "AlphaZero")
venv = make_env_stack(env, params, __BATCH__)
obs, env_state = venv.reset(jax.random.key(0), params)
net = network.init(jax.random.key(0), jax.tree.map(lambda x: x[:1], obs))
behaviour = self_play(search_policy(env, params, network.apply, config), config)
ctx = types.SimpleNamespace(hyperparams=config.hyperparams())

@jax.jit
def play(net, env_state, obs, key):
    carry, traj, episodes = rollout(venv, params, behaviour(net, ctx), RolloutCarry(env_state, obs), key, __STEPS__,
                                    observe=lambda s, o: (s, o))
    return episodes.count
t0 = time.perf_counter(); games = jax.block_until_ready(play(net, env_state, obs, jax.random.key(1)))
compile_s = time.perf_counter() - t0
best = None
for rep in range(__REPS__):
    t0 = time.perf_counter(); games = jax.block_until_ready(play(net, env_state, obs, jax.random.key(2 + rep)))
    t = time.perf_counter() - t0
    best = t if best is None else min(best, t)
print(json.dumps(dict(compile_s=compile_s, run_s=best, games=float(games), moves=__BATCH__ * __STEPS__)))
"""


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pgx-example", required=True, metavar="DIR", help="the folder holding Pgx's AlphaZero train.py")
    ap.add_argument("--peer-python", default=os.environ.get("RLJAX_PGX_PYTHON", "/tmp/pgx-peer/bin/python"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--games-batch", type=int, default=256, help="games played at once (default 256)")
    ap.add_argument("--steps", type=int, default=64, help="moves per game slot per call (default 64)")
    ap.add_argument("--simulations", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3, help="timed calls per process, the best counts")
    a = ap.parse_args(argv)
    subs = {"__BATCH__": str(a.games_batch), "__STEPS__": str(a.steps), "__SIMS__": str(a.simulations),
            "__REPS__": str(a.reps), "__DIR__": repr(a.pgx_example)}

    def code(template: str) -> str:
        for k, v in subs.items():
            template = template.replace(k, v)
        return template

    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    print(f"connect four self-play, {a.games_batch} games x {a.steps} moves, {a.simulations} simulations, "
          f"{cpu_model()}, {os.cpu_count()} cores")
    ratios = []
    for r in range(a.rounds):
        ours = json_result([sys.executable, "-c", code(RLJAX)], "rljax", timeout=1800, env=env)
        peer = json_result([a.peer_python, "-c", code(PEER)], "pgx example", timeout=1800, env=env)
        gps = {k: v["games"] / v["run_s"] for k, v in (("rljax", ours), ("pgx", peer))}
        ratios.append(gps["rljax"] / gps["pgx"])
        print(f"round {r + 1}: rljax {gps['rljax']:.1f} games/s ({ours['moves'] / ours['run_s']:,.0f} moves/s, "
              f"{ours['games']:.0f} games, compile {ours['compile_s']:.1f}s); pgx example {gps['pgx']:.1f} games/s "
              f"({peer['moves'] / peer['run_s']:,.0f} moves/s, {peer['games']:.0f} games, compile "
              f"{peer['compile_s']:.1f}s); ratio {ratios[-1]:.2f}", flush=True)
    print(f"median ratio rljax / pgx example (games/s): {statistics.median(ratios):.2f} over {len(ratios)} rounds")


if __name__ == "__main__":
    main()
