"""G6: planted pipeline mistakes are rejected by the enumeration and the SMT tier, with counterexamples."""

from __future__ import annotations

import pytest

from argus_cutlass.errors import VerificationError
from argus_cutlass.hw.semantics import INT_OPS, consumer_counter, pipeline_state, pipeline_step, wait_passes
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.program import build_program
from argus_cutlass.verify import check_gemm, verify_gemm
from argus_cutlass.verify.pipeline import check_protocol, check_tx_bytes, schedule_of
from argus_cutlass.verify.smt import check_pipeline_smt

S4 = GemmConfig()  # 4 stages
S7 = GemmConfig(tile_m=64, tile_n=128, schedule="pingpong", epi_m=64, cluster_m=1, stages=7)


def _pipe(program, producer=None, consumer=None, **changes):
    """``program`` with its mainloop pipeline edited (nested sides as dicts)."""
    ch = dict(changes)
    for side, d in (("producer", producer), ("consumer", consumer)):
        for k, v in (d or {}).items():
            ch[f"{side}.{k}"] = v
    return program.replace_node("pipeline", "mainloop", **ch)


def _rejected(program):
    with pytest.raises(VerificationError) as info:
        check_gemm(program)
    report = info.value.report
    assert all(v.invariant == "G6" for v in report.violations), report.format()
    return report


def _cex(report, rule):
    v = next(v for v in report.violations if v.rule == rule)
    assert v.counterexample is not None and v.counterexample.invariant == "G6"
    assert "program.py" in v.where and v.counterexample.program_point == "mainloop.pipeline"
    return v, v.counterexample


def test_pipeline_node_of_the_program():
    pipe = build_program(S4).pipeline
    assert pipe.stages == S4.stages == 4
    assert (pipe.producer.start_phase, pipe.consumer.start_phase) == (1, 0)
    assert pipe.producer.wrap == pipe.consumer.wrap == 4
    assert pipe.producer.carry_across_tiles and pipe.consumer.carry_across_tiles
    assert pipe.tx_bytes == 49152 and pipe.loads == ("tma_sA", "tma_sB")
    # 2 cooperative warpgroups x (2 + 1 - 1) CTAs of the 2x1 cluster whose loads write a stage
    assert pipe.consumer_arrivals == pipe.consumer_arrivers == 4


def test_closed_form_matches_operator_plus_plus_by_enumeration():
    for wrap in (2, 3, 4, 7):
        idx, ph = 0, 1
        for n in range(5 * wrap):
            assert (idx, ph) == pipeline_state(INT_OPS, n, wrap, 1)
            idx, ph = pipeline_step(INT_OPS, idx, ph, wrap)
    # mbarrier parity wait: passes iff the phase of that parity completed
    assert not wait_passes(INT_OPS, 0, 0) and wait_passes(INT_OPS, 0, 1) and wait_passes(INT_OPS, 1, 0)


@pytest.mark.parametrize("cfg", [S4, S7], ids=["s4", "s7"])
def test_shipped_pipeline_proved_by_every_tier(cfg):
    report = check_gemm(build_program(cfg))
    got = {(p.rule, p.engine) for p in report.proofs}
    assert {("pipeline.tx_bytes", "arith"), ("pipeline.arrivals", "arith"), ("pipeline.protocol", "enum"),
            ("pipeline.state", "smt"), ("pipeline.stage", "smt"), ("pipeline.parity", "smt"),
            ("pipeline.carry", "smt")} <= got
    proto = next(p for p in report.proofs if p.rule == "pipeline.protocol")
    assert f"k_tiles in [1, {2 * cfg.stages + 1}]" in proto.summary and proto.points > 100
    assert any("all i < 2^24" in p.summary for p in report.proofs if p.rule == "pipeline.stage")


