"""The fault soak (tests/verification/fault_soak.py) in small: a real PPO CartPole run, killed four ways as
a subprocess, resumed until it finishes, and compared bit for bit with an uninterrupted run."""

from __future__ import annotations

import os
import pathlib

import pytest

from tests.verification import fault_soak as soak
from tests.verification.fault_soak import Kill

# 10 chunks of 4 updates (2,048 env steps each), a checkpoint after every second chunk.
TINY = soak.RunConfig("ppo-tiny", "experiments.ppo_cartpole",
                      ("--total-timesteps", "20480", "--updates-per-chunk", "4"),
                      ("--checkpoint-every", "2", "--no-compile-cache"))

CASES = [
    # Before config.json exists (imports): the original command runs again (with --slow only: by default
    # tests/unit/cli/test_supervise.py restarts a run killed before its first checkpoint).
    pytest.param(0, Kill("SIGKILL", after_line=0, delay=0.5), id="sigkill-startup", marks=pytest.mark.slow),
    # After the 5th chunk: the chunk-3 checkpoint is committed, the chunk-5 one may be under way.
    pytest.param(1, Kill("SIGKILL", after_line=5, delay=0.0), id="sigkill-mid-run"),
    # With --slow only: by default the double-SIGTERM case below (its first SIGTERM is this one) and test_stop.py.
    pytest.param(2, Kill("SIGTERM", after_line=3, delay=0.0), id="sigterm", marks=pytest.mark.slow),
    # The first SIGTERM after chunk 0 asks for a stop; the second comes while that stop's checkpoint
    # (the run's first) is being written, or just after it commits: the stop must still commit it
    # and exit 75, not 143 with only a *.orbax-checkpoint-tmp directory.
    # With --slow only: by default the SIGKILL case above and tests/unit/cli/test_stop.py (a stop's checkpoint
    # committed, exit 75, bit-exact resume) stand for it.
    pytest.param(3, Kill("2xSIGTERM", after_line=1, delay=0.0, gap=None), id="double-sigterm-during-write",
                 marks=pytest.mark.slow),
]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("soak")
    cache = os.environ.get("JAX_COMPILATION_CACHE_DIR")  # the session's cache (tests/conftest.py)
    env = soak.child_env(pathlib.Path(cache) if cache else None)
    ref = soak.reference_run(TINY, workdir, env, timeout=200)
    assert ref.num_chunks == 10 and ref.final_step == 20480
    return workdir, env, ref


@pytest.mark.requires_bitexact_backend
@pytest.mark.timeout(240)
@pytest.mark.parametrize("index,kill", CASES)
def test_killed_run_resumes_bit_identical(reference, index, kill):
    workdir, env, ref = reference
    trial = soak.run_trial(index, ref, [kill], workdir, env, timeout=150, max_resumes=3)
    (_, out), = trial.kills
    assert trial.result == "identical", trial.line()
    assert trial.resumes >= 1, f"the kill landed after the run ended: {trial.line()}"
    if kill.kind == "SIGKILL":
        assert out.rc == -9, trial.line()
    if kill.after_line == 0:
        assert out.phase == "startup", trial.line()
    else:
        assert out.caught, f"the signal came before the preemption guard was installed: {trial.line()}"
    if kill.kind == "SIGTERM":
        assert out.rc == soak.PREEMPTED, trial.line()
    if kill.kind != "SIGKILL":  # a signal the process caught never aborts a checkpoint write
        assert not out.left_write, trial.line()
