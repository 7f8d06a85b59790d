"""Reading a run directory back (:mod:`rljax.store.rundir`) from hand-written directories (no
training): committed checkpoint steps, the newest readable checkpoint meta, what a resume
continues with (and the edited or missing files it refuses, naming them), the resume config check
with :data:`RESUMABLE_FIELDS`, and the saved env."""

from __future__ import annotations

import dataclasses
import json

import pytest

from rljax.store.rundir import (RESUMABLE_FIELDS, ConfigMismatchError, RunDirError, check_resume_config,
                                checkpoint_steps, holds_results, newest_checkpoint_meta, read_json,
                                removed_if_start_fails, resume_from_scratch, run_record, saved_env)
from tests.support.runs import checkpoint_meta


@dataclasses.dataclass(frozen=True)
class Cfg:
    env: str = "CartPole-v1"
    lr: float = 0.1
    total_timesteps: int = 100
    eval_interval: int = 0
    added_later: int = 5


SAVED = {"env": "CartPole-v1", "lr": 0.1, "total_timesteps": 100, "eval_interval": 0, "added_later": 5}


def test_checkpoint_steps_are_committed_numeric_directories(tmp_path):
    assert checkpoint_steps(tmp_path) == []
    for name in ("30", "4", "100.orbax-checkpoint-tmp-1", "notes"):
        (tmp_path / "checkpoints" / name).mkdir(parents=True)
    (tmp_path / "checkpoints" / "7").write_text("a file, not a checkpoint")
    assert checkpoint_steps(tmp_path) == [4, 30]


def test_newest_checkpoint_meta_skips_unreadable_ones(tmp_path):
    checkpoint_meta(tmp_path, 10, SAVED, algorithm="PPOConfig")
    checkpoint_meta(tmp_path, 20, SAVED, meta_text="{cut")
    checkpoint_meta(tmp_path, 30, None, meta_text=json.dumps({"config": "not a dict"}))
    step, meta = newest_checkpoint_meta(tmp_path)
    assert step == 10 and meta["algorithm"] == "PPOConfig"
    assert newest_checkpoint_meta(tmp_path / "nothing") is None


def test_run_record_prefers_the_checkpoint_and_refuses_an_edited_config_json(tmp_path):
    checkpoint_meta(tmp_path, 10, SAVED, algorithm="PPOConfig", run_options={"checkpoint_every": 2})
    record = run_record(tmp_path)
    assert record == (SAVED, "PPOConfig", {"checkpoint_every": 2}, "checkpoint 10", False)
    # total_timesteps may differ (an extension); a field the checkpoint lacks is not compared.
    (tmp_path / "config.json").write_text(json.dumps({**SAVED, "total_timesteps": 500, "brand_new": 1}))
    assert run_record(tmp_path).config["total_timesteps"] == 500
    (tmp_path / "config.json").write_text(json.dumps({**SAVED, "lr": 0.5}))
    with pytest.raises(RunDirError, match=r"config.json differs from the config of checkpoint 10.*"
                                          r"lr: checkpoint 0.1, config.json 0.5"):
        run_record(tmp_path)
    (tmp_path / "config.json").write_text("{damaged")  # the checkpoint's config is used
    assert run_record(tmp_path).source == "checkpoint 10"


def test_a_resume_that_changed_the_layout_and_stopped_before_saving_leaves_a_resumable_directory(tmp_path):
    """A resume onto another device count (an elastic resume: a supervisor shrinking or growing a job) that was
    stopped before its first checkpoint has rewritten config.json with its own num_devices: the next resume
    reads that as the run's intention, as it does an extension, instead of refusing it as an edit."""
    checkpoint_meta(tmp_path, 10, {**SAVED, "num_devices": 2}, algorithm="PPOConfig")
    (tmp_path / "config.json").write_text(json.dumps({**SAVED, "num_devices": 1, "eval_interval": 2}))
    record = run_record(tmp_path)
    assert record.config["num_devices"] == 1 and record.config["eval_interval"] == 2
    (tmp_path / "config.json").write_text(json.dumps({**SAVED, "num_devices": 1, "lr": 0.5}))
    with pytest.raises(RunDirError, match=r"lr: checkpoint 0.1, config.json 0.5"):  # not a field a resume changes
        run_record(tmp_path)


def test_run_record_without_a_checkpoint_reads_config_json(tmp_path):
    with pytest.raises(RunDirError, match=r"is not a directory; nothing to resume"):
        run_record(tmp_path / "missing")
    with pytest.raises(RunDirError, match=r"is not a run directory \(no config.json and no checkpoint\)"):
        run_record(tmp_path)
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(RunDirError, match=r"config.json holds list, not a config object"):
        run_record(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(SAVED))
    (tmp_path / "manifest.json").write_text(json.dumps({"algorithm": "DQNConfig"}))
    (tmp_path / "sweep.json").write_text("{}")
    assert run_record(tmp_path) == (SAVED, "DQNConfig", {}, "config.json", True)


