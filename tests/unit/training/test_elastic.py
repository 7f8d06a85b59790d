"""Elastic resume's re-dealing of a saved data-parallel state, on states built in this process.

A ``D``-device state is ``D`` per-device states stacked; each device's is the state of a one-device
run with ``num_envs / D`` envs. So two per-device PPO states (4 envs each, the second one's envs
moved on) stacked stand for a 2-device save, and the one-device state with 8 envs is the template it
is re-dealt into. The CLI round trips (2 -> 1 and 1 -> 2 devices, replay included) are in
tests/integration/test_elastic_resume.py.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from rljax.agents.ppo import PPOConfig
from rljax.core.registry import resolve_run
from rljax.store.checkpoint import LayoutError, to_host
from rljax.training.elastic import KEY_TAG, ElasticResumeError, device_key, resplit
from rljax.training.program import Program

TINY = dict(env="CartPole-v1", num_steps=8, num_epochs=1, num_minibatches=1, hidden_sizes=(8,), normalize_obs=True)


def _state(num_envs: int):
    config, env, params = resolve_run(PPOConfig(num_envs=num_envs, **TINY), record=False)
    return Program(config, env, params).init_state(4)


def _env_leaf(path) -> bool:
    name = jax.tree_util.keystr(path)
    return (name.startswith(".env_state") and "obs_stats" not in name) or name == ".obs"


@pytest.fixture(scope="module")
def saved_on_two():
    """Host leaves of a 2-device save: device 1's envs differ from device 0's, all else agrees."""
    device0 = _state(4)
    device1 = jax.tree_util.tree_map_with_path(lambda p, x: x + 1 if _env_leaf(p) else x, device0)
    leaves = [np.stack([a, b]) for a, b in zip(to_host(device0), to_host(device1))]
    return device0, device1, leaves


def test_two_devices_become_one_with_the_global_batch_in_device_order(saved_on_two):
    device0, device1, leaves = saved_on_two
    template = _state(8)
    out = resplit(leaves, template, 2, 1, seed=0, chunk=5)
    paths = [p for p, _ in jax.tree_util.tree_flatten_with_path(template)[0]]
    by_name = dict(zip((jax.tree_util.keystr(p) for p in paths), out))
    np.testing.assert_array_equal(by_name[".obs"], np.concatenate([np.asarray(device0.obs), np.asarray(device1.obs)]))
    assert by_name[".obs"].shape == (8, 4)
    for name, value in by_name.items():  # shared leaves: device 0's, shaped for one device
        if name.startswith(".params") or "obs_stats" in name or name.startswith(".updates"):
            original = dict(zip((jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(device0)[0]),
                                to_host(device0)))[name]
            np.testing.assert_array_equal(value, original)
    # The key: derived anew from (seed, chunk, device index).
    np.testing.assert_array_equal(by_name[".key"], jax.random.key_data(device_key(0, 5, 0)))
    assert [x.shape for x in out] == [x.shape for x in to_host(template)]


def test_device_keys_are_deterministic_and_distinct():
    k = lambda *a: np.asarray(jax.random.key_data(device_key(*a)))  # noqa: E731
    np.testing.assert_array_equal(k(3, 7, 1), k(3, 7, 1))
    assert len({k(3, 7, d).tobytes() for d in range(4)} | {k(3, 8, 0).tobytes(), k(4, 7, 0).tobytes()}) == 6
    base = jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(jax.random.key(3), KEY_TAG), 7), 1)
    np.testing.assert_array_equal(k(3, 7, 1), jax.random.key_data(base))


def test_one_device_becomes_two_each_with_its_own_key():
    """A 1-device save of 8 envs re-dealt onto 2 devices: the template is two 4-env states stacked (the
    shapes a 2-device state has), and device ``d``'s key is ``device_key(seed, chunk, d)``, so the two
    devices draw different streams."""
    one = _state(8)
    template = jax.tree.map(lambda a, b: jax.numpy.stack([a, b]), _state(4), _state(4))
    out = resplit(to_host(one), template, 1, 2, seed=3, chunk=7)
    names = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(template)[0]]
    by_name = dict(zip(names, out))
    keys = by_name[".key"]
    assert keys.shape == (2, *np.shape(jax.random.key_data(device_key(3, 7, 0))))
    for d in range(2):
        np.testing.assert_array_equal(keys[d], jax.random.key_data(device_key(3, 7, d)))
    assert not np.array_equal(keys[0], keys[1])
    np.testing.assert_array_equal(by_name[".obs"], np.asarray(one.obs).reshape(2, 4, 4))  # envs 0-3, then 4-7


def test_a_shared_leaf_that_differs_between_devices_is_named(saved_on_two):
    device0, _, leaves = saved_on_two
    names = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(device0)[0]]
    bad = list(leaves)
    i = names.index(".params['params']['value']['bias']")
    bad[i] = bad[i].copy()
    bad[i][1] += 1.0  # device 1's parameters drifted
    with pytest.raises(ElasticResumeError, match=r"\.params\['params'\]\['value'\]\['bias'\].*differs between the "
                                                 r"saved devices"):
        resplit(bad, _state(8), 2, 1, seed=0, chunk=1)
    assert issubclass(ElasticResumeError, LayoutError)  # a restore stops on it instead of skipping the step


def test_an_env_batch_that_does_not_split_evenly_is_refused(saved_on_two):
    _, _, leaves = saved_on_two
    with pytest.raises(ElasticResumeError, match=r"\.time: its per-device shape is \(4,\) on 2 devices and \(6,\) on 1"):
        resplit(leaves, _state(6), 2, 1, seed=0, chunk=1)
    with pytest.raises(ElasticResumeError, match="arrays"):
        resplit(leaves[:-1], _state(8), 2, 1, seed=0, chunk=1)
