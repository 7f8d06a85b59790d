"""Flax (``flax.linen``) networks for the built-in agents.

* :class:`ObsEncoder` -- observations of any shape and pytree structure -> one feature vector:
  vectors as they are, scalars and 2-D grids flattened, images ``[H, W, C]`` through a CNN torso,
  dicts/tuples one encoder per leaf with the features concatenated (:func:`encoder_layout` decides).
* :class:`MLP` -- the shared torso: ``Dense -> activation`` per hidden layer, orthogonal init.
* :class:`ActorCritic` -- PPO's policy and value function, ``obs -> (distribution, value)``; each
  side may see its own keys of a dict observation (a centralised critic on the global state).
* :class:`PerAgent` -- one copy of a network per agent, each with its own parameters, each row of a
  multi-agent batch answered by its agent's copy.
* :class:`QNetwork` -- DQN's action values, ``obs -> Q[..., num_actions]``, optionally dueling,
  noisy (:class:`NoisyDense`) or distributional (``num_atoms`` outputs per action).
* :class:`RecurrentActorCritic`, :class:`RecurrentQNetwork` -- the same with a GRU or LSTM
  :class:`MemoryCore` between the torso and the heads, ``(memory, obs [T, B], reset [T, B]) ->
  (memories, ...)``.
* :class:`BoxCritic` -- one action-value critic for Box actions, ``(obs, a_norm) -> Q``; SAC and
  TD3 use a twin pair (:func:`init_actor_and_twin_critics`, :func:`twin_critic_apply`).

Initialisation follows the "implementation details" of PPO that matter in practice (Engstrom et al.
2020, "Implementation Matters in Deep Policy Gradients"; Andrychowicz et al. 2021, "What Matters in
On-Policy RL"; Huang et al. 2022, "The 37 Implementation Details of PPO"): orthogonal weights
(Saxe et al. 2014) with gain ``sqrt(2)`` in the hidden layers, zero biases, a policy head with gain
``0.01`` so the initial policy is close to uniform / zero-mean, a value head with gain ``1``, and a
state-independent ``log_std`` starting at 0 (``std = 1``).

Observations. The networks are told the shape of ONE observation (per leaf of its pytree) by an
``obs_layout`` (:func:`encoder_layout` of the env's :func:`rljax.env.observation_spec`) and treat
every axis before it as batch: a leaf of shape ``[*batch, *leaf_shape]`` for any ``batch``. Without
a layout (``obs_layout=()``) the observation is a flat vector ``[..., obs_dim]``. Integer and bool
observations are cast to float32. For a flat-vector observation the encoder is the identity and has
no parameters, so the network is exactly an MLP on the vector.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from rljax.core.distributions import Categorical, DiagGaussian
from rljax.core.rollout import reset_memory
from rljax.env import legal_action_mask, masked_actions
from rljax.core.wrappers import AGENT_ID

__all__ = ["ACTIVATIONS", "ENCODERS", "NATURE_CNN", "get_activation", "LeafEncoding", "leaf_name", "encoder_layout",
           "Conv3x3", "PatchConv", "ObsEncoder", "NOISE", "NoisyDense",
           "observation_view", "MLP", "ActorCritic", "PerAgent",
           "QNetwork", "BoxCritic", "init_actor_and_twin_critics", "twin_critic_apply",
           "MEMORY_CELLS", "initial_memory", "MemoryCore", "RecurrentActorCritic", "RecurrentQNetwork"]

ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "tanh": nn.tanh,
    "relu": nn.relu,
    "elu": nn.elu,
    "gelu": nn.gelu,
    "silu": nn.silu,
    "swish": nn.swish,
    "leaky_relu": nn.leaky_relu,
    "sigmoid": nn.sigmoid,
}
"""Activation names accepted by the networks in this module."""

_HIDDEN_GAIN = math.sqrt(2.0)


def get_activation(name: str) -> Callable[[jax.Array], jax.Array]:
    """Returns the activation function called ``name``.

    Args:
        name: a key of :data:`ACTIVATIONS`, e.g. ``"tanh"`` or ``"relu"``.

    Raises:
        ValueError: ``name`` is unknown; the message lists the valid names.
    """
    try:
        return ACTIVATIONS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown activation {name!r}; valid activations are {sorted(ACTIVATIONS)}") from None


def _validate_sizes(owner: str, hidden_sizes: Sequence[int], field: str = "hidden_sizes") -> None:
    sizes = tuple(hidden_sizes)
    if not all(isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in sizes):
        raise ValueError(f"{owner}: {field} must be positive ints, got {sizes!r}")


def _validate_positive(owner: str, field: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{owner}: {field} must be a positive int, got {value!r}")


def _as_float(obs: jax.typing.ArrayLike) -> jax.Array:
    obs = jnp.asarray(obs)
    # Integer/bool observations (e.g. one-hot grids) would make Dense compute in an int dtype.
    return obs if jnp.issubdtype(obs.dtype, jnp.floating) else obs.astype(jnp.float32)


def _dense(features: int, gain: float, name: str | None = None, noisy: bool = False) -> nn.Module:
    if noisy:
        return NoisyDense(features, name=name)
    return nn.Dense(features, kernel_init=nn.initializers.orthogonal(gain),
                    bias_init=nn.initializers.zeros, name=name)


NOISE = "noise"
"""The rng collection :class:`NoisyDense` draws its noise from (``apply(..., rngs={NOISE: key})``)."""


class NoisyDense(nn.Module):
    """A linear layer with factorised Gaussian parameter noise (Fortunato et al. 2018, "Noisy Networks
    for Exploration", section 3.2)::

        y = x (mu_W + sigma_W * eps_W) + mu_b + sigma_b * eps_b
        eps_W = f(eps_out) f(eps_in)^T,  eps_b = f(eps_out),  f(e) = sign(e) sqrt(|e|)

    with ``eps_in ~ N(0, I_p)`` and ``eps_out ~ N(0, I_q)`` drawn from the :data:`NOISE` rng, one draw
    per call (shared by every row of a batch). ``mu`` starts ``U[-1/sqrt(p), 1/sqrt(p)]`` and ``sigma``
    at ``sigma0 / sqrt(p)``. Without a :data:`NOISE` rng the layer is its mean, ``x mu_W + mu_b`` (the
    greedy policy of evaluation and export).

    Attributes:
        features: output width ``q``.
        sigma0: the initial noise scale (0.5 in the paper).

    Call:
        ``x``: float ``[..., p]`` -> float ``[..., q]``. Parameters ``mu_kernel``, ``sigma_kernel``
        ``[p, q]`` and ``mu_bias``, ``sigma_bias`` ``[q]``.
    """

    features: int
    sigma0: float = 0.5

    @nn.compact
    def __call__(self, x: jax.typing.ArrayLike) -> jax.Array:
        x = _as_float(x)
        p = x.shape[-1]
        bound = 1.0 / math.sqrt(p)

        def uniform(key: jax.Array, shape: Sequence[int], dtype: Any = jnp.float32) -> jax.Array:
            return jax.random.uniform(key, shape, dtype, -bound, bound)

        sigma = nn.initializers.constant(self.sigma0 / math.sqrt(p))
        mu_w = self.param("mu_kernel", uniform, (p, self.features))
        sigma_w = self.param("sigma_kernel", sigma, (p, self.features))
        mu_b = self.param("mu_bias", uniform, (self.features,))
        sigma_b = self.param("sigma_bias", sigma, (self.features,))
        if not self.has_rng(NOISE):
            return x @ mu_w + mu_b
        key_in, key_out = jax.random.split(self.make_rng(NOISE))
        eps_in = _scaled_noise(key_in, p)
        eps_out = _scaled_noise(key_out, self.features)
        # One draw serves the whole batch, so the noisy weight is formed once (p x q elementwise) and
        # applied with one matmul: half the matmuls of x mu_W + ((x eps_in) sigma_W) eps_out.
        return x @ (mu_w + sigma_w * (eps_in[:, None] * eps_out[None, :])) + (mu_b + sigma_b * eps_out)


def _scaled_noise(key: jax.Array, size: int) -> jax.Array:
    eps = jax.random.normal(key, (size,), jnp.float32)
    return jnp.sign(eps) * jnp.sqrt(jnp.abs(eps))


ENCODERS = ("auto", "mlp", "cnn", "nature")
"""How observations are encoded (the ``encoder`` config field), see :func:`encoder_layout`."""

_CNN_KERNEL = 3

NATURE_CNN = ((32, 8, 4), (64, 4, 2), (64, 3, 1))
"""The convolutions of the DQN Nature paper's torso (Mnih et al. 2015), ``(features, kernel, stride)``,
VALID: the Atari torso of DQN, CleanRL's and PureJaxRL's PPO, Cleanba and PQN."""

_NATURE_MIN_SIDE = 36  # the smallest H, W that leaves the last convolution at least one output


class LeafEncoding(NamedTuple):
    """How :class:`ObsEncoder` encodes one leaf of the observation pytree (hashable, static).

    Attributes:
        path: the leaf's place in the observation, as ``jax.tree_util.keystr`` writes it (``""``
            for an observation that is a single array, ``"['image']"`` in a dict), for messages.
        name: a parameter-name prefix for the leaf (``""`` for a single array, ``"image"``).
        kind: ``"flat"`` (reshaped to a vector), ``"cnn"`` (the 3x3 convolutional torso) or
            ``"nature"`` (:data:`NATURE_CNN`).
        shape: the shape of the leaf in ONE observation (no batch axes).
    """

    path: str
    name: str
    kind: str
    shape: tuple[int, ...]


def leaf_name(path: Any) -> str:
    """A pytree leaf's path as an identifier: its keys (dict keys, sequence indices, attribute names)
    joined by ``_``, every other character ``_`` (``("image", 0)`` -> ``image_0``)."""
    parts = []
    for k in path:
        part = getattr(k, "key", getattr(k, "idx", getattr(k, "name", k)))
        parts.append("".join(c if c.isalnum() else "_" for c in str(part)))
    return "_".join(parts)


def encoder_layout(obs_spec: Any, encoder: str = "auto", cnn_channels: Sequence[int] = (16,)
                   ) -> tuple[LeafEncoding, ...]:
    """Chooses an encoder for every leaf of an observation pytree.

    Rules, by the leaf's shape in one observation (``ndim`` its number of axes):

    * ``"auto"``: ``ndim <= 2`` (scalars ``[]``, vectors ``[d]``, grids ``[H, W]``) -> ``"flat"``:
      reshaped to a vector of ``prod(shape)`` (a scalar to ``[1]``) and fed to the MLP;
      ``ndim >= 3`` (images ``[H, W, C]``; further axes are merged into the channels) -> ``"cnn"``,
      unless ``H`` or ``W`` is too small for the convolutions (below), then ``"flat"``.
    * ``"mlp"``: every leaf ``"flat"``.
    * ``"cnn"``: every leaf with ``ndim >= 2`` -> ``"cnn"`` (a grid ``[H, W]`` as one channel); a
      leaf with ``ndim < 2`` is an error naming it.
    * ``"nature"``: every leaf with ``ndim >= 3`` (Atari frames ``[84, 84, 4]``) -> ``"nature"``
      (:data:`NATURE_CNN`), the others ``"flat"``.

    A ``"cnn"`` leaf needs ``H, W >= 1 + (kernel - 1) * len(cnn_channels)`` (VALID 3x3 convolutions),
    a ``"nature"`` leaf ``H, W >= 36``.

    Args:
        obs_spec: the observation pytree (arrays or ``jax.ShapeDtypeStruct`` values of ONE observation,
            e.g. :func:`rljax.env.observation_spec`); dicts, tuples, lists and registered pytrees.
        encoder: one of :data:`ENCODERS`.
        cnn_channels: the CNN's conv widths (only the number of layers matters here).

    Returns:
        One :class:`LeafEncoding` per leaf, in ``jax.tree.leaves`` order.

    Raises:
        ValueError: an unknown ``encoder``, an observation without leaves, a leaf that is not numeric
            or bool, or a leaf the chosen encoder cannot take (the message names the leaf).
    """
    if encoder not in ENCODERS:
        raise ValueError(f"encoder={encoder!r} is not one of {ENCODERS}")
    flat, _ = jax.tree_util.tree_flatten_with_path(obs_spec)
    if not flat:
        raise ValueError(f"the observation {obs_spec!r} has no arrays to encode")
    min_side = 1 + (_CNN_KERNEL - 1) * len(tuple(cnn_channels))
    layout = []
    for path, leaf in flat:
        where = "observation" + jax.tree_util.keystr(path)
        shape, dtype = tuple(int(d) for d in jnp.shape(leaf)), jnp.dtype(getattr(leaf, "dtype", jnp.float32))
        if not (jnp.issubdtype(dtype, jnp.number) or dtype == jnp.bool_) or jnp.issubdtype(dtype, jnp.complexfloating):
            raise ValueError(f"{where} has dtype {dtype}; observations must be real numbers or bools")
        small = len(shape) >= 2 and min(shape[:2]) < min_side
        if encoder == "nature":
            kind = "nature" if len(shape) >= 3 else "flat"
            if kind == "nature" and min(shape[:2]) < _NATURE_MIN_SIDE:
                raise ValueError(f"{where} of shape {shape} is too small for the Nature CNN: H and W must be >= "
                                 f"{_NATURE_MIN_SIDE} (use encoder='cnn' or 'mlp')")
        elif encoder == "mlp" or (encoder == "auto" and (len(shape) <= 2 or small)):
            kind = "flat"
        elif len(shape) < 2:
            raise ValueError(f"encoder='cnn' needs observation leaves of at least 2 axes [H, W, ...]; {where} has "
                             f"shape {shape} (use encoder='auto' or 'mlp')")
        else:
            kind = "cnn"
            if min(shape[:2]) < min_side:
                raise ValueError(f"{where} of shape {shape} is too small for {len(tuple(cnn_channels))} VALID "
                                 f"{_CNN_KERNEL}x{_CNN_KERNEL} conv layer(s): H and W must be >= {min_side} "
                                 f"(use encoder='mlp' or fewer cnn_channels)")
        layout.append(LeafEncoding(jax.tree_util.keystr(path), leaf_name(path), kind, shape))
    names: dict[str, str] = {}
    for leaf in layout:
        if leaf.kind in ("cnn", "nature") and names.setdefault(leaf.name, leaf.path) != leaf.path:
            raise ValueError(f"observation{names[leaf.name]} and observation{leaf.path} would share the parameter "
                             f"names {leaf.name}_conv_*: rename one of the keys")
    return tuple(layout)


class Conv3x3(nn.Module):
    """A 3x3, stride-1, VALID convolution written as patches times a matrix (im2col).

    ``y[b, h, w, :] = sum_{i, j, c} x[b, h + i, w + j, c] * kernel[i, j, c, :] + bias`` for
    ``x [B, H, W, C] -> y [B, H - 2, W - 2, features]``: the nine shifted ``[B, H-2, W-2, C]`` views
    are concatenated on the channel axis and multiplied by ``kernel.reshape(9 C, features)``. The
    parameters (``kernel [3, 3, C, features]``, ``bias [features]``) and their initial values are
    those of ``flax.linen.Conv(features, (3, 3), padding="VALID")`` with orthogonal weights (gain
    ``sqrt(2)``) and zero biases, and the outputs agree with it to float rounding.

    Why not ``nn.Conv``: XLA's CPU convolution is fast alone but slow inside a loop. Inside a
    ``lax.scan`` of gradient steps (as PPO's minibatch loop runs them) a convolution's gradient is
    more than an order of magnitude slower than the same gradient as patches times a matrix, while
    outside a loop the two take the same time.
    """

    features: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        cin = x.shape[-1]
        kernel = self.param("kernel", nn.initializers.orthogonal(_HIDDEN_GAIN),
                            (_CNN_KERNEL, _CNN_KERNEL, cin, self.features))
        bias = self.param("bias", nn.initializers.zeros, (self.features,))
        h, w = x.shape[-3] - _CNN_KERNEL + 1, x.shape[-2] - _CNN_KERNEL + 1
        patches = jnp.concatenate([x[..., i:i + h, j:j + w, :] for i in range(_CNN_KERNEL) for j in range(_CNN_KERNEL)],
                                  axis=-1)
        return patches @ kernel.reshape(-1, self.features) + bias


class PatchConv(nn.Module):
    """A ``kernel x kernel`` convolution with stride ``stride``, VALID, written as patches times a matrix.

    ``y[b, h, w, :] = sum_{i, j, c} x[b, s h + i, s w + j, c] * kernel[i, j, c, :] + bias`` for
    ``x [B, H, W, C] -> y [B, (H - k) // s + 1, (W - k) // s + 1, features]``: the patches come from
    ``lax.conv_general_dilated_patches`` (an exact copy of the inputs) and are multiplied by the
    kernel as a ``[C k k, features]`` matrix. Parameters and their initial values are those of
    ``flax.linen.Conv(features, (k, k), strides=(s, s), padding="VALID")`` with orthogonal weights
    (gain ``sqrt(2)``) and zero biases; the outputs agree with it to float rounding. (Why patches:
    see :class:`Conv3x3`.)
    """

    features: int
    kernel: int
    stride: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        cin, k = x.shape[-1], self.kernel
        kernel = self.param("kernel", nn.initializers.orthogonal(_HIDDEN_GAIN), (k, k, cin, self.features))
        bias = self.param("bias", nn.initializers.zeros, (self.features,))
        patches = jax.lax.conv_general_dilated_patches(x, (k, k), (self.stride, self.stride), "VALID",
                                                       dimension_numbers=("NHWC", "HWIO", "NHWC"))
        # The patches' features are ordered (channel, row, column): the kernel's [k, k, C] as [C, k, k].
        return patches @ kernel.transpose(2, 0, 1, 3).reshape(cin * k * k, self.features) + bias


class ObsEncoder(nn.Module):
    """Observations of any shape and pytree structure -> one feature vector ``[*batch, F]``.

    Each leaf ``x`` of the observation, of shape ``[*batch, *leaf.shape]`` (any batch axes), is cast
    to float32 when it is int or bool and encoded by its :class:`LeafEncoding`:

    * ``"flat"``: ``x.reshape(*batch, prod(leaf.shape))`` (a vector passes unchanged);
    * ``"cnn"``: as an image ``[H, W, C]`` (``C`` the product of the axes after the second, 1 for a
      grid), ``len(cnn_channels)`` times ``Conv(c, 3x3, stride 1, VALID) -> relu``, then flattened:
      ``F = (H - 2L) * (W - 2L) * cnn_channels[-1]`` for ``L`` layers. This is the MinAtar torso of
      the JAX baselines (Young & Tian 2019; gymnax; Stoix): one 16-filter 3x3 conv, relu, flatten,
      then the algorithm's hidden MLP layers. Orthogonal weights with gain ``sqrt(2)``, zero biases.
    * ``"nature"``: a ``uint8`` image is first scaled to ``[0, 1]`` (``x / 255``), then the Nature
      DQN torso (:data:`NATURE_CNN`: ``Conv(32, 8x8, stride 4) -> relu -> Conv(64, 4x4, stride 2)
      -> relu -> Conv(64, 3x3, stride 1) -> relu``, VALID; :class:`PatchConv`), flattened: ``F =
      3136`` for ``[84, 84, C]`` frames. With ``hidden_sizes=(512,)``, ``activation="relu"`` and a
      shared torso this is the Atari network of CleanRL's and PureJaxRL's PPO.

    The leaves' features are concatenated in leaf order. Parameters: ``conv_{j}`` (``nature_{j}``)
    for a single array, ``{leaf.name}_conv_{j}`` (``{leaf.name}_nature_{j}``) per image leaf of a
    pytree; a flat leaf has none, so for a
    vector observation the encoder is the identity (cast to float) with no parameters.

    Attributes:
        layout: :func:`encoder_layout` of the observation; ``()`` for an observation that is a flat
            vector ``[..., d]`` (it is only cast to float).
        cnn_channels: conv widths, one layer each.

    Call:
        ``obs``: a pytree with the layout's leaves, each ``[*batch, *leaf.shape]`` (the same
        ``batch`` for all) -> float ``[*batch, F]``.
    """

    layout: tuple[LeafEncoding, ...]
    cnn_channels: Sequence[int] = (16,)

    def __post_init__(self) -> None:
        _validate_sizes("ObsEncoder", self.cnn_channels, field="cnn_channels")
        super().__post_init__()

    @nn.compact
    def __call__(self, obs: Any) -> jax.Array:
        if not self.layout:
            return _as_float(obs)
        leaves = jax.tree.leaves(obs)
        if len(leaves) != len(self.layout):
            raise ValueError(f"ObsEncoder: the observation has {len(leaves)} arrays, the layout expects "
                             f"{len(self.layout)} ({[leaf.path for leaf in self.layout]})")
        features = []
        for leaf, raw in zip(self.layout, leaves):
            x = _as_float(raw)
            nd = len(leaf.shape)
            if x.ndim < nd or x.shape[x.ndim - nd:] != leaf.shape:
                raise ValueError(f"observation{leaf.path} has shape {x.shape}; expected [..., *{leaf.shape}]")
            batch = x.shape[:x.ndim - nd]
            if leaf.kind == "flat":
                features.append(x if nd == 1 else x.reshape(batch + (math.prod(leaf.shape),)))
                continue
            image = x.reshape((-1,) + leaf.shape[:2] + (math.prod(leaf.shape[2:]),))
            prefix = f"{leaf.name}_" if len(self.layout) > 1 else ""
            if leaf.kind == "nature":
                if raw.dtype == jnp.uint8:
                    image = image / 255.0
                for j, (channels, kernel, stride) in enumerate(NATURE_CNN):
                    image = nn.relu(PatchConv(channels, kernel, stride, name=f"{prefix}nature_{j}")(image))
                features.append(image.reshape(batch + (-1,)))
                continue
            for j, channels in enumerate(self.cnn_channels):
                image = nn.relu(Conv3x3(channels, name=f"{prefix}conv_{j}")(image))
            features.append(image.reshape(batch + (-1,)))
        return features[0] if len(features) == 1 else jnp.concatenate(features, axis=-1)


def observation_view(obs: Any, layout: tuple[LeafEncoding, ...], keys: tuple[str, ...]
                     ) -> tuple[Any, tuple[LeafEncoding, ...]]:
    """The part of a dict observation under ``keys`` and its leaves' encodings: ``({k: obs[k] for k in
    keys}, the entries of layout for those leaves)``; ``keys=()`` is the whole observation.

    Args:
        obs: the observation pytree (leaves ``[*batch, *leaf_shape]``).
        layout: :func:`encoder_layout` of the whole observation.
        keys: top-level keys of a dict observation.

    Raises:
        ValueError: ``obs`` is not a dict, or lacks one of ``keys`` (naming it and the keys it has).
    """
    if not keys:
        return obs, layout
    if not isinstance(obs, Mapping) or any(k not in obs for k in keys):
        have = sorted(obs) if isinstance(obs, Mapping) else type(obs).__name__
        raise ValueError(f"observation_view: the observation has keys {have}; the view needs {list(keys)}")
    paths = [path for path, _ in jax.tree_util.tree_flatten_with_path(obs)[0]]
    return {k: obs[k] for k in keys}, tuple(enc for path, enc in zip(paths, layout) if path[0].key in keys)


class MLP(nn.Module):
    """A multilayer perceptron: ``Dense -> activation`` per hidden size, then an optional output.

    Hidden layers use orthogonal weights with gain ``sqrt(2)`` and zero biases. With
    ``layer_norm``, each hidden layer is ``Dense -> LayerNorm -> activation`` (the LayerNorm with a
    learned scale and bias, parameters ``layer_norm_{i}``), as in PQN (Gallici et al. 2024,
    "Simplifying Deep Temporal Difference Learning"), where it is what keeps TD learning without a
    target network stable. With ``output_dim`` set, a final linear layer (no activation, no norm)
    with orthogonal gain ``output_gain`` is appended.

    Attributes:
        hidden_sizes: widths of the hidden layers; ``()`` makes the torso the identity.
        activation: a name from :data:`ACTIVATIONS`; unknown names raise ``ValueError``.
        output_dim: size of an optional final linear layer.
        output_gain: orthogonal gain of that final layer.
        layer_norm: normalise each hidden layer's pre-activations (default off: no norm parameters).
        noisy: every layer a :class:`NoisyDense` (its own initialisation instead of orthogonal).

    Call:
        ``x``: float ``[..., in_dim]`` -> float ``[..., hidden_sizes[-1]]`` (or
        ``[..., output_dim]``, or ``x`` itself when there are no layers).
    """

    hidden_sizes: Sequence[int]
    activation: str = "tanh"
    output_dim: int | None = None
    output_gain: float = 1.0
    layer_norm: bool = False
    noisy: bool = False

    def __post_init__(self) -> None:
        # Validate at construction: a typo fails where the config is built, not inside a jit trace.
        get_activation(self.activation)
        _validate_sizes("MLP", self.hidden_sizes)
        if self.output_dim is not None:
            _validate_positive("MLP", "output_dim", self.output_dim)
        super().__post_init__()

    @nn.compact
    def __call__(self, x: jax.typing.ArrayLike) -> jax.Array:
        act = get_activation(self.activation)
        x = _as_float(x)
        for i, size in enumerate(self.hidden_sizes):
            x = _dense(size, _HIDDEN_GAIN, name=f"hidden_{i}", noisy=self.noisy)(x)
            if self.layer_norm:
                x = nn.LayerNorm(name=f"layer_norm_{i}")(x)
            x = act(x)
        if self.output_dim is not None:
            x = _dense(self.output_dim, self.output_gain, name="output", noisy=self.noisy)(x)
        return x


class ActorCritic(nn.Module):
    """Policy and value networks for actor-critic methods such as PPO.

    Attributes:
        action_dim: number of discrete actions, or the dimension of a continuous action.
        discrete: ``True`` gives a :class:`~rljax.core.distributions.Categorical` policy; ``False`` a
            :class:`~rljax.core.distributions.DiagGaussian` with a state-independent ``log_std``.
        hidden_sizes: torso widths.
        activation: a name from :data:`ACTIVATIONS`.
        shared_torso: one torso feeds both heads (fewer parameters, but the value loss then shapes
            the policy's features); ``False`` (the default, as in PureJaxRL/CleanRL for MuJoCo-style
            tasks) uses separate actor and critic torsos.

        obs_layout: :func:`encoder_layout` of the observation (``()``: a flat vector ``[..., obs_dim]``).
        cnn_channels: conv widths of the image encoder (see :class:`ObsEncoder`).
        actor_keys, critic_keys: the keys of a dict observation the actor's and the critic's encoders
            see (:func:`observation_view`; ``()``: all of it). A centralised critic (MAPPO) is
            ``critic_keys=("global_state",)`` with ``actor_keys`` the agent's own leaves; the critic's
            features then never depend on what only the actor sees, nor the policy on the global
            state. Either needs separate torsos.

    Parameters (names in the params tree):
        ``torso`` or ``actor_torso``/``critic_torso`` (:class:`MLP`), each after its encoder
        ``encoder`` or ``actor_encoder``/``critic_encoder`` (:class:`ObsEncoder`; no parameters for
        a vector observation); ``logits`` (discrete) or ``mean`` and ``log_std`` ``[action_dim]``
        (continuous); ``value``.

    Call:
        ``obs``: the observation pytree, each leaf ``[..., *leaf_shape]`` (see the module docstring) ->
        ``(dist, value)``: ``dist`` with batch shape ``[...]`` (logits ``[..., action_dim]``, or
        mean and log_std ``[..., action_dim]``), and ``value`` float ``[...]``.
    """

    action_dim: int
    discrete: bool
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    shared_torso: bool = False
    obs_layout: tuple[LeafEncoding, ...] = ()
    cnn_channels: Sequence[int] = (16,)
    actor_keys: tuple[str, ...] = ()
    critic_keys: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        get_activation(self.activation)
        _validate_sizes("ActorCritic", self.hidden_sizes)
        _validate_positive("ActorCritic", "action_dim", self.action_dim)
        if self.shared_torso and (self.actor_keys or self.critic_keys):
            raise ValueError(f"ActorCritic: actor_keys={self.actor_keys} and critic_keys={self.critic_keys} give each "
                             f"side its own view of the observation; they need shared_torso=False")
        super().__post_init__()

    @nn.compact
    def __call__(self, obs: Any) -> tuple[Categorical | DiagGaussian, jax.Array]:
        def torso(prefix: str, keys: tuple[str, ...] = ()) -> jax.Array:
            view, layout = observation_view(obs, self.obs_layout, keys)
            features = ObsEncoder(layout, self.cnn_channels, name=f"{prefix}encoder")(view)
            return MLP(self.hidden_sizes, self.activation, name=f"{prefix}torso")(features)

        if self.shared_torso:
            actor_features = critic_features = torso("")
        else:
            actor_features, critic_features = torso("actor_", self.actor_keys), torso("critic_", self.critic_keys)

        return _policy_and_value(self, actor_features, critic_features, self.action_dim, self.discrete,
                                 legal_action_mask(obs))


def _policy_and_value(module: nn.Module, actor_features: jax.Array, critic_features: jax.Array, action_dim: int,
                      discrete: bool, legal: jax.Array | None = None) -> tuple[Categorical | DiagGaussian, jax.Array]:
    """The actor-critic heads, created inside ``module``'s compact call: ``logits`` or
    ``mean``/``log_std``, and ``value``. A discrete policy's logits of illegal actions (``legal``
    False, the observation's legal-action mask) are the lowest float: probability 0."""
    # Gain 0.01: initial logits/means are ~0, so the first policy is near-uniform / centred and
    # early updates are not dominated by an arbitrary initial preference.
    if discrete:
        logits = masked_actions(_dense(action_dim, 0.01, name="logits")(actor_features), legal)
        dist: Categorical | DiagGaussian = Categorical(logits=logits)
    else:
        mean = _dense(action_dim, 0.01, name="mean")(actor_features)
        # State-independent log_std (std = 1 at init), broadcast so the distribution's leaves
        # all carry the batch shape and can be sliced / vmapped like the rest of a rollout.
        log_std = module.param("log_std", nn.initializers.zeros, (action_dim,))
        dist = DiagGaussian(mean=mean, log_std=jnp.broadcast_to(log_std, mean.shape))
    value = _dense(1, 1.0, name="value")(critic_features)[..., 0]
    return dist, value


