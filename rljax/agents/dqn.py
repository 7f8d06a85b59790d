"""DQN (Mnih et al. 2015) with its common variants as config fields, not copied files.

* ``double_q``: the online network picks the bootstrap action, the target network values it
  (van Hasselt et al. 2016).
* ``dueling``: ``Q = V + A - mean(A)`` (Wang et al. 2016).
* ``n_step``: n-step returns, cut at episode ends; truncation bootstraps from the final observation.
* ``prioritized``: proportional prioritised replay with annealed importance weights
  (Schaul et al. 2016).
* ``tau`` / ``target_update_interval``: hard (``tau = 1``) or Polyak target updates.

One update collects ``num_steps`` steps from each of ``num_envs`` envs (epsilon-greedy), adds them to
replay, then takes ``gradient_steps`` gradient steps. Defaults follow PureJaxRL's CartPole DQN.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from rljax.agents import register
from rljax.agents.base import (Agent, discrete_actions, gradient_step, greedy_or_epsilon, make_optimizer,
                               observation_layout, pmean)
from rljax.agents.offpolicy import (OffPolicyConfig, OffPolicyHooks, OffPolicyState, ReplayItem, UpdateContext,
                                    make_offpolicy_agent, masked_mean, periodic, polyak)
from rljax.core.config import MAX_STEPS_PER_UPDATE, check_choice, check_floats, check_ints, check_sizes, field, hyperparams_class
from rljax.core.networks import ACTIVATIONS, QNetwork

__all__ = ["DQNConfig", "DQNHyperParams", "DQNLearner", "DQNState", "dqn_loss", "make_dqn"]


@dataclasses.dataclass(frozen=True)
class DQNConfig(OffPolicyConfig):
    """DQN's configuration (defaults: PureJaxRL's CartPole-v1 DQN, which solves it in 5e5 steps).

    The replay, schedule and shared hyperparameter fields come from
    :class:`~rljax.agents.offpolicy.OffPolicyConfig`.
    """

    num_envs: int = field(10, "parallel environments, over all devices")
    # ----- structural -----
    batch_size: int = field(128, "replay samples per gradient step, over all devices")
    buffer_size: int = field(10_000, "replay capacity, over all devices (each device holds a shard)")
    learning_starts: int = field(10_000, "env steps collected before learning begins")
    target_update_interval: int = field(500, "env steps between target-network updates")
    hidden_sizes: tuple[int, ...] = field((120, 84), "Q-network MLP widths (after the observation encoder)")
    activation: str = field("relu", "hidden activation")
    double_q: bool = field(False, "double Q-learning: online argmax, target value")
    dueling: bool = field(False, "dueling head V + A - mean(A)")
    loss: str = field("mse", "TD loss: 'mse' (0.5 * td^2) or 'huber' (delta 1)")
    anneal_lr: bool = field(False, "decay the learning rate linearly to 0 over the run")

    # ----- sweepable hyperparameters (traced) -----
    learning_rate: float = field(2.5e-4, "Adam step size", sweepable=True)
    tau: float = field(1.0, "target update rate: 1 = hard copy, < 1 = Polyak averaging", sweepable=True)
    epsilon_start: float = field(1.0, "initial exploration rate", sweepable=True)
    epsilon_end: float = field(0.05, "final exploration rate", sweepable=True)
    exploration_fraction: float = field(0.5, "fraction of the run over which epsilon decays", sweepable=True)

    def validate(self) -> None:
        """The off-policy checks (:meth:`OffPolicyConfig.validate`, types first), then DQN's ranges."""
        super().validate()
        check_ints(self, ("target_update_interval",), 1, MAX_STEPS_PER_UPDATE,
                   why="(2**30: the modulus of the exact remainder that times the target copies)")
        check_sizes(self, "hidden_sizes")
        check_choice(self, "activation", ACTIVATIONS)
        check_choice(self, "loss", ("mse", "huber"))
        check_floats(self, ("learning_rate",), 0, low_open=True)
        check_floats(self, ("epsilon_start", "epsilon_end", "exploration_fraction"), 0, 1)


DQNHyperParams = hyperparams_class(DQNConfig)


class DQNLearner(NamedTuple):
    """DQN's learning state (the ``learner`` of its :class:`DQNState`).

    Attributes:
        params: online Q-network params.
        opt_state: their optimiser state.
        target_params: target-network params (fixed during an update's gradient steps; copied or
            Polyak-averaged from ``params`` every ``target_update_interval`` env steps).
    """

    params: Any
    opt_state: Any
    target_params: Any


DQNState = OffPolicyState
"""DQN's train state: the shared :class:`~rljax.agents.offpolicy.OffPolicyState` with a
:class:`DQNLearner` as ``learner``."""


