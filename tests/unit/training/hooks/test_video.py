"""Videos during training (:mod:`rljax.training.hooks.video`): the cadence, the files and tensorboard
images a run writes, a training that is bit for bit the same with videos as without, a resume that
goes on with them, and a non-drawing env refused before anything is compiled."""

from __future__ import annotations

import pytest

import rljax
from rljax.agents.ppo import PPOConfig
from rljax.policy.video import NotDrawableError
from rljax.training.hooks.video import VIDEO_TAG, video_due
from tests.support.runs import PPO_SMALL, assert_same_bits, strip, tb_summaries

# PPO_SMALL: 6 chunks of 2 updates x 8 envs x 16 steps = 256 env steps; 1,536 in all.
STEPS = [256 * (c + 1) for c in range(6)]
EVERY = 512


def _gif_frames(path) -> int:
    """The frames of a GIF (its image descriptors), read with Pillow."""
    from PIL import Image

    with Image.open(path) as image:
        return image.n_frames


def _images(tb_dir) -> list[tuple[int, str, bytes]]:
    """``(step, tag, encoded picture)`` of every image summary in ``tb_dir``'s event files."""
    return [(step, v.tag, v.image.encoded_image_string) for step, v in tb_summaries(tb_dir) if v.HasField("image")]


def test_a_video_is_due_when_a_chunk_reaches_a_multiple_of_the_interval():
    assert [video_due(s - 256, s, EVERY) for s in STEPS] == [False, True, False, True, False, True]
    assert video_due(0, 300, 100) and not video_due(301, 399, 100) and video_due(399, 400, 100)
    assert video_due(90, 1000, 1000) and not video_due(1000, 1999, 1000)


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """PPO_SMALL without videos."""
    return rljax.train(PPO_SMALL, options=rljax.RunOptions(run_dir=tmp_path_factory.mktemp("plain") / "run",
                                                           quiet=True))


def test_videos_are_written_and_training_is_bit_identical_without_them(plain, tmp_path):
    run = tmp_path / "run"
    result = rljax.train(PPO_SMALL, options=rljax.RunOptions(run_dir=run, quiet=True, video_interval=EVERY))
    assert sorted(p.name for p in (run / "videos").iterdir()) == ["1024.gif", "1536.gif", "512.gif"]
    assert all(_gif_frames(run / "videos" / f"{s}.gif") >= 1 for s in (512, 1024, 1536))
    images = _images(run / "tb")
    assert [(step, tag) for step, tag, _ in images] == [(512, VIDEO_TAG), (1024, VIDEO_TAG), (1536, VIDEO_TAG)]
    assert images[-1][2] == (run / "videos" / "1536.gif").read_bytes()
    assert_same_bits(result.state, plain.state)
    assert strip(result.rows) == strip(plain.rows)


# Slow: by default test_videos_are_written_and_training_is_bit_identical_without_them stands for it (the hook's
# state is the run's own; resumes in general: tests/unit/store/test_checkpoint.py).
@pytest.mark.slow
def test_a_resumed_run_goes_on_with_its_videos(plain, tmp_path):
    run = tmp_path / "run"
    options = rljax.RunOptions(run_dir=run, quiet=True, video_interval=EVERY, checkpoint_every=1)
    part = rljax.train(PPO_SMALL, options=options.replace(on_chunk=lambda c, state, row: c == 2))
    assert part.preempted == "on_chunk" and sorted(p.name for p in (run / "videos").iterdir()) == ["512.gif"]
    result = rljax.train(PPO_SMALL, options=options.replace(resume=True))
    assert sorted(p.name for p in (run / "videos").iterdir()) == ["1024.gif", "1536.gif", "512.gif"]
    assert_same_bits(result.state, plain.state)


def test_an_env_that_cannot_be_drawn_is_refused_at_the_start(tmp_path):
    config = PPOConfig(env="ProbeConstantReward-v0", total_timesteps=256, num_envs=8, num_steps=16,
                       hidden_sizes=(16,))
    with pytest.raises(NotDrawableError, match=r"video_interval=100 \(--video-interval\) needs an env that can be "
                                               r"drawn: env 'ProbeConstantReward-v0' .* cannot be drawn"):
        rljax.train(config, options=rljax.RunOptions(run_dir=tmp_path / "run", quiet=True, video_interval=100))
    assert not (tmp_path / "run").exists()  # a fresh run directory that failed to start is removed


@pytest.mark.parametrize("kwargs, message", [
    (dict(video_interval=-1), r"video_interval must be an integer >= 0 .* got -1"),
    (dict(video_interval=1.5), r"video_interval must be an integer >= 0 .* got 1.5"),
    (dict(video_interval=100, run_dir=None), r"video_interval=100 needs a run_dir"),
])
def test_bad_video_intervals_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        rljax.RunOptions(**{"run_dir": "runs/x", **kwargs})


# Slow: by default test_videos_are_written_and_training_is_bit_identical_without_them stands for it.
@pytest.mark.slow
def test_each_member_of_a_sweep_gets_its_own_videos(tmp_path):
    from rljax.training.sweep import SweepSpec, run_sweep

    _, members, _ = run_sweep(PPO_SMALL, SweepSpec(seeds=(0, 1)), run_dir=tmp_path / "sw", quiet=True, plots=False,
                              checkpoints=False, video_interval=768)
    for member in members:
        folder = tmp_path / "sw" / "members" / member.name
        assert sorted(p.name for p in (folder / "videos").iterdir()) == ["1536.gif", "768.gif"]
        assert [(step, tag) for step, tag, _ in _images(folder / "tb")] == [(768, VIDEO_TAG), (1536, VIDEO_TAG)]
    assert not (tmp_path / "sw" / "videos").exists()
