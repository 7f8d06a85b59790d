"""What ``rljax serve`` computes: a policy's batched action as a compiled function of its params.

:func:`load_model` reads a run directory (the policy :func:`rljax.load` gives, its params an
*argument* of the compiled function, so a newer checkpoint swaps in without a recompile) or an export
directory (``policy.stablehlo``, checked against the sha256 its ``policy.json`` records; deterministic
actions only, nothing to reload). A batch of ``n`` rows is computed at the smallest bucket
``>= max(n, MIN_BUCKET)`` (powers of two up to ``max_batch``), padded with zeros, so a server compiles
a handful of programs, all before it listens.

Deterministic rows are ``policy.act(obs_batch)`` (the run's observation normaliser applied, Box actions
clipped), computed at :data:`MIN_BUCKET` rows or more: the same bits as ``rljax.load(RUN).act`` on a
batch of that many rows or more, whichever rows share the batch. XLA's CPU backend picks its matrix
kernel by size, and below about 64 rows a small network's continuous action can differ in its last
bit from the same row in a large batch (measured: 1 ulp on 64 % of rows of a 16-unit Pendulum policy
at 8 to 32 rows, none at 64 or more), so no batch is computed at fewer rows; a single observation
passed to ``policy.act`` is such a small batch. Sampled rows are computed one by one under ``vmap``:
row ``i`` of a request with seed ``s`` is ``policy.act(obs[i], key=jax.random.fold_in(jax.random.key(s),
i), deterministic=False)`` vmapped over a batch of :data:`MIN_BUCKET` rows or more and jitted.

A recurrent policy's state is an input and an output: ``state`` leaves ``[n, H]``, and ``reset [n]``
marks rows whose state is replaced by the initial one before acting (an episode starts there).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["MIN_BUCKET", "ServedModel", "buckets", "is_export_dir", "load_model"]

MIN_BUCKET = 64
"""The fewest rows a batch is computed at (padded with zeros): see the module docstring."""


def buckets(max_batch: int, min_rows: int = MIN_BUCKET) -> list[int]:
    """The batch sizes a server with ``max_batch`` computes at: powers of two from ``min_rows`` (default
    :data:`MIN_BUCKET`), and ``max_batch`` itself when it is larger and not one of them."""
    out, b = [], min_rows
    while b < max_batch:
        out.append(b)
        b *= 2
    return out + [max(max_batch, min_rows)]


def is_export_dir(path: str | pathlib.Path) -> bool:
    """Whether ``path`` holds an ``rljax export`` artefact (``policy.json`` and ``policy.stablehlo``)."""
    from rljax.policy.export import METADATA_FILE, STABLEHLO_FILE

    path = pathlib.Path(path)
    return (path / METADATA_FILE).is_file() and (path / STABLEHLO_FILE).is_file()


@dataclasses.dataclass
class ServedModel:
    """A policy as the server computes it.

    Attributes:
        inputs: ``[(name, shape, dtype)]`` per observation leaf (one row's shape).
        action: ``(shape, dtype)`` of one row's action.
        state: ``[(name, shape, dtype)]`` per recurrent state leaf (one row's; ``[]`` memoryless).
        params: the params served now (``()`` for an export).
        version: their version: the checkpoint's step.
        sampling: why sampled actions are not served (None: they are).
        info: what SPEC describes beside the above (spaces, algorithm, env, source).
        reload: ``reload(step) -> params`` of another checkpoint of the same run (None: an export).
        steps: ``steps() -> [step, ...]`` the run's checkpoints now (None: an export).
    """

    inputs: list[tuple[str, tuple[int, ...], Any]]
    action: tuple[tuple[int, ...], Any]
    state: list[tuple[str, tuple[int, ...], Any]]
    params: Any
    version: int
    sampling: str | None
    info: dict[str, Any]
    _deterministic: Callable
    _sampled: Callable | None
    reload: Callable[[int], Any] | None = None
    steps: Callable[[], list[int]] | None = None

    @property
    def recurrent(self) -> bool:
        return bool(self.state)

    def description(self, max_batch: int, version: int) -> dict[str, Any]:
        """What SPEC carries (:mod:`rljax.serve.protocol`)."""
        return {**self.info, "protocol": "rljax-policy", "version": int(version), "max_batch": int(max_batch),
                "inputs": [{"name": n, "shape": list(s), "dtype": np.dtype(d).name} for n, s, d in self.inputs],
                "action": {"shape": list(self.action[0]), "dtype": np.dtype(self.action[1]).name},
                "recurrent": self.recurrent, "memory": [n for n, _, _ in self.state],
                "sampling": self.sampling is None, **({"no_sampling": self.sampling} if self.sampling else {})}

    def initial_state(self, n: int) -> list[np.ndarray]:
        """A state of ``n`` rows at an episode's start (zeros)."""
        return [np.zeros((n, *s), d) for _, s, d in self.state]

    def compute(self, params: Any, obs: list[np.ndarray], state: list[np.ndarray], reset: np.ndarray,
                seeds: np.ndarray | None = None) -> tuple[np.ndarray, list[np.ndarray]]:
        """``(action [n, ...], next state leaves [n, H])`` of ``n`` rows (``seeds``: int32 ``[n]``, a sampled
        batch; row ``i`` of a request keyed with its position ``rows[i]``, given as ``seeds[:, 1]``)."""
        n = reset.shape[0]
        bucket = _bucket(n, self._bucket_sizes)
        pad = lambda x: x if bucket == n else np.concatenate(  # noqa: E731
            [x, np.zeros((bucket - n, *x.shape[1:]), x.dtype)])
        args = ([pad(x) for x in obs], [pad(x) for x in state], pad(reset))
        if seeds is None:
            action, new_state = self._deterministic(params, *args)
        else:
            action, new_state = self._sampled(params, *args, pad(seeds))
        return np.asarray(action)[:n], [np.asarray(x)[:n] for x in new_state]

    def warm(self, max_batch: int, min_rows: int = MIN_BUCKET) -> None:
        """Compiles every bucket's program (deterministic, and sampled where served) before serving
        (:func:`buckets`; ``min_rows`` below :data:`MIN_BUCKET` gives up the bit equality of the module
        docstring for less work on small batches)."""
        self._bucket_sizes = buckets(max_batch, min_rows)
        for b in self._bucket_sizes:
            obs = [np.zeros((b, *s), d) for _, s, d in self.inputs]
            reset = np.ones(b, bool)
            jax.block_until_ready(self._deterministic(self.params, obs, self.initial_state(b), reset))
            if self._sampled is not None and self.sampling is None:
                try:
                    jax.block_until_ready(self._sampled(self.params, obs, self.initial_state(b), reset,
                                                        np.zeros((b, 2), np.int32)))
                except Exception as err:  # noqa: BLE001 - a policy that cannot sample is served deterministic only
                    self.sampling = f"sampling raised {type(err).__name__}: {err}"

    _bucket_sizes: list[int] = dataclasses.field(default_factory=lambda: [MIN_BUCKET])


def _bucket(n: int, sizes: list[int]) -> int:
    for b in sizes:
        if b >= n:
            return b
    raise ValueError(f"a batch of {n} rows is over the largest bucket {sizes[-1]}")


def load_model(path: str | pathlib.Path, *, step: int | None = None, member: str | int | None = None) -> ServedModel:
    """The :class:`ServedModel` of a run directory (its newest checkpoint, or ``step``; ``member`` of a
    sweep) or of an export directory.

    Raises:
        FileNotFoundError: no such directory, or no checkpoint or artefact in it.
        ValueError: a step or member that does not exist, an export whose files do not match their
            recorded sha256, or a policy that cannot be served (naming why).
    """
    path = pathlib.Path(path)
    if is_export_dir(path):
        if step is not None or member is not None:
            raise ValueError(f"{path} is an export (one policy, one step): leave out --step/--member")
        return _export_model(path)
    return _run_model(path, step, member)


def _run_model(run_dir: pathlib.Path, step: int | None, member: str | int | None) -> ServedModel:
    import rljax
    from rljax.policy.export import observation_inputs, space_json, state_names
    from rljax.store.rundir import checkpoint_steps

    policy = rljax.load(run_dir, step, member=member)
    spec_leaves, treedef = jax.tree.flatten(policy.observation_spec)
    inputs = [(name, tuple(s.shape), np.dtype(s.dtype))
              for (name, _), s in zip(observation_inputs(policy), spec_leaves)]
    one = jax.eval_shape(lambda: policy.initial_state(1))
    state = [(name, tuple(x.shape[1:]), np.dtype(x.dtype))
             for name, x in zip(state_names(policy), jax.tree.leaves(one))]
    state_tree = jax.tree.structure(one)
    rows = jax.tree.map(lambda s: jnp.zeros((MIN_BUCKET, *s.shape), s.dtype), policy.observation_spec)
    template = jax.eval_shape(lambda: policy.apply_step(policy.params, rows, policy.initial_state(MIN_BUCKET)))
    action = (tuple(template[0].shape[1:]), np.dtype(template[0].dtype))

    def step_rows(params, obs, state, reset, key=None):
        tree = jax.tree.unflatten(treedef, obs)
        state = jax.tree.unflatten(state_tree, [jnp.where(reset.reshape(-1, *[1] * (x.ndim - 1)), 0, x) for x in state])
        act, new = policy.apply_step(params, tree, state, key, key is None)
        return act, jax.tree.leaves(new)

    def sampled(params, obs, state, reset, seeds):
        def row(o, s, r, seed):
            key = jax.random.fold_in(jax.random.key(seed[0]), seed[1])
            a, new = step_rows(params, [x[None] for x in o], [x[None] for x in s], r[None], key)
            return a[0], [x[0] for x in new]
        return jax.vmap(row)(obs, state, reset, seeds)

    info = {"algorithm": policy.algorithm, "env": str(policy.config.env), "source": "run", "path": str(run_dir),
            "member": policy.member, "observation_space": _space(space_json, policy.observation_space),
            "action_space": _space(space_json, policy.action_space)}
    structure = jax.tree.map(lambda x: (x.shape, x.dtype), policy.params)

    def reload(new_step: int) -> Any:
        new = rljax.load(run_dir, new_step, member=member)
        if jax.tree.map(lambda x: (x.shape, x.dtype), new.params) != structure:
            raise ValueError(f"checkpoint {new_step} in {run_dir} holds params of another shape than the served "
                             f"policy's: it was written by another config")
        return new.params

    return ServedModel(inputs, action, state, policy.params, int(policy.step), None, info, jax.jit(step_rows),
                       jax.jit(sampled), reload, lambda: checkpoint_steps(run_dir))


def _space(space_json: Callable, space: Any) -> Any:
    try:
        return space_json(space)
    except (TypeError, ValueError, AttributeError):  # a pytree observation (a dict of spaces): its leaves say it
        return None


def _export_model(out_dir: pathlib.Path) -> ServedModel:
    from rljax.policy.export import METADATA_FILE, STABLEHLO_FILE

    meta = json.loads((out_dir / METADATA_FILE).read_text())
    data = (out_dir / STABLEHLO_FILE).read_bytes()
    recorded = meta.get("files", {}).get(STABLEHLO_FILE, {}).get("sha256")
    if recorded != hashlib.sha256(data).hexdigest():
        raise ValueError(f"{out_dir / STABLEHLO_FILE} does not match the sha256 its {METADATA_FILE} records "
                         f"({recorded}): the artefact was changed or damaged; export it again")
    exported = jax.export.deserialize(bytearray(data))
    memory = (meta.get("memory") or {}).get("state") or []
    row = lambda x: (x["name"], tuple(int(d) for d in x["shape"][1:]), np.dtype(x["dtype"]))  # noqa: E731
    signature = meta["signature"]
    inputs = [row(x) for x in signature["inputs"] if x["name"] not in memory]
    state = [row(x) for x in signature["inputs"] if x["name"] in memory]
    action = row(signature["outputs"][0])[1:]

    def deterministic(params, obs, state, reset):
        state = [jnp.where(reset.reshape(-1, *[1] * (x.ndim - 1)), 0, x) for x in state]
        out = exported.call(*obs, *state)
        out = out if isinstance(out, (tuple, list)) else (out,)
        return out[0], list(out[1:])

    info = {"algorithm": meta.get("algorithm"), "env": meta.get("env"), "source": "export", "path": str(out_dir),
            "member": meta.get("member"), "observation_space": meta.get("observation_space"),
            "action_space": meta.get("action_space")}
    return ServedModel(inputs, action, state, (), int(meta.get("step") or 0),
                       "an export serves its deterministic policy only: serve the run directory to sample", info,
                       jax.jit(deterministic), None)
