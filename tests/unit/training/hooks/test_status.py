""":class:`rljax.training.hooks.status.RunStatus` in real runs: ``status.json`` through a run's life
(running with progress, the newest checkpoint, finished), a stop request taken at the next chunk
boundary (preempted, saved, and the resume continues bit-exactly), and a request left from before
the run started dropped with a warning."""

from __future__ import annotations

import json

import pytest

import rljax
from rljax.store.status import read_status, request_stop
from tests.support.runs import PPO_SMALL, leaves


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    run = tmp_path_factory.mktemp("full") / "run"
    return run, rljax.train(PPO_SMALL, options=rljax.RunOptions(run_dir=run, quiet=True, checkpoint_every=2))


def test_a_finished_runs_status(full):
    run, result = full
    status = read_status(run)
    assert status["state"] == "finished" and status["env_steps"] == status["total_env_steps"] == 1536
    assert status["chunks_done"] == status["num_chunks"] == 6 and status["last_checkpoint_env_steps"] == 1536
    assert status["sps"] > 0 and status["eta_s"] is None and status["stall_after_s"] > 0
    # The file itself says so, for tools that read it without read_status.
    assert json.loads((run / "status.json").read_text())["phase"] == "ended"


def test_a_stop_request_stops_after_the_chunk_and_the_resume_is_bit_exact(full, tmp_path):
    ref_run, ref = full
    run = tmp_path / "run"
    seen = []

    def on_chunk(c, state, row):
        seen.append(read_status(run)["state"])
        if c == 1:
            request_stop(run, requester="test")

    part = rljax.train(PPO_SMALL, options=rljax.RunOptions(run_dir=run, quiet=True, checkpoint_every=2,
                                                           on_chunk=on_chunk))
    assert part.preempted == "rljax stop (test)" and len(part.rows) == 3  # taken at chunk 2's boundary
    assert seen == ["running"] * 3
    status = read_status(run)
    assert status["state"] == "preempted" and status["stopped_by"] == "rljax stop (test)"
    assert status["last_checkpoint_env_steps"] == 768  # the stop saved chunk 2
    rest = rljax.train(PPO_SMALL, options=rljax.RunOptions(run_dir=run, quiet=True, checkpoint_every=2, resume=True))
    assert rest.preempted is None and read_status(run)["state"] == "finished"
    assert all((a == b).all() for a, b in zip(leaves(rest.state), leaves(ref.state)))


def test_a_sweeps_time_left_is_each_members_steps_left_at_each_members_rate(tmp_path):
    # Steps and steps/s in a sweep's rows are each member's (they move together): 9 members at 100
    # steps/s each with 500 of 1000 steps left finish in 5 s, not 5 / 9 s; status.json's sps is all of theirs.
    import types

    from rljax.training.hooks.status import RunStatus

    hook = RunStatus(tmp_path)
    hook.record_["total_env_steps"] = 1000
    run = types.SimpleNamespace(guard=types.SimpleNamespace(ask=lambda why: None))
    hook.record(run, 0, [{"env_steps": 500, "sps": 100.0, "wall_time_s": 5.0}] * 9)
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["eta_s"] == pytest.approx(5.0) and status["sps"] == pytest.approx(900.0)


def test_a_request_from_before_the_run_is_dropped(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    request_stop(run, requester="old")
    small = PPO_SMALL.__class__(**{**PPO_SMALL.__dict__, "total_timesteps": 256})
    with pytest.warns(UserWarning, match="dropped a stop request written before this run started"):
        result = rljax.train(small, options=rljax.RunOptions(run_dir=run, quiet=True, checkpoints=False))
    assert result.preempted is None and read_status(run)["state"] == "finished"


def test_a_stop_asked_while_the_run_compiles_stops_it_after_its_first_chunk(tmp_path, monkeypatch):
    """Regression: status.json appeared only once the first chunk ran, so `rljax stop` during set-up
    and compiling answered "not started" and refused."""
    from rljax.training.program import Program

    run = tmp_path / "run"
    real = Program.compile

    def compile_then_stop(self, *args, **kwargs):
        assert read_status(run)["state"] == "running" and read_status(run)["phase"] == "compiling"
        request_stop(run, requester="during compile")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Program, "compile", compile_then_stop)
    result = rljax.train(PPO_SMALL, options=rljax.RunOptions(run_dir=run, quiet=True, checkpoints=False))
    # Taken at the first chunk's boundary; the chunk launched ahead of it finishes too.
    assert result.preempted == "rljax stop (during compile)" and len(result.rows) in (1, 2)
