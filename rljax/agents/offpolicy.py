"""What off-policy agents (DQN, SAC, TD3) share: the config fields, the update skeleton, replay.

An off-policy algorithm is its networks, its losses and a short ``make_<algo>`` that hands them to
:func:`make_offpolicy_agent`, with a config subclassing :class:`OffPolicyConfig` (see both).

One off-policy update, inside the compiled chunk:

1. **collect**: ``num_steps`` steps of the behaviour policy in the local envs (the shared
   :func:`rljax.core.rollout.rollout`), turned into n-step replay items (:class:`ReplayItem`) that keep
   terminated vs truncated apart: a truncated episode bootstraps from its final observation.
   The last ``n - 1`` steps are carried to the next update, so no step is lost at the boundary.
   Until ``n - 1`` real steps have been collected the carried tail holds placeholders; the items
   that start on one are marked invalid (``valid`` False), for any ``n`` and ``num_steps``.
2. **add** the items to this device's replay shard (uniform ring or prioritised sum tree).
   Invalid items get priority 0 in a prioritised buffer: never sampled, and kept out of the
   minimum priority that normalises the importance weights.
3. **learn**: ``gradient_steps`` steps of the algorithm's ``learn_step`` on sampled batches,
   gradients averaged over devices by the algorithm; priorities updated from the TD errors.
   Before ``learning_starts`` env steps the results are discarded (masked, not branched, so the
   program is the same at every update and vmaps over a population without a ``cond``).

Observation normalisation (``normalize_obs``) with replay: the env stack returns **raw**
observations and keeps the running statistics in its state (:func:`observation_stack`,
``rljax.core.wrappers.ObservationStatistics``). Replay stores raw observations; the behaviour policy
and the learner normalise them with the statistics current when they use them (acting: those of the
step; learning: those after this update's collection), as Stable-Baselines3's ``VecNormalize``
does for off-policy algorithms. Normalising at collection time instead would leave each stored item
scaled by statistics up to a full buffer old.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from rljax.core import buffers

from rljax.core import wrappers
from rljax.agents.base import (Agent, EncoderConfig, PolicyParams, UpdateOutput, into_action_space, desync,
                               first_obs, keyed_by_identity, make_env_stack, observation_normalizer, schedule_fraction,
                               stack_params)
from rljax.core.config import (MAX_ENV_STEPS, MAX_STEPS_PER_UPDATE, check_env_steps_per_update, check_floats,
                               check_ints, field, require)
from rljax.core.counters import Count, as_count
from rljax.core.returns import n_step_transitions
from rljax.core.rollout import EpisodeSummary, RolloutCarry, Transition, rollout

__all__ = ["OffPolicyConfig", "OffPolicyProgram", "OffPolicyState", "UpdateContext", "make_offpolicy_agent",
           "ReplayItem", "Collector", "n_step_items", "Presampled", "presampled_replay",
           "Replay", "make_replay", "observation_stack", "normalize_items", "init_collector", "collect",
           "replay_learning", "masked_mean", "polyak", "periodic"]


@dataclasses.dataclass(frozen=True)
class OffPolicyConfig(EncoderConfig):
    """The fields every off-policy algorithm shares, and their validation.

    A subclass redeclares a field to change its default or help line (it keeps its place), adds its
    own fields, and extends :meth:`validate` (calling this one first). Its sweepable fields, these
    five included, are exactly its ``<Algo>HyperParams``' fields.
    """

    # ----- structural -----
    num_steps: int = field(1, "env steps per env between learning phases")
    gradient_steps: int = field(1, "gradient steps per update (update-to-data ratio = this / (num_envs*num_steps))")
    batch_size: int = field(256, "replay samples per gradient step, over all devices")
    buffer_size: int = field(100_000, "replay capacity, over all devices (each device holds a shard)")
    learning_starts: int = field(1_000, "env steps collected before learning begins")
    n_step: int = field(1, "n-step returns (1 = one-step TD)")
    prioritized: bool = field(False, "proportional prioritised replay")
    normalize_obs: bool = field(False, "normalise observations by running mean/std (replay stores raw "
                                       "observations, normalised when sampled)")

    # ----- sweepable hyperparameters (traced) -----
    gamma: float = field(0.99, "discount factor", sweepable=True)
    tau: float = field(0.005, "target update rate: 1 = hard copy, < 1 = Polyak averaging", sweepable=True)
    max_grad_norm: float = field(10.0, "global-norm gradient clipping threshold", sweepable=True)
    priority_alpha: float = field(0.6, "prioritisation exponent (prioritized replay)", sweepable=True)
    priority_beta_start: float = field(0.4, "initial importance-sampling exponent, annealed to 1",
                                       sweepable=True)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raises ``ValueError`` naming any inconsistent value and what would be valid.

        Every field's type first (:func:`~rljax.core.config.check_types`), then the shared ranges: a
        replay capacity is an array size with int32 slot indices
        (:data:`~rljax.core.config.MAX_STEPS_PER_UPDATE`), ``learning_starts`` is compared with the
        exact env-step count (:data:`~rljax.core.config.MAX_ENV_STEPS`); the batch and the buffer are
        split over the devices.
        """
        self.validate_run()
        self.validate_encoder()
        check_ints(self, ("num_steps", "gradient_steps", "batch_size", "n_step"))
        check_ints(self, ("buffer_size",), 1, MAX_STEPS_PER_UPDATE,
                   why="(2**30: the replay buffer's int32 slot indices)")
        check_ints(self, ("learning_starts",), 0, MAX_ENV_STEPS, why="(2**53: the most env steps a run may take)")
        check_env_steps_per_update(self.env_steps_per_update, "num_envs * num_steps")
        for name in ("batch_size", "buffer_size"):
            v = getattr(self, name)
            require(v % self.num_devices == 0,
                     f"{name}={v} is not divisible by num_devices={self.num_devices}")
        require(self.buffer_size // self.num_devices >= self.num_envs // self.num_devices * self.num_steps,
                 f"buffer_size={self.buffer_size} cannot hold one update of num_envs * num_steps = "
                 f"{self.num_envs * self.num_steps} transitions")
        check_floats(self, ("max_grad_norm",), 0, low_open=True)
        check_floats(self, ("gamma", "priority_beta_start"), 0, 1)
        check_floats(self, ("tau",), 0, 1, low_open=True)
        check_floats(self, ("priority_alpha",), 0)

    @property
    def env_steps_per_update(self) -> int:
        """Env steps per update over all devices: ``num_envs * num_steps``."""
        return self.num_envs * self.num_steps


