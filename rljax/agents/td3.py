"""TD3 (Fujimoto et al. 2018, "Addressing Function Approximation Error in Actor-Critic Methods").

A deterministic actor for Box actions with three fixes over DDPG:

* **Clipped double Q**: twin critics ``Q_1, Q_2`` on ``concat(obs, a_norm)`` (SAC's critic,
  :class:`rljax.agents.sac.SACCritic`; ``a_norm`` the action rescaled to ``[-1, 1]``) with
  Polyak-averaged targets; the TD target takes their minimum.
* **Target policy smoothing**: the target action is the target actor's plus clipped Gaussian noise,
  ``a' = clip(mu'(s') + half * clip(policy_noise * eps, -noise_clip, noise_clip), low, high)``,
  ``eps ~ N(0, I)`` (the noise is in normalised ``[-1, 1]`` units, scaled by the box's half-width).
* **Delayed policy updates**: the critics learn every gradient step; the actor and all targets
  (actor and critics) change only every ``policy_delay``-th critic step.

The actor is ``mu(s) = center + half * tanh(f(s))`` inside the env's ``Box [low, high]``. The
behaviour policy adds ``N(0, exploration_noise)`` (normalised units) to ``mu(s)`` and clips to the
box; before ``learning_starts`` env steps it acts uniformly at random. ``n_step``, ``prioritized``
replay, observation normalisation and data parallelism come from the shared off-policy core
(:mod:`rljax.agents.offpolicy`).

Reference values (the paper's Table 3 and CleanRL's ``td3_continuous_action_jax.py``): Adam 3e-4,
batch 256, gamma 0.99, tau 0.005, policy_noise 0.2, noise_clip 0.5, exploration_noise 0.1,
policy_delay 2, 256x256 ReLU MLPs, 25e3 random steps (MuJoCo). The defaults here are tuned for
Pendulum-v1 (see :class:`TD3Config`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import struct

from rljax.agents import register
from rljax.agents.base import Agent, UpdateOutput, desync, make_env_stack, pmean, space_dims
from rljax.agents.offpolicy import (Collector, ReplayItem, collect, init_collector, make_replay, normalize_items,
                                    observation_stack, polyak, replay_learning)
from rljax.agents.sac import SACCritic, _box_bounds, _masked_mean
from rljax.config import RunConfig, _require, field, make_hyperparams
from rljax.networks import MLP
from rljax.parallel import serial_map

__all__ = ["TD3Config", "TD3HyperParams", "TD3Actor", "TD3Networks", "make_td3_networks", "smoothed_target_action",
           "td3_target", "td3_critic_loss", "td3_actor_loss", "TD3Learner", "TD3State", "td3_optimizers",
           "init_learner", "td3_learn_step", "exploration_action", "make_td3"]


@dataclasses.dataclass(frozen=True)
class TD3Config(RunConfig):
    """TD3's configuration (defaults: Pendulum-v1 to a return above -200 within 2e4 env steps)."""

    env: str = field("Pendulum-v1", "environment name (needs a bounded Box action space)")
    total_timesteps: int = field(20_000, "environment steps to train for (rounded to whole updates)")
    num_envs: int = field(4, "parallel environments, over all devices")
    # ----- structural -----
    num_steps: int = field(1, "env steps per env between learning phases")
    gradient_steps: int = field(2, "critic gradient steps per update (update-to-data ratio = this / "
                                   "(num_envs*num_steps))")
    batch_size: int = field(256, "replay samples per gradient step, over all devices")
    buffer_size: int = field(100_000, "replay capacity, over all devices (each device holds a shard)")
    learning_starts: int = field(1_000, "env steps of uniformly random actions before learning begins")
    policy_delay: int = field(2, "the actor and the targets are updated every policy_delay-th critic step")
    hidden_sizes: tuple[int, ...] = field((64, 64), "actor and critic MLP widths")
    activation: str = field("relu", "hidden activation")
    n_step: int = field(1, "n-step returns (1 = one-step TD)")
    prioritized: bool = field(False, "proportional prioritised replay (weights the critic loss)")
    normalize_obs: bool = field(False, "normalise observations by running mean/std (replay stores raw "
                                       "observations, normalised when sampled)")

    # ----- sweepable hyperparameters (traced) -----
    actor_learning_rate: float = field(1e-3, "actor Adam step size", sweepable=True)
    critic_learning_rate: float = field(1e-3, "critic Adam step size", sweepable=True)
    gamma: float = field(0.99, "discount factor", sweepable=True)
    tau: float = field(0.005, "Polyak rate of the target actor and critics, applied at each delayed update",
                       sweepable=True)
    policy_noise: float = field(0.2, "std of the target-smoothing noise, in units of the box half-width",
                                sweepable=True)
    noise_clip: float = field(0.5, "the target-smoothing noise is clipped to [-noise_clip, noise_clip] "
                                   "(box half-widths)", sweepable=True)
    exploration_noise: float = field(0.1, "std of the behaviour policy's Gaussian noise (box half-widths)",
                                     sweepable=True)
    max_grad_norm: float = field(10.0, "global-norm gradient clipping of the actor and critic updates",
                                 sweepable=True)
    priority_alpha: float = field(0.6, "prioritisation exponent (prioritized replay)", sweepable=True)
    priority_beta_start: float = field(0.4, "initial importance-sampling exponent, annealed to 1",
                                       sweepable=True)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raises ``ValueError`` naming any inconsistent value and what would be valid."""
        from rljax.config import MAX_ENV_STEPS, check_choice, check_env_steps_per_update, check_floats, check_ints, \
            check_sizes
        from rljax.networks import ACTIVATIONS

        self.validate_run()
        check_ints(self, ("num_steps", "gradient_steps", "batch_size", "n_step", "policy_delay"))
        why = "(2**30: the replay buffer's and the env steps' int32 counters)"
        check_ints(self, ("buffer_size",), 1, MAX_ENV_STEPS, why=why)
        check_ints(self, ("learning_starts",), 0, MAX_ENV_STEPS, why=why)
        check_env_steps_per_update(self.env_steps_per_update, "num_envs * num_steps")
        for name in ("batch_size", "buffer_size"):
            v = getattr(self, name)
            _require(v % self.num_devices == 0, f"{name}={v} is not divisible by num_devices={self.num_devices}")
        _require(self.n_step <= self.num_steps or self.n_step == 1,
                 f"n_step={self.n_step} must be <= num_steps={self.num_steps}")
        _require(self.buffer_size // self.num_devices >= self.num_envs // self.num_devices * self.num_steps,
                 f"buffer_size={self.buffer_size} cannot hold one update of num_envs * num_steps = "
                 f"{self.num_envs * self.num_steps} transitions")
        check_sizes(self, "hidden_sizes", allow_empty=False)
        check_choice(self, "activation", ACTIVATIONS)
        check_floats(self, ("actor_learning_rate", "critic_learning_rate", "max_grad_norm"), 0, low_open=True)
        check_floats(self, ("policy_noise", "noise_clip", "exploration_noise", "priority_alpha"), 0)
        check_floats(self, ("gamma", "priority_beta_start"), 0, 1)
        check_floats(self, ("tau",), 0, 1, low_open=True)

    @property
    def env_steps_per_update(self) -> int:
        return self.num_envs * self.num_steps

    def hyperparams(self) -> "TD3HyperParams":
        return make_hyperparams(self, TD3HyperParams)


class TD3HyperParams(struct.PyTreeNode):
    """Sweepable hyperparameters, float32 scalars in the train state (see :class:`TD3Config`)."""

    actor_learning_rate: jax.Array
    critic_learning_rate: jax.Array
    gamma: jax.Array
    tau: jax.Array
    policy_noise: jax.Array
    noise_clip: jax.Array
    exploration_noise: jax.Array
    max_grad_norm: jax.Array
    priority_alpha: jax.Array
    priority_beta_start: jax.Array


# ----------------------------------------------------------------------------------------------
# Networks
# ----------------------------------------------------------------------------------------------


class TD3Actor(nn.Module):
    """``obs -> tanh(f(obs))``, float ``[..., action_dim]`` in ``[-1, 1]`` (the normalised action)."""

    action_dim: int
    hidden_sizes: Sequence[int]
    activation: str = "relu"

    @nn.compact
    def __call__(self, obs: jax.typing.ArrayLike) -> jax.Array:
        return jnp.tanh(MLP(self.hidden_sizes, self.activation, output_dim=self.action_dim, output_gain=0.01)(obs))


class TD3Networks(NamedTuple):
    """The functions TD3's losses need, so a loss can be tested with fake networks.

    Attributes:
        init: ``init(key, obs[1, ...], action[1, A]) -> (actor_params, critic_params)``; the critic
            params carry a leading ``[2]`` axis (the twin critics).
        actor: ``actor(actor_params, obs[N, ...]) -> action [N, A]``, ``center + half * tanh(f(s))``
            in env units.
        critic: ``critic(critic_params, obs[N, ...], action[N, A]) -> Q [2, N]``; ``action`` in env
            units, rescaled to ``[-1, 1]`` inside.
        low: float ``[A]``, the box's lower bounds.
        high: float ``[A]``, its upper bounds.
    """

    init: Callable[[jax.Array, Any, jax.Array], tuple[Any, Any]]
    actor: Callable[[Any, Any], jax.Array]
    critic: Callable[[Any, Any, jax.Array], jax.Array]
    low: jax.Array
    high: jax.Array


def make_td3_networks(action_dim: int, low: jax.typing.ArrayLike, high: jax.typing.ArrayLike,
                      hidden_sizes: Sequence[int], activation: str = "relu") -> TD3Networks:
    """TD3's deterministic actor and twin critics for actions in the box ``[low, high]`` (finite, ``[A]``)."""
    low = jnp.broadcast_to(jnp.asarray(low, jnp.float32), (action_dim,))
    high = jnp.broadcast_to(jnp.asarray(high, jnp.float32), (action_dim,))
    center, half = (high + low) / 2.0, (high - low) / 2.0
    actor = TD3Actor(action_dim, tuple(hidden_sizes), activation)
    critic = SACCritic(tuple(hidden_sizes), activation)

    def init(key, obs, action):
        k_actor, k_critic = jax.random.split(key)
        actor_params = actor.init(k_actor, obs)
        critic_params = serial_map(lambda k: critic.init(k, obs, action), jax.random.split(k_critic, 2))
        return actor_params, critic_params

    def actor_fn(params, obs):
        return center + half * actor.apply(params, obs)

    def critic_fn(params, obs, action):
        return jax.vmap(critic.apply, in_axes=(0, None, None))(params, obs, (action - center) / half)

    return TD3Networks(init=init, actor=actor_fn, critic=critic_fn, low=low, high=high)


