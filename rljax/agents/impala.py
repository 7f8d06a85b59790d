"""IMPALA: an actor-critic learning from a behaviour policy through V-trace (Espeholt et al. 2018,
"IMPALA: Scalable Distributed Deep-RL with Importance Weighted Actor-Learner Architectures").

One update = a rollout of ``num_steps`` in each of ``num_envs`` envs, then ONE gradient step on it of

``L = -mean(log pi(a_t|s_t) * pg_adv_t) + vf_coef * 0.5 * mean((V(s_t) - vs_t)^2) - ent_coef * mean(H)``

where ``vs`` and ``pg_adv`` are :func:`rljax.core.returns.vtrace` of the rollout under the current
critic, with the importance ratios ``pi(a|s) / mu(a|s)`` of the current policy against the behaviour
policy that acted (the rollout's recorded log-probs), truncated at ``rho_clip`` and ``c_clip``. On
rljax's JAX envs the rollout was collected by the params being updated, so the ratios are 1 and V-trace
gives the lambda-returns; on the actor-learner path (:mod:`rljax.actorlearner`) actors act with
params up to ``max_policy_lag`` updates old and the ratios correct for it. Bootstrapping goes through
truncation (the final observation's value), never through termination. Adam (eps 1e-5) with
global-norm clipping.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from rljax.agents import register
from rljax.agents.base import Agent, gradient_step, make_optimizer, pmean, space_dims
from rljax.agents.onpolicy import (OnPolicyContext, OnPolicyHooks, RolloutConfig, actor_critic_act,
                                   actor_critic_network, explained_variance, make_onpolicy_agent, sampling_policy)
from rljax.core.config import check_choice, check_floats, check_sizes, field, hyperparams_class
from rljax.core.networks import ACTIVATIONS
from rljax.core.returns import vtrace
from rljax.core.rollout import Transition

__all__ = ["IMPALAConfig", "IMPALAHyperParams", "impala_loss", "impala_learn", "impala_optimizer", "make_impala"]


@dataclasses.dataclass(frozen=True)
class IMPALAConfig(RolloutConfig):
    """IMPALA's configuration (defaults: CartPole-v1, ``experiments/impala_cartpole.py``).

    Fields: the run (:class:`~rljax.core.config.RunConfig`), **structural** fields that shape the
    compiled program, and **sweepable** hyperparameters (traced; a sweep vmaps over them).
    """

    num_envs: int = field(16, "parallel environments, over all devices")
    # ----- structural -----
    num_steps: int = field(16, "steps per env per update (rollout length T)")
    hidden_sizes: tuple[int, ...] = field((64, 64), "MLP widths of the actor and critic torsos")
    activation: str = field("tanh", "hidden activation: tanh, relu, elu, gelu, silu, ...")
    shared_torso: bool = field(False, "one torso for actor and critic instead of two")
    normalize_obs: bool = field(False, "normalise observations by running mean/std (shared over devices)")
    normalize_reward: bool = field(False, "scale rewards by the running std of the discounted return")
    anneal_lr: bool = field(True, "decay the learning rate linearly to 0 over the run")

    # ----- sweepable hyperparameters (traced) -----
    learning_rate: float = field(1e-3, "Adam step size (before annealing)", sweepable=True)
    gamma: float = field(0.99, "discount factor", sweepable=True)
    trace_lambda: float = field(1.0, "V-trace's lambda: the traces are lambda * min(c_clip, ratio)", sweepable=True)
    rho_clip: float = field(1.0, "rho-bar: the ratio's truncation in the TD errors and the policy gradient",
                            sweepable=True)
    c_clip: float = field(1.0, "c-bar: the ratio's truncation in the traces", sweepable=True)
    ent_coef: float = field(0.01, "entropy bonus coefficient", sweepable=True)
    vf_coef: float = field(0.5, "value loss coefficient", sweepable=True)
    max_grad_norm: float = field(0.5, "global-norm gradient clipping threshold", sweepable=True)

    def validate(self) -> None:
        """The rollout checks (:meth:`RolloutConfig.validate`, types first), then IMPALA's ranges."""
        super().validate()
        check_sizes(self, "hidden_sizes")
        check_choice(self, "activation", ACTIVATIONS)
        check_floats(self, ("learning_rate", "max_grad_norm", "rho_clip", "c_clip"), 0, low_open=True)
        check_floats(self, ("gamma", "trace_lambda"), 0, 1)
        check_floats(self, ("ent_coef", "vf_coef"), 0)


IMPALAHyperParams = hyperparams_class(IMPALAConfig)


