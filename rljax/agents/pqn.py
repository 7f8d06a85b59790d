"""PQN: parallelised Q-learning (Gallici et al. 2024, "Simplifying Deep Temporal Difference
Learning", and its reference code ``purejaxql``).

Q-learning without a replay buffer or a target network. One update:

1. a rollout of ``num_steps`` epsilon-greedy steps in each of ``num_envs`` vectorised envs
   (epsilon decays linearly from ``epsilon_start`` to ``epsilon_end`` over the first
   ``exploration_fraction`` of the run);
2. Q(lambda) targets computed backwards over the rollout
   (:func:`rljax.core.returns.q_lambda_targets`), bootstrapping from ``max_a Q(next_obs, a)`` under
   the current parameters;
3. ``num_epochs`` passes of ``num_minibatches`` Adam steps on ``0.5 * mean((Q(s, a) - G)^2)``.

Stability without a target network comes from LayerNorm after each hidden Dense layer of the
Q-network (``layer_norm``) and from the decorrelation of many parallel envs. Unlike ``purejaxql``
(which treats a time-limit cut like termination) the targets bootstrap through truncation from the
true final observation. Observations of any shape and pytree structure go through the encoder the
``encoder`` field chooses (:func:`rljax.core.networks.encoder_layout`) before the MLP.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rljax.agents import register
from rljax.agents.base import Agent, discrete_actions, greedy_or_epsilon, make_optimizer, observation_layout, pmean
from rljax.agents.onpolicy import (OnPolicyConfig, OnPolicyContext, OnPolicyHooks, OnPolicyState, make_onpolicy_agent,
                                   minibatch_epochs)
from rljax.agents.recurrent import (bootstrap_outputs, memory_init, memory_step, replay, sequence_apply,
                                    sequence_length, sequences, to_sequences)
from rljax.core.config import check_choice, check_floats, check_sizes, field, hyperparams_class
from rljax.core.networks import ACTIVATIONS, QNetwork, RecurrentQNetwork
from rljax.core.returns import q_lambda_targets
from rljax.env import legal_action_mask, masked_actions

__all__ = ["PQNConfig", "PQNHyperParams", "PQNState", "PQNBatch", "pqn_loss", "make_pqn"]


@dataclasses.dataclass(frozen=True)
class PQNConfig(OnPolicyConfig):
    """PQN's configuration. Defaults: ``purejaxql``'s CartPole-v1 setup (``pqn_cartpole.yaml``),
    except Adam where it uses RAdam; ``experiments/pqn_cartpole.py`` holds a smaller, faster setup
    tuned for a CPU.

    Fields are in three groups: the run (from :class:`~rljax.core.config.RunConfig`), **structural**
    fields that shape the compiled program, and **sweepable** hyperparameters (traced values in the
    train state; a sweep vmaps over them in one program).
    """

    num_envs: int = field(32, "parallel environments, over all devices")
    # ----- structural: shapes and loop lengths -----
    num_steps: int = field(64, "steps per env per update (rollout length T)")
    num_epochs: int = field(4, "passes over each rollout")
    num_minibatches: int = field(16, "minibatches per epoch; must divide num_envs * num_steps / num_devices")
    hidden_sizes: tuple[int, ...] = field((256, 256), "Q-network MLP widths (after the observation encoder)")
    activation: str = field("relu", "hidden activation")
    layer_norm: bool = field(True, "LayerNorm after each hidden Dense, before the activation")
    anneal_lr: bool = field(True, "decay the learning rate linearly to 0 over the run")

    # ----- sweepable hyperparameters (traced) -----
    learning_rate: float = field(1e-4, "Adam step size (before annealing)", sweepable=True)
    gamma: float = field(0.99, "discount factor", sweepable=True)
    q_lambda: float = field(0.95, "Q(lambda) trace parameter: 0 = one-step targets, 1 = Monte Carlo",
                            sweepable=True)
    epsilon_start: float = field(1.0, "initial exploration rate", sweepable=True)
    epsilon_end: float = field(0.2, "final exploration rate", sweepable=True)
    exploration_fraction: float = field(0.2, "fraction of the run over which epsilon decays", sweepable=True)
    max_grad_norm: float = field(10.0, "global-norm gradient clipping threshold", sweepable=True)
    reward_scale: float = field(0.1, "rewards are multiplied by this in the targets (episode returns "
                                     "are logged unscaled)", sweepable=True)

    def validate(self) -> None:
        """The on-policy checks (:meth:`OnPolicyConfig.validate`, types first), then PQN's ranges."""
        super().validate()
        check_sizes(self, "hidden_sizes")
        check_choice(self, "activation", ACTIVATIONS)
        check_floats(self, ("learning_rate", "max_grad_norm", "reward_scale"), 0, low_open=True)
        check_floats(self, ("gamma", "q_lambda", "epsilon_start", "epsilon_end", "exploration_fraction"), 0, 1)


