"""Elastic resume through the CLI: a run saved on one device count continued on another
(``rljax resume RUN --num-devices N``), each command a fresh process with a hard timeout.

The short versions check that the run continues where it stopped (env steps, rows, the manifest's
record of the change, replay with priorities and an n-step tail); the long one (``--slow``) that PPO
still learns CartPole to 475 across 1 -> 2 -> 1 devices. The multi-process case (2 processes x 2
devices resumed as 1 x 2) is in tests/integration/test_multihost.py; the re-dealing rules in
tests/unit/training/test_elastic.py.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from rljax.store.tracking import read_chunks
from tests.conftest import cpu_subprocess_env, suite_xla_flags

ROOT = pathlib.Path(__file__).resolve().parents[2]
TIMEOUT_S = 300


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = cpu_subprocess_env(1)
    env["XLA_FLAGS"] = suite_xla_flags()  # --num-devices sets up the fake devices itself
    done = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    assert done.returncode == 0, f"{args}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


def _resume(run_dir: pathlib.Path, devices: int, total: int) -> subprocess.CompletedProcess:
    return _cli("-m", "rljax.cli.main", "resume", str(run_dir), "--num-devices", str(devices), "--total-timesteps",
                str(total))


def _check_continued(run_dir: pathlib.Path, layouts: list[tuple[int, int]], total: int) -> list[dict]:
    rows = read_chunks(run_dir)
    steps = [r["env_steps"] for r in rows]
    # The plan rounds the total up to whole chunks.
    assert steps == sorted(set(steps)) and 0 <= steps[-1] - total < steps[-1] - steps[-2], steps
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert [(r["layout"]["from_num_devices"], r["layout"]["num_devices"]) for r in manifest["resumes"]] == layouts
    assert json.loads((run_dir / "config.json").read_text())["num_devices"] == layouts[-1][1]
    from rljax.cli.inspect import summary_text

    assert f"({layouts[-1][0]} -> {layouts[-1][1]} devices)" in summary_text(run_dir)
    return rows


# Slow, for the default suite's time (27 s): by default tests/unit/training/test_elastic.py (the keys' and the
# buffers' re-split between device counts, by hand) stands for it.
@pytest.mark.slow
def test_ppo_continues_from_two_devices_on_one_and_back(tmp_path):
    run = tmp_path / "ppo"
    _cli("-m", "experiments.ppo_cartpole", "--num-devices", "2", "--total-timesteps", "2048", "--updates-per-chunk", "2",
         "--no-tensorboard", "--quiet", "--run-dir", str(run))
    done = _resume(run, 1, 4096)
    assert "note: the run was saved on 2 devices and continues on 1" in done.stdout, done.stdout[-2000:]
    _resume(run, 2, 6144)
    rows = _check_continued(run, [(2, 1), (1, 2)], 6144)
    assert all(r["nonfinite_state"] == 0 for r in rows)


@pytest.mark.slow  # by default tests/unit/training/test_elastic.py
def test_dqn_replay_with_priorities_and_an_n_step_tail_moves_from_one_device_to_two(tmp_path):
    run = tmp_path / "dqn"
    _cli("-m", "rljax.cli.main", "train", "dqn", "--env", "CartPole-v1", "--num-envs", "4", "--total-timesteps", "1600",
         "--buffer-size", "1000", "--learning-starts", "400", "--prioritized", "--n-step", "3", "--no-tensorboard",
         "--quiet", "--run-dir", str(run))
    _resume(run, 2, 3200)
    rows = _check_continued(run, [(1, 2)], 3200)
    assert rows[-1]["td_loss"] > 0 and rows[-1]["q_mean"] != 0 and all(r["nonfinite_state"] == 0 for r in rows)


@pytest.mark.slow  # a learning run: the short versions above check the continuation
@pytest.mark.timeout(1200)
def test_ppo_still_learns_cartpole_across_one_two_and_one_device(tmp_path):
    run = tmp_path / "learn"
    _cli("-m", "experiments.ppo_cartpole", "--total-timesteps", "150000", "--no-tensorboard", "--quiet",
         "--run-dir", str(run))
    _resume(run, 2, 300000)
    _resume(run, 1, 500000)
    rows = _check_continued(run, [(1, 2), (2, 1)], 500000)
    returns = [r["episode_return_mean"] for r in rows if r["episode_return_mean"] is not None]
    assert sum(returns[-2:]) / 2 >= 475, returns[-10:]
