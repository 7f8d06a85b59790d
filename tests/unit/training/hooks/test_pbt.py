"""Population-based training: the exploit/explore step by hand, validation, and a resumable PBT sweep."""

from __future__ import annotations

import dataclasses
import functools
import json
import types

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import struct

from rljax.agents.ppo import PPOConfig
from rljax.training.hooks.pbt import PBT, PBTSpec, check_eval_interval, exploit_explore, parse_pbt, return_auc, scores_from_rows, \
    validate_pbt
from rljax.training.sweep import SweepSpec, run_sweep
from rljax.store.tracking import read_chunks

# tests/unit/training/test_sweep.py's PPO over 4 chunks: with 8 members, as there, the PBT sweep below runs the
# chunk and evaluation programs of that module's sweeps (served by the persistent compile cache in a suite run).
PPO = PPOConfig(total_timesteps=8 * 16 * 8, updates_per_chunk=2, num_envs=8, num_steps=16, num_epochs=2,
                num_minibatches=2, hidden_sizes=(16,))


class HP(struct.PyTreeNode):
    learning_rate: jax.Array
    gamma: jax.Array


class State(struct.PyTreeNode):
    params: jax.Array
    key: jax.Array
    hyperparams: HP
    env_params: jax.Array


def test_exploit_explore_by_hand():
    size = 8
    state = State(params=jnp.arange(size, dtype=jnp.float32)[:, None] * jnp.ones((size, 3)),
                  key=jax.random.split(jax.random.key(0), size),
                  hyperparams=HP(learning_rate=jnp.full((size,), 1e-3), gamma=jnp.linspace(0.9, 0.99, size)),
                  env_params=jnp.arange(size, dtype=jnp.float32) * 10)
    scores = jnp.asarray([5.0, 1.0, 7.0, -np.inf, 3.0, 8.0, 2.0, 6.0])  # worst: 3, 1 ; best: 5, 2
    spec = PBTSpec(interval=1, fields={"learning_rate": (5e-4, 1.1e-3)}, fraction=0.25)
    new, source = jax.jit(functools.partial(exploit_explore, spec=spec))(state, scores, jnp.int32(4))
    source = np.asarray(source)
    assert set(np.flatnonzero(source != np.arange(size))) == {1, 3}
    assert set(source[[1, 3]]) <= {2, 5}
    for i in range(size):
        np.testing.assert_array_equal(np.asarray(new.params[i]), np.asarray(state.params[source[i]]))
        assert float(new.hyperparams.gamma[i]) == float(state.hyperparams.gamma[source[i]])  # inherited, not perturbed
    # Own keys and env params are kept; only replaced members' learning rates move, by 0.8 or 1.2, clipped.
    np.testing.assert_array_equal(jax.random.key_data(new.key), jax.random.key_data(state.key))
    np.testing.assert_array_equal(np.asarray(new.env_params), np.asarray(state.env_params))
    lr = np.asarray(new.hyperparams.learning_rate)
    assert np.all(lr[[0, 2, 4, 5, 6, 7]] == np.float32(1e-3))
    assert set(np.round(lr[[1, 3]], 7)) <= {np.float32(8e-4).round(7), np.float32(1.1e-3).round(7)}
    # The same chunk index gives the same step.
    again, source2 = jax.jit(functools.partial(exploit_explore, spec=spec))(state, scores, jnp.int32(4))
    np.testing.assert_array_equal(np.asarray(source2), source)


class TrainState(struct.PyTreeNode):
    """A train state with everything exploit copies: params, a real Adam state, a buffer, a counter."""
    params: dict
    opt_state: optax.OptState
    buffer: jax.Array
    updates: jax.Array
    key: jax.Array
    hyperparams: HP
    env_params: jax.Array


