"""IPPO and MAPPO (rljax/agents/mappo.py) on the multi-agent test game (envs/multiagent.py,
Rendezvous-v0): the known optimum on every seed, the centralised critic's views, one network per
agent (PerAgent), the team's evaluation and export, refused configs, and resume."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rljax
from envs.multiagent import Rendezvous
from rljax.agents.mappo import IPPOConfig, MAPPOConfig
from rljax.core import wrappers
from rljax.core.networks import ActorCritic, PerAgent, encoder_layout
from rljax.env import GLOBAL_STATE
from rljax.training.sweep import SweepSpec, run_sweep

# Learns the game in 1e5 joint steps (about 100 updates of 16 games x 64 steps).
FAST = dict(total_timesteps=100_000, num_envs=16, num_steps=64, num_minibatches=4, num_epochs=4,
            hidden_sizes=(64, 64), learning_rate=2.5e-3, ent_coef=0.01)
OPTIMUM = 2 * Rendezvous().optimal_return()  # the team's: -6/7


def _final_returns(result) -> list[float]:
    return [rows[-1]["episode_return_mean"] for rows in result.member_rows]


# Slow: by default the MAPPO run below (one seed, its greedy policy within 0.15 of the optimum over 400
# games), test_per_agent_answers_each_row_... and the shared IPPO runs of tests/unit/test_multiagent.py stand for it.
@pytest.mark.slow
@pytest.mark.parametrize("config", [MAPPOConfig(**FAST), IPPOConfig(**FAST, separate_params=True)],
                         ids=["mappo", "ippo-separate"])
def test_the_team_reaches_the_optimum_on_every_seed(config):
    """3 seeds in one compiled sweep; each seed's last chunk within 0.05 of the optimum's -6/7 (random
    play: about -9; the shared policy without an agent id stays near -1.13, test_multiagent.py)."""
    result, _, _ = run_sweep(config, SweepSpec(seeds=(0, 1, 2)), env=Rendezvous(), quiet=True, plots=False)
    finals = _final_returns(result)
    assert min(finals) > OPTIMUM - 0.05, finals
    row = result.member_rows[0][-1]
    assert row["episode_return_mean"] == pytest.approx(row["agent_return/agent_0"] + row["agent_return/agent_1"])


def _layout(obs):
    return encoder_layout(jax.tree.map(lambda x: x[0], obs))


def test_the_centralised_critic_reads_only_the_global_state_and_the_policy_never_does():
    obs = {"observation": jax.random.normal(jax.random.key(0), (6, 8)), GLOBAL_STATE: jax.random.normal(
        jax.random.key(1), (6, 16)), wrappers.AGENT_ID: jnp.tile(jnp.eye(2), (3, 1))}
    net = ActorCritic(action_dim=3, discrete=True, obs_layout=_layout(obs), actor_keys=("agent_id", "observation"),
                      critic_keys=(GLOBAL_STATE,))
    params = net.init(jax.random.key(2), obs)
    dist, value = net.apply(params, obs)
    other = {**obs, "observation": obs["observation"] + 1.0, wrappers.AGENT_ID: obs[wrappers.AGENT_ID][::-1]}
    np.testing.assert_array_equal(net.apply(params, other)[1], value)  # the critic ignores the agent's own leaves
    moved = {**obs, GLOBAL_STATE: obs[GLOBAL_STATE] * 3.0}
    np.testing.assert_array_equal(net.apply(params, moved)[0].logits, dist.logits)  # the actor ignores the state
    assert not np.allclose(net.apply(params, moved)[1], value)
    assert params["params"]["critic_torso"]["hidden_0"]["kernel"].shape == (16, 64)
    assert params["params"]["actor_torso"]["hidden_0"]["kernel"].shape == (10, 64)
    with pytest.raises(ValueError, match=r"the observation has keys \['agent_id', 'global_state', 'observation'\]; "
                                         r"the view needs \['world'\]"):
        ActorCritic(action_dim=3, discrete=True, obs_layout=_layout(obs), critic_keys=("world",)).init(
            jax.random.key(0), obs)
    with pytest.raises(ValueError, match="they need shared_torso=False"):
        ActorCritic(action_dim=3, discrete=True, shared_torso=True, critic_keys=(GLOBAL_STATE,))


def test_per_agent_answers_each_row_with_its_agents_own_copy_in_any_row_order():
    obs = {"observation": jax.random.normal(jax.random.key(0), (6, 8)), wrappers.AGENT_ID: jnp.tile(jnp.eye(3), (2, 1))}
    fields = dict(action_dim=4, discrete=True, hidden_sizes=(16,), obs_layout=_layout(obs))
    net = PerAgent(ActorCritic, tuple(fields.items()), 3)
    params = net.init(jax.random.key(1), obs)
    assert sorted(params["params"]) == ["agent_0", "agent_1", "agent_2"]
    one = ActorCritic(**fields)
    for order in (np.arange(6), np.array([5, 0, 3, 1, 4, 2])):
        rows = jax.tree.map(lambda x: x[order], obs)
        dist, value = net.apply(params, rows)
        agents = np.argmax(np.asarray(rows[wrappers.AGENT_ID]), -1)
        for agent in range(3):  # copy `agent` on the whole batch, read on its own rows
            d, v = one.apply({"params": params["params"][f"agent_{agent}"]}, rows)
            np.testing.assert_array_equal(dist.logits[agents == agent], d.logits[agents == agent])
            np.testing.assert_array_equal(value[agents == agent], v[agents == agent])
    kernels = [params["params"][f"agent_{i}"]["value"]["kernel"] for i in range(2)]
    assert not np.allclose(*kernels)
    with pytest.raises(ValueError, match="each row needs its 'agent_id' one-hot"):
        net.init(jax.random.key(0), {"observation": obs["observation"]})


def test_bad_multi_agent_configs_and_envs_are_refused_by_name():
    from rljax.agents.base import agent_rows

    assert agent_rows(IPPOConfig(separate_params=True, agent_id=False))["agent_id"]  # the copies are picked by it
    with pytest.raises(ValueError, match="separate_params=True is for the feed-forward actor-critic; memory='gru'"):
        IPPOConfig(separate_params=True, memory="gru")
    cartpole, _ = rljax.make("CartPole-v1")
    with pytest.raises(ValueError, match="IPPO trains multi-agent envs .* CartPole-v1 has one agent: train ppo on it"):
        rljax.train(IPPOConfig(**FAST), env=cartpole, options=rljax.RunOptions(quiet=True))
    assert not rljax.agents.fits_env("mappo", cartpole, cartpole.default_params)
    assert rljax.agents.fits_env("mappo", Rendezvous(), Rendezvous().default_params)


class _NoGlobalState(Rendezvous):
    def observation_space(self, params):
        return {"observation": super().observation_space(params)["observation"]}

    def _obs(self, position):
        return {"observation": super()._obs(position)["observation"]}


def test_mappo_needs_a_global_state_and_says_so():
    env = _NoGlobalState()
    assert rljax.agents.fits_env("ippo", env, env.default_params)
    assert not rljax.agents.fits_env("mappo", env, env.default_params)
    with pytest.raises(ValueError, match=r"^MAPPOConfig: a centralised critic reads the env's 'global_state'; "
                                         r".* has keys "
                                         r"\['agent_id', 'observation'\]"):
        rljax.train(MAPPOConfig(**FAST), env=env, options=rljax.RunOptions(quiet=True))


@pytest.fixture(scope="module")
def mappo_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("mappo") / "run"
    config = MAPPOConfig(**{**FAST, "total_timesteps": 50_000}, eval_interval=4)
    result = rljax.train(config, env=Rendezvous(), options=rljax.RunOptions(quiet=True, run_dir=str(run_dir)))
    return run_dir, result


def test_a_loaded_mappo_policy_acts_per_agent_without_the_global_state(mappo_run):
    """The policy of a multi-agent run acts on one agent's row (its observation and id; the global state
    is the critic's); evaluation plays whole games and scores the team."""
    from rljax.policy.evaluate import evaluate

    run_dir, result = mappo_run
    assert "eval/return_mean" in result.rows[-1]
    policy = rljax.load(run_dir)
    assert set(policy.observation_spec) == {"observation", wrappers.AGENT_ID}
    env = Rendezvous()
    obs, _ = env.reset(jax.random.key(0), env.default_params)
    rows = {"observation": obs["observation"], wrappers.AGENT_ID: jnp.eye(2)}
    actions = policy.act(rows)
    assert actions.shape == (2,) and actions.dtype == jnp.int32
    assert int(policy.act(jax.tree.map(lambda x: x[1], rows))) == int(actions[1])
    episodes = evaluate(policy, 400, seed=1)
    assert np.mean(episodes.returns) > OPTIMUM - 0.15 and not np.any(episodes.truncated)
    assert np.all(episodes.returns == 2 * (1 - episodes.lengths))  # -1 each per step apart, 0 on the meeting step


