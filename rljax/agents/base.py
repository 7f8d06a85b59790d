"""What every algorithm hands the loop, and the pieces they share.

An algorithm is ``make_<algo>(config, env, env_params, axis_name) -> Agent``. The :class:`Agent`'s
functions are the **per-device program**: they see this device's share of the env batch and reduce
across devices with collectives over ``axis_name`` (``None`` on one device, where the collectives in
:func:`pmean` and friends are the identity). The loop (``rljax.training.loop``) scans ``update`` into chunks
and maps it over devices; agents never know which backend runs them.

The shared learning pieces: :func:`make_optimizer` (clip, Adam, step), :func:`gradient_step` (grad,
average over devices, update), :func:`shuffled_minibatches` and :func:`epochs_of_minibatches`
(PPO-style epochs over a batch), :func:`schedule_fraction` (how far a schedule has got). On-policy
and off-policy algorithms each also share a whole skeleton (:mod:`rljax.agents.onpolicy`,
:mod:`rljax.agents.offpolicy`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from rljax.core import wrappers
from rljax.core.config import ENV_RANGES, RunConfig, check_choice, check_sizes, field
from rljax.core.counters import as_float
from rljax.core.distributions import clip_to_space
from rljax.env import (GLOBAL_STATE, LEGAL_ACTION_MASK, describe_space, is_discrete, masked_actions, num_agents,
                       observation_spec, uniform_legal_action)
from rljax.core.networks import ENCODERS, LeafEncoding, encoder_layout
from rljax.core.prng import permutation
from rljax.core.rollout import EpisodeSummary

__all__ = ["Agent", "PolicyParams", "observation_normalizer", "into_action_space", "greedy_or_epsilon",
           "EncoderConfig", "bounded_box", "discrete_actions", "observation_layout", "first_obs", "UpdateOutput",
           "metric_names", "pmean", "psum", "desync", "make_env_stack", "param_checksum", "space_dims",
           "make_optimizer", "gradient_step", "shuffled_minibatches", "epochs_of_minibatches", "schedule_fraction",
           "stack_params", "keyed_by_identity"]


def keyed_by_identity(cls: type) -> type:
    """``cls`` (a NamedTuple) compared and hashed by identity, not by its fields' values: for objects
    built once and then used as a cache key (an :class:`Agent` holding one), whose fields (functions,
    arrays) need not be hashable."""
    cls.__hash__ = object.__hash__
    cls.__eq__ = lambda self, other: self is other
    cls.__ne__ = lambda self, other: self is not other
    return cls


class UpdateOutput(NamedTuple):
    """What one update returns beside the new state.

    Attributes:
        metrics: dict name -> float32 scalar (already averaged over devices).
        episodes: sums over the episodes that finished during the update, over all devices.
    """

    metrics: dict[str, jax.Array]
    episodes: EpisodeSummary


class PolicyParams(NamedTuple):
    """Everything acting needs, and nothing else: what :func:`rljax.load` restores and
    ``rljax export`` folds into the exported function.

    Attributes:
        params: the acting network's parameters (PPO's actor-critic, DQN's/PQN's Q-network,
            SAC's/TD3's actor).
        obs_stats: the observation statistics (:class:`rljax.core.wrappers.RunningMeanStd`) the agent
            normalised with, or None when it did not normalise observations.
        exploration: float32 scalar, the exploration the stochastic policy adds where it is not a
            distribution (DQN/PQN: the final epsilon; TD3: the Gaussian noise std); 0 elsewhere.
    """

    params: Any
    obs_stats: Any
    exploration: jax.Array


class Agent(NamedTuple):
    """An algorithm, as the loop sees it.

    Every function is the per-device program: it sees this device's share of the envs
    (``config.num_envs // config.num_devices``) and of the replay buffer, and reduces across
    devices over the ``axis_name`` the agent was built with. States are one device's view; the loop
    stacks them over devices (and over population members in a sweep) by mapping these functions.

    Attributes:
        config: the algorithm's frozen config.
        init: ``init(key, device_index, num_updates, hyperparams, env_params) -> state``: the full
            train state of one device for a run of ``num_updates`` updates, with the traced
            ``hyperparams`` (``config.hyperparams()`` or a sweep member's) and env params (both live
            in the state, as ``state.hyperparams`` and ``state.env_params``). Params must be drawn
            from ``key`` alone (identical on every device); env and rollout keys fold in
            ``device_index`` (this device's position, an int or a traced int32 scalar).
        update: ``update(state) -> (state, UpdateOutput)``: one update (collect + learn) on this
            device; metrics are float32 scalars already averaged over devices
            (:func:`metric_names` lists them).
        policy_params: ``policy_params(state) -> PolicyParams``: what acting needs, taken from a
            train state (no collectives: any one device's state will do).
        policy: ``policy(policy_params, obs, key, deterministic) -> action``: the policy on **raw**
            env observations ``[N, *obs_shape]`` (it applies the observation normalisation the agent
            trained with) to actions ``[N, *action_shape]`` in the env's action space (Box actions
            clipped to its bounds). ``deterministic`` is a Python bool: True is the greedy/mean
            action (``key`` unused, may be None); False samples as the agent explores (PPO/SAC: the
            policy distribution; DQN/PQN: epsilon-greedy; TD3: Gaussian noise). Pure and jittable.
        env_steps_per_update: env steps per update, summed over all devices (a Python int).
        params_of: ``params_of(state) -> pytree``: the parameters that must agree across devices
            (data-parallel checks compare them; the ``param_desync`` metric is their spread).
        initial_memory: for a recurrent policy, ``initial_memory(n)``: the memory at an episode's
            start for ``n`` envs (leaves ``[n, ...]``, zeros); ``policy`` is then
            ``policy(policy_params, obs, key, deterministic, memory) -> (action, memory)``, the
            caller resetting the memory where an episode starts. None for a memoryless policy.
        offpolicy: an off-policy agent's update without its env stack
            (:class:`rljax.agents.offpolicy.OffPolicyProgram`), which a learner fed by actors on
            host envs runs; None for other agents.
        onpolicy: an on-policy agent's update without its env stack
            (:class:`rljax.agents.onpolicy.OnPolicyProgram`), likewise; None for other agents.
    """

    config: Any
    init: Callable[[jax.Array, Any, int, Any, Any], Any]
    update: Callable[[Any], tuple[Any, UpdateOutput]]
    policy_params: Callable[[Any], PolicyParams]
    policy: Callable[..., Any]
    env_steps_per_update: int
    params_of: Callable[[Any], Any]
    initial_memory: Callable[[int], Any] | None = None
    offpolicy: Any = None
    onpolicy: Any = None

    @property
    def recurrent(self) -> bool:
        """True when the policy carries a memory from step to step."""
        return self.initial_memory is not None

    def memory(self, n: int) -> Any:
        """The memory of ``n`` envs at their episodes' start: ``initial_memory(n)``, or ``()`` (no
        leaves) for a memoryless policy."""
        return () if self.initial_memory is None else self.initial_memory(n)

    def policy_step(self, policy_params: PolicyParams, obs: Any, memory: Any, key: Any, deterministic: bool
                    ) -> tuple[jax.Array, Any]:
        """``(action, memory)``: one step of the policy for either kind, the memory of a memoryless
        policy (``()``) passed through. The memory given is used as it is: reset it (e.g. with
        :func:`rljax.core.rollout.reset_memory`) where an episode starts."""
        if self.initial_memory is None:
            return self.policy(policy_params, obs, key, deterministic), memory
        return self.policy(policy_params, obs, key, deterministic, memory)

    def act(self, state: Any, obs: Any, key: jax.Array | None = None, deterministic: bool = True) -> jax.Array:
        """``policy(policy_params(state), obs, key, deterministic)``: the policy of a train state
        (one device's view) on raw observations ``[N, *obs_shape]``. A recurrent policy acts with
        the memory the state carries, which belongs to the state's own envs: ``obs`` must be their
        current observations (``state.obs``, ``N`` = the envs on this device), else ``ValueError``;
        :meth:`policy_step` acts from any memory and returns the next one."""
        if self.initial_memory is None:
            return self.policy(self.policy_params(state), obs, key, deterministic)
        n, envs = jax.tree.leaves(obs)[0].shape[0], jax.tree.leaves(state.memory)[0].shape[0]
        if n != envs:
            raise ValueError(f"a recurrent agent acts on its state's envs with their memory: obs holds {n} "
                             f"observations but the state has {envs} envs; pass state.obs, or use "
                             f"agent.policy_step(policy_params, obs, memory, key, deterministic) with a memory of "
                             f"your own (agent.memory({n}) at an episode's start)")
        return self.policy(self.policy_params(state), obs, key, deterministic, state.memory)[0]


def metric_names(agent: Agent, env_params: Any, *, axis_name: str | None = None) -> tuple[str, ...]:
    """The sorted names of the metrics ``agent.update`` returns: the metrics spec.

    Found by tracing ``init`` and one ``update`` abstractly (``jax.eval_shape``): nothing is
    compiled or run. ``axis_name`` must be the one the agent was built with when it is not None
    (the trace binds it to a device axis of size 1, so the collectives have an axis to reduce over).
    """
    def one_update(_):
        state = agent.init(jax.random.key(0), jnp.int32(0), 1, agent.config.hyperparams(), env_params)
        return agent.update(state)[1].metrics

    if axis_name is None:
        shapes = jax.eval_shape(one_update, None)
    else:
        shapes = jax.eval_shape(jax.vmap(one_update, axis_name=axis_name), jnp.zeros((1,)))
    return tuple(sorted(shapes))


def pmean(x: Any, axis_name: str | None) -> Any:
    """``lax.pmean`` over ``axis_name``; the identity when it is None (one device)."""
    return x if axis_name is None else jax.lax.pmean(x, axis_name)


def psum(x: Any, axis_name: str | None) -> Any:
    """``lax.psum`` over ``axis_name``; the identity when it is None (one device)."""
    return x if axis_name is None else jax.lax.psum(x, axis_name)


def param_checksum(params: Any) -> jax.Array:
    """A float32 scalar fingerprint of a params tree (identical params give identical bits)."""
    leaves = jax.tree.leaves(params)
    # Weighting by position makes swapped or sign-flipped blocks visible, not just changed sums.
    return sum(jnp.sum(leaf.astype(jnp.float32) * (1.0 + 0.001 * i)) for i, leaf in enumerate(leaves))


def desync(params: Any, axis_name: str | None) -> jax.Array:
    """The spread of :func:`param_checksum` across devices: exactly 0 when params agree."""
    if axis_name is None:
        return jnp.zeros((), jnp.float32)
    c = param_checksum(params)
    return jax.lax.pmax(c, axis_name) - jax.lax.pmin(c, axis_name)


def space_dims(space: Any, algorithm: str = "this algorithm") -> tuple[bool, int]:
    """``(discrete, action_dim)``: the number of actions of a ``Discrete`` space, or the size of a
    flat ``Box`` action ``(d,)``; any other action space (a Dict, a Tuple, a multi-dimensional Box, a
    MultiDiscrete) raises ``ValueError`` naming it and what ``algorithm`` supports."""
    if is_discrete(space) and np.ndim(space.n) == 0:
        return True, int(space.n)
    shape = getattr(space, "shape", None)
    if shape is None or getattr(space, "spaces", None) is not None or not hasattr(space, "low") or len(shape) != 1:
        raise ValueError(f"{algorithm} needs a Discrete action space or a flat Box of shape (d,); the action space "
                         f"is {describe_space(space)}")
    return False, int(shape[0])


def _env_name(env: Any) -> str:
    return str(getattr(env, "name", type(env).__name__))


def discrete_actions(env: Any, env_params: Any, algorithm: str) -> int:
    """The number of actions of ``env``'s action space, which ``algorithm`` (a Q-learning method:
    DQN, PQN) needs to be ``Discrete``; anything else raises ``ValueError`` naming the space."""
    space = env.action_space(env_params)
    if not (is_discrete(space) and np.ndim(space.n) == 0):
        raise ValueError(f"{algorithm} needs a Discrete action space; {_env_name(env)} has {describe_space(space)} "
                         f"(use SAC, TD3 or PPO for Box actions)")
    return int(space.n)


def bounded_box(env: Any, env_params: Any, algorithm: str) -> tuple[int, Any, Any]:
    """``(action_dim, low [A], high [A])`` (float32 numpy) of ``env``'s action space, which an
    algorithm that squashes its actions into the box (SAC, TD3) needs to be a flat ``Box`` with finite
    bounds ``low < high``; anything else raises ``ValueError`` naming the space and what would fit."""
    space = env.action_space(env_params)
    name = _env_name(env)
    if is_discrete(space):
        raise ValueError(f"{algorithm} needs a Box action space; {name} has {describe_space(space)} "
                         f"(use DQN, PQN or PPO for Discrete actions)")
    _, action_dim = space_dims(space, algorithm)
    low = np.broadcast_to(np.asarray(space.low, np.float32), (action_dim,))
    high = np.broadcast_to(np.asarray(space.high, np.float32), (action_dim,))
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(high > low)):
        raise ValueError(f"{algorithm} needs a Box action space with finite bounds low < high; "
                         f"{name} has {describe_space(space)}")
    return action_dim, low, high


def agent_rows(config: Any) -> dict[str, bool]:
    """How a multi-agent env's rows look to ``config``'s networks (:class:`rljax.core.wrappers.AgentBatch`'s
    ``agent_id`` and ``global_state``): its fields of those names, False where it has none; the agent
    id also where ``separate_params`` (each row goes to its agent's network by it)."""
    return {"agent_id": bool(getattr(config, "agent_id", False) or getattr(config, "separate_params", False)),
            "global_state": bool(getattr(config, "global_state", False))}


def agent_views(config: Any, env: Any, env_params: Any) -> dict[str, tuple[str, ...]]:
    """What each side of ``config``'s actor-critic sees of a multi-agent ``env``'s rows, as
    :class:`rljax.core.networks.ActorCritic`'s ``actor_keys`` and ``critic_keys``: where the rows keep
    the :data:`rljax.env.GLOBAL_STATE` (:func:`agent_rows`), a centralised critic on it (with the agent
    id too where ``config.critic_agent_id``) and an actor on every other leaf; else ``{}`` (both see
    the whole row).

    Raises:
        ValueError: the rows keep the global state but ``env``'s observation has none (naming its keys).
    """
    if not num_agents(env) or not agent_rows(config)["global_state"]:
        return {}
    spec = agent_observation_spec(env, env_params, **agent_rows(config))
    keys = sorted(spec) if isinstance(spec, Mapping) else []
    if GLOBAL_STATE not in keys:
        raise ValueError(f"{type(config).__name__}: a centralised critic reads the env's {GLOBAL_STATE!r}; "
                         f"{_env_name(env)}'s observation has keys {keys} (rljax.env.MultiAgentEnvironment "
                         f"documents the leaf)")
    critic = (GLOBAL_STATE,) + ((wrappers.AGENT_ID,) if getattr(config, "critic_agent_id", False)
                                and wrappers.AGENT_ID in keys else ())
    return {"actor_keys": tuple(k for k in keys if k != GLOBAL_STATE), "critic_keys": critic}


def agent_observation_spec(env: Any, env_params: Any, agent_id: bool = False, global_state: bool = False) -> Any:
    """One agent's observation as a learner's network sees it in a multi-agent ``env``: the rows of
    :class:`rljax.core.wrappers.AgentBatch` (the leading agent axis gone, the agent id added, the
    global state dropped or kept), as ``jax.ShapeDtypeStruct`` leaves (an abstract trace: nothing runs)."""
    stack = wrappers.AgentBatch(wrappers.VecEnv(env, 1), agent_id=agent_id, global_state=global_state)
    rows = jax.eval_shape(lambda key: stack.reset(key, env_params)[0], jax.random.key(0))
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), rows)


