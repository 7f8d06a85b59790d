"""JaxMARL (Rutherford et al. 2024), multi-agent environments in JAX, as rljax multi-agent
environments: ``jaxmarl/<id>``.

Needs the ``jaxmarl`` extra (``pip install -e ".[jaxmarl]"``). Ids are JaxMARL's own names
(``MPE_simple_spread_v3``, ``MPE_simple_reference_v3``, ``HeuristicEnemySMAX``, ...; :func:`ids` lists
the installed version's); keyword arguments go to ``jaxmarl.make`` (SMAX's ``scenario`` may be a map
name: ``scenario="3m"``). Every id becomes a :class:`rljax.env.MultiAgentEnvironment`
(``docs/env_api.md``, "Multi-agent environments"): the agents in JaxMARL's ``env.agents`` order, and
the observation a dict with a leading agent axis,

* ``observation``: agent ``i``'s observation, float32 ``[N, D]`` (agents with shorter observations
  padded with zeros to the longest, ``D``);
* ``global_state``: what a centralised critic reads, ``[N, G]``: the env's ``world_state`` where
  it has one (SMAX), else every agent's observation concatenated (``G = N * D``), as JaxMARL's MAPPO
  baselines build it for MPE;
* ``legal_action_mask``: bool ``[N, A]``, where the env reports available actions (SMAX's
  ``get_avail_actions``) or its agents have different numbers of actions (padded to the most, ``A``,
  the padding illegal).

Rewards are each agent's own, ``[N]``. SMAX reports ``info["won"]`` (bool: every enemy dead and an
ally alive; meaningful on an episode's last step), which evaluation turns into ``eval/win_rate``.

Terminated vs truncated: JaxMARL ends an episode with ``dones["__all__"]`` and counts the time limit
among its reasons (``state.step >= max_steps``, checked before the step's counter moves, so an
episode has ``max_steps + 1`` steps). The adapter builds the env with a limit no episode reaches and
puts rljax's in its place, ``max_steps_in_episode = max_steps + 1`` (the same episodes, now
``truncated``): what is left of JaxMARL's ``done`` is the task's own end (SMAX: a team wiped out), and
an agent's ``terminated`` is its own ``dones[agent]`` (a dead unit) or that end. An env without a
``max_steps`` keeps its own dones as ``terminated`` and rljax's limit is ``max_steps`` (1000 unless
given). MPE has no end but the time limit: every MPE episode is truncated.

>>> import rljax
>>> env, params = rljax.make("jaxmarl/MPE_simple_spread_v3")
"""

from __future__ import annotations

import io
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rljax.env import GLOBAL_STATE, LEGAL_ACTION_MASK, Box, Discrete, MultiAgentEnvironment
from rljax.suites._adapter import NO_LIMIT, SuiteParams, SuiteState, check_id, convert_space, require

__all__ = ["DEFAULT_MAX_STEPS", "JaxMARLEnv", "ids", "make"]

DEFAULT_MAX_STEPS = 1000
"""rljax's time limit on a JaxMARL env that has no ``max_steps`` of its own, unless ``max_steps`` says otherwise."""


def _jaxmarl() -> Any:
    """The ``jaxmarl`` package, imported quietly: its import prints lines about optional submodules,
    and its MABrax module ends its own silencing by setting ``sys.stdout``/``sys.stderr`` to
    ``sys.__stdout__``/``sys.__stderr__`` (which would undo any redirection of the caller's, pytest's
    capture included): all four are set aside during the import and put back after it."""
    if "jaxmarl" in sys.modules:
        return require("jaxmarl", "jaxmarl")
    saved = sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__
    sys.stdout = sys.stderr = sys.__stdout__ = sys.__stderr__ = io.StringIO()
    try:
        return require("jaxmarl", "jaxmarl")
    finally:
        sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__ = saved


