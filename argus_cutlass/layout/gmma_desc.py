"""The 64-bit GMMA shared-memory matrix descriptor, encoded from a layout and decoded to bytes.

A ``wgmma.mma_async`` SS operand is passed as a matrix descriptor, not as a layout (PTX ISA
9.7.15.5.1, "Matrix Descriptor Format"). The fields are:

======================  =======  ======================================================
field                   bits     meaning
======================  =======  ======================================================
start address           0-13     smem byte address >> 4
leading byte offset     16-29    LBO >> 4
stride byte offset      32-45    SBO >> 4
base offset             49-51    0 when the buffer is aligned to the swizzle period
layout type             62-63    0 interleave (no swizzle), 1 SW128, 2 SW64, 3 SW32
======================  =======  ======================================================

In 16-byte units (``T = 16 / elem_bytes`` elements per unit, ``W`` units per swizzle row:
8 for SW128, 4 for SW64, 2 for SW32, 1 for interleave), the canonical layouts the hardware
reads are:

* K-major: ``((8, m), (T, 2))`` with strides ``((W T, SBO), (1, T))`` for swizzled types,
  and ``((T, SBO), (1, LBO))`` for interleave.
* MN-major, swizzled: ``((T, W, m), (8, k))`` with strides ``((1, T, LBO), (W T, SBO))``.
* MN-major, interleave: ``((T, 1, m), (8, k))`` with strides ``((1, T, SBO), (T, LBO))``.

The swizzle ``Swizzle<log2 W, 4, 3>`` then applies to the absolute byte address. These are
the forms CuTe documents and encodes in ``make_gmma_desc``
(``cute/atom/mma_traits_sm90_gmma.hpp``).

:func:`encode` derives the descriptor of one wgmma's operand sub-tile from the unswizzled
layout the model reads through. It raises :class:`DescriptorError` when that sub-tile is
not canonical, which is where CuTe fails a ``static_assert``. :func:`decode_bytes` is the
hardware side: descriptor + (mn, k) -> byte address. The verifier rule
``gmma.descriptor`` (``argus_cutlass.verify.absint.check_descriptors``) checks that decoding
the encoded descriptor gives back the model's read address for every slot. So the
descriptor the hardware consumes is exactly the layout G1 and G5 reason about.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from argus_cutlass.layout.algebra import eval_layout
from argus_cutlass.layout.swizzle import apply_swizzle

__all__ = ["DescriptorError", "GmmaDescriptor", "decode_bytes", "encode"]

#: descriptor layout-type field by swizzle width in bytes (16 = interleave, no swizzle)
_WIDTH = {0: 1, 1: 8, 2: 4, 3: 2}  # 16-byte units per swizzle row, by layout type


class DescriptorError(ValueError):
    """The layout cannot be expressed as a GMMA descriptor (not a canonical GMMA layout)."""


@dataclass(frozen=True)
class GmmaDescriptor:
    """Fields of one matrix descriptor; offsets in 16-byte units (the 4 LSBs dropped).

    >>> d = GmmaDescriptor(start=64, lbo=1, sbo=64, base_offset=0, layout_type=1)
    >>> hex(d.bits())
    '0x4000004000010040'
    >>> GmmaDescriptor.from_bits(d.bits()) == d
    True
    """

    start: int
    lbo: int
    sbo: int
    base_offset: int
    layout_type: int

    def bits(self) -> int:
        """The 64-bit value (PTX ISA 9.7.15.5.1). Raises ``DescriptorError`` on field overflow."""
        for name, value, width in (("start", self.start, 14), ("lbo", self.lbo, 14), ("sbo", self.sbo, 14),
                                   ("base_offset", self.base_offset, 3), ("layout_type", self.layout_type, 2)):
            if not 0 <= value < (1 << width):
                raise DescriptorError(f"descriptor field {name}={value} does not fit {width} bits")
        return (self.start | self.lbo << 16 | self.sbo << 32 | self.base_offset << 49
                | self.layout_type << 62)

    @classmethod
    def from_bits(cls, value: int) -> GmmaDescriptor:
        return cls(value & 0x3FFF, (value >> 16) & 0x3FFF, (value >> 32) & 0x3FFF, (value >> 49) & 0x7,
                   (value >> 62) & 0x3)


def _canonical_offsets(desc: GmmaDescriptor, major: str, elem_bytes: int, mn: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Unswizzled byte offset from the start address of element (mn, k) in the canonical layout."""
    t = 16 // elem_bytes
    w = _WIDTH[desc.layout_type]
    interleave = desc.layout_type == 0
    if major == "K":
        g, r = np.divmod(mn, 8)
        c, e = np.divmod(k, t)
        units = g * desc.sbo + r * w + c * (desc.lbo if interleave else 1)
    else:
        q, e = np.divmod(mn, t)
        r8, kg = k % 8, k // 8
        if interleave:
            units = q * desc.sbo + r8 + kg * desc.lbo
        else:
            a, u = np.divmod(q, w)
            units = u + a * desc.lbo + r8 * w + kg * desc.sbo
    return 16 * units + elem_bytes * e


