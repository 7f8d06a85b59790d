"""External trackers (:mod:`rljax.store.trackers`) against the real packages, offline: W&B in
offline mode and MLflow on a local file store hold every ``metrics.jsonl`` row, a resume continues
the same tracker runs, a sweep logs one run per member (grouped), a tracker failing mid-run warns
once while training and ``metrics.jsonl`` go on, credentials are never written, and bad options are
refused before anything starts."""

from __future__ import annotations

import json
import pathlib

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
