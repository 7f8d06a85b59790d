"""Videos during training: a GIF of one greedy episode every ``video_interval`` env steps.

:class:`Video` is the boundary hook behind ``RunOptions.video_interval`` (``--video-interval N``).
After each chunk that reaches a multiple of ``N`` env steps, and after the last chunk, it plays one
greedy episode of every member's current policy (:func:`rljax.policy.video.episode_frames`), writes
it to ``RUN_DIR/videos/<env_steps>.gif`` (a sweep's member: ``RUN_DIR/members/<name>/videos/``) and
adds it to tensorboard as an animated image (tag ``video/greedy``). The env must draw itself: an env
that cannot be drawn is refused when the run starts, before anything is compiled.

The episodes draw from a key of their own, ``fold_in(fold_in(key(seed), VIDEO_STREAM), chunk)``,
that no training key uses, and only read the train state: a run is bit for bit the same with or
without videos. The cadence is a function of the env steps alone, so a resumed run goes on with it
(a chunk replayed after a resume writes the same file again). Drawing the frames takes the host a
second or so per video (CartPole, 500 frames); it is counted in ``time/eval_s``.
"""

from __future__ import annotations

import pathlib
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rljax.training.hooks.base import Hook, Row, Run

__all__ = ["VIDEO_STREAM", "VIDEO_TAG", "Video", "video_due"]

VIDEO_STREAM = 0x76696465
"""Folded into the seed's key for video keys (``"vide"`` in ASCII): a stream no training key uses."""

VIDEO_TAG = "video/greedy"
"""The tensorboard tag of the videos."""


def video_due(env_steps_before: int, env_steps_after: int, interval: int) -> bool:
    """Whether a chunk that took the run from ``env_steps_before`` to ``env_steps_after`` env steps
    reached a multiple of ``interval`` (> 0)."""
    return env_steps_after // interval > env_steps_before // interval


class Video(Hook):
    """The boundary hook that records videos of the greedy policy (see the module docstring).

    Args:
        program: the run's :class:`rljax.training.program.Program`.
        interval: env steps between videos (``RunOptions.video_interval``, > 0).
        run_dir: the run directory; None (a process other than the leader) plays nothing, but still
            says which chunks are due, so that every process launches the same chunks ahead.

    Raises:
        rljax.policy.video.NotDrawableError: the env cannot be drawn (the message names it and what
            would draw it).
    """

    def __init__(self, program: Any, interval: int, run_dir: Any):
        from rljax.policy.video import NotDrawableError, frame_drawer

        self.program, self.interval = program, int(interval)
        self.run_dir = None if run_dir is None else pathlib.Path(run_dir)
        try:  # the base params: a sweep member's own draw its episodes (record)
            frame_drawer(program.env, program.env_params)
        except NotDrawableError as err:
            raise NotDrawableError(f"video_interval={interval} (--video-interval) needs an env that can be drawn: "
                                   f"{err}") from None
        from rljax.policy.evaluate import MemberInputs

        self._inputs = MemberInputs(program)
        self._base = [jax.random.fold_in(jax.random.key(int(seed)), VIDEO_STREAM) for seed in program.seeds]

    def _steps(self, run: Run, chunk_index: int) -> int:
        """The env steps at the end of chunk ``chunk_index``."""
        return (chunk_index + 1) * run.plan.updates_per_chunk * run.plan.env_steps_per_update

    def due(self, run: Run, chunk_index: int, last: bool) -> bool:
        """A chunk is recorded when it reaches a multiple of ``interval`` env steps, or is the last."""
        per_chunk = run.plan.updates_per_chunk * run.plan.env_steps_per_update
        after = self._steps(run, chunk_index)
        return last or video_due(after - per_chunk, after, self.interval)

    def record(self, run: Run, chunk_index: int, rows: list[Row]) -> None:
        """Plays, draws and writes each member's greedy episode of chunk ``chunk_index`` (when due)."""
        if run.ahead is not None or not self.due(run, chunk_index, chunk_index == run.plan.num_chunks - 1):
            return  # (never both: a due chunk is not launched ahead of)
        from rljax.policy.trained import Policy
        from rljax.policy.video import DEFAULT_FPS, episode_frames, write_gif

        t0 = time.perf_counter()
        policy_params, env_params = self._inputs(run.state)  # every process: it gathers over them
        if self.run_dir is None:
            return
        steps = self._steps(run, chunk_index)
        fps = getattr(self.program.env, "render_fps", DEFAULT_FPS)
        for i, name in enumerate(self.program.names):
            policy = Policy(agent=self.program.agent, params=jax.tree.map(lambda x, i=i: x[i], policy_params),
                            config=self.program.configs[i], env=self.program.env,
                            env_params=jax.tree.map(lambda x, i=i: x[i], env_params), step=steps)
            key = jax.random.fold_in(self._base[i], jnp.uint32(chunk_index))
            episode = episode_frames(policy, key)  # drawn with the member's env params
            folder = (self.run_dir / "members" / name if self.program.isolated else self.run_dir) / "videos"
            folder.mkdir(parents=True, exist_ok=True)
            path = write_gif(episode.frames, folder / f"{steps}.gif", fps)
            if run.tracking is not None:
                height, width = np.asarray(episode.frames[0]).shape[:2]
                run.tracking.add_image(i, VIDEO_TAG, path.read_bytes(), height, width, steps)
        run.timings["eval_s"] = run.timings.get("eval_s", 0.0) + time.perf_counter() - t0
