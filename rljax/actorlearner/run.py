"""A run of the actor-learner path with a run directory, as the JAX path keeps one.

:func:`run_host` wraps :func:`~rljax.actorlearner.learner.train_host` with what a run of
:func:`rljax.train` has:

- ``config.json`` and ``manifest.json`` (the algorithm, the run options and the layout under
  ``host``) before the first rollout; one row per update in ``metrics.jsonl`` and tensorboard, one
  per chunk of ``updates_per_chunk`` updates in ``chunks.jsonl`` with a progress line
  (:class:`~rljax.store.tracking.Tracker`);
- checkpoints (:class:`~rljax.store.checkpoint.Checkpointer`: Orbax, checksummed) of the learner's
  params and optimiser state with the update count, every ``checkpoint_every`` chunks (0: every
  ``checkpoint_interval_s`` seconds), after the last update, when SIGTERM/SIGINT stops the run
  (:class:`~rljax.training.signals.PreemptionGuard`: the update in flight finishes first), and when
  an actor gives up (its envs failed past ``max_env_restarts``), before the error ends the run;
- ``resume``: the newest checkpoint that restores; rollout numbers, the actors' and the learner's
  keys and the env seeds go on from its update count, and the saved layout (actors, policy lag,
  queue) is kept. With one actor whose envs can save their state (a synchronous ``gymnasium/``
  batch: ``get_state``), every checkpoint also holds the envs' state, the observations to act on
  and the episodes in flight after the rollout it learned from, and a resume continues them: with
  ``max_policy_lag = 0`` the resumed run is the same bits as one never stopped. Other envs (servers,
  EnvPool, worker processes) keep their state outside the run, so the episodes they were in start
  over. Rows logged after that checkpoint move to ``*.superseded.jsonl``;
- W&B and MLflow (``wandb``, ``mlflow``: :mod:`rljax.store.trackers`) get the ``metrics.jsonl`` rows
  (one per update, or per ``log_every`` updates);
- the stall watchdog (:class:`~rljax.training.hooks.watchdog.StallWatchdog`): a chunk that does not
  finish in time gets one warning and a report with every thread's stack, the actors' included;
- ``status.json`` for ``rljax status`` and ``rljax stop``'s request, taken at a chunk's end like a
  signal (:class:`~rljax.training.hooks.status.RunStatus`, as the JAX path writes and takes them);
- the run directory lock, and no directory left behind by a run that fails to start.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import pathlib
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from rljax.actorlearner.engine import EnvSnapshot
from rljax.actorlearner.learner import HostOptions, HostResult, fetched_rows, num_updates, steps_per_update, train_host
from rljax.agents.impala import IMPALAConfig
from rljax.agents.ppo import PPOConfig
from rljax.env import is_discrete
from rljax.host.base import HostEnv, HostSpec
from rljax.runtime import distributed
from rljax.training.hooks.watchdog import StallWatchdog
from rljax.training.options import RunOptions, auto_log_every

SCALING_LOG = "scaling.jsonl"
"""The autoscaling decisions of a host run, one JSON line each (:mod:`rljax.actorlearner.autoscale`)."""

__all__ = ["HOST_SAVED_FIELDS", "SCALING_LOG", "done_line", "final_return", "group_rows", "no_videos_while_training",
           "run_host", "saved_host", "space_json", "updates_per_chunk"]

HOST_SAVED_FIELDS = ("num_actors", "max_policy_lag", "queue_size", "rollout_timeout_s", "max_env_restarts",
                     "restart_backoff_s", "min_actors", "max_actors", "scale_window", "apex_epsilon", "apex_alpha",
                     "initial_priority", "replay", "frames_per_item")
"""The :class:`HostOptions` a run records (``host`` in its manifest and checkpoints) and a resume keeps."""

STATE_LAYOUT_FIELDS = ("replay",)
"""The :class:`HostOptions` that shape the learner's saved state: a resume may not change them (a
replay in host memory resumed with another ``frames_per_item`` has its frame ring laid out anew)."""


def updates_per_chunk(config: PPOConfig | IMPALAConfig) -> int:
    """Updates per logged chunk: ``config.updates_per_chunk``, or (0) a tenth of the run's updates."""
    return config.updates_per_chunk or max(1, math.ceil(num_updates(config) / 10))


def no_videos_while_training(env: str, video_interval: int) -> str:
    """The refusal of ``video_interval`` for a run on the host envs ``env``, saying what to use instead."""
    return (f"video_interval={video_interval}: a run on host envs ({env}) records no videos while it trains; "
            f"record the greedy policy afterwards with `rljax eval RUN_DIR --video FILE.gif` (Gymnasium envs with "
            f"an rgb_array render mode)")


