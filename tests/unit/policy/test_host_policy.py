"""A policy trained on host envs (the actor-learner path): it loads (``rljax.load``), acts with the
trained params, evaluates on host envs stepped on the host, draws its episode where the env can
render (and says so where it cannot), and exports like any other run. PPO and IMPALA, each trained
once per module on a few updates of ``gymnasium/CartPole-v1``."""

from __future__ import annotations

import dataclasses
import json

import gymnasium
import jax
import numpy as np
import pytest

import rljax
from rljax.actorlearner.learner import HostOptions, host_functions
from rljax.actorlearner.run import run_host, space_json
from rljax.agents.impala import IMPALAConfig
from rljax.agents.ppo import PPOConfig
from rljax.env import Box, Discrete
from rljax.host.sources import make_host_env
from rljax.policy.evaluate import evaluate
from rljax.policy.export import export
from rljax.policy.trained import HostEnvSpaces, is_host_policy, space_from_json
from rljax.policy.video import NotDrawableError, host_episode_frames, host_renderer, write_gif
from rljax.training.options import RunOptions

TINY = dict(env="gymnasium/CartPole-v1", num_envs=4, num_steps=32, total_timesteps=4 * 32 * 2, hidden_sizes=(16,))
CONFIGS = {"ppo": PPOConfig(**TINY, num_minibatches=2, num_epochs=1), "impala": IMPALAConfig(**TINY)}


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def host_run(request, tmp_path_factory):
    """``(run_dir, config, HostResult)`` of a two-update host run of each algorithm."""
    config = CONFIGS[request.param]
    run_dir = tmp_path_factory.mktemp(f"host-{request.param}") / "run"
    result = run_host(config, RunOptions(run_dir=run_dir, quiet=True, handle_signals=False),
                      HostOptions(max_policy_lag=0))
    return run_dir, config, result


OBS = np.array([[0.0, 0.1, 0.02, -0.3], [0.05, -0.2, -0.04, 0.5], [-0.1, 0.0, 0.1, 0.0]], np.float32)


def test_a_host_run_loads_and_acts_with_the_trained_params(host_run):
    run_dir, config, result = host_run
    policy = rljax.load(run_dir)
    assert is_host_policy(policy) and isinstance(policy.env, HostEnvSpaces)
    assert policy.env.name == "gymnasium/CartPole-v1" and policy.algorithm == type(config).__name__[:-6].lower()
    assert policy.observation_space.shape == (4,) and policy.action_space.n == 2 and policy.discrete
    assert policy.step == 256 and not policy.recurrent
    # The learner's own network on its final params: the loaded policy's greedy actions are its modes.
    network, *_ = host_functions(config, make_host_env(config.env, 1).spec)
    dist, _ = network.apply(result.params, OBS)
    expected = np.asarray(dist.mode())
    assert np.array_equal(np.asarray(policy.act(OBS)), expected)
    assert int(policy.act(OBS[0])) == expected[0]
    sampled = policy.act(OBS, jax.random.key(3), deterministic=False)
    assert sampled.shape == (3,) and sampled.dtype == np.int32 and set(np.asarray(sampled)) <= {0, 1}


def test_a_host_policy_evaluates_on_host_envs_and_its_video_is_the_first_episode(host_run, tmp_path):
    run_dir, _, _ = host_run
    policy = rljax.load(run_dir)  # plain load: rljax's own host envs evaluate and draw it
    episodes = evaluate(policy, 5, seed=7)
    assert episodes.returns.shape == episodes.lengths.shape == episodes.truncated.shape == (5,)
    # CartPole pays 1 a step: each return is its episode's length, each ended by the pole or the limit.
    assert np.array_equal(episodes.returns, episodes.lengths.astype(np.float32)) and (episodes.lengths >= 1).all()
    assert np.array_equal(episodes.truncated, episodes.lengths == 500)
    again = evaluate(policy, 5, seed=7)
    assert np.array_equal(again.returns, episodes.returns)
    assert not np.array_equal(evaluate(policy, 5, seed=8).lengths, episodes.lengths)  # the seed picks the episodes

    video = host_episode_frames(policy, 7)
    assert video.finished and video.length == episodes.lengths[0] and video.episode_return == episodes.returns[0]
    assert len(video.frames) == video.length and video.frames[0].dtype == np.uint8 and video.frames[0].shape[-1] == 3
    assert write_gif(video.frames, tmp_path / "v.gif").stat().st_size > 0


def test_a_host_policy_exports_like_any_other(host_run, tmp_path):
    run_dir, config, _ = host_run
    meta = export(rljax.load(run_dir), tmp_path / "out", onnx=False)
    saved = json.loads((tmp_path / "out" / "policy.json").read_text())
    assert saved["env"] == config.env and saved["step"] == 256
    assert meta["checks"]["max_abs_diff"]["policy.stablehlo"] == 0
    assert saved["observation_space"]["shape"] == [4] and saved["action_space"]["n"] == 2


