"""rljax.agents.c51: C51's head by hand (its q-values are the distributions' means; a terminated item
targets the point mass at its reward, a bootstrapped one the shifted next distribution) and its config's
refusals."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.agents.c51 import C51Config, categorical_head
from tests.unit.agents.test_qrdqn import _items

def test_c51s_q_values_are_the_means_and_a_terminated_item_targets_its_reward():
    head = categorical_head(5, 0.0, 4.0)  # atoms 0, 1, 2, 3, 4
    logits = jnp.log(jnp.asarray([[[0.5, 0.5, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 1.0]]]) + 1e-12)
    np.testing.assert_allclose(np.asarray(head.q_values(logits)), [[0.5, 4.0]], atol=1e-5)
    taken = jnp.log(jnp.asarray([[0.1, 0.2, 0.4, 0.2, 0.1]]))
    # Terminated (discount 0), reward 2.5: the target splits evenly between atoms 2 and 3.
    per_item, priority, m = head.td(taken, jnp.zeros((1, 5)), _items([0], [2.5], [0.0]))
    np.testing.assert_allclose(np.asarray(per_item), [-(0.5 * np.log(0.4) + 0.5 * np.log(0.2))], rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(priority), np.asarray(per_item))
    np.testing.assert_allclose(float(m["q_mean"]), 2.0, rtol=1e-5)
    np.testing.assert_allclose(float(m["z_std_mean"]), np.sqrt(0.1 * 4 + 0.2 * 1 + 0.2 * 1 + 0.1 * 4), rtol=1e-5)
    # Bootstrapped (discount 0.5) from a next distribution on atom 4: 1 + 0.5 * 4 = 3 -> all on atom 3.
    next_taken = jnp.log(jnp.asarray([[0.0, 0.0, 0.0, 0.0, 1.0]]) + 1e-30)
    per_item, _, _ = head.td(taken, next_taken, _items([0], [1.0], [0.5]))
    np.testing.assert_allclose(np.asarray(per_item), [-np.log(0.2)], rtol=1e-4)


@pytest.mark.parametrize("kw, match", [
    (dict(num_atoms=1), "num_atoms must be"),
    (dict(v_min=5.0, v_max=5.0), "v_min=5.0, v_max=5.0: v_max must be greater than v_min"),
    (dict(loss="huber"), "loss='huber': C51's loss is the cross-entropy"),
])
def test_bad_configs_are_refused_naming_the_value(kw, match):
    with pytest.raises(ValueError, match=match):
        C51Config(**kw).validate()


# Slow (a learning run): by default the head by hand above and tests/unit/core/test_distributional.py stand for it.
@pytest.mark.slow
def test_c51_learns_the_probes_return_distribution():
    """ProbeRandomReward-v0: the atoms -1.2 .. 1.2 every 0.1 hold +-1 and +-0.9 exactly; W1 to Z(obs) within
    5 % of the return range."""
    import rljax
    from rljax.core.distributional import support
    from rljax.core.networks import QNetwork
    from tests.unit.agents.test_qrdqn import PROBE_RUN, wasserstein_1

    result = rljax.train(C51Config(num_atoms=25, v_min=-1.2, v_max=1.2, **PROBE_RUN), options=rljax.RunOptions(quiet=True))
    params = result.agent.params_of(result.state)
    network = QNetwork(num_actions=2, hidden_sizes=(32,), num_atoms=25)
    atoms = np.asarray(support(-1.2, 1.2, 25))
    for obs in (0, 1):
        probs = np.asarray(jax.nn.softmax(network.apply(params, jnp.asarray([[float(obs)]])), axis=-1))[0]
        for a in range(2):
            w1 = wasserstein_1(atoms, probs[a], obs)
            assert w1 <= 0.05 * 2, (obs, a, w1, np.round(probs[a], 3))
