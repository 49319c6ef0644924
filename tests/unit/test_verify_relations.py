"""The relation engine: every Relation node of a program evaluated through ``Program.resolve``,
its rule and invariant from the node; and the edit robustness of the whole verifier (any edit of
any node field is a report, never an exception)."""

from __future__ import annotations

import dataclasses

import pytest

from argus_cutlass.dsl.ir import Relation, SourceLoc, node_fields
from argus_cutlass.errors import ArgusError
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.program import build_program
from argus_cutlass.verify import verify_gemm
from argus_cutlass.verify.relations import check_references, check_relations, evaluate_relation

LOC = SourceLoc("test", 1)


def _rel(lhs, relation, rhs, rule="user.rel", invariant="U2"):
    return Relation(f"{rule}:{lhs}{relation}{rhs}", lhs, relation, rhs, invariant, rule, LOC)


@pytest.mark.parametrize("lhs,rel,rhs,holds", [
    ("pipeline[mainloop].stages", "==", "4", True),
    ("pipeline[mainloop].stages", "!=", "4", False),
    ("loop[k].block_k", "<=", "loop[k].tile_k", True),
    ("loop[k].tile_k", "<", "loop[k].block_k", False),
    ("mma[mainloop].op.n", ">=", "256", True),
    ("mma[mainloop].op.n", ">", "256", False),
    ("loop[k].block_k", "divides", "loop[k].tile_k", True),
    ("48", "divides", "loop[k].tile_k", False),
    ("tensor[sA]", "disjoint", "tensor[sD]", True),
    ("mma[mainloop].op.dtype", "==", "tensor[sA].dtype", True),
])
def test_relations_evaluate(lhs, rel, rhs, holds):
    p = build_program(GemmConfig())
    got, text, _, _ = evaluate_relation(p, _rel(lhs, rel, rhs))
    assert got is holds, text


def test_each_relation_is_one_proof_with_both_values():
    p = build_program(GemmConfig())
    proofs, violations = check_relations(p)
    assert not violations and len(proofs) == len(p.relations) >= 20
    assert "pipeline[mainloop].stages == tensor[sA].shape[2]: 4 == 4" in {x.summary for x in proofs}
    assert {x.rule for x in proofs} == {r.rule for r in p.relations}
    assert all(x.invariant == r.invariant for x, r in zip(proofs, p.relations))


def test_a_new_relation_is_data():
    p = build_program(GemmConfig())
    mine = _rel("pipeline[mainloop].stages", ">=", "3")
    proofs, _ = check_relations(dataclasses.replace(p, relations=p.relations + (mine,)))
    assert proofs[-1].rule == "user.rel" and proofs[-1].invariant == "U2"
    bad = _rel("tensor[sA]", "disjoint", "tensor[sA]", rule="smem.disjoint", invariant="R8")
    _, violations = check_relations(dataclasses.replace(p, relations=(bad,)))
    assert violations[0].rule == "smem.disjoint" and "overlap by 65536 bytes" in violations[0].message


@pytest.mark.parametrize("lhs,rel,rhs,rule,text", [
    ("pipeline[nope].stages", "==", "4", "dsl.unknown_ref", "no pipeline 'nope'"),
    ("tensor[sA].shape[2]]", "==", "4", "dsl.unknown_ref", "malformed field path"),
    ("mma[mainloop].op.dtype", "<", "4", "dsl.relation", "needs two ints"),
    ("tensor[sA]", "disjoint", "4", "dsl.relation", "needs two smem tensors"),
    ("0", "divides", "4", "dsl.relation", "non-zero int"),
    ("4", "~", "4", "dsl.relation", "is not one of"),
])
def test_unevaluable_relations_are_dsl_violations(lhs, rel, rhs, rule, text):
    p = build_program(GemmConfig())
    _, violations = check_relations(dataclasses.replace(p, relations=(_rel(lhs, rel, rhs),)))
    assert [v.rule for v in violations] == [rule] and text in violations[0].message
    assert violations[0].where == "test:1"


def test_references_of_the_gemm_program_resolve():
    p = build_program(GemmConfig(cluster_m=2, cluster_n=2, stages=3))
    assert check_references(p) == ([], [])
    _, v = check_references(p.replace_node("pipeline", "mainloop", loads=("tma_sA",)))
    assert v[0].rule == "pipeline.buffers" and "lists loads ('tma_sA',)" in v[0].message


def _alternative(v):
    """One edit of a leaf value (the next int, a flipped bool, a suffixed string, a shortened tuple)."""
    if isinstance(v, bool):
        return not v
    if isinstance(v, int):
        return v + 1
    if isinstance(v, str):
        return v + "x"
    if isinstance(v, tuple):
        return v[:-1]
    return None


