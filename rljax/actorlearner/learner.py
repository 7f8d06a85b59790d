"""The learner of the actor-learner path: PPO, IMPALA or an off-policy algorithm on rollouts that
actors collected with a (possibly stale) policy.

- PPO: :func:`rljax.agents.ppo.ppo_learn` on :func:`rljax.agents.ppo.ppo_batch` (GAE from the
  learner's current critic, bootstrapping through truncation from the final observation); the ratio
  ``pi_theta / mu`` against the *behaviour* log-probs the actor recorded, clipped to ``1 +- clip_eps``,
  is what corrects for the policy lag, as Cleanba's PPO does.
- IMPALA: :func:`rljax.agents.impala.impala_learn`, one step on V-trace targets and advantages whose
  truncated importance ratios correct for the lag.

- The off-policy algorithms (DQN, C51, QR-DQN, SAC, TD3, D4PG): the actors make n-step replay items,
  the learner adds them to its replay and runs the algorithm's gradient steps on it
  (:mod:`rljax.actorlearner.offpolicy`).

With ``max_policy_lag = 0`` and one actor the run is the synchronous host loop: every rollout acts
with the params of the update before it. :func:`train_host` is the Python entry point; a row per
update reports the learning metrics beside the system's: env steps/s, the policy lag learned from,
the queue depth, the actors' and the learner's busy fractions, env step time p50/p99, and env
restarts and the episodes they lost.
"""

from __future__ import annotations

import dataclasses
import math
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from rljax.actorlearner.engine import (Actor, ActorPool, EnvSnapshot, HostAlgorithm, ParamStore, RestartPolicy,
                                       Rollout, Schedule, close_envs, computed, fold_in)
from rljax.agents.onpolicy import actor_critic_network, annealed_learning_rate, explained_variance, sampling_policy
from rljax.agents.impala import IMPALAConfig, impala_learn, impala_optimizer
from rljax.actorlearner.offpolicy import INITIAL_PRIORITIES, REPLAYS, offpolicy_algorithm
from rljax.actorlearner.onpolicy import onpolicy_algorithm
from rljax.agents.offpolicy import OffPolicyConfig
from rljax.agents.ppo import PPOConfig, ppo_batch, ppo_learn, ppo_optimizer
from rljax.agents.pqn import PQNConfig
from rljax.env import Box
from rljax.runtime import distributed
from rljax.runtime.devices import AXIS
from rljax.host.base import HostEnv, HostSpec
from rljax.host.spaces import HostEnvSpaces

__all__ = ["HostOptions", "HostResult", "host_algorithm", "host_functions", "job_learner_devices", "learner_shardings",
           "num_updates",
           "steps_per_update", "train_host"]


