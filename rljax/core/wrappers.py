"""Typed environment wrappers that keep the rljax / gymnax >= 1.0 environment contract.

Every wrapper takes an inner env (anything with ``reset``, ``step``, ``default_params``,
``observation_space`` and ``action_space``: rljax envs, gymnax envs, or other wrappers) and is itself
such an env. Each declares what it forwards; none proxies attributes with ``__getattr__``, so a typo
or a missing member fails loudly instead of silently reaching the wrong object.

Each wrapper's state is a ``flax.struct.dataclass`` whose ``env_state`` field is the inner env's state
and whose other fields are the wrapper's own (statistics, counters). States are pytrees, so a wrapped
env runs under ``jit``, ``vmap``, ``lax.scan`` and ``shard_map`` like a bare one.

Batch axes. :class:`VecEnv` adds a leading ``[num_envs]`` axis to obs, reward, flags, info and state.
Every env reports its batch axes as :func:`batch_shape_of` (``()`` for a single env, ``(num_envs,)``
for a ``VecEnv``). :class:`EpisodeStatistics`, :class:`ClipAction` and :class:`RescaleAction` are
elementwise, so they work inside or outside ``VecEnv``. :class:`NormalizeObservation` and
:class:`NormalizeReward` keep *one* statistics instance shared by the whole batch, so they belong
outside ``VecEnv``. A typical training stack, innermost first::

    env = RescaleAction(ClipAction(base_env))          # per-env action transforms
    env = RandomizeParams(base_env, param_ranges(["length=0.25:2.0"]))   # domain randomisation, per episode
    env = VecEnv(env, num_envs=64)                     # [64] batch, per-env keys
    env = EpisodeStatistics(env)                       # raw returns, before any reward scaling
    env = NormalizeObservation(env, axis_name="data")  # shared obs stats, merged across devices
    env = NormalizeReward(env, gamma=0.99, axis_name="data")
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Generic, NamedTuple, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rljax.env import GLOBAL_STATE, Box, auto_reset, is_discrete, num_agents, observation_spec

__all__ = [
    "Wrapper",
    "batch_shape_of",
    "VecEnv",
    "VecEnvState",
    "AgentBatch",
    "AGENT_ID",
    "AGENT_RETURN",
    "EpisodeInfo",
    "env_nonfinite",
    "EpisodeStatistics",
    "EpisodeStatisticsState",
    "reward_component_names",
    "RunningMeanStd",
    "NormalizeObservation",
    "NormalizeObservationState",
    "ObservationStatistics",
    "NormalizeReward",
    "NormalizeRewardState",
    "ActionWrapperState",
    "ClipAction",
    "RescaleAction",
    "transfer_stats",
    "ParamRange",
    "param_ranges",
    "check_param_ranges",
    "RandomizeParams",
    "RandomizeParamsState",
    "RangedParams",
    "range_bounds",
]

TInnerState = TypeVar("TInnerState")

StepResult = tuple[jax.Array, Any, jax.Array, jax.Array, jax.Array, dict[str, Any]]


def batch_shape_of(env: Any) -> tuple[int, ...]:
    """The leading axes of ``env``'s obs/reward/flags that index independent envs.

    Args:
        env: any env. Wrappers report ``env.batch_shape``; a bare env (rljax or gymnax) has none and
            is a single env.

    Returns:
        ``()`` for a single env, ``(num_envs,)`` for a :class:`VecEnv`, ``(n, m)`` for a ``VecEnv``
        of ``VecEnv``s.
    """
    # A bare env does not know about batching; only wrappers declare batch_shape.
    return tuple(getattr(env, "batch_shape", ()))


def _resolve_params(env: Any, params: Any) -> Any:
    # Both rljax and gymnax treat params=None as "the defaults"; wrappers that read the params
    # themselves (spaces, bounds) must resolve it before use.
    return env.default_params if params is None else params


def _is_positive_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x > 0


# --------------------------------------------------------------------------------------------------
# Base wrapper
# --------------------------------------------------------------------------------------------------


class Wrapper(Generic[TInnerState]):
    """Base class: holds the inner env and forwards the members a wrapper does not change.

    Forwarded explicitly: ``default_params``, ``observation_space``, ``action_space``,
    ``batch_shape``. Subclasses implement ``reset`` and ``step`` and override whatever they change.

    Args:
        env: the inner env.
    """

    def __init__(self, env: Any):
        self.env = env

    @property
    def name(self) -> str:
        """``"Wrapper(inner name)"``, e.g. ``"VecEnv(CartPole-v1)"``."""
        inner = getattr(self.env, "name", type(self.env).__name__)
        return f"{type(self).__name__}({inner})"

    @property
    def unwrapped(self) -> Any:
        """The innermost, unwrapped env."""
        return self.env.unwrapped if isinstance(self.env, Wrapper) else self.env

    @property
    def default_params(self) -> Any:
        """The inner env's default params."""
        return self.env.default_params

    @property
    def batch_shape(self) -> tuple[int, ...]:
        """The inner env's batch axes (see :func:`batch_shape_of`)."""
        return batch_shape_of(self.env)

    def observation_space(self, params: Any = None) -> Any:
        """The inner env's observation space (of one env, without batch axes)."""
        return self.env.observation_space(_resolve_params(self.env, params))

    def action_space(self, params: Any = None) -> Any:
        """The inner env's action space (of one env, without batch axes)."""
        return self.env.action_space(_resolve_params(self.env, params))

    def reset(self, key: jax.Array, params: Any = None) -> tuple[jax.Array, Any]:
        raise NotImplementedError

    def step(self, key: jax.Array, state: Any, action: Any, params: Any = None) -> StepResult:
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.name


# --------------------------------------------------------------------------------------------------
# VecEnv
# --------------------------------------------------------------------------------------------------


@struct.dataclass
class VecEnvState(Generic[TInnerState]):
    """State of a :class:`VecEnv`.

    Attributes:
        env_state: the inner state, every leaf with a leading ``[num_envs]`` axis.
    """

    env_state: TInnerState


