"""Action distributions (:mod:`rljax.core.distributions`): log-probabilities, entropies, modes and
samples of Categorical, DiagGaussian and TanhGaussian, first at points whose values follow by hand,
then against scipy's densities and the change-of-variables formula in float64; numerical stability
at extreme logits and saturated squashes; and that they are pytrees."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from rljax.core.distributions import Categorical, DiagGaussian, TanhGaussian, clip_to_space

KEY = jax.random.key(0)
LOG_2PI = math.log(2 * math.pi)


# --------------------------------------------------------------------------------------------------
# By hand
# --------------------------------------------------------------------------------------------------

def test_categorical_by_hand():
    # logits log 1, log 2, log 3 (+ any constant): probabilities 1/6, 2/6, 3/6.
    dist = Categorical(jnp.log(jnp.array([1.0, 2.0, 3.0])) + 7.0)
    np.testing.assert_allclose(dist.probs, [1 / 6, 2 / 6, 3 / 6], rtol=1e-6)
    np.testing.assert_allclose([dist.log_prob(a) for a in range(3)], np.log([1 / 6, 2 / 6, 3 / 6]), rtol=1e-6)
    entropy = -(1 / 6 * math.log(1 / 6) + 2 / 6 * math.log(2 / 6) + 3 / 6 * math.log(3 / 6))
    np.testing.assert_allclose(dist.entropy(), entropy, rtol=1e-6)
    assert int(dist.mode()) == 2
    # A scalar action broadcasts over a batch of logits: log_prob [B].
    batch = Categorical(jnp.array([[0.0, 0.0], [0.0, math.log(3.0)]]))
    np.testing.assert_allclose(batch.log_prob(1), [math.log(0.5), math.log(0.75)], rtol=1e-6)


def test_diag_gaussian_by_hand():
    # At the mean each dimension contributes -log sigma - log(2 pi) / 2; one sigma away, -1/2 more.
    dist = DiagGaussian(jnp.array([1.0, -2.0]), jnp.array([0.0, math.log(2.0)]))  # sigma 1 and 2
    at_mean = -math.log(2.0) - LOG_2PI
    np.testing.assert_allclose(dist.log_prob(jnp.array([1.0, -2.0])), at_mean, rtol=1e-6)
    np.testing.assert_allclose(dist.log_prob(jnp.array([2.0, 0.0])), at_mean - 1.0, rtol=1e-6)
    # Entropy: sum over dimensions of 1/2 + log(2 pi)/2 + log sigma.
    np.testing.assert_allclose(dist.entropy(), 1.0 + LOG_2PI + math.log(2.0), rtol=1e-6)
    # A state-independent log_std [action_dim] broadcasts over a batch of means [B, action_dim].
    batch = DiagGaussian(jnp.zeros((3, 2)), jnp.array([0.0, math.log(2.0)]))
    assert batch.log_prob(jnp.zeros((3, 2))).shape == batch.entropy().shape == (3,)


def test_tanh_gaussian_by_hand():
    # u = 0 is the midpoint of [low, high], where tanh' = 1: log p(a) = log N(0; 0, 1) - log((high-low)/2).
    dist = TanhGaussian(jnp.zeros(2), jnp.zeros(2), jnp.array([-1.0, 0.0]), jnp.array([1.0, 4.0]))
    expected = 2 * (-0.5 * LOG_2PI) - (math.log(1.0) + math.log(2.0))
    np.testing.assert_allclose(dist.log_prob(jnp.array([0.0, 2.0])), expected, rtol=1e-6)
    np.testing.assert_allclose(dist.mode(), [0.0, 2.0], atol=1e-7)
    # u = atanh(1/2) on the first dimension: the action is 1/2, tanh' = 1 - 1/4, the Gaussian term
    # -u^2/2 - log(2 pi)/2.
    u = math.atanh(0.5)
    expected = (-0.5 * u * u - 0.5 * LOG_2PI - math.log(0.75)) + (-0.5 * LOG_2PI - math.log(2.0))
    np.testing.assert_allclose(dist.log_prob(jnp.array([0.5, 2.0])), expected, rtol=1e-5)


# --------------------------------------------------------------------------------------------------
# Categorical
# --------------------------------------------------------------------------------------------------

LOGITS = np.array([[0.3, -1.2, 2.0, 0.0], [5.0, 5.0, -3.0, 1.0]], np.float32)


def _np_log_softmax(x):
    x = np.asarray(x, np.float64)
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def test_categorical_log_prob_entropy_mode():
    dist = Categorical(jnp.asarray(LOGITS))
    logp = _np_log_softmax(LOGITS)
    actions = np.array([2, 3])
    np.testing.assert_allclose(dist.log_prob(actions), logp[[0, 1], actions], rtol=1e-5)
    np.testing.assert_allclose(dist.entropy(), -(np.exp(logp) * logp).sum(-1), rtol=1e-5)
    np.testing.assert_array_equal(dist.mode(), [2, 0])
    assert dist.mode().dtype == jnp.int32
    np.testing.assert_allclose(dist.probs.sum(-1), 1.0, rtol=1e-6)
    # Uniform logits: entropy log(n).
    np.testing.assert_allclose(Categorical(jnp.zeros(6)).entropy(), math.log(6), rtol=1e-6)


def test_categorical_log_prob_is_stable_for_extreme_logits():
    dist = Categorical(jnp.array([0.0, -200.0, 200.0]))
    # log(softmax) would underflow to -inf for action 1; log_softmax gives -400 exactly.
    np.testing.assert_allclose(dist.log_prob(1), -400.0, rtol=1e-6)
    assert np.isfinite(dist.entropy())


def test_categorical_masked_action_entropy_and_grad_are_finite():
    logits = jnp.array([0.0, -jnp.inf, 0.0])
    np.testing.assert_allclose(Categorical(logits).entropy(), math.log(2), rtol=1e-6)
    grad = jax.grad(lambda x: Categorical(x).entropy())(logits)
    assert np.all(np.isfinite(grad))


def test_categorical_sample_frequencies_match_probs():
    probs = np.array([0.1, 0.2, 0.3, 0.4])
    n = 40_000
    dist = Categorical(jnp.broadcast_to(jnp.log(jnp.asarray(probs, jnp.float32)), (n, 4)))
    samples = np.asarray(jax.jit(dist.sample)(KEY))
    assert samples.shape == (n,) and samples.dtype == np.int32
    counts = np.bincount(samples, minlength=4)
    chi2 = ((counts - n * probs) ** 2 / (n * probs)).sum()
    # df = 3; P(chi2 > 30) ~ 1e-6: fails only on a real bug (deterministic with a fixed key).
    assert chi2 < 30.0, (counts, chi2)


# --------------------------------------------------------------------------------------------------
# DiagGaussian
# --------------------------------------------------------------------------------------------------

MEAN = np.array([[0.5, -1.0, 2.0], [0.0, 0.3, -0.7]], np.float32)
LOG_STD = np.array([0.1, -0.5, 0.7], np.float32)


def test_diag_gaussian_log_prob_and_entropy_vs_scipy():
    dist = DiagGaussian(jnp.asarray(MEAN), jnp.asarray(LOG_STD))
    a = np.array([[0.1, -2.0, 3.5], [1.0, 0.0, 0.0]], np.float32)
    expected = stats.norm.logpdf(a, MEAN, np.exp(LOG_STD)).sum(-1)
    np.testing.assert_allclose(dist.log_prob(a), expected, rtol=1e-5)
    expected_h = np.broadcast_to(stats.norm.entropy(0.0, np.exp(LOG_STD)).sum(), (2,))
    np.testing.assert_allclose(dist.entropy(), expected_h, rtol=1e-5)
    np.testing.assert_array_equal(dist.mode(), MEAN)


def test_diag_gaussian_sample_moments():
    dist = DiagGaussian(jnp.broadcast_to(jnp.asarray(MEAN[0]), (20_000, 3)), jnp.asarray(LOG_STD))
    x = np.asarray(dist.sample(KEY))
    assert x.shape == (20_000, 3)
    np.testing.assert_allclose(x.mean(0), MEAN[0], atol=0.05)
    np.testing.assert_allclose(x.std(0), np.exp(LOG_STD), rtol=0.03)


def test_clip_to_space():
    a = jnp.array([[-3.0, 0.5], [2.0, -0.2]])
    np.testing.assert_allclose(clip_to_space(a, jnp.array([-1.0, 0.0]), jnp.array([1.0, 0.4])),
                               [[-1.0, 0.4], [1.0, 0.0]], rtol=1e-6)


# --------------------------------------------------------------------------------------------------
# TanhGaussian
# --------------------------------------------------------------------------------------------------

T_MEAN = np.array([0.3, -1.0], np.float32)
T_LOG_STD = np.array([-0.2, 0.4], np.float32)
LOW = np.array([-2.0, 0.0], np.float32)
HIGH = np.array([1.0, 5.0], np.float32)


def _tanh_dist(mean=T_MEAN, log_std=T_LOG_STD, low=LOW, high=HIGH):
    return TanhGaussian(jnp.asarray(mean), jnp.asarray(log_std), jnp.asarray(low),
                        jnp.asarray(high))


def _tanh_log_prob_np(u, mean, log_std, low, high):
    """float64 change of variables: log N(u) - log |da/du|, a = low + (high-low)/2 (tanh u + 1)."""
    u = np.asarray(u, np.float64)
    log_n = stats.norm.logpdf(u, mean, np.exp(log_std))
    log_jac = np.log((high - low) / 2.0) + np.log(1.0 - np.tanh(u) ** 2)
    return (log_n - log_jac).sum(-1)


def test_tanh_gaussian_log_prob_vs_change_of_variables():
    dist = _tanh_dist()
    u = np.array([[0.2, -0.5], [1.5, 2.0], [-2.5, 0.0]], np.float32)
    a = LOW + (HIGH - LOW) / 2.0 * (np.tanh(u.astype(np.float64)) + 1.0)
    expected = _tanh_log_prob_np(u, T_MEAN, T_LOG_STD, LOW, HIGH)
    np.testing.assert_allclose(dist.log_prob(a.astype(np.float32)), expected, rtol=1e-4, atol=1e-4)


def test_tanh_gaussian_density_matches_cdf_derivative_and_integrates_to_one():
    # 1-D: P(A <= a) = Phi((atanh(y) - mu) / sigma), y = 2 (a - low) / (high - low) - 1.
    mu, log_sigma, low, high = 0.4, 0.3, -1.0, 3.0
    dist = _tanh_dist([mu], [log_sigma], [low], [high])

    def cdf(a):
        y = 2.0 * (a - low) / (high - low) - 1.0
        return stats.norm.cdf((np.arctanh(y) - mu) / math.exp(log_sigma))

    a = np.linspace(low + 0.05, high - 0.05, 41)
    h = 1e-5
    fd_density = (cdf(a + h) - cdf(a - h)) / (2 * h)
    density = np.exp(np.asarray(dist.log_prob(jnp.asarray(a, jnp.float32)[:, None])))
    np.testing.assert_allclose(density, fd_density, rtol=2e-3, atol=1e-5)

    grid = np.linspace(low, high, 20_001)[1:-1]
    dens = np.exp(np.asarray(dist.log_prob(jnp.asarray(grid, jnp.float32)[:, None]),
                             np.float64))
    np.testing.assert_allclose(np.trapezoid(dens, grid), 1.0, atol=2e-3)


def test_tanh_gaussian_sample_and_log_prob():
    n = 4096
    dist = _tanh_dist(np.broadcast_to(T_MEAN, (n, 2)), T_LOG_STD)
    a, logp = jax.jit(lambda d, k: d.sample_and_log_prob(k))(dist, KEY)
    assert a.shape == (n, 2) and logp.shape == (n,)
    assert np.all(np.asarray(a) >= LOW) and np.all(np.asarray(a) <= HIGH)
    # Same key, same draw through sample() (eager vs jit: float32 rounding only).
    np.testing.assert_allclose(dist.sample(KEY), a, atol=1e-5)
    # Away from saturation, inverting the action must give the same log-density.
    y = (np.asarray(a) - LOW) / ((HIGH - LOW) / 2) - 1
    ok = np.all(np.abs(y) < 0.99, axis=-1)
    np.testing.assert_allclose(np.asarray(dist.log_prob(a))[ok], np.asarray(logp)[ok], rtol=1e-3,
                               atol=1e-3)
    # And it must equal the float64 change of variables at the pre-squash sample.
    u = np.asarray(jax.random.normal(KEY, (n, 2)), np.float64) * np.exp(T_LOG_STD) + T_MEAN
    np.testing.assert_allclose(logp, _tanh_log_prob_np(u, T_MEAN, T_LOG_STD, LOW, HIGH),
                               rtol=1e-4, atol=1e-3)


def test_tanh_gaussian_saturated_sample_is_finite():
    # |u| ~ 20: tanh(u) == +-1 in float32, so log(1 - tanh^2) would be -inf.
    dist = _tanh_dist([20.0, -20.0], [-8.0, -8.0])
    a, logp = dist.sample_and_log_prob(KEY)
    assert np.all(np.isfinite(np.asarray(logp)))
    # log(1 - tanh(u)^2) ~ 2 log 2 - 2|u| for large |u| (exact to ~e^{-4|u|}).
    mean, std = np.array([20.0, -20.0]), np.exp(-8.0)
    u = mean + std * np.asarray(jax.random.normal(KEY, (2,)), np.float64)
    expected = (stats.norm.logpdf(u, mean, std) - (2 * np.log(2) - 2 * np.abs(u))
                - np.log((HIGH - LOW) / 2)).sum()
    np.testing.assert_allclose(logp, expected, rtol=1e-3)
    np.testing.assert_allclose(a, [HIGH[0], LOW[1]])
    grads = jax.grad(lambda m: _tanh_dist(m, [-8.0, -8.0]).sample_and_log_prob(KEY)[1])(
        jnp.array([20.0, -20.0]))
    assert np.all(np.isfinite(np.asarray(grads)))


def test_tanh_gaussian_mode():
    np.testing.assert_allclose(_tanh_dist().mode(),
                               LOW + (HIGH - LOW) / 2 * (np.tanh(T_MEAN) + 1), rtol=1e-5)


def test_distributions_are_pytrees_across_jit():
    @jax.jit
    def make(x):
        return Categorical(x), DiagGaussian(x, jnp.zeros_like(x)), _tanh_dist(x[:2], x[:2])

    cat, gauss, tanh = make(jnp.ones(4))
    assert isinstance(cat, Categorical) and isinstance(gauss, DiagGaussian)
    assert isinstance(tanh, TanhGaussian)
    assert len(jax.tree.leaves(tanh)) == 4
    stacked = jax.vmap(lambda x: DiagGaussian(x, x))(jnp.ones((5, 3)))
    assert stacked.mean.shape == (5, 3) and stacked.log_prob(jnp.zeros((5, 3))).shape == (5,)
