"""A trained policy, out of its run: ``rljax.load(RUN_DIR) -> Policy``.

:func:`load` reads a checkpoint **read-only** (no lock, no manifest entry, nothing written: a live
run's checkpoints can be loaded beside it) and keeps only what acting needs: the acting network's
params, the observation statistics the agent normalised with, and its exploration scalar (the
agent's :class:`~rljax.agents.base.PolicyParams`). Nothing of the training program is compiled::

    policy = rljax.load("runs/ppo_pendulum")
    action = policy.act(obs)                    # one raw observation -> one action (compiled once, cached)
    actions = jax.jit(policy.act)(batch)        # [N, *obs_shape] -> [N, *action_shape]

``policy.act`` called eagerly runs a jitted function the policy compiles on its first call for each
input shape, dtype and flag and keeps, so a Python loop that calls it per step pays the compile once.

A run trained on host envs (``gymnasium/<id>``, ``envpool/<id>``, ``server:HOST:PORT``: the
actor-learner path) loads the same way: its checkpoint records the envs' spaces, and the policy's
``env`` is a :class:`HostEnvSpaces` (spaces only; host envs are stepped on the host, never inside a
compiled program). Evaluating it and drawing its episodes step host envs, made by
:func:`rljax.host.sources.make_host_env` (or the ``host_envs`` factory given to :func:`load`).

:func:`rljax.policy.evaluate.evaluate` runs episodes with it; ``rljax export`` writes it out as a
framework-free artefact.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import pathlib
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rljax.agents.base import Agent, PolicyParams
from rljax.host.spaces import HostEnvFactory, HostEnvSpaces

__all__ = ["HostEnvSpaces", "HostEnvFactory", "Policy", "is_host_policy", "load", "space_from_json"]


def is_host_policy(policy: Any) -> bool:
    """Whether ``policy`` was trained on host envs (its env is a :class:`HostEnvSpaces`)."""
    return isinstance(getattr(policy, "env", None), HostEnvSpaces)


@dataclasses.dataclass(frozen=True)
class Policy:
    """A trained policy and what it was trained on. A JAX pytree: ``params`` and ``env_params``
    are its leaves, so a ``Policy`` can also be passed into jitted functions.

    Attributes:
        agent: the :class:`~rljax.agents.base.Agent` (built for one device) whose ``policy`` acts.
        params: the agent's :class:`~rljax.agents.base.PolicyParams` (network params, observation
            statistics or None, exploration scalar).
        config: the run's (or sweep member's) config.
        env: the single, unbatched env.
        env_params: the env params the policy trained with (a sweep member's own).
        step: the checkpoint step (env steps at the save).
        run_dir: the run directory it was loaded from (None when built in memory).
        member: the sweep member's name, or None for a single run.
    """

    agent: Agent
    params: PolicyParams
    config: Any
    env: Any
    env_params: Any
    step: int
    run_dir: str | None = None
    member: str | None = None

    @property
    def algorithm(self) -> str:
        """The algorithm's registry name (``"ppo"``, ``"dqn"``, ...)."""
        from rljax.agents import algorithm_for

        return algorithm_for(self.config).name

    @property
    def observation_space(self) -> Any:
        return self.env.observation_space(self.env_params)

    @property
    def action_space(self) -> Any:
        return self.env.action_space(self.env_params)

    @property
    def observation_spec(self) -> Any:
        """The shapes and dtypes of one observation (:func:`rljax.env.observation_spec`; a pytree of
        ``jax.ShapeDtypeStruct``). In a multi-agent env, one agent's: the row its network acts on
        (:func:`rljax.agents.base.agent_observation_spec`: its own observation, with the agent id where
        it trained with one), without the global state, which acting never reads."""
        from rljax.env import GLOBAL_STATE, num_agents, observation_spec

        if not num_agents(self.env):
            return observation_spec(self.env, self.env_params)
        spec = self._row_spec()
        return {k: v for k, v in spec.items() if k != GLOBAL_STATE} if isinstance(spec, dict) else spec

    def _row_spec(self) -> Any:
        """A multi-agent policy's rows as its network takes them (the global state kept where it trained so)."""
        from rljax.agents.base import agent_observation_spec, agent_rows

        return agent_observation_spec(self.env, self.env_params, **agent_rows(self.config))

    @property
    def discrete(self) -> bool:
        """True for a discrete action space (int32 actions)."""
        from rljax.env import is_discrete

        return is_discrete(self.action_space)

    @property
    def config_hash(self) -> str:
        """:func:`rljax.store.tracking.config_hash` of the config."""
        from rljax.store.tracking import config_hash

        return config_hash(self.config)

    @property
    def recurrent(self) -> bool:
        """True for a policy with memory (trained with ``memory`` gru or lstm): it acts with
        :meth:`initial_state` and ``act(obs, state) -> (action, state)``."""
        return self.agent.recurrent

    def initial_state(self, batch: int | None = None) -> Any:
        """A recurrent policy's state at an episode's start (zeros): leaves ``[H]`` for one
        observation (``batch=None``), ``[batch, H]`` for a batch; ``()`` for a memoryless policy."""
        if batch is not None and (not isinstance(batch, (int, np.integer)) or isinstance(batch, bool) or batch < 1):
            raise ValueError(f"batch must be None (one observation) or a positive integer, got {batch!r}")
        state = self.agent.memory(1 if batch is None else int(batch))
        return jax.tree.map(lambda x: x[0], state) if batch is None else state

    def act(self, obs: Any, *args: Any, **kwargs: Any) -> Any:
        """The policy's action for raw env observations.

        Memoryless: ``act(obs, key=None, deterministic=True) -> action``. Recurrent:
        ``act(obs, state, key=None, deterministic=True) -> (action, state)``: ``state`` from
        :meth:`initial_state` at an episode's start, then the one the previous call returned (reset
        it to :meth:`initial_state` where a new episode starts).

        Args:
            obs: one observation ``[*obs_shape]`` or a batch ``[N, *obs_shape]``.
            state: (recurrent policies) the memory, leaves ``[H]`` or ``[N, H]`` like ``obs``.
            key: a PRNG key; needed only when ``deterministic`` is False.
            deterministic: the greedy/mean action (True) or the agent's exploring one (PPO/SAC:
                a sample of the policy distribution; DQN/PQN: epsilon-greedy with the final
                epsilon, after one draw of the network noise for a noisy Q-network (Rainbow); TD3:
                Gaussian noise of its exploration std).
            legal_action_mask: (keyword; envs with legal-action masks) bool ``[A]`` or ``[N, A]``, put
                into ``obs`` as its :data:`rljax.env.LEGAL_ACTION_MASK` leaf (which ``obs`` may also
                hold itself): the action is one of the legal ones.

        Returns:
            ``[*action_shape]`` or ``[N, *action_shape]``: int32 for discrete actions, float32
            within the Box bounds otherwise (with the next state for a recurrent policy). Pure:
            ``jax.jit(policy.act)`` works. Called with concrete arrays it runs a jitted
            :meth:`apply` (or :meth:`apply_step`) that this policy compiles once per input shape,
            dtype and ``deterministic`` and keeps (the same outputs as ``jax.jit(policy.act)``);
            under a transformation (``jit``, ``vmap``, export) it is traced inline.
        """
        if "legal_action_mask" in kwargs:
            obs = self._with_legal_actions(obs, kwargs.pop("legal_action_mask"))
        if self.recurrent and not args and "state" not in kwargs:
            raise TypeError("this policy is recurrent: act with policy.act(obs, state) -> (action, state), "
                            "the state from policy.initial_state() at an episode's start")
        fn = self.apply_step if self.recurrent else self.apply
        if any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves((obs, args, kwargs))):
            return fn(self.params, obs, *args, **kwargs)
        signature = _APPLY_STEP if self.recurrent else _APPLY
        arguments = signature.bind(self, self.params, obs, *args, **kwargs)  # a TypeError as fn's own
        arguments.apply_defaults()
        inputs = dict(arguments.arguments)
        del inputs["self"], inputs["params"]
        deterministic = bool(inputs.pop("deterministic"))
        cache = self.__dict__.setdefault("_compiled_act", {})  # (the dataclass is frozen; this is a cache)
        if deterministic not in cache:
            # The params are closed over, as jax.jit(policy.act) closes over them: the same program and bits.
            cache[deterministic] = jax.jit(functools.partial(fn, self.params, deterministic=deterministic))
        return cache[deterministic](**inputs)

    def _with_legal_actions(self, obs: Any, legal: Any) -> Any:
        from collections.abc import Mapping

        from rljax.env import LEGAL_ACTION_MASK

        spec = self.observation_spec
        if not (isinstance(spec, Mapping) and LEGAL_ACTION_MASK in spec):
            raise ValueError(f"legal_action_mask was given, but this policy's env ({self.config.env}) has no "
                             f"legal-action mask: its observations have no '{LEGAL_ACTION_MASK}' leaf")
        if not isinstance(obs, Mapping):
            raise ValueError(f"legal_action_mask was given with an observation of type {type(obs).__name__}; this "
                             f"policy's observations are dicts with the keys {sorted(spec)}")
        return {**obs, LEGAL_ACTION_MASK: legal}

    def apply(self, params: PolicyParams, obs: Any, key: jax.Array | None = None,
              deterministic: bool = True) -> jax.Array:
        """:meth:`act` of a memoryless policy with the :class:`~rljax.agents.base.PolicyParams`
        passed explicitly."""
        if self.recurrent:
            raise TypeError("this policy is recurrent: act with policy.act(obs, state) -> (action, state), the "
                            "state from policy.initial_state() (or policy.apply_step(params, obs, state))")
        batch, single = self._batch(obs, key, deterministic)
        action = self.agent.policy(params, batch, key, deterministic)
        return action[0] if single else action

    def apply_step(self, params: PolicyParams, obs: Any, state: Any, key: jax.Array | None = None,
                   deterministic: bool = True) -> tuple[jax.Array, Any]:
        """``(action, state)``: one step of either kind of policy with the
        :class:`~rljax.agents.base.PolicyParams` passed explicitly (a memoryless policy's state is
        ``()`` and passes through)."""
        batch, single = self._batch(obs, key, deterministic)
        if single:
            state = jax.tree.map(lambda x: jnp.asarray(x)[None], state)
        n = jax.tree.leaves(batch)[0].shape[0]
        one = self.agent.memory(1)
        shapes = [tuple(jnp.shape(x)) for x in jax.tree.leaves(state)]
        concrete = all(isinstance(d, (int, np.integer)) for shape in shapes + [(n,)] for d in shape)
        fits = jax.tree.structure(state) == jax.tree.structure(one) and all(  # (symbolic shapes: exporting)
            len(got) == x.ndim and (not concrete or got == (n, *x.shape[1:]))
            for got, x in zip(shapes, jax.tree.leaves(one)))
        if not fits:
            got = [shape[1:] if single else shape for shape in shapes]
            needs = [x.shape[1:] if single else (n, *x.shape[1:]) for x in jax.tree.leaves(one)]
            raise ValueError(f"a state of shapes {got} does not fit {'one observation' if single else f'{n} observations'}"
                             f": it needs {needs}, as policy.initial_state({'' if single else n}) gives")
        action, state = self.agent.policy_step(params, batch, state, key, deterministic)
        if single:
            return action[0], jax.tree.map(lambda x: x[0], state)
        return action, state

    def _batch(self, obs: Any, key: Any, deterministic: bool) -> tuple[Any, bool]:
        """``(obs as a batch, whether it was one observation)``, in the env's observation dtypes (as
        training feeds them); bad shapes and a missing key raise ``ValueError``."""
        if not deterministic and key is None:
            raise ValueError("deterministic=False samples actions: pass a PRNG key (key=jax.random.key(0))")
        spec = self.observation_spec
        try:
            obs = jax.tree.map(lambda _, x: jnp.asarray(x), spec, obs)
        except ValueError:
            raise ValueError(f"obs {jax.tree.map(jnp.shape, obs)} does not have the structure of this env's "
                             f"observations {jax.tree.map(lambda s: s.shape, spec)}") from None
        shapes = [(x.shape, s.shape) for x, s in zip(jax.tree.leaves(obs), jax.tree.leaves(spec))]
        single = all(shape == want for shape, want in shapes)
        if not single and not (len({shape[:1] for shape, _ in shapes}) == 1
                               and all(len(shape) == len(want) + 1 and shape[1:] == want for shape, want in shapes)):
            got, want = jax.tree.map(jnp.shape, obs), jax.tree.map(lambda s: s.shape, spec)
            raise ValueError(f"obs of shape {got} is neither one observation {want} nor a batch [N, *{want}]")
        # Training feeds the network the env's own dtype (the Nature encoder scales a uint8 image by
        # 1/255, and only a uint8 one): act as it did.
        obs = jax.tree.map(lambda x, s: (x[None] if single else x).astype(s.dtype), obs, spec)
        return self._with_global_state(obs), single

    def _with_global_state(self, obs: Any) -> Any:
        """Rows of a policy whose network takes the global state (a centralised critic), given one of
        zeros: the actions never depend on it (:func:`rljax.agents.base.agent_views`)."""
        from rljax.env import GLOBAL_STATE, num_agents

        if not num_agents(self.env) or not isinstance(obs, dict):
            return obs
        row = self._row_spec()
        if GLOBAL_STATE not in row:
            return obs
        n = jax.tree.leaves(obs)[0].shape[0]
        return {**obs, GLOBAL_STATE: jnp.zeros((n, *row[GLOBAL_STATE].shape), row[GLOBAL_STATE].dtype)}


