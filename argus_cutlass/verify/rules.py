"""Resource and shape rules of one SM90 GEMM program (closed-form arithmetic).

Each rule has a stable name, returns every violation it finds (never stops at the
first) and, when it holds, a :class:`Proof` whose summary carries the numbers.

Sources per rule are in each function's docstring.
"""

from __future__ import annotations

from typing import Callable

from argus_cutlass.dsl.ir import DslProgram
from argus_cutlass.plan.resources import (
    CONSUMER_REGISTERS,
    SMEM_LIMIT_BYTES,
    accumulator_registers,
    smem_bytes,
    swizzle_alignment,
)
from argus_cutlass.programs.gemm import GemmProgram
from argus_cutlass.verify.catalogue import invariant_of
from argus_cutlass.verify.report import Proof, Violation

#: registers a consumer thread needs beside its accumulators (descriptors, addresses, loop
#: state, epilogue fragment); a model constant, calibrated so that CUTLASS's shipped tiles
#: (<= 128 accumulators per thread) fit and 256-accumulator tiles do not.
REGISTER_OVERHEAD = 32
#: most CTAs in a portable thread-block cluster (CUDA Programming Guide, "Thread Block Clusters")
MAX_PORTABLE_CLUSTER = 8
#: most elements per TMA box dimension (cuTensorMapEncodeTiled: boxDim[i] <= 256)
MAX_TMA_BOX = 256

Outcome = tuple[list[Proof], list[Violation]]


def _ok(rule: str, summary: str, engine: str = "arith") -> Outcome:
    return [Proof(rule, invariant_of(rule), engine, summary)], []


def _bad(rule: str, messages: list[str], hint: str | None = None, where: str = "") -> Outcome:
    return [], [Violation(rule, invariant_of(rule), m, hint, where) for m in messages]


def _kib(x: int) -> str:
    return f"{x / 1024:g} KiB"


