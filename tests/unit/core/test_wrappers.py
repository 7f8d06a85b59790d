"""Tests for rljax.core.wrappers, against hand-computed numbers.

Two tiny deterministic envs are defined here:

* ``CounterEnv``: obs ``[counter]``; reset sets ``counter = start_scale * U(0, 1)`` (0 when
  ``start_scale == 0``); action ``a in {0, 1, 2}`` adds ``a`` to the counter; the reward of the
  ``t``-th step of an episode is ``t`` (1, 2, 3, ...); action 2 terminates; the base class truncates
  at ``max_steps_in_episode``.
* ``EchoEnv``: a Box action space ``[-2, 0] .. [2, 10]``; the obs is the action it received.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

from rljax.env import Box, Discrete, EnvParams, EnvState, Environment
from rljax.core.wrappers import (
    env_nonfinite,
    ClipAction,
    EpisodeInfo,
    EpisodeStatistics,
    NormalizeObservation,
    NormalizeReward,
    RescaleAction,
    RunningMeanStd,
    VecEnv,
    batch_shape_of,
    transfer_stats,
)

gymnax = pytest.importorskip("gymnax")


# --------------------------------------------------------------------------------------------------
# Test envs
# --------------------------------------------------------------------------------------------------


@struct.dataclass
class CounterState(EnvState):
    counter: jax.Array


@struct.dataclass
class CounterParams(EnvParams):
    max_steps_in_episode: int = 4
    start_scale: float = 0.0


class CounterEnv(Environment):
    @property
    def default_params(self) -> CounterParams:
        return CounterParams()

    def reset_env(self, key, params):
        counter = params.start_scale * jax.random.uniform(key, (), jnp.float32)
        state = CounterState(time=jnp.int32(0), counter=counter)
        return counter[None], state

    def step_env(self, key, state, action, params):
        counter = state.counter + action.astype(jnp.float32)
        time = state.time + 1
        reward = time.astype(jnp.float32)
        return counter[None], CounterState(time=time, counter=counter), reward, action == 2, {}

    def observation_space(self, params):
        return Box(-jnp.inf, jnp.inf, (1,))

    def action_space(self, params):
        return Discrete(3)


@struct.dataclass
class EchoState(EnvState):
    pass


class EchoEnv(Environment):
    def __init__(self, low=(-2.0, 0.0), high=(2.0, 10.0)):
        self.low, self.high = low, high

    @property
    def default_params(self) -> EnvParams:
        return EnvParams()

    def reset_env(self, key, params):
        return jnp.zeros(2, jnp.float32), EchoState(time=jnp.int32(0))

    def step_env(self, key, state, action, params):
        obs = action.astype(jnp.float32)
        return obs, EchoState(time=state.time + 1), jnp.float32(0.0), jnp.bool_(False), {}

    def observation_space(self, params):
        return Box(-jnp.inf, jnp.inf, (2,))

    def action_space(self, params):
        return Box(jnp.asarray(self.low), jnp.asarray(self.high), (2,))


KEY = jax.random.key(0)


def fast_jit(fn):
    """``jax.jit`` without XLA's backend optimisations: these programs are tiny and run once, so
    compile time is nearly all of the suite's time and optimising them only slows it down."""
    return jax.jit(fn, compiler_options={"xla_backend_optimization_level": 0})


def scan_rollout(env, params, actions, key):
    """Resets then steps ``env`` once per row of ``actions`` with ``lax.scan`` (traceable).

    Returns ``(reset_obs, reset_state, per-step (obs, state, reward, terminated, truncated, info))``.
    """
    k_reset, k_steps = jax.random.split(key)
    obs0, state0 = env.reset(k_reset, params)

    def body(state, xs):
        k, a = xs
        obs, state, r, term, trunc, info = env.step(k, state, a, params)
        return state, (obs, state, r, term, trunc, info)

    keys = jax.random.split(k_steps, actions.shape[0])
    _, outs = jax.lax.scan(body, state0, (keys, actions))
    return obs0, state0, outs


def rollout(env, params, actions, key=KEY):
    """``scan_rollout`` under ``jax.jit``, with numpy leaves so the tests can index with lists."""
    out = fast_jit(lambda k: scan_rollout(env, params, actions, k))(key)
    return jax.tree.map(np.asarray, out)


# --------------------------------------------------------------------------------------------------
# VecEnv
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "4"])
def test_vecenv_rejects_bad_num_envs(bad):
    with pytest.raises(ValueError, match=f"num_envs={bad!r}"):
        VecEnv(CounterEnv(), bad)


def test_vecenv_per_env_keys_and_matches_manual_stepping():
    env = CounterEnv()
    params = CounterParams(start_scale=100.0)
    vec = VecEnv(env, 3)
    assert vec.num_envs == 3 and batch_shape_of(vec) == (3,) and batch_shape_of(env) == ()
    # Spaces are the single env's.
    assert vec.observation_space(params).shape == (1,) and vec.action_space(params).n == 3

    obs, state = fast_jit(vec.reset)(KEY, params)
    assert obs.shape == (3, 1)
    # Different per-env keys -> different uniform starts.
    assert len(set(np.asarray(obs[:, 0]).tolist())) == 3

    # Env i uses split(key, 3)[i]: a manual loop over single envs gives identical results.
    reset_keys = jax.random.split(KEY, 3)
    single_reset, single_step = fast_jit(env.reset), fast_jit(env.step)
    for i in range(3):
        obs_i, state_i = single_reset(reset_keys[i], params)
        np.testing.assert_array_equal(obs[i], obs_i)
        np.testing.assert_array_equal(state.env_state.counter[i], state_i.counter)

    step_key = jax.random.key(7)
    actions = jnp.array([0, 1, 2])
    obs2, state2, r, term, trunc, info = fast_jit(vec.step)(step_key, state, actions, params)
    step_keys = jax.random.split(step_key, 3)
    for i in range(3):
        single = jax.tree.map(lambda x: x[i], state.env_state)
        o, s, ri, ti, tri, inf = single_step(step_keys[i], single, actions[i], params)
        np.testing.assert_array_equal(obs2[i], o)
        np.testing.assert_array_equal(state2.env_state.counter[i], s.counter)
        np.testing.assert_array_equal(info["final_observation"][i], inf["final_observation"])
        assert r[i] == ri and term[i] == ti and trunc[i] == tri
    # Env 2 took action 2: it terminated and was reset (time back to 0); rewards are step 1's.
    np.testing.assert_array_equal(term, [False, False, True])
    np.testing.assert_array_equal(state2.env_state.time, [1, 1, 0])
    np.testing.assert_array_equal(r, [1.0, 1.0, 1.0])


