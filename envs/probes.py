"""Probe environments: tiny MDPs that each test one learning property.

After Andy Jones' "Debugging RL, without the agonizing pain". Each probe isolates one thing an agent
must get right; when a learner fails a probe, the failing property names the bug:

=====================  =====================================================  ==========================
probe                  dynamics                                               what a correct learner shows
=====================  =====================================================  ==========================
ConstantReward         one step, obs 0, reward 1                              V(0) = 1 (value fitting)
ObsReward              one step, obs +-1 at random, reward = obs              V(obs) = obs (obs -> value)
TwoStep                obs 0 then obs 1, reward 0 then 1                      V(0) = gamma, V(1) = 1
                                                                              (discounting, bootstrapping)
ActionReward           one step, reward 1 for the right action                picks the right action
                                                                              (policy gradient sign)
ActionObsReward        one step, obs +-1, reward 1 when action matches obs    picks the action per obs
                                                                              (policy conditioning)
RandomReward           obs 0 then obs 1, reward 0 then +1 with probability    the return distributions
                       3/4, else -1                                           Z(1) = {+1: 3/4, -1: 1/4},
                                                                              Z(0) = gamma Z(1)
                                                                              (distributional learning)
LegalActions           one step, obs {observation: 0, legal_action_mask: one of  picks the highest legal
                       the 15 non-empty masks over 4 actions, uniformly},     action every time, never an
                       reward 1 for the highest legal action, 0 for another   illegal one (legal-action
                       legal one, 2 for an illegal one (a learner that        masks)
                       ignores the mask is drawn to it)
=====================  =====================================================  ==========================

Discrete variants have two actions; "right" is action 1 for ActionReward and action ``(obs + 1) / 2``
for ActionObsReward. Continuous variants take a ``Box(-1, 1, (1,))`` action and pay
``1 - (a - a*)^2`` (clipped to [-1, 1] first), with ``a* = 0.5`` (ActionReward) or ``a* = 0.5 * obs``
(ActionObsReward); ConstantReward, ObsReward, TwoStep and RandomReward ignore the action.
LegalActions (:class:`ProbeLegalActions`, ``ProbeLegalActions-v0``) is discrete only, with a dict
observation.

Every episode terminates on its own (``terminated``), so values have no bootstrap beyond the episode.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from rljax.env import LEGAL_ACTION_MASK, Box, Discrete, EnvParams, EnvState, Environment

PROBE_KINDS = ("ConstantReward", "ObsReward", "TwoStep", "ActionReward", "ActionObsReward", "RandomReward")

RANDOM_REWARD_P = 0.75
"""RandomReward's probability of the +1 reward at its second step (-1 otherwise)."""


@struct.dataclass
class ProbeState(EnvState):
    """Attributes: obs: the current observation value, float32 scalar. time: steps in episode."""

    obs: jax.Array
    time: jax.Array


@struct.dataclass
class ProbeParams(EnvParams):
    """Attributes: max_steps_in_episode: never reached (probes terminate in 1 or 2 steps)."""

    max_steps_in_episode: int = 100


