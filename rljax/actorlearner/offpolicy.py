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

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rljax.actorlearner.engine import Finisher, HostAlgorithm, SpecEnv
from rljax.agents.base import observation_normalizer
from rljax.agents.offpolicy import OffPolicyConfig, OffPolicyProgram, ReplayItem, n_step_items, normalize_items
from rljax.core.wrappers import RunningMeanStd
from rljax.core.counters import Count
from rljax.core.rollout import Transition
from rljax.host.base import HostSpec

__all__ = ["apex_epsilons", "offpolicy_algorithm", "offpolicy_program"]

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

    agent = build_agent(config, SpecEnv(spec), None, None)
    if agent.offpolicy is None:
        raise TypeError(f"{type(config).__name__} is not built on the off-policy skeleton")
    return agent.offpolicy


def offpolicy_algorithm(config: OffPolicyConfig, spec: HostSpec, num_updates: int, *, num_actors: int = 1,
                        apex_epsilon: float = 0.0, apex_alpha: float = 7.0,
                        initial_priority: str = "max") -> HostAlgorithm:
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

    Returns:
        A :class:`~rljax.actorlearner.engine.HostAlgorithm`: params are the algorithm's learner
        (params, targets, optimiser states), opt_state its replay buffer; the update donates the
        replay (updated in place) and keeps the learner, which is published to the actors uncopied.
    """
    if initial_priority not in INITIAL_PRIORITIES:
        raise ValueError(f"initial_priority={initial_priority!r}; valid: {', '.join(INITIAL_PRIORITIES)}")
    if initial_priority == "td" and not config.prioritized:
        raise ValueError("initial_priority='td' sets the priorities of a prioritised replay: add --prioritized")
    program = offpolicy_program(config, spec)
    hooks, hyper = program.hooks, config.hyperparams()
    total = Count.of(num_updates)
    if apex_epsilon:
        probe = program.context(Count.of(0), total, hyper)
        if "epsilon" not in probe.values:
            raise ValueError(f"apex_epsilon={apex_epsilon}: {type(config).__name__} does not explore with an epsilon "
                             f"(Ape-X's per-actor rates are for DQN, C51, QR-DQN)")
        if not 0 < apex_epsilon < 1:
            raise ValueError(f"apex_epsilon={apex_epsilon}: must lie in (0, 1) (Ape-X: 0.4)")
    epsilons = apex_epsilons(max(num_actors, 1), apex_epsilon, apex_alpha) if apex_epsilon else None

    # With normalize_obs the learner's state is (learner, observation statistics); replay keeps raw
    # observations, normalised when used with the statistics of that moment (as on the JAX path).
    stats_of, normalize = observation_normalizer(program.venv)
    normalized = config.normalize_obs

    def split(params: Any) -> tuple[Any, Any]:
        return params if normalized else (params, None)

    def init(key: jax.Array, obs: Any) -> tuple[Any, Any]:
        learner = hooks.init_learner(key, obs, hyper)
        buffer = program.replay.init(program.example_item(jax.tree.map(lambda x: x[0], obs)), hyper.priority_alpha)
        return ((learner, RunningMeanStd.init(tuple(spec.obs_shape))) if normalized else learner), buffer

    def policy(params: Any, obs: Any, key: jax.Array, step: Any, updates: Any, epsilon: Any):
        learner, stats = split(params)
        ctx = program.context(Count.from_int(updates), total, hyper)
        if epsilons is not None:
            ctx = ctx._replace(values={**ctx.values, "epsilon": epsilon})
        action = hooks.behaviour(learner, ctx)(jax.random.fold_in(key, step), normalize(stats, obs))
        return action, jnp.zeros(action.shape[:1], jnp.float32)

    def rollout_args(k: int, actor: int) -> tuple:
        rate = np.float32(0.0) if epsilons is None else epsilons[min(actor, len(epsilons) - 1)]
        return np.uint32(k), rate

    def insert(params: Any, buffer: Any, items: ReplayItem, key: jax.Array, updates: Any, num_updates: Any):
        learner, stats = split(params)
        if normalized:  # every observation acted on once (each step's item; placeholders left out)
            stats = stats.merge(_masked_stats(items.obs, items.valid))
        if initial_priority == "td":
            ctx = program.context(Count.from_int(updates), Count.from_int(num_updates), hyper)
            buffer = _insert_with_td(program, learner, buffer, items, jax.random.split(key)[0], ctx,
                                     lambda x: normalize(stats, x))
        else:
            buffer = program.replay.add(buffer, items)
        return buffer, stats

    def learn(params: Any, stats: Any, buffer: Any, items: ReplayItem, key: jax.Array, updates: Any,
              num_updates: Any):
        learner, _ = split(params)
        ctx = program.context(Count.from_int(updates), Count.from_int(num_updates), hyper)
        prepare = (lambda b: normalize_items(b, lambda x: normalize(stats, x))) if normalized else None
        learner, buffer, metrics = program.learn(learner, buffer, items, jax.random.split(key)[1], ctx,
                                                 prepare=prepare, add=False)
        ratio = config.gradient_steps / config.env_steps_per_update  # gradient steps per env step
        return ((learner, stats) if normalized else learner), buffer, {**metrics, "replay_ratio": jnp.float32(ratio)}

    # Two programs: compiled as one, the sampling's gathers fuse with the insertion's in-place write
    # and read the buffer as it was, so the compiler copies the whole buffer every update (measured
    # on the CPU: ~24 ms an update for a 1e6-item MuJoCo replay, against ~5 ms for the rest of it).
    insert, learn = jax.jit(insert, donate_argnums=(1,)), jax.jit(learn, donate_argnums=(2,))

    def update(params: Any, buffer: Any, items: ReplayItem, key: jax.Array, updates: Any, num_updates: Any):
        buffer, stats = insert(params, buffer, items, key, updates, num_updates)
        return learn(params, stats, buffer, items, key, updates, num_updates)

    return HostAlgorithm(init=init, policy=jax.jit(policy), update=update,
                         inputs=lambda rollout: rollout.items, counter=np.uint32, rollout_args=rollout_args,
                         finisher=_finisher(program, spec, hyper), donates_params=False)


def _masked_stats(obs: jax.Array, mask: jax.Array) -> RunningMeanStd:
    """The mean and (population) variance of the rows of ``obs`` ``[B, *shape]`` where ``mask``, with
    their count (0: a batch that adds nothing when merged)."""
    w = mask.astype(jnp.float32).reshape((-1,) + (1,) * (obs.ndim - 1))
    count = jnp.sum(mask.astype(jnp.float32))
    x = obs.astype(jnp.float32)
    mean = jnp.sum(w * x, axis=0) / jnp.maximum(count, 1.0)
    var = jnp.sum(w * jnp.square(x - mean), axis=0) / jnp.maximum(count, 1.0)
    return RunningMeanStd(mean=mean, var=var, count=count, count_lo=jnp.float32(0.0))


def _insert_with_td(program: OffPolicyProgram, learner: Any, buffer: Any, items: ReplayItem, key: jax.Array,
                    ctx: Any, normalize: Any = None) -> Any:
    """``buffer`` with ``items`` added at their TD error under ``learner`` (Ape-X's initial
    priorities): one learning step's ``td_abs`` on them, the step itself discarded (its gradients
    are dead code the compiler removes). Placeholder items get priority 0."""
    from rljax.core import buffers

    weights = items.valid.astype(jnp.float32)
    seen = items if normalize is None else normalize_items(items, normalize)  # as learning sees them
    _, td_abs, _ = program.hooks.learn_step(learner, seen, weights, key, ctx)
    buffer = buffers.prioritized_add(buffer, items, mask=items.valid)
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