def test_vecenv_batched_params_domain_randomisation():
    env = CounterEnv()
    vec = VecEnv(env, 2, batched_params=True)
    # Default params are the inner defaults broadcast to [num_envs].
    assert vec.default_params.max_steps_in_episode.shape == (2,)
    params = VecEnv.stack_params([CounterParams(max_steps_in_episode=2),
                                  CounterParams(max_steps_in_episode=3)])
    assert vec.observation_space(params).shape == (1,)
    _, _, (obs, state, r, term, trunc, info) = rollout(vec, params, jnp.zeros((3, 2), jnp.int32))
    # Env 0 has a 2-step limit, env 1 a 3-step one.
    np.testing.assert_array_equal(trunc, [[False, False], [True, False], [False, True]])
    # Rewards = step index within the episode: env 0 restarts after step 2.
    np.testing.assert_array_equal(r, [[1, 1], [2, 2], [1, 3]])


def test_vecenv_gymnax_cartpole_distinct_resets_and_manual_match():
    env, params = gymnax.make("CartPole-v1")
    vec = VecEnv(env, 4)
    obs, state = fast_jit(vec.reset)(KEY, params)
    assert obs.shape == (4, 4)
    assert len({tuple(row) for row in np.asarray(obs).tolist()}) == 4
    step_key = jax.random.key(3)
    actions = jnp.array([0, 1, 0, 1])
    obs2, state2, r, term, trunc, info = fast_jit(vec.step)(step_key, state, actions, params)
    keys = jax.random.split(step_key, 4)
    for i in range(4):
        single = jax.tree.map(lambda x: x[i], state.env_state)
        o, *_ = env.step(keys[i], single, actions[i], params)
        np.testing.assert_allclose(obs2[i], o, rtol=1e-6)
    np.testing.assert_array_equal(r, np.ones(4))


# --------------------------------------------------------------------------------------------------
# EpisodeStatistics
# --------------------------------------------------------------------------------------------------

# CounterEnv with a 4-step limit; reward of the t-th step of an episode is t.
#  step  action  t  r  flags            episode so far      info["episode"]
#   1      0     1  1                    1 (len 1)
#   2      2     2  2  terminated        1+2 = 3 (len 2)     done, return 3, length 2
#   3      0     1  1                    1
#   4      0     2  2                    3
#   5      0     3  3                    6
#   6      0     4  4  truncated         1+2+3+4 = 10        done, return 10, length 4
#   7      2     1  1  terminated        1                   done, return 1, length 1
#   8-10   0     1..3                    1, 3, 6
#  11      2     4  4  term AND trunc    10                  done, return 10, length 4
EP_ACTIONS = [0, 2, 0, 0, 0, 0, 2, 0, 0, 0, 2]
EP_DONE = [0, 1, 0, 0, 0, 1, 1, 0, 0, 0, 1]
EP_RETURN = [0, 3, 0, 0, 0, 10, 1, 0, 0, 0, 10]
EP_LENGTH = [0, 2, 0, 0, 0, 4, 1, 0, 0, 0, 4]
EP_RUNNING = [1, 0, 1, 3, 6, 0, 0, 1, 3, 6, 0]  # state.episode_return after each step


def test_episode_statistics_hand_sequence_termination_truncation_autoreset():
    env = EpisodeStatistics(CounterEnv())
    _, state0, (obs, state, r, term, trunc, info) = rollout(env, CounterParams(), jnp.array(EP_ACTIONS))
    ep = info["episode"]
    assert isinstance(ep, EpisodeInfo)
    assert ep.return_.dtype == jnp.float32 and ep.length.dtype == jnp.int32 and ep.done.dtype == jnp.bool_
    np.testing.assert_array_equal(ep.done, np.array(EP_DONE, bool))
    np.testing.assert_array_equal(ep.return_, EP_RETURN)
    np.testing.assert_array_equal(ep.length, EP_LENGTH)
    np.testing.assert_array_equal(state.episode_return, EP_RUNNING)
    # Step 11 is both terminated and truncated: counted once.
    assert bool(term[-1]) and bool(trunc[-1])
    np.testing.assert_array_equal(state.episodes, np.cumsum(EP_DONE))
    assert int(state.episodes[-1]) == 4
    np.testing.assert_array_equal(state.last_return[[1, 5, 6, 10]], [3, 10, 1, 10])
    np.testing.assert_array_equal(state.last_length[[0, 2, 7]], [0, 2, 1])
    assert state0.episode_return.shape == ()


