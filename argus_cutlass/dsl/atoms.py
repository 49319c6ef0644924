"""Hardware atoms of the DSL: GMMA shared-memory layout atoms, GMMA MMA ops,
tiled MMAs and TMA copy ops.

Each atom is a frozen value that (a) the verifier reads as a model of the
hardware (its layout, swizzle and sizes) and (b) the renderer prints as the
exact CuTe C++ type the emitted ``.cu`` instantiates. Both sides read the same
object, so the checked program and the compiled program cannot disagree.

Sources: CuTe ``cute/atom/mma_traits_sm90_gmma.hpp`` (``GMMA::Layout_*_Atom``),
``cute/arch/mma_sm90_gmma.hpp`` (``SM90_64xNx16_F32BF16BF16_SS``), PTX ISA 8.x
sections 9.7.15 (wgmma) and 5.5 (tensor map / TMA swizzle modes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Major = Literal["K", "MN"]

#: swizzle mode (bytes of one swizzled row) -> CuTe atom suffix
_SWIZZLE_NAME = {128: "SW128", 64: "SW64", 32: "SW32", 16: "INTER"}
#: swizzle mode -> Swizzle<B,M,S> over *byte* addresses (M=4: 16-byte chunks)
_SWIZZLE_BYTES_BMS = {128: (3, 4, 3), 64: (2, 4, 3), 32: (1, 4, 3), 16: (0, 4, 3)}

CPP_TYPE = {"bf16": "cutlass::bfloat16_t", "fp16": "cutlass::half_t", "fp32": "float"}
_GMMA_TYPE = {"bf16": "BF16", "fp16": "F16"}


def _log2(x: int) -> int:
    return x.bit_length() - 1


@dataclass(frozen=True)
class Swizzle:
    """CuTe ``Swizzle<B,M,S>``: ``x ^ ((x >> S) & (((1 << B) - 1) << M))``.

    Acts on an integer offset (elements or bytes, as documented by the owner).
    Source: ``cute/swizzle.hpp``.
    """

    bits: int
    base: int
    shift: int

    def __call__(self, offset):  # works on ints and numpy integer arrays
        if self.bits == 0:
            return offset
        mask = ((1 << self.bits) - 1) << (self.base + self.shift)
        return offset ^ ((offset & mask) >> self.shift)

    def cpp(self) -> str:
        return f"cute::Swizzle<{self.bits},{self.base},{self.shift}>"


@dataclass(frozen=True)
class GmmaSmemAtom:
    """A GMMA-compatible shared-memory layout atom (one swizzle period).

    Shape in elements ``(rows_mn, cols_k)``:
      * K-major:  ``(8, swizzle_bytes / elem_bytes)`` with K contiguous.
      * MN-major: ``(swizzle_bytes / elem_bytes, 8)`` with MN contiguous.

    The swizzle acts on byte addresses inside 1024-byte-aligned blocks
    (PTX ISA "Shared memory matrix layout"; TMA ``CU_TENSOR_MAP_SWIZZLE_*B``).
    """

    major: Major
    swizzle_bytes: int  # 128, 64, 32, or 16 (= no swizzle, "interleave")
    elem_bits: int

    def __post_init__(self) -> None:
        """Refuse an atom CuTe does not have (``cute/atom/mma_traits_sm90_gmma.hpp`` defines
        ``GMMA::Layout_{K,MN}_{INTER,SW32,SW64,SW128}_Atom`` only): the printed name would not compile.

        Raises:
            argus_cutlass.errors.DslError: ``smem.atom``.
        """
        from argus_cutlass.errors import DslError

        if self.major not in ("K", "MN") or self.swizzle_bytes not in _SWIZZLE_NAME or self.elem_bits not in (8, 16, 32):
            raise DslError("smem.atom", f"GmmaSmemAtom(major={self.major!r}, swizzle_bytes={self.swizzle_bytes!r}, "
                           f"elem_bits={self.elem_bits!r}): CuTe's GMMA smem atoms are K- or MN-major, "
                           "swizzle 16 / 32 / 64 / 128 bytes, over 8-, 16- or 32-bit elements")

    @property
    def name(self) -> str:
        return f"Layout_{self.major}_{_SWIZZLE_NAME[self.swizzle_bytes]}_Atom"

    @property
    def contiguous_elems(self) -> int:
        return self.swizzle_bytes * 8 // self.elem_bits

    @property
    def shape_mn_k(self) -> tuple[int, int]:
        """(MN, K) extent of the atom in elements."""
        if self.major == "K":
            return (8, self.contiguous_elems)
        return (self.contiguous_elems, 8)

    @property
    def byte_swizzle(self) -> Swizzle:
        return Swizzle(*_SWIZZLE_BYTES_BMS[self.swizzle_bytes])

    @property
    def element_swizzle(self) -> Swizzle:
        """The same swizzle expressed on element offsets (e.g. Swizzle<3,3,3> for SW128 bf16)."""
        b, m, s = _SWIZZLE_BYTES_BMS[self.swizzle_bytes]
        return Swizzle(b, m - _log2(self.elem_bits // 8), s)

    def cpp(self, element: str) -> str:
        return f"cute::GMMA::{self.name}<{CPP_TYPE[element]}>"


def select_smem_atom(major: Major, elem_bits: int, mn_extent: int, k_extent: int) -> GmmaSmemAtom:
    """The widest swizzle atom that tiles the operand tile.

    Mirrors the documented rule of CUTLASS's ``ss_smem_selector``: prefer SW128,
    then SW64, SW32, INTER, taking the first whose contiguous extent divides the
    tile's contiguous extent (K for K-major, MN for MN-major).

    Raises:
        ValueError: no atom divides the tile (contiguous extent not a multiple of
            16 bytes).
    """
    extent = k_extent if major == "K" else mn_extent
    for sw in (128, 64, 32, 16):
        atom = GmmaSmemAtom(major, sw, elem_bits)
        if extent % atom.contiguous_elems == 0:
            return atom
    raise ValueError(
        f"no GMMA smem atom tiles a {major}-major extent of {extent} elements "
        f"({extent * elem_bits // 8} bytes is not a multiple of 16)"
    )


#: wgmma N that CuTe declares by default (``cute/arch/mma_sm90_gmma.hpp`` and its traits); every other
#: multiple of 8 lives in ``mma_sm90_gmma_ext.hpp`` / ``mma_traits_sm90_gmma_ext.hpp`` behind
#: ``CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED`` (CUTLASS 4.2). Defining that macro costs about 13 s of a
#: 22 s nvcc compile (the extended traits through ``cute/tensor.hpp``: cudafe++ 8 s, cicc 4 s, host gcc
#: 1 s; measured 2026-12-01 on 2 cores), so a kernel that needs an extended N includes only the arch
#: header and names the op by :meth:`GmmaOp.arch_cpp`.
GMMA_BASE_N = (8, 16, 32, 64, 96, 128, 192, 256)


@dataclass(frozen=True)
class GmmaOp:
    """One SM90 warpgroup MMA, ``wgmma.mma_async`` shape ``m x n x k`` (m = 64).

    ``mode`` ``SS``: both operands come from shared memory through descriptors; ``RS``: A comes
    from registers (K-major only). The accumulator is ``acc_dtype`` (fp32) in registers.
    PTX ISA 9.7.15.5: N is a multiple of 8 in [8, 256] and K is 16 for 16-bit inputs;
    CuTe ``cute/arch/mma_sm90_gmma.hpp`` names the op ``SM90_64xNx16_F32BF16BF16_SS<MajorA, MajorB>``.
    """

    m: int
    n: int
    k: int
    dtype: str
    a_major: Major
    b_major: Major
    acc_dtype: str = "fp32"
    mode: str = "SS"

    def cpp(self) -> str:
        t = _GMMA_TYPE.get(self.dtype, self.dtype.upper())
        acc = {"fp32": "F32", "fp16": "F16"}.get(self.acc_dtype, self.acc_dtype.upper())
        majors = (f"cute::GMMA::Major::{self.b_major}>" if self.mode == "RS"
                  else f"cute::GMMA::Major::{self.a_major}, cute::GMMA::Major::{self.b_major}>")
        if self.mode == "RS":
            majors = f"cute::GMMA::Major::{self.a_major}, " + majors
        return f"cute::SM90_{self.m}x{self.n}x{self.k}_{acc}{t}{t}_{self.mode}<{majors}"

    def arch_cpp(self) -> str:
        """The op's CuTe arch struct (``cute::SM90::GMMA::MMA_64xNx16_...``, the type :meth:`cpp`'s
        alias names; same template arguments): a kernel that calls only its ``fma`` needs just
        ``cute/arch/mma_sm90_gmma.hpp`` (``..._ext.hpp`` for an :attr:`extended_shape`), not the traits.

        >>> GmmaOp(64, 80, 16, "bf16", "K", "K").arch_cpp()
        'cute::SM90::GMMA::MMA_64x80x16_F32BF16BF16_SS<cute::GMMA::Major::K, cute::GMMA::Major::K>'
        """
        return self.cpp().replace("cute::SM90_", "cute::SM90::GMMA::MMA_", 1)

    def kernel_cpp(self) -> str:
        """The type a kernel names the op by: CuTe's alias (:meth:`cpp`) where ``cute/atom/mma_traits_sm90_gmma.hpp``
        declares it, else the arch struct (:meth:`arch_cpp`), declared by ``cute/arch/mma_sm90_gmma_ext.hpp``, which a
        kernel with an :attr:`extended_shape` op includes (the alias of an extended N is in the traits ext header only).

        >>> GmmaOp(64, 112, 16, "bf16", "K", "K").kernel_cpp().startswith("cute::SM90::GMMA::MMA_64x112x16")
        True
        >>> GmmaOp(64, 128, 16, "bf16", "K", "K").kernel_cpp().startswith("cute::SM90_64x128x16")
        True
        """
        return self.arch_cpp() if self.extended_shape else self.cpp()

    @property
    def extended_shape(self) -> bool:
        """True when CuTe declares this N only with ``CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED``
        (N not in :data:`GMMA_BASE_N`, e.g. 80 or 176).

        >>> GmmaOp(64, 176, 16, "bf16", "K", "K").extended_shape, GmmaOp(64, 128, 16, "bf16", "K", "K").extended_shape
        (True, False)
        """
        return self.n not in GMMA_BASE_N


@dataclass(frozen=True)
class TiledMma:
    """``make_tiled_mma(op, Layout<Shape<atoms_m, atoms_n, 1>>)``: warpgroups tiled over M/N."""

    op: GmmaOp
    atoms_m: int
    atoms_n: int

    @property
    def threads(self) -> int:
        return 128 * self.atoms_m * self.atoms_n

    @property
    def shape_mnk(self) -> tuple[int, int, int]:
        return (self.op.m * self.atoms_m, self.op.n * self.atoms_n, self.op.k)

    def cpp(self) -> str:
        return (
            f"decltype(cute::make_tiled_mma({self.op.cpp()}{{}}, "
            f"cute::Layout<cute::Shape<cute::_{self.atoms_m},cute::_{self.atoms_n},cute::_1>>{{}}))"
        )


TmaKind = Literal["load", "load_multicast", "store"]


@dataclass(frozen=True)
class TmaCopy:
    """A TMA (``cp.async.bulk.tensor``) copy op: load, multicast load, or store.

    ``box`` is the box extent in elements, innermost (contiguous) dimension first,
    as passed to ``cuTensorMapEncodeTiled``; ``multicast`` is the number of CTAs in
    the cluster that receive each box (1 for a plain load).
    Source: PTX ISA 9.7.9.25 (cp.async.bulk.tensor), CUDA driver API tensor maps.
    """

    kind: TmaKind
    box: tuple[int, ...]
    elem_bits: int
    swizzle_bytes: int
    multicast: int = 1
    #: L2 promotion of the tensor map (bytes; CuTe's make_tma_copy uses 128)
    l2_promotion: int = 128

    def cpp(self) -> str:
        return {
            "load": "cute::SM90_TMA_LOAD",
            "load_multicast": "cute::SM90_TMA_LOAD_MULTICAST",
            "store": "cute::SM90_TMA_STORE",
        }[self.kind]

    @property
    def box_bytes(self) -> int:
        n = 1
        for b in self.box:
            n *= b
        return n * self.elem_bits // 8
