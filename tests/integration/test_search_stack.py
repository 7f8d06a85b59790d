"""AlphaZero and MuZero on two-player games through the whole stack: a run stopped and resumed is bit-identical
(the search's keys are the train state's), the command line trains and evaluates it by matches (reports with
``as_first`` and ``as_second``, opponents by name, with and without the search), ``rljax.load`` acts with the
legal-action mask, the networks export and docs/search.md's plain-JAX search over MuZero's runs as the run's
own; with --slow, a pgx game trains, a sweep member equals its single run. The experiments' targets
(tic-tac-toe never loses to perfect play; connect four against random and minimax; MuZero's CartPole and Catch)
are learning runs of minutes: ``python -m benchmarks.alphazero_targets``, ``python -m benchmarks.muzero_targets``
(benchmarks/results.md)."""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
import rljax
from rljax.cli.main import main
from rljax.env import LEGAL_ACTION_MASK
from rljax.store.tracking import read_chunks
from tests.conftest import _tiny_runs
from tests.support.runs import assert_same_bits, leaves, strip

TINY = _tiny_runs()["alphazero"]  # the shared tiny run's config (tests/conftest.py): its program compiles once


# AlphaZero's with --slow: by default MuZero's (the same skeleton, the search's keys drawn from the state's) and the
# bit_identity cases stand for it; the AlphaZero tiny run still trains for the matches below.
@pytest.mark.parametrize("name", [pytest.param("alphazero", marks=pytest.mark.slow), "muzero"])
def test_a_run_stopped_and_resumed_is_bit_identical(tmp_path, tiny_run, name):
    config = _tiny_runs()[name]
    full_dir, full = tiny_run(name)
    part = rljax.train(config, options=rljax.RunOptions(run_dir=tmp_path / "cut", quiet=True,
                                                        on_chunk=lambda c, state, row: c == 0))
    assert part.preempted == "on_chunk" and len(part.rows) == 1 < len(full.rows)
    rest = rljax.train(config, options=rljax.RunOptions(run_dir=tmp_path / "cut", quiet=True, resume=True))
    assert_same_bits(full.state, rest.state)
    assert strip(read_chunks(tmp_path / "cut")) == strip(read_chunks(full_dir))
    assert all(np.isfinite(r["policy_loss"]) for r in full.rows)
    common = {"policy_loss", "value_loss", "entropy", "explained_variance", "grad_norm"}
    assert common | ({"search_kl"} if name == "alphazero" else {"reward_loss"}) <= set(full.rows[0])
    assert name == "muzero" or all(r["search_kl"] >= 0 for r in full.rows)


