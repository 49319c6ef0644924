"""Counterexample records: the VERIFIER.md fields, as data, text and JSON."""

from __future__ import annotations

import json

from argus_cutlass.dsl.atoms import GmmaSmemAtom
from argus_cutlass.dsl.ir import SmemView
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.program import build_program
from argus_cutlass.verify import verify_gemm

FIELDS = {"invariant", "rule", "engine", "program_point", "where", "iteration", "stage", "k_block", "slot",
          "thread", "register", "smem_offset", "expected", "actual", "provenance", "k_tile", "element",
          "chain", "params", "trace"}


def _swizzle_mismatch():
    """The MMA reads A through an SW64 view; the TMA writes SW128 (default config)."""
    p = build_program(GemmConfig())
    bad = p.replace_node("read", "A", view=SmemView(GmmaSmemAtom("K", 64, 16), p.read("A").view.shape))
    return verify_gemm(bad)


def test_operand_counterexample_has_every_field():
    report = _swizzle_mismatch()
    cex = report.violations[0].counterexample
    assert report.violations[0].rule == "mma.k_agreement"
    assert cex.engine == "enum" and cex.invariant == "G1"
    # program point: DSL line and loop indices
    assert "program.py" in cex.where and (cex.stage, cex.k_tile, cex.k_block) == (0, 0, 0)
    # thread through the accumulator layout: D(1, 0) is lane 4 of warp 4 (consumer WG0), PTX ISA 9.7.15.4
    assert cex.thread == {"cta": 0, "threadIdx": 132, "warpgroup": 0, "warp": 4, "lane": 4}
    assert cex.register == "accum[0]=D(1,0)"
    # the elements the two slots read: SW64 row 1 of the first 64-byte atom lands on SW128's k = 32
    assert cex.element == {"tensor": "A, B", "A": "A(m=0, k=32, iter=0)", "B": "B(n=0, k=0, iter=0)"}
    assert cex.actual == "A.k=32, B.k=0"
    assert cex.smem_offset == {"A": 32, "B": 0}
    # provenance chain gmem -> TMA box -> smem byte -> view (descriptor) -> MMA slot
    assert len(cex.chain) == 4
    assert cex.chain[0] == "gmem gA(m=0 of the tile's block, k=32) -> TMA k-tile 0 box (64, 128) SW128"
    assert cex.chain[1] == "smem byte 0x40 (elem 32 of sA)"
    assert cex.chain[2].startswith("view Layout_K_SW64_Atom Swizzle<2,3,3>")
    assert cex.chain[3] == "MMA slot A(m=1, k=0) of stage 0"
    assert cex.params == {"stages": 4, "tile_k": 64, "tm": 0, "tn": 0}
    text = cex.format()
    for label in ("thread:", "element:", "smem:", "expected:", "actual:", "provenance:", "params:"):
        assert label in text
    assert "CTA 0 threadIdx.x=132 (consumer WG0, warp 4, lane 4) accum[0]=D(1,0)" in text


def test_counterexample_json_round_trip():
    report = _swizzle_mismatch()
    data = json.loads(report.to_json())
    cex = data["violations"][0]["counterexample"]
    assert set(cex) == FIELDS
    assert cex["thread"]["threadIdx"] == 132 and cex["element"]["A"] == "A(m=0, k=32, iter=0)"
    assert data["ok"] is False and data["complete"] is True and data["unknowns"] == []
    assert set(data["tier_seconds"]) <= {"arith", "enum", "smt"}


def test_pipeline_counterexample_text():
    p = build_program(GemmConfig()).replace_node("pipeline", "mainloop", **{"consumer.carry_across_tiles": False})
    report = verify_gemm(p)
    v = next(v for v in report.violations if v.rule == "pipeline.protocol")
    text = v.counterexample.format()
    assert text.startswith("G6 pipeline.protocol [engine: enum] at mainloop.pipeline (")
    assert "iter=1 k_tile=0 stage=0" in text
    assert "thread:     CTA 0 threadIdx.x=128 (consumer WG0, warp 4, lane 0)" in text
    assert "params:     k_tiles=1, tile=1" in text
    assert ("trace:      P0:wait empty[0] parity 1, fill stage 0; C0:wait full[0] parity 0, read stage 0, release "
            "stage(s) [0]; C1:wait full[0] parity 0, read stage 0") in text
    full = report.format()
    assert "counterexample: G6 pipeline.protocol" in full and "REJECTED" in full


def test_smt_counterexample_reports_symbolic_parameters():
    p = build_program(GemmConfig()).replace_node("loop", "k", rounding="floor")
    v = next(v for v in verify_gemm(p).violations if v.rule == "k.coverage")
    text = v.counterexample.format()
    assert "[engine: smt]" in text and "params:     K=1, k_tiles=0" in text
    assert ("provenance: gmem A(m=0, k=0) -> TMA k-tile 0 box (64, 128) SW128 -> smem stage 0 column 0 -> "
            "descriptor k_block 0 (+0 columns) -> MMA slot k=0") in text


def test_every_data_flow_violation_carries_a_record():
    """Planted mistakes of each data-flow class: each violation of a data-flow rule has a counterexample
    with a thread or CTA, and an expected and actual value."""
    p = build_program(GemmConfig(cluster_m=2, cluster_n=2, stages=3))
    edits = [
        ("load", "tma_sB", {"block_mode": "m"}),
        ("load", "tma_sA", {"mask_self": False}),
        ("load", "tma_sB", {"copy.kind": "load"}),
        ("pipeline", "mainloop", {"tx_bytes": 1024}),
        ("pipeline", "mainloop", {"consumer_arrivals": 3}),
        ("pipeline", "mainloop", {"release_lag": 0}),
        ("loop", "k", {"k_blocks": 3}),
        ("loop", "k", {"oob_fill": "nan"}),
        ("epilogue", None, {"row_offset": 8}),
        ("epilogue", None, {"residue_mask": False}),
        ("source", None, {"path": "none"}),
        ("source", None, {"residue_mask": False}),
        ("staging", None, {"row_lane_skew": 1}),
        ("staging", None, {"store_wait": 5}),
        ("store", "tma_store_sD", {"copy.swizzle_bytes": 32}),
        ("schedule", None, {"step_delta": -1}),
        ("read", "B", {"warp_stage_skew": (0, 0, 1, 0)}),
    ]
    structural = {"smem.capacity", "smem.alignment", "smem.disjoint", "registers", "roles.registers",
                  "tma.box_extent", "tma.box_inner_bytes", "tma.map", "gmma.n", "gmma.m_tile", "epilogue.tile",
                  "cluster", "stages", "tile_scheduler"}
    for kind, key, ch in edits:
        report = verify_gemm(p.replace_node(kind, key, **ch))
        assert not report.ok, (kind, ch)
        flows = [v for v in report.violations if v.rule not in structural]
        assert flows, (kind, ch, report.rules_violated())
        for v in flows:
            c = v.counterexample
            assert c is not None, (kind, ch, v.rule)
            assert c.thread and c.expected and c.actual, (kind, ch, v.rule)