def test_consumer_phase_starting_at_1():
    report = _rejected(_pipe(build_program(S4), consumer={"start_phase": 1}))
    assert {"pipeline.protocol", "pipeline.parity"} <= set(report.rules_violated())
    _, cex = _cex(report, "pipeline.protocol")
    # smallest: the very first read passes the barrier before any fill
    assert cex.engine == "enum" and cex.iteration == 0 and cex.stage == 0 and cex.k_tile == 0
    assert cex.thread == {"cta": 0, "threadIdx": 128, "warpgroup": 0, "warp": 4, "lane": 0, "role": "consumer"}
    assert cex.actual == "stage 0 holds never written"
    assert cex.trace == ("C0:wait full[0] parity 1, read stage 0",)
    _v, cex = _cex(report, "pipeline.parity")
    assert cex.engine == "smt" and cex.params == {"tile": 0, "k_tiles": 1, "k_tile": 0, "i": 0}
    assert cex.expected == "wait parity 0 (its stage was filled 0 times before)"
    assert cex.actual == "consumer waits parity 1"


def test_producer_phase_starting_at_0_deadlocks():
    report = _rejected(_pipe(build_program(S4), producer={"start_phase": 0}))
    v, cex = _cex(report, "pipeline.protocol")
    assert "deadlock" in v.message and cex.trace == ()
    v, cex = _cex(report, "pipeline.parity")
    assert cex.thread["role"] == "producer" and cex.thread["threadIdx"] == 0 and cex.iteration == 0
    assert "no release yet (first pass)" in cex.expected


@pytest.mark.parametrize("cfg", [S4, S7], ids=["s4", "s7"])
def test_consumer_stage_index_mod_s_minus_1(cfg):
    S = cfg.stages
    report = _rejected(_pipe(build_program(cfg), consumer={"wrap": S - 1}))
    assert {"pipeline.wrap", "pipeline.protocol", "pipeline.state", "pipeline.stage",
            "pipeline.parity"} <= set(report.rules_violated())
    _, cex = _cex(report, "pipeline.stage")
    # smallest iteration at which i mod (S-1) != i mod S is i = S - 1
    assert cex.engine == "smt" and cex.params["i"] == S - 1 and cex.iteration == S - 1
    assert cex.expected == f"stage {S - 1} (= i mod {S})" and cex.actual == "consumer uses stage 0"
    _v, cex = _cex(report, "pipeline.state")
    assert cex.params == {"n": S - 2} and f"wraps at {S - 1}, not {S} stages" in cex.actual


@pytest.mark.parametrize("delta", [-1, 1], ids=["one_box_short", "one_box_extra"])
def test_tx_bytes_off_by_one_box(delta):
    program = build_program(S4)
    box = program.load_into("sA").copy.box_bytes
    bad = _pipe(program, tx_bytes=program.pipeline.tx_bytes + delta * box)
    report = _rejected(bad)
    v, cex = _cex(report, "pipeline.tx_bytes")
    assert f"expect_tx {49152 + delta * box} bytes != 49152 bytes" in v.message
    assert "tma_sA 1 x 16384 + tma_sB 2 x 16384" in v.message
    assert cex.thread["role"] == "producer" and cex.stage == 0
    v, cex = _cex(report, "pipeline.protocol")
    if delta < 0:  # the barrier completes early: the consumer reads a partial stage
        assert cex.iteration == 0 and "iteration 0's data (partial)" in cex.actual
    else:  # the barrier never completes
        assert "deadlock" in v.message
    assert check_tx_bytes(program)[1] == []


def test_pipeline_reset_per_tile_consumer_only():
    report = _rejected(_pipe(build_program(S4), consumer={"carry_across_tiles": False}))
    assert {"pipeline.protocol", "pipeline.stage", "pipeline.carry"} <= set(report.rules_violated())
    _, cex = _cex(report, "pipeline.protocol")
    # one k-tile per tile: tile 1's consumer re-reads stage 0 = iteration 0's (stale) data
    assert cex.iteration == 1 and cex.params == {"k_tiles": 1, "tile": 1} and cex.stage == 0
    assert cex.actual == "stage 0 holds iteration 0's data (complete)"
    _v, cex = _cex(report, "pipeline.carry")
    assert cex.params == {"tile": 1, "k_tiles": 1}
    assert cex.actual == "consumer restarts tile 1 at (0, 0)"


