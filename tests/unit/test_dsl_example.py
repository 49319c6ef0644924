"""The worked DSL example (:mod:`argus_cutlass.dsl.examples`): its doctest runs, the attention
tile program passes the attention-class checks over a range of shapes, its relations hold, and
the builder refuses malformed attention-class statements at the author's line."""

from __future__ import annotations

import doctest

import pytest

from argus_cutlass.dsl import examples
from argus_cutlass.dsl.atoms import GmmaOp
from argus_cutlass.dsl.builder import ProgramBuilder
from argus_cutlass.dsl.examples import attention_tile_program
from argus_cutlass.dsl.ir import Tag
from argus_cutlass.errors import ConfigError, DslError
from argus_cutlass.verify.barriers import check_named_barriers, check_turn_orders
from argus_cutlass.verify.fragments import check_fragments

CHECKS = (check_named_barriers, check_turn_orders, check_fragments)


def test_doctest_runs():
    result = doctest.testmod(examples, optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    assert result.attempted >= 8 and result.failed == 0


@pytest.mark.parametrize("kw", [{}, {"head_dim": 64}, {"head_dim": 256, "tile_kv": 64}, {"tile_kv": 176},
                                {"stages": 3, "dtype": "fp16"}])
def test_example_passes_the_checks(kw):
    p = attention_tile_program(**kw)
    rules = []
    for check in CHECKS:
        proofs, violations = check(p)
        assert violations == [], [v.format() for v in violations]
        rules += [x.rule for x in proofs]
    assert sorted(rules) == sorted(["barrier.named", "turn.order", "mma.rs_operand", "fragment.convert",
                                    "reduction.rows", "reduction.rows"])


def _bytes(t):
    n = 1
    for s in t.shape:
        n *= s
    return t.base_bytes, t.base_bytes + n * t.elem_bytes


@pytest.mark.parametrize("kw", [{}, {"head_dim": 64, "stages": 4}])
def test_relations_hold(kw):
    p = attention_tile_program(**kw)
    ops = {"==": lambda a, b: a == b, "<": lambda a, b: a < b}
    assert len(p.relations) >= 10
    for r in p.relations:
        if r.relation == "disjoint":
            (a0, a1), (b0, b1) = _bytes(p.resolve(r.lhs)), _bytes(p.resolve(r.rhs))
            assert a1 <= b0 or b1 <= a0, str(r)
        else:
            assert ops[r.relation](p.resolve(r.lhs), p.resolve(r.rhs)), str(r)


def test_example_states_what_the_issue_asks():
    p = attention_tile_program()
    assert [x.name for x in p.pipelines] == ["q", "k", "v"]
    assert {r.kind: r.regs for r in p.roles} == {"producer": 24, "consumer": 240}
    assert {a.relation for a in p.assertions} >= {"==", "<", "in_range"}
    rs = next(r for r in p.reads if r.view is None)
    assert (rs.operand, rs.mma, rs.op.mode) == ("A", "pv", "RS")
    assert p.converts[0].src == "s_acc" and {x.op for x in p.reductions} == {"max", "sum"}
    assert p.orders[0].groups == 2


def test_example_is_refused_outside_its_model():
    with pytest.raises(ConfigError, match="attention.tile"):
        attention_tile_program(tile_q=64)


# ------------------------------------------------------------------------- builder refusals


def _builder():
    b = ProgramBuilder("t", family="attention")
    acc = b.tensor("acc", "rmem", (64, 64), "fp32", tag=Tag("S", ("q", "key")))
    frag = b.tensor("frag", "rmem", (64, 64), "bf16")
    return b, acc, frag


def test_builder_refuses_bad_barrier_and_order():
    b, _, _ = _builder()
    with pytest.raises(DslError, match=r"dsl.operand.*test_dsl_example.py:\d+.*id 0"):
        b.named_barrier("x", id=0, threads=256)
    with pytest.raises(DslError, match="multiple"):
        b.named_barrier("x", id=8, threads=100)
    b.named_barrier("a", id=8, threads=256)
    b.named_barrier("c", id=9, threads=256)
    with pytest.raises(DslError, match="first 2"):
        b.turn_order("t", groups=2, points=("p",), barriers=(("a", "c"),), first=2)


def test_builder_refuses_bad_reduction_role_convert():
    b, acc, frag = _builder()
    with pytest.raises(DslError, match="1..31"):
        b.reduction(acc, "max", xor_lanes=(0,))
    with pytest.raises(DslError, match="setmaxnreg"):
        b.role("consumer", "consumer", warpgroups=(1,), issue_warps=(0,), regs=100)
    with pytest.raises(DslError, match="dsl.dtype"):
        b.fragment_convert(acc, frag, "fp16")


def test_builder_assertion_over_rs_operand_uses_the_converted_tag():
    b, acc, frag = _builder()
    b.fragment_convert(acc, frag, "bf16")
    op = GmmaOp(64, 64, 16, "bf16", "K", "MN", mode="RS")
    b.mma_read("A", frag, None, op, tile_mn=64, tile_k=64, warpgroups=1, mma="pv")
    b.assert_tags("pv.gemm", ("A", "key"), "==", ("slot", "k"), invariant="FA3", rule="mma.k_agreement")
    with pytest.raises(DslError, match="dsl.unknown_tag"):
        b.assert_tags("pv.gemm", ("A", "d"), "==", ("slot", "k"), invariant="FA3", rule="mma.k_agreement")
    with pytest.raises(DslError, match="reads operand A twice"):
        b.mma_read("A", frag, None, op, tile_mn=64, tile_k=64, warpgroups=1, mma="pv")
