"""A2C: synchronous advantage actor-critic (Mnih et al. 2016, "Asynchronous Methods for Deep
Reinforcement Learning", in its synchronous form, as in OpenAI Baselines and Stable-Baselines3).

One update = a short rollout of ``num_steps`` in each of ``num_envs`` envs, GAE(``gamma``,
``gae_lambda``) advantages and value targets that bootstrap through truncation (``gae_lambda``
0.95 by default; ``gae_lambda=1`` gives the n-step returns of Baselines and SB3: each step's
discounted rewards to the rollout's (or its episode's) end plus the discounted value after it,
``A_t = sum_{k=0}^{n-1} gamma^k r_{t+k} + gamma^n V(s_{t+n}) - V(s_t)``), then ONE gradient step
on the whole rollout of

``L = -mean(log pi(a|s) * A) + vf_coef * 0.5 * mean((V(s) - V_targ)^2) - ent_coef * mean(H[pi(.|s)])``

after global-norm clipping, with RMSprop (decay ``rho = 0.99``, ``eps = 1e-5``) or Adam (``eps =
1e-5``). ``rmsprop`` picks RMSprop's form, with ``v_0`` the average's start (per element):

* ``"optax"`` (default): ``v_0 = 0``, ``u = g / sqrt(v + eps)`` (``optax.scale_by_rms``);
* ``"torch"``: ``v_0 = 0``, ``u = g / (sqrt(v) + eps)``: ``torch.optim.RMSprop``, which
  Stable-Baselines3's A2C uses;
* ``"tf1"``: ``v_0 = 1``, ``u = g / sqrt(v + eps)``: TF1's ``tf.train.RMSPropOptimizer``, which
  OpenAI Baselines' A2C uses;

each with ``v = rho v_prev + (1 - rho) g^2`` and the step ``-learning_rate * u``. The three differ
most in the first steps (with ``v`` near its start): for ``|g| = 0.01`` the first step's ``|u|`` is
3.0 (optax), 9.9 (torch) and 0.01 (tf1). The network, behaviour policy and env stack are PPO's
(:mod:`rljax.agents.onpolicy`); A2C is its loss and its one step.
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

__all__ = ["A2CConfig", "A2CHyperParams", "A2CBatch", "RMSPROPS", "a2c_loss", "a2c_optimizer", "make_a2c"]

OPTIMIZERS = ("rmsprop", "adam")
RMSPROPS = ("optax", "torch", "tf1")
"""RMSprop's forms (module docstring): optax's, PyTorch's (SB3) and TF1's (Baselines)."""


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
    optimizer: str = field("rmsprop", "rmsprop (decay 0.99, eps 1e-5, in the form the rmsprop field names) or "
                                      "adam (eps 1e-5)")
    rmsprop: str = field("optax", "RMSprop's form: optax (eps inside the sqrt, average from 0), torch (SB3's "
                                  "PyTorch: eps outside the sqrt, average from 0) or tf1 (Baselines' TF1: eps inside "
                                  "the sqrt, average from 1); unused with adam")
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
        check_choice(self, "rmsprop", RMSPROPS)
        if self.optimizer != "rmsprop" and self.rmsprop != "optax":
            raise ValueError(f"rmsprop={self.rmsprop!r} picks RMSprop's form, but optimizer={self.optimizer!r}: "
                             f"use optimizer='rmsprop' with it, or leave rmsprop at 'optax'")
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


def a2c_optimizer(name: str, hyperparams: A2CHyperParams, learning_rate: jax.Array, rmsprop: str = "optax"
                  ) -> optax.GradientTransformation:
    """Global-norm clipping at ``max_grad_norm``, then RMSprop (decay 0.99, eps 1e-5, in the form
    ``rmsprop`` names) or Adam (eps 1e-5), then a step of ``-learning_rate`` (both values may be traced).

    RMSprop with the element-wise average of squared gradients ``v`` (start ``v_0``) and update ``u``:

    * ``"optax"``: ``v_0 = 0``, ``v = 0.99 v + 0.01 g^2``, ``u = g / sqrt(v + 1e-5)``;
    * ``"torch"``: ``v_0 = 0``, ``v = 0.99 v + 0.01 g^2``, ``u = g / (sqrt(v) + 1e-5)``
      (``torch.optim.RMSprop(alpha=0.99, eps=1e-5)``, Stable-Baselines3's A2C);
    * ``"tf1"``: ``v_0 = 1``, ``v = 0.99 v + 0.01 g^2``, ``u = g / sqrt(v + 1e-5)``
      (``tf.train.RMSPropOptimizer(decay=0.99, epsilon=1e-5)``, OpenAI Baselines' A2C).

    Args:
        name: ``"rmsprop"`` or ``"adam"``.
        hyperparams: hyperparameters (``max_grad_norm`` is used).
        learning_rate: the step size, a float or a traced scalar.
        rmsprop: RMSprop's form, ``"optax"``, ``"torch"`` or ``"tf1"`` (unused with Adam).

    Returns:
        The chained ``optax.GradientTransformation``.

    Raises:
        ValueError: ``name`` or ``rmsprop`` is not one of the values above.
    """
    if name not in OPTIMIZERS or rmsprop not in RMSPROPS:
        raise ValueError(f"a2c_optimizer: name={name!r} (one of {OPTIMIZERS}), rmsprop={rmsprop!r} (one of {RMSPROPS})")
    if name == "adam":
        scale = optax.scale_by_adam(eps=1e-5)
    else:
        scale = optax.scale_by_rms(decay=0.99, eps=1e-5, initial_scale=1.0 if rmsprop == "tf1" else 0.0,
                                   eps_in_sqrt=rmsprop != "torch")
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

    def optimizer(hyperparams: A2CHyperParams, lr: jax.Array) -> optax.GradientTransformation:
        return a2c_optimizer(config.optimizer, hyperparams, lr, config.rmsprop)

    return make_onpolicy_agent(config, env, env_params, axis_name, OnPolicyHooks(
        init_params=network.init, optimizer=optimizer,
        behaviour=lambda params, ctx: sampling_policy(apply_fn, params), learn=learn,
        act=actor_critic_act(apply_fn)), anneal_lr=config.anneal_lr, normalize_obs=config.normalize_obs,
        normalize_reward=config.normalize_reward)


register("a2c", A2CConfig, make_a2c, fits=lambda env, env_params: space_dims(env.action_space(env_params), "A2C"))
