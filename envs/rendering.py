"""A small drawing surface for the bundled environments' ``render`` methods (host-side, Pillow).

Coordinates are Gymnasium's: pixels from the bottom-left corner, y pointing up, so each ``render``
reads like the Gymnasium renderer it reproduces. Shapes are drawn at ``SUPERSAMPLE`` times the size
and reduced with a box filter, which smooths their edges the way Gymnasium's anti-aliased drawing does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["Canvas", "rotate", "SUPERSAMPLE"]

SUPERSAMPLE = 2
"""Shapes are drawn at this multiple of the output size, then reduced (anti-aliasing)."""


def rotate(points: Sequence[tuple[float, float]], angle: float, offset: tuple[float, float] = (0.0, 0.0)
           ) -> list[tuple[float, float]]:
    """``points`` rotated counter-clockwise by ``angle`` (rad) about the origin, then shifted by ``offset``."""
    c, s = math.cos(angle), math.sin(angle)
    return [(x * c - y * s + offset[0], x * s + y * c + offset[1]) for x, y in points]


class Canvas:
    """A white ``width x height`` RGB picture with y pointing up.

    Args:
        width: output width in pixels.
        height: output height in pixels.
    """

    def __init__(self, width: int, height: int):
        from PIL import Image, ImageDraw

        self.width, self.height = int(width), int(height)
        self._image = Image.new("RGB", (self.width * SUPERSAMPLE, self.height * SUPERSAMPLE), (255, 255, 255))
        self._draw = ImageDraw.Draw(self._image)

    def _xy(self, points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
        k = SUPERSAMPLE
        return [(x * k, (self.height - y) * k) for x, y in points]

    def polygon(self, points: Sequence[tuple[float, float]], color: tuple[int, int, int]) -> None:
        """A filled polygon through ``points`` (pixels, y up)."""
        self._draw.polygon(self._xy(points), fill=color)

    def circle(self, center: tuple[float, float], radius: float, color: tuple[int, int, int]) -> None:
        """A filled disc."""
        (x, y), = self._xy([center])
        r = radius * SUPERSAMPLE
        self._draw.ellipse([x - r, y - r, x + r, y + r], fill=color)

    def line(self, points: Sequence[tuple[float, float]], color: tuple[int, int, int], width: float = 1.0) -> None:
        """A polyline ``width`` pixels wide."""
        self._draw.line(self._xy(points), fill=color, width=max(1, round(width * SUPERSAMPLE)), joint="curve")

    def to_array(self) -> np.ndarray:
        """The picture: uint8 ``[height, width, 3]``."""
        return np.asarray(self._image.reduce(SUPERSAMPLE), dtype=np.uint8)
