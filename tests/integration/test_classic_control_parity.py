"""Parity of the pure-JAX classic-control envs (envs/) with Gymnasium's reference implementations.

The core check (``test_step_parity``) walks thousands of steps: before each step the JAX state is
copied into ``gymnasium.make(id).unwrapped``, both envs take the same action, and the next
observation, reward and ``terminated`` flag are compared. Gymnasium steps in float64 from the
(float32) JAX state, so the only differences are one step's float32 rounding; tolerances are a few
float32 ulps of the values involved (see ``_Case``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envs.acrobot import Acrobot
from envs.cartpole import CartPole
from envs.mountain_car import MountainCar, MountainCarContinuous
from envs.pendulum import Pendulum

# --------------------------------------------------------------------------------------------------
# Per-env glue: how to copy a JAX state into Gymnasium, which policy drives the parity walk, the
# tolerances, and the reset ranges.
# --------------------------------------------------------------------------------------------------


def _set_cartpole(g: Any, s: Any) -> None:
    g.state = np.array([s.x, s.x_dot, s.theta, s.theta_dot], np.float64)
    # Gymnasium pays 0 (and warns) when stepped after a terminal step unless this is cleared; we
    # overwrite the state every step, so every step is a "first" step for Gymnasium.
    g.steps_beyond_terminated = None


def _set_pendulum(g: Any, s: Any) -> None:
    g.state = np.array([s.theta, s.theta_dot], np.float64)


def _set_acrobot(g: Any, s: Any) -> None:
    g.state = np.array([s.theta1, s.theta2, s.dtheta1, s.dtheta2], np.float64)


def _set_mountain_car(g: Any, s: Any) -> None:
    g.state = np.array([s.position, s.velocity], np.float64)


def _set_mountain_car_continuous(g: Any, s: Any) -> None:
    # Gymnasium's continuous mountain car itself stores its state as float32 after every step.
    g.state = np.array([s.position, s.velocity], np.float32)


# Policies take (rng, obs, episode index) and return a NumPy action Gymnasium accepts. Even episodes
# and odd episodes use different policies so that one walk covers both terminating and truncating
# episodes.


def _cartpole_policy(rng: np.random.Generator, obs: np.ndarray, ep: int) -> int:
    if ep % 2 == 0:  # a noisy linear balancer: survives to the time limit (truncation)
        x, x_dot, th, th_dot = obs
        a = int(th + 0.5 * th_dot + 0.05 * x + 0.1 * x_dot > 0)
        return int(rng.integers(2)) if rng.random() < 0.1 else a
    return int(rng.random() < 0.8)  # biased pushing: topples within tens of steps (termination)


def _pendulum_policy(rng: np.random.Generator, obs: np.ndarray, ep: int) -> np.ndarray:
    if ep % 2 == 0:  # beyond ±max_torque, so Gymnasium's torque clip is exercised
        return rng.uniform(-3.0, 3.0, (1,)).astype(np.float32)
    # Energy pumping: spins the pendulum up to the ±max_speed clip.
    return np.array([3.0 if obs[2] >= 0 else -3.0], np.float32)


def _acrobot_policy(rng: np.random.Generator, obs: np.ndarray, ep: int) -> int:
    if ep % 2 == 0:  # random torques rarely swing up within 500 steps (truncation)
        return int(rng.integers(3))
    return 2 if obs[5] > 0 else 0  # torque along dθ2 swings up in ~100 steps (termination)


def _mountain_car_policy(rng: np.random.Generator, obs: np.ndarray, ep: int) -> int:
    if ep % 2 == 0:  # random pushes never reach the goal (truncation)
        return int(rng.integers(3))
    return 2 if obs[1] > 0 else 0  # push along the velocity: reaches the goal, often via the wall


def _mountain_car_continuous_policy(rng: np.random.Generator, obs: np.ndarray, ep: int
                                    ) -> np.ndarray:
    if ep % 2 == 0:
        return rng.uniform(-2.0, 2.0, (1,)).astype(np.float32)
    # |a| = 1.5 > max_action: the dynamics see 1 but the reward charges 0.1 * 1.5**2.
    return np.array([1.5 if obs[1] >= 0 else -1.5], np.float32)


def _reset_ok_cartpole(obs: np.ndarray, s: Any) -> bool:
    st = np.array([s.x, s.x_dot, s.theta, s.theta_dot])
    return bool(np.all(np.abs(st) <= 0.05) and np.array_equal(obs, st))


def _reset_ok_pendulum(obs: np.ndarray, s: Any) -> bool:
    want = np.array([np.cos(s.theta), np.sin(s.theta), s.theta_dot], np.float32)
    return bool(abs(s.theta) <= math.pi and abs(s.theta_dot) <= 1.0
                and np.allclose(obs, want, atol=1e-6))


def _reset_ok_acrobot(obs: np.ndarray, s: Any) -> bool:
    st = np.array([s.theta1, s.theta2, s.dtheta1, s.dtheta2])
    want = np.array([np.cos(s.theta1), np.sin(s.theta1), np.cos(s.theta2), np.sin(s.theta2),
                     s.dtheta1, s.dtheta2], np.float32)
    return bool(np.all(np.abs(st) <= 0.1) and np.allclose(obs, want, atol=1e-6))


def _reset_ok_mountain_car(obs: np.ndarray, s: Any) -> bool:
    return bool(-0.6 <= s.position <= -0.4 and s.velocity == 0.0
                and np.array_equal(obs, np.array([s.position, s.velocity])))


@dataclasses.dataclass(frozen=True)
class _Case:
    make: Callable[[], Any]
    gym_id: str
    set_gym_state: Callable[[Any, Any], None]
    policy: Callable[[np.random.Generator, np.ndarray, int], Any]
    reset_ok: Callable[[np.ndarray, Any], bool]
    # Observation tolerance: |jax - gym| <= obs_atol + obs_rtol * |gym|. One float32 step from the
    # same state is accurate to a few ulps of the largest intermediate, hence the per-env values,
    # set about 3x above the worst error seen over the walk. Reward: |jax - gym| <= reward_atol +
    # 1e-6 * |gym| (the relative part covers float32 rounding of MountainCarContinuous's
    # 100 - cost).
    obs_atol: float
    obs_rtol: float
    reward_atol: float
    can_terminate: bool
    components: tuple[str, ...] = ()


# Pendulum: theta is unwrapped (as in Gymnasium) and can reach ~80 rad in a 200-step spin, where a
# float32 ulp is 7.6e-6; cos/sin of it therefore carry ~1e-5 absolute error.
CASES = {
    "CartPole-v1": _Case(CartPole, "CartPole-v1", _set_cartpole, _cartpole_policy,
                         _reset_ok_cartpole, 3e-7, 3e-6, 0.0, True),
    "Pendulum-v1": _Case(Pendulum, "Pendulum-v1", _set_pendulum, _pendulum_policy,
                         _reset_ok_pendulum, 2e-5, 3e-6, 1e-4, False,
                         ("angle", "velocity", "torque")),
    "Acrobot-v1": _Case(Acrobot, "Acrobot-v1", _set_acrobot, _acrobot_policy, _reset_ok_acrobot,
                        3e-6, 3e-6, 0.0, True),
    "MountainCar-v0": _Case(MountainCar, "MountainCar-v0", _set_mountain_car,
                            _mountain_car_policy, _reset_ok_mountain_car, 3e-8, 3e-7, 0.0, True),
    "MountainCarContinuous-v0": _Case(MountainCarContinuous, "MountainCarContinuous-v0",
                                      _set_mountain_car_continuous,
                                      _mountain_car_continuous_policy, _reset_ok_mountain_car,
                                      3e-8, 3e-7, 1e-7, True, ("goal", "action")),
}
IDS = list(CASES)
N_PARITY_STEPS = 3000


def _gym_unwrapped(gym_id: str, seed: int = 0) -> Any:
    g = gymnasium.make(gym_id).unwrapped
    g.reset(seed=seed)
    return g


# --------------------------------------------------------------------------------------------------
# Step parity, auto-reset, termination/truncation coverage
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("gym_id", IDS)
def test_step_parity(gym_id: str) -> None:
    case = CASES[gym_id]
    env = case.make()
    params = env.default_params
    assert env.name == gym_id
    limit = params.max_steps_in_episode
    g = _gym_unwrapped(gym_id)
    space = g.observation_space
    base_key = jax.random.key(123)

    @jax.jit
    def step(t, state, action):
        # The key is derived inside the jitted call: slicing a key array per step from Python would
        # cost as much as the step itself.
        return env.step(jax.random.fold_in(base_key, t), state, action, params)

    obs, state = jax.jit(env.reset)(base_key, params)
    obs, s = jax.device_get((obs, state))
    rng = np.random.default_rng(0)

    episode = n_term = n_trunc = 0
    worst_obs = worst_rew = 0.0  # in units of the tolerance
    edge_hits = 0  # steps that exercise a clip/wall/reward branch worth covering (per env below)
    for t in range(N_PARITY_STEPS):
        case.set_gym_state(g, s)
        action = case.policy(rng, obs, episode)
        g_obs, g_rew, g_term, _, _ = g.step(action)

        out = step(t, state, np.asarray(action))
        state = out[1]
        # One transfer per step for everything the checks need.
        obs_j, new, rew, term, trunc, info = jax.device_get(out)
        rew, term, trunc = float(rew), bool(term), bool(trunc)
        final = info["final_observation"]
        assert final.dtype == np.float32 and final.shape == g_obs.shape

        # The observation the step produced (before any auto-reset) is Gymnasium's next observation.
        tol = case.obs_atol + case.obs_rtol * np.abs(g_obs)
        err = np.abs(final.astype(np.float64) - g_obs) / tol
        worst_obs = max(worst_obs, float(err.max()))
        assert err.max() <= 1.0, (t, s, action, final, g_obs)
        assert np.all((g_obs >= space.low) & (g_obs <= space.high)), (t, g_obs)
        rew_err = abs(rew - float(g_rew))
        worst_rew = max(worst_rew, rew_err)
        assert rew_err <= case.reward_atol + 1e-6 * abs(float(g_rew)), (t, s, action, rew, g_rew)
        assert term == g_term, (t, s, action, final, g_obs)
        # Truncation is exactly "this step reached the limit", independent of termination.
        assert trunc == (int(s.time) + 1 >= limit), (t, int(s.time), trunc)

        if case.components:
            comps = info["reward_components"]
            assert tuple(sorted(comps)) == tuple(sorted(case.components))
            assert all(np.asarray(v).dtype == np.float32 and np.shape(v) == ()
                       for v in comps.values())
            assert abs(sum(float(v) for v in comps.values()) - rew) <= 1e-5 * max(1.0, abs(rew))
        else:
            assert set(info) == {"final_observation"}

        if gym_id == "Pendulum-v1":
            edge_hits += abs(g_obs[2]) == 8.0  # the max_speed clip
            assert all(float(v) <= 0.0 for v in info["reward_components"].values())
        elif gym_id.startswith("MountainCar"):
            edge_hits += g_obs[0] == np.float32(-1.2)  # stopped at the left wall
        if gym_id == "MountainCarContinuous-v0":
            comps = info["reward_components"]
            assert float(comps["goal"]) == (100.0 if term else 0.0)
            # The action cost uses the *unclipped* action.
            np.testing.assert_allclose(float(comps["action"]), -0.1 * float(action[0]) ** 2,
                                       rtol=1e-6)

        if term or trunc:
            n_term += term
            n_trunc += trunc and not term
            episode += 1
            # Auto-reset: a fresh start state and its observation.
            assert int(new.time) == 0
            assert case.reset_ok(obs_j, new), (t, obs_j, new)
        else:
            assert int(new.time) == int(s.time) + 1
            np.testing.assert_array_equal(obs_j, final)
        obs, s = obs_j, new

    print(f"{gym_id}: worst obs err {worst_obs:.3f} x tol, worst reward err {worst_rew:.2e}, "
          f"{n_term} terminated, {n_trunc} truncated, {edge_hits} edge hits")
    assert n_trunc >= 1
    if case.can_terminate:
        assert n_term >= 1
    else:
        assert n_term == 0
    if gym_id == "Pendulum-v1" or gym_id.startswith("MountainCar"):
        assert edge_hits >= 1


# --------------------------------------------------------------------------------------------------
# Time limits
# --------------------------------------------------------------------------------------------------


def _non_terminating(gym_id: str) -> tuple[Any, Any, Any, Callable[[Any], None]]:
    """(env, params, action, gym_patch): a setting in which the episode can only be truncated."""
    env = CASES[gym_id].make()
    params = env.default_params
    if gym_id == "CartPole-v1":
        # Thresholds are params, so move them out of reach; the pole simply falls and swings.
        params = params.replace(x_threshold=1e9, theta_threshold_radians=1e9)

        def patch(g: Any) -> None:
            g.x_threshold = 1e9
            g.theta_threshold_radians = 1e9
        return env, params, 1, patch
    action = {"Pendulum-v1": np.array([0.5], np.float32), "Acrobot-v1": 1, "MountainCar-v0": 1,
              "MountainCarContinuous-v0": np.array([0.0], np.float32)}[gym_id]
    return env, params, action, lambda g: None


def _scan_fixed_action(env: Any, params: Any, action: Any, n: int, seed: int = 0):
    """Runs ``n`` steps with a fixed action.

    Returns:
        stacked ``(terminated, truncated, time, obs, final_observation)``, leading axis ``n``.
    """
    key = jax.random.key(seed)
    obs, state = env.reset(key, params)
    a = jnp.asarray(action)

    def body(state, k):
        obs, state, _, term, trunc, info = env.step(k, state, a, params)
        return state, (term, trunc, state.time, obs, info["final_observation"])

    _, out = jax.lax.scan(body, state, jax.random.split(jax.random.fold_in(key, 1), n))
    return jax.device_get(out)


@pytest.mark.parametrize("gym_id", IDS)
def test_truncation_at_default_limit(gym_id: str) -> None:
    env, params, action, patch = _non_terminating(gym_id)
    limit = params.max_steps_in_episode
    assert limit == gymnasium.spec(gym_id).max_episode_steps
    assert limit == env.default_params.max_steps_in_episode

    term, trunc, time, _, _ = _scan_fixed_action(env, params, action, 2 * limit + 5)
    assert not term.any()
    # First truncation exactly on step ``limit``; the next episode again lasts ``limit`` steps.
    np.testing.assert_array_equal(np.flatnonzero(trunc) + 1, [limit, 2 * limit])
    assert time[limit - 1] == 0 and time[limit - 2] == limit - 1

    # Gymnasium's TimeLimit wrapper cuts the same episode at the same step count.
    g = gymnasium.make(gym_id)
    g.reset(seed=0)
    patch(g.unwrapped)
    n = 0
    while True:
        n += 1
        _, _, g_term, g_trunc, _ = g.step(action)
        assert not g_term
        if g_trunc:
            break
    assert n == limit


@pytest.mark.parametrize("gym_id", IDS)
def test_truncation_short_limit(gym_id: str) -> None:
    env, params, action, _ = _non_terminating(gym_id)
    params = params.replace(max_steps_in_episode=7)
    term, trunc, time, obs, final = _scan_fixed_action(env, params, action, 30)
    assert not term.any()
    np.testing.assert_array_equal(np.flatnonzero(trunc) + 1, [7, 14, 21, 28])
    np.testing.assert_array_equal(time, np.arange(1, 31) % 7)
    # On a truncating step the returned obs starts a new episode; elsewhere it is the stepped obs.
    assert not np.array_equal(obs[6], final[6])
    np.testing.assert_array_equal(obs[~trunc], final[~trunc])


def test_terminated_and_truncated_on_the_same_step() -> None:
    """MountainCar reaching the goal exactly at the time limit reports both flags, as Gymnasium."""
    env = MountainCar()
    params = env.default_params
    obs, state = env.reset(jax.random.key(7), params)
    step = jax.jit(env.step)
    # Find when the velocity-following policy terminates, then set the time limit to that step.
    s0, k = state, 0
    while True:
        a = 2 if float(obs[1]) > 0 else 0
        obs, state, _, term, trunc, _ = step(jax.random.key(k), state, jnp.asarray(a), params)
        k += 1
        assert not trunc
        if term:
            break
    short = params.replace(max_steps_in_episode=k)
    state, obs = s0, np.array([s0.position, s0.velocity])
    g = gymnasium.make("MountainCar-v0", max_episode_steps=k)
    g.reset(seed=0)
    for i in range(k):
        a = 2 if obs[1] > 0 else 0
        _set_mountain_car(g.unwrapped, jax.device_get(state))
        g_obs, _, g_term, g_trunc, _ = g.step(a)
        obs, state, _, term, trunc, info = step(jax.random.key(i), state, jnp.asarray(a), short)
        assert (bool(term), bool(trunc)) == (g_term, g_trunc) == ((i == k - 1),) * 2
    np.testing.assert_allclose(np.asarray(info["final_observation"]), g_obs, atol=1e-6)
    assert int(state.time) == 0


# --------------------------------------------------------------------------------------------------
# Params are vmappable and derived constants follow the primaries
# --------------------------------------------------------------------------------------------------


def test_vmap_over_pole_length() -> None:
    env = CartPole()
    lengths = np.array([0.25, 0.5, 1.0], np.float32)
    base = env.default_params
    batched = jax.tree.map(lambda x: jnp.full((3,), x), base).replace(length=jnp.asarray(lengths))
    n = 300
    keys = jax.random.split(jax.random.key(3), n)
    actions = jax.random.bernoulli(jax.random.key(4), 0.5, (n,)).astype(jnp.int32)
    _, state0 = env.reset(jax.random.key(5), base)

    def rollout(params):
        def body(state, xs):
            k, a = xs
            obs, state, r, term, trunc, info = env.step(k, state, a, params)
            return state, (state, info["final_observation"], term)
        return jax.lax.scan(body, state0, (keys, actions))[1]

    v_states, v_final, v_term = jax.device_get(jax.jit(jax.vmap(rollout))(batched))
    finals = []
    for i, length in enumerate(lengths):
        s_states, s_final, s_term = jax.device_get(
            jax.jit(rollout)(base.replace(length=float(length))))
        np.testing.assert_allclose(v_final[i], s_final, rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(v_term[i], s_term)
        finals.append(s_final)

        # Against Gymnasium with the same length (its polemass_length is fixed in __init__, so it is
        # set by hand): the derived constants of the JAX env must follow ``length``.
        g = _gym_unwrapped("CartPole-v1")
        g.length = float(length)
        g.polemass_length = g.masspole * g.length
        prev = jax.tree.map(lambda x: x[i], v_states)
        s = jax.device_get(state0)
        for t in range(n):
            _set_cartpole(g, s)
            g_obs, _, g_term, _, _ = g.step(int(actions[t]))
            np.testing.assert_allclose(v_final[i][t], g_obs, rtol=1e-5, atol=1e-6)
            assert bool(v_term[i][t]) == g_term
            s = jax.tree.map(lambda x: x[t], prev)
    # The three members really are different systems.
    assert not np.allclose(finals[0][:50], finals[1][:50])
    assert not np.allclose(finals[1][:50], finals[2][:50])


# --------------------------------------------------------------------------------------------------
# Reset distributions
# --------------------------------------------------------------------------------------------------


def _reset_ranges(gym_id: str, state: Any) -> list[tuple[np.ndarray, float, float]]:
    """(values, low, high) for every randomised state variable, with Gymnasium's reset range."""
    if gym_id == "CartPole-v1":
        return [(v, -0.05, 0.05) for v in (state.x, state.x_dot, state.theta, state.theta_dot)]
    if gym_id == "Pendulum-v1":
        return [(state.theta, -math.pi, math.pi), (state.theta_dot, -1.0, 1.0)]
    if gym_id == "Acrobot-v1":
        return [(v, -0.1, 0.1) for v in (state.theta1, state.theta2, state.dtheta1, state.dtheta2)]
    return [(state.position, -0.6, -0.4)]


@pytest.mark.parametrize("gym_id", IDS)
def test_reset_distribution(gym_id: str) -> None:
    case = CASES[gym_id]
    env = case.make()
    params = env.default_params
    obs, state = jax.device_get(jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(
        jax.random.split(jax.random.key(11), 4096), params))
    assert obs.dtype == np.float32 and obs.shape == (4096,) + env.observation_space(params).shape
    assert state.time.dtype == np.int32 and np.all(state.time == 0)
    for values, low, high in _reset_ranges(gym_id, state):
        assert values.dtype == np.float32
        assert values.min() >= low and values.max() <= high
        # Uniform over the whole range: 4096 draws come within 1% of both ends and centre in it.
        width = high - low
        assert values.min() < low + 0.01 * width and values.max() > high - 0.01 * width
        assert abs(values.mean() - (low + high) / 2) < 0.03 * width
    if gym_id.startswith("MountainCar"):
        assert np.all(state.velocity == 0.0)
    for i in range(0, 4096, 512):
        assert case.reset_ok(obs[i], jax.tree.map(lambda x: x[i], state))
    # Distinct keys give distinct starts.
    assert len(np.unique(_reset_ranges(gym_id, state)[0][0])) > 4000
