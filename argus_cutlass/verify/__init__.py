"""Verifier v1 for SM90 GEMM programs.

:func:`verify_gemm` checks the closed-form resource rules (:mod:`.rules`) and, by
enumeration, the tag assertions of the DSL program (:mod:`.absint`), and returns a
:class:`VerificationReport`; :func:`check_gemm` raises :class:`VerificationError` instead.
"""

from __future__ import annotations

import time

from argus_cutlass.dsl.ir import DslProgram
from argus_cutlass.errors import VerificationError
from argus_cutlass.programs.gemm import GemmProgram
from argus_cutlass.verify.absint import check_k_agreement, check_tma_image, tag_image
from argus_cutlass.verify.catalogue import Invariant, invariant_of, load_invariants
from argus_cutlass.verify.report import (
    Counterexample,
    Obligation,
    Proof,
    VerificationReport,
    Violation,
)
from argus_cutlass.verify.rules import RULES, SHAPE_RULES

__all__ = [
    "Counterexample", "Invariant", "Obligation", "Proof", "RULES", "VerificationReport",
    "Violation", "check_gemm", "check_k_agreement", "check_tma_image", "load_invariants", "tag_image", "verify_gemm",
]

#: checkers of tag-assertion rules
_ASSERTION_CHECKS = {"mma.k_agreement": check_k_agreement}


def verify_gemm(program: GemmProgram, dsl: DslProgram | None = None) -> VerificationReport:
    """Check every rule on ``program`` and return the report (never raises for a bad program).

    Args:
        program: the instantiated GEMM (``build_gemm_program(cfg)``).
        dsl: its DSL mainloop; default ``gemm_dsl_program(program)``. Pass an edited one to
            check a variant (e.g. a different MMA-side layout).

    Resource rules all run and report every violation; the enumeration of tag assertions runs
    when the shape rules (``gmma.n``, ``gmma.m_tile``, ``stages``) hold.
    """
    from argus_cutlass.layout.algebra import LayoutError
    from argus_cutlass.programs.gemm_dsl import gemm_dsl_program

    t0 = time.perf_counter()
    notes: list[str] = []
    cfg = program.config
    name = f"gemm_{cfg.dtype}_{cfg.out_dtype}_{cfg.layout}_{cfg.tile_m}x{cfg.tile_n}x{cfg.tile_k}" \
           f"_c{cfg.cluster_m}x{cfg.cluster_n}_s{cfg.stages}_{cfg.schedule}"
    if dsl is None:
        try:
            dsl = gemm_dsl_program(program)
        except LayoutError as exc:
            notes.append(f"no DSL program: {exc}")
    obligations: list[Obligation] = []
    proofs: list[Proof] = []
    violations: list[Violation] = []
    failed: set[str] = set()
    for rule, fn in RULES.items():
        obligations.append(Obligation(rule, invariant_of(rule), (fn.__doc__ or "").split("\n")[0]))
        if dsl is None and rule == "smem.alignment":
            continue
        p, v = fn(program, dsl)  # type: ignore[arg-type]
        proofs += p
        violations += v
        if v:
            failed.add(rule)
    if dsl is not None:
        obligations.append(Obligation("tma.image", "G5", "TMA images are bijective onto their stages"))
        p, v = check_tma_image(dsl)
        proofs += p
        violations += v
        for a in dsl.assertions:
            obligations.append(Obligation(a.rule, a.invariant, str(a), str(a.loc)))
            if failed.intersection(SHAPE_RULES):
                notes.append(f"{a.rule} not checked: shape rules failed ({sorted(failed & set(SHAPE_RULES))})")
                continue
            p, v = _ASSERTION_CHECKS[a.rule](dsl, a)
            proofs += p
            violations += v
    return VerificationReport(name, tuple(obligations), tuple(proofs), tuple(violations),
                              time.perf_counter() - t0, tuple(notes))


def check_gemm(program: GemmProgram, dsl: DslProgram | None = None) -> VerificationReport:
    """:func:`verify_gemm`, raising on any violation.

    Raises:
        VerificationError: at least one rule failed; ``err.rule`` is the first failed rule and
            ``err.report`` the full report.
    """
    report = verify_gemm(program, dsl)
    if not report.ok:
        raise VerificationError(report)
    return report
