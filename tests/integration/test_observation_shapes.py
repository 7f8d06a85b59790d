"""Observations of any shape and pytree structure: the encoder rules, the CNN torso, and every
algorithm training on grid, image and dict observations (``tests/support/grid_env.py``)."""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rljax
from rljax.env import observation_spec
from rljax.core.networks import Conv3x3, LeafEncoding, ObsEncoder, encoder_layout
from tests.support.grid_env import GridWalk

SDS = jax.ShapeDtypeStruct


def test_auto_layout_rules():
    spec = {"scalar": SDS((), jnp.int32), "vec": SDS((3,), jnp.float32), "grid": SDS((6, 7), jnp.bool_),
            "image": SDS((8, 9, 2), jnp.uint8), "video": SDS((5, 5, 2, 3), jnp.float32)}
    layout = {leaf.name: leaf for leaf in encoder_layout(spec)}
    assert {k: v.kind for k, v in layout.items()} == dict(grid="flat", image="cnn", scalar="flat", vec="flat",
                                                          video="cnn")
    assert layout["image"] == LeafEncoding("['image']", "image", "cnn", (8, 9, 2))
    assert {leaf.kind for leaf in encoder_layout(spec, "mlp")} == {"flat"}
    # 'cnn' takes grids as one-channel images; a single array's leaf has an empty path and name.
    assert encoder_layout(SDS((6, 7), jnp.float32), "cnn") == (LeafEncoding("", "", "cnn", (6, 7)),)


@pytest.mark.parametrize("spec, kwargs, says", [
    (SDS((3,), jnp.float32), dict(encoder="conv"), r"encoder='conv' is not one of \('auto', 'mlp', 'cnn', 'nature'\)"),
    ({"v": SDS((3,), jnp.float32)}, dict(encoder="cnn"), r"at least 2 axes.*observation\['v'\] has shape \(3,\)"),
    (SDS((4, 4, 1), jnp.float32), dict(encoder="cnn", cnn_channels=(8, 8)), r"\(4, 4, 1\) is too small for 2 VALID 3x3.*>= 5"),
    (SDS((3,), jnp.complex64), {}, r"observation has dtype complex64; observations must be real numbers or bools"),
    ({}, {}, r"has no arrays to encode"),
])
def test_layout_errors_name_the_leaf_and_what_is_valid(spec, kwargs, says):
    with pytest.raises(ValueError, match=says):
        encoder_layout(spec, **kwargs)


def test_encoder_features_params_and_batch_axes():
    spec = {"image": SDS((5, 6, 2), jnp.uint8), "vec": SDS((3,), jnp.float32)}
    enc = ObsEncoder(encoder_layout(spec), cnn_channels=(4, 8))
    obs = {"image": jnp.ones((2, 3, 5, 6, 2), jnp.uint8), "vec": jnp.ones((2, 3, 3))}
    params = enc.init(jax.random.key(0), obs)
    shapes = jax.tree.map(jnp.shape, params["params"])
    assert shapes == {"image_conv_0": {"kernel": (3, 3, 2, 4), "bias": (4,)},
                      "image_conv_1": {"kernel": (3, 3, 4, 8), "bias": (8,)}}
    out = enc.apply(params, obs)
    # (5 - 2 * 2) * (6 - 2 * 2) * 8 conv features, then the 3 vector entries as they are.
    assert out.shape == (2, 3, 1 * 2 * 8 + 3) and out.dtype == jnp.float32
    np.testing.assert_array_equal(out[..., -3:], 1.0)
    # A flat vector passes unchanged and has no parameters; a batch of grids is flattened per sample.
    assert ObsEncoder(()).init(jax.random.key(0), jnp.ones((4, 3))) == {}
    grids = jnp.arange(2 * 3 * 4).reshape(2, 3, 4)
    flat = ObsEncoder(encoder_layout(SDS((3, 4), jnp.int32))).apply({}, grids)
    np.testing.assert_array_equal(flat, np.arange(24, dtype=np.float32).reshape(2, 12))
    with pytest.raises(ValueError, match=r"observation\['image'\] has shape \(2, 5, 5, 2\); expected"):
        enc.apply(params, {"image": jnp.ones((2, 5, 5, 2)), "vec": jnp.ones((2, 3))})


