"""Every obligation a verification report lists is decided: proved, violated, an SMT ``unknown``, or
deliberately ``skipped`` (the SMT tier off); ``VerificationReport.complete`` requires it.

A rule that registers an obligation and then returns no outcome for it used to pass silently (session 39:
``residue.source`` of the MoE grouped GEMMs, once their epilogue stopped reading C, had neither proof nor
violation; ``complete`` looked at unknowns only). Now such an obligation is ``report.undecided``, the report is
not complete, and the orchestrator refuses it (``verify.undecided``, naming the obligation). Checked here on
correct programs of the three families with the SMT tier on (every obligation proved) and off (the checks the
tier would make are ``Skipped`` records, and nothing is left undecided).
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from argus_cutlass.errors import UnprovedError
from argus_cutlass.generate import build, configure, proof_lines, require_proved
from argus_cutlass.verify.report import Obligation, Proof, Skipped, VerificationReport

CASES = ["gemm", "gemm_swap_ab", "attention", "moe_small_t_handoff", "moe_large_t"]
#: obligations of the GEMM programs (and of the MoE layer's two grouped GEMMs) only the SMT tier decides
SMT_ONLY = {"pipeline.state", "pipeline.stage", "pipeline.parity", "pipeline.carry"}


def undecided(rep: VerificationReport) -> list[str]:
    """The rules with no outcome at all, computed here independently of ``rep.undecided``."""
    done = ({p.rule for p in rep.proofs} | {v.rule for v in rep.violations} | {u.rule for u in rep.unknowns}
            | {s.rule for s in rep.skipped})
    return sorted({o.rule for o in rep.obligations} - done)


def _moe(model: str, tokens: int, smt: bool, **changes):
    from argus_cutlass.kernels.moe.problem import MoEProblem
    from argus_cutlass.verify.moe import verify_moe

    p = MoEProblem.for_model(model, tokens)
    cfg = configure(p)[0]
    return verify_moe(build(cfg.replace(**changes) if changes else cfg, p), smt=smt)


def _report(case: str, smt: bool) -> VerificationReport:
    from argus_cutlass.kernels.gemm.config import GemmConfig
    from argus_cutlass.kernels.gemm.program import build_program
    from argus_cutlass.verify import verify_gemm

    if case == "gemm":
        return verify_gemm(build_program(GemmConfig()), smt=smt)
    if case == "gemm_swap_ab":
        return verify_gemm(build_program(GemmConfig(tile_m=64, tile_n=16, schedule="pingpong", swap_ab=True,
                                                    epi_m=64, epi_n=16)), smt=smt)
    if case == "attention":
        from argus_cutlass.kernels.attention.config import AttentionConfig
        from argus_cutlass.kernels.attention.program import build_program as build_attention
        from argus_cutlass.verify.attention import verify_attention

        return verify_attention(build_attention(AttentionConfig()), smt=smt)
    if case == "moe_small_t_handoff":
        return _moe("qwen3-30b-a3b", 16, smt, handoff=True, pdl=True)
    return _moe("mixtral", 2048, smt)


@pytest.mark.parametrize("case", CASES)
def test_every_obligation_of_a_correct_program_is_proved_with_smt(case):
    rep = _report(case, smt=True)
    assert rep.ok, [v.format() for v in rep.violations]
    assert rep.obligations and not undecided(rep) and not rep.undecided, undecided(rep)
    assert not rep.skipped and rep.complete and rep.verified and rep.fully_proved


@pytest.mark.parametrize("case", CASES)
def test_every_obligation_of_a_correct_program_is_decided_or_skipped_without_smt(case):
    """With the SMT tier off every obligation is proved, violated or skipped: none undecided, and the
    report is complete (a ``--no-smt`` run renders as before), but not fully proved."""
    rep = _report(case, smt=False)
    assert rep.ok, [v.format() for v in rep.violations]
    assert rep.obligations and not undecided(rep) and not rep.undecided, undecided(rep)
    assert rep.complete and rep.verified and not rep.fully_proved
    skipped = {s.rule for s in rep.skipped}
    assert all(s.reason == "SMT tier off (smt=False, --no-smt)" for s in rep.skipped)
    if case != "attention":
        # the obligations only z3 decides are accounted for by their Skipped records alone
        proved = {p.rule for p in rep.proofs}
        assert SMT_ONLY <= skipped and not SMT_ONLY & proved
        assert {o.rule for o in rep.obligations} >= SMT_ONLY
    # a skipped check is said everywhere the proofs are, never as proved
    text = rep.format()
    assert ": verified, " in text.splitlines()[0] and "skipped (not checked)" in text.splitlines()[0]
    assert "  SKIPPED G6 pipeline.parity: " in text and "not checked (SMT tier off" in text
    data = json.loads(rep.to_json())
    assert data["complete"] is True and data["fully_proved"] is False and data["undecided"] == []
    assert {s["rule"] for s in data["skipped"]} == skipped
    require_proved(rep)   # no --allow-unknown needed: the only gaps are explicit skips
    header = proof_lines(rep)
    skipped_header = [line for line in header if line.startswith("SKIPPED (not checked): ")]
    assert len(skipped_header) == len(rep.skipped)
    assert not any("pipeline.parity" in line for line in rep.proved) or case == "attention"
    assert any("G6 pipeline.parity" in line and "(not checked: SMT tier off" in line for line in skipped_header)


def test_skip_reason_says_z3_is_missing(monkeypatch):
    """``verify(smt=None)`` without z3-solver: the Skipped records say so, and a note too."""
    import argus_cutlass.generate as gen
    from argus_cutlass.kernels.gemm.config import GemmConfig

    monkeypatch.setattr(gen, "_Z3", lambda: False)
    notes: list[str] = []
    rep = gen.verify(build(GemmConfig()), smt=None, notes=notes)
    assert rep.complete and rep.skipped and not rep.undecided
    assert {s.reason for s in rep.skipped} == {gen.Z3_MISSING}
    assert any("z3-solver is not installed" in n for n in notes)
    assert any("(not checked: SMT tier skipped: z3-solver not installed)" in line for line in proof_lines(rep))


@pytest.mark.parametrize("changes, failed, skipped", [
    ({"stages": 5}, "smem.capacity", {"pipeline.protocol"}),
    ({"tile_m": 64, "tile_n": 32, "epi_m": 128, "epi_n": 64}, "gmma.m_tile", {"mma.k_agreement"}),
    ({"tile_k": 4096, "stages": 2}, "smem.capacity", {"tma.image", "gmma.descriptor", "k.coverage"}),
])
def test_a_rejected_program_skips_what_its_violation_leaves_without_a_domain(changes, failed, skipped):
    """Checks not run because another rule failed (the program cannot launch) are Skipped, with that rule
    named: a rejected report has no undecided obligation either."""
    from argus_cutlass.kernels.gemm.config import GemmConfig
    from argus_cutlass.kernels.gemm.program import build_program
    from argus_cutlass.verify import verify_gemm

    rep = verify_gemm(build_program(GemmConfig(**changes)), smt=True)
    assert not rep.ok and failed in rep.rules_violated()
    assert not rep.undecided and rep.complete, undecided(rep)
    by_rule = {s.rule: s.reason for s in rep.skipped}
    assert skipped <= set(by_rule)
    assert all(f"{'shape rules' if failed == 'gmma.m_tile' else failed}" in by_rule[r] for r in skipped)


def _registered_never_decided() -> VerificationReport:
    """A report built directly: ``epilogue.source`` registered, proved nowhere, violated nowhere."""
    return VerificationReport(
        "argus_gemm_test",
        obligations=(Obligation("smem.capacity", "R1", "fits shared memory"),
                     Obligation("epilogue.source", "G2", "beta * C reads C(m, n) at each accumulator's (m, n)"),
                     Obligation("pipeline.parity", "G6", "consumer waits (i/S)&1")),
        proofs=(Proof("smem.capacity", "R1", "arith", "1000 <= 232448 bytes"),),
        skipped=(Skipped("pipeline.parity", "G6", "wait parity for all iteration counts (SMT)",
                         "SMT tier off (smt=False, --no-smt)"),))


def test_an_obligation_registered_but_never_decided_makes_the_report_incomplete():
    rep = _registered_never_decided()
    assert rep.ok and not rep.unknowns          # today's `complete` (no unknowns) would have said True
    assert [o.rule for o in rep.undecided] == ["epilogue.source"]
    assert not rep.complete and not rep.verified
    text = rep.format()
    assert text.startswith("argus_gemm_test: INCOMPLETE (1 undecided: not proved)")
    assert "  UNDECIDED G2 epilogue.source: beta * C reads C(m, n)" in text
    assert "  SKIPPED G6 pipeline.parity: " in text
    data = json.loads(rep.to_json())
    assert data["complete"] is False and [o["rule"] for o in data["undecided"]] == ["epilogue.source"]
    assert any("G2 epilogue.source" in line and "undecided" in line for line in data["not_proved"])
    # the orchestrator refuses it, naming the obligation and the rule broken
    with pytest.raises(UnprovedError) as info:
        require_proved(rep)
    err = info.value
    assert err.rule == "verify.undecided"
    assert "1 obligation(s) not proved" in err.message and "G2 epilogue.source" in err.message
    assert "no proof, violation, unknown or skip recorded" in err.message
    # --allow-unknown renders it, and the .cu header says it was not proved (never as proved)
    require_proved(rep, allow_unknown=True)
    lines = proof_lines(rep)
    assert [line for line in lines if "epilogue.source" in line] == [
        "NOT PROVED (allowed by --allow-unknown): G2 epilogue.source: beta * C reads C(m, n) at each "
        "accumulator's (m, n) (undecided: no proof, violation, unknown or skip recorded)"]
    assert not any("epilogue.source" in line for line in rep.proved)


def test_dropping_a_proof_leaves_the_obligation_undecided():
    """An obligation whose rule returned nothing (here: its proofs dropped) is reported by the report itself."""
    from argus_cutlass.kernels.gemm.config import GemmConfig
    from argus_cutlass.kernels.gemm.program import build_program
    from argus_cutlass.verify import verify_gemm

    rep = verify_gemm(build_program(GemmConfig()), smt=False)
    assert rep.complete
    dropped = dataclasses.replace(rep, proofs=tuple(p for p in rep.proofs if p.rule != "residue.source"))
    assert "residue.source" in undecided(dropped)
    assert [o.rule for o in dropped.undecided] == ["residue.source"] and not dropped.complete
    assert "UNDECIDED G8 residue.source" in dropped.format()
    # a Skipped record of another rule does not account for it
    skipped_pipeline = dataclasses.replace(dropped, skipped=tuple(s for s in rep.skipped if s.rule != "residue.source"))
    assert not skipped_pipeline.complete


def test_an_moe_part_that_leaves_an_obligation_undecided_keeps_the_layer_incomplete(monkeypatch):
    """The MoE report merges both grouped GEMMs' outcomes under the same rule names, so one part's proof of a rule
    would count for the other part's silent obligation; verify_moe carries each part's own undecided obligations
    into the layer's report (as unknowns naming the part)."""
    import argus_cutlass.verify as verify_pkg
    from argus_cutlass.kernels.moe.config import MoEConfig
    from argus_cutlass.kernels.moe.problem import MoEProblem
    from argus_cutlass.kernels.moe.program import build_layer
    from argus_cutlass.verify.moe import verify_moe

    real = verify_pkg.verify_gemm
    calls = []

    def silent_down(program, **kw):
        rep = real(program, **kw)
        calls.append(rep)
        if len(calls) == 2:   # the down GEMM: its residue.source proof vanishes (a check that never reported)
            rep = dataclasses.replace(rep, proofs=[p for p in rep.proofs if p.rule != "residue.source"])
        return rep

    monkeypatch.setattr(verify_pkg, "verify_gemm", silent_down)
    layer = build_layer(MoEConfig(), MoEProblem(16, 8, 2, 256, 512))
    rep = verify_moe(layer, smt=False)
    assert any(p.rule == "residue.source" for p in rep.proofs)   # gate+up's proof of the same rule is there
    assert not rep.complete
    assert any(u.rule == "residue.source" and u.query.startswith("[down]") and "undecided" in u.reason
               for u in rep.unknowns)
