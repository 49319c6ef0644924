"""Row-bounded MoE tiles (MoEConfig.row_bounded): the verifier's model of the printed coordinates (rule
moe.group_tiles, M3), the routed-rows table (simulate_routing, moe.workspace, moe.pdl) and the planted mistakes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from argus_cutlass.kernels.moe.heuristics import small_t_config
from argus_cutlass.kernels.moe.problem import MoEProblem
from argus_cutlass.kernels.moe.program import build_layer
from argus_cutlass.render.moe import render_moe
from argus_cutlass.testing.mutants_moe import base_layer, load_moe_catalogue, mutant_layer, verify_moe_mutant
from argus_cutlass.verify.moe import routing_cases, simulate_routing, verify_moe

#: the row-bound mutants of the catalogue (rules moe.group_tiles / moe.workspace)
ROW_BOUND_MUTANTS = ("rb_gu_store_shift_up", "rb_dn_load_shift_down", "rb_tile_rows_over", "rb_tile_rows_under",
                     "rb_gu_load_unbounded", "rb_dn_store_unbounded", "rb_tile_rows_unwritten", "ws_tile_rows_empty")


def _rb(tile_m: int = 64, problem: MoEProblem | None = None, **changes):
    cfg = small_t_config(tile_m=tile_m).replace(row_bounded=True, **changes)
    return build_layer(cfg, problem or MoEProblem(16, 8, 2, 256, 512))


@pytest.mark.parametrize("tile_m", [64, 128])
@pytest.mark.parametrize("problem", [MoEProblem(16, 8, 2, 256, 512), MoEProblem(16, 64, 8, 512, 256)],
                         ids=["e8k2", "e64k8"])
def test_row_bounded_layers_verify(tile_m, problem):
    """The row-bounded layer (both GEMMs' A loads and D stores row_bound, the routing's tile_rows table, its
    workspace region) passes every rule, completely; moe.group_tiles states the row-bound model it checked."""
    layer = _rb(tile_m, problem)
    assert layer.routing.tile_rows and layer.routing.pad == tile_m and layer.name.endswith("_rb")
    rep = verify_moe(layer, smt=True)
    assert rep.ok and rep.complete and not rep.unknowns, [v.format() for v in rep.violations]
    (gt,) = [p for p in rep.proofs if p.rule == "moe.group_tiles" and p.engine == "enum"]
    assert "row_bound tile_rows (gate_up, down)" in gt.summary and "padded_rows a multiple of kTileM" in gt.summary
    (ws,) = [p for p in rep.proofs if p.rule == "moe.workspace"]
    assert "tile_rows" in ws.summary


def test_simulate_routing_prints_tile_rows():
    """simulate_routing's tile_rows is route_scan's printed table (the padding rows before each group's routed rows:
    count_e - (t_e - 1) pad for the group's first m-tile, pad for the others) + tile_rows_delta, written for every
    m-tile < tiles_m; absent without the routing's tile_rows."""
    layer = _rb(64)
    assert layer.routing.group_padding == "before"
    for label, ids in routing_cases(layer):
        sim = simulate_routing(layer, ids)
        off, cnt, pad = sim["offsets"], sim["counts"], layer.routing.pad
        want = [int(cnt[e]) - (-(-int(cnt[e]) // pad) - 1) * pad if j == int(off[e]) // pad else pad
                for j in range(sim["tiles_m"]) for e in [int(sim["tile_expert"][j])]]
        assert list(sim["tile_rows"][: sim["tiles_m"]]) == want, label
        assert sim["tile_rows_written"][: sim["tiles_m"]].all(), label
    sizes = (64, 128, 0, 130, 65, 213, 0, 0)
    from argus_cutlass.hw.routing import make_routing

    ids, _ = make_routing("sizes", 300, 8, 2, seed=1, sizes=sizes)
    sim = simulate_routing(layer.replace_node("routing", tile_rows_delta=-1), ids.astype(np.int64))
    # groups 64 | 128 | 130 (2 + 64 + 64) | 65 (1 + 64) | 213 (21 + 64 x 3): the partial m-tile first
    assert list(sim["tile_rows"][: sim["tiles_m"]]) == [63, 63, 63, 1, 63, 63, 0, 63, 20, 63, 63, 63]
    assert "tile_rows" not in simulate_routing(build_layer(small_t_config(), MoEProblem(16, 8, 2, 256, 512)), ids)


@pytest.mark.parametrize("pad", [64, 128])
def test_routing_cases_reach_full_and_partial_m_tiles(pad):
    """The routings moe.group_tiles runs on hold m-tiles with exactly pad routed rows (the box unshifted), partial
    ones (1 .. pad - 1 rows), and groups of more than pad rows, at both tile heights."""
    layer = _rb(pad)
    full = partial = long_group = False
    for _label, ids in routing_cases(layer):
        sim = simulate_routing(layer, ids)
        rows = sim["tile_rows"][: sim["tiles_m"]]
        full |= bool((rows == pad).any())
        partial |= bool(((rows >= 1) & (rows < pad)).any())
        long_group |= bool((sim["counts"] > pad).any())
    assert full and partial and long_group


@pytest.mark.parametrize("mutant_id", ROW_BOUND_MUTANTS)
def test_row_bound_mutants_refused(mutant_id):
    """Each row-bound mutant is refused by its rule with a counterexample naming the m-tile (or the region), and
    its edit reaches the printed source."""
    m = load_moe_catalogue()[mutant_id]
    assert m.base["config"]["row_bounded"] is True
    rep = verify_moe_mutant(m)
    hits = [v for v in rep.violations if v.rule == m.rule]
    assert hits and hits[0].counterexample is not None, [v.format() for v in rep.violations]
    cex = hits[0].counterexample
    if m.rule == "moe.group_tiles":
        assert "m_tile" in cex.element
        if m.id != "rb_tile_rows_unwritten":
            assert {"expert", "row"} <= set(cex.element) and {"T", "valid", "true_valid"} <= set(cex.params)
    else:
        assert cex.element["region"] == "tile_rows"
    assert render_moe(mutant_layer(m)) != render_moe(base_layer(m))


def test_full_m_tiles_alone_refuse_the_shifted_table():
    """On a routing whose every m-tile is full (groups of exactly 64 rows: tile_rows = pad), tile_rows one too many
    places the boxes at row -1 (a negative TMA coordinate: refused; a store there faulted on the H200), and one too few
    at row 1, so each m-tile's row 0 is never loaded (the partial m-tiles' extra padding row is harmless data)."""
    from argus_cutlass.hw.routing import make_routing
    from argus_cutlass.verify.moe import _check_group_tiles

    layer = _rb(64)
    ids, _ = make_routing("sizes", 96, 8, 2, seed=1, sizes=(64, 64, 0, 0, 0, 0, 0, 64))
    case = [("full m-tiles", ids.astype(np.int64))]
    assert (simulate_routing(layer, ids)["tile_rows"][:3] == 64).all()
    proofs, bad = _check_group_tiles(layer, case)
    assert proofs and not bad
    # one too many: the boxes start at row -1 (a negative TMA coordinate, refused before anything else); one too
    # few: they start at row 1, so the m-tile's row 0 is never loaded
    proofs, bad = _check_group_tiles(layer.replace_node("routing", tile_rows_delta=1), case)
    v = next(v for v in bad if v.rule == "moe.group_tiles")
    assert "a negative TMA coordinate" in v.message and v.counterexample.element["box_row"] == -1, v.message
    assert v.counterexample.element["m_tile"] == 0 and v.counterexample.params["valid"] == 65
    proofs, bad = _check_group_tiles(layer.replace_node("routing", tile_rows_delta=-1), case)
    v = next(v for v in bad if v.rule == "moe.group_tiles")
    assert "routed row 0 is never loaded" in v.message, v.message
    assert v.counterexample.element["m_tile"] == 0 and v.counterexample.params["valid"] == 63
    # the store alone shifted: accumulator row r (row r's product) lands on row r + 1, so row 1 gets row 0's
    bad = _check_group_tiles(layer.replace_node("down", "store", "tma_store_sD", row_shift_delta=1), case)[1]
    assert "routed row 1 receives accumulator row 0, which holds row 0" in bad[0].message, bad[0].message


def test_plain_layers_unchanged():
    """Without row_bounded no GEMM reads tile_rows: no table, no region, the chain and the pre-wait reads as before,
    and an extra tile_rows region is refused as accessed by no kernel."""
    from argus_cutlass.verify.moe import PDL_CHAIN, pdl_chain, pdl_pre_wait, row_bound_kernels

    plain = build_layer(small_t_config().replace(pdl=True, weight_prefetch=8), MoEProblem(16, 8, 2, 256, 512))
    assert row_bound_kernels(plain) == () and pdl_chain(plain) == PDL_CHAIN
    assert "tile_rows" not in {b for v in pdl_pre_wait(plain).values() for b in v}
    rb = _rb(64)
    extra = dataclasses.replace(plain, workspace=dataclasses.replace(
        plain.workspace, regions=plain.workspace.regions[:5] + (rb.workspace.region("tile_rows"),)
        + plain.workspace.regions[5:]))
    v = next(v for v in verify_moe(extra, smt=False).violations if v.rule == "moe.workspace")
    assert "workspace region 'tile_rows' is accessed by no kernel" in v.message


def test_row_bound_tables_match_the_printed_kernels():
    """The tile_rows table's accesses (ROW_BOUND_ACCESSES through pdl_chain / pdl_pre_wait) against the printed
    layer: route_scan takes ``int32_t* tile_rows`` and writes it, run() passes tile_rows to both run_grouped calls,
    each Scheduler::current reads ``p.tile_rows[w.tm]`` beside tile_expert (also in the weight prefetch, before
    griddepcontrol.wait)."""
    import re

    from argus_cutlass.verify.moe import pdl_chain, pdl_pre_wait

    layer = _rb(64, pdl=True, weight_prefetch=8, handoff=True)
    src = render_moe(layer)
    chain = {n: (set(r), set(w)) for n, r, w in pdl_chain(layer)}
    m = re.search(r"__global__ void __launch_bounds__\([^)]*\) route_scan\(([^)]*)\)", src)
    assert "int32_t* tile_rows" in m.group(1) and "tile_rows" in chain["route_scan"][1]
    assert "tile_rows[base + i] = (i == 0 ? count - (t - 1) * kPad : kPad);" in src
    assert "pos = offsets[e + 1] - RowIndex(counts[e]) +" in src and "counts" in chain["route_permute"][0]
    run = src[src.index("inline int run("):]
    for part, ns in (("gate_up", "_gu"), ("down", "_dn")):
        args = [a.strip() for a in re.search(ns + r"::run_grouped\(([^;]*)\);", run).group(1).split(",")]
        assert args[-2] == "tile_rows" and "tile_rows" in chain[part][0], (part, args)
        assert "tile_rows" in pdl_pre_wait(layer)[part]
    assert src.count("w.rows = p.tile_rows[w.tm];") == 2 and src.count("prefetch_first_weights(p);") == 2
    rep = verify_moe(layer)
    assert rep.ok and rep.complete, [v.format() for v in rep.violations]


def test_padded_rows_off_the_tile_is_refused():
    """run_grouped refuses rows % kTileM != 0 with row_bound maps: a workspace rounding padded_rows to 32 rows under
    64-row tiles is refused by moe.group_tiles with the T where the call would fail."""
    layer = _rb(64).replace_node("workspace", round_rows=32)
    v = next(v for v in verify_moe(layer, smt=False).violations if v.rule == "moe.group_tiles")
    assert "is not a multiple of kTileM = 64" in v.message and v.counterexample.params["padded_rows"] % 64 == 32


def test_generate_row_bounded():
    """The orchestrator proves and prints a row-bounded layer (3-D maps, the shifted boxes, the table)."""
    from argus_cutlass.generate import generate

    k = generate(small_t_config().replace(row_bounded=True), MoEProblem(16, 8, 2, 256, 512), smt=True)
    assert "_rb" in k.name
    assert "make_map_3d<ElementA>" in k.source and "SM90_TMA_STORE_3D" in k.source
    assert "int const a_mn0 = kTileAMn - w.rows;" in k.source and "moe.group_tiles" in k.source


@pytest.mark.parametrize("tile_m", [64, 128])
def test_every_single_row_bound_edit_is_refused(tile_m):
    """Each one-field edit of the row-bound nodes (a load's or store's row_shift_delta by -2..2, its row_bound
    dropped, the routing's tile_rows_delta by -2..2 or its table dropped) is a wrong kernel, and moe.group_tiles
    refuses it on the enumerated routings; the unedited layer passes."""
    from argus_cutlass.verify.moe import _check_group_tiles

    layer = _rb(tile_m)
    cases = routing_cases(layer)
    proofs, viol = _check_group_tiles(layer, cases)
    assert proofs and not viol
    edits = [("routing", None, None, {"tile_rows_delta": d}) for d in (-2, -1, 1, 2)]
    edits.append(("routing", None, None, {"tile_rows": False}))
    for part in ("gate_up", "down"):
        prog = layer.program(part)
        for kind, name in (("load", prog.load_into("sA").name), ("store", prog.stores[0].name)):
            edits += [(part, kind, name, {"row_shift_delta": d}) for d in (-2, -1, 1, 2)]
            edits.append((part, kind, name, {"row_bound": ""}))
    for part, kind, name, change in edits:
        bad = layer.replace_node(part, **change) if part == "routing" else layer.replace_node(part, kind, name, **change)
        _proofs, viol = _check_group_tiles(bad, cases)
        assert [v.rule for v in viol] == ["moe.group_tiles"] and viol[0].counterexample is not None, (part, change)


@pytest.mark.parametrize("node", ["load", "store"])
def test_row_bound_refused_in_a_plain_gemm(node):
    """row_bound belongs to the grouped GEMMs of family moe: a plain GEMM has no routed-row table and its host
    encodes 2-D maps, so a row_bound load or store there is refused (mma.operand_identity, host side)."""
    from argus_cutlass.generate import build, verify
    from argus_cutlass.kernels.gemm.config import GemmConfig

    p = build(GemmConfig())
    q = (p.replace_node("load", p.load_into("sA").name, row_bound="tile_rows") if node == "load"
         else p.replace_node("store", p.stores[0].name, row_bound="tile_rows"))
    rep = verify(q, smt=False)
    assert not rep.ok
    v = next(v for v in rep.violations if v.rule == "mma.operand_identity")
    assert "row_bound 'tile_rows'" in v.message and v.counterexample is not None
