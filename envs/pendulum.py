"""Pendulum-v1 in pure JAX, matching ``gymnasium.envs.classic_control.pendulum`` step for step.

Swing-up of a torque-limited pendulum. The cost (negative reward) is computed from the state
*before* the step and the clipped torque, as in Gymnasium. The pendulum never terminates; only the
time limit (200) ends an episode.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rljax.env import Box, EnvParams, EnvState, Environment

from .rendering import Canvas, rotate

__all__ = ["Pendulum", "PendulumParams", "PendulumState"]

# Gymnasium's default reset range: theta ~ U(-pi, pi), theta_dot ~ U(-1, 1).
_RESET_HIGH = (math.pi, 1.0)
# Gymnasium's cost weights; not physical constants, so they are not params.
_VELOCITY_COST = 0.1
_TORQUE_COST = 0.001


@struct.dataclass
class PendulumState(EnvState):
    """Pendulum state; float32 scalars except ``time``.

    Attributes:
        theta: angle from upright (rad), unwrapped as in Gymnasium.
        theta_dot: angular velocity (rad/s).
        time: int32 steps taken in the current episode.
    """

    theta: jax.Array
    theta_dot: jax.Array


@struct.dataclass
class PendulumParams(EnvParams):
    """Primary physical constants of Pendulum-v1 (Gymnasium defaults).

    Attributes:
        max_speed: the angular velocity is clipped to ``±max_speed`` (rad/s).
        max_torque: the action is clipped to ``±max_torque`` (N·m).
        dt: integration time step (s).
        g: gravitational acceleration (m/s^2).
        m: pendulum mass (kg).
        l: pendulum length (m).
        max_steps_in_episode: time limit (200 for v1).
    """

    max_speed: float = 8.0
    max_torque: float = 2.0
    dt: float = 0.05
    g: float = 10.0
    m: float = 1.0
    l: float = 1.0  # noqa: E741 (Gymnasium's name)
    max_steps_in_episode: int = 200


def _angle_normalize(x: jax.Array) -> jax.Array:
    """Maps an angle to [-pi, pi), exactly as Gymnasium's ``angle_normalize``."""
    return jnp.mod(x + jnp.pi, 2 * jnp.pi) - jnp.pi


class Pendulum(Environment[PendulumState, PendulumParams]):
    """Pendulum-v1: swing a pendulum up and keep it upright with a bounded torque.

    Observation: float32 ``(3,)`` = ``[cos(theta), sin(theta), theta_dot]``. Action: float32
    ``(1,)`` torque, clipped to ``±max_torque``. Never terminates.
    """

    stochastic_transitions = False  # deterministic dynamics: the reset gets the whole step key
    render_fps = 20  # one frame per step of dt = 0.05 s (real time)

    @property
    def name(self) -> str:
        """The Gymnasium id this environment reproduces."""
        return "Pendulum-v1"

    @property
    def default_params(self) -> PendulumParams:
        """Gymnasium's Pendulum-v1 constants (``g=10``), time limit 200."""
        return PendulumParams()

    def step_env(self, key: jax.Array, state: PendulumState, action: jax.Array,
                 params: PendulumParams
                 ) -> tuple[jax.Array, PendulumState, jax.Array, jax.Array, dict[str, Any]]:
        """One semi-implicit Euler step.

        Args:
            key: unused (the dynamics are deterministic).
            state: the current state.
            action: float32 ``(1,)`` torque; clipped to ``±max_torque``.
            params: physical constants.

        Returns:
            ``(obs, state, reward, terminated, info)``: obs float32 ``(3,)``, the next state, reward
            float32 ``()``, terminated bool ``()`` (always False), and
            ``info["reward_components"]`` = ``{"angle", "velocity", "torque"}``, float32 ``()``
            costs (each <= 0) that sum to the reward.
        """
        del key
        th, thdot = state.theta, state.theta_dot
        u = jnp.clip(action[0], -params.max_torque, params.max_torque)

        # Costs use the pre-step state and the clipped torque, as Gymnasium does.
        angle_cost = -_angle_normalize(th) ** 2
        velocity_cost = -_VELOCITY_COST * thdot**2
        torque_cost = -_TORQUE_COST * u**2
        reward = angle_cost + velocity_cost + torque_cost

        newthdot = thdot + (3 * params.g / (2 * params.l) * jnp.sin(th)
                            + 3.0 / (params.m * params.l**2) * u) * params.dt
        newthdot = jnp.clip(newthdot, -params.max_speed, params.max_speed)
        # The angle advances with the *new* (clipped) velocity.
        newth = th + newthdot * params.dt

        state = PendulumState(time=state.time + 1, theta=newth, theta_dot=newthdot)
        obs = jnp.stack([jnp.cos(newth), jnp.sin(newth), newthdot])
        info = {"reward_components": {"angle": angle_cost, "velocity": velocity_cost,
                                      "torque": torque_cost}}
        return obs, state, reward, jnp.zeros((), jnp.bool_), info

    def reset_env(self, key: jax.Array, params: PendulumParams) -> tuple[jax.Array, PendulumState]:
        """Draws ``theta ~ U(-pi, pi)`` and ``theta_dot ~ U(-1, 1)``, as Gymnasium does.

        Args:
            key: a PRNG key.
            params: unused.

        Returns:
            ``(obs, state)``: obs float32 ``(3,)`` and the state with ``time == 0``.
        """
        del params
        high = jnp.array(_RESET_HIGH, jnp.float32)
        s = jax.random.uniform(key, (2,), jnp.float32, -high, high)
        th, thdot = s[0], s[1]
        state = PendulumState(time=jnp.zeros((), jnp.int32), theta=th, theta_dot=thdot)
        return jnp.stack([jnp.cos(th), jnp.sin(th), thdot]), state

    def observation_space(self, params: PendulumParams) -> Box:
        """Box of shape ``(3,)``: ``[±1, ±1, ±max_speed]``."""
        high = jnp.array([1.0, 1.0, params.max_speed], jnp.float32)
        return Box(-high, high, (3,), jnp.float32)

    def action_space(self, params: PendulumParams) -> Box:
        """Box of shape ``(1,)``: torque in ``[-max_torque, max_torque]``."""
        return Box(-params.max_torque, params.max_torque, (1,), jnp.float32)

    def render(self, state: PendulumState, params: PendulumParams) -> np.ndarray:
        """Draws one unbatched state as Gymnasium's Pendulum renderer does (host-side, Pillow).

        Gymnasium's torque arrow is left out: the state does not hold the last action.

        Args:
            state: one env's state (scalar fields; jax or numpy values); ``theta == 0`` is upright.
            params: its env params (the rod is ``l`` long).

        Returns:
            uint8 ``[500, 500, 3]``: a red rod with rounded ends on a black axle.
        """
        size = 500
        scale = size / (2 * 2.2)
        centre = (size / 2, size / 2)
        rod_len, half = float(params.l) * scale, 0.1 * scale
        angle = float(state.theta) + math.pi / 2
        canvas = Canvas(size, size)
        canvas.polygon(rotate([(0, -half), (0, half), (rod_len, half), (rod_len, -half)], angle, centre),
                       (204, 77, 77))
        canvas.circle(centre, half, (204, 77, 77))
        canvas.circle(rotate([(rod_len, 0.0)], angle, centre)[0], half, (204, 77, 77))
        canvas.circle(centre, 0.05 * scale, (0, 0, 0))
        return canvas.to_array()