def test_episode_statistics_inside_and_outside_vecenv_agree():
    # Env 0 follows the hand sequence; env 1 never quits (truncates at steps 4 and 8).
    actions = jnp.stack([jnp.array(EP_ACTIONS), jnp.zeros(11, jnp.int32)], axis=1)
    outside = EpisodeStatistics(VecEnv(CounterEnv(), 2))
    inside = VecEnv(EpisodeStatistics(CounterEnv()), 2)
    _, s0, (_, _, _, _, _, info_out) = rollout(outside, CounterParams(), actions)
    _, _, (_, _, _, _, _, info_in) = rollout(inside, CounterParams(), actions)
    assert s0.episode_return.shape == (2,)
    for a, b in zip(info_out["episode"], info_in["episode"]):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(info_out["episode"].return_[:, 0], EP_RETURN)
    # Env 1: 1+2+3+4 = 10 at steps 4 and 8, length 4.
    np.testing.assert_array_equal(np.nonzero(np.asarray(info_out["episode"].done[:, 1]))[0], [3, 7])
    np.testing.assert_array_equal(info_out["episode"].return_[[3, 7], 1], [10, 10])


def test_episode_statistics_gymnax_pendulum_truncation():
    env, params = gymnax.make("Pendulum-v1")  # 200-step limit, never terminates
    wrapped = EpisodeStatistics(VecEnv(RescaleAction(ClipAction(env)), 2))
    actions = jax.random.uniform(jax.random.key(1), (200, 2, 1), minval=-1.0, maxval=1.0)
    # The first three agent actions hit the endpoints and the midpoint of [0, 1].
    actions = actions.at[:3, 0, 0].set(jnp.array([-1.0, 0.5, 1.0]))
    _, _, (_, state, r, term, trunc, info) = rollout(wrapped, params, actions)
    # RescaleAction maps [-1, 1] onto the torque bounds [-2, 2]: -1 -> -2, 0.5 -> 1, 1 -> 2 exactly
    # (Pendulum records the applied torque in state.last_u).
    last_u = state.env_state.env_state.env_state.env_state.last_u  # EpStats > Vec > Rescale > Clip
    np.testing.assert_array_equal(last_u[:3, 0], [-2.0, 1.0, 2.0])
    np.testing.assert_allclose(last_u[:199], 2.0 * actions[:199, :, 0], rtol=1e-6, atol=1e-6)
    ep = info["episode"]
    assert not bool(ep.done[:-1].any())
    np.testing.assert_array_equal(ep.done[-1], [True, True])
    np.testing.assert_array_equal(ep.length[-1], [200, 200])
    # The return is the sum of all 200 rewards, the truncating step's included.
    np.testing.assert_allclose(ep.return_[-1], r.sum(axis=0), rtol=1e-5)
    np.testing.assert_array_equal(state.episodes[-1], [1, 1])
    np.testing.assert_array_equal(state.episode_return[-1], [0.0, 0.0])


# --------------------------------------------------------------------------------------------------
# RunningMeanStd
# --------------------------------------------------------------------------------------------------


def _assert_stats(stats, mean, var, count, rtol=1e-5):
    np.testing.assert_allclose(stats.mean, mean, rtol=rtol, atol=1e-6)
    np.testing.assert_allclose(stats.var, var, rtol=rtol, atol=1e-6)
    np.testing.assert_allclose(stats.count, count, rtol=1e-6)


def test_masked_batch_statistics_count_only_the_masked_rows():
    # Rows {1, 3} of {1, 100, 3}: mean 2, var 1, count 2; no row: a count of 0 that merges to nothing.
    data = jnp.array([[1.0], [100.0], [3.0]])
    _assert_stats(RunningMeanStd.from_batch(data, jnp.array([True, False, True])), [2.0], [1.0], 2.0)
    prior = RunningMeanStd.from_batch(jnp.array([[5.0], [7.0]]))
    merged = prior.merge(RunningMeanStd.from_batch(data, jnp.zeros(3, bool)))
    _assert_stats(merged, [6.0], [1.0], 2.0)


def test_running_mean_std_hand_values_and_prior():
    # Data {1, 3}: mean 2, var ((1-2)^2 + (3-2)^2) / 2 = 1.
    _assert_stats(RunningMeanStd.from_batch(jnp.array([[1.0], [3.0]])), [2.0], [1.0], 2.0)
    # One at a time from one sample: {1} -> mean 1, var 0; merge {3} -> mean 2, var 1.
    s = RunningMeanStd.from_batch(jnp.array([[1.0]])).update(jnp.array([[3.0]]))
    _assert_stats(s, [2.0], [1.0], 2.0)
    # The prior (mean 0, var 1, weight 1e-4) is pseudo-data: count 2.0001,
    # mean = (1 + 3) / 2.0001, E[x^2] = (1e-4 * (1 + 0^2) + 1 + 9) / 2.0001, var = E[x^2] - mean^2.
    prior = RunningMeanStd.init((1,))
    _assert_stats(prior, [0.0], [1.0], 1e-4)
    s = prior.update(jnp.array([[1.0], [3.0]]))
    mean = 4 / 2.0001
    _assert_stats(s, [mean], [10.0001 / 2.0001 - mean**2], 2.0001)


def test_running_mean_std_batches_and_merge_match_numpy():
    rng = np.random.default_rng(0)
    data = rng.normal(3.0, 2.0, size=(37, 3)).astype(np.float32)
    b1, b2, b3 = data[:5], data[5:25], data[25:]
    expected = (data.astype(np.float64).mean(0), data.astype(np.float64).var(0), 37.0)
    # Several updates == one batch.
    s = RunningMeanStd.from_batch(b1).update(b2)
    s = RunningMeanStd.update(s, b3)  # the functional spelling
    _assert_stats(s, *expected)
    _assert_stats(RunningMeanStd.from_batch(data), *expected)
    # merge(a, b) == stats of the union, for unequal sizes.
    merged = RunningMeanStd.from_batch(b1).merge(RunningMeanStd.from_batch(np.concatenate([b2, b3])))
    _assert_stats(merged, *expected)
    # jit-compatible.
    _assert_stats(fast_jit(RunningMeanStd.merge)(RunningMeanStd.from_batch(b1),
                                                RunningMeanStd.from_batch(np.concatenate([b2, b3]))),
                  *expected)


