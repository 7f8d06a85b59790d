"""The multi-agent env contract (rljax.env.MultiAgentEnvironment), its test game (envs/multiagent.py,
Rendezvous-v0) and the wrapper that shows a vector of multi-agent envs to a single-agent learner
(rljax.core.wrappers.AgentBatch), with the team's and each agent's episode returns."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envs.multiagent import Rendezvous, RendezvousState
from rljax.core import wrappers
from rljax.env import GLOBAL_STATE, num_agents


def _state(first: int, second: int, time: int = 0) -> RendezvousState:
    return RendezvousState(time=jnp.int32(time), position=jnp.array([first, second], jnp.int32))


def _optimal(position: np.ndarray, ring: int) -> np.ndarray:
    """The best joint move: both walk toward each other the shorter way (where both ways are as
    long, agent 0 clockwise and agent 1 anticlockwise: the symmetry an agent id breaks); one cell
    apart, agent 0 steps over and agent 1 waits (both moving would swap them)."""
    cw = int(position[1] - position[0]) % ring  # agent 1 clockwise from agent 0
    if cw == 0:
        return np.array([0, 0])
    if min(cw, ring - cw) == 1:
        return np.array([1 if cw == 1 else 2, 0])
    return np.array([1, 2]) if 2 * cw <= ring else np.array([2, 1])


def test_the_game_by_hand():
    env = Rendezvous()
    params = env.default_params
    assert num_agents(env) == 2 and env.action_space(params).n == 3
    obs = env._obs(jnp.array([1, 6]))
    # Each agent sees the other's clockwise offset: 5 from agent 0, 3 from agent 1; the global state is both cells.
    assert np.argmax(obs["observation"], -1).tolist() == [5, 3]
    assert np.flatnonzero(obs[GLOBAL_STATE][0]).tolist() == [1, 8 + 6]
    np.testing.assert_array_equal(obs[GLOBAL_STATE][1], obs[GLOBAL_STATE][0])
    # Moving: 0 stays, 1 clockwise, 2 anticlockwise (mod 8); apart after the move costs -1 to both.
    o, s, r, term, info = env.step_env(jax.random.key(0), _state(7, 3), jnp.array([1, 2]), params)
    assert s.position.tolist() == [0, 2] and r.tolist() == [-1.0, -1.0] and not bool(term) and s.time == 1
    # Meeting: 0 to both and the episode terminates for both, then auto-resets.
    o, s, r, term, trunc, info = env.step(jax.random.key(0), _state(2, 3), jnp.array([1, 0]), params)
    assert r.tolist() == [0.0, 0.0] and term.tolist() == [True, True] and trunc.tolist() == [False, False]
    assert np.argmax(info["final_observation"]["observation"], -1).tolist() == [0, 0] and s.time == 0
    # The time limit truncates every agent on the step time reaches it.
    o, s, r, term, trunc, info = env.step(jax.random.key(0), _state(0, 4, time=15), jnp.array([0, 0]), params)
    assert trunc.tolist() == [True, True] and term.tolist() == [False, False] and s.time == 0


def test_every_start_is_two_different_cells_drawn_uniformly():
    env = Rendezvous()
    reset = jax.jit(jax.vmap(env.reset_env, in_axes=(0, None)))
    _, states = reset(jax.random.split(jax.random.key(0), 7000), env.default_params)
    offset = np.asarray((states.position[:, 1] - states.position[:, 0]) % 8)
    counts = np.bincount(offset, minlength=8)
    assert counts[0] == 0 and np.all(np.abs(counts[1:] / 7000 - 1 / 7) < 0.02), counts


@pytest.mark.parametrize("ring", [3, 8, 9])
def test_the_optimum_is_what_the_best_joint_policy_earns(ring):
    """optimal_return by hand (-3/7 on the ring of 8) equals the mean return of the best joint policy
    played from every start, each start once (every offset is equally likely)."""
    env = Rendezvous(ring)
    params = env.default_params
    returns = []
    for offset in range(1, ring):
        state, total = _state(0, offset), 0.0
        for _ in range(ring):
            _, state, r, term, _ = env.step_env(jax.random.key(0), state,
                                                jnp.asarray(_optimal(np.asarray(state.position), ring)), params)
            total += float(r[0])
            if bool(term):
                break
        d = min(offset, ring - offset)
        assert total == 1 - math.ceil(d / 2), (offset, total)
        returns.append(total)
    assert env.optimal_return() == pytest.approx(np.mean(returns))
    if ring == 8:
        assert env.optimal_return() == pytest.approx(-3 / 7)


def test_bad_ring_sizes_are_refused():
    for bad in (2, 0, 2.5, True, "8"):
        with pytest.raises(ValueError, match=r"Rendezvous\(ring_size=.*\): give an int >= 3"):
            Rendezvous(bad)


def test_agent_batch_is_env_major_and_round_trips_actions():
    env, E = Rendezvous(), 3
    inner = wrappers.VecEnv(env, E)
    batch = wrappers.AgentBatch(inner, agent_id=True)
    assert batch.batch_shape == (6,) and batch.num_agents == 2
    key = jax.random.key(1)
    obs_i, state_i = inner.reset(key)
    obs, state = batch.reset(key)
    assert obs["observation"].shape == (6, 8) and obs[GLOBAL_STATE].shape == (6, 16)
    np.testing.assert_array_equal(obs["observation"].reshape(3, 2, 8), obs_i["observation"])
    np.testing.assert_array_equal(obs[wrappers.AGENT_ID], np.tile(np.eye(2), (3, 1)))
    assert set(batch.observation_space()) == {"observation", GLOBAL_STATE, wrappers.AGENT_ID}
    actions = jnp.array([1, 2, 0, 1, 2, 2], jnp.int32)  # row e * 2 + i: agent i of env e
    out_i = jax.jit(inner.step)(key, state_i, actions.reshape(3, 2))
    out = jax.jit(batch.step)(key, state, actions)
    np.testing.assert_array_equal(out[1].env_state.position, out_i[1].env_state.position)
    np.testing.assert_array_equal(out[2], out_i[2].reshape(-1))
    np.testing.assert_array_equal(out[3], out_i[3].reshape(-1))
    np.testing.assert_array_equal(out[5]["final_observation"]["observation"],
                                  out_i[5]["final_observation"]["observation"].reshape(6, 8))


def test_agent_batch_counts_each_episode_once_with_the_teams_and_each_agents_return():
    env = wrappers.AgentBatch(wrappers.EpisodeStatistics(wrappers.VecEnv(Rendezvous(), 4)))
    step = jax.jit(env.step)
    obs, state = env.reset(jax.random.key(0))
    starts = np.asarray(state.env_state.env_state.position)
    total = np.zeros(4)
    for t in range(3):  # everyone waits: nobody meets, every episode runs to the limit of 16
        obs, state, r, term, trunc, info = step(jax.random.key(t), state, jnp.zeros(8, jnp.int32))
        total += np.asarray(r).reshape(4, 2)[:, 0]
        assert not np.any(info["episode"].done)
    pos = np.asarray(state.env_state.env_state.position)
    np.testing.assert_array_equal(pos, starts)
    # Walk the first env's agents toward each other until they meet; the others wait.
    for t in range(3, 16):
        p = np.asarray(state.env_state.env_state.position)
        act = np.zeros((4, 2), np.int32)
        act[0] = _optimal(p[0], 8)
        obs, state, r, term, trunc, info = step(jax.random.key(t), state, jnp.asarray(act.reshape(-1)))
        total += np.asarray(r).reshape(4, 2)[:, 0]
        ep = info["episode"]
        done = np.asarray(ep.done).reshape(4, 2)
        assert not np.any(done[:, 1]), "an episode is counted on its agent 0's row only"
        if done[0, 0]:
            assert float(ep.return_[0]) == 2 * total[0]  # the team's: the sum of both agents' returns
            assert float(ep.components["agent_return/agent_0"][0]) == float(ep.components["agent_return/agent_1"][0]) \
                == total[0]
            assert int(ep.length[0]) == t + 1
            break
    else:
        raise AssertionError("the first env's agents never met")
    assert float(jnp.sum(ep.return_ * ep.done)) == 2 * total[0]


def test_agent_batch_refuses_a_single_agent_env_or_an_unbatched_one():
    import envs

    cartpole, _ = envs.make("CartPole-v1")
    with pytest.raises(ValueError, match="not a multi-agent env"):
        wrappers.AgentBatch(wrappers.VecEnv(cartpole, 2))
    with pytest.raises(ValueError, match=r"batch shape is \(\); give VecEnv\(env, num_envs\)"):
        wrappers.AgentBatch(Rendezvous())


def test_rows_carry_each_agents_return_beside_the_teams():
    from rljax.cli.rundata import metric_columns
    from rljax.training.loop import _episode_columns

    row = _episode_columns(2, -6.0, 8.0, {"agent_return/agent_0": -2.0, "agent_return/agent_1": -4.0, "bonus": 1.0},
                           0)
    assert row["episode_return_mean"] == -3.0 and row["agent_return/agent_0"] == -1.0
    assert row["agent_return/agent_1"] == -2.0 and row["reward_components/bonus"] == 0.5
    assert metric_columns([{"env_steps": 1, **row, "loss": 0.5}]) == ([], {"loss": 0.5})  # not the algorithm's


def test_agent_batch_drops_or_keeps_the_global_state():
    env = wrappers.VecEnv(Rendezvous(), 2)
    for keep in (True, False):
        batch = wrappers.AgentBatch(env, global_state=keep)
        obs, _ = batch.reset(jax.random.key(0))
        assert (GLOBAL_STATE in obs) == keep == (GLOBAL_STATE in batch.observation_space())


@pytest.mark.parametrize("agent_id", [True, False])
def test_one_shared_policy_reaches_the_optimum_only_when_it_knows_which_agent_it_is(agent_id):
    """Parameter sharing through AgentBatch (IPPO, rljax/agents/mappo.py): 16 games of 2 agents as 32
    rows of one PPO batch. With the agent id the team's return reaches the optimum (2 x -3/7); without,
    the agents half the ring apart see the same offset, and a shared policy cannot send them toward
    each other at once."""
    import rljax
    from rljax.agents.mappo import IPPOConfig

    env = Rendezvous()
    config = IPPOConfig(total_timesteps=100_000, num_envs=16, num_steps=64, num_minibatches=4, num_epochs=4,
                        hidden_sizes=(64, 64), learning_rate=2.5e-3, ent_coef=0.01, agent_id=agent_id)
    result = rljax.train(config, env=env, options=rljax.RunOptions(quiet=True))
    optimum = 2 * env.optimal_return()
    if agent_id:
        assert result.final_return > optimum - 0.05, result.final_return
    else:
        assert result.final_return < optimum - 0.15, result.final_return
    row = result.rows[-1]
    assert row["agent_return/agent_0"] == pytest.approx(row["agent_return/agent_1"])  # a shared reward
    assert row["episode_return_mean"] == pytest.approx(2 * row["agent_return/agent_0"])
