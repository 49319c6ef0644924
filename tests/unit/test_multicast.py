"""``tma.multicast`` (G5 across a cluster): who delivers which operand rows to whom."""

from __future__ import annotations

import pytest

from argus_cutlass.errors import DslError
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.program import build_program
from argus_cutlass.verify import verify_gemm
from argus_cutlass.verify.multicast import check_multicast, cta_of_rank, deliveries, mask_bits, probe_tables

C2X2 = GemmConfig(cluster_m=2, cluster_n=2, stages=3)


def _dsl(cfg: GemmConfig = C2X2):
    return build_program(cfg)


def _load(program, dst, **changes):
    name = program.load_into(dst).name
    return program.replace_node("load", name, **changes) if changes else program


@pytest.mark.parametrize("raster", ["along_n", "along_m"])
@pytest.mark.parametrize("cm,cn", [(2, 1), (1, 2), (2, 2), (4, 2), (2, 4)])
def test_kernel_slicing_and_masks_deliver_every_box_once(cm, cn, raster):
    program = _dsl(GemmConfig(cluster_m=cm, cluster_n=cn, stages=3, raster=raster))
    proofs, bad = check_multicast(program)
    assert not bad
    assert len(proofs) == 2  # both loads: the multicast ones and the plain ones (issued by each CTA itself)
    for ld in program.loads:
        count, src = deliveries(ld, raster)
        assert count.shape == (cm, cn, ld.boxes) and (count == 1).all() and (src == 0).all()


def test_hardware_rank_follows_the_schedules_placement():
    """The mask bit of CTA (i, j) is its rank under the placement the walk gives it (rank_order
    "col" inverts along_n, "row" inverts along_m)."""
    for raster, order in (("along_n", "col"), ("along_m", "row")):
        p = _dsl(GemmConfig(cluster_m=2, cluster_n=2, stages=3, raster=raster))
        ld = p.load_into("sA")
        assert ld.rank_order == order
        for r in range(4):
            i, j = cta_of_rank((2, 2), raster, r)
            assert mask_bits(ld, (i, j)) >> r & 1  # every CTA names itself


def test_unclustered_program_has_no_multicast_obligation():
    report = verify_gemm(build_program(GemmConfig(cluster_m=1, cluster_n=1)), smt=False)
    assert "tma.multicast" not in {o.rule for o in report.obligations}


def test_mask_along_the_wrong_cluster_mode_duplicates_boxes():
    program = _load(_dsl(), "sA", mask_axis="m")
    count, _ = deliveries(program.load_into("sA"))
    assert count[0, 0, 0] == 2  # its own slice 0 and CTA (1,0)'s slice 0 (another m-block)
    _, bad = check_multicast(program)
    c = bad[0].counterexample
    assert bad[0].rule == "tma.multicast" and c.invariant == "G5"
    assert c.thread == {"cta": 0, "cluster_m": 0, "cluster_n": 0} and c.slot == {"box": 0}
    assert "CTA (0, 0) issues A slice 0" in c.chain and "CTA (1, 0) issues A slice 0" in c.chain


def test_mask_without_the_issuer_misses_its_slice():
    program = _load(_dsl(), "sB", mask_self=False)
    ld = program.load_into("sB")
    count, _ = deliveries(ld)
    half = ld.boxes // 2
    assert (count[0, 0, :half] == 0).all() and (count[0, 0, half:] == 1).all()  # slice 0 is CTA (0,0)'s own
    _, bad = check_multicast(program)
    assert "no CTA delivers box 0" in bad[0].message


def test_row_major_rank_sends_boxes_of_another_m_block():
    _, bad = check_multicast(_load(_dsl(), "sA", rank_order="row"))
    assert "m-block +1" in bad[0].message and bad[0].counterexample.thread["cluster_n"] == 1


@pytest.mark.parametrize("kind", ["load", "load_multicast"])
def test_tma_op_kind_must_match_the_multicast(kind):
    """A multicast load issued as a plain load (each CTA gets only its own slice: a hang), or a plain
    load issued as a multicast one (an empty ctaMask: nobody gets the boxes)."""
    program = _dsl()  # 2x2: both loads multicast
    single = _dsl(GemmConfig(cluster_m=2, stages=3))  # 2x1: A is not multicast
    bad_prog = (_load(program, "sA", **{"copy.kind": "load"}) if kind == "load"
                else _load(single, "sA", **{"copy.kind": "load_multicast"}))
    _, bad = check_multicast(bad_prog)
    assert bad and bad[0].rule == "tma.multicast" and "TMA op kind" in bad[0].message
    assert bad[0].counterexample is not None


def test_probe_tables_replay_the_kernels_ranks():
    t = probe_tables(_dsl().load_into("sA"))
    assert t.complete.all() and not t.overfilled.any() and not t.ambiguous.any()
    assert t.tile_rows == _dsl().load_into("sA").boxes and t.rows_per_slice * 2 == t.tile_rows
    bad = probe_tables(_load(_dsl(), "sA", mask_self=False).load_into("sA"))
    assert not bad.complete.all()


def test_multicast_load_needs_a_share_axis():
    from argus_cutlass.dsl.atoms import TmaCopy
    from argus_cutlass.dsl.builder import ProgramBuilder
    from argus_cutlass.dsl.ir import Tag

    b = ProgramBuilder("p")
    g = b.tensor("gA", "gmem", ("M", "K"), "bf16", tag=Tag("A", ("m", "k")), major="K", binding="A")
    s = b.tensor("sA", "smem", (128, 64, 2), "bf16")
    with pytest.raises(DslError) as info:
        b.tma_load(g, s, TmaCopy("load_multicast", (64, 64), 16, 128, 2), major="K", tile_mn=128, tile_k=64,
                   stage_tag=Tag("stage", ("iter",)), cluster=(1, 2))
    assert info.value.rule == "dsl.operand" and "share_axis" in str(info.value)


@pytest.mark.parametrize("swap_ab", [False, True])
@pytest.mark.parametrize("scheduler,splits", [("persistent", 1), ("streamk", 1), ("splitk", 3)])
def test_no_false_alarm_across_clusters_schedulers_and_epilogues(scheduler, splits, swap_ab):
    """The multicast, staging and scheduler rules accept every correct variant."""
    for (cm, cn), out in [((1, 1), "bf16"), ((2, 1), "fp32"), ((1, 2), "bf16"), ((2, 2), "bf16"), ((2, 2), "fp32")]:
        cfg = GemmConfig(tile_m=128, tile_n=128, cluster_m=cm, cluster_n=cn, scheduler=scheduler, splits=splits,
                         swap_ab=swap_ab, out_dtype=out, stages=4)
        report = verify_gemm(build_program(cfg), smt=False)
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
        _load(_dsl(), "sA", **changes)


@pytest.mark.parametrize("changes,text", [
    ({"splits": 0}, "ints >= 1"),
    ({"swizzle": 3}, "1, 2, 4 or 8"),
    ({"splits": 2}, "needs decomposition 'splitk'"),
])
def test_replace_schedule_validates(changes, text):
    with pytest.raises(DslError, match=text):
        _dsl().replace_node("schedule", **changes)


def test_non_power_of_two_cluster_is_reported_not_raised():
    report = verify_gemm(build_program(GemmConfig(cluster_m=3)), smt=False)
    assert not report.ok and "cluster" in report.rules_violated()
    assert any("power-of-two" in u.reason for u in report.unknowns)
