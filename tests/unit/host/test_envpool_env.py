"""EnvPool as host envs: the same-step auto-reset over EnvPool's next-step one, seeds that remake the
pool, images as [H, W, C], clear errors. A fake ``envpool`` module (with EnvPool's next-step reset
and partial ``reset(env_ids)``) pins the adapter on every machine; the real package, where it is
installed (the ``envpool`` extra), is held to the contract on CartPole and Pong."""

from __future__ import annotations

import sys
import types

import gymnasium
import numpy as np
import pytest

from rljax.host.envpool_env import EnvPoolEnv
from rljax.host.sources import make_host_env


class _FakePool:
    """EnvPool's behaviour in miniature: env ``i``'s episodes last ``2 + i`` steps (terminated); the
    step after one ended resets that env (ignoring its action, reward 0) unless it was reset first.
    Observations ``[C=2, H=3, W=4]`` encode (seed, env, episode, step), each cell differently."""

    made: list[int] = []

    def __init__(self, num_envs: int, seed: int):
        self.n, self.seed = num_envs, seed
        self.t, self.ep, self.pending = np.zeros(num_envs, int), np.zeros(num_envs, int), np.zeros(num_envs, bool)
        self.observation_space = gymnasium.spaces.Box(0, 255, (2, 3, 4), np.uint8)
        self.action_space = gymnasium.spaces.Discrete(3)
        _FakePool.made.append(seed)

    def _obs(self, ids):
        base = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
        return np.stack([base + (self.seed * 50 + i * 20 + self.ep[i] * 5 + self.t[i]) % 200 for i in ids]).astype(
            np.uint8)

    def reset(self, env_id=None):
        ids = np.arange(self.n) if env_id is None else np.asarray(env_id)
        for i in ids:
            self.ep[i] += self.t[i] > 0 or self.pending[i]
            self.t[i], self.pending[i] = 0, False
        return self._obs(ids), {"env_id": ids}

    def step(self, actions):
        assert actions.shape == (self.n,)
        reward = np.ones(self.n)
        for i in range(self.n):
            if self.pending[i]:  # EnvPool's own auto-reset: this step only resets
                self.reset([i])
                reward[i] = 0.0
            else:
                self.t[i] += 1
        terminated = np.array([self.t[i] == 2 + i for i in range(self.n)])
        self.pending |= terminated
        return self._obs(range(self.n)), reward, terminated, np.zeros(self.n, bool), {}

    def close(self):
        pass


@pytest.fixture
def fake_envpool(monkeypatch):
    module = types.ModuleType("envpool")
    module.list_all_envs = lambda: ["Fake-v0", "Pong-v5"]
    module.make = lambda task, env_type, num_envs, batch_size, seed, **kw: _FakePool(num_envs, seed)
    monkeypatch.setitem(sys.modules, "envpool", module)
    _FakePool.made = []
    return module


def test_an_ended_episode_resets_on_the_same_step_and_images_are_channels_last(fake_envpool):
    env = make_host_env("envpool/Fake-v0", 2)
    assert isinstance(env, EnvPoolEnv) and env.spec.obs_shape == (3, 4, 2) and env.spec.action_space.n == 3
    raw = lambda seed, i, ep, t: np.moveaxis(  # noqa: E731
        (np.arange(24).reshape(2, 3, 4) + (seed * 50 + i * 20 + ep * 5 + t) % 200).astype(np.uint8), 0, -1)
    obs = env.reset(0)
    np.testing.assert_array_equal(obs, [raw(0, 0, 0, 0), raw(0, 1, 0, 0)])
    first = env.step(np.zeros(2, np.int64))
    assert first.terminated.tolist() == [False, False]
    second = env.step(np.zeros(2, np.int64))  # env 0's episode (2 steps) ends here
    assert second.terminated.tolist() == [True, False] and second.reward.tolist() == [1.0, 1.0]
    np.testing.assert_array_equal(second.final_obs, [raw(0, 0, 0, 2), raw(0, 1, 0, 2)])
    np.testing.assert_array_equal(second.obs, [raw(0, 0, 1, 0), raw(0, 1, 0, 2)])  # env 0: its next episode
    third = env.step(np.zeros(2, np.int64))  # env 1 ends; env 0 takes a real step (reward 1, not a reset step)
    assert third.terminated.tolist() == [False, True] and third.reward.tolist() == [1.0, 1.0]
    np.testing.assert_array_equal(third.final_obs[0], raw(0, 0, 1, 1))
    np.testing.assert_array_equal(third.obs[1], raw(0, 1, 1, 0))
    assert third.obs.dtype == np.uint8 and third.obs.flags["C_CONTIGUOUS"]


def test_reset_remakes_the_pool_so_a_seed_always_starts_the_same_episodes(fake_envpool):
    env = EnvPoolEnv("Fake-v0", 2, channels_last=False)
    assert env.spec.obs_shape == (2, 3, 4)
    a = env.reset(0)  # the pool was just made with seed 0: kept
    env.step(np.zeros(2, np.int64))
    b = env.reset(0)
    c = env.reset(7)
    assert _FakePool.made == [0, 0, 7]
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_bad_names_arguments_and_a_missing_package_are_named(fake_envpool, monkeypatch):
    with pytest.raises(ValueError, match="unknown EnvPool task 'Pong-v4'; did you mean Pong-v5"):
        EnvPoolEnv("Pong-v4", 2)
    with pytest.raises(ValueError, match="seed=3: set by EnvPoolEnv itself"):
        EnvPoolEnv("Fake-v0", 2, seed=3)
    env = EnvPoolEnv("Fake-v0", 2)
    with pytest.raises(ValueError, match=r"actions\[1\] = 3 is not an action of Discrete\(3\)"):
        env.step(np.array([0, 3]))
    monkeypatch.setitem(sys.modules, "envpool", None)
    with pytest.raises(ImportError, match=r'pip install -e "\.\[envpool\]"'):
        make_host_env("envpool/Fake-v0", 2)


def test_the_real_envpool_keeps_the_contract_on_cartpole_and_pong():
    pytest.importorskip("envpool", reason="the envpool extra is not installed")
    env = make_host_env("envpool/CartPole-v1", 3, max_episode_steps=20)
    try:
        obs = env.reset(0)
        assert obs.shape == (3, 4) and obs.dtype == np.float32
        ends = 0
        for _ in range(60):
            step = env.step(np.ones(3, np.int64))
            done = step.terminated | step.truncated
            ends += int(done.sum())
            # Not done: final_obs is obs. Done: obs is a first observation (CartPole starts within +-0.05).
            np.testing.assert_array_equal(step.final_obs[~done], step.obs[~done])
            assert np.all(np.abs(step.obs[done]) <= 0.05)
        assert ends > 0
    finally:
        env.close()
    pong = make_host_env("envpool/Pong-v5", 2)
    try:
        assert pong.spec.obs_shape == (84, 84, 4) and pong.reset(0).dtype == np.uint8
        other = make_host_env("envpool/Pong-v5", 2)
        np.testing.assert_array_equal(pong.reset(0), other.reset(0))
        other.close()
    finally:
        pong.close()
