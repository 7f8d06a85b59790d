"""Evaluation: whole episodes of a policy, vectorised on the device, during training or after it.

:func:`run_episodes` is the compiled core: ``E`` envs in parallel (``vmap``), each running exactly
its first episode until it terminates or is truncated by the env's time limit; a
``lax.while_loop`` stops when every episode has ended (or after ``max_steps``, a guard for envs
without a time limit). :func:`evaluate` runs it for a loaded :class:`rljax.policy.trained.Policy`;
:class:`Evaluation` is the training loop's boundary hook that evaluates the greedy policy every
``config.eval_interval`` chunks and after the last, adding ``eval/*`` columns to the metrics rows.

A policy trained on host envs (:func:`rljax.policy.trained.is_host_policy`) is evaluated on host
envs: :func:`run_host_episodes` steps a batch of ``E`` of them on the host, one episode each, the
policy jitted once; :func:`evaluate` picks that path for it.

Evaluation draws its keys from a stream of its own, ``fold_in(fold_in(key(seed), EVAL_STREAM),
chunk)``, and never writes the train state: a run's params are bit-identical with evaluation on or
off.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rljax.runtime.distributed import fetch

__all__ = ["Episodes", "MemberInputs", "EVAL_STREAM", "DEFAULT_MAX_STEPS", "run_episodes", "run_host_episodes",
           "host_act", "agent_episodes", "team_episodes", "game_episodes", "max_episode_steps", "evaluate",
           "eval_columns", "Evaluation"]

EVAL_STREAM = 0x6576616C
"""Folded into the seed's key for evaluation keys (``"eval"`` in ASCII): a stream no training key uses."""

DEFAULT_MAX_STEPS = 100_000
"""The step guard for an env whose params name no ``max_steps_in_episode``."""


class Episodes(NamedTuple):
    """The outcome of ``E`` evaluation episodes.

    Attributes:
        returns: float32 ``[E]``, each episode's undiscounted return.
        lengths: int32 ``[E]``, its steps.
        truncated: bool ``[E]``: it ended by the time limit (or the ``max_steps`` guard), not by
            termination (an episode that does both counts as terminated).
        won: bool ``[E]``, the episode was won, where a multi-agent env reports wins
            (``info["won"]``, e.g. SMAX's); None otherwise.
    """

    returns: Any
    lengths: Any
    truncated: Any
    won: Any = None


def _host(x: Any) -> Any:
    return None if x is None else np.asarray(x)


def max_episode_steps(env_params: Any) -> int:
    """The env's time limit (the largest ``env_params.max_steps_in_episode``, which a sweep may
    stack per member), else :data:`DEFAULT_MAX_STEPS`."""
    limit = getattr(env_params, "max_steps_in_episode", None)
    if limit is None:
        return DEFAULT_MAX_STEPS
    try:
        return int(np.max(np.asarray(limit)))
    except (TypeError, jax.errors.ConcretizationTypeError):  # traced: fall back to the guard
        return DEFAULT_MAX_STEPS


def run_episodes(env: Any, env_params: Any, act: Callable[..., Any], key: jax.Array, num_episodes: int,
                 max_steps: int, memory: Any = None) -> Episodes:
    """Runs ``num_episodes`` episodes in parallel, each to its end. Pure and jittable.

    Args:
        env: a single, unbatched env (rljax/gymnax contract: ``step`` auto-resets).
        env_params: its params.
        act: ``act(obs [E, *obs_shape], key) -> action [E, ...]``; with ``memory``,
            ``act(obs, key, memory) -> (action, memory)``.
        key: a PRNG key (resets, actions and env steps are all drawn from it).
        num_episodes: E.
        max_steps: steps after which unfinished episodes are cut (and reported truncated).
        memory: a recurrent policy's memory at the episodes' start (leaves ``[E, ...]``), carried
            from step to step; None for a memoryless ``act``.

    Returns:
        :class:`Episodes` of jnp arrays ``[E]``.
    """
    k_reset, key = jax.random.split(key)
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_reset, num_episodes), env_params)
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    zeros = jnp.zeros((num_episodes,), jnp.bool_)
    init = (jnp.int32(0), obs, state, zeros, zeros, jnp.zeros((num_episodes,), jnp.float32),
            jnp.zeros((num_episodes,), jnp.int32), key, () if memory is None else memory)

    def cond(carry):
        t, done = carry[0], carry[3]
        return (t < max_steps) & ~jnp.all(done)

    def body(carry):
        t, obs, state, done, truncated, returns, lengths, key, mem = carry
        key, k_act, k_step = jax.random.split(key, 3)
        if memory is None:
            action = act(obs, k_act)
        else:  # each env runs only its first episode: the memory need not be reset at its end
            action, mem = act(obs, k_act, mem)
        obs, state, reward, term, trunc, _ = step(jax.random.split(k_step, num_episodes), state, action, env_params)
        running = ~done
        returns = returns + jnp.where(running, jnp.asarray(reward, jnp.float32), 0.0)
        lengths = lengths + running.astype(jnp.int32)
        # After its end an env auto-resets into a new episode: its rewards are masked from then on.
        truncated = jnp.where(running, trunc & ~term, truncated)
        return t + 1, obs, state, done | term | trunc, truncated, returns, lengths, key, mem

    _, _, _, done, truncated, returns, lengths, _, _ = jax.lax.while_loop(cond, body, init)
    return Episodes(returns, lengths, truncated | ~done)


