"""Deterministic mode (the ``deterministic`` run option): validation, the XLA-flag plumbing at
process start, the manifest record, and resume keeping the mode. The GPU side of it (flags taking
effect, bit-identical resume) is measured by ``benchmarks/gpu.py``; here the CPU-visible behaviour."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import jax
import pytest

import rljax
from rljax.runtime import determinism
from rljax.agents.ppo import PPOConfig
from rljax.training.options import RunOptions
from rljax.training.sweep import SweepSpec, run_sweep
from tests.conftest import bitexact_backend, cpu_subprocess_env, suite_xla_flags

ROOT = pathlib.Path(__file__).resolve().parents[3]
TINY = PPOConfig(total_timesteps=8 * 16 * 2, updates_per_chunk=1, num_envs=8, num_steps=16, num_epochs=1,
                 num_minibatches=2, hidden_sizes=(8,))
TINY_FLAGS = ["--total-timesteps", "256", "--updates-per-chunk", "1", "--num-envs", "8", "--num-steps", "16",
              "--num-epochs", "1", "--num-minibatches", "2", "--hidden-sizes", "8", "--no-compile-cache",
              "--no-tensorboard", "--quiet"]


def test_bad_modes_are_rejected_naming_the_valid_ones():
    with pytest.raises(ValueError, match=r"deterministic='yes' is not one of \('auto', 'on', 'off'\)"):
        RunOptions(deterministic="yes")
    with pytest.raises(ValueError, match="is not one of"):
        rljax.train(TINY, options=rljax.RunOptions(quiet=True, deterministic=True))
    assert RunOptions().deterministic == "auto"


@pytest.mark.parametrize("flags, expected", [
    ("", False),
    ("--xla_gpu_deterministic_ops=true", True),
    ("--xla_gpu_deterministic_ops", True),
    ("--xla_gpu_deterministic_ops=true --xla_gpu_deterministic_ops=false", False),  # the last one wins
    ("--xla_gpu_exclude_nondeterministic_ops=true", False),  # autotuning still differs per process
    ("--xla_gpu_exclude_nondeterministic_ops=true --xla_gpu_autotune_level=0", True),
    ("--xla_force_host_platform_device_count=2 --xla_gpu_deterministic_ops=1", True),
])
def test_deterministic_flags_are_recognised_in_either_spelling(flags, expected):
    assert determinism.deterministic_flags_set(flags) is expected


def _probe(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=cpu_subprocess_env(1, **env), cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_on_sets_the_flags_before_jax_starts_and_keeps_the_users():
    """In a fresh process, ``on`` puts the flags in XLA_FLAGS before the backend starts (which
    then accepts them), keeping flags already there; ``auto`` and ``off`` add nothing."""
    code = ("import os, sys, json\nfrom rljax.runtime.determinism import request_deterministic\n"
            "added = request_deterministic(sys.argv[-1] if len(sys.argv) > 1 else 'on')\n"
            "import jax, jax.numpy as jnp\nfloat(jnp.ones(2).sum())\n"
            "print(json.dumps({'added': added, 'flags': os.environ.get('XLA_FLAGS', ''), "
            "'backend': jax.default_backend()}))")
    proc = _probe(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["added"] is True and out["backend"] == "cpu"
    assert out["flags"].split() == [*suite_xla_flags(1).split(), *determinism.DETERMINISTIC_XLA_FLAGS]
    for mode in ("auto", "off"):
        proc = subprocess.run([sys.executable, "-c", code, mode], env=cpu_subprocess_env(1), cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        out = json.loads(proc.stdout.splitlines()[-1])
        assert out["added"] is False and out["flags"] == suite_xla_flags(1)


def test_on_after_a_gpu_started_without_the_flags_is_an_error_not_silence(monkeypatch):
    """JAX has started in this test process; on a GPU without the flags, ``on`` cannot take effect
    and says so (the GPU is simulated: this runs on any backend)."""
    jax.devices()  # JAX's backend has started
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    with pytest.raises(ValueError, match="already initialised its gpu backend.*--deterministic on"):
        determinism.request_deterministic("on")
    with pytest.raises(ValueError, match="runs without --xla_gpu_deterministic_ops=true"):
        determinism.determinism_record("on")
    assert determinism.determinism_record("auto")["deterministic"] is False  # a GPU at full speed
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_deterministic_ops=true")
    assert determinism.request_deterministic("on") is False  # already set: nothing to add, no error
    record = determinism.determinism_record("on")
    assert record == {"mode": "on", "deterministic": True, "backend": "gpu",
                      "xla_flags": ["--xla_gpu_deterministic_ops=true"]}


def test_the_manifest_records_the_mode_and_whether_the_run_is_deterministic(tmp_path, tiny_run):
    run_dir, _ = tiny_run("ppo-cartpole")  # the shared tiny run, trained with the default mode
    record = json.loads((run_dir / "manifest.json").read_text())
    assert record["determinism"]["mode"] == "auto"
    assert record["determinism"]["backend"] == jax.default_backend()
    assert record["determinism"]["deterministic"] is bitexact_backend()
    assert record["run_options"]["deterministic"] == "auto"
    run_sweep(TINY, SweepSpec(seeds=(0, 1)), run_dir=tmp_path / "sweep", quiet=True, plots=False,
              deterministic="off", tensorboard=False)
    for path in [tmp_path / "sweep" / "manifest.json", *(tmp_path / "sweep" / "members").glob("*/manifest.json")]:
        assert json.loads(path.read_text())["determinism"]["mode"] == "off", path


@pytest.mark.slow  # by default the flags set before JAX starts and the manifest's record, tested above in one process
def test_the_cli_flag_is_applied_at_start_recorded_and_kept_by_a_resume(tmp_path):
    """``--deterministic on`` from the command line: the run's manifest says so (with the flags it
    set), and ``rljax resume`` keeps the saved mode without being told again."""
    run = tmp_path / "run"
    env = cpu_subprocess_env(1)
    env["XLA_FLAGS"] = suite_xla_flags()
    first = subprocess.run([sys.executable, "-m", "experiments.ppo_cartpole", *TINY_FLAGS, "--deterministic", "on",
                            "--run-dir", str(run)], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    record = json.loads((run / "manifest.json").read_text())
    assert record["determinism"] == {"mode": "on", "deterministic": True, "backend": "cpu",
                                     "xla_flags": list(determinism.DETERMINISTIC_XLA_FLAGS)}
    assert record["run_options"]["deterministic"] == "on"
    resumed = subprocess.run([sys.executable, "-m", "rljax.cli.main", "resume", str(run), "--total-timesteps", "512",
                              "--quiet", "--no-compile-cache"], env=env, cwd=ROOT, capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    record = json.loads((run / "manifest.json").read_text())
    assert record["resumes"][-1]["determinism"]["mode"] == "on"
    assert record["resumes"][-1]["determinism"]["xla_flags"] == list(determinism.DETERMINISTIC_XLA_FLAGS)
    bad = subprocess.run([sys.executable, "-m", "experiments.ppo_cartpole", *TINY_FLAGS, "--deterministic", "yes",
                          "--run-dir", str(tmp_path / "bad")], env=env, cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and "invalid choice: 'yes'" in bad.stderr


def test_the_suite_knows_which_backends_are_bit_exact_across_processes(monkeypatch):
    """tests/conftest.py's ``requires_bitexact_backend`` skips on a GPU without the flags."""
    from tests import conftest

    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    assert not conftest.bitexact_backend() and conftest.float_rtol() == 1e-4
    monkeypatch.setenv("XLA_FLAGS", " ".join(conftest.GPU_DETERMINISTIC_FLAGS))
    assert conftest.bitexact_backend()
    assert conftest.GPU_DETERMINISTIC_FLAGS == determinism.DETERMINISTIC_XLA_FLAGS
    monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
    monkeypatch.delenv("XLA_FLAGS")
    assert conftest.bitexact_backend() and conftest.float_rtol() == 1e-5
    env = conftest.cpu_subprocess_env(4)
    assert env["JAX_PLATFORMS"] == "cpu" and env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["XLA_FLAGS"].split() == ["--xla_force_host_platform_device_count=4", *conftest.SUITE_XLA_FLAGS]
