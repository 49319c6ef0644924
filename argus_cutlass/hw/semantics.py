"""Hardware semantics, written once against a small ops interface.

Every function here takes an ``ops`` object first and builds its result only through it, so
the same code runs on Python ints / numpy integer arrays (:data:`INT_OPS`, the enumeration
tier) and on z3 bit-vectors (:class:`Z3Ops`, the SMT tier, see :mod:`.smt`). The engines
cannot drift: a change to the swizzle, the TMA box placement, the GMMA read map or the
pipeline state update changes both at once.

Ops: ``add mul sub and_ xor lshr`` on two terms (or a term and an int), ``udiv urem`` by
a positive int constant, ``eq`` / ``ite`` for conditions, ``const``.

Semantics (sources in each docstring):

* :func:`swizzle` -- CuTe ``Swizzle<B,M,S>`` on an integer offset;
* :func:`tma_box_offset` -- TMA tile element (mn, k) of a stage -> element offset in the
  stage buffer (box placement, then the tensor-map swizzle on the absolute byte address);
* :func:`layout_offset` / :func:`gmma_read_offset` -- a CuTe layout (optionally swizzled)
  evaluated on coordinates: the GMMA descriptor's view of an smem operand;
* :func:`pipeline_state` / :func:`pipeline_step` -- CUTLASS ``PipelineState`` (index, phase)
  after ``n`` increments, and one ``operator++``;
* :func:`tma_load_box_coords` / :func:`tma_store_box_coords` -- the tile element each element of
  each TMA box carries, in the order the generated kernel issues the boxes;
* :func:`consumer_counter` -- the consumer's pipeline counter per schedule (cooperative, ping-pong);
* :func:`k_of_slot` -- the global k an MMA slot sums at k-tile ``j``.

>>> swizzle(INT_OPS, 3, 4, 3, 0x80)  # SW128 on bytes: row 1 flips 16-byte chunk 1
144
>>> pipeline_state(INT_OPS, 9, 4, 0)  # 9 increments, 4 stages, phase starts at 0
(1, 0)
"""

from __future__ import annotations

from typing import Any

import numpy as np


class IntOps:
    """Ops on Python ints and numpy integer arrays (unsigned semantics on non-negative values)."""

    name = "enum"

    @staticmethod
    def const(c: int) -> Any:
        return c

    @staticmethod
    def add(a: Any, b: Any) -> Any:
        return a + b

    @staticmethod
    def sub(a: Any, b: Any) -> Any:
        return a - b

    @staticmethod
    def mul(a: Any, b: Any) -> Any:
        return a * b

    @staticmethod
    def and_(a: Any, b: Any) -> Any:
        return a & b

    @staticmethod
    def xor(a: Any, b: Any) -> Any:
        return a ^ b

    @staticmethod
    def lshr(a: Any, s: int) -> Any:
        return a >> s

    @staticmethod
    def udiv(a: Any, c: Any) -> Any:
        return a // c

    @staticmethod
    def urem(a: Any, c: Any) -> Any:
        return a % c

    @staticmethod
    def eq(a: Any, b: Any) -> Any:
        return a == b

    @staticmethod
    def ite(c: Any, a: Any, b: Any) -> Any:
        if isinstance(c, (bool, np.bool_)):
            return a if c else b
        return np.where(c, a, b)


INT_OPS = IntOps()


class Z3Ops:
    """Ops on z3 bit-vectors of ``width`` bits (unsigned: ``UDiv``, ``URem``, ``LShR``, ``ULT``).

    ``z3`` is imported when an instance is made, never at module import.
    """

    name = "smt"

    def __init__(self, width: int) -> None:
        import z3

        self.z3 = z3
        self.width = width

    def _t(self, x: Any) -> Any:
        return self.z3.BitVecVal(int(x), self.width) if isinstance(x, (int, np.integer)) else x

    def const(self, c: int) -> Any:
        return self.z3.BitVecVal(int(c), self.width)

    def var(self, name: str) -> Any:
        return self.z3.BitVec(name, self.width)

    def add(self, a: Any, b: Any) -> Any:
        return self._t(a) + self._t(b)

    def sub(self, a: Any, b: Any) -> Any:
        return self._t(a) - self._t(b)

    def mul(self, a: Any, b: Any) -> Any:
        return self._t(a) * self._t(b)

    def and_(self, a: Any, b: Any) -> Any:
        return self._t(a) & self._t(b)

    def xor(self, a: Any, b: Any) -> Any:
        return self._t(a) ^ self._t(b)

    def lshr(self, a: Any, s: int) -> Any:
        return self.z3.LShR(self._t(a), s)

    def udiv(self, a: Any, c: Any) -> Any:
        return self.z3.UDiv(self._t(a), self._t(c))

    def urem(self, a: Any, c: Any) -> Any:
        return self.z3.URem(self._t(a), self._t(c))

    def eq(self, a: Any, b: Any) -> Any:
        return self._t(a) == self._t(b)

    def ite(self, c: Any, a: Any, b: Any) -> Any:
        return self.z3.If(c, self._t(a), self._t(b))