def _train_state(size):
    """Every member's leaves differ from every other's: each member's Adam state has taken a step on
    gradients of its own, and member i's step count is i + 1."""
    optimizer = optax.adam(1e-3)
    params = {"w": np.arange(size * 6, dtype=np.float32).reshape(size, 3, 2),
              "b": np.arange(size * 2, dtype=np.float32).reshape(size, 2) * -1.5}
    grads = jax.tree.map(lambda x: np.sin(x) + 0.5, params)
    step = jax.jit(jax.vmap(lambda g, p: optimizer.update(g, optimizer.init(p), p)[1]))
    adam, *rest = step(grads, params)
    opt_state = (adam._replace(count=np.arange(1, size + 1, dtype=np.int32)), *rest)
    return TrainState(params=params, opt_state=opt_state, buffer=np.arange(size * 5, dtype=np.float32).reshape(size, 5),
                      updates=np.arange(size, dtype=np.int32) * 7, key=jax.random.split(jax.random.key(0), size),
                      hyperparams=HP(learning_rate=np.linspace(6e-4, 1e-3, size, dtype=np.float32),
                                     gamma=np.linspace(0.9, 0.99, size, dtype=np.float32)),
                      env_params=np.arange(size, dtype=np.float32) * 10)


def test_exploit_copies_every_leaf_of_the_donor_but_the_key_env_params_and_explored_hyperparams():
    """The documented exploit: a replaced member becomes a copy of its donor's whole train state
    (params, optimiser state, buffer, counters, hyperparameters) except its own PRNG key and env
    params, and the explored hyperparameters, which are the donor's times 0.8 or 1.2, clipped. A
    member that is not replaced keeps every leaf."""
    size = 8
    state = _train_state(size)
    assert isinstance(state.opt_state[0], optax.ScaleByAdamState)
    scores = jnp.asarray([5.0, 1.0, 7.0, -np.inf, 3.0, 8.0, 2.0, 6.0])  # worst: 3, 1 ; best: 5, 2
    spec = PBTSpec(interval=1, fields={"learning_rate": (5e-4, 1.1e-3)}, fraction=0.25)
    new, source = jax.jit(functools.partial(exploit_explore, spec=spec))(state, scores, jnp.int32(4))
    replaced, source = _replaced(source)
    assert replaced == {1, 3} and set(source[[1, 3]]) <= {2, 5}
    own = {".key", ".env_params"}
    explored = {".hyperparams.learning_rate"}
    before, after = _leaves_by_path(state), _leaves_by_path(new)
    assert {".opt_state[0].mu['w']", ".opt_state[0].nu['b']", ".opt_state[0].count", ".params['w']"} <= set(after)
    for path, old in before.items():
        got = after[path]
        for i in range(size):
            donor = source[i]
            if i in replaced:  # a copy must be visible: the member's own value differs from its donor's
                assert not np.array_equal(old[i], old[donor]), path
            if path in own:
                np.testing.assert_array_equal(got[i], old[i], err_msg=f"member {i} {path}")
            elif path in explored and i in replaced:
                assert np.float32(got[i]) in {np.float32(np.clip(old[donor] * f, 5e-4, 1.1e-3)) for f in (0.8, 1.2)}
            else:
                np.testing.assert_array_equal(got[i], old[donor], err_msg=f"member {i} {path} (donor {donor})")


def _leaves_by_path(tree):
    """``{jax.tree_util.keystr(path): leaf as numpy}`` (typed PRNG keys as their key data)."""
    def host(x):
        return np.asarray(jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else x)
    return {jax.tree_util.keystr(path): host(x) for path, x in jax.tree_util.tree_flatten_with_path(tree)[0]}


def _state(size):
    return State(params=jnp.arange(size, dtype=jnp.float32)[:, None] * jnp.ones((size, 3)),
                 key=jax.random.split(jax.random.key(0), size),
                 hyperparams=HP(learning_rate=jnp.full((size,), 1e-3), gamma=jnp.linspace(0.9, 0.99, size)),
                 env_params=jnp.arange(size, dtype=jnp.float32) * 10)


def _replaced(source):
    source = np.asarray(source)
    return set(np.flatnonzero(source != np.arange(len(source))).tolist()), source