def decode_bytes(desc: GmmaDescriptor, major: str, elem_bytes: int, mn, k):  # noqa: ANN001, ANN201
    """Absolute smem byte address the hardware reads for operand element (mn, k) of one wgmma.

    ``mn`` and ``k`` are relative to the sub-tile (ints or numpy arrays). The swizzle
    ``Swizzle<log2 W, 4, 3>`` is applied to the absolute address, which is 16 * start plus
    the canonical offset (PTX ISA 9.7.15.5.1).
    """
    mn, k = np.asarray(mn, dtype=np.int64), np.asarray(k, dtype=np.int64)
    addr = 16 * desc.start + _canonical_offsets(desc, major, elem_bytes, mn, k)
    bits = {0: 0, 1: 3, 2: 2, 3: 1}[desc.layout_type]
    return apply_swizzle(bits, 4, 3, addr)


def encode(layout, swizzle_bits: int, major: str, elem_bytes: int, base_bytes: int,  # noqa: ANN001
           mn0: int, k0: int, stage: int, op_mn: int, op_k: int) -> GmmaDescriptor:
    """The descriptor of the (op_mn x op_k) sub-tile at (mn0, k0) of ``stage``.

    Args:
        layout: the *unswizzled* (MN, K, stage) -> element-offset layout of the read.
        swizzle_bits: ``B`` of the read's swizzle (3 SW128, 2 SW64, 1 SW32, 0 interleave).
        major: ``"K"`` or ``"MN"``; elem_bytes: 2 for 16-bit types.
        base_bytes: smem byte address of the buffer's element 0.

    Raises:
        DescriptorError: the sub-tile's layout is not canonical for its major/swizzle (the
            rows, 16-byte units or groups do not have the strides the descriptor can express),
            or the start address is not 16-byte aligned.
    """
    t = 16 // elem_bytes
    layout_type = {3: 1, 2: 2, 1: 3, 0: 0}[swizzle_bits]
    w = _WIDTH[layout_type]

    def off(dm: int, dk: int) -> int:
        return int(eval_layout(layout, mn0 + dm, k0 + dk, stage))

    origin = base_bytes + elem_bytes * off(0, 0)
    if origin % 16:
        raise DescriptorError(f"start address {origin} is not 16-byte aligned")

    def units(dm: int, dk: int) -> int:
        return (off(dm, dk) - off(0, 0)) * elem_bytes // 16

    interleave = layout_type == 0
    if major == "K":
        sbo = units(8, 0) if op_mn > 8 else 0
        lbo = units(0, t) if interleave else 1
    else:
        if interleave:
            sbo = units(t, 0) if op_mn > t else 0
            lbo = units(0, 8) if op_k > 8 else 0
        else:
            lbo = units(t * w, 0) if op_mn > t * w else 0
            sbo = units(0, 8) if op_k > 8 else 0
    desc = GmmaDescriptor(origin >> 4, lbo, sbo, 0, layout_type)
    # canonical check: the descriptor's canonical layout reproduces every element's offset
    mn, k = np.meshgrid(np.arange(op_mn), np.arange(op_k), indexing="ij")
    want = elem_bytes * (np.asarray(eval_layout(layout, mn0 + mn, k0 + k, stage), dtype=np.int64) - off(0, 0))
    got = _canonical_offsets(desc, major, elem_bytes, mn, k)
    bad = np.argwhere(want != got)
    if bad.size:
        i, j = (int(x) for x in bad[0])
        raise DescriptorError(
            f"{major}-major {op_mn}x{op_k} sub-tile at (mn={mn0}, k={k0}, stage={stage}) is not a canonical "
            f"{'interleave' if interleave else f'SW{16 * w}'} GMMA layout: element ({i}, {j}) sits at byte "
            f"{int(want[i, j])} from the start, the descriptor (LBO={lbo}, SBO={sbo}) would read byte "
            f"{int(got[i, j])}")
    return desc