def run_host_episodes(envs: Any, act: Callable[[np.ndarray, int], Any], seed: int, max_steps: int) -> Episodes:
    """Runs a batch of host envs until each has ended its first episode, on the host.

    Args:
        envs: ``E`` host envs (:class:`rljax.host.base.HostEnv`: ``reset(seed) -> obs [E, ...]``,
            ``step(actions) -> (obs, reward, terminated, truncated, final_obs)``, auto-resetting); env
            ``i`` is reset with seed ``seed + i``.
        act: ``act(obs [E, *obs_shape], t) -> actions [E, ...]`` at step ``t``.
        seed: the envs' seed.
        max_steps: steps after which unfinished episodes are cut (and reported truncated).

    Returns:
        :class:`Episodes` of numpy arrays ``[E]``; an env's steps after its first episode ended
        are not counted.
    """
    obs = envs.reset(int(seed))
    n = envs.spec.num_envs
    done, truncated = np.zeros(n, np.bool_), np.zeros(n, np.bool_)
    returns, lengths = np.zeros(n, np.float32), np.zeros(n, np.int32)
    t = 0
    while t < max_steps and not done.all():
        step = envs.step(np.asarray(act(obs, t)))
        running = ~done
        returns += np.where(running, step.reward, np.float32(0.0))
        lengths += running
        truncated = np.where(running, step.truncated & ~step.terminated, truncated)
        done |= step.terminated | step.truncated
        obs, t = step.obs, t + 1
    return Episodes(returns, lengths, truncated | ~done)


@functools.lru_cache(maxsize=64)
def _compiled_host_act(agent: Any, deterministic: bool) -> Callable[[Any, Any, jax.Array, Any], jax.Array]:
    """``jit((policy_params, obs [E, ...], key, t) -> actions)``: the agent's policy on a batch of host
    observations (in their own dtype, as the actors fed them), keyed ``fold_in(key, t)``."""
    return jax.jit(lambda params, obs, key, t: agent.policy(params, obs, jax.random.fold_in(key, t), deterministic))


def host_act(policy: Any, seed: int, deterministic: bool) -> Callable[[np.ndarray, int], np.ndarray]:
    """``act(obs [E, *obs_shape], t) -> actions`` of a host policy for :func:`run_host_episodes`:
    compiled once per batch shape; step ``t``'s key is ``fold_in(key(seed), t)``."""
    fn, key = _compiled_host_act(policy.agent, bool(deterministic)), jax.random.key(seed)
    return lambda obs, t: np.asarray(fn(policy.params, obs, key, np.uint32(t)))


def agent_episodes(agent: Any, env: Any, policy_params: Any, env_params: Any, key: jax.Array, num_episodes: int,
                   max_steps: int, deterministic: bool) -> Episodes:
    """:func:`run_episodes` of an :class:`~rljax.agents.base.Agent`'s policy through
    ``agent.policy_step``: a recurrent one with its memory from ``agent.memory`` at each episode's
    start, a memoryless one with ``()`` (no leaves: the same program as without a memory).

    In a two-player game (:func:`rljax.policy.games.is_game`) an episode is a game against the
    uniform random player (:func:`game_episodes`); in a multi-agent env, a game of the team
    (:func:`team_episodes`)."""
    from rljax.agents.base import agent_rows
    from rljax.env import num_agents
    from rljax.policy.games import game_observation

    if num_agents(env):
        def act(obs: Any, k: jax.Array, m: Any) -> Any:
            return agent.policy_step(policy_params, obs, m, k, deterministic)
        return team_episodes(env, env_params, act,
                             key, num_episodes, max_steps, agent.memory(num_episodes * num_agents(env)),
                             **agent_rows(agent.config))
    if game_observation(jax.eval_shape(env.reset, key, env_params)[0]):
        if jax.tree.leaves(agent.memory(1)):
            raise ValueError("evaluating a recurrent policy in a two-player game is not supported: a game's "
                             "evaluation plays matches, whose players have no memory")
        return game_episodes(env, env_params, lambda k, states, obs: agent.policy_step(
            policy_params, obs, (), k, deterministic)[0], key, num_episodes, max_steps)
    return run_episodes(env, env_params, lambda obs, k, m: agent.policy_step(policy_params, obs, m, k, deterministic),
                        key, num_episodes, max_steps, memory=agent.memory(num_episodes))


