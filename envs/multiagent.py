"""A small cooperative multi-agent game with a known optimum, for tests of the multi-agent contract
(:class:`rljax.env.MultiAgentEnvironment`, ``docs/env_api.md``, "Multi-agent environments").

``Rendezvous-v0``: two agents on a ring of ``ring_size`` cells start on two different cells drawn
uniformly; each step each moves one cell clockwise (action 1), anticlockwise (2) or stays (0), at once.
The team pays -1 for every step after which they stand apart; the episode terminates (for both) on
the step they meet, or is truncated after ``max_steps_in_episode`` steps. Each agent sees where the
other stands relative to itself (a one-hot of the clockwise offset, ``[ring_size]``); the global state
(:data:`rljax.env.GLOBAL_STATE`) is both absolute positions (two one-hots, ``[2 * ring_size]``).

The optimum: with the two ``d`` cells apart the shorter way round (``1 <= d <= ring_size / 2``), they
meet after ``ceil(d / 2)`` steps at best, a return of ``1 - ceil(d / 2)``;
:meth:`Rendezvous.optimal_return` averages it over the start distribution (``-3/7`` on the default
ring of 8). Where the two ways round are equally long (``d = ring_size / 2``) both agents see the same
offset, so a policy shared by both meets fast only if it knows which agent it is (an agent id): the
game checks that symmetry is broken.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rljax.env import GLOBAL_STATE, Box, Discrete, EnvParams, EnvState, MultiAgentEnvironment

__all__ = ["Rendezvous", "RendezvousParams", "RendezvousState"]


@struct.dataclass
class RendezvousState(EnvState):
    """``position``: int32 ``[2]``, each agent's cell (``0 .. ring_size - 1``)."""

    position: jax.Array


@struct.dataclass
class RendezvousParams(EnvParams):
    max_steps_in_episode: int = 16


class Rendezvous(MultiAgentEnvironment[RendezvousState, RendezvousParams]):
    """Two agents meeting on a ring (the module docstring).

    Args:
        ring_size: the ring's cells, an int >= 3.
    """

    num_agents = 2
    stochastic_transitions = False

    def __init__(self, ring_size: int = 8) -> None:
        if not isinstance(ring_size, (int, np.integer)) or isinstance(ring_size, bool) or ring_size < 3:
            raise ValueError(f"Rendezvous(ring_size={ring_size!r}): give an int >= 3")
        self.ring_size = int(ring_size)

    @property
    def name(self) -> str:
        return "Rendezvous-v0"

    @property
    def default_params(self) -> RendezvousParams:
        return RendezvousParams()

    def observation_space(self, params: RendezvousParams) -> dict[str, Box]:
        """One agent's: the other's clockwise offset (one-hot) and the global state."""
        n = self.ring_size
        return {"observation": Box(0.0, 1.0, (n,)), GLOBAL_STATE: Box(0.0, 1.0, (2 * n,))}

    def action_space(self, params: RendezvousParams) -> Discrete:
        """0 stay, 1 clockwise, 2 anticlockwise."""
        return Discrete(3)

    def _obs(self, position: jax.Array) -> dict[str, jax.Array]:
        n = self.ring_size
        offset = (position[::-1] - position) % n  # agent i: where the other stands, clockwise from i
        absolute = jax.nn.one_hot(position, n, dtype=jnp.float32).reshape(-1)
        return {"observation": jax.nn.one_hot(offset, n, dtype=jnp.float32),
                GLOBAL_STATE: jnp.broadcast_to(absolute, (2, 2 * n))}

    def reset_env(self, key: jax.Array, params: RendezvousParams) -> tuple[dict[str, jax.Array], RendezvousState]:
        n = self.ring_size
        k1, k2 = jax.random.split(key)
        first = jax.random.randint(k1, (), 0, n)
        second = (first + jax.random.randint(k2, (), 1, n)) % n  # a different cell, uniformly
        position = jnp.stack([first, second]).astype(jnp.int32)
        return self._obs(position), RendezvousState(time=jnp.int32(0), position=position)

    def step_env(self, key: jax.Array, state: RendezvousState, action: jax.Array, params: RendezvousParams
                 ) -> tuple[dict[str, jax.Array], RendezvousState, jax.Array, jax.Array, dict[str, Any]]:
        move = jnp.array([0, 1, -1], jnp.int32)[jnp.asarray(action, jnp.int32)]
        position = (state.position + move) % self.ring_size
        met = position[0] == position[1]
        reward = jnp.where(met, 0.0, -1.0).astype(jnp.float32)
        state = RendezvousState(time=state.time + 1, position=position)
        return self._obs(position), state, jnp.broadcast_to(reward, (2,)), met, {}

    def render(self, state: RendezvousState, params: RendezvousParams | None = None) -> np.ndarray:
        """The ring as a strip of ``ring_size`` cells, 16 pixels each, uint8 ``[16, 16 * ring_size, 3]``:
        agent 0's cell red, agent 1's blue, both purple, the others grey."""
        colours = np.full((self.ring_size, 3), 200, np.uint8)
        position = np.asarray(state.position)
        colours[position[0]] = (220, 40, 40)
        colours[position[1]] = (40, 40, 220) if position[1] != position[0] else (150, 40, 150)
        strip = np.repeat(np.repeat(colours[None], 16, axis=0), 16, axis=1)
        strip[:, ::16] = 0  # cell borders
        return strip

    def optimal_return(self) -> float:
        """The best expected return from the start distribution: ``1 - ceil(d / 2)`` averaged over
        the clockwise offset ``1 .. ring_size - 1`` (uniform), ``d`` the shorter distance."""
        n = self.ring_size
        d = np.minimum(np.arange(1, n), n - np.arange(1, n))
        return float(np.mean(1 - np.ceil(d / 2)))
