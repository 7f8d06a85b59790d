"""Actors, a bounded rollout queue and versioned params: the machinery of the actor-learner path.

Rollout ``k`` (numbered as actors claim them from a shared :class:`Schedule`) is collected with
params of version ``>= k - max_policy_lag``, where version ``u`` is the params after ``u`` learner
updates: with ``max_policy_lag = 0`` and one actor, acting and learning strictly alternate (the
synchronous host loop, deterministic for deterministic envs); with ``max_policy_lag = 1`` an actor
collects rollout ``k + 1`` while the learner updates on rollout ``k``. A rollout carries the version
that acted, and the learner consumes rollouts in their order, so the lag it learns from is at most
``max_policy_lag`` whatever the number of actors.

Each :class:`Actor` is a thread that owns one batch of host envs. Per step it runs
``policy(params, obs, key, step) -> (action, log_prob)`` (jitted, on its device), steps the envs and
records a :class:`~rljax.core.rollout.Transition` row (``next_obs`` is the step's ``final_obs``,
``extras`` the behaviour log-probs). It times every env step (for p50/p99), the policy, and its
waits for params and for room in the queue, and sums finished episodes. Envs that fail (raise, or
hang past a server's timeout) are replaced by a :class:`RestartPolicy` with back-off; the episodes
in flight are dropped and counted, and the interrupted rollout is collected again. Repeated failure,
or any other exception in an actor, stops the run: :meth:`ActorPool.get` re-raises it on the
learner's thread, naming the actor.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from rljax.core.rollout import Transition
from rljax.host.base import HostEnv

__all__ = ["Actor", "ActorFailedError", "ActorPool", "EnvFailure", "EnvsGone", "EnvSnapshot", "Finisher",
           "HostAlgorithm", "ParamStore", "RestartPolicy", "Rollout", "RolloutTimeoutError", "Schedule", "close_envs",
           "computed"]


fold_in = jax.jit(jax.random.fold_in)
"""``jax.random.fold_in``, compiled: the same key, without the eager dispatch of its ops (tens of
microseconds a call, which matter once per update of one env step)."""


class ActorFailedError(RuntimeError):
    """An actor stopped the run: its envs failed past the restart budget, or it raised. The message
    names the actor, its envs and the last failure; the failure itself is the ``__cause__``."""


class RolloutTimeoutError(ActorFailedError):
    """The learner waited longer than its rollout timeout for the next rollout (actors or their envs
    stalled without failing)."""


class Schedule:
    """Hands out rollout numbers ``start .. total - 1`` to whichever actor asks first (thread-safe);
    a resumed run starts at the number of updates it had done. A number an actor gave back (its envs
    went away mid-rollout, :meth:`release`) is handed out again first."""

    def __init__(self, total: int, start: int = 0):
        self._next, self.total, self._lock = start, total, threading.Lock()
        self._released: list[int] = []
        self._out: set[int] = set()  # claimed, not yet delivered

    def claim(self) -> int | None:
        """The next rollout's number, or None when every rollout has been handed out."""
        import heapq

        with self._lock:
            if self._released:
                k = heapq.heappop(self._released)
            elif self._next >= self.total:
                return None
            else:
                k, self._next = self._next, self._next + 1
            self._out.add(k)
            return k

    def release(self, k: int) -> None:
        """Rollout ``k`` was claimed but will not be collected by its actor: another one collects it."""
        import heapq

        with self._lock:
            self._out.discard(k)
            heapq.heappush(self._released, k)

    def delivered(self, k: int) -> None:
        """Rollout ``k`` is in the queue."""
        with self._lock:
            self._out.discard(k)

    def finished(self) -> bool:
        """Every rollout handed out and delivered: nothing can come back to collect."""
        with self._lock:
            return self._next >= self.total and not self._released and not self._out


@dataclasses.dataclass(frozen=True)
class RestartPolicy:
    """What an actor does when its envs fail (an env that raised, a server that hung past its timeout
    or went away): make a new batch with ``remake()`` after a back-off of ``backoff_s * 2^(n-1)``
    (at most ``max_backoff_s``) for the n-th failure in a row, and give up (stopping the run) after
    ``max_failures`` failures in a row. A completed rollout resets the count."""

    remake: Callable[[], HostEnv]
    max_failures: int = 3
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0

    def delay(self, failures: int) -> float:
        return min(self.max_backoff_s, self.backoff_s * 2 ** (failures - 1))


