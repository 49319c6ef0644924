"""Verifier of attention programs: :func:`verify_attention` (family ``attention``).

Reads only the :class:`~argus_cutlass.dsl.ir.Program` (the object ``templates/attention/`` prints)
and checks the FlashAttention catalogue (``invariants/attention.toml``) plus the rules it shares
with GEMM (resources, TMA images, GMMA descriptors, pipelines, named barriers, turn orders):

* resources (arith): shared memory, registers and ``setmaxnreg`` budgets, GMMA shapes and majors,
  TMA boxes, stages, smem alignment and the barrier region;
* data flow (enum): the TMA images; every GMMA descriptor the kernel forms; the tag assertions at
  ``qk.gemm`` and ``pv.gemm`` over every slot, warpgroup, stage and two query / kv block indices
  (Q's row and K's key are the slot's, Q's and K's d agree, P's key is V's key, V's d is the slot's
  column), with the loads' block / advance / shift fields giving the global coordinates; the
  operand bindings and the head map of grouped-query attention;
* register fragments (enum, :mod:`.fragments`): the RS operand, P's conversion, row reductions (FA1);
* the mask and the kv blocks (FA5, FA6): the kernel's ``attends(q, key)`` (blocks read, blocks
  masked, the mask itself: :mod:`argus_cutlass.hw.attention`) equals the specification
  (``key < Lk`` and, causal, ``key <= q + Lk - Lq``) for every row of every query block, by
  enumeration over boundary lengths and by z3 for all lengths below ``2^bound_bits``;
* the online softmax (FA2): the node's flags against the recurrence's invariant, with a numeric
  counterexample when they break it;
* the output (FA4): the store map (direct, or the quad16 lane exchange simulated on a warp) stores
  every accumulator element once at its own (row, d), aligned, normalised, row-masked, the query head;
* the pipelines Q, K, V (G6): expect-tx bytes, arrival counts, release after retirement, all
  interleavings of the producer's and the consumers' order of the three pipelines, the state
  update by z3;
* the persistent tile walk (G4), named barriers (B1) and the turn order (B2).

:func:`verify_attention` returns a :class:`~argus_cutlass.verify.report.VerificationReport` and
never raises on a program it is given.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from collections import deque
from types import SimpleNamespace
from typing import Any

import numpy as np

from argus_cutlass.dsl.ir import Program
from argus_cutlass.hw import attention as sem
from argus_cutlass.hw.fragments import acc_coord, a_frag_coord
from argus_cutlass.plan.resources import launch_register_cap
from argus_cutlass.verify.catalogue import invariant_of
from argus_cutlass.verify.explore import path_to
from argus_cutlass.verify.report import Counterexample, Obligation, Proof, Unknown, VerificationReport, Violation
from argus_cutlass.verify.run import report

Outcome = tuple[list[Proof], list[Violation]]

__all__ = ["verify_attention"]

#: dynamic shared memory a CTA may use on sm_90 (227 KiB: cudaDevAttrMaxSharedMemoryPerBlockOptin)
SMEM_LIMIT_BYTES = 232448
#: the kernel's slack to align its dynamic smem base to 1 KiB (``kSmemBytes = end + 1024``)
SMEM_ALIGN_SLACK = 1024
#: registers a consumer thread needs beside S, O and P (m, l, factors, descriptors, tile state)
REGISTER_OVERHEAD = 32
#: the register file of one SM / one CTA
REGISTERS_PER_SM = 65536
#: most elements per TMA box dimension (cuTensorMapEncodeTiled)
MAX_TMA_BOX = 256
#: threads of a warpgroup
WG = 128

_PRODUCER = {"cta": 0, "threadIdx": 0, "warpgroup": 0, "warp": 0, "lane": 0, "role": "producer"}


def _inv(rule: str) -> str:
    """The rule's invariant id: the attention catalogue's first, then any family's."""
    inv = invariant_of(rule, "attention")
    return inv if inv != "?" else invariant_of(rule)


def _ok(rule: str, summary: str, engine: str = "arith", points: int = 0) -> Outcome:
    return [Proof(rule, _inv(rule), engine, summary, points)], []


def _bad(rule: str, messages: list[str], hint: str = "", where: str = "") -> Outcome:
    return [], [Violation(rule, _inv(rule), m, hint, where) for m in messages]


def _cex(rule: str, point: str, where: str, expected: str, actual: str, *, engine: str = "enum",
         iteration: int = -1, stage: int = -1, k_block: int = -1, slot: dict | None = None,
         thread: dict | None = None, register: str = "", element: dict | None = None, chain: tuple = (),
         params: dict | None = None, provenance: str = "", trace: tuple = ()) -> Counterexample:
    return Counterexample(_inv(rule), rule, engine, point, where, iteration, stage, k_block, dict(slot or {}),
                          dict(thread or {}), register, {}, expected, actual, provenance, element=dict(element or {}),
                          chain=tuple(chain), params=dict(params or {}), trace=tuple(trace))


