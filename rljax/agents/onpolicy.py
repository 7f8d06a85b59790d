"""What on-policy agents (PPO, PQN, A2C) share: the config fields, the state, the update skeleton.

An on-policy algorithm is its network, its loss, its targets and a short ``make_<algo>`` that hands
them to :func:`make_onpolicy_agent`, with a config subclassing :class:`RolloutConfig` (one learning
step per rollout, e.g. A2C) or :class:`OnPolicyConfig` (epochs of minibatches, e.g. PPO, PQN).

One on-policy update, inside the compiled chunk:

1. ``key, k_roll, k_learn = split(state.key, 3)``; the :class:`OnPolicyContext`: the step size
   (annealed linearly to 0 over the run when ``anneal_lr``), its optimiser and the algorithm's
   per-update ``schedule`` values (e.g. PQN's epsilon, :meth:`OnPolicyContext.fraction`).
2. **collect**: ``num_steps`` steps of the behaviour policy in the ``num_envs // num_devices``
   local envs (:func:`rljax.core.rollout.rollout`), a fresh ``[T, B]`` trajectory whose
   ``next_obs`` is the true next observation (the final one where an episode ended).
3. **learn**: the algorithm's ``learn`` turns the trajectory into targets and takes its gradient
   steps, averaging gradients over the device axis (:func:`minibatch_epochs` for epochs of
   minibatches, :func:`~rljax.agents.base.gradient_step` for one step).
4. metrics: ``learn``'s, the ``schedule`` values, ``learning_rate`` and ``param_desync``.

The env stack (:func:`~rljax.agents.base.make_env_stack`) may normalise observations (the
statistics travel with the policy in :class:`~rljax.agents.base.PolicyParams`) and rewards (the
discount of the reward normaliser is the state's traced ``gamma``, so a sweep member or a PBT
perturbation discounts with its own).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

from rljax.agents.base import (Agent, EncoderConfig, PolicyParams, UpdateOutput, agent_rows, agent_views, desync,
                               epochs_of_minibatches, first_obs, gradient_step, into_action_space, keyed_by_identity,
                               make_env_stack, observation_layout, observation_normalizer, pmean, schedule_fraction,
                               space_dims, stack_params)
from rljax.agents.recurrent import sequence_length
from rljax.core import wrappers
from rljax.core.config import check_choice, check_env_steps_per_update, check_ints, field, require
from rljax.core.counters import Count, as_float
from rljax.core.networks import MEMORY_CELLS, ActorCritic, PerAgent, RecurrentActorCritic
from rljax.core.returns import gae
from rljax.core.rollout import RolloutCarry, Transition, rollout
from rljax.env import num_agents

__all__ = ["RolloutConfig", "OnPolicyConfig", "OnPolicyState", "OnPolicyContext", "OnPolicyHooks", "OnPolicyProgram",
           "make_onpolicy_agent", "annealed_learning_rate", "minibatch_epochs", "actor_critic_network",
           "sampling_policy", "actor_critic_act", "gae_targets", "explained_variance"]


@dataclasses.dataclass(frozen=True)
class RolloutConfig(EncoderConfig):
    """The fields of an algorithm that learns from each fresh rollout, and their validation.

    One update collects ``num_steps`` steps in each of ``num_envs`` envs (``env_steps_per_update``
    samples in all). A subclass redeclares a field to change its default (it keeps its place) and
    extends :meth:`validate`, calling this one first. :func:`make_onpolicy_agent` also reads the
    subclass's sweepable ``learning_rate`` (and ``gamma`` when rewards are normalised).
    """

    num_steps: int = field(128, "steps per env per update (rollout length T)")

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raises ``ValueError`` naming any inconsistent value and what would be valid: every
        field's type (:func:`~rljax.core.config.check_types`), then that the run holds at least one
        update."""
        self.validate_run()
        self.validate_encoder()
        check_ints(self, ("num_steps",))
        batch = self.num_envs * self.num_steps
        check_env_steps_per_update(batch, "num_envs * num_steps")
        require(self.total_timesteps >= batch,
                f"total_timesteps={self.total_timesteps} is less than one update (num_envs * num_steps = {batch})")

    @property
    def env_steps_per_update(self) -> int:
        """Env steps per update over all devices: ``num_envs * num_steps`` (the rollout batch)."""
        return self.num_envs * self.num_steps


