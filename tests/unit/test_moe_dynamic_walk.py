"""The dynamic (atomic-ticket) walk of the MoE layer's grouped GEMMs (``MoEConfig.dynamic_walk``, schedule node
``slot_bytes`` / ``slot_stages``, layer node ``tickets_zero``, rule ``moe.dynamic_walk``, invariant M14), on the CPU:
the field and its label, the verifier on correct layers (both tile paths, with and without pdl, the handoffs,
row-bounded tiles and fused routing, small layers and anchor shapes), the printed producer / consumer / routing code,
moe.pdl's and moe.workspace's view of the counters, every planted mistake refused with a counterexample, the ring
protocol's model on its own, layers without the field unchanged, and one nvcc build.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from argus_cutlass.kernels.moe.config import MoEConfig
from argus_cutlass.kernels.moe.heuristics import small_t_config
from argus_cutlass.kernels.moe.problem import MoEProblem
from argus_cutlass.kernels.moe.program import build_layer, layer_label
from argus_cutlass.plan.resources import smem_total_bytes
from argus_cutlass.render.moe import render_moe
from argus_cutlass.testing.mutants_moe import load_moe_catalogue, mutant_layer, verify_moe_mutant
from argus_cutlass.verify.moe import (dynamic_tickets, explore_unit_ring, pdl_chain, pdl_pre_wait, verify_moe,
                                      workspace_accessors)

SMALL = MoEProblem(64, 8, 2, 256, 512)
QWEN = MoEProblem(16, 128, 8, 2048, 768)
MIXTRAL = MoEProblem(16, 8, 2, 4096, 14336)
DSV2 = MoEProblem(16, 64, 6, 2048, 1408)


def _dw(tile_m: int = 64, **kw) -> MoEConfig:
    base = small_t_config(tile_m=tile_m) if tile_m == 64 else MoEConfig()
    return base.replace(dynamic_walk=True, **kw)


def _ok(layer) -> None:
    rep = verify_moe(layer, smt=False)
    assert not rep.violations, [(v.rule, v.message[:200]) for v in rep.violations]
    assert any(p.rule == "moe.dynamic_walk" and "tickets 0..units-1" in p.summary for p in rep.proofs)


def test_field_default_label_and_refusals():
    assert MoEConfig().dynamic_walk is False
    assert layer_label(_dw(128), MIXTRAL).endswith("_dw")
    assert "_dw" not in layer_label(MoEConfig(), MIXTRAL)
    with pytest.raises(ValidationError, match="dynamic_walk"):
        MoEConfig(dynamic_walk=True, pdl=True, weight_prefetch=8)
    with pytest.raises(ValidationError, match="dynamic_walk"):
        MoEConfig(dynamic_walk=True, work_lookahead=1)
    # every broken pair is named, not the first one alone (review, session 44: a shipped entry with fused routing
    # and --set weight_prefetch=4,dynamic_walk=true named only the fused-routing pair)
    with pytest.raises(ValidationError, match=r"fused_routing=True with weight_prefetch=4.*; and dynamic_walk=True"):
        MoEConfig(pdl=True, fused_routing=True, weight_prefetch=4, dynamic_walk=True)
    layer = build_layer(_dw(), SMALL)
    assert layer.dynamic_parts() == ("gate_up", "down")
    for part in ("gate_up", "down"):
        sch = layer.program(part).schedule
        pipe = layer.program(part).pipeline
        assert sch.decomposition == "grouped" and sch.slot_bytes == pipe.barrier_bytes + 16 * pipe.stages
        assert smem_total_bytes(layer.program(part)) == sch.slot_bytes + sch.slot_ring_bytes + 1024
    assert [r.name for r in layer.workspace.regions if "tickets" in r.name] == ["gu_tickets", "dn_tickets"]
    assert build_layer(MoEConfig(), SMALL).dynamic_parts() == ()


@pytest.mark.parametrize("kw", [
    {}, {"pdl": True}, {"pdl": True, "handoff": True}, {"pdl": True, "handoff": True, "combine_handoff": True},
    {"row_bounded": True}, {"fused_routing": True},
    {"pdl": True, "handoff": True, "combine_handoff": True, "row_bounded": True, "fused_routing": True},
])
@pytest.mark.parametrize("tile_m", [64, 128])
def test_verifier_accepts_small_layers(tile_m, kw):
    _ok(build_layer(_dw(tile_m, **kw), SMALL))


@pytest.mark.parametrize("problem", [QWEN, MIXTRAL, DSV2], ids=["qwen", "mixtral", "dsv2"])
def test_verifier_accepts_anchor_shapes(problem):
    _ok(build_layer(_dw(pdl=True, handoff=True, combine_handoff=True, row_bounded=True,
                        fused_routing=problem.experts <= 256), problem))


def test_printed_walk():
    layer = build_layer(_dw(pdl=True, handoff=True, combine_handoff=True, fused_routing=True), SMALL)
    src = render_moe(layer)
    assert src.count("CUTE_DEVICE int take_ticket(Params const& p) { return atomicAdd(p.tickets, kTicketStep); }") == 2
    assert src.count("bool const done = t >= int(sched.units);") == 2
    # the slot is written before the arrive on its full barrier (producer), read after the wait (consumers)
    pub = src.index("unit_slot[su.index] = done ? -1 : t;")
    assert pub < src.index("cutlass::arch::ClusterBarrier::arrive(&unit_full[su.index]);", pub)
    read = src.index("int const t = unit_slot[su.index];")
    assert src.index("cutlass::arch::ClusterBarrier::wait(&unit_full[su.index], su.phase);") < read
    assert src.count("Work const w = sched.take(p, Scheduler::Unit(t));") == 4   # producer + consumers, both GEMMs
    assert "sched.current(p);   // schedule node unit_source" not in src
    # route_scan and route_fused zero both counters; run_grouped takes each GEMM's own
    assert src.count("gu_tickets[0] = 0;") == 2 and src.count("dn_tickets[0] = 0;") == 2
    assert "gu_tickets, stream);" in src and "dn_tickets, stream);" in src
    assert "constexpr int kSmemBytes = kSmemUnitRing + kUnitRingBytes + 1024;" in src


def test_pdl_and_workspace_know_the_counters():
    layer = build_layer(_dw(pdl=True, handoff=True, combine_handoff=True, fused_routing=True), SMALL)
    chain = {k: (r, w) for k, r, w in pdl_chain(layer)}
    assert "gu_tickets" in chain["route_scan"][1] and "dn_tickets" in chain["route_scan"][1]
    assert "gu_tickets" in chain["gate_up"][0] and "gu_tickets" in chain["gate_up"][1]
    assert "dn_tickets" in chain["down"][0] and "dn_tickets" not in chain["gate_up"][1]
    assert "dn_tickets" in pdl_pre_wait(layer)["down"]   # the down GEMM waits last with the handoff
    assert [k for k, _ in workspace_accessors(layer, "dn_tickets")] == ["route_scan", "route_fused", "down"]
    plain = build_layer(MoEConfig(), SMALL)
    assert workspace_accessors(plain, "gu_tickets") == ()


def test_tickets_model():
    assert dynamic_tickets(5, 3, 1, ">=") == ([0, 1, 2, 3, 4], 8)
    assert dynamic_tickets(5, 3, 1, ">")[0] == [0, 1, 2, 3, 4, 5]
    assert dynamic_tickets(5, 1, 2, ">=")[0] == [0, 2, 4]
    assert isinstance(dynamic_tickets(5, 1, 0, ">="), str)


@pytest.mark.parametrize("pingpong", [False, True])
def test_ring_model(pingpong):
    for units in range(7):
        n, bad = explore_unit_ring(4, units, pingpong, "before", 2)
        assert bad is None and n > 0
    _n, bad = explore_unit_ring(4, 1, pingpong, "after", 1)
    assert bad is not None and bad[0] == "stale" and bad[2]


DW_MUTANTS = ("dynamic_walk_not_zeroed", "dynamic_walk_static_consumers", "dynamic_walk_end_gt",
              "dynamic_walk_publish_after", "dynamic_walk_ticket_step2")


@pytest.mark.parametrize("mid", DW_MUTANTS)
def test_mutants_refused_with_counterexample(mid):
    m = load_moe_catalogue()[mid]
    assert m.rule == "moe.dynamic_walk" and m.gpu_problems
    rep = verify_moe_mutant(m)
    hits = [v for v in rep.violations if v.rule == "moe.dynamic_walk"]
    assert hits and hits[0].counterexample is not None, [(v.rule, v.message[:160]) for v in rep.violations]
    base = mutant_layer(m)
    assert render_moe(base) != render_moe(build_layer(_dw(pdl=True, handoff=True, combine_handoff=True),
                                                      MoEProblem(64, 8, 2, 256, 512)))


def test_layers_without_the_field_print_no_ticket():
    for cfg in (MoEConfig(), small_t_config().replace(pdl=True, handoff=True, combine_handoff=True,
                                                        row_bounded=True, fused_routing=True)):
        src = render_moe(build_layer(cfg, SMALL))
        assert "ticket" not in src and "unit_slot" not in src and "kSmemUnitRing" not in src


@pytest.mark.nvcc
def test_dynamic_walk_layer_compiles():
    """The small-T layer with both handoffs, row-bounded tiles, fused routing and the dynamic walk compiles for
    sm_90a without spills."""
    from argus_cutlass.build.nvcc import compile_cu
    from argus_cutlass.errors import ToolchainError
    from argus_cutlass.generate import generate

    try:
        from argus_cutlass.build.toolchain import find_toolchain

        find_toolchain()
    except ToolchainError as exc:
        pytest.skip(f"no nvcc/CUTLASS: {exc}")
    cfg = _dw(pdl=True, handoff=True, combine_handoff=True, row_bounded=True, fused_routing=True)
    k = generate(cfg, DSV2, smt=False)
    assert "take_ticket" in k.source and "moe.dynamic_walk" in k.source
    art = compile_cu(k.source, k.name, "shared", key_parts=(f"program={k.fingerprint}",))
    assert len(art.functions) >= 6 and art.spill_bytes == 0, (art.functions, art.spill_bytes)


def test_int32_tickets_bounded_with_int64_tile_unit():
    """The tickets are int32 (``int* tickets``, ``int t``, ``t >= int(sched.units)``) whatever index tile_unit's C
    type: a layer whose walk at T = 2^20 has more than 2^30 units (gate+up: 512 n-blocks of I = 65536 x about 2^22
    m-tiles), accepted by moe.index_width once tile_unit is int64_t, must be refused by
    moe.dynamic_walk (the counter would wrap: a negative ticket taken as a unit)."""
    from argus_cutlass.verify.moe import _check_dynamic_walk, routing_cases

    layer = build_layer(_dw(), MoEProblem(16, 256, 256, 256, 65536)).replace_node("index", None, "tile_unit",
                                                                                  ctype="int64_t")
    proofs, bad = _check_dynamic_walk(layer, routing_cases(layer))
    assert not proofs and bad and bad[0].rule == "moe.dynamic_walk"
    assert "past int32" in bad[0].message and bad[0].counterexample is not None
    # the same shape's static walk with int64 units has no ticket to wrap
    static = build_layer(small_t_config(tile_m=64), MoEProblem(16, 256, 256, 256, 65536))
    assert _check_dynamic_walk(static, routing_cases(static))[1] == []


def test_static_walk_fields_refused_with_the_dynamic_walk():
    """The producer's dynamic branch replaces the static walk's read-ahead, and a CTA's first unit is known only after
    its ticket: a lookahead on a dynamic schedule (it would print nothing) and a layer weight prefetch (it warms the
    static first unit blockIdx.x, not the first ticket) are refused by moe.dynamic_walk, as MoEConfig refuses them."""
    from argus_cutlass.verify.moe import _check_dynamic_walk, routing_cases

    layer = build_layer(_dw(pdl=True), MoEProblem(300, 8, 2, 512, 256))
    assert _check_dynamic_walk(layer, routing_cases(layer))[1] == []
    for edited, field_ in ((layer.replace_node("gate_up", "schedule", None, lookahead=1), "lookahead"),
                           (layer.replace_node("layer", weight_prefetch=4), "weight_prefetch")):
        proofs, bad = _check_dynamic_walk(edited, routing_cases(edited))
        assert bad and bad[0].rule == "moe.dynamic_walk" and field_ in bad[0].message, field_
        assert bad[0].counterexample is not None
