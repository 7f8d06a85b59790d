"""Run health (:mod:`rljax.training.hooks.health`): what counts as divergence in a row, the desync
check, learning-rate scaling, and the hook's decisions (record, warn per sweep member, stop, roll
back to a checkpoint or to the initial state, give up after ``max_rollbacks``) on fake runs, with no
training. Real divergences end to end: tests/integration/test_reliability.py."""

from __future__ import annotations

import collections
import dataclasses
import types

import jax.numpy as jnp
import pytest
from flax import struct

from rljax.training.hooks.health import (DesyncError, Health, NonFiniteError, check_desync, check_health,
                                         nonfinite_reason, scale_learning_rates)


def test_nonfinite_reason_names_each_bad_value():
    assert nonfinite_reason({"env_steps": 1, "policy_loss": 0.5, "nonfinite_state": 0.0, "sps": float("nan")}) is None
    assert nonfinite_reason({"policy_loss": float("nan"), "value_loss": None, "q_loss": 1.0}) == \
        "policy_loss is nan; value_loss is None"
    assert nonfinite_reason({"nonfinite_state": 3.0}) == "the train state holds 3.0 non-finite values"
    assert nonfinite_reason({"nonfinite_state": None}) == "the train state holds None non-finite values"
    assert nonfinite_reason({"actor_loss": float("inf"), "nonfinite_state": float("nan")}) == \
        "actor_loss is inf; the train state holds nan non-finite values"


def test_desync_and_health_checks():
    check_desync({"param_desync": 0.0}, 3)
    check_desync({}, 3)
    with pytest.raises(DesyncError, match=r"after chunk 3 \(checksum spread 1e-07\)"):
        check_desync({"param_desync": 1e-7}, 3)
    check_health({"env_steps": 64, "policy_loss": 1.0}, 0)
    with pytest.raises(NonFiniteError, match=r"^policy_loss is nan after chunk 2 \(env step 64\)$"):
        check_health({"env_steps": 64, "policy_loss": float("nan")}, 2)


@struct.dataclass
class Hyper:
    learning_rate: jnp.ndarray
    critic_learning_rate: jnp.ndarray
    gamma: jnp.ndarray


@struct.dataclass
class State:
    hyperparams: Hyper


def _state(lr=1.0):
    return State(Hyper(jnp.float32(lr), jnp.float32(2 * lr), jnp.float32(0.99)))


def test_scale_learning_rates_scales_every_learning_rate_and_nothing_else():
    out = scale_learning_rates(_state(), 0.5).hyperparams
    assert (float(out.learning_rate), float(out.critic_learning_rate)) == (0.5, 1.0)
    assert out.gamma == jnp.float32(0.99)
    assert out.learning_rate.dtype == jnp.float32


@dataclasses.dataclass
class FakeConfig:
    env: str = "CartPole-v1"
    on_nonfinite: str = "rollback"
    max_rollbacks: int = 2
    rollback_lr_factor: float = 0.5


class FakeTracking:
    def __init__(self):
        self.incidents, self.rewinds = [], []

    def record_incident(self, incident):
        self.incidents.append(incident)

    def rewind(self, env_steps, rows, lines):
        self.rewinds.append((env_steps, rows, lines))


class FakeCheckpointer:
    """A checkpoint at chunk 1 (env step 20), saved after one earlier rollback, with lr 0.5."""

    def __init__(self, steps=(20,)):
        self._steps = list(steps)

    def steps(self):
        return self._steps

    def wait(self):
        pass

    def restore(self, state):
        return _state(0.5), {"chunk_index": 1, "env_steps": 20, "rows": [{"env_steps": 20}],
                             "lines": [{"env_steps": 20, "last_update": True}], "rollbacks": 1}, None


def _run(checkpointer=None, rollbacks=0):
    run = types.SimpleNamespace(rollbacks=rollbacks, timings=collections.Counter(), checkpointer=checkpointer,
                                tracking=FakeTracking(), state=_state(), discarded=0,
                                rows=[{"env_steps": s} for s in (10, 20, 30, 40)],
                                plan=types.SimpleNamespace(num_updates=8),
                                program=types.SimpleNamespace(names=["a", "b"], init_state=lambda n: _state(1.0)))
    run.discard_ahead = lambda: setattr(run, "discarded", run.discarded + 1)
    return run


