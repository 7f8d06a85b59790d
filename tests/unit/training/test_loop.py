"""What the loop reports for a chunk, and what it takes: its options, validated, and nothing else.

A chunk of K updates hands the host one row: each metric's mean over the K updates (the desync
checksum spread: its max, so one bad update is never averaged away), and the episodes that finished
in any of the K updates, summed. Checked on a fake update with known per-update outputs, through the
same compiled, packed path ``train()`` uses (``make_chunk``, ``pack_output``, ``chunk_row``).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rljax
from rljax.agents.base import UpdateOutput
from rljax.agents.ppo import PPOConfig
from rljax.training.program import Plan, make_chunk, pack_output
from rljax.training.loop import chunk_row
from rljax.training.options import SAVED_FIELDS, RunOptions
from rljax.core.rollout import EpisodeSummary

K = 4


def _fake_update(s: jax.Array) -> tuple[jax.Array, UpdateOutput]:
    """Update ``s`` (0, 1, 2, ...): loss ``s``, a desync only at update 1, one episode finished at
    odd updates with return ``10 s`` and length ``s + 1``."""
    f = s.astype(jnp.float32)
    finished = (s % 2).astype(jnp.float32)
    metrics = {"a_loss": f, "param_desync": jnp.where(s == 1, 2.0, 0.0).astype(jnp.float32)}
    episodes = EpisodeSummary(count=finished, return_sum=10.0 * f * finished, length_sum=(f + 1.0) * finished,
                              components={"bonus": finished})
    return s + 1, UpdateOutput(metrics, episodes)


def test_chunk_rows_average_updates_and_sum_episodes():
    packed, unpack = pack_output(make_chunk(_fake_update, K, None))
    compiled = jax.jit(packed).lower(jnp.int32(0)).compile()
    state, vec = compiled(jnp.int32(0))
    assert int(state) == K
    out = unpack(jax.device_get(vec))
    plan = Plan(num_updates=2 * K, updates_per_chunk=K, num_chunks=2, env_steps_per_update=3)
    row = chunk_row(plan, 0, out, wall=1.0, chunk_s=1.0)

    s = np.arange(K)
    odd = s % 2 == 1
    assert row["a_loss"] == np.mean(s)                           # mean over the chunk's updates
    assert row["param_desync"] == 2.0                            # max: update 1's desync survives
    assert row["episodes"] == odd.sum()                          # episodes of every update, summed
    assert row["episode_return_mean"] == np.sum(10.0 * s[odd]) / odd.sum()
    assert row["episode_length_mean"] == np.sum(s[odd] + 1.0) / odd.sum()
    assert row["reward_components/bonus"] == 1.0
    assert (row["updates"], row["env_steps"]) == (K, 3 * K)

    # The second chunk continues from the state: updates K .. 2K-1.
    _, vec = compiled(state)
    row = chunk_row(plan, 1, unpack(jax.device_get(vec)), wall=2.0, chunk_s=1.0)
    s2 = np.arange(K, 2 * K)
    assert row["a_loss"] == np.mean(s2) and row["param_desync"] == 0.0
    assert row["episode_return_mean"] == np.sum(10.0 * s2[s2 % 2 == 1]) / np.sum(s2 % 2 == 1)
    assert (row["updates"], row["env_steps"]) == (2 * K, 6 * K)


# ------------------------------------------------------------------------------ the run's options

def test_run_options_name_the_bad_value_and_what_is_valid():
    cases = [(dict(checkpoint_every=-1), ValueError, r"checkpoint_every must be an integer >= 0 .* got -1"),
             (dict(checkpoint_interval_s=float("inf")), ValueError, r"checkpoint_interval_s must be a finite .* got inf"),
             (dict(keep_checkpoints=0), ValueError, r"keep_checkpoints must be an integer >= 1, got 0"),
             (dict(stall_min_s=0), ValueError, r"stall_min_s must be a finite number > 0, got 0"),
             (dict(deterministic="yes"), ValueError, r"deterministic='yes' is not one of"),
             (dict(resume=True), ValueError, r"resume=True\) needs the run_dir"),
             (dict(quiet="yes"), TypeError, r"RunOptions.quiet must be True or False, got 'yes'"),
             (dict(run_dir=3), TypeError, r"RunOptions.run_dir must be a path .* got 3"),
             (dict(on_chunk=3), TypeError, r"RunOptions.on_chunk must be callable .* got 3"),
             (dict(population=[1, 2]), TypeError, r"RunOptions.population must be .* got list")]
    for kwargs, error, message in cases:
        with pytest.raises(error, match=message):
            RunOptions(**kwargs)


def test_run_options_are_frozen_keyword_only_and_save_only_what_a_resume_keeps():
    options = RunOptions(run_dir="runs/a", checkpoint_interval_s=5, stall_factor=0, quiet=True)
    assert options.checkpoint_interval_s == 5.0 and isinstance(options.checkpoint_interval_s, float)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.quiet = False  # type: ignore[misc]
    with pytest.raises(TypeError):
        RunOptions("runs/a")  # type: ignore[misc]
    assert options.saved() == {"checkpoint_every": 0, "checkpoint_interval_s": 5.0, "keep_checkpoints": 3,
                               "checkpoints": True, "tensorboard": True, "stall_factor": 0.0,
                               "stall_first_chunk_s": 600.0, "stall_min_s": 60.0, "deterministic": "auto"}
    assert tuple(options.saved()) == SAVED_FIELDS
    assert options.replace(quiet=False).quiet is False
    with pytest.raises(ValueError, match="keep_checkpoints"):
        options.replace(keep_checkpoints=-2)


def test_old_keyword_calls_are_a_type_error_naming_run_options():
    """The run options as keywords of ``train`` (its signature before RunOptions) are refused
    before anything is built, with the call to write instead."""
    config = PPOConfig()
    with pytest.raises(TypeError, match=r"no longer takes quiet, checkpoints .* RunOptions fields.*"
                                        r"options=RunOptions\(quiet=True, checkpoints=False\)"):
        rljax.train(config, quiet=True, checkpoints=False)  # runoptions-codemod: skip
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) 'bogus'"):
        rljax.train(config, bogus=1)  # runoptions-codemod: skip
    with pytest.raises(TypeError, match=r"must be a rljax.RunOptions, got dict"):
        rljax.train(config, options={"quiet": True})
    with pytest.raises(TypeError):
        rljax.train(config, None, None, RunOptions())  # options is keyword-only
    assert rljax.RunOptions is RunOptions
