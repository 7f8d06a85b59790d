"""Flax (``flax.linen``) networks for the built-in agents.

* :class:`MLP` -- the shared torso: ``Dense -> activation`` per hidden layer, orthogonal init.
* :class:`ActorCritic` -- PPO's policy and value function, ``obs -> (distribution, value)``.
* :class:`QNetwork` -- DQN's action values, ``obs -> Q[..., num_actions]``, optionally dueling.

Initialisation follows the "implementation details" of PPO that matter in practice (Engstrom et al.
2020, "Implementation Matters in Deep Policy Gradients"; Andrychowicz et al. 2021, "What Matters in
On-Policy RL"; Huang et al. 2022, "The 37 Implementation Details of PPO"): orthogonal weights
(Saxe et al. 2014) with gain ``sqrt(2)`` in the hidden layers, zero biases, a policy head with gain
``0.01`` so the initial policy is close to uniform / zero-mean, a value head with gain ``1``, and a
state-independent ``log_std`` starting at 0 (``std = 1``).

All modules accept observations with any leading batch shape ``[..., obs_dim]``; integer or bool
observations are cast to float32.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from rljax.distributions import Categorical, DiagGaussian

__all__ = ["ACTIVATIONS", "get_activation", "MLP", "ActorCritic", "QNetwork"]

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


def _validate_sizes(owner: str, hidden_sizes: Sequence[int]) -> None:
    sizes = tuple(hidden_sizes)
    if not all(isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in sizes):
        raise ValueError(f"{owner}: hidden_sizes must be positive ints, got {sizes!r}")


def _validate_positive(owner: str, field: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{owner}: {field} must be a positive int, got {value!r}")


def _as_float(obs: jax.typing.ArrayLike) -> jax.Array:
    obs = jnp.asarray(obs)
    # Integer/bool observations (e.g. one-hot grids) would make Dense compute in an int dtype.
    return obs if jnp.issubdtype(obs.dtype, jnp.floating) else obs.astype(jnp.float32)


def _dense(features: int, gain: float, name: str | None = None) -> nn.Dense:
    return nn.Dense(features, kernel_init=nn.initializers.orthogonal(gain),
                    bias_init=nn.initializers.zeros, name=name)


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

    Call:
        ``x``: float ``[..., in_dim]`` -> float ``[..., hidden_sizes[-1]]`` (or
        ``[..., output_dim]``, or ``x`` itself when there are no layers).
    """

    hidden_sizes: Sequence[int]
    activation: str = "tanh"
    output_dim: int | None = None
    output_gain: float = 1.0
    layer_norm: bool = False

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
            x = _dense(size, _HIDDEN_GAIN, name=f"hidden_{i}")(x)
            if self.layer_norm:
                x = nn.LayerNorm(name=f"layer_norm_{i}")(x)
            x = act(x)
        if self.output_dim is not None:
            x = _dense(self.output_dim, self.output_gain, name="output")(x)
        return x


