"""Verifier for SM90 GEMM programs, in three tiers.

* **algebraic** (``arith``): closed-form resource rules (:mod:`.rules`) and pipeline counts;
* **enumeration** (``enum``): tag images and tag assertions on numpy arrays (:mod:`.absint`),
  k coverage for small K, exhaustive pipeline interleavings (:mod:`.pipeline`);
* **SMT** (``smt``): z3 proofs for symbolic K and all iteration counts, and a bit-vector
  cross-check of the operand maps (:mod:`.smt`, lazy z3, timeout per query).

Both data tiers run the same hardware semantics (:mod:`.semantics`). :func:`verify_gemm`
returns a :class:`VerificationReport`; :func:`check_gemm` raises :class:`VerificationError`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from argus_cutlass.dsl.ir import DslProgram
from argus_cutlass.errors import DslError, VerificationError
from argus_cutlass.programs.gemm import GemmProgram
from argus_cutlass.verify.absint import check_k_agreement, check_k_coverage, check_tma_image, tag_image
from argus_cutlass.verify.catalogue import Invariant, invariant_of, load_invariants
from argus_cutlass.verify.report import (
    Counterexample,
    Obligation,
    Proof,
    Unknown,
    VerificationReport,
    Violation,
)
from argus_cutlass.verify.rules import RULES, SHAPE_RULES

__all__ = [
    "RULES",
    "Counterexample",
    "Invariant",
    "Obligation",
    "Proof",
    "Unknown",
    "VerificationReport",
    "Violation",
    "check_gemm",
    "check_k_agreement",
    "check_k_coverage",
    "check_tma_image",
    "clear_caches",
    "load_invariants",
    "tag_image",
    "verify_gemm",
]

#: checkers of tag-assertion rules
_ASSERTION_CHECKS = {"mma.k_agreement": check_k_agreement}

#: obligations of the G3/G6 checks: rule -> (invariant, description)
_PROTOCOL_OBLIGATIONS = {
    "k.coverage": ("G3", "every k in [0, K) is summed exactly once (enum: K <= 2 tile_k + 1; smt: K < 2^24)"),
    "pipeline.tx_bytes": ("G6", "expect_tx == bytes of the stage's TMA boxes"),
    "pipeline.arrivals": ("G6", "barrier arrival counts match the arrivers"),
    "pipeline.release": ("G6", "a stage is released only after the wgmma batch that read it retired"),
    "pipeline.protocol": ("G6", "exhaustive producer/consumer interleavings for small bounds"),
    "pipeline.state": ("G6", "PipelineState closed form == operator++ (smt, n < 2^24)"),
    "pipeline.stage": ("G6", "read stage == write stage == i mod S (smt, i < 2^24)"),
    "pipeline.parity": ("G6", "consumer waits (i/S)&1, producer waits the release of i-S (smt)"),
    "pipeline.carry": ("G6", "pipeline state carried across persistent tiles (smt)"),
}


class _Run:
    """Collects proofs, violations and unknowns, and the wall time per tier."""

    def __init__(self) -> None:
        self.proofs: list[Proof] = []
        self.violations: list[Violation] = []
        self.unknowns: list[Any] = []
        self.tier: dict[str, float] = {"arith": 0.0, "enum": 0.0, "smt": 0.0}

    def add(self, tier: str, fn: Callable[..., Any], *args: Any) -> tuple[list[Proof], list[Violation]]:
        t0 = time.perf_counter()
        out = fn(*args)
        dt = time.perf_counter() - t0
        self.tier[tier] += dt
        p, v = list(out[0]), list(out[1])
        if len(out) > 2:
            self.unknowns += out[2]
        untimed = [x for x in p if not x.seconds]
        if untimed:
            share = dt / len(p)
            p = [dataclasses.replace(x, seconds=share) if not x.seconds else x for x in p]
        self.proofs += p
        self.violations += v
        return p, v


def verify_gemm(program: GemmProgram, dsl: DslProgram | None = None, *, smt: bool = True,
                smt_timeout_ms: int | None = None) -> VerificationReport:
    """Check every rule on ``program`` and return the report (never raises for a bad program).

    Args:
        program: the instantiated GEMM (``build_gemm_program(cfg)``).
        dsl: its DSL mainloop; default ``gemm_dsl_program(program)``. Pass an edited one to
            check a variant (e.g. a different MMA-side layout, a planted pipeline mistake).
        smt: run the SMT tier (z3; symbolic K and iteration counts, operand cross-check).
        smt_timeout_ms: per-query z3 timeout (default :data:`.smt.DEFAULT_TIMEOUT_MS`); a query
            that times out is reported as ``unknown``, never as a proof.

    Resource rules all run and report every violation; the tag-assertion enumeration and the
    operand SMT cross-check run when the shape rules (``gmma.n``, ``gmma.m_tile``, ``stages``)
    hold. ``k.coverage``'s enumeration violation is replaced by the SMT one (which carries a
    counterexample record) when the SMT tier runs.
    """
    from argus_cutlass.layout.algebra import LayoutError
    from argus_cutlass.programs.gemm_dsl import gemm_dsl_program

    t0 = time.perf_counter()
    notes: list[str] = []
    dsl_error: Violation | None = None
    cfg = program.config
    from argus_cutlass.render.naming import kernel_name

    name = kernel_name(cfg).removeprefix("argus_")  # the generated kernel's name, every field encoded
    if dsl is None:
        try:
            dsl = gemm_dsl_program(program)
        except (LayoutError, DslError) as exc:
            # no data-flow program means no data-flow proof: the config is refused, never passed
            notes.append(f"no DSL program: {exc}")
            dsl_error = Violation("dsl.program", "-", f"the data-flow program of this config cannot be built: {exc}",
                                  "fix the config; the resource rules below usually say what is wrong")
    obligations: list[Obligation] = []
    run = _Run()
    if dsl is None:
        run.violations.append(dsl_error)
    failed: set[str] = set()
    for rule, fn in RULES.items():
        obligations.append(Obligation(rule, invariant_of(rule), " ".join((fn.__doc__ or "").split("\n\n")[0].split())))
        if dsl is None and rule == "smem.alignment":
            continue
        _, v = run.add("arith", fn, program, dsl)
        if v:
            failed.add(rule)
    shapes_ok = not failed.intersection(SHAPE_RULES)
    if dsl is not None:
        obligations.append(Obligation("tma.image", "G5", "TMA images are bijective onto their stages"))
        run.add("enum", check_tma_image, dsl)
        if any(ld.copy.multicast > 1 for ld in dsl.loads):
            from argus_cutlass.verify.multicast import check_multicast

            obligations.append(Obligation("tma.multicast", "G5",
                                          "every CTA of the cluster receives each operand row once, from its own block"))
            run.add("enum", check_multicast, dsl)
        for a in dsl.assertions:
            obligations.append(Obligation(a.rule, a.invariant, str(a), str(a.loc)))
            if not shapes_ok:
                notes.append(f"{a.rule} not checked: shape rules failed ({sorted(failed & set(SHAPE_RULES))})")
                continue
            # a rule without a dedicated checker gets the generic slot-wise tag comparison, so
            # a kernel author can state new invariants without touching the verifier
            run.add("enum", _ASSERTION_CHECKS.get(a.rule, check_k_agreement), dsl, a)
        if shapes_ok:
            from argus_cutlass.verify.absint import check_descriptors

            obligations.append(Obligation("gmma.descriptor", "G1",
                                          "every wgmma descriptor encodes the layout its operand is read through"))
            run.add("enum", check_descriptors, dsl)
        _protocol(run, dsl, obligations, notes, smt=smt, shapes_ok=shapes_ok, timeout_ms=smt_timeout_ms)
        if shapes_ok:
            _output(run, dsl, obligations)
        else:
            notes.append("output checks (G2, G4, G8) not run: shape rules failed")
    return VerificationReport(name, tuple(obligations), tuple(run.proofs), tuple(run.violations),
                              time.perf_counter() - t0, tuple(notes), tuple(run.unknowns),
                              {k: v for k, v in run.tier.items() if v})


def _protocol(run: _Run, dsl: DslProgram, obligations: list[Obligation], notes: list[str], *, smt: bool,
              shapes_ok: bool, timeout_ms: int | None) -> None:
    """G3 and G6 (enumeration, then SMT), and the SMT cross-check of G1/G5."""
    from argus_cutlass.verify.pipeline import check_arrivals, check_protocol, check_release, check_tx_bytes

    for rule, (inv, text) in _PROTOCOL_OBLIGATIONS.items():
        if (rule == "k.coverage" and dsl.kloop is not None) or (rule != "k.coverage" and dsl.pipeline is not None):
            obligations.append(Obligation(rule, inv, text))
    enum_k_bad: list[Violation] = []
    if dsl.kloop is not None:
        _, enum_k_bad = run.add("enum", check_k_coverage, dsl)
    if dsl.pipeline is not None:
        run.add("arith", check_tx_bytes, dsl)
        run.add("arith", check_arrivals, dsl)
        run.add("arith", check_release, dsl)
        run.add("enum", check_protocol, dsl)
    if not smt:
        notes.append("SMT tier off: k.coverage checked for K <= 2 tile_k + 1 only; pipeline for small bounds only")
        return
    from argus_cutlass.settings import settings
    from argus_cutlass.verify import smt as smt_tier

    smt_tier.require_z3()
    timeout = settings().smt_timeout_ms if timeout_ms is None else int(timeout_ms)
    if dsl.kloop is not None:
        _, v = run.add("smt", smt_tier.check_k_coverage_smt, dsl, timeout)
        if v and enum_k_bad:
            run.violations = [x for x in run.violations if x not in enum_k_bad]
    if dsl.pipeline is not None:
        run.add("smt", smt_tier.check_pipeline_smt, dsl, timeout)
    if shapes_ok:
        enum_bad = {v.rule for v in run.violations}
        if enum_bad & {"tma.image", "mma.k_agreement"}:
            notes.append("SMT operand cross-check skipped: the enumeration tier already found a violation")
        else:
            run.add("smt", smt_tier.check_operands_smt, dsl, timeout)


#: obligations of the output checks (G2, G4, G8): rule -> (invariant, description)
_OUTPUT_OBLIGATIONS = {
    "output.bijection": ("G4", "accumulator registers cover the output tile exactly once"),
    "epilogue.coordinate": ("G2", "each register is stored at its accumulator's (m, n)"),
    "residue.store": ("G8", "no store leaves D for any M/N residue"),
}


def _output(run: _Run, dsl: DslProgram, obligations: list[Obligation]) -> None:
    """G7 on the MMA reads, G2/G4/G8 on the epilogue store and G4 on the persistent tile scheduler."""
    from argus_cutlass.verify.output import (
        check_epilogue,
        check_schedule,
        check_schedule_all_sizes,
        check_tma_store,
        check_uniformity,
    )

    if dsl.reads:
        obligations.append(Obligation("warpgroup.uniform", "G7",
                                      "all 4 warps of a warpgroup pass wgmma the same stage's descriptor"))
        run.add("enum", check_uniformity, dsl)
    if dsl.epilogue is not None:
        for rule, (inv, text) in _OUTPUT_OBLIGATIONS.items():
            obligations.append(Obligation(rule, inv, text, str(dsl.epilogue.loc)))
        run.add("enum", check_epilogue, dsl)
    if dsl.stores:
        obligations.append(Obligation("epilogue.tma_store", "G2",
                                      "the TMA store sends each staged accumulator to its own (m, n)",
                                      str(dsl.stores[0].loc)))
        run.add("enum", check_tma_store, dsl)
    if dsl.staging is not None:
        from argus_cutlass.verify.staging import check_stage_reuse, check_staging

        where = str(dsl.staging.loc)
        obligations.append(Obligation("epilogue.stmatrix", "G2",
                                      "each accumulator register is staged at sD(m, n, stage) by the epilogue's "
                                      "stmatrix / st.shared", where))
        obligations.append(Obligation("epilogue.stage_reuse", "G6",
                                      "a staging stage is rewritten only after its TMA store finished reading it",
                                      where))
        run.add("enum", check_staging, dsl)
        run.add("arith", check_stage_reuse, dsl)
    if dsl.schedule is not None:
        obligations.append(Obligation("scheduler.bijection", "G4",
                                      "every work unit has one CTA and one output tile (enum: units <= 48; "
                                      "arith: all sizes)", str(dsl.schedule.loc)))
        _, bad = run.add("enum", check_schedule, dsl)
        if not bad:
            run.add("arith", check_schedule_all_sizes, dsl)


def clear_caches() -> None:
    """Forget every result the verifier memoises across calls: decided SMT queries, accumulator
    maps, and the scheduler enumerations (unit ownership, tile walk, stream-K / split-K division) (the invariant catalogue, parsed data,
    stays). The next :func:`verify_gemm` is then a cold run (``bench/test_verify_bench.py``)."""
    from argus_cutlass.verify import absint, output, smt

    smt._MEMO.clear()
    absint.accumulator_partition.cache_clear()
    for cached in (output._first_ownership_problem, output._walk_cases, output._division_cases):
        cached.cache_clear()


def check_gemm(program: GemmProgram, dsl: DslProgram | None = None, *, smt: bool = True) -> VerificationReport:
    """:func:`verify_gemm`, raising on any violation.

    Raises:
        VerificationError: at least one rule failed; ``err.rule`` is the first failed rule and
            ``err.report`` the full report.
    """
    report = verify_gemm(program, dsl, smt=smt)
    if not report.ok:
        raise VerificationError(report)
    return report
