"""Random numbers with ``jax.random``'s bits, computed with fewer, cheaper kernels on the CPU.

Training draws a handful of keys and samples at every env step and a permutation at every epoch.
On the CPU these small programs are bound by how many kernels they launch, not by arithmetic, and
two of JAX's own lowerings launch many more kernels than the arithmetic needs:

* **Threefry.** JAX lowers the Threefry-2x32 hash on the CPU as a five-iteration loop (to keep
  compile time down), so every split, ``fold_in`` and sample runs a loop of about twenty small
  kernels per iteration. :func:`unroll_threefry_on_cpu` can lower it as the straight-line 20 rounds
  that JAX already uses on the GPU, which XLA fuses into one kernel; the hash is integer
  arithmetic, so every key and sample keeps its bits. Which is faster depends on the CPU (the
  straight-line hash made PPO updates ~7 % faster on an AVX-512 AMD EPYC and 15-25 % slower on an
  Intel Xeon VM), so the loop stays the default and the straight-line hash is chosen with
  :data:`ROLLED_ENV` set to ``0``.
* **Permutations.** ``jax.random.permutation(key, n)`` is a stable sort of ``n`` random 32-bit keys
  carrying their indices; XLA's CPU sort calls a compiled comparator for each comparison of such a
  key-value sort. :func:`permutation` sorts the keys alone (XLA's direct path for one array of
  integers), finds each key's rank by binary search, and scatters the indices; when two keys tie
  (for 512 keys about once in 30,000 permutations) it falls back to the key-value sort, so the
  result is always the stable order, bit for bit ``jax.random.permutation``'s. Above 1,625
  elements JAX sorts twice (fresh keys each time): each round is done the same way.

``docs/design.md`` (Decisions) says why; ``benchmarks/results.md`` (Training throughput) has the figures.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import mlir

__all__ = ["ROLLED_ENV", "permutation", "stable_argsort", "unroll_threefry_on_cpu", "rolled_threefry",
           "threefry2x32_unrolled", "threefry2x32_rolled"]

ROLLED_ENV = "RLJAX_ROLLED_THREEFRY"
"""Environment variable: ``1`` or unset keeps JAX's own CPU lowering of the hash (its five-step loop)
in every program lowered after :func:`unroll_threefry_on_cpu` (the default: never slower than JAX);
``0`` lowers it as the straight-line hash (the same bits; faster random numbers on some CPUs and
slower programs on others, and another compile time: measure on yours)."""

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)
_LOCK = threading.Lock()
_UNROLLED = False
_ROLLED_BY_DEFAULT = True
_LOCAL = threading.local()


def _rotate_left(x: jax.Array, bits: int | jax.Array) -> jax.Array:
    """``x`` (uint32) rotated left by ``bits`` (an int, or a traced uint32 in the rolled loop)."""
    bits = np.uint32(bits) if isinstance(bits, int) else bits
    return (x << bits) | (x >> (np.uint32(32) - bits))


def threefry2x32_unrolled(key1: jax.Array, key2: jax.Array, x1: jax.Array, x2: jax.Array
                          ) -> tuple[jax.Array, jax.Array]:
    """The Threefry-2x32 hash with 20 rounds (Salmon et al. 2011, "Parallel random numbers: as easy
    as 1, 2, 3"), written out round by round: ``(key1, key2)`` the key words, ``(x1, x2)`` the
    counter words, all ``uint32`` and broadcastable; returns the two hashed words.

    Every 4 rounds ``x1 += x2; x2 = rotl(x2, r) ^ x1`` (rotations ``13, 15, 26, 6`` then ``17, 29,
    16, 24``) the key schedule ``(key1, key2, key1 ^ key2 ^ 0x1BD11BDA)`` is injected with the
    injection count added to the second word.
    """
    ks = (key1, key2, key1 ^ key2 ^ _PARITY)
    x1 = x1 + ks[0]
    x2 = x2 + ks[1]
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x1 = x1 + x2
            x2 = x1 ^ _rotate_left(x2, r)
        x1 = x1 + ks[(i + 1) % 3]
        x2 = x2 + ks[(i + 2) % 3] + np.uint32(i + 1)
    return x1, x2


def threefry2x32_rolled(key1: jax.Array, key2: jax.Array, x1: jax.Array, x2: jax.Array
                        ) -> tuple[jax.Array, jax.Array]:
    """:func:`threefry2x32_unrolled` as a five-step ``fori_loop`` (four rounds and one key injection
    a step), as JAX lowers it on the CPU: the same bits from a smaller program, for programs that
    run once and whose compile time is all that matters (:func:`rolled_threefry`)."""
    rotations = jnp.asarray(_ROTATIONS, jnp.uint32)

    def step(i: jax.Array, carry: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
        x1, x2, inject1, inject2, spare = carry
        for j in range(4):
            x1 = x1 + x2
            x2 = x1 ^ _rotate_left(x2, rotations[i % 2, j])
        x1 = x1 + inject1
        x2 = x2 + inject2 + (i + 1).astype(jnp.uint32)
        return x1, x2, inject2, spare, inject1

    parity = key1 ^ key2 ^ _PARITY
    x1, x2 = x1 + key1, x2 + key2
    x1, x2, *_ = lax.fori_loop(0, 5, step, (x1, x2, key2, parity, key1))
    return x1, x2


@contextlib.contextmanager
def rolled_threefry(rolled: bool = True) -> Iterator[None]:
    """Programs this thread first lowers within this block get the Threefry hash as JAX's rolled loop
    even where :data:`ROLLED_ENV` asks for the straight-line hash: for programs that run once (an
    initial state), where the straight-line hash saves nothing. ``rolled=False`` gives them the
    straight-line hash even where the loop is the process's default. (JAX reuses a function's
    earlier lowering for the same arguments whatever the block says: the choice changes speed and
    compile time only, never a bit.)"""
    before = getattr(_LOCAL, "rolled", None)
    _LOCAL.rolled = bool(rolled)
    try:
        yield
    finally:
        _LOCAL.rolled = before


_UNROLLED_RULE = mlir.lower_fun(threefry2x32_unrolled, multiple_results=True)
_ROLLED_RULE = mlir.lower_fun(threefry2x32_rolled, multiple_results=True)
_JAX_RULE: object = None
"""JAX's own CPU lowering of the hash, found before rljax's replaces it (None where this JAX keeps it
elsewhere: :data:`_ROLLED_RULE`, the same loop and bits, takes its place)."""


def _jax_cpu_rule(primitive: object) -> object:
    """JAX's CPU lowering rule of ``primitive`` as registered now, or None (read from JAX's private
    table: only to hand the default back to JAX's own rule, never to change it)."""
    try:
        from jax._src.interpreters import mlir as jax_mlir

        entry = jax_mlir._platform_specific_lowerings["cpu"].get(primitive)
    except (ImportError, AttributeError, KeyError, TypeError):  # pragma: no cover - another JAX's layout
        return None
    rule = getattr(entry, "rule", None)
    return None if rule is None or rule is _threefry_cpu_rule else rule