_APPLY, _APPLY_STEP = inspect.signature(Policy.apply), inspect.signature(Policy.apply_step)

jax.tree_util.register_dataclass(Policy, data_fields=["params", "env_params"],
                                 meta_fields=["agent", "config", "env", "step", "run_dir", "member"])


def load(run_dir: str | pathlib.Path, step: int | None = None, *, member: str | int | None = None,
         env: Any = None, host_envs: HostEnvFactory | None = None) -> Policy:
    """The policy saved in a run directory's checkpoint, without compiling or touching the run.

    Args:
        run_dir: a run directory (``rljax train``/``rljax.train(options=rljax.RunOptions(run_dir=...))``/a sweep's).
        step: the checkpoint step (env steps at the save, as in ``checkpoints/<step>``); None:
            the newest.
        member: for a sweep's run directory, the member's name (``members/<name>``) or index;
            must be None for a single run.
        env: the env object, for a run of an env that cannot be rebuilt by name (recorded as
            ``python-object:...``: an object passed to ``rljax.train(config, env)``); None makes
            ``config.env`` (with ``config.env_kwargs``).
        host_envs: for a host-env run, the :data:`HostEnvFactory` that makes the envs it is evaluated
            and drawn on; None: :func:`rljax.host.sources.make_host_env`. Ignored for JAX envs.

    Raises:
        FileNotFoundError: no such directory, or no checkpoint in it.
        ValueError: a step or member that does not exist (the message lists those that do), or a
            checkpoint of another algorithm or layout.
        rljax.store.checkpoint.CheckpointIntegrityError: the step's data does not match its checksums.
    """
    from rljax.core import registry as env_registry
    from rljax.agents import algorithms, build_agent
    from rljax.store.checkpoint import Checkpointer
    from rljax.core.config import config_from_dict
    from rljax.store.rundir import checkpoint_steps

    run_dir = pathlib.Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir} is not a directory: pass the run directory of a training run")
    steps = checkpoint_steps(run_dir)
    if not steps:
        raise _no_checkpoint(run_dir)
    newest = step is None
    if newest:
        step = steps[-1]
    elif step not in steps:
        raise ValueError(f"{run_dir} has no checkpoint step {step!r}; it has {steps}")
    failed = None
    for attempt in range(10):
        try:
            checkpointer = Checkpointer(run_dir, read_only=True)
            try:
                host_leaves, meta = checkpointer.read(int(step))
            finally:
                checkpointer.manager.close()
            break
        except Exception as err:  # noqa: BLE001 - a live run may remove the step while it is read
            time.sleep(0.05)
            steps = checkpoint_steps(run_dir)
            if step in steps and (failed == step or attempt == 9):  # read twice: the checkpoint is damaged
                if isinstance(err, KeyError):
                    raise ValueError(f"checkpoint {step} in {run_dir} cannot be read: {err}") from err
                raise
            if step in steps:  # perhaps being removed just now: read it once more
                failed = step
                continue
            if not newest or not steps or attempt == 9:
                raise FileNotFoundError(f"checkpoint {step} in {run_dir} was removed while it was read (a live "
                                        f"run keeps only its newest checkpoints); it now has {steps}") from err
            step = steps[-1]
    if "host" in meta:  # the actor-learner path's checkpoint: the learner's params and optimiser state
        return _load_host(run_dir, int(step), meta, host_leaves, member, host_envs)
    by_class = {entry.config_cls.__name__: entry.config_cls for entry in algorithms().values()}
    if meta.get("algorithm") not in by_class:
        raise ValueError(f"checkpoint {step} in {run_dir} was written by algorithm {meta.get('algorithm')!r}, "
                         f"which is not registered (known: {sorted(by_class)})")
    config_cls = by_class[meta["algorithm"]]
    config = config_from_dict(config_cls, meta["config"])
    index, member_name, config = _member(run_dir, member, config, config_cls, len(meta.get("rows") or []))
    config, env, env_params = env_registry.resolve_run(config, env, None, record=False, run_dir=run_dir)
    agent = build_agent(config, env, env_params, None)
    state = _state_of(agent, config, env_params, host_leaves, index, f"checkpoint {step} in {run_dir}")
    params = jax.tree.map(jnp.asarray, agent.policy_params(state))
    if index is not None:  # PBT changes a member's hyperparams during the run: the state holds the current ones
        config = _with_state_hyperparams(config, state)
    return Policy(agent=agent, params=params, config=config, env=env,
                  env_params=jax.tree.map(jnp.asarray, state.env_params), step=int(step), run_dir=str(run_dir),
                  member=member_name)


