"""TD3 (Fujimoto et al. 2018, "Addressing Function Approximation Error in Actor-Critic Methods").

A deterministic actor for Box actions with three fixes over DDPG:

* **Clipped double Q**: twin critics ``Q_1, Q_2`` on ``concat(obs, a_norm)`` (the critic SAC uses
  too, :class:`rljax.core.networks.BoxCritic`; ``a_norm`` the action rescaled to ``[-1, 1]``) with
  Polyak-averaged targets; the TD target takes their minimum
  (:func:`rljax.core.returns.clipped_double_q_target`).
* **Target policy smoothing** (:func:`rljax.core.returns.smoothed_target_action`): the target
  action is the target actor's plus clipped Gaussian noise,
  ``a' = clip(mu'(s') + half * clip(policy_noise * eps, -noise_clip, noise_clip), low, high)``,
  ``eps ~ N(0, I)`` (the noise is in normalised ``[-1, 1]`` units, scaled by the box's half-width).
* **Delayed policy updates**: the critics learn every gradient step; the actor and all targets
  (actor and critics) change only every ``policy_delay``-th critic step.

The actor is ``mu(s) = center + half * tanh(f(s))`` inside the env's ``Box [low, high]``. The
behaviour policy adds ``N(0, exploration_noise)`` (normalised units) to ``mu(s)`` and clips to the
box; before ``learning_starts`` env steps it acts uniformly at random. ``n_step``, ``prioritized``
replay, observation normalisation and data parallelism come from the shared off-policy core
(:mod:`rljax.agents.offpolicy`).

Reference values: the paper (Adam 1e-3, batch 100, 400x300 MLPs) and CleanRL's
``td3_continuous_action_jax.py`` (Adam 3e-4, batch 256, 256x256 ReLU MLPs, 25e3 random steps,
buffer 1e6), both for MuJoCo; both use gamma 0.99, tau 0.005, policy_noise 0.2, noise_clip 0.5,
exploration_noise 0.1 and policy_delay 2, which are the defaults here too. The network sizes,
learning rates, replay ratio and warm-up are Pendulum-v1's (see :class:`TD3Config`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from rljax.agents import register
from rljax.agents.base import Agent, bounded_box, gradient_step, make_optimizer, observation_layout, pmean
from rljax.agents.offpolicy import (OffPolicyConfig, OffPolicyHooks, OffPolicyState, ReplayItem, UpdateContext,
                                    make_offpolicy_agent, masked_mean, polyak)
from rljax.core.config import (TOTAL_TIMESTEPS_HELP, check_choice, check_floats, check_ints,
                          check_sizes, field, hyperparams_class)
from rljax.core.networks import (ACTIVATIONS, MLP, BoxCritic, LeafEncoding, ObsEncoder, init_actor_and_twin_critics,
                                 twin_critic_apply)
from rljax.core.returns import clipped_double_q_target, smoothed_target_action

__all__ = ["TD3Config", "TD3HyperParams", "TD3Actor", "TD3Networks", "make_td3_networks", "td3_critic_loss",
           "td3_actor_loss", "TD3Learner", "TD3State", "td3_optimizers", "init_learner", "td3_learn_step",
           "exploration_action", "make_td3", "make_deterministic_actor_critic"]


@dataclasses.dataclass(frozen=True)
class TD3Config(OffPolicyConfig):
    """TD3's configuration (defaults: Pendulum-v1 to a return above -200 within 2e4 env steps).

    The replay and shared hyperparameter fields (``num_steps``, ``batch_size``, ``buffer_size``,
    ``n_step``, ``prioritized``, ``normalize_obs``, ``gamma``, ``tau``, ``max_grad_norm``,
    ``priority_*``) come from :class:`~rljax.agents.offpolicy.OffPolicyConfig`.
    """

    env: str = field("Pendulum-v1", "environment name (needs a bounded Box action space)")
    total_timesteps: int = field(20_000, TOTAL_TIMESTEPS_HELP)
    # ----- structural -----
    gradient_steps: int = field(2, "critic gradient steps per update (update-to-data ratio = this / "
                                   "(num_envs*num_steps))")
    learning_starts: int = field(1_000, "env steps of uniformly random actions before learning begins")
    policy_delay: int = field(2, "the actor and the targets are updated every policy_delay-th critic step")
    hidden_sizes: tuple[int, ...] = field((64, 64), "actor and critic MLP widths")
    activation: str = field("relu", "hidden activation")

    # ----- sweepable hyperparameters (traced) -----
    tau: float = field(0.005, "Polyak rate of the target actor and critics, applied at each delayed update",
                       sweepable=True)
    actor_learning_rate: float = field(1e-3, "actor Adam step size", sweepable=True)
    critic_learning_rate: float = field(1e-3, "critic Adam step size", sweepable=True)
    policy_noise: float = field(0.2, "std of the target-smoothing noise, in box half-widths", sweepable=True)
    noise_clip: float = field(0.5, "the target-smoothing noise is clipped to [-noise_clip, noise_clip] "
                                   "(box half-widths)", sweepable=True)
    exploration_noise: float = field(0.1, "std of the behaviour policy's Gaussian noise (box half-widths)",
                                     sweepable=True)

    def validate(self) -> None:
        """The off-policy checks (:meth:`OffPolicyConfig.validate`, types first), then TD3's ranges."""
        super().validate()
        check_ints(self, ("policy_delay",))
        check_sizes(self, "hidden_sizes", allow_empty=False)
        check_choice(self, "activation", ACTIVATIONS)
        check_floats(self, ("actor_learning_rate", "critic_learning_rate"), 0, low_open=True)
        check_floats(self, ("policy_noise", "noise_clip", "exploration_noise"), 0)