PQNHyperParams = hyperparams_class(PQNConfig)


PQNState = OnPolicyState
"""PQN's train state: the shared :class:`~rljax.agents.onpolicy.OnPolicyState` (Q-network params,
Adam state, env state, observations, key, hyperparameters, env params, update counters)."""


class PQNBatch(NamedTuple):
    """A flat batch for the PQN loss; every field has leading dim ``[N]``.

    Attributes:
        obs: ``[N, *obs_shape]``.
        action: int ``[N]``, the action taken.
        target: float ``[N]``, its Q(lambda) target ``G``.
    """

    obs: Any
    action: jax.Array
    target: jax.Array


def pqn_loss(params: Any, apply_fn: Callable[[Any, jax.Array], jax.Array], batch: PQNBatch
             ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """PQN's TD loss ``L = 0.5 * mean_i (Q(s_i, a_i) - G_i)^2`` and its diagnostics.

    Args:
        params: Q-network parameters.
        apply_fn: ``apply_fn(params, obs [N, ...]) -> Q [N, num_actions]``.
        batch: a :class:`PQNBatch` of ``[N]`` samples; ``target`` is treated as a constant.

    Returns:
        ``(loss, metrics)`` with float32 scalars ``td_loss`` (= loss), ``q_mean`` (mean Q(s, a))
        and ``td_abs_mean`` (mean |Q(s, a) - G|).
    """
    q = apply_fn(params, batch.obs)
    q_taken = jnp.take_along_axis(q, batch.action.astype(jnp.int32)[..., None], axis=-1)[..., 0]
    td = q_taken - jax.lax.stop_gradient(batch.target)
    loss = 0.5 * jnp.mean(jnp.square(td))
    return loss, {"td_loss": loss, "q_mean": jnp.mean(q_taken), "td_abs_mean": jnp.mean(jnp.abs(td))}


def make_pqn(config: PQNConfig, env: Any, env_params: Any, axis_name: str | None = None) -> Agent:
    """Builds PQN's per-device program for a discrete-action ``env`` (see the module docstring): the
    on-policy skeleton (:func:`~rljax.agents.onpolicy.make_onpolicy_agent`) with an epsilon-greedy
    behaviour policy and epochs of minibatches on Q(lambda) targets.

    Args:
        config: the config.
        env: a single, unbatched env (rljax or gymnax contract) with ``Discrete`` actions.
        env_params: its params.
        axis_name: the device axis name when data-parallel, else None.
    """
    num_actions = discrete_actions(env, env_params, "PQN")
    layout = observation_layout(config, env, env_params, "PQN")
    if config.recurrent:
        network = RecurrentQNetwork(num_actions=num_actions, hidden_sizes=config.hidden_sizes,
                                    activation=config.activation, layer_norm=config.layer_norm, obs_layout=layout,
                                    cnn_channels=config.cnn_channels, memory=config.memory,
                                    memory_size=config.memory_size)
    else:
        network = QNetwork(num_actions=num_actions, hidden_sizes=config.hidden_sizes, activation=config.activation,
                           layer_norm=config.layer_norm, obs_layout=layout, cnn_channels=config.cnn_channels)
    q_fn = network.apply

    def schedule(ctx: OnPolicyContext) -> dict[str, jax.Array]:
        hyperparams = ctx.hyperparams
        frac = ctx.fraction(hyperparams.exploration_fraction)
        return {"epsilon": hyperparams.epsilon_start + frac * (hyperparams.epsilon_end - hyperparams.epsilon_start)}

    def learn(params: Any, opt_state: Any, traj: Any, key: jax.Array, ctx: OnPolicyContext):
        hyperparams = ctx.hyperparams
        if config.recurrent:  # the bootstrap values from the memory after each step of the replayed rollout
            q_next = bootstrap_outputs(q_fn, params, replay(q_fn, params, traj)[0], traj.next_obs)
        else:  # one batched pass over the true next observations [T, B] for every bootstrap value
            q_next = q_fn(params, traj.next_obs)
        boot = jnp.max(masked_actions(q_next, legal_action_mask(traj.next_obs)), axis=-1)  # over legal actions
        targets = q_lambda_targets(hyperparams.reward_scale * traj.reward, boot, traj.terminated, traj.truncated,
                                   hyperparams.gamma, hyperparams.q_lambda)
        if config.recurrent:
            length = sequence_length(config)
            batch = PQNBatch(sequences(traj, length), to_sequences(traj.action, length), to_sequences(targets, length))
            loss_apply = sequence_apply(q_fn)
        else:
            flat = lambda x: x.reshape((-1,) + x.shape[2:])  # noqa: E731
            batch, loss_apply = PQNBatch(jax.tree.map(flat, traj.obs), flat(traj.action), flat(targets)), q_fn
        params, opt_state, metrics = minibatch_epochs(
            lambda p, mb: pqn_loss(p, loss_apply, mb), params, opt_state, ctx.optimizer, batch, key,
            num_epochs=config.num_epochs, num_minibatches=config.num_minibatches, axis_name=axis_name)
        return params, opt_state, {**metrics, "target_mean": pmean(jnp.mean(targets), axis_name)}

    hooks = _recurrent_hooks(network) if config.recurrent else _hooks(network)
    return make_onpolicy_agent(config, env, env_params, axis_name, OnPolicyHooks(
        optimizer=lambda hyperparams, lr: make_optimizer(lr, hyperparams.max_grad_norm), learn=learn,
        exploration=lambda hyperparams: hyperparams.epsilon_end, schedule=schedule, **hooks),
        anneal_lr=config.anneal_lr)


def _hooks(network: QNetwork) -> dict[str, Any]:
    """The acting hooks of a memoryless Q-network: epsilon-greedy on ``Q(obs)``."""
    q_fn = network.apply

    def epsilon_greedy(params: Any, ctx: OnPolicyContext):
        def act(key: jax.Array, obs: jax.Array) -> tuple[jax.Array, tuple]:
            return greedy_or_epsilon(q_fn(params, obs), key, ctx.values["epsilon"], deterministic=False,
                                     legal=legal_action_mask(obs)), ()
        return act

    return dict(init_params=network.init, behaviour=epsilon_greedy,
                act=lambda params, obs, key, epsilon, deterministic: greedy_or_epsilon(
                    q_fn(params, obs), key, epsilon, deterministic, legal_action_mask(obs)))


def _recurrent_hooks(network: RecurrentQNetwork) -> dict[str, Any]:
    """The acting hooks of a recurrent Q-network: epsilon-greedy on the Q-values of one
    :func:`~rljax.agents.recurrent.memory_step` per env step."""
    q_fn = network.apply
    initial, init_params = memory_init(network)

    def epsilon_greedy(params: Any, ctx: OnPolicyContext):
        def act(key: jax.Array, obs: Any, memory: Any) -> tuple[jax.Array, tuple, Any]:
            memory, q = memory_step(q_fn, params, memory, obs)
            return greedy_or_epsilon(q, key, ctx.values["epsilon"], deterministic=False,
                                     legal=legal_action_mask(obs)), (), memory
        return act

    def act(params: Any, obs: Any, key: Any, epsilon: jax.Array, deterministic: bool, memory: Any):
        memory, q = memory_step(q_fn, params, memory, obs)
        return greedy_or_epsilon(q, key, epsilon, deterministic, legal_action_mask(obs)), memory

    return dict(init_params=init_params, behaviour=epsilon_greedy, act=act, initial_memory=initial)


register("pqn", PQNConfig, make_pqn, fits=lambda env, env_params: discrete_actions(env, env_params, "PQN"))
