"""Replay buffers that live on the accelerator: a uniform ring buffer and proportional prioritised
replay (Schaul et al. 2016, "Prioritized Experience Replay") over a drift-free sum tree.

Design
------
Buffers are pure functions over pytree states, in the style of optax: ``init`` builds a state,
``add`` / ``update_priorities`` return a new state, ``sample`` reads one. States are
``flax.struct.dataclass`` pytrees, so they can be ``jit`` arguments (donated), ``lax.scan`` carries,
and ``vmap``-ed into a population of independent buffers. The only static (non-traced) quantities
are shapes: the capacity, the add batch size ``B`` (the leading dimension of the batch) and the
sample ``batch_size``.

Transitions are arbitrary pytrees of arrays. ``init`` takes ONE example transition (no batch
dimension) and allocates ``[capacity, *leaf.shape]`` zeros per leaf; ``add`` takes a batch whose
leaves have a leading ``[B]`` dimension. Which leaves a transition has (``obs``, ``action``,
``reward``, ``terminated``, ``truncated``, ``next_obs``, nested dicts, ...) is up to the caller.

In-place writes
---------------
``add`` writes the ``B`` new rows with one scatter per leaf at the ring slots
``(cursor + arange(B)) % capacity``. The slots are distinct (``B <= capacity``), and the scatter is
declared ``unique_indices``, so XLA updates the buffer in place whenever it owns it: when the state
is a donated ``jit`` argument, or the carry of a ``lax.scan`` / ``fori_loop`` inside one program.
The cost of an ``add`` is then ``O(B)``, independent of the capacity;
``benchmarks/replay_memory.py`` shows this from the compiled program's memory analysis (no
temporary the size of the buffer) and from the time per add at capacities 1e4 and 1e6. Without
donation, a jitted ``add`` must copy the buffer once per *call* (the caller still holds the input),
which is why training loops should donate their state or keep the buffer inside one compiled loop.

A batch that straddles the end of the ring is split by the modular index arithmetic; no branch is
needed. The alternative, two masked ``dynamic_update_slice`` windows (:func:`_write_slices`), keeps
the rows of each window that are not overwritten by reading them back from the buffer; XLA:CPU then
cannot emit the fused dynamic-update-slice in place and loops over the whole buffer, so it costs
``O(capacity)`` per add: at large capacities, orders of magnitude slower than the scatter (figures
in ``benchmarks/results.md``).

Prioritised replay
------------------
Leaf ``i`` of a sum tree holds ``p_i ** alpha`` (priorities are stored **already raised to alpha**;
``alpha`` lives in the state, so ``add`` and ``update_priorities`` cannot disagree on it), and every
internal node the sum of its two children. The raw priorities ``p_i`` are kept too (one float32
per slot), so :func:`set_alpha` can change ``alpha`` (e.g. population-based training perturbing
it) and rebuild both trees exactly. A priority of 0 stays 0 whatever ``alpha`` is (never sampled,
even at ``alpha = 0``). The tree has ``2 * num_leaves`` float32 entries in heap
order (root at 1, children of ``n`` at ``2n`` and ``2n + 1``, leaf ``i`` at ``num_leaves + i``,
entry 0 unused), with ``num_leaves`` the next power of two ``>= capacity``; the padding leaves, and
the leaves of slots not yet filled, hold priority 0 and so are never sampled.

Drift-free by construction: after writing leaves, every ancestor of a written leaf is **recomputed**
as the sum of its two children, level by level (one gather + scatter per level for the whole
batch). Internal nodes are never updated by adding deltas, so a node's value is a function of the
current leaves only: after any history of updates the tree is bit-for-bit the tree one would build
from scratch from its leaves, and the root equals the pairwise float32 sum of the leaves, whose
rounding error (``~ log2(capacity) * eps`` relative) does not grow with the number of updates. The
delta scheme (``node += new - old``) accumulates one rounding error per update and per level, so
the root drifts away from the sum, and subtrees can even go negative or keep mass for leaves that
are zero. (In ``tests/unit/core/test_buffers.py``, after 128k writes of priorities spanning 1e-3 .. 1e3, the
recomputed root is within ~1e-8 relative of the float64 sum of the leaves, a delta-updated root
~5e-6.) Ancestors shared by several written leaves (and duplicate
indices) are written several times in one scatter, but always with the same value, so the result
does not depend on the scatter order.

A second tree of the same shape holds the minimum positive leaf (``+inf`` for zero leaves), also
recomputed, so the importance-weight normaliser ``max_j w_j = (N * P_min) ** -beta`` is read off its
root in ``O(1)`` per sample; the price is ``O(B log capacity)`` extra work per update and another
``8 * num_leaves`` bytes. (The alternative, a ``min`` over the filled leaves at every sample, costs
``O(capacity)`` reads per sample.) On a CPU, the random root-to-leaf walks of an update miss the
caches once the trees outgrow them, so the cost of an add + update grows with the capacity
(sub-linearly), yet stays far below one copy of the state (figures in ``benchmarks/results.md``).

Sampling is stratified: the total mass is cut into ``batch_size`` equal segments and one uniform
draw is taken per segment, then every draw descends the tree (``log2(num_leaves)`` vectorised
steps). The descent only enters a right child whose sum is positive, so float rounding (a draw at
or just above the total, or ``left + right`` rounding up) can never land on a zero-priority leaf,
which also means never outside the filled part.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

__all__ = [
    "ReplayState",
    "Sample",
    "init",
    "add",
    "sample",
    "can_sample",
    "PrioritizedReplayState",
    "PrioritizedSample",
    "prioritized_init",
    "prioritized_add",
    "prioritized_sample",
    "update_priorities",
    "set_alpha",
    "relayout",
    "linear_schedule",
]

Transition = Any  # a pytree of arrays


# --------------------------------------------------------------------------------------------------
# Uniform ring buffer
# --------------------------------------------------------------------------------------------------


@struct.dataclass
class ReplayState:
    """State of a uniform ring buffer.

    Attributes:
        data: the transition pytree, every leaf ``[capacity, ...]``. Only rows ``[0, size)`` hold
            real transitions (the ring fills from slot 0, so the filled part is always a prefix).
        cursor: int32 scalar, the slot the next transition is written to.
        size: int32 scalar, the number of filled slots, ``<= capacity``.
        capacity: static int, the number of slots.
    """

    data: Transition
    cursor: jax.Array
    size: jax.Array
    capacity: int = struct.field(pytree_node=False)

    @property
    def full(self) -> jax.Array:
        """bool scalar: every slot holds a transition, so the next add overwrites the oldest."""
        return self.size >= self.capacity


class Sample(NamedTuple):
    """A uniformly sampled batch.

    Attributes:
        indices: int32 ``[batch_size]``, the buffer slots sampled.
        batch: the transition pytree, every leaf ``[batch_size, ...]``.
    """

    indices: jax.Array
    batch: Transition


def _check_capacity(capacity: int) -> int:
    if not isinstance(capacity, (int, np.integer)) or isinstance(capacity, bool) or capacity < 1:
        raise ValueError(f"capacity must be a positive int, got {capacity!r}")
    if capacity >= 2**31:
        # cursor, size and indices are int32.
        raise ValueError(f"capacity must be < 2**31, got {capacity}")
    return int(capacity)


def init(example_transition: Transition, capacity: int) -> ReplayState:
    """Allocates an empty ring buffer.

    Args:
        example_transition: ONE transition (no batch dimension): a pytree of arrays or scalars.
            Only its structure, shapes and dtypes are used.
        capacity: static number of slots.

    Returns:
        A :class:`ReplayState` with zero data ``[capacity, *leaf.shape]`` (leaf dtypes kept),
        ``cursor = size = 0``.

    Raises:
        ValueError: ``capacity`` is not a positive int below ``2**31``.
    """
    capacity = _check_capacity(capacity)

    def zeros(x: Any) -> jax.Array:
        x = jnp.asarray(x)
        return jnp.zeros((capacity, *x.shape), x.dtype)

    return ReplayState(data=jax.tree.map(zeros, example_transition),
                       cursor=jnp.zeros((), jnp.int32), size=jnp.zeros((), jnp.int32),
                       capacity=capacity)


def _batch_size_of(data: Transition, batch: Transition, capacity: int) -> int:
    """Checks that ``batch`` is ``[B]`` rows of ``data``'s transitions and returns the static B."""
    data_leaves, data_def = jax.tree.flatten(data)
    batch_leaves, batch_def = jax.tree.flatten(batch)
    if data_def != batch_def:
        raise ValueError(f"batch structure {batch_def} does not match the buffer's {data_def}")
    sizes = set()
    for buf, x in zip(data_leaves, batch_leaves):
        shape = jnp.shape(x)
        if len(shape) != buf.ndim or shape[1:] != buf.shape[1:]:
            raise ValueError(f"batch leaf of shape {shape} does not match buffer rows of shape "
                             f"{buf.shape[1:]}; a batch needs a leading [B] dimension")
        if not jnp.can_cast(jnp.result_type(x), buf.dtype, casting="same_kind"):
            raise ValueError(f"batch leaf dtype {jnp.result_type(x)} cannot be stored in a "
                             f"{buf.dtype} buffer without changing kind")
        sizes.add(shape[0])
    if len(sizes) != 1:
        raise ValueError(f"batch leaves disagree on the leading dimension: {sorted(sizes)}")
    (b,) = sizes
    if not 1 <= b <= capacity:
        # More rows than slots would make the scatter indices collide.
        raise ValueError(f"add batch size must be in [1, capacity={capacity}], got {b}")
    return b


