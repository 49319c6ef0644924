"""Bad input that cannot fit the hardware answers fast, with its violation: the data-flow enumeration of a
program that breaks ``smem.capacity`` covers the stages its buffers could have on an sm_90 CTA (at least 2),
and is not run over an operand tile one stage of which alone exceeds 227 KiB, nor over output tiles whose
accumulators exceed an SM's register file; a program that fits is enumerated over every stage, as before.

The bound is measured by the verifier's own work (the ``points`` its enumeration proofs count, the stages
their summaries name, the report's notes), not by wall time. Before the bound a 1024-stage GEMM took 21 s,
a 64-stage attention kernel more than 60 s (red team)."""

from __future__ import annotations

import pytest

from argus_cutlass.kernels.attention.config import AttentionConfig
from argus_cutlass.kernels.attention.program import build_program as build_attention
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.program import build_program
from argus_cutlass.kernels.moe.config import MoEConfig
from argus_cutlass.kernels.moe.problem import MoEProblem
from argus_cutlass.kernels.moe.program import build_layer
from argus_cutlass.verify import verify_gemm
from argus_cutlass.verify.absint import MIN_ENUMERATED_STAGES, check_tma_image, enumerated_stages
from argus_cutlass.verify.attention import stages_that_fit as attention_stages_that_fit
from argus_cutlass.verify.attention import verify_attention
from argus_cutlass.verify.moe import verify_moe
from argus_cutlass.verify.rules import check_smem_capacity, stages_that_fit

HUGE = 65536
MOE_PROBLEM = MoEProblem(64, 8, 2, 256, 512)


def _stage_elems(program, buffer: str) -> int:
    t = program.tensor(buffer)
    return int(t.shape[0]) * int(t.shape[1])


def _image_points(report, prefix: str = "") -> int:
    return sum(p.points for p in report.proofs if p.rule == "tma.image" and p.summary.startswith(prefix))


def _bound_of_image(program, cap: int) -> int:
    """tma.image's points over ``cap`` stages of every loaded buffer."""
    return sum(cap * _stage_elems(program, ld.dst) for ld in program.loads)


# ------------------------------------------------------------------------------------------ the law


@pytest.mark.parametrize("cfg", [GemmConfig(), GemmConfig(tile_n=128, tile_k=128, cluster_m=1),
                                 GemmConfig(tile_m=64, tile_n=64, tile_k=64, cluster_m=1, schedule="pingpong",
                                            epi_m=64)], ids=["128x256x64", "128x128x128", "64x64x64pp"])
def test_stages_that_fit_is_the_deepest_pipeline_smem_capacity_accepts(cfg):
    """stages_that_fit (the bound and the smem.capacity hint) == the largest stage count the rule accepts."""
    fit = stages_that_fit(build_program(cfg.replace(stages=2)))
    assert fit >= 2
    for s in (fit - 1, fit, fit + 1, fit + 2):
        holds = not check_smem_capacity(build_program(cfg.replace(stages=s)))[1]
        assert holds == (s <= fit), (s, fit)
        assert stages_that_fit(build_program(cfg.replace(stages=s))) == fit


@pytest.mark.parametrize("kw", [{}, {"head_dim": 64, "tile_n": 64}, {"head_dim": 256, "tile_n": 64},
                                {"q_stages": 2}], ids=["d128", "d64n64", "d256n64", "q2"])
def test_attention_stages_that_fit_is_the_deepest_pipeline_smem_capacity_accepts(kw):
    from argus_cutlass.verify.attention import check_resources

    fit = attention_stages_that_fit(build_attention(AttentionConfig(stages=1, **kw)))
    assert fit >= 1
    for s in range(max(1, fit - 1), fit + 3):
        program = build_attention(AttentionConfig(stages=s, **kw))
        holds = not any(v.rule == "smem.capacity" for v in check_resources(program)[1])
        assert holds == (s <= fit), (s, fit)
        assert attention_stages_that_fit(program) == fit