def test_running_mean_std_cross_device_merge_is_exact():
    rng = np.random.default_rng(1)
    data = rng.normal(-1.0, 3.0, size=(4, 6, 2)).astype(np.float32)  # 4 "devices" x 6 samples
    flat = data.reshape(24, 2).astype(np.float64)
    # Unequal counts per device: device d holds d+1 samples.
    parts = [data[d, : d + 1] for d in range(4)]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *[RunningMeanStd.from_batch(p) for p in parts])
    merged = jax.vmap(lambda s: s.pmean("d"), axis_name="d")(stacked)
    union = np.concatenate(parts).astype(np.float64)
    for d in range(4):
        _assert_stats(jax.tree.map(lambda x: x[d], merged), union.mean(0), union.var(0), 10.0)

    # Shared statistics updated with per-device batches: the prior counts once, and every device
    # ends with init().update(all data).
    def device_update(batch):
        return RunningMeanStd.init((2,)).update(batch, axis_name="d")

    per_device = fast_jit(jax.vmap(device_update, axis_name="d"))(data)
    reference = RunningMeanStd.init((2,)).update(flat)
    for d in range(4):
        got = jax.tree.map(lambda x: x[d], per_device)
        _assert_stats(got, reference.mean, reference.var, 24.0001)


def test_running_mean_std_normalize():
    stats = RunningMeanStd(mean=jnp.array([2.0]), var=jnp.array([4.0]), count=jnp.float32(10.0))
    # (6 - 2) / sqrt(4) = 2; (100 - 2) / 2 = 49 -> clipped to 10; (-100 - 2) / 2 = -51 -> -10.
    np.testing.assert_allclose(stats.normalize(jnp.array([[6.0], [100.0], [-100.0]])),
                               [[2.0], [10.0], [-10.0]], rtol=1e-6)
    np.testing.assert_allclose(stats.normalize(jnp.array([100.0]), clip=None), [49.0], rtol=1e-6)


# --------------------------------------------------------------------------------------------------
# NormalizeObservation
# --------------------------------------------------------------------------------------------------


def test_normalize_observation_hand_sequence():
    env = NormalizeObservation(CounterEnv())  # single env: each obs is a batch of one
    params = CounterParams(max_steps_in_episode=100)
    obs0, state0, (obs, state, _, term, _, info) = rollout(env, params, jnp.array([1, 2]))
    # Reset: raw obs 0; data {0} -> mean 0, so the normalised obs is 0.
    np.testing.assert_allclose(obs0, [0.0], atol=1e-6)
    np.testing.assert_allclose(state0.obs_stats.count, 1.0001, rtol=1e-6)
    # Step 1 (a=1): raw obs 1; data {0, 1}: mean 0.5, var 0.25 -> (1 - 0.5) / 0.5 = 1.
    np.testing.assert_allclose(obs[0], [1.0], rtol=1e-3)
    # Step 2 (a=2): terminates with raw final obs 1 + 2 = 3; the reset obs 0 is added:
    # data {0, 1, 0}: mean 1/3, var (1/9 + 4/9 + 1/9) / 3 = 2/9, std 0.47140.
    # obs = (0 - 1/3) / 0.47140 = -0.70711; final = (3 - 1/3) / 0.47140 = 5.65685.
    assert bool(term[1])
    np.testing.assert_allclose(obs[1], [-0.70711], rtol=1e-3)
    np.testing.assert_allclose(info["final_observation"][1], [5.65685], rtol=1e-3)
    np.testing.assert_allclose(state.obs_stats.mean[1], [1 / 3], rtol=1e-3)
    np.testing.assert_allclose(state.obs_stats.var[1], [2 / 9], rtol=1e-3)
    space = env.observation_space(params)
    assert space.shape == (1,) and float(space.high[0]) == 10.0


def test_normalize_observation_outside_vecenv_shares_one_statistic():
    env = NormalizeObservation(VecEnv(CounterEnv(), 3))
    params = CounterParams(start_scale=10.0)
    obs0, state0 = fast_jit(env.reset)(KEY, params)
    raw, _ = VecEnv(CounterEnv(), 3).reset(KEY, params)
    # One statistic over the 3 reset obs (plus the 1e-4 prior).
    assert state0.obs_stats.mean.shape == (1,)
    reference = RunningMeanStd.init((1,)).update(raw)
    np.testing.assert_allclose(state0.obs_stats.mean, reference.mean, rtol=1e-6)
    np.testing.assert_allclose(obs0, reference.normalize(raw), rtol=1e-5, atol=1e-6)
    assert abs(float(jnp.mean(obs0))) < 1e-3  # centred across the batch


