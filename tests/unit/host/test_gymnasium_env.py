"""Gymnasium vector envs on the host path: spaces, seeding, and the auto-reset contract step by step
against single Gymnasium envs driven by hand."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest

from rljax.env import Box, Discrete
from rljax.host.gymnasium_env import GymnasiumEnv, host_space


def test_spaces_become_rljax_spaces():
    env = GymnasiumEnv("CartPole-v1", 3)
    try:
        assert env.spec.num_envs == 3
        assert isinstance(env.spec.observation_space, Box) and env.spec.obs_shape == (4,)
        assert env.spec.obs_dtype == np.float32
        assert isinstance(env.spec.action_space, Discrete) and env.spec.action_space.n == 2
    finally:
        env.close()
    env = GymnasiumEnv("Pendulum-v1", 2)
    try:
        box = env.spec.action_space
        assert isinstance(box, Box) and box.shape == (1,) and float(box.low[0]) == -2.0 and float(box.high[0]) == 2.0
    finally:
        env.close()


def test_float64_boxes_become_float32_and_other_spaces_are_refused_by_name():
    box = host_space(gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float64), "obs")
    assert np.dtype(box.dtype) == np.float32
    with pytest.raises(ValueError, match="starts at 1"):
        host_space(gymnasium.spaces.Discrete(3, start=1), "the action space")
    with pytest.raises(ValueError, match="Tuple.*Box or Discrete"):
        GymnasiumEnv("Blackjack-v1", 2)


def test_an_unknown_id_says_what_was_meant():
    with pytest.raises(ValueError, match="unknown Gymnasium env 'CartPol-v1'; did you mean CartPole-v1"):
        GymnasiumEnv("CartPol-v1", 2)


def _by_hand(env_id: str, seeds: list[int], actions: np.ndarray, **kwargs) -> list[tuple]:
    """Single envs stepped one by one, reset by hand when an episode ends (Gymnasium's same-step reset)."""
    envs = [gymnasium.make(env_id, **kwargs) for _ in seeds]
    obs = [e.reset(seed=s)[0] for e, s in zip(envs, seeds)]
    out = []
    for a in actions:
        rows = []
        for i, e in enumerate(envs):
            o, r, te, tr, _ = e.step(a[i])
            final = o
            if te or tr:
                o, _ = e.reset()
            rows.append((o, r, te, tr, final))
        out.append(rows)
    return [obs, out]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_steps_match_single_envs_reset_by_hand(asynchronous):
    """Env i seeded seed + i; on a step that ends an episode obs is the new episode's first observation and
    final_obs the last one; terminated and truncated (a 25-step time limit) exactly as Gymnasium says."""
    n, steps = 3, 80
    actions = np.random.default_rng(0).integers(0, 2, (steps, n))
    first, rows = _by_hand("CartPole-v1", [7, 8, 9], actions, max_episode_steps=25)
    env = GymnasiumEnv("CartPole-v1", n, asynchronous, max_episode_steps=25)
    try:
        np.testing.assert_array_equal(env.reset(7), np.stack(first))
        ended = {"terminated": 0, "truncated": 0}
        for a, expected in zip(actions, rows):
            step = env.step(a)
            for i, (o, r, te, tr, final) in enumerate(expected):
                np.testing.assert_array_equal(step.obs[i], o)
                np.testing.assert_array_equal(step.final_obs[i], final)
                assert step.reward[i] == r and step.terminated[i] == te and step.truncated[i] == tr
                ended["terminated"] += te
                ended["truncated"] += tr
            assert step.reward.dtype == np.float32 and step.terminated.dtype == np.bool_
        assert ended["terminated"] > 0 and ended["truncated"] > 0, ended
    finally:
        env.close()


def test_bad_actions_are_refused_with_the_value():
    env = GymnasiumEnv("CartPole-v1", 2)
    try:
        env.reset(0)
        with pytest.raises(ValueError, match=r"actions\[1\] = 2 is not an action of Discrete\(2\)"):
            env.step(np.array([0, 2]))
        with pytest.raises(ValueError, match=r"shape \(3,\)"):
            env.step(np.array([0, 1, 1]))
    finally:
        env.close()


def test_a_saved_state_replays_the_same_steps_and_episodes():
    env = GymnasiumEnv("CartPole-v1", 3)
    env.reset(0)
    for _ in range(5):
        env.step(np.ones(3, np.int64))
    state = env.get_state()
    actions = [np.array([t % 2, 1, 0]) for t in range(40)]  # long enough for every env to end an episode
    first = [env.step(a) for a in actions]
    env.set_state(state)
    again = [env.step(a) for a in actions]
    assert any(s.terminated.any() for s in first)
    for a, b in zip(first, again):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    with pytest.raises(ValueError, match="the saved state holds 3 envs, this batch 2"):
        GymnasiumEnv("CartPole-v1", 2).set_state(state)
    env.close()


def test_a_batch_made_to_render_draws_every_copy_and_others_say_they_cannot():
    env = GymnasiumEnv("CartPole-v1", 2, render=True)
    env.reset(0)
    frames = env.render()
    assert frames.shape == (2, 400, 600, 3) and frames.dtype == np.uint8 and env.render_fps == 50
    env.step(np.ones(2, np.int64))
    assert (env.render() != frames).any(), "the pictures follow the state"
    env.close()
    plain = GymnasiumEnv("CartPole-v1", 1)
    with pytest.raises(ValueError, match="made without render=True"):
        plain.render()
    plain.close()
    if "rljax-test/NoPictures-v0" not in gymnasium.registry:
        gymnasium.register("rljax-test/NoPictures-v0", entry_point=_NoPictures)
    with pytest.raises(ValueError, match=r"NoPictures-v0 cannot be drawn: it has no rgb_array render mode "
                                         r"\(its render modes: none\)"):
        GymnasiumEnv("rljax-test/NoPictures-v0", 1, render=True)


class _NoPictures(gymnasium.Env):
    """An env that declares no render mode."""

    metadata = {"render_modes": []}
    observation_space = gymnasium.spaces.Discrete(2)
    action_space = gymnasium.spaces.Discrete(2)
