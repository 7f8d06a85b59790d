"""rljax.core.distributional against float64 numpy re-implementations written another way: C51's
projection with Algorithm 1's floor/ceil split (the library uses the hat-function form), n-step
distributional targets built by hand from raw trajectories with episode ends (terminated and truncated)
inside the n-step window, the cross-entropy, and the quantile Huber loss as explicit loops; and the
quantile loss's minimiser, found by gradient descent, is the sample's quantiles."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rljax.core.distributional import (categorical_loss, categorical_mean_std, categorical_projection,
                                       quantile_huber_loss, quantile_midpoints, support, two_hot, value_rescale,
                                       value_unrescale)
from rljax.core.returns import n_step_transitions

V_MIN, V_MAX, K = -10.0, 10.0, 51


def _project_reference(probs, rewards, discounts, v_min, v_max, k):
    """Bellemare et al. 2017, Algorithm 1, in float64 with loops."""
    z = np.linspace(v_min, v_max, k, dtype=np.float64)
    dz = (v_max - v_min) / (k - 1)
    out = np.zeros((len(rewards), k))
    for n in range(len(rewards)):
        for j in range(k):
            tz = min(max(rewards[n] + discounts[n] * z[j], v_min), v_max)
            b = (tz - v_min) / dz
            lo, hi = int(np.floor(b)), int(np.ceil(b))
            if lo == hi:
                out[n, lo] += probs[n, j]
            else:
                out[n, lo] += probs[n, j] * (hi - b)
                out[n, hi] += probs[n, j] * (b - lo)
    return out


def _random_probs(rng, n, k):
    logits = rng.normal(size=(n, k)) * 2.0
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True)


def test_the_support_and_its_bad_values():
    np.testing.assert_allclose(np.asarray(support(-10.0, 10.0, 51)), np.linspace(-10, 10, 51), rtol=0, atol=2e-6)
    with pytest.raises(ValueError, match="num_atoms=1: a categorical support needs at least 2 atoms"):
        support(0.0, 1.0, 1)
    with pytest.raises(ValueError, match="v_min=1.0, v_max=1.0: v_max must be greater than v_min"):
        support(1.0, 1.0, 51)


def test_the_projection_equals_algorithm_1_with_clipping_terminations_and_exact_atom_hits():
    rng = np.random.default_rng(0)
    n = 200
    probs = _random_probs(rng, n, K)
    rewards = rng.uniform(-14.0, 14.0, n)  # some push every atom beyond the support: clipped to its ends
    discounts = rng.choice([0.0, 0.99, 0.99 ** 3, 1.0], n)  # 0: a termination (the point mass at clip(R))
    rewards[:5], discounts[:5] = 0.0, 1.0  # the identity: every atom lands exactly on itself
    rewards[5:10], discounts[5:10] = 0.4, 1.0  # every atom lands exactly on another (dz = 0.4)
    got = np.asarray(jax.jit(categorical_projection)(jnp.asarray(probs, jnp.float32), jnp.asarray(rewards, jnp.float32),
                                                     jnp.asarray(discounts, jnp.float32), support(V_MIN, V_MAX, K)))
    want = _project_reference(probs, rewards.astype(np.float32).astype(np.float64),
                              discounts.astype(np.float32).astype(np.float64), V_MIN, V_MAX, K)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(got[:5], probs[:5], atol=1e-6)
    terminated = discounts == 0.0
    assert np.all((got[terminated] > 1e-6).sum(axis=1) <= 2)  # a point mass splits over at most two atoms


def _n_step_reference(rewards, terminated, truncated, gamma, n):
    """(R, discount) of every full window, by hand: the first end within n steps cuts it."""
    big_t, b = rewards.shape
    out_r, out_d = np.zeros((big_t - n + 1, b)), np.zeros((big_t - n + 1, b))
    for t in range(big_t - n + 1):
        for e in range(b):
            total, m = 0.0, 0
            for k in range(n):
                total += gamma ** k * rewards[t + k, e]
                m = k + 1
                if terminated[t + k, e] or truncated[t + k, e]:
                    break
            out_r[t, e] = total
            out_d[t, e] = 0.0 if terminated[t + m - 1, e] else gamma ** m
    return out_r, out_d


@pytest.mark.parametrize("n", [1, 3, 5])
def test_n_step_distributional_targets_with_episode_ends_inside_the_window(n):
    rng = np.random.default_rng(n)
    big_t, b, gamma = 24, 16, 0.97
    rewards = rng.normal(size=(big_t, b))
    ends = rng.uniform(size=(big_t, b))
    terminated, truncated = ends < 0.12, (ends >= 0.12) & (ends < 0.24)  # both kinds inside most windows
    terminated[3, 0] = truncated[3, 0] = True  # both at once: termination wins
    steps = n_step_transitions(jnp.asarray(rewards, jnp.float32), terminated, truncated, gamma, n)
    want_r, want_d = _n_step_reference(rewards.astype(np.float32).astype(np.float64), terminated, truncated, gamma, n)
    np.testing.assert_allclose(np.asarray(steps.returns), want_r, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(steps.discounts), want_d, rtol=1e-6, atol=0)
    if n > 1:
        cut = np.abs(want_d - gamma ** n) > 1e-9  # windows an episode end cut short
        assert cut.any() and (want_d[cut] > 0).any() and (want_d[cut] == 0).any(), "truncations and terminations"
    probs = _random_probs(rng, want_r.size, K)
    got = np.asarray(categorical_projection(jnp.asarray(probs, jnp.float32), steps.returns.reshape(-1),
                                            steps.discounts.reshape(-1), support(V_MIN, V_MAX, K)))
    want = _project_reference(probs, np.asarray(steps.returns, np.float64).reshape(-1),
                              np.asarray(steps.discounts, np.float64).reshape(-1), V_MIN, V_MAX, K)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_the_cross_entropy():
    rng = np.random.default_rng(1)
    logits, target = rng.normal(size=(32, K)), _random_probs(rng, 32, K)
    log_p = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    want = -(target * log_p).sum(axis=1)
    got = categorical_loss(jnp.asarray(logits, jnp.float32), jnp.asarray(target, jnp.float32))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5)


def test_the_categorical_mean_and_std():
    # Hand-computed: equal logits on atoms (-1, 0, 1) are uniform: mean 0, variance 2/3; a logit of +inf
    # on one atom is its point mass: std 0 (not the square root of a rounding-negative variance).
    atoms = jnp.asarray([-1.0, 0.0, 1.0])
    mean, std = categorical_mean_std(jnp.zeros((2, 3)), atoms)
    np.testing.assert_allclose(np.asarray(mean), [0.0, 0.0], atol=1e-7)
    np.testing.assert_allclose(np.asarray(std), [np.sqrt(2 / 3)] * 2, rtol=1e-6)
    mean, std = categorical_mean_std(jnp.asarray([[-jnp.inf, -jnp.inf, 0.0]]), atoms)
    assert float(mean[0]) == 1.0 and float(std[0]) == 0.0
    # Leading axes of any rank (D4PG's [C, N, K]) against float64 numpy.
    rng = np.random.default_rng(2)
    logits, z = rng.normal(size=(2, 5, K)) * 2.0, np.linspace(V_MIN, V_MAX, K)
    p = np.exp(logits - logits.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    want_mean = (p * z).sum(axis=-1)
    want_std = np.sqrt((p * (z - want_mean[..., None]) ** 2).sum(axis=-1))
    mean, std = categorical_mean_std(jnp.asarray(logits, jnp.float32), support(V_MIN, V_MAX, K))
    assert mean.shape == std.shape == (2, 5)
    np.testing.assert_allclose(np.asarray(mean), want_mean, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(std), want_std, rtol=1e-5)


def _quantile_huber_reference(quantiles, targets, taus, kappa):
    n, q = quantiles.shape
    out = np.zeros(n)
    for i in range(n):
        for a in range(q):
            acc = 0.0
            for j in range(targets.shape[1]):
                u = targets[i, j] - quantiles[i, a]
                w = abs(taus[a] - (1.0 if u < 0 else 0.0))
                if kappa == 0:
                    acc += w * abs(u)
                else:
                    huber = 0.5 * u * u if abs(u) <= kappa else kappa * (abs(u) - 0.5 * kappa)
                    acc += w * huber / kappa
            out[i] += acc / targets.shape[1]
    return out


@pytest.mark.parametrize("kappa", [0.0, 1.0, 2.5])
def test_the_quantile_huber_loss(kappa):
    rng = np.random.default_rng(2)
    quantiles, targets = rng.normal(size=(20, 8)) * 3, rng.normal(size=(20, 12)) * 3
    taus = quantile_midpoints(8)
    np.testing.assert_allclose(np.asarray(taus), (2 * np.arange(8) + 1) / 16, atol=1e-7)
    got = quantile_huber_loss(jnp.asarray(quantiles, jnp.float32), jnp.asarray(targets, jnp.float32), taus, kappa)
    want = _quantile_huber_reference(quantiles, targets, np.asarray(taus, np.float64), kappa)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="kappa=-1: the Huber threshold must be >= 0"):
        quantile_huber_loss(jnp.zeros((1, 8)), jnp.zeros((1, 8)), taus, -1)
    with pytest.raises(ValueError, match="num_quantiles=0"):
        quantile_midpoints(0)


def test_the_quantile_losss_minimiser_is_the_samples_quantiles():
    """Gradient descent on the quantile loss (kappa 0) of fixed samples of a skewed distribution ends at
    their tau_hat-quantiles: the fraction of samples below each theta_i is tau_i (within 2 samples)."""
    rng = np.random.default_rng(3)
    samples = rng.exponential(2.0, size=400)
    taus = quantile_midpoints(10)
    targets = jnp.asarray(samples[None, :], jnp.float32)

    def loss(theta):
        return quantile_huber_loss(theta[None, :], targets, taus, kappa=0.0)[0]

    opt = optax.adam(optax.linear_schedule(0.05, 0.0005, 2000))
    theta = jnp.zeros(10)
    state = opt.init(theta)

    @jax.jit
    def step(theta, state):
        updates, state = opt.update(jax.grad(loss)(theta), state)
        return optax.apply_updates(theta, updates), state

    for _ in range(2000):
        theta, state = step(theta, state)
    below = (samples[None, :] < np.asarray(theta)[:, None]).mean(axis=1)
    np.testing.assert_allclose(below, np.asarray(taus), atol=2 / 400)


def test_value_rescale_by_hand_and_its_inverse():
    x = np.array([0.0, 3.0, -3.0, 8.0, 99.0, -1e4])
    eps = 1e-3
    h = np.sign(x) * (np.sqrt(np.abs(x) + 1.0) - 1.0) + eps * x  # h(3) = 1 + 0.003, h(8) = 2 + 0.008, h(99) = 9.099
    np.testing.assert_allclose(np.asarray(value_rescale(jnp.asarray(x, jnp.float32))), h, rtol=1e-6, atol=1e-7)
    assert np.isclose(h[1], 1.003) and np.isclose(h[3], 2.008) and np.isclose(h[4], 9.099)
    back = np.asarray(value_unrescale(value_rescale(jnp.asarray(x, jnp.float32))))
    np.testing.assert_allclose(back, x, rtol=2e-4, atol=2e-4)
    y = np.linspace(-20, 20, 41)
    np.testing.assert_allclose(np.asarray(value_rescale(value_unrescale(jnp.asarray(y, jnp.float32)))), y, atol=2e-4)


def test_two_hot_by_hand():
    atoms = jnp.arange(-2.0, 3.0)  # -2 .. 2
    got = np.asarray(two_hot(jnp.array([0.25, -2.0, 1.0, 7.0, -9.0, 1.5]), atoms))
    want = np.array([[0, 0, 0.75, 0.25, 0], [1, 0, 0, 0, 0], [0, 0, 0, 1, 0], [0, 0, 0, 0, 1], [1, 0, 0, 0, 0],
                     [0, 0, 0, 0.5, 0.5]])
    np.testing.assert_allclose(got, want, atol=1e-7)
    np.testing.assert_allclose(got @ np.arange(-2.0, 3.0), [0.25, -2.0, 1.0, 2.0, -2.0, 1.5], atol=1e-6)
    assert two_hot(jnp.zeros((3, 4)), atoms).shape == (3, 4, 5)
