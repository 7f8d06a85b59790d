"""Jit-compiled sweeps: seeds x hyperparameters x env params as ONE compiled program.

Every member of a sweep is a single-device run of the same config, differing only in traced values:
the config's sweepable hyperparameters (they live in the train state), the env params (also in the
state) and the seed. The loop vmaps the chunk over the members and splits them over devices, so a
64-member sweep compiles once and runs as one program::

    python -m experiments.ppo_cartpole sweep --grid learning_rate=1e-4,3e-4,1e-3 --grid ent_coef=0,0.01 \\
        --seeds 4 --run-dir runs/sweep1
    python -m experiments.ppo_cartpole sweep --sample learning_rate=log:1e-4:3e-3 --num-samples 8 --seeds 2
    python -m experiments.ppo_cartpole sweep --grid env.length=0.25,0.5,1.0 --seeds 3     # env params

Output (``RUN_DIR``): ``sweep.json`` (the spec and members), ``config.json`` (the base config),
``manifest.json``, ``members/<name>/`` (each member's ``config.json``, ``manifest.json``,
``metrics.jsonl``, ``tb/``), ``checkpoints/`` (the whole population), ``summary.csv`` (one row per
member), ``summary.md`` (configs ranked by their mean score over seeds: the last evaluation return
with ``--eval-interval``, else the final training return; ties by AUC; :func:`summarize`) and
``plots/<config>.png`` (learning curves, mean and spread over seeds, of the best :data:`MAX_PLOTS`
configs; :func:`plot_configs` draws the others on demand). With ``--pbt-interval N --pbt FIELD=LOW:HIGH`` the
population evolves while it trains (population-based training, :mod:`rljax.training.hooks.pbt`; ``pbt.jsonl``).
"""

from __future__ import annotations

import csv
import dataclasses
import itertools
import json
import math
import os
import pathlib
import re
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from rljax.core.config import sweepable_fields

__all__ = ["Member", "SweepSpec", "parse_grid", "parse_sample", "build_members", "make_population",
           "run_sweep", "swept_ranges_drawn", "summarize", "plot_configs", "ranking_table", "rank_configs", "score_description", "ranking",
           "mean_curve", "member_count", "MAX_PLOTS"]

ENV_PREFIX = "env."


@dataclasses.dataclass(frozen=True)
class Member:
    """One sweep member.

    Attributes:
        index: position in the population.
        seed: its seed.
        values: swept field -> value (config fields by name, env params as ``env.<name>``, the
            bounds of a randomisation range as ``randomize.<name>`` -> ``"LOW:HIGH"``).
        name: its directory name under ``members/``.
        label: the config label (values without the seed), shared by a config's seeds.
    """

    index: int
    seed: int
    values: dict[str, float | str]
    name: str
    label: str


@dataclasses.dataclass(frozen=True)
class SweepSpec:
    """What to sweep: a grid, a random sample, or both (their product), times seeds.

    Attributes:
        grid: field -> list of values; the cartesian product is taken.
        sample: field -> (distribution, low, high) with distribution ``uniform`` or ``log``.
        num_samples: points drawn from ``sample``.
        seeds: the seeds each configuration runs with.
        sample_seed: seed of the random sample (so a sweep is reproducible).
        pbt: evolve the population while it trains (:class:`rljax.training.hooks.pbt.PBTSpec`), or None.
        halving: train the space's trials (grid x sample x seeds) in fewer slots by successive
            halving (:class:`rljax.training.hooks.halving.HalvingSpec`), or None.
    """

    grid: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    sample: dict[str, tuple[str, float, float]] = dataclasses.field(default_factory=dict)
    num_samples: int = 0
    seeds: tuple[int, ...] = (0,)
    sample_seed: int = 0
    pbt: Any = None
    halving: Any = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SweepSpec":
        """The spec saved in ``sweep.json``."""
        from rljax.training.hooks.halving import HalvingSpec
        from rljax.training.hooks.pbt import PBTSpec

        halving = d.get("halving")
        pbt = d.get("pbt")
        if pbt is not None:
            pbt = PBTSpec(interval=pbt["interval"], fields={k: tuple(v) for k, v in pbt["fields"].items()},
                          fraction=pbt["fraction"], factors=tuple(pbt["factors"]), seed=pbt["seed"])
        return cls(grid=d["grid"], sample={k: tuple(v) for k, v in d["sample"].items()},
                   num_samples=d["num_samples"], seeds=tuple(d["seeds"]), sample_seed=d["sample_seed"], pbt=pbt,
                   halving=None if halving is None else HalvingSpec.from_dict(halving))


RANGE_PREFIX = "randomize."
"""How a sweep names the bounds of a randomisation range: ``randomize.length=0.25:1,0.25:2``."""

RANGES_NOT_SWEPT = ("a sweep varies the bounds of one randomisation range at a time, listed with --grid: "
                    "randomize.NAME=LOW:HIGH,LOW:HIGH,... (e.g. randomize.length=0.25:1,0.25:2; log:LOW:HIGH for a "
                    "log range); every member draws NAME, whether or not the base run does (--randomize NAME=...)")


def _range_value(text: str, field: str) -> str:
    """A grid value of ``randomize.NAME``: ``LOW:HIGH`` or ``log:LOW:HIGH``, checked as a range spec."""
    from rljax.core.wrappers import param_ranges

    name = field[len(RANGE_PREFIX):]
    param_ranges([f"{name}={text.strip()}"])  # raises naming the spec and the valid forms
    return text.strip()


