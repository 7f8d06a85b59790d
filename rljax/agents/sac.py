"""SAC (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications") for Box actions.

* Twin critics ``Q_1, Q_2`` on ``concat(obs, a_norm)`` (``a_norm``: the action rescaled to
  ``[-1, 1]``; :class:`rljax.core.networks.BoxCritic`, shared with TD3) with Polyak-averaged
  targets; the TD target (:func:`rljax.core.returns.soft_td_target`) and the actor use their
  minimum (clipped double Q, Fujimoto et al. 2018).
* A tanh-squashed Gaussian actor (:class:`rljax.core.distributions.TanhGaussian`) whose bounds are the
  env's ``Box`` ``[low, high]``; ``log_std`` is squashed smoothly into ``[log_std_min, log_std_max]``.
* Automatic entropy tuning: ``log alpha`` is learned so the policy's entropy tracks
  ``target_entropy = -target_entropy_scale * |A|``.
* ``n_step``, ``prioritized`` replay and data parallelism come from the shared off-policy core
  (:mod:`rljax.agents.offpolicy`): truncated episodes bootstrap from their final observation.

One update collects ``num_steps`` steps from each of ``num_envs`` envs (uniformly random actions
before ``learning_starts``), adds them to replay, then takes ``gradient_steps`` gradient steps; each
gradient step updates the critics, then the actor (against the new critics), then ``alpha``, then
Polyak-averages the target critics.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from rljax.agents import register
from rljax.agents.base import Agent, bounded_box, gradient_step, make_optimizer, observation_layout, pmean
from rljax.agents.offpolicy import (OffPolicyConfig, OffPolicyHooks, OffPolicyState, ReplayItem, UpdateContext,
                                    make_offpolicy_agent, masked_mean, polyak)
from rljax.core.config import (TOTAL_TIMESTEPS_HELP, check_choice, check_floats, check_sizes,
                          field, hyperparams_class, require)
from rljax.core.distributions import TanhGaussian
from rljax.env import describe_space
from rljax.core.networks import (ACTIVATIONS, MLP, BoxCritic, LeafEncoding, ObsEncoder, init_actor_and_twin_critics,
                                 twin_critic_apply)
from rljax.core.returns import soft_td_target

__all__ = ["SACConfig", "SACHyperParams", "SACLearner", "SACState", "SACNetworks", "SACActor",
           "make_sac_networks", "sac_critic_loss", "sac_actor_loss",
           "sac_alpha_loss", "sac_learn_step", "sac_optimizers", "SACOptimizers", "init_learner", "make_sac"]


@dataclasses.dataclass(frozen=True)
class SACConfig(OffPolicyConfig):
    """SAC's configuration (defaults: Pendulum-v1 to a return above -200 within 2e4 env steps).

    The replay, schedule and shared hyperparameter fields come from
    :class:`~rljax.agents.offpolicy.OffPolicyConfig`.
    """

    env: str = field("Pendulum-v1", "environment name (needs a bounded Box action space)")
    total_timesteps: int = field(20_000, TOTAL_TIMESTEPS_HELP)
    num_envs: int = field(4, "parallel environments, over all devices")
    # ----- structural -----
    gradient_steps: int = field(2, "gradient steps per update (update-to-data ratio = this / (num_envs*num_steps))")
    learning_starts: int = field(1_000, "env steps of uniformly random actions before learning begins")
    prioritized: bool = field(False, "proportional prioritised replay (weights the critic loss)")
    hidden_sizes: tuple[int, ...] = field((64, 64), "actor and critic MLP widths")
    activation: str = field("relu", "hidden activation")
    log_std_min: float = field(-5.0, "lower bound of the actor's log std")
    log_std_max: float = field(2.0, "upper bound of the actor's log std")
    autotune: bool = field(True, "learn alpha towards the target entropy (else alpha stays initial_alpha)")

    # ----- sweepable hyperparameters (traced) -----
    tau: float = field(0.005, "Polyak rate of the target critics, applied every gradient step",
                       sweepable=True)
    max_grad_norm: float = field(10.0, "global-norm gradient clipping of the actor and critic updates",
                                 sweepable=True)
    actor_learning_rate: float = field(1e-3, "actor Adam step size", sweepable=True)
    critic_learning_rate: float = field(1e-3, "critic Adam step size", sweepable=True)
    alpha_learning_rate: float = field(1e-3, "entropy-temperature Adam step size", sweepable=True)
    initial_alpha: float = field(1.0, "entropy temperature at the start (fixed when autotune is off)",
                                 sweepable=True)
    target_entropy_scale: float = field(1.0, "target entropy = -target_entropy_scale * action_dim",
                                        sweepable=True)

    def validate(self) -> None:
        """The off-policy checks (:meth:`OffPolicyConfig.validate`, types first), then SAC's ranges."""
        super().validate()
        require(self.n_step <= self.num_steps or self.n_step == 1,
                 f"n_step={self.n_step} must be <= num_steps={self.num_steps}")
        check_sizes(self, "hidden_sizes", allow_empty=False)
        check_choice(self, "activation", ACTIVATIONS)
        require(self.log_std_min < self.log_std_max,
                 f"log_std_min={self.log_std_min} must be < log_std_max={self.log_std_max}")
        check_floats(self, ("actor_learning_rate", "critic_learning_rate", "alpha_learning_rate", "initial_alpha"),
                     0, low_open=True)


