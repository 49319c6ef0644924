"""Verifier of tile programs (:class:`~argus_cutlass.dsl.ir.Program`), in three tiers.

* **algebraic** (``arith``): closed-form resource rules (:mod:`.rules`), the program's own
  consistency relations (:mod:`.relations`), pipeline counts;
* **enumeration** (``enum``): tag images and tag assertions on numpy arrays (:mod:`.absint`),
  GMMA descriptors as the kernel forms them, multicast deliveries (:mod:`.multicast`), k coverage
  for small K, exhaustive pipeline interleavings (:mod:`.pipeline`), the epilogue's staging and
  stores (:mod:`.staging`, :mod:`.output`), the tile scheduler (:mod:`.decomposition`), the
  any-alignment path's operand staging copies (:mod:`.stage_copy`, G9);
* **SMT** (``smt``): z3 proofs for symbolic K and all iteration counts below ``2^bound_bits``,
  and a bit-vector cross-check of the operand maps (:mod:`.smt`, lazy z3, timeout per query).

Both data tiers run the same hardware semantics (:mod:`argus_cutlass.hw.semantics`). The checker
reads **only the program**: the same object the templates print. :func:`verify_gemm` returns a
:class:`VerificationReport` and never raises on a program it is given (a check that cannot run
on it becomes a violation naming the check's rule); :func:`check_gemm` raises
:class:`VerificationError` on violations. An ``unknown`` (an SMT timeout, a case a model does
not cover) is never a proof: ``report.complete`` is False and ``report.unknowns`` names it. With
the SMT tier off, what it would have checked is recorded as ``report.skipped`` (never a proof
either, but the report can be complete); an obligation with no outcome at all is
``report.undecided`` and makes the report incomplete.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from argus_cutlass.dsl.ir import Program
from argus_cutlass.errors import VerificationError
from argus_cutlass.verify.absint import (
    check_acc_sets,
    check_assertion,
    check_k_agreement,
    check_k_coverage,
    check_tma_image,
    tag_image,
)
from argus_cutlass.verify.catalogue import Invariant, all_invariants, invariant_of, load_invariants
from argus_cutlass.verify.report import (
    Counterexample,
    Obligation,
    Proof,
    Skipped,
    Unknown,
    VerificationReport,
    Violation,
)
from argus_cutlass.verify.rules import RULES, SHAPE_RULES
from argus_cutlass.verify.run import Run as _Run
from argus_cutlass.verify.run import node_text as _text
from argus_cutlass.verify.run import report as _report

__all__ = [
    "RULES",
    "Counterexample",
    "Invariant",
    "Obligation",
    "Proof",
    "Skipped",
    "Unknown",
    "VerificationReport",
    "Violation",
    "all_invariants",
    "check_acc_sets",
    "check_assertion",
    "check_gemm",
    "check_k_agreement",
    "check_k_coverage",
    "check_tma_image",
    "clear_caches",
    "invariant_of",
    "load_invariants",
    "tag_image",
    "verify_gemm",
]

#: obligations of the G3/G6 checks: rule -> (invariant, description)
_PROTOCOL_OBLIGATIONS = {
    "k.coverage": ("G3", "every k in [0, K) is summed exactly once (enum: K <= 2 tile_k + 1; smt: K < 2^bound_bits)"),
    "k.acc_sets": ("G3", "the k loop's accumulator sets: each started once with ScaleOut::Zero, each added into D once"),
    "residue.load": ("G8", "TMA fills k >= K with zeros"),
    "pipeline.tx_bytes": ("G6", "expect_tx == bytes of the TMA boxes a CTA receives per stage"),
    "pipeline.arrivals": ("G6", "barrier arrival counts == the arrivals the kernel makes (per schedule and cluster)"),
    "pipeline.release": ("G6", "a stage is released only after the wgmma batch that read it retired"),
    "pipeline.protocol": ("G6", "exhaustive producer/consumer interleavings for small bounds, per schedule"),
    "pipeline.state": ("G6", "PipelineState closed form == operator++ (smt)"),
    "pipeline.stage": ("G6", "read stage == write stage == i mod S (smt)"),
    "pipeline.parity": ("G6", "consumer waits (i/S)&1, producer waits the release of i-S (smt)"),
    "pipeline.carry": ("G6", "pipeline state carried across persistent tiles (smt)"),
}

#: obligations of the output checks (G2, G4, G8): rule -> (invariant, description)
_OUTPUT_OBLIGATIONS = {
    "output.bijection": ("G4", "accumulator registers cover the output tile exactly once"),
    "epilogue.coordinate": ("G2", "each register is stored at its accumulator's (m, n)"),
    "residue.store": ("G8", "no store leaves D for any M/N residue"),
}

#: reasons of the Skipped records of checks not run because another rule already failed
SKIP_SHAPES = "the shape rules (gmma.n, gmma.m_tile, stages) failed"
SKIP_STAGE = ("one stage of the operand buffers exceeds shared memory (smem.capacity failed): no pipeline of this "
              "tile can launch")
SKIP_FIT = "the program does not fit shared memory (smem.capacity failed): it cannot launch"
SKIP_REGISTERS = ("the tile's fp32 accumulators exceed an SM's registers (registers failed): no kernel of this tile "
                  "can hold them")

#: nodes every GEMM check reads; a program without one gets a single dsl.program violation
_GEMM_NODES = ("pipeline", "kloop", "mma", "epilogue", "source", "staging", "schedule", "launch")


def _missing_nodes(program: Program) -> list[str]:
    missing = [n for n in _GEMM_NODES if getattr(program, n, None) is None]
    if not program.stores:
        missing.append("stores")
    for op in ("A", "B"):
        try:
            program.read(op)
        except KeyError:
            missing.append(f"read[{op}]")
    for kind in ("producer", "consumer"):
        try:
            program.role(kind)
        except KeyError:
            missing.append(f"role[{kind}]")
    return missing


def verify_gemm(program: Program, *, smt: bool = True, smt_timeout_ms: int | None = None) -> VerificationReport:
    """Check every rule on ``program`` and return the report (never raises for a bad program).

    Args:
        program: the GEMM's DSL program (``argus_cutlass.kernels.gemm.program.build_program(cfg)``,
            possibly edited with ``Program.replace_node``). Nothing else is read.
        smt: run the SMT tier (z3; symbolic K and iteration counts, operand cross-check).
        smt_timeout_ms: per-query z3 timeout (default ``settings().smt_timeout_ms``); a query
            that times out is reported as ``unknown``, never as a proof.

    Resource rules and relations all run and report every violation; the data-flow enumeration
    and the SMT operand cross-check run when the shape rules (``gmma.n``, ``gmma.m_tile``,
    ``stages``) hold. ``k.coverage``'s enumeration violation is replaced by the SMT one (which
    carries a counterexample record) when the SMT tier runs. A program that breaks
    ``smem.capacity`` cannot launch: its ``pipeline.protocol`` interleavings are not enumerated, and
    its TMA images, tag assertions and descriptors are enumerated over the first
    ``max(2, stages that fit 227 KiB)`` stages only
    (:func:`argus_cutlass.verify.absint.enumerated_stages`), each said in a note; a program that
    fits is enumerated over every stage. Domains no buildable tile has are not enumerated (a note
    each): the operand tile when one stage alone exceeds 227 KiB (:func:`_stage_holds`), every
    accumulator when the tile's exceed an SM's 65536 registers (:func:`_tile_holds`).

    Raises:
        argus_cutlass.errors.ToolchainError: ``smt`` is asked for and z3 is not installed.
    """
    from argus_cutlass.verify.run import start

    t0 = time.perf_counter()
    notes: list[str] = []
    name, obligations, run = start(program, smt)
    missing = _missing_nodes(program)
    if missing:
        run.violations.append(Violation("dsl.program", "DSL", f"the GEMM program has no {', '.join(missing)}: the "
                                        "verifier has nothing to check there",
                                        "build the program with argus_cutlass.kernels.gemm.program.build_program"))
        notes.append(f"data-flow checks not run: missing nodes {missing}")
        return _report(name, obligations, run, notes, t0)
    failed: set[str] = set()
    for rule, fn in RULES.items():
        obligations.append(Obligation(rule, invariant_of(rule), " ".join((fn.__doc__ or "").split("\n\n")[0].split())))
        _, v = run.add("arith", rule, fn, program)
        if v:
            failed.add(rule)
    shapes_ok = not failed.intersection(SHAPE_RULES)
    cap, operands_ok = None, True
    if "smem.capacity" in failed:
        operands_ok = _stage_holds(program, notes)
        cap = _stage_cap(program, notes) if operands_ok else None
    accumulators_ok = "registers" not in failed or _tile_holds(program, notes)
    _mainloop(run, program, obligations, notes, shapes_ok, cap, operands_ok)
    _protocol(run, program, obligations, notes, smt=smt, shapes_ok=shapes_ok, timeout_ms=smt_timeout_ms,
              fits="smem.capacity" not in failed, operands_ok=operands_ok)
    if shapes_ok:
        _output(run, program, obligations, accumulators_ok)
    else:
        notes.append(f"output checks (G2, G4, G8) not run: shape rules failed ({sorted(failed & set(SHAPE_RULES))})")
    _family_checks(run, program, obligations, notes)
    if program.stage_copies:
        from argus_cutlass.verify.stage_copy import STAGE_RULES, check_stage_copies

        copies = program.stage_copies
        applies = {"stage.align": True, "stage.cover": any(c.direction == "in" for c in copies),
                   "stage.zero": any(c.direction == "in" and c.operand != "D" for c in copies),
                   "stage.writeback": any(c.direction == "out" or c.operand == "D" for c in copies)}
        for rule, text in STAGE_RULES.items():
            if applies[rule]:
                obligations.append(Obligation(rule, "G9", text, str(copies[0].loc)))
        run.add("enum", "stage.cover", check_stage_copies, program)
    return _report(name, obligations, run, notes, t0)


def _stage_cap(program: Program, notes: list[str]) -> int | None:
    """The stage cap of the data-flow enumeration of a program that breaks ``smem.capacity``
    (:func:`argus_cutlass.verify.absint.enumerated_stages`: the deepest pipeline of its buffers that
    fits, at least 2), with a note naming it; None (every stage) when that is all of them or the
    program's buffers cannot be measured (the rule's own violation says why)."""
    from argus_cutlass.verify.absint import enumerated_stages, stage_note
    from argus_cutlass.verify.rules import stages_that_fit

    try:
        stages, fit = int(program.pipeline.stages), stages_that_fit(program)
    except Exception:  # noqa: BLE001 - a malformed program: smem.capacity already reports it
        return None
    cap = enumerated_stages(stages, fit)
    if cap is not None:
        notes.append(stage_note(stages, cap, fit, "tma.image, the tag assertions and gmma.descriptor"))
    return cap


def _stage_holds(program: Program, notes: list[str]) -> bool:
    """Whether one stage of the mainloop pipeline's buffers fits the 227 KiB of dynamic shared memory
    of an sm_90 CTA (CUDA C++ Programming Guide, compute capability 9.0; rule ``smem.capacity``).
    When it does not, no pipeline depth of this tile can launch, and the enumerations whose domain is
    the operand tile (TMA images, tag assertions, descriptors, k coverage for K <= 2 tile_k + 1: time
    and memory grow with tile x tile_k, over a minute for tile_k = 65536) are not run; a note says so. Any stage that fits bounds those domains by the shared memory itself."""
    from argus_cutlass.plan.resources import SMEM_LIMIT_BYTES, smem_breakdown

    try:
        sb = smem_breakdown(program)
    except Exception:  # noqa: BLE001 - a malformed program: smem.capacity already reports it
        return True
    if sb.per_stage <= SMEM_LIMIT_BYTES:
        return True
    parts = " + ".join(f"{k} {v}" for k, v in sb.stage_bytes.items())
    notes.append(f"tma.image, the tag assertions, gmma.descriptor and k.coverage (enumeration) not run: one stage "
                 f"of the pipeline's buffers ({parts} = {sb.per_stage} bytes) exceeds the {SMEM_LIMIT_BYTES} bytes "
                 "of shared memory a CTA can have (smem.capacity), so no pipeline of this tile can launch")
    return False


def _tile_holds(program: Program, notes: list[str]) -> bool:
    """Whether the CTA tile's fp32 accumulators (``tile_m x tile_n``, one 32-bit register each, PTX ISA
    9.7.15.4) fit the 65536 registers of an SM, the most one CTA can hold (CUDA C++ Programming Guide,
    compute capability 9.0; rule ``registers``). When they do not, no kernel of this tile can hold its
    accumulators, and the output checks that enumerate every accumulator (G2, G4, G8: its register,
    staging and store; time linear in the tile, 20 s for a 65536-row tile) are not run; a note says so."""
    from argus_cutlass.plan.resources import REGISTERS_PER_SM

    try:
        acc = int(program.mma.tile_m) * int(program.mma.op.n)
    except Exception:  # noqa: BLE001 - a malformed program: the rules report it
        return True
    if acc <= REGISTERS_PER_SM:
        return True
    notes.append(f"epilogue.coordinate, epilogue.source, epilogue.tma_store, epilogue.stmatrix and "
                 f"scheduler.cluster_reduce not run: the {program.mma.tile_m} x {program.mma.op.n} tile's {acc} fp32 "
                 f"accumulators exceed the {REGISTERS_PER_SM} registers of an SM (registers), so no kernel of this "
                 "tile can hold them")
    return False


def _mainloop(run: _Run, program: Program, obligations: list[Obligation], notes: list[str], shapes_ok: bool,
              cap: int | None = None, operands_ok: bool = True) -> None:
    """G5 (TMA image, multicast), G1 (tag assertions, descriptors); ``cap``: the stages the data-flow
    enumeration covers (:func:`_stage_cap`; None: all); ``operands_ok``: False when one stage of the
    buffers cannot fit (:func:`_stage_holds`): the TMA images, tag assertions and descriptors are
    not enumerated."""
    from argus_cutlass.verify.absint import check_descriptors
    from argus_cutlass.verify.multicast import check_multicast, needs_multicast_check

    obligations.append(Obligation("tma.image", "G5", "TMA images are bijective onto their stages"))
    if operands_ok:
        run.add("enum", "tma.image", check_tma_image, program, cap)
    else:
        run.skip("tma.image", "TMA images are bijective onto their stages", SKIP_STAGE, "G5")
    if needs_multicast_check(program):
        obligations.append(Obligation("tma.multicast", "G5", "every CTA of the cluster receives each box of its "
                                      "stage once, from its own block; TMA op kind matches the multicast"))
        run.add("enum", "tma.multicast", check_multicast, program)
    from argus_cutlass.verify.absint import check_bindings

    obligations.append(Obligation("mma.operand_identity", "G1", "gA / gB are bound to the caller's operands in "
                                  "their storage order"))
    run.add("arith", "mma.operand_identity", check_bindings, program)
    for a in program.assertions:
        obligations.append(Obligation(a.rule, a.invariant, _text(a), str(a.loc)))
        if not shapes_ok:
            notes.append(f"{a.rule} ({a}) not checked: shape rules failed")
            run.skip(a.rule, _text(a), SKIP_SHAPES, a.invariant)
            continue
        if operands_ok:
            run.add("enum", a.rule, check_assertion, program, a, cap)
        else:
            run.skip(a.rule, _text(a), SKIP_STAGE, a.invariant)
    if shapes_ok:
        obligations.append(Obligation("gmma.descriptor", "G1",
                                      "every wgmma descriptor the kernel forms decodes to its operand's read view"))
        if operands_ok:
            run.add("enum", "gmma.descriptor", check_descriptors, program, cap)
        else:
            run.skip("gmma.descriptor", "every wgmma descriptor decodes to its operand's read view", SKIP_STAGE, "G1")


def _protocol(run: _Run, program: Program, obligations: list[Obligation], notes: list[str], *, smt: bool,
              shapes_ok: bool, timeout_ms: int | None, fits: bool, operands_ok: bool = True) -> None:
    """G3, G8 (load side) and G6 (enumeration, then SMT), and the SMT cross-check of G1/G5. ``fits``: rule
    ``smem.capacity`` held; when it did not, the kernel cannot launch and ``pipeline.protocol``'s enumeration
    (its states grow with the cube of the stage count: minutes at 500 stages) is not run, said in a note.
    ``operands_ok``: False when one stage cannot fit (:func:`_stage_holds`, its note): ``k.coverage``'s
    enumeration (K up to 2 tile_k + 1) is not run either."""
    from argus_cutlass.verify.absint import check_residue_load
    from argus_cutlass.verify.pipeline import check_arrivals, check_protocol, check_release, check_tx_bytes

    for rule, (inv, text) in _PROTOCOL_OBLIGATIONS.items():
        obligations.append(Obligation(rule, inv, text))
    _, enum_k_bad = run.add("enum", "k.coverage", check_k_coverage, program) if operands_ok else ([], [])
    if not operands_ok:
        run.skip("k.coverage", "every k in [0, K) summed exactly once for K <= 2 tile_k + 1 (enumeration)", SKIP_STAGE,
                 "G3")
    run.add("enum", "k.acc_sets", check_acc_sets, program)
    run.add("arith", "residue.load", check_residue_load, program)
    run.add("arith", "pipeline.tx_bytes", check_tx_bytes, program)
    run.add("arith", "pipeline.arrivals", check_arrivals, program)
    run.add("arith", "pipeline.release", check_release, program)
    if fits:
        run.add("enum", "pipeline.protocol", check_protocol, program)
    else:
        notes.append(f"pipeline.protocol not enumerated: the {program.pipeline.stages}-stage program does not fit "
                     "shared memory (smem.capacity), so it cannot launch")
        run.skip("pipeline.protocol", _PROTOCOL_OBLIGATIONS["pipeline.protocol"][1], SKIP_FIT, "G6")
    if not smt:
        notes.append("SMT tier off: k.coverage checked for K <= 2 tile_k + 1 only; pipeline for small bounds only")
        run.skip("k.coverage", "every k in [0, K) summed exactly once for all K < 2^bound_bits (SMT; the enumeration "
                 "covers K <= 2 tile_k + 1)", invariant="G3")
        for rule in ("pipeline.state", "pipeline.stage", "pipeline.parity", "pipeline.carry"):
            inv, text = _PROTOCOL_OBLIGATIONS[rule]
            run.skip(rule, f"{text.removesuffix(' (smt)')}, for all iteration counts (SMT)", invariant=inv)
        enum_bad = {v.rule for v in run.violations}
        if shapes_ok and not enum_bad & {"tma.image", "mma.k_agreement", "mma.operand_identity"}:
            run.skip("mma.k_agreement", "bit-vector cross-check of the operand maps (SMT; the enumeration tier "
                     "checked the tags)", invariant="G1")
        return
    from argus_cutlass.settings import settings
    from argus_cutlass.verify import smt as smt_tier

    timeout = settings().smt_timeout_ms if timeout_ms is None else int(timeout_ms)
    _, v = run.add("smt", "k.coverage", smt_tier.check_k_coverage_smt, program, timeout)
    if v and enum_k_bad:
        run.violations = [x for x in run.violations if x not in enum_k_bad]
    run.add("smt", "pipeline.state", smt_tier.check_pipeline_smt, program, timeout)
    if shapes_ok:
        enum_bad = {v.rule for v in run.violations}
        if enum_bad & {"tma.image", "mma.k_agreement", "mma.operand_identity"}:
            notes.append("SMT operand cross-check skipped: the enumeration tier already found a violation")
        else:
            run.add("smt", "mma.k_agreement", smt_tier.check_operands_smt, program, timeout)


def _output(run: _Run, program: Program, obligations: list[Obligation], accumulators_ok: bool = True) -> None:
    """G7 on the MMA reads, G2/G4/G8 on the epilogue, G4 on the persistent tile scheduler (and the
    clusterk reduction). ``accumulators_ok``: False when the tile's accumulators exceed the register
    file (:func:`_tile_holds`, its note): the checks that enumerate every accumulator (the epilogue's
    coordinate, source, staging and stores, the clusterk reduction) are not run."""
    from argus_cutlass.verify.output import (
        check_cluster_reduce,
        check_epilogue,
        check_schedule,
        check_schedule_all_sizes,
        check_source,
        check_tma_store,
        check_uniformity,
    )
    from argus_cutlass.verify.staging import check_stage_reuse, check_staging

    obligations.append(Obligation("warpgroup.uniform", "G7",
                                  "all 4 warps of a warpgroup pass wgmma the same stage's descriptor"))
    run.add("enum", "warpgroup.uniform", check_uniformity, program)
    e = program.epilogue
    for rule, (inv, text) in _OUTPUT_OBLIGATIONS.items():
        obligations.append(Obligation(rule, inv, text, str(e.loc)))
    if accumulators_ok:
        run.add("enum", "epilogue.coordinate", check_epilogue, program)
    else:
        for rule in ("epilogue.coordinate", "output.bijection", "residue.store"):
            _skip_obligation(run, obligations, rule, SKIP_REGISTERS)
    src = program.source
    grouped = program.family == "moe"   # an MoE grouped GEMM: out = acc, C never read (output._check_grouped_source)
    obligations.append(Obligation("epilogue.source", "G2", "out = acc: alpha 1, beta 0, C never read" if grouped
                                  else "beta * C reads C(m, n) at each accumulator's (m, n)", str(src.loc)))
    obligations.append(Obligation("residue.source", "G8", "no C load to mask (C never read)" if grouped
                                  else "C loads are masked to M x N", str(src.loc)))
    if accumulators_ok:
        run.add("enum", "epilogue.source", check_source, program)
    else:
        for rule in ("epilogue.source", "residue.source"):
            _skip_obligation(run, obligations, rule, SKIP_REGISTERS)
    obligations.append(Obligation("epilogue.tma_store", "G2",
                                  "the TMA store sends each staged accumulator to its own (m, n)",
                                  str(program.stores[0].loc)))
    if accumulators_ok:
        run.add("enum", "epilogue.tma_store", check_tma_store, program)
    else:
        _skip_obligation(run, obligations, "epilogue.tma_store", SKIP_REGISTERS)
    where = str(program.staging.loc)
    obligations.append(Obligation("epilogue.stmatrix", "G2",
                                  "each accumulator register is staged at sD(m, n, stage) by the epilogue's "
                                  "stmatrix / st.shared", where))
    obligations.append(Obligation("epilogue.stage_reuse", "G6",
                                  "a staging stage is rewritten only after its TMA store finished reading it", where))
    if accumulators_ok:
        run.add("enum", "epilogue.stmatrix", check_staging, program)
    else:
        _skip_obligation(run, obligations, "epilogue.stmatrix", SKIP_REGISTERS)
    run.add("arith", "epilogue.stage_reuse", check_stage_reuse, program)
    obligations.append(Obligation("scheduler.bijection", "G4",
                                  "every work unit has one CTA and one output tile (enum: units <= 48; "
                                  "arith: all sizes)", str(program.schedule.loc)))
    _, bad = run.add("enum", "scheduler.bijection", check_schedule, program)
    if not bad:
        run.add("arith", "scheduler.bijection", check_schedule_all_sizes, program)
    if program.schedule.decomposition == "clusterk":   # the cluster's partial sums meet in rank 0's smem
        obligations.append(Obligation("scheduler.cluster_reduce", "G4",
                                      "rank 0 adds every other rank's partial sum once, none undefined, each read "
                                      "after its write and before its owner exits; the reduce buffer holds the "
                                      "tile", str(program.schedule.loc)))
        if accumulators_ok:
            run.add("enum", "scheduler.cluster_reduce", check_cluster_reduce, program)
        else:
            _skip_obligation(run, obligations, "scheduler.cluster_reduce", SKIP_REGISTERS)


def _skip_obligation(run: _Run, obligations: list[Obligation], rule: str, reason: str) -> None:
    """Record the registered obligation of ``rule`` (its latest) as skipped, for ``reason``."""
    o = next(o for o in reversed(obligations) if o.rule == rule)
    run.skip(rule, o.description, reason, o.invariant)


def _family_checks(run: _Run, program: Program, obligations: list[Obligation], notes: list[str]) -> None:
    """Named barriers, turn orders and register fragments (``verify/barriers.py``,
    ``verify/fragments.py``), where the program has such nodes. Each returns ``(proofs, violations)``."""
    import importlib

    fragments = bool(program.converts or program.reductions or any(r.view is None for r in program.reads))
    for module, fn_name, rule, text, present in (
        ("barriers", "check_named_barriers", "barrier.named", "named barriers: ids, thread counts, participants",
         bool(program.barriers)),
        ("barriers", "check_turn_orders", "turn.order", "warpgroups take turns without deadlock, in tile order",
         bool(program.orders)),
        ("fragments", "check_fragments", "fragment.convert", "register fragments (RS operands, conversions, row "
         "reductions) keep their tags", fragments),
    ):
        if not present:
            continue
        try:
            mod = importlib.import_module(f"argus_cutlass.verify.{module}")
            fn = getattr(mod, fn_name)
        except (ImportError, AttributeError):
            notes.append(f"{module}.{fn_name} not available: {text} not checked")
            run.unknowns.append(Unknown(rule, invariant_of(rule), f"{rule}: {text}", f"checker {module}.{fn_name} "
                                        "is not installed", 0))
            continue
        obligations.append(Obligation(rule, invariant_of(rule), text))
        run.add("enum", rule, fn, program)


def clear_caches() -> None:
    """Forget every result the verifier memoises across calls: decided SMT queries, views'
    layouts, accumulator maps, and the scheduler enumerations (unit ownership, tile walk,
    stream-K / split-K division); the invariant catalogue (parsed data) stays. The next
    :func:`verify_gemm` is then a cold run (``bench/test_verify_bench.py``)."""
    from argus_cutlass.verify import absint, output, smt

    smt._MEMO.clear()
    absint.accumulator_partition.cache_clear()
    absint.view_layout.cache_clear()
    for cached in (output._first_ownership_problem, output._walk_cases, output._division_cases,
                   output._grouped_cases):
        cached.cache_clear()


def check_gemm(program: Program, *, smt: bool = True) -> VerificationReport:
    """:func:`verify_gemm`, raising on any violation.

    Raises:
        VerificationError: at least one rule failed; ``err.rule`` is the first failed rule and
            ``err.report`` the full report.
    """
    report = verify_gemm(program, smt=smt)
    if not report.ok:
        raise VerificationError(report)
    return report