def team_episodes(env: Any, env_params: Any, act: Callable[..., Any], key: jax.Array, num_episodes: int,
                  max_steps: int, memory: Any = (), agent_id: bool = False, global_state: bool = False) -> Episodes:
    """``num_episodes`` episodes of a multi-agent ``env`` (:class:`rljax.env.MultiAgentEnvironment`),
    each game's first, played by ``act`` on the rows of :class:`rljax.core.wrappers.AgentBatch`
    (``E`` games of ``N`` agents as ``E * N`` rows, env-major). Pure and jittable.

    Args:
        env: a single, unbatched multi-agent env.
        env_params: its params.
        act: ``act(rows, key, memory) -> (actions [E * N, ...], memory)``; ``memory`` ``()`` for a
            memoryless policy.
        key: a PRNG key.
        num_episodes: E.
        max_steps: the step guard.
        memory: the memory at the episodes' start (leaves ``[E * N, ...]``), or ``()``.
        agent_id, global_state: the rows' layout (:class:`~rljax.core.wrappers.AgentBatch`).

    Returns:
        :class:`Episodes` ``[E]``: ``returns`` the team's (the sum of its agents' rewards), ``lengths``
        the game's steps, ``truncated`` a game the time limit ended before every agent terminated,
        ``won`` where the env reports ``info["won"]`` on a game's last step (else None).
    """
    from rljax.core.wrappers import AgentBatch, VecEnv

    stack = AgentBatch(VecEnv(env, num_episodes), agent_id=agent_id, global_state=global_state)
    games = (num_episodes, stack.num_agents)
    k_reset, key = jax.random.split(key)
    obs, state = stack.reset(k_reset, env_params)
    action = jax.eval_shape(act, obs, k_reset, memory)[0]
    reports_wins = "won" in jax.eval_shape(stack.step, k_reset, state, action, env_params)[5]
    zeros = jnp.zeros((num_episodes,), jnp.bool_)
    init = (jnp.int32(0), obs, state, zeros, zeros, jnp.zeros((num_episodes,), jnp.float32),
            jnp.zeros((num_episodes,), jnp.int32), key, memory, zeros)

    def cond(carry):
        return (carry[0] < max_steps) & ~jnp.all(carry[3])

    def body(carry):
        t, obs, state, done, truncated, returns, lengths, key, mem, won = carry
        key, k_act, k_step = jax.random.split(key, 3)
        action, mem = act(obs, k_act, mem)
        obs, state, reward, term, trunc, info = stack.step(k_step, state, action, env_params)
        term, trunc = term.reshape(games), trunc.reshape(games)
        running = ~done
        returns = returns + jnp.where(running, jnp.sum(reward.reshape(games), -1), 0.0)
        lengths = lengths + running.astype(jnp.int32)
        ended = jnp.all(term | trunc, -1)
        truncated = jnp.where(running, ended & ~jnp.all(term, -1), truncated)
        if reports_wins:
            won = jnp.where(running & ended, jnp.asarray(info["won"]).reshape(games)[:, 0], won)
        return t + 1, obs, state, done | ended, truncated, returns, lengths, key, mem, won

    _, _, _, done, truncated, returns, lengths, _, _, won = jax.lax.while_loop(cond, body, init)
    return Episodes(returns, lengths, truncated | ~done, won if reports_wins else None)