SACHyperParams = hyperparams_class(SACConfig)


# ----------------------------------------------------------------------------------------------
# Networks
# ----------------------------------------------------------------------------------------------


class SACActor(nn.Module):
    """``obs -> (mean, log_std)`` of the pre-squash Gaussian, each ``[..., action_dim]``.

    ``log_std = log_std_min + (log_std_max - log_std_min) * (tanh(x) + 1) / 2`` keeps it in range
    with a gradient everywhere (a hard clip would stop learning at the bounds). The observation (any
    pytree, see :class:`rljax.core.networks.ObsEncoder`) goes through the ``encoder`` (``obs_layout``;
    no parameters for a vector) before the MLP.
    """

    action_dim: int
    hidden_sizes: Sequence[int]
    activation: str = "relu"
    log_std_min: float = -5.0
    log_std_max: float = 2.0
    obs_layout: tuple[LeafEncoding, ...] = ()
    cnn_channels: Sequence[int] = (16,)

    @nn.compact
    def __call__(self, obs: Any) -> tuple[jax.Array, jax.Array]:
        features = ObsEncoder(self.obs_layout, self.cnn_channels, name="encoder")(obs)
        out = MLP(self.hidden_sizes, self.activation, output_dim=2 * self.action_dim, output_gain=0.01)(features)
        mean, raw = jnp.split(out, 2, axis=-1)
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (jnp.tanh(raw) + 1.0)
        return mean, log_std


class SACNetworks(NamedTuple):
    """The functions SAC's losses need, so a loss can be tested with fake networks.

    Attributes:
        init: ``init(key, obs[1, ...], action[1, A]) -> (actor_params, critic_params)``; the critic
            params carry a leading ``[2]`` axis (the twin critics).
        critic: ``critic(critic_params, obs[N, ...], action[N, A]) -> Q [2, N]``; ``action`` in env
            units (``[low, high]``).
        policy: ``policy(actor_params, obs[N, ...]) -> TanhGaussian`` over actions ``[N, A]``.
        sample: ``sample(actor_params, obs[N, ...], key) -> (action [N, A], log_prob [N])``; the
            reparameterised sample in env units and its log-density.
        mode: ``mode(actor_params, obs[N, ...]) -> action [N, A]``, the deterministic action.
    """

    init: Callable[[jax.Array, Any, jax.Array], tuple[Any, Any]]
    critic: Callable[[Any, Any, jax.Array], jax.Array]
    policy: Callable[[Any, Any], TanhGaussian]
    sample: Callable[[Any, Any, jax.Array], tuple[jax.Array, jax.Array]]
    mode: Callable[[Any, Any], jax.Array]


