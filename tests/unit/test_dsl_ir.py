"""DSL IR: tags, source locations, frozen nodes; the invariant catalogue as data."""

from __future__ import annotations

import dataclasses
import linecache

import pytest

from argus_cutlass.dsl import ProgramBuilder, Tag
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.programs.gemm import build_gemm_program
from argus_cutlass.programs.gemm_dsl import gemm_dsl_program, smem_offsets
from argus_cutlass.plan.resources import smem_bytes
from argus_cutlass.verify import RULES, load_invariants


def test_tag_str():
    assert str(Tag("A", ("m", "k"))) == "A:(m,k)"
    assert str(Tag("stage", ("iter",))) == "stage:(iter)"


def test_nodes_record_the_users_line():
    b = ProgramBuilder("demo", stages=2)
    g = b.tensor("gA", "gmem", (64, 64), "bf16", tag=Tag("A", ("m", "k")))  # line under test
    t = b.build().tensor("gA")
    assert t is g and t.loc.file == __file__
    assert 'b.tensor("gA"' in linecache.getline(t.loc.file, t.loc.line)
    assert t.loc.function == "test_nodes_record_the_users_line"


def test_gemm_dsl_nodes_point_at_their_statements():
    dsl = gemm_dsl_program(build_gemm_program(GemmConfig()))
    for node, text in [(dsl.assertions[0], "assert_tags"), (dsl.read("A"), "mma_read"),
                       (dsl.load_into("sB"), "tma_load"), (dsl.epilogue, "epilogue_store"),
                       (dsl.schedule, "tile_schedule"), (dsl.staging, "smem_stage")]:
        assert node.loc.file.endswith("programs/gemm_dsl.py")
        assert text in linecache.getline(node.loc.file, node.loc.line)
    a = dsl.assertions[0]
    assert (a.invariant, a.rule, str(a)) == ("G1", "mma.k_agreement", "A.k == B.k at mainloop.gemm")


def test_nodes_are_frozen_and_replace_is_by_name():
    dsl = gemm_dsl_program(build_gemm_program(GemmConfig()))
    with pytest.raises(dataclasses.FrozenInstanceError):
        dsl.tensor("sA").base_bytes = 0  # type: ignore[misc]
    moved = dsl.replace_tensor("sA", base_bytes=0)
    assert moved.tensor("sA").base_bytes == 0 and dsl.tensor("sA").base_bytes != 0
    with pytest.raises(KeyError, match="no tensor 'sX'"):
        dsl.tensor("sX")


def test_mma_reads_through_the_buffer_layout_by_default():
    dsl = gemm_dsl_program(build_gemm_program(GemmConfig()))
    assert dsl.read("A").layout is dsl.tensor("sA").layout
    assert dsl.read("B").layout is dsl.tensor("sB").layout


def test_smem_offsets_match_the_resource_model():
    for cfg in (GemmConfig(), GemmConfig(tile_m=64, tile_n=128, schedule="pingpong", epi_m=64, stages=7)):
        p = build_gemm_program(cfg)
        off = smem_offsets(p)
        end = off["B"] + p.b.stage_bytes * cfg.stages
        assert smem_bytes(p).total == (end + 15) // 16 * 16
        assert off["A"] % 1024 == 0 and off["B"] % 1024 == 0


def test_catalogue_is_data_and_honest():
    invs = {i.id: i for i in load_invariants()}
    assert [f"G{i}" for i in range(1, 9)] == [k for k in invs if k.startswith("G")]
    assert invs["G1"].checked and invs["G1"].rules == ("mma.k_agreement", "gmma.descriptor")
    assert invs["G5"].checked and "tma.image" in invs["G5"].rules
    assert invs["G3"].checked and invs["G3"].rules == ("k.coverage",)
    assert invs["G6"].checked and "pipeline.protocol" in invs["G6"].rules
    assert "pipeline.release" in invs["G6"].rules  # release only after the wgmma retired
    assert "epilogue.stage_reuse" in invs["G6"].rules  # staging stage rewritten only after its TMA store read it
    assert invs["G2"].checked and invs["G2"].rules == ("epilogue.coordinate", "epilogue.stmatrix", "epilogue.tma_store")
    assert not invs["G2"].unchecked and not invs["G6"].unchecked
    assert invs["G4"].checked and set(invs["G4"].rules) == {"output.bijection", "scheduler.bijection"}
    assert not invs["G4"].unchecked  # CUTLASS's walk and the stream-K / split-K division are modelled
    assert invs["G8"].checked and invs["G8"].rules == ("residue.store",)
    assert invs["G7"].checked and invs["G7"].rules == ("warpgroup.uniform",)
    checked_rules = {r for i in invs.values() if i.checked for r in i.rules}
    output_rules = {"epilogue.coordinate", "epilogue.stmatrix", "epilogue.tma_store", "output.bijection", "scheduler.bijection",
                    "residue.store", "warpgroup.uniform"}
    assert set(RULES) | {"mma.k_agreement", "gmma.descriptor", "tma.image", "tma.multicast", "k.coverage"} \
        | set(invs["G6"].rules) | output_rules \
        == checked_rules
    assert all(i.source for i in invs.values())


def test_user_assertion_with_its_own_rule_is_checked_generically():
    """A new invariant is data: an assertion with a rule the verifier has never heard of is
    checked slot by slot over the tags it names, and reported under its own id."""
    from argus_cutlass.dsl.atoms import GmmaSmemAtom
    from argus_cutlass.dsl.ir import TagAssertion
    from argus_cutlass.verify import verify_gemm

    program = build_gemm_program(GemmConfig())
    dsl = gemm_dsl_program(program)
    mine = dataclasses.replace(dsl.assertions[0], name="U1:stage", rule="user.same_k_tile", invariant="U1")
    assert isinstance(mine, TagAssertion)
    ok = verify_gemm(program, dataclasses.replace(dsl, assertions=dsl.assertions + (mine,)))
    assert ok.ok and any(p.rule == "user.same_k_tile" and p.invariant == "U1" for p in ok.proofs)
    bad = gemm_dsl_program(program, mma_atoms={"A": GmmaSmemAtom("K", 64, 16)})
    report = verify_gemm(program, dataclasses.replace(bad, assertions=bad.assertions + (mine,)))
    v = next(v for v in report.violations if v.rule == "user.same_k_tile")
    assert v.invariant == "U1" and v.counterexample is not None
