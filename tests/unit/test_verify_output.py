"""G2 / G4 / G8: epilogue store coordinates and source, output and scheduler bijection, residues."""

from __future__ import annotations

import numpy as np
import pytest

from argus_cutlass.errors import VerificationError
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.program import build_program
from argus_cutlass.verify import check_gemm, verify_gemm
from argus_cutlass.verify.output import (
    _division_cases,
    _walk_cases,
    accumulator_map,
    check_schedule,
    schedule_units,
)

COOP = GemmConfig()  # 128x256, 2 consumer warpgroups
PP = GemmConfig(tile_m=64, tile_n=128, cluster_m=1, schedule="pingpong", epi_m=64, stages=8)
SWAP = GemmConfig(tile_m=64, tile_n=16, cluster_m=1, stages=12, schedule="pingpong", epi_m=64, epi_n=16, swap_ab=True)


def _reject(cfg, kind, key=None, **change):
    program = build_program(cfg).replace_node(kind, key, **change)
    with pytest.raises(VerificationError) as info:
        check_gemm(program, smt=False)
    return info.value.report


@pytest.mark.parametrize("cfg", [COOP, PP, SWAP], ids=["coop", "pp", "swap"])
def test_accumulators_partition_the_tile(cfg):
    program = build_program(cfg)
    wg, th, reg, m, n = accumulator_map(program)
    assert m.size == cfg.tile_m * cfg.tile_n
    assert np.unique(m * cfg.tile_n + n).size == m.size
    assert set(np.unique(wg)) == set(range(2 if cfg.schedule == "cooperative" else 1))
    # registers per thread: the tile over 128 threads x warpgroups
    assert reg.max() + 1 == cfg.tile_m * cfg.tile_n // (128 * (wg.max() + 1))
    report = verify_gemm(program)
    proved = {p.rule for p in report.proofs}
    assert {"output.bijection", "epilogue.coordinate", "residue.store", "scheduler.bijection", "epilogue.source",
            "residue.source", "epilogue.tma_store"} <= proved


def test_epilogue_thread_map_off_by_a_warp_is_g2():
    report = _reject(COOP, "epilogue", row_offset=16)
    assert report.rules_violated() == ["epilogue.coordinate"]
    v = report.violations[0]
    cex = v.counterexample
    assert v.invariant == cex.invariant == "G2" and cex.program_point == "epilogue.store"
    assert cex.thread["threadIdx"] == 128 and cex.register == "accum[0]"
    assert cex.expected.startswith("store at D(0,0)") and "D(16,0)" in cex.actual
    assert "program.py" in v.where


def test_epilogue_partition_must_be_the_mmas_tile():
    """An epilogue that walks a 128-row tile of a 64-row MMA would read accumulators that do not exist."""
    report = _reject(PP, "epilogue", tile_m=128)
    assert "epilogue.coordinate" in report.rules_violated()
    v = next(v for v in report.violations if v.rule == "epilogue.coordinate")
    assert "the epilogue partitions a 128x128 tile, but the MMA accumulates 64x128" in v.message


def test_unmasked_residue_store_is_g8_with_the_smallest_m():
    report = _reject(PP, "epilogue", residue_mask=False)
    v = next(v for v in report.violations if v.rule == "residue.store")
    cex = v.counterexample
    assert v.invariant == "G8" and cex.params["M"] == PP.tile_m + 1
    assert cex.element["m"] >= cex.params["M"]  # the store lands past the last row
    assert "outside" in cex.actual


@pytest.mark.parametrize("change,text", [
    ({"path": "none"}, "C source path 'none': C is never read"),
    ({"row_offset": 1}, "the epilogue reads C at row m + 1 for accumulator row m: D(0,0) gets beta * C(1,0)"),
    ({"src": "gD"}, "the epilogue reads C from gD (gmem, shape ('M', 'N'), tag D:(m,n)), not a gmem C:(m,n) tensor"),
])
def test_c_source_path_is_g2(change, text):
    report = _reject(COOP, "source", **change)
    assert report.rules_violated() == ["epilogue.source"]
    v = report.violations[0]
    assert text in v.message and v.counterexample.invariant == "G2"


def test_unmasked_c_loads_are_g8():
    report = _reject(COOP, "source", residue_mask=False)
    assert report.rules_violated() == ["residue.source"]
    cex = report.violations[0].counterexample
    assert cex.invariant == "G8" and cex.params == {"M": 129} and cex.element == {"tensor": "C", "m": 129, "n": 0}


@pytest.mark.parametrize("delta", [-1, 1])
def test_scheduler_step_off_by_one_is_g4(delta):
    report = _reject(COOP, "schedule", step_delta=delta)
    v = next(v for v in report.violations if v.rule == "scheduler.bijection")
    assert v.invariant == "G4" and v.counterexample.engine == "enum"
    assert "no CTA" in v.counterexample.actual or "never leaves" in v.counterexample.actual


def test_overlapping_units_are_found_at_grid_2():
    counts = schedule_units(3, grid=2, step=1)  # step = grid - 1
    assert counts.tolist() == [1, 2, 2]  # units 1 and 2 computed twice (a race on D)
    assert schedule_units(5, grid=2, step=2).tolist() == [1] * 5


@pytest.mark.parametrize("raster", ["along_n", "along_m"])
@pytest.mark.parametrize("swizzle", [1, 2, 4, 8])
def test_shipped_walks_are_proved_and_a_swizzle_slip_is_found(raster, swizzle):
    program = build_program(COOP.replace(raster=raster, swizzle=swizzle))
    proofs, bad = check_schedule(program)
    assert not bad and "bijection on all 144 tile grids" in proofs[0].summary
    if swizzle > 1:  # the engine's walk model, with CUTLASS's swizzle off by one, is not a bijection
        _, problem = _walk_cases(2, 1, raster, swizzle, "swizzle_off_by_one")
        assert problem is not None and problem.check == "walk"


