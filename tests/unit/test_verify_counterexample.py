"""Counterexample records: the VERIFIER.md fields, as data, text and JSON."""

from __future__ import annotations

import json

from argus_cutlass.dsl.atoms import Swizzle
from argus_cutlass.layout import SwizzledLayout
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.programs.gemm import build_gemm_program
from argus_cutlass.programs.gemm_dsl import gemm_dsl_program
from argus_cutlass.verify import verify_gemm

FIELDS = {"invariant", "rule", "engine", "program_point", "where", "iteration", "stage", "k_block", "slot",
          "thread", "register", "smem_offset", "expected", "actual", "provenance", "k_tile", "element",
          "chain", "params", "trace"}


def _swizzle_mismatch():
    program = build_gemm_program(GemmConfig())
    dsl = gemm_dsl_program(program)
    bad = dsl.replace_read("A", layout=SwizzledLayout(Swizzle(2, 3, 3), dsl.tensor("sA").layout.layout))
    return verify_gemm(program, bad)


def test_operand_counterexample_has_every_field():
    report = _swizzle_mismatch()
    cex = report.violations[0].counterexample
    assert cex.engine == "enum" and cex.invariant == "G1"
    # program point: DSL line and loop indices
    assert "gemm_dsl.py" in cex.where and (cex.stage, cex.k_tile, cex.k_block) == (0, 0, 0)
    # thread through the accumulator layout: D(4, 0) is lane 16 of warp 4 (consumer WG0)
    assert cex.thread == {"cta": 0, "threadIdx": 144, "warpgroup": 0, "warp": 4, "lane": 16}
    assert cex.register == "accum[0]=D(4,0)"
    # element read (tensor, global coordinate) vs the expected one
    assert cex.element == {"tensor": "A, B", "A": "(m=4, k=32, iter=0)", "B": "(n=0, k=0, iter=0)"}
    # provenance chain gmem -> TMA box -> smem byte -> descriptor -> MMA slot
    assert len(cex.chain) == 4
    assert cex.chain[0].startswith("gmem A(m=4, k=32) -> TMA k-tile 0 box (64, 128) SW128")
    assert cex.chain[1].startswith("smem byte 0x8600 (elem 256 of sA)")
    assert cex.chain[2].startswith("descriptor Swizzle<2,3,3>") and cex.chain[3] == "MMA slot A(m=4, k=0) of stage 0"
    assert cex.params == {"stages": 4, "tile_k": 64}
    text = cex.format()
    for label in ("thread:", "element:", "smem:", "expected:", "actual:", "provenance:", "params:"):
        assert label in text
    assert "CTA 0 threadIdx.x=144 (consumer WG0, warp 4, lane 16) accum[0]=D(4,0)" in text


def test_counterexample_json_round_trip():
    report = _swizzle_mismatch()
    data = json.loads(report.to_json())
    cex = data["violations"][0]["counterexample"]
    assert set(cex) == FIELDS
    assert cex["thread"]["threadIdx"] == 144 and cex["element"]["A"] == "(m=4, k=32, iter=0)"
    assert data["complete"] is False and data["unknowns"] == []
    assert set(data["tier_seconds"]) <= {"arith", "enum", "smt"}


def test_pipeline_counterexample_text():
    program = build_gemm_program(GemmConfig())
    dsl = gemm_dsl_program(program).replace_pipeline(consumer={"carry_across_tiles": False})
    report = verify_gemm(program, dsl)
    v = next(v for v in report.violations if v.rule == "pipeline.protocol")
    text = v.counterexample.format()
    assert text.startswith("G6 pipeline.protocol [engine: enum] at mainloop.pipeline (")
    assert "iter=1 k_tile=0 stage=0" in text
    assert "thread:     CTA 0 threadIdx.x=128 (consumer WG0, warp 4, lane 0)" in text
    assert "params:     k_tiles=1, tile=1" in text
    assert "trace:      P0:wait empty[0] parity 1, fill stage 0; C0:wait full[0] parity 0, read+release " \
           "stage 0; C1:wait full[0] parity 0, read stage 0" in text
    full = report.format()
    assert "counterexample: G6 pipeline.protocol" in full and "REJECTED" in full


def test_smt_counterexample_reports_symbolic_parameters():
    program = build_gemm_program(GemmConfig())
    dsl = gemm_dsl_program(program).replace_kloop(rounding="floor")
    v = next(v for v in verify_gemm(program, dsl).violations if v.rule == "k.coverage")
    text = v.counterexample.format()
    assert "[engine: smt]" in text and "params:     K=1, k_tiles=0" in text
    assert "provenance: gmem A(m=0, k=0) -> TMA k-tile 0 box (64, 128) SW128 -> smem stage 0 column 0 -> " \
           "descriptor k_block 0 (+0 columns) -> MMA slot k=0" in text
