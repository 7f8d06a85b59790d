"""A run as a process (:mod:`rljax.cli.process`): each way training can end mapped to the exit status
a supervisor or a scheduler acts on, with one line that says what happened and what to do."""

from __future__ import annotations

import errno
import json
import os
import types

import jax
import pytest

from rljax.agents.ppo import PPOConfig

from rljax.actorlearner.engine import ActorFailedError, RolloutTimeoutError
from rljax.cli.process import (EXIT_DIVERGED, EXIT_IO, EXIT_SOFTWARE, EXIT_USAGE, call_training, finished_run,
                               setting_up_line)
from rljax.store.checkpoint import PREEMPTED_EXIT_CODE
from rljax.store.rundir import RunDirError
from rljax.training.hooks.health import DesyncError, NonFiniteError
from tests.support.runs import checkpoint_meta


def _io_error_inside_a_value_error():
    """Orbax's way of failing on a full disk: a ValueError whose cause is the OSError (never raised here, so
    that no frame of this file is in its traceback)."""
    wrapped = ValueError("orbax could not save")
    wrapped.__cause__ = OSError(errno.ENOSPC, "No space left on device")
    return wrapped


@pytest.mark.parametrize("error, status, message", [
    (NonFiniteError("policy_loss is nan"), EXIT_DIVERGED, "error: policy_loss is nan"),
    (DesyncError("params differ"), EXIT_SOFTWARE, "error: params differ"),
    (RunDirError("runs/x is locked"), EXIT_USAGE, "error: runs/x is locked"),
    (FileExistsError("runs/x holds a run"), EXIT_USAGE, "error: runs/x holds a run"),
    (ValueError("num_envs must be >= 1"), EXIT_USAGE, "error: num_envs must be >= 1"),
    (OSError(errno.EROFS, "Read-only file system"), EXIT_IO,
     "error: I/O error: [Errno 30] Read-only file system. Resume with: rljax resume runs/x once it is fixed"),
    (_io_error_inside_a_value_error(), EXIT_IO, "error: I/O error: [Errno 28] No space left on device. Resume with"),
    (RolloutTimeoutError("rollout 7 did not arrive within 600 s (actors alive: 1 of 1)"), EXIT_SOFTWARE,
     "error: rollout 7 did not arrive within 600 s (actors alive: 1 of 1). Resume with: rljax resume runs/x"),
    (ActorFailedError("actor 0 (ServerEnv) failed: RuntimeError: the envs failed 4 time(s) in a row"), EXIT_SOFTWARE,
     "error: actor 0 (ServerEnv) failed: RuntimeError: the envs failed 4 time(s) in a row. Resume with: rljax "
     "resume runs/x once the envs work again"),
])
def test_each_ending_is_an_exit_status_and_one_line(error, status, message, capsys):
    assert call_training(_raised_by_rljax(error), "runs/x") == (None, status)
    assert capsys.readouterr().err.startswith(message)


def test_without_a_run_directory_there_is_nothing_to_resume(capsys):
    assert call_training(_raised_by_rljax(OSError(errno.ENOSPC, "No space left on device")), None) == (None, EXIT_IO)
    assert "Resume with" not in capsys.readouterr().err


def test_other_errors_of_rljax_propagate():
    with pytest.raises(KeyError):
        call_training(_raised_by_rljax(KeyError("a bug")), "runs/x")


def _broken_step(kind):
    """Stands for a user's env method: its errors come from code outside rljax."""
    if kind == "value":
        raise ValueError("boom: my step is broken")
    return {}["missing"]


@pytest.mark.parametrize("kind, raised", [("value", "ValueError: boom: my step is broken"),
                                          ("key", "KeyError: 'missing'")])
def test_an_error_raised_by_the_env_names_where_and_exits_70(kind, raised, capsys, monkeypatch):
    # A ValueError in a user's step_env printed "error: boom: my step is broken" (no place, exit 2); a
    # KeyError or RuntimeError printed a 54-line traceback (exit 1).
    from rljax.training.program import strong_types   # an rljax function that calls what it is given

    monkeypatch.delenv("RLJAX_TRACEBACK", raising=False)
    run = lambda: jax.tree.map(lambda _: _broken_step(kind), strong_types({"x": 1.0}))
    assert call_training(run, "runs/x") == (None, EXIT_SOFTWARE)
    err = capsys.readouterr().err.splitlines()
    line = _broken_step.__code__.co_firstlineno + (3 if kind == "value" else 4)
    assert err[0] == f"error: _broken_step (tests/unit/cli/test_process.py:{line}) raised {raised}", err
    assert err[1].startswith("(code outside rljax that the run called: its env, or a hook; RLJAX_TRACEBACK=1")
    monkeypatch.setenv("RLJAX_TRACEBACK", "1")
    with pytest.raises(ValueError if kind == "value" else KeyError):
        call_training(run, "runs/x")