def test_normalize_observation_frozen_and_transfer():
    params = CounterParams(max_steps_in_episode=100)
    train = NormalizeReward(NormalizeObservation(VecEnv(CounterEnv(), 4)), gamma=0.9)
    _, _, (_, train_states, *_rest) = rollout(train, params, jnp.ones((5, 4), jnp.int32))
    train_state = jax.tree.map(lambda x: x[-1], train_states)
    trained = train_state.env_state.obs_stats
    # 1 reset + 5 steps of 4 envs = 24 obs.
    np.testing.assert_allclose(trained.count, 24.0001, rtol=1e-6)

    eval_env = NormalizeObservation(VecEnv(CounterEnv(), 2)).freeze()
    assert eval_env.frozen and not NormalizeObservation(CounterEnv()).frozen
    _, eval_state = fast_jit(eval_env.reset)(KEY, params)
    # Frozen reset keeps the prior.
    np.testing.assert_allclose(eval_state.obs_stats.count, 1e-4, rtol=1e-6)
    eval_state = transfer_stats(train_state, eval_state)
    for a, b in zip(jax.tree.leaves(eval_state.obs_stats), jax.tree.leaves(trained)):
        np.testing.assert_array_equal(a, b)

    # Frozen steps leave the statistics unchanged and normalise with them.
    known = RunningMeanStd(mean=jnp.array([2.0]), var=jnp.array([4.0]), count=jnp.float32(50.0))
    eval_state = NormalizeObservation.set_stats(eval_state, known)
    obs, new_state, *_ = fast_jit(eval_env.step)(KEY, eval_state, jnp.array([1, 1]), params)
    for a, b in zip(jax.tree.leaves(new_state.obs_stats), jax.tree.leaves(known)):
        np.testing.assert_array_equal(a, b)
    # Raw obs 0 + 1 = 1 -> (1 - 2) / 2 = -0.5.
    np.testing.assert_allclose(obs, [[-0.5], [-0.5]], rtol=1e-6)

    with pytest.raises(ValueError, match="NormalizeObservationState"):
        transfer_stats(eval_state.env_state, eval_state)


def test_normalize_observation_axis_name_keeps_devices_identical():
    devices, per_device = 3, 2
    params = CounterParams(start_scale=10.0)
    env = NormalizeObservation(VecEnv(CounterEnv(), per_device), axis_name="d")
    keys = jax.random.split(KEY, devices)

    def run(key):
        obs, state = env.reset(key, params)
        obs, state, *_ = env.step(jax.random.fold_in(key, 1), state, jnp.ones(per_device, jnp.int32), params)
        return state.obs_stats

    stats = fast_jit(jax.vmap(run, axis_name="d"))(keys)
    # Every device holds the same statistics...
    for leaf in jax.tree.leaves(stats):
        np.testing.assert_allclose(leaf, jnp.broadcast_to(leaf[0], leaf.shape), rtol=1e-6)
    # ... equal to the statistics of all 6 reset obs and all 6 stepped obs (= reset obs + 1).
    raw = np.concatenate([np.asarray(VecEnv(CounterEnv(), per_device).reset(k, params)[0]) for k in keys])
    data = np.concatenate([raw, raw + 1.0]).astype(np.float64)
    mixture_mean = data.sum(0) / (12 + 1e-4)
    mixture_var = (1e-4 + (data**2).sum(0)) / (12 + 1e-4) - mixture_mean**2
    np.testing.assert_allclose(stats.count[0], 12.0001, rtol=1e-6)
    np.testing.assert_allclose(stats.mean[0], mixture_mean, rtol=1e-4)
    np.testing.assert_allclose(stats.var[0], mixture_var, rtol=1e-4)


# --------------------------------------------------------------------------------------------------
# NormalizeReward
# --------------------------------------------------------------------------------------------------


def test_normalize_reward_hand_sequence():
    # gamma = 0.5, single env, actions [0, 2, 0, 0]: rewards 1, 2 (terminates), 1, 2.
    # G1 = 1; G2 = 0.5 * 1 + 2 = 2.5, then reset to 0 (done); G3 = 1; G4 = 0.5 * 1 + 2 = 2.5.
    # Scale = population std of {G1..Gt} (the 1e-4 prior shifts it by < 3e-4 relative):
    #   t=1: {1}: var ~ 2e-4 (prior only) -> 1 / 0.01414 = 70.7 -> clipped to 10
    #   t=2: {1, 2.5}: mean 1.75, var 0.5625, std 0.75 -> 2 / 0.75 = 2.66667
    #   t=3: {1, 2.5, 1}: mean 1.5, var (0.25 + 1 + 0.25) / 3 = 0.5 -> 1 / 0.70711 = 1.41421
    #   t=4: {1, 2.5, 1, 2.5}: mean 1.75, var 0.5625 -> 2 / 0.75 = 2.66667
    env = NormalizeReward(CounterEnv(), gamma=0.5)
    _, state0, (_, state, r, term, _, _) = rollout(env, CounterParams(max_steps_in_episode=100),
                                                   jnp.array([0, 2, 0, 0]))
    assert float(state0.discounted_return) == 0.0
    np.testing.assert_allclose(r, [10.0, 2.66667, 1.41421, 2.66667], rtol=1e-3)
    np.testing.assert_allclose(state.discounted_return, [1.0, 0.0, 1.0, 2.5], rtol=1e-6)
    # G2 = 2.5 entered the statistics (Gymnasium's (1 - terminated_t) form would have used 2).
    np.testing.assert_allclose(state.return_stats.mean[1], 1.75, rtol=1e-3)
    np.testing.assert_allclose(state.return_stats.count, [1.0001, 2.0001, 3.0001, 4.0001], rtol=1e-6)


def test_normalize_reward_resets_on_truncation_too():
    # 2-step limit, gamma 0.5, no quitting: rewards 1, 2 (truncated), 1, 2 (truncated), 1.
    # G: 1, 2.5 -> reset, 1, 2.5 -> reset, 1.
    env = NormalizeReward(CounterEnv(), gamma=0.5)
    _, _, (_, state, _, _, trunc, _) = rollout(env, CounterParams(max_steps_in_episode=2),
                                               jnp.zeros(5, jnp.int32))
    np.testing.assert_array_equal(trunc, [False, True, False, True, False])
    np.testing.assert_allclose(state.discounted_return, [1.0, 0.0, 1.0, 0.0, 1.0], rtol=1e-6)
    # Statistics of {1, 2.5, 1, 2.5, 1}: mean 1.6.
    np.testing.assert_allclose(state.return_stats.mean[-1], 1.6, rtol=1e-3)


