"""Deterministic mode: bit-identical reruns and resumes on every backend, at a cost where there is one.

XLA's GPU kernels may differ from process to process (autotuning picks) and from run to run (atomic
scatter-adds); the CPU backend is deterministic as it is. The ``deterministic`` run option
(``--deterministic auto|on|off``) asks for XLA's deterministic kernels on a GPU, which can only be
set before JAX starts its backend: the command line applies it at start (:func:`request_deterministic`)
and the manifest records what the run got (:func:`determinism_record`). What each backend
guarantees, and what the mode costs: ``docs/runbook.md``.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["DETERMINISTIC_MODES", "DETERMINISTIC_XLA_FLAGS", "check_deterministic_mode", "deterministic_flags_set",
           "request_deterministic", "determinism_record"]


DETERMINISTIC_MODES = ("auto", "on", "off")
"""The values of the ``deterministic`` run option (``--deterministic``)."""

DETERMINISTIC_XLA_FLAGS = ("--xla_gpu_deterministic_ops=true",)
"""The XLA flags deterministic mode sets: on a GPU, XLA then picks only deterministic kernels
(scatter-adds as sorted segment sums, no atomics) and one autotuning result for every process.
``--xla_gpu_exclude_nondeterministic_ops=true --xla_gpu_autotune_level=0`` is the equivalent older
spelling; :func:`deterministic_flags_set` accepts either. The CPU backend is deterministic without
them (and ignores them)."""


def check_deterministic_mode(mode: Any) -> str:
    """``mode`` if it is one of :data:`DETERMINISTIC_MODES`, else a ``ValueError`` naming them."""
    if mode not in DETERMINISTIC_MODES:
        raise ValueError(f"deterministic={mode!r} is not one of {DETERMINISTIC_MODES} (auto: deterministic where it "
                         f"is free, i.e. on the CPU; on: also on a GPU, at a throughput cost; off: never ask for it)")
    return mode


def _flag_values(xla_flags: str) -> dict[str, str]:
    """``--name=value`` pairs of an ``XLA_FLAGS`` string (a bare ``--name`` is ``"true"``); the last wins."""
    out = {}
    for token in xla_flags.split():
        if token.startswith("--"):
            name, _, value = token[2:].partition("=")
            out[name] = value or "true"
    return out


def deterministic_flags_set(xla_flags: str) -> bool:
    """Whether ``xla_flags`` (an ``XLA_FLAGS`` value) makes GPU programs deterministic: either
    ``--xla_gpu_deterministic_ops=true`` or ``--xla_gpu_exclude_nondeterministic_ops=true`` with
    ``--xla_gpu_autotune_level=0``."""
    flags = _flag_values(xla_flags)
    true = lambda name: flags.get(name, "false").lower() in ("true", "1")  # noqa: E731
    return true("xla_gpu_deterministic_ops") or (
        true("xla_gpu_exclude_nondeterministic_ops") and flags.get("xla_gpu_autotune_level") == "0")


def request_deterministic(mode: str) -> bool:
    """Applies deterministic ``mode`` to this process's XLA flags, which XLA reads once, when JAX
    initialises its backend: the command line calls this before training, as it calls
    :func:`request_cpu_devices`.

    ``"on"`` adds :data:`DETERMINISTIC_XLA_FLAGS` to ``XLA_FLAGS`` (on every platform: the CPU
    ignores them, and which platform JAX will pick is not known before it starts); ``"auto"`` and
    ``"off"`` change nothing (``auto`` is deterministic on the CPU, which needs no flag, and leaves a
    GPU at full speed). Flags already in ``XLA_FLAGS`` are kept.

    Returns:
        Whether the flags were added (False when they were already set or the mode does not ask).

    Raises:
        ValueError: an unknown mode, or ``"on"`` after JAX initialised its backend without the
            flags (they can no longer take effect: start the process with them, e.g. through the
            command line's ``--deterministic on``).
    """
    check_deterministic_mode(mode)
    if mode != "on":
        return False
    current = os.environ.get("XLA_FLAGS", "")
    if deterministic_flags_set(current):
        return False
    from jax._src import xla_bridge

    if xla_bridge.backends_are_initialized():
        import jax

        if jax.default_backend() == "cpu":
            return False  # deterministic already; the flags would change nothing
        raise ValueError(f"deterministic='on' but JAX already initialised its {jax.default_backend()} backend "
                         f"without {' '.join(DETERMINISTIC_XLA_FLAGS)} in XLA_FLAGS, and XLA reads its flags only "
                         f"then; start the process with XLA_FLAGS='{' '.join(DETERMINISTIC_XLA_FLAGS)}' (the "
                         f"command line's --deterministic on does this) or call "
                         f"rljax.runtime.determinism.request_deterministic('on') before anything uses JAX")
    os.environ["XLA_FLAGS"] = " ".join(filter(None, [current, *DETERMINISTIC_XLA_FLAGS]))
    return True


def determinism_record(mode: str) -> dict[str, Any]:
    """What the manifest records about reproducibility: the requested ``mode``, the backend, the
    deterministic XLA flags in effect, and ``deterministic``: whether a rerun or resume of this run
    in another process gives the same bits (same machine and versions).

    Raises:
        ValueError: ``mode`` is ``"on"`` but this process's backend is not deterministic (a GPU
            initialised without the flags; see :func:`request_deterministic`).
    """
    import jax

    check_deterministic_mode(mode)
    backend = jax.default_backend()
    flags = _flag_values(os.environ.get("XLA_FLAGS", ""))
    relevant = [f"--{k}={v}" for k, v in flags.items() if k in ("xla_gpu_deterministic_ops",
                                                                 "xla_gpu_exclude_nondeterministic_ops",
                                                                 "xla_gpu_autotune_level")]
    deterministic = backend == "cpu" or (backend == "gpu" and deterministic_flags_set(os.environ.get("XLA_FLAGS", "")))
    if mode == "on" and not deterministic:
        raise ValueError(f"deterministic='on' but this process's {backend} backend runs without "
                         f"{' '.join(DETERMINISTIC_XLA_FLAGS)} (XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}); "
                         f"XLA reads its flags when JAX starts: use the command line's --deterministic on, or call "
                         f"rljax.runtime.determinism.request_deterministic('on') before anything uses JAX")
    return {"mode": mode, "deterministic": deterministic, "backend": backend, "xla_flags": relevant}