def test_a_multi_agent_episode_is_drawn_with_the_teams_return(mappo_run):
    """Video of a multi-agent run: the team acts on its rows, the episode ends when every agent is done,
    and its return is the team's (Rendezvous draws itself: a strip of cells)."""
    from rljax.policy.video import episode_frames

    run_dir, _ = mappo_run
    policy = rljax.load(run_dir)
    for seed in range(3):
        episode = episode_frames(policy, jax.random.key(seed))
        assert episode.finished and len(episode.frames) == episode.length
        assert episode.frames[0].shape == (16, 16 * 8, 3) and episode.frames[0].dtype == np.uint8
        assert episode.episode_return == 2 * (1 - episode.length)  # -1 each per step apart, 0 on the meeting step


def test_a_mappo_run_stopped_and_resumed_is_bit_identical(mappo_run, tmp_path):
    """A multi-agent run stopped after its second chunk (with a checkpoint) and resumed ends with the
    bits and the rows of the run that never stopped."""
    from rljax.store.tracking import read_chunks
    from tests.support.runs import assert_same_bits, strip

    run_dir, full = mappo_run
    config = MAPPOConfig(**{**FAST, "total_timesteps": 50_000}, eval_interval=4)
    cut = tmp_path / "cut"
    part = rljax.train(config, env=Rendezvous(), options=rljax.RunOptions(
        quiet=True, run_dir=str(cut), checkpoint_every=1, on_chunk=lambda c, state, row: c == 1))
    assert part.preempted == "on_chunk"
    rest = rljax.train(config, env=Rendezvous(), options=rljax.RunOptions(quiet=True, run_dir=str(cut), resume=True,
                                                                          checkpoint_every=1))
    assert_same_bits(full.state, rest.state)
    assert strip(read_chunks(run_dir)) == strip(read_chunks(cut))