def test_conv3x3_is_flax_conv_in_params_init_and_outputs():
    x = jax.random.normal(jax.random.key(0), (7, 10, 9, 4))
    ref = nn.Conv(16, (3, 3), padding="VALID", kernel_init=nn.initializers.orthogonal(math.sqrt(2.0)),
                  bias_init=nn.initializers.zeros)
    ours_p, ref_p = Conv3x3(16).init(jax.random.key(1), x), ref.init(jax.random.key(1), x)
    jax.tree.map(np.testing.assert_array_equal, ours_p, ref_p)
    perturbed = jax.tree.map(lambda a: a + jax.random.normal(jax.random.key(3), a.shape), ours_p)
    np.testing.assert_allclose(Conv3x3(16).apply(perturbed, x), ref.apply(perturbed, x), atol=2e-5, rtol=1e-5)


def test_a_grid_observation_auto_resets():
    """A user env with a 2-D grid observation: the done step returns the next episode's first grid."""
    env = GridWalk("grid")
    params = env.default_params
    state = env.reset(jax.random.key(0), params)[1].replace(pos=jnp.array([4, 3]))
    step = jax.jit(jax.vmap(env.step, in_axes=(0, 0, 0, None)))
    states = jax.tree.map(lambda x: jnp.stack([x, x]), state)
    obs, new, reward, term, trunc, info = step(jax.random.split(jax.random.key(1), 2), states, jnp.array([0, 1]),
                                               params)
    assert term.tolist() == [True, False] and reward.tolist() == [1.0, 0.0] and obs.shape == (2, 5, 5)
    assert info["final_observation"][0, 4, 4] == 1 and new.time.tolist() == [0, 1]
    np.testing.assert_array_equal(obs[0], env._obs(jax.tree.map(lambda x: x[0], new)))
    np.testing.assert_array_equal(obs[1], info["final_observation"][1])


ALGOS = {
    "PPOConfig": dict(num_envs=2, num_steps=8, num_minibatches=1, num_epochs=1, total_timesteps=32, updates_per_chunk=1),
    "DQNConfig": dict(total_timesteps=64, num_envs=2, batch_size=8, buffer_size=64, learning_starts=16,
                      updates_per_chunk=16),
    "PQNConfig": dict(total_timesteps=64, num_envs=4, num_steps=8, num_minibatches=1, num_epochs=1,
                      updates_per_chunk=1),
    "SACConfig": dict(total_timesteps=64, num_envs=2, batch_size=8, buffer_size=64, learning_starts=16,
                      updates_per_chunk=16),
    "TD3Config": dict(total_timesteps=64, num_envs=2, batch_size=8, buffer_size=64, learning_starts=16,
                      updates_per_chunk=16),
}
LOSSES = {"PPOConfig": "value_loss", "DQNConfig": "td_loss", "PQNConfig": "td_loss", "SACConfig": "critic_loss",
          "TD3Config": "critic_loss"}


# Dict observations for PQN and TD3 with --slow only (by default PQN takes images and TD3 grids here, and
# dicts reach their networks through the same encoder as PPO's, DQN's and SAC's).
@pytest.mark.parametrize("kind, algo", [
    *(pytest.param("dict", a, marks=pytest.mark.slow if a in ("PQNConfig", "TD3Config") else ()) for a in ALGOS),
    ("image", "PQNConfig"), ("grid", "TD3Config")])
def test_every_algorithm_trains_on_pytree_image_and_grid_observations(kind, algo):
    env = GridWalk(kind, continuous=algo in ("SACConfig", "TD3Config"))
    config = getattr(rljax, algo)(hidden_sizes=(8,), cnn_channels=(4,), **ALGOS[algo])
    result = rljax.train(config, env=env, options=rljax.RunOptions(quiet=True, checkpoints=False, tensorboard=False,
                                                                   handle_signals=False))
    assert len(result.rows) == 2 and result.rows[-1]["env_steps"] == config.total_timesteps
    assert math.isfinite(result.rows[-1][LOSSES[algo]])
    conv = [p for p in jax.tree_util.tree_flatten_with_path(result.state)[0]
            if "conv_0" in jax.tree_util.keystr(p[0]) and "kernel" in jax.tree_util.keystr(p[0])]
    if kind == "grid":  # 'auto' flattens a 2-D grid into the MLP
        assert not conv
    else:  # the image leaf went through the CNN
        assert conv and all(leaf.shape[-2:] == (2, 4) for _, leaf in conv)
    if algo in ("DQNConfig", "SACConfig", "TD3Config"):  # replay stores every leaf in its own dtype
        stored = result.state.buffer.data.obs
        spec = observation_spec(env)
        assert jax.tree.map(lambda x: (x.shape[1:], x.dtype), stored) == \
            jax.tree.map(lambda s: (s.shape, s.dtype), spec)


