"""Gumbel MuZero: a tree search over a learned model, trained on its own search's choices.

MuZero (Schrittwieser et al. 2020, "Mastering Atari, Go, chess and shogi by planning with a learned
model") with the search of Gumbel MuZero (Danihelka et al. 2022, "Policy improvement by planning with
Gumbel"), run batched by DeepMind's ``mctx`` (``mctx.gumbel_muzero_policy``). Three functions of one
network (:class:`MuZeroNetwork`) stand in for the env:

* representation ``s^0 = h(o_t)``, the latent state of an observation;
* dynamics ``(s^{k+1}, r^{k+1}) = g(s^k, a)``, the next latent state and the reward of ``a``;
* prediction ``(p^k, v^k) = f(s^k)``, the prior policy and the value at a latent state.

Each latent state is min-max scaled to ``[0, 1]`` over its features (the paper's Appendix G). With
``support_size = S > 0`` values and rewards are categorical over the ``2S + 1`` integers ``-S .. S``
in the rescaled space ``h(x) = sign(x) (sqrt(|x| + 1) - 1) + 0.001 x`` (Appendix F;
:func:`rljax.core.distributional.value_rescale`): a scalar target ``x`` becomes the two-hot
distribution of ``h(x)`` and a prediction the scalar ``h^-1(E[z])``; with ``S = 0`` they are scalars
with squared error.

One update, on the on-policy skeleton (:mod:`rljax.agents.onpolicy`):

1. **act**: ``num_steps`` steps in each of ``num_envs`` envs, every action chosen by a search of
   ``num_simulations`` simulations over the model from ``h(o_t)`` (Gumbel top-k at the root over at
   most ``max_num_considered_actions`` actions, then sequential halving; the root's illegal actions
   masked). The trajectory keeps the search's improved policy ``pi_t`` and root value.
2. **targets**: the value target ``z_t`` of AlphaZero (:func:`rljax.agents.alphazero.search_value_targets`:
   lambda-returns through the next step's search value with ``td_lambda < 1``, the discounted return
   with 1; bootstrapped from the network's value of the true next observation where a time limit or
   the rollout cut the episode). From every step ``t``, the ``K = unroll_steps`` steps that follow
   (:func:`unroll_targets`): actions ``a_{t+k}``, rewards ``u_{t+k}``, values ``z_{t+k}`` and
   policies ``pi_{t+k}``. Past a termination the model is in an absorbing state (reward 0, value
   0, no policy target); past a time limit or the rollout's end nothing is trained.
3. **learn**: ``num_epochs`` passes of ``num_minibatches`` Adam steps on the unrolled loss::

       L = sum_{k=0..K} w_k [ CE(pi_{t+k}, p^k) + vf_coef * l(v^k, z_{t+k}) ]
           + sum_{k=1..K} w_k reward_coef * l(r^k, u_{t+k-1}),      w_0 = 1, w_k = 1 / K

   (``l`` the cross-entropy against the two-hot target, or half the squared error), the latent
   state's gradient halved at each dynamics step (the paper's Appendix G).

In a two-player zero-sum game (observations with a current-player field, ``docs/env_api.md``) the
search backs values up with ``discount = -gamma`` at every model step (the model cannot see whose turn
it is, so it assumes the turn passes), the value targets from each mover's side as AlphaZero's. The
trained network's own policy, ``f(h(o))``, is what ``rljax.load(RUN).act``, evaluation and export run;
:func:`muzero_search` plays with the search.

mctx is an optional dependency (the ``search`` extra); it is imported when the algorithm is built.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from rljax.agents import register
from rljax.agents.alphazero import (SearchConfig, SearchOutput, alphazero_optimizer, gumbel_search, require_mctx,
                                    root_prior_logits, search_value_targets)
from rljax.agents.base import Agent, discrete_actions, observation_layout
from rljax.agents.onpolicy import (OnPolicyContext, OnPolicyHooks, OnPolicyState, actor_critic_act,
                                   explained_variance, make_onpolicy_agent, minibatch_epochs)
from rljax.core.config import check_floats, check_ints, field, hyperparams_class
from rljax.core.distributional import two_hot, value_rescale, value_unrescale
from rljax.core.distributions import Categorical
from rljax.core.networks import MLP, LeafEncoding, ObsEncoder
from rljax.env import current_player, legal_action_mask, masked_actions

__all__ = ["MuZeroConfig", "MuZeroHyperParams", "MuZeroState", "MuZeroNetwork", "MuZeroBatch", "unroll_targets",
           "muzero_loss", "muzero_search", "make_muzero", "muzero_fits"]


@dataclasses.dataclass(frozen=True)
class MuZeroConfig(SearchConfig):
    """Gumbel MuZero's configuration (:class:`~rljax.agents.alphazero.SearchConfig` and the fields
    below). Defaults: a small single-player env (CartPole) on a CPU."""

    num_envs: int = field(32, "envs played in parallel, over all devices")
    num_steps: int = field(32, "steps per env per update (rollout length T); episodes run on across updates")
    num_simulations: int = field(16, "simulations of the search per step")
    hidden_sizes: tuple[int, ...] = field((64, 64), "MLP widths of the representation, dynamics, reward and "
                                                    "prediction networks")
    gamma: float = field(0.99, "discount factor", sweepable=True)
    td_lambda: float = field(0.8, "value targets: lambda-returns through the next step's search value (1: the "
                                  "discounted return of the episode, bootstrapped where it was cut)", sweepable=True)
    dirichlet_fraction: float = field(0.0, "self-play mixes this fraction of Dirichlet noise into the root's prior "
                                           "policy, (1 - f) p + f Dir(alpha) (0: none, the Gumbel noise of the "
                                           "root's choice explores)", sweepable=True)
    unroll_steps: int = field(5, "steps K the model is unrolled from each observation in the loss")
    latent_size: int = field(64, "size of the latent state")
    support_size: int = field(0, "values and rewards categorical over the 2S+1 integers -S..S of the rescaled "
                                 "space h(x) (MuZero's Appendix F); 0: scalars with squared error")
    reward_coef: float = field(1.0, "reward loss coefficient", sweepable=True)

    def validate(self) -> None:
        """:meth:`SearchConfig.validate`, then the model's sizes."""
        super().validate()
        check_ints(self, ("unroll_steps", "latent_size"))
        check_ints(self, ("support_size",), low=0)
        check_floats(self, ("reward_coef",), 0)