def _raised_by_rljax(error: BaseException):
    """A ``run`` whose error is raised in a frame of rljax's own code, as rljax's errors are."""
    import rljax.cli.process as module

    namespace = {"error": error}
    exec(compile("def run():\n    raise error\n", module.__file__, "exec"), namespace)
    return namespace["run"]


def test_a_finished_run_and_a_preempted_one(capsys):
    done = types.SimpleNamespace(preempted=None)
    assert call_training(lambda: done, "runs/x") == (done, None)
    stopped = types.SimpleNamespace(preempted="SIGTERM")
    assert call_training(lambda: (stopped, "extra"), "runs/x") == ((stopped, "extra"), PREEMPTED_EXIT_CODE)
    assert capsys.readouterr().err == f"preempted (SIGTERM); exit status {PREEMPTED_EXIT_CODE}. Resume with: rljax " \
                                      f"resume runs/x\n"


def test_the_setting_up_line():
    config = PPOConfig(env="Pendulum-v1")
    assert setting_up_line(config, "runs/p") == "rljax: setting up PPO on Pendulum-v1, run directory runs/p ..."
    assert setting_up_line(config, None, sweep=True) == ("rljax: setting up a PPO sweep on Pendulum-v1, no run "
                                                         "directory (in memory) ...")


def _trained(tmp_path, env_steps=4096, per_update=512, per_chunk=2):
    """A run directory whose newest checkpoint's meta says it trained ``env_steps`` (only the meta: nothing trained)."""
    chunks = env_steps // (per_update * per_chunk)
    checkpoint_meta(tmp_path / "run", env_steps, {"env": "CartPole-v1"}, algorithm="PPOConfig", env_steps=env_steps,
                    chunk_index=chunks - 1, plan={"env_steps_per_update": per_update, "updates_per_chunk": per_chunk,
                                                  "num_updates": chunks * per_chunk})
    (tmp_path / "run" / "config.json").write_text(json.dumps({"env": "CartPole-v1", "total_timesteps": env_steps}))
    (tmp_path / "run" / "manifest.json").write_text(json.dumps({"algorithm": "PPOConfig"}))
    return tmp_path / "run"


def test_a_resume_cannot_shorten_what_is_trained(tmp_path, capsys):
    # `rljax resume RUN --total-timesteps 5e5` on a longer run used to exit 0 saying the run of
    # total_timesteps=500,000 had ended.
    run = _trained(tmp_path)
    assert finished_run(run, PPOConfig(total_timesteps=8192)) is None          # an extension: something to train
    assert "has finished" in finished_run(run, PPOConfig(total_timesteps=4096))  # its own end
    with pytest.raises(ValueError, match=f"cannot resume {run} with total_timesteps=1,024: it has already trained "
                                         f"4,096 env steps"):
        finished_run(run, PPOConfig(total_timesteps=1024))
    from rljax.cli.main import main

    with pytest.raises(SystemExit) as exit_:
        main(["resume", str(run), "--total-timesteps", "1024"])
    assert exit_.value.code == 2
    assert "it cannot shorten what is trained" in capsys.readouterr().err


def test_a_finished_host_env_run_is_finished_too(tmp_path):
    # `rljax resume` of a finished gymnasium/CartPole-v1 run "resumed", trained nothing and rewrote
    # status.json and the manifest. A host run's checkpoint counts updates and has no chunk plan.
    run = tmp_path / "host"
    checkpoint_meta(run, 19968, {"env": "gymnasium/CartPole-v1"}, algorithm="PPOConfig", env_steps=19968, updates=39,
                    chunk_index=9)
    assert "has finished: its newest checkpoint (step 19968) is at 19,968 env steps" in finished_run(
        run, PPOConfig(env="gymnasium/CartPole-v1", total_timesteps=20_000))   # 39 updates of 512: the same plan
    assert finished_run(run, PPOConfig(env="gymnasium/CartPole-v1", total_timesteps=20_480)) is None  # one update more