class VecEnv(Wrapper[TInnerState]):
    """``num_envs`` independent copies of ``env``, vectorised with ``jax.vmap``.

    ``reset`` and ``step`` split their single key into ``num_envs`` per-env keys (with
    ``jax.random.split(key, num_envs)``), so the envs draw independent randomness: env ``i`` gets
    ``split(key, num_envs)[i]``, exactly what a manual per-env loop with those keys would use.

    Params are shared by every env by default (``in_axes=None``). With ``batched_params=True`` every
    params leaf carries a leading ``[num_envs]`` axis and env ``i`` runs with params ``i``, e.g. for
    domain randomisation (build such params with :meth:`stack_params`; ``default_params`` is then the
    inner defaults broadcast to ``[num_envs]``). Params leaves the inner env uses as Python values
    (shapes, loop bounds) cannot be batched.

    Args:
        env: the inner env (a single env, or a wrapper over one).
        num_envs: the number of copies, a positive Python int.
        batched_params: whether params carry a leading ``[num_envs]`` axis.

    Raises:
        ValueError: ``num_envs`` is not a positive int.
    """

    def __init__(self, env: Any, num_envs: int, batched_params: bool = False):
        if not _is_positive_int(num_envs):
            raise ValueError(f"VecEnv(num_envs={num_envs!r}): num_envs must be a positive int")
        super().__init__(env)
        self.num_envs = int(num_envs)
        self.batched_params = bool(batched_params)
        # vmap's in_axes for the params argument: 0 maps over per-env params, None broadcasts.
        self._params_axis = 0 if self.batched_params else None

    @property
    def batch_shape(self) -> tuple[int, ...]:
        """``(num_envs, *inner batch_shape)``."""
        return (self.num_envs, *batch_shape_of(self.env))

    @property
    def default_params(self) -> Any:
        """The inner defaults; with ``batched_params`` each leaf broadcast to ``[num_envs, ...]``."""
        params = self.env.default_params
        if not self.batched_params:
            return params
        return jax.tree.map(lambda x: jnp.broadcast_to(jnp.asarray(x), (self.num_envs, *jnp.shape(x))),
                            params)

    @staticmethod
    def stack_params(params_list: list[Any]) -> Any:
        """Stacks per-env params into batched params for ``batched_params=True``.

        Args:
            params_list: ``num_envs`` params pytrees of identical structure.

        Returns:
            One pytree whose leaves have a leading ``[len(params_list)]`` axis.
        """
        return jax.tree.map(lambda *xs: jnp.stack([jnp.asarray(x) for x in xs]), *params_list)

    def _single_params(self, params: Any) -> Any:
        # Spaces describe one env; with batched params we report env 0's (documented).
        params = _resolve_params(self, params)
        if not self.batched_params:
            return params
        return jax.tree.map(lambda x: x[0], params)

    def observation_space(self, params: Any = None) -> Any:
        """The observation space of one env (env 0's when params are batched)."""
        return self.env.observation_space(self._single_params(params))

    def action_space(self, params: Any = None) -> Any:
        """The action space of one env (env 0's when params are batched)."""
        return self.env.action_space(self._single_params(params))

    def reset(self, key: jax.Array, params: Any = None) -> tuple[jax.Array, VecEnvState]:
        """Resets every env with its own key.

        Args:
            key: one PRNG key, split into ``num_envs`` keys.
            params: shared params, or batched params (leading ``[num_envs]``) when ``batched_params``;
                ``default_params`` when None.

        Returns:
            ``(obs [num_envs, *obs_shape], VecEnvState)``.
        """
        params = _resolve_params(self, params)
        keys = jax.random.split(key, self.num_envs)
        obs, env_state = jax.vmap(self.env.reset, in_axes=(0, self._params_axis))(keys, params)
        return obs, VecEnvState(env_state=env_state)

    def step(self, key: jax.Array, state: VecEnvState, action: Any, params: Any = None) -> StepResult:
        """Steps every env with its own key and action (auto-resetting each independently).

        Args:
            key: one PRNG key, split into ``num_envs`` keys.
            state: the ``VecEnvState``.
            action: actions ``[num_envs, *action_shape]``.
            params: as in :meth:`reset`.

        Returns:
            ``(obs [N, *obs_shape], state, reward [N] float32, terminated [N] bool, truncated [N] bool,
            info)`` with every info leaf batched ``[N, ...]``.
        """
        params = _resolve_params(self, params)
        keys = jax.random.split(key, self.num_envs)
        obs, env_state, reward, terminated, truncated, info = jax.vmap(
            self.env.step, in_axes=(0, 0, 0, self._params_axis))(keys, state.env_state, action, params)
        return obs, VecEnvState(env_state=env_state), reward, terminated, truncated, info


# --------------------------------------------------------------------------------------------------
# AgentBatch: a vector of multi-agent envs as a batch of single agents
# --------------------------------------------------------------------------------------------------

AGENT_ID = "agent_id"
"""The observation key :class:`AgentBatch` adds with ``agent_id=True``: float32 ``[num_agents]``, the
one-hot of which agent the observation is (what lets one shared network act differently per agent)."""

AGENT_RETURN = "agent_return/"
"""The prefix of the per-agent episode returns :class:`AgentBatch` reports among the episode's
components (``info["episode"].components["agent_return/agent_0"]``, ...): the metrics rows carry them
under these names, beside the team's ``episode_return_mean``."""


class AgentBatch(Wrapper[TInnerState]):
    """``E`` multi-agent envs of ``N`` agents (``VecEnv(env, E)`` of a
    :class:`rljax.env.MultiAgentEnvironment`: leaves ``[E, N, ...]``) seen as a batch of ``E * N``
    single agents, env-major (row ``e * N + i`` is agent ``i`` of env ``e``): every observation leaf,
    ``info["final_observation"]``, reward and flag ``[E, N, ...] -> [E * N, ...]``, actions
    ``[E * N, ...] -> [E, N, ...]``; the env's other info leaves (``[E, ...]``, the episode's) are
    repeated for each agent. So an agent's reward, ``terminated`` and ``truncated`` are its own and a
    single-agent learner trains every agent with one network (parameter sharing).

    With :class:`EpisodeStatistics` inside (``AgentBatch(EpisodeStatistics(VecEnv(env, E)))``, what
    :func:`rljax.agents.base.make_env_stack` builds), ``info["episode"]`` counts each finished
    multi-agent episode once, on its agent 0's row: ``return_`` is the team's return (the sum of
    its agents' returns), ``length`` the episode's, and ``components`` gain each agent's return as
    ``agent_return/<agent>`` (:data:`AGENT_RETURN`; ``<agent>`` from the env's ``agent_names``, else
    ``agent_<i>``) beside the env's own reward terms summed over its agents.

    Args:
        env: a batched multi-agent env stack (batch shape ``(E,)``).
        agent_id: add the :data:`AGENT_ID` one-hot to each observation (a dict observation keeps its
            leaves; an array one becomes ``{"observation": obs, "agent_id": ...}``).
        global_state: keep the env's :data:`rljax.env.GLOBAL_STATE` leaf (False: drop it, for
            learners whose networks see each agent's own observation only).

    Raises:
        ValueError: ``env`` is not a multi-agent env, or its batch is not one axis.
    """

    def __init__(self, env: Any, agent_id: bool = False, global_state: bool = True):
        n = num_agents(env)
        if n < 1:
            raise ValueError(f"AgentBatch({getattr(env, 'name', type(env).__name__)}): not a multi-agent env "
                             f"(no num_agents); AgentBatch is for rljax.env.MultiAgentEnvironment envs")
        if len(batch_shape_of(env)) != 1:
            raise ValueError(f"AgentBatch: the inner env's batch shape is {batch_shape_of(env)}; give "
                             f"VecEnv(env, num_envs) (one batch axis)")
        super().__init__(env)
        self.num_agents = n
        self.agent_id = bool(agent_id)
        self.global_state = bool(global_state)
        names = getattr(self.unwrapped, "agent_names", None)
        self.agent_names = tuple(names) if names else tuple(f"agent_{i}" for i in range(n))

    @property
    def batch_shape(self) -> tuple[int, ...]:
        """``(E * N,)``."""
        return (batch_shape_of(self.env)[0] * self.num_agents,)

    def observation_space(self, params: Any = None) -> Any:
        """One agent's observation space, with the agent id's ``Box(0, 1, (N,))`` when added."""
        space = self.env.observation_space(_resolve_params(self.env, params))
        return self._row(space, lambda: Box(0.0, 1.0, (self.num_agents,)))

    def _row(self, tree: Any, agent_id: Callable[[], Any]) -> Any:
        """An observation (or its space) as the rows show it: the global state dropped unless kept,
        the ``agent_id()`` leaf added when asked (an array observation becomes a dict for it)."""
        if isinstance(tree, dict) and not self.global_state:
            tree = {k: v for k, v in tree.items() if k != GLOBAL_STATE}
        if not self.agent_id:
            return tree
        return {**tree, AGENT_ID: agent_id()} if isinstance(tree, dict) else {"observation": tree, AGENT_ID: agent_id()}

    def _obs(self, obs: Any) -> Any:
        return self.rows(obs)

    def rows(self, obs: Any) -> Any:
        """The inner envs' observations (leaves ``[E, N, ...]``) as the rows show them (``[E * N, ...]``,
        the agent id added, the global state dropped or kept): what a learner's network is given."""
        games = jax.tree.leaves(obs)[0].shape[0]
        flat = jax.tree.map(lambda x: x.reshape((-1, *x.shape[2:])), obs)
        return self._row(flat, lambda: jnp.tile(jnp.eye(self.num_agents, dtype=jnp.float32), (games, 1)))

    def reset(self, key: jax.Array, params: Any = None) -> tuple[Any, Any]:
        """The inner reset, its observations ``[E * N, ...]``."""
        obs, state = self.env.reset(key, params)
        return self._obs(obs), state

    def step(self, key: jax.Array, state: Any, action: Any, params: Any = None) -> StepResult:
        """Steps every env with its agents' actions (``[E * N, ...]``); the outputs per agent."""
        rows = batch_shape_of(self.env)[0]
        action = jax.tree.map(lambda a: a.reshape((rows, self.num_agents, *a.shape[1:])), action)
        obs, state, reward, terminated, truncated, info = self.env.step(key, state, action, params)
        extra = {k: v for k, v in info.items() if k not in ("final_observation", "episode")}
        out = {**jax.tree.map(lambda x: jnp.repeat(x, self.num_agents, axis=0), extra),
               "final_observation": self._obs(info["final_observation"])}
        if "episode" in info:
            out["episode"] = self._team_episode(info["episode"])
        return (self._obs(obs), state, reward.reshape(-1), terminated.reshape(-1), truncated.reshape(-1), out)

    def _team_episode(self, ep: EpisodeInfo) -> EpisodeInfo:
        """An :class:`EpisodeStatistics` record of ``[E, N]`` fields as ``[E * N]`` ones: each finished
        episode on its agent 0's row, the team's return there, each agent's among the components."""
        first = jnp.arange(self.num_agents) == 0

        def on_first(x: jax.Array) -> jax.Array:  # [E] -> [E * N], zeros off agent 0's rows
            return jnp.where(first, x[:, None], jnp.zeros((), x.dtype)).reshape(-1)

        components = {k: on_first(jnp.sum(v, axis=-1)) for k, v in ep.components.items()}
        components.update({AGENT_RETURN + name: on_first(ep.return_[:, i]) for i, name in enumerate(self.agent_names)})
        return EpisodeInfo(done=on_first(ep.done[:, 0]), return_=on_first(jnp.sum(ep.return_, axis=-1)),
                           length=on_first(ep.length[:, 0]), components=components,
                           nonfinite=None if ep.nonfinite is None else ep.nonfinite.reshape(-1))


