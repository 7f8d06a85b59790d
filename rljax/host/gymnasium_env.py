"""Gymnasium vector envs as a batch of host envs (``--env gymnasium/<id>``).

:class:`GymnasiumEnv` steps ``N`` copies of a registered Gymnasium env in this process
(``asynchronous=False``: ``SyncVectorEnv``) or in ``N`` worker processes (``AsyncVectorEnv``, started
with ``spawn``: a forked worker would inherit JAX's threads), with
Gymnasium's same-step auto-reset, so a step's ``obs`` already belongs to the next episode where one
ended and ``final_obs`` holds the observation the step reached (:mod:`rljax.host.base`). Gymnasium's
``terminated`` and ``truncated`` (its ``TimeLimit``) pass through unchanged.

Spaces: a Gymnasium ``Box`` becomes an :class:`rljax.env.Box` of the same dtype and bounds, a
``Discrete(n)`` (start 0) an :class:`rljax.env.Discrete`; other spaces are refused with the space named.
float64 Boxes become float32 ones (what JAX computes in): observations are cast, actions cast back to
the env's dtype before stepping. Rewards are float32.

Made with ``render=True`` (an env with an ``rgb_array`` render mode), :meth:`GymnasiumEnv.render`
draws every copy's current state, uint8 ``[N, H, W, 3]``: how a host-env policy's video is drawn.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rljax.env import Box, Discrete
from rljax.host.base import HostSpec, HostStep, check_actions, check_batch

__all__ = ["GymnasiumEnv", "host_space"]


def host_space(space: Any, what: str) -> Any:
    """The rljax space of a Gymnasium ``Box`` or ``Discrete`` (start 0); a ValueError for any other."""
    import gymnasium

    if isinstance(space, gymnasium.spaces.Discrete):
        if int(space.start) != 0:
            raise ValueError(f"{what} {space} starts at {space.start}: rljax's Discrete actions are 0..n-1 "
                             f"(wrap the env to shift them)")
        return Discrete(int(space.n), dtype=np.int64 if space.dtype == np.int64 else np.int32)
    if isinstance(space, gymnasium.spaces.Box):
        dtype = np.float32 if space.dtype == np.float64 else space.dtype  # JAX computes in float32
        return Box(np.asarray(space.low, dtype), np.asarray(space.high, dtype), space.shape, dtype=dtype)
    raise ValueError(f"{what} {space} ({type(space).__name__}) is not supported on the host path: use an env "
                     f"with a Box or Discrete space, or flatten it with a Gymnasium wrapper")


def _render_modes(env_id: str) -> list[str]:
    """The render modes a registered Gymnasium env declares (its class's ``metadata``), without making it."""
    import gymnasium

    entry = gymnasium.spec(env_id).entry_point
    cls = gymnasium.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry
    return list(getattr(cls, "metadata", {}).get("render_modes", []))


class GymnasiumEnv:
    """``N`` copies of Gymnasium env ``env_id`` (see the module docstring).

    Args:
        env_id: a registered Gymnasium id, e.g. ``"CartPole-v1"``.
        num_envs: N.
        asynchronous: step the copies in worker processes instead of this one.
        render: make the copies with ``render_mode="rgb_array"`` so that :meth:`render` draws them
            (a ``ValueError`` naming the env's render modes when it has no ``rgb_array`` one).
        **make_kwargs: passed to ``gymnasium.make_vec`` for every copy (``max_episode_steps=...``,
            the env's own keyword arguments).
    """

    def __init__(self, env_id: str, num_envs: int, asynchronous: bool = False, render: bool = False,
                 **make_kwargs: Any):
        import gymnasium
        from gymnasium.vector import AutoresetMode

        if env_id not in gymnasium.registry:
            import difflib

            close = difflib.get_close_matches(env_id, list(gymnasium.registry), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else " (is the package that registers it imported?)"
            raise ValueError(f"unknown Gymnasium env {env_id!r}{hint}")
        vector_kwargs: dict[str, Any] = {"autoreset_mode": AutoresetMode.SAME_STEP}
        if asynchronous:  # workers started by fork would inherit JAX's threads; spawn starts them clean
            vector_kwargs["context"] = "spawn"
        mode = "async" if asynchronous else "sync"
        if render:
            modes = _render_modes(env_id)
            if "rgb_array" not in modes:
                raise ValueError(f"gymnasium/{env_id} cannot be drawn: it has no rgb_array render mode (its render "
                                 f"modes: {', '.join(map(str, modes)) or 'none'})")
            make_kwargs = {**make_kwargs, "render_mode": "rgb_array"}
        self._env = gymnasium.make_vec(env_id, num_envs=num_envs, vectorization_mode=mode, vector_kwargs=vector_kwargs,
                                       **make_kwargs)
        try:
            self.spec = HostSpec(num_envs,
                                 host_space(self._env.single_observation_space, f"{env_id}'s observation space"),
                                 host_space(self._env.single_action_space, f"{env_id}'s action space"))
        except Exception:
            self._env.close()
            raise
        self.env_id = env_id
        self.render_fps = self._env.metadata.get("render_fps")  # frames per second its pictures are meant for
        self._action_dtype = self._env.single_action_space.dtype

    def reset(self, seed: int) -> np.ndarray:
        """Starts every env, env ``i`` seeded ``seed + i``; returns ``obs [N, *obs_shape]``."""
        obs, _ = self._env.reset(seed=[int(seed) + i for i in range(self.spec.num_envs)])
        return np.asarray(obs, self.spec.obs_dtype)

    def step(self, actions: np.ndarray) -> HostStep:
        actions = check_actions(self.spec, np.asarray(actions, self.spec.action_dtype))
        obs, reward, terminated, truncated, info = self._env.step(actions.astype(self._action_dtype, copy=False))
        obs = np.asarray(obs, self.spec.obs_dtype)
        final_obs = obs.copy()
        if "_final_obs" in info:
            for i in np.flatnonzero(info["_final_obs"]):
                final_obs[i] = info["final_obs"][i]
        return check_batch(self.spec, HostStep(obs, np.asarray(reward, np.float32), np.asarray(terminated, np.bool_),
                                               np.asarray(truncated, np.bool_), final_obs))

    def render(self) -> np.ndarray:
        """Every copy's picture of its current state, uint8 ``[N, H, W, 3]`` (an env made with
        ``render=True``; a ``ValueError`` otherwise)."""
        if self._env.render_mode != "rgb_array":
            raise ValueError(f"gymnasium/{self.env_id} was made without render=True, so it draws no frames")
        frames = np.stack([np.asarray(f) for f in self._env.render()])
        if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3:
            raise ValueError(f"gymnasium/{self.env_id} rendered {frames.dtype} {frames.shape[1:]} frames; a frame is "
                             f"uint8 [H, W, 3]")
        return frames

    def get_state(self) -> bytes | None:
        """The sub-envs' whole state (pickled), for a bit-exact resume of a synchronous run; None
        with ``asynchronous=True`` (the state lives in the worker processes)."""
        if not hasattr(self._env, "envs"):
            return None
        import pickle

        return pickle.dumps(self._env.envs)

    def set_state(self, state: bytes) -> None:
        """Puts back a state :meth:`get_state` returned (a run directory's own checkpoint: unpickled,
        so only ever from a trusted file)."""
        import pickle

        envs = pickle.loads(state)  # noqa: S301 - written by get_state into the run's own checkpoint
        if len(envs) != self.spec.num_envs:
            raise ValueError(f"the saved state holds {len(envs)} envs, this batch {self.spec.num_envs}")
        self._env.envs = envs

    def close(self) -> None:
        self._env.close()

    def __repr__(self) -> str:
        return f"GymnasiumEnv({self.env_id!r}, num_envs={self.spec.num_envs})"