def test_normalize_reward_vecenv_and_axis_name():
    # 2 devices x 2 envs, every env the hand sequence's rewards: each step adds 4 returns.
    env = NormalizeReward(VecEnv(CounterEnv(), 2), gamma=0.5, axis_name="d", clip=None)
    params = CounterParams(max_steps_in_episode=100)
    actions = jnp.tile(jnp.array([0, 2, 0, 0])[:, None], (1, 2))

    def run(key):
        _, _, (_, state, r, *_r) = scan_rollout(env, params, actions, key)
        return state.return_stats, r

    stats, r = fast_jit(jax.vmap(run, axis_name="d"))(jax.random.split(KEY, 2))
    np.testing.assert_allclose(stats.count[:, -1], [16.0001, 16.0001], rtol=1e-6)
    # Every return appears 4 times, so the statistics (and the t>=2 scales) match the single-env
    # sequence: 2 / 0.75, 1 / 0.70711, 2 / 0.75.
    np.testing.assert_allclose(r[:, 1:], np.full((2, 3, 2), [[2.66667], [1.41421], [2.66667]]), rtol=1e-3)


# --------------------------------------------------------------------------------------------------
# ClipAction / RescaleAction
# --------------------------------------------------------------------------------------------------


def test_clip_action():
    env = ClipAction(EchoEnv())
    obs, state = env.reset(KEY)
    step = fast_jit(env.step)
    obs, *_ = step(KEY, state, jnp.array([-5.0, 20.0]))
    np.testing.assert_array_equal(obs, [-2.0, 10.0])
    obs, *_ = step(KEY, state, jnp.array([1.5, 3.0]))
    np.testing.assert_array_equal(obs, [1.5, 3.0])
    # Outside a VecEnv the bounds broadcast over the batch.
    vec = ClipAction(VecEnv(EchoEnv(), 2))
    _, vstate = vec.reset(KEY)
    obs, *_ = vec.step(KEY, vstate, jnp.array([[3.0, -1.0], [0.0, 5.0]]))
    np.testing.assert_array_equal(obs, [[2.0, 0.0], [0.0, 5.0]])
    with pytest.raises(ValueError, match=r"ClipAction needs a Box action space, got Discrete\(3\)"):
        ClipAction(CounterEnv())


def test_rescale_action_maps_endpoints_exactly():
    env = RescaleAction(EchoEnv(low=(-2.0, 0.1), high=(2.0, 10.3)))
    space = env.action_space(env.default_params)
    np.testing.assert_array_equal(space.low, [-1.0, -1.0])
    np.testing.assert_array_equal(space.high, [1.0, 1.0])
    _, state = env.reset(KEY)
    step = fast_jit(env.step)
    np.testing.assert_array_equal(step(KEY, state, jnp.array([-1.0, -1.0]))[0], np.float32([-2.0, 0.1]))
    np.testing.assert_array_equal(step(KEY, state, jnp.array([1.0, 1.0]))[0], np.float32([2.0, 10.3]))
    # Midpoint 0 -> (low + high) / 2 = [0, 5.2].
    np.testing.assert_allclose(step(KEY, state, jnp.array([0.0, 0.0]))[0], [0.0, 5.2], rtol=1e-6, atol=1e-7)

    # Custom agent range [0, 1]: 0.25 -> -2 + 0.25 * 4 = -1 and 0 + 0.25 * 10 = 2.5.
    env01 = RescaleAction(EchoEnv(), low=0.0, high=1.0)
    np.testing.assert_allclose(env01.step(KEY, state, jnp.array([0.25, 0.25]))[0], [-1.0, 2.5], rtol=1e-6)


def test_rescale_action_errors():
    with pytest.raises(ValueError, match=r"RescaleAction needs a Box action space, got Discrete\(3\)"):
        RescaleAction(CounterEnv())
    with pytest.raises(ValueError, match="bounded Box"):
        RescaleAction(EchoEnv(low=(-np.inf, 0.0), high=(1.0, 1.0)))
    with pytest.raises(ValueError, match="low < high"):
        RescaleAction(EchoEnv(), low=1.0, high=1.0)
    cartpole, _ = gymnax.make("CartPole-v1")
    with pytest.raises(ValueError, match="Discrete"):
        RescaleAction(cartpole)


# --------------------------------------------------------------------------------------------------
# The full stack on gymnax CartPole
# --------------------------------------------------------------------------------------------------


def test_full_stack_gymnax_cartpole():
    env, params = gymnax.make("CartPole-v1")
    stack = NormalizeReward(NormalizeObservation(EpisodeStatistics(VecEnv(env, 4))), gamma=0.99)
    assert stack.name.startswith("NormalizeReward(NormalizeObservation(EpisodeStatistics(VecEnv(")
    assert stack.unwrapped is env and batch_shape_of(stack) == (4,)
    assert stack.action_space(params).n == 2
    actions = jax.random.bernoulli(jax.random.key(5), 0.5, (120, 4)).astype(jnp.int32)
    obs0, _, (obs, state, r, term, trunc, info) = rollout(stack, params, actions)
    assert obs.shape == (120, 4, 4) and r.shape == (120, 4)
    assert bool(jnp.all(jnp.abs(obs) <= 10.0)) and bool(jnp.all(jnp.isfinite(r)))
    ep = info["episode"]
    done = np.asarray(ep.done)
    assert done.sum() >= 4  # random CartPole episodes last ~20 steps
    # CartPole pays 1 per step, so every finished episode's (raw) return equals its length.
    np.testing.assert_array_equal(ep.return_[done], ep.length[done].astype(np.float32))
    np.testing.assert_array_equal(done, np.asarray(term | trunc))
    # Final observations are normalised with the same statistics as obs (in range, not raw).
    assert bool(jnp.all(jnp.abs(info["final_observation"]) <= 10.0))
    episodes = state.env_state.env_state.episodes[-1]
    np.testing.assert_array_equal(episodes, done.sum(axis=0))


