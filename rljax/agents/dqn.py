"""DQN (Mnih et al. 2015) with its common variants as config fields, not copied files.

* ``double_q``: the online network picks the bootstrap action, the target network values it
  (van Hasselt et al. 2016).
* ``dueling``: ``Q = V + A - mean(A)`` (Wang et al. 2016).
* ``n_step``: n-step returns, cut at episode ends; truncation bootstraps from the final observation.
* ``prioritized``: proportional prioritised replay with annealed importance weights
  (Schaul et al. 2016).
* ``tau`` / ``target_update_interval``: hard (``tau = 1``) or Polyak target updates.

* ``noisy``: noisy layers in the torso and heads (Fortunato et al. 2018): exploration from parameter
  noise drawn afresh at every acting step and for each network in every gradient step; the greedy
  policy (evaluation, export) is the noise's mean. Epsilon can then be 0.

One update collects ``num_steps`` steps from each of ``num_envs`` envs (epsilon-greedy), adds them to
replay, then takes ``gradient_steps`` gradient steps. Defaults follow PureJaxRL's CartPole DQN.

The Q-learning skeleton here (:func:`make_q_learner`, :func:`q_learning_loss`) is shared with the
distributional learners, which differ only in their :class:`QHead`: what the network outputs per
action and the loss on it (:mod:`rljax.agents.c51`, :mod:`rljax.agents.qrdqn`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
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
from rljax.core.networks import ACTIVATIONS, NOISE, QNetwork
from rljax.env import legal_action_mask, masked_actions

__all__ = ["DQNConfig", "DQNHyperParams", "DQNLearner", "DQNState", "QHead", "expected_value_head", "q_learning_loss",
           "dqn_loss", "make_q_learner", "make_dqn"]


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
    noisy: bool = field(False, "noisy layers (factorised Gaussian, Fortunato et al. 2018) explore; epsilon can be 0")

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


class QHead(NamedTuple):
    """How a Q-learner reads its network: the outputs per action and the loss on them.

    Attributes:
        num_atoms: network outputs per action (1: the action value itself; :class:`QNetwork`'s
            ``num_atoms``).
        q_values: ``q_values(out) -> Q``: outputs ``[..., A]`` (or ``[..., A, K]``) -> float ``[..., A]``,
            the expected return the greedy policy maximises.
        td: ``td(taken, next_taken, items) -> (per_item [N], priority [N], metrics)``: the loss of each
            item from the online outputs of its action ``taken`` ``[N(, K)]`` and the target network's
            outputs of the bootstrap action ``next_taken`` ``[N(, K)]`` (gradients stopped), with
            ``items.reward`` and ``items.discount`` (``gamma^m``, 0 after a termination); ``priority``
            is the item's new replay priority.
    """

    num_atoms: int
    q_values: Callable[[jax.Array], jax.Array]
    td: Callable[[jax.Array, jax.Array, ReplayItem], tuple[jax.Array, jax.Array, dict[str, jax.Array]]]


def expected_value_head(loss: str) -> QHead:
    """DQN's head: one output per action, ``td = Q(s, a) - (R + discount * Q_target(s', a*))``, the
    loss ``0.5 td^2`` (``"mse"``) or Huber with delta 1 (``"huber"``), priority ``|td|``."""
    def td(taken: jax.Array, next_taken: jax.Array, items: ReplayItem):
        delta = taken - (items.reward + items.discount * next_taken)
        per_item = 0.5 * jnp.square(delta) if loss == "mse" else optax.huber_loss(delta, delta=1.0)
        return per_item, jnp.abs(delta), {"q_mean": jnp.mean(taken), "td_abs_mean": jnp.mean(jnp.abs(delta))}

    return QHead(1, lambda q: q, td)


def _apply(apply_fn: Any, params: Any, obs: Any, key: jax.Array | None) -> jax.Array:
    return apply_fn(params, obs) if key is None else apply_fn(params, obs, key)


def q_learning_loss(params: Any, target_params: Any, apply_fn: Any, items: ReplayItem, weights: jax.Array, *,
                    double_q: bool, head: QHead, keys: tuple[Any, Any, Any] = (None, None, None)
                    ) -> tuple[jax.Array, tuple[jax.Array, dict[str, jax.Array]]]:
    """The (importance-weighted) loss of a Q-learner with ``head``.

    The bootstrap action is ``a* = argmax_a q_values(out_target(s'))`` or, with ``double_q``,
    ``argmax_a q_values(out_online(s'))``, over the actions legal in ``s'`` when its observation has a
    legal-action mask (:func:`rljax.env.legal_action_mask`); the head's ``td`` compares the online
    outputs of the taken action with the target outputs of ``a*`` (gradients stopped);
    ``L = mean(w * per_item)`` over the items with nonzero weight. ``discount`` is ``gamma^m`` (0 after
    termination), so truncated episodes bootstrap from their final observation.

    Args:
        params: online params.
        target_params: target params.
        apply_fn: ``apply_fn(params, obs[, noise_key]) -> out [N, A(, K)]``.
        items: a batch of :class:`ReplayItem` ``[N]``.
        weights: float32 ``[N]`` importance weights (0 for invalid items).
        double_q: double Q-learning.
        head: the :class:`QHead`.
        keys: noise keys for the target network on ``s'``, the online one on ``s'`` and on ``s``
            (noisy networks); None for none.

    Returns:
        ``(loss, (priority [N], metrics))``; metrics hold ``td_loss`` (the loss) and the head's.
    """
    k_target, k_next, k_online = keys
    legal = legal_action_mask(items.next_obs)
    out_next_target = _apply(apply_fn, target_params, items.next_obs, k_target)
    if double_q:
        a_star = jnp.argmax(masked_actions(head.q_values(_apply(apply_fn, params, items.next_obs, k_next)), legal),
                            axis=-1)
    else:
        a_star = jnp.argmax(masked_actions(head.q_values(out_next_target), legal), axis=-1)
    next_taken = jax.lax.stop_gradient(_take(out_next_target, a_star))
    out = _apply(apply_fn, params, items.obs, k_online)
    per_item, priority, metrics = head.td(_take(out, items.action.astype(jnp.int32)), next_taken, items)
    total = masked_mean(per_item, weights)
    return total, (priority, {"td_loss": total, **metrics})


def _take(out: jax.Array, action: jax.Array) -> jax.Array:
    """``out[n, action[n]]``: ``[N, A]`` -> ``[N]``, ``[N, A, K]`` -> ``[N, K]``."""
    index = action.reshape(action.shape + (1,) * (out.ndim - 1))
    return jnp.take_along_axis(out, index, axis=1)[:, 0]


def dqn_loss(params: Any, target_params: Any, apply_fn: Any, items: ReplayItem, weights: jax.Array, *,
             double_q: bool, loss: str) -> tuple[jax.Array, tuple[jax.Array, dict[str, jax.Array]]]:
    """DQN's TD loss: :func:`q_learning_loss` with :func:`expected_value_head`.

    ``y = R + discount * Q_target(s', a*)`` with ``a* = argmax_a Q_target(s', a)`` or, with
    ``double_q``, ``argmax_a Q_online(s', a)``; ``L = mean(w * l(Q(s, a) - y))`` with ``l`` =
    ``0.5 x^2`` or Huber (delta 1). ``apply_fn(params, obs) -> Q [N, num_actions]``.

    Returns:
        ``(loss, (|td| [N], metrics))``.
    """
    return q_learning_loss(params, target_params, apply_fn, items, weights, double_q=double_q,
                           head=expected_value_head(loss))


def make_q_learner(config: DQNConfig, env: Any, env_params: Any, axis_name: str | None, head: QHead,
                   name: str) -> Agent:
    """The per-device program of a Q-learner with ``head`` (DQN's, C51's, QR-DQN's): the off-policy
    skeleton (:func:`~rljax.agents.offpolicy.make_offpolicy_agent`) with epsilon-greedy acting on
    ``head.q_values`` (over noisy layers' draws with ``config.noisy``), the loss
    :func:`q_learning_loss` and periodic target updates. ``name`` is the algorithm's, for errors."""
    num_actions = discrete_actions(env, env_params, name)
    network = QNetwork(num_actions=num_actions, hidden_sizes=config.hidden_sizes, activation=config.activation,
                       dueling=config.dueling, obs_layout=observation_layout(config, env, env_params, name),
                       cnn_channels=config.cnn_channels, noisy=config.noisy, num_atoms=head.num_atoms)

    def apply_fn(params: Any, obs: Any, key: jax.Array | None = None) -> jax.Array:
        return network.apply(params, obs) if key is None else network.apply(params, obs, rngs={NOISE: key})

    def optimizer(hyperparams: Any, learning_rate: jax.Array) -> optax.GradientTransformation:
        return make_optimizer(learning_rate, hyperparams.max_grad_norm)

    def init_learner(key: jax.Array, obs: jax.Array, hyperparams: Any) -> DQNLearner:
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
            noise = None
            if config.noisy:  # fresh noise at every acting step, one draw for all of this device's envs
                key, noise = jax.random.split(key)
            return greedy_or_epsilon(head.q_values(apply_fn(learner.params, obs, noise)), key, ctx.values["epsilon"],
                                     deterministic=False, legal=legal_action_mask(obs))
        return act

    def learn_step(learner: DQNLearner, batch: ReplayItem, weights: jax.Array, key: jax.Array, ctx: UpdateContext):
        keys = tuple(jax.random.split(key, 3)) if config.noisy else (None, None, None)
        params, opt_state, (priority, m), grad_norm = gradient_step(
            q_learning_loss, learner.params, learner.opt_state,
            optimizer(ctx.hyperparams, ctx.values["learning_rate"]), learner.target_params, apply_fn, batch, weights,
            axis_name=axis_name, double_q=config.double_q, head=head, keys=keys)
        m = {**pmean(m, axis_name), "grad_norm": grad_norm}
        return learner._replace(params=params, opt_state=opt_state), priority, m

    def update_target(learner: DQNLearner, ctx: UpdateContext):
        sync = periodic(ctx.steps_before, ctx.steps_after, config.target_update_interval) & ctx.active
        target = jax.tree.map(lambda new, old: jnp.where(sync, new, old),
                              polyak(learner.params, learner.target_params, ctx.hyperparams.tau),
                              learner.target_params)
        return learner._replace(target_params=target), {}

    def act(params: Any, obs: Any, key: Any, epsilon: jax.Array, deterministic: bool) -> jax.Array:
        # The policy outside training: greedy on the noise's mean (evaluation, export); exploring, one draw of
        # the noise for the batch and then epsilon-greedy, as the behaviour policy acts in training.
        noise = None
        if config.noisy and not deterministic:
            key, noise = jax.random.split(key)
        return greedy_or_epsilon(head.q_values(apply_fn(params, obs, noise)), key, epsilon, deterministic,
                                 legal_action_mask(obs))

    return make_offpolicy_agent(config, env, env_params, axis_name, OffPolicyHooks(
        example_action=jnp.zeros((), jnp.int32), init_learner=init_learner, behaviour=epsilon_greedy,
        learn_step=learn_step, policy_params=lambda learner, hyperparams: (learner.params, hyperparams.epsilon_end),
        act=act, params_of=lambda learner: learner.params, schedule=schedule, after_learning=update_target))


def make_dqn(config: DQNConfig, env: Any, env_params: Any, axis_name: str | None = None) -> Agent:
    """Builds DQN's per-device program for a discrete-action ``env``: :func:`make_q_learner` with
    :func:`expected_value_head` (the TD loss :func:`dqn_loss`)."""
    return make_q_learner(config, env, env_params, axis_name, expected_value_head(config.loss), "DQN")


register("dqn", DQNConfig, make_dqn, fits=lambda env, env_params: discrete_actions(env, env_params, "DQN"))
