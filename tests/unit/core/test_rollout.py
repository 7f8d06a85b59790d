"""The rollout scan (:mod:`rljax.core.rollout`) over ``Ticker`` (:mod:`tests.support.ticker`: obs
1, 2, 3, rewards 1, 2, 3, truncated after 3 steps), checked step by step: the transitions, the
bootstrap observation of a truncated step, the policy's extras and keys, ``observe``, the carry
that continues a rollout, and the episode summary with and without ``EpisodeStatistics``."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from rljax.core.rollout import EpisodeSummary, RolloutCarry, rollout, summarize_episodes
from rljax.core.wrappers import EpisodeInfo, EpisodeStatistics, VecEnv
from tests.support.ticker import Ticker

NUM_ENVS = 2
ENV = Ticker()
PARAMS = ENV.default_params
STACK = EpisodeStatistics(VecEnv(ENV, NUM_ENVS))


def _policy(key, obs):
    """Action 1 for every env; extras: the observation it saw doubled, and the key's first word."""
    return jnp.ones(obs.shape[:1], jnp.int32), {"seen": 2 * obs[:, 0], "key": jax.random.key_data(key)[..., 0]}


NUM_STEPS = 7  # two whole episodes and one step of a third: every test runs this length (one compile each)


@functools.partial(jax.jit, static_argnames=("with_stats", "observed"))
def _run(carry, key, with_stats=True, observed=False):
    env = STACK if with_stats else VecEnv(ENV, NUM_ENVS)
    observe = (lambda state, obs: obs + 100.0) if observed else None
    return rollout(env, PARAMS, _policy, carry, key, NUM_STEPS, observe)


@functools.cache
def _from_start():
    """The rollout of :data:`NUM_STEPS` from the first reset (shared by the tests that read it)."""
    return _run(_start(), jax.random.key(1))


def _start(with_stats=True):
    env = STACK if with_stats else VecEnv(ENV, NUM_ENVS)
    obs, state = env.reset(jax.random.key(0), PARAMS)
    return RolloutCarry(state, obs)


def test_rollout_next_obs_is_the_final_observation_on_truncation():
    carry, traj, episodes = _from_start()
    # obs 1 2 3 | 1 2 3 | 1; the true successors 2 3 4 | 2 3 4 | 2 (4: the final observation, not
    # the next episode's first observation 1).
    np.testing.assert_array_equal(traj.obs[:, 0, 0], [1, 2, 3, 1, 2, 3, 1])
    np.testing.assert_array_equal(traj.next_obs[:, :, 0], np.repeat([[2, 3, 4, 2, 3, 4, 2]], 2, 0).T)
    np.testing.assert_array_equal(traj.truncated[:, 0], [0, 0, 1, 0, 0, 1, 0])
    assert not traj.terminated.any()
    # Two whole episodes per env, each of return 1 + 2 + 3 and length 3.
    assert float(episodes.count) == 4 and float(episodes.return_sum) == 4 * 6
    assert float(episodes.length_sum) == 4 * 3 and episodes.components == {}
    # The carry: after 7 steps each env is one step into its third episode.
    np.testing.assert_array_equal(carry.obs[:, 0], [2, 2])


def test_transitions_are_time_major_with_the_policys_action_and_extras():
    _, traj, _ = _from_start()
    assert traj.obs.shape == traj.next_obs.shape == (NUM_STEPS, NUM_ENVS, 1)
    assert traj.action.shape == traj.reward.shape == traj.terminated.shape == (NUM_STEPS, NUM_ENVS)
    assert traj.reward.dtype == jnp.float32 and traj.truncated.dtype == jnp.bool_
    np.testing.assert_array_equal(traj.action, np.ones((NUM_STEPS, NUM_ENVS)))
    np.testing.assert_array_equal(traj.reward[:, 0], [1, 2, 3, 1, 2, 3, 1])
    np.testing.assert_array_equal(traj.extras["seen"][:, 1], [2, 4, 6, 2, 4, 6, 2])  # the policy saw obs itself
    # Each step's action key is the first half of a split of its own key: one per step, all distinct.
    step_keys = jax.random.split(jax.random.key(1), NUM_STEPS)
    expected = jax.random.key_data(jax.vmap(lambda k: jax.random.split(k)[0])(step_keys))[:, 0]
    np.testing.assert_array_equal(traj.extras["key"], expected)


def test_observe_changes_what_the_policy_sees_but_not_the_transitions():
    _, traj, _ = _run(_start(), jax.random.key(1), observed=True)
    np.testing.assert_array_equal(traj.extras["seen"][:, 0], [202, 204, 206, 202, 204, 206, 202])
    np.testing.assert_array_equal(traj.obs[:, 0, 0], [1, 2, 3, 1, 2, 3, 1])


def test_a_rollout_continues_from_its_carry():
    carry, _, _ = _from_start()
    _, second, episodes = _run(carry, jax.random.key(2))
    np.testing.assert_array_equal(second.obs[:, 0, 0], [2, 3, 1, 2, 3, 1, 2])
    np.testing.assert_array_equal(second.truncated[:, 0], [0, 1, 0, 0, 1, 0, 0])
    # The episode begun in the first rollout is counted whole when it ends: return 1 + 2 + 3, length 3.
    assert float(episodes.count) == 2 * NUM_ENVS and float(episodes.return_sum) == 2 * NUM_ENVS * 6
    assert float(episodes.length_sum) == 2 * NUM_ENVS * 3


def test_without_episode_statistics_the_summary_is_zero():
    _, traj, episodes = _run(_start(with_stats=False), jax.random.key(1), with_stats=False)
    assert traj.truncated[2].all()
    assert [float(x) for x in (episodes.count, episodes.return_sum, episodes.length_sum)] == [0.0, 0.0, 0.0]


def test_summarize_episodes_and_summary_addition_by_hand():
    done = jnp.array([[True, False], [False, True]])
    info = EpisodeInfo(done=done, return_=jnp.array([[5.0, 99.0], [99.0, 7.0]]),
                       length=jnp.array([[3, 99], [99, 4]], jnp.int32),
                       components={"speed": jnp.array([[1.0, 50.0], [50.0, 2.0]])})
    s = summarize_episodes(info)  # only the two finished episodes count
    assert (float(s.count), float(s.return_sum), float(s.length_sum), float(s.components["speed"])) == (2, 12, 7, 3)
    total = s + EpisodeSummary.zeros(("speed",)) + s
    assert (float(total.count), float(total.return_sum), float(total.components["speed"])) == (4, 24, 6)
    zeros = EpisodeSummary.zeros()
    assert zeros.components == {} and zeros.count.dtype == jnp.float32 and zeros.count.shape == ()
