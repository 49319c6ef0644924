"""Malformed DSL programs are refused at their source line, with a named rule (not a trace); an
edited program the builder never saw is a violation of the verifier, never an exception."""

from __future__ import annotations

import dataclasses

import pytest

from argus_cutlass.dsl.atoms import GmmaOp, GmmaSmemAtom, TmaCopy
from argus_cutlass.dsl.builder import ProgramBuilder
from argus_cutlass.dsl.ir import Tag
from argus_cutlass.errors import DslError
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.program import build_program
from argus_cutlass.verify import verify_gemm

THIS = "test_dsl_errors.py"
ATOM = GmmaSmemAtom("K", 128, 16)
OP = GmmaOp(64, 64, 16, "bf16", "K", "K")


def _builder():
    b = ProgramBuilder("bad")
    g = b.tensor("gA", "gmem", ("M", "K"), "bf16", tag=Tag("A", ("m", "k")), major="K", binding="A")
    s = b.tensor("sA", "smem", (64, 64, 2), "bf16", align_bytes=1024)
    return b, g, s


def _line_of(err: DslError) -> str:
    text = str(err)
    assert THIS in text, text
    return text


def test_smem_shape_must_be_ints():
    b = ProgramBuilder("bad")
    with pytest.raises(DslError) as info:
        b.tensor("sA", "smem", (64, "K", 2), "bf16")
    assert info.value.rule == "dsl.layout_size" and "every extent must be a positive int" in _line_of(info.value)


def test_tma_from_an_untagged_tensor():
    b, _, s = _builder()
    g = b.tensor("gX", "gmem", ("M", "K"), "bf16", major="K", binding="A")
    with pytest.raises(DslError) as info:
        b.tma_load(g, s, TmaCopy("load", (64, 64), 16, 128), major="K", tile_mn=64, tile_k=64,
                   stage_tag=Tag("stage", ("iter",)))
    assert info.value.rule == "dsl.untagged" and "carries no tag" in _line_of(info.value)


def test_assertion_over_an_unknown_tag_field_and_an_untagged_operand():
    b, g, s = _builder()
    b.tma_load(g, s, TmaCopy("load", (64, 64), 16, 128), major="K", tile_mn=64, tile_k=64,
               stage_tag=Tag("stage", ("iter",)))
    b.mma_read("A", s, b.smem_view(ATOM, s.shape), OP, tile_mn=64, tile_k=64, warpgroups=1)
    with pytest.raises(DslError) as info:
        b.assert_tags("mainloop.gemm", ("A", "kk"), "==", ("A", "k"), invariant="G1", rule="mma.k_agreement")
    assert info.value.rule == "dsl.unknown_tag" and "has no field 'kk'" in _line_of(info.value)
    with pytest.raises(DslError) as info:
        b.assert_tags("mainloop.gemm", ("A", "k"), "==", ("B", "k"), invariant="G1", rule="mma.k_agreement")
    assert info.value.rule == "dsl.untagged" and "'B' has no MMA read" in _line_of(info.value)
    with pytest.raises(DslError) as info:
        b.assert_tags("mainloop.gemm", ("A", "k"), "~=", ("A", "k"), invariant="G1", rule="x")
    assert info.value.rule == "dsl.relation" and _line_of(info.value)


def test_mma_read_view_of_another_shape():
    b, g, s = _builder()
    with pytest.raises(DslError) as info:
        b.mma_read("A", s, b.smem_view(ATOM, (64, 64, 1)), OP, tile_mn=64, tile_k=64, warpgroups=1)
    assert info.value.rule == "dsl.layout_size" and _line_of(info.value)


def test_relation_over_a_node_that_does_not_exist():
    b, _, _ = _builder()
    with pytest.raises(DslError) as info:
        b.relate("pipeline[main].stages", "==", "tensor[sA].shape[2]", invariant="G6", rule="pipeline.buffers")
    assert info.value.rule == "dsl.unknown_ref" and "no pipeline 'main'" in _line_of(info.value)


@pytest.mark.parametrize("edit,rule", [
    (("relation", None, {"lhs": "pipeline[nope].stages"}), "dsl.unknown_ref"),
    (("relation", None, {"lhs": "tensor[sA].shape[2]x"}), "dsl.unknown_ref"),   # trailing garbage
    (("relation", None, {"relation": "<", "rhs": "mma[mainloop].op.dtype"}), "dsl.relation"),
    (("load", "tma_sA", {"src": "gX"}), "dsl.unknown_ref"),
    (("mma", "mainloop", {"a": "gmma_X"}), "dsl.unknown_ref"),
    (("assertion", None, {"lhs": ("A",)}), "dsl.relation"),
    (("assertion", None, {"at": "epilogue.store"}), "dsl.unknown_ref"),
])
def test_edited_programs_are_violations_not_exceptions(edit, rule):
    p = build_program(GemmConfig(cluster_m=1))
    kind, key, changes = edit
    if kind == "relation":
        key = p.relations[0].name
    if kind == "assertion":
        key = p.assertions[0].name
    report = verify_gemm(p.replace_node(kind, key, **changes), smt=False)
    assert rule in report.rules_violated(), report.format()
    v = next(v for v in report.violations if v.rule == rule)
    assert v.invariant == "DSL" and v.where


