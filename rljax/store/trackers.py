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

A tracker never holds up or stops training. Each tracker's calls run in order on a thread of its
own: the start of training waits at most :data:`START_TIMEOUT_S` seconds (``RunOptions.tracker_timeout_s``)
for the trackers to start their runs, then goes on; a tracker still starting (a server that does not
answer, W&B without a network) goes on starting in the background, and the rows logged meanwhile are
queued and sent once it has started. A tracker that fails (network down, disk full, a bad URI, a
start that gives up after its own retries) warns once, naming the tracker and the error, and is
dropped for the rest of the run; so is one that has still not started ``tracker_timeout_s`` after
training ended, or not sent what it was given :data:`CLOSE_TIMEOUT_S` after. The retry warnings
urllib3 logs for a tracker's thread are left out (the one warning names the final error). A W&B
run's start gives up after :attr:`WandbBackend.INIT_TIMEOUT_S`, since W&B's service holds the
process's exit until it has. ``metrics.jsonl`` and ``tb/`` are written by the training thread
whatever the trackers do.

Reading a local MLflow file store afterwards (``mlflow ui --backend-store-uri ./mlruns``,
``mlflow.MlflowClient("file:///path")``) needs ``MLFLOW_ALLOW_FILE_STORE=true`` in the environment:
MLflow 3 refuses file stores without it (rljax sets it for the process that trains, when it was
asked for one).
"""

from __future__ import annotations

import json
import logging
import math
import os
import pathlib
import queue
import threading
import time
import urllib.parse
import warnings
from collections.abc import Mapping
from typing import Any, Protocol

__all__ = ["Backend", "WandbBackend", "MlflowBackend", "Trackers", "backends", "check_mlflow_uri", "TRACKERS_FILE",
           "START_TIMEOUT_S", "CLOSE_TIMEOUT_S"]

TRACKERS_FILE = "trackers.json"
"""``RUN_DIR/trackers.json``: each tracker's run id per member, kept so a resume continues them."""

START_TIMEOUT_S = 5.0
"""The default of ``RunOptions.tracker_timeout_s``: how long the start of training waits for the
trackers to start their runs (they go on starting in the background after it), and how long the end of
a run waits for a tracker that has not started yet."""

CLOSE_TIMEOUT_S = 60.0
"""How long the end of a run waits for a started tracker to send what it was given (rows, artifacts)
and close its run."""