def observation_layout(config: Any, env: Any, env_params: Any, algorithm: str) -> tuple[LeafEncoding, ...]:
    """How ``algorithm``'s networks encode ``env``'s observations: :func:`rljax.core.networks.encoder_layout`
    of :func:`rljax.env.observation_spec` with ``config.encoder`` and ``config.cnn_channels``.

    Raises:
        ValueError: one line naming the algorithm, the env, its observation space and the leaf the
            chosen encoder cannot take (before anything is compiled); or a legal-action mask that is
            not one entry per action of a ``Discrete`` action space.
    """
    spec = observation_spec(env, env_params) if not num_agents(env) else agent_observation_spec(
        env, env_params, **agent_rows(config))
    if isinstance(spec, Mapping) and LEGAL_ACTION_MASK in spec:
        space, mask = env.action_space(env_params), spec[LEGAL_ACTION_MASK]
        if not is_discrete(space):
            raise ValueError(f"{algorithm}: {_env_name(env)}'s observation has a {LEGAL_ACTION_MASK} but its action "
                             f"space is {describe_space(space)}; legal-action masks are for Discrete action spaces")
        if tuple(getattr(mask, "shape", ())) != (int(space.n),):
            raise ValueError(f"{algorithm}: {_env_name(env)}'s {LEGAL_ACTION_MASK} has shape {tuple(mask.shape)}; its "
                             f"action space {describe_space(space)} needs one entry per action: ({int(space.n)},)")
    try:
        return encoder_layout(spec, config.encoder, config.cnn_channels)
    except ValueError as e:
        raise ValueError(f"{algorithm} cannot encode the observations of {_env_name(env)} "
                         f"({describe_space(env.observation_space(env_params))}): {e}") from None