def test_a_program_that_fits_is_never_capped():
    """enumerated_stages caps only below the stage count: a stage count that fits (<= fit) is enumerated whole."""
    for fit in range(0, 12):
        for s in range(1, 40):
            cap = enumerated_stages(s, fit)
            if s <= max(fit, MIN_ENUMERATED_STAGES):
                assert cap is None
            else:
                assert cap == max(fit, MIN_ENUMERATED_STAGES) < s


# ----------------------------------------------------------------------------------- GEMM (and MoE)


def test_gemm_huge_stages_enumerates_the_stages_that_fit():
    program = build_program(GemmConfig(stages=HUGE))
    report = verify_gemm(program)  # the SMT tier too: its queries are symbolic in the stage
    assert report.rules_violated()[0] == "smem.capacity"
    cap = stages_that_fit(program)
    assert cap == 4
    v = next(v for v in report.violations if v.rule == "smem.capacity")
    assert f"{HUGE} stages x 49152 bytes" in v.message and v.hint.startswith("at most 4 stages fit")
    assert any(f"enumerated stages 0..3 of {HUGE}: the program does not fit shared memory (smem.capacity)" in n
               for n in report.notes), report.notes
    assert any("pipeline.protocol not enumerated" in n for n in report.notes)
    # the printed report (CLI `verify`, a rejected `gemm` run) says it too
    text = report.format()
    assert f"  note: tma.image, the tag assertions and gmma.descriptor enumerated stages 0..3 of {HUGE}" in text
    assert "  note: pipeline.protocol not enumerated" in text
    # the verifier's own work: the TMA images of 4 stages, the tag assertions at 4 stages
    assert 0 < _image_points(report) == _bound_of_image(program, cap)
    stamped = [p for p in report.proofs if p.rule in ("mma.k_agreement", "mma.operand_identity")
               and p.engine == "enum"]
    assert stamped and all(f"the first 4 of {HUGE} stages" in p.summary for p in stamped)
    assert all(p.points < 10_000_000 for p in report.proofs)


def test_gemm_capped_enumeration_still_reports_stage_independent_violations():
    """A stage-0 fault of a program that does not fit still shows, beside smem.capacity."""
    program = build_program(GemmConfig(stages=4096, cluster_m=1))
    bad = program.replace_node("tensor", "sA", base_bytes=128)  # off its 1024-byte swizzle period
    report = verify_gemm(bad, smt=False)
    assert {"smem.capacity", "gmma.descriptor"} <= set(report.rules_violated())
    desc = next(v for v in report.violations if v.rule == "gmma.descriptor")
    assert "operand A stage 0" in desc.message


def test_gemm_one_stage_beyond_shared_memory_is_not_enumerated():
    """tile_k = 65536: one stage alone is 48 MiB. The operand enumerations (and k.coverage's, K up to 2 tile_k + 1)
    are not run, a note says why; smem.capacity names the numbers and says no stage fits."""
    report = verify_gemm(build_program(GemmConfig(tile_k=HUGE)), smt=False)
    assert report.rules_violated() == ["smem.capacity"]
    v = report.violations[0]
    assert "A 16777216 + B 33554432" in v.message and v.hint.startswith("not one stage of this tile fits")
    assert any("not run: one stage of the pipeline's buffers (sA 16777216 + sB 33554432 = 50331648 bytes) exceeds"
               in n for n in report.notes), report.notes
    assert not any(p.rule in ("tma.image", "gmma.descriptor", "mma.k_agreement") for p in report.proofs)
    assert not any(p.rule == "k.coverage" and p.engine == "enum" for p in report.proofs)


def test_gemm_accumulators_beyond_the_register_file_are_not_enumerated():
    """tile_m = 65536: the tile's accumulators exceed an SM's 65536 registers; the output checks that enumerate
    every accumulator are not run, the others (warpgroup uniformity, the scheduler) are."""
    report = verify_gemm(build_program(GemmConfig(tile_m=HUGE)), smt=False)
    assert {"smem.capacity", "registers", "tma.box_extent"} <= set(report.rules_violated())
    assert any("not run: the 65536 x 256 tile's 16777216 fp32 accumulators exceed the 65536 registers of an SM" in n
               for n in report.notes), report.notes
    assert not any(p.rule in ("epilogue.coordinate", "epilogue.stmatrix", "epilogue.tma_store") for p in report.proofs)
    assert {"warpgroup.uniform", "scheduler.bijection"} <= {p.rule for p in report.proofs}