def test_episode_statistics_sums_reward_components_per_episode():
    """Pendulum reports angle/velocity/torque cost terms; their episode sums add up to the return."""
    import envs
    from rljax.core.wrappers import EpisodeStatistics, VecEnv, reward_component_names

    base, params = envs.make("Pendulum-v1")
    params = params.replace(max_steps_in_episode=5)
    assert reward_component_names(base, params) == ("angle", "torque", "velocity")
    assert reward_component_names(envs.make("CartPole-v1")[0]) == ()
    env = EpisodeStatistics(VecEnv(base, 3))
    obs, state = env.reset(jax.random.key(0), params)
    step = jax.jit(env.step)
    total = np.zeros(3)
    for t in range(5):
        obs, state, reward, term, trunc, info = step(jax.random.key(t + 1), state, jnp.ones((3, 1)), params)
        total += np.asarray(reward)
        ep = info["episode"]
        if t < 4:
            assert not bool(ep.done.any()) and all(float(jnp.abs(v).sum()) == 0 for v in ep.components.values())
    # Episodes end on step 5 (truncation): components of each finished episode sum to its return.
    assert bool(ep.done.all())
    comp_sum = sum(np.asarray(v) for v in ep.components.values())
    np.testing.assert_allclose(comp_sum, np.asarray(ep.return_), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(ep.return_), total, rtol=1e-5)
    assert all(float(v.min()) <= 0.0 for v in ep.components.values())
    # The new episode's component sums restart at zero.
    assert all(float(jnp.abs(v).sum()) == 0 for v in state.episode_components.values())


# ------------------------------------------------------------------------------------------------
# RunningMeanStd's count keeps growing past 2^24 (float32's exact-integer limit)
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("start, batch, adds", [(2 ** 26, 2, 16), (2 ** 28, 5, 40), (2 ** 30, 10, 1000)])
def test_running_count_keeps_growing(start, batch, adds):
    stats = RunningMeanStd(mean=jnp.zeros(()), var=jnp.ones(()), count=jnp.float32(start))
    stats = RunningMeanStd.merge(stats, RunningMeanStd.from_batch(jnp.zeros((1,))))  # exact pair from here
    step = jax.jit(lambda s, _: (s.update(jnp.full((batch,), 2.0)), None))
    stats, _ = jax.lax.scan(step, stats, None, length=adds)
    exact = start + 1 + batch * adds
    # float32 nearest the exact count: a plain float32 count would have stayed at `start`.
    assert float(stats.count) == float(np.float32(exact)) != float(np.float32(start))
    assert stats.exact_count == exact
    # The mean moved toward 2 by the right weight (float32 arithmetic: ~1e-7 of the total).
    np.testing.assert_allclose(float(stats.mean), 2.0 * batch * adds / exact, rtol=1e-3)


def test_running_count_merge_and_device_merge_are_exact():
    def big(count, mean):
        s = RunningMeanStd(mean=jnp.full((2,), mean), var=jnp.ones((2,)), count=jnp.float32(count))
        return s.merge(RunningMeanStd.from_batch(jnp.full((3, 2), mean)))  # count + 3, exact pair

    a, b = big(2 ** 29, 1.0), big(2 ** 28 + 2 ** 5, 4.0)  # float32-exact starts
    ab = a.merge(b)
    assert ab.exact_count == (2 ** 29 + 3) + (2 ** 28 + 32 + 3)
    # Over a named axis: four members with counts 2^27 + 16 i + 3 (float32 has a step of 16 there).
    counts = [2 ** 27 + 16 * i + 3 for i in range(4)]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *[big(c - 3, float(i)) for i, c in enumerate(counts)])
    merged = jax.vmap(lambda s: s.pmean("i"), axis_name="i")(stacked)
    assert all(RunningMeanStd(mean=merged.mean[i], var=merged.var[i], count=merged.count[i],
                              count_lo=merged.count_lo[i]).exact_count == sum(counts) for i in range(4))
    np.testing.assert_allclose(np.asarray(merged.mean[0]), 1.5, rtol=1e-6)


def test_env_nonfinite_counts_the_envs_nan_and_inf_for_finite_actions_only():
    nan, inf = float("nan"), float("inf")
    obs = {"x": jnp.array([[0.0, nan], [inf, -inf], [1.0, 2.0], [nan, nan]]),
           "grid": jnp.zeros((4, 2, 2), jnp.uint8)}   # integer leaves cannot hold NaN
    reward = jnp.array([nan, 0.0, inf, 1.0])
    action = jnp.array([[0.5], [0.0], [0.0], [nan]])   # env 3 was given a NaN action: the policy's fault
    np.testing.assert_array_equal(env_nonfinite(obs, reward, action), [2.0, 2.0, 1.0, 0.0])
    assert env_nonfinite(jnp.array([nan]), jnp.float32(1.0), jnp.int32(1)) == 1.0   # one env, a discrete action


# --------------------------------------------------------------------------------------------------
# RandomizeParams (domain randomisation)
# --------------------------------------------------------------------------------------------------


@struct.dataclass
class ShownParams(EnvParams):
    max_steps_in_episode: int = 3
    value: float = 0.5
    other: float = 7.0


