"""Register fragments: ``mma.rs_operand``, ``fragment.convert`` (FA3) and ``reduction.rows`` (FA1).

The fragment layouts are :mod:`argus_cutlass.hw.fragments` (CuTe ``CLayout_64xN`` for the fp32
accumulator of ``wgmma.m64nNk16``, ``ALayout_64x16`` for its 16-bit A operand in registers).

* ``mma.rs_operand`` (arith): an MMA read with no smem view (RS mode) is operand A, K-major
  (PTX ISA 9.7.15: only A may come from registers, and a register A is K-major), its op and its
  MMA's op are RS-mode, and it is fed by a :class:`~argus_cutlass.dsl.ir.FragmentConvert` whose
  source is the accumulator of an MMA; an RS-mode MMA has no A read through an smem view.
* ``fragment.convert`` (enum): the conversion keeps tags. For every thread of a warpgroup, every
  k-block ``j`` of the RS read and every A value ``v``, the A slot ``(row, k)`` of k-block ``j``
  (``ALayout_64x16``) receives, through ``pairing``, the accumulator register whose element
  (``CLayout_64xN``) is ``(row, 16 j + k)``: P's (row, key) lands where the MMA reads row ``row``
  and key ``16 j + k``. Also: converted dtype == the RS MMA's dtype, both MMAs partition rows the
  same way (64-row atoms, same ``atoms_m`` and ``reps_m``: the thread that holds S's row holds
  P's row), and the RS read's K extent == the accumulator's N.
* ``reduction.rows`` (enum): a :class:`~argus_cutlass.dsl.ir.Reduction` over an MMA accumulator
  first reduces each thread's registers of one row (registers ``i`` with ``(i // 2) % 2 == h``
  hold row ``q + 8h``), then ``shfl.xor`` by each of ``xor_lanes``. Enumerating every lane,
  register and shuffle of every warp, each reduced value must cover exactly the elements of its
  own row (every column; once for ``sum``, at least once for ``max``).

A program with none of these nodes gets no proofs and no violations. Never raises on a program
it is given: a malformed node is a violation.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from argus_cutlass.hw.fragments import (
    A_FRAG_VALUES,
    ATOM_K16,
    ATOM_M,
    WARP_LANES,
    WARPGROUP_THREADS,
    a_frag_coord,
    acc_coord,
    acc_regs,
    acc_row_half,
    shfl_bfly,
)
from argus_cutlass.verify.report import Counterexample, Proof, Violation

Outcome = tuple[list[Proof], list[Violation]]

RULE_RS = "mma.rs_operand"
RULE_CONVERT = "fragment.convert"
RULE_ROWS = "reduction.rows"
#: catalogue ids (invariants/attention.toml)
INV_PV = "FA3"
INV_ROWS = "FA1"

_16BIT = ("bf16", "fp16")


def _int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _thread(program: Any, w: int, t: int) -> dict[str, int]:
    """Thread ``t`` (0..127) of consumer warpgroup ``w`` (its hardware warpgroup from the
    consumer role; warpgroup ``w + 1`` when there is none)."""
    wgs: tuple = ()
    for r in program.roles:
        if r.kind == "consumer":
            wgs = tuple(r.warpgroups)
    wg = wgs[w] if w < len(wgs) and _int(wgs[w]) else w + 1
    idx = 128 * wg + t
    return {"cta": 0, "threadIdx": idx, "warpgroup": w, "warp": idx // 32, "lane": t % 32}


def _cex(inv: str, rule: str, engine: str, point: str, where: str, expected: str, actual: str, *,
         thread: dict | None = None, register: str = "", slot: dict | None = None, k_block: int = -1,
         element: dict | None = None, chain: tuple[str, ...] = (), provenance: str = "",
         params: dict | None = None) -> Counterexample:
    return Counterexample(
        invariant=inv, rule=rule, engine=engine, program_point=point, where=where, iteration=-1, stage=-1,
        k_block=k_block, slot=dict(slot or {}), thread=dict(thread or {}), register=register, smem_offset={},
        expected=expected, actual=actual, provenance=provenance, element=dict(element or {}), chain=chain,
        params=dict(params or {}))


def check_fragments(program: Any) -> Outcome:
    """``mma.rs_operand``, ``fragment.convert`` and ``reduction.rows`` over every RS read,
    fragment conversion and reduction of ``program`` (see the module docstring)."""
    proofs: list[Proof] = []
    violations: list[Violation] = []
    jobs: list[tuple[str, str, Any]] = []
    for r in program.reads:
        if getattr(r, "view", 0) is None:
            jobs.append((RULE_RS, INV_PV, lambda r=r: _check_rs_read(program, r)))
    for m in program.mmas:
        if getattr(m.op, "mode", "SS") == "RS":
            jobs.append((RULE_RS, INV_PV, lambda m=m: _check_rs_mma(program, m)))
    for c in program.converts:
        jobs.append((RULE_CONVERT, INV_PV, lambda c=c: _check_convert(program, c)))
    for red in program.reductions:
        jobs.append((RULE_ROWS, INV_ROWS, lambda red=red: _check_reduction(program, red)))
    for rule, inv, job in jobs:
        try:
            p, v = job()
        except Exception as exc:  # noqa: BLE001 - the verifier never raises on a program it is given
            p, v = [], [Violation(rule, inv, f"malformed program: {type(exc).__name__}: {exc}",
                                  "every node field must have the type its docstring gives")]
        proofs += p
        violations += v
    return proofs, violations


# ------------------------------------------------------------------------------------ lookups


def _tensor(program: Any, name: str) -> Any:
    return next((t for t in program.tensors if t.name == name), None)


def _mma_named(program: Any, name: str) -> Any:
    return next((m for m in program.mmas if m.name == name), None)


def _mma_of_acc(program: Any, acc: str) -> Any:
    return next((m for m in program.mmas if m.acc == acc), None)


def _converts_into(program: Any, dst: str) -> list[Any]:
    return [c for c in program.converts if c.dst == dst]


# ---------------------------------------------------------------------------------- RS operand


def _check_rs_read(program: Any, read: Any) -> Outcome:
    t0 = time.perf_counter()
    where = str(read.loc)
    point = f"{read.mma}.gemm"
    bad: list[str] = []
    src = _tensor(program, read.src)
    mma = _mma_named(program, read.mma)
    if read.operand != "A":
        bad.append(f"operand {read.operand} is read from registers ({read.src!r}), but wgmma takes only A from "
                   "registers: B is always an smem descriptor (PTX ISA 9.7.15)")
    if src is None or src.space != "rmem":
        bad.append(f"the read has no smem view, but {read.src!r} is "
                   f"{'not declared' if src is None else 'in ' + src.space}: an RS read takes a register fragment")
    if read.op.mode != "RS":
        bad.append(f"the read has no smem view, but its op is {read.op.mode}-mode ({read.op.cpp()})")
    if read.op.a_major != "K":
        bad.append(f"a register A operand is K-major (PTX ISA 9.7.15: transpose applies to smem operands only), "
                   f"but the op says a_major={read.op.a_major!r}")
    if mma is None:
        bad.append(f"the read belongs to MMA {read.mma!r}, which does not exist")
    else:
        if mma.op.mode != "RS":
            bad.append(f"MMA {mma.name!r} reads A from registers but its op is {mma.op.mode}-mode")
        if read.operand == "A" and mma.a != read.name:
            bad.append(f"MMA {mma.name!r} names {mma.a!r} as its A read, not {read.name!r}")
    feeds = _converts_into(program, read.src)
    producer = None
    if len(feeds) != 1:
        bad.append(f"{read.src!r} must be written by exactly one fragment conversion (an accumulator -> A-fragment "
                   f"repack), found {len(feeds)}")
    else:
        producer = _mma_of_acc(program, feeds[0].src)
        if producer is None:
            bad.append(f"conversion {feeds[0].name!r} reads {feeds[0].src!r}, which is no MMA's accumulator: its "
                       "register layout is unknown")
    if bad:
        cex = _cex(INV_PV, RULE_RS, "arith", point, where,
                   "operand A, K-major, RS-mode, from a register fragment converted from an MMA accumulator",
                   f"operand {read.operand} from {read.src!r} ({src.space if src else 'undeclared'}), op "
                   f"{read.op.cpp()}", chain=(f"{read.name}: view None, src {read.src}",))
        return [], [Violation(RULE_RS, INV_PV, f"RS read {read.name!r} of MMA {read.mma!r}: {m}",
                              "an RS MMA reads operand A (K-major) from a FragmentConvert of an accumulator",
                              where, cex) for m in bad]
    summary = (f"{read.mma}: operand A from registers {read.src} (K-major, {read.op.cpp()}), written by "
               f"{feeds[0].name} from {producer.name}'s accumulator {producer.acc}")
    return [Proof(RULE_RS, INV_PV, "arith", summary, 1, time.perf_counter() - t0)], []


def _check_rs_mma(program: Any, mma: Any) -> Outcome:
    """An RS-mode MMA must read its A from registers: an A read through an smem view (a
    descriptor) under an RS op is a mismatch between the op the template prints and the read."""
    reads = [r for r in program.reads if r.mma == mma.name and r.operand == "A"]
    if reads and all(r.view is None for r in reads):
        return [], []  # _check_rs_read proves it
    where = str(mma.loc)
    actual = (f"A read {reads[0].name!r} through an smem view of {reads[0].src!r}" if reads
              else "no A read of this MMA")
    cex = _cex(INV_PV, RULE_RS, "arith", f"{mma.name}.gemm", where,
               "operand A from a register fragment (view None)", actual)
    return [], [Violation(RULE_RS, INV_PV, f"MMA {mma.name!r} is RS-mode ({mma.op.cpp()}) but has {actual}",
                          "an RS-mode MMA reads A from registers; use an SS op for an smem A", where, cex)]


# ---------------------------------------------------------------------------------- conversion


def _check_convert(program: Any, conv: Any) -> Outcome:
    t0 = time.perf_counter()
    where = str(conv.loc)
    point = f"{conv.name}"
    bad: list[tuple[str, str, str]] = []  # (message, expected, actual)
    src = _tensor(program, conv.src)
    dst = _tensor(program, conv.dst)
    prod = _mma_of_acc(program, conv.src)
    readers = [r for r in program.reads if r.src == conv.dst and r.view is None]
    if src is None or dst is None or src.space != "rmem" or dst.space != "rmem":
        bad.append((f"{conv.src!r} -> {conv.dst!r}: both sides must be declared register tensors",
                    "rmem -> rmem", f"{getattr(src, 'space', None)} -> {getattr(dst, 'space', None)}"))
    if prod is None:
        bad.append((f"source {conv.src!r} is no MMA's accumulator: its register layout is unknown",
                    "an MMA accumulator", f"{conv.src!r}"))
    if conv.dtype not in _16BIT or (dst is not None and dst.dtype != conv.dtype):
        bad.append(((f"converts to {conv.dtype!r} into {conv.dst!r} ({getattr(dst, 'dtype', None)}): the A "
                     "fragment holds 16-bit values (ALayout_64x16)"), "bf16/fp16 == the fragment's dtype",
                    f"{conv.dtype} -> {getattr(dst, 'dtype', None)}"))
    if not readers:
        bad.append((f"no RS-mode MMA reads {conv.dst!r}", "an RS MMA read of the fragment", "none"))
    if bad or prod is None:
        return [], [Violation(RULE_CONVERT, INV_PV, f"fragment conversion {conv.name!r}: {m}",
                              "P = convert(S) feeds operand A of an RS-mode MMA", where,
                              _cex(INV_PV, RULE_CONVERT, "arith", point, where, e, a)) for m, e, a in bad]
    n = prod.op.n
    for rd in readers:
        rmma = _mma_named(program, rd.mma)
        if rd.op.dtype != conv.dtype:
            bad.append((f"{rd.mma} multiplies {rd.op.dtype} but the fragment is {conv.dtype}", conv.dtype,
                        rd.op.dtype))
        if prod.op.m != ATOM_M or rd.op.m != ATOM_M:
            bad.append(((f"{prod.name} / {rd.mma} atoms have M={prod.op.m}/{rd.op.m}: the fragment layouts are "
                         "the 64-row wgmma atoms"), "M=64", f"M={prod.op.m}/{rd.op.m}"))
        if rmma is not None and (rmma.atoms_m, rmma.reps_m) != (prod.atoms_m, prod.reps_m):
            bad.append(((f"{prod.name} spreads rows over atoms_m={prod.atoms_m} x reps_m={prod.reps_m} but "
                         f"{rd.mma} over {rmma.atoms_m} x {rmma.reps_m}: the warpgroup holding S's row is not the "
                         "one that reads P's row"), f"atoms_m x reps_m {prod.atoms_m} x {prod.reps_m}",
                        f"{rmma.atoms_m} x {rmma.reps_m}"))
        if rd.op.k != ATOM_K16 or n % ATOM_K16 or rd.tile_k != n:
            bad.append(((f"{rd.mma} reads {rd.tile_k} keys in k-blocks of {rd.op.k}, but the accumulator has "
                         f"N={n} columns"), f"tile_k == N == {n}, k-blocks of 16", f"tile_k {rd.tile_k}, K {rd.op.k}"))
    pairs = acc_regs(n) // 2
    pairing = tuple(conv.pairing) if conv.pairing else tuple(range(pairs))
    if len(pairing) != pairs or not all(_int(x) and 0 <= x < pairs for x in pairing):
        bad.append(((f"pairing {conv.pairing!r} must list, for each of the {pairs} A register pairs, an "
                     f"accumulator pair in 0..{pairs - 1}"), f"{pairs} pairs in 0..{pairs - 1}", repr(conv.pairing)))
    if bad:
        return [], [Violation(RULE_CONVERT, INV_PV, f"fragment conversion {conv.name!r}: {m}",
                              "P = convert(S) feeds operand A of an RS-mode MMA", where,
                              _cex(INV_PV, RULE_CONVERT, "arith", point, where, e, a)) for m, e, a in bad]

    # enumerate: thread t, k-block j, A value v
    t, j, v = np.meshgrid(np.arange(WARPGROUP_THREADS), np.arange(n // ATOM_K16), np.arange(A_FRAG_VALUES),
                          indexing="ij")
    row, k = a_frag_coord(t, v)
    key = ATOM_K16 * j + k
    glob = A_FRAG_VALUES * j + v                      # A value index over the whole fragment
    i = 2 * np.asarray(pairing)[glob // 2] + glob % 2  # accumulator register it takes
    arow, acol = acc_coord(t, i)
    ok = (arow == row) & (acol == key)
    points = int(ok.size)
    rd = readers[0]
    if not ok.all():
        tt, jj, vv = (int(x[0]) for x in np.nonzero(~ok))
        r0, k0 = (int(x) for x in a_frag_coord(tt, vv))
        ii = int(i[tt, jj, vv])
        ar, ac = (int(x) for x in acc_coord(tt, ii))
        q = (A_FRAG_VALUES * jj + vv) // 2
        cex = _cex(INV_PV, RULE_CONVERT, "enum", f"{rd.mma}.gemm", where,
                   f"P(row={r0}, key={ATOM_K16 * jj + k0}) (= {conv.src}[{A_FRAG_VALUES * jj + vv}])",
                   f"{conv.src}[{ii}] = S(row={ar}, key={ac})",
                   thread=_thread(program, 0, tt), register=f"{conv.dst}[{A_FRAG_VALUES * jj + vv}]",
                   slot={"m": r0, "k": k0}, k_block=jj, element={"tensor": conv.src, "row": ar, "key": ac},
                   chain=(f"{prod.name}: {conv.src}[{ii}] of thread {tt} holds S({ar}, {ac}) (CLayout_64x{n})",
                          f"{conv.name}: A register pair {q} takes accumulator pair {pairing[q]}",
                          f"{rd.mma}: k-block {jj}, A value {vv} is slot (row {r0}, k {k0}) (ALayout_64x16)"),
                   provenance=f"pairing {pairing}", params={"N": n})
        return [], [Violation(RULE_CONVERT, INV_PV,
                              f"fragment conversion {conv.name!r} does not keep tags: thread {tt}'s A value {vv} of "
                              f"k-block {jj} is read as P(row {r0}, key {ATOM_K16 * jj + k0}) but holds S(row {ar}, "
                              f"key {ac})", "accumulator values 8j..8j+7 become A values 0..7 of k-block j "
                              "(identity pairing)", where, cex)]
    summary = (f"{conv.name}: {conv.src} ({prod.name}, CLayout_64x{n}) -> {conv.dst} ({conv.dtype}, ALayout_64x16 "
               f"x {n // ATOM_K16} k-blocks of {rd.mma}): every (thread, k-block, value) slot (row, k) holds "
               f"S(row, 16*k_block + k)")
    return [Proof(RULE_CONVERT, INV_PV, "enum", summary, points, time.perf_counter() - t0)], []


# ---------------------------------------------------------------------------------- reductions


def _tile_row(local: int, atoms_m: int, w: int, warp: int) -> int:
    """Row of the CTA tile of a warp-local row index ``16 * rep + r`` (r < 16) of warp ``warp`` of
    consumer warpgroup ``w`` (``Mma``: warpgroup w computes rows ``64 * (rep * atoms_m + w)`` on)."""
    return ATOM_M * ((local // 16) * atoms_m + w) + 16 * warp + local % 16


def _check_reduction(program: Any, red: Any) -> Outcome:
    t0 = time.perf_counter()
    where = str(red.loc)
    point = red.name
    mma = _mma_of_acc(program, red.src)
    src = _tensor(program, red.src)
    masks = tuple(red.xor_lanes) if isinstance(red.xor_lanes, (tuple, list)) else ()
    bad: list[tuple[str, str, str]] = []
    if src is None or src.space != "rmem" or mma is None:
        bad.append((f"reduces {red.src!r}, which is no MMA's register accumulator: its row layout is unknown",
                    "an MMA accumulator", repr(red.src)))
    if red.op not in ("max", "sum"):
        bad.append((f"op {red.op!r} is not max or sum", "max | sum", repr(red.op)))
    if not masks or not all(_int(m) and 1 <= m < WARP_LANES for m in masks):
        bad.append((f"xor lane masks {red.xor_lanes!r} must be ints in 1..31 (shfl.sync.bfly inside a warp)",
                    "masks in 1..31", repr(red.xor_lanes)))
    if bad:
        return [], [Violation(RULE_ROWS, INV_ROWS, f"reduction {red.name!r}: {m}", "reduce an MMA accumulator "
                              "across its quad: xor_lanes (1, 2)", where,
                              _cex(INV_ROWS, RULE_ROWS, "arith", point, where, e, a)) for m, e, a in bad]
    n, atoms_m, reps = mma.op.n, mma.atoms_m, mma.reps_m
    nregs = acc_regs(n)
    regs = np.arange(nregs)
    once = red.op == "sum"
    values = 0
    for w in range(atoms_m):
        for warp in range(4):
            lanes = np.arange(WARP_LANES)
            t = 32 * warp + lanes
            # counts[lane, rep, half, local_row, col]; local_row = 16*rep + row within the warp's 16
            counts = np.zeros((WARP_LANES, reps, 2, 16 * reps, n), dtype=np.int32)
            mix = np.zeros((WARP_LANES, WARP_LANES), dtype=bool)  # which lanes fed each lane's value
            mix[lanes, lanes] = True
            row, col = acc_coord(t[:, None], regs[None, :])  # (32, nregs), row within the 64-row atom
            local = row - 16 * warp
            half = acc_row_half(regs)
            for rep in range(reps):
                for h in (0, 1):
                    sel = np.nonzero(half == h)[0]
                    for L in range(WARP_LANES):
                        np.add.at(counts[L, rep, h], (16 * rep + local[L, sel], col[L, sel]), 1)
            for m in masks:
                partner = shfl_bfly(lanes, m)
                counts = counts + counts[partner]
                mix = mix | mix[partner]
            for L in range(WARP_LANES):
                own = L // 4
                for rep in range(reps):
                    for h in (0, 1):
                        values += 1
                        c = counts[L, rep, h]
                        r_local = 16 * rep + 8 * h + own
                        others = [r for r in np.nonzero(c.sum(axis=1))[0] if r != r_local]
                        mine = c[r_local]
                        missing = np.nonzero(mine == 0)[0]
                        twice = np.nonzero(mine > 1)[0] if once else np.array([], dtype=int)
                        if not others and not missing.size and not twice.size:
                            continue
                        grow = _tile_row(r_local, atoms_m, w, warp)
                        fed = [int(x) for x in np.nonzero(mix[L])[0]]
                        if others:
                            rows_mixed = sorted({grow} | {_tile_row(int(r), atoms_m, w, warp) for r in others})
                            actual = (f"mixes rows {rows_mixed}: lanes {fed} combined (shfl.xor {list(masks)}); "
                                      f"lanes 4q..4q+3 hold row q")
                            msg = f"lane {L} of warp {warp} mixes rows {rows_mixed}"
                        elif missing.size:
                            actual = (f"row {grow} misses columns {[int(x) for x in missing[:8]]}"
                                      f"{'...' if missing.size > 8 else ''} ({missing.size} of {n}); lanes {fed} "
                                      "combined")
                            msg = f"lane {L} of warp {warp} sees {n - missing.size} of row {grow}'s {n} columns"
                        else:
                            actual = (f"row {grow} counts columns {[int(x) for x in twice[:8]]} "
                                      f"{int(mine.max())} times (a sum over-counts)")
                            msg = f"lane {L} of warp {warp} sums row {grow}'s columns more than once"
                        tid = 32 * warp + L
                        reg_list = [int(r) for r in regs[half == h]]
                        cex = _cex(INV_ROWS, RULE_ROWS, "enum", point, where,
                                   f"row {grow}: columns 0..{n - 1}, {'each once' if once else 'all'}, no other row",
                                   actual, thread=_thread(program, w, tid),
                                   register=f"{red.src}[{reg_list[0]},{reg_list[1]},{reg_list[2]},...] "
                                            f"(rows q+{8 * h}, rep {rep})",
                                   slot={"row": grow}, element={"tensor": red.src, "row": grow},
                                   chain=((f"{mma.name}: lane {L} holds row {grow} in registers i with "
                                           f"(i//2)%2=={h} (CLayout_64x{n})"),
                                          f"thread-local {red.op} over those {len(reg_list)} registers",
                                          f"shfl.xor {list(masks)} across lanes {fed}"),
                                   provenance=f"xor_lanes {tuple(masks)}", params={"N": n})
                        return [], [Violation(RULE_ROWS, INV_ROWS, f"reduction {red.name!r} ({red.op} over "
                                              f"{red.src}): {msg}", "lanes 4q..4q+3 share row q: shuffle by lane "
                                              "masks 1 and 2", where, cex)]
    summary = (f"{red.name}: row {red.op} of {red.src} ({mma.name}, CLayout_64x{n}) with shfl.xor {list(masks)}: "
               f"each of {values} (lane, row) values of {4 * atoms_m} warps covers exactly its own row's {n} columns"
               f"{' once' if once else ''}")
    return [Proof(RULE_ROWS, INV_ROWS, "enum", summary, values * n, time.perf_counter() - t0)], []
