"""The verifier rejects planted mistakes, each caught by a different rule, with the numbers."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from argus_cutlass.dsl.atoms import GmmaSmemAtom, Swizzle
from argus_cutlass.errors import ArgusError, VerificationError
from argus_cutlass.layout import SwizzledLayout
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.programs.gemm import build_gemm_program
from argus_cutlass.programs.gemm_dsl import gemm_dsl_program
from argus_cutlass.verify import check_gemm, verify_gemm
from argus_cutlass.verify.absint import tag_image


def _reject(program, dsl=None, rule=None):
    with pytest.raises(VerificationError) as info:
        check_gemm(program, dsl)
    err = info.value
    assert isinstance(err, ArgusError) and err.user_error
    report = err.report
    assert not report.ok
    assert rule in report.rules_violated(), report.format()
    msgs = [v.message for v in report.violations if v.rule == rule]
    assert f"[{rule}]" in str(err)
    return err, report, "\n".join(msgs)


def _with_tma(program, operand, **changes):
    op = getattr(program, operand.lower())
    new = dataclasses.replace(op, tma=dataclasses.replace(op.tma, **changes))
    return dataclasses.replace(program, **{operand.lower(): new})


def test_smem_capacity():
    err, report, msg = _reject(build_gemm_program(GemmConfig(stages=5)), rule="smem.capacity")
    assert "5 stages x 49152 bytes (48 KiB: A 16384 + B 32768)" in msg
    assert "epilogue 32768 bytes (32 KiB)" in msg
    assert "= 279552 bytes > 232448 bytes (sm_90 limit)" in msg
    assert report.violations[0].hint == "at most 4 stages fit this tile; lower stages or tile_k"


def test_smem_alignment():
    program = build_gemm_program(GemmConfig())
    dsl = gemm_dsl_program(program)
    base = dsl.tensor("sA").base_bytes
    bad = dsl.replace_tensor("sA", base_bytes=base + 64)
    err, report, msg = _reject(program, bad, rule="smem.alignment")
    v = next(v for v in report.violations if v.rule == "smem.alignment")
    assert v.where.endswith(str(dsl.tensor("sA").loc))
    assert (f"sA base offset {base + 64} bytes is not a multiple of the 1024-byte period of its "
            f"128-byte swizzle ({base + 64} % 1024 = 64)") in msg


def test_registers_pingpong_128x256():
    cfg = GemmConfig(schedule="pingpong", epi_m=64, cluster_m=1, stages=3)
    err, report, msg = _reject(build_gemm_program(cfg), rule="registers")
    assert ("pingpong 128x256 tile: 256 fp32 accumulator registers per consumer thread "
            "(128x256 per warpgroup / 128 threads) + 32 overhead = 288 > 232 registers") in msg
    # the same tile is fine for the cooperative schedule (2 warpgroups split M)
    assert "registers" not in verify_gemm(build_gemm_program(cfg.replace(schedule="cooperative",
                                                                          epi_m=128))).rules_violated()


def test_tma_box_extent():
    program = _with_tma(build_gemm_program(GemmConfig(cluster_m=1)), "B", box=(64, 512))
    err, report, msg = _reject(program, rule="tma.box_extent")
    assert "TMA B load box (64, 512): dim 1 = 512 elements > 256" in msg


def test_tma_box_inner_bytes():
    program = _with_tma(build_gemm_program(GemmConfig()), "A", box=(72, 128))
    err, report, msg = _reject(program, rule="tma.box_inner_bytes")
    assert "TMA A load inner box 72 x 2 bytes = 144 bytes > 128-byte swizzle span" in msg
    program = _with_tma(build_gemm_program(GemmConfig()), "A", box=(60, 128))
    _, _, msg = _reject(program, rule="tma.box_inner_bytes")
    assert "inner box 60 x 2 bytes = 120 bytes is not a multiple of 16" in msg


def test_tma_image_not_bijective():
    program = _with_tma(build_gemm_program(GemmConfig(cluster_m=1)), "B", box=(48, 256))
    err, report, msg = _reject(program, rule="tma.image")
    assert ("TMA load into sB (box (48, 256), SW128): 2720 writes outside the 65536-element buffer, "
            "8160 elements written twice, 10880 elements never written") in msg
    v = next(v for v in report.violations if v.rule == "tma.image")
    assert v.invariant == "G5" and "gemm_dsl.py" in v.where


def test_gmma_n():
    cfg = GemmConfig(tile_n=264, epi_n=24, cluster_m=1, stages=3)
    err, report, msg = _reject(build_gemm_program(cfg), rule="gmma.n")
    assert "GMMA N = 264 (tile_n 264) is not a multiple of 8 in [8, 256]" in msg
    # the enumeration is skipped (its domain is ill-formed) and says so
    assert any("mma.k_agreement not checked" in n for n in report.notes)


def test_gmma_m_tile():
    cfg = GemmConfig(tile_m=64, tile_n=128, cluster_m=1)
    err, report, msg = _reject(build_gemm_program(cfg), rule="gmma.m_tile")
    assert "tile_m 64 is not a multiple of 64 x 2 (cooperative GMMA atoms along M) = 128" in msg


def test_epilogue_tile():
    cfg = GemmConfig(epi_n=24)
    err, report, msg = _reject(build_gemm_program(cfg), rule="epilogue.tile")
    assert "epi_n 24 does not divide tile_n 256" in msg
    assert "epi_n 24 is not a multiple of 16 (24 % 16 = 8)" in msg
    cfg = GemmConfig(tile_n=128, schedule="pingpong", epi_m=128, cluster_m=1)
    _, _, msg = _reject(build_gemm_program(cfg), rule="epilogue.tile")
    assert "epi_m 128 != 64 required by the pingpong TMA epilogue" in msg


def test_cluster():
    cfg = GemmConfig(cluster_m=4, cluster_n=4, stages=3)
    err, report, msg = _reject(build_gemm_program(cfg), rule="cluster")
    assert "cluster 4x4 = 16 CTAs > 8 (portable cluster size)" in msg


def test_stages():
    err, report, msg = _reject(build_gemm_program(GemmConfig(stages=1)), rule="stages")
    assert "1 pipeline stage(s) < 2" in msg


def test_resource_rules_collect_every_violation():
    cfg = GemmConfig(stages=1, cluster_m=4, cluster_n=4, epi_n=24)
    report = verify_gemm(build_gemm_program(cfg))
    assert {"stages", "cluster", "epilogue.tile"} <= set(report.rules_violated())
    assert len([v for v in report.violations if v.rule == "epilogue.tile"]) == 2
    text = report.format()
    assert "REJECTED" in text and "[stages]" in text and "[cluster]" in text


def test_mma_side_swizzle_mismatch_gives_counterexample():
    """The MMA reads A with SW64's swizzle bits over the SW128 layout that TMA wrote."""
    program = build_gemm_program(GemmConfig())
    dsl = gemm_dsl_program(program)
    tma_layout = dsl.tensor("sA").layout
    bad = dsl.replace_read("A", layout=SwizzledLayout(Swizzle(2, 3, 3), tma_layout.layout))
    err, report, msg = _reject(program, bad, rule="mma.k_agreement")
    # resources are all fine; an SW64 swizzle over SW128 row strides is not even a canonical
    # GMMA layout, so no descriptor can express it either
    assert report.rules_violated() == ["mma.k_agreement", "gmma.descriptor"]
    v = report.violations[0]
    cex = v.counterexample
    assert cex is not None and cex.invariant == "G1" and cex.engine == "enum"
    assert cex.program_point == "mainloop.gemm" and cex.stage == 0 and cex.k_block == 0
    assert "gemm_dsl.py" in v.where
    m, n, k = cex.slot["m"], cex.slot["n"], cex.slot["k"]
    # independently: the element the MMA reads holds a different k than the slot's k
    load = bad.load_into("sA")
    img = tag_image(bad, load)
    off = cex.smem_offset["A"]
    assert off == int(bad.read("A").layout(m, k, cex.stage))
    assert int(img.fields["k"][off]) != k
    assert f"A(m={int(img.fields['m'][off])}, k={int(img.fields['k'][off])}, iter=0)" in cex.actual
    assert f"A smem elem {off}" in cex.format()
    assert "threadIdx.x=" in cex.format() and f"D({m},{n})" in cex.register
    assert f"m={m} n={n}" in msg and "operand slots disagree" in msg
    assert "Swizzle<2,3,3>" in cex.provenance and "SW128" in cex.provenance


