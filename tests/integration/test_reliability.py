"""Nothing lost, nothing wrong: preemption, damaged run directories, divergence and I/O faults.

Each test here reproduces a fault a cluster inflicts (a second SIGTERM
during the stop's save, a run killed before its first checkpoint, an edited or damaged
``config.json``/``manifest.json``/``metrics.jsonl``, a NaN in the env, a full disk, Ctrl-C during
compilation, run options forgotten on resume) and checks the run ends as if nothing had happened,
or stops with one clear line and an intact directory.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

import rljax
from rljax.agents.dqn import DQNConfig
from rljax.agents.ppo import PPOConfig
from rljax.store.checkpoint import PREEMPTED_EXIT_CODE, Checkpointer
from rljax.cli.main import call_training, main as cli_main, run_experiment
from rljax.training.hooks.observe import is_measured
from rljax.store.rundir import ConfigMismatchError
from rljax.store.tracking import Tracker, read_chunks, read_metrics
from tests.support.nan_env import NaNReward

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The module's runs, in Python and on the command line (SMALL_FLAGS), are this PPO but where the fault needs
# another (a NaN env, a constant learning rate, the Ctrl-C tests' longer compile): one compiled program, which the
# persistent compile cache (tests/conftest.py) serves after its first compile.
PPO_SMALL = PPOConfig(total_timesteps=8 * 16 * 12, updates_per_chunk=2, num_envs=8, num_steps=16, num_epochs=2,
                      num_minibatches=2, hidden_sizes=(16,), normalize_obs=True, normalize_reward=True)
SMALL_FLAGS = ["--updates-per-chunk", "2", "--num-envs", "8", "--num-steps", "16", "--num-epochs", "2",
               "--num-minibatches", "2", "--hidden-sizes", "16", "--normalize-obs", "--normalize-reward"]
"""PPO_SMALL's fields as flags of ``python -m experiments.ppo_cartpole`` (but its total_timesteps)."""
IN_PROCESS = ["--quiet", "--no-compile-cache"]
"""The flags of every command run in this test process: --no-compile-cache keeps the suite's compile cache, as
a command's own (~/.cache/rljax/xla) would change the cache key of every program this process compiles after it
(JAX puts the cache directory in the compile options it hashes)."""


def strip(rows):
    """The rows without their measured columns (wall_time_s, sps, time/*, memory/*: rljax.training.hooks.observe.is_measured)."""
    return [{k: v for k, v in r.items() if not is_measured(k)} for r in rows]


def final_leaves(run_dir):
    ckpt = Checkpointer(run_dir)
    try:
        return ckpt.read(max(ckpt.steps()))[0]
    finally:
        ckpt.close()


def same_bits(a, b):
    return len(a) == len(b) and all(x.dtype == y.dtype and np.array_equal(x, y) for x, y in zip(a, b))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted PPO_SMALL run: its final checkpoint's leaves, its chunk rows and its
    per-update rows (``metrics.jsonl``)."""
    run = tmp_path_factory.mktemp("ref") / "run"
    rljax.train(PPO_SMALL, options=rljax.RunOptions(run_dir=run, quiet=True, checkpoint_every=1))
    return final_leaves(run), strip(read_chunks(run)), strip(read_metrics(run))


def _partial_run(run_dir, stop_after_chunk=2):
    part = rljax.train(PPO_SMALL, options=rljax.RunOptions(run_dir=run_dir, quiet=True, checkpoint_every=1,
                                                           on_chunk=lambda c, s, r: c == stop_after_chunk))
    assert part.preempted == "on_chunk"
    return part


# ----------------------------------------------------------------------------------------------
# 1. A second SIGTERM while the stop's checkpoint is being written.

@pytest.mark.slow  # by default tests/integration/test_fault_soak.py's double-sigterm-during-write case
@pytest.mark.timeout(420)
def test_a_second_sigterm_during_the_stop_save_keeps_the_save_and_status_75(tmp_path):
    """Regression: the signal guard was restored before the async save committed, so a second
    SIGTERM 50-120 ms after the first killed the process (status -15, only an
    ``*.orbax-checkpoint-tmp`` left); later ones turned status 75 into -15 after the save."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for delay in (0.05, 0.1, 0.25):
        run = tmp_path / f"run-{delay}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "experiments.ppo_cartpole", "--total-timesteps", "5e6", "--updates-per-chunk", "2",
             "--checkpoint-interval", "1000", "--run-dir", str(run)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            progress = 0
            for line in proc.stdout:
                progress += line.startswith("[")
                if progress == 3:
                    break
            os.kill(proc.pid, signal.SIGTERM)
            time.sleep(delay)
            os.kill(proc.pid, signal.SIGTERM)
            _, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        names = [p.name for p in (run / "checkpoints").iterdir()]
        assert proc.returncode == PREEMPTED_EXIT_CODE, (delay, proc.returncode, err[-1500:])
        assert any(n.isdigit() for n in names) and not any("tmp" in n for n in names), (delay, names)


