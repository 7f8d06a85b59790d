"""Tests for rljax.core.networks and rljax.core.distributions."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from rljax.core.distributions import Categorical, DiagGaussian, TanhGaussian, clip_to_space
from rljax.core.networks import ACTIVATIONS, MLP, ActorCritic, QNetwork, get_activation

KEY = jax.random.key(0)


def _num_params(params) -> int:
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))


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


# --------------------------------------------------------------------------------------------------
# Networks
# --------------------------------------------------------------------------------------------------

OBS_DIM = 4


@functools.lru_cache(maxsize=None)
def _init(net):
    """Parameters for ``net`` (a hashable linen module), initialised once per config.

    Orthogonal init runs a QR decomposition per layer; caching keeps this file fast.
    """
    return net.init(KEY, jnp.zeros((OBS_DIM,)))


def _abstract_params(net):
    # Shape-only checks need no compilation: trace with jax.eval_shape.
    return jax.eval_shape(net.init, KEY, jnp.zeros((OBS_DIM,)))


@pytest.mark.parametrize("discrete", [True, False])
def test_actor_critic_shapes_any_leading_dims(discrete):
    net = ActorCritic(action_dim=3, discrete=discrete)
    params = _abstract_params(net)

    def forward(p, obs, key):
        dist, value = net.apply(p, obs)
        action = dist.sample(key)
        return dist, value, action, dist.log_prob(action), dist.entropy()

    for batch in [(), (5,), (3, 7)]:
        obs = jax.ShapeDtypeStruct((*batch, OBS_DIM), jnp.float32)
        dist, value, action, logp, ent = jax.eval_shape(forward, params, obs, KEY)
        assert isinstance(dist, Categorical if discrete else DiagGaussian)
        for leaf in jax.tree.leaves(dist):
            assert leaf.shape == (*batch, 3)
        assert value.shape == logp.shape == ent.shape == batch
        assert action.shape == (batch if discrete else (*batch, 3))
        assert action.dtype == (jnp.int32 if discrete else jnp.float32)


def test_actor_critic_continuous_log_std_starts_at_zero():
    net = ActorCritic(action_dim=2, discrete=False)
    params = _init(net)
    np.testing.assert_array_equal(params["params"]["log_std"], np.zeros(2))
    dist, value = net.apply(params, jnp.ones((5, OBS_DIM)))
    np.testing.assert_array_equal(dist.log_std, np.zeros((5, 2)))  # std = 1 at init
    assert dist.mean.shape == (5, 2) and value.shape == (5,)
    assert np.abs(np.asarray(dist.mean)).max() < 0.1  # mean head gain 0.01


def test_actor_critic_jit_matches_eager_and_int_obs():
    net = ActorCritic(action_dim=3, discrete=True)
    params = _init(net)
    obs = jax.random.normal(KEY, (6, OBS_DIM))
    (d1, v1), (d2, v2) = net.apply(params, obs), jax.jit(net.apply)(params, obs)
    np.testing.assert_allclose(d1.logits, d2.logits, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(v1, v2, rtol=1e-5, atol=1e-6)
    dist, value = net.apply(params, jnp.ones((2, OBS_DIM), jnp.int32))
    assert dist.logits.dtype == jnp.float32 and value.dtype == jnp.float32


def test_actor_critic_initial_policy_is_near_uniform():
    net = ActorCritic(action_dim=3, discrete=True)
    params = _init(net)
    dist, _ = net.apply(params, jax.random.normal(KEY, (32, OBS_DIM)))
    assert np.abs(np.asarray(dist.logits)).max() < 0.1  # logits head gain 0.01
    np.testing.assert_allclose(dist.entropy(), math.log(3), atol=1e-3)


def test_shared_vs_separate_torso_parameter_counts():
    torso = (OBS_DIM * 64 + 64) + (64 * 64 + 64)  # 320 + 4160 = 4480
    logits_head = 64 * 3 + 3
    mean_head_and_log_std = 64 * 2 + 2 + 2
    value_head = 64 + 1
    cases = [
        (True, 3, True, torso + logits_head + value_head),
        (True, 3, False, 2 * torso + logits_head + value_head),
        (False, 2, True, torso + mean_head_and_log_std + value_head),
        (False, 2, False, 2 * torso + mean_head_and_log_std + value_head),
    ]
    for discrete, action_dim, shared, expected in cases:
        net = ActorCritic(action_dim=action_dim, discrete=discrete, shared_torso=shared)
        params = _abstract_params(net)
        assert _num_params(params) == expected, (discrete, shared)
        names = set(params["params"])
        assert ("torso" in names) == shared
        assert ({"actor_torso", "critic_torso"} <= names) == (not shared)


def _assert_orthogonal(kernel, gain):
    w = np.asarray(kernel, np.float64)
    n_in, n_out = w.shape
    # Orthogonal init makes the smaller Gram matrix a scaled identity.
    gram = w.T @ w if n_in >= n_out else w @ w.T
    np.testing.assert_allclose(gram, gain**2 * np.eye(min(n_in, n_out)),
                               atol=1e-5 * max(gain**2, 1))


def test_orthogonal_init_gains_and_zero_biases():
    net = ActorCritic(action_dim=3, discrete=True)
    p = _init(net)["params"]
    for torso in ("actor_torso", "critic_torso"):
        _assert_orthogonal(p[torso]["hidden_0"]["kernel"], math.sqrt(2))  # [4, 64]
        _assert_orthogonal(p[torso]["hidden_1"]["kernel"], math.sqrt(2))  # [64, 64]
    _assert_orthogonal(p["logits"]["kernel"], 0.01)
    _assert_orthogonal(p["value"]["kernel"], 1.0)
    for path, leaf in jax.tree_util.tree_leaves_with_path(p):
        if "bias" in jax.tree_util.keystr(path):
            np.testing.assert_array_equal(leaf, 0.0)

    cont = _init(ActorCritic(action_dim=2, discrete=False))["params"]
    _assert_orthogonal(cont["mean"]["kernel"], 0.01)


def test_mlp_layers_and_output():
    # Same layer shapes as the ActorCritic torso + head, so the eager init ops are already compiled.
    mlp = MLP((64, 64), activation="relu", output_dim=3, output_gain=0.5)
    params = mlp.init(KEY, jnp.zeros((OBS_DIM,)))
    assert mlp.apply(params, jnp.ones((2, OBS_DIM))).shape == (2, 3)
    _assert_orthogonal(params["params"]["hidden_1"]["kernel"], math.sqrt(2))
    _assert_orthogonal(params["params"]["output"]["kernel"], 0.5)
    identity = MLP(())
    x = jnp.arange(3.0)
    np.testing.assert_array_equal(identity.apply(identity.init(KEY, x), x), x)


def test_invalid_activation_lists_valid_names():
    for make in (lambda: MLP((4,), activation="tanhh"),
                 lambda: ActorCritic(2, True, activation="tanhh"),
                 lambda: QNetwork(2, activation="tanhh"),
                 lambda: get_activation("tanhh")):
        with pytest.raises(ValueError, match="tanhh") as err:
            make()
        for name in ACTIVATIONS:
            assert name in str(err.value)


def test_invalid_sizes_raise():
    with pytest.raises(ValueError, match="hidden_sizes"):
        MLP((64, 0))
    with pytest.raises(ValueError, match="action_dim"):
        ActorCritic(0, True)
    with pytest.raises(ValueError, match="num_actions"):
        QNetwork(0)


@pytest.mark.parametrize("dueling", [False, True])
def test_q_network_shapes(dueling):
    net = QNetwork(num_actions=4, dueling=dueling)
    params = _abstract_params(net)
    for batch in [(), (3, 5)]:
        obs = jax.ShapeDtypeStruct((*batch, OBS_DIM), jnp.float32)
        assert jax.eval_shape(net.apply, params, obs).shape == (*batch, 4)
    if not dueling:
        assert set(params["params"]) == {"torso", "q"}


def test_q_network_dueling_identity():
    net = QNetwork(num_actions=3, dueling=True)
    params = _init(net)
    # Perturb so the value and advantage streams are not ~0 and the test is not vacuous.
    params = jax.tree.map(lambda x: x + 0.3, params)
    obs = jax.random.normal(KEY, (8, OBS_DIM))
    q, state = net.apply(params, obs, mutable=["intermediates"])
    value = state["intermediates"]["value"][0]
    advantage = state["intermediates"]["advantage"][0]
    assert value.shape == (8,) and advantage.shape == (8, 3)
    assert np.abs(np.asarray(advantage.mean(-1))).min() > 1e-3  # raw A has a nonzero mean
    # Streams are O(10) after the perturbation, so allow float32 cancellation error.
    np.testing.assert_allclose(q.mean(-1), value, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(q - value[:, None], advantage - advantage.mean(-1, keepdims=True),
                               rtol=1e-5, atol=1e-4)


def test_twin_box_critics_share_one_module_and_rescale_actions_to_the_box():
    from rljax.core.networks import BoxCritic, init_actor_and_twin_critics, twin_critic_apply

    actor, critic = MLP((4,), "relu", output_dim=1), BoxCritic((8,))
    obs, action = jnp.ones((1, 3)), jnp.zeros((1, 1))
    actor_params, critic_params = init_actor_and_twin_critics(actor, critic, jax.random.key(0), obs, action)
    # The checkpointed tree: one MLP per critic (no encoder parameters for a vector), a leading [2] axis.
    assert set(critic_params["params"]) == {"MLP_0"}
    kernel = critic_params["params"]["MLP_0"]["hidden_0"]["kernel"]
    assert kernel.shape == (2, 3 + 1, 8) and not np.allclose(kernel[0], kernel[1])
    assert set(actor_params["params"]) == {"hidden_0", "output"}
    # Box [0, 4]: centre 2, half-width 2, so env action 3 is seen as 0.5 by each critic.
    critic_fn = twin_critic_apply(critic, jnp.array([0.0]), jnp.array([4.0]))
    q = critic_fn(critic_params, jnp.ones((5, 3)), jnp.full((5, 1), 3.0))
    assert q.shape == (2, 5)
    one = jax.tree.map(lambda x: x[1], critic_params)
    np.testing.assert_allclose(q[1], critic.apply(one, jnp.ones((5, 3)), jnp.full((5, 1), 0.5)), rtol=1e-6)
