"""CartPole-v1 in pure JAX, matching ``gymnasium.envs.classic_control.cartpole`` step for step.

Dynamics: Barto, Sutton & Anderson (1983) cart-pole with explicit Euler integration (Gymnasium's
default ``kinematics_integrator="euler"``). Reward is +1 on every step, the terminating one included
(Gymnasium's default ``sutton_barto_reward=False``).
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

__all__ = ["CartPole", "CartPoleParams", "CartPoleState"]

# Gymnasium draws all four state variables from U(-0.05, 0.05) on reset.
_RESET_HIGH = 0.05


@struct.dataclass
class CartPoleState(EnvState):
    """CartPole state; every field is a float32 scalar except ``time``.

    Attributes:
        x: cart position (m).
        x_dot: cart velocity (m/s).
        theta: pole angle from upright (rad).
        theta_dot: pole angular velocity (rad/s).
        time: int32 steps taken in the current episode.
    """

    x: jax.Array
    x_dot: jax.Array
    theta: jax.Array
    theta_dot: jax.Array


@struct.dataclass
class CartPoleParams(EnvParams):
    """Primary physical constants of CartPole-v1 (Gymnasium defaults).

    Attributes:
        gravity: gravitational acceleration (m/s^2).
        masscart: cart mass (kg).
        masspole: pole mass (kg).
        length: half the pole's length (m), as in Gymnasium.
        force_mag: magnitude of the push applied by either action (N).
        tau: integration time step (s).
        theta_threshold_radians: the episode terminates when ``|theta|`` exceeds this (rad).
        x_threshold: the episode terminates when ``|x|`` exceeds this (m).
        max_steps_in_episode: time limit (500 for v1).
    """

    gravity: float = 9.8
    masscart: float = 1.0
    masspole: float = 0.1
    length: float = 0.5
    force_mag: float = 10.0
    tau: float = 0.02
    theta_threshold_radians: float = 12 * 2 * math.pi / 360
    x_threshold: float = 2.4
    max_steps_in_episode: int = 500


class CartPole(Environment[CartPoleState, CartPoleParams]):
    """CartPole-v1: balance a pole on a cart by pushing the cart left (0) or right (1).

    Observation: float32 ``(4,)`` = ``[x, x_dot, theta, theta_dot]``. Action: int scalar in
    ``{0, 1}``.
    Terminates when ``|x| > x_threshold`` or ``|theta| > theta_threshold_radians``.
    """

    stochastic_transitions = False  # deterministic dynamics: the reset gets the whole step key
    render_fps = 50  # one frame per step of tau = 0.02 s, as Gymnasium's metadata says

    @property
    def name(self) -> str:
        """The Gymnasium id this environment reproduces."""
        return "CartPole-v1"

    @property
    def default_params(self) -> CartPoleParams:
        """Gymnasium's CartPole-v1 constants, time limit 500."""
        return CartPoleParams()

    def step_env(self, key: jax.Array, state: CartPoleState, action: jax.Array,
                 params: CartPoleParams
                 ) -> tuple[jax.Array, CartPoleState, jax.Array, jax.Array, dict[str, Any]]:
        """One Euler step of the cart-pole dynamics.

        Args:
            key: unused (the dynamics are deterministic).
            state: the current state.
            action: int scalar, 0 pushes left and 1 pushes right.
            params: physical constants.

        Returns:
            ``(obs, state, reward, terminated, info)``: obs float32 ``(4,)``, the next state, reward
            float32 ``()`` (always 1), terminated bool ``()``, and an empty info dict.
        """
        del key
        # Derived constants come from the primaries here (not params) so that vmapping over, e.g.,
        # the pole length changes them consistently.
        total_mass = params.masspole + params.masscart
        polemass_length = params.masspole * params.length

        force = jnp.where(action == 1, params.force_mag, -params.force_mag)
        costheta = jnp.cos(state.theta)
        sintheta = jnp.sin(state.theta)
        temp = (force + polemass_length * state.theta_dot**2 * sintheta) / total_mass
        thetaacc = (params.gravity * sintheta - costheta * temp) / (
            params.length * (4.0 / 3.0 - params.masspole * costheta**2 / total_mass))
        xacc = temp - polemass_length * thetaacc * costheta / total_mass

        # Explicit Euler: positions advance with the *old* velocities, as in Gymnasium.
        x = state.x + params.tau * state.x_dot
        x_dot = state.x_dot + params.tau * xacc
        theta = state.theta + params.tau * state.theta_dot
        theta_dot = state.theta_dot + params.tau * thetaacc

        terminated = ((x < -params.x_threshold) | (x > params.x_threshold)
                      | (theta < -params.theta_threshold_radians)
                      | (theta > params.theta_threshold_radians))
        state = CartPoleState(time=state.time + 1, x=x, x_dot=x_dot, theta=theta,
                              theta_dot=theta_dot)
        obs = jnp.stack([x, x_dot, theta, theta_dot])
        # Gymnasium pays +1 on the terminating step too.
        reward = jnp.ones((), jnp.float32)
        return obs, state, reward, terminated, {}

    def reset_env(self, key: jax.Array, params: CartPoleParams) -> tuple[jax.Array, CartPoleState]:
        """Draws every state variable from U(-0.05, 0.05), as Gymnasium does.

        Args:
            key: a PRNG key.
            params: unused (the reset range is not a physical constant).

        Returns:
            ``(obs, state)``: obs float32 ``(4,)`` and the state with ``time == 0``.
        """
        del params
        obs = jax.random.uniform(key, (4,), jnp.float32, -_RESET_HIGH, _RESET_HIGH)
        state = CartPoleState(time=jnp.zeros((), jnp.int32), x=obs[0], x_dot=obs[1], theta=obs[2],
                              theta_dot=obs[3])
        return obs, state

    def observation_space(self, params: CartPoleParams) -> Box:
        """Box of shape ``(4,)``: ``±2·x_threshold``, ``±inf``, ``±2·theta_threshold``, ``±inf``."""
        inf = float("inf")
        high = jnp.array([params.x_threshold * 2, inf, params.theta_threshold_radians * 2, inf],
                         jnp.float32)
        return Box(-high, high, (4,), jnp.float32)

    def action_space(self, params: CartPoleParams) -> Discrete:
        """``Discrete(2)``: 0 pushes left, 1 pushes right."""
        del params
        return Discrete(2)

    def render(self, state: CartPoleState, params: CartPoleParams) -> np.ndarray:
        """Draws one unbatched state as Gymnasium's CartPole renderer does (host-side, Pillow).

        Args:
            state: one env's state (scalar fields; jax or numpy values).
            params: its env params (the track spans ``±x_threshold``; the pole is ``2 * length`` long).

        Returns:
            uint8 ``[400, 600, 3]``: a black cart on a black track, the pole in brown, the axle in blue.
        """
        width, height = 600, 400
        scale = width / (2 * float(params.x_threshold))
        pole_width, pole_len = 10.0, scale * 2 * float(params.length)
        cart_x, cart_y = float(state.x) * scale + width / 2, 100.0  # cart_y: the track, through the cart
        axle = (cart_x, cart_y + 30.0 / 4)
        canvas = Canvas(width, height)
        canvas.line([(0, cart_y), (width, cart_y)], (0, 0, 0))
        canvas.polygon([(cart_x - 25, cart_y - 15), (cart_x - 25, cart_y + 15), (cart_x + 25, cart_y + 15),
                        (cart_x + 25, cart_y - 15)], (0, 0, 0))
        half = pole_width / 2
        pole = [(-half, -half), (-half, pole_len - half), (half, pole_len - half), (half, -half)]
        canvas.polygon(rotate(pole, -float(state.theta), axle), (202, 152, 101))
        canvas.circle(axle, half, (129, 132, 203))
        return canvas.to_array()