def first_obs(obs: Any) -> Any:
    """The first observation of a batch, kept as a batch of one: every leaf ``[N, ...] -> [1, ...]``
    (what a network's ``init`` is traced on)."""
    return jax.tree.map(lambda x: x[:1], obs)


def make_env_stack(env: Any, env_params: Any, num_envs: int, *, normalize_obs: bool = False,
                   normalize_reward: bool = False, reward_gamma: float = 0.99,
                   axis_name: str | None = None, randomize: tuple[str, ...] = (), agent_id: bool = False,
                   global_state: bool = False) -> Any:
    """The standard training env: clip Box actions, vectorise, track episodes, normalise.

    Order matters: ``EpisodeStatistics`` sits inside reward normalisation so it logs raw returns;
    the normalisers sit outside ``VecEnv`` so one set of statistics covers the batch, merged across
    devices over ``axis_name``.

    Args:
        env: a single (unbatched) env.
        env_params: its params (used to read the action space).
        num_envs: envs on this device.
        normalize_obs: add ``NormalizeObservation``.
        normalize_reward: add ``NormalizeReward`` with discount ``reward_gamma``.
        axis_name: the device axis the normalisers merge their statistics over.
        randomize: ``NAME=LOW:HIGH`` specs of env params drawn per episode
            (:class:`rljax.core.wrappers.RandomizeParams`, innermost).
        agent_id: a multi-agent env's rows carry the agent's one-hot
            (:class:`rljax.core.wrappers.AgentBatch`).
        global_state: a multi-agent env's rows keep its :data:`rljax.env.GLOBAL_STATE` leaf (for a
            centralised critic); without, it is dropped.

    A multi-agent env (:class:`rljax.env.MultiAgentEnvironment`) becomes ``num_envs`` games of ``N``
    agents seen as ``num_envs * N`` rows (``AgentBatch(EpisodeStatistics(VecEnv(env, num_envs)))``):
    the stack's batch is its ``batch_shape``, not ``num_envs``.
    """
    if randomize:
        env = wrappers.RandomizeParams(env, wrappers.param_ranges(randomize))
    if not is_discrete(env.action_space(env_params)):
        env = wrappers.ClipAction(env)
    env = wrappers.EpisodeStatistics(wrappers.VecEnv(env, num_envs))
    if num_agents(env):
        env = wrappers.AgentBatch(env, agent_id=agent_id, global_state=global_state)
    if normalize_obs:
        env = wrappers.NormalizeObservation(env, axis_name=axis_name)
    if normalize_reward:
        env = wrappers.NormalizeReward(env, gamma=reward_gamma, axis_name=axis_name)
    return env


