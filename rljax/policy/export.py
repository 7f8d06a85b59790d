"""A trained policy as an artefact that needs neither rljax nor the training code (on the command
line: ``rljax export``, :mod:`rljax.cli.export`).

:func:`export` writes, into one directory:

* ``policy.stablehlo`` -- the deterministic policy ``obs [b, *obs_shape] -> action [b, *action_shape]``
  as serialized StableHLO (:mod:`jax.export`), the observation normaliser folded in, Box actions
  clipped to their bounds, the parameters embedded as constants, and a **symbolic** batch
  dimension ``b``: one artefact serves any batch size. Loading it needs only ``jax``.
* ``policy.onnx`` -- the same function as an ONNX model (converted by ``jax2onnx``, run with
  ``onnxruntime``), when those optional packages are installed (``pip install -e ".[export]"``).
* ``policy.json`` -- what the artefact is: spaces, input/output signatures, algorithm, env, env
  params, config hash, checkpoint step, run directory, versions, each file's sha256, and the
  largest action difference measured against :meth:`rljax.Policy.act` when it was written.

A policy trained with a search (AlphaZero, MuZero) also gets its networks as functions a search can call
(:func:`search_functions`), each serialized StableHLO with the batch dimension ``b``: AlphaZero's
``prediction.stablehlo`` ``(*obs) -> (logits [b, A], value [b])`` (the search steps the env's own
``step_env`` and calls it at every node); MuZero's ``representation.stablehlo`` ``(*obs) -> latent [b, L]``,
``prediction.stablehlo`` ``latent -> (logits, value)`` and ``dynamics.stablehlo`` ``(latent, action [b])
-> (latent, reward [b])``, values and rewards as numbers. ``policy.json``'s ``search`` says what each takes
and returns and the search's settings (simulations, discount, the completed-Q transform's values);
``docs/search.md`` runs ``mctx`` over them in plain JAX.

A recurrent policy's state is an explicit input and output of both formats: ``(obs, *state) ->
(action, *next_state)`` (a pytree observation's leaves in the place of ``obs``), the state as float32
``[b, memory_size]`` arrays (:func:`state_names`), described in ``policy.json``'s ``memory``.

Every artefact is checked before anything is written: run on :data:`CHECK_OBSERVATIONS` observations
drawn from the observation space (a recurrent one: :data:`CHECK_STEPS` steps of episodes in
:data:`CHECK_ENVS` envs, fed its own state), its actions must equal ``policy.act``'s exactly
(discrete) or within :data:`CONTINUOUS_TOLERANCE` (Box). The directory is written atomically (a temporary
sibling, then a rename): a failure never leaves half an artefact. ``docs/export.md`` shows how to
load each format.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import json
import logging
import os
import pathlib
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from rljax.env import is_discrete
from rljax.store.tracking import config_to_dict, package_version

__all__ = ["export", "sample_observations", "space_json", "check_out_dir", "state_names", "observation_inputs",
           "search_functions", "SearchFunction", "ExportError", "STABLEHLO_FILE", "ONNX_FILE", "METADATA_FILE",
           "PLATFORMS", "CHECK_OBSERVATIONS", "CHECK_STEPS", "CHECK_ENVS", "CONTINUOUS_TOLERANCE"]

STABLEHLO_FILE = "policy.stablehlo"
"""The serialized StableHLO module (bytes of ``jax.export.Exported.serialize()``)."""
ONNX_FILE = "policy.onnx"
"""The ONNX model (input ``obs``, output ``action``)."""
METADATA_FILE = "policy.json"
"""What the artefact is (see the module docstring and ``docs/export.md``)."""
PLATFORMS = ("cpu", "cuda")
"""Platforms the StableHLO module is lowered for; ``Exported.call`` picks the one it runs on."""
CHECK_OBSERVATIONS = 256
"""How many observations each artefact is checked on before it is written."""
CONTINUOUS_TOLERANCE = 1e-5
"""Largest absolute difference from ``policy.act`` a Box action may show (discrete: none)."""
FORMAT_VERSION = 1
"""Version of the layout of ``policy.json``; raised when a field changes meaning."""


class ExportError(RuntimeError):
    """An artefact could not be made, or did not reproduce the policy's actions."""


class SearchFunction(NamedTuple):
    """One network function of a search policy's export (:func:`search_functions`).

    Attributes:
        file: the artefact's file name (``prediction.stablehlo``, ...).
        fn: the function, of arrays with a leading batch dimension.
        inputs: ``(name, jax.ShapeDtypeStruct of one item)`` per input (the batch dimension left out).
        outputs: the names of its outputs, in order.
    """

    file: str
    fn: Any
    inputs: list[tuple[str, Any]]
    outputs: list[str]


# ----------------------------------------------------------------------------------------------
# Spaces and observations
# ----------------------------------------------------------------------------------------------


