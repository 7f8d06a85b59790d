"""The recurrent pieces by hand: sequence layout, resets, replaying a rollout from its recorded memory
(equal to the memory and outputs the behaviour policy had while acting), bootstrap outputs from the
memory after each step, and config validation of ``memory``/``bptt_length``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envs.memory import MemoryCue
from rljax.agents.base import make_env_stack
from rljax.agents.ppo import PPOConfig
from rljax.agents.pqn import PQNConfig
from rljax.agents.recurrent import (Sequences, bootstrap_outputs, memory_step, replay, rollout_resets, sequence_apply,
                                    sequence_length, sequences, to_sequences)
from rljax.core.networks import RecurrentActorCritic, initial_memory
from rljax.core.rollout import RolloutCarry, Transition, rollout


def _traj(done: np.ndarray, memory=None) -> Transition:
    t, b = done.shape
    zeros = jnp.zeros((t, b))
    return Transition(obs=jnp.arange(t * b, dtype=jnp.float32).reshape(t, b, 1), action=zeros, reward=zeros,
                      terminated=jnp.asarray(done), truncated=jnp.zeros((t, b), bool), next_obs=zeros[..., None],
                      extras=(), memory=memory)


def test_to_sequences_cuts_time_windows_per_env():
    x = jnp.arange(8).reshape(4, 2)  # x[t, b] = 2t + b
    # Window 0 (t = 0, 1) of env 0, then of env 1, then window 1 (t = 2, 3) of each.
    np.testing.assert_array_equal(to_sequences(x, 2), [[0, 2], [1, 3], [4, 6], [5, 7]])
    np.testing.assert_array_equal(to_sequences(x, 4), [[0, 2, 4, 6], [1, 3, 5, 7]])
    assert to_sequences(jnp.zeros((4, 2, 3, 5)), 2).shape == (4, 2, 3, 5)


def test_resets_mark_the_step_after_an_episode_ended_and_never_the_first():
    done = np.zeros((4, 2), bool)
    done[1, 0] = done[3, 1] = done[0, 1] = True
    np.testing.assert_array_equal(rollout_resets(_traj(done)), [[0, 0], [0, 1], [1, 0], [0, 0]])


def test_sequences_start_from_the_memory_recorded_at_their_first_step():
    memory = jnp.arange(4 * 2 * 3, dtype=jnp.float32).reshape(4, 2, 3)
    done = np.zeros((4, 2), bool)
    done[1, 1] = True
    seqs = sequences(_traj(done, memory), 2)
    np.testing.assert_array_equal(seqs.memory, [memory[0, 0], memory[0, 1], memory[2, 0], memory[2, 1]])
    np.testing.assert_array_equal(seqs.reset, [[0, 0], [0, 0], [0, 0], [1, 0]])
    np.testing.assert_array_equal(seqs.obs[..., 0], [[0, 2], [1, 3], [4, 6], [5, 7]])
    lstm = (memory, -memory)
    starts = sequences(_traj(done, lstm), 4).memory
    np.testing.assert_array_equal(starts[1], -memory[0])


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_the_core_resets_its_memory_where_an_episode_starts(cell):
    net = RecurrentActorCritic(action_dim=2, discrete=True, hidden_sizes=(8,), memory=cell, memory_size=5)
    x = jax.random.normal(jax.random.key(1), (3, 2, 4))
    m0 = initial_memory(cell, 5, 2)
    params = net.init(jax.random.key(0), m0, x, jnp.zeros((3, 2), bool))
    reset = jnp.array([[False, False], [False, True], [False, False]])
    memories, dist, value = net.apply(params, m0, x, reset)
    # Env 1 restarts at step 1: steps 1-2 equal a fresh run of those two steps from zeros ...
    fresh, fresh_dist, fresh_value = net.apply(params, initial_memory(cell, 5, 1), x[1:, 1:], jnp.zeros((2, 1), bool))
    np.testing.assert_allclose(value[1:, 1], fresh_value[:, 0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(dist.logits[1:, 1], fresh_dist.logits[:, 0], rtol=1e-6, atol=1e-6)
    # ... while env 0 carries its memory: its step 1 differs from a fresh start on x[1].
    _, _, start = net.apply(params, initial_memory(cell, 5, 1), x[1:2, :1], jnp.zeros((1, 1), bool))
    assert abs(float(value[1, 0] - start[0, 0])) > 1e-6
    assert jax.tree.leaves(memories)[0].shape == (3, 2, 5)


def _memory_rollout(cell: str):
    """A 12-step rollout of an untrained recurrent actor-critic in 3 MemoryCue envs (delay 2: episodes of
    4 steps, so several end inside it), and what the network and the rollout saw."""
    env = MemoryCue()
    params_env = env.default_params.replace(delay=2)
    venv = make_env_stack(env, params_env, 3)
    net = RecurrentActorCritic(action_dim=2, discrete=True, hidden_sizes=(8,), memory=cell, memory_size=6)
    obs, env_state = venv.reset(jax.random.key(0), params_env)
    m0 = initial_memory(cell, 6, 3)
    params = net.init(jax.random.key(1), m0, obs[None], jnp.zeros((1, 3), bool))

    def policy(key, o, memory):
        memory, (dist, value) = memory_step(net.apply, params, memory, o)
        action = dist.sample(key)
        return action, (dist.log_prob(action), value), memory

    carry, traj, _ = rollout(venv, params_env, policy, RolloutCarry(env_state, obs, m0), jax.random.key(2), 12)
    return net, params, carry, traj, []


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_replaying_a_rollout_gives_what_the_behaviour_policy_saw(cell):
    net, params, carry, traj, _ = _memory_rollout(cell)
    done = np.asarray(traj.terminated | traj.truncated)
    assert done.sum() >= 6  # episodes of 4 steps end inside the rollout
    leaf = jax.tree.leaves(traj.memory)[0]
    # The rollout records the memory each step started from: zeros where an episode starts.
    starts = np.asarray(rollout_resets(traj))
    assert np.all(np.asarray(leaf)[starts] == 0) and np.any(np.asarray(leaf)[1:][~starts[1:]] != 0)
    memories, (dist, values) = replay(net.apply, params, traj)
    log_prob, behaviour_values = traj.extras
    np.testing.assert_allclose(dist.log_prob(traj.action), log_prob, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(values, behaviour_values, rtol=1e-5, atol=1e-6)
    # memories[t] is the memory after step t: the recorded input of step t + 1 wherever no episode ended.
    after = np.asarray(jax.tree.leaves(memories)[0])
    np.testing.assert_allclose(after[:-1][~done[:-1]], np.asarray(leaf)[1:][~done[:-1]], rtol=1e-5, atol=1e-6)
    # The carry's memory is the last step's, reset where that step ended an episode.
    final = np.where(done[-1][:, None], 0.0, after[-1])
    np.testing.assert_allclose(jax.tree.leaves(carry.memory)[0], final, rtol=1e-5, atol=1e-6)


def test_bootstrap_outputs_are_one_step_from_the_memory_after_each_step():
    net, params, _, traj, _ = _memory_rollout("gru")
    memories, _ = replay(net.apply, params, traj)
    _, values = bootstrap_outputs(net.apply, params, memories, traj.next_obs)
    for t in (0, 5, 11):
        _, (_, want) = memory_step(net.apply, params, memories[t], traj.next_obs[t])
        np.testing.assert_allclose(values[t], want, rtol=1e-5, atol=1e-6)


def test_a_sequence_batch_runs_each_sequence_from_its_memory():
    net, params, _, traj, _ = _memory_rollout("lstm")
    seqs = sequences(traj, 4)
    dist, values = sequence_apply(net.apply)(params, seqs)
    assert values.shape == (9, 4)
    _, (_, replayed) = replay(net.apply, params, traj)
    np.testing.assert_allclose(values, to_sequences(replayed, 4), rtol=1e-5, atol=1e-6)
    # A minibatch of some of the sequences gives those sequences' values.
    some = jax.tree.map(lambda x: x[jnp.array([7, 2])], seqs)
    assert isinstance(some, Sequences)
    np.testing.assert_allclose(sequence_apply(net.apply)(params, some)[1], values[jnp.array([7, 2])], rtol=1e-6)


def test_gradients_flow_back_through_the_memory_within_a_sequence_and_stop_at_a_reset():
    net, params, _, _, _ = _memory_rollout("gru")
    obs = jax.random.normal(jax.random.key(3), (2, 4, 3))  # 2 sequences of 4 steps
    reset = jnp.array([[False] * 4, [False, False, True, False]])  # the second restarts at step 2

    def last_values(o):
        return sequence_apply(net.apply)(params, Sequences(o, reset, initial_memory("gru", 6, 2)))[1][:, -1]

    grads = jax.jacrev(lambda o: jnp.sum(last_values(o)))(obs)  # d(sum of last values) / d obs [2, 4, 3]
    assert float(jnp.abs(grads[0, 0]).sum()) > 0  # the first observation reaches the last step through memory
    assert float(jnp.abs(grads[1, :2]).sum()) == 0  # nothing before a reset does
    assert float(jnp.abs(grads[1, 2]).sum()) > 0


@pytest.mark.parametrize("config_cls", [PPOConfig, PQNConfig])
def test_memory_fields_are_validated_with_what_would_be_valid(config_cls):
    with pytest.raises(ValueError, match=r"memory.*'rnn'.*gru"):
        config_cls(memory="rnn")
    with pytest.raises(ValueError, match=r"bptt_length=5 does not divide num_steps=16"):
        config_cls(memory="gru", num_steps=16, num_envs=4, num_minibatches=1, bptt_length=5)
    with pytest.raises(ValueError, match=r"whole sequences.*4 \* 2 = 8 sequences is not divisible by "
                                         r"num_minibatches=16"):
        config_cls(memory="lstm", num_envs=4, num_steps=16, bptt_length=8, num_minibatches=16)
    with pytest.raises(ValueError, match="memory_size must be a positive integer, got 0"):
        config_cls(memory="gru", memory_size=0)
    with pytest.raises(ValueError, match="bptt_length must be an integer >= 0, got -1"):
        config_cls(bptt_length=-1)
    config_cls(bptt_length=5, memory_size=32, num_steps=16)  # unused without memory: one config serves both
    if config_cls is PPOConfig:
        with pytest.raises(ValueError, match="leave shared_torso off with --memory"):
            PPOConfig(memory="gru", shared_torso=True)
    # Without memory the sequence rule does not apply: 64 samples in 16 minibatches are fine.
    config_cls(num_envs=4, num_steps=16, num_minibatches=16)
    assert sequence_length(config_cls(memory="gru", num_envs=4, num_steps=16, num_minibatches=4)) == 16
    assert sequence_length(config_cls(memory="gru", num_envs=4, num_steps=16, num_minibatches=4, bptt_length=4)) == 4


def test_a_truncated_episode_restarts_from_zeros_and_bootstraps_with_its_own_memory():
    """MemoryCue cut by its time limit after 3 steps (the query would come after 8): every episode
    ends truncated, never terminated."""
    env = MemoryCue()
    params_env = env.default_params.replace(delay=8, max_steps_in_episode=3)
    venv = make_env_stack(env, params_env, 2)
    net = RecurrentActorCritic(action_dim=2, discrete=True, hidden_sizes=(8,), memory="gru", memory_size=6)
    obs, env_state = venv.reset(jax.random.key(0), params_env)
    m0 = initial_memory("gru", 6, 2)
    params = net.init(jax.random.key(1), m0, obs[None], jnp.zeros((1, 2), bool))

    def policy(key, o, memory):
        memory, (dist, _) = memory_step(net.apply, params, memory, o)
        return dist.sample(key), (), memory

    carry, traj, _ = rollout(venv, params_env, policy, RolloutCarry(env_state, obs, m0), jax.random.key(2), 9)
    truncated = np.asarray(traj.truncated)
    assert truncated[2::3].all() and truncated.sum() == 6 and not np.asarray(traj.terminated).any()
    recorded = np.asarray(traj.memory)
    assert not recorded[3::3].any() and recorded[1::3].any()  # zeros exactly where an episode starts
    memories, _ = replay(net.apply, params, traj)
    _, values = bootstrap_outputs(net.apply, params, memories, traj.next_obs)
    for t in (2, 5):  # truncated steps: V(final obs) with the memory of the episode that was cut
        _, (_, own) = memory_step(net.apply, params, memories[t], traj.next_obs[t])
        _, (_, fresh) = memory_step(net.apply, params, initial_memory("gru", 6, 2), traj.next_obs[t])
        np.testing.assert_allclose(values[t], own, rtol=1e-5, atol=1e-6)
        assert np.all(np.abs(np.asarray(values[t]) - np.asarray(fresh)) > 1e-6)
        assert np.asarray(memories[t]).any()  # the memory after a truncated step is not reset before bootstrapping


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_replay_and_sequences_restart_memory_after_a_truncated_step_as_acting_does(cell):
    """Episodes that end only by truncation (MemoryCue cut after 3 steps, its query due after 8): the
    replay of the rollout and its BPTT sequences (4 steps, so episodes start inside them) give the
    log-probs and values the behaviour policy had at every step, which needs a reset after each
    truncated step as well as after each terminated one."""
    env = MemoryCue()
    params_env = env.default_params.replace(delay=8, max_steps_in_episode=3)
    venv = make_env_stack(env, params_env, 2)
    net = RecurrentActorCritic(action_dim=2, discrete=True, hidden_sizes=(8,), memory=cell, memory_size=6)
    obs, env_state = venv.reset(jax.random.key(0), params_env)
    m0 = initial_memory(cell, 6, 2)
    params = net.init(jax.random.key(1), m0, obs[None], jnp.zeros((1, 2), bool))

    def policy(key, o, memory):
        memory, (dist, value) = memory_step(net.apply, params, memory, o)
        action = dist.sample(key)
        return action, (dist.log_prob(action), value), memory

    _, traj, _ = rollout(venv, params_env, policy, RolloutCarry(env_state, obs, m0), jax.random.key(2), 12)
    truncated = np.asarray(traj.truncated)
    assert truncated[2::3].all() and truncated.sum() == 8 and not np.asarray(traj.terminated).any()
    log_prob, behaviour_values = traj.extras
    _, (dist, values) = replay(net.apply, params, traj)
    np.testing.assert_allclose(dist.log_prob(traj.action), log_prob, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(values, behaviour_values, rtol=1e-5, atol=1e-6)
    seqs = sequences(traj, 4)
    np.testing.assert_array_equal(seqs.reset, to_sequences(rollout_resets(traj), 4))
    assert np.asarray(seqs.reset).sum() == 6  # episodes start at steps 3, 6 and 9: inside each window
    seq_dist, seq_values = sequence_apply(net.apply)(params, seqs)
    np.testing.assert_allclose(seq_dist.log_prob(to_sequences(traj.action, 4)), to_sequences(log_prob, 4), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(seq_values, to_sequences(behaviour_values, 4), rtol=1e-5, atol=1e-6)


def test_a_recurrent_agent_acts_on_its_own_envs_or_says_how_to_act_from_another_memory():
    from rljax.agents import build_agent
    from rljax.core.registry import make

    config = PPOConfig(env="MemoryCue-v0", memory="gru", memory_size=8, hidden_sizes=(8,), num_envs=4, num_steps=8,
                       num_minibatches=2)
    env, params = make(config.env)
    agent = build_agent(config, env, params, None)
    state = agent.init(jax.random.key(0), 0, 2, config.hyperparams(), params)
    action = agent.act(state, state.obs)
    want, memory = agent.policy_step(agent.policy_params(state), state.obs, state.memory, None, True)
    np.testing.assert_array_equal(action, want)
    assert jax.tree.leaves(memory)[0].shape == (4, 8)
    with pytest.raises(ValueError, match=r"obs holds 1 observations but the state has 4 envs.*policy_step"):
        agent.act(state, state.obs[:1])