def _consumer_thread(w: int, t: int) -> dict[str, int]:
    idx = WG * (1 + w) + t
    return {"cta": 0, "threadIdx": idx, "warpgroup": w, "warp": idx // 32, "lane": t % 32, "role": "consumer"}


def _acc_slot(row: int, col: int) -> tuple[int, int]:
    """(thread of the warpgroup, register) holding accumulator element (row, col) of a 64 x N atom."""
    t = 32 * (row // 16) + 4 * ((row % 16) % 8) + (col % 8) // 2
    i = 4 * (col // 8) + 2 * ((row % 16) // 8) + col % 2
    return t, i


# ------------------------------------------------------------------------------------ structure


def _named(nodes: Any, name: str, what: str) -> Any:
    hit = [n for n in nodes if n.name == name]
    if len(hit) != 1:
        raise KeyError(f"{what} {name!r}: {len(hit)} such nodes")
    return hit[0]


def parts(program: Program) -> SimpleNamespace:
    """The attention program's nodes, found through its own references.

    Raises:
        KeyError: a node the attention checks read is missing (the message names it).
    """
    p = program
    qk, pv = _named(p.mmas, "qk", "MMA"), _named(p.mmas, "pv", "MMA")
    rd_q, rd_k = _named(p.reads, qk.a, "MMA read"), _named(p.reads, qk.b, "MMA read")
    rd_p, rd_v = _named(p.reads, pv.a, "MMA read"), _named(p.reads, pv.b, "MMA read")
    lq, lk, lv = p.load_into(rd_q.src), p.load_into(rd_k.src), p.load_into(rd_v.src)
    pipes = {x: _named(p.pipelines, ld.pipeline, "pipeline") for x, ld in (("q", lq), ("k", lk), ("v", lv))}
    loop = _named(p.loops, "kv", "loop")
    for what in ("mask", "softmax", "output", "schedule", "launch"):
        if getattr(p, what) is None:
            raise KeyError(f"the program has no {what} node")
    convs = [c for c in p.converts if c.dst == rd_p.src]
    if len(convs) != 1:
        raise KeyError(f"{len(convs)} conversions into P ({rd_p.src!r})")
    return SimpleNamespace(qk=qk, pv=pv, rd_q=rd_q, rd_k=rd_k, rd_p=rd_p, rd_v=rd_v, lq=lq, lk=lk, lv=lv,
                           pq=pipes["q"], pk=pipes["k"], pv_pipe=pipes["v"], loop=loop, conv=convs[0],
                           wgs=qk.atoms_m, tile_m=qk.tile_m, tile_n=qk.op.n, D=pv.op.n,
                           producer=p.role("producer"), consumer=p.role("consumer"))


# ------------------------------------------------------------------------------------ resources


def _smem_regions(program: Program, x: SimpleNamespace) -> tuple[list[Any], list[tuple[str, int, int]], int]:
    """The smem tensors, the ``(name, start, end)`` regions of the pipelines' mbarriers (a full and an
    empty one per stage) and of the dynamic scheduler's unit slots, and the byte where they all end."""
    smem = [t for t in program.tensors if t.space == "smem"]
    ends = [t.base_bytes + t.size_bytes for t in smem]
    bar_regions = [(pp.name, pp.barrier_bytes, pp.barrier_bytes + 16 * pp.stages) for pp in program.pipelines]
    sched = program.schedule
    if sched is not None and sched.decomposition == "dynamic":
        # the dynamic scheduler's int32 unit slots, one per Q stage (checked with the barriers)
        bar_regions.append(("unit slots", sched.slot_bytes, sched.slot_bytes + 4 * x.pq.stages))
    return smem, bar_regions, max(ends + [hi for _, _, hi in bar_regions])


def stages_that_fit(program: Program) -> int:
    """The deepest K / V pipeline of ``program``'s buffers that fits rule ``smem.capacity`` (227 KiB of
    dynamic shared memory per CTA, CUDA C++ Programming Guide, compute capability 9.0): one more K / V
    stage costs a stage of sK and of sV and their two pairs of 8-byte mbarriers, the rest (Q, the unit
    slots, the 1 KiB base alignment) stays (``kernels/attention/program.py`` lays them out in that
    order). 0 when not even one stage fits. The stage cap of the data-flow enumeration of a program that
    does not fit (:func:`argus_cutlass.verify.absint.enumerated_stages`).

    Raises:
        KeyError: a node it reads is missing (:func:`parts`).
    """
    x = parts(program)
    _, _, end = _smem_regions(program, x)
    step = 0
    for ld in (x.lk, x.lv):
        t = program.tensor(ld.dst)
        step += t.size_bytes // max(1, int(t.shape[-1])) + 16
    stages = max(x.pk.stages, x.pv_pipe.stages)
    fixed = end + SMEM_ALIGN_SLACK - stages * step
    return max(0, (SMEM_LIMIT_BYTES - fixed) // step)


def _rule(proofs: list[Proof], bad: list[Violation], name: str, msgs: list[str], summary: str, hint: str = "",
          where: str = "") -> None:
    """One closed-form rule's outcome: a violation per message, else one arith proof with ``summary``."""
    if msgs:
        bad.extend(Violation(name, _inv(name), m, hint, where) for m in msgs)
    else:
        proofs.append(Proof(name, _inv(name), "arith", summary))


def check_resources(program: Program) -> Outcome:
    """smem.capacity, smem.alignment, smem.disjoint, registers, roles.registers, gmma.n,
    gmma.m_tile, mma.major, mma.dtype, tma.box_extent, tma.box_inner_bytes, stages: closed-form
    rules on the program's nodes (sources: CUDA occupancy limits; PTX ISA 9.7.15 wgmma shapes,
    9.7.17.1 setmaxnreg; cuTensorMapEncodeTiled box rules)."""
    x = parts(program)
    p = program
    proofs: list[Proof] = []
    bad: list[Violation] = []

    def rule(name: str, msgs: list[str], summary: str, hint: str = "", where: str = "") -> None:
        _rule(proofs, bad, name, msgs, summary, hint, where)

    smem, bar_regions, end = _smem_regions(program, x)
    total = end + SMEM_ALIGN_SLACK
    rule("smem.capacity", [f"the kernel asks for {total} bytes of dynamic shared memory (buffers and barriers end at "
                           f"{end}, + {SMEM_ALIGN_SLACK} to align the base) > {SMEM_LIMIT_BYTES} (227 KiB, sm_90)"]
         if total > SMEM_LIMIT_BYTES else [],
         f"{total} bytes <= {SMEM_LIMIT_BYTES}", "fewer stages or a smaller tile_n", str(x.pk.loc))
    msgs = []
    for t in smem:
        period = max([sw * 8 if sw > 16 else 128 for _, sw in _touching(p, t.name)] + [16])
        if t.align_bytes < 1 or t.align_bytes & (t.align_bytes - 1):
            msgs.append(f"{t.name}: alignment {t.align_bytes} is not a power of two")
            continue
        if t.base_bytes % t.align_bytes or t.align_bytes % period and t.align_bytes < period:
            msgs.append(f"{t.name} at byte {t.base_bytes} (align {t.align_bytes}): its views and TMA copies swizzle "
                        f"with a {period}-byte period, so its base must be a multiple of {period}")
        elif t.base_bytes % period:
            msgs.append(f"{t.name} at byte {t.base_bytes} is not a multiple of its swizzle period {period}")
        stage_bytes = int(t.shape[0]) * int(t.shape[1]) * t.elem_bytes if len(t.shape) == 3 else 0
        if stage_bytes % period:
            msgs.append(f"{t.name}: a stage of {stage_bytes} bytes breaks the {period}-byte swizzle period of the next")
    rule("smem.alignment", msgs, "every smem buffer and stage starts at its swizzle period",
         "align buffers to 8 x swizzle bytes")
    msgs = []
    for name, lo, hi in bar_regions:
        if lo % (4 if name == "unit slots" else 8):
            msgs.append(f"{name if name == 'unit slots' else f'pipeline {name!r}: mbarriers'} at byte {lo} are not "
                        f"{4 if name == 'unit slots' else 8}-byte aligned")
        for t in smem:
            if lo < t.base_bytes + t.size_bytes and t.base_bytes < hi:
                msgs.append(f"pipeline {name!r}'s mbarriers [{lo}, {hi}) overlap {t.name} [{t.base_bytes}, "
                            f"{t.base_bytes + t.size_bytes})")
        for name2, lo2, hi2 in bar_regions:
            if name2 > name and lo < hi2 and lo2 < hi:
                msgs.append(f"the mbarriers of pipelines {name!r} [{lo}, {hi}) and {name2!r} [{lo2}, {hi2}) overlap")
    if msgs:
        # the first byte two regions share: where the producer's write (a TMA box, an mbarrier
        # init / arrive, a unit slot) lands on another region's data
        regions = [(t.name, t.base_bytes, t.base_bytes + t.size_bytes) for t in smem] + bar_regions
        clash = next(((a, b, max(lo, lo2)) for i, (a, lo, hi) in enumerate(regions)
                      for b, lo2, hi2 in regions[i + 1:] if lo < hi2 and lo2 < hi), None)
        for m in msgs:
            cex = None if clash is None else _cex(
                "smem.disjoint", "smem", str(p.schedule.loc if clash[1] == "unit slots" or clash[0] == "unit slots"
                                             else x.pq.loc),
                "every smem byte owned by one buffer, barrier or slot",
                f"byte {clash[2]} belongs to {clash[0]} and {clash[1]}", thread=_PRODUCER,
                element={"smem_byte": clash[2]}, params={"regions": f"{clash[0]} / {clash[1]}"})
            bad.append(Violation("smem.disjoint", _inv("smem.disjoint"), m, "", "", cex))
    else:
        proofs.append(Proof("smem.disjoint", _inv("smem.disjoint"), "arith",
                            "mbarrier regions are 8-byte aligned, apart from each other and from the buffers"))

    prod, cons = x.producer, x.consumer
    need = x.tile_n // 2 + x.D // 2 + x.tile_n // 4 + REGISTER_OVERHEAD
    rule("registers", [f"a consumer thread holds S ({x.tile_n // 2}) + O ({x.D // 2}) + P ({x.tile_n // 4}) registers "
                       f"+ {REGISTER_OVERHEAD} = {need} > the {cons.regs} its setmaxnreg gives"] if need > cons.regs
         else [], f"S {x.tile_n // 2} + O {x.D // 2} + P {x.tile_n // 4} + {REGISTER_OVERHEAD} = {need} <= {cons.regs}",
         "a smaller tile_n, or fewer consumer warpgroups (more registers each)", str(cons.loc))
    msgs = []
    for r in (prod, cons):
        if not isinstance(r.regs, int) or r.regs % 8 or not 24 <= r.regs <= 256:
            msgs.append(f"role {r.name!r}: setmaxnreg {r.regs!r} is not a multiple of 8 in [24, 256] (PTX ISA 9.7.17.1)")
    wgs_c = tuple(cons.warpgroups)
    if tuple(prod.warpgroups) != (0,) or wgs_c != tuple(range(1, 1 + len(wgs_c))):
        msgs.append(f"the producer plays warpgroup(s) {prod.warpgroups} and the consumers {wgs_c}: the kernel runs "
                    "warpgroup 0 as the producer and 1.. as consumers")
    if len(wgs_c) != x.wgs:
        msgs.append(f"{len(wgs_c)} consumer warpgroups but the MMAs tile {x.wgs} warpgroups along M")
    budget = WG * (prod.regs + len(wgs_c) * cons.regs)
    threads = p.launch.threads
    pool = threads * launch_register_cap(threads) if isinstance(threads, int) and threads > 0 else REGISTERS_PER_SM
    if budget > pool:
        msgs.append(f"128 x ({prod.regs} + {len(wgs_c)} x {cons.regs}) = {budget} registers > the CTA's {pool} "
                    f"({threads} threads x {launch_register_cap(threads)} allotted at launch): setmaxnreg.inc draws "
                    "only on registers the CTA's producer released, so the consumers wait forever (a hang)")
    if p.launch.threads != WG * (1 + len(wgs_c)):
        msgs.append(f"launch threads {p.launch.threads} != 128 x (1 producer + {len(wgs_c)} consumer warpgroups)")
    rule("roles.registers", msgs, f"producer {prod.regs}, consumers {cons.regs} x {len(wgs_c)}: {budget} <= "
         f"the CTA's {pool} registers at launch")
    msgs = []
    for m in (x.qk, x.pv):
        if m.op.n % 8 or not 8 <= m.op.n <= 256:
            msgs.append(f"MMA {m.name!r}: N = {m.op.n} is not a multiple of 8 in [8, 256] (PTX ISA 9.7.15)")
    rule("gmma.n", msgs, f"N = {x.qk.op.n} (S = Q K^T), {x.pv.op.n} (O += P V)")
    msgs = []
    for m in (x.qk, x.pv):
        if (m.op.m, m.op.k) != (64, 16) or m.reps_m != 1:
            msgs.append(f"MMA {m.name!r}: {m.op.m}x{m.op.n}x{m.op.k} with {m.reps_m} repetitions: the kernel issues one "
                        "64 x N x 16 wgmma atom per consumer warpgroup")
    if x.qk.atoms_m != x.pv.atoms_m:
        msgs.append(f"MMA qk tiles {x.qk.atoms_m} warpgroups, pv {x.pv.atoms_m}: the warpgroup that computes S rows "
                    "multiplies them by V")
    if x.tile_n % 16 or x.D % 16:
        msgs.append(f"tile_n {x.tile_n} / head dim {x.D} must be multiples of 16 (the k-blocks of the two MMAs)")
    for r, m in ((x.rd_q, x.qk), (x.rd_k, x.qk), (x.rd_p, x.pv), (x.rd_v, x.pv)):
        if r.op != m.op:
            msgs.append(f"read {r.name!r} forms descriptors for op {r.op.cpp()} but MMA {m.name!r} issues {m.op.cpp()}")
    rule("gmma.m_tile", msgs, f"64 x N x 16 atoms, {x.wgs} consumer warpgroups, tile {x.tile_m} x {x.tile_n}")
    msgs = []
    if x.qk.op.mode != "SS" or x.pv.op.mode != "RS":
        msgs.append(f"S = Q K^T is {x.qk.op.mode} and O += P V is {x.pv.op.mode}: the kernel reads Q, K, V from smem "
                    "and P from registers (SS, RS)")
    for r, m, which in ((x.rd_q, x.qk, "a_major"), (x.rd_k, x.qk, "b_major"), (x.rd_v, x.pv, "b_major")):
        if r.view is not None and getattr(m.op, which) != r.view.atom.major:
            msgs.append(f"MMA {m.name!r} flags {which[0].upper()} as {getattr(m.op, which)}-major but reads "
                        f"{r.src} through a {r.view.atom.major}-major view")
    if x.pv.op.a_major != "K":
        msgs.append("an RS-mode wgmma reads A K-major from registers (PTX ISA 9.7.15.5.2)")
    rule("mma.major", msgs, "the wgmma major flags match the smem views (Q, K K-major; V "
         f"{x.rd_v.view.atom.major if x.rd_v.view else '?'}-major; P K-major in registers)")
    msgs = []
    elem = {p.tensor(ld.src).dtype for ld in (x.lq, x.lk, x.lv)}
    if len(elem) != 1 or x.qk.op.dtype not in elem or x.pv.op.dtype not in elem or x.conv.dtype not in elem:
        msgs.append(f"Q/K/V dtypes {sorted(elem)}, MMA inputs {x.qk.op.dtype}/{x.pv.op.dtype}, P {x.conv.dtype}: one "
                    "16-bit element type throughout")
    if x.qk.op.acc_dtype != "fp32" or x.pv.op.acc_dtype != "fp32":
        msgs.append("S and O accumulate in fp32")
    # the tensors the template's static_asserts type too (adversarial review, session 45: O's dtype, a register
    # tensor's, verified clean and stopped only nvcc)
    out, q_elem = p.output, p.tensor(x.lq.src).dtype
    for what, src, want in (("O", out.dst, q_elem), ("sQ", x.lq.dst, q_elem), ("sK", x.lk.dst, q_elem),
                            ("sV", x.lv.dst, q_elem), ("P", x.rd_p.src, q_elem), ("S", x.qk.acc, "fp32"),
                            ("O's accumulator", x.pv.acc, "fp32"), ("the LSE", out.lse, "fp32")):
        if p.tensor(src).dtype != want:
            msgs.append(f"{what} ({src}) is {p.tensor(src).dtype}: the kernel holds it as {want}")
    rule("mma.dtype", msgs, f"{sorted(elem)[0] if elem else '?'} inputs, buffers, P and O; fp32 S, O accumulator and LSE",
         "one 16-bit element type for the inputs, their buffers, P and O; fp32 accumulators and LSE")
    msgs, msgs2 = [], []
    for ld in (x.lq, x.lk, x.lv):
        inner, outer = ld.copy.box[0], ld.copy.box[1]
        if not (1 <= inner <= MAX_TMA_BOX and 1 <= outer <= MAX_TMA_BOX):
            msgs.append(f"load {ld.name!r}: box {ld.copy.box} has an extent outside [1, 256]")
        ib = inner * ld.copy.elem_bits // 8
        if ib % 16 or (ld.copy.swizzle_bytes > 16 and ib > ld.copy.swizzle_bytes):
            msgs2.append(f"load {ld.name!r}: inner box {ib} bytes must be a multiple of 16 and at most the "
                         f"{ld.copy.swizzle_bytes}-byte swizzle span")
    rule("tma.box_extent", msgs, "every box extent in [1, 256]")
    rule("tma.box_inner_bytes", msgs2, "inner box bytes: multiples of 16 within the swizzle span")
    rule("stages", [f"pipeline {pp.name!r} has {pp.stages} stages" for pp in (x.pq, x.pk, x.pv_pipe)
                    if not isinstance(pp.stages, int) or pp.stages < 1],
         f"Q {x.pq.stages}, K {x.pk.stages}, V {x.pv_pipe.stages} stages")
    return proofs, bad


def check_structure(program: Program) -> Outcome:
    """mma.tile, loop.step: the relations between the attention program's nodes that its template states as
    ``static_assert`` (``templates/attention/traits.j2``), decided here so that a program that verifies also
    compiles (adversarial review, session 45: a read's tile, a register tensor's shape or the kv loop's k-blocks
    edited alone verified clean and stopped only nvcc; the dtypes are :func:`check_resources`' ``mma.dtype``): the MMA
    reads, register tensors and smem buffers cover the tile (``tile_m x D``, ``tile_n x D``, ``tile_m x tile_n``,
    ``D x tile_n``; one 64-row atom per consumer warpgroup); the kv loop steps a whole kv block in k-blocks of the
    PV MMA's K."""
    x = parts(program)
    p = program
    proofs: list[Proof] = []
    bad: list[Violation] = []
    t = {n: p.tensor(src) for n, src in (("sQ", x.lq.dst), ("sK", x.lk.dst), ("sV", x.lv.dst), ("P", x.rd_p.src),
                                         ("S", x.qk.acc), ("O_acc", x.pv.acc))}
    BM, BN, D, W = x.tile_m, x.tile_n, x.D, x.wgs
    msgs = []
    for r, mn, k, wgs in ((x.rd_q, BM, D, W), (x.rd_k, BN, D, 1), (x.rd_p, BM, BN, W), (x.rd_v, D, BN, 1)):
        if (r.tile_mn, r.tile_k, r.warpgroups) != (mn, k, wgs):
            msgs.append(f"read {r.name!r}: tile {r.tile_mn} x {r.tile_k} over {r.warpgroups} warpgroup(s), the tile "
                        f"needs {mn} x {k} over {wgs}")
    for n, shape in (("S", (64, BN)), ("O_acc", (64, D)), ("P", (64, BN))):
        if tuple(t[n].shape[:2]) != shape or len(t[n].shape) != 2:
            msgs.append(f"register tensor {t[n].name!r} ({n}) has shape {tuple(t[n].shape)}: one warpgroup holds "
                        f"{shape[0]} x {shape[1]}")
    for n, shape in (("sQ", (BM, D)), ("sK", (BN, D)), ("sV", (D, BN))):
        if tuple(t[n].shape[:2]) != shape:
            msgs.append(f"smem buffer {t[n].name!r} stages {tuple(t[n].shape[:2])}: the tile needs {shape}")
    if (x.qk.op.n, x.pv.op.n) != (BN, D):
        msgs.append(f"MMA qk N = {x.qk.op.n}, MMA pv N = {x.pv.op.n}: S is tile_m x {BN}, O tile_m x {D}")
    _rule(proofs, bad, "mma.tile", msgs, f"reads, register tensors and smem buffers cover the {BM} x {BN} tile at d {D}",
         "build the program with argus_cutlass.kernels.attention.program.build_program", str(x.qk.loc))
    lp = x.loop
    msgs = []
    if lp.tile_k != BN or lp.block_k != x.pv.op.k or lp.block_k * lp.k_blocks != BN:
        msgs.append(f"kv loop: tile_k {lp.tile_k}, {lp.k_blocks} k-blocks of {lp.block_k}: one kv block is {BN} keys "
                    f"in k-blocks of the PV wgmma's K ({x.pv.op.k})")
    _rule(proofs, bad, "loop.step", msgs, f"kv blocks of {BN} keys, {lp.k_blocks} k-blocks of {lp.block_k}",
         "k_blocks = tile_n / 16", str(lp.loc))
    return proofs, bad


def _touching(program: Program, name: str) -> list[tuple[str, int]]:
    out = [(f"TMA load {ld.name}", ld.copy.swizzle_bytes) for ld in program.loads if ld.dst == name]
    out += [(f"MMA read {r.name}", r.view.swizzle_bytes) for r in program.reads if r.src == name and r.view is not None]
    return out


# ------------------------------------------------------------------------------- data flow: tags


def _local_image(program: Program, load: Any, stage_cap: int | None = None) -> dict[str, np.ndarray]:
    """The buffer's per-element tile-local coordinates ``mn``, ``k`` (and ``stage``) as the load's
    boxes write them (``advance`` left out: the engine adds the walk's blocks itself); the first
    ``stage_cap`` stages when given."""
    from argus_cutlass.verify.absint import tag_image

    img = tag_image(program, dataclasses.replace(load, advance="none"), stage_cap)
    tag = program.tensor(load.src).tag
    f_mn, f_k = tag.fields[0], tag.fields[1]
    return {"mn": img.fields[f_mn], "k": img.fields[f_k], "stage": img.fields[load.stage_tag.fields[0]
                                                                              if load.stage_tag.fields else "iter"]}


def _global(load: Any, mn: np.ndarray, k: np.ndarray, m_block: int, n_block: int) -> tuple[np.ndarray, np.ndarray]:
    """Global (batch-local) coordinates of tile-local ``(mn, k)`` of ``load`` in query block ``m_block``
    and kv block ``n_block``: the block the tile's query block picks (``block_mode "m"``), plus the kv
    block ``n_block + block_shift`` along the advancing mode (``tma.*`` coordinates of the template)."""
    mn = mn + (m_block * load.tile_mn if load.block_mode == "m" else 0)
    blk = n_block + load.block_shift
    mn = mn + (blk * load.tile_mn if load.advance == "mn" else 0)
    k = k + (blk * load.tile_k if load.advance == "k" else 0)
    return mn, k


def _read_local(program: Program, read: Any, image: dict[str, np.ndarray], mn: np.ndarray, k: np.ndarray,
                stage: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The tile-local (mn, k) tags at the smem elements ``read``'s view addresses for slots (mn, k)."""
    from argus_cutlass.verify.absint import view_layout

    mn, k = np.broadcast_arrays(np.asarray(mn, dtype=np.int64), np.asarray(k, dtype=np.int64))
    off = np.asarray(view_layout(read.view)(mn, k, np.full_like(mn, stage)), dtype=np.int64)
    cells = image["mn"].shape[0]
    inb = (off >= 0) & (off < cells)
    safe = np.where(inb, off, 0)
    return image["mn"][safe], image["k"][safe], inb & (image["mn"][safe] >= 0)


def _tag_field(program: Program, load: Any, which: str) -> str:
    """The gmem tag's field name of the load's ``mn`` or ``k`` mode."""
    fields = program.tensor(load.src).tag.fields
    return fields[0] if which == "mn" else fields[1]


def check_tags(program: Program, stage_cap: int | None = None) -> Outcome:
    """mma.k_agreement, mma.operand_identity (G1, FA3): every tag assertion at ``qk.gemm`` /
    ``pv.gemm``, evaluated at every slot of every consumer warpgroup, every stage, query blocks
    0 and 1 and kv blocks 0 and 1 (the tags are affine in the block indices, so two values of each
    separate every shift). Operand values: Q / K / V carry their gmem tags, globalised by the
    loads' ``block_mode``, ``advance`` and ``block_shift``; P carries S's (row, key) through the
    conversion's pairing (S's key is the key of the K element its slot read); ``slot.m`` is the
    query row the kernel computes (``m_block * tile_m + 64 w + row``), ``slot.n`` of ``qk`` the key
    the kernel masks as that column (``n_block * tile_n + col``) and of ``pv`` the head-dim column.
    ``stage_cap``: the first ``stage_cap`` stages of each pipeline only
    (:func:`argus_cutlass.verify.absint.enumerated_stages`; the proof says so)."""
    x = parts(program)
    proofs: list[Proof] = []
    bad: list[Violation] = []
    img = {n: _local_image(program, ld, stage_cap) for n, ld in (("q", x.lq), ("k", x.lk), ("v", x.lv))}

    def upto(n: int) -> int:
        return n if stage_cap is None else max(1, min(n, stage_cap))

    S = {"k": upto(x.pk.stages), "v": upto(x.pv_pipe.stages), "q": upto(x.pq.stages)}
    capped = (S["k"], S["v"], S["q"]) != (x.pk.stages, x.pv_pipe.stages, x.pq.stages)
    for a in program.assertions:
        if a.at not in ("qk.gemm", "pv.gemm"):
            bad.append(Violation(a.rule, a.invariant, f"tag assertion {a}: the attention engine evaluates assertions "
                                 "at qk.gemm and pv.gemm", "", str(a.loc)))
            continue
        points = 0
        first = None
        for m_block, n_block in itertools.product((0, 1), (0, 1)):
            stages = itertools.product(range(S["k"] if a.at == "qk.gemm" else S["v"]), range(S["q"]))
            for s, sq in stages:  # the K (qk) or V (pv) stage, and the Q stage the tile's QK^T read
                vals, shape = _values(program, x, img, a.at, m_block, n_block, s, sq)
                lhs, rhs = _side(vals, a.lhs, shape), _side(vals, a.rhs, shape)
                if lhs is None or rhs is None:
                    first = ("unknown", None)
                    break
                ok = _relate(lhs, rhs, a.relation)
                if ok is None:
                    first = ("relation", None)
                    break
                points += ok.size
                if not ok.all():
                    idx = tuple(int(i) for i in np.argwhere(~ok)[0])
                    first = ("fail", (m_block, n_block, s, idx, lhs[idx], rhs[idx], vals))
                    break
            if first is not None:
                break
        if first is None:
            which = (f"the first {S['k']} K / {S['v']} V / {S['q']} Q stages of {x.pk.stages} / "
                     f"{x.pv_pipe.stages} / {x.pq.stages}" if capped else "stages")
            proofs.append(Proof(a.rule, a.invariant, "enum", f"{a}: all {points} (warpgroup, row, column, k) slots "
                                f"x {which} x query blocks 0-1 x kv blocks 0-1", points))
            continue
        kind, info = first
        if kind != "fail":
            bad.append(Violation(a.rule, a.invariant, f"tag assertion {a}: cannot evaluate "
                                 f"{'its values' if kind == 'unknown' else 'its relation'} at {a.at}",
                                 "assert over A / B operand fields, slot.m / slot.n, or const", str(a.loc)))
            continue
        m_block, n_block, s, idx, lv, rv, vals = info
        w, row, col, kk = idx
        names = vals["_names"]
        mma = x.qk if a.at == "qk.gemm" else x.pv
        if a.at == "qk.gemm":
            t, reg = _acc_slot(row, col)
            register = f"{mma.acc}[{reg}]"
        else:
            t, reg = _acc_slot(row, col)
            register = f"{mma.acc}[{reg}] (O row {row}, d {col})"
        elem = {k: int(v[idx]) for k, v in vals.items() if not k.startswith("_") and isinstance(v, np.ndarray)}
        cex = _cex(a.rule, a.at, str(a.loc), f"{a.lhs[0]}.{a.lhs[1]} {a.relation} {a.rhs[0]}.{a.rhs[1]}",
                   f"{a.lhs[0]}.{a.lhs[1]} = {int(lv)}, {a.rhs[0]}.{a.rhs[1]} = {int(rv)}",
                   iteration=n_block, stage=s, k_block=kk // 16,
                   slot={"m": row, names[2]: col, names[3]: kk}, thread=_consumer_thread(w, t), register=register,
                   element=elem, params={"m_block": m_block, "kv_block": n_block},
                   chain=tuple(vals["_chain"]),
                   provenance=f"loads: {x.lq.name} (block {x.lq.block_mode}, advance {x.lq.advance}, shift "
                              f"{x.lq.block_shift}), {x.lk.name} (block {x.lk.block_mode}, advance {x.lk.advance}, "
                              f"shift {x.lk.block_shift}), {x.lv.name} (block {x.lv.block_mode}, advance "
                              f"{x.lv.advance}, shift {x.lv.block_shift})")
        bad.append(Violation(a.rule, a.invariant,
                             f"{a} fails at warpgroup {w}, row {row}, {names[2]} {col}, {names[3]} {kk} (query block "
                             f"{m_block}, kv block {n_block}, stage {s}): {a.lhs[0]}.{a.lhs[1]} = {int(lv)} but "
                             f"{a.rhs[0]}.{a.rhs[1]} = {int(rv)}",
                             "each operand must carry the coordinates its slot multiplies", str(a.loc), cex))
    return proofs, bad


def _values(program: Program, x: SimpleNamespace, img: dict, at: str, m_block: int, n_block: int,
            s: int, sq: int = 0) -> tuple[dict[str, Any], tuple[int, ...]]:
    """Operand tag arrays of one program point over (warpgroup, row, column, k) slots: K or V read
    from stage ``s``, Q from stage ``sq``."""
    W, BN, D = x.wgs, x.tile_n, x.D
    if at == "qk.gemm":
        shape = (W, 64, BN, D)
        w, r, n, k = np.meshgrid(np.arange(W), np.arange(64), np.arange(BN), np.arange(D), indexing="ij",
                                 sparse=True)
        # A = Q slot (64 w + r, k) of stage sq; B = K slot (n, k) of stage s
        qm, qk_, qv = _read_local(program, x.rd_q, img["q"], 64 * w + r + 0 * k, k + 0 * r, sq)
        qm, qk_ = _global(x.lq, qm, qk_, m_block, n_block)
        km, kk_, kvld = _read_local(program, x.rd_k, img["k"], n + 0 * k, k + 0 * n, s)
        km, kk_ = _global(x.lk, km, kk_, m_block, n_block)
        A = {_tag_field(program, x.lq, "mn"): qm, _tag_field(program, x.lq, "k"): qk_}
        B = {_tag_field(program, x.lk, "mn"): km, _tag_field(program, x.lk, "k"): kk_}
        slot = {"m": m_block * x.tile_m + 64 * w + r, "n": n_block * BN + n, "k": k}
        chain = (f"{x.lq.src} -> TMA {x.lq.name} -> {x.lq.dst} (stage {sq})", f"{x.lk.src} -> TMA {x.lk.name} -> "
                 f"{x.lk.dst} (stage {s})", "descriptors of qk -> S slot")
        names = ("w", "m", "n", "k")
    else:
        shape = (W, 64, D, BN)
        w, r, d, kk = np.meshgrid(np.arange(W), np.arange(64), np.arange(D), np.arange(BN), indexing="ij",
                                  sparse=True)
        # A = P: A value (row r, key kk) of k-block kk // 16 -> S register through the pairing
        pkeys, prow = _p_source(x, r, kk)
        # S(prow, pcol): its key is the K element its qk slot read (stage s, the same iteration)
        km, _, _ = _read_local(program, x.rd_k, img["k"], pkeys, np.zeros_like(pkeys), s)
        km, _ = _global(x.lk, km, np.zeros_like(km), m_block, n_block)
        qm, _, _ = _read_local(program, x.rd_q, img["q"], 64 * w + prow, np.zeros_like(prow + w), sq)
        qm, _ = _global(x.lq, qm, np.zeros_like(qm), m_block, n_block)
        vm, vk, _ = _read_local(program, x.rd_v, img["v"], d + 0 * kk, kk + 0 * d, s)
        vm, vk = _global(x.lv, vm, vk, m_block, n_block)
        A = {_tag_field(program, x.lq, "mn"): qm + 0 * d, _tag_field(program, x.lk, "mn"): km + 0 * d}
        B = {_tag_field(program, x.lv, "mn"): vm + 0 * (w + r), _tag_field(program, x.lv, "k"): vk + 0 * (w + r)}
        slot = {"m": m_block * x.tile_m + 64 * w + r, "n": d, "k": kk}
        chain = (f"S accumulator -> convert {x.conv.name} (pairing) -> P registers",
                 f"{x.lv.src} -> TMA {x.lv.name} -> {x.lv.dst} (stage {s})", "descriptor of pv's B -> O slot")
        names = ("w", "m", "d", "key")
    vals: dict[str, Any] = {"_A": A, "_B": B, "_slot": slot, "_chain": chain, "_names": names}
    for op, dct in (("A", A), ("B", B)):
        for f, v in dct.items():
            vals[f"{op}.{f}"] = np.broadcast_to(v, shape)
    return vals, shape


def _p_source(x: SimpleNamespace, r: np.ndarray, kk: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(S column, S row) that P's A-fragment slot (row ``r``, key ``kk``) holds after the conversion:
    the thread and value of the A slot (``ALayout_64x16``), its packed register ``4 kb + v // 2``, the
    accumulator pair ``pairing[register]`` and the value's half."""
    kb, kl = kk // 16, kk % 16
    # thread t and A value v holding (r, kl): invert a_frag_coord
    t = 32 * (r // 16) + 4 * ((r % 16) % 8) + (kl % 8) // 2
    v = 4 * (kl // 8) + 2 * ((r % 16) // 8) + kl % 2
    rr, kc = a_frag_coord(t, v)
    assert np.all(rr == r) and np.all(kc == kl)
    reg = 4 * kb + v // 2
    pairing = np.asarray(x.conv.pairing if x.conv.pairing else range(x.tile_n // 4), dtype=np.int64)
    src = pairing[np.clip(reg, 0, pairing.size - 1)]
    i = 2 * src + v % 2
    srow, scol = acc_coord(t, i)
    return scol + 0 * r, srow + 0 * kk


def _side(vals: dict[str, Any], side: tuple[str, str], shape: tuple[int, ...]) -> np.ndarray | None:
    what, field = side
    if what in ("A", "B"):
        v = vals.get(f"{what}.{field}")
        return None if v is None else np.broadcast_to(v, shape)
    if what == "slot":
        v = vals["_slot"].get(field)
        return None if v is None else np.broadcast_to(v, shape)
    if what == "const":
        try:
            return np.full(shape, int(field), dtype=np.int64)
        except ValueError:
            return None
    return None


def _relate(a: np.ndarray, b: np.ndarray, rel: str) -> np.ndarray | None:
    ops = {"==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal, ">": np.greater,
           ">=": np.greater_equal}
    return ops[rel](a, b) if rel in ops else None


def check_bindings(program: Program) -> Outcome:
    """mma.operand_identity (G1): S = Q K^T reads the buffers loaded from the caller's ``q`` and
    ``k``, O += P V the one loaded from ``v``; the output goes to the caller's ``o`` and ``lse``.
    head.map (FA4): Q and O address the query head, K and V its kv head ``h / (H / H_kv)``
    (enumerated for H = 8 with H_kv in {8, 2, 1})."""
    x = parts(program)
    p = program
    bad: list[Violation] = []
    want = ((x.lq, "q", "A of qk"), (x.lk, "k", "B of qk"), (x.lv, "v", "B of pv"))
    for ld, binding, role in want:
        g = p.tensor(ld.src)
        if g.binding != binding:
            bad.append(Violation("mma.operand_identity", "G1", f"the {role} buffer {ld.dst} is loaded from {g.name}, "
                                 f"bound to the caller's {g.binding!r}; it must hold the caller's {binding!r}",
                                 "bind Q, K, V to q, k, v", str(ld.loc),
                                 _cex("mma.operand_identity", f"{ld.name}", str(ld.loc), f"{g.name} <- {binding}",
                                      f"{g.name} <- {g.binding}", thread=_PRODUCER)))
    o, lse = p.tensor(p.output.dst), p.tensor(p.output.lse)
    if o.binding != "o" or lse.binding != "lse":
        bad.append(Violation("mma.operand_identity", "G1", f"the output writes {o.name} (bound {o.binding!r}) and "
                             f"{lse.name} (bound {lse.binding!r}): expected the caller's o and lse", "",
                             str(p.output.loc)))
    proofs = [] if bad else [Proof("mma.operand_identity", "G1", "arith", "Q, K, V loaded from the caller's q, k, v; "
                                   "O and LSE stored to o and lse")]
    head_bad: list[Violation] = []
    for ld, kind in ((x.lq, "q"), (x.lk, "kv"), (x.lv, "kv")):
        for hk in (8, 2, 1):
            found = None
            for h in range(8):
                got = sem.load_head(ld.head, h, 8, hk) if ld.head in ("q", "kv") else -1
                exp = sem.load_head(kind, h, 8, hk)
                if got != exp:
                    found = (h, got, exp)
                    break
            if found:
                h, got, exp = found
                head_bad.append(Violation(
                    "head.map", "FA4", f"load {ld.name!r} (head {ld.head!r}) reads head {got} for query head {h} with "
                    f"8 query heads and {hk} kv heads; the tile needs head {exp}",
                    "Q addresses the query head, K and V the kv head h / (H / H_kv)", str(ld.loc),
                    _cex("head.map", ld.name, str(ld.loc), f"head {exp}", f"head {got}", thread=_PRODUCER,
                         params={"heads": 8, "kv_heads": hk, "head": h})))
                break
    if p.output.head != "q":
        head_bad.append(Violation("head.map", "FA4", f"the output stores query head h's rows at head {p.output.head!r}",
                                  "", str(p.output.loc)))
    if not head_bad:
        proofs.append(Proof("head.map", "FA4", "enum", "Q and O at the query head, K and V at h / (H / H_kv) for "
                            "H = 8, H_kv in {8, 2, 1}", 72))
    return proofs, bad + head_bad


# ---------------------------------------------------------------------------------------- descriptors


def check_descriptors(program: Program, stage_cap: int | None = None) -> Outcome:
    """gmma.descriptor (G1): every wgmma descriptor the kernel forms for Q, K and V (the plan the
    template prints) decodes to the read view's byte address at every (stage, warpgroup, k-block,
    slot) (:func:`argus_cutlass.verify.absint._descriptor_walk`); the first ``stage_cap`` stages
    when given (:func:`argus_cutlass.verify.absint.enumerated_stages`)."""
    from argus_cutlass.layout.algebra import LayoutError
    from argus_cutlass.layout.gmma_desc import DescriptorError
    from argus_cutlass.verify.absint import _descriptor_walk

    x = parts(program)
    rule = "gmma.descriptor"
    proofs: list[Proof] = []
    bad: list[Violation] = []
    for read, mma, kblocks in ((x.rd_q, x.qk, x.D // 16), (x.rd_k, x.qk, x.D // 16),
                               (x.rd_v, x.pv, x.tile_n // 16)):
        try:
            count, seen, mm = _descriptor_walk(program, read, mma.atoms_m, mma.reps_m, kblocks, mma.op, stage_cap)
        except (DescriptorError, LayoutError) as exc:
            bad.append(Violation(rule, "G1", f"read {read.name!r}: no GMMA descriptor expresses the view: {exc}",
                                 "the MMA-side view must be a GMMA canonical layout", str(read.loc)))
            continue
        if mm is not None:
            bad.append(Violation(rule, "G1", f"read {read.name!r}: {mm.message}", "form descriptors from the read's "
                                 "own view, buffers aligned to their swizzle period", str(read.loc),
                                 _cex(rule, f"{mma.name}.gemm", str(read.loc), f"byte {mm.model}",
                                      f"byte {mm.hw} ({mm.desc})", stage=mm.stage, k_block=mm.k_block,
                                      slot={"mn": mm.mn, "k": mm.k}, params={"warpgroup": mm.wg})))
            continue
        t = program.tensor(read.src)
        n_all = int(t.shape[2]) if len(t.shape) >= 3 else 1
        which = "" if stage_cap is None or stage_cap >= n_all else f" of the first {stage_cap} of {n_all} stages"
        proofs.append(Proof(rule, "G1", "enum", f"{read.name}: {count} descriptors decode to the view at every "
                            f"slot{which}", count))
    return proofs, bad


# ----------------------------------------------------------------------------------- mask and blocks


def _mask_spec(program: Program) -> bool:
    """The specification's causal flag (the program's ``causal`` param; the mask node is the
    implementation checked against it)."""
    return bool(program.param("causal", program.mask.causal))


def _enum_lengths(tile_m: int, tile_n: int) -> list[tuple[int, int]]:
    qs = sorted({1, 2, 3, tile_m - 1, tile_m, tile_m + 1, 2 * tile_m + 3} - {0})
    ks = sorted({0, 1, 2, 3, tile_n - 1, tile_n, tile_n + 1, 2 * tile_n + 5} - {-1})
    pairs = {(lq, lk) for lq in qs for lk in ks}
    pairs |= {(lq, lq + d) for lq in qs for d in (-2, -1, 1, 2, tile_n) if lq + d >= 0}
    return sorted(pairs)


def check_mask(program: Program) -> Outcome:
    """mask.exact (FA5) and kv.coverage (FA6), enumeration tier: for boundary lengths (query counts
    around 1, tile_m, 2 tile_m; key counts around 0, tile_n, 2 tile_n and Lq +- a few) and every
    row of every query block, every key up to ``n_blocks * tile_n + tile_n``: the kernel attends
    (q, key) iff the specification does (:func:`argus_cutlass.hw.attention.attends` vs
    ``spec_attends``). A key the specification attends but the kernel does not is a coverage
    violation (a kv block not read, or a key masked); the reverse an exactness violation."""
    x = parts(program)
    mask = program.mask
    causal = _mask_spec(program)
    BM, BN = x.tile_m, x.tile_n
    points = 0
    for Lq, Lk in _enum_lengths(BM, BN):
        q = np.arange(Lq)
        key = np.arange(Lk + 2 * BN)
        Q, K = np.meshgrid(q, key, indexing="ij")
        MB = Q // BM
        kernel = _attends_np(mask, BM, BN, MB, Q, K, Lq, Lk, x.loop.rounding)
        spec = (K < Lk) & ((K <= Q + Lk - Lq) if causal else True)
        points += Q.size
        diff = kernel != spec
        if diff.any():
            i, j = (int(v) for v in np.argwhere(diff)[0])
            qq, kk = int(Q[i, j]), int(K[i, j])
            return [], [_mask_violation(program, x, qq, kk, Lq, Lk, bool(spec[i, j]), "enum")]
    return _ok("mask.exact", f"kernel mask == specification ({'causal bottom-right' if causal else 'key bound'}) for "
               f"{len(_enum_lengths(BM, BN))} boundary (Lq, Lk) pairs, every row and key ({points} points)", "enum",
               points)[0] + _ok("kv.coverage", "every key the specification attends lies in a block the tile reads "
                                "and survives its mask (same enumeration)", "enum", points)[0], []


def _attends_np(mask: Any, BM: int, BN: int, MB: np.ndarray, Q: np.ndarray, K: np.ndarray, Lq: int,
                Lk: int, rounding: str = "ceil") -> np.ndarray:
    """:func:`argus_cutlass.hw.attention.attends` on numpy arrays (same formulas, vectorised; ``rounding``: the kv
    loop node's)."""
    diag = (Lk - Lq if mask.bottom_right else 0) + mask.diagonal_shift
    limit = np.full(MB.shape, Lk)
    if mask.causal:
        last_row = np.minimum((MB + 1) * BM, Lq) - 1
        limit = np.minimum(limit, last_row + diag + 1)
    nb = np.where(limit > 0, (np.maximum(limit, 0) + (BN - 1 if rounding == "ceil" else 0)) // BN, 0)
    n = K // BN
    need = (n + 1) * BN > Lk
    if mask.causal:
        need = need | ((n + 1) * BN - 1 > MB * BM + diag)
    masked = np.zeros(K.shape, dtype=bool)
    if mask.key_bound:
        masked |= K >= Lk
    if mask.causal:
        masked |= K > Q + diag
    return (K < nb * BN) & ~(need & masked)


def _mask_violation(program: Program, x: SimpleNamespace, q: int, key: int, Lq: int, Lk: int, spec: bool,
                    engine: str) -> Violation:
    mask = program.mask
    BM, BN = x.tile_m, x.tile_n
    mb = q // BM
    nb = sem.kv_blocks(sem.INT_OPS, mask, BM, BN, mb, Lq, Lk, x.loop.rounding)
    n = key // BN
    need = sem.block_needs_mask(sem.INT_OPS, mask, BM, BN, mb, n, Lq, Lk)
    msk = sem.masked(sem.INT_OPS, mask, q, key, Lq, Lk)
    rule = "kv.coverage" if spec else "mask.exact"
    local = q - mb * BM
    w, r = local // 64, local % 64
    t, i = _acc_slot(r, key % BN)
    why = (f"kv block {n} is {'not read (the tile reads blocks 0..' + str(nb - 1) + ')' if n >= nb else 'read'}"
           + (f", the mask {'is applied' if need else 'is skipped'} there and {'drops' if msk else 'keeps'} the key"
              if n < nb else ""))
    causal = _mask_spec(program)
    expected = (f"row {q} attends key {key}" if spec else f"row {q} does not attend key {key}") + \
        f" (spec: key < Lk{' and key <= q + Lk - Lq' if causal else ''})"
    actual = ("the kernel drops it: " if spec else "the kernel attends it: ") + why
    cex = _cex(rule, "qk.mask", str(mask.loc), expected, actual, engine=engine, iteration=n,
               slot={"q": q, "key": key}, thread=_consumer_thread(w, t), register=f"{x.qk.acc}[{i}]",
               element={"tensor": "S", "q": q, "key": key},
               params={"Lq": Lq, "Lk": Lk, "m_block": mb, "n_blocks": nb, "kv_block": n},
               provenance=f"mask causal={mask.causal} bottom_right={mask.bottom_right} key_bound={mask.key_bound} "
                          f"diagonal_shift={mask.diagonal_shift}; tile {BM}x{BN}; spec causal={causal}")
    msg = (f"{'coverage' if spec else 'mask'}: with Lq={Lq}, Lk={Lk}, query block {mb}: row {q} "
           f"{'must attend' if spec else 'must not attend'} key {key}, but {why}")
    return Violation(rule, _inv(rule), msg, "the mask is key >= Lk, or key > q + Lk - Lq when causal (bottom-right); "
                     "the kv blocks and the masked blocks derive from it", str(mask.loc), cex)


def check_mask_smt(program: Program, timeout_ms: int) -> tuple[list[Proof], list[Violation], list[Unknown]]:
    """mask.exact / kv.coverage, SMT tier: the same equality for all ``1 <= Lq < 2^bits``,
    ``0 <= Lk < 2^bits`` (``bits`` = the kv loop's ``bound_bits``), every query block, row and key
    (z3 integer arithmetic over :mod:`argus_cutlass.hw.attention`). A model is reported as a
    counterexample; a timeout as ``unknown``."""
    import z3

    x = parts(program)
    mask = program.mask
    causal = _mask_spec(program)
    BM, BN = x.tile_m, x.tile_n
    bits = x.loop.bound_bits
    ops = sem.Z3IntOps()
    Lq, Lk, q, key = z3.Ints("Lq Lk q key")
    mb = q / BM
    dom = z3.And(Lq >= 1, Lq < 2 ** bits, Lk >= 0, Lk < 2 ** bits, q >= 0, q < Lq, key >= 0, key < 2 ** bits + BN)
    kern = sem.attends(ops, mask, BM, BN, mb, q, key, Lq, Lk, x.loop.rounding)
    spec = sem.spec_attends(ops, causal, q, key, Lq, Lk)
    t0 = time.perf_counter()
    out_p: list[Proof] = []
    out_v: list[Violation] = []
    out_u: list[Unknown] = []
    for rule, bad_expr in (("kv.coverage", z3.And(spec, z3.Not(kern))), ("mask.exact", z3.And(kern, z3.Not(spec)))):
        s = z3.Solver()
        s.set("timeout", int(timeout_ms))
        s.add(dom, bad_expr)
        res = s.check()
        if res == z3.unsat:
            out_p.append(Proof(rule, _inv(rule), "smt", f"{'spec => kernel' if rule == 'kv.coverage' else 'kernel => spec'}"
                               f" for all Lq in [1, 2^{bits}), Lk in [0, 2^{bits}), every row and key", 1,
                               time.perf_counter() - t0))
        elif res == z3.sat:
            mdl = s.model()
            vals = {n: mdl.eval(v, model_completion=True).as_long() for n, v in (("Lq", Lq), ("Lk", Lk), ("q", q),
                                                                                 ("key", key))}
            out_v.append(_mask_violation(program, x, vals["q"], vals["key"], vals["Lq"], vals["Lk"],
                                         rule == "kv.coverage", "smt"))
        else:
            out_u.append(Unknown(rule, _inv(rule), f"{_inv(rule)} {rule}: mask equality for all lengths < 2^{bits}",
                                 str(s.reason_unknown()), int(timeout_ms), time.perf_counter() - t0))
    return out_p, out_v, out_u


# ------------------------------------------------------------------------------------------- softmax


def _kernel_softmax(blocks: list[np.ndarray], values: list[np.ndarray], scale: float, smax: Any,
                    out: Any) -> tuple[np.ndarray, float]:
    """The template's recurrence (``softmax_block``, ``rescale_o``, ``store_output``) for one row,
    kv blocks in walk order, in float64 with the node's flags."""
    c = scale * (1.4426950408889634 if smax.fold_log2e else 1.0)
    m, l, o = -math.inf, 0.0, np.zeros(values[0].shape[1])
    for j, (s, v) in enumerate(zip(blocks, values)):
        first = j == 0
        m_new = max(-math.inf if first else m, float(np.max(s)) * c)
        m_safe = 0.0 if m_new == -math.inf else m_new
        f = 0.0 if first else (2.0 ** (m - m_safe) if smax.rescale else 1.0)
        pr = np.exp2(s * c - m_safe)
        l = (0.0 if first else l * f) + float(pr.sum())
        o = o * f + pr @ v
        m = m_new
    none = not l > 0
    res = np.zeros_like(o) if none else (o / l if out.normalize else o)
    lse = -math.inf if none else m * math.log(2.0) + math.log(l)
    return res, lse


def check_softmax(program: Program) -> Outcome:
    """softmax.online (FA2): the online softmax the node states computes softmax(scale S) V and the
    LSE. Arith: the max / sum reductions are over S with ops max / sum, the softmax's S is the mask's
    and the QK MMA's accumulator, its O the PV MMA's; ``rescale``, ``fold_log2e`` and the output's
    ``normalize`` hold, which makes the recurrence's invariant ``O_j = sum_{b<=j} exp2(c S_b - m_j) V_b``,
    ``l_j = sum_{b<=j} rowsum exp2(c S_b - m_j)`` inductive (``exp2(a - m_j) = exp2(a - m_{j-1})
    exp2(m_{j-1} - m_j)``, the factor applied to O and l of the same row). Enum: the template's
    recurrence on fixed instances (1-4 blocks, growing and shrinking maxima, a fully masked block)
    against the exact formula; a broken flag comes back with the instance and both results."""
    x = parts(program)
    p = program
    smax, out = p.softmax, p.output
    rule = "softmax.online"
    msgs = []
    reds = {r.name: r for r in p.reductions}
    for name, op in ((smax.max, "max"), (smax.sum, "sum")):
        r = reds.get(name)
        if r is None or r.op != op or r.src != smax.src:
            msgs.append(f"softmax {op} {name!r}: {'missing' if r is None else f'a {r.op} over {r.src!r}'}; expected a "
                        f"{op} over {smax.src!r}")
    if smax.src != x.qk.acc or p.mask.acc != x.qk.acc:
        msgs.append(f"the softmax reads {smax.src!r} and the mask acts on {p.mask.acc!r}; S is {x.qk.acc!r}")
    if smax.acc != x.pv.acc or out.acc != x.pv.acc:
        msgs.append(f"the softmax rescales {smax.acc!r} and the output stores {out.acc!r}; O is {x.pv.acc!r}")
    if x.conv.src != smax.src:
        msgs.append(f"P is converted from {x.conv.src!r}, not from the softmax's {smax.src!r}")
    if msgs:
        return _bad(rule, msgs, "the softmax, mask, conversion and output act on the MMAs' accumulators", str(smax.loc))
    rng = np.random.default_rng(7)
    cases = []
    for nb in (1, 2, 3, 4):
        for trend in ("up", "down"):
            blocks = [rng.normal(size=4) * 3 + (4 * j if trend == "up" else -4 * j) for j in range(nb)]
            cases.append(blocks)
    cases.append([np.array([-np.inf] * 4), np.array([1.0, 2.0, 3.0, 4.0])])
    scale = 0.125
    worst = None
    for blocks in cases:
        values = [rng.normal(size=(4, 3)) for _ in blocks]
        got, lse = _kernel_softmax(blocks, values, scale, smax, out)
        s_all = np.concatenate(blocks) * scale
        v_all = np.concatenate(values)
        mx = np.max(s_all)
        w = np.exp(s_all - mx)
        ref = (w @ v_all) / w.sum()
        ref_lse = mx + math.log(w.sum())
        err = max(float(np.max(np.abs(got - ref))), abs(lse - ref_lse))
        if not err < 1e-9:
            worst = (blocks, got, ref, lse, ref_lse)
            break
    if worst is None:
        return _ok(rule, f"reductions {smax.max}/{smax.sum} over {smax.src}; rescale, exp2 with log2(e) folded, O / l: "
                   f"the recurrence's invariant is inductive, and it equals softmax(scale S) V and the LSE on "
                   f"{len(cases)} instances (1-4 blocks, growing / shrinking maxima, a fully masked block)", "enum",
                   len(cases))
    blocks, got, ref, lse, ref_lse = worst
    flags = f"rescale={smax.rescale}, fold_log2e={smax.fold_log2e}, normalize={out.normalize}"
    cex = _cex(rule, "softmax", str(smax.loc), f"O row = {np.round(ref, 6).tolist()}, LSE = {ref_lse:.6f}",
               f"O row = {np.round(got, 6).tolist()}, LSE = {lse:.6f} ({flags})", iteration=len(blocks) - 1,
               element={"row": 0, "blocks": len(blocks)},
               params={"scale": scale, "blocks": len(blocks)},
               chain=tuple(f"kv block {j} (walk order): scores {np.round(b, 3).tolist()}" for j, b in enumerate(blocks)),
               provenance="the template's softmax_block / rescale_o / store_output recurrence in float64")
    return [], [Violation(rule, _inv(rule), f"the online softmax ({flags}) does not compute softmax(scale S) V: on "
                          f"{len(blocks)} kv blocks a row gets {np.round(got, 4).tolist()} instead of "
                          f"{np.round(ref, 4).tolist()} (LSE {lse:.4f} vs {ref_lse:.4f})",
                          "rescale O and l by exp2(m_old - m_new), fold log2(e) into the scale, divide O by l",
                          str(smax.loc), cex)]


# -------------------------------------------------------------------------------------------- output


def check_output(program: Program) -> Outcome:
    """output.row (FA4): the epilogue's store map, enumerated as the template computes it
    (:func:`argus_cutlass.hw.attention.output_store_map`: the row of each thread's row half, the
    ``quad16`` lane exchange ``shuffle`` simulated on all 32 lanes of a warp, the column
    ``group_cols * g + lane_cols * (lane % 4) + 2 w + e``), proves for every consumer thread that
    each element it stores at (row, d) is the accumulator element (row, d) (after the exchange: the
    source lane's register holding it), that every (row, d) of the warpgroup's 64 x D tile is stored
    exactly once and inside the head's D columns, and that each 4- or 16-byte store is aligned (the
    entry refuses o pointers / strides that are not 16-byte multiples, code kErrAlign). Rows past the
    batch's query count are not stored (``row_mask``: a query block may reach past ``Lq``; in a packed
    batch those rows are the next sequence's; every lane still takes part in the exchange, the mask
    guards the store), and O is divided by l (``normalize``)."""
    x = parts(program)
    out = program.output
    rule = "output.row"
    bad = []
    D = x.D
    words = sem.STORE_WORDS.get(out.store_mode)
    ebytes = program.tensor(out.dst).elem_bytes

    def viol(msg: str, hint: str, expected: str, actual: str, t: int = 0, reg: str = "",
             element: dict | None = None, params: dict | None = None) -> Violation:
        return Violation(rule, "FA4", msg, hint, str(out.loc),
                         _cex(rule, "output.store", str(out.loc), expected, actual, thread=_consumer_thread(0, t),
                              register=reg, element=element, params={"store_mode": out.store_mode,
                                                                     "shuffle": list(out.shuffle),
                                                                     "group_cols": out.group_cols,
                                                                     "lane_cols": out.lane_cols,
                                                                     "row_offset": out.row_offset, **(params or {})}))

    if words is None:
        bad.append(viol(f"store mode {out.store_mode!r} has no store map", "'direct' or 'quad16'", "a store mode",
                        out.store_mode))
    elif out.store_mode == "direct" and out.shuffle:
        bad.append(viol(f"the direct store exchanges registers (shuffle {out.shuffle}): each thread stores its own "
                        "pairs", "no shuffle on the direct path", "shuffle ()", f"shuffle {out.shuffle}"))
    else:
        recs, err = sem.output_store_map(out, D)
        if err is not None:
            bad.append(viol(f"the quad exchange is malformed: {err}", "lane masks 2 and 1 (a 4x4 transpose in a quad)",
                            "an exchange inside the thread's 4 words and the warp's 32 lanes", err))
        cover = np.zeros((64, D), dtype=np.int64)
        first_wrong = first_out = first_misaligned = None
        for t, h, g, w, e, row, d, src_t, src_reg in recs:
            want = acc_coord(src_t, src_reg)
            if not 0 <= d < D:
                first_out = first_out or (t, h, g, w, e, row, d, src_t, src_reg)
                continue
            cover[row, d] += 1
            if (row, d) != want and first_wrong is None:
                first_wrong = (t, h, g, w, e, row, d, src_t, src_reg, want)
            if w == 0 and e == 0 and (d * ebytes) % (4 * words) and first_misaligned is None:
                first_misaligned = (t, h, g, row, d)
        if first_wrong is not None:
            t, h, g, w, e, row, d, src_t, src_reg, want = first_wrong
            bad.append(viol(
                f"thread {t} of each consumer warpgroup stores, as word {w} element {e} of its store {g} (row half "
                f"{h}), the value of {x.pv.acc}[{src_reg}] of thread {src_t} (O[{want[0]}, {want[1]}]) at "
                f"O[{row}, {d}]",
                "store each accumulator element at its own (row, d): row_offset 0; quad16: shuffle (2, 1), "
                "group_cols 32, lane_cols 8", f"O[{want[0]}, {want[1]}] stored at ({want[0]}, {want[1]})",
                f"stored at ({row}, {d})", t, f"{x.pv.acc}[{src_reg}] of thread {src_t}",
                {"tensor": out.dst, "row": row, "d": d}, {"word": w, "store": g, "row_half": h}))
        if first_out is not None:
            t, h, g, w, e, row, d, src_t, src_reg = first_out
            bad.append(viol(f"thread {t} stores at column {d}, outside the head's {D} columns (another head's or the "
                            "next row's data)", "columns group_cols * g + lane_cols * (lane % 4) + 2 w + e < D",
                            f"d < {D}", f"d = {d}", t, f"{x.pv.acc}[{src_reg}] of thread {src_t}",
                            {"tensor": out.dst, "row": row, "d": d}, {"word": w, "store": g}))
        if first_misaligned is not None:
            t, h, g, row, d = first_misaligned
            bad.append(viol(f"thread {t}'s {4 * words}-byte store {g} starts at column {d} ({d * ebytes} bytes into "
                            f"the row): not {4 * words}-byte aligned (a misaligned address fault)",
                            "store starts at multiples of the store width", f"byte offset % {4 * words} == 0",
                            f"{d * ebytes}", t, "", {"tensor": out.dst, "row": row, "d": d}))
        if err is None and (cover != 1).any():
            row, d = (int(v) for v in np.argwhere(cover != 1)[0])
            bad.append(viol(f"O[{row}, {d}] of each warpgroup's tile is stored {int(cover[row, d])} times (once "
                            "expected)", "a store map that covers the 64 x D tile once", "stored once",
                            f"stored {int(cover[row, d])} times", 0, "", {"tensor": out.dst, "row": row, "d": d}))
    if not out.row_mask:
        bad.append(Violation(rule, "FA4", "rows past the batch's query count are stored: with Lq = 1 a query block "
                             f"writes {x.tile_m - 1} rows after the last query (the next sequence's rows in a packed "
                             f"batch, past the tensor otherwise; {out.store_mode} store)",
                             "mask the rows >= Lq in the epilogue", str(out.loc),
                             _cex(rule, "output.store", str(out.loc), "rows >= Lq not written",
                                  "row 1 written with Lq = 1", params={"Lq": 1, "store_mode": out.store_mode},
                                  thread=_consumer_thread(0, 4), element={"tensor": out.dst, "row": 1})))
    if not out.normalize:
        bad.append(Violation(rule, "FA4", "O is stored without dividing by the row sum l: the output is sum_k "
                             "exp(s_k - m) v_k, not the softmax average", "divide O by l in the epilogue",
                             str(out.loc), _cex(rule, "output.store", str(out.loc), "O / l", "O")))
    if bad:
        return [], bad
    how = ("4-byte stores of each thread's own pairs" if out.store_mode == "direct" else
           f"16-byte stores after the quad exchange {out.shuffle}")
    return _ok(rule, f"{out.store_mode}: each of the 64 x {D} elements of each warpgroup's tile stored once at its "
               f"accumulator (row, d) by {how}, aligned; rows >= Lq masked; O / l", "enum", 64 * D)


# ------------------------------------------------------------------------------------------ pipelines


def _focus(program: Program, pipe: Any) -> Program:
    return dataclasses.replace(program, pipelines=(pipe,) + tuple(p for p in program.pipelines if p is not pipe))


def check_pipelines(program: Program) -> Outcome:
    """pipeline.tx_bytes, pipeline.arrivals, pipeline.release (G6) for each of Q, K and V (the GEMM
    rules of :mod:`argus_cutlass.verify.pipeline`, one pipeline at a time)."""
    from argus_cutlass.verify.pipeline import check_arrivals, check_release, check_tx_bytes

    x = parts(program)
    proofs: list[Proof] = []
    bad: list[Violation] = []
    for pipe in (x.pq, x.pk, x.pv_pipe):
        focused = _focus(program, pipe)
        for fn in (check_tx_bytes, check_arrivals, check_release):
            p, v = fn(focused)
            proofs += [dataclasses.replace(pr, summary=f"pipeline {pipe.name}: {pr.summary}") for pr in p]
            bad += [dataclasses.replace(vi, message=f"pipeline {pipe.name}: {vi.message}") for vi in v]
    return proofs, bad


def _consumer_ops(nbs: tuple[int, ...]) -> list[tuple[str, str]]:
    """The consumer's order over the three pipelines (``kernel_body.j2``), per tile of ``nb`` blocks."""
    ops: list[tuple[str, str]] = []
    for nb in nbs:
        if nb == 0:  # a published tile with no key (its O rows are zeros), or the end marker
            ops += [("wait", "q"), ("release", "q")]
            continue
        ops += [("wait", "q"), ("wait", "k"), ("release", "k")]
        for _ in range(nb - 1):
            ops += [("wait", "k"), ("wait", "v"), ("release", "k"), ("release", "v")]
        ops += [("release", "q"), ("wait", "v"), ("release", "v")]
    return ops


def _producer_ops(nbs: tuple[int, ...], stages: dict[str, int]) -> list[tuple[str, str]]:
    ops: list[tuple[str, str]] = []
    for nb in nbs:
        if nb == 0:  # the unit published with a plain arrive on Q's full barrier, no bytes
            ops.append(("publish", "q"))
            continue
        ops.append(("fill", "q"))
        for _ in range(nb):
            ops += [("fill", "k"), ("fill", "v")]
    for name in ("k", "v", "q"):
        ops += [("drain", name)] * stages[name]
    return ops


def _explore(pipes: dict[str, Any], real: dict[str, int], arrivers: int, nbs: tuple[int, ...]) -> tuple[int, Any]:
    """BFS over the interleavings of the producer and the consumers (as one: they run the same
    order) over the three pipelines. Violation: ``(kind, pipe, detail, trace)``.

    A state is packed into one ``bytes`` of int32 fields (the producer / consumer program counters; per
    pipeline the producer state count (fills and drains), the consumer waits and releases; per pipeline and
    stage the full / empty phases completed, the pending empty arrivals and the fill the stage holds: -1 none,
    else ``2 * fill + complete``), so the visited set hashes each state once, at C speed. The barrier
    semantics are :func:`~argus_cutlass.hw.semantics.pipeline_state` / ``wait_passes`` (memoised: pure)."""
    from array import array

    from argus_cutlass.hw.semantics import INT_OPS, pipeline_state, wait_passes

    names = ("q", "k", "v")
    stages = {n: pipes[n].stages for n in names}
    prod = [(kind, n, names.index(n)) for kind, n in _producer_ops(nbs, stages)]
    cons = [(kind, n, names.index(n)) for kind, n in _consumer_ops(nbs)]
    # field offsets: pc 0, cc 1, fills 2 + i, waits 5 + i, rels 8 + i; per-stage rows from 11
    fills0, waits0, rels0 = 2, 5, 8
    total = sum(stages[n] for n in names)
    base = [11 + sum(stages[m] for m in names[:i]) for i in range(3)]
    full0, empty0, pend0, buf0 = 0, total, 2 * total, 3 * total
    state_memo: dict[tuple, tuple] = {}
    pass_memo: dict[tuple, Any] = {}

    def state_of(cnt: int, wrap: int, phase0: int) -> tuple:
        key = (cnt, wrap, phase0)
        got = state_memo.get(key)
        if got is None:
            got = state_memo[key] = pipeline_state(INT_OPS, cnt, wrap, phase0)
        return got

    def passes(completions: int, parity: int) -> Any:
        key = (completions, parity)
        got = pass_memo.get(key)
        if got is None:
            got = pass_memo[key] = wait_passes(INT_OPS, completions, parity)
        return got

    def held(code: int) -> tuple[int, str] | None:
        return None if code < 0 else (code >> 1, "complete" if code & 1 else "partial")

    def edit(st: bytes, changes: tuple[tuple[int, int], ...]) -> bytes:
        out = bytearray(st)
        view = memoryview(out).cast("i")
        for at, value in changes:
            view[at] = value
        view.release()
        return bytes(out)

    init_fields = array("i", [0] * (11 + 3 * total) + [-1] * total)
    init = init_fields.tobytes()
    parent: dict[bytes, Any] = {init: None}
    queue = deque([init])
    while queue:
        st = queue.popleft()
        f = memoryview(st).cast("i")
        pc, cc = f[0], f[1]
        moves = []
        if pc < len(prod):
            kind, n, i = prod[pc]
            pp = pipes[n]
            cnt = f[fills0 + i]
            s, ph = state_of(cnt, pp.producer.wrap, pp.producer.start_phase)
            if not 0 <= s < stages[n]:
                return len(parent), ("range", n, f"producer stage index {s} of pipeline {n} outside its {stages[n]} "
                                     "stages", path_to(parent, st))
            row = base[i] + s
            if passes(f[empty0 + row], ph):
                ch = [(0, pc + 1), (fills0 + i, cnt + 1)]
                if kind == "fill":
                    if pp.tx_bytes <= real[n]:
                        ch.append((full0 + row, f[full0 + row] + 1))
                    ch.append((buf0 + row, 2 * cnt + (1 if pp.tx_bytes >= real[n] else 0)))
                elif kind == "publish":  # arrive without bytes: the phase completes, the slot holds the unit
                    ch += [(full0 + row, f[full0 + row] + 1), (buf0 + row, 2 * cnt + 1)]
                moves.append((edit(st, tuple(ch)), f"P:{kind} {n} #{cnt} stage {s} (wait empty parity {ph})"))
        if cc < len(cons):
            kind, n, i = cons[cc]
            pp = pipes[n]
            if kind == "wait":
                cnt = f[waits0 + i]
                s, ph = state_of(cnt, pp.consumer.wrap, pp.consumer.start_phase)
                if not 0 <= s < stages[n]:
                    return len(parent), ("range", n, f"consumer stage index {s} of pipeline {n} outside its "
                                         f"{stages[n]} stages", path_to(parent, st))
                row = base[i] + s
                if passes(f[full0 + row], ph):
                    have = held(f[buf0 + row])
                    if have != (cnt, "complete"):
                        got = "never written" if have is None else f"fill #{have[0]} ({have[1]})"
                        return len(parent), ("read", n, f"consumer read #{cnt} of pipeline {n} waits stage {s} "
                                             f"(parity {ph}) and finds {got}", path_to(parent, st)
                                             + (f"C:wait {n} #{cnt} stage {s}",))
                    moves.append((edit(st, ((1, cc + 1), (waits0 + i, cnt + 1))),
                                  f"C:wait {n} #{cnt} stage {s} parity {ph}"))
            else:
                cnt = f[rels0 + i]
                s, _ = state_of(cnt, pp.consumer.wrap, pp.consumer.start_phase)
                if not 0 <= s < stages[n]:
                    return len(parent), ("range", n, f"consumer releases stage index {s} of pipeline {n}",
                                         path_to(parent, st))
                row = base[i] + s
                p_s, e_s = f[pend0 + row] + arrivers, f[empty0 + row]
                while p_s >= pp.consumer_arrivals > 0:
                    p_s -= pp.consumer_arrivals
                    e_s += 1
                moves.append((edit(st, ((1, cc + 1), (rels0 + i, cnt + 1), (empty0 + row, e_s), (pend0 + row, p_s))),
                              f"C:release {n} #{cnt} stage {s}"))
        f.release()
        if not moves:
            if pc < len(prod) or cc < len(cons):
                who = (f"producer at {prod[pc][0]} {prod[pc][1]}" if pc < len(prod) else "producer done")
                who += f", consumers at {cons[cc][0]} {cons[cc][1]}" if cc < len(cons) else ", consumers done"
                return len(parent), ("deadlock", "", f"both sides wait forever ({who})", path_to(parent, st))
        for nxt, step in moves:
            if nxt not in parent:
                parent[nxt] = (st, step)
                queue.append(nxt)
    return len(parent), None


def check_protocol(program: Program) -> Outcome:
    """pipeline.protocol (G6): every interleaving of the producer (per tile: Q, then K and V of each
    kv block; the final drain of every stage) and the consumer warpgroups (per tile: Q; K of the
    first block; then K of block j with V of block j - 1; Q released; the last V), over two tiles of
    every pair of block counts in [1, S + 2], with the barrier semantics of PTX ISA 9.7.13.15 (a
    wait on parity P passes once the barrier's phase count has parity != P; the full barrier
    completes on its expected bytes, the empty one on its arrival count): each read finds its own
    fill completely landed, and nothing deadlocks."""
    from argus_cutlass.verify.pipeline import schedule_of, stage_box_bytes

    x = parts(program)
    pipes = {"q": x.pq, "k": x.pk, "v": x.pv_pipe}
    real = {n: sum(c * b for _, c, b in stage_box_bytes(program, pp)) for n, pp in pipes.items()}
    arrivers = schedule_of(program).arrivers
    top = max(x.pk.stages, x.pv_pipe.stages) + 2
    states = 0
    dynamic = program.schedule.decomposition == "dynamic"
    # static: both roles skip tiles without keys; dynamic: every tile goes through Q's stage (no
    # bytes when it has no key) and the walk ends with a published end marker (0 blocks)
    walks = [(*nbs, 0) if dynamic else nbs for nbs in itertools.product(range(0 if dynamic else 1, top + 1), repeat=2)]
    for nbs in walks:
        n, bad = _explore(pipes, real, arrivers, nbs)
        states += n
        if bad is None:
            continue
        kind, name, detail, trace = bad
        pp = pipes.get(name, x.pk)
        cex = _cex("pipeline.protocol", f"pipeline.{name or 'kv'}", str(pp.loc), "every read finds its own fill, "
                   "completely landed; no deadlock", detail, thread=_PRODUCER if kind == "range" and
                   detail.startswith("producer") else _consumer_thread(0, 0), params={"blocks_tile0": nbs[0],
                                                                                       "blocks_tile1": nbs[1]},
                   trace=tuple(trace[-24:]))
        return [], [Violation("pipeline.protocol", "G6", f"{kind} with kv blocks {nbs} in two tiles: {detail}",
                              "stage = fill index mod S on both sides, consumer parity (i / S) & 1, producer the "
                              "opposite, arrival counts = the releasing warpgroups", str(pp.loc), cex)]
    lo = 0 if dynamic else 1
    return _ok("pipeline.protocol", f"Q, K, V pipelines together: all interleavings of two tiles with {lo}..{top} kv "
               f"blocks each{' and the end marker published through Q' if dynamic else ''} ({states} states): every "
               "read sees its own fill complete, no deadlock", "enum", states)


def check_pipeline_smt(program: Program, timeout_ms: int) -> tuple[list[Proof], list[Violation], list[Unknown]]:
    """pipeline.state / stage / parity / carry (G6) by z3, per pipeline (the GEMM queries of
    :func:`argus_cutlass.verify.smt.check_pipeline_smt` on each pipeline's states)."""
    from argus_cutlass.verify.smt import check_pipeline_smt as gemm_smt

    x = parts(program)
    proofs, bad, unknown = [], [], []
    for pipe in (x.pq, x.pk, x.pv_pipe):
        p, v, u = gemm_smt(_focus(program, pipe), timeout_ms)
        proofs += [dataclasses.replace(pr, summary=f"pipeline {pipe.name}: {pr.summary}") for pr in p]
        bad += [dataclasses.replace(vi, message=f"pipeline {pipe.name}: {vi.message}") for vi in v]
        unknown += u
    return proofs, bad, unknown


# ---------------------------------------------------------------------------------------- schedule


def _units_taken(sch: Any, grid: int, tiles: int) -> list[int] | str:
    """The units the CTAs of ``grid`` take below ``tiles`` (with repeats), or why the walk never ends.

    Static: CTA ``c`` takes ``c, c + step, ...`` (``step = grid + step_delta``). Dynamic: CTA ``c``
    starts with unit ``c``, then takes ``grid + f`` where ``f`` is the value its
    ``atomicAdd(counter, d)`` returned (``d = 1 + step_delta``; the host zeroes the counter before
    the launch); whatever the order in which the CTAs fetch, the fetched values are ``0, d, 2d, ...``."""
    if sch.decomposition == "dynamic":
        d = 1 + sch.step_delta
        if d < 1:
            return f"atomicAdd(counter, {d}) never advances the counter: the CTAs never leave their walk"
        return list(range(min(grid, tiles))) + list(range(grid, tiles, d))
    step = grid + sch.step_delta
    taken: list[int] = []
    for c in range(grid):
        t, guard = c, 0
        while t < tiles and guard <= tiles:
            taken.append(t)
            t += step
            guard += 1
        if guard > tiles:
            return f"with {tiles} tiles and grid {grid}, CTA {c} never leaves its tile loop (step {step})"
    return taken


def check_schedule(program: Program) -> Outcome:
    """scheduler.bijection (G4): the units the CTAs take (:func:`_units_taken`: the static walk
    ``c, c + grid + step_delta, ...`` or the dynamic scheduler's ``[0, grid) u {grid + j (1 +
    step_delta)}``) and ``tile_of`` (unit -> ``(m_block, head, batch)``, longest first or in order)
    cover every tile exactly once, for every grid of 1..tiles + 1 CTAs and tile counts up to 3 x 2 x 2
    (enum); for all sizes when ``step_delta == 0`` (the units are then a partition of ``[0, tiles)``
    and ``tile_of`` is a bijection: ``m_block`` from ``t mod m_blocks`` reversed or not, head and batch
    from the quotient)."""
    sch = program.schedule
    rule = "scheduler.bijection"
    dynamic = sch.decomposition == "dynamic"
    walk = (f"dynamic scheduler, fetch step {1 + sch.step_delta}" if dynamic else f"step grid + {sch.step_delta}")
    fix = "fetch with atomicAdd(counter, 1)" if dynamic else "each CTA steps by gridDim.x"
    checked = 0
    for mbs, heads, batch in itertools.product((1, 2, 3), (1, 2), (1, 2)):
        tiles = mbs * heads * batch
        for grid in range(1, tiles + 2):
            taken = _units_taken(sch, grid, tiles)
            if isinstance(taken, str):
                return [], [Violation(rule, "G4", taken, fix, str(sch.loc),
                                      _cex(rule, "schedule", str(sch.loc), "a finite walk", taken,
                                           params={"tiles": tiles, "grid": grid, "step_delta": sch.step_delta}))]
            checked += 1
            seen: dict[tuple, int] = {}
            for u in taken:
                tile = sem.tile_of(u, mbs, heads, sch.longest_first)
                seen[tile] = seen.get(tile, 0) + 1
            every = {sem.tile_of(t, mbs, heads, sch.longest_first) for t in range(tiles)}
            missing = sorted(every - set(seen))
            twice = sorted(k for k, v in seen.items() if v > 1)
            if missing or twice or len(every) != tiles:
                what = (f"tile (m_block, head, batch) = {missing[0]} is never computed" if missing else
                        f"tile {twice[0]} is computed {seen[twice[0]]} times" if twice else "tile_of is not one-to-one")
                return [], [Violation(rule, "G4", f"{'dynamic scheduler, ' if dynamic else ''}{mbs} query blocks x "
                                      f"{heads} heads x {batch} batches on {grid} CTAs ({walk}): {what}", fix,
                                      str(sch.loc),
                                      _cex(rule, "schedule", str(sch.loc), "every tile once", what,
                                           params={"m_blocks": mbs, "heads": heads, "batch": batch, "grid": grid,
                                                   "step_delta": sch.step_delta}))]
    order = "longest first" if sch.longest_first else "in order"
    if dynamic:
        return _ok(rule, f"dynamic scheduler: units [0, grid) then grid + atomicAdd(counter, 1): every tile once for "
                   f"every fetch order ({checked} sizes enumerated; the fetched values are 0, 1, 2, ... whatever the "
                   f"order, so all sizes) ({order})", "enum", checked)
    return _ok(rule, f"every tile once for grids 1..tiles + 1 and tile counts up to 12 (enum); step = grid, so all "
               f"sizes ({order})", "enum", 12)


def check_barrier_extras(program: Program) -> Outcome:
    """barrier.named (B1), attention part: every consumer warpgroup ``g`` has its own barrier
    ``wg.<g>`` counting its 128 threads (``ready_v``'s sync after zeroing V rows), apart from the
    turn order's barriers."""
    x = parts(program)
    rule = "barrier.named"
    have = {b.name: b for b in program.barriers}
    turn = {b for o in program.orders for row in o.barriers for b in row}
    msgs = []
    for g in range(x.wgs):
        b = have.get(f"wg.{g}")
        if b is None:
            msgs.append(f"consumer warpgroup {g} has no barrier 'wg.{g}' for its own syncs")
        elif b.threads != WG:
            msgs.append(f"barrier 'wg.{g}' counts {b.threads} threads; warpgroup {g} alone syncs on it (128): its "
                        f"bar.sync {'never completes' if b.threads > WG else 'does not wait for the whole warpgroup'}")
        elif b.name in turn or any(have[t].id == b.id for t in turn if t in have):
            msgs.append(f"barrier 'wg.{g}' (id {b.id}) is also a turn-order barrier")
    if msgs:
        return [], [Violation(rule, _inv(rule), m, "one 128-thread barrier per consumer warpgroup", "",
                              _cex(rule, "named_barrier", "", "a 128-thread barrier per consumer warpgroup", m,
                                   engine="arith", thread=_consumer_thread(0, 0))) for m in msgs]
    return _ok(rule, f"{x.wgs} per-warpgroup barriers of 128 threads, apart from the turn order")


def check_prefetch(program: Program) -> Outcome:
    """tma.prefetch (FA7): the program param ``prefetch_next_q`` asks the producer to warm L2 with the
    next tile's Q. It must be a bool; the Q load it mirrors must be a per-tile load (``block_mode``
    ``m``, ``advance`` ``none``) of the caller's ``q``; the walk must have a next tile (a persistent or
    dynamic schedule). The prefetch writes no smem and arrives on no barrier (template
    ``prefetch_Q``), so no pipeline rule changes."""
    rule = "tma.prefetch"
    flag = program.param("prefetch_next_q", False)
    if flag is False:
        return _ok(rule, "no Q prefetch")
    x = parts(program)
    msgs = []
    if flag is not True:
        msgs.append(f"param prefetch_next_q = {flag!r}: a bool")
    if (x.lq.block_mode, x.lq.advance) != ("m", "none"):
        msgs.append(f"load {x.lq.name!r} (block_mode {x.lq.block_mode!r}, advance {x.lq.advance!r}) is not the "
                    "per-tile Q load the prefetch mirrors")
    if program.tensor(x.lq.src).binding != "q":
        msgs.append(f"load {x.lq.name!r} reads {x.lq.src!r}, not the caller's q")
    if program.schedule.decomposition not in ("persistent", "dynamic"):
        msgs.append(f"schedule {program.schedule.decomposition!r} has no next tile to prefetch")
    if msgs:
        return [], [Violation(rule, _inv(rule), m, "prefetch the Q of the walk's next tile through the Q load",
                              str(x.lq.loc), _cex(rule, "producer.prefetch_Q", str(x.lq.loc),
                                                  "the next tile's Q through the Q load", m, engine="arith",
                                                  thread=_PRODUCER)) for m in msgs]
    return _ok(rule, f"L2 prefetch of the next tile's Q through {x.lq.name!r} ({program.schedule.decomposition} walk); "
               "no smem write, no barrier")


def check_kv_fill(program: Program) -> Outcome:
    """kv.coverage (FA6), the residue half: the K and V tensor maps (the kv loop's ``oob_fill``) fill
    box rows past the key length with zeros (``CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE``). The last partial
    kv block's rows past Lk are masked to P = 0, but ``0 * NaN`` is NaN: with the NaN fill
    (``..._NAN_REQUEST_ZERO_FMA``, which wgmma does not honour: the GEMM mutant ``oob_fill_nan`` went
    wrong on the H200) every O row of a tile whose key length is not a multiple of the kv block reads
    NaN through P V. CUDA driver API ``CUtensorMapFloatOOBfill``; PTX ISA 9.7.9.25."""
    rule = "kv.coverage"
    loop = parts(program).loop
    if loop.oob_fill == "zero":
        return _ok(rule, "K and V boxes past the key length are zero-filled: masked keys add 0 * 0 through P V")
    x = parts(program)
    lk = x.tile_n + 1
    msg = (f"kv loop oob_fill {loop.oob_fill!r}: with Lk = {lk} the last kv block's V rows past key {lk - 1} hold "
           f"{loop.oob_fill}; P = 0 there, but 0 * NaN = NaN reaches O(0, 0) through the PV GEMM")
    cex = _cex(rule, "consumer.gemm_pv", str(loop.loc), "V(key >= Lk) = 0, P(0, key) * V(key, 0) = 0",
               f"V(key >= Lk) = {loop.oob_fill}, P(0, key) * V(key, 0) = 0 * NaN = NaN", engine="arith",
               element={"tensor": "V", "key": lk, "d": 0}, params={"Lk": lk, "tile_n": x.tile_n})
    return [], [Violation(rule, _inv(rule), msg, "encode the K and V tensor maps with zero fill (oob_fill 'zero')",
                          str(loop.loc), cex)]


# -------------------------------------------------------------------------------------------- driver


#: what each check establishes: rule -> description (the report's obligations)
OBLIGATIONS = {
    "tma.image": "TMA images are bijective onto their stages",
    "gmma.descriptor": "every wgmma descriptor decodes to its operand's read view",
    "mma.operand_identity": "Q, K, V are the caller's q, k, v; slots read their own rows / keys",
    "mma.k_agreement": "Q's d == K's d at every QK slot; P's key == V's key at every PV slot",
    "head.map": "Q and O at the query head, K and V at its kv head",
    "mask.exact": "the kernel masks exactly what the specification masks (all lengths < 2^bound_bits)",
    "kv.coverage": "every key the specification attends is read once and kept",
    "softmax.online": "the online softmax with its rescale computes softmax(scale S) V and the LSE",
    "output.row": "O / l stored once at each accumulator element's (row, d) through the store map (direct or the "
                  "quad16 lane exchange), the LSE at its row, rows >= Lq masked",
    "pipeline.protocol": "Q, K, V pipelines: every read sees its own complete fill, no deadlock",
    "scheduler.bijection": "every (m_block, head, batch) tile computed once",
    "scheduler.slot_release": "the dynamic scheduler's unit slot is read by every consumer thread before its stage's "
                          "release (a per-warpgroup barrier between)",
    "tma.prefetch": "an L2 prefetch (if any) warms the walk's next Q through the Q load, writing nothing",
}


def _kv_stages(program: Program) -> int:
    """The K / V pipelines' stage count (the deeper of the two)."""
    x = parts(program)
    return max(x.pk.stages, x.pv_pipe.stages)


def _stage_cap(program: Program, notes: list[str]) -> int | None:
    """The stage cap of the data-flow enumeration of a program that breaks ``smem.capacity``
    (:func:`argus_cutlass.verify.absint.enumerated_stages` of :func:`stages_that_fit`), with a note
    naming it; None (every stage) when that is all of them or the buffers cannot be measured."""
    from argus_cutlass.verify.absint import enumerated_stages, stage_note

    try:
        stages, fit = _kv_stages(program), stages_that_fit(program)
    except Exception:  # noqa: BLE001 - a malformed program: check_resources already reports it
        return None
    cap = enumerated_stages(stages, fit)
    if cap is not None:
        notes.append(stage_note(stages, cap, fit, "tma.image, the tag assertions and gmma.descriptor"))
    return cap


def verify_attention(program: Program, *, smt: bool = True, smt_timeout_ms: int | None = None) -> VerificationReport:
    """Check every attention rule on ``program``; never raises for a bad program.

    Args:
        program: ``argus_cutlass.kernels.attention.program.build_program(cfg)``, possibly edited.
        smt: run the SMT tier (mask and coverage for all lengths, pipeline states).
        smt_timeout_ms: per-query z3 timeout (default ``settings().smt_timeout_ms``).

    A program that breaks ``smem.capacity`` cannot launch: its ``pipeline.protocol`` interleavings
    (their states grow faster than the cube of the stage count: 14 s at 16 stages) are not
    enumerated, and its TMA images, tag assertions and descriptors cover the first
    ``max(2, stages that fit 227 KiB)`` stages (:func:`stages_that_fit`,
    :func:`argus_cutlass.verify.absint.enumerated_stages`), each said in a note; a program that fits
    is enumerated over every stage.

    Raises:
        argus_cutlass.errors.ToolchainError: ``smt`` is asked for and z3 is not installed.
    """
    from argus_cutlass.verify.absint import check_tma_image
    from argus_cutlass.verify.barriers import check_named_barriers, check_slot_release, check_turn_orders
    from argus_cutlass.verify.fragments import check_fragments
    from argus_cutlass.verify.run import start

    t0 = time.perf_counter()
    notes: list[str] = []
    name, obligations, run = start(program, smt)
    try:
        parts(program)
    except (KeyError, AttributeError, IndexError, TypeError) as exc:
        run.violations.append(Violation("dsl.program", "DSL", f"the attention program is incomplete: {exc}",
                                        "build it with argus_cutlass.kernels.attention.program.build_program"))
        return report(name, obligations, run, ["data-flow checks not run: the program is incomplete"], t0)
    if program.family != "attention":
        run.violations.append(Violation("dsl.program", "DSL", f"family {program.family!r}: verify_attention checks "
                                        "attention programs", ""))
    for rule, text in OBLIGATIONS.items():
        obligations.append(Obligation(rule, _inv(rule), text))
    _, res_bad = run.add("arith", "smem.capacity", check_resources, program)
    shapes_ok = not any(v.rule in ("gmma.n", "gmma.m_tile", "mma.major", "tma.box_extent", "smem.alignment")
                        for v in res_bad)
    fits = not any(v.rule == "smem.capacity" for v in res_bad)
    cap = None if fits else _stage_cap(program, notes)
    run.add("enum", "tma.image", check_tma_image, program, cap)
    run.add("arith", "mma.operand_identity", check_bindings, program)
    _, struct_bad = run.add("arith", "mma.tile", check_structure, program)
    shapes_ok = shapes_ok and not struct_bad
    if shapes_ok:
        run.add("enum", "gmma.descriptor", check_descriptors, program, cap)
        run.add("enum", "mma.k_agreement", check_tags, program, cap)
        run.add("enum", "fragment.convert", check_fragments, program)
    else:
        notes.append("descriptor, tag and fragment checks not run: shape rules failed")
        for rule in ("gmma.descriptor", "mma.k_agreement", "fragment.convert"):
            # fragment.convert has no OBLIGATIONS line (check_fragments states its own rules): its text here
            run.skip(rule, OBLIGATIONS.get(rule, "register fragments (RS operands, conversions, row reductions) keep "
                     "their tags"), "the shape rules (gmma.n, gmma.m_tile, mma.major, tma.box_extent, "
                     "smem.alignment, mma.tile, loop.step) failed", _inv(rule))
    _, enum_bad = run.add("enum", "mask.exact", check_mask, program)
    run.add("arith", "kv.coverage", check_kv_fill, program)
    run.add("enum", "softmax.online", check_softmax, program)
    run.add("enum", "output.row", check_output, program)
    run.add("arith", "pipeline.arrivals", check_pipelines, program)
    if fits:
        run.add("enum", "pipeline.protocol", check_protocol, program)
    else:
        notes.append(f"pipeline.protocol not enumerated: the program's {_kv_stages(program)}-stage K / V pipelines do "
                     "not fit shared memory (smem.capacity), so it cannot launch")
        run.skip("pipeline.protocol", OBLIGATIONS["pipeline.protocol"], "the program does not fit shared memory "
                 "(smem.capacity failed): it cannot launch", _inv("pipeline.protocol"))
    run.add("enum", "scheduler.bijection", check_schedule, program)
    run.add("arith", "scheduler.slot_release", check_slot_release, program)
    run.add("arith", "tma.prefetch", check_prefetch, program)
    run.add("arith", "barrier.named", check_named_barriers, program)
    run.add("arith", "barrier.named", check_barrier_extras, program)
    if program.orders:
        run.add("enum", "turn.order", check_turn_orders, program)
    if smt:
        from argus_cutlass.settings import settings

        timeout = settings().smt_timeout_ms if smt_timeout_ms is None else int(smt_timeout_ms)
        if not enum_bad:
            run.add("smt", "mask.exact", check_mask_smt, program, timeout)
        run.add("smt", "pipeline.state", check_pipeline_smt, program, timeout)
    else:
        notes.append("SMT tier off: the mask is checked on boundary lengths only, pipeline states for small counts")
        if not enum_bad:
            for rule, what in (("kv.coverage", "spec => kernel"), ("mask.exact", "kernel => spec")):
                run.skip(rule, f"mask equality ({what}) for all lengths < 2^bound_bits (SMT; the enumeration "
                         "covers boundary lengths)", invariant=_inv(rule))
        for rule in ("pipeline.state", "pipeline.stage", "pipeline.parity", "pipeline.carry"):
            run.skip(rule, f"{rule} of the Q, K and V pipelines for all iteration counts (SMT; the enumeration "
                     "covers small counts)", invariant=_inv(rule))
    return report(name, obligations, run, notes, t0)
