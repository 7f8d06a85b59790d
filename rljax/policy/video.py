"""Videos of one episode: the states of a policy's episode, drawn on the host, written as a GIF.

* :func:`frame_drawer` finds how to draw an env, or raises :class:`NotDrawableError` naming what
  would be needed: an env with a ``render(state, params) -> uint8 [H, W, 3]`` method (rljax's
  own classic-control envs) draws itself; a gymnax env is drawn by gymnax's visualiser
  (``gymnax.visualize``: its classic-control pictures need pygame, MinAtar and the other grids
  need only matplotlib).
* :func:`rollout_states` plays one episode with ``act`` in a ``lax.scan`` (pure, jittable) and
  collects the env state before every step; :func:`episode_frames` runs it jitted for a policy and
  draws the frames up to the episode's end.
* :func:`write_gif` writes frames as a looping GIF with Pillow, atomically.
* A policy trained on host envs is drawn by the host env itself: :func:`host_renderer` makes one
  env that draws (a Gymnasium env with an ``rgb_array`` render mode; any other raises
  :class:`NotDrawableError` saying so), and :func:`host_episode_frames` plays one episode in it on
  the host, the policy jitted, its picture taken before every step.

Why the last frame is the last state *before* the episode ended: the env auto-resets, so the
state a done step returns belongs to the next episode.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import pathlib
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rljax.core.rollout import reset_memory

from rljax.policy.evaluate import DEFAULT_MAX_STEPS, host_act, max_episode_steps

__all__ = ["NotDrawableError", "EpisodeFrames", "frame_drawer", "rollout_states", "episode_frames", "host_renderer",
           "host_episode_frames", "write_gif", "DEFAULT_FPS", "MAX_VIDEO_STEPS"]

DEFAULT_FPS = 30
"""Frames per second of an env that does not say (an env may set a ``render_fps`` attribute)."""
MAX_VIDEO_STEPS = 10_000
"""The most steps a video plays (an env without a time limit could otherwise run on for long)."""

# Names gymnax's Visualizer draws with matplotlib alone (vis_minatar, vis_catch, vis_circle, vis_maze).
_GYMNAX_MATPLOTLIB = ("Asterix-MinAtar", "Breakout-MinAtar", "Freeway-MinAtar", "Seaquest-MinAtar",
                      "SpaceInvaders-MinAtar", "Pong-misc", "Catch-bsuite", "PointRobot-misc", "MetaMaze-misc",
                      "FourRooms-misc")
# Names gymnax draws through Gymnasium's classic-control renderer (pygame).
_GYMNAX_GYMNASIUM = ("Acrobot-v1", "CartPole-v1", "Pendulum-v1", "MountainCar-v0", "MountainCarContinuous-v0")


class NotDrawableError(ValueError):
    """The env cannot be drawn; the message names it and what would draw it."""


class EpisodeFrames(NamedTuple):
    """One drawn episode.

    Attributes:
        frames: ``T`` uint8 ``[H, W, 3]`` pictures, one per state before each step.
        episode_return: the episode's undiscounted return (a float).
        length: ``T``, the steps the episode took.
        finished: whether it ended (terminated or truncated) within the steps played.
    """

    frames: list[np.ndarray]
    episode_return: float
    length: int
    finished: bool


def _is_gymnax(env: Any) -> bool:
    return type(env).__module__.split(".")[0] == "gymnax"


def frame_drawer(env: Any, env_params: Any) -> Callable[[Sequence[Any]], list[np.ndarray]]:
    """How to draw ``env``: a function from a list of unbatched states to their pictures.

    Call it before any costly work: it raises at once for an env that cannot be drawn.

    Args:
        env: an env object (rljax or gymnax contract), unbatched and unwrapped.
        env_params: the params the states were played with (drawn sizes follow them).

    Returns:
        ``draw(states) -> [uint8 [H, W, 3], ...]``, one picture per state.

    Raises:
        NotDrawableError: the env has no ``render`` method and gymnax's visualiser cannot draw it
            (or needs pygame, which is not installed).
    """
    # An rljax env that is a gymnax env with another observation type (envs.minatar) is drawn as
    # the gymnax env it holds: the states are that env's.
    env = getattr(env, "gymnax_env", env)
    render = getattr(env, "render", None)
    if callable(render):
        return lambda states: [_check_frame(render(s, env_params), env) for s in states]
    name = getattr(env, "name", type(env).__name__)
    if _is_gymnax(env) and name in _GYMNAX_GYMNASIUM:
        if importlib.util.find_spec("pygame") is None:
            raise NotDrawableError(
                f"gymnax's {name} is drawn by Gymnasium's classic-control renderer, which needs pygame "
                f"(pip install pygame; not installed here); rljax's own {name} (env {name!r}, not "
                f"'gymnax/{name}') draws itself")
        from gymnax.visualize import vis_gym

        return lambda states: [np.asarray(vis_gym.render_gym_frame(name, s, env_params), np.uint8) for s in states]
    if _is_gymnax(env) and name in _GYMNAX_MATPLOTLIB:
        return functools.partial(_gymnax_matplotlib_frames, env, env_params)
    raise NotDrawableError(
        f"env {name!r} ({type(env).__module__}.{type(env).__name__}) cannot be drawn: it has no "
        f"render(state, params) method, and gymnax's visualiser draws only gymnax's "
        f"{', '.join(_GYMNAX_GYMNASIUM + _GYMNAX_MATPLOTLIB)}")


def _check_frame(frame: Any, env: Any) -> np.ndarray:
    frame = np.asarray(frame)
    if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[-1] != 3:
        raise TypeError(f"{type(env).__name__}.render returned {frame.dtype} {frame.shape}; a frame must be uint8 "
                        f"[H, W, 3]")
    return frame


def _gymnax_matplotlib_frames(env: Any, env_params: Any, states: Sequence[Any]) -> list[np.ndarray]:
    """Frames from gymnax's ``Visualizer`` (a matplotlib figure, drawn once per state, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from gymnax.visualize import Visualizer

    vis = Visualizer(env, env_params, list(states))
    try:
        vis.init()
        frames = []
        for i in range(len(states)):
            vis.update(i)
            vis.fig.canvas.draw()
            frames.append(np.array(vis.fig.canvas.buffer_rgba())[..., :3])
        return frames
    finally:
        plt.close(vis.fig)