def test_pipeline_reset_per_tile_both_sides():
    """Both sides reset: consistent with each other, but tile 1's producer waits on a release
    parity that already flipped: the SMT tier finds it for every k_tiles not a multiple of 2S."""
    bad = _pipe(build_program(S7), producer={"carry_across_tiles": False}, consumer={"carry_across_tiles": False})
    report = _rejected(bad)
    assert {"pipeline.protocol", "pipeline.carry"} <= set(report.rules_violated())
    _v, cex = _cex(report, "pipeline.carry")
    assert cex.params == {"tile": 1, "k_tiles": 1}


def test_reset_invisible_when_k_tiles_multiple_of_2s_but_smt_finds_it():
    """VERIFIER.md pitfall 3: with k_tiles = 2S the per-tile reset is harmless, so a concrete
    check at K = 4096 (64 k-tiles, S = 4) passes; the symbolic one does not."""
    from argus_cutlass.verify.pipeline import _explore

    bad = _pipe(build_program(S4), producer={"carry_across_tiles": False}, consumer={"carry_across_tiles": False})
    assert _explore(bad.pipeline, 49152, k_tiles=8, tiles=3, sched=schedule_of(bad))[1] is None
    _, v, unknown = check_pipeline_smt(bad)
    assert not unknown and "pipeline.carry" in {x.rule for x in v}


def test_arrival_count_mismatch():
    report = _rejected(_pipe(build_program(S4), consumer_arrivals=5))
    assert "pipeline.arrivals" in report.rules_violated()
    v = next(v for v in report.violations if v.rule == "pipeline.arrivals")
    assert ("empty barrier initialised with 5 arrivals, but a release makes 4 (2 consumer warpgroup(s) reading a "
            "stage x 2 CTA(s) whose loads write it): the empty barrier never completes") in v.message
    # the protocol finds the hang it causes
    assert any("deadlock" in x.message for x in report.violations if x.rule == "pipeline.protocol")


@pytest.mark.parametrize("cfg,real", [
    (GemmConfig(cluster_m=1), 2),                         # cooperative: 2 warpgroups read each stage
    (GemmConfig(cluster_m=2, cluster_n=2, stages=3), 6),  # x 3 CTAs (row + column) write it
    (S7, 1),                                              # ping-pong: 1 warpgroup per stage
    (GemmConfig(tile_m=64, tile_n=128, schedule="pingpong", epi_m=64, cluster_m=2, stages=7), 2),
])
def test_arrivals_per_schedule_and_cluster(cfg, real):
    """consumer_arrivals == consumer_arrivers == what release_stage makes; both fields planted."""
    p = build_program(cfg)
    assert p.pipeline.consumer_arrivals == p.pipeline.consumer_arrivers == real
    for field in ("consumer_arrivals", "consumer_arrivers"):
        report = verify_gemm(_pipe(p, **{field: real + 1}), smt=False)
        assert "pipeline.arrivals" in report.rules_violated(), field
        assert next(v for v in report.violations if v.rule == "pipeline.arrivals").counterexample is not None


def test_protocol_enumeration_alone_is_fast_and_exhaustive():
    proofs, violations = check_protocol(build_program(S7))
    assert not violations and proofs[0].engine == "enum" and "k_tiles in [1, 15]" in proofs[0].summary
    assert "ping-pong: warpgroup t mod 2 runs tile t" in proofs[0].summary and "3 tiles" in proofs[0].summary


def test_ping_pong_consumer_state_skips_the_other_groups_tile():
    """The kernel's ping-pong groups: group 1 starts advanced by k_tiles, each group advances past the
    other's tile; the counter of tile t's k-tile kt is t * k_tiles + kt, as the producer's."""
    for kt_count in (1, 3, 5):
        for t in range(6):
            for kt in range(kt_count):
                assert consumer_counter(INT_OPS, t, kt, kt_count, True, 2, True) == t * kt_count + kt
    # without the skip (no turn order) group 0's second tile reuses group 1's iterations
    assert consumer_counter(INT_OPS, 2, 0, 4, True, 2, False) == 4 != 2 * 4


