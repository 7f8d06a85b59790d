"""``rljax export`` (:mod:`rljax.cli.export`): what the library raises mapped to exit statuses (2 bad
input, 70 an artefact that does not reproduce the policy, 74 a failed write), and the summary printed.
The artefacts themselves: ``tests/unit/policy/test_export.py``."""

from __future__ import annotations

import pytest

import rljax.policy.export as library
import rljax.policy.trained as trained
from rljax.cli.export import summary
from rljax.cli.main import main


def test_missing_arguments_and_bad_choices_are_usage_errors(tmp_path, capsys):
    assert main(["export", str(tmp_path)]) == 2
    assert "rljax export: error: the following arguments are required: out_dir" in capsys.readouterr().err
    assert main(["export", str(tmp_path), str(tmp_path / "out"), "--onnx", "maybe"]) == 2
    assert "argument --onnx: invalid choice: 'maybe' (choose from 'auto', 'yes', 'no')" in capsys.readouterr().err


def test_a_non_empty_out_dir_is_refused_before_the_run_is_read(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert main(["export", str(tmp_path / "no-such-run"), str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rljax export: error: {out} is not empty (keep.txt)") and "--force" in err


def test_a_missing_run_is_a_usage_error(tmp_path, capsys):
    assert main(["export", str(tmp_path / "no-such-run"), str(tmp_path / "out")]) == 2
    assert "no-such-run" in capsys.readouterr().err and not (tmp_path / "out").exists()


@pytest.mark.parametrize("error, status, message", [
    (library.ExportError("policy.stablehlo differs"), 70, "rljax export: error: policy.stablehlo differs; nothing was "
                                                          "written"),
    (OSError(28, "No space left on device"), 74, "failed: [Errno 28] No space left on device; nothing was left behind"),
    (ValueError("out is the run directory"), 2, "rljax export: error: out is the run directory"),
])
def test_what_export_raises_is_an_exit_status(tmp_path, capsys, monkeypatch, error, status, message):
    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr(trained, "load", lambda run_dir, step=None, member=None: (run_dir, step, member))
    monkeypatch.setattr(library, "export", fail)
    assert main(["export", "run", str(tmp_path / "out"), "--step", "8", "--member", "3"]) == status
    assert message in capsys.readouterr().err


def test_the_options_reach_the_library(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(trained, "load", lambda run_dir, step=None, member=None: (run_dir, step, member))
    monkeypatch.setattr(library, "export", lambda policy, out, onnx, force: calls.append((policy, out, onnx, force))
                        or _META)
    assert main(["export", "run", str(tmp_path / "a"), "--step", "8", "--member", "3", "--onnx", "no"]) == 0
    assert main(["export", "run", str(tmp_path / "b"), "--member", "fast", "--onnx", "yes", "--force"]) == 0
    assert main(["export", "run", str(tmp_path / "c")]) == 0
    assert calls == [(("run", 8, 3), str(tmp_path / "a"), False, False),     # a member index is an int
                     (("run", None, "fast"), str(tmp_path / "b"), True, True),
                     (("run", None, None), str(tmp_path / "c"), "auto", False)]


_META = {"algorithm": "ppo", "env": "Pendulum-v1", "step": 12800, "member": None, "export_seconds": 1.25,
         "signature": {"inputs": [{"name": "obs", "shape": ["b", 3], "dtype": "float32"}],
                       "outputs": [{"name": "action", "shape": ["b", 1], "dtype": "float32"}]},
         "files": {"policy.stablehlo": {"bytes": 12345}},
         "checks": {"observations": 256, "max_abs_diff": {"policy.stablehlo": 0.0}},
         "onnx_skipped": "not requested (onnx=False)"}


def test_the_summary():
    assert summary(_META, "out").splitlines() == [
        "exported ppo on Pendulum-v1 (step 12,800) to out in 1.2s",
        "  obs float32[b, 3] -> action float32[b, 1] (b: any batch size)",
        "  policy.stablehlo: 12,345 bytes, max |action - policy.act| = 0 on 256 observations",
        "  policy.onnx not written: not requested (onnx=False)"]
    assert "member 2" in summary({**_META, "member": 2}, "out").splitlines()[0]


def test_the_summary_of_a_recurrent_policy_names_its_state_and_its_check():
    """Regression: the summary read checks['observations'], which a recurrent export (checked over
    steps of episodes) does not have: `rljax export` of a recurrent run ended in a KeyError."""
    state = {"name": "state_h", "shape": ["b", 8], "dtype": "float32"}
    meta = {**_META, "signature": {"inputs": [_META["signature"]["inputs"][0], state],
                                   "outputs": [_META["signature"]["outputs"][0], {**state, "name": "next_state_h"}]},
            "memory": {"cell": "gru", "size": 8, "state": ["state_h"]},
            "checks": {"steps": 1000, "envs": 8, "episodes_ended": 250, "state": ["state_h"],
                       "max_abs_diff": {"policy.stablehlo": 0.0}}}
    assert summary(meta, "out").splitlines()[1:] == [
        "  (obs float32[b, 3], state_h float32[b, 8]) -> (action float32[b, 1], next_state_h float32[b, 8]) "
        "(b: any batch size)",
        "  policy.stablehlo: 12,345 bytes, max |action - policy.act| = 0 on 1,000 steps of episodes fed its own state",
        "  state: state_h (zeros at an episode's start; feed next_* back)",
        "  policy.onnx not written: not requested (onnx=False)"]


# Slow: by default tests/unit/policy/test_host_policy.py::test_a_host_policy_exports_like_any_other stands for it.
@pytest.mark.slow
def test_a_host_run_exports(tmp_path, capsys):
    """The issue: ``rljax export`` of a ``gymnasium/CartPole-v1`` run said "unknown environment"."""
    import json

    from rljax.actorlearner.learner import HostOptions
    from rljax.actorlearner.run import run_host
    from rljax.agents.ppo import PPOConfig
    from rljax.cli import main as cli
    from rljax.training.options import RunOptions

    config = PPOConfig(env="gymnasium/CartPole-v1", num_envs=4, num_steps=32, total_timesteps=256, num_epochs=1,
                       num_minibatches=2, hidden_sizes=(16,))
    run_host(config, RunOptions(run_dir=tmp_path / "run", quiet=True, handle_signals=False),
             HostOptions(max_policy_lag=0))
    status = cli.main(["export", str(tmp_path / "run"), str(tmp_path / "out"), "--onnx", "no"])
    out = capsys.readouterr().out
    assert status == 0 and "exported ppo on gymnasium/CartPole-v1 (step 256)" in out
    assert "max |action - policy.act| = 0 on 256 observations" in out
    assert json.loads((tmp_path / "out" / "policy.json").read_text())["action_space"]["n"] == 2