def run_host(config: PPOConfig | IMPALAConfig, options: RunOptions = RunOptions(),
             host: HostOptions | None = None, make_env: Callable[[int], HostEnv] | None = None) -> HostResult:
    """Trains ``config`` on the host envs ``config.env`` names (``gymnasium/<id>``, ``server:HOST:PORT``)
    with a run directory (see the module docstring).

    Args:
        config: a :class:`~rljax.agents.ppo.PPOConfig` or :class:`~rljax.agents.impala.IMPALAConfig`.
        options: the run options; used here: ``run_dir`` (None: nothing written), ``resume``,
            ``checkpoint_every``, ``checkpoint_interval_s``, ``keep_checkpoints``, ``checkpoints``,
            ``tensorboard``, ``log_every`` (0: one row per update unless a chunk has more than
            :data:`~rljax.training.options.ROW_BUDGET`), ``wandb``, ``mlflow``, ``tracker_timeout_s``,
            ``quiet``, ``handle_signals``, and the stall watchdog's ``stall_factor``, ``stall_first_chunk_s``
            and ``stall_min_s`` (:mod:`rljax.training.hooks.watchdog`: a chunk of updates that does
            not finish in time gets one warning and ``RUN_DIR/stall-*.txt`` with every thread's
            stack, the actors' included).
        host: the layout (:class:`~rljax.actorlearner.learner.HostOptions`); None: the saved one on
            a resume (:func:`saved_host`), else the defaults.
        make_env: ``make_env(actor) -> HostEnv`` (default: :func:`rljax.host.sources.make_host_env`
            of ``config.env`` with ``config.num_envs`` envs).

    Returns:
        The :class:`~rljax.actorlearner.learner.HostResult`; ``preempted`` names the signal that
        stopped the run after its checkpoint, if one did.
    """
    from rljax.store.rundir import removed_if_start_fails
    from rljax.store.runlock import RunLock
    from rljax.training.signals import PreemptionGuard

    run_dir = options.run_dir
    if options.video_interval:
        raise ValueError(no_videos_while_training(config.env, options.video_interval))
    _refuse_compiled_only(config, options.resume)
    if options.resume and (run_dir is None or not pathlib.Path(run_dir).is_dir()):
        raise FileNotFoundError(f"{run_dir} does not exist; nothing to resume")
    servers = None
    if make_env is None:
        servers, make_env = _env_source(config)
    leader, several = distributed.is_leader(), distributed.process_count() > 1
    with contextlib.ExitStack() as stack:
        if hasattr(servers, "wait_for"):
            stack.callback(servers.close)
        if run_dir is not None and leader:  # several processes: the leader alone writes the run directory
            stack.enter_context(removed_if_start_fails(None if options.resume else run_dir))
            stack.enter_context(RunLock(run_dir))
        # Several processes stop after the same update: a signal waits for the update's agreement.
        guard = stack.enter_context(PreemptionGuard(options.handle_signals, deferred=several,
                                                    announce=not options.quiet and leader))
        if host is None:
            host = saved_host(run_dir) if options.resume else HostOptions()
        if hasattr(servers, "wait_for"):  # the run starts with --num-actors workers (--rollout-timeout to come)
            if not options.quiet:
                print(f"waiting for {host.num_actors} rollout worker(s) at {servers.address[0]}:{servers.address[1]} "
                      f"(rljax env-server ENV --num-envs {config.num_envs} --connect "
                      f"{servers.address[0]}:{servers.address[1]})", flush=True)
            for a, address in enumerate(servers.wait_for(host.num_actors, host.rollout_timeout_s)):
                servers.bind(a, address)
        if servers is not None:
            host = dataclasses.replace(host, num_actors=len(servers.bound))
        session = _Session(config, options, host, guard)
        stack.callback(session.close)

        def make_and_note(actor: int) -> HostEnv:  # the checkpoints record the envs' spaces (rljax.load reads them)
            env = make_env(actor)
            session.spec = session.spec or env.spec
            return env
        try:
            return train_host(config, make_and_note, host, restore=session.begin, on_update=session.after_update,
                              snapshots=options.checkpoints and run_dir is not None, on_event=session.scaled,
                              servers=servers)
        except Exception as err:
            if several:  # a collective failed because a peer died: say so
                distributed.raise_if_peer_failure(err)
            raise


