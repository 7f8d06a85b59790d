"""Proximal Policy Optimization (Schulman et al. 2017, "Proximal Policy Optimization Algorithms").

One update = a rollout of ``num_steps`` in ``num_envs`` envs, GAE targets that bootstrap through
truncation, then ``num_epochs`` passes of ``num_minibatches`` minibatches over a fresh permutation
each epoch, all inside one compiled program. With the defaults this is PureJaxRL's CartPole
configuration.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from rljax.agents import register
from rljax.agents.base import Agent, make_optimizer, make_split_clip_optimizer, pmean, space_dims
from rljax.agents.onpolicy import (OnPolicyConfig, OnPolicyContext, OnPolicyHooks, OnPolicyState, actor_critic_act,
                                   actor_critic_network, explained_variance, gae_targets, make_onpolicy_agent,
                                   minibatch_epochs, sampling_policy)
from rljax.agents.recurrent import (bootstrap_outputs, memory_init, memory_step, replay, sequence_apply,
                                    sequence_length, sequences, to_sequences)
from rljax.core.config import check_choice, check_floats, check_sizes, field, hyperparams_class
from rljax.core.networks import ACTIVATIONS
from rljax.core.returns import gae

__all__ = ["PPOConfig", "PPOHyperParams", "PPOState", "PPOBatch", "ppo_batch", "ppo_loss", "ppo_optimizer",
           "ppo_learn", "ppo_split_clip_optimizer", "explained_variance", "make_ppo"]


@dataclasses.dataclass(frozen=True)
class PPOConfig(OnPolicyConfig):
    """PPO's configuration. Defaults: PureJaxRL's CartPole-v1 setup (solves it in 5e5 steps).

    Fields are in three groups: the run (from :class:`~rljax.core.config.RunConfig`), **structural**
    fields that shape the compiled program, and **sweepable** hyperparameters (traced values in the
    train state; a sweep vmaps over them in one program). ``--help`` on any experiment prints the
    help line of each field.
    """

    # ----- structural: shapes and loop lengths -----
    num_steps: int = field(128, "steps per env per update (rollout length T)")
    num_epochs: int = field(4, "passes over each rollout")
    num_minibatches: int = field(4, "minibatches per epoch; must divide num_envs * num_steps")
    hidden_sizes: tuple[int, ...] = field((64, 64), "MLP widths of the actor and critic torsos (after the "
                                                    "observation encoder)")
    activation: str = field("tanh", "hidden activation: tanh, relu, elu, gelu, silu, ...")
    shared_torso: bool = field(False, "one torso for actor and critic instead of two")
    normalize_obs: bool = field(False, "normalise observations by running mean/std (shared over devices)")
    normalize_reward: bool = field(False, "scale rewards by the running std of the discounted return "
                                          "(discounted with this run's gamma)")
    normalize_advantages: bool = field(True, "standardise advantages per minibatch (over all devices)")
    clip_value_loss: bool = field(True, "clip the value update to +-clip_eps around the old value")
    anneal_lr: bool = field(True, "decay the learning rate linearly to 0 over the run")

    # ----- sweepable hyperparameters (traced) -----
    learning_rate: float = field(2.5e-4, "Adam step size (before annealing)", sweepable=True)
    gamma: float = field(0.99, "discount factor", sweepable=True)
    gae_lambda: float = field(0.95, "GAE lambda", sweepable=True)
    clip_eps: float = field(0.2, "PPO ratio clip range (and value clip range)", sweepable=True)
    ent_coef: float = field(0.01, "entropy bonus coefficient", sweepable=True)
    vf_coef: float = field(0.5, "value loss coefficient", sweepable=True)
    max_grad_norm: float = field(0.5, "global-norm gradient clipping threshold", sweepable=True)

    def validate(self) -> None:
        """The on-policy checks (:meth:`OnPolicyConfig.validate`, types first), then PPO's ranges."""
        super().validate()
        check_sizes(self, "hidden_sizes")
        check_choice(self, "activation", ACTIVATIONS)
        check_floats(self, ("learning_rate", "clip_eps", "max_grad_norm"), 0, low_open=True)
        check_floats(self, ("gamma", "gae_lambda"), 0, 1)
        check_floats(self, ("ent_coef", "vf_coef"), 0)


PPOHyperParams = hyperparams_class(PPOConfig)


PPOState = OnPolicyState
"""PPO's train state: the shared :class:`~rljax.agents.onpolicy.OnPolicyState` (actor-critic params,
Adam state, env state with its normalisers, observations, key, hyperparameters, env params, update
counters)."""


