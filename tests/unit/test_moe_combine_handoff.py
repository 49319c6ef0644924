"""The down -> combine handoff per m-tile (``MoEConfig.combine_handoff``, layer node ``combine_handoff``, rule
``moe.combine_handoff``, invariant M13), on the CPU: the field's validation, the verifier on correct layers (both tile
paths, with and without the gate+up handoff and row-bounded tiles, skipped ids), the printed signal / wait / loads
against the verifier's model of them, each planted mistake refused with a counterexample, moe.pdl's and
moe.workspace's view of the new accesses, the text of every layer without it unchanged, and one nvcc build.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re

import pytest
from pydantic import ValidationError

from argus_cutlass.dsl.moe_ir import COMBINE_HANDOFF_FIELDS, HANDOFF_EDGES, handoff_edge
from argus_cutlass.errors import DslError
from argus_cutlass.kernels.moe.config import MoEConfig
from argus_cutlass.kernels.moe.heuristics import small_t_config
from argus_cutlass.kernels.moe.problem import MoEProblem
from argus_cutlass.kernels.moe.program import build_layer
from argus_cutlass.render.moe import render_moe
from argus_cutlass.verify.moe import verify_moe

SMALL = MoEProblem(64, 8, 2, 256, 512)
QWEN = MoEProblem(64, 128, 8, 2048, 768)


def _cfg(tile_m: int = 64, handoff: bool = True, row_bounded: bool = False, ch: bool = True) -> MoEConfig:
    base = small_t_config(tile_m=tile_m) if tile_m == 64 else MoEConfig()
    return base.replace(pdl=True, handoff=handoff, row_bounded=row_bounded, combine_handoff=ch)


def _parts(layer, src: str) -> tuple[str, str, str]:
    """(gate+up GEMM, down GEMM, layer kernels) of the printed code, comments dropped."""
    code = "\n".join(ln for ln in src.splitlines() if not ln.lstrip().startswith("//")) + "\n"
    name = layer.kernel_name()
    gu, dn, ns = code.index(f"namespace {name}_gu"), code.index(f"namespace {name}_dn"), code.index(f"{name}_ns {{")
    return code[gu:dn], code[dn:ns], code[ns:]


def _body(text: str, head: str) -> str:
    """The body of the function whose signature starts with ``head`` (up to its closing brace at column 0)."""
    start = text.index(head)
    return text[start:text.index("\n}\n", start)]


# ---- the field ---------------------------------------------------------------------------------------------


def test_config_field_needs_pdl_and_names_the_layer():
    with pytest.raises(ValidationError, match="combine_handoff=True needs pdl=True"):
        MoEConfig(combine_handoff=True)
    cfg = MoEConfig(pdl=True, combine_handoff=True)
    layer = build_layer(cfg, SMALL)
    assert layer.combine_handoff and layer.name.endswith("_pdl_ch")
    assert build_layer(_cfg(), SMALL).name.endswith("_pdl_ho_ch")
    # the builder prints the shortest time-out the rule accepts (gate+up plus down bounded, at least 10 s)
    assert layer.combine_handoff_timeout_ms == layer.handoff_min_timeout_ms("combine_handoff") >= 10_000
    assert layer.handoff_wait_bound_ms("combine_handoff") > layer.handoff_wait_bound_ms("handoff")


@pytest.mark.parametrize("change, words", [
    ({"combine_handoff_slot": "second"}, "combine_handoff_slot 'second': expected 'own'"),
    ({"combine_handoff_load": "ca"}, "combine_handoff_load 'ca': expected 'cg'"),
    ({"combine_handoff_signal": "done"}, "combine_handoff_signal 'done': expected 'complete' or 'read'"),
    ({"combine_handoff_target_delta": 1 << 20}, r"combine_handoff_target_delta 1048576 must be an int in \(-2\^20"),
    ({"combine_handoff_backoff_ns": 2_000_000}, r"combine_handoff_backoff_ns 2000000 must be an int in \[0, 1000000\]"),
    ({"combine_handoff_timeout_ms": -5}, r"combine_handoff_timeout_ms -5 must be an int in \[0, 2\^31\)"),
    ({"combine_handoff_timeout_ms": True}, "combine_handoff_timeout_ms True must be an int"),
    ({"combine_handoff_fence": 1}, "combine_handoff_fence 1 must be a bool"),
    ({"combine_handoff": "yes"}, "combine_handoff 'yes' must be a bool"),
])
def test_malformed_knobs_are_refused_by_name(change, words):
    layer = build_layer(_cfg(), SMALL)
    with pytest.raises(DslError, match=words) as info:
        dataclasses.replace(layer, **change)
    assert info.value.rule == "dsl.operand" and "Traceback" not in str(info.value)


def test_knobs_without_the_handoff_or_pdl_are_refused():
    """Knobs of an edge that is off print nothing, and the combine handoff needs the programmatic launch."""
    plain = build_layer(MoEConfig(pdl=True), SMALL)
    other = {"target_delta": -1, "signal": "read", "fence": False, "zero": False, "slot": "first", "load": "nc",
             "backoff_ns": 64, "timeout_ms": 60_000}
    assert set(other) == {f.removeprefix("combine_handoff_") for f in COMBINE_HANDOFF_FIELDS[1:]}
    for knob, value in other.items():
        f = f"combine_handoff_{knob}"
        with pytest.raises(DslError, match=f"{f} set without combine_handoff"):
            dataclasses.replace(plain, **{f: value})
    with pytest.raises(DslError, match="combine_handoff needs pdl"):
        dataclasses.replace(build_layer(MoEConfig(), SMALL), combine_handoff=True)
    with pytest.raises(KeyError, match="no handoff edge"):
        plain.edge_knob("combine", "signal")
    assert [e.name for e in HANDOFF_EDGES] == ["handoff", "combine_handoff"]
    assert handoff_edge("combine_handoff").fields == COMBINE_HANDOFF_FIELDS


# ---- the verifier on correct layers -----------------------------------------------------------------------


#: (label, config, problem): 64-row ping-pong and 128-row cooperative m-tiles (the small-T 128-row tile and the large-T
#: default), with and without the gate+up handoff and row-bounded tiles
_CORRECT = [
    ("st64_ho", _cfg(), SMALL), ("st64", _cfg(handoff=False), SMALL), ("st64_ho_rb", _cfg(row_bounded=True), SMALL),
    ("st64_rb_qwen", _cfg(handoff=False, row_bounded=True), QWEN),
    ("st128_ho_rb", small_t_config(tile_m=128).replace(pdl=True, handoff=True, row_bounded=True, combine_handoff=True),
     SMALL),
    ("m128_ho", MoEConfig(pdl=True, handoff=True, combine_handoff=True), SMALL),
    ("m128_qwen", MoEConfig(pdl=True, combine_handoff=True), QWEN),
]


@pytest.mark.parametrize("label, cfg, problem", _CORRECT, ids=[c[0] for c in _CORRECT])
def test_correct_layers_verify(label, cfg, problem):
    """With and without the gate+up handoff and row-bounded tiles, 64- and 128-row m-tiles: every rule holds,
    moe.combine_handoff proves the count per m-tile and every read term of every routing case (the cases include
    ids -1 and E, which get no row and are neither waited for nor read)."""
    layer = build_layer(cfg, problem)
    rep = verify_moe(layer, smt=False)
    assert rep.ok, [v.format() for v in rep.violations]
    (pr,) = [p for p in rep.proofs if p.rule == "moe.combine_handoff"]
    target = -(-problem.hidden // layer.down.epilogue.tile_n)
    assert f"kCombineHandoffTarget = {target} down signals" in pr.summary and pr.points > 0
    assert "routings" in pr.summary and "__ldcg" in pr.summary
    (pdl,) = [p for p in rep.proofs if p.rule == "moe.pdl"]
    assert "combine: xs, permuted_row, weights, y, out_ready" in pdl.summary
    assert "the combine's reads of out (xs) and out_ready follow down's per m-tile" in pdl.summary


def test_skipped_slots_are_neither_waited_for_nor_read():
    """A token whose slots are all -1 gets no wait and no read; a token with one skipped slot waits for its other
    slot's m-tile only (the rule counts the reads of the printed row map)."""
    import numpy as np

    from argus_cutlass.verify.moe import _check_combine_handoff

    layer = build_layer(_cfg(), SMALL)
    ids = np.array([[0, 1], [-1, -1], [-1, 3], [8, 2]], dtype=np.int64)
    proofs, bad = _check_combine_handoff(layer, [("skipped", ids)])
    assert not bad and "every term the combine reads (4)" in proofs[0].summary


