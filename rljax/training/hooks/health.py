"""A run's health at every chunk boundary: params in sync across devices, losses and state finite.

The :class:`Health` hook reads each chunk's rows. A data-parallel run whose params differ across
devices is no longer one run (:class:`DesyncError`). A run whose loss or train state became NaN/inf
is stopped (:class:`NonFiniteError`) or, with ``on_nonfinite="rollback"``, rolled back: the newest
checkpoint (or the initial state) is restored with every learning rate scaled by
``rollback_lr_factor``, the rows after it are superseded and the incident is recorded. An env that
returned NaN/inf observations or rewards for finite actions (``env_nonfinite``) stops the run at once,
naming the env: no rollback cures it. In a sweep each member is its own run: a diverged member is
reported and the others go on.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import jax.numpy as jnp

from rljax.training.hooks.base import Hook, Row, Run

__all__ = ["DesyncError", "NonFiniteError", "Health", "env_fault", "nonfinite_reason", "scale_learning_rates"]


class DesyncError(RuntimeError):
    """Params differ across devices: the data-parallel run is no longer one run."""


class NonFiniteError(FloatingPointError):
    """The run diverged (a NaN/inf loss or train state) and ``on_nonfinite`` could not recover it."""


def env_fault(row: dict[str, Any], env: str) -> str | None:
    """What in ``row`` shows the env at fault (it returned NaN/inf observations or rewards for finite
    actions, ``env_nonfinite > 0``), or None. No rollback or learning rate cures that."""
    count = row.get("env_nonfinite") or 0
    if not count:
        return None
    return (f"the env {env} returned {count} non-finite observation or reward values for finite actions; the losses "
            f"and state follow from them, so a rollback cannot help: fix the env")


def nonfinite_reason(row: dict[str, Any]) -> str | None:
    """What in ``row`` shows a diverged run (a non-finite ``*_loss``, a train state holding
    non-finite values, ``nonfinite_state > 0``, or an env that returned non-finite values), or None."""
    bad = [f"{k} is {v}" for k, v in row.items() if k.endswith("_loss") and (v is None or not math.isfinite(v))]
    if row.get("env_nonfinite"):
        bad.insert(0, f"the env returned {row['env_nonfinite']} non-finite observation or reward values")
    count = row.get("nonfinite_state", 0.0)
    if count is None or not math.isfinite(count) or count > 0:
        bad.append(f"the train state holds {count} non-finite values")
    return "; ".join(bad) or None


def check_desync(row: dict[str, Any], chunk_index: int) -> None:
    """Raises :class:`DesyncError` when the row's ``param_desync`` (the spread of a params checksum
    across devices) is not exactly 0."""
    desync = row.get("param_desync", 0.0)
    if desync != 0.0:
        raise DesyncError(
            f"params differ across devices after chunk {chunk_index} (checksum spread {desync!r}); "
            f"a data-parallel update must keep them identical: check that every gradient and "
            f"statistic is averaged over the device axis")


def check_health(row: dict[str, Any], chunk_index: int) -> None:
    """Raises :class:`DesyncError` or :class:`NonFiniteError` when ``row`` shows either."""
    check_desync(row, chunk_index)
    reason = nonfinite_reason(row)
    if reason:
        raise NonFiniteError(f"{reason} after chunk {chunk_index} (env step {row['env_steps']})")


def scale_learning_rates(state: Any, factor: float) -> Any:
    """``state`` with every traced hyperparameter named ``*learning_rate*`` multiplied by ``factor``."""
    hyperparams = state.hyperparams
    names = [n for n in hyperparams.__dataclass_fields__ if "learning_rate" in n]
    return state.replace(hyperparams=hyperparams.replace(
        **{n: getattr(hyperparams, n) * jnp.float32(factor) for n in names}))


class Health(Hook):
    """The boundary hook that checks every chunk's rows and meets divergence.

    Args:
        config: the run's config (``on_nonfinite``, ``max_rollbacks``, ``rollback_lr_factor``).
        isolated: the members are independent runs (a sweep): a diverged member is warned about
            and left to its result; otherwise a divergence stops or rolls back the run.
    """

    def __init__(self, config: Any, isolated: bool):
        self.config = config
        self.isolated = isolated
        self.diverged: set[int] = set()

    def record(self, run: Run, chunk_index: int, rows: list[Row]) -> None:
        """Before the rows are logged: a desync is fatal; a single run's rows carry its rollbacks."""
        if self.isolated:
            return
        check_desync(rows[0], chunk_index)
        rows[0]["rollbacks"] = run.rollbacks

    def react(self, run: Run, chunk_index: int, rows: list[Row]) -> int | None:
        """After logging: the chunk to continue from when the run was rolled back, else None."""
        if self.isolated:
            for i, row in enumerate(rows):
                reason = nonfinite_reason(row)
                if reason and i not in self.diverged:
                    self.diverged.add(i)
                    warnings.warn(f"sweep member {run.program.names[i]} diverged after chunk {chunk_index}: "
                                  f"{reason}; the others go on", stacklevel=5)
            return None
        reason = nonfinite_reason(rows[0])
        return None if reason is None else self.roll_back(run, chunk_index, rows[0], reason)

    def roll_back(self, run: Run, chunk_index: int, row: Row, reason: str) -> int:
        """Meets a diverged chunk as ``config.on_nonfinite`` says; returns the chunk to run next.

        Raises:
            NonFiniteError: ``on_nonfinite`` is ``"stop"``, or ``max_rollbacks`` are used up.
        """
        config = self.config
        mode, limit = config.on_nonfinite, config.max_rollbacks
        where = f"after chunk {chunk_index} (env step {row['env_steps']:,})"
        incident = {"kind": "nonfinite", "chunk": chunk_index, "env_steps": row["env_steps"], "reason": reason}
        checkpointer = run.checkpointer
        fault = env_fault(row, config.env)  # a rollback would replay the same env: stop at once
        if fault is not None or mode != "rollback" or run.rollbacks >= limit:
            run.tracking.record_incident({**incident, "action": "stop"})
            newest = f" The newest checkpoint ({checkpointer.steps()[-1]:,} env steps) is intact." if (
                checkpointer is not None and checkpointer.steps()) else ""
            if fault is not None:
                raise NonFiniteError(f"{fault} ({where}).{newest}")
            if mode == "rollback":
                raise NonFiniteError(f"{reason} {where}, and {run.rollbacks} rollback(s) (max_rollbacks={limit}) "
                                     f"did not help: giving up.{newest} Lower the learning rate or look for "
                                     f"non-finite observations or rewards in the env")
            raise NonFiniteError(f"{reason} {where}: the run diverged.{newest} on_nonfinite='rollback' restores the "
                                 f"last good checkpoint with a lower learning rate instead of stopping")
        run.discard_ahead()  # a chunk launched ahead ran on the diverged state
        run.rollbacks += 1
        run.timings["rollbacks"] += 1
        factor = config.rollback_lr_factor
        if checkpointer is not None:
            checkpointer.wait()
        if checkpointer is not None and checkpointer.steps():
            state, meta, _ = checkpointer.restore(run.state)
            back_chunk, back_steps = int(meta["chunk_index"]), int(meta["env_steps"])
            recovered, lines = meta.get("rows") or [], meta.get("lines") or []
            run.state = scale_learning_rates(state, factor ** (run.rollbacks - int(meta.get("rollbacks", 0))))
        else:
            back_chunk, back_steps, recovered, lines = -1, 0, [], []
            run.state = scale_learning_rates(run.program.init_state(run.plan.num_updates), factor ** run.rollbacks)
        run.tracking.rewind(back_steps, recovered[:1], lines[:1])
        run.tracking.record_incident({**incident, "action": "rollback", "rollback": run.rollbacks,
                                      "to_env_steps": back_steps, "lr_factor": factor ** run.rollbacks})
        run.rows[:] = [r for r in run.rows if r["env_steps"] <= back_steps]
        warnings.warn(f"{reason} {where}: rolled back to env step {back_steps:,} with the learning rate scaled by "
                      f"{factor ** run.rollbacks:g} (rollback {run.rollbacks} of at most {limit})", stacklevel=5)
        return back_chunk + 1