def impala_loss(params: Any, apply_fn: Any, traj: Transition, hyperparams: IMPALAHyperParams
                ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The V-trace actor-critic objective (to minimise) on a time-major rollout, and its diagnostics.

    Args:
        params: network parameters.
        apply_fn: ``apply_fn(params, obs) -> (dist, value)``.
        traj: a ``[T, B]`` :class:`~rljax.core.rollout.Transition` whose ``extras`` are the behaviour
            policy's log-probs of the actions.
        hyperparams: hyperparameters (``gamma``, ``trace_lambda``, ``rho_clip``, ``c_clip``,
            ``vf_coef``, ``ent_coef``).

    Returns:
        ``(loss, metrics)`` with float32 scalars ``policy_loss``, ``value_loss``, ``entropy``,
        ``rho_mean`` (the mean importance ratio) and ``rho_clip_fraction`` (ratios above ``rho_clip``).
    """
    dist, values = apply_fn(params, traj.obs)
    next_values = jax.lax.stop_gradient(apply_fn(params, traj.next_obs)[1])
    log_prob = dist.log_prob(traj.action)
    log_rhos = jax.lax.stop_gradient(log_prob) - traj.extras
    vs, pg_adv = jax.lax.stop_gradient(vtrace(
        traj.reward, jax.lax.stop_gradient(values), next_values, traj.terminated, traj.truncated, log_rhos,
        hyperparams.gamma, hyperparams.trace_lambda, hyperparams.rho_clip, hyperparams.c_clip, hyperparams.rho_clip))
    policy_loss = -jnp.mean(log_prob * pg_adv)
    value_loss = 0.5 * jnp.mean(jnp.square(values - vs))
    entropy = jnp.mean(dist.entropy())
    loss = policy_loss + hyperparams.vf_coef * value_loss - hyperparams.ent_coef * entropy
    ratio = jnp.exp(log_rhos)
    return loss, {"policy_loss": policy_loss, "value_loss": value_loss, "entropy": entropy,
                  "rho_mean": jnp.mean(ratio),
                  "rho_clip_fraction": jnp.mean((ratio > hyperparams.rho_clip).astype(jnp.float32)),
                  "explained_variance": explained_variance(vs, jax.lax.stop_gradient(values))}


def impala_optimizer(hyperparams: IMPALAHyperParams, learning_rate: jax.Array) -> Any:
    """Global-norm clipping at ``max_grad_norm``, then Adam (eps 1e-5), then a step of ``-learning_rate``."""
    return make_optimizer(learning_rate, hyperparams.max_grad_norm, eps=1e-5)


def impala_learn(params: Any, opt_state: Any, traj: Transition, hyperparams: IMPALAHyperParams, lr: jax.Array,
                 apply_fn: Any, axis_name: str | None = None) -> tuple[Any, Any, dict[str, jax.Array]]:
    """One gradient step of :func:`impala_loss` on ``traj`` (gradients averaged over ``axis_name``);
    returns ``(params, opt_state, metrics)`` with ``grad_norm``."""
    params, opt_state, metrics, grad_norm = gradient_step(impala_loss, params, opt_state,
                                                          impala_optimizer(hyperparams, lr), apply_fn, traj,
                                                          hyperparams, axis_name=axis_name)
    return params, opt_state, {**pmean(metrics, axis_name), "grad_norm": grad_norm}


def make_impala(config: IMPALAConfig, env: Any, env_params: Any, axis_name: str | None = None) -> Agent:
    """Builds IMPALA's per-device program for ``env`` (a ``Discrete`` or flat ``Box`` action space): the
    on-policy skeleton with the actor-critic's sampling policy (its log-probs recorded as the
    behaviour's) and one :func:`impala_learn` step per rollout."""
    network = actor_critic_network(config, env, env_params, "IMPALA")
    apply_fn = network.apply

    def learn(params: Any, opt_state: Any, traj: Any, key: jax.Array, ctx: OnPolicyContext):
        return impala_learn(params, opt_state, traj, ctx.hyperparams, ctx.learning_rate, apply_fn, axis_name)

    return make_onpolicy_agent(config, env, env_params, axis_name, OnPolicyHooks(
        init_params=network.init, optimizer=impala_optimizer,
        behaviour=lambda params, ctx: sampling_policy(apply_fn, params), learn=learn,
        act=actor_critic_act(apply_fn)), anneal_lr=config.anneal_lr, normalize_obs=config.normalize_obs,
        normalize_reward=config.normalize_reward)


register("impala", IMPALAConfig, make_impala,
         fits=lambda env, env_params: space_dims(env.action_space(env_params), "IMPALA"))