def test_rule_is_proved_without_the_handoff_too():
    layer = build_layer(MoEConfig(), SMALL)
    rep = verify_moe(layer, smt=False)
    (pr,) = [p for p in rep.proofs if p.rule == "moe.combine_handoff"]
    assert rep.ok and pr.summary.startswith("no combine handoff") and pr.points == 0


# ---- what is printed ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("tile_m, handoff", [(64, True), (64, False), (128, False)])
def test_prints_the_signal_the_waits_and_the_loads(tile_m, handoff):
    """down: after each unit's stores (after the ping-pong turn is handed on, or the cooperative store), its store
    thread waits for completion (wait_group 0), fences the async proxy and adds 1 to out_ready[tm] (red.release.gpu);
    gate+up does not. combine: launch_dependents first, thread j % kCombineThreads waits for slot j's m-tile
    (ld.acquire.gpu of out_ready[row[j] / kPad] up to kCombineHandoffTarget), __syncthreads(), __ldcg loads, and
    griddepcontrol.wait as the last statement. route_scan zeroes out_ready beside tile_expert; the host passes
    out_ready to route_scan, to down's run_grouped and to the combine."""
    cfg = _cfg(handoff=handoff) if tile_m == 64 else MoEConfig(pdl=True, combine_handoff=True)
    layer = build_layer(cfg, SMALL)
    src = render_moe(layer)
    gu, dn, rest = _parts(layer, src)
    assert "out_ready" not in gu and "combine_handoff" not in gu
    signal = re.search(r"combine_handoff_signal\(Params const& p, int tm\) \{\n(.*?)\n\}", dn, re.S).group(1)
    assert signal.split("\n") == [
        '  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");',
        '  asm volatile("fence.proxy.async.global;" ::: "memory");',
        '  asm volatile("red.release.gpu.global.add.s32 [%0], 1;" :: "l"(p.out_ready + tm) : "memory");']
    assert dn.count("combine_handoff_signal(p, w.tm);") == 1
    if tile_m == 64:   # ping-pong: after the turn is handed on
        assert dn.index("bar_arrive(order_barrier(1, (cwg + 1) % 2)") < dn.index("combine_handoff_signal(p, w.tm);")
    else:
        assert "if (w.stores && store_thread) combine_handoff_signal(p, w.tm);" in dn
    assert ("handoff_wait(p, w.tm);" in dn) == handoff and ("handoff_signal(p, w.tm);" in gu) == handoff
    if handoff:   # down waits on gate+up and signals the combine: both counters, in edge order
        assert "int* tile_ready, int* out_ready, cudaStream_t stream" in dn
    target = -(-SMALL.hidden // layer.down.epilogue.tile_n)
    assert f"constexpr int kCombineHandoffTarget = {target};" in rest and layer.handoff_target("combine_handoff") == \
        target
    wait = _body(rest, "__device__ __forceinline__ void combine_wait(")
    assert 'ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(out_ready + tm)' in wait
    assert "if (v >= kCombineHandoffTarget) break;" in wait and "__nanosleep(kCombineHandoffBackoffNs);" in wait
    assert "if (now - start > kCombineHandoffTimeoutNs) __trap();" in wait
    body = _body(rest, "__global__ void __launch_bounds__(kCombineThreads) combine(")
    assert "int32_t const* out_ready)" in body
    lines = [ln.split("//")[0].strip() for ln in body.splitlines() if ln.strip() and not ln.startswith("#")]
    assert lines[-1] == 'asm volatile("griddepcontrol.wait;" ::: "memory");'   # the last statement
    assert body.count("griddepcontrol.wait") == 1
    assert body.index("griddepcontrol.launch_dependents") < body.index("const t = blockIdx.x;")   # the first
    loop = "if (int(threadIdx.x) == j % kCombineThreads && row[j] >= 0) combine_wait(out_ready, row[j] / kPad);"
    assert body.index("row[j] = permuted_row[s];") < body.index(loop) < body.index("__syncthreads();") < \
        body.index("__ldcg(reinterpret_cast<uint4 const*>(out + ")
    assert "__ldg(" not in body and "reinterpret_cast<uint4 const*>(out + int64_t(row[j]) * kHidden)[v]" not in body
    assert "out_ready[base + i] = 0;" in rest and "tile_expert[base + i] = e;" in rest
    run = rest[rest.index("inline int run("):]
    assert "tile_expert, tiles_m" + (", tile_ready" if handoff else "") + ", out_ready);" in run
    assert re.search(r"_dn::run_grouped\([^;]*tiles_m, int\(w.max_tiles\), " + ("tile_ready, " if handoff else "")
                     + r"out_ready, (tile_rows, )?stream\);", run)
    assert "static_cast<int32_t const*>(out_ready));" in run
    assert "w.out_ready = o; o = align_up(o + w.max_tiles * int64_t(sizeof(int32_t)));" in src


def test_the_printed_waits_are_the_verifiers_model():
    """The slot each waiting thread waits for and the load the combine reads with are printed from the layer node's
    fields the rule reads (combine_handoff_slot, combine_handoff_load): what runs is what was proved."""
    layer = build_layer(_cfg(), SMALL)
    first = dataclasses.replace(layer, combine_handoff_slot="first")
    body = _body(render_moe(first), "__global__ void __launch_bounds__(kCombineThreads) combine(")
    assert "&& row[0] >= 0) combine_wait(out_ready, row[0] / kPad);" in body
    nc = _body(render_moe(dataclasses.replace(layer, combine_handoff_load="nc")),
               "__global__ void __launch_bounds__(kCombineThreads) combine(")
    assert "uint4 const raw = __ldg(reinterpret_cast<uint4 const*>(out + " in nc and "__ldcg" not in nc
    for changed in (first, dataclasses.replace(layer, combine_handoff_load="nc")):
        assert any(v.rule == "moe.combine_handoff" for v in verify_moe(changed, smt=False).violations)


#: sha256 of layers and GEMMs printed by the templates BEFORE the combine handoff (session 42: the GEMMs' at commit
#: 9394530, where the GEMM templates had one handoff_role; the layers' at b83dbfa, which printed the weights' expert
#: count kExpertsB): the generalisation (two handoff edges, a GEMM that waits on one and signals the next) must print
#: every layer without combine_handoff byte for byte as before. A deliberate change of these layers' text updates them
#: (the assertion prints the new digest). The session also compared, before / after the merge, 642 files: the 12
#: shipped MoE entries, 21 configuration variants, every older mutant and every shipped GEMM configuration.
#: Session 44 re-pinned all seven: the GEMM traits gained static_asserts (the TMA store's subtile, the staging view's
#: shape, each MMA read view's stages); each new text with those lines removed hashed to the old digest.
_BEFORE = {
    "small": (lambda: build_layer(MoEConfig(), SMALL),
              "8ea04ce8bb848aba41f71424bfc6dd6aea8617a02234bf88c5c0a4acfb4271b5"),
    "small_pdl": (lambda: build_layer(MoEConfig(pdl=True), SMALL),
                  "17b0e5c2248599aa108491375eb655336c9ce9c5940b83a0901c48ea24f51456"),
    "qwen_small_t_handoff": (lambda: build_layer(small_t_config().replace(pdl=True, handoff=True), QWEN),
                             "65779181f1049e14fcf85c67c294536f1865772ffd3924d60f657f4a7d9da50d"),
    "small128_rb_handoff_w4": (lambda: build_layer(small_t_config(tile_m=128).replace(
        row_bounded=True, pdl=True, handoff=True, weight_prefetch=4), SMALL),
        "d85ba0860bd697d2f3f32dae51379a326fb6f5c5c42b2cb7d4654e9a9e3c448a"),
    "small64_rb_handoff": (lambda: build_layer(small_t_config().replace(row_bounded=True, pdl=True, handoff=True),
                                               SMALL),
                           "d87d1941faeb32490c6a8af2440309504363aa970cbf2a72847be8588889a5db"),
}
#: re-pinned in session 45: the host's enum gained kErrIterSpace (code 11) and error_string its case; the text without
#: those two lines hashes to the previous digests (15ff4d27..., edb50b7b...)
_BEFORE_GEMM = {
    "cooperative": ({}, "5ec55181ba026e6477f633c0359ffb710395985dabdafdb927b3c90f38738f52"),
    "pingpong": ({"tile_m": 64, "tile_n": 128, "schedule": "pingpong", "epi_m": 64},
                 "de6db93f6ceeed1fc6c7f904253ed1fa9b50f50ac012ff1e71b44e54ff41b85c"),
}


@pytest.mark.parametrize("which", sorted(_BEFORE))
def test_layers_without_it_print_as_before(which):
    make, digest = _BEFORE[which]
    src = render_moe(make())
    assert hashlib.sha256(src.encode()).hexdigest() == digest, hashlib.sha256(src.encode()).hexdigest()
    assert "out_ready" not in src and "combine_handoff" not in src and "__ldcg" not in src


@pytest.mark.parametrize("which", sorted(_BEFORE_GEMM))
def test_gemms_print_as_before(which):
    from argus_cutlass.kernels.gemm.config import GemmConfig
    from argus_cutlass.kernels.gemm.program import build_program
    from argus_cutlass.render.gemm import render_gemm

    changes, digest = _BEFORE_GEMM[which]
    src = render_gemm(build_program(GemmConfig(**changes)))
    assert hashlib.sha256(src.encode()).hexdigest() == digest, hashlib.sha256(src.encode()).hexdigest()


# ---- the planted mistakes -----------------------------------------------------------------------------------


@pytest.mark.parametrize("change, words, element", [
    ({"combine_handoff_target_delta": -1}, "may still be storing", {"m_tile", "token", "slot"}),
    ({"combine_handoff_target_delta": 1}, "waits forever", {"m_tile", "token", "slot"}),
    ({"combine_handoff_signal": "read"}, "wait_group.read", {"m_tile", "token", "slot"}),
    ({"combine_handoff_fence": False}, "fence.proxy.async", {"m_tile", "token", "slot"}),
    ({"combine_handoff_zero": False}, "does not zero out_ready", {"m_tile", "call"}),
    ({"combine_handoff_slot": "first"}, "waited on m-tiles", {"m_tile", "token", "slot", "row"}),
    ({"combine_handoff_load": "nc"}, "ld.global.nc", {"m_tile", "token", "slot"}),
    ({"combine_handoff_timeout_ms": 100}, "traps after spinning 100 ms", {"m_tile", "token", "slot"}),
])
def test_each_planted_mistake_is_refused_with_a_counterexample(change, words, element):
    layer = build_layer(_cfg(), SMALL)
    rep = verify_moe(dataclasses.replace(layer, **change), smt=False)
    v = next(v for v in rep.violations if v.rule == "moe.combine_handoff")
    cex = v.counterexample
    assert words in v.message and cex is not None and cex.expected != cex.actual
    assert element <= set(cex.element) and cex.thread, (cex.element, cex.thread)
    if "token" in cex.element and "threadIdx" in cex.thread:   # the waiting thread: slot j of token t
        assert cex.thread["cta"] == cex.element["token"] and cex.thread["threadIdx"] == cex.element["slot"] % 128
    # the unsound choices also withdraw moe.pdl's exemption of the combine's early reads (the time-out does not)
    assert ("moe.pdl" in {x.rule for x in rep.violations}) == ("combine_handoff_timeout_ms" not in change)


def test_the_slot_counterexample_names_the_row_and_thread():
    layer = dataclasses.replace(build_layer(_cfg(), SMALL), combine_handoff_slot="first")
    v = next(v for v in verify_moe(layer, smt=False).violations if v.rule == "moe.combine_handoff")
    el, th = v.counterexample.element, v.counterexample.thread
    assert el["row"] // layer.routing.pad == el["m_tile"] and el["slot"] >= 1 and th["role"].startswith("combine")
    assert f"token {el['token']}'s slot {el['slot']} reads out row {el['row']}" in v.message


def test_counters_must_fit_their_region():
    """route_scan zeroes out_ready[j] wherever it writes tile_expert[j]: a counter region one m-tile short is refused
    by moe.workspace (every T) and, on the routing that reaches it, by moe.combine_handoff."""
    from argus_cutlass.hw.routing import make_routing
    from argus_cutlass.verify.moe import _check_combine_handoff

    layer = build_layer(_cfg(), MoEProblem(260, 8, 2, 256, 512))
    ids, _ = make_routing("sizes", 260, 8, 2, sizes=[65] * 8)
    assert _check_combine_handoff(layer, [("sizes65", ids)])[1] == []
    bad = layer.replace_node("routing", scan="inclusive")
    _, viols = _check_combine_handoff(bad, [("sizes65", ids)])
    assert "zeroes out_ready[17] but the workspace holds 16 counters" in viols[0].message
    short = layer.replace_node("region", None, "out_ready", count=(("max_tiles",), (-1,)))
    v = next(v for v in verify_moe(short, smt=False).violations if v.rule == "moe.workspace")
    assert "out_ready" in v.message and v.counterexample.element["region"] == "out_ready"
    missing = dataclasses.replace(layer, workspace=dataclasses.replace(
        layer.workspace, regions=tuple(r for r in layer.workspace.regions if r.name != "out_ready")))
    v = next(v for v in verify_moe(missing, smt=False).violations if v.rule == "moe.workspace")
    assert "workspace region 'out_ready' is missing" in v.message


def test_mutant_catalogue_entries():
    """The catalogue's combine-handoff mutants: each refused by moe.combine_handoff with a counterexample, each in the
    printed source, their bases verify, and each has silicon problems for bench/mutants_moe_gpu.py."""
    from argus_cutlass.testing.mutants_moe import (GPU_PROBLEMS, base_layer, gpu_problems_of, load_moe_catalogue,
                                                   mutant_layer, verify_moe_mutant)

    cat = {k: m for k, m in load_moe_catalogue().items() if m.cls == "combine_handoff"}
    assert len(cat) >= 5
    for m in cat.values():
        rep = verify_moe_mutant(m, smt=False)
        hits = [v for v in rep.violations if v.rule == m.rule == "moe.combine_handoff"]
        assert hits and hits[0].counterexample is not None, m.id
        assert render_moe(mutant_layer(m)) != render_moe(base_layer(m)), m.id
        assert gpu_problems_of(m) and all(p in GPU_PROBLEMS for p in gpu_problems_of(m)), m.id
    bases = {json.dumps(m.base, sort_keys=True): m for m in cat.values()}.values()
    assert len(bases) == 2 and all(verify_moe(base_layer(m), smt=False).ok for m in bases)


# ---- moe.pdl's view of the combine's early accesses ------------------------------------------------------


def test_pdl_chain_matches_the_printed_combine():
    """LAYER_ACCESSES with combine_handoff: route_scan writes out_ready (its T* parameter), down adds to it
    (run_grouped's argument), the combine reads it (its T const* parameter); the combine triggers early and every
    access of it comes before its wait."""
    from argus_cutlass.verify.moe import COMBINE_HANDOFF_PRE_WAIT, pdl_chain, pdl_early_trigger, pdl_pre_wait

    layer = build_layer(_cfg(row_bounded=True), SMALL)
    src = render_moe(layer)
    chain = {n: (set(r), set(w)) for n, r, w in pdl_chain(layer)}
    m = re.search(r"__global__ void __launch_bounds__\([^)]*\) route_scan\(([^)]*)\)", src)
    assert "int32_t* out_ready" in m.group(1) and "out_ready" in chain["route_scan"][1]
    m = re.search(r"__global__ void __launch_bounds__\([^)]*\) combine\(([^)]*)\)", src)
    assert "int32_t const* out_ready" in m.group(1) and "out_ready" in chain["combine"][0]
    assert "out_ready" in chain["down"][1] and "out_ready" not in chain["gate_up"][0] | chain["gate_up"][1]
    names = [n for n, _r, _w in pdl_chain(layer)]
    assert pdl_early_trigger(layer) == tuple(n in ("down", "combine") for n in names)
    pre = pdl_pre_wait(layer)
    assert pre["combine"] == COMBINE_HANDOFF_PRE_WAIT and "out_ready" in pre["down"]
    # every buffer the combine touches (moe.pdl's names: out is xs) is in its pre-wait set
    assert chain["combine"][0] | chain["combine"][1] == set(COMBINE_HANDOFF_PRE_WAIT)


def test_pdl_rule_checks_the_combines_early_reads():
    """The combine's accesses before its wait are justified only by what moe.pdl proves: they follow route_permute's
    completion because gate+up triggers after its own wait (the combine cannot launch before every down CTA
    triggered, nor down before every gate+up CTA did); were gate+up to trigger early too (it does not: a changed
    ``early``, down's own early accesses left out to isolate the combine's), the combine's read of permuted_row
    would not be ordered. With an unsound combine handoff its reads of out_ready and out are not ordered after
    down."""
    from argus_cutlass.verify.moe import _check_pdl, pdl_chain, pdl_pre_wait

    layer = build_layer(_cfg(), SMALL)
    proofs, bad = _check_pdl(layer)
    assert proofs and not bad
    names = [n for n, _r, _w in pdl_chain(layer)]
    _, bad = _check_pdl(layer, {**pdl_pre_wait(layer), "down": ()},
                        early=tuple(n in ("gate_up", "down", "combine") for n in names))
    assert bad and "combine (call 0) reads permuted_row before its griddepcontrol.wait" in bad[0].message
    assert "route_permute (call 0)" in bad[0].message
    _, bad = _check_pdl(dataclasses.replace(layer, combine_handoff_fence=False))
    assert bad and "combine (call 0) reads out_ready before its griddepcontrol.wait" in bad[0].message
    assert "down (call 0)" in bad[0].message


def test_space_proposes_it_last_and_the_heuristic_sets_it_at_small_t():
    from argus_cutlass.kernels.moe.heuristics import SMALL_T, WAVE_CTAS, default_config, expected_down_units
    from argus_cutlass.kernels.moe.space import KNOBS, _neighbours

    assert KNOBS["combine_handoff"] == (False, True)
    # measured 0.6-1.1 % faster at T = 16 / 256 (sessions 42-43), 0.9-4.1 % slower where down is one wave of units
    # (T = 1, a 64-unit layer): the small-T bucket (with pdl) has it where down has more than one wave, large T not
    for model in ("qwen3-30b-a3b", "mixtral", "deepseek-v2-lite"):
        for t in (1, 16, 100, SMALL_T, SMALL_T + 1, 4096):
            cfg = default_config(MoEProblem.for_model(model, t))
            multi_wave = expected_down_units(MoEProblem.for_model(model, t), cfg) > WAVE_CTAS
            assert cfg.combine_handoff == (t <= SMALL_T and multi_wave), (model, t)
            assert cfg.pdl or not cfg.combine_handoff
    # the measured cells on each side of the rule
    for p, want in ((MoEProblem.for_model("qwen3-30b-a3b", 1), False), (MoEProblem(1, 64, 8, 2048, 1024), False),
                    (MoEProblem(64, 8, 2, 1024, 512), False), (MoEProblem(16, 16, 4, 4096, 4096), True),
                    (MoEProblem.for_model("qwen3-30b-a3b", 16), True), (MoEProblem.for_model("mixtral", 16), True),
                    (MoEProblem.for_model("deepseek-v2-lite", 256), True),
                    # 128-row tiles, 8 experts x 1 m-tile x 16 n-blocks = 128 units: one wave (measured -0.6 %, rounds
                    # spread 744-807 us: not a gain beyond the noise)
                    (MoEProblem.for_model("mixtral", 256), False)):
        assert default_config(p).combine_handoff == want, p
    moves = list(_neighbours(small_t_config().replace(pdl=True), small=True))
    # the last measured move; only the dynamic walk (session 43, not measured yet) comes after it
    assert moves[-2] == small_t_config().replace(pdl=True, combine_handoff=True)
    assert moves[-1] == small_t_config().replace(pdl=True, dynamic_walk=True)
    assert not any(c.combine_handoff for c in _neighbours(MoEConfig(), small=False))
    # pdl off takes the combine handoff off with it
    off = [c for c in _neighbours(_cfg(), small=True) if not c.pdl]
    assert off and not any(c.combine_handoff for c in off)


def test_moe_ab_accepts_the_field():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import moe_ab

    assert moe_ab.parse_vary("combine_handoff=false,true") == ("combine_handoff", [False, True])


def test_knowledge_entry_says_what_was_measured():
    from argus_cutlass.agent.kb import load_knowledge

    t = load_knowledge("knowledge_moe.toml").get("combine_handoff")
    assert t.knobs == ("combine_handoff",) and "Measured (H200, session 42" in t.effect and "NOT yet" not in t.effect
    assert "launch_dependents" in t.effect and "deadlock" in t.effect and "moe.combine_handoff" in t.risks


# ---- nvcc --------------------------------------------------------------------------------------------------


@pytest.mark.nvcc
def test_combine_handoff_layer_compiles():
    """The small-T layer with both handoffs and row-bounded tiles compiles for sm_90a without spills."""
    from argus_cutlass.build.nvcc import compile_cu
    from argus_cutlass.errors import ToolchainError
    from argus_cutlass.generate import generate

    try:
        from argus_cutlass.build.toolchain import find_toolchain

        find_toolchain()
    except ToolchainError as exc:
        pytest.skip(f"no nvcc/CUTLASS: {exc}")
    k = generate(_cfg(row_bounded=True), MoEProblem(16, 64, 6, 2048, 1408), smt=False)
    assert "combine_wait(out_ready, row[j] / kPad);" in k.source and "moe.combine_handoff" in k.source
    art = compile_cu(k.source, k.name, "shared", key_parts=(f"program={k.fingerprint}",))
    assert len(art.functions) >= 6 and art.spill_bytes == 0, (art.functions, art.spill_bytes)
