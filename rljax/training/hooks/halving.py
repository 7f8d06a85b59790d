"""Successive halving inside one compiled program: asynchronous rungs over a fixed population of slots.

A sweep's search space (its grid x random sample x seeds: the *trials*) is usually larger than the
population that trains at once. With halving, ``slots`` members train in one compiled program, each
holding one trial at a time. Trials are compared at the same **age** (chunks trained since the
trial started): at the rung ages ``a_k = m * eta**k`` (``m`` the first rung, ``a_k`` below the run's
chunk count), a trial's score joins that rung's record, and the trial **stops** if its score is
below the ``(1 - 1/eta)`` quantile of every score recorded at the rung so far (its own included;
a non-finite score always stops). The slot of a stopped trial continues at once with the next
untried trial of the space, freshly initialised (params, optimiser, envs, schedules from step 0),
so the population keeps its size and the program is compiled once. This is the stopping form of
ASHA (Li et al. 2020, "A System for Massively Parallel Hyperparameter Tuning"), as Ray Tune's
``ASHAScheduler`` applies it: trials that reach a rung together (the first population does) are
halved together; later ones are judged against the record. When every trial of the space has
started, nothing is stopped any more (a slot would have nothing else to run): the trials below the
cutoff keep training and reach later rungs with the rest.

The order in which trials start is a permutation of the space drawn from ``seed``; the decisions
depend on the scores only, so a sweep is reproducible for a seed. A trial's training is the same
wherever and whenever it starts: it is initialised from its own seed as a plain sweep member is.

**Score** at a rung: the trial's evaluation return of that chunk when evaluation is on
(``eval/return_mean``; the first rung must then be a multiple of ``eval_interval`` chunks), else
the mean training return (``episode_return_mean``) over the last 10 % of the trial's chunks (at
least one), the score a sweep's summary ranks by. **Result**: trials are compared at the highest
rung at least ``eta`` of them reached (:func:`rank_trials`). The bias is the method's: a trial that
learns slowly but finishes well is stopped at an early rung, so halving finds the configs that are
good *early*; it beats a grid when the early ranking predicts the final one and the space is larger
than the population (it tries more configs with the same env steps), and loses to it when learning
curves cross late.

The schedule (which trial each slot holds since which chunk, every rung's record, the queue) lives
on the host, is written to ``RUN_DIR/halving.json`` at every boundary and is saved in every
checkpoint's meta, so a resumed sweep continues the same schedule bit for bit.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rljax.training.hooks.base import Hook, Row, Run

__all__ = ["HalvingSpec", "Schedule", "Halving", "validate_halving", "rung_ages", "halving_chunk", "trial_order",
           "rank_trials", "decision_rung", "check_resumed", "META_KEY"]

META_KEY = "halving"
"""The key of the schedule in a checkpoint's meta and the name of ``RUN_DIR/halving.json``."""


@dataclasses.dataclass(frozen=True)
class HalvingSpec:
    """How a sweep halves its trials (``rljax sweep ... --halving``).

    Attributes:
        slots: members trained at once (the population); at most the number of trials.
        eta: the reduction factor: at each rung the top ``1/eta`` of the record continue (>= 2).
        min_steps: the first rung's age in env steps per member, rounded up to whole chunks; 0:
            the run's chunk count divided by ``eta**2`` (at least one chunk). Without an explicit
            ``updates_per_chunk``, a halving sweep has ``eta**3`` chunks (:func:`halving_chunk`).
        seed: seed of the order in which the trials start.
    """

    slots: int
    eta: int = 3
    min_steps: int = 0
    seed: int = 0

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "HalvingSpec":
        return cls(slots=int(d["slots"]), eta=int(d["eta"]), min_steps=int(d["min_steps"]), seed=int(d["seed"]))