def _load_host(run_dir: pathlib.Path, step: int, meta: dict[str, Any], host_leaves: list[np.ndarray],
               member: str | int | None, host_envs: HostEnvFactory | None) -> Policy:
    """The policy of a host run's checkpoint (``{"params", "opt_state"}`` of the learner, the envs'
    spaces in its meta under ``spaces``, as :mod:`rljax.actorlearner.run` saves them)."""
    from rljax.agents import algorithms, build_agent
    from rljax.core.config import config_from_dict

    where = f"checkpoint {step} in {run_dir}"
    if member is not None:
        raise ValueError(f"{run_dir} is a single run, not a sweep: leave out --member {member} (member= in Python)")
    by_class = {entry.config_cls.__name__: entry.config_cls for entry in algorithms().values()}
    if meta.get("algorithm") not in by_class:
        raise ValueError(f"{where} was written by algorithm {meta.get('algorithm')!r}, which is not registered "
                         f"(known: {sorted(by_class)})")
    config = config_from_dict(by_class[meta["algorithm"]], meta["config"])
    if host_envs is None:
        from rljax.host.sources import make_host_env as host_envs
    spaces = meta.get("spaces")
    if isinstance(spaces, dict) and {"observation_space", "action_space"} <= set(spaces):
        observation_space, action_space = (space_from_json(spaces[k]) for k in ("observation_space", "action_space"))
    else:  # a checkpoint from before they were saved: ask one env
        one = host_envs(config.env, 1)
        try:
            observation_space, action_space = one.spec.observation_space, one.spec.action_space
        finally:
            one.close()
    env = HostEnvSpaces(config.env, observation_space, action_space, host_envs)
    agent = build_agent(config, env, None, None)
    # The learner's "params": an on-policy agent's network params, an off-policy agent's whole learner.
    if agent.offpolicy is None:
        abstract = jax.eval_shape(lambda: agent.init(jax.random.key(0), 0, 1, config.hyperparams(), None)).params
    else:  # the learner, and with normalize_obs the observation statistics after it
        obs = env.reset(None)[0][None]
        abstract = jax.eval_shape(lambda: agent.offpolicy.hooks.init_learner(jax.random.key(0), obs,
                                                                             config.hyperparams()))
        if config.normalize_obs:
            from rljax.core.wrappers import RunningMeanStd

            abstract = (abstract, jax.eval_shape(lambda: RunningMeanStd.init(tuple(obs.shape[1:]))))
    t_leaves, treedef = jax.tree.flatten(abstract)
    # The saved tree is {"opt_state": ..., "params": ...} in key order: the params are its last leaves.
    if len(host_leaves) < len(t_leaves):
        raise ValueError(f"{where} has {len(host_leaves)} arrays, fewer than the {len(t_leaves)} of a "
                         f"{type(config).__name__} network for {config.env}")
    saved = host_leaves[len(host_leaves) - len(t_leaves):]
    for h, t in zip(saved, t_leaves):
        if h.shape != t.shape or h.dtype != t.dtype:
            raise ValueError(f"{where}: an array {h.shape} {h.dtype} does not fit the network's {t.shape} {t.dtype}: "
                             f"it was written by another config or rljax version")
    learned = jax.tree.unflatten(treedef, [jnp.asarray(h) for h in saved])
    if agent.offpolicy is None:
        params = PolicyParams(learned, None, jnp.float32(0.0))
    else:  # what acting takes of the learner, its observation statistics, the exploration of its stochastic policy
        learned, stats = learned if config.normalize_obs else (learned, None)
        acting, exploration = agent.offpolicy.hooks.policy_params(learned, config.hyperparams())
        params = PolicyParams(acting, stats, jnp.float32(exploration))
    return Policy(agent=agent, params=params, config=config, env=env, env_params=None, step=step,
                  run_dir=str(run_dir))


