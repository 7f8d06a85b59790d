"""External trackers (:mod:`rljax.store.trackers`) against the real packages, offline: W&B in
offline mode and MLflow on a local file store hold every ``metrics.jsonl`` row, a resume continues
the same tracker runs, a sweep logs one run per member (grouped), a tracker failing mid-run warns
once while training and ``metrics.jsonl`` go on, credentials are never written, and bad options are
refused before anything starts."""

from __future__ import annotations

import json
import logging
import pathlib
import threading
import types
import warnings

import pytest

import rljax
from rljax.store.tracking import read_metrics
from tests.support.runs import PPO_SMALL
from tests.support.wandb_records import history

pytest.importorskip("wandb")
mlflow = pytest.importorskip("mlflow")

SECRET = "rljax-test-secret-key-0123456789abcdef"


def _mlflow_rows(uri, run_id, key="policy_loss"):
    client = mlflow.MlflowClient(uri)
    return client, sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    """A run stopped after chunk 2 and resumed, logging to W&B (offline) and an MLflow file store,
    with a W&B API key in the environment (offline mode forced) that must not be written anywhere."""
    root = tmp_path_factory.mktemp("trackers")
    run, store = root / "run", root / "mlruns"
    options = dict(run_dir=run, quiet=True, wandb="rljax-tests", mlflow=str(store))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WANDB_API_KEY", SECRET)
        mp.setenv("WANDB_MODE", "offline")
        part = rljax.train(PPO_SMALL, options=rljax.RunOptions(**options, on_chunk=lambda c, s, r: c == 2))
        ids_before = json.loads((run / "trackers.json").read_text())
        rljax.train(PPO_SMALL, options=rljax.RunOptions(**options, resume=True))
    assert part.preempted == "on_chunk"
    return run, store, ids_before, json.loads((run / "trackers.json").read_text())


def test_every_row_reaches_both_trackers_and_a_resume_continues_their_runs(resumed):
    run, store, ids_before, ids = resumed
    assert ids == ids_before and set(ids) == {"W&B", "MLflow"}  # the same tracker runs, continued
    lines = read_metrics(run)
    steps = [r["env_steps"] for r in lines]
    assert len(lines) == 12
    client, logged = _mlflow_rows(store.as_uri(), ids["MLflow"][""])
    assert logged == [(r["env_steps"], pytest.approx(r["policy_loss"])) for r in lines]
    mlrun = client.get_run(ids["MLflow"][""])
    assert mlrun.info.status == "FINISHED" and mlrun.data.params["learning_rate"] == str(PPO_SMALL.learning_rate)
    assert mlrun.data.tags["rljax/config_hash"] and mlrun.data.tags["rljax/algorithm"] == "PPOConfig"
    assert {a.path for a in client.list_artifacts(ids["MLflow"][""])} >= {"config.json", "manifest.json", "chunks.jsonl"}
    rows = history(run, ids["W&B"][""])
    assert [r["env_steps"] for r in rows] == steps
    assert [r["policy_loss"] for r in rows] == pytest.approx([r["policy_loss"] for r in lines])
    assert "sps" in rows[1] and "sps" not in rows[0]  # a chunk's columns on its last row, as in metrics.jsonl
    assert len(list((run / "wandb").glob(f"offline-run-*-{ids['W&B']['']}"))) == 2  # one per process, one id


def test_no_credential_is_written(resumed):
    run, store, _, _ = resumed
    for root in (run, store):
        for path in root.rglob("*"):
            if path.is_file():
                assert SECRET.encode() not in path.read_bytes(), path