# ----------------------------------------------------------------------------------------------
# 2. A run stopped hard before its first committed checkpoint.

def test_resume_of_a_run_without_a_committed_checkpoint_starts_it_over(tmp_path, reference):
    """Regression: neither `rljax resume` ("no restorable checkpoint") nor a fresh start ("already
    holds metrics") accepted such a directory, so a requeue loop retried forever."""
    run = tmp_path / "run"
    # What a run killed before its first save leaves: config, manifest, some metrics rows, no step.
    rljax.train(PPO_SMALL, options=rljax.RunOptions(run_dir=run, quiet=True, checkpoints=False,
                                                    on_chunk=lambda c, s, r: c == 1))
    stale = read_chunks(run)
    assert len(stale) == 2 and not (run / "checkpoints").exists()
    with pytest.raises(FileExistsError, match="rljax resume"):
        rljax.train(PPO_SMALL, options=rljax.RunOptions(run_dir=run, quiet=True))
    orphan = run / "checkpoints" / "256.orbax-checkpoint-tmp"  # a save the kill interrupted
    (orphan / "state").mkdir(parents=True)
    with pytest.warns(UserWarning, match="starting it over from scratch"):
        rljax.train(PPO_SMALL, options=rljax.RunOptions(run_dir=run, quiet=True, resume=True, checkpoint_every=1))
    assert not orphan.exists()
    ref_leaves, ref_rows, _ = reference
    assert same_bits(final_leaves(run), ref_leaves)
    assert strip(read_chunks(run)) == ref_rows
    superseded = [json.loads(line) for line in (run / "chunks.superseded.jsonl").read_text().splitlines()]
    assert strip(superseded) == strip(stale)
    assert len((run / "metrics.superseded.jsonl").read_text().splitlines()) == 4  # the 2 chunks' updates


@pytest.mark.slow  # by default the same resume from Python above (the CLI only prints its warning)
def test_cli_resume_of_a_run_without_a_checkpoint_exits_0(tmp_path):
    run = tmp_path / "run"
    rljax.train(PPO_SMALL, options=rljax.RunOptions(run_dir=run, quiet=True, checkpoints=False,
                                                    on_chunk=lambda c, s, r: c == 0))
    assert cli_main(["resume", str(run), *IN_PROCESS]) == 0
    assert [r["env_steps"] for r in read_chunks(run)] == [256 * (i + 1) for i in range(6)]


# ----------------------------------------------------------------------------------------------
# 6. config.json is not the record of the run; the checkpoint is.

def test_an_edited_config_json_is_refused_naming_the_field(tmp_path, capsys):
    """Regression: resume trusted config.json, trained with the checkpoint's learning rate anyway
    and recorded the edited one in the manifest; editing normalize_advantages changed the algorithm
    mid-run silently."""
    run = tmp_path / "run"
    _partial_run(run)
    config_path = run / "config.json"
    saved = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**saved, "learning_rate": 1e-2, "normalize_advantages": False}))
    assert cli_main(["resume", str(run), *IN_PROCESS]) == 2
    err = capsys.readouterr().err
    assert "learning_rate" in err and "normalize_advantages" in err and "config.json" in err
    edited = PPOConfig(**{**PPO_SMALL.__dict__, "learning_rate": 1e-2})
    with pytest.raises(ConfigMismatchError, match="learning_rate"):
        rljax.train(edited, options=rljax.RunOptions(run_dir=run, quiet=True, resume=True))
    assert strip(read_chunks(run)) == strip(read_chunks(run))  # nothing written by the refused resumes
    assert len(read_chunks(run)) == 3