MuZeroHyperParams = hyperparams_class(MuZeroConfig)

MuZeroState = OnPolicyState
"""MuZero's train state: the shared :class:`~rljax.agents.onpolicy.OnPolicyState` (the network's params,
Adam state, the envs' states, observations, the key every search draws from, hyperparameters, env
params, update counters)."""


def _atoms(support_size: int) -> jax.Array:
    """The categorical support of values and rewards: the integers ``-S .. S``, float32 ``[2S + 1]``."""
    return jnp.arange(-support_size, support_size + 1, dtype=jnp.float32)


def _scaled(latent: jax.Array) -> jax.Array:
    """Min-max scaling of a latent state over its features to ``[0, 1]`` (MuZero's Appendix G)."""
    lo = jnp.min(latent, axis=-1, keepdims=True)
    hi = jnp.max(latent, axis=-1, keepdims=True)
    return (latent - lo) / jnp.maximum(hi - lo, 1e-5)


class MuZeroNetwork(nn.Module):
    """MuZero's representation, dynamics and prediction functions (the module docstring).

    Attributes:
        action_dim: number of discrete actions ``A``.
        hidden_sizes: widths of each function's MLP.
        activation: a name from :data:`rljax.core.networks.ACTIVATIONS`.
        latent_size: size ``L`` of the latent state.
        support_size: ``S``; values and rewards are ``[..., 2S + 1]`` logits over ``-S .. S`` (in the
            rescaled space), or ``[..., 1]`` scalars when 0.
        obs_layout: :func:`rljax.core.networks.encoder_layout` of the observation.
        cnn_channels: conv widths of the image encoder.

    Methods (``network.apply(params, ..., method=MuZeroNetwork.<name>)``):
        ``represent(obs) -> latent [..., L]``; ``predict(latent) -> (logits [..., A], value_out)``;
        ``transition(latent, action [...]) -> (latent, reward_out)``; ``scalar(out) -> [...]`` (a
        value or reward output as a number); ``__call__(obs) -> (Categorical, value [...])``: the
        prediction at ``h(obs)``, illegal actions masked (the policy that acting and export run).
        ``init_all(obs)`` creates every parameter (``network.init(key, obs, method=...)``).
    """

    action_dim: int
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "relu"
    latent_size: int = 64
    support_size: int = 0
    obs_layout: tuple[LeafEncoding, ...] = ()
    cnn_channels: Sequence[int] = (16,)

    def setup(self) -> None:
        out = 1 if self.support_size == 0 else 2 * self.support_size + 1
        self.encoder = ObsEncoder(self.obs_layout, self.cnn_channels)
        self.representation = MLP(self.hidden_sizes, self.activation, output_dim=self.latent_size)
        self.dynamics = MLP(self.hidden_sizes, self.activation, output_dim=self.latent_size)
        self.reward = MLP(self.hidden_sizes, self.activation, output_dim=out, output_gain=0.01)
        self.prediction = MLP(self.hidden_sizes, self.activation)
        self.policy_head = MLP((), output_dim=self.action_dim, output_gain=0.01)
        self.value_head = MLP((), output_dim=out, output_gain=0.01)

    def represent(self, obs: Any) -> jax.Array:
        return _scaled(self.representation(self.encoder(obs)))

    def predict(self, latent: jax.Array) -> tuple[jax.Array, jax.Array]:
        x = self.prediction(latent)
        return self.policy_head(x), self.value_head(x)

    def transition(self, latent: jax.Array, action: jax.Array) -> tuple[jax.Array, jax.Array]:
        x = jnp.concatenate([latent, jax.nn.one_hot(action, self.action_dim, dtype=latent.dtype)], axis=-1)
        return _scaled(self.dynamics(x)), self.reward(x)

    def scalar(self, out: jax.Array) -> jax.Array:
        if self.support_size == 0:
            return out[..., 0]
        return value_unrescale(jnp.sum(jax.nn.softmax(out, axis=-1) * _atoms(self.support_size), axis=-1))

    def __call__(self, obs: Any) -> tuple[Categorical, jax.Array]:
        logits, value = self.predict(self.represent(obs))
        return Categorical(logits=masked_actions(logits, legal_action_mask(obs))), self.scalar(value)

    def init_all(self, obs: Any) -> tuple[jax.Array, jax.Array]:
        latent = self.represent(obs)
        _, value = self.predict(latent)
        _, reward = self.transition(latent, jnp.zeros(latent.shape[:-1], jnp.int32))
        return value, reward