def test_a_tracker_failing_mid_run_warns_once_and_training_goes_on(tmp_path, monkeypatch):
    calls = []
    real = mlflow.MlflowClient.log_batch

    def flaky(self, run_id, metrics=(), params=(), tags=(), **kw):
        if metrics:
            calls.append(1)
            if len(calls) >= 2:
                raise ConnectionError("network down")
        return real(self, run_id, metrics=metrics, params=params, tags=tags, **kw)

    monkeypatch.setattr(mlflow.MlflowClient, "log_batch", flaky)
    with pytest.warns(UserWarning, match=r"MLflow failed while logging metrics \(ConnectionError: network down\); "
                                         r"training goes on without it, and metrics.jsonl stays complete") as caught:
        result = rljax.train(PPO_SMALL, options=rljax.RunOptions(run_dir=tmp_path / "run", quiet=True,
                                                                 mlflow=str(tmp_path / "mlruns")))
    assert sum("MLflow failed" in str(w.message) for w in caught) == 1 and len(calls) == 2
    assert result.preempted is None and len(read_metrics(tmp_path / "run")) == 12 and len(result.rows) == 6


def test_a_sweep_logs_one_run_per_member_in_one_group(tmp_path):
    from rljax.training.sweep import SweepSpec, run_sweep

    result, members, _ = run_sweep(PPO_SMALL.__class__(**{**PPO_SMALL.__dict__, "total_timesteps": 256}),
                                   SweepSpec(seeds=(0, 1)), run_dir=tmp_path / "sw", quiet=True, plots=False,
                                   checkpoints=False, mlflow=str(tmp_path / "mlruns"))
    ids = json.loads((tmp_path / "sw" / "trackers.json").read_text())["MLflow"]
    assert set(ids) == {m.name for m in members}
    client = mlflow.MlflowClient((tmp_path / "mlruns").as_uri())
    for m in members:
        run = client.get_run(ids[m.name])
        assert run.data.tags["group"] == "sw" and run.info.run_name == f"sw/{m.name}"
        assert run.data.tags["rljax/seed"] == str(m.seed)
        logged = [h.step for h in client.get_metric_history(ids[m.name], "policy_loss")]
        assert sorted(logged) == [r["env_steps"] for r in read_metrics(tmp_path / "sw" / "members" / m.name)]


@pytest.mark.parametrize("kwargs, message", [
    (dict(mlflow="https://user:hunter2@mlflow.example.com"), "embeds a password"),
    (dict(mlflow=""), "mlflow must be a tracking URI"),
    (dict(wandb=" "), "wandb must be a W&B project name"),
    (dict(wandb="p", run_dir=None), "wandb/mlflow need a run_dir"),
])
def test_bad_tracker_options_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        rljax.RunOptions(**{"run_dir": "runs/x", **kwargs})


