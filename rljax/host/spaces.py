"""The env of agents that learn from or act on host envs: their spaces, nothing to step in JAX.

An agent is built from an env (its spaces, and a ``reset``/``step`` it traces for shapes); a host env
(:class:`~rljax.host.base.HostEnv`) steps on the host. :class:`HostEnvSpaces` stands in for it when
the actor-learner path builds its learner and when a policy trained on host envs is loaded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["HostEnvFactory", "HostEnvSpaces"]

HostEnvFactory = Callable[..., Any]
"""``make(name, num_envs, render=False) -> HostEnv``: a batch of ``num_envs`` host envs that ``name``
names (``render``: envs that draw frames, ``env.render() -> uint8 [N, H, W, 3]``), as
:func:`rljax.host.sources.make_host_env` makes them."""


class HostEnvSpaces:
    """The env of a policy trained on host envs: their spaces and name, nothing to step in JAX.

    It follows the env contract as far as building an agent and acting need: ``reset`` gives an
    observation of zeros of the declared shape and dtype and ``step`` a template of zeros, both for
    reading shapes (``step`` raises when called with concrete values: host envs step on the host,
    :func:`rljax.policy.evaluate.evaluate`).

    Args:
        name: the run's ``config.env`` (``gymnasium/CartPole-v1``, ``envpool/Pong-v5``, ...).
        observation_space: a :class:`rljax.env.Box` or :class:`rljax.env.Discrete`.
        action_space: likewise.
        make: a :data:`HostEnvFactory`, or None when only acting and exporting are wanted.
    """

    default_params = None

    def __init__(self, name: str, observation_space: Any, action_space: Any, make: HostEnvFactory | None = None):
        self.name, self._make = name, make
        # Gymnasium's int64 Discrete spaces as JAX computes them without x64 (int32); the values are the same.
        self._observation_space, self._action_space = (_int32(observation_space), _int32(action_space))

    def observation_space(self, params: Any = None) -> Any:
        """The host envs' observation space, as their run's checkpoint recorded it."""
        return self._observation_space

    def action_space(self, params: Any = None) -> Any:
        """The host envs' action space, as their run's checkpoint recorded it."""
        return self._action_space

    def reset(self, key: Any, params: Any = None) -> tuple[jax.Array, tuple[()]]:
        """A zero observation of the recorded space and an empty state: the shapes a network is built
        from (no host env is made or stepped)."""
        space = self._observation_space
        return jnp.zeros(tuple(space.shape), space.dtype), ()

    def step(self, key: Any, state: Any, action: Any, params: Any = None) -> Any:
        """A shape template only: traced (an agent's wrappers read the shapes of a step), a step of
        zeros that ends nothing; called with concrete values, a ``TypeError``."""
        if not isinstance(action, jax.core.Tracer):
            raise TypeError(f"{self.name} is a host env: it is stepped on the host, not in JAX (evaluate the policy "
                            f"with rljax.policy.evaluate.evaluate or rljax eval)")
        obs, state = self.reset(key)
        return obs, state, jnp.float32(0.0), jnp.bool_(False), jnp.bool_(False), {}

    def on(self, name: str) -> HostEnvSpaces:
        """These spaces and factory, for the envs ``name`` names (another source of the same envs: a local
        ``gymnasium/<id>`` for a run trained on an env server). The caller checks that they fit."""
        return HostEnvSpaces(name, self._observation_space, self._action_space, self._make)

    def make(self, num_envs: int | None, render: bool = False) -> Any:
        """A batch of ``num_envs`` of these host envs (``render``: that draw frames; None: the source's
        own batch, an env server's, one env of the others).

        Raises:
            ValueError: the policy was loaded without a :data:`HostEnvFactory`.
        """
        if self._make is None:
            raise ValueError(f"these host envs' spaces ({self.name}) came with no factory to make the envs: build "
                             f"HostEnvSpaces with make=rljax.host.sources.make_host_env (rljax.load does)")
        return self._make(self.name, num_envs, render=render)

    def __repr__(self) -> str:
        return f"HostEnvSpaces({self.name!r})"

    @classmethod
    def of(cls, spec: Any, name: str = "the host envs") -> HostEnvSpaces:
        """The spaces of a :class:`~rljax.host.base.HostSpec` (``name``: what errors call the envs)."""
        return cls(name, spec.observation_space, spec.action_space)


def _int32(space: Any) -> Any:
    from rljax.env import Discrete, is_discrete

    return Discrete(space.n) if is_discrete(space) and np.dtype(space.dtype) == np.int64 else space