# --------------------------------------------------------------------------------------------------
# EpisodeStatistics
# --------------------------------------------------------------------------------------------------


class EpisodeInfo(NamedTuple):
    """Per-step episode summary that :class:`EpisodeStatistics` puts in ``info["episode"]``.

    Every field has the env's batch shape (``()`` for one env, ``[num_envs]`` for a ``VecEnv``).

    Attributes:
        done: bool, an episode finished on this step (``terminated | truncated``).
        return_: float32, the finished episode's undiscounted return where ``done``, else 0.
        length: int32, the finished episode's number of steps where ``done``, else 0.
        components: dict name -> float32, the finished episode's sum of each reward term the env
            reports in ``info["reward_components"]`` (where ``done``, else 0); empty if it reports none.
        nonfinite: float32, how many NaN/inf values the env returned on this step (in the observation's
            floating leaves and the reward) for a finite action: the env's own fault, which no learning
            rate cures (:func:`env_nonfinite`). None when not counted.
    """

    done: jax.Array
    return_: jax.Array
    length: jax.Array
    components: dict[str, jax.Array] = {}
    nonfinite: jax.Array | None = None


def env_nonfinite(obs: Any, reward: jax.Array, action: Any) -> jax.Array:
    """Per env (the reward's batch shape), the number of NaN/inf values in ``obs``'s floating leaves
    and in ``reward``, counted only where every value of ``action`` is finite (an env given a NaN
    action may return NaN: then the policy diverged, not the env). float32."""
    batch = jnp.shape(reward)

    def count(x: Any, finite: bool = False) -> jax.Array:
        x = jnp.asarray(x)
        if not jnp.issubdtype(x.dtype, jnp.inexact):
            return jnp.ones(batch, bool) if finite else jnp.zeros(batch, jnp.float32)
        ok = jnp.isfinite(x).reshape(batch + (-1,))
        return jnp.all(ok, -1) if finite else jnp.sum(~ok, -1).astype(jnp.float32)

    bad = sum((count(x) for x in jax.tree.leaves(obs)), count(reward))
    finite_action = functools.reduce(jnp.logical_and, (count(a, True) for a in jax.tree.leaves(action)),
                                     jnp.ones(batch, bool))
    return jnp.where(finite_action, bad, 0.0)


@struct.dataclass
class EpisodeStatisticsState(Generic[TInnerState]):
    """State of :class:`EpisodeStatistics`; every field but ``env_state`` has the batch shape.

    Attributes:
        env_state: the inner env's state.
        episode_return: float32, undiscounted return of the current episode so far.
        episode_length: int32, steps taken in the current episode so far.
        episodes: int32, episodes completed since reset.
        last_return: float32, the return of the most recently completed episode (0 before any).
        last_length: int32, the length of the most recently completed episode (0 before any).
        episode_components: dict name -> float32, per-term reward sums of the current episode.
    """

    env_state: TInnerState
    episode_return: jax.Array
    episode_length: jax.Array
    episodes: jax.Array
    last_return: jax.Array
    last_length: jax.Array
    episode_components: dict[str, jax.Array] = struct.field(default_factory=dict)


def reward_component_names(env: Any, params: Any = None) -> tuple[str, ...]:
    """The names in ``info["reward_components"]`` of ``env.step`` (``()`` if it reports none).

    Found by tracing one step abstractly (``jax.eval_shape``): nothing runs, no key is consumed.
    """
    params = env.default_params if params is None else params
    shape = batch_shape_of(env)
    agents = num_agents(env)

    def one_step(key: jax.Array) -> Any:
        k_reset, k_act, k_step = jax.random.split(key, 3)
        _, state = env.reset(k_reset, params)
        space = env.action_space(params)
        action = space.sample(k_act)
        if agents:
            action = jnp.broadcast_to(action, (agents, *jnp.shape(action)))
        if shape:
            action = jnp.broadcast_to(action, shape + tuple(jnp.shape(action)))
        return env.step(k_step, state, action, params)[5]

    info = jax.eval_shape(one_step, jax.random.key(0))
    return tuple(sorted(info.get("reward_components", {}))) if isinstance(info, dict) else ()


class EpisodeStatistics(Wrapper[TInnerState]):
    """Tracks each episode's undiscounted return and length, reporting them in ``info["episode"]``.

    All updates are elementwise, so the wrapper works on a single env, inside ``VecEnv`` (vmapped) or
    outside it (on ``[num_envs]`` arrays) with the same results. On a step with
    ``terminated | truncated`` the step's reward and the step itself count toward the finished
    episode, whose totals go to ``info["episode"]``; the counters then restart at 0 for the episode
    the auto-reset began. It records the rewards it sees, so place it inside any reward
    normalisation to log raw returns.

    When the env reports named reward terms in ``info["reward_components"]``, their per-episode sums
    are tracked the same way (users debug the MDP, not just the scalar return). The names are read
    once, at construction, by tracing one step (:func:`reward_component_names`).

    Args:
        env: the inner env.
    """

    def __init__(self, env: Any):
        super().__init__(env)
        self.component_names = reward_component_names(env)
        self.num_agents = num_agents(env)

    def reset(self, key: jax.Array, params: Any = None) -> tuple[jax.Array, EpisodeStatisticsState]:
        """Resets the inner env and zeroes every counter.

        Args:
            key: a PRNG key, passed to the inner env.
            params: env params.

        Returns:
            ``(obs, EpisodeStatisticsState)``; counters have shape ``batch_shape``.
        """
        obs, env_state = self.env.reset(key, params)
        # reset's outputs carry no reward to read a batch shape from, so the env declares it.
        shape = self.batch_shape + ((self.num_agents,) if self.num_agents else ())
        zeros_f = jnp.zeros(shape, jnp.float32)
        zeros_i = jnp.zeros(shape, jnp.int32)
        state = EpisodeStatisticsState(env_state=env_state, episode_return=zeros_f,
                                       episode_length=zeros_i, episodes=zeros_i,
                                       last_return=zeros_f, last_length=zeros_i,
                                       episode_components={k: zeros_f for k in self.component_names})
        return obs, state

    def step(self, key: jax.Array, state: EpisodeStatisticsState, action: Any,
             params: Any = None) -> StepResult:
        """Steps the inner env and updates the episode counters.

        Args:
            key: a PRNG key, passed to the inner env.
            state: the ``EpisodeStatisticsState``.
            action: the inner env's action (batched as the inner env expects).
            params: env params.

        Returns:
            The inner step's ``(obs, state, reward, terminated, truncated, info)`` with the state
            wrapped and ``info["episode"]`` an :class:`EpisodeInfo`.
        """
        obs, env_state, reward, terminated, truncated, info = self.env.step(
            key, state.env_state, action, params)
        done = jnp.logical_or(terminated, truncated)
        if self.num_agents:  # [..., N]: every agent's episode ends with the team's (all of them done)
            done = jnp.broadcast_to(jnp.all(done, axis=-1, keepdims=True), done.shape)
        # The last step's reward belongs to the finished episode: add before testing done.
        new_return = state.episode_return + jnp.asarray(reward, jnp.float32)
        new_length = state.episode_length + 1
        reported = info.get("reward_components", {})
        new_components = {k: state.episode_components[k] + jnp.asarray(reported[k], jnp.float32)
                          for k in self.component_names}
        episode = EpisodeInfo(
            done=done,
            return_=jnp.where(done, new_return, 0.0).astype(jnp.float32),
            length=jnp.where(done, new_length, 0).astype(jnp.int32),
            components={k: jnp.where(done, v, 0.0) for k, v in new_components.items()},
            nonfinite=env_nonfinite(obs, reward, action),
        )
        state = EpisodeStatisticsState(
            env_state=env_state,
            # The auto-reset started a new episode where done: its counters start at 0.
            episode_return=jnp.where(done, 0.0, new_return).astype(jnp.float32),
            episode_length=jnp.where(done, 0, new_length).astype(jnp.int32),
            episodes=state.episodes + done.astype(jnp.int32),
            last_return=jnp.where(done, new_return, state.last_return).astype(jnp.float32),
            last_length=jnp.where(done, new_length, state.last_length).astype(jnp.int32),
            episode_components={k: jnp.where(done, 0.0, v) for k, v in new_components.items()},
        )
        return obs, state, reward, terminated, truncated, {**info, "episode": episode}