class PerAgent(nn.Module):
    """``num_agents`` copies of a network, each with its own parameters (no parameter sharing), for the
    rows of a multi-agent batch (:class:`rljax.core.wrappers.AgentBatch` with ``agent_id=True``):
    row ``r`` is answered by the copy of its agent ``argmax(obs["agent_id"][r])``.

    Every copy runs on every row, then each output leaf takes its row's agent's copy; so rows may
    come in any order (PPO's shuffled minibatches) and the cost is ``num_agents`` forward passes.

    Attributes:
        network: the module class of one copy (:class:`ActorCritic`).
        fields: its constructor's fields as ``((name, value), ...)``.
        num_agents: how many copies.

    Parameters: ``agent_{i}/...``, copy ``i``'s (its own initialisation).

    Call:
        ``obs`` (a dict with the :data:`~rljax.core.wrappers.AGENT_ID` one-hot ``[*batch,
        num_agents]``) -> the copy's outputs, each leaf ``[*batch, ...]``.
    """

    network: Any
    fields: tuple[tuple[str, Any], ...]
    num_agents: int

    def __post_init__(self) -> None:
        _validate_positive("PerAgent", "num_agents", self.num_agents)
        super().__post_init__()

    @nn.compact
    def __call__(self, obs: Any) -> Any:
        if not isinstance(obs, Mapping) or AGENT_ID not in obs:
            raise ValueError(f"PerAgent: each row needs its {AGENT_ID!r} one-hot to pick its agent's copy; the "
                             f"observation has {sorted(obs) if isinstance(obs, Mapping) else type(obs).__name__}")
        outputs = [self.network(**dict(self.fields), name=f"agent_{i}")(obs) for i in range(self.num_agents)]
        agent = jnp.argmax(obs[AGENT_ID], axis=-1)

        def mine(*xs: jax.Array) -> jax.Array:  # N x [*batch, *rest] -> [*batch, *rest]
            index = agent.reshape(agent.shape + (1,) * (xs[0].ndim - agent.ndim))
            out = xs[0]
            for i in range(1, self.num_agents):
                out = jnp.where(index == i, xs[i], out)
            return out

        return jax.tree.map(mine, *outputs)


