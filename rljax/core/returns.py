"""Value targets: GAE(lambda), V-trace, n-step and Q(lambda) returns over time-major trajectories, and the
one-step bootstrapped targets of the twin-critic methods (TD3's smoothed target, SAC's soft target).

Data layout and contract
------------------------
All arrays are time-major, ``[T, B]`` (``T`` steps of ``B`` parallel environments) or ``[T]`` for a
single environment, and describe transitions ``t = 0 .. T-1`` of a rollout collected with
auto-resetting environments (see :mod:`rljax.env`):

* ``rewards[t]`` -- ``r_t``, returned by the step taken from ``s_t``.
* ``terminated[t]`` -- the MDP ended at step ``t``: the value of whatever follows is **0**.
* ``truncated[t]`` -- a time limit cut the episode at step ``t``: the episode *would* have gone on,
  so the return is bootstrapped from the value of ``info["final_observation"]``.
* ``values[t]`` -- ``V(s_t)``.
* ``next_values[t]`` -- the value of the **true** next state of transition ``t``: ``V(final_obs_t)``
  when the episode ended at ``t`` and ``V(s_{t+1})`` otherwise. After an auto-reset ``s_{t+1}`` is
  the first observation of the *next* episode, so ``values[t + 1]`` is the wrong bootstrap there;
  that is why the caller passes ``next_values`` explicitly. At the rollout boundary
  ``next_values[T-1]`` is ``V`` of the last observation (or of its final observation).

When ``terminated`` and ``truncated`` are both true (allowed, as in Gymnasium), termination wins:
no bootstrap. ``done_t = terminated_t | truncated_t`` stops every recursion from crossing into the
next episode.

Every function is pure, accepts ``gamma``/``lambda_`` as Python floats or traced scalars, and works
with and without ``jax.jit``. They compute targets only; callers wrap them in
``jax.lax.stop_gradient`` if the values came from a differentiated forward pass.

Replay targets (:func:`smoothed_target_action`, :func:`clipped_double_q_target`,
:func:`soft_td_target`) work on batches of n-step replay items ``[N]`` instead of trajectories: the
item's ``discount`` already folds in the episode boundary (``gamma^m`` after ``m`` steps, 0 after a
termination; a truncated item keeps ``gamma^m`` and its ``next_obs`` is the final observation), so
``discount * bootstrap`` is the whole of the terminated/truncated handling.
"""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

__all__ = ["gae", "vtrace", "n_step_targets", "NStep", "n_step_transitions", "q_lambda_targets",
           "smoothed_target_action", "clipped_double_q_target", "soft_td_target"]


def _float_dtype(*arrays: jax.Array) -> jnp.dtype:
    dtype = jnp.result_type(*arrays)
    return dtype if jnp.issubdtype(dtype, jnp.floating) else jnp.dtype(jnp.float32)


def _prepare(fn: str, float_arrays: dict[str, jax.typing.ArrayLike],
             flags: dict[str, jax.typing.ArrayLike]) -> tuple[list[jax.Array], list[jax.Array]]:
    """Converts inputs, checks ranks/shapes, and casts to one float dtype (flags to bool)."""
    floats = {k: jnp.asarray(v) for k, v in float_arrays.items()}
    bools = {k: jnp.asarray(v) for k, v in flags.items()}
    everything = {**floats, **bools}
    names = ", ".join(everything)
    chex.assert_rank(list(everything.values()), {1, 2},
                     custom_message=f"{fn}: {names} must be time-major [T] or [T, B]")
    chex.assert_equal_shape(
        list(everything.values()),
        custom_message=f"{fn}: {names} must all have the same shape; got "
        + ", ".join(f"{k}={v.shape}" for k, v in everything.items()))
    dtype = _float_dtype(*floats.values())
    return ([v.astype(dtype) for v in floats.values()],
            [v.astype(jnp.bool_) for v in bools.values()])