def _ring_slots(cursor: jax.Array, b: int, capacity: int) -> jax.Array:
    """int32 ``[b]``: the slots ``b`` consecutive writes starting at ``cursor`` go to."""
    return (cursor + jnp.arange(b, dtype=jnp.int32)) % capacity


def _write_scatter(buf: jax.Array, x: jax.Array, cursor: jax.Array) -> jax.Array:
    """Writes rows ``x`` at the ring slots from ``cursor``: one scatter with distinct indices."""
    slots = _ring_slots(cursor, x.shape[0], buf.shape[0])
    return buf.at[slots].set(x.astype(buf.dtype), unique_indices=True,
                             mode="promise_in_bounds")


def _write_slices(buf: jax.Array, x: jax.Array, cursor: jax.Array) -> jax.Array:
    """Same result as :func:`_write_scatter` with two masked ``dynamic_update_slice`` windows.

    Window 1 is ``[s, s + B)`` with ``s = min(cursor, capacity - B)``: it receives the rows that go
    at or after ``cursor``. Window 2 is ``[0, B)``: it receives the rows that wrapped around (none
    unless the batch straddles the end). Rows of a window that receive nothing are rewritten with
    their old value. Kept for the benchmark's comparison.
    """
    capacity, b = buf.shape[0], x.shape[0]
    x = x.astype(buf.dtype)
    j = jnp.arange(b, dtype=jnp.int32)
    row_mask_shape = (b,) + (1,) * (buf.ndim - 1)

    start = jnp.minimum(cursor, capacity - b)
    src = start + j - cursor  # row of x for slot start + j, valid when >= 0
    old = jax.lax.dynamic_slice_in_dim(buf, start, b)
    new = jnp.where((src >= 0).reshape(row_mask_shape), x[jnp.clip(src, 0, b - 1)], old)
    buf = jax.lax.dynamic_update_slice_in_dim(buf, new, start, 0)

    src = j + capacity - cursor  # row of x for slot j (wrapped), valid when < b
    old = jax.lax.dynamic_slice_in_dim(buf, 0, b)
    new = jnp.where((src < b).reshape(row_mask_shape), x[jnp.clip(src, 0, b - 1)], old)
    return jax.lax.dynamic_update_slice_in_dim(buf, new, 0, 0)


