"""Pure CuTe layout algebra (pycute plus tile_to_shape, swizzled layouts, GMMA layouts).

No GPU, no solver. Coordinates and offsets are integers (numpy arrays where noted).
"""

from __future__ import annotations

from argus_cutlass.layout.algebra import (
    Layout,
    LayoutError,
    coalesce,
    complement,
    composition,
    cosize,
    crd2idx,
    eval_layout,
    flatten,
    idx2crd,
    layout_image,
    left_inverse,
    logical_divide,
    logical_product,
    make_layout,
    make_ordered_layout,
    right_inverse,
    size,
    tile_to_shape,
    tiled_divide,
    zipped_divide,
)
from argus_cutlass.layout.gmma import atom_layout, gmma_c_layout, smem_layout
from argus_cutlass.layout.swizzle import SwizzledLayout, apply_swizzle

__all__ = [
    "Layout", "LayoutError", "SwizzledLayout", "apply_swizzle", "atom_layout", "coalesce",
    "complement", "composition", "cosize", "crd2idx", "eval_layout", "flatten", "gmma_c_layout",
    "idx2crd", "layout_image", "left_inverse", "logical_divide", "logical_product", "make_layout",
    "make_ordered_layout", "right_inverse", "size", "smem_layout", "tile_to_shape", "tiled_divide",
    "zipped_divide",
]
