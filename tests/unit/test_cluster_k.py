"""Cluster-K (schedule node ``clusterk``): a cluster of ``splits`` CTAs shares one output tile and splits its
k loop; the partial sums meet in rank 0 through distributed shared memory.

The k split is rule ``scheduler.bijection`` (G4): every k-tile of ``[0, k_tiles)`` summed by exactly one rank.
The reduction is rule ``scheduler.cluster_reduce`` (G4): rank 0 adds every other rank's partial once, nothing
undefined, each remote read after its write and before its owner exits, into a buffer that holds the tile.
Each mistake field of the node is rejected by its rule with a counterexample naming the rank and the k-tile or
register; the DSL refuses malformed clusterk nodes.
"""

from __future__ import annotations

import dataclasses

import pytest

from argus_cutlass.dsl.ir import SourceLoc, TileSchedule
from argus_cutlass.errors import DslError
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.program import build_program
from argus_cutlass.verify import verify_gemm
from argus_cutlass.verify.output import (
    _reduce_happens_before,
    check_cluster_reduce,
    cluster_k_bound,
    cluster_k_cover,
)

CK = GemmConfig(tile_m=128, tile_n=16, tile_k=64, cluster_m=1, cluster_n=1, stages=8, schedule="cooperative",
                epi_m=128, epi_n=16, scheduler="clusterk", splits=4, swap_ab=True)
LOC = SourceLoc("test_cluster_k.py", 1)


def _node(**kw) -> TileSchedule:
    fields = {"splits": 4, "reduce_buffer": "sR", **kw}
    return TileSchedule("along_n", 1, 0, fields.pop("decomposition", "clusterk"), LOC, **fields)


@pytest.fixture(scope="module")
def program():
    return build_program(CK)


def _report(program, kind="schedule", key=None, **change):
    return verify_gemm(program.replace_node(kind, key, **change), smt=False)


# ------------------------------------------------------------------------------------- the model itself


@pytest.mark.parametrize("splits,k_tiles", [(2, 1), (4, 1), (4, 3), (8, 5), (3, 10), (4, 10), (4, 17), (8, 64),
                                            (7, 100)])
def test_cluster_k_range_tiles_the_k_loop(splits, k_tiles):
    s = _node(splits=splits)
    ranges = [s.cluster_k_range(r, k_tiles) for r in range(splits)]
    covered = [k for start, count in ranges for k in range(start, start + count)]
    assert covered == list(range(k_tiles))                     # contiguous, in rank order, each k-tile once
    counts = [count for _, count in ranges]
    assert max(counts) - min(counts) <= 1 and counts == sorted(counts, reverse=True)   # balanced, big ranks first
    if k_tiles < splits:
        assert counts.count(0) == splits - k_tiles             # the ranks beyond k_tiles sum nothing


def test_cluster_k_range_without_the_remainder_drops_k_tiles():
    s = _node(split_remainder=False)
    assert [s.cluster_k_range(r, 10) for r in range(4)] == [(0, 2), (2, 2), (4, 2), (6, 2)]   # k-tiles 8, 9 lost
    assert [s.cluster_k_range(r, 3) for r in range(4)] == [(0, 0)] * 4


def test_cluster_k_cover_enumerates_and_finds_the_first_bad_k_tile():
    cases, problem = cluster_k_cover(_node(splits=3))
    assert problem is None and cases == cluster_k_bound(3) == 15
    cases, problem = cluster_k_cover(_node(splits=3, split_remainder=False))
    k_tiles, k_tile, takers, ranges = problem
    assert (cases, k_tiles, k_tile, takers) == (1, 1, 0, ())   # k_tiles = 1: no rank sums k-tile 0
    assert ranges == ((0, 0), (0, 0), (0, 0))


def test_happens_before_of_the_cluster_barriers():
    assert _reduce_happens_before(4, (1, 2, 3), release=True) == []
    # without the second barrier nothing orders rank p's exit after rank 0's read of its buffer
    assert _reduce_happens_before(4, (1, 2, 3), release=False) == [("exit", 1), ("exit", 2), ("exit", 3)]
    assert _reduce_happens_before(2, (), release=False) == []   # nothing read remotely, nothing to keep


# ---------------------------------------------------------------------------------------- the verifier


def test_correct_clusterk_program_is_proved(program):
    report = verify_gemm(program)
    assert report.ok and report.complete, report.format()
    bij = [p.summary for p in report.proofs if p.rule == "scheduler.bijection"]
    red = [p for p in report.proofs if p.rule == "scheduler.cluster_reduce"]
    assert len(bij) == 2 and all("clusterk" in s for s in bij), bij       # enum and the all-k_tiles argument
    assert "for every k_tiles in [1, 19]" in bij[0] and "Euclidean division" in bij[1]
    assert len(red) == 1 and "clusterk" in red[0].summary and "k_tiles in [1, 9]" in red[0].summary
    assert red[0].invariant == "G4" and red[0].engine == "enum"
    assert any(o.rule == "scheduler.cluster_reduce" for o in report.obligations)