def gae(
    rewards: jax.typing.ArrayLike,
    values: jax.typing.ArrayLike,
    next_values: jax.typing.ArrayLike,
    terminated: jax.typing.ArrayLike,
    truncated: jax.typing.ArrayLike,
    gamma: float | jax.typing.ArrayLike,
    lambda_: float | jax.typing.ArrayLike,
) -> tuple[jax.Array, jax.Array]:
    """Generalized Advantage Estimation (Schulman et al. 2016, "High-Dimensional Continuous Control
    Using Generalized Advantage Estimation", Section 3), episode-boundary aware.

    With ``done_t = terminated_t | truncated_t``::

        delta_t = r_t + gamma * (1 - terminated_t) * next_values[t] - values[t]
        A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1},      A_T = 0
        targets = A + values                          (the lambda-return, used as value target)

    The bootstrap lives only in ``delta_t``: on truncation it is ``V(final_observation_t)`` (the
    episode was cut, not finished), on termination it is 0. The recursion is cut at every episode
    end either way, because ``A_{t+1}`` belongs to the next episode. ``lambda = 0`` gives one-step
    TD errors; ``lambda = 1`` gives the discounted return up to the episode end (or rollout end)
    plus the discounted bootstrap, minus ``values``.

    Computed with a reverse ``jax.lax.scan`` over time.

    Args:
        rewards: float ``[T, B]`` or ``[T]``.
        values: ``V(s_t)``, same shape.
        next_values: value of the true next state of each transition (see the module docstring),
            same shape.
        terminated: bool (or 0/1) ``[T, B]`` / ``[T]``.
        truncated: bool (or 0/1), same shape.
        gamma: discount, scalar in ``[0, 1]``.
        lambda_: GAE parameter, scalar in ``[0, 1]``.

    Returns:
        ``(advantages, targets)``, both float ``[T, B]`` / ``[T]`` in the promoted float dtype of
        ``rewards``, ``values`` and ``next_values``.

    Raises:
        AssertionError: ranks other than 1 or 2, or mismatched shapes (chex).
    """
    (rewards, values, next_values), (terminated, truncated) = _prepare(
        "gae", {"rewards": rewards, "values": values, "next_values": next_values},
        {"terminated": terminated, "truncated": truncated})
    dtype = values.dtype
    gamma = jnp.asarray(gamma, dtype)
    lambda_ = jnp.asarray(lambda_, dtype)

    not_terminated = 1.0 - terminated.astype(dtype)
    not_done = 1.0 - (terminated | truncated).astype(dtype)
    # The TD errors need no recursion, so compute them vectorised and scan only the accumulation.
    deltas = rewards + gamma * not_terminated * next_values - values

    def step(next_advantage: jax.Array, xs: tuple[jax.Array, jax.Array]
             ) -> tuple[jax.Array, jax.Array]:
        delta, cont = xs
        advantage = delta + gamma * lambda_ * cont * next_advantage
        return advantage, advantage

    _, advantages = jax.lax.scan(step, jnp.zeros(deltas.shape[1:], dtype), (deltas, not_done),
                                 reverse=True)
    return advantages, advantages + values


