"""The checkpointing hook: its cadence (chunks or the run's clock), the save after the last chunk and
on a stop, what the save's meta records, and a refused non-finite state handed to the run's recovery."""

from __future__ import annotations

from rljax.agents.ppo import PPOConfig
from rljax.store.checkpoint import NonFiniteStateError
from rljax.training.hooks.base import Run
from rljax.training.hooks.checkpointing import Checkpointing
from rljax.training.options import RunOptions
from rljax.training.program import Plan
from rljax.training.signals import PreemptionGuard

PLAN = Plan(num_updates=8, updates_per_chunk=2, num_chunks=4, env_steps_per_update=16)


class FakeCheckpointer:
    def __init__(self, refuse: bool = False):
        self.saves, self.closed, self.refuse = [], False, refuse
        self.bytes_written = 0

    def save(self, step, state, meta, nonfinite_ok):
        if self.refuse:
            raise NonFiniteStateError("leaf params: 1 NaN", {"params": 1})
        self.saves.append((step, state, meta, nonfinite_ok))
        self.bytes_written += 1000

    def close(self):
        self.closed = True


class FakeRecovery:
    def __init__(self):
        self.calls = []

    def roll_back(self, run, chunk_index, row, reason):
        self.calls.append((chunk_index, row["env_steps"], reason))
        return 0


def _run(clock=lambda: 0.0, **options) -> Run:
    return Run(config=PPOConfig(), program=None, plan=PLAN, state="state", guard=PreemptionGuard(enabled=False),
               options=RunOptions(**options), timings={"checkpoint_s": 0.0}, clock=clock, health=FakeRecovery())


def _rows(c: int) -> list[dict]:
    steps = (c + 1) * PLAN.updates_per_chunk * PLAN.env_steps_per_update
    return [{"env_steps": steps, "updates": (c + 1) * 2, "wall_time_s": 1.5, "loss": 0.25}]


def test_every_n_chunks_and_always_after_the_last():
    ckpt = FakeCheckpointer()
    hook, run = Checkpointing(ckpt, every=2, interval_s=60.0, nonfinite_ok=False), _run(checkpoint_every=2)
    for c in range(4):
        assert hook.boundary(run, c, _rows(c), last=c == 3) is None
    assert [s[0] for s in ckpt.saves] == [64, 128]  # after chunks 1 and 3 (3 is also the last)
    assert run.timings["checkpoint_bytes"] == 2000  # the run's total, for the rows' cost/checkpoint_bytes
    assert [hook.due(run, c, False) for c in range(4)] == [False, True, False, True]
    hook.close(run)
    assert ckpt.closed


def test_time_cadence_reads_the_runs_clock_and_a_stop_always_saves():
    now = [0.0]
    ckpt = FakeCheckpointer()
    run = _run(clock=lambda: now[0])
    hook = Checkpointing(ckpt, every=0, interval_s=10.0, nonfinite_ok=False, start=0.0)
    now[0] = 9.0
    hook.boundary(run, 0, _rows(0), last=False)
    now[0] = 10.0
    hook.boundary(run, 1, _rows(1), last=False)
    assert [s[0] for s in ckpt.saves] == [64]
    now[0] = 12.0  # 2 s after the save: not due, but a stop was asked
    run.guard.request("SIGTERM")
    hook.boundary(run, 2, _rows(2), last=False)
    assert [s[0] for s in ckpt.saves] == [64, 96] and run.guard.finishing


def test_the_meta_records_where_the_loop_stood_and_the_saved_options():
    ckpt = FakeCheckpointer()
    run = _run(checkpoint_every=1, keep_checkpoints=2, quiet=True)
    run.rollbacks = 1
    Checkpointing(ckpt, every=1, interval_s=60.0, nonfinite_ok=True).boundary(run, 1, _rows(1), last=False)
    step, state, meta, nonfinite_ok = ckpt.saves[0]
    assert (step, state, nonfinite_ok) == (64, "state", True)
    assert (meta["chunk_index"], meta["env_steps"], meta["updates"], meta["rollbacks"]) == (1, 64, 4, 1)
    assert meta["plan"] == {"num_updates": 8, "updates_per_chunk": 2, "num_chunks": 4, "env_steps_per_update": 16}
    assert meta["algorithm"] == "PPOConfig" and meta["rows"] == _rows(1)
    # What a resume keeps, not how this process ran (quiet, signals, callbacks are not saved).
    assert meta["run_options"] == RunOptions(checkpoint_every=1, keep_checkpoints=2).saved()
    assert "quiet" not in meta["run_options"]


def test_a_refused_non_finite_state_is_handed_to_the_runs_recovery():
    run = _run()
    next_chunk = Checkpointing(FakeCheckpointer(refuse=True), every=1, interval_s=60.0,
                               nonfinite_ok=False).boundary(run, 2, _rows(2), last=False)
    assert next_chunk == 0
    assert run.health.calls == [(2, 96, "leaf params: 1 NaN")] and not run.guard.finishing
