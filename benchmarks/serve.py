"""``rljax serve`` under load: requests/s and latency of 64 concurrent clients, batched and unbatched, against
one client asking one request at a time; then the same load while the served run's checkpoints are swapped in
every second.

    python -m benchmarks.serve                          # trains the policies it serves (a minute), 3 rounds
    python -m benchmarks.serve --seconds 5 --rounds 1 --no-reload

Each server is ``rljax serve RUN --port 0`` in its own process; the load is one process driving ``C``
connections with ``selectors`` (a closed loop: each connection sends its next request when its reply has
come: ``C`` concurrent clients whose own work costs the server nothing), each request one observation.
Configurations, interleaved round by round so that a slow moment of the machine hits all of them:

* ``one client``: 1 connection, the batching server (``--max-batch 64``): one request at a time;
* ``unbatched``: 64 connections, ``--max-batch 1 --min-rows 1`` (every request its own call, of one row);
* ``batched``: 64 connections, ``--max-batch 64 --max-wait-ms 2``.

Printed per policy and configuration: requests/s, p50/p99 latency (a request's send to its reply's
arrival, in the load process) and the server's mean batch size (from its ``serve.json``), and the ratio of
batched to unbatched requests/s. Policies: PPO's 64-64 MLP on CartPole and its MinAtar network (a conv
torso) on Breakout. ``--reload``: the batched configuration on the CartPole policy while a thread copies
a new checkpoint into the served run every second (``--follow``); every reply must succeed and name one
of the checkpoints.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import re
import selectors
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip() + f" ({os.cpu_count()} cores)"
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def train(run_dir: pathlib.Path, env: str, steps: int) -> None:
    if (run_dir / "checkpoints").is_dir():
        return
    subprocess.run([sys.executable, "-m", "rljax.cli.main", "train", "ppo", "--env", env, "--total-timesteps",
                    str(steps), "--run-dir", str(run_dir), "--quiet"], check=True,
                   stdout=subprocess.DEVNULL)


def start_server(run_dir: pathlib.Path, stats: pathlib.Path, *args: str) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-m", "rljax.cli.main", "serve", str(run_dir), "--port", "0",
                             "--stats-dir", str(stats), "--stats-every", "1", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    match = re.search(r"on 127\.0\.0\.1:(\d+)", line)
    if not match:
        proc.kill()
        raise RuntimeError(f"the server did not start: {line!r}")
    return proc, int(match.group(1))


def load(port: int, clients: int, seconds: float, obs: np.ndarray) -> dict:
    """``clients`` closed-loop connections for ``seconds``: requests/s, latency percentiles, versions, errors."""
    from rljax.host.protocol import HEADER, decode_header_count, encode
    from rljax.serve.protocol import FRAMING, Kind, text_array

    sel, conns = selectors.DefaultSelector(), []
    request = encode(Kind.ACT, [np.array([0, -1, 0, 0], np.int64), np.zeros(1, bool), obs[None]], FRAMING)
    for _ in range(clients):
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(encode(Kind.HELLO, [text_array("")], FRAMING))
        header = s.recv(HEADER.size, socket.MSG_WAITALL)
        _, length, _ = decode_header_count(header, 1 << 24, (Kind.SPEC,), FRAMING)
        s.recv(length, socket.MSG_WAITALL)
        s.setblocking(False)
        conn = {"sock": s, "buf": bytearray(), "sent": 0.0}
        sel.register(s, selectors.EVENT_READ, conn)
        conns.append(conn)
    latencies, versions, errors = [], set(), 0
    scratch = bytearray(1 << 16)
    view = memoryview(scratch)
    start = time.perf_counter()
    end = start + seconds
    for conn in conns:
        conn["sent"] = time.perf_counter()
        conn["sock"].sendall(request)
    while True:
        now = time.perf_counter()
        if now >= end:
            break
        for key, _ in sel.select(max(0.0, end - now)):
            conn = key.data
            n = conn["sock"].recv_into(scratch)
            conn["buf"] += view[:n]
            while len(conn["buf"]) >= HEADER.size:  # the header, and the version at its fixed place: cheap
                kind, length = conn["buf"][5], int.from_bytes(conn["buf"][8:12], "little")
                if len(conn["buf"]) < HEADER.size + length:
                    break
                t = time.perf_counter()
                latencies.append(t - conn["sent"])
                if kind == Kind.ACTION:  # meta: array header (4 bytes), one dim (4), request id (8), version (8)
                    versions.add(int.from_bytes(conn["buf"][HEADER.size + 16:HEADER.size + 24], "little"))
                else:
                    errors += 1
                del conn["buf"][:HEADER.size + length]
                conn["sent"] = t
                conn["sock"].sendall(request)
    elapsed = time.perf_counter() - start
    for conn in conns:
        conn["sock"].close()
    lat = np.asarray(latencies)
    return {"requests_per_s": len(lat) / elapsed, "p50_ms": float(np.percentile(lat, 50)) * 1e3,
            "p99_ms": float(np.percentile(lat, 99)) * 1e3, "requests": len(lat), "versions": sorted(versions),
            "errors": errors}


def measure(run_dir: pathlib.Path, clients: int, seconds: float, obs: np.ndarray, *args: str) -> dict:
    with tempfile.TemporaryDirectory() as stats:
        proc, port = start_server(run_dir, pathlib.Path(stats), *args)
        try:
            load(port, clients, 1.0, obs)  # warm: connections, caches
            result = load(port, clients, seconds, obs)
            time.sleep(1.2)
            log = [json.loads(line) for line in (pathlib.Path(stats) / "serve.jsonl").read_text().splitlines()]
            batches = sum(r.get("batches", 0) for r in log)
            mean = sum(float(r.get("mean_batch_rows") or 0) * r.get("batches", 0) for r in log) / max(batches, 1)
            result["mean_batch_rows"] = round(mean, 1)
        finally:
            proc.terminate()
            proc.wait(30)
    return result


CONFIGS = {"one client": (1, ("--max-batch", "64")), "unbatched": (64, ("--max-batch", "1", "--min-rows", "1")),
           "batched": (64, ("--max-batch", "64", "--max-wait-ms", "2"))}


def copy_checkpoints(run_dir: pathlib.Path, source: pathlib.Path, stop: threading.Event, made: list) -> None:
    """Every second, the source run's newest checkpoint copied into ``run_dir`` under a new, larger step
    (a run that saves every second, as far as a follower can tell)."""
    newest = max(int(p.name) for p in (source / "checkpoints").iterdir() if p.name.isdigit())
    step = newest
    while not stop.wait(1.0):
        step += 1000
        tmp = run_dir / "checkpoints" / f".tmp-{step}"
        shutil.copytree(source / "checkpoints" / str(newest), tmp)
        os.replace(tmp, run_dir / "checkpoints" / str(step))
        made.append(step)


def reload_under_load(run_dir: pathlib.Path, seconds: float, obs: np.ndarray) -> dict:
    with tempfile.TemporaryDirectory() as work:
        served = pathlib.Path(work) / "run"
        shutil.copytree(run_dir, served)
        proc, port = start_server(served, pathlib.Path(work) / "stats", "--max-batch", "64", "--follow",
                                  "--follow-every", "0.2")
        stop, made = threading.Event(), []
        thread = threading.Thread(target=copy_checkpoints, args=(served, run_dir, stop, made))
        try:
            thread.start()
            result = load(port, 64, seconds, obs)
        finally:
            stop.set()
            thread.join()
            proc.terminate()
            proc.wait(30)
        steps = set(made) | {int(p.name) for p in (run_dir / "checkpoints").iterdir() if p.name.isdigit()}
        result["checkpoints_made"] = len(made)
        result["versions_not_checkpoints"] = sorted(set(result["versions"]) - steps)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", default="/tmp/rljax-bench-serve", help="where the served policies are trained")
    parser.add_argument("--no-reload", action="store_true")
    parser.add_argument("--policies", default="cartpole,minatar")
    args = parser.parse_args()
    runs = pathlib.Path(args.runs)
    policies = {"cartpole": ("CartPole-v1", 50_000, np.zeros(4, np.float32)),
                "minatar": ("Breakout-MinAtar", 20_000, np.zeros((10, 10, 4), np.bool_))}
    print(f"rljax serve under load, {cpu_model()}; {args.seconds:g} s per measurement, {args.rounds} rounds "
          f"interleaved; 1 observation per request", flush=True)
    for name in args.policies.split(","):
        env, steps, obs = policies[name]
        train(runs / name, env, steps)
        results: dict[str, list[dict]] = {c: [] for c in CONFIGS}
        for _ in range(args.rounds):
            for config, (clients, flags) in CONFIGS.items():
                results[config].append(measure(runs / name, clients, args.seconds, obs, *flags))
        print(f"\n{name} (PPO on {env}):")
        print(f"  {'configuration':<12} {'clients':>7} {'requests/s':>11} {'p50 ms':>8} {'p99 ms':>8} "
              f"{'mean batch':>10}")
        med = {}
        for config, (clients, _) in CONFIGS.items():
            rs = results[config]
            med[config] = statistics.median(r["requests_per_s"] for r in rs)
            p50, p99 = (statistics.median(r[k] for r in rs) for k in ("p50_ms", "p99_ms"))
            print(f"  {config:<12} {clients:>7} {med[config]:>11,.0f} {p50:>8.2f} {p99:>8.2f} "
                  f"{statistics.median(r['mean_batch_rows'] for r in rs):>10.1f}")
            assert all(r["errors"] == 0 for r in rs), rs
        ratios = [b["requests_per_s"] / u["requests_per_s"] for b, u in zip(results["batched"], results["unbatched"])]
        print(f"  batched / unbatched requests/s: {statistics.median(ratios):.2f}x (rounds: "
              f"{', '.join(f'{r:.2f}' for r in ratios)}); batched / one client: "
              f"{med['batched'] / med['one client']:.2f}x", flush=True)
    if not args.no_reload:
        r = reload_under_load(runs / "cartpole", args.seconds * 2, policies["cartpole"][2])
        print(f"\nhot reload every second under 64 clients ({args.seconds * 2:g} s): {r['requests']:,} requests, "
              f"{r['errors']} failed, {r['checkpoints_made']} checkpoints made, {len(r['versions'])} versions in the "
              f"replies, {len(r['versions_not_checkpoints'])} not a checkpoint; {r['requests_per_s']:,.0f} requests/s, "
              f"p99 {r['p99_ms']:.2f} ms", flush=True)


if __name__ == "__main__":
    main()