def vtrace(
    rewards: jax.typing.ArrayLike,
    values: jax.typing.ArrayLike,
    next_values: jax.typing.ArrayLike,
    terminated: jax.typing.ArrayLike,
    truncated: jax.typing.ArrayLike,
    log_rhos: jax.typing.ArrayLike,
    gamma: float | jax.typing.ArrayLike,
    lambda_: float | jax.typing.ArrayLike = 1.0,
    rho_clip: float = 1.0,
    c_clip: float = 1.0,
    pg_rho_clip: float = 1.0,
) -> tuple[jax.Array, jax.Array]:
    """V-trace targets and policy-gradient advantages (Espeholt et al. 2018, "IMPALA", Section 4.1),
    episode-boundary aware, for a trajectory the behaviour policy ``mu`` collected and the current
    policy ``pi`` learns from.

    With ``log_rhos[t] = log pi(a_t|s_t) - log mu(a_t|s_t)``, ``rho_t = min(rho_clip, e^log_rho)``,
    ``c_t = lambda * min(c_clip, e^log_rho)`` and ``done_t = terminated_t | truncated_t``::

        delta_t  = rho_t * (r_t + gamma * (1 - terminated_t) * next_values[t] - values[t])
        vs_t     = values[t] + delta_t + gamma * (1 - done_t) * c_t * (vs_{t+1} - values[t+1]),   vs_T - V_T = 0
        pg_adv_t = min(pg_rho_clip, e^log_rho_t) * (r_t + gamma * (1 - terminated_t) * v'_{t+1} - values[t])

    where ``v'_{t+1}`` is ``vs_{t+1}`` inside an episode and ``next_values[t]`` where the episode
    ended at ``t`` (on truncation: the value of the final observation; on termination it is
    multiplied by 0) or at the rollout's last step (the bootstrap). On-policy (``log_rhos = 0``)
    with ``rho_clip, c_clip >= 1``, ``vs`` is the lambda-return: :func:`gae`'s targets.

    Args:
        rewards, values, next_values, terminated, truncated: as for :func:`gae` (``[T, B]`` or ``[T]``).
        log_rhos: log importance ratios, same shape.
        gamma: discount in ``[0, 1]``.
        lambda_: the trace parameter in ``[0, 1]`` (1 in IMPALA).
        rho_clip: rho-bar, the truncation of the ratio in ``delta`` (what the targets converge to).
        c_clip: c-bar, the truncation of the traces (how far they reach).
        pg_rho_clip: the truncation of the ratio weighting the policy gradient.

    Returns:
        ``(vs, pg_advantages)``: float ``[T, B]`` / ``[T]`` (value targets and the advantages that
        weight ``grad log pi(a_t|s_t)``); targets only, so wrap them in ``jax.lax.stop_gradient``.
    """
    (rewards, values, next_values, log_rhos), (terminated, truncated) = _prepare(
        "vtrace", {"rewards": rewards, "values": values, "next_values": next_values, "log_rhos": log_rhos},
        {"terminated": terminated, "truncated": truncated})
    dtype = values.dtype
    gamma, lambda_ = jnp.asarray(gamma, dtype), jnp.asarray(lambda_, dtype)
    ratio = jnp.exp(log_rhos)
    rhos, cs = jnp.minimum(rho_clip, ratio), lambda_ * jnp.minimum(c_clip, ratio)
    not_terminated = 1.0 - terminated.astype(dtype)
    done = terminated | truncated
    deltas = rhos * (rewards + gamma * not_terminated * next_values - values)

    def step(next_acc: jax.Array, xs: tuple[jax.Array, ...]) -> tuple[jax.Array, jax.Array]:
        delta, c, cont = xs
        acc = delta + gamma * cont * c * next_acc
        return acc, acc

    _, acc = jax.lax.scan(step, jnp.zeros(deltas.shape[1:], dtype), (deltas, cs, 1.0 - done.astype(dtype)),
                          reverse=True)
    vs = acc + values
    ends = done.at[-1].set(True)  # the rollout's last step bootstraps from next_values too
    following = jnp.where(ends, next_values, jnp.concatenate([vs[1:], vs[-1:]], axis=0))
    pg_advantages = jnp.minimum(pg_rho_clip, ratio) * (rewards + gamma * not_terminated * following - values)
    return vs, pg_advantages