class QNetwork(nn.Module):
    """Action-value network for DQN-style methods.

    Without ``dueling``: ``Q = Dense(MLP(obs))``. With ``dueling`` (Wang et al. 2016, "Dueling
    Network Architectures for Deep RL", eq. 9):

    ``Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a')``

    Subtracting the mean makes the V/A split identifiable: ``mean_a Q(s, a) = V(s)``. The two
    streams are sown into the ``"intermediates"`` collection as ``value`` ``[...]`` and
    ``advantage`` ``[..., num_actions]`` for inspection
    (``apply(..., mutable=["intermediates"])``).

    With ``num_atoms > 1`` the network is distributional: ``num_atoms`` outputs per action,
    ``[..., num_actions, num_atoms]`` (C51's logits over fixed atoms, QR-DQN's quantiles); a dueling
    head combines the streams per atom, ``V[..., 1, k] + A[..., a, k] - mean_a' A[..., a', k]`` (as
    Rainbow, Hessel et al. 2018). With ``noisy`` every layer after the encoder is a
    :class:`NoisyDense`: pass ``rngs={NOISE: key}`` to draw its noise, or nothing for its mean.

    All layers use orthogonal init (gain ``sqrt(2)`` in the torso, ``1`` in the heads) and zero
    biases. Parameters: ``encoder`` (:class:`ObsEncoder`, none for a vector observation), ``torso``
    (:class:`MLP`) and either ``q`` or ``value_stream``/``advantage_stream``.

    Attributes:
        num_actions: number of discrete actions.
        hidden_sizes: torso widths.
        activation: a name from :data:`ACTIVATIONS` (``"relu"`` by default, as in DQN).
        dueling: use the dueling head.
        layer_norm: ``Dense -> LayerNorm -> activation`` in the torso (see :class:`MLP`).
        obs_layout: :func:`encoder_layout` of the observation (``()``: a flat vector ``[..., obs_dim]``).
        cnn_channels: conv widths of the image encoder (see :class:`ObsEncoder`).
        noisy: noisy layers (:class:`NoisyDense`) in the torso and heads.
        num_atoms: outputs per action (1: the action values themselves).

    Call:
        ``obs``: the observation pytree, each leaf ``[..., *leaf_shape]`` -> float ``[..., num_actions]``
        (``[..., num_actions, num_atoms]`` with ``num_atoms > 1``).
    """

    num_actions: int
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "relu"
    dueling: bool = False
    layer_norm: bool = False
    obs_layout: tuple[LeafEncoding, ...] = ()
    cnn_channels: Sequence[int] = (16,)
    noisy: bool = False
    num_atoms: int = 1

    def __post_init__(self) -> None:
        get_activation(self.activation)
        _validate_sizes("QNetwork", self.hidden_sizes)
        _validate_positive("QNetwork", "num_actions", self.num_actions)
        _validate_positive("QNetwork", "num_atoms", self.num_atoms)
        super().__post_init__()

    @nn.compact
    def __call__(self, obs: Any) -> jax.Array:
        features = ObsEncoder(self.obs_layout, self.cnn_channels, name="encoder")(obs)
        features = MLP(self.hidden_sizes, self.activation, layer_norm=self.layer_norm, noisy=self.noisy,
                       name="torso")(features)
        atoms, shape = self.num_atoms, (self.num_actions,) if self.num_atoms == 1 else (self.num_actions,
                                                                                          self.num_atoms)
        if not self.dueling:
            out = _dense(self.num_actions * atoms, 1.0, name="q", noisy=self.noisy)(features)
            return out.reshape(*out.shape[:-1], *shape)
        value = _dense(atoms, 1.0, name="value_stream", noisy=self.noisy)(features)
        advantage = _dense(self.num_actions * atoms, 1.0, name="advantage_stream", noisy=self.noisy)(features)
        value = value[..., 0] if atoms == 1 else value.reshape(*value.shape[:-1], 1, atoms)
        advantage = advantage.reshape(*advantage.shape[:-1], *shape)
        self.sow("intermediates", "value", value)
        self.sow("intermediates", "advantage", advantage)
        if atoms == 1:
            return value[..., None] + advantage - jnp.mean(advantage, axis=-1, keepdims=True)
        return value + advantage - jnp.mean(advantage, axis=-2, keepdims=True)


