"""Config conventions shared by every algorithm.

Each algorithm has one frozen dataclass. Every field is declared with :func:`field`, which records a
help line (shown by ``--help`` and in the docs) and whether the field is **sweepable**: a traced
hyperparameter that lives in the train state, so one compiled program can vmap over its values.
Everything else is **structural** (shapes, loop lengths, network sizes): changing it changes the
program. :class:`RunConfig` holds the fields every algorithm shares (env, seed, budget, devices).

Validation is in two steps, both raising one ``ValueError`` (a single line naming the field, the
bad value and what is valid). First :func:`check_types` checks every field against its declared
type; then each config's ``validate()`` checks the ranges, with :func:`check_ints`,
:func:`check_floats`, :func:`check_choice` and :func:`check_sizes`. The type check runs first, so a
range check never meets a string, None or NaN.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable, Collection
from typing import Any

__all__ = ["field", "hyperparams_class", "make_hyperparams", "sweepable_fields", "RunConfig", "BACKENDS", "MAX_SEED",
           "MAX_ENV_STEPS", "MAX_STEPS_PER_UPDATE", "FLOAT32_MAX", "NONFINITE_ACTIONS", "check_types", "check_ints",
           "check_floats", "check_choice", "check_sizes", "check_env_steps_per_update", "require", "config_from_dict",
           "TOTAL_TIMESTEPS_HELP", "ENV_RANGES"]

BACKENDS = ("shard_map", "pmap")
NONFINITE_ACTIONS = ("stop", "rollback")

MAX_SEED = 2**32 - 1
"""The largest seed. ``jax.random.key`` keeps only the low 32 bits of a seed (``key(2**32)`` is
``key(0)``) and a sweep stacks its members' seeds as uint32, so 0 .. 2**32 - 1 are the seeds that
give distinct keys, the same in a single run and in a sweep."""

MAX_ENV_STEPS = 2**53
"""The most env steps a run (``total_timesteps``) may take. The train state counts updates and env
steps exactly in :class:`~rljax.core.counters.Count` words (to 2**64), and the loop's plan rounds a
run up to whole chunks, which less than doubles it; 2**53 keeps every env-step count exact as a
float64 too, as JSON readers, tensorboard and trackers hold it. ``learning_starts`` shares the bound."""

MAX_STEPS_PER_UPDATE = 2**30
"""The most env steps one update may collect (``num_envs * num_steps``), and the bound of a replay
capacity and of ``target_update_interval``: these are array sizes, int32 slot indices and the
modulus of an exact int32 remainder inside the compiled update."""

FLOAT32_MAX = 3.4028234663852886e38
"""The largest float32: hyperparameters become float32 scalars, so larger values would be inf."""

TOTAL_TIMESTEPS_HELP = (
    "environment steps to train for, at most 2**53. The run does total_timesteps // (env steps per update) "
    "updates (at least 1), rounded up to a whole number of equal chunks (rljax.training.program.plan_updates), so it may run "
    "up to one update per chunk more")
"""The help line of ``total_timesteps``, shared by every config that redeclares the field: it says what
:func:`rljax.training.program.plan_updates` does with the number."""

_WHY_STEPS = "(2**53: env-step counts stay exact as float64 in the rows and trackers)"
_WHY_PER_UPDATE = "(2**30: array sizes and int32 indices inside the compiled update)"
_WHY_SEED = "(jax.random.key keeps a seed's low 32 bits and sweep seeds are uint32)"


def field(default: Any, help: str, *, sweepable: bool = False, flag: str | None = None) -> Any:  # noqa: A002
    """A dataclass field with a help line; ``sweepable=True`` marks a traced hyperparameter.

    ``flag`` names the command-line flag when it is not ``--<field-name>`` (which is then an alias);
    a ``tuple[str, ...]`` field's flag is repeatable, each use adding one entry.
    """
    return dataclasses.field(default=default, metadata={"help": help, "sweepable": sweepable, "flag": flag})


def sweepable_fields(config_cls: Any) -> tuple[str, ...]:
    """Names of the fields a sweep may vary (traced hyperparameters), in declaration order."""
    return tuple(f.name for f in dataclasses.fields(config_cls) if f.metadata.get("sweepable"))


ENV_RANGES = "env_ranges"
"""The hyperparameters' field holding the domain-randomisation bounds (not a config field)."""


