"""Multi-agent PPO: IPPO (de Witt et al. 2020, "Is Independent Learning All You Need in the StarCraft
Multi-Agent Challenge?") and MAPPO (Yu et al. 2022, "The Surprising Effectiveness of PPO in
Cooperative Multi-Agent Games").

Both are PPO (:mod:`rljax.agents.ppo`: the same loss, GAE and epochs of minibatches on the on-policy
skeleton) on a multi-agent env (:class:`rljax.env.MultiAgentEnvironment`) whose ``num_envs`` games of
``N`` agents are ``num_envs * N`` rows of one batch (:class:`rljax.core.wrappers.AgentBatch`): each
row is one agent, with its own observation, action, reward and terminated/truncated flags, so
each agent's advantages are its own.

* **IPPO**: each agent's actor and critic see its own observation (with the one-hot of which agent
  it is, ``agent_id``). One network is shared by every agent, or, with ``separate_params``, each
  agent has its own copy (:class:`rljax.core.networks.PerAgent`), which also serves agents whose
  observations mean different things.
* **MAPPO**: the same actor; the critic sees the env's global state
  (:data:`rljax.env.GLOBAL_STATE`, with the agent id where ``critic_agent_id``) instead of the
  agent's observation (centralised training, decentralised execution: acting never reads it).

The defaults are JaxMARL's IPPO and MAPPO configuration for MPE (``experiments/ippo_mpe.py``).
Rows report the team's ``episode_return_mean`` (the sum of the agents' returns) and each agent's
``agent_return/<agent>``; ``total_timesteps`` counts joint steps of the games, as JaxMARL does.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from rljax.agents import register
from rljax.agents.base import agent_views, space_dims
from rljax.agents.ppo import PPOConfig, make_ppo
from rljax.core.config import field, require
from rljax.env import num_agents

__all__ = ["IPPOConfig", "MAPPOConfig", "make_ippo", "make_mappo"]


@dataclasses.dataclass(frozen=True)
class IPPOConfig(PPOConfig):
    """IPPO's configuration: PPO's fields (:class:`~rljax.agents.ppo.PPOConfig`) with JaxMARL's MPE
    defaults, ``num_envs`` the number of games (each gives ``N`` rows), and the multi-agent fields."""

    num_envs: int = field(16, "parallel games over all devices (each gives one row per agent)")
    total_timesteps: int = field(10_000_000, "joint env steps to train for (summed over games and devices)")
    agent_id: bool = field(True, "append the one-hot of which agent a row is to its observation (what lets one "
                                 "shared network act differently per agent)")
    separate_params: bool = field(False, "one network per agent, each with its own parameters, instead of one "
                                         "shared network (each row carries the agent id to pick its network by; "
                                         "not with --memory)")

    clip_per_network: bool = field(False, "clip the actor's and the critic's gradients to max_grad_norm each (as "
                                          "two optimisers would) instead of by their joint norm")

    global_state: ClassVar[bool] = False
    """Whether the rows keep the env's global state (for a centralised critic): not for IPPO."""

    def validate(self) -> None:
        """PPO's checks, then that separate parameters go without memory."""
        super().validate()
        require(not self.separate_params or self.memory == "none",
                f"separate_params=True is for the feed-forward actor-critic; memory={self.memory!r} shares one "
                f"network between the agents (with the agent id): set memory='none' or separate_params=False")


@dataclasses.dataclass(frozen=True)
class MAPPOConfig(IPPOConfig):
    """MAPPO's configuration: IPPO's, with the critic on the env's global state."""

    critic_agent_id: bool = field(False, "the critic also sees the agent id beside the global state (JaxMARL's "
                                         "SMAX MAPPO does; its MPE MAPPO does not)")
    clip_per_network: bool = field(True, "clip the actor's and the critic's gradients to max_grad_norm each (JaxMARL's "
                                         "MAPPO: two optimisers) instead of by their joint norm")
    critic_memory: bool = field(True, "with --memory gru|lstm, the critic has a memory core of its own on the global "
                                      "state (JaxMARL's MAPPO); False: a feed-forward critic")

    global_state: ClassVar[bool] = True
    """The rows keep the env's global state, which only the critic reads."""


def _multi_agent(algorithm: str, global_state: bool = False):
    """The ``fits`` rule of a multi-agent algorithm: a multi-agent env (with a global state where its
    critic reads one) whose action space PPO takes."""
    def fits(env: Any, env_params: Any) -> Any:
        if not num_agents(env):
            raise ValueError(f"{algorithm} trains multi-agent envs (rljax.env.MultiAgentEnvironment: Rendezvous-v0, "
                             f"jaxmarl/<id>); {getattr(env, 'name', type(env).__name__)} has one agent: "
                             f"train ppo on it")
        if global_state:
            agent_views(MAPPOConfig(), env, env_params)
        return space_dims(env.action_space(env_params), algorithm)
    return fits


def make_ippo(config: IPPOConfig, env: Any, env_params: Any, axis_name: str | None = None) -> Any:
    """IPPO's per-device program: :func:`~rljax.agents.ppo.make_ppo` on the agents' rows (the env
    stack and the network read ``config``'s multi-agent fields)."""
    _multi_agent("IPPO")(env, env_params)
    return make_ppo(config, env, env_params, axis_name)


def make_mappo(config: MAPPOConfig, env: Any, env_params: Any, axis_name: str | None = None) -> Any:
    """MAPPO's per-device program: :func:`~rljax.agents.ppo.make_ppo` with the centralised critic (whose
    network, :func:`~rljax.agents.base.agent_views`, refuses an env without a global state)."""
    _multi_agent("MAPPO")(env, env_params)
    return make_ppo(config, env, env_params, axis_name)


register("ippo", IPPOConfig, make_ippo, fits=_multi_agent("IPPO"))
register("mappo", MAPPOConfig, make_mappo, fits=_multi_agent("MAPPO", global_state=True))