def _add(state: ReplayState, batch: Transition,
         write: Callable[[jax.Array, jax.Array, jax.Array], jax.Array]) -> ReplayState:
    b = _batch_size_of(state.data, batch, state.capacity)
    data = jax.tree.map(lambda buf, x: write(buf, jnp.asarray(x), state.cursor), state.data, batch)
    return state.replace(data=data,
                         cursor=(state.cursor + b) % state.capacity,
                         size=jnp.minimum(state.size + b, state.capacity))


def add(state: ReplayState, batch: Transition) -> ReplayState:
    """Appends ``B`` transitions, overwriting the oldest ones once the buffer is full.

    Writes in place (``O(B)``, no copy of the buffer) when XLA owns ``state``: a donated ``jit``
    argument or a loop carry inside one compiled program.

    Args:
        state: the buffer.
        batch: a pytree with the buffer's structure whose leaves are ``[B, *row_shape]``, with a
            static ``1 <= B <= capacity``. Dtypes are cast to the buffer's when that keeps the kind
            (float64 -> float32, int64 -> int32); a change of kind (float -> int) is an error.

    Returns:
        The new state: row ``k`` of the batch at slot ``(cursor + k) % capacity``, ``cursor``
        advanced by ``B`` modulo ``capacity``, ``size = min(size + B, capacity)``.

    Raises:
        ValueError: mismatched structure or row shapes, leaves disagreeing on ``B``, ``B`` outside
            ``[1, capacity]``, or a dtype-kind change.
    """
    return _add(state, batch, _write_scatter)