@pytest.mark.parametrize("scheduler,splits,mutation,kind", [
    ("splitk", 3, (("drop_remainder", True),), "by no CTA"),
    ("splitk", 2, (("overlap", 1),), "computed 2 times"),
    ("streamk", 1, (("overlap", 1),), "computed 2 times"),
])
def test_stream_k_and_split_k_divisions_are_proved_and_mistakes_found(scheduler, splits, mutation, kind):
    cfg = GemmConfig(tile_n=128, cluster_m=1, stages=6, scheduler=scheduler, splits=splits)
    report = verify_gemm(build_program(cfg), smt=False)
    assert report.ok and report.complete
    assert any("division computes every (tile, k-tile) once" in p.summary for p in report.proofs)
    mode = "stream_k" if scheduler == "streamk" else "split_k"
    _, problem, _ = _division_cases(mode, 1, splits if mode == "split_k" else 0, mutation)
    assert problem is not None and kind in problem.message


def test_epilogue_tma_store_swizzle_mismatch_is_g2():
    program = build_program(COOP)
    st = program.stores[0]
    assert (st.copy.swizzle_bytes, st.major, program.staging.view.swizzle_bytes) == (64, "K", 64)
    report = verify_gemm(program.replace_node("store", st.name, **{"copy.swizzle_bytes": 32}), smt=False)
    assert "epilogue.tma_store" in report.rules_violated()
    cex = next(v for v in report.violations if v.rule == "epilogue.tma_store").counterexample
    assert cex.invariant == "G2" and cex.element["tensor"] == "D" and "sD elem" in " ".join(cex.chain)


def test_epilogue_tma_store_box_narrower_than_the_staged_rows_is_g2():
    """Boxes of 16 columns over a staging view of 32-column (64-byte) rows: box 0's second row is
    the second half of staged row 0, so D(1,0) gets the element staged for D(0,16)."""
    program = build_program(COOP)
    report = verify_gemm(program.replace_node("store", "tma_store_sD", **{"copy.box": (16, 128)}), smt=False)
    assert report.rules_violated() == ["epilogue.tma_store"]
    cex = report.violations[0].counterexample
    assert cex.actual == "it sends smem elem 16 to D(1,0)" and cex.smem_offset == {"D": 32}


@pytest.mark.parametrize("cfg", [GemmConfig(), GemmConfig(tile_m=64, tile_n=16, cluster_m=1, schedule="pingpong",
                                                            epi_m=64, epi_n=16, stages=8, swap_ab=True)])
@pytest.mark.parametrize("field", ["tile_mn", "tile_k"])
def test_epilogue_tma_store_subtile_smaller_than_the_staged_one_is_g2(cfg, field):
    """A store stating a subtile one row / column smaller than the staging buffer's printed the same (rounded-up)
    box count and verified clean (review, session 44): its subtile must be the staging buffer's."""
    program = build_program(cfg)
    st = program.stores[0]
    report = verify_gemm(program.replace_node("store", st.name, **{field: getattr(st, field) - 1}), smt=False)
    assert report.rules_violated() == ["epilogue.tma_store"]
    assert "subtile" in next(v for v in report.violations if v.rule == "epilogue.tma_store").message


def test_staging_view_of_more_stages_than_the_buffer_is_g2():
    """The staging view's stage count was neither printed nor checked (review sweep, session 44)."""
    program = build_program(GemmConfig())
    view = program.staging.view
    report = verify_gemm(program.replace_node("staging", None, **{"view.shape": view.shape[:2] + (view.shape[2] + 1,)}),
                         smt=False)
    assert report.rules_violated() == ["epilogue.tma_store"]


def test_a_role_of_non_consecutive_warpgroups_is_refused():
    """A role is printed as its first warpgroup and count: (1, 3) is no role the template can print."""
    from argus_cutlass.errors import DslError

    program = build_program(GemmConfig())
    with pytest.raises(DslError, match="consecutive"):
        program.replace_node("role", "consumer", warpgroups=(1, 3))


def test_swap_ab_stages_d_column_major():
    program = build_program(SWAP)
    st = program.stores[0]
    assert st.major == "MN" and st.copy.box == (64, 16)  # M contiguous: the box's inner extent is along M
    assert any(p.rule == "epilogue.tma_store" for p in verify_gemm(program, smt=False).proofs)
    report = verify_gemm(program.replace_node("tensor", "gD", major="N"), smt=False)
    assert "epilogue.tma_store" in report.rules_violated()


@pytest.mark.parametrize("scheduler,splits", [("splitk", 3), ("streamk", 1)])
def test_division_is_checked_for_8_cta_clusters(scheduler, splits):
    cfg = GemmConfig(tile_n=128, cluster_m=4, cluster_n=2, stages=3, scheduler=scheduler, splits=splits)
    report = verify_gemm(build_program(cfg), smt=False)
    proof = next(p for p in report.proofs if p.rule == "scheduler.bijection" and "division" in p.summary)
    assert report.ok and "clusters of 8" in proof.summary and " 0 cases" not in proof.summary


def test_non_power_of_two_cluster_is_unknown_not_proved():
    report = verify_gemm(build_program(GemmConfig(cluster_m=3, tile_n=192, stages=3)), smt=False)
    assert report.ok and not report.complete and not report.verified
    assert [u.rule for u in report.unknowns] == ["scheduler.bijection"]
    assert "power-of-two" in report.unknowns[0].reason
    assert "scheduler.bijection" in report.not_proved[0]
    assert "INCOMPLETE (1 unknown: not proved)" in report.format().splitlines()[0]