def _threefry_cpu_rule(ctx: object, *args: object) -> object:
    """The CPU lowering rule: JAX's own (its rolled loop) inside :func:`rolled_threefry` or, outside
    any such block, unless :data:`ROLLED_ENV` asks for the straight-line hash; else the straight-line
    one."""
    rolled = getattr(_LOCAL, "rolled", None)
    if not (_ROLLED_BY_DEFAULT if rolled is None else rolled):
        return _UNROLLED_RULE(ctx, *args)
    return (_JAX_RULE or _ROLLED_RULE)(ctx, *args)


def unroll_threefry_on_cpu() -> bool:
    """Registers rljax's CPU lowering of ``jax.random``'s Threefry hash for the rest of the process
    (idempotent; the GPU and TPU lowerings are untouched): the five-step loop JAX itself lowers,
    unless :data:`ROLLED_ENV` (read at the first call) is ``0``, which asks for the straight-line
    hash in every program lowered afterwards; :func:`rolled_threefry` overrides either in a block.

    Every random number keeps its bits (the hash is exact integer arithmetic; the tests check known
    answers and ``jax.random``'s own outputs), so the choice changes speed and compile time only.
    It applies to every program lowered afterwards, the caller's own included, and the persistent
    compilation cache keys those programs anew. :func:`rljax.agents.build_agent` calls it.

    Returns:
        True when the lowering is (now) registered; False when this JAX has no public Threefry
        primitive to register it for (nothing is changed then).

    Raises:
        ValueError: :data:`ROLLED_ENV` is set to something other than ``0`` or ``1``.
    """
    global _UNROLLED, _ROLLED_BY_DEFAULT, _JAX_RULE
    with _LOCK:
        if _UNROLLED:
            return True
        value = os.environ.get(ROLLED_ENV, "").strip()
        if value not in ("", "0", "1"):
            raise ValueError(f"{ROLLED_ENV}={value!r}: set it to 1 / unset it (lower jax.random's hash as JAX's "
                             f"loop, the default) or 0 (the straight-line hash: faster random numbers on some CPUs)")
        _ROLLED_BY_DEFAULT = value != "0"
        try:
            from jax.extend.random import threefry2x32_p
        except ImportError:  # pragma: no cover - a JAX without the public primitive
            return False
        _JAX_RULE = _jax_cpu_rule(threefry2x32_p) or _JAX_RULE
        mlir.register_lowering(threefry2x32_p, _threefry_cpu_rule, platform="cpu")
        _UNROLLED = True
        return True