def test_ties_are_ranked_by_the_tiebreak_then_at_random_never_by_member_order():
    spec = PBTSpec(interval=1, fields={"learning_rate": (5e-4, 1.1e-3)}, fraction=0.25)
    step = jax.jit(functools.partial(exploit_explore, spec=spec))
    # Every member at 500 (CartPole's maximum): the AUC decides, and the first members, which
    # learned fastest, are kept. A stable sort by score alone would replace members 0 and 1.
    scores = jnp.full((8,), 500.0)
    auc = jnp.asarray([450.0, 440.0, 430.0, 420.0, 410.0, 400.0, 390.0, 380.0])
    replaced, source = _replaced(step(_state(8), scores, jnp.int32(3), tiebreak=auc)[1])
    assert replaced == {6, 7} and set(source[[6, 7]]) <= {0, 1}
    # The score comes first: member 4 is the worst, then the slowest of the members at 500.
    replaced, _ = _replaced(step(_state(8), scores.at[4].set(10.0), jnp.int32(3), tiebreak=auc)[1])
    assert replaced == {4, 7}
    # Equal in both: a random permutation from the step's key decides (reproducible per chunk).
    picks = [frozenset(_replaced(step(_state(8), scores, jnp.int32(c), tiebreak=jnp.zeros(8))[1])[0])
             for c in range(12)]
    assert len(set(picks)) > 3 and picks[5] == frozenset(_replaced(step(_state(8), scores, jnp.int32(5))[1])[0])


def test_return_auc():
    rows = [{"env_steps": 100, "episode_return_mean": 10.0}, {"env_steps": 200, "episode_return_mean": None},
            {"env_steps": 300, "episode_return_mean": 30.0}, {"env_steps": 400, "episode_return_mean": float("nan")}]
    assert return_auc(rows) == 20.0 and return_auc(rows[:1]) == 10.0 and np.isnan(return_auc(rows[1:2]))


def test_scores_and_parsing():
    assert scores_from_rows([{"episode_return_mean": 3.0}, {"episode_return_mean": None}]).tolist() == [3.0, -np.inf]
    assert scores_from_rows([{"eval/return_mean": 5.0}, {}, {"eval/return_mean": float("nan")}],
                            "eval/return_mean").tolist() == [5.0, -np.inf, -np.inf]
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


def test_pbt_interval_must_be_a_multiple_of_eval_interval():
    spec = PBTSpec(interval=3, fields={"learning_rate": (1e-5, 1e-2)})
    with pytest.raises(ValueError, match=r"PBT interval \(3 chunks\) must be a multiple of eval_interval \(2\).*"
                                         r"--pbt-interval 2 or 4"):
        check_eval_interval(spec, types.SimpleNamespace(eval_interval=2))
    with pytest.raises(ValueError, match=r"--pbt-interval 5,"):
        check_eval_interval(dataclasses.replace(spec, interval=1), types.SimpleNamespace(eval_interval=5))
    check_eval_interval(dataclasses.replace(spec, interval=4), types.SimpleNamespace(eval_interval=2))
    check_eval_interval(spec, types.SimpleNamespace(eval_interval=0))  # no evaluation: any interval
    check_eval_interval(spec, PPO)
    with pytest.raises(ValueError, match="multiple of eval_interval"):
        validate_pbt(spec, dataclasses.replace(PPO, eval_interval=2), 4)
    validate_pbt(spec, dataclasses.replace(PPO, eval_interval=3), 4)


def _hook(tmp_path, eval_interval, resume=False, start_chunk=0, size=4):
    program = types.SimpleNamespace(names=[f"m{i}" for i in range(size)], place=lambda s: s,
                                    config=types.SimpleNamespace(eval_interval=eval_interval))
    spec = PBTSpec(interval=2, fields={"learning_rate": (5e-4, 1.1e-3)}, fraction=0.25)
    return PBT(spec, program, tmp_path, resume, start_chunk)


def _chunk_rows(chunk, returns, evals=None):
    return [{"env_steps": 100 * (chunk + 1), "episode_return_mean": r,
             **({} if evals is None else {"eval/return_mean": e, "eval/episodes": 8})} for r, e in
            zip(returns, evals if evals is not None else returns)]