def game_episodes(env: Any, env_params: Any, player: Any, key: jax.Array, num_games: int, max_steps: int,
                  opponent: Any = None) -> Episodes:
    """``num_games`` games of a two-player ``env`` by ``player`` (a :data:`rljax.policy.games.Player`)
    against ``opponent`` (None: the uniform random player), moving first in the first
    ``ceil(num_games / 2)`` and second in the rest, as :class:`Episodes`: ``returns`` the game's score
    for ``player``, +1 a win, 0 a draw (or a game the time limit cut), -1 a loss; ``lengths`` the
    moves; ``truncated`` the games the limit cut. Pure and jittable
    (:func:`rljax.policy.games.play_games`)."""
    from rljax.policy.games import play_games, random_player

    first = jnp.arange(num_games) < (num_games + 1) // 2
    margin, finished, lengths = play_games(env, env_params, (player, opponent or random_player()), first, num_games,
                                           key, max_steps)
    return Episodes(jnp.sign(margin).astype(jnp.float32), lengths, ~finished)


@functools.lru_cache(maxsize=64)
def _compiled_episodes(agent: Any, env: Any, num_episodes: int, max_steps: int,
                       deterministic: bool) -> Callable[[Any, Any, jax.Array], Episodes]:
    """``jit((policy_params, env_params, key) -> Episodes)``, one per agent and shape."""
    return jax.jit(functools.partial(agent_episodes, agent, env, num_episodes=num_episodes, max_steps=max_steps,
                                     deterministic=deterministic))


def evaluate(policy: Any, num_episodes: int = 100, *, seed: int = 0, env_params: Any = None,
             deterministic: bool = True, max_steps: int | None = None) -> Episodes:
    """Runs a loaded policy for ``num_episodes`` episodes (in parallel, on the device; a policy of
    host envs on ``num_episodes`` host envs, env ``i`` seeded ``seed + i``: :func:`run_host_episodes`).

    Args:
        policy: a :class:`rljax.policy.trained.Policy`.
        num_episodes: E.
        seed: the evaluation's seed (the same seed, policy and env give the same episodes).
        env_params: env params to evaluate in (e.g. changed dynamics); None: those the policy
            trained with.
        deterministic: the greedy/mean policy (True) or the exploring one.
        max_steps: the step guard; None: the env's time limit (:func:`max_episode_steps`; a host
            env's own time limit ends its episodes, with :data:`DEFAULT_MAX_STEPS` as the guard).

    Returns:
        :class:`Episodes` of numpy arrays ``[E]``.
    """
    if not isinstance(num_episodes, (int, np.integer)) or isinstance(num_episodes, bool) or num_episodes < 1:
        raise ValueError(f"num_episodes must be a positive integer, got {num_episodes!r}")
    from rljax.policy.trained import is_host_policy

    if is_host_policy(policy):
        if env_params is not None:
            raise ValueError(f"env_params: {policy.env.name} is a host env, which has no env params to change")
        return _host_episodes(policy, int(num_episodes), seed, deterministic,
                              DEFAULT_MAX_STEPS if max_steps is None else int(max_steps))
    env_params = policy.env_params if env_params is None else env_params
    max_steps = max_episode_steps(env_params) if max_steps is None else int(max_steps)
    fn = _compiled_episodes(policy.agent, policy.env, int(num_episodes), max_steps, bool(deterministic))
    out = fn(policy.params, env_params, jax.random.key(seed))
    return Episodes(*(_host(x) for x in jax.device_get(out)))


