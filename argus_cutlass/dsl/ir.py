"""The program model: frozen IR nodes of a Hopper tile program, and :class:`Program`.

One :class:`Program` per kernel is the single source of truth: the verifier proves it, the
resource rules and the cost model measure it, the kernel name hashes it and the Jinja templates
print it node by node (``templates/<family>/``). A field that no template prints and no rule
reads has no business here; the coupling test (``tests/unit/test_coupling.py``) mutates every
field of every node and requires the emitted ``.cu`` to change (or a ``static_assert`` in it to
fire).

Values carry **tags**: named integer fields every element holds, e.g. ``A:(m,k)`` for operand A's
element at gmem row ``m``, column ``k``, ``stage:(iter)`` for the producer iteration that filled a
pipeline stage, ``acc:(m,n)`` for an accumulator. Copies and MMAs are **tag functions** (where does
each element go); **tag assertions** state relations at use sites (``A.k == B.k`` at every MMA
slot, ``A.m == acc.m``); **relations** state consistency between nodes (a pipeline's stage count
equals its buffers' stage extent, the k loop's step equals the MMA's K...).

Node kinds (each records the :class:`SourceLoc` of the statement that made it):

================== ==========================================================================
:class:`Tensor`     gmem / smem / rmem tensor: shape by mode, dtype, tag, smem placement
:class:`TmaLoad`    TMA tile load gmem -> smem (box, swizzle, multicast, pipeline it completes on)
:class:`TmaStore`   TMA store smem -> gmem (the epilogue)
:class:`Mma`        a tiled warpgroup MMA (GMMA op, SS or RS, warpgroups along M, repetitions)
:class:`MmaRead`    one operand slot map of an MMA: smem view (descriptor) or register fragment
:class:`FragmentConvert` accumulator -> A-operand register fragment (RS-mode MMA input)
:class:`Reduction`  row reduction across the threads of a quad (shuffles) on a register tensor
:class:`Pipeline`   an mbarrier producer/consumer pipeline (full/empty barriers per stage)
:class:`KLoop`      a loop with a symbolic trip count (k tiles of the mainloop)
:class:`Role`       warp-specialized role: warpgroups, issuing warps, ``setmaxnreg`` registers
:class:`NamedBarrier` a ``bar.sync``/``bar.arrive`` barrier id and its thread count
:class:`TurnOrder`  warpgroups taking turns at program points through named barriers (ping-pong)
:class:`EpilogueStore` accumulator register -> output coordinate map (and residue mask)
:class:`EpilogueSource` how the epilogue reads C (``beta * C``)
:class:`SmemStage`  epilogue register -> smem staging (stmatrix / st.shared)
:class:`Mask`       attention's score mask (key bound, causal diagonal) on the S accumulator
:class:`OnlineSoftmax` attention's running max / sum over kv blocks and the rescale of O
:class:`RowOutput`  attention's epilogue: O / l stored by row, LSE per row
:class:`TileSchedule` the persistent tile scheduler's walk and work decomposition
:class:`Launch`     threads per CTA and the cluster shape of the launch
:class:`StageCopy`  aligned staging of a caller operand around the GEMM (copy in / copy back)
:class:`TagAssertion` a relation between tags at every slot of a program point
:class:`Relation`   a relation between two node fields (consistency between nodes)
================== ==========================================================================

Shapes are by mode: (MN, K) for operands, (MN, K, stage) for smem stage buffers, (M, N) for the
output. Offsets are in elements unless the name says bytes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import os
from dataclasses import dataclass, field
from typing import Any, Literal

from argus_cutlass.dsl.atoms import GmmaOp, GmmaSmemAtom, TmaCopy

Space = Literal["gmem", "smem", "rmem"]

_DSL_DIR = os.path.dirname(os.path.abspath(__file__))
#: field metadata: the field is left out of :meth:`Program.fingerprint` while it holds its default
#: (fields added for a later family keep the earlier families' kernel names unchanged)
_CANON_SKIP = {"canon_skip_default": True}

#: the L2 cache hints a TMA load may carry (:attr:`TmaLoad.cache_hint`; CuTe ``TMA::CacheHintSm90``)
CACHE_HINTS = ("evict_normal", "evict_first", "evict_last")
#: bytes per element of each dtype name
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
#: the Program attributes that hold one node (or None)
SINGLE_NODES = ("epilogue", "source", "staging", "schedule", "launch", "mask", "softmax", "output")
#: relations a TagAssertion or Relation may state
RELATIONS = ("==", "!=", "<=", "<", ">=", ">", "divides", "in_range", "bijection", "disjoint")


@dataclass(frozen=True)
class SourceLoc:
    """``file:line`` (and function) of the DSL statement that created a node."""

    file: str
    line: int
    function: str = ""

    def __str__(self) -> str:
        """``argus_cutlass/kernels/gemm/program.py:101`` for the package's own files (wherever it is
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


# --------------------------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Tensor:
    """A tensor in gmem, smem or registers.

    Attributes:
        name: unique name in the program (``gA``, ``sA``, ``accum``...).
        space: ``gmem``, ``smem`` or ``rmem``.
        shape: extent per mode: ints, or symbolic size names for gmem (``("M", "K")``).
        dtype: element type name (``bf16``, ``fp16``, ``fp32``).
        tag: the tag each element carries (``None`` when untagged).
        major: gmem: the contiguous mode's name (``"K"``, ``"M"``, ``"N"``); the tensor map and
            the host entry's strides are printed from it. ``""`` elsewhere.
        binding: gmem: the host entry argument that holds it (``"A"``..``"D"``; under swap-AB the
            kernel's A is the caller's B). ``""`` elsewhere.
        base_bytes: smem: byte offset of element 0 from the CTA's (1024-byte aligned) dynamic
            shared memory.
        align_bytes: smem: the alignment ``base_bytes`` must have (the swizzle period of the
            views that touch it; rule ``smem.alignment``).
    """

    name: str
    space: Space
    shape: tuple[Any, ...]
    dtype: str
    tag: Tag | None
    loc: SourceLoc
    major: str = ""
    binding: str = ""
    base_bytes: int = 0
    align_bytes: int = 16

    def __post_init__(self) -> None:
        validate_tensor(self)

    @property
    def elem_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def size_bytes(self) -> int:
        """Bytes of a tensor with an all-int shape (smem / rmem)."""
        n = 1
        for s in self.shape:
            n *= int(s)
        return n * self.elem_bytes


@dataclass(frozen=True)
class SmemView:
    """How a reader or writer addresses an smem buffer: a GMMA smem atom tiled to ``shape``
    (CuTe ``tile_to_shape(Atom, Shape, Step)``; CUTLASS: K-major atoms repeat along MN first,
    MN-major atoms along K first, stages outermost).

    ``layout`` is the (mode...) -> element offset function (swizzle included) that the
    verifier evaluates; the template prints the same atom, shape and order as CuTe types.
    """

    atom: GmmaSmemAtom
    shape: tuple[int, ...]

    @property
    def order(self) -> tuple[int, ...]:
        rest = tuple(range(3, len(self.shape) + 1))
        return ((1, 2) if self.atom.major == "K" else (2, 1)) + rest

    @property
    def layout(self) -> Any:
        from argus_cutlass.layout.gmma import view_layout

        return view_layout(self.atom, self.shape, self.order)

    @property
    def swizzle_bytes(self) -> int:
        return self.atom.swizzle_bytes


# ------------------------------------------------------------------------------------------- copies