def make_sac_networks(action_dim: int, low: jax.typing.ArrayLike, high: jax.typing.ArrayLike,
                      hidden_sizes: Sequence[int], activation: str = "relu", log_std_min: float = -5.0,
                      log_std_max: float = 2.0, obs_layout: tuple[LeafEncoding, ...] = (),
                      cnn_channels: Sequence[int] = (16,)) -> SACNetworks:
    """SAC's actor and twin critics for actions in the box ``[low, high]`` (finite, ``[A]``), on
    observations encoded by ``obs_layout`` (:func:`rljax.core.networks.encoder_layout`; ``()`` for a
    flat vector) with ``cnn_channels``."""
    low = jnp.broadcast_to(jnp.asarray(low, jnp.float32), (action_dim,))
    high = jnp.broadcast_to(jnp.asarray(high, jnp.float32), (action_dim,))
    actor = SACActor(action_dim, tuple(hidden_sizes), activation, log_std_min, log_std_max, tuple(obs_layout),
                     tuple(cnn_channels))
    critic = BoxCritic(tuple(hidden_sizes), activation, tuple(obs_layout), tuple(cnn_channels))

    def init(key, obs, action):
        return init_actor_and_twin_critics(actor, critic, key, obs, action)

    def policy(params, obs):
        mean, log_std = actor.apply(params, obs)
        return TanhGaussian(mean, log_std, low, high)

    def sample(params, obs, key):
        return policy(params, obs).sample_and_log_prob(key)

    def mode(params, obs):
        return policy(params, obs).mode()

    return SACNetworks(init=init, critic=twin_critic_apply(critic, low, high), policy=policy, sample=sample, mode=mode)


# ----------------------------------------------------------------------------------------------
# Losses
# ----------------------------------------------------------------------------------------------


def sac_critic_loss(critic_params: Any, target_critic_params: Any, actor_params: Any, alpha: jax.Array,
                    nets: SACNetworks, items: ReplayItem, weights: jax.Array, key: jax.Array
                    ) -> tuple[jax.Array, tuple[jax.Array, dict[str, jax.Array]]]:
    """The twin critics' soft Bellman residual (Haarnoja et al. 2018, eq. 5).

    ``L_Q = mean_w( sum_{i=1,2} 0.5 (Q_i(s, a) - y)^2 )`` with ``y`` from
    :func:`rljax.core.returns.soft_td_target`
    (no gradient through ``y``) and ``mean_w`` the importance-weighted mean over valid items.

    Args:
        critic_params: online twin-critic params (differentiated).
        target_critic_params: target twin-critic params.
        actor_params: actor params (samples ``a' ~ pi(.|s')``).
        alpha: entropy temperature, float scalar.
        nets: the network functions.
        items: a batch of :class:`ReplayItem` ``[N]``.
        weights: float32 ``[N]`` importance weights (0 for invalid items).
        key: PRNG key for ``a'``.

    Returns:
        ``(loss, (td_abs [N], metrics))``; ``td_abs`` is the mean over the two critics of ``|Q_i - y|``
        (the priorities of prioritised replay).
    """
    next_action, next_log_prob = nets.sample(actor_params, items.next_obs, key)
    next_q = nets.critic(target_critic_params, items.next_obs, next_action)
    target = jax.lax.stop_gradient(soft_td_target(items.reward, items.discount, next_q, next_log_prob, alpha))
    q = nets.critic(critic_params, items.obs, items.action)
    td = q - target[None]
    loss = masked_mean(0.5 * jnp.sum(jnp.square(td), axis=0), weights)
    td_abs = jnp.mean(jnp.abs(td), axis=0)
    metrics = {"critic_loss": loss, "q_mean": jnp.mean(q), "td_abs_mean": jnp.mean(td_abs),
               "target_mean": jnp.mean(target)}
    return loss, (td_abs, metrics)


