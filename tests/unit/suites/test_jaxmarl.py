"""JaxMARL's envs as rljax multi-agent envs (rljax/suites/jaxmarl.py): the same episodes as JaxMARL's
own step with the time limit now rljax's truncation, SMAX's available actions and world state,
agents of different spaces padded and masked, and the refusals. IPPO and MAPPO training on them:
tests/unit/agents/test_mappo.py and experiments/ippo_mpe.py."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("jaxmarl")

import rljax  # noqa: E402
from rljax.env import GLOBAL_STATE, LEGAL_ACTION_MASK, num_agents  # noqa: E402
from rljax.suites import jaxmarl as jaxmarl_suite  # noqa: E402

SMAX_3M = dict(scenario="3m", see_enemy_actions=True, walls_cause_death=True, attack_mode="closest")


def test_ids_are_jaxmarls():
    assert {"MPE_simple_spread_v3", "HeuristicEnemySMAX"} <= set(jaxmarl_suite.ids())
    with pytest.raises(ValueError, match="unknown jaxmarl environment 'MPE_nope'; jaxmarl has: "):
        rljax.make("jaxmarl/MPE_nope")


def test_mpe_plays_jaxmarls_own_episode_and_its_time_limit_is_truncation():
    """Step for step the observations and rewards of JaxMARL's simple_spread (built with its own limit,
    25: 26 steps an episode), which ends only by that limit: rljax's truncation on step 26, never a
    termination, and every agent's row of the global state is all agents' observations."""
    import jaxmarl

    env, params = rljax.make("jaxmarl/MPE_simple_spread_v3")
    theirs = jaxmarl.make("MPE_simple_spread_v3")
    assert num_agents(env) == 3 and params.max_steps_in_episode == theirs.max_steps + 1 == 26
    key = jax.random.key(0)
    obs, state = env.reset_env(key, params)
    their_obs, their_state = theirs.reset(key)
    step_env, their_step = jax.jit(env.step_env), jax.jit(theirs.step_env)
    for t in range(26):
        k_act, k_step = jax.random.split(jax.random.fold_in(key, t))
        actions = jax.random.randint(k_act, (3,), 0, 5)
        obs, state, reward, term, _ = step_env(k_step, state, actions, params)
        their_obs, their_state, their_reward, dones, _ = their_step(
            k_step, their_state, {a: actions[i] for i, a in enumerate(theirs.agents)})
        np.testing.assert_array_equal(obs["observation"], np.stack([their_obs[a] for a in theirs.agents]))
        np.testing.assert_array_equal(obs[GLOBAL_STATE][2], np.asarray(obs["observation"]).reshape(-1))
        np.testing.assert_array_equal(reward, np.stack([their_reward[a] for a in theirs.agents]))
        assert not np.any(term) and bool(dones["__all__"]) == (t == 25), t  # JaxMARL's end: its time limit
    # Through rljax's step: truncated on step 26 for every agent, then a new episode.
    step = jax.jit(env.step)
    obs, state = env.reset(key, params)
    for t in range(26):
        obs, state, reward, term, trunc, info = step(jax.random.key(t), state, jnp.zeros(3, jnp.int32), params)
        assert not np.any(term) and np.all(trunc) == (t == 25) and np.any(trunc) == (t == 25), t
    assert int(state.time) == 0


def test_smax_masks_unavailable_actions_and_gives_the_world_state():
    env, params = rljax.make("jaxmarl/HeuristicEnemySMAX", **SMAX_3M)
    space = env.observation_space(params)
    assert env.agent_names == ("ally_0", "ally_1", "ally_2") and params.max_steps_in_episode == 101
    assert space["observation"].shape == (75,) and space[GLOBAL_STATE].shape == (72,)
    assert space[LEGAL_ACTION_MASK].shape == (8,) and env.action_space(params).n == 8
    obs, state = env.reset(jax.random.key(1), params)
    avail = env._env.get_avail_actions(state.inner)
    np.testing.assert_array_equal(obs[LEGAL_ACTION_MASK], np.stack([avail[a] for a in env.agent_names]).astype(bool))
    np.testing.assert_array_equal(obs[GLOBAL_STATE][0], obs[GLOBAL_STATE][1])
    with pytest.raises(ValueError, match="unknown SMAX scenario 'nope'"):
        rljax.make("jaxmarl/HeuristicEnemySMAX", scenario="nope")


# Slow: by default test_smax_wins_reach_evaluation_as_a_win_rate (won games end terminated) stands for it.
@pytest.mark.slow
def test_smax_ends_by_a_wipe_as_termination_and_a_dead_unit_stays_terminated():
    """Random play in 3m until the episode ends: the end is a termination (a team wiped out) for
    every agent, and an agent that died before it is terminated from then on."""
    env, params = rljax.make("jaxmarl/HeuristicEnemySMAX", **SMAX_3M)
    step = jax.jit(env.step)
    obs, state = env.reset(jax.random.key(2), params)
    seen_dead = np.zeros(3, bool)
    for t in range(101):
        legal = obs[LEGAL_ACTION_MASK]
        actions = jax.random.categorical(jax.random.key(t), jnp.where(legal, 0.0, -1e9))
        obs, state, reward, term, trunc, _ = step(jax.random.key(100 + t), state, actions, params)
        term, trunc = np.asarray(term), np.asarray(trunc)
        assert np.all(term[seen_dead]), "a dead unit is terminated until the episode ends"
        if np.all(term | trunc):
            break
        seen_dead |= term
    assert np.all(term) and not np.any(trunc) and t < 100, (t, term, trunc)


def test_agents_of_different_spaces_are_padded_and_their_missing_actions_masked():
    """simple_speaker_listener: the speaker sees 3 numbers and has 3 actions, the listener 11 and 5."""
    env, params = rljax.make("jaxmarl/MPE_simple_speaker_listener_v4")
    assert env.agent_names == ("speaker_0", "listener_0")
    assert env.observation_space(params)["observation"].shape == (11,) and env.action_space(params).n == 5
    obs, _ = env.reset(jax.random.key(0), params)
    assert np.asarray(obs[LEGAL_ACTION_MASK]).tolist() == [[True] * 3 + [False] * 2, [True] * 5]
    assert not np.any(np.asarray(obs["observation"])[0, 3:])


def test_a_bad_time_limit_is_refused():
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match=r"jaxmarl/MPE_simple_spread_v3: max_steps must be a positive int"):
            rljax.make("jaxmarl/MPE_simple_spread_v3", max_steps=bad)
    env, params = rljax.make("jaxmarl/MPE_simple_spread_v3", max_steps=10)
    assert params.max_steps_in_episode == 10


def test_smax_wins_reach_evaluation_as_a_win_rate():
    """team_episodes reads SMAX's info["won"] at each game's end; a won game ended by termination
    with the enemy wiped out (the win bonus is in its return); the eval columns carry the rate. The
    players: each unit moves (action 1) until it may attack, then attacks a random enemy in range
    (about 1 game in 5 won; uniformly random play wins none)."""
    from rljax.policy.evaluate import eval_columns, team_episodes

    env, params = rljax.make("jaxmarl/HeuristicEnemySMAX", **SMAX_3M)

    def act(rows, key, memory):
        mask = rows[LEGAL_ACTION_MASK]
        attacks = mask & (jnp.arange(mask.shape[-1]) >= 5)  # 0-4 move or stop, 5+ attack enemy i
        attack = jnp.argmax(jnp.where(attacks, jax.random.uniform(key, mask.shape) + 1, 0), -1)
        return jnp.where(jnp.any(attacks, -1), attack, 1).astype(jnp.int32), memory

    episodes = jax.jit(lambda key: team_episodes(env, params, act, key, 64, 101))(jax.random.key(0))
    won, truncated, returns = (np.asarray(x) for x in (episodes.won, episodes.truncated, episodes.returns))
    assert won.dtype == bool and won.shape == (64,) and 0 < won.sum() < 64, won.sum()
    assert not np.any(truncated[won]) and np.all(returns[won] >= 3.0)  # 1 per ally for the win, and the damage
    columns = eval_columns(episodes)
    assert columns["eval/win_rate"] == won.mean()
    assert "eval/win_rate" not in eval_columns(episodes._replace(won=None))


def test_importing_jaxmarl_leaves_the_callers_output_alone():
    """jaxmarl's import prints and its MABrax module sets sys.stdout to sys.__stdout__: the adapter
    imports it quietly and puts the caller's streams back (a fresh process: here jaxmarl is imported)."""
    import subprocess
    import sys

    code = ("import io, sys\nbuf = io.StringIO()\nsys.stdout = buf\nimport rljax\n"
            "rljax.make('jaxmarl/MPE_simple_spread_v3')\nok = sys.stdout is buf\nsys.stdout = sys.__stdout__\n"
            "print('same' if ok else 'replaced', repr(buf.getvalue()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "same ''" and "Submoduled" not in out.stderr
