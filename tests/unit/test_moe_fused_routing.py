"""The fused routing of one-chunk calls (``MoEConfig.fused_routing``, routing node ``fused``, session 42): the DSL's
refusals, the verifier clean across the layer variants and the planted mistakes refused, both routing paths
simulated at the chunk's edge (T*k = chunk, chunk + 1), moe.pdl over the mixes of the two launch chains, the printed
kernel and dispatch, and an nvcc build. Not measured on silicon (tests/gpu/test_moe_fused_routing_gpu.py)."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from argus_cutlass.errors import DslError
from argus_cutlass.kernels.moe.config import MoEConfig
from argus_cutlass.kernels.moe.heuristics import small_t_config
from argus_cutlass.kernels.moe.problem import MoEProblem
from argus_cutlass.kernels.moe.program import build_layer
from argus_cutlass.render.moe import render_moe
from argus_cutlass.verify.moe import (PDL_CHAIN, PDL_PRE_WAIT, _check_pdl, pdl_chain, pdl_paths, routing_path,
                                      simulate_routing, verify_moe)

SMALL = MoEProblem(64, 8, 2, 256, 512)


def _fused(cfg: MoEConfig = MoEConfig(), problem: MoEProblem = SMALL):
    return build_layer(cfg.replace(fused_routing=True), problem)


# ------------------------------------------------------------------------------------------ DSL / config


@pytest.mark.parametrize("changes,needle", [
    ({"fused_max_chunks": 2}, "fused_max_chunks set without fused"),
    ({"fused_scan": "inclusive"}, "fused_scan set without fused"),
    ({"fused_writers": "all"}, "fused_writers set without fused"),
    ({"fused_zero": False}, "fused_zero set without fused"),
    ({"fused": True, "fused_scan": "both"}, "routing fused_scan 'both'"),
    ({"fused": True, "fused_writers": "some"}, "routing fused_writers 'some'"),
    ({"fused": True, "fused_max_chunks": 0}, "routing fused_max_chunks 0 must be an int in [1, 2^20]"),
    ({"fused": 1}, "routing fused 1 must be a bool"),
    ({"fused": True, "fused_scan": "exclusive"}, "routing fused_scan 'exclusive' is the node's scan"),
    ({"fused": True, "fused_zero": False}, "routing fused_zero False without handoff or combine_handoff"),
])
def test_routing_fields_refused_with_their_rule(changes, needle):
    layer = build_layer(MoEConfig(), SMALL)
    with pytest.raises(DslError) as ei:
        layer.replace_node("routing", **changes)
    assert "dsl.operand" in str(ei.value) and needle in str(ei.value)


def test_fused_needs_experts_within_the_chunk_and_no_prefetch():
    with pytest.raises(DslError, match=r"routing fused needs E <= routing chunk \(E = 256, chunk = 128\)"):
        build_layer(MoEConfig(route_chunk=128, fused_routing=True), MoEProblem(16, 256, 8, 2048, 768))
    layer = build_layer(MoEConfig(pdl=True, weight_prefetch=8), SMALL)
    with pytest.raises(DslError, match="routing fused with weight_prefetch=8"):
        dataclasses.replace(layer, routing=dataclasses.replace(layer.routing, fused=True))
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="fused_routing=True with weight_prefetch=4"):
        MoEConfig(pdl=True, weight_prefetch=4, fused_routing=True)


def test_label_space_and_no_heuristic_or_shipped_entry():
    import json
    from pathlib import Path

    from argus_cutlass.kernels.moe.heuristics import default_config as heuristic_config
    from argus_cutlass.kernels.moe.program import layer_label
    from argus_cutlass.kernels.moe.space import KNOBS, _neighbours

    assert layer_label(MoEConfig(fused_routing=True), SMALL).endswith("_fr")
    assert not layer_label(MoEConfig(), SMALL).endswith("_fr")
    assert KNOBS["fused_routing"] == (False, True)
    assert any(c.fused_routing for c in _neighbours(small_t_config(), small=True))
    assert not any(c.fused_routing and c.weight_prefetch for c in _neighbours(MoEConfig(pdl=True, weight_prefetch=8)))
    # the small-T heuristic sets it where E fits one routing chunk (thread e owns expert e), never at large T
    for t in (1, 16, 256, 257, 4096):
        cfg = heuristic_config(MoEProblem(t, 128, 8, 2048, 768))
        assert cfg.fused_routing == (t <= 256) and not (cfg.fused_routing and cfg.weight_prefetch), t
    for e in (256, 257, 512):
        cfg = heuristic_config(MoEProblem(16, e, 8, 2048, 768))
        assert cfg.fused_routing == (e <= cfg.route_chunk), e
    root = Path(__file__).resolve().parents[2]
    entries = json.loads((root / "agent" / "tuned_h200.json").read_text())["entries"]
    # measured in session 42 (H = 2048: -1.3 .. -1.8 % at T = 16) and shipped there; Mixtral T = 16 in session 43 (with
    # row-bounded tiles and the combine handoff, -1.1 %); never at T = 256 (one chunk holds no call of that bucket)
    assert {e["key"].split("|")[-2:][0] + "|" + e["key"].split("|")[-1] for e in entries
            if e["kernel"] == "moe" and e["config"].get("fused_routing")} == {
        "e128k8h2048i768|t16", "e64k6h2048i1408|t16", "e8k2h4096i14336|t16"}
    know = (root / "agent" / "knowledge_moe.toml").read_text()
    block = know[know.index('id = "fused_routing"'):]
    block = block[:block.index("[[technique]]")]
    assert "Measured (H200, session 42" in block and "6.2 us" in block and "NOT yet" not in block


def test_bench_ab_accepts_the_field():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / "moe_ab.py"
    spec = importlib.util.spec_from_file_location("moe_ab_fr", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.parse_vary("fused_routing=false,true") == ("fused_routing", [False, True])
    from argus_cutlass.generate import configure

    for model in ("qwen3-30b-a3b", "deepseek-v2-lite", "mixtral"):   # the next session's device cells build
        p = MoEProblem.for_model(model, 16)
        layer = build_layer(configure(p)[0].replace(fused_routing=True), p)
        assert layer.routing.fused


# ------------------------------------------------------------------------------------------ verifier


_VARIANTS = {
    "m128": MoEConfig(),
    "m64": small_t_config(),
    "row_bounded": small_t_config().replace(row_bounded=True),
    "handoff": small_t_config().replace(pdl=True, handoff=True),
    "combine_handoff": MoEConfig(pdl=True, combine_handoff=True),
    "all_sliced": small_t_config().replace(pdl=True, handoff=True, row_bounded=True, combine_handoff=True,
                                           gather_slices=4, gather_unroll=4),
    "m128_row_bounded": small_t_config(tile_m=128).replace(row_bounded=True, pdl=True),
}


@pytest.mark.parametrize("variant", sorted(_VARIANTS))
def test_fused_layers_verify(variant):
    rep = verify_moe(_fused(_VARIANTS[variant]), smt=variant == "all_sliced")
    assert rep.ok, [(v.rule, v.message[:200]) for v in rep.violations]
    proofs: dict[str, str] = {}
    for p in rep.proofs:
        proofs[p.rule] = proofs.get(p.rule, "") + " | " + p.summary
    assert "route_fused" in proofs["moe.pdl"] and "4 mixes" in proofs["moe.pdl"]
    assert "route_fused" in proofs["moe.offsets"] and "route_fused" in proofs["moe.bijection"]
    assert "route_fused" in proofs["moe.workspace"] and "route_fused" in proofs["moe.launch"]


@pytest.mark.parametrize("problem", [MoEProblem(16, 1, 1, 256, 512), MoEProblem(16, 128, 8, 2048, 768)])
def test_fused_edge_expert_counts_verify(problem):
    rep = verify_moe(_fused(small_t_config(), problem), smt=False)
    assert rep.ok, [(v.rule, v.message[:200]) for v in rep.violations]


@pytest.mark.parametrize("k", [1, 2, 8])
def test_paths_at_the_chunk_edge_give_the_three_kernels_tables(k):
    """T*k <= chunk takes route_fused, one more token the three kernels; k = 1 reaches T*k = chunk exactly and
    chunk + 1. On each one-chunk T the fused tables and row map equal the three kernels' (ids -1 and E skipped)."""
    layer = _fused(MoEConfig(), MoEProblem(16, 8, k, 256, 512))
    chunk = layer.routing.chunk
    t1 = chunk // k
    assert routing_path(layer, t1) == "route_fused" and routing_path(layer, t1 + 1) == "three"
    if k == 1:
        assert t1 * k == chunk and (t1 + 1) * k == chunk + 1
    rng = np.random.default_rng(k)
    for t in (1, 2, t1):
        ids = rng.integers(0, 8, size=(t, k))
        ids[0, 0] = -1
        ids[t - 1, k - 1] = 8
        a, b = simulate_routing(layer, ids), simulate_routing(layer, ids, "three")
        assert a["path"] == "route_fused" and b["path"] == "three" and not a["unrouted"]
        for key in ("offsets", "counts", "permuted"):
            assert (a[key] == b[key]).all(), key
        assert a["tiles_m"] == b["tiles_m"] and (a["tile_expert"] == b["tile_expert"]).all()
        assert a["permuted"][0] == -1 and a["permuted"][-1] == -1
    two = simulate_routing(layer, rng.integers(0, 8, size=(t1 + 1, k)))
    assert two["path"] == "three" and not two["unrouted"]


