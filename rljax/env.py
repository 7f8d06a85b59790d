"""The environment contract: spaces, the base class, and auto-reset semantics.

Every environment in rljax, built-in or user-written, is call-compatible with gymnax >= 1.0:

* ``reset(key, params) -> (obs, state)``
* ``step(key, state, action, params) -> (obs, state, reward, terminated, truncated, info)``

``step`` auto-resets: when ``terminated | truncated`` the returned ``obs``/``state`` already belong to
the next episode, and ``info["final_observation"]`` holds the last observation of the finished one.
``terminated`` means the MDP ended (the value after it is 0); ``truncated`` means a time limit cut the
episode (bootstrap from the value of ``info["final_observation"]``). Both can be true at once, as in
Gymnasium; ``terminated`` then wins for value targets.

Subclasses implement :meth:`Environment.step_env` and :meth:`Environment.reset_env`; the base class
adds the time limit and the auto-reset. See ``docs/env_api.md`` for the full specification.

May import: nothing in rljax (every layer, the bundled envs and user envs build on it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

__all__ = [
    "Box",
    "Discrete",
    "EnvParams",
    "EnvState",
    "Environment",
    "EnvLike",
    "Space",
    "is_discrete",
    "auto_reset",
    "observation_spec",
    "space_spec",
    "describe_space",
    "LEGAL_ACTION_MASK",
    "legal_action_mask",
    "masked_actions",
    "uniform_legal_action",
    "CURRENT_PLAYER",
    "current_player",
    "turn_sign",
    "GLOBAL_STATE",
    "MultiAgentEnvironment",
    "num_agents",
]


# --------------------------------------------------------------------------------------------------
# Spaces
# --------------------------------------------------------------------------------------------------


class Space:
    """A jittable space. ``sample`` and ``contains`` are pure and can run under ``jit``/``vmap``."""

    shape: tuple[int, ...]
    dtype: Any

    def sample(self, key: jax.Array) -> jax.Array:
        raise NotImplementedError

    def contains(self, x: jax.typing.ArrayLike) -> jax.Array:
        raise NotImplementedError


class Discrete(Space):
    """The integers ``{0, ..., n - 1}``.

    Args:
        n: number of actions; must be a positive Python int.
        dtype: an integer dtype, ``int32`` by default.
    """

    def __init__(self, n: int, dtype: Any = jnp.int32):
        if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n <= 0:
            raise ValueError(f"Discrete(n={n!r}): n must be a positive integer")
        dtype = jnp.dtype(dtype)
        if not jnp.issubdtype(dtype, jnp.integer):
            raise ValueError(f"Discrete(dtype={dtype}): dtype must be an integer dtype such as int32")
        self.n = int(n)
        self.shape: tuple[int, ...] = ()
        self.dtype = dtype

    def __repr__(self) -> str:
        return f"Discrete({self.n})"

    def sample(self, key: jax.Array) -> jax.Array:
        """Returns a uniformly drawn action, shape ``()``, dtype ``self.dtype``."""
        return jax.random.randint(key, self.shape, 0, self.n, dtype=self.dtype)

    def contains(self, x: jax.typing.ArrayLike) -> jax.Array:
        """Returns a bool scalar: ``x`` is an integer-valued scalar in ``[0, n)``."""
        x = jnp.asarray(x)
        if x.shape != self.shape:
            return jnp.array(False)
        integral = jnp.floor(x) == x if jnp.issubdtype(x.dtype, jnp.floating) else jnp.array(True)
        return integral & (x >= 0) & (x < self.n)


class Box(Space):
    """A box ``[low, high]`` in R^shape, bounds broadcast to ``shape``.

    Args:
        low: lower bound, scalar or array broadcastable to ``shape`` (may be ``-inf``).
        high: upper bound, as ``low``.
        shape: the shape of one element.
        dtype: a floating dtype, ``float32`` by default.
    """

    def __init__(self, low: jax.typing.ArrayLike, high: jax.typing.ArrayLike, shape: tuple[int, ...],
                 dtype: Any = jnp.float32):
        shape = tuple(int(s) for s in shape)
        self.shape = shape
        self.dtype = jnp.dtype(dtype)
        self.low = jnp.broadcast_to(jnp.asarray(low, self.dtype), shape)
        self.high = jnp.broadcast_to(jnp.asarray(high, self.dtype), shape)

    def __repr__(self) -> str:
        return f"Box(shape={self.shape}, dtype={self.dtype.name})"

    @property
    def bounded(self) -> bool:
        """True when every bound is finite (needed for uniform sampling and action rescaling)."""
        return bool(np.all(np.isfinite(np.asarray(self.low))) and np.all(np.isfinite(np.asarray(self.high))))

    def sample(self, key: jax.Array) -> jax.Array:
        """Uniform sample where both bounds are finite; a standard normal draw, clipped, elsewhere."""
        finite = jnp.isfinite(self.low) & jnp.isfinite(self.high)
        low = jnp.where(finite, self.low, 0.0)
        high = jnp.where(finite, self.high, 1.0)
        k1, k2 = jax.random.split(key)
        uniform = jax.random.uniform(k1, self.shape, self.dtype, low, high)
        normal = jnp.clip(jax.random.normal(k2, self.shape, self.dtype), self.low, self.high)
        return jnp.where(finite, uniform, normal)

    def contains(self, x: jax.typing.ArrayLike) -> jax.Array:
        """Returns a bool scalar: ``x`` has this shape, is finite where bounded, and lies in the box."""
        x = jnp.asarray(x)
        if x.shape != self.shape:
            return jnp.array(False)
        return jnp.all((x >= self.low) & (x <= self.high) & ~jnp.isnan(x))


def is_discrete(space: Any) -> bool:
    """True for a discrete space: rljax's :class:`Discrete` or any space with an integer ``n``
    (gymnax's ``Discrete`` included)."""
    return isinstance(space, Discrete) or (hasattr(space, "n") and not hasattr(space, "low"))


def space_spec(space: Any) -> Any:
    """The shapes and dtypes of one element of ``space``, as a pytree of ``jax.ShapeDtypeStruct``.

    Takes rljax's :class:`Box` / :class:`Discrete` and gymnax's spaces
    (``gymnax.environments.spaces``: ``Box``, ``Discrete``, ``Dict`` -> a dict, ``Tuple`` -> a
    tuple), or any space with ``shape`` and ``dtype``; a gymnax ``Dict`` or ``Tuple`` becomes a dict or
    tuple of its members' specs (nested as deep as they are).

    Raises:
        ValueError: ``space`` is none of these (the message names it).
    """
    members = space if isinstance(space, (Mapping, tuple, list)) else getattr(space, "spaces", None)
    if isinstance(members, Mapping):
        return {k: space_spec(v) for k, v in members.items()}
    if isinstance(members, (tuple, list)):
        return tuple(space_spec(v) for v in members)
    if hasattr(space, "shape") and hasattr(space, "dtype"):
        return jax.ShapeDtypeStruct(tuple(int(d) for d in space.shape), jnp.dtype(space.dtype))
    raise ValueError(f"cannot read shapes from the space {space!r}: expected a Box, Discrete, Dict or Tuple space "
                     "(rljax.env or gymnax.environments.spaces)")


def _bounds(x: Any) -> str:
    a = np.asarray(x)
    return f"{a.flat[0]:g}" if a.size and np.all(a == a.flat[0]) else str(a.tolist())


def describe_space(space: Any, compact: bool = False) -> str:
    """A one-line description of a space for error messages: ``Discrete(3)``,
    ``Box(shape=(2,), dtype=float32, low=-1, high=1)``, ``Dict(image: Box(...), vec: Box(...))``,
    ``Tuple(...)``; rljax's and gymnax's spaces alike (gymnax's have no readable ``repr``).

    ``compact``: boxes as ``Box(2,) float32 [-1, 1]`` (bounds only when every element shares them
    and they are finite-looking: float32's largest value stands for "unbounded" in some envs'
    spaces, gymnax's Reacher), for listings such as ``rljax envs``.
    """
    members = space if isinstance(space, (Mapping, tuple, list)) else getattr(space, "spaces", None)
    if isinstance(members, Mapping):
        return "Dict(" + ", ".join(f"{k}: {describe_space(v, compact)}" for k, v in members.items()) + ")"
    if isinstance(members, (tuple, list)):
        return "Tuple(" + ", ".join(describe_space(v, compact) for v in members) + ")"
    if is_discrete(space):
        return f"Discrete({space.n})"
    if hasattr(space, "shape") and hasattr(space, "low") and hasattr(space, "high"):
        dtype = jnp.dtype(getattr(space, "dtype", jnp.float32)).name
        if compact:
            low, high = np.asarray(space.low), np.asarray(space.high)
            same = low.size and high.size and np.all(low == low.flat[0]) and np.all(high == high.flat[0])
            bounded = same and np.all(np.abs([low.flat[0], high.flat[0]]) < 1e38)
            return f"Box{tuple(space.shape)} {dtype}" + (f" [{low.flat[0]:g}, {high.flat[0]:g}]" if bounded else "")
        return (f"Box(shape={tuple(space.shape)}, dtype={dtype}, low={_bounds(space.low)}, "
                f"high={_bounds(space.high)})")
    # A space with a repr of its own says more than its class name; object's default repr says less.
    return repr(space) if type(space).__repr__ is not object.__repr__ else type(space).__name__


def observation_spec(env: Any, params: Any = None) -> Any:
    """The shapes and dtypes of ONE observation of ``env``, as a pytree of ``jax.ShapeDtypeStruct``.

    Read from what ``env.reset`` returns, traced abstractly (``jax.eval_shape``: nothing runs), so it
    is the truth even where an env's ``observation_space`` is approximate (gymnax's Catch-bsuite
    declares int32 and returns float32). Any pytree: an array ``[*obs_shape]``, or dicts / tuples of
    arrays. A batched env stack (``rljax.core.wrappers.VecEnv`` and wrappers around it) gives the
    observation of one of its envs (its ``batch_shape`` axes removed).

    Args:
        env: an env (rljax or gymnax contract) or a wrapper stack.
        params: its params; ``env.default_params`` when None.
    """
    if params is None:
        params = env.default_params
    batch = tuple(getattr(env, "batch_shape", ()))
    obs = jax.eval_shape(lambda key: env.reset(key, params)[0], jax.random.key(0))
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[len(batch):], x.dtype), obs)


