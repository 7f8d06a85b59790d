"""External experiment trackers: Weights & Biases and MLflow, behind one interface.

A run started with ``--wandb PROJECT`` or ``--mlflow URI`` (:class:`rljax.RunOptions` ``wandb`` and
``mlflow``) also logs to that tracker: the resolved config (and its hash, the seed, the algorithm,
the run directory) when it starts, every ``metrics.jsonl`` row (one per ``log_every`` updates, x axis
``env_steps``) as each chunk ends, and the run's files (``config.json``, ``manifest.json``,
``chunks.jsonl``, ``eval/*/report.*`` already written) as artifacts when it closes (a sweep's
``summary.md`` and plots are written after training, so they are not among them).
A sweep logs one tracker run per member, grouped under the sweep directory's name. Only the leader of a
multi-process job logs.

The tracker run ids are kept in ``RUN_DIR/trackers.json``, so ``rljax resume`` continues the same
W&B run and MLflow run. Rows that a resume supersedes (chunks that ran after the last checkpoint)
stay in the tracker's history, as neither tracker deletes logged values; ``metrics.jsonl`` is the
record.

Credentials are the trackers' own: ``wandb login`` or ``WANDB_API_KEY``; ``MLFLOW_TRACKING_USERNAME`` /
``MLFLOW_TRACKING_PASSWORD`` or ``MLFLOW_TRACKING_TOKEN``. rljax never writes them: an MLflow URI
that embeds a password is refused (the URI is saved with the run). Without W&B credentials (and
without ``WANDB_MODE``) W&B runs offline, into ``RUN_DIR/wandb/`` (``wandb sync`` uploads it later).
A local MLflow file store (``--mlflow ./mlruns`` or ``file:///path``) works without a server.

A tracker that fails (network down, disk full, a bad URI) never stops or corrupts training: the
first failure warns once, naming the tracker and the error, and that tracker is dropped for the
rest of the run; ``metrics.jsonl`` stays complete.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import time
import urllib.parse
import warnings
from collections.abc import Mapping
from typing import Any, Protocol

__all__ = ["Backend", "WandbBackend", "MlflowBackend", "Trackers", "backends", "check_mlflow_uri", "TRACKERS_FILE"]

TRACKERS_FILE = "trackers.json"
"""``RUN_DIR/trackers.json``: each tracker's run id per member, kept so a resume continues them."""


def check_mlflow_uri(uri: str) -> str:
    """``uri`` when it is a usable MLflow tracking URI; raises ``ValueError`` for one that embeds a
    password (it would be saved with the run) or is empty."""
    if not isinstance(uri, str) or not uri.strip():
        raise ValueError(f"mlflow must be a tracking URI (http://host:5000, file:///path, ./mlruns), got {uri!r}")
    parts = urllib.parse.urlsplit(uri)
    if parts.password:
        raise ValueError("the MLflow URI embeds a password, and it would be saved with the run (manifest.json): "
                         "pass the URI without it and set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD "
                         "(or MLFLOW_TRACKING_TOKEN) in the environment")
    return uri


class Backend(Protocol):
    """One tracker. ``open`` returns the id of the tracker run it started or continued."""

    name: str

    def open(self, run_id: str | None, name: str, group: str | None, config: Mapping[str, Any],
             tags: Mapping[str, str]) -> str: ...

    def log(self, run_id: str, rows: list[dict[str, float]]) -> None: ...

    def artifacts(self, run_id: str, paths: list[pathlib.Path]) -> None: ...

    def close(self, run_id: str, finished: bool) -> None: ...


def _wandb_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        import netrc

        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