BAD = [{"env_steps": 40, "policy_loss": float("nan")}]


def test_record_adds_the_rollback_count_and_stops_a_desync():
    health, run = Health(FakeConfig(), isolated=False), _run(rollbacks=1)
    rows = [{"env_steps": 10}]
    health.record(run, 0, rows)
    assert rows == [{"env_steps": 10, "rollbacks": 1}]
    with pytest.raises(DesyncError):
        health.record(run, 0, [{"param_desync": 2.0}])
    assert health.react(run, 0, [{"env_steps": 10, "policy_loss": 1.0}]) is None


def test_rollback_to_the_newest_checkpoint_scales_the_learning_rate():
    health, run = Health(FakeConfig(), isolated=False), _run(FakeCheckpointer())
    with pytest.warns(UserWarning, match=r"rolled back to env step 20 with the learning rate scaled by 0.5 \(rollback 1"):
        assert health.react(run, 3, BAD) == 2  # the chunk after the checkpoint's
    assert run.rollbacks == 1 and run.timings["rollbacks"] == 1 and run.discarded == 1
    # The checkpoint already holds one rollback's factor (lr 0.5): this one scales by 0.5 ** (1 - 1) = 1.
    assert float(run.state.hyperparams.learning_rate) == 0.5
    assert run.tracking.rewinds == [(20, [{"env_steps": 20}], [{"env_steps": 20, "last_update": True}])]
    assert [r["env_steps"] for r in run.rows] == [10, 20]
    (incident,) = run.tracking.incidents
    assert incident == {"kind": "nonfinite", "chunk": 3, "env_steps": 40, "reason": "policy_loss is nan",
                        "action": "rollback", "rollback": 1, "to_env_steps": 20, "lr_factor": 0.5}


def test_rollback_without_a_checkpoint_restarts_from_the_initial_state():
    health, run = Health(FakeConfig(), isolated=False), _run(FakeCheckpointer(steps=()), rollbacks=1)
    with pytest.warns(UserWarning, match=r"rolled back to env step 0 .*scaled by 0.25 \(rollback 2 of at most 2\)"):
        assert health.react(run, 3, BAD) == 0
    assert float(run.state.hyperparams.learning_rate) == 0.25 and run.rows == []
    assert run.tracking.rewinds == [(0, [], [])]


def test_stop_and_give_up_are_non_finite_errors_naming_what_to_do():
    stop = Health(FakeConfig(on_nonfinite="stop"), isolated=False)
    run = _run(FakeCheckpointer())
    with pytest.raises(NonFiniteError, match=r"policy_loss is nan after chunk 3 \(env step 40\): the run diverged\. "
                                             r"The newest checkpoint \(20 env steps\) is intact\. on_nonfinite='rollback'"):
        stop.react(run, 3, BAD)
    assert run.tracking.incidents[-1]["action"] == "stop" and run.rollbacks == 0
    used_up = _run(None, rollbacks=2)
    with pytest.raises(NonFiniteError, match=r"and 2 rollback\(s\) \(max_rollbacks=2\) did not help: giving up\. Lower"):
        Health(FakeConfig(), isolated=False).react(used_up, 3, BAD)


def test_a_diverged_sweep_member_is_warned_about_once_and_the_others_go_on():
    health, run = Health(FakeConfig(), isolated=True), _run()
    rows = [{"env_steps": 40, "policy_loss": 1.0}, {"env_steps": 40, "policy_loss": float("inf")}]
    health.record(run, 3, rows)  # isolated: no rollbacks column, no desync check
    assert "rollbacks" not in rows[0]
    with pytest.warns(UserWarning, match=r"sweep member b diverged after chunk 3: policy_loss is inf; the others go on"):
        assert health.react(run, 3, rows) is None
    assert health.diverged == {1}
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert health.react(run, 4, rows) is None  # once per member