@dataclass(frozen=True)
class DescriptorPlan:
    """How a kernel forms every wgmma descriptor of one SS operand read: one base descriptor
    (layout type, LBO, SBO; start address 0) plus a start-address advance in bytes per stage,
    per warpgroup along MN and per 64-row repetition, and one start offset per k-block (a K-major
    tile wider than its swizzle atom jumps to the next atom column). The generated mainloop (GEMM and
    attention) forms the base with start address ``((smem_base + buffer_base) >> 4) & 0x3FFF`` and adds
    ``uint32(s * stage + w * wg + r * rep + kb_offsets[kb]) >> 4`` to its low 32-bit word (``desc_add``;
    PTX ISA 9.7.15.5.1: the start address field holds bits 4..17 of the smem address).

    :func:`descriptor_plan` derives it from the read's view; :func:`plan_descriptor` rebuilds
    the descriptor of one (stage, warpgroup, repetition, k-block), which the verifier decodes
    against the model's read addresses (rule ``gmma.descriptor``).
    """

    layout_type: int
    lbo: int
    sbo: int
    stage_bytes: int
    wg_bytes: int
    rep_bytes: int
    kb_offsets: tuple[int, ...]

    @property
    def bits(self) -> int:
        """The 64-bit base descriptor (start address 0)."""
        return GmmaDescriptor(0, self.lbo, self.sbo, 0, self.layout_type).bits()


def descriptor_plan(read, atoms_m: int = 1, reps_m: int = 1) -> DescriptorPlan:  # noqa: ANN001 - MmaRead
    """The :class:`DescriptorPlan` of an SS read (``MmaRead`` with a smem view).

    The sub-tile of one wgmma is ``op.m x op.k`` for A and ``op.n x op.k`` for B; warpgroup ``w``
    and repetition ``r`` start at MN row ``op.m * (r * atoms_m + w)`` (A only).

    Raises:
        DescriptorError: the view's sub-tile is not a canonical GMMA layout.
    """
    view = read.view
    inner = view.layout.layout
    swz = view.layout.swizzle
    eb = view.atom.elem_bits // 8
    op_mn = read.op.m if read.operand == "A" else read.op.n
    base = encode(inner, swz.bits, view.atom.major, eb, 0, 0, 0, 0, op_mn, read.op.k)

    def off(mn: int, k: int, s: int) -> int:
        return int(eval_layout(inner, mn, k, s)) * eb

    stages = view.shape[2]
    stage = off(0, 0, 1) if stages > 1 else 0
    wg = off(read.op.m, 0, 0) if read.operand == "A" and atoms_m > 1 else 0
    rep = off(read.op.m * atoms_m, 0, 0) if read.operand == "A" and reps_m > 1 else 0
    kbs = tuple(off(0, kb * read.op.k, 0) for kb in range(view.shape[1] // read.op.k))
    return DescriptorPlan(base.layout_type, base.lbo, base.sbo, stage, wg, rep, kbs)


def plan_descriptor(plan: DescriptorPlan, base_bytes: int, stage: int, wg: int, rep: int, kb: int) -> GmmaDescriptor:
    """The descriptor the generated kernel forms for (stage, warpgroup, repetition, k-block) of a
    buffer at smem byte ``base_bytes``."""
    start = base_bytes + stage * plan.stage_bytes + wg * plan.wg_bytes + rep * plan.rep_bytes + plan.kb_offsets[kb]
    return GmmaDescriptor(start >> 4, plan.lbo, plan.sbo, 0, plan.layout_type)
