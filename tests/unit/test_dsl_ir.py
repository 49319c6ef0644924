"""DSL IR: tags, source locations, frozen nodes; the invariant catalogue as data; tag assertions
as data (a new invariant needs no verifier code), with relations beyond ``==``."""

from __future__ import annotations

import dataclasses
import linecache

import pytest

from argus_cutlass.dsl.atoms import GmmaSmemAtom
from argus_cutlass.dsl.builder import ProgramBuilder
from argus_cutlass.dsl.ir import SmemView, Tag, TagAssertion
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.program import build_program
from argus_cutlass.plan.resources import smem_breakdown, smem_total_bytes
from argus_cutlass.verify import RULES, all_invariants, invariant_of, load_invariants, verify_gemm
from argus_cutlass.verify.absint import check_assertion
from argus_cutlass.verify.catalogue import catalogue_names


def test_tag_str():
    assert str(Tag("A", ("m", "k"))) == "A:(m,k)"
    assert str(Tag("stage", ("iter",))) == "stage:(iter)"


def test_nodes_record_the_users_line():
    b = ProgramBuilder("demo")
    g = b.tensor("gA", "gmem", ("M", "K"), "bf16", tag=Tag("A", ("m", "k")), major="K", binding="A")  # line under test
    t = b.build().tensor("gA")
    assert t is g and t.loc.file == __file__
    assert 'b.tensor("gA"' in linecache.getline(t.loc.file, t.loc.line)
    assert t.loc.function == "test_nodes_record_the_users_line"


def test_gemm_program_nodes_point_at_their_statements():
    p = build_program(GemmConfig())
    for node, text in [(p.assertions[0], "assert_tags"), (p.read("A"), "mma_read"),
                       (p.load_into("sB"), "tma_load"), (p.epilogue, "epilogue_store"),
                       (p.schedule, "tile_schedule"), (p.staging, "smem_stage"), (p.relations[0], "relate_family(")]:
        assert node.loc.file.endswith("kernels/gemm/program.py")
        assert text in linecache.getline(node.loc.file, node.loc.line)
    a = p.assertions[0]
    assert (a.invariant, a.rule, str(a)) == ("G1", "mma.k_agreement", "A.k == B.k at mainloop.gemm")


def test_nodes_are_frozen_and_replace_is_by_name():
    p = build_program(GemmConfig())
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.tensor("sA").base_bytes = 0  # type: ignore[misc]
    moved = p.replace_node("tensor", "sB", base_bytes=0)
    assert moved.tensor("sB").base_bytes == 0 and p.tensor("sB").base_bytes != 0
    with pytest.raises(KeyError, match="no tensor 'sX'"):
        p.tensor("sX")


def test_smem_model_is_the_templates_formula():
    """kSmemBytes = barrier_bytes + 2 x stages x 8 + 1024, and the breakdown adds up to it."""
    for cfg in (GemmConfig(), GemmConfig(tile_m=64, tile_n=128, schedule="pingpong", epi_m=64, stages=7)):
        p = build_program(cfg)
        total = smem_total_bytes(p)
        assert total == p.pipeline.barrier_bytes + 16 * cfg.stages + 1024 == smem_breakdown(p).total
        ends = [t.base_bytes + t.size_bytes for t in p.tensors if t.space == "smem"]
        assert max(ends) <= p.pipeline.barrier_bytes
        assert p.tensor("sA").base_bytes % 1024 == 0 and p.tensor("sB").base_bytes % 1024 == 0


def test_catalogue_is_data_and_honest():
    assert {"gemm", "common"} <= set(catalogue_names())
    invs = {i.id: i for i in load_invariants()}
    assert [f"G{i}" for i in range(1, 10)] == [k for k in invs if k.startswith("G")]
    assert invs["G9"].checked and set(invs["G9"].rules) == {"stage.cover", "stage.zero", "stage.align",
                                                            "stage.writeback"}
    assert invs["G1"].checked
    assert {"mma.k_agreement", "mma.operand_identity", "gmma.descriptor"} <= set(invs["G1"].rules)
    assert invs["G5"].checked and {"tma.image", "tma.multicast", "cluster.consistency"} <= set(invs["G5"].rules)
    assert invs["G3"].checked and invs["G3"].rules == ("k.coverage", "k.acc_sets", "loop.step")
    assert invs["G6"].checked and {"pipeline.protocol", "pipeline.release", "pipeline.wrap", "pipeline.buffers",
                                   "epilogue.stage_reuse"} <= set(invs["G6"].rules)
    assert invs["G2"].checked and {"epilogue.coordinate", "epilogue.stmatrix", "epilogue.tma_store",
                                   "epilogue.source", "epilogue.partition"} <= set(invs["G2"].rules)
    assert invs["G4"].checked and set(invs["G4"].rules) == {"output.bijection", "scheduler.bijection",
                                                            "scheduler.cluster_reduce"}
    assert invs["G8"].checked and set(invs["G8"].rules) == {"residue.store", "residue.load", "residue.source"}
    assert invs["G7"].checked and invs["G7"].rules == ("warpgroup.uniform",)
    # every resource rule and every relation rule of the GEMM program has exactly one invariant
    p = build_program(GemmConfig())
    rules = set(RULES) | {r.rule for r in p.relations} | {a.rule for a in p.assertions}
    for rule in rules:
        owners = [i.id for i in all_invariants() if rule in i.rules]
        assert len(owners) == 1, (rule, owners)
    assert invariant_of("relation.that.nobody.checks") == "?"
    assert all(i.source for i in all_invariants())