# --------------------------------------------------------------------------- swizzle / TMA


def swizzle(ops: Any, bits: int, base: int, shift: int, x: Any) -> Any:
    """CuTe ``Swizzle<B,M,S>``: ``x ^ ((x & (((1<<B)-1) << (M+S))) >> S)`` (``cute/swizzle.hpp``)."""
    if bits == 0:
        return x
    mask = ((1 << bits) - 1) << (base + shift)
    return ops.xor(x, ops.lshr(ops.and_(x, mask), shift))


#: TMA swizzle mode (bytes) -> Swizzle<B,4,3> bits on byte addresses (PTX ISA 5.5.7)
TMA_SWIZZLE_BITS = {16: 0, 32: 1, 64: 2, 128: 3}


def tma_box_offset(ops: Any, load: Any, mn: Any, k: Any, stage: Any, base_bytes: int,
                   elem_bytes: int) -> Any:
    """Element offset (from the buffer base) where TMA writes tile element (mn, k) of ``stage``.

    ``load`` is a :class:`~argus_cutlass.dsl.ir.TmaLoad`: the stage is cut into boxes
    ``copy.box = (inner, outer)`` (inner = the contiguous gmem mode: K for K-major, MN for
    MN-major); box ``b`` lands ``b * inner * outer`` elements after the stage start, element
    (i, j) of a box at ``j * inner + i``; the **absolute** byte address is then swizzled with
    ``Swizzle<log2(swizzle_bytes/16),4,3>``. Source: PTX ISA 9.7.9.25 (``cp.async.bulk.tensor``
    box placement) and 5.5.7 (tensor-map swizzle modes). ``base_bytes`` must be a multiple of
    the swizzle period (rule ``smem.alignment``) for the result to be base-independent.
    """
    inner, outer = load.copy.box[0], load.copy.box[1]
    if load.major == "K":
        i, j = ops.urem(k, inner), ops.urem(mn, outer)
        box = ops.add(ops.mul(ops.udiv(k, inner), load.tile_mn // outer), ops.udiv(mn, outer))
    else:
        i, j = ops.urem(mn, inner), ops.urem(k, outer)
        box = ops.add(ops.mul(ops.udiv(mn, inner), load.tile_k // outer), ops.udiv(k, outer))
    linear = ops.add(ops.add(ops.mul(stage, load.tile_mn * load.tile_k), ops.mul(box, inner * outer)),
                     ops.add(ops.mul(j, inner), i))
    addr = ops.add(ops.mul(linear, elem_bytes), base_bytes)
    addr = swizzle(ops, TMA_SWIZZLE_BITS[load.copy.swizzle_bytes], 4, 3, addr)
    return ops.udiv(ops.sub(addr, base_bytes), elem_bytes)


def tma_load_box_coords(load: Any, box: Any, i: Any, j: Any) -> tuple[Any, Any]:
    """Tile coordinate ``(mn, k)`` (relative to the tile's block and k-tile) that element ``(i, j)``
    of box ``box`` of a TMA load carries, as the generated producer issues the boxes
    (``templates/gemm/mainloop.j2``, ``load_A``/``load_B``): K-major boxes are numbered MN-block
    fastest (``c_inner = k0 + (b / (tile_mn / outer)) * inner``, ``c_outer = mn0 + (b % (tile_mn /
    outer)) * outer``), MN-major boxes K-block fastest. ``i`` runs along the box's inner (contiguous)
    extent, ``j`` along its outer one. Works on ints and numpy arrays.

    The box lands at ``box * inner * outer`` elements after the stage start, element ``(i, j)`` at
    ``j * inner + i`` (PTX ISA 9.7.9.25: the box is written densely, inner dimension fastest).
    """
    inner, outer = load.copy.box[0], load.copy.box[1]
    if load.major == "K":
        per = max(1, load.tile_mn // outer)
        return (box % per) * outer + j, (box // per) * inner + i
    per = max(1, load.tile_k // outer)
    return (box // per) * inner + i, (box % per) * outer + j


def tma_store_box_coords(store: Any, box: Any, i: Any, j: Any) -> tuple[Any, Any]:
    """Subtile coordinate ``(m, n)`` that element ``(i, j)`` of box ``box`` of the epilogue's TMA
    store writes, as the generated epilogue issues it (``templates/gemm/epilogue.j2``): for a
    row-major D (``major == "K"``, N contiguous) box ``b`` covers columns ``b * inner + i`` of rows
    ``j``; for a column-major D (``"MN"``) rows ``b * inner + i`` of columns ``j``."""
    inner = store.copy.box[0]
    if store.major == "K":
        return j, box * inner + i
    return box * inner + i, j


def box_element_offset(box: Any, i: Any, j: Any, inner: int, outer: int) -> Any:
    """Element offset of box element ``(i, j)`` from the stage start (boxes densely packed)."""
    return box * (inner * outer) + j * inner + i


def tma_boxes_per_stage(load: Any) -> int:
    """Boxes one stage of ``load`` is cut into (``tile_mn * tile_k / (inner * outer)``, rounded up)."""
    per_box = load.copy.box[0] * load.copy.box[1]
    return -(-(load.tile_mn * load.tile_k) // per_box)


# --------------------------------------------------------------------------- layouts / GMMA


def _layout_eval(ops: Any, shape: Any, stride: Any, c: Any, last: bool) -> Any:
    if isinstance(shape, int):
        return ops.mul(c, stride) if stride != 1 else c
    out = ops.const(0)
    n = len(shape)
    for j, (s, d) in enumerate(zip(shape, stride)):
        sz = _size(s)
        is_last = last and j == n - 1
        ci = c if is_last else ops.urem(c, sz)
        out = ops.add(out, _layout_eval(ops, s, d, ci, is_last))
        if not is_last:
            c = ops.udiv(c, sz)
    return out


def _size(shape: Any) -> int:
    if isinstance(shape, int):
        return shape
    n = 1
    for s in shape:
        n *= _size(s)
    return n


def layout_offset(ops: Any, layout: Any, *coords: Any) -> Any:
    """A pycute ``Layout`` or a ``SwizzledLayout`` evaluated on one coordinate per mode.

    Each coordinate is 1-D over its (possibly nested) mode, colexicographic, like
    :func:`argus_cutlass.layout.algebra.eval_layout`; a swizzled layout then applies its
    element-offset swizzle (CuTe ``ComposedLayout<Swizzle, 0, Layout>``).
    """
    swz = getattr(layout, "swizzle", None)
    inner = layout.layout if swz is not None else layout
    shape, stride = inner.shape, inner.stride
    if isinstance(shape, int):
        shape, stride = (shape,), (stride,)
    if len(coords) != len(shape):
        raise ValueError(f"{len(coords)} coordinates for a rank-{len(shape)} layout {inner}")
    off = ops.const(0)
    for s, d, c in zip(shape, stride, coords):
        off = ops.add(off, _layout_eval(ops, s, d, c, True))
    if swz is not None:
        off = swizzle(ops, swz.bits, swz.base, swz.shift, off)
    return off


def gmma_read_offset(ops: Any, read: Any, mn: Any, k: Any, stage: Any) -> Any:
    """Element offset the GMMA reads for operand slot (mn, k) of ``stage``.

    ``read`` is a :class:`~argus_cutlass.dsl.ir.MmaRead`; its ``layout`` is the descriptor's
    view of the buffer ((MN, K, stage) -> element offset, swizzle included), as CuTe's
    ``make_gmma_desc`` partitions it (``cute/atom/mma_traits_sm90_gmma.hpp``). The k-block
    advance of the descriptor start address is the layout's K mode (the swizzle acts on the
    absolute address, PTX ISA 9.7.15.5.1).
    """
    return layout_offset(ops, read.layout, mn, k, stage)


# --------------------------------------------------------------------------- pipeline


def pipeline_state(ops: Any, n: Any, wrap: int, phase0: int) -> tuple[Any, Any]:
    """(index, phase) of a CUTLASS ``PipelineState`` after ``n`` increments from (0, phase0).

    ``operator++`` increments ``index`` and, when it reaches ``wrap`` (the stage count),
    resets it to 0 and flips ``phase`` (``cutlass/pipeline/sm90_pipeline.hpp``). Closed form:
    ``(n mod wrap, phase0 ^ ((n / wrap) & 1))``; :func:`pipeline_step` is the step it is
    proved against (:func:`argus_cutlass.verify.smt.check_pipeline_smt`).
    """
    return ops.urem(n, wrap), ops.xor(ops.and_(ops.udiv(n, wrap), 1), phase0)


def pipeline_step(ops: Any, index: Any, phase: Any, wrap: int) -> tuple[Any, Any]:
    """One ``PipelineState::operator++``: ``++index; if (index == Stages) {index = 0; phase ^= 1;}``."""
    nxt = ops.add(index, 1)
    hit = ops.eq(nxt, wrap)
    return ops.ite(hit, 0, nxt), ops.ite(hit, ops.xor(phase, 1), phase)


def wait_passes(ops: Any, completions: Any, parity: Any) -> Any:
    """``mbarrier.try_wait.parity P`` passes iff the phase of parity ``P`` has completed, i.e. the
    barrier's completed-phase count has parity != ``P`` (PTX ISA 9.7.13.15.16)."""
    return ops.xor(ops.and_(completions, 1), parity)


def side_counter(ops: Any, tile: Any, k_tile: Any, k_tiles: Any, carry: bool) -> Any:
    """The pipeline counter one side has advanced at (tile, k_tile): carried across persistent
    tiles (``tile * k_tiles + k_tile``) or reset per tile (``k_tile``)."""
    return ops.add(ops.mul(tile, k_tiles), k_tile) if carry else k_tile


def consumer_counter(ops: Any, tile: Any, k_tile: Any, k_tiles: Any, carry: bool, stride: int = 1,
                     turn_skip: bool = False, split: tuple[Any, Any] | None = None) -> Any:
    """The pipeline counter the consumer warpgroup working on the CTA's ``tile``-th output tile
    has advanced to at ``k_tile``, as the generated kernel moves its ``PipeState``
    (``templates/gemm/kernel.cu.j2``):

    * cooperative (``stride == 1``): every consumer warpgroup runs every tile; the state is
      carried (``tile * k_tiles + k_tile``) or re-created per tile (``k_tile``);
    * ping-pong (``stride == 2``): warpgroup ``w = tile mod 2`` runs the tiles ``w, w + 2, ...``;
      warpgroup 1 starts advanced by ``k_tiles`` (``st.advance_by(p.k_tiles)``), and after each own
      tile a warpgroup with a turn order (``turn_skip``) advances past the other group's tile.

    So the ``j``-th own tile of warpgroup ``w`` starts at ``w * k_tiles [stride 2 only] +
    j * (k_tiles + [turn_skip] k_tiles)``. With ``carry`` False the state restarts at every tile.
    ``split = (w, j)`` passes ``tile = j * stride + w`` already divided (the SMT tier quantifies
    over ``w < stride`` and ``j`` instead of dividing a bit-vector).
    """
    if not carry:
        return k_tile
    if stride == 1:
        return ops.add(ops.mul(tile, k_tiles), k_tile)
    w, j = split if split is not None else (ops.urem(tile, stride), ops.udiv(tile, stride))
    start = ops.mul(w, k_tiles) if stride == 2 else ops.const(0)
    per_tile = ops.mul(k_tiles, 2) if turn_skip else k_tiles
    return ops.add(ops.add(start, ops.mul(j, per_tile)), k_tile)


# --------------------------------------------------------------------------- k loop


def k_tiles_of(ops: Any, K: Any, tile_k: int, rounding: str) -> Any:
    """Number of k-tiles the mainloop runs for reduction length ``K``: ``ceil`` (CuTe
    ``ceil_div(K, tile_k)``, the residue tile zero-filled by TMA) or ``floor``."""
    if rounding == "ceil":
        return ops.udiv(ops.add(K, tile_k - 1), tile_k)
    return ops.udiv(K, tile_k)


def k_of_slot(ops: Any, k_tile: Any, k_block: Any, kk: Any, tma_tile_k: int, block_k: int) -> Any:
    """Global k summed at MMA slot ``kk`` of k-block ``k_block`` in k-tile ``k_tile``: the TMA of
    k-tile ``j`` loads gmem columns ``[j * tma_tile_k, (j+1) * tma_tile_k)`` and the MMA's
    k-block ``b`` reads tile columns ``b * block_k + kk``."""
    return ops.add(ops.mul(k_tile, tma_tile_k), ops.add(ops.mul(k_block, block_k), kk))