def test_moe_huge_stages_enumerates_the_stages_that_fit():
    layer = build_layer(MoEConfig(gu_stages=HUGE, dn_stages=HUGE), MOE_PROBLEM)
    report = verify_moe(layer, smt=False)
    assert report.rules_violated()[0] == "smem.capacity"
    for part in ("gate_up", "down"):
        program = layer.program(part)
        cap = stages_that_fit(program)
        assert 2 <= cap < HUGE
        assert any(n.startswith(f"{part}: ") and f"enumerated stages 0..{cap - 1} of {HUGE}" in n
                   for n in report.notes), report.notes
        assert 0 < _image_points(report, f"[{part}]") == _bound_of_image(program, cap)


# ---------------------------------------------------------------------------------------- attention


def test_attention_huge_stages_enumerates_the_stages_that_fit():
    program = build_attention(AttentionConfig(stages=HUGE))
    report = verify_attention(program, smt=False)
    assert report.rules_violated()[0] == "smem.capacity"
    cap = attention_stages_that_fit(program)
    assert cap == 3
    assert any(f"enumerated stages 0..2 of {HUGE}" in n for n in report.notes), report.notes
    assert any(f"pipeline.protocol not enumerated: the program's {HUGE}-stage K / V pipelines" in n
               for n in report.notes)
    assert not any(p.rule == "pipeline.protocol" for p in report.proofs)
    # Q has 1 stage, K and V the first 3
    want = sum(min(cap, int(program.tensor(ld.dst).shape[2])) * _stage_elems(program, ld.dst)
               for ld in program.loads)
    assert 0 < _image_points(report) == want
    tags = [p for p in report.proofs if p.rule in ("mma.k_agreement", "mma.operand_identity") and p.engine == "enum"]
    assert tags and all(f"the first 3 K / 3 V / 1 Q stages of {HUGE} / {HUGE} / 1" in p.summary for p in tags)


# ------------------------------------------------------------------------- what fits: every stage


def test_buildable_programs_enumerate_every_stage():
    program = build_program(GemmConfig(stages=4))
    report = verify_gemm(program, smt=False)
    assert report.ok
    assert not any("enumerated stages" in n or "not run" in n for n in report.notes), report.notes
    assert _image_points(report) == _bound_of_image(program, 4)
    assert any(p.rule == "pipeline.protocol" for p in report.proofs)
    assert all("all 4 stages" in p.summary for p in report.proofs
               if p.rule in ("mma.k_agreement", "mma.operand_identity") and p.engine == "enum")
    # the deepest pipeline of a small tile: every one of its stages
    deep = GemmConfig(tile_m=64, tile_n=64, tile_k=64, cluster_m=1, schedule="pingpong", epi_m=64)
    fit = stages_that_fit(build_program(deep.replace(stages=2)))
    program = build_program(deep.replace(stages=fit))
    assert not check_smem_capacity(program)[1]
    assert check_tma_image(program)[0][0].points == fit * _stage_elems(program, program.loads[0].dst)
    attention = build_attention(AttentionConfig(stages=3))
    report = verify_attention(attention, smt=False)
    assert "smem.capacity" not in report.rules_violated()
    assert not any("enumerated stages" in n for n in report.notes), report.notes
    assert _image_points(report) == sum(int(attention.tensor(ld.dst).shape[2]) * _stage_elems(attention, ld.dst)
                                        for ld in attention.loads)
    assert any(p.rule == "pipeline.protocol" for p in report.proofs)


def test_check_tma_image_stage_cap():
    program = build_program(GemmConfig(stages=4))
    full, capped = check_tma_image(program), check_tma_image(program, 2)
    assert [p.points for p in capped[0]] == [p.points // 2 for p in full[0]]
    assert "the first 2 of sA's 4 stages" in capped[0][0].summary and "sA's 4 stages" in full[0][0].summary
