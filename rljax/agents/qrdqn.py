"""QR-DQN: DQN with the return distribution's quantiles (Dabney, Rowland, Bellemare & Munos 2018,
"Distributional Reinforcement Learning with Quantile Regression").

The network outputs, per action, ``num_quantiles`` values ``theta_i(s, a)``: the return
distribution's quantiles at the levels ``tau_hat_i = (2 i + 1) / (2 N)``
(:func:`rljax.core.distributional.quantile_midpoints`); ``Q(s, a) = mean_i theta_i(s, a)`` picks the
greedy and bootstrap actions. The targets of an item ``(s, a, R, discount, s')`` are the samples
``R + discount * theta_j(s', a*)`` of the target network (``discount = gamma^m``, 0 after a
termination: a terminated item's targets are all ``R``; a truncated one bootstraps through its final
observation), and the loss is the quantile Huber loss (eq. 10,
:func:`~rljax.core.distributional.quantile_huber_loss`), also the item's priority under prioritised
replay. No support to choose: the quantiles go where the returns are. Everything else is DQN's
(:mod:`rljax.agents.dqn`; :func:`~rljax.agents.dqn.make_q_learner` with :func:`quantile_head`).
Metrics add ``quantile_spread_mean``: the mean of ``max_i theta_i - min_i theta_i`` of the taken actions.
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
from rljax.core.config import check_floats, check_ints, field, hyperparams_class
from rljax.core.distributional import quantile_huber_loss, quantile_midpoints

__all__ = ["QRDQNConfig", "QRDQNHyperParams", "quantile_head", "make_qrdqn"]


@dataclasses.dataclass(frozen=True)
class QRDQNConfig(DQNConfig):
    """QR-DQN's configuration: DQN's (:class:`~rljax.agents.dqn.DQNConfig`), the number of quantiles
    and the Huber threshold (the paper: 200 quantiles, kappa 1)."""

    num_quantiles: int = field(51, "quantiles of the return distribution")
    kappa: float = field(1.0, "Huber threshold of the quantile loss (0: the plain quantile loss)")

    def validate(self) -> None:
        """DQN's checks, then ``1 <= num_quantiles <= 1024`` and ``kappa >= 0``; the TD loss field
        does not apply (QR-DQN's loss is the quantile Huber loss)."""
        super().validate()
        check_ints(self, ("num_quantiles",), 1, 1024)
        check_floats(self, ("kappa",), 0)
        if self.loss != "mse":
            raise ValueError(f"loss={self.loss!r}: QR-DQN's loss is the quantile Huber loss (its threshold is "
                             "kappa); leave loss at its default")


QRDQNHyperParams = hyperparams_class(QRDQNConfig)


def quantile_head(num_quantiles: int, kappa: float) -> QHead:
    """The :class:`~rljax.agents.dqn.QHead` of QR-DQN: quantiles ``[..., A, N]``, ``Q = mean_i theta_i``,
    the loss and priority the quantile Huber loss."""
    taus = quantile_midpoints(num_quantiles)

    def td(taken: jax.Array, next_taken: jax.Array, items: ReplayItem):
        targets = items.reward[:, None] + items.discount[:, None] * next_taken
        per_item = quantile_huber_loss(taken, targets, taus, kappa)
        spread = jnp.max(taken, axis=-1) - jnp.min(taken, axis=-1)
        return per_item, per_item, {"q_mean": jnp.mean(taken), "quantile_spread_mean": jnp.mean(spread)}

    return QHead(num_quantiles, lambda theta: jnp.mean(theta, axis=-1), td)


def make_qrdqn(config: QRDQNConfig, env: Any, env_params: Any, axis_name: str | None = None) -> Agent:
    """Builds QR-DQN's per-device program for a discrete-action ``env``."""
    return make_q_learner(config, env, env_params, axis_name, quantile_head(config.num_quantiles, config.kappa),
                          "QR-DQN")


register("qrdqn", QRDQNConfig, make_qrdqn, fits=lambda env, env_params: discrete_actions(env, env_params, "QR-DQN"))
