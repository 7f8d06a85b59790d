"""Data parallelism: one per-device program, mapped over devices by ``shard_map`` or ``pmap``.

Agents are written once, pmap style: a function of one device's state that reduces across devices
with collectives over the axis named :data:`AXIS`. :class:`DataParallel` maps such a function:

* one device: plain ``jit``, and the axis name is ``None`` (collectives are the identity);
* ``backend="shard_map"`` (default): ``jit`` of ``jax.shard_map`` over a 1-D mesh;
* ``backend="pmap"``: ``jax.pmap``.

Multi-device train states carry a leading ``[num_devices]`` axis on every leaf (params replicated,
env batch and keys split); both backends use this layout, so they are interchangeable and give the
same numbers.

Several processes (:mod:`rljax.runtime.distributed`): the mesh spans every process's devices in
``jax.devices()`` order (process by process), so device ``i`` of the mesh is the same device, with
the same RNG stream, whether its process is one of one or one of several; each process holds the
shards of its own devices. Only ``shard_map`` spans processes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from rljax.core.config import BACKENDS
from rljax.core.prng import rolled_threefry
from rljax.runtime.distributed import put

__all__ = ["AXIS", "DataParallel", "first_device", "run_once", "serial_map"]

AXIS = "devices"


# Programs that run once (building the initial state) are compiled without XLA's backend
# optimisations: their run time is negligible, and on a CPU this cuts their compile time markedly
# (network initialisers compile one threefry kernel per weight matrix; figures: benchmarks/results.md).
RUN_ONCE_OPTIONS = {"xla_backend_optimization_level": 0}


def run_once(fn: Any, *args: Any) -> Any:
    """Compiles ``fn`` (a jitted function) for ``args`` with :data:`RUN_ONCE_OPTIONS`, its random
    numbers' hash as a loop (:func:`rljax.core.prng.rolled_threefry`: the same bits, less to
    compile), and calls it."""
    with rolled_threefry():
        lowered = fn.lower(*args)
    return lowered.compile(compiler_options=RUN_ONCE_OPTIONS)(*args)


def serial_map(fn: Callable[..., Any], *xs: Any) -> Any:
    """``jax.vmap(fn)(*xs)``'s result, computed one slice at a time with ``lax.map``.

    Use it, not ``vmap``, for anything that initialises networks. A vmapped orthogonal initialiser
    becomes a *batched* LAPACK QR, and jaxlib's CPU kernel for batched LAPACK calls
    (``ParallelBatchMap``) blocks an XLA intra-op thread while it waits for work it queued on that
    same pool. Two such kernels running at once (two layers) then deadlock a pool with two
    threads: a vmapped multi-layer orthogonal init hangs sooner or later, forever, with an idle
    CPU. Unbatched QRs run inline and cannot hang.

    Args:
        fn: a function of one slice of each of ``xs``.
        *xs: pytrees with a shared leading axis ``[N, ...]``.

    Returns:
        ``fn``'s outputs stacked along a new leading axis ``[N, ...]``.
    """
    return jax.lax.map(lambda args: fn(*args), xs)


def first_device(tree: Any, num_devices: int) -> Any:
    """The device-0 slice of a state or output (the identity on one device).

    For arrays spanning several processes, this process's first device's slice (a data-parallel
    output is the same on every device).
    """
    if num_devices == 1:
        return tree
    return jax.tree.map(lambda x: x.addressable_shards[0].data[0] if not getattr(x, "is_fully_addressable", True)
                        else x[0], tree)


def _check_multiprocess(num_devices: Any, backend: str) -> None:
    """A run of several processes uses every device of every process, through ``shard_map``."""
    total, local, procs = jax.device_count(), jax.local_device_count(), jax.process_count()
    if num_devices != total:
        raise ValueError(
            f"num_devices={num_devices!r}, but this job has {procs} processes x {local} devices = {total} devices; a "
            f"multi-process run uses all of them: pass --num-devices {total} (sweeps: the population is split over "
            f"{total} devices)")
    if backend != "shard_map":
        raise ValueError(f"backend={backend!r} cannot span {procs} processes; use backend='shard_map' (the default)")


class DataParallel:
    """Maps a per-device function over ``num_devices`` local devices.

    Args:
        num_devices: devices to use (the first ``num_devices`` of ``jax.local_devices()``).
        backend: ``"shard_map"`` or ``"pmap"``; ignored on one device.

    Raises:
        ValueError: more devices requested than exist (the message says how to get fake CPU
            devices), or an unknown backend.
    """

    def __init__(self, num_devices: int = 1, backend: str = "shard_map"):
        if backend not in BACKENDS:
            raise ValueError(f"backend={backend!r} is not one of {BACKENDS}")
        self.process_count = jax.process_count()
        if self.process_count > 1:
            _check_multiprocess(num_devices, backend)
        available = jax.local_devices() if self.process_count == 1 else jax.devices()
        if not isinstance(num_devices, int) or num_devices < 1 or num_devices > len(available):
            raise ValueError(
                f"num_devices={num_devices!r} but this process has {len(available)} "
                f"{jax.default_backend()} device(s): {available}. On a CPU, start the process with "
                f"XLA_FLAGS=--xla_force_host_platform_device_count=N, or call "
                f"jax.config.update('jax_num_cpu_devices', N) before first using JAX (the experiment "
                f"modules do this for --num-devices).")
        self.num_devices = num_devices
        self.backend = backend
        self.devices = available[:num_devices]
        self.axis_name: str | None = AXIS if num_devices > 1 else None
        self.mesh = Mesh(np.array(self.devices), (AXIS,)) if num_devices > 1 else None

    @property
    def can_launch_ahead(self) -> bool:
        """Whether a program may be launched before the previous one has finished.

        False for programs spanning several CPU devices: XLA's CPU collective rendezvous can
        deadlock when a program with collectives starts before the previous one has finished.
        Also False for several processes: every process must launch the same programs and
        collectives in the same order, so each waits for the boundary's agreement first.
        """
        return self.process_count == 1 and (self.num_devices == 1 or self.devices[0].platform != "cpu")

    def map(self, fn: Callable[..., Any], donate: bool = False) -> Callable[..., Any]:
        """Maps ``fn(state, *rest) -> out`` over devices (``rest`` is replicated).

        On several devices every leaf of ``state`` and of the output has a leading
        ``[num_devices]`` axis. Returns a jitted (or pmapped) function; with ``donate`` the state's
        buffers are reused for the output.
        """
        donate_argnums = (0,) if donate else ()
        if self.num_devices == 1:
            return jax.jit(fn, donate_argnums=donate_argnums)
        if self.backend == "pmap":
            return jax.pmap(fn, axis_name=AXIS, donate_argnums=donate_argnums, devices=self.devices)

        def local(state: Any, *rest: Any) -> Any:
            # shard_map hands each device a [1, ...] block of the [D, ...] array.
            out = fn(jax.tree.map(lambda x: x[0], state), *rest)
            # jnp.asarray: Python-scalar leaves (e.g. int env params in the state) have no [None].
            return jax.tree.map(lambda x: jnp.asarray(x)[None], out)

        # check_vma=False: per-device programs are written pmap style (carries start replicated and
        # become device-varying inside scans), which the varying-axes type check would reject.
        mapped = jax.shard_map(local, mesh=self.mesh, in_specs=P(AXIS), out_specs=P(AXIS),
                               check_vma=False)
        return jax.jit(mapped, donate_argnums=donate_argnums)

    def map_population(self, fn: Callable[[Any], Any], donate: bool = False) -> Callable[[Any], Any]:
        """Maps ``fn`` (already vmapped over a population axis) with that axis split over devices.

        Every leaf of the input and output has a leading ``[P]`` population axis; each device runs
        ``fn`` on its ``P / num_devices`` members. Members never communicate, so there are no
        collectives (and no rendezvous) between devices.
        """
        donate_argnums = (0,) if donate else ()
        if self.num_devices == 1:
            return jax.jit(fn, donate_argnums=donate_argnums)
        mapped = jax.shard_map(fn, mesh=self.mesh, in_specs=P(AXIS), out_specs=P(AXIS), check_vma=False)
        # out_shardings: without it an empty leaf (e.g. a 1-step collector's [P, 0, ...] tail) comes out
        # replicated, and the next call of a program compiled for the split state refuses it.
        return jax.jit(mapped, donate_argnums=donate_argnums, out_shardings=NamedSharding(self.mesh, P(AXIS)))

    def place_population(self, tree: Any) -> Any:
        """Puts a ``[P, ...]`` pytree on the devices, split along the population axis."""
        if self.num_devices == 1:
            return tree
        sharding = NamedSharding(self.mesh, P(AXIS))
        if self.process_count > 1 and all(getattr(x, "is_fully_addressable", True) for x in jax.tree.leaves(tree)):
            # Every process holds the same whole tree: each places its own shards.
            return jax.tree.map(lambda x: put(x, sharding), tree)
        return jax.device_put(tree, sharding)

    def init(self, init_fn: Callable[[jax.Array, Any], Any], key: jax.Array) -> Any:
        """Builds the state on every device: ``init_fn(key, device_index)`` per device.

        ``key`` is shared; the function must fold ``device_index`` into the keys that should
        differ (env resets) and keep the ones that must agree (params).
        """
        if self.num_devices == 1:
            return run_once(jax.jit(init_fn), key, jnp.int32(0))
        indices = jnp.arange(self.num_devices, dtype=jnp.int32)
        if self.backend == "pmap":
            return jax.pmap(lambda i: init_fn(key, i), axis_name=AXIS, devices=self.devices)(indices)
        # From host memory: with several processes each places the shards of its own devices.
        indices = put(np.arange(self.num_devices, dtype=np.int32), NamedSharding(self.mesh, P(AXIS)))
        return run_once(self.map(lambda i: init_fn(key, i)), indices)
