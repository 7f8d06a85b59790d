"""A test env with non-vector observations: a 5 x 5 grid walk to the corner (4, 4).

``kind`` picks the observation: ``"grid"``, a float32 ``[5, 5]`` one-hot of the position;
``"image"``, uint8 ``[5, 5, 2]`` planes (the position, and its complement); ``"dict"``,
``{"image": uint8 [5, 5, 2], "vec": float32 [3] (row, column, time)}``. Actions are four moves
(``Discrete(4)``: right, left, down, up) or, with ``continuous``, a ``Box(-1, 1, (2,))`` step rounded
to {-1, 0, 1} per axis. Reaching (4, 4) terminates with reward 1; every other step pays 0; episodes
are truncated after ``max_steps_in_episode`` steps.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from rljax.env import Box, Discrete, EnvParams, EnvState, Environment

MOVES = jnp.array([[0, 1], [0, -1], [1, 0], [-1, 0]])


@struct.dataclass
class GridState(EnvState):
    pos: jax.Array
    time: jax.Array


@struct.dataclass
class GridParams(EnvParams):
    max_steps_in_episode: int = 20


class GridWalk(Environment[GridState, GridParams]):
    def __init__(self, kind: str = "dict", continuous: bool = False):
        if kind not in ("grid", "image", "dict"):
            raise ValueError(f"kind={kind!r}: use 'grid', 'image' or 'dict'")
        self.kind, self.continuous = kind, continuous

    @property
    def default_params(self) -> GridParams:
        return GridParams()

    def _obs(self, state: GridState):
        grid = jnp.zeros((5, 5), jnp.uint8).at[state.pos[0], state.pos[1]].set(1)
        if self.kind == "grid":
            return grid.astype(jnp.float32)
        image = jnp.stack([grid, 1 - grid], axis=-1)
        if self.kind == "image":
            return image
        return {"image": image, "vec": jnp.array([state.pos[0], state.pos[1], state.time], jnp.float32)}

    def reset_env(self, key, params):
        state = GridState(pos=jax.random.randint(key, (2,), 0, 4), time=jnp.int32(0))
        return self._obs(state), state

    def step_env(self, key, state, action, params):
        if self.continuous:
            move = jnp.clip(jnp.round(action), -1, 1).astype(jnp.int32)
        else:
            move = MOVES[action]
        pos = jnp.clip(state.pos + move, 0, 4)
        state = GridState(pos=pos, time=state.time + 1)
        done = jnp.all(pos == 4)
        return self._obs(state), state, jnp.where(done, 1.0, 0.0), done, {}

    def observation_space(self, params):
        image = Box(0, 1, (5, 5, 2), jnp.uint8)
        if self.kind == "grid":
            return Box(0, 1, (5, 5))
        return image if self.kind == "image" else {"image": image, "vec": Box(0, 20, (3,))}

    def action_space(self, params):
        return Box(-1.0, 1.0, (2,)) if self.continuous else Discrete(4)