# --------------------------------------------------------------------------------------------------
# RunningMeanStd
# --------------------------------------------------------------------------------------------------


@struct.dataclass
class RunningMeanStd:
    """Running mean and (population) variance of a stream of arrays, as a pytree.

    All methods are pure and return new statistics; call them as methods (``stats.update(x)``) or as
    functions (``RunningMeanStd.update(stats, x)``). Statistics combine exactly with the parallel
    formula of Chan et al., so updating with several batches, merging statistics of disjoint data,
    and merging across devices all equal the statistics of the union (up to float32 rounding).

    The count is a compensated pair of float32 scalars, ``count + count_lo`` (a "double-float", as in
    Kahan/Knuth summation): ``count`` is the float32 nearest the total and ``count_lo`` the rounding
    remainder. Every merge adds the pairs with an error-free two-sum, so integer counts are exact up
    to ~2**48 (the pseudo-count prior of 1e-4 is kept to ~2**-48 of the total). A single float32
    would stop growing once a batch is below half an ulp of the count: with batches of 4 samples at
    2**26, and with any batch size eventually. Only float32 is used, since float64 is off by default
    in JAX.

    Attributes:
        mean: float32 ``[*shape]``.
        var: float32 ``[*shape]``, population variance (divides by the count).
        count: float32 scalar, the (pseudo-)number of samples rounded to float32.
        count_lo: float32 scalar, the exact count minus ``count`` (``|count_lo| <= ulp(count) / 2``).
    """

    mean: jax.Array
    var: jax.Array
    count: jax.Array
    count_lo: jax.Array = 0.0

    @property
    def exact_count(self) -> np.ndarray:
        """The count ``count + count_lo`` as a float64 NumPy value (host side, for inspection)."""
        return np.asarray(self.count, np.float64) + np.asarray(self.count_lo, np.float64)

    @classmethod
    def init(cls, shape: tuple[int, ...] = (), count: float = 1e-4) -> RunningMeanStd:
        """The prior statistics: mean 0, var 1, a small pseudo-count (Gymnasium's choice).

        Args:
            shape: the shape of one sample.
            count: the prior's weight; the tiny default makes the first real batch dominate while
                keeping every division well defined.

        Returns:
            ``RunningMeanStd`` with ``mean [*shape] = 0``, ``var [*shape] = 1``.
        """
        return cls(mean=jnp.zeros(shape, jnp.float32), var=jnp.ones(shape, jnp.float32),
                   count=jnp.asarray(count, jnp.float32), count_lo=jnp.zeros((), jnp.float32))

    @classmethod
    def from_batch(cls, batch: jax.typing.ArrayLike, mask: jax.typing.ArrayLike | None = None) -> RunningMeanStd:
        """The exact statistics of one batch, or of its rows where ``mask``.

        Args:
            batch: ``[N, *shape]`` samples, N >= 1.
            mask: optional bool ``[N]``: only these rows count (none: a count of 0, which adds
                nothing when merged).

        Returns:
            ``count = N``, ``mean = batch.mean(0)``, ``var = batch.var(0)`` (population); with ``mask``
            the same over the masked rows.
        """
        batch = jnp.asarray(batch, jnp.float32)
        if mask is None:
            return cls(mean=jnp.mean(batch, axis=0), var=jnp.var(batch, axis=0),
                       count=jnp.asarray(batch.shape[0], jnp.float32), count_lo=jnp.zeros((), jnp.float32))
        w = jnp.asarray(mask).astype(jnp.float32)
        count = jnp.sum(w)
        w = w.reshape((-1,) + (1,) * (batch.ndim - 1))
        mean = jnp.sum(w * batch, axis=0) / jnp.maximum(count, 1.0)
        var = jnp.sum(w * jnp.square(batch - mean), axis=0) / jnp.maximum(count, 1.0)
        return cls(mean=mean, var=var, count=count, count_lo=jnp.zeros((), jnp.float32))

    def merge(self, other: RunningMeanStd) -> RunningMeanStd:
        """The exact statistics of the union of the data behind ``self`` and ``other``.

        Chan et al.'s pairwise formula: with ``d = mean_b - mean_a`` and ``n = n_a + n_b``,
        ``mean = mean_a + d * n_b / n`` and
        ``var = (var_a * n_a + var_b * n_b + d**2 * n_a * n_b / n) / n``.

        The counts in these formulas are float32 (``count + count_lo`` rounded); the stored count is
        the exact compensated sum of both pairs (class docstring).

        Args:
            other: statistics of the same shape, over data disjoint from ``self``'s.

        Returns:
            The combined ``RunningMeanStd``.
        """
        n_a, n_b = self._count32(), other._count32()
        count = n_a + n_b
        delta = other.mean - self.mean
        mean = self.mean + delta * (n_b / count)
        m2 = self.var * n_a + other.var * n_b + jnp.square(delta) * (n_a * n_b / count)
        hi, lo = _add_counts((self.count, self.count_lo), (other.count, other.count_lo))
        return RunningMeanStd(mean=mean, var=m2 / count, count=hi, count_lo=lo)

    def _count32(self) -> jax.Array:
        return jnp.asarray(self.count, jnp.float32) + jnp.asarray(self.count_lo, jnp.float32)

    def pmean(self, axis_name: Any) -> RunningMeanStd:
        """Exactly combines the statistics held along a named axis (devices under ``shard_map`` /
        ``pmap``, or a ``vmap`` with ``axis_name``); every member gets the same result.

        Two psums: ``n = psum(count)``, ``mean = psum(count * mean) / n``, then
        ``var = psum(count * (var + (mean_i - mean)**2)) / n`` (the law of total variance; centring
        on the global mean first avoids the cancellation of ``E[x^2] - mean^2``).

        The members must describe *disjoint* data. Merging replicas of one shared statistic would
        count it once per device: to update shared statistics with per-device batches, combine the
        batch statistics and merge them once, as :meth:`update` with ``axis_name`` does.

        Args:
            axis_name: the named axis to combine over.

        Returns:
            The statistics of all members' data together.
        """
        n = self._count32()
        count = jax.lax.psum(n, axis_name)
        mean = jax.lax.psum(n * self.mean, axis_name) / count
        m2 = jax.lax.psum(n * (self.var + jnp.square(self.mean - mean)), axis_name)
        # The stored count: every member's pair gathered and added with exact two-sums, in axis
        # order, so all members get the same bits (a psum of float32 counts could round).
        his = jax.lax.all_gather(jnp.asarray(self.count, jnp.float32), axis_name)
        los = jax.lax.all_gather(jnp.asarray(self.count_lo, jnp.float32), axis_name)
        total = (his[0], los[0])
        for i in range(1, his.shape[0]):
            total = _add_counts(total, (his[i], los[i]))
        return RunningMeanStd(mean=mean, var=m2 / count, count=total[0], count_lo=total[1])

    def update(self, batch: jax.typing.ArrayLike, axis_name: Any = None) -> RunningMeanStd:
        """Adds a batch of samples.

        Args:
            batch: ``[N, *shape]`` samples.
            axis_name: when given, every member of that named axis passes its own batch and all of
                them get the statistics updated with every member's batch (the shared prior is
                counted once). Must then be called inside ``shard_map``/``pmap``/named ``vmap``.

        Returns:
            The updated ``RunningMeanStd``.
        """
        batch_stats = RunningMeanStd.from_batch(batch)
        if axis_name is not None:
            batch_stats = batch_stats.pmean(axis_name)
        return self.merge(batch_stats)

    def normalize(self, x: jax.typing.ArrayLike, eps: float = 1e-8,
                  clip: float | None = 10.0) -> jax.Array:
        """``clip((x - mean) / sqrt(var + eps), -clip, clip)``.

        Args:
            x: ``[..., *shape]`` values (leading axes broadcast).
            eps: added to the variance so a constant feature does not divide by zero.
            clip: the bound on the result's magnitude; None for no clipping.

        Returns:
            float32 array of ``x``'s shape.
        """
        y = (jnp.asarray(x, jnp.float32) - self.mean) / jnp.sqrt(self.var + eps)
        return y if clip is None else jnp.clip(y, -clip, clip)