def test_pdl_checks_both_chains_and_their_mixes():
    """moe.pdl runs the 4 mixes of the two launch chains over two calls. A pre-wait read of tiles_m by gate+up is
    ordered after route_scan (two launches back) in the three-kernel chain but not after route_fused, the kernel right
    before it: refused, naming the mix (why the DSL refuses weight_prefetch with fused)."""
    layer = _fused(MoEConfig(pdl=True))
    assert pdl_paths(layer) == ("three", "route_fused")
    assert pdl_chain(layer) == PDL_CHAIN
    names = [n for n, _r, _w in pdl_chain(layer, "route_fused")]
    assert names == ["route_fused", "gate_up", "down", "combine"]
    plain = build_layer(MoEConfig(pdl=True), SMALL)
    pre = {**PDL_PRE_WAIT, "gate_up": ("tiles_m",)}
    assert _check_pdl(plain, pre)[0] and not _check_pdl(plain, pre)[1]
    proofs, bad = _check_pdl(layer, pre)
    assert not proofs and len(bad) == 1
    msg = bad[0].message
    assert "gate_up (call 1) reads tiles_m before its griddepcontrol.wait" in msg and "route_fused (call 1)" in msg
    assert "(calls: three, then route_fused)" in msg
    # the combine's out (xs) reads of call 0 against call 1's route_fused writes of xs: ordered (stream order)
    proofs, bad = _check_pdl(layer)
    assert proofs and not bad
    with pytest.raises(ValueError):
        pdl_chain(plain, "route_fused")