def test_pbt_hook_ranks_by_evaluation_and_breaks_ties_by_auc(tmp_path):
    hook = _hook(tmp_path, eval_interval=2)
    run = types.SimpleNamespace(state=_state(4))
    # By training return member 3 is near the top; its evaluation (20) is the worst, so it is
    # replaced. Members 0-2 all evaluate at 500: the donor is member 1, which has the highest
    # AUC of the three (ranking the tie by member order would make it member 2).
    history = [([10, 50, 5, 300], None), ([400, 500, 30, 480], [500, 500, 500, 20])]
    for c, (returns, evals) in enumerate(history):
        rows = _chunk_rows(c, returns, evals)
        hook.record(run, c, rows)
        hook.boundary(run, c, rows, last=False)
    record = json.loads((tmp_path / "pbt.jsonl").read_text())
    assert record["chunk"] == 1 and record["score"] == "eval/return_mean" and record["tiebreak"] == "auc"
    assert record["scores"] == [500, 500, 500, 20] and record["auc"] == [205, 275, 17.5, 390]
    assert record["copies"] == {"m3": "m1"}
    assert hook.curves[3] == hook.curves[1] and hook.curves[3] is not hook.curves[1]  # the copy's lineage
    # Without evaluation the training return ranks them: member 2 (30) copies member 1 (500).
    (tmp_path / "train").mkdir()
    hook = _hook(tmp_path / "train", eval_interval=0)
    for c, (returns, _) in enumerate(history):
        rows = _chunk_rows(c, returns)
        hook.record(run, c, rows)
        hook.boundary(run, c, rows, last=False)
    record = json.loads((tmp_path / "train" / "pbt.jsonl").read_text())
    assert record["score"] == "episode_return_mean" and record["copies"] == {"m2": "m1"}


def test_pbt_hook_refuses_a_step_without_a_fresh_evaluation(tmp_path):
    with pytest.raises(ValueError, match="multiple of eval_interval"):
        _hook(tmp_path, eval_interval=3)
    hook = _hook(tmp_path, eval_interval=2)
    rows = _chunk_rows(1, [1.0, 2.0, 3.0, 4.0])  # no eval columns
    with pytest.raises(RuntimeError, match="was not evaluated"):
        hook.boundary(types.SimpleNamespace(state=_state(4)), 1, rows, last=False)


def test_pbt_hook_rebuilds_the_lineage_curves_on_resume(tmp_path):
    # The AUC tie-break of a resumed sweep covers the chunks before the resume (the members'
    # metrics.jsonl), with the copies logged in pbt.jsonl applied, so it ranks exactly as the
    # uninterrupted run would. Member 0 copied member 3 after chunk 0; the step after chunk 2 was
    # not committed (the run resumes from chunk 2) and is dropped.
    for i in range(4):
        (tmp_path / "members" / f"m{i}").mkdir(parents=True)
        (tmp_path / "members" / f"m{i}" / "metrics.jsonl").write_text("".join(
            json.dumps(r) + "\n" for r in [_chunk_rows(0, [10.0 * i] * 4)[0], _chunk_rows(1, [None] * 4)[0]]))
    (tmp_path / "pbt.jsonl").write_text(json.dumps({"chunk": 0, "env_steps": 100, "copies": {"m0": "m3"}}) + "\n"
                                        + json.dumps({"chunk": 2, "env_steps": 300, "copies": {"m1": "m2"}}) + "\n")
    hook = _hook(tmp_path, eval_interval=0, resume=True, start_chunk=2)
    assert [json.loads(line)["chunk"] for line in (tmp_path / "pbt.jsonl").read_text().splitlines()] == [0]
    hook.record(None, 2, _chunk_rows(2, [50.0] * 4))
    _, auc = hook.scores(2, _chunk_rows(2, [50.0] * 4))
    np.testing.assert_allclose(auc, [40.0, 30.0, 35.0, 40.0])  # member 0's curve starts with member 3's 30
    hook.record(None, 2, _chunk_rows(1, [70.0] * 4))  # a chunk run again replaces the ones after it
    assert [p["env_steps"] for p in hook.curves[0]] == [100, 200]