def _two_sum(a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Knuth's error-free sum: ``s = fl(a + b)`` and ``e`` with ``s + e == a + b`` exactly."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _add_counts(a: tuple[jax.Array, jax.Array], b: tuple[jax.Array, jax.Array]
                ) -> tuple[jax.Array, jax.Array]:
    """``(hi, lo)`` of the sum of two double-float counts, renormalised so ``|lo| <= ulp(hi) / 2``."""
    a_hi, a_lo = jnp.asarray(a[0], jnp.float32), jnp.asarray(a[1], jnp.float32)
    b_hi, b_lo = jnp.asarray(b[0], jnp.float32), jnp.asarray(b[1], jnp.float32)
    hi, err = _two_sum(a_hi, b_hi)
    return _two_sum(hi, err + (a_lo + b_lo))


def _flatten_batch(x: jax.Array, batch_shape: tuple[int, ...]) -> jax.Array:
    # [*batch_shape, *sample_shape] -> [prod(batch_shape), *sample_shape]; a single env is a batch
    # of one.
    x = jnp.asarray(x, jnp.float32)
    return x.reshape((-1, *x.shape[len(batch_shape):]))


# --------------------------------------------------------------------------------------------------
# NormalizeObservation
# --------------------------------------------------------------------------------------------------


@struct.dataclass
class NormalizeObservationState(Generic[TInnerState]):
    """State of :class:`NormalizeObservation`.

    Attributes:
        env_state: the inner env's state.
        obs_stats: the shared observation statistics, ``mean``/``var`` of shape ``[*obs_shape]``.
    """

    env_state: TInnerState
    obs_stats: RunningMeanStd


class NormalizeObservation(Wrapper[TInnerState]):
    """Normalises observations with running statistics shared by the whole batch.

    Apply it outside :class:`VecEnv`: it sees ``[num_envs, *obs_shape]`` obs and keeps one
    :class:`RunningMeanStd` over all of them (inside a ``VecEnv`` every env would get its own). The
    statistics start at mean 0, var 1, count 1e-4 and are updated (unless ``frozen``) with every
    observation ``reset`` and ``step`` return, the post-auto-reset ones included; then ``obs`` and
    ``info["final_observation"]`` are normalised with the same, updated statistics, so a value target
    bootstrapped from the final observation sees the same scale as the policy.

    With ``axis_name`` (data-parallel training under ``shard_map``/``pmap``), each update combines
    every device's batch exactly, so all devices keep identical statistics; ``reset`` and ``step``
    must then run inside that named-axis context.

    Evaluation: ``frozen=True`` (or :meth:`freeze`) normalises with the stored statistics and never
    updates them. A frozen env's ``reset`` starts from the prior statistics, so load the trained ones
    into its state with :meth:`set_stats` or :func:`transfer_stats`.

    Args:
        env: the inner env; obs must be a single float-convertible array.
        axis_name: the named axis to merge statistic updates over, or None.
        frozen: use the stored statistics without updating them.
        epsilon: added to the variance before the square root.
        clip: normalised obs are clipped to ``[-clip, clip]``; None disables clipping.
    """

    def __init__(self, env: Any, axis_name: Any = None, frozen: bool = False, epsilon: float = 1e-8,
                 clip: float | None = 10.0):
        super().__init__(env)
        spec = observation_spec(env)
        if not isinstance(spec, jax.ShapeDtypeStruct):
            leaves = jax.tree_util.tree_flatten_with_path(spec)[0]
            raise ValueError(
                f"observation normalisation (normalize_obs) needs an observation that is one array; "
                f"{getattr(env, 'name', type(env).__name__)}'s is a {type(spec).__name__} of "
                f"{', '.join(f'{jax.tree_util.keystr(k)}: {v.dtype}{list(v.shape)}' for k, v in leaves)} "
                f"(set normalize_obs=False, or scale the observation inside the env)")
        self.axis_name = axis_name
        self.frozen = bool(frozen)
        self.epsilon = float(epsilon)
        self.clip = None if clip is None else float(clip)

    def freeze(self) -> NormalizeObservation:
        """A copy of this wrapper (same inner env and options) with ``frozen=True``."""
        return NormalizeObservation(self.env, axis_name=self.axis_name, frozen=True,
                                    epsilon=self.epsilon, clip=self.clip)

    @staticmethod
    def get_stats(state: NormalizeObservationState) -> RunningMeanStd:
        """The observation statistics held in ``state``."""
        return state.obs_stats

    @staticmethod
    def set_stats(state: NormalizeObservationState, stats: RunningMeanStd) -> NormalizeObservationState:
        """``state`` with its observation statistics replaced by ``stats`` (e.g. trained ones)."""
        return state.replace(obs_stats=stats)

    def observation_space(self, params: Any = None) -> Box:
        """A float32 ``Box`` of the inner shape, bounded by ``±clip`` (unbounded without clip)."""
        inner = self.env.observation_space(_resolve_params(self.env, params))
        bound = np.inf if self.clip is None else self.clip
        return Box(-bound, bound, tuple(inner.shape), jnp.float32)

    def _update(self, stats: RunningMeanStd, obs: jax.Array) -> RunningMeanStd:
        if self.frozen:
            return stats
        return stats.update(_flatten_batch(obs, self.batch_shape), axis_name=self.axis_name)

    def _normalize(self, stats: RunningMeanStd, obs: jax.Array) -> jax.Array:
        return stats.normalize(obs, eps=self.epsilon, clip=self.clip)

    def normalize(self, state: NormalizeObservationState, obs: jax.typing.ArrayLike) -> jax.Array:
        """``obs`` (raw, any leading axes) normalised with the statistics in ``state`` and this
        wrapper's ``epsilon`` and ``clip``: ``clip((obs - mean) / sqrt(var + epsilon))``, float32."""
        return state.obs_stats.normalize(obs, eps=self.epsilon, clip=self.clip)

    def reset(self, key: jax.Array, params: Any = None) -> tuple[jax.Array, NormalizeObservationState]:
        """Resets the inner env, starts the statistics from the prior and adds the first obs; returns
        ``(normalised obs [*batch_shape, *obs_shape] float32, NormalizeObservationState)``."""
        obs, env_state = self.env.reset(key, params)
        sample_shape = jnp.shape(obs)[len(self.batch_shape):]
        stats = self._update(RunningMeanStd.init(sample_shape), obs)
        return self._normalize(stats, obs), NormalizeObservationState(env_state=env_state, obs_stats=stats)

    def step(self, key: jax.Array, state: NormalizeObservationState, action: Any,
             params: Any = None) -> StepResult:
        """Steps the inner env (arguments as its ``step``), updates the statistics with the new obs
        and normalises: the inner step's tuple with ``obs`` and ``info["final_observation"]``
        normalised (float32) and the state wrapped."""
        obs, env_state, reward, terminated, truncated, info = self.env.step(
            key, state.env_state, action, params)
        # The returned obs (first obs of a new episode where done) is what the agent acts on next;
        # final observations are not added, as in Gymnasium and SB3's VecNormalize.
        stats = self._update(state.obs_stats, obs)
        info = dict(info)
        if "final_observation" in info:
            info["final_observation"] = self._normalize(stats, info["final_observation"])
        state = NormalizeObservationState(env_state=env_state, obs_stats=stats)
        return self._normalize(stats, obs), state, reward, terminated, truncated, info


