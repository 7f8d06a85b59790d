"""Rollouts: a ``lax.scan`` of a policy over a vectorised environment, shared by every agent.

The env given here is already batched (``rljax.core.wrappers.VecEnv``, usually with
``EpisodeStatistics`` and optional normalisers around it): ``reset``/``step`` take and return
``[B, ...]`` arrays. The rollout produces a time-major :class:`Transition` ``[T, B, ...]`` and an
:class:`EpisodeSummary` of the episodes that finished during it.

``Transition.next_obs`` is ``info["final_observation"]``: the true successor of ``obs`` for every
step. It equals the next step's ``obs`` except where an episode ended, where it is the last
observation of the finished episode. So ``V(next_obs)`` is the bootstrap value on every step:
targets multiply it by ``1 - terminated``, which handles termination (no bootstrap) and truncation
(bootstrap from the state the time limit cut) with no special case and one batched network call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

__all__ = ["Transition", "EpisodeSummary", "RolloutCarry", "rollout", "summarize_episodes", "reset_memory"]


class Transition(NamedTuple):
    """One batch of steps, time-major.

    Attributes:
        obs: ``[T, B, *obs_shape]`` the observation each action was chosen from (as the env
            returned it, before any ``observe`` of :func:`rollout`).
        action: ``[T, B, *action_shape]``.
        reward: ``[T, B]`` float32.
        terminated: ``[T, B]`` bool, the MDP ended at this step (no bootstrap).
        truncated: ``[T, B]`` bool, a time limit ended the episode (bootstrap from ``next_obs``).
        next_obs: ``[T, B, *obs_shape]`` the true next observation (``final_observation``).
        extras: what the policy returned beside the action (e.g. ``log_prob`` ``[T, B]``).
        memory: a recurrent policy's memory as it entered each step (leaves ``[T, B, ...]``, already
            reset where that step's observation starts an episode); None for a memoryless policy.
    """

    obs: Any
    action: jax.Array
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    next_obs: Any
    extras: Any
    memory: Any = None


class EpisodeSummary(NamedTuple):
    """Sums over the episodes that finished in a rollout (or a chunk), for metrics.

    Attributes:
        count: float32 scalar, the number of finished episodes.
        return_sum: float32 scalar, the sum of their undiscounted returns.
        length_sum: float32 scalar, the sum of their lengths.
        components: dict name -> float32 scalar, per-term reward sums of those episodes (from an
            env's ``info["reward_components"]``; empty when it reports none).
        env_nonfinite: float32 scalar, the NaN/inf values the env returned for finite actions
            (:func:`rljax.core.wrappers.env_nonfinite`), over every step, not only finished episodes.
    """

    count: jax.Array
    return_sum: jax.Array
    length_sum: jax.Array
    components: dict[str, jax.Array]
    env_nonfinite: jax.Array | float = 0.0

    @staticmethod
    def zeros(component_names: tuple[str, ...] = ()) -> "EpisodeSummary":
        z = jnp.zeros((), jnp.float32)
        return EpisodeSummary(z, z, z, {k: z for k in component_names}, z)

    def __add__(self, other: "EpisodeSummary") -> "EpisodeSummary":  # type: ignore[override]
        return jax.tree.map(jnp.add, self, other)


class RolloutCarry(NamedTuple):
    """What a rollout threads from step to step: the batched env state, the current observation
    and a recurrent policy's memory for it (leaves ``[B, ...]``; None for a memoryless policy)."""

    env_state: Any
    obs: Any
    memory: Any = None


def summarize_episodes(episode_info: Any) -> EpisodeSummary:
    """Reduces stacked ``info["episode"]`` records (``EpisodeStatistics``) to an :class:`EpisodeSummary`.

    Args:
        episode_info: an ``EpisodeInfo`` whose leaves have shape ``[T, B]`` (``components`` leaves
            too): ``done``, ``return_``, ``length``, ``components``.
    """
    done = episode_info.done.astype(jnp.float32)
    comps = episode_info.components
    return EpisodeSummary(
        count=jnp.sum(done),
        return_sum=jnp.sum(episode_info.return_ * done),
        length_sum=jnp.sum(episode_info.length.astype(jnp.float32) * done),
        components={k: jnp.sum(v * done) for k, v in comps.items()},
        env_nonfinite=jnp.zeros((), jnp.float32) if episode_info.nonfinite is None
        else jnp.sum(episode_info.nonfinite).astype(jnp.float32),
    )


def reset_memory(memory: Any, done: jax.Array) -> Any:
    """A recurrent policy's memory (leaves ``[B, ...]``) with the rows where ``done`` (bool ``[B]``)
    set to zeros: the memory an episode starts from."""
    return jax.tree.map(lambda m: jnp.where(done.reshape(done.shape + (1,) * (m.ndim - done.ndim)),
                                            jnp.zeros_like(m), m), memory)


def rollout(
    env: Any,
    env_params: Any,
    policy: Callable[[jax.Array, Any], tuple[jax.Array, Any]],
    carry: RolloutCarry,
    key: jax.Array,
    num_steps: int,
    observe: Callable[[Any, Any], Any] | None = None,
) -> tuple[RolloutCarry, Transition, EpisodeSummary]:
    """Runs ``num_steps`` steps of ``policy`` in the batched ``env``.

    Args:
        env: a batched env (``VecEnv`` and wrappers); its ``step`` returns ``info["episode"]`` when
            ``EpisodeStatistics`` is in the stack (otherwise the summary is all zeros).
        env_params: the env params.
        policy: ``policy(key, obs[B, ...]) -> (action[B, ...], extras)``; params are closed over.
            With a memory in ``carry``: ``policy(key, obs, memory) -> (action, extras, memory)``; the
            memory that comes out is reset to zeros for every env whose episode ended at that step
            (terminated or truncated), so each episode starts from zeros.
        carry: the env state and observations to start from (and the memory).
        key: a PRNG key for the whole rollout.
        num_steps: T, a Python int.
        observe: ``observe(env_state, obs) -> policy input``, or None for ``obs`` itself. For an
            env that returns raw observations and keeps their statistics in its state
            (``rljax.core.wrappers.ObservationStatistics``): the policy then sees each observation
            normalised with the statistics of that step, while the transitions keep it raw.

    Returns:
        ``(carry, transitions, summary)``: the carry after the last step, ``Transition`` ``[T, B]``,
        and the sums over episodes that finished.
    """

    def step(c: RolloutCarry, step_key: jax.Array):
        k_act, k_env = jax.random.split(step_key)
        x = c.obs if observe is None else observe(c.env_state, c.obs)
        if c.memory is None:
            action, extras = policy(k_act, x)
        else:
            action, extras, memory = policy(k_act, x, c.memory)
        obs, env_state, reward, terminated, truncated, info = env.step(k_env, c.env_state, action, env_params)
        transition = Transition(c.obs, action, reward, terminated, truncated, info["final_observation"], extras)
        if c.memory is None:
            return RolloutCarry(env_state, obs), (transition, info.get("episode"))
        memory = reset_memory(memory, terminated | truncated)
        return RolloutCarry(env_state, obs, memory), (transition._replace(memory=c.memory), info.get("episode"))

    carry, (transitions, episodes) = jax.lax.scan(step, carry, jax.random.split(key, num_steps))
    summary = summarize_episodes(episodes) if episodes is not None else EpisodeSummary.zeros()
    return carry, transitions, summary
