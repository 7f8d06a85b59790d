"""Population-based training (Jaderberg et al. 2017) for sweeps: exploit and explore on the device.

Every ``interval`` chunks, the members are ranked by the mean episode return of the chunk just
finished. Each member in the bottom ``fraction`` becomes a copy of a random member of the top
``fraction`` (**exploit**: params, optimiser state, replay buffer, env states, hyperparameters:
the whole train state except its own PRNG key and env params), and each copied hyperparameter
named in the spec is multiplied by a random factor from ``factors`` and clipped to its range
(**explore**)::

    python -m experiments.ppo_cartpole sweep --sample learning_rate=log:1e-4:3e-3 --num-samples 8 \\
        --pbt-interval 2 --pbt learning_rate=1e-5:1e-2 --run-dir runs/pbt1

The step is one jitted function of the population's train state, which stays on the device(s);
only the ``[P]`` scores come from the host (they are the chunk's logged returns). Its randomness is
``fold_in(key(seed), chunk)``, so a resumed sweep replays it exactly. Each step appends a line to
``RUN_DIR/pbt.jsonl``: which member copied which, and the new hyperparameters.

Hyperparameters that something in the state has already been built from are brought in line with
their new values here: a prioritised replay buffer (a state field ``buffer``) stores its
priorities raised to ``priority_alpha``, so when PBT explores ``priority_alpha`` every member's
buffer is rebuilt for its (possibly new) value (:func:`rljax.buffers.set_alpha`). Everything else
reads its hyperparameters from ``hyperparams`` at each update.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rljax import buffers
from rljax.config import sweepable_fields

__all__ = ["PBT", "PBTSpec", "parse_pbt", "validate_pbt", "exploit_explore", "scores_from_rows"]


@dataclasses.dataclass(frozen=True)
class PBTSpec:
    """How a sweep's population evolves.

    Attributes:
        interval: exploit/explore after every this many chunks (never after the last one).
        fields: hyperparameter -> ``(low, high)``: the values explore may reach. Perturbation is
            multiplicative, so a value of 0 stays 0.
        fraction: share of the population replaced each time (bottom) and copied from (top).
        factors: the perturbation factors, drawn uniformly per member and field.
        seed: seed of the exploit/explore randomness.
    """

    interval: int
    fields: Mapping[str, tuple[float, float]]
    fraction: float = 0.25
    factors: tuple[float, ...] = (0.8, 1.2)
    seed: int = 0


def parse_pbt(specs: Sequence[str]) -> dict[str, tuple[float, float]]:
    """Parses ``FIELD=LOW:HIGH`` items (the ``--pbt`` flag)."""
    out: dict[str, tuple[float, float]] = {}
    for item in specs:
        name, sep, rng = item.partition("=")
        parts = rng.split(":")
        try:
            low, high = (float(p) for p in parts)
        except ValueError:
            raise ValueError(f"--pbt {item!r}: expected FIELD=LOW:HIGH, e.g. learning_rate=1e-5:1e-2") from None
        if not sep or not name:
            raise ValueError(f"--pbt {item!r}: expected FIELD=LOW:HIGH, e.g. learning_rate=1e-5:1e-2")
        out[name.strip()] = (low, high)
    return out


def validate_pbt(spec: PBTSpec, config: Any, population_size: int) -> None:
    """Raises ``ValueError`` naming what is wrong with ``spec`` for this config and population."""
    if not isinstance(spec.interval, int) or spec.interval < 1:
        raise ValueError(f"PBT interval must be a positive number of chunks, got {spec.interval!r}")
    if not spec.fields:
        raise ValueError("PBT needs at least one hyperparameter to explore (--pbt FIELD=LOW:HIGH)")
    allowed = sweepable_fields(type(config))
    for name, (low, high) in spec.fields.items():
        if name not in allowed:
            raise ValueError(f"PBT field {name!r} is not a hyperparameter of {type(config).__name__}; "
                             f"PBT can explore: {', '.join(allowed)}")
        if not (math.isfinite(low) and math.isfinite(high) and 0 < low < high):
            raise ValueError(f"PBT range of {name} must satisfy 0 < low < high, got ({low}, {high})")
        # Explore clips to [low, high]: both ends must be valid values of the field (its valid set
        # is an interval, so everything in between is too).
        for bound in (low, high):
            try:
                dataclasses.replace(config, **{name: bound})
            except ValueError as err:
                raise ValueError(f"PBT range of {name} ({low}, {high}) reaches an invalid value: {err}") from None
    if not 0 < spec.fraction <= 0.5:
        raise ValueError(f"PBT fraction must be in (0, 0.5], got {spec.fraction!r}")
    if not spec.factors or any(not (f > 0 and math.isfinite(f)) for f in spec.factors):
        raise ValueError(f"PBT factors must be positive numbers, got {spec.factors!r}")
    if population_size < 2 or int(population_size * spec.fraction) < 1:
        raise ValueError(f"PBT with fraction {spec.fraction} needs a population where that fraction is at least one "
                         f"member; this sweep has {population_size}")


def scores_from_rows(rows: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """Each member's score, ``[P]``: its chunk's mean episode return (-inf if none finished)."""
    values = [r.get("episode_return_mean") for r in rows]
    return np.asarray([-np.inf if v is None or not math.isfinite(v) else v for v in values], np.float32)


def exploit_explore(state: Any, scores: jax.Array, chunk_index: jax.Array, spec: PBTSpec) -> tuple[Any, jax.Array]:
    """One PBT step over a population's train state (jit it; every leaf has a leading ``[P]`` axis).

    Args:
        state: the population's train state; it must have ``key``, ``hyperparams`` and ``env_params``.
        scores: ``[P]`` float32, higher is better.
        chunk_index: the chunk just finished (seeds this step's randomness).
        spec: the PBT spec.

    Returns:
        ``(state, source)``: the new state, and ``source [P]``, the member each member now copies
        (itself when unchanged).
    """
    size = scores.shape[0]
    n = max(1, int(size * spec.fraction))
    order = jnp.argsort(scores, stable=True)  # ascending: the worst first
    bottom, top = order[:n], order[size - n:]
    key = jax.random.fold_in(jax.random.key(spec.seed), chunk_index)
    k_donor, k_factor = jax.random.split(key)
    donors = top[jax.random.randint(k_donor, (n,), 0, n)]
    source = jnp.arange(size).at[bottom].set(donors)
    new = jax.tree.map(lambda x: x[source], state)
    new = new.replace(key=state.key, env_params=state.env_params)
    replaced = source != jnp.arange(size)
    factors = jnp.asarray(spec.factors, jnp.float32)
    changes = {}
    for i, (name, (low, high)) in enumerate(sorted(spec.fields.items())):
        value = getattr(new.hyperparams, name)
        factor = jax.random.choice(jax.random.fold_in(k_factor, i), factors, (size,))
        changes[name] = jnp.where(replaced, jnp.clip(value * factor, low, high), value).astype(value.dtype)
    new = new.replace(hyperparams=new.hyperparams.replace(**changes))
    buffer = getattr(new, "buffer", None)
    if "priority_alpha" in changes and isinstance(buffer, buffers.PrioritizedReplayState):
        # The sum trees hold priority ** alpha: rebuilt for each member's alpha (a no-op, bit for
        # bit, where it did not change).
        new = new.replace(buffer=jax.vmap(buffers.set_alpha)(buffer, changes["priority_alpha"]))
    return new, source


class PBT:
    """The boundary hook that evolves a sweep's population every ``spec.interval`` chunks.

    Each step (:func:`exploit_explore`) is appended to ``run_dir/pbt.jsonl``: the members' scores,
    which member copied which, and every member's new values of the evolved hyperparameters. On
    resume, the steps after the restored chunk are dropped from the log (they are redone).

    Args:
        spec: the PBT spec.
        program: the run's :class:`rljax.population.Program` (member names, placement).
        run_dir: the sweep directory, or None (no log).
        resume: the run continues from ``start_chunk``.
        start_chunk: the first chunk this process runs.
    """

    def __init__(self, spec: PBTSpec, program: Any, run_dir: Any, resume: bool, start_chunk: int):
        import functools
        import pathlib

        self.spec = spec
        self.program = program
        self.step = jax.jit(functools.partial(exploit_explore, spec=spec), donate_argnums=0)
        self.log = None if run_dir is None else pathlib.Path(run_dir) / "pbt.jsonl"
        if self.log is not None and resume and self.log.exists():
            kept = [line for line in self.log.read_text().splitlines()
                    if line.strip() and json.loads(line)["chunk"] < start_chunk]
            self.log.write_text("".join(line + "\n" for line in kept))

    def due(self, run: Any, chunk_index: int, last: bool) -> bool:
        """After every ``interval``-th chunk but the last."""
        return (chunk_index + 1) % self.spec.interval == 0 and not last

    def boundary(self, run: Any, chunk_index: int, rows: list[dict[str, Any]], last: bool) -> None:
        """Replaces ``run.state`` with the evolved population when due."""
        if not self.due(run, chunk_index, last):
            return None
        scores = scores_from_rows(rows)
        new, source = self.step(run.state, jnp.asarray(scores), jnp.int32(chunk_index))
        new = self.program.place(new)
        source = np.asarray(jax.device_get(source))
        jax.block_until_ready(new)
        run.state = new
        if self.log is not None:
            names = self.program.names
            hyperparams = jax.device_get(new.hyperparams)
            record = {"chunk": chunk_index, "env_steps": rows[0]["env_steps"],
                      "scores": [None if not np.isfinite(x) else float(x) for x in scores],
                      "copies": {names[i]: names[int(j)] for i, j in enumerate(source) if int(j) != i},
                      "hyperparams": {k: np.asarray(getattr(hyperparams, k)).tolist()
                                      for k in sorted(self.spec.fields)}}
            with open(self.log, "a") as f:
                f.write(json.dumps(record) + "\n")
        return None