# ----------------------------------------------------------------------------------------------
# 8. Damaged or deleted run files.

def test_damaged_config_manifest_and_a_cut_metrics_row_resume_losslessly(tmp_path, reference):
    """Regression: garbage in config.json/manifest.json gave tracebacks that did not name the file
    and an unresumable run; a metrics row cut mid-line was lost for good."""
    run = tmp_path / "run"
    _partial_run(run)
    (run / "config.json").write_text("{not json")
    (run / "manifest.json").write_bytes(b"\x00\xff garbage")
    for name in ("metrics.jsonl", "chunks.jsonl"):
        rows = (run / name).read_text()
        (run / name).write_text(rows[:-25])  # the checkpoint's own row, cut mid-line
    with pytest.warns(UserWarning, match="manifest.json is not valid JSON"):
        assert cli_main(["resume", str(run), *IN_PROCESS]) == 0
    ref_leaves, ref_rows, ref_lines = reference
    assert same_bits(final_leaves(run), ref_leaves)
    assert strip(read_chunks(run)) == ref_rows and strip(read_metrics(run)) == ref_lines
    assert list(run.glob("manifest.json.damaged-*"))  # kept, not deleted
    assert json.loads((run / "config.json").read_text())["learning_rate"] == PPO_SMALL.learning_rate
    assert "resumes" in json.loads((run / "manifest.json").read_text())


def test_resume_sets_aside_exactly_the_rows_after_the_checkpoint(tmp_path, reference):
    run = tmp_path / "run"
    rljax.train(PPO_SMALL, options=rljax.RunOptions(run_dir=run, quiet=True, checkpoint_every=2,
                                                    on_chunk=lambda c, s, r: c == 2))
    # Saved after chunks 1 and 2 (the stop); drop the newest so chunk 2's row is after the checkpoint.
    ckpt = Checkpointer(run)
    steps = ckpt.steps()
    ckpt.close()
    assert steps == [512, 768]
    os.replace(run / "checkpoints" / "768", tmp_path / "768-moved")
    rljax.train(PPO_SMALL, options=rljax.RunOptions(run_dir=run, quiet=True, resume=True, checkpoint_every=2))
    superseded = [json.loads(line) for line in (run / "chunks.superseded.jsonl").read_text().splitlines()]
    assert [r["env_steps"] for r in superseded] == [768]
    lines = [json.loads(line) for line in (run / "metrics.superseded.jsonl").read_text().splitlines()]
    assert [r["env_steps"] for r in lines] == [640, 768]  # the two updates of chunk 2
    _, ref_rows, ref_lines = reference
    assert strip(read_chunks(run)) == ref_rows and strip(read_metrics(run)) == ref_lines


def test_a_deleted_metrics_file_is_restarted_from_the_checkpoint_row(tmp_path, reference):
    run = tmp_path / "run"
    _partial_run(run)
    (run / "metrics.jsonl").unlink()
    (run / "chunks.jsonl").unlink()
    with pytest.warns(UserWarning, match="(metrics|chunks).jsonl is missing"):
        rljax.train(PPO_SMALL, options=rljax.RunOptions(run_dir=run, quiet=True, resume=True))
    _, ref_rows, ref_lines = reference
    assert strip(read_chunks(run)) == ref_rows[2:]  # the checkpoint's row (chunk 2) and what followed
    assert strip(read_metrics(run)) == ref_lines[5:]  # the checkpoint chunk's last row, then the rest


# ----------------------------------------------------------------------------------------------
# 9. Non-finite losses and state: never checkpointed; stop or roll back.

