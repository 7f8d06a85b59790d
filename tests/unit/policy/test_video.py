"""Drawing envs and writing episode videos: the bundled envs' ``render``, the GIF writer, the
episode rollout that feeds it (ends at the first done), and the clear error for an env nobody draws."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest
from PIL import Image

import rljax
from rljax.policy import video

SHAPES = {"CartPole-v1": (400, 600, 3), "Pendulum-v1": (500, 500, 3), "Acrobot-v1": (500, 500, 3),
          "MountainCar-v0": (400, 600, 3), "MountainCarContinuous-v0": (400, 600, 3)}
# A field of each env's state that moves the picture, and a second value for it.
MOVED = {"CartPole-v1": ("theta", 0.2), "Pendulum-v1": ("theta", 1.0), "Acrobot-v1": ("theta1", 1.0),
         "MountainCar-v0": ("position", -0.9), "MountainCarContinuous-v0": ("position", 0.2)}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_render_draws_a_uint8_picture_that_follows_the_state(name):
    env, params = rljax.make(name)
    _, state = env.reset(jax.random.key(0), params)
    frame = env.render(state, params)
    assert frame.shape == SHAPES[name] and frame.dtype == np.uint8
    assert (frame == 255).all(-1).mean() > 0.5, "a white background"
    assert (frame < 200).any(), "something drawn on it"
    field, value = MOVED[name]
    other = env.render(state.replace(**{field: np.float32(value)}), params)
    assert other.shape == frame.shape and (other != frame).any()
    # numpy states draw the same picture as jax ones
    np.testing.assert_array_equal(env.render(jax.device_get(state), params), frame)


def test_gif_has_one_frame_per_picture_and_reads_back(tmp_path):
    env, params = rljax.make("CartPole-v1")
    _, state = env.reset(jax.random.key(0), params)
    frames = [env.render(state.replace(theta=np.float32(0.02 * i)), params) for i in range(7)]
    path = video.write_gif(frames, tmp_path / "ep.gif", fps=50)
    with Image.open(path) as gif:
        assert gif.n_frames == 7 and gif.size == (600, 400)
        assert gif.info["duration"] == 20 and gif.info["loop"] == 0
        gif.seek(6)
        last = np.asarray(gif.convert("RGB"))
    assert np.abs(last.astype(int) - frames[6]).mean() < 2  # palette rounding only
    assert not list(tmp_path.glob(".*tmp*")), "no temporary file left behind"
    with pytest.raises(ValueError, match="one size"):
        video.write_gif([frames[0], frames[0][:10]], tmp_path / "bad.gif")


def test_the_rollout_stops_at_the_first_done_and_keeps_the_pre_done_state():
    env, params = rljax.make("CartPole-v1")
    push_right = lambda obs, key: jax.numpy.ones((), jax.numpy.int32)  # falls over in a few dozen steps
    states, rewards, dones = jax.jit(functools.partial(video.rollout_states, env, params, push_right,
                                                       max_steps=100))(jax.random.key(0))
    assert rewards.shape == dones.shape == (100,) and states.x.shape == (100,)
    first = int(np.argmax(np.asarray(dones)))
    assert 5 < first < 99
    assert int(states.time[first]) == first  # the last state of the episode (time counts its steps)
    assert int(states.time[first + 1]) == 0  # after the done: the next episode's reset
    draw = video.frame_drawer(env, params)
    frames = draw([jax.tree.map(lambda x: x[i], states) for i in (0, first)])
    assert len(frames) == 2 and frames[0].shape == (400, 600, 3)


def test_the_memory_task_draws_its_cue_blanks_and_query_through_an_episode(tmp_path):
    """``MemoryCue-v0`` (docs/memory.md's task) draws itself, so ``rljax eval --video`` records it: the
    states of an episode played by :func:`video.rollout_states`, one distinct picture per step."""
    env, params = rljax.make("MemoryCue-v0", num_cues=3)
    draw = video.frame_drawer(env, params)
    from envs.memory import CUE_COLORS
    act = lambda obs, key: jax.numpy.int32(0)  # noqa: E731 - any action: the drawing is under test
    states, _, dones = jax.jit(lambda k: video.rollout_states(env, params, act, k, params.delay + 2))(
        jax.random.key(1))
    assert np.asarray(dones)[-1] and not np.asarray(dones)[:-1].any()
    frames = draw([jax.tree.map(lambda x, i=i: x[i], states) for i in range(params.delay + 2)])
    assert {f.shape for f in frames} == {(160, 480, 3)} and frames[0].dtype == np.uint8
    assert len({f.tobytes() for f in frames}) == len(frames), "the current step moves along the timeline"
    cue = int(np.asarray(states.cue)[0])
    centre = lambda f: tuple(f[160 - 50, 240])  # noqa: E731 - the middle of what the agent sees (y up)
    assert centre(frames[0]) == CUE_COLORS[cue] and centre(frames[1]) == (225, 225, 225)
    assert centre(frames[-1]) == (0, 0, 0), "the query's disc"
    other = env.render(jax.tree.map(lambda x: x[0], states).replace(cue=jax.numpy.int32((cue + 1) % 3)), params)
    assert (other != frames[0]).any()
    assert env.render_fps == 4
    video.write_gif(frames, tmp_path / "memory.gif", env.render_fps)


def test_an_env_without_a_renderer_is_refused_naming_it():
    env, params = rljax.make("ProbeTwoStep-v0")
    with pytest.raises(video.NotDrawableError, match="ProbeTwoStep-v0.*cannot be drawn.*render"):
        video.frame_drawer(env, params)


def test_gymnax_minatar_is_drawn_by_gymnax_visualiser():
    env, params = rljax.make("gymnax/Breakout-MinAtar")
    _, state = env.reset(jax.random.key(0), params)
    frames = video.frame_drawer(env, params)([state, state])
    assert len(frames) == 2 and frames[0].dtype == np.uint8 and frames[0].ndim == 3 and frames[0].shape[-1] == 3


def test_gymnax_classic_control_needs_pygame_or_says_so():
    import importlib.util

    env, params = rljax.make("gymnax/CartPole-v1")
    if importlib.util.find_spec("pygame") is None:
        with pytest.raises(video.NotDrawableError, match="pygame"):
            video.frame_drawer(env, params)
    else:
        _, state = env.reset(jax.random.key(0), params)
        assert video.frame_drawer(env, params)([state])[0].ndim == 3


# Slow: by default the memoryless video tests above (the rollout a video plays) and tests/integration/test_memory.py's
# recurrent policies acting with their state stand for it.
@pytest.mark.slow
def test_a_recurrent_policy_plays_its_video_episode_with_its_memory_as_evaluate_does(tmp_path):
    from rljax.agents.ppo import PPOConfig
    from rljax.policy.evaluate import evaluate

    config = PPOConfig(memory="gru", memory_size=8, hidden_sizes=(16,), num_envs=4, num_steps=32, num_minibatches=2,
                       num_epochs=2, total_timesteps=4 * 32 * 6, updates_per_chunk=6, learning_rate=3e-3)
    rljax.train(config, options=rljax.RunOptions(run_dir=tmp_path / "run", quiet=True))
    policy = rljax.load(tmp_path / "run")
    lengths = evaluate(policy, 4, seed=5).lengths
    blank = lambda states: [np.zeros((2, 2, 3), np.uint8)] * len(states)  # noqa: E731 - the drawing is not under test
    for i in range(4):  # the video of episode i is evaluate's episode i, step for step
        frames = video.episode_frames(policy, jax.random.key(5), batch=4, index=i, draw=blank)
        assert frames.length == int(lengths[i])