COMPILED_ONLY_FIELDS = {
    "env_kwargs": "host envs are made from their name alone: register a Gymnasium id with those arguments, or "
                  "pass run_host(make_env=...) from Python",
    "env_params": "host envs have no JAX env params to override",
    "eval_interval": "evaluate the saved policy on host envs with rljax eval RUN_DIR or rljax.policy.evaluate",
    "on_nonfinite": "a host run stops on NaN/inf (a checkpoint refuses them); only 'stop' applies",
    "randomize": "rljax randomises JAX envs only: randomise inside the simulator",
}
"""Config fields that act on the compiled (JAX-env) loop only, and what to do instead on host envs."""


def _refuse_compiled_only(config: Any, resume: bool) -> None:
    """A ``ValueError`` naming each :data:`COMPILED_ONLY_FIELDS` field ``config`` sets to other than its
    default: the actor-learner path does not act on them, and a run must not ignore them silently. A
    resume of a run that recorded them (made before they were refused) is warned: a resume may not
    change them, and the run goes on as it began, without them."""
    from rljax.store.rundir import RESUMABLE_FIELDS

    defaults = {f.name: f.default for f in dataclasses.fields(config)}
    unused = {name: f"{name}={getattr(config, name)!r}: {why}" for name, why in COMPILED_ONLY_FIELDS.items()
              if name in defaults and getattr(config, name) != defaults[name]}
    if resume:
        for name in [n for n in unused if n not in RESUMABLE_FIELDS]:
            warnings.warn(f"{config.env}: the actor-learner path does not act on {unused.pop(name)}; this run "
                          f"recorded it and goes on without it, as it began", stacklevel=3)
    if unused:
        changeable = [f"--{n.replace('_', '-')} {defaults[n]}" for n in unused if resume and n in RESUMABLE_FIELDS]
        raise ValueError(f"{config.env} trains on the actor-learner path, which does not act on these fields: "
                         f"{'; '.join(unused.values())}"
                         + (f" (a resume may set {', '.join(changeable)})" if changeable else ""))


def _env_source(config: Any) -> tuple[Any, Callable[[int], HostEnv]]:
    """``(the pool the actors follow or None, make_env)`` of ``config.env``: a pool of env servers (one actor
    per server, following it while training), a listener for rollout workers (one actor per worker that
    connects: central inference, :mod:`rljax.host.listen`), or one source every actor makes a batch of."""
    from rljax.host.listen import WorkerListener, is_listen
    from rljax.host.pool import ServerPool, is_server_pool
    from rljax.host.sources import make_host_env

    if is_server_pool(config.env):
        servers = ServerPool(config.env)
        for a, address in enumerate(servers.addresses()):
            servers.bind(a, address)
        return servers, lambda actor: make_host_env(servers.env_name(actor), config.num_envs)
    if is_listen(config.env):
        listener = WorkerListener(config.env, num_envs=config.num_envs)
        return listener, lambda actor: listener.make(listener.bound[actor], config.num_envs)
    return None, lambda actor: make_host_env(config.env, config.num_envs)


def saved_host(run_dir: str | pathlib.Path, base: HostOptions = HostOptions()) -> HostOptions:
    """``base`` with the layout a run directory recorded (its newest checkpoint's, else its
    manifest's :data:`HOST_SAVED_FIELDS`)."""
    from rljax.store.rundir import newest_checkpoint_meta, read_json

    newest = newest_checkpoint_meta(run_dir)
    manifest = pathlib.Path(run_dir) / "manifest.json"
    saved = newest[1].get("host") if newest else (read_json(manifest).get("host") if manifest.exists() else None)
    return dataclasses.replace(base, **{k: v for k, v in (saved or {}).items() if k in HOST_SAVED_FIELDS})


def _ring_adapter(template: dict[str, Any]) -> Callable[[list[np.ndarray], dict], list[np.ndarray]] | None:
    """A restore's ``adapt`` for a replay in host memory whose frame ring was saved at another size
    (another ``frames_per_item``): it lays the saved ring out as the template's
    (:func:`~rljax.actorlearner.hostreplay.relaid_ring`). None when the state has no frame ring."""
    import jax

    from rljax.store.checkpoint import LayoutError

    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(template)[0]]
    if "['opt_state']['store']" not in paths:
        return None
    index = {path: i for i, path in enumerate(paths)}
    frames = template["opt_state"]["store"].shape[0]

    def adapt(leaves: list[np.ndarray], meta: dict) -> list[np.ndarray]:
        from rljax.actorlearner.hostreplay import relaid_ring

        store = index["['opt_state']['store']"]
        if len(leaves) != len(paths) or leaves[store].shape[0] == frames:
            return leaves
        saved = {"store": leaves[store], "counters": leaves[index["['opt_state']['counters']"]],
                 "fields": {"oldest_frame": leaves[index["['opt_state']['fields']['oldest_frame']"]]}}
        try:
            ring = relaid_ring(saved, frames)
        except ValueError as err:
            saved_as = (meta.get("host") or {}).get("frames_per_item")
            raise LayoutError(f"cannot lay the replay saved with frames_per_item={saved_as!r} out in a ring of "
                              f"{frames:,} frames: {err}") from err
        return [ring if i == store else leaf for i, leaf in enumerate(leaves)]

    return adapt


