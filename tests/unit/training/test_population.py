"""A sweep splits its population over the devices by default (on a CPU: one fake device per core),
and a split population resumes on the split it started with."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from rljax.training.population import auto_devices
from tests.conftest import cpu_subprocess_env, suite_xla_flags

ROOT = pathlib.Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("size, available, expected", [(8, 2, 2), (7, 2, 1), (12, 8, 6), (3, 16, 3), (1, 4, 1),
                                                       (512, 16, 16), (6, 4, 3)])
def test_auto_devices_is_the_most_devices_that_divide_the_population(size, available, expected):
    assert auto_devices(size, available) == expected


def test_auto_devices_refuses_an_empty_population():
    with pytest.raises(ValueError, match="size=0"):
        auto_devices(0, 2)


# Slow: by default the auto_devices tests above (the split it chooses) and tests/unit/training/test_sweep.py's
# test_outputs_and_resume (a sweep resumed from its directory) stand for it.
@pytest.mark.slow
def test_the_sweep_cli_splits_over_the_cores_by_default_and_resume_keeps_the_split(tmp_path):
    """No --devices: the CLI makes one fake CPU device per core (as many as divide the members),
    records the split in sweep.json, and a resume runs on the saved split."""
    env = cpu_subprocess_env(1)
    env["XLA_FLAGS"] = suite_xla_flags()  # let the sweep choose its own device count
    run = tmp_path / "s"
    cmd = [sys.executable, "-m", "experiments.ppo_cartpole", "sweep", "--seeds", "4", "--total-timesteps", "1024",
           "--num-envs", "4", "--num-steps", "32", "--updates-per-chunk", "2", "--hidden-sizes", "8",
           "--no-compile-cache", "--quiet", "--no-plots", "--no-tensorboard"]
    first = subprocess.run(cmd + ["--run-dir", str(run)], env=env, cwd=ROOT, capture_output=True, text=True,
                           timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    expected = auto_devices(4, os.cpu_count() or 1)
    assert json.loads((run / "sweep.json").read_text())["devices"] == expected
    resumed = subprocess.run([sys.executable, "-m", "rljax.cli.main", "resume", str(run), "--total-timesteps", "2048",
                              "--quiet", "--no-compile-cache"], env=env, cwd=ROOT, capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads((run / "sweep.json").read_text())["devices"] == expected
    rows = [json.loads(line) for line in next((run / "members").iterdir()).joinpath("metrics.jsonl").open()]
    assert rows[-1]["env_steps"] == 2048


@pytest.mark.timeout(300)
def test_a_sweep_split_over_two_devices_runs_a_state_with_empty_leaves_past_its_first_chunk(tmp_path):
    """DQN's 1-step collector keeps an empty ``[P, 0, ...]`` tail: split over two devices, the chunk
    must hand it back split as it took it, or the second chunk refuses the state (the CLI's default
    split on a 2-core CPU)."""
    env = cpu_subprocess_env(2)
    cmd = [sys.executable, "-m", "rljax.cli.main", "sweep", "dqn", "--env", "CartPole-v1", "--seeds", "2",
           "--devices", "2", "--num-envs", "2", "--hidden-sizes", "8", "--learning-starts", "8",
           "--total-timesteps", "64", "--updates-per-chunk", "8", "--run-dir", str(tmp_path / "s"),
           "--no-compile-cache", "--quiet", "--no-plots", "--no-tensorboard"]
    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((tmp_path / "s" / "sweep.json").read_text())["devices"] == 2
    for member in (tmp_path / "s" / "members").iterdir():
        rows = [json.loads(line) for line in member.joinpath("metrics.jsonl").open()]
        assert rows[-1]["env_steps"] == 64  # four chunks of 8 updates
