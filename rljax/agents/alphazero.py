"""Gumbel AlphaZero: self-play with a tree search over the env's own dynamics.

AlphaZero (Silver et al. 2018, "A general reinforcement learning algorithm that masters chess, shogi,
and Go through self-play") with the search of Gumbel MuZero (Danihelka et al. 2022, "Policy
improvement by planning with Gumbel"), run batched on the accelerator by DeepMind's ``mctx``
(``mctx.gumbel_muzero_policy``). The model the search plans with is the env itself: each simulation
steps a copy of the env's state with ``env.step_env`` (no time limit, no auto-reset), and the network
gives the prior policy and the value at every new node.

One update, on the on-policy skeleton (:mod:`rljax.agents.onpolicy`):

1. **self-play**: ``num_steps`` moves in each of ``num_envs`` games, every move chosen by a search of
   ``num_simulations`` simulations from the current state (Gumbel top-k at the root over at most
   ``max_num_considered_actions`` actions, then sequential halving). The trajectory keeps the search's
   improved policy ``pi_t`` (mctx's ``action_weights``) beside each observation.
2. **targets**: the return from the mover's view, ``z_t = r_t + gamma * sign_t * (1 - term_t) * z_{t+1}``
   with ``sign_t = -1`` where the turn passes to the other player of a two-player zero-sum game
   (:func:`rljax.env.turn_sign`; +1 in a single-player env), bootstrapped from the network's value of
   the true next observation where a time limit or the rollout's end cut the game
   (:func:`rljax.core.returns.q_lambda_targets` with ``lambda = td_lambda``, 1 by default; below 1 the
   lambda-return also bootstraps from the next move's search value ``v_search(s_{t+1})``).
3. **learn**: ``num_epochs`` passes of ``num_minibatches`` Adam steps on
   ``L = -sum_a pi_t(a) log p(a | s_t) + vf_coef * 0.5 * (v(s_t) - z_t)^2``.

A two-player game's search backs each value up with ``discount = -gamma`` where the turn passes, so
every node's value is from the side of the player to move there, and the network sees every position
from that side (the game's observation contract: ``docs/env_api.md``, "Turn-based games"). Illegal
actions are masked at every node (the prior logits are the network's masked logits, the root's
``invalid_actions`` the mask's complement). The trained network's own policy (no search) is what
``rljax.load(RUN).act`` and evaluation run; :func:`search_policy` plays with the search.

mctx is an optional dependency (the ``search`` extra: ``pip install -e ".[search]"`` in a checkout); it
is imported when the algorithm is built.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from rljax.agents import register
from rljax.agents.base import Agent, discrete_actions, make_optimizer
from rljax.agents.onpolicy import (OnPolicyConfig, OnPolicyContext, OnPolicyHooks, OnPolicyState, actor_critic_act,
                                   actor_critic_network, explained_variance, make_onpolicy_agent, minibatch_epochs)
from rljax.core import wrappers
from rljax.core.config import check_floats, check_ints, check_sizes, check_choice, field, hyperparams_class, require
from rljax.core.networks import ACTIVATIONS
from rljax.core.returns import q_lambda_targets
from rljax.env import legal_action_mask, turn_sign

__all__ = ["SearchConfig", "AlphaZeroConfig", "AlphaZeroHyperParams", "AlphaZeroState", "SearchOutput",
           "AlphaZeroBatch", "alphazero_loss", "search_policy", "gumbel_search", "root_prior_logits",
           "search_value_targets", "self_play", "alphazero_optimizer", "alphazero_fits", "make_alphazero",
           "require_mctx"]


@dataclasses.dataclass(frozen=True)
class SearchConfig(OnPolicyConfig):
    """The fields AlphaZero and MuZero share: self-play batches, the Gumbel search and its targets.

    The search's fields are structural (``num_simulations``, ``max_num_considered_actions``: they
    shape the compiled program) or sweepable (``gumbel_scale`` and the completed-Q transform's
    ``value_scale`` and ``maxvisit_init``, traced values a sweep varies in one program).
    """

    # ----- structural: shapes and loop lengths -----
    num_envs: int = field(64, "games played in parallel (self-play), over all devices")
    num_steps: int = field(16, "moves per game per update (rollout length T); games run on across updates")
    num_epochs: int = field(1, "passes over each batch of self-play")
    num_minibatches: int = field(4, "minibatches per epoch; must divide num_envs * num_steps / num_devices")
    num_simulations: int = field(32, "simulations of the search per move")
    max_num_considered_actions: int = field(16, "actions the root's Gumbel top-k keeps before sequential halving")
    hidden_sizes: tuple[int, ...] = field((128, 128), "MLP widths of the networks (after the observation encoder)")
    activation: str = field("relu", "hidden activation: tanh, relu, elu, gelu, silu, ...")
    anneal_lr: bool = field(False, "decay the learning rate linearly to 0 over the run")

    # ----- sweepable hyperparameters (traced) -----
    learning_rate: float = field(1e-3, "Adam step size", sweepable=True)
    gamma: float = field(1.0, "discount factor (1 for board games)", sweepable=True)
    td_lambda: float = field(1.0, "value targets: 1, the game's outcome from the mover's side (AlphaZero); below 1, "
                                  "lambda-returns that bootstrap from the next move's search value", sweepable=True)
    vf_coef: float = field(1.0, "value loss coefficient", sweepable=True)
    max_grad_norm: float = field(1.0, "global-norm gradient clipping threshold", sweepable=True)
    gumbel_scale: float = field(1.0, "scale of the Gumbel noise of the root's action choice (0: no noise, "
                                     "the search's best action)", sweepable=True)
    value_scale: float = field(0.1, "scale of the completed Q-values added to the prior logits "
                                    "(mctx's qtransform_completed_by_mix_value)", sweepable=True)
    maxvisit_init: float = field(50.0, "visit-count offset of that scale (mctx's maxvisit_init)", sweepable=True)
    q_epsilon: float = field(1e-8, "the completed Q-values of a node's children are min-max scaled to [0, 1] over a "
                                   "range of at least this (mctx's epsilon): a spread of Q-values below it is not "
                                   "stretched to the full scale (in reward units; with few actions a tiny spread "
                                   "would otherwise decide the improved policy)", sweepable=True)
    dirichlet_fraction: float = field(0.25, "self-play mixes this fraction of Dirichlet noise into the root's prior "
                                            "policy, (1 - f) p + f Dir(alpha) (AlphaZero's exploration; 0: none; "
                                            "evaluation searches without it)", sweepable=True)
    dirichlet_alpha: float = field(0.3, "concentration of that noise (AlphaZero: 0.3 chess, 0.03 Go)", sweepable=True)

    def validate(self) -> None:
        """The on-policy checks (:meth:`OnPolicyConfig.validate`, types first), then the search's
        and the learner's ranges; no recurrent memory (the search plans from the state it is given)."""
        require(self.memory == "none", f"memory={self.memory!r}: the search plans from the state it is given, so "
                                       f"the network has no memory; use --memory none")
        super().validate()
        check_sizes(self, "hidden_sizes")
        check_choice(self, "activation", ACTIVATIONS)
        check_ints(self, ("num_simulations", "max_num_considered_actions"))
        check_floats(self, ("learning_rate", "max_grad_norm"), 0, low_open=True)
        check_floats(self, ("gamma", "td_lambda"), 0, 1)
        check_floats(self, ("vf_coef", "gumbel_scale", "value_scale", "maxvisit_init"), 0)
        check_floats(self, ("q_epsilon",), 0, low_open=True)
        check_floats(self, ("dirichlet_fraction",), 0, 1)
        check_floats(self, ("dirichlet_alpha",), 0, low_open=True)


