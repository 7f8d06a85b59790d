"""The hook contract: every boundary hook is a Hook (the loop calls all six methods on each, no
probing) and the defaults do nothing (the adapters' forwarding: test_adapters.py)."""

from __future__ import annotations

import pytest

from rljax.training.hooks.adapters import EvaluationHook, OnChunk, TrackingHook
from rljax.training.hooks.base import Hook, Run
from rljax.training.hooks.checkpointing import Checkpointing
from rljax.training.hooks.health import Health
from rljax.training.hooks.observe import ChunkTiming
from rljax.training.hooks.pbt import PBT
from rljax.training.hooks.watchdog import StallWatchdog
from rljax.training.options import RunOptions
from rljax.training.program import Plan
from rljax.training.signals import PreemptionGuard

PLAN = Plan(num_updates=4, updates_per_chunk=2, num_chunks=2, env_steps_per_update=8)


def _run(state=0, **kw) -> Run:
    return Run(config=None, program=None, plan=PLAN, state=state, guard=PreemptionGuard(enabled=False),
               options=RunOptions(), **kw)


@pytest.mark.parametrize("cls", [Health, ChunkTiming, StallWatchdog, PBT, Checkpointing, EvaluationHook,
                                 TrackingHook, OnChunk])
def test_every_boundary_hook_is_a_hook(cls):
    assert Hook in cls.__mro__  # its defaults (a Protocol without runtime checks: nominal)


def test_the_defaults_do_nothing():
    class Nothing(Hook):
        pass

    hook, run, rows = Nothing(), _run(), [{"env_steps": 16}]
    assert hook.needs_every_state is False
    assert hook.start(run) is None and hook.record(run, 0, rows) is None and hook.close(run) is None
    assert hook.due(run, 0, last=True) is False
    assert hook.react(run, 0, rows) is None and hook.boundary(run, 0, rows, last=True) is None
    assert rows == [{"env_steps": 16}]


def test_discard_ahead_keeps_the_launched_chunks_state():
    import jax.numpy as jnp

    run = _run(state=jnp.zeros(2), ahead=(jnp.ones(2), "out", 0.0))
    run.discard_ahead()
    assert run.ahead is None and run.state.tolist() == [1.0, 1.0]
    run.discard_ahead()  # nothing launched ahead: unchanged
    assert run.state.tolist() == [1.0, 1.0]
