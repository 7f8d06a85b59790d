"""The example environment of ``docs/env_api.md``, executed from the documentation itself."""

from __future__ import annotations

import pathlib
import re

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "env_api.md"


def load_doc_example() -> dict:
    """Executes the python blocks that define and use PointMass; returns their namespace."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    define = next(b for b in blocks if "class PointMass" in b)
    use = next(b for b in blocks if "env = PointMass()" in b)
    namespace: dict = {}
    exec(compile(define, str(DOC), "exec"), namespace)  # noqa: S102 - our own documentation
    exec(compile(use, str(DOC), "exec"), namespace)  # noqa: S102
    return namespace