@dataclasses.dataclass(frozen=True)
class AlphaZeroConfig(SearchConfig):
    """Gumbel AlphaZero's configuration (:class:`SearchConfig` and the fields below). Defaults: a small
    board game (tic-tac-toe) on a CPU."""

    sample_moves: int = field(0, "self-play samples the first this many moves of each game from the search's "
                                 "improved policy instead of playing its choice (AlphaZero's opening temperature, "
                                 "for varied games); -1: every move")
    shared_torso: bool = field(True, "one torso for the policy and value heads instead of two")

    def validate(self) -> None:
        """:meth:`SearchConfig.validate`, then ``sample_moves``; no domain randomisation (the search
        steps the env's own states)."""
        super().validate()
        check_ints(self, ("sample_moves",), low=-1)
        require(not self.randomize, f"randomize={list(self.randomize)}: AlphaZero's search steps copies of the env's "
                                    f"own states, which domain randomisation wraps; leave --randomize empty")


AlphaZeroHyperParams = hyperparams_class(AlphaZeroConfig)

AlphaZeroState = OnPolicyState
"""AlphaZero's train state: the shared :class:`~rljax.agents.onpolicy.OnPolicyState` (the network's
params, Adam state, the games' states, observations, the key every search draws from, hyperparameters,
env params, update counters)."""


