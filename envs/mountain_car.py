"""MountainCar-v0 and MountainCarContinuous-v0 in pure JAX, matching Gymnasium step for step.

References: ``gymnasium.envs.classic_control.mountain_car`` and ``.continuous_mountain_car``.
Both clip the velocity, then the position, and then zero a negative velocity when the car sits on
the left wall (``position == min_position``): an inelastic collision. The continuous variant clips
the action for the dynamics but charges ``0.1 * a**2`` on the *unclipped* action, as Gymnasium does.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rljax.env import Box, Discrete, EnvParams, EnvState, Environment

from .rendering import Canvas, rotate

__all__ = [
    "MountainCar",
    "MountainCarContinuous",
    "MountainCarContinuousParams",
    "MountainCarParams",
    "MountainCarState",
]

# Gymnasium's default reset: position ~ U(-0.6, -0.4), velocity = 0.
_RESET_LOW, _RESET_HIGH = -0.6, -0.4
# MountainCarContinuous reward terms (reward shaping, not physics, so not params).
_GOAL_REWARD = 100.0
_ACTION_COST = 0.1


@struct.dataclass
class MountainCarState(EnvState):
    """Mountain-car state (both variants); float32 scalars except ``time``.

    Attributes:
        position: car position along the track.
        velocity: car velocity.
        time: int32 steps taken in the current episode.
    """

    position: jax.Array
    velocity: jax.Array


@struct.dataclass
class MountainCarParams(EnvParams):
    """Primary physical constants of MountainCar-v0 (Gymnasium defaults).

    Attributes:
        min_position: left wall; the position is clipped to it.
        max_position: right end; the position is clipped to it.
        max_speed: the velocity is clipped to ``±max_speed``.
        goal_position: the episode terminates once ``position >= goal_position`` ...
        goal_velocity: ... and ``velocity >= goal_velocity``.
        force: velocity change per step of a full push (action 0 or 2).
        gravity: gravity coefficient of the ``-gravity * cos(3 * position)`` term.
        max_steps_in_episode: time limit (200 for v0).
    """

    min_position: float = -1.2
    max_position: float = 0.6
    max_speed: float = 0.07
    goal_position: float = 0.5
    goal_velocity: float = 0.0
    force: float = 0.001
    gravity: float = 0.0025
    max_steps_in_episode: int = 200


@struct.dataclass
class MountainCarContinuousParams(EnvParams):
    """Primary physical constants of MountainCarContinuous-v0 (Gymnasium defaults).

    Attributes:
        min_action: the action is clipped below at this value for the dynamics.
        max_action: the action is clipped above at this value for the dynamics.
        min_position: left wall; the position is clipped to it.
        max_position: right end; the position is clipped to it.
        max_speed: the velocity is clipped to ``±max_speed``.
        goal_position: the episode terminates once ``position >= goal_position`` ...
        goal_velocity: ... and ``velocity >= goal_velocity``.
        power: velocity change per step per unit of (clipped) action.
        gravity: gravity coefficient of the ``-gravity * cos(3 * position)`` term.
        max_steps_in_episode: time limit (999 for v0).
    """

    min_action: float = -1.0
    max_action: float = 1.0
    min_position: float = -1.2
    max_position: float = 0.6
    max_speed: float = 0.07
    goal_position: float = 0.45
    goal_velocity: float = 0.0
    power: float = 0.0015
    gravity: float = 0.0025
    max_steps_in_episode: int = 999


def _advance(position: jax.Array, velocity: jax.Array, params: Any
             ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Shared tail of both steps: clip velocity, move, clip position, stop at the left wall.

    Returns:
        ``(position, velocity, terminated)``, float32, float32 and bool scalars.
    """
    velocity = jnp.clip(velocity, -params.max_speed, params.max_speed)
    position = jnp.clip(position + velocity, params.min_position, params.max_position)
    # Inelastic collision with the left wall: Gymnasium zeroes only a velocity pointing into it.
    velocity = jnp.where((position == params.min_position) & (velocity < 0), 0.0, velocity)
    terminated = (position >= params.goal_position) & (velocity >= params.goal_velocity)
    return position, velocity, terminated


def _reset(key: jax.Array) -> tuple[jax.Array, MountainCarState]:
    """Gymnasium's reset: ``position ~ U(-0.6, -0.4)``, ``velocity = 0``; obs float32 ``(2,)``."""
    position = jax.random.uniform(key, (), jnp.float32, _RESET_LOW, _RESET_HIGH)
    velocity = jnp.zeros((), jnp.float32)
    state = MountainCarState(time=jnp.zeros((), jnp.int32), position=position, velocity=velocity)
    return jnp.stack([position, velocity]), state


