"""Benchmark scripts (``python -m benchmarks.NAME``); ``benchmarks/README.md`` lists them."""

from __future__ import annotations

import json
import subprocess
from typing import Any


def json_result(argv: list[str], what: str, *, marker: str = "{", timeout: float = 1200, **kwargs: Any) -> dict:
    """Runs ``argv`` in a fresh process and returns the JSON of its last stdout line starting with
    ``marker`` (the marker stripped unless it is ``{``); raises ``RuntimeError`` naming ``what``, with
    the end of its stderr, when it fails or prints no such line. ``kwargs`` go to ``subprocess.run``."""
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(marker)]
    if proc.returncode or not lines:
        raise RuntimeError(f"{what} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1] if marker == "{" else lines[-1][len(marker):])
