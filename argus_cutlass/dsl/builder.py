"""The author-facing builder of :class:`~argus_cutlass.dsl.ir.Program`.

Each statement records the caller's source line, so a malformed program fails *there* with the
rule it broke (``dsl.untagged``, ``dsl.unknown_tag``, ``dsl.layout_size``, ``dsl.relation``,
``dsl.unknown_ref``, ``dsl.duplicate``, ``dsl.dtype``, ``dsl.operand``):

>>> from argus_cutlass.dsl.builder import ProgramBuilder
>>> from argus_cutlass.dsl.ir import Tag
>>> b = ProgramBuilder("demo")
>>> gA = b.tensor("gA", "gmem", ("M", "K"), "bf16", tag=Tag("A", ("m", "k")), major="K", binding="A")
>>> b.build().tensor("gA").loc.line > 0
True
>>> b.relate("pipeline[main].stages", "==", "4", invariant="G6", rule="pipeline.buffers")
Traceback (most recent call last):
...
argus_cutlass.errors.DslError: [dsl.unknown_ref] ...: relation pipeline[main].stages == 4: no pipeline 'main' (path 'pipeline[main].stages')
"""

from __future__ import annotations

from typing import Any

from argus_cutlass.dsl.atoms import GmmaOp, GmmaSmemAtom, TmaCopy
from argus_cutlass.dsl.ir import (
    DTYPE_BYTES,
    FAMILY_RELATIONS,
    FAMILY_TAG_ASSERTIONS,
    RELATIONS,
    EpilogueSource,
    EpilogueStore,
    FragmentConvert,
    KLoop,
    Launch,
    Mask,
    Mma,
    MmaRead,
    NamedBarrier,
    OnlineSoftmax,
    Pipeline,
    PipelineSide,
    Program,
    Reduction,
    Relation,
    Role,
    RowOutput,
    SmemStage,
    SmemView,
    Space,
    StageCopy,
    Tag,
    TagAssertion,
    Tensor,
    TileSchedule,
    TmaLoad,
    TmaStore,
    TurnOrder,
    _dsl_error,
    caller_loc,
    validate_staging,
)

__all__ = ["ProgramBuilder"]

#: values a tag assertion may name besides MMA operands
_SLOT_VALUES = ("slot", "acc", "const", "stage")