# --------------------------------------------------------------------------------------------------
# Legal actions
# --------------------------------------------------------------------------------------------------

LEGAL_ACTION_MASK = "legal_action_mask"
"""The observation key of a legal-action mask: an env whose legal actions change from state to state
returns a dict observation with this leaf, bool ``[num_actions]``, True where the action is legal (at
least one in every state an agent acts in). It is an observation leaf like any other (stored in
rollouts and replay, carried by ``info["final_observation"]``, fed to the network as inputs), and every
discrete-action algorithm restricts its choices to it (``docs/env_api.md``, "Legal actions")."""


def legal_action_mask(obs: Any) -> jax.Array | None:
    """The legal-action mask of an observation (bool ``[..., num_actions]``, any batch axes), or None
    when the observation has none (not a dict with a :data:`LEGAL_ACTION_MASK` leaf)."""
    if isinstance(obs, Mapping) and LEGAL_ACTION_MASK in obs:
        return jnp.asarray(obs[LEGAL_ACTION_MASK]).astype(jnp.bool_)
    return None


def masked_actions(values: jax.Array, mask: jax.Array | None) -> jax.Array:
    """``values[..., a]`` (logits, action values) with every illegal action's entry replaced by the
    lowest finite float, so argmax, max, softmax and sampling never choose it while sums and products
    stay finite (a softmax gives it probability 0 and its log-probability times 0 is 0; a bootstrap
    value times a zero discount is 0). ``mask`` None returns ``values`` unchanged.

    Args:
        values: float ``[..., A]``.
        mask: bool ``[..., A]`` (broadcastable), True where legal; or None.
    """
    if mask is None:
        return values
    return jnp.where(mask, values, jnp.finfo(values.dtype).min)