# ----------------------------------------------------------------------------------------------
# Targets and losses
# ----------------------------------------------------------------------------------------------


def smoothed_target_action(action: jax.Array, eps: jax.Array, low: jax.Array, high: jax.Array,
                           policy_noise: jax.Array, noise_clip: jax.Array) -> jax.Array:
    """Target policy smoothing (Fujimoto et al. 2018, eq. 15).

    ``a' = clip(mu'(s') + half * clip(policy_noise * eps, -noise_clip, noise_clip), low, high)``
    with ``half = (high - low) / 2``: the noise is drawn and clipped in normalised ``[-1, 1]``
    units, so ``policy_noise`` and ``noise_clip`` mean the same on every box.

    Args:
        action: float ``[N, A]``, the target actor's action ``mu'(s')`` in env units.
        eps: float ``[N, A]``, standard normal draws.
        low: float ``[A]``.
        high: float ``[A]``.
        policy_noise: float scalar, the noise std (half-widths).
        noise_clip: float scalar, the noise bound (half-widths).

    Returns:
        float ``[N, A]`` in ``[low, high]``.
    """
    noise = jnp.clip(policy_noise * eps, -noise_clip, noise_clip)
    return jnp.clip(action + (high - low) / 2.0 * noise, low, high)


def td3_target(reward: jax.Array, discount: jax.Array, next_q: jax.Array) -> jax.Array:
    """The clipped double-Q target (Fujimoto et al. 2018, eq. 10).

    ``y = r + discount * min_i Q'_i(s', a')``. With n-step items ``r`` is the discounted n-step
    reward sum and ``discount`` is ``gamma^m`` (0 after a termination: nothing is bootstrapped
    past an episode's end; a truncated episode bootstraps from its final observation).

    Args:
        reward: float ``[N]``.
        discount: float ``[N]``.
        next_q: float ``[2, N]``, the target critics at ``(s', a')``.

    Returns:
        float ``[N]``.
    """
    return reward + discount * jnp.min(next_q, axis=0)