_THREAD_PREFIX = "rljax-tracker"
_CHATTY_LOGGERS = ("urllib3.connectionpool",)


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
    set, else online with credentials and offline without. A run's start gives up after
    :attr:`INIT_TIMEOUT_S` seconds (``WANDB_INIT_TIMEOUT`` when set; W&B's own default is 90 s):
    W&B's service waits for a start in progress before the process can exit."""

    name = "W&B"
    INIT_TIMEOUT_S = 30.0

    def __init__(self, project: str, directory: pathlib.Path):
        import wandb

        self.wandb, self.project, self.directory = wandb, project, directory
        self.mode = os.environ.get("WANDB_MODE") or ("online" if _wandb_credentials() else "offline")
        self.runs: dict[str, Any] = {}

    def open(self, run_id, name, group, config, tags):
        run = self.wandb.init(project=self.project, dir=str(self.directory), mode=self.mode, id=run_id,
                              resume="allow", name=name, group=group, config=dict(config),
                              tags=[f"{k}:{v}"[:64] for k, v in tags.items()], reinit="create_new",
                              settings=self.wandb.Settings(silent=True, console="off", **self._timeout()))
        run.define_metric("env_steps")
        run.define_metric("*", step_metric="env_steps")
        self.runs[run.id] = run
        return run.id

    def _timeout(self) -> dict[str, float]:
        """W&B's ``init_timeout`` setting, unless the environment sets it (``WANDB_INIT_TIMEOUT``)."""
        return {} if os.environ.get("WANDB_INIT_TIMEOUT") else {"init_timeout": self.INIT_TIMEOUT_S}

    def log(self, run_id, rows):
        run = self.runs[run_id]
        for row in rows:
            run.log(row)

    def artifacts(self, run_id, paths):
        # Files in the run's files directory are uploaded when it finishes (or by `wandb sync`).
        # Copied there rather than passed to run.save, which prints "Symlinked 1 file into the W&B
        # run directory ..." once per call whatever the run's settings say.
        import shutil

        files = pathlib.Path(self.runs[run_id].dir)
        for path in paths:
            path = pathlib.Path(path)
            try:
                relative = path.resolve().relative_to(self.directory.resolve())
            except ValueError:
                relative = pathlib.Path(path.name)
            (files / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, files / relative)

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
        self.experiment = experiment
        self.experiment_id: str | None = None  # looked up by the first open (it reaches the server)

    def open(self, run_id, name, group, config, tags):
        from mlflow.entities import Param

        tags = {**tags, **({"group": group} if group else {})}
        if run_id is None:
            if self.experiment_id is None:
                found = self.client.get_experiment_by_name(self.experiment)
                self.experiment_id = found.experiment_id if found else self.client.create_experiment(self.experiment)
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
    """The trackers asked for, set up without reaching them (that is :meth:`Trackers.start`'s, on
    their own threads). A missing package raises ``ImportError`` naming the extra to install; a
    tracker whose set-up fails otherwise warns once and is left out."""
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


class _QuietTrackerThreads(logging.Filter):
    """Leaves out the records a tracker's thread logs (urllib3's "Retrying ..." per attempt), keeping
    each thread's last one: the tracker's one warning names it."""

    def __init__(self) -> None:
        super().__init__()
        self.last: dict[str, str] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        """False (left out) for a record of a tracker's thread, whose message is kept as its last."""
        if not record.threadName.startswith(_THREAD_PREFIX):
            return True
        self.last[record.threadName] = record.getMessage()
        return False


_QUIET = _QuietTrackerThreads()


def _quiet_tracker_threads() -> None:
    """Installs :class:`_QuietTrackerThreads` on urllib3's logger (once per process; it concerns only
    records from the trackers' own threads, which may outlive a run that gave up on them)."""
    for name in _CHATTY_LOGGERS:
        logger = logging.getLogger(name)
        if _QUIET not in logger.filters:
            logger.addFilter(_QUIET)


class _Worker:
    """One tracker's calls, made in the order given on a daemon thread of its own, so that a tracker
    that is slow or cannot be reached never holds up training.

    After the first call that raises, later calls are skipped; :attr:`failure` says what failed.
    """

    def __init__(self, backend: Backend):
        self.backend = backend
        self.started = threading.Event()  # its start finished (opened its runs, or failed)
        self.failure: str | None = None
        self.dropped = False  # warned about and given up on: the calls still queued are skipped
        self._tasks: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, name=f"{_THREAD_PREFIX} {backend.name}", daemon=True)
        self.thread.start()

    def submit(self, what: str, call: Any) -> None:
        """Queues ``call()``; ``what`` names it in the warning should it fail."""
        self._tasks.put((what, call))

    def finish(self, timeout: float) -> bool:
        """Ends the thread once the queued calls are made; whether it ended within ``timeout`` seconds."""
        self._tasks.put(None)
        self.thread.join(timeout)
        return not self.thread.is_alive()

    def _run(self) -> None:
        while (task := self._tasks.get()) is not None:
            what, call = task
            if self.failure is not None or self.dropped:
                continue
            try:
                call()
            except Exception as err:  # noqa: BLE001 - a tracker must never stop training
                self.failure = f"{what} ({type(err).__name__}: {err})"


