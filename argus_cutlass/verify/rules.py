"""Resource and shape rules of one GEMM :class:`~argus_cutlass.dsl.ir.Program` (closed-form arithmetic).

Each rule reads only the program's nodes, has a stable name, returns every violation it finds
(never stops at the first) and, when it holds, a :class:`Proof` whose summary carries the
numbers. Resource rules print no counterexample record: their message is the arithmetic.

Sources per rule are in each function's docstring; the byte and register model is
:mod:`argus_cutlass.plan.resources`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from argus_cutlass.dsl.ir import Program
from argus_cutlass.plan.resources import (
    REGISTERS_PER_SM,
    SMEM_LIMIT_BYTES,
    accumulator_registers,
    barrier_region,
    launch_register_cap,
    smem_breakdown,
    smem_total_bytes,
    swizzle_alignment,
)
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
#: ``setmaxnreg`` range (PTX ISA 9.7.17.1)
SETMAXNREG_MIN, SETMAXNREG_MAX = 24, 256

Outcome = tuple[list[Proof], list[Violation]]


def _ok(rule: str, summary: str, engine: str = "arith") -> Outcome:
    return [Proof(rule, invariant_of(rule), engine, summary)], []


def _bad(rule: str, messages: list[str], hint: str | None = None, where: str = "") -> Outcome:
    return [], [Violation(rule, invariant_of(rule), m, hint, where) for m in messages]


def _kib(x: int) -> str:
    return f"{x / 1024:g} KiB"


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


# --------------------------------------------------------------------------------- shared memory


def check_smem_capacity(program: Program) -> Outcome:
    """smem.capacity: the dynamic shared memory the kernel asks for, ``kSmemBytes = barrier_bytes +
    2 x stages x 8 + 1024`` (the buffers, the mbarriers after them and the slack that aligns the
    dynamic base to 1024 bytes), is at most 232448 bytes.

    Source: CUDA C++ Programming Guide, compute capability 9.0 (227 KiB opt-in per block);
    ``templates/gemm/traits.j2`` (``kSmemBytes``).
    """
    rule = "smem.capacity"
    sb = smem_breakdown(program)
    total = smem_total_bytes(program)
    stages = sb.stages
    per_stage = sb.per_stage
    parts = " + ".join(f"{k.removeprefix('s')} {v}" for k, v in sb.stage_bytes.items())
    text = (f"{stages} stages x {per_stage} bytes ({_kib(per_stage)}: {parts}) + epilogue {sb.epilogue} bytes "
            f"({_kib(sb.epilogue)}) + padding {sb.padding} + barriers {sb.barriers} + base alignment {sb.align} "
            f"= {total} bytes")
    outside = [f"{t.name} [{t.base_bytes}, {t.base_bytes + t.size_bytes}) is not inside the kernel's allocation: "
               f"the buffers must lie in [0, barrier_bytes = {program.pipeline.barrier_bytes}) (kSmemBytes = {total})"
               for t in program.tensors if t.space == "smem"
               and (t.base_bytes < 0 or t.base_bytes + t.size_bytes > program.pipeline.barrier_bytes)]
    if outside:
        return _bad(rule, outside, "place every buffer before the mbarriers (barrier_bytes after the last buffer)",
                    str(program.pipeline.loc))
    if total <= SMEM_LIMIT_BYTES:
        return _ok(rule, f"{total} <= {SMEM_LIMIT_BYTES} bytes ({stages} stages; kSmemBytes = barrier_bytes "
                         f"{program.pipeline.barrier_bytes} + {sb.barriers} + {sb.align})")
    fit = stages_that_fit(program)
    return _bad(rule, [f"{text} > {SMEM_LIMIT_BYTES} bytes (sm_90 limit)"],
                f"at most {fit} stages fit this tile; lower stages or tile_k" if fit else
                "not one stage of this tile fits; a smaller tile (tile_m, tile_n, tile_k) or epilogue tile",
                str(program.pipeline.loc))


def stages_that_fit(program: Program) -> int:
    """The deepest mainloop pipeline of ``program``'s buffers that fits rule ``smem.capacity``:
    the largest ``n`` with ``kSmemBytes(n) <= 232448``, where one more stage costs its buffers'
    stage bytes and its two 8-byte mbarriers and everything else (the epilogue's staging, the
    padding, the 1 KiB base alignment) stays (``templates/gemm/traits.j2``; CUDA C++ Programming
    Guide, compute capability 9.0: 227 KiB per block). 0 when not even one stage fits (or the
    pipeline names no buffer). The hint of ``smem.capacity``, and the stage cap of the data-flow
    enumeration of a program that does not fit (:func:`argus_cutlass.verify.absint.enumerated_stages`)."""
    sb = smem_breakdown(program)
    if not sb.per_stage:
        return 0
    step = sb.per_stage + 2 * 8
    fixed = smem_total_bytes(program) - sb.stages * step
    return max(0, (SMEM_LIMIT_BYTES - fixed) // step)


def _touching(program: Program, name: str) -> list[tuple[str, int]]:
    """``(what, swizzle bytes)`` of every TMA copy and smem view that addresses tensor ``name``."""
    out = []
    for ld in program.loads:
        if ld.dst == name:
            out.append((f"TMA load {ld.name}", ld.copy.swizzle_bytes))
    for st in program.stores:
        if st.src == name:
            out.append((f"TMA store {st.name}", st.copy.swizzle_bytes))
    for r in program.reads:
        if r.src == name and r.view is not None:
            out.append((f"MMA read {r.name} ({r.view.atom.name})", r.view.swizzle_bytes))
    stg = program.staging
    if stg is not None and stg.dst == name and stg.view is not None:
        out.append((f"staging view ({stg.view.atom.name})", stg.view.swizzle_bytes))
    return out


def check_smem_alignment(program: Program) -> Outcome:
    """smem.alignment: every smem tensor's ``base_bytes``, and every stage inside it, is a multiple
    of the swizzle period (``8 x swizzle_bytes``, at least 128 bytes) of every TMA copy and smem
    view that touches it, and of its own ``align_bytes``.

    Source: PTX ISA 9.7.15.5.1 (matrix descriptor base offset assumed 0), 9.7.9.25 (TMA smem
    address 128-byte aligned); ``cutlass/detail/layout.hpp::alignment_for_swizzle``.
    """
    rule = "smem.alignment"
    bad: list[str] = []
    where: list[str] = []
    n = 0
    for t in program.tensors:
        if t.space != "smem":
            continue
        n += 1
        if not _is_int(t.align_bytes) or t.align_bytes < 16 or t.align_bytes & (t.align_bytes - 1):
            bad.append(f"{t.name} align_bytes {t.align_bytes!r} is not a power of two >= 16 (the kernel "
                       "static_asserts base % align_bytes == 0)")
            where.append(str(t.loc))
            continue
        needs: dict[int, list[str]] = {t.align_bytes: [f"its align_bytes {t.align_bytes}"]}
        for what, sw in _touching(program, t.name):
            needs.setdefault(swizzle_alignment(sw), []).append(f"the {sw}-byte swizzle of the {what}")
        stage_bytes = t.size_bytes // max(1, int(t.shape[-1])) if len(t.shape) == 3 else 0
        for align, whys in sorted(needs.items(), reverse=True):
            why = ", ".join(whys)
            if t.base_bytes % align:
                bad.append(f"{t.name} base offset {t.base_bytes} bytes is not a multiple of the {align}-byte "
                           f"period of {why} ({t.base_bytes} % {align} = {t.base_bytes % align})")
                where.append(str(t.loc))
            if stage_bytes and stage_bytes % align:
                bad.append(f"{t.name} stage size {stage_bytes} bytes is not a multiple of the {align}-byte "
                           f"period of {why} ({stage_bytes} % {align} = {stage_bytes % align})")
    if bad:
        return _bad(rule, bad, "place swizzled buffers (and their stages) at their swizzle period",
                    ", ".join(dict.fromkeys(where)))
    return _ok(rule, f"{n} smem buffers and their stages start at the swizzle period of every copy and view "
                     "that touches them")


def check_smem_barriers(program: Program) -> Outcome:
    """smem.disjoint (barrier region): the ``2 x stages`` mbarriers at ``[barrier_bytes,
    barrier_bytes + 16 x stages)`` overlap no smem buffer, and are 8-byte aligned.

    Source: ``templates/gemm/kernel.cu.j2`` (``full = smem + kSmemBarriers``); PTX ISA 9.7.13.15
    (an mbarrier is an 8-byte aligned 64-bit object in shared memory).
    """
    rule = "smem.disjoint"
    lo, hi = barrier_region(program)
    bad = []
    if lo % 8:
        bad.append(f"the mbarriers start at byte {lo}, not a multiple of 8 ({lo} % 8 = {lo % 8})")
    for t in program.tensors:
        if t.space != "smem":
            continue
        a, b = t.base_bytes, t.base_bytes + t.size_bytes
        if a < hi and lo < b:
            bad.append(f"the {hi - lo} bytes of mbarriers [{lo}, {hi}) overlap {t.name} [{a}, {b}) "
                       f"by {min(b, hi) - max(a, lo)} bytes")
    if bad:
        return _bad(rule, bad, "place the mbarriers after every buffer (barrier_bytes >= the end of the last "
                    "buffer)", str(program.pipeline.loc))
    return _ok(rule, f"the mbarriers [{lo}, {hi}) overlap none of the smem buffers")


# ----------------------------------------------------------------------------------- registers


def check_registers(program: Program) -> Outcome:
    """registers: fp32 accumulators per consumer thread + REGISTER_OVERHEAD <= the consumer role's
    ``setmaxnreg`` registers.

    Source: PTX ISA 9.7.15.4 (m64nNk16 accumulator: N/2 registers per thread per 64-row atom);
    CUTLASS ``sm90_gemm_tma_warpspecialized_{cooperative,pingpong}.hpp`` (232 consumer registers).
    """
    rule = "registers"
    mma = program.mma
    regs = program.role("consumer").regs
    acc = accumulator_registers(program)
    total = acc + REGISTER_OVERHEAD
    if total <= regs:
        return _ok(rule, f"{acc} accumulator + {REGISTER_OVERHEAD} overhead = {total} <= {regs} registers/thread")
    sched = "pingpong" if mma.atoms_m == 1 else "cooperative" if mma.atoms_m == 2 else f"{mma.atoms_m}-warpgroup"
    wg_m = mma.op.m * mma.reps_m
    sets = program.kloop.acc_sets if program.kloop is not None else 1
    per_set = f" x {sets} accumulator sets" if sets != 1 else ""
    return _bad(rule, [
        f"{sched} {mma.tile_m}x{mma.op.n} tile: {acc} fp32 accumulator registers per consumer thread "
        f"({wg_m}x{mma.op.n} per warpgroup / 128 threads{per_set}) + {REGISTER_OVERHEAD} overhead = {total} > {regs} "
        f"registers (the consumer role's setmaxnreg)"
    ], "use fewer accumulator sets, the cooperative schedule or a smaller tile_m/tile_n", str(mma.loc))


def check_roles_registers(program: Program) -> Outcome:
    """roles.registers: every role's ``setmaxnreg`` count is a multiple of 8 in [24, 256]; the
    warpgroups' registers (128 threads x count) fit the CTA's allocation at launch (threads x the cap
    below, e.g. 384 x 168 = 64512, not the SM's 65536: ``.inc`` draws only on what ``.dec`` released
    in the same CTA; measured: a 2-consumer attention kernel with 32 + 2 x 240 hung on the H200); the producer role decreases
    (``setmaxnreg.dec``) and the consumer role increases (``.inc``) from the launch's cap under
    ``__launch_bounds__(threads, 1)`` (65536 / threads, in units of 8: 168 for 384 threads).

    Source: PTX ISA 9.7.17.1 (``setmaxnreg``: imm-reg-count in [24, 256], multiple of 8; ``.dec``
    must not raise, ``.inc`` must not lower the count); CUDA Programming Guide (64K registers per SM).
    """
    rule = "roles.registers"
    bad = []
    launch = program.launch
    cap = launch_register_cap(launch.threads)
    total = 0
    parts = []
    for role in program.roles:
        r = role.regs
        if not _is_int(r) or r % 8 or not SETMAXNREG_MIN <= r <= SETMAXNREG_MAX:
            bad.append(f"{role.kind} role {role.name!r}: setmaxnreg {r} is not a multiple of 8 in "
                       f"[{SETMAXNREG_MIN}, {SETMAXNREG_MAX}]")
            continue
        if role.kind == "producer" and r > cap:
            bad.append(f"producer role {role.name!r}: setmaxnreg.dec to {r} registers, above the launch's "
                       f"{cap} (__launch_bounds__({launch.threads}, 1)): .dec cannot raise the count")
        if role.kind == "consumer" and r < cap:
            bad.append(f"consumer role {role.name!r}: setmaxnreg.inc to {r} registers, below the launch's "
                       f"{cap} (__launch_bounds__({launch.threads}, 1)): .inc cannot lower the count")
        total += 128 * len(role.warpgroups) * r
        parts.append(f"{len(role.warpgroups)} x 128 x {r}")
    pool = launch.threads * cap if _is_int(launch.threads) else REGISTERS_PER_SM
    if total > pool:
        bad.append(f"the roles hold {' + '.join(parts)} = {total} registers > the CTA's {pool} "
                   f"({launch.threads} threads x {cap} at launch): setmaxnreg.inc takes registers only from those "
                   "the CTA's other warpgroups released with .dec, so it waits forever (a hang)")
    warpgroups = sum(len(r.warpgroups) for r in program.roles)
    owned = sorted(w for r in program.roles for w in r.warpgroups)
    if owned != list(range(len(owned))):
        bad.append(f"the roles' warpgroups {owned} are not 0..{len(owned) - 1}, each once")
    for role in program.roles:
        ws = list(role.warpgroups)
        if ws != list(range(ws[0], ws[0] + len(ws))) if ws else True:
            bad.append(f"{role.kind} role {role.name!r}: warpgroups {tuple(ws)} are not consecutive (the kernel "
                       "numbers a role's warpgroups from its first)")
        if role.kind == "producer" and (len(role.issue_warps) != 1 or not 0 <= role.issue_warps[0] < 4):
            bad.append(f"producer role {role.name!r}: issue_warps {tuple(role.issue_warps)}: one warp (0..3) of its "
                       "warpgroup issues the TMA loads")
        if role.kind == "consumer" and tuple(role.issue_warps) != (0, 1, 2, 3):
            bad.append(f"consumer role {role.name!r}: issue_warps {tuple(role.issue_warps)}: all 4 warps of a "
                       "warpgroup issue wgmma (PTX ISA 9.7.15: a warpgroup-wide instruction)")
    if 128 * warpgroups != launch.threads:
        bad.append(f"the roles cover {warpgroups} warpgroups = {128 * warpgroups} threads, but the launch has "
                   f"{launch.threads} threads")
    if bad:
        return _bad(rule, bad, "producer 40 / consumer 232 registers fit 1 + 2 warpgroups (CUTLASS)",
                    str(program.roles[0].loc) if program.roles else "")
    return _ok(rule, f"setmaxnreg: {' + '.join(parts)} = {total} <= {REGISTERS_PER_SM} registers; producer "
                     f"decreases and consumers increase from the launch cap {cap}")


# --------------------------------------------------------------------------------------- TMA


def _tma_copies(program: Program) -> list[tuple[str, Any, str]]:
    out = [(f"{ld.name} (load into {ld.dst})", ld.copy, str(ld.loc)) for ld in program.loads]
    out += [(f"{st.name} (store from {st.src})", st.copy, str(st.loc)) for st in program.stores]
    return out


def check_tma_box_extent(program: Program) -> Outcome:
    """tma.box_extent: every TMA box dimension is in [1, 256] elements.

    Source: CUDA driver API ``cuTensorMapEncodeTiled`` (``boxDim[i]`` <= 256).
    """
    rule = "tma.box_extent"
    bad, where = [], []
    copies = _tma_copies(program)
    for what, tma, loc in copies:
        for i, d in enumerate(tma.box):
            if not 1 <= d <= MAX_TMA_BOX:
                bad.append(f"TMA {what} box {tma.box}: dim {i} = {d} elements > {MAX_TMA_BOX}"
                           if d > MAX_TMA_BOX else f"TMA {what} box {tma.box}: dim {i} = {d} < 1")
                where.append(loc)
    if bad:
        return _bad(rule, bad, "split the tile into more boxes or use a smaller tile", ", ".join(dict.fromkeys(where)))
    return _ok(rule, f"all {len(copies)} TMA boxes have every dim in [1, {MAX_TMA_BOX}]")


def check_tma_box_inner_bytes(program: Program) -> Outcome:
    """tma.box_inner_bytes: inner box extent x element bytes is a multiple of 16 and, for a
    swizzled tensor map, at most the swizzle span (32/64/128 bytes).

    Source: CUDA driver API ``cuTensorMapEncodeTiled`` (``boxDim[0] * elementSize`` multiple
    of 16 bytes; <= swizzle size when swizzled); PTX ISA 5.5 tensor-map swizzle modes.
    """
    rule = "tma.box_inner_bytes"
    bad, where = [], []
    for what, tma, loc in _tma_copies(program):
        inner = tma.box[0] * tma.elem_bits // 8
        if inner % 16:
            bad.append(f"TMA {what} inner box {tma.box[0]} x {tma.elem_bits // 8} bytes = "
                       f"{inner} bytes is not a multiple of 16")
            where.append(loc)
        if tma.swizzle_bytes > 16 and inner > tma.swizzle_bytes:
            bad.append(f"TMA {what} inner box {tma.box[0]} x {tma.elem_bits // 8} bytes = "
                       f"{inner} bytes > {tma.swizzle_bytes}-byte swizzle span")
            where.append(loc)
    if bad:
        return _bad(rule, bad, "the inner box must be one swizzle row of 16-byte chunks",
                    ", ".join(dict.fromkeys(where)))
    return _ok(rule, "all TMA inner boxes are 16-byte multiples within their swizzle span")


def check_tma_map(program: Program) -> Outcome:
    """tma.map: every TMA copy can be encoded and issued as the kernel prints it: a load is
    ``load`` or ``load_multicast`` with ``multicast >= 1`` CTAs, a store is a plain ``store``; the
    swizzle is one of the tensor-map modes (16 = none, 32, 64, 128 bytes) and the L2 promotion one
    of 0, 64, 128, 256 bytes.

    Source: CUDA driver API ``cuTensorMapEncodeTiled`` (``CUtensorMapSwizzle``,
    ``CUtensorMapL2promotion``); PTX ISA 9.7.9.25 (``cp.async.bulk.tensor``: load, multicast load,
    store).
    """
    rule = "tma.map"
    bad, where = [], []
    for ld in program.loads:
        c = ld.copy
        if c.kind not in ("load", "load_multicast"):
            bad.append(f"{ld.name}: TMA op kind {c.kind!r} is not a load")
        if not _is_int(c.multicast) or c.multicast < 1:
            bad.append(f"{ld.name}: multicast {c.multicast!r} < 1: every box goes to at least its issuing CTA")
    for st in program.stores:
        c = st.copy
        if c.kind != "store":
            bad.append(f"{st.name}: TMA op kind {c.kind!r} is not a store")
        if c.multicast != 1:
            bad.append(f"{st.name}: a TMA store does not multicast (multicast {c.multicast})")
    for what, c, loc in _tma_copies(program):
        if c.swizzle_bytes not in (16, 32, 64, 128):
            bad.append(f"TMA {what}: swizzle {c.swizzle_bytes} bytes is not a tensor-map mode (16, 32, 64, 128)")
        if c.l2_promotion not in (0, 64, 128, 256):
            bad.append(f"TMA {what}: L2 promotion {c.l2_promotion} bytes is not one of 0, 64, 128, 256")
        if c.elem_bits not in (8, 16, 32, 64):
            bad.append(f"TMA {what}: element size {c.elem_bits} bits is not a tensor-map data type")
        if bad and not where:
            where.append(loc)
    if bad:
        return _bad(rule, bad, "print the copies from the program's load/store nodes unchanged", ", ".join(where))
    n = len(program.loads) + len(program.stores)
    return _ok(rule, f"all {n} TMA copies have an encodable tensor map and op kind")


# --------------------------------------------------------------------------------------- GMMA


def check_gmma_n(program: Program) -> Outcome:
    """gmma.n: the GMMA instruction's N is a multiple of 8 in [8, 256].

    Source: PTX ISA 9.7.15.5 (wgmma ``.m64nNk16``: N = 8..256 step 8).
    """
    rule = "gmma.n"
    mma = program.mma
    n = mma.op.n
    if _is_int(n) and n % 8 == 0 and 8 <= n <= 256:
        return _ok(rule, f"GMMA {mma.op.m}x{n}x{mma.op.k}: N={n} is a multiple of 8 in [8, 256]")
    return _bad(rule, [f"GMMA N = {n} (tile_n {program.read('B').tile_mn}) is not a multiple of 8 in [8, 256]"],
                "tile_n must be a multiple of 8 and at most 256", str(mma.loc))


def check_gmma_m_tile(program: Program) -> Outcome:
    """gmma.m_tile: the GMMA is 64 x N x 16 (16-bit inputs); the A tile is ``64 x atoms_m x reps_m``
    rows (warpgroups along M times repetitions); tile_k is a multiple of 16.

    Source: PTX ISA 9.7.15.5 (wgmma M = 64, K = 16 for 16-bit types);
    ``cute/atom/mma_traits_sm90_gmma.hpp``; the cooperative schedule tiles 2 warpgroups along M.
    """
    rule = "gmma.m_tile"
    mma = program.mma
    ra = program.read("A")
    kl = program.kloop
    bad = []
    elem_bits = 8 * {"bf16": 2, "fp16": 2}.get(mma.op.dtype, 0)
    if mma.op.m != 64:
        bad.append(f"GMMA M = {mma.op.m}: wgmma computes 64 rows per warpgroup")
    if elem_bits == 16 and mma.op.k != 16:
        bad.append(f"GMMA K = {mma.op.k}: wgmma with 16-bit {mma.op.dtype} inputs has K = 16")
    unit = mma.op.m * mma.atoms_m
    sched = "cooperative" if mma.atoms_m == 2 else "pingpong" if mma.atoms_m == 1 else f"{mma.atoms_m}-warpgroup"
    if ra.tile_mn % unit:
        bad.append(f"tile_m {ra.tile_mn} is not a multiple of {mma.op.m} x {mma.atoms_m} ({sched} GMMA "
                   f"warpgroups along M) = {unit}")
    elif ra.tile_mn != mma.tile_m:
        bad.append(f"tile_m {ra.tile_mn} != {mma.op.m} x {mma.atoms_m} warpgroups x {mma.reps_m} repetitions "
                   f"= {mma.tile_m} rows the MMA computes")
    tile_k = kl.tile_k if kl is not None else ra.tile_k
    if mma.op.k and tile_k % mma.op.k:
        bad.append(f"tile_k {tile_k} is not a multiple of the GMMA K = {mma.op.k}")
    if mma.op.mode not in ("SS", "RS"):
        bad.append(f"GMMA mode {mma.op.mode!r} is not SS or RS")
    if mma.op.acc_dtype != "fp32":
        bad.append(f"GMMA accumulator type {mma.op.acc_dtype!r}: the kernel accumulates in fp32")
    try:
        acc = program.tensor(mma.acc)
    except KeyError:
        acc = None
    want_acc = (mma.op.m * mma.reps_m, mma.op.n)
    if acc is not None and (acc.space != "rmem" or acc.dtype != mma.op.acc_dtype or tuple(acc.shape) != want_acc):
        bad.append(f"accumulator {acc.name} ({acc.space} {acc.dtype} {tuple(acc.shape)}) is not the {mma.op.acc_dtype} "
                   f"register tile {want_acc} of one warpgroup ({mma.reps_m} x {mma.op.m} rows x N = {mma.op.n})")
    if bad:
        return _bad(rule, bad, "cooperative needs tile_m % 128 == 0, pingpong tile_m % 64 == 0", str(mma.loc))
    return _ok(rule, f"tile {ra.tile_mn}x{tile_k} = {mma.reps_m} x {unit} rows ({mma.atoms_m} warpgroups x 64), "
                     f"{tile_k // mma.op.k} k-blocks of {mma.op.k}")


def check_gmma_reads(program: Program) -> Outcome:
    """gmma.reads: each MMA read's own GMMA op, MMA name, slot tile (MN x K) and warpgroups are its MMA's
    and its load's (A: the MMA's warpgroups along M; B: 1). The other rules read the reads, while the
    kernel takes the tiles from the loads (``kTileAMn`` / ``kTileAK``) and the op from the MMA node; the
    template's ``static_assert`` is only the backstop (red team, session 19).

    Source: ``templates/gemm/traits.j2`` (the reads' ``static_assert``); PTX ISA 9.7.15.5.
    """
    rule = "gmma.reads"
    mma = program.mma
    bad = []
    for r, wgs in ((program.read("A"), mma.atoms_m), (program.read("B"), 1)):
        try:
            ld = program.load_into(r.src)
        except KeyError:
            continue   # no load fills it: the data-flow rules say so
        got = (r.op, r.mma, r.tile_mn, r.tile_k, r.warpgroups)
        want = (mma.op, mma.name, ld.tile_mn, ld.tile_k, wgs)
        if got != want:
            diff = [f"{f} {g!r} (want {w!r})" for f, g, w in zip(("op", "mma", "tile_mn", "tile_k", "warpgroups"),
                                                                  got, want) if g != w]
            bad.append(f"read {r.name} of {r.src}: {', '.join(diff)}: its slot geometry is not the MMA's and "
                       f"load {ld.name}'s")
    if bad:
        return _bad(rule, bad, "build reads with the MMA's op and the loads' tiles", str(mma.loc))
    return _ok(rule, f"reads A and B: the MMA's op {mma.op.m}x{mma.op.n}x{mma.op.k}, the loads' tiles")


def check_epilogue_tile(program: Program) -> Outcome:
    """epilogue.tile: the epilogue subtile holds one repetition of every warpgroup of the
    partition (``epi_m == op_m x warpgroups``: the kernel stages repetition ``em`` as subtile
    row ``em``), divides the CTA tile, and covers whole 8-column accumulator blocks (``epi_n %
    8 == 0``; stmatrix .x2 covers 8 columns, .x4 16).

    Source: ``templates/gemm/epilogue.j2`` (``static_assert(kEpiM == kEpiOpM * kEpiWarpgroups)``);
    PTX ISA 9.7.15.4 (accumulator n8 blocks), stmatrix (.x2 / .x4).
    """
    rule = "epilogue.tile"
    e = program.epilogue
    bad = []
    want_m = e.op_m * e.warpgroups
    if e.epi_m != want_m:
        bad.append(f"epi_m {e.epi_m} != {e.op_m} x {e.warpgroups} = {want_m} (GMMA M x warpgroups of the "
                   "epilogue partition): a subtile must hold one repetition of every warpgroup")
    if e.epi_m <= 0 or e.tile_m % e.epi_m:
        bad.append(f"epi_m {e.epi_m} does not divide tile_m {e.tile_m}")
    if e.epi_n <= 0 or e.tile_n % e.epi_n:
        bad.append(f"epi_n {e.epi_n} does not divide tile_n {e.tile_n}")
    if e.epi_n % 8:
        bad.append(f"epi_n {e.epi_n} is not a multiple of 8 ({e.epi_n} % 8 = {e.epi_n % 8}): an accumulator "
                   "n8 block would straddle two subtiles")
    if bad:
        return _bad(rule, bad, f"use epi_m={want_m} and an epi_n that is a multiple of 8 dividing tile_n", str(e.loc))
    subs = (e.tile_m // e.epi_m) * (e.tile_n // e.epi_n)
    return _ok(rule, f"epilogue {e.epi_m}x{e.epi_n} tiles {e.tile_m}x{e.tile_n} ({subs} subtiles, epi_m = "
                     f"{e.op_m} x {e.warpgroups} warpgroups)")


# ----------------------------------------------------------------------------------- cluster


def check_cluster(program: Program) -> Outcome:
    """cluster: the launch's cluster has at most 8 CTAs, and each multicast load's boxes split
    evenly among the CTAs that share it (each issues ``boxes / multicast`` of them).

    Source: CUDA C++ Programming Guide, "Thread Block Clusters" (portable size 8);
    ``templates/gemm/traits.j2`` (``static_assert(kBoxesA % kMulticastA == 0)``).
    """
    rule = "cluster"
    launch = program.launch
    bad = []
    size = launch.cluster_m * launch.cluster_n
    if size > MAX_PORTABLE_CLUSTER:
        bad.append(f"cluster {launch.cluster_m}x{launch.cluster_n} = {size} CTAs > {MAX_PORTABLE_CLUSTER} "
                   "(portable cluster size)")
    for ld in program.loads:
        mc = ld.copy.multicast
        if mc > 1 and ld.boxes % mc:
            bad.append(f"{ld.name} is multicast to {mc} CTAs but its {ld.boxes} boxes per stage (box "
                       f"{ld.copy.box} of a {ld.tile_mn}x{ld.tile_k} tile) do not split evenly ({ld.boxes} % {mc} = "
                       f"{ld.boxes % mc})")
    if bad:
        return _bad(rule, bad, "use a cluster of at most 8 CTAs whose extents divide the operand tiles",
                    str(launch.loc))
    return _ok(rule, f"cluster {launch.cluster_m}x{launch.cluster_n} = {size} <= {MAX_PORTABLE_CLUSTER} CTAs; "
                     "every multicast load's boxes split evenly")


def check_stages(program: Program) -> Outcome:
    """stages: the mainloop pipeline has at least 2 stages.

    Source: CUTLASS ``sm90_mma_tma_gmma_ss_warpspecialized.hpp`` (``static_assert(Stages >= 2)``).
    """
    rule = "stages"
    s = program.pipeline.stages
    if _is_int(s) and s >= 2:
        return _ok(rule, f"{s} >= 2 pipeline stages")
    return _bad(rule, [f"{s} pipeline stage(s) < 2: the producer cannot refill while the MMA reads"],
                "use stages >= 2", str(program.pipeline.loc))


def check_tile_scheduler(program: Program) -> Outcome:
    """tile_scheduler: the consumer warpgroups split the work as the kernel's two schedules do
    (cooperative: ``consumer_stride`` 1 and 2 warpgroups along M; ping-pong: stride 2 and 1, so
    ``consumer_stride x atoms_m`` = the consumer role's warpgroups); stream-K and split-K need the
    cooperative schedule; ``splits`` >= 2 exactly for split-K. The MoE ``grouped`` walk is a persistent
    walk (every unit sums its whole k range; the unit count is data), so ping-pong may run it: each
    warpgroup takes every second unit of its CTA, the producer every unit.

    Source: ``templates/gemm/kernel.cu.j2`` (``wg_in_tile = kConsumerStride == 1 ? cwg : 0``; the
    second ping-pong warpgroup starts one unit later); CUTLASS
    ``sm90_gemm_tma_warpspecialized_pingpong.hpp`` (only the persistent scheduler) and
    ``sm90_tile_scheduler_stream_k.hpp`` (``splits`` selects split-K).
    """
    rule = "tile_scheduler"
    sch = program.schedule
    mma = program.mma
    wgs = len(program.role("consumer").warpgroups)
    bad = []
    if sch.consumer_stride not in (1, 2) or sch.consumer_stride * mma.atoms_m != wgs:
        bad.append(f"consumer_stride {sch.consumer_stride} x {mma.atoms_m} warpgroups along M = "
                   f"{sch.consumer_stride * mma.atoms_m} != {wgs} consumer warpgroups (cooperative: stride 1 x 2, "
                   "ping-pong: stride 2 x 1)")
    coop = sch.consumer_stride == 1
    if sch.decomposition not in ("persistent", "grouped") and not coop:
        bad.append(f"scheduler {sch.decomposition!r} needs the cooperative schedule (consumer_stride 1), not "
                   f"ping-pong (consumer_stride {sch.consumer_stride})")
    if sch.decomposition in ("splitk", "clusterk") and sch.splits < 2:
        bad.append(f"scheduler {sch.decomposition!r} with splits={sch.splits}: a K split needs splits >= 2")
    if sch.decomposition not in ("splitk", "clusterk") and sch.splits != 1:
        bad.append(f"splits={sch.splits} only applies to scheduler 'splitk' or 'clusterk', not {sch.decomposition!r}")
    if sch.decomposition == "clusterk" and (program.launch.cluster_m, program.launch.cluster_n) != (1, 1):
        bad.append(f"clusterk launches clusters of its {sch.splits} k ranks; the launch node's multicast cluster "
                   f"{program.launch.cluster_m}x{program.launch.cluster_n} cannot be beside it (a cluster of "
                   f"{sch.splits * program.launch.cluster_m * program.launch.cluster_n} CTAs that the walk, the loads "
                   "and the reduction would each read differently)")
    if bad:
        return _bad(rule, bad, "use schedule='cooperative' for stream-K/split-K/cluster-K, splits >= 2 only for "
                    "split-K and cluster-K", str(sch.loc))
    extra = (f", {sch.splits} K splits" if sch.decomposition == "splitk" else
             f", a cluster of {sch.splits} CTAs splitting K" if sch.decomposition == "clusterk" else "")
    name = "cooperative" if coop else "ping-pong"
    return _ok(rule, f"{sch.decomposition} tile scheduler with the {name} schedule (consumer_stride "
                     f"{sch.consumer_stride} x {mma.atoms_m} warpgroups along M = {wgs}){extra}")


#: every resource rule, by name, in report order
RULES: dict[str, Callable[[Program], Outcome]] = {
    "smem.capacity": check_smem_capacity,
    "smem.alignment": check_smem_alignment,
    "smem.disjoint": check_smem_barriers,
    "registers": check_registers,
    "roles.registers": check_roles_registers,
    "tma.box_extent": check_tma_box_extent,
    "tma.box_inner_bytes": check_tma_box_inner_bytes,
    "tma.map": check_tma_map,
    "gmma.n": check_gmma_n,
    "gmma.m_tile": check_gmma_m_tile,
    "gmma.reads": check_gmma_reads,
    "epilogue.tile": check_epilogue_tile,
    "cluster": check_cluster,
    "stages": check_stages,
    "tile_scheduler": check_tile_scheduler,
}

#: rules whose failure makes the enumeration checks meaningless (their domain is ill-formed)
SHAPE_RULES = ("gmma.n", "gmma.m_tile", "stages")