def test_a_missing_package_names_the_extra(monkeypatch, tmp_path):
    import builtins

    from rljax.store.trackers import backends

    real_import = builtins.__import__

    def no_wandb(name, *args, **kwargs):
        if name == "wandb":
            raise ImportError("No module named 'wandb'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    with pytest.raises(ImportError, match=r"--wandb needs the wandb package .*pip install -e '.\[wandb\]'"):
        backends("p", None, pathlib.Path(tmp_path))


def test_the_cli_flags_and_a_cli_resume_keep_the_tracker(tmp_path, monkeypatch):
    from rljax.cli.main import main

    monkeypatch.chdir(tmp_path)
    small = ["--num-envs", "8", "--num-steps", "16", "--hidden-sizes", "16", "--num-epochs", "1", "--quiet",
             "--updates-per-chunk", "2"]
    assert main(["train", "ppo", *small, "--total-timesteps", "256", "--run-dir", "run", "--mlflow", "mlruns"]) == 0
    first = json.loads((tmp_path / "run" / "trackers.json").read_text())["MLflow"][""]
    assert main(["resume", "run", "--total-timesteps", "512", "--quiet"]) == 0  # extended; --mlflow kept
    assert json.loads((tmp_path / "run" / "trackers.json").read_text())["MLflow"][""] == first
    _, logged = _mlflow_rows((tmp_path / "mlruns").as_uri(), first)
    assert [step for step, _ in logged] == [128, 256, 384, 512]


class _HangingBackend:
    """A tracker whose start hangs until ``release`` is set (a server that does not answer), then
    records every call; ``fail_start`` makes the start raise instead, after logging urllib3's
    retry warnings as MLflow's client does."""

    name = "Fake"

    def __init__(self, fail_start=False, retrying=False):
        self.release, self.opened, self.retried = threading.Event(), threading.Event(), threading.Event()
        self.fail_start, self.retrying = fail_start, retrying
        self.logged, self.calls = [], []

    def open(self, run_id, name, group, config, tags):
        if self.retrying:  # a client retrying a server that refuses connections, as MLflow's does
            logging.getLogger("urllib3.connectionpool").warning("Retrying (Retry(total=%d)) after connection "
                                                                "refused: /api/2.0/mlflow/runs/create", 3)
            self.retried.set()
        assert self.release.wait(60), "the test never released the tracker"
        if self.fail_start:
            for attempt in range(7):
                logging.getLogger("urllib3.connectionpool").warning("Retrying (Retry(total=%d)) after ...", 6 - attempt)
            raise ConnectionError("connection refused")
        self.opened.set()
        return "fake-run-1"

    def log(self, run_id, rows):
        self.logged.extend(rows)

    def artifacts(self, run_id, paths):
        self.calls.append(("artifacts", run_id, sorted(p.name for p in paths)))

    def close(self, run_id, finished):
        self.calls.append(("close", run_id, finished))


def _tracker_threads():
    return [t for t in threading.enumerate() if t.name.startswith("rljax-tracker Fake")]


def test_a_tracker_that_hangs_at_start_holds_nothing_up_and_gets_every_row_once_it_starts(tmp_path, monkeypatch):
    from rljax.store import trackers

    fake = _HangingBackend()
    monkeypatch.setattr(trackers, "backends", lambda *args: [fake])

    def release_after_chunk_2(c, state, row):
        if c == 2:  # training went on while the tracker's start hung
            assert not fake.opened.is_set() and not (tmp_path / "run" / "trackers.json").exists()
            fake.release.set()

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a tracker that catches up warns about nothing
        result = rljax.train(PPO_SMALL, options=rljax.RunOptions(
            run_dir=tmp_path / "run", quiet=True, mlflow=str(tmp_path / "unused"), tracker_timeout_s=0.05,
            on_chunk=release_after_chunk_2))
    assert result.preempted is None and fake.opened.is_set()
    lines = read_metrics(tmp_path / "run")
    assert len(lines) == 12 and [r["env_steps"] for r in fake.logged] == [r["env_steps"] for r in lines]
    assert [r["policy_loss"] for r in fake.logged] == pytest.approx([r["policy_loss"] for r in lines])
    assert fake.calls[-1] == ("close", "fake-run-1", True)
    assert json.loads((tmp_path / "run" / "trackers.json").read_text()) == {"Fake": {"": "fake-run-1"}}


def _trackers(tmp_path, backend, **kwargs):
    from rljax.store.trackers import Trackers

    program = types.SimpleNamespace(isolated=False, configs=(PPO_SMALL,), names=("",), seeds=(0,))
    return Trackers([backend], tmp_path, program, **kwargs)


def _rows(n):
    return [{"env_steps": 128 * (k + 1), "updates": k + 1, "policy_loss": 0.5 * k} for k in range(n)]


def test_a_tracker_still_starting_at_the_end_is_dropped_with_one_warning(tmp_path):
    fake = _HangingBackend()
    hook = _trackers(tmp_path, fake, start_timeout_s=0.01)
    (tmp_path / "metrics.jsonl").write_text("{}\n")
    hook.start(None)  # returns although the tracker's start hangs
    for k, row in enumerate(_rows(3)):
        hook.record(types.SimpleNamespace(update_rows=None), k, [row])
    with pytest.warns(UserWarning) as caught:
        hook.close()
    messages = [str(w.message) for w in caught]
    assert messages == ["Fake had still not started its run 0.01 s after training ended: dropped (its tracker run "
                        "may lack the last rows and files); metrics.jsonl and tb/ are complete"]
    assert (tmp_path / "metrics.jsonl").read_text() == "{}\n" and not (tmp_path / "trackers.json").exists()
    fake.release.set()  # it starts after all: nothing queued for it is sent, and its thread ends
    for thread in _tracker_threads():
        thread.join(30)
    assert not _tracker_threads() and fake.opened.is_set() and fake.logged == [] and fake.calls == []
    # Nor is anything written to the run directory once the run has ended (its lock is released by then).
    assert not (tmp_path / "trackers.json").exists()


def test_a_tracker_dropped_while_retrying_names_what_it_last_logged(tmp_path, caplog):
    fake = _HangingBackend(retrying=True)
    hook = _trackers(tmp_path, fake, start_timeout_s=0.2)
    hook.start(None)
    assert fake.retried.wait(60)
    with pytest.warns(UserWarning) as caught:
        hook.close()
    fake.release.set()
    assert [str(w.message) for w in caught] == [
        "Fake had still not started its run 0.2 s after training ended: dropped (its tracker run may lack the last "
        "rows and files); metrics.jsonl and tb/ are complete; the last thing it logged: Retrying (Retry(total=3)) "
        "after connection refused: /api/2.0/mlflow/runs/create"]
    assert not [r for r in caplog.records if r.name.startswith("urllib3")]


def test_a_start_that_fails_after_retries_warns_once_without_the_retry_warnings(tmp_path, caplog):
    fake = _HangingBackend(fail_start=True)
    hook = _trackers(tmp_path, fake, start_timeout_s=0.01)
    hook.start(None)
    fake.release.set()
    with pytest.warns(UserWarning) as caught:
        hook.record(types.SimpleNamespace(update_rows=None), 0, _rows(1))
        hook.close()  # waits for the failed start; warns once, however many calls failed or were skipped
    assert [str(w.message) for w in caught] == [
        "Fake failed while starting its run (ConnectionError: connection refused); training goes on without it, and "
        "metrics.jsonl stays complete"]
    assert not [r for r in caplog.records if r.name.startswith("urllib3")]
    assert fake.logged == [] and hook.backends == []
    logging.getLogger("urllib3.connectionpool").warning("a record of the training thread")  # only the trackers' are left out
    assert [r.getMessage() for r in caplog.records if r.name.startswith("urllib3")] == ["a record of the training thread"]


def test_wandb_saves_the_run_files_without_printing_symlinked(tmp_path, capfd, monkeypatch):
    from rljax.store.trackers import WandbBackend

    monkeypatch.setenv("WANDB_MODE", "offline")
    (tmp_path / "config.json").write_text('{"a": 1}')
    (tmp_path / "eval" / "x").mkdir(parents=True)
    (tmp_path / "eval" / "x" / "report.md").write_text("report")
    backend = WandbBackend("rljax-tests", tmp_path)
    run_id = backend.open(None, "run", None, {"a": 1}, {})
    files = pathlib.Path(backend.runs[run_id].dir)
    backend.artifacts(run_id, [tmp_path / "config.json", tmp_path / "eval" / "x" / "report.md"])
    backend.close(run_id, True)
    out = capfd.readouterr()
    assert "Symlinked" not in out.err + out.out and "Linked" not in out.err + out.out
    assert (files / "config.json").read_text() == '{"a": 1}' and (files / "eval" / "x" / "report.md").read_text() == "report"


def test_a_wandb_start_gives_up_after_its_own_timeout_unless_the_environment_sets_one(tmp_path, monkeypatch):
    from rljax.store.trackers import WandbBackend

    backend = WandbBackend("rljax-tests", tmp_path)
    monkeypatch.delenv("WANDB_INIT_TIMEOUT", raising=False)
    assert backend._timeout() == {"init_timeout": WandbBackend.INIT_TIMEOUT_S} and WandbBackend.INIT_TIMEOUT_S < 90
    monkeypatch.setenv("WANDB_INIT_TIMEOUT", "120")
    assert backend._timeout() == {}  # W&B reads the user's own setting
