"""A bench's spec (``SPEC.toml``): which algorithms on which envs, with how many seeds and env steps,
evaluated how, and scored against which references.

::

    name = "classic"
    seeds = 3                    # each cell runs seeds 0 .. seeds-1 as one compiled sweep
    total_timesteps = 100_000    # env steps per run (an env may set its own)

    [evaluation]
    episodes = 16                # greedy episodes per evaluation (the configs' eval_episodes)
    interval = 1                 # evaluate every this many chunks and after the last (eval_interval)
    last = 3                     # a run's score: the mean of its last `last` evaluations
    random_episodes = 100        # episodes of the uniform random policy that give an env's random score

    [algorithms.ppo]             # config overrides of an algorithm (any field of its config class)
    num_envs = 8

    [algorithms.dqn]
    total_timesteps = 50_000     # optional: this algorithm's budget (e.g. its published protocol's)

    [algorithms.rainbow]         # a named variant: `algorithm` is the registered algorithm it configures
    algorithm = "c51"
    noisy = true

    [envs."CartPole-v1"]
    params = { length = 0.5 }    # env param overrides (as --env-param)
    reference = 500.0            # the score normalised to 1
    citation = "the env's maximum return (500 steps of reward 1)"
    algorithms = ["ppo"]         # optional: the algorithms that run on this env (default: all)
    total_timesteps = 200_000    # optional: this env's budget

An ``[algorithms.NAME]`` table's name is what the report calls the algorithm; ``algorithm`` (default:
``NAME``) is the registered algorithm whose config it overrides, so one spec can compare variants of
one algorithm (DQN beside Rainbow's C51, PPO at two learning rates) as different algorithms.

A cell is one (algorithm, env) pair. Its runs' budget (env steps per run) is the first of these that is
set: the env's own ``total_timesteps``, the algorithm's (``[algorithms.X]``), the spec's. The env's
comes first because an env sets one for what the task needs or for the budget its reference score
was measured at, and the reference is what every algorithm on that env is normalised by; the
algorithm's comes next because it states that algorithm's own protocol (the MinAtar paper's DQN at
5e6 env steps beside PPO and PQN at 1e7) on every env that states none; the spec's is the default.
:func:`narrow`'s ``total_timesteps`` (``--total-timesteps``) replaces all three. Every budget is a
positive whole number (``5e6`` is read as 5,000,000).

:func:`load_spec` reads a file or a shipped suite's name
(``rljax/bench/suites/<name>.toml``), :func:`narrow` applies the command line's narrowing and
overrides, and :func:`check_spec` refuses, before anything runs, a spec that cannot run: an
unknown algorithm, env or config field, a field value the algorithm's config rejects, an env param
the env lacks, seeds < 1, a budget that is not a positive whole number, a cell whose algorithm does
not fit the env's action space. Each error is a :class:`SpecError` naming the cell and the value.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import math
import pathlib
import tomllib
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["SpecError", "Evaluation", "EnvSpec", "BenchSpec", "Cell", "RESERVED_FIELDS", "BUDGET_FIELD",
           "ALGORITHM_FIELD", "registered_algorithm", "TEXT_KEYS", "load_spec", "parse_spec", "shipped_suites", "narrow", "cell_config", "check_spec", "spec_differences"]

RESERVED_FIELDS = ("env", "env_kwargs", "env_params", "seed", "eval_interval", "eval_episodes")
"""Config fields the bench sets itself (from ``envs``, ``seeds`` and ``evaluation``), which an algorithm
table may not set. ``total_timesteps`` is the bench's too, but an algorithm table may set it: that
algorithm's budget (see the module docstring for the order of the budgets)."""
BUDGET_FIELD = "total_timesteps"

ALGORITHM_FIELD = "algorithm"
"""The key of an ``[algorithms.NAME]`` table that names the registered algorithm it configures (default:
``NAME``)."""
"""The key of a budget: the spec's, an env's or an algorithm's (env steps per run)."""