class ReplayItem(NamedTuple):
    """One replay entry: an n-step transition.

    Attributes:
        obs: ``[*obs_shape]`` the observation the action was taken in.
        action: ``[*action_shape]``.
        reward: float32, ``sum_{k<m} gamma^k r_{t+k}`` (``m <= n`` steps, fewer at an episode end).
        discount: float32, ``gamma^m`` (0 after a termination): multiplies the bootstrap value.
        next_obs: ``[*obs_shape]`` the bootstrap observation (the final observation on truncation).
        valid: bool, False for the placeholder items that start on the not-yet-filled n-step tail
            (the first ``n - 1`` items of each env).
    """

    obs: Any
    action: jax.Array
    reward: jax.Array
    discount: jax.Array
    next_obs: Any
    valid: jax.Array


class Collector(struct.PyTreeNode):
    """The acting side of an off-policy train state.

    Attributes:
        env_state: the wrapped, batched env state.
        obs: current observations ``[B, *obs_shape]``.
        tail: the last ``n - 1`` steps collected so far, oldest first, ``Transition`` ``[n-1, B]``.
        tail_valid: bool ``[n - 1]``, which tail steps are real: a placeholder's flag becomes True
            only once a real step has been shifted into its position (after ``n - 1`` steps in all).
    """

    env_state: Any
    obs: Any
    tail: Transition
    tail_valid: jax.Array


class Replay(NamedTuple):
    """Uniform or prioritised replay behind one interface.

    Attributes:
        init: ``init(example_item, alpha) -> state`` (``alpha``, the prioritisation exponent, may
            be traced; uniform replay ignores it).
        add: ``add(state, items[N]) -> state``; prioritised replay gives items whose ``valid`` is
            False priority 0 (never sampled); uniform replay stores them, and the learner gives them
            weight 0.
        sample: ``sample(state, key, batch_size, beta) -> (indices, items, weights)``; weights are
            ones for uniform replay.
        update: ``update(state, indices, td_abs, mask) -> state``; a no-op for uniform replay.
        size: ``size(state) -> int32``.
    """

    init: Callable[[Any, Any], Any]
    add: Callable[[Any, Any], Any]
    sample: Callable[[Any, jax.Array, int, Any], tuple[jax.Array, Any, jax.Array]]
    update: Callable[[Any, jax.Array, jax.Array, jax.Array], Any]
    size: Callable[[Any], jax.Array]


def make_replay(capacity: int, prioritized: bool, priority_eps: float = 1e-6) -> Replay:
    """A :class:`Replay` over ``rljax.core.buffers``.

    Args:
        capacity: slots in this device's shard.
        prioritized: proportional prioritised replay (Schaul et al. 2016) instead of uniform.
        priority_eps: added to ``|TD error|`` so no item becomes unsampleable.
    """
    if not prioritized:
        def sample(state, key, batch_size, beta):
            del beta
            s = buffers.sample(state, key, batch_size)
            return s.indices, s.batch, jnp.ones((batch_size,), jnp.float32)

        return Replay(init=lambda item, alpha: buffers.init(item, capacity), add=buffers.add, sample=sample,
                      update=lambda state, idx, td, mask: state, size=lambda s: s.size)

    def p_sample(state, key, batch_size, beta):
        s = buffers.prioritized_sample(state, key, batch_size, beta)
        return s.indices, s.batch, s.weights

    def p_update(state, indices, td_abs, mask):
        # Masked entries get index -1, which update_priorities ignores.
        return buffers.update_priorities(state, jnp.where(mask, indices, -1), td_abs + priority_eps)

    def p_add(state, items):
        return buffers.prioritized_add(state, items, mask=items.valid)

    return Replay(init=lambda item, alpha: buffers.prioritized_init(item, capacity, alpha),
                  add=p_add, sample=p_sample, update=p_update, size=lambda s: s.size)