class ShowParamsEnv(Environment):
    """Obs ``[value, other]`` of the params it runs with; episodes last 3 steps (the time limit)."""

    @property
    def default_params(self) -> ShownParams:
        return ShownParams()

    def _obs(self, params):
        return jnp.stack([jnp.float32(params.value), jnp.float32(params.other)])

    def reset_env(self, key, params):
        return self._obs(params), EchoState(time=jnp.int32(0))

    def step_env(self, key, state, action, params):
        return self._obs(params), EchoState(time=state.time + 1), jnp.float32(0.0), jnp.bool_(False), {}

    def observation_space(self, params):
        return Box(-jnp.inf, jnp.inf, (2,))

    def action_space(self, params):
        return Discrete(2)


def test_randomize_params_draws_per_env_and_per_episode_and_keeps_the_other_fields():
    from rljax.core.wrappers import RandomizeParams, param_ranges

    n = 512
    env = VecEnv(RandomizeParams(ShowParamsEnv(), param_ranges(["value=1:2"])), n)
    params = ShownParams(other=3.0)  # a field without a range keeps the value passed in

    @fast_jit
    def run(key):
        obs, state = env.reset(key, params)

        def step(s, k):
            o, s, _, term, trunc, info = env.step(k, s, jnp.zeros(n, jnp.int32), params)
            return s, (o, trunc, info["final_observation"])

        _, (seq, trunc, final) = jax.lax.scan(step, state, jax.random.split(key, 6))
        return obs, seq, trunc, final

    obs, seq, trunc, final = jax.device_get(run(jax.random.key(3)))
    values = np.concatenate([obs[None, :, 0], seq[:, :, 0]])  # [7, n]: the reset, then 6 steps
    assert np.all((values >= 1) & (values < 2)) and np.all(seq[:, :, 1] == 3.0) and np.all(obs[:, 1] == 3.0)
    assert len(np.unique(values[0])) == n  # every env draws its own
    # Episodes are steps 0-2 and 3-5 (time limit 3): constant within one, redrawn at the next start;
    # the finished episode's last observation still shows its own params.
    assert np.array_equal(trunc[:, 0], [False, False, True, False, False, True])
    assert np.array_equal(values[0], values[1]) and np.array_equal(values[1], values[2])
    assert np.array_equal(final[2, :, 0], values[2]) and np.all(values[3] != values[2])
    assert np.array_equal(values[3], values[4]) and np.array_equal(values[4], values[5])
    assert abs(values.mean() - 1.5) < 0.02  # U(1, 2)
    again = jax.device_get(run(jax.random.key(3)))[0]
    np.testing.assert_array_equal(again, obs)  # the draws come from the key stream


def test_a_log_range_draws_log_uniformly():
    from rljax.core.wrappers import ParamRange

    r = ParamRange("value", 1.0, 100.0, log=True)
    draws = np.asarray(jax.jit(jax.vmap(r.draw))(jax.random.split(jax.random.key(0), 20000)))
    assert draws.min() >= 1.0 and draws.max() <= 100.0
    # log10 of the draws is U(0, 2): its quartiles are 0.5, 1 and 1.5.
    np.testing.assert_allclose(np.quantile(np.log10(draws), [0.25, 0.5, 0.75]), [0.5, 1.0, 1.5], atol=0.03)
    assert str(r) == "value=log:1:100"
    # Bounds a user typed are shown with every digit (6 significant digits would round these).
    assert str(ParamRange("value", 0.123456789, 1.987654321, log=True)) == "value=log:0.123456789:1.987654321"


@pytest.mark.parametrize("spec, message", [
    ("value", "expected NAME=LOW:HIGH (uniform) or NAME=log:LOW:HIGH"),
    ("value=1", "expected NAME=LOW:HIGH"),
    ("value=1:2:3", "expected NAME=LOW:HIGH"),
    ("2x=1:2", "expected NAME=LOW:HIGH"),
    ("value=a:2", "LOW and HIGH must be numbers"),
    ("value=2:1", "need finite LOW < HIGH, got LOW=2, HIGH=1"),
    ("value=1:inf", "need finite LOW < HIGH"),
    ("value=log:0:2", "a log range needs LOW > 0, got 0"),
    # Bounds are named with every digit typed.
    ("value=2.123456789:1.5", "need finite LOW < HIGH, got LOW=2.123456789, HIGH=1.5"),
    ("value=log:-0.123456789:1.5", "a log range needs LOW > 0, got -0.123456789"),
])
def test_bad_ranges_name_the_spec_and_the_valid_forms(spec, message):
    from rljax.core.wrappers import param_ranges

    with pytest.raises(ValueError, match="--randomize") as error:
        param_ranges([spec])
    assert message in str(error.value) and repr(spec) in str(error.value)


@pytest.mark.parametrize("spec, message", [
    ("valeu=1:2", "'valeu' is not a param of ShownParams (did you mean 'value'?); the float params that can be "
                  "drawn: value, other"),
    ("max_steps_in_episode=1:2", "'max_steps_in_episode' holds 3, not a float scalar"),
])
def test_a_range_must_name_a_float_param_of_the_env(spec, message):
    from rljax.core.wrappers import ParamRange, RandomizeParams, param_ranges

    with pytest.raises(ValueError) as error:
        RandomizeParams(ShowParamsEnv(), param_ranges([spec]))
    assert message in str(error.value)
    assert param_ranges(["value=1:2", "value=3:4"])[0].low == 3.0  # a later spec of a name wins
    assert param_ranges(["env.value=log:1:2"]) == (ParamRange("value", 1.0, 2.0, True),)  # as sweeps name it
