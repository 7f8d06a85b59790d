"""What a metrics row per update costs: the default PPO CartPole run with ``log_every`` 0 (a row
per update) beside ``log_every`` = K (a row per chunk, as before), in interleaved rounds.

Both programs are compiled (and cached) before the timed rounds; each round trains the whole run
once per mode, in alternating order, with a run directory, tensorboard and checkpoints as a user's
run has them. Prints, per mode, the median wall time of ``train`` (set-up, compile-cache load,
chunks, logging, checkpoints), the host's logging seconds (``time/logging_s`` summed) and the
rows written, then the per-update mode's extra wall time as a percentage of the per-chunk mode's.

    python -m benchmarks.logging_cost [--rounds 5] [--total-timesteps 499712]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import tempfile
import time


def _run(config, log_every: int, root: pathlib.Path, name: str) -> dict[str, float]:
    import rljax

    run_dir = root / name
    t0 = time.perf_counter()
    result = rljax.train(config, options=rljax.RunOptions(run_dir=str(run_dir), quiet=True, log_every=log_every))
    wall = time.perf_counter() - t0
    rows = sum(1 for _ in open(run_dir / "metrics.jsonl", encoding="utf-8"))
    return {"wall_s": wall, "logging_s": result.timings["logging_s"], "rows": rows,
            "updates_per_chunk": result.timings["updates_per_chunk"]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--total-timesteps", type=int, default=499_712)
    args = parser.parse_args(argv)

    from experiments.ppo_cartpole import DEFAULTS
    from rljax.agents.ppo import PPOConfig

    config = PPOConfig(**{**dict(DEFAULTS), "total_timesteps": args.total_timesteps})
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        k = _run(config, 0, root, "warm-update")["updates_per_chunk"]  # compiles both programs once
        _run(config, k, root, "warm-chunk")
        modes = {"per update": 0, "per chunk": k}
        results: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
        for r in range(args.rounds):
            order = list(modes) if r % 2 == 0 else list(reversed(modes))
            for mode in order:
                results[mode].append(_run(config, modes[mode], root, f"{mode.replace(' ', '-')}-{r}"))
    summary = {}
    for mode, runs in results.items():
        summary[mode] = {key: statistics.median(run[key] for run in runs) for key in ("wall_s", "logging_s", "rows")}
        print(f"{mode:>10}: wall {summary[mode]['wall_s']:.3f}s (median of {len(runs)}), logging "
              f"{summary[mode]['logging_s']:.3f}s, {summary[mode]['rows']:.0f} rows in metrics.jsonl")
    extra = summary["per update"]["wall_s"] / summary["per chunk"]["wall_s"] - 1
    paired = [a["wall_s"] / b["wall_s"] - 1 for a, b in zip(results["per update"], results["per chunk"])]
    print(f"a row per update costs {100 * extra:+.1f} % wall time (per round: "
          f"{', '.join(f'{100 * p:+.1f} %' for p in paired)}); logging "
          f"{100 * summary['per update']['logging_s'] / summary['per update']['wall_s']:.1f} % of the run")
    print(json.dumps({"summary": summary, "extra_wall_fraction": extra, "paired": paired}))


if __name__ == "__main__":
    main()
