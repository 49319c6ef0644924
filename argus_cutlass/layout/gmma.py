"""SM90 GMMA layouts: operand smem buffers and the accumulator TV layout.

Sources: CuTe ``cute/atom/mma_traits_sm90_gmma.hpp`` (``GMMA::Layout_*_Atom``,
``CLayout_64xN``), CUTLASS ``sm90_mma_tma_gmma_ss_warpspecialized.hpp`` (``SmemLayoutA/B =
tile_to_shape(atom, (MN, K, Stages), K-major ? Step<1,2,3> : Step<2,1,3>)``), PTX ISA
9.7.15.5.1 (wgmma smem matrix layouts) and 9.7.15.4 (wgmma D fragment).
"""

from __future__ import annotations

from typing import Any

from argus_cutlass.layout.algebra import Layout, LayoutError, tile_to_shape
from argus_cutlass.layout.swizzle import SwizzledLayout


def atom_layout(atom: Any) -> Layout:
    """Unswizzled element layout of a GMMA smem atom, indexed (MN, K).

    K-major: ``(8, C) : (C, 1)``; MN-major: ``(C, 8) : (1, C)`` with
    ``C = swizzle_bytes / elem_bytes`` (``atom`` is a ``GmmaSmemAtom``).
    """
    c = atom.contiguous_elems
    if atom.major == "K":
        return Layout((8, c), (c, 1))
    return Layout((c, 8), (1, c))


def smem_layout(op: Any, stages: int, atom: Any | None = None) -> SwizzledLayout:
    """The (MN, K, stage) -> element offset function of one GEMM operand buffer.

    ``op`` is an ``OperandPlan`` (``tile_mn``, ``tile_k``, ``smem_atom``, ``major``);
    ``atom`` overrides its smem atom (to model a reader using a different atom).
    Offsets are elements from the buffer base; stage ``s`` starts at
    ``s * tile_mn * tile_k``. K-major atoms repeat along MN first, MN-major along K
    first; stages are outermost. The swizzle is the atom's swizzle on element offsets.

    Raises:
        LayoutError: the tile is not a multiple of the atom.
    """
    atom = op.smem_atom if atom is None else atom
    if stages < 1:
        raise LayoutError(f"smem_layout: stages must be >= 1, got {stages}")
    order = (1, 2, 3) if atom.major == "K" else (2, 1, 3)
    tiled = tile_to_shape(atom_layout(atom), (op.tile_mn, op.tile_k, stages), order)
    return SwizzledLayout(atom.element_swizzle, tiled)


def gmma_c_layout(n: int) -> Layout:
    """CuTe ``CLayout_64xN``: (thread in 128, value in N/2) -> column-major index ``m + 64*n``
    of the 64 x N accumulator tile.

    ``((4,8,4),(2,2,N/8)) : ((128,1,16),(64,8,512))``: lane%4 picks a column pair,
    lane/4 a row, warp a 16-row slice; values step +1 column, +8 rows, +8 columns.

    Raises:
        LayoutError: ``n`` is not a multiple of 8 in [8, 256] (PTX ISA 9.7.15.5).
    """
    if n % 8 or not 8 <= n <= 256:
        raise LayoutError(f"GMMA N={n} is not a multiple of 8 in [8, 256]")
    return Layout(((4, 8, 4), (2, 2, n // 8)), ((128, 1, 16), (64, 8, 512)))


def view_layout(atom: Any, shape: tuple[int, ...], order: tuple[int, ...]) -> SwizzledLayout:
    """CuTe ``tile_to_shape(atom, shape, Step<order...>)`` with the atom's swizzle on element
    offsets: the (mode...) -> element offset function of a :class:`~argus_cutlass.dsl.ir.SmemView`.

    Raises:
        LayoutError: the shape is not a multiple of the atom.
    """
    tiled = tile_to_shape(atom_layout(atom), tuple(shape), tuple(order))
    return SwizzledLayout(atom.element_swizzle, tiled)