def stack_params(env_params: Any, hyperparams: Any) -> Any:
    """What the training env stack is given: ``env_params``, wrapped with the traced bounds of the
    run's randomisation ranges (:class:`rljax.core.wrappers.RangedParams`) when the hyperparameters
    hold any, so each sweep member draws from its own ranges."""
    bounds = getattr(hyperparams, ENV_RANGES, None)
    return env_params if bounds is None else wrappers.RangedParams(env_params, bounds)


def observation_normalizer(venv: Any) -> tuple[Callable[[Any], Any], Callable[[Any, Any], jax.Array]]:
    """How an env stack normalises observations, as two pure functions for acting.

    Finds the stack's :class:`rljax.core.wrappers.NormalizeObservation` (or its raw-observation variant
    :class:`~rljax.core.wrappers.ObservationStatistics`) by walking the wrappers and, in step, the
    ``env_state`` chain of their states.

    Returns:
        ``(stats_of, normalize)``: ``stats_of(env_state)`` is the
        :class:`~rljax.core.wrappers.RunningMeanStd` in a state of this stack (None when the stack does
        not normalise observations); ``normalize(stats, obs)`` is
        ``clip((obs - mean) / sqrt(var + epsilon), -clip, clip)`` with the wrapper's epsilon and clip,
        the identity when ``stats`` is None.
    """
    depth, env = 0, venv
    while isinstance(env, wrappers.Wrapper) and not isinstance(env, wrappers.NormalizeObservation):
        env, depth = env.env, depth + 1
    if not isinstance(env, wrappers.NormalizeObservation):
        return (lambda env_state: None), (lambda stats, obs: obs)
    wrapper = env

    def stats_of(env_state: Any) -> Any:
        for _ in range(depth):
            env_state = env_state.env_state
        return env_state.obs_stats

    def normalize(stats: Any, obs: Any) -> jax.Array:
        return obs if stats is None else stats.normalize(obs, eps=wrapper.epsilon, clip=wrapper.clip)

    return stats_of, normalize