class Presampled(NamedTuple):
    """An update's samples drawn before it (a replay kept elsewhere, e.g. in host memory).

    Attributes:
        indices: int32 ``[G, b]``, the slots of each gradient step's batch.
        items: :class:`ReplayItem` ``[G, b]``, the items at those slots.
        step: int32, the gradient steps taken so far.
        size: int32, the items the replay held when they were drawn.
    """

    indices: jax.Array
    items: Any
    step: jax.Array
    size: jax.Array


def presampled_replay() -> Replay:
    """The :class:`Replay` of :class:`Presampled` batches: gradient step ``g`` gets ``items[g]``
    (the key it is handed is not used: the batches were drawn with it), weights of one (uniform
    replay), and no priorities. Nothing is added to it."""

    def sample(state: Presampled, key: jax.Array, batch_size: int, beta: Any):
        del key, beta
        return (state.indices[state.step], jax.tree.map(lambda x: x[state.step], state.items),
                jnp.ones((batch_size,), jnp.float32))

    def refuse(*args: Any) -> Any:
        raise TypeError("a presampled replay holds one update's batches: nothing is added to it")

    return Replay(init=refuse, add=refuse, sample=sample,
                  update=lambda state, indices, td, mask: state._replace(step=state.step + 1),
                  size=lambda state: state.size)


def observation_stack(venv: Any, normalize_obs: bool, axis_name: str | None
                      ) -> tuple[Any, Callable[[Any, Any], Any]]:
    """The env stack and observation normaliser of an off-policy agent.

    Args:
        venv: the batched env stack without observation normalisation.
        normalize_obs: track observation statistics.
        axis_name: the device axis the statistics are merged over.

    Returns:
        ``(venv, normalize)``: with ``normalize_obs``, ``venv`` wrapped in
        ``rljax.core.wrappers.ObservationStatistics`` (raw observations, statistics in its state) and
        ``normalize(env_state, obs) = clip((obs - mean) / sqrt(var + eps), -10, 10)`` with the
        statistics in ``env_state``; otherwise ``venv`` unchanged and ``normalize`` the identity.
    """
    if not normalize_obs:
        return venv, lambda env_state, obs: obs
    venv = wrappers.ObservationStatistics(venv, axis_name=axis_name)
    return venv, venv.normalize


def normalize_items(items: ReplayItem, normalize: Callable[[Any], Any]) -> ReplayItem:
    """``items`` with ``obs`` and ``next_obs`` passed through ``normalize``."""
    return items._replace(obs=normalize(items.obs), next_obs=normalize(items.next_obs))


def _window(tail: Transition, tail_valid: jax.Array, traj: Transition) -> tuple[Transition, jax.Array]:
    """The previous tail followed by the new rollout, ``[n - 1 + T, B]``, and which steps are real."""
    window = jax.tree.map(lambda a, b: jnp.concatenate([a, b], axis=0), tail, traj)
    valid = jnp.concatenate([tail_valid, jnp.ones((traj.reward.shape[0],), jnp.bool_)])
    return window, valid


def init_collector(venv: Any, env_params: Any, policy: Callable, key: jax.Array, n: int) -> Collector:
    """Resets the envs and allocates an (invalid) tail of ``n - 1`` steps."""
    k_reset, k_shape = jax.random.split(key)
    obs, env_state = venv.reset(k_reset, env_params)
    carry = RolloutCarry(env_state, obs)
    shapes = jax.eval_shape(lambda: rollout(venv, env_params, policy, carry, k_shape, 1)[1])
    tail = jax.tree.map(lambda s: jnp.zeros((n - 1,) + s.shape[1:], s.dtype), shapes)
    return Collector(env_state=env_state, obs=obs, tail=tail, tail_valid=jnp.zeros((n - 1,), jnp.bool_))