def space_json(space: Any) -> dict[str, Any]:
    """A space as JSON: ``{"kind": "discrete", "n", "shape", "dtype"}`` or ``{"kind": "box", "shape",
    "dtype", "low", "high"}`` (bounds as nested lists of the space's shape, infinities as ``"inf"``)."""
    shape = [int(d) for d in getattr(space, "shape", ())]
    dtype = np.dtype(getattr(space, "dtype", np.int32)).name
    if is_discrete(space):
        return {"kind": "discrete", "n": int(space.n), "shape": shape, "dtype": dtype}
    bounds = {k: _shortest(np.broadcast_to(np.asarray(getattr(space, k)), shape)) for k in ("low", "high")}
    return {"kind": "box", "shape": shape, "dtype": dtype, **bounds}


def sample_observations(space: Any, n: int, seed: int = 0) -> np.ndarray:
    """``n`` observations drawn from ``space`` with numpy: ``[n, *space.shape]`` of ``space.dtype``.

    Box dimensions with finite bounds are uniform between them; unbounded ones are standard normal
    times 3 (clipped to a one-sided bound); a discrete space is uniform over ``{0, ..., n - 1}``; a bool
    Box is True or False with probability 1/2 each.
    """
    rng = np.random.default_rng(seed)
    shape = tuple(int(d) for d in getattr(space, "shape", ()))
    dtype = np.dtype(getattr(space, "dtype", np.float32))
    if is_discrete(space):
        return rng.integers(0, int(space.n), size=(n, *shape)).astype(dtype)
    if dtype == np.bool_:  # (a legal-action mask: each entry True or False with probability 1/2)
        return rng.integers(0, 2, size=(n, *shape)).astype(np.bool_)
    low = np.broadcast_to(np.asarray(space.low, np.float64), shape)
    high = np.broadcast_to(np.asarray(space.high, np.float64), shape)
    finite = np.isfinite(low) & np.isfinite(high)
    uniform = rng.uniform(np.where(finite, low, 0.0), np.where(finite, high, 1.0), size=(n, *shape))
    normal = np.clip(3.0 * rng.standard_normal((n, *shape)), low, high)
    out = np.where(finite, uniform, normal)
    return (np.round(out) if np.issubdtype(dtype, np.integer) else out).astype(dtype)


# ----------------------------------------------------------------------------------------------
# The two formats
# ----------------------------------------------------------------------------------------------


def state_names(policy: Any) -> list[str]:
    """The artefact's names of a recurrent policy's state arrays, in the order of its inputs and
    outputs: ``["state_h"]`` for a GRU, ``["state_c", "state_h"]`` for an LSTM (flax's carry order);
    ``[]`` for a memoryless policy; a MAPPO policy whose centralised critic has a memory carries it too
    (``critic_state_h``: the exported policy computes the critic on zeros for the global state, so the
    values are unused but the state is the network's)."""
    import jax

    state = policy.initial_state(1)
    cell = getattr(policy.config, "memory", "none")
    one = {"gru": ["state_h"], "lstm": ["state_c", "state_h"]}.get(cell, [])
    n = len(jax.tree.leaves(state))
    if one and n == 2 * len(one):  # a centralised critic's memory beside the policy's (MAPPO): the pair
        return one + [f"critic_{name}" for name in one]
    return {0: [], 1: ["state_h"], 2: ["state_c", "state_h"]}.get(n) or [f"state_{i}" for i in range(n)]


def observation_inputs(policy: Any) -> list[tuple[str, Any]]:
    """The artefact's observation inputs: ``[("obs", spec)]`` for an observation that is one array; for a
    pytree observation (a dict with a legal-action mask, say) one input per leaf, in ``jax.tree.leaves``
    order, named ``obs_<key>`` (``obs_observation``, ``obs_legal_action_mask``). ``spec``: the leaf's
    ``jax.ShapeDtypeStruct`` in one observation."""
    import jax

    from rljax.core.networks import leaf_name

    spec = policy.observation_spec
    if isinstance(spec, jax.ShapeDtypeStruct):
        return [("obs", spec)]
    return [("obs_" + leaf_name(path), leaf) for path, leaf in jax.tree_util.tree_flatten_with_path(spec)[0]]


def _leaf_spaces(policy: Any) -> list[Any]:
    """The observation space of each :func:`observation_inputs` leaf (a dict space indexed by the leaf's
    keys; an unbounded float ``Box`` of the leaf's shape where the space does not say)."""
    import jax

    spec, space = policy.observation_spec, policy.observation_space
    if isinstance(spec, jax.ShapeDtypeStruct):
        return [space]
    from rljax.env import Box

    out = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(spec)[0]:
        sub = space
        try:
            for k in path:
                sub = sub[getattr(k, "key", getattr(k, "idx", k))]
        except (KeyError, IndexError, TypeError):
            sub = None
        if sub is None or tuple(getattr(sub, "shape", ())) != tuple(leaf.shape):
            sub = Box(-np.inf, np.inf, tuple(leaf.shape), np.dtype(leaf.dtype))
        out.append(sub)
    return out


