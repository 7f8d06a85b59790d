"""A2C: synchronous advantage actor-critic (Mnih et al. 2016, "Asynchronous Methods for Deep
Reinforcement Learning", in its synchronous form, as in OpenAI Baselines and Stable-Baselines3).

One update = a short rollout of ``num_steps`` in each of ``num_envs`` envs, GAE targets that
bootstrap through truncation (``gae_lambda = 1``: n-step returns up to the rollout's end), then ONE
gradient step on the whole rollout of

``L = -mean(log pi(a|s) * A) + vf_coef * 0.5 * mean((V(s) - V_targ)^2) - ent_coef * mean(H[pi(.|s)])``

with RMSprop (Baselines' and SB3's choice) or Adam. The network, behaviour policy and env stack are
PPO's (:mod:`rljax.agents.onpolicy`); A2C is its loss and its one step.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from rljax.agents import register
from rljax.agents.base import Agent, gradient_step, pmean, space_dims
from rljax.agents.onpolicy import (OnPolicyContext, OnPolicyHooks, RolloutConfig, actor_critic_act,
                                   actor_critic_network, explained_variance, gae_targets, make_onpolicy_agent,
                                   sampling_policy)
from rljax.core.config import check_choice, check_floats, check_sizes, field, hyperparams_class
from rljax.core.networks import ACTIVATIONS

__all__ = ["A2CConfig", "A2CHyperParams", "A2CBatch", "a2c_loss", "a2c_optimizer", "make_a2c"]

OPTIMIZERS = ("rmsprop", "adam")


@dataclasses.dataclass(frozen=True)
class A2CConfig(RolloutConfig):
    """A2C's configuration. Defaults: CartPole-v1 to a return of 500 (``experiments/a2c_cartpole.py``).

    Fields: the run (:class:`~rljax.core.config.RunConfig`), **structural** fields that shape the
    compiled program, and **sweepable** hyperparameters (traced; a sweep vmaps over them).
    """

    num_envs: int = field(16, "parallel environments, over all devices")
    # ----- structural -----
    num_steps: int = field(8, "steps per env per update (rollout length T)")
    hidden_sizes: tuple[int, ...] = field((64, 64), "MLP widths of the actor and critic torsos")
    activation: str = field("tanh", "hidden activation: tanh, relu, elu, gelu, silu, ...")
    shared_torso: bool = field(False, "one torso for actor and critic instead of two")
    normalize_obs: bool = field(False, "normalise observations by running mean/std (shared over devices)")
    normalize_reward: bool = field(False, "scale rewards by the running std of the discounted return")
    optimizer: str = field("rmsprop", "rmsprop (decay 0.99, eps 1e-5, as Baselines/SB3) or adam (eps 1e-5)")
    anneal_lr: bool = field(True, "decay the learning rate linearly to 0 over the run")

    # ----- sweepable hyperparameters (traced) -----
    learning_rate: float = field(2e-3, "step size (before annealing)", sweepable=True)
    gamma: float = field(0.99, "discount factor", sweepable=True)
    gae_lambda: float = field(0.95, "GAE lambda (1: n-step returns to the rollout's end)", sweepable=True)
    ent_coef: float = field(0.01, "entropy bonus coefficient", sweepable=True)
    vf_coef: float = field(0.5, "value loss coefficient", sweepable=True)
    max_grad_norm: float = field(0.5, "global-norm gradient clipping threshold", sweepable=True)

    def validate(self) -> None:
        """The rollout checks (:meth:`RolloutConfig.validate`, types first), then A2C's ranges."""
        super().validate()
        check_sizes(self, "hidden_sizes")
        check_choice(self, "activation", ACTIVATIONS)
        check_choice(self, "optimizer", OPTIMIZERS)
        check_floats(self, ("learning_rate", "max_grad_norm"), 0, low_open=True)
        check_floats(self, ("gamma", "gae_lambda"), 0, 1)
        check_floats(self, ("ent_coef", "vf_coef"), 0)


A2CHyperParams = hyperparams_class(A2CConfig)


class A2CBatch(NamedTuple):
    """The flat rollout for the A2C loss; every field has leading dim ``[N]`` (``N = T * B``).

    Attributes:
        obs: ``[N, *obs_shape]`` (every leaf of a pytree observation ``[N, *leaf_shape]``).
        action: ``[N, *action_shape]``.
        advantage: ``[N]`` GAE advantages.
        target: ``[N]`` value targets (advantage + value).
    """

    obs: Any
    action: jax.Array
    advantage: jax.Array
    target: jax.Array