def _host_episodes(policy: Any, num_episodes: int, seed: int, deterministic: bool, max_steps: int) -> Episodes:
    """``num_episodes`` episodes of a host policy: one batch of that many envs, or, from an env server
    (whose batch of ``E`` it sets itself), rounds of ``E`` (round ``r``: envs seeded ``seed + r E + i``,
    the policy keyed ``seed + r``), the first ``num_episodes`` envs' episodes kept."""
    envs = policy.env.make(None if policy.env.name.startswith("server:") else num_episodes)
    try:
        size = envs.spec.num_envs
        rounds = [run_host_episodes(envs, host_act(policy, seed + r, deterministic), seed + r * size, max_steps)
                  for r in range(-(-num_episodes // size))]
    finally:
        envs.close()
    return Episodes(*(np.concatenate(x)[:num_episodes] for x in zip(*(r[:3] for r in rounds))))


def eval_columns(episodes: Episodes) -> dict[str, float]:
    """The ``eval/*`` metrics columns of one evaluation (host numpy ``[E]`` arrays in)."""
    returns, lengths = np.asarray(episodes.returns, np.float64), np.asarray(episodes.lengths, np.float64)
    out = {"eval/return_mean": float(returns.mean()), "eval/return_std": float(returns.std()),
           "eval/return_median": float(np.median(returns)), "eval/return_min": float(returns.min()),
           "eval/return_max": float(returns.max()), "eval/length_mean": float(lengths.mean()),
           "eval/episodes": int(returns.size)}
    if episodes.won is not None:  # a multi-agent env that reports wins (SMAX)
        out["eval/win_rate"] = float(np.mean(np.asarray(episodes.won, np.float64)))
    return out


class MemberInputs:
    """What a greedy episode of each member of a run reads of its train state, ``(policy_params,
    env_params)`` with a leading member axis, gathered on one device: the small inputs move there, not
    the state (no replay buffer is copied, no program with collectives runs beside a chunk). Shared
    by the hooks that play episodes during training (evaluation, videos).

    Args:
        program: the run's :class:`rljax.training.program.Program`.

    Attributes:
        device: the device the inputs are put on (the local first one when the run spans processes).
    """

    def __init__(self, program: Any):
        agent = program.agent

        def inputs(state: Any) -> tuple[Any, Any]:  # what one member's episode reads of its state
            return agent.policy_params(state), state.env_params

        if program.isolated:
            self._inputs = jax.jit(jax.vmap(inputs))
        else:  # every device holds the same params: device 0's, with a member axis of 1
            num_devices = program.config.num_devices
            self._inputs = jax.jit(lambda s: jax.tree.map(lambda x: x[None], inputs(
                s if num_devices == 1 else jax.tree.map(lambda x: x[0], s))))
        self.device = jax.local_devices()[0] if jax.process_count() > 1 else program.parallel.devices[0]

    def __call__(self, state: Any) -> tuple[Any, Any]:
        """``(policy_params, env_params)`` of every member of ``state``, on :attr:`device`. In a run
        over several processes every process must call it (it gathers the inputs whole)."""
        inputs = self._inputs(state)
        if jax.process_count() > 1:  # spans processes: every process gathers the (small) inputs whole
            inputs = fetch(inputs)
        return jax.device_put(inputs, self.device)


class Evaluation:
    """The loop's evaluation hook: the greedy policy of every member, every ``eval_interval``
    chunks and after the last, ``eval_episodes`` episodes each; the ``eval/*`` columns are added to
    the chunk's rows before they are logged (so it must precede :class:`rljax.store.tracking.Tracking`).

    Args:
        program: the run's :class:`rljax.training.program.Program`.
        interval: ``config.eval_interval`` (> 0).
        num_episodes: ``config.eval_episodes``.
    """

    def __init__(self, program: Any, interval: int, num_episodes: int):
        self.program, self.interval = program, interval
        agent, env = program.agent, program.env
        max_steps = max_episode_steps(program.env_params if program.population is None
                                      else program.population.env_params)

        def episodes(policy_params: Any, env_params: Any, key: jax.Array) -> Episodes:
            return agent_episodes(agent, env, policy_params, env_params, key, num_episodes, max_steps, True)

        self._inputs = MemberInputs(program)
        self._episodes = jax.jit(jax.vmap(episodes))
        base = jax.vmap(lambda s: jax.random.fold_in(jax.random.key(s), EVAL_STREAM))(
            jnp.asarray(program.seeds, jnp.uint32))
        self._keys = jax.jit(lambda c: jax.vmap(jax.random.fold_in, in_axes=(0, None))(base, c))

    def due(self, run: Any, chunk_index: int, last: bool) -> bool:
        """Chunk ``c`` is evaluated when ``(c + 1) % interval == 0`` or it is the last."""
        return last or (chunk_index + 1) % self.interval == 0

    def record(self, run: Any, chunk_index: int, rows: list[dict[str, Any]]) -> None:
        """Evaluates the state of chunk ``c`` (when due) and adds the ``eval/*`` columns to ``rows``."""
        if run.ahead is not None or not self.due(run, chunk_index, chunk_index == run.plan.num_chunks - 1):
            return  # (never both: a due chunk is not launched ahead of)
        t0 = time.perf_counter()
        policy_params, env_params = self._inputs(run.state)
        keys = jax.device_put(self._keys(jnp.int32(chunk_index)), self._inputs.device)
        out = jax.device_get(self._episodes(policy_params, env_params, keys))
        for i, row in enumerate(rows):
            row.update(eval_columns(Episodes(*(None if x is None else np.asarray(x)[i] for x in out))))
        run.timings["eval_s"] += time.perf_counter() - t0