def _gather(data: Transition, indices: jax.Array) -> Transition:
    # Indices come from the sampler and are always in [0, capacity).
    return jax.tree.map(lambda buf: buf.at[indices].get(mode="promise_in_bounds"), data)


def sample(state: ReplayState, key: jax.Array, batch_size: int) -> Sample:
    """Samples ``batch_size`` transitions uniformly, with replacement, from the filled slots.

    Args:
        state: the buffer; should hold at least one transition (see :func:`can_sample`). An empty
            buffer returns slot 0 (zeros) ``batch_size`` times.
        key: PRNG key.
        batch_size: static number of transitions.

    Returns:
        :class:`Sample` ``(indices int32 [batch_size], batch)`` with indices uniform on
        ``[0, size)``.
    """
    indices = jax.random.randint(key, (batch_size,), 0, jnp.maximum(state.size, 1), jnp.int32)
    return Sample(indices, _gather(state.data, indices))


def can_sample(state: ReplayState | PrioritizedReplayState, batch_size: int) -> jax.Array:
    """Whether the buffer holds at least ``batch_size`` transitions (and, for prioritised replay,
    positive total priority).

    Args:
        state: a :class:`ReplayState` or :class:`PrioritizedReplayState`.
        batch_size: the batch size about to be sampled.

    Returns:
        bool scalar array (usable in ``lax.cond`` / ``jnp.where``).
    """
    ok = state.size >= batch_size
    if isinstance(state, PrioritizedReplayState):
        ok = ok & (state.sum_tree[..., 1] > 0)
    return ok


# --------------------------------------------------------------------------------------------------
# Proportional prioritised replay
# --------------------------------------------------------------------------------------------------


@struct.dataclass
class PrioritizedReplayState:
    """State of a proportional prioritised replay buffer.

    Attributes:
        replay: the underlying :class:`ReplayState` (data, cursor, size).
        sum_tree: float32 ``[2 * num_leaves]`` in heap order: leaf ``i`` (at ``num_leaves + i``)
            holds ``priority_i ** alpha``, node ``n`` holds ``sum_tree[2n] + sum_tree[2n + 1]``,
            the root is ``sum_tree[1]``, entry 0 is unused. Leaves of unfilled slots and padding
            leaves ``[capacity, num_leaves)`` are 0.
        min_tree: float32 ``[2 * num_leaves]``, same layout: leaf ``i`` holds
            ``priority_i ** alpha`` where that is positive and ``+inf`` otherwise; node ``n`` is the
            min of its children.
        max_priority: float32 scalar, the largest priority (before ``** alpha``) ever stored,
            initially 1. New transitions get it.
        alpha: float32 scalar, the prioritisation exponent (0 = uniform, 1 = fully proportional).
        priorities: float32 ``[capacity]``, the raw priority of each slot (before ``** alpha``; 0
            for unfilled and masked slots): what :func:`set_alpha` rebuilds the trees from.
    """

    replay: ReplayState
    sum_tree: jax.Array
    min_tree: jax.Array
    max_priority: jax.Array
    alpha: jax.Array
    priorities: jax.Array

    @property
    def data(self) -> Transition:
        """The transition pytree, leaves ``[capacity, ...]``."""
        return self.replay.data

    @property
    def cursor(self) -> jax.Array:
        """int32 scalar, next write slot."""
        return self.replay.cursor

    @property
    def size(self) -> jax.Array:
        """int32 scalar, filled slots."""
        return self.replay.size

    @property
    def capacity(self) -> int:
        """Static number of slots."""
        return self.replay.capacity

    @property
    def full(self) -> jax.Array:
        """bool scalar: every slot is filled."""
        return self.replay.full

    @property
    def num_leaves(self) -> int:
        """Static number of tree leaves: the next power of two ``>= capacity``."""
        return self.sum_tree.shape[-1] // 2

    @property
    def total_priority(self) -> jax.Array:
        """float32 scalar: the root of the sum tree, ``sum_i priority_i ** alpha``."""
        return self.sum_tree[..., 1]


class PrioritizedSample(NamedTuple):
    """A prioritised sample.

    Attributes:
        indices: int32 ``[batch_size]``, the slots sampled; pass them back to
            :func:`update_priorities`.
        batch: the transition pytree, every leaf ``[batch_size, ...]``.
        weights: float32 ``[batch_size]`` importance-sampling weights in ``(0, 1]``.
    """

    indices: jax.Array
    batch: Transition
    weights: jax.Array