def into_action_space(space: Any) -> Callable[[jax.Array], jax.Array]:
    """``action -> action`` as the env takes it: for a Box action space clipped to its bounds
    (:func:`rljax.core.distributions.clip_to_space`, as the training env's
    :class:`~rljax.core.wrappers.ClipAction` does); for a discrete one as int32."""
    if is_discrete(space):
        return lambda action: jnp.asarray(action).astype(jnp.int32)
    return lambda action: clip_to_space(action, space.low, space.high)


def greedy_or_epsilon(q_values: jax.Array, key: Any, epsilon: jax.Array, deterministic: bool,
                      legal: jax.Array | None = None) -> jax.Array:
    """The action of a Q-function's policy: ``argmax_a q[n, a]`` (``deterministic``), else with
    probability ``epsilon`` a uniformly random action instead (``key`` needed). ``q_values``
    ``[N, A]`` -> int32 ``[N]``. With ``legal`` (bool ``[N, A]``, the observations' legal-action
    masks) both the argmax and the random action are over the legal actions only."""
    greedy = jnp.argmax(masked_actions(q_values, legal), axis=-1).astype(jnp.int32)
    if deterministic:
        return greedy
    k_explore, k_action = jax.random.split(key)
    if legal is None:
        random = jax.random.randint(k_action, greedy.shape, 0, q_values.shape[-1], jnp.int32)
    else:
        random = uniform_legal_action(k_action, legal)
    return jnp.where(jax.random.uniform(k_explore, greedy.shape) < epsilon, random, greedy)


