"""rljax: JAX-native, on-accelerator reinforcement-learning training.

The public API (everything else is reachable through its module, and may change)::

    import rljax

    config = rljax.PPOConfig(env="CartPole-v1", total_timesteps=500_000)
    result = rljax.train(config, options=rljax.RunOptions(run_dir="runs/cp"))  # -> rljax.TrainResult
    policy = rljax.load("runs/cp")                         # -> rljax.Policy; policy.act(obs)
    env, env_params = rljax.make("CartPole-v1")            # the env registry

* Training: :func:`train` (how the run is kept and watched: :class:`RunOptions`), :class:`TrainResult`;
  sweeps and PBT in one program: :func:`run_sweep`, :class:`SweepSpec`, :class:`PBTSpec`.
* Algorithms (one module each in :mod:`rljax.agents`, each config a frozen dataclass whose
  sweepable fields are traced hyperparameters): :class:`PPOConfig`, :class:`DQNConfig`,
  :class:`SACConfig`, :class:`TD3Config`, :class:`PQNConfig`; the registry: :func:`register`
  (add an algorithm), :func:`algorithms`.
* A trained policy: :func:`load` (a checkpoint's :class:`Policy`, its ``act`` on raw
  observations), :mod:`rljax.policy.evaluate` (``evaluate(policy, episodes)``: vectorised episodes on the
  device; evaluation during training with ``eval_interval``); ``rljax eval`` and
  ``rljax export`` on the command line.
* Environments: :func:`make`, :func:`register_env`, :func:`registered_envs`; the contract an env
  meets: :mod:`rljax.env`; wrappers: :mod:`rljax.core.wrappers`.
* Numerics: :mod:`rljax.core.returns` (GAE, V-trace, n-step), :mod:`rljax.core.distributions`, :mod:`rljax.core.buffers`.
* Watching a run: the ``metrics.jsonl`` columns (``docs/metrics.md``), per-chunk host time and
  device memory (:mod:`rljax.training.hooks.observe`), stall reports (:mod:`rljax.training.hooks.watchdog`), ``rljax inspect``.
* Errors a run can end with: :class:`NonFiniteError`, :class:`DesyncError`,
  :class:`ConfigMismatchError`.

Names are loaded on first use, so ``import rljax`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> (module, attribute); a module itself when the attribute is None.
_API: dict[str, tuple[str, str | None]] = {
    "train": ("rljax.training.loop", "train"),
    "RunOptions": ("rljax.training.options", "RunOptions"),
    "TrainResult": ("rljax.training.loop", "TrainResult"),
    "load": ("rljax.policy.trained", "load"),
    "Policy": ("rljax.policy.trained", "Policy"),
    "evaluate": ("rljax.policy.evaluate", None),
    "run_sweep": ("rljax.training.sweep", "run_sweep"),
    "SweepSpec": ("rljax.training.sweep", "SweepSpec"),
    "PBTSpec": ("rljax.training.hooks.pbt", "PBTSpec"),
    "PPOConfig": ("rljax.agents.ppo", "PPOConfig"),
    "DQNConfig": ("rljax.agents.dqn", "DQNConfig"),
    "SACConfig": ("rljax.agents.sac", "SACConfig"),
    "TD3Config": ("rljax.agents.td3", "TD3Config"),
    "PQNConfig": ("rljax.agents.pqn", "PQNConfig"),
    "register": ("rljax.agents", "register"),
    "algorithms": ("rljax.agents", "algorithms"),
    "make": ("rljax.core.registry", "make"),
    "register_env": ("rljax.core.registry", "register"),
    "registered_envs": ("rljax.core.registry", "registered"),
    "NonFiniteError": ("rljax.training.hooks.health", "NonFiniteError"),
    "DesyncError": ("rljax.training.hooks.health", "DesyncError"),
    "ConfigMismatchError": ("rljax.store.rundir", "ConfigMismatchError"),
    "env": ("rljax.env", None),
    "wrappers": ("rljax.core.wrappers", None),
    "returns": ("rljax.core.returns", None),
    "distributions": ("rljax.core.distributions", None),
    "buffers": ("rljax.core.buffers", None),
}

__all__ = sorted(_API)


def __getattr__(name: str) -> Any:
    entry = _API.get(name)
    if entry is None:
        raise AttributeError(f"module 'rljax' has no attribute {name!r}")
    module = importlib.import_module(entry[0])
    value = module if entry[1] is None else getattr(module, entry[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))
