"""Tests for rljax.core.prng: the straight-line Threefry against the Random123 known answers and a NumPy
reference, jax.random's own outputs unchanged once it is the CPU lowering, and the permutation against
``jax.random.permutation`` bit for bit (ties, sizes on both sides of the one-sort range, jit and vmap), and
the choice between the two lowerings (``rolled_threefry``, ``RLJAX_ROLLED_THREEFRY``)."""

from __future__ import annotations

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend.random import threefry_2x32

from rljax.core import prng
from rljax.core.prng import (permutation, rolled_threefry, stable_argsort, threefry2x32_rolled, threefry2x32_unrolled,
                             unroll_threefry_on_cpu)

# Random123's known answers for Threefry-2x32 with 20 rounds: (key, counter) -> output.
KNOWN = [((0x00000000, 0x00000000), (0x00000000, 0x00000000), (0x6B200159, 0x99BA4EFE)),
         ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
         ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0))]


def _reference(key: tuple[int, int], x1: np.ndarray, x2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Threefry-2x32-20 in NumPy, from the paper's definition (uint32 wrap-around arithmetic)."""
    rot = lambda v, r: (v << np.uint32(r)) | (v >> np.uint32(32 - r))  # noqa: E731
    k = [np.uint32(key[0]), np.uint32(key[1])]
    k.append(k[0] ^ k[1] ^ np.uint32(0x1BD11BDA))
    x1, x2 = x1 + k[0], x2 + k[1]
    for i in range(5):
        for r in ((13, 15, 26, 6), (17, 29, 16, 24))[i % 2]:
            x1 = x1 + x2
            x2 = rot(x2, r) ^ x1
        x1 = x1 + k[(i + 1) % 3]
        x2 = x2 + k[(i + 2) % 3] + np.uint32(i + 1)
    return x1, x2


@pytest.mark.parametrize("key, counter, expected", KNOWN)
def test_both_hashes_give_random123s_known_answers(key, counter, expected):
    words = [jnp.asarray([v], jnp.uint32) for v in key + counter]
    for hash_fn in (threefry2x32_unrolled, threefry2x32_rolled):
        got = jax.jit(hash_fn)(*words)
        assert [int(g[0]) for g in got] == list(expected), hash_fn.__name__
    ref = _reference(key, np.asarray([counter[0]], np.uint32), np.asarray([counter[1]], np.uint32))
    assert [int(r[0]) for r in ref] == list(expected)


def test_jax_random_keeps_its_bits_with_the_unrolled_cpu_lowering():
    # Outputs computed before the lowering is registered (by an eager call: its own compiled program).
    key = jax.random.key(11)
    before = dict(split=jax.random.key_data(jax.random.split(key, 7)), bits=jax.random.bits(key, (33,), jnp.uint32),
                  uniform=jax.random.uniform(key, (5, 3)), categorical=jax.random.categorical(key, jnp.zeros((9, 4))),
                  fold=jax.random.key_data(jax.random.fold_in(key, 3)))
    rng = np.random.default_rng(0)
    x = rng.integers(0, 2**32, size=(2, 257), dtype=np.uint32)
    keypair = (int(rng.integers(0, 2**32)), int(rng.integers(0, 2**32)))
    assert unroll_threefry_on_cpu() and unroll_threefry_on_cpu()  # idempotent
    with rolled_threefry(False):  # the straight-line hash, not the default loop
        assert "while" not in _lowered_split()
        after = jax.jit(lambda k: dict(split=jax.random.key_data(jax.random.split(k, 7)),
                                       bits=jax.random.bits(k, (33,), jnp.uint32),
                                       uniform=jax.random.uniform(k, (5, 3)),
                                       categorical=jax.random.categorical(k, jnp.zeros((9, 4))),
                                       fold=jax.random.key_data(jax.random.fold_in(k, 3))))(key)
        # The primitive itself, on random words, against the NumPy reference.
        got = jax.jit(threefry_2x32)(jnp.asarray(keypair, jnp.uint32), jnp.asarray(x.reshape(-1)))
    for name in before:
        np.testing.assert_array_equal(np.asarray(after[name]), np.asarray(before[name]), err_msg=name)
    np.testing.assert_array_equal(np.asarray(got), np.concatenate(_reference(keypair, x[0], x[1])))


def test_the_cpu_lowering_of_a_split_has_no_loop_once_unrolled_and_a_loop_inside_rolled_threefry():
    unroll_threefry_on_cpu()
    with rolled_threefry(False):
        assert "while" not in _lowered_split()
        with rolled_threefry():
            with rolled_threefry():
                assert "while" in _lowered_split()
            assert "while" in _lowered_split()  # the inner block restores the outer one's choice
        assert "while" not in _lowered_split()


def _lowered_split() -> str:
    return jax.jit(lambda k: jax.random.split(k, 4)).lower(jax.random.key(0)).as_text()


@pytest.fixture
def unregistered(monkeypatch):
    """As if this process had not registered the lowering yet (the variable is read at registration);
    the process's own registration and default come back afterwards."""
    unroll_threefry_on_cpu()  # registered now, so restoring _UNROLLED=True below matches the rule in place
    monkeypatch.setattr(prng, "_UNROLLED", False)
    monkeypatch.setattr(prng, "_ROLLED_BY_DEFAULT", prng._ROLLED_BY_DEFAULT)
    return monkeypatch


# Unset means JAX's own loop: the straight-line hash is faster on some CPUs and slower on others (an
# Intel Xeon VM ran PPO 15-25 % slower with it), so it is only ever chosen by the user.
@pytest.mark.parametrize("value, loop", [("", True), ("0", False), ("1", True), (" 1 ", True), (" 0", False)])
def test_the_environment_variable_chooses_the_default_lowering(unregistered, value, loop):
    unregistered.setenv(prng.ROLLED_ENV, value)
    assert unroll_threefry_on_cpu()
    assert ("while" in _lowered_split()) is loop
    with rolled_threefry(not loop):
        assert ("while" in _lowered_split()) is not loop
    # Read once: a later change, even to a bad value, changes nothing in this process.
    unregistered.setenv(prng.ROLLED_ENV, "bogus")
    assert unroll_threefry_on_cpu()
    assert ("while" in _lowered_split()) is loop
    # The default is the process's, not the registering thread's.
    seen = []
    thread = threading.Thread(target=lambda: seen.append("while" in _lowered_split()))
    thread.start()
    thread.join()
    assert seen == [loop]


def test_the_default_lowering_is_jaxs_own_rule(unregistered):
    """Unset, rljax hands the hash to the rule JAX registered (not a copy of it): the programs users
    get are JAX's."""
    unregistered.delenv(prng.ROLLED_ENV, raising=False)
    assert unroll_threefry_on_cpu() and prng._JAX_RULE is not None
    calls = []
    jax_rule = prng._JAX_RULE
    unregistered.setattr(prng, "_JAX_RULE", lambda ctx, *args: calls.append(1) or jax_rule(ctx, *args))
    jax.jit(lambda k: jax.random.split(k, 5)).lower(jax.random.key(0)).as_text()
    assert calls
    with rolled_threefry(False):
        calls.clear()
        jax.jit(lambda k: jax.random.split(k, 6)).lower(jax.random.key(0)).as_text()
        assert not calls


def test_a_bad_environment_value_is_refused_by_name(unregistered):
    unregistered.setenv(prng.ROLLED_ENV, "yes")
    with pytest.raises(ValueError, match=r"RLJAX_ROLLED_THREEFRY='yes': set it to 1 / unset it .* or 0 "):
        unroll_threefry_on_cpu()
    assert not prng._UNROLLED  # nothing registered: the next call reads the variable again


def test_a_block_left_by_an_exception_restores_the_choice_and_is_per_thread():
    unroll_threefry_on_cpu()
    with rolled_threefry(False):
        with pytest.raises(RuntimeError):
            with rolled_threefry():
                raise RuntimeError("inside the block")
        assert "while" not in _lowered_split()
        seen = []  # another thread lowers with the process's default, not this thread's block
        thread = threading.Thread(target=lambda: seen.append(prng._LOCAL.__dict__.get("rolled")))
        thread.start()
        thread.join()
        assert seen == [None]


@pytest.mark.parametrize("key_shape", [(), (129,)])
def test_the_rolled_hash_equals_the_unrolled_one_and_the_reference(key_shape):
    rng = np.random.default_rng(2)
    x = rng.integers(0, 2**32, size=(2, 129), dtype=np.uint32)
    keys = rng.integers(0, 2**32, size=(2,) + key_shape, dtype=np.uint32)
    words = [jnp.asarray(keys[0]), jnp.asarray(keys[1]), jnp.asarray(x[0]), jnp.asarray(x[1])]
    rolled = jax.jit(threefry2x32_rolled)(*words)
    unrolled = jax.jit(threefry2x32_unrolled)(*words)
    for r, u in zip(rolled, unrolled):
        np.testing.assert_array_equal(np.asarray(r), np.asarray(u))
    if key_shape == ():
        ref = _reference((int(keys[0]), int(keys[1])), x[0], x[1])
        np.testing.assert_array_equal(np.asarray(rolled[0]), ref[0])
        np.testing.assert_array_equal(np.asarray(rolled[1]), ref[1])


@pytest.mark.parametrize("case", ["distinct", "ties", "all_equal", "two"])
def test_stable_argsort_is_the_stable_order(case):
    rng = np.random.default_rng(1)
    keys = {"distinct": rng.permutation(np.arange(512, dtype=np.uint32) * 7919),
            "ties": rng.integers(0, 40, 300).astype(np.uint32),
            "all_equal": np.full(64, 2**32 - 1, np.uint32),
            "two": np.asarray([5, 5], np.uint32)}[case]
    got = jax.jit(stable_argsort)(jnp.asarray(keys))
    assert got.dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(got), np.argsort(keys, kind="stable"))


