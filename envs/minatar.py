"""MinAtar (Young & Tian 2019, "MinAtar: An Atari-Inspired Testbed for Thorough and Reproducible
Reinforcement Learning Experiments") with its observation planes as booleans.

The games are gymnax's (``gymnax/<Game>-MinAtar``: the same dynamics, rewards, time limit and
auto-reset, called through gymnax's own ``step``); only the observation changes type. A MinAtar
observation is ``[10, 10, C]`` indicator planes (``C`` = 4 for Breakout, 4 for Asterix, 7 for
Freeway, 10 for Seaquest, 6 for SpaceInvaders): each cell of each channel is 0 or 1. gymnax returns
them as float32; here they are ``bool``, so a replay buffer or a PPO rollout stores them in a
quarter of the memory, and an encoder casts them back to exactly the same float32 values
(``obs.astype(float32)`` equals gymnax's observation bit for bit, which the env tests check on
random rollouts of every game). Registered as ``Breakout-MinAtar``, ``Asterix-MinAtar``,
``Freeway-MinAtar``, ``Seaquest-MinAtar`` and ``SpaceInvaders-MinAtar``; the float32 originals stay
available as ``gymnax/<Game>-MinAtar``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from rljax.env import Box

__all__ = ["GAMES", "MinAtar"]

GAMES = ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders")
"""The MinAtar games (gymnax ids ``<Game>-MinAtar``)."""


class MinAtar:
    """One MinAtar game: gymnax's env with ``bool`` observations ``[10, 10, C]``.

    Args:
        game: one of :data:`GAMES`.

    The params (:attr:`default_params`), state, actions (``Discrete``; 3 for Breakout, 5 for
    Asterix, 3 for Freeway, 6 for Seaquest and 4 for SpaceInvaders in gymnax's reduced action sets) and
    ``step``'s ``terminated`` / ``truncated`` are gymnax's. ``info["final_observation"]`` is cast too.
    """

    stochastic_transitions = True

    def __init__(self, game: str):
        if game not in GAMES:
            raise ValueError(f"unknown MinAtar game {game!r}; games: {', '.join(GAMES)}")
        import gymnax

        self.game = game
        self.name = f"{game}-MinAtar"
        self.gymnax_env, self._default_params = gymnax.make(self.name)

    @property
    def default_params(self) -> Any:
        """gymnax's default params for the game (``max_steps_in_episode`` among them)."""
        return self._default_params

    def _params(self, params: Any) -> Any:
        return self._default_params if params is None else params

    def reset(self, key: jax.Array, params: Any = None) -> tuple[jax.Array, Any]:
        """gymnax's reset; returns ``(obs bool [10, 10, C], state)``."""
        obs, state = self.gymnax_env.reset(key, self._params(params))
        return obs.astype(jnp.bool_), state

    def step(self, key: jax.Array, state: Any, action: Any, params: Any = None
             ) -> tuple[jax.Array, Any, jax.Array, jax.Array, jax.Array, dict[str, Any]]:
        """gymnax's step (auto-resetting); the observation and ``final_observation`` as bool."""
        obs, state, reward, terminated, truncated, info = self.gymnax_env.step(key, state, action,
                                                                               self._params(params))
        info = {**info, "final_observation": info["final_observation"].astype(jnp.bool_)}
        return (obs.astype(jnp.bool_), state, jnp.asarray(reward, jnp.float32), jnp.asarray(terminated, jnp.bool_),
                jnp.asarray(truncated, jnp.bool_), info)

    def observation_space(self, params: Any = None) -> Box:
        """``Box(0, 1, (10, 10, C), bool)``."""
        shape = tuple(self.gymnax_env.observation_space(self._params(params)).shape)
        return Box(False, True, shape, jnp.bool_)

    def action_space(self, params: Any = None) -> Any:
        """gymnax's ``Discrete`` action space for the game."""
        return self.gymnax_env.action_space(self._params(params))
