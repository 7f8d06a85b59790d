"""Every gymnax environment trains: PPO on each, DQN on each with Discrete actions, SAC on each with a Box.

The list comes from gymnax's own registry at collection time, so an environment a new gymnax release
adds is tested (or fails) without anyone editing this file; one that cannot be built offline must
be listed in :data:`rljax.core.registry.GYMNAX_UNAVAILABLE` with its reason. The default suite trains
one environment per family (classic control, bsuite, misc; MinAtar's games train as rljax's own
``<Game>-MinAtar`` in tests/integration/test_minatar.py) and algorithm, the first in gymnax's
registry order; ``--slow`` trains every one (every environment is also stepped through the
env contract by ``tests/unit/test_env.py`` by default). Each case trains two
chunks of a tiny configuration (compiling dominates) and checks the rows: finite losses, the env
steps done, and, for replay, that the buffer keeps the observation's own shape and dtype.
"""

from __future__ import annotations

import math
import urllib.error

import gymnax
import jax
import numpy as np
import pytest

import rljax
from rljax.core import registry as env_registry
from rljax.env import is_discrete, observation_spec

BUILDABLE = [g for g in gymnax.registered_envs if g not in env_registry.GYMNAX_UNAVAILABLE]

# SAC's default target entropy is -|A| nats, which a squashed policy on PointRobot's tiny action box
# [-0.1, 0.1]^2 can never reach (its uniform distribution has log(0.2^2) = -3.2 nats): make_sac refuses
# it, naming the smallest scale that works, and this is the run a user would make after reading that.
SAC_OVERRIDES = {"PointRobot-misc": dict(target_entropy_scale=2.0)}


def _family(gid: str) -> str:
    """gymnax's family of ``gid``: the id's suffix (``bsuite``, ``MinAtar``, ``misc``), or ``classic``."""
    suffix = gid.rsplit("-", 1)[-1]
    return "classic" if suffix.startswith("v") and suffix[1:].isdigit() else suffix


def _cases() -> list:
    cases, seen = [], set()
    for gid in BUILDABLE:
        env, params = env_registry.make(env_registry.GYMNAX_PREFIX + gid)
        discrete = is_discrete(env.action_space(params))
        for algo in ("ppo", "dqn" if discrete else "sac"):
            key = (_family(gid), algo)
            slow = key in seen or _family(gid) == "MinAtar"  # rljax's own MinAtar games train in test_minatar.py
            cases.append(pytest.param(gid, algo, id=f"{gid}-{algo}", marks=pytest.mark.slow if slow else ()))
            seen.add(key)
    return cases


def _config(gid: str, algo: str):
    name = env_registry.GYMNAX_PREFIX + gid
    small = dict(env=name, hidden_sizes=(8,), cnn_channels=(4,))
    if algo == "ppo":
        return rljax.PPOConfig(total_timesteps=2 * 2 * 8, num_envs=2, num_steps=8, num_minibatches=1, num_epochs=1,
                               updates_per_chunk=1, **small)
    offpolicy = dict(total_timesteps=64, num_envs=2, batch_size=8, buffer_size=64, learning_starts=16,
                     updates_per_chunk=16, **small)
    if algo == "dqn":
        return rljax.DQNConfig(**offpolicy)
    return rljax.SACConfig(**offpolicy, **SAC_OVERRIDES.get(gid, {}))


LOSSES = {"ppo": ("policy_loss", "value_loss"), "dqn": ("td_loss",), "sac": ("critic_loss", "actor_loss")}


def test_the_registry_is_covered_whole():
    assert set(BUILDABLE) | set(env_registry.GYMNAX_UNAVAILABLE) == set(gymnax.registered_envs)
    assert set(env_registry.GYMNAX_UNAVAILABLE) <= set(gymnax.registered_envs), "a listed env left gymnax"
    assert len(BUILDABLE) >= 24


