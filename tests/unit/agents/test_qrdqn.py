"""rljax.agents.qrdqn: QR-DQN's head by hand, the Q-learning skeleton's loss with it on a hand-written
network (the bootstrap action by the head's q-values, double Q-learning by the online network's), and
its config's refusals."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from rljax.agents.dqn import q_learning_loss
from rljax.agents.offpolicy import ReplayItem
from rljax.agents.qrdqn import QRDQNConfig, quantile_head
from rljax.core.distributional import quantile_huber_loss, quantile_midpoints


def _items(action, reward, discount, obs=None, next_obs=None):
    n = len(action)
    obs = jnp.zeros((n, 1)) if obs is None else jnp.asarray(obs, jnp.float32)
    next_obs = jnp.ones((n, 1)) if next_obs is None else jnp.asarray(next_obs, jnp.float32)
    return ReplayItem(obs=obs, action=jnp.asarray(action, jnp.int32), reward=jnp.asarray(reward, jnp.float32),
                      discount=jnp.asarray(discount, jnp.float32), next_obs=next_obs, valid=jnp.ones(n, bool))


def test_qr_dqns_targets_are_the_reward_after_a_termination_and_shifted_quantiles_otherwise():
    head = quantile_head(4, 1.0)
    taken, next_taken = jnp.asarray([[0.0, 1.0, 2.0, 3.0]]), jnp.asarray([[2.0, 4.0, 6.0, 8.0]])
    taus = quantile_midpoints(4)
    per_item, priority, m = head.td(taken, next_taken, _items([0], [1.0], [0.0]))
    want = quantile_huber_loss(taken, jnp.ones((1, 4)), taus, 1.0)  # all four targets are R = 1
    np.testing.assert_allclose(np.asarray(per_item), np.asarray(want), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(priority), np.asarray(per_item))
    per_item, _, m = head.td(taken, next_taken, _items([0], [1.0], [0.5]))  # targets 2, 3, 4, 5
    want = quantile_huber_loss(taken, jnp.asarray([[2.0, 3.0, 4.0, 5.0]]), taus, 1.0)
    np.testing.assert_allclose(np.asarray(per_item), np.asarray(want), rtol=1e-6)
    assert float(m["quantile_spread_mean"]) == 3.0 and float(m["q_mean"]) == 1.5
    np.testing.assert_allclose(np.asarray(head.q_values(jnp.asarray([[[1.0, 3.0], [0.0, 10.0]]]))), [[2.0, 5.0]])


def test_the_skeletons_loss_takes_the_bootstrap_action_by_the_heads_q_values():
    """Quantiles per action (0, 2) and (1, 5): action 1 has the higher mean. The online network (params 2)
    sees them in reverse order at s' (obs 1), so double Q-learning bootstraps from action 0."""
    head, taus = quantile_head(2, 0.0), quantile_midpoints(2)

    def apply(params, obs):  # [N, 1] -> [N, 2 actions, 2 quantiles]
        base = jnp.asarray([[0.0, 2.0], [1.0, 5.0]])
        flip = (params == 2.0) & (obs[:, 0] == 1.0)
        return jnp.where(flip[:, None, None], base[::-1], base)

    items = _items([0], [0.0], [1.0], obs=[[0.0]], next_obs=[[1.0]])
    taken = jnp.asarray([[0.0, 2.0]])
    for double_q, a_star in ((False, 1), (True, 0)):
        loss, (priority, m) = q_learning_loss(jnp.float32(2.0), jnp.float32(1.0), apply, items, jnp.ones(1),
                                              double_q=double_q, head=head)
        want = quantile_huber_loss(taken, jnp.asarray([[0.0, 2.0], [1.0, 5.0]])[a_star][None], taus, 0.0)
        np.testing.assert_allclose(float(loss), float(want[0]), rtol=1e-6)
        assert float(m["td_loss"]) == float(loss)


@pytest.mark.parametrize("kw, match", [
    (dict(num_quantiles=0), "num_quantiles must be"),
    (dict(kappa=-1.0), "kappa"),
    (dict(loss="huber"), "loss='huber': QR-DQN's loss is the quantile Huber loss"),
])
def test_bad_configs_are_refused_naming_the_value(kw, match):
    with pytest.raises(ValueError, match=match):
        QRDQNConfig(**kw).validate()