def prioritized_init(example_transition: Transition, capacity: int,
                     alpha: float | jax.typing.ArrayLike = 0.6) -> PrioritizedReplayState:
    """Allocates an empty prioritised buffer.

    Args:
        example_transition: ONE transition (no batch dimension); see :func:`init`.
        capacity: static number of slots (any positive int; the tree is padded to a power of two).
        alpha: prioritisation exponent, a Python float or traced scalar (so a sweep can ``vmap``
            ``prioritized_init`` over it). Schaul et al. use 0.6 (proportional variant).

    Returns:
        An empty :class:`PrioritizedReplayState`, ``max_priority = 1``.

    Raises:
        ValueError: bad ``capacity``.
    """
    replay = init(example_transition, capacity)
    num_leaves = 1 << (replay.capacity - 1).bit_length()
    return PrioritizedReplayState(
        replay=replay,
        sum_tree=jnp.zeros((2 * num_leaves,), jnp.float32),
        min_tree=jnp.full((2 * num_leaves,), jnp.inf, jnp.float32),
        max_priority=jnp.ones((), jnp.float32),
        alpha=jnp.asarray(alpha, jnp.float32),
        priorities=jnp.zeros((replay.capacity,), jnp.float32),
    )


def _powered(priorities: jax.Array, alpha: jax.Array) -> jax.Array:
    """``p ** alpha`` for ``p > 0`` and 0 for ``p = 0`` (where ``0 ** 0`` would give 1)."""
    return jnp.where(priorities > 0, jnp.where(priorities > 0, priorities, 1.0) ** alpha, 0.0)