def _policy_fn(policy: Any) -> Any:
    """The exported function: a batch of raw observations to deterministic actions; for a recurrent
    policy ``(obs, *state) -> (action, *next_state)``, the state as flat ``[b, H]`` arrays. A pytree
    observation comes as its leaves (:func:`observation_inputs`), put back together inside."""
    import jax

    if not policy.recurrent:
        if isinstance(policy.observation_spec, jax.ShapeDtypeStruct):
            return lambda obs: policy.act(obs, deterministic=True)
        treedef = jax.tree.structure(policy.observation_spec)
        return lambda *leaves: policy.act(jax.tree.unflatten(treedef, leaves), deterministic=True)

    treedef = jax.tree.structure(policy.initial_state(1))
    # A single-array observation is one leaf: its "tree" gives the array back unchanged.
    obs_tree, n_obs = jax.tree.structure(policy.observation_spec), len(observation_inputs(policy))

    def step(*inputs: Any) -> tuple[Any, ...]:
        obs = jax.tree.unflatten(obs_tree, inputs[:n_obs])
        action, state = policy.act(obs, jax.tree.unflatten(treedef, inputs[n_obs:]), deterministic=True)
        return (action, *jax.tree.leaves(state))
    return step


def _input_specs(policy: Any, batch: Any) -> list[Any]:
    """The ``jax.ShapeDtypeStruct`` of each input, the batch dimension ``batch`` (an int or a
    symbolic dimension shared by all)."""
    import jax

    obs = [jax.ShapeDtypeStruct((batch, *(int(d) for d in leaf.shape)), np.dtype(leaf.dtype))
           for _, leaf in observation_inputs(policy)]
    state = jax.tree.leaves(policy.initial_state(1))
    return [*obs, *(jax.ShapeDtypeStruct((batch, *x.shape[1:]), x.dtype) for x in state)]


def _stablehlo(policy: Any, platforms: Sequence[str]) -> Any:
    """``jax.export.Exported`` of the policy with a symbolic batch dimension ``b``."""
    import jax
    from jax import export as jax_export

    (b,) = jax_export.symbolic_shape("b")
    return jax_export.export(jax.jit(_policy_fn(policy)), platforms=tuple(platforms))(*_input_specs(policy, b))


def _onnx_available() -> str | None:
    """None when ``jax2onnx`` and ``onnxruntime`` import, else why not."""
    for name in ("jax2onnx", "onnxruntime"):
        try:
            __import__(name)
        except ImportError as err:
            return (f"{name} is not installed ({err}); pip install -e \".[export]\" in the rljax checkout (or "
                    f"pip install 'rljax-chunked[export]')")
    return None


@contextlib.contextmanager
def _converter_contained() -> Any:
    """Runs the block with jax2onnx's plugin-skip warnings silenced and puts back every
    ``jax.numpy`` attribute it changed: jax2onnx 0.17.1 logs a traceback for each optional plugin
    whose package is missing, and its cumsum plugin replaces ``jax.numpy.cumsum`` for good when a
    conversion first imports it."""
    import jax.numpy as jnp

    logger = logging.getLogger("jax2onnx.plugins.plugin_system")
    level, saved = logger.level, dict(vars(jnp))
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
        for name in [n for n in vars(jnp) if n not in saved]:
            delattr(jnp, name)
        for name, value in saved.items():
            if vars(jnp).get(name) is not value:
                setattr(jnp, name, value)


def _onnx(policy: Any) -> bytes:
    """The policy as a serialized ONNX model: input ``obs`` ``[B, *obs_shape]``, output ``action``
    (a recurrent policy: also the inputs :func:`state_names` and the outputs ``next_<name>``)."""
    import jax
    import jax2onnx

    inputs = observation_inputs(policy)
    names = state_names(policy)
    if len(inputs) == 1 and np.dtype(inputs[0][1].dtype) == np.float32 and not names:
        specs: list[Any] = [("B", *(int(d) for d in inputs[0][1].shape))]
    else:
        specs = _input_specs(policy, jax.export.symbolic_shape("B")[0])
    with _converter_contained():
        model = jax2onnx.to_onnx(_policy_fn(policy), specs, model_name="rljax_policy",
                                 input_names=[n for n, _ in inputs] + names,
                                 output_names=["action", *(f"next_{n}" for n in names)])
    return model.SerializeToString()


def _onnx_call(model: bytes, names: list[str], obs_names: Sequence[str] = ("obs",)) -> Any:
    """``call(*obs_leaves, *state) -> action`` or ``(action, *next_state)`` of an ONNX model in onnxruntime."""
    import onnxruntime

    session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])

    def call(*inputs: np.ndarray) -> Any:
        feeds = dict(zip([*obs_names, *names], inputs))
        out = session.run(["action", *(f"next_{n}" for n in names)], feeds)
        return out[0] if not names else tuple(out)
    return call