# Ranking by the training return with --slow only (by default the ranking tests above and the README's PBT command).
@pytest.mark.parametrize("eval_interval", [pytest.param(0, marks=pytest.mark.slow), 1], ids=["training-score", "eval-score"])
def test_pbt_sweep_logs_lineage_and_resumes_bit_exactly(tmp_path, eval_interval):
    config = dataclasses.replace(PPO, eval_interval=eval_interval, eval_episodes=4)
    pbt = PBTSpec(interval=1, fields={"learning_rate": (1e-5, 1e-2)})
    spec = SweepSpec(grid={"learning_rate": [1e-4, 3e-4, 1e-3, 3e-3]}, seeds=(0, 1), pbt=pbt)
    full, members, _ = run_sweep(config, spec, run_dir=tmp_path / "full", quiet=True, checkpoint_every=1, plots=False)
    log = [json.loads(line) for line in (tmp_path / "full" / "pbt.jsonl").read_text().splitlines()]
    assert [r["chunk"] for r in log] == [0, 1, 2]  # after every chunk but the last
    # Each step ranked by the score of its chunk's rows (the evaluation when there is one), ties by
    # the AUC so far of each member's lineage (a copy takes its donor's curve).
    key = "eval/return_mean" if eval_interval else "episode_return_mean"
    history = [read_chunks(tmp_path / "full" / "members" / m.name) for m in members]
    order = [m.name for m in members]
    curves = [[] for _ in members]
    for r in log:
        for curve, rows in zip(curves, history):
            curve.append(rows[r["chunk"]])
        assert r["score"] == key and r["tiebreak"] == "auc"
        np.testing.assert_allclose(r["scores"], [rows[r["chunk"]][key] for rows in history], rtol=1e-6)
        np.testing.assert_allclose(r["auc"], [return_auc(c) for c in curves], rtol=1e-6)
        curves = [list(curves[order.index(r["copies"].get(n, n))]) for n in order]
    assert f"ranked by `{key}`" in (tmp_path / "full" / "summary.md").read_text()
    names = {m.name for m in members}
    for r in log:  # a quarter of the 8 members replaced at each step
        assert len(r["copies"]) == 2 and set(r["copies"]) | set(r["copies"].values()) <= names
    final_lr = np.asarray(full.state.hyperparams.learning_rate)
    np.testing.assert_allclose(final_lr, log[-1]["hyperparams"]["learning_rate"])
    assert sorted(final_lr.tolist()) != sorted(np.float32([1e-4, 3e-4, 1e-3, 3e-3] * 2).tolist())
    # a loaded member's config (so its export's policy.json) holds its learning rate after PBT, not the initial one
    import rljax

    loaded = [rljax.load(tmp_path / "full", member=i).config.learning_rate for i in range(len(members))]
    np.testing.assert_allclose(loaded, final_lr, rtol=1e-6)

    part, _, _ = run_sweep(config, spec, run_dir=tmp_path / "cut", quiet=True, checkpoint_every=1, plots=False,
                           on_chunk=lambda c, s, r: c == 1)
    assert part.preempted == "on_chunk"
    rest, _, _ = run_sweep(config, spec, run_dir=tmp_path / "cut", quiet=True, resume=True, checkpoint_every=1,
                           plots=False)
    for a, b in zip(jax.tree.leaves(full.state), jax.tree.leaves(rest.state)):
        a = jax.random.key_data(a) if jnp.issubdtype(a.dtype, jax.dtypes.prng_key) else a
        b = jax.random.key_data(b) if jnp.issubdtype(b.dtype, jax.dtypes.prng_key) else b
        assert np.array_equal(np.asarray(a), np.asarray(b))
    assert (tmp_path / "cut" / "pbt.jsonl").read_text() == (tmp_path / "full" / "pbt.jsonl").read_text()
    assert "pbt.jsonl" in (tmp_path / "full" / "summary.md").read_text()


def test_pbt_cli_refuses_an_interval_between_evaluations():
    import os
    import pathlib
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parents[4]
    out = subprocess.run([sys.executable, "-m", "experiments.ppo_cartpole", "sweep", "--seeds", "2",
                          "--grid", "learning_rate=1e-4,1e-3", "--eval-interval", "2", "--pbt-interval", "3", "--pbt",
                          "learning_rate=1e-5:1e-2", "--run-dir", "none", "--no-compile-cache", "--quiet"],
                         env={**os.environ, "PYTHONPATH": str(root)}, cwd=root, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "PBT interval (3 chunks) must be a multiple of eval_interval (2)" in out.stderr
    assert "--pbt-interval 2 or 4" in out.stderr
