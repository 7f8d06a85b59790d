"""Tests for rljax.core.returns: hand-computed GAE / n-step / Q(lambda) cases plus loop references on random
data, and the replay targets of TD3 (smoothed, clipped double Q) and SAC (soft) by hand."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.core.returns import (clipped_double_q_target, gae, n_step_targets, n_step_transitions, q_lambda_targets,
                                smoothed_target_action, soft_td_target, vtrace)

GAMMA = 0.9
LAMBDA = 0.8  # gamma * lambda = 0.72

gae_jit = jax.jit(gae)
n_step_jit = jax.jit(n_step_targets, static_argnames="n")


def _both(fn, fn_jit, *args, **kwargs):
    """Runs ``fn`` eagerly and under jit, checks they agree, returns the eager result."""
    eager = fn(*args, **kwargs)
    jitted = fn_jit(*args, **kwargs)
    for e, j in zip(jax.tree.leaves(eager), jax.tree.leaves(jitted)):
        np.testing.assert_allclose(np.asarray(e), np.asarray(j), rtol=1e-6, atol=1e-6)
    return eager


def _gae(*args, **kwargs):
    return _both(gae, gae_jit, *args, **kwargs)


def _nstep(*args, **kwargs):
    return _both(n_step_targets, n_step_jit, *args, **kwargs)


def _close(actual, expected):
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected, np.float32), rtol=1e-5,
                               atol=1e-5)


# --------------------------------------------------------------------------------------------------
# GAE, hand-computed (gamma = 0.9, lambda = 0.8, gamma * lambda = 0.72)
# --------------------------------------------------------------------------------------------------

R3 = [1.0, 2.0, 3.0]
V3 = [0.5, 1.0, 1.5]


def test_gae_no_episode_end():
    # next_values[t] = V(s_{t+1}); next_values[2] = V(s_3) = 2.0 (rollout boundary).
    nv = [1.0, 1.5, 2.0]
    # delta_0 = 1 + 0.9*1.0 - 0.5 = 1.4
    # delta_1 = 2 + 0.9*1.5 - 1.0 = 2.35
    # delta_2 = 3 + 0.9*2.0 - 1.5 = 3.3
    # A_2 = 3.3
    # A_1 = 2.35 + 0.72*3.3   = 2.35 + 2.376   = 4.726
    # A_0 = 1.4  + 0.72*4.726 = 1.4  + 3.40272 = 4.80272
    adv, tgt = _gae(R3, V3, nv, [0, 0, 0], [0, 0, 0], GAMMA, LAMBDA)
    _close(adv, [4.80272, 4.726, 3.3])
    _close(tgt, [4.80272 + 0.5, 4.726 + 1.0, 3.3 + 1.5])


R4 = [1.0, 2.0, 3.0, 4.0]
V4 = [0.5, 1.0, 1.5, 2.0]  # values[2] = 1.5 is V of the *reset* observation after step 1.


def test_gae_termination_in_middle():
    # Episode terminates at t=1; s_2 is the first obs of a new episode.
    # next_values[1] = 7.0 is V(final_obs_1) and must be ignored (terminated => bootstrap 0).
    nv = [1.0, 7.0, 2.0, 2.5]
    term = [False, True, False, False]
    # delta_0 = 1 + 0.9*1.0 - 0.5 = 1.4
    # delta_1 = 2 + 0         - 1.0 = 1.0
    # delta_2 = 3 + 0.9*2.0 - 1.5 = 3.3
    # delta_3 = 4 + 0.9*2.5 - 2.0 = 4.25
    # A_3 = 4.25
    # A_2 = 3.3 + 0.72*4.25 = 3.3 + 3.06 = 6.36
    # A_1 = 1.0                      (done_1 cuts the recursion: A_2 belongs to the next episode)
    # A_0 = 1.4 + 0.72*1.0 = 2.12
    adv, tgt = _gae(R4, V4, nv, term, [False] * 4, GAMMA, LAMBDA)
    _close(adv, [2.12, 1.0, 6.36, 4.25])
    _close(tgt, [2.62, 2.0, 7.86, 6.25])


def test_gae_truncation_in_middle_bootstraps_from_final_observation():
    # Episode truncated at t=1: V(final_obs_1) = 3.0, while V(reset obs s_2) = values[2] = 1.5.
    nv = [1.0, 3.0, 2.0, 2.5]
    trunc = [False, True, False, False]
    # delta_1 = 2 + 0.9*3.0 - 1.0 = 3.7      (NOT 2 + 0.9*1.5 - 1.0 = 2.35 from the reset obs)
    # A_1 = 3.7                              (cut at the episode end, bootstrap is in delta_1)
    # A_0 = 1.4 + 0.72*3.7 = 1.4 + 2.664 = 4.064
    # A_2 = 6.36, A_3 = 4.25 as in the termination case.
    adv, tgt = _gae(R4, V4, nv, [False] * 4, trunc, GAMMA, LAMBDA)
    _close(adv, [4.064, 3.7, 6.36, 4.25])
    _close(tgt, [4.564, 4.7, 7.86, 6.25])

    # Using V(next reset obs) as the bootstrap would give a different answer.
    wrong_nv = [1.0, 1.5, 2.0, 2.5]
    wrong_adv, _ = gae(R4, V4, wrong_nv, [False] * 4, trunc, GAMMA, LAMBDA)
    assert not np.allclose(np.asarray(wrong_adv)[:2], [4.064, 3.7])
    _close(wrong_adv[1], 2.35)


def test_gae_termination_at_rollout_boundary():
    nv = [1.0, 1.5, 9.0]  # 9.0 = V(final_obs_2), ignored.
    # delta_2 = 3 - 1.5 = 1.5;  A_2 = 1.5
    # A_1 = 2.35 + 0.72*1.5  = 2.35 + 1.08   = 3.43
    # A_0 = 1.4  + 0.72*3.43 = 1.4  + 2.4696 = 3.8696
    expected = [3.8696, 3.43, 1.5]
    adv, _ = _gae(R3, V3, nv, [0, 0, 1], [0, 0, 0], GAMMA, LAMBDA)
    _close(adv, expected)
    # Terminated and truncated together: termination wins (no bootstrap).
    adv_both, _ = _gae(R3, V3, nv, [0, 0, 1], [0, 0, 1], GAMMA, LAMBDA)
    _close(adv_both, expected)


def test_gae_truncation_at_rollout_boundary():
    nv = [1.0, 1.5, 4.0]  # 4.0 = V(final_obs_2)
    # delta_2 = 3 + 0.9*4.0 - 1.5 = 5.1;  A_2 = 5.1
    # A_1 = 2.35 + 0.72*5.1   = 2.35 + 3.672   = 6.022
    # A_0 = 1.4  + 0.72*6.022 = 1.4  + 4.33584 = 5.73584
    adv, tgt = _gae(R3, V3, nv, [0, 0, 0], [0, 0, 1], GAMMA, LAMBDA)
    _close(adv, [5.73584, 6.022, 5.1])
    _close(tgt, [6.23584, 7.022, 6.6])


def test_gae_lambda_one_is_monte_carlo_plus_bootstrap():
    # Termination data (episode ends at t=1, bootstrap 0):
    nv = [1.0, 7.0, 2.0, 2.5]
    term = [0, 1, 0, 0]
    # G_0 = 1 + 0.9*2                   = 2.8
    # G_1 = 2                           = 2.0
    # G_2 = 3 + 0.9*4 + 0.81*2.5        = 3 + 3.6 + 2.025 = 8.625   (bootstrap at rollout end)
    # G_3 = 4 + 0.9*2.5                 = 6.25
    _, tgt = _gae(R4, V4, nv, term, [0] * 4, GAMMA, 1.0)
    _close(tgt, [2.8, 2.0, 8.625, 6.25])
    # Truncation data (bootstrap from V(final_obs_1) = 3.0):
    # G_0 = 1 + 0.9*2 + 0.81*3.0 = 1 + 1.8 + 2.43 = 5.23;  G_1 = 2 + 0.9*3.0 = 4.7
    _, tgt = _gae(R4, V4, [1.0, 3.0, 2.0, 2.5], [0] * 4, [0, 1, 0, 0], GAMMA, 1.0)
    _close(tgt, [5.23, 4.7, 8.625, 6.25])


def test_gae_lambda_zero_is_one_step_td():
    nv = [1.0, 3.0, 2.0, 2.5]
    # delta = [1.4, 2 + 0.9*3.0 - 1.0 = 3.7, 3.3, 4.25]
    adv, tgt = _gae(R4, V4, nv, [0] * 4, [0, 1, 0, 0], GAMMA, 0.0)
    _close(adv, [1.4, 3.7, 3.3, 4.25])
    _close(tgt, [1.9, 4.7, 4.8, 6.25])


# --------------------------------------------------------------------------------------------------
# GAE vs a Python-loop reference on random data
# --------------------------------------------------------------------------------------------------


def _gae_reference(r, v, nv, term, trunc, gamma, lam):
    r, v, nv = (np.asarray(x, np.float64) for x in (r, v, nv))
    term, trunc = np.asarray(term, bool), np.asarray(trunc, bool)
    adv = np.zeros_like(r)
    next_adv = np.zeros(r.shape[1:])
    for t in reversed(range(r.shape[0])):
        delta = r[t] + gamma * np.where(term[t], 0.0, nv[t]) - v[t]
        next_adv = delta + gamma * lam * np.where(term[t] | trunc[t], 0.0, next_adv)
        adv[t] = next_adv
    return adv, adv + v


def _random_rollout(seed, shape):
    rng = np.random.default_rng(seed)
    r = rng.normal(size=shape).astype(np.float32)
    v = rng.normal(size=shape).astype(np.float32)
    nv = rng.normal(size=shape).astype(np.float32)
    term = rng.random(shape) < 0.2
    trunc = rng.random(shape) < 0.2  # some steps have both flags set
    return r, v, nv, term, trunc


@pytest.mark.parametrize("shape", [(11, 6), (9,)])
@pytest.mark.parametrize("gamma,lam", [(0.99, 0.95), (0.9, 0.0), (0.97, 1.0)])
def test_gae_matches_loop_reference(shape, gamma, lam):
    r, v, nv, term, trunc = _random_rollout(0, shape)
    assert (term & trunc).any() or len(shape) == 1
    # jit only here (one compile per shape); the hand-computed cases cover eager vs jit.
    adv, tgt = gae_jit(r, v, nv, term, trunc, gamma, lam)
    ref_adv, ref_tgt = _gae_reference(r, v, nv, term, trunc, gamma, lam)
    assert adv.shape == shape and tgt.shape == shape and adv.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(adv), ref_adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(tgt), ref_tgt, rtol=1e-5, atol=1e-5)


def test_gae_batched_equals_per_column():
    r, v, nv, term, trunc = _random_rollout(1, (8, 3))
    adv, _ = gae(r, v, nv, term, trunc, 0.99, 0.95)
    # The [T] path applied to each column (vmapped over B) must reproduce the [T, B] result.
    per_column = jax.vmap(lambda *xs: gae(*xs, 0.99, 0.95)[0], in_axes=1, out_axes=1)
    np.testing.assert_allclose(np.asarray(adv), np.asarray(per_column(r, v, nv, term, trunc)),
                               rtol=1e-6, atol=1e-6)


def test_gae_traced_gamma_and_lambda():
    r, v, nv, term, trunc = _random_rollout(2, (6, 2))
    fn = jax.jit(lambda g, l: gae(r, v, nv, term, trunc, g, l)[0])
    np.testing.assert_allclose(np.asarray(fn(0.95, 0.9)),
                               _gae_reference(r, v, nv, term, trunc, 0.95, 0.9)[0], rtol=1e-5,
                               atol=1e-5)


def test_gae_shape_and_rank_errors():
    ok = np.zeros((4, 2), np.float32)
    with pytest.raises(AssertionError, match="same shape"):
        gae(ok, ok, np.zeros((4, 3)), ok, ok, 0.9, 0.8)
    bad = np.zeros((4, 2, 2), np.float32)
    with pytest.raises(AssertionError, match=r"\[T\] or \[T, B\]"):
        gae(bad, bad, bad, bad, bad, 0.9, 0.8)


# --------------------------------------------------------------------------------------------------
# n-step targets (gamma = 0.9; gamma^2 = 0.81, gamma^3 = 0.729)
# --------------------------------------------------------------------------------------------------

R5 = [1.0, 2.0, 3.0, 4.0, 5.0]
NV5 = [10.0, 20.0, 30.0, 40.0, 50.0]  # distinct values show which bootstrap was used
F5 = [False] * 5


def test_n_step_no_episode_end():
    # n = 3:
    # G_0 = 1 + 0.9*2 + 0.81*3 + 0.729*NV[2]=30 = 1 + 1.8 + 2.43 + 21.87 = 27.1
    # G_1 = 2 + 0.9*3 + 0.81*4 + 0.729*40       = 2 + 2.7 + 3.24 + 29.16 = 37.1
    # G_2 = 3 + 0.9*4 + 0.81*5 + 0.729*50       = 3 + 3.6 + 4.05 + 36.45 = 47.1
    # window end (fewer than n steps left), bootstrap from NV[4] = 50:
    # G_3 = 4 + 0.9*5 + 0.81*50 = 4 + 4.5 + 40.5 = 49.0
    # G_4 = 5 + 0.9*50         = 50.0
    _close(_nstep(R5, F5, F5, NV5, GAMMA, n=3), [27.1, 37.1, 47.1, 49.0, 50.0])


def test_n_step_termination_inside_window():
    term = [False, False, False, True, False]
    # G_0 = 27.1 (window 0..2 ends before the termination at t=3)
    # G_1 = 2 + 0.9*3 + 0.81*4 + 0 = 2 + 2.7 + 3.24 = 7.94
    # G_2 = 3 + 0.9*4 + 0          = 6.6
    # G_3 = 4 + 0                  = 4.0
    # G_4 = 5 + 0.9*50             = 50.0   (new episode)
    _close(_nstep(R5, term, F5, NV5, GAMMA, n=3), [27.1, 7.94, 6.6, 4.0, 50.0])


def test_n_step_truncation_inside_window():
    trunc = [False, True, False, False, False]  # NV[1] = 20 is V(final_obs_1)
    # G_0 = 1 + 0.9*2 + 0.81*20 = 1 + 1.8 + 16.2 = 19.0
    # G_1 = 2 + 0.9*20          = 20.0
    # G_2..G_4 unchanged: 47.1, 49.0, 50.0
    _close(_nstep(R5, F5, trunc, NV5, GAMMA, n=3), [19.0, 20.0, 47.1, 49.0, 50.0])
    # With termination instead, there is no bootstrap: G_0 = 1 + 1.8 = 2.8, G_1 = 2.
    _close(_nstep(R5, trunc, F5, NV5, GAMMA, n=3), [2.8, 2.0, 47.1, 49.0, 50.0])
    # Both flags: termination wins.
    _close(_nstep(R5, trunc, trunc, NV5, GAMMA, n=3), [2.8, 2.0, 47.1, 49.0, 50.0])


def test_n_step_one_is_td_target_and_large_n_is_monte_carlo():
    term = [False, True, False, False, False]
    # n = 1: r + 0.9 * (1 - term) * NV = [1 + 9, 2, 3 + 27, 4 + 36, 5 + 45]
    _close(_nstep(R5, term, F5, NV5, GAMMA, n=1), [10.0, 2.0, 30.0, 40.0, 50.0])
    # n >= T: full return to the episode / window end.
    # G_2 = 3 + 0.9*4 + 0.81*5 + 0.729*50 = 47.1 ; G_0 = 1 + 0.9*2 = 2.8
    _close(_nstep(R5, term, F5, NV5, GAMMA, n=10), [2.8, 2.0, 47.1, 49.0, 50.0])


def _n_step_reference(r, term, trunc, nv, gamma, n):
    r, nv = np.asarray(r, np.float64), np.asarray(nv, np.float64)
    term, trunc = np.asarray(term, bool), np.asarray(trunc, bool)
    T = r.shape[0]
    out = np.zeros_like(r)
    for t in range(T):
        for idx in np.ndindex(r.shape[1:]):
            g, disc = 0.0, 1.0
            for k in range(n):
                s = t + k
                g += disc * r[(s, *idx)]
                disc *= gamma
                if term[(s, *idx)]:
                    break
                if trunc[(s, *idx)] or k == n - 1 or s == T - 1:
                    g += disc * nv[(s, *idx)]
                    break
            out[(t, *idx)] = g
    return out


@pytest.mark.parametrize("shape", [(10, 4), (7,)])
@pytest.mark.parametrize("n", [1, 3, 5])
def test_n_step_matches_loop_reference(shape, n):
    r, _, nv, term, trunc = _random_rollout(3 + n, shape)
    got = n_step_jit(r, term, trunc, nv, 0.97, n=n)
    assert got.shape == shape and got.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(got), _n_step_reference(r, term, trunc, nv, 0.97, n),
                               rtol=1e-5, atol=1e-5)


def test_n_step_errors():
    x = np.zeros((4, 2), np.float32)
    for bad_n in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="n must be"):
            n_step_targets(x, x, x, x, 0.9, bad_n)
    with pytest.raises(AssertionError, match="same shape"):
        n_step_targets(x, x, x, np.zeros((4,)), 0.9, 2)


# ---------------------------------------------------------------------------------------------
# n_step_transitions (replay-side n-step)
# ---------------------------------------------------------------------------------------------


def test_n_step_transitions_by_hand():
    # T = 5, n = 3, gamma = 0.5. Rewards 1, 2, 3, 4, 5. Step 1 truncates, step 3 terminates.
    r = jnp.array([1.0, 2.0, 3.0, 4.0, 5.0])
    term = jnp.array([False, False, False, True, False])
    trunc = jnp.array([False, True, False, False, False])
    ns = n_step_transitions(r, term, trunc, 0.5, 3)
    # t=0: steps 0, 1 (truncated at 1): R = 1 + 0.5*2 = 2, m = 2, discount 0.25, bootstrap at 1.
    # t=1: step 1 truncates: R = 2, m = 1, discount 0.5, bootstrap at 1.
    # t=2: steps 2, 3 (terminated at 3): R = 3 + 0.5*4 = 5, discount 0 (no bootstrap), index 3.
    np.testing.assert_allclose(ns.returns, [2.0, 2.0, 5.0])
    np.testing.assert_allclose(ns.discounts, [0.25, 0.5, 0.0])
    np.testing.assert_array_equal(ns.bootstrap_index, [1, 1, 3])
    # n = 1 is the one-step transition: R = r, discount = gamma * (1 - terminated).
    ns1 = n_step_transitions(r, term, trunc, 0.5, 1)
    np.testing.assert_allclose(ns1.returns, r)
    np.testing.assert_allclose(ns1.discounts, [0.5, 0.5, 0.5, 0.0, 0.5])
    np.testing.assert_array_equal(ns1.bootstrap_index, [0, 1, 2, 3, 4])
    # A full window with no episode end: R = 3 + 0.5*4 + 0.25*5, discount 0.125, index 4.
    ns = n_step_transitions(r[2:], jnp.zeros(3, bool), jnp.zeros(3, bool), 0.5, 3)
    np.testing.assert_allclose(ns.returns, [3 + 2 + 1.25])
    np.testing.assert_allclose(ns.discounts, [0.125])
    np.testing.assert_array_equal(ns.bootstrap_index, [2])


def test_n_step_transitions_agree_with_n_step_targets():
    """returns + discounts * V[bootstrap_index] == n_step_targets on every full window."""
    key = jax.random.key(0)
    k1, k2, k3, k4 = jax.random.split(key, 4)
    T, B, n, gamma = 12, 5, 4, 0.9
    r = jax.random.normal(k1, (T, B))
    term = jax.random.bernoulli(k2, 0.15, (T, B))
    trunc = jax.random.bernoulli(k3, 0.15, (T, B))
    v = jax.random.normal(k4, (T, B))
    ns = jax.jit(n_step_transitions, static_argnums=4)(r, term, trunc, gamma, n)
    boot = jnp.take_along_axis(v, ns.bootstrap_index, axis=0)
    targets = n_step_targets(r, term, trunc, v, gamma, n)
    np.testing.assert_allclose(ns.returns + ns.discounts * boot, targets[: T - n + 1], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="larger than the window"):
        n_step_transitions(r[:2], term[:2], trunc[:2], gamma, 3)


# ----- Q(lambda) (PQN's targets) -----

R = [1.0, 2.0, 3.0, 4.0]
BOOT = [10.0, 20.0, 30.0, 40.0]
NO = [0, 0, 0, 0]


def _g(term, trunc, lam, gamma=0.5, rewards=R, boot=BOOT):
    return np.asarray(q_lambda_targets(jnp.array(rewards), jnp.array(boot), jnp.array(term), jnp.array(trunc),
                                       gamma, lam))


def test_q_lambda_targets_by_hand():
    # gamma = lambda = 0.5. G_3 = 4 + 0.5 * 40 = 24; G_2 = 3 + 0.5 * (0.5 * 24 + 0.5 * 30) = 16.5;
    # G_1 = 2 + 0.5 * (0.5 * 16.5 + 0.5 * 20) = 11.125; G_0 = 1 + 0.5 * (0.5 * 11.125 + 0.5 * 10) = 6.28125.
    np.testing.assert_allclose(_g(NO, NO, 0.5), [6.28125, 11.125, 16.5, 24.0])
    # Terminated at t=1 (G_1 = r), truncated at t=2 (G_2 = r + gamma * boot = 3 + 15, no trace through the cut).
    np.testing.assert_allclose(_g([0, 1, 0, 0], [0, 0, 1, 0], 0.5), [1 + 0.5 * (0.5 * 2 + 0.5 * 10), 2, 18, 24])
    # Termination at the rollout's last step: no bootstrap; both flags at t=2: termination wins.
    np.testing.assert_allclose(_g([0, 0, 0, 1], NO, 0.5)[2:], [3 + 0.5 * (0.5 * 4 + 0.5 * 30), 4])
    np.testing.assert_allclose(_g([0, 0, 1, 0], [0, 0, 1, 0], 0.5)[2], 3.0)
    # lambda = 0: one-step Q-learning targets r + gamma * (1 - term) * boot, whatever the flags.
    term, trunc = [0, 1, 0, 0], [0, 0, 1, 1]
    np.testing.assert_allclose(_g(term, trunc, 0.0), np.array(R) + 0.5 * (1 - np.array(term)) * np.array(BOOT))
    # lambda = 1 with every episode terminated: the discounted returns, the bootstrap never used.
    np.testing.assert_allclose(_g([0, 1, 0, 1], NO, 1.0), [1 + 0.5 * 2, 2, 3 + 0.5 * 4, 4])
    np.testing.assert_allclose(_g([0, 0, 0, 1], NO, 1.0, gamma=0.9)[0], sum(0.9 ** t * r for t, r in enumerate(R)))
    # [T, B]: columns are independent.
    both = q_lambda_targets(jnp.array([R, R]).T, jnp.array([BOOT, BOOT]).T, jnp.array([NO, [0, 1, 0, 0]]).T,
                            jnp.array([NO, [0, 0, 1, 0]]).T, 0.5, 0.5)
    np.testing.assert_allclose(np.asarray(both)[:, 1], _g([0, 1, 0, 0], [0, 0, 1, 0], 0.5))
    with pytest.raises(ValueError, match="share one shape"):
        q_lambda_targets(jnp.zeros(3), jnp.zeros(4), jnp.zeros(3), jnp.zeros(3), 0.9, 0.9)


def test_q_lambda_targets_with_a_discount_per_step_back_up_a_two_player_game():
    # A game: moves at t = 0, 1, 2 alternate players (discount -1 each), the mover at t=2 wins (+1, terminated);
    # a new game starts at t=3 and the rollout cuts it: bootstrap from -V(next) from the next mover's side.
    rewards, boot = [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.25]
    term, trunc = [0, 0, 1, 0], NO
    g = q_lambda_targets(jnp.array(rewards), jnp.array(boot), jnp.array(term), jnp.array(trunc),
                         jnp.full((4,), -1.0), 1.0)
    np.testing.assert_allclose(g, [1.0, -1.0, 1.0, -0.25])  # the winner's moves +1, the loser's -1
    # A scalar and the same discount on every step give the same bits.
    same = q_lambda_targets(jnp.array(R), jnp.array(BOOT), jnp.array(NO), jnp.array(NO), jnp.full((4,), 0.5), 0.5)
    np.testing.assert_array_equal(np.asarray(same), np.asarray(_g(NO, NO, 0.5)))
    with pytest.raises(ValueError, match=r"gamma must be a scalar or one per step \(4,\); got \(3,\)"):
        q_lambda_targets(jnp.zeros(4), jnp.zeros(4), jnp.zeros(4), jnp.zeros(4), jnp.zeros(3), 0.9)


def test_q_lambda_targets_are_gae_lambda_returns():
    # With boot_t = V(next_obs_t) and V(s_{t+1}) = boot_t inside episodes, Q(lambda) targets are GAE's
    # lambda-returns (advantages + values): the same recursion, cut the same way at episode ends.
    k = jax.random.split(jax.random.key(0), 4)
    t, b = 12, 5
    rewards, boot = jax.random.normal(k[0], (t, b)), jax.random.normal(k[1], (t, b))
    term, trunc = jax.random.bernoulli(k[2], 0.2, (t, b)), jax.random.bernoulli(k[3], 0.2, (t, b))
    values = jnp.concatenate([jnp.zeros((1, b)), jnp.where(term | trunc, 7.0, boot)[:-1]])
    _, lambda_returns = gae(rewards, values, boot, term, trunc, 0.9, 0.7)
    np.testing.assert_allclose(q_lambda_targets(rewards, boot, term, trunc, 0.9, 0.7), lambda_returns, atol=1e-5)


# ----- replay targets of the twin-critic methods (items: terminated, a full step, a truncated step) -----

REPLAY_GAMMA = 0.99
REWARD = jnp.array([1.0, 2.0, 0.5])
# discount = gamma^m, 0 after a termination; a truncated item keeps gamma (it bootstraps from its final obs).
DISCOUNT = jnp.array([0.0, REPLAY_GAMMA, REPLAY_GAMMA])
NEXT_Q = jnp.array([[3.0, 1.0, 2.0], [1.0, 4.0, -1.0]])   # the twins; their min: [1, 1, -1]


def test_smoothed_target_action_clips_the_noise_then_the_box():
    # Box [-2, 2] x [0, 1]: half-widths [2, 0.5]; policy_noise 0.2, noise_clip 0.5 (half-widths).
    low, high = jnp.array([-2.0, 0.0]), jnp.array([2.0, 1.0])
    mu = jnp.array([[0.0, 0.5], [1.8, 0.9], [0.0, 0.5]])
    eps = jnp.array([[1.0, -1.0],     # noise 0.2 * eps = [0.2, -0.2] -> [+0.4, -0.1] in env units
                     [1.0, 1.0],      # [+0.4, +0.1]: 2.2 and 1.0 -> box-clipped to 2.0, 1.0
                     [10.0, -10.0]])  # [2, -2] -> noise-clipped to [0.5, -0.5] -> [+1.0, -0.25]
    a = smoothed_target_action(mu, eps, low, high, jnp.float32(0.2), jnp.float32(0.5))
    np.testing.assert_allclose(a, [[0.4, 0.4], [2.0, 1.0], [1.0, 0.25]], rtol=1e-6)


def test_clipped_double_q_target_takes_the_min_of_the_twins_and_stops_at_termination():
    # y = r + d * min Q': [1 + 0 * 1, 2 + 0.99 * 1, 0.5 + 0.99 * (-1)] = [1, 2.99, -0.49]
    np.testing.assert_allclose(clipped_double_q_target(REWARD, DISCOUNT, NEXT_Q), [1.0, 2.99, -0.49], rtol=1e-6)


def test_soft_td_target_by_hand():
    next_log_prob = jnp.array([-1.0, 0.5, 2.0])
    # y = r + d * (min Q' - 0.2 log pi): [1 + 0, 2 + 0.99 * (1 - 0.1), 0.5 + 0.99 * (-1 - 0.4)]
    #   = [1, 2.891, -0.886]
    y = soft_td_target(REWARD, DISCOUNT, NEXT_Q, next_log_prob, jnp.float32(0.2))
    np.testing.assert_allclose(y, [1.0, 2.891, -0.886], rtol=1e-6)
    # alpha = 0: the clipped double-Q target.
    np.testing.assert_allclose(soft_td_target(REWARD, DISCOUNT, NEXT_Q, next_log_prob, 0.0),
                               clipped_double_q_target(REWARD, DISCOUNT, NEXT_Q), rtol=1e-6)


# ----- V-trace -----


def _vtrace_by_definition(r, v, nv, term, trunc, log_rho, gamma, lam, rho_clip, c_clip, pg_clip):
    """IMPALA's sum form, episode by episode, in float64: v_s = V(s) + sum_t gamma^(t-s) (prod_{i<t} c_i) delta_t
    over the steps t >= s of s's episode inside the rollout."""
    T = len(r)
    ratio = np.exp(log_rho)
    rho, c = np.minimum(rho_clip, ratio), lam * np.minimum(c_clip, ratio)
    delta = rho * (r + gamma * (1 - term) * nv - v)
    vs = np.zeros(T)
    for s in range(T):
        total, weight = 0.0, 1.0
        for t in range(s, T):
            total += weight * delta[t]
            if term[t] or trunc[t]:
                break
            weight *= gamma * c[t]
        vs[s] = v[s] + total
    following = np.array([nv[t] if (term[t] or trunc[t] or t == T - 1) else vs[t + 1] for t in range(T)])
    pg = np.minimum(pg_clip, ratio) * (r + gamma * (1 - term) * following - v)
    return vs, pg


