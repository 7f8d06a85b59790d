"""Return distributions for distributional value learning: the categorical projection and loss of C51
(Bellemare, Dabney & Munos 2017) and the quantile regression loss of QR-DQN (Dabney et al. 2018).

Both learn the distribution of the return ``Z(s, a)`` instead of its mean ``Q(s, a) = E[Z(s, a)]``, from
replay items ``(s, a, R, discount, s')`` whose ``R`` and ``discount`` already fold in n steps and the
episode's end (:func:`rljax.core.returns.n_step_transitions`): ``R = sum_{k<m} gamma^k r_{t+k}`` and
``discount = gamma^m``, 0 after a termination. The distributional Bellman target is the distribution of
``R + discount * Z(s', a*)``: a terminated item's target is the point mass at ``R``; a truncated one
bootstraps through its final observation (``s'``) as a non-terminal step does.

Shapes: ``N`` items, ``K`` atoms (categorical) or ``Q`` quantiles. Every function is pure, works with and
without ``jax.jit`` and with traced ``rewards``/``discounts``; callers stop gradients through targets.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["support", "categorical_projection", "categorical_loss", "categorical_mean_std", "quantile_midpoints",
           "quantile_huber_loss", "value_rescale", "value_unrescale", "two_hot"]


def support(v_min: float, v_max: float, num_atoms: int) -> jax.Array:
    """The fixed atoms ``z_i = v_min + i * (v_max - v_min) / (num_atoms - 1)``, float32 ``[K]``.

    Raises:
        ValueError: ``num_atoms < 2`` or ``v_max <= v_min`` (the atoms would not span an interval).
    """
    if num_atoms < 2:
        raise ValueError(f"num_atoms={num_atoms}: a categorical support needs at least 2 atoms")
    if not v_max > v_min:
        raise ValueError(f"v_min={v_min}, v_max={v_max}: v_max must be greater than v_min")
    return jnp.linspace(v_min, v_max, num_atoms, dtype=jnp.float32)


def categorical_projection(probs: jax.Array, rewards: jax.Array, discounts: jax.Array, atoms: jax.Array) -> jax.Array:
    """The projection ``Phi`` of the distribution of ``R + discount * Z`` onto ``atoms`` (C51's
    Algorithm 1, Bellemare et al. 2017).

    ``Z`` puts mass ``probs[n, j]`` on atom ``z_j``; each shifted atom ``Tz_j = clip(R_n + discount_n z_j,
    v_min, v_max)`` splits its mass between the two atoms around it in proportion to its distance::

        (Phi T Z)_i = sum_j clip(1 - |Tz_j - z_i| / dz, 0, 1) * probs[n, j],    dz = z_1 - z_0

    (the hat-function form of the floor/ceil split: an atom that lands exactly on ``z_i`` gives it all
    its mass). ``discount = 0`` (a termination) gives the point mass at ``clip(R)``, split the same way.

    Args:
        probs: float ``[N, K]``, each row a distribution over ``atoms``.
        rewards: float ``[N]``, the n-step discounted reward sums.
        discounts: float ``[N]``, ``gamma^m`` (0 after a termination).
        atoms: float ``[K]``, evenly spaced and increasing (:func:`support`).

    Returns:
        float32 ``[N, K]``: rows that sum to 1 (to rounding) when the rows of ``probs`` do.
    """
    atoms = jnp.asarray(atoms, jnp.float32)
    v_min, v_max = atoms[0], atoms[-1]
    dz = atoms[1] - atoms[0]
    shifted = jnp.clip(rewards[:, None] + discounts[:, None] * atoms[None, :], v_min, v_max)  # [N, K] (j)
    weight = jnp.clip(1.0 - jnp.abs(shifted[:, None, :] - atoms[None, :, None]) / dz, 0.0, 1.0)  # [N, K(i), K(j)]
    return jnp.einsum("nij,nj->ni", weight, probs.astype(jnp.float32))


def categorical_loss(logits: jax.Array, target_probs: jax.Array) -> jax.Array:
    """Cross-entropy ``-sum_i target_i log softmax(logits)_i`` per item (C51's loss), float32 ``[N]``.

    Args:
        logits: float ``[N, K]``, the predicted distribution's logits.
        target_probs: float ``[N, K]``, the projected target (:func:`categorical_projection`).
    """
    return -jnp.sum(target_probs * jax.nn.log_softmax(logits, axis=-1), axis=-1)


def categorical_mean_std(logits: jax.Array, atoms: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The mean ``sum_i p_i z_i`` and standard deviation ``sqrt(sum_i p_i (z_i - mean)^2)`` of the
    distribution ``p = softmax(logits)`` on ``atoms``, each float ``[...]``.

    Args:
        logits: float ``[..., K]``.
        atoms: float ``[K]`` (:func:`support`).
    """
    probs = jax.nn.softmax(logits, axis=-1)
    mean = jnp.sum(probs * atoms, axis=-1)
    std = jnp.sqrt(jnp.maximum(jnp.sum(probs * jnp.square(atoms - mean[..., None]), axis=-1), 0.0))
    return mean, std


def quantile_midpoints(num_quantiles: int) -> jax.Array:
    """The quantile levels ``tau_hat_i = (2 i + 1) / (2 Q)``, ``i = 0 .. Q-1``, float32 ``[Q]``: the
    midpoints of ``Q`` equal probability bins, whose quantiles minimise the 1-Wasserstein distance to
    the return distribution (Dabney et al. 2018, Lemma 2)."""
    if num_quantiles < 1:
        raise ValueError(f"num_quantiles={num_quantiles}: at least 1 quantile")
    return (2.0 * jnp.arange(num_quantiles, dtype=jnp.float32) + 1.0) / (2.0 * num_quantiles)


def quantile_huber_loss(quantiles: jax.Array, targets: jax.Array, taus: jax.Array, kappa: float = 1.0) -> jax.Array:
    """QR-DQN's quantile Huber loss per item (Dabney et al. 2018, eq. 10), float32 ``[N]``::

        u_ij   = targets_j - quantiles_i
        rho_ij = |tau_i - 1{u_ij < 0}| * L_kappa(u_ij) / kappa      (kappa > 0)
               = |tau_i - 1{u_ij < 0}| * |u_ij|                    (kappa = 0: the quantile loss)
        loss   = sum_i mean_j rho_ij

    with ``L_kappa(u) = u^2 / 2`` for ``|u| <= kappa`` and ``kappa (|u| - kappa / 2)`` beyond.

    Args:
        quantiles: float ``[N, Q]``, the predicted quantiles ``theta_i(s, a)``.
        targets: float ``[N, Q']``, samples of the target distribution (``R + discount *
            theta_j(s', a*)``), gradients stopped by the caller.
        taus: float ``[Q]``, the levels of ``quantiles`` (:func:`quantile_midpoints`).
        kappa: the Huber threshold, ``>= 0``.
    """
    if kappa < 0:
        raise ValueError(f"kappa={kappa}: the Huber threshold must be >= 0")
    u = targets[:, None, :] - quantiles[:, :, None]  # [N, Q, Q']
    below = jax.lax.stop_gradient((u < 0).astype(jnp.float32))
    weight = jnp.abs(taus[None, :, None] - below)
    if kappa == 0:
        rho = weight * jnp.abs(u)
    else:
        absu = jnp.abs(u)
        huber = jnp.where(absu <= kappa, 0.5 * jnp.square(u), kappa * (absu - 0.5 * kappa))
        rho = weight * huber / kappa
    return jnp.sum(jnp.mean(rho, axis=2), axis=1)


RESCALE_EPS = 1e-3
"""The ``eps`` of :func:`value_rescale` (Pohlen et al. 2018; MuZero's value and reward transform)."""


def value_rescale(x: jax.Array, eps: float = RESCALE_EPS) -> jax.Array:
    """``h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x`` (Pohlen et al. 2018, "Observe and look further"),
    the invertible squashing under which MuZero (Schrittwieser et al. 2020, Appendix F) represents
    values and rewards on a categorical support; elementwise, ``h(0) = 0``, odd and increasing."""
    return jnp.sign(x) * (jnp.sqrt(jnp.abs(x) + 1.0) - 1.0) + eps * x


def value_unrescale(y: jax.Array, eps: float = RESCALE_EPS) -> jax.Array:
    """The inverse of :func:`value_rescale` in closed form, elementwise::

        h^-1(y) = sign(y) * (((sqrt(1 + 4 eps (|y| + 1 + eps)) - 1) / (2 eps))^2 - 1)
    """
    root = (jnp.sqrt(1.0 + 4.0 * eps * (jnp.abs(y) + 1.0 + eps)) - 1.0) / (2.0 * eps)
    return jnp.sign(y) * (jnp.square(root) - 1.0)


def two_hot(x: jax.Array, atoms: jax.Array) -> jax.Array:
    """The distribution on ``atoms`` with mean ``x``: ``x`` clipped to ``[atoms[0], atoms[-1]]`` puts
    its mass on the two atoms around it in proportion to its nearness, ``p_i = clip(1 - |x - z_i| /
    dz, 0, 1)`` (an ``x`` on an atom gives it all the mass; MuZero's scalar-to-categorical target).

    Args:
        x: float ``[...]``.
        atoms: float ``[K]``, evenly spaced and increasing (:func:`support`).

    Returns:
        float32 ``[..., K]``, rows summing to 1 (to rounding).
    """
    atoms = jnp.asarray(atoms, jnp.float32)
    dz = atoms[1] - atoms[0]
    x = jnp.clip(jnp.asarray(x, jnp.float32), atoms[0], atoms[-1])
    return jnp.clip(1.0 - jnp.abs(x[..., None] - atoms) / dz, 0.0, 1.0)