TD3HyperParams = hyperparams_class(TD3Config)

# ----------------------------------------------------------------------------------------------
# Networks
# ----------------------------------------------------------------------------------------------


class TD3Actor(nn.Module):
    """``obs -> tanh(f(obs))``, float ``[..., action_dim]`` in ``[-1, 1]`` (the normalised action);
    the observation (any pytree) goes through the ``encoder`` (``obs_layout``, see
    :class:`rljax.core.networks.ObsEncoder`; no parameters for a vector) before the MLP ``f``."""

    action_dim: int
    hidden_sizes: Sequence[int]
    activation: str = "relu"
    obs_layout: tuple[LeafEncoding, ...] = ()
    cnn_channels: Sequence[int] = (16,)

    @nn.compact
    def __call__(self, obs: Any) -> jax.Array:
        features = ObsEncoder(self.obs_layout, self.cnn_channels, name="encoder")(obs)
        return jnp.tanh(MLP(self.hidden_sizes, self.activation, output_dim=self.action_dim,
                            output_gain=0.01)(features))


class TD3Networks(NamedTuple):
    """The functions TD3's losses need, so a loss can be tested with fake networks.

    Attributes:
        init: ``init(key, obs[1, ...], action[1, A]) -> (actor_params, critic_params)``; the critic
            params carry a leading ``[C]`` axis (the twin critics: ``C = 2``).
        actor: ``actor(actor_params, obs[N, ...]) -> action [N, A]``, ``center + half * tanh(f(s))``
            in env units.
        critic: ``critic(critic_params, obs[N, ...], action[N, A]) -> Q [C, N]`` (a distributional
            critic's logits ``[C, N, K]``); ``action`` in env units, rescaled to ``[-1, 1]`` inside.
        low: float ``[A]``, the box's lower bounds.
        high: float ``[A]``, its upper bounds.
    """

    init: Callable[[jax.Array, Any, jax.Array], tuple[Any, Any]]
    actor: Callable[[Any, Any], jax.Array]
    critic: Callable[[Any, Any, jax.Array], jax.Array]
    low: jax.Array
    high: jax.Array


def make_td3_networks(action_dim: int, low: jax.typing.ArrayLike, high: jax.typing.ArrayLike,
                      hidden_sizes: Sequence[int], activation: str = "relu",
                      obs_layout: tuple[LeafEncoding, ...] = (), cnn_channels: Sequence[int] = (16,),
                      num_atoms: int = 1, num_critics: int = 2) -> TD3Networks:
    """TD3's deterministic actor and twin critics for actions in the box ``[low, high]`` (finite, ``[A]``),
    on observations encoded by ``obs_layout`` (``()`` for a flat vector) with ``cnn_channels``;
    ``num_critics`` critics (2: the twins) with ``num_atoms`` outputs each (1: the action value;
    more: a categorical distribution's logits, D4PG's critic)."""
    low = jnp.broadcast_to(jnp.asarray(low, jnp.float32), (action_dim,))
    high = jnp.broadcast_to(jnp.asarray(high, jnp.float32), (action_dim,))
    center, half = (high + low) / 2.0, (high - low) / 2.0
    actor = TD3Actor(action_dim, tuple(hidden_sizes), activation, tuple(obs_layout), tuple(cnn_channels))
    critic = BoxCritic(tuple(hidden_sizes), activation, tuple(obs_layout), tuple(cnn_channels), num_atoms)

    def init(key, obs, action):
        return init_actor_and_twin_critics(actor, critic, key, obs, action, num_critics)

    def actor_fn(params, obs):
        return center + half * actor.apply(params, obs)

    return TD3Networks(init=init, actor=actor_fn, critic=twin_critic_apply(critic, low, high), low=low, high=high)