class PPOBatch(NamedTuple):
    """A flat batch of samples for the PPO loss; every field has leading dim ``[N]``.

    Attributes:
        obs: ``[N, *obs_shape]`` (every leaf of a pytree observation ``[N, *leaf_shape]``).
        action: ``[N, *action_shape]``.
        log_prob: ``[N]`` log-probability under the behaviour policy.
        value: ``[N]`` V(obs) under the behaviour parameters.
        advantage: ``[N]`` GAE advantages (not normalised).
        target: ``[N]`` value targets (advantage + value).
    """

    obs: Any
    action: jax.Array
    log_prob: jax.Array
    value: jax.Array
    advantage: jax.Array
    target: jax.Array


def ppo_loss(params: Any, apply_fn: Any, batch: PPOBatch, hyperparams: PPOHyperParams, *,
             normalize_advantages: bool = True, clip_value_loss: bool = True,
             axis_name: str | None = None) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The clipped PPO objective (to minimise) and its diagnostics.

    ``L = -E[min(r A, clip(r, 1-eps, 1+eps) A)] + c_v * 0.5 * E[(V - V_targ)^2] - c_e * E[H]``
    with ``r = exp(log pi(a|s) - log pi_old(a|s))``. With ``clip_value_loss`` the value term is
    ``0.5 * E[max((V - V_targ)^2, (V_old + clip(V - V_old, -eps, eps) - V_targ)^2)]``.
    Advantages are standardised with statistics over the minibatch on *all* devices (so a
    data-parallel update equals the single-device update on the global batch).

    Args:
        params: network parameters.
        apply_fn: ``apply_fn(params, obs) -> (dist, value)``.
        batch: a :class:`PPOBatch` minibatch.
        hyperparams: hyperparameters (``clip_eps``, ``vf_coef``, ``ent_coef`` are used).
        normalize_advantages: standardise advantages.
        clip_value_loss: use the clipped value loss.
        axis_name: device axis for the advantage statistics (None on one device).

    Returns:
        ``(loss, metrics)`` with float32 scalars ``policy_loss``, ``value_loss``, ``entropy``,
        ``approx_kl`` and ``clip_fraction``.
    """
    dist, value = apply_fn(params, batch.obs)
    log_prob = dist.log_prob(batch.action)
    log_ratio = log_prob - batch.log_prob
    ratio = jnp.exp(log_ratio)

    adv = batch.advantage
    if normalize_advantages:
        mean = pmean(jnp.mean(adv), axis_name)
        var = pmean(jnp.mean(jnp.square(adv - mean)), axis_name)
        adv = (adv - mean) / (jnp.sqrt(var) + 1e-8)
    surrogate = jnp.minimum(ratio * adv,
                            jnp.clip(ratio, 1.0 - hyperparams.clip_eps, 1.0 + hyperparams.clip_eps) * adv)
    policy_loss = -jnp.mean(surrogate)

    value_err = jnp.square(value - batch.target)
    if clip_value_loss:
        clipped = batch.value + jnp.clip(value - batch.value, -hyperparams.clip_eps, hyperparams.clip_eps)
        value_err = jnp.maximum(value_err, jnp.square(clipped - batch.target))
    value_loss = 0.5 * jnp.mean(value_err)

    entropy = jnp.mean(dist.entropy())
    loss = policy_loss + hyperparams.vf_coef * value_loss - hyperparams.ent_coef * entropy
    metrics = {
        "policy_loss": policy_loss,
        "value_loss": value_loss,
        "entropy": entropy,
        # Schulman's low-variance estimator of KL(old || new): E[(r - 1) - log r].
        "approx_kl": jnp.mean((ratio - 1.0) - log_ratio),
        "clip_fraction": jnp.mean((jnp.abs(ratio - 1.0) > hyperparams.clip_eps).astype(jnp.float32)),
    }
    return loss, metrics


def ppo_optimizer(hyperparams: PPOHyperParams, learning_rate: jax.Array) -> optax.GradientTransformation:
    """Global-norm clipping then Adam (eps 1e-5, as PureJaxRL/CleanRL) with step size ``learning_rate``.

    Built from traced hyperparameters inside the update, so a sweep can vmap over them; the state
    structure does not depend on their values.
    """
    return make_optimizer(learning_rate, hyperparams.max_grad_norm, eps=1e-5)


def ppo_split_clip_optimizer(hyperparams: PPOHyperParams, learning_rate: jax.Array) -> optax.GradientTransformation:
    """:func:`ppo_optimizer` with the actor's and the critic's gradients clipped each on its own
    (:func:`~rljax.agents.base.make_split_clip_optimizer`): a config's ``clip_per_network``."""
    return make_split_clip_optimizer(learning_rate, hyperparams.max_grad_norm, eps=1e-5)


