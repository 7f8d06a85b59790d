"""IMPALA: the V-trace loss by hand on and off policy, no gradient through its targets, config
validation, the registry entry, a probe that bootstraps through truncation, and a short CartPole run
that must clearly learn (the full run is ``python -m experiments.impala_cartpole``)."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rljax
from rljax.agents.impala import IMPALAConfig, impala_loss
from rljax.core.distributions import Categorical
from rljax.core.rollout import Transition
from tests.support.endless import assert_actor_critic_bootstraps_through_truncation


def _hp(**kw):
    return dataclasses.replace(IMPALAConfig(), **kw).hyperparams()


def _traj(behaviour_log_prob):
    """T = 2 steps of one env: actions 0 then 1, rewards 1 then 2, no episode end; obs 0, 1 and next obs 1, 2."""
    return Transition(obs=jnp.array([[[0.0]], [[1.0]]]), action=jnp.array([[0], [1]]), reward=jnp.array([[1.0], [2.0]]),
                      terminated=jnp.zeros((2, 1), bool), truncated=jnp.zeros((2, 1), bool),
                      next_obs=jnp.array([[[1.0]], [[2.0]]]), extras=jnp.asarray(behaviour_log_prob, jnp.float32))


def _uniform_apply(params, obs):
    """A uniform policy over 2 actions; V(s) = s (the observation's value)."""
    return Categorical(logits=jnp.zeros(obs.shape[:-1] + (2,))), obs[..., 0] * 1.0


def test_on_policy_loss_by_hand():
    """Ratios 1, gamma 0.5, lambda 1: delta = r + 0.5 V(s') - V(s) = [1 + 0.5 - 0, 2 + 1 - 1] = [1.5, 2];
    vs_1 = 1 + 2 = 3, vs_0 = 0 + 1.5 + 0.5 * 2 = 2.5; pg_adv = r + 0.5 v'_{t+1} - V = [1 + 1.5 - 0, 2 + 1 - 1] = [2.5, 2]."""
    log_half = -math.log(2.0)
    loss, m = impala_loss(None, _uniform_apply, _traj([[log_half], [log_half]]), _hp(gamma=0.5, vf_coef=0.5,
                                                                                   ent_coef=0.01))
    np.testing.assert_allclose(m["policy_loss"], -(log_half * 2.5 + log_half * 2.0) / 2, rtol=1e-6)
    np.testing.assert_allclose(m["value_loss"], 0.5 * ((0 - 2.5) ** 2 + (1 - 3) ** 2) / 2, rtol=1e-6)
    np.testing.assert_allclose(m["entropy"], math.log(2.0), rtol=1e-6)
    np.testing.assert_allclose(m["rho_mean"], 1.0, rtol=1e-6)
    np.testing.assert_allclose(loss, m["policy_loss"] + 0.5 * m["value_loss"] - 0.01 * m["entropy"], rtol=1e-6)


def test_off_policy_ratios_are_clipped():
    """The behaviour gave action 0 probability 1/4 (ratio 2, clipped to rho_clip 1) and action 1
    probability 1 (ratio 1/2): delta_1 = 0.5 * 2 = 1, c_0 = 1: vs_0 = 0 + 1.5 + 0.5 * 1 = 2, vs_1 = 1 + 1;
    pg_adv = [1 * (1 + 0.5 * 2 - 0), 0.5 * (2 + 1 - 1)] = [2, 1]."""
    log_half = -math.log(2.0)
    _, m = impala_loss(None, _uniform_apply, _traj([[math.log(0.25)], [0.0]]), _hp(gamma=0.5))
    np.testing.assert_allclose(m["policy_loss"], -(log_half * 2.0 + log_half * 1.0) / 2, rtol=1e-6)
    np.testing.assert_allclose(m["value_loss"], 0.5 * ((0 - 2.0) ** 2 + (1 - 2.0) ** 2) / 2, rtol=1e-6)
    np.testing.assert_allclose(m["rho_mean"], 1.25, rtol=1e-6)
    np.testing.assert_allclose(m["rho_clip_fraction"], 0.5)


def test_no_gradient_flows_through_the_targets():
    """d loss / d w for V(s) = w * s with the targets held fixed: only the value term's
    0.5 * vf * mean(2 (w s - vs) s) (the policy is uniform and independent of w)."""
    def apply_fn(w, obs):
        return Categorical(logits=jnp.zeros(obs.shape[:-1] + (2,))), w * obs[..., 0]

    log_half = -math.log(2.0)
    grad = jax.grad(lambda w: impala_loss(w, apply_fn, _traj([[log_half], [log_half]]), _hp(gamma=0.5, vf_coef=1.0))[0])(1.0)
    # At w = 1 the targets are vs = [2.5, 3] (above); d/dw 0.5 * mean((w s - vs)^2) = mean((w s - vs) s) = (0 + (1 - 3)) / 2.
    np.testing.assert_allclose(grad, -1.0, rtol=1e-6)


@pytest.mark.parametrize("kw, match", [(dict(rho_clip=0.0), "rho_clip"), (dict(trace_lambda=1.5), "trace_lambda"),
                                       (dict(learning_rate=-1.0), "learning_rate")])
def test_config_validation_names_the_values(kw, match):
    with pytest.raises(ValueError, match=match):
        IMPALAConfig(**kw).validate()


def test_registered_for_the_command_line():
    from rljax.cli.flags import algorithm_classes

    assert rljax.algorithms()["impala"].config_cls is IMPALAConfig and algorithm_classes()["impala"] is IMPALAConfig


def test_value_bootstraps_through_truncation():
    """A never-ending MDP cut by a time limit: V = 1 / (1 - gamma) = 2, not the 1.67 of a learner
    that treats the cut as termination."""
    assert_actor_critic_bootstraps_through_truncation(IMPALAConfig)


def test_cartpole_learns_end_to_end():
    result = rljax.train(IMPALAConfig(total_timesteps=100_000, seed=0), options=rljax.RunOptions(quiet=True))
    assert result.final_return > 100, [r["episode_return_mean"] for r in result.rows]  # random: about 22
