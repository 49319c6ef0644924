"""Every (rule, invariant id) a verifier report names is in the catalogues (``invariants/*.toml``), as data.

Review, session 44: ``moe.dynamic_walk`` reported invariant M14 since session 43 while ``invariants/moe.toml``
listed M1-M13 only (``invariant_of("moe.dynamic_walk")`` was ``"?"``)."""

from __future__ import annotations

import pytest

from argus_cutlass.verify import all_invariants


def _pairs(report) -> set[tuple[str, str]]:
    return {(x.rule, x.invariant) for x in (*report.proofs, *report.violations)}


def _check(pairs: set[tuple[str, str]], program=None) -> None:  # noqa: ANN001
    """Each pair's invariant is a checked catalogue entry listing the rule, or (a tag assertion or relation of
    ``program``) the invariant the program's own node declares for that rule, itself a catalogue entry."""
    owners: dict[str, set[str]] = {}
    for inv in all_invariants():
        if inv.checked:
            for rule in inv.rules:
                owners.setdefault(rule, set()).add(inv.id)
    ids = {inv.id for inv in all_invariants()}
    declared = set() if program is None else {(n.rule, n.invariant) for n in (*program.assertions, *program.relations)}
    assert {inv for _, inv in declared} <= ids, sorted(declared)
    # DSL-level findings carry the family's construction rule, not a data-flow invariant
    bad = sorted((rule, inv, sorted(owners.get(rule, ()))) for rule, inv in pairs
                 if inv not in owners.get(rule, set()) and (rule, inv) not in declared and not rule.startswith("dsl."))
    assert not bad, f"(rule, reported invariant, the catalogue's owners) not in invariants/*.toml: {bad}"


def test_moe_rule_table_is_the_catalogue():
    """``verify.moe.MOE_RULES`` (the ids the MoE rules report) agrees with ``invariants/moe.toml``."""
    from argus_cutlass.verify.moe import MOE_RULES

    _check({(rule, inv) for rule, (inv, _) in MOE_RULES.items()})


@pytest.mark.parametrize("sets", [{}, {"dynamic_walk": True}])
def test_moe_reports_name_catalogued_invariants(sets):
    from argus_cutlass.generate import build, configure
    from argus_cutlass.kernels.moe.problem import MoEProblem
    from argus_cutlass.verify.moe import verify_moe

    problem = MoEProblem.for_model("deepseek-v2-lite", 16)
    cfg = configure(problem)[0].model_copy(update=sets)
    _check(_pairs(verify_moe(build(cfg, problem), smt=False)))


def test_gemm_and_attention_reports_name_catalogued_invariants():
    from argus_cutlass.kernels.attention.config import AttentionConfig
    from argus_cutlass.kernels.attention.program import build_program as build_attention
    from argus_cutlass.kernels.gemm.config import GemmConfig
    from argus_cutlass.kernels.gemm.program import build_program
    from argus_cutlass.verify import verify_gemm
    from argus_cutlass.verify.attention import verify_attention

    gemm = build_program(GemmConfig())
    _check(_pairs(verify_gemm(gemm, smt=False)), gemm)
    attention = build_attention(AttentionConfig())
    _check(_pairs(verify_attention(attention, smt=False)), attention)