class ActorCritic(nn.Module):
    """Policy and value networks for actor-critic methods such as PPO.

    Attributes:
        action_dim: number of discrete actions, or the dimension of a continuous action.
        discrete: ``True`` gives a :class:`~rljax.distributions.Categorical` policy; ``False`` a
            :class:`~rljax.distributions.DiagGaussian` with a state-independent ``log_std``.
        hidden_sizes: torso widths.
        activation: a name from :data:`ACTIVATIONS`.
        shared_torso: one torso feeds both heads (fewer parameters, but the value loss then shapes
            the policy's features); ``False`` (the default, as in PureJaxRL/CleanRL for MuJoCo-style
            tasks) uses separate actor and critic torsos.

    Parameters (names in the params tree):
        ``torso`` or ``actor_torso``/``critic_torso`` (:class:`MLP`); ``logits`` (discrete) or
        ``mean`` and ``log_std`` ``[action_dim]`` (continuous); ``value``.

    Call:
        ``obs``: ``[..., obs_dim]`` ->
        ``(dist, value)``: ``dist`` with batch shape ``[...]`` (logits ``[..., action_dim]``, or
        mean and log_std ``[..., action_dim]``), and ``value`` float ``[...]``.
    """

    action_dim: int
    discrete: bool
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    shared_torso: bool = False

    def __post_init__(self) -> None:
        get_activation(self.activation)
        _validate_sizes("ActorCritic", self.hidden_sizes)
        _validate_positive("ActorCritic", "action_dim", self.action_dim)
        super().__post_init__()

    @nn.compact
    def __call__(self, obs: jax.typing.ArrayLike) -> tuple[Categorical | DiagGaussian, jax.Array]:
        obs = _as_float(obs)
        if self.shared_torso:
            actor_features = critic_features = MLP(self.hidden_sizes, self.activation,
                                                   name="torso")(obs)
        else:
            actor_features = MLP(self.hidden_sizes, self.activation, name="actor_torso")(obs)
            critic_features = MLP(self.hidden_sizes, self.activation, name="critic_torso")(obs)

        # Gain 0.01: initial logits/means are ~0, so the first policy is near-uniform / centred and
        # early updates are not dominated by an arbitrary initial preference.
        if self.discrete:
            logits = _dense(self.action_dim, 0.01, name="logits")(actor_features)
            dist: Categorical | DiagGaussian = Categorical(logits=logits)
        else:
            mean = _dense(self.action_dim, 0.01, name="mean")(actor_features)
            # State-independent log_std (std = 1 at init), broadcast so the distribution's leaves
            # all carry the batch shape and can be sliced / vmapped like the rest of a rollout.
            log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,))
            dist = DiagGaussian(mean=mean, log_std=jnp.broadcast_to(log_std, mean.shape))

        value = _dense(1, 1.0, name="value")(critic_features)[..., 0]
        return dist, value


class QNetwork(nn.Module):
    """Action-value network for DQN-style methods.

    Without ``dueling``: ``Q = Dense(MLP(obs))``. With ``dueling`` (Wang et al. 2016, "Dueling
    Network Architectures for Deep RL", eq. 9):

    ``Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a')``

    Subtracting the mean makes the V/A split identifiable: ``mean_a Q(s, a) = V(s)``. The two
    streams are sown into the ``"intermediates"`` collection as ``value`` ``[...]`` and
    ``advantage`` ``[..., num_actions]`` for inspection
    (``apply(..., mutable=["intermediates"])``).

    All layers use orthogonal init (gain ``sqrt(2)`` in the torso, ``1`` in the heads) and zero
    biases. Parameters: ``torso`` (:class:`MLP`) and either ``q`` or
    ``value_stream``/``advantage_stream``.

    Attributes:
        num_actions: number of discrete actions.
        hidden_sizes: torso widths.
        activation: a name from :data:`ACTIVATIONS` (``"relu"`` by default, as in DQN).
        dueling: use the dueling head.
        layer_norm: ``Dense -> LayerNorm -> activation`` in the torso (see :class:`MLP`).

    Call:
        ``obs``: ``[..., obs_dim]`` -> float ``[..., num_actions]``.
    """

    num_actions: int
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "relu"
    dueling: bool = False
    layer_norm: bool = False

    def __post_init__(self) -> None:
        get_activation(self.activation)
        _validate_sizes("QNetwork", self.hidden_sizes)
        _validate_positive("QNetwork", "num_actions", self.num_actions)
        super().__post_init__()

    @nn.compact
    def __call__(self, obs: jax.typing.ArrayLike) -> jax.Array:
        features = MLP(self.hidden_sizes, self.activation, layer_norm=self.layer_norm, name="torso")(obs)
        if not self.dueling:
            return _dense(self.num_actions, 1.0, name="q")(features)
        value = _dense(1, 1.0, name="value_stream")(features)[..., 0]
        advantage = _dense(self.num_actions, 1.0, name="advantage_stream")(features)
        self.sow("intermediates", "value", value)
        self.sow("intermediates", "advantage", advantage)
        return value[..., None] + advantage - jnp.mean(advantage, axis=-1, keepdims=True)