class BoxCritic(nn.Module):
    """``(obs, a_norm) -> Q``: one action-value critic for Box actions, float ``[...]`` (or, with
    ``num_atoms > 1``, float ``[..., num_atoms]``: the logits of a categorical return distribution, as
    D4PG's critic, :mod:`rljax.agents.d4pg`).

    The observation goes through the critic's own ``encoder`` (``obs_layout``, see
    :class:`ObsEncoder`), whose features are concatenated with the action ``a_norm`` (rescaled to
    ``[-1, 1]`` by the caller, :func:`twin_critic_apply`) before the MLP (value head gain 1). The twin
    pair of SAC and TD3 is two parameter sets of this one module (a leading ``[2]`` axis).
    """

    hidden_sizes: Sequence[int]
    activation: str = "relu"
    obs_layout: tuple[LeafEncoding, ...] = ()
    cnn_channels: Sequence[int] = (16,)
    num_atoms: int = 1

    @nn.compact
    def __call__(self, obs: Any, action: jax.typing.ArrayLike) -> jax.Array:
        features = ObsEncoder(self.obs_layout, self.cnn_channels, name="encoder")(obs)
        x = jnp.concatenate([features, jnp.asarray(action, jnp.float32)], axis=-1)
        out = MLP(self.hidden_sizes, self.activation, output_dim=self.num_atoms, output_gain=1.0)(x)
        return out[..., 0] if self.num_atoms == 1 else out