def test_the_command_line_evaluates_a_game_by_matches(tmp_path, tiny_run, capsys):
    run_dir, result = tiny_run("alphazero")
    # Its evaluation during training (eval_interval 2): games against the random player, scored +1 / 0 / -1.
    last = result.rows[-1]
    assert last["eval/episodes"] == 8 and -1.0 <= last["eval/return_mean"] <= 1.0
    assert 5.0 <= last["eval/length_mean"] <= 9.0 and last["eval/return_max"] <= 1.0
    assert main(["eval", str(run_dir), "--games", "8"]) == 0  # a game's default: the network against random
    line = capsys.readouterr().out
    assert "vs random: as first" in line
    report = json.loads(next((run_dir / "eval").glob("*/report.json")).read_text())
    assert report["opponent"] == "random" and report["player"] == "network, greedy"
    for side in ("as_first", "as_second"):
        assert set(report[side]) == {"wins", "draws", "losses", "unfinished", "games"} and report[side]["games"] == 8
    assert report["checkpoint_step"] == TINY.total_timesteps

    assert main(["eval", str(run_dir), "--games", "4", "--search", "--simulations", "8",
                 "--opponent", "envs.board_games:tictactoe_perfect"]) == 0
    out = capsys.readouterr().out
    assert "(search) vs envs.board_games:tictactoe_perfect" in out
    folder = [p.name for p in (run_dir / "eval").iterdir()]
    assert any(name.endswith("-vs-envs.board_games_tictactoe_perfect-search-8") for name in folder)
    perfect = json.loads(next((run_dir / "eval").glob("*-search-8/report.json")).read_text())
    assert perfect["as_first"]["wins"] == perfect["as_second"]["wins"] == 0 and perfect["simulations"] == 8

    # The league: every kept checkpoint and a random player, Elo with random at 0.
    from rljax.store.rundir import checkpoint_steps

    assert main(["eval", str(run_dir), "--league", "--games", "2"]) == 0
    assert "league TicTacToe-v0 alphazero (network, greedy): Elo by checkpoint step (random = 0)" in \
        capsys.readouterr().out
    league = json.loads((run_dir / "eval" / "league" / "report.json").read_text())
    assert set(league["elo"]) == {"random", *map(str, checkpoint_steps(run_dir))} and league["elo"]["random"] == 0.0
    assert len(league["pairs"]) == len(league["elo"]) * (len(league["elo"]) - 1) // 2

    # Another run as the opponent (the same run plays itself); bad input is a usage error that writes nothing.
    assert main(["eval", str(run_dir), "--games", "2", "--opponent", str(run_dir)]) == 0
    before = sorted(p.name for p in (run_dir / "eval").iterdir())
    for argv, message in [(["--opponent", "nobody"], "give 'random', a run directory"),
                          (["--opponent", "envs.board_games:nope"], "has no attribute 'nope'"),
                          (["--simulations", "8"], "--simulations 8: give a positive number of simulations, with "
                                                   "--search"),
                          (["--games", "0"], "--games must be in [1, "),
                          (["--league", "--opponent", "random"], "--league plays every kept checkpoint"),
                          (["--video", str(tmp_path / "a.gif")], "cannot be drawn")]:
        capsys.readouterr()
        assert main(["eval", str(run_dir), *argv]) == 2, argv
        assert message in capsys.readouterr().err
    assert sorted(p.name for p in (run_dir / "eval").iterdir()) == before


def test_search_flags_on_a_run_without_search_or_a_game_are_refused(tiny_run, capsys):
    run_dir, _ = tiny_run("ppo-cartpole")
    assert main(["eval", str(run_dir), "--search"]) == 2
    assert "--search applies to matches in two-player games; CartPole-v1 is not one" in capsys.readouterr().err
    assert main(["eval", str(run_dir), "--opponent", "random"]) == 2
    assert "CartPole-v1 is not a two-player game" in capsys.readouterr().err


def test_muzero_plays_matches_with_its_learned_model(tiny_run, capsys):
    run_dir, _ = tiny_run("muzero")
    assert main(["eval", str(run_dir), "--games", "4", "--search", "--simulations", "8"]) == 0
    assert "muzero step 128 (search) vs random: as first" in capsys.readouterr().out
    report = json.loads(next((run_dir / "eval").glob("*-search-8/report.json")).read_text())
    assert report["simulations"] == 8 and report["as_first"]["games"] == report["as_second"]["games"] == 4



@pytest.mark.parametrize("name", ["alphazero", "muzero"])
def test_load_acts_with_the_mask_and_the_network_exports(tmp_path, tiny_run, name):
    from rljax.policy.export import export

    run_dir, _ = tiny_run(name)
    policy = rljax.load(run_dir)
    env, params = envs.make("TicTacToe-v0")
    obs, _ = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(jax.random.key(0), 16), params)
    legal = jax.random.bernoulli(jax.random.key(1), 0.4, (16, 9)).at[:, 4].set(True)
    action = np.asarray(policy.act(obs, legal_action_mask=legal))
    assert np.all(np.take_along_axis(np.asarray(legal), action[:, None], 1))
    meta = export(policy, tmp_path / "out", onnx=False)
    names = [i["name"] for i in meta["signature"]["inputs"]]
    artefact = jax.export.deserialize((tmp_path / "out" / "policy.stablehlo").read_bytes())
    masked = {**obs, LEGAL_ACTION_MASK: legal}
    got = artefact.call(*[np.asarray(x) for x in jax.tree.leaves(masked)])
    np.testing.assert_array_equal(np.asarray(got), action)
    assert names == ["obs_current_player", "obs_legal_action_mask", "obs_observation"]

    # The search's networks: the files policy.json lists, each checked against the run's network when written.
    search = meta["search"]
    files = {"alphazero": {"prediction.stablehlo"},
             "muzero": {"representation.stablehlo", "prediction.stablehlo", "dynamics.stablehlo"}}[name]
    assert set(search["functions"]) == files and files <= set(meta["files"])
    assert search["root_mask"] == LEGAL_ACTION_MASK
    assert all(f["max_abs_diff"] <= 1e-5 for f in search["functions"].values())
    assert search["num_simulations"] == policy.config.num_simulations
    assert search["discount"] == (-1.0 if name == "muzero" else 1.0) * policy.config.gamma
    if name == "alphazero":
        logits, value = jax.export.deserialize((tmp_path / "out" / "prediction.stablehlo").read_bytes()).call(
            *[np.asarray(x) for x in jax.tree.leaves(masked)])
        from rljax.agents.onpolicy import actor_critic_network

        dist, want = actor_critic_network(policy.config, env, params, "AlphaZero").apply(policy.params.params, masked)
        np.testing.assert_allclose(np.asarray(logits), np.asarray(dist.logits), rtol=1e-6)
        np.testing.assert_allclose(np.asarray(value), np.asarray(want), atol=1e-6)
        assert np.all(np.asarray(logits)[~np.asarray(legal)] == np.finfo(np.float32).min)


