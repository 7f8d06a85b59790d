"""AlphaZero's targets: the experiments trained from their defaults, then their matches.

    python -m benchmarks.alphazero_targets --seeds 0,1,2,3,4              # tic-tac-toe, about 2 min a seed
    python -m benchmarks.alphazero_targets --games connect_four --seeds 0 # connect four, about 10 min a seed

Tic-tac-toe (``experiments.alphazero_tictactoe``): each seed's run plays 100 games as each side against
the perfect player (``envs.board_games:tictactoe_perfect``) with its network alone, with its search at
the run's simulations and with 128 simulations; the target is no loss with its search. Then every line
the perfect player can choose against that search (each of its optimal moves in turn, the search's
own choice, deterministic, at the agent's turns) is walked to its end: ``losing decisions`` counts the
positions where the search's move throws the draw away, so 0 means it never loses to a perfect player
whatever that player draws (stricter than 200 games). Connect four
(``experiments.alphazero_connect_four``): 100 games a side against random and 50 against the depth-2
minimax player (``envs.board_games:connect_four_minimax2``), with the search and the network alone; the
target is at least 95 % wins against random on each side. Each run is the experiment module in a
fresh process (``--seed S --run-dir DIR``); printed: one line per seed and player, wins/draws/losses
as the first and the second mover, and the CPU.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

from benchmarks.bench_vmap import cpu_model


def _line(name: str, out: dict) -> str:
    f, s = out["as_first"], out["as_second"]
    return f"{name}: as first {f.wins}/{f.draws}/{f.losses}, as second {s.wins}/{s.draws}/{s.losses}"


def losing_decisions(policy, env, params, num_simulations: int) -> tuple[int, int, list[str]]:
    """Walks every line of tic-tac-toe in which the perfect player plays any of its optimal moves and
    the search of ``policy`` (``num_simulations``, no noise: deterministic) plays at its turns, from
    both seats. Returns ``(decisions, losing, lines)``: the search's decisions taken, those whose move
    was not optimal (it lets a perfect player win), and those lines' moves."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from rljax.policy import games

    search = jax.jit(games.search_player(policy, env, params, num_simulations=num_simulations))
    step = jax.jit(env.step_env)
    counts, lines = [0, 0], []

    def walk(state, obs, searching: bool, moves: list[int]) -> None:
        optimal = env.optimal_moves(obs)
        if searching:
            batch = jax.tree.map(lambda x: x[None], (state, obs))
            choices = [int(search(jax.random.key(0), *batch)[0])]
            counts[0] += 1
            if not optimal[choices[0]]:
                counts[1] += 1
                lines.append(" ".join(map(str, moves + choices)))
        else:
            choices = np.flatnonzero(optimal).tolist()
        for move in choices:
            next_obs, next_state, _, terminated, _ = step(jax.random.key(0), state, jnp.int32(move), params)
            if not bool(terminated):
                walk(next_state, next_obs, not searching, moves + [move])

    for first in (True, False):
        obs, state = env.reset_env(jax.random.key(0), params)
        walk(state, obs, first, [])
    return counts[0], counts[1], lines


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--games", default="tictactoe", choices=("tictactoe", "connect_four"))
    ap.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    ap.add_argument("--keep", metavar="DIR", help="keep the runs under DIR (default: a temporary folder)")
    a = ap.parse_args(argv)
    import envs
    import rljax
    from rljax.policy import games

    module = "alphazero_tictactoe" if a.games == "tictactoe" else "alphazero_connect_four"
    env, params = envs.make("TicTacToe-v0" if a.games == "tictactoe" else "ConnectFour-v0")
    print(f"{module}, seeds {a.seeds}, {cpu_model()}, {os.cpu_count()} cores", flush=True)
    root = a.keep or tempfile.mkdtemp(prefix="rljax-az-")
    failed = []
    for seed in (int(s) for s in a.seeds.split(",")):
        run = os.path.join(root, f"{module}-s{seed}")
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", f"experiments.{module}", "--seed", str(seed), "--run-dir", run,
                        "--quiet"], check=True)
        print(f"seed {seed}: trained in {time.perf_counter() - t0:.0f} s", flush=True)
        policy = rljax.load(run)
        net, search = games.policy_player(policy), games.search_player(policy, env, params)
        if a.games == "tictactoe":
            perfect = games.opponent_player(env.perfect_player())
            rows = {"network vs perfect": games.match(env, params, net, perfect, 100),
                    f"search ({policy.config.num_simulations}) vs perfect": games.match(env, params, search, perfect,
                                                                                      100),
                    "search (128) vs perfect": games.match(
                        env, params, games.search_player(policy, env, params, num_simulations=128), perfect, 100)}
            ok = all(o.losses == 0 for o in rows["search (128) vs perfect"].values())
            decisions, losing, lines = losing_decisions(policy, env, params, 128)
            print(f"  seed {seed} search (128), every line of the perfect player: {losing} losing decisions of "
                  f"{decisions}" + (f" (after moves {'; '.join(lines)})" if lines else ""), flush=True)
        else:
            minimax = games.opponent_player(env.minimax_player(2))
            rows = {"search vs random": games.match(env, params, search, games.random_player(), 100),
                    "network vs random": games.match(env, params, net, games.random_player(), 100),
                    "search vs minimax-2": games.match(env, params, search, minimax, 50),
                    "network vs minimax-2": games.match(env, params, net, minimax, 50)}
            ok = all(o.wins >= 95 for o in rows["search vs random"].values())
        for name, out in rows.items():
            print(f"  seed {seed} {_line(name, out)}", flush=True)
        print(f"  seed {seed}: target {'met' if ok else 'NOT met'}", flush=True)
        if not ok:
            failed.append(seed)
    print(f"target met on {len(a.seeds.split(',')) - len(failed)} of {len(a.seeds.split(','))} seeds"
          + (f" (not on {failed})" if failed else ""))


if __name__ == "__main__":
    main()