def _scenario(kwargs: dict[str, Any]) -> dict[str, Any]:
    """SMAX's ``scenario`` given by map name (``"3m"``) as JaxMARL's scenario object."""
    if isinstance(kwargs.get("scenario"), str):
        from jaxmarl.environments.smax import map_name_to_scenario

        name = kwargs["scenario"]
        try:
            kwargs = {**kwargs, "scenario": map_name_to_scenario(name)}
        except (KeyError, ValueError):
            raise ValueError(f"unknown SMAX scenario {name!r}; give one of JaxMARL's map names (3m, 2s3z, 5m_vs_6m, "
                             f"...: jaxmarl.environments.smax.MAP_NAME_TO_SCENARIO)") from None
    return kwargs


class JaxMARLEnv(MultiAgentEnvironment[SuiteState, SuiteParams]):
    """One JaxMARL environment (see the module docstring).

    Args:
        env_id: a JaxMARL id (:func:`ids`).
        max_steps: rljax's time limit; None: the env's own episode length (``max_steps + 1`` steps),
            or :data:`DEFAULT_MAX_STEPS` for an env without one.
        **kwargs: passed to ``jaxmarl.make``.
    """

    stochastic_transitions = True

    def __init__(self, env_id: str, max_steps: int | None = None, **kwargs: Any):
        jaxmarl = _jaxmarl()
        check_id("jaxmarl", env_id, ids())
        kwargs = _scenario(kwargs)
        probe = jaxmarl.make(env_id, **kwargs)
        own = getattr(probe, "max_steps", None)
        unlimited = None
        if isinstance(own, (int, np.integer)) and not isinstance(own, bool):
            try:
                unlimited = jaxmarl.make(env_id, **{**kwargs, "max_steps": NO_LIMIT})
            except TypeError:  # a constructor without max_steps
                unlimited = None
        if unlimited is not None and getattr(unlimited, "max_steps", None) == NO_LIMIT:
            limit, self._env = int(own) + 1, unlimited
        else:
            limit, self._env = DEFAULT_MAX_STEPS, probe
        if max_steps is not None:
            if not isinstance(max_steps, (int, np.integer)) or isinstance(max_steps, bool) or max_steps < 1:
                raise ValueError(f"jaxmarl/{env_id}: max_steps must be a positive int, got {max_steps!r}")
            limit = int(max_steps)
        env = self._env
        self._id = env_id
        self.agent_names = tuple(env.agents)
        self.num_agents = len(self.agent_names)
        self._default_params = SuiteParams(max_steps_in_episode=limit)

        actions = [convert_space(env.action_space(a)) for a in self.agent_names]
        if all(isinstance(s, Discrete) for s in actions):
            counts = [int(s.n) for s in actions]
            self._action_space: Any = Discrete(max(counts))
            self._own_actions = np.arange(max(counts))[None, :] < np.asarray(counts)[:, None]  # [N, A]
        elif all(isinstance(s, Box) and s.shape == actions[0].shape for s in actions):
            self._action_space, self._own_actions = actions[0], None
        else:
            raise ValueError(f"jaxmarl/{env_id}: its agents' action spaces {[str(s) for s in actions]} are neither "
                             f"all Discrete nor Boxes of one shape; rljax's multi-agent contract pads Discrete ones")
        obs, state = jax.eval_shape(env.reset, jax.random.key(0))
        self._dims = [int(np.prod(obs[a].shape)) for a in self.agent_names]
        self._world = "world_state" in obs
        width = max(self._dims)
        self._global = int(np.prod(obs["world_state"].shape)) if self._world else width * self.num_agents
        self._avail = self._has_avail(state)
        self._smax = hasattr(env, "num_allies") and _alive(state) is not None
        self._masked = self._own_actions is not None and (self._avail or not self._own_actions.all())
        space = {"observation": Box(-np.inf, np.inf, (width,)), GLOBAL_STATE: Box(-np.inf, np.inf, (self._global,))}
        if self._masked:
            space[LEGAL_ACTION_MASK] = Box(False, True, (self._action_space.n,), jnp.bool_)
        self._observation_space = space

    def _has_avail(self, state: Any) -> bool:
        try:
            jax.eval_shape(self._env.get_avail_actions, state)
        except NotImplementedError:
            return False
        return True

    @property
    def name(self) -> str:
        return f"jaxmarl/{self._id}"

    def __repr__(self) -> str:
        return f"JaxMARLEnv({self._id!r})"

    @property
    def default_params(self) -> SuiteParams:
        return self._default_params

    def observation_space(self, params: SuiteParams | None = None) -> dict[str, Box]:
        """One agent's: ``observation`` ``[D]``, ``global_state`` ``[G]`` and, where masked,
        ``legal_action_mask`` ``[A]``."""
        return self._observation_space

    def action_space(self, params: SuiteParams | None = None) -> Any:
        """One agent's: ``Discrete(A)`` (the most any agent has) or the agents' common Box."""
        return self._action_space

    def _obs(self, obs: dict[str, Any], state: Any) -> dict[str, jax.Array]:
        width = max(self._dims)
        rows = jnp.stack([jnp.pad(jnp.asarray(obs[a], jnp.float32).reshape(-1), (0, width - d))
                          for a, d in zip(self.agent_names, self._dims)])
        world = jnp.asarray(obs["world_state"], jnp.float32).reshape(-1) if self._world else rows.reshape(-1)
        out = {"observation": rows, GLOBAL_STATE: jnp.broadcast_to(world, (self.num_agents, self._global))}
        if self._masked:
            legal = jnp.asarray(self._own_actions)
            if self._avail:
                avail = self._env.get_avail_actions(state)
                legal = legal & jnp.stack([jnp.pad(jnp.asarray(avail[a], jnp.bool_),
                                                   (0, legal.shape[1] - len(avail[a]))) for a in self.agent_names])
            out[LEGAL_ACTION_MASK] = legal
        return out

    def reset_env(self, key: jax.Array, params: SuiteParams) -> tuple[dict[str, jax.Array], SuiteState]:
        obs, inner = self._env.reset(key)
        return self._obs(obs, inner), SuiteState(time=jnp.int32(0), inner=inner)

    def step_env(self, key: jax.Array, state: SuiteState, action: Any, params: SuiteParams
                 ) -> tuple[dict[str, jax.Array], SuiteState, jax.Array, jax.Array, dict[str, Any]]:
        actions = {a: action[i] for i, a in enumerate(self.agent_names)}
        obs, inner, rewards, dones, _ = self._env.step_env(key, state.inner, actions)
        reward = jnp.stack([jnp.asarray(rewards[a], jnp.float32) for a in self.agent_names])
        over = jnp.asarray(dones["__all__"], jnp.bool_)
        terminated = jnp.stack([jnp.asarray(dones[a], jnp.bool_) for a in self.agent_names]) | over
        info = {}
        if self._smax:  # the allies' win: every enemy dead, an ally alive
            allies, alive = self._env.num_allies, _alive(inner)
            info["won"] = jnp.all(~alive[allies:]) & jnp.any(alive[:allies])
        return self._obs(obs, inner), SuiteState(time=state.time + 1, inner=inner), reward, terminated, info


def _alive(state: Any) -> Any:
    """SMAX's ``unit_alive`` (allies first, then enemies) of its state or of the state an enemy-policy
    wrapper (``HeuristicEnemySMAX``) holds; None for other envs."""
    for s in (state, getattr(state, "state", None)):
        if hasattr(s, "unit_alive"):
            return s.unit_alive
    return None


def ids() -> list[str]:
    """JaxMARL's registered ids in the installed version."""
    return list(_jaxmarl().registration.registered_envs)


def make(env_id: str, max_steps: int | None = None, **kwargs: Any) -> tuple[JaxMARLEnv, SuiteParams]:
    """``(env, params)`` of JaxMARL's ``env_id`` (see :class:`JaxMARLEnv`)."""
    env = JaxMARLEnv(env_id, max_steps=max_steps, **kwargs)
    return env, env.default_params