@dataclasses.dataclass(frozen=True)
class OnPolicyConfig(RolloutConfig):
    """A :class:`RolloutConfig` that learns in epochs of minibatches (PPO, PQN).

    Each update takes ``num_epochs`` passes over the rollout in ``num_minibatches`` minibatches per
    pass (:func:`minibatch_epochs`; each device shuffles its own share).
    """

    num_epochs: int = field(4, "passes over each rollout")
    num_minibatches: int = field(4, "minibatches per epoch; must divide num_envs * num_steps / num_devices")
    memory: str = field("none", "recurrent memory between the torso and the heads: none, gru or lstm "
                                "(the policy then acts on the episode so far, not on one observation)")
    memory_size: int = field(128, "width of the recurrent memory (with --memory gru|lstm; unused without)")
    bptt_length: int = field(0, "steps per training sequence with memory (truncated backprop through time); "
                                "0: the whole rollout (num_steps); must divide num_steps; unused without memory")

    def validate(self) -> None:
        """The rollout checks (:meth:`RolloutConfig.validate`), then that each device's share of the
        rollout splits into whole minibatches (of whole sequences, with memory)."""
        super().validate()
        check_ints(self, ("num_epochs", "num_minibatches", "memory_size"))
        check_ints(self, ("bptt_length",), low=0)
        check_choice(self, "memory", MEMORY_CELLS)
        local = self.env_steps_per_update // self.num_devices
        require(local % self.num_minibatches == 0,
                f"num_envs * num_steps / num_devices = {self.num_envs} * {self.num_steps} / "
                f"{self.num_devices} = {local} is not divisible by num_minibatches={self.num_minibatches}")
        if self.memory == "none":  # memory_size and bptt_length wait unused (one config file serves both)
            return
        require(not getattr(self, "shared_torso", False),
                "shared_torso applies to the memoryless actor-critic: the recurrent one always shares its torso and "
                "memory between the heads; leave shared_torso off with --memory")
        length = sequence_length(self)
        require(self.num_steps % length == 0,
                f"bptt_length={self.bptt_length} does not divide num_steps={self.num_steps}: training sequences "
                f"are whole windows of the rollout (0 means the whole rollout)")
        seqs = self.num_envs // self.num_devices * (self.num_steps // length)
        require(seqs % self.num_minibatches == 0,
                f"with memory, minibatches hold whole sequences: (num_envs / num_devices) * (num_steps / "
                f"bptt_length) = {self.num_envs // self.num_devices} * {self.num_steps // length} = {seqs} "
                f"sequences is not divisible by num_minibatches={self.num_minibatches}")

    @property
    def recurrent(self) -> bool:
        """True when the policy has memory (``memory`` is not ``"none"``)."""
        return self.memory != "none"

    @property
    def minibatch_size(self) -> int:
        """Samples per minibatch on one device."""
        return self.env_steps_per_update // self.num_devices // self.num_minibatches


class OnPolicyState(struct.PyTreeNode):
    """Everything an on-policy run needs to continue (one device's view).

    Attributes:
        params: network parameters (identical on every device).
        opt_state: optimiser state.
        env_state: the wrapped, batched env state (episode statistics and normalisers included).
        obs: current observations ``[num_envs_local, *obs_shape]``.
        key: this device's PRNG key.
        hyperparams: traced hyperparameters.
        env_params: the env params (traced, so a sweep can vary them per population member).
        updates: :class:`~rljax.core.counters.Count`, updates done so far (exact past 2**31).
        num_updates: :class:`~rljax.core.counters.Count`, updates in the whole run (learning-rate and
            exploration schedules).
        memory: a recurrent policy's memory for ``obs`` (leaves ``[num_envs_local, H]``, zeros at
            each episode's start); None without memory.
    """

    params: Any
    opt_state: Any
    env_state: Any
    obs: Any
    key: jax.Array
    hyperparams: Any
    env_params: Any
    updates: Count
    num_updates: Count
    memory: Any = None


class OnPolicyContext(NamedTuple):
    """Where one update stands in the run: what the algorithm's hooks see besides the params.

    Attributes:
        hyperparams: the state's traced hyperparameters.
        updates: :class:`~rljax.core.counters.Count` of the updates done before this one.
        num_updates: :class:`~rljax.core.counters.Count` of the updates in the whole run.
        learning_rate: float32, this update's step size (:func:`annealed_learning_rate`).
        optimizer: the algorithm's optimiser at that step size.
        values: the algorithm's per-update scalars from its ``schedule`` hook (``{}`` without one).
    """

    hyperparams: Any
    updates: Count
    num_updates: Count
    learning_rate: jax.Array
    optimizer: optax.GradientTransformation
    values: dict[str, jax.Array]

    def fraction(self, span: Any) -> jax.Array:
        """How far a schedule over the first ``span`` of the run's updates has got, float32 in
        [0, 1] (:func:`~rljax.agents.base.schedule_fraction`; 1 from the start when the span is empty)."""
        return schedule_fraction(self.updates, self.num_updates, span)