# ----------------------------------------------------------------------------------------------
# Learning pieces every algorithm shares
# ----------------------------------------------------------------------------------------------


def make_optimizer(learning_rate: Any, max_grad_norm: Any = None, *, eps: float = 1e-8
                   ) -> optax.GradientTransformation:
    """Global-norm clipping (unless ``max_grad_norm`` is None), then Adam, then a step of ``-learning_rate``.

    ``optax.chain(clip_by_global_norm(max_grad_norm), scale_by_adam(eps=eps), scale(-learning_rate))``.
    Both values may be traced (built inside the update from the train state's hyperparameters, so
    a sweep can vmap over them, and an annealed rate is just another value); the optimiser state's
    structure depends only on whether clipping is on, never on the values.
    """
    clip = [] if max_grad_norm is None else [optax.clip_by_global_norm(max_grad_norm)]
    return optax.chain(*clip, optax.scale_by_adam(eps=eps), optax.scale(-learning_rate))


def actor_critic_labels(params: Any) -> Any:
    """``"critic"`` for every leaf of an actor-critic's parameters on the critic's side (a key on its
    path starting with ``critic``, or ``value``: :class:`rljax.core.networks.ActorCritic`'s names, in
    any nesting, :class:`~rljax.core.networks.PerAgent`'s copies included), ``"actor"`` for the others."""
    def label(path: Any, _: Any) -> str:
        keys = [str(getattr(k, "key", getattr(k, "name", k))) for k in path]
        return "critic" if any(k.startswith("critic") or k == "value" for k in keys) else "actor"
    return jax.tree_util.tree_map_with_path(label, params)