def rollout_states(env: Any, env_params: Any, act: Callable[..., Any], key: Any, max_steps: int,
                   batch: int = 1, index: int = 0, memory: Any = None) -> tuple[Any, Any, Any]:
    """Plays ``max_steps`` steps of one env from a reset and keeps what a video needs. Pure, jittable.

    The keys are those :func:`rljax.policy.evaluate.run_episodes` gives env ``index`` of ``batch`` envs
    from the same ``key``, so with a deterministic policy this is that evaluation's episode
    ``index`` (a sampling policy draws its actions for a batch at once, so its episode differs).

    Args:
        env: an unbatched env (rljax or gymnax contract).
        env_params: its params.
        act: ``act(obs [*obs_shape], key) -> action`` for one observation; with ``memory``,
            ``act(obs, key, memory) -> (action, memory)``.
        key: a PRNG key (reset, actions and steps draw from it).
        max_steps: scan length (a Python int); the first episode must end within it to be whole.
        batch: the evaluation's number of episodes whose keys are reproduced.
        index: which of them this is, ``0 <= index < batch``.
        memory: a recurrent policy's memory at an episode's start (zeros, for one observation),
            carried from step to step and zeroed where an episode ends; None for a memoryless ``act``.

    Returns:
        ``(states, rewards, dones)``: the env state *before* each step, every leaf with a leading
        ``[max_steps]`` axis; float32 ``[max_steps]``; bool ``[max_steps]`` (``terminated |
        truncated`` of each step). Steps after the first done belong to later episodes. In a
        multi-agent env (``act`` given the env's ``[N, ...]`` observation, returning ``[N, ...]``
        actions) the reward is the team's (the sum over agents) and a step is done when every agent is.
    """
    reset_key, key = jax.random.split(key)
    obs, state = env.reset(jax.random.split(reset_key, batch)[index], env_params)

    def step(carry, _):
        obs, state, key, mem = carry
        key, act_key, step_key = jax.random.split(key, 3)
        if memory is None:
            action = act(obs, act_key)
        else:
            action, mem = act(obs, act_key, mem)
        next_obs, next_state, reward, terminated, truncated, _ = env.step(
            jax.random.split(step_key, batch)[index], state, action, env_params)
        done = jnp.logical_or(terminated, truncated)
        mem = reset_memory(mem, done)
        reward = jnp.asarray(reward, jnp.float32)
        if done.ndim:  # a multi-agent env: the team's reward, and the episode ends when every agent is done
            reward, done = jnp.sum(reward), jnp.all(done)
        return (next_obs, next_state, key, mem), (state, reward, done)

    init = (obs, state, key, () if memory is None else memory)
    _, (states, rewards, dones) = jax.lax.scan(step, init, None, length=max_steps)
    return states, rewards, dones