def test_a_program_without_gemm_nodes_is_refused_once():
    p = build_program(GemmConfig(cluster_m=1))
    report = verify_gemm(dataclasses.replace(p, pipelines=(), staging=None), smt=False)
    assert "dsl.program" in report.rules_violated()
    v = next(v for v in report.violations if v.rule == "dsl.program")
    assert "has no pipeline, staging" in v.message


@pytest.mark.parametrize("kind,key,field,value", [
    ("epilogue", None, "row_offset", -64),
    ("epilogue", None, "row_offset", 2**31),        # printed as a constexpr int: INT_MIN in C
    ("staging", None, "row_lane_skew", -4),
    ("read", "gmma_A", "warp_stage_skew", (-4, -4, -4, -4)),
    ("source", None, "row_offset", -1),
    # red team, session 39: 2^31 - 3 is 0 mod 5 in the model, but (stage + 2^31 - 3) % kStages overflows int in C
    ("read", "gmma_A", "warp_stage_skew", (2**31 - 3, 0, 0, 0)),
    ("epilogue", None, "row_offset", 2**30),
])
def test_fields_in_c_remainders_are_non_negative_ints(kind, key, field, value):
    """A field the kernel adds to an index inside C's ``%`` (which keeps a negative sign, C11 6.5.5) and prints as
    a ``constexpr int`` must lie in [0, 2^30): there the sum fits ``int`` and the verifier's Python ``%`` is C's
    (red team, session 18: row_offset -64 was accepted by the model and wrote staging rows -64..-1 in C; session
    39: a stage skew of 2^31 - 3 overflowed the sum)."""
    prog = build_program(GemmConfig())
    with pytest.raises(DslError, match=r"expected an int in \[0, 2\^30\)"):
        prog.replace_node(kind, key, **{field: value}) if key else prog.replace_node(kind, **{field: value})


def test_k_loop_bound_bits_leave_1_shl_bits_an_int():
    prog = build_program(GemmConfig())
    with pytest.raises(DslError, match=r"bound_bits 31: expected an int in \[1, 30\]"):
        prog.replace_node("loop", "k", bound_bits=31)


def test_moe_combine_weight_shift_is_non_negative():
    from argus_cutlass.kernels.moe.config import MoEConfig
    from argus_cutlass.kernels.moe.problem import MoEProblem
    from argus_cutlass.kernels.moe.program import build_layer

    layer = build_layer(MoEConfig(), MoEProblem(300, 8, 2, 512, 256))
    for shift in (-2, 2**31 - 2):   # (j + 2^31 - 2) % 6 overflows int in C for j >= 2 (red team, session 39)
        with pytest.raises(DslError, match=rf"weight_slot_shift {shift}: expected an int in \[0, 2\^30\)"):
            layer.replace_part("combine", weight_slot_shift=shift) if hasattr(layer, "replace_part") else \
                dataclasses.replace(layer.combine, weight_slot_shift=shift)


@pytest.mark.parametrize("major,swizzle,bits", [("M", 128, 16), ("N", 128, 16), ("K", 256, 16), ("MN", 128, 4)])
def test_smem_atom_outside_cute_is_refused(major, swizzle, bits):
    """An atom CuTe lacks (e.g. Layout_M_SW128_Atom, red team session 19: it verified and failed in nvcc)."""
    from argus_cutlass.dsl.atoms import GmmaSmemAtom

    with pytest.raises(DslError) as exc:
        GmmaSmemAtom(major, swizzle, bits)
    assert exc.value.rule == "smem.atom" and repr(major) in str(exc.value)


@pytest.mark.parametrize("operand", ["A", "B"])
@pytest.mark.parametrize("field", ["tile_k", "tile_mn", "warpgroups", "op.n", "mma"])
def test_read_geometry_is_the_mma_and_the_load(operand, field):
    """gmma.reads rejects a read whose op, slot tile or warpgroups differ from its MMA's and its load's
    (the rules read the reads; the kernel takes the tiles from the loads: red team session 19 found these
    edits accepted, stopped only by the template's static_assert)."""
    cfg = GemmConfig(tile_m=128, tile_n=16, cluster_m=1, cluster_n=1, stages=8, epi_m=128, epi_n=16, swap_ab=True,
                     scheduler="streamk")
    p = build_program(cfg)
    r = p.read(operand)
    if field == "op.n":
        change = {"op": dataclasses.replace(r.op, n=r.op.n * 2)}
    elif field == "mma":
        change = {"mma": r.mma + "_other"}
    else:
        change = {field: getattr(r, field) * 2 + 1}
    report = verify_gemm(p.replace_node("read", operand, **change), smt=False)
    assert not report.ok and "gmma.reads" in report.rules_violated(), report.format()
    assert verify_gemm(p, smt=False).ok
