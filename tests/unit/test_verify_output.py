"""G2 / G4 / G8: epilogue store coordinates, output and scheduler bijection, residue masking."""

from __future__ import annotations

import numpy as np
import pytest

from argus_cutlass.errors import VerificationError
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.programs.gemm import build_gemm_program
from argus_cutlass.programs.gemm_dsl import gemm_dsl_program
from argus_cutlass.verify import check_gemm, verify_gemm
from argus_cutlass.verify.output import accumulator_map, schedule_units

COOP = GemmConfig()  # 128x256, 2 consumer warpgroups
PP = GemmConfig(tile_m=64, tile_n=128, cluster_m=1, schedule="pingpong", epi_m=64, stages=8)
SWAP = GemmConfig(tile_m=64, tile_n=16, cluster_m=1, stages=12, schedule="pingpong", epi_m=64, epi_n=16, swap_ab=True)


def _reject(cfg, **change):
    program = build_gemm_program(cfg)
    dsl = gemm_dsl_program(program)
    for what, kw in change.items():
        dsl = getattr(dsl, f"replace_{what}")(**kw)
    with pytest.raises(VerificationError) as info:
        check_gemm(program, dsl)
    return info.value.report


@pytest.mark.parametrize("cfg", [COOP, PP, SWAP], ids=["coop", "pp", "swap"])
def test_accumulators_partition_the_tile(cfg):
    dsl = gemm_dsl_program(build_gemm_program(cfg))
    wg, th, reg, m, n = accumulator_map(dsl)
    assert m.size == cfg.tile_m * cfg.tile_n
    assert np.unique(m * cfg.tile_n + n).size == m.size
    assert set(np.unique(wg)) == set(range(2 if cfg.schedule == "cooperative" else 1))
    # registers per thread: the tile over 128 threads x warpgroups
    assert reg.max() + 1 == cfg.tile_m * cfg.tile_n // (128 * (wg.max() + 1))
    report = verify_gemm(build_gemm_program(cfg))
    proved = {p.rule for p in report.proofs}
    assert {"output.bijection", "epilogue.coordinate", "residue.store", "scheduler.bijection"} <= proved


def test_epilogue_thread_map_off_by_a_warp_is_g2():
    report = _reject(COOP, epilogue={"row_offset": 16})
    assert report.rules_violated() == ["epilogue.coordinate"]
    v = report.violations[0]
    cex = v.counterexample
    assert v.invariant == cex.invariant == "G2" and cex.program_point == "epilogue.store"
    assert cex.thread["threadIdx"] == 128 and cex.register == "accum[0]"
    assert cex.expected.startswith("store at D(0,0)") and "D(16,0)" in cex.actual
    assert "gemm_dsl.py" in v.where


def test_unmasked_residue_store_is_g8_with_the_smallest_m():
    report = _reject(PP, epilogue={"residue_mask": False})
    v = next(v for v in report.violations if v.rule == "residue.store")
    cex = v.counterexample
    assert v.invariant == "G8" and cex.params["M"] == PP.tile_m + 1
    assert cex.element["m"] >= cex.params["M"]  # the store lands past the last row
    assert "outside" in cex.actual


@pytest.mark.parametrize("delta,what", [(-1, "no CTA"), (1, "no CTA")])
def test_scheduler_step_off_by_one_is_g4(delta, what):
    report = _reject(COOP, schedule={"step_delta": delta})
    v = next(v for v in report.violations if v.rule == "scheduler.bijection")
    assert v.invariant == "G4" and v.counterexample.engine == "enum"
    assert what in v.counterexample.actual or "never leaves" in v.counterexample.actual


def test_overlapping_units_are_found_at_grid_2():
    counts = schedule_units(3, grid=2, step=1)  # step = grid - 1
    assert counts.tolist() == [1, 2, 2]  # units 1 and 2 computed twice (a race on D)
    assert schedule_units(5, grid=2, step=2).tolist() == [1] * 5