def test_mma_side_atom_mismatch_on_b():
    program = build_gemm_program(GemmConfig(layout="nt", cluster_m=1, stages=3))
    bad = gemm_dsl_program(program, mma_atoms={"B": GmmaSmemAtom("MN", 64, 16)})
    _, report, msg = _reject(program, bad, rule="mma.k_agreement")
    cex = report.violations[0].counterexample
    # B is read wrong, so the reported pair sits on a B slot (n > 0) against A's row 0
    assert cex.slot["m"] == 0 and cex.slot["n"] > 0


def test_counterexample_thread_mapping_uses_clayout():
    program = build_gemm_program(GemmConfig())
    dsl = gemm_dsl_program(program)
    bad = dsl.replace_read("A", layout=SwizzledLayout(Swizzle(2, 3, 3), dsl.tensor("sA").layout.layout))
    cex = verify_gemm(program, bad).violations[0].counterexample
    # D(m, n) of warpgroup 0: row m -> warp 4 + m // 16 (consumer WG0 = threads 128..255),
    # lane 4 * (m % 8) + (n % 8) // 2 (PTX ISA 9.7.15.4)
    m, n = cex.slot["m"], cex.slot["n"]
    assert cex.thread["warp"] == 4 + (m % 64) // 16
    assert cex.thread["lane"] == 4 * (m % 8) + (n % 8) // 2
    assert np.int64(cex.thread["threadIdx"]) == 32 * cex.thread["warp"] + cex.thread["lane"]


def test_tile_scheduler_streamk_needs_cooperative():
    cfg = GemmConfig(tile_m=64, tile_n=128, cluster_m=1, stages=8, schedule="pingpong", epi_m=64,
                     scheduler="streamk")
    err, report, msg = _reject(build_gemm_program(cfg), rule="tile_scheduler")
    assert "scheduler 'streamk' needs schedule 'cooperative', not 'pingpong'" in msg


def test_tile_scheduler_splitk_needs_two_splits():
    cfg = GemmConfig(tile_n=128, cluster_m=1, stages=6, scheduler="splitk", splits=1)
    err, report, msg = _reject(build_gemm_program(cfg), rule="tile_scheduler")
    assert "scheduler 'splitk' with splits=1: split-K needs splits >= 2" in msg