def _stable_argsort_rows(keys: jax.Array) -> jax.Array:
    """:func:`stable_argsort` of each row of ``keys`` ``[R, n]``; one tie anywhere sends every row
    to the key-value sort (one ``cond`` for all rows: a tie is rare)."""
    rows, n = keys.shape
    index = jnp.broadcast_to(lax.iota(jnp.int32, n), (rows, n))
    ordered = lax.sort(keys, dimension=1)
    rank = jax.vmap(lambda o, k: jnp.searchsorted(o, k, side="left", method="scan_unrolled"))(ordered, keys)
    row = jnp.broadcast_to(lax.iota(jnp.int32, rows)[:, None], (rows, n))
    tie = jnp.any(ordered[:, 1:] == ordered[:, :-1])
    return lax.cond(tie, lambda: lax.sort((keys, index), dimension=1, num_keys=1, is_stable=True)[1],
                    lambda: jnp.zeros((rows, n), jnp.int32).at[row, rank.astype(jnp.int32)].set(
                        index, unique_indices=True))


@jax.custom_batching.custom_vmap
def stable_argsort(keys: jax.Array) -> jax.Array:
    """The indices that sort the ``uint32`` vector ``keys`` ``[n]``, equal keys in index order
    (what a stable key-value sort of ``(keys, arange(n))`` returns), int32 ``[n]``.

    Sorts ``keys`` alone, ranks each key by binary search in the sorted copy and scatters the
    indices to their ranks; if any two keys are equal, the stable key-value sort instead. Under
    ``vmap`` (a population's permutations) the rows share one test for ties, so the key-value sort
    runs only when some row has one.
    """
    return _stable_argsort_rows(keys[None])[0]


@stable_argsort.def_vmap
def _stable_argsort_vmap(axis_size: int, in_batched: list[bool], keys: jax.Array) -> tuple[jax.Array, bool]:
    if not in_batched[0]:
        keys = jnp.broadcast_to(keys, (axis_size,) + keys.shape)
    return _stable_argsort_rows(keys.reshape(-1, keys.shape[-1])).reshape(keys.shape), True


def permutation(key: jax.Array, n: int) -> jax.Array:
    """``jax.random.permutation(key, n)``, bit for bit, int32 ``[n]``.

    JAX sorts ``rounds = ceil(3 ln n / ln(2**32 - 1))`` times (one for ``n <= 1625``, two up to about
    2.6 million): each round draws ``n`` random 32-bit keys with a fresh ``split`` of the key and
    reorders the previous round's result by their stable order. Each round here is a
    :func:`stable_argsort` of its keys and a gather. ``n < 2`` is handed to ``jax.random.permutation``.
    """
    rounds = int(np.ceil(3 * np.log(max(1, n)) / np.log(np.iinfo(np.uint32).max)))
    if rounds < 1:
        return jax.random.permutation(key, n)
    order = None
    for _ in range(rounds):
        key, subkey = jax.random.split(key)
        ranks = stable_argsort(jax.random.bits(subkey, (n,), jnp.uint32))
        order = ranks if order is None else order[ranks]
    return order