class EnvsGone(RuntimeError):
    """An actor's envs failed more times in a row than its restart policy allows."""


class EnvFailure(Exception):
    """The envs raised while an actor stepped or reset them; ``episodes`` had ended in the partial rollout."""

    def __init__(self, cause: BaseException, episodes: int = 0):
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.cause, self.episodes = cause, episodes


@dataclasses.dataclass(frozen=True)
class HostAlgorithm:
    """An algorithm as the actor-learner path runs it (PPO and IMPALA: :mod:`rljax.actorlearner.learner`;
    the off-policy ones: :mod:`rljax.actorlearner.offpolicy`).

    Attributes:
        init: ``init(key, obs[1, *obs_shape]) -> (params, opt_state)``: the learner's fresh state,
            split in two (a checkpoint saves both; the actors act with ``params``).
        policy: jitted ``policy(params, obs[N], key, step, *rollout_args(k, actor)) -> (action[N], log_prob[N])``.
        update: jitted ``update(params, opt_state, inputs, key, counter(u), counter(num_updates))
            -> (params, opt_state, metrics)``: update ``u`` on ``inputs(rollout)``.
        inputs: what the update learns from of a :class:`Rollout` (default: its ``traj``).
        counter: the form the update gets its update numbers in (default: float32).
        rollout_args: the policy's extra arguments while it collects a rollout (:class:`Actor`); None for none.
        finisher: what an actor makes of each rollout (:class:`Finisher`); None for nothing.
        donates_params: whether ``update`` donates ``params`` (then what actors act with is copied
            when it is published; otherwise it is handed over as it is).
        host_opt_state: ``opt_state`` is left where ``update`` keeps it (a replay in host memory:
            numpy, with a prioritised replay's priorities on the device beside it), never put on the
            learner's device by the engine, and ``inputs`` reach ``update`` as they are (not put there either).
    """

    init: Callable[[Any, Any], tuple[Any, Any]]
    policy: Callable[..., Any]
    update: Callable[..., Any]
    inputs: Callable[[Any], Any] = lambda rollout: rollout.traj
    counter: Callable[[int], Any] = np.float32
    rollout_args: Callable[[int, int], tuple] | None = None
    finisher: "Finisher | None" = None
    donates_params: bool = True
    host_opt_state: bool = False


class ParamStore:
    """The newest params and their version, and with ``keep=2`` the version before; actors wait here for
    a version they may act with.

    The learner publishes an update's params as soon as it is dispatched, before they are computed.
    An actor that may lag takes the newest version already computed among those it may act with, so
    it acts while the learner's device computes the next one instead of waiting for it.
    """

    def __init__(self, params: Any, version: int = 0, keep: int = 1):
        if keep not in (1, 2):
            raise ValueError(f"keep={keep}: a store keeps the newest version (1) or the two newest (2)")
        self._versions: list[tuple[Any, int]] = [(params, version)]  # oldest first
        self._keep = keep
        self._cond = threading.Condition()

    @property
    def _version(self) -> int:
        return self._versions[-1][1]

    def publish(self, params: Any, version: int) -> None:
        with self._cond:
            self._versions = [*self._versions, (params, version)][-self._keep:]
            self._cond.notify_all()

    def wait_for(self, version: int, stop: threading.Event, poll_s: float = 0.05) -> tuple[Any, int] | None:
        """``(params, their version)`` once the newest version is at least ``version``: the newest
        whose arrays are computed among those at least ``version``, else the oldest of those (the
        first to be computed); None if ``stop`` is set first."""
        with self._cond:
            while self._version < version:
                if stop.is_set():
                    return None
                self._cond.wait(poll_s)
            allowed = [pv for pv in self._versions if pv[1] >= version]
            return next((pv for pv in reversed(allowed) if computed(pv[0])), allowed[0])


def computed(tree: Any) -> bool:
    """Whether every array of ``tree`` holds its value (not an update still running); other leaves are."""
    return all(x.is_ready() for x in jax.tree.leaves(tree) if isinstance(x, jax.Array))


