"""Malformed DSL programs are refused at their source line, with a named rule (not a trace)."""

from __future__ import annotations

import pytest

from argus_cutlass.dsl.atoms import GmmaOp, TmaCopy
from argus_cutlass.dsl.ir import ProgramBuilder, Tag
from argus_cutlass.errors import DslError
from argus_cutlass.layout.algebra import Layout

THIS = "test_dsl_errors.py"


def _builder():
    b = ProgramBuilder("bad", stages=2)
    g = b.tensor("gA", "gmem", (64, 64), "bf16", tag=Tag("A", ("m", "k")))
    s = b.tensor("sA", "smem", (64, 64, 2), "bf16", layout=Layout((64, 64, 2), (64, 1, 4096)))
    return b, g, s


def _line_of(err: DslError) -> str:
    text = str(err)
    assert THIS in text, text
    return text


def test_layout_size_disagrees_with_shape():
    b = ProgramBuilder("bad", stages=2)
    with pytest.raises(DslError) as info:
        b.tensor("sA", "smem", (64, 64, 2), "bf16", layout=Layout((64, 32, 2), (32, 1, 2048)))
    assert info.value.rule == "dsl.layout_size" and "8192 elements" in _line_of(info.value)


def test_tma_from_an_untagged_tensor():
    b, _, s = _builder()
    g = b.tensor("gX", "gmem", (64, 64), "bf16")
    with pytest.raises(DslError) as info:
        b.tma_load(g, s, TmaCopy("load", (64, 64), 16, 128), major="K", tile_mn=64, tile_k=64,
                   stage_tag=Tag("stage", ("iter",)))
    assert info.value.rule == "dsl.untagged" and "carries no tag" in _line_of(info.value)


def test_assertion_over_an_unknown_tag_field_and_an_untagged_operand():
    b, g, s = _builder()
    b.tma_load(g, s, TmaCopy("load", (64, 64), 16, 128), major="K", tile_mn=64, tile_k=64,
               stage_tag=Tag("stage", ("iter",)))
    op = GmmaOp(64, 64, 16, "bf16", "K", "K")
    b.mma_read("A", s, s.layout, op, tile_mn=64, tile_k=64, warpgroups=1)
    with pytest.raises(DslError) as info:
        b.assert_tags("mainloop.gemm", ("A", "kk"), "==", ("A", "k"), invariant="G1", rule="mma.k_agreement")
    assert info.value.rule == "dsl.unknown_tag" and "has no field 'kk'" in _line_of(info.value)
    with pytest.raises(DslError) as info:
        b.assert_tags("mainloop.gemm", ("A", "k"), "==", ("B", "k"), invariant="G1", rule="mma.k_agreement")
    assert info.value.rule == "dsl.untagged" and "'B' has no MMA read" in _line_of(info.value)


def test_mma_read_layout_of_another_size():
    b, g, s = _builder()
    op = GmmaOp(64, 64, 16, "bf16", "K", "K")
    with pytest.raises(DslError) as info:
        b.mma_read("A", s, Layout((64, 64, 1), (64, 1, 4096)), op, tile_mn=64, tile_k=64, warpgroups=1)
    assert info.value.rule == "dsl.layout_size" and _line_of(info.value)