def dqn_loss(params: Any, target_params: Any, apply_fn: Any, items: ReplayItem, weights: jax.Array, *,
             double_q: bool, loss: str) -> tuple[jax.Array, tuple[jax.Array, dict[str, jax.Array]]]:
    """The (importance-weighted) TD loss.

    ``y = R + discount * Q_target(s', a*)`` with ``a* = argmax_a Q_target(s', a)`` or, with
    ``double_q``, ``argmax_a Q_online(s', a)``; ``discount`` is ``gamma^m`` (0 after termination),
    so truncated episodes bootstrap from their final observation. ``L = mean(w * l(Q(s, a) - y))``
    with ``l`` = ``0.5 x^2`` or Huber (delta 1).

    Args:
        params: online params.
        target_params: target params.
        apply_fn: ``apply_fn(params, obs) -> Q [N, num_actions]``.
        items: a batch of :class:`ReplayItem` ``[N]``.
        weights: float32 ``[N]`` importance weights (0 for invalid items).
        double_q: double Q-learning.
        loss: ``"mse"`` or ``"huber"``.

    Returns:
        ``(loss, (|td| [N], metrics))``.
    """
    q_next_target = apply_fn(target_params, items.next_obs)
    if double_q:
        a_star = jnp.argmax(apply_fn(params, items.next_obs), axis=-1)
    else:
        a_star = jnp.argmax(q_next_target, axis=-1)
    v_next = jnp.take_along_axis(q_next_target, a_star[:, None], axis=-1)[:, 0]
    target = jax.lax.stop_gradient(items.reward + items.discount * v_next)
    q = apply_fn(params, items.obs)
    q_taken = jnp.take_along_axis(q, items.action.astype(jnp.int32)[:, None], axis=-1)[:, 0]
    td = q_taken - target
    per_item = 0.5 * jnp.square(td) if loss == "mse" else optax.huber_loss(td, delta=1.0)
    total = masked_mean(per_item, weights)
    metrics = {"td_loss": total, "q_mean": jnp.mean(q_taken), "td_abs_mean": jnp.mean(jnp.abs(td))}
    return total, (jnp.abs(td), metrics)


def make_dqn(config: DQNConfig, env: Any, env_params: Any, axis_name: str | None = None) -> Agent:
    """Builds DQN's per-device program for a discrete-action ``env`` (the off-policy skeleton,
    :func:`~rljax.agents.offpolicy.make_offpolicy_agent`, with epsilon-greedy acting, the TD loss
    :func:`dqn_loss` and periodic target updates)."""
    num_actions = discrete_actions(env, env_params, "DQN")
    network = QNetwork(num_actions=num_actions, hidden_sizes=config.hidden_sizes, activation=config.activation,
                       dueling=config.dueling, obs_layout=observation_layout(config, env, env_params, "DQN"),
                       cnn_channels=config.cnn_channels)
    apply_fn = network.apply

    def optimizer(hyperparams: DQNHyperParams, learning_rate: jax.Array) -> optax.GradientTransformation:
        return make_optimizer(learning_rate, hyperparams.max_grad_norm)

    def init_learner(key: jax.Array, obs: jax.Array, hyperparams: DQNHyperParams) -> DQNLearner:
        params = network.init(key, obs)
        return DQNLearner(params, optimizer(hyperparams, hyperparams.learning_rate).init(params), params)

    def schedule(ctx: UpdateContext) -> dict[str, jax.Array]:
        # epsilon decays linearly over the first exploration_fraction of the run; lr to 0 over all of it.
        hyperparams = ctx.hyperparams
        frac = ctx.fraction(hyperparams.exploration_fraction)
        epsilon = hyperparams.epsilon_start + frac * (hyperparams.epsilon_end - hyperparams.epsilon_start)
        lr = hyperparams.learning_rate * (1.0 - ctx.progress) if config.anneal_lr else hyperparams.learning_rate
        return {"epsilon": epsilon, "learning_rate": lr}

    def epsilon_greedy(learner: DQNLearner, ctx: UpdateContext):
        def act(key: jax.Array, obs: jax.Array) -> jax.Array:
            return greedy_or_epsilon(apply_fn(learner.params, obs), key, ctx.values["epsilon"], deterministic=False)
        return act

    def learn_step(learner: DQNLearner, batch: ReplayItem, weights: jax.Array, key: jax.Array, ctx: UpdateContext):
        del key
        params, opt_state, (td_abs, m), grad_norm = gradient_step(
            dqn_loss, learner.params, learner.opt_state, optimizer(ctx.hyperparams, ctx.values["learning_rate"]),
            learner.target_params, apply_fn, batch, weights, axis_name=axis_name,
            double_q=config.double_q, loss=config.loss)
        m = {**pmean(m, axis_name), "grad_norm": grad_norm}
        return learner._replace(params=params, opt_state=opt_state), td_abs, m

    def update_target(learner: DQNLearner, ctx: UpdateContext):
        sync = periodic(ctx.steps_before, ctx.steps_after, config.target_update_interval) & ctx.active
        target = jax.tree.map(lambda new, old: jnp.where(sync, new, old),
                              polyak(learner.params, learner.target_params, ctx.hyperparams.tau),
                              learner.target_params)
        return learner._replace(target_params=target), {}

    return make_offpolicy_agent(config, env, env_params, axis_name, OffPolicyHooks(
        example_action=jnp.zeros((), jnp.int32), init_learner=init_learner, behaviour=epsilon_greedy,
        learn_step=learn_step, policy_params=lambda learner, hyperparams: (learner.params, hyperparams.epsilon_end),
        act=lambda params, obs, key, epsilon, deterministic: greedy_or_epsilon(apply_fn(params, obs), key, epsilon,
                                                                              deterministic),
        params_of=lambda learner: learner.params, schedule=schedule,
        after_learning=update_target))


register("dqn", DQNConfig, make_dqn, fits=lambda env, env_params: discrete_actions(env, env_params, "DQN"))