def test_read_json_names_the_file(tmp_path):
    with pytest.raises(RunDirError, match=r"x.json is missing \(the config\)"):
        read_json(tmp_path / "x.json", "the config")
    (tmp_path / "x.json").write_text("{")
    with pytest.raises(RunDirError, match=r"x.json cannot be read as JSON \(JSONDecodeError"):
        read_json(tmp_path / "x.json")


def test_check_resume_config_allows_only_the_resumable_fields():
    assert RESUMABLE_FIELDS == ("total_timesteps", "on_nonfinite", "max_rollbacks", "rollback_lr_factor",
                                "eval_interval", "eval_episodes", "num_devices")
    check_resume_config(SAVED, Cfg(total_timesteps=999, eval_interval=3))
    # A field the saved config lacks takes its default: equal to the default, it is no difference.
    check_resume_config({k: v for k, v in SAVED.items() if k != "added_later"}, Cfg())
    with pytest.raises(ConfigMismatchError, match=r"differing fields: added_later: saved 5, now 6; lr: saved 0.1, "
                                                  r"now 0.2\. Fields that may change on resume: total_timesteps, "):
        check_resume_config(SAVED, Cfg(lr=0.2, added_later=6))


def test_resume_from_scratch(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing to resume"):
        resume_from_scratch(tmp_path, Cfg())
    (tmp_path / "config.json").write_text(json.dumps(SAVED))
    with pytest.warns(UserWarning, match="has no committed checkpoint"):
        assert resume_from_scratch(tmp_path, Cfg()) is True
    with pytest.raises(ConfigMismatchError, match="lr: saved 0.1, now 0.3"):
        resume_from_scratch(tmp_path, Cfg(lr=0.3))
    checkpoint_meta(tmp_path, 10, {**SAVED, "lr": 0.3})  # the checkpoint's config is the one compared
    assert resume_from_scratch(tmp_path, Cfg(lr=0.3)) is False


def test_saved_env(tmp_path):
    assert saved_env(tmp_path) is None
    (tmp_path / "config.json").write_text(json.dumps({"env": "Acrobot-v1"}))
    assert saved_env(tmp_path) == "Acrobot-v1"
    checkpoint_meta(tmp_path, 10, {"env": "Pendulum-v1"})
    assert saved_env(tmp_path) == "Pendulum-v1"


def _fail_in(run_dir, make=lambda d: None):
    """Runs a block that creates ``run_dir`` (as the run lock does), lets ``make`` write into it, then raises."""
    with pytest.raises(ValueError, match="unknown environment"):
        with removed_if_start_fails(run_dir):
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / ".lock").write_text("")
            make(run_dir)
            raise ValueError("unknown environment 'CartPol-v1'")


def test_a_failed_start_removes_the_directory_and_the_parents_it_made(tmp_path):
    run = tmp_path / "runs" / "deep" / "ppo-s0"
    _fail_in(run, lambda d: (d / "config.json").write_text("{}"))
    assert not (tmp_path / "runs").exists()
    assert list(tmp_path.iterdir()) == []


def test_a_failed_start_keeps_what_it_did_not_make(tmp_path):
    existing = tmp_path / "mine"
    existing.mkdir()
    (existing / "notes.txt").write_text("the user's")
    _fail_in(existing)
    assert (existing / "notes.txt").read_text() == "the user's" and (existing / ".lock").exists()
    # A parent that another run wrote into meanwhile stays; only the failed run's own directory goes.
    _fail_in(tmp_path / "runs" / "a", lambda d: (d.parent / "b").mkdir())
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["b"]


@pytest.mark.parametrize("produce", [
    lambda d: (d / "metrics.jsonl").write_text('{"env_steps": 512}\n'),
    lambda d: (d / "checkpoints" / "3").mkdir(parents=True),
    lambda d: (d / "members" / "lr0" / "metrics.jsonl").parent.mkdir(parents=True) or
    (d / "members" / "lr0" / "metrics.jsonl").write_text('{"env_steps": 512}\n'),
])
def test_a_run_that_produced_results_is_kept_when_it_fails(tmp_path, produce):
    run = tmp_path / "runs" / "r"
    _fail_in(run, produce)
    assert run.is_dir() and holds_results(run)


def test_a_clean_exit_or_a_preemption_keeps_the_directory(tmp_path):
    run = tmp_path / "r"
    with removed_if_start_fails(run):
        run.mkdir()  # a run stopped by SIGTERM before its first chunk returns normally: resume starts it over
    assert run.is_dir()
    with pytest.raises(KeyboardInterrupt), removed_if_start_fails(tmp_path / "k"):
        (tmp_path / "k").mkdir()
        raise KeyboardInterrupt  # not an error of the run's making: its directory is left for the user to judge
    assert (tmp_path / "k").is_dir()
    assert not holds_results(run) and not holds_results(tmp_path / "k")
