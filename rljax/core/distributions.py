"""Small, exact action distributions for policies, written as pytrees.

Every distribution here is a :func:`flax.struct.dataclass`, so it can be returned from a jitted
function, passed through ``jax.lax.scan`` or ``vmap``, and stored in a rollout without conversion.
All methods are pure and broadcast over any leading batch dimensions ``[...]``.

* :class:`Categorical` -- discrete actions, parameterised by unnormalised logits.
* :class:`DiagGaussian` -- continuous actions, unbounded, independent dimensions.
* :class:`TanhGaussian` -- continuous actions squashed into ``[low, high]`` (used by SAC).

Box actions with PPO
--------------------
The standard approach for on-policy methods (PureJaxRL, CleanRL, Brax PPO) is to sample from an
*unbounded* :class:`DiagGaussian`, store that unclipped sample in the rollout, compute every
``log_prob`` on the unclipped sample, and clip only the copy of the action that is sent to the
environment (:func:`clip_to_space`). Clipping before ``log_prob`` would make the probability ratio
refer to an action the policy never sampled, and the clipped values sit on the boundary where the
Gaussian density is not the density of the clipped variable. Squashing (:class:`TanhGaussian`) is
the alternative used by off-policy methods such as SAC, where the policy must produce in-bound
actions that the critic is evaluated on.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import struct

__all__ = ["Categorical", "DiagGaussian", "TanhGaussian", "clip_to_space"]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_LOG_2 = math.log(2.0)


def clip_to_space(action: jax.typing.ArrayLike, low: jax.typing.ArrayLike,
                  high: jax.typing.ArrayLike) -> jax.Array:
    """Clips a continuous action into ``[low, high]`` before it is sent to the environment.

    Only the environment's copy should be clipped; keep the unclipped sample for ``log_prob``
    (see the module docstring).

    Args:
        action: float array ``[..., action_dim]``.
        low: lower bounds, broadcastable to ``action`` (e.g. ``Box.low``, shape ``[action_dim]``).
        high: upper bounds, as ``low``.

    Returns:
        ``action`` clipped elementwise, same shape and dtype as ``action``.
    """
    action = jnp.asarray(action)
    return jnp.clip(action, jnp.asarray(low, action.dtype), jnp.asarray(high, action.dtype))


@struct.dataclass
class Categorical:
    """Categorical distribution over ``{0, ..., num_actions - 1}``.

    Attributes:
        logits: float ``[..., num_actions]``, unnormalised log-probabilities. They are normalised
            with ``log_softmax`` inside each method (never ``log(softmax(x))``, which underflows to
            ``-inf`` for very negative logits).
    """

    logits: jax.Array

    @property
    def log_probs(self) -> jax.Array:
        """Normalised log-probabilities, float ``[..., num_actions]``."""
        return jax.nn.log_softmax(self.logits, axis=-1)

    @property
    def probs(self) -> jax.Array:
        """Probabilities, float ``[..., num_actions]``."""
        return jax.nn.softmax(self.logits, axis=-1)

    def sample(self, key: jax.Array) -> jax.Array:
        """Draws one action per batch element.

        Args:
            key: a PRNG key.

        Returns:
            int32 ``[...]`` (the logits' shape without the last axis).
        """
        return jax.random.categorical(key, self.logits, axis=-1).astype(jnp.int32)

    def log_prob(self, action: jax.typing.ArrayLike) -> jax.Array:
        """Log-probability of ``action``.

        Args:
            action: integer ``[...]``, broadcastable to the batch shape.

        Returns:
            float ``[...]``: ``log softmax(logits)[action]``.
        """
        action = jnp.asarray(action).astype(jnp.int32)
        log_probs = self.log_probs
        action = jnp.broadcast_to(action, log_probs.shape[:-1])
        return jnp.take_along_axis(log_probs, action[..., None], axis=-1)[..., 0]

    def entropy(self) -> jax.Array:
        """Entropy ``H = -sum_a p(a) log p(a)``, float ``[...]``.

        An action with probability exactly 0 (a logit of ``-inf``, e.g. from action masking)
        contributes 0 rather than ``0 * -inf = nan``, in the value and in the gradient.
        """
        log_probs = self.log_probs
        probs = jnp.exp(log_probs)
        # Mask the log (not the product): a where() around ``p * log p`` still back-propagates
        # ``0 * -inf = nan`` through the unselected branch.
        safe_log_probs = jnp.where(probs > 0, log_probs, 0.0)
        return -jnp.sum(probs * safe_log_probs, axis=-1)

    def mode(self) -> jax.Array:
        """The most likely action, int32 ``[...]``."""
        return jnp.argmax(self.logits, axis=-1).astype(jnp.int32)


@struct.dataclass
class DiagGaussian:
    """Gaussian with diagonal covariance; dimensions along the last axis are independent.

    Attributes:
        mean: float ``[..., action_dim]``.
        log_std: float, broadcastable to ``mean`` (e.g. a state-independent ``[action_dim]``).
    """

    mean: jax.Array
    log_std: jax.Array

    def _log_std(self) -> jax.Array:
        return jnp.broadcast_to(self.log_std, jnp.asarray(self.mean).shape)

    def sample(self, key: jax.Array) -> jax.Array:
        """Draws ``mean + exp(log_std) * eps`` with ``eps ~ N(0, I)``.

        Args:
            key: a PRNG key.

        Returns:
            float ``[..., action_dim]``, unbounded (see :func:`clip_to_space`).
        """
        mean = jnp.asarray(self.mean)
        eps = jax.random.normal(key, mean.shape, mean.dtype)
        return mean + jnp.exp(self._log_std()) * eps

    def log_prob(self, action: jax.typing.ArrayLike) -> jax.Array:
        """Log-density, summed over the last (action) axis.

        ``log p(a) = sum_i [ -0.5 ((a_i - mu_i) / sigma_i)^2 - log sigma_i - 0.5 log(2 pi) ]``

        Args:
            action: float ``[..., action_dim]``.

        Returns:
            float ``[...]``.
        """
        log_std = self._log_std()
        z = (jnp.asarray(action) - self.mean) * jnp.exp(-log_std)
        return jnp.sum(-0.5 * jnp.square(z) - log_std - _HALF_LOG_2PI, axis=-1)

    def entropy(self) -> jax.Array:
        """Differential entropy ``sum_i (0.5 + 0.5 log(2 pi) + log sigma_i)``, float ``[...]``."""
        return jnp.sum(0.5 + _HALF_LOG_2PI + self._log_std(), axis=-1)

    def mode(self) -> jax.Array:
        """The mean, float ``[..., action_dim]``."""
        return jnp.asarray(self.mean)


def _log1m_tanh_sq(u: jax.Array) -> jax.Array:
    """``log(1 - tanh(u)^2)`` computed stably.

    ``1 - tanh(u)^2 = sech(u)^2 = 4 / (e^u + e^-u)^2``, so
    ``log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))``. The naive form rounds ``tanh(u)`` to
    exactly 1 for ``|u| > ~9`` in float32 and returns ``-inf``; this form stays finite (it is
    ``~ -2|u| + 2 log 2`` for large ``|u|``). It is accurate for both signs of ``u`` because
    ``softplus`` is evaluated stably.
    """
    return 2.0 * (_LOG_2 - u - jax.nn.softplus(-2.0 * u))


@struct.dataclass
class TanhGaussian:
    """A diagonal Gaussian pushed through ``tanh`` and rescaled to ``[low, high]``.

    With ``u ~ N(mean, diag(exp(log_std)^2))`` the action is
    ``a = low + (high - low) / 2 * (tanh(u) + 1)``, and by the change-of-variables formula
    (Haarnoja et al. 2018, "Soft Actor-Critic", Appendix C):

    ``log p(a) = log N(u; mean, std) - sum_i log(1 - tanh(u_i)^2)
    - sum_i log((high_i - low_i) / 2)``.

    There is no closed-form entropy; SAC estimates it with ``-log p(a)`` of a sample, which
    :meth:`sample_and_log_prob` provides without inverting ``tanh``.

    Attributes:
        mean: float ``[..., action_dim]``, mean of the pre-squash Gaussian.
        log_std: float, broadcastable to ``mean``.
        low: float, broadcastable to ``mean``; finite lower bounds.
        high: float, broadcastable to ``mean``; finite upper bounds, ``high > low``.
    """

    mean: jax.Array
    log_std: jax.Array
    low: jax.Array
    high: jax.Array

    def _base(self) -> DiagGaussian:
        return DiagGaussian(self.mean, self.log_std)

    def _half_range(self) -> jax.Array:
        return jnp.broadcast_to((jnp.asarray(self.high) - jnp.asarray(self.low)) / 2.0,
                                jnp.asarray(self.mean).shape)

    def _squash(self, u: jax.Array) -> jax.Array:
        return jnp.asarray(self.low) + self._half_range() * (jnp.tanh(u) + 1.0)

    def _log_prob_from_pre_tanh(self, u: jax.Array) -> jax.Array:
        correction = jnp.sum(_log1m_tanh_sq(u) + jnp.log(self._half_range()), axis=-1)
        return self._base().log_prob(u) - correction

    def sample(self, key: jax.Array) -> jax.Array:
        """Draws an action in ``[low, high]``, float ``[..., action_dim]``.

        In float32 ``tanh`` saturates, so a sample may equal a bound exactly.
        """
        return self._squash(self._base().sample(key))

    def sample_and_log_prob(self, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Draws an action and its log-density from the pre-squash sample.

        Computing the log-density from ``u`` avoids ``atanh`` of a saturated action, which is
        inaccurate (or infinite) near the bounds. Gradients flow through the reparameterised sample.

        Args:
            key: a PRNG key.

        Returns:
            ``(action, log_prob)``: float ``[..., action_dim]`` and float ``[...]``.
        """
        u = self._base().sample(key)
        return self._squash(u), self._log_prob_from_pre_tanh(u)

    def log_prob(self, action: jax.typing.ArrayLike) -> jax.Array:
        """Log-density of a given action, float ``[...]``.

        Inverts the squash with ``atanh``; the normalised action is clipped to ``+-(1 - 1e-6)`` so a
        boundary action gives a large finite value instead of ``inf``/``nan``. Prefer
        :meth:`sample_and_log_prob` for freshly sampled actions.

        Args:
            action: float ``[..., action_dim]`` in ``[low, high]``.
        """
        action = jnp.asarray(action)
        y = (action - jnp.asarray(self.low)) / self._half_range() - 1.0
        y = jnp.clip(y, -1.0 + 1e-6, 1.0 - 1e-6)
        return self._log_prob_from_pre_tanh(jnp.arctanh(y))

    def mode(self) -> jax.Array:
        """``low + (high - low) / 2 * (tanh(mean) + 1)``, float ``[..., action_dim]``.

        This is the squashed mode of the Gaussian (the deterministic action used for evaluation),
        not the mode of the squashed density, which can differ for large ``std``.
        """
        return self._squash(jnp.asarray(self.mean))
