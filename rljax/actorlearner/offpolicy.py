"""Off-policy algorithms (DQN and its kin, SAC, TD3, D4PG) on host envs: actors make n-step replay
items, the learner keeps the replay and runs the algorithm's own update on it.

Every algorithm registered on the off-policy skeleton runs here unchanged: its
:class:`~rljax.agents.offpolicy.OffPolicyProgram` (``Agent.offpolicy``) is the same code the
compiled JAX path runs, without the env stack.

- **Actors** act with the algorithm's behaviour policy (``hooks.behaviour``: epsilon-greedy on the
  schedule, SAC's sample, TD3's noisy action, uniform actions before ``learning_starts``) for
  rollout ``k`` as the JAX path does for update ``k``: the :class:`~rljax.agents.offpolicy.UpdateContext`
  of ``k`` updates done. Each actor turns its rollouts into n-step items itself
  (:func:`~rljax.agents.offpolicy.n_step_items`, the last ``n - 1`` steps carried to its next
  rollout: terminated vs truncated exact, a truncated episode bootstrapping from its final
  observation), as Ape-X's actors do. Envs that restart start a fresh tail.
- **The learner** adds rollout ``u``'s items to its replay and runs ``gradient_steps`` learning
  steps of ``batch_size`` samples (:meth:`~rljax.agents.offpolicy.OffPolicyProgram.learn`): the
  replay ratio is ``gradient_steps / (num_envs * num_steps)`` gradient steps per env step, whatever
  the number of actors, and ``max_policy_lag`` bounds how old the acting params are. The learner's
  state is ``(learner, replay)``: a checkpoint holds the replay buffer (items, cursor, priorities).
- **Ape-X** (Horgan et al. 2018), with ``prioritized`` replay and several actors:
  ``HostOptions.apex_epsilon = eps`` gives actor ``i`` of ``A`` the fixed exploration rate
  ``eps ** (1 + apex_alpha * i / (A - 1))`` (a Q-learner's ``epsilon``) instead of the schedule, and
  ``HostOptions.initial_priority = "td"`` gives new items their TD error under the learner's
  current params as they are inserted, instead of the largest priority seen.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from rljax.actorlearner.engine import Finisher, HostAlgorithm
from rljax.host.spaces import HostEnvSpaces
from rljax.agents.base import observation_normalizer
from rljax.actorlearner.hostreplay import HostReplay, sample_indices
from rljax.agents.offpolicy import (OffPolicyConfig, OffPolicyProgram, Presampled, Replay, ReplayItem, n_step_items,
                                    normalize_items, presampled_replay)
from rljax.core.wrappers import RunningMeanStd
from rljax.core.counters import Count
from rljax.core.rollout import Transition
from rljax.host.base import HostSpec

__all__ = ["apex_epsilons", "flag_items", "host_sampled", "offpolicy_algorithm", "offpolicy_program"]

INITIAL_PRIORITIES = ("max", "td")
"""How items enter a prioritised replay on the host path: the largest priority so far, or their TD error."""


def apex_epsilons(num_actors: int, epsilon: float, alpha: float = 7.0) -> np.ndarray:
    """Ape-X's per-actor exploration rates: ``epsilon ** (1 + alpha * i / (A - 1))`` for actor ``i``
    of ``A`` (``epsilon`` for one actor), float32 ``[A]``."""
    i = np.arange(num_actors, dtype=np.float64)
    return (epsilon ** (1.0 + alpha * i / max(num_actors - 1, 1))).astype(np.float32)


def offpolicy_program(config: OffPolicyConfig, spec: HostSpec) -> OffPolicyProgram:
    """The off-policy program of ``config``'s algorithm for host envs of ``spec``'s spaces (the
    algorithm's action-space rule applies: DQN refuses a Box, SAC a Discrete)."""
    from rljax.agents import build_agent

    agent = build_agent(config, HostEnvSpaces.of(spec, config.env), None, None)
    if agent.offpolicy is None:
        raise TypeError(f"{type(config).__name__} is not built on the off-policy skeleton")
    return agent.offpolicy


def offpolicy_algorithm(config: OffPolicyConfig, spec: HostSpec, num_updates: int, *, num_actors: int = 1,
                        apex_epsilon: float = 0.0, apex_alpha: float = 7.0, initial_priority: str = "max",
                        replay: str = "device", frames_per_item: float = 1.5) -> HostAlgorithm:
    """``config``'s algorithm as the actor-learner path runs it (see the module docstring).

    Args:
        config: an :class:`~rljax.agents.offpolicy.OffPolicyConfig` subclass instance.
        spec: the host envs' spaces and batch size (``num_envs``).
        num_updates: the updates of the whole run (the schedules' length).
        num_actors: the actors the run starts with (Ape-X's exploration rates are spread over them).
        apex_epsilon: > 0: actor ``i`` acts with :func:`apex_epsilons` ``[i]`` as its ``epsilon``
            (needs an algorithm that explores with one: DQN, C51, QR-DQN); 0: the config's schedule.
        apex_alpha: the exponent's spread (Ape-X: 7).
        initial_priority: ``"max"`` or ``"td"`` (prioritised replay only; see the module docstring).
        replay: ``"device"`` (the skeleton's buffer on the learner's device) or ``"host"``
            (:class:`~rljax.actorlearner.hostreplay.HostReplay` in host memory; a prioritised replay keeps
            its priorities on the device).
        frames_per_item: ``replay="host"`` with stacked frames: the frame ring's size per item.

    Returns:
        A :class:`~rljax.actorlearner.engine.HostAlgorithm`: params are the algorithm's learner
        (params, targets, optimiser states; with ``normalize_obs`` paired with the observation
        statistics), opt_state its replay; the learner is published to the actors uncopied.
    """
    _check_options(config, initial_priority, replay)
    program = offpolicy_program(config, spec)
    hyper, total = config.hyperparams(), Count.of(num_updates)
    if apex_epsilon:
        if "epsilon" not in program.context(Count.of(0), total, hyper).values:
            raise ValueError(f"apex_epsilon={apex_epsilon}: {type(config).__name__} does not explore with an epsilon "
                             f"(Ape-X's per-actor rates are for DQN, C51, QR-DQN)")
        if not 0 < apex_epsilon < 1:
            raise ValueError(f"apex_epsilon={apex_epsilon}: must lie in (0, 1) (Ape-X: 0.4)")
    epsilons = apex_epsilons(max(num_actors, 1), apex_epsilon, apex_alpha) if apex_epsilon else None
    state = _LearnerState(program, config.normalize_obs)

    def policy(params: Any, obs: Any, key: jax.Array, step: Any, updates: Any, epsilon: Any):
        learner, stats = state.split(params)
        ctx = program.context(Count.from_int(updates), total, hyper)
        if epsilons is not None:
            ctx = ctx._replace(values={**ctx.values, "epsilon": epsilon})
        action = program.hooks.behaviour(learner, ctx)(jax.random.fold_in(key, step), state.normalize(stats, obs))
        return action, jnp.zeros(action.shape[:1], jnp.float32)

    def rollout_args(k: int, actor: int) -> tuple:
        return np.uint32(k), np.float32(0.0) if epsilons is None else _rate(epsilons, actor)

    if replay == "host":
        init, learn = _host_replay(program, state, spec, frames_per_item, initial_priority)
    else:
        init, learn = _device_replay(program, state, initial_priority)

    def update(params: Any, opt_state: Any, inputs: Any, key: jax.Array, updates: Any, num_updates: Any):
        params, opt_state, metrics = learn(params, opt_state, inputs, key, updates, num_updates)
        if epsilons is not None:  # the row reports the rate its rollout's actor explored with
            metrics = {**metrics, "epsilon": _rate(epsilons, int(inputs[1]))}
        return params, opt_state, metrics

    return HostAlgorithm(init=init, policy=jax.jit(policy), update=update,
                         inputs=lambda rollout: (rollout.items, rollout.actor), counter=np.uint32,
                         rollout_args=rollout_args, finisher=_finisher(program, spec, hyper), donates_params=False,
                         host_opt_state=replay == "host")


def _rate(epsilons: np.ndarray, actor: int) -> np.float32:
    """Actor ``actor``'s Ape-X rate: the rates cycle over actor numbers, so an actor that joins later (a
    server back in a pool, an autoscaled one) takes the rate of the actor its number wraps to."""
    return epsilons[actor % len(epsilons)]


REPLAYS = ("device", "host")
"""Where the host path's off-policy learner keeps its replay."""


def _check_options(config: OffPolicyConfig, initial_priority: str, replay: str) -> None:
    if initial_priority not in INITIAL_PRIORITIES:
        raise ValueError(f"initial_priority={initial_priority!r}; valid: {', '.join(INITIAL_PRIORITIES)}")
    if initial_priority == "td" and not config.prioritized:
        raise ValueError("initial_priority='td' sets the priorities of a prioritised replay: add --prioritized")
    if replay not in REPLAYS:
        raise ValueError(f"replay={replay!r}; valid: {', '.join(REPLAYS)}")


class _LearnerState:
    """How the learner's state is laid out: the algorithm's learner, paired with the running observation
    statistics when it normalises observations (replay keeps raw observations, normalised when used
    with the statistics of that moment, as on the JAX path)."""

    def __init__(self, program: OffPolicyProgram, normalized: bool):
        self.normalized, self._normalize = normalized, observation_normalizer(program.venv)[1]

    def init(self, learner: Any, obs_shape: tuple[int, ...]) -> Any:
        return (learner, RunningMeanStd.init(obs_shape)) if self.normalized else learner

    def split(self, params: Any) -> tuple[Any, Any]:
        return params if self.normalized else (params, None)

    def join(self, learner: Any, stats: Any) -> Any:
        return (learner, stats) if self.normalized else learner

    def normalize(self, stats: Any, obs: Any) -> Any:
        return self._normalize(stats, obs)

    def observed(self, stats: Any, items: ReplayItem) -> Any:
        """The statistics with every observation acted on (each step's item once; placeholders left out)."""
        return stats.merge(RunningMeanStd.from_batch(items.obs, items.valid)) if self.normalized else stats

    def prepare(self, stats: Any) -> Any:
        return (lambda b: normalize_items(b, lambda x: self._normalize(stats, x))) if self.normalized else None


def _metrics(config: OffPolicyConfig, metrics: dict[str, jax.Array]) -> dict[str, jax.Array]:
    ratio = config.gradient_steps / config.env_steps_per_update  # gradient steps per env step
    return {**metrics, "replay_ratio": jnp.float32(ratio)}


def _device_replay(program: OffPolicyProgram, state: _LearnerState, initial_priority: str,
                   replay: Replay | None = None, stored: Callable[[ReplayItem], Any] | None = None) -> tuple[Any, Any]:
    """``(init, update)`` with the skeleton's replay on the learner's device (``update`` takes the
    rollout's ``(items, actor)``). ``replay`` replaces the program's for learning (its ``sample``),
    and the buffer takes ``stored(items)`` in place of the items: :func:`_host_replay`'s priorities
    on the device for items kept in host memory."""
    config, hooks, hyper = program.config, program.hooks, program.config.hyperparams()
    stored = (lambda items: items) if stored is None else stored

    def init(key: jax.Array, obs: Any) -> tuple[Any, Any]:
        learner = hooks.init_learner(key, obs, hyper)
        example = stored(program.example_item(jax.tree.map(lambda x: x[0], obs)))
        return state.init(learner, tuple(obs.shape[1:])), program.replay.init(example, hyper.priority_alpha)

    def insert(params: Any, buffer: Any, items: ReplayItem, key: jax.Array, updates: Any, num_updates: Any):
        learner, stats = state.split(params)
        stats = state.observed(stats, items)
        if initial_priority == "td":
            ctx = program.context(Count.from_int(updates), Count.from_int(num_updates), hyper)
            buffer = _insert_with_td(program, learner, buffer, items, stored(items), jax.random.split(key)[0], ctx,
                                     state.prepare(stats))
        else:
            buffer = program.replay.add(buffer, stored(items))
        return buffer, stats

    def learn(params: Any, stats: Any, buffer: Any, items: ReplayItem, key: jax.Array, updates: Any,
              num_updates: Any):
        ctx = program.context(Count.from_int(updates), Count.from_int(num_updates), hyper)
        learner, buffer, metrics = program.learn(state.split(params)[0], buffer, items, jax.random.split(key)[1], ctx,
                                                 prepare=state.prepare(stats), add=False, replay=replay)
        return state.join(learner, stats), buffer, _metrics(config, metrics)

    # Two programs: compiled as one, the sampling's gathers fuse with the insertion's in-place write
    # and read the buffer as it was, so the compiler copies the whole buffer every update (measured
    # on the CPU: ~24 ms an update for a 1e6-item MuJoCo replay, against ~5 ms for the rest of it).
    insert, learn = jax.jit(insert, donate_argnums=(1,)), jax.jit(learn, donate_argnums=(2,))

    def update(params: Any, buffer: Any, inputs: Any, key: jax.Array, updates: Any, num_updates: Any):
        items = inputs[0]
        buffer, stats = insert(params, buffer, items, key, updates, num_updates)
        return learn(params, stats, buffer, items, key, updates, num_updates)

    return init, update


def _host_replay(program: OffPolicyProgram, state: _LearnerState, spec: HostSpec, frames_per_item: float,
                 initial_priority: str) -> tuple[Any, Any]:
    """``(init, update)`` with the replay's items in host memory (:class:`HostReplay`); each update
    adds the rollout's items there first. The opt_state is the buffer's numpy state, with a
    prioritised replay's sum tree (``"priorities"``) beside it.

    Uniform: the update draws the slots the device replay would for its key
    (:func:`~rljax.actorlearner.hostreplay.sample_indices`), gathers them, and learns from them on the
    device (:func:`~rljax.agents.offpolicy.presampled_replay`). Prioritised: the priorities stay on the
    device (the skeleton's prioritised buffer over a one-flag item per slot); each gradient step draws
    its slots and weights there and fetches the items from host memory (a host callback in the compiled
    loop), so the priorities it set are the next step's, as with the device replay: the same samples,
    losses and priorities (and params, but where the compiler fuses the device replay's gather into
    the gradient, as in TD3's critic: there they differ in their last bits)."""
    config, hooks, hyper = program.config, program.hooks, program.config.hyperparams()
    replay, presampled = [None, None], presampled_replay()  # the buffer, and the state it last returned

    def new_buffer(obs: Any) -> HostReplay:
        example = jax.tree.map(np.asarray, program.example_item(jax.tree.map(lambda x: x[0], obs)))
        return HostReplay(example, config.buffer_size, config.n_step, frames_per_item)

    if config.prioritized:
        return _host_prioritized(program, state, spec, new_buffer, initial_priority)

    def init(key: jax.Array, obs: Any) -> tuple[Any, Any]:
        learner = hooks.init_learner(key, obs, hyper)
        replay[0] = new_buffer(obs)
        replay[1] = replay[0].state()
        return state.init(learner, tuple(obs.shape[1:])), replay[1]

    @jax.jit
    def observed(params: Any, items: ReplayItem) -> Any:
        return state.observed(state.split(params)[1], items)

    @jax.jit
    def learn(params: Any, stats: Any, batches: Presampled, key: jax.Array, updates: Any, num_updates: Any):
        ctx = program.context(Count.from_int(updates), Count.from_int(num_updates), hyper)
        learner, _, metrics = program.learn(state.split(params)[0], batches, None, jax.random.split(key)[1], ctx,
                                            prepare=state.prepare(stats), add=False, replay=presampled)
        return state.join(learner, stats), _metrics(config, metrics)

    def update(params: Any, buffer: Any, inputs: Any, key: jax.Array, updates: Any, num_updates: Any):
        items, actor = inputs
        if buffer is not replay[1]:  # a restored checkpoint's buffer
            replay[0].load(buffer)
        stats = observed(params, items) if state.normalized else None
        replay[0].add(items, spec.num_envs, actor)
        indices = sample_indices(jax.random.split(key)[1], replay[0].size, config.gradient_steps, config.batch_size)
        batches = ReplayItem(**replay[0].gather(indices))
        params, metrics = learn(params, stats, Presampled(indices, batches, np.int32(0), np.int32(replay[0].size)),
                                key, updates, num_updates)
        replay[1] = replay[0].state()
        return params, replay[1], metrics

    return init, update


def flag_items(items: Any) -> ReplayItem:
    """What the device keeps of items (anything with their ``valid`` flags) whose data is in host
    memory: the flags, the other fields empty; the items of a prioritised replay's tree."""
    return ReplayItem(obs=(), action=(), reward=(), discount=(), next_obs=(), valid=items.valid)


def host_sampled(replay: Replay, buffer: Callable[[], HostReplay], item: Callable[[], Any]) -> Replay:
    """``replay`` (prioritised, over :func:`flag_items`) whose ``sample`` draws its slots and weights
    on the device and fetches the items at those slots from the :class:`HostReplay` ``buffer()`` with a
    host callback in the compiled program. ``item()`` gives one item's shapes and dtypes (no batch
    axis: arrays or ``jax.ShapeDtypeStruct``); both are called when the program is traced."""

    def gather(indices: np.ndarray) -> ReplayItem:
        return ReplayItem(**buffer().gather(np.asarray(indices)))

    def sample(tree: Any, key: jax.Array, batch_size: int, beta: Any):
        indices, _, weights = replay.sample(tree, key, batch_size, beta)
        shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct((*indices.shape, *x.shape), x.dtype), item())
        return indices, jax.pure_callback(gather, shapes, indices), weights

    return replay._replace(sample=sample)