def _difference(name: str, got: Any, expected: np.ndarray, discrete: bool) -> float:
    """The largest absolute difference of ``got`` from ``expected``; raises :class:`ExportError`
    when the shapes or dtypes differ, a discrete action differs, or a Box action by more than
    :data:`CONTINUOUS_TOLERANCE`."""
    got = np.asarray(got)
    if got.shape != expected.shape or got.dtype != expected.dtype:
        raise ExportError(f"{name} returned {got.dtype}{list(got.shape)} for {expected.dtype}"
                          f"{list(expected.shape)} from policy.act")
    got64, expected64 = got.astype(np.float64), expected.astype(np.float64)
    gaps = np.where(np.isnan(got64) & np.isnan(expected64), 0.0, np.abs(got64 - expected64))
    diff = float(np.max(np.nan_to_num(gaps, nan=np.inf), initial=0.0))  # NaN where policy.act has none: unequal
    if diff > (0.0 if discrete else CONTINUOUS_TOLERANCE):
        raise ExportError(f"{name} differs from policy.act by up to {diff:.3g} on {len(expected)} observations "
                          f"(allowed: {0.0 if discrete else CONTINUOUS_TOLERANCE})")
    return diff


# ----------------------------------------------------------------------------------------------
# A search policy's networks
# ----------------------------------------------------------------------------------------------


def search_functions(policy: Any) -> list[SearchFunction]:
    """The network functions a search over ``policy``'s model calls, for a policy trained with
    AlphaZero or MuZero (``[]`` for any other). Observations come as their leaves
    (:func:`observation_inputs`); the parameters are closed over.

    * AlphaZero: ``prediction(*obs) -> (logits, value)``, the network's policy logits (illegal actions
      at the lowest float) and value at an observation.
    * MuZero: ``representation(*obs) -> latent``; ``prediction(latent) -> (logits, value)``;
      ``dynamics(latent, action) -> (latent, reward)``; values and rewards as numbers (a categorical
      output already read as ``h^-1(E[z])``).
    """
    import jax
    import jax.numpy as jnp

    from rljax.agents.alphazero import SearchConfig
    from rljax.agents.muzero import MuZeroConfig, MuZeroNetwork, muzero_network
    from rljax.agents.onpolicy import actor_critic_network

    config = policy.config
    if not isinstance(config, SearchConfig):
        return []
    obs_inputs = observation_inputs(policy)
    treedef = jax.tree.structure(policy.observation_spec)
    params = policy.params.params
    if not isinstance(config, MuZeroConfig):
        network = actor_critic_network(config, policy.env, policy.env_params, "AlphaZero")

        def prediction(*leaves: Any) -> tuple[Any, Any]:
            dist, value = network.apply(params, jax.tree.unflatten(treedef, leaves))
            return dist.logits, value
        return [SearchFunction("prediction.stablehlo", prediction, obs_inputs, ["logits", "value"])]

    net = muzero_network(config, policy.env, policy.env_params)
    apply = lambda method, *args: net.apply(params, *args, method=method)  # noqa: E731
    latent = jax.ShapeDtypeStruct((config.latent_size,), jnp.float32)

    def representation(*leaves: Any) -> Any:
        return apply(MuZeroNetwork.represent, jax.tree.unflatten(treedef, leaves))

    def prediction(latent: Any) -> tuple[Any, Any]:
        logits, value = apply(MuZeroNetwork.predict, latent)
        return logits, apply(MuZeroNetwork.scalar, value)

    def dynamics(latent: Any, action: Any) -> tuple[Any, Any]:
        latent, reward = apply(MuZeroNetwork.transition, latent, action)
        return latent, apply(MuZeroNetwork.scalar, reward)
    return [SearchFunction("representation.stablehlo", representation, obs_inputs, ["latent"]),
            SearchFunction("prediction.stablehlo", prediction, [("latent", latent)], ["logits", "value"]),
            SearchFunction("dynamics.stablehlo", dynamics,
                           [("latent", latent), ("action", jax.ShapeDtypeStruct((), jnp.int32))],
                           ["latent", "reward"])]


