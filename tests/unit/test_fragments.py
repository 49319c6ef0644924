"""Register fragments: ``mma.rs_operand`` / ``fragment.convert`` (FA3) and ``reduction.rows`` (FA1).

The fragment layouts of :mod:`argus_cutlass.hw.fragments` are checked against CuTe's layouts over
their whole domain; the attention example passes the checks; GEMM programs (no RS read, no
conversion, no reduction) get no proofs and no violations; planted mistakes (wrong pairing, wrong
xor lanes, an RS read of B or of an MN-major A, a conversion of something that is no
accumulator...) are each caught by the named rule with a counterexample.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from argus_cutlass.dsl.examples import attention_tile_program
from argus_cutlass.hw.fragments import (
    CUTE_ALAYOUT_64X16,
    a_frag_coord,
    acc_coord,
    cute_clayout_64xn,
)
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.program import build_program
from argus_cutlass.layout.algebra import Layout
from argus_cutlass.verify.catalogue import invariant_of
from argus_cutlass.verify.fragments import (
    INV_PV,
    INV_ROWS,
    RULE_CONVERT,
    RULE_ROWS,
    RULE_RS,
    check_fragments,
)


@pytest.fixture(scope="module")
def attn():
    return attention_tile_program()


def _only(program, rule):
    proofs, violations = check_fragments(program)
    assert violations, [p.summary for p in proofs]
    mine = [v for v in violations if v.rule == rule]
    assert mine, [v.format() for v in violations]
    for v in mine:
        assert v.counterexample is not None and v.counterexample.rule == rule
    return mine


def _replace_read(program, name, **changes):
    assert any(r.name == name for r in program.reads)
    return dataclasses.replace(program, reads=tuple(dataclasses.replace(r, **changes) if r.name == name else r
                                                    for r in program.reads))


# --------------------------------------------------------------------------------- hw layouts


@pytest.mark.parametrize("n", list(range(8, 257, 8)))
def test_acc_coord_is_cute_clayout(n):
    shape, stride = cute_clayout_64xn(n)
    layout = Layout(shape, stride)
    t, i = np.meshgrid(np.arange(128), np.arange(n // 2), indexing="ij")
    row, col = acc_coord(t, i)
    cute = np.array([[layout(int(a), int(b)) for b in range(n // 2)] for a in range(128)])
    assert np.array_equal(row + 64 * col, cute)
    assert len(set((row * n + col).ravel().tolist())) == 64 * n  # a bijection onto the 64 x N tile


def test_a_frag_coord_is_cute_alayout_64x16():
    layout = Layout(*CUTE_ALAYOUT_64X16)
    for t in range(128):
        for v in range(8):
            row, k = a_frag_coord(t, v)
            assert row + 64 * k == layout(t, v)


def test_a_fragment_equals_accumulator_of_16_columns():
    """The reason P = convert(S) is register-local: ALayout_64x16 == CLayout_64x16."""
    assert CUTE_ALAYOUT_64X16 == cute_clayout_64xn(16)


# --------------------------------------------------------------------------------- pass / no-op


def test_catalogue_lists_the_rules():
    assert invariant_of(RULE_RS) == invariant_of(RULE_CONVERT) == INV_PV == "FA3"
    assert invariant_of(RULE_ROWS) == INV_ROWS == "FA1"


@pytest.mark.parametrize("schedule", ["cooperative", "pingpong"])
def test_gemm_programs_have_nothing_to_check(schedule):
    p = build_program(GemmConfig(schedule=schedule))
    assert check_fragments(p) == ([], [])


def test_attention_example_passes(attn):
    proofs, violations = check_fragments(attn)
    assert violations == []
    assert sorted(p.rule for p in proofs) == sorted([RULE_RS, RULE_CONVERT, RULE_ROWS, RULE_ROWS])
    conv = next(p for p in proofs if p.rule == RULE_CONVERT)
    assert conv.engine == "enum" and conv.points == 128 * (128 // 16) * 8


@pytest.mark.parametrize("lanes", [(1, 2), (2, 1)])
def test_quad_masks_in_any_order(attn, lanes):
    p = attn.replace_node("reduction", "sum_s_acc", xor_lanes=lanes)
    assert check_fragments(p)[1] == []


def test_reduction_with_two_m_repetitions(attn):
    """One warpgroup, two 64-row repetitions: each thread holds 4 rows; still one row per value."""
    p = attn.replace_node("mma", "qk", atoms_m=1, reps_m=2)
    p = p.replace_node("mma", "pv", atoms_m=1, reps_m=2)
    proofs, violations = check_fragments(p)
    assert violations == [] and sum(x.rule == RULE_ROWS for x in proofs) == 2


# ------------------------------------------------------------------------------ reduction.rows


def test_wrong_xor_lanes_mix_rows(attn):
    bad = attn.replace_node("reduction", "max_s_acc", xor_lanes=(1, 4))
    (v,) = _only(bad, RULE_ROWS)
    cex = v.counterexample
    assert "mixes rows [0, 1]" in cex.actual and "lanes [0, 1, 4, 5]" in cex.actual
    assert cex.thread["lane"] == 0 and cex.thread["threadIdx"] == 128
    assert cex.register.startswith("s_acc[0,1,4,")


def test_wrong_mask_in_a_later_warp_row_numbers(attn):
    """Mask 16 mixes lane L with L + 16: rows q and q + 4 of each warp."""
    bad = attn.replace_node("reduction", "max_s_acc", xor_lanes=(1, 2, 16))
    (v,) = _only(bad, RULE_ROWS)
    assert "mixes rows [0, 1, 4, 5]" not in v.counterexample.actual
    assert "mixes rows [0, 4]" in v.counterexample.actual


def test_missing_shuffle_misses_columns(attn):
    bad = attn.replace_node("reduction", "sum_s_acc", xor_lanes=(1,))
    (v,) = _only(bad, RULE_ROWS)
    assert "misses columns" in v.counterexample.actual and "(64 of 128)" in v.counterexample.actual


def test_repeated_mask_overcounts_a_sum_but_not_a_max(attn):
    bad_sum = attn.replace_node("reduction", "sum_s_acc", xor_lanes=(1, 2, 2))
    (v,) = _only(bad_sum, RULE_ROWS)
    assert "over-counts" in v.counterexample.actual
    ok_max = attn.replace_node("reduction", "max_s_acc", xor_lanes=(1, 2, 2))
    assert check_fragments(ok_max)[1] == []  # max is idempotent


@pytest.mark.parametrize("changes", [{"xor_lanes": (0,)}, {"xor_lanes": (32,)}, {"xor_lanes": "12"},
                                     {"xor_lanes": None}, {"op": "min"}, {"src": "o_missing"},
                                     {"src": "p_frag"}])
def test_malformed_reduction_is_a_violation(attn, changes):
    bad = attn.replace_node("reduction", "max_s_acc", **changes)
    assert _only(bad, RULE_ROWS)


# ------------------------------------------------------------------------- fragment.convert


def test_wrong_pairing_caught(attn):
    pairing = (1, 0) + tuple(range(2, 32))
    bad = attn.replace_node("convert", "convert_p_frag", pairing=pairing)
    (v,) = _only(bad, RULE_CONVERT)
    cex = v.counterexample
    assert cex.engine == "enum" and cex.k_block == 0 and cex.slot == {"m": 0, "k": 0}
    assert cex.expected.startswith("P(row=0, key=0)") and "S(row=8, key=0)" in cex.actual
    assert cex.register == "p_frag[0]" and cex.thread["threadIdx"] == 128
    assert "takes accumulator pair 1" in cex.chain[1]


def test_pairing_of_a_later_k_block(attn):
    """Swapping k-blocks 0 and 1 of P keeps rows but not keys."""
    pairing = tuple(range(4, 8)) + tuple(range(4)) + tuple(range(8, 32))
    bad = attn.replace_node("convert", "convert_p_frag", pairing=pairing)
    (v,) = _only(bad, RULE_CONVERT)
    assert "key=16" in v.counterexample.actual and "key=0" in v.counterexample.expected


@pytest.mark.parametrize("pairing", [(0, 1), tuple(range(32)) + (0,), (99,) * 32, ("a",) * 32])
def test_malformed_pairing_is_a_violation(attn, pairing):
    bad = attn.replace_node("convert", "convert_p_frag", pairing=pairing)
    assert _only(bad, RULE_CONVERT)


def test_convert_dtype_mismatch(attn):
    bad = attn.replace_node("convert", "convert_p_frag", dtype="fp16")
    assert _only(bad, RULE_CONVERT)


def test_row_partition_mismatch(attn):
    bad = attn.replace_node("mma", "pv", atoms_m=1, reps_m=2)
    (v,) = _only(bad, RULE_CONVERT)
    assert "atoms_m=2 x reps_m=1" in v.message


def test_convert_of_a_non_accumulator(attn):
    bad = attn.replace_node("convert", "convert_p_frag", src="o_missing")
    assert _only(bad, RULE_CONVERT)
    assert _only(bad, RULE_RS)


# ---------------------------------------------------------------------------- mma.rs_operand


def test_rs_read_of_b_caught(attn):
    bad = _replace_read(attn, "gmma_pv_A", operand="B")
    violations = _only(bad, RULE_RS)
    assert any("only A from registers" in v.message for v in violations)
    assert violations[0].counterexample.actual.startswith("operand B from 'p_frag'")


def test_rs_read_mn_major_caught(attn):
    op = dataclasses.replace(attn.read("A").op, mode="RS", a_major="MN", n=128)
    bad = _replace_read(attn, "gmma_pv_A", op=op)
    violations = _only(bad, RULE_RS)
    assert any("K-major" in v.message for v in violations)


def test_rs_read_without_conversion_caught(attn):
    bad = dataclasses.replace(attn, converts=())
    violations = _only(bad, RULE_RS)
    assert any("exactly one fragment conversion" in v.message for v in violations)


def test_rs_read_from_smem_caught(attn):
    bad = _replace_read(attn, "gmma_pv_A", src="sQ")
    violations = _only(bad, RULE_RS)
    assert any("in smem" in v.message for v in violations)


def test_ss_mode_op_without_view_caught(attn):
    op = dataclasses.replace(next(r for r in attn.reads if r.name == "gmma_pv_A").op, mode="SS")
    bad = _replace_read(attn, "gmma_pv_A", op=op)
    assert any("SS-mode" in v.message for v in _only(bad, RULE_RS))


def test_rs_op_with_smem_a_caught():
    """A GEMM whose MMA op is flipped to RS while A is still read through a descriptor."""
    p = build_program(GemmConfig())
    p = p.replace_node("mma", "mainloop", **{"op.mode": "RS"})
    (v,) = _only(p, RULE_RS)
    assert "through an smem view of 'sA'" in v.message


def test_never_raises_on_garbage(attn):
    bad = dataclasses.replace(attn, converts=(None,), reductions=(None,))
    _, violations = check_fragments(bad)
    assert {v.rule for v in violations} >= {RULE_CONVERT, RULE_ROWS}
    assert all(v.message.startswith("malformed program") for v in violations
               if v.rule in (RULE_CONVERT, RULE_ROWS))