class ObservationStatistics(NormalizeObservation[TInnerState]):
    """:class:`NormalizeObservation`'s statistics, with the observations passed through **raw**.

    The statistics are updated exactly as :class:`NormalizeObservation` updates them (every obs
    ``reset`` and ``step`` return, merged over ``axis_name``) and live in the same
    :class:`NormalizeObservationState`, but ``obs`` and ``info["final_observation"]`` are returned
    unchanged. For agents that keep observations for later (replay buffers): they store raw
    observations and normalise them when used, with :meth:`normalize` and the statistics of that
    moment, so an item collected long ago is not stuck with the statistics of its collection.

    Args: as :class:`NormalizeObservation`.
    """

    def freeze(self) -> ObservationStatistics:
        """A copy of this wrapper (same inner env and options) with ``frozen=True``."""
        return ObservationStatistics(self.env, axis_name=self.axis_name, frozen=True,
                                     epsilon=self.epsilon, clip=self.clip)

    def observation_space(self, params: Any = None) -> Any:
        """The inner env's observation space (observations are not changed)."""
        return self.env.observation_space(_resolve_params(self.env, params))

    def _normalize(self, stats: RunningMeanStd, obs: jax.Array) -> jax.Array:
        del stats
        return obs


# --------------------------------------------------------------------------------------------------
# NormalizeReward
# --------------------------------------------------------------------------------------------------


@struct.dataclass
class NormalizeRewardState(Generic[TInnerState]):
    """State of :class:`NormalizeReward`.

    Attributes:
        env_state: the inner env's state.
        return_stats: shared statistics (shape ``()``) of the per-env discounted returns.
        discounted_return: float32 ``[*batch_shape]``, each env's running discounted return ``G``
            (0 at the start of an episode).
        gamma: float32 scalar, the discount of ``G``. ``reset`` sets the wrapper's ``gamma``; an
            agent whose discount is a traced hyperparameter (a sweep member's, or one PBT changes)
            keeps it in sync with :meth:`NormalizeReward.set_gamma`.
    """

    env_state: TInnerState
    return_stats: RunningMeanStd
    discounted_return: jax.Array
    gamma: jax.Array


class NormalizeReward(Wrapper[TInnerState]):
    """Scales rewards by the running standard deviation of the discounted return.

    Per env, on every step ``t`` with reward ``r_t``::

        G_t = gamma * G_{t-1} + r_t           # G_{t-1} = 0 on an episode's first step; gamma = state.gamma
        stats = stats.update(G_t over every env)
        reward_out = clip(r_t / sqrt(stats.var + epsilon), -clip, clip)
        G_t := 0 where terminated | truncated  # after the update: the next episode starts fresh

    So the finished episode's last reward counts toward its own return, and the episode the
    auto-reset begins starts from ``G = 0``; equivalently ``G_t = G_{t-1} * gamma * (1 - done_{t-1})
    + r_t`` (the convention of SB3's ``VecNormalize``). Gymnasium's single-env ``NormalizeReward``
    instead computes ``G_t = G_{t-1} * gamma * (1 - terminated_t) + r_t``: it already drops the old
    return on the terminal step and never resets on truncation. Rewards are not centred (only divided),
    so their sign is kept.

    Apply it outside :class:`VecEnv` (one statistics instance for the batch), and outside
    :class:`EpisodeStatistics` so that logged returns stay raw. With ``axis_name``, updates are merged
    across the named axis like :class:`NormalizeObservation`'s.

    The discount lives in the state (``NormalizeRewardState.gamma``), so one compiled program can
    run members with different discounts: ``gamma`` here is only the value ``reset`` puts there.

    Args:
        env: the inner env.
        gamma: the discount of the return whose scale is estimated, in ``[0, 1]`` (the initial
            ``state.gamma``; see :meth:`set_gamma`).
        axis_name: the named axis to merge statistic updates over, or None.
        epsilon: added to the variance before the square root.
        clip: scaled rewards are clipped to ``[-clip, clip]``; None disables clipping.

    Raises:
        ValueError: ``gamma`` is outside ``[0, 1]``.
    """

    def __init__(self, env: Any, gamma: float, axis_name: Any = None, epsilon: float = 1e-8,
                 clip: float | None = 10.0):
        if not 0.0 <= float(gamma) <= 1.0:
            raise ValueError(f"NormalizeReward(gamma={gamma!r}): gamma must be in [0, 1]")
        super().__init__(env)
        self.gamma = float(gamma)
        self.axis_name = axis_name
        self.epsilon = float(epsilon)
        self.clip = None if clip is None else float(clip)

    @staticmethod
    def get_stats(state: NormalizeRewardState) -> RunningMeanStd:
        """The return statistics held in ``state``."""
        return state.return_stats

    @staticmethod
    def set_stats(state: NormalizeRewardState, stats: RunningMeanStd) -> NormalizeRewardState:
        """``state`` with its return statistics replaced by ``stats``."""
        return state.replace(return_stats=stats)

    @staticmethod
    def set_gamma(state: NormalizeRewardState, gamma: jax.typing.ArrayLike) -> NormalizeRewardState:
        """``state`` with the discount of its returns set to ``gamma`` (a float or traced scalar).

        The running returns ``G`` are kept; later steps discount them with the new ``gamma``.
        """
        return state.replace(gamma=jnp.asarray(gamma, jnp.float32))

    def reset(self, key: jax.Array, params: Any = None) -> tuple[jax.Array, NormalizeRewardState]:
        """Resets the inner env, zeroes every ``G`` and starts the statistics from the prior; returns
        ``(obs, NormalizeRewardState)`` with the inner env's obs unchanged."""
        obs, env_state = self.env.reset(key, params)
        state = NormalizeRewardState(env_state=env_state, return_stats=RunningMeanStd.init(()),
                                     discounted_return=jnp.zeros(self.batch_shape, jnp.float32),
                                     gamma=jnp.asarray(self.gamma, jnp.float32))
        return obs, state

    def step(self, key: jax.Array, state: NormalizeRewardState, action: Any,
             params: Any = None) -> StepResult:
        """Steps the inner env (arguments as its ``step``) and scales its reward (the recursion is in
        the class docstring): the inner step's tuple with ``reward`` scaled (float32,
        ``[*batch_shape]``) and the state wrapped."""
        obs, env_state, reward, terminated, truncated, info = self.env.step(
            key, state.env_state, action, params)
        reward = jnp.asarray(reward, jnp.float32)
        ret = state.gamma * state.discounted_return + reward
        stats = state.return_stats.update(_flatten_batch(ret, self.batch_shape), axis_name=self.axis_name)
        scaled = reward / jnp.sqrt(stats.var + self.epsilon)
        if self.clip is not None:
            scaled = jnp.clip(scaled, -self.clip, self.clip)
        done = jnp.logical_or(terminated, truncated)
        state = NormalizeRewardState(env_state=env_state, return_stats=stats,
                                     discounted_return=jnp.where(done, 0.0, ret).astype(jnp.float32),
                                     gamma=state.gamma)
        return obs, state, scaled, terminated, truncated, info