def _number(text: str, field: str) -> float:
    if field == "randomize" or (field.startswith(RANGE_PREFIX) and field != RANGE_PREFIX):
        raise ValueError(f"sweep value {text!r} for {field}: {RANGES_NOT_SWEPT}")
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"sweep value {text!r} for {field} is not a number") from None


def parse_grid(specs: Sequence[str]) -> dict[str, list[float]]:
    """``["learning_rate=1e-4,3e-4", "env.length=0.5,1"]`` -> ``{field: [values]}``."""
    out: dict[str, list[float]] = {}
    for spec in specs:
        if "=" not in spec:
            raise ValueError(f"--grid {spec!r}: expected FIELD=V1,V2,... (e.g. learning_rate=1e-4,3e-4)")
        field, values = spec.split("=", 1)
        field = field.strip()
        field = field if field.startswith((ENV_PREFIX, RANGE_PREFIX)) else field.replace("-", "_")
        value = _range_value if field.startswith(RANGE_PREFIX) and field != RANGE_PREFIX else _number
        parsed = [value(v, field) for v in values.split(",") if v.strip()]
        if not parsed:
            raise ValueError(f"--grid {spec!r}: no values")
        if field in out:
            raise ValueError(f"--grid: {field} given twice")
        out[field] = parsed
    return out


def parse_sample(specs: Sequence[str]) -> dict[str, tuple[str, float, float]]:
    """``["learning_rate=log:1e-4:1e-2", "ent_coef=uniform:0:0.05"]`` -> ``{field: (dist, lo, hi)}``."""
    out: dict[str, tuple[str, float, float]] = {}
    for spec in specs:
        m = re.fullmatch(r"\s*([\w.\-]+)\s*=\s*(uniform|log):([^:]+):([^:]+)\s*", spec)
        if not m:
            raise ValueError(f"--sample {spec!r}: expected FIELD=uniform:LOW:HIGH or FIELD=log:LOW:HIGH")
        field = m.group(1) if m.group(1).startswith(ENV_PREFIX) else m.group(1).replace("-", "_")
        lo, hi = _number(m.group(3), field), _number(m.group(4), field)
        if not lo < hi or (m.group(2) == "log" and lo <= 0):
            raise ValueError(f"--sample {spec!r}: need LOW < HIGH (and LOW > 0 for log)")
        out[field] = (m.group(2), lo, hi)
    return out


def _env_param_names(env_params: Any) -> list[str]:
    return [f.name for f in dataclasses.fields(env_params)] if dataclasses.is_dataclass(env_params) else []


def validate_fields(config: Any, env_params: Any, fields: Sequence[str]) -> None:
    """Raises ``ValueError`` for a field that cannot be swept, listing those that can."""
    from rljax.core.wrappers import param_ranges

    sweepable = sweepable_fields(type(config))
    env_names = _env_param_names(env_params)
    ranged = [r.name for r in param_ranges(getattr(config, "randomize", ()))]
    for field in fields:
        if field.startswith(RANGE_PREFIX):
            if field[len(RANGE_PREFIX):] not in ranged:
                raise ValueError(f"{field!r}: the base config draws {', '.join(ranged) or 'no env param'} per "
                                 f"episode; give it {field[len(RANGE_PREFIX):]}=LOW:HIGH in its randomize (run_sweep "
                                 f"does, through swept_ranges_drawn: members vary the bounds of the ranges the "
                                 f"program draws)")
        elif field.startswith(ENV_PREFIX):
            if field[len(ENV_PREFIX):] not in env_names:
                raise ValueError(f"{field!r} is not a param of env {config.env!r}; env params: "
                                 + ", ".join(ENV_PREFIX + n for n in env_names))
        elif field not in sweepable:
            kind = "structural (it shapes the compiled program)" if hasattr(config, field) else "unknown"
            raise ValueError(f"{field!r} is {kind} and cannot be swept; sweepable fields of "
                             f"{type(config).__name__}: {', '.join(sweepable)}; env params as "
                             f"{ENV_PREFIX}<name>: {', '.join(env_names)}")


def _fmt(v: float | str) -> str:
    """A grid value as a label shows it: a range as typed, a number in its short form (``1e-4`` is
    ``0.0001``) when that is the same number, else every digit it has (``0.123456789``: two values
    that differ in the seventh digit are two configs, not one)."""
    if isinstance(v, str):
        return v
    short = f"{v:g}"
    return short if float(short) == v else repr(float(v))


def swept_ranges_drawn(config: Any, spec: SweepSpec) -> Any:
    """``config`` drawing every env param whose randomisation range ``spec`` sweeps.

    A ``randomize.NAME`` grid over a base config that does not draw ``NAME`` adds ``NAME`` with the
    grid's first range to the base's ``randomize`` (each member then draws from its own range), so
    ``sweep --grid randomize.length=0.25:1,0.25:2`` needs no ``--randomize`` of its own. Which params
    are drawn, and whether uniformly or log-uniformly, is compiled into the program, so the base
    decides it for every member.

    Raises:
        ValueError: an added range whose grid mixes uniform (``LOW:HIGH``) and log-uniform
            (``log:LOW:HIGH``) ranges, naming the field and its values.
    """
    from rljax.core.wrappers import param_ranges

    if not hasattr(config, "randomize"):
        return config  # validate_fields says that nothing of it can be drawn
    drawn = {r.name for r in param_ranges(config.randomize)}
    added = []
    for field, values in spec.grid.items():
        if not field.startswith(RANGE_PREFIX) or field[len(RANGE_PREFIX):] in drawn or not values:
            continue
        name = field[len(RANGE_PREFIX):]
        kinds = {param_ranges([f"{name}={v}"])[0].log for v in values}
        if len(kinds) > 1:
            raise ValueError(f"--grid {field}={','.join(map(str, values))}: the ranges of one param must all be "
                             f"uniform (LOW:HIGH) or all log-uniform (log:LOW:HIGH): how the program draws "
                             f"{name} is compiled in")
        added.append(f"{name}={values[0]}")
    return dataclasses.replace(config, randomize=(*config.randomize, *added)) if added else config