class ProbeEnv(Environment[ProbeState, ProbeParams]):
    """One probe environment; see the module docstring.

    Args:
        kind: one of ``PROBE_KINDS``.
        continuous: ``Box(-1, 1, (1,))`` actions instead of ``Discrete(2)``.

    Observations have shape ``(1,)``, float32.
    """

    def __init__(self, kind: str, continuous: bool = False):
        if kind not in PROBE_KINDS:
            raise ValueError(f"unknown probe kind {kind!r}; valid kinds: {', '.join(PROBE_KINDS)}")
        self.kind = kind
        self.continuous = continuous
        self.stochastic_transitions = kind == "RandomReward"  # the others draw only at resets

    @property
    def name(self) -> str:
        return f"Probe{self.kind}{'Continuous' if self.continuous else ''}-v0"

    @property
    def default_params(self) -> ProbeParams:
        return ProbeParams()

    def reset_env(self, key: jax.Array, params: ProbeParams) -> tuple[jax.Array, ProbeState]:
        if self.kind in ("ObsReward", "ActionObsReward"):
            obs = jnp.where(jax.random.bernoulli(key), 1.0, -1.0).astype(jnp.float32)
        else:
            obs = jnp.float32(0.0)
        state = ProbeState(obs=obs, time=jnp.int32(0))
        return obs[None], state

    def _action_reward(self, obs: jax.Array, action: Any) -> jax.Array:
        """Reward of the action-dependent probes, float32 scalar."""
        if self.continuous:
            a = jnp.clip(jnp.reshape(action, ()), -1.0, 1.0)
            target = 0.5 if self.kind == "ActionReward" else 0.5 * obs
            return 1.0 - (a - target) ** 2
        right = 1 if self.kind == "ActionReward" else ((obs + 1.0) / 2.0).astype(jnp.int32)
        return (jnp.asarray(action) == right).astype(jnp.float32)

    def step_env(self, key: jax.Array, state: ProbeState, action: Any, params: ProbeParams
                 ) -> tuple[jax.Array, ProbeState, jax.Array, jax.Array, dict[str, Any]]:
        time = state.time + 1
        if self.kind == "ConstantReward":
            reward, terminated, obs = jnp.float32(1.0), jnp.bool_(True), state.obs
        elif self.kind == "ObsReward":
            reward, terminated, obs = state.obs, jnp.bool_(True), state.obs
        elif self.kind in ("TwoStep", "RandomReward"):
            # Step 1 moves from obs 0 to obs 1 with reward 0; step 2 pays 1 (RandomReward: +1 or -1) and ends.
            terminated = state.obs > 0.5
            pay = 1.0 if self.kind == "TwoStep" else jnp.where(jax.random.bernoulli(key, RANDOM_REWARD_P), 1.0, -1.0)
            reward = jnp.where(terminated, pay, 0.0).astype(jnp.float32)
            obs = jnp.float32(1.0)
        else:
            reward, terminated, obs = self._action_reward(state.obs, action), jnp.bool_(True), state.obs
        new_state = ProbeState(obs=obs, time=time)
        return obs[None], new_state, jnp.asarray(reward, jnp.float32), terminated, {}

    def observation_space(self, params: ProbeParams) -> Box:
        return Box(-1.0, 1.0, (1,), jnp.float32)

    def action_space(self, params: ProbeParams) -> Box | Discrete:
        return Box(-1.0, 1.0, (1,), jnp.float32) if self.continuous else Discrete(2)


LEGAL_PROBE_ACTIONS = 4
"""ProbeLegalActions' number of actions."""


@struct.dataclass
class LegalProbeState(EnvState):
    """Attributes: legal: the episode's legal-action mask, bool ``[4]``. time: steps in episode."""

    legal: jax.Array
    time: jax.Array


class ProbeLegalActions(Environment[LegalProbeState, ProbeParams]):
    """The legal-action probe (see the module docstring): ``Discrete(4)`` actions, observations
    ``{"observation": float32 [1] (always 0), "legal_action_mask": bool [4]}``.

    Rewards: 1 for the highest legal action, 0 for another legal action, 2 for an illegal one, so a
    learner that honours the mask earns 1 every episode and one that ignores it prefers illegal actions.
    """

    stochastic_transitions = False
    name = "ProbeLegalActions-v0"

    @property
    def default_params(self) -> ProbeParams:
        return ProbeParams()

    @staticmethod
    def _obs(legal: jax.Array) -> dict[str, jax.Array]:
        return {"observation": jnp.zeros((1,), jnp.float32), LEGAL_ACTION_MASK: legal}

    def reset_env(self, key: jax.Array, params: ProbeParams) -> tuple[dict[str, jax.Array], LegalProbeState]:
        code = jax.random.randint(key, (), 1, 2 ** LEGAL_PROBE_ACTIONS)  # a non-empty mask, uniformly
        legal = (code >> jnp.arange(LEGAL_PROBE_ACTIONS)) & 1 == 1
        return self._obs(legal), LegalProbeState(legal=legal, time=jnp.int32(0))

    def step_env(self, key: jax.Array, state: LegalProbeState, action: Any, params: ProbeParams
                 ) -> tuple[dict[str, jax.Array], LegalProbeState, jax.Array, jax.Array, dict[str, Any]]:
        action = jnp.asarray(action, jnp.int32)
        best = LEGAL_PROBE_ACTIONS - 1 - jnp.argmax(state.legal[::-1])
        reward = jnp.where(state.legal[action], (action == best).astype(jnp.float32), 2.0)
        new_state = LegalProbeState(legal=state.legal, time=state.time + 1)
        return self._obs(state.legal), new_state, reward.astype(jnp.float32), jnp.bool_(True), {}

    def observation_space(self, params: ProbeParams) -> Any:
        return {"observation": Box(0.0, 0.0, (1,), jnp.float32),
                LEGAL_ACTION_MASK: Box(False, True, (LEGAL_PROBE_ACTIONS,), jnp.bool_)}

    def action_space(self, params: ProbeParams) -> Discrete:
        return Discrete(LEGAL_PROBE_ACTIONS)