class SpecError(ValueError):
    """A bench spec that cannot run; the message names the cell (or key) and the bad value."""


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """How runs are evaluated and scored.

    Attributes:
        episodes: greedy episodes per evaluation (``eval_episodes`` of every config).
        interval: evaluate every this many chunks and after the last one (``eval_interval``).
        last: a run's score is the mean greedy return of its last ``last`` evaluations.
        random_episodes: episodes of the uniform random policy behind an env's random score.
    """

    episodes: int = 16
    interval: int = 1
    last: int = 3
    random_episodes: int = 100


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """One env of a bench.

    Attributes:
        id: what the bench calls the env (its table's name): the env name as ``--env`` takes it
            (``rljax envs`` lists them), unless ``env`` names it.
        params: env param overrides, name -> value.
        reference: the score that normalises to 1.
        citation: where ``reference`` comes from (or why it is the env's maximum return).
        algorithms: the algorithms that run on this env; empty: every algorithm of the bench.
        total_timesteps: this env's budget; None: the bench's.
        env: the env name to build, where the table's name is a label of its own (one env with
            other constructor arguments, as SMAX's scenarios); ``""``: ``id``.
        kwargs: the env's constructor keyword arguments (as ``--env-kwarg``), name -> value.
    """

    id: str
    params: Mapping[str, Any]
    reference: float
    citation: str
    algorithms: tuple[str, ...] = ()
    total_timesteps: int | None = None
    env: str = ""
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def registry_name(self) -> str:
        """The env name the cells build (``env``, else ``id``)."""
        return self.env or self.id

    @property
    def construction(self) -> dict[str, Any]:
        """``env`` and ``kwargs`` where set, as saved beside the env (absent when unset, so a spec without
        them saves and keys its random score as before)."""
        return {**({"env": self.env} if self.env else {}), **({"kwargs": dict(self.kwargs)} if self.kwargs else {})}

    @property
    def kwarg_flags(self) -> tuple[str, ...]:
        """``kwargs`` as a config's ``env_kwargs`` (``NAME=VALUE`` strings)."""
        return tuple(f"{k}={v}" for k, v in self.kwargs.items())


@dataclasses.dataclass(frozen=True)
class Cell:
    """One (algorithm, env) pair: a sweep over the bench's seeds.

    Attributes:
        algorithm: the registered algorithm's name.
        env: the :class:`EnvSpec`.
        total_timesteps: the budget of each of its runs.
    """

    algorithm: str
    env: EnvSpec
    total_timesteps: int

    @property
    def name(self) -> str:
        """``algorithm/env``, as errors and progress lines name the cell."""
        return f"{self.algorithm}/{self.env.id}"


@dataclasses.dataclass(frozen=True)
class BenchSpec:
    """A whole bench (see the module docstring for the TOML form).

    Attributes:
        name: the bench's name.
        algorithms: algorithm name -> its config overrides; ``total_timesteps`` among them is that
            algorithm's budget (:meth:`budget`).
        envs: the envs, in order.
        seeds: runs per cell (seeds ``0 .. seeds-1``).
        total_timesteps: env steps per run unless an env or an algorithm sets its own.
        evaluation: the evaluation protocol.
        description: free text.
    """

    name: str
    algorithms: Mapping[str, Mapping[str, Any]]
    envs: tuple[EnvSpec, ...]
    seeds: int
    total_timesteps: int
    evaluation: Evaluation = Evaluation()
    description: str = ""

    def budget(self, algorithm: str, env: EnvSpec) -> int:
        """The env steps per run of the cell (``algorithm``, ``env``): the env's own budget, else the
        algorithm's, else the spec's."""
        if env.total_timesteps is not None:
            return env.total_timesteps
        own = self.algorithms[algorithm].get(BUDGET_FIELD)
        if own is None:
            return self.total_timesteps
        return _whole(own, f"cell {algorithm}/{env.id}: algorithms.{algorithm}.{BUDGET_FIELD}")

    def cells(self) -> list[Cell]:
        """The cells, env by env, each env's algorithms in the spec's order."""
        out = []
        for env in self.envs:
            for algo in self.algorithms:
                if not env.algorithms or algo in env.algorithms:
                    out.append(Cell(algo, env, self.budget(algo, env)))
        return out

    def to_dict(self) -> dict[str, Any]:
        """The spec as JSON-ready data (``bench.json``); :func:`parse_spec` reads it back."""
        return {"name": self.name, "description": self.description, "seeds": self.seeds,
                "total_timesteps": self.total_timesteps, "evaluation": dataclasses.asdict(self.evaluation),
                "algorithms": {a: dict(o) for a, o in self.algorithms.items()},
                "envs": {e.id: {"params": dict(e.params), "reference": e.reference, "citation": e.citation,
                                "algorithms": list(e.algorithms), "total_timesteps": e.total_timesteps,
                                **e.construction}
                         for e in self.envs}}