def build_members(config: Any, env_params: Any, spec: SweepSpec) -> list[Member]:
    """The members of ``spec``: (grid x sample points) x seeds, config-major order."""
    validate_fields(config, env_params, list(spec.grid) + list(spec.sample))
    if spec.sample and spec.num_samples < 1:
        raise ValueError("--sample needs --num-samples >= 1")
    if not spec.seeds:
        raise ValueError("a sweep needs at least one seed")
    grid_points = [dict(zip(spec.grid, combo)) for combo in itertools.product(*spec.grid.values())] or [{}]
    rng = np.random.default_rng(spec.sample_seed)
    sample_points: list[dict[str, float]] = [{}]
    if spec.sample:
        sample_points = []
        for _ in range(spec.num_samples):
            point = {}
            for field, (dist, lo, hi) in spec.sample.items():
                u = rng.uniform()
                point[field] = float(math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))) if dist == "log" \
                    else float(lo + u * (hi - lo))
            sample_points.append(point)
    members = []
    for g in grid_points:
        for smp in sample_points:
            values = {**g, **smp}
            # Drawn values in short form (they are in config.json and summary.csv in full); typed ones exactly.
            label = ",".join(f"{k}={f'{v:g}' if k in smp else _fmt(v)}" for k, v in values.items()) or "base"
            for seed in spec.seeds:
                i = len(members)
                safe = re.sub(r"[^\w.=,+-]", "_", label).replace(",", "_")
                members.append(Member(index=i, seed=int(seed), values=values, label=label,
                                      name=f"{i:03d}-{safe}-s{seed}"[:120]))
    return members


def _member_config(config: Any, member: Member) -> Any:
    overrides = {k: v for k, v in member.values.items() if not k.startswith((ENV_PREFIX, RANGE_PREFIX))}
    for k, v in overrides.items():
        if isinstance(getattr(config, k), int) and not isinstance(getattr(config, k), bool):
            overrides[k] = int(v)
    ranges = {k[len(RANGE_PREFIX):]: v for k, v in member.values.items() if k.startswith(RANGE_PREFIX)}
    if ranges:
        overrides["randomize"] = _member_ranges(config.randomize, ranges)
    return dataclasses.replace(config, seed=member.seed, **overrides)  # validates the values


def _member_ranges(base: tuple[str, ...], bounds: dict[str, str]) -> tuple[str, ...]:
    """The base run's ``randomize`` specs with the named ranges' bounds replaced; a member's range
    must draw the way the base one does (uniform or log-uniform: that is compiled in)."""
    from rljax.core.wrappers import param_ranges

    out = []
    for spec in base:
        (old,) = param_ranges([spec])
        if old.name not in bounds:
            out.append(spec)
            continue
        typed = f"{old.name}={bounds[old.name]}"
        (new,) = param_ranges([typed])
        if new.log != old.log:
            raise ValueError(f"{RANGE_PREFIX}{old.name}={bounds[old.name]}: the base run draws {old.name} "
                             f"{'log-uniformly' if old.log else 'uniformly'} ({spec}); a sweep member must too "
                             f"({'log:LOW:HIGH' if old.log else 'LOW:HIGH'})")
        out.append(typed)  # as typed: str(new) would round the bounds to 6 digits
    return tuple(out)


def _member_env_params(env_params: Any, member: Member) -> Any:
    env_over = {k[len(ENV_PREFIX):]: v for k, v in member.values.items() if k.startswith(ENV_PREFIX)}
    for k, v in env_over.items():
        if isinstance(getattr(env_params, k), int):
            env_over[k] = int(v)
    return env_params.replace(**env_over) if env_over else env_params


def member_count(spec: SweepSpec) -> int:
    """How many members ``spec`` trains at once (:func:`build_members` without building them; with
    halving, its slots)."""
    if spec.halving is not None:
        return spec.halving.slots
    return math.prod(len(v) for v in spec.grid.values()) * (spec.num_samples if spec.sample else 1) * len(spec.seeds)


def make_population(config: Any, env_params: Any, members: Sequence[Member], num_devices: int = 1):
    """The :class:`rljax.training.population.Population` for ``members``."""
    from rljax.training.population import Population

    return Population.stack([_member_config(config, m) for m in members],
                            [_member_env_params(env_params, m) for m in members], [m.name for m in members],
                            num_devices)


def _last_eval(rows: list[dict[str, Any]]) -> tuple[float | None, int | None, int | None]:
    """``(eval/return_mean, eval/episodes, env_steps)`` of a member's last evaluated row (a
    non-finite or missing return is NaN); ``(None, None, None)`` if it was never evaluated."""
    from rljax.training.hooks.pbt import EVAL_SCORE

    for r in reversed(rows):
        if EVAL_SCORE in r:
            v = r[EVAL_SCORE]
            episodes = r.get("eval/episodes")
            return (float(v) if v is not None and math.isfinite(v) else float("nan"),
                    None if episodes is None else int(episodes), int(r["env_steps"]))
    return None, None, None