def collect(venv: Any, env_params: Any, policy: Callable, collector: Collector, key: jax.Array,
            num_steps: int, n: int, gamma: jax.Array, observe: Callable[[Any, Any], Any] | None = None
            ) -> tuple[Collector, ReplayItem, EpisodeSummary]:
    """Acts for ``num_steps`` steps and returns ``num_steps * B`` n-step replay items.

    Item ``t`` starts at step ``t`` of the window ``tail + rollout`` and uses steps ``t .. t + n - 1``;
    it is valid iff step ``t`` is real (the steps after a real step are real). The new tail is the
    window's last ``n - 1`` steps with their validity, so with ``n - 1 > num_steps`` placeholders
    move through the tail for several updates and stay invalid until they leave it.

    Args:
        venv: the batched env stack.
        env_params: env params.
        policy: ``policy(key, obs[B]) -> (action[B], extras)``.
        collector: the acting state.
        key: PRNG key.
        num_steps: T, steps per env.
        n: n-step horizon (Python int >= 1).
        gamma: discount (may be traced).
        observe: ``observe(env_state, obs)``, what the policy sees (see :func:`rljax.core.rollout.rollout`);
            the items keep the env's observations.

    Returns:
        ``(collector, items, episodes)`` with items flattened to ``[T * B]`` (time-major order).
    """
    carry, traj, episodes = rollout(venv, env_params, policy,
                                    RolloutCarry(collector.env_state, collector.obs), key, num_steps,
                                    observe=observe)
    items, tail, tail_valid = n_step_items(collector.tail, collector.tail_valid, traj, n, gamma)
    collector = Collector(env_state=carry.env_state, obs=carry.obs, tail=tail, tail_valid=tail_valid)
    return collector, items, episodes


def n_step_items(tail: Transition, tail_valid: jax.Array, traj: Transition, n: int, gamma: jax.Array
                 ) -> tuple[ReplayItem, Transition, jax.Array]:
    """The ``T * B`` n-step replay items of a rollout ``traj`` ``[T, B]`` that follows ``tail``.

    Item ``t`` starts at step ``t`` of the window ``tail + traj`` and uses steps ``t .. t + n - 1``;
    it is valid iff step ``t`` is real (``tail_valid`` for the tail's steps, True for the rollout's).
    The compiled update (:func:`collect`) calls it on its own rollouts; the actors of host envs
    on theirs.

    Args:
        tail: the previous ``n - 1`` steps, oldest first, ``Transition`` ``[n - 1, B]`` (``extras``
            ignored).
        tail_valid: bool ``[n - 1]``.
        traj: the new steps ``[T, B]``.
        n: n-step horizon (Python int >= 1).
        gamma: discount (may be traced).

    Returns:
        ``(items [T * B] (time-major), new tail [n - 1, B], its validity [n - 1])``.
    """
    num_steps = traj.reward.shape[0]
    traj = traj._replace(extras=())
    window, valid = _window(tail._replace(extras=()), tail_valid, traj)
    ns = n_step_transitions(window.reward, window.terminated, window.truncated, gamma, n)

    def bootstrap(next_obs: jax.Array) -> jax.Array:
        # One observation leaf [n - 1 + T, B, ...] at each item's bootstrap step.
        idx = ns.bootstrap_index.reshape(ns.bootstrap_index.shape + (1,) * (next_obs.ndim - 2))
        return jnp.take_along_axis(next_obs, idx, axis=0)

    big_b = traj.reward.shape[1]
    items = ReplayItem(
        obs=jax.tree.map(lambda x: x[:num_steps], window.obs),
        action=window.action[:num_steps],
        reward=ns.returns.astype(jnp.float32),
        discount=ns.discounts.astype(jnp.float32),
        next_obs=jax.tree.map(bootstrap, window.next_obs),
        valid=jnp.broadcast_to(valid[:num_steps, None], (num_steps, big_b)),
    )
    items = jax.tree.map(lambda x: x.reshape((num_steps * big_b,) + x.shape[2:]), items)
    return items, jax.tree.map(lambda x: x[num_steps:], window), valid[num_steps:]


def replay_learning(learn_step: Callable[[Any, ReplayItem, jax.Array, jax.Array], tuple[Any, jax.Array, dict]],
                    learner: Any, replay: Replay, buffer: Any, key: jax.Array, *, gradient_steps: int,
                    batch_size: int, beta: jax.Array, active: jax.Array,
                    prepare: Callable[[ReplayItem], ReplayItem] | None = None) -> tuple[Any, Any, dict]:
    """``gradient_steps`` sampled learning steps; their results are kept only where ``active``.

    Args:
        learn_step: ``learn_step(learner, items[batch], weights[batch], key) ->
            (learner, td_abs[batch], metrics)``; weights already include ``valid``.
        learner: the algorithm's learning state (params, optimiser states, ...).
        replay: the replay functions.
        buffer: this device's replay state.
        key: PRNG key.
        gradient_steps: learning steps (static).
        batch_size: samples per step on this device (static).
        beta: importance-sampling exponent (prioritised replay).
        active: bool scalar; False before ``learning_starts`` (nothing changes then).
        prepare: applied to each sampled batch before ``learn_step`` (e.g. normalising raw
            observations with the current statistics, :func:`normalize_items`); None for none.

    Returns:
        ``(learner, buffer, metrics)``, metrics averaged over the steps (zeros when inactive).
    """

    def step(carry, k):
        learner, buffer = carry
        k_sample, k_learn = jax.random.split(k)
        indices, items, weights = replay.sample(buffer, k_sample, batch_size, beta)
        weights = weights * items.valid.astype(jnp.float32)
        if prepare is not None:
            items = prepare(items)
        new_learner, td_abs, metrics = learn_step(learner, items, weights, k_learn)
        # Placeholder items (valid False; only uniform replay can draw them) keep their priority.
        buffer = replay.update(buffer, indices, td_abs, active & items.valid)
        learner = jax.tree.map(lambda new, old: jnp.where(active, new, old), new_learner, learner)
        return (learner, buffer), metrics

    (learner, buffer), metrics = jax.lax.scan(step, (learner, buffer), jax.random.split(key, gradient_steps))
    metrics = jax.tree.map(lambda m: jnp.where(active, jnp.mean(m), 0.0), metrics)
    return learner, buffer, metrics


