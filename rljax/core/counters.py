"""Exact run counters past 2**31 without 64-bit types: a :class:`Count` is two uint32 words.

JAX runs with 32-bit integers unless x64 is switched on for the whole process (which would double
every default dtype), so an int32 counter of updates or env steps overflows at 2**31. A
:class:`Count` holds ``hi * 2**32 + lo`` exactly for every value below 2**64, and the few
operations a train state needs work inside compiled code with 32-bit arithmetic only:

- ``count.add(k)`` and ``count.mul(k)``: exact (modulo 2**64) for a Python int ``k``;
- ``count.sub(other)``: exact when ``other <= count``;
- ``count.less(n)``: the comparison with a Python int, exact;
- ``count.mod(m)``: the remainder by a Python int ``m <= 2**31``, exact (uint32);
- ``count.to_float()``: float32 ``hi * 2**32 + lo``, the same float32 as converting the integer
  itself below 2**32 (one rounding), within float32's relative precision above.

Every leaf of a Count has the same shape, so a Count can carry leading axes (devices, sweep
members). On the host, ``int(count)`` (a scalar count) and :func:`host_value` read it back.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

__all__ = ["Count", "MAX_COUNT", "host_value", "as_float", "as_count"]

MAX_COUNT = 2**64 - 1
"""The largest value a :class:`Count` holds."""

_WORD = 2**32
_MASK16 = 0xFFFF


def _words(n: int) -> tuple[int, int]:
    n = int(n)
    if not 0 <= n <= MAX_COUNT:
        raise ValueError(f"a Count holds integers in [0, 2**64 - 1], got {n}")
    return n >> 32, n & (_WORD - 1)


def _u32(x: Any) -> jax.Array:
    return jnp.asarray(x, jnp.uint32)


def _mulmod(x: jax.Array, c: int, m: int) -> jax.Array:
    """``(x * c) % m`` for a uint32 ``x < m``, Python ints ``0 <= c < m <= 2**31``: double and add
    over the bits of ``c``, every intermediate below ``2 * m <= 2**32``."""
    r = jnp.zeros_like(x)
    for bit in bin(c)[2:] if c else ():
        r = (r * 2) % m
        if bit == "1":
            r = (r + x) % m
    return r


class Count(struct.PyTreeNode):
    """A non-negative integer ``hi * 2**32 + lo`` below 2**64, as two uint32 arrays of one shape.

    Attributes:
        hi: uint32, the high word.
        lo: uint32, the low word.
    """

    hi: jax.Array
    lo: jax.Array

    @classmethod
    def of(cls, n: int, shape: tuple[int, ...] = ()) -> Count:
        """The count ``n`` (a Python int in [0, 2**64 - 1]), broadcast to ``shape``.

        Raises:
            ValueError: ``n`` is out of range.
        """
        hi, lo = _words(n)
        return cls(hi=jnp.full(shape, hi, jnp.uint32), lo=jnp.full(shape, lo, jnp.uint32))

    @classmethod
    def from_int(cls, x: Any) -> Count:
        """The count of a non-negative integer array (int32 or uint32: below 2**32)."""
        x = jnp.asarray(x)
        return cls(hi=jnp.zeros(x.shape, jnp.uint32), lo=x.astype(jnp.uint32))

    def add(self, k: int) -> Count:
        """``self + k`` (modulo 2**64) for a Python int ``k >= 0``."""
        k_hi, k_lo = _words(k)
        lo = self.lo + _u32(k_lo)
        carry = (lo < self.lo).astype(jnp.uint32)
        return Count(hi=self.hi + _u32(k_hi) + carry, lo=lo)

    def sub(self, other: Count) -> Count:
        """``self - other``, exact when ``other <= self``."""
        lo = self.lo - other.lo
        borrow = (self.lo < other.lo).astype(jnp.uint32)
        return Count(hi=self.hi - other.hi - borrow, lo=lo)

    def mul(self, k: int) -> Count:
        """``self * k`` (modulo 2**64) for a Python int ``k >= 0``: a schoolbook product of 16-bit
        limbs, every partial product and sum below 2**32."""
        k_hi, k_lo = _words(k)
        a = [self.lo & _MASK16, self.lo >> 16, self.hi & _MASK16, self.hi >> 16]
        b = [k_lo & _MASK16, k_lo >> 16, k_hi & _MASK16, k_hi >> 16]
        limbs, carry = [], jnp.zeros_like(self.lo)
        for i in range(4):
            acc_lo, acc_hi = carry & _MASK16, carry >> 16  # the column's sum, split so it cannot overflow
            for j in range(i + 1):
                if b[i - j]:
                    p = a[j] * _u32(b[i - j])  # < 2**32
                    acc_lo = acc_lo + (p & _MASK16)
                    acc_hi = acc_hi + (p >> 16)
            limbs.append(acc_lo & _MASK16)
            carry = (acc_lo >> 16) + acc_hi  # the next column's carry, in units of 2**16
        return Count(hi=limbs[2] | (limbs[3] << 16), lo=limbs[0] | (limbs[1] << 16))

    def less(self, n: int) -> jax.Array:
        """bool, ``self < n`` for a Python int ``n`` (any ``n >= 2**64`` is larger than every count)."""
        if n > MAX_COUNT:
            return jnp.ones(jnp.shape(self.lo), jnp.bool_)
        if n <= 0:
            return jnp.zeros(jnp.shape(self.lo), jnp.bool_)
        n_hi, n_lo = _words(n)
        return (self.hi < _u32(n_hi)) | ((self.hi == _u32(n_hi)) & (self.lo < _u32(n_lo)))

    def mod(self, m: int) -> jax.Array:
        """uint32, ``self % m`` for a Python int ``1 <= m <= 2**31``:
        ``((hi % m) * (2**32 % m) + lo % m) % m`` with an exact modular product."""
        if not 1 <= m <= 2**31:
            raise ValueError(f"Count.mod needs a modulus in [1, 2**31], got {m}")
        high = _mulmod(self.hi % _u32(m), _WORD % m, m)
        return (high + self.lo % _u32(m)) % _u32(m)

    def to_float(self) -> jax.Array:
        """float32 ``hi * 2**32 + lo`` (exactly ``float32(lo)`` while ``hi == 0``)."""
        return self.hi.astype(jnp.float32) * jnp.float32(_WORD) + self.lo.astype(jnp.float32)

    def __int__(self) -> int:
        """The value of a scalar count, on the host."""
        return int(host_value(self))


def host_value(count: Count) -> Any:
    """A (fetched or device) count's value on the host: a Python int for a scalar count, else an
    array of Python ints with the count's shape."""
    hi = np.asarray(jax.device_get(count.hi)).astype(object)
    lo = np.asarray(jax.device_get(count.lo)).astype(object)
    value = hi * _WORD + lo
    return int(value) if np.ndim(value) == 0 else value


def as_count(x: Any) -> Count:
    """``x`` if it is a :class:`Count`, else the count of the non-negative integer array ``x``."""
    return x if isinstance(x, Count) else Count.from_int(x)


def as_float(x: Any) -> jax.Array:
    """float32 of a :class:`Count` (:meth:`Count.to_float`) or of a number or array."""
    return x.to_float() if isinstance(x, Count) else jnp.asarray(x).astype(jnp.float32)