def _set_leaves(sum_tree: jax.Array, min_tree: jax.Array, slots: jax.Array, values: jax.Array,
                keep: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Writes ``values`` at leaves ``slots`` where ``keep`` and recomputes their ancestors.

    ``slots`` must be in ``[0, num_leaves)`` (also where not kept) and distinct where kept, so the
    leaf write is deterministic. Ancestors are recomputed from their children, never patched with
    deltas; duplicates among them receive identical values. Recomputing the ancestors of a slot
    that was not written is a harmless no-op, which is why dropped entries need no special path.
    """
    num_leaves = sum_tree.shape[0] // 2
    depth = num_leaves.bit_length() - 1
    nodes = num_leaves + slots
    # Dropped writes go to an out-of-bounds position and mode="drop" discards them.
    write_at = jnp.where(keep, nodes, 2 * num_leaves)
    sum_tree = sum_tree.at[write_at].set(values, mode="drop")
    min_tree = min_tree.at[write_at].set(jnp.where(values > 0, values, jnp.inf), mode="drop")
    def level(_: int, carry: tuple[jax.Array, jax.Array, jax.Array]):
        nodes, sum_tree, min_tree = carry
        nodes = nodes // 2
        left, right = 2 * nodes, 2 * nodes + 1
        sum_tree = sum_tree.at[nodes].set(sum_tree[left] + sum_tree[right], mode="promise_in_bounds")
        min_tree = min_tree.at[nodes].set(jnp.minimum(min_tree[left], min_tree[right]),
                                          mode="promise_in_bounds")
        return nodes, sum_tree, min_tree

    # log2(num_leaves) levels, leaves' parents first. A fori_loop (not a Python loop) keeps the
    # program the same size for any capacity, so compile time does not grow with the tree depth.
    _, sum_tree, min_tree = jax.lax.fori_loop(0, depth, level, (nodes, sum_tree, min_tree))
    return sum_tree, min_tree


def prioritized_add(state: PrioritizedReplayState, batch: Transition,
                    mask: jax.typing.ArrayLike | None = None) -> PrioritizedReplayState:
    """Appends ``B`` transitions with priority ``max_priority`` (leaf ``max_priority ** alpha``).

    New transitions get the largest priority seen so far so that each is likely to be replayed at
    least once before its TD error is known (Schaul et al. 2016, Algorithm 1). In place under
    donation, like :func:`add`; the tree update costs ``O(B log capacity)``.

    Args:
        state: the buffer.
        batch: leaves ``[B, *row_shape]``, static ``1 <= B <= capacity`` (see :func:`add`).
        mask: optional bool ``[B]``; rows where it is False are written (the ring advances as for
            any row) with priority 0, so they are never sampled and do not enter the minimum
            priority that normalises the importance weights. For placeholder rows that a
            fixed-shape program must add but that hold no real transition.

    Returns:
        The new state. Overwritten slots lose their old priority.

    Raises:
        ValueError: as :func:`add`, or a ``mask`` that is not ``[B]``.
    """
    b = _batch_size_of(state.replay.data, batch, state.capacity)
    keep = jnp.ones((b,), bool) if mask is None else jnp.asarray(mask, bool)
    if keep.shape != (b,):
        raise ValueError(f"prioritized_add: mask must have shape ({b},) like the batch, got {keep.shape}")
    slots = _ring_slots(state.replay.cursor, b, state.capacity)
    raw = jnp.where(keep, state.max_priority, 0.0).astype(jnp.float32)
    sum_tree, min_tree = _set_leaves(state.sum_tree, state.min_tree, slots, _powered(raw, state.alpha),
                                     jnp.ones((b,), bool))
    priorities = state.priorities.at[slots].set(raw, unique_indices=True, mode="promise_in_bounds")
    return state.replace(replay=add(state.replay, batch), sum_tree=sum_tree, min_tree=min_tree,
                         priorities=priorities)


def _last_occurrence(indices: jax.Array) -> jax.Array:
    """bool ``[B]``: entry ``k`` is the last entry of ``indices`` with its value.

    ``O(B log B)`` via a stable sort: equal values keep their batch order, so the last of each run
    of equal sorted values is the latest write.
    """
    order = jnp.argsort(indices, stable=True)
    ordered = indices[order]
    last_in_run = jnp.concatenate([ordered[1:] != ordered[:-1], jnp.ones((1,), bool)])
    return jnp.zeros(indices.shape, bool).at[order].set(last_in_run, unique_indices=True)


def update_priorities(state: PrioritizedReplayState, indices: jax.typing.ArrayLike,
                      priorities: jax.typing.ArrayLike) -> PrioritizedReplayState:
    """Sets the priorities of sampled transitions, typically ``|TD error| + eps``.

    Duplicate indices in one call: **the last occurrence wins**, as if the updates were applied one
    by one in batch order (stratified sampling returns the same slot several times when its
    priority spans several segments). Indices outside the filled part ``[0, size)`` are ignored,
    so stale or padding indices cannot give priority to an empty slot. ``max_priority`` becomes
    ``max(max_priority, max of the priorities at valid indices)`` (duplicates included, again as if
    applied one by one).

    Cost ``O(B log B + B log capacity)``: a sort for the duplicate rule plus one gather/scatter per
    tree level; the tree is recomputed from children, so it does not drift (module docstring).

    Args:
        state: the buffer.
        indices: int ``[B]`` slots, e.g. :attr:`PrioritizedSample.indices`.
        priorities: float ``[B]``, finite and ``>= 0`` (raw, before ``** alpha``; the function
            raises them to ``state.alpha``). Add a small ``eps`` to ``|TD error|`` so that no
            transition becomes unsampleable; a priority of 0 makes its slot never sampled.

    Returns:
        The new state.
    """
    indices = jnp.asarray(indices, jnp.int32)
    priorities = jnp.asarray(priorities, jnp.float32)
    if indices.ndim != 1 or priorities.shape != indices.shape:
        raise ValueError(f"indices and priorities must both be [B]; got {indices.shape} and "
                         f"{priorities.shape}")
    valid = (indices >= 0) & (indices < state.size)
    keep = valid & _last_occurrence(indices)
    # Clipped slots keep the ancestor recomputation in bounds; dropped entries write nothing.
    slots = jnp.clip(indices, 0, state.num_leaves - 1)
    sum_tree, min_tree = _set_leaves(state.sum_tree, state.min_tree, slots,
                                     _powered(priorities, state.alpha), keep)
    raw = state.priorities.at[jnp.where(keep, slots, state.capacity)].set(priorities, mode="drop")
    # Over every valid entry, overwritten duplicates included, as a one-by-one application would.
    max_priority = jnp.maximum(state.max_priority, jnp.max(jnp.where(valid, priorities, 0.0)))
    return state.replace(sum_tree=sum_tree, min_tree=min_tree, max_priority=max_priority, priorities=raw)


def set_alpha(state: PrioritizedReplayState, alpha: jax.typing.ArrayLike) -> PrioritizedReplayState:
    """The buffer with prioritisation exponent ``alpha``: both trees rebuilt from the raw priorities.

    Every leaf becomes ``priority ** alpha`` (0 stays 0) and every internal node is recomputed from
    its children, bottom-up, so the result is bit-for-bit the tree that adding the same priorities
    under ``alpha`` would have built (the module docstring's drift-free property); setting the
    current ``alpha`` changes nothing. Costs ``O(capacity)``: meant for rare changes, such as a
    population-based-training step perturbing ``alpha``, not for every update.

    Args:
        state: the buffer.
        alpha: the new exponent, float or traced scalar.

    Returns:
        The new state (data, priorities and ``max_priority`` unchanged).
    """
    alpha = jnp.asarray(alpha, jnp.float32)
    num_leaves = state.num_leaves
    leaves = jnp.zeros((num_leaves,), jnp.float32).at[:state.capacity].set(_powered(state.priorities, alpha))
    sums, mins = [leaves], [jnp.where(leaves > 0, leaves, jnp.inf)]
    while sums[-1].shape[0] > 1:  # log2(num_leaves) static levels, leaves' parents first
        sums.append(sums[-1][0::2] + sums[-1][1::2])
        mins.append(jnp.minimum(mins[-1][0::2], mins[-1][1::2]))
    # Heap order: entry 0 unused (0 / +inf as in prioritized_init), then the root, ..., the leaves.
    sum_tree = jnp.concatenate([jnp.zeros((1,), jnp.float32), *reversed(sums)])
    min_tree = jnp.concatenate([jnp.full((1,), jnp.inf, jnp.float32), *reversed(mins)])
    return state.replace(sum_tree=sum_tree, min_tree=min_tree, alpha=alpha)


def _descend(sum_tree: jax.Array, targets: jax.Array) -> jax.Array:
    """Leaf index of each prefix-sum target in ``[0, total]``; vectorised over the targets.

    At each node go right iff the target is past the left sum **and** the right sum is positive.
    Invariant: the current node has a positive sum, hence so does the child taken. So the leaf
    reached has positive priority even when rounding puts a target at or beyond the node's sum.
    """
    num_leaves = sum_tree.shape[0] // 2
    depth = num_leaves.bit_length() - 1
    def level(_: int, carry: tuple[jax.Array, jax.Array]):
        nodes, targets = carry
        left = sum_tree[2 * nodes]
        right = sum_tree[2 * nodes + 1]
        go_right = (targets >= left) & (right > 0)
        return 2 * nodes + go_right.astype(jnp.int32), jnp.where(go_right, targets - left, targets)

    nodes, _ = jax.lax.fori_loop(0, depth, level, (jnp.ones(targets.shape, jnp.int32), targets))
    return nodes - num_leaves


def prioritized_sample(state: PrioritizedReplayState, key: jax.Array, batch_size: int,
                       beta: float | jax.typing.ArrayLike) -> PrioritizedSample:
    """Stratified proportional sampling with importance-sampling weights.

    Slot ``i`` is drawn with probability ``P(i) = p_i ** alpha / sum_k p_k ** alpha``: the total is
    split into ``batch_size`` equal segments and one uniform draw taken in each (so the expected
    count of slot ``i`` in a batch is ``batch_size * P(i)``, with less variance than i.i.d. draws).
    The weights are::

        w_i = (N * P(i)) ** -beta / max_j (N * P(j)) ** -beta
            = (p_i ** alpha / min_j p_j ** alpha) ** -beta

    with ``N = size`` and the max over every sampleable slot in the buffer (not only the batch), so
    weights are in ``(0, 1]`` and only ever scale updates down. ``N`` and the total cancel, which
    is why they are computed from the leaf and the min-tree root directly.

    Args:
        state: the buffer; must satisfy :func:`can_sample` (for an empty buffer the indices are 0
            and the weights 0).
        key: PRNG key.
        batch_size: static number of transitions.
        beta: importance-sampling exponent, float or traced scalar; the caller anneals it, e.g.
            with :func:`linear_schedule` from 0.4 to 1 (Schaul et al.).

    Returns:
        :class:`PrioritizedSample` ``(indices int32 [batch_size], batch, weights float32
        [batch_size])``. Indices always have positive priority, hence lie in ``[0, size)``.
    """
    num_leaves = state.num_leaves
    total = state.sum_tree[1]
    u = jax.random.uniform(key, (batch_size,), jnp.float32)
    targets = (jnp.arange(batch_size, dtype=jnp.float32) + u) * (total / batch_size)
    indices = _descend(state.sum_tree, targets)
    leaf = state.sum_tree[num_leaves + indices]
    beta = jnp.asarray(beta, jnp.float32)
    # leaf >= min_tree root > 0 for every sampled slot; the guard only matters for an empty buffer.
    weights = jnp.where(leaf > 0, (leaf / state.min_tree[1]) ** -beta, 0.0)
    return PrioritizedSample(indices, _gather(state.replay.data, indices),
                             weights.astype(jnp.float32))


def linear_schedule(start: float, end: float, steps: int) -> Callable[[jax.typing.ArrayLike],
                                                                      jax.Array]:
    """Linear annealing, e.g. of the importance-sampling exponent ``beta``.

    Args:
        start: value at ``t = 0``.
        end: value at ``t >= steps``.
        steps: positive number of steps of the ramp.

    Returns:
        ``schedule(t) -> float32 scalar``: ``start + clip(t / steps, 0, 1) * (end - start)``;
        ``t`` may be a traced step counter.
    """
    if steps <= 0:
        raise ValueError(f"steps must be positive, got {steps}")

    def schedule(t: jax.typing.ArrayLike) -> jax.Array:
        frac = jnp.clip(jnp.asarray(t, jnp.float32) / steps, 0.0, 1.0)
        return jnp.asarray(start, jnp.float32) + frac * (end - start)

    return schedule


# --------------------------------------------------------------------------------------------------
# Re-dealing buffers (elastic resume)
# --------------------------------------------------------------------------------------------------


def relayout(states: list[Any], count: int, capacity: int) -> list[Any]:
    """The transitions of ``states`` dealt into ``count`` buffers of ``capacity`` slots (host side).

    For a data-parallel run resumed on another number of devices: ``states`` are the per-device
    buffers (host values, :class:`ReplayState` or :class:`PrioritizedReplayState`), which filled in
    lockstep. Each buffer is read oldest first (from slot ``(cursor - size) % capacity``); the
    ``i``-th oldest transitions of all of them are put side by side (buffer order), and result ``j``
    gets every ``count``-th transition of that sequence starting at the ``j``-th, so each result is
    in time order. Every transition is kept, but the oldest ``total % count`` (each result holds as
    many); results fill from slot 0 (``cursor = size % capacity``). Prioritised buffers keep each
    transition's raw priority, the largest ``max_priority`` and the first buffer's ``alpha``, and
    their trees are rebuilt (:func:`set_alpha`).

    Raises:
        ValueError: the buffers differ in cursor or size (they did not fill in lockstep), or the
            transitions do not fit ``count`` buffers of ``capacity``.
    """
    prioritized = isinstance(states[0], PrioritizedReplayState)
    replays = [s.replay if prioritized else s for s in states]
    sizes = {int(np.asarray(r.size)) for r in replays}
    cursors = {int(np.asarray(r.cursor)) for r in replays}
    if len(sizes) > 1 or len(cursors) > 1:
        raise ValueError(f"cannot re-deal replay buffers that did not fill in lockstep: sizes {sorted(sizes)}, "
                         f"cursors {sorted(cursors)}")
    size, cursor, old_capacity = sizes.pop(), cursors.pop(), replays[0].capacity
    total = size * len(replays)
    per = total // count
    if per > capacity:
        raise ValueError(f"{total} transitions do not fit {count} buffers of {capacity} slots")
    oldest_first = (cursor - size + np.arange(size)) % old_capacity
    drop = total - per * count  # the oldest few, so every result holds as many
    source = np.tile(np.arange(len(replays)), size)[drop:]
    slot = np.repeat(oldest_first, len(replays))[drop:]

    def dealt(j: int, stacked: np.ndarray) -> np.ndarray:  # stacked: [buffers, old_capacity, ...]
        out = np.zeros((capacity, *stacked.shape[2:]), stacked.dtype)
        out[:per] = stacked[source[j::count], slot[j::count]]
        return out

    data = jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *[r.data for r in replays])
    priorities = np.stack([np.asarray(s.priorities) for s in states]) if prioritized else None
    index_dtype = np.asarray(replays[0].cursor).dtype
    results = []
    for j in range(count):
        replay = ReplayState(data=jax.tree.map(lambda x: dealt(j, x), data),
                             cursor=np.asarray(per % capacity, index_dtype), size=np.asarray(per, index_dtype),
                             capacity=capacity)
        if not prioritized:
            results.append(replay)
            continue
        num_leaves = 1 << (capacity - 1).bit_length()
        alpha = np.asarray(states[0].alpha, np.float32)
        state = PrioritizedReplayState(
            replay=replay, sum_tree=np.zeros((2 * num_leaves,), np.float32),
            min_tree=np.full((2 * num_leaves,), np.inf, np.float32),
            max_priority=np.max([np.asarray(s.max_priority) for s in states]).astype(np.float32), alpha=alpha,
            priorities=dealt(j, priorities))
        results.append(jax.device_get(set_alpha(state, alpha)))
    return results