def validate_halving(spec: HalvingSpec, trials: int, config: Any = None) -> None:
    """Raises ``ValueError`` naming what is wrong with ``spec`` for a space of ``trials`` trials."""
    if not isinstance(spec.eta, int) or spec.eta < 2:
        raise ValueError(f"halving's reduction factor --halving-eta must be an integer >= 2, got {spec.eta!r}")
    if not isinstance(spec.slots, int) or spec.slots < 2:
        raise ValueError(f"halving needs at least 2 slots (--halving-slots), got {spec.slots!r}: with one, the "
                         f"first trial to reach a rung is never below its own record and nothing is halved")
    if spec.slots > trials:
        raise ValueError(f"--halving-slots {spec.slots} is more than the {trials} trials of the search space "
                         f"(grid x samples x seeds); use at most {trials}, or a larger space")
    if spec.slots == trials:
        raise ValueError(f"--halving-slots {spec.slots} trains every one of the {trials} trials at once, so there is "
                         f"nothing to halve: drop --halving for a plain sweep, or use fewer slots (e.g. "
                         f"{max(1, math.ceil(trials / spec.eta))})")
    if not isinstance(spec.min_steps, int) or spec.min_steps < 0:
        raise ValueError(f"--halving-min-steps must be a number of env steps >= 0 (0: automatic), "
                         f"got {spec.min_steps!r}")