@functools.cache
def hyperparams_class(config_cls: type) -> type:
    """The traced hyperparameters of ``config_cls`` as a pytree class, ``<Algo>HyperParams``.

    A ``flax.struct.PyTreeNode`` with one ``jax.Array`` field (a float32 scalar in the train state)
    per sweepable field of the config, in the config's declaration order. It is derived from the
    config, so the two can never disagree: adding ``sweepable=True`` to a field is all it takes to
    make it traced (and so sweepable, perturbable by PBT and saved in checkpoints).
    """
    import jax
    from flax import struct

    names = sweepable_fields(config_cls)
    name = config_cls.__name__.removesuffix("Config") + "HyperParams"
    namespace = {
        "__annotations__": {**{n: jax.Array for n in names}, ENV_RANGES: Any}, ENV_RANGES: None,
        "__module__": config_cls.__module__, "__qualname__": name,
        "__doc__": f"The sweepable fields of ``{config_cls.__name__}`` as float32 scalars in the train state "
                   f"({', '.join(names) or 'none'}): a sweep vmaps over them and PBT perturbs them. "
                   f"``{ENV_RANGES}``: the bounds of the config's ``randomize`` ranges, float32 ``[R, 2]`` "
                   f"(``rljax.core.wrappers.range_bounds``), so a sweep can vary them too; None without ranges."}
    return type(name, (struct.PyTreeNode,), namespace)


def make_hyperparams(config: Any, hyperparams_cls: Any) -> Any:
    """The traced hyperparameters of ``config``: one float32 scalar per sweepable field.

    ``hyperparams_cls`` (a ``flax.struct.PyTreeNode``) must have exactly the config's sweepable
    fields, so the two declarations cannot drift apart.
    """
    import jax.numpy as jnp

    names = tuple(n for n in hyperparams_cls.__dataclass_fields__ if n != ENV_RANGES)
    if set(names) != set(sweepable_fields(type(config))):
        raise TypeError(f"{hyperparams_cls.__name__} fields {sorted(names)} differ from the sweepable fields of "
                        f"{type(config).__name__} {sorted(sweepable_fields(type(config)))}")
    values = {k: jnp.float32(getattr(config, k)) for k in names}
    if ENV_RANGES in hyperparams_cls.__dataclass_fields__:
        from rljax.core.wrappers import range_bounds

        bounds = range_bounds(getattr(config, "randomize", ()))
        values[ENV_RANGES] = None if bounds is None else jnp.asarray(bounds)
    return hyperparams_cls(**values)


def require(cond: bool, message: str) -> None:
    """Raises ``ValueError(message)`` unless ``cond``: the one-line check behind every range rule
    (the message names the field, the bad value and what would be valid)."""
    if not cond:
        raise ValueError(message)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_float(v: Any) -> bool:
    # abs(v) <= FLOAT32_MAX is False for NaN and inf, and compares huge ints exactly.
    return isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) <= FLOAT32_MAX


def _type_rule(declared: Any) -> tuple[Callable[[Any], bool], str] | None:
    """``(accepts, description)`` for a declared field type, or None for a type with no rule."""
    if declared is bool:
        return (lambda v: isinstance(v, bool)), "a bool (True or False)"
    if declared is int:
        return _is_int, "an integer (not a bool or float)"
    if declared is float:
        return _is_float, f"a finite number (an int or float, |x| <= {FLOAT32_MAX:.4g}, the float32 range)"
    if declared is str:
        return (lambda v: isinstance(v, str)), "a string"
    if typing.get_origin(declared) is tuple and typing.get_args(declared) == (int, ...):
        return (lambda v: isinstance(v, tuple) and all(_is_int(h) for h in v)), "a tuple of integers, e.g. (64, 64)"
    if typing.get_origin(declared) is tuple and typing.get_args(declared) == (str, ...):
        return (lambda v: isinstance(v, tuple) and all(isinstance(h, str) for h in v)), \
            "a tuple of strings, e.g. ('length=0.7',)"
    return None


@functools.cache
def _field_rules(config_cls: type) -> tuple[tuple[str, Callable[[Any], bool], str], ...]:
    hints = typing.get_type_hints(config_cls)
    rules = []
    for f in dataclasses.fields(config_cls):
        rule = _type_rule(hints.get(f.name))
        if rule is None:
            raise TypeError(f"{config_cls.__name__}.{f.name} is declared as {hints.get(f.name)!r}; config fields "
                            "must be bool, int, float, str, tuple[int, ...] or tuple[str, ...] (rljax.core.config.check_types)")
        rules.append((f.name, *rule))
    return tuple(rules)