def _render(state: MountainCarState, params: Any) -> np.ndarray:
    """Gymnasium's mountain car picture of one unbatched state: uint8 ``[400, 600, 3]``."""
    width, height = 600, 400
    low, high = float(params.min_position), float(params.max_position)
    scale = width / (high - low)

    def ground(x: float) -> float:  # Gymnasium's _height, in pixels
        return (math.sin(3 * x) * 0.45 + 0.55) * scale

    canvas = Canvas(width, height)
    xs = np.linspace(low, high, 100)
    canvas.line([((x - low) * scale, ground(x)) for x in xs], (0, 0, 0))
    pos = float(state.position)
    angle, base = math.cos(3 * pos), ((pos - low) * scale, 10 + ground(pos))  # 10: the wheels' clearance
    canvas.polygon(rotate([(-20, 0), (-20, 20), (20, 20), (20, 0)], angle, base), (0, 0, 0))
    for wheel in rotate([(10, 0), (-10, 0)], angle, base):
        canvas.circle(wheel, 20 / 2.5, (128, 128, 128))
    goal = float(params.goal_position)
    flag_x, flag_y = (goal - low) * scale, ground(goal)
    canvas.line([(flag_x, flag_y), (flag_x, flag_y + 50)], (0, 0, 0))
    canvas.polygon([(flag_x, flag_y + 50), (flag_x, flag_y + 40), (flag_x + 25, flag_y + 45)], (204, 204, 0))
    return canvas.to_array()


class MountainCar(Environment[MountainCarState, MountainCarParams]):
    """MountainCar-v0: drive an underpowered car up the right hill by rocking it.

    Observation: float32 ``(2,)`` = ``[position, velocity]``. Action: int scalar in ``{0, 1, 2}``
    (push left, no push, push right). Reward -1 per step; terminates at the goal.
    """

    stochastic_transitions = False  # deterministic dynamics: the reset gets the whole step key
    render_fps = 30  # Gymnasium's metadata

    @property
    def name(self) -> str:
        """The Gymnasium id this environment reproduces."""
        return "MountainCar-v0"

    @property
    def default_params(self) -> MountainCarParams:
        """Gymnasium's MountainCar-v0 constants, time limit 200."""
        return MountainCarParams()

    def step_env(self, key: jax.Array, state: MountainCarState, action: jax.Array,
                 params: MountainCarParams
                 ) -> tuple[jax.Array, MountainCarState, jax.Array, jax.Array, dict[str, Any]]:
        """One step of the mountain-car dynamics.

        Args:
            key: unused (the dynamics are deterministic).
            state: the current state.
            action: int scalar in ``{0, 1, 2}``.
            params: physical constants.

        Returns:
            ``(obs, state, reward, terminated, info)``: obs float32 ``(2,)``, the next state, reward
            float32 ``()`` (always -1), terminated bool ``()``, and an empty info dict.
        """
        del key
        push = jnp.asarray(action, jnp.float32) - 1.0
        velocity = state.velocity + (push * params.force
                                     + jnp.cos(3 * state.position) * (-params.gravity))
        position, velocity, terminated = _advance(state.position, velocity, params)
        state = MountainCarState(time=state.time + 1, position=position, velocity=velocity)
        reward = jnp.full((), -1.0, jnp.float32)
        return jnp.stack([position, velocity]), state, reward, terminated, {}

    def reset_env(self, key: jax.Array, params: MountainCarParams
                  ) -> tuple[jax.Array, MountainCarState]:
        """Draws ``position ~ U(-0.6, -0.4)`` with zero velocity, as Gymnasium does.

        Args:
            key: a PRNG key.
            params: unused.

        Returns:
            ``(obs, state)``: obs float32 ``(2,)`` and the state with ``time == 0``.
        """
        del params
        return _reset(key)

    def observation_space(self, params: MountainCarParams) -> Box:
        """Box of shape ``(2,)``, from ``[min_position, -max_speed]``
        to ``[max_position, max_speed]``.
        """
        low = jnp.array([params.min_position, -params.max_speed], jnp.float32)
        high = jnp.array([params.max_position, params.max_speed], jnp.float32)
        return Box(low, high, (2,), jnp.float32)

    def render(self, state: MountainCarState, params: MountainCarParams) -> np.ndarray:
        """Draws one unbatched state as Gymnasium's renderer does (host-side, Pillow).

        Args:
            state: one env's state (scalar fields; jax or numpy values).
            params: its env params (the hill spans ``[min_position, max_position]``; the flag
                stands at ``goal_position``).

        Returns:
            uint8 ``[400, 600, 3]``: the hill's profile, a black car on grey wheels, a yellow flag.
        """
        return _render(state, params)

    def action_space(self, params: MountainCarParams) -> Discrete:
        """``Discrete(3)``: push left, no push, push right."""
        del params
        return Discrete(3)


