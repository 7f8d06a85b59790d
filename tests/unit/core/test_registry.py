"""The env registry (:mod:`rljax.core.registry`): what it lists, registering (and what it refuses),
``make`` by name, gymnax id, suite id and ``module:Name`` with errors that name the bad value and
the valid ones, and the ``--env-param`` / ``--env-kwarg`` parsers."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

import rljax
from rljax.core import registry
from rljax.core.registry import EnvNotRebuildableError, parse_env_kwargs, parse_env_params
from tests.support.ticker import Ticker

# gymnax environments that cannot be built here (tests/unit/test_env.py skips their contract test).
GYMNAX_UNBUILDABLE = {"gymnax/MNISTBandit-bsuite"}


def test_registry_lists_builtins_and_gymnax_instantiates():
    names = registry.registered()
    for required in ["CartPole-v1", "Pendulum-v1", "Acrobot-v1", "MountainCar-v0",
                     "MountainCarContinuous-v0"]:
        assert required in names
    # 6 kinds, each discrete and continuous, and the legal-action probe (discrete only)
    assert len([n for n in names if n.startswith("Probe")]) == 13 and "ProbeLegalActions-v0" in names
    # Every gymnax id is tested; the ones that cannot be built here are named with their reason.
    gymnax_ids = registry.gymnax_registered()
    assert {"gymnax/CartPole-v1", "gymnax/Breakout-MinAtar"} <= set(gymnax_ids)
    assert GYMNAX_UNBUILDABLE <= set(gymnax_ids), "a listed unbuildable env is no longer in gymnax"


@pytest.mark.parametrize("name, message", [
    ("CartPol-v1", "unknown environment 'CartPol-v1': did you mean 'CartPole-v1'? (`rljax envs` lists every env)"),
    ("breakout-minatar", "unknown environment 'breakout-minatar': did you mean 'Breakout-MinAtar' or "
                         "'gymnax/Breakout-MinAtar'? (`rljax envs` lists every env)"),
    ("Catch-bsuite", "unknown environment 'Catch-bsuite': did you mean 'gymnax/Catch-bsuite'? (`rljax envs` lists "
                     "every env)"),
    ("gymnax/Cartpole-v1", "unknown gymnax environment 'Cartpole-v1': did you mean 'CartPole-v1'? (`rljax envs` "
                           "lists them)"),
])
def test_an_unknown_name_gets_the_closest_names(name, message):
    # It used to be one 667-character line listing every env, with no suggestion.
    with pytest.raises(ValueError) as err:
        registry.make(name)
    assert str(err.value) == message


def test_an_unknown_name_without_a_close_one_says_where_names_come_from():
    with pytest.raises(ValueError) as err:
        registry.make("Nothing-v0")
    msg = str(err.value)
    assert msg.startswith(f"unknown environment 'Nothing-v0': not one of the {len(registry.registered())} registered "
                          "(`rljax envs` lists them), nor a gymnax id as 'gymnax/<id>', a suite's '<suite>/<id>' (")
    assert msg.endswith("or a user env as 'package.module:ClassName'") and len(msg) < 250
    with pytest.raises(ValueError, match=r"^unknown gymnax environment 'Nope-v0': not one of its \d+ ids \(`rljax envs`"):
        registry.make("gymnax/Nope-v0")


def test_register_rejects_duplicates_and_bad_names():
    with pytest.raises(ValueError, match="already registered"):
        registry.register("CartPole-v1", lambda: None)
    with pytest.raises(ValueError, match="gymnax/"):
        registry.register("gymnax/Mine-v0", lambda: None)


def test_env_param_overrides_are_cast_to_the_field_type():
    _, params = rljax.make("CartPole-v1")
    new, overrides = parse_env_params(["length=0.7", "max_steps_in_episode=2e2", "gravity = 3"], params)
    assert overrides == {"length": 0.7, "max_steps_in_episode": 200, "gravity": 3.0}
    assert new.length == 0.7 and new.max_steps_in_episode == 200 and isinstance(new.max_steps_in_episode, int)
    assert isinstance(new.gravity, float) and new.masscart == params.masscart
    assert parse_env_params([], params) == (params, {})
    # params restored from a checkpoint hold arrays: an override keeps the array's dtype
    arrays = params.replace(length=jnp.float32(0.5), max_steps_in_episode=jnp.int32(500))
    new, _ = parse_env_params(["length=0.25", "max_steps_in_episode=100"], arrays)
    assert new.length.dtype == jnp.float32 and float(new.length) == 0.25 and new.max_steps_in_episode.dtype == jnp.int32


@pytest.mark.parametrize("spec, match", [
    ("lenght=0.7", r"'lenght' is not a param of CartPoleParams \(did you mean 'length'\?\); valid names: .*gravity, .*length"),
    ("length", "expected NAME=VALUE"),
    ("=1", "expected NAME=VALUE"),
    ("length=long", "'long' is not a number"),
    ("max_steps_in_episode=10.5", "max_steps_in_episode is an int"),
    ("length=nan", "length must be a finite number"),
    ("gravity=-inf", "gravity must be a finite number"),
    ("max_steps_in_episode=0", "max_steps_in_episode must be >= 1"),
    ("max_steps_in_episode=-1", "max_steps_in_episode must be >= 1"),
])
def test_env_param_errors_name_the_bad_input(spec, match):
    _, params = rljax.make("CartPole-v1")
    with pytest.raises(ValueError, match=match):
        parse_env_params([spec], params)


def test_an_env_param_out_of_its_dtypes_range_is_a_value_error():
    _, params = rljax.make("CartPole-v1")  # as restored from a checkpoint: int32 arrays
    params = params.replace(max_steps_in_episode=jnp.int32(500))
    with pytest.raises(ValueError, match=r"max_steps_in_episode=1000000000000: out of range .*int32"):
        parse_env_params(["max_steps_in_episode=1e12"], params)


def test_env_kwargs_are_python_literals_or_strings():
    assert parse_env_kwargs(["size=8", "rate=0.5", "mode=hard", "on=true", "off=False", "shape=(2, 3)",
                             "name='x'", "size=9"]) == \
        {"size": 9, "rate": 0.5, "mode": "hard", "on": True, "off": False, "shape": (2, 3), "name": "x"}
    with pytest.raises(ValueError, match=r"--env-kwarg 'size': expected NAME=VALUE"):
        parse_env_kwargs(["size"])


@pytest.fixture
def registered_ticker():
    """``Ticker-v9`` registered for one test, then removed from the registry again."""
    registry.register("Ticker-v9", Ticker)
    yield "Ticker-v9"
    registry._REGISTRY.pop("Ticker-v9")


def test_a_registered_env_is_made_with_its_arguments(registered_ticker):
    assert registered_ticker in registry.registered() and registry.registered()[-1] == registered_ticker
    env, params = registry.make(registered_ticker, continuous=True)
    assert isinstance(env, Ticker) and env.continuous and params == env.default_params
    with pytest.raises(ValueError, match=r"env 'Ticker-v9' cannot be built with the constructor arguments "
                                         r"size=3 \(--env-kwarg / config.env_kwargs\)"):
        registry.make(registered_ticker, size=3)


@pytest.mark.parametrize("name", ["", "python-object:x:Y", "navix/Mine-v0", "brax/Mine", 7])
def test_register_refuses_reserved_and_empty_names(name):
    with pytest.raises(ValueError, match=r"invalid env name .*: use a non-empty id not starting with 'gymnax/', "
                                         r"'python-object:' or a suite prefix \(brax/, craftax/, jaxmarl/, navix/, pgx/, xminigrid/\)"):
        registry.register(name, Ticker)


def test_register_refuses_a_factory_that_is_not_callable():
    with pytest.raises(TypeError, match=r"factory for 'Ticker-v8' must be callable, got int"):
        registry.register("Ticker-v8", 3)
    assert "Ticker-v8" not in registry.registered()


def test_make_of_a_module_and_name():
    env, params = registry.make("tests.support.ticker:Ticker", continuous=True)
    assert isinstance(env, Ticker) and env.continuous and params.max_steps_in_episode == 3
    for spec, words in (("tests.support.ticker:Tickr", r"has no attribute 'Tickr' \(did you mean 'Ticker'"),
                        ("tests.support.ticker:LIMIT", r"tests.support.ticker:LIMIT is a int, not callable"),
                        ("tests.support.ticker:TickerParams", r"returned TickerParams, not an env"),
                        ("no_such_module_xyz:Env", r"no module named 'no_such_module_xyz'"),
                        ("bad name:Env", r"a user env is named 'package.module:Name'")):
        with pytest.raises(ValueError, match=rf"env '{spec}': .*{words}"):
            registry.make(spec)
    with pytest.raises(ValueError, match=r"calling tests.support.ticker:Ticker\(size=1\) failed: TypeError"):
        registry.make("tests.support.ticker:Ticker", size=1)


def test_a_python_object_record_cannot_be_made():
    with pytest.raises(EnvNotRebuildableError, match=r"class mod:Thing that cannot be rebuilt by name .*"
                                                     r"rljax.train\(config, env=Thing\(...\)"):
        registry.make("python-object:mod:Thing")


def test_suite_registered_lists_prefixed_ids():
    ids = registry.suite_registered("craftax")
    assert ids and all(i.startswith("craftax/") for i in ids)


def test_env_param_on_params_that_are_not_a_dataclass():
    with pytest.raises(ValueError, match=r"the env params \(dict\) are not a dataclass, so they cannot be overridden"):
        parse_env_params(["a=1"], {"a": 1})