@functools.lru_cache(maxsize=16)
def _compiled_rollout(agent: Any, env: Any, max_steps: int, deterministic: bool, batch: int,
                      index: int) -> Callable[[Any, Any, Any], tuple[Any, Any, Any]]:
    """``jit((policy_params, env_params, key) -> rollout_states(...))`` for an agent's policy (in a
    multi-agent env, acting on the agents' rows of :class:`rljax.core.wrappers.AgentBatch`)."""
    from rljax.env import num_agents

    if num_agents(env):
        from rljax.agents.base import agent_rows
        from rljax.core.wrappers import AgentBatch, VecEnv

        stack = AgentBatch(VecEnv(env, 1), **agent_rows(agent.config))

        def team(policy_params: Any, env_params: Any, key: Any) -> tuple[Any, Any, Any]:
            def act(obs: Any, k: Any, memory: Any) -> tuple[Any, Any]:  # [N, ...] -> the N rows' actions
                rows = stack.rows(jax.tree.map(lambda x: x[None], obs))
                return agent.policy_step(policy_params, rows, memory, k, deterministic)
            return rollout_states(env, env_params, act, key, max_steps, batch, index,
                                  memory=agent.memory(num_agents(env)))
        return jax.jit(team)

    def rollout(policy_params: Any, env_params: Any, key: Any) -> tuple[Any, Any, Any]:
        def act(obs: Any, k: Any, memory: Any) -> tuple[Any, Any]:  # one observation, as a batch of one
            action, memory = agent.policy_step(policy_params, jax.tree.map(lambda x: x[None].astype(jnp.float32), obs),
                                               jax.tree.map(lambda m: m[None], memory), k, deterministic)
            return action[0], jax.tree.map(lambda m: m[0], memory)
        return rollout_states(env, env_params, act, key, max_steps, batch, index,
                              memory=jax.tree.map(lambda m: m[0], agent.memory(1)))
    return jax.jit(rollout)


def episode_frames(policy: Any, key: Any, *, env_params: Any = None, deterministic: bool = True,
                   max_steps: int | None = None, batch: int = 1, index: int = 0,
                   draw: Callable[[Sequence[Any]], list[np.ndarray]] | None = None) -> EpisodeFrames:
    """Plays one episode of ``policy`` (a jitted ``lax.scan``) and draws it on the host.

    Args:
        policy: an :class:`rljax.policy.trained.Policy`.
        key: a PRNG key; with ``batch``/``index`` (:func:`rollout_states`), the key given to
            :func:`rljax.policy.evaluate.evaluate`'s episodes (``jax.random.key(seed)``) replays its
            greedy episode ``index``.
        env_params: the params to play with; the policy's own when None.
        deterministic: act greedily (True) or sample the policy (False).
        max_steps: the most steps played; the env's time limit when None, at most
            :data:`MAX_VIDEO_STEPS`.
        batch: see :func:`rollout_states`.
        index: see :func:`rollout_states`.
        draw: a :func:`frame_drawer` result; made from the env when None.

    Returns:
        :class:`EpisodeFrames`: one frame per state before a step, up to and including the step
        that ended the episode (all ``max_steps`` frames if it did not end).
    """
    env_params = policy.env_params if env_params is None else env_params
    draw = draw or frame_drawer(policy.env, env_params)
    if max_steps is None:
        max_steps = min(max_episode_steps(env_params), MAX_VIDEO_STEPS)
    rollout = _compiled_rollout(policy.agent, policy.env, int(max_steps), bool(deterministic), int(batch),
                                int(index))
    states, rewards, dones = jax.device_get(rollout(policy.params, env_params, key))
    dones = np.asarray(dones)
    finished = bool(dones.any())
    length = int(np.argmax(dones)) + 1 if finished else int(max_steps)
    unbatched = [jax.tree.map(lambda x, i=i: x[i], states) for i in range(length)]
    return EpisodeFrames(draw(unbatched), float(np.asarray(rewards)[:length].sum()), length, finished)


