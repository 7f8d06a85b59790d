"""Autoscaled actors against a fixed actor count when the host envs' step time changes 5x mid-run.

    python -m benchmarks.autoscale                       # both scenarios, fixed and autoscaled, 2 rounds
    python -m benchmarks.autoscale --updates 120 --rounds 1

PPO (8 envs x 32 steps a rollout, 10 epochs of 4 minibatches on a 256-256 network: an update of ~30 ms
on a 2-core Xeon) on a batch of Gymnasium CartPole envs whose every step also waits ``delay`` (a simulator
or a server answering slower: the wait is outside Python, so threads overlap it; 0.6 ms makes a
rollout about one update long). ``rise``: the delay is 5x larger from the first third of the run on;
``fall``: it is 5x larger until then. ``fixed`` runs the actor count sized for the cheap phase (1,
``rise``) or the dear one (4, ``fall``); ``autoscaled`` starts at 1 actor with ``--max-actors``.
Printed per run: the learner's busy fraction (updating over updating plus waiting) over the last half
of the run, the actor count at the end and its range, the decisions, how often the count changed
direction (an actor tried and undone counts twice) and the count after each decision, and the run's
env steps/s. ``max_policy_lag`` is 4: at
most 5 rollouts are in flight while the learner updates, so up to 5 actors can overlap their waits.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np


class Delayed:
    """A host env batch whose every step first sleeps ``phase["delay_s"]``."""

    def __init__(self, env, phase):
        self.env, self.phase, self.spec = env, phase, env.spec

    def reset(self, seed):
        return self.env.reset(seed)

    def step(self, actions):
        time.sleep(self.phase["delay_s"])
        return self.env.step(actions)

    def close(self):
        self.env.close()


def run(scenario: str, mode: str, updates: int, base_delay: float, max_actors: int, fixed_actors: int) -> dict:
    from rljax.actorlearner.learner import HostOptions, train_host
    from rljax.agents.ppo import PPOConfig
    from rljax.host.sources import make_host_env

    config = PPOConfig(env="CartPole-v1", num_envs=8, num_steps=32, total_timesteps=8 * 32 * updates,
                       num_minibatches=4, num_epochs=10, hidden_sizes=(256, 256))
    cheap, dear = base_delay, 5 * base_delay
    switch = updates // 3
    phase = {"delay_s": cheap if scenario == "rise" else dear}

    def on_row(row):
        if row["updates"] == switch:
            phase["delay_s"] = dear if scenario == "rise" else cheap

    events = []
    layout = dict(num_actors=fixed_actors) if mode == "fixed" else dict(num_actors=1, max_actors=max_actors)
    t0 = time.perf_counter()
    result = train_host(config, lambda a: Delayed(make_host_env("gymnasium/CartPole-v1", 8), phase),
                        HostOptions(max_policy_lag=4, queue_size=4, **layout), on_row, on_event=events.append)
    seconds = time.perf_counter() - t0
    rows = result.rows
    tail = rows[len(rows) // 2:]
    counts = [r["host/actors"] for r in rows]
    changes = [e["change"] for e in events if e["change"]]
    flips = sum(1 for a, b in zip(changes, changes[1:]) if a != b)
    return {"scenario": scenario, "mode": mode, "learner_busy_last_half": float(np.mean([r["host/learner_busy"]
                                                                                        for r in tail])),
            "actors_end": counts[-1], "actors_min": min(counts), "actors_max": max(counts), "decisions": len(events),
            "direction_changes": flips, "counts": [1 if mode == "autoscaled" else fixed_actors]
            + [e["actors"] for e in events], "env_steps_per_s": rows[-1]["env_steps"] / seconds,
            "events": [{k: e[k] for k in ("update", "from", "actors", "reason")} for e in events]}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--updates", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--delay-ms", type=float, default=0.6, help="the cheap phase's wait per env step")
    ap.add_argument("--max-actors", type=int, default=8)
    ap.add_argument("--out", default=None, help="append each run's JSON line here")
    a = ap.parse_args(argv)
    from rljax.cli.process import request_caller_thread_cpu_ops

    request_caller_thread_cpu_ops()
    import jax

    from benchmarks.bench_vmap import cpu_model

    print(f"# {cpu_model()}, {os.cpu_count()} cores, jax {jax.__version__}; {a.updates} updates, step wait "
          f"{a.delay_ms} ms <-> {5 * a.delay_ms} ms at update {a.updates // 3}", flush=True)
    for r in range(a.rounds):
        for scenario, fixed in (("rise", 1), ("fall", 4)):
            for mode in ("fixed", "autoscaled"):
                out = run(scenario, mode, a.updates, a.delay_ms / 1e3, a.max_actors, fixed)
                line = {"round": r, **out}
                short = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in line.items() if k != "events"}
                print(json.dumps(short), flush=True)
                if a.out:
                    with open(a.out, "a") as f:
                        f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
