"""Replay in host memory: items read back exactly as added (stacked frames through resets, wrap-around
and a restored state), about one frame stored per item, a full frame ring refused by name, the device
replay's samples for the same key, and a run with host replay the same bits as one with device replay."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from rljax.actorlearner.hostreplay import HostReplay, frame_stacked, sample_indices
from rljax.actorlearner.learner import HostOptions, train_host
from rljax.actorlearner.offpolicy import offpolicy_algorithm
from rljax.agents.dqn import DQNConfig
from rljax.agents.offpolicy import ReplayItem, make_replay
from rljax.core.rollout import Transition
from rljax.env import Box, Discrete
from rljax.host.base import HostSpec, HostStep
from tests.support.runs import leaves

K, FRAME = 4, (6, 5)


class FrameEnv:
    """``num_envs`` envs whose observation is the last ``K`` uint8 frames ``[6, 5, K]`` (a new random
    frame each step; a reset repeats the first frame ``K`` times, as Atari's stacking does); episodes
    end after ``length`` steps, terminated on even episodes and truncated on odd ones."""

    def __init__(self, num_envs: int, length: int = 7):
        self.spec = HostSpec(num_envs=num_envs, observation_space=Box(0, 255, (*FRAME, K), np.uint8),
                             action_space=Discrete(2))
        self.length = length
        self.reset(0)

    def reset(self, seed: int) -> np.ndarray:
        self.rng = np.random.default_rng(seed)
        self.t = np.zeros(self.spec.num_envs, int)
        self.episode = np.zeros(self.spec.num_envs, int)
        self.obs = np.stack([self._first() for _ in range(self.spec.num_envs)])
        return self.obs.copy()

    def _first(self) -> np.ndarray:
        return np.repeat(self.rng.integers(0, 256, (*FRAME, 1), np.uint8), K, axis=-1)

    def step(self, actions: np.ndarray) -> HostStep:
        new = self.rng.integers(0, 256, (self.spec.num_envs, *FRAME, 1), np.uint8)
        final = np.concatenate([self.obs[..., 1:], new], axis=-1)
        self.t += 1
        ended = self.t >= self.length
        obs = final.copy()
        for i in np.flatnonzero(ended):
            obs[i], self.t[i] = self._first(), 0
            self.episode[i] += 1
        terminated = ended & (self.episode % 2 == 1)
        self.obs = obs
        return HostStep(obs.copy(), (actions + 1).astype(np.float32), terminated, ended & ~terminated, final)

    def get_state(self) -> bytes:
        import pickle

        return pickle.dumps((self.rng, self.t, self.episode, self.obs))

    def set_state(self, state: bytes) -> None:
        import pickle

        self.rng, self.t, self.episode, self.obs = pickle.loads(state)

    def close(self) -> None:
        pass


def _items(num_envs: int, steps: int, n: int, seed: int = 0):
    """The n-step items an actor makes of ``steps`` steps of :class:`FrameEnv`, one rollout of 5 steps at a time."""
    env = FrameEnv(num_envs)
    config = DQNConfig(env="frames", num_envs=num_envs, num_steps=5, n_step=n, hidden_sizes=(4,), cnn_channels=(2,))
    finisher = offpolicy_algorithm(config, env.spec, 10).finisher
    obs, carry, out = env.reset(seed), finisher.init(), []
    for _ in range(steps // 5):
        rows = []
        for _ in range(5):
            action = np.zeros(num_envs, np.int32)
            step = env.step(action)
            rows.append((obs, action, step.reward, step.terminated, step.truncated, step.final_obs,
                         np.zeros(num_envs, np.float32)))
            obs = step.obs
        items, carry = finisher.finish(Transition(*(np.stack(c) for c in zip(*rows))), carry)
        out.append(jax.tree.map(np.asarray, items))
    return out


@pytest.mark.parametrize("n", [1, 3])
def test_stacked_frames_read_back_exactly_at_about_one_frame_an_item(n):
    rollouts = _items(num_envs=3, steps=200, n=n)
    example = jax.tree.map(lambda x: x[0], rollouts[0])
    assert frame_stacked(example.obs)
    replay = HostReplay(example, capacity=10_000, n_step=n)
    for items in rollouts:
        replay.add(items, num_envs=3)
    every = jax.tree.map(lambda *xs: np.concatenate(xs), *rollouts)
    got = replay.gather(np.arange(replay.size))
    for name in ReplayItem._fields:
        np.testing.assert_array_equal(got[name], getattr(every, name), err_msg=name)
    # 600 items: one new frame a step, one more an episode (its final observation's last frame, which
    # is no item's start), the reset's stack (its first frame 4 times) one frame; plus each stream's
    # placeholder zeros and first stack. With n = 1 that is every distinct frame once; with n > 1 the
    # bootstrap observations just after a reset are no shift of one stored, ~n frames more an episode.
    episodes, streams = 600 // 7, 3
    assert replay.written <= replay.size + episodes * (1 if n == 1 else n + 2) + streams * 2 * K


def test_a_wrapped_ring_and_a_restored_state_read_back_exactly():
    rollouts = _items(num_envs=2, steps=300, n=3)
    example = jax.tree.map(lambda x: x[0], rollouts[0])
    replay = HostReplay(example, capacity=97, n_step=3)
    for items in rollouts[:30]:
        replay.add(items, num_envs=2)
    restored = HostReplay(example, capacity=97, n_step=3).load(jax.tree.map(np.copy, replay.state()))
    for items in rollouts[30:]:
        replay.add(items, num_envs=2)
        restored.add(items, num_envs=2)
    every = jax.tree.map(lambda *xs: np.concatenate(xs)[-97:], *rollouts)
    order = (np.arange(97) + replay.cursor) % 97  # oldest slot first
    for buffer in (replay, restored):
        got = buffer.gather(order)
        for name in ReplayItem._fields:
            np.testing.assert_array_equal(got[name], getattr(every, name), err_msg=name)


def test_a_frame_ring_too_small_for_what_the_streams_share_is_refused_by_name():
    """Frames shared over the first 300 items (one a step), then none (four new frames an observation):
    the ring fills with frames live items read, and the next write is an error naming a larger value."""
    rng = np.random.default_rng(0)
    example = ReplayItem(obs=np.zeros((*FRAME, K), np.uint8), action=np.int32(0), reward=np.float32(0),
                         discount=np.float32(0), next_obs=np.zeros((*FRAME, K), np.uint8), valid=np.bool_(True))
    replay = HostReplay(example, capacity=2000, n_step=1, frames_per_item=1.0)
    stack = list(rng.integers(0, 256, (K + 1, *FRAME), np.uint8))

    def item(shared: bool) -> ReplayItem:
        if shared:
            stack.append(rng.integers(0, 256, FRAME, np.uint8))
            obs, nxt = np.stack(stack[-K - 1:-1], -1), np.stack(stack[-K:], -1)
        else:
            obs, nxt = rng.integers(0, 256, (2, *FRAME, K), np.uint8)
        return ReplayItem(obs=obs[None], action=np.zeros(1, np.int32), reward=np.zeros(1, np.float32),
                          discount=np.ones(1, np.float32), next_obs=nxt[None], valid=np.ones(1, bool))

    for _ in range(300):
        replay.add(item(True), num_envs=1)
    assert replay.written < 310
    with pytest.raises(RuntimeError, match=r"frame ring .* frames_per_item=1.0\) would overwrite a frame .* "
                                           r"give frames_per_item=2 or more"):
        for _ in range(1000):
            replay.add(item(False), num_envs=1)


def test_an_add_the_frame_ring_refuses_keeps_the_items_before_the_refused_one_whole(monkeypatch):
    """A full buffer of items that share frames, then rollouts of 20 items that share none: the ring
    fills with live frames and refuses an item part way through a rollout. The buffer then holds the
    items added before it, each whole (it reads back every item it counts, the older ones included),
    and a later rollout of items that fit is taken."""
    rng = np.random.default_rng(1)
    example = ReplayItem(obs=np.zeros((*FRAME, K), np.uint8), action=np.int32(0), reward=np.float32(0),
                         discount=np.float32(0), next_obs=np.zeros((*FRAME, K), np.uint8), valid=np.bool_(True))
    monkeypatch.setattr(HostReplay, "CHECK_AFTER", 1)  # a ring of 2 * 100 + 512 frames, not 2,560
    replay = HostReplay(example, capacity=100, n_step=1, frames_per_item=2.0)
    replay.CHECK_AFTER = 10**9  # and no early check: the late overflow this is about
    stack = list(rng.integers(0, 256, (K + 1, *FRAME), np.uint8))

    def rollout(count: int, shared: bool) -> ReplayItem:
        if shared:
            stack.extend(rng.integers(0, 256, (count, *FRAME), np.uint8))
            obs = np.stack([np.stack(stack[-K - 1 - i:len(stack) - 1 - i], -1) for i in reversed(range(count))])
            nxt = np.stack([np.stack(stack[-K - i:len(stack) - i], -1) for i in reversed(range(count))])
        else:
            obs, nxt = rng.integers(0, 256, (2, count, *FRAME, K), np.uint8)
        return ReplayItem(obs=obs, action=rng.integers(0, 2, count).astype(np.int32),
                          reward=rng.random(count).astype(np.float32), discount=np.ones(count, np.float32),
                          next_obs=nxt, valid=np.ones(count, bool))

    kept, refused = [], 0

    def add(items: ReplayItem) -> None:
        nonlocal refused
        before = replay.added
        try:
            replay.add(items, num_envs=1)
        except RuntimeError as err:
            assert "would overwrite a frame that a live item still reads" in str(err)
            refused += 1
        kept.append(jax.tree.map(lambda x: x[:replay.added - before], items))
        every = jax.tree.map(lambda *xs: np.concatenate(xs)[-replay.size:], *kept)
        got = replay.gather((replay.cursor - replay.size + np.arange(replay.size)) % replay.capacity)
        for name in ReplayItem._fields:
            np.testing.assert_array_equal(got[name], getattr(every, name), err_msg=name)

    for _ in range(30):
        add(rollout(5, shared=True))
    assert replay.size == 100 and replay.written < 200
    for _ in range(40):
        add(rollout(20, shared=False))
    assert refused > 20
    for _ in range(30):  # items that share frames again: a frame an item, and the ring has room for them
        add(rollout(5, shared=True))
    assert replay.added == sum(len(k.reward) for k in kept)


@pytest.mark.parametrize("frames_per_item", [1.0, 4.0])
def test_a_ring_laid_out_at_another_size_reads_back_the_same_items(monkeypatch, frames_per_item):
    from rljax.actorlearner.hostreplay import relaid_ring

    monkeypatch.setattr(HostReplay, "CHECK_AFTER", 1)  # rings of 97 * frames_per_item + 512 frames
    rollouts = _items(num_envs=2, steps=300, n=3)
    example = jax.tree.map(lambda x: x[0], rollouts[0])
    replay, other = (HostReplay(example, capacity=97, n_step=3, frames_per_item=f) for f in (1.5, frames_per_item))
    replay.CHECK_AFTER = 10**9  # no check of the sharing (the streams' first stacks, written an item)
    for items in rollouts:
        replay.add(items, num_envs=2)
    assert other.num_frames != replay.num_frames
    state = replay.state()
    other.load({**state, "store": relaid_ring(state, other.num_frames)})
    want, got = replay.gather(np.arange(97)), other.gather(np.arange(97))
    for name in ReplayItem._fields:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    live = replay.written - int(replay.fields["oldest_frame"].min())
    with pytest.raises(ValueError, match=rf"live items read {live:,} frames, which a ring of {live:,} frames cannot"):
        relaid_ring(state, live)


def test_an_atari_item_takes_under_a_quarter_of_its_plain_size():
    obs = np.zeros((84, 84, 4), np.uint8)
    example = ReplayItem(obs=obs, action=np.int32(0), reward=np.float32(0), discount=np.float32(0), next_obs=obs,
                         valid=np.bool_(False))
    per_item = HostReplay(example, capacity=10_000).nbytes / 10_000  # 1.5 frames an item by default
    assert per_item < 1.6 * 84 * 84 + 128 < 0.25 * 2 * obs.nbytes  # plainly: obs and next_obs, 56,448 bytes


def test_uint8_channels_that_share_no_frames_are_refused_as_frames_and_stored_as_they_are_with_0():
    """MinAtar-like observations (uint8 [10, 10, 4] object channels, nothing shifts): as frames, 8 are
    written an item, an error over the first 256 items that names frames_per_item=0; with it, the
    items are stored as they are and read back exactly, through a saved state too."""
    rng = np.random.default_rng(1)
    obs = lambda n: rng.integers(0, 2, (n, 10, 10, 4), np.uint8)  # noqa: E731
    batches = [ReplayItem(obs=obs(64), action=np.zeros(64, np.int32), reward=np.arange(64, dtype=np.float32),
                          discount=np.ones(64, np.float32), next_obs=obs(64), valid=np.ones(64, bool))
               for _ in range(6)]
    example = jax.tree.map(lambda x: x[0], batches[0])
    framed = HostReplay(example, capacity=300, n_step=1)
    with pytest.raises(ValueError, match=r"do not share frames .* frames_per_item=0 \(--frames-per-item 0\)"):
        for batch in batches:
            framed.add(batch, num_envs=8)
    assert framed.added == 256  # the items up to the check, each whole
    replay = HostReplay(example, capacity=300, n_step=1, frames_per_item=0)
    assert not replay.frames and replay.nbytes == 300 * (2 * 400 + 13)
    for batch in batches[:4]:
        replay.add(batch, num_envs=8)
    restored = HostReplay(example, capacity=300, frames_per_item=0).load(replay.state())
    for batch in batches[4:]:
        replay.add(batch, num_envs=8)
        restored.add(batch, num_envs=8)
    every = jax.tree.map(lambda *xs: np.concatenate(xs)[-300:], *batches)
    order = (np.arange(300) + replay.cursor) % 300
    for buffer in (replay, restored):
        got = buffer.gather(order)
        for name in ReplayItem._fields:
            np.testing.assert_array_equal(got[name], getattr(every, name), err_msg=name)


def test_vectors_are_stored_as_they_are():
    example = ReplayItem(obs=np.zeros(3, np.float32), action=np.zeros(2, np.float32), reward=np.float32(0),
                         discount=np.float32(0), next_obs=np.zeros(3, np.float32), valid=np.bool_(False))
    replay = HostReplay(example, capacity=8)
    assert not replay.frames and replay.nbytes == 8 * (3 * 4 * 2 + 2 * 4 + 4 + 4 + 1)


def test_the_indices_are_the_device_replays_for_the_same_key():
    from rljax.agents.offpolicy import replay_learning

    device = make_replay(50, prioritized=False)
    item = ReplayItem(obs=np.zeros(2, np.float32), action=np.int32(0), reward=np.float32(0),
                      discount=np.float32(0), next_obs=np.zeros(2, np.float32), valid=np.bool_(True))
    buffer = device.init(jax.tree.map(np.asarray, item), 0.6)
    batch = jax.tree.map(lambda x: np.broadcast_to(x, (37, *np.shape(x))).copy(), item)
    buffer = device.add(buffer, batch._replace(reward=np.arange(37, dtype=np.float32)))
    seen = []

    def learn_step(learner, items, weights, key):
        jax.debug.callback(lambda r: seen.append(np.asarray(r)), items.reward, ordered=True)
        return learner, jax.numpy.zeros(items.reward.shape), {}

    key = jax.random.key(7)
    replay_learning(learn_step, (), device, buffer, key, gradient_steps=3, batch_size=16, beta=1.0, active=True)
    host = sample_indices(key, 37, 3, 16)
    np.testing.assert_array_equal(np.stack([np.asarray(s) for s in seen]), host.astype(np.float32))


@pytest.mark.parametrize("prioritized, initial_priority", [(False, "max"), (True, "max"), (True, "td")])
def test_a_run_with_host_replay_is_the_same_bits_as_one_with_device_replay(prioritized, initial_priority):
    """DQN's CNN on stacked frames, 3-step items, a ring that wraps: the replay's place changes nothing,
    uniform or prioritised (the priorities each gradient step sets decide the next step's samples)."""
    config = DQNConfig(env="frames", num_envs=2, num_steps=5, total_timesteps=2 * 5 * 12, learning_starts=30,
                       batch_size=8, buffer_size=48, hidden_sizes=(8,), cnn_channels=(2,), n_step=3,
                       gradient_steps=2, target_update_interval=20, prioritized=prioritized)
    runs = [train_host(config, lambda actor: FrameEnv(2),
                       HostOptions(max_policy_lag=0, replay=where, initial_priority=initial_priority))
            for where in ("device", "host")]
    for a, b in zip(leaves(runs[0].params), leaves(runs[1].params)):
        np.testing.assert_array_equal(a, b)
    assert [r["td_loss"] for r in runs[0].rows] == [r["td_loss"] for r in runs[1].rows]
    assert runs[1].rows[-1]["buffer_size"] == 48
    if prioritized:  # the same priorities, beside items that read back as the device's
        device, host = runs[0].opt_state, runs[1].opt_state
        for a, b in zip(leaves((device.sum_tree, device.priorities, device.max_priority)),
                        leaves((host["priorities"].sum_tree, host["priorities"].priorities,
                                host["priorities"].max_priority))):
            np.testing.assert_array_equal(a, b)
        read = _host_buffer(48, 3).load(host).gather(np.arange(48))
        for name in ReplayItem._fields:
            np.testing.assert_array_equal(read[name], getattr(device.data, name), err_msg=name)


# TD3 in the slow tier: by default the SAC case and DQN's same-bits cases above stand for it.
@pytest.mark.parametrize("algorithm", ["sac", pytest.param("td3", marks=pytest.mark.slow)])
def test_continuous_control_with_prioritised_host_replay_learns_from_the_device_replays_samples(algorithm):
    """SAC (observations normalised, TD insertion): the same bits as with the device replay. TD3: the
    same losses and priorities, its params within float32 rounding (the compiler fuses the device
    replay's gather into TD3's critic gradient, summing in another order; a host callback's result
    cannot be fused)."""
    from rljax.agents.sac import SACConfig
    from rljax.agents.td3 import TD3Config
    from rljax.host.sources import make_host_env

    kind = {"sac": SACConfig, "td3": TD3Config}[algorithm]
    config = kind(env="gymnasium/Pendulum-v1", num_envs=1, num_steps=8, total_timesteps=8 * 8, learning_starts=24,
                  batch_size=16, buffer_size=50, gradient_steps=2, hidden_sizes=(16,), n_step=3, prioritized=True,
                  normalize_obs=algorithm == "sac")
    options = dict(max_policy_lag=0, initial_priority="td" if algorithm == "sac" else "max")
    runs = [train_host(config, lambda actor: make_host_env(config.env, 1), HostOptions(replay=where, **options))
            for where in ("device", "host")]
    loss = "critic_loss"
    assert [r[loss] for r in runs[0].rows] == [r[loss] for r in runs[1].rows]
    np.testing.assert_array_equal(runs[0].opt_state.priorities, runs[1].opt_state["priorities"].priorities)
    for a, b in zip(leaves(runs[0].params), leaves(runs[1].params)):
        if algorithm == "sac":
            np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_an_update_after_a_refused_add_keeps_each_item_beside_its_priority(monkeypatch):
    """The frame ring refuses a rollout part way (its first 4 items kept): an update given the state
    the last good update returned goes on from that state, its items and priorities in step."""
    config = DQNConfig(env="frames", num_envs=2, num_steps=5, learning_starts=0, batch_size=8, buffer_size=48,
                       hidden_sizes=(8,), cnn_channels=(2,), prioritized=True)
    algorithm = offpolicy_algorithm(config, FrameEnv(2).spec, 20, replay="host")
    params, state = algorithm.init(jax.random.key(0), np.zeros((1, *FRAME, K), np.uint8))
    rollouts, write = _items(num_envs=2, steps=30, n=1), HostReplay._write
    for u, items in enumerate(rollouts[:3]):
        params, state, _ = algorithm.update(params, state, (items, 0), jax.random.key(u), np.uint32(u), np.uint32(20))
    calls = [0]

    def refusing(self, frames):
        calls[0] += 1
        if calls[0] > 4:
            raise RuntimeError("the frame ring is full")
        return write(self, frames)

    monkeypatch.setattr(HostReplay, "_write", refusing)
    with pytest.raises(RuntimeError, match="full"):
        algorithm.update(params, state, (rollouts[3], 0), jax.random.key(3), np.uint32(3), np.uint32(20))
    monkeypatch.setattr(HostReplay, "_write", write)
    for u, items in enumerate(rollouts[3:], 3):
        params, state, _ = algorithm.update(params, state, (items, 0), jax.random.key(u), np.uint32(u), np.uint32(20))
    tree, (cursor, size) = state["priorities"], state["counters"][:2]
    assert (int(tree.cursor), int(tree.size)) == (cursor, size) == (60 % 48, 48)  # 6 rollouts of 10 items
    np.testing.assert_array_equal(np.asarray(tree.priorities[:size]) > 0, state["fields"]["valid"][:size])


def _host_buffer(capacity: int, n: int) -> HostReplay:
    example = ReplayItem(obs=np.zeros((*FRAME, K), np.uint8), action=np.int32(0), reward=np.float32(0),
                         discount=np.float32(0), next_obs=np.zeros((*FRAME, K), np.uint8), valid=np.bool_(False))
    return HostReplay(example, capacity, n)


@pytest.mark.parametrize("prioritized", [False, True])
def test_a_run_with_host_replay_resumes_to_the_same_bits_its_replay_checkpointed(tmp_path, prioritized):
    """Stopped by SIGTERM during update 5 and resumed to 12 (one actor at lag 0, stacked frames): the
    same params and the same replay contents (and priorities) as a run never stopped, although the
    resumed buffer stores its streams' first frames anew (its matching caches are not saved)."""
    import os
    import signal

    from rljax.actorlearner.run import run_host
    from rljax.training.options import RunOptions

    class Terminating(FrameEnv):  # SIGTERM at its 23rd step (update 5's rollout)
        steps = 0

        def step(self, actions):
            Terminating.steps += 1
            if Terminating.steps == 23:
                os.kill(os.getpid(), signal.SIGTERM)
            return super().step(actions)

    config = DQNConfig(env="frames", num_envs=2, num_steps=5, total_timesteps=2 * 5 * 12, learning_starts=30,
                       batch_size=8, buffer_size=48, hidden_sizes=(8,), cnn_channels=(2,), n_step=3,
                       gradient_steps=2, target_update_interval=20, exploration_fraction=0.0, prioritized=prioritized)
    layout = HostOptions(max_policy_lag=0, replay="host")
    whole = run_host(config, RunOptions(run_dir=tmp_path / "whole", quiet=True), layout, make_env=lambda a: FrameEnv(2))
    stopped = run_host(config, RunOptions(run_dir=tmp_path / "cut", quiet=True), layout,
                       make_env=lambda a: Terminating(2))
    # The signal comes during rollout 5 (index 4): the run stops once the update then running is saved.
    assert stopped.preempted == "SIGTERM" and 4 <= stopped.updates < 12
    resumed = run_host(config, RunOptions(run_dir=tmp_path / "cut", resume=True, quiet=True),
                       make_env=lambda a: FrameEnv(2))
    assert resumed.updates == 12
    for a, b in zip(leaves(whole.params), leaves(resumed.params)):
        np.testing.assert_array_equal(a, b)
    read = [_host_buffer(48, 3).load(state).gather(np.arange(48)) for state in (whole.opt_state, resumed.opt_state)]
    for name in ReplayItem._fields:
        np.testing.assert_array_equal(read[0][name], read[1][name], err_msg=name)
    if prioritized:
        for a, b in zip(leaves(whole.opt_state["priorities"]), leaves(resumed.opt_state["priorities"])):
            np.testing.assert_array_equal(a, b)


class Unsharing(FrameEnv):
    """:class:`FrameEnv` whose observations stop sharing frames after ``switch_at`` steps (four new
    random frames each step)."""

    def __init__(self, num_envs: int, switch_at: int):
        super().__init__(num_envs)
        self.steps, self.switch_at = 0, switch_at

    def step(self, actions: np.ndarray) -> HostStep:
        step = super().step(actions)
        self.steps += 1
        if self.steps <= self.switch_at:
            return step
        shape = (self.spec.num_envs, *FRAME, K)
        self.obs = self.rng.integers(0, 256, shape, np.uint8)
        return step._replace(obs=self.obs.copy(), final_obs=self.rng.integers(0, 256, shape, np.uint8))


def test_a_frame_ring_that_fills_late_in_a_run_saves_the_updates_before_it(tmp_path):
    """The observations share frames for 200 steps, then none: the ring refuses update u's rollout, the
    run saves updates 1..u-1 with their replay (as it was before the refused rollout) and stops with
    the ring's error; the run resumes from that checkpoint."""
    from rljax.actorlearner.run import run_host
    from rljax.store.checkpoint import Checkpointer
    from rljax.training.options import RunOptions

    config = DQNConfig(env="frames", num_envs=2, num_steps=5, total_timesteps=2 * 5 * 100, learning_starts=30,
                       batch_size=8, buffer_size=1000, hidden_sizes=(8,), cnn_channels=(2,), gradient_steps=1)
    layout = HostOptions(max_policy_lag=0, replay="host")
    run = tmp_path / "run"
    with pytest.raises(RuntimeError, match="frame ring .* would overwrite a frame that a live item still reads"):
        run_host(config, RunOptions(run_dir=run, quiet=True, checkpoint_interval_s=1e9), layout,
                 make_env=lambda a: Unsharing(2, switch_at=200))
    saved = Checkpointer(run, read_only=True).steps()
    assert len(saved) == 1 and 200 < saved[0] < 2 * 5 * 100
    with pytest.raises(RuntimeError, match="frame ring"):  # the same ring: still full of live frames
        run_host(config, RunOptions(run_dir=run, resume=True, quiet=True), layout, make_env=lambda a: FrameEnv(2))
    saved = Checkpointer(run, read_only=True).steps()  # and what it learned before failing again
    from rljax.store.rundir import ConfigMismatchError

    with pytest.raises(ConfigMismatchError, match=r"frames_per_item \(saved 1.5, now 0: 0 stores observations as"):
        run_host(config, RunOptions(run_dir=run, resume=True, quiet=True),
                 dataclasses.replace(layout, frames_per_item=0), make_env=lambda a: FrameEnv(2))
    bigger = dataclasses.replace(layout, frames_per_item=4.0)  # the error's advice: the ring laid out anew
    resumed = run_host(config, RunOptions(run_dir=run, resume=True, quiet=True), bigger, make_env=lambda a: FrameEnv(2))
    assert resumed.updates == 100 and resumed.rows[0]["env_steps"] == saved[-1] + 10