def td3_critic_loss(critic_params: Any, target_critic_params: Any, target_actor_params: Any, nets: TD3Networks,
                    items: ReplayItem, weights: jax.Array, key: jax.Array, policy_noise: jax.Array,
                    noise_clip: jax.Array) -> tuple[jax.Array, tuple[jax.Array, dict[str, jax.Array]]]:
    """The twin critics' squared TD error (Fujimoto et al. 2018, Algorithm 1).

    ``L_Q = mean_w( sum_{i=1,2} (Q_i(s, a) - y)^2 )``, ``y`` from :func:`td3_target` at the smoothed
    target action (:func:`smoothed_target_action` of the target actor), no gradient through ``y``;
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
    target = jax.lax.stop_gradient(td3_target(items.reward, items.discount, next_q))
    q = nets.critic(critic_params, items.obs, items.action)
    td = q - target[None]
    loss = _masked_mean(jnp.sum(jnp.square(td), axis=0), weights)
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
    loss = _masked_mean(-q1, mask)
    return loss, {"actor_loss": loss}


# ----------------------------------------------------------------------------------------------
# State and one gradient step
# ----------------------------------------------------------------------------------------------


class TD3Learner(NamedTuple):
    """What a gradient step changes.

    Attributes:
        actor_params: the actor's params.
        critic_params: the twin critics' params (leading ``[2]`` axis).
        target_actor_params: the actor's Polyak average.
        target_critic_params: the critics' Polyak average.
        actor_opt: the actor's optimiser state.
        critic_opt: the critics' optimiser state.
        critic_steps: int32, critic steps taken (the delayed updates follow the ``policy_delay``-th).
    """

    actor_params: Any
    critic_params: Any
    target_actor_params: Any
    target_critic_params: Any
    actor_opt: Any
    critic_opt: Any
    critic_steps: jax.Array


class TD3State(struct.PyTreeNode):
    """Everything a TD3 run needs to continue (one device's view); see :class:`rljax.agents.sac.SACState`."""

    learner: TD3Learner
    collector: Collector
    buffer: Any
    key: jax.Array
    hparams: TD3HyperParams
    env_params: Any
    updates: jax.Array
    num_updates: jax.Array


def td3_optimizers(hp: TD3HyperParams) -> tuple[optax.GradientTransformation, optax.GradientTransformation]:
    """``(actor, critic)``: Adam after global-norm clipping at ``max_grad_norm``."""
    def adam(lr):
        return optax.chain(optax.clip_by_global_norm(hp.max_grad_norm), optax.scale_by_adam(), optax.scale(-lr))
    return adam(hp.actor_learning_rate), adam(hp.critic_learning_rate)


def init_learner(nets: TD3Networks, hp: TD3HyperParams, key: jax.Array, obs: Any, action: jax.Array
                 ) -> TD3Learner:
    """Fresh params, targets equal to them, optimiser states, no critic steps yet."""
    actor_params, critic_params = nets.init(key, obs, action)
    actor_tx, critic_tx = td3_optimizers(hp)
    return TD3Learner(actor_params=actor_params, critic_params=critic_params, target_actor_params=actor_params,
                      target_critic_params=critic_params, actor_opt=actor_tx.init(actor_params),
                      critic_opt=critic_tx.init(critic_params), critic_steps=jnp.int32(0))


def td3_learn_step(learner: TD3Learner, items: ReplayItem, weights: jax.Array, key: jax.Array, hp: TD3HyperParams,
                   nets: TD3Networks, *, policy_delay: int, axis_name: str | None = None
                   ) -> tuple[TD3Learner, jax.Array, dict[str, jax.Array]]:
    """One TD3 gradient step: the critics; every ``policy_delay``-th step also the actor (against
    the new critics), then the targets ``theta' <- tau theta + (1 - tau) theta'`` (Algorithm 1).

    The delayed part is computed every step and kept only on the delayed steps (selected, not
    branched: the same program at every step, which vmaps over a population without a ``cond``).
    Gradients are averaged over ``axis_name``, so every device applies the same update.

    Args:
        learner: the learning state.
        items: a batch of this device's :class:`ReplayItem` ``[N]``.
        weights: float32 ``[N]`` importance weights (0 for invalid items).
        key: PRNG key (the smoothing noise).
        hp: traced hyperparameters.
        nets: the network functions.
        policy_delay: critic steps per actor step (static).
        axis_name: the device axis, or None.

    Returns:
        ``(learner, td_abs [N], metrics)``; ``actor_loss`` is that of the step's actor gradient
        (applied or not).
    """
    actor_tx, critic_tx = td3_optimizers(hp)
    c_grads, (td_abs, c_metrics) = jax.grad(td3_critic_loss, has_aux=True)(
        learner.critic_params, learner.target_critic_params, learner.target_actor_params, nets, items, weights,
        key, hp.policy_noise, hp.noise_clip)
    c_grads = pmean(c_grads, axis_name)
    c_updates, critic_opt = critic_tx.update(c_grads, learner.critic_opt, learner.critic_params)
    critic_params = optax.apply_updates(learner.critic_params, c_updates)

    mask = (weights > 0).astype(jnp.float32)
    a_grads, a_metrics = jax.grad(td3_actor_loss, has_aux=True)(learner.actor_params, critic_params, nets,
                                                                items.obs, mask)
    a_grads = pmean(a_grads, axis_name)
    a_updates, actor_opt = actor_tx.update(a_grads, learner.actor_opt, learner.actor_params)
    actor_params = optax.apply_updates(learner.actor_params, a_updates)
    critic_steps = learner.critic_steps + 1
    delayed = critic_steps % policy_delay == 0

    def keep(new, old):
        return jax.tree.map(lambda n, o: jnp.where(delayed, n, o), new, old)

    new = TD3Learner(
        actor_params=keep(actor_params, learner.actor_params), critic_params=critic_params,
        target_actor_params=keep(polyak(actor_params, learner.target_actor_params, hp.tau),
                                 learner.target_actor_params),
        target_critic_params=keep(polyak(critic_params, learner.target_critic_params, hp.tau),
                                  learner.target_critic_params),
        actor_opt=keep(actor_opt, learner.actor_opt), critic_opt=critic_opt, critic_steps=critic_steps)
    metrics = pmean({**c_metrics, **a_metrics}, axis_name)
    metrics = {**metrics, "critic_grad_norm": optax.tree.norm(c_grads), "actor_grad_norm": optax.tree.norm(a_grads)}
    return new, td_abs, metrics


# ----------------------------------------------------------------------------------------------
# The agent
# ----------------------------------------------------------------------------------------------


def exploration_action(action: jax.Array, eps: jax.Array, low: jax.Array, high: jax.Array,
                       exploration_noise: jax.Array) -> jax.Array:
    """The behaviour action ``clip(mu(s) + half * exploration_noise * eps, low, high)``, ``eps ~ N(0, I)``
    (``[N, A]``; the noise is in normalised units, as in Fujimoto et al. 2018 and CleanRL)."""
    return jnp.clip(action + (high - low) / 2.0 * exploration_noise * eps, low, high)


def make_td3(config: TD3Config, env: Any, env_params: Any, axis_name: str | None = None) -> Agent:
    """Builds TD3's per-device program for a continuous-action (bounded ``Box``) ``env``."""
    space = env.action_space(env_params)
    discrete, action_dim = space_dims(space)
    if discrete:
        raise ValueError(f"TD3 needs a Box action space; {getattr(env, 'name', env)} has {space} "
                         f"(use DQN or PPO for Discrete actions)")
    low, high = _box_bounds(env, space, action_dim)
    d = config.num_devices
    nets = make_td3_networks(action_dim, low, high, config.hidden_sizes, config.activation)
    venv, normalize = observation_stack(make_env_stack(env, env_params, config.num_envs // d, axis_name=axis_name),
                                        config.normalize_obs, axis_name)
    replay = make_replay(config.buffer_size // d, config.prioritized)
    steps_per_update = config.env_steps_per_update

    def uniform(key: jax.Array, batch: int) -> jax.Array:
        return jax.random.uniform(key, (batch, action_dim), jnp.float32, nets.low, nets.high)

    def behaviour(actor_params: Any, noise: jax.Array, warmup: jax.Array):
        def act(key: jax.Array, obs: jax.Array):
            k_noise, k_uniform = jax.random.split(key)
            mu = nets.actor(actor_params, obs)
            action = exploration_action(mu, jax.random.normal(k_noise, mu.shape), nets.low, nets.high, noise)
            # Uniform actions until learning starts (selected, not branched).
            return jnp.where(warmup, uniform(k_uniform, obs.shape[0]), action), ()
        return act

    def init(key: jax.Array, device_index: Any, num_updates: int, hp: TD3HyperParams, env_params: Any
             ) -> TD3State:
        k_params, k_run = jax.random.split(key)
        k_env, k_state = jax.random.split(jax.random.fold_in(k_run, device_index))
        collector = init_collector(venv, env_params, lambda k, o: (uniform(k, o.shape[0]), ()), k_env,
                                   config.n_step)
        action0 = jnp.zeros((action_dim,), jnp.float32)
        learner = init_learner(nets, hp, k_params, collector.obs[:1], action0[None])
        example = ReplayItem(obs=collector.obs[0], action=action0, reward=jnp.float32(0),
                             discount=jnp.float32(0), next_obs=collector.obs[0], valid=jnp.bool_(False))
        return TD3State(learner=learner, collector=collector, buffer=replay.init(example, hp.priority_alpha),
                        key=k_state, hparams=hp, env_params=jax.tree.map(jnp.asarray, env_params),
                        updates=jnp.int32(0), num_updates=jnp.int32(num_updates))

    def update(state: TD3State) -> tuple[TD3State, UpdateOutput]:
        hp = state.hparams
        key, k_collect, k_learn = jax.random.split(state.key, 3)
        steps_before = state.updates * steps_per_update
        policy = behaviour(state.learner.actor_params, hp.exploration_noise, steps_before < config.learning_starts)
        collector, items, episodes = collect(venv, state.env_params, policy, state.collector, k_collect,
                                             config.num_steps, config.n_step, hp.gamma, observe=normalize)
        buffer = replay.add(state.buffer, items)
        progress = jnp.clip(state.updates.astype(jnp.float32) / jnp.maximum(state.num_updates, 1), 0.0, 1.0)

        def learn_step(learner: TD3Learner, batch: ReplayItem, weights: jax.Array, k: jax.Array):
            return td3_learn_step(learner, batch, weights, k, hp, nets, policy_delay=config.policy_delay,
                                  axis_name=axis_name)

        learner, buffer, metrics = replay_learning(
            learn_step, state.learner, replay, buffer, k_learn, gradient_steps=config.gradient_steps,
            batch_size=config.batch_size // d, beta=hp.priority_beta_start + progress * (1.0 - hp.priority_beta_start),
            active=steps_before + steps_per_update >= config.learning_starts,
            prepare=lambda b: normalize_items(b, lambda x: normalize(collector.env_state, x)))
        metrics = {**metrics, "buffer_size": replay.size(buffer).astype(jnp.float32) * d,
                   "param_desync": desync(_synced(learner), axis_name)}
        new_state = state.replace(learner=learner, collector=collector, buffer=buffer, key=key,
                                  updates=state.updates + 1)
        return new_state, UpdateOutput(metrics, episodes)

    def act(state: TD3State, obs: jax.Array, key: jax.Array) -> jax.Array:
        del key  # the deterministic actor, on observations normalised with the train state's statistics
        return nets.actor(state.learner.actor_params, normalize(state.collector.env_state, obs))

    return Agent(config=config, init=init, update=update, act=act, env_steps_per_update=steps_per_update,
                 params=lambda s: _synced(s.learner))


def _synced(learner: TD3Learner) -> Any:
    """The learner's parts that must agree across devices."""
    return (learner.actor_params, learner.critic_params, learner.target_actor_params, learner.target_critic_params)


register("td3", TD3Config, make_td3)