@pytest.mark.parametrize("cfg", [
    GemmConfig(tile_m=128, tile_n=64, cluster_m=1, stages=4, epi_m=128, scheduler="clusterk", splits=2),
    GemmConfig(tile_m=256, tile_n=64, cluster_m=1, stages=3, epi_m=128, scheduler="clusterk", splits=8),
], ids=["128x64-splits2", "256x64-splits8"])
def test_other_clusterk_programs_are_proved(cfg):
    report = verify_gemm(build_program(cfg), smt=False)
    assert report.ok and report.complete, report.format()
    assert {"scheduler.bijection", "scheduler.cluster_reduce"} <= {p.rule for p in report.proofs}


def test_other_schedules_have_no_cluster_reduce_obligation():
    program = build_program(GemmConfig())
    assert check_cluster_reduce(program) == ([], [])
    report = verify_gemm(program, smt=False)
    assert report.ok
    assert "scheduler.cluster_reduce" not in {p.rule for p in report.proofs} | {o.rule for o in report.obligations}


@pytest.mark.parametrize("change,rule,rank,k_tile,register,k_tiles", [
    ({"split_remainder": False}, "scheduler.bijection", 0, 0, "", 1),
    ({"reduce_from": 0}, "scheduler.cluster_reduce", 0, -1, "accum[0]", 1),
    # a partial never added: rank 0's consumer thread 0 stores D without k-tile 1 (rank 1's) in accum[0]
    ({"reduce_from": 2}, "scheduler.cluster_reduce", 0, 1, "accum[0]", 2),
    ({"reduce_from": 4}, "scheduler.cluster_reduce", 0, 1, "accum[0]", 2),
    ({"reduce_zero_empty": False}, "scheduler.cluster_reduce", 1, -1, "accum[0]", 1),
    ({"reduce_release": False}, "scheduler.cluster_reduce", 1, -1, "accum[0]", None),
    ({"reduce_acquire": False}, "scheduler.cluster_reduce", 1, -1, "accum[0]", None),
], ids=["split_remainder", "reduce_from_0", "reduce_from_2", "reduce_from_4", "reduce_zero_empty",
        "reduce_release", "reduce_acquire"])
def test_each_mistake_field_is_rejected_by_its_rule(program, change, rule, rank, k_tile, register, k_tiles):
    report = _report(program, **change)
    assert not report.ok
    assert report.rules_violated() == [rule], report.format()   # one root cause, one rule
    (v,) = report.violations
    cex = v.counterexample
    assert v.invariant == "G4" and cex is not None and cex.rule == rule and cex.engine == "enum"
    assert cex.thread["cta"] == rank and cex.k_tile == k_tile and cex.register == register
    assert cex.program_point in ("tile_scheduler", "tile_scheduler.fixup_cluster")
    assert cex.params["splits"] == 4 and cex.params.get("k_tiles") == k_tiles
    assert cex.expected != cex.actual
    assert k_tile >= 0 or register      # a data element: the k-tile or the register


def test_reduce_release_race_names_the_exit_and_the_remote_read(program):
    cex = _report(program, reduce_release=False).violations[0].counterexample
    assert "exits" in cex.actual and "ld.shared::cluster" in cex.actual
    assert cex.element == {"tensor": "sR", "rank": 1, "index": 0}
    assert any("no second cluster barrier" in step for step in cex.trace)


def test_reduce_acquire_race_names_the_read_before_the_write(program):
    cex = _report(program, reduce_acquire=False).violations[0].counterexample
    assert "before rank 1 wrote it" in cex.actual and cex.element == {"tensor": "sR", "rank": 1, "index": 0}


def test_a_partial_never_added_names_rank_0s_thread_and_its_element_of_d(program):
    cex = _report(program, reduce_from=2).violations[0].counterexample
    assert cex.thread["rank"] == 0 and cex.register == "accum[0]" and cex.k_tile == 1
    assert cex.element["tensor"] == "D" and cex.element["m"] >= 0 and cex.element["n"] >= 0


def test_reduce_from_0_reads_rank_0s_never_written_buffer(program):
    cex = _report(program, reduce_from=0).violations[0].counterexample
    assert cex.element == {"tensor": "sR", "rank": 0, "index": 0} and "no rank" in cex.actual


