"""Tests for rljax.core.buffers: hand-checked ring-buffer cases, sum-tree invariants (hypothesis, against
a sequential numpy model), long-run drift, the sampling distribution (chi-square) and importance
weights."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from rljax.core import buffers as rb

# --------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------

add_jit = jax.jit(rb.add)
sample_jit = jax.jit(rb.sample, static_argnums=2)
padd_jit = jax.jit(rb.prioritized_add)
pupdate_jit = jax.jit(rb.update_priorities)
psample_jit = jax.jit(rb.prioritized_sample, static_argnums=2)


def _rows(start: int, b: int) -> dict:
    """``b`` scalar transitions ``start .. start + b - 1`` plus a vector leaf derived from them."""
    x = np.arange(start, start + b)
    return {"x": jnp.asarray(x, jnp.int32), "v": jnp.asarray(np.stack([x, -x], 1), jnp.float32)}


def _example() -> dict:
    return {"x": jnp.int32(0), "v": jnp.zeros((2,), jnp.float32)}


def _build_sum(leaves: np.ndarray) -> np.ndarray:
    """Heap-ordered float32 sum tree built from scratch, pairwise, from ``leaves``."""
    n = leaves.shape[0]
    tree = np.zeros(2 * n, np.float32)
    tree[n:] = leaves
    for node in range(n - 1, 0, -1):
        tree[node] = np.float32(tree[2 * node] + tree[2 * node + 1])
    return tree


def _build_min(leaves: np.ndarray) -> np.ndarray:
    n = leaves.shape[0]
    tree = np.full(2 * n, np.inf, np.float32)
    tree[n:] = np.where(leaves > 0, leaves, np.inf)
    for node in range(n - 1, 0, -1):
        tree[node] = min(tree[2 * node], tree[2 * node + 1])
    return tree


def _check_tree_invariants(state: rb.PrioritizedReplayState) -> np.ndarray:
    """Asserts the structural invariants and returns the float32 leaves ``[num_leaves]``."""
    sum_tree = np.asarray(state.sum_tree)
    min_tree = np.asarray(state.min_tree)
    n = state.num_leaves
    leaves = sum_tree[n:]
    size = int(state.size)
    # Every internal node is exactly the float32 sum of its two children: the tree is bit-for-bit
    # the one built from scratch from its current leaves, whatever the history of updates.
    np.testing.assert_array_equal(sum_tree[1:n], _build_sum(leaves)[1:n])
    np.testing.assert_array_equal(min_tree[1:], _build_min(leaves)[1:])
    # The root is the sum of the leaves (float64 reference) up to pairwise-summation rounding.
    np.testing.assert_allclose(sum_tree[1], leaves.astype(np.float64).sum(), rtol=1e-6, atol=0)
    # Unfilled slots and padding leaves carry no priority.
    assert np.all(leaves[size:] == 0)
    assert np.all(leaves >= 0)
    return leaves


# --------------------------------------------------------------------------------------------------
# Uniform ring buffer
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("add_fn", [rb.add, add_jit], ids=["eager", "jit"])
def test_ring_wraparound_hand_checked(add_fn):
    state = rb.init(_example(), capacity=5)
    assert state.capacity == 5 and int(state.cursor) == 0 and int(state.size) == 0
    assert not bool(state.full)
    # Each add writes rows (cursor + k) % 5 for k = 0, 1, 2; the values are a running counter.
    expected = [
        # after add of [0, 1, 2] at slots 0, 1, 2
        ([0, 1, 2, 0, 0], 3, 3, False),
        # after add of [3, 4, 5] at slots 3, 4, 0 (straddles the end, overwrites the oldest, 0)
        ([5, 1, 2, 3, 4], 1, 5, True),
        # after add of [6, 7, 8] at slots 1, 2, 3
        ([5, 6, 7, 8, 4], 4, 5, True),
        # after add of [9, 10, 11] at slots 4, 0, 1
        ([10, 11, 7, 8, 9], 2, 5, True),
    ]
    for k, (data, cursor, size, full) in enumerate(expected):
        state = add_fn(state, _rows(3 * k, 3))
        np.testing.assert_array_equal(state.data["x"], data)
        np.testing.assert_array_equal(state.data["v"], np.stack([data, -np.array(data)], 1))
        assert int(state.cursor) == cursor
        assert int(state.size) == size
        assert bool(state.full) == full
        assert state.cursor.dtype == jnp.int32 and state.size.dtype == jnp.int32


@pytest.mark.parametrize("write", [rb._write_scatter, rb._write_slices], ids=["scatter", "slices"])
def test_batch_straddling_end_every_cursor_and_size(write):
    # A capacity that is not a power of two; every cursor and every batch size 1..capacity,
    # including B == capacity (a full rotation) and batches that wrap past slot 0.
    capacity = 7
    old = np.arange(capacity * 2, dtype=np.float32).reshape(capacity, 2)
    for cursor in range(capacity):
        for b in range(1, capacity + 1):
            x = -1.0 - np.arange(b * 2, dtype=np.float32).reshape(b, 2)
            expected = old.copy()
            for k in range(b):
                expected[(cursor + k) % capacity] = x[k]
            got = write(jnp.asarray(old), jnp.asarray(x), jnp.int32(cursor))
            np.testing.assert_array_equal(got, expected, err_msg=f"cursor={cursor} b={b}")


def test_straddling_batch_via_add():
    # capacity 4, cursor 3 after adding 3 rows; a batch of 3 goes to slots 3, 0, 1.
    state = rb.add(rb.init(_example(), 4), _rows(0, 3))
    state = rb.add(state, _rows(10, 3))
    np.testing.assert_array_equal(state.data["x"], [11, 12, 2, 10])
    assert int(state.cursor) == 2 and int(state.size) == 4 and bool(state.full)


def test_add_validates_its_batch():
    state = rb.init(_example(), 3)
    with pytest.raises(ValueError, match="batch size"):
        rb.add(state, _rows(0, 4))  # more rows than slots
    with pytest.raises(ValueError, match="structure"):
        rb.add(state, {"x": jnp.zeros((2,), jnp.int32)})
    with pytest.raises(ValueError, match="leading"):
        rb.add(state, {"x": jnp.zeros((2,), jnp.int32), "v": jnp.zeros((3, 2))})
    with pytest.raises(ValueError, match="kind"):
        rb.add(state, {"x": jnp.zeros((2,), jnp.float32), "v": jnp.zeros((2, 2))})
    with pytest.raises(ValueError, match="row"):
        rb.add(state, {"x": jnp.zeros((2,), jnp.int32), "v": jnp.zeros((2, 3))})
    with pytest.raises(ValueError, match="capacity"):
        rb.init(_example(), 0)


def test_sample_only_from_filled_slots():
    state = rb.add(rb.init(_example(), 100), _rows(0, 7))
    indices, batch = sample_jit(state, jax.random.key(0), 2000)
    indices = np.asarray(indices)
    assert indices.dtype == np.int32 and indices.shape == (2000,)
    assert indices.min() >= 0 and indices.max() < 7
    # Uniform over the 7 filled slots: every one shows up, roughly 2000 / 7 = 286 times each.
    counts = np.bincount(indices, minlength=7)
    assert np.all(counts > 200), counts
    # The batch is the rows at those indices.
    np.testing.assert_array_equal(batch["x"], indices)
    np.testing.assert_array_equal(batch["v"][:, 1], -indices.astype(np.float32))


def test_sample_after_wrap_covers_whole_ring():
    state = rb.init(_example(), 5)
    for k in range(3):
        state = rb.add(state, _rows(3 * k, 3))
    indices, batch = rb.sample(state, jax.random.key(1), 500)
    assert set(np.asarray(indices).tolist()) == set(range(5))
    np.testing.assert_array_equal(batch["x"], np.asarray(state.data["x"])[np.asarray(indices)])


def test_can_sample():
    state = rb.init(_example(), 10)
    assert not bool(rb.can_sample(state, 1))
    state = rb.add(state, _rows(0, 3))
    assert bool(rb.can_sample(state, 3)) and not bool(rb.can_sample(state, 4))
    assert jax.jit(rb.can_sample, static_argnums=1)(state, 3).dtype == jnp.bool_


def test_scan_carry_under_donated_jit_matches_eager():
    capacity, b, steps = 11, 3, 9

    @functools.partial(jax.jit, donate_argnums=0)
    def fill(state):
        def step(s, t):
            return rb.add(s, _rows_traced(t * b, b)), s.cursor

        return jax.lax.scan(step, state, jnp.arange(steps))

    def _rows_traced(start, n):
        x = start + jnp.arange(n, dtype=jnp.int32)
        return {"x": x, "v": jnp.stack([x, -x], 1).astype(jnp.float32)}

    got, cursors = fill(rb.init(_example(), capacity))
    expected = rb.init(_example(), capacity)
    for t in range(steps):
        expected = rb.add(expected, _rows(t * b, b))
    for g, e in zip(jax.tree.leaves(got), jax.tree.leaves(expected)):
        np.testing.assert_array_equal(g, e)
    np.testing.assert_array_equal(cursors, [(t * b) % capacity for t in range(steps)])
    # 27 rows into 11 slots: slot s holds the latest row r with r % 11 == s.
    np.testing.assert_array_equal(got.data["x"], [22, 23, 24, 25, 26, 16, 17, 18, 19, 20, 21])


def test_nested_transition_pytree():
    example = {
        "obs": {"pos": jnp.zeros((2,), jnp.float32), "img": jnp.zeros((3, 3), jnp.uint8)},
        "action": jnp.int32(0),
        "flags": (jnp.bool_(False), jnp.bool_(False)),
    }
    state = rb.init(example, 4)
    assert state.data["obs"]["img"].shape == (4, 3, 3)
    assert state.data["obs"]["img"].dtype == jnp.uint8
    assert state.data["flags"][0].shape == (4,) and state.data["flags"][0].dtype == jnp.bool_
    batch = {
        "obs": {"pos": jnp.arange(6.0).reshape(3, 2),
                "img": jnp.arange(27, dtype=jnp.uint8).reshape(3, 3, 3)},
        "action": jnp.array([7, 8, 9]),
        "flags": (jnp.array([True, False, True]), jnp.array([False, False, True])),
    }
    state = add_jit(add_jit(state, batch), batch)  # slots 0, 1, 2 then 3, 0, 1
    np.testing.assert_array_equal(state.data["action"], [8, 9, 9, 7])
    np.testing.assert_array_equal(state.data["flags"][1], [False, True, True, False])
    np.testing.assert_array_equal(state.data["obs"]["img"][3], batch["obs"]["img"][0])
    indices, sampled = sample_jit(state, jax.random.key(2), 8)
    np.testing.assert_array_equal(sampled["obs"]["pos"],
                                  np.asarray(state.data["obs"]["pos"])[np.asarray(indices)])
    np.testing.assert_array_equal(sampled["flags"][0],
                                  np.asarray(state.data["flags"][0])[np.asarray(indices)])


def test_vmap_population_of_buffers():
    pop, capacity = 3, 6
    one = rb.init(_example(), capacity)
    states = jax.tree.map(lambda x: jnp.broadcast_to(x, (pop, *x.shape)), one)
    # Member m adds rows 100 m .. 100 m + 3, then rows 100 m + 10 .. + 13 (wraps at capacity 6).
    batches = [jax.tree.map(lambda *xs: jnp.stack(xs), *[_rows(100 * m + s, 4) for m in range(pop)])
               for s in (0, 10)]
    vadd = jax.jit(jax.vmap(rb.add))
    for batch in batches:
        states = vadd(states, batch)
    keys = jax.random.split(jax.random.key(3), pop)
    indices, sampled = jax.vmap(rb.sample, in_axes=(0, 0, None))(states, keys, 5)
    assert indices.shape == (pop, 5) and sampled["v"].shape == (pop, 5, 2)
    for m in range(pop):
        member = rb.add(rb.add(one, _rows(100 * m, 4)), _rows(100 * m + 10, 4))
        got = jax.tree.map(lambda x: x[m], states)
        for g, e in zip(jax.tree.leaves(got), jax.tree.leaves(member)):
            np.testing.assert_array_equal(g, e)
        ref_idx, ref_batch = rb.sample(member, keys[m], 5)
        np.testing.assert_array_equal(indices[m], ref_idx)
        np.testing.assert_array_equal(sampled["x"][m], ref_batch["x"])
    np.testing.assert_array_equal(states.cursor, [2, 2, 2])
    np.testing.assert_array_equal(states.full, [True, True, True])


# --------------------------------------------------------------------------------------------------
# Prioritised replay: hand-checked cases
# --------------------------------------------------------------------------------------------------


def _per(priorities, alpha=1.0, capacity=None):
    """A prioritised buffer holding ``len(priorities)`` transitions with those priorities."""
    n = len(priorities)
    state = rb.prioritized_init(_example(), capacity or n, alpha=alpha)
    state = rb.prioritized_add(state, _rows(0, n))
    return rb.update_priorities(state, jnp.arange(n), jnp.asarray(priorities, jnp.float32))


def test_importance_weights_hand_computed():
    # priorities p = [1, 2, 3, 4], alpha = 1, beta = 0.5: total 10, P = [0.1, 0.2, 0.3, 0.4], N = 4.
    # (N P)^-beta = [0.4, 0.8, 1.2, 1.6]^-0.5 = [1.58114, 1.11803, 0.91287, 0.79057];
    # the max over the buffer is the smallest P's, 1.58114, so
    # w = [1, 1.11803 / 1.58114, 0.91287 / 1.58114, 0.79057 / 1.58114]
    #   = [1, 0.70711, 0.57735, 0.5]   (= (p_i / p_min)^-0.5 = [1, 2^-.5, 3^-.5, 4^-.5]).
    state = _per([1.0, 2.0, 3.0, 4.0])
    expected_w = np.array([1.0, 0.70710678, 0.57735027, 0.5])
    # Stratified, batch 10: segment j is [j, j + 1) of the total 10, and the cumulative sums are
    # 1, 3, 6, 10, so segment 0 -> slot 0, 1-2 -> slot 1, 3-5 -> slot 2, 6-9 -> slot 3 whatever
    # the uniform draws are.
    indices, batch, weights = psample_jit(state, jax.random.key(0), 10, 0.5)
    np.testing.assert_array_equal(indices, [0, 1, 1, 2, 2, 2, 3, 3, 3, 3])
    np.testing.assert_array_equal(batch["x"], indices)
    assert weights.dtype == jnp.float32
    np.testing.assert_allclose(weights, expected_w[np.asarray(indices)], rtol=1e-6)
    # beta = 0: no correction; beta = 1: w = p_min / p_i = [1, 1/2, 1/3, 1/4].
    _, _, w0 = rb.prioritized_sample(state, jax.random.key(1), 10, 0.0)
    np.testing.assert_array_equal(w0, np.ones(10))
    idx1, _, w1 = rb.prioritized_sample(state, jax.random.key(1), 10, 1.0)
    np.testing.assert_allclose(w1, 1.0 / (np.asarray(idx1) + 1.0), rtol=1e-6)


def test_weights_normalised_by_whole_buffer_not_batch():
    # priorities [1, 100] (alpha 1): batch 2 draws segment [0, 50.5) -> slot 0 only when the draw
    # is < 1. With batch size 1 the draw lands in slot 1 with probability 100/101; its weight must
    # still be normalised by slot 0's (the buffer max), i.e. (100 / 1)^-beta, not 1.
    state = _per([1.0, 100.0])
    for seed in range(5):
        idx, _, w = rb.prioritized_sample(state, jax.random.key(seed), 1, 0.5)
        expected = 1.0 if int(idx[0]) == 0 else 0.1
        np.testing.assert_allclose(w, [expected], rtol=1e-6)


def test_alpha_is_applied_once_and_stored_in_leaves():
    # alpha = 0.5: leaves hold sqrt(p); new transitions get max_priority ** alpha.
    state = _per([4.0, 9.0, 1.0], alpha=0.5, capacity=5)
    leaves = np.asarray(state.sum_tree[state.num_leaves:])
    np.testing.assert_allclose(leaves, [2.0, 3.0, 1.0, 0, 0, 0, 0, 0], rtol=1e-6)
    assert float(state.max_priority) == 9.0
    state = rb.prioritized_add(state, _rows(3, 3))  # slots 3, 4, 0 -> sqrt(9) = 3 each
    leaves = np.asarray(state.sum_tree[state.num_leaves:])
    np.testing.assert_allclose(leaves, [3.0, 3.0, 1.0, 3.0, 3.0, 0, 0, 0], rtol=1e-6)
    np.testing.assert_allclose(state.total_priority, 13.0, rtol=1e-6)
    np.testing.assert_allclose(state.min_tree[1], 1.0, rtol=1e-6)


def test_fresh_buffer_gives_new_items_priority_one():
    state = rb.prioritized_add(rb.prioritized_init(_example(), 3, alpha=0.7), _rows(0, 2))
    np.testing.assert_array_equal(state.sum_tree[state.num_leaves:], [1.0, 1.0, 0.0, 0.0])
    assert float(state.total_priority) == 2.0


def test_duplicate_indices_last_write_wins():
    state = _per([1.0, 1.0, 1.0, 1.0, 1.0], capacity=6)
    # Slot 1 gets 5, then 7, then 2; slot 3 gets 9 then 4: sequential application leaves 2 and 4.
    state = pupdate_jit(state, jnp.array([1, 3, 1, 1, 3]), jnp.array([5.0, 9.0, 7.0, 2.0, 4.0]))
    leaves = _check_tree_invariants(state)
    np.testing.assert_array_equal(leaves[:6], [1.0, 2.0, 1.0, 4.0, 1.0, 0.0])
    # max_priority saw every write, overwritten ones included, as a one-by-one application would.
    assert float(state.max_priority) == 9.0


def test_update_ignores_indices_outside_filled_part():
    state = _per([1.0, 2.0, 3.0], capacity=8)  # size 3
    new = pupdate_jit(state, jnp.array([-1, 3, 7, 100, 2]),
                      jnp.array([50.0, 50.0, 50.0, 50.0, 6.0]))
    leaves = _check_tree_invariants(new)
    np.testing.assert_array_equal(leaves, [1.0, 2.0, 6.0, 0, 0, 0, 0, 0])
    assert float(new.max_priority) == 6.0  # the ignored 50s do not count


def test_zero_priority_is_never_sampled_and_can_sample():
    state = _per([3.0, 0.0, 2.0, 0.0, 5.0], capacity=7)
    assert bool(rb.can_sample(state, 5)) and not bool(rb.can_sample(state, 6))
    indices, _, weights = psample_jit(state, jax.random.key(4), 4096, 0.4)
    assert set(np.asarray(indices).tolist()) == {0, 2, 4}
    assert np.all(np.asarray(weights) > 0) and np.all(np.asarray(weights) <= 1)
    all_zero = rb.update_priorities(state, jnp.arange(5), jnp.zeros(5))
    assert float(all_zero.total_priority) == 0.0
    assert not bool(rb.can_sample(all_zero, 1))
    empty = rb.prioritized_init(_example(), 4)
    assert not bool(rb.can_sample(empty, 1))


def test_masked_add_gets_priority_zero_and_stays_out_of_the_weights():
    state = rb.prioritized_init(_example(), 6, alpha=0.5)
    state = rb.prioritized_add(state, _rows(0, 4), mask=jnp.array([False, True, False, True]))
    leaves = _check_tree_invariants(state)
    np.testing.assert_array_equal(leaves[:6], [0.0, 1.0, 0.0, 1.0, 0.0, 0.0])
    assert int(state.size) == 4 and float(state.min_tree[1]) == 1.0  # the min ignores masked rows
    state = rb.update_priorities(state, jnp.array([1, 3]), jnp.array([4.0, 16.0]))
    idx, _, w = psample_jit(state, jax.random.key(0), 256, 1.0)
    assert set(np.asarray(idx).tolist()) == {1, 3}
    # w = (p^alpha / min p^alpha)^-beta = (sqrt(p) / 2)^-1: 1 for slot 1, 0.5 for slot 3.
    np.testing.assert_allclose(np.asarray(w), np.where(np.asarray(idx) == 1, 1.0, 0.5), rtol=1e-6)
    with pytest.raises(ValueError, match=r"mask must have shape \(4,\)"):
        rb.prioritized_add(state, _rows(0, 4), mask=jnp.ones(3, bool))


def test_set_alpha_rebuilds_the_trees_bit_for_bit():
    priorities = jnp.array([0.5, 3.0, 0.0, 7.0, 1e-3, 2.0, 40.0])

    def build(alpha):
        state = rb.prioritized_add(rb.prioritized_init(_example(), 9, alpha=alpha), _rows(0, 7))
        return rb.update_priorities(state, jnp.arange(7), priorities)

    at_06 = build(0.6)
    for alpha in (0.9, 0.0, 1.0):
        changed = jax.jit(rb.set_alpha)(at_06, alpha)
        direct = build(alpha)
        np.testing.assert_array_equal(changed.sum_tree, direct.sum_tree)
        np.testing.assert_array_equal(changed.min_tree, direct.min_tree)
        assert float(changed.alpha) == pytest.approx(alpha)
        _check_tree_invariants(changed)
    # alpha = 0: every positive priority weighs 1, a zero priority stays unsampleable (0 ** 0 = 1).
    np.testing.assert_array_equal(build(0.0).sum_tree[16:16 + 9], [1, 1, 0, 1, 1, 1, 1, 0, 0])
    same = rb.set_alpha(at_06, at_06.alpha)
    for a, b in zip(jax.tree.leaves(same), jax.tree.leaves(at_06)):
        np.testing.assert_array_equal(a, b)


def test_descend_edges_never_reach_zero_or_unfilled_leaves():
    # Capacity 5 padded to 8 leaves, size 4, zero leaves inside the filled part and a tiny leaf
    # next to a huge one so that rounding in the sums matters.
    state = rb.prioritized_init(_example(), 5, alpha=1.0)
    state = rb.prioritized_add(state, _rows(0, 4))
    state = rb.update_priorities(state, jnp.arange(4), jnp.array([1e-7, 3e4, 0.0, 1e-8]))
    total = state.sum_tree[1]
    leaves = np.asarray(state.sum_tree[state.num_leaves:])
    cumsum = np.cumsum(leaves.astype(np.float32))
    targets = jnp.concatenate([
        jnp.array([0.0, total, jnp.nextafter(total, jnp.inf), total * 1.001, 1e30]),
        jnp.asarray(cumsum),  # every prefix boundary exactly
        jnp.asarray(np.nextafter(cumsum, -np.inf)),
    ])
    indices = np.asarray(rb._descend(state.sum_tree, targets.astype(jnp.float32)))
    assert np.all(indices < int(state.size)), indices
    assert np.all(leaves[indices] > 0), (indices, leaves[indices])
    # Draws at or past the total go to the last positive leaf, slot 3.
    np.testing.assert_array_equal(indices[1:5], [3, 3, 3, 3])
    assert indices[0] == 0


def test_linear_schedule():
    beta = rb.linear_schedule(0.4, 1.0, 100)
    np.testing.assert_allclose([beta(0), beta(50), beta(100), beta(1000), beta(-5)],
                               [0.4, 0.7, 1.0, 1.0, 0.4], rtol=1e-6)
    np.testing.assert_allclose(jax.jit(beta)(jnp.int32(25)), 0.55, rtol=1e-6)
    with pytest.raises(ValueError):
        rb.linear_schedule(0.4, 1.0, 0)


def test_vmap_over_alpha_and_beta():
    alphas = jnp.array([0.5, 1.0, 0.0])
    betas = jnp.array([0.5, 1.0, 1.0])
    prios = jnp.array([1.0, 4.0, 16.0])

    def build(alpha):
        s = rb.prioritized_add(rb.prioritized_init(_example(), 3, alpha), _rows(0, 3))
        return rb.update_priorities(s, jnp.arange(3), prios)

    states = jax.jit(jax.vmap(build))(alphas)
    # Leaves are p^alpha per member: [1, 2, 4], [1, 4, 16], [1, 1, 1].
    np.testing.assert_allclose(states.sum_tree[:, 4:7], [[1, 2, 4], [1, 4, 16], [1, 1, 1]],
                               rtol=1e-6)
    keys = jax.random.split(jax.random.key(5), 3)
    out = jax.jit(jax.vmap(rb.prioritized_sample, in_axes=(0, 0, None, 0)),
                  static_argnums=2)(states, keys, 64, betas)
    leaves = np.asarray(states.sum_tree[:, 4:7])
    for m in range(3):
        chosen = leaves[m][np.asarray(out.indices[m])]
        # w = (leaf / min leaf)^-beta, the min leaf being 1 in every member.
        np.testing.assert_allclose(out.weights[m], chosen ** -float(betas[m]), rtol=1e-5)
    np.testing.assert_array_equal(out.weights[2], np.ones(64))  # alpha = 0 is uniform


# --------------------------------------------------------------------------------------------------
# Prioritised replay: property-based invariants against a sequential numpy model
# --------------------------------------------------------------------------------------------------

_priority = st.one_of(st.just(0.0), st.floats(2.0**-10, 2.0**10, width=32))


@st.composite
def _scenarios(draw):
    capacity = draw(st.sampled_from([1, 3, 5, 8, 13]))
    alpha = draw(st.sampled_from([0.6, 1.0]))
    ops = []
    for _ in range(draw(st.integers(1, 8))):
        if draw(st.booleans()):
            ops.append(("add", draw(st.integers(1, min(3, capacity)))))
        else:
            b = draw(st.sampled_from([1, 4]))
            # Indices up to capacity + 1: some beyond the filled part (ignored), duplicates likely.
            idx = draw(st.lists(st.integers(-1, capacity + 1), min_size=b, max_size=b))
            pri = draw(st.lists(_priority, min_size=b, max_size=b))
            ops.append(("update", idx, pri))
    return capacity, alpha, ops


@settings(max_examples=30, deadline=None)
@given(_scenarios(), st.integers(0, 2**31 - 1))
def test_sum_tree_invariants_property(scenario, seed):
    capacity, alpha, ops = scenario
    state = rb.prioritized_init(_example(), capacity, alpha=alpha)
    # Sequential model: one write at a time, in batch order.
    ref = np.zeros(capacity, np.float64)
    size = cursor = 0
    max_p = 1.0
    counter = 0
    for op in ops:
        if op[0] == "add":
            b = op[1]
            state = padd_jit(state, _rows(counter, b))
            for k in range(b):
                ref[(cursor + k) % capacity] = max_p ** alpha
            counter += b
            cursor = (cursor + b) % capacity
            size = min(size + b, capacity)
        else:
            _, idx, pri = op
            state = pupdate_jit(state, jnp.asarray(idx, jnp.int32), jnp.asarray(pri, jnp.float32))
            for i, p in zip(idx, pri):
                if 0 <= i < size:
                    ref[i] = np.float32(p) ** alpha
                    max_p = max(max_p, float(np.float32(p)))
        assert int(state.size) == size and int(state.cursor) == cursor
        leaves = _check_tree_invariants(state)
        np.testing.assert_allclose(leaves[:capacity], ref, rtol=2e-6, atol=0)
        np.testing.assert_allclose(float(state.max_priority), max_p, rtol=1e-7)

    if float(state.total_priority) > 0:
        indices, batch, weights = psample_jit(state, jax.random.key(seed), 16, 0.6)
        indices = np.asarray(indices)
        assert np.all((indices >= 0) & (indices < size)), (indices, size)
        assert np.all(leaves[indices] > 0), (indices, leaves)
        np.testing.assert_array_equal(batch["x"], np.asarray(state.data["x"])[indices])
        weights = np.asarray(weights)
        assert np.all((weights > 0) & (weights <= 1))
        # The slot with the smallest positive priority has weight exactly 1.
        smallest = leaves[indices] == leaves[leaves > 0].min()
        np.testing.assert_array_equal(weights[smallest], 1.0)


# --------------------------------------------------------------------------------------------------
# Prioritised replay: long runs and the sampling distribution
# --------------------------------------------------------------------------------------------------


def test_long_run_no_drift():
    # 2000 batched updates of 64 (128k writes, duplicates included) into 1000 slots (1024 leaves),
    # priorities log-uniform over 1e-3 .. 1e3, all inside one donated jitted scan.
    capacity, b, steps = 1000, 64, 2000
    state = rb.prioritized_init(_example(), capacity, alpha=1.0)
    for start in range(0, capacity, 100):
        state = padd_jit(state, _rows(start, 100))

    @functools.partial(jax.jit, donate_argnums=0)
    def run(state, key):
        def step(s, k):
            k_idx, k_pri = jax.random.split(k)
            idx = jax.random.randint(k_idx, (b,), 0, capacity)
            pri = 10.0 ** jax.random.uniform(k_pri, (b,), minval=-3.0, maxval=3.0)
            return rb.update_priorities(s, idx, pri), (idx, pri, s.sum_tree[1])

        return jax.lax.scan(step, state, jax.random.split(key, steps))

    state, (all_idx, all_pri, roots) = run(state, jax.random.key(6))
    leaves = _check_tree_invariants(state)
    exact = leaves.astype(np.float64).sum()
    rel_err = abs(float(state.total_priority) - exact) / exact
    assert rel_err < 1e-6, rel_err

    # The delta scheme (root += new - old per write, in float32) on the same writes drifts.
    all_idx, all_pri = np.asarray(all_idx).ravel(), np.asarray(all_pri).ravel()
    leaf = np.ones(capacity, np.float32)
    root = np.float32(capacity)
    for i, p in zip(all_idx, all_pri):
        root = np.float32(root + np.float32(p - leaf[i]))
        leaf[i] = p
    np.testing.assert_array_equal(leaf, leaves[:capacity])  # same final leaves as the tree
    naive_err = abs(float(root) - exact) / exact
    # Measured: rel_err ~1.3e-8, naive_err ~4.6e-6.
    assert naive_err > 10 * rel_err, (naive_err, rel_err)


def test_sampling_distribution_chi_square():
    # 50 slots (64 leaves) with priorities spanning 3 orders of magnitude, alpha 0.7:
    # 200 batches of 1000 stratified draws vs the exact p_i = prio_i^0.7 / sum_k prio_k^0.7.
    capacity, alpha = 50, 0.7
    prios = np.random.default_rng(7).permutation(np.geomspace(0.01, 10.0, capacity))
    state = _per(prios.astype(np.float32), alpha=alpha)
    probs = prios.astype(np.float32).astype(np.float64) ** alpha
    probs /= probs.sum()

    @jax.jit
    def draw(state, keys):
        return jax.vmap(lambda k: rb.prioritized_sample(state, k, 1000, 0.5).indices)(keys)

    indices = np.asarray(draw(state, jax.random.split(jax.random.key(8), 200))).ravel()
    counts = np.bincount(indices, minlength=capacity)
    assert counts.sum() == 200_000 and counts.shape == (capacity,)  # nothing outside 0..49
    expected = probs * counts.sum()
    assert expected.min() > 50  # the chi-square approximation holds
    chi2, p_value = stats.chisquare(counts, expected)
    assert p_value > 1e-3, (chi2, p_value)
    # A sampler that ignored alpha (p ∝ prio) would be rejected by the same test.
    wrong = prios / prios.sum() * counts.sum()
    assert stats.chisquare(counts, wrong).pvalue < 1e-12


# ----- relayout: re-dealing per-device buffers over another device count (elastic resume) -----

def _filled(values: list[int], capacity: int, prioritized: bool = False):
    """A buffer whose transitions are ``values`` added one by one (oldest first)."""
    example = {"x": jnp.zeros((), jnp.int32)}
    state = rb.prioritized_init(example, capacity, alpha=0.5) if prioritized else rb.init(example, capacity)
    add = rb.prioritized_add if prioritized else rb.add
    for v in values:
        state = add(state, {"x": jnp.asarray([v], jnp.int32)})
    return jax.device_get(state)


def _contents(state) -> list[int]:
    replay = state.replay if isinstance(state, rb.PrioritizedReplayState) else state
    return [int(v) for v in np.asarray(replay.data["x"])[:int(replay.size)]]


def test_relayout_interleaves_devices_oldest_first_and_deals_them_out():
    # Two devices that each added 3 transitions: device d's value at time t is 10 * d + t.
    two = [_filled([0, 1, 2], 4), _filled([10, 11, 12], 4)]
    (one,) = rb.relayout(two, 1, 8)
    assert _contents(one) == [0, 10, 1, 11, 2, 12] and int(one.cursor) == 6 and one.capacity == 8
    back = rb.relayout([one], 2, 4)
    assert [_contents(b) for b in back] == [[0, 1, 2], [10, 11, 12]]
    assert [int(b.cursor) for b in back] == [3, 3]


def test_relayout_reads_a_wrapped_ring_oldest_first_and_drops_the_oldest_odd_one():
    wrapped = _filled([1, 2, 3, 4, 5, 6], 4)  # holds 3, 4, 5, 6 with the oldest at slot 2
    assert int(wrapped.cursor) == 2
    (same,) = rb.relayout([wrapped], 1, 4)
    assert _contents(same) == [3, 4, 5, 6] and int(same.cursor) == 0 and int(same.size) == 4
    odd = _filled([1, 2, 3], 4)
    assert [_contents(b) for b in rb.relayout([odd], 2, 2)] == [[2], [3]]  # 1, the oldest, is dropped


def test_relayout_refuses_buffers_that_did_not_fill_in_lockstep_or_do_not_fit():
    with pytest.raises(ValueError, match="did not fill in lockstep"):
        rb.relayout([_filled([1, 2], 4), _filled([1], 4)], 1, 8)
    with pytest.raises(ValueError, match="do not fit 1 buffers of 2 slots"):
        rb.relayout([_filled([1, 2], 4), _filled([3, 4], 4)], 1, 2)


def test_relayout_moves_priorities_with_their_transitions_and_rebuilds_the_trees():
    devices = [_filled([0, 1, 2], 4, prioritized=True), _filled([10, 11, 12], 4, prioritized=True)]
    devices = [jax.device_get(rb.update_priorities(jax.device_put(d), jnp.arange(3), jnp.asarray(p, jnp.float32)))
               for d, p in zip(devices, ([1.0, 2.0, 3.0], [4.0, 5.0, 6.0]))]
    (one,) = rb.relayout(devices, 1, 8)
    assert _contents(one) == [0, 10, 1, 11, 2, 12]
    np.testing.assert_array_equal(one.priorities[:6], [1, 4, 2, 5, 3, 6])
    assert float(one.max_priority) == 6.0 and float(one.alpha) == 0.5
    rebuilt = rb.set_alpha(one, 0.5)  # the trees are exactly those of these priorities
    np.testing.assert_array_equal(one.sum_tree, rebuilt.sum_tree)
    np.testing.assert_array_equal(one.min_tree, rebuilt.min_tree)
    assert float(one.sum_tree[1]) == pytest.approx(sum(p ** 0.5 for p in range(1, 7)), rel=1e-6)