def test_catalogue_covers_the_other_families_rules():
    """invariant_of finds the shared catalogue's rules (named barriers, turn orders)."""
    assert invariant_of("barrier.named") == "B1" and invariant_of("turn.order") == "B2"


def test_every_rule_a_report_names_is_in_the_catalogue():
    p = build_program(GemmConfig(cluster_m=2, cluster_n=2, stages=3))
    reports = [verify_gemm(p)]
    for kind, key, ch in [("load", "tma_sA", {"mask_self": False}), ("epilogue", None, {"row_offset": 8}),
                          ("source", None, {"residue_mask": False}), ("loop", "k", {"oob_fill": "nan"}),
                          ("read", "A", {"warp_stage_skew": (1, 1, 1, 1)})]:
        reports.append(verify_gemm(p.replace_node(kind, key, **ch), smt=False))
    rules = {x.rule for r in reports for x in (*r.proofs, *r.violations)}
    assert all(invariant_of(r) != "?" for r in rules), sorted(r for r in rules if invariant_of(r) == "?")


def _assertion(p, lhs, rel, rhs, rule="user.rule", inv="U1"):
    return TagAssertion(f"{inv}:{lhs}{rel}{rhs}", "mainloop.gemm", lhs, rel, rhs, inv, rule, p.assertions[0].loc)


def test_user_assertion_with_its_own_rule_is_checked_generically():
    """A new invariant is data: an assertion with a rule the verifier has never heard of is
    checked slot by slot over the tags it names, and reported under its own id."""
    p = build_program(GemmConfig(cluster_m=1))
    mine = _assertion(p, ("A", "iter"), "==", ("stage", "iter"), rule="user.same_k_tile")
    ok = verify_gemm(dataclasses.replace(p, assertions=p.assertions + (mine,)), smt=False)
    assert ok.ok and any(x.rule == "user.same_k_tile" and x.invariant == "U1" for x in ok.proofs)
    bad = p.replace_node("read", "A", view=SmemView(GmmaSmemAtom("K", 64, 16), p.read("A").view.shape))
    report = verify_gemm(dataclasses.replace(bad, assertions=bad.assertions + (mine,)), smt=False)
    assert "mma.k_agreement" in report.rules_violated()
    # SW64 over SW128 permutes within a stage: every slot still reads its own k-tile (the stage tag holds)
    assert "user.same_k_tile" not in report.rules_violated()


@pytest.mark.parametrize("lhs,rel,rhs,holds", [
    (("A", "k"), "<=", ("slot", "k"), True),
    (("A", "k"), "<", ("slot", "k"), False),
    (("A", "m"), ">=", ("const", "0"), True),
    (("A", "m"), ">", ("const", "0"), False),              # row 0 of tile (0, 0)
    (("A", "m"), "!=", ("B", "n"), False),                 # A(0, k) and B(0, k) share the coordinate 0
    (("A", "k"), "in_range", ("const", "0:256"), True),    # 4 stages x 64 columns
    (("A", "k"), "in_range", ("const", "0:128"), False),
    (("A", "m"), "bijection", ("slot", "m"), True),
    (("A", "m"), "bijection", ("slot", "k"), False),
    (("acc", "n"), "==", ("B", "n"), True),
    (("A", "k"), "!=", ("const", "-1"), True),
])
def test_relations_beyond_equality(lhs, rel, rhs, holds):
    p = build_program(GemmConfig(cluster_m=1))
    proofs, violations, unknowns = check_assertion(p, _assertion(p, lhs, rel, rhs))
    assert not unknowns
    assert bool(proofs) == holds and bool(violations) != holds
    if violations:
        cex = violations[0].counterexample
        assert cex.thread and cex.register and cex.program_point == "mainloop.gemm"


def test_bijection_catches_a_row_read_twice():
    """An MMA that reads A's rows 0..63 for both warpgroups (the view's second 64 rows collapsed onto
    the first) is not a bijection of A's rows onto the slot's rows."""
    p = build_program(GemmConfig(cluster_m=1))
    view = p.read("A").view
    bad = p.replace_node("read", "A", view=SmemView(view.atom, (64, view.shape[1], view.shape[2] * 2)))
    proofs, violations, _ = check_assertion(bad, _assertion(bad, ("A", "m"), "bijection", ("slot", "m")))
    assert violations and "not one-to-one" in violations[0].counterexample.actual
