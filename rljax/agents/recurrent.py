"""What recurrent on-policy agents share: acting with memory, re-running a rollout, whole sequences.

A recurrent network here is a flax ``apply`` of the form ``apply(params, memory, obs, reset) ->
(memories, *outputs)`` (:class:`~rljax.core.networks.RecurrentActorCritic`,
:class:`~rljax.core.networks.RecurrentQNetwork`): ``memory`` leaves ``[B, H]``, ``obs`` leaves
``[T, B, ...]``, ``reset`` bool ``[T, B]``, ``memories`` the memory after each step (leaves
``[T, B, H]``) and outputs with batch shape ``[T, B]``.

How the memory moves through one update:

1. **acting** (:func:`memory_step`): one step from the memory the train state carries; the
   rollout (:func:`rljax.core.rollout.rollout`) zeros the memory of every env whose episode ended
   and records the memory each step started from (``Transition.memory``).
2. **targets** (:func:`replay`, :func:`bootstrap_outputs`): the whole rollout is run again from
   the memory recorded at its first step, resetting where an episode starts inside it
   (:func:`rollout_resets`); the bootstrap value of step ``t`` comes from the true next
   observation and the memory after step ``t`` (so a truncated episode bootstraps with the memory
   of that episode).
3. **learning** (:func:`to_sequences`, :func:`sequence_apply`): truncated backpropagation through
   time. The ``[T, B]`` rollout is cut into ``B * T / L`` sequences of ``L`` steps (``L`` the
   config's ``bptt_length``, 0 for ``T``); each starts from the memory recorded at its first step
   (as it was when the behaviour policy acted: R2D2's "stored state") and minibatches hold whole
   sequences, so gradients flow through up to ``L`` steps of memory.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rljax.core.networks import initial_memory
from rljax.core.rollout import Transition

__all__ = ["Sequences", "memory_init", "memory_step", "rollout_resets", "replay", "bootstrap_outputs", "to_sequences",
           "sequences", "sequence_apply", "sequence_length"]


class Sequences(NamedTuple):
    """A batch of sequences, batch-major: what :func:`sequence_apply` feeds a recurrent network.

    Attributes:
        obs: observation leaves ``[S, L, *leaf_shape]``.
        reset: bool ``[S, L]``, True where the observation starts an episode.
        memory: the memory each sequence starts from, leaves ``[S, H]``.
    """

    obs: Any
    reset: jax.Array
    memory: Any


def _outputs(result: tuple) -> tuple[Any, Any]:
    """``(memories, outputs)`` of a network's result: the one output, or a tuple of several."""
    return result[0], result[1] if len(result) == 2 else tuple(result[1:])


def memory_init(network: Any) -> tuple[Callable[[int], Any], Callable[[jax.Array, Any], Any]]:
    """``(initial_memory, init_params)`` of a recurrent network (with ``memory`` and
    ``memory_size`` attributes): ``initial_memory(n)`` zeros for ``n`` envs
    (:func:`~rljax.core.networks.initial_memory`) and ``init_params(key, obs [1, ...])`` the
    network's params, traced on one step of one env."""
    def initial(n: int) -> Any:
        if hasattr(network, "initial"):  # a network whose memory has more parts (a critic's memory too)
            return network.initial(n)
        return initial_memory(network.memory, network.memory_size, n)

    def init_params(key: jax.Array, obs: Any) -> Any:
        return network.init(key, initial(1), jax.tree.map(lambda x: x[None], obs), jnp.zeros((1, 1), jnp.bool_))

    return initial, init_params


def memory_step(apply: Callable[..., tuple], params: Any, memory: Any, obs: Any) -> tuple[Any, Any]:
    """One step of a recurrent network for a batch: ``(memory [B, H], outputs [B])``; the memory
    given is used as it is (the caller resets it at episode starts)."""
    batch = jax.tree.leaves(obs)[0].shape[0]
    memories, outputs = _outputs(apply(params, memory, jax.tree.map(lambda x: x[None], obs),
                                       jnp.zeros((1, batch), jnp.bool_)))
    return jax.tree.map(lambda x: x[0], memories), jax.tree.map(lambda x: x[0], outputs)


def rollout_resets(traj: Transition) -> jax.Array:
    """bool ``[T, B]``: True where ``traj.obs[t]`` starts an episode inside the rollout (the
    previous step ended one, terminated or truncated: acting resets the memory after either);
    False at ``t = 0``, whose recorded memory is already reset."""
    done = traj.terminated | traj.truncated
    return jnp.concatenate([jnp.zeros_like(done[:1]), done[:-1]], axis=0)


def replay(apply: Callable[..., tuple], params: Any, traj: Transition) -> tuple[Any, Any]:
    """The rollout ``traj`` (``[T, B]``) run again from the memory recorded at its first step:
    ``(memories, outputs)``, each with leading ``[T, B]``."""
    return _outputs(apply(params, jax.tree.map(lambda m: m[0], traj.memory), traj.obs, rollout_resets(traj)))


def bootstrap_outputs(apply: Callable[..., tuple], params: Any, memories: Any, next_obs: Any) -> Any:
    """The outputs for each step's true next observation ``next_obs[t]`` from the memory after
    step ``t`` (``memories[t]``, not reset): one batched step over all ``T * B`` of them, outputs
    ``[T, B]``."""
    t, b = jax.tree.leaves(next_obs)[0].shape[:2]
    flat = lambda x: x.reshape((t * b,) + x.shape[2:])  # noqa: E731
    _, outputs = memory_step(apply, params, jax.tree.map(flat, memories), jax.tree.map(flat, next_obs))
    return jax.tree.map(lambda x: x.reshape((t, b) + x.shape[1:]), outputs)


def sequence_length(config: Any) -> int:
    """``L``: the config's ``bptt_length``, or its ``num_steps`` when that is 0."""
    return config.bptt_length or config.num_steps


def to_sequences(x: jax.Array, length: int) -> jax.Array:
    """A rollout array ``[T, B, ...]`` as ``B * T / L`` sequences ``[S, L, ...]`` (``S`` ordered
    by time window, then env)."""
    t, b = x.shape[:2]
    x = x.reshape((t // length, length, b) + x.shape[2:])
    return jnp.swapaxes(x, 1, 2).reshape((t // length * b, length) + x.shape[3:])


def sequences(traj: Transition, length: int) -> Sequences:
    """The observations of ``traj`` (``[T, B]``) as :class:`Sequences` of ``length`` steps, each
    starting from the memory recorded at its first step."""
    t, b = traj.terminated.shape
    starts = jax.tree.map(lambda m: m[::length].reshape((t // length * b,) + m.shape[2:]), traj.memory)
    return Sequences(jax.tree.map(lambda x: to_sequences(x, length), traj.obs),
                     to_sequences(rollout_resets(traj), length), starts)


def sequence_apply(apply: Callable[..., tuple]) -> Callable[[Any, Sequences], Any]:
    """``fn(params, Sequences [S, L]) -> outputs`` with batch shape ``[S, L]``: the network run over
    each sequence from its memory (time-major inside)."""
    def fn(params: Any, seqs: Sequences) -> Any:
        swap = lambda x: jnp.swapaxes(x, 0, 1)  # noqa: E731
        _, outputs = _outputs(apply(params, seqs.memory, jax.tree.map(swap, seqs.obs), swap(seqs.reset)))
        return jax.tree.map(swap, outputs)
    return fn