class OnPolicyHooks(NamedTuple):
    """What an on-policy algorithm hands :func:`make_onpolicy_agent`.

    Every hook but ``init_params`` and ``optimizer`` runs inside the compiled update on one device.

    Attributes:
        init_params: ``init_params(key, obs[1, ...]) -> params``; ``key`` is the same on every device.
        optimizer: ``optimizer(hyperparams, learning_rate) -> optax.GradientTransformation``; its
            state's structure must not depend on the values (both may be traced).
        behaviour: ``behaviour(params, ctx) -> policy``, ``policy(key, obs[B]) -> (action[B], extras)``
            on this device's envs (observations normalised when the stack normalises them); the
            extras land in the trajectory (e.g. PPO's log-probabilities).
        learn: ``learn(params, opt_state, traj, key, ctx) -> (params, opt_state, metrics)``: targets
            from the :class:`~rljax.core.rollout.Transition` ``traj`` ``[T, B]`` and the gradient
            steps (averaged over the device axis); metrics float32 scalars averaged over devices.
        act: ``act(params, obs[N], key, exploration, deterministic) -> action[N]``: the policy on
            normalised observations; ``deterministic`` (a Python bool) is the greedy/mean action
            (``key`` may be None); evaluation and export use it.
        exploration: ``exploration(hyperparams) -> float32 scalar``, what ``act`` reads as
            ``exploration`` (PQN: the final epsilon); None for 0.
        schedule: ``schedule(ctx) -> {name: float32 scalar}``: values computed once per update,
            read by the other hooks as ``ctx.values`` and reported as metrics; None for none.
        initial_memory: for a recurrent policy, ``initial_memory(n) -> memory`` (leaves ``[n, H]``,
            zeros); ``behaviour``'s policy is then ``policy(key, obs, memory) -> (action, extras,
            memory)`` and ``act`` is ``act(params, obs, key, exploration, deterministic, memory) ->
            (action, memory)`` (:mod:`rljax.agents.recurrent`). None for a memoryless policy.
        observe: ``observe(env_state, obs) -> x``: what ``behaviour``'s policy acts on instead of
            the observations (the rollout's ``observe``, :func:`rljax.core.rollout.rollout`), e.g. a
            search that steps copies of the envs' own states; None: the observations.
    """

    init_params: Callable[[jax.Array, Any], Any]
    optimizer: Callable[[Any, Any], optax.GradientTransformation]
    behaviour: Callable[[Any, OnPolicyContext], Callable[[jax.Array, Any], tuple[jax.Array, Any]]]
    learn: Callable[[Any, Any, Transition, jax.Array, OnPolicyContext], tuple[Any, Any, dict[str, jax.Array]]]
    act: Callable[..., Any]
    exploration: Callable[[Any], jax.Array] | None = None
    schedule: Callable[[OnPolicyContext], dict[str, jax.Array]] | None = None
    initial_memory: Callable[[int], Any] | None = None
    observe: Callable[[Any, Any], Any] | None = None


@keyed_by_identity
class OnPolicyProgram(NamedTuple):
    """An on-policy algorithm's update without its env stack: what :func:`make_onpolicy_agent`
    builds once, and what a learner fed by actors elsewhere (host envs) runs on their rollouts.

    Attributes:
        config: the algorithm's config.
        hooks: its :class:`OnPolicyHooks`.
        venv: the env stack the compiled update collects with.
        anneal_lr: the step size decays linearly to 0 over the run.
        normalize_reward: the env stack scales rewards.
        axis_name: the device axis the hooks reduce over, or None.
    """

    config: RolloutConfig
    hooks: OnPolicyHooks
    venv: Any
    anneal_lr: bool
    normalize_reward: bool
    axis_name: str | None

    def context(self, updates: Count, num_updates: Count, hyperparams: Any) -> OnPolicyContext:
        """The :class:`OnPolicyContext` of the update after ``updates`` of ``num_updates``: its step
        size, optimiser and the schedule's values."""
        lr = annealed_learning_rate(hyperparams, updates, num_updates, self.anneal_lr)
        ctx = OnPolicyContext(hyperparams=hyperparams, updates=updates, num_updates=num_updates,
                              learning_rate=lr, optimizer=self.hooks.optimizer(hyperparams, lr), values={})
        return ctx._replace(values=self.hooks.schedule(ctx) if self.hooks.schedule is not None else {})