# JAX sorts once up to 1,625 elements, twice up to ~2.6 million, three times above (slow: 20 s,
# the two-round sizes stand for it by default).
@pytest.mark.parametrize("n", [1, 2, 3, 128, 512, 1625, 1626, 5000, 8192,
                               pytest.param(2_700_000, marks=pytest.mark.slow)])
def test_permutation_is_jax_random_permutation_bit_for_bit(n):
    perm = jax.jit(permutation, static_argnums=1)
    for seed in range(6 if n < 10**6 else 2):
        key = jax.random.key(seed)
        expected = jax.random.permutation(key, n)
        got = perm(key, n)
        assert got.dtype == expected.dtype and got.shape == (n,)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))


@pytest.mark.parametrize("n", [512, 8192])
def test_permutation_under_vmap_matches_each_key_and_keeps_one_branch(n):
    keys = jax.random.split(jax.random.key(3), 5)
    batched = jax.jit(jax.vmap(lambda k: permutation(k, n)))
    for k, row in zip(keys, np.asarray(batched(keys))):
        np.testing.assert_array_equal(row, np.asarray(jax.random.permutation(k, n)))
    # One cond for the population (a vmapped cond would be a select that runs both sorts every time).
    assert "stablehlo.case" in batched.lower(keys).as_text()


def test_stable_argsort_under_vmap_with_a_tie_in_one_row():
    rng = np.random.default_rng(4)
    rows = rng.permutation(np.arange(3 * 50, dtype=np.uint32) * 104729).reshape(3, 50)
    rows[1, 7] = rows[1, 30]  # one tie, in the middle row only
    got = np.asarray(jax.jit(jax.vmap(stable_argsort))(jnp.asarray(rows)))
    for r, g in zip(rows, got):
        np.testing.assert_array_equal(g, np.argsort(r, kind="stable"))
    # A key vector vmapped against a batched other argument: the rule broadcasts it.
    same = jax.jit(jax.vmap(lambda _, k: stable_argsort(k), in_axes=(0, None)))(jnp.arange(2), jnp.asarray(rows[1]))
    for g in np.asarray(same):
        np.testing.assert_array_equal(g, np.argsort(rows[1], kind="stable"))
