"""Frozen IR of tile programs: tensors with layouts and tags, tag functions, tag assertions.

A *tag* names integer fields that every element of a tensor carries, e.g. ``A:(m,k)`` for an
element of operand A at gmem row ``m``, column ``k``, and ``stage:(iter)`` for the producer
iteration that filled a pipeline stage. A *tag function* (e.g. :class:`TmaLoad`) says where a
copy puts each source element, so the verifier can build the destination's tag image. A
*tag assertion* states a relation at a use site (e.g. at the MMA slot ``A.k == B.k``).

Every node records the source location of the DSL statement that created it
(:class:`SourceLoc`), so errors point at the user's line, not at argus internals.

Shapes are by mode: (MN, K) for operands, (MN, K, stage) for smem stage buffers.
Offsets are in elements unless the name says bytes.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from dataclasses import dataclass
from typing import Any, Literal

from argus_cutlass.dsl.atoms import GmmaOp, TmaCopy

Space = Literal["gmem", "smem", "rmem"]

_DSL_DIR = os.path.dirname(os.path.abspath(__file__))


@dataclass(frozen=True)
class SourceLoc:
    """``file:line`` (and function) of the DSL statement that created a node."""

    file: str
    line: int
    function: str = ""

    def __str__(self) -> str:
        return f"{os.path.relpath(self.file) if os.path.isabs(self.file) else self.file}:{self.line}"


def caller_loc() -> SourceLoc:
    """Location of the first frame outside ``argus_cutlass/dsl`` (the user's DSL statement)."""
    frame = inspect.currentframe()
    try:
        f = frame.f_back if frame is not None else None
        while f is not None and os.path.dirname(os.path.abspath(f.f_code.co_filename)) == _DSL_DIR:
            f = f.f_back
        if f is None:
            return SourceLoc("<unknown>", 0)
        return SourceLoc(f.f_code.co_filename, f.f_lineno, f.f_code.co_name)
    finally:
        del frame


@dataclass(frozen=True)
class Tag:
    """Named integer fields carried by each element, e.g. ``Tag("A", ("m", "k"))``."""

    name: str
    fields: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.name}:({','.join(self.fields)})"


