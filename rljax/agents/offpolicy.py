"""What off-policy agents (DQN, SAC) share: collection into replay, n-step items, replay learning.

One off-policy update, inside the compiled chunk:

1. **collect**: ``num_steps`` steps of the behaviour policy in the local envs (the shared
   :func:`rljax.rollout.rollout`), turned into n-step replay items (:class:`ReplayItem`) that keep
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
``rljax.wrappers.ObservationStatistics``). Replay stores raw observations; the behaviour policy
and the learner normalise them with the statistics current when they use them (acting: those of the
step; learning: those after this update's collection), as Stable-Baselines3's ``VecNormalize``
does for off-policy algorithms. Normalising at collection time instead would leave each stored item
scaled by statistics up to a full buffer old.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from rljax import buffers, wrappers
from rljax.returns import n_step_transitions
from rljax.rollout import EpisodeSummary, RolloutCarry, Transition, rollout

__all__ = ["ReplayItem", "Collector", "Replay", "make_replay", "observation_stack", "normalize_items",
           "init_collector", "collect", "replay_learning", "polyak", "periodic"]


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
    """A :class:`Replay` over ``rljax.buffers``.

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


def observation_stack(venv: Any, normalize_obs: bool, axis_name: str | None
                      ) -> tuple[Any, Callable[[Any, Any], Any]]:
    """The env stack and observation normaliser of an off-policy agent.

    Args:
        venv: the batched env stack without observation normalisation.
        normalize_obs: track observation statistics.
        axis_name: the device axis the statistics are merged over.

    Returns:
        ``(venv, normalize)``: with ``normalize_obs``, ``venv`` wrapped in
        ``rljax.wrappers.ObservationStatistics`` (raw observations, statistics in its state) and
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


def _window(collector: Collector, traj: Transition) -> tuple[Transition, jax.Array]:
    """The previous tail followed by the new rollout, ``[n - 1 + T, B]``, and which steps are real."""
    window = jax.tree.map(lambda a, b: jnp.concatenate([a, b], axis=0), collector.tail, traj)
    valid = jnp.concatenate([collector.tail_valid, jnp.ones((traj.reward.shape[0],), jnp.bool_)])
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
        observe: ``observe(env_state, obs)``, what the policy sees (see :func:`rljax.rollout.rollout`);
            the items keep the env's observations.

    Returns:
        ``(collector, items, episodes)`` with items flattened to ``[T * B]`` (time-major order).
    """
    carry, traj, episodes = rollout(venv, env_params, policy,
                                    RolloutCarry(collector.env_state, collector.obs), key, num_steps,
                                    observe=observe)
    traj = traj._replace(extras=())
    window, valid = _window(collector, traj)
    ns = n_step_transitions(window.reward, window.terminated, window.truncated, gamma, n)

    def bootstrap(next_obs: jax.Array) -> jax.Array:
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
    tail = jax.tree.map(lambda x: x[num_steps:], window)
    collector = Collector(env_state=carry.env_state, obs=carry.obs, tail=tail, tail_valid=valid[num_steps:])
    return collector, items, episodes


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


def polyak(online: Any, target: Any, tau: jax.Array) -> Any:
    """``tau * online + (1 - tau) * target`` leaf by leaf (``tau = 1``: a hard copy)."""
    return jax.tree.map(lambda o, t: tau * o + (1.0 - tau) * t, online, target)


def periodic(count_before: jax.Array, count_after: jax.Array, interval: int) -> jax.Array:
    """True when a multiple of ``interval`` lies in ``(count_before, count_after]``."""
    return (count_after // interval) > (count_before // interval)
