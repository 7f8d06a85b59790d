"""What the export tests share: whether the ONNX extra is installed, and the loaders of ``docs/export.md``
as the documentation writes them."""

from __future__ import annotations

import importlib.util
import pathlib
import re

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "export.md"

HAS_ONNX = all(importlib.util.find_spec(m) is not None for m in ("jax2onnx", "onnxruntime"))


def doc_code(heading: str) -> str:
    """The first python block under ``heading`` in docs/export.md."""
    text = DOC.read_text()
    section = text[text.index(heading):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)