def init_actor_and_twin_critics(actor: nn.Module, critic: nn.Module, key: jax.Array, obs: Any, action: jax.Array,
                                num_critics: int = 2) -> tuple[Any, Any]:
    """``(actor_params, critic_params)``: the actor from one half of ``key``, the twin critics (a
    leading ``[num_critics]`` axis, 2 by default) from the other.

    ``obs`` is ``[1, ...]`` and ``action`` ``[1, A]``. The critics are initialised one after the
    other (``lax.map``), never vmapped: a vmapped orthogonal initialiser becomes a batched LAPACK QR,
    whose CPU kernel can deadlock XLA's intra-op thread pool.
    """
    k_actor, k_critic = jax.random.split(key)
    actor_params = actor.init(k_actor, obs)
    return actor_params, jax.lax.map(lambda args: critic.init(args[0], obs, action),
                                     (jax.random.split(k_critic, num_critics),))


def twin_critic_apply(critic: nn.Module, low: jax.Array, high: jax.Array
                      ) -> Callable[[Any, Any, jax.Array], jax.Array]:
    """``critic_fn(critic_params [C, ...], obs [N, ...], action [N, A]) -> Q [C, N]`` (``[C, N, K]`` for
    a critic with ``K = num_atoms > 1``): the ``C`` (twin: 2) critics
    on actions in env units, rescaled to ``[-1, 1]`` by the box ``[low, high]`` (float ``[A]``)
    first, so the critics see the same scale whatever the env's units."""
    center, half = (high + low) / 2.0, (high - low) / 2.0

    def critic_fn(params: Any, obs: Any, action: jax.Array) -> jax.Array:
        return jax.vmap(critic.apply, in_axes=(0, None, None))(params, obs, (action - center) / half)

    return critic_fn