def space_from_json(data: dict[str, Any]) -> Any:
    """A space saved as JSON: ``{"kind": "discrete", "n", "dtype"}`` or ``{"kind": "box", "shape",
    "dtype", "low", "high"}``, each bound a number (the same everywhere) or a nested list of the
    shape, infinities as ``"inf"``/``"-inf"`` (what :mod:`rljax.actorlearner.run` saves).

    Raises:
        ValueError: not such a space, naming what came.
    """
    from rljax.env import Box, Discrete

    try:
        if data["kind"] == "discrete":
            return Discrete(int(data["n"]), dtype=np.dtype(data["dtype"]))
        if data["kind"] == "box":
            def bound(x: Any) -> np.ndarray:
                return np.vectorize(float, otypes=[np.float64])(np.asarray(x, object))
            return Box(bound(data["low"]), bound(data["high"]), tuple(data["shape"]), dtype=np.dtype(data["dtype"]))
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"a saved space {data!r} cannot be read: {err}") from None
    raise ValueError(f"a saved space of kind {data.get('kind')!r}; known kinds: 'box', 'discrete'")


def _no_checkpoint(run_dir: pathlib.Path) -> FileNotFoundError:
    """The error for a run directory without a checkpoint: a live run that has not saved yet (still
    compiling, or before its first save) is told apart from one that never saves."""
    from rljax.store.runlock import describe_holder

    holder = describe_holder(run_dir)
    if holder is not None:
        return FileNotFoundError(f"{run_dir} has no checkpoint yet: its run is {holder} and saves its first "
                                 f"checkpoint after a chunk (--checkpoint-every / --checkpoint-interval) or at its "
                                 f"end; try again then")
    return FileNotFoundError(f"{run_dir} holds no checkpoint: a run saves one every --checkpoint-every chunks or "
                             f"--checkpoint-interval seconds (60), after its last chunk and when it is stopped, so one "
                             f"killed before its first save has none (`rljax status {run_dir}` says how it ended); "
                             f"was it run with checkpoints=False?")