def check_smem_capacity(program: GemmProgram, dsl: DslProgram) -> Outcome:
    """smem.capacity: CTA shared memory (incl. barriers and alignment padding) <= 232448 bytes.

    Source: CUDA C++ Programming Guide, compute capability 9.0 (227 KiB opt-in per block);
    the byte model is :func:`argus_cutlass.plan.resources.smem_bytes`.
    """
    rule = "smem.capacity"
    sb = smem_bytes(program)
    stages = program.pipeline.stages
    per_stage = program.a.stage_bytes + program.b.stage_bytes
    epi = sb.c + sb.d
    text = (
        f"{stages} stages x {per_stage} bytes ({_kib(per_stage)}: A {program.a.stage_bytes} + "
        f"B {program.b.stage_bytes}) + epilogue {epi} bytes ({_kib(epi)}) + barriers {sb.barriers}"
        f" + padding {sb.padding} = {sb.total} bytes"
    )
    if sb.total <= SMEM_LIMIT_BYTES:
        return _ok(rule, f"{sb.total} <= {SMEM_LIMIT_BYTES} bytes ({stages} stages)")
    fixed = sb.total - stages * per_stage
    fit = max(0, (SMEM_LIMIT_BYTES - fixed) // per_stage) if per_stage else 0
    return _bad(rule, [f"{text} > {SMEM_LIMIT_BYTES} bytes (sm_90 limit)"],
                f"at most {fit} stages fit this tile; lower stages or tile_k")


def check_smem_alignment(program: GemmProgram, dsl: DslProgram) -> Outcome:
    """smem.alignment: every swizzled smem buffer, and every stage inside it, starts at a
    multiple of its swizzle period (``8 x swizzle_bytes``, at least 128 bytes).

    Source: PTX ISA 9.7.15.5.1 (matrix descriptor base offset assumed 0);
    ``cutlass/detail/layout.hpp::alignment_for_swizzle``.
    """
    rule = "smem.alignment"
    bad = []
    where = []
    n = 0
    for t in dsl.tensors:
        if t.space != "smem":
            continue
        n += 1
        align = swizzle_alignment(t.swizzle_bytes)
        if t.base_bytes % align:
            bad.append(
                f"{t.name} base offset {t.base_bytes} bytes is not a multiple of the {align}-byte "
                f"period of its {t.swizzle_bytes}-byte swizzle ({t.base_bytes} % {align} = "
                f"{t.base_bytes % align})"
            )
            where.append(str(t.loc))
        stage_bytes = t.size_bytes // t.shape[-1]
        if stage_bytes % align:
            bad.append(
                f"{t.name} stage size {stage_bytes} bytes is not a multiple of the {align}-byte "
                f"swizzle period ({stage_bytes} % {align} = {stage_bytes % align})"
            )
    if bad:
        return _bad(rule, bad, "place swizzled buffers at their swizzle alignment", ", ".join(where))
    return _ok(rule, f"{n} swizzled smem buffers and their stages at swizzle-period alignment")


def check_registers(program: GemmProgram, dsl: DslProgram) -> Outcome:
    """registers: fp32 accumulators per consumer thread + REGISTER_OVERHEAD <= 232.

    Source: CUTLASS ``sm90_gemm_tma_warpspecialized_{cooperative,pingpong}.hpp``
    (``setmaxnreg``: 40 producer / 232 consumer registers per thread).
    """
    rule = "registers"
    cfg = program.config
    acc = accumulator_registers(program)
    total = acc + REGISTER_OVERHEAD
    if total <= CONSUMER_REGISTERS:
        return _ok(rule, f"{acc} accumulator + {REGISTER_OVERHEAD} overhead = {total} <= "
                         f"{CONSUMER_REGISTERS} registers/thread")
    return _bad(rule, [
        f"{cfg.schedule} {cfg.tile_m}x{cfg.tile_n} tile: {acc} fp32 accumulator registers per "
        f"consumer thread ({cfg.wg_tile_m}x{cfg.tile_n} per warpgroup / 128 threads) + "
        f"{REGISTER_OVERHEAD} overhead = {total} > {CONSUMER_REGISTERS} registers "
        f"(CUTLASS consumer budget)"
    ], "use the cooperative schedule or a smaller tile_m/tile_n")


def _tma_copies(program: GemmProgram):
    e = program.epilogue
    return (("A load", program.a.tma), ("B load", program.b.tma),
            ("C load", e.tma_load_c), ("D store", e.tma_store_d))


def check_tma_box_extent(program: GemmProgram, dsl: DslProgram) -> Outcome:
    """tma.box_extent: every TMA box dimension is in [1, 256] elements.

    Source: CUDA driver API ``cuTensorMapEncodeTiled`` (``boxDim[i]`` <= 256).
    """
    rule = "tma.box_extent"
    bad = []
    for what, tma in _tma_copies(program):
        for i, d in enumerate(tma.box):
            if not 1 <= d <= MAX_TMA_BOX:
                bad.append(f"TMA {what} box {tma.box}: dim {i} = {d} elements > {MAX_TMA_BOX}"
                           if d > MAX_TMA_BOX else f"TMA {what} box {tma.box}: dim {i} = {d} < 1")
    if bad:
        return _bad(rule, bad, "split the tile into more boxes or use a smaller tile")
    return _ok(rule, "all 4 TMA boxes have every dim <= 256")


def check_tma_box_inner_bytes(program: GemmProgram, dsl: DslProgram) -> Outcome:
    """tma.box_inner_bytes: inner box extent x element bytes is a multiple of 16 and, for a
    swizzled tensor map, at most the swizzle span (32/64/128 bytes).

    Source: CUDA driver API ``cuTensorMapEncodeTiled`` (``boxDim[0] * elementSize`` multiple
    of 16 bytes; <= swizzle size when swizzled); PTX ISA 5.5 tensor-map swizzle modes.
    """
    rule = "tma.box_inner_bytes"
    bad = []
    for what, tma in _tma_copies(program):
        inner = tma.box[0] * tma.elem_bits // 8
        if inner % 16:
            bad.append(f"TMA {what} inner box {tma.box[0]} x {tma.elem_bits // 8} bytes = "
                       f"{inner} bytes is not a multiple of 16")
        if tma.swizzle_bytes > 16 and inner > tma.swizzle_bytes:
            bad.append(f"TMA {what} inner box {tma.box[0]} x {tma.elem_bits // 8} bytes = "
                       f"{inner} bytes > {tma.swizzle_bytes}-byte swizzle span")
    if bad:
        return _bad(rule, bad, "the inner box must be one swizzle row of 16-byte chunks")
    return _ok(rule, "all TMA inner boxes are 16-byte multiples within their swizzle span")


def check_gmma_n(program: GemmProgram, dsl: DslProgram) -> Outcome:
    """gmma.n: the GMMA instruction's N is a multiple of 8 in [8, 256].

    Source: PTX ISA 9.7.15.5 (wgmma ``.m64nNk16``: N = 8..256 step 8).
    """
    rule = "gmma.n"
    n = program.tiled_mma.op.n
    if n % 8 == 0 and 8 <= n <= 256:
        return _ok(rule, f"GMMA 64x{n}x16: N={n} is a multiple of 8 in [8, 256]")
    return _bad(rule, [f"GMMA N = {n} (tile_n {program.config.tile_n}) is not a multiple of 8 "
                       f"in [8, 256]"], "tile_n must be a multiple of 8 and at most 256")


def check_gmma_m_tile(program: GemmProgram, dsl: DslProgram) -> Outcome:
    """gmma.m_tile: tile_m is a multiple of 64 x (GMMA atoms along M); tile_k of 16.

    Source: PTX ISA 9.7.15.5 (wgmma M = 64, K = 16 for 16-bit types);
    ``cute/atom/mma_traits_sm90_gmma.hpp``; the cooperative schedule tiles 2 atoms along M.
    """
    rule = "gmma.m_tile"
    cfg = program.config
    mma = program.tiled_mma
    bad = []
    unit = mma.op.m * mma.atoms_m
    if cfg.tile_m % unit:
        bad.append(f"tile_m {cfg.tile_m} is not a multiple of {mma.op.m} x {mma.atoms_m} "
                   f"({cfg.schedule} GMMA atoms along M) = {unit}")
    if cfg.tile_k % mma.op.k:
        bad.append(f"tile_k {cfg.tile_k} is not a multiple of the GMMA K = {mma.op.k}")
    if bad:
        return _bad(rule, bad, "cooperative needs tile_m % 128 == 0, pingpong tile_m % 64 == 0")
    return _ok(rule, f"tile {cfg.tile_m}x{cfg.tile_k} = {cfg.tile_m // unit} x {unit} rows, "
                     f"{cfg.tile_k // mma.op.k} k-blocks of {mma.op.k}")


def check_epilogue_tile(program: GemmProgram, dsl: DslProgram) -> Outcome:
    """epilogue.tile: the epilogue subtile divides the CTA tile, epi_m is 128 (cooperative)
    or 64 (pingpong), and epi_n % 16 == 0.

    Source: CUTLASS ``epilogue/collective/builders/sm90_builder.inl``
    (``sm90_compute_tile_shape_or_override``) and the STSM copy atoms (16 columns).
    """
    rule = "epilogue.tile"
    cfg = program.config
    bad = []
    want_m = 128 if cfg.schedule == "cooperative" else 64
    if cfg.tile_m % cfg.epi_m:
        bad.append(f"epi_m {cfg.epi_m} does not divide tile_m {cfg.tile_m}")
    if cfg.tile_n % cfg.epi_n:
        bad.append(f"epi_n {cfg.epi_n} does not divide tile_n {cfg.tile_n}")
    if cfg.epi_m != want_m:
        bad.append(f"epi_m {cfg.epi_m} != {want_m} required by the {cfg.schedule} TMA epilogue")
    if cfg.epi_n % 16:
        bad.append(f"epi_n {cfg.epi_n} is not a multiple of 16 ({cfg.epi_n} % 16 = {cfg.epi_n % 16})")
    if bad:
        return _bad(rule, bad, f"use epi_m={want_m} and an epi_n that is a multiple of 16 dividing tile_n")
    return _ok(rule, f"epilogue {cfg.epi_m}x{cfg.epi_n} tiles {cfg.tile_m}x{cfg.tile_n} "
                     f"({program.epi_subtiles} subtiles)")


def check_cluster(program: GemmProgram, dsl: DslProgram) -> Outcome:
    """cluster: cluster_m * cluster_n <= 8, and each multicast operand tile divides by the
    number of CTAs sharing it (A by cluster_n, B by cluster_m).

    Source: CUDA C++ Programming Guide, "Thread Block Clusters" (portable size 8);
    CUTLASS ``sm90_mma_tma_gmma_ss_warpspecialized.hpp`` (multicast slices of the tile).
    """
    rule = "cluster"
    cfg = program.config
    bad = []
    size = cfg.cluster_m * cfg.cluster_n
    if size > MAX_PORTABLE_CLUSTER:
        bad.append(f"cluster {cfg.cluster_m}x{cfg.cluster_n} = {size} CTAs > {MAX_PORTABLE_CLUSTER} "
                   f"(portable cluster size)")
    if cfg.tile_m % cfg.cluster_n:
        bad.append(f"A is multicast to cluster_n = {cfg.cluster_n} CTAs but tile_m {cfg.tile_m} "
                   f"is not divisible by {cfg.cluster_n}")
    if cfg.tile_n % cfg.cluster_m:
        bad.append(f"B is multicast to cluster_m = {cfg.cluster_m} CTAs but tile_n {cfg.tile_n} "
                   f"is not divisible by {cfg.cluster_m}")
    if bad:
        return _bad(rule, bad, "use a cluster of at most 8 CTAs whose extents divide the tile")
    return _ok(rule, f"cluster {cfg.cluster_m}x{cfg.cluster_n} = {size} <= {MAX_PORTABLE_CLUSTER} CTAs")


def check_stages(program: GemmProgram, dsl: DslProgram) -> Outcome:
    """stages: the mainloop pipeline has at least 2 stages.

    Source: CUTLASS ``sm90_mma_tma_gmma_ss_warpspecialized.hpp`` (``static_assert(Stages >= 2)``).
    """
    rule = "stages"
    s = program.pipeline.stages
    if s >= 2:
        return _ok(rule, f"{s} >= 2 pipeline stages")
    return _bad(rule, [f"{s} pipeline stage(s) < 2: the producer cannot refill while the MMA reads"],
                "use stages >= 2")


def check_tile_scheduler(program: GemmProgram, dsl: DslProgram) -> Outcome:
    """tile_scheduler: stream-K and split-K need the cooperative schedule; ``splits`` >= 2
    exactly for split-K (and <= the k-tiles of one tile are not known here: K is a run-time
    size, CUTLASS clamps the splits to the k-tile count).

    Source: CUTLASS ``sm90_gemm_tma_warpspecialized_pingpong.hpp`` (``static_assert`` that the
    ping-pong kernel supports only the persistent scheduler) and
    ``sm90_tile_scheduler_stream_k.hpp`` (``splits`` selects split-K).
    """
    rule = "tile_scheduler"
    cfg = program.config
    bad = []
    if cfg.scheduler != "persistent" and cfg.schedule != "cooperative":
        bad.append(f"scheduler {cfg.scheduler!r} needs schedule 'cooperative', not {cfg.schedule!r}")
    if cfg.scheduler == "splitk" and cfg.splits < 2:
        bad.append(f"scheduler 'splitk' with splits={cfg.splits}: split-K needs splits >= 2")
    if cfg.scheduler != "splitk" and cfg.splits != 1:
        bad.append(f"splits={cfg.splits} only applies to scheduler 'splitk', not {cfg.scheduler!r}")
    if bad:
        return _bad(rule, bad, "use schedule='cooperative' for stream-K/split-K, splits >= 2 only for split-K")
    extra = f", {cfg.splits} K splits" if cfg.scheduler == "splitk" else ""
    return _ok(rule, f"{cfg.scheduler} tile scheduler with the {cfg.schedule} schedule{extra}")


#: every resource rule, by name, in report order
RULES: dict[str, Callable[[GemmProgram, DslProgram], Outcome]] = {
    "smem.capacity": check_smem_capacity,
    "smem.alignment": check_smem_alignment,
    "registers": check_registers,
    "tma.box_extent": check_tma_box_extent,
    "tma.box_inner_bytes": check_tma_box_inner_bytes,
    "gmma.n": check_gmma_n,
    "gmma.m_tile": check_gmma_m_tile,
    "epilogue.tile": check_epilogue_tile,
    "cluster": check_cluster,
    "stages": check_stages,
    "tile_scheduler": check_tile_scheduler,
}

#: rules whose failure makes the enumeration check meaningless (its domain is ill-formed)
SHAPE_RULES = ("gmma.n", "gmma.m_tile", "stages")

