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
from flax import struct

from rljax.agents import register
from rljax.agents.base import Agent, UpdateOutput, desync, make_env_stack, pmean, space_dims
from rljax.agents.offpolicy import (Collector, ReplayItem, collect, init_collector, make_replay, normalize_items,
                                    observation_stack, periodic, polyak, replay_learning)
from rljax.config import RunConfig, _require, field, make_hyperparams
from rljax.networks import QNetwork

__all__ = ["DQNConfig", "DQNHyperParams", "DQNState", "dqn_loss", "make_dqn"]


@dataclasses.dataclass(frozen=True)
class DQNConfig(RunConfig):
    """DQN's configuration (defaults: PureJaxRL's CartPole-v1 DQN, which solves it in 5e5 steps)."""

    num_envs: int = field(10, "parallel environments, over all devices")
    # ----- structural -----
    num_steps: int = field(1, "env steps per env between learning phases")
    gradient_steps: int = field(1, "gradient steps per update (update-to-data ratio = this / (num_envs*num_steps))")
    batch_size: int = field(128, "replay samples per gradient step, over all devices")
    buffer_size: int = field(10_000, "replay capacity, over all devices (each device holds a shard)")
    learning_starts: int = field(10_000, "env steps collected before learning begins")
    target_update_interval: int = field(500, "env steps between target-network updates")
    hidden_sizes: tuple[int, ...] = field((120, 84), "Q-network MLP widths")
    activation: str = field("relu", "hidden activation")
    double_q: bool = field(False, "double Q-learning: online argmax, target value")
    dueling: bool = field(False, "dueling head V + A - mean(A)")
    n_step: int = field(1, "n-step returns (1 = one-step TD)")
    prioritized: bool = field(False, "proportional prioritised replay")
    loss: str = field("mse", "TD loss: 'mse' (0.5 * td^2) or 'huber' (delta 1)")
    anneal_lr: bool = field(False, "decay the learning rate linearly to 0 over the run")
    normalize_obs: bool = field(False, "normalise observations by running mean/std (replay stores raw "
                                       "observations, normalised when sampled)")

    # ----- sweepable hyperparameters (traced) -----
    learning_rate: float = field(2.5e-4, "Adam step size", sweepable=True)
    gamma: float = field(0.99, "discount factor", sweepable=True)
    tau: float = field(1.0, "target update rate: 1 = hard copy, < 1 = Polyak averaging", sweepable=True)
    epsilon_start: float = field(1.0, "initial exploration rate", sweepable=True)
    epsilon_end: float = field(0.05, "final exploration rate", sweepable=True)
    exploration_fraction: float = field(0.5, "fraction of the run over which epsilon decays", sweepable=True)
    max_grad_norm: float = field(10.0, "global-norm gradient clipping threshold", sweepable=True)
    priority_alpha: float = field(0.6, "prioritisation exponent (prioritized replay)", sweepable=True)
    priority_beta_start: float = field(0.4, "initial importance-sampling exponent, annealed to 1",
                                       sweepable=True)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raises ``ValueError`` naming any inconsistent value and what would be valid.

        Every field's type first (:func:`~rljax.config.check_types`), then its range.
        """
        from rljax.config import (MAX_ENV_STEPS, check_choice, check_env_steps_per_update, check_floats, check_ints,
                                  check_sizes)
        from rljax.networks import ACTIVATIONS

        self.validate_run()
        check_ints(self, ("num_steps", "gradient_steps", "batch_size", "n_step"))
        # Replay slots and thresholds compared with the int32 env-step counters share their bound.
        why = "(2**30: the replay buffer's and the env steps' int32 counters)"
        check_ints(self, ("buffer_size", "target_update_interval"), 1, MAX_ENV_STEPS, why=why)
        check_ints(self, ("learning_starts",), 0, MAX_ENV_STEPS, why=why)
        check_env_steps_per_update(self.env_steps_per_update, "num_envs * num_steps")
        for name in ("batch_size", "buffer_size"):
            v = getattr(self, name)
            _require(v % self.num_devices == 0,
                     f"{name}={v} is not divisible by num_devices={self.num_devices}")
        _require(self.buffer_size // self.num_devices >= self.num_envs // self.num_devices * self.num_steps,
                 f"buffer_size={self.buffer_size} cannot hold one update of num_envs * num_steps = "
                 f"{self.num_envs * self.num_steps} transitions")
        check_sizes(self, "hidden_sizes")
        check_choice(self, "activation", ACTIVATIONS)
        check_choice(self, "loss", ("mse", "huber"))
        check_floats(self, ("learning_rate", "max_grad_norm"), 0, low_open=True)
        check_floats(self, ("gamma", "epsilon_start", "epsilon_end", "exploration_fraction", "priority_beta_start"),
                     0, 1)
        check_floats(self, ("tau",), 0, 1, low_open=True)
        check_floats(self, ("priority_alpha",), 0)

    @property
    def env_steps_per_update(self) -> int:
        return self.num_envs * self.num_steps

    def hyperparams(self) -> "DQNHyperParams":
        return make_hyperparams(self, DQNHyperParams)


class DQNHyperParams(struct.PyTreeNode):
    """Sweepable hyperparameters, float32 scalars in the train state (see :class:`DQNConfig`)."""

    learning_rate: jax.Array
    gamma: jax.Array
    tau: jax.Array
    epsilon_start: jax.Array
    epsilon_end: jax.Array
    exploration_fraction: jax.Array
    max_grad_norm: jax.Array
    priority_alpha: jax.Array
    priority_beta_start: jax.Array


class DQNLearner(NamedTuple):
    """What a gradient step changes: online params and optimiser state."""

    params: Any
    opt_state: Any


class DQNState(struct.PyTreeNode):
    """Everything a DQN run needs to continue (one device's view).

    Attributes:
        learner: online params and Adam state.
        target_params: target-network params.
        collector: env state (with the observation statistics when ``normalize_obs``), raw
            observations and the n-step tail.
        buffer: this device's replay shard of raw observations (cursor, size, and priorities when
            prioritised).
        key: this device's PRNG key.
        hparams: traced hyperparameters.
        env_params: the env params (traced; a sweep may vary them per member).
        updates: int32 updates done.
        num_updates: int32 updates in the whole run (schedules).
    """

    learner: DQNLearner
    target_params: Any
    collector: Collector
    buffer: Any
    key: jax.Array
    hparams: DQNHyperParams
    env_params: Any
    updates: jax.Array
    num_updates: jax.Array


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
    total = jnp.sum(weights * per_item) / jnp.maximum(jnp.sum(weights > 0), 1.0)
    metrics = {"td_loss": total, "q_mean": jnp.mean(q_taken), "td_abs_mean": jnp.mean(jnp.abs(td))}
    return total, (jnp.abs(td), metrics)


def make_dqn(config: DQNConfig, env: Any, env_params: Any, axis_name: str | None = None) -> Agent:
    """Builds DQN's per-device program for a discrete-action ``env``."""
    discrete, num_actions = space_dims(env.action_space(env_params))
    if not discrete:
        raise ValueError(f"DQN needs a Discrete action space; {getattr(env, 'name', env)} has "
                         f"{env.action_space(env_params)} (use SAC for Box actions)")
    d = config.num_devices
    num_local = config.num_envs // d
    network = QNetwork(num_actions=num_actions, hidden_sizes=config.hidden_sizes,
                       activation=config.activation, dueling=config.dueling)
    venv, normalize = observation_stack(make_env_stack(env, env_params, num_local, axis_name=axis_name),
                                        config.normalize_obs, axis_name)
    replay = make_replay(config.buffer_size // d, config.prioritized)
    apply_fn = network.apply
    steps_per_update = config.env_steps_per_update

    def optimizer(hp: DQNHyperParams, lr: jax.Array) -> optax.GradientTransformation:
        return optax.chain(optax.clip_by_global_norm(hp.max_grad_norm), optax.scale_by_adam(),
                           optax.scale(-lr))

    def epsilon_greedy(params: Any, epsilon: jax.Array):
        def act(key: jax.Array, obs: jax.Array):
            k_explore, k_action = jax.random.split(key)
            greedy = jnp.argmax(apply_fn(params, obs), axis=-1).astype(jnp.int32)
            random = jax.random.randint(k_action, greedy.shape, 0, num_actions, jnp.int32)
            explore = jax.random.uniform(k_explore, greedy.shape) < epsilon
            return jnp.where(explore, random, greedy), ()
        return act

    def schedule_fraction(state: DQNState, span: jax.Array) -> jax.Array:
        total = state.num_updates.astype(jnp.float32) * steps_per_update
        done = state.updates.astype(jnp.float32) * steps_per_update
        return jnp.clip(done / jnp.maximum(span * total, 1.0), 0.0, 1.0)

    def init(key: jax.Array, device_index: Any, num_updates: int, hp: DQNHyperParams, env_params: Any) -> DQNState:
        k_params, k_run = jax.random.split(key)
        k_env, k_state = jax.random.split(jax.random.fold_in(k_run, device_index))
        collector = init_collector(venv, env_params, _shape_policy(num_actions), k_env, config.n_step)
        params = network.init(k_params, collector.obs[:1])
        opt_state = optimizer(hp, hp.learning_rate).init(params)
        example = ReplayItem(obs=collector.obs[0], action=jnp.zeros((), jnp.int32), reward=jnp.float32(0),
                             discount=jnp.float32(0), next_obs=collector.obs[0], valid=jnp.bool_(False))
        buffer = replay.init(example, hp.priority_alpha)
        return DQNState(learner=DQNLearner(params, opt_state), target_params=params, collector=collector,
                        buffer=buffer, key=k_state, hparams=hp, env_params=env_params, updates=jnp.int32(0),
                        num_updates=jnp.int32(num_updates))

    def update(state: DQNState) -> tuple[DQNState, UpdateOutput]:
        hp = state.hparams
        key, k_collect, k_learn = jax.random.split(state.key, 3)
        frac = schedule_fraction(state, hp.exploration_fraction)
        epsilon = hp.epsilon_start + frac * (hp.epsilon_end - hp.epsilon_start)
        collector, items, episodes = collect(venv, state.env_params, epsilon_greedy(state.learner.params, epsilon),
                                             state.collector, k_collect, config.num_steps, config.n_step,
                                             hp.gamma, observe=normalize)
        buffer = replay.add(state.buffer, items)

        steps_before = state.updates * steps_per_update
        steps_after = steps_before + steps_per_update
        progress = schedule_fraction(state, jnp.float32(1.0))
        lr = hp.learning_rate * (1.0 - progress) if config.anneal_lr else hp.learning_rate
        beta = hp.priority_beta_start + progress * (1.0 - hp.priority_beta_start)
        tx = optimizer(hp, lr)

        def learn_step(learner: DQNLearner, batch: ReplayItem, weights: jax.Array, key: jax.Array):
            del key
            grads, (td_abs, m) = jax.grad(dqn_loss, has_aux=True)(
                learner.params, state.target_params, apply_fn, batch, weights,
                double_q=config.double_q, loss=config.loss)
            grads = pmean(grads, axis_name)
            m = {**pmean(m, axis_name), "grad_norm": optax.tree.norm(grads)}
            updates, opt_state = tx.update(grads, learner.opt_state, learner.params)
            return DQNLearner(optax.apply_updates(learner.params, updates), opt_state), td_abs, m

        active = steps_after >= config.learning_starts
        learner, buffer, metrics = replay_learning(
            learn_step, state.learner, replay, buffer, k_learn, gradient_steps=config.gradient_steps,
            batch_size=config.batch_size // d, beta=beta, active=active,
            # Replay holds raw observations: normalised with the statistics of now.
            prepare=lambda b: normalize_items(b, lambda x: normalize(collector.env_state, x)))

        sync = periodic(steps_before, steps_after, config.target_update_interval) & active
        target_params = jax.tree.map(lambda new, old: jnp.where(sync, new, old),
                                     polyak(learner.params, state.target_params, hp.tau), state.target_params)
        metrics = {**metrics, "epsilon": epsilon, "buffer_size": replay.size(buffer).astype(jnp.float32) * d,
                   "learning_rate": lr, "param_desync": desync(learner.params, axis_name)}
        new_state = state.replace(learner=learner, target_params=target_params, collector=collector,
                                  buffer=buffer, key=key, updates=state.updates + 1)
        return new_state, UpdateOutput(metrics, episodes)

    def act(state: DQNState, obs: jax.Array, key: jax.Array) -> jax.Array:
        # obs: raw env observations; with normalize_obs, normalised with the train state's statistics.
        del key
        obs = normalize(state.collector.env_state, obs)
        return jnp.argmax(apply_fn(state.learner.params, obs), axis=-1).astype(jnp.int32)

    return Agent(config=config, init=init, update=update, act=act, env_steps_per_update=steps_per_update,
                 params=lambda s: s.learner.params)


def _shape_policy(num_actions: int):
    """A policy with the right output shapes, for allocating the n-step tail before params exist."""
    def act(key: jax.Array, obs: jax.Array):
        return jax.random.randint(key, obs.shape[:1], 0, num_actions, jnp.int32), ()
    return act


register("dqn", DQNConfig, make_dqn)