def _member(run_dir: pathlib.Path, member: str | int | None, config: Any, config_cls: Any, population: int = 1
            ) -> tuple[int | None, str | None, Any]:
    """``(index in the population, name, config)`` of the member to load: ``(None, None, config)``
    for a single run. ``population``: how many members' rows the checkpoint's meta holds."""
    from rljax.core.config import config_from_dict
    from rljax.store.rundir import RunDirError, read_json

    if not (run_dir / "sweep.json").exists():
        if population > 1:
            raise ValueError(f"{run_dir} holds a sweep's checkpoint ({population} members) but its sweep.json, "
                             f"which names the members, is missing: restore {run_dir / 'sweep.json'}")
        if member is not None:
            raise ValueError(f"{run_dir} is a single run, not a sweep: leave out --member {member} (member= in Python)")
        return None, None, config
    try:
        names = [m["name"] for m in read_json(run_dir / "sweep.json", "the sweep's members")["members"]]
    except (RunDirError, KeyError, TypeError) as err:
        raise ValueError(f"cannot read the members of the sweep in {run_dir}: {err}") from None
    if member is None:
        raise ValueError(f"{run_dir} is a sweep of {len(names)} members: choose one by name or index with --member "
                         f"(member= in Python), e.g. --member {names[0]}; names: {', '.join(names)}")
    if isinstance(member, (int, np.integer)) and not isinstance(member, bool):
        if not 0 <= member < len(names):
            raise ValueError(f"member index {member} is out of range: the sweep in {run_dir} has {len(names)} members "
                             f"(indices 0 to {len(names) - 1})")
        index = int(member)
    elif member in names:
        index = names.index(member)
    else:
        raise ValueError(f"the sweep in {run_dir} has no member {member!r}; names: {', '.join(names)}")
    try:
        config = config_from_dict(config_cls, read_json(run_dir / "members" / names[index] / "config.json"))
    except RunDirError:
        pass  # the structural fields are the sweep's; the member's values live in the state
    return index, names[index], config