@pytest.mark.parametrize("raster", ["along_n", "along_m"])
@pytest.mark.parametrize("swizzle", [1, 2, 4, 8])
def test_shipped_walks_are_proved_and_a_swizzle_slip_is_g4(raster, swizzle):
    cfg = COOP.replace(raster=raster, swizzle=swizzle)
    program = build_gemm_program(cfg)
    dsl = gemm_dsl_program(program)
    from argus_cutlass.verify.output import check_schedule

    proofs, bad = check_schedule(dsl)
    assert not bad and "bijection on all 144 tile grids" in proofs[0].summary
    if swizzle > 1:
        report = verify_gemm(program, dsl.replace_schedule(walk_mutation="swizzle_off_by_one"), smt=False)
        v = next(v for v in report.violations if v.rule == "scheduler.bijection")
        assert v.invariant == "G4" and "tile" in v.counterexample.actual


@pytest.mark.parametrize("scheduler,splits,mutation,kind", [
    ("splitk", 3, (("drop_remainder", True),), "by no CTA"),
    ("splitk", 2, (("overlap", 1),), "computed 2 times"),
    ("streamk", 1, (("overlap", 1),), "computed 2 times"),
])
def test_stream_k_and_split_k_division_mistakes_are_g4(scheduler, splits, mutation, kind):
    cfg = GemmConfig(tile_n=128, cluster_m=1, stages=6, scheduler=scheduler, splits=splits)
    program = build_gemm_program(cfg)
    dsl = gemm_dsl_program(program)
    assert verify_gemm(program, dsl, smt=False).ok
    report = verify_gemm(program, dsl.replace_schedule(division_mutation=mutation), smt=False)
    assert report.rules_violated() == ["scheduler.bijection"]
    cex = report.violations[0].counterexample
    assert cex.invariant == "G4" and cex.k_tile >= 0 and kind in cex.actual and cex.params["k_tiles"] >= 1


def test_epilogue_tma_store_swizzle_mismatch_is_g2():
    program = build_gemm_program(COOP)
    dsl = gemm_dsl_program(program)
    st = dsl.stores[0]
    assert (st.copy.swizzle_bytes, st.major, dsl.tensor("sD").swizzle_bytes) == (64, "K", 64)
    import dataclasses

    bad = dsl.replace_store("sD", copy=dataclasses.replace(st.copy, swizzle_bytes=32))
    report = verify_gemm(program, bad)
    assert report.rules_violated() == ["epilogue.tma_store"]
    cex = report.violations[0].counterexample
    assert cex.invariant == "G2" and cex.element["tensor"] == "D" and "sD elem" in " ".join(cex.chain)


def test_swap_ab_stages_d_column_major():
    dsl = gemm_dsl_program(build_gemm_program(SWAP))
    st = dsl.stores[0]
    assert st.major == "MN" and st.copy.box == (64, 16)  # M contiguous: the box's inner extent is along M
    assert any(p.rule == "epilogue.tma_store" for p in verify_gemm(build_gemm_program(SWAP)).proofs)


@pytest.mark.parametrize("scheduler,splits,mutation", [
    ("splitk", 3, (("drop_remainder", True),)),
    ("splitk", 3, (("overlap", 1),)),
    ("streamk", 1, (("overlap", 1),)),
])
def test_division_is_checked_for_8_cta_clusters(scheduler, splits, mutation):
    cfg = GemmConfig(tile_n=128, cluster_m=4, cluster_n=2, stages=3, scheduler=scheduler, splits=splits)
    program = build_gemm_program(cfg)
    dsl = gemm_dsl_program(program)
    report = verify_gemm(program, dsl, smt=False)
    proof = next(p for p in report.proofs if p.rule == "scheduler.bijection" and "division" in p.summary)
    assert report.ok and "clusters of 8" in proof.summary and " 0 cases" not in proof.summary
    bad = verify_gemm(program, dsl.replace_schedule(division_mutation=mutation), smt=False)
    assert bad.rules_violated() == ["scheduler.bijection"]