def uniform_legal_action(key: jax.Array, mask: jax.Array) -> jax.Array:
    """A uniform draw among the legal actions: int32 ``[...]`` from ``mask`` bool ``[..., A]`` (True
    where legal; at least one per row), each legal action with probability ``1 / sum(mask)``
    (``jax.random.categorical`` over logits 0 where legal, ``-inf`` elsewhere)."""
    return jax.random.categorical(key, jnp.where(mask, 0.0, -jnp.inf), axis=-1).astype(jnp.int32)


# --------------------------------------------------------------------------------------------------
# Turn-based games
# --------------------------------------------------------------------------------------------------

CURRENT_PLAYER = "current_player"
"""The observation key of whose turn it is in a turn-based game: an int32 scalar leaf of a dict
observation, the player (``0 .. num_players - 1``) who chooses the action taken from this
observation. A game's observation is seen from that player's side (its own pieces first), its
``reward`` is the reward of the player who moved (the mover's view) and ``info["rewards"]`` (float32
``[num_players]``) holds every player's reward of the step; ``docs/env_api.md``, "Turn-based games"."""


def current_player(obs: Any) -> jax.Array | None:
    """Whose turn an observation is (int32 ``[...]``, any batch axes), or None when the
    observation has no :data:`CURRENT_PLAYER` leaf (a single-player env)."""
    if isinstance(obs, Mapping) and CURRENT_PLAYER in obs:
        return jnp.asarray(obs[CURRENT_PLAYER]).astype(jnp.int32)
    return None


