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


# ProbeRandomReward-v0 (envs/probes.py): Z(obs 1) = {+1: 3/4, -1: 1/4}, Z(obs 0) = gamma Z(obs 1).
PROBE_GAMMA = 0.9
PROBE_RUN = dict(env="ProbeRandomReward-v0", gamma=PROBE_GAMMA, num_envs=8, num_steps=1, batch_size=64,
                 buffer_size=4096, learning_starts=256, target_update_interval=200, hidden_sizes=(32,),
                 learning_rate=1e-3, total_timesteps=8 * 2500, updates_per_chunk=2500, epsilon_start=1.0,
                 epsilon_end=1.0)  # uniformly random actions: each action's distribution is learned


def true_quantile(u, obs):
    """The probe's return quantile function at levels ``u``: -1 below 1/4, +1 above, times gamma at obs 0."""
    return np.where(u < 0.25, -1.0, 1.0) * (PROBE_GAMMA if obs == 0 else 1.0)


def wasserstein_1(atoms, probs, obs):
    """W1 between the distribution with ``probs`` on ``atoms`` and the probe's Z(obs): the integral of
    the absolute difference of the quantile functions, on a fine grid of levels."""
    u = (np.arange(20000) + 0.5) / 20000
    order = np.argsort(atoms)
    cdf = np.cumsum(np.asarray(probs, np.float64)[order])
    learned = np.asarray(atoms, np.float64)[order][np.minimum(np.searchsorted(cdf, u), len(atoms) - 1)]
    return float(np.mean(np.abs(learned - true_quantile(u, obs))))


# Slow (a learning run): by default the head and the skeleton's loss by hand above and
# tests/unit/core/test_distributional.py stand for it.
@pytest.mark.slow
def test_qr_dqn_learns_the_probes_return_distribution():
    import rljax

    # kappa 0: the quantile loss itself. With kappa 1 and returns within 2 of each other the Huber loss is
    # quadratic almost everywhere, and its minimisers are expectiles, a smooth ramp between -1 and +1.
    result = rljax.train(QRDQNConfig(num_quantiles=32, kappa=0.0, **PROBE_RUN), options=rljax.RunOptions(quiet=True))
    params = result.agent.params_of(result.state)
    from rljax.core.networks import QNetwork

    network = QNetwork(num_actions=2, hidden_sizes=(32,), num_atoms=32)
    for obs in (0, 1):
        theta = np.asarray(network.apply(params, jnp.asarray([[float(obs)]])))[0]  # [2 actions, 32]
        for a in range(2):  # the actions do not matter: each learns Z(obs)
            w1 = wasserstein_1(theta[a], np.full(32, 1 / 32), obs)
            assert w1 <= 0.05 * 2, (obs, a, w1, np.sort(theta[a]))  # 5 % of the return range [-1, 1]