def transfer_stats(src_state: Any, dst_state: Any) -> Any:
    """Copies normalisation statistics from one wrapped state into another, e.g. train -> eval.

    Walks the ``env_state`` chains of both states; the k-th :class:`NormalizeObservationState` (and
    :class:`NormalizeRewardState`) of ``dst_state`` receives the statistics of the k-th one of
    ``src_state``. Other fields (env states, per-env returns) are kept, so the two stacks may differ
    in ``num_envs`` and in wrappers without statistics.

    Args:
        src_state: a state holding trained statistics.
        dst_state: the state to update (typically from a frozen env's ``reset``).

    Returns:
        ``dst_state`` with its statistics replaced.

    Raises:
        ValueError: ``dst_state`` has more normalisation wrappers of a kind than ``src_state``.
    """
    def chain(state: Any) -> list[Any]:
        nodes = []
        while state is not None and hasattr(state, "env_state"):
            nodes.append(state)
            state = state.env_state
        return nodes

    sources: dict[type, list[Any]] = {NormalizeObservationState: [], NormalizeRewardState: []}
    for node in chain(src_state):
        if type(node) in sources:
            sources[type(node)].append(node)

    def rebuild(state: Any, used: dict[type, int]) -> Any:
        if state is None or not hasattr(state, "env_state"):
            return state
        kind = type(state)
        if kind in sources:
            # Outermost first, in the same order as the source chain was collected.
            k = used.get(kind, 0)
            used[kind] = k + 1
            if k >= len(sources[kind]):
                raise ValueError(f"transfer_stats: the destination state has more {kind.__name__}s than "
                                 f"the source ({len(sources[kind])})")
            src = sources[kind][k]
            if kind is NormalizeObservationState:
                state = state.replace(obs_stats=src.obs_stats)
            else:
                state = state.replace(return_stats=src.return_stats)
        return state.replace(env_state=rebuild(state.env_state, used))

    return rebuild(dst_state, {})


# --------------------------------------------------------------------------------------------------
# Action wrappers
# --------------------------------------------------------------------------------------------------


def _box_bounds(space: Any, owner: str) -> tuple[jax.Array, jax.Array]:
    # rljax and gymnax Boxes both have low/high/shape/dtype, but gymnax keeps scalar bounds
    # unbroadcast (Pendulum: low=-2.0 with shape (1,)).
    if is_discrete(space) or not (hasattr(space, "low") and hasattr(space, "high")):
        raise ValueError(f"{owner} needs a Box action space, got {space!r} ({type(space).__name__})")
    dtype = jnp.dtype(space.dtype)
    shape = tuple(space.shape)
    return (jnp.broadcast_to(jnp.asarray(space.low, dtype), shape),
            jnp.broadcast_to(jnp.asarray(space.high, dtype), shape))


@struct.dataclass
class ActionWrapperState(Generic[TInnerState]):
    """State of :class:`ClipAction` / :class:`RescaleAction`: the inner state (they keep none).

    Attributes:
        env_state: the inner env's state.
    """

    env_state: TInnerState


class _ActionTransform(Wrapper[TInnerState]):
    """Base of the action wrappers: steps the inner env with ``transform(action, params)``.

    Subclasses implement only :meth:`transform`; reset, state wrapping and the step plumbing are
    shared.
    """

    def transform(self, action: jax.Array, params: Any) -> jax.Array:
        raise NotImplementedError

    def reset(self, key: jax.Array, params: Any = None) -> tuple[jax.Array, ActionWrapperState]:
        """Resets the inner env. Returns ``(obs, ActionWrapperState)``."""
        obs, env_state = self.env.reset(key, params)
        return obs, ActionWrapperState(env_state=env_state)

    def step(self, key: jax.Array, state: ActionWrapperState, action: jax.Array,
             params: Any = None) -> StepResult:
        """Steps the inner env with the transformed action.

        Args:
            key: a PRNG key, passed to the inner env.
            state: the ``ActionWrapperState``.
            action: ``[*batch_shape, *action_shape]``.
            params: env params (bounds are read from the inner ``action_space(params)``).

        Returns:
            The inner step's tuple with the state wrapped.
        """
        params = _resolve_params(self.env, params)
        obs, env_state, reward, terminated, truncated, info = self.env.step(
            key, state.env_state, self.transform(action, params), params)
        return obs, ActionWrapperState(env_state=env_state), reward, terminated, truncated, info


class ClipAction(_ActionTransform[TInnerState]):
    """Clips Box actions to the inner action space's bounds before stepping.

    Elementwise, so it works inside or outside :class:`VecEnv` (outside, bounds broadcast over the
    batch; with per-env batched params, apply it inside).

    Args:
        env: the inner env, whose action space (for its default params) must be a Box.

    Raises:
        ValueError: the inner action space is discrete.
    """

    def __init__(self, env: Any):
        super().__init__(env)
        _box_bounds(env.action_space(env.default_params), "ClipAction")

    def transform(self, action: jax.Array, params: Any) -> jax.Array:
        """``clip(action, low, high)`` with the inner Box's bounds for ``params``."""
        low, high = _box_bounds(self.env.action_space(params), "ClipAction")
        return jnp.clip(action, low, high)


class RescaleAction(_ActionTransform[TInnerState]):
    """Lets the agent act in ``[low, high]``, mapped affinely onto the inner Box's bounds.

    ``a_env = env_low * (1 - t) + env_high * t`` with ``t = (a - low) / (high - low)``; written as a
    convex combination so ``low`` and ``high`` map to ``env_low`` and ``env_high`` exactly. Actions
    outside ``[low, high]`` are extrapolated, not clipped: compose ``RescaleAction(ClipAction(env))``
    to clip in the env's units.

    Args:
        env: the inner env, whose action space (for its default params) must be a bounded Box.
        low: the agent's lower bound, scalar or broadcastable to the action shape.
        high: the agent's upper bound, likewise; ``low < high`` everywhere.

    Raises:
        ValueError: the inner action space is discrete or unbounded, or ``low``/``high`` are not
            finite with ``low < high``.
    """

    def __init__(self, env: Any, low: jax.typing.ArrayLike = -1.0, high: jax.typing.ArrayLike = 1.0):
        super().__init__(env)
        space = env.action_space(env.default_params)
        env_low, env_high = _box_bounds(space, "RescaleAction")
        if not (np.all(np.isfinite(np.asarray(env_low))) and np.all(np.isfinite(np.asarray(env_high)))):
            raise ValueError(f"RescaleAction needs a bounded Box action space, got {space!r} with "
                             f"low={np.asarray(env_low)} high={np.asarray(env_high)}")
        low_np = np.broadcast_to(np.asarray(low, np.float64), tuple(space.shape))
        high_np = np.broadcast_to(np.asarray(high, np.float64), tuple(space.shape))
        if not (np.all(np.isfinite(low_np)) and np.all(np.isfinite(high_np)) and np.all(low_np < high_np)):
            raise ValueError(f"RescaleAction(low={low!r}, high={high!r}): need finite low < high")
        self.low = low
        self.high = high
        self._shape = tuple(space.shape)
        self._dtype = jnp.dtype(space.dtype)

    def action_space(self, params: Any = None) -> Box:
        """``Box(low, high)`` of the inner action shape and dtype."""
        return Box(self.low, self.high, self._shape, self._dtype)

    def transform(self, action: jax.Array, params: Any) -> jax.Array:
        """Maps ``action`` in ``[low, high]`` affinely onto the inner Box's bounds for ``params``."""
        env_low, env_high = _box_bounds(self.env.action_space(params), "RescaleAction")
        low = jnp.asarray(self.low, self._dtype)
        high = jnp.asarray(self.high, self._dtype)
        t = (jnp.asarray(action, self._dtype) - low) / (high - low)
        return env_low * (1 - t) + env_high * t


# --------------------------------------------------------------------------------------------------
# Domain randomisation
# --------------------------------------------------------------------------------------------------


class ParamRange(NamedTuple):
    """The range one env param is drawn from at every episode start (:class:`RandomizeParams`).

    ``log`` False: ``U(low, high)``; True: ``exp(U(log low, log high))`` (log-uniform, ``low > 0``).
    """

    name: str
    low: float
    high: float
    log: bool = False

    def bounds(self) -> tuple[float, float]:
        """The uniform draw's bounds: ``(low, high)``, or ``(log low, log high)`` for a log range
        (in float64 on the host, as :meth:`draw` uses them)."""
        return (float(np.log(self.low)), float(np.log(self.high))) if self.log else (self.low, self.high)

    def draw(self, key: jax.Array, bounds: Any = None) -> jax.Array:
        """One float32 draw from the range; ``bounds``: traced float32 ``[2]`` replacing
        :meth:`bounds` (a sweep member's range, :class:`RangedParams`)."""
        low, high = self.bounds() if bounds is None else (bounds[0], bounds[1])
        value = jax.random.uniform(key, (), jnp.float32, low, high)
        return jnp.exp(value) if self.log else value

    def __str__(self) -> str:
        """``NAME=LOW:HIGH`` (``NAME=log:LOW:HIGH``), each bound as :func:`_exact_number` writes it."""
        return f"{self.name}={'log:' if self.log else ''}{_exact_number(self.low)}:{_exact_number(self.high)}"