def _all_saved_leaves_finite(run_dir):
    ckpt = Checkpointer(run_dir)
    try:
        for step in ckpt.steps():
            for leaf in ckpt.read(step)[0]:
                if np.issubdtype(leaf.dtype, np.floating) and not np.all(np.isfinite(leaf)):
                    return False
        return True
    finally:
        ckpt.close()


@pytest.mark.parametrize("algo, nan_at", [("ppo", 40), ("dqn", 24)])
def test_a_nan_from_the_env_stops_the_run_and_no_checkpoint_holds_it(tmp_path, algo, nan_at):
    """Regression: the health check read only ``*_loss``; a DQN checkpoint held 21,869 non-finite
    values (the NaN reward sits in the buffer and the params before any loss shows it)."""
    if algo == "ppo":
        cfg = dataclasses.replace(PPO_SMALL, env="nan-reward", normalize_reward=False)
    else:
        cfg = DQNConfig(env="nan-reward", total_timesteps=4 * 2 * 60, updates_per_chunk=5, num_envs=4, num_steps=2,
                        batch_size=16, buffer_size=64, learning_starts=16, target_update_interval=16,
                        hidden_sizes=(16,))
    env = NaNReward()
    from rljax.training.hooks.health import NonFiniteError

    with pytest.raises(NonFiniteError, match="the env python-object:.*NaNReward returned .* fix the env"):
        rljax.train(cfg, env, dataclasses.replace(env.default_params, nan_at=nan_at),
                    options=rljax.RunOptions(run_dir=tmp_path / "run", quiet=True, checkpoint_every=1))
    rows = read_chunks(tmp_path / "run")
    assert len(rows) >= 2 and rows[-1]["env_nonfinite"] > 0 and rows[0]["env_nonfinite"] == 0
    assert rows[0]["nonfinite_state"] == 0
    assert Checkpointer(tmp_path / "run").steps()  # the good chunks were saved
    assert _all_saved_leaves_finite(tmp_path / "run")
    incidents = json.loads((tmp_path / "run" / "manifest.json").read_text())["incidents"]
    assert [i["action"] for i in incidents] == ["stop"]


def test_rollback_restores_a_good_state_with_a_lower_learning_rate(tmp_path):
    cfg = dataclasses.replace(PPO_SMALL, learning_rate=1e30, anneal_lr=False, on_nonfinite="rollback",
                              rollback_lr_factor=1e-33, max_rollbacks=1)
    with pytest.warns(UserWarning, match="rolled back"):
        result = rljax.train(cfg, options=rljax.RunOptions(run_dir=tmp_path / "run", quiet=True, checkpoint_every=1))
    assert result.timings["rollbacks"] == 1
    rows = read_chunks(tmp_path / "run")
    assert [r["env_steps"] for r in rows] == [256 * (i + 1) for i in range(6)]
    assert all(r["nonfinite_state"] == 0 and r["rollbacks"] == 1 for r in rows)
    assert rows[-1]["learning_rate"] == pytest.approx(1e30 * 1e-33, rel=1e-5)
    assert (tmp_path / "run" / "metrics.superseded.jsonl").exists()
    assert _all_saved_leaves_finite(tmp_path / "run")
    incidents = json.loads((tmp_path / "run" / "manifest.json").read_text())["incidents"]
    assert [(i["action"], i["to_env_steps"]) for i in incidents] == [("rollback", 0)]