def _member_summary(m: Member, rows: list[dict[str, Any]], evaluated: bool) -> dict[str, Any]:
    """One ``summary.csv`` row: the member's score (its evaluation return when the sweep was
    evaluated, else its final training return), final return, AUC, last evaluation, divergence."""
    from rljax.training.hooks.pbt import EVAL_SCORE, TRAIN_SCORE, final_and_auc

    final, auc = final_and_auc(rows)
    eval_return, eval_episodes, eval_steps = _last_eval(rows)
    diverged = any(r.get(k) is None or (isinstance(r.get(k), float) and not math.isfinite(r[k]))
                   for r in rows for k in r if k.endswith("_loss"))
    return {"member": m.index, "name": m.name, "seed": m.seed, **m.values,
            "score": (float("nan") if eval_return is None else eval_return) if evaluated else final,
            "score_metric": EVAL_SCORE if evaluated else TRAIN_SCORE,
            "final_return": final, "auc": auc, "eval_return": eval_return, "eval_episodes": eval_episodes,
            "eval_env_steps": eval_steps, "diverged": diverged}


def _mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and std over the finite values (None counts as NaN; NaN, NaN when none is finite)."""
    x = np.asarray(values, float)
    return (float(np.nanmean(x)), float(np.nanstd(x))) if np.isfinite(x).any() else (float("nan"), float("nan"))


def _tie_key(a: dict[str, Any]) -> tuple[float, float]:
    """Sort key of a config: score, then AUC, both descending, compared to 10 significant digits
    (so means of the same values summed in another order are equal); NaN last."""
    def desc(x: float) -> float:
        return -float(f"{x:.10g}") if math.isfinite(x) else math.inf
    return desc(a["score_mean"]), desc(a["auc_mean"])


def rank_configs(per_member: Sequence[dict[str, Any]], members: Sequence[Member]) -> list[dict[str, Any]]:
    """Aggregates the members' summary rows per config and ranks the configs, best first.

    Configs are ranked by their mean score over seeds; equal scores (several configs reaching
    CartPole's 500) by their mean AUC (the training return averaged over the run: the config
    that got there sooner and more reliably is better), never by their order in the sweep.
    Configs equal in both share a rank (standard competition ranking: 1, 1, 3) and are listed
    in order of their config label. A NaN score (no finished episode, no evaluation, a diverged
    member's NaN evaluation) ranks last. Seeds whose score is NaN are left out of the mean (the
    ``diverged`` column counts diverged members).

    Returns:
        One dict per config: ``rank``, ``config``, ``seeds``, ``score`` (the metric that ranked
        them: ``eval/return_mean`` or ``episode_return_mean``), ``score_mean``/``score_std``,
        ``final_mean``/``final_std`` (final training return), ``auc_mean``/``auc_std``,
        ``eval_mean``/``eval_std`` (last evaluation return; NaN without evaluation), ``diverged``.
    """
    by_label: dict[str, list[int]] = {}
    for m in members:
        by_label.setdefault(m.label, []).append(m.index)
    agg = []
    for label, idx in by_label.items():
        rows = [per_member[i] for i in idx]
        col = {k: _mean_std([r[k] for r in rows]) for k in ("score", "final_return", "auc", "eval_return")}
        agg.append({"config": label, "seeds": len(idx), "score": rows[0]["score_metric"],
                    "score_mean": col["score"][0], "score_std": col["score"][1],
                    "final_mean": col["final_return"][0], "final_std": col["final_return"][1],
                    "auc_mean": col["auc"][0], "auc_std": col["auc"][1],
                    "eval_mean": col["eval_return"][0], "eval_std": col["eval_return"][1],
                    "diverged": sum(r["diverged"] for r in rows)})
    agg.sort(key=lambda a: (*_tie_key(a), a["config"]))
    ranked: list[dict[str, Any]] = []
    for i, a in enumerate(agg):
        tied = i > 0 and _tie_key(a) == _tie_key(agg[i - 1])
        ranked.append({"rank": ranked[-1]["rank"] if tied else i + 1, **a})
    return ranked


def score_description(per_member: Sequence[dict[str, Any]]) -> str:
    """Which score ranked a sweep, in words (the header of ``summary.md`` and the printed table)."""
    from rljax.training.hooks.pbt import EVAL_SCORE

    if not per_member or per_member[0]["score_metric"] != EVAL_SCORE:
        return ("score: training episode return (`episode_return_mean`: the stochastic policy's episodes that "
                "ended in each chunk; mean of the last 10 % of chunks)")
    episodes = sorted({p["eval_episodes"] for p in per_member if p["eval_episodes"] is not None})
    steps = sorted({p["eval_env_steps"] for p in per_member if p["eval_env_steps"] is not None})
    n = "" if not episodes else f", {episodes[0]}" + (f"-{episodes[-1]}" if len(episodes) > 1 else "") + " episodes"
    at = f", at {steps[0]:,} env steps" if len(steps) == 1 else ""
    return f"score: greedy evaluation return (`{EVAL_SCORE}` of each member's last evaluation{n}{at})"


def _decimals(agg: list[dict[str, Any]], key: str, decides: int) -> int:
    """Decimals for column ``key`` of the ranked table: 2, or as many as it takes for every two
    neighbours that this column ranks apart (``decides``: 0, the score; 1, the AUC breaking a tie
    in the score) to show different values, so "1.00 ± 0.00" never stands above "1.00 ± 0.00"."""
    decimals = 2
    for a, b in zip(agg, agg[1:]):
        ka, kb = _tie_key(a), _tie_key(b)
        if a["rank"] == b["rank"] or ka[:decides] != kb[:decides] or ka[decides] == kb[decides]:
            continue
        x, y = a[key], b[key]
        if math.isfinite(x) and math.isfinite(y):
            while decimals < 20 and f"{x:.{decimals}f}" == f"{y:.{decimals}f}":
                decimals += 1
    return decimals


def _table(agg: list[dict[str, Any]], description: str) -> str:
    """``summary.md``: what ranked the configs, then the ranked table (the score and AUC columns
    with the digits that decide the rank, :func:`_decimals`)."""
    from rljax.training.hooks.pbt import EVAL_SCORE

    evaluated = bool(agg) and agg[0]["score"] == EVAL_SCORE
    score_d, auc_d = _decimals(agg, "score_mean", 0), _decimals(agg, "auc_mean", 1)
    final_d = 2 if evaluated else score_d  # without evaluation, the final return is the score
    lines = [description, "", "Configs ranked by their mean score over seeds (± std), best first; equal scores by "
             "AUC (the training return averaged over the run); configs equal in both share a rank.", "",
             "| rank | config | seeds | " + ("eval return (score) | final training return | " if evaluated
                                            else "final return (score) | ") + "AUC | diverged |",
             "|---|---|---|---|---|" + ("---|" if evaluated else "") + "---|"]
    for a in agg:
        cells = [str(a["rank"]), a["config"], str(a["seeds"])]
        if evaluated:
            cells.append(f"{a['eval_mean']:.{score_d}f} ± {a['eval_std']:.{score_d}f}")
        cells += [f"{a['final_mean']:.{final_d}f} ± {a['final_std']:.{final_d}f}",
                  f"{a['auc_mean']:.{auc_d}f} ± {a['auc_std']:.{auc_d}f}", str(a["diverged"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def ranking_table(members: Sequence[Member], member_rows: Sequence[list[dict]]) -> tuple[list[dict[str, Any]], str]:
    """``(ranked configs, table text)`` of :func:`summarize`, computed from ``member_rows`` alone
    (nothing written): what a sweep without a run directory prints."""
    from rljax.training.hooks.pbt import EVAL_SCORE

    evaluated = any(rows and EVAL_SCORE in rows[-1] for rows in member_rows)
    per_member = [_member_summary(m, rows, evaluated) for m, rows in zip(members, member_rows)]
    agg = rank_configs(per_member, members)
    return agg, _table(agg, score_description(per_member))


def summarize(run_dir: str | os.PathLike, members: Sequence[Member], member_rows: Sequence[list[dict]],
              plots: bool = True, stream: Any = None) -> list[dict[str, Any]]:
    """Writes ``summary.csv``, ``summary.md`` and ``plots/``; prints the ranked table.

    Each member's **score** is its evaluation return when the sweep evaluated during training
    (``eval_interval > 0``: the final chunk's rows carry ``eval/return_mean``), else its final
    training return. (A sweep resumed with evaluation turned off is scored by training return:
    its last evaluations would describe policies from the middle of the run.)

    * The evaluation score is the ``eval/return_mean`` of the member's *last* evaluation, which
      is always the final chunk's: the mean return over ``eval_episodes`` whole episodes of the
      greedy policy the sweep produced (its final checkpoint, what :func:`rljax.load` gives).
      Earlier evaluations are not averaged in: they score policies that no longer exist, and
      would penalise a config that was still improving (or flatter one that collapsed at the
      end). Its noise is set by ``eval_episodes`` (and averaged over seeds).
    * The training score (``final_return``) is the mean episode return over the last 10 % of
      chunks: each chunk's return is noisy (a stochastic policy, the few episodes that happened
      to end in it), and mixes the policies of the chunk, so it is averaged over time instead.

    ``auc`` is the area under the training return curve divided by its length in env steps (the
    run's average return, :func:`rljax.training.hooks.pbt.return_auc`); it breaks ties in the score
    (:func:`rank_configs`). ``summary.csv`` has one row per member with its ``score`` and
    ``score_metric`` (the column the score came from), ``final_return``, ``auc`` and its last
    evaluation (``eval_return``, ``eval_episodes``, ``eval_env_steps``; empty without one);
    ``summary.md`` and the printed table name the score they rank by.

    Returns:
        The per-config aggregate rows, best first (:func:`rank_configs`).
    """
    from rljax.training.hooks.pbt import EVAL_SCORE

    run_dir = pathlib.Path(run_dir)
    fields = list(dict.fromkeys(k for m in members for k in m.values))
    evaluated = any(rows and EVAL_SCORE in rows[-1] for rows in member_rows)
    per_member = [_member_summary(m, rows, evaluated) for m, rows in zip(members, member_rows)]
    with open(run_dir / "summary.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["member", "name", "seed", *fields, "score", "score_metric",
                                               "final_return", "auc", "eval_return", "eval_episodes",
                                               "eval_env_steps", "diverged"])
        writer.writeheader()
        writer.writerows(per_member)
    agg = rank_configs(per_member, members)
    text = _table(agg, score_description(per_member))
    (run_dir / "summary.md").write_text(text)
    print(text, file=stream or sys.stdout, flush=True)
    if plots:
        by_label: dict[str, list[int]] = {}
        for m in members:
            by_label.setdefault(m.label, []).append(m.index)
        best = [a["config"] for a in agg[:MAX_PLOTS]]
        _plot(run_dir, members, member_rows, {label: by_label[label] for label in best})
        if len(agg) > MAX_PLOTS:
            with open(run_dir / "summary.md", "a", encoding="utf-8") as f:
                f.write(f"\nLearning curves of the {MAX_PLOTS} best of the {len(agg)} configs are in `plots/`; draw "
                        f"any other with `rljax.training.sweep.plot_configs(RUN_DIR, [config, ...])`.\n")
    return agg


def ranking(members: Sequence[Member], member_rows: Sequence[list[dict]]) -> tuple[list[dict[str, Any]], str]:
    """The ranked per-config aggregate (:func:`rank_configs`) of members' rows and its ``summary.md``
    table, scored as :func:`summarize` scores them, without writing anything (``rljax inspect``)."""
    from rljax.training.hooks.pbt import EVAL_SCORE

    evaluated = any(rows and EVAL_SCORE in rows[-1] for rows in member_rows)
    per_member = [_member_summary(m, rows, evaluated) for m, rows in zip(members, member_rows)]
    agg = rank_configs(per_member, members)
    return agg, _table(agg, score_description(per_member))


def mean_curve(member_rows: Sequence[list[dict[str, Any]]], key: str
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The mean and std over members (seeds) of column ``key`` against env steps: each member's
    finite values, linearly interpolated onto the union of their env steps. Returns ``(env_steps,
    mean, std)``, or None when no member has a value (used by the sweep's plots and ``rljax inspect``)."""
    curves = []
    for rows in member_rows:
        pts = [(r["env_steps"], r[key]) for r in rows
               if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
        if pts:
            curves.append(np.array(pts, float).T)
    if not curves:
        return None
    grid_x = np.unique(np.concatenate([c[0] for c in curves]))
    ys = np.array([np.interp(grid_x, x, y) for x, y in curves])
    return grid_x, ys.mean(0), ys.std(0)


def plot_configs(run_dir: str | os.PathLike, configs: Sequence[str] | None = None) -> list[pathlib.Path]:
    """Draws ``plots/<config>.png`` for ``configs`` (labels as in ``summary.md``; None: every
    config) of the sweep in ``run_dir``, from its members' ``metrics.jsonl``: the plots a sweep of
    more than :data:`MAX_PLOTS` configs did not draw when it finished.

    Returns:
        The PNG paths written.

    Raises:
        ValueError: a label that is not one of the sweep's configs (the message lists some).
    """
    from rljax.store.tracking import read_metrics

    run_dir = pathlib.Path(run_dir)
    members = [Member(**m) for m in json.loads((run_dir / "sweep.json").read_text())["members"]]
    by_label: dict[str, list[int]] = {}
    for m in members:
        by_label.setdefault(m.label, []).append(m.index)
    wanted = list(by_label) if configs is None else list(configs)
    unknown = [c for c in wanted if c not in by_label]
    if unknown:
        raise ValueError(f"{unknown[0]!r} is not a config of the sweep in {run_dir}; its configs include "
                         f"{sorted(by_label)[:5]}")
    rows = [read_metrics(run_dir / "members" / m.name) if m.label in wanted else [] for m in members]
    return _plot(run_dir, members, rows, {label: by_label[label] for label in wanted})


# A sweep draws the learning curves of at most this many configs (its best) when it finishes: each
# PNG costs a noticeable fraction of a second, so a sweep of hundreds of configs spent a minute on
# plots nobody opens (docs/design.md). The others are drawn on demand (plot_configs).
MAX_PLOTS = 32

# Up to this many seeds of a config get a legend entry and a colour of their own; more share one
# colour and one entry (a legend of hundreds of lines is unreadable, and laying it out cost seconds).
LEGEND_SEEDS = 8


def _plot(run_dir: pathlib.Path, members, member_rows, by_label) -> list[pathlib.Path]:
    """One PNG per config: each seed's training return curve and evaluations, the mean and spread.

    Drawn with matplotlib's object API (no pyplot state) and one line collection per config, so a
    config with hundreds of seeds costs about what one with a few does."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.collections import LineCollection
    from matplotlib.figure import Figure

    from rljax.training.hooks.pbt import EVAL_SCORE

    out = run_dir / "plots"
    out.mkdir(exist_ok=True)
    written = []
    for label, idx in by_label.items():
        fig = Figure(figsize=(6, 4))
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        few = len(idx) <= LEGEND_SEEDS
        curves, evals = [], []
        for i in idx:
            rows = [r for r in member_rows[i] if r.get("episode_return_mean") is not None]
            x = np.array([r["env_steps"] for r in rows], float)
            y = np.array([r["episode_return_mean"] for r in rows], float)
            curves.append((x, y))
            evals.append(np.array([(r["env_steps"], r[EVAL_SCORE]) for r in member_rows[i]
                                   if r.get(EVAL_SCORE) is not None], float).reshape(-1, 2))
        if few:
            for i, (x, y), ev in zip(idx, curves, evals):
                (line,) = ax.plot(x, y, alpha=0.3, linewidth=1, label=f"seed {members[i].seed}")
                if len(ev):
                    ax.plot(ev[:, 0], ev[:, 1], "o--", color=line.get_color(), markersize=3, linewidth=0.8,
                            label=f"seed {members[i].seed} eval")
        else:
            ax.add_collection(LineCollection([np.column_stack(c) for c in curves if len(c[0])], colors="C0",
                                             alpha=0.15, linewidths=0.8, label=f"{len(idx)} seeds"))
            ev = np.concatenate(evals) if evals else np.zeros((0, 2))
            if len(ev):
                ax.plot(ev[:, 0], ev[:, 1], "o", color="C1", markersize=2, alpha=0.4, label="evaluations")
            ax.autoscale_view()
        curve = mean_curve([member_rows[i] for i in idx], "episode_return_mean")
        if curve is not None:
            grid_x, mean, std = curve
            ax.plot(grid_x, mean, color="k", linewidth=2, label="mean")
            ax.fill_between(grid_x, mean - std, mean + std, color="k", alpha=0.15)
        ax.set_xlabel("env steps")
        ax.set_ylabel("episode return")
        ax.set_title(label, fontsize=9)
        ax.legend(fontsize=7)
        fig.subplots_adjust(left=0.12, right=0.97, bottom=0.12, top=0.92)
        safe = re.sub(r"[^\w.=,+-]", "_", label).replace(",", "_")[:120]
        fig.savefig(out / f"{safe}.png", dpi=90)
        written.append(out / f"{safe}.png")
    return written


def run_sweep(config: Any, spec: SweepSpec, *, env: Any = None, env_params: Any = None,
              run_dir: str | os.PathLike | None = None, devices: int | None = None, resume: bool = False,
              quiet: bool = False, plots: bool = True, **train_kwargs: Any):
    """Trains every member of ``spec`` as one compiled program and summarises the results.

    Args:
        config: the base config (``num_devices`` must be 1: members are single-device runs).
        spec: what to sweep.
        env: an env object (default ``rljax.make(config.env, **config.env_kwargs)``); recorded in
            ``config.json`` as :func:`rljax.training.loop.train` records it.
        env_params: base env params (default ``env.default_params``), with ``config.env_params``
            applied; members' ``env.<param>`` values are applied over them.
        run_dir: the sweep directory (None: in memory, no files; the ranking is still returned and,
            unless ``quiet``, printed).
        devices: devices to split the population over (the member count must be a multiple); None:
            as many of this process's devices as divide the member count
            (:func:`rljax.training.population.auto_devices`).
        resume: continue the sweep in ``run_dir`` from its newest checkpoint.
        quiet: no progress lines or summary print.
        plots: write learning-curve PNGs.
        **train_kwargs: passed to :func:`rljax.training.loop.train` (checkpoint_every, ...).

    Returns:
        ``(result, members, aggregate)``: the :class:`~rljax.training.loop.TrainResult` (with
        ``member_rows``), the members, and the ranked per-config aggregate.
    """
    from rljax.core import registry as env_registry
    from rljax.runtime.determinism import request_deterministic
    from rljax.store.rundir import saved_env

    # Before anything starts JAX: XLA reads the deterministic flags only then.
    request_deterministic(train_kwargs.get("deterministic", "auto"))
    config = swept_ranges_drawn(config, spec)
    config, env, env_params = env_registry.resolve_run(
        config, env, env_params, record=not (resume and run_dir is not None and saved_env(run_dir) == config.env),
        run_dir=run_dir)
    members = build_members(config, env_params, spec)
    trials = None
    if spec.halving is not None:  # the members are slots that train the space's trials in turn
        trials, members = members, _halving_slots(spec, members)
    if devices is None:
        import jax

        from rljax.training.population import auto_devices

        # Several processes: a population spans every process's devices (rljax.runtime.distributed).
        devices = auto_devices(len(members), jax.device_count() if jax.process_count() > 1
                               else len(jax.local_devices()))
    if trials is None:
        population = make_population(config, env_params, members, devices)
    else:
        from rljax.training.hooks.halving import trial_order
        from rljax.training.population import Population

        first = [trials[t] for t in trial_order(len(trials), spec.halving.seed)[:len(members)]]
        population = Population.stack([_member_config(config, m) for m in first],
                                      [_member_env_params(env_params, m) for m in first],
                                      [m.name for m in members], devices)
        population = dataclasses.replace(population, halving=spec.halving,
                                         trials=make_population(config, env_params, trials))
    if spec.pbt is not None:
        from rljax.training.hooks.pbt import validate_pbt

        validate_pbt(spec.pbt, config, len(members))
        population = dataclasses.replace(population, pbt=spec.pbt)
    import contextlib

    from rljax.runtime.distributed import is_leader
    from rljax.store.rundir import removed_if_start_fails
    from rljax.store.runlock import RunLock

    leader = run_dir is not None and is_leader()
    with removed_if_start_fails(run_dir if leader and not resume else None), \
            RunLock(run_dir) if leader else contextlib.nullcontext():
        return _run_sweep(config, spec, env, env_params, members, population, run_dir, resume, quiet, plots,
                          train_kwargs, trials)


def _halving_slots(spec: SweepSpec, trials: list[Member]) -> list[Member]:
    """The members of a halving sweep: ``spec.halving.slots`` slots (``slot00``, ...), each training
    the space's ``trials`` in turn (so a slot has no config of its own: ``values`` is empty)."""
    from rljax.training.hooks.halving import validate_halving

    if spec.pbt is not None:
        raise ValueError("--halving and --pbt are two ways to spend a sweep's budget: give one of them")
    validate_halving(spec.halving, len(trials))
    return [Member(index=i, seed=0, values={}, name=f"slot{i:02d}", label=f"slot{i:02d}")
            for i in range(spec.halving.slots)]


def _summary_files(config: Any, spec: SweepSpec, run_dir: pathlib.Path, members: Any, trials: Any,
                   history: list[list[dict[str, Any]]], plots: bool, quiet: bool) -> list[dict[str, Any]]:
    """A finished sweep's ``summary.*`` and plots from its members' ``history`` (:func:`summarize`; a halving
    sweep's trials, :func:`rljax.training.halving_summary.summarize_halving`; a PBT sweep's note)."""
    with open(os.devnull, "w") as devnull:
        if trials is None:
            agg = summarize(run_dir, members, history, plots=plots, stream=devnull if quiet else None)
        else:
            from rljax.training.halving_summary import summarize_halving

            schedule = json.loads((run_dir / "halving.json").read_text())
            agg = summarize_halving(run_dir, trials, history, schedule, plots=plots, stream=devnull if quiet else None)
    if spec.pbt is not None:
        from rljax.training.hooks.pbt import EVAL_SCORE, TRAIN_SCORE

        ranked_by = EVAL_SCORE if getattr(config, "eval_interval", 0) > 0 else TRAIN_SCORE
        with open(run_dir / "summary.md", "a") as f:
            f.write("\nPopulation-based training: each config is a member's *starting* point; members were "
                    f"replaced by copies of better ones (ranked by `{ranked_by}` of the chunk, ties by their "
                    "lineage's AUC) and their hyperparameters perturbed during training (every step, with the "
                    "resulting values, is in `pbt.jsonl`).\n")
    return agg


def _run_sweep(config: Any, spec: SweepSpec, env: Any, env_params: Any, members: Any, population: Any,
               run_dir: Any, resume: bool, quiet: bool, plots: bool, train_kwargs: dict[str, Any],
               trials: list[Member] | None = None):
    """:func:`run_sweep` inside the sweep directory's lock."""
    from rljax.runtime.distributed import is_leader
    from rljax.training.loop import train
    from rljax.training.options import RunOptions
    from rljax.runtime.determinism import determinism_record
    from rljax.store.tracking import config_to_dict, manifest

    leader = is_leader()  # several processes: process 0 writes the sweep directory, the others only read it
    quiet = quiet or not leader
    if run_dir is not None:
        run_dir = pathlib.Path(run_dir)
        if leader:
            run_dir.mkdir(parents=True, exist_ok=True)
        sweep_record = {"spec": dataclasses.asdict(spec), "devices": population.num_devices,
                        "members": [dataclasses.asdict(m) for m in members]}
        if trials is not None:
            sweep_record["trials"] = [dataclasses.asdict(m) for m in trials]
        if resume:
            saved = json.loads((run_dir / "sweep.json").read_text())
            if saved["members"] != sweep_record["members"] or saved.get("trials") != sweep_record.get("trials"):
                raise ValueError(f"cannot resume {run_dir}: the sweep's members differ from the saved sweep.json")
        elif leader:
            if (run_dir / "sweep.json").exists():
                raise FileExistsError(f"{run_dir} already holds a sweep; resume it or choose a new --run-dir")
            (run_dir / "sweep.json").write_text(json.dumps(sweep_record, indent=2))
            (run_dir / "config.json").write_text(json.dumps(config_to_dict(config), indent=2))
            (run_dir / "manifest.json").write_text(json.dumps(
                manifest(config, config.seed, {"algorithm": type(config).__name__, "sweep": True, "members": len(members),
                                                "determinism": determinism_record(train_kwargs.get("deterministic", "auto"))}),
                indent=2, default=str))
    t0 = time.perf_counter()
    result = train(config, env, env_params, options=RunOptions(run_dir=run_dir, resume=resume, quiet=quiet,
                                                               population=population, **train_kwargs))
    agg = []
    if result.preempted is None:
        if run_dir is not None and leader:
            # From the members' metrics.jsonl, not this process's rows: a resumed sweep summarises
            # its whole history.
            from rljax.store.tracking import read_metrics

            t_summary = time.perf_counter()
            history = [read_metrics(run_dir / "members" / m.name) for m in members]
            agg = _summary_files(config, spec, run_dir, members, trials, history, plots, quiet)
            result.timings["summary_s"] = time.perf_counter() - t_summary
        elif trials is not None:
            from rljax.training.halving_summary import halving_table

            agg, table = halving_table(trials, result.member_rows, result.checkpoint_meta["halving"])
            if not quiet:
                print(table, flush=True)
        else:  # no files to write, but the ranking is still the point of a sweep
            agg, table = ranking_table(members, result.member_rows)
            if not quiet:
                print(table, flush=True)
        t = result.timings
        ran = len(result.rows) * t["updates_per_chunk"] * (t["total_env_steps"] // t["num_updates"]) * len(members)
        result.timings["population_sps"] = ran / max(t["compute_s"], 1e-9)
        if not quiet:
            print(f"sweep: {len(members)} members, {ran:,} env steps in {t['compute_s']:.1f}s "
                  f"({result.timings['population_sps']:,.0f} env steps/s in all), compile {t['compile_s']:.1f}s, "
                  + (f"summary and plots {t['summary_s']:.1f}s, " if "summary_s" in t else "") +
                  f"total {time.perf_counter() - t0:.1f}s" + (f"; results in {run_dir}" if run_dir else ""))
    return result, members, agg