def _search_artefacts(policy: Any, platforms: Sequence[str]) -> tuple[dict[str, bytes], dict[str, Any] | None]:
    """The serialized :func:`search_functions` of ``policy`` and ``policy.json``'s ``search``, each
    function checked against itself run in-process on :data:`CHECK_OBSERVATIONS` observations (and,
    for MuZero's, their latent states and random actions): outputs within :data:`CONTINUOUS_TOLERANCE`."""
    import jax
    from jax import export as jax_export

    functions = search_functions(policy)
    if not functions:
        return {}, None
    from rljax.agents.muzero import MuZeroConfig
    from rljax.env import LEGAL_ACTION_MASK
    from rljax.policy.games import game_observation

    (b,) = jax_export.symbolic_shape("b")
    obs = [sample_observations(space, CHECK_OBSERVATIONS, seed=i) for i, space in enumerate(_leaf_spaces(policy))]
    rng = np.random.default_rng(0)
    files, described, latents = {}, {}, None
    for f in functions:
        specs = [jax.ShapeDtypeStruct((b, *spec.shape), spec.dtype) for _, spec in f.inputs]
        exported = jax_export.export(jax.jit(f.fn), platforms=tuple(platforms))(*specs)
        files[f.file] = exported.serialize()
        if f.inputs[0][0] != "latent":
            args = obs
        else:
            args = [latents]
            if len(f.inputs) == 2:  # the dynamics: random actions beside the latents
                args.append(rng.integers(0, policy.action_space.n, CHECK_OBSERVATIONS, dtype=np.int32))
        expected = [np.asarray(x) for x in jax.tree.leaves(jax.jit(f.fn)(*args))]
        got = jax.tree.leaves(jax_export.deserialize(files[f.file]).call(*args))
        diff = max(_difference(f"{f.file} ({name})", g, e, discrete=False)
                   for name, g, e in zip(f.outputs, got, expected))
        if f.outputs == ["latent"]:  # the representation's latents feed the prediction's and the dynamics' checks
            latents = expected[0]
        described[f.file] = {"inputs": [{"name": n, "shape": ["b", *map(int, spec.shape)],
                                         "dtype": np.dtype(spec.dtype).name} for n, spec in f.inputs],
                             "outputs": f.outputs, "max_abs_diff": diff}
    config = policy.config
    two_player = game_observation(policy.observation_spec)
    muzero = isinstance(config, MuZeroConfig)
    search = {
        "algorithm": policy.algorithm, "functions": described,
        "model": ("learned: representation at the root, then dynamics and prediction at every node" if muzero else
                  "the env's own step_env, with prediction at every node's observation"),
        "num_simulations": int(config.num_simulations),
        "max_num_considered_actions": int(config.max_num_considered_actions),
        "discount": float(config.gamma) * (-1.0 if muzero and two_player else 1.0),
        "turn_sign": ("-1 where the turn passes (rljax.env.turn_sign)" if two_player and not muzero else None),
        "qtransform": {"value_scale": float(config.value_scale), "maxvisit_init": float(config.maxvisit_init),
                       "epsilon": float(config.q_epsilon)},
        "root_mask": (LEGAL_ACTION_MASK if isinstance(policy.observation_spec, dict)
                      and LEGAL_ACTION_MASK in policy.observation_spec else None),
    }
    return files, search


# ----------------------------------------------------------------------------------------------
# Metadata
# ----------------------------------------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    """Env params as JSON: scalars as Python numbers, arrays of up to 64 elements as nested lists,
    larger ones as a ``"<array dtype[shape]>"`` note, dataclasses and namedtuples as objects."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return {k: _jsonable(v) for k, v in zip(value._fields, value)}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    try:
        array = np.asarray(value)
    except Exception:  # noqa: BLE001 - anything numpy cannot hold is described, not exported
        return repr(value)
    if array.dtype == object or array.size > 64:
        return f"<array {array.dtype}{list(array.shape)}>"
    return _shortest(array)


def _shortest(array: np.ndarray) -> Any:
    """``array.tolist()``, float32 values written as their shortest round-trip decimal (0.05, not
    0.05000000074505806), infinities and NaN as the strings ``"inf"``, ``"-inf"``, ``"nan"``."""
    if not np.issubdtype(array.dtype, np.floating):
        return array.tolist()

    def one(v: Any) -> float | str:
        if not np.isfinite(v):
            return "nan" if np.isnan(v) else ("inf" if v > 0 else "-inf")
        return float(str(array.dtype.type(v)))

    return np.vectorize(one, otypes=[object])(array).tolist()


def _signature(exported: Any, names: list[str], obs_names: Sequence[str] = ("obs",)) -> dict[str, Any]:
    def describe(name: str, aval: Any) -> dict[str, Any]:
        return {"name": name, "shape": [d if isinstance(d, int) else str(d) for d in aval.shape],
                "dtype": np.dtype(aval.dtype).name}

    return {"inputs": [describe(n, a) for n, a in zip([*obs_names, *names], exported.in_avals)],
            "outputs": [describe(n, a) for n, a in zip(["action", *(f"next_{n}" for n in names)], exported.out_avals)]}


def _memory_json(policy: Any, names: list[str]) -> dict[str, Any] | None:
    """``policy.json``'s ``memory``: what a recurrent policy's state is and how to carry it."""
    if not names:
        return None
    return {"cell": policy.config.memory, "size": int(policy.config.memory_size), "state": names,
            "initial": "zeros of each state input's shape, at every episode's start",
            "carry": "feed next_<name> back as <name> at the env's next step; set a row to zeros where that env "
                     "starts a new episode"}


