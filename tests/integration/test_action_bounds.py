"""Box actions are clipped to the action space's own bounds ``[low, high]`` on the way out of a policy
(``Policy.act``, greedy and sampled; evaluation; both export formats), on an action box whose ``low``
is not ``-high`` and whose bounds differ per dimension (``tests/support/box_env.py``: low ``[0, -2]``, high
``[1, 3]``).

The policy is a PPO network set by hand to act ``a = obs`` (no hidden layers, an identity mean head,
zero bias), so every expected action is the observation clipped to the box, written out below. The
network is built from the shapes of the agent's state alone (``jax.eval_shape``): nothing is trained.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.agents import build_agent
from rljax.agents.ppo import PPOConfig
from rljax.policy.evaluate import evaluate
from rljax.policy.export import CONTINUOUS_TOLERANCE, ONNX_FILE, STABLEHLO_FILE, export
from rljax.policy.trained import Policy
from tests.support.box_env import EPISODE_LENGTH, HIGH, LOW, OBSERVATIONS, AsymmetricBox
from tests.support.export_doc import HAS_ONNX, doc_code

# The greedy action on each row of OBSERVATIONS: [-0.5, -2.5] -> [0, -2] (below low, though inside
# [-high, high]); [-3, -5] -> [0, -2]; [0.25, 1.5] unchanged; [2, 4] -> [1, 3].
CLIPPED = np.asarray([[0.0, -2.0], [0.0, -2.0], [0.25, 1.5], [1.0, 3.0]], np.float32)

# An episode's return (reward a[0] + a[1] per step): -2 - 2 + 1.75 + 4.
EPISODE_RETURN = 1.75


def random_observations(n: int = 1000) -> np.ndarray:
    """``n`` observations spread over the observation box [-5, 5]^2: below, inside and above the
    action box in each dimension."""
    return np.random.default_rng(0).uniform(-5.0, 5.0, (n, 2)).astype(np.float32)


@pytest.fixture(scope="module")
def policy() -> Policy:
    """A PPO policy on AsymmetricBox whose Gaussian has mean ``obs`` and std 4."""
    env = AsymmetricBox()
    config = PPOConfig(env="asymmetric-box", hidden_sizes=())
    agent = build_agent(config, env, env.default_params, None)
    abstract = jax.eval_shape(lambda: agent.init(jax.random.key(0), 0, 1, config.hyperparams(), env.default_params))
    shapes = agent.policy_params(abstract)
    assert shapes.obs_stats is None  # no observation normalisation: the network sees the raw obs
    params = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes.params)
    params["params"]["mean"]["kernel"] = jnp.eye(2, dtype=jnp.float32)
    params["params"]["log_std"] = jnp.full((2,), np.log(4.0), jnp.float32)
    return Policy(agent=agent, params=shapes._replace(params=params), config=config, env=env,
                  env_params=env.default_params, step=0)


def test_greedy_actions_are_clipped_to_low_and_high_per_dimension(policy):
    act = jax.jit(policy.act)
    np.testing.assert_array_equal(np.asarray(act(OBSERVATIONS)), CLIPPED)
    np.testing.assert_array_equal(np.asarray(act(OBSERVATIONS[0])), CLIPPED[0])  # one observation
    obs = random_observations()
    np.testing.assert_array_equal(np.asarray(act(obs)), np.clip(obs, LOW, HIGH))


def test_sampled_actions_stay_in_low_high_and_reach_both_bounds(policy):
    """Samples of N(0.5, 4^2) often leave the box on both sides: in dimension 0 about 45 % fall
    below low = 0 (10 % between -high = -1 and low) and 45 % above high = 1; in dimension 1, 27 %
    below -2 (8 % between -3 and -2) and 27 % above 3. Clipped to [low, high] they pile up exactly
    on the bounds and none is left below low."""
    obs = np.full((2000, 2), 0.5, np.float32)
    actions = np.asarray(jax.jit(lambda o, k: policy.act(o, k, deterministic=False))(obs, jax.random.key(1)))
    assert np.all(actions >= LOW) and np.all(actions <= HIGH), (actions.min(axis=0), actions.max(axis=0))
    assert np.all(np.any(actions == LOW, axis=0)) and np.all(np.any(actions == HIGH, axis=0))


def test_evaluation_sends_the_clipped_actions_to_the_env(policy):
    episodes = evaluate(policy, num_episodes=3)
    np.testing.assert_array_equal(episodes.lengths, [EPISODE_LENGTH] * 3)
    np.testing.assert_array_equal(episodes.returns, np.float32([EPISODE_RETURN] * 3))


@pytest.fixture(scope="module")
def exported(policy, tmp_path_factory):
    """The policy exported once (ONNX too when the converter is installed), and its policy.json."""
    out = tmp_path_factory.mktemp("asymmetric-export") / "out"
    return out, export(policy, out, onnx="auto")


def load_as_documented(heading: str, name: str, out_dir):
    """The loader function ``name`` defined under ``heading`` in docs/export.md, called on ``out_dir``."""
    namespace: dict = {}
    exec(doc_code(heading), namespace)  # noqa: S102 - the documented loader, run as users run it
    return namespace[name](out_dir)


def test_exported_stablehlo_clips_to_low_and_high(exported):
    out, meta = exported
    assert meta["action_space"]["low"] == LOW.tolist() and meta["action_space"]["high"] == HIGH.tolist()
    act, _ = load_as_documented("## Loading `policy.stablehlo`", "load_stablehlo_policy", out)
    assert STABLEHLO_FILE in meta["files"]
    np.testing.assert_array_equal(act(OBSERVATIONS), CLIPPED)
    obs = random_observations()
    np.testing.assert_array_equal(act(obs), np.clip(obs, LOW, HIGH))


@pytest.mark.skipif(not HAS_ONNX, reason="jax2onnx/onnxruntime not installed (pip install -e '.[export]')")
def test_exported_onnx_clips_to_low_and_high(exported):
    out, meta = exported
    assert ONNX_FILE in meta["files"], meta.get("onnx_skipped")
    act = load_as_documented("## Loading `policy.onnx`", "load_onnx_policy", out)
    np.testing.assert_allclose(act(OBSERVATIONS), CLIPPED, rtol=0, atol=CONTINUOUS_TOLERANCE)
    obs = random_observations()
    np.testing.assert_allclose(act(obs), np.clip(obs, LOW, HIGH), rtol=0, atol=CONTINUOUS_TOLERANCE)