# ----------------------------------------------------------------------------------------------
# Recurrent networks: a memory core between the torso and the heads
# ----------------------------------------------------------------------------------------------

MEMORY_CELLS = ("none", "gru", "lstm")
"""The ``memory`` config field's choices: no memory, a GRU (Cho et al. 2014) or an LSTM (Hochreiter
and Schmidhuber 1997) core (:class:`MemoryCore`)."""


def initial_memory(cell: str, size: int, batch: int) -> Any:
    """The memory at an episode's start for ``batch`` envs: zeros, ``[batch, size]`` for a GRU,
    ``(c, h)`` of two ``[batch, size]`` for an LSTM (flax's carry order)."""
    if cell not in MEMORY_CELLS[1:]:
        raise ValueError(f"memory cell {cell!r} is not one of {MEMORY_CELLS[1:]}")
    zeros = jnp.zeros((batch, size), jnp.float32)
    return zeros if cell == "gru" else (zeros, zeros)


_GATES = {"gru": 3, "lstm": 4}


def _blockwise_orthogonal(blocks: int) -> Callable[..., jax.Array]:
    """An initialiser of a ``[H, blocks * H]`` recurrent kernel: each ``[H, H]`` gate block
    orthogonal on its own (flax's cells initialise each gate's recurrent kernel so), each block from
    its own split of the key (one unbatched QR per block)."""
    def init(key: jax.Array, shape: tuple[int, ...], dtype: Any = jnp.float32) -> jax.Array:
        rows, cols = shape
        keys = jax.random.split(key, blocks)
        return jnp.concatenate([nn.initializers.orthogonal()(k, (rows, cols // blocks), dtype) for k in keys], axis=1)
    return init


def _gru_step(hidden_kernel: jax.Array, hidden_bias: jax.Array, h: jax.Array, xw: jax.Array) -> jax.Array:
    """One GRU step (flax's :class:`~flax.linen.GRUCell` equations) from the input's projection
    ``xw = x @ W_i + b_i`` ``[B, 3H]`` (gates r, z, n):
    ``r = s(xw_r + h W_r)``, ``z = s(xw_z + h W_z)``, ``n = tanh(xw_n + r * (h W_n + b_n))``,
    ``h' = (1 - z) * n + z * h``."""
    hw = h @ hidden_kernel
    xr, xz, xn = jnp.split(xw, 3, axis=-1)
    hr, hz, hn = jnp.split(hw, 3, axis=-1)
    r, z = nn.sigmoid(xr + hr), nn.sigmoid(xz + hz)
    n = jnp.tanh(xn + r * (hn + hidden_bias))
    return (1.0 - z) * n + z * h


def _lstm_step(hidden_kernel: jax.Array, carry: tuple[jax.Array, jax.Array], xw: jax.Array
               ) -> tuple[jax.Array, jax.Array]:
    """One LSTM step (flax's :class:`~flax.linen.OptimizedLSTMCell` equations, gates i, f, g, o)
    from ``xw = x @ W_i + b`` ``[B, 4H]``: ``c' = s(f) * c + s(i) * tanh(g)``, ``h' = s(o) * tanh(c')``;
    the carry is ``(c, h)``."""
    c, h = carry
    i, f, g, o = jnp.split(xw + h @ hidden_kernel, 4, axis=-1)
    c = nn.sigmoid(f) * c + nn.sigmoid(i) * jnp.tanh(g)
    return c, nn.sigmoid(o) * jnp.tanh(c)


class MemoryCore(nn.Module):
    """A GRU or LSTM over time, its memory reset where an episode starts.

    ``h_t = cell(where(reset_t, 0, h_{t-1}), x_t)``: ``reset_t`` is True where ``x_t`` comes from
    the first observation of an episode, so no memory leaks from one episode into the next. The
    cells compute flax's GRU and LSTM equations (:func:`_gru_step`, :func:`_lstm_step`) with the
    gates' kernels fused: the input projection ``x_t W_i`` of every step is one matrix product
    before the loop, so each step of the loop holds only the recurrent product ``h W_h`` (on a CPU
    the loop's per-step work is what sequence training waits for). Initialisation as flax's: LeCun
    normal input kernels, an orthogonal recurrent kernel per gate, zero biases.

    Attributes:
        cell: ``"gru"`` or ``"lstm"``.
        size: the memory's width ``H``.

    Parameters: ``input_kernel`` ``[F, G * H]``, ``input_bias`` ``[G * H]``, ``hidden_kernel``
    ``[H, G * H]`` (``G`` = 3 gates for a GRU, 4 for an LSTM) and, for a GRU, ``hidden_bias`` ``[H]``
    (the candidate's recurrent bias).

    Call:
        ``memory`` (leaves ``[B, H]``, :func:`initial_memory`), ``x`` float ``[T, B, F]``, ``reset``
        bool ``[T, B]`` -> ``(memories, y)``: the memory after every step (leaves ``[T, B, H]``) and
        the output ``h_t`` ``[T, B, H]``.
    """

    cell: str
    size: int

    @nn.compact
    def __call__(self, memory: Any, x: jax.Array, reset: jax.Array) -> tuple[Any, jax.Array]:
        gates, h = _GATES[self.cell], self.size
        input_kernel = self.param("input_kernel", nn.initializers.lecun_normal(), (x.shape[-1], gates * h))
        input_bias = self.param("input_bias", nn.initializers.zeros, (gates * h,))
        hidden_kernel = self.param("hidden_kernel", _blockwise_orthogonal(gates), (h, gates * h))
        if self.cell == "gru":
            hidden_bias = self.param("hidden_bias", nn.initializers.zeros, (h,))
            cell = lambda m, xw: _gru_step(hidden_kernel, hidden_bias, m, xw)  # noqa: E731
        else:
            cell = lambda m, xw: _lstm_step(hidden_kernel, m, xw)  # noqa: E731
        xw = x @ input_kernel + input_bias  # every step's input projection at once: [T, B, G * H]

        def step(m: Any, inputs: tuple[jax.Array, jax.Array]) -> tuple[Any, Any]:
            xw_t, reset_t = inputs
            m = cell(reset_memory(m, reset_t), xw_t)
            return m, m

        if x.shape[0] == 1:  # one step (acting): no loop, so the step also exports as plain ops (ONNX)
            memories = jax.tree.map(lambda v: v[None], step(memory, (xw[0], reset[0]))[0])
        else:
            memories = jax.lax.scan(step, memory, (xw, reset))[1]
        return memories, memories if self.cell == "gru" else memories[1]


def _validate_recurrent(module: nn.Module, out_field: str, out_value: int) -> None:
    """What a recurrent network checks at construction: activation, torso sizes, its output width and
    the memory fields."""
    owner = type(module).__name__
    get_activation(module.activation)
    _validate_sizes(owner, module.hidden_sizes)
    _validate_positive(owner, out_field, out_value)
    if module.memory not in MEMORY_CELLS[1:]:
        raise ValueError(f"{owner}: memory={module.memory!r} is not a memory cell; choose one of {MEMORY_CELLS[1:]}")
    _validate_positive(owner, "memory_size", module.memory_size)


def _remember(module: nn.Module, memory: Any, obs: Any, reset: jax.Array, layer_norm: bool = False,
              keys: tuple[str, ...] = ()) -> tuple[Any, jax.Array]:
    """``encoder -> torso -> core`` inside ``module``'s compact call, on the observation's ``keys``
    (:func:`observation_view`): ``(memories, core output)``."""
    view, layout = observation_view(obs, module.obs_layout, keys)
    features = ObsEncoder(layout, module.cnn_channels, name="encoder")(view)
    x = MLP(module.hidden_sizes, module.activation, layer_norm=layer_norm, name="torso")(features)
    return MemoryCore(module.memory, module.memory_size, name="core")(memory, x, reset)


class RecurrentActorCritic(nn.Module):
    """An actor-critic with memory: ``encoder -> torso -> memory core -> actor and critic heads``.

    The torso (:class:`MLP` of ``hidden_sizes``) is shared, then the :class:`MemoryCore`; each head
    is one ``Dense(memory_size) -> activation`` layer and the output layers of :class:`ActorCritic`
    (``logits`` or ``mean``/``log_std``; ``value``). With ``hidden_sizes=(128,)``,
    ``memory_size=128`` and ReLU this is PureJaxRL's ``ppo_rnn.py`` network.

    With ``critic_keys`` (a centralised critic, MAPPO) the memory sees the ``actor_keys`` view and the
    critic has its own: ``critic_encoder -> critic_torso`` (:class:`MLP` of ``hidden_sizes``) ``->``
    (with ``critic_memory``) its own :class:`MemoryCore` ``critic_core`` ``-> critic_head``: JaxMARL's
    MAPPO critic (Dense -> GRU -> Dense on the global state). The memory is then the pair
    ``(actor's, critic's)``; without ``critic_memory`` the critic is feed-forward on its view.

    Attributes:
        action_dim, discrete, hidden_sizes, activation, obs_layout, cnn_channels, actor_keys,
            critic_keys: as :class:`ActorCritic`.
        memory: ``"gru"`` or ``"lstm"``.
        memory_size: the memory's width.
        critic_memory: the centralised critic (``critic_keys``) has its own memory core.

    Call:
        ``memory`` (leaves ``[B, memory_size]``; :meth:`initial`), ``obs`` (leaves ``[T, B, *leaf_shape]``),
        ``reset`` bool ``[T, B]`` (True: that observation starts an episode) -> ``(memories, dist,
        value)``: the memory after each step (leaves ``[T, B, memory_size]``), ``dist`` with batch
        shape ``[T, B]`` and ``value`` ``[T, B]``.
    """

    action_dim: int
    discrete: bool
    hidden_sizes: Sequence[int] = (128,)
    activation: str = "relu"
    obs_layout: tuple[LeafEncoding, ...] = ()
    cnn_channels: Sequence[int] = (16,)
    memory: str = "gru"
    memory_size: int = 128
    actor_keys: tuple[str, ...] = ()
    critic_keys: tuple[str, ...] = ()
    critic_memory: bool = False

    def __post_init__(self) -> None:
        _validate_recurrent(self, "action_dim", self.action_dim)
        if self.critic_memory and not self.critic_keys:
            raise ValueError("RecurrentActorCritic: critic_memory=True gives a centralised critic (critic_keys) a "
                             "memory of its own; without critic_keys the critic shares the actor's")
        super().__post_init__()

    def initial(self, batch: int) -> Any:
        """The memory at an episode's start for ``batch`` envs (:func:`initial_memory`; with
        ``critic_memory``, the pair ``(actor's, critic's)``)."""
        one = initial_memory(self.memory, self.memory_size, batch)
        return (one, initial_memory(self.memory, self.memory_size, batch)) if self.critic_memory else one

    @nn.compact
    def __call__(self, memory: Any, obs: Any, reset: jax.Array
                 ) -> tuple[Any, Categorical | DiagGaussian, jax.Array]:
        actor_memory, critic_memory = memory if self.critic_memory else (memory, None)
        memories, y = _remember(self, actor_memory, obs, reset, keys=self.actor_keys)
        actor = MLP((self.memory_size,), self.activation, name="actor_head")(y)
        if self.critic_keys:
            view, layout = observation_view(obs, self.obs_layout, self.critic_keys)
            y = MLP(self.hidden_sizes, self.activation, name="critic_torso")(
                ObsEncoder(layout, self.cnn_channels, name="critic_encoder")(view))
            if self.critic_memory:
                critic_memories, y = MemoryCore(self.memory, self.memory_size, name="critic_core")(
                    critic_memory, y, reset)
                memories = (memories, critic_memories)
        critic = MLP((self.memory_size,), self.activation, name="critic_head")(y)
        dist, value = _policy_and_value(self, actor, critic, self.action_dim, self.discrete, legal_action_mask(obs))
        return memories, dist, value


class RecurrentQNetwork(nn.Module):
    """Action values with memory: ``encoder -> torso -> memory core -> Dense(num_actions)``.

    The torso is :class:`QNetwork`'s (with ``layer_norm`` for PQN); the output layer has orthogonal
    gain 1.

    Attributes:
        num_actions, hidden_sizes, activation, layer_norm, obs_layout, cnn_channels: as :class:`QNetwork`.
        memory: ``"gru"`` or ``"lstm"``.
        memory_size: the memory's width.

    Call:
        ``memory`` (leaves ``[B, memory_size]``), ``obs`` (leaves ``[T, B, *leaf_shape]``), ``reset``
        bool ``[T, B]`` -> ``(memories, q)``: the memory after each step and ``q`` ``[T, B, num_actions]``.
    """

    num_actions: int
    hidden_sizes: Sequence[int] = (128,)
    activation: str = "relu"
    layer_norm: bool = False
    obs_layout: tuple[LeafEncoding, ...] = ()
    cnn_channels: Sequence[int] = (16,)
    memory: str = "gru"
    memory_size: int = 128

    def __post_init__(self) -> None:
        _validate_recurrent(self, "num_actions", self.num_actions)
        super().__post_init__()

    @nn.compact
    def __call__(self, memory: Any, obs: Any, reset: jax.Array) -> tuple[Any, jax.Array]:
        memories, y = _remember(self, memory, obs, reset, self.layer_norm)
        return memories, _dense(self.num_actions, 1.0, name="q")(y)
