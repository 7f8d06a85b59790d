"""What every algorithm hands the loop, and the pieces they share.

An algorithm is ``make_<algo>(config, env, env_params, axis_name) -> Agent``. The :class:`Agent`'s
functions are the **per-device program**: they see this device's share of the env batch and reduce
across devices with collectives over ``axis_name`` (``None`` on one device, where the collectives in
:func:`pmean` and friends are the identity). The loop (``rljax.loop``) scans ``update`` into chunks
and maps it over devices; agents never know which backend runs them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rljax import wrappers
from rljax.env import is_discrete
from rljax.rollout import EpisodeSummary

__all__ = ["Agent", "UpdateOutput", "pmean", "psum", "make_env_stack", "param_checksum", "space_dims"]


class UpdateOutput(NamedTuple):
    """What one update returns beside the new state.

    Attributes:
        metrics: dict name -> float32 scalar (already averaged over devices).
        episodes: sums over the episodes that finished during the update, over all devices.
    """

    metrics: dict[str, jax.Array]
    episodes: EpisodeSummary


class Agent(NamedTuple):
    """An algorithm, as the loop sees it.

    Attributes:
        config: the algorithm's frozen config.
        init: ``init(key, device_index, num_updates, hparams, env_params) -> state``: the full
            train state of one device for a run of ``num_updates`` updates, with the traced
            hyperparameters ``hparams`` (``config.hyperparams()`` or a sweep member's) and env
            params (both live in the state). Params must be drawn from ``key`` alone (identical on
            every device); env and rollout keys fold in ``device_index``.
        update: ``update(state) -> (state, UpdateOutput)``: one update (collect + learn), per device.
        act: ``act(state, obs, key) -> action``: the deterministic (greedy/mean) policy for
            evaluation, on a batch of observations ``[N, ...]``.
        env_steps_per_update: env steps per update, summed over all devices.
        params: ``params(state) -> pytree`` the parameters that must agree across devices.
    """

    config: Any
    init: Callable[[jax.Array, Any, int, Any, Any], Any]
    update: Callable[[Any], tuple[Any, UpdateOutput]]
    act: Callable[[Any, Any, jax.Array], jax.Array]
    env_steps_per_update: int
    params: Callable[[Any], Any]


def pmean(x: Any, axis_name: str | None) -> Any:
    """``lax.pmean`` over ``axis_name``; the identity when it is None (one device)."""
    return x if axis_name is None else jax.lax.pmean(x, axis_name)


def psum(x: Any, axis_name: str | None) -> Any:
    """``lax.psum`` over ``axis_name``; the identity when it is None (one device)."""
    return x if axis_name is None else jax.lax.psum(x, axis_name)


def param_checksum(params: Any) -> jax.Array:
    """A float32 scalar fingerprint of a params tree (identical params give identical bits)."""
    leaves = jax.tree.leaves(params)
    # Weighting by position makes swapped or sign-flipped blocks visible, not just changed sums.
    return sum(jnp.sum(leaf.astype(jnp.float32) * (1.0 + 0.001 * i)) for i, leaf in enumerate(leaves))


def desync(params: Any, axis_name: str | None) -> jax.Array:
    """The spread of :func:`param_checksum` across devices: exactly 0 when params agree."""
    if axis_name is None:
        return jnp.zeros((), jnp.float32)
    c = param_checksum(params)
    return jax.lax.pmax(c, axis_name) - jax.lax.pmin(c, axis_name)


def space_dims(space: Any) -> tuple[bool, int]:
    """``(discrete, action_dim)``: the number of actions, or the size of a flat Box action."""
    if is_discrete(space):
        return True, int(space.n)
    shape = tuple(space.shape)
    if len(shape) != 1:
        raise ValueError(f"continuous actions must be a flat Box of shape (d,), got shape {shape}")
    return False, int(shape[0])


def make_env_stack(env: Any, env_params: Any, num_envs: int, *, normalize_obs: bool = False,
                   normalize_reward: bool = False, reward_gamma: float = 0.99,
                   axis_name: str | None = None) -> Any:
    """The standard training env: clip Box actions, vectorise, track episodes, normalise.

    Order matters: ``EpisodeStatistics`` sits inside reward normalisation so it logs raw returns;
    the normalisers sit outside ``VecEnv`` so one set of statistics covers the batch, merged across
    devices over ``axis_name``.

    Args:
        env: a single (unbatched) env.
        env_params: its params (used to read the action space).
        num_envs: envs on this device.
        normalize_obs: add ``NormalizeObservation``.
        normalize_reward: add ``NormalizeReward`` with discount ``reward_gamma``.
        axis_name: the device axis the normalisers merge their statistics over.
    """
    if not is_discrete(env.action_space(env_params)):
        env = wrappers.ClipAction(env)
    env = wrappers.EpisodeStatistics(wrappers.VecEnv(env, num_envs))
    if normalize_obs:
        env = wrappers.NormalizeObservation(env, axis_name=axis_name)
    if normalize_reward:
        env = wrappers.NormalizeReward(env, gamma=reward_gamma, axis_name=axis_name)
    return env