def annealed_learning_rate(hyperparams: Any, updates: Count | jax.Array, num_updates: Count | jax.Array,
                           anneal: bool) -> jax.Array:
    """``learning_rate * (1 - updates / num_updates)`` when ``anneal`` (linear decay to 0 over the
    run, evaluated before this update), else ``learning_rate``; the counts in float32."""
    if not anneal:
        return hyperparams.learning_rate
    return hyperparams.learning_rate * (1.0 - as_float(updates) / as_float(num_updates))


def make_onpolicy_agent(config: RolloutConfig, env: Any, env_params: Any, axis_name: str | None,
                        hooks: OnPolicyHooks, *, anneal_lr: bool, normalize_obs: bool = False,
                        normalize_reward: bool = False) -> Agent:
    """An on-policy :class:`~rljax.agents.base.Agent`: an algorithm's :class:`OnPolicyHooks` in the
    shared skeleton (the update is the module docstring's).

    ``init(key, device_index, num_updates, hyperparams, env_params)``: ``k_params, k_run =
    split(key)``; ``k_env, k_state = split(fold_in(k_run, device_index))``; the envs reset with
    ``k_env``; ``params = init_params(k_params, first_obs)``; the optimiser state from
    ``optimizer(hyperparams, hyperparams.learning_rate)``. The agent's ``policy`` normalises raw
    observations with the statistics in its :class:`~rljax.agents.base.PolicyParams`, calls
    ``hooks.act`` and puts the action into the action space (Box actions clipped).

    Args:
        config: the algorithm's :class:`RolloutConfig` subclass instance (with a sweepable
            ``learning_rate``, and ``gamma`` when ``normalize_reward``).
        env: a single, unbatched env.
        env_params: its params.
        axis_name: the device axis (what the hooks reduce over), or None on one device.
        hooks: the algorithm.
        anneal_lr: decay the step size linearly to 0 over the run.
        normalize_obs: normalise observations by running statistics merged over devices.
        normalize_reward: scale rewards by the running std of the return discounted with ``gamma``.
    """
    venv = make_env_stack(env, env_params, config.num_envs // config.num_devices, normalize_obs=normalize_obs,
                          normalize_reward=normalize_reward,
                          reward_gamma=config.gamma if normalize_reward else 0.99, axis_name=axis_name,
                          randomize=config.randomize, **agent_rows(config))
    program = OnPolicyProgram(config, hooks, venv, anneal_lr, normalize_reward, axis_name)
    stats_of, normalize = observation_normalizer(venv)
    to_space = into_action_space(env.action_space(env_params))

    def policy_params(state: OnPolicyState) -> PolicyParams:
        exploration = 0.0 if hooks.exploration is None else hooks.exploration(state.hyperparams)
        return PolicyParams(state.params, stats_of(state.env_state), jnp.asarray(exploration, jnp.float32))

    def policy(pp: PolicyParams, obs: Any, key: Any, deterministic: bool) -> jax.Array:
        return to_space(hooks.act(pp.params, normalize(pp.obs_stats, obs), key, pp.exploration, deterministic))

    def recurrent_policy(pp: PolicyParams, obs: Any, key: Any, deterministic: bool, memory: Any
                         ) -> tuple[jax.Array, Any]:
        action, memory = hooks.act(pp.params, normalize(pp.obs_stats, obs), key, pp.exploration, deterministic,
                                   memory)
        return to_space(action), memory

    return Agent(config=config, init=functools.partial(_init, program), update=functools.partial(_update, program),
                 policy_params=policy_params, policy=policy if hooks.initial_memory is None else recurrent_policy,
                 env_steps_per_update=config.env_steps_per_update, params_of=lambda state: state.params,
                 initial_memory=hooks.initial_memory, onpolicy=program)


def _with_gamma(program: OnPolicyProgram, env_state: Any, hyperparams: Any) -> Any:
    """The reward normaliser discounts with the traced gamma of this state (a sweep member's, or the
    one PBT perturbed), not the config's Python float the env stack was built with."""
    return program.venv.set_gamma(env_state, hyperparams.gamma) if program.normalize_reward else env_state