def _file_entry(data: bytes, **extra: Any) -> dict[str, Any]:
    return {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data), **extra}


def _metadata(policy: Any, exported: Any, files: dict[str, bytes], checks: dict[str, Any],
              onnx_note: str | None) -> dict[str, Any]:
    """The contents of ``policy.json``."""
    import jax

    entries = {STABLEHLO_FILE: _file_entry(files[STABLEHLO_FILE], format="jax.export serialized StableHLO",
                                           platforms=list(exported.platforms),
                                           calling_convention_version=exported.calling_convention_version)}
    if ONNX_FILE in files:
        entries[ONNX_FILE] = _file_entry(files[ONNX_FILE], format="ONNX", converter=f"jax2onnx {package_version('jax2onnx')}",
                                         checked_with=f"onnxruntime {package_version('onnxruntime')}")
    names = state_names(policy)
    obs_names = [n for n, _ in observation_inputs(policy)]
    call = f"call({', '.join([*obs_names, *names])})"
    returns = "actions [batch, ...]" if not names else f"(actions [batch, ...], {', '.join(f'next_{n}' for n in names)})"
    return {
        "format": "rljax-policy", "format_version": FORMAT_VERSION,
        "how_to_load": (f"jax.export.deserialize(open('{STABLEHLO_FILE}', 'rb').read()).{call} with "
                        + ("obs [batch, *observation_space.shape] of observation_space.dtype" if obs_names == ["obs"]
                           else "each observation leaf [batch, *shape] as signature.inputs lists them")
                        + f" -> {returns}; see docs/export.md"),
        "algorithm": policy.algorithm, "env": getattr(policy.config, "env", None),
        "env_params": _jsonable(policy.env_params), "config_hash": policy.config_hash,
        "config": config_to_dict(policy.config), "step": int(policy.step),
        "run_dir": None if policy.run_dir is None else os.path.abspath(policy.run_dir), "member": policy.member,
        "deterministic": True,
        "observation_space": (space_json(policy.observation_space) if obs_names == ["obs"] else
                              {"kind": "leaves",
                               "leaves": {n: space_json(sp) for n, sp in zip(obs_names, _leaf_spaces(policy))}}),
        "action_space": space_json(policy.action_space),
        "signature": _signature(exported, names, obs_names),
        **({"memory": _memory_json(policy, names)} if names else {}),
        "files": entries,
        **({"onnx_skipped": onnx_note} if onnx_note else {}),
        "checks": checks,
        "versions": {"rljax": package_version("rljax"), "jax": jax.__version__, "jaxlib": package_version("jaxlib"),
                     "python": sys.version.split()[0]},
        "exported_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


# ----------------------------------------------------------------------------------------------
# Writing
# ----------------------------------------------------------------------------------------------


def check_out_dir(out_dir: str | os.PathLike, force: bool = False) -> None:
    """Refuses an ``out_dir`` that :func:`export` must not write: an existing non-directory, or a
    non-empty directory unless ``force``.

    Raises:
        FileExistsError: naming ``out_dir`` and what is in it (``--force`` replaces it).
        NotADirectoryError: ``out_dir`` is a file.
    """
    path = pathlib.Path(out_dir)
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(f"{path} exists and is not a directory; name a new or empty directory")
    if path.is_dir() and not force:
        entries = sorted(p.name for p in path.iterdir())
        if entries:
            raise FileExistsError(f"{path} is not empty ({', '.join(entries[:5])}"
                                  f"{', ...' if len(entries) > 5 else ''}); name a new or empty directory, "
                                  f"or pass --force (force=True) to replace it")


def _check_outside_run(out_dir: pathlib.Path, run_dir: str | None) -> None:
    """Refuses an ``out_dir`` that would replace the policy's run directory, a directory holding it,
    or an existing directory inside it (``--force`` replaces ``out_dir`` whole)."""
    if run_dir is None:
        return
    out, run = out_dir.resolve(), pathlib.Path(run_dir).resolve()
    if out == run or out in run.parents or (run in out.parents and out.exists()):
        what = ("the run directory" if out == run else "a directory holding the run directory" if out in run.parents
                else "an existing directory inside the run directory")
        raise ValueError(f"{out_dir} is {what} {run_dir}: exporting there would replace the run's files; name a "
                         f"directory outside it")


def _write_atomically(out_dir: pathlib.Path, files: dict[str, bytes], force: bool) -> None:
    """Writes ``files`` into a temporary sibling of ``out_dir``, then renames it into place (a
    replaced directory is moved aside first and removed last). Nothing is left behind on failure."""
    check_out_dir(out_dir, force)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    old = None
    try:
        for name, data in files.items():
            with open(tmp / name, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        os.chmod(tmp, 0o755)
        if out_dir.is_dir():
            old = pathlib.Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
            os.replace(out_dir, old)
        os.replace(tmp, out_dir)
    except BaseException:
        if old is not None and not out_dir.exists():
            os.replace(old, out_dir)
            old = None
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


# ----------------------------------------------------------------------------------------------
# Entry points
# ----------------------------------------------------------------------------------------------


CHECK_STEPS = 1000
"""How many env steps (over :data:`CHECK_ENVS` envs) a recurrent artefact is checked on."""
CHECK_ENVS = 8
"""How many envs those steps run in (episodes of each end and restart inside them)."""


class _Check:
    """What every artefact is checked against before anything is written.

    Memoryless: the actions ``policy.act`` gives :data:`CHECK_OBSERVATIONS` observations drawn from
    the observation space. Recurrent: :data:`CHECK_STEPS` steps of episodes in :data:`CHECK_ENVS`
    envs played by ``policy.act`` with its state; the artefact is fed the same observations and its
    own state (reset to zeros where an episode starts), and must give the same actions at every step.
    """

    def __init__(self, policy: Any):
        import jax

        self.policy, self.discrete, self.names = policy, policy.discrete, state_names(policy)
        if not policy.recurrent:
            self.obs = [sample_observations(space, CHECK_OBSERVATIONS, seed=i)
                        for i, space in enumerate(_leaf_spaces(policy))]
            self.expected = np.asarray(jax.jit(_policy_fn(policy))(*self.obs))
            self.info: dict[str, Any] = {"observations": CHECK_OBSERVATIONS}
            return
        obs, dones, actions = jax.device_get(_played_episodes(policy, CHECK_STEPS // CHECK_ENVS, CHECK_ENVS))
        # each observation leaf [S, N, ...] in the artefact's input order and dtypes
        self.obs = [np.asarray(leaf).astype(np.dtype(spec.dtype))
                    for leaf, (_, spec) in zip(jax.tree.leaves(obs), observation_inputs(policy))]
        self.dones, self.expected = np.asarray(dones), np.asarray(actions)
        self.info = {"steps": int(self.dones.size), "envs": int(self.dones.shape[1]),
                     "episodes_ended": int(self.dones.sum()), "state": self.names}

    def __call__(self, name: str, call: Any) -> float:
        """The largest action difference of ``call`` (the artefact: ``call(obs, *state)``) from
        ``policy.act``; raises :class:`ExportError` past the tolerance."""
        if not self.policy.recurrent:
            return _difference(name, call(*self.obs), self.expected, self.discrete)
        rows = self.dones.shape[1]  # CHECK_ENVS envs, or a multi-agent env's agent rows of that many games
        state = [np.zeros((rows, *x.shape[1:]), x.dtype) for x in _leaves(self.policy.initial_state(1))]
        worst = 0.0
        for t in range(len(self.dones)):
            action, *state = (np.asarray(x) for x in call(*(leaf[t] for leaf in self.obs), *state))
            try:
                worst = max(worst, _difference(name, action, self.expected[t], self.discrete))
            except ExportError as err:
                raise ExportError(f"{err} at step {t} of {len(self.dones)} steps of episodes in {CHECK_ENVS} envs "
                                  f"(the artefact fed its own state)") from None
            state = [np.where(self.dones[t].reshape((-1,) + (1,) * (x.ndim - 1)), 0, x).astype(x.dtype) for x in state]
        return worst


def _leaves(tree: Any) -> list[Any]:
    import jax

    return jax.tree.leaves(tree)


def _played_episodes(policy: Any, steps: int, envs: int) -> tuple[Any, Any, Any]:
    """``(obs [S, N, ...], done [S, N], action [S, N, ...])``: ``S`` steps of the deterministic
    recurrent ``policy`` in ``N`` auto-resetting envs (seed 0), its state reset where an episode ends.
    Halfway, every env starts a new episode (marked done), so a start from zeros is checked even in an
    env whose episodes outlast the steps. In a multi-agent env the ``N`` rows are the agents' of
    ``N / agents`` games (:class:`rljax.core.wrappers.AgentBatch`, without the global state: the
    policy's observation)."""
    import jax
    import jax.numpy as jnp

    from rljax.core.rollout import reset_memory
    from rljax.env import num_agents

    env, params = policy.env, policy.env_params
    if num_agents(env):  # the games' agent rows: as many rows as a single-agent check has envs
        from rljax.agents.base import agent_rows
        from rljax.core.wrappers import AgentBatch, VecEnv

        stack = AgentBatch(VecEnv(env, max(1, envs // num_agents(env))),
                           **{**agent_rows(policy.config), "global_state": False})
        envs = stack.batch_shape[0]
        reset = lambda keys, p: stack.reset(keys[0], p)  # noqa: E731 - one key: VecEnv splits it per game
        step_all = lambda keys, s, a, p: stack.step(keys[0], s, a, p)  # noqa: E731
    else:
        reset = jax.vmap(env.reset, in_axes=(0, None))
        step_all = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def play(key: Any) -> tuple[Any, Any, Any]:
        k_reset, key = jax.random.split(key)
        obs, env_state = reset(jax.random.split(k_reset, envs), params)

        def step(carry: Any, inputs: Any) -> tuple[Any, Any]:
            (obs, env_state, state), (t, k) = carry, inputs
            k_step, k_new = jax.random.split(k)
            action, state = policy.act(obs, state, deterministic=True)
            next_obs, env_state, _, term, trunc, _ = step_all(jax.random.split(k_step, envs), env_state, action,
                                                              params)
            restart = t == steps // 2
            new_obs, new_state = reset(jax.random.split(k_new, envs), params)
            next_obs, env_state = jax.tree.map(lambda a, b: jnp.where(restart, a, b), (new_obs, new_state),
                                               (next_obs, env_state))
            done = term | trunc | restart
            return (next_obs, env_state, reset_memory(state, done)), (obs, done, action)

        init = (obs, env_state, policy.initial_state(envs))
        return jax.lax.scan(step, init, (jnp.arange(steps), jax.random.split(key, steps)))[1]

    return jax.jit(play)(jax.random.key(0))


def _with_onnx(policy: Any, onnx: Any, check: _Check) -> tuple[bytes | None, Any, str | None]:
    """``(model, max_abs_diff, why_skipped)``: the checked ONNX model, or None and the reason when
    ``onnx`` is ``"auto"`` and it could not be made; with ``onnx=True`` any failure raises."""
    if onnx is False:
        return None, None, "not requested (onnx=False)"
    missing = _onnx_available()
    try:
        if missing:
            raise ExportError(missing)
        model = _onnx(policy)
        return model, check(ONNX_FILE, _onnx_call(model, check.names, [n for n, _ in observation_inputs(policy)])), None
    except Exception as err:  # noqa: BLE001 - "auto" reports any converter failure and ships StableHLO alone
        if onnx is True:
            raise ExportError(f"ONNX export failed: {type(err).__name__}: "
                              f"{(str(err).strip().splitlines() or [''])[0]}") from err
        return None, None, f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0]}"


def export(policy: Any, out_dir: str | os.PathLike, *, onnx: bool | str = "auto", force: bool = False,
           platforms: Sequence[str] = PLATFORMS) -> dict[str, Any]:
    """Writes ``policy``'s deterministic ``obs -> action`` function as a deployable artefact.

    Args:
        policy: a :class:`rljax.Policy` (from :func:`rljax.load`).
        out_dir: the directory to create (a new or empty one; see ``force``).
        onnx: True: also write ``policy.onnx`` or fail; False: StableHLO only; ``"auto"``: write
            ONNX when ``jax2onnx`` and ``onnxruntime`` are installed and the conversion reproduces
            the policy, else skip it (``policy.json``'s ``onnx_skipped`` says why).
        force: replace a non-empty ``out_dir``.
        platforms: what the StableHLO module is lowered for (default :data:`PLATFORMS`).

    Returns:
        The contents of ``policy.json`` (plus ``"export_seconds"``, the wall time of the export).

    Raises:
        ValueError: ``onnx`` is not True, False or ``"auto"``, or ``out_dir`` is the policy's run
            directory, holds it, or is an existing directory inside it.
        FileExistsError, NotADirectoryError: ``out_dir`` is non-empty (without ``force``) or a file.
        ExportError: an artefact does not reproduce ``policy.act`` (or ONNX failed with ``onnx=True``).
    """
    if not (onnx is True or onnx is False or onnx == "auto"):
        raise ValueError(f"onnx must be one of True, False, 'auto'; got {onnx!r}")
    import jax

    out = pathlib.Path(out_dir)
    check_out_dir(out, force)
    _check_outside_run(out, policy.run_dir)
    start = time.perf_counter()
    exported = _stablehlo(policy, platforms)
    files = {STABLEHLO_FILE: exported.serialize()}
    check = _Check(policy)
    reloaded = jax.export.deserialize(files[STABLEHLO_FILE])
    checks: dict[str, Any] = {**check.info, "max_abs_diff": {STABLEHLO_FILE: check(STABLEHLO_FILE, reloaded.call)}}
    model, diff, onnx_note = _with_onnx(policy, onnx, check)
    if model is not None:
        files[ONNX_FILE] = model
        checks["max_abs_diff"][ONNX_FILE] = diff
    search_files, search = _search_artefacts(policy, platforms)
    files.update(search_files)
    meta = _metadata(policy, exported, files, checks, onnx_note)
    if search is not None:
        meta["search"] = search
        meta["files"].update({name: _file_entry(data, format="jax.export serialized StableHLO")
                              for name, data in search_files.items()})
    files[METADATA_FILE] = (json.dumps(meta, indent=2) + "\n").encode()
    _write_atomically(out, files, force)
    return {**meta, "export_seconds": time.perf_counter() - start}