def _exact_number(x: float) -> str:
    """``x`` in its short form (``1``, ``0.25``, ``1e-05``) where that is the same number, else with
    every digit (``0.123456789``): how a bound a user typed is shown back."""
    return f"{x:g}" if float(f"{x:g}") == x else repr(x)


_RANGE_FORMS = "NAME=LOW:HIGH (uniform) or NAME=log:LOW:HIGH (log-uniform), e.g. length=0.25:2.0"


def param_ranges(specs: Any) -> tuple[ParamRange, ...]:
    """``["length=0.25:2.0", "gravity=log:5:20", ...]`` as :class:`ParamRange` s (a later spec of the
    same name replaces an earlier one; ``env.length`` is ``length``, as a sweep names it).

    Raises:
        ValueError: a spec that is not ``NAME=LOW:HIGH`` or ``NAME=log:LOW:HIGH``, bounds that are not
            finite numbers with ``LOW < HIGH``, or a log range with ``LOW <= 0``; the message names
            the spec and the valid forms.
    """
    ranges: dict[str, ParamRange] = {}
    for spec in specs:
        name, sep, text = str(spec).partition("=")
        name = name.strip().removeprefix("env.")  # env.length, as sweeps name env params, is length
        parts = text.split(":")
        log = parts[0].strip() == "log"
        bounds = parts[1:] if log else parts
        if not sep or not name.isidentifier() or len(bounds) != 2:
            raise ValueError(f"--randomize {spec!r}: expected {_RANGE_FORMS}")
        try:
            low, high = (float(b) for b in bounds)
        except ValueError:
            raise ValueError(f"--randomize {spec!r}: LOW and HIGH must be numbers ({_RANGE_FORMS})") from None
        if not (np.isfinite(low) and np.isfinite(high) and low < high):
            raise ValueError(f"--randomize {spec!r}: need finite LOW < HIGH, got LOW={_exact_number(low)}, "
                             f"HIGH={_exact_number(high)}")
        if log and low <= 0:
            raise ValueError(f"--randomize {spec!r}: a log range needs LOW > 0, got {_exact_number(low)}")
        ranges[name] = ParamRange(name, low, high, log)
    return tuple(ranges.values())


def check_param_ranges(ranges: tuple[ParamRange, ...], env_params: Any) -> None:
    """Checks that every range names a floating scalar field of ``env_params`` (a dataclass).

    Raises:
        ValueError: params that are not a dataclass, a name that is not a field (the message lists
            the floating ones), or a field that is not a float scalar (an int, a bool or an array).
    """
    import dataclasses

    if not ranges:
        return
    if not dataclasses.is_dataclass(env_params):
        raise ValueError(f"--randomize: the env params ({type(env_params).__name__}) are not a dataclass, so no "
                         f"field of them can be drawn per episode")
    floats = [f.name for f in dataclasses.fields(env_params) if _is_float_scalar(getattr(env_params, f.name))]
    for r in ranges:
        if not hasattr(env_params, r.name) or r.name not in [f.name for f in dataclasses.fields(env_params)]:
            import difflib

            close = difflib.get_close_matches(r.name, floats, n=1)
            raise ValueError(f"--randomize {r}: {r.name!r} is not a param of {type(env_params).__name__}"
                             + (f" (did you mean {close[0]!r}?)" if close else "")
                             + f"; the float params that can be drawn: {', '.join(floats) or 'none'}")
        if r.name not in floats:
            raise ValueError(f"--randomize {r}: {r.name!r} holds {getattr(env_params, r.name)!r}, not a float "
                             f"scalar; the float params that can be drawn: {', '.join(floats) or 'none'}")


def _is_float_scalar(value: Any) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return False
    if isinstance(value, float):
        return True
    return hasattr(value, "dtype") and np.ndim(value) == 0 and np.issubdtype(np.dtype(value.dtype), np.floating)


@struct.dataclass
class RandomizeParamsState(Generic[TInnerState]):
    """State of a :class:`RandomizeParams`.

    Attributes:
        env_state: the inner state.
        params: the params of the current episode (the drawn fields float32 scalars).
    """

    env_state: TInnerState
    params: Any


@struct.dataclass
class RangedParams:
    """Env params with the bounds a :class:`RandomizeParams` draws from, traced: what the training
    env stack is given when the ranges may differ per sweep member (the run's traced
    hyperparams hold them, :func:`range_bounds`).

    Attributes:
        params: the env's own params (the fields without a range are used as they are).
        bounds: float32 ``[R, 2]``, row ``i`` the :meth:`ParamRange.bounds` of range ``i``.
    """

    params: Any
    bounds: Any


def range_bounds(specs: Any) -> np.ndarray | None:
    """float32 ``[R, 2]``: the :meth:`ParamRange.bounds` of ``specs`` (``NAME=LOW:HIGH`` strings, in
    :func:`param_ranges` order); None without ranges."""
    ranges = param_ranges(specs)
    return np.asarray([r.bounds() for r in ranges], np.float32) if ranges else None


class RandomizeParams(Wrapper[TInnerState]):
    """Domain randomisation: draws the env params named by ``ranges`` at every episode start.

    ``reset(key, params)`` and every auto-reset replace each ranged field of ``params`` by a fresh
    draw (:meth:`ParamRange.draw`, from the key this wrapper is given, so the draws are part of the
    run's key stream); the episode then runs with those params, which the state carries. Fields
    without a range keep their values from the ``params`` passed in (a sweep member's, say).

    The wrapper wraps one env (inside :class:`VecEnv`, so each env draws its own params) and needs
    the inner env to take its params as traced values: the params must not set shapes or Python
    control flow. Each step also computes the reset of a new episode with freshly drawn params and
    selects it where the episode ended, so the first state of an episode comes from its own params
    (the inner env's own auto-reset, with the old params, is discarded); ``info["final_observation"]``
    is the inner env's.

    Given :class:`RangedParams` (``reset``/``step``), it draws from their traced bounds instead of
    the ranges' own: which fields are drawn, and how (uniform or log-uniform), stays fixed.

    Args:
        env: a single (unbatched) env whose params are a dataclass.
        ranges: the fields to draw (:func:`param_ranges`), checked against the env's default params
            (:func:`check_param_ranges`).
    """

    def __init__(self, env: Any, ranges: tuple[ParamRange, ...]):
        super().__init__(env)
        check_param_ranges(tuple(ranges), env.default_params)
        self.ranges = tuple(ranges)

    def draw(self, key: jax.Array, params: Any) -> Any:
        """``params`` with every ranged field replaced by a draw (one key per range); from the
        traced bounds of :class:`RangedParams`, whose own params it returns so drawn."""
        bounds = None
        if isinstance(params, RangedParams):
            params, bounds = params.params, params.bounds
        keys = jax.random.split(key, len(self.ranges))
        return params.replace(**{r.name: r.draw(k, None if bounds is None else bounds[i])
                                 for i, (r, k) in enumerate(zip(self.ranges, keys))})

    def observation_space(self, params: Any = None) -> Any:
        return self.env.observation_space(params.params if isinstance(params, RangedParams) else params)

    def action_space(self, params: Any = None) -> Any:
        return self.env.action_space(params.params if isinstance(params, RangedParams) else params)

    def reset(self, key: jax.Array, params: Any = None) -> tuple[Any, RandomizeParamsState]:
        params = _resolve_params(self, params)
        k_draw, k_reset = jax.random.split(key)
        episode = self.draw(k_draw, params)
        obs, state = self.env.reset(k_reset, episode)
        return obs, RandomizeParamsState(env_state=state, params=episode)

    def step(self, key: jax.Array, state: RandomizeParamsState, action: Any, params: Any = None) -> StepResult:
        params = _resolve_params(self, params)
        k_step, k_next = jax.random.split(key)
        obs, inner, reward, terminated, truncated, info = self.env.step(k_step, state.env_state, action, state.params)
        obs_next, state_next = self.reset(k_next, params)
        done = jnp.logical_or(terminated, truncated)
        new_state = auto_reset(done, state_next, RandomizeParamsState(env_state=inner, params=state.params))
        return auto_reset(done, obs_next, obs), new_state, reward, terminated, truncated, info