def test_the_docs_search_over_a_muzero_export_plays_as_the_run_searches(tmp_path, tiny_run):
    """docs/search.md's plain-JAX search over the exported networks, run as written, gives the run's own search."""
    import dataclasses
    import pathlib

    from rljax.agents.muzero import muzero_network, muzero_search
    from rljax.policy.export import export

    run_dir, _ = tiny_run("muzero")
    policy = rljax.load(run_dir)
    export(policy, tmp_path / "out", onnx=False)
    doc = (pathlib.Path(__file__).parents[2] / "docs" / "search.md").read_text()
    block = doc.split("<!-- exported-muzero-search -->", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    assert 'OUT = "out"' in block
    namespace: dict = {}
    exec(block.replace('OUT = "out"', f'OUT = {str(tmp_path / "out")!r}'), namespace)  # noqa: S102

    env, params = envs.make("TicTacToe-v0")
    keys = jax.random.split(jax.random.key(2), 8)
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
    obs, *_ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys, state, jnp.arange(8), params)
    got = namespace["search"](jax.random.key(0), *jax.tree.leaves(obs), legal_action_mask=obs[LEGAL_ACTION_MASK])
    config = dataclasses.replace(policy.config, gumbel_scale=0.0, dirichlet_fraction=0.0)
    want = jax.jit(muzero_search(muzero_network(config, env, params), config))(
        policy.params.params, jax.random.key(0), obs, config.hyperparams())
    np.testing.assert_allclose(np.asarray(got.action_weights), np.asarray(want.action_weights), atol=1e-5)
    np.testing.assert_array_equal(np.asarray(got.action), np.asarray(want.action))


# Slow: by default tests/unit/suites/test_pgx.py (the contract and matches on a pgx game) and the tiny run above
# (the same algorithm on rljax's own tic-tac-toe) stand for it.
@pytest.mark.slow
def test_alphazero_trains_on_a_pgx_game_by_name(tmp_path):
    config = dataclasses.replace(TINY, env="pgx/tic_tac_toe")
    result = rljax.train(config, options=rljax.RunOptions(run_dir=tmp_path / "pgx", quiet=True))
    assert len(result.rows) == 2 and all(np.isfinite(r["policy_loss"]) for r in result.rows)
    assert main(["eval", str(tmp_path / "pgx"), "--games", "4"]) == 0


# Slow: by default tests/unit/training/test_sweep.py's PPO member (the search's sweepable fields are traced
# hyperparameters like any other, tests/unit/core/test_config.py) stands for it.
@pytest.mark.slow
def test_a_sweep_over_search_hyperparameters_matches_its_single_runs():
    from rljax.training.sweep import SweepSpec, run_sweep

    grid = {"gumbel_scale": [0.0, 1.0], "value_scale": [0.05, 0.1]}
    result, members, _ = run_sweep(TINY, SweepSpec(grid=grid), quiet=True)
    m = members[3]
    single = rljax.train(dataclasses.replace(TINY, **m.values), options=rljax.RunOptions(quiet=True))
    for a, b in zip(leaves(single.agent.params_of(single.state)), leaves(result.agent.params_of(result.state))):
        np.testing.assert_allclose(a, b[3], atol=1e-5)
