"""Population-based training (Jaderberg et al. 2017) for sweeps: exploit and explore on the device.

Every ``interval`` chunks, the members are ranked by their **score**: with evaluation during
training on (``config.eval_interval > 0``), the evaluation return of the chunk just finished
(``eval/return_mean``, the greedy policy over ``eval_episodes`` whole episodes); otherwise the
mean training episode return of that chunk (``episode_return_mean``, the stochastic policy, the
episodes that happened to end in it). Equal scores (several CartPole members at 500) are broken by
the training-return AUC so far of each member's lineage (:func:`return_auc`: the one that got
there sooner wins; a copy inherits its donor's curve), and members equal in both by a random
permutation drawn from the step's key, never by member order. With evaluation on, the PBT
interval must be a multiple of ``eval_interval``, so that every PBT step ranks by an evaluation of
the state it copies (:func:`validate_pbt`).

Each member in the bottom ``fraction`` becomes a copy of a random member of the top ``fraction``
(**exploit**: params, optimiser state, replay buffer, env states, hyperparameters: the whole train
state except its own PRNG key and env params), and each copied hyperparameter named in the spec
is multiplied by a random factor from ``factors`` and clipped to its range (**explore**)::

    python -m experiments.ppo_cartpole sweep --sample learning_rate=log:1e-4:3e-3 --num-samples 8 \\
        --pbt-interval 2 --pbt learning_rate=1e-5:1e-2 --run-dir runs/pbt1

The step is one jitted function of the population's train state, which stays on the device(s);
only the ``[P]`` scores and AUCs come from the host (the chunk's logged rows). Its randomness is
``fold_in(key(seed), chunk)``, so a resumed sweep replays it exactly (the AUCs of the chunks before
the resume are rebuilt from the members' ``chunks.jsonl`` and ``pbt.jsonl``). Each step appends a line to
``RUN_DIR/pbt.jsonl``: which score ranked the members, the scores and AUCs, which member copied
which, and the new hyperparameters.

Hyperparameters that something in the state has already been built from are brought in line with
their new values here: a prioritised replay buffer (a state field ``buffer``) stores its
priorities raised to ``priority_alpha``, so when PBT explores ``priority_alpha`` every member's
buffer is rebuilt for its (possibly new) value (:func:`rljax.core.buffers.set_alpha`). Everything else
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

from rljax.core import buffers
from rljax.runtime.distributed import fetch
from rljax.core.config import sweepable_fields
from rljax.training.hooks.base import Hook, Row, Run

__all__ = ["PBT", "PBTSpec", "parse_pbt", "validate_pbt", "check_eval_interval", "exploit_explore",
           "scores_from_rows", "return_auc", "final_and_auc", "EVAL_SCORE", "TRAIN_SCORE"]

EVAL_SCORE = "eval/return_mean"
"""The metrics column of the evaluation return: the score when evaluation during training is on."""
TRAIN_SCORE = "episode_return_mean"
"""The metrics column of the training episode return: the score otherwise."""


@dataclasses.dataclass(frozen=True)
class PBTSpec:
    """How a sweep's population evolves.

    Attributes:
        interval: exploit/explore after every this many chunks (never after the last one); with
            evaluation during training, a multiple of the config's ``eval_interval``.
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
    check_eval_interval(spec, config)