def test_a_finished_run_is_reported_once_in_a_job(tmp_path, capsys, monkeypatch):
    # `rljax launch -n 2 -d 2 -- rljax resume RUN` printed "has finished" once per process.
    from rljax.cli.process import report_finished

    run = _trained(tmp_path)
    monkeypatch.setenv("RLJAX_PROCESS_ID", "1")
    assert report_finished(run, PPOConfig(total_timesteps=4096)) is True
    assert capsys.readouterr().out == ""
    monkeypatch.setenv("RLJAX_PROCESS_ID", "0")
    assert report_finished(run, PPOConfig(total_timesteps=4096)) is True
    assert capsys.readouterr().out.startswith(f"{run} has finished")


def test_ctrl_c_twice_is_one_line_and_status_130(capsys):
    from rljax.cli.process import EXIT_INTERRUPTED

    assert call_training(_raised_by_rljax(KeyboardInterrupt()), "runs/x") == (None, EXIT_INTERRUPTED) == (None, 130)
    assert capsys.readouterr().err == ("interrupted (Ctrl-C twice): stopped without saving; the newest committed "
                                       "checkpoint, if any, is intact. Resume with: rljax resume runs/x\n")


@pytest.mark.parametrize("before, after", [
    ("", "--xla_cpu_multi_thread_eigen=false"),
    ("--xla_cpu_use_fusion_emitters=false", "--xla_cpu_use_fusion_emitters=false --xla_cpu_multi_thread_eigen=false"),
    ("--xla_cpu_multi_thread_eigen=true", "--xla_cpu_multi_thread_eigen=true"),  # the user's choice wins
])
def test_caller_thread_cpu_ops_are_requested_before_jax_starts(before, after, monkeypatch):
    from jax._src import xla_bridge

    from rljax.cli.process import request_caller_thread_cpu_ops

    monkeypatch.setenv("XLA_FLAGS", before)
    jax.devices()
    assert request_caller_thread_cpu_ops() is False  # JAX has started in this process: too late, nothing changes
    assert os.environ["XLA_FLAGS"] == before
    monkeypatch.setattr(xla_bridge, "backends_are_initialized", lambda: False)
    assert request_caller_thread_cpu_ops() is (before != after)
    assert os.environ["XLA_FLAGS"] == after


def test_rljax_train_requests_them_for_host_envs_only(monkeypatch):
    """The actor-learner path asks before anything starts JAX (devices are requested next); a JAX env's run does not."""
    import rljax.cli.train as train

    calls = []

    class Stop(Exception):
        pass

    def devices(n):
        calls.append("devices")
        raise Stop

    monkeypatch.setattr(train, "request_caller_thread_cpu_ops", lambda: calls.append("caller-thread ops"))
    monkeypatch.setattr(train, "request_cpu_devices", devices)
    for env, expected in (("gymnasium/CartPole-v1", ["caller-thread ops", "devices"]), ("CartPole-v1", ["devices"])):
        calls.clear()
        with pytest.raises(Stop):
            train.train_command(PPOConfig, None, ["--env", env, "--run-dir", "none", "--quiet"], name="ppo",
                                prog="rljax train ppo", sweep_prog="rljax sweep ppo")
        assert calls == expected, env


def test_the_resume_command_of_a_multi_process_job_runs_in_every_process(monkeypatch):
    from rljax.cli.process import resume_command
    from rljax.runtime import distributed

    assert resume_command("runs/x") == "rljax resume runs/x"
    monkeypatch.setattr(distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(distributed, "process_count", lambda: 2)
    assert resume_command("runs/x") == ("rljax resume runs/x in each of the job's 2 processes "
                                        "(e.g. rljax launch -n 2 -- rljax resume runs/x)")


def test_the_compile_cache_a_process_was_given_is_kept(tmp_path):
    """JAX folds the cache directory into its cache keys: a CLI command run inside a process that set
    one (a test harness, a notebook) must keep it, or every program it compiles misses that cache."""
    from rljax.cli.process import enable_compilation_cache

    given, suites = str(tmp_path / "given"), jax.config.jax_compilation_cache_dir
    jax.config.update("jax_compilation_cache_dir", given)
    try:
        assert enable_compilation_cache() == given
        assert jax.config.jax_compilation_cache_dir == given
        chosen = str(tmp_path / "chosen")
        assert enable_compilation_cache(chosen) == chosen == jax.config.jax_compilation_cache_dir
    finally:
        jax.config.update("jax_compilation_cache_dir", suites)
