"""PQN: parallelised Q-learning (Gallici et al. 2024, "Simplifying Deep Temporal Difference
Learning", and its reference code ``purejaxql``).

Q-learning without a replay buffer or a target network. One update:

1. a rollout of ``num_steps`` epsilon-greedy steps in each of ``num_envs`` vectorised envs
   (epsilon decays linearly from ``epsilon_start`` to ``epsilon_end`` over the first
   ``exploration_fraction`` of the run);
2. Q(lambda) targets computed backwards over the rollout (:func:`q_lambda_targets`), bootstrapping
   from ``max_a Q(next_obs, a)`` under the current parameters;
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
from flax import struct

from rljax.agents import register
from rljax.agents.base import (Agent, OnPolicyConfig, PolicyParams, greedy_or_epsilon, UpdateOutput, desync, epochs_of_minibatches, gradient_step,
                               discrete_actions, first_obs, make_env_stack, make_optimizer, observation_layout, pmean)
from rljax.core.config import check_choice, check_floats, check_sizes, field, hyperparams_class
from rljax.core.networks import ACTIVATIONS, QNetwork
from rljax.core.rollout import RolloutCarry, rollout

__all__ = ["PQNConfig", "PQNHyperParams", "PQNState", "PQNBatch", "q_lambda_targets", "pqn_loss", "make_pqn"]


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


class PQNState(struct.PyTreeNode):
    """Everything a PQN run needs to continue (one device's view).

    Attributes:
        params: Q-network parameters (identical on every device).
        opt_state: Adam state.
        env_state: the wrapped, batched env state (episode statistics included).
        obs: current observations ``[num_envs_local, *obs_shape]``.
        key: this device's PRNG key.
        hyperparams: traced hyperparameters.
        env_params: the env params (traced, so a sweep can vary them per member).
        updates: int32, updates done so far.
        num_updates: int32, updates in the whole run (epsilon and learning-rate schedules).
    """

    params: Any
    opt_state: Any
    env_state: Any
    obs: Any
    key: jax.Array
    hyperparams: PQNHyperParams
    env_params: Any
    updates: jax.Array
    num_updates: jax.Array


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


# ----- PQN -----


def q_lambda_targets(rewards: jax.typing.ArrayLike, bootstrap: jax.typing.ArrayLike,
                     terminated: jax.typing.ArrayLike, truncated: jax.typing.ArrayLike,
                     gamma: float | jax.Array, lambda_: float | jax.Array) -> jax.Array:
    """Q(lambda) returns over a rollout (Peng's: no trace cut at exploratory actions), episode-boundary aware.

    The recursion of PQN (Gallici et al. 2024, Algorithm 1; ``purejaxql``'s ``_get_target``), with
    ``boot_t = max_a Q(next_obs_t, a)`` the value of the *true* next observation (the final one
    where an episode ended), computed backwards for ``t = T-1 .. 0``::

        G_{T-1} = r_{T-1} + gamma * (1 - term_{T-1}) * boot_{T-1}            (rollout end)
        G_t     = r_t                                           if term_t     (no bootstrap)
        G_t     = r_t + gamma * boot_t                          if trunc_t    (cut, not ended)
        G_t     = r_t + gamma * (lambda * G_{t+1} + (1 - lambda) * boot_t)    otherwise

    Termination wins when both flags are set. In one line, with ``c_t = 1 - (term_t | trunc_t)``
    for ``t < T-1`` and ``c_{T-1} = 0``:
    ``G_t = r_t + gamma * (1 - term_t) * ((1 - lambda c_t) boot_t + lambda c_t G_{t+1})``.
    ``lambda = 0`` gives one-step Q-learning targets ``r + gamma * (1 - term) * boot``;
    ``lambda = 1`` gives the discounted return to the episode end, bootstrapped only where the
    episode was cut (by truncation or the rollout's end).

    Args:
        rewards: float ``[T, B]`` or ``[T]``.
        bootstrap: ``boot_t``, same shape.
        terminated: bool (or 0/1), same shape.
        truncated: bool (or 0/1), same shape.
        gamma: discount, scalar in [0, 1] (Python float or traced).
        lambda_: trace parameter, scalar in [0, 1].

    Returns:
        ``G`` ``[T, B]`` / ``[T]`` float (the dtype of ``rewards``/``bootstrap``, at least float32).
    """
    rewards, bootstrap = jnp.asarray(rewards), jnp.asarray(bootstrap)
    dtype = jnp.promote_types(jnp.result_type(rewards, bootstrap), jnp.float32)
    rewards, bootstrap = rewards.astype(dtype), bootstrap.astype(dtype)
    terminated, truncated = jnp.asarray(terminated, bool), jnp.asarray(truncated, bool)
    if not rewards.shape == bootstrap.shape == terminated.shape == truncated.shape or rewards.ndim not in (1, 2):
        raise ValueError(f"q_lambda_targets: rewards, bootstrap, terminated, truncated must share one shape "
                         f"[T] or [T, B]; got {rewards.shape}, {bootstrap.shape}, {terminated.shape}, "
                         f"{truncated.shape}")
    gamma, lambda_ = jnp.asarray(gamma, dtype), jnp.asarray(lambda_, dtype)
    not_term = 1.0 - terminated.astype(dtype)
    cont = (1.0 - (terminated | truncated).astype(dtype)).at[-1].set(0.0)

    def step(next_return: jax.Array, xs: tuple[jax.Array, ...]) -> tuple[jax.Array, jax.Array]:
        r, boot, nt, c = xs
        g = r + gamma * nt * ((1.0 - lambda_ * c) * boot + lambda_ * c * next_return)
        return g, g

    _, returns = jax.lax.scan(step, jnp.zeros(rewards.shape[1:], dtype), (rewards, bootstrap, not_term, cont),
                              reverse=True)
    return returns


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
    q_taken = jnp.take_along_axis(q, batch.action.astype(jnp.int32)[:, None], axis=-1)[:, 0]
    td = q_taken - jax.lax.stop_gradient(batch.target)
    loss = 0.5 * jnp.mean(jnp.square(td))
    return loss, {"td_loss": loss, "q_mean": jnp.mean(q_taken), "td_abs_mean": jnp.mean(jnp.abs(td))}


def _schedule_fraction(state: PQNState, span: jax.Array) -> jax.Array:
    """``clip(updates / (span * num_updates), 0, 1)``: 1 from the start when the span is empty."""
    total = span * state.num_updates.astype(jnp.float32)
    done = state.updates.astype(jnp.float32)
    return jnp.where(total > 0, jnp.clip(done / jnp.maximum(total, 1e-8), 0.0, 1.0), 1.0)


def make_pqn(config: PQNConfig, env: Any, env_params: Any, axis_name: str | None = None) -> Agent:
    """Builds PQN's per-device program for a discrete-action ``env`` (see the module docstring).

    Args:
        config: the config.
        env: a single, unbatched env (rljax or gymnax contract) with ``Discrete`` actions.
        env_params: its params.
        axis_name: the device axis name when data-parallel, else None.
    """
    num_actions = discrete_actions(env, env_params, "PQN")
    num_local = config.num_envs // config.num_devices
    network = QNetwork(num_actions=num_actions, hidden_sizes=config.hidden_sizes, activation=config.activation,
                       layer_norm=config.layer_norm, obs_layout=observation_layout(config, env, env_params, "PQN"),
                       cnn_channels=config.cnn_channels)
    q_fn = network.apply
    venv = make_env_stack(env, env_params, num_local, axis_name=axis_name)
    local_batch = num_local * config.num_steps

    def init(key: jax.Array, device_index: Any, num_updates: int, hyperparams: PQNHyperParams,
             env_params: Any) -> PQNState:
        k_params, k_run = jax.random.split(key)
        k_env, k_state = jax.random.split(jax.random.fold_in(k_run, device_index))
        obs, env_state = venv.reset(k_env, env_params)
        params = network.init(k_params, first_obs(obs))
        opt_state = make_optimizer(hyperparams.learning_rate, hyperparams.max_grad_norm).init(params)
        return PQNState(params=params, opt_state=opt_state, env_state=env_state, obs=obs, key=k_state,
                        hyperparams=hyperparams, env_params=env_params, updates=jnp.int32(0),
                        num_updates=jnp.int32(num_updates))

    def epsilon_greedy(params: Any, epsilon: jax.Array):
        def act(key: jax.Array, obs: jax.Array) -> tuple[jax.Array, tuple]:
            return greedy_or_epsilon(q_fn(params, obs), key, epsilon, deterministic=False), ()
        return act

    def update(state: PQNState) -> tuple[PQNState, UpdateOutput]:
        hyperparams = state.hyperparams
        key, k_roll, k_learn = jax.random.split(state.key, 3)
        frac = _schedule_fraction(state, hyperparams.exploration_fraction)
        epsilon = hyperparams.epsilon_start + frac * (hyperparams.epsilon_end - hyperparams.epsilon_start)
        carry, traj, episodes = rollout(venv, state.env_params, epsilon_greedy(state.params, epsilon),
                                        RolloutCarry(state.env_state, state.obs), k_roll, config.num_steps)
        # One batched pass over the true next observations [T, B] for every bootstrap value.
        boot = jnp.max(q_fn(state.params, traj.next_obs), axis=-1)
        targets = q_lambda_targets(hyperparams.reward_scale * traj.reward, boot, traj.terminated, traj.truncated,
                                   hyperparams.gamma, hyperparams.q_lambda)
        flat = lambda x: x.reshape((local_batch,) + x.shape[2:])  # noqa: E731
        batch = PQNBatch(jax.tree.map(flat, traj.obs), flat(traj.action), flat(targets))

        progress = state.updates.astype(jnp.float32) / state.num_updates.astype(jnp.float32)
        lr = hyperparams.learning_rate * (1.0 - progress) if config.anneal_lr else hyperparams.learning_rate
        optimizer = make_optimizer(lr, hyperparams.max_grad_norm)

        def step(c: tuple[Any, Any], mb: PQNBatch):
            params, opt_state, m, grad_norm = gradient_step(pqn_loss, *c, optimizer, q_fn, mb, axis_name=axis_name)
            return (params, opt_state), {**pmean(m, axis_name), "grad_norm": grad_norm}

        (params, opt_state), metrics = epochs_of_minibatches(
            step, (state.params, state.opt_state), batch, k_learn, num_epochs=config.num_epochs,
            num_minibatches=config.num_minibatches)
        metrics = {**metrics, "epsilon": epsilon, "learning_rate": lr,
                   "target_mean": pmean(jnp.mean(targets), axis_name), "param_desync": desync(params, axis_name)}
        new_state = state.replace(params=params, opt_state=opt_state, env_state=carry.env_state, obs=carry.obs,
                                  key=key, updates=state.updates + 1)
        return new_state, UpdateOutput(metrics, episodes)

    def policy(pp: PolicyParams, obs: jax.Array, key: Any, deterministic: bool) -> jax.Array:
        return greedy_or_epsilon(q_fn(pp.params, obs), key, pp.exploration, deterministic)

    return Agent(config=config, init=init, update=update,
                 policy_params=lambda s: PolicyParams(s.params, None, s.hyperparams.epsilon_end), policy=policy,
                 env_steps_per_update=config.env_steps_per_update, params_of=lambda s: s.params)


register("pqn", PQNConfig, make_pqn)