class WandbBackend:
    """W&B runs in ``project``; files under ``directory/wandb``. The mode is ``WANDB_MODE`` when
    set, else online with credentials and offline without."""

    name = "W&B"

    def __init__(self, project: str, directory: pathlib.Path):
        import wandb

        self.wandb, self.project, self.directory = wandb, project, directory
        self.mode = os.environ.get("WANDB_MODE") or ("online" if _wandb_credentials() else "offline")
        self.runs: dict[str, Any] = {}

    def open(self, run_id, name, group, config, tags):
        run = self.wandb.init(project=self.project, dir=str(self.directory), mode=self.mode, id=run_id,
                              resume="allow", name=name, group=group, config=dict(config),
                              tags=[f"{k}:{v}"[:64] for k, v in tags.items()], reinit="create_new",
                              settings=self.wandb.Settings(silent=True, console="off"))
        run.define_metric("env_steps")
        run.define_metric("*", step_metric="env_steps")
        self.runs[run.id] = run
        return run.id

    def log(self, run_id, rows):
        run = self.runs[run_id]
        for row in rows:
            run.log(row)

    def artifacts(self, run_id, paths):
        run = self.runs[run_id]
        for path in paths:
            run.save(str(path), base_path=str(self.directory), policy="now")

    def close(self, run_id, finished):
        self.runs.pop(run_id).finish(exit_code=0 if finished else 1)


class MlflowBackend:
    """MLflow runs in experiment ``experiment`` of the tracking server or store at ``uri`` (a local
    path is a file store)."""

    name = "MLflow"
    BATCH = 1000  # MLflow's limit of metrics per log_batch call

    def __init__(self, uri: str, experiment: str):
        check_mlflow_uri(uri)
        if urllib.parse.urlsplit(uri).scheme in ("", "file"):
            # A local file store was asked for by name; MLflow 3 refuses it unless this is set.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        from mlflow import MlflowClient

        self.client = MlflowClient(tracking_uri=uri)
        found = self.client.get_experiment_by_name(experiment)
        self.experiment_id = found.experiment_id if found else self.client.create_experiment(experiment)

    def open(self, run_id, name, group, config, tags):
        from mlflow.entities import Param

        tags = {**tags, **({"group": group} if group else {})}
        if run_id is None:
            run_id = self.client.create_run(self.experiment_id, run_name=name, tags=dict(tags)).info.run_id
            params = [Param(k, json.dumps(v)[:6000] if not isinstance(v, str) else v[:6000])
                      for k, v in sorted(config.items())]
            for i in range(0, len(params), 100):
                self.client.log_batch(run_id, params=params[i:i + 100])
        else:
            self.client.update_run(run_id, status="RUNNING")
        return run_id

    def log(self, run_id, rows):
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, int(row["env_steps"])) for row in rows for k, v in row.items() if k != "env_steps"]
        for i in range(0, len(metrics), self.BATCH):
            self.client.log_batch(run_id, metrics=metrics[i:i + self.BATCH])

    def artifacts(self, run_id, paths):
        for path in paths:
            self.client.log_artifact(run_id, str(path))

    def close(self, run_id, finished):
        self.client.set_terminated(run_id, status="FINISHED" if finished else "KILLED")


def backends(wandb_project: str | None, mlflow_uri: str | None, run_dir: str | os.PathLike) -> list[Backend]:
    """The trackers asked for. A missing package raises ``ImportError`` naming the extra to install;
    a tracker that cannot be reached warns (see the module docstring) and is left out."""
    out: list[Backend] = []
    for name, wanted, make, extra in (
            ("W&B", wandb_project, lambda: WandbBackend(wandb_project, pathlib.Path(run_dir)), "wandb"),
            ("MLflow", mlflow_uri, lambda: MlflowBackend(mlflow_uri, os.environ.get("MLFLOW_EXPERIMENT_NAME", "rljax")),
             "mlflow")):
        if not wanted:
            continue
        try:
            out.append(make())
        except ImportError as err:
            raise ImportError(f"--{extra} needs the {extra} package ({err}): pip install -e '.[{extra}]'") from err
        except Exception as err:  # noqa: BLE001 - a tracker must never stop training
            warnings.warn(f"{name} could not be set up ({type(err).__name__}: {err}); training goes on without it, "
                          f"and metrics.jsonl stays complete", stacklevel=3)
    return out


