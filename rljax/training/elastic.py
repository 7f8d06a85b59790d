"""Elastic resume: a data-parallel run saved on ``D`` devices continued on ``D'``.

A data-parallel train state has a leading ``[D]`` device axis on every leaf (none on one device):
each device holds a whole agent state for its ``num_envs / D`` envs, with the parameters, optimiser
state and normaliser statistics kept equal across devices by the update's collectives. The
checkpoint of such a run is re-dealt, on the host, into the state of ``D'`` devices with the same
global batch (``num_envs`` stays; every env keeps its state and episode):

* a leaf whose per-device shape does not depend on ``D`` (parameters, optimiser state, normaliser
  statistics, hyperparameters, counters) is the same on every saved device, and is copied to every
  new one; if the saved copies differ, the state cannot be re-dealt and :class:`ElasticResumeError`
  names the leaf;
* a leaf whose per-device shape scales with ``1 / D`` along one axis (env states, observations,
  episode statistics, per-env return accumulators, an n-step tail) is joined along that axis in
  device order (env ``i`` of the global batch) and split again over ``D'``;
* each device's RNG key is derived anew from ``(seed, chunk, global device index)``
  (:func:`device_key`): a device's stream is not divisible;
* replay buffers are re-dealt by :func:`rljax.core.buffers.relayout` (time order kept in each,
  priorities moving with their transitions).

A sweep's state is ``[P, ...]`` whatever the device count, so a sweep resumes on another device
count as it is (only the placement changes).

Guarantee: the same layout resumes bit for bit, as always. Another layout continues the same
training (the same global batch, parameters and env states, and the same env-step count) with other
random streams, so it is not bit-identical to an uninterrupted run; the change is recorded in
``manifest.json``'s ``resumes`` entry (``layout``).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from rljax.core import buffers
from rljax.store.checkpoint import LayoutError

__all__ = ["ElasticResumeError", "KEY_TAG", "device_key", "resplit"]

KEY_TAG = 0xE1A5
"""Folded into the seed's key before the chunk and device index (:func:`device_key`), so the new streams
differ from every stream the run's initialisation derived from the seed."""


class ElasticResumeError(LayoutError):
    """A saved train state cannot be re-dealt onto another number of devices; the message names the leaf."""


def device_key(seed: int, chunk: int, device: int, impl: Any = None) -> jax.Array:
    """The RNG key of global device ``device`` after an elastic resume at chunk ``chunk``:
    ``fold_in(fold_in(fold_in(key(seed), KEY_TAG), chunk), device)``."""
    key = jax.random.key(seed, impl=impl)
    return jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(key, KEY_TAG), chunk), device)


def _is_key(x: Any) -> bool:
    return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _is_buffer(x: Any) -> bool:
    return isinstance(x, (buffers.ReplayState, buffers.PrioritizedReplayState))


def _split_leaf(name: str, old: np.ndarray, new_shape: tuple[int, ...], d_old: int, d_new: int) -> np.ndarray:
    """``old`` (``[d_old, ...]``) as ``[d_new, *new_shape]``: copied, or joined and split along the one axis
    whose size scales with ``1 / D`` (module docstring)."""
    per_old = old.shape[1:]
    if per_old == new_shape:
        first = old[0]
        same = all(np.array_equal(first, other, equal_nan=np.issubdtype(old.dtype, np.inexact)) for other in old[1:])
        if not same:
            raise ElasticResumeError(
                f"cannot re-deal {name} over {d_new} devices: it has the same shape on {d_old} and {d_new} devices "
                f"{per_old} but differs between the saved devices, so it is neither shared nor split by env")
        return np.broadcast_to(first, (d_new, *new_shape)).copy()
    differ = [k for k, (a, b) in enumerate(zip(per_old, new_shape)) if a != b] if len(per_old) == len(new_shape) else []
    if len(differ) != 1 or per_old[differ[0]] * d_old != new_shape[differ[0]] * d_new:
        raise ElasticResumeError(
            f"cannot re-deal {name}: its per-device shape is {per_old} on {d_old} devices and {new_shape} on {d_new}; "
            f"a leaf must keep its shape or have one axis that is split over the devices")
    axis = differ[0] + 1
    joined = np.concatenate(list(old), axis=axis - 1)
    return np.stack(np.split(joined, d_new, axis=axis - 1))