def test_an_env_that_returns_nan_is_named_and_stops_the_run_without_rollbacks(tmp_path):
    # NaN rewards from the env were reported as divergence ("policy_loss is nan ... the run diverged"),
    # and on_nonfinite="rollback" spent its rollbacks replaying the same env.
    env = NaNReward()
    cfg = dataclasses.replace(PPO_SMALL, env="nan-reward", normalize_reward=False, on_nonfinite="rollback",
                              max_rollbacks=2)
    from rljax.training.hooks.health import NonFiniteError

    with pytest.raises(NonFiniteError, match=r"the env python-object:.*NaNReward returned 8 non-finite observation "
                                             r"or reward values for finite actions; .* a rollback cannot help: fix "
                                             r"the env \(after chunk 1 \(env step 512\)\)\. The newest checkpoint "
                                             r"\(256 env steps\) is intact"):
        rljax.train(cfg, env, dataclasses.replace(env.default_params, nan_at=40),
                    options=rljax.RunOptions(run_dir=tmp_path / "run", quiet=True, checkpoint_every=1))
    incidents = json.loads((tmp_path / "run" / "manifest.json").read_text())["incidents"]
    assert [i["action"] for i in incidents] == ["stop"]
    rows = read_chunks(tmp_path / "run")
    # 8 envs x 32 steps a chunk: each env's step 40 (a NaN reward) falls in chunk 1.
    assert [r["env_nonfinite"] for r in rows] == [0, 8]
    assert _all_saved_leaves_finite(tmp_path / "run")


def test_cli_divergence_exits_65_with_one_line(tmp_path, capsys):
    from rljax.cli.main import EXIT_DIVERGED

    status = run_experiment(PPOConfig, None, [*SMALL_FLAGS, "--learning-rate", "1e30", "--total-timesteps", "2048",
                                              "--run-dir", str(tmp_path / "run"), *IN_PROCESS])
    assert status == EXIT_DIVERGED
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "non-finite" in err[0]


# ----------------------------------------------------------------------------------------------
# 10. I/O errors, and Ctrl-C during compilation.

class _FullDisk:
    """A file object that writes the first half of a row and then fails like a full disk."""

    def __init__(self, f):
        self.f = f

    def write(self, text):
        self.f.write(text[: len(text) // 2])
        self.f.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name):
        return getattr(self.f, name)


def test_a_full_disk_leaves_no_partial_metrics_row(tmp_path):
    """Regression: ENOSPC while writing metrics.jsonl left a truncated row."""
    tracker = Tracker(tmp_path, PPO_SMALL, quiet=True, tensorboard=False)
    base = {"updates": 1, "wall_time_s": 0.0, "sps": 1.0, "episode_return_mean": 1.0, "episode_length_mean": 1.0,
            "episodes": 1}
    tracker.log({**base, "env_steps": 1})
    tracker._jsonl = _FullDisk(tracker._jsonl)
    with pytest.raises(OSError, match="metrics.jsonl"):
        tracker.log({**base, "env_steps": 2})
    tracker.log({**base, "env_steps": 3})
    tracker.close()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["env_steps"] for line in lines] == [1, 3]


def test_io_errors_exit_74_not_the_usage_status(capsys):
    """Regression: a full disk during a checkpoint write exited 2 (the usage-error status) with
    Orbax tracebacks; Orbax wraps the OSError, so the status comes from the exception chain."""
    from rljax.cli.main import EXIT_IO

    def disk_full():
        raise OSError(errno.ENOSPC, "No space left on device")

    def wrapped():
        try:
            disk_full()
        except OSError as err:
            raise ValueError("tensorstore write failed") from err

    for run in (disk_full, wrapped):
        assert call_training(run, "runs/x") == (None, EXIT_IO)
        err = capsys.readouterr().err
        assert "No space left on device" in err and "rljax resume runs/x" in err


def _ctrl_c_during_compile(cmd: list[str], env: dict, times: int) -> tuple[int, str, str]:
    """Runs ``cmd`` and presses Ctrl-C ``times`` times (0.5 s apart) once it says it is compiling;
    returns its exit status, stdout and stderr."""
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        for line in proc.stdout:
            if "compiling" in line:
                break
        for i in range(times):
            time.sleep(0.5 * (i > 0))
            proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, out, err


