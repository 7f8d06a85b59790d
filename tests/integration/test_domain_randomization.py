"""Domain randomisation through a whole run (``--randomize``): each env draws its params per
episode inside the compiled program, the draws are checkpointed with the env states (an interrupted
and resumed run is bit-identical to an uninterrupted one), the config records the ranges, and the
off-policy stack takes them too."""

from __future__ import annotations

import dataclasses
import json

import jax
import numpy as np

import rljax
from rljax.agents import build_agent
from rljax.agents.dqn import DQNConfig
from rljax.core.registry import make
from rljax.core.wrappers import RandomizeParamsState
from rljax.store.tracking import read_chunks
from tests.support.runs import PPO_SMALL, assert_same_bits, strip

RANGE = ("length=0.25:2.0",)


def _episode_params(state):
    """The current episode's params of every env, found anywhere in a train state."""
    found = [x for x in jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, RandomizeParamsState))
             if isinstance(x, RandomizeParamsState)]
    assert len(found) == 1, found
    return found[0].params


def test_a_randomised_run_resumes_bit_identically_and_records_its_ranges(tmp_path):
    config = dataclasses.replace(PPO_SMALL, randomize=RANGE)
    full = rljax.train(config, options=rljax.RunOptions(run_dir=tmp_path / "full", quiet=True, checkpoint_every=2))
    part = rljax.train(config, options=rljax.RunOptions(run_dir=tmp_path / "cut", quiet=True, checkpoint_every=2,
                                                        on_chunk=lambda c, state, row: c == 2))
    assert part.preempted == "on_chunk"
    rest = rljax.train(config, options=rljax.RunOptions(run_dir=tmp_path / "cut", quiet=True, resume=True,
                                                        checkpoint_every=2))
    assert_same_bits(full.state, rest.state)
    assert strip(read_chunks(tmp_path / "full")) == strip(read_chunks(tmp_path / "cut"))
    assert json.loads((tmp_path / "full" / "config.json").read_text())["randomize"] == list(RANGE)
    params = _episode_params(full.state)
    lengths = np.asarray(params.length)
    assert lengths.shape == (config.num_envs,) and len(np.unique(lengths)) == config.num_envs
    assert np.all((lengths >= 0.25) & (lengths < 2.0))
    assert np.all(np.asarray(params.masspole) == 0.1)  # fields without a range keep the env's values


def test_the_off_policy_stack_draws_params_too():
    config = DQNConfig(num_envs=4, randomize=RANGE, hidden_sizes=(16,), buffer_size=64, batch_size=8,
                       learning_starts=8)
    env, params = make(config.env)
    agent = build_agent(config, env, params, None)
    state = jax.eval_shape(lambda k: agent.init(k, 0, 10, config.hyperparams(), params), jax.random.key(0))
    assert _episode_params(state).length.shape == (4,)
    after, _ = jax.eval_shape(agent.update, state)
    assert _episode_params(after).length.shape == (4,)
