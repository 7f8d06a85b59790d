"""Acrobot-v1 in pure JAX, matching ``gymnasium.envs.classic_control.acrobot`` step for step.

Two-link underactuated pendulum with torque on the second joint, 'book' dynamics (Sutton & Barto),
integrated by one classical RK4 step of length ``dt`` (Gymnasium's ``rk4(derivs, y0, [0, dt])``).
Joint angles are wrapped into ``[-pi, pi]`` and velocities clipped after the step, as in Gymnasium.

Gymnasium's ``torque_noise_max`` defaults to 0 and is not a param here: supporting it would cost a
random draw on every step of every environment, even at the default.
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

__all__ = ["Acrobot", "AcrobotParams", "AcrobotState"]

# Gymnasium draws all four state variables from U(-0.1, 0.1) on reset.
_RESET_HIGH = 0.1


@struct.dataclass
class AcrobotState(EnvState):
    """Acrobot state; float32 scalars except ``time``.

    Attributes:
        theta1: angle of the first link from hanging down (rad), in ``[-pi, pi]``.
        theta2: angle of the second link relative to the first (rad), in ``[-pi, pi]``.
        dtheta1: angular velocity of the first joint (rad/s).
        dtheta2: angular velocity of the second joint (rad/s).
        time: int32 steps taken in the current episode.
    """

    theta1: jax.Array
    theta2: jax.Array
    dtheta1: jax.Array
    dtheta2: jax.Array


@struct.dataclass
class AcrobotParams(EnvParams):
    """Primary physical constants of Acrobot-v1 (Gymnasium defaults).

    Gymnasium's ``LINK_LENGTH_2`` only affects rendering, so it is not a param.

    Attributes:
        dt: integration time step (s).
        link_length_1: length of the first link (m).
        link_mass_1: mass of the first link (kg).
        link_mass_2: mass of the second link (kg).
        link_com_pos_1: position of the first link's centre of mass (m).
        link_com_pos_2: position of the second link's centre of mass (m).
        link_moi: moment of inertia of each link (kg·m^2).
        max_vel_1: ``dtheta1`` is clipped to ``±max_vel_1`` (rad/s).
        max_vel_2: ``dtheta2`` is clipped to ``±max_vel_2`` (rad/s).
        gravity: gravitational acceleration (m/s^2).
        max_steps_in_episode: time limit (500 for v1).
    """

    dt: float = 0.2
    link_length_1: float = 1.0
    link_mass_1: float = 1.0
    link_mass_2: float = 1.0
    link_com_pos_1: float = 0.5
    link_com_pos_2: float = 0.5
    link_moi: float = 1.0
    max_vel_1: float = 4 * math.pi
    max_vel_2: float = 9 * math.pi
    gravity: float = 9.8
    max_steps_in_episode: int = 500


def _wrap(x: jax.Array, low: float, high: float) -> jax.Array:
    """Gymnasium's ``wrap``: shift by whole periods until ``low <= x <= high`` (both ends kept).

    Gymnasium subtracts ``high - low`` while ``x > high`` and adds it while ``x < low``; the
    ``ceil`` counts those iterations, so ``high`` itself stays ``high`` (a ``mod`` would map it to
    ``low``).
    """
    diff = high - low
    x = jnp.where(x > high, x - diff * jnp.ceil((x - high) / diff), x)
    return jnp.where(x < low, x + diff * jnp.ceil((low - x) / diff), x)


class Acrobot(Environment[AcrobotState, AcrobotParams]):
    """Acrobot-v1: swing the tip of a two-link chain above the bar by torquing the middle joint.

    Observation: float32 ``(6,)`` = ``[cos θ1, sin θ1, cos θ2, sin θ2, dθ1, dθ2]``. Action: int
    scalar in ``{0, 1, 2}`` for torque ``-1, 0, +1``. Terminates when
    ``-cos θ1 - cos(θ1 + θ2) > 1``; the reward is -1 per step and 0 on the terminating step.
    """

    stochastic_transitions = False  # deterministic dynamics: the reset gets the whole step key
    render_fps = 15  # Gymnasium's metadata (a step is dt = 0.2 s, so this is 3x real time)

    @property
    def name(self) -> str:
        """The Gymnasium id this environment reproduces."""
        return "Acrobot-v1"

    @property
    def default_params(self) -> AcrobotParams:
        """Gymnasium's Acrobot-v1 constants, time limit 500."""
        return AcrobotParams()

    def step_env(self, key: jax.Array, state: AcrobotState, action: jax.Array, params: AcrobotParams
                 ) -> tuple[jax.Array, AcrobotState, jax.Array, jax.Array, dict[str, Any]]:
        """One RK4 step of the 'book' dynamics, then wrap angles and clip velocities.

        Args:
            key: unused (Gymnasium's default torque noise is 0; see the module docstring).
            state: the current state.
            action: int scalar in ``{0, 1, 2}``.
            params: physical constants.

        Returns:
            ``(obs, state, reward, terminated, info)``: obs float32 ``(6,)``, the next state, reward
            float32 ``()`` (-1, or 0 when terminated), terminated bool ``()``, and an empty info.
        """
        del key
        m1, m2 = params.link_mass_1, params.link_mass_2
        l1, lc1, lc2 = params.link_length_1, params.link_com_pos_1, params.link_com_pos_2
        i1 = i2 = params.link_moi
        g = params.gravity
        # Gymnasium's AVAIL_TORQUE = [-1, 0, +1], indexed by the action.
        torque = jnp.asarray(action, jnp.float32) - 1.0

        # Derived constants, shared by the four derivative evaluations (computed from the
        # primaries here so that vmapping over params changes them consistently).
        m2_l1_lc2 = m2 * l1 * lc2
        d1_const = m1 * lc1**2 + m2 * (l1**2 + lc2**2) + i1 + i2
        d2_const = m2 * lc2**2 + i2
        g1 = (m1 * lc1 + m2 * l1) * g
        g2 = m2 * lc2 * g

        # Scalars throughout: packing the state into a 5-vector as Gymnasium does (torque as a
        # constant fifth component) would only add stack/unstack work.
        def dsdt(theta1, theta2, dtheta1, dtheta2):
            cos2, sin2 = jnp.cos(theta2), jnp.sin(theta2)
            d1 = d1_const + 2 * m2_l1_lc2 * cos2
            d2 = d2_const + m2_l1_lc2 * cos2
            # Gymnasium writes cos(a - pi/2); sin(a) is the same value, computed more exactly.
            phi2 = g2 * jnp.sin(theta1 + theta2)
            phi1 = (-m2_l1_lc2 * dtheta2**2 * sin2 - 2 * m2_l1_lc2 * dtheta2 * dtheta1 * sin2
                    + g1 * jnp.sin(theta1) + phi2)
            # 'book' variant (Gymnasium's default book_or_nips="book").
            ddtheta2 = ((torque + d2 / d1 * phi1 - m2_l1_lc2 * dtheta1**2 * sin2 - phi2)
                        / (d2_const - d2**2 / d1))
            ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
            return dtheta1, dtheta2, ddtheta1, ddtheta2

        s0 = (state.theta1, state.theta2, state.dtheta1, state.dtheta2)
        dt = params.dt
        dt2 = dt / 2.0
        k1 = dsdt(*s0)
        k2 = dsdt(*(y + dt2 * k for y, k in zip(s0, k1)))
        k3 = dsdt(*(y + dt2 * k for y, k in zip(s0, k2)))
        k4 = dsdt(*(y + dt * k for y, k in zip(s0, k3)))
        theta1, theta2, dtheta1, dtheta2 = (
            y + dt / 6.0 * (a + 2 * b + 2 * c + d) for y, a, b, c, d in zip(s0, k1, k2, k3, k4))

        theta1 = _wrap(theta1, -math.pi, math.pi)
        theta2 = _wrap(theta2, -math.pi, math.pi)
        dtheta1 = jnp.clip(dtheta1, -params.max_vel_1, params.max_vel_1)
        dtheta2 = jnp.clip(dtheta2, -params.max_vel_2, params.max_vel_2)

        c1, s1, c2, s2 = jnp.cos(theta1), jnp.sin(theta1), jnp.cos(theta2), jnp.sin(theta2)
        terminated = -c1 - jnp.cos(theta1 + theta2) > 1.0
        reward = terminated.astype(jnp.float32) - 1.0
        state = AcrobotState(time=state.time + 1, theta1=theta1, theta2=theta2, dtheta1=dtheta1,
                             dtheta2=dtheta2)
        obs = jnp.stack([c1, s1, c2, s2, dtheta1, dtheta2])
        return obs, state, reward, terminated, {}

    def reset_env(self, key: jax.Array, params: AcrobotParams) -> tuple[jax.Array, AcrobotState]:
        """Draws every state variable from U(-0.1, 0.1), as Gymnasium does.

        Args:
            key: a PRNG key.
            params: unused.

        Returns:
            ``(obs, state)``: obs float32 ``(6,)`` and the state with ``time == 0``.
        """
        del params
        s = jax.random.uniform(key, (4,), jnp.float32, -_RESET_HIGH, _RESET_HIGH)
        theta1, theta2 = s[0], s[1]
        state = AcrobotState(time=jnp.zeros((), jnp.int32), theta1=theta1, theta2=theta2,
                             dtheta1=s[2], dtheta2=s[3])
        obs = jnp.stack([jnp.cos(theta1), jnp.sin(theta1), jnp.cos(theta2), jnp.sin(theta2), s[2],
                         s[3]])
        return obs, state

    def observation_space(self, params: AcrobotParams) -> Box:
        """Box of shape ``(6,)``: ``[±1, ±1, ±1, ±1, ±max_vel_1, ±max_vel_2]``."""
        high = jnp.array([1.0, 1.0, 1.0, 1.0, params.max_vel_1, params.max_vel_2], jnp.float32)
        return Box(-high, high, (6,), jnp.float32)

    def action_space(self, params: AcrobotParams) -> Discrete:
        """``Discrete(3)``: torque -1, 0, +1 on the second joint."""
        del params
        return Discrete(3)

    def render(self, state: AcrobotState, params: AcrobotParams) -> np.ndarray:
        """Draws one unbatched state as Gymnasium's Acrobot renderer does (host-side, Pillow).

        Args:
            state: one env's state (scalar fields; jax or numpy values); both angles 0 hang down.
            params: its env params (the first link is ``link_length_1`` long; the second is 1 m,
                Gymnasium's ``LINK_LENGTH_2``).

        Returns:
            uint8 ``[500, 500, 3]``: two cyan links with yellow joints, and the black line the tip
            must rise above (1 m over the pivot).
        """
        size, len1, len2 = 500, float(params.link_length_1), 1.0
        scale = size / (2 * (len1 + len2 + 0.2))
        offset = size / 2
        th1, th2 = float(state.theta1), float(state.theta2)
        canvas = Canvas(size, size)
        canvas.line([(-2.2 * scale + offset, scale + offset), (2.2 * scale + offset, scale + offset)], (0, 0, 0))
        p1 = (len1 * math.sin(th1), -len1 * math.cos(th1))
        starts = [(offset, offset), (p1[0] * scale + offset, p1[1] * scale + offset)]
        for start, angle, length in zip(starts, (th1 - math.pi / 2, th1 + th2 - math.pi / 2), (len1, len2)):
            w = 0.1 * scale
            canvas.polygon(rotate([(0, -w), (0, w), (length * scale, w), (length * scale, -w)], angle, start),
                           (0, 204, 204))
            canvas.circle(start, w, (204, 204, 0))
        return canvas.to_array()