class SearchOutput(NamedTuple):
    """What self-play keeps of each move's search (the trajectory's ``extras``).

    Attributes:
        policy: ``[..., num_actions]`` the search's improved policy (mctx's ``action_weights``).
        value: ``[...]`` the root's value after the search, from the mover's side.
    """

    policy: jax.Array
    value: jax.Array


class AlphaZeroBatch(NamedTuple):
    """A flat batch for :func:`alphazero_loss`; every field has leading dim ``[N]``.

    Attributes:
        obs: ``[N, *obs_shape]`` (every leaf of a dict observation ``[N, *leaf_shape]``).
        search_policy: ``[N, num_actions]`` the search's improved policy (sums to 1).
        target: ``[N]`` the value target ``z`` from the mover's view.
    """

    obs: Any
    search_policy: jax.Array
    target: jax.Array


def require_mctx() -> Any:
    """The ``mctx`` module, or an ``ImportError`` that says how to install it."""
    try:
        import mctx
    except ImportError as e:  # pragma: no cover - the test environment has it
        raise ImportError("AlphaZero searches with DeepMind's mctx, which is not installed: pip install -e "
                          "\".[search]\" in the rljax checkout (or pip install mctx)") from e
    return mctx


def alphazero_loss(params: Any, apply_fn: Any, batch: AlphaZeroBatch, vf_coef: Any
                   ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """``-E[sum_a pi(a) log p(a|s)] + vf_coef * 0.5 * E[(v(s) - z)^2]`` and its parts.

    ``p`` is the network's policy with illegal actions masked (their log-probability is finite and
    their search weight 0, so they add nothing).

    Returns:
        ``(loss, metrics)`` with float32 scalars ``policy_loss`` (the cross-entropy), ``value_loss``,
        ``entropy`` (of the network's policy) and ``search_kl`` (``KL(pi || p)``, how far the
        search moved the policy).
    """
    dist, value = apply_fn(params, batch.obs)
    log_p = dist.log_probs
    pi = batch.search_policy
    cross_entropy = -jnp.sum(pi * log_p, axis=-1)
    pi_log_pi = jnp.sum(jnp.where(pi > 0, pi * jnp.log(jnp.where(pi > 0, pi, 1.0)), 0.0), axis=-1)
    policy_loss = jnp.mean(cross_entropy)
    value_loss = 0.5 * jnp.mean(jnp.square(value - batch.target))
    metrics = {"policy_loss": policy_loss, "value_loss": value_loss, "entropy": jnp.mean(dist.entropy()),
               "search_kl": jnp.mean(cross_entropy + pi_log_pi)}
    return policy_loss + vf_coef * value_loss, metrics


def _inner_states(env_state: Any) -> Any:
    """The batched states of the single env inside a training stack's state: its wrappers' states
    unwrapped (each holds the next as ``env_state``) down to the
    :class:`~rljax.core.wrappers.VecEnvState`, whose ``env_state`` ``env.step_env`` steps."""
    while not isinstance(env_state, wrappers.VecEnvState):
        env_state = env_state.env_state
    return env_state.env_state


def search_policy(env: Any, env_params: Any, apply_fn: Any, config: AlphaZeroConfig
                  ) -> Callable[[Any, jax.Array, Any, Any, Any], Any]:
    """The Gumbel search of ``config`` over ``env``'s own dynamics, as a pure function.

    ``search(params, key, env_state, obs, hyperparams) -> mctx.PolicyOutput`` for a batch of ``B``
    positions: ``env_state`` the single env's states (leaves ``[B, ...]``), ``obs`` their observations
    ``[B, ...]``, ``hyperparams`` anything with ``gamma``, ``gumbel_scale``, ``value_scale`` and
    ``maxvisit_init``. The output's ``action`` ``[B]`` is the search's choice (with the Gumbel noise
    of ``gumbel_scale``; 0 plays the best action the search found) and ``action_weights``
    ``[B, A]`` its improved policy. Each simulation steps the state with ``env.step_env(key, state,
    action, env_params)``; the edge into the next node has reward ``r`` (the mover's) and discount
    ``gamma * turn_sign * (1 - terminated)``; the node's prior is the network's masked policy at the
    next observation, its value the network's (0 past a terminal step).
    """
    mctx = require_mctx()
    step = jax.vmap(env.step_env, in_axes=(0, 0, 0, None))

    def search(params: Any, key: jax.Array, env_state: Any, obs: Any, hyperparams: Any) -> Any:
        def recurrent_fn(params: Any, key: jax.Array, action: jax.Array, embedding: Any) -> tuple[Any, Any]:
            state, node_obs = embedding
            keys = jax.random.split(key, action.shape[0])
            next_obs, next_state, reward, terminated, _ = step(keys, state, action, env_params)
            dist, value = apply_fn(params, next_obs)
            discount = hyperparams.gamma * turn_sign(node_obs, next_obs) * (1.0 - terminated.astype(jnp.float32))
            out = mctx.RecurrentFnOutput(reward=jnp.asarray(reward, jnp.float32),
                                         discount=jnp.broadcast_to(discount, reward.shape).astype(jnp.float32),
                                         prior_logits=dist.logits, value=jnp.where(terminated, 0.0, value))
            return out, (next_state, next_obs)

        dist, value = apply_fn(params, obs)
        legal = legal_action_mask(obs)
        k_noise, key = jax.random.split(key)
        root = mctx.RootFnOutput(prior_logits=root_prior_logits(dist, legal, k_noise, hyperparams), value=value,
                                 embedding=(env_state, obs))
        return gumbel_search(params, key, root, recurrent_fn, legal, config, hyperparams)
    return search


def gumbel_search(params: Any, key: jax.Array, root: Any, recurrent_fn: Callable[..., Any], legal: jax.Array | None,
                  config: SearchConfig, hyperparams: Any) -> Any:
    """``mctx.gumbel_muzero_policy`` with ``config``'s structural fields (``num_simulations``,
    ``max_num_considered_actions``) and ``hyperparams``' traced ones (``gumbel_scale``; the
    completed-Q transform's ``value_scale`` and ``maxvisit_init``); the root's illegal actions
    (``legal`` False, ``[B, A]``; None: all legal) are never searched nor chosen."""
    mctx = require_mctx()
    qtransform = functools.partial(mctx.qtransform_completed_by_mix_value, value_scale=hyperparams.value_scale,
                                   maxvisit_init=hyperparams.maxvisit_init, epsilon=hyperparams.q_epsilon)
    return mctx.gumbel_muzero_policy(params, key, root, recurrent_fn, config.num_simulations,
                                     invalid_actions=None if legal is None else ~legal, qtransform=qtransform,
                                     max_num_considered_actions=config.max_num_considered_actions,
                                     gumbel_scale=hyperparams.gumbel_scale)


def root_prior_logits(dist: Any, legal: jax.Array | None, key: jax.Array, hyperparams: Any) -> jax.Array:
    """The root's prior logits ``[B, A]`` for a search, from the network's masked policy ``dist``, with
    Dirichlet noise mixed in (Silver et al. 2018): ``log((1 - f) p + f eta)``, ``eta ~ Dir(alpha)``
    over the legal actions, ``f = hyperparams.dirichlet_fraction``, ``alpha =
    hyperparams.dirichlet_alpha`` (``p``'s own logits when ``f`` is 0; illegal actions keep the
    lowest float)."""
    probs = dist.probs
    alpha = jnp.broadcast_to(hyperparams.dirichlet_alpha, probs.shape)
    if legal is None:
        noise = jax.random.dirichlet(key, alpha).astype(probs.dtype)
    else:
        noise = _legal_dirichlet(key, alpha, legal)
    f = hyperparams.dirichlet_fraction
    mixed = jnp.log((1.0 - f) * probs + f * noise)
    logits = jnp.where(f > 0, mixed, dist.logits)
    return logits if legal is None else jnp.where(legal, logits, jnp.finfo(logits.dtype).min)


def _legal_dirichlet(key: jax.Array, alpha: jax.Array, legal: jax.Array) -> jax.Array:
    """Dirichlet noise over the legal actions only: normalised Gamma(alpha) draws, 0 where illegal."""
    g = jnp.where(legal, jax.random.gamma(key, alpha), 0.0)
    return g / jnp.maximum(jnp.sum(g, axis=-1, keepdims=True), jnp.finfo(g.dtype).tiny)


def self_play(search: Callable[..., Any], config: AlphaZeroConfig
              ) -> Callable[[Any, Any], Callable[[jax.Array, Any], tuple[jax.Array, jax.Array]]]:
    """AlphaZero's behaviour (the on-policy skeleton's ``behaviour`` hook): ``self_play(search,
    config)(params, ctx)`` is ``play(key, (env_state, obs)) -> (action [B], SearchOutput)``
    on a training stack's state and observations (the rollout's ``observe`` hands both): one
    :func:`search_policy` search per game from the states inside the stack's wrappers, the search's
    choice played, or for the first ``config.sample_moves`` moves of a game (-1: all) a sample of its
    improved policy. ``ctx`` needs only ``hyperparams``."""
    def behaviour(params: Any, ctx: Any) -> Callable[[jax.Array, Any], tuple[jax.Array, jax.Array]]:
        def play(key: jax.Array, x: Any) -> tuple[jax.Array, jax.Array]:
            env_state, obs = x
            k_search, k_sample = jax.random.split(key)
            states = _inner_states(env_state)
            out = search(params, k_search, states, obs, ctx.hyperparams)
            action = out.action.astype(jnp.int32)
            if config.sample_moves:
                sampled = jax.random.categorical(k_sample, jnp.log(out.action_weights)).astype(jnp.int32)
                opening = jnp.bool_(True) if config.sample_moves < 0 else states.time < config.sample_moves
                action = jnp.where(opening, sampled, action)
            return action, SearchOutput(out.action_weights, out.search_tree.node_values[:, 0])
        return play
    return behaviour


def search_value_targets(traj: Any, boot: jax.Array, hyperparams: Any) -> jax.Array:
    """The value targets ``z_t`` ``[T, B]`` of a self-play trajectory (the module docstring's step 2).

    :func:`rljax.core.returns.q_lambda_targets` with ``lambda = hyperparams.td_lambda`` and per-step
    discount ``gamma * turn_sign(s_t, s_{t+1})``: inside a game the next move's search value
    ``traj.extras.value[t + 1]`` (from the next mover's side) stands for the next state; where the
    game ended or the rollout stops, ``boot`` ``[T, B]`` (the network's value of the true next
    observation, read only where the game was cut or the rollout ends; with lambda = 1 those are
    the only values read: the outcome, bootstrapped where a game was cut)."""
    done = traj.terminated | traj.truncated
    searched = jnp.concatenate([traj.extras.value[1:], boot[-1:]], axis=0)
    boot = jnp.where(done.at[-1].set(True), boot, searched)
    discount = hyperparams.gamma * jnp.broadcast_to(turn_sign(traj.obs, traj.next_obs), traj.reward.shape)
    return q_lambda_targets(traj.reward, boot, traj.terminated, traj.truncated, discount, hyperparams.td_lambda)


def alphazero_optimizer(hyperparams: AlphaZeroHyperParams, learning_rate: jax.Array) -> optax.GradientTransformation:
    """Global-norm clipping then Adam with step size ``learning_rate``."""
    return make_optimizer(learning_rate, hyperparams.max_grad_norm)


def make_alphazero(config: AlphaZeroConfig, env: Any, env_params: Any, axis_name: str | None = None) -> Agent:
    """Builds Gumbel AlphaZero's per-device program for ``env`` (a ``Discrete`` action space; a
    two-player zero-sum game or a single-player env with deterministic dynamics): self-play with
    :func:`search_policy` on the on-policy skeleton, targets and loss as in the module docstring.

    Raises:
        ImportError: mctx is not installed (the message says how to install it).
        ValueError: the action space is not ``Discrete``.
    """
    require_mctx()
    alphazero_fits(env, env_params)
    network = actor_critic_network(config, env, env_params, "AlphaZero")
    apply_fn = network.apply
    search = search_policy(env, env_params, apply_fn, config)

    behaviour = self_play(search, config)

    def learn(params: Any, opt_state: Any, traj: Any, key: jax.Array, ctx: OnPolicyContext):
        hyperparams = ctx.hyperparams
        values = apply_fn(params, traj.obs)[1]
        boot = apply_fn(params, traj.next_obs)[1]
        targets = search_value_targets(traj, boot, hyperparams)
        flat = lambda x: x.reshape((-1,) + x.shape[2:])  # noqa: E731
        batch = AlphaZeroBatch(jax.tree.map(flat, traj.obs), flat(traj.extras.policy), flat(targets))

        def loss(params: Any, minibatch: AlphaZeroBatch):
            return alphazero_loss(params, apply_fn, minibatch, hyperparams.vf_coef)

        params, opt_state, metrics = minibatch_epochs(loss, params, opt_state, ctx.optimizer, batch, key,
                                                      num_epochs=config.num_epochs,
                                                      num_minibatches=config.num_minibatches, axis_name=axis_name)
        return params, opt_state, {**metrics, "explained_variance": explained_variance(targets, values, axis_name)}

    agent = make_onpolicy_agent(config, env, env_params, axis_name, OnPolicyHooks(
        init_params=network.init, optimizer=alphazero_optimizer, behaviour=behaviour, learn=learn,
        act=actor_critic_act(apply_fn), observe=lambda env_state, obs: (env_state, obs)), anneal_lr=config.anneal_lr)
    return agent


def alphazero_fits(env: Any, env_params: Any) -> None:
    """AlphaZero's rule: a ``Discrete`` action space and a ``step_env`` (the transition without
    time limit or reset, which the search uses as its model); raises ``ValueError`` naming what is
    missing."""
    discrete_actions(env, env_params, "AlphaZero")
    if not callable(getattr(env, "step_env", None)):
        raise ValueError(f"AlphaZero searches with the env's own step_env(key, state, action, params) (the step "
                         f"without time limit or auto-reset, as rljax.env.Environment and gymnax envs have); "
                         f"{getattr(env, 'name', type(env).__name__)} has none")


register("alphazero", AlphaZeroConfig, make_alphazero, fits=alphazero_fits)