@dataclass(frozen=True)
class Tensor:
    """A tensor in gmem, smem or registers.

    Attributes:
        name: unique name in the program (``gA``, ``sA``...).
        space: ``gmem``, ``smem`` or ``rmem``.
        shape: extent per mode, in elements.
        dtype: element type name (``bf16``, ``fp16``, ``fp32``).
        layout: coordinate -> element offset (pycute ``Layout`` or ``SwizzledLayout``);
            ``None`` for gmem tensors whose strides are run-time.
        tag: the tag each element carries (``None`` when untagged).
        base_bytes: byte offset of element 0 from the start of the space (smem: of the
            CTA's dynamic shared memory, assumed 1024-byte aligned).
        swizzle_bytes: swizzle mode of the buffer (16 = none), for the alignment rule.
    """

    name: str
    space: Space
    shape: tuple[int, ...]
    dtype: str
    layout: Any
    tag: Tag | None
    base_bytes: int
    swizzle_bytes: int
    loc: SourceLoc

    @property
    def elem_bytes(self) -> int:
        return {"bf16": 2, "fp16": 2, "fp32": 4}[self.dtype]

    @property
    def size_bytes(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n * self.elem_bytes


@dataclass(frozen=True)
class TmaLoad:
    """Tag function of a TMA tile load: gmem tile element (mn, k) of k-tile ``iter`` -> smem.

    The destination gets the source tag ``(mn, k + iter * tile_k)`` and the stage tag
    ``(iter)`` at stage ``iter % stages``. Hardware semantics (PTX ISA 9.7.9.25, tensor-map
    swizzle modes): the tile is cut into boxes ``copy.box = (inner, outer)`` (inner is the
    contiguous mode: K for K-major, MN for MN-major); box ``b`` lands at
    ``b * inner * outer`` elements from the stage start, element ``(i, j)`` of a box at
    ``j * inner + i``; the **absolute** byte address is then swizzled with
    ``Swizzle<log2(swizzle_bytes/16),4,3>``.
    """

    name: str
    src: str
    dst: str
    copy: TmaCopy
    major: str  # "K" or "MN": which gmem mode is contiguous
    tile_mn: int
    tile_k: int
    src_tag: Tag
    stage_tag: Tag
    loc: SourceLoc

    def write_offsets(self, mn: Any, k: Any, stage: Any, base_bytes: int, elem_bytes: int) -> Any:
        """Element offset (from the buffer base) where tile element (mn, k) of ``stage`` lands.

        Works on ints and numpy integer arrays.
        """
        inner, outer = self.copy.box[0], self.copy.box[1]
        if self.major == "K":
            i, j = k % inner, mn % outer
            box = (k // inner) * (self.tile_mn // outer) + mn // outer
        else:
            i, j = mn % inner, k % outer
            box = (mn // inner) * (self.tile_k // outer) + k // outer
        linear = stage * (self.tile_mn * self.tile_k) + box * (inner * outer) + j * inner + i
        addr = base_bytes + linear * elem_bytes
        sw = self.copy.swizzle_bytes
        if sw > 16:
            bits = {32: 1, 64: 2, 128: 3}[sw]
            mask = ((1 << bits) - 1) << 7
            addr = addr ^ ((addr & mask) >> 3)
        return (addr - base_bytes) // elem_bytes


@dataclass(frozen=True)
class MmaRead:
    """An SS-mode GMMA operand slot: the MMA reads tile element (mn, k) of ``stage`` from
    ``src`` through its **own** layout object ``layout`` ((MN, K, stage) -> element offset,
    the descriptor's view; normally the same object as the buffer's layout).

    ``op`` is the GMMA atom (``op.m`` rows of A per warpgroup, ``op.n`` columns of B,
    ``op.k`` per k-block); ``warpgroups`` tile the MN mode (``TiledMma.atoms_m`` for A).
    """

    name: str
    operand: str  # "A" or "B"
    src: str
    layout: Any
    op: GmmaOp
    tile_mn: int
    tile_k: int
    warpgroups: int
    loc: SourceLoc


@dataclass(frozen=True)
class TagAssertion:
    """``lhs.field <relation> rhs.field`` at every slot of the program point ``at``.

    ``lhs``/``rhs`` are ``(operand, field)`` pairs, e.g. ``("A", "k")``; ``invariant`` is a
    catalogue id (``G1``) and ``rule`` the verifier rule that checks it.
    """

    name: str
    at: str
    lhs: tuple[str, str]
    relation: Literal["=="]
    rhs: tuple[str, str]
    invariant: str
    rule: str
    loc: SourceLoc

    def __str__(self) -> str:
        return f"{self.lhs[0]}.{self.lhs[1]} {self.relation} {self.rhs[0]}.{self.rhs[1]} at {self.at}"


@dataclass(frozen=True)
class DslProgram:
    """A whole tile program: tensors, TMA loads, MMA reads and tag assertions.

    ``stages`` is the pipeline depth; nodes refer to tensors by name.
    """

    name: str
    stages: int
    tensors: tuple[Tensor, ...]
    loads: tuple[TmaLoad, ...]
    reads: tuple[MmaRead, ...]
    assertions: tuple[TagAssertion, ...]

    def tensor(self, name: str) -> Tensor:
        """The tensor called ``name``. Raises ``KeyError`` naming the known tensors."""
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(f"no tensor {name!r}; have {[t.name for t in self.tensors]}")

    def read(self, operand: str) -> MmaRead:
        for r in self.reads:
            if r.operand == operand:
                return r
        raise KeyError(f"no MMA read of operand {operand!r}")

    def load_into(self, dst: str) -> TmaLoad:
        for ld in self.loads:
            if ld.dst == dst:
                return ld
        raise KeyError(f"no TMA load into {dst!r}")

    def replace_tensor(self, name: str, **changes: Any) -> DslProgram:
        """A copy with tensor ``name`` changed (e.g. ``base_bytes``)."""
        self.tensor(name)
        ts = tuple(dataclasses.replace(t, **changes) if t.name == name else t for t in self.tensors)
        return dataclasses.replace(self, tensors=ts)

    def replace_read(self, operand: str, **changes: Any) -> DslProgram:
        """A copy with the MMA read of ``operand`` changed (e.g. its ``layout``)."""
        self.read(operand)
        rs = tuple(dataclasses.replace(r, **changes) if r.operand == operand else r for r in self.reads)
        return dataclasses.replace(self, reads=rs)

    def replace_load(self, dst: str, **changes: Any) -> DslProgram:
        """A copy with the TMA load into ``dst`` changed (e.g. its ``copy``)."""
        self.load_into(dst)
        ls = tuple(dataclasses.replace(x, **changes) if x.dst == dst else x for x in self.loads)
        return dataclasses.replace(self, loads=ls)


class ProgramBuilder:
    """Collects DSL statements; each records the caller's source location.

    >>> b = ProgramBuilder("demo", stages=2)
    >>> t = b.tensor("gA", "gmem", (128, 64), "bf16", tag=Tag("A", ("m", "k")))
    >>> b.build().tensor("gA").loc.line > 0
    True
    """

    def __init__(self, name: str, stages: int) -> None:
        self.name = name
        self.stages = stages
        self._tensors: list[Tensor] = []
        self._loads: list[TmaLoad] = []
        self._reads: list[MmaRead] = []
        self._asserts: list[TagAssertion] = []

    def tensor(self, name: str, space: Space, shape: tuple[int, ...], dtype: str, *,
               layout: Any = None, tag: Tag | None = None, base_bytes: int = 0,
               swizzle_bytes: int = 16) -> Tensor:
        t = Tensor(name, space, tuple(shape), dtype, layout, tag, base_bytes, swizzle_bytes, caller_loc())
        self._tensors.append(t)
        return t

    def tma_load(self, src: Tensor, dst: Tensor, copy: TmaCopy, *, major: str, tile_mn: int,
                 tile_k: int, stage_tag: Tag) -> TmaLoad:
        if src.tag is None:
            raise ValueError(f"TMA source {src.name} has no tag")
        node = TmaLoad(f"tma_{dst.name}", src.name, dst.name, copy, major, tile_mn, tile_k,
                       src.tag, stage_tag, caller_loc())
        self._loads.append(node)
        return node

    def mma_read(self, operand: str, src: Tensor, layout: Any, op: GmmaOp, *, tile_mn: int,
                 tile_k: int, warpgroups: int) -> MmaRead:
        node = MmaRead(f"gmma_{operand}", operand, src.name, layout, op, tile_mn, tile_k,
                       warpgroups, caller_loc())
        self._reads.append(node)
        return node

    def assert_tags(self, at: str, lhs: tuple[str, str], relation: Literal["=="],
                    rhs: tuple[str, str], *, invariant: str, rule: str) -> TagAssertion:
        node = TagAssertion(f"{invariant}:{lhs[0]}.{lhs[1]}{relation}{rhs[0]}.{rhs[1]}", at, lhs,
                            relation, rhs, invariant, rule, caller_loc())
        self._asserts.append(node)
        return node

    def build(self) -> DslProgram:
        return DslProgram(self.name, self.stages, tuple(self._tensors), tuple(self._loads),
                          tuple(self._reads), tuple(self._asserts))