# Slow (two CLI processes and a reference run): by default the in-process stop and resume above stands for it.
@pytest.mark.slow
@pytest.mark.requires_bitexact_backend
@pytest.mark.timeout(600)
def test_mappo_preempted_by_sigterm_resumes_bit_exactly_from_the_command_line(tmp_path):
    import subprocess
    import sys

    from rljax.store.checkpoint import PREEMPTED_EXIT_CODE
    from rljax.store.tracking import read_chunks
    from tests.conftest import cpu_subprocess_env
    from tests.support.runs import final_leaves, sigterm_after_progress, strip

    flags = ["--env", "envs.multiagent:Rendezvous", "--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2",
             "--updates-per-chunk", "2", "--checkpoint-every", "1", "--no-anneal-lr"]
    cmd = [sys.executable, "-m", "rljax.cli.main", "train", "mappo", *flags]
    run = tmp_path / "cut"
    returncode, err = sigterm_after_progress(cmd + ["--total-timesteps", str(10**8), "--run-dir", str(run)],
                                             cpu_subprocess_env(), tmp_path, tmp_path / "cut.stderr")
    assert returncode == PREEMPTED_EXIT_CODE, err[-2000:]
    total = 4 * 16 * 2 * (len(read_chunks(run)) + 2)
    ref = subprocess.run(cmd + ["--total-timesteps", str(total), "--quiet", "--run-dir", str(tmp_path / "ref")],
                         env=cpu_subprocess_env(), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert ref.returncode == 0, ref.stderr[-2000:]
    resumed = subprocess.run([sys.executable, "-m", "rljax.cli.main", "resume", str(run), "--total-timesteps",
                              str(total), "--quiet"], env=cpu_subprocess_env(), cwd=tmp_path, capture_output=True,
                             text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    a, b = final_leaves(tmp_path / "ref"), final_leaves(run)
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))
    assert strip(read_chunks(run)) == strip(read_chunks(tmp_path / "ref"))