class _Session:
    """The run directory's side of a host run: its tracker and checkpointer, opened by :meth:`begin`
    (once the learner's fresh state exists), fed by :meth:`after_update`."""

    def __init__(self, config: Any, options: RunOptions, host: HostOptions, guard: Any):
        self.config, self.options, self.host, self.guard = config, options, host, guard
        self.chunk, self.num_updates, self.per_update = updates_per_chunk(config), num_updates(config), \
            steps_per_update(config)
        self.log_every = options.log_every or auto_log_every(self.chunk)
        self.plan = {"updates_per_chunk": self.chunk, "num_updates": self.num_updates,
                     "env_steps_per_update": self.per_update, "log_every": self.log_every,
                     "processes": distributed.process_count()}
        self.leader = distributed.is_leader()  # several processes: the others write nothing
        self.phase = "waiting for the first update (compiling the policy and the update, the actors' first rollouts)"
        self.watchdog = StallWatchdog(options.run_dir if self.leader else None, options.stall_factor, options.stall_first_chunk_s,
                                      options.stall_min_s)  # reads .plan and .phase of this session
        self.layout = {k: getattr(host, k) for k in HOST_SAVED_FIELDS}  # recorded in the manifest and checkpoints
        self.tracker = self.checkpointer = self.trackers = self.unsaved = self.status = None
        self.spec: HostSpec | None = None  # the envs' (set as the first batch is made)
        self.last_saved: int | None = None  # env steps of the newest checkpoint this session saved (RunStatus reads it)
        self.lines: list[dict[str, Any]] = []  # the chunk's rows so far, one per update
        self.rows: list[dict[str, Any]] = []  # the last chunk's metrics.jsonl rows, one per log_every updates
        self.chunk_index, self.wall0, self.t0, self.chunk_wall = 0, 0.0, time.perf_counter(), 0.0
        self.last_save = time.monotonic()

    def begin(self, params: Any, opt_state: Any) -> tuple[Any, Any, int] | None:
        """Restores the newest checkpoint on a resume, then opens the run directory's files."""
        from rljax.store.checkpoint import Checkpointer, NoCheckpointError
        from rljax.store.rundir import check_resume_config

        options, restored, meta = self.options, None, None
        if options.run_dir is not None and (options.checkpoints or options.resume):
            # Several processes: every one takes part in saves and restores, the leader reads and writes.
            self.checkpointer = Checkpointer(options.run_dir, keep=options.keep_checkpoints, follower=not self.leader)
        if options.resume and self.checkpointer.steps():
            self._check_resumable()
            try:
                template = {"params": params, "opt_state": opt_state}
                state, meta, _ = self.checkpointer.restore(template, adapt=_ring_adapter(template))
            except NoCheckpointError as err:
                # Checkpoints the same config and layout wrote, none of which restores: never start over
                # (that would write over the run); say so.
                raise NoCheckpointError(f"{options.run_dir} has checkpoints {self.checkpointer.steps()}, but none "
                                        f"restores into this run's state ({err}); nothing was changed") from err
            if meta is not None:
                check_resume_config(meta["config"], self.config)
                self._check_same_processes(meta)
                restored = (state["params"], state["opt_state"], int(meta["updates"]), _own_envs(meta.get("envs")))
                self.chunk_index, self.wall0 = int(meta["chunk_index"]) + 1, float(meta["wall_time_s"])
        if options.run_dir is not None and self.leader:
            self._open_tracker(meta)
            self._open_status(restored[2] if restored is not None else 0)
            self._keep_decisions(restored[2] if restored is not None else 0)
        self.t0, self.chunk_wall = time.perf_counter(), self.wall0
        self.watchdog.start(self)
        if restored is not None and not options.quiet and self.leader:
            envs = ("the envs continue from their saved state" if restored[3] is not None and self.host.num_actors == 1
                    else "the episodes the envs were in start over")
            print(f"resuming from update {restored[2]:,} ({int(meta['env_steps']):,} env steps); {envs}", flush=True)
        return restored

    def _check_resumable(self) -> None:
        """Before restoring, the newest checkpoint's config and the layout fields that shape the
        learner's state (where the replay lives, its frame ring) must be this run's: else a
        :class:`~rljax.store.rundir.ConfigMismatchError` naming them (the checkpoints would not fit)."""
        from rljax.store.rundir import ConfigMismatchError, check_resume_config, newest_checkpoint_meta

        newest = newest_checkpoint_meta(self.options.run_dir)
        if newest is None:
            return
        meta = newest[1]
        check_resume_config(meta["config"], self.config)
        saved = {**{k: getattr(HostOptions(), k) for k in STATE_LAYOUT_FIELDS}, **(meta.get("host") or {})}
        differ = [f"{k} (saved {saved[k]!r}, now {self.layout[k]!r})" for k in STATE_LAYOUT_FIELDS
                  if saved[k] != self.layout[k]]
        frames = saved.get("frames_per_item", HostOptions().frames_per_item), self.layout["frames_per_item"]
        if self.layout["replay"] == "host" and (frames[0] == 0) != (frames[1] == 0):  # another positive ring: re-laid
            differ.append(f"frames_per_item (saved {frames[0]!r}, now {frames[1]!r}: 0 stores observations as they "
                          f"are, a positive value as frames)")
        if differ:
            raise ConfigMismatchError(f"cannot resume with another replay layout: {', '.join(differ)}; the checkpoints "
                                      f"hold the run's own (resume without those flags)")

    def _check_same_processes(self, meta: dict[str, Any]) -> None:
        """A resume learns from as many env steps an update as the run did (the update count is what
        a checkpoint and the rollouts' keys and seeds go on from); else a :class:`ConfigMismatchError`
        before anything is written: a run of P processes resumes on P processes."""
        from rljax.store.rundir import ConfigMismatchError

        updates, steps = int(meta["updates"]), int(meta["env_steps"])
        if updates and steps != updates * self.per_update:
            saved = steps // updates // self.config.env_steps_per_update
            now = distributed.process_count()
            raise ConfigMismatchError(
                f"cannot resume on {now} process(es) a run trained by {saved}: it learned from {steps // updates:,} "
                f"env steps an update (one rollout of num_envs x num_steps = {self.config.env_steps_per_update:,} "
                f"per process), this job would from {self.per_update:,}; resume it on {saved} process(es)"
                + (f" (rljax launch -n {saved} -- rljax resume ...)" if saved > 1 else " (rljax resume RUN_DIR)"))

    def _open_status(self, start: int) -> None:
        """``status.json`` from here on (``running``, compiling until the first update)."""
        import types

        from rljax.training.hooks.status import RunStatus

        plan = types.SimpleNamespace(updates_per_chunk=self.chunk, env_steps_per_update=self.per_update,
                                     total_env_steps=self.num_updates * self.per_update,
                                     num_chunks=math.ceil(self.num_updates / self.chunk))
        self.status_run = types.SimpleNamespace(plan=plan, start_chunk=self.chunk_index, config=self.config,
                                                start_env_steps=start * self.per_update, guard=self.guard)
        self.status = RunStatus(self.options.run_dir, self.watchdog, self)
        self.status.begin(self.status_run)

    def _open_tracker(self, meta: dict[str, Any] | None) -> None:
        from rljax.store.tracking import Tracker

        options = self.options
        extra = {"algorithm": type(self.config).__name__, "run_options": options.saved(), "host": self.layout,
                 "plan": self.plan}
        self.tracker = Tracker(options.run_dir, self.config, seed=self.config.seed, resume=options.resume,
                               tensorboard=options.tensorboard, quiet=options.quiet,
                               total_env_steps=self.num_updates * self.per_update,
                               manifest_extra=extra,
                               resume_env_steps=None if not options.resume else int(meta["env_steps"]) if meta else 0,
                               recovered_rows=(meta or {}).get("rows"), recovered_lines=(meta or {}).get("lines"))
        if options.wandb or options.mlflow:
            from rljax.store.trackers import Trackers, backends

            self.trackers = Trackers(backends(options.wandb, options.mlflow, options.run_dir), options.run_dir,
                                     _OneRun(self.config), start_timeout_s=options.tracker_timeout_s,
                                     stream=None if options.quiet else sys.stdout)
            self.trackers.start(None)

    def after_update(self, updates: int, params: Any, opt_state: Any, row: dict[str, Any] | None,
                     envs: EnvSnapshot | None) -> str | None:
        """Collects the update's row; at a chunk's end logs it and saves when due. Returns the signal's
        name once a requested stop has been saved. ``row`` None: the run fails after ``updates``
        updates (an actor gave up): the updates not yet saved are logged and saved first."""
        if row is None:
            if self.lines:
                self._end_chunk(params, opt_state, None, force=True)
            elif self.unsaved is not None:
                self._save(params, opt_state, self.unsaved, None)
            return None
        if self.status is not None and not self.lines and self.chunk_index == self.status_run.start_chunk:
            self.status.start(self.status_run)  # compiled: training
        self.lines.append({**row, "wall_time_s": self.wall0 + time.perf_counter() - self.t0})
        self.phase = f"learning: {updates:,} of {self.num_updates:,} updates done, waiting for the next rollout"
        last = updates >= self.num_updates
        self.guard.agree()  # several processes: any one's signal stops all of them after this update
        stop = self.guard.requested
        if not (last or stop or len(self.lines) >= self.chunk):
            return None
        self.guard.finishing = stop or last
        self._end_chunk(params, opt_state, envs, force=last or stop, last=last)
        return self.guard.signal_name if stop and not last else None

    def _keep_decisions(self, updates: int) -> None:
        """A resume drops the autoscaling decisions logged after the update it restored (they are made
        again, or not, by the continued run: the count starts over at ``num_actors``)."""
        path = pathlib.Path(self.options.run_dir) / SCALING_LOG
        if path.exists():
            kept = [line for line in path.read_text().splitlines() if line.strip() and
                    json.loads(line)["update"] <= updates]
            path.write_text("".join(line + "\n" for line in kept))

    def scaled(self, event: dict[str, Any]) -> None:
        """An autoscaling decision: a line in ``RUN_DIR/scaling.jsonl`` and, unless quiet, on stdout."""
        if not self.leader:
            return
        if self.options.run_dir is not None:
            with open(pathlib.Path(self.options.run_dir) / SCALING_LOG, "a") as f:
                f.write(json.dumps(event) + "\n")
        if not self.options.quiet:
            what = (f"could not add an actor ({event['failed']})" if "failed" in event
                    else f"{event['from']} -> {event['actors']} actors")
            print(f"autoscale after update {event['update']:,}: {what}: {event['reason']}", flush=True)

    def _end_chunk(self, params: Any, opt_state: Any, envs: EnvSnapshot | None, force: bool,
                   last: bool = False) -> None:
        """Logs the chunk of :attr:`lines` and saves it when due (or ``force``)."""
        self.lines = fetched_rows(self.lines)
        wall = self.lines[-1]["wall_time_s"]
        chunk_row = _chunk_row(self.lines, wall, self.chunk_wall, self.per_update)
        self.rows = group_rows(self.lines, self.log_every, self.chunk_wall, self.per_update)
        self.chunk_wall = wall
        if self.tracker is not None:
            self.tracker.log(chunk_row, self.rows)
            if self.trackers is not None:  # W&B / MLflow: the same metrics.jsonl rows
                self.trackers.record(_Rows([self.rows]), self.chunk_index, [chunk_row])
                self.trackers.finished = last
        elif not self.options.quiet and self.leader:
            from rljax.store.tracking import format_progress

            print(format_progress(chunk_row, self.num_updates * self.per_update), flush=True)
        self.unsaved = chunk_row
        self.watchdog.record(self, self.chunk_index, [chunk_row])
        if self.status is not None:  # and a pending `rljax stop` becomes a stop after the next update
            self.status.record(self.status_run, self.chunk_index, [chunk_row])
        if self.checkpointer is not None and self.options.checkpoints and (force or self._due()):
            self._save(params, opt_state, chunk_row, envs)
            if self.status is not None:
                self.status.boundary(self.status_run, self.chunk_index, [chunk_row], last)
        self.lines, self.chunk_index = [], self.chunk_index + 1

    def _due(self) -> bool:
        if self.options.checkpoint_every:
            return (self.chunk_index + 1) % self.options.checkpoint_every == 0
        return time.monotonic() - self.last_save >= self.options.checkpoint_interval_s

    def _save(self, params: Any, opt_state: Any, row: dict[str, Any], envs: EnvSnapshot | None) -> None:
        from rljax.store.tracking import boundary_line, config_to_dict, json_scalar

        meta = {"chunk_index": self.chunk_index, "env_steps": row["env_steps"], "updates": row["updates"],
                "wall_time_s": row["wall_time_s"], "algorithm": type(self.config).__name__,
                "config": config_to_dict(self.config), "run_options": self.options.saved(),
                "host": self.layout, "rows": [{k: json_scalar(v) for k, v in row.items()}],
                "lines": [{k: json_scalar(v) for k, v in boundary_line(row, self.rows).items()}]}
        if self.spec is not None:
            meta["spaces"] = {"observation_space": space_json(self.spec.observation_space),
                              "action_space": space_json(self.spec.action_space)}
        if envs is not None:  # several processes: every one's envs, in process order
            meta["envs"] = _encode(envs) if distributed.process_count() == 1 else \
                distributed.allgather_json(_encode(envs))
        self.checkpointer.save(int(row["env_steps"]), {"params": params, "opt_state": opt_state}, meta)
        self.last_save, self.unsaved, self.last_saved = time.monotonic(), None, int(row["env_steps"])

    def close(self) -> None:
        """Waits for the pending save and closes the files and tracker runs (idempotent)."""
        self.watchdog.close()
        if self.status is not None:  # finished, preempted or failed
            self.status.close(self.status_run)
            self.status = None
        if self.trackers is not None:
            self.trackers.close()
            self.trackers = None
        if self.checkpointer is not None:
            self.checkpointer.wait()
            self.checkpointer.close()
            self.checkpointer = None
        if self.tracker is not None:
            self.tracker.close()
            self.tracker = None