def n_step_targets(
    rewards: jax.typing.ArrayLike,
    terminated: jax.typing.ArrayLike,
    truncated: jax.typing.ArrayLike,
    next_values: jax.typing.ArrayLike,
    gamma: float | jax.typing.ArrayLike,
    n: int,
) -> jax.Array:
    """n-step bootstrapped returns (Sutton & Barto 2018, eq. 7.1; used by n-step DQN / Rainbow,
    Hessel et al. 2018), cut at episode ends and at the end of the window.

    For transition ``t`` let ``m`` be the number of steps actually used: the smallest of ``n``, the
    steps up to and including the first episode end (``done_{t+k}`` for ``k = 0 .. n-1``), and the
    steps left in the window, ``T - t``. Then::

        G_t = sum_{k=0}^{m-1} gamma^k r_{t+k} + gamma^m (1 - terminated_{t+m-1}) next_values[t+m-1]

    i.e. termination gives no bootstrap, truncation bootstraps from ``V(final_observation)`` of that
    step (``next_values`` at that step), and otherwise the bootstrap is ``V(s_{t+m})``.

    Validity near the end of the window: entries ``t <= T - n`` are full n-step returns (unless an
    episode ends first). The last ``n - 1`` entries, ``t > T - n``, have fewer than ``n`` steps
    available; they use the ``T - t`` steps there are and bootstrap from ``next_values[T-1]`` with
    discount ``gamma^(T - t)``. They are valid (unbiased given ``V``) but shorter-horizon targets;
    drop them if exact n-step targets are required. The discount is folded into the returned value,
    so no separate ``gamma^m`` is needed by the caller.

    Equivalent recursion, used here (``n - 1`` vectorised passes, so ``O(n T B)``)::

        G^(1)_t = r_t + gamma (1 - terminated_t) next_values[t]
        G^(k)_t = r_t + gamma (1 - terminated_t) * (next_values[t] if done_t or t == T-1
                                                    else G^(k-1)_{t+1})

    Args:
        rewards: float ``[T, B]`` or ``[T]``.
        terminated: bool (or 0/1), same shape.
        truncated: bool (or 0/1), same shape.
        next_values: value of the true next state of each transition (see the module docstring),
            e.g. ``max_a Q_target(s', a)`` for DQN; same shape.
        gamma: discount, scalar in ``[0, 1]``.
        n: number of steps, a Python int ``>= 1``; ``n = 1`` gives one-step TD targets.

    Returns:
        float ``[T, B]`` / ``[T]``, the targets ``G_t``.

    Raises:
        ValueError: ``n`` is not a positive int.
        AssertionError: ranks other than 1 or 2, or mismatched shapes (chex).
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n_step_targets: n must be a Python int >= 1, got {n!r}")
    (rewards, next_values), (terminated, truncated) = _prepare(
        "n_step_targets", {"rewards": rewards, "next_values": next_values},
        {"terminated": terminated, "truncated": truncated})
    dtype = rewards.dtype
    gamma = jnp.asarray(gamma, dtype)

    if rewards.shape[0] == 0:  # `.at[-1]` below needs at least one step.
        return rewards
    discount = gamma * (1.0 - terminated.astype(dtype))
    # Where the return must stop and bootstrap: an episode end, or the last step of the window.
    stop = (terminated | truncated).at[-1].set(True)

    def extend(_: int, g: jax.Array) -> jax.Array:
        # g[t+1] shifted to t; the last row is a placeholder that `stop[-1]` never selects.
        g_next = jnp.concatenate([g[1:], g[-1:]], axis=0)
        return rewards + discount * jnp.where(stop, next_values, g_next)

    one_step = rewards + discount * next_values
    return jax.lax.fori_loop(0, n - 1, extend, one_step)


class NStep(NamedTuple):
    """n-step transitions for replay, computed when the data is collected.

    Attributes:
        returns: ``sum_{k<m} gamma^k r_{t+k}``, float ``[T - n + 1, ...]``.
        discounts: ``gamma^m (1 - terminated_{t+m-1})``: what multiplies the bootstrap value, 0 after
            a termination, ``gamma^m`` after a truncation or a full window.
        bootstrap_index: int32, ``t + m - 1``: the step whose ``next_obs`` (its final observation on
            truncation) is the bootstrap state.
    """

    returns: jax.Array
    discounts: jax.Array
    bootstrap_index: jax.Array


def n_step_transitions(
    rewards: jax.typing.ArrayLike,
    terminated: jax.typing.ArrayLike,
    truncated: jax.typing.ArrayLike,
    gamma: float | jax.typing.ArrayLike,
    n: int,
) -> NStep:
    """The n-step transitions ``(s_t, a_t, R_t, discount_t, s'_t)`` of a window, for replay buffers.

    The replay counterpart of :func:`n_step_targets`: instead of folding in a value now, it returns
    what is needed to bootstrap later with the current target network::

        target_t = returns[t] + discounts[t] * V(next_obs[bootstrap_index[t]])

    with ``m`` the steps used: ``n``, or fewer when an episode ends (terminated or truncated) within
    the window. Only the ``T - n + 1`` windows that fit entirely in the ``T`` steps are returned (the
    caller carries the last ``n - 1`` steps over to the next window, so nothing is lost).

    Args:
        rewards: float ``[T, ...]`` (time-major; any batch dims).
        terminated: bool, same shape.
        truncated: bool, same shape.
        gamma: discount, scalar (may be traced).
        n: a Python int ``>= 1``, at most ``T``.

    Returns:
        :class:`NStep` with leading dim ``T - n + 1``.
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n_step_transitions: n must be a Python int >= 1, got {n!r}")
    rewards = jnp.asarray(rewards)
    terminated = jnp.asarray(terminated, jnp.bool_)
    truncated = jnp.asarray(truncated, jnp.bool_)
    chex.assert_equal_shape([rewards, terminated, truncated],
                            custom_message="n_step_transitions: rewards, terminated, truncated")
    big_t = rewards.shape[0]
    if n > big_t:
        raise ValueError(f"n_step_transitions: n={n} is larger than the window T={big_t}")
    out_t = big_t - n + 1
    dtype = _float_dtype(rewards)
    gamma = jnp.asarray(gamma, dtype)
    t_index = jnp.arange(out_t, dtype=jnp.int32).reshape((out_t,) + (1,) * (rewards.ndim - 1))
    t_index = jnp.broadcast_to(t_index, (out_t,) + rewards.shape[1:])

    alive = jnp.ones((out_t,) + rewards.shape[1:], jnp.bool_)
    returns = jnp.zeros(alive.shape, dtype)
    index = t_index
    final_terminated = jnp.zeros(alive.shape, jnp.bool_)
    steps = jnp.zeros(alive.shape, dtype)
    for k in range(n):  # n is small and static: n vectorised passes
        r_k = rewards[k:k + out_t].astype(dtype)
        returns = returns + jnp.where(alive, gamma ** k * r_k, 0.0)
        index = jnp.where(alive, t_index + k, index)
        final_terminated = jnp.where(alive, terminated[k:k + out_t], final_terminated)
        steps = steps + alive.astype(dtype)
        alive = alive & ~(terminated[k:k + out_t] | truncated[k:k + out_t])
    discounts = jnp.where(final_terminated, 0.0, gamma ** steps).astype(dtype)
    return NStep(returns, discounts, index)


def q_lambda_targets(rewards: jax.typing.ArrayLike, bootstrap: jax.typing.ArrayLike,
                     terminated: jax.typing.ArrayLike, truncated: jax.typing.ArrayLike,
                     gamma: float | jax.Array, lambda_: float | jax.Array) -> jax.Array:
    """Q(lambda) returns over a rollout (Peng's: no trace cut at exploratory actions), episode-boundary aware.

    The recursion of PQN (Gallici et al. 2024, Algorithm 1; ``purejaxql``'s ``_get_target``), with
    ``boot_t = max_a Q(next_obs_t, a)`` the value of the *true* next observation (the final one
    where an episode ended), computed backwards for ``t = T-1 .. 0``::

        G_{T-1} = r_{T-1} + gamma * (1 - term_{T-1}) * boot_{T-1}            (rollout end)
        G_t     = r_t                                           if term_t     (no bootstrap)
        G_t     = r_t + gamma * boot_t                          if trunc_t    (cut, not ended)
        G_t     = r_t + gamma * (lambda * G_{t+1} + (1 - lambda) * boot_t)    otherwise

    Termination wins when both flags are set. In one line, with ``c_t = 1 - (term_t | trunc_t)``
    for ``t < T-1`` and ``c_{T-1} = 0``:
    ``G_t = r_t + gamma * (1 - term_t) * ((1 - lambda c_t) boot_t + lambda c_t G_{t+1})``.
    ``lambda = 0`` gives one-step Q-learning targets ``r + gamma * (1 - term) * boot``;
    ``lambda = 1`` gives the discounted return to the episode end, bootstrapped only where the
    episode was cut (by truncation or the rollout's end). With ``boot_t = V(next_obs_t)`` these are
    GAE's lambda-returns (:func:`gae`'s ``targets``).

    Args:
        rewards: float ``[T, B]`` or ``[T]``.
        bootstrap: ``boot_t``, same shape.
        terminated: bool (or 0/1), same shape.
        truncated: bool (or 0/1), same shape.
        gamma: discount, scalar in [0, 1] (Python float or traced); or one per step, the shape of
            ``rewards`` (``gamma_t`` in place of ``gamma`` above; a two-player game's
            ``gamma * turn_sign``, :func:`rljax.env.turn_sign`, which is -1 where the turn passed).
        lambda_: trace parameter, scalar in [0, 1].

    Returns:
        ``G`` ``[T, B]`` / ``[T]`` float (the dtype of ``rewards``/``bootstrap``, at least float32).

    Raises:
        ValueError: the four arrays do not share one shape ``[T]`` or ``[T, B]``.
    """
    rewards, bootstrap = jnp.asarray(rewards), jnp.asarray(bootstrap)
    dtype = jnp.promote_types(jnp.result_type(rewards, bootstrap), jnp.float32)
    rewards, bootstrap = rewards.astype(dtype), bootstrap.astype(dtype)
    terminated, truncated = jnp.asarray(terminated, bool), jnp.asarray(truncated, bool)
    if not rewards.shape == bootstrap.shape == terminated.shape == truncated.shape or rewards.ndim not in (1, 2):
        raise ValueError(f"q_lambda_targets: rewards, bootstrap, terminated, truncated must share one shape "
                         f"[T] or [T, B]; got {rewards.shape}, {bootstrap.shape}, {terminated.shape}, "
                         f"{truncated.shape}")
    gamma, lambda_ = jnp.asarray(gamma, dtype), jnp.asarray(lambda_, dtype)
    if gamma.ndim and gamma.shape != rewards.shape:
        raise ValueError(f"q_lambda_targets: gamma must be a scalar or one per step {rewards.shape}; got {gamma.shape}")
    not_term = 1.0 - terminated.astype(dtype)
    cont = (1.0 - (terminated | truncated).astype(dtype)).at[-1].set(0.0)
    per_step = gamma if gamma.ndim else None

    def step(next_return: jax.Array, xs: tuple[jax.Array, ...]) -> tuple[jax.Array, jax.Array]:
        r, boot, nt, c, *g_t = xs
        g = r + (g_t[0] if g_t else gamma) * nt * ((1.0 - lambda_ * c) * boot + lambda_ * c * next_return)
        return g, g

    xs = (rewards, bootstrap, not_term, cont) + (() if per_step is None else (per_step,))
    _, returns = jax.lax.scan(step, jnp.zeros(rewards.shape[1:], dtype), xs, reverse=True)
    return returns


def smoothed_target_action(action: jax.Array, eps: jax.Array, low: jax.Array, high: jax.Array,
                           policy_noise: jax.typing.ArrayLike, noise_clip: jax.typing.ArrayLike) -> jax.Array:
    """TD3's target policy smoothing (Fujimoto et al. 2018, eq. 15): the action a target is bootstrapped at.

    ``a' = clip(mu'(s') + half * clip(policy_noise * eps, -noise_clip, noise_clip), low, high)``
    with ``half = (high - low) / 2``: the noise is drawn and clipped in normalised ``[-1, 1]``
    units, so ``policy_noise`` and ``noise_clip`` mean the same on every box.

    Args:
        action: float ``[N, A]``, the target actor's action ``mu'(s')`` in env units.
        eps: float ``[N, A]``, standard normal draws.
        low: float ``[A]``, the box's lower bounds.
        high: float ``[A]``, its upper bounds.
        policy_noise: float scalar, the noise std (half-widths).
        noise_clip: float scalar, the noise bound (half-widths).

    Returns:
        float ``[N, A]`` in ``[low, high]``.
    """
    noise = jnp.clip(policy_noise * eps, -noise_clip, noise_clip)
    return jnp.clip(action + (high - low) / 2.0 * noise, low, high)


def clipped_double_q_target(reward: jax.Array, discount: jax.Array, next_q: jax.Array) -> jax.Array:
    """TD3's clipped double-Q target (Fujimoto et al. 2018, eq. 10), bootstrapped from replay items.

    ``y = r + discount * min_i Q'_i(s', a')``, ``a'`` the smoothed target action
    (:func:`smoothed_target_action`). With n-step items ``r`` is the discounted n-step reward sum
    and ``discount`` is ``gamma^m``, 0 after a termination (nothing is bootstrapped past an
    episode's end); a truncated item keeps ``gamma^m`` and bootstraps from its final observation.

    Args:
        reward: float ``[N]``.
        discount: float ``[N]``.
        next_q: float ``[2, N]``, the twin target critics at ``(s', a')``.

    Returns:
        float ``[N]``.
    """
    return reward + discount * jnp.min(next_q, axis=0)


def soft_td_target(reward: jax.Array, discount: jax.Array, next_q: jax.Array, next_log_prob: jax.Array,
                   alpha: jax.typing.ArrayLike) -> jax.Array:
    """SAC's soft clipped double-Q target, bootstrapped from replay items.

    ``y = r + discount * (min_i Q'_i(s', a') - alpha * log pi(a'|s'))``, ``a' ~ pi(.|s')``
    (Haarnoja et al. 2018, eq. 3 with the soft value of eq. 3's ``V``; Fujimoto et al. 2018 for the
    minimum). ``reward`` and ``discount`` as in :func:`clipped_double_q_target`: ``discount`` is 0
    after a termination, ``gamma^m`` after ``m`` steps or a truncation.

    Args:
        reward: float ``[N]``.
        discount: float ``[N]``.
        next_q: float ``[2, N]``, the twin target critics at ``(s', a')``.
        next_log_prob: float ``[N]``, ``log pi(a'|s')``.
        alpha: float scalar, the entropy temperature.

    Returns:
        float ``[N]``.
    """
    return reward + discount * (jnp.min(next_q, axis=0) - alpha * next_log_prob)