@dataclasses.dataclass
class Rollout:
    """One actor's ``T`` steps of its ``N`` envs.

    Attributes:
        index: the rollout's number (:class:`Schedule`).
        actor: the actor that collected it.
        version: the params version that acted.
        traj: a :class:`~rljax.core.rollout.Transition` of numpy ``[T, N, ...]`` arrays (``extras``:
            behaviour log-probs ``[T, N]``).
        episodes: ``(return, length)`` of every episode that ended in it.
        env_step_s: seconds of each of the ``T`` env steps.
        policy_s, wait_params_s, wait_queue_s, total_s: where the actor's time went.
        env_restarts, lost_episodes: the env restarts while collecting it, and the episodes they
            dropped (every env's episode in flight, and those that ended in the discarded steps).
    """

    index: int
    actor: int
    version: int
    traj: Transition
    episodes: list[tuple[float, int]]
    env_step_s: np.ndarray
    policy_s: float
    wait_params_s: float
    wait_queue_s: float = 0.0
    total_s: float = 0.0
    env_restarts: int = 0
    lost_episodes: int = 0
    snapshot: "EnvSnapshot | None" = None
    items: Any = None


@dataclasses.dataclass(frozen=True)
class Finisher:
    """What an actor makes of each rollout besides the rollout itself, with a carry from one rollout
    to the next of the same envs (the off-policy path: n-step replay items, the last ``n - 1`` steps
    carried, :func:`rljax.agents.offpolicy.n_step_items`).

    Attributes:
        init: ``init() -> carry``, the carry of envs just reset (again after every env restart).
        finish: ``finish(traj, carry) -> (items, carry)``, jitted: the rollout's ``items``
            (:attr:`Rollout.items`) and the carry for the next rollout.
    """

    init: Callable[[], Any]
    finish: Callable[[Any, Any], tuple[Any, Any]]


@dataclasses.dataclass
class EnvSnapshot:
    """Where an actor stands between two rollouts: its envs' state (``HostEnv.get_state``), the
    observations to act on next, the returns and lengths of the episodes in flight, the leaves of
    its :class:`Finisher`'s carry (``()`` without one), and the seed its envs were first reset with
    and their restarts so far (a restart after a resume reseeds them as it would have without one)."""

    env_state: bytes
    obs: np.ndarray
    returns: np.ndarray
    lengths: np.ndarray
    carry: tuple[np.ndarray, ...] = ()
    seed: int | None = None
    env_restarts: int = 0


