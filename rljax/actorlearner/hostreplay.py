"""Replay in host memory, for buffers larger than the accelerator's: n-step items kept in numpy, stacked
frames stored once.

The off-policy learner on host envs keeps its replay on the device by default (the skeleton's
buffer, :func:`rljax.agents.offpolicy.make_replay`). A million Atari items of ``[84, 84, 4]`` uint8
observations and their bootstrap observations are ~56 GB stored plainly; :class:`HostReplay` keeps
them in host RAM at about one 84x84 frame per item (~7 GB; each episode adds one frame, its final
observation's, and n-step items about ``n`` more where the stacks restart):

- **Frames stored once.** An observation of ``k`` frames stacked on its last axis (uint8, rank 3:
  EnvPool's Atari as rljax hands it on) is kept as ``k`` indices into a ring of frames. Within each
  env's stream of items (actor, env), an observation is matched against the previous item's
  observation shifted by one frame and against the bootstrap observation of the item ``n`` before it
  (n-step items: the observation at ``t + n`` is the start of item ``t + n``), and a bootstrap
  observation against the previous item's bootstrap observation shifted by one; what matches is shared,
  only new frames are written. Every match is checked by value, so the items read back are exactly
  the items added, whatever the envs do (resets, restarts, frames that do not shift); only the memory
  saved depends on it. Other observations (vectors, RGB images) are stored as they are.
- **Uniform sampling, the device's samples.** :func:`sample_indices` draws the indices exactly as the
  device replay does for the same key (``randint(key, (batch,), 0, size)`` per gradient step), so a run
  with host replay learns from the same items, in the same order, as one with device replay: the same
  bits. The learner gathers each update's batches on the host and hands them to the device at once
  (:func:`rljax.agents.offpolicy.presampled_replay`). A prioritised replay keeps its priorities on
  the device (:mod:`rljax.actorlearner.offpolicy`); this buffer holds its items and gathers the
  slots each gradient step draws there.
- **Frames that are still used are never overwritten**: the frame ring holds
  ``frames_per_item * capacity`` frames (plus room for every stream's first stacks); a write that
  would overwrite a frame a live item still reads is an error that says which ``frames_per_item``
  would do.

The buffer is a pytree of numpy arrays (:meth:`HostReplay.state` / :meth:`HostReplay.load`),
checkpointed with the run like the device replay; the per-stream matching caches are not (after a
resume the first items of each stream store their frames in full).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["HostReplay", "frame_stacked", "relaid_ring", "sample_indices"]


def frame_stacked(obs: np.ndarray) -> bool:
    """Whether one observation (no batch axis) is stored as frames: uint8, rank 3, at least 2 on its
    last axis (the stack)."""
    return obs.dtype == np.uint8 and obs.ndim == 3 and obs.shape[-1] >= 2


@functools.partial(jax.jit, static_argnums=(2, 3))
def _indices(key: jax.Array, size: jax.Array, gradient_steps: int, batch_size: int) -> jax.Array:
    keys = jax.vmap(lambda k: jax.random.split(k)[0])(jax.random.split(key, gradient_steps))
    return jax.vmap(lambda k: jax.random.randint(k, (batch_size,), 0, jnp.maximum(size, 1), jnp.int32))(keys)


def sample_indices(key: jax.Array, size: int, gradient_steps: int, batch_size: int) -> np.ndarray:
    """The slots ``[gradient_steps, batch_size]`` that the device replay samples for an update keyed
    ``key`` (:func:`rljax.agents.offpolicy.replay_learning`: step ``g`` samples with the first half of
    ``split(split(key, gradient_steps)[g])``, uniformly from ``[0, size)``)."""
    return np.asarray(_indices(key, np.int32(size), gradient_steps, batch_size))


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two C-contiguous uint8 arrays of one shape hold the same bytes (a memcmp of copies:
    ~2 us for an 84x84 stack, where ``np.array_equal`` takes ~4 and a memoryview comparison ~60)."""
    return a.tobytes() == b.tobytes()


