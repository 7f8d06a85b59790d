"""The served model: its buckets, what it says of the policy, and the directories it refuses."""

from __future__ import annotations

import numpy as np
import pytest

from rljax.serve.model import MIN_BUCKET, buckets, is_export_dir, load_model


def test_buckets_are_powers_of_two_from_the_smallest_up_to_max_batch():
    assert MIN_BUCKET == 64
    assert buckets(1) == buckets(64) == [64]
    assert buckets(256) == [64, 128, 256]
    assert buckets(100) == [64, 100]
    assert buckets(8, min_rows=1) == [1, 2, 4, 8] and buckets(6, min_rows=1) == [1, 2, 4, 6]


def test_a_run_directory_gives_the_policys_inputs_action_and_version(tiny_run):
    run_dir = tiny_run("ppo-cartpole")[0]
    model = load_model(run_dir)
    assert model.inputs == [("obs", (4,), np.dtype(np.float32))] and model.action == ((), np.dtype(np.int32))
    assert not model.recurrent and model.sampling is None and model.version == max(model.steps())
    description = model.description(32, model.version)
    assert description["algorithm"] == "ppo" and description["env"] == "CartPole-v1"
    assert description["action_space"] == {"kind": "discrete", "n": 2, "shape": [], "dtype": "int32"}
    model.warm(32)
    action, state = model.compute(model.params, [np.zeros((3, 4), np.float32)], [], np.zeros(3, bool))
    assert action.shape == (3,) and state == []
    assert not is_export_dir(run_dir)


def test_bad_directories_and_steps_are_named(tiny_run, tmp_path):
    run_dir = tiny_run("ppo-cartpole")[0]
    with pytest.raises(FileNotFoundError, match="not a directory"):
        load_model(tmp_path / "nope")
    with pytest.raises(ValueError, match="has no checkpoint step 3"):
        load_model(run_dir, step=3)
    with pytest.raises(ValueError, match="single run, not a sweep"):
        load_model(run_dir, member="a")
