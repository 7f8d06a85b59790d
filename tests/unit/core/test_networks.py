"""Tests for rljax.core.networks (its distributions: test_distributions.py)."""

from __future__ import annotations

import functools
import math

import jax
import flax.linen as nn
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.core.distributions import Categorical, DiagGaussian
from rljax.core.networks import ACTIVATIONS, MLP, NOISE, ActorCritic, NoisyDense, QNetwork, get_activation

KEY = jax.random.key(0)


def _normal(shape, seed=0) -> jnp.ndarray:
    """Standard normal float32 draws from numpy: an eager ``jax.random`` draw compiles the PRNG hash for each new
    shape (0.4-3 s apiece on 2 cores under the suite's XLA flags), and these tests need only random values."""
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape, dtype=np.float32))


def _num_params(params) -> int:
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))


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
    obs = _normal((6, OBS_DIM))
    (d1, v1), (d2, v2) = net.apply(params, obs), jax.jit(net.apply)(params, obs)
    np.testing.assert_allclose(d1.logits, d2.logits, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(v1, v2, rtol=1e-5, atol=1e-6)
    dist, value = net.apply(params, jnp.ones((2, OBS_DIM), jnp.int32))
    assert dist.logits.dtype == jnp.float32 and value.dtype == jnp.float32


def test_actor_critic_initial_policy_is_near_uniform():
    net = ActorCritic(action_dim=3, discrete=True)
    params = _init(net)
    dist, _ = net.apply(params, _normal((32, OBS_DIM)))
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
    obs = _normal((8, OBS_DIM))
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


def test_a_distributional_box_critic_gives_logits_per_atom_and_any_number_of_critics():
    from rljax.core.networks import BoxCritic, init_actor_and_twin_critics, twin_critic_apply

    actor, critic = MLP((4,), "relu", output_dim=1), BoxCritic((8,), num_atoms=7)
    obs, action = jnp.ones((1, 3)), jnp.zeros((1, 1))
    _, one = init_actor_and_twin_critics(actor, critic, jax.random.key(0), obs, action, num_critics=1)
    assert one["params"]["MLP_0"]["output"]["kernel"].shape == (1, 8, 7)
    logits = twin_critic_apply(critic, jnp.array([-1.0]), jnp.array([1.0]))(one, jnp.ones((5, 3)), jnp.zeros((5, 1)))
    assert logits.shape == (1, 5, 7)
    # With one atom the output is the scalar value (the twins' [2, N]), as before atoms existed.
    _, two = init_actor_and_twin_critics(actor, BoxCritic((8,)), jax.random.key(0), obs, action)
    assert two["params"]["MLP_0"]["output"]["kernel"].shape == (2, 8, 1)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_the_memory_core_computes_flax_cells_equations_with_fused_kernels(cell):
    from rljax.core.networks import MemoryCore, initial_memory

    f, h, b, t = 3, 4, 2, 5
    x = _normal((t, b, f))
    reset = jnp.array([[False, False], [False, True], [False, False], [True, False], [False, False]])
    flax_cell = nn.GRUCell(h) if cell == "gru" else nn.OptimizedLSTMCell(h)
    carry0 = initial_memory(cell, h, b)
    ref = flax_cell.init(jax.random.key(1), carry0, x[0])["params"]
    # Random biases too (flax initialises them to zero), so every term is checked.
    ref = jax.tree.map(lambda v: v + 0.1 * _normal(v.shape, seed=v.size), ref)
    gates = ("r", "z", "n") if cell == "gru" else ("i", "f", "g", "o")
    params = {
        "input_kernel": jnp.concatenate([ref["i" + g]["kernel"] for g in gates], axis=1),
        "hidden_kernel": jnp.concatenate([ref["h" + g]["kernel"] for g in gates], axis=1),
    }
    if cell == "gru":  # flax: biases on ir, iz, in and hn
        params["input_bias"] = jnp.concatenate([ref["i" + g]["bias"] for g in gates])
        params["hidden_bias"] = ref["hn"]["bias"]
    else:  # flax: one bias per gate, on the hidden kernels
        params["input_bias"] = jnp.concatenate([ref["h" + g]["bias"] for g in gates])
    memories, y = MemoryCore(cell, h).apply({"params": params}, carry0, x, reset)
    carry, want = carry0, []
    for step in range(t):
        carry = jax.tree.map(lambda v: jnp.where(reset[step][:, None], 0.0, v), carry)
        carry, out = flax_cell.apply({"params": ref}, carry, x[step])
        want.append(out)
    np.testing.assert_allclose(y, jnp.stack(want), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(jax.tree.leaves(memories)[-1][-1], jax.tree.leaves(carry)[-1], rtol=1e-5, atol=1e-6)
    one, y1 = MemoryCore(cell, h).apply({"params": params}, carry0, x[:1], reset[:1])  # the loop-free step
    np.testing.assert_allclose(y1[0], want[0], rtol=1e-5, atol=1e-6)


# ----- the Nature CNN (encoder="nature") -----

@pytest.mark.parametrize("kernel, stride", [(8, 4), (4, 2), (3, 1)])
def test_patch_conv_is_flax_conv_in_params_init_and_outputs(kernel, stride):
    from rljax.core.networks import PatchConv

    rng = np.random.default_rng(0)  # numpy's draws, as _normal's
    x = jnp.asarray(rng.standard_normal((3, 21, 18, 5), dtype=np.float32))
    ref = nn.Conv(7, (kernel, kernel), strides=(stride, stride), padding="VALID",
                  kernel_init=nn.initializers.orthogonal(math.sqrt(2.0)), bias_init=nn.initializers.zeros)
    ours = PatchConv(7, kernel, stride)
    ours_p, ref_p = jax.jit(ours.init)(jax.random.key(1), x), jax.jit(ref.init)(jax.random.key(1), x)
    jax.tree.map(np.testing.assert_array_equal, ours_p, ref_p)
    perturbed = jax.tree.map(lambda a: np.asarray(a) + rng.standard_normal(a.shape, dtype=np.float32), ours_p)
    out = jax.jit(ours.apply)(perturbed, x)
    assert out.shape == (3, (21 - kernel) // stride + 1, (18 - kernel) // stride + 1, 7)
    np.testing.assert_allclose(out, jax.jit(ref.apply)(perturbed, x), atol=5e-5, rtol=1e-5)


def test_the_nature_encoder_takes_atari_frames_scales_uint8_and_flattens_3136_features():
    from rljax.core.networks import ObsEncoder, encoder_layout

    spec = {"frames": jax.ShapeDtypeStruct((84, 84, 4), jnp.uint8), "lives": jax.ShapeDtypeStruct((1,), jnp.float32)}
    layout = encoder_layout(spec, "nature")
    assert [(leaf.name, leaf.kind) for leaf in layout] == [("frames", "nature"), ("lives", "flat")]
    # numpy's draw (as _normal's): an eager jax.random.randint of this shape compiles for ~5 s on 2 cores.
    frames = jnp.asarray(np.random.default_rng(0).integers(0, 256, (2, 84, 84, 4), dtype=np.uint8))
    obs = {"frames": frames, "lives": jnp.ones((2, 1))}
    encoder = ObsEncoder(layout)
    params = jax.jit(encoder.init)(jax.random.key(1), obs)
    assert sorted(params["params"]) == ["frames_nature_0", "frames_nature_1", "frames_nature_2"]
    assert params["params"]["frames_nature_0"]["kernel"].shape == (8, 8, 4, 32)
    out = jax.jit(encoder.apply)(params, obs)
    assert out.shape == (2, 7 * 7 * 64 + 1)
    as_float = jax.jit(encoder.apply)(params, {"frames": frames.astype(jnp.float32) / 255.0,
                                               "lives": jnp.ones((2, 1))})
    np.testing.assert_allclose(out, as_float, rtol=1e-6, atol=1e-6)  # uint8 frames are scaled to [0, 1]


def test_the_nature_encoder_refuses_frames_smaller_than_its_convolutions():
    from rljax.core.networks import encoder_layout

    with pytest.raises(ValueError, match=r"observation of shape \(10, 10, 4\) is too small for the Nature CNN: H and W "
                                         r"must be >= 36"):
        encoder_layout(jax.ShapeDtypeStruct((10, 10, 4), jnp.uint8), "nature")
    assert encoder_layout(jax.ShapeDtypeStruct((36, 36, 1), jnp.uint8), "nature")[0].kind == "nature"


def test_noisy_dense_is_its_mean_without_noise_and_the_factorised_formula_with_it():
    layer = NoisyDense(3)
    x = _normal((5, 4))
    params = layer.init(jax.random.key(0), x)["params"]
    assert params["mu_kernel"].shape == params["sigma_kernel"].shape == (4, 3)
    assert np.all(np.abs(np.asarray(params["mu_kernel"])) <= 0.5) and np.all(np.abs(np.asarray(params["mu_bias"])) <= 0.5)
    np.testing.assert_allclose(np.asarray(params["sigma_kernel"]), 0.25)  # sigma0 / sqrt(p) = 0.5 / 2
    w = {k: np.asarray(v, np.float64) for k, v in params.items()}
    mean = np.asarray(x, np.float64) @ w["mu_kernel"] + w["mu_bias"]
    np.testing.assert_allclose(np.asarray(layer.apply({"params": params}, x)), mean, rtol=1e-6, atol=1e-6)
    key = jax.random.key(7)
    # The same key draws the same noise; recover it with mu = 0, sigma = 1: a zero input gives f(eps_out),
    # the unit vector e_k gives (f(eps_in)_k + 1) f(eps_out).
    probe = {"mu_kernel": jnp.zeros((4, 3)), "mu_bias": jnp.zeros(3), "sigma_kernel": jnp.ones((4, 3)),
             "sigma_bias": jnp.ones(3)}
    rows = np.asarray(layer.apply({"params": probe}, jnp.concatenate([jnp.zeros((1, 4)), jnp.eye(4)]),
                                  rngs={NOISE: key}), np.float64)
    eps_out = rows[0]
    eps_in = (rows[1:] / eps_out).mean(axis=1) - 1.0
    noisy = np.asarray(layer.apply({"params": params}, x, rngs={NOISE: key}), np.float64)
    kernel = w["mu_kernel"] + w["sigma_kernel"] * np.outer(eps_in, eps_out)  # mu_W + sigma_W * f(eps_out) f(eps_in)^T
    want = np.asarray(x, np.float64) @ kernel + w["mu_bias"] + w["sigma_bias"] * eps_out
    np.testing.assert_allclose(noisy, want, rtol=1e-5, atol=1e-5)
    assert np.abs(noisy - mean).max() > 1e-3, "the noise changes the output"
    other = np.asarray(layer.apply({"params": params}, x, rngs={NOISE: jax.random.key(8)}))
    assert not np.allclose(other, noisy), "another key, other noise"


def test_a_distributional_and_noisy_q_network():
    x = _normal((2, 6))
    plain = QNetwork(num_actions=3, hidden_sizes=(8,))
    names = set(plain.init(jax.random.key(0), x)["params"])
    assert names == {"torso", "q"}  # the defaults keep the parameter tree (and so the bits) of every DQN run
    for dueling in (False, True):
        net = QNetwork(num_actions=3, hidden_sizes=(8,), dueling=dueling, num_atoms=5)
        variables = net.init(jax.random.key(0), x)
        out, inter = net.apply(variables, x, mutable=["intermediates"])
        assert out.shape == (2, 3, 5)
        if dueling:  # per atom: mean over actions of the output is the value stream
            value = inter["intermediates"]["value"][0]
            np.testing.assert_allclose(np.asarray(out.mean(axis=1)), np.asarray(value[:, 0, :]), rtol=1e-5, atol=1e-6)
    noisy = QNetwork(num_actions=3, hidden_sizes=(8,), noisy=True, dueling=True)
    variables = noisy.init(jax.random.key(0), x)
    params = variables["params"]
    assert "sigma_kernel" in params["torso"]["hidden_0"] and "sigma_bias" in params["value_stream"]
    greedy = noisy.apply(variables, x)
    np.testing.assert_array_equal(np.asarray(greedy), np.asarray(noisy.apply(variables, x)))
    drawn = noisy.apply(variables, x, rngs={NOISE: jax.random.key(1)})
    assert not np.allclose(np.asarray(drawn), np.asarray(greedy))
    with pytest.raises(ValueError, match="num_atoms"):
        QNetwork(num_actions=3, num_atoms=0)