def test_vtrace_by_hand():
    """T = 3, gamma 0.5, lambda 1; ratios e^0 = 1, e^ln2 = 2 (clipped to 1), e^ln(1/2); no episode end."""
    r, v, nv = np.array([1.0, 0.0, 2.0]), np.array([0.5, 1.0, 1.5]), np.array([1.0, 1.5, 4.0])
    log_rho = np.log([1.0, 2.0, 0.5])
    vs, pg = vtrace(r, v, nv, np.zeros(3, bool), np.zeros(3, bool), log_rho, 0.5)
    # delta = rho * (r + 0.5 nv - v): [1 + 0.5 - 0.5, 0 + 0.75 - 1, 0.5 * (2 + 2 - 1.5)] = [1, -0.25, 1.25]
    # c = [1, 1, 0.5]; acc_2 = 1.25, acc_1 = -0.25 + 0.5 * 1 * 1.25 = 0.375, acc_0 = 1 + 0.5 * 0.375 = 1.1875
    np.testing.assert_allclose(vs, [0.5 + 1.1875, 1.0 + 0.375, 1.5 + 1.25])
    # pg: rho_pg = [1, 1, 0.5]; following = [vs_1, vs_2, nv_2] = [1.375, 2.75, 4]
    np.testing.assert_allclose(pg, [1 + 0.5 * 1.375 - 0.5, 0 + 0.5 * 2.75 - 1.0, 0.5 * (2 + 0.5 * 4 - 1.5)])


