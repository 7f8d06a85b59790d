"""EnvPool batches as host envs (``--env envpool/<id>``; ``pip install -e ".[envpool]"``).

EnvPool steps a batch of C++ simulators (Atari through its ALE, MuJoCo, classic control, ...) in its
own thread pool. :class:`EnvPoolEnv` runs it synchronously (``batch_size = num_envs``) through its
Gymnasium interface and gives it rljax's contract (:mod:`rljax.host.base`):

- **Same-step auto-reset.** EnvPool resets an env on the step *after* its episode ended (that step
  ignores its action and returns the first observation with reward 0). Here the step that ends an
  episode resets those envs at once (EnvPool's ``reset(env_ids)``), so ``obs`` already belongs to
  the next episode and ``final_obs`` holds the one the step reached; no transition ever crosses an
  episode boundary. ``terminated`` and ``truncated`` (EnvPool's time limit, ``max_episode_steps``)
  pass through unchanged.
- **Seeds.** EnvPool seeds its envs when the pool is made (env ``i`` from ``seed + i``), so
  ``reset(seed)`` makes the pool again with ``seed`` (unless it was just made with it): the same
  seed always starts the same episodes.
- **Images.** A 3-axis observation (Atari's stacked frames, ``[C, H, W]``) is handed on as
  ``[H, W, C]``, the layout of rljax's CNN encoder (``channels_last=False`` keeps EnvPool's).
- Spaces as for Gymnasium envs (:func:`rljax.host.gymnasium_env.host_space`); rewards float32.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rljax.env import Box
from rljax.host.base import HostSpec, HostStep, check_actions, check_batch
from rljax.host.gymnasium_env import host_space

__all__ = ["EnvPoolEnv"]


def _envpool() -> Any:
    try:
        import envpool
    except ImportError:
        raise ImportError('envpool/<id> needs EnvPool: pip install -e ".[envpool]"') from None
    return envpool


class EnvPoolEnv:
    """``N`` EnvPool envs of task ``task_id`` (see the module docstring).

    Args:
        task_id: an EnvPool task, e.g. ``"Pong-v5"``, ``"CartPole-v1"`` (``envpool.list_all_envs()``).
        num_envs: N.
        channels_last: hand 3-axis observations on as ``[H, W, C]``.
        **make_kwargs: passed to ``envpool.make`` (``max_episode_steps``, ``episodic_life``,
            ``num_threads``, ...).
    """

    def __init__(self, task_id: str, num_envs: int, channels_last: bool = True, **make_kwargs: Any):
        envpool = _envpool()
        known = envpool.list_all_envs()
        if task_id not in known:
            import difflib

            close = difflib.get_close_matches(task_id, known, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else " (envpool.list_all_envs() lists them)"
            raise ValueError(f"unknown EnvPool task {task_id!r}{hint}")
        for reserved in ("env_type", "num_envs", "batch_size", "seed"):
            if reserved in make_kwargs:
                raise ValueError(f"{reserved}={make_kwargs[reserved]!r}: set by EnvPoolEnv itself")
        self.task_id, self._kwargs, self._seed, self._fresh = task_id, make_kwargs, 0, True
        self._num_envs = num_envs
        self._env = self._make(0)
        try:
            obs_space = host_space(self._env.observation_space, f"{task_id}'s observation space")
            self._transpose = channels_last and len(obs_space.shape) == 3
            if self._transpose:
                obs_space = Box(np.moveaxis(np.broadcast_to(obs_space.low, obs_space.shape), 0, -1),
                                np.moveaxis(np.broadcast_to(obs_space.high, obs_space.shape), 0, -1),
                                (*obs_space.shape[1:], obs_space.shape[0]), dtype=obs_space.dtype)
            self.spec = HostSpec(num_envs, obs_space, host_space(self._env.action_space, f"{task_id}'s action space"))
        except Exception:
            self._env.close()
            raise
        self._action_dtype = self._env.action_space.dtype

    def _make(self, seed: int) -> Any:
        return _envpool().make(self.task_id, env_type="gymnasium", num_envs=self._num_envs, batch_size=self._num_envs,
                               seed=int(seed), **self._kwargs)

    def _obs(self, obs: Any) -> np.ndarray:
        obs = np.asarray(obs, self.spec.obs_dtype)
        return np.ascontiguousarray(np.moveaxis(obs, 1, -1)) if self._transpose else obs

    def reset(self, seed: int) -> np.ndarray:
        """Starts every env, env ``i`` seeded ``seed + i`` (a new pool unless this one was just made with
        ``seed``, so the same seed always gives the same episodes); returns ``obs``."""
        if not (self._fresh and int(seed) == self._seed):
            self._env.close()
            self._env, self._seed = self._make(seed), int(seed)
        self._fresh = False
        obs, _ = self._env.reset()
        return self._obs(obs)

    def step(self, actions: np.ndarray) -> HostStep:
        actions = check_actions(self.spec, np.asarray(actions, self.spec.action_dtype))
        obs, reward, terminated, truncated, _ = self._env.step(actions.astype(self._action_dtype, copy=False))
        final_obs = self._obs(obs)
        terminated, truncated = np.asarray(terminated, np.bool_), np.asarray(truncated, np.bool_)
        obs = final_obs
        ended = np.flatnonzero(terminated | truncated)
        if ended.size:  # same-step auto-reset: EnvPool would reset them on the next step instead
            first, _ = self._env.reset(ended.astype(np.int32))
            obs = final_obs.copy()
            obs[ended] = self._obs(first)
        return check_batch(self.spec, HostStep(obs, np.asarray(reward, np.float32), terminated, truncated, final_obs))

    def close(self) -> None:
        self._env.close()

    def __repr__(self) -> str:
        return f"EnvPoolEnv({self.task_id!r}, num_envs={self.spec.num_envs})"