def test_encoder_override_from_the_config():
    env = GridWalk("image")
    for encoder, has_conv in (("auto", True), ("mlp", False)):
        config = rljax.PPOConfig(encoder=encoder, hidden_sizes=(8,), cnn_channels=(4,), **ALGOS["PPOConfig"])
        agent = rljax.agents.build_agent(config, env, env.default_params, None)
        state = jax.eval_shape(lambda k: agent.init(k, 0, 2, config.hyperparams(), env.default_params),
                               jax.random.key(0))
        paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(state.params)[0]]
        assert any("conv_0" in p for p in paths) == has_conv, paths


def test_normalize_obs_of_a_dict_observation_is_a_clear_error():
    with pytest.raises(ValueError) as err:
        rljax.train(rljax.PPOConfig(normalize_obs=True, **ALGOS["PPOConfig"]), env=GridWalk("dict"),
                    options=rljax.RunOptions(quiet=True, checkpoints=False))
    msg = str(err.value)
    assert "\n" not in msg and "needs an observation that is one array" in msg
    assert "['image']: uint8[5, 5, 2]" in msg and "['vec']: float32[3]" in msg and "normalize_obs=False" in msg


def test_a_dict_observation_policy_loads_acts_and_evaluates(tmp_path):
    env = GridWalk("dict")
    config = rljax.PPOConfig(hidden_sizes=(8,), cnn_channels=(4,), **ALGOS["PPOConfig"])
    result = rljax.train(config, env=env, options=rljax.RunOptions(run_dir=tmp_path / "run", quiet=True,
                                                                   handle_signals=False))
    policy = rljax.load(tmp_path / "run", env=env)
    obs, _ = env.reset(jax.random.key(0), env.default_params)
    one = policy.act(obs)
    batch = policy.act(jax.tree.map(lambda x: jnp.stack([x, x, x]), obs))
    assert one.shape == () and batch.shape == (3,) and int(batch[0]) == int(one)
    expected = result.agent.act(result.state, jax.tree.map(lambda x: x[None], obs), jax.random.key(0))
    assert int(jnp.ravel(expected)[0]) == int(one)
    episodes = rljax.policy.evaluate.evaluate(policy, 4)
    assert episodes.returns.shape == (4,) and np.all(np.isfinite(episodes.returns))


def test_auto_flattens_an_image_too_small_for_the_convolutions():
    layout = encoder_layout({"tiny": SDS((2, 8, 3), jnp.float32), "ok": SDS((3, 3, 1), jnp.float32)})
    assert [(leaf.name, leaf.kind) for leaf in layout] == [("ok", "cnn"), ("tiny", "flat")]
    with pytest.raises(ValueError, match="too small"):
        encoder_layout(SDS((2, 8, 3), jnp.float32), "cnn")


def test_image_keys_that_would_share_parameter_names_are_refused():
    with pytest.raises(ValueError, match=r"observation\['a b'\] and observation\['a_b'\] would share"):
        encoder_layout({"a b": SDS((5, 5, 1), jnp.float32), "a_b": SDS((5, 5, 1), jnp.float32)})


# Slow: by default the tiny MuZero run of tests/conftest.py (its representation through the same
# observation_layout) and the image case of test_every_algorithm_trains_on_pytree_image_and_grid_observations
# (the encoders' CNN) stand for it.
@pytest.mark.slow
def test_muzero_represents_image_observations_with_the_cnn():
    """MuZero on a single-player image env (as on MinAtar): its representation encodes the image with
    the CNN, and a short run trains its three functions to finite losses."""
    pytest.importorskip("mctx")
    from rljax.agents.muzero import MuZeroConfig

    env = GridWalk("image")
    config = MuZeroConfig(total_timesteps=64, num_envs=4, num_steps=8, num_minibatches=1, num_epochs=1,
                          updates_per_chunk=1, num_simulations=4, hidden_sizes=(8,), latent_size=8, unroll_steps=2,
                          cnn_channels=(4,))
    result = rljax.train(config, env=env, options=rljax.RunOptions(quiet=True, checkpoints=False, tensorboard=False,
                                                                   handle_signals=False))
    assert result.rows[-1]["env_steps"] == config.total_timesteps
    assert all(math.isfinite(result.rows[-1][k]) for k in ("policy_loss", "value_loss", "reward_loss"))
    conv = [leaf for path, leaf in jax.tree_util.tree_flatten_with_path(result.state.params)[0]
            if "conv_0" in jax.tree_util.keystr(path) and "kernel" in jax.tree_util.keystr(path)]
    assert conv and all(leaf.shape[-2:] == (2, 4) for leaf in conv)