class _OneRun:
    """What :class:`rljax.store.trackers.Trackers` reads of a run's program: one member, not isolated."""

    isolated = False

    def __init__(self, config: Any):
        self.configs, self.names, self.seeds = [config], ["run"], [config.seed]


class _Rows:
    """What :meth:`rljax.store.trackers.Trackers.record` reads of a run: its chunk's per-update rows."""

    def __init__(self, update_rows: list[list[dict[str, Any]]]):
        self.update_rows = update_rows


def group_rows(lines: list[dict[str, Any]], log_every: int, start_wall_s: float,
               steps_per_update: int) -> list[dict[str, Any]]:
    """A chunk's ``metrics.jsonl`` rows from its updates' ``lines`` (the chunk began at
    ``start_wall_s``): the lines themselves with ``log_every = 1``, else one row per group of
    ``log_every`` consecutive updates (the last group may be shorter), each summarising its group as
    a chunk's row does (:func:`_chunk_row`)."""
    if log_every == 1:
        return lines
    rows = []
    for i in range(0, len(lines), log_every):
        group = lines[i:i + log_every]
        rows.append(_chunk_row(group, group[-1]["wall_time_s"], start_wall_s, steps_per_update))
        start_wall_s = group[-1]["wall_time_s"]
    return rows


def _chunk_row(lines: list[dict[str, Any]], wall_time_s: float, start_wall_s: float,
               steps_per_update: int) -> dict[str, Any]:
    """A chunk's row from its updates' rows: the last update's counters, episodes summed and their
    return and length averaged over them, env steps/s over the chunk (which began at
    ``start_wall_s``), the other numbers' means, the largest policy lag and p99, and the actor whose
    env steps were slowest (the largest median)."""
    last = lines[-1]
    episodes = sum(int(r["episodes"]) for r in lines)

    def per_episode(key: str) -> float | None:
        pairs = [(r[key], r["episodes"]) for r in lines if r.get(key) is not None]
        return sum(v * n for v, n in pairs) / episodes if episodes else None

    numbers = {k for r in lines for k, v in r.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    row = {}
    for k in sorted(numbers):
        values = [r[k] for r in lines if r.get(k) is not None]
        if values:  # math.fsum: exactly rounded, without numpy's per-call cost (a chunk has thousands of calls)
            row[k] = math.fsum(values) / len(values)
    del row["host/actor"]
    slowest = max(lines, key=lambda r: r["host/env_step_p50_ms"])
    row.update({"env_steps": int(last["env_steps"]), "updates": int(last["updates"]), "wall_time_s": wall_time_s,
                "episodes": episodes, "episode_return_mean": per_episode("episode_return_mean"),
                "episode_length_mean": per_episode("episode_length_mean"),
                "sps": len(lines) * steps_per_update / max(wall_time_s - start_wall_s, 1e-9),
                "host/policy_lag": max(r["host/policy_lag"] for r in lines),
                "host/env_step_p99_ms": max(r["host/env_step_p99_ms"] for r in lines),
                "host/slowest_actor": int(slowest["host/actor"]),
                "host/env_restarts": int(last["host/env_restarts"]),
                "host/lost_episodes": int(last["host/lost_episodes"])})
    if "host/actors" in last:  # the count now, and the chunk's changes
        row["host/actors"] = int(last["host/actors"])
    if "host/scale" in last:
        row["host/scale"] = int(sum(r.get("host/scale", 0) for r in lines))
    return row


def _encode(snapshot: EnvSnapshot) -> dict[str, str]:
    """An :class:`~rljax.actorlearner.engine.EnvSnapshot` as JSON for a checkpoint's meta (which the
    checkpointer checksums): each field base64 (arrays in ``.npy`` form)."""
    import base64
    import io

    def npy(x: np.ndarray) -> str:
        buf = io.BytesIO()
        np.save(buf, x, allow_pickle=False)
        return base64.b64encode(buf.getvalue()).decode()

    return {"env_state": base64.b64encode(snapshot.env_state).decode(), "obs": npy(snapshot.obs),
            "returns": npy(snapshot.returns), "lengths": npy(snapshot.lengths),
            "carry": [npy(x) for x in snapshot.carry], "seed": snapshot.seed, "env_restarts": snapshot.env_restarts}


def _own_envs(saved: dict[str, str] | list[dict[str, str]] | None) -> EnvSnapshot | None:
    """This process's envs of a checkpoint's meta (a list, one per process, from a run of several
    processes; None when the run had another number of processes: the episodes start over)."""
    if isinstance(saved, list):
        saved = saved[distributed.process_index()] if len(saved) == distributed.process_count() else None
    elif distributed.process_count() > 1:
        saved = None
    return _decode(saved)


def _decode(saved: dict[str, str] | None) -> EnvSnapshot | None:
    import base64
    import io

    if not saved:
        return None
    npy = lambda text: np.load(io.BytesIO(base64.b64decode(text)), allow_pickle=False)  # noqa: E731
    return EnvSnapshot(base64.b64decode(saved["env_state"]), npy(saved["obs"]), npy(saved["returns"]),
                       npy(saved["lengths"]), tuple(npy(x) for x in saved.get("carry", ())), saved.get("seed"),
                       int(saved.get("env_restarts", 0)))


def space_json(space: Any) -> dict[str, Any]:
    """A host env's :class:`rljax.env.Box` or :class:`rljax.env.Discrete` as a checkpoint's meta holds
    it (``spaces``, which :func:`rljax.policy.trained.space_from_json` reads back):
    ``{"kind": "discrete", "n", "dtype"}`` or ``{"kind": "box", "shape", "dtype", "low", "high"}``,
    each bound one number where it is the same everywhere (an image's 0..255), else a nested list of
    the shape; infinities as ``"inf"``/``"-inf"``."""
    dtype = np.dtype(space.dtype).name
    if is_discrete(space):
        return {"kind": "discrete", "n": int(space.n), "dtype": dtype}
    shape = [int(d) for d in space.shape]

    def bound(x: Any) -> Any:
        x = np.broadcast_to(np.asarray(x, np.float64), shape)
        value = x.reshape(-1)[0] if x.size and np.all(x == x.reshape(-1)[0]) else x
        return np.vectorize(lambda v: float(v) if np.isfinite(v) else ("inf" if v > 0 else "-inf"),
                            otypes=[object])(value).tolist()
    return {"kind": "box", "shape": shape, "dtype": dtype, "low": bound(space.low), "high": bound(space.high)}


def final_return(rows: list[dict[str, Any]]) -> tuple[float | None, int]:
    """The return a finished host run reports, from its per-update ``rows``: the mean over the
    episodes that ended in its last tenth of updates, reaching further back (to the most recent
    update where one ended) when none did there, as a run of long episodes (Pong's) and a short
    last chunk has it. Returns ``(mean return or None when no episode ended at all, how many of the
    last updates it covers)``."""
    if not rows:
        return None, 0
    count = max(1, len(rows) // 10)
    while count < len(rows) and not sum(int(r["episodes"]) for r in rows[-count:]):
        count += 1
    tail = rows[-count:]
    episodes = sum(int(r["episodes"]) for r in tail)
    if not episodes:
        return None, count
    return sum(r["episode_return_mean"] * r["episodes"] for r in tail if r["episodes"]) / episodes, count


def done_line(result: HostResult, config: PPOConfig | IMPALAConfig, run_dir: str | None) -> str:
    """The summary line of a finished host run: env steps, the return :func:`final_return` measures
    (``--`` when no episode ended), env steps/s, the policy lag, restarts and lost episodes."""
    rows = result.rows
    ret, count = final_return(rows)
    over = "the last update's episodes" if count == 1 else f"the episodes of the last {count} updates"
    text = f"return {ret:.2f} ({over})" if ret is not None else "return -- (no episode ended)"
    last = rows[-1] if rows else {}
    return (f"done: {result.updates * steps_per_update(config):,} env steps, {text}, "
            f"{last.get('sps', 0.0):,.0f} env steps/s, policy lag <= "
            f"{max((r['host/policy_lag'] for r in rows), default=0)}, env restarts {last.get('host/env_restarts', 0)}, "
            f"lost episodes {last.get('host/lost_episodes', 0)}" + (f"; run directory: {run_dir}" if run_dir else ""))
