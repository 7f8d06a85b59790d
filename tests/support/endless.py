"""A test env that never terminates but is truncated by its time limit.

The observation is constant (1), the reward is always 1, and a time limit of 5 steps cuts every episode.
Because the MDP never ends, the true value is ``1 / (1 - gamma)`` at every step (2.0 for gamma =
0.5). A learner that treats truncation like termination (no bootstrap at the cut) instead converges
to ``1 / (1 - gamma * 4/5)`` (1.667 for gamma = 0.5): the two are far enough apart to tell which
one a learner does.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from rljax.env import Box, Discrete, EnvParams, EnvState, Environment


@struct.dataclass
class EndlessState(EnvState):
    time: jax.Array


@struct.dataclass
class EndlessParams(EnvParams):
    max_steps_in_episode: int = 5


class Endless(Environment[EndlessState, EndlessParams]):
    stochastic_transitions = False

    def __init__(self, continuous: bool = False):
        self.continuous = continuous

    @property
    def default_params(self) -> EndlessParams:
        return EndlessParams()

    def reset_env(self, key, params):
        return jnp.ones((1,), jnp.float32), EndlessState(time=jnp.int32(0))

    def step_env(self, key, state, action, params):
        return jnp.ones((1,), jnp.float32), EndlessState(time=state.time + 1), jnp.float32(1.0), jnp.bool_(False), {}

    def observation_space(self, params):
        return Box(-1.0, 1.0, (1,))

    def action_space(self, params):
        return Box(-1.0, 1.0, (1,)) if self.continuous else Discrete(2)


TRUE_VALUE = 2.0          # gamma = 0.5, bootstrapping through truncation
WRONG_VALUE = 1.0 / (1.0 - 0.5 * 4 / 5)   # truncation treated as termination


def assert_actor_critic_bootstraps_through_truncation(config_cls, **overrides) -> None:
    """Trains ``config_cls`` (an actor-critic on rljax's on-policy skeleton) on :class:`Endless` with
    gamma 0.5 and asserts its critic learned V = :data:`TRUE_VALUE`, not :data:`WRONG_VALUE`."""
    import numpy as np

    import rljax
    from rljax.core.networks import ActorCritic

    cfg = config_cls(**{**dict(num_envs=16, num_steps=8, hidden_sizes=(16,), gamma=0.5, anneal_lr=False, ent_coef=0.0,
                               learning_rate=3e-3, total_timesteps=16 * 8 * 200), **overrides})
    result = rljax.train(cfg, env=Endless(), options=rljax.RunOptions(quiet=True))
    net = ActorCritic(action_dim=2, discrete=True, hidden_sizes=cfg.hidden_sizes)
    _, v = net.apply(result.state.params, jnp.ones((1, 1)))
    np.testing.assert_allclose(np.asarray(v), [TRUE_VALUE], atol=0.1)
    assert abs(float(v[0]) - WRONG_VALUE) > 0.2