def host_renderer(policy: Any) -> Any:
    """One host env of a host policy's kind that draws itself (``render() -> uint8 [1, H, W, 3]``),
    reset by :func:`host_episode_frames`; close it when done (:func:`host_episode_frames` does).

    Raises:
        NotDrawableError: the env cannot draw (an EnvPool batch, an env server, a Gymnasium env without
            an ``rgb_array`` render mode), naming it and why.
        ValueError: the policy's host env spaces came with no factory to make envs.
    """
    try:
        return policy.env.make(1, render=True)
    except ValueError as err:
        if "cannot be drawn" in str(err):
            raise NotDrawableError(str(err)) from None
        raise


def host_episode_frames(policy: Any, seed: int, *, deterministic: bool = True, max_steps: int | None = None,
                        envs: Any = None) -> EpisodeFrames:
    """Plays one episode of a host policy in one host env (seeded ``seed``) and takes its picture
    before every step: with a deterministic policy, the episode :func:`rljax.policy.evaluate.evaluate`
    with the same seed plays first.

    Args:
        policy: a :class:`rljax.policy.trained.Policy` of host envs.
        seed: the env's seed (and the policy's keys, ``fold_in(key(seed), t)`` at step ``t``).
        deterministic: act greedily (True) or sample the policy (False).
        max_steps: the most steps played; None: :data:`MAX_VIDEO_STEPS` (the env's own time limit
            ends most episodes sooner).
        envs: a :func:`host_renderer` result, closed here; made from the policy when None.

    Returns:
        :class:`EpisodeFrames`, one frame per state before a step.
    """
    envs = host_renderer(policy) if envs is None else envs
    max_steps = min(DEFAULT_MAX_STEPS, MAX_VIDEO_STEPS) if max_steps is None else int(max_steps)
    try:
        act = host_act(policy, seed, deterministic)
        obs, frames, total = envs.reset(int(seed)), [], 0.0
        for t in range(max_steps):
            frames.append(_check_frame(envs.render()[0], envs))
            step = envs.step(act(obs, t))
            total += float(step.reward[0])
            if step.terminated[0] or step.truncated[0]:
                return EpisodeFrames(frames, total, t + 1, True)
            obs = step.obs
        return EpisodeFrames(frames, total, max_steps, False)
    finally:
        envs.close()


def write_gif(frames: Sequence[np.ndarray], path: str | os.PathLike, fps: float = DEFAULT_FPS) -> pathlib.Path:
    """Writes ``frames`` as a looping GIF with Pillow, atomically (a temporary file, then ``os.replace``).

    Args:
        frames: uint8 ``[H, W, 3]`` pictures of one size, at least one.
        path: the GIF's path; its folder must exist.
        fps: frames per second (GIF delays are whole hundredths of a second, so it is rounded).
            Pillow merges identical consecutive frames into one longer one.

    Returns:
        The path written.
    """
    from PIL import Image

    if not len(frames):
        raise ValueError("write_gif needs at least one frame, got none")
    if not fps > 0:
        raise ValueError(f"fps must be positive, got {fps}")
    frames = [np.asarray(f, np.uint8) for f in frames]
    shapes = {f.shape for f in frames}
    if len(shapes) != 1 or frames[0].ndim != 3 or frames[0].shape[-1] != 3:
        raise ValueError(f"frames must be uint8 [H, W, 3] of one size; got shapes {sorted(shapes)}")
    # One palette for the whole GIF, from a sample of frames: Pillow's default (a palette per frame)
    # took 14 s for 500 CartPole frames, this takes about 1 s.
    sample = frames[::max(1, len(frames) // 16)]
    palette = Image.fromarray(np.concatenate(sample, axis=0)).quantize(colors=255, method=Image.Quantize.MEDIANCUT)
    images = [Image.fromarray(f).quantize(palette=palette, dither=Image.Dither.NONE) for f in frames]
    from rljax.policy.report import replace_into

    path = pathlib.Path(path)
    replace_into(path, lambda tmp: images[0].save(tmp, format="GIF", save_all=True, append_images=images[1:], loop=0,
                                                  optimize=False, duration=max(10, round(100 / fps) * 10)))
    return path