def sac_actor_loss(actor_params: Any, critic_params: Any, alpha: jax.Array, nets: SACNetworks, obs: Any,
                   mask: jax.Array, key: jax.Array) -> tuple[jax.Array, tuple[jax.Array, dict[str, jax.Array]]]:
    """The policy's KL objective, reparameterised (Haarnoja et al. 2018, eq. 7).

    ``L_pi = mean( alpha * log pi(a|s) - min_i Q_i(s, a) )``, ``a = f(eps; s)`` the squashed sample,
    so the gradient flows through the critics into the action.

    Args:
        actor_params: actor params (differentiated).
        critic_params: twin-critic params (held fixed).
        alpha: entropy temperature, float scalar.
        nets: the network functions.
        obs: ``[N, ...]`` observations.
        mask: float ``[N]``, 1 for valid items.
        key: PRNG key for the sample.

    Returns:
        ``(loss, (log_prob [N], metrics))``.
    """
    action, log_prob = nets.sample(actor_params, obs, key)
    q = jnp.min(nets.critic(critic_params, obs, action), axis=0)
    loss = masked_mean(alpha * log_prob - q, mask)
    return loss, (log_prob, {"actor_loss": loss, "entropy": -masked_mean(log_prob, mask)})


def sac_alpha_loss(log_alpha: jax.Array, log_prob: jax.Array, target_entropy: jax.Array,
                   mask: jax.Array) -> jax.Array:
    """The temperature objective (Haarnoja et al. 2018, eq. 18).

    ``J(alpha) = mean( -alpha * (log pi(a|s) + H_target) )`` with ``alpha = exp(log_alpha)`` and
    ``log pi`` held fixed: when the entropy ``-log pi`` is below the target, ``J`` decreases as
    ``alpha`` grows, so gradient descent raises ``alpha`` (and lowers it when above the target).

    Args:
        log_alpha: float scalar (differentiated).
        log_prob: float ``[N]``, ``log pi(a|s)`` of fresh samples.
        target_entropy: float scalar ``H_target`` (``-|A|`` by default).
        mask: float ``[N]``, 1 for valid items.
    """
    return masked_mean(-jnp.exp(log_alpha) * jax.lax.stop_gradient(log_prob + target_entropy), mask)


# ----------------------------------------------------------------------------------------------
# State and one gradient step
# ----------------------------------------------------------------------------------------------


class SACLearner(NamedTuple):
    """What a gradient step changes.

    Attributes:
        actor_params: the policy's params.
        critic_params: the twin critics' params (leading ``[2]`` axis).
        target_critic_params: their Polyak average.
        log_alpha: float32 scalar, log of the entropy temperature.
        actor_opt: the actor's optimiser state.
        critic_opt: the critics' optimiser state.
        alpha_opt: the temperature's optimiser state.
    """

    actor_params: Any
    critic_params: Any
    target_critic_params: Any
    log_alpha: jax.Array
    actor_opt: Any
    critic_opt: Any
    alpha_opt: Any


SACState = OffPolicyState
"""SAC's train state: the shared :class:`~rljax.agents.offpolicy.OffPolicyState` with a
:class:`SACLearner` as ``learner`` (the env params' action bounds are read once, from the params
given to :func:`make_sac`)."""


class SACOptimizers(NamedTuple):
    """``optax`` transformations of the actor, the critics and ``log alpha``."""

    actor: optax.GradientTransformation
    critic: optax.GradientTransformation
    alpha: optax.GradientTransformation


def sac_optimizers(hyperparams: SACHyperParams) -> SACOptimizers:
    """Adam for all three; the actor's and critics' updates are clipped by global norm first."""
    return SACOptimizers(actor=make_optimizer(hyperparams.actor_learning_rate, hyperparams.max_grad_norm),
                         critic=make_optimizer(hyperparams.critic_learning_rate, hyperparams.max_grad_norm),
                         alpha=make_optimizer(hyperparams.alpha_learning_rate))


