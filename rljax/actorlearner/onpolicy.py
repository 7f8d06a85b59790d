"""On-policy algorithms of the shared skeleton (PQN) on host envs: the actors act with the
algorithm's behaviour policy, the learner runs its own ``learn`` hook on each rollout.

PPO and IMPALA have their own host updates (:func:`rljax.actorlearner.learner.host_functions`:
the behaviour log-probs the actors record correct for the policy lag). Any other algorithm on
the on-policy skeleton whose learning needs nothing the behaviour policy records (its ``extras``
are empty) runs here unchanged, through its
:class:`~rljax.agents.onpolicy.OnPolicyProgram` (``Agent.onpolicy``): rollout ``k`` acts with the
:class:`~rljax.agents.onpolicy.OnPolicyContext` of ``k`` updates done (PQN's epsilon schedule), and
update ``u`` is ``hooks.learn`` on rollout ``u`` with the context of ``u`` updates (its step size,
optimiser and schedule). PQN learns from Q(lambda) targets of the rollout bootstrapped with the
learner's current Q-values, so a lagged rollout (``max_policy_lag >= 1``) is learned from as the
off-policy data Q-learning allows.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rljax.actorlearner.engine import HostAlgorithm
from rljax.host.spaces import HostEnvSpaces
from rljax.core.counters import Count
from rljax.host.base import HostSpec

__all__ = ["onpolicy_algorithm"]


def onpolicy_algorithm(config: Any, spec: HostSpec, num_updates: int) -> HostAlgorithm:
    """``config``'s on-policy skeleton algorithm as the actor-learner path runs it (see the module
    docstring): params and optimiser state, an update per rollout.

    Raises:
        TypeError: the algorithm is not on the on-policy skeleton.
        ValueError: its behaviour policy records extras that its learning reads (A2C's values,
            PPO's log-probs: PPO has its own host update), or it has an ``observe`` hook.
    """
    from rljax.agents import build_agent

    agent = build_agent(config, HostEnvSpaces.of(spec, config.env), None, None)
    program = agent.onpolicy
    name = type(config).__name__.removesuffix("Config")
    if program is None:
        raise TypeError(f"{type(config).__name__} is not built on the on-policy skeleton")
    hooks, hyper = program.hooks, config.hyperparams()
    if hooks.observe is not None:
        raise ValueError(f"{name} observes its envs through a hook of the JAX env stack; the host path cannot run it")
    total = Count.of(num_updates)
    obs = jnp.zeros((spec.num_envs, *spec.obs_shape), spec.obs_dtype)
    params_shape = jax.eval_shape(lambda: hooks.init_params(jax.random.key(0), obs[:1]))
    extras = jax.eval_shape(lambda p: hooks.behaviour(p, program.context(Count.of(0), total, hyper))(
        jax.random.key(0), obs)[1], params_shape)
    if jax.tree.leaves(extras):
        raise ValueError(f"{name}'s learning reads what its behaviour policy records ({extras}); the host path "
                         f"runs PPO and IMPALA with their own updates, and on-policy algorithms that record nothing "
                         f"(PQN)")

    def init(key: jax.Array, obs: Any) -> tuple[Any, Any]:
        params = hooks.init_params(key, obs)
        return params, hooks.optimizer(hyper, hyper.learning_rate).init(params)

    def policy(params: Any, obs: Any, key: jax.Array, step: Any, updates: Any):
        ctx = program.context(Count.from_int(updates), total, hyper)
        action, _ = hooks.behaviour(params, ctx)(jax.random.fold_in(key, step), obs)
        return action, jnp.zeros(action.shape[:1], jnp.float32)

    def update(params: Any, opt_state: Any, traj: Any, key: jax.Array, updates: Any, num_updates: Any):
        ctx = program.context(Count.from_int(updates), Count.from_int(num_updates), hyper)
        params, opt_state, metrics = hooks.learn(params, opt_state, traj._replace(extras=()), key, ctx)
        return params, opt_state, {**metrics, **ctx.values, "learning_rate": ctx.learning_rate}

    return HostAlgorithm(init=init, policy=jax.jit(policy), update=jax.jit(update, donate_argnums=(0, 1)),
                         counter=np.uint32, rollout_args=lambda k, actor: (np.uint32(k),))