class MountainCarContinuous(Environment[MountainCarState, MountainCarContinuousParams]):
    """MountainCarContinuous-v0: mountain car with a continuous force and an energy penalty.

    Observation: float32 ``(2,)`` = ``[position, velocity]``. Action: float32 ``(1,)``, clipped to
    ``[min_action, max_action]`` for the dynamics. Reward: +100 on reaching the goal, minus
    ``0.1 * a**2`` of the unclipped action every step.
    """

    stochastic_transitions = False  # deterministic dynamics: the reset gets the whole step key
    render_fps = 30  # Gymnasium's metadata

    @property
    def name(self) -> str:
        """The Gymnasium id this environment reproduces."""
        return "MountainCarContinuous-v0"

    @property
    def default_params(self) -> MountainCarContinuousParams:
        """Gymnasium's MountainCarContinuous-v0 constants, time limit 999."""
        return MountainCarContinuousParams()

    def step_env(self, key: jax.Array, state: MountainCarState, action: jax.Array,
                 params: MountainCarContinuousParams
                 ) -> tuple[jax.Array, MountainCarState, jax.Array, jax.Array, dict[str, Any]]:
        """One step of the continuous mountain-car dynamics.

        Args:
            key: unused (the dynamics are deterministic).
            state: the current state.
            action: float32 ``(1,)`` force.
            params: physical constants.

        Returns:
            ``(obs, state, reward, terminated, info)``: obs float32 ``(2,)``, the next state, reward
            float32 ``()``, terminated bool ``()``, and ``info["reward_components"]`` =
            ``{"goal": 100 or 0, "action": -0.1 * a**2}``, float32 ``()`` terms that sum to the
            reward.
        """
        del key
        a = action[0]
        force = jnp.clip(a, params.min_action, params.max_action)
        velocity = state.velocity + (force * params.power
                                     - params.gravity * jnp.cos(3 * state.position))
        position, velocity, terminated = _advance(state.position, velocity, params)
        state = MountainCarState(time=state.time + 1, position=position, velocity=velocity)

        goal = jnp.where(terminated, _GOAL_REWARD, 0.0).astype(jnp.float32)
        # Gymnasium charges the *unclipped* action here (``math.pow(action[0], 2) * 0.1``).
        action_cost = -(a * a * _ACTION_COST)
        reward = goal + action_cost
        info = {"reward_components": {"goal": goal, "action": action_cost}}
        return jnp.stack([position, velocity]), state, reward, terminated, info

    def reset_env(self, key: jax.Array, params: MountainCarContinuousParams
                  ) -> tuple[jax.Array, MountainCarState]:
        """Draws ``position ~ U(-0.6, -0.4)`` with zero velocity, as Gymnasium does.

        Args:
            key: a PRNG key.
            params: unused.

        Returns:
            ``(obs, state)``: obs float32 ``(2,)`` and the state with ``time == 0``.
        """
        del params
        return _reset(key)

    def observation_space(self, params: MountainCarContinuousParams) -> Box:
        """Box of shape ``(2,)``, from ``[min_position, -max_speed]``
        to ``[max_position, max_speed]``.
        """
        low = jnp.array([params.min_position, -params.max_speed], jnp.float32)
        high = jnp.array([params.max_position, params.max_speed], jnp.float32)
        return Box(low, high, (2,), jnp.float32)

    def action_space(self, params: MountainCarContinuousParams) -> Box:
        """Box of shape ``(1,)``: force in ``[min_action, max_action]``."""
        return Box(params.min_action, params.max_action, (1,), jnp.float32)

    def render(self, state: MountainCarState, params: MountainCarContinuousParams) -> np.ndarray:
        """Draws one unbatched state as Gymnasium's renderer does (host-side, Pillow).

        Args:
            state: one env's state (scalar fields; jax or numpy values).
            params: its env params (the hill spans ``[min_position, max_position]``; the flag
                stands at ``goal_position``).

        Returns:
            uint8 ``[400, 600, 3]``: the hill's profile, a black car on grey wheels, a yellow flag.
        """
        return _render(state, params)