def check_eval_interval(spec: PBTSpec, config: Any) -> None:
    """Raises ``ValueError`` when evaluation is on and ``spec.interval`` is not a multiple of ``eval_interval``.

    PBT then ranks by the evaluation return, and evaluations happen after every
    ``eval_interval``-th chunk: a PBT step between two evaluations would rank members by an older
    state than the one it copies (one already changed by the previous PBT step's copies), so it
    is refused rather than done on stale scores.
    """
    every = getattr(config, "eval_interval", 0)
    if every > 0 and spec.interval % every:
        lower, upper = every * max(1, spec.interval // every), every * (spec.interval // every + 1)
        fits = f"{lower} or {upper}" if lower != upper else f"{upper}"
        raise ValueError(f"PBT interval ({spec.interval} chunks) must be a multiple of eval_interval ({every}): with "
                         f"evaluation on, PBT ranks members by their evaluation return, and a PBT step between two "
                         f"evaluations would rank them by a stale one; use --pbt-interval {fits}, or an "
                         f"--eval-interval that divides {spec.interval}")


def scores_from_rows(rows: Sequence[Mapping[str, Any]], key: str = TRAIN_SCORE) -> np.ndarray:
    """Each member's score, ``[P]``: its row's ``key`` (default: the chunk's mean episode return);
    -inf where it is missing, None or not finite (no episode finished, a diverged member)."""
    values = [r.get(key) for r in rows]
    return np.asarray([-np.inf if v is None or not math.isfinite(v) else v for v in values], np.float32)


def return_auc(rows: Sequence[Mapping[str, Any]]) -> float:
    """The area under a member's training return curve, divided by its length in env steps.

    The curve is ``episode_return_mean`` against ``env_steps`` over ``rows`` (chunks where no
    episode finished, or the return is not finite, are left out), integrated by trapezoids: the
    run's average training return, which rewards learning sooner. A single point gives its value;
    none gives NaN. Sweeps (:func:`rljax.training.sweep.summarize`) and PBT break ties in their scores
    with it.
    """
    pts = [(r["env_steps"], r[TRAIN_SCORE]) for r in rows
           if r.get(TRAIN_SCORE) is not None and math.isfinite(r[TRAIN_SCORE])]
    if len(pts) < 2:
        return float(pts[0][1]) if pts else float("nan")
    x, y = np.array([p[0] for p in pts], float), np.array([p[1] for p in pts], float)
    return float(np.sum((x[1:] - x[:-1]) * (y[1:] + y[:-1]) / 2) / (x[-1] - x[0]))


def final_and_auc(rows: Sequence[Mapping[str, Any]]) -> tuple[float, float]:
    """``(final training return, AUC)`` of a run's rows: the mean episode return over the last 10 % of
    the rows in which episodes finished (``metrics.jsonl``'s, one per ``log_every`` updates), and
    :func:`return_auc` (NaN, NaN if none). A sweep's and a halving sweep's summaries score by it."""
    returns = [r[TRAIN_SCORE] for r in rows if r.get(TRAIN_SCORE) is not None and math.isfinite(r[TRAIN_SCORE])]
    if not returns:
        return float("nan"), float("nan")
    return float(np.mean(returns[-max(1, len(returns) // 10):])), return_auc(rows)


def exploit_explore(state: Any, scores: jax.Array, chunk_index: jax.Array, spec: PBTSpec,
                    tiebreak: jax.Array | None = None) -> tuple[Any, jax.Array]:
    """One PBT step over a population's train state (jit it; every leaf has a leading ``[P]`` axis).

    Members are ranked by ``scores``, equal scores by ``tiebreak``, and members equal in both by a
    random permutation from this step's key: never by their position in the population (which
    would always favour the same members of a tie, e.g. the first grid point).

    Args:
        state: the population's train state; it must have ``key``, ``hyperparams`` and ``env_params``.
        scores: ``[P]`` float32, higher is better.
        chunk_index: the chunk just finished (seeds this step's randomness).
        spec: the PBT spec.
        tiebreak: ``[P]`` float32, higher is better, ranks members with equal scores (PBT passes
            :func:`return_auc`); None: ties go straight to the random permutation.

    Returns:
        ``(state, source)``: the new state, and ``source [P]``, the member each member now copies
        (itself when unchanged).
    """
    size = scores.shape[0]
    n = max(1, int(size * spec.fraction))
    key = jax.random.fold_in(jax.random.key(spec.seed), chunk_index)
    k_donor, k_factor = jax.random.split(key)
    shuffle = jax.random.permutation(jax.random.fold_in(key, 2), size)
    # Ascending, the worst first; lexsort's last key is the primary one.
    order = jnp.lexsort((shuffle, scores) if tiebreak is None else (shuffle, tiebreak, scores))
    bottom, top = order[:n], order[size - n:]
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


class PBT(Hook):
    """The boundary hook that evolves a sweep's population every ``spec.interval`` chunks.

    Members are ranked by the score of the chunk just finished (``eval/return_mean`` when the
    config's ``eval_interval`` is on, else ``episode_return_mean``; -inf where missing or not
    finite), ties by the :func:`return_auc` of their training return curve so far, then at random
    (:func:`exploit_explore`). The curve follows the *lineage* of a member's state: a member that
    copies another takes the donor's curve with its state (exploit copies the network whose
    learning the curve records; the replaced network's history would otherwise keep the member at
    the bottom of every later tie). On resume the curves are rebuilt from the members'
    ``chunks.jsonl`` and the copies kept in ``pbt.jsonl``.

    Each step is appended to ``run_dir/pbt.jsonl``: ``score`` (the column that ranked the
    members), ``scores``, ``tiebreak`` and ``auc``, ``copies`` (which member copied which) and every
    member's new values of the evolved hyperparameters. On resume, the steps after the restored
    chunk are dropped from the log (they are redone).

    Args:
        spec: the PBT spec.
        program: the run's :class:`rljax.training.program.Program` (member names, placement, config).
        run_dir: the sweep directory, or None (no log).
        resume: the run continues from ``start_chunk``.
        start_chunk: the first chunk this process runs.

    Raises:
        ValueError: evaluation is on and ``spec.interval`` is not a multiple of ``eval_interval``.
    """

    def __init__(self, spec: PBTSpec, program: Any, run_dir: Any, resume: bool, start_chunk: int,
                 leader: bool = True):
        import functools
        import pathlib

        from rljax.runtime.distributed import broadcast_json, process_count

        check_eval_interval(spec, program.config)
        self.spec = spec
        self.program = program
        self.score_key = EVAL_SCORE if getattr(program.config, "eval_interval", 0) > 0 else TRAIN_SCORE
        self.step = jax.jit(functools.partial(exploit_explore, spec=spec), donate_argnums=0)
        self.log = None if run_dir is None or not leader else pathlib.Path(run_dir) / "pbt.jsonl"
        kept: list[str] = []
        if self.log is not None and resume and self.log.exists():
            kept = [line for line in self.log.read_text().splitlines()
                    if line.strip() and json.loads(line)["chunk"] < start_chunk]
            self.log.write_text("".join(line + "\n" for line in kept))
        # The training-return curve of each member's lineage so far, for the AUC tie-break.
        self.curves: list[list[dict[str, Any]]] = [[] for _ in program.names]
        if self.log is not None and resume and start_chunk > 0:
            self.curves = _replay_curves(pathlib.Path(run_dir), list(program.names), [json.loads(x) for x in kept])
        if process_count() > 1:  # the leader read the run directory; every process ranks alike
            self.curves = broadcast_json(self.curves)

    def due(self, run: Run, chunk_index: int, last: bool) -> bool:
        """After every ``interval``-th chunk but the last."""
        return (chunk_index + 1) % self.spec.interval == 0 and not last

    def record(self, run: Run, chunk_index: int, rows: list[Row]) -> None:
        """Adds each member's chunk to its curve (a chunk that is run again replaces the later ones)."""
        for curve, row in zip(self.curves, rows):
            while curve and curve[-1]["env_steps"] >= row["env_steps"]:
                curve.pop()
            curve.append(_curve_point(row))

    def scores(self, chunk_index: int, rows: list[Row]) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, auc)``, each ``[P]`` float32: what ranks the members at this chunk.

        Raises:
            RuntimeError: ranking by evaluation, but this chunk's rows hold none (the evaluation
                cadence and the PBT interval disagree, which :func:`check_eval_interval` forbids).
        """
        if self.score_key not in rows[0]:
            raise RuntimeError(f"PBT step after chunk {chunk_index}: ranking by {self.score_key}, but this chunk "
                               f"was not evaluated (eval_interval={getattr(self.program.config, 'eval_interval', 0)}, "
                               f"PBT interval {self.spec.interval})")
        auc = np.asarray([return_auc(curve) for curve in self.curves], np.float32)
        return scores_from_rows(rows, self.score_key), np.where(np.isnan(auc), -np.inf, auc).astype(np.float32)

    def boundary(self, run: Run, chunk_index: int, rows: list[Row], last: bool) -> None:
        """Replaces ``run.state`` with the evolved population when due."""
        if not self.due(run, chunk_index, last):
            return None
        scores, auc = self.scores(chunk_index, rows)
        # Host values, not committed device arrays: the state may span processes.
        new, source = self.step(run.state, np.asarray(scores), np.int32(chunk_index), tiebreak=np.asarray(auc))
        new = self.program.place(new)
        source = np.asarray(fetch(source))
        jax.block_until_ready(new)
        run.state = new
        self.curves = [list(self.curves[int(j)]) for j in source]  # a copy's curve is its donor's
        hyperparams = fetch(new.hyperparams)  # a collective over processes: every process fetches
        if self.log is not None:
            names = self.program.names
            finite = lambda xs: [None if not np.isfinite(x) else float(x) for x in xs]  # noqa: E731
            record = {"chunk": chunk_index, "env_steps": rows[0]["env_steps"], "score": self.score_key,
                      "scores": finite(scores), "tiebreak": "auc", "auc": finite(auc),
                      "copies": {names[i]: names[int(j)] for i, j in enumerate(source) if int(j) != i},
                      "hyperparams": {k: np.asarray(getattr(hyperparams, k)).tolist()
                                      for k in sorted(self.spec.fields)}}
            with open(self.log, "a") as f:
                f.write(json.dumps(record) + "\n")
        return None


def _curve_point(row: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a metrics row :func:`return_auc` reads."""
    return {"env_steps": row["env_steps"], TRAIN_SCORE: row.get(TRAIN_SCORE)}


def _replay_curves(run_dir: Any, names: list[str], steps: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The lineage curves of a resumed sweep: the members' logged chunk rows, chunk by chunk, with the
    logged PBT ``steps``' copies applied after their chunks, as :meth:`PBT.boundary` did."""
    from rljax.store.tracking import read_chunks

    rows = [read_chunks(run_dir / "members" / name) for name in names]
    copies_at = {int(step["env_steps"]): step["copies"] for step in steps}
    index = {name: i for i, name in enumerate(names)}
    curves: list[list[dict[str, Any]]] = [[] for _ in names]
    for k in range(max((len(r) for r in rows), default=0)):
        for curve, member_rows in zip(curves, rows):
            if k < len(member_rows):
                curve.append(_curve_point(member_rows[k]))
        copies = copies_at.get(int(rows[0][k]["env_steps"])) if k < len(rows[0]) else None
        if copies:
            curves = [list(curves[index[copies[name]]]) if name in copies else curves[i]
                      for i, name in enumerate(names)]
    return curves