def make_split_clip_optimizer(learning_rate: Any, max_grad_norm: Any, *, eps: float = 1e-8
                              ) -> optax.GradientTransformation:
    """:func:`make_optimizer` with the actor's and the critic's gradients clipped to ``max_grad_norm``
    each (:func:`actor_critic_labels`), as two optimisers of one step size would clip them (JaxMARL's
    MAPPO), instead of by their joint norm, where a large value-loss gradient shrinks the policy's step.
    Adam is per parameter, so one Adam over both is the two Adams."""
    clip = optax.clip_by_global_norm(max_grad_norm)
    return optax.chain(optax.multi_transform({"actor": clip, "critic": clip}, actor_critic_labels),
                       optax.scale_by_adam(eps=eps), optax.scale(-learning_rate))


def gradient_step(loss_fn: Callable[..., tuple[jax.Array, Any]], params: Any, opt_state: Any,
                  optimizer: optax.GradientTransformation, *args: Any, axis_name: str | None = None,
                  **kwargs: Any) -> tuple[Any, Any, Any, jax.Array]:
    """One data-parallel optimiser step on ``loss_fn(params, *args, **kwargs) -> (loss, aux)``.

    ``g = pmean(grad loss, axis_name)``; ``params <- apply_updates(params, optimizer.update(g))``.
    Averaging the gradients before the update keeps params identical on every device. ``axis_name``
    is this function's own keyword: a loss that needs the axis too gets it bound beforehand
    (``functools.partial(loss, axis_name=axis_name)``).

    Returns:
        ``(params, opt_state, aux, grad_norm)``: ``aux`` as the loss returned it (per device: the
        caller averages its metrics with :func:`pmean`) and ``grad_norm`` the global norm of the
        averaged gradients before clipping.
    """
    grads, aux = jax.grad(loss_fn, has_aux=True)(params, *args, **kwargs)
    grads = pmean(grads, axis_name)
    grad_norm = optax.tree.norm(grads)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    return params, opt_state, aux, grad_norm


