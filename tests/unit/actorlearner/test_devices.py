"""The actor-learner path over several devices (3 fake CPU devices, in a subprocess with a hard timeout):
the learner's update split over two devices equals it on one, actors act on their own devices, a
run on two learner devices resumes to the same bits as one never stopped, and a split that does not
divide the rollout is refused by name."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from tests.conftest import cpu_subprocess_env

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "support" / "host_device_checks.py"


@pytest.fixture(scope="module")
def checks(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("host-devices")
    proc = subprocess.run([sys.executable, str(SCRIPT), str(root)], env=cpu_subprocess_env(3), capture_output=True,
                          text=True, timeout=300, cwd=SCRIPT.parents[2])
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return json.loads(lines[-1][len("RESULT "):])


@pytest.mark.parametrize("algorithm", ["ppo", "impala"])
def test_the_update_split_over_two_learner_devices_equals_it_on_one(checks, algorithm):
    """PPO with one minibatch (the same sample set on one device and on two) and IMPALA's full-batch step."""
    r = checks["split"][algorithm]
    assert checks["devices"] == 3
    assert r["changed"] > 1e-4, r  # the updates did something
    assert r["param_diff"] < 1e-5 and r["loss_diff"] < 1e-5, r
    assert r["param_devices"] == [1, 2], r  # replicated over the learner's devices
    assert r["episodes"], r  # the same rollouts


def test_each_actor_acts_on_its_own_device(checks):
    r = checks["actors"]
    assert r["actors"] == [[0, 0], [1, 1]] and r["acted"] == [0, 1], r
    assert r["updates"] == 4 and r["finite"], r


def test_a_run_on_two_learner_devices_resumes_to_the_same_bits(checks):
    r = checks["resume"]
    assert r == {"updates": 4, "rows": 2, "equal": True}, r


def test_a_split_the_learner_devices_cannot_take_is_refused_by_name(checks):
    r = checks["refusals"]
    assert r["num_envs"].startswith("num_envs=4 is split over 3 learner devices: give a multiple of 3"), r
    assert "each of the 2 learner devices gets num_steps * num_envs / 2 = 12 samples, which num_minibatches=8" \
        in r["minibatches"], r