# ----------------------------------------------------------------------------------------------
# Targets and losses
# ----------------------------------------------------------------------------------------------


def td3_critic_loss(critic_params: Any, target_critic_params: Any, target_actor_params: Any, nets: TD3Networks,
                    items: ReplayItem, weights: jax.Array, key: jax.Array, policy_noise: jax.Array,
                    noise_clip: jax.Array) -> tuple[jax.Array, tuple[jax.Array, dict[str, jax.Array]]]:
    """The twin critics' squared TD error (Fujimoto et al. 2018, Algorithm 1).

    ``L_Q = mean_w( sum_{i=1,2} (Q_i(s, a) - y)^2 )``, ``y`` the clipped double-Q target
    (:func:`rljax.core.returns.clipped_double_q_target`) at the smoothed target action
    (:func:`rljax.core.returns.smoothed_target_action` of the target actor), no gradient through ``y``;
    ``mean_w`` is the importance-weighted mean over valid items (weight 0: left out).

    Args:
        critic_params: online twin-critic params (differentiated).
        target_critic_params: target twin-critic params.
        target_actor_params: target actor params.
        nets: the network functions.
        items: a batch of :class:`ReplayItem` ``[N]``.
        weights: float32 ``[N]`` importance weights (0 for invalid items).
        key: PRNG key of the smoothing noise.
        policy_noise: float scalar.
        noise_clip: float scalar.

    Returns:
        ``(loss, (td_abs [N], metrics))``; ``td_abs`` is the mean over the two critics of ``|Q_i - y|``
        (the priorities of prioritised replay).
    """
    mu = nets.actor(target_actor_params, items.next_obs)
    next_action = smoothed_target_action(mu, jax.random.normal(key, mu.shape, mu.dtype), nets.low, nets.high,
                                         policy_noise, noise_clip)
    next_q = nets.critic(target_critic_params, items.next_obs, next_action)
    target = jax.lax.stop_gradient(clipped_double_q_target(items.reward, items.discount, next_q))
    q = nets.critic(critic_params, items.obs, items.action)
    td = q - target[None]
    loss = masked_mean(jnp.sum(jnp.square(td), axis=0), weights)
    td_abs = jnp.mean(jnp.abs(td), axis=0)
    metrics = {"critic_loss": loss, "q_mean": jnp.mean(q), "td_abs_mean": jnp.mean(td_abs),
               "target_mean": jnp.mean(target)}
    return loss, (td_abs, metrics)


