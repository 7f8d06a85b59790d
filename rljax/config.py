"""Config conventions shared by every algorithm.

Each algorithm has one frozen dataclass. Every field is declared with :func:`field`, which records a
help line (shown by ``--help`` and in the docs) and whether the field is **sweepable**: a traced
hyperparameter that lives in the train state, so one compiled program can vmap over its values.
Everything else is **structural** (shapes, loop lengths, network sizes): changing it changes the
program. :class:`RunConfig` holds the fields every algorithm shares (env, seed, budget, devices).
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["field", "make_hyperparams", "sweepable_fields", "RunConfig", "BACKENDS"]

BACKENDS = ("shard_map", "pmap")
NONFINITE_ACTIONS = ("stop", "rollback")


def field(default: Any, help: str, *, sweepable: bool = False) -> Any:  # noqa: A002 - mirrors argparse
    """A dataclass field with a help line; ``sweepable=True`` marks a traced hyperparameter."""
    return dataclasses.field(default=default, metadata={"help": help, "sweepable": sweepable})


def sweepable_fields(config_cls: Any) -> tuple[str, ...]:
    """Names of the fields a sweep may vary (traced hyperparameters), in declaration order."""
    return tuple(f.name for f in dataclasses.fields(config_cls) if f.metadata.get("sweepable"))


def make_hyperparams(config: Any, hyperparams_cls: Any) -> Any:
    """The traced hyperparameters of ``config``: one float32 scalar per sweepable field.

    ``hyperparams_cls`` (a ``flax.struct.PyTreeNode``) must have exactly the config's sweepable
    fields, so the two declarations cannot drift apart.
    """
    import jax.numpy as jnp

    names = tuple(hyperparams_cls.__dataclass_fields__)
    if set(names) != set(sweepable_fields(type(config))):
        raise TypeError(f"{hyperparams_cls.__name__} fields {sorted(names)} differ from the sweepable fields of "
                        f"{type(config).__name__} {sorted(sweepable_fields(type(config)))}")
    return hyperparams_cls(**{k: jnp.float32(getattr(config, k)) for k in names})


def _require(cond: bool, message: str) -> None:
    if not cond:
        raise ValueError(message)


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Fields every algorithm's config starts with: what to run, for how long, on what."""

    env: str = field("CartPole-v1", "environment name: a registered rljax env or 'gymnax/<id>'")
    seed: int = field(0, "PRNG seed; every key in the run is split from jax.random.key(seed)")
    total_timesteps: int = field(500_000, "environment steps to train for (rounded to whole updates)")
    num_envs: int = field(4, "parallel environments, over all devices")
    num_devices: int = field(1, "devices for the data-parallel learner; the env batch is split over them")
    backend: str = field("shard_map", "multi-device backend: 'shard_map' (jit + shard_map) or 'pmap'")
    updates_per_chunk: int = field(0, "updates compiled into one chunk between host-loop visits "
                                      "(0: about 1/10 of the run, at most 200)")
    on_nonfinite: str = field("stop", "when a loss or the train state becomes NaN/inf: 'stop' (exit, the last "
                                      "checkpoint intact) or 'rollback' (restore the last checkpoint with a "
                                      "lower learning rate)")
    max_rollbacks: int = field(3, "with on_nonfinite='rollback': rollbacks before giving up")
    rollback_lr_factor: float = field(0.5, "with on_nonfinite='rollback': each rollback multiplies every "
                                           "learning rate by this factor")

    def validate_run(self) -> None:
        """Checks the shared fields; raises ``ValueError`` naming the bad value and what is valid."""
        for name in ("total_timesteps", "num_envs", "num_devices"):
            value = getattr(self, name)
            _require(isinstance(value, int) and not isinstance(value, bool) and value > 0,
                     f"{name} must be a positive integer, got {value!r}")
        _require(self.num_envs % self.num_devices == 0,
                 f"num_envs={self.num_envs} is not divisible by num_devices={self.num_devices}; "
                 f"use a multiple of {self.num_devices}")
        _require(self.backend in BACKENDS, f"backend={self.backend!r} is not one of {BACKENDS}")
        _require(isinstance(self.updates_per_chunk, int) and self.updates_per_chunk >= 0,
                 f"updates_per_chunk must be >= 0 (0 = automatic), got {self.updates_per_chunk!r}")
        _require(isinstance(self.seed, int) and not isinstance(self.seed, bool),
                 f"seed must be an integer, got {self.seed!r}")
        _require(self.on_nonfinite in NONFINITE_ACTIONS,
                 f"on_nonfinite={self.on_nonfinite!r} is not one of {NONFINITE_ACTIONS}")
        _require(isinstance(self.max_rollbacks, int) and not isinstance(self.max_rollbacks, bool)
                 and self.max_rollbacks >= 0, f"max_rollbacks must be an integer >= 0, got {self.max_rollbacks!r}")
        _require(isinstance(self.rollback_lr_factor, (int, float)) and not isinstance(self.rollback_lr_factor, bool)
                 and 0 < self.rollback_lr_factor <= 1,
                 f"rollback_lr_factor must be a number in (0, 1], got {self.rollback_lr_factor!r}")
