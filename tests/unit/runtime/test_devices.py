"""Devices (:mod:`rljax.runtime.devices`) on this process's single device: ``serial_map`` equals
``vmap``, ``DataParallel`` on one device is plain ``jit`` with no axis name, the identity placement
and slicing, ``run_once``, and the errors for a bad device count or backend. Several devices:
tests/integration/test_data_parallel.py (fake CPU devices in a subprocess)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.runtime.devices import AXIS, DataParallel, first_device, run_once, serial_map


def test_serial_map_equals_vmap_on_several_inputs():
    xs, ys = jnp.arange(6.0).reshape(3, 2), jnp.array([10.0, 20.0, 30.0])
    fn = lambda x, y: {"sum": x.sum() + y, "scaled": x * y}  # noqa: E731
    out = serial_map(fn, xs, ys)
    assert out["sum"].tolist() == [11.0, 25.0, 39.0]  # 0+1+10, 2+3+20, 4+5+30
    np.testing.assert_array_equal(out["scaled"], [[0, 10], [40, 60], [120, 150]])
    expected = jax.vmap(fn)(xs, ys)
    assert jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.array_equal(a, b)), out, expected))


def test_one_device_is_plain_jit_without_an_axis():
    dp = DataParallel(1)
    assert dp.num_devices == 1 and dp.axis_name is None and dp.mesh is None and dp.devices == jax.local_devices()[:1]
    assert dp.can_launch_ahead and AXIS == "devices"
    step = dp.map(lambda state, inc: state + inc)
    assert float(step(jnp.float32(1.0), 2.0)) == 3.0
    assert float(dp.map_population(lambda s: s * 2)(jnp.float32(4.0))) == 8.0
    tree = {"a": jnp.ones(2)}
    assert dp.place_population(tree) is tree and first_device(tree, 1) is tree
    # init on one device: init_fn(key, 0), compiled once without backend optimisations.
    state = dp.init(lambda key, i: {"i": i, "bits": jax.random.bits(key, (2,))}, jax.random.key(5))
    assert int(state["i"]) == 0 and jnp.array_equal(state["bits"], jax.random.bits(jax.random.key(5), (2,)))


def test_first_device_takes_slice_zero_of_a_device_axis():
    tree = {"w": jnp.arange(6.0).reshape(2, 3), "k": jnp.array([7, 8])}
    out = first_device(tree, 2)
    assert out["w"].tolist() == [0.0, 1.0, 2.0] and int(out["k"]) == 7


def test_run_once_compiles_and_calls():
    assert run_once(jax.jit(lambda x, y: x * y), jnp.float32(3.0), jnp.float32(4.0)) == 12.0


@pytest.mark.parametrize("num_devices", [0, 2 ** 10, 1.0, "1"])
def test_a_device_count_this_process_lacks_is_refused(num_devices):
    with pytest.raises(ValueError, match=rf"num_devices={num_devices!r} but this process has \d+ .*xla_force_host_platform"):
        DataParallel(num_devices)


def test_an_unknown_backend_is_refused():
    with pytest.raises(ValueError, match=r"backend='vmap' is not one of \('shard_map', 'pmap'\)"):
        DataParallel(1, backend="vmap")