class MuZeroBatch(NamedTuple):
    """A flat batch for :func:`muzero_loss`: ``N`` start positions, each unrolled ``K`` steps.

    Attributes:
        obs: ``[N, *obs_shape]`` the observation ``o_t`` (every leaf of a dict observation ``[N, ...]``).
        actions: int32 ``[N, K]`` the actions ``a_{t+k}`` the model is unrolled with.
        policy: ``[N, K + 1, A]`` the search's improved policies ``pi_{t+k}``.
        value: ``[N, K + 1]`` the value targets ``z_{t+k}`` (0 in an absorbing state).
        reward: ``[N, K]`` the reward targets ``u_{t+k}`` (0 in an absorbing state).
        policy_mask, value_mask: float32 ``[N, K + 1]``, 1 where that target is trained.
        reward_mask: float32 ``[N, K]``, likewise.
    """

    obs: Any
    actions: jax.Array
    policy: jax.Array
    value: jax.Array
    reward: jax.Array
    policy_mask: jax.Array
    value_mask: jax.Array
    reward_mask: jax.Array


def unroll_targets(obs: Any, action: jax.Array, policy: jax.Array, value: jax.Array, reward: jax.Array,
                   terminated: jax.Array, truncated: jax.Array, unroll_steps: int) -> MuZeroBatch:
    """The unrolled targets of every step of a trajectory ``[T, B]``, flattened to ``N = T * B``.

    From step ``t`` the ``k``-th unrolled step (``k = 1 .. K``) replays transition ``j = t + k - 1``
    and reaches state ``t + k``. Its reward target is ``reward[j]`` while ``j < T`` and no episode
    ended in ``t .. j - 1``; its state's value and policy targets are ``value[t + k]`` and
    ``policy[t + k]`` while moreover ``t + k < T`` and transition ``j`` did not end the episode.
    After a termination the model's state is absorbing: reward and value targets 0 (trained),
    no policy target. After a truncation (time limit) or past the trajectory's end, no target is
    trained; the action fed to the model there is ``action[min(j, T - 1)]`` (any action would do).

    Args:
        obs: the observations ``o_t``, leaves ``[T, B, ...]``.
        action: int ``[T, B]``; policy: ``[T, B, A]``; value: the value targets ``z_t`` ``[T, B]``;
        reward: ``[T, B]``; terminated, truncated: bool ``[T, B]``.
        unroll_steps: ``K >= 1``.

    Returns:
        :class:`MuZeroBatch` with leading dim ``N = T * B`` (start ``t`` major, env ``b`` minor).
    """
    num_steps = reward.shape[0]
    t = jnp.arange(num_steps)
    alive = jnp.ones(reward.shape, bool)       # state t + k is in t's episode
    absorbed = jnp.zeros(reward.shape, bool)   # t's episode terminated before state t + k
    actions, rewards, reward_masks = [], [], []
    policies, values, policy_masks, value_masks = [policy], [value], [alive], [alive]
    for k in range(1, unroll_steps + 1):
        j = jnp.minimum(t + k - 1, num_steps - 1)
        seen = alive & (t + k - 1 < num_steps)[:, None]
        actions.append(action[j])
        rewards.append(jnp.where(seen, reward[j], 0.0))
        reward_masks.append(seen | absorbed)
        absorbed = absorbed | (seen & terminated[j])
        alive = seen & ~terminated[j] & ~truncated[j]
        i = jnp.minimum(t + k, num_steps - 1)
        known = alive & (t + k < num_steps)[:, None]
        policies.append(policy[i])
        values.append(jnp.where(known, value[i], 0.0))
        policy_masks.append(known)
        value_masks.append(known | absorbed)

    def flat(xs: list[jax.Array], dtype: Any = None) -> jax.Array:
        x = jnp.stack(xs, axis=2)  # [T, B, K(+1), ...]
        x = x.reshape((-1,) + x.shape[2:])
        return x if dtype is None else x.astype(dtype)

    return MuZeroBatch(obs=jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), obs),
                       actions=flat(actions, jnp.int32), policy=flat(policies), value=flat(values, jnp.float32),
                       reward=flat(rewards, jnp.float32), policy_mask=flat(policy_masks, jnp.float32),
                       value_mask=flat(value_masks, jnp.float32), reward_mask=flat(reward_masks, jnp.float32))