@pytest.mark.timeout(300)
def test_ctrl_c_during_compilation_stops_cleanly_and_resumes(tmp_path):
    """Regression: Ctrl-C during the compile segfaulted (4 of 8 tries) or was swallowed (2 of 8)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "experiments.ppo_cartpole", "--total-timesteps", "4096", "--no-compile-cache"]
    status, out, err = _ctrl_c_during_compile(cmd + ["--run-dir", str(run)], env, times=1)
    assert status == PREEMPTED_EXIT_CODE, err[-2000:]
    assert "Traceback" not in err and "stopped by SIGINT" in out
    # Said at once, not after the compile (which printed nothing for seconds).
    assert "rljax: SIGINT: stopping at the next chunk boundary with a checkpoint" in err
    resumed = subprocess.run(cmd + ["--resume", str(run), "--quiet"], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=240)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert read_chunks(run)[-1]["env_steps"] == 4096


@pytest.mark.timeout(300)
def test_ctrl_c_twice_during_compilation_stops_at_once_with_one_line(tmp_path):
    """Regression: a second Ctrl-C during the compile dumped a 50-line KeyboardInterrupt traceback."""
    from rljax.cli.process import EXIT_INTERRUPTED

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "experiments.ppo_cartpole", "--total-timesteps", "4096", "--no-compile-cache",
           "--run-dir", str(tmp_path / "run")]
    status, _, err = _ctrl_c_during_compile(cmd, env, times=2)
    assert status == EXIT_INTERRUPTED, err[-2000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    assert "interrupted (Ctrl-C twice): stopped without saving" in err or "second SIGINT" in err, err


# ----------------------------------------------------------------------------------------------
# 11. Run options are part of the run.

def test_run_options_are_kept_on_resume(tmp_path):
    """Regression: --checkpoint-every, --keep-checkpoints and --no-tensorboard were forgotten by
    `rljax resume`, which then wrote tensorboard, kept 3 steps and saved every 60 s."""
    run = tmp_path / "run"
    flags = [*SMALL_FLAGS, "--total-timesteps", str(256 * 3), "--checkpoint-every", "1", "--keep-checkpoints", "5",
             "--no-tensorboard", *IN_PROCESS]
    assert run_experiment(PPOConfig, None, flags + ["--run-dir", str(run)]) == 0
    assert cli_main(["resume", str(run), "--total-timesteps", str(256 * 8), *IN_PROCESS]) == 0
    assert not (run / "tb").exists()
    steps = sorted(int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit())
    assert steps == [256 * k for k in range(4, 9)]  # saved every chunk (256 env steps), 5 kept
    # An explicit flag still wins over the saved option.
    assert cli_main(["resume", str(run), "--total-timesteps", str(256 * 9), "--keep-checkpoints", "2",
                     *IN_PROCESS]) == 0
    assert len([p for p in (run / "checkpoints").iterdir() if p.name.isdigit()]) == 2


@pytest.mark.timeout(60)
def test_one_sigterm_delivered_twice_is_one_request():
    """A job-wide SIGTERM (plain scancel) reaches a supervised run directly and forwarded; the two
    copies must not count as the 'second signal' that ends the run without its save."""
    script = ("import time\n"
              "from rljax.training.signals import PreemptionGuard\n"
              "with PreemptionGuard(grace_s=0.5) as guard:\n"
              "    print('ready', flush=True)\n"
              "    time.sleep(4)\n"
              "print('stopped cleanly' if guard.requested else 'not requested', flush=True)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "stopped cleanly" in out


def test_sigterm_is_ignored_once_the_run_has_returned():
    """Regression (fault soak): a SIGTERM during interpreter shutdown, after the final checkpoint
    committed, killed the process with -15 instead of letting it exit 0."""
    class Done:
        preempted = None

    previous = signal.getsignal(signal.SIGTERM)
    try:
        out, status = call_training(lambda: Done(), "runs/x")
        assert status is None
        assert callable(signal.getsignal(signal.SIGTERM))  # held off, not the default (death)
        os.kill(os.getpid(), signal.SIGTERM)  # and it really changes nothing
        # A handler, not SIG_IGN: programs started afterwards (a supervisor, a test's subprocess)
        # must not inherit an ignored SIGTERM.
        child = subprocess.run([sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGTERM) == signal.SIG_DFL)"],
                               capture_output=True, text=True, timeout=60)
        assert child.stdout.strip() == "True", child.stdout
    finally:
        signal.signal(signal.SIGTERM, previous)
