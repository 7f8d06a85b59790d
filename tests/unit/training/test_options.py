"""RunOptions: every field validated when the options are made (a ``ValueError`` or ``TypeError``
naming the field, the value and what is valid), frozen and keyword-only, only the resumable fields
saved; and ``train`` refusing the run options as its own keywords."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

import rljax
from rljax.agents.ppo import PPOConfig
from rljax.training.options import SAVED_FIELDS, RunOptions


def test_run_options_name_the_bad_value_and_what_is_valid():
    cases = [(dict(checkpoint_every=-1), ValueError, r"checkpoint_every must be an integer >= 0 .* got -1"),
             (dict(checkpoint_interval_s=float("inf")), ValueError, r"checkpoint_interval_s must be a finite .* got inf"),
             (dict(keep_checkpoints=0), ValueError, r"keep_checkpoints must be an integer >= 1, got 0"),
             (dict(stall_min_s=0), ValueError, r"stall_min_s must be a finite number > 0, got 0"),
             (dict(log_every=-1), ValueError, r"log_every must be an integer >= 0 \(updates per metrics row; 0: "
                                              r"automatic\), got -1"),
             (dict(deterministic="yes"), ValueError, r"deterministic='yes' is not one of"),
             (dict(resume=True), ValueError, r"resume=True\) needs the run_dir"),
             (dict(quiet="yes"), TypeError, r"RunOptions.quiet must be True or False, got 'yes'"),
             (dict(run_dir=3), TypeError, r"RunOptions.run_dir must be a path .* got 3"),
             (dict(on_chunk=3), TypeError, r"RunOptions.on_chunk must be callable .* got 3"),
             (dict(population=[1, 2]), TypeError, r"RunOptions.population must be .* got list"),
             (dict(tracker_timeout_s=0), ValueError, r"tracker_timeout_s must be a finite number of seconds > 0, got 0"),
             (dict(tracker_timeout_s=float("nan")), ValueError, r"tracker_timeout_s must be .* got nan"),
             (dict(video_interval=-5, run_dir="runs/a"), ValueError,
              r"video_interval must be an integer >= 0 \(env steps between videos; 0: no videos\), got -5")]
    for kwargs, error, message in cases:
        with pytest.raises(error, match=message):
            RunOptions(**kwargs)


def test_run_options_are_frozen_keyword_only_and_save_only_what_a_resume_keeps():
    options = RunOptions(run_dir="runs/a", checkpoint_interval_s=5, stall_factor=0, quiet=True)
    assert options.checkpoint_interval_s == 5.0 and isinstance(options.checkpoint_interval_s, float)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.quiet = False  # type: ignore[misc]
    with pytest.raises(TypeError):
        RunOptions("runs/a")  # type: ignore[misc]
    assert options.saved() == {"checkpoint_every": 0, "checkpoint_interval_s": 5.0, "keep_checkpoints": 3,
                               "checkpoints": True, "tensorboard": True, "stall_factor": 0.0,
                               "stall_first_chunk_s": 600.0, "stall_min_s": 60.0, "straggler_margin": 0.2, "deterministic": "auto",
                               "log_every": 0,
                               "wandb": None, "mlflow": None, "tracker_timeout_s": 5.0, "video_interval": 0}
    assert tuple(options.saved()) == SAVED_FIELDS
    assert options.replace(quiet=False).quiet is False
    with pytest.raises(ValueError, match="keep_checkpoints"):
        options.replace(keep_checkpoints=-2)


def test_old_keyword_calls_are_a_type_error_naming_run_options():
    """The run options as keywords of ``train`` (its signature before RunOptions) are refused
    before anything is built, with the call to write instead."""
    config = PPOConfig()
    with pytest.raises(TypeError, match=r"no longer takes quiet, checkpoints .* RunOptions fields.*"
                                        r"options=RunOptions\(quiet=True, checkpoints=False\)"):
        rljax.train(config, quiet=True, checkpoints=False)  # runoptions-codemod: skip
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) 'bogus'"):
        rljax.train(config, bogus=1)  # runoptions-codemod: skip
    with pytest.raises(TypeError, match=r"must be a rljax.RunOptions, got dict"):
        rljax.train(config, options={"quiet": True})
    with pytest.raises(TypeError):
        rljax.train(config, None, None, RunOptions())  # options is keyword-only
    assert rljax.RunOptions is RunOptions


@pytest.mark.parametrize("name", ["resume", "checkpoints", "tensorboard", "quiet", "handle_signals"])
def test_every_flag_must_be_a_bool(name):
    with pytest.raises(TypeError, match=rf"RunOptions.{name} must be True or False, got 1"):
        RunOptions(**{name: 1})


@pytest.mark.parametrize("kw, match", [
    (dict(checkpoint_every=True), r"checkpoint_every must be an integer >= 0 .*got True"),
    (dict(checkpoint_every=2.0), r"checkpoint_every must be an integer >= 0 .*got 2.0"),
    (dict(checkpoint_interval_s=0), r"checkpoint_interval_s must be a finite number > 0, got 0"),
    (dict(checkpoint_interval_s=True), r"checkpoint_interval_s must be a finite number > 0, got True"),
    (dict(checkpoint_interval_s="60"), r"checkpoint_interval_s must be a finite number > 0, got '60'"),
    (dict(keep_checkpoints=True), r"keep_checkpoints must be an integer >= 1, got True"),
    (dict(keep_checkpoints=2.0), r"keep_checkpoints must be an integer >= 1, got 2.0"),
    (dict(stall_factor=-1), r"stall_factor must be a finite number >= 0 \(0: no stall watchdog\), got -1"),
    (dict(stall_factor=math.nan), r"stall_factor must be a finite number >= 0 .*got nan"),
    (dict(stall_first_chunk_s=0), r"stall_first_chunk_s must be a finite number > 0, got 0"),
    (dict(stall_first_chunk_s=math.inf), r"stall_first_chunk_s must be a finite number > 0, got inf"),
    (dict(stall_min_s=-5.0), r"stall_min_s must be a finite number > 0, got -5.0"),
    (dict(deterministic=True), r"deterministic=True is not one of"),
])
def test_each_number_field_names_its_bad_value(kw, match):
    with pytest.raises(ValueError, match=match):
        RunOptions(**kw)


def test_valid_values_are_kept_and_numbers_become_floats():
    options = RunOptions(run_dir=Path("runs/b"), resume=True, checkpoint_every=0, keep_checkpoints=1,
                         stall_factor=0, stall_first_chunk_s=1, stall_min_s=2, deterministic="on",
                         on_chunk=lambda c, state, row: False)
    assert options.run_dir == Path("runs/b") and options.resume is True
    assert (options.stall_factor, options.stall_first_chunk_s, options.stall_min_s) == (0.0, 1.0, 2.0)
    assert all(isinstance(getattr(options, n), float) for n in ("stall_factor", "stall_first_chunk_s", "stall_min_s"))
    assert RunOptions(deterministic="off").deterministic == "off"
    assert RunOptions(checkpoint_every=7).checkpoint_every == 7