def masked_mean(x: jax.Array, weights: jax.Array) -> jax.Array:
    """``sum(w * x) / #(w > 0)``: a loss over sampled items with importance weights ``w`` (0 for the
    invalid placeholder items), averaged over the valid ones."""
    return jnp.sum(weights * x) / jnp.maximum(jnp.sum(weights > 0), 1.0)


def polyak(online: Any, target: Any, tau: jax.Array) -> Any:
    """``tau * online + (1 - tau) * target`` leaf by leaf (``tau = 1``: a hard copy)."""
    return jax.tree.map(lambda o, t: tau * o + (1.0 - tau) * t, online, target)


def periodic(count_before: Count | jax.Array, count_after: Count | jax.Array, interval: int) -> jax.Array:
    """True when a multiple of ``interval`` lies in ``(count_before, count_after]``.

    Exact for counts up to 2**64 (:class:`~rljax.core.counters.Count`, or non-negative int arrays)
    and ``interval <= 2**30``: with ``d = count_after - count_before``, a multiple lies in the
    interval iff ``count_before % interval + min(d, interval) >= interval``.
    """
    before, after = as_count(count_before), as_count(count_after)
    d = after.sub(before)
    step = jnp.where(d.hi > 0, jnp.uint32(interval), jnp.minimum(d.lo, jnp.uint32(interval)))
    return before.mod(interval) + step >= interval


# ----------------------------------------------------------------------------------------------
# The skeleton: one off-policy update for any algorithm
# ----------------------------------------------------------------------------------------------


class OffPolicyState(struct.PyTreeNode):
    """Everything an off-policy run needs to continue (one device's view).

    Attributes:
        learner: the algorithm's learning state (params, targets, optimiser states, ...), whatever
            its ``init_learner`` returns.
        collector: env state (with the observation statistics when ``normalize_obs``), raw
            observations and the n-step tail.
        buffer: this device's replay shard of raw observations (cursor, size, and priorities when
            prioritised).
        key: this device's PRNG key.
        hyperparams: the algorithm's traced hyperparameters (``config.hyperparams()`` or a sweep
            member's).
        env_params: the env params (traced; a sweep may vary them per member).
        updates: :class:`~rljax.core.counters.Count`, updates done (exact past 2**31).
        num_updates: :class:`~rljax.core.counters.Count`, updates in the whole run (schedules).
    """

    learner: Any
    collector: Collector
    buffer: Any
    key: jax.Array
    hyperparams: Any
    env_params: Any
    updates: Count
    num_updates: Count


class UpdateContext(NamedTuple):
    """Where one update stands in the run: what the algorithm's hooks see besides the learner.

    Attributes:
        hyperparams: the state's traced hyperparameters.
        steps_before: :class:`~rljax.core.counters.Count` of the env steps over all devices before
            this update's collection (exact past 2**31).
        steps_after: :class:`~rljax.core.counters.Count`, ``steps_before + env_steps_per_update``.
        total_steps: :class:`~rljax.core.counters.Count` of the env steps of the whole run,
            ``num_updates * env_steps_per_update``.
        progress: float32 ``fraction(1)``, the fraction of the run done before this update (it
            anneals the importance-sampling exponent ``beta`` to 1, and e.g. a learning rate to 0).
        warmup: bool, ``steps_before < learning_starts`` (e.g. act uniformly at random).
        active: bool, ``steps_after >= learning_starts``: this update's gradient steps are kept.
        values: the algorithm's per-update scalars from its ``schedule`` hook (``{}`` without one).
    """

    hyperparams: Any
    steps_before: Count
    steps_after: Count
    total_steps: Count
    progress: jax.Array
    warmup: jax.Array
    active: jax.Array
    values: dict[str, jax.Array]

    def fraction(self, span: Any) -> jax.Array:
        """How far a schedule that runs over the first ``span`` of the run's env steps (e.g.
        ``exploration_fraction``) has got before this update, float32 in [0, 1]:
        :func:`~rljax.agents.base.schedule_fraction` of ``steps_before`` and ``total_steps`` (1 from
        the start when the span is empty)."""
        return schedule_fraction(self.steps_before, self.total_steps, span)


