"""benchmarks/gpu.py runs here too: ``--smoke`` prints the accelerator table at tiny sizes on the CPU (with
``--slow``: its env-stepping rows, and every row); by default the script's argument checks."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from tests.conftest import cpu_subprocess_env, suite_xla_flags

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _smoke(tmp_path, rows: tuple[str, ...], *only: str) -> dict:
    """Runs the smoke table for the sections ``only`` (every one when empty), asserts that each of
    ``rows`` is printed and did not fail, and returns the JSON results."""
    out = tmp_path / "gpu.json"
    env = cpu_subprocess_env(1)
    env["XLA_FLAGS"] = suite_xla_flags()
    sections = ["--only", ",".join(only)] if only else []
    proc = subprocess.run([sys.executable, "-m", "benchmarks.gpu", "--smoke", *sections, "--json", str(out)], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=850)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = proc.stdout
    assert "| work | rljax | PureJaxRL / gymnax | ratio | target |" in text, text[-3000:]
    for row in rows:
        line = next((l for l in text.splitlines() if l.startswith("| ") and row in l), None)
        assert line is not None and "failed" not in line, (row, text[-3000:])
    return json.loads(out.read_text())


@pytest.mark.slow  # by default test_gpu_benchmark_refuses_an_unknown_row imports and parses the script
@pytest.mark.timeout(300)
def test_gpu_benchmark_smoke_prints_the_env_stepping_rows(tmp_path):
    """The script end to end on one section (the PPO rows, compiling two trainers, run with --slow)."""
    results = _smoke(tmp_path, ("env stepping, CartPole-v1, 64 envs",), "envstep")
    assert set(results) >= {"envstep"} and "ppo1" not in results, sorted(results)
    assert results["envstep"]["CartPole-v1 64 gymnax"] > 0


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_gpu_benchmark_smoke_prints_every_row(tmp_path):
    results = _smoke(tmp_path, ("PPO CartPole, PureJaxRL config, 1 seed", "4 seeds vmapped", "64 envs x 16 steps",
                                "env stepping, CartPole-v1, 64 envs", "env stepping, Pendulum-v1, 256 envs",
                                "sweep CLI, 4 seeds", "deterministic mode"))
    assert results["ppo1"]["rljax"]["sps"] > 0 and results["ppo512"]["rljax"]["sps"] > 0
    assert results["envstep"]["CartPole-v1 64 gymnax"] > 0
    assert results["sweepcli"]["host_s"] > 0 and results["sweepcli"]["members"] == 4
    # On the CPU both modes are deterministic: a resumed run ends bit-identical either way.
    det = results["determinism"]
    assert det["on"]["bit_identical"] and det["off"]["bit_identical"], det
    assert det["on"]["xla_flags"] == ["--xla_gpu_deterministic_ops=true"] and det["off"]["xla_flags"] == []


def test_gpu_benchmark_refuses_an_unknown_row():
    proc = subprocess.run([sys.executable, "-m", "benchmarks.gpu", "--only", "ppo9"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env=cpu_subprocess_env(1))
    assert proc.returncode == 2 and "'ppo9' is not one of" in proc.stderr
