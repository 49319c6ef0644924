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
        """``argus_cutlass/programs/gemm_dsl.py:101`` for the package's own files (wherever it is
        installed), else the path relative to the current directory."""
        path = self.file
        if os.path.isabs(path):
            root = os.path.dirname(os.path.dirname(_DSL_DIR))  # the directory holding argus_cutlass/
            path = os.path.relpath(path, root) if path.startswith(root + os.sep) else os.path.relpath(path)
        return f"{path}:{self.line}"


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
    #: cluster shape (CTAs along M, along N) and, for a multicast load, the cluster mode along
    #: which the CTAs share this operand ("n" for A, "m" for B; "" = not multicast)
    cluster: tuple[int, int] = (1, 1)
    share_axis: str = ""
    #: the kernel's choices for a multicast load (see :mod:`argus_cutlass.verify.multicast`): the
    #: cluster coordinate that picks the slice a CTA issues, the mode along which the CTAs its mask
    #: names vary, whether the issuing CTA is in its own mask, and how a cluster coordinate becomes
    #: a mask bit ("col": rank = m + n * cluster_m, CUDA's %cluster_ctarank)
    slice_axis: str = ""
    mask_axis: str = ""
    mask_self: bool = True
    rank_order: str = "col"

    def __post_init__(self) -> None:
        validate_load(self)

    def write_offsets(self, mn: Any, k: Any, stage: Any, base_bytes: int, elem_bytes: int) -> Any:
        """Element offset (from the buffer base) where tile element (mn, k) of ``stage`` lands.

        Works on ints and numpy integer arrays; the semantics is
        :func:`argus_cutlass.verify.semantics.tma_box_offset` (shared with the SMT tier).
        """
        from argus_cutlass.verify.semantics import INT_OPS, tma_box_offset

        return tma_box_offset(INT_OPS, self, mn, k, stage, base_bytes, elem_bytes)


@dataclass(frozen=True)
class TmaStore:
    """The epilogue's TMA store: staged smem tile element (mn, k) of ``stage`` -> gmem.

    The same box semantics as :class:`TmaLoad` in the other direction (PTX ISA 9.7.9.25,
    ``cp.async.bulk.tensor`` shared::cta -> global): gmem element (mn, k) of the subtile is
    read from the smem element the box model places it at. ``mn``/``k`` are the subtile's
    (M, N) modes; ``major`` is ``"K"`` when N is contiguous in gmem (row-major D) and ``"MN"``
    when M is (the swap-AB column-major view).
    """

    name: str
    src: str
    dst: str
    copy: TmaCopy
    major: str
    tile_mn: int
    tile_k: int
    loc: SourceLoc