class Trackers:
    """The boundary hook that logs to external trackers (see the module docstring).

    Every call to a tracker runs on that tracker's own thread (:class:`_Worker`); the training
    thread only queues them, except that :meth:`start` waits up to ``start_timeout_s`` for the
    trackers to start and :meth:`close` waits for them to finish (bounded, see the module docstring).

    Args:
        backends: the trackers (:class:`WandbBackend`, :class:`MlflowBackend`).
        run_dir: the run (or sweep) directory: ``trackers.json`` and the artifacts.
        program: the run's program (members' names, configs, seeds; each tracker run is tagged
            with its member's config hash, algorithm and seed when it starts).
        start_timeout_s: how long :meth:`start` waits for the trackers to start their runs, and
            :meth:`close` for one that has not started yet (:data:`START_TIMEOUT_S`).
        close_timeout_s: how long :meth:`close` waits for a started tracker to send what it was
            given and close its run (:data:`CLOSE_TIMEOUT_S`).
        stream: where the note about a tracker still starting goes; None: no note.
    """

    def __init__(self, backends: list[Backend], run_dir: str | os.PathLike, program: Any, *,
                 start_timeout_s: float = START_TIMEOUT_S, close_timeout_s: float = CLOSE_TIMEOUT_S,
                 stream: Any = None):
        self.backends = list(backends)
        self.run_dir = pathlib.Path(run_dir)
        self.program = program
        self.start_timeout_s, self.close_timeout_s = float(start_timeout_s), float(close_timeout_s)
        self.stream = stream
        self.ids: dict[str, dict[str, str]] = {}
        self.finished = False
        self._workers: list[_Worker] = []
        self._file_lock = threading.Lock()

    def _members(self) -> list[tuple[str, str, Any]]:
        """``(key, tracker run name, config)`` per member."""
        base = self.run_dir.name
        if not self.program.isolated:
            return [("", base, self.program.configs[0])]
        return [(n, f"{base}/{n}", c) for n, c in zip(self.program.names, self.program.configs)]

    def start(self, run: Any) -> None:
        """Starts (or, on a resume, continues) each member's tracker run, each tracker on its own
        thread, and waits up to ``start_timeout_s`` for them; a tracker still starting then goes on in
        the background (its ids reach ``trackers.json`` once it has started)."""
        from rljax.store.tracking import config_hash, config_to_dict

        _quiet_tracker_threads()
        path = self.run_dir / TRACKERS_FILE
        saved = json.loads(path.read_text()) if path.exists() else {}
        group = self.run_dir.name if self.program.isolated else None
        members = [(key, name, config_to_dict(config),
                    {"rljax/config_hash": config_hash(config), "rljax/algorithm": type(config).__name__,
                     "rljax/run_dir": str(self.run_dir), "rljax/seed": str(seed)})
                   for (key, name, config), seed in zip(self._members(), self.program.seeds)]
        for backend in self.backends:
            worker = _Worker(backend)
            self._workers.append(worker)
            ids = self.ids[backend.name] = dict(saved.get(backend.name, {}))
            worker.submit("starting its run", lambda backend=backend, ids=ids, worker=worker:
                          self._open(backend, ids, group, members, worker))
        deadline = time.monotonic() + self.start_timeout_s
        late = [w.backend.name for w in self._workers if not w.started.wait(max(0.0, deadline - time.monotonic()))]
        self._report()
        if late and self.stream is not None:
            print(f"note: {' and '.join(late)} had not started after {self.start_timeout_s:g} s; training goes on, "
                  f"and the rows are sent once {'they have' if len(late) > 1 else 'it has'} started "
                  f"(metrics.jsonl is written meanwhile)", file=self.stream, flush=True)

    def _open(self, backend: Backend, ids: dict[str, str], group: str | None,
              members: list[tuple[str, str, dict[str, Any], dict[str, str]]], worker: _Worker) -> None:
        """On ``backend``'s thread: opens each member's tracker run and saves the ids. A tracker given up
        on meanwhile (:meth:`close`) saves nothing: the run directory is no longer this run's to write."""
        try:
            for key, name, config, tags in members:
                if worker.dropped:
                    return
                ids[key] = backend.open(ids.get(key), name, group, config, tags)
            if not worker.dropped:
                self._save_ids(backend.name, ids)
        finally:
            worker.started.set()

    def _save_ids(self, name: str, ids: dict[str, str]) -> None:
        """Writes ``name``'s ids into ``trackers.json`` (atomically; the others' entries are kept)."""
        path = self.run_dir / TRACKERS_FILE
        with self._file_lock:
            saved = json.loads(path.read_text()) if path.exists() else {}
            saved[name] = dict(ids)
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(json.dumps(saved, indent=2, sort_keys=True) + "\n")
            os.replace(tmp, path)

    def _live(self) -> list[_Worker]:
        return [w for w in self._workers if not w.dropped]

    def _report(self) -> None:
        """Warns once for each tracker that failed since the last look, and drops it."""
        for worker in self._live():
            if worker.failure is not None:
                self._drop(worker, f"{worker.backend.name} failed while {worker.failure}; training goes on without "
                                   f"it, and metrics.jsonl stays complete")

    def _drop(self, worker: _Worker, message: str) -> None:
        """Gives up on ``worker``'s tracker (its queued calls are skipped) with one warning."""
        worker.dropped = True
        if worker.backend in self.backends:
            self.backends.remove(worker.backend)
        warnings.warn(message, stacklevel=4)

    def record(self, run: Any, chunk_index: int, rows: list[dict[str, Any]]) -> None:
        """Queues each member's ``metrics.jsonl`` rows of this chunk for every tracker."""
        from rljax.store.tracking import boundary_line

        self._report()
        updates = getattr(run, "update_rows", None) or [None] * len(rows)
        lines = [[_numbers(r) for r in [*(u or [])[:-1], boundary_line(row, u)]] for row, u in zip(rows, updates)]
        for worker in self._live():
            backend, ids = worker.backend, self.ids[worker.backend.name]
            for (key, _, _), member_lines in zip(self._members(), lines):
                worker.submit("logging metrics", lambda backend=backend, ids=ids, key=key, ml=member_lines:
                              backend.log(ids[key], ml))

    def boundary(self, run: Any, chunk_index: int, rows: list[dict[str, Any]], last: bool) -> None:
        if last:
            self.finished = True

    def close(self, run: Any = None) -> None:
        """Logs the run's files as artifacts, ends each tracker run (finished or stopped) and waits
        for every tracker to finish, within the bounds of the module docstring."""
        finished = self.finished
        for worker in self._live():
            backend, ids = worker.backend, self.ids[worker.backend.name]
            for key, _, _ in self._members():
                files = self._artifacts(key)
                worker.submit("saving artifacts", lambda backend=backend, ids=ids, key=key, files=files:
                              backend.artifacts(ids[key], files) if key in ids else None)
                worker.submit("closing its run", lambda backend=backend, ids=ids, key=key:
                              backend.close(ids[key], finished) if key in ids else None)
        deadline = {id(w): time.monotonic() + (self.close_timeout_s if w.started.is_set() else self.start_timeout_s)
                    for w in self._live()}
        for worker in self._live():
            started = worker.started.is_set()
            if worker.finish(max(0.0, deadline[id(worker)] - time.monotonic())) or worker.failure is not None:
                continue
            what = (f"sent its rows and closed its run {self.close_timeout_s:g} s" if started else
                    f"started its run {self.start_timeout_s:g} s")
            last = _QUIET.last.get(worker.thread.name)
            self._drop(worker, f"{worker.backend.name} had still not {what} after training ended: dropped (its "
                               f"tracker run may lack the last rows and files); metrics.jsonl and tb/ are complete"
                               + (f"; the last thing it logged: {last}" if last else ""))
        self._report()

    def _artifacts(self, key: str) -> list[pathlib.Path]:
        member = self.run_dir / "members" / key if key else self.run_dir
        names = ["config.json", "manifest.json", "chunks.jsonl"]
        files = [member / n for n in names if (member / n).is_file()]
        files += sorted(member.glob("eval/*/report.*"))
        return files
