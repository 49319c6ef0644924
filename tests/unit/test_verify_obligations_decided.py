"""Every obligation a verification report lists is decided: proved, violated or an SMT ``unknown``.

``VerificationReport.complete`` looks at unknowns only, so a rule that registers an obligation and then returns
neither a proof nor a violation for it would pass silently (session 39: ``residue.source`` of the MoE grouped GEMMs,
once their epilogue stopped reading C, had neither). Checked here on correct programs of the three families, with
the SMT tier on (the production default: without it the pipeline.* obligations are left to z3 by design).
"""

from __future__ import annotations

import pytest

from argus_cutlass.generate import build, configure
from argus_cutlass.verify.report import VerificationReport


def undecided(rep: VerificationReport) -> list[str]:
    done = {p.rule for p in rep.proofs} | {v.rule for v in rep.violations} | {u.rule for u in rep.unknowns}
    return sorted({o.rule for o in rep.obligations} - done)


def _moe(model: str, tokens: int, **changes):
    from argus_cutlass.kernels.moe.problem import MoEProblem
    from argus_cutlass.verify.moe import verify_moe

    p = MoEProblem.for_model(model, tokens)
    cfg = configure(p)[0]
    return verify_moe(build(cfg.replace(**changes) if changes else cfg, p), smt=True)


@pytest.mark.parametrize("case", ["gemm", "gemm_swap_ab", "attention", "moe_small_t_handoff", "moe_large_t"])
def test_every_obligation_of_a_correct_program_is_decided(case):
    from argus_cutlass.kernels.gemm.config import GemmConfig
    from argus_cutlass.kernels.gemm.program import build_program
    from argus_cutlass.verify import verify_gemm

    if case == "gemm":
        rep = verify_gemm(build_program(GemmConfig()), smt=True)
    elif case == "gemm_swap_ab":
        rep = verify_gemm(build_program(GemmConfig(tile_m=64, tile_n=16, schedule="pingpong", swap_ab=True,
                                                   epi_m=64, epi_n=16)), smt=True)
    elif case == "attention":
        from argus_cutlass.kernels.attention.config import AttentionConfig
        from argus_cutlass.kernels.attention.program import build_program as build_attention
        from argus_cutlass.verify.attention import verify_attention

        rep = verify_attention(build_attention(AttentionConfig()), smt=True)
    elif case == "moe_small_t_handoff":
        rep = _moe("qwen3-30b-a3b", 16, handoff=True, pdl=True)
    else:
        rep = _moe("mixtral", 2048)
    assert rep.ok, [v.format() for v in rep.violations]
    assert rep.obligations and not undecided(rep), undecided(rep)


def test_undecided_finds_an_obligation_without_outcome():
    """The helper itself: an obligation whose rule returned nothing is reported."""
    import dataclasses

    from argus_cutlass.kernels.gemm.config import GemmConfig
    from argus_cutlass.kernels.gemm.program import build_program
    from argus_cutlass.verify import verify_gemm

    rep = verify_gemm(build_program(GemmConfig()), smt=False)
    dropped = dataclasses.replace(rep, proofs=tuple(p for p in rep.proofs if p.rule != "residue.source"))
    assert "residue.source" in undecided(dropped)
