"""The run directory contract, the experiment command lines, and the Python API on a user env."""

from __future__ import annotations

import json
import math
import os
import pathlib
import subprocess
import sys

import jax
import numpy as np
import pytest

import rljax
from rljax.agents.ppo import PPOConfig
from rljax.cli.main import build_parser, config_from_args
from rljax.store.tracking import REQUIRED_KEYS, config_hash, read_chunks, read_metrics
from tests.support.env_doc import load_doc_example

ROOT = pathlib.Path(__file__).resolve().parents[2]
TINY = dict(num_envs=4, num_steps=32, num_epochs=1, num_minibatches=2, hidden_sizes=(16,))


def test_run_directory_contract(tmp_path):
    cfg = PPOConfig(env="Pendulum-v1", total_timesteps=4 * 32 * 14, updates_per_chunk=7, **TINY)
    run = tmp_path / "run"
    result = rljax.train(cfg, options=rljax.RunOptions(run_dir=run, quiet=True))
    config = json.loads((run / "config.json").read_text())
    assert config["env"] == "Pendulum-v1" and config["hidden_sizes"] == [16]
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["config_hash"] == config_hash(cfg) and manifest["seed"] == 0
    for key in ("git_commit", "git_dirty", "packages", "devices", "argv", "plan"):
        assert key in manifest
    assert manifest["packages"]["jax"] == jax.__version__
    rows = read_chunks(run)
    assert len(rows) == 2 and rows == [json.loads(json.dumps(r)) for r in rows]
    # metrics.jsonl: a row per update, the chunk's columns on each chunk's last one.
    lines = read_metrics(run)
    assert [r["updates"] for r in lines] == list(range(1, 15)) and sum(r["episodes"] for r in lines) == 8
    assert [r["env_steps"] for r in lines if "sps" in r] == [4 * 32 * 7, 4 * 32 * 14]
    for row in rows:
        for key in REQUIRED_KEYS + ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction",
                                    "explained_variance", "grad_norm"):
            assert key in row, key
    assert [r["env_steps"] for r in rows] == [4 * 32 * 7, 4 * 32 * 14]
    assert [r["updates"] for r in rows] == [7, 14]
    # Pendulum episodes are 200 steps: 4 envs x 448 steps finish 8 episodes, each with cost terms.
    assert sum(r["episodes"] for r in rows) == 8
    last = rows[-1]
    comps = [last[f"reward_components/{k}"] for k in ("angle", "velocity", "torque")]
    np.testing.assert_allclose(sum(comps), last["episode_return_mean"], rtol=1e-4)
    events = list((run / "tb").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0
    assert result.rows == rows


def test_tensorboard_has_the_same_scalars(tmp_path):
    from tensorboardX.proto import event_pb2

    cfg = PPOConfig(total_timesteps=4 * 32 * 4, updates_per_chunk=2, **TINY)
    rljax.train(cfg, options=rljax.RunOptions(run_dir=tmp_path / "r", quiet=True))
    logged = {}
    for path in (tmp_path / "r" / "tb").glob("events.out.tfevents.*"):
        data = path.read_bytes()
        pos = 0
        while pos < len(data):  # TFRecord framing: len(8) crc(4) payload crc(4)
            n = int.from_bytes(data[pos:pos + 8], "little")
            ev = event_pb2.Event.FromString(data[pos + 12:pos + 12 + n])
            pos += 16 + n
            for v in ev.summary.value:
                logged[(v.tag, ev.step)] = v.simple_value
    assert {"value_loss", "sps", "episode_return_mean", "approx_kl"} <= {tag for tag, _ in logged}
    assert {step for _, step in logged} == {4 * 32 * k for k in (1, 2, 3, 4)}  # a row per update
    assert {step for tag, step in logged if tag == "sps"} == {4 * 32 * 2, 4 * 32 * 4}  # a chunk's columns at its end
    # Every finite scalar of every metrics.jsonl row, at that row's env step, with its value.
    rows = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    expected = {(k, r["env_steps"]): v for r in rows for k, v in r.items()
                if k != "env_steps" and isinstance(v, (int, float)) and math.isfinite(v)}
    assert expected.keys() == logged.keys()
    for key, v in expected.items():
        assert logged[key] == pytest.approx(v, rel=1e-6), key


def test_cli_flags_cover_every_config_field_and_parse_scientific_ints():
    parser = build_parser(PPOConfig, {"env": "Pendulum-v1"})
    args = parser.parse_args(["--total-timesteps", "1e6", "--hidden-sizes", "128,128", "--no-anneal-lr",
                              "--learning-rate", "3e-4", "--seed", "3"])
    cfg = config_from_args(PPOConfig, args)
    assert cfg.total_timesteps == 1_000_000 and cfg.hidden_sizes == (128, 128)
    assert cfg.anneal_lr is False and cfg.learning_rate == 3e-4 and cfg.env == "Pendulum-v1"
    import dataclasses

    flags = {s for a in parser._actions for s in a.option_strings}
    for f in dataclasses.fields(PPOConfig):
        assert "--" + f.name.replace("_", "-") in flags


def _run_module(*args, timeout=240):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "experiments.ppo_cartpole", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("args, message", [
    (["--learning-rat", "1e-3"], "did you mean --learning-rate"),
    (["--total-timesteps", "1e5x"], "'1e5x' is not an integer"),
    (["--num-minibatches", "7"], "not divisible by num_minibatches=7"),
    (["--env", "CartPole-v9", "--run-dir", "none"], "unknown environment 'CartPole-v9'"),
])
def test_cli_rejects_bad_flags_clearly(args, message):
    proc = _run_module(*args)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr


def test_experiment_module_end_to_end(tmp_path):
    run = tmp_path / "cli_run"
    proc = _run_module("--total-timesteps", "2048", "--num-steps", "64", "--run-dir", str(run),
                       "--no-compile-cache")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "done: 2,048 env steps" in proc.stdout
    assert len(read_metrics(run)) >= 1
    # A second run into the same directory is refused rather than mixing two runs' metrics.
    proc = _run_module("--total-timesteps", "2048", "--num-steps", "64", "--run-dir", str(run))
    assert proc.returncode == 2 and "already holds" in proc.stderr and "rljax resume" in proc.stderr
    assert len(read_metrics(run)) >= 1


def test_train_on_the_documented_user_env():
    """The README / docs/env_api.md example env trains through the public API."""
    ns = load_doc_example()
    env = ns["PointMass"]()
    cfg = PPOConfig(total_timesteps=8 * 64 * 40, num_envs=8, num_steps=64, learning_rate=1e-3,
                    hidden_sizes=(32, 32), updates_per_chunk=10)
    result = rljax.train(cfg, env=env, options=rljax.RunOptions(quiet=True))
    first, last = result.rows[0]["episode_return_mean"], result.final_return
    assert last > first, (first, last)


@pytest.mark.parametrize("argv, prog", [(["train", "td3", "--bogus"], "rljax train td3"),
                                        (["sweep", "pqn", "--bogus"], "rljax sweep pqn")])
def test_rljax_subcommands_name_themselves_in_errors(argv, prog, capsys):
    """`rljax train ALGO` and `rljax sweep ALGO` errors name the command that was typed (there is no
    `python -m experiments.td3` module to point the user to)."""
    from rljax.cli.main import main

    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert f"{prog}: error: unrecognized arguments: --bogus" in capsys.readouterr().err