@dataclass(frozen=True)
class TmaLoad:
    """Tag function of a TMA tile load: gmem tile element (mn, k) of k-tile ``iter`` -> smem.

    The destination gets the source tag ``(mn0 + mn, k + iter * tile_k)`` (``mn0`` the tile's
    block along ``block_mode``) and the stage tag ``(iter)`` at stage ``iter % stages``.
    Hardware semantics (PTX ISA 9.7.9.25, tensor-map swizzle modes): the stage is cut into boxes
    ``copy.box = (inner, outer)`` (inner is the contiguous gmem mode: K for K-major, MN for
    MN-major), numbered MN-block fastest for K-major and K-block fastest for MN-major; box ``b``
    lands ``b * inner * outer`` elements after the stage start, element ``(i, j)`` of a box at
    ``j * inner + i``; the **absolute** byte address is then swizzled with
    ``Swizzle<log2(swizzle_bytes/16),4,3>``.

    Multicast (``copy.multicast > 1``): the CTAs of the cluster that share the operand along
    ``share_axis`` (``"n"``: A, ``"m"``: B) deal the stage's boxes among themselves in
    ``copy.multicast`` contiguous slices: the CTA whose coordinate along ``slice_axis`` is ``s``
    issues slice ``s`` with a ``ctaMask`` naming every CTA along ``mask_axis`` (itself too unless
    ``mask_self`` is False); a cluster coordinate ``(i, j)`` becomes a mask bit by ``rank_order``
    (``"col"``: ``i + j * cluster_m``, ``"row"``: ``i * cluster_n + j``), which must be the
    inverse of the tile scheduler's in-cluster placement.

    Attributes:
        pipeline: the :class:`Pipeline` whose full barrier the load completes on.
        block_mode: the output tile coordinate that picks the gmem block (``"m"`` for A, ``"n"``
            for B; ``"none"``: the load's MN block does not follow the output tile, e.g.
            attention's K and V, whose blocks follow the kv loop): the operand-identity knob.
        advance: the mode the loop iteration moves the box along: ``"k"`` (GEMM: k-tile
            ``iter`` reads k ``iter * tile_k`` onward), ``"mn"`` (attention's K: kv block
            ``iter`` reads keys ``iter * tile_mn`` onward) or ``"none"`` (loaded once per output
            tile: attention's Q).
        head: the head coordinate of an attention load: ``"q"`` (the tile's query head) or
            ``"kv"`` (its kv head, ``head // (heads / kv_heads)``, grouped-query attention);
            ``""`` for loads without a head mode (GEMM).
        block_shift: the load reads the loop's block ``iter + block_shift`` (0 in a correct
            kernel: the knob that pairs attention's V block with its P block).
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
    pipeline: str = "mainloop"
    block_mode: str = "m"
    #: cluster shape (CTAs along M, along N) and, for a multicast load, the cluster mode along
    #: which the CTAs share this operand ("n" for A, "m" for B; "" = not multicast)
    cluster: tuple[int, int] = (1, 1)
    share_axis: str = ""
    slice_axis: str = ""
    mask_axis: str = ""
    mask_self: bool = True
    rank_order: str = "col"
    advance: str = "k"
    head: str = ""
    block_shift: int = 0
    #: grouped GEMM (family ``moe``): the gmem rows one expert owns in this operand (``2I`` for
    #: W13, ``H`` for W2): the block origin is ``expert * expert_rows + ...``; 0: not grouped
    expert_rows: int = field(default=0, metadata=_CANON_SKIP)
    #: grouped GEMM (family ``moe``): the experts this operand holds (W13 is ``(E, 2I, H)``, W2 ``(E, H, I)``): its
    #: tensor map has ``experts * expert_rows`` rows (printed ``kExperts<X>``); set with ``expert_rows`` (0: not
    #: grouped). Rule ``moe.launch`` requires the layer's ``E`` (the routing's id range) to be this count
    experts: int = field(default=0, metadata=_CANON_SKIP)
    #: grouped GEMM: the tile reads expert ``expert + expert_shift`` (0 in a correct kernel)
    expert_shift: int = field(default=0, metadata=_CANON_SKIP)
    #: paired halves (SwiGLU gate+up): tile rows ``[0, tile_mn/2)`` read rows ``origin + r`` and rows
    #: ``[tile_mn/2, tile_mn)`` read ``origin + pair_offset + r - tile_mn/2`` (the up rows, ``I``
    #: after the gate rows); 0: one contiguous block
    pair_offset: int = field(default=0, metadata=_CANON_SKIP)
    #: the L2 eviction priority of the load's lines (the TMA instruction's ``.L2::cache_hint`` operand, PTX ISA
    #: 9.7.9.25; CuTe ``TMA::CacheHintSm90``): ``"evict_normal"``, ``"evict_first"`` (data read once, e.g. a
    #: small-T MoE layer's expert weights: they replace each other in L2 rather than the lines already there)
    #: or ``"evict_last"``. Performance only: every hint loads the same bytes
    cache_hint: str = field(default="evict_normal", metadata=_CANON_SKIP)
    #: grouped GEMM (family ``moe``), the permuted rows' operand: ``""`` (the box covers the tile's rows of a 2-D
    #: map) or ``"tile_rows"``: the host encodes the operand's map 3-D, ``(inner, tile_mn rows, m-tiles)``, and the
    #: box of tile row ``r0`` sits at ``(k, r0 + tile_mn - valid + row_shift_delta, tm)`` with ``valid`` = the
    #: m-tile's routed rows (the routing's ``tile_rows[tm]``; the routing puts a group's padding rows before its
    #: routed rows, ``group_padding "before"``, so they end the m-tile): the box's last ``tile_mn - valid`` rows
    #: are past the map's extent, so TMA zero-fills them without reading memory and still completes the whole
    #: box's transaction bytes (PTX ISA 9.7.9.25, cp.async.bulk.tensor: out-of-bound elements are filled); tile
    #: row ``r`` then holds m-tile row ``r + tile_mn - valid``. The epilogue's store must shift by the same amount
    #: (:attr:`TmaStore.row_bound`; rule ``moe.group_tiles``). Coordinates stay non-negative: a TMA store at a
    #: negative row coordinate faulted on the H200 (illegal instruction, session 41)
    row_bound: str = field(default="", metadata=_CANON_SKIP)
    #: added to the ``tile_rows`` box row coordinate (0 in a correct kernel: the mutation knob)
    row_shift_delta: int = field(default=0, metadata=_CANON_SKIP)

    def __post_init__(self) -> None:
        validate_load(self)

    @property
    def boxes(self) -> int:
        """Boxes per stage (``tile_mn * tile_k / (inner * outer)``, rounded up)."""
        per_box = self.copy.box[0] * self.copy.box[1]
        return -(-(self.tile_mn * self.tile_k) // per_box)

    def write_offsets(self, mn: Any, k: Any, stage: Any, base_bytes: int, elem_bytes: int) -> Any:
        """Element offset (from the buffer base) where tile element (mn, k) of ``stage`` lands.

        Works on ints and numpy integer arrays; the semantics is
        :func:`argus_cutlass.hw.semantics.tma_box_offset` (shared with the SMT tier).
        """
        from argus_cutlass.hw.semantics import INT_OPS, tma_box_offset

        return tma_box_offset(INT_OPS, self, mn, k, stage, base_bytes, elem_bytes)


@dataclass(frozen=True)
class TmaStore:
    """The epilogue's TMA store: staged smem tile element (mn, k) of ``stage`` -> gmem.

    The same box semantics as :class:`TmaLoad` in the other direction (PTX ISA 9.7.9.25,
    ``cp.async.bulk.tensor`` shared::cta -> global): gmem element (mn, k) of the subtile is
    read from the smem element the box model places it at. ``mn``/``k`` are the subtile's
    (M, N) modes; ``major`` is ``"K"`` when N is contiguous in gmem (row-major D) and ``"MN"``
    when M is (the swap-AB column-major view). Stores past the tensor map's extent are
    clipped by the hardware.
    """

    name: str
    src: str
    dst: str
    copy: TmaCopy
    major: str
    tile_mn: int
    tile_k: int
    loc: SourceLoc
    #: grouped GEMM (family ``moe``): ``""`` (a 2-D map; subtile row ``r0`` at gmem row ``tm * tile_m + r0``) or
    #: ``"tile_rows"``: the 3-D map ``(N, tile_m rows, m-tiles)``, the subtile of rows ``r0..`` stored at ``(n,
    #: r0 + tile_m - valid + row_shift_delta, tm)``, ``valid`` = the m-tile's routed rows: the accumulator rows a
    #: ``tile_rows`` A load filled (out of bounds) are out of bounds here too and clipped (not written), so only the
    #: routed rows are stored (:attr:`TmaLoad.row_bound`)
    row_bound: str = field(default="", metadata=_CANON_SKIP)
    #: added to the ``tile_rows`` store's row coordinate (0 in a correct kernel: the mutation knob)
    row_shift_delta: int = field(default=0, metadata=_CANON_SKIP)

    def __post_init__(self) -> None:
        _check_row_bound(self)
        if self.copy.kind != "store" or self.copy.multicast != 1:
            _dsl_error("dsl.operand", self.loc, f"{self.name}: a TMA store is copy kind 'store' with multicast 1, "
                       f"got kind {self.copy.kind!r}, multicast {self.copy.multicast}")
        if self.major not in ("K", "MN"):
            _dsl_error("dsl.operand", self.loc, f"{self.name}: major {self.major!r}: expected 'K' or 'MN'")

    @property
    def boxes(self) -> int:
        per_box = self.copy.box[0] * self.copy.box[1]
        return -(-(self.tile_mn * self.tile_k) // per_box)


# ---------------------------------------------------------------------------------------------- MMA


@dataclass(frozen=True)
class MmaRead:
    """An MMA operand slot map. SS mode: the MMA reads tile element (mn, k) of ``stage`` from
    smem ``src`` through its **own** view ``view`` (the descriptor's layout; normally the same
    atom the TMA writes with). RS mode (A only): ``src`` is a register fragment tensor and
    ``view`` is ``None`` (the PTX A-fragment layout, PTX ISA 9.7.15.5.2).

    ``op`` is the GMMA atom (``op.m`` rows of A per warpgroup, ``op.n`` columns of B,
    ``op.k`` per k-block); ``warpgroups`` tile the MN mode (``Mma.atoms_m`` for A).
    ``warp_stage_skew`` models how each warp of a warpgroup picks the stage whose descriptor
    it passes to ``wgmma`` (PTX ISA 9.7.15.5: the descriptor operands must be the same in
    every warp of the warpgroup; invariant G7).
    """

    name: str
    operand: str  # "A" or "B"
    src: str
    view: SmemView | None
    op: GmmaOp
    tile_mn: int
    tile_k: int
    warpgroups: int
    loc: SourceLoc
    mma: str = "mainloop"
    warp_stage_skew: tuple[int, int, int, int] = (0, 0, 0, 0)

    def __post_init__(self) -> None:
        for w, skew in enumerate(self.warp_stage_skew):
            check_c_remainder_operand(skew, f"MMA read {self.name!r}: warp_stage_skew[{w}]", self.loc)

    @property
    def layout(self) -> Any:
        """(MN, K, stage) -> element offset of the read (the view's layout)."""
        return None if self.view is None else self.view.layout


@dataclass(frozen=True)
class Mma:
    """A tiled warpgroup MMA: ``atoms_m`` warpgroups along M; warpgroup ``w`` computes rows
    ``op.m * (rep * atoms_m + w)`` for ``rep < reps_m`` (CuTe ``make_tiled_mma(op,
    Layout<Shape<atoms_m, 1, 1>>)`` repeated over the tile), ``tile_n = op.n`` columns, into the
    fp32 register tensor ``acc``.

    ``a`` / ``b`` name the :class:`MmaRead` nodes of the operands. PTX ISA 9.7.15 (wgmma).
    """

    name: str
    op: GmmaOp
    a: str
    b: str
    acc: str
    atoms_m: int
    reps_m: int
    loc: SourceLoc

    @property
    def tile_m(self) -> int:
        return self.op.m * self.atoms_m * self.reps_m

    @property
    def threads(self) -> int:
        return 128 * self.atoms_m


@dataclass(frozen=True)
class FragmentConvert:
    """Accumulator -> A-operand register fragment (RS-mode input), with a dtype conversion.

    The m64nNk16 fp32 accumulator of a thread and the m64k16 A fragment of the same thread
    cover the same (row, column) pairs (PTX ISA 9.7.15.4 / 9.7.15.5.2), so the conversion is a
    register-local repack: accumulator registers ``4j..4j+3`` (columns ``8j..8j+7``) become A
    registers of k-block ``j // 2``. ``pairing`` lists, per A register pair, the accumulator
    pair it takes (identity in a correct kernel: the planted-mistake knob).
    """

    name: str
    src: str
    dst: str
    dtype: str
    loc: SourceLoc
    pairing: tuple[int, ...] = ()


@dataclass(frozen=True)
class Reduction:
    """A row reduction of a register tensor across a quad (``shfl.xor`` by each of ``xor_lanes``)
    after the thread-local reduction over its own registers of the row.

    With the m64nN accumulator layout, the 4 lanes ``4q..4q+3`` hold row ``q`` (and ``q + 8``)
    of their warp's 16 rows, so shuffles by lane masks 1 and 2 reduce exactly one row
    (invariant "row ownership").
    """

    name: str
    src: str
    op: str  # "max" or "sum"
    xor_lanes: tuple[int, ...]
    loc: SourceLoc


# --------------------------------------------------------------------------------- synchronisation


@dataclass(frozen=True)
class PipelineSide:
    """One side's ``PipelineState`` of a pipeline.

    Attributes:
        start_phase: phase the side's state starts with (CUTLASS: producer 1, consumer 0).
        wrap: index at which ``operator++`` wraps to 0 and flips the phase (the stage count).
        carry_across_tiles: the state persists across the persistent kernel's output tiles
            (CUTLASS: yes); ``False`` re-creates it per tile.
    """

    start_phase: int
    wrap: int
    carry_across_tiles: bool = True


@dataclass(frozen=True)
class Pipeline:
    """An mbarrier pipeline between a TMA producer and MMA consumers (CUTLASS
    ``PipelineTmaAsync`` semantics): one *full* and one *empty* barrier per stage.

    Attributes:
        name: the pipeline's name (``mainloop``; attention has ``k`` and ``v``).
        stages: stage buffers (S).
        buffers: the smem tensors it guards (each ``(MN, K, S)``).
        loads: names of the TMA loads that fill a stage (their boxes make the real bytes).
        tx_bytes: bytes the producer's ``arrive.expect_tx`` announces per stage fill.
        producer_arrivals: arrival count the *full* barrier is initialised with.
        consumer_arrivals: arrival count the *empty* barrier is initialised with.
        consumer_arrivers: arrivals one stage's release makes (consumer warpgroups reading a
            stage x CTAs whose smem the stage's loads write).
        producer, consumer: each side's :class:`PipelineSide`.
        mma_in_flight: wgmma batches the consumer leaves outstanding after issuing an
            iteration's batch (``wgmma.wait_group N``; CUTLASS ``K_PIPE_MMAS`` = 1).
        release_lag: after iteration ``i`` the consumer releases the stage of iteration
            ``i - release_lag``. Safe iff ``release_lag >= mma_in_flight`` (PTX ISA 9.7.15.7).
        barrier_bytes: smem byte offset of the ``2 * stages`` mbarriers (full, then empty).
    """

    name: str
    stages: int
    buffers: tuple[str, ...]
    loads: tuple[str, ...]
    tx_bytes: int
    producer_arrivals: int
    consumer_arrivals: int
    consumer_arrivers: int
    producer: PipelineSide
    consumer: PipelineSide
    loc: SourceLoc
    mma_in_flight: int = 1
    release_lag: int = 1
    barrier_bytes: int = 0


@dataclass(frozen=True)
class KLoop:
    """A loop with a symbolic trip count: the mainloop's ``k_tiles(K)`` k-tiles of ``tile_k``
    (the TMA coordinate step), each read as ``k_blocks`` MMA k-blocks of ``block_k``.

    Attributes:
        name: ``k``.
        rounding: ``ceil`` (``ceil_div(K, tile_k)`` k-tiles) or ``floor``.
        oob_fill: what TMA writes for box elements past the tensor's extent: ``zero``
            (``CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE``) or ``nan``
            (``CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA``).
        bound_bits: the proofs over the symbolic size hold for ``K < 2**bound_bits``; the host
            entry refuses a larger K (``problem.k_range``).
        acc_sets: independent accumulator sets of each consumer warpgroup: k-block ``b`` of every
            k-tile accumulates into set ``b % acc_sets`` (1: the one accumulator). The wgmmas of one
            set depend on each other through their accumulator; ``acc_sets`` sets make ``acc_sets``
            independent chains, so a narrow tile (whose wgmma is short) is not bound by one chain's
            latency. Must divide ``k_blocks`` (a set's index is then a constant of the unrolled
            k-block loop: no dynamically indexed registers).
        acc_zeroed: the leading k-blocks of k-tile 0 that start their set with ``ScaleOut::Zero``
            (overwrite instead of add): ``acc_sets`` in a correct kernel, one per set
            (rule ``k.acc_sets``).
        acc_summed: the sets added into set 0 after the k loop, in order: ``(1, ..., acc_sets - 1)``
            in a correct kernel (rule ``k.acc_sets``).
    """

    name: str
    tile_k: int
    block_k: int
    k_blocks: int
    rounding: str
    oob_fill: str
    loc: SourceLoc
    bound_bits: int = 24
    acc_sets: int = field(default=1, metadata=_CANON_SKIP)
    acc_zeroed: int = field(default=1, metadata=_CANON_SKIP)
    acc_summed: tuple[int, ...] = field(default=(), metadata=_CANON_SKIP)

    def __post_init__(self) -> None:
        if self.rounding not in ("ceil", "floor"):
            _dsl_error("dsl.operand", self.loc, f"k loop rounding {self.rounding!r}: expected 'ceil' or 'floor'")
        if self.oob_fill not in ("zero", "nan"):
            _dsl_error("dsl.operand", self.loc, f"k loop oob_fill {self.oob_fill!r}: expected 'zero' or 'nan'")
        if not isinstance(self.bound_bits, int) or not 1 <= self.bound_bits <= 30:
            _dsl_error("dsl.operand", self.loc, f"k loop bound_bits {self.bound_bits!r}: expected an int in [1, 30] "
                       "(the host entry takes K as int32 and computes 1 << bound_bits as an int)")
        for f in ("acc_sets", "acc_zeroed"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                _dsl_error("dsl.operand", self.loc, f"k loop {f} {v!r}: expected a positive int")
        if isinstance(self.k_blocks, int) and self.k_blocks > 0 and self.k_blocks % self.acc_sets:
            _dsl_error("dsl.operand", self.loc, f"k loop acc_sets {self.acc_sets} does not divide k_blocks "
                       f"{self.k_blocks}: a set's index would vary across k-tiles (dynamically indexed registers)")
        if isinstance(self.k_blocks, int) and self.acc_zeroed > self.k_blocks:
            _dsl_error("dsl.operand", self.loc, f"k loop acc_zeroed {self.acc_zeroed} > k_blocks {self.k_blocks}: "
                       "only k-blocks of k-tile 0 can start a set")
        if not isinstance(self.acc_summed, tuple) or not all(
                isinstance(x, int) and not isinstance(x, bool) and 1 <= x < self.acc_sets for x in self.acc_summed):
            _dsl_error("dsl.operand", self.loc, f"k loop acc_summed {self.acc_summed!r}: expected a tuple of set "
                       f"indices in [1, {self.acc_sets})")


@dataclass(frozen=True)
class Role:
    """A warp-specialized role: the warpgroups that play it, the warps of each that issue
    (``issue_warps``; all 4 for MMA consumers), and the per-thread register count it sets with
    ``setmaxnreg`` (PTX ISA 9.7.17.1: a multiple of 8 in [24, 256]; ``inc`` for consumers,
    ``dec`` for the producer)."""

    name: str
    kind: str  # "producer" or "consumer"
    warpgroups: tuple[int, ...]
    issue_warps: tuple[int, ...]
    regs: int
    loc: SourceLoc

    def __post_init__(self) -> None:
        if self.kind not in ("producer", "consumer"):
            _dsl_error("dsl.operand", self.loc, f"role {self.name!r}: kind {self.kind!r}: expected 'producer' or 'consumer'")
        if self.kind == "consumer" and tuple(self.issue_warps) != (0, 1, 2, 3):
            _dsl_error("dsl.operand", self.loc, f"role {self.name!r}: a consumer warpgroup issues wgmma from all 4 warps "
                       f"(PTX ISA 9.7.15.1), issue_warps {self.issue_warps} != (0, 1, 2, 3)")
        if self.kind == "producer" and (len(self.issue_warps) != 1 or self.issue_warps[0] not in range(4)):
            _dsl_error("dsl.operand", self.loc, f"role {self.name!r}: the producer issues from one warp of its "
                       f"warpgroup, issue_warps {self.issue_warps}")
        wg = tuple(self.warpgroups)
        if not wg or not all(isinstance(w, int) and not isinstance(w, bool) and w >= 0 for w in wg) \
                or wg != tuple(range(wg[0], wg[0] + len(wg))):
            # the templates print a role as its first warpgroup and its count (review, session 44: (1, 3) printed as
            # (1, 2) did)
            _dsl_error("dsl.operand", self.loc, f"role {self.name!r}: warpgroups {self.warpgroups} must be consecutive "
                       "int ids >= 0 (the kernel assigns a role its first warpgroup and the next ones)")


@dataclass(frozen=True)
class NamedBarrier:
    """A hardware named barrier (``bar.sync id, threads`` / ``bar.arrive id, threads``, PTX ISA
    9.7.13.1): 16 per CTA, id 0 is ``__syncthreads``; ``threads`` a multiple of 32."""

    name: str
    id: int
    threads: int
    loc: SourceLoc


@dataclass(frozen=True)
class TurnOrder:
    """Warpgroups taking turns at program points (the ping-pong schedule, FA3 / CUTLASS
    ``OrderedSequenceBarrier``): before point ``p`` group ``g`` syncs on barrier
    ``barriers[p][g]`` (``bar.sync``, 2 x 128 threads), after it arrives on
    ``barriers[p][(g + 1) % groups]``; at start the group before ``first`` in the cycle
    (``(first - 1) % groups``) arrives on the first group's barrier of every point. Each point is one independent chain, so groups that
    run an unequal number of tiles never wait for a turn that nobody gives.
    """

    name: str
    groups: int
    points: tuple[str, ...]
    barriers: tuple[tuple[str, ...], ...]
    first: int
    loc: SourceLoc

    def __post_init__(self) -> None:
        if not _positive_int(self.groups) or self.groups < 2:
            _dsl_error("dsl.operand", self.loc, f"turn order {self.name!r}: groups {self.groups!r} must be an int >= 2")
        shaped = (isinstance(self.points, tuple) and all(isinstance(x, str) for x in self.points)
                  and isinstance(self.barriers, tuple) and all(isinstance(r, tuple) for r in self.barriers))
        if not shaped or len(set(self.points)) != len(self.points) or len(self.barriers) != len(self.points) or any(
                len(row) != self.groups for row in self.barriers):
            _dsl_error("dsl.layout_size", self.loc, f"turn order {self.name!r}: need one row of {self.groups} barriers "
                       f"per distinct point {self.points}, got {self.barriers}")
        if not isinstance(self.first, int) or not 0 <= self.first < self.groups:
            _dsl_error("dsl.operand", self.loc, f"turn order {self.name!r}: first {self.first!r} is not a group")


# ------------------------------------------------------------------------------------------ epilogue


@dataclass(frozen=True)
class EpilogueStore:
    """Accumulators -> D for one output tile.

    Consumer warpgroup ``w`` (of ``warpgroups`` splitting the tile along M; 1 for ping-pong)
    holds, in thread ``t`` and register ``r`` of repetition ``rep``, the accumulator at the tile
    coordinate that CuTe's ``CLayout_64xN`` gives (PTX ISA 9.7.15.4; rows ``64 * (rep *
    warpgroups + w)`` onward). The epilogue stores that register at the same coordinate with its
    row shifted by ``row_offset`` modulo the 64-row atom (0 in a correct kernel: the knob a
    planted mistake turns). Subtiles of ``epi_m x epi_n`` are walked ``epi_m`` fastest. With
    ``residue_mask`` an element whose global coordinate lies outside ``M x N`` is never written
    (the TMA store clips at the tensor map's extent; direct stores test it).

    Attributes:
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
    epi_m: int = 0
    epi_n: int = 0
    acc: str = "accum"
    dst: str = "gD"
    #: fused activation (family ``moe``): ``""`` (store acc), ``"swiglu"`` (store ``silu(acc[i]) *
    #: acc[i + act_pair]``: gate in register i, up in register ``i + act_pair``; ``tile_n`` is then
    #: the *output* tile, half the accumulator's columns), ``"swiglu_swapped"`` (``silu(up) * gate``,
    #: a planted mistake)
    act: str = field(default="", metadata=_CANON_SKIP)
    act_pair: int = field(default=0, metadata=_CANON_SKIP)

    def __post_init__(self) -> None:
        check_c_remainder_operand(self.row_offset, "epilogue row_offset", self.loc)


@dataclass(frozen=True)
class EpilogueSource:
    """How the epilogue reads C for ``D = alpha * acc + beta * C`` (only when ``beta != 0``).

    ``path`` is ``gmem`` (each thread loads the C element at its accumulator's coordinate, masked
    by the residue when ``residue_mask``) or ``none`` (C is never read: wrong unless beta is 0).
    ``row_offset`` shifts the row it reads (0 in a correct kernel).
    """

    src: str
    path: str
    residue_mask: bool
    row_offset: int
    loc: SourceLoc

    def __post_init__(self) -> None:
        check_c_remainder_operand(self.row_offset, "epilogue source row_offset", self.loc)


@dataclass(frozen=True)
class SmemStage:
    """The epilogue's register -> shared-memory step (staging for the TMA store).

    Every consumer warp stores its accumulator registers of each ``epi_m x epi_n`` subtile
    into the staging buffer ``dst`` through ``view`` (shape ``(epi_m, epi_n, stages)``); subtile
    ``q`` (``epi_m`` fastest) goes to stage ``q mod stages``.

    ``op`` is ``"stmatrix"`` (``stmatrix.sync.aligned.m8n8.x{num}[.trans].shared.b16``, 16-bit
    outputs) or ``"st.shared"`` (one store per element: 32-bit outputs). One stmatrix (``.x2``
    or ``.x4``) covers, per warp, a block of 16 rows x ``4 * num`` columns of its accumulator;
    matrix ``i`` is the 8x8 block at row ``8 * (i % 2)`` and column ``8 * (i // 2)``. Lane ``L``
    supplies the smem address of row ``L % 8`` of matrix ``(L // 8 + row_lane_skew) % num`` (a
    row runs along N, or along M with ``trans``); register ``i`` of an instruction carries the
    accumulator pair of matrix ``matrix_order[i]``. ``row_lane_skew = 0`` and the identity order
    are the correct kernel.

    ``store_wait`` is the number of TMA stores the epilogue lets stay in flight
    (``cp.async.bulk.wait_group.read``) before it overwrites a stage: at most ``stages - 1``.
    ``barrier`` names the :class:`NamedBarrier` the consumer threads sync on around the store
    (one per consumer warpgroup for ping-pong: ``barrier`` + the group index).
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
    view: SmemView | None = None
    barrier: str = "epilogue"


# ------------------------------------------------------------------------------- aligned staging


#: operand staging directions: ``in`` (caller -> staged, before the GEMM), ``out`` (staged -> caller, after it)
STAGE_DIRECTIONS = ("in", "out")
#: which pitch a staging copy addresses a side with: the caller's leading dimension or the staged one
STAGE_PITCHES = ("caller", "staged")


@dataclass(frozen=True)
class StageCopy:
    """Aligned staging of one caller operand around the TMA GEMM (the any-alignment path).

    The operand's storage is ``rows x cols`` elements (the caller's size names, e.g. column-major
    A is stored ``K x M``: ``rows="K"``, ``cols="M"``) with row pitch the caller's leading
    dimension. The entry allocates a stream-ordered buffer (``cudaMallocAsync``) of ``rows x
    staged_ld`` elements, ``staged_ld = round_up(cols, align)``, at a byte offset of the workspace
    that is a multiple of ``base_align``; the GEMM's tensor map over it has pitch ``staged_ld`` and
    contiguous extent ``staged_ld`` (``map_extent`` ``staged``) or ``cols`` (``true``).

    ``direction`` ``in``: before the GEMM a copy kernel writes staged ``(r, c) = caller (r, c)`` for
    ``c < cols`` and, with ``fill`` ``zero``, ``0`` for ``cols <= c < staged_ld`` (the padded k of a
    K-contiguous operand then adds nothing). ``out`` (D): the GEMM writes the staged buffer and,
    after it, the copy writes caller ``(r, c) = staged (r, c)`` for ``r < rows, c < cols`` only.

    The copy kernel (``templates/gemm/stage.j2``) has ``threads`` threads per block; block
    ``(x, y)`` of a grid of at most ``grid_x x grid_y`` blocks walks rows ``y, y + grid.y, ...``
    and columns ``x * threads + t, ... + grid.x * threads`` of ``[0, rows + row_delta) x [0,
    fill_cols)`` with ``fill_cols = staged_ld`` (fill ``zero``) or ``cols + col_delta``; it reads
    its source with the ``src_pitch`` side's leading dimension and writes its destination with the
    ``dst_pitch`` side's. ``row_delta = col_delta = 0``, ``src_pitch`` ``caller`` / ``dst_pitch``
    ``staged`` (in) or the reverse (out) is the correct kernel; the other values state mistakes.
    """

    name: str
    operand: str
    direction: str
    dtype: str
    rows: str
    cols: str
    align: int
    fill: str
    map_extent: str
    src_pitch: str
    dst_pitch: str
    loc: SourceLoc
    row_delta: int = 0
    col_delta: int = 0
    base_align: int = 256
    threads: int = 256
    grid_x: int = 64
    grid_y: int = 65535

    def __post_init__(self) -> None:
        validate_stage_copy(self)

    @property
    def elem_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    def staged_ld(self, cols: int) -> int:
        """The staged leading dimension (elements) for a contiguous extent of ``cols``."""
        return -(-cols // self.align) * self.align


# ----------------------------------------------------------------------------------- attention


@dataclass(frozen=True)
class Mask:
    """Attention's score mask: ``S(q, key) := -inf`` where row ``q`` may not attend ``key``
    (coordinates inside one (batch, head); ``Lq`` / ``Lk`` the batch's query / key counts, ``Lk``
    = ``seqused_k`` when given).

    * ``key_bound``: keys ``>= Lk`` are masked (the last kv block may reach past the keys; TMA
      fills zeros there, which are scores of 0, not -inf).
    * ``causal``: keys ``> q + shift + diagonal_shift`` are masked, ``shift = Lk - Lq`` with
      ``bottom_right`` (FlashAttention >= 2.1, cuDNN's bottom-right diagonal) and 0 without;
      ``diagonal_shift`` is 0 in a correct kernel.

    The kernel derives from the same fields the kv blocks a tile walks (the last block holding a
    key some row of the tile may see) and the blocks it applies the mask to (those that may hold
    a masked key); the verifier proves both symbolically in the lengths (invariant FA5).
    """

    name: str
    acc: str
    causal: bool
    bottom_right: bool
    key_bound: bool
    diagonal_shift: int
    loc: SourceLoc

    def __post_init__(self) -> None:
        for f in ("causal", "bottom_right", "key_bound"):
            if not isinstance(getattr(self, f), bool):
                _dsl_error("dsl.operand", self.loc, f"mask {self.name!r}: {f} must be a bool")
        if not isinstance(self.diagonal_shift, int) or isinstance(self.diagonal_shift, bool):
            _dsl_error("dsl.operand", self.loc, f"mask {self.name!r}: diagonal_shift {self.diagonal_shift!r} must "
                       "be an int")


@dataclass(frozen=True)
class OnlineSoftmax:
    """Attention's online softmax over kv blocks (FlashAttention-2/3), per query row.

    For each kv block: ``m_new = max(m, rowmax(S) * c)`` (reduction ``max``), ``P = exp2(S * c -
    m_new)``, ``l = l * f + rowsum(P)`` (reduction ``sum``) and ``O = O * f + P V`` with ``f =
    exp2(m - m_new)``, ``c = softmax_scale * log2(e)`` when ``fold_log2e`` (``exp(x) =
    exp2(x log2 e)``, one FFMA per score: FA3 ``hopper/softmax.h``).

    Attributes:
        src: the S accumulator (fp32 registers) the softmax reads and overwrites with P.
        acc: the O accumulator the rescale factor multiplies.
        max, sum: the :class:`Reduction` nodes over ``src`` (row max, row sum).
        rescale: O and l are multiplied by ``f`` when the running max grows (FA2 "rescale").
        fold_log2e: the scale is multiplied by ``log2(e)`` so that ``exp2`` computes ``exp``.
    """

    name: str
    src: str
    acc: str
    max: str
    sum: str
    rescale: bool
    fold_log2e: bool
    loc: SourceLoc

    def __post_init__(self) -> None:
        for f in ("rescale", "fold_log2e"):
            if not isinstance(getattr(self, f), bool):
                _dsl_error("dsl.operand", self.loc, f"softmax {self.name!r}: {f} must be a bool")


@dataclass(frozen=True)
class RowOutput:
    """Attention's epilogue: each consumer thread stores its O registers, divided by the row's
    sum ``l`` (``normalize``), at row ``q`` of the tile's (batch, head) in ``dst``, and the row's
    log-sum-exp ``m ln 2 + ln l`` (fp32) in ``lse``; rows past the batch's query count are not
    stored (``row_mask``); a row with no unmasked key stores O = 0 and LSE = -inf.

    The register -> row map is CuTe's ``CLayout_64xN`` (PTX ISA 9.7.15.4) with the row shifted
    by ``row_offset`` modulo the 64-row atom (0 in a correct kernel). ``head`` is the head mode
    the store addresses (``"q"``: the query head).

    The store map: a thread's registers hold packed pairs ``P[j]`` (columns ``8 j + 2 (lane % 4)``
    and ``+ 1`` of its row, for each 8-column block ``j``). ``store_mode`` ``"direct"``: each pair is
    one 4-byte store at column ``group_cols * j + lane_cols * (lane % 4)`` (8 and 2 in a correct
    kernel). ``"quad16"``: per group ``g`` of 4 blocks the thread's words ``w[k] = P[4 g + k]`` go
    through the butterfly stages ``shuffle`` (stage mask ``b``: the lane whose bit ``b`` is set sends
    ``w[k]`` and takes the partner's word into ``w[k]``, the other sends ``w[k ^ b]`` and takes into
    ``w[k ^ b]``, for every ``k`` with ``k & b == 0``; partner ``lane ^ b`` through
    ``__shfl_xor_sync``), then ``w[0..3]`` are one 16-byte store at column ``group_cols * g +
    lane_cols * (lane % 4)`` ((2, 1), 32 and 8 in a correct kernel). Every lane shuffles; the row
    mask guards the store only.
    """

    name: str
    acc: str
    dst: str
    lse: str
    normalize: bool
    row_mask: bool
    row_offset: int
    loc: SourceLoc
    head: str = "q"
    store_mode: str = field(default="direct", metadata=_CANON_SKIP)
    shuffle: tuple[int, ...] = field(default=(), metadata=_CANON_SKIP)
    group_cols: int = field(default=8, metadata=_CANON_SKIP)
    lane_cols: int = field(default=2, metadata=_CANON_SKIP)

    def __post_init__(self) -> None:
        if self.store_mode not in ("direct", "quad16"):
            _dsl_error("dsl.operand", self.loc, f"row output {self.name!r}: store_mode {self.store_mode!r}: expected "
                       "'direct' or 'quad16'")
        if not isinstance(self.shuffle, tuple) or not all(isinstance(b, int) and not isinstance(b, bool)
                                                          for b in self.shuffle):
            _dsl_error("dsl.operand", self.loc, f"row output {self.name!r}: shuffle must be a tuple of lane masks")
        for f in ("group_cols", "lane_cols"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool):
                _dsl_error("dsl.operand", self.loc, f"row output {self.name!r}: {f} must be an int")
        for f in ("normalize", "row_mask"):
            if not isinstance(getattr(self, f), bool):
                _dsl_error("dsl.operand", self.loc, f"row output {self.name!r}: {f} must be a bool")
        check_c_remainder_operand(self.row_offset, f"row output {self.name!r}: row_offset", self.loc)
        if self.head not in ("q", "kv"):
            _dsl_error("dsl.operand", self.loc, f"row output {self.name!r}: head {self.head!r}: expected 'q' or 'kv'")


# --------------------------------------------------------------------------------- launch / schedule


@dataclass(frozen=True)
class TileSchedule:
    """The persistent tile scheduler.

    CTA ``c`` of ``grid`` takes linear work units ``c, c + step, ...`` with ``step = grid +
    step_delta`` (0 in a correct kernel); with ``consumer_stride`` = 2 (ping-pong) consumer
    warpgroup ``w`` takes every second unit of its CTA, starting with unit ``w``. A unit becomes
    an output tile through CUTLASS's walk (``raster``, ``swizzle`` = ``max_swizzle_size``,
    cluster-major blocking over ``cluster_m x cluster_n``; ``verify.decomposition``).
    ``decomposition`` is ``persistent`` (one tile per unit; our own walk over a 1-D cluster launch:
    the CTA of cluster rank ``r`` is placed at ``(r % cluster_m, r // cluster_m)`` along N-raster and
    ``(r // cluster_n, r % cluster_n)`` along M-raster), ``streamk`` or ``splitk`` (a tile's k loop
    divided among units, ``splits`` ways for split-K: CUTLASS's ``PersistentTileSchedulerSm90StreamK``
    as the building block, partial sums reduced through a global workspace, launched on CUTLASS's
    grid with a 2-D ``(cluster_m, cluster_n)`` cluster: rank ``r`` at ``(r % cluster_m, r // cluster_m)``).
    ``reduction`` (stream-K / split-K only) is CUTLASS's ``ReductionMode``: ``deterministic`` (the default: a
    tile's partials are added into the workspace one after another in k order, each waiting on the previous
    one's lock value) or ``nondeterministic`` (every middle partial waits only for the first one's store and
    adds (atomically, as in both modes) in any order: fewer serial waits, results that may differ in the last
    bits from run to run; ``sm90_tile_scheduler_stream_k.hpp`` ``fixup_helper``).

    Attention (family ``attention``): unit ``u`` is the tile ``(m_block, head, batch)`` with
    ``m_block`` fastest; ``longest_first`` walks the query blocks from the last one (causal: the
    blocks with the most keys start first, FA3's longest-processing-time-first order).
    ``decomposition`` ``dynamic`` (attention): CTA ``c`` starts with unit ``c`` and then takes unit
    ``grid + atomicAdd(counter, 1 + step_delta)`` (the counter is zeroed by the host before each
    launch), FA3's dynamic persistent scheduler; the producer publishes each unit to the consumers
    in an int32 slot per Q stage at smem byte ``slot_bytes`` (-1: no slots), written before the Q
    stage's full barrier is signalled (a unit < 0 ends the walk). Every consumer thread reads the
    slot, one thread per warpgroup releases the stage; ``slot_sync`` names the per-warpgroup named
    barriers (``<slot_sync>.<g>``, 128 threads each) the consumer warpgroups sync on between the read and
    any release of that stage ("" = none: a lagging warp, or a lane of the releasing warp, may read the
    slot after the producer overwrote it with the next unit: CUDA memory model, no order between the
    threads of a warpgroup without a barrier; rule ``scheduler.slot_release``).

    ``decomposition`` ``grouped`` (family ``moe``): ``tiles_m`` m-tiles (data: written by the
    routing kernel) by ``tiles_n`` n-blocks, ``units = tiles_m * tiles_n``. ``band_m`` 0 (the
    default) walks every m-tile at one n-block before the next n-block: unit ``u`` is m-tile
    ``u % tiles_m``, n-block ``u / tiles_m`` (``raster`` ``along_m``; ``along_n`` is the transpose).
    ``band_m`` >= 1 (``raster`` ``along_m`` only) cuts the m-tiles into bands of ``band_m``
    consecutive m-tiles (the last band holds ``tiles_m mod band_m`` when that is not 0) and walks a
    band's tiles m-fastest, then n, before the next band (Triton's ``GROUP_M``):
    ``b = u / (band_m * tiles_n)``, ``local = u - b * band_m * tiles_n``, ``first = b * band_m +
    band_start_delta``, ``rows = min(band_m, tiles_m - first)``, m-tile ``first + local % rows``,
    n-block ``local / rows``. ``band_start_delta`` (0), ``band_full_rows`` (False: ``rows =
    band_m`` in every band, the last one too) and ``band_swap`` (False: m-tile ``first + local /
    rows``, n-block ``local % rows``) state mistakes of that walk; a correct kernel has the values
    in brackets. ``band_m`` 1 is not ``band_m`` 0: one m-tile's n-blocks are consecutive units.
    ``decomposition`` ``clusterk`` (GEMM, cooperative): a thread-block cluster of ``splits`` CTAs (2..8, the
    portable cluster size; PTX ISA 9.7.12.3 ``barrier.cluster``, CUDA Programming Guide "Distributed Shared
    Memory") shares one output tile and splits its k loop: cluster ``c`` (``blockIdx.x / splits``) takes unit
    ``c`` (our walk, one unit per cluster, ``cluster_m = cluster_n = 1``: no multicast), the CTA of cluster
    rank ``r`` sums k-tiles :meth:`cluster_k_range` ``(r, k_tiles)``. The partial sums meet in shared memory,
    not in a global workspace: every rank ``r >= 1`` writes its accumulators to its own ``reduce_buffer`` (an
    smem tensor of ``tile_m x tile_n`` fp32, thread-major), the cluster barrier (arrive.release /
    wait.acquire) orders those writes before rank 0 reads them through the cluster's shared window
    (``ld.shared::cluster`` at ``mapa``), adding ranks ``reduce_from .. splits - 1`` in rank order
    (deterministic); a second cluster barrier (``reduce_release``) keeps every rank resident until rank 0 has
    read it; rank 0 alone stores D. A rank with no k-tile (``k_tiles < splits``) writes zeros
    (``reduce_zero_empty``). ``split_remainder`` (True), ``reduce_from`` (1), ``reduce_zero_empty`` (True),
    ``reduce_acquire`` (True: the first cluster barrier, between the writes and rank 0's reads) and
    ``reduce_release`` (True) state mistakes of that protocol; a correct kernel has the values in brackets.
    Proved by rules ``scheduler.bijection`` (the k split) and ``scheduler.cluster_reduce`` (the reduction).

    ``lookahead`` (grouped only; 0 or 1): with 1 the producer reads the work of its next unit (the
    m-tile's expert, a load from device memory written by the routing kernel) before issuing the
    current unit's TMA loads, so that load's latency is not paid between two units' loads; the
    units and their order are unchanged (``scheduler.bijection`` models the printed loop). The
    consumers' loop is the same either way: they never use the expert, so their read of it is
    dead code to the compiler.

    Dynamic grouped walk (``decomposition`` ``grouped`` with ``slot_bytes`` >= 0; family ``moe``, the
    MoE config's ``dynamic_walk``): instead of the static ``c, c + grid, ...`` the producer's elected
    thread takes tickets ``t = atomicAdd(counter, 1 + step_delta)`` from a per-GEMM counter in the
    layer's workspace (zeroed every call by the routing, rule ``moe.dynamic_walk``); ticket ``t`` is the
    grouped walk's unit ``t`` (the same m-tile / n-block map, band and raster), and the walk ends on the
    first ticket ``t >= units`` (``end_test`` ``">="``; ``">"`` is the mutation knob). The producer
    publishes each unit (and the end marker -1) to the consumer warpgroups through a ring of
    ``slot_stages`` int32 slots at smem byte ``slot_bytes`` (after the pipeline's mbarriers), each
    with its own full / empty mbarrier pair: it waits the slot's empty barrier, writes the slot, then
    arrives on its full barrier (``slot_publish`` ``"before"``: the arrive's release orders the write
    before the consumers' acquiring wait; ``"after"`` is the mutation knob), then loads the unit's
    k-tiles through the data pipeline as the static walk does. Every consumer thread waits the slot's
    full barrier, reads the slot and arrives on its empty barrier (arrival count: every consumer
    thread, so the producer rewrites a slot only after every thread read it); both warpgroups read
    every slot (ping-pong: warpgroup ``w`` computes the CTA's units ``j = w mod 2`` and skips the
    others, as the static walk), so both see the end marker. ``unit_source`` ``"slot"``: the consumers
    compute the unit the slot holds; ``"static"`` (the mutation knob) recomputes it from their own
    static walk (blockIdx). Proved by rule ``moe.dynamic_walk``.
    """

    raster: str
    swizzle: int
    step_delta: int
    decomposition: str
    loc: SourceLoc
    cluster_m: int = 1
    cluster_n: int = 1
    splits: int = 1
    consumer_stride: int = 1
    longest_first: bool = False
    slot_bytes: int = -1
    slot_sync: str = field(default="", metadata=_CANON_SKIP)
    band_m: int = field(default=0, metadata=_CANON_SKIP)
    band_start_delta: int = field(default=0, metadata=_CANON_SKIP)
    band_full_rows: bool = field(default=False, metadata=_CANON_SKIP)
    band_swap: bool = field(default=False, metadata=_CANON_SKIP)
    lookahead: int = field(default=0, metadata=_CANON_SKIP)
    reduction: str = field(default="deterministic", metadata=_CANON_SKIP)
    reduce_buffer: str = field(default="", metadata=_CANON_SKIP)
    split_remainder: bool = field(default=True, metadata=_CANON_SKIP)
    reduce_from: int = field(default=1, metadata=_CANON_SKIP)
    reduce_zero_empty: bool = field(default=True, metadata=_CANON_SKIP)
    reduce_release: bool = field(default=True, metadata=_CANON_SKIP)
    reduce_acquire: bool = field(default=True, metadata=_CANON_SKIP)
    slot_stages: int = field(default=0, metadata=_CANON_SKIP)
    slot_publish: str = field(default="before", metadata=_CANON_SKIP)
    unit_source: str = field(default="slot", metadata=_CANON_SKIP)
    end_test: str = field(default=">=", metadata=_CANON_SKIP)

    def __post_init__(self) -> None:
        validate_schedule(self)

    @property
    def dynamic_grouped(self) -> bool:
        """The dynamic (atomic-ticket) grouped walk: decomposition ``grouped`` with unit slots."""
        return self.decomposition == "grouped" and self.slot_bytes >= 0

    @property
    def slot_ring_bytes(self) -> int:
        """Bytes of the dynamic grouped walk's unit ring at ``slot_bytes``: ``slot_stages`` full and empty mbarriers
        (8 bytes each), then ``slot_stages`` int32 slots, rounded up to 8 (0 without the ring)."""
        if not self.dynamic_grouped:
            return 0
        return (16 * self.slot_stages + 4 * self.slot_stages + 7) // 8 * 8

    def cluster_k_range(self, rank: int, k_tiles: int) -> tuple[int, int]:
        """Decomposition ``clusterk``: ``(k_start, k_count)`` in k-tiles of the CTA at cluster ``rank``
        for a k loop of ``k_tiles``, as ``Scheduler::current`` prints it: ``k_tiles / splits`` each, the
        first ``k_tiles % splits`` ranks one more (``split_remainder``; without it the remainder is
        dropped).

        >>> s = TileSchedule("along_n", 1, 0, "clusterk", SourceLoc("x", 1), splits=4, reduce_buffer="sR")
        >>> [s.cluster_k_range(r, 10) for r in range(4)]
        [(0, 3), (3, 3), (6, 2), (8, 2)]
        """
        base, rem = divmod(k_tiles, self.splits)
        if not self.split_remainder:
            return rank * base, base
        return rank * base + min(rank, rem), base + (1 if rank < rem else 0)


@dataclass(frozen=True)
class Launch:
    """Threads per CTA and the cluster shape (``cluster_m x cluster_n`` CTAs, launched as a 1-D
    cluster of ``cluster_m * cluster_n``; ``__launch_bounds__(threads, 1)``). The GEMM decomposition ``clusterk`` launches clusters of
    its schedule node's ``splits`` CTAs instead (the multicast cluster is then 1 x 1, rule ``tile_scheduler``).

    ``pdl`` (GEMM): launched programmatically (CUDA programmatic dependent launch, PTX ISA ``griddepcontrol``): the
    host adds ``cudaLaunchAttributeProgrammaticStreamSerialization`` and the kernel executes
    ``griddepcontrol.wait`` after its prologue (shared-memory barrier init, tensor-map prefetch: no global access)
    and before its roles start, then ``griddepcontrol.launch_dependents``. A grouped GEMM of family ``moe`` takes
    pdl from its layer node (rule ``moe.pdl``), never from this one."""

    threads: int
    cluster_m: int
    cluster_n: int
    loc: SourceLoc
    pdl: bool = field(default=False, metadata=_CANON_SKIP)

    def __post_init__(self) -> None:
        if not isinstance(self.pdl, bool):
            _dsl_error("dsl.operand", self.loc, f"launch: pdl {self.pdl!r} must be a bool")


# -------------------------------------------------------------------------------------- assertions


@dataclass(frozen=True)
class TagAssertion:
    """``lhs.field <relation> rhs.field`` at every slot of the program point ``at``.

    ``lhs``/``rhs`` are ``(value, field)`` pairs: an MMA operand (``("A", "k")``), the MMA slot
    itself (``("slot", "m")``: the row the MMA computes), the accumulator (``("acc", "m")``), or
    a constant ``("const", "0")``. Relations: ``==``, ``!=``, ``<=``, ``<``, ``>=``, ``>``,
    ``in_range`` (``rhs`` names a ``[lo, hi)`` pair of fields), ``bijection`` (the map from
    slots to ``lhs`` values is one-to-one onto ``rhs``'s set). ``invariant`` is a catalogue id
    (``G1``) and ``rule`` the verifier rule that checks it.
    """

    name: str
    at: str
    lhs: tuple[str, str]
    relation: str
    rhs: tuple[str, str]
    invariant: str
    rule: str
    loc: SourceLoc

    def __str__(self) -> str:
        return f"{self.lhs[0]}.{self.lhs[1]} {self.relation} {self.rhs[0]}.{self.rhs[1]} at {self.at}"


#: the consistency relations each family's program states, ``(lhs, relation, rhs, invariant, rule)``: the
#: builders state them from here (:meth:`~argus_cutlass.dsl.builder.ProgramBuilder.relate_family`) and the
#: verifier requires every one (``verify.relations.check_required_relations``), so an edit cannot drop the
#: check (and the printed ``static_assert``) of the consistency it breaks (session 20: a program built
#: without its relations verified clean)
FAMILY_RELATIONS: dict[str, tuple[tuple[str, str, str, str, str], ...]] = {
    "gemm": (
        # pipeline vs its buffers and its state wrap (G6)
        ("pipeline[mainloop].stages", "==", "tensor[sA].shape[2]", "G6", "pipeline.buffers"),
        ("pipeline[mainloop].stages", "==", "tensor[sB].shape[2]", "G6", "pipeline.buffers"),
        ("pipeline[mainloop].producer.wrap", "==", "pipeline[mainloop].stages", "G6", "pipeline.wrap"),
        ("pipeline[mainloop].consumer.wrap", "==", "pipeline[mainloop].stages", "G6", "pipeline.wrap"),
        # k loop vs TMA step and MMA K (G3)
        ("loop[k].block_k", "==", "mma[mainloop].op.k", "G3", "loop.step"),
        ("loop[k].tile_k", "==", "load[tma_sA].tile_k", "G3", "loop.step"),
        ("loop[k].tile_k", "==", "load[tma_sB].tile_k", "G3", "loop.step"),
        ("loop[k].tile_k", "==", "tensor[sA].shape[1]", "G3", "loop.step"),
        # the MMA's dtype and majors vs the buffers it reads (G1)
        ("mma[mainloop].op.dtype", "==", "tensor[sA].dtype", "G1", "mma.dtype"),
        ("mma[mainloop].op.dtype", "==", "tensor[sB].dtype", "G1", "mma.dtype"),
        ("mma[mainloop].op.a_major", "==", "read[A].view.atom.major", "G1", "mma.major"),
        ("mma[mainloop].op.b_major", "==", "read[B].view.atom.major", "G1", "mma.major"),
        ("mma[mainloop].op.n", "==", "tensor[sB].shape[0]", "G1", "mma.tile"),
        # scheduler cluster vs launch and TMA clusters (G5)
        *((f"schedule.cluster_{ax}", "==", rhs, "G5", "cluster.consistency") for ax, i in (("m", 0), ("n", 1))
          for rhs in (f"launch.cluster_{ax}", f"load[tma_sA].cluster[{i}]", f"load[tma_sB].cluster[{i}]")),
        # epilogue partition vs accumulator partition (G2)
        ("epilogue.warpgroups", "==", "mma[mainloop].atoms_m", "G2", "epilogue.partition"),
        ("epilogue.op_n", "==", "mma[mainloop].op.n", "G2", "epilogue.partition"),
        ("epilogue.op_m", "==", "mma[mainloop].op.m", "G2", "epilogue.partition"),
        ("epilogue.epi_m", "==", "staging.epi_m", "G2", "epilogue.partition"),
        ("epilogue.epi_n", "==", "staging.epi_n", "G2", "epilogue.partition"),
        # smem buffers disjoint (R8)
        *((f"tensor[{x}]", "disjoint", f"tensor[{y}]", "R8", "smem.disjoint") for x, y in
          (("sA", "sB"), ("sA", "sD"), ("sB", "sD"))),
    ),
    "attention": (
        *((f"pipeline[{pipe}].stages", "==", f"tensor[{buf}].shape[2]", "G6", "pipeline.buffers") for pipe, buf in
          (("q", "sQ"), ("k", "sK"), ("v", "sV"))),
        ("loop[kv].block_k", "==", "mma[pv].op.k", "G3", "loop.step"),
        ("loop[kv].tile_k", "==", "tensor[sK].shape[0]", "G3", "loop.step"),
        ("loop[kv].tile_k", "==", "tensor[sV].shape[1]", "G3", "loop.step"),
        ("mma[qk].op.n", "==", "loop[kv].tile_k", "FA3", "fragment.convert"),
        ("mma[qk].atoms_m", "==", "mma[pv].atoms_m", "FA3", "fragment.convert"),
        ("mma[qk].tile_m", "==", "tensor[sQ].shape[0]", "G1", "mma.tile"),
        ("convert[convert_p_frag].dtype", "==", "mma[pv].op.dtype", "FA3", "fragment.convert"),
        ("mma[pv].op.n", "==", "tensor[sV].shape[0]", "G1", "mma.tile"),
        ("mma[qk].op.k", "==", "mma[pv].op.k", "G1", "mma.tile"),
        ("tensor[sQ].shape[1]", "==", "tensor[sK].shape[1]", "G1", "mma.tile"),
        ("mask.acc", "==", "softmax.src", "FA5", "mask.exact"),
        ("softmax.acc", "==", "output.acc", "FA4", "output.row"),
        *((f"tensor[{x}]", "disjoint", f"tensor[{y}]", "R8", "smem.disjoint") for x, y in
          (("sQ", "sK"), ("sQ", "sV"), ("sK", "sV"))),
    ),
}
#: the MoE layer's grouped GEMMs are GEMM programs (``kernels.moe.program``): the same relations
FAMILY_RELATIONS["moe"] = FAMILY_RELATIONS["gemm"]


#: the tag assertions each family's MMAs carry, ``(at, lhs, relation, rhs, invariant, rule)``: the
#: builders state them from here (:meth:`~argus_cutlass.dsl.builder.ProgramBuilder.assert_tags_of`)
#: and the verifier requires every one (``verify.relations.check_required_assertions``), so an edit can
#: neither drop nor restate the obligation it would break
FAMILY_TAG_ASSERTIONS: dict[str, tuple[tuple[str, tuple[str, str], str, tuple[str, str], str, str], ...]] = {
    "gemm": (
        ("mainloop.gemm", ("A", "k"), "==", ("B", "k"), "G1", "mma.k_agreement"),
        ("mainloop.gemm", ("A", "m"), "==", ("slot", "m"), "G1", "mma.operand_identity"),
        ("mainloop.gemm", ("B", "n"), "==", ("slot", "n"), "G1", "mma.operand_identity"),
    ),
    "attention": (
        ("qk.gemm", ("A", "d"), "==", ("B", "d"), "G1", "mma.k_agreement"),
        ("qk.gemm", ("A", "q"), "==", ("slot", "m"), "G1", "mma.operand_identity"),
        ("qk.gemm", ("B", "key"), "==", ("slot", "n"), "G1", "mma.operand_identity"),
        ("pv.gemm", ("A", "key"), "==", ("B", "key"), "FA3", "mma.k_agreement"),
        ("pv.gemm", ("A", "q"), "==", ("slot", "m"), "FA3", "mma.operand_identity"),
        ("pv.gemm", ("B", "d"), "==", ("slot", "n"), "FA3", "mma.operand_identity"),
    ),
}
FAMILY_TAG_ASSERTIONS["moe"] = FAMILY_TAG_ASSERTIONS["gemm"]   # the grouped GEMMs


@dataclass(frozen=True)
class Relation:
    """Consistency between nodes: ``value(lhs) <relation> value(rhs)``.

    ``lhs``/``rhs`` are field paths into the program (:meth:`Program.resolve`), e.g.
    ``"pipeline[mainloop].stages"``, ``"tensor[sA].shape[2]"``, ``"loop[k].block_k"``,
    ``"mma[mainloop].op.k"``, or integer literals. Relations: ``==``, ``!=``, ``<=``, ``<``,
    ``>=``, ``>``, ``divides`` (lhs divides rhs), ``disjoint`` (two smem tensors' byte ranges do
    not overlap). Every proved relation over compile-time constants is also printed into the
    ``.cu`` as a ``static_assert``.
    """

    name: str
    lhs: str
    relation: str
    rhs: str
    invariant: str
    rule: str
    loc: SourceLoc

    def __str__(self) -> str:
        return f"{self.lhs} {self.relation} {self.rhs}"


# ---------------------------------------------------------------------------------------- program


@dataclass(frozen=True)
class Program:
    """A whole tile program. Nodes refer to each other by name.

    ``family`` names the kernel family (``gemm``); ``name`` is the human-readable prefix of the
    kernel name (:meth:`kernel_name` appends a hash of every node); ``params`` holds the
    program's scalar choices that are printed as such (e.g. ``swap_ab``).
    """

    family: str
    name: str
    tensors: tuple[Tensor, ...]
    loads: tuple[TmaLoad, ...]
    reads: tuple[MmaRead, ...]
    assertions: tuple[TagAssertion, ...]
    pipelines: tuple[Pipeline, ...] = ()
    loops: tuple[KLoop, ...] = ()
    mmas: tuple[Mma, ...] = ()
    stores: tuple[TmaStore, ...] = ()
    roles: tuple[Role, ...] = ()
    barriers: tuple[NamedBarrier, ...] = ()
    orders: tuple[TurnOrder, ...] = ()
    converts: tuple[FragmentConvert, ...] = ()
    reductions: tuple[Reduction, ...] = ()
    relations: tuple[Relation, ...] = ()
    epilogue: EpilogueStore | None = None
    source: EpilogueSource | None = None
    staging: SmemStage | None = None
    schedule: TileSchedule | None = None
    launch: Launch | None = None
    params: tuple[tuple[str, Any], ...] = ()
    mask: Mask | None = None
    softmax: OnlineSoftmax | None = None
    output: RowOutput | None = None
    #: aligned staging of caller operands (the any-alignment path; ``()`` for the direct TMA path)
    stage_copies: tuple[StageCopy, ...] = field(default=(), metadata=_CANON_SKIP)

    # ---- lookups ------------------------------------------------------------------------------
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

    @property
    def row_bounded(self) -> bool:
        """Whether a load or store of the program is ``row_bound`` (a grouped GEMM of family ``moe`` that reads the
        routing's per-m-tile ``tile_rows`` table: its Params, Work and run_grouped take it)."""
        return any(x.row_bound for x in (*self.loads, *self.stores))

    def load_into(self, dst: str) -> TmaLoad:
        for ld in self.loads:
            if ld.dst == dst:
                return ld
        raise KeyError(f"no TMA load into {dst!r}")

    def barrier(self, name: str) -> NamedBarrier:
        for b in self.barriers:
            if b.name == name:
                return b
        raise KeyError(f"no named barrier {name!r}; have {[b.name for b in self.barriers]}")

    def role(self, kind: str) -> Role:
        for r in self.roles:
            if r.kind == kind:
                return r
        raise KeyError(f"no {kind} role")

    def param(self, key: str, default: Any = None) -> Any:
        return dict(self.params).get(key, default)

    @property
    def pipeline(self) -> Pipeline | None:
        """The mainloop pipeline (the first one), for single-pipeline families."""
        return self.pipelines[0] if self.pipelines else None

    @property
    def kloop(self) -> KLoop | None:
        return self.loops[0] if self.loops else None

    @property
    def mma(self) -> Mma | None:
        return self.mmas[0] if self.mmas else None

    @property
    def stages(self) -> int:
        return self.pipeline.stages if self.pipeline is not None else 0

    # ---- field paths (relations) ------------------------------------------------------------
    def resolve(self, path: str) -> Any:
        """The value at ``path``: an int literal, or ``kind[name].field(.field|[i])*`` with kind one
        of tensor, load, store, read, mma, pipeline, loop, role, barrier, order, convert, reduction, stage_copy;
        or one of :data:`SINGLE_NODES` (``epilogue``, ``source``, ``staging``, ``schedule``,
        ``launch``, ``mask``, ``softmax``, ``output``) followed by fields.

        Raises:
            KeyError: the path names a node or field that does not exist.
        """
        import re

        path = path.strip()
        if re.fullmatch(r"-?\d+", path):
            return int(path)
        m = re.match(r"(\w+)(?:\[([^\]]+)\])?", path)
        if m is None:
            raise KeyError(f"malformed path {path!r}")
        kind, key = m.group(1), m.group(2)
        rest = path[m.end():]
        groups = {"tensor": (self.tensors, "name"), "load": (self.loads, "name"), "store": (self.stores, "name"),
                  "read": (self.reads, "operand"), "mma": (self.mmas, "name"), "pipeline": (self.pipelines, "name"),
                  "loop": (self.loops, "name"), "role": (self.roles, "kind"), "barrier": (self.barriers, "name"),
                  "order": (self.orders, "name"), "convert": (self.converts, "name"),
                  "reduction": (self.reductions, "name"), "stage_copy": (self.stage_copies, "name")}
        if kind in groups:
            nodes, attr = groups[kind]
            hit = [n for n in nodes if getattr(n, attr) == key]
            if kind == "read":  # a read is named (gmma_pv_A) or, when unambiguous, keyed by its operand
                named = [n for n in nodes if n.name == key]
                hit = named or hit
                if len(hit) > 1:
                    raise KeyError(f"read[{key}] is ambiguous ({[n.name for n in hit]}): name the read (path {path!r})")
            if not hit:
                raise KeyError(f"no {kind} {key!r} (path {path!r})")
            value: Any = hit[0]
        elif kind in SINGLE_NODES and key is None:
            value = getattr(self, kind)
            if value is None:
                raise KeyError(f"program has no {kind} (path {path!r})")
        elif kind == "param" and key is not None:
            return self.param(key)
        else:
            raise KeyError(f"unknown node kind {kind!r} in path {path!r}")
        if not re.fullmatch(r"(?:\.\w+|\[\d+\])*", rest):
            raise KeyError(f"malformed path {path!r}: after the node, only .field and [index] steps")
        for step in re.findall(r"\.(\w+)|\[(\d+)\]", rest):
            attr, idx = step
            try:
                value = getattr(value, attr) if attr else value[int(idx)]
            except (AttributeError, IndexError, TypeError):
                raise KeyError(f"path {path!r}: no {'field ' + attr if attr else 'index ' + idx}") from None
        return value

    # ---- identity ---------------------------------------------------------------------------
    def fingerprint(self) -> str:
        """A stable hash of every node field (source locations aside): two programs that print
        the same kernel have the same fingerprint, any edit changes it."""
        return hashlib.sha256(_canonical(self).encode()).hexdigest()

    def kernel_name(self) -> str:
        """``argus_<name>_<8 hex digits of the fingerprint>``: deterministic, a C identifier."""
        return f"argus_{self.name}_{self.fingerprint()[:8]}"

    # ---- edits (each re-validates the node it changes) ----------------------------------------
    def replace_node(self, kind: str, key: str | None = None, /, **changes: Any) -> Program:
        """A copy with one node changed: ``kind`` is a :meth:`resolve` kind (``pipeline``,
        ``load``...), ``key`` its name (``None`` for the single-node kinds).

        Nested frozen fields are edited with dotted keys: ``replace_node("pipeline", "mainloop",
        **{"consumer.start_phase": 1})``; a node's ``__post_init__`` checks run again.

        Raises:
            KeyError: no such node. argus_cutlass.errors.DslError: the edited node is malformed.
        """
        single = SINGLE_NODES
        plural = {"tensor": ("tensors", "name"), "load": ("loads", "name"), "store": ("stores", "name"),
                  "read": ("reads", "operand"), "mma": ("mmas", "name"), "pipeline": ("pipelines", "name"),
                  "loop": ("loops", "name"), "role": ("roles", "kind"), "barrier": ("barriers", "name"),
                  "order": ("orders", "name"), "assertion": ("assertions", "name"),
                  "relation": ("relations", "name"), "convert": ("converts", "name"),
                  "reduction": ("reductions", "name"), "stage_copy": ("stage_copies", "name")}
        if kind in single:
            node = getattr(self, kind)
            if node is None:
                raise KeyError(f"program has no {kind}")
            new = _edit(node, changes)
            out = dataclasses.replace(self, **{kind: new})
        elif kind in plural:
            attr, keyattr = plural[kind]
            nodes = getattr(self, attr)
            if kind == "read" and any(n.name == key for n in nodes):
                keyattr = "name"  # a read is named, or keyed by its operand when that is unambiguous
            elif kind == "read" and sum(n.operand == key for n in nodes) > 1:
                raise KeyError(f"read {key!r} is ambiguous ({[n.name for n in nodes if n.operand == key]}): name it")
            if not any(getattr(n, keyattr) == key for n in nodes):
                raise KeyError(f"no {kind} {key!r}; have {[getattr(n, keyattr) for n in nodes]}")
            out = dataclasses.replace(self, **{attr: tuple(_edit(n, changes) if getattr(n, keyattr) == key else n
                                                          for n in nodes)})
        elif kind == "params":
            p = dict(self.params)
            p.update(changes)
            out = dataclasses.replace(self, params=tuple(sorted(p.items())))
        else:
            raise KeyError(f"unknown node kind {kind!r}")
        for group in ("tensors", "loads", "stores", "mmas", "pipelines", "loops", "barriers", "orders", "stage_copies"):
            names = [n.name for n in getattr(out, group)]
            dup = sorted({x for x in names if names.count(x) > 1})
            if dup:
                _dsl_error("dsl.duplicate", SourceLoc("<edit>", 0), f"{group}: names {dup} are used twice")
        have = {b.name for b in out.barriers}
        for order in out.orders:
            missing = sorted({b for row in order.barriers for b in row} - have)
            if missing:
                _dsl_error("dsl.unknown_ref", order.loc, f"turn order {order.name!r} names barriers {missing} that "
                           f"do not exist (have {sorted(have)})")
        if out.staging is not None and kind in ("staging", "tensor"):
            try:
                validate_staging(out.staging, out.tensor(out.staging.dst))
            except KeyError:
                pass
        return out

    # ---- historical helpers used by the verifier and its tests --------------------------------
    def replace_pipeline(self, producer: dict[str, Any] | None = None,
                         consumer: dict[str, Any] | None = None, **changes: Any) -> Program:
        """The mainloop pipeline changed, e.g. ``replace_pipeline(consumer={"start_phase": 1})``."""
        if self.pipeline is None:
            raise KeyError("program has no pipeline")
        ch = dict(changes)
        for side, d in (("producer", producer), ("consumer", consumer)):
            for k, v in (d or {}).items():
                ch[f"{side}.{k}"] = v
        return self.replace_node("pipeline", self.pipeline.name, **ch)

    def replace_tensor(self, name: str, **changes: Any) -> Program:
        return self.replace_node("tensor", name, **changes)

    def replace_read(self, operand: str, **changes: Any) -> Program:
        return self.replace_node("read", operand, **changes)

    def replace_load(self, dst: str, **changes: Any) -> Program:
        return self.replace_node("load", self.load_into(dst).name, **changes)

    def replace_store(self, src: str, **changes: Any) -> Program:
        hit = [s for s in self.stores if s.src == src]
        if not hit:
            raise KeyError(f"no TMA store out of {src!r}")
        return self.replace_node("store", hit[0].name, **changes)

    def replace_epilogue(self, **changes: Any) -> Program:
        return self.replace_node("epilogue", **changes)

    def replace_staging(self, **changes: Any) -> Program:
        return self.replace_node("staging", **changes)

    def replace_schedule(self, **changes: Any) -> Program:
        return self.replace_node("schedule", **changes)

    def replace_kloop(self, **changes: Any) -> Program:
        if self.kloop is None:
            raise KeyError("program has no k loop")
        return self.replace_node("loop", self.kloop.name, **changes)


#: the former name of :class:`Program` (the mainloop-only model of earlier versions)
DslProgram = Program


def _edit(node: Any, changes: dict[str, Any]) -> Any:
    """``dataclasses.replace`` with dotted keys for nested frozen fields (``consumer.start_phase``)."""
    direct: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for k, v in changes.items():
        head, _, tail = k.partition(".")
        if not hasattr(node, head):
            raise KeyError(f"{type(node).__name__} has no field {head!r}")
        if tail:
            nested.setdefault(head, {})[tail] = v
        else:
            direct[head] = v
    for head, sub in nested.items():
        direct[head] = _edit(getattr(node, head), sub)
    return dataclasses.replace(node, **direct)


def _canonical(value: Any) -> str:
    """A deterministic text of a node tree, without source locations."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if isinstance(value, SourceLoc):
            return "@"
        parts = [f"{f.name}={_canonical(getattr(value, f.name))}" for f in dataclasses.fields(value)
                 if f.name != "loc" and not (f.metadata.get("canon_skip_default") and
                                             getattr(value, f.name) == f.default)]
        return f"{type(value).__name__}({','.join(parts)})"
    if isinstance(value, (tuple, list)):
        return "(" + ",".join(_canonical(v) for v in value) + ")"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_canonical(v)}" for k, v in sorted(value.items())) + "}"
    return repr(value)


def node_fields(node: Any) -> list[str]:
    """Dotted names of every leaf field of a node (nested frozen values expanded), source
    locations left out: the field list the coupling test mutates."""
    out: list[str] = []
    for f in dataclasses.fields(node):
        if f.name == "loc":
            continue
        v = getattr(node, f.name)
        if dataclasses.is_dataclass(v) and not isinstance(v, (Tag, SourceLoc)):
            out += [f"{f.name}.{sub}" for sub in node_fields(v)]
        else:
            out.append(f.name)
    return out


# ------------------------------------------------------------------------------------- validation

#: the most CTAs a ``ctaMask`` (16 bits) can name
MAX_MULTICAST_CLUSTER = 16


def _positive_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 1


def validate_tensor(t: Tensor) -> None:
    """Check a tensor node's fields for its space (builder and every edit): gmem tensors have
    symbolic mode names, a contiguous mode among them and a host binding; smem and rmem tensors
    have positive int extents and no binding/major; only smem tensors are placed.

    Raises:
        argus_cutlass.errors.DslError: ``dsl.operand`` / ``dsl.layout_size`` / ``dsl.dtype``.
    """
    loc = t.loc
    if t.space not in ("gmem", "smem", "rmem"):
        _dsl_error("dsl.operand", loc, f"tensor {t.name!r}: space {t.space!r} is not gmem, smem or rmem")
    if t.dtype not in DTYPE_BYTES:
        _dsl_error("dsl.dtype", loc, f"tensor {t.name!r}: dtype {t.dtype!r} is not one of {sorted(DTYPE_BYTES)}")
    if t.space == "gmem":
        if len(t.shape) != 2 or not all(isinstance(x, str) and x for x in t.shape) or len(set(t.shape)) != 2:
            _dsl_error("dsl.layout_size", loc, f"gmem tensor {t.name!r}: shape {t.shape} must name two distinct "
                       "problem modes, e.g. ('M', 'K')")
        if t.major not in t.shape:
            _dsl_error("dsl.operand", loc, f"gmem tensor {t.name!r}: contiguous mode {t.major!r} is not one of its "
                       f"modes {t.shape}")
        if not (isinstance(t.binding, str) and t.binding.isidentifier()):
            _dsl_error("dsl.operand", loc, f"gmem tensor {t.name!r}: binding {t.binding!r} must name the host "
                       "argument that holds it (an identifier, e.g. 'A')")
        if t.base_bytes != 0 or t.align_bytes != 16:
            _dsl_error("dsl.operand", loc, f"gmem tensor {t.name!r}: base_bytes/align_bytes place smem tensors only")
        return
    if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in t.shape):
        _dsl_error("dsl.layout_size", loc, f"{t.space} tensor {t.name!r} has shape {t.shape}: every extent must be a "
                   "positive int")
    if t.binding or t.major:
        _dsl_error("dsl.operand", loc, f"{t.space} tensor {t.name!r}: binding/major describe gmem tensors only")
    if t.space == "rmem" and (t.base_bytes != 0 or t.align_bytes != 16):
        _dsl_error("dsl.operand", loc, f"register tensor {t.name!r}: base_bytes/align_bytes place smem tensors only")


#: the values of :attr:`TmaLoad.row_bound` / :attr:`TmaStore.row_bound`
ROW_BOUNDS = ("", "tile_rows")


def _check_row_bound(node: Any) -> None:
    """``dsl.operand``: a ``row_bound`` load / store is a K-major box of whole tile rows (the box's outer extent is
    the tile's ``tile_mn`` rows for a load, so no box lies wholly out of bounds), without multicast."""
    if node.row_bound not in ROW_BOUNDS:
        _dsl_error("dsl.operand", node.loc, f"{node.name}: row_bound {node.row_bound!r}: expected one of {ROW_BOUNDS}")
    if not isinstance(node.row_shift_delta, int) or isinstance(node.row_shift_delta, bool):
        _dsl_error("dsl.operand", node.loc, f"{node.name}: row_shift_delta {node.row_shift_delta!r} must be an int")
    if node.row_shift_delta and not node.row_bound:
        _dsl_error("dsl.operand", node.loc, f"{node.name}: row_shift_delta {node.row_shift_delta} shifts a "
                   "'tile_rows' box; this one has row_bound ''")
    if not node.row_bound:
        return
    if node.major != "K" or node.copy.multicast != 1:
        _dsl_error("dsl.operand", node.loc, f"{node.name}: row_bound 'tile_rows' needs a K-major box (inner = K or N, "
                   f"outer = rows) without multicast, got major {node.major!r}, multicast {node.copy.multicast}")
    if isinstance(node, TmaLoad) and (node.copy.box[1] != node.tile_mn or node.block_mode != "m"
                                      or node.advance != "k" or node.expert_rows or node.pair_offset):
        _dsl_error("dsl.operand", node.loc, f"{node.name}: row_bound 'tile_rows' is the grouped GEMM's A load (block "
                   f"mode 'm', advance 'k', no expert rows) in boxes of the whole {node.tile_mn} tile rows, got box "
                   f"{node.copy.box}, block_mode {node.block_mode!r}, advance {node.advance!r}, expert_rows "
                   f"{node.expert_rows}")


def validate_load(node: TmaLoad) -> None:
    """Check a TMA load node's cluster and multicast fields (run by every ``TmaLoad``, so the
    builder and every edit get it).

    Raises:
        argus_cutlass.errors.DslError: ``dsl.operand`` naming the field and the rule.
    """
    loc = node.loc
    c = node.cluster
    if node.major not in ("K", "MN"):
        _dsl_error("dsl.operand", loc, f"{node.name}: major {node.major!r}: expected 'K' or 'MN'")
    _check_row_bound(node)
    if node.block_mode not in ("m", "n", "none"):
        _dsl_error("dsl.operand", loc, f"{node.name}: block_mode {node.block_mode!r}: expected 'm', 'n' or 'none'")
    if node.cache_hint not in CACHE_HINTS:
        _dsl_error("dsl.operand", loc, f"{node.name}: cache_hint {node.cache_hint!r}: expected one of {CACHE_HINTS} "
                   "(TMA .L2::cache_hint policies, CuTe TMA::CacheHintSm90)")
    if node.advance not in ("k", "mn", "none"):
        _dsl_error("dsl.operand", loc, f"{node.name}: advance {node.advance!r}: expected 'k', 'mn' or 'none'")
    if node.head not in ("", "q", "kv"):
        _dsl_error("dsl.operand", loc, f"{node.name}: head {node.head!r}: expected '', 'q' or 'kv'")
    if not isinstance(node.block_shift, int) or isinstance(node.block_shift, bool):
        _dsl_error("dsl.operand", loc, f"{node.name}: block_shift {node.block_shift!r} must be an int")
    for fld in ("expert_rows", "experts", "expert_shift", "pair_offset"):
        v = getattr(node, fld)
        if not isinstance(v, int) or isinstance(v, bool) or (fld != "expert_shift" and v < 0):
            _dsl_error("dsl.operand", loc, f"{node.name}: {fld} {v!r} must be an int (>= 0 unless a shift)")
    if node.experts and not node.expert_rows:
        _dsl_error("dsl.operand", loc, f"{node.name}: experts {node.experts} and expert_rows {node.expert_rows}: "
                   "experts counts a grouped GEMM's weights (its tensor map has experts x expert_rows rows); an "
                   "operand without expert rows has none")
    if (node.expert_rows or node.expert_shift or node.pair_offset) and (node.advance, node.head) != ("k", ""):
        _dsl_error("dsl.operand", loc, f"{node.name}: expert_rows / expert_shift / pair_offset describe a grouped GEMM "
                   f"operand (advance 'k', no head mode), not a load with advance {node.advance!r}, head {node.head!r}")
    if len(c) != 2 or not all(_positive_int(x) for x in c):
        _dsl_error("dsl.operand", loc, f"{node.name}: cluster {c} must be two positive ints (CTAs along M, N)")
    if c[0] * c[1] > MAX_MULTICAST_CLUSTER:
        _dsl_error("dsl.operand", loc, f"{node.name}: a {c[0]}x{c[1]} cluster has more CTAs than the 16 bits of "
                   "a TMA ctaMask can name (PTX ISA 9.7.9.25)")
    if len(node.copy.box) != 2 or not all(_positive_int(x) for x in node.copy.box):
        _dsl_error("dsl.operand", loc, f"{node.name}: box {node.copy.box} must be two positive ints (inner, outer)")
    if node.copy.kind not in ("load", "load_multicast"):
        _dsl_error("dsl.operand", loc, f"{node.name}: a TMA load's copy kind is 'load' or 'load_multicast', not "
                   f"{node.copy.kind!r}")
    if node.copy.multicast <= 1:
        if (node.share_axis, node.slice_axis, node.mask_axis, node.mask_self, node.rank_order) != ("", "", "", True,
                                                                                                      "col"):
            _dsl_error("dsl.operand", loc, f"{node.name}: share/slice/mask axes, mask_self and rank_order describe a "
                       "multicast load; this one has multicast 1")
        return
    if node.share_axis not in ("m", "n"):
        _dsl_error("dsl.operand", loc, f"multicast TMA load into {node.dst!r} needs share_axis 'm' or 'n'")
    extent = c[1] if node.share_axis == "n" else c[0]
    if node.copy.multicast != extent:
        _dsl_error("dsl.operand", loc, f"{node.name}: multicast to {node.copy.multicast} CTAs, but the "
                   f"{c[0]}x{c[1]} cluster has {extent} CTAs along {node.share_axis} sharing the operand")
    for attr in ("slice_axis", "mask_axis"):
        if getattr(node, attr) not in ("m", "n"):
            _dsl_error("dsl.operand", loc, f"{node.name}: {attr} {getattr(node, attr)!r}: expected 'm' or 'n'")
    if node.rank_order not in ("col", "row"):
        _dsl_error("dsl.operand", loc, f"{node.name}: rank_order {node.rank_order!r}: expected 'col' or 'row'")


def validate_staging(node: SmemStage, dst: Tensor) -> None:
    """Check an epilogue staging node against its buffer (builder and every edit).

    Raises:
        argus_cutlass.errors.DslError: ``dsl.operand`` (op, num, matrix order, store wait, source),
            ``dsl.layout_size`` (the buffer is not an ``(epi_m, epi_n, stages)`` smem tensor
            matching the node).
    """
    loc = node.loc
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
    check_c_remainder_operand(node.row_lane_skew, "row_lane_skew", loc)
    if dst.space != "smem" or len(dst.shape) != 3 or tuple(dst.shape[:2]) != (node.epi_m, node.epi_n):
        _dsl_error("dsl.layout_size", loc, f"staging buffer {dst.name!r} ({dst.space}, shape {dst.shape}) must be "
                   f"an smem ({node.epi_m}, {node.epi_n}, stages) tensor")


def validate_stage_copy(node: StageCopy) -> None:
    """Well-formedness of a :class:`StageCopy` (what it means is the verifier's ``stage.*`` rules):
    operand ``A``..``D``, a known direction, dtype and pitches, size names ``M``/``N``/``K``, positive
    ints where the kernel divides or launches by them, ``fill`` ``zero`` or ``none``."""
    loc = node.loc
    if node.operand not in ("A", "B", "C", "D"):
        _dsl_error("dsl.operand", loc, f"{node.name}: operand {node.operand!r} is not a GEMM argument (A, B, C, D)")
    if node.direction not in STAGE_DIRECTIONS:
        _dsl_error("dsl.operand", loc, f"{node.name}: direction {node.direction!r} is not one of {STAGE_DIRECTIONS}")
    if node.dtype not in DTYPE_BYTES:
        _dsl_error("dsl.dtype", loc, f"{node.name}: dtype {node.dtype!r} is not one of {sorted(DTYPE_BYTES)}")
    for f in ("rows", "cols"):
        if getattr(node, f) not in ("M", "N", "K"):
            _dsl_error("dsl.operand", loc, f"{node.name}: {f} {getattr(node, f)!r} is not a size name (M, N, K)")
    for f in ("src_pitch", "dst_pitch"):
        if getattr(node, f) not in STAGE_PITCHES:
            _dsl_error("dsl.operand", loc, f"{node.name}: {f} {getattr(node, f)!r} is not one of {STAGE_PITCHES}")
    if node.fill not in ("zero", "none"):
        _dsl_error("dsl.operand", loc, f"{node.name}: fill {node.fill!r} is not 'zero' or 'none'")
    if node.map_extent not in ("staged", "true"):
        _dsl_error("dsl.operand", loc, f"{node.name}: map_extent {node.map_extent!r} is not 'staged' or 'true'")
    for f in ("align", "base_align", "threads", "grid_x", "grid_y"):
        if not _positive_int(getattr(node, f)):
            _dsl_error("dsl.operand", loc, f"{node.name}: {f} {getattr(node, f)!r} must be an int >= 1")
    for f in ("row_delta", "col_delta"):
        if not isinstance(getattr(node, f), int) or isinstance(getattr(node, f), bool):
            _dsl_error("dsl.operand", loc, f"{node.name}: {f} {getattr(node, f)!r} must be an int")


def validate_schedule(node: TileSchedule) -> None:
    """Check a tile-scheduler node (run by every ``TileSchedule``: builder and every edit).

    Raises:
        argus_cutlass.errors.DslError: ``dsl.operand`` naming the field and the rule.
    """
    loc = node.loc
    if node.raster not in ("along_m", "along_n"):
        _dsl_error("dsl.operand", loc, f"raster {node.raster!r}: expected 'along_m' or 'along_n'")
    if node.decomposition not in ("persistent", "streamk", "splitk", "clusterk", "dynamic", "grouped"):
        _dsl_error("dsl.operand", loc, f"decomposition {node.decomposition!r}: expected persistent, streamk, "
                   "splitk, clusterk, dynamic or grouped")
    if not isinstance(node.slot_bytes, int) or isinstance(node.slot_bytes, bool) or node.slot_bytes < -1:
        _dsl_error("dsl.operand", loc, f"slot_bytes {node.slot_bytes!r} must be an int >= -1")
    if (node.decomposition == "dynamic" and node.slot_bytes < 0) or (
            node.slot_bytes >= 0 and node.decomposition not in ("dynamic", "grouped")):
        _dsl_error("dsl.operand", loc, f"decomposition {node.decomposition!r} with slot_bytes {node.slot_bytes}: a "
                   "dynamic scheduler publishes its units through smem slots (slot_bytes >= 0), a static one has none")
    ring = node.decomposition == "grouped" and node.slot_bytes >= 0
    if not isinstance(node.slot_stages, int) or isinstance(node.slot_stages, bool) or not 0 <= node.slot_stages <= 16:
        _dsl_error("dsl.operand", loc, f"slot_stages {node.slot_stages!r} must be an int in [0, 16]")
    if ring != (node.slot_stages >= 1):
        _dsl_error("dsl.operand", loc, f"slot_stages {node.slot_stages} with decomposition {node.decomposition!r} and "
                   f"slot_bytes {node.slot_bytes}: the dynamic grouped walk's unit ring has >= 1 stage, nothing else has one")
    for f, ok in (("slot_publish", ("before", "after")), ("unit_source", ("slot", "static")), ("end_test", (">=", ">"))):
        v = getattr(node, f)
        if v not in ok:
            _dsl_error("dsl.operand", loc, f"{f} {v!r}: expected one of {list(ok)}")
        if not ring and v != ok[0]:
            _dsl_error("dsl.operand", loc, f"{f} {v!r} without the dynamic grouped walk (nothing prints it)")
    if not isinstance(node.slot_sync, str):
        _dsl_error("dsl.operand", loc, f"slot_sync {node.slot_sync!r} must be a barrier name prefix (a str)")
    if node.slot_sync and node.decomposition != "dynamic":
        _dsl_error("dsl.operand", loc, f"slot_sync {node.slot_sync!r} on decomposition {node.decomposition!r}: only a "
                   "dynamic scheduler has unit slots to sync on")
    if node.swizzle not in (1, 2, 4, 8):
        _dsl_error("dsl.operand", loc, f"swizzle {node.swizzle}: CUTLASS's max_swizzle_size is 1, 2, 4 or 8")
    if not all(_positive_int(x) for x in (node.cluster_m, node.cluster_n, node.splits, node.consumer_stride)):
        _dsl_error("dsl.operand", loc, f"cluster {node.cluster_m}x{node.cluster_n} / splits {node.splits} / "
                   f"consumer_stride {node.consumer_stride} must be ints >= 1")
    if node.splits > 1 and node.decomposition not in ("splitk", "clusterk"):
        _dsl_error("dsl.operand", loc, f"splits={node.splits} needs decomposition 'splitk' or 'clusterk'")
    _validate_cluster_k(node)
    if node.reduction not in ("deterministic", "nondeterministic"):
        _dsl_error("dsl.operand", loc, f"reduction {node.reduction!r}: expected 'deterministic' or 'nondeterministic' "
                   "(CUTLASS ReductionMode)")
    if node.reduction != "deterministic" and node.decomposition not in ("streamk", "splitk"):
        _dsl_error("dsl.operand", loc, f"reduction {node.reduction!r} with decomposition {node.decomposition!r}: only "
                   "stream-K and split-K reduce partial tiles")
    if not isinstance(node.step_delta, int):
        _dsl_error("dsl.operand", loc, f"step_delta {node.step_delta!r} must be an int")
    if not isinstance(node.longest_first, bool):
        _dsl_error("dsl.operand", loc, f"longest_first {node.longest_first!r} must be a bool")
    _validate_band(node)


#: the most CTAs of a ``clusterk`` cluster: the portable cluster size (CUDA Programming Guide, "Thread Block
#: Clusters": 8 without cudaFuncAttributeNonPortableClusterSizeAllowed)
MAX_CLUSTER_K = 8


def _validate_cluster_k(node: TileSchedule) -> None:
    """The ``clusterk`` fields of :class:`TileSchedule`: ``splits`` in ``[2, MAX_CLUSTER_K]``, no multicast
    cluster (``cluster_m = cluster_n = 1``), the cooperative schedule (``consumer_stride`` 1), a named
    ``reduce_buffer``; the protocol fields typed, and left at their defaults on every other decomposition."""
    loc = node.loc
    for f in ("split_remainder", "reduce_zero_empty", "reduce_release", "reduce_acquire"):
        if not isinstance(getattr(node, f), bool):
            _dsl_error("dsl.operand", loc, f"{f} {getattr(node, f)!r} must be a bool")
    if not isinstance(node.reduce_from, int) or isinstance(node.reduce_from, bool) or node.reduce_from < 0:
        _dsl_error("dsl.operand", loc, f"reduce_from {node.reduce_from!r} must be an int >= 0")
    if not isinstance(node.reduce_buffer, str):
        _dsl_error("dsl.operand", loc, f"reduce_buffer {node.reduce_buffer!r} must be a tensor name")
    if node.decomposition != "clusterk":
        if (node.reduce_buffer or not node.split_remainder or node.reduce_from != 1 or not node.reduce_zero_empty
                or not node.reduce_release or not node.reduce_acquire):
            _dsl_error("dsl.operand", loc, "reduce_buffer / split_remainder / reduce_from / reduce_zero_empty / "
                       f"reduce_acquire / reduce_release describe the clusterk reduction: decomposition "
                       f"{node.decomposition!r} has none")
        return
    if not 2 <= node.splits <= MAX_CLUSTER_K:
        _dsl_error("dsl.operand", loc, f"clusterk with splits={node.splits}: a cluster of 2..{MAX_CLUSTER_K} CTAs "
                   "(the portable cluster size) splits the k loop")
    if (node.cluster_m, node.cluster_n) != (1, 1):
        _dsl_error("dsl.operand", loc, f"clusterk with cluster {node.cluster_m}x{node.cluster_n}: the cluster is "
                   "the k split (its CTAs share one output tile); no multicast cluster beside it")
    if node.consumer_stride != 1:
        _dsl_error("dsl.operand", loc, f"clusterk with consumer_stride {node.consumer_stride}: the cluster "
                   "reduction runs in the cooperative kernel (both consumer warpgroups on one tile)")
    if not node.reduce_buffer:
        _dsl_error("dsl.operand", loc, "clusterk needs reduce_buffer: the smem tensor the ranks' partial sums "
                   "are written to")


#: the largest ``band_m`` of a grouped walk (a wave of 132 CTAs needs no band of more m-tiles; the
#: verifier enumerates every tiles_m up to ``2 * band_m + 2``)
MAX_BAND_M = 64


def _validate_band(node: TileSchedule) -> None:
    """The band fields of :class:`TileSchedule`: ``band_m`` an int in ``[0, MAX_BAND_M]``; a band
    (and its mistake fields) only on the grouped walk, along M, with swizzle 1 (the grouped walk
    prints no swizzle: ``band_m`` is its blocking)."""
    loc = node.loc
    bm = node.band_m
    if not isinstance(bm, int) or isinstance(bm, bool) or not 0 <= bm <= MAX_BAND_M:
        _dsl_error("dsl.operand", loc, f"band_m {bm!r} must be an int in [0, {MAX_BAND_M}] (0: no bands)")
    if not isinstance(node.band_start_delta, int) or isinstance(node.band_start_delta, bool):
        _dsl_error("dsl.operand", loc, f"band_start_delta {node.band_start_delta!r} must be an int")
    for f in ("band_full_rows", "band_swap"):
        if not isinstance(getattr(node, f), bool):
            _dsl_error("dsl.operand", loc, f"{f} {getattr(node, f)!r} must be a bool")
    if node.decomposition == "grouped" and node.swizzle != 1:
        _dsl_error("dsl.operand", loc, f"swizzle {node.swizzle} on the grouped walk: it prints no swizzle (its "
                   "blocking is band_m)")
    if bm and (node.decomposition != "grouped" or node.raster != "along_m"):
        _dsl_error("dsl.operand", loc, f"band_m={bm} needs decomposition 'grouped' along_m (got "
                   f"{node.decomposition!r} {node.raster})")
    if not bm and (node.band_start_delta or node.band_full_rows or node.band_swap):
        _dsl_error("dsl.operand", loc, "band_start_delta / band_full_rows / band_swap describe a banded walk: "
                   "they need band_m >= 1")
    la = node.lookahead
    if not isinstance(la, int) or isinstance(la, bool) or la not in (0, 1):
        _dsl_error("dsl.operand", loc, f"lookahead {la!r} must be 0 or 1 (units of work read ahead)")
    if la and node.decomposition != "grouped":
        _dsl_error("dsl.operand", loc, f"lookahead={la} needs decomposition 'grouped' (its Scheduler::current reads "
                   f"the m-tile's expert from device memory; the {node.decomposition!r} walk reads nothing)")


#: exclusive upper end of a field printed as a C ``constexpr int``
C_INT_END = 2**31
#: the bound of a field added to an index inside C's ``%`` (:func:`check_c_remainder_operand`): the index
#: (a stage, slot, lane or tile row) is below 2^30, so their sum stays below 2^31
C_REMAINDER_OPERAND_END = 1 << 30


def check_c_remainder_operand(value: Any, what: str, loc: SourceLoc) -> None:
    """Refuse ``value`` unless it is an int in ``[0, 2^30)``: a field the kernel adds to an index inside C's ``%``
    (``(index + value) % period``) and prints as a ``constexpr int``. C's remainder keeps the dividend's sign
    (C11 6.5.5: ``-4 % 4`` is 0 but ``(1 - 4) % 4`` is -3, a negative index), and the sum overflows ``int``
    (undefined; in practice a wrap to a negative dividend) once it passes ``2^31 - 1``, while the verifier's model
    uses Python's floor remainder of the exact sum. Every index these fields are added to (a pipeline stage, a
    top-k slot, a lane or a row of a tile) is below ``2^30``, so on ``[0, 2^30)`` the sum fits ``int`` and the
    two remainders agree (e.g. a stage skew of ``2^31 - 3`` is 0 mod 5 in Python, but ``(3 + 2^31 - 3) % 5`` is
    computed on a wrapped ``int``: -3).

    Raises:
        DslError: rule ``dsl.operand``, naming ``what`` and the value.
    """
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < C_REMAINDER_OPERAND_END:
        _dsl_error("dsl.operand", loc, f"{what} {value!r}: expected an int in [0, 2^30) (the kernel adds it to an "
                   "index below 2^30 inside C's %, which keeps a negative sign, in a 32-bit int that must not "
                   "overflow)", "a shift by -s is the shift by (period - s); a shift by s is the shift by s % period")


def _dsl_error(rule: str, loc: SourceLoc, message: str, hint: str | None = None) -> None:
    from argus_cutlass.errors import DslError

    raise DslError(rule, f"{loc}: {message}", hint)