def test_a_host_policy_evaluates_on_the_host_envs_of_a_given_factory(host_run):
    made = []
    policy = rljax.load(host_run[0], host_envs=lambda name, n, render=False: made.append(n) or make_host_env(name, n))
    assert evaluate(policy, 2).returns.shape == (2,) and made == [2]
    with pytest.raises(ValueError, match="no env params"):
        evaluate(rljax.load(host_run[0]), 2, env_params=object())
    bare = HostEnvSpaces("gymnasium/CartPole-v1", policy.observation_space, policy.action_space, None)
    with pytest.raises(ValueError, match="came with no factory to make the envs"):
        bare.make(2)


class _Blind(gymnasium.Env):
    """A Gymnasium env without an rgb_array render mode."""

    metadata = {"render_modes": ["human"]}
    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(4, np.float32), {}

    def step(self, action):
        return np.zeros(4, np.float32), 1.0, True, False, {}


def test_an_env_that_cannot_draw_is_a_clear_error(host_run):
    policy = rljax.load(host_run[0], host_envs=make_host_env)
    if "rljax-test/Blind-v0" not in gymnasium.registry:
        gymnasium.register("rljax-test/Blind-v0", entry_point=_Blind)
    for name, match in (("gymnasium/rljax-test/Blind-v0", "no rgb_array render mode .*human"),
                        ("envpool/CartPole-v1", "EnvPool batch, which sends no frames"),
                        ("server:127.0.0.1:5555", "env server, which sends no frames")):
        other = dataclasses.replace(policy, env=HostEnvSpaces(name, policy.observation_space, policy.action_space,
                                                              make_host_env))
        with pytest.raises(NotDrawableError, match=match):
            host_renderer(other)


@pytest.mark.parametrize("space", [Discrete(6), Box(-np.inf, np.inf, (3,)), Box(0, 255, (2, 2, 3), np.uint8),
                                   Box(np.array([-1.0, 0.0]), np.array([1.0, np.inf]), (2,))],
                         ids=["discrete", "unbounded", "image", "mixed"])
def test_saved_spaces_read_back_the_same(space):
    back = space_from_json(json.loads(json.dumps(space_json(space))))
    assert type(back) is type(space) and back.shape == space.shape and np.dtype(back.dtype) == np.dtype(space.dtype)
    if isinstance(space, Box):
        assert np.array_equal(np.asarray(back.low), np.asarray(space.low))
        assert np.array_equal(np.asarray(back.high), np.asarray(space.high))
    else:
        assert back.n == space.n


def test_a_bad_saved_space_names_itself():
    with pytest.raises(ValueError, match="kind 'tuple'"):
        space_from_json({"kind": "tuple"})
    with pytest.raises(ValueError, match="cannot be read"):
        space_from_json({"kind": "box", "shape": [2]})


def test_a_checkpoint_without_its_spaces_loads_by_asking_one_env(host_run, monkeypatch):
    """A host run saved before checkpoints recorded the spaces: loadable by asking one env (made and
    closed to read them), rljax's own or the given factory's."""
    from rljax.store.checkpoint import Checkpointer

    expected = np.asarray(rljax.load(host_run[0]).act(OBS))
    read = Checkpointer.read

    def without_spaces(self, step):
        leaves, meta = read(self, step)
        return leaves, {k: v for k, v in meta.items() if k != "spaces"}

    monkeypatch.setattr(Checkpointer, "read", without_spaces)
    np.testing.assert_array_equal(np.asarray(rljax.load(host_run[0]).act(OBS)), expected)
    made = []
    policy = rljax.load(host_run[0], host_envs=lambda name, n, render=False: made.append(n) or make_host_env(name, n))
    assert made == [1] and policy.action_space.n == 2
    np.testing.assert_array_equal(np.asarray(policy.act(OBS)), expected)


def test_a_host_policy_feeds_its_network_the_envs_dtype():
    """Training feeds the network the env's own dtype (uint8 Atari frames, which the Nature encoder
    scales by 1/255 only as uint8), so ``act`` casts to it: a host env's, a JAX env's uint8 image and
    a float32 vector alike."""
    from tests.support.grid_env import GridWalk
    from rljax.policy.trained import Policy

    image = Box(0, 255, (84, 84, 4), np.uint8)
    host = Policy(agent=None, params=None, config=None, env=HostEnvSpaces("envpool/Pong-v5", image, Discrete(6)),
                  env_params=None, step=0)
    batch, single = host._batch(np.zeros((2, 84, 84, 4), np.uint8), None, True)
    assert batch.dtype == np.uint8 and batch.shape == (2, 84, 84, 4) and not single
    env, params = rljax.make("CartPole-v1")
    jax_policy = Policy(agent=None, params=None, config=None, env=env, env_params=params, step=0)
    assert jax_policy._batch(np.zeros(4, np.float64), None, True)[0].dtype == np.float32
    grid = GridWalk("image")
    image_policy = Policy(agent=None, params=None, config=None, env=grid, env_params=grid.default_params, step=0)
    assert image_policy._batch(np.ones((3, 5, 5, 2), np.float64), None, True)[0].dtype == np.uint8