def rung_ages(spec: HalvingSpec, num_chunks: int, env_steps_per_chunk: int, eval_interval: int = 0) -> tuple[int, ...]:
    """The rung ages in chunks: ``m * eta**k`` below ``num_chunks``, ``m`` = ``min_steps`` rounded up
    to chunks (0: ``num_chunks // eta**2``, at least 1).

    Raises:
        ValueError: no rung fits in the run, or evaluation is on and ``m`` is not a multiple of
            ``eval_interval`` (a rung would rank by a stale evaluation).
    """
    m = (math.ceil(spec.min_steps / env_steps_per_chunk) if spec.min_steps
         else max(1, num_chunks // spec.eta ** 2))
    if eval_interval > 0 and m % eval_interval:
        m_up = eval_interval * math.ceil(m / eval_interval)
        raise ValueError(f"halving's first rung ({m} chunks of {env_steps_per_chunk:,} env steps) must be a "
                         f"multiple of eval_interval ({eval_interval} chunks): with evaluation on, trials are ranked "
                         f"by their evaluation return at each rung; use --halving-min-steps "
                         f"{m_up * env_steps_per_chunk}")
    ages, a = [], m
    while a < num_chunks:
        ages.append(a)
        a *= spec.eta
    if not ages:
        raise ValueError(f"halving's first rung ({m} chunks) is not before the end of the run ({num_chunks} chunks of "
                         f"{env_steps_per_chunk:,} env steps): lower --halving-min-steps, or use more chunks "
                         f"(--updates-per-chunk smaller, or --total-timesteps larger)")
    return tuple(ages)


def halving_chunk(num_updates: int, eta: int) -> int:
    """Updates per chunk of a halving sweep that leaves its chunk size to rljax: ``eta**3`` chunks (so the
    default rungs, at ``1/eta**2`` and ``1/eta`` of the run, are whole chunks), at most
    :data:`rljax.training.program.MAX_AUTO_CHUNK` updates each (a row at least that often)."""
    from rljax.training.program import MAX_AUTO_CHUNK

    return max(1, min(MAX_AUTO_CHUNK, math.ceil(max(1, num_updates) / eta ** 3)))


def trial_order(trials: int, seed: int) -> list[int]:
    """The order in which a space's ``trials`` start: a permutation drawn from ``seed``."""
    return [int(i) for i in np.random.default_rng(seed).permutation(trials)]


def _cutoff(recorded: Sequence[float], eta: int) -> float:
    """The ``(1 - 1/eta)`` quantile (linear interpolation) of a rung's finite scores; -inf if none."""
    finite = [x for x in recorded if math.isfinite(x)]
    return float(np.percentile(finite, 100.0 * (1.0 - 1.0 / eta))) if finite else -math.inf


@dataclasses.dataclass
class Schedule:
    """The host side of halving: which trial each slot holds, every rung's record, the queue.

    Attributes:
        eta: the reduction factor.
        rungs: the rung ages in chunks (:func:`rung_ages`).
        num_chunks: the run's chunk count (a trial that trains all of them completes the run).
        chunk_steps: env steps per chunk of one slot.
        score: the column rungs rank by (``eval/return_mean`` or ``episode_return_mean``).
        order: the trials in the order they start (:func:`trial_order`).
        started: how many of ``order`` have started.
        slot_trial: the trial each slot holds.
        slot_start: the chunk each slot's trial started at.
        slot_scores: each slot's per-chunk training returns since its trial started (the rung score's
            window): NaN for a chunk in which no episode ended, -inf for one that was not finite.
        records: per rung, ``{trial: score}`` of every trial that reached it.
        trials: per trial that started, ``{"slot", "start_chunk", "end_chunk", "stopped_at_rung",
            "final_score"}`` (``end_chunk``/``stopped_at_rung`` None while it trains; ``final_score``
            set for the trials still training when the run ends).
    """

    eta: int
    rungs: tuple[int, ...]
    num_chunks: int
    chunk_steps: int
    score: str
    order: list[int]
    started: int
    slot_trial: list[int]
    slot_start: list[int]
    slot_scores: list[list[float]]
    records: list[dict[int, float]]
    trials: dict[int, dict[str, Any]]

    @classmethod
    def new(cls, spec: HalvingSpec, rungs: Sequence[int], num_chunks: int, chunk_steps: int,
            num_trials: int, score: str = "episode_return_mean") -> "Schedule":
        """The schedule before the first chunk: slot ``i`` holds the ``i``-th trial of the order."""
        order = trial_order(num_trials, spec.seed)
        slots = order[:spec.slots]
        return cls(eta=spec.eta, rungs=tuple(rungs), num_chunks=num_chunks, chunk_steps=chunk_steps, score=score,
                   order=order, started=spec.slots,
                   slot_trial=list(slots), slot_start=[0] * spec.slots, slot_scores=[[] for _ in slots],
                   records=[{} for _ in rungs],
                   trials={t: _trial_record(s, 0) for s, t in enumerate(slots)})

    def to_dict(self) -> dict[str, Any]:
        """The schedule as JSON (``halving.json`` and a checkpoint's meta); :meth:`from_dict` reads it back."""
        finite = lambda x: x if x is None or math.isfinite(x) else None  # noqa: E731
        # A chunk's score: None where no episode ended in it (NaN here), "-inf" where it was not finite.
        window = lambda x: None if math.isnan(x) else "-inf" if x == -math.inf else x  # noqa: E731
        return {"eta": self.eta, "rungs": list(self.rungs), "num_chunks": self.num_chunks,
                "chunk_steps": self.chunk_steps, "score": self.score, "order": self.order,
                "started": self.started, "slot_trial": self.slot_trial, "slot_start": self.slot_start,
                "slot_scores": [[window(x) for x in s] for s in self.slot_scores],
                "records": [{str(t): finite(s) for t, s in r.items()} for r in self.records],
                "trials": {str(t): {**v, "final_score": finite(v["final_score"])} for t, v in self.trials.items()}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Schedule":
        unfinite = lambda x: -math.inf if x is None else float(x)  # noqa: E731
        window = lambda x: math.nan if x is None else -math.inf if x == "-inf" else float(x)  # noqa: E731
        return cls(eta=int(d["eta"]), rungs=tuple(int(a) for a in d["rungs"]), num_chunks=int(d["num_chunks"]),
                   chunk_steps=int(d["chunk_steps"]), score=str(d.get("score", "episode_return_mean")),
                   order=[int(t) for t in d["order"]], started=int(d["started"]),
                   slot_trial=[int(t) for t in d["slot_trial"]], slot_start=[int(c) for c in d["slot_start"]],
                   slot_scores=[[window(x) for x in s] for s in d["slot_scores"]],
                   records=[{int(t): unfinite(s) for t, s in r.items()} for r in d["records"]],
                   trials={int(t): dict(v) for t, v in d["trials"].items()})

    def age(self, slot: int, chunk_index: int) -> int:
        """Chunks slot ``slot``'s trial has trained after chunk ``chunk_index``."""
        return chunk_index + 1 - self.slot_start[slot]

    def due(self, chunk_index: int) -> bool:
        """Whether a trial reaches a rung after chunk ``chunk_index``."""
        return any(self.age(s, chunk_index) in self.rungs for s in range(len(self.slot_trial)))

    def rung_score(self, slot: int) -> float:
        """The slot's score now: the mean of its trial's last 10 % of the chunks in which an episode ended
        (at least one; chunks without one are left out, as a sweep's final score leaves them out);
        -inf when none did, or when one in the window was not finite (a diverged trial)."""
        scores = [x for x in self.slot_scores[slot] if not math.isnan(x)]
        window = scores[-max(1, len(scores) // 10):]
        return float(np.mean(window)) if window and all(math.isfinite(x) for x in window) else -math.inf

    def observe(self, scores: Sequence[float]) -> None:
        """Adds one chunk's training return of each slot to its window (NaN: no episode ended in it;
        -inf: not finite)."""
        for s, x in enumerate(scores):
            self.slot_scores[s].append(float(x))

    def step(self, chunk_index: int, ranked_now: Sequence[float] | None = None, last: bool = False) -> list[int]:
        """Applies the rung rule after chunk ``chunk_index`` (its scores already observed); returns
        the slots whose trial stopped (each now holds a new trial starting at chunk ``chunk_index + 1``).

        ``ranked_now``: the scores a rung ranks by when it is not the training-return window (the
        chunk's evaluation return, one per slot); None: :meth:`rung_score`. After the ``last`` chunk,
        arrivals at a rung are recorded but nothing stops, and every trial still training is closed
        with its age and score.
        """
        def score_of(s: int) -> float:
            x = self.rung_score(s) if ranked_now is None else float(ranked_now[s])
            return x if math.isfinite(x) else -math.inf

        arrived: list[tuple[int, int, float]] = []  # (slot, rung, score)
        for s in range(len(self.slot_trial)):
            age = self.age(s, chunk_index)
            if age in self.rungs:
                k = self.rungs.index(age)
                score = score_of(s)
                self.records[k][self.slot_trial[s]] = score
                arrived.append((s, k, score))
        if last:
            for s, trial in enumerate(self.slot_trial):
                self.trials[trial].update(end_chunk=chunk_index, final_age=self.age(s, chunk_index),
                                          final_score=score_of(s))
            return []
        # Everyone who arrived is recorded before anyone is judged: trials that reach a rung
        # together are halved together, whatever their slot order.
        below = [(score, self.slot_trial[s], s, k) for s, k, score in arrived
                 if score == -math.inf or score < _cutoff(list(self.records[k].values()), self.eta)]
        below.sort()  # the worst first (ties: the lower trial index), so a short queue stops the worst
        stopped = []
        for _, trial, s, k in below[:len(self.order) - self.started]:
            self.trials[trial].update(end_chunk=chunk_index, stopped_at_rung=k)
            new = self.order[self.started]
            self.started += 1
            self.slot_trial[s], self.slot_start[s], self.slot_scores[s] = new, chunk_index + 1, []
            self.trials[new] = _trial_record(s, chunk_index + 1)
            stopped.append(s)
        return sorted(stopped)


def _trial_record(slot: int, start_chunk: int) -> dict[str, Any]:
    return {"slot": slot, "start_chunk": start_chunk, "end_chunk": None, "stopped_at_rung": None,
            "final_score": None}


def decision_rung(schedule: Schedule) -> int:
    """The rung the result is decided at: the highest one with at least ``eta`` recorded scores (a
    rung with fewer compares too few trials to halve: the first trial to reach a rung always
    continues), or else the highest one with any; -1 when no trial reached a rung."""
    reached = [k for k, r in enumerate(schedule.records) if r]
    full = [k for k in reached if len(schedule.records[k]) >= schedule.eta]
    return (full or reached or [-1])[-1]


def rank_trials(schedule: Schedule) -> list[dict[str, Any]]:
    """Every started trial with its rung scores, the level it was ranked at and its place, best first.

    Trials are compared at the same age: at the :func:`decision_rung` ``D``, the trials that reached
    it rank by their score there; below them, the others by the last rung they reached (higher
    first), then by their score at it; trials that reached no rung last, by their score when the run
    ended. Later rungs' scores (past ``D``) are reported, not ranked by: too few trials reached them.

    Returns:
        One dict per trial: ``rank``, ``trial``, ``slot``, ``start_chunk``, ``end_chunk``,
        ``stopped_at_rung`` (None: it trained to the end), ``rung_scores`` (one per rung it reached),
        ``level`` (the rungs it is ranked by: ``min(reached, D + 1)``), ``score`` (its score at that
        rung; with no rung, its score when the run ended, or -inf).
    """
    top = decision_rung(schedule)
    out = []
    for trial, rec in schedule.trials.items():
        rung_scores = [r[trial] for r in schedule.records if trial in r]
        level = min(len(rung_scores), top + 1)
        score = rung_scores[level - 1] if level else rec["final_score"]
        score = -math.inf if score is None else score
        out.append({"trial": trial, "slot": rec["slot"], "start_chunk": rec["start_chunk"],
                    "end_chunk": rec["end_chunk"], "stopped_at_rung": rec["stopped_at_rung"],
                    "rung_scores": rung_scores, "level": level, "score": score})
    out.sort(key=lambda t: (-t["level"], -t["score"] if math.isfinite(t["score"]) else math.inf, t["trial"]))
    for i, t in enumerate(out):
        t["rank"] = i + 1
    return out


def check_resumed(schedule: Schedule, eval_interval: int) -> None:
    """Raises ``ValueError`` when a resumed halving sweep's ``eval_interval`` would change what its rungs
    rank by (an evaluation against a training return in one record), or put a rung between evaluations."""
    from rljax.training.hooks.pbt import EVAL_SCORE, TRAIN_SCORE

    score = EVAL_SCORE if eval_interval > 0 else TRAIN_SCORE
    if schedule.score != score:
        raise ValueError(f"this halving sweep's rungs rank by {schedule.score}; resumed with "
                         f"eval_interval={eval_interval} they would rank by {score}, mixing the two in one record: "
                         f"resume with the eval_interval it started with")
    if eval_interval > 0 and schedule.rungs[0] % eval_interval:
        raise ValueError(f"this halving sweep's first rung ({schedule.rungs[0]} chunks) is not a multiple of "
                         f"eval_interval={eval_interval}: resume with the eval_interval it started with")


class Halving(Hook):
    """The boundary hook that runs a sweep's successive halving (module docstring).

    At each boundary where a trial reaches a rung, it applies :meth:`Schedule.step` and replaces
    the state of each slot whose trial stopped with the initial state of its new trial (the same
    state a plain sweep member of that config and seed starts from), in one jitted select. Rows
    gain ``halving/trial`` (the trial's index in the space) and ``halving/age`` (its chunks so far).

    Args:
        spec: the halving spec.
        program: the run's :class:`rljax.training.program.Program`.
        trials: the :class:`rljax.training.population.Population` of every trial of the space.
        plan: the run's :class:`rljax.training.program.Plan`.
        run_dir: the sweep directory (``halving.json``), or None.
        saved: the schedule from the checkpoint being resumed, or None (a fresh start).
        leader: this process writes the run directory.
    """

    def __init__(self, spec: HalvingSpec, program: Any, trials: Any, plan: Any, run_dir: Any,
                 saved: Mapping[str, Any] | None, leader: bool = True):
        from rljax.training.program import population_init

        self.program, self.trials = program, trials
        self.eval_interval = getattr(program.config, "eval_interval", 0)
        from rljax.training.hooks.pbt import EVAL_SCORE, TRAIN_SCORE

        chunk_steps = plan.updates_per_chunk * plan.env_steps_per_update
        score = EVAL_SCORE if self.eval_interval > 0 else TRAIN_SCORE
        if saved is None:
            rungs = rung_ages(spec, plan.num_chunks, chunk_steps, self.eval_interval)
            self.schedule = Schedule.new(spec, rungs, plan.num_chunks, chunk_steps, trials.size, score)
        else:  # the saved rungs are the schedule; a run extended on resume completes at its new end
            self.schedule = Schedule.from_dict(saved)
            self.schedule.num_chunks = plan.num_chunks
            check_resumed(self.schedule, self.eval_interval)
        self.path = None if run_dir is None or not leader else pathlib.Path(run_dir) / f"{META_KEY}.json"
        self.init = population_init(program.agent, plan.num_updates)
        self.select = jax.jit(lambda mask, fresh, old: jax.tree.map(
            lambda f, o: jnp.where(mask.reshape(mask.shape + (1,) * (o.ndim - 1)), f, o), fresh, old),
            donate_argnums=2)
        self.gather = jax.jit(lambda tree, idx: jax.tree.map(lambda x: x[idx], tree))
        self.keys = jax.jit(jax.vmap(jax.random.key))
        self.seeds = np.asarray(trials.seeds, np.uint32)

    def start(self, run: Run) -> None:
        """Writes the schedule as it starts (a resumed one as restored)."""
        run.checkpoint_meta[META_KEY] = self.schedule.to_dict()
        self._write()

    def due(self, run: Run, chunk_index: int, last: bool) -> bool:
        """After a chunk where a trial reaches a rung."""
        return self.schedule.due(chunk_index)

    def record(self, run: Run, chunk_index: int, rows: list[Row]) -> None:
        """Adds ``halving/trial`` and ``halving/age`` to each slot's row and its score to the slot's window
        (every chunk: a chunk launched ahead gets no :meth:`boundary`)."""
        from rljax.training.hooks.pbt import TRAIN_SCORE

        for s, row in enumerate(rows):
            row["halving/trial"] = self.schedule.slot_trial[s]
            row["halving/age"] = self.schedule.age(s, chunk_index)
        values = [r.get(TRAIN_SCORE) for r in rows]
        self.schedule.observe([math.nan if v is None else float(v) if math.isfinite(v) else -math.inf
                               for v in values])

    def boundary(self, run: Run, chunk_index: int, rows: list[Row], last: bool) -> None:
        """At a rung, stops trials and starts new ones in their slots; saves the schedule."""
        from rljax.training.hooks.pbt import EVAL_SCORE, scores_from_rows

        evaluated = scores_from_rows(rows, EVAL_SCORE).tolist() if self.eval_interval > 0 else None
        stopped = self.schedule.step(chunk_index, evaluated, last=last)
        if stopped:
            self._restart(run, stopped)
        run.checkpoint_meta[META_KEY] = self.schedule.to_dict()
        self._write()
        return None

    def _restart(self, run: Run, slots: list[int]) -> None:
        """Replaces the state of ``slots`` with their new trials' initial states."""
        idx = np.asarray(self.schedule.slot_trial, np.int32)
        fresh = self.init(self.keys(jnp.asarray(self.seeds[idx])), self.gather(self.trials.hyperparams, idx),
                          self.gather(self.trials.env_params, idx))
        mask = np.zeros(len(idx), bool)
        mask[slots] = True
        state = self.select(jnp.asarray(mask), self.program.place(fresh), run.state)
        run.state = self.program.place(state)
        jax.block_until_ready(run.state)

    def _write(self) -> None:
        if self.path is not None:
            tmp = self.path.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(self.schedule.to_dict(), indent=1))
            tmp.replace(self.path)