@dataclasses.dataclass(frozen=True)
class HostOptions:
    """How the actor-learner path is laid out.

    Attributes:
        num_actors: actor threads, each with its own batch of ``config.num_envs`` host envs.
        max_policy_lag: rollout ``k`` acts with params of version ``>= k - max_policy_lag`` (0: the
            synchronous host loop).
        queue_size: rollouts that may wait for the learner.
        actor_devices: where the actors run the policy: actor ``a`` on ``actor_devices[a % len]``
            (default: this process's first device).
        learner_devices: where the update runs (default: this process's first device). On ``D``
            devices it is data-parallel: each rollout's envs are split over them (``num_envs`` must
            be a multiple of ``D``), each computes its share's advantages and gradients, and
            gradients and statistics are averaged (``lax.pmean``), so the update equals the
            one-device update on the whole rollout whenever the minibatches are the same sets
            (IMPALA's one full-batch step; PPO with ``num_minibatches=1``), to float rounding. In a
            run of several processes (:mod:`rljax.runtime.distributed`) these are each process's
            own devices, and the update spans every process's (:func:`job_learner_devices`).
        rollout_timeout_s: the learner's longest wait for a rollout before the run fails.
        max_env_restarts: failures in a row an actor's envs may have before the run stops; each
            failure closes them and makes a new batch with ``make_env(actor)`` after a back-off of
            ``restart_backoff_s`` doubling per failure in a row (at most 30 s). 0: the first failure
            stops the run.
        restart_backoff_s: the first back-off.
        min_actors, max_actors: the bounds of an autoscaled actor count (0: ``num_actors``, the count
            fixed); ``num_actors`` is the count the run starts with. Between them a controller
            (:mod:`rljax.actorlearner.autoscale`) adds and retires actors from the learner's busy
            fraction and the actors' idle fraction; needs ``max_policy_lag >= 1`` (acting and learning
            in turn leaves nothing for more actors to do).
        scale_window: updates measured before each autoscaling decision (and after each change).
        apex_epsilon, apex_alpha: off-policy Q-learners (DQN, C51, QR-DQN): with ``apex_epsilon > 0``
            actor ``i`` of ``A`` explores with the fixed rate ``apex_epsilon ** (1 + apex_alpha * i / (A - 1))``
            (Ape-X) instead of the config's schedule; 0: the schedule (:mod:`rljax.actorlearner.offpolicy`).
        initial_priority: off-policy with prioritised replay: new items enter with the largest priority
            seen (``"max"``) or their TD error under the learner's params as they are inserted (``"td"``, Ape-X).
        replay: off-policy: where the replay lives, ``"device"`` (the learner's) or ``"host"`` (host
            memory, stacked frames stored once, priorities on the device: :mod:`rljax.actorlearner.hostreplay`).
        frames_per_item: ``replay="host"`` with stacked frames: the frame ring's frames per item; 0
            stores observations as they are.
    """

    num_actors: int = 1
    max_policy_lag: int = 1
    queue_size: int = 2
    actor_devices: tuple[Any, ...] = ()
    learner_devices: tuple[Any, ...] = ()
    rollout_timeout_s: float = 600.0
    max_env_restarts: int = 3
    restart_backoff_s: float = 1.0
    min_actors: int = 0
    max_actors: int = 0
    scale_window: int = 8
    apex_epsilon: float = 0.0
    apex_alpha: float = 7.0
    initial_priority: str = "max"
    replay: str = "device"
    frames_per_item: float = 1.5

    def __post_init__(self):
        for name, low in (("num_actors", 1), ("max_policy_lag", 0), ("queue_size", 1), ("max_env_restarts", 0),
                          ("min_actors", 0), ("max_actors", 0), ("scale_window", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{name}={value!r}: must be an integer >= {low}")
        low, high = self.actor_bounds
        if not low <= self.num_actors <= high:
            raise ValueError(f"num_actors={self.num_actors} (the count the run starts with) must lie within "
                             f"min_actors={low} and max_actors={high}")
        if self.autoscaled and self.max_policy_lag == 0:
            raise ValueError(f"an autoscaled actor count (min_actors={low}, max_actors={high}) needs "
                             f"max_policy_lag >= 1: with 0, acting and learning take turns and more actors "
                             f"would only wait")
        for name in ("rollout_timeout_s", "restart_backoff_s", "apex_alpha"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}={getattr(self, name)}: must be > 0")
        if not 0 <= self.apex_epsilon < 1:
            raise ValueError(f"apex_epsilon={self.apex_epsilon}: must lie in [0, 1) (0: the config's schedule; "
                             f"Ape-X: 0.4)")
        for name, valid in (("initial_priority", INITIAL_PRIORITIES), ("replay", REPLAYS)):
            if getattr(self, name) not in valid:
                raise ValueError(f"{name}={getattr(self, name)!r}: valid: {', '.join(map(repr, valid))}")
        if not (self.frames_per_item == 0 or 1 <= self.frames_per_item < math.inf):
            raise ValueError(f"frames_per_item={self.frames_per_item}: must be 0 (observations stored as they are) "
                             f"or a finite number >= 1")
        if not math.isfinite(self.apex_alpha):
            raise ValueError(f"apex_alpha={self.apex_alpha}: must be finite (Ape-X: 7)")
        for name in ("actor_devices", "learner_devices"):
            devices = tuple(getattr(self, name))
            object.__setattr__(self, name, devices)
            if len(set(devices)) != len(devices):
                raise ValueError(f"{name}={list(devices)}: names a device more than once")

    @property
    def actor_bounds(self) -> tuple[int, int]:
        """``(min_actors, max_actors)`` with 0 read as ``num_actors``."""
        return self.min_actors or self.num_actors, self.max_actors or self.num_actors

    @property
    def autoscaled(self) -> bool:
        """Whether the actor count may change while the run trains."""
        low, high = self.actor_bounds
        return low != high


@dataclasses.dataclass
class HostResult:
    """What :func:`train_host` returns: the final params and optimiser state, one row per update
    (this call's), the updates done in all (a resumed run's earlier ones included), and what
    stopped the run early (None: it ran to the end)."""

    params: Any
    opt_state: Any
    rows: list[dict[str, Any]]
    updates: int = 0
    preempted: str | None = None


Restore = Callable[[Any, Any], tuple[Any, Any, int, EnvSnapshot | None] | None]
"""``restore(params, opt_state) -> (params, opt_state, updates_done, envs)`` from a checkpoint shaped
like the fresh ones (``envs``: the one actor's :class:`~rljax.actorlearner.engine.EnvSnapshot`
saved with it, or None to reset the envs), or None to start from the fresh ones."""

OnUpdate = Callable[[int, Any, Any, dict, EnvSnapshot | None], str | None]
"""``on_update(updates_done, params, opt_state, row, envs) -> reason or None``: called after every
update (before the next one may donate ``params``), with the actor's snapshot after the rollout it
learned from when snapshots are on; a reason stops the run there. Called once more with ``row``
None when the run is about to fail (an actor's error or a rollout timeout) after updates it made."""


def _check(config: Any) -> None:
    if isinstance(config, OffPolicyConfig):
        if config.num_devices != 1:
            raise ValueError(f"num_devices={config.num_devices} is for JAX envs: the host path's off-policy learner "
                             f"runs on one device")
        if config.total_timesteps < steps_per_update(config):
            raise ValueError(f"total_timesteps={config.total_timesteps} is less than one update of num_envs * "
                             f"num_steps = {steps_per_update(config)} env steps: give at least that many")
        return
    if not isinstance(config, (PPOConfig, IMPALAConfig, PQNConfig)):
        raise TypeError(f"the host path trains PPO, IMPALA, PQN or an off-policy algorithm (DQN, C51, QR-DQN, SAC, "
                        f"TD3, D4PG), not {type(config).__name__}")
    unsupported = {"memory": getattr(config, "memory", "none") != "none",
                   "normalize_obs": getattr(config, "normalize_obs", False),
                   "normalize_reward": getattr(config, "normalize_reward", False),
                   "num_devices": config.num_devices != 1}
    bad = [k for k, v in unsupported.items() if v]
    if bad:
        raise ValueError(f"the host path runs memoryless policies without normalisers; "
                         f"{', '.join(f'{k}={getattr(config, k)!r}' for k in bad)} are for JAX envs (the host "
                         f"path's learner devices: HostOptions.learner_devices, --learner-devices)")


def host_functions(config: PPOConfig | IMPALAConfig, spec: HostSpec, learner_devices: Sequence[Any] = ()
                   ) -> tuple[Any, Callable, Callable, Any]:
    """``(network, policy, update, optimizer)`` for ``spec``'s spaces.

    ``policy(params, obs, key, step) -> (action, log_prob)`` samples the behaviour policy with
    ``fold_in(key, step)`` (the actor clips a Box action to the space's bounds when it steps the envs;
    the rollout keeps the sample). ``update(params, opt_state, traj, key, updates, num_updates) ->
    (params, opt_state, metrics)`` is one PPO or IMPALA update on a ``[T, N]``
    :class:`~rljax.core.rollout.Transition`. Both are jitted; ``optimizer`` initialises the state.
    With several ``learner_devices`` the update is ``shard_map``-ped over them: params, optimiser
    state, key and metrics replicated, ``traj`` split along its env axis ``N``
    (:func:`learner_shardings`), gradients averaged.
    """
    name = "IMPALA" if isinstance(config, IMPALAConfig) else "PPO"
    network = actor_critic_network(config, HostEnvSpaces.of(spec), None, name)
    apply_fn, hyper = network.apply, config.hyperparams()

    def policy(params: Any, obs: Any, key: jax.Array, step: Any) -> tuple[jax.Array, jax.Array]:
        return sampling_policy(apply_fn, params)(jax.random.fold_in(key, step), obs)

    axis = AXIS if len(learner_devices) > 1 else None

    def ppo_update(params: Any, opt_state: Any, traj: Any, key: jax.Array, lr: jax.Array):
        batch, (values, targets) = ppo_batch(apply_fn, params, traj, hyper)
        params, opt_state, metrics = ppo_learn(
            params, opt_state, batch, key, hyper, lr, apply_fn, num_epochs=config.num_epochs,
            num_minibatches=config.num_minibatches, normalize_advantages=config.normalize_advantages,
            clip_value_loss=config.clip_value_loss, axis_name=axis)
        return params, opt_state, {**metrics, "explained_variance": explained_variance(targets, values, axis)}

    def impala_update(params: Any, opt_state: Any, traj: Any, key: jax.Array, lr: jax.Array):
        return impala_learn(params, opt_state, traj, hyper, lr, apply_fn, axis)

    learn = impala_update if name == "IMPALA" else ppo_update

    def update(params: Any, opt_state: Any, traj: Any, key: jax.Array, updates: Any, num_updates: Any):
        lr = annealed_learning_rate(hyper, updates, num_updates, config.anneal_lr)
        params, opt_state, metrics = learn(params, opt_state, traj, key, lr)
        return params, opt_state, {**metrics, "learning_rate": lr}

    optimizer = (impala_optimizer if name == "IMPALA" else ppo_optimizer)(hyper, config.learning_rate)
    if axis is not None:
        # check_vma=False: the learning code is written pmean style (replicated results of collectives).
        update = jax.shard_map(update, mesh=learner_shardings(learner_devices)[0].mesh,
                               in_specs=(P(), P(), P(None, AXIS), P(), P(), P()), out_specs=(P(), P(), P()),
                               check_vma=False)
    return network, jax.jit(policy), jax.jit(update, donate_argnums=(0, 1)), optimizer


def host_algorithm(config: Any, spec: HostSpec, learner_devices: Sequence[Any], options: HostOptions) -> HostAlgorithm:
    """``config``'s algorithm as the actor-learner path runs it: PPO's or IMPALA's
    (:func:`host_functions`: params and optimiser state, an update per rollout), or an off-policy
    one's (:func:`rljax.actorlearner.offpolicy.offpolicy_algorithm`: the learner and its replay, one
    learner device of one process), or PQN's (:func:`rljax.actorlearner.onpolicy.onpolicy_algorithm`: its own
    update on each rollout, one learner device)."""
    if isinstance(config, (OffPolicyConfig, PQNConfig)) and len(learner_devices) > 1:
        raise ValueError(f"{type(config).__name__.removesuffix('Config')} on host envs learns on one device of one "
                         f"process; this run has {len(learner_devices)} learner devices ({jax.process_count()} "
                         f"process(es) x --learner-devices): run one process with one learner device")
    if isinstance(config, OffPolicyConfig):
        return offpolicy_algorithm(config, spec, num_updates(config), num_actors=options.num_actors,
                                   apex_epsilon=options.apex_epsilon, apex_alpha=options.apex_alpha,
                                   initial_priority=options.initial_priority, replay=options.replay,
                                   frames_per_item=options.frames_per_item)
    if isinstance(config, PQNConfig):
        return onpolicy_algorithm(config, spec, num_updates(config))
    network, policy, update, optimizer = host_functions(config, spec, learner_devices)

    def init(key: jax.Array, obs: Any) -> tuple[Any, Any]:
        params = network.init(key, obs)
        return params, optimizer.init(params)

    return HostAlgorithm(init=init, policy=policy, update=update)


def learner_shardings(devices: Sequence[Any]) -> tuple[NamedSharding, NamedSharding]:
    """``(replicated, split)`` over a 1-D mesh of the learner's ``devices``: the params', optimiser
    state's and key's sharding, and a rollout's (``[T, N, ...]`` leaves split along ``N``)."""
    mesh = Mesh(np.array(list(devices)), (AXIS,))
    return NamedSharding(mesh, P()), NamedSharding(mesh, P(None, AXIS))


def steps_per_update(config: PPOConfig | IMPALAConfig) -> int:
    """The env steps one update learns from: one rollout (``env_steps_per_update``) of every process."""
    return config.env_steps_per_update * jax.process_count()


def num_updates(config: PPOConfig | IMPALAConfig) -> int:
    """The updates a host run makes, ``total_timesteps // steps_per_update(config)``."""
    return config.total_timesteps // steps_per_update(config)


def job_learner_devices(local: Sequence[Any]) -> list[Any]:
    """The learner's devices in the whole run: ``local`` with one process; with several, every
    process's devices at the positions ``local`` takes among this process's own, process by process
    (every process runs the same command, so the positions must agree: checked, one all-gather).

    Raises:
        ValueError: a device in ``local`` is not this process's, or the processes' positions differ.
    """
    if jax.process_count() == 1:
        return list(local)
    mine = jax.local_devices()
    foreign = [d for d in local if d not in mine]
    if foreign:
        raise ValueError(f"learner devices {foreign} are not this process's ({mine})")
    positions = [mine.index(d) for d in local]
    everyone = distributed.allgather_json(positions)
    if any(p != positions for p in everyone):
        raise ValueError(f"the processes name different learner devices (local positions {everyone}); run the same "
                         f"--learner-devices on every process")
    return [jax.local_devices(process_index=p)[i] for p in range(jax.process_count()) for i in positions]


def train_host(config: PPOConfig | IMPALAConfig, make_env: Callable[[int], HostEnv],
               options: HostOptions = HostOptions(),
               on_row: Callable[[dict[str, Any]], None] | None = None, *, restore: Restore | None = None,
               on_update: OnUpdate | None = None, snapshots: bool = False,
               on_event: Callable[[dict[str, Any]], None] | None = None, servers: Any = None) -> HostResult:
    """Trains PPO, IMPALA or an off-policy algorithm on host envs through actors and a learner (see
    the module docstring).

    Args:
        config: a :class:`~rljax.agents.ppo.PPOConfig`, :class:`~rljax.agents.impala.IMPALAConfig` or
            :class:`~rljax.agents.offpolicy.OffPolicyConfig` subclass (one learner device, one process);
            ``num_envs`` envs per actor, ``num_steps`` per rollout, and
            ``total_timesteps // (P * num_envs * num_steps)`` updates (:func:`num_updates`), each
            on one rollout of each of the run's ``P`` processes (``P = 1`` unless the run spans
            several: :mod:`rljax.runtime.distributed`; every process runs this same call with its
            own actors and envs, and the update is data-parallel over all of them). ``seed`` seeds
            the params, the keys and the envs (actor ``a`` of process ``p`` is the job's actor
            ``b = p * num_actors + a``; its env ``i``: ``seed + b * num_envs + i``; an actor an
            autoscaled run adds, ``a >= num_actors``, is ``b = P * num_actors + (a - num_actors) * P + p``).
        make_env: ``make_env(actor) -> HostEnv`` with ``config.num_envs`` envs (e.g.
            ``lambda a: make_host_env("gymnasium/CartPole-v1", config.num_envs)``).
        options: the layout (:class:`HostOptions`).
        on_row: called with each update's row as it is made.
        restore: continues from a checkpoint (:data:`Restore`): rollouts, keys and env seeds go on
            from the update it had reached; the episodes the envs were in start over.
        on_update: called after every update (:data:`OnUpdate`); it may stop the run.
        snapshots: with one actor whose envs can save their state (``get_state`` not None, e.g. a
            synchronous ``gymnasium/`` batch), hand ``on_update`` the envs' state after each rollout,
            and let ``restore`` put it back: with ``max_policy_lag = 0`` a resumed run is then the same
            bits as one never stopped (with several processes too: each saves and restores its own).
        on_event: called with each change of the actor count (an autoscaling decision, a server of
            ``servers`` joining or leaving): the update, the count before and after, the reason and,
            for a decision, the measurements (:mod:`rljax.actorlearner.autoscale`).
        servers: a :class:`rljax.host.pool.ServerPool` whose servers the actors follow (actor ``a``'s
            envs the batch of ``servers.bound[a]``; ``make_env`` makes them): an actor whose server
            dies leaves (its rollout collected by another), a server added to the pool gets an actor,
            one taken out has its actor retired; the run stops only when no actor is left.

    Returns:
        A :class:`HostResult`.
    """
    config.validate()
    _check(config)
    envs: list[HostEnv] = []
    try:
        if servers is not None:  # a pool starts with the servers that answer (at least one)
            envs = _reachable(servers, make_env, options.num_actors, on_event)
            options = dataclasses.replace(options, num_actors=len(envs))
        else:
            for a in range(options.num_actors):
                envs.append(make_env(a))
    except BaseException:
        close_envs(envs)
        raise
    return _train(config, envs, make_env, options, on_row, restore, on_update, snapshots, on_event, servers)


def _reachable(servers: Any, make_env: Callable[[int], HostEnv], count: int,
               on_event: Callable[[dict[str, Any]], None] | None) -> list[HostEnv]:
    """The batches of the pool's first ``count`` servers that answer, their actors renumbered ``0..``; a
    server that does not is reported (``server_unreachable``) and tried again later. Raises the first
    server's error when none answers."""
    envs, addresses, first = [], [], None
    for a in range(count):
        address = servers.bound[a]
        try:
            envs.append(make_env(a))
            addresses.append(address)
        except Exception as err:  # noqa: BLE001 - a pool goes on with the servers that answer
            first = first or err
            servers.failed(address)
            if on_event is not None:
                on_event({"update": 0, "env_steps": 0, "kind": "server_unreachable", "address": address, "from": 0,
                          "actors": 0, "change": 0, "reason": f"no actor for it: {type(err).__name__}: {err}"})
    if not envs:
        raise first
    servers.bound = dict(enumerate(addresses))
    return envs


def _train(config: PPOConfig | IMPALAConfig, envs: list[HostEnv], make_env: Callable[[int], HostEnv],
           options: HostOptions, on_row: Callable[[dict[str, Any]], None] | None, restore: Restore | None,
           on_update: OnUpdate | None, snapshots: bool,
           on_event: Callable[[dict[str, Any]], None] | None = None, servers: Any = None) -> HostResult:
    """Runs the actors and the learner; the envs are closed once, on every way out: by the actor pool
    (each actor's current batch, restarts included) once it exists, before that here."""
    pool = None
    if servers is not None and options.autoscaled:
        close_envs(envs)
        raise ValueError("a pool of env servers sets the actor count itself (one actor per server); "
                         "--min-actors/--max-actors autoscale a run on one env source")
    try:
        pool, learner = _start(config, envs, make_env, options, restore, snapshots, servers)
        result = _learn(pool, learner, options, on_row, on_update, on_event, servers)
        if result.preempted is None and hasattr(servers, "finish"):
            servers.finish()  # the run's end lets its rollout workers go; a stopped run's keep coming back
        return result
    finally:
        if pool is not None:
            pool.close()
        else:
            close_envs(envs)


class _Learner(NamedTuple):
    """What the learner's loop needs: the jitted update, the initial params and optimiser state, the
    stores it publishes to (one per actor device), its key, the updates to reach and those already
    done, where a rollout goes (a device, or the split over the learner's devices) and where the
    replicated state goes."""

    algorithm: HostAlgorithm
    params: Any
    opt_state: Any
    stores: dict[Any, ParamStore]
    key: jax.Array
    num_updates: int
    start: int
    rollout_sharding: Any
    place: Any

    def publish(self, params: Any, version: int) -> None:
        """Hands ``params`` to every actor device: a copy (never an alias) when the next update donates
        them, else the arrays themselves (moved where an actor device is another)."""
        for device, store in self.stores.items():
            if self.algorithm.donates_params:
                params_there = _actor_copy(params, device)
            else:  # the learner's own arrays, which no update overwrites
                params_there = params if device == self.place else jax.device_put(params, device)
            store.publish(params_there, version)


def _actor_copy(params: Any, device: Any) -> Any:
    """A copy of the learner's ``params`` on an actor's ``device`` (of this process), sharing no buffer."""
    if not all(isinstance(x.sharding, NamedSharding) for x in jax.tree.leaves(params)):
        return jax.device_put(params, device, may_alias=False)
    # Replicated over the learner's devices: this process's first shard holds the whole value.
    # may_alias=False is not honoured when one device's shard of a replicated array is taken.
    return _fresh(jax.device_put(jax.tree.map(lambda x: x.addressable_data(0), params), device))


_fresh = jax.jit(lambda tree: jax.tree.map(jnp.copy, tree))
"""New buffers holding ``tree``'s values, on its device."""


def _place(tree: Any, place: Any) -> Any:
    """``tree`` (host values, or arrays of this process) on the learner's ``place``: a device, or a
    sharding that may span processes (every process holds the same values: :func:`distributed.put`)."""
    return jax.tree.map(lambda x: distributed.put(x, place), tree)


def _local(tree: Any) -> Any:
    """Host copies of replicated arrays, from this process's own shard (no collective)."""
    if jax.process_count() == 1:
        return jax.device_get(tree)
    return jax.tree.map(lambda x: np.asarray(x.addressable_data(0)), tree)


def _check_split(config: PPOConfig | IMPALAConfig, devices: int) -> None:
    """A rollout's envs split evenly over the learner's ``devices``, and each share into PPO's minibatches."""
    if config.num_envs % devices:
        raise ValueError(f"num_envs={config.num_envs} is split over {devices} learner devices: give a multiple of "
                         f"{devices} (e.g. --num-envs {devices * max(1, round(config.num_envs / devices))})")
    per_device = config.num_steps * config.num_envs // devices
    minibatches = getattr(config, "num_minibatches", 1) if isinstance(config, PPOConfig) else 1
    if per_device % minibatches:
        raise ValueError(f"each of the {devices} learner devices gets num_steps * num_envs / {devices} = {per_device} "
                         f"samples, which num_minibatches={minibatches} does not divide")


def _start(config: PPOConfig | IMPALAConfig, envs: list[HostEnv], make_env: Callable[[int], HostEnv],
           options: HostOptions, restore: Restore | None, snapshots: bool,
           servers: Any = None) -> tuple[ActorPool, _Learner]:
    """Checks the envs, builds (or restores) the learner's state and the actors, and starts the actors.
    The job's actor ``b`` (actor ``a`` of process ``p``: ``b = p * num_actors + a``) acts with key
    ``fold_in(k_act, b)`` and its envs are seeded ``seed + (b + P * num_actors * start) * num_envs``
    (then ``+ i`` per env), ``start`` being the updates already done."""
    spec = envs[0].spec
    shape = lambda s: (s.num_envs, s.obs_shape, s.obs_dtype, s.action_shape, s.action_dtype)  # noqa: E731
    for a, env in enumerate(envs):
        if shape(env.spec) != shape(spec):
            raise ValueError(f"actor {a}'s envs differ from actor 0's: {env.spec} vs {spec}")
    if spec.num_envs != config.num_envs:
        raise ValueError(f"the host envs are batches of {spec.num_envs}, but num_envs={config.num_envs}")
    actor_devices = options.actor_devices or (jax.local_devices()[0],)
    local_learners = options.learner_devices or (jax.local_devices()[0],)
    _check_split(config, len(local_learners))
    learner_devices = job_learner_devices(local_learners)
    algorithm = host_algorithm(config, spec, learner_devices, options)
    if len(learner_devices) > 1:
        place, rollout_sharding = learner_shardings(learner_devices)
    else:
        place = rollout_sharding = learner_devices[0]
    k_init, k_act, k_learn = jax.random.split(jax.random.key(config.seed), 3)
    dummy = jax.tree.map(lambda x: x[None], np.zeros(spec.obs_shape, spec.obs_dtype))
    params, opt_state = algorithm.init(k_init, dummy)
    params = _place(params, place)
    opt_state = opt_state if algorithm.host_opt_state else _place(opt_state, place)
    start, initial = 0, None
    restored = restore(params, opt_state) if restore is not None else None
    if restored is not None:
        params, opt_state, start, initial = restored
        params = _place(params, place)
        opt_state = opt_state if algorithm.host_opt_state else _place(opt_state, place)
    processes, here, n0 = jax.process_count(), jax.process_index(), len(envs)

    def job_actor(a: int) -> int:
        """The job's actor ``b`` of this process's actor ``a``: ``p * num_actors + a`` for the actors a run
        starts with, then interleaved past all of those for actors an autoscaled run adds."""
        return here * n0 + a if a < n0 else processes * n0 + (a - n0) * processes + here

    snapshots = snapshots and len(envs) == 1 and not options.autoscaled and servers is None and \
        getattr(envs[0], "get_state", lambda: None)() is not None
    stores = {d: ParamStore(_actor_copy(params, d), start, keep=min(options.max_policy_lag, 1) + 1)
              for d in actor_devices}
    stop = threading.Event()
    out, schedule = queue.Queue(options.queue_size), Schedule(num_updates(config), start)
    space = spec.action_space
    bounds = (np.asarray(space.low), np.asarray(space.high)) if isinstance(space, Box) else None
    restarts = lambda a: RestartPolicy(lambda: make_env(a), options.max_env_restarts,  # noqa: E731
                                       options.restart_backoff_s)
    device = lambda a: actor_devices[a % len(actor_devices)]  # noqa: E731

    def actor(a: int, env: HostEnv, initial: EnvSnapshot | None = None) -> Actor:
        return Actor(a, env, algorithm.policy, stores[device(a)], out, schedule,
                     jax.random.fold_in(k_act, job_actor(a)),
                     config.seed + (job_actor(a) + processes * n0 * start) * config.num_envs, config.num_steps,
                     options.max_policy_lag, device(a), stop, bounds, restarts(a), snapshots, initial,
                     droppable=servers is not None, address=None if servers is None else servers.bound.get(a),
                     rollout_args=algorithm.rollout_args, finisher=algorithm.finisher)

    pool = ActorPool([actor(a, env, initial if snapshots else None) for a, env in enumerate(envs)], out, stop)
    pool.spawn = lambda a: actor(a, make_env(a))
    learner = _Learner(algorithm, params, opt_state, stores, k_learn, num_updates(config), start, rollout_sharding,
                       place)
    pool.start()
    return pool, learner


def _learn(pool: ActorPool, learner: _Learner, options: HostOptions, on_row: Callable[[dict[str, Any]], None] | None,
           on_update: OnUpdate | None, on_event: Callable[[dict[str, Any]], None] | None = None,
           servers: Any = None) -> HostResult:
    """One update per rollout, in rollout order; publishes each update's params as the next version;
    with an autoscaled actor count, applies the controller's decisions after each update."""
    params, opt_state, rows = learner.params, learner.opt_state, []
    start, env_steps, restarted, lost = time.perf_counter(), 0, 0, 0
    processes = jax.process_count()
    # One process, no controller and no on_row reading each row: an update's metrics stay on the device
    # in its row until the rows are written (fetched_rows), so the learner takes the next rollout and
    # dispatches the next update while this one computes.
    clock = _LagClock() if on_row is None and not options.autoscaled and processes == 1 else None
    size_of, lost_waiting = [0], []  # env steps an update (known after the first), episodes lost while waiting
    scaler = None
    if options.autoscaled:
        from rljax.actorlearner.autoscale import Scaler, ScaleRule

        low, high = options.actor_bounds
        # Left out at the start: the rollouts the actors queued while the learner compiled, which it
        # then learns from without waiting (up to queue_size + max_policy_lag + 1 of them).
        warmup = max(2, options.queue_size + options.max_policy_lag + 1)
        scaler = Scaler(ScaleRule(low, high, window=options.scale_window, warmup=warmup), options.num_actors)
    for u in range(learner.start, learner.num_updates):
        t0 = time.perf_counter()
        # While the learner waits, servers that joined the pool get actors.
        follow = None if servers is None else \
            (lambda: lost_waiting.append(_follow_servers(servers, pool, u, u * size_of[0], on_event)))  # noqa: B023
        try:
            rollout = pool.get(u, options.rollout_timeout_s, idle=follow)
        except Exception as err:
            _keep_learned(err, on_update, u, learner.start, params, opt_state)
            raise
        t1 = time.perf_counter()
        try:
            params, opt_state, metrics = learner.algorithm.update(params, opt_state, *_inputs(learner, rollout, u))
        except Exception as err:  # e.g. a replay in host memory refusing the rollout: it kept its state
            _keep_learned(err, on_update, u, learner.start, params, opt_state)
            raise
        learner.publish(params, u + 1)
        if clock is None or u == learner.start:  # the first update of a call compiles: wait for it
            metrics = _local(metrics)
            t2 = time.perf_counter()
            busy = (t2 - t1) / max(t2 - t0, 1e-9)
            if clock is not None:
                clock.done, clock.busy = t2, busy
        else:
            metrics = _deferred(metrics)
            busy, t2 = clock.after_dispatch(metrics, t1), time.perf_counter()
        *episodes, restarts, lost_here = _job_episodes(rollout)
        size = rollout.traj.reward.size * processes
        size_of[0] = size
        lost_here += sum(lost_waiting)
        lost_waiting.clear()
        env_steps += size
        restarted, lost = restarted + restarts, lost + lost_here
        row = _row(u, (u + 1) * size, env_steps, time.perf_counter() - start, rollout, episodes, metrics,
                   pool.depth(), busy)
        if servers is not None:
            lost += _follow_servers(servers, pool, u + 1, (u + 1) * size, on_event)
        row.update({"host/env_restarts": restarted, "host/lost_episodes": lost})
        if scaler is not None:
            row["host/scale"] = _autoscale(scaler, pool, row, u + 1, t2 - t0, on_event)
        row["host/actors"] = len(pool.active)
        rows.append(row)
        if clock is not None and len(rows) % _FETCH_EVERY == 0:  # the run's rows keep floats, not device arrays
            rows[-_FETCH_EVERY - 1:-1] = fetched_rows(rows[-_FETCH_EVERY - 1:-1])  # done: the newest may compute
        if on_row is not None:
            on_row(row)
        stopped = on_update(u + 1, params, opt_state, row, rollout.snapshot) if on_update is not None else None
        if stopped is not None:
            return HostResult(params, opt_state, fetched_rows(rows), u + 1, stopped)
    return HostResult(params, opt_state, fetched_rows(rows), learner.num_updates)


def _inputs(learner: _Learner, rollout: Rollout, u: int) -> tuple[Any, jax.Array, Any, Any]:
    """Update ``u``'s ``(inputs, key, step, steps)`` from ``rollout``, where the update takes them."""
    algorithm = learner.algorithm
    key, step = fold_in(learner.key, np.uint32(u)), algorithm.counter(u)
    steps = algorithm.counter(learner.num_updates)
    if jax.process_count() == 1:
        traj = algorithm.inputs(rollout)  # a replay in host memory takes them where they are
        return (traj if algorithm.host_opt_state else jax.device_put(traj, learner.rollout_sharding)), key, step, steps
    # Every process's rollout is its share of the job's batch (envs axis).
    traj = jax.tree.map(lambda x: jax.make_array_from_process_local_data(learner.rollout_sharding, x), rollout.traj)
    return (traj, *_place((key, step, steps), learner.place))


def _keep_learned(err: Exception, on_update: OnUpdate | None, u: int, start: int, params: Any, opt_state: Any) -> None:
    """The run fails at update ``u`` with ``err``: lets the caller keep the updates before it (alone:
    the other processes of a multi-process run are not at this point to take part in a save). A save
    that fails too is noted on ``err``, which the caller raises."""
    if on_update is None or u <= start or jax.process_count() != 1:
        return
    try:
        on_update(u, params, opt_state, None, None)
    except Exception as save_err:
        err.add_note(f"the updates before it could not be saved: {type(save_err).__name__}: {save_err}")


_FETCH_EVERY = 256
"""A run's rows fetch their metrics in groups of this many updates (one call)."""


class _LagClock:
    """``host/learner_busy`` when an update's metrics are not waited for. After update ``u`` is
    dispatched the learner looks at update ``u - 1`` (done before ``u`` starts), and row ``u`` reports
    that update's share of the time since the one before it was done,
    ``(done[u-1] - began[u-1]) / (done[u-1] - done[u-2])``, ``began`` being when the device could
    start it (its rollout taken from the queue, the update before it done). When update ``u - 1`` is
    still running the learner waits for it and ``done`` is when it ends (and its length is kept);
    when it has ended already, ``done`` is ``began`` plus the length last measured (the first time,
    the learner waits for update ``u`` itself, which then runs alone, to measure one). The first update
    of a call is waited for (it compiles): its row and the next report its own figure (:attr:`busy`)."""

    def __init__(self):
        self.done = 0.0  # when the newest update looked at was done
        self.busy = 0.0  # that update's figure
        self.update_s: float | None = None  # the length of an update, last measured
        self._pending: tuple[Any, float] | None = None  # (metrics, arrived) of the update in flight

    def after_dispatch(self, metrics: Any, arrived: float) -> float:
        pending, self._pending = self._pending, (metrics, arrived)
        if pending is None:
            return self.busy
        began = max(pending[1], self.done)
        if computed(pending[0]):  # it ended unseen: the device waited for this update's rollout
            if self.update_s is None:
                start = time.perf_counter()
                jax.block_until_ready(metrics)
                self.update_s = time.perf_counter() - start
            done = min(began + self.update_s, time.perf_counter())
        else:
            jax.block_until_ready(pending[0])
            done = time.perf_counter()
            self.update_s = done - began
        self.busy = (done - began) / max(done - self.done, 1e-9)
        self.done = done
        return self.busy


class Deferred(NamedTuple):
    """A metric still on the device: element ``index`` of ``values``, a vector holding an update's
    metrics of one dtype (:func:`_deferred`: one transfer fetches them all)."""

    values: jax.Array
    index: int


@jax.jit
def _stacked(metrics: dict[str, jax.Array]) -> dict[str, jax.Array]:
    by_dtype: dict[str, list[jax.Array]] = {}
    for name in sorted(metrics):
        by_dtype.setdefault(str(metrics[name].dtype), []).append(metrics[name].reshape(()))
    return {dtype: jnp.stack(values) for dtype, values in by_dtype.items()}


def _deferred(metrics: dict[str, Any]) -> dict[str, Any]:
    """``metrics`` with the device arrays as :class:`Deferred` elements of one vector per dtype (one
    compiled call), other values as they are."""
    arrays = {k: v for k, v in metrics.items() if isinstance(v, jax.Array)}
    if not arrays:
        return metrics
    stacked, seen = _stacked(arrays), {}
    out = dict(metrics)
    for k in sorted(arrays):  # the order _stacked stacks them in
        dtype = str(arrays[k].dtype)
        seen[dtype] = seen.get(dtype, -1) + 1
        out[k] = Deferred(stacked[dtype], seen[dtype])
    return out


def fetched_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with the metrics still on the device (:class:`Deferred` elements) as Python floats
    (one fetch for all of them); a new list when there were any."""
    arrays = {id(v.values): v.values for row in rows for v in row.values() if isinstance(v, Deferred)}
    if not arrays:
        return rows
    # On the CPU an array's numpy view costs ~1.5 us, device_get's ~13 us an array; elsewhere device_get
    # starts every transfer before it waits for any.
    devices = list(arrays.values())
    on_cpu = next(iter(devices[0].devices())).platform == "cpu"
    fetched = [np.asarray(a) for a in devices] if on_cpu else jax.device_get(devices)
    host = {key: np.asarray(h, np.float64).reshape(-1).tolist() for key, h in zip(arrays, fetched)}

    return [{k: host[id(v.values)][v.index] if isinstance(v, Deferred) else v for k, v in row.items()} for row in rows]


def _autoscale(scaler: Any, pool: ActorPool, row: dict[str, Any], updates: int, update_s: float,
               on_event: Callable[[dict[str, Any]], None] | None) -> int:
    """Feeds the update's measurements to the controller and applies its decision: starts an actor
    (``make_env`` for it may fail: the count stays and the failure is the event) or retires the newest.
    Returns the change made (+1, -1 or 0); each decision goes to ``on_event`` with its reason."""
    decision = scaler.observe(row["host/learner_busy"], 1.0 - row["host/actor_busy"], update_s,
                              row["host/queue_depth"])
    if decision is None:
        return 0
    event = {"update": updates, "env_steps": row["env_steps"], "kind": "autoscale", "from": scaler.count,
             **decision.record()}
    try:
        if decision.change > 0:
            pool.add(pool.spawn(max(a.index for a in pool.actors) + 1))
        else:
            event["retired_actor"] = pool.retire().index
    except Exception as err:  # the new actor's envs could not be made: keep the count, measure afresh
        scaler.reset_window()
        event.update(actors=scaler.count, change=0, failed=f"{type(err).__name__}: {err}")
        if on_event is not None:
            on_event(event)
        return 0
    scaler.applied(decision)
    if on_event is not None:
        on_event(event)
    return decision.change


def _follow_servers(servers: Any, pool: ActorPool, updates: int, env_steps: int,
                    on_event: Callable[[dict[str, Any]], None] | None) -> int:
    """Brings the actors in line with the pool of env servers after an update: actors whose server died
    are reported (their episodes lost, their address not retried for ``servers.retry_s``), servers taken
    out of the pool have their actors retired, servers added (or back after ``retry_s``) get one.
    Returns the episodes the actors that left lost."""
    lost, events = 0, []
    count = len(pool.active)

    def event(kind: str, address: str, reason: str, change: int, **extra: Any) -> None:
        nonlocal count
        events.append({"update": updates, "env_steps": env_steps, "kind": kind, "address": address,
                       "from": count, "actors": count + change, "change": change, "reason": reason, **extra})
        count += change

    for actor in pool.actors:
        if actor.dropped and not getattr(actor, "reported", False):
            actor.reported = True
            servers.failed(actor.address)
            lost += actor.lost_when_dropped
            count += 1  # it already left pool.active: count it once more to report the change from it
            event("server_lost", actor.address, f"actor {actor.index} left: {actor.dropped}", -1,
                  lost_episodes=actor.lost_when_dropped)
    wanted = servers.addresses()
    active = {a.address: a for a in pool.active}
    for address, actor in active.items():
        if address not in wanted:
            pool.retire(actor)
            event("server_removed", address, f"taken out of {servers.name}: actor {actor.index} retires", -1)
    for address in wanted:
        if address in active or not servers.joinable(address):
            continue
        a = max(x.index for x in pool.actors) + 1
        servers.bind(a, address)
        try:
            pool.add(pool.spawn(a))
        except Exception as err:  # the server is not there (yet): try again after retry_s
            servers.failed(address)
            event("server_unreachable", address, f"no actor for it: {type(err).__name__}: {err}", 0)
            continue
        event("server_joined", address, f"listed in {servers.name}: actor {a} collects from it", +1)
    if on_event is not None:
        for e in events:
            on_event(e)
    return lost


def _job_episodes(rollout: Rollout) -> tuple[int, float | None, float | None, int, int]:
    """``(episodes, their mean return, mean length, env restarts, lost episodes)`` of the rollouts
    every process learned from in this update (one fixed-size all-gather in a run of several
    processes; this rollout's with one)."""
    returns = [r for r, _ in rollout.episodes]
    lengths = [n for _, n in rollout.episodes]
    if jax.process_count() == 1:
        return (len(returns), float(np.mean(returns)) if returns else None,
                float(np.mean(lengths)) if lengths else None, rollout.env_restarts, rollout.lost_episodes)
    total = distributed.allgather_floats([len(returns), sum(returns), sum(lengths), rollout.env_restarts,
                                          rollout.lost_episodes]).sum(axis=0)
    count = int(total[0])
    return (count, float(total[1] / count) if count else None, float(total[2] / count) if count else None,
            int(total[3]), int(total[4]))


def _row(update: int, env_steps: int, steps_here: int, elapsed: float, rollout: Rollout,
         episodes: tuple[int, float | None, float | None], metrics: dict, depth: int,
         learner_busy: float) -> dict[str, Any]:
    """Update ``update``'s row; ``env_steps`` counts the run's, ``steps_here`` and ``elapsed`` this
    call's; ``episodes`` (count, mean return, mean length) those every process's rollout ended, the
    other ``host/*`` figures this process's. Metrics still on the device stay there (fetched_rows)."""
    p50, p99 = _percentiles(rollout.env_step_s * 1e3, (50, 99))
    busy = rollout.policy_s + float(rollout.env_step_s.sum())
    return {
        "updates": update + 1, "env_steps": env_steps, "episodes": episodes[0],
        "episode_return_mean": episodes[1], "episode_length_mean": episodes[2],
        **{k: v if isinstance(v, Deferred) else float(v) for k, v in metrics.items()},
        "sps": steps_here / max(elapsed, 1e-9), "wall_time_s": elapsed,
        "host/policy_lag": update - rollout.version, "host/queue_depth": depth, "host/actor": rollout.actor,
        "host/actor_busy": busy / max(rollout.total_s, 1e-9),
        "host/learner_busy": learner_busy,
        "host/env_step_p50_ms": float(p50), "host/env_step_p99_ms": float(p99),
    }


def _percentiles(x: np.ndarray, qs: tuple[float, ...]) -> list[float]:
    """``np.percentile(x, qs)`` (linear interpolation between the closest ranks) of a short 1-D ``x``,
    without numpy's per-call overhead (~0.5 ms on a busy 2-core CPU, once per update)."""
    ordered = sorted(x.tolist())
    out = []
    for q in qs:
        rank = q / 100 * (len(ordered) - 1)
        lo = int(rank)
        hi = min(lo + 1, len(ordered) - 1)
        out.append(ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo))
    return out
