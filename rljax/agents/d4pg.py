"""D4PG (Barth-Maron et al. 2018, "Distributed Distributional Deterministic Policy Gradients"): a
deterministic actor for Box actions with a categorical (C51) critic and n-step targets.

The critic outputs, for ``(s, a)``, logits over ``num_atoms`` fixed atoms ``z_i`` on ``[v_min, v_max]``
(:func:`rljax.core.distributional.support`; :class:`rljax.core.networks.BoxCritic` with ``num_atoms``
outputs); ``Q(s, a) = sum_i p_i(s, a) z_i``. The target of an item ``(s, a, R, discount, s')`` is the
distribution of ``R + discount * Z'(s', mu'(s'))`` of the target critic at the target actor's action,
projected onto the atoms (:func:`~rljax.core.distributional.categorical_projection`; ``discount =
gamma^m`` folds in the n-step window, 0 after a termination, so a truncated episode bootstraps through
its final observation), and the critic's loss is the cross-entropy to it (also the item's priority under
prioritised replay). The actor ascends the critic's mean, ``L_mu = -mean_s sum_i p_i(s, mu(s)) z_i``
(the paper's distributional policy gradient, eq. 4, for the expectation of the distribution).

Everything else is TD3's skeleton (:func:`rljax.agents.td3.make_deterministic_actor_critic`): Polyak
targets, Gaussian exploration noise, random actions before ``learning_starts``, n-step and
prioritised replay, data parallelism. The defaults are D4PG's: one critic, no target smoothing
(``policy_noise = 0``), the actor updated at every critic step (``policy_delay = 1``), n-step returns
(3 steps; the paper used 5).
Setting ``num_critics = 2`` (the target from the critic whose mean is lower, per item),
``policy_noise > 0`` or ``policy_delay > 1`` puts TD3's fixes back on the distributional critic.

``v_min``/``v_max`` must cover the discounted returns (rewards ``r`` per step: within
``r_min / (1 - gamma)`` and ``r_max / (1 - gamma)``); returns outside are clipped to the ends.
Metrics add ``z_std_mean``: the mean standard deviation of the critics' predicted distributions.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp

from rljax.agents import register
from rljax.agents.base import Agent, bounded_box
from rljax.agents.offpolicy import ReplayItem, masked_mean
from rljax.agents.td3 import TD3Config, TD3Networks, make_deterministic_actor_critic
from rljax.core.config import check_ints, field, hyperparams_class
from rljax.core.distributional import categorical_loss, categorical_mean_std, categorical_projection, support
from rljax.core.returns import smoothed_target_action

__all__ = ["D4PGConfig", "D4PGHyperParams", "d4pg_critic_loss", "d4pg_actor_loss", "make_d4pg"]


@dataclasses.dataclass(frozen=True)
class D4PGConfig(TD3Config):
    """D4PG's configuration: TD3's (:class:`~rljax.agents.td3.TD3Config`; defaults: Pendulum-v1 to a
    greedy return above -200 within 2e4 env steps) with D4PG's defaults and the critic's support.
    Pendulum-v1's rewards lie in ``[-16.3, 0]``; the default support ``[-1000, 0]`` covers the
    discounted returns a learning policy meets there."""

    n_step: int = field(3, "n-step returns (1 = one-step TD; the paper's 5 leaves Pendulum-v1 stuck on some seeds)")
    policy_delay: int = field(1, "the actor and the targets are updated every policy_delay-th critic step")
    policy_noise: float = field(0.0, "std of the target-smoothing noise, in box half-widths (0: D4PG's none)",
                                sweepable=True)
    num_atoms: int = field(51, "atoms of the critic's categorical return distribution")
    v_min: float = field(-1000.0, "lowest atom (returns below it are clipped to it)")
    v_max: float = field(0.0, "highest atom (returns above it are clipped to it)")
    num_critics: int = field(1, "critics (2: the target from the one whose mean is lower, per item)")

    def validate(self) -> None:
        """TD3's checks, then the support's (``2 <= num_atoms <= 1024``, ``v_min < v_max``) and
        ``num_critics`` in 1..2."""
        super().validate()
        check_ints(self, ("num_atoms",), 2, 1024)
        check_ints(self, ("num_critics",), 1, 2)
        if not self.v_max > self.v_min:
            raise ValueError(f"v_min={self.v_min}, v_max={self.v_max}: v_max must be greater than v_min")


D4PGHyperParams = hyperparams_class(D4PGConfig)


def d4pg_critic_loss(critic_params: Any, target_critic_params: Any, target_actor_params: Any, nets: TD3Networks,
                     items: ReplayItem, weights: jax.Array, key: jax.Array, policy_noise: jax.Array,
                     noise_clip: jax.Array, *, atoms: jax.Array
                     ) -> tuple[jax.Array, tuple[jax.Array, dict[str, jax.Array]]]:
    """The categorical critics' cross-entropy to the projected n-step target.

    ``L_Z = mean_w( sum_c -sum_i Phi(R + discount * Z'_{c*}(s', a'))_i log p_{c,i}(s, a) )``: ``a'`` the
    target actor's action (smoothed by :func:`rljax.core.returns.smoothed_target_action`, none at
    ``policy_noise = 0``), ``c*`` per item the target critic with the lowest mean (the only one with a
    single critic), ``Phi`` the projection onto ``atoms``, no gradient through the target; ``mean_w``
    the importance-weighted mean over valid items.

    Args:
        critic_params: online critic params (leading ``[C]`` axis; differentiated).
        target_critic_params: target critic params.
        target_actor_params: target actor params.
        nets: the network functions (a critic with ``K = len(atoms)`` outputs).
        items: a batch of :class:`ReplayItem` ``[N]``.
        weights: float32 ``[N]`` importance weights (0 for invalid items).
        key: PRNG key of the smoothing noise.
        policy_noise: float scalar.
        noise_clip: float scalar.
        atoms: float ``[K]``, the support.

    Returns:
        ``(loss, (priority [N], metrics))``; ``priority`` is the cross-entropy averaged over the critics.
    """
    mu = nets.actor(target_actor_params, items.next_obs)
    next_action = smoothed_target_action(mu, jax.random.normal(key, mu.shape, mu.dtype), nets.low, nets.high,
                                         policy_noise, noise_clip)
    next_logits = nets.critic(target_critic_params, items.next_obs, next_action)  # [C, N, K]
    lowest = jnp.argmin(categorical_mean_std(next_logits, atoms)[0], axis=0)  # [N]
    next_probs = jax.nn.softmax(jnp.take_along_axis(next_logits, lowest[None, :, None], axis=0)[0], axis=-1)
    target = jax.lax.stop_gradient(categorical_projection(next_probs, items.reward, items.discount, atoms))
    logits = nets.critic(critic_params, items.obs, items.action)  # [C, N, K]
    per_critic = jax.vmap(categorical_loss, in_axes=(0, None))(logits, target)  # [C, N]
    loss = masked_mean(jnp.sum(per_critic, axis=0), weights)
    mean, std = categorical_mean_std(logits, atoms)
    metrics = {"critic_loss": loss, "q_mean": jnp.mean(mean), "z_std_mean": jnp.mean(std),
               "target_mean": jnp.mean(jnp.sum(target * atoms, axis=-1))}
    return loss, (jnp.mean(per_critic, axis=0), metrics)


def d4pg_actor_loss(actor_params: Any, critic_params: Any, nets: TD3Networks, obs: Any, mask: jax.Array, *,
                    atoms: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    """``L_mu = -mean( sum_i p_{1,i}(s, mu(s)) z_i )`` over valid items: the first critic's mean, the
    gradient through the critic into the action (its params held fixed)."""
    logits = nets.critic(critic_params, obs, nets.actor(actor_params, obs))[0]
    loss = masked_mean(-categorical_mean_std(logits, atoms)[0], mask)
    return loss, {"actor_loss": loss}


def make_d4pg(config: D4PGConfig, env: Any, env_params: Any, axis_name: str | None = None) -> Agent:
    """Builds D4PG's per-device program for a continuous-action (bounded ``Box``) ``env``."""
    atoms = support(config.v_min, config.v_max, config.num_atoms)
    return make_deterministic_actor_critic(
        config, env, env_params, axis_name, "D4PG", num_atoms=config.num_atoms, num_critics=config.num_critics,
        critic_loss=functools.partial(d4pg_critic_loss, atoms=atoms),
        actor_loss=functools.partial(d4pg_actor_loss, atoms=atoms))


register("d4pg", D4PGConfig, make_d4pg, fits=lambda env, env_params: bounded_box(env, env_params, "D4PG"))