class OffPolicyHooks(NamedTuple):
    """What an off-policy algorithm hands :func:`make_offpolicy_agent`: its learner and its steps.

    Every hook runs inside the compiled update (traced values in, traced values out) on one device;
    the learner is any pytree (params, targets, optimiser states, ...). Hooks reduce over the device
    axis themselves: :func:`~rljax.agents.base.gradient_step` with ``axis_name`` and
    :func:`~rljax.agents.base.pmean` of their metrics, so every device applies the same update.

    Attributes:
        example_action: one action, its shape and dtype (values unused), e.g.
            ``jnp.zeros((), jnp.int32)`` for Discrete or ``jnp.zeros((A,), jnp.float32)`` for Box.
        init_learner: ``init_learner(key, obs[1, *obs_shape], hyperparams) -> learner``; ``key`` is
            the same on every device, so params are too.
        behaviour: ``behaviour(learner, ctx) -> policy``, ``policy(key, obs[B]) -> action[B]``: the
            exploring policy on this device's ``B`` envs (observations normalised when
            ``normalize_obs``); ``ctx`` is the :class:`UpdateContext` (e.g. ``ctx.warmup``).
        learn_step: ``learn_step(learner, items, weights, key, ctx) -> (learner, td_abs, metrics)``:
            one gradient step on ``items``, a :class:`ReplayItem` batch ``[b]`` (normalised
            observations; ``reward`` the n-step return, ``discount`` ``gamma^m`` or 0 after a
            termination); ``weights`` float32 ``[b]`` importance weights, 0 for invalid items
            (average with :func:`masked_mean`); ``td_abs`` float32 ``[b]``, the new
            priorities; ``metrics`` float32 scalars averaged over devices.
        policy_params: ``policy_params(learner, hyperparams) -> (params, exploration)``: what acting
            needs from the learner (e.g. the actor's params) and the float32 scalar exploration of
            the stochastic policy (DQN: the final epsilon; TD3: the noise std; 0 where unused).
        act: ``act(params, obs[N], key, exploration, deterministic) -> action[N]``: the policy on
            normalised observations; ``deterministic`` (a Python bool) is the greedy/mean action
            (``key`` may be None), else the stochastic one; evaluation and export use it.
        params_of: ``params_of(learner) -> pytree``: what must agree across devices.
        schedule: ``schedule(ctx) -> {name: float32 scalar}``: values computed once per update
            (an exploration rate, a learning rate) that the other hooks read as ``ctx.values`` and
            that are reported as metrics; None for none.
        after_learning: ``after_learning(learner, ctx) -> (learner, metrics)``: once per update,
            after the gradient steps, not masked (e.g. a periodic target copy: mask it with
            ``ctx.active`` yourself); None for none.
    """

    example_action: jax.Array
    init_learner: Callable[[jax.Array, Any, Any], Any]
    behaviour: Callable[[Any, UpdateContext], Callable[[jax.Array, Any], jax.Array]]
    learn_step: Callable[[Any, ReplayItem, jax.Array, jax.Array, UpdateContext],
                         tuple[Any, jax.Array, dict[str, jax.Array]]]
    policy_params: Callable[[Any, Any], tuple[Any, jax.Array]]
    act: Callable[[Any, Any, Any, jax.Array, bool], jax.Array]
    params_of: Callable[[Any], Any]
    schedule: Callable[[UpdateContext], dict[str, jax.Array]] | None = None
    after_learning: Callable[[Any, UpdateContext], tuple[Any, dict[str, jax.Array]]] | None = None