def shuffled_minibatches(key: jax.Array, batch: Any, num_minibatches: int) -> Any:
    """``batch`` (leaves ``[N, ...]``) shuffled by one ``jax.random.permutation(key, N)`` (computed
    as :func:`rljax.core.prng.permutation`: the same bits, cheaper on the CPU) and split into leaves
    ``[num_minibatches, N // num_minibatches, ...]`` (``num_minibatches`` must divide N)."""
    n = jax.tree.leaves(batch)[0].shape[0]
    perm = permutation(key, n)
    return jax.tree.map(
        lambda x: jnp.take(x, perm, axis=0).reshape((num_minibatches, n // num_minibatches) + x.shape[1:]), batch)


def epochs_of_minibatches(step: Callable[[Any, Any], tuple[Any, Any]], carry: Any, batch: Any, key: jax.Array, *,
                          num_epochs: int, num_minibatches: int) -> tuple[Any, Any]:
    """``num_epochs`` passes over ``batch``, each in ``num_minibatches`` minibatches of a fresh permutation.

    Epoch ``e`` shuffles with the ``e``-th key of ``jax.random.split(key, num_epochs)``
    (:func:`shuffled_minibatches`) and scans ``step(carry, minibatch) -> (carry, metrics)`` over its
    minibatches (leaves ``[N // num_minibatches, ...]``).

    Returns:
        ``(carry, metrics)``, each metric averaged over all ``num_epochs * num_minibatches`` steps.
    """
    def epoch(carry, k):
        return jax.lax.scan(step, carry, shuffled_minibatches(k, batch, num_minibatches))

    carry, metrics = jax.lax.scan(epoch, carry, jax.random.split(key, num_epochs))
    return carry, jax.tree.map(jnp.mean, metrics)


def schedule_fraction(done: Any, total: Any, span: Any) -> jax.Array:
    """How far a schedule that runs over the first ``span`` of a run has got, float32 in [0, 1].

    ``clip(done / max(span * total, 1), 0, 1)``, and 1 from the start when the span is empty
    (``span * total == 0``). ``done`` and ``total`` count whole units (updates, or env steps; ints or
    :class:`~rljax.core.counters.Count`, converted to float32) so
    a span shorter than one unit is over after the first. E.g. a linear epsilon schedule is
    ``start + schedule_fraction(...) * (end - start)``.
    """
    length = span * as_float(total)
    fraction = jnp.clip(as_float(done) / jnp.maximum(length, 1.0), 0.0, 1.0)
    return jnp.where(length > 0, fraction, 1.0)


@dataclasses.dataclass(frozen=True)
class EncoderConfig(RunConfig):
    """The observation-encoder fields every built-in algorithm's config has (structural), and their
    validation (:meth:`validate_encoder`); see :func:`rljax.core.networks.encoder_layout`."""

    encoder: str = field("auto", "observation encoder: 'auto' (vectors, scalars and 2-D grids flattened into "
                                 "the MLP, images [H, W, C] through a CNN), 'mlp' (every observation leaf "
                                 "flattened), 'cnn' (a CNN for every leaf of 2 or more axes) or 'nature' (the "
                                 "Nature DQN CNN for images of 36 x 36 or more, uint8 scaled to [0, 1]: Atari)")
    cnn_channels: tuple[int, ...] = field((16,), "conv widths of the image encoder, one 3x3 stride-1 VALID conv "
                                                 "+ relu layer each (MinAtar's torso: (16,))")

    def validate_encoder(self) -> None:
        """Raises ``ValueError`` naming a bad ``encoder`` or ``cnn_channels`` and what is valid."""
        check_choice(self, "encoder", ENCODERS)
        check_sizes(self, "cnn_channels", allow_empty=False)