def _with_state_hyperparams(config: Any, state: Any) -> Any:
    """``config`` with each traced hyperparameter the state holds a different value of (beyond float32
    rounding) replaced by the state's, as PBT's exploit/explore leaves them."""
    hyperparams = getattr(state, "hyperparams", None)
    if hyperparams is None or not dataclasses.is_dataclass(hyperparams):
        return config
    changed = {}
    for field in dataclasses.fields(hyperparams):
        old, new = getattr(config, field.name, None), np.asarray(getattr(hyperparams, field.name))
        if isinstance(old, (int, float)) and not isinstance(old, bool) and new.size == 1 \
                and np.float32(old) != new.astype(np.float32):
            changed[field.name] = type(old)(new.item())
    return dataclasses.replace(config, **changed) if changed else config


def _state_of(agent: Agent, config: Any, env_params: Any, host_leaves: list[np.ndarray], index: int | None,
              where: str) -> Any:
    """One device's (or member's) train state from a checkpoint's host leaves, as numpy leaves:
    the template is traced abstractly (``jax.eval_shape``), so nothing is compiled."""
    abstract = jax.eval_shape(lambda: agent.init(jax.random.key(0), 0, 1, config.hyperparams(), env_params))
    t_leaves, treedef = jax.tree.flatten(abstract)
    if len(t_leaves) != len(host_leaves):
        raise ValueError(f"{where} has {len(host_leaves)} arrays but a {type(config).__name__} train state has "
                         f"{len(t_leaves)}: it was written by another algorithm, config or rljax version")
    leaves = []
    for h, t in zip(host_leaves, t_leaves):
        is_key = jax.dtypes.issubdtype(t.dtype, jax.dtypes.prng_key)
        shape = tuple(jax.eval_shape(jax.random.key_data, t).shape if is_key else t.shape)
        extra = h.ndim - len(shape)
        if extra == 1:  # a data-parallel run's [num_devices] axis, or a sweep's [P]
            h = h[0 if index is None else index]
        elif extra != 0 or (index is not None and extra == 0):
            raise ValueError(f"{where}: an array of shape {h.shape} does not fit the train state's {shape}")
        if not is_key and (h.shape != shape or h.dtype != t.dtype):
            raise ValueError(f"{where}: an array {h.shape} {h.dtype} does not fit the train state's "
                             f"{shape} {t.dtype}")
        leaves.append(jax.random.wrap_key_data(h) if is_key else h)
    return jax.tree.unflatten(treedef, leaves)