def ppo_learn(params: Any, opt_state: Any, batch: PPOBatch, key: jax.Array, hyperparams: PPOHyperParams,
              lr: jax.Array, apply_fn: Any, *, num_epochs: int, num_minibatches: int,
              normalize_advantages: bool = True, clip_value_loss: bool = True,
              axis_name: str | None = None, optimizer: Any = None) -> tuple[Any, Any, dict[str, jax.Array]]:
    """PPO's learning phase: ``num_epochs`` passes of ``num_minibatches`` Adam steps over ``batch``.

    Each epoch draws a fresh permutation of this device's samples
    (:func:`~rljax.agents.base.epochs_of_minibatches`). Gradients (and advantage statistics) are
    averaged over ``axis_name``, so on D devices with per-device batches of N the update equals
    the single-device one on the concatenated D*N batch whenever the minibatches are the same sets
    (e.g. ``num_minibatches=1``).

    Args:
        params: network parameters.
        opt_state: optimiser state (from ``ppo_optimizer(hyperparams, lr).init``).
        batch: a :class:`PPOBatch` with leading dim ``[N]`` (this device's samples).
        key: a PRNG key for the permutations.
        hyperparams: hyperparameters.
        lr: the step size for this update (after annealing).
        apply_fn: ``apply_fn(params, obs) -> (dist, value)``.
        num_epochs: passes over the batch.
        num_minibatches: minibatches per pass; must divide N.
        normalize_advantages: see :func:`ppo_loss`.
        clip_value_loss: see :func:`ppo_loss`.
        axis_name: the device axis, or None.
        optimizer: ``optimizer(hyperparams, lr) -> GradientTransformation``; None: :func:`ppo_optimizer`.

    Returns:
        ``(params, opt_state, metrics)`` with metrics averaged over all minibatch steps, plus
        ``grad_norm`` (before clipping).
    """
    def loss(params: Any, minibatch: PPOBatch) -> tuple[jax.Array, dict[str, jax.Array]]:
        return ppo_loss(params, apply_fn, minibatch, hyperparams, normalize_advantages=normalize_advantages,
                        clip_value_loss=clip_value_loss, axis_name=axis_name)

    return minibatch_epochs(loss, params, opt_state, (optimizer or ppo_optimizer)(hyperparams, lr), batch, key,
                            num_epochs=num_epochs, num_minibatches=num_minibatches, axis_name=axis_name)


def make_ppo(config: PPOConfig, env: Any, env_params: Any, axis_name: str | None = None) -> Agent:
    """Builds PPO's per-device program for ``env`` (a ``Discrete`` or flat ``Box`` action space): the
    on-policy skeleton (:func:`~rljax.agents.onpolicy.make_onpolicy_agent`) with the actor-critic's
    sampling policy and :func:`ppo_learn` on GAE targets. With ``config.memory`` the actor-critic is
    recurrent (:mod:`rljax.agents.recurrent`): the loss runs over minibatches of whole sequences.

    Args:
        config: the config.
        env: a single, unbatched env (rljax or gymnax contract).
        env_params: its params.
        axis_name: the device axis name when data-parallel, else None.

    Returns:
        An :class:`~rljax.agents.base.Agent`.
    """
    network = actor_critic_network(config, env, env_params, "PPO")
    apply_fn = network.apply
    batch_of = _recurrent_ppo_batch(apply_fn, sequence_length(config)) if config.recurrent else \
        functools.partial(ppo_batch, apply_fn)
    loss_apply = sequence_apply(apply_fn) if config.recurrent else apply_fn
    optimizer = ppo_split_clip_optimizer if getattr(config, "clip_per_network", False) else ppo_optimizer

    def learn(params: Any, opt_state: Any, traj: Any, key: jax.Array, ctx: OnPolicyContext):
        hyperparams = ctx.hyperparams
        batch, (values, targets) = batch_of(params, traj, hyperparams)
        params, opt_state, metrics = ppo_learn(
            params, opt_state, batch, key, hyperparams, ctx.learning_rate, loss_apply,
            num_epochs=config.num_epochs, num_minibatches=config.num_minibatches,
            normalize_advantages=config.normalize_advantages, clip_value_loss=config.clip_value_loss,
            axis_name=axis_name, optimizer=optimizer)
        # Of the value targets by the behaviour values, over all devices. On the [T, B] arrays: a
        # mean over the flat [T * B] copies may sum in another order (other float32 bits).
        return params, opt_state, {**metrics, "explained_variance": explained_variance(targets, values, axis_name)}

    if config.recurrent:
        hooks = _recurrent_hooks(network)
    else:
        hooks = dict(init_params=network.init, behaviour=lambda params, ctx: sampling_policy(apply_fn, params),
                     act=actor_critic_act(apply_fn))
    return make_onpolicy_agent(config, env, env_params, axis_name, OnPolicyHooks(
        optimizer=optimizer, learn=learn, **hooks), anneal_lr=config.anneal_lr,
        normalize_obs=config.normalize_obs, normalize_reward=config.normalize_reward)


