"""C51: DQN with a categorical return distribution (Bellemare, Dabney & Munos 2017, "A Distributional
Perspective on Reinforcement Learning").

The network outputs, per action, logits over ``num_atoms`` fixed atoms ``z_i`` evenly spaced on
``[v_min, v_max]`` (:func:`rljax.core.distributional.support`); ``Q(s, a) = sum_i p_i(s, a) z_i``
picks the greedy and bootstrap actions. The target of an item ``(s, a, R, discount, s')`` is the
distribution of ``R + discount * Z(s', a*)`` under the target network projected onto the atoms
(:func:`~rljax.core.distributional.categorical_projection`; ``discount = gamma^m`` folds in the n-step
window, 0 after a termination, so a truncated episode bootstraps through its final observation), and
the loss is the cross-entropy ``-sum_i target_i log p_i(s, a)``, which is also the item's priority
under prioritised replay (as in Rainbow, Hessel et al. 2018). Everything else (double, dueling,
n-step, prioritised replay, noisy layers, target updates, epsilon-greedy acting) is DQN's
(:mod:`rljax.agents.dqn`; :func:`~rljax.agents.dqn.make_q_learner` with :func:`categorical_head`).

``v_min``/``v_max`` must cover the returns: with rewards ``r`` per step and discount ``gamma`` a
value ``<= r_max / (1 - gamma)``; returns outside are clipped to the ends of the support.
Metrics add ``z_std_mean``: the mean standard deviation of the predicted distributions of the
taken actions.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from rljax.agents import register
from rljax.agents.base import Agent, discrete_actions
from rljax.agents.dqn import DQNConfig, QHead, make_q_learner
from rljax.agents.offpolicy import ReplayItem
from rljax.core.config import check_ints, field, hyperparams_class
from rljax.core.distributional import categorical_loss, categorical_mean_std, categorical_projection, support

__all__ = ["C51Config", "C51HyperParams", "categorical_head", "make_c51"]


@dataclasses.dataclass(frozen=True)
class C51Config(DQNConfig):
    """C51's configuration: DQN's (:class:`~rljax.agents.dqn.DQNConfig`) and the support. The
    defaults are DQN's CartPole-v1 ones with a support that covers CartPole's discounted returns
    (at most ``1 / (1 - 0.99) = 100``)."""

    num_atoms: int = field(51, "atoms of the categorical return distribution")
    v_min: float = field(0.0, "lowest atom (returns below it are clipped to it)")
    v_max: float = field(100.0, "highest atom (returns above it are clipped to it)")

    def validate(self) -> None:
        """DQN's checks, then the support's: ``2 <= num_atoms <= 1024``, ``v_min < v_max``; the TD
        loss field does not apply (C51's loss is the cross-entropy)."""
        super().validate()
        check_ints(self, ("num_atoms",), 2, 1024)
        if not self.v_max > self.v_min:
            raise ValueError(f"v_min={self.v_min}, v_max={self.v_max}: v_max must be greater than v_min")
        if self.loss != "mse":
            raise ValueError(f"loss={self.loss!r}: C51's loss is the cross-entropy to the projected target; "
                             "leave loss at its default")


C51HyperParams = hyperparams_class(C51Config)


def categorical_head(num_atoms: int, v_min: float, v_max: float) -> QHead:
    """The :class:`~rljax.agents.dqn.QHead` of C51: logits ``[..., A, K]``, ``Q = softmax(logits) . z``,
    the loss and priority the cross-entropy to the projected target."""
    atoms = support(v_min, v_max, num_atoms)

    def q_values(logits: jax.Array) -> jax.Array:
        return categorical_mean_std(logits, atoms)[0]

    def td(taken: jax.Array, next_taken: jax.Array, items: ReplayItem):
        target = categorical_projection(jax.nn.softmax(next_taken, axis=-1), items.reward, items.discount, atoms)
        per_item = categorical_loss(taken, target)
        mean, std = categorical_mean_std(taken, atoms)
        return per_item, per_item, {"q_mean": jnp.mean(mean), "z_std_mean": jnp.mean(std)}

    return QHead(num_atoms, q_values, td)


def make_c51(config: C51Config, env: Any, env_params: Any, axis_name: str | None = None) -> Agent:
    """Builds C51's per-device program for a discrete-action ``env``."""
    return make_q_learner(config, env, env_params, axis_name,
                          categorical_head(config.num_atoms, config.v_min, config.v_max), "C51")


register("c51", C51Config, make_c51, fits=lambda env, env_params: discrete_actions(env, env_params, "C51"))
