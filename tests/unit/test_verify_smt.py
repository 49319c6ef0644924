"""SMT tier: shared semantics agree across engines, G3 for symbolic K, operand cross-check, timeouts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_verify_accept import ACCEPTED

from argus_cutlass.dsl.atoms import GmmaSmemAtom, Swizzle
from argus_cutlass.dsl.ir import SmemView
from argus_cutlass.hw.semantics import (
    INT_OPS,
    Z3Ops,
    k_tiles_of,
    layout_offset,
    pipeline_state,
    swizzle,
    tma_box_offset,
)
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.program import build_program
from argus_cutlass.verify import check_gemm, verify_gemm
from argus_cutlass.verify import smt as smt_tier
from argus_cutlass.verify.absint import check_k_coverage, view_layout
from argus_cutlass.verify.report import Unknown
from argus_cutlass.verify.smt import check_k_coverage_smt, check_operands_smt, run_query

z3 = pytest.importorskip("z3")


def _prog(cfg=None):
    return build_program(GemmConfig() if cfg is None else cfg)


def _sw64_view(program):
    return program.replace_node("read", "A", view=SmemView(GmmaSmemAtom("K", 64, 16), program.read("A").view.shape))


def _z3_value(term) -> int:
    return z3.simplify(term).as_long()


@pytest.mark.parametrize("cfg", ACCEPTED[:4], ids=["tn", "nt", "nn", "tt"])
def test_tma_and_gmma_maps_agree_between_numpy_and_z3(cfg):
    """The law: one semantics function, two engines, equal values on every sampled point."""
    program = _prog(cfg)
    o = Z3Ops(32)
    rng = np.random.default_rng(0)
    for read in program.reads:
        load = program.load_into(read.src)
        t = program.tensor(load.dst)
        lay = view_layout(read.view)
        mn = rng.integers(0, load.tile_mn, 64)
        k = rng.integers(0, load.tile_k, 64)
        s = rng.integers(0, program.stages, 64)
        w = tma_box_offset(INT_OPS, load, mn, k, s, t.base_bytes, t.elem_bytes)
        r = layout_offset(INT_OPS, lay, mn, k, s)
        assert (r == lay(mn, k, s)).all() and (w == r).all()  # the TMA writes where the MMA reads
        for i in range(0, 64, 8):
            a, b, c = int(mn[i]), int(k[i]), int(s[i])
            assert _z3_value(tma_box_offset(o, load, o.const(a), o.const(b), o.const(c), t.base_bytes,
                                            t.elem_bytes)) == int(w[i])
            assert _z3_value(layout_offset(o, lay, o.const(a), o.const(b), o.const(c))) == int(r[i])


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 3), st.integers(0, (1 << 20) - 1), st.integers(2, 9), st.integers(0, 1),
       st.integers(0, (1 << 24) - 1))
def test_swizzle_and_pipeline_state_agree(bits, x, wrap, phase0, n):
    o = Z3Ops(32)
    assert _z3_value(swizzle(o, bits, 4, 3, o.const(x))) == swizzle(INT_OPS, bits, 4, 3, x) == Swizzle(bits, 4, 3)(x)
    zi, zp = pipeline_state(o, o.const(n), wrap, phase0)
    assert (_z3_value(zi), _z3_value(zp)) == pipeline_state(INT_OPS, n, wrap, phase0) == (n % wrap, phase0 ^ ((n // wrap) & 1))
    for rounding in ("ceil", "floor"):
        assert _z3_value(k_tiles_of(o, o.const(n + 1), 64, rounding)) == k_tiles_of(INT_OPS, n + 1, 64, rounding)


@pytest.mark.parametrize("cfg", ACCEPTED, ids=lambda c: f"{c.layout}-{c.tile_m}x{c.tile_n}-{c.schedule}-s{c.stages}")
def test_shipped_configs_have_smt_proofs(cfg):
    report = check_gemm(build_program(cfg))
    assert report.complete, report.format()
    smt_rules = {p.rule for p in report.proofs if p.engine == "smt"}
    assert {"k.coverage", "pipeline.stage", "pipeline.parity", "pipeline.carry", "pipeline.state",
            "tma.image", "mma.k_agreement"} <= smt_rules
    assert any("for all K in [1, 2^24)" in p.summary for p in report.proofs if p.rule == "k.coverage")
    assert set(report.tier_seconds) == {"arith", "enum", "smt"}


def _k_violation(program):
    _proofs, violations, unknown = check_k_coverage_smt(program)
    assert not unknown and len(violations) == 1
    v = violations[0]
    assert v.rule == "k.coverage" and v.invariant == "G3" and "program.py" in v.where
    cex = v.counterexample
    assert cex.engine == "smt" and cex.program_point == "mainloop.k_loop" and cex.invariant == "G3"
    return v, cex


def _loop(program, **changes):
    return program.replace_node("loop", "k", **changes)


def test_k_tiles_floor_drops_the_residue():
    v, cex = _k_violation(_loop(_prog(), rounding="floor"))
    assert cex.params == {"K": 1, "k_tiles": 0}  # smallest K
    assert cex.element == {"tensor": "A", "coord": "(m=0, k=0)"}
    assert cex.actual == "k=0 never summed: the loop runs 0 k-tiles x 4 k-blocks (floor(1/64))"
    assert "every k < K is summed by a slot fails for K=1" in v.message


def test_one_k_block_missing():
    _v, cex = _k_violation(_loop(_prog(), k_blocks=3))
    assert cex.params == {"K": 49, "k_tiles": 1}
    assert (cex.k_tile, cex.k_block, cex.slot) == (0, 3, {"k": 0})
    assert cex.chain[0] == "gmem A(m=0, k=48)" and cex.chain[-1] == "MMA slot k=0"
    assert cex.thread["threadIdx"] == 128 and cex.thread["warp"] == 4


def test_one_k_block_too_many_sums_twice():
    _v, cex = _k_violation(_loop(_prog(), k_blocks=5))
    assert cex.params == {"K": 65, "k_tiles": 2}
    assert "k=64 summed twice" in cex.actual


def test_nan_fill_is_residue_load_not_coverage():
    """k coverage is about which k are summed; what the residue slots read is residue.load (G8)."""
    bad = _loop(_prog(), oob_fill="nan")
    _proofs, violations, unknown = check_k_coverage_smt(bad)
    assert not violations and not unknown
    report = verify_gemm(bad)
    assert report.rules_violated() == ["residue.load"]
    cex = report.violations[0].counterexample
    assert cex.invariant == "G8" and cex.params == {"K": 1, "k_tiles": 1} and "NaN" in cex.actual


def test_k_coverage_enumeration_tier_agrees():
    program = _prog()
    assert check_k_coverage(program)[1] == []
    for bad in (_loop(program, rounding="floor"), _loop(program, k_blocks=3), _loop(program, k_blocks=5)):
        assert check_k_coverage(bad)[1][0].invariant == "G3"
    # with the SMT tier on, the report carries the SMT counterexample instead
    report = verify_gemm(_loop(program, rounding="floor"))
    ks = [v for v in report.violations if v.rule == "k.coverage"]
    assert len(ks) == 1 and ks[0].counterexample.engine == "smt"


def test_operand_cross_check_finds_the_enumeration_counterexample():
    """The SMT tier, through the same semantics, finds a bad slot on the same stage and k-block as
    the enumeration, and the element it names really is misplaced."""
    bad = _sw64_view(_prog())
    enum_cex = next(v for v in verify_gemm(bad, smt=False).violations if v.rule == "mma.k_agreement").counterexample
    _, violations, _ = check_operands_smt(bad)
    v = violations[0]
    cex = v.counterexample
    assert v.rule == "mma.k_agreement" and v.invariant == "G1" and cex.engine == "smt"
    assert (cex.stage, cex.k_block) == (enum_cex.stage, enum_cex.k_block) == (0, 0)
    mn, k = cex.slot["mn"], cex.slot["k"]
    off = int(view_layout(bad.read("A").view)(mn, k, 0))
    assert cex.smem_offset["A"] == off
    load = bad.load_into("sA")
    t = bad.tensor("sA")
    mm, kk = np.meshgrid(np.arange(128), np.arange(64), indexing="ij")
    w = tma_box_offset(INT_OPS, load, mm, kk, 0, t.base_bytes, t.elem_bytes)
    hit = np.argwhere(w == off)[0]
    assert int(hit[1]) != k and f"A(mn={int(hit[0])}, k={int(hit[1])})" in cex.actual


def test_operand_cross_check_tma_writes_outside():
    bad = _prog(GemmConfig(cluster_m=1)).replace_node("load", "tma_sB", **{"copy.box": (48, 256)})
    _, violations, _ = check_operands_smt(bad)
    v = violations[0]
    cex = v.counterexample
    assert v.rule == "tma.image" and v.invariant == "G5" and cex.expected == "write offset < 65536"
    assert cex.smem_offset["B"] >= 65536
    # the model is the smallest (stage, k, mn) writing outside, checked by enumeration
    load = bad.load_into("sB")
    t = bad.tensor("sB")
    mn, k, s = np.meshgrid(np.arange(256), np.arange(64), np.arange(4), indexing="ij")
    off = tma_box_offset(INT_OPS, load, mn, k, s, t.base_bytes, t.elem_bytes)
    size = (s * 64 + k) * 256 + mn
    first = np.unravel_index(np.argmin(np.where(off >= 65536, size, 1 << 40)), off.shape)
    assert (int(first[0]), int(first[1]) % 16, int(first[2])) == (cex.slot["mn"], cex.slot["k"], cex.stage)


def test_timeout_is_unknown_never_a_proof():
    x, y = z3.BitVec("x", 64), z3.BitVec("y", 64)
    p = 4294967291 * 4294967279  # a 64-bit semiprime: factoring by bit-blasting does not finish in 50 ms
    dom = [z3.UGT(x, 1), z3.UGT(y, 1), z3.ULT(x, 1 << 32), z3.ULT(y, 1 << 32)]
    res = run_query("factor p", {"x": x, "y": y}, dom, x * y == p, timeout_ms=50)
    assert res.status == "unknown" and res.name == "factor p" and res.model == {}
    assert res.reason in ("timeout", "canceled"), res.reason


def test_unknown_in_the_report(monkeypatch):
    def always_unknown(name, *args, **kwargs):
        return smt_tier.QueryResult(name, "unknown", {}, 0.05, "timeout")

    monkeypatch.setattr(smt_tier, "run_query", always_unknown)
    smt_tier._MEMO.clear()
    report = verify_gemm(build_program(GemmConfig()), smt_timeout_ms=7)
    assert report.ok and not report.complete and not report.verified
    assert not [p for p in report.proofs if p.engine == "smt"]
    assert all(isinstance(u, Unknown) and u.timeout_ms == 7 and u.reason == "timeout" for u in report.unknowns)
    names = {u.query for u in report.unknowns}
    assert "G6 pipeline.parity: consumer wait parity" in names and "G3 k.coverage: every k < K is summed by a slot" in names
    assert "G6 pipeline.parity: consumer wait parity (timeout)" in report.not_proved
    text = report.format()
    assert f"INCOMPLETE ({len(report.unknowns)} unknown: not proved)" in text.splitlines()[0]
    assert "UNKNOWN G6 pipeline.parity: consumer wait parity: not proved (timeout, timeout 7 ms)" in text
    assert not any("[smt]" in line for line in report.proved)


def test_missing_z3_is_a_clear_toolchain_error(monkeypatch):
    import sys

    from argus_cutlass.errors import ToolchainError

    monkeypatch.setitem(sys.modules, "z3", None)  # import z3 now raises ImportError
    with pytest.raises(ToolchainError, match=r"\[toolchain\.z3\] the verifier's SMT tier needs z3-solver"):
        verify_gemm(build_program(GemmConfig()))
    assert verify_gemm(build_program(GemmConfig()), smt=False).ok  # still usable without it


def test_smt_timeout_setting_reaches_the_queries(monkeypatch):
    from argus_cutlass.settings import settings

    monkeypatch.setenv("ARGUS_SMT_TIMEOUT_MS", "1234")
    assert settings().smt_timeout_ms == 1234


def test_smt_timeout_takes_numpy_integers_and_refuses_bools():
    """``generate.verify``'s ``smt_timeout_ms`` is any integer >= 1 (``numpy.int64`` included, as the
    seed and workers checks take); a bool or a float is refused with ``config.smt_timeout``."""
    import numpy as np

    from argus_cutlass.errors import ConfigError
    from argus_cutlass.generate import verify

    program = build_program(GemmConfig())
    assert verify(program, smt=False, smt_timeout_ms=np.int64(50)).ok
    for bad in (True, 2.5, np.int32(0)):
        with pytest.raises(ConfigError, match=r"\[config.smt_timeout\]"):
            verify(program, smt=False, smt_timeout_ms=bad)