def a2c_loss(params: Any, apply_fn: Any, batch: A2CBatch, hyperparams: A2CHyperParams
             ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The advantage actor-critic objective (to minimise) and its diagnostics.

    ``L = -mean(log pi(a|s) A) + vf_coef * 0.5 * mean((V(s) - V_targ)^2) - ent_coef * mean(H)``;
    the advantages and targets are constants (no gradient flows into them).

    Args:
        params: network parameters.
        apply_fn: ``apply_fn(params, obs) -> (dist, value)``.
        batch: an :class:`A2CBatch`.
        hyperparams: hyperparameters (``vf_coef`` and ``ent_coef`` are used).

    Returns:
        ``(loss, metrics)`` with float32 scalars ``policy_loss``, ``value_loss`` and ``entropy``.
    """
    dist, value = apply_fn(params, batch.obs)
    advantage, target = jax.lax.stop_gradient(batch.advantage), jax.lax.stop_gradient(batch.target)
    policy_loss = -jnp.mean(dist.log_prob(batch.action) * advantage)
    value_loss = 0.5 * jnp.mean(jnp.square(value - target))
    entropy = jnp.mean(dist.entropy())
    loss = policy_loss + hyperparams.vf_coef * value_loss - hyperparams.ent_coef * entropy
    return loss, {"policy_loss": policy_loss, "value_loss": value_loss, "entropy": entropy}


def a2c_optimizer(name: str, hyperparams: A2CHyperParams, learning_rate: jax.Array) -> optax.GradientTransformation:
    """Global-norm clipping at ``max_grad_norm``, then RMSprop (decay 0.99, eps 1e-5) or Adam (eps
    1e-5), then a step of ``-learning_rate`` (both values may be traced)."""
    scale = optax.scale_by_rms(decay=0.99, eps=1e-5) if name == "rmsprop" else optax.scale_by_adam(eps=1e-5)
    return optax.chain(optax.clip_by_global_norm(hyperparams.max_grad_norm), scale, optax.scale(-learning_rate))


def make_a2c(config: A2CConfig, env: Any, env_params: Any, axis_name: str | None = None) -> Agent:
    """Builds A2C's per-device program for ``env`` (a ``Discrete`` or flat ``Box`` action space): the
    on-policy skeleton (:func:`~rljax.agents.onpolicy.make_onpolicy_agent`) with the actor-critic's
    sampling policy and one gradient step of :func:`a2c_loss` per rollout, averaged over devices."""
    network = actor_critic_network(config, env, env_params, "A2C")
    apply_fn = network.apply

    def learn(params: Any, opt_state: Any, traj: Any, key: jax.Array, ctx: OnPolicyContext):
        hyperparams = ctx.hyperparams
        values, advantages, targets = gae_targets(apply_fn, params, traj, hyperparams.gamma, hyperparams.gae_lambda)
        flat = lambda x: x.reshape((-1,) + x.shape[2:])  # noqa: E731
        batch = A2CBatch(jax.tree.map(flat, traj.obs), flat(traj.action), flat(advantages), flat(targets))
        params, opt_state, metrics, grad_norm = gradient_step(a2c_loss, params, opt_state, ctx.optimizer, apply_fn,
                                                              batch, hyperparams, axis_name=axis_name)
        return params, opt_state, {**pmean(metrics, axis_name), "grad_norm": grad_norm,
                                   "explained_variance": explained_variance(targets, values, axis_name)}

    return make_onpolicy_agent(config, env, env_params, axis_name, OnPolicyHooks(
        init_params=network.init, optimizer=lambda hyperparams, lr: a2c_optimizer(config.optimizer, hyperparams, lr),
        behaviour=lambda params, ctx: sampling_policy(apply_fn, params), learn=learn,
        act=actor_critic_act(apply_fn)), anneal_lr=config.anneal_lr, normalize_obs=config.normalize_obs,
        normalize_reward=config.normalize_reward)


register("a2c", A2CConfig, make_a2c, fits=lambda env, env_params: space_dims(env.action_space(env_params), "A2C"))
