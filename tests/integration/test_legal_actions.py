"""Legal-action masks (``rljax.env.LEGAL_ACTION_MASK``): the helpers by hand, every discrete choice
(categorical policies, epsilon-greedy, Q-learning's bootstrap argmax) kept to the legal actions over
a million random masks, and PPO, DQN and PQN trained on ``ProbeLegalActions-v0`` (illegal actions pay
2, the highest legal one 1): their loaded policies take the highest legal action greedily and never an
illegal one, greedily or sampling, and their exported artefacts (the mask one of the inputs) act alike.
Envs without a mask keep their bits: the code paths are those of before when the observation has no mask
(``python -m tests.verification.bit_identity --compare``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
from envs.probes import ProbeLegalActions
import rljax
from rljax.agents.base import greedy_or_epsilon
from rljax.agents.dqn import QHead, expected_value_head, q_learning_loss
from rljax.agents.offpolicy import ReplayItem
from rljax.core.networks import ActorCritic, encoder_layout
from rljax.env import LEGAL_ACTION_MASK, describe_space, legal_action_mask, masked_actions, observation_spec
from rljax.policy.evaluate import evaluate
from rljax.policy.export import export

N_MASKS = 1_000_000
A = 6


def _random_masks(key, n=N_MASKS, a=A):
    """``n`` random masks over ``a`` actions, each with at least one legal action (``code`` 1 .. 2^a - 1)."""
    code = jax.random.randint(key, (n,), 1, 2 ** a)
    return (code[:, None] >> jnp.arange(a)) & 1 == 1


def test_the_mask_helpers_by_hand():
    values = jnp.array([[1.0, 5.0, 3.0], [-2.0, -1.0, 0.0]])
    mask = jnp.array([[True, False, True], [False, True, False]])
    masked = masked_actions(values, mask)
    assert masked[0, 1] == masked[1, 0] == masked[1, 2] == jnp.finfo(jnp.float32).min
    np.testing.assert_array_equal(jnp.argmax(masked, -1), [2, 1])
    np.testing.assert_array_equal(jnp.max(masked, -1), [3.0, -1.0])
    assert float(0.0 * jnp.min(masked)) == 0.0  # a zero discount times a masked value stays finite
    assert masked_actions(values, None) is values
    obs = {"observation": jnp.zeros(2), LEGAL_ACTION_MASK: jnp.array([1, 0, 1])}
    np.testing.assert_array_equal(legal_action_mask(obs), [True, False, True])
    assert legal_action_mask(obs).dtype == jnp.bool_
    assert legal_action_mask(jnp.zeros(3)) is None and legal_action_mask({"observation": jnp.zeros(3)}) is None
    env, params = envs.make("ProbeLegalActions-v0")
    assert describe_space(env.observation_space(params), compact=True) == (
        "Dict(observation: Box(1,) float32 [0, 0], legal_action_mask: Box(4,) bool [0, 1])")


def test_epsilon_greedy_picks_only_legal_actions_over_a_million_random_masks():
    k_mask, k_q, k_act = jax.random.split(jax.random.key(0), 3)
    legal = _random_masks(k_mask)
    q = jax.random.normal(k_q, (N_MASKS, A))
    pick = jax.jit(greedy_or_epsilon, static_argnames="deterministic")
    greedy = pick(q, None, 0.0, deterministic=True, legal=legal)
    random = pick(q, k_act, 1.0, deterministic=False, legal=legal)  # epsilon 1: every action random
    for actions in (greedy, random):
        assert bool(jnp.all(jnp.take_along_axis(legal, actions[:, None], 1)))
    np.testing.assert_array_equal(greedy, jnp.argmax(jnp.where(legal, q, -jnp.inf), -1))
    # The random action is uniform over the legal ones: with all 6 legal, each ~1/6; with {0, 5}, 1/2 each.
    all_legal = jnp.all(legal, -1)
    counts = np.bincount(np.asarray(random[all_legal]), minlength=A) / float(all_legal.sum())
    np.testing.assert_allclose(counts, 1 / A, atol=0.02)
    two = jnp.all(legal == jnp.array([True, False, False, False, False, True]), -1)
    assert abs(float(jnp.mean(random[two] == 0)) - 0.5) < 0.05
    # Without a mask: the unmasked choice as before (the same random integers).
    q8 = q[:8]
    k_explore, k_action = jax.random.split(k_act)
    before = jnp.where(jax.random.uniform(k_explore, (8,)) < 0.5,
                       jax.random.randint(k_action, (8,), 0, A, jnp.int32), jnp.argmax(q8, -1).astype(jnp.int32))
    np.testing.assert_array_equal(greedy_or_epsilon(q8, k_act, 0.5, deterministic=False), before)


def test_a_categorical_policy_samples_only_legal_actions_and_stays_finite():
    k_mask, k_obs, k_init, k_sample = jax.random.split(jax.random.key(1), 4)
    legal = _random_masks(k_mask)
    obs = {"observation": jax.random.normal(k_obs, (N_MASKS, 3)), LEGAL_ACTION_MASK: legal}
    one = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), obs)
    net = ActorCritic(action_dim=A, discrete=True, hidden_sizes=(8,), obs_layout=encoder_layout(one))
    params = jax.jit(net.init)(k_init, jax.tree.map(lambda x: x[:1], obs))

    @jax.jit
    def run(params, obs):
        dist, _ = net.apply(params, obs)
        actions = dist.sample(k_sample)
        return actions, dist.log_prob(actions), dist.entropy(), jnp.exp(dist.log_prob(jnp.zeros_like(actions)))

    actions, log_prob, entropy, p0 = run(params, obs)
    assert bool(jnp.all(jnp.take_along_axis(legal, actions[:, None], 1)))
    assert bool(jnp.all(jnp.isfinite(log_prob)) and jnp.all(jnp.isfinite(entropy)))
    assert bool(jnp.all(jnp.where(legal[:, 0], True, p0 == 0.0)))  # an illegal action has probability 0
    # The policy gradient through masked logits is finite, and nothing flows into an illegal action's logit.
    small = jax.tree.map(lambda x: x[:64], obs)

    def loss(params):
        dist, _ = net.apply(params, small)
        return -jnp.mean(dist.log_prob(jnp.argmax(small[LEGAL_ACTION_MASK], -1)) + 0.01 * dist.entropy())

    grads = jax.grad(loss)(params)
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in jax.tree.leaves(grads))


def test_the_bootstrap_action_is_the_best_legal_one_in_the_next_state():
    # Q(s') = [5, 1, 3] with action 0 illegal in s': a* = 2 (not 0), y = 1 + 0.5 * Q_target(s', 2).
    def apply_fn(params, obs, key=None):
        return params * jnp.ones((obs["observation"].shape[0], 1))

    online, target = jnp.array([0.0, 2.0, 0.0]), jnp.array([5.0, 1.0, 3.0])
    items = ReplayItem(obs={"observation": jnp.zeros((1, 1)), LEGAL_ACTION_MASK: jnp.ones((1, 3), bool)},
                       action=jnp.array([1]), reward=jnp.array([1.0]), discount=jnp.array([0.5]),
                       next_obs={"observation": jnp.zeros((1, 1)), LEGAL_ACTION_MASK: jnp.array([[False, True, True]])},
                       valid=jnp.ones(1, bool))
    head = expected_value_head("mse")
    for double_q, params in ((False, online), (True, target)):  # double Q: a* from the online Q(s') = target's here
        _, (td, _) = q_learning_loss(params, target, apply_fn, items, jnp.ones(1), double_q=double_q, head=head)
        want_q = params[1]
        np.testing.assert_allclose(td, [abs(want_q - (1.0 + 0.5 * 3.0))], rtol=1e-6)
    assert isinstance(head, QHead)


# ----- the stack: three algorithms trained on the legal-action probe -----

PROBE_RUNS = {
    "ppo": dict(num_envs=16, num_steps=4, total_timesteps=16 * 4 * 60, num_epochs=2, num_minibatches=2,
                hidden_sizes=(32,), learning_rate=3e-3, updates_per_chunk=30),
    "dqn": dict(num_envs=8, num_steps=4, total_timesteps=8 * 4 * 150, batch_size=64, buffer_size=1024,
                learning_starts=128, target_update_interval=32, hidden_sizes=(32,), learning_rate=3e-3,
                exploration_fraction=0.3, updates_per_chunk=75),
    "pqn": dict(num_envs=16, num_steps=4, total_timesteps=16 * 4 * 100, num_epochs=2, num_minibatches=2,
                hidden_sizes=(32,), learning_rate=3e-3, exploration_fraction=0.3, updates_per_chunk=50),
}


def _probe_policy(tmp_path, algo):
    from rljax.agents import algorithms

    cfg = algorithms()[algo].config_cls(env="ProbeLegalActions-v0", **PROBE_RUNS[algo])
    rljax.train(cfg, options=rljax.RunOptions(run_dir=tmp_path / "run", quiet=True, handle_signals=False))
    return rljax.load(tmp_path / "run")


# PQN with --slow: its masked acting is DQN's epsilon-greedy (above, and DQN's run stands for it).
@pytest.mark.parametrize("algo", [pytest.param(a, marks=pytest.mark.slow) if a == "pqn" else a for a in PROBE_RUNS])
def test_a_trained_policy_takes_the_best_legal_action_and_never_an_illegal_one(tmp_path, algo):
    policy = _probe_policy(tmp_path, algo)
    # Greedy: the highest legal action under each of the 15 masks (policy.act with the mask given apart
    # from the observation).
    masks = np.array([[(code >> a) & 1 == 1 for a in range(4)] for code in range(1, 16)])
    actions = np.asarray(policy.act({"observation": np.zeros((15, 1), np.float32)}, legal_action_mask=masks))
    np.testing.assert_array_equal(actions, 3 - np.argmax(masks[:, ::-1], axis=1))
    # Exploring (PPO's samples, the Q-learners' epsilon-greedy): never an illegal action, which would pay 2.
    sampled = evaluate(policy, 1024, seed=2, deterministic=False)
    assert float(np.max(sampled.returns)) <= 1.0 and float(np.mean(sampled.returns)) > 0.5
    spec = observation_spec(policy.env, policy.env_params)
    assert set(spec) == {"observation", LEGAL_ACTION_MASK}
    # The exported artefact takes each observation leaf as an input (the mask among them) and acts as policy.act.
    meta = export(policy, tmp_path / "out", onnx=False)
    assert [i["name"] for i in meta["signature"]["inputs"]] == ["obs_legal_action_mask", "obs_observation"]
    artefact = jax.export.deserialize((tmp_path / "out" / "policy.stablehlo").read_bytes())
    np.testing.assert_array_equal(np.asarray(artefact.call(masks, np.zeros((15, 1), np.float32))), actions)


def test_a_recurrent_policy_of_pytree_observations_exports_with_its_leaves_then_its_state(tmp_path):
    from rljax.agents.ppo import PPOConfig

    cfg = PPOConfig(env="ProbeLegalActions-v0", memory="gru", memory_size=8, num_envs=8, num_steps=4,
                    total_timesteps=8 * 4 * 2, num_minibatches=2, hidden_sizes=(16,), updates_per_chunk=2)
    rljax.train(cfg, options=rljax.RunOptions(run_dir=tmp_path / "run", quiet=True, handle_signals=False))
    policy = rljax.load(tmp_path / "run")
    meta = export(policy, tmp_path / "out", onnx=False)  # checked on played episodes, fed its own state
    assert [i["name"] for i in meta["signature"]["inputs"]] == ["obs_legal_action_mask", "obs_observation", "state_h"]
    assert [o["name"] for o in meta["signature"]["outputs"]] == ["action", "next_state_h"]
    assert meta["checks"]["max_abs_diff"]["policy.stablehlo"] == 0.0 and meta["checks"]["steps"] > 0
    # From the outside, two steps under every mask with the state carried: the actions policy.act gives.
    artefact = jax.export.deserialize((tmp_path / "out" / "policy.stablehlo").read_bytes())
    masks = np.array([[(code >> a) & 1 == 1 for a in range(4)] for code in range(1, 16)])
    obs = {"observation": np.zeros((15, 1), np.float32), LEGAL_ACTION_MASK: masks}
    mine_state, theirs = policy.initial_state(15), np.zeros((15, 8), np.float32)
    for _ in range(2):
        mine, mine_state = policy.act(obs, mine_state, deterministic=True)
        got, theirs = artefact.call(masks, obs["observation"], theirs)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(mine))
        assert np.all(np.take_along_axis(masks, np.asarray(got)[:, None], 1))


def test_a_mask_for_a_policy_whose_env_has_none_is_refused(tiny_run):
    policy = rljax.load(tiny_run("dqn")[0])
    with pytest.raises(ValueError, match="has no legal-action mask.*'legal_action_mask' leaf"):
        policy.act(np.zeros(4, np.float32), legal_action_mask=np.ones(2, bool))


class _WrongMask(ProbeLegalActions):
    """The probe with a mask of 3 entries for its 4 actions."""

    @staticmethod
    def _obs(legal):
        return {"observation": jnp.zeros((1,), jnp.float32), LEGAL_ACTION_MASK: legal[:3]}


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_a_mask_that_is_not_one_entry_per_action_is_refused_before_anything_compiles(algo):
    from rljax.agents import algorithms

    cfg = algorithms()[algo].config_cls(**PROBE_RUNS[algo])
    with pytest.raises(ValueError, match=r"legal_action_mask has shape \(3,\); its action space Discrete\(4\) needs "
                                         r"one entry per action: \(4,\)"):
        rljax.train(cfg, env=_WrongMask(), options=rljax.RunOptions(quiet=True))