def _host_prioritized(program: OffPolicyProgram, state: _LearnerState, spec: HostSpec,
                      new_buffer: Callable[[Any], HostReplay], initial_priority: str) -> tuple[Any, Any]:
    """:func:`_host_replay`'s prioritised case: :func:`_device_replay` over a buffer of flags
    (:func:`flag_items`), sampled by :func:`host_sampled` from the :class:`HostReplay`."""
    host: list[Any] = [None, None, None]  # the HostReplay, the state last returned, an item's shapes
    replay = host_sampled(program.replay, lambda: host[0], lambda: host[2])

    init_tree, update_tree = _device_replay(program, state, initial_priority, replay=replay, stored=flag_items)

    def init(key: jax.Array, obs: Any) -> tuple[Any, Any]:
        params, tree = init_tree(key, obs)
        host[0] = new_buffer(obs)
        host[2] = jax.eval_shape(program.example_item, jax.tree.map(lambda x: x[0], obs))
        host[1] = {**host[0].state(), "priorities": tree}
        return params, host[1]

    def update(params: Any, buffer: Any, inputs: Any, key: jax.Array, updates: Any, num_updates: Any):
        items, actor = inputs
        tree = buffer["priorities"]
        if buffer is not host[1]:  # a restored checkpoint's buffer: the priorities go where the params are
            host[0].load(buffer)
            tree = jax.device_put(tree, jax.tree.leaves(params)[0].sharding)
        else:  # where dispatch is asynchronous (accelerators; the CPU runs a program with host callbacks
            # at once) the update before may still be fetching items: the add must not overwrite them
            jax.block_until_ready(tree)
        try:
            host[0].add(items, spec.num_envs, actor)  # first: the sampling reads it
        except Exception:  # it kept the items before the refused one, the tree none: an update given the
            host[1] = None  # state handed out last puts that state (and its priorities) back first
            raise
        params, tree, metrics = update_tree(params, tree, inputs, key, updates, num_updates)
        host[1] = {**host[0].state(), "priorities": tree}
        return params, host[1], metrics

    return init, update


