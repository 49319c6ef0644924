"""``tma.multicast`` (G5 across a cluster): who delivers which operand rows to whom."""

from __future__ import annotations

import pytest

from argus_cutlass.errors import DslError
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.programs.gemm import build_gemm_program
from argus_cutlass.programs.gemm_dsl import gemm_dsl_program
from argus_cutlass.verify import verify_gemm
from argus_cutlass.verify.multicast import check_multicast, deliveries

C2X2 = GemmConfig(cluster_m=2, cluster_n=2)


def _dsl(cfg: GemmConfig = C2X2):
    return gemm_dsl_program(build_gemm_program(cfg))


@pytest.mark.parametrize("cm,cn", [(2, 1), (1, 2), (2, 2), (4, 2), (2, 4)])
def test_cutlass_slicing_and_masks_deliver_every_row_once(cm, cn):
    cfg = GemmConfig(cluster_m=cm, cluster_n=cn, stages=3)
    dsl = _dsl(cfg)
    proofs, bad = check_multicast(dsl)
    assert not bad
    assert len(proofs) == (cm > 1) + (cn > 1)
    for ld in dsl.loads:
        if ld.copy.multicast > 1:
            count, src = deliveries(ld)
            assert count.shape == (cm, cn, ld.tile_mn) and (count == 1).all() and (src == 0).all()


def test_unclustered_program_has_no_multicast_obligation():
    report = verify_gemm(build_gemm_program(GemmConfig(cluster_m=1, cluster_n=1)), smt=False)
    assert "tma.multicast" not in {o.rule for o in report.obligations}


def test_mask_along_the_wrong_cluster_mode_duplicates_rows():
    dsl = _dsl().replace_load("sA", mask_axis="m")
    count, _ = deliveries(dsl.load_into("sA"))
    assert count[0, 0, 0] == 2  # its own slice 0 and CTA (1,0)'s slice 0 (another m-block)
    _, bad = check_multicast(dsl)
    c = bad[0].counterexample
    assert bad[0].rule == "tma.multicast" and c.invariant == "G5"
    assert c.thread == {"cta": 0, "cluster_m": 0, "cluster_n": 0} and c.slot == {"mn": 0}
    assert "CTA (0, 0) issues A slice 0" in c.chain and "CTA (1, 0) issues A slice 0" in c.chain


def test_mask_without_the_issuer_misses_its_slice():
    dsl = _dsl().replace_load("sB", mask_self=False)
    count, _ = deliveries(dsl.load_into("sB"))
    assert (count[0, 0, :128] == 0).all() and (count[0, 0, 128:] == 1).all()  # slice 0 is CTA (0,0)'s own
    _, bad = check_multicast(dsl)
    assert "no CTA delivers row 0" in bad[0].message


def test_row_major_rank_sends_rows_of_another_m_block():
    _, bad = check_multicast(_dsl().replace_load("sA", rank_order="row"))
    assert "m-block +1" in bad[0].message and bad[0].counterexample.thread["cluster_n"] == 1


def test_multicast_load_needs_a_share_axis():
    from argus_cutlass.dsl.atoms import TmaCopy
    from argus_cutlass.dsl.ir import ProgramBuilder, Tag

    b = ProgramBuilder("p", 2)
    g = b.tensor("gA", "gmem", (128, 64), "bf16", tag=Tag("A", ("m", "k")))
    s = b.tensor("sA", "smem", (128, 64, 2), "bf16", layout=None)
    with pytest.raises(DslError) as info:
        b.tma_load(g, s, TmaCopy("load_multicast", (64, 64), 16, 128, 2), major="K", tile_mn=128, tile_k=64,
                   stage_tag=Tag("stage", ("iter",)), cluster=(1, 2))
    assert info.value.rule == "dsl.operand" and "share_axis" in str(info.value)


@pytest.mark.parametrize("swap_ab", [False, True])
@pytest.mark.parametrize("scheduler,splits", [("persistent", 1), ("streamk", 1), ("splitk", 3)])
def test_no_false_alarm_across_clusters_schedulers_and_epilogues(scheduler, splits, swap_ab):
    """The multicast, staging and scheduler rules accept every correct variant (CUTLASS builds them)."""
    for (cm, cn), out in [((1, 1), "bf16"), ((2, 1), "fp32"), ((1, 2), "bf16"), ((2, 2), "bf16"), ((2, 2), "fp32")]:
        cfg = GemmConfig(tile_m=128, tile_n=128, cluster_m=cm, cluster_n=cn, scheduler=scheduler, splits=splits,
                         swap_ab=swap_ab, out_dtype=out, stages=4)
        report = verify_gemm(build_gemm_program(cfg), smt=False)
        assert report.ok, (cfg, report.rules_violated())
        proved = {p.rule for p in report.proofs}
        assert {"epilogue.stmatrix", "epilogue.stage_reuse", "scheduler.bijection"} <= proved
        assert ("tma.multicast" in proved) == (cm * cn > 1)


@pytest.mark.parametrize("changes,text", [
    ({"cluster": (0, 1)}, "two positive ints"),
    ({"cluster": (8, 4)}, "16 bits"),
    ({"rank_order": "diag"}, "expected 'col' or 'row'"),
    ({"mask_axis": "k"}, "expected 'm' or 'n'"),
])
def test_replace_load_validates_multicast_fields(changes, text):
    with pytest.raises(DslError, match=text):
        _dsl().replace_load("sA", **changes)


@pytest.mark.parametrize("changes,text", [
    ({"splits": 0}, "ints >= 1"),
    ({"swizzle": 3}, "1, 2, 4 or 8"),
    ({"splits": 2}, "needs decomposition 'splitk'"),
    ({"walk_mutation": "typo"}, "walk_mutation"),
    ({"division_mutation": (("bogus", 1),)}, "division_mutation keys"),
])
def test_replace_schedule_validates(changes, text):
    with pytest.raises(DslError, match=text):
        _dsl().replace_schedule(**changes)


def test_non_power_of_two_cluster_is_reported_not_raised():
    report = verify_gemm(build_gemm_program(GemmConfig(cluster_m=3)), smt=False)
    assert not report.ok and "cluster" in report.rules_violated()
    assert any("power-of-two" in u.reason for u in report.unknowns)
