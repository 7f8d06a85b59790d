"""Test-session settings.

A persistent XLA compilation cache shared by the whole session (and its subprocesses): many tests
train the same small programs several times (an uninterrupted run, an interrupted one, its resume),
and compiling dominates their time on a 2-core machine. Recompilation tests count backend compiles
during chunks, which a cache hit does not hide (a hit is not a compile).
"""

import os
import tempfile

import jax

_CACHE = os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", tempfile.mkdtemp(prefix="rljax-test-xla-"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
jax.config.update("jax_compilation_cache_dir", _CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