@pytest.mark.parametrize("shape,register,thread_idx,index", [
    ((64, 16), "accum[4]", 128, 1024),     # half the tile: register 4 of consumer thread 0 is the first out
    ((128, 15), "accum[7]", 256, 1920),    # 128 elements short: register 7 of consumer thread 128 (WG1)
])
def test_reduce_buffer_too_small_names_the_write_that_leaves_it(program, shape, register, thread_idx, index):
    report = _report(program, "tensor", "sR", shape=shape)
    assert report.rules_violated() == ["scheduler.cluster_reduce"], report.format()
    cex = report.violations[0].counterexample
    assert cex.register == register and cex.thread["threadIdx"] == thread_idx and cex.thread["cta"] == 1
    assert cex.element["index"] == index and cex.smem_offset == {"sR": index}


@pytest.mark.parametrize("kind,key,change,what", [
    ("tensor", "sR", {"dtype": "bf16"}, "bf16"),
    ("schedule", None, {"reduce_buffer": "sX"}, "no tensor"),
    ("schedule", None, {"reduce_buffer": "sD"}, "bf16"),   # the epilogue's staging buffer: not fp32, too small
])
def test_reduce_buffer_must_be_an_smem_fp32_tensor(program, kind, key, change, what):
    report = _report(program, kind, key, **change)
    v = next(v for v in report.violations if v.rule == "scheduler.cluster_reduce")
    assert what in v.message and v.counterexample.register == "accum[0]"


# --------------------------------------------------------------------------------------- the DSL refuses


@pytest.mark.parametrize("change,match", [
    ({"splits": 1}, "splits=1"),
    ({"splits": 9}, "splits=9"),
    ({"cluster_m": 2}, "cluster 2x1"),
    ({"consumer_stride": 2}, "consumer_stride 2"),
    ({"reduce_buffer": ""}, "needs reduce_buffer"),
    ({"reduce_from": -1}, "reduce_from -1"),
    ({"reduce_release": 1}, "must be a bool"),
])
def test_dsl_refuses_malformed_clusterk_nodes(program, change, match):
    with pytest.raises(DslError, match=match):
        program.replace_node("schedule", **change)
    with pytest.raises(DslError, match=match):
        _node(**change)


@pytest.mark.parametrize("change", [{"reduce_buffer": "sR"}, {"split_remainder": False}, {"reduce_from": 2},
                                    {"reduce_zero_empty": False}, {"reduce_release": False}])
def test_clusterk_fields_on_a_persistent_schedule_are_refused(change):
    persistent = build_program(GemmConfig())
    assert persistent.schedule.decomposition == "persistent"
    with pytest.raises(DslError, match="describe the clusterk reduction"):
        persistent.replace_node("schedule", **change)
    with pytest.raises(DslError, match="describe the clusterk reduction"):
        dataclasses.replace(_node(decomposition="persistent", splits=1, reduce_buffer=""), **change)



def test_the_launch_has_no_multicast_cluster_beside_the_k_split(program):
    """clusterk launches clusters of its splits CTAs (clusterDim.x = kClusterK, from the schedule node): a launch
    node with a multicast cluster beside it is refused by rule tile_scheduler."""
    report = verify_gemm(program.replace_node("launch", cluster_m=2), smt=False)
    assert "tile_scheduler" in report.rules_violated(), report.format()
    assert any("cannot be beside it" in v.message for v in report.violations if v.rule == "tile_scheduler")


@pytest.mark.parametrize("change,printed", [
    ({}, ("constexpr int kClusterK = 4;", "kSplitRemainder = true;", "kReduceFrom = 1;", "kReduceZeroEmpty = true;",
          "kReduceAcquire = true;", "kReduceRelease = true;")),
    ({"split_remainder": False}, ("kSplitRemainder = false;",)),
    ({"reduce_from": 2}, ("kReduceFrom = 2;",)),
    ({"reduce_zero_empty": False}, ("kReduceZeroEmpty = false;",)),
    ({"reduce_acquire": False}, ("kReduceAcquire = false;",)),
    ({"reduce_release": False}, ("kReduceRelease = false;",)),
], ids=["correct", "split_remainder", "reduce_from", "reduce_zero_empty", "reduce_acquire", "reduce_release"])
def test_every_cluster_k_field_is_printed_into_the_kernel(program, change, printed):
    """What the verifier reasons about is what the template prints: each schedule field, mutated, reaches the .cu
    as the constant the kernel's fixup_cluster and Scheduler::current read."""
    from argus_cutlass.render.gemm import render_gemm

    source = render_gemm(program.replace_node("schedule", **change) if change else program)
    for text in printed:
        assert text in source, text
    for const in ("kSplitRemainder", "kReduceFrom", "kReduceZeroEmpty", "kReduceAcquire", "kReduceRelease"):
        assert f"({const}" in source or f" {const} " in source or f"{const} ?" in source or f"= {const}" in source, const