def _insert_with_td(program: OffPolicyProgram, learner: Any, buffer: Any, items: ReplayItem, stored: Any,
                    key: jax.Array, ctx: Any, prepare: Any = None) -> Any:
    """``buffer`` with ``stored`` (``items`` or what the buffer keeps of them) added at the items' TD
    error under ``learner`` (Ape-X's initial priorities): one learning step's ``td_abs`` on them, the
    step itself discarded (its gradients are dead code the compiler removes). Placeholder items get
    priority 0."""
    from rljax.core import buffers

    weights = items.valid.astype(jnp.float32)
    seen = items if prepare is None else prepare(items)  # as learning sees them
    _, td_abs, _ = program.hooks.learn_step(learner, seen, weights, key, ctx)
    buffer = buffers.prioritized_add(buffer, stored, mask=items.valid)
    n = td_abs.shape[0]
    slots = (buffer.replay.cursor - n + jnp.arange(n)) % buffer.replay.capacity
    return buffers.update_priorities(buffer, jnp.where(items.valid, slots, -1), td_abs + 1e-6)


def _finisher(program: OffPolicyProgram, spec: HostSpec, hyper: Any) -> Finisher:
    """The actors' n-step items: a tail of ``n - 1`` steps (placeholders, invalid, after a reset)
    and :func:`~rljax.agents.offpolicy.n_step_items` on each rollout."""
    n, num_envs = program.config.n_step, spec.num_envs
    obs = jax.ShapeDtypeStruct((num_envs,) + tuple(spec.obs_shape), spec.obs_dtype)
    example = program.hooks.example_action
    action = jax.ShapeDtypeStruct((num_envs,) + example.shape, example.dtype)

    def init() -> tuple[Transition, np.ndarray]:
        zeros = lambda s: np.zeros((n - 1,) + tuple(s.shape), s.dtype)  # noqa: E731
        flags = np.zeros((n - 1, num_envs), np.bool_)
        tail = Transition(obs=zeros(obs), action=zeros(action), reward=np.zeros((n - 1, num_envs), np.float32),
                          terminated=flags, truncated=flags.copy(), next_obs=zeros(obs), extras=())
        return tail, np.zeros((n - 1,), np.bool_)

    @jax.jit
    def finish(traj: Transition, carry: tuple[Transition, Any]) -> tuple[ReplayItem, tuple[Transition, Any]]:
        traj = traj._replace(action=traj.action.astype(action.dtype), reward=traj.reward.astype(jnp.float32))
        items, tail, valid = n_step_items(carry[0], carry[1], traj, n, hyper.gamma)
        return items, (tail, valid)

    return Finisher(init=init, finish=finish)