def test_vtrace_stops_at_episode_ends_and_bootstraps_only_through_truncation():
    r, v, nv = np.array([1.0, 1.0, 1.0]), np.array([0.0, 0.0, 0.0]), np.array([10.0, 20.0, 30.0])
    zeros = np.zeros(3)
    term = np.array([True, False, False])
    trunc = np.array([False, True, False])
    vs, pg = vtrace(r, v, nv, term, trunc, zeros, 0.9)
    # t=0 terminated: no bootstrap, nothing of t=1 leaks in; t=1 truncated: r + 0.9 * V(final) = 19;
    # t=2 the rollout's end: r + 0.9 * 30.
    np.testing.assert_allclose(vs, [1.0, 1.0 + 0.9 * 20, 1.0 + 0.9 * 30], rtol=1e-6)
    np.testing.assert_allclose(pg, [1.0, 1.0 + 0.9 * 20, 1.0 + 0.9 * 30], rtol=1e-6)


@pytest.mark.parametrize("lam", [0.0, 0.7, 1.0])
def test_on_policy_vtrace_targets_are_gaes_lambda_returns(lam):
    rng = np.random.default_rng(int(lam * 10))
    T, B = 12, 5
    r, v, nv = (rng.normal(size=(T, B)).astype(np.float32) for _ in range(3))
    term, trunc = rng.random((T, B)) < 0.15, rng.random((T, B)) < 0.15
    vs, _ = vtrace(r, v, nv, term, trunc, np.zeros((T, B), np.float32), 0.95, lam)
    _, targets = gae(r, v, nv, term, trunc, 0.95, lam)
    np.testing.assert_allclose(vs, targets, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("clips", [(1.0, 1.0, 1.0), (2.0, 0.5, 1.5)])
def test_vtrace_equals_its_definition_off_policy(clips):
    rng = np.random.default_rng(3)
    T, B = 10, 4
    r, v, nv = (rng.normal(size=(T, B)) for _ in range(3))
    term, trunc = rng.random((T, B)) < 0.2, rng.random((T, B)) < 0.2
    log_rho = rng.normal(scale=0.7, size=(T, B))
    vs, pg = jax.jit(vtrace, static_argnames=("rho_clip", "c_clip", "pg_rho_clip"))(
        r.astype(np.float32), v.astype(np.float32), nv.astype(np.float32), term, trunc, log_rho.astype(np.float32),
        0.9, 0.8, rho_clip=clips[0], c_clip=clips[1], pg_rho_clip=clips[2])
    for b in range(B):
        want_vs, want_pg = _vtrace_by_definition(r[:, b], v[:, b], nv[:, b], term[:, b], trunc[:, b], log_rho[:, b],
                                                 0.9, 0.8, *clips)
        np.testing.assert_allclose(vs[:, b], want_vs, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(pg[:, b], want_pg, rtol=1e-5, atol=1e-5)


def test_vtrace_checks_shapes():
    with pytest.raises(AssertionError, match="vtrace: .*same shape"):
        vtrace(np.zeros(3), np.zeros(3), np.zeros(3), np.zeros(3, bool), np.zeros(3, bool), np.zeros(4), 0.9)
