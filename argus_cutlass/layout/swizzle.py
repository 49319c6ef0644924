"""Swizzled layouts as functions: ``offset = swizzle(layout(coord))``.

CuTe writes these as ``ComposedLayout<Swizzle<B,M,S>, _0, Layout>`` (``cute/swizzle_layout.hpp``).
The swizzle is any object with ``bits``, ``base``, ``shift`` and ``__call__`` on
integer offsets, e.g. :class:`argus_cutlass.dsl.atoms.Swizzle` (``cute/swizzle.hpp``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from argus_cutlass.layout.algebra import Layout, cosize, eval_layout, size


def apply_swizzle(bits: int, base: int, shift: int, offset: Any) -> Any:
    """CuTe ``Swizzle<B,M,S>``: ``x ^ ((x & (((1<<B)-1) << (M+S))) >> S)``; ints or numpy arrays."""
    if bits == 0:
        return offset
    mask = ((1 << bits) - 1) << (base + shift)
    return offset ^ ((offset & mask) >> shift)


@dataclass(frozen=True)
class SwizzledLayout:
    """``swizzle o layout``: coordinate -> element offset.

    Attributes:
        swizzle: the swizzle on element offsets (``bits``/``base``/``shift``).
        layout: the unswizzled pycute layout.

    Calls accept ints or numpy integer arrays, like :func:`eval_layout`.
    """

    swizzle: Any
    layout: Layout

    def __call__(self, *coords: Any) -> Any:
        off = eval_layout(self.layout, *coords)
        return apply_swizzle(self.swizzle.bits, self.swizzle.base, self.swizzle.shift, off)

    @property
    def shape(self) -> Any:
        return self.layout.shape

    def size(self) -> int:
        return size(self.layout)

    def cosize(self) -> int:
        """Extent of the offset range; the swizzle permutes inside its period, so it is unchanged
        when the layout's cosize is a multiple of the period ``2**(B+M+S)``."""
        return cosize(self.layout)

    @property
    def period(self) -> int:
        """Offsets per swizzle period (elements): ``2**(B+M+S)`` (1 when B == 0)."""
        if self.swizzle.bits == 0:
            return 1
        return 1 << (self.swizzle.bits + self.swizzle.base + self.swizzle.shift)

    def image(self) -> np.ndarray:
        """All offsets, indexed 0..size-1 colexicographically."""
        return np.asarray(self(np.arange(self.size(), dtype=np.int64)), dtype=np.int64)

    def describe(self) -> str:
        s = self.swizzle
        return f"Swizzle<{s.bits},{s.base},{s.shift}> o {self.layout}"