def test_pdl_chain_matches_the_printed_route_fused():
    """route_fused's pointer parameters (T const*: read, T*: written) are its LAYER_ACCESSES rows, with every
    conditional table (handoffs, row-bounded tiles)."""
    layer = _fused(small_t_config().replace(pdl=True, handoff=True, row_bounded=True, combine_handoff=True))
    src = render_moe(layer)
    m = re.search(r"__global__ void __launch_bounds__\(kChunk\) route_fused\(([^)]*)\)", src)
    reads, writes = {n: (set(r), set(w)) for n, r, w in pdl_chain(layer, "route_fused")}["route_fused"]
    seen = set()
    for param in (x.strip() for x in m.group(1).split(",")):
        if "*" not in param:
            continue
        buf = param.split("*")[-1].strip()
        seen.add(buf)
        assert (buf in reads and buf not in writes) if "const*" in param.replace(" ", "") else buf in writes, param
    assert seen == reads | writes == {"ids", "x", "counts", "offsets", "tile_expert", "tiles_m", "tile_ready",
                                      "out_ready", "tile_rows", "permuted_row", "xs"}


def test_fused_mutants_refused_by_their_rule():
    from argus_cutlass.testing.mutants_moe import base_layer, load_moe_catalogue, mutant_layer, verify_moe_mutant

    cat = {k: m for k, m in load_moe_catalogue().items() if m.cls == "fused_routing"}
    assert len(cat) >= 4
    for m in cat.values():
        rep = verify_moe_mutant(m, smt=False)
        hits = [v for v in rep.violations if v.rule == m.rule]
        assert hits and hits[0].counterexample is not None, (m.id, [v.rule for v in rep.violations])
        assert render_moe(mutant_layer(m)) != render_moe(base_layer(m)), m.id
        assert base_layer(m).routing.fused and verify_moe(base_layer(m), smt=False).ok, m.id


# ------------------------------------------------------------------------------------------ printed source


