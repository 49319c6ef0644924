"""G2 and G6 for the epilogue's register -> shared-memory step (the staging for the TMA store).

Rules (VERIFIER.md catalogue):

* ``epilogue.stmatrix`` (G2): every accumulator register of every epilogue subtile lands at
  the staging-buffer byte where the buffer's layout ``sD(m, n, stage)`` puts its ``(m, n)``,
  which is where the TMA store (``epilogue.tma_store``) reads it. Checked by enumeration over
  every consumer thread, register and subtile. Each row address stmatrix receives must also
  be 16-byte aligned.
* ``epilogue.stage_reuse`` (G6): the epilogue overwrites staging stage ``q mod S`` at subtile
  ``q`` only after the TMA store of subtile ``q - S`` has finished reading it
  (``cp.async.bulk.wait_group.read`` with at most ``S - 1`` groups in flight). The subtile
  counter ``q`` runs on across the tiles of one storing thread (cooperative) and restarts per
  tile for ping-pong, where the two groups' store threads share the buffer and each drains its
  stores before handing the epilogue turn over (``tma_store_wait<0>`` under the turn order).

Both read the staging buffer through the staging node's own view (``SmemStage.view``), the
layout the kernel partitions it with (``SmemLayoutStage``).

The hardware model of ``stmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16`` (PTX ISA,
data movement instructions, "stmatrix"; the fragment is the one of ``ldmatrix`` / ``mma.m8n8``):

* matrix ``i`` of an instruction is 8 rows of 8 16-bit elements; lane ``8 i + j`` supplies
  the shared-memory address of row ``j`` of matrix ``i`` (16 contiguous bytes, 16-byte aligned);
  lanes ``>= 8 num`` supply addresses that are not used;
* register ``i`` of lane ``l`` holds elements ``(l / 4, 2 (l % 4))`` (low 16 bits) and
  ``(l / 4, 2 (l % 4) + 1)`` (high 16 bits) of matrix ``i``;
* without ``.trans`` fragment element ``(r, c)`` is stored at byte ``2 c`` of row ``r``; with
  ``.trans`` at byte ``2 r`` of row ``c`` (the matrix is stored transposed).

The register side is CuTe's ``CLayout_64xN`` (PTX ISA 9.7.15.4, through
:func:`~argus_cutlass.verify.absint.accumulator_partition`): lane ``l`` of warp ``w`` holds
``(16 w + 8 h + l / 4, 8 b + 2 (l % 4) + e)`` for ``h, e in {0, 1}`` and every 8-column block
``b``, which is exactly the fragment of the 8x8 matrices at ``(8 h, 8 b)``. The transfer function
:func:`stmatrix_store` is shown to agree with silicon by the H200 probe
``tests/gpu/test_stmatrix_gpu.py`` (kernel ``templates/stmatrix_probe.cu.j2``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from argus_cutlass.dsl.ir import Program, SmemStage
from argus_cutlass.verify.absint import consumer_thread, view_layout
from argus_cutlass.verify.output import accumulator_map
from argus_cutlass.verify.report import Counterexample, Proof, Violation

__all__ = ["StagingMap", "StmatrixProbe", "check_stage_reuse", "check_staging", "predict_image", "probe_tables",
           "row_addresses", "staging_map", "stmatrix_store"]

#: bytes of one stmatrix row (8 x 16-bit)
ROW_BYTES = 16


def _fragment_row(lane: np.ndarray, half: np.ndarray, trans: bool) -> np.ndarray:
    """The stored row (0..7 of its matrix) that fragment element ``(lane / 4, 2 (lane % 4) + half)``
    goes to: the fragment row, or with ``.trans`` the fragment column."""
    return 2 * (lane % 4) + half if trans else lane // 4


def stmatrix_store(row_addr: np.ndarray, num: int, trans: bool) -> np.ndarray:
    """Byte address every element of one warp's ``stmatrix .x{num}`` lands at (PTX semantics).

    Args:
        row_addr: ``(32,)`` int64, the shared-memory byte address each lane supplies.
        num: matrices per instruction (1, 2 or 4).
        trans: the ``.trans`` qualifier.

    Returns:
        ``(32, num, 2)`` int64: ``[lane, register, half]`` -> byte address (half 0 = low 16 bits).

    Raises:
        ValueError: ``row_addr`` is not 32 addresses or ``num`` is not 1, 2 or 4.
    """
    row_addr = np.asarray(row_addr)
    if row_addr.shape != (32,):
        raise ValueError(f"row_addr has shape {row_addr.shape}; stmatrix takes one address per lane (32,)")
    if not np.issubdtype(row_addr.dtype, np.integer):
        raise ValueError(f"row_addr has dtype {row_addr.dtype}; byte addresses are integers")
    row_addr = row_addr.astype(np.int64)
    if num not in (1, 2, 4):
        raise ValueError(f"num={num}: stmatrix stores .x1, .x2 or .x4 matrices")
    lane, reg, half = np.meshgrid(np.arange(32), np.arange(num), np.arange(2), indexing="ij")
    row = _fragment_row(lane, half, trans)
    col = lane // 4 if trans else 2 * (lane % 4) + half  # the position inside that row
    return row_addr[8 * reg + row] + 2 * col


@dataclass(frozen=True)
class StagingMap:
    """Every accumulator element of one output tile through the register -> smem step.

    All arrays are ``(tile_m * tile_n,)`` int64 in the order of
    :func:`~argus_cutlass.verify.absint.accumulator_partition` (``wg``, ``thread``, ``reg``,
    tile ``m``, ``n``), plus the epilogue subtile ``q`` and its stage, the byte the staging layout
    wants (``want``), the byte the store writes (``got``) and, for stmatrix, the instruction,
    register, half and the lane that supplied the row address (-1 for ``st.shared``).
    """

    wg: np.ndarray
    thread: np.ndarray
    reg: np.ndarray
    m: np.ndarray
    n: np.ndarray
    subtile: np.ndarray
    stage: np.ndarray
    want: np.ndarray
    got: np.ndarray
    instr: np.ndarray
    sreg: np.ndarray
    half: np.ndarray
    row_lane: np.ndarray
    misaligned: tuple[int, int, int, int, int]  # (wg, warp, subtile, instr, lane) of a bad row address, or ()


def _block_of(i: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row and column offset of matrix ``i`` inside one instruction's 16 x 4num block."""
    return 8 * (i % 2), 8 * (i // 2)


def tiling_problem(program: Program) -> str | None:
    """Why the staging step's subtile cannot be run over the tile (None when it can)."""
    e, node = program.epilogue, program.staging
    em, en = node.epi_m, node.epi_n
    if e.tile_m % em or e.tile_n % en:
        return f"the epilogue subtile {em}x{en} does not divide the {e.tile_m}x{e.tile_n} tile"
    if em % 16:
        return f"epi_m={em} is not a whole number of 16-row warp blocks"
    if node.op == "stmatrix" and en % (4 * node.num):
        return f"epi_n={en} is not a multiple of the {4 * node.num} columns of stmatrix .x{node.num}"
    return None


def row_addresses(stage_bytes: Callable[[np.ndarray, np.ndarray], np.ndarray], node: SmemStage, m0: int,
                  n0: int) -> np.ndarray:
    """``(32,)`` byte addresses one warp's stmatrix receives for the block at subtile coordinate
    ``(m0, n0)``: lane ``L`` supplies row ``L % 8`` of matrix ``(L // 8 + row_lane_skew) % num``
    (a row runs along N, or along M with ``trans``); ``stage_bytes(m, n)`` is the staging
    layout in bytes. Lanes ``>= 8 num`` repeat lane ``L % (8 num)``."""
    lanes = np.arange(32)
    mat = (lanes % (8 * node.num) // 8 + node.row_lane_skew) % node.num
    j = lanes % 8
    dm, dn = _block_of(mat)
    if node.trans:
        return stage_bytes(m0 + dm, n0 + dn + j)
    return stage_bytes(m0 + dm + j, n0 + dn)


def staging_map(program: Program) -> StagingMap:
    """Run the register -> smem step of ``program`` over one output tile (see the module docstring).

    Raises:
        ValueError: the program has no epilogue, no staging step, or the subtile does not divide
            the tile / the warp's 16-row block.
    """
    e, node = program.epilogue, program.staging
    if e is None or node is None:
        raise ValueError("the program has no epilogue staging step (EpilogueStore + SmemStage)")
    problem = tiling_problem(program)
    if problem:
        raise ValueError(problem)
    sd = program.tensor(node.dst)
    em, en, stages = node.epi_m, node.epi_n, sd.shape[2]
    base, eb = sd.base_bytes, sd.elem_bytes
    subs_m = e.tile_m // em

    def layout_bytes(mm: np.ndarray, nn: np.ndarray, st: np.ndarray | int) -> np.ndarray:
        return base + eb * np.asarray(view_layout(node.view)(mm, nn, st), dtype=np.int64)

    wg, th, reg, m, n = accumulator_map(program)
    q = (n // en) * subs_m + m // em  # CUTLASS walks epi_m inside epi_n
    stage = q % stages
    want = layout_bytes(m % em, n % en, stage)
    size = m.size
    instr = np.full(size, -1, dtype=np.int64)
    sreg = np.full(size, -1, dtype=np.int64)
    half = np.full(size, -1, dtype=np.int64)
    row_lane = np.full(size, -1, dtype=np.int64)
    misaligned: tuple[int, int, int, int, int] = ()
    if node.op == "st.shared":
        got = want.copy()
    else:
        width = 4 * node.num  # columns one instruction covers per warp (16 rows)
        lane = th % 32
        mw = m % em - (m % em) % 16  # the warp's 16-row block inside the subtile
        nq = (n % en) // width
        # a warp owns one 16-row block per 64 * warpgroups rows: its ordinal numbers the instructions
        ordinal = (m % em) // (64 * e.warpgroups)
        instr = ordinal * (en // width) + nq
        # register side (CLayout_64xN): which matrix / half of the fragment holds (m, n)
        block = 2 * (((n % en) % width) // 8) + ((m % 16) // 8)  # matrix index of the (8h, 8b) block
        sreg = np.array([node.matrix_order.index(b) for b in range(node.num)], dtype=np.int64)[block]
        half = n % 2
        got = np.empty(size, dtype=np.int64)
        # one stmatrix per (16-row block, column group, stage): group the elements by it
        key = ((mw // 16) * (en // width) + nq) * stages + stage
        order = np.argsort(key, kind="stable")
        starts = np.flatnonzero(np.r_[True, np.diff(key[order]) != 0])
        for sel in np.split(order, starts[1:]):
            mw0, nq0, st0 = int(mw[sel[0]]), int(nq[sel[0]]), int(stage[sel[0]])
            addr = row_addresses(lambda mm, nn, s_=st0: layout_bytes(mm, nn, s_), node, mw0, nq0 * width)
            if not misaligned and (addr[: 8 * node.num] % ROW_BYTES).any():
                bad_lane = int(np.flatnonzero(addr[: 8 * node.num] % ROW_BYTES)[0])
                misaligned = (int(wg[sel[0]]), int(th[sel[0]] // 32), int(q[sel[0]]), int(instr[sel[0]]), bad_lane)
            got[sel] = stmatrix_store(addr, node.num, node.trans)[lane[sel], sreg[sel], half[sel]]
        row_lane = 8 * sreg + _fragment_row(lane, half, node.trans)
    return StagingMap(wg, th, reg, m, n, q, stage, want, got, instr, sreg, half, row_lane, misaligned)


def check_staging(program: Program) -> tuple[list[Proof], list[Violation]]:
    """``epilogue.stmatrix`` (G2) by enumeration: every register lands where ``sD`` wants it.

    A subtile that cannot be run over the tile (it does not divide it, or splits a warp's
    16-row block or a stmatrix's columns) is a violation of this rule, whatever R4 says about
    the config."""
    node = program.staging
    if node is None or program.epilogue is None:
        return [], []
    where = str(node.loc)
    mma = program.mma
    if mma is not None and node.src != mma.acc:
        return [], [Violation("epilogue.stmatrix", "G2", f"the staging step stores register tensor {node.src!r}, but "
                              f"the MMA accumulates into {mma.acc!r}", "stage the MMA's accumulator", where)]
    if node.view is None:
        return [], [Violation("epilogue.stmatrix", "G2", "the staging step has no smem view: where it stores is "
                              "unknown", "give the staging step the view of its buffer", where)]
    problem = tiling_problem(program)
    if problem:
        return [], [Violation("epilogue.stmatrix", "G2", f"the staging step cannot be checked: {problem}",
                              "pick an epilogue subtile that tiles the CTA tile (R4 epilogue.tile)", where)]
    sm = staging_map(program)
    what = (f"stmatrix.x{node.num}{'.trans' if node.trans else ''}" if node.op == "stmatrix" else "st.shared")
    if node.op == "st.shared":
        return [Proof("epilogue.stmatrix", "G2", "enum",
                      f"st.shared (32-bit D): each of the {sm.m.size} accumulator elements is stored at its own "
                      "sD(m, n, stage) address; no instruction-level remapping to check", int(sm.m.size))], []
    if sm.misaligned:
        w, warp, q, ins, lane = sm.misaligned
        cex = Counterexample(
            "G2", "epilogue.stmatrix", "enum", "epilogue.r2s", where, -1, -1, -1, {"subtile": q},
            consumer_thread(w, 32 * warp + lane), f"row address of instruction {ins}", {},
            "a 16-byte aligned row address", "a row address that is not 16-byte aligned",
            f"{what}: lane {lane} supplies a row of matrix {(lane // 8 + node.row_lane_skew) % node.num}")
        return [], [Violation("epilogue.stmatrix", "G2",
                              f"{what}: lane {lane} of warp {warp} passes a row address that is not 16-byte "
                              "aligned (PTX: each stmatrix row is 16 contiguous, aligned bytes)",
                              "stage D in a layout whose 8-element rows are contiguous and aligned", where, cex)]
    bad = np.flatnonzero(sm.got != sm.want)
    if bad.size:
        i = int(bad[np.lexsort((sm.reg[bad], sm.thread[bad], sm.wg[bad], sm.subtile[bad]))][0])
        w, t = int(sm.wg[i]), int(sm.thread[i])
        mm, nn = int(sm.m[i]), int(sm.n[i])
        sd = program.tensor(node.dst)
        eb = sd.elem_bytes
        got_elem = (int(sm.got[i]) - sd.base_bytes) // eb
        want_elem = (int(sm.want[i]) - sd.base_bytes) // eb
        # which (m, n) of the subtile the staging layout keeps at the byte actually written
        em, en = node.epi_m, node.epi_n
        grid_m, grid_n = np.meshgrid(np.arange(em), np.arange(en), indexing="ij")
        offs = np.asarray(view_layout(node.view)(grid_m, grid_n, int(sm.stage[i])), dtype=np.int64)
        hit = np.argwhere(offs == got_elem)
        lands = f"sD({int(hit[0][0])},{int(hit[0][1])})" if hit.size else "outside the staging stage"
        if node.op == "stmatrix":
            chain = (f"accum[{int(sm.reg[i])}] of thread {128 * (1 + w) + t} = D({mm},{nn})",
                     f"{what} #{int(sm.instr[i])} register {int(sm.sreg[i])} half {int(sm.half[i])}",
                     f"row address from lane {int(sm.row_lane[i])}",
                     f"smem byte {int(sm.got[i])} = sD elem {got_elem} ({lands})")
            register = f"accum[{int(sm.reg[i])}] -> stmatrix r{int(sm.sreg[i])}.{'hi' if sm.half[i] else 'lo'}"
        else:
            chain = (f"accum[{int(sm.reg[i])}] = D({mm},{nn})", f"st.shared to byte {int(sm.got[i])}")
            register = f"accum[{int(sm.reg[i])}]"
        cex = Counterexample(
            "G2", "epilogue.stmatrix", "enum", "epilogue.r2s", where, -1, int(sm.stage[i]), -1,
            {"m": mm, "n": nn}, consumer_thread(w, t), register, {"sD": want_elem},
            f"D({mm},{nn}) staged at sD elem {want_elem} (byte {int(sm.want[i])}), where the TMA store reads it",
            f"written to sD elem {got_elem} (byte {int(sm.got[i])}), which holds {lands}",
            f"{what}, row_lane_skew {node.row_lane_skew}, matrix order {node.matrix_order}; staging layout "
            f"{node.view.atom.name} {node.view.shape}",
            element={"tensor": "D", "m": mm, "n": nn}, chain=chain,
            params={"subtile": int(sm.subtile[i])})
        return [], [Violation(
            "epilogue.stmatrix", "G2",
            f"{bad.size} of {sm.m.size} accumulator elements are staged away from sD(m, n); first: "
            f"threadIdx.x={128 * (1 + w) + t} {register} holds D({mm},{nn}) and writes it to {lands}",
            "derive the stmatrix row addresses and its .trans flag from the staging layout (CuTe "
            "make_tiled_copy_C_atom + partition_D of sD); column-major D needs the transposing STSM_T",
            where, cex)]
    return [Proof("epilogue.stmatrix", "G2", "enum",
                  f"{what}: all {sm.m.size} accumulator elements of {int(sm.subtile.max()) + 1} "
                  f"{node.epi_m}x{node.epi_n} subtile(s) land at sD(m, n, stage) with aligned rows",
                  int(sm.m.size))], []


def check_stage_reuse(program: Program) -> tuple[list[Proof], list[Violation]]:
    """``epilogue.stage_reuse`` (G6), arithmetic: subtile ``q`` writes stage ``q mod S`` after
    waiting until at most ``store_wait`` TMA stores are in flight, so the stores of subtiles
    ``<= q - 1 - store_wait`` have finished reading. Safe iff ``q - S <= q - 1 - store_wait``
    for every ``q >= S``, i.e. ``store_wait <= S - 1`` (CUTLASS ``PipelineTmaStore``: ``StagesD -
    1``, ``sm90_epilogue_tma_warpspecialized.hpp``).

    Per schedule (``templates/gemm/kernel.cu.j2``): cooperative (``consumer_stride`` 1) has one
    store thread and ``q`` runs on across its tiles, so the bound holds across tiles too;
    ping-pong (stride 2) has one store thread per group, and ``cp.async.bulk.wait_group`` only
    waits for the calling thread's stores, so the groups must take the epilogue by turns (a
    :class:`~argus_cutlass.dsl.ir.TurnOrder` with an ``epilogue`` point), under which each group
    drains its stores (``tma_store_wait<0>``) and restarts ``q`` at 0 before handing over."""
    node = program.staging
    if node is None:
        return [], []
    stages = int(program.tensor(node.dst).shape[2])
    e = program.epilogue
    subtiles = (e.tile_m // node.epi_m) * (e.tile_n // node.epi_n) if e is not None and node.epi_m and node.epi_n \
        else stages + 1
    sch = program.schedule
    stride = sch.consumer_stride if sch is not None else 1
    turns = any("epilogue" in o.points for o in program.orders)
    violations: list[Violation] = []
    if node.store_wait > stages - 1:
        q = stages
        cex = Counterexample(
            "G6", "epilogue.stage_reuse", "arith", "epilogue.r2s", str(node.loc), q, 0, -1, {"subtile": q},
            consumer_thread(0, 0), "", {}, f"the TMA store of subtile 0 has finished reading stage 0 before subtile "
            f"{q} writes it",
            f"up to {node.store_wait} stores may be in flight, including subtile 0's, while subtile {q} overwrites "
            "stage 0",
            f"cp.async.bulk.wait_group.read {node.store_wait} with {stages} staging stages",
            params={"stages": stages, "store_wait": node.store_wait, "subtiles_per_tile": subtiles})
        violations.append(Violation("epilogue.stage_reuse", "G6",
                                    f"the epilogue waits for at most {node.store_wait} TMA stores in flight but has "
                                    f"only {stages} staging stages: subtile {q} overwrites stage 0 while subtile 0's "
                                    "store may still be reading it",
                                    f"wait with cp.async.bulk.wait_group.read {stages - 1} (PipelineTmaStore) before "
                                    "reusing a stage", str(node.loc), cex))
    if stride > 1 and not turns:
        cex = Counterexample(
            "G6", "epilogue.stage_reuse", "arith", "epilogue.r2s", str(node.loc), 0, 0, -1, {"subtile": 0},
            consumer_thread(1, 0), "", {}, "group 1 writes staging stage 0 after group 0's store of it finished",
            "group 1's subtile 0 overwrites stage 0 while group 0's TMA store of its subtile 0 may still read it "
            "(each group's wait_group sees only its own stores)",
            f"consumer_stride {stride}, no turn order at the epilogue", params={"stages": stages})
        violations.append(Violation("epilogue.stage_reuse", "G6",
                                    f"{stride} consumer groups share the staging buffer without taking turns at the "
                                    "epilogue: one group's stmatrix can overwrite a stage another group's TMA store "
                                    "is still reading", "order the groups' epilogues (TurnOrder point 'epilogue')",
                                    str(node.loc), cex))
    if violations:
        return [], violations
    how = ("one store thread, the subtile counter runs on across tiles" if stride == 1 else
           f"{stride} groups take turns at the epilogue and drain their stores before handing over")
    return [Proof("epilogue.stage_reuse", "G6", "arith",
                  f"staging stage q mod {stages} is rewritten after at most {node.store_wait} TMA stores in "
                  f"flight: the store of subtile q - {stages} has finished reading it ({how})", 1)], []


@dataclass(frozen=True)
class StmatrixProbe:
    """Host tables that replay one epilogue subtile's stmatrix stores on a GPU, with the images
    the model predicts.

    Attributes:
        regs: ``(threads, instrs, 4)`` uint32, the register words (two 16-bit codes each; code of
            accumulator ``(m, n)`` = ``m * epi_n + n + 1``, 0 for unused registers).
        rows: ``(threads, instrs)`` uint32, the row byte offset (from the stage start) each lane supplies.
        num, trans: the instruction (``stmatrix .x{num}[.trans]``).
        smem_bytes: bytes of one staging stage.
        predicted: ``(smem_bytes / 2,)`` uint16, the image :func:`stmatrix_store` predicts
            (0xFFFF where nothing is written).
        intended: the image the staging layout wants: ``sD(m, n)`` holds the code of ``(m, n)``.
    """

    regs: np.ndarray
    rows: np.ndarray
    num: int
    trans: bool
    smem_bytes: int
    predicted: np.ndarray
    intended: np.ndarray


def predict_image(regs: np.ndarray, rows: np.ndarray, num: int, trans: bool, smem_bytes: int) -> np.ndarray:
    """The shared-memory image ``stmatrix .x{num}[.trans]`` leaves when thread ``t`` issues, for
    every instruction ``q``, registers ``regs[t, q]`` with row address ``rows[t, q]`` (bytes), in
    program order per warp (:func:`stmatrix_store`). Unwritten 16-bit words are 0xFFFF.

    Raises:
        ValueError: ``rows`` is not ``(threads, instrs)`` with ``threads`` a multiple of 32,
            ``regs`` is not ``(threads, instrs, 4)``, ``smem_bytes`` is odd, a used row address is
            not 16-byte aligned (PTX), or a store leaves the buffer.
    """
    rows, regs = np.asarray(rows), np.asarray(regs)
    if rows.ndim != 2 or rows.shape[0] % 32:
        raise ValueError(f"rows has shape {rows.shape}; expected (threads, instrs) with whole warps of threads")
    threads, instrs = rows.shape
    if regs.shape != (threads, instrs, 4):
        raise ValueError(f"regs has shape {regs.shape}; expected {(threads, instrs, 4)}")
    if smem_bytes % 2:
        raise ValueError(f"smem_bytes={smem_bytes}: the image is 16-bit words")
    used = rows.reshape(threads // 32, 32, instrs)[:, : 8 * num]
    if (used % ROW_BYTES).any():
        raise ValueError("a row address some lane supplies is not 16-byte aligned (PTX stmatrix rows)")
    img = np.full(smem_bytes // 2, 0xFFFF, dtype=np.uint16)
    for w in range(threads // 32):
        for q in range(instrs):
            dest = stmatrix_store(rows[32 * w: 32 * w + 32, q].astype(np.int64), num, trans)
            words = regs[32 * w: 32 * w + 32, q, :num].astype(np.uint32)
            vals = np.stack([words & 0xFFFF, words >> 16], axis=-1)
            if dest.min() < 0 or dest.max() + 2 > smem_bytes:
                raise ValueError(f"warp {w} instruction {q} stores outside the {smem_bytes}-byte buffer")
            img[dest // 2] = vals.astype(np.uint16)
    return img


def probe_tables(program: Program) -> StmatrixProbe:
    """The stmatrix stores of subtile 0 (stage 0) of ``program`` as GPU probe tables.

    Raises:
        ValueError: the program's staging step is not stmatrix (see :func:`staging_map`).
    """
    node = program.staging
    if node is None or node.op != "stmatrix":
        raise ValueError("the program's epilogue staging step is not stmatrix")
    sm = staging_map(program)
    sd = program.tensor(node.dst)
    em, en = node.epi_m, node.epi_n
    sel = np.flatnonzero(sm.subtile == 0)
    tg = (sm.wg * 128 + sm.thread)[sel]
    instr = sm.instr[sel]
    threads, instrs = -(-(int(tg.max()) + 1) // 32) * 32, int(instr.max()) + 1
    code = ((sm.m % em) * en + sm.n % en + 1)[sel].astype(np.uint32)
    regs = np.zeros((threads, instrs, 4), dtype=np.uint32)
    np.bitwise_or.at(regs, (tg, instr, sm.sreg[sel]), code << (16 * sm.half[sel]).astype(np.uint32))
    rows = np.zeros((threads, instrs), dtype=np.uint32)

    def stage0(mm: np.ndarray, nn: np.ndarray) -> np.ndarray:
        return sd.elem_bytes * np.asarray(view_layout(node.view)(mm, nn, 0), dtype=np.int64)

    width = 4 * node.num
    mw = ((sm.m % em) // 16 * 16)[sel]
    nq = ((sm.n % en) // width)[sel]
    # every (warp, instruction) of the subtile: its 16-row block and column group
    keys, first = np.unique(np.stack([tg // 32, instr]), axis=1, return_index=True)
    for (w, q), i in zip(keys.T, first, strict=True):
        rows[32 * w: 32 * w + 32, q] = row_addresses(stage0, node, int(mw[i]), int(nq[i]) * width)
    smem_bytes = em * en * sd.elem_bytes
    grid_m, grid_n = np.meshgrid(np.arange(em), np.arange(en), indexing="ij")
    intended = np.full(smem_bytes // 2, 0xFFFF, dtype=np.uint16)
    codes = (grid_m * en + grid_n + 1).astype(np.uint16)
    intended[np.asarray(view_layout(node.view)(grid_m, grid_n, 0), dtype=np.int64)] = codes
    predicted = predict_image(regs, rows, node.num, node.trans, smem_bytes)
    return StmatrixProbe(regs, rows, node.num, node.trans, smem_bytes, predicted, intended)
