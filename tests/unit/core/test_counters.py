"""Count: exact 64-bit counters from uint32 words, checked against Python's integers."""

from __future__ import annotations

import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax.core.counters import Count, as_count, as_float, host_value

_rng = random.Random(0)
VALUES = ([0, 1, 2**16 - 1, 2**16, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**32 + 5, 2**53, 2**53 + 1, 2**63,
           2**64 - 1] + [_rng.randrange(2**64) for _ in range(12)] + [_rng.randrange(2**34) for _ in range(12)])
FACTORS = [0, 1, 3, 512, 2**16 + 1, 2**30, 2**31 - 1, 2**32 - 1, 2**40 + 7]
MODULI = [1, 2, 3, 500, 2**16, 99991, 2**30, 2**31 - 1, 2**31]
BOUNDS = [0, 1, 2**31, 2**32, 2**32 + 5, 2**53, 2**64 - 1, 2**64]


@jax.jit
def _ops(c: Count):
    return ({k: c.mul(k) for k in FACTORS}, {k: c.add(k) for k in FACTORS}, {m: c.mod(m) for m in MODULI},
            {n: c.less(n) for n in BOUNDS}, c.to_float())


def test_every_operation_is_exact_against_python_integers():
    for v in VALUES:
        mul, add, mod, less, f = _ops(Count.of(v))
        for k in FACTORS:
            assert host_value(mul[k]) == (v * k) % 2**64, (v, k)
            assert host_value(add[k]) == (v + k) % 2**64, (v, k)
        for m in MODULI:
            assert int(mod[m]) == v % m and mod[m].dtype == jnp.uint32, (v, m)
        for n in BOUNDS:
            assert bool(less[n]) == (v < n), (v, n)
        # float32 of the integer: one rounding below 2**32 (as converting an int32 does), within
        # float32's precision above.
        if v < 2**32:
            assert float(f) == float(np.float32(v))
        else:
            assert abs(float(f) - v) <= 2.0**-23 * v


def test_sub_borrows_and_counts_carry_across_the_word():
    a, b = Count.of(2**32 + 3), Count.of(5)
    assert host_value(a.sub(b)) == 2**32 - 2
    c = Count.of(2**32 - 1).add(1)
    assert (int(c.hi), int(c.lo)) == (1, 0)


def test_counts_with_leading_axes_and_on_the_host():
    c = Count.of(2**40 + 9, shape=(2, 3))
    assert c.hi.shape == c.lo.shape == (2, 3) and c.hi.dtype == jnp.uint32
    assert (host_value(jax.vmap(jax.vmap(lambda x: x.add(1)))(c)) == 2**40 + 10).all()
    assert int(Count.of(7)) == 7
    assert host_value(as_count(jnp.int32(12))) == 12
    np.testing.assert_equal(np.asarray(as_float(jnp.int32(3))), np.float32(3))


@pytest.mark.parametrize("bad", [-1, 2**64])
def test_out_of_range_values_are_refused(bad):
    with pytest.raises(ValueError, match=r"\[0, 2\*\*64 - 1\], got"):
        Count.of(bad)
    with pytest.raises(ValueError, match="modulus in"):
        Count.of(1).mod(2**31 + 1)