@dataclasses.dataclass
class _Stream:
    """One env's recent observations and their frame serials (the matching cache)."""

    last_obs: tuple[np.ndarray, np.ndarray] | None = None
    last_next: tuple[np.ndarray, np.ndarray] | None = None
    nexts: collections.deque = dataclasses.field(default_factory=collections.deque)


class HostReplay:
    """A ring buffer of n-step items (:class:`rljax.agents.offpolicy.ReplayItem` fields) in host memory,
    sampled uniformly or at the slots a prioritised replay's device-side tree draws (see the module
    docstring).

    Args:
        example: one item's arrays (no batch axis): ``obs``, ``action``, ``reward``, ``discount``,
            ``next_obs``, ``valid``.
        capacity: items kept.
        n_step: the items' horizon (where a bootstrap observation comes back as an item's start).
        frames_per_item: observations that look like a stack (:func:`frame_stacked`) are stored as
            frames, in a ring of ``frames_per_item`` frames per item (about 1 when every observation
            shifts by one frame); 0 stores them as they are (uint8 channels that are not a stack, such
            as MinAtar's object maps). Frames that turn out not to be shared (over the first
            :attr:`CHECK_AFTER` items, more than ``frames_per_item + 1`` written an item) are an error
            that names ``frames_per_item = 0``, raised before the ring can fill.
    """

    CHECK_AFTER = 256
    """Items added before frame mode checks that the observations share frames."""

    def __init__(self, example: Any, capacity: int, n_step: int = 1, frames_per_item: float = 1.5):
        if not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity={capacity!r}: must be an integer >= 1")
        if not (frames_per_item == 0 or 1 <= frames_per_item < math.inf):
            raise ValueError(f"frames_per_item={frames_per_item}: must be 0 (store observations as they are) or a "
                             f"finite number >= 1")
        obs = np.asarray(example.obs)
        self.capacity, self.n_step, self.frames_per_item = capacity, n_step, frames_per_item
        self.frames = frame_stacked(obs) and frames_per_item > 0
        self.fields = {name: np.zeros((capacity, *np.shape(getattr(example, name))),
                                      np.asarray(getattr(example, name)).dtype)
                       for name in ("action", "reward", "discount", "valid")}
        if self.frames:
            self.k, self.frame_shape = obs.shape[-1], obs.shape[:-1]
            # Room for every stream's first stacks, and for the first items until they are seen to share
            # frames (up to 2k frames an item).
            self.num_frames = max(math.ceil(capacity * frames_per_item), 2 * self.k * self.CHECK_AFTER) + \
                64 * 2 * self.k
            self.store = np.zeros((self.num_frames, *self.frame_shape), np.uint8)
            self.fields.update(obs_frames=np.zeros((capacity, self.k), np.int64),
                               next_frames=np.zeros((capacity, self.k), np.int64),
                               oldest_frame=np.zeros((capacity,), np.int64))
        else:
            self.fields.update(obs=np.zeros((capacity, *obs.shape), obs.dtype),
                               next_obs=np.zeros((capacity, *obs.shape), obs.dtype))
        self.cursor = self.size = self.added = self.written = 0  # slot, filled, items and frames ever
        self._streams: dict[Any, _Stream] = {}
        self._live_min: collections.deque = collections.deque()  # (item number, oldest frame), increasing

    @property
    def nbytes(self) -> int:
        """Bytes of host memory the buffer holds."""
        return sum(a.nbytes for a in self.fields.values()) + (self.store.nbytes if self.frames else 0)

    @property
    def frames_per_added_item(self) -> float:
        """Frames written per item added so far (frame mode)."""
        return self.written / max(self.added, 1)

    def add(self, items: Any, num_envs: int, actor: int = 0) -> None:
        """Adds ``items`` (numpy-convertible, ``[T * num_envs]`` in time-major order, as an actor makes
        them) collected by ``actor``; env ``e``'s items are the stream ``(actor, e)``. A call refused
        part way (a full frame ring, frames that are not shared) keeps the items before the refused
        one, each whole, and the buffer stays one a checkpoint can save."""
        items = jax.tree.map(np.asarray, items)
        count = items.reward.shape[0]
        if not self.frames:
            slots = (self.cursor + np.arange(count)) % self.capacity
            for name in ("action", "reward", "discount", "valid", "obs", "next_obs"):
                self.fields[name][slots] = getattr(items, name)
            self.added += count
            self._advance(count)
            return
        checked = self.added >= self.CHECK_AFTER
        for i in range(count):  # an item whole, then the next: _add_frames changes nothing when it raises
            slot = self.cursor
            self._add_frames(slot, items.obs[i], items.next_obs[i], (actor, i % num_envs))
            for name in ("action", "reward", "discount", "valid"):
                self.fields[name][slot] = getattr(items, name)[i]
            self._advance(1)
            if not checked and self.added >= self.CHECK_AFTER:
                checked = True
                self._check_sharing()

    def _advance(self, count: int) -> None:
        self.cursor = int((self.cursor + count) % self.capacity)
        self.size = min(self.size + count, self.capacity)

    def _check_sharing(self) -> None:
        rate = self.written / self.added
        if rate > self.frames_per_item + 1:
            raise ValueError(f"these uint8 [H, W, {self.k}] observations do not share frames the way stacked frames "
                             f"do ({rate:.1f} frames written an item over the first {self.added} items, for a ring of "
                             f"{self.frames_per_item} an item): store them as they are with frames_per_item=0 "
                             f"(--frames-per-item 0)")

    def _add_frames(self, slot: int, obs: np.ndarray, next_obs: np.ndarray, stream_id: Any) -> None:
        stream = self._streams.setdefault(stream_id, _Stream())
        n = self.n_step
        # Frames first and contiguous ([k, H, W]): frames compare as bytes (strided, ~50x slower).
        obs, next_obs = (np.ascontiguousarray(np.moveaxis(x, -1, 0)) for x in (obs, next_obs))
        candidates = [stream.last_obs, stream.nexts[0] if len(stream.nexts) == n else None]
        obs_frames = self._match(obs, candidates)
        next_frames = self._match(next_obs, [stream.last_next, (obs, obs_frames)])
        stream.last_obs, stream.last_next = (obs, obs_frames), (next_obs, next_frames)
        stream.nexts.append((next_obs, next_frames))
        if len(stream.nexts) > n:
            stream.nexts.popleft()
        self.fields["obs_frames"][slot], self.fields["next_frames"][slot] = obs_frames, next_frames
        oldest = int(min(obs_frames.min(), next_frames.min()))
        self.fields["oldest_frame"][slot] = oldest
        self._push_live(self.added, oldest)
        self.added += 1
        while self._live_min[0][0] <= self.added - 1 - self.capacity:
            self._live_min.popleft()

    def _push_live(self, number: int, oldest: int) -> None:
        """Item ``number`` (reading frames from ``oldest`` on) enters the window minimum of the oldest
        frame any live item reads, kept over the items in insertion order."""
        while self._live_min and self._live_min[-1][1] >= oldest:
            self._live_min.pop()
        self._live_min.append((number, oldest))

    def _match(self, x: np.ndarray, candidates: list[tuple[np.ndarray, np.ndarray] | None]) -> np.ndarray:
        """The frame serials of ``x`` (``[k, H, W]``): a candidate ``(observation, serials)`` that equals
        it, else one that equals it shifted by one frame (one new frame written), else its frames, each
        frame that repeats the one before it written once."""
        candidates = [c for c in candidates if c is not None]
        for prev, serials in candidates:  # the same observation first: nothing to write
            if _same(prev, x):
                return serials
        for prev, serials in candidates:
            if _same(prev[1:], x[:-1]):
                return np.concatenate([serials[1:], self._write(x[-1:])])
        # A stack of its own; a frame repeated within it (a reset's stack of its first frame) once.
        repeats = [j for j in range(1, self.k) if _same(x[j], x[j - 1])]
        fresh = self._write(np.delete(x, repeats, axis=0))
        serials, i = np.empty(self.k, np.int64), -1
        for j in range(self.k):
            i += j not in repeats
            serials[j] = fresh[i]
        return serials

    def _write(self, frames: np.ndarray) -> np.ndarray:
        """Writes ``frames`` ``[m, *frame_shape]`` to the ring; returns their serials."""
        m = frames.shape[0]
        serials = self.written + np.arange(m)
        floor = self._live_min[0][1] if self._live_min else self.written
        if serials[-1] - self.num_frames >= floor:
            raise RuntimeError(f"the host replay's frame ring ({self.num_frames:,} frames, frames_per_item="
                               f"{self.frames_per_item}) would overwrite a frame that a live item still reads: "
                               f"the observations share fewer frames than that (frequent resets?); give "
                               f"frames_per_item={self.frames_per_item * 2:g} or more")
        first = self.written % self.num_frames
        if first + m <= self.num_frames:
            self.store[first:first + m] = frames
        else:
            self.store[serials % self.num_frames] = frames
        self.written += m
        return serials

    def gather(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        """The items at slots ``indices`` (any shape ``S``): each field ``[*S, ...]``, observations
        rebuilt from their frames."""
        out = {name: self.fields[name][indices] for name in ("action", "reward", "discount", "valid")}
        if not self.frames:
            out["obs"], out["next_obs"] = self.fields["obs"][indices], self.fields["next_obs"][indices]
            return out
        for name, field in (("obs", "obs_frames"), ("next_obs", "next_frames")):
            stacked = self.store[self.fields[field][indices] % self.num_frames]  # [*S, k, *frame_shape]
            out[name] = np.moveaxis(stacked, indices.ndim, -1)
        return out

    def state(self) -> dict[str, Any]:
        """The buffer as a pytree of numpy arrays (what a checkpoint saves)."""
        state = {"fields": dict(self.fields),
                 "counters": np.asarray([self.cursor, self.size, self.added, self.written], np.int64)}
        if self.frames:
            state["store"] = self.store
        return state

    def load(self, state: dict[str, Any]) -> HostReplay:
        """This buffer with ``state`` (of a buffer built alike) put back; the matching caches start empty."""
        self.fields = {name: np.asarray(value) for name, value in state["fields"].items()}
        if self.frames:
            self.store = np.asarray(state["store"])
        self.cursor, self.size, self.added, self.written = (int(x) for x in state["counters"])
        if self.frames:
            # Every live item's oldest frame, in insertion order, rebuilds the window minimum.
            self._live_min.clear()
            first = max(int(state["counters"][2]) - self.size, 0)
            for number in range(first, int(state["counters"][2])):
                self._push_live(number, int(self.fields["oldest_frame"][number % self.capacity]))
        self._streams.clear()
        return self


def relaid_ring(state: dict[str, Any], num_frames: int) -> np.ndarray:
    """The frame ring of a saved buffer ``state`` (:meth:`HostReplay.state`) laid out as a ring of
    ``num_frames`` frames (frame serial ``s`` at ``s % num_frames``): a resume with another
    ``frames_per_item`` continues the run's replay.

    Raises:
        ValueError: the live frames (from the oldest a live item reads to the newest written) fill
            ``num_frames``; the message names how many they are.
    """
    store, (_, size, _, written) = state["store"], (int(x) for x in state["counters"])
    # The live items fill slots 0..size-1 (the cursor wraps only once the buffer is full).
    floor = int(np.min(state["fields"]["oldest_frame"][:size])) if size else written
    if written - floor >= num_frames:  # and room for one more frame, or the first write fails
        raise ValueError(f"the replay's live items read {written - floor:,} frames, which a ring of "
                         f"{num_frames:,} frames cannot hold with room for new ones: give a larger frames_per_item")
    ring = np.zeros((num_frames, *store.shape[1:]), store.dtype)
    for first in range(floor, written, 1 << 16):  # in blocks: no copy of the whole ring on the way
        serials = np.arange(first, min(first + (1 << 16), written))
        ring[serials % num_frames] = store[serials % store.shape[0]]
    return ring
