"""Register fragments of the SM90 warpgroup MMA and the quad shuffle, written once.

Every function takes ints or numpy integer arrays (elementwise) and returns the same kind.

* **Accumulator (D) fragment** of ``wgmma.mma_async.m64nNk16`` with an fp32 accumulator: thread
  ``t`` (0..127 of the warpgroup) holds ``N / 2`` registers; register ``i`` holds element
  ``(row, col)`` of the 64 x N tile with

  ``row = 16 * (t // 32) + (t % 32) // 4 + 8 * ((i // 2) % 2)``,
  ``col = 8 * (i // 4) + 2 * (t % 4) + i % 2``.

  Source: CuTe ``cute/atom/mma_traits_sm90_gmma.hpp`` ``CLayout_64xN = ((4,8,4),(2,2,N/8)) :
  ((128,1,16),(64,8,512))`` (a (thread, value) -> column-major ``row + 64 * col`` map), PTX ISA
  9.7.15.4 (wgmma D matrix fragment).

* **A register fragment** of ``wgmma.mma_async.m64nNk16`` with 16-bit A in registers (RS mode):
  thread ``t`` holds 8 values (4 registers of two packed 16-bit values); value ``v`` is element
  ``(row, k)`` of the 64 x 16 A tile with

  ``row = 16 * (t // 32) + (t % 32) // 4 + 8 * ((v // 2) % 2)``,
  ``k = 8 * (v // 4) + 2 * (t % 4) + v % 2``.

  Source: CuTe ``cute/atom/mma_traits_sm90_gmma.hpp`` ``ALayout_64x16 = ((4,8,4),(2,2,2)) :
  ((128,1,16),(64,8,512))`` ("Register source layout for 16-bit value types", used as the
  ``ALayout`` of every ``SM90_64xNx16_*_RS`` op), PTX ISA 9.7.15.5.2. It is ``CLayout_64x16``:
  the accumulator of 16 columns and the A fragment of one k-block put the same (row, column) in
  the same thread and value slot, which is what makes FA3's P = convert(S) a register-local
  repack (accumulator values ``8j .. 8j+7`` -> A values ``0..7`` of k-block ``j``).

* **Quad rows**: lanes ``4q .. 4q+3`` of a warp hold the accumulator rows ``q`` and ``q + 8`` of
  the warp's 16 rows; ``shfl.sync.bfly`` by lane mask ``m`` exchanges lane ``l`` with
  ``l ^ m`` (PTX ISA 9.7.9.6 ``shfl.sync``, mode ``.bfly``).
"""

from __future__ import annotations

from typing import Any

#: threads of one warpgroup (the MMA's thread set)
WARPGROUP_THREADS = 128
#: lanes per warp
WARP_LANES = 32
#: A-fragment values per thread for one m64k16 k-block of 16-bit elements
A_FRAG_VALUES = 8
#: rows of one wgmma atom (M)
ATOM_M = 64
#: K of one 16-bit wgmma (columns of an A k-block)
ATOM_K16 = 16

#: CuTe's layouts, as (shape, stride) pairs (for cross-checks against the closed forms)
CUTE_ALAYOUT_64X16 = (((4, 8, 4), (2, 2, 2)), ((128, 1, 16), (64, 8, 512)))


def cute_clayout_64xn(n: int) -> tuple[tuple, tuple]:
    """CuTe ``CLayout_64xN`` as a (shape, stride) pair."""
    return (((4, 8, 4), (2, 2, n // 8)), ((128, 1, 16), (64, 8, 512)))


def acc_regs(n: int) -> int:
    """fp32 accumulator registers per thread of a 64 x ``n`` wgmma tile."""
    return n // 2


def acc_coord(t: Any, i: Any) -> tuple[Any, Any]:
    """(row, col) in the 64 x N accumulator tile of register ``i`` of warpgroup thread ``t``."""
    row = 16 * (t // 32) + (t % 32) // 4 + 8 * ((i // 2) % 2)
    col = 8 * (i // 4) + 2 * (t % 4) + i % 2
    return row, col


def a_frag_coord(t: Any, v: Any) -> tuple[Any, Any]:
    """(row, k) in the 64 x 16 A tile of value ``v`` (0..7) of warpgroup thread ``t`` (RS mode,
    16-bit A; register ``v // 2`` holds values ``v`` and ``v ^ 1`` packed)."""
    row = 16 * (t // 32) + (t % 32) // 4 + 8 * ((v // 2) % 2)
    k = 8 * (v // 4) + 2 * (t % 4) + v % 2
    return row, k


def acc_row_half(i: Any) -> Any:
    """Which of the thread's two rows (0: ``q``, 1: ``q + 8``) accumulator register ``i`` holds."""
    return (i // 2) % 2


def shfl_bfly(lane: Any, mask: int) -> Any:
    """Source lane of ``shfl.sync.bfly`` with lane mask ``mask`` (``mask`` in 1..31)."""
    return lane ^ mask