def init_learner(nets: SACNetworks, hyperparams: SACHyperParams, key: jax.Array, obs: Any, action: jax.Array
                 ) -> SACLearner:
    """Fresh params (targets = online critics), ``log alpha = log initial_alpha``, optimiser states."""
    actor_params, critic_params = nets.init(key, obs, action)
    log_alpha = jnp.log(hyperparams.initial_alpha).astype(jnp.float32)
    tx = sac_optimizers(hyperparams)
    return SACLearner(actor_params=actor_params, critic_params=critic_params, target_critic_params=critic_params,
                      log_alpha=log_alpha, actor_opt=tx.actor.init(actor_params),
                      critic_opt=tx.critic.init(critic_params), alpha_opt=tx.alpha.init(log_alpha))


def _alpha_objective(log_alpha: jax.Array, *args: Any) -> tuple[jax.Array, jax.Array]:
    """:func:`sac_alpha_loss` with the loss as its own aux, the form :func:`gradient_step` takes."""
    loss = sac_alpha_loss(log_alpha, *args)
    return loss, loss


def sac_learn_step(learner: SACLearner, items: ReplayItem, weights: jax.Array, key: jax.Array,
                   hyperparams: SACHyperParams, nets: SACNetworks, *, target_entropy: jax.Array, autotune: bool,
                   axis_name: str | None = None) -> tuple[SACLearner, jax.Array, dict[str, jax.Array]]:
    """One SAC gradient step: critics, then actor (against the new critics), then alpha, then targets.

    Gradients are averaged over ``axis_name`` (data parallelism, :func:`~rljax.agents.base.gradient_step`),
    so every device applies the same update and params stay identical.

    Args:
        learner: the learning state.
        items: a batch of this device's :class:`ReplayItem` ``[N]``.
        weights: float32 ``[N]`` importance weights (0 for invalid items).
        key: PRNG key.
        hyperparams: traced hyperparameters.
        nets: the network functions.
        target_entropy: float scalar.
        autotune: learn ``log alpha`` (static).
        axis_name: the device axis, or None.

    Returns:
        ``(learner, td_abs [N], metrics)``.
    """
    k_critic, k_actor = jax.random.split(key)
    tx = sac_optimizers(hyperparams)
    alpha = jnp.exp(learner.log_alpha)
    mask = (weights > 0).astype(jnp.float32)

    critic_params, critic_opt, (td_abs, c_metrics), c_norm = gradient_step(
        sac_critic_loss, learner.critic_params, learner.critic_opt, tx.critic, learner.target_critic_params,
        learner.actor_params, alpha, nets, items, weights, k_critic, axis_name=axis_name)
    actor_params, actor_opt, (log_prob, a_metrics), a_norm = gradient_step(
        sac_actor_loss, learner.actor_params, learner.actor_opt, tx.actor, critic_params, alpha, nets, items.obs,
        mask, k_actor, axis_name=axis_name)
    alpha_args = (log_prob, target_entropy, mask)
    if autotune:
        log_alpha, alpha_opt, alpha_loss, _ = gradient_step(_alpha_objective, learner.log_alpha, learner.alpha_opt,
                                                            tx.alpha, *alpha_args, axis_name=axis_name)
    else:
        log_alpha, alpha_opt, alpha_loss = learner.log_alpha, learner.alpha_opt, sac_alpha_loss(learner.log_alpha,
                                                                                                  *alpha_args)

    target_critic_params = polyak(critic_params, learner.target_critic_params, hyperparams.tau)
    metrics = pmean({**c_metrics, **a_metrics, "alpha_loss": alpha_loss}, axis_name)
    metrics = {**metrics, "critic_grad_norm": c_norm, "actor_grad_norm": a_norm}
    new = SACLearner(actor_params=actor_params, critic_params=critic_params,
                     target_critic_params=target_critic_params, log_alpha=log_alpha, actor_opt=actor_opt,
                     critic_opt=critic_opt, alpha_opt=alpha_opt)
    return new, td_abs, metrics