def _init(program: OnPolicyProgram, key: jax.Array, device_index: Any, num_updates: int, hyperparams: Any,
          env_params: Any) -> OnPolicyState:
    """``Agent.init`` of :func:`make_onpolicy_agent`."""
    k_params, k_run = jax.random.split(key)
    k_env, k_state = jax.random.split(jax.random.fold_in(k_run, device_index))
    obs, env_state = program.venv.reset(k_env, stack_params(env_params, hyperparams))
    env_state = _with_gamma(program, env_state, hyperparams)
    params = program.hooks.init_params(k_params, first_obs(obs))
    opt_state = program.hooks.optimizer(hyperparams, hyperparams.learning_rate).init(params)
    memory = None if program.hooks.initial_memory is None else program.hooks.initial_memory(
        wrappers.batch_shape_of(program.venv)[0])  # num_envs per device; times N agents for a multi-agent env
    return OnPolicyState(params=params, opt_state=opt_state, env_state=env_state, obs=obs, key=k_state,
                         hyperparams=hyperparams, env_params=env_params, updates=Count.of(0),
                         num_updates=Count.of(num_updates), memory=memory)


def _update(program: OnPolicyProgram, state: OnPolicyState) -> tuple[OnPolicyState, UpdateOutput]:
    """``Agent.update`` of :func:`make_onpolicy_agent`."""
    hooks = program.hooks
    key, k_roll, k_learn = jax.random.split(state.key, 3)
    ctx = program.context(state.updates, state.num_updates, state.hyperparams)
    carry, traj, episodes = rollout(program.venv, stack_params(state.env_params, state.hyperparams),
                                    hooks.behaviour(state.params, ctx),
                                    RolloutCarry(_with_gamma(program, state.env_state, state.hyperparams), state.obs,
                                                 state.memory), k_roll, program.config.num_steps,
                                    observe=hooks.observe)
    params, opt_state, metrics = hooks.learn(state.params, state.opt_state, traj, k_learn, ctx)
    metrics = {**metrics, **ctx.values, "learning_rate": ctx.learning_rate,
               "param_desync": desync(params, program.axis_name)}
    new_state = state.replace(params=params, opt_state=opt_state, env_state=carry.env_state, obs=carry.obs, key=key,
                              updates=state.updates.add(1), memory=carry.memory)
    return new_state, UpdateOutput(metrics, episodes)


def minibatch_epochs(loss: Callable[[Any, Any], tuple[jax.Array, dict[str, jax.Array]]], params: Any,
                     opt_state: Any, optimizer: optax.GradientTransformation, batch: Any, key: jax.Array, *,
                     num_epochs: int, num_minibatches: int, axis_name: str | None = None
                     ) -> tuple[Any, Any, dict[str, jax.Array]]:
    """``num_epochs`` passes of ``num_minibatches`` optimiser steps on ``loss(params, minibatch) ->
    (loss, metrics)`` over ``batch`` (leaves ``[N, ...]``, this device's samples).

    Each epoch draws a fresh permutation (:func:`~rljax.agents.base.epochs_of_minibatches`); each
    step averages the gradients over ``axis_name`` (:func:`~rljax.agents.base.gradient_step`).

    Returns:
        ``(params, opt_state, metrics)``: the loss's metrics averaged over devices and over all
        steps, plus ``grad_norm`` (the averaged gradients' global norm before clipping).
    """
    def step(carry: tuple[Any, Any], minibatch: Any) -> tuple[tuple[Any, Any], dict[str, jax.Array]]:
        params, opt_state, m, grad_norm = gradient_step(loss, *carry, optimizer, minibatch, axis_name=axis_name)
        return (params, opt_state), {**pmean(m, axis_name), "grad_norm": grad_norm}

    (params, opt_state), metrics = epochs_of_minibatches(step, (params, opt_state), batch, key,
                                                         num_epochs=num_epochs, num_minibatches=num_minibatches)
    return params, opt_state, metrics


# ----------------------------------------------------------------------------------------------
# Actor-critic pieces (PPO, A2C)
# ----------------------------------------------------------------------------------------------