def test_printed_kernel_and_dispatch():
    layer = _fused(small_t_config().replace(pdl=True, handoff=True, gather_slices=4))
    src = render_moe(layer)
    assert "constexpr int kFusedMaxChunks = 1;" in src and "constexpr bool kFusedExclusiveScan = true;" in src
    assert "if (w.chunks <= kFusedMaxChunks) {" in src and "} else {   // more chunks: route_count" in src
    assert "route_fused<<<dim3(1, kSlices), kChunk, 0, stream>>>(ids, rows, counts, offsets, tile_expert, tiles_m, " \
           "tile_ready," in src
    body = src[src.index("route_fused(int32_t const* ids"):src.index("// ---- combine (node combine")]
    # route_scan's and route_permute's formulas, printed by the same macros
    assert body.count("int const base = kFusedExclusiveScan ? incl - t : incl;   // first m-tile of group e") == 1
    assert "for (int d = 1; d < kChunk; d <<= 1) {   // inclusive scan over experts (Hillis-Steele)" in body
    assert "if (first && e < kExperts) {\n    offsets[e] = RowIndex(base) * kPad;" in body
    assert "tile_ready[base + i] = 0;" in body and "bool const first = blockIdx.y == 0;" in body
    assert "pos = soff[e] + rank + kRankBase;" in body and "if (s < rows && first) permuted_row[s] = pos;" in body
    assert "griddepcontrol.launch_dependents;" in body and "griddepcontrol.wait;" not in body
    scan = src[src.index("route_scan(int32_t* block_counts"):src.index("route_permute(int32_t const* ids")]
    assert "int const base = kExclusiveScan ? incl - t : incl;   // first m-tile of group e" in scan
    # the three kernels are still printed for the other T, and a layer without the field prints none of this
    assert "route_count<<<int(w.chunks), kChunk, 0, stream>>>(ids, rows, block_counts);" in src
    plain = render_moe(build_layer(small_t_config().replace(pdl=True, handoff=True, gather_slices=4), SMALL))
    assert "route_fused" not in plain and "kFused" not in plain and "first && " not in plain
    knobs = render_moe(_fused().replace_node("routing", fused_scan="inclusive", fused_max_chunks=2))
    assert "constexpr int kFusedMaxChunks = 2;" in knobs and "constexpr bool kFusedExclusiveScan = false;" in knobs


@pytest.mark.nvcc
def test_fused_layer_compiles():
    """A fused layer with every conditional table (both handoffs, row-bounded tiles, a sliced unrolled gather, pdl)
    compiles for sm_90a without spills; route_fused among its kernels."""
    from argus_cutlass.build.nvcc import compile_cu
    from argus_cutlass.errors import ToolchainError
    from argus_cutlass.generate import generate

    try:
        from argus_cutlass.build.toolchain import find_toolchain

        find_toolchain()
    except ToolchainError as exc:
        pytest.skip(f"no nvcc/CUTLASS: {exc}")
    cfg = small_t_config().replace(pdl=True, handoff=True, row_bounded=True, combine_handoff=True,
                                   fused_routing=True, gather_slices=4, gather_unroll=4)
    k = generate(cfg, MoEProblem(16, 64, 6, 2048, 1408), smt=False)
    art = compile_cu(k.source, k.name, "shared", key_parts=(f"program={k.fingerprint}",))
    assert any("route_fused" in f.name for f in art.functions) and art.spill_bytes == 0, art.functions


def test_every_mutant_has_a_silicon_problem_and_fused_ones_take_the_fused_path():
    """bench/mutants_moe_gpu.py indexes each mutant's first silicon problem: a mutant without one crashed the whole
    device step (session 42's review). A fused-routing mutant must also run where the host launches route_fused
    (T * k within one chunk), on its mutated layer -- else silicon never executes the mistake -- except the
    two-chunk dispatch mutant, whose problem is the first T past one chunk."""
    from argus_cutlass.testing.mutants_moe import GPU_PROBLEMS, gpu_problems_of, load_moe_catalogue, mutant_layer
    from argus_cutlass.verify.moe import routing_path

    cat = load_moe_catalogue()
    for m in cat.values():
        probs = gpu_problems_of(m)
        assert probs and all(p in GPU_PROBLEMS for p in probs), m.id
    for m in (m for m in cat.values() if m.cls == "fused_routing"):
        layer = mutant_layer(m, gpu=True)
        paths = {routing_path(layer, GPU_PROBLEMS[p].tokens) for p in gpu_problems_of(m)}
        assert "route_fused" in paths, m.id
    two = cat["fr_two_chunks"]
    t = GPU_PROBLEMS["small_fr_two_chunks"].tokens
    assert routing_path(mutant_layer(two, gpu=True), t) == "route_fused"
    assert routing_path(mutant_layer(two, gpu=True).replace_node("routing", fused_max_chunks=1), t) == "three"