def check_types(config: Any) -> None:
    """Checks every field of ``config`` against its declared type.

    ``int`` fields take ints (not bools or floats); ``float`` fields take finite ints or floats
    within the float32 range (not bools, strings, None, NaN or inf); ``bool`` fields take bools;
    ``str`` fields take strings; ``tuple[int, ...]`` fields take tuples of ints and
    ``tuple[str, ...]`` fields tuples of strings. A field of any
    other declared type is a ``TypeError`` in the config class itself.

    Raises:
        ValueError: naming the first bad field, its value and type, and what it must be.
    """
    for name, accepts, description in _field_rules(type(config)):
        value = getattr(config, name)
        require(accepts(value), f"{name} must be {description}, got {value!r} ({type(value).__name__})")


def check_ints(config: Any, names: Collection[str], low: int = 1, high: int | None = None, why: str = "") -> None:
    """Checks that each int field in ``names`` lies in ``[low, high]`` (``high=None``: no upper bound).

    ``why`` (e.g. where the upper bound comes from) is appended to the message of a value above it.
    """
    for name in names:
        v = getattr(config, name)
        if v < low:
            raise ValueError(f"{name} must be a positive integer, got {v!r}" if low == 1
                             else f"{name} must be an integer >= {low}, got {v!r}")
        require(high is None or v <= high,
                 f"{name} must be an integer in [{low}, {high}], got {v!r}" + (f" {why}" if why else ""))


def check_floats(config: Any, names: Collection[str], low: float | None = None, high: float | None = None, *,
                 low_open: bool = False, high_open: bool = False) -> None:
    """Checks that each (finite) float field in ``names`` lies between ``low`` and ``high``.

    ``low_open`` / ``high_open`` exclude the bound itself: ``low=0, low_open=True`` is ``> 0``.
    """
    for name in names:
        v = getattr(config, name)
        above = low is None or (v > low if low_open else v >= low)
        below = high is None or (v < high if high_open else v <= high)
        if above and below:
            continue
        if high is None:
            raise ValueError(f"{name} must be {'>' if low_open else '>='} {low:g}, got {v!r}")
        if low is None:
            raise ValueError(f"{name} must be {'<' if high_open else '<='} {high:g}, got {v!r}")
        raise ValueError(f"{name} must be in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}, "
                         f"got {v!r}")


def check_choice(config: Any, name: str, choices: Collection[str]) -> None:
    """Checks that the str field ``name`` is one of ``choices``."""
    v = getattr(config, name)
    require(v in choices, f"{name}={v!r} is not one of {tuple(choices)}")


def check_sizes(config: Any, name: str, *, allow_empty: bool = True) -> None:
    """Checks that the tuple-of-int field ``name`` holds positive sizes (and at least one, unless
    ``allow_empty``: for hidden layers, ``()`` is a linear model)."""
    v = getattr(config, name)
    if allow_empty:
        require(all(h > 0 for h in v), f"{name} must be a tuple of positive ints (or ()), got {v!r}")
    else:
        require(len(v) > 0 and all(h > 0 for h in v), f"{name} must be one or more positive ints, got {v!r}")


