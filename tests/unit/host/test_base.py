"""The host env contract's checks: every field against the declared spaces, with the bad value named."""

from __future__ import annotations

import numpy as np
import pytest

from rljax.env import Box, Discrete
from rljax.host.base import HostEnv, HostSpec, HostStep, check_actions, check_batch, check_obs

SPEC = HostSpec(2, Box(-1.0, 1.0, (3,)), Discrete(4))


def _step(**replace) -> HostStep:
    fields = dict(obs=np.zeros((2, 3), np.float32), reward=np.zeros(2, np.float32), terminated=np.zeros(2, bool),
                  truncated=np.zeros(2, bool), final_obs=np.zeros((2, 3), np.float32))
    return HostStep(**{**fields, **replace})


def test_a_well_formed_batch_passes_unchanged():
    step = _step()
    assert check_batch(SPEC, step) is step
    assert check_obs(SPEC, step.obs) is step.obs
    actions = np.array([0, 3], np.int32)
    assert check_actions(SPEC, actions) is actions


@pytest.mark.parametrize("replace, match", [
    (dict(obs=np.zeros((2, 4), np.float32)), r"obs: got shape \(2, 4\).*declare shape \(2, 3\)"),
    (dict(final_obs=np.zeros((2, 3), np.float64)), "final_obs: .*dtype float64"),
    (dict(reward=np.zeros(2, np.float64)), "reward: .*float64"),
    (dict(terminated=np.zeros(2, np.int32)), "terminated"),
    (dict(truncated=np.zeros(3, bool)), "truncated"),
    (dict(reward=np.array([0.0, np.nan], np.float32)), r"reward\[1\] is not finite"),
    (dict(obs=[[0.0] * 3] * 2), "expected a numpy array"),
])
def test_a_bad_field_is_named(replace, match):
    with pytest.raises((ValueError, TypeError), match=match):
        check_batch(SPEC, _step(**replace))


def test_actions_out_of_the_space_are_named():
    with pytest.raises(ValueError, match=r"actions\[0\] = -1 is not an action of Discrete\(4\) \(0 to 3\)"):
        check_actions(SPEC, np.array([-1, 0], np.int32))
    box = HostSpec(2, Box(-1.0, 1.0, (3,)), Box(-2.0, 2.0, (1,)))
    with pytest.raises(ValueError, match=r"actions\[1\] holds NaN or inf"):
        check_actions(box, np.array([[0.0], [np.inf]], np.float32))


def test_a_spec_needs_envs_and_rljax_spaces():
    with pytest.raises(ValueError, match="num_envs=0"):
        HostSpec(0, Box(-1.0, 1.0, (3,)), Discrete(2))
    with pytest.raises(TypeError, match="action_space=.*rljax.env.Box or rljax.env.Discrete"):
        HostSpec(1, Box(-1.0, 1.0, (3,)), "Discrete(2)")
    assert SPEC.obs_shape == (3,) and SPEC.action_shape == () and SPEC.action_dtype == np.int32


def test_the_protocol_is_runtime_checkable():
    class Fake:
        spec = SPEC

        def reset(self, seed): ...

        def step(self, actions): ...

        def close(self): ...

    assert isinstance(Fake(), HostEnv) and not isinstance(object(), HostEnv)
