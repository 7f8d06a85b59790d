"""Data parallelism on 4 fake CPU devices, each check in its own subprocess with a hard timeout
(XLA's device count is fixed when JAX starts, and a collective deadlock must fail, not hang)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from tests.conftest import cpu_subprocess_env

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "support" / "multidevice_checks.py"
ROOT = SCRIPT.parents[1]


def run_check(name: str, devices: int = 4, timeout: int = 300) -> dict:
    proc = subprocess.run([sys.executable, str(SCRIPT), name], env=cpu_subprocess_env(devices), capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"check {name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return json.loads(lines[-1][len("RESULT "):])


@pytest.mark.parametrize("backend", ["shard_map", pytest.param("pmap", marks=pytest.mark.slow),
                                     pytest.param("recurrent", marks=pytest.mark.slow)])
def test_four_device_update_equals_single_device_update(backend):
    """Also for a recurrent actor-critic on whole sequences ("recurrent": shard_map). With --slow only:
    pmap (by default test_shard_map_and_pmap_backends_agree) and the recurrent one (by default the
    recurrent resume below)."""
    r = run_check(f"learn_{backend}")
    assert r["devices"] == 4
    assert r["param_change"] > 1e-4  # the update did something
    assert r["max_param_diff_vs_single"] < 1e-5, r
    assert r["max_param_diff_across_devices"] == 0.0, r
    assert abs(r["value_loss"][0] - r["value_loss"][1]) < 1e-4 * max(1.0, abs(r["value_loss"][0]))


@pytest.mark.slow  # by default test_dqn_four_devices compares the two backends
def test_shard_map_and_pmap_backends_agree():
    r = run_check("backends_agree")
    assert r["params_shape0"] == 4  # a leading device axis
    assert r["max_param_diff"] < 1e-5, r
    assert r["returns"][0] == r["returns"][1]
    assert all(d == 0.0 for d in r["desync"])
    # Programs over several CPU devices wait for each chunk before launching the next (XLA's CPU
    # collective rendezvous can deadlock otherwise).
    assert r["launched_ahead"] == [0, 0]


@pytest.mark.slow  # a learning run; by default the update equivalence tests below stand for it
def test_four_device_run_learns():
    r = run_check("learns", timeout=400)
    assert r["final_return"] > 150, r
    assert r["desync"] == 0.0


# Slow: by default test_train_raises_desync_error_on_two_devices below (the same detection through rljax.train)
# and tests/unit/training/hooks/test_health.py stand for it.
@pytest.mark.slow
def test_desync_is_detected():
    r = run_check("desync_detected")
    assert r["clean"] == 0.0 and r["dirty"] > 0.0
    assert "params differ across devices" in r["error"]


@pytest.mark.slow  # by default test_desync_is_detected (the same check, outside train())
@pytest.mark.timeout(400)
def test_train_raises_desync_error_on_two_devices():
    """The health check runs inside train(): an update that perturbs device 1's params once (at
    update 4, after measuring its own desync) makes train() raise DesyncError at the end of the
    chunk holding update 5, the first to see different params: chunk 5 // 2 = 2 (2 updates per
    chunk), whose first update is still in sync: a chunk must report the max desync of its
    updates, not the min."""
    r = run_check("desync_train", devices=2, timeout=360)
    assert r["devices"] == 2
    assert r["clean_rows"] == 4 and r["clean_desync"] == 0.0, r
    assert r["error"] is not None and "params differ across devices after chunk 2 " in r["error"], r


def test_dqn_four_devices():
    r = run_check("dqn_learn")
    assert r["max_grad_diff"] < 1e-5 * max(1.0, r["grad_scale"]), r
    assert r["backend_param_diff"] < 1e-5 and r["desync"] == 0.0, r
    assert r["td_loss"][0][-1] > 0.0


# With --slow (for the default suite's time): by default tests/unit/store/test_checkpoint.py resumes PPO, DQN, SAC
# and TD3 bit-exactly on one device, tests/integration/test_memory.py a recurrent PPO, and the four-device update
# above equals the one-device update.
@pytest.mark.slow
@pytest.mark.parametrize("name", ["ppo_gru", "ppo", "dqn", "sac"])
def test_resume_is_bit_exact_on_four_devices(name):
    r = run_check(f"resume_{name}")
    assert r["equal"], r
    assert r["start_chunk"] == 3 and r["leading_axis"] == 4
    if name == "ppo_gru":
        assert r["memory"] == [4, 2, 8]  # [devices, envs per device, memory_size]


@pytest.mark.slow  # by default tests/unit/training/test_population.py splits a sweep over 2 devices
def test_sweep_split_over_two_devices_equals_single_runs():
    r = run_check("sweep", devices=2)
    assert r["devices_used"] == 2 and r["members"] == 4
    assert r["max_diff"] < 1e-5, r
    assert r["pbt_devices_used"] == 2 and r["pbt_max_diff"] < 1e-5, r


@pytest.mark.slow  # by default tests/unit/policy/test_evaluate.py (one device) and the resume above
def test_evaluation_and_load_on_two_devices():
    r = run_check("eval_load", devices=2)
    assert r["shard_map"] == {"identical": True, "same_actions": True, "evaluated": True}, r
    assert r["sweep"] == {"identical": True, "evaluated": True}, r