# Slow (a JaxMARL env compiled into a training run): by default test_per_agent_answers_each_row_... and
# tests/unit/suites/test_jaxmarl.py's padded speaker and listener stand for it.
@pytest.mark.slow
def test_ippo_with_separate_parameters_trains_agents_of_different_spaces():
    """MPE speaker_listener: the speaker sees 3 numbers and has 3 actions, the listener 11 and 5 (padded
    to one space, the speaker's missing actions masked). One network each; the speaker never picks a
    padded action, and the team improves on random play (-77.9 over 26 steps, 500 episodes)."""
    pytest.importorskip("jaxmarl")
    config = IPPOConfig(env="jaxmarl/MPE_simple_speaker_listener_v4", separate_params=True, agent_id=False,
                        total_timesteps=300_000, num_envs=16, num_steps=128, learning_rate=2.5e-3)
    result = rljax.train(config, options=rljax.RunOptions(quiet=True))
    assert result.final_return > -50.0, result.final_return
    agent = result.agent
    obs = result.state.obs
    actions = np.asarray(agent.act(result.state, obs, jax.random.key(0), deterministic=False))
    speaker = np.argmax(np.asarray(obs[wrappers.AGENT_ID]), -1) == 0
    assert speaker.sum() == 16 and np.all(actions[speaker] < 3)