def _whole(value: Any, what: str, low: int = 1) -> int:
    """``value`` as an int >= ``low``; a :class:`SpecError` naming ``what`` otherwise."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise SpecError(f"{what} must be a whole number >= {low}, got {value!r}")
    return value


def _table(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise SpecError(f"{what} must be a table, got {value!r}")
    return dict(value)


def _unknown_keys(table: Mapping[str, Any], known: Sequence[str], what: str) -> None:
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise SpecError(f"{what}: unknown key {unknown[0]!r}; known keys: {', '.join(known)}")


def _env_spec(env_id: str, table: Any) -> EnvSpec:
    what = f'envs."{env_id}"'
    table = _table(table, what)
    _unknown_keys(table, ("params", "reference", "citation", "algorithms", "total_timesteps", "env", "kwargs"), what)
    env = table.get("env", "")
    if not isinstance(env, str) or (not env.strip() and "env" in table):
        raise SpecError(f"{what}.env must be an env name (as --env takes it), got {env!r}")
    kwargs = _table(table.get("kwargs", {}), f"{what}.kwargs")
    for name in kwargs:
        if not name.isidentifier():
            raise SpecError(f"{what}.kwargs: {name!r} is not a keyword argument name")
    reference = table.get("reference")
    if isinstance(reference, bool) or not isinstance(reference, (int, float)) or not math.isfinite(reference):
        raise SpecError(f"{what}.reference must be a finite number (the score normalised to 1), got {reference!r}")
    citation = table.get("citation")
    if not isinstance(citation, str) or not citation.strip():
        raise SpecError(f"{what}.citation must be a non-empty string (where the reference score comes from), "
                        f"got {citation!r}")
    algorithms = table.get("algorithms", [])
    if not isinstance(algorithms, list) or not all(isinstance(a, str) for a in algorithms):
        raise SpecError(f"{what}.algorithms must be a list of algorithm names, got {algorithms!r}")
    budget = table.get("total_timesteps")
    return EnvSpec(env_id, _table(table.get("params", {}), f"{what}.params"), float(reference), citation,
                   tuple(algorithms), None if budget is None else _whole(budget, f"{what}.total_timesteps"),
                   env=env, kwargs=kwargs)


def parse_spec(data: Mapping[str, Any], name: str = "bench") -> BenchSpec:
    """The :class:`BenchSpec` of a parsed TOML document (or of ``bench.json``'s data).

    Checks the document's shape (keys, types, counts); :func:`check_spec` checks it against the
    registered algorithms and envs.

    Raises:
        SpecError: naming the key and the bad value.
    """
    data = _table(data, "the spec")
    _unknown_keys(data, ("name", "description", "seeds", "total_timesteps", "evaluation", "algorithms", "envs"),
                  "the spec")
    evaluation = _table(data.get("evaluation", {}), "evaluation")
    _unknown_keys(evaluation, [f.name for f in dataclasses.fields(Evaluation)], "evaluation")
    evaluation = Evaluation(**{k: _whole(v, f"evaluation.{k}") for k, v in evaluation.items()})
    algorithms = _table(data.get("algorithms"), "algorithms")
    if not algorithms:
        raise SpecError("algorithms: the spec names no algorithm; add a table [algorithms.NAME] "
                        "(e.g. [algorithms.ppo])")
    algorithms = {a: _table(o, f"algorithms.{a}") for a, o in algorithms.items()}
    envs = _table(data.get("envs"), "envs")
    if not envs:
        raise SpecError('envs: the spec names no env; add a table [envs."ID"] with reference and citation')
    if "seeds" not in data or "total_timesteps" not in data:
        raise SpecError(f"the spec needs seeds and total_timesteps; it has {sorted(data)}")
    env_specs = tuple(_env_spec(k, v) for k, v in envs.items())
    for algo, table in algorithms.items():
        if BUDGET_FIELD in table:
            table[BUDGET_FIELD] = _algorithm_budget(algo, table[BUDGET_FIELD], env_specs)
    return BenchSpec(name=str(data.get("name", name)), algorithms=algorithms, envs=env_specs,
                     seeds=_whole(data["seeds"], "seeds"),
                     total_timesteps=_whole(data["total_timesteps"], "total_timesteps"), evaluation=evaluation,
                     description=str(data.get("description", "")))


def _algorithm_budget(algorithm: str, value: Any, envs: Sequence[EnvSpec]) -> int:
    """An ``[algorithms.X]`` table's ``total_timesteps`` as an int; a :class:`SpecError` naming the key,
    the value and the cells it is the budget of otherwise."""
    try:
        return _whole(value, f"algorithms.{algorithm}.{BUDGET_FIELD}")
    except SpecError as err:
        cells = [f"{algorithm}/{e.id}" for e in envs
                 if e.total_timesteps is None and (not e.algorithms or algorithm in e.algorithms)]
        raise SpecError(f"{err} (the budget of {'cells ' + ', '.join(cells) if cells else 'no cell'}"
                        f"{'' if cells else ': every env of the algorithm sets its own'})") from None


def shipped_suites() -> list[str]:
    """The names of the suites shipped in ``rljax/bench/suites/``."""
    root = importlib.resources.files("rljax.bench") / "suites"
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".toml"))


def load_spec(source: str | pathlib.Path) -> BenchSpec:
    """The spec of a TOML file, or of a shipped suite named ``source`` (:func:`shipped_suites`).

    Raises:
        SpecError: no such file or suite, a TOML syntax error, or a bad document (:func:`parse_spec`).
    """
    path = pathlib.Path(source)
    if not path.is_file():
        if str(source) not in shipped_suites():
            raise SpecError(f"bench spec {str(source)!r} is neither a file nor a shipped suite; suites: "
                            f"{', '.join(shipped_suites())}")
        text = (importlib.resources.files("rljax.bench") / "suites" / f"{source}.toml").read_text(encoding="utf-8")
    else:
        text = path.read_text(encoding="utf-8")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise SpecError(f"bench spec {str(source)!r}: {err}") from None
    return parse_spec(data, name=path.stem)


def _subset(names: Sequence[str], known: Sequence[str], what: str) -> list[str]:
    for n in names:
        if n not in known:
            raise SpecError(f"--{what} {n!r}: not in the spec; its {what}: {', '.join(known)}")
    return list(names)


def narrow(spec: BenchSpec, *, algorithms: Sequence[str] | None = None, envs: Sequence[str] | None = None,
           seeds: int | None = None, total_timesteps: Any = None) -> BenchSpec:
    """``spec`` narrowed to some algorithms and envs, with its seeds and budget overridden.

    ``total_timesteps`` replaces the bench's budget and every env's and algorithm's own. Narrowed to some
    algorithms, an env that lists its algorithms keeps those kept, and one left with none is dropped.

    Raises:
        SpecError: a name not in the spec, seeds < 1, a budget that is not a whole number >= 1.
    """
    out = spec
    if algorithms is not None:
        keep = _subset(algorithms, list(spec.algorithms), "algorithms")
        # An env that lists its algorithms keeps the kept ones; one left with none of them leaves the bench.
        kept_envs = tuple(dataclasses.replace(e, algorithms=tuple(a for a in e.algorithms if a in keep))
                          for e in out.envs if not e.algorithms or any(a in keep for a in e.algorithms))
        out = dataclasses.replace(out, algorithms={a: spec.algorithms[a] for a in keep}, envs=kept_envs)
    if envs is not None:
        keep = _subset(envs, [e.id for e in spec.envs], "envs")
        out = dataclasses.replace(out, envs=tuple(e for e in out.envs if e.id in keep))
    if seeds is not None:
        out = dataclasses.replace(out, seeds=_whole(seeds, "--seeds"))
    if total_timesteps is not None:
        budget = _whole(total_timesteps, "--total-timesteps")
        out = dataclasses.replace(out, total_timesteps=budget,
                                  envs=tuple(dataclasses.replace(e, total_timesteps=None) for e in out.envs),
                                  algorithms={a: {k: v for k, v in o.items() if k != BUDGET_FIELD}
                                              for a, o in out.algorithms.items()})
    return out


def registered_algorithm(spec: BenchSpec, name: str) -> str:
    """The registered algorithm that the spec's algorithm ``name`` configures (its ``algorithm`` key,
    or ``name`` itself)."""
    return spec.algorithms[name].get(ALGORITHM_FIELD, name)


def cell_config(spec: BenchSpec, cell: Cell) -> Any:
    """The base config of ``cell``'s sweep (seed 0; the sweep adds the others), validated.

    Raises:
        SpecError: an unknown or reserved field, or a value the config rejects, naming the cell.
    """
    from rljax import agents

    config_cls = agents.algorithms()[registered_algorithm(spec, cell.algorithm)].config_cls
    overrides = dict(spec.algorithms[cell.algorithm])
    overrides.pop(BUDGET_FIELD, None)  # the algorithm's budget: cell.total_timesteps has applied it
    overrides.pop(ALGORITHM_FIELD, None)
    names = [f.name for f in dataclasses.fields(config_cls)]
    for key in overrides:
        if key in RESERVED_FIELDS:
            raise SpecError(f"cell {cell.name}: algorithms.{cell.algorithm}.{key} is set by the bench (env, "
                            f"env params, seeds, evaluation); remove it")
        if key not in names:
            raise SpecError(f"cell {cell.name}: {key!r} is not a field of {config_cls.__name__}; its fields: "
                            + ", ".join(n for n in names if n not in RESERVED_FIELDS))
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in overrides.items()}
    try:
        config = config_cls(**values, env=cell.env.registry_name, env_kwargs=cell.env.kwarg_flags, seed=0,
                            total_timesteps=cell.total_timesteps,
                            eval_interval=spec.evaluation.interval, eval_episodes=spec.evaluation.episodes,
                            env_params=tuple(f"{k}={v}" for k, v in cell.env.params.items()))
        config.validate()
    except (ValueError, TypeError) as err:
        raise SpecError(f"cell {cell.name}: {err}") from None
    return config


def _check_env(env_spec: EnvSpec, algorithms: Mapping[str, str]) -> None:
    """Builds the env, applies its params and checks each algorithm's action-space rule
    (``algorithms``: the spec's name -> the registered algorithm)."""
    from rljax import agents
    from rljax.core import registry

    try:
        env, params = registry.make(env_spec.registry_name,
                                    **registry.parse_env_kwargs(list(env_spec.kwarg_flags)))
    except Exception as err:  # noqa: BLE001 - any failure to build: the spec names an env that cannot run here
        raise SpecError(f'envs."{env_spec.id}": cannot build it ({type(err).__name__}: {err}); `rljax envs` lists '
                        f"the envs") from None
    try:
        params, _ = registry.parse_env_params([f"{k}={v}" for k, v in env_spec.params.items()], params)
    except ValueError as err:
        raise SpecError(f'envs."{env_spec.id}".params: {err}') from None
    for algo, registered in algorithms.items():
        if not agents.fits_env(registered, env, params):
            fits = [a for a in agents.algorithms() if agents.fits_env(a, env, params)]
            which = algo if registered == algo else f"{algo} ({registered})"
            raise SpecError(f"cell {algo}/{env_spec.id}: {which} does not fit the env's action space "
                            f"{env.action_space(params)}; algorithms that fit it: {', '.join(fits)} (list the env's "
                            f"algorithms in its `algorithms` key)")


def check_spec(spec: BenchSpec) -> list[Any]:
    """Checks every cell of ``spec`` before anything runs; returns each cell's base config.

    Raises:
        SpecError: the first problem, naming the cell (``algorithm/env``) and the bad value.
    """
    from rljax import agents

    known = agents.algorithms()
    for algo, table in spec.algorithms.items():
        registered = table.get(ALGORITHM_FIELD, algo)
        where = f"algorithms.{algo}" + (f".{ALGORITHM_FIELD}" if ALGORITHM_FIELD in table else "")
        if not isinstance(registered, str) or registered not in known:
            raise SpecError(f"{where}: unknown algorithm {registered!r}; registered: {', '.join(known)}")
    for env in spec.envs:
        for algo in env.algorithms:
            if algo not in spec.algorithms:
                raise SpecError(f'envs."{env.id}".algorithms: {algo!r} is not one of the bench\'s algorithms '
                                f"({', '.join(spec.algorithms)})")
    cells = spec.cells()
    if not cells:
        raise SpecError("the spec has no cell: no env runs any of its algorithms")
    for env in spec.envs:
        _check_env(env, {c.algorithm: registered_algorithm(spec, c.algorithm) for c in cells if c.env.id == env.id})
    return [cell_config(spec, c) for c in cells]


TEXT_KEYS = ("description", "citation")
"""Keys of a spec that describe it without changing what runs: a bench continues when only they change."""


def spec_differences(saved: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "",
                     ignore: Sequence[str] = ()) -> list[str]:
    """Where two :meth:`BenchSpec.to_dict` records differ: ``"key.path: saved -> new"`` lines, leaving
    out keys named in ``ignore`` (at any depth, e.g. :data:`TEXT_KEYS`)."""
    out = []
    for key in sorted(set(saved) | set(new), key=str):
        if key in ignore:
            continue
        a, b = saved.get(key, "<absent>"), new.get(key, "<absent>")
        path = f"{prefix}{key}"
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out += spec_differences(a, b, path + ".", ignore)
        elif a != b:
            out.append(f"{path}: {a!r} -> {b!r}")
    return out