def _numbers(row: Mapping[str, Any]) -> dict[str, float]:
    """The finite numbers of a row (what a tracker can plot)."""
    return {k: float(v) for k, v in row.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


class Trackers:
    """The boundary hook that logs to external trackers (see the module docstring).

    Args:
        backends: the trackers (:class:`WandbBackend`, :class:`MlflowBackend`).
        run_dir: the run (or sweep) directory: ``trackers.json`` and the artifacts.
        program: the run's program (members' names, configs, seeds; each tracker run is tagged
            with its member's config hash, algorithm and seed when it starts).
    """

    def __init__(self, backends: list[Backend], run_dir: str | os.PathLike, program: Any):
        self.backends = list(backends)
        self.run_dir = pathlib.Path(run_dir)
        self.program = program
        self.ids: dict[str, dict[str, str]] = {}
        self.finished = False

    def _guard(self, backend: Backend, what: str, call: Any) -> Any:
        """``call()``; on any error warns once and drops ``backend`` for the rest of the run."""
        if backend not in self.backends:
            return None
        try:
            return call()
        except Exception as err:  # noqa: BLE001 - a tracker must never stop training
            self.backends.remove(backend)
            warnings.warn(f"{backend.name} failed while {what} ({type(err).__name__}: {err}); training goes on "
                          f"without it, and metrics.jsonl stays complete", stacklevel=2)
            return None

    def _members(self) -> list[tuple[str, str, Any]]:
        """``(key, tracker run name, config)`` per member."""
        base = self.run_dir.name
        if not self.program.isolated:
            return [("", base, self.program.configs[0])]
        return [(n, f"{base}/{n}", c) for n, c in zip(self.program.names, self.program.configs)]

    def start(self, run: Any) -> None:
        """Opens (or, on a resume, continues) each member's tracker run and saves the ids."""
        from rljax.store.tracking import config_hash, config_to_dict

        path = self.run_dir / TRACKERS_FILE
        saved = json.loads(path.read_text()) if path.exists() else {}
        group = self.run_dir.name if self.program.isolated else None
        for backend in list(self.backends):
            ids = dict(saved.get(backend.name, {}))
            for (key, name, config), seed in zip(self._members(), self.program.seeds):
                tags = {"rljax/config_hash": config_hash(config), "rljax/algorithm": type(config).__name__,
                        "rljax/run_dir": str(self.run_dir), "rljax/seed": str(seed)}
                opened = self._guard(backend, "starting its run", lambda key=key, name=name, config=config, tags=tags:
                                     backend.open(ids.get(key), name, group, config_to_dict(config), tags))
                if opened is None:
                    break
                ids[key] = opened
            self.ids[backend.name] = ids
        path.write_text(json.dumps({**saved, **self.ids}, indent=2, sort_keys=True) + "\n")

    def record(self, run: Any, chunk_index: int, rows: list[dict[str, Any]]) -> None:
        """Logs each member's ``metrics.jsonl`` rows of this chunk."""
        from rljax.store.tracking import boundary_line

        updates = getattr(run, "update_rows", None) or [None] * len(rows)
        lines = [[_numbers(r) for r in [*(u or [])[:-1], boundary_line(row, u)]] for row, u in zip(rows, updates)]
        for backend in list(self.backends):
            ids = self.ids.get(backend.name, {})
            for (key, _, _), member_lines in zip(self._members(), lines):
                self._guard(backend, "logging metrics", lambda key=key, ml=member_lines: backend.log(ids[key], ml))

    def boundary(self, run: Any, chunk_index: int, rows: list[dict[str, Any]], last: bool) -> None:
        if last:
            self.finished = True

    def close(self, run: Any = None) -> None:
        """Logs the run's files as artifacts and ends each tracker run (finished or stopped)."""
        for backend in list(self.backends):
            ids = self.ids.get(backend.name, {})
            for key, _, _ in self._members():
                if key not in ids:
                    continue
                files = self._artifacts(key)
                self._guard(backend, "saving artifacts", lambda key=key, files=files: backend.artifacts(ids[key], files))
                self._guard(backend, "closing its run", lambda key=key: backend.close(ids[key], self.finished))

    def _artifacts(self, key: str) -> list[pathlib.Path]:
        member = self.run_dir / "members" / key if key else self.run_dir
        names = ["config.json", "manifest.json", "chunks.jsonl"]
        files = [member / n for n in names if (member / n).is_file()]
        files += sorted(member.glob("eval/*/report.*"))
        return files