@pytest.mark.parametrize("gid, algo", _cases())
def test_gymnax_env_trains(gid, algo):
    config = _config(gid, algo)
    result = rljax.train(config, options=rljax.RunOptions(quiet=True, checkpoints=False, tensorboard=False,
                                                          handle_signals=False))
    assert len(result.rows) == 2
    last = result.rows[-1]
    assert last["env_steps"] == config.total_timesteps
    losses = {k: last[k] for k in LOSSES[algo] if k in last}
    assert losses and all(math.isfinite(v) for v in losses.values()), last
    assert last["nonfinite_state"] == 0.0
    if algo != "ppo":
        env, params = env_registry.make(config.env)
        spec = observation_spec(env, params)
        buffer = result.state.buffer
        assert buffer.data.obs.shape == (config.buffer_size, *spec.shape) and buffer.data.obs.dtype == spec.dtype
        assert int(buffer.size) == config.total_timesteps  # every step stored (n = 1: no tail held back)


def test_unavailable_env_names_its_reason(monkeypatch):
    """Building MNISTBandit downloads MNIST; offline that fails with an error saying so, not a bare URLError."""
    gid = "MNISTBandit-bsuite"
    assert gid in env_registry.GYMNAX_UNAVAILABLE

    def offline(*args, **kwargs):
        raise urllib.error.URLError("Name or service not known")

    monkeypatch.setattr("gymnax.utils.load_mnist._download", offline)  # whether or not /tmp/mnist holds it
    with pytest.raises(ValueError, match=rf"gymnax/{gid}.*downloads.*MNIST.*Name or service not known"):
        env_registry.make(env_registry.GYMNAX_PREFIX + gid)


def test_sac_on_a_tiny_box_names_the_scale_that_works():
    with pytest.raises(ValueError) as err:
        rljax.train(rljax.SACConfig(env="gymnax/PointRobot-misc", total_timesteps=64, num_envs=2,
                                    learning_starts=16, updates_per_chunk=16), options=rljax.RunOptions(quiet=True,
                    checkpoints=False))
    msg = str(err.value)
    assert "\n" not in msg and "target_entropy_scale" in msg and "1.61" in msg, msg
    assert "Box(shape=(2,)" in msg and "low=-0.1" in msg, msg


@pytest.mark.parametrize("algo, env, says", [
    ("DQNConfig", "Pendulum-v1", r"DQN needs a Discrete action space; .*Box\(shape=\(1,\).*use SAC, TD3 or PPO"),
    ("PQNConfig", "gymnax/Reacher-misc", r"PQN needs a Discrete action space; .*Box\(shape=\(2,\)"),
    ("SACConfig", "CartPole-v1", r"SAC needs a Box action space; .*Discrete\(2\).*use DQN, PQN or PPO"),
    ("TD3Config", "gymnax/Catch-bsuite", r"TD3 needs a Box action space; .*Discrete\(3\)"),
])
def test_an_action_space_an_algorithm_cannot_take_is_one_line_before_compiling(algo, env, says, monkeypatch):
    compiled = []
    monkeypatch.setattr(jax.stages.Lowered, "compile", lambda self, *a, **k: compiled.append(1))
    with pytest.raises(ValueError, match=says) as err:
        rljax.train(getattr(rljax, algo)(env=env), options=rljax.RunOptions(quiet=True, checkpoints=False))
    assert "\n" not in str(err.value) and not compiled


def test_an_observation_the_encoder_cannot_take_is_one_line():
    with pytest.raises(ValueError) as err:
        rljax.train(rljax.PPOConfig(env="gymnax/MemoryChain-bsuite", encoder="cnn"),
                    options=rljax.RunOptions(quiet=True, checkpoints=False))
    msg = str(err.value)
    assert "\n" not in msg and "PPO cannot encode the observations" in msg and "shape (3,)" in msg, msg
    assert "encoder='auto' or 'mlp'" in msg


@pytest.mark.slow  # by default tests/unit/core/test_buffers.py keeps each leaf's dtype and test_minatar.py trains on bool planes
def test_replay_keeps_minatar_bool_planes():
    """rljax's Breakout-MinAtar stores its [10, 10, 4] planes as bool: a quarter of gymnax's float32."""
    config = _config("Breakout-MinAtar", "dqn")
    for name, dtype in (("Breakout-MinAtar", np.bool_), ("gymnax/Breakout-MinAtar", np.float32)):
        state = rljax.train(config.__class__(**{**config.__dict__, "env": name}), options=rljax.RunOptions(quiet=True,
                            checkpoints=False, tensorboard=False, handle_signals=False)).state
        assert state.buffer.data.obs.dtype == dtype and state.buffer.data.next_obs.dtype == dtype
        assert state.buffer.data.obs.shape == (config.buffer_size, 10, 10, 4)