class ProgramBuilder:
    """Collects DSL statements into a :class:`Program`; each records its source location.

    Args:
        name: the human-readable kernel name prefix (``gemm_sm90_bf16_...``).
        family: the kernel family (``gemm``, ``attention``, ``moe``).
    """

    def __init__(self, name: str, family: str = "gemm") -> None:
        self.name = name
        self.family = family
        self._tensors: list[Tensor] = []
        self._loads: list[TmaLoad] = []
        self._stores: list[TmaStore] = []
        self._reads: list[MmaRead] = []
        self._mmas: list[Mma] = []
        self._converts: list[FragmentConvert] = []
        self._reductions: list[Reduction] = []
        self._asserts: list[TagAssertion] = []
        self._relations: list[Relation] = []
        self._pipelines: list[Pipeline] = []
        self._loops: list[KLoop] = []
        self._roles: list[Role] = []
        self._barriers: list[NamedBarrier] = []
        self._orders: list[TurnOrder] = []
        self._stage_copies: list[StageCopy] = []
        self._single: dict[str, Any] = {}
        self._params: dict[str, Any] = {}

    # ---------------------------------------------------------------------------------- data
    def tensor(self, name: str, space: Space, shape: tuple[Any, ...], dtype: str, *, tag: Tag | None = None,
               major: str = "", binding: str = "", base_bytes: int = 0, align_bytes: int = 16) -> Tensor:
        """Declare a tensor (see :class:`~argus_cutlass.dsl.ir.Tensor`).

        Raises:
            argus_cutlass.errors.DslError: ``dsl.duplicate`` (name taken), ``dsl.dtype``,
                ``dsl.layout_size`` (an smem/rmem shape that is not all positive ints).
        """
        loc = caller_loc()
        if any(t.name == name for t in self._tensors):
            _dsl_error("dsl.duplicate", loc, f"tensor {name!r} is declared twice")
        if dtype not in DTYPE_BYTES:
            _dsl_error("dsl.dtype", loc, f"tensor {name!r}: dtype {dtype!r} is not one of {sorted(DTYPE_BYTES)}")
        if space not in ("gmem", "smem", "rmem"):
            _dsl_error("dsl.operand", loc, f"tensor {name!r}: space {space!r} is not gmem, smem or rmem")
        if space != "gmem" and not all(isinstance(s, int) and s >= 1 for s in shape):
            _dsl_error("dsl.layout_size", loc, f"{space} tensor {name!r} has shape {tuple(shape)}: every extent "
                       "must be a positive int")
        t = Tensor(name, space, tuple(shape), dtype, tag, loc, major, binding, base_bytes, align_bytes)
        self._tensors.append(t)
        return t

    @staticmethod
    def smem_view(atom: GmmaSmemAtom, shape: tuple[int, ...]) -> SmemView:
        """A GMMA atom tiled to ``shape`` (see :class:`~argus_cutlass.dsl.ir.SmemView`)."""
        return SmemView(atom, tuple(shape))

    def _need(self, kind: str, name: str, loc: Any, have: list[str]) -> None:
        if name not in have:
            _dsl_error("dsl.unknown_ref", loc, f"{kind} {name!r} does not exist (have {have})")

    # -------------------------------------------------------------------------------- copies
    def tma_load(self, src: Tensor, dst: Tensor, copy: TmaCopy, *, major: str, tile_mn: int, tile_k: int,
                 stage_tag: Tag, pipeline: str = "mainloop", block_mode: str = "m",
                 cluster: tuple[int, int] = (1, 1), share_axis: str = "", rank_order: str = "col",
                 advance: str = "k", head: str = "", block_shift: int = 0,
                 cache_hint: str = "evict_normal") -> TmaLoad:
        """A TMA tile load ``src`` (gmem, tagged) -> ``dst`` (smem ``(tile_mn, tile_k, S)``).

        With ``copy.multicast > 1`` the CTAs of a ``cluster`` (CTAs along M, along N) that share
        the operand along ``share_axis`` (``"n"``: A, ``"m"``: B) each issue one slice of the
        stage's boxes and multicast it to the others. ``advance`` / ``head`` / ``block_shift``:
        see :class:`~argus_cutlass.dsl.ir.TmaLoad` (attention's loads); ``cache_hint``: its L2 eviction
        priority (``TmaLoad.cache_hint``).

        Raises:
            argus_cutlass.errors.DslError: ``dsl.untagged`` (the source carries no tag: nothing could
                be proved about the values it loads), ``dsl.layout_size`` (the tile does not match
                the destination's shape), ``dsl.operand`` (see ``validate_load``).
        """
        loc = caller_loc()
        if src.tag is None:
            _dsl_error("dsl.untagged", loc, f"TMA source {src.name!r} carries no tag",
                       f"declare it with tag=Tag(...), e.g. Tag('{src.name[-1:]}', ('m', 'k'))")
        if src.space != "gmem" or dst.space != "smem":
            _dsl_error("dsl.operand", loc, f"TMA load {src.name!r} ({src.space}) -> {dst.name!r} ({dst.space}): "
                       "a TMA load reads gmem and writes smem")
        if tuple(dst.shape[:2]) != (tile_mn, tile_k):
            _dsl_error("dsl.layout_size", loc, f"TMA tile ({tile_mn}, {tile_k}) does not match the "
                       f"destination {dst.name!r} of shape {dst.shape}")
        node = TmaLoad(f"tma_{dst.name}", src.name, dst.name, copy, major, tile_mn, tile_k, src.tag, stage_tag, loc,
                       pipeline, block_mode, tuple(cluster), share_axis, share_axis, share_axis, True, rank_order,
                       advance, head, block_shift, cache_hint=cache_hint)
        self._loads.append(node)
        return node

    def tma_store(self, src: Tensor, dst: Tensor, copy: TmaCopy, *, major: str, tile_mn: int,
                  tile_k: int) -> TmaStore:
        """A TMA store of the staged smem tile ``src`` (``(tile_mn, tile_k, S)``) to gmem ``dst``.

        Raises:
            argus_cutlass.errors.DslError: ``dsl.untagged`` (the gmem destination carries no tag),
                ``dsl.layout_size`` (the tile does not match the staging buffer).
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

    # ---------------------------------------------------------------------------------- MMA
    def mma_read(self, operand: str, src: Tensor, view: SmemView | None, op: GmmaOp, *, tile_mn: int,
                 tile_k: int, warpgroups: int, mma: str = "mainloop") -> MmaRead:
        """An MMA operand read of ``src`` through ``view`` (SS: an smem view of the buffer's shape;
        RS, operand A: ``view=None`` and ``src`` a register fragment).

        Raises:
            argus_cutlass.errors.DslError: ``dsl.layout_size`` (the view and the buffer disagree in
                shape), ``dsl.operand`` (operand not A or B; an RS read of B or from smem).
        """
        loc = caller_loc()
        if operand not in ("A", "B"):
            _dsl_error("dsl.operand", loc, f"MMA operand {operand!r} is not 'A' or 'B'")
        if view is None:
            if op.mode != "RS" or operand != "A" or src.space != "rmem":
                _dsl_error("dsl.operand", loc, f"MMA read of {operand} from {src.name!r} without a smem view: only "
                           "operand A of an RS-mode MMA reads a register fragment")
        else:
            if src.space != "smem":
                _dsl_error("dsl.operand", loc, f"MMA read of {operand} through a smem view from {src.name!r} "
                           f"({src.space})")
            if tuple(view.shape) != tuple(src.shape):
                _dsl_error("dsl.layout_size", loc,
                           f"the MMA reads {src.name!r} through a view of shape {view.shape}, but the buffer has "
                           f"shape {src.shape}", "read with a view of the buffer's shape (MN, K, stages)")
        # the GEMM's reads keep their names (gmma_A / gmma_B); reads of other MMAs carry the MMA's name
        name = f"gmma_{operand}" if mma == "mainloop" else f"gmma_{mma}_{operand}"
        if any(r.name == name for r in self._reads):
            _dsl_error("dsl.duplicate", loc, f"MMA {mma!r} reads operand {operand} twice")
        node = MmaRead(name, operand, src.name, view, op, tile_mn, tile_k, warpgroups, loc, mma)
        self._reads.append(node)
        return node

    def mma(self, name: str, op: GmmaOp, a: MmaRead, b: MmaRead, acc: Tensor, *, atoms_m: int,
            reps_m: int) -> Mma:
        """A tiled warpgroup MMA over the reads ``a`` and ``b`` into ``acc`` (see :class:`Mma`).

        Raises:
            argus_cutlass.errors.DslError: ``dsl.operand`` (the accumulator is not an fp32
                register tensor, or the reads belong to another MMA).
        """
        loc = caller_loc()
        if acc.space != "rmem":
            _dsl_error("dsl.operand", loc, f"MMA accumulator {acc.name!r} is in {acc.space}, not registers")
        for r in (a, b):
            if r.mma != name:
                _dsl_error("dsl.operand", loc, f"MMA {name!r}: read {r.name!r} belongs to MMA {r.mma!r}")
        node = Mma(name, op, a.name, b.name, acc.name, atoms_m, reps_m, loc)
        self._mmas.append(node)
        return node

    def fragment_convert(self, src: Tensor, dst: Tensor, dtype: str,
                         pairing: tuple[int, ...] = ()) -> FragmentConvert:
        """Accumulator ``src`` -> A-operand register fragment ``dst`` (see :class:`FragmentConvert`);
        ``pairing`` empty is the identity repack.

        Raises:
            argus_cutlass.errors.DslError: ``dsl.operand`` (either side not in registers),
                ``dsl.layout_size`` (shapes differ), ``dsl.dtype`` (``dtype`` unknown or not the
                destination's).
        """
        loc = caller_loc()
        if dtype not in DTYPE_BYTES or dtype != dst.dtype:
            _dsl_error("dsl.dtype", loc, f"fragment conversion to {dtype!r}: expected one of {sorted(DTYPE_BYTES)} "
                       f"equal to the destination {dst.name!r}'s dtype {dst.dtype!r}")
        if src.space != "rmem" or dst.space != "rmem":
            _dsl_error("dsl.operand", loc, f"fragment conversion {src.name!r} -> {dst.name!r}: both must be "
                       "register tensors")
        if tuple(src.shape) != tuple(dst.shape):
            _dsl_error("dsl.layout_size", loc, f"fragment conversion {src.name!r} {src.shape} -> {dst.name!r} "
                       f"{dst.shape}: the shapes differ")
        node = FragmentConvert(f"convert_{dst.name}", src.name, dst.name, dtype, loc, tuple(pairing))
        self._converts.append(node)
        return node

    def reduction(self, src: Tensor, op: str, *, xor_lanes: tuple[int, ...] = (1, 2)) -> Reduction:
        """Row ``op`` (``max`` / ``sum``) of register tensor ``src`` across its quad.

        Raises:
            argus_cutlass.errors.DslError: ``dsl.operand`` (unknown op, not a register tensor, a lane
                mask outside 1..31).
        """
        loc = caller_loc()
        if op not in ("max", "sum"):
            _dsl_error("dsl.operand", loc, f"reduction op {op!r}: expected 'max' or 'sum'")
        if src.space != "rmem":
            _dsl_error("dsl.operand", loc, f"reduction over {src.name!r} ({src.space}): registers only")
        if not xor_lanes or not all(isinstance(m, int) and 1 <= m <= 31 for m in xor_lanes):
            _dsl_error("dsl.operand", loc, f"reduction xor_lanes {tuple(xor_lanes)}: shfl.sync.bfly lane masks are "
                       "ints in 1..31 (PTX ISA 9.7.9.6)")
        node = Reduction(f"{op}_{src.name}", src.name, op, tuple(xor_lanes), loc)
        self._reductions.append(node)
        return node

    # ------------------------------------------------------------------------ synchronisation
    def pipeline(self, name: str, loads: tuple[TmaLoad, ...], *, stages: int, tx_bytes: int,
                 producer_arrivals: int, consumer_arrivals: int, consumer_arrivers: int,
                 producer: PipelineSide, consumer: PipelineSide, mma_in_flight: int = 1,
                 release_lag: int = 1, barrier_bytes: int = 0) -> Pipeline:
        """An mbarrier pipeline filled by ``loads`` (see :class:`Pipeline`); its buffers are the
        loads' destinations.

        Raises:
            argus_cutlass.errors.DslError: ``dsl.unknown_ref`` (a load completes on another
                pipeline), ``dsl.duplicate``.
        """
        loc = caller_loc()
        if any(p.name == name for p in self._pipelines):
            _dsl_error("dsl.duplicate", loc, f"pipeline {name!r} is declared twice")
        for ld in loads:
            if ld.pipeline != name:
                _dsl_error("dsl.unknown_ref", loc, f"pipeline {name!r} lists {ld.name!r}, which completes on "
                           f"pipeline {ld.pipeline!r}")
        node = Pipeline(name, stages, tuple(ld.dst for ld in loads), tuple(ld.name for ld in loads), tx_bytes,
                        producer_arrivals, consumer_arrivals, consumer_arrivers, producer, consumer, loc,
                        mma_in_flight, release_lag, barrier_bytes)
        self._pipelines.append(node)
        return node

    def k_loop(self, *, tile_k: int, block_k: int, k_blocks: int, rounding: str = "ceil",
               oob_fill: str = "zero", bound_bits: int = 24, name: str = "k", acc_sets: int = 1,
               acc_zeroed: int | None = None, acc_summed: tuple[int, ...] | None = None) -> KLoop:
        """The symbolic-trip-count loop over k tiles (see :class:`KLoop`). ``acc_zeroed`` / ``acc_summed``
        default to the correct values for ``acc_sets`` (one zeroing k-block per set; every other set summed
        into set 0)."""
        node = KLoop(name, tile_k, block_k, k_blocks, rounding, oob_fill, caller_loc(), bound_bits, acc_sets,
                     acc_sets if acc_zeroed is None else acc_zeroed,
                     tuple(range(1, acc_sets)) if acc_summed is None else tuple(acc_summed))
        self._loops.append(node)
        return node

    def role(self, name: str, kind: str, *, warpgroups: tuple[int, ...], issue_warps: tuple[int, ...],
             regs: int) -> Role:
        """A warp-specialized role (see :class:`Role`).

        Raises:
            argus_cutlass.errors.DslError: ``dsl.operand`` (kind not producer/consumer, ``regs`` not
                a multiple of 8 in [24, 256]).
        """
        loc = caller_loc()
        if kind not in ("producer", "consumer"):
            _dsl_error("dsl.operand", loc, f"role kind {kind!r}: expected 'producer' or 'consumer'")
        if not isinstance(regs, int) or regs % 8 or not 24 <= regs <= 256:
            _dsl_error("dsl.operand", loc, f"role {name!r}: setmaxnreg takes a multiple of 8 in [24, 256] registers, "
                       f"got {regs!r} (PTX ISA 9.7.17.1)")
        node = Role(name, kind, tuple(warpgroups), tuple(issue_warps), regs, loc)
        self._roles.append(node)
        return node

    def named_barrier(self, name: str, *, id: int, threads: int) -> NamedBarrier:  # noqa: A002 - PTX's word
        """A named barrier ``bar.sync id, threads`` (see :class:`NamedBarrier`).

        Raises:
            argus_cutlass.errors.DslError: ``dsl.duplicate`` (name taken), ``dsl.operand`` (id not in
                1..15, threads not a positive multiple of 32).
        """
        loc = caller_loc()
        if any(b.name == name for b in self._barriers):
            _dsl_error("dsl.duplicate", loc, f"named barrier {name!r} is declared twice")
        if not isinstance(id, int) or not 1 <= id <= 15:
            _dsl_error("dsl.operand", loc, f"named barrier {name!r}: id {id!r} must be in 1..15 (a CTA has 16 "
                       "barriers; 0 is __syncthreads; PTX ISA 9.7.13.1)")
        if not isinstance(threads, int) or threads <= 0 or threads % 32:
            _dsl_error("dsl.operand", loc, f"named barrier {name!r}: {threads!r} threads is not a positive multiple "
                       "of the warp size (PTX ISA 9.7.13.1)")
        node = NamedBarrier(name, id, threads, loc)
        self._barriers.append(node)
        return node

    def turn_order(self, name: str, *, groups: int, points: tuple[str, ...],
                   barriers: tuple[tuple[str, ...], ...], first: int = 0) -> TurnOrder:
        """Groups taking turns at ``points`` through named ``barriers[point][group]``.

        Raises:
            argus_cutlass.errors.DslError: ``dsl.unknown_ref`` (a barrier that is not declared),
                ``dsl.layout_size`` (not one barrier per group and point), ``dsl.operand`` (fewer
                than 2 groups, ``first`` not one of them).
        """
        loc = caller_loc()
        have = [b.name for b in self._barriers]
        if not isinstance(groups, int) or groups < 2 or not isinstance(first, int) or not 0 <= first < groups:
            _dsl_error("dsl.operand", loc, f"turn order {name!r}: groups {groups!r} must be an int >= 2 and first "
                       f"{first!r} one of them")
        if len(barriers) != len(points) or any(len(row) != groups for row in barriers):
            _dsl_error("dsl.layout_size", loc, f"turn order {name!r}: need {len(points)} rows of {groups} barriers, "
                       f"got {barriers}")
        for row in barriers:
            for bname in row:
                self._need("named barrier", bname, loc, have)
        node = TurnOrder(name, groups, tuple(points), tuple(tuple(r) for r in barriers), first, loc)
        self._orders.append(node)
        return node

    # ------------------------------------------------------------------------------- epilogue
    def epilogue_store(self, *, tile_m: int, tile_n: int, op: GmmaOp, warpgroups: int, epi_m: int, epi_n: int,
                       d_major: str = "N", row_offset: int = 0, residue_mask: bool = True,
                       acc: str = "accum", dst: str = "gD") -> EpilogueStore:
        node = EpilogueStore(tile_m, tile_n, op.m, op.n, warpgroups, d_major, row_offset, residue_mask, caller_loc(),
                             epi_m, epi_n, acc, dst)
        self._single["epilogue"] = node
        return node

    def epilogue_source(self, src: Tensor, *, path: str = "gmem", residue_mask: bool = True,
                        row_offset: int = 0) -> EpilogueSource:
        """How the epilogue reads C (see :class:`EpilogueSource`).

        Raises:
            argus_cutlass.errors.DslError: ``dsl.operand`` (unknown path).
        """
        loc = caller_loc()
        if path not in ("gmem", "none"):
            _dsl_error("dsl.operand", loc, f"C source path {path!r}: expected 'gmem' or 'none'")
        node = EpilogueSource(src.name, path, residue_mask, row_offset, loc)
        self._single["source"] = node
        return node

    def smem_stage(self, src: str, dst: Tensor, *, op: str, num: int = 4, trans: bool = False,
                   view: SmemView | None = None, row_lane_skew: int = 0,
                   matrix_order: tuple[int, ...] | None = None, store_wait: int | None = None,
                   barrier: str = "epilogue") -> SmemStage:
        """The epilogue's register -> smem step from the accumulator ``src`` into the staging buffer
        ``dst`` (``(epi_m, epi_n, stages)``) through ``view``; see :class:`SmemStage`.

        Raises:
            argus_cutlass.errors.DslError: see :func:`~argus_cutlass.dsl.ir.validate_staging`.
        """
        loc = caller_loc()
        if len(dst.shape) != 3:
            _dsl_error("dsl.layout_size", loc, f"staging buffer {dst.name!r} has shape {dst.shape}; "
                       "expected (epi_m, epi_n, stages)")
        order = tuple(range(num)) if matrix_order is None else tuple(matrix_order)
        wait = dst.shape[2] - 1 if store_wait is None else store_wait
        node = SmemStage(src, dst.name, dst.shape[0], dst.shape[1], op, num, trans, row_lane_skew, order, wait, loc,
                         view, barrier)
        validate_staging(node, dst)
        self._single["staging"] = node
        return node

    def tile_schedule(self, *, raster: str, swizzle: int, decomposition: str = "persistent", step_delta: int = 0,
                      cluster_m: int = 1, cluster_n: int = 1, splits: int = 1,
                      consumer_stride: int = 1, longest_first: bool = False, slot_bytes: int = -1,
                      reduction: str = "deterministic", reduce_buffer: str = "", slot_sync: str = "") -> TileSchedule:
        """The persistent tile scheduler (see :class:`TileSchedule`; ``reduce_buffer``: the smem tensor of a
        ``clusterk`` decomposition's partial sums; ``slot_sync``: the dynamic scheduler's per-warpgroup
        barriers between the unit-slot read and the stage's release)."""
        node = TileSchedule(raster, swizzle, step_delta, decomposition, caller_loc(), cluster_m, cluster_n, splits,
                            consumer_stride, longest_first, slot_bytes, reduction=reduction,
                            reduce_buffer=reduce_buffer, slot_sync=slot_sync)
        self._single["schedule"] = node
        return node

    # ------------------------------------------------------------------------------ attention
    def mask(self, acc: Tensor, *, causal: bool, bottom_right: bool = True, key_bound: bool = True,
             diagonal_shift: int = 0, name: str = "mask") -> Mask:
        """Attention's score mask on the S accumulator ``acc`` (see :class:`Mask`).

        Raises:
            argus_cutlass.errors.DslError: ``dsl.operand`` (``acc`` is not a register tensor, a
                flag that is not a bool).
        """
        loc = caller_loc()
        if acc.space != "rmem":
            _dsl_error("dsl.operand", loc, f"mask on {acc.name!r} ({acc.space}): the mask acts on the S accumulator "
                       "registers")
        node = Mask(name, acc.name, causal, bottom_right, key_bound, diagonal_shift, loc)
        self._single["mask"] = node
        return node

    def online_softmax(self, src: Tensor, acc: Tensor, *, max: Reduction, sum: Reduction,  # noqa: A002
                       rescale: bool = True, fold_log2e: bool = True, name: str = "softmax") -> OnlineSoftmax:
        """The online softmax of the S accumulator ``src`` rescaling the O accumulator ``acc``
        (see :class:`OnlineSoftmax`).

        Raises:
            argus_cutlass.errors.DslError: ``dsl.operand`` (a reduction over another tensor or with the
                wrong op, an accumulator that is not in registers).
        """
        loc = caller_loc()
        for red, op in ((max, "max"), (sum, "sum")):
            if red.src != src.name or red.op != op:
                _dsl_error("dsl.operand", loc, f"softmax over {src.name!r}: reduction {red.name!r} is a {red.op} over "
                           f"{red.src!r}, expected a {op} over {src.name!r}")
        if src.space != "rmem" or acc.space != "rmem":
            _dsl_error("dsl.operand", loc, f"softmax {src.name!r} -> {acc.name!r}: both are register tensors")
        node = OnlineSoftmax(name, src.name, acc.name, max.name, sum.name, rescale, fold_log2e, loc)
        self._single["softmax"] = node
        return node

    def row_output(self, acc: Tensor, dst: Tensor, lse: Tensor, *, normalize: bool = True, row_mask: bool = True,
                   row_offset: int = 0, head: str = "q", name: str = "output", store_mode: str = "direct",
                   shuffle: tuple[int, ...] = (), group_cols: int = 8, lane_cols: int = 2) -> RowOutput:
        """Attention's epilogue: O accumulator ``acc`` -> gmem ``dst`` (and the LSE into ``lse``);
        see :class:`RowOutput`.

        Raises:
            argus_cutlass.errors.DslError: ``dsl.operand`` (``dst``/``lse`` not gmem, ``acc`` not
                registers), ``dsl.untagged`` (``dst`` carries no tag).
        """
        loc = caller_loc()
        if acc.space != "rmem" or dst.space != "gmem" or lse.space != "gmem":
            _dsl_error("dsl.operand", loc, f"row output {acc.name!r} -> {dst.name!r}, {lse.name!r}: registers to "
                       "gmem")
        if dst.tag is None or lse.tag is None:
            _dsl_error("dsl.untagged", loc, f"row output destinations {dst.name!r} / {lse.name!r} carry no tag")
        node = RowOutput(name, acc.name, dst.name, lse.name, normalize, row_mask, row_offset, loc, head, store_mode,
                         tuple(shuffle), group_cols, lane_cols)
        self._single["output"] = node
        return node

    def stage_copy(self, operand: str, direction: str, dtype: str, *, rows: str, cols: str, align: int,
                   fill: str = "zero", map_extent: str = "staged", base_align: int = 256) -> StageCopy:
        """Stage caller operand ``operand`` through an aligned buffer (see
        :class:`~argus_cutlass.dsl.ir.StageCopy`); ``in`` copies it before the GEMM, ``out`` after.

        Raises:
            argus_cutlass.errors.DslError: ``dsl.duplicate`` (the operand is staged already),
                ``dsl.operand`` / ``dsl.dtype`` (a malformed field).
        """
        loc = caller_loc()
        name = f"stage_{operand}"
        if any(c.name == name for c in self._stage_copies):
            _dsl_error("dsl.duplicate", loc, f"operand {operand!r} is staged twice")
        src, dst = ("caller", "staged") if direction == "in" else ("staged", "caller")
        node = StageCopy(name, operand, direction, dtype, rows, cols, align, fill if direction == "in" else "none",
                         map_extent, src, dst, loc, base_align=base_align)
        self._stage_copies.append(node)
        return node

    def launch(self, *, threads: int, cluster_m: int = 1, cluster_n: int = 1, pdl: bool = False) -> Launch:
        node = Launch(threads, cluster_m, cluster_n, caller_loc(), pdl)
        self._single["launch"] = node
        return node

    def param(self, key: str, value: Any) -> None:
        """A scalar program choice printed as such (e.g. ``swap_ab``)."""
        self._params[key] = value

    # ----------------------------------------------------------------------------- assertions
    def relate_family(self, family: str) -> None:
        """State the consistency relations of ``family`` (:data:`~argus_cutlass.dsl.ir.FAMILY_RELATIONS`, the
        ones the verifier requires) through :meth:`relate`."""
        for lhs, relation, rhs, invariant, rule in FAMILY_RELATIONS[family]:
            self.relate(lhs, relation, rhs, invariant=invariant, rule=rule)

    def assert_tags_of(self, family: str) -> None:
        """State the tag assertions of ``family`` (:data:`~argus_cutlass.dsl.ir.FAMILY_TAG_ASSERTIONS`,
        the ones the verifier requires) through :meth:`assert_tags`."""
        for at, lhs, relation, rhs, invariant, rule in FAMILY_TAG_ASSERTIONS[family]:
            self.assert_tags(at, lhs, relation, rhs, invariant=invariant, rule=rule)

    def assert_tags(self, at: str, lhs: tuple[str, str], relation: str, rhs: tuple[str, str], *,
                    invariant: str, rule: str) -> TagAssertion:
        """State ``lhs.field relation rhs.field`` at every slot of program point ``at``.

        Operands are MMA operands already read (``("A", "k")``; their tag is the tag of the gmem
        tensor their buffer was loaded from), the slot itself (``("slot", "m")``), the
        accumulator (``("acc", "m")``) or a constant (``("const", "0")``).

        Raises:
            argus_cutlass.errors.DslError: ``dsl.untagged`` (an operand with no MMA read, or whose
                buffer no tagged TMA load fills), ``dsl.unknown_tag`` (a field the tag does not
                have), ``dsl.relation`` (an unknown relation).
        """
        loc = caller_loc()
        if relation not in RELATIONS:
            _dsl_error("dsl.relation", loc, f"relation {relation!r} is not one of {list(RELATIONS)}")
        for value, fld in (lhs, rhs):
            if value in _SLOT_VALUES:
                continue
            tag = self._operand_tag(at, value)
            if tag is None:
                _dsl_error("dsl.untagged", loc,
                           f"assertion over {value}.{fld}: {value!r} has no MMA read of a tagged TMA-loaded buffer "
                           "(or of a register fragment converted from a tagged accumulator)",
                           "declare the TMA load and the MMA read before asserting on the operand")
            if fld not in tag.fields:
                _dsl_error("dsl.unknown_tag", loc,
                           f"assertion over {value}.{fld}: tag {tag} has no field {fld!r}",
                           f"use one of {list(tag.fields)}")
        node = TagAssertion(f"{invariant}:{lhs[0]}.{lhs[1]}{relation}{rhs[0]}.{rhs[1]}", at, lhs, relation, rhs,
                            invariant, rule, loc)
        self._asserts.append(node)
        return node

    def _operand_tag(self, at: str, operand: str) -> Tag | None:
        """The tag operand ``operand`` carries at program point ``at``: the read of that operand by
        the MMA ``at`` starts with (``"pv.gemm"`` -> MMA ``pv``; the first read of the operand when
        no MMA has that name), whose buffer is filled by a tagged TMA load, or (RS mode) whose
        register fragment is converted from a tagged accumulator (the conversion keeps tags)."""
        reads = [r for r in self._reads if r.operand == operand]
        mma = at.split(".")[0]
        read = next((r for r in reads if r.mma == mma), reads[0] if reads else None)
        if read is None:
            return None
        load = next((ld for ld in self._loads if ld.dst == read.src), None)
        if load is not None:
            return load.src_tag
        conv = next((c for c in self._converts if c.dst == read.src), None)
        src = next((t for t in self._tensors if conv is not None and t.name == conv.src), None)
        return src.tag if src is not None else None

    def relate(self, lhs: str, relation: str, rhs: str, *, invariant: str, rule: str,
               name: str | None = None) -> Relation:
        """State a consistency relation between two node fields (see :class:`Relation`); both
        paths must resolve on the program built so far.

        Raises:
            argus_cutlass.errors.DslError: ``dsl.relation`` (unknown relation), ``dsl.unknown_ref``
                (a path naming a node or field that does not exist).
        """
        loc = caller_loc()
        if relation not in RELATIONS:
            _dsl_error("dsl.relation", loc, f"relation {relation!r} is not one of {list(RELATIONS)}")
        partial = self._program()
        for path in (lhs, rhs):
            try:
                partial.resolve(path)
            except KeyError as exc:
                _dsl_error("dsl.unknown_ref", loc, f"relation {lhs} {relation} {rhs}: {exc.args[0]}")
        node = Relation(name or f"{rule}:{lhs}{relation}{rhs}", lhs, relation, rhs, invariant, rule, loc)
        self._relations.append(node)
        return node

    # ---------------------------------------------------------------------------------- build
    def _program(self) -> Program:
        return Program(
            self.family, self.name, tuple(self._tensors), tuple(self._loads), tuple(self._reads),
            tuple(self._asserts), tuple(self._pipelines), tuple(self._loops), tuple(self._mmas), tuple(self._stores),
            tuple(self._roles), tuple(self._barriers), tuple(self._orders), tuple(self._converts),
            tuple(self._reductions), tuple(self._relations), self._single.get("epilogue"), self._single.get("source"),
            self._single.get("staging"), self._single.get("schedule"), self._single.get("launch"),
            tuple(sorted(self._params.items())), self._single.get("mask"), self._single.get("softmax"),
            self._single.get("output"), stage_copies=tuple(self._stage_copies))

    def build(self) -> Program:
        """The program. Checks that every node's references exist.

        Raises:
            argus_cutlass.errors.DslError: ``dsl.unknown_ref`` at the referring node's line.
        """
        p = self._program()
        tensors = [t.name for t in p.tensors]
        pipes = [x.name for x in p.pipelines]
        for ld in p.loads:
            self._need("tensor", ld.src, ld.loc, tensors)
            self._need("tensor", ld.dst, ld.loc, tensors)
            if p.pipelines:
                self._need("pipeline", ld.pipeline, ld.loc, pipes)
        for st in p.stores:
            self._need("tensor", st.src, st.loc, tensors)
            self._need("tensor", st.dst, st.loc, tensors)
        for r in p.reads:
            self._need("tensor", r.src, r.loc, tensors)
        for m in p.mmas:
            self._need("tensor", m.acc, m.loc, tensors)
        for c in p.converts:
            self._need("tensor", c.src, c.loc, tensors)
            self._need("tensor", c.dst, c.loc, tensors)
        for x in p.pipelines:
            for buf in x.buffers:
                self._need("tensor", buf, x.loc, tensors)
        if p.staging is not None and p.barriers:
            self._need("named barrier", p.staging.barrier, p.staging.loc, [b.name for b in p.barriers])
        if p.source is not None:
            self._need("tensor", p.source.src, p.source.loc, tensors)
        if p.mask is not None:
            self._need("tensor", p.mask.acc, p.mask.loc, tensors)
        if p.softmax is not None:
            for t in (p.softmax.src, p.softmax.acc):
                self._need("tensor", t, p.softmax.loc, tensors)
        if p.output is not None:
            for t in (p.output.acc, p.output.dst, p.output.lse):
                self._need("tensor", t, p.output.loc, tensors)
        return p
