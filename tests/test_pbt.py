"""Population-based training: the exploit/explore step by hand, validation, and a resumable PBT sweep."""

from __future__ import annotations

import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

from rljax.agents.ppo import PPOConfig
from rljax.pbt import PBTSpec, exploit_explore, parse_pbt, scores_from_rows, validate_pbt
from rljax.sweep import SweepSpec, run_sweep

PPO = PPOConfig(total_timesteps=8 * 16 * 8, updates_per_chunk=2, num_envs=8, num_steps=16, num_epochs=1,
                num_minibatches=2, hidden_sizes=(16,))


class HP(struct.PyTreeNode):
    learning_rate: jax.Array
    gamma: jax.Array


class State(struct.PyTreeNode):
    params: jax.Array
    key: jax.Array
    hparams: HP
    env_params: jax.Array


def test_exploit_explore_by_hand():
    size = 8
    state = State(params=jnp.arange(size, dtype=jnp.float32)[:, None] * jnp.ones((size, 3)),
                  key=jax.random.split(jax.random.key(0), size),
                  hparams=HP(learning_rate=jnp.full((size,), 1e-3), gamma=jnp.linspace(0.9, 0.99, size)),
                  env_params=jnp.arange(size, dtype=jnp.float32) * 10)
    scores = jnp.asarray([5.0, 1.0, 7.0, -np.inf, 3.0, 8.0, 2.0, 6.0])  # worst: 3, 1 ; best: 5, 2
    spec = PBTSpec(interval=1, fields={"learning_rate": (5e-4, 1.1e-3)}, fraction=0.25)
    new, source = jax.jit(functools.partial(exploit_explore, spec=spec))(state, scores, jnp.int32(4))
    source = np.asarray(source)
    assert set(np.flatnonzero(source != np.arange(size))) == {1, 3}
    assert set(source[[1, 3]]) <= {2, 5}
    for i in range(size):
        np.testing.assert_array_equal(np.asarray(new.params[i]), np.asarray(state.params[source[i]]))
        assert float(new.hparams.gamma[i]) == float(state.hparams.gamma[source[i]])  # inherited, not perturbed
    # Own keys and env params are kept; only replaced members' learning rates move, by 0.8 or 1.2, clipped.
    np.testing.assert_array_equal(jax.random.key_data(new.key), jax.random.key_data(state.key))
    np.testing.assert_array_equal(np.asarray(new.env_params), np.asarray(state.env_params))
    lr = np.asarray(new.hparams.learning_rate)
    assert np.all(lr[[0, 2, 4, 5, 6, 7]] == np.float32(1e-3))
    assert set(np.round(lr[[1, 3]], 7)) <= {np.float32(8e-4).round(7), np.float32(1.1e-3).round(7)}
    # The same chunk index gives the same step.
    again, source2 = jax.jit(functools.partial(exploit_explore, spec=spec))(state, scores, jnp.int32(4))
    np.testing.assert_array_equal(np.asarray(source2), source)


def test_scores_and_parsing():
    assert scores_from_rows([{"episode_return_mean": 3.0}, {"episode_return_mean": None}]).tolist() == [3.0, -np.inf]
    assert parse_pbt(["learning_rate=1e-5:1e-2"]) == {"learning_rate": (1e-5, 1e-2)}
    with pytest.raises(ValueError, match="FIELD=LOW:HIGH"):
        parse_pbt(["learning_rate=1e-5"])


@pytest.mark.parametrize("spec, size, match", [
    (PBTSpec(interval=0, fields={"learning_rate": (1e-5, 1e-2)}), 4, "interval"),
    (PBTSpec(interval=1, fields={"num_envs": (1, 8)}), 4, "not a hyperparameter.*learning_rate"),
    (PBTSpec(interval=1, fields={"learning_rate": (1e-2, 1e-5)}), 4, "0 < low < high"),
    (PBTSpec(interval=1, fields={"learning_rate": (1e-5, 1e-2)}, fraction=0.7), 4, "fraction"),
    (PBTSpec(interval=1, fields={"learning_rate": (1e-5, 1e-2)}), 2, "at least one member"),
    (PBTSpec(interval=1, fields={}), 4, "at least one hyperparameter"),
])
def test_bad_pbt_specs_are_rejected(spec, size, match):
    with pytest.raises(ValueError, match=match):
        validate_pbt(spec, PPO, size)


def test_pbt_sweep_logs_lineage_and_resumes_bit_exactly(tmp_path):
    pbt = PBTSpec(interval=1, fields={"learning_rate": (1e-5, 1e-2)})
    spec = SweepSpec(grid={"learning_rate": [1e-4, 3e-4, 1e-3, 3e-3]}, seeds=(0,), pbt=pbt)
    full, members, _ = run_sweep(PPO, spec, run_dir=tmp_path / "full", quiet=True, checkpoint_every=1)
    log = [json.loads(line) for line in (tmp_path / "full" / "pbt.jsonl").read_text().splitlines()]
    assert [r["chunk"] for r in log] == [0, 1, 2]  # after every chunk but the last
    names = {m.name for m in members}
    for r in log:
        assert len(r["copies"]) == 1 and set(r["copies"]) | set(r["copies"].values()) <= names
    final_lr = np.asarray(full.state.hyperparams.learning_rate)
    np.testing.assert_allclose(final_lr, log[-1]["hparams"]["learning_rate"])
    assert sorted(final_lr.tolist()) != sorted(np.float32([1e-4, 3e-4, 1e-3, 3e-3]).tolist())

    part, _, _ = run_sweep(PPO, spec, run_dir=tmp_path / "cut", quiet=True, checkpoint_every=1,
                           on_chunk=lambda c, s, r: c == 1)
    assert part.preempted == "on_chunk"
    rest, _, _ = run_sweep(PPO, spec, run_dir=tmp_path / "cut", quiet=True, resume=True, checkpoint_every=1)
    for a, b in zip(jax.tree.leaves(full.state), jax.tree.leaves(rest.state)):
        a = jax.random.key_data(a) if jnp.issubdtype(a.dtype, jax.dtypes.prng_key) else a
        b = jax.random.key_data(b) if jnp.issubdtype(b.dtype, jax.dtypes.prng_key) else b
        assert np.array_equal(np.asarray(a), np.asarray(b))
    assert (tmp_path / "cut" / "pbt.jsonl").read_text() == (tmp_path / "full" / "pbt.jsonl").read_text()
    assert "pbt.jsonl" in (tmp_path / "full" / "summary.md").read_text()