def ppo_batch(apply_fn: Any, params: Any, traj: Any, hyperparams: PPOHyperParams
               ) -> tuple[PPOBatch, tuple[jax.Array, jax.Array]]:
    """The rollout ``traj`` (``[T, B]``, ``extras`` the log-probs) as a flat :class:`PPOBatch` ``[T * B]``
    with GAE advantages and value targets that bootstrap through truncation
    (:func:`~rljax.agents.onpolicy.gae_targets`), and ``(values, targets)`` as ``[T, B]``."""
    values, advantages, targets = gae_targets(apply_fn, params, traj, hyperparams.gamma, hyperparams.gae_lambda)
    flat = lambda x: x.reshape((-1,) + x.shape[2:])  # noqa: E731
    batch = PPOBatch(jax.tree.map(flat, traj.obs), flat(traj.action), flat(traj.extras), flat(values),
                     flat(advantages), flat(targets))
    return batch, (values, targets)


def _recurrent_ppo_batch(apply_fn: Any, length: int) -> Any:
    """``batch_of(params, traj, hyperparams)`` for a recurrent actor-critic: the rollout replayed
    from its recorded memory for ``V(s_t)`` and the bootstrap values (:func:`~rljax.agents.recurrent.replay`,
    :func:`~rljax.agents.recurrent.bootstrap_outputs`), GAE, and a :class:`PPOBatch` of
    :class:`~rljax.agents.recurrent.Sequences` ``[S, L]`` (every field ``[S, L]``)."""
    def batch_of(params: Any, traj: Any, hyperparams: PPOHyperParams
                 ) -> tuple[PPOBatch, tuple[jax.Array, jax.Array]]:
        memories, (_, values) = replay(apply_fn, params, traj)
        _, next_values = bootstrap_outputs(apply_fn, params, memories, traj.next_obs)
        advantages, targets = gae(traj.reward, values, next_values, traj.terminated, traj.truncated,
                                  hyperparams.gamma, hyperparams.gae_lambda)
        seq = lambda x: to_sequences(x, length)  # noqa: E731
        batch = PPOBatch(sequences(traj, length), seq(traj.action), seq(traj.extras), seq(values), seq(advantages),
                         seq(targets))
        return batch, (values, targets)
    return batch_of


def _recurrent_hooks(network: Any) -> dict[str, Any]:
    """The acting hooks of a recurrent actor-critic (``init_params``, ``behaviour``, ``act``,
    ``initial_memory``): one :func:`~rljax.agents.recurrent.memory_step` per env step."""
    apply_fn = network.apply
    initial, init_params = memory_init(network)

    def behaviour(params: Any, ctx: OnPolicyContext):
        def sample(key: jax.Array, obs: Any, memory: Any) -> tuple[jax.Array, jax.Array, Any]:
            memory, (dist, _) = memory_step(apply_fn, params, memory, obs)
            action = dist.sample(key)
            return action, dist.log_prob(action), memory
        return sample

    def act(params: Any, obs: Any, key: Any, exploration: jax.Array, deterministic: bool, memory: Any):
        memory, (dist, _) = memory_step(apply_fn, params, memory, obs)
        return (dist.mode() if deterministic else dist.sample(key)), memory

    return dict(init_params=init_params, behaviour=behaviour, act=act, initial_memory=initial)


register("ppo", PPOConfig, make_ppo, fits=lambda env, env_params: space_dims(env.action_space(env_params), "PPO"))
