"""TD3 on Pendulum-v1 at the experiment's defaults (``experiments/td3_pendulum.py``, 2e4 env steps),
one fresh process per seed, with SAC's figures (``benchmarks/sac_pendulum.py``) from the same run.

    python -m benchmarks.td3_pendulum                  # 5 seeds of TD3, then 5 of SAC
    python -m benchmarks.td3_pendulum --seeds 2 --set policy_delay=1 --no-sac

Per seed, measured by ``benchmarks/sac_pendulum.py``'s own per-seed runner (one process per seed): compile s, steps/s (env
steps / seconds of compiled compute), process s (wall time of the whole process to the end of
training), final return (training episodes of the last two chunks that finished episodes) and eval
return (the deterministic actor ``mu(s)`` over 10 fresh episodes).

The target: eval return >= -200 within 2e4 env steps (SAC's bar) on all or nearly all seeds.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

from benchmarks import sac_pendulum


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--set", nargs="*", default=[], help="TD3 config overrides, e.g. policy_delay=1")
    ap.add_argument("--no-sac", action="store_true", help="skip SAC's figures")
    ap.add_argument("--json", default=None, help="also write the results here")
    a = ap.parse_args(argv)
    import jax

    print(f"# {jax.device_count()} {jax.default_backend()} device(s), jax {jax.__version__}, {os.cpu_count()} cores",
          flush=True)
    results = {"td3": sac_pendulum.run_seeds(a.seeds, a.set, algo="td3")}
    if not a.no_sac:
        results["sac"] = sac_pendulum.run_seeds(a.seeds, [])
        print(f"TD3/SAC median steps/s: {results['td3']['sps'] / results['sac']['sps']:.2f}x; eval >= -200: "
              f"TD3 {results['td3']['solved']}/{a.seeds}, SAC {results['sac']['solved']}/{a.seeds}", flush=True)
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    sys.exit(main())