def muzero_loss(params: Any, network: MuZeroNetwork, batch: MuZeroBatch, vf_coef: Any, reward_coef: Any
                ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The unrolled loss of the module docstring and its parts (each a float32 scalar: the weighted
    sums over the unrolled steps, averaged over the ``N`` start positions).

    Returns:
        ``(loss, metrics)`` with ``policy_loss``, ``value_loss``, ``reward_loss`` and ``entropy``
        (of the prediction's policy at ``h(o_t)``, illegal actions masked).
    """
    apply = lambda method, *args: network.apply(params, *args, method=method)  # noqa: E731
    num_unroll = batch.actions.shape[1]
    latent = apply(MuZeroNetwork.represent, batch.obs)
    logits, value = apply(MuZeroNetwork.predict, latent)
    logits = masked_actions(logits, legal_action_mask(batch.obs))
    entropy = Categorical(logits=logits).entropy()
    all_logits, all_values, all_rewards = [logits], [value], []
    for k in range(num_unroll):
        latent = 0.5 * latent + 0.5 * jax.lax.stop_gradient(latent)
        latent, reward = apply(MuZeroNetwork.transition, latent, batch.actions[:, k])
        logits, value = apply(MuZeroNetwork.predict, latent)
        all_logits.append(logits)
        all_values.append(value)
        all_rewards.append(reward)
    logits = jnp.stack(all_logits, axis=1)  # [N, K+1, A]
    values = jnp.stack(all_values, axis=1)  # [N, K+1, V]
    rewards = jnp.stack(all_rewards, axis=1)  # [N, K, V]

    def scalar_loss(out: jax.Array, target: jax.Array) -> jax.Array:
        if network.support_size == 0:
            return 0.5 * jnp.square(out[..., 0] - target)
        return -jnp.sum(two_hot(value_rescale(target), _atoms(network.support_size)) * jax.nn.log_softmax(out, axis=-1),
                        axis=-1)

    weights = jnp.full((num_unroll + 1,), 1.0 / num_unroll, jnp.float32).at[0].set(1.0)
    cross_entropy = -jnp.sum(batch.policy * jax.nn.log_softmax(logits, axis=-1), axis=-1)
    policy_loss = jnp.mean(jnp.sum(weights * batch.policy_mask * cross_entropy, axis=1))
    value_loss = jnp.mean(jnp.sum(weights * batch.value_mask * scalar_loss(values, batch.value), axis=1))
    reward_loss = jnp.mean(jnp.sum(weights[1:] * batch.reward_mask * scalar_loss(rewards, batch.reward), axis=1))
    metrics = {"policy_loss": policy_loss, "value_loss": value_loss, "reward_loss": reward_loss,
               "entropy": jnp.mean(entropy)}
    return policy_loss + vf_coef * value_loss + reward_coef * reward_loss, metrics


def muzero_search(network: MuZeroNetwork, config: SearchConfig) -> Callable[[Any, jax.Array, Any, Any], Any]:
    """The Gumbel search of ``config`` over the learned model, as a pure function.

    ``search(params, key, obs, hyperparams) -> mctx.PolicyOutput`` for a batch of ``B``
    observations ``[B, ...]``; ``hyperparams`` anything with ``gamma``, ``gumbel_scale``,
    ``value_scale``, ``maxvisit_init`` and the Dirichlet fields. The root is ``h(obs)`` with the
    prediction's policy (illegal actions masked, Dirichlet noise mixed in) and value; each
    simulation expands a node with ``g`` and ``f``: reward ``r^k``, discount ``gamma`` (``-gamma``
    in a two-player game), prior ``p^k``, value ``v^k``. The output's ``action`` ``[B]`` is the
    search's choice and ``action_weights`` ``[B, A]`` its improved policy.
    """
    mctx = require_mctx()

    def search(params: Any, key: jax.Array, obs: Any, hyperparams: Any) -> Any:
        apply = lambda method, *args: network.apply(params, *args, method=method)  # noqa: E731
        sign = 1.0 if current_player(obs) is None else -1.0

        def recurrent_fn(params: Any, key: jax.Array, action: jax.Array, latent: jax.Array) -> tuple[Any, Any]:
            apply = lambda method, *args: network.apply(params, *args, method=method)  # noqa: E731
            latent, reward = apply(MuZeroNetwork.transition, latent, action)
            logits, value = apply(MuZeroNetwork.predict, latent)
            reward = apply(MuZeroNetwork.scalar, reward)
            out = mctx.RecurrentFnOutput(reward=reward, discount=jnp.full(reward.shape, sign * hyperparams.gamma,
                                                                          jnp.float32),
                                         prior_logits=logits, value=apply(MuZeroNetwork.scalar, value))
            return out, latent

        latent = apply(MuZeroNetwork.represent, obs)
        logits, value = apply(MuZeroNetwork.predict, latent)
        legal = legal_action_mask(obs)
        k_noise, key = jax.random.split(key)
        prior = root_prior_logits(Categorical(logits=masked_actions(logits, legal)), legal, k_noise, hyperparams)
        root = mctx.RootFnOutput(prior_logits=prior, value=apply(MuZeroNetwork.scalar, value), embedding=latent)
        return gumbel_search(params, key, root, recurrent_fn, legal, config, hyperparams)
    return search


def muzero_network(config: MuZeroConfig, env: Any, env_params: Any) -> MuZeroNetwork:
    """The :class:`MuZeroNetwork` of ``config`` for ``env`` (``Discrete`` actions)."""
    return MuZeroNetwork(action_dim=discrete_actions(env, env_params, "MuZero"), hidden_sizes=config.hidden_sizes,
                         activation=config.activation, latent_size=config.latent_size,
                         support_size=config.support_size,
                         obs_layout=observation_layout(config, env, env_params, "MuZero"),
                         cnn_channels=config.cnn_channels)


def make_muzero(config: MuZeroConfig, env: Any, env_params: Any, axis_name: str | None = None) -> Agent:
    """Builds Gumbel MuZero's per-device program for ``env`` (a ``Discrete`` action space): searches
    over the learned model on the on-policy skeleton, targets and loss as in the module docstring.

    Raises:
        ImportError: mctx is not installed (the message says how to install it).
        ValueError: the action space is not ``Discrete``.
    """
    require_mctx()
    network = muzero_network(config, env, env_params)
    search = muzero_search(network, config)

    def behaviour(params: Any, ctx: OnPolicyContext) -> Callable[[jax.Array, Any], tuple[jax.Array, Any]]:
        def play(key: jax.Array, obs: Any) -> tuple[jax.Array, SearchOutput]:
            out = search(params, key, obs, ctx.hyperparams)
            return out.action.astype(jnp.int32), SearchOutput(out.action_weights, out.search_tree.node_values[:, 0])
        return play

    def learn(params: Any, opt_state: Any, traj: Any, key: jax.Array, ctx: OnPolicyContext):
        hyperparams = ctx.hyperparams
        values = network.apply(params, traj.obs)[1]
        boot = network.apply(params, traj.next_obs)[1]
        targets = search_value_targets(traj, boot, hyperparams)
        batch = unroll_targets(traj.obs, traj.action, traj.extras.policy, targets, traj.reward, traj.terminated,
                               traj.truncated, config.unroll_steps)

        def loss(params: Any, minibatch: MuZeroBatch):
            return muzero_loss(params, network, minibatch, hyperparams.vf_coef, hyperparams.reward_coef)

        params, opt_state, metrics = minibatch_epochs(loss, params, opt_state, ctx.optimizer, batch, key,
                                                      num_epochs=config.num_epochs,
                                                      num_minibatches=config.num_minibatches, axis_name=axis_name)
        return params, opt_state, {**metrics, "explained_variance": explained_variance(targets, values, axis_name)}

    def init_params(key: jax.Array, obs: Any) -> Any:
        return network.init(key, obs, method=MuZeroNetwork.init_all)

    return make_onpolicy_agent(config, env, env_params, axis_name, OnPolicyHooks(
        init_params=init_params, optimizer=alphazero_optimizer, behaviour=behaviour, learn=learn,
        act=actor_critic_act(network.apply)), anneal_lr=config.anneal_lr)


def muzero_fits(env: Any, env_params: Any) -> None:
    """MuZero's rule: a ``Discrete`` action space (raises ``ValueError`` naming the space)."""
    discrete_actions(env, env_params, "MuZero")


register("muzero", MuZeroConfig, make_muzero, fits=muzero_fits)