def td3_actor_loss(actor_params: Any, critic_params: Any, nets: TD3Networks, obs: Any, mask: jax.Array
                   ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The deterministic policy gradient objective (Silver et al. 2014; Fujimoto et al. 2018).

    ``L_mu = -mean( Q_1(s, mu(s)) )`` over valid items: the first critic only, as in the paper; the
    gradient flows through the critic into the action (the critic's params are held fixed).

    Args:
        actor_params: actor params (differentiated).
        critic_params: twin-critic params.
        nets: the network functions.
        obs: ``[N, ...]`` observations.
        mask: float ``[N]``, 1 for valid items.

    Returns:
        ``(loss, metrics)``.
    """
    q1 = nets.critic(critic_params, obs, nets.actor(actor_params, obs))[0]
    loss = masked_mean(-q1, mask)
    return loss, {"actor_loss": loss}



# ----------------------------------------------------------------------------------------------
# State and one gradient step
# ----------------------------------------------------------------------------------------------


class TD3Learner(NamedTuple):
    """TD3's learning state (the ``learner`` of its :class:`TD3State`).

    Attributes:
        actor_params: the actor's params.
        critic_params: the twin critics' params (leading ``[2]`` axis).
        target_actor_params: the actor's Polyak average.
        target_critic_params: the critics' Polyak average.
        actor_opt: the actor's optimiser state.
        critic_opt: the critics' optimiser state.
        critic_steps: int32, critic steps taken modulo ``policy_delay`` (the delayed updates follow
            every ``policy_delay``-th; kept as a remainder so it never overflows).
    """

    actor_params: Any
    critic_params: Any
    target_actor_params: Any
    target_critic_params: Any
    actor_opt: Any
    critic_opt: Any
    critic_steps: jax.Array


TD3State = OffPolicyState
"""TD3's train state: the shared :class:`~rljax.agents.offpolicy.OffPolicyState` with a
:class:`TD3Learner` as ``learner``."""


def td3_optimizers(hyperparams: TD3HyperParams) -> tuple[optax.GradientTransformation, optax.GradientTransformation]:
    """``(actor, critic)``: Adam after global-norm clipping at ``max_grad_norm`` (:func:`make_optimizer`)."""
    return (make_optimizer(hyperparams.actor_learning_rate, hyperparams.max_grad_norm),
            make_optimizer(hyperparams.critic_learning_rate, hyperparams.max_grad_norm))


def init_learner(nets: TD3Networks, hyperparams: TD3HyperParams, key: jax.Array, obs: Any) -> TD3Learner:
    """Fresh params (``obs``: ``[1, *obs_shape]``), targets equal to them, optimiser states, no steps yet."""
    actor_params, critic_params = nets.init(key, obs, jnp.zeros((1,) + nets.low.shape, jnp.float32))
    actor_tx, critic_tx = td3_optimizers(hyperparams)
    return TD3Learner(actor_params=actor_params, critic_params=critic_params, target_actor_params=actor_params,
                      target_critic_params=critic_params, actor_opt=actor_tx.init(actor_params),
                      critic_opt=critic_tx.init(critic_params), critic_steps=jnp.int32(0))


def td3_learn_step(learner: TD3Learner, items: ReplayItem, weights: jax.Array, key: jax.Array,
                   hyperparams: TD3HyperParams, nets: TD3Networks, *, policy_delay: int, axis_name: str | None = None,
                   critic_loss: Callable[..., Any] = td3_critic_loss, actor_loss: Callable[..., Any] = td3_actor_loss
                   ) -> tuple[TD3Learner, jax.Array, dict[str, jax.Array]]:
    """One TD3 gradient step (Fujimoto et al. 2018, Algorithm 1): the critics; on every
    ``policy_delay``-th critic step also the actor (against the new critics), then the targets
    ``theta' <- tau theta + (1 - tau) theta'`` of the actor and both critics.

    The delayed part is computed at every step and kept only on the delayed ones (selected, not
    branched: one program at every step, which vmaps over a population without a ``cond``).
    Gradients are averaged over ``axis_name``, so every device applies the same update.

    Args:
        learner: the learning state.
        items: a batch of this device's :class:`ReplayItem` ``[N]``.
        weights: float32 ``[N]`` importance weights (0 for invalid items).
        key: PRNG key (the smoothing noise).
        hyperparams: traced hyperparameters.
        nets: the network functions.
        policy_delay: critic steps per actor step (static).
        axis_name: the device axis, or None.
        critic_loss: the critics' loss, with :func:`td3_critic_loss`'s arguments and returns (D4PG's
            categorical one, :func:`rljax.agents.d4pg.d4pg_critic_loss`).
        actor_loss: the actor's loss, with :func:`td3_actor_loss`'s.

    Returns:
        ``(learner, td_abs [N], metrics)``; ``actor_loss`` and ``actor_grad_norm`` are those of the
        step's actor gradient, applied or not.
    """
    actor_tx, critic_tx = td3_optimizers(hyperparams)
    critic_params, critic_opt, (td_abs, c_metrics), c_norm = gradient_step(
        critic_loss, learner.critic_params, learner.critic_opt, critic_tx, learner.target_critic_params,
        learner.target_actor_params, nets, items, weights, key, hyperparams.policy_noise, hyperparams.noise_clip,
        axis_name=axis_name)
    actor_params, actor_opt, a_metrics, a_norm = gradient_step(
        actor_loss, learner.actor_params, learner.actor_opt, actor_tx, critic_params, nets, items.obs,
        (weights > 0).astype(jnp.float32), axis_name=axis_name)
    critic_steps = (learner.critic_steps + 1) % policy_delay
    delayed = critic_steps == 0

    def keep(new, old):
        return jax.tree.map(lambda n, o: jnp.where(delayed, n, o), new, old)

    new = TD3Learner(
        actor_params=keep(actor_params, learner.actor_params), critic_params=critic_params,
        target_actor_params=keep(polyak(actor_params, learner.target_actor_params, hyperparams.tau),
                                 learner.target_actor_params),
        target_critic_params=keep(polyak(critic_params, learner.target_critic_params, hyperparams.tau),
                                  learner.target_critic_params),
        actor_opt=keep(actor_opt, learner.actor_opt), critic_opt=critic_opt, critic_steps=critic_steps)
    metrics = {**pmean({**c_metrics, **a_metrics}, axis_name), "critic_grad_norm": c_norm, "actor_grad_norm": a_norm}
    return new, td_abs, metrics


# ----------------------------------------------------------------------------------------------
# The agent
# ----------------------------------------------------------------------------------------------


def exploration_action(action: jax.Array, eps: jax.Array, low: jax.Array, high: jax.Array,
                       exploration_noise: jax.Array) -> jax.Array:
    """The behaviour action ``clip(mu(s) + half * exploration_noise * eps, low, high)``, ``eps ~ N(0, I)``,
    float ``[N, A]`` (the noise in normalised units, as in Fujimoto et al. 2018 and CleanRL)."""
    return jnp.clip(action + (high - low) / 2.0 * exploration_noise * eps, low, high)


def make_td3(config: TD3Config, env: Any, env_params: Any, axis_name: str | None = None) -> Agent:
    """Builds TD3's per-device program for a continuous-action (bounded ``Box``) ``env``:
    :func:`make_deterministic_actor_critic` with twin scalar critics and TD3's losses."""
    return make_deterministic_actor_critic(config, env, env_params, axis_name, "TD3")


def make_deterministic_actor_critic(config: TD3Config, env: Any, env_params: Any, axis_name: str | None, name: str, *,
                                    num_atoms: int = 1, num_critics: int = 2,
                                    critic_loss: Callable[..., Any] = td3_critic_loss,
                                    actor_loss: Callable[..., Any] = td3_actor_loss) -> Agent:
    """The per-device program of a deterministic-policy actor-critic (TD3's; D4PG's with a
    categorical critic): the off-policy skeleton (:func:`~rljax.agents.offpolicy.make_offpolicy_agent`)
    with a noisy deterministic behaviour policy (uniform before ``learning_starts``) and
    :func:`td3_learn_step` with ``critic_loss`` and ``actor_loss`` on ``num_critics`` critics of
    ``num_atoms`` outputs (:func:`make_td3_networks`). ``name`` is the algorithm's, for errors."""
    action_dim, low, high = bounded_box(env, env_params, name)
    nets = make_td3_networks(action_dim, low, high, config.hidden_sizes, config.activation,
                             observation_layout(config, env, env_params, name), config.cnn_channels,
                             num_atoms=num_atoms, num_critics=num_critics)

    def behaviour(learner: TD3Learner, ctx: UpdateContext):
        def act(key: jax.Array, obs: jax.Array) -> jax.Array:
            k_noise, k_uniform = jax.random.split(key)
            mu = nets.actor(learner.actor_params, obs)
            noisy = exploration_action(mu, jax.random.normal(k_noise, mu.shape), nets.low, nets.high,
                                       ctx.hyperparams.exploration_noise)
            uniform = jax.random.uniform(k_uniform, mu.shape, jnp.float32, nets.low, nets.high)
            return jnp.where(ctx.warmup, uniform, noisy)  # selected, not branched
        return act

    def learn_step(learner: TD3Learner, batch: ReplayItem, weights: jax.Array, key: jax.Array, ctx: UpdateContext):
        return td3_learn_step(learner, batch, weights, key, ctx.hyperparams, nets, policy_delay=config.policy_delay,
                              axis_name=axis_name, critic_loss=critic_loss, actor_loss=actor_loss)

    return make_offpolicy_agent(config, env, env_params, axis_name, OffPolicyHooks(
        example_action=jnp.zeros((action_dim,), jnp.float32),
        init_learner=lambda key, obs, hyperparams: init_learner(nets, hyperparams, key, obs), behaviour=behaviour,
        learn_step=learn_step, policy_params=lambda l, hyperparams: (l.actor_params, hyperparams.exploration_noise),
        act=functools.partial(_td3_act, nets),
        params_of=lambda l: (l.actor_params, l.critic_params, l.target_actor_params, l.target_critic_params)))


def _td3_act(nets: TD3Networks, params: Any, obs: jax.Array, key: Any, exploration_noise: jax.Array,
             deterministic: bool) -> jax.Array:
    """TD3's policy: ``mu(s)``, or with ``exploration_noise`` Gaussian noise (:func:`exploration_action`)."""
    mu = nets.actor(params, obs)
    if deterministic:
        return mu
    return exploration_action(mu, jax.random.normal(key, mu.shape), nets.low, nets.high, exploration_noise)


register("td3", TD3Config, make_td3, fits=lambda env, env_params: bounded_box(env, env_params, "TD3"))