def test_no_edit_of_any_node_field_crashes_the_verifier():
    """Every leaf field of every node of a multicast cooperative program, edited once (about 450
    edits, ~15 s): the verifier returns a report each time."""
    p = build_program(GemmConfig(cluster_m=2, cluster_n=2, stages=3))
    groups = {"tensor": p.tensors, "load": p.loads, "store": p.stores, "read": p.reads, "mma": p.mmas,
              "pipeline": p.pipelines, "loop": p.loops, "role": p.roles, "barrier": p.barriers, "order": p.orders,
              "assertion": p.assertions, "relation": p.relations}
    keyattr = {"read": "operand", "role": "kind"}
    items = [(k, getattr(n, keyattr.get(k, "name")), n) for k, nodes in groups.items() for n in nodes]
    items += [(k, None, getattr(p, k)) for k in ("epilogue", "source", "staging", "schedule", "launch")]
    edits = 0
    for kind, key, node in items:
        for field in node_fields(node):
            value = node
            for part in field.split("."):
                value = getattr(value, part)
            try:
                q = p.replace_node(kind, key, **{field: _alternative(value)})
            except (ArgusError, KeyError, TypeError, ValueError):
                continue  # refused by the node's own validation
            report = verify_gemm(q, smt=False)  # must not raise
            assert report.kernel
            edits += 1
    assert edits > 300


@pytest.mark.parametrize("i", range(27))
def test_every_gemm_relation_is_required_dropped_or_restated(i):
    """Session 20: a GEMM program built without its relations verified clean. Each relation of the family's
    catalogue (dsl.ir.FAMILY_RELATIONS) is now required: dropping it, or restating it so that it holds
    trivially, is a violation of that relation's own rule."""
    from argus_cutlass.dsl.ir import FAMILY_RELATIONS

    assert len(FAMILY_RELATIONS["gemm"]) == 27
    p = build_program(GemmConfig())
    rel = p.relations[i]
    lhs, relation, rhs, invariant, rule = FAMILY_RELATIONS["gemm"][i]
    assert (rel.lhs, rel.relation, rel.rhs, rel.rule) == (lhs, relation, rhs, rule)
    dropped = dataclasses.replace(p, relations=p.relations[:i] + p.relations[i + 1:])
    restated = dataclasses.replace(p, relations=p.relations[:i] + (dataclasses.replace(rel, rhs=rel.lhs),)
                                   + p.relations[i + 1:])
    for edited in (dropped, restated):
        report = verify_gemm(edited)
        hits = [v for v in report.violations if v.rule == rule and "does not state the relation" in v.message]
        assert hits and f"{lhs} {relation} {rhs}" in hits[0].message and hits[0].invariant == invariant
    assert not [v for v in verify_gemm(p).violations]


def test_the_sizing_program_cannot_pass_for_a_kernel():
    """kernels.gemm.program.sizing_program (fit_stages' cheap program, no relations) is refused by the verifier,
    so it cannot be verified and rendered by mistake."""
    from argus_cutlass.kernels.gemm.program import sizing_program

    report = verify_gemm(sizing_program(GemmConfig()))
    assert len([v for v in report.violations if "does not state the relation" in v.message]) == 27


def test_attention_and_moe_programs_require_their_relations_too():
    """The same catalogue rule for the other families: attention's 18 relations, and the MoE layer's grouped
    GEMMs (GEMM programs of family 'moe') the GEMM's 27; dropping any one is a violation of its rule."""
    from argus_cutlass.dsl.ir import FAMILY_RELATIONS
    from argus_cutlass.kernels.attention.config import AttentionConfig
    from argus_cutlass.kernels.attention.program import build_program as build_attention
    from argus_cutlass.kernels.moe.config import MoEConfig
    from argus_cutlass.kernels.moe.problem import MoEProblem
    from argus_cutlass.kernels.moe.program import build_layer
    from argus_cutlass.verify.attention import verify_attention
    from argus_cutlass.verify.moe import verify_moe

    p = build_attention(AttentionConfig())
    assert [(r.lhs, r.relation, r.rhs) for r in p.relations] == [x[:3] for x in FAMILY_RELATIONS["attention"]]
    assert not verify_attention(p, smt=False).violations
    for i in (0, 9, 17):
        report = verify_attention(dataclasses.replace(p, relations=p.relations[:i] + p.relations[i + 1:]), smt=False)
        lhs, rel, rhs, inv, rule = FAMILY_RELATIONS["attention"][i]
        assert any(v.rule == rule and f"{lhs} {rel} {rhs}" in v.message for v in report.violations)
    layer = build_layer(MoEConfig(), MoEProblem.for_model("mixtral", 256))
    assert not verify_moe(layer, smt=False).violations
    for part in ("gate_up", "down"):
        prog = getattr(layer, part)
        assert prog.family == "moe" and len(prog.relations) == len(FAMILY_RELATIONS["moe"])
        edited = dataclasses.replace(layer, **{part: dataclasses.replace(prog, relations=prog.relations[:-1])})
        assert any("does not state the relation tensor[sB] disjoint tensor[sD]" in v.message
                   for v in verify_moe(edited, smt=False).violations)