def test_split_clipping_is_two_optimisers_one_per_network():
    """make_split_clip_optimizer on the joint parameters = make_optimizer run separately on the actor's
    and on the critic's (JaxMARL's MAPPO), over steps whose gradients' scales differ; joint clipping is not."""
    import optax

    from rljax.agents.base import actor_critic_labels, make_optimizer, make_split_clip_optimizer

    obs = {"observation": jnp.ones((4, 8)), GLOBAL_STATE: jnp.ones((4, 16)), wrappers.AGENT_ID: jnp.ones((4, 2))}
    net = ActorCritic(action_dim=3, discrete=True, obs_layout=_layout(obs), actor_keys=("agent_id", "observation"),
                      critic_keys=(GLOBAL_STATE,))
    params = net.init(jax.random.key(0), obs)
    labels = actor_critic_labels(params)
    assert labels["params"]["value"]["kernel"] == labels["params"]["critic_torso"]["hidden_0"]["bias"] == "critic"
    assert labels["params"]["logits"]["kernel"] == labels["params"]["actor_torso"]["hidden_1"]["kernel"] == "actor"
    per_agent = PerAgent(ActorCritic, tuple(dict(action_dim=3, discrete=True, obs_layout=_layout(obs)).items()), 2)
    nested = actor_critic_labels(per_agent.init(jax.random.key(0), obs))
    assert nested["params"]["agent_1"]["value"]["bias"] == "critic" and nested["params"]["agent_0"]["logits"][
        "bias"] == "actor"

    def part(tree, side):
        return jax.tree.map(lambda x, label: x if label == side else jnp.zeros_like(x), tree, labels)

    split, joint = make_split_clip_optimizer(1e-2, 0.5), make_optimizer(1e-2, 0.5)
    alone = make_optimizer(1e-2, 0.5)
    s_split, s_joint = split.init(params), joint.init(params)
    s_actor, s_critic = alone.init(part(params, "actor")), alone.init(part(params, "critic"))
    diverged = False
    for step, (actor_scale, critic_scale) in enumerate([(1.0, 50.0), (0.1, 5.0), (2.0, 400.0)]):
        noise = jax.tree.map(lambda x: jax.random.normal(jax.random.key(step), x.shape), params)
        grads = jax.tree.map(lambda g, label: g * (critic_scale if label == "critic" else actor_scale), noise, labels)
        u_split, s_split = split.update(grads, s_split, params)
        u_joint, s_joint = joint.update(grads, s_joint, params)
        u_actor, s_actor = alone.update(part(grads, "actor"), s_actor, params)
        u_critic, s_critic = alone.update(part(grads, "critic"), s_critic, params)
        two = jax.tree.map(lambda a, c, label: a if label == "actor" else c, u_actor, u_critic, labels)
        for x, y in zip(jax.tree.leaves(u_split), jax.tree.leaves(two)):
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-8)
        pairs = zip(jax.tree.leaves(u_joint), jax.tree.leaves(two))
        diverged |= not all(np.allclose(x, y, rtol=1e-3) for x, y in pairs)
    assert diverged and isinstance(split, optax.GradientTransformation)
    assert MAPPOConfig().clip_per_network and not IPPOConfig().clip_per_network


def test_a_recurrent_mappo_critic_has_its_own_memory_and_the_policy_carries_both(tmp_path):
    """With --memory, MAPPO's critic has a memory core on the global state (JaxMARL's MAPPO critic); the memory
    is the pair (actor's, critic's), a loaded policy carries both, and its exported state names say which is
    which. --no-critic-memory keeps the critic feed-forward and the memory the actor's alone."""
    from rljax.core.networks import RecurrentActorCritic
    from rljax.policy.export import state_names

    tiny = dict(total_timesteps=2 * 8 * 16, num_envs=8, num_steps=16, num_minibatches=2, num_epochs=1,
                hidden_sizes=(16,), memory="gru", memory_size=8, updates_per_chunk=1)
    for critic_memory, names in ((True, ["state_h", "critic_state_h"]), (False, ["state_h"])):
        run_dir = tmp_path / str(critic_memory)
        result = rljax.train(MAPPOConfig(**tiny, critic_memory=critic_memory), env=Rendezvous(),
                             options=rljax.RunOptions(quiet=True, run_dir=str(run_dir)))
        params = result.state.params["params"]
        assert ("critic_core" in params) is critic_memory and "core" in params
        assert len(jax.tree.leaves(result.state.memory)) == len(names)
        policy = rljax.load(run_dir)
        assert state_names(policy) == names
        state = policy.initial_state(2)
        obs, _ = Rendezvous().reset(jax.random.key(0), Rendezvous().default_params)
        actions, state = policy.act({"observation": obs["observation"], wrappers.AGENT_ID: jnp.eye(2)}, state=state)
        assert actions.shape == (2,) and jax.tree.leaves(state)[0].shape == (2, 8)
    # Its export is checked against policy.act on the agents' rows of played games (the check once played the
    # env's own observations, global state and all, and refused every recurrent multi-agent policy).
    from rljax.policy.export import export

    record = export(policy, tmp_path / "export", onnx=False)
    assert record["memory"]["state"] == ["state_h"] and (tmp_path / "export" / "policy.stablehlo").exists()
    with pytest.raises(ValueError, match="critic_memory=True gives a centralised critic"):
        RecurrentActorCritic(action_dim=3, discrete=True, critic_memory=True)