@keyed_by_identity
class OffPolicyProgram(NamedTuple):
    """An off-policy algorithm's update without its env stack: what :func:`make_offpolicy_agent`
    builds once, and what a learner fed by actors elsewhere (host envs) runs on the items they make.

    Attributes:
        config: the algorithm's :class:`OffPolicyConfig`.
        hooks: its :class:`OffPolicyHooks`.
        venv: the env stack the compiled update collects with.
        normalize: ``normalize(env_state, obs)``, the observation normaliser of ``venv``.
        replay: the replay functions (this device's shard).
        axis_name: the device axis the hooks reduce over, or None.
    """

    config: OffPolicyConfig
    hooks: OffPolicyHooks
    venv: Any
    normalize: Callable[[Any, Any], Any]
    replay: Replay
    axis_name: str | None

    def context(self, updates: Count, num_updates: Count, hyperparams: Any) -> UpdateContext:
        """The :class:`UpdateContext` of the update that starts after ``updates`` updates of
        ``num_updates`` (each of ``config.env_steps_per_update`` env steps), with the schedule's values."""
        steps_per_update, learning_starts = self.config.env_steps_per_update, self.config.learning_starts
        steps_before = updates.mul(steps_per_update)
        steps_after = steps_before.add(steps_per_update)
        ctx = UpdateContext(hyperparams=hyperparams, steps_before=steps_before, steps_after=steps_after,
                            total_steps=num_updates.mul(steps_per_update), progress=jnp.float32(0),
                            warmup=steps_before.less(learning_starts), active=~steps_after.less(learning_starts),
                            values={})
        ctx = ctx._replace(progress=ctx.fraction(1.0))
        return ctx._replace(values=self.hooks.schedule(ctx) if self.hooks.schedule is not None else {})

    def example_item(self, obs: Any) -> ReplayItem:
        """A replay item shaped like one observation ``obs`` (no batch axis) and the hooks' action:
        each observation leaf keeps its own shape and dtype (a bool image stays bool)."""
        return ReplayItem(obs=obs, action=jnp.zeros_like(self.hooks.example_action), reward=jnp.float32(0),
                          discount=jnp.float32(0), next_obs=obs, valid=jnp.bool_(False))

    def learn(self, learner: Any, buffer: Any, items: ReplayItem, key: jax.Array, ctx: UpdateContext,
              prepare: Callable[[ReplayItem], ReplayItem] | None = None, add: bool = True,
              replay: Replay | None = None) -> tuple[Any, Any, dict[str, jax.Array]]:
        """Steps 2-5 of an update (see :func:`make_offpolicy_agent`) on ``items`` already collected:
        adds them to ``buffer`` (unless ``add`` is False: the caller added them), runs
        ``gradient_steps`` learning steps (``prepare`` applied to each sampled batch), then
        ``after_learning``. ``replay`` replaces the program's (e.g. :func:`presampled_replay` with a
        :class:`Presampled` ``buffer``). Returns ``(learner, buffer, metrics)``."""
        config, hooks = self.config, self.hooks
        replay = self.replay if replay is None else replay
        hyperparams = ctx.hyperparams
        if add:
            buffer = replay.add(buffer, items)
        beta = hyperparams.priority_beta_start + ctx.progress * (1.0 - hyperparams.priority_beta_start)
        learner, buffer, metrics = replay_learning(
            lambda learner, batch, weights, k: hooks.learn_step(learner, batch, weights, k, ctx), learner, replay,
            buffer, key, gradient_steps=config.gradient_steps, batch_size=config.batch_size // config.num_devices,
            beta=beta, active=ctx.active, prepare=prepare)
        after_metrics = {}
        if hooks.after_learning is not None:
            learner, after_metrics = hooks.after_learning(learner, ctx)
        metrics = {**metrics, **ctx.values, **after_metrics,
                   "buffer_size": replay.size(buffer).astype(jnp.float32) * config.num_devices,
                   "param_desync": desync(hooks.params_of(learner), self.axis_name)}
        return learner, buffer, metrics