class Actor(threading.Thread):
    """Collects rollouts from ``env`` until the schedule runs out or ``stop`` is set.

    Args:
        index: this actor's number.
        env: its batch of host envs (reset here with ``seed``).
        policy: ``(params, obs, key, step) -> (action, log_prob)``, jitted; ``obs`` arrives on ``device``.
        store, out, schedule: the shared :class:`ParamStore`, rollout queue and :class:`Schedule`.
        key: this actor's PRNG key (rollout ``k`` step ``t``: ``policy(..., fold_in(key, k), t)``).
        seed: the envs' seed.
        num_steps: T.
        max_policy_lag: rollout ``k`` waits for params of version ``k - max_policy_lag``.
        device: where the policy runs.
        stop: set by anyone to end the run.
        bounds: ``(low, high)`` a Box action is clipped to when the envs are stepped (the rollout keeps
            the sampled action), or None.
        restarts: how failed envs are replaced (:class:`RestartPolicy`); None: a failure stops the run.
            A rollout the failure interrupted is collected again from its start with the new envs,
            reset with seed ``seed + 7919 * restarts`` so that they do not replay the same episodes.
        snapshots: attach an :class:`EnvSnapshot` to every rollout (its envs must have ``get_state``).
        initial: start from this snapshot instead of resetting the envs.
        droppable: when the envs fail past the restart budget, the actor gives its rollout number back
            (:meth:`Schedule.release`) and leaves (``dropped`` says why) instead of stopping the run: a
            pool of env servers in which one went away (the run stops only when no actor is left).
        address: what the actor's envs are (an env server's ``HOST:PORT`` in a pool), or None.
        rollout_args: ``rollout_args(k, actor) -> tuple``: extra arguments of the policy while it
            collects rollout ``k`` (``policy(params, obs, key, step, *args)``), e.g. where the run
            stands for an exploration schedule; None for none.
        finisher: what the actor makes of each rollout (:class:`Finisher`); None for nothing.
    """

    def __init__(self, index: int, env: HostEnv, policy: Callable[..., Any], store: ParamStore, out: queue.Queue,
                 schedule: Schedule, key: jax.Array, seed: int, num_steps: int, max_policy_lag: int, device: Any,
                 stop: threading.Event, bounds: tuple[np.ndarray, np.ndarray] | None = None,
                 restarts: RestartPolicy | None = None, snapshots: bool = False, initial: EnvSnapshot | None = None,
                 droppable: bool = False, address: str | None = None,
                 rollout_args: Callable[[int, int], tuple] | None = None, finisher: Finisher | None = None):
        super().__init__(daemon=True, name=f"rljax-actor-{index}")
        self.index, self.env, self.policy, self.store, self.out = index, env, policy, store, out
        self.schedule, self.key, self.seed, self.num_steps = schedule, key, seed, num_steps
        self.max_policy_lag, self.device, self.stop, self.bounds = max_policy_lag, device, stop, bounds
        self.restarts, self.error = restarts, None
        self.env_restarts, self._failures, self._lost = 0, 0, 0
        n = env.spec.num_envs
        self._returns, self._lengths = np.zeros(n, np.float64), np.zeros(n, np.int64)
        self.snapshots, self.initial = snapshots, initial
        self.retiring = threading.Event()
        self.envs_closed = False  # a retired (or dropped) actor closes its envs as it leaves
        self.droppable, self.address, self.dropped = droppable, address, None
        self.lost_when_dropped, self._lost_reported = 0, 0  # episodes lost, not yet reported in a rollout
        self.rollout_args, self.finisher, self._carry = rollout_args, finisher, None

    def retire(self) -> None:
        """Ends this actor after the rollout it is collecting (it claims no other); its envs are
        closed as it leaves. The run goes on with the others."""
        self.retiring.set()

    def run(self) -> None:
        k = None  # the rollout number this actor holds (claimed, not yet delivered)
        try:
            obs = self._reset() if self.initial is None else self._restore(self.initial)
            while obs is not None and not self.stop.is_set() and not self.retiring.is_set():
                k = self.schedule.claim()
                if k is None:
                    if self.schedule.finished():
                        return
                    # Every number is handed out, but one may come back (an actor whose envs went away
                    # gives its number back): stay until every claimed rollout has been delivered.
                    self.stop.wait(0.05)
                    continue
                rollout, obs = self._collect_with_restarts(k, obs)
                if rollout is None or not self._put(rollout):
                    return
                self.schedule.delivered(k)
                k = None
        except EnvsGone as gone:
            if not self.droppable:  # the run stops: the error says what failed, as a RuntimeError
                self.error = RuntimeError(str(gone))
                self.error.__cause__ = gone.__cause__
                self.stop.set()
                return
            if k is not None:
                self.schedule.release(k)  # another actor collects it
            self.lost_when_dropped, self.dropped = self._lost - self._lost_reported, str(gone)
            self.retiring.set()
        except BaseException as err:  # reported on the learner's thread by ActorPool.get
            self.error = err
            self.stop.set()
        finally:
            if self.retiring.is_set():
                close_envs([self.env])
                self.envs_closed = True

    def _restore(self, snapshot: EnvSnapshot) -> np.ndarray:
        self.env.set_state(snapshot.env_state)
        if snapshot.seed is not None:
            self.seed, self.env_restarts = snapshot.seed, snapshot.env_restarts
        self._returns[:], self._lengths[:] = snapshot.returns, snapshot.lengths
        if self.finisher is not None:
            fresh = self.finisher.init()
            self._carry = jax.tree.unflatten(jax.tree.structure(fresh), snapshot.carry) if snapshot.carry else fresh
        return snapshot.obs

    def _reset(self) -> np.ndarray | None:
        """The first observations of fresh episodes, through as many restarts as the policy allows."""
        while True:
            try:
                self._returns[:], self._lengths[:] = 0.0, 0
                self._carry = None if self.finisher is None else self.finisher.init()  # nothing carries across
                return self.env.reset(self.seed + 7919 * self.env_restarts)
            except Exception as err:
                if not self._restart(EnvFailure(err)):
                    return None

    def _collect_with_restarts(self, k: int, obs: np.ndarray) -> tuple[Rollout | None, np.ndarray | None]:
        restarts, lost = self.env_restarts, self._lost
        while True:
            try:
                rollout, obs = self._collect(k, obs)
            except EnvFailure as failure:
                if not self._restart(failure):
                    return None, None
                obs = self._reset()
                if obs is None:
                    return None, None
                continue
            self._failures = 0
            if rollout is not None:
                rollout.env_restarts, rollout.lost_episodes = self.env_restarts - restarts, self._lost - lost
                self._lost_reported = self._lost
            return rollout, obs

    def _restart(self, failure: EnvFailure) -> bool:
        """Replaces the failed envs after a back-off; False if the run stopped meanwhile. Raises when
        there is no restart policy or the failures in a row exceed it."""
        self._failures += 1
        budget = 0 if self.restarts is None else self.restarts.max_failures
        if self._failures > budget:
            self._lost += self.env.spec.num_envs + failure.episodes
            raise EnvsGone(f"the envs failed {self._failures} time(s) in a row (restarts allowed: {budget}); "
                           f"the last failure: {failure}") from failure.cause
        self._lost += self.env.spec.num_envs + failure.episodes
        close_envs([self.env])
        if self.stop.wait(self.restarts.delay(self._failures)):
            return False
        self.env_restarts += 1
        try:
            self.env = self.restarts.remake()
        except Exception as err:  # the simulator is still down: another failure, another back-off
            return self._restart(EnvFailure(err))
        return True

    def _collect(self, k: int, obs: np.ndarray) -> tuple[Rollout | None, np.ndarray]:
        start = time.perf_counter()
        got = self.store.wait_for(k - self.max_policy_lag, self.stop)
        if got is None:
            return None, obs
        params, version = got
        waited = time.perf_counter() - start
        rows, episodes, step_s, policy_s = [], [], np.zeros(self.num_steps), 0.0
        key = jax.device_put(fold_in(self.key, np.uint32(k)), self.device)
        # An explicit device_put costs ~0.1 ms a step; jit places numpy on the default device itself.
        place = (lambda x: x) if self.device == jax.devices()[0] else (lambda x: jax.device_put(x, self.device))
        args = () if self.rollout_args is None else self.rollout_args(k, self.index)
        for t in range(self.num_steps):
            t0 = time.perf_counter()
            # np.asarray per output: jax.device_get of the pair costs ~45 us more a step on the CPU.
            action, log_prob = (np.asarray(x) for x in self.policy(params, place(obs), key, np.uint32(t), *args))
            t1 = time.perf_counter()
            try:
                step = self.env.step(np.asarray(action) if self.bounds is None else np.clip(action, *self.bounds))
            except Exception as err:
                raise EnvFailure(err, len(episodes)) from err
            step_s[t] = time.perf_counter() - t1
            policy_s += t1 - t0
            rows.append((obs, action, step.reward, step.terminated, step.truncated, step.final_obs, log_prob))
            episodes += self._count_episodes(step)
            obs = step.obs
        traj = Transition(*(np.stack(column) for column in zip(*rows)))
        items = None
        if self.finisher is not None:
            t0 = time.perf_counter()
            items, self._carry = self.finisher.finish(traj, self._carry)
            policy_s += time.perf_counter() - t0
        snapshot = EnvSnapshot(self.env.get_state(), obs, self._returns.copy(), self._lengths.copy(),
                               tuple(np.asarray(x) for x in jax.tree.leaves(self._carry)), self.seed,
                               self.env_restarts) if self.snapshots else None
        return Rollout(k, self.index, version, traj, episodes, step_s, policy_s, waited, snapshot=snapshot,
                       items=items), obs

    def _count_episodes(self, step: Any) -> list[tuple[float, int]]:
        self._returns += step.reward
        self._lengths += 1
        ended = np.flatnonzero(step.terminated | step.truncated)
        out = [(float(self._returns[i]), int(self._lengths[i])) for i in ended]
        self._returns[ended], self._lengths[ended] = 0.0, 0
        return out

    def _put(self, rollout: Rollout) -> bool:
        start = time.perf_counter()
        while not self.stop.is_set():
            try:
                rollout.wait_queue_s = time.perf_counter() - start
                rollout.total_s = rollout.wait_queue_s + rollout.wait_params_s + rollout.policy_s + \
                    float(rollout.env_step_s.sum())
                self.out.put(rollout, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False


def close_envs(envs: list[HostEnv]) -> None:
    """Closes every env; one that fails to close does not stop the others (or hide the run's error)."""
    for env in envs:
        try:
            env.close()
        except Exception:  # a broken env may not close cleanly
            pass


class ActorPool:
    """The actors, their queue and the stop event, started together; :meth:`get` is the learner's side.
    An autoscaled run adds actors (:meth:`add`, made by ``spawn``) and retires them (:meth:`retire`) while
    it trains."""

    def __init__(self, actors: list[Actor], out: queue.Queue, stop: threading.Event,
                 spawn: Callable[[int], Actor] | None = None):
        self.actors, self.queue, self.stop = actors, out, stop
        self.spawn = spawn  # spawn(index) -> a new actor (its envs made) for an autoscaled run
        self._pending: dict[int, Rollout] = {}

    def start(self) -> None:
        for actor in self.actors:
            actor.start()

    @property
    def active(self) -> list[Actor]:
        """The actors that still claim rollouts (not retiring)."""
        return [a for a in self.actors if not a.retiring.is_set()]

    def add(self, actor: Actor) -> None:
        """Starts one more actor; it claims rollouts from the shared schedule with the others."""
        self.actors.append(actor)
        actor.start()

    def retire(self, actor: Actor | None = None) -> Actor:
        """Retires ``actor`` (default: the newest active one; :meth:`Actor.retire`): the rollout it
        collects is finished and learned from, so no rollout number is left without its rollout."""
        actor = self.active[-1] if actor is None else actor
        actor.retire()
        return actor

    def get(self, index: int, timeout_s: float, idle: Callable[[], None] | None = None,
            idle_every_s: float = 0.25) -> Rollout:
        """Rollout ``index``: the learner consumes rollouts in order, so rollout ``k``, acted with a
        version ``>= k - max_policy_lag``, is learned from at update ``k`` and its lag never exceeds
        the bound (rollouts that arrive early wait here). Re-raises an actor's error (naming the
        actor, :class:`ActorFailedError`); a :class:`RolloutTimeoutError` after ``timeout_s`` without it.

        ``idle()`` is called every ``idle_every_s`` while the rollout is awaited (a pool of env servers
        adds actors for servers that joined). Without it, a rollout no actor is left to collect (every
        one exited, e.g. gave up on its envs) fails at once rather than at the timeout."""
        deadline = time.monotonic() + timeout_s
        next_idle = time.monotonic() + idle_every_s
        while index not in self._pending:
            self._raise_actor_error()
            try:
                rollout = self.queue.get(timeout=0.05)
                self._pending[rollout.index] = rollout
            except queue.Empty:
                left = any(a.is_alive() for a in self.actors)
                if idle is not None and time.monotonic() >= next_idle:
                    idle()
                    next_idle = time.monotonic() + idle_every_s
                elif idle is None and self.actors and self.queue.empty() and not left:
                    self._raise_actor_error()  # an actor that failed as it left says why
                    raise ActorFailedError(f"rollout {index} has no actor left to collect it{self._gone()}")
                if time.monotonic() > deadline:
                    raise RolloutTimeoutError(f"rollout {index} did not arrive within {timeout_s:g} s (actors alive: "
                                              f"{sum(a.is_alive() for a in self.actors)} of {len(self.actors)})"
                                              f"{self._gone()}") from None
        return self._pending.pop(index)

    def _gone(self) -> str:
        """The actors that left because their envs went away, for an error message."""
        gone = [f"actor {a.index} ({a.address or a.env!r}): {a.dropped}" for a in self.actors if a.dropped]
        return f"; actors whose envs went away: {'; '.join(gone)}" if gone else ""

    def depth(self) -> int:
        """Rollouts collected and not yet learned from."""
        return self.queue.qsize() + len(self._pending)

    def _raise_actor_error(self) -> None:
        for actor in self.actors:
            if actor.error is not None:
                raise ActorFailedError(f"actor {actor.index} ({actor.env!r}) failed: {type(actor.error).__name__}: "
                                       f"{actor.error}") from actor.error

    def close(self, join_s: float = 10.0) -> None:
        """Stops the actors, waits for them and closes their envs."""
        self.stop.set()
        for actor in self.actors:
            actor.join(join_s)
        close_envs([actor.env for actor in self.actors if not actor.envs_closed])