def check_env_steps_per_update(env_steps_per_update: int, expression: str) -> None:
    """Checks that one update's env steps (``expression``, e.g. ``"num_envs * num_steps"``) fit
    :data:`MAX_STEPS_PER_UPDATE` (one update's batch is an array of that many transitions)."""
    require(env_steps_per_update <= MAX_STEPS_PER_UPDATE,
             f"{expression} = {env_steps_per_update} env steps per update is more than {MAX_STEPS_PER_UPDATE} "
             f"{_WHY_PER_UPDATE}")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Fields every algorithm's config starts with: what to run, for how long, on what."""

    env: str = field("CartPole-v1", "the environment: a registered name (`rljax envs` lists them), 'gymnax/<id>', "
                                    "a suite's '<suite>/<id>' (craftax/, brax/, navix/, xminigrid/, pgx/), or a user env 'package.module:Name' "
                                    "(a class or factory, imported from the working directory or sys.path)")
    env_kwargs: tuple[str, ...] = field((), "NAME=VALUE keyword argument for the env's constructor or factory (the "
                                            "value read as a Python literal, else a string); repeat for several",
                                        flag="--env-kwarg")
    env_params: tuple[str, ...] = field((), "NAME=VALUE override of a field of the env's default params (cast to the "
                                            "field's type, e.g. length=0.7); repeat for several",
                                        flag="--env-param")
    randomize: tuple[str, ...] = field((), "domain randomisation: NAME=LOW:HIGH (or NAME=log:LOW:HIGH) draws that float "
                                           "env param per episode, at every reset, uniformly (log-uniformly); repeat "
                                           "for several, e.g. length=0.25:2.0. Evaluation uses the params unchanged")
    seed: int = field(0, "PRNG seed in [0, 2**32 - 1]; every key in the run is split from jax.random.key(seed)")
    total_timesteps: int = field(500_000, TOTAL_TIMESTEPS_HELP)
    num_envs: int = field(4, "parallel environments, over all devices")
    num_devices: int = field(1, "devices for the data-parallel learner; the env batch is split over them. On a CPU "
                                "these are N fake devices that share the same cores, so a CPU run does not get "
                                "faster (it is usually slower); use it there to test a multi-device setup")
    backend: str = field("shard_map", "multi-device backend: 'shard_map' (jit + shard_map) or 'pmap'")
    updates_per_chunk: int = field(0, "updates compiled into one chunk between host-loop visits "
                                      "(0: automatic, at most 200 and about 1/10 of the run, preferring a size "
                                      "that divides the run's updates)")
    on_nonfinite: str = field("stop", "when a loss or the train state becomes NaN/inf: 'stop' (exit, the last "
                                      "checkpoint intact) or 'rollback' (restore the last checkpoint with a "
                                      "lower learning rate)")
    max_rollbacks: int = field(3, "with on_nonfinite='rollback': rollbacks before giving up")
    rollback_lr_factor: float = field(0.5, "with on_nonfinite='rollback': each rollback multiplies every "
                                           "learning rate by this factor")
    eval_interval: int = field(0, "evaluate the greedy policy every this many chunks and after the last one "
                                  "(0: never); the results are the eval/* metrics columns")
    eval_episodes: int = field(16, "episodes per evaluation during training (one env each, run in parallel, "
                                   "each to its end or time limit; in a two-player game, games against the random "
                                   "player, half moving first, each scored +1, 0 or -1)")

    def hyperparams(self) -> Any:
        """The traced hyperparameters of this config: ``hyperparams_class(type(self))`` holding one
        float32 scalar per sweepable field."""
        return make_hyperparams(self, hyperparams_class(type(self)))

    def validate_run(self) -> None:
        """Checks the type of every field (of the concrete config class, not only these), then the
        ranges of the shared fields; raises ``ValueError`` naming the bad value and what is valid."""
        check_types(self)
        require(self.env != "", "env must be a non-empty string (a registered rljax env, 'gymnax/<id>', "
                                "'<suite>/<id>' or 'package.module:Name'), got ''")
        for name in ("env_kwargs", "env_params"):
            for spec in getattr(self, name):
                key, sep, _ = spec.partition("=")
                require(bool(sep) and key.strip().isidentifier(),
                        f"{name} entry {spec!r} must be NAME=VALUE with NAME a Python identifier, e.g. "
                        + ("'length=0.7'" if name == "env_params" else "'size=8'"))
        if self.randomize:
            from rljax.core.wrappers import param_ranges

            param_ranges(self.randomize)
        check_ints(self, ("seed",), 0, MAX_SEED, why=_WHY_SEED)
        check_ints(self, ("total_timesteps",), 1, MAX_ENV_STEPS, why=_WHY_STEPS)
        check_ints(self, ("num_envs", "num_devices"))
        check_ints(self, ("updates_per_chunk",), 0)
        check_choice(self, "backend", BACKENDS)
        require(self.num_envs % self.num_devices == 0,
                 f"num_envs={self.num_envs} is not divisible by num_devices={self.num_devices}; "
                 f"use a multiple of {self.num_devices}")
        check_choice(self, "on_nonfinite", NONFINITE_ACTIONS)
        check_ints(self, ("max_rollbacks",), 0)
        check_ints(self, ("eval_interval",), 0)
        check_ints(self, ("eval_episodes",), 1, 1 << 20)
        check_floats(self, ("rollback_lr_factor",), 0.0, 1.0, low_open=True)


def config_from_dict(config_cls: Any, values: dict[str, Any]) -> Any:
    """The ``config_cls`` a saved config dict (``config.json``, a checkpoint's meta) describes.

    JSON lists become tuples; fields the dict lacks (a run saved before they existed) take their
    defaults. Validation errors propagate as ``ValueError``.

    Raises:
        ValueError: the dict names fields ``config_cls`` does not have (a run of another
            algorithm, or of a newer rljax).
    """
    names = {f.name for f in dataclasses.fields(config_cls)}
    unknown = sorted(set(values) - names)
    require(not unknown, f"the saved config has fields {config_cls.__name__} does not know: {unknown} (a run of "
                         f"another algorithm, or saved by a newer rljax); known: {sorted(names)}")
    return config_cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})