def make_offpolicy_agent(config: OffPolicyConfig, env: Any, env_params: Any, axis_name: str | None,
                         hooks: OffPolicyHooks) -> Agent:
    """An off-policy :class:`~rljax.agents.base.Agent`: an algorithm's :class:`OffPolicyHooks` in
    the shared skeleton.

    The skeleton owns the env stack (``num_envs // num_devices`` local envs, raw observations and
    their statistics when ``normalize_obs``), the replay shard (``buffer_size // num_devices``
    slots, prioritised when ``prioritized``), the state (:class:`OffPolicyState`) and the update:

    1. ``key, k_collect, k_learn = split(state.key, 3)``; ``ctx`` (:class:`UpdateContext`) with
       ``ctx.values = schedule(ctx)``.
    2. :func:`collect`: ``num_steps`` steps of ``behaviour(learner, ctx)`` into n-step items, added
       to replay.
    3. :func:`replay_learning`: ``gradient_steps`` calls of ``learn_step`` on ``batch_size //
       num_devices`` items each, sampled with ``beta = beta_start + ctx.progress * (1 -
       beta_start)`` and normalised with the statistics after this collection; discarded unless
       ``ctx.active`` (before ``learning_starts``).
    4. ``learner, m = after_learning(learner, ctx)``.
    5. metrics: ``learn_step``'s (means over the gradient steps; 0 while inactive), ``ctx.values``,
       ``after_learning``'s, ``buffer_size`` (items over all devices) and ``param_desync``
       (:func:`~rljax.agents.base.desync` of ``params_of(learner)``).

    ``init(key, device_index, num_updates, hyperparams, env_params)``: ``k_params, k_run =
    split(key)``; ``init_learner`` gets ``k_params``; env and state keys come from
    ``fold_in(k_run, device_index)``. The agent's ``policy`` normalises raw ``obs`` with the
    statistics in its :class:`~rljax.agents.base.PolicyParams`, calls ``hooks.act`` and clips Box
    actions to the action space. A new algorithm (e.g. TD3) is its networks, its
    losses and a ``make_<algo>`` that checks the action space and returns
    ``make_offpolicy_agent(config, env, env_params, axis_name, OffPolicyHooks(...))``, with a
    config subclassing :class:`OffPolicyConfig`; see ``rljax/agents/dqn.py`` and ``sac.py``.
    A learner may count its own gradient steps (an int32 leaf, e.g. for TD3's delayed actor
    updates): like every leaf it is left unchanged while ``ctx.active`` is False. In outline::

        def learn_step(learner, items, weights, key, ctx):
            hyperparams = ctx.hyperparams
            critic, critic_opt, (td_abs, m), norm = gradient_step(
                critic_loss, learner.critic, learner.critic_opt,
                make_optimizer(hyperparams.critic_learning_rate, hyperparams.max_grad_norm),
                learner.target_critic, learner.target_actor, items, weights, key, axis_name=axis_name)
            ...
            return learner._replace(critic=critic, ...), td_abs, {**pmean(m, axis_name), "critic_grad_norm": norm}

        return make_offpolicy_agent(config, env, env_params, axis_name, OffPolicyHooks(
            example_action=jnp.zeros((action_dim,), jnp.float32), init_learner=init_learner,
            behaviour=behaviour, learn_step=learn_step, policy_params=lambda l, hyperparams: (l.actor, 0.0),
            act=act, params_of=lambda l: (l.actor, l.critic)))

    Args:
        config: the algorithm's :class:`OffPolicyConfig` subclass instance.
        env: a single, unbatched env.
        env_params: its params.
        axis_name: the device axis (what the hooks reduce over), or None on one device.
        hooks: the algorithm.
    """
    d = config.num_devices
    venv, normalize = observation_stack(make_env_stack(env, env_params, config.num_envs // d, axis_name=axis_name,
                                                       randomize=config.randomize),
                                        config.normalize_obs, axis_name)
    program = OffPolicyProgram(config, hooks, venv, normalize,
                               make_replay(config.buffer_size // d, config.prioritized), axis_name)

    stats_of, normalize_with = observation_normalizer(venv)
    to_space = into_action_space(env.action_space(env_params))

    def policy_params(state: OffPolicyState) -> PolicyParams:
        params, exploration = hooks.policy_params(state.learner, state.hyperparams)
        return PolicyParams(params, stats_of(state.collector.env_state), jnp.asarray(exploration, jnp.float32))

    def policy(pp: PolicyParams, obs: Any, key: Any, deterministic: bool) -> jax.Array:
        return to_space(hooks.act(pp.params, normalize_with(pp.obs_stats, obs), key, pp.exploration, deterministic))

    return Agent(config=config, init=functools.partial(_init, program), update=functools.partial(_update, program),
                 policy_params=policy_params, policy=policy, env_steps_per_update=config.env_steps_per_update,
                 params_of=lambda state: hooks.params_of(state.learner), offpolicy=program)


def _init(program: OffPolicyProgram, key: jax.Array, device_index: Any, num_updates: int, hyperparams: Any,
          env_params: Any) -> OffPolicyState:
    """``Agent.init`` of :func:`make_offpolicy_agent`."""
    hooks = program.hooks
    k_params, k_run = jax.random.split(key)
    k_env, k_state = jax.random.split(jax.random.fold_in(k_run, device_index))

    def shape_policy(key: jax.Array, obs: Any):
        # Only its output shapes are used (init_collector traces it abstractly).
        batch = jax.tree.leaves(obs)[0].shape[:1]
        return jnp.broadcast_to(hooks.example_action, batch + hooks.example_action.shape), ()

    collector = init_collector(program.venv, stack_params(env_params, hyperparams), shape_policy, k_env,
                               program.config.n_step)
    learner = hooks.init_learner(k_params, first_obs(collector.obs), hyperparams)
    example = program.example_item(jax.tree.map(lambda x: x[0], collector.obs))
    return OffPolicyState(learner=learner, collector=collector,
                          buffer=program.replay.init(example, hyperparams.priority_alpha), key=k_state,
                          hyperparams=hyperparams,
                          # As arrays: Python-scalar params leaves cannot leave a shard_map'd init.
                          env_params=jax.tree.map(jnp.asarray, env_params), updates=Count.of(0),
                          num_updates=Count.of(num_updates))


def _update(program: OffPolicyProgram, state: OffPolicyState) -> tuple[OffPolicyState, UpdateOutput]:
    """``Agent.update`` of :func:`make_offpolicy_agent`."""
    config, hooks, normalize = program.config, program.hooks, program.normalize
    hyperparams = state.hyperparams
    key, k_collect, k_learn = jax.random.split(state.key, 3)
    ctx = program.context(state.updates, state.num_updates, hyperparams)
    policy = hooks.behaviour(state.learner, ctx)
    collector, items, episodes = collect(program.venv, stack_params(state.env_params, hyperparams),
                                         lambda k, obs: (policy(k, obs), ()),
                                         state.collector, k_collect, config.num_steps, config.n_step,
                                         hyperparams.gamma, observe=normalize)
    learner, buffer, metrics = program.learn(
        state.learner, state.buffer, items, k_learn, ctx,
        # Replay holds raw observations: normalised with the statistics of now.
        prepare=lambda b: normalize_items(b, lambda x: normalize(collector.env_state, x)))
    new_state = state.replace(learner=learner, collector=collector, buffer=buffer, key=key, updates=state.updates.add(1))
    return new_state, UpdateOutput(metrics, episodes)