def resplit(host_leaves: list[np.ndarray], template: Any, d_old: int, d_new: int, seed: int, chunk: int
            ) -> list[np.ndarray]:
    """The saved leaves of a ``d_old``-device state, re-dealt for ``d_new`` devices (module docstring).

    Args:
        host_leaves: the checkpoint's leaves in tree order (keys as raw key data), as saved on
            ``d_old`` devices.
        template: the train state on ``d_new`` devices (shapes, key kinds, buffers).
        seed: the run's seed; ``chunk``: the chunk the run continues from (:func:`device_key`).

    Returns:
        The leaves for ``template`` (keys as raw key data), in tree order.

    Raises:
        ElasticResumeError: a leaf cannot be re-dealt (named in the message), or the saved leaves do
            not belong to this state.
    """
    t_leaves, treedef = jax.tree.flatten(template)
    if len(t_leaves) != len(host_leaves):
        raise ElasticResumeError(f"the checkpoint has {len(host_leaves)} arrays, the train state {len(t_leaves)}")

    def per_device(x: Any, d: int) -> Any:
        return x if d > 1 else x[None]

    def new_per_device(t: Any) -> jax.ShapeDtypeStruct:
        shape = jax.eval_shape(jax.random.key_data, t).shape if _is_key(t) else tuple(np.shape(t))
        return jax.ShapeDtypeStruct(shape[1:] if d_new > 1 else shape, np.uint32 if _is_key(t) else t.dtype)

    old_tree = jax.tree.unflatten(treedef, [per_device(np.asarray(h), d_old) for h in host_leaves])
    new_tree = jax.tree.unflatten(treedef, [new_per_device(t) for t in t_leaves])
    keys = jax.tree.unflatten(treedef, [jax.random.key_impl(t) if _is_key(t) else None for t in t_leaves])

    def one(path: Any, old: Any, new: Any, impl: Any) -> Any:
        name = jax.tree_util.keystr(path) or "the state"
        if _is_buffer(old):
            return _relayout(name, old, new, d_old, d_new)
        if impl is not None and new.shape[:-1] == ():  # one key per device: a new stream each
            return np.stack([np.asarray(jax.random.key_data(device_key(seed, chunk, d, impl))) for d in range(d_new)])
        return _split_leaf(name, old, tuple(new.shape), d_old, d_new)

    out = jax.tree_util.tree_map_with_path(one, old_tree, new_tree, keys, is_leaf=_is_buffer)
    leaves = jax.tree.leaves(out)
    return [x if d_new > 1 else x[0] for x in leaves]


def _relayout(name: str, old: Any, new: Any, d_old: int, d_new: int) -> Any:
    """A ``[d_old]`` stack of per-device buffers as a ``[d_new]`` stack (:func:`rljax.core.buffers.relayout`)."""
    capacity = jax.tree.leaves(new.data if isinstance(new, buffers.ReplayState) else new.replay.data)[0].shape[0]
    devices = [jax.tree.map(lambda x, d=d: x[d], old) for d in range(d_old)]
    if isinstance(old, buffers.ReplayState):
        devices = [buffers.ReplayState(data=b.data, cursor=b.cursor, size=b.size,
                                       capacity=jax.tree.leaves(b.data)[0].shape[0]) for b in devices]
    else:
        devices = [b.replace(replay=buffers.ReplayState(data=b.replay.data, cursor=b.replay.cursor,
                                                        size=b.replay.size,
                                                        capacity=jax.tree.leaves(b.replay.data)[0].shape[0]))
                   for b in devices]
    try:
        dealt = buffers.relayout(devices, d_new, capacity)
    except ValueError as err:
        raise ElasticResumeError(f"cannot re-deal the replay buffer {name}: {err}") from err
    return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *dealt)