def test_ping_pong_without_turn_order_is_rejected():
    import dataclasses

    p = build_program(S7)
    report = verify_gemm(dataclasses.replace(p, orders=()), smt=True)
    assert {"pipeline.protocol", "pipeline.carry", "epilogue.stage_reuse"} <= set(report.rules_violated())
    v = next(v for v in report.violations if v.rule == "pipeline.protocol")
    assert v.counterexample.params["tile"] == 2  # group 0's second tile reads stale data


@pytest.mark.parametrize("lag,ok", [(1, True), (3, True), (4, False)])
def test_release_lag_is_modelled(lag, ok):
    """Releasing the stage of iteration i - lag: fine while lag < S (4), a deadlock at lag = S."""
    report = verify_gemm(_pipe(build_program(GemmConfig(cluster_m=1)), release_lag=lag), smt=False)
    assert report.ok == ok, report.format()
    if not ok:
        v = next(v for v in report.violations if v.rule == "pipeline.protocol")
        assert "deadlock" in v.message


def test_no_smt_keeps_enumeration_and_says_so():
    report = verify_gemm(_pipe(build_program(S4), consumer={"start_phase": 1}), smt=False)
    assert report.rules_violated() == ["pipeline.protocol"]
    assert any("SMT tier off" in n for n in report.notes)


@pytest.mark.parametrize("depth", [0, 1, 2, 3])
def test_mma_in_flight_reaches_the_pipeline_node_and_the_source(depth):
    """GemmConfig.mma_in_flight (CUTLASS K_PIPE_MMAS) is the pipeline node's wait depth and release lag, proved
    by the verifier and printed as the consumer's warpgroup_wait<kMmaInFlight>; the default keeps the program (and
    so the kernel name of every measured table) unchanged, other depths name themselves (_mf<N>)."""
    from argus_cutlass.generate import kernel_name
    from argus_cutlass.generate import proof_lines
    from argus_cutlass.render.gemm import render_gemm

    cfg = GemmConfig(tile_n=128, cluster_m=1, stages=5, mma_in_flight=depth)
    program = build_program(cfg)
    pipe = next(p for p in program.pipelines if p.name == "mainloop")
    assert (pipe.mma_in_flight, pipe.release_lag) == (depth, depth)
    report = verify_gemm(program, smt=False)
    assert report.ok, report.format()
    src = render_gemm(program, proof_lines(report))
    assert f"constexpr int kMmaInFlight = {depth};" in src and f"constexpr int kReleaseLag = {depth};" in src
    assert "cute::warpgroup_wait<kMmaInFlight>();" in src
    name = kernel_name(cfg)
    assert ("_mf" in name) == (depth != 1)
    if depth == 1:  # the name this configuration had before the field existed (commit 01d6c75)
        assert name == "argus_gemm_sm90_bf16_bf16_tn_128x128x64_c1x1_s5_coop_e128x32_rn1_57de3587"


def test_mma_in_flight_past_the_stages_is_a_deadlock_with_a_counterexample():
    """The consumer holds mma_in_flight + 1 stages; with all of them held the producer never gets one back."""
    report = verify_gemm(build_program(GemmConfig(cluster_m=1, stages=4, mma_in_flight=4)), smt=False)
    assert not report.ok
    v = next(v for v in report.violations if v.rule == "pipeline.protocol")
    assert "deadlock" in v.message and v.counterexample is not None


def test_mma_in_flight_is_not_searched():
    """Measured on the H200 (session 32, bench/data/explore_tiles_mma_in_flight_h200_s32.log, the template before
    the uniform descriptors): 2 batches in flight within -3 .. +5 % of 1 on 12 pairs, 3 up to 1.6x slower (a stage
    fewer for the producer), so the knob is built and verified but outside the space: a config with another depth
    is not a point of it."""
    from argus_cutlass.kernels.gemm.space import UNSEARCHED_FIELDS, GemmSpace

    assert "mma_in_flight" in UNSEARCHED_FIELDS
    space = GemmSpace()
    base = space.default()
    assert space.contains(base) and not space.contains(base.replace(mma_in_flight=2))