# ----------------------------------------------------------------------------------------------
# The agent
# ----------------------------------------------------------------------------------------------


def make_sac(config: SACConfig, env: Any, env_params: Any, axis_name: str | None = None) -> Agent:
    """Builds SAC's per-device program for a continuous-action (bounded ``Box``) ``env`` (the
    off-policy skeleton, :func:`~rljax.agents.offpolicy.make_offpolicy_agent`, with uniform
    warm-up actions, then the squashed Gaussian policy, and :func:`sac_learn_step`)."""
    action_dim, low, high = bounded_box(env, env_params, "SAC")
    # A squashed policy's entropy is at most that of the uniform distribution on the box; a target
    # above it can never be met, so alpha would grow without bound (and the critics diverge).
    max_entropy = float(np.sum(np.log(high - low)))
    target_entropy = -config.target_entropy_scale * action_dim
    if config.autotune and target_entropy >= max_entropy:
        raise ValueError(f"SAC on {describe_space(env.action_space(env_params))}: the target entropy "
                         f"-target_entropy_scale * action_dim = {target_entropy:g} is not below the largest entropy "
                         f"a policy on this Box can have ({max_entropy:g}, uniform on [low, high]), so alpha would "
                         f"grow without bound; use target_entropy_scale > {-max_entropy / action_dim:.3g} "
                         f"(--target-entropy-scale)")
    nets = make_sac_networks(action_dim, low, high, config.hidden_sizes, config.activation, config.log_std_min,
                             config.log_std_max, observation_layout(config, env, env_params, "SAC"),
                             config.cnn_channels)
    action0 = jnp.zeros((action_dim,), jnp.float32)
    low_j, high_j = jnp.asarray(low), jnp.asarray(high)

    def init(key: jax.Array, obs: jax.Array, hyperparams: SACHyperParams) -> SACLearner:
        return init_learner(nets, hyperparams, key, obs, action0[None])

    def behaviour(learner: SACLearner, ctx: UpdateContext):
        def act(key: jax.Array, obs: jax.Array) -> jax.Array:
            k_policy, k_uniform = jax.random.split(key)
            action, _ = nets.sample(learner.actor_params, obs, k_policy)
            uniform = jax.random.uniform(k_uniform, (action.shape[0], action_dim), jnp.float32, low_j, high_j)
            # Standard SAC warm-up: uniform actions until learning starts (selected, not branched).
            return jnp.where(ctx.warmup, uniform, action)
        return act

    def learn_step(learner: SACLearner, batch: ReplayItem, weights: jax.Array, key: jax.Array, ctx: UpdateContext):
        hyperparams = ctx.hyperparams
        return sac_learn_step(learner, batch, weights, key, hyperparams, nets,
                              target_entropy=-hyperparams.target_entropy_scale * action_dim,
                              autotune=config.autotune, axis_name=axis_name)

    def report_alpha(learner: SACLearner, ctx: UpdateContext):
        return learner, {"alpha": jnp.exp(learner.log_alpha)}

    return make_offpolicy_agent(config, env, env_params, axis_name, OffPolicyHooks(
        example_action=action0, init_learner=init, behaviour=behaviour, learn_step=learn_step,
        policy_params=lambda learner, hyperparams: (learner.actor_params, 0.0),
        act=lambda params, obs, key, _, deterministic: (nets.mode(params, obs) if deterministic
                                                        else nets.sample(params, obs, key)[0]),
        params_of=_synced,
        after_learning=report_alpha))


def _synced(learner: SACLearner) -> Any:
    """The learner's parts that must agree across devices."""
    return (learner.actor_params, learner.critic_params, learner.log_alpha)


register("sac", SACConfig, make_sac, fits=lambda env, env_params: bounded_box(env, env_params, "SAC"))