@dataclass(frozen=True)
class MmaRead:
    """An SS-mode GMMA operand slot: the MMA reads tile element (mn, k) of ``stage`` from
    ``src`` through its **own** layout object ``layout`` ((MN, K, stage) -> element offset,
    the descriptor's view; normally the same object as the buffer's layout).

    ``op`` is the GMMA atom (``op.m`` rows of A per warpgroup, ``op.n`` columns of B,
    ``op.k`` per k-block); ``warpgroups`` tile the MN mode (``TiledMma.atoms_m`` for A).
    ``warp_stage_skew`` models how each warp of a warpgroup picks the stage whose descriptor
    it passes to ``wgmma`` (PTX ISA 9.7.15.5: the descriptor operands must be the same in
    every warp of the warpgroup; invariant G7).
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
    #: stage offset each of the warpgroup's 4 warps adds when it selects the descriptor of the
    #: current stage (all 0 in a correct kernel: wgmma needs warpgroup-uniform descriptors)
    warp_stage_skew: tuple[int, int, int, int] = (0, 0, 0, 0)


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
class PipelineSide:
    """One side's ``PipelineState`` of the mainloop pipeline.

    Attributes:
        start_phase: phase the side's state starts with (CUTLASS: producer 1, consumer 0).
        wrap: index at which ``operator++`` wraps to 0 and flips the phase (CUTLASS: the
            stage count).
        carry_across_tiles: the state persists across the persistent kernel's output tiles
            (CUTLASS: yes); ``False`` models a state re-created per tile.
    """

    start_phase: int
    wrap: int
    carry_across_tiles: bool = True


@dataclass(frozen=True)
class Pipeline:
    """The mbarrier pipeline between the TMA producer and the GMMA consumers
    (CUTLASS ``PipelineTmaAsync``): one *full* and one *empty* barrier per stage.

    Attributes:
        stages: stage buffers (S).
        tx_bytes: bytes the producer's ``arrive.expect_tx`` announces per stage fill.
        loads: names of the TMA loads that fill a stage (their boxes make the real bytes).
        producer_arrivals: arrival count the *full* barrier is initialised with.
        consumer_arrivals: arrival count the *empty* barrier is initialised with.
        consumer_arrivers: arrivals one release makes (consumer warpgroups x reader CTAs).
        producer, consumer: each side's :class:`PipelineSide`.
        mma_in_flight: wgmma batches the consumer leaves outstanding after issuing an
            iteration's batch (``warpgroup_wait<N>``; CUTLASS ``K_PIPE_MMAS`` = 1).
        release_lag: after iteration ``i`` the consumer releases the stage of iteration
            ``i - release_lag`` (CUTLASS: 1, the previous one). Safe iff the batch that read it
            has retired: ``release_lag >= mma_in_flight`` (PTX ISA 9.7.15.7, wgmma.wait_group).
    """

    stages: int
    tx_bytes: int
    loads: tuple[str, ...]
    producer_arrivals: int
    consumer_arrivals: int
    consumer_arrivers: int
    producer: PipelineSide
    consumer: PipelineSide
    loc: SourceLoc
    mma_in_flight: int = 1
    release_lag: int = 1


@dataclass(frozen=True)
class KLoop:
    """The mainloop's k iteration: ``k_tiles(K)`` k-tiles of ``tile_k`` (TMA), each read as
    ``k_blocks`` GMMA k-blocks of ``block_k``.

    Attributes:
        tile_k: gmem k columns one k-tile's TMA loads (the TMA coordinate step).
        block_k: k of one GMMA (16 for 16-bit types).
        k_blocks: k-blocks the consumer issues per k-tile (``tile_k / block_k``).
        rounding: ``ceil`` (``ceil_div(K, tile_k)`` k-tiles) or ``floor``.
        oob_fill: ``zero`` (TMA fills out-of-bounds box elements with 0) or ``none``.
    """

    tile_k: int
    block_k: int
    k_blocks: int
    rounding: str
    oob_fill: str
    loc: SourceLoc

    def __post_init__(self) -> None:
        if self.rounding not in ("ceil", "floor"):
            _dsl_error("dsl.operand", self.loc, f"k loop rounding {self.rounding!r}: expected 'ceil' or 'floor'")
        if self.oob_fill not in ("zero", "none"):
            _dsl_error("dsl.operand", self.loc, f"k loop oob_fill {self.oob_fill!r}: expected 'zero' or 'none'")


@dataclass(frozen=True)
class EpilogueStore:
    """Accumulators -> D for one output tile.

    Consumer warpgroup ``w`` (of ``warpgroups`` splitting the tile along M; 1 for ping-pong)
    holds, in thread ``t`` and register ``r``, the accumulator at the tile coordinate that
    CuTe's ``CLayout_64xN`` gives (PTX ISA 9.7.15.4; rows ``64 * (rep * warpgroups + w)``
    onward). The epilogue stores that register at the same coordinate with its row shifted
    by ``row_offset`` modulo the 64-row atom (a warp writing its neighbour's rows); the shift
    is 0 in a correct kernel and is the knob a planted mistake turns. With ``residue_mask`` a store whose global coordinate lies outside ``M x N`` is
    suppressed.

    Attributes:
        tile_m, tile_n: output tile (elements); op_m, op_n: the GMMA atom (64 x N).
        d_major: contiguous mode of D in the kernel's (M, N): ``"N"`` or ``"M"`` (swap-AB).
    """

    tile_m: int
    tile_n: int
    op_m: int
    op_n: int
    warpgroups: int
    d_major: str
    row_offset: int
    residue_mask: bool
    loc: SourceLoc


@dataclass(frozen=True)
class SmemStage:
    """The epilogue's register -> shared-memory step (staging for the TMA store).

    Every consumer warp stores its accumulator registers of each ``epi_m x epi_n`` subtile
    into the staging buffer ``dst`` (shape ``(epi_m, epi_n, stages)``); subtile ``q`` (in
    CUTLASS's order: ``epi_m`` inner, ``epi_n`` outer) goes to stage ``q mod stages``.

    ``op`` is ``"stmatrix"`` (``stmatrix.sync.aligned.m8n8.x{num}[.trans].shared.b16``,
    16-bit outputs: CuTe ``SM90_U32x{2,4}_STSM_N`` / ``SM90_U16x{4,8}_STSM_T``) or
    ``"st.shared"`` (one store per element: 32-bit outputs). One stmatrix (``.x2`` or ``.x4``;
    ``.x1`` is not used by the GEMM epilogue and not modelled) covers, per warp, a block of 16 rows
    x ``4 * num`` columns of its accumulator; matrix ``i`` is the 8x8 block at
    row ``8 * (i % 2)`` and column ``8 * (i // 2)``. Lane ``L`` supplies the smem address of row
    ``L % 8`` of matrix ``(L // 8 + row_lane_skew) % num`` (a row runs along N, or along M with
    ``trans``); register ``i`` of an instruction carries the accumulator pair of matrix
    ``matrix_order[i]``. ``row_lane_skew = 0`` and the identity order are the correct kernel; the
    other values are the knobs planted mistakes turn.

    ``store_wait`` is the number of TMA stores the epilogue lets stay in flight
    (``cp.async.bulk.wait_group.read``) before it overwrites a stage: at most ``stages - 1``;
    CUTLASS's ``PipelineTmaStore`` uses ``StagesD - 1`` (the buffer may hold more stages when D
    reuses C's smem).
    """

    src: str
    dst: str
    epi_m: int
    epi_n: int
    op: str
    num: int
    trans: bool
    row_lane_skew: int
    matrix_order: tuple[int, ...]
    store_wait: int
    loc: SourceLoc


@dataclass(frozen=True)
class TileSchedule:
    """The persistent tile scheduler (CUTLASS ``PersistentTileSchedulerSm90`` /
    ``PersistentTileSchedulerSm90StreamK``).

    CTA ``c`` of ``grid`` takes linear work units ``c, c + step, ...`` with ``step = grid +
    step_delta`` (0 in a correct kernel). A unit becomes an output tile through CUTLASS's walk
    (``raster``, ``swizzle`` = ``max_swizzle_size``, cluster-major blocking over
    ``cluster_m x cluster_n``). ``decomposition`` is ``persistent`` (one tile per unit),
    ``streamk`` or ``splitk`` (a tile's k loop divided among units, ``splits`` ways for
    split-K; Deterministic reduction).

    ``walk_mutation`` and ``division_mutation`` plant mistakes for the mutation suite:
    ``"swizzle_off_by_one"`` on the walk; ``(("drop_remainder", True),)``, ``(("overlap", 1),)``
    ... on the division (keywords of :func:`argus_cutlass.verify.decomposition.work_units`).
    """

    raster: str
    swizzle: int
    step_delta: int
    decomposition: str
    loc: SourceLoc
    cluster_m: int = 1
    cluster_n: int = 1
    splits: int = 1
    walk_mutation: str = ""
    division_mutation: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        validate_schedule(self)


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
    pipeline: Pipeline | None = None
    kloop: KLoop | None = None
    epilogue: EpilogueStore | None = None
    schedule: TileSchedule | None = None
    stores: tuple[TmaStore, ...] = ()
    staging: SmemStage | None = None

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

    def replace_pipeline(self, producer: dict[str, Any] | None = None,
                         consumer: dict[str, Any] | None = None, **changes: Any) -> DslProgram:
        """A copy with the pipeline changed, e.g. ``replace_pipeline(consumer={"start_phase": 1})``
        or ``replace_pipeline(tx_bytes=...)``."""
        if self.pipeline is None:
            raise KeyError("program has no pipeline")
        p = self.pipeline
        if producer:
            changes["producer"] = dataclasses.replace(p.producer, **producer)
        if consumer:
            changes["consumer"] = dataclasses.replace(p.consumer, **consumer)
        return dataclasses.replace(self, pipeline=dataclasses.replace(p, **changes))

    def replace_store(self, src: str, **changes: Any) -> DslProgram:
        """A copy with the TMA store out of ``src`` changed (e.g. its ``copy``)."""
        if not any(st.src == src for st in self.stores):
            raise KeyError(f"no TMA store out of {src!r}")
        sts = tuple(dataclasses.replace(x, **changes) if x.src == src else x for x in self.stores)
        return dataclasses.replace(self, stores=sts)

    def replace_epilogue(self, **changes: Any) -> DslProgram:
        """A copy with the epilogue store changed (e.g. ``row_offset=16``, ``residue_mask=False``)."""
        if self.epilogue is None:
            raise KeyError("program has no epilogue store")
        return dataclasses.replace(self, epilogue=dataclasses.replace(self.epilogue, **changes))

    def replace_staging(self, **changes: Any) -> DslProgram:
        """A copy with the epilogue's register -> smem step changed (e.g. ``trans=False``)."""
        if self.staging is None:
            raise KeyError("program has no epilogue staging step")
        node = dataclasses.replace(self.staging, **changes)
        validate_staging(node, self.tensor(node.dst))
        return dataclasses.replace(self, staging=node)

    def replace_schedule(self, **changes: Any) -> DslProgram:
        """A copy with the tile scheduler changed (e.g. ``step_delta=-1``)."""
        if self.schedule is None:
            raise KeyError("program has no tile schedule")
        return dataclasses.replace(self, schedule=dataclasses.replace(self.schedule, **changes))

    def replace_kloop(self, **changes: Any) -> DslProgram:
        """A copy with the k loop changed (e.g. ``rounding="floor"``)."""
        if self.kloop is None:
            raise KeyError("program has no k loop")
        return dataclasses.replace(self, kloop=dataclasses.replace(self.kloop, **changes))


#: mutation keywords a TileSchedule's division_mutation may carry
#: (:func:`argus_cutlass.verify.decomposition.work_units`)
DIVISION_MUTATIONS = ("drop_remainder", "overlap", "no_end_adjust", "epilogue_on_first")
#: the most CTAs a ``ctaMask`` (16 bits) can name
MAX_MULTICAST_CLUSTER = 16


def _positive_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 1


def validate_load(node: TmaLoad) -> None:
    """Check a TMA load node's cluster and multicast fields (run by every ``TmaLoad``, so the
    builder and ``replace_load`` both get it).

    Raises:
        argus_cutlass.errors.DslError: ``dsl.operand`` naming the field and the rule.
    """
    loc = node.loc
    c = node.cluster
    if len(c) != 2 or not all(_positive_int(x) for x in c):
        _dsl_error("dsl.operand", loc, f"{node.name}: cluster {c} must be two positive ints (CTAs along M, N)")
    if c[0] * c[1] > MAX_MULTICAST_CLUSTER:
        _dsl_error("dsl.operand", loc, f"{node.name}: a {c[0]}x{c[1]} cluster has more CTAs than the 16 bits of "
                   "a TMA ctaMask can name (PTX ISA 9.7.9.25)")
    if node.copy.multicast <= 1:
        return
    if node.share_axis not in ("m", "n"):
        _dsl_error("dsl.operand", loc, f"multicast TMA load into {node.dst!r} needs share_axis 'm' or 'n'")
    extent = c[1] if node.share_axis == "n" else c[0]
    if node.copy.multicast != extent:
        _dsl_error("dsl.operand", loc, f"{node.name}: multicast to {node.copy.multicast} CTAs, but the "
                   f"{c[0]}x{c[1]} cluster has {extent} CTAs along {node.share_axis} sharing the operand")
    for field in ("slice_axis", "mask_axis"):
        if getattr(node, field) not in ("m", "n"):
            _dsl_error("dsl.operand", loc, f"{node.name}: {field} {getattr(node, field)!r}: expected 'm' or 'n'")
    if node.rank_order not in ("col", "row"):
        _dsl_error("dsl.operand", loc, f"{node.name}: rank_order {node.rank_order!r}: expected 'col' or 'row'")


def validate_staging(node: SmemStage, dst: Tensor) -> None:
    """Check an epilogue staging node against its buffer (builder and ``replace_staging``).

    Raises:
        argus_cutlass.errors.DslError: ``dsl.operand`` (op, num, matrix order, store wait, source),
            ``dsl.layout_size`` (the buffer is not an ``(epi_m, epi_n, stages)`` smem tensor
            matching the node).
    """
    loc = node.loc
    if node.src != "accum":
        _dsl_error("dsl.operand", loc, f"smem stage source {node.src!r}: only the MMA accumulator 'accum' is modelled")
    if node.op not in ("stmatrix", "st.shared"):
        _dsl_error("dsl.operand", loc, f"smem stage op {node.op!r}: expected 'stmatrix' or 'st.shared'")
    allowed = (2, 4) if node.op == "stmatrix" else (1,)
    if node.num not in allowed:
        _dsl_error("dsl.operand", loc, f"{node.op} num={node.num}: the epilogue partition is modelled for "
                   f"{' or '.join(f'.x{n}' for n in allowed) if node.op == 'stmatrix' else 'num=1'} "
                   "(one stmatrix covers 16 accumulator rows of a warp)")
    if sorted(node.matrix_order) != list(range(node.num)):
        _dsl_error("dsl.operand", loc, f"matrix_order {node.matrix_order} is not a permutation of 0..{node.num - 1}")
    if not isinstance(node.store_wait, int) or node.store_wait < 0:
        _dsl_error("dsl.operand", loc, f"store_wait {node.store_wait!r}: cp.async.bulk.wait_group.read takes an "
                   "integer >= 0")
    if not isinstance(node.row_lane_skew, int):
        _dsl_error("dsl.operand", loc, f"row_lane_skew {node.row_lane_skew!r} must be an int")
    if dst.space != "smem" or len(dst.shape) != 3 or tuple(dst.shape[:2]) != (node.epi_m, node.epi_n):
        _dsl_error("dsl.layout_size", loc, f"staging buffer {dst.name!r} ({dst.space}, shape {dst.shape}) must be "
                   f"an smem ({node.epi_m}, {node.epi_n}, stages) tensor")


def validate_schedule(node: TileSchedule) -> None:
    """Check a tile-scheduler node (run by every ``TileSchedule``: builder and ``replace_schedule``).

    Raises:
        argus_cutlass.errors.DslError: ``dsl.operand`` naming the field and the rule.
    """
    loc = node.loc
    if node.raster not in ("along_m", "along_n"):
        _dsl_error("dsl.operand", loc, f"raster {node.raster!r}: expected 'along_m' or 'along_n'")
    if node.decomposition not in ("persistent", "streamk", "splitk"):
        _dsl_error("dsl.operand", loc, f"decomposition {node.decomposition!r}: expected persistent, streamk or "
                   "splitk")
    if node.swizzle not in (1, 2, 4, 8):
        _dsl_error("dsl.operand", loc, f"swizzle {node.swizzle}: CUTLASS's max_swizzle_size is 1, 2, 4 or 8")
    if not all(_positive_int(x) for x in (node.cluster_m, node.cluster_n, node.splits)):
        _dsl_error("dsl.operand", loc, f"cluster {node.cluster_m}x{node.cluster_n} / splits {node.splits} must be "
                   "ints >= 1")
    if node.splits > 1 and node.decomposition != "splitk":
        _dsl_error("dsl.operand", loc, f"splits={node.splits} needs decomposition 'splitk'")
    if not isinstance(node.step_delta, int):
        _dsl_error("dsl.operand", loc, f"step_delta {node.step_delta!r} must be an int")
    if node.walk_mutation not in ("", "swizzle_off_by_one"):
        _dsl_error("dsl.operand", loc, f"walk_mutation {node.walk_mutation!r}: expected '' or 'swizzle_off_by_one'")
    bad = [k for k, _ in node.division_mutation if k not in DIVISION_MUTATIONS]
    if bad:
        _dsl_error("dsl.operand", loc, f"division_mutation keys {bad}: expected {list(DIVISION_MUTATIONS)}")


def _layout_size(layout: Any) -> int:
    size = getattr(layout, "size", None)
    if callable(size):
        return int(size())
    from argus_cutlass.layout.algebra import size as layout_size

    return int(layout_size(layout))


def _dsl_error(rule: str, loc: SourceLoc, message: str, hint: str | None = None) -> None:
    from argus_cutlass.errors import DslError

    raise DslError(rule, f"{loc}: {message}", hint)


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
        self._pipeline: Pipeline | None = None
        self._kloop: KLoop | None = None
        self._epilogue: EpilogueStore | None = None
        self._schedule: TileSchedule | None = None
        self._staging: SmemStage | None = None
        self._stores: list[TmaStore] = []

    def tensor(self, name: str, space: Space, shape: tuple[int, ...], dtype: str, *,
               layout: Any = None, tag: Tag | None = None, base_bytes: int = 0,
               swizzle_bytes: int = 16) -> Tensor:
        """Declare a tensor.

        Raises:
            argus_cutlass.errors.DslError: ``dsl.duplicate`` (name taken), ``dsl.layout_size``
                (the layout's size is not the product of ``shape``), ``dsl.dtype``.
        """
        loc = caller_loc()
        if any(t.name == name for t in self._tensors):
            _dsl_error("dsl.duplicate", loc, f"tensor {name!r} is declared twice")
        if dtype not in ("bf16", "fp16", "fp32"):
            _dsl_error("dsl.dtype", loc, f"tensor {name!r}: dtype {dtype!r} is not bf16, fp16 or fp32")
        elems = 1
        for e in shape:
            elems *= int(e)
        if layout is not None and _layout_size(layout) != elems:
            _dsl_error("dsl.layout_size", loc,
                       f"tensor {name!r} has shape {tuple(shape)} ({elems} elements) but its layout maps "
                       f"{_layout_size(layout)} coordinates", "the layout's shape must be the tensor's shape")
        t = Tensor(name, space, tuple(shape), dtype, layout, tag, base_bytes, swizzle_bytes, loc)
        self._tensors.append(t)
        return t

    def tma_load(self, src: Tensor, dst: Tensor, copy: TmaCopy, *, major: str, tile_mn: int,
                 tile_k: int, stage_tag: Tag, cluster: tuple[int, int] = (1, 1), share_axis: str = "") -> TmaLoad:
        """A TMA tile load ``src`` (gmem, tagged) -> ``dst`` (smem, ``(tile_mn, tile_k, S)``).

        With ``copy.multicast > 1`` the CTAs of a ``cluster`` (CTAs along M, along N) that share
        the operand along ``share_axis`` (``"n"``: A, ``"m"``: B) each issue one slice of the tile
        and multicast it to the others (CUTLASS ``SM90_TMA_LOAD_MULTICAST``); the slice and mask
        choices default to CUTLASS's and can be changed with ``replace_load``.

        Raises:
            argus_cutlass.errors.DslError: ``dsl.untagged`` (the source carries no tag: nothing
                could be proved about the values it loads), ``dsl.layout_size`` (the tile does
                not match the destination's shape).
        """
        loc = caller_loc()
        if src.tag is None:
            _dsl_error("dsl.untagged", loc, f"TMA source {src.name!r} carries no tag",
                       f"declare it with tag=Tag(...), e.g. Tag('{src.name[-1:]}', ('m', 'k'))")
        if tuple(dst.shape[:2]) != (tile_mn, tile_k):
            _dsl_error("dsl.layout_size", loc, f"TMA tile ({tile_mn}, {tile_k}) does not match the "
                       f"destination {dst.name!r} of shape {dst.shape}")
        node = TmaLoad(f"tma_{dst.name}", src.name, dst.name, copy, major, tile_mn, tile_k,
                       src.tag, stage_tag, loc, tuple(cluster), share_axis, share_axis, share_axis)
        self._loads.append(node)
        return node

    def mma_read(self, operand: str, src: Tensor, layout: Any, op: GmmaOp, *, tile_mn: int,
                 tile_k: int, warpgroups: int) -> MmaRead:
        """A GMMA operand read of ``src`` through ``layout`` ((MN, K, S) -> offset).

        Raises:
            argus_cutlass.errors.DslError: ``dsl.layout_size`` (the read's layout and the
                buffer disagree in size), ``dsl.operand`` (operand not A or B).
        """
        loc = caller_loc()
        if operand not in ("A", "B"):
            _dsl_error("dsl.operand", loc, f"MMA operand {operand!r} is not 'A' or 'B'")
        if layout is not None and src.layout is not None and _layout_size(layout) != _layout_size(src.layout):
            _dsl_error("dsl.layout_size", loc,
                       f"the MMA reads {src.name!r} through a layout of {_layout_size(layout)} coordinates, "
                       f"but the buffer's layout has {_layout_size(src.layout)}",
                       "read with a layout of the buffer's shape (MN, K, stages)")
        node = MmaRead(f"gmma_{operand}", operand, src.name, layout, op, tile_mn, tile_k,
                       warpgroups, loc)
        self._reads.append(node)
        return node

    def assert_tags(self, at: str, lhs: tuple[str, str], relation: Literal["=="],
                    rhs: tuple[str, str], *, invariant: str, rule: str) -> TagAssertion:
        """State ``lhs.field relation rhs.field`` at every slot of program point ``at``.

        Operands are MMA operands already read (``("A", "k")``); their tag is the tag of the
        gmem tensor their buffer was loaded from.

        Raises:
            argus_cutlass.errors.DslError: ``dsl.untagged`` (an operand with no MMA read, or
                whose buffer no tagged TMA load fills), ``dsl.unknown_tag`` (a field the tag
                does not have), ``dsl.relation`` (only ``==`` is supported).
        """
        loc = caller_loc()
        if relation != "==":
            _dsl_error("dsl.relation", loc, f"relation {relation!r} is not supported (only '==')")
        for operand, fld in (lhs, rhs):
            read = next((r for r in self._reads if r.operand == operand), None)
            load = next((ld for ld in self._loads if read is not None and ld.dst == read.src), None)
            if load is None:
                _dsl_error("dsl.untagged", loc,
                           f"assertion over {operand}.{fld}: {operand!r} has no MMA read of a tagged TMA-loaded buffer",
                           "declare the TMA load and the MMA read before asserting on the operand")
            if fld not in load.src_tag.fields:
                _dsl_error("dsl.unknown_tag", loc,
                           f"assertion over {operand}.{fld}: tag {load.src_tag} has no field {fld!r}",
                           f"use one of {list(load.src_tag.fields)}")
        node = TagAssertion(f"{invariant}:{lhs[0]}.{lhs[1]}{relation}{rhs[0]}.{rhs[1]}", at, lhs,
                            relation, rhs, invariant, rule, loc)
        self._asserts.append(node)
        return node

    def pipeline(self, loads: tuple[TmaLoad, ...], *, tx_bytes: int, producer_arrivals: int,
                 consumer_arrivals: int, consumer_arrivers: int, producer: PipelineSide,
                 consumer: PipelineSide) -> Pipeline:
        node = Pipeline(self.stages, tx_bytes, tuple(ld.name for ld in loads), producer_arrivals,
                        consumer_arrivals, consumer_arrivers, producer, consumer, caller_loc())
        self._pipeline = node
        return node

    def k_loop(self, *, tile_k: int, block_k: int, k_blocks: int, rounding: str = "ceil",
               oob_fill: str = "zero") -> KLoop:
        node = KLoop(tile_k, block_k, k_blocks, rounding, oob_fill, caller_loc())
        self._kloop = node
        return node

    def tma_store(self, src: Tensor, dst: Tensor, copy: TmaCopy, *, major: str, tile_mn: int,
                  tile_k: int) -> TmaStore:
        """A TMA store of the staged smem tile ``src`` (``(tile_mn, tile_k, S)``) to gmem ``dst``.

        Raises:
            argus_cutlass.errors.DslError: ``dsl.untagged`` (the gmem destination carries no
                tag), ``dsl.layout_size`` (the tile does not match the staging buffer).
        """
        loc = caller_loc()
        if dst.tag is None:
            _dsl_error("dsl.untagged", loc, f"TMA store destination {dst.name!r} carries no tag")
        if tuple(src.shape[:2]) != (tile_mn, tile_k):
            _dsl_error("dsl.layout_size", loc, f"TMA store tile ({tile_mn}, {tile_k}) does not match the "
                       f"staging buffer {src.name!r} of shape {src.shape}")
        node = TmaStore(f"tma_store_{src.name}", src.name, dst.name, copy, major, tile_mn, tile_k, loc)
        self._stores.append(node)
        return node

    def epilogue_store(self, *, tile_m: int, tile_n: int, op: GmmaOp, warpgroups: int, d_major: str = "N",
                       row_offset: int = 0, residue_mask: bool = True) -> EpilogueStore:
        node = EpilogueStore(tile_m, tile_n, op.m, op.n, warpgroups, d_major, row_offset, residue_mask,
                             caller_loc())
        self._epilogue = node
        return node

    def smem_stage(self, src: str, dst: Tensor, *, op: str, num: int = 4, trans: bool = False,
                   row_lane_skew: int = 0, matrix_order: tuple[int, ...] | None = None,
                   store_wait: int | None = None) -> SmemStage:
        """The epilogue's register -> smem step from the accumulator ``src`` into the staging
        buffer ``dst`` (``(epi_m, epi_n, stages)``); see :class:`SmemStage`.

        Raises:
            argus_cutlass.errors.DslError: see :func:`validate_staging` (``op`` not
                ``stmatrix``/``st.shared``, ``num`` not 2/4 for stmatrix, ``matrix_order`` not a
                permutation, ``store_wait`` < 0, ``dst`` not an ``(epi_m, epi_n, stages)`` smem tensor).
        """
        loc = caller_loc()
        if len(dst.shape) != 3:
            _dsl_error("dsl.layout_size", loc, f"staging buffer {dst.name!r} has shape {dst.shape}; "
                       "expected (epi_m, epi_n, stages)")
        order = tuple(range(num)) if matrix_order is None else tuple(matrix_order)
        wait = dst.shape[2] - 1 if store_wait is None else store_wait
        node = SmemStage(src, dst.name, dst.shape[0], dst.shape[1], op, num, trans, row_lane_skew, order, wait, loc)
        validate_staging(node, dst)
        self._staging = node
        return node

    def tile_schedule(self, *, raster: str, swizzle: int, decomposition: str = "persistent",
                      step_delta: int = 0, cluster_m: int = 1, cluster_n: int = 1, splits: int = 1) -> TileSchedule:
        """The persistent tile scheduler (see :class:`TileSchedule`).

        Raises:
            argus_cutlass.errors.DslError: see :func:`validate_schedule` (unknown raster or
                decomposition, swizzle not 1/2/4/8, cluster or splits not ints >= 1, splits > 1
                without split-K, unknown mutation keys).
        """
        node = TileSchedule(raster, swizzle, step_delta, decomposition, caller_loc(), cluster_m, cluster_n, splits)
        self._schedule = node
        return node

    def build(self) -> DslProgram:
        return DslProgram(self.name, self.stages, tuple(self._tensors), tuple(self._loads),
                          tuple(self._reads), tuple(self._asserts), self._pipeline, self._kloop,
                          self._epilogue, self._schedule, tuple(self._stores), self._staging)