def turn_sign(obs: Any, next_obs: Any) -> jax.Array | float:
    """The sign that carries a value from the side of the player to move at ``next_obs`` to the side
    of the player who moved at ``obs`` in a two-player zero-sum game: ``+1`` where the same player
    moves again, ``-1`` where the turn passed (float32 ``[...]``). ``1.0`` (a Python float, no
    array work) for observations without a :data:`CURRENT_PLAYER` leaf (single-player envs), so
    ``value(obs) = reward + gamma * turn_sign * value(next_obs)`` is the one backup for both."""
    player, next_player = current_player(obs), current_player(next_obs)
    if player is None or next_player is None:
        return 1.0
    return jnp.where(player == next_player, 1.0, -1.0).astype(jnp.float32)


# --------------------------------------------------------------------------------------------------
# State, params, base class
# --------------------------------------------------------------------------------------------------


@struct.dataclass
class EnvState:
    """Base env state. ``time`` counts steps taken in the current episode (int32 scalar)."""

    time: jax.Array


@struct.dataclass
class EnvParams:
    """Base env params. Every numeric field is a pytree leaf, so params can be vmapped.

    Attributes:
        max_steps_in_episode: the time limit; ``truncated`` becomes true on the step that reaches it.
    """

    max_steps_in_episode: int = 1000


TState = TypeVar("TState", bound=EnvState)
TParams = TypeVar("TParams", bound=EnvParams)


@runtime_checkable
class EnvLike(Protocol):
    """What rljax needs of an environment (gymnax >= 1.0 environments satisfy it unwrapped)."""

    @property
    def default_params(self) -> Any: ...

    def reset(self, key: jax.Array, params: Any) -> tuple[Any, Any]: ...

    def step(self, key: jax.Array, state: Any, action: Any, params: Any) -> tuple[Any, ...]: ...

    def observation_space(self, params: Any) -> Any: ...

    def action_space(self, params: Any) -> Any: ...


