"""The suite adapter every suite shares (:mod:`rljax.suites._adapter`): importing a suite's package
(a missing one names its extra), id checks, space conversion, and :class:`SuiteEnv`'s contract
(time limit, auto-reset, ``final_observation``, observation dtype) over a hand-written counter
suite, stepped eagerly with hand-computed values. The suites themselves: ``test_<suite>.py``."""

from __future__ import annotations

import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rljax
from rljax.core import registry as env_registry
from rljax.env import Box, Discrete
from rljax.suites._adapter import (NO_LIMIT, SuiteEnv, SuiteNotInstalledError, SuiteParams, SuiteState, check_id,
                                   convert_space, require)


def test_suites_are_registered_and_an_unknown_suite_is_a_one_line_error():
    assert set(env_registry.SUITES) == {"craftax", "brax", "navix", "xminigrid", "pgx", "jaxmarl"}
    with pytest.raises(ValueError, match=r"unknown env suite 'nope'; suites: \['brax', 'craftax', 'jaxmarl', 'navix', 'pgx', 'xminigrid'\]"):
        env_registry.suite_registered("nope")


@pytest.mark.parametrize("name,module,extra,ids_need_it", [
    ("navix/Navix-Empty-5x5-v0", "navix", "navix", True), ("xminigrid/MiniGrid-Empty-5x5", "xminigrid", "xminigrid", True),
    ("craftax/Craftax-Classic-Symbolic-v1", "craftax", "craftax", False), ("brax/ant", "brax", "brax", False),
    ("pgx/tic_tac_toe", "pgx", "games", True), ("jaxmarl/MPE_simple_spread_v3", "jaxmarl", "jaxmarl", True)])
def test_missing_package_names_the_extra(monkeypatch, name, module, extra, ids_need_it):
    # Makes `import <module>` fail, and `import <module>.<sub>` too once another test imported a submodule
    # (importlib finds an imported submodule in sys.modules without importing its parent).
    for name_ in [module, *(m for m in list(sys.modules) if m.startswith(module + "."))]:
        monkeypatch.setitem(sys.modules, name_, None)
    with pytest.raises(ImportError, match=rf"pip install -e \"\.\[{extra}\]\".*'rljax-chunked\[{extra}\]'"):
        rljax.make(name)
    prefix = name.split("/")[0]
    if ids_need_it:  # the grid suites list their ids from the package
        with pytest.raises(ImportError, match=rf"rljax-chunked\[{extra}\]"):
            env_registry.suite_registered(prefix)
    else:  # the others list theirs without it
        assert name in env_registry.suite_registered(prefix)


def test_require_imports_or_names_the_extra(monkeypatch):
    assert require("json", "unused") is sys.modules["json"]
    monkeypatch.setitem(sys.modules, "some_suite_pkg", None)
    with pytest.raises(SuiteNotInstalledError, match=r"the 'mysuite' env suite needs the package 'some_suite_pkg'"
                                                     r".*pip install -e \"\.\[mysuite\]\"") as err:
        require("some_suite_pkg", "mysuite")
    assert isinstance(err.value, ImportError) and isinstance(err.value.__cause__, ImportError)


def test_check_id_returns_a_valid_id_and_lists_the_valid_ones():
    assert check_id("toy", "B-v0", ("A-v0", "B-v0")) == "B-v0"
    with pytest.raises(ValueError, match=r"^unknown toy environment 'C-v0'; toy has: A-v0, B-v0 \(use them as 'toy/<id>'\)$"):
        check_id("toy", "C-v0", ("A-v0", "B-v0"))


def test_convert_space():
    discrete = convert_space(types.SimpleNamespace(n=np.int64(7)))
    assert isinstance(discrete, Discrete) and discrete.n == 7 and type(discrete.n) is int
    box = convert_space(types.SimpleNamespace(low=np.zeros((2, 3)), high=np.full((2, 3), 9.0), shape=[2, 3],
                                              dtype=jnp.uint8))
    assert isinstance(box, Box) and box.shape == (2, 3) and box.dtype == jnp.uint8
    np.testing.assert_array_equal(np.asarray(box.high), np.full((2, 3), 9))
    no_dtype = convert_space(types.SimpleNamespace(low=-1.0, high=1.0, shape=(4,)))
    assert no_dtype.dtype == jnp.float32  # a Box without a dtype is float32
    # Something with both n and low is a box (gymnax's Box has no n; a MultiDiscrete-like one would).
    assert isinstance(convert_space(types.SimpleNamespace(n=3, low=0.0, high=2.0, shape=(1,))), Box)
    with pytest.raises(TypeError, match=r"cannot convert the space 'tuple-space'"):
        convert_space("tuple-space")


class Counter(SuiteEnv):
    """A suite without params whose state counts up by the action; it terminates at 3. Integer
    observations, which the adapter casts to its float32 space."""

    def __init__(self, limit: int):
        super().__init__("toy/Counter-v0", Box(0.0, 10.0, (1,), jnp.float32), Discrete(3),
                         SuiteParams(max_steps_in_episode=limit), stochastic_transitions=False)

    def inner_reset(self, key, inner_params):
        return jnp.zeros((1,), jnp.int32), jnp.int32(0)

    def inner_step(self, key, inner_state, action, inner_params):
        count = inner_state + action
        return count[None], count, count * 0.5, count >= 3


def test_suite_env_adds_the_clock_the_time_limit_and_the_auto_reset():
    env = Counter(limit=3)
    params = env.default_params
    assert env.name == "toy/Counter-v0" and repr(env) == "Counter('toy/Counter-v0')" and params.inner is None
    obs, state = env.reset(jax.random.key(0), params)
    assert obs.dtype == jnp.float32 and obs.tolist() == [0.0] and int(state.time) == 0
    seen = []
    for action in (1, 0, 0, 2, 1, 1):
        obs, state, reward, term, trunc, info = env.step(jax.random.key(1), state, jnp.int32(action), params)
        assert reward.dtype == jnp.float32 and term.dtype == trunc.dtype == jnp.bool_
        seen.append((float(info["final_observation"][0]), float(reward), bool(term), bool(trunc), float(obs[0]),
                     int(state.time)))
    # counts 1, 1, 1: the third step reaches the limit of 3 (truncated, not terminated) and resets;
    # then 2, 3: terminated on its second step (3 >= 3) and reset; then 1 in a fresh episode.
    assert seen == [(1.0, 0.5, False, False, 1.0, 1), (1.0, 0.5, False, False, 1.0, 2),
                    (1.0, 0.5, False, True, 0.0, 0),
                    (2.0, 1.0, False, False, 2.0, 1), (3.0, 1.5, True, False, 0.0, 0),
                    (1.0, 0.5, False, False, 1.0, 1)]


def test_suite_state_and_params_are_pytrees_and_no_limit_is_out_of_reach():
    state = SuiteState(time=jnp.int32(2), inner={"x": jnp.ones(3)})
    assert [leaf.shape for leaf in jax.tree.leaves(state)] == [(), (3,)]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), SuiteParams(5, jnp.float32(1)), SuiteParams(7, jnp.float32(2)))
    assert stacked.max_steps_in_episode.tolist() == [5, 7]
    assert NO_LIMIT == 2**31 - 1