def actor_critic_network(config: Any, env: Any, env_params: Any, algorithm: str
                         ) -> ActorCritic | RecurrentActorCritic:
    """The :class:`~rljax.core.networks.ActorCritic` of ``config`` (``hidden_sizes``, ``activation``,
    ``shared_torso``, the encoder fields) for ``env``'s action space: a categorical policy for
    ``Discrete`` actions, a diagonal Gaussian for a flat ``Box``; any other space raises
    ``ValueError`` naming it and ``algorithm``. With a ``memory`` other than ``"none"``, the
    :class:`~rljax.core.networks.RecurrentActorCritic` (``memory``, ``memory_size``; one torso). On a
    multi-agent env, each side's view of the rows (:func:`~rljax.agents.base.agent_views`: a
    centralised critic where the rows keep the global state, with a memory of its own where
    ``config.critic_memory``), and with ``config.separate_params`` one copy per agent
    (:class:`~rljax.core.networks.PerAgent`)."""
    discrete, action_dim = space_dims(env.action_space(env_params), algorithm)
    views = agent_views(config, env, env_params)
    if getattr(config, "memory", "none") != "none":
        critic_memory = bool(views.get("critic_keys")) and getattr(config, "critic_memory", False)
        return RecurrentActorCritic(action_dim=action_dim, discrete=discrete, hidden_sizes=config.hidden_sizes,
                                    activation=config.activation,
                                    obs_layout=observation_layout(config, env, env_params, algorithm),
                                    cnn_channels=config.cnn_channels, memory=config.memory,
                                    memory_size=config.memory_size, critic_memory=critic_memory, **views)
    fields = dict(action_dim=action_dim, discrete=discrete, hidden_sizes=tuple(config.hidden_sizes),
                  activation=config.activation, shared_torso=config.shared_torso,
                  obs_layout=observation_layout(config, env, env_params, algorithm),
                  cnn_channels=tuple(config.cnn_channels), **views)
    if getattr(config, "separate_params", False):
        return PerAgent(ActorCritic, tuple(fields.items()), num_agents(env))
    return ActorCritic(**fields)


def sampling_policy(apply_fn: Any, params: Any) -> Callable[[jax.Array, Any], tuple[jax.Array, jax.Array]]:
    """The behaviour policy of an actor-critic: ``(key, obs) -> (action, log_prob)``, ``action``
    sampled from ``apply_fn(params, obs) -> (dist, value)``'s distribution."""
    def sample(key: jax.Array, obs: Any) -> tuple[jax.Array, jax.Array]:
        dist, _ = apply_fn(params, obs)
        action = dist.sample(key)
        return action, dist.log_prob(action)
    return sample


def actor_critic_act(apply_fn: Any) -> Callable[[Any, Any, Any, jax.Array, bool], jax.Array]:
    """``act(params, obs, key, exploration, deterministic)`` of an actor-critic (the ``act`` hook):
    the distribution's mode, or a sample; ``exploration`` is unused."""
    def act(params: Any, obs: Any, key: Any, exploration: jax.Array, deterministic: bool) -> jax.Array:
        dist, _ = apply_fn(params, obs)
        return dist.mode() if deterministic else dist.sample(key)
    return act


def gae_targets(apply_fn: Any, params: Any, traj: Transition, gamma: Any, gae_lambda: Any
                ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(values, advantages, targets)``, each ``[T, B]``: the critic's ``V(s_t)`` and
    :func:`rljax.core.returns.gae` over ``traj``, bootstrapping from ``V`` of the true next
    observation (so through truncation, not through termination).

    One batched critic pass over ``[T, B]`` for ``V(s_t)`` and one for ``V(true s_{t+1})``.
    """
    values = apply_fn(params, traj.obs)[1]
    next_values = apply_fn(params, traj.next_obs)[1]
    advantages, targets = gae(traj.reward, values, next_values, traj.terminated, traj.truncated, gamma, gae_lambda)
    return values, advantages, targets


def explained_variance(targets: jax.Array, values: jax.Array, axis_name: str | None = None) -> jax.Array:
    """``1 - Var[targets - values] / max(Var[targets], 1e-8)``, the moments over all devices.

    How much of the value targets' variance the behaviour values explain (1: all, 0: none, < 0:
    worse than a constant); each mean is a :func:`~rljax.agents.base.pmean` of per-device means.
    """
    t_mean = pmean(jnp.mean(targets), axis_name)
    var_t = pmean(jnp.mean(jnp.square(targets - t_mean)), axis_name)
    resid = targets - values
    r_mean = pmean(jnp.mean(resid), axis_name)
    var_r = pmean(jnp.mean(jnp.square(resid - r_mean)), axis_name)
    return 1.0 - var_r / jnp.maximum(var_t, 1e-8)