def auto_reset(done: jax.Array, reset_tree: Any, step_tree: Any) -> Any:
    """Selects ``reset_tree`` where ``done`` (a bool scalar) else ``step_tree``, leaf by leaf."""
    return jax.tree.map(lambda r, s: jnp.where(done, r, s), reset_tree, step_tree)


class Environment(Generic[TState, TParams]):
    """Base class for pure-JAX environments with the rljax / gymnax >= 1.0 step contract.

    Subclasses implement ``step_env``, ``reset_env``, ``default_params``, ``observation_space`` and
    ``action_space``. Their state must carry an int32 ``time`` field that ``step_env`` increments;
    the time limit is ``params.max_steps_in_episode``.

    The class holds no mutable state: an instance is a bundle of pure functions, so it can be closed
    over by ``jit`` and shared between vmapped copies.

    Attributes:
        stochastic_transitions: whether ``step_env`` uses its key. When False (deterministic
            dynamics, like the classic-control envs) ``step`` hands its whole key to the reset
            instead of splitting it, which saves one key split per env step (on a CPU, random-number
            work is a large share of raw env stepping). Leave it True if ``step_env`` draws anything.
    """

    stochastic_transitions: bool = True

    @property
    def name(self) -> str:
        return type(self).__name__

    @property
    def default_params(self) -> TParams:
        raise NotImplementedError

    def step_env(self, key: jax.Array, state: TState, action: Any, params: TParams
                 ) -> tuple[jax.Array, TState, jax.Array, jax.Array, dict[str, Any]]:
        """One transition without time limit or reset.

        Returns:
            ``(obs, state, reward, terminated, info)``: the next observation and state, a float32
            scalar reward, a bool scalar, and a dict of extra arrays with a fixed structure.
        """
        raise NotImplementedError

    def reset_env(self, key: jax.Array, params: TParams) -> tuple[jax.Array, TState]:
        """Draws the first observation and state of an episode."""
        raise NotImplementedError

    def observation_space(self, params: TParams) -> Space:
        raise NotImplementedError

    def action_space(self, params: TParams) -> Space:
        raise NotImplementedError

    def reset(self, key: jax.Array, params: TParams | None = None) -> tuple[jax.Array, TState]:
        """Starts an episode.

        Args:
            key: a PRNG key; the same key gives the same first state.
            params: env params; ``default_params`` when None.

        Returns:
            ``(obs, state)``.
        """
        if params is None:
            params = self.default_params
        return self.reset_env(key, params)

    def step(self, key: jax.Array, state: TState, action: Any, params: TParams | None = None
             ) -> tuple[jax.Array, TState, jax.Array, jax.Array, jax.Array, dict[str, Any]]:
        """Takes one step and auto-resets finished episodes.

        Args:
            key: a PRNG key, split between the transition and (when done) the reset; whole to the
                reset when ``stochastic_transitions`` is False.
            state: the current state.
            action: an element of ``action_space(params)``.
            params: env params; ``default_params`` when None.

        Returns:
            ``(obs, state, reward, terminated, truncated, info)``. ``reward`` is float32, the flags
            are bool scalars; when ``terminated | truncated``, ``obs`` and ``state`` start the next
            episode and ``info["final_observation"]`` is the observation the finished episode ended
            on (otherwise it equals ``obs``).
        """
        if params is None:
            params = self.default_params
        if self.stochastic_transitions:
            key_step, key_reset = jax.random.split(key)
        else:
            key_step = key_reset = key  # step_env ignores its key, so the reset may use all of it
        obs_st, state_st, reward, terminated, info = self.step_env(key_step, state, action, params)
        reward, terminated, truncated = self._shaped(reward, terminated, state_st.time >= params.max_steps_in_episode)
        done = self._episode_over(terminated | truncated)
        obs_re, state_re = self.reset_env(key_reset, params)
        state = auto_reset(done, state_re, state_st)
        obs = auto_reset(done, obs_re, obs_st)
        info = {**info, "final_observation": obs_st}
        return obs, state, reward, terminated, truncated, info

    def _shaped(self, reward: Any, terminated: Any, truncated: Any) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``step``'s reward (float32) and flags (bool) in the contract's shapes: scalars here."""
        return jnp.asarray(reward, jnp.float32), jnp.asarray(terminated, jnp.bool_), jnp.asarray(truncated, jnp.bool_)

    def _episode_over(self, done: jax.Array) -> jax.Array:
        """Whether ``step`` auto-resets, from ``terminated | truncated``: the flag itself here."""
        return done


# --------------------------------------------------------------------------------------------------
# Multi-agent environments
# --------------------------------------------------------------------------------------------------

GLOBAL_STATE = "global_state"
"""The observation key of what a centralised critic sees in a multi-agent env: a leaf of each
agent's dict observation, ``[num_agents, G]`` (one row per agent: the same state for all of them, or
with something of the agent's own, as an agent id). Policies never read it; a centralised critic reads
it (``docs/env_api.md``, "Multi-agent environments")."""


def num_agents(env: Any) -> int:
    """How many agents act at once in ``env`` (its innermost env's ``num_agents``), 0 for a
    single-agent env or a turn-based game (one mover per step)."""
    while hasattr(env, "env") and not hasattr(env, "num_agents"):
        env = env.env
    n = getattr(env, "num_agents", 0)
    return int(n) if isinstance(n, (int, np.integer)) and not isinstance(n, bool) else 0


class MultiAgentEnvironment(Environment[TState, TParams]):
    """Base class of a multi-agent env: ``num_agents`` agents act at once, each with its own
    observation, action and reward, every one of them with a leading agent axis.

    * ``reset(key, params) -> (obs, state)``: every observation leaf ``[num_agents, ...]`` (row ``i``
      is agent ``i``'s observation); optional leaves :data:`LEGAL_ACTION_MASK` ``[num_agents, A]``
      and :data:`GLOBAL_STATE` ``[num_agents, G]``.
    * ``step(key, state, actions, params) -> (obs, state, reward, terminated, truncated, info)``:
      ``actions`` ``[num_agents, ...]`` (one element of ``action_space(params)`` per agent),
      ``reward`` float32 ``[num_agents]``, ``terminated`` and ``truncated`` bool ``[num_agents]``:
      an agent's ``terminated`` is True from the step its part ended (a unit that died, or the whole
      task's end) to the episode's end, ``truncated`` is the time limit (every agent on the step
      ``time`` reaches ``params.max_steps_in_episode``). The episode ends when every agent is done
      (``all(terminated | truncated)``); then ``obs``/``state`` start the next episode and
      ``info["final_observation"]`` is the last one, as in the single-agent contract.
    * ``observation_space(params)`` and ``action_space(params)`` are one agent's (all agents share
      them; agents of different spaces are padded to one, with a legal-action mask).

    Subclasses implement ``step_env`` returning ``(obs, state, reward [num_agents],
    terminated [num_agents] or a bool scalar for all, info)`` and ``reset_env``.
    """

    num_agents: int = 2

    def _shaped(self, reward: Any, terminated: Any, truncated: Any) -> tuple[jax.Array, jax.Array, jax.Array]:
        """The reward and flags broadcast to ``[num_agents]`` (a scalar flag or reward is every agent's)."""
        shape = (self.num_agents,)
        return (jnp.broadcast_to(jnp.asarray(reward, jnp.float32), shape),
                jnp.broadcast_to(jnp.asarray(terminated, jnp.bool_), shape),
                jnp.broadcast_to(jnp.asarray(truncated, jnp.bool_), shape))

    def _episode_over(self, done: jax.Array) -> jax.Array:
        """The episode ends when every agent is done."""
        return jnp.all(done)
