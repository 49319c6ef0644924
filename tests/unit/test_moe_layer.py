"""MoE layer (issue 11): programs, verifier rules, mutants, rendering, compile check (CPU)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from argus_cutlass.generate import family_of, generate
from argus_cutlass.kernels.moe.config import MoEConfig
from argus_cutlass.kernels.moe.problem import MODEL_SHAPES, MoEProblem
from argus_cutlass.kernels.moe.program import build_layer
from argus_cutlass.render.moe import render_moe
from argus_cutlass.testing.mutants_moe import base_layer, load_moe_catalogue, mutant_layer, verify_moe_mutant
from argus_cutlass.verify.moe import MOE_RULES, simulate_routing, verify_moe


def _layer(model: str = "mixtral", dtype: str = "bf16"):
    return build_layer(MoEConfig(dtype=dtype), MoEProblem.for_model(model, 16, dtype))


@pytest.mark.parametrize("model", sorted(MODEL_SHAPES))
def test_anchor_layers_verify(model):
    rep = verify_moe(_layer(model), smt=True)
    assert rep.ok and not rep.unknowns, [v.format() for v in rep.violations]
    rules = {p.rule for p in rep.proofs}
    assert set(MOE_RULES) <= rules | {"moe.inverse"}
    # the grouped GEMMs pass the GEMM family's mainloop rules on the printed programs
    assert {"tma.image", "gmma.descriptor", "pipeline.protocol", "k.coverage", "mma.k_agreement"} <= rules


@pytest.mark.parametrize("model", sorted(MODEL_SHAPES))
def test_small_t_layers_verify(model):
    """The small-T path (64-row ping-pong tiles, 64-row padding) passes every GEMM and MoE rule."""
    from argus_cutlass.kernels.moe.heuristics import small_t_config

    layer = build_layer(small_t_config(), MoEProblem.for_model(model, 16))
    rep = verify_moe(layer, smt=True)
    assert rep.ok and not rep.unknowns, [v.format() for v in rep.violations]
    assert layer.routing.pad == 64 and layer.gate_up.schedule.consumer_stride == 2
    assert {"moe.group_tiles", "moe.empty_groups", "moe.swiglu", "moe.combine", "tile_scheduler"} <= \
        {p.rule for p in rep.proofs}


def test_heuristic_picks_by_t_bucket():
    from argus_cutlass.kernels.moe.heuristics import (GATHER_UNROLL, SINGLE_TILE_GU_N, SMALL_T, SMALL_T_COMBINE_HANDOFF,
                                                      SMALL_T_DYNAMIC_WALK, SMALL_T_FUSED_ROUTING, SMALL_T_HANDOFF, SMALL_T_PDL,
                                                      SMALL_T_ROW_BOUNDED_TILE_M, default_config, small_t_config)
    from argus_cutlass.kernels.moe.space import KNOBS, bucket_of

    # bands: the most 64-row m-tiles one expert can fill in the T bucket (T' / 64, T' the power of two);
    # the narrower gate+up unit (a shorter tail, sessions 25 and 37)
    assert SINGLE_TILE_GU_N < small_t_config().gu_tile_n and SINGLE_TILE_GU_N in KNOBS["gu_tile_n"]
    # gather slices (heuristics.gather_slices_for): the fewest that leave each of the chunk's 256 threads one step of
    # 4 vectors: T' k rows x 256 vectors (H = 2048 bf16) / 1024, at most 4 KB / 128 B = 32 whole-line slices
    slices = {1: 2, 16: 32, 64: 32, 65: 32, 128: 32, 129: 32, SMALL_T: 32}
    for t, band in ((1, 1), (16, 1), (64, 1), (65, 2), (128, 2), (129, 4), (SMALL_T, 4)):
        want = small_t_config().replace(gu_band_m=band, dn_band_m=band, gather_slices=slices[t],
                                         gather_unroll=GATHER_UNROLL, pdl=SMALL_T_PDL, handoff=SMALL_T_HANDOFF, gu_tile_n=SINGLE_TILE_GU_N,
                                         row_bounded=64 in SMALL_T_ROW_BOUNDED_TILE_M,
                                         # more than one wave of down units from T = 16 on (T = 1: 8 x 16 = 128)
                                         combine_handoff=SMALL_T_PDL and SMALL_T_COMBINE_HANDOFF and t > 1,
                                         fused_routing=SMALL_T_FUSED_ROUTING,   # E = 128 fits one routing chunk
                                         dynamic_walk=SMALL_T_DYNAMIC_WALK and t > 1)   # the same wave rule
        assert default_config(MoEProblem.for_model("qwen3-30b-a3b", t)) == want and bucket_of(t) == "small"
    assert default_config(MoEProblem.for_model("mixtral", 16)).gather_slices == 16
    # Mixtral (E 8, k 2) at T 129-256: 64 rows per expert on average, the 64-row tile would re-stream
    # about half the experts' weights -> 128-row tiles, bands of ceil(256 / 128) m-tiles
    assert default_config(MoEProblem.for_model("mixtral", SMALL_T)) == small_t_config(tile_m=128).replace(
        gu_band_m=2, dn_band_m=2, gather_slices=64, gather_unroll=GATHER_UNROLL, pdl=SMALL_T_PDL, handoff=SMALL_T_HANDOFF,
        row_bounded=128 in SMALL_T_ROW_BOUNDED_TILE_M, combine_handoff=False,   # 128 down units: one wave
        fused_routing=SMALL_T_FUSED_ROUTING)
    assert default_config(MoEProblem.for_model("mixtral", 128)).tile_m == 64   # 32 rows per expert
    # the large bucket: the 128-row default with each GEMM's walk banded (heuristics.band_for) and as
    # gather slices within one resident wave (132 SMs x 8 CTAs of 256 threads): Qwen3 T = 257 (bucket 512) has
    # 16 chunks -> 32 whole-line slices (512 CTAs); Mixtral 4 chunks x 64; Qwen3 T = 8192 256 chunks -> 4
    # short groups (expected padding of the 128-row m-tiles >= SHORT_GROUP_PADDING of the routed rows: Qwen3 at bucket
    # 512 has 32 rows per expert, 3x padding; Mixtral 128, ~0.48) take the dynamic walk and row-bounded tiles
    assert default_config(MoEProblem.for_model("qwen3-30b-a3b", SMALL_T + 1)) == \
        MoEConfig(gu_band_m=1, dn_band_m=1, gather_slices=32, gather_unroll=GATHER_UNROLL, dynamic_walk=True,
                  row_bounded=True)
    # ... but Mixtral's wide gate+up (112 n-blocks > SHORT_GROUP_ROW_BOUNDED_GU_BLOCKS) keeps the 2-D maps
    assert default_config(MoEProblem.for_model("mixtral", SMALL_T + 1)) == \
        MoEConfig(gu_band_m=16, dn_band_m=8, gather_slices=64, gather_unroll=GATHER_UNROLL, dynamic_walk=True)
    # long groups keep the static walk and the 2-D maps: Mixtral T = 8192 (2048 rows per expert), Qwen3 T = 4096 (256)
    for model, t in (("mixtral", 8192), ("mixtral", 2048), ("qwen3-30b-a3b", 4096), ("deepseek-v2-lite", 8192)):
        c = default_config(MoEProblem.for_model(model, t))
        assert not c.dynamic_walk and not c.row_bounded, (model, t)
    for model, t in (("qwen3-30b-a3b", 2048), ("deepseek-v2-lite", 2048), ("qwen3-30b-a3b", 1024)):
        c = default_config(MoEProblem.for_model(model, t))
        assert c.dynamic_walk and c.row_bounded and c.tile_m == 128, (model, t)
    # the gate+up width rule at its edge: I = 2048 -> 16 n-blocks of 128 h columns, I = 4096 -> 32, I = 4224 -> 33
    for ffn, rb in ((2048, True), (4096, True), (4224, False)):
        c = default_config(MoEProblem(1024, 64, 8, 2048, ffn))
        assert c.dynamic_walk and c.row_bounded == rb, ffn
    assert default_config(MoEProblem.for_model("qwen3-30b-a3b", 8192)).gather_slices == 4  # 256 chunks
    assert SMALL_T_PDL and not default_config(MoEProblem.for_model("mixtral", SMALL_T + 1)).pdl   # pdl: small T only
    for small in (small_t_config(), small_t_config(tile_m=128)):
        assert all(getattr(small, k) in v for k, v in KNOBS.items())


def test_gpu_mutant_problems_reach_the_failing_case():
    """The silicon problems of bench/mutants_moe_gpu.py reach each mutant's failing case."""
    from argus_cutlass.hw.routing import make_routing
    from argus_cutlass.testing.mutants_moe import GPU_PROBLEMS, gpu_problems_of, int32_wrap_tokens

    cat = load_moe_catalogue()
    wrap = GPU_PROBLEMS["wide_int32_wrap"]
    m = cat["x_offset_int32"]
    assert gpu_problems_of(m) == ["wide_int32_wrap"] and m.gpu_base["hidden"] == 4096
    assert wrap.tokens >= int32_wrap_tokens(4096, 1, "x_offset") and wrap.tokens <= 2**20
    assert wrap.tokens * 1 >= int32_wrap_tokens(4096, 1, "xs_offset")
    aligned = GPU_PROBLEMS["small_aligned_groups"]
    assert "small_aligned_groups" in gpu_problems_of(cat["rank_off_by_one"])
    assert any(s and s % 128 == 0 for s in aligned.sizes)
    ids, _ = make_routing("sizes", aligned.tokens, 8, 2, sizes=aligned.sizes)
    assert ids.shape == (aligned.tokens, 2)
    # more grouped units than the 132 CTAs of an H200 for the step mutant
    units = GPU_PROBLEMS["qwen_many_units"]
    assert units.tokens * 8 // 128 * (768 // 128) > 132
    # -1 padding is a property of a silicon problem: the invalid-id and index-width mutants run on it,
    # every listed (token, slot) is inside its problem, and one token has no valid slot at all
    padded = GPU_PROBLEMS["small_padded300"]
    for mid in ("clamp_invalid_ids", "permuted_row_uint32"):
        assert "small_padded300" in gpu_problems_of(cat[mid])
    for gp in GPU_PROBLEMS.values():
        assert all(0 <= t < gp.tokens for t, _ in gp.invalid)
    assert {(150, 0), (150, -1)} <= set(padded.invalid)


def test_family_dispatch():
    assert family_of(MoEConfig()) == "moe" and family_of(_layer()) == "moe"


def test_mutation_suite_rejected_with_counterexamples():
    cat = load_moe_catalogue()
    assert len(cat) >= 12 and len({m.cls for m in cat.values()}) >= 8
    for m in cat.values():
        rep = verify_moe_mutant(m)
        hits = [v for v in rep.violations if v.rule == m.rule]
        assert hits, f"{m.id}: {m.rule} did not fire ({[v.rule for v in rep.violations]})"
        assert hits[0].counterexample is not None, m.id


def test_mutants_change_the_printed_source():
    for m in load_moe_catalogue().values():
        if m.id == "pad_half_tile":
            continue
        assert render_moe(mutant_layer(m)) != render_moe(base_layer(m)), m.id


def test_gemm_kernel_names_unchanged_by_new_fields():
    from argus_cutlass.kernels.gemm.config import GemmConfig
    from argus_cutlass.kernels.gemm.program import build_program

    p = build_program(GemmConfig())
    lb = p.load_into("sB")
    assert p.replace_node("load", lb.name, expert_rows=8).fingerprint() != p.fingerprint()
    assert p.replace_node("load", lb.name, expert_rows=0).fingerprint() == p.fingerprint()


def test_routing_simulation_matches_the_plan():
    from argus_cutlass.hw.routing import RoutingPlan, make_routing

    layer = _layer("qwen3-30b-a3b")
    ids, _ = make_routing("skewed", 300, 128, 8, seed=3)
    sim = simulate_routing(layer, ids)
    plan = RoutingPlan.from_ids(ids, 128)
    assert (sim["counts"] == plan.counts).all()
    # same stable order inside each group; rows shifted by the padding
    order = sorted((s for s in range(ids.size)), key=lambda s: sim["permuted"][s])
    assert list(plan.source) == order


def test_render_prints_nodes_and_is_deterministic():
    layer = _layer()
    src = render_moe(layer)
    assert src == render_moe(layer)
    assert "kExpertRowsB = 28672" in src and "kPairOffsetB = 14336" in src and "act_value" in src
    assert f'int {layer.kernel_name()}(' in src and "_workspace_bytes(int T)" in src
    assert "int64_t(t) * kHidden" in src
    bad = layer.replace_node("index", None, "x_offset", ctype="int32_t")
    assert "int32_t(t) * kHidden" in render_moe(bad)


def test_generate_rejects_a_mutant():
    from argus_cutlass.errors import VerificationError
    from argus_cutlass.generate import render, require_proved, verify

    layer = mutant_layer(load_moe_catalogue()["combine_k_minus_1"])
    rep = verify(layer, smt=False)
    with pytest.raises(VerificationError):
        require_proved(rep)
    assert render  # rendering a rejected layer is the mutant runner's business, not generate's


def test_generate_front_half():
    k = generate(MoEConfig(), MoEProblem(16, 8, 2, 256, 512), smt=True)
    assert k.name.startswith("argus_moe_sm90_bf16_e8k2_h256_i512_") and "moe.combine" in k.source


def test_config_rules():
    from argus_cutlass.errors import ConfigError, ProblemError

    with pytest.raises(ConfigError):
        build_layer(MoEConfig(dtype="fp16"), MoEProblem(16, 8, 2, 256, 512, "bf16"))
    with pytest.raises(ProblemError) as info:
        build_layer(MoEConfig(), MoEProblem(16, 8, 2, 260, 512))
    assert info.value.rule == "tma.contiguous_extent"


@pytest.mark.parametrize("slices", [1, 3, 8])
@pytest.mark.parametrize("unroll", [2, 4, 8])
def test_unrolled_gather_copies_what_the_plain_loop_copies(slices, unroll):
    """gather_unroll: each thread loads ``unroll`` vectors before storing them, and the printed loop (as the
    verifier enumerates it) copies exactly the vectors the plain loop copies, thread by thread; the layer
    verifies and its name and source say so; the plain loop's source is unchanged by the field's default."""
    import numpy as np

    from argus_cutlass.verify.moe import simulate_gather, simulate_routing, verify_moe

    p = MoEProblem(300, 16, 4, 520, 256)
    plain = build_layer(MoEConfig(gather_slices=slices), p)
    rolled = build_layer(MoEConfig(gather_slices=slices, gather_unroll=unroll), p)
    assert rolled.routing.unroll == unroll and plain.routing.unroll == 1
    rng = np.random.default_rng(slices * 10 + unroll)
    ids = rng.integers(-1, 16, size=(300, 4)).astype(np.int32)
    stores = []
    for layer in (plain, rolled):
        g = simulate_gather(layer, simulate_routing(layer, ids))
        stores.append(sorted(zip(*(g[f].tolist() for f in ("cta_x", "cta_y", "thread", "s", "vec")))))
    assert stores[0] == stores[1] and len(stores[0]) > 0
    assert verify_moe(rolled).ok
    src = render_moe(rolled)
    assert f"constexpr int kGatherUnroll = {unroll};" in src and "kGatherUnroll" not in render_moe(plain)


#: the producer loops, comment lines dropped: the form role_loop_units models for lookahead 1 and 0
PRODUCER_AHEAD = """  Scheduler sched(p, 0);
  Work next = sched.current(p);
  for (Work w = next; w.valid; w = next) {
    sched.advance(1);
    next = sched.current(p);
    if (!kProducerCarry) st = PipeState{0, kProducerStartPhase};"""
PRODUCER_PLAIN = """  Scheduler sched(p, 0);
  for (Work w = sched.current(p); w.valid; sched.advance(1), w = sched.current(p)) {
    if (!kProducerCarry) st = PipeState{0, kProducerStartPhase};"""
CONSUMER_LOOP = "    for (Work w = sched.current(p); w.valid; sched.advance(kConsumerStride), w = sched.current(p)) {"


@pytest.mark.parametrize("small_t", [False, True])
def test_work_lookahead_prints_the_read_ahead_loop(small_t):
    """work_lookahead 1: both grouped GEMMs' schedule nodes carry lookahead 1, the layer verifies (the
    roles' printed loops enumerated: same units, each expert read once, none past the unit count), and
    the producer loop prints exactly the read-ahead form the verifier models (line by line, so a template
    edit that swaps the advance and the read, or reads before the first unit, fails here); the consumers'
    loop is the plain one either way, and lookahead 0 prints the earlier producer loop."""
    from argus_cutlass.kernels.moe.heuristics import small_t_config
    from argus_cutlass.verify.moe import verify_moe

    p = MoEProblem(16 if small_t else 300, 16, 4, 256, 512)
    base = small_t_config() if small_t else MoEConfig()
    plain, ahead = build_layer(base, p), build_layer(base.replace(work_lookahead=1), p)
    assert {ahead.program(part).schedule.lookahead for part in ("gate_up", "down")} == {1}
    assert {plain.program(part).schedule.lookahead for part in ("gate_up", "down")} == {0}
    rep = verify_moe(ahead)
    assert rep.ok, [v.format() for v in rep.violations]
    walk = [pr.summary for pr in rep.proofs if pr.rule == "scheduler.bijection" and "lookahead 1" in pr.summary]
    assert len(walk) == 2, [pr.summary for pr in rep.proofs if pr.rule == "scheduler.bijection"]

    def code(layer):
        return "\n".join(ln for ln in render_moe(layer).splitlines() if not ln.lstrip().startswith("//"))

    src, old = code(ahead), code(plain)
    assert src.count(PRODUCER_AHEAD) == 2 and PRODUCER_PLAIN not in src          # 2 grouped GEMMs
    assert old.count(PRODUCER_PLAIN) == 2 and "Work next" not in old
    assert src.count(CONSUMER_LOOP) == old.count(CONSUMER_LOOP) == 2
    assert ahead.name == plain.name + "_la"


@pytest.mark.parametrize("small_t", [False, True])
def test_pdl_prints_the_wait_before_every_global_access(small_t):
    """pdl: route_count stays a plain launch, the other five kernels are launched with the programmatic
    attribute, and each executes griddepcontrol.wait (then launch_dependents) before touching global
    memory: the first statements of route_scan / route_permute / combine, and in each grouped GEMM right
    after the shared-memory barrier init and tensor-map prefetch (the places moe.pdl's model assumes);
    without pdl nothing of it is printed. The layer verifies with the moe.pdl proof naming the launch mode."""
    import re

    from argus_cutlass.kernels.moe.heuristics import small_t_config

    p = MoEProblem(300, 16, 4, 256, 512)
    base = (small_t_config() if small_t else MoEConfig()).replace(gather_slices=3 if small_t else 1)
    plain, pdl = build_layer(base, p), build_layer(base.replace(pdl=True), p)
    assert pdl.pdl and not plain.pdl and pdl.name == plain.name + "_pdl"
    src, old = render_moe(pdl), render_moe(plain)
    assert "griddepcontrol" not in old and "launch_programmatic" not in old
    wait = ('  asm volatile("griddepcontrol.wait;" ::: "memory");\n'
            '  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");\n')
    code = "\n".join(ln for ln in src.splitlines() if not ln.lstrip().startswith("//")) + "\n"
    for kernel in ("route_scan", "route_permute", "combine"):
        m = re.search(r"__global__ void __launch_bounds__\([^)]*\) " + kernel + r"\([^{]*\{\n", code)
        guard = "#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)\n"
        assert m and code[m.end():].startswith(guard + wait + "#endif\n"), kernel   # sm_90 only (multi-arch builds)
    assert code.count("    __syncthreads();\n  }\n" + wait) == 2   # each grouped GEMM, after the prologue
    assert code.count(wait) == 5
    assert "route_count<<<" in code and "route_scan<<<" not in code and "combine<<<" not in code
    assert code.count("launch_programmatic(route_") == 2 and code.count("launch_programmatic(combine,") == 1
    # both run_grouped launches and the launch_programmatic helper set the attribute (host_maps' cluster
    # occupancy query sets its own in both layers)
    assert code.count("attr[0].val.programmaticStreamSerializationAllowed = 1;") == 3
    assert code.count("cfg.attrs = attr;") - old.count("cfg.attrs = attr;") == 3
    rep = verify_moe(pdl)
    assert rep.ok, [v.format() for v in rep.violations]
    assert any(pr.rule == "moe.pdl" and pr.summary.startswith("programmatic dependent launch") for pr in rep.proofs)


def test_pdl_rule_finds_an_access_before_the_wait():
    """moe.pdl's model: a programmatic kernel may touch before its wait only what the kernel just before it
    neither writes nor (for a write) reads. The down GEMM reading h (gate+up's output) or gate+up reading
    xs (the permute's) before the wait is a violation naming both kernels and the buffer; reading the
    expert ids route_scan wrote two or three launches back is ordered (the weight prefetch's reads); the
    same accesses in plain stream order are all ordered."""
    from argus_cutlass.verify.moe import PDL_PRE_WAIT, _check_pdl

    layer = build_layer(MoEConfig(pdl=True), MoEProblem(64, 8, 2, 256, 512))
    for kernel, buf, writer in (("down", "h", "gate_up"), ("gate_up", "xs", "route_permute"),
                                ("route_permute", "offsets", "route_scan")):
        proofs, bad = _check_pdl(layer, {**PDL_PRE_WAIT, kernel: (buf,)})
        assert not proofs and len(bad) == 1, kernel
        assert f"{kernel} (call 0) reads {buf} before its griddepcontrol.wait" in bad[0].message
        assert writer in bad[0].message and bad[0].counterexample.element == {"buffer": buf}
    ok = {**PDL_PRE_WAIT, "down": ("tile_expert", "tiles_m", "w2"), "gate_up": ("tile_expert", "tiles_m", "w13")}
    proofs, bad = _check_pdl(layer, ok)
    assert proofs and not bad
    proofs, bad = _check_pdl(dataclasses.replace(layer, pdl=False), {**PDL_PRE_WAIT, "down": ("h",)})
    assert proofs and not bad and proofs[0].summary.startswith("plain stream order")


@pytest.mark.parametrize("variant", ["base", "handoff_row_bounded", "both_handoffs_row_bounded"])
def test_pdl_chain_matches_the_printed_kernels(variant):
    """moe.pdl's chain of each kernel's global reads and writes (pdl_chain, from the one table LAYER_ACCESSES that
    moe.workspace reads too) against the printed kernels: route_count / route_scan / route_permute / combine by
    their pointer parameters (``T const*`` read only, ``T*`` written), the grouped GEMMs by the buffers run() passes
    run_grouped (A, B read, D written, the expert table and m-tile count read; with the handoff the counters, with
    row-bounded tiles the tile_rows table); the down GEMM's ``out`` is the xs buffer. The base layer, one printing
    every conditional access of session 41 (handoff, row-bounded tiles, the padding before each group) and one with
    the down -> combine handoff too (out_ready: route_scan and down write it, the combine reads it)."""
    import re

    from argus_cutlass.kernels.moe.heuristics import small_t_config
    from argus_cutlass.verify.moe import PDL_CHAIN, pdl_chain

    if variant == "base":
        layer = build_layer(MoEConfig(pdl=True), MoEProblem(64, 8, 2, 256, 512))
        assert pdl_chain(layer) == PDL_CHAIN
    else:
        layer = build_layer(small_t_config().replace(pdl=True, handoff=True, row_bounded=True,
                                                     combine_handoff=variant.startswith("both")),
                            MoEProblem(64, 8, 2, 256, 512))
        assert layer.handoff and layer.routing.tile_rows and layer.routing.group_padding == "before"
        assert layer.combine_handoff == variant.startswith("both")
    src = render_moe(layer)
    chain = {n: (set(r), set(w)) for n, r, w in pdl_chain(layer)}
    alias = {"out": "xs"}
    assert list(chain) == ["route_count", "route_scan", "route_permute", "gate_up", "down", "combine"]
    for kernel in ("route_count", "route_scan", "route_permute", "combine"):
        m = re.search(r"__global__ void __launch_bounds__\([^)]*\) " + kernel + r"\(([^)]*)\)", src)
        assert m, kernel
        reads, writes = chain[kernel]
        seen = set()
        for param in (x.strip() for x in m.group(1).split(",")):
            if "*" not in param:
                continue
            buf = alias.get(param.split("*")[-1].strip(), param.split("*")[-1].strip())
            seen.add(buf)
            if param.replace(" ", "").endswith("const*" + param.split("*")[-1].strip()):
                assert buf in reads and buf not in writes, (kernel, param)
            else:
                assert buf in writes, (kernel, param)
        assert seen == reads | writes, (kernel, seen, reads | writes)
    run = src[src.index("inline int run("):]
    for part, ns in (("gate_up", "_gu"), ("down", "_dn")):
        extra = ({"tile_ready"} if layer.handoff else set()) | (
            {"out_ready"} if layer.combine_handoff and part == "down" else set())
        args = [a.strip() for a in re.search(ns + r"::run_grouped\(([^;]*)\);", run).group(1).split(",")]
        a, b, d = (alias.get(x, x) for x in args[:3])
        reads, writes = chain[part]
        tables = {x for x in args[7:-1] if not x.startswith("int(")}   # the device tables after the sizes
        assert args[7:9] == ["tile_expert", "tiles_m"], (part, args)
        assert reads | writes == {a, b, d} | tables and tables == {"tile_expert", "tiles_m"} | extra | (
            {"tile_rows"} if variant != "base" else set()), (part, args, reads, writes)
        assert {a, b, "tile_expert", "tiles_m"} <= reads and d in writes, (part, args)


def test_weight_prefetch_prints_the_l2_prefetch_before_the_wait():
    """weight_prefetch (with pdl): each grouped GEMM's producer thread calls prefetch_first_weights before
    griddepcontrol.wait, prefetching that many k-tiles of its first unit's weights into L2; the rule states
    the pre-wait reads; without pdl the configuration and the DSL refuse it."""
    from pydantic import ValidationError

    from argus_cutlass.errors import DslError

    p = MoEProblem(300, 16, 4, 256, 512)
    layer = build_layer(MoEConfig(pdl=True, weight_prefetch=8), p)
    assert layer.weight_prefetch == 8 and layer.name.endswith("_pdlw8")
    src = render_moe(layer)
    assert src.count("constexpr int kWeightPrefetch = 8;") == 2
    call = "  if (wg == kProducerWarpgroup && thread_in_wg == 0) prefetch_first_weights(p);"
    assert src.count(call) == 2
    for part in src.split(call)[1:]:   # the wait follows the prefetch in each GEMM kernel
        assert part.index('asm volatile("griddepcontrol.wait;"') < part.index("producer_mainloop(")
    assert src.count("cute::SM90_TMA_LOAD_2D::PREFETCH::copy(&p.tma_b, c_inner, c_outer);") == 2
    assert "prefetch_first_weights" not in render_moe(build_layer(MoEConfig(pdl=True), p))
    rep = verify_moe(layer)
    assert rep.ok, [v.format() for v in rep.violations]
    (proof,) = [pr for pr in rep.proofs if pr.rule == "moe.pdl"]
    assert "reads before the wait" in proof.summary and "gate_up: tiles_m, tile_expert, w13" in proof.summary
    with pytest.raises(ValidationError, match="needs pdl"):
        MoEConfig(weight_prefetch=8)
    with pytest.raises(DslError, match="weight_prefetch=8 needs pdl"):
        dataclasses.replace(layer, pdl=False)


def test_lookahead_outside_the_grouped_walk_is_refused():
    from argus_cutlass.errors import DslError
    from argus_cutlass.kernels.gemm.config import GemmConfig
    from argus_cutlass.kernels.gemm.program import build_program

    prog = build_program(GemmConfig(), None)
    with pytest.raises(DslError, match="lookahead=1 needs decomposition 'grouped'"):
        prog.replace_node("schedule", lookahead=1)
    layer = build_layer(MoEConfig(), MoEProblem(16, 8, 2, 256, 512))
    with pytest.raises(DslError, match="lookahead 2 must be 0 or 1"):
        layer.replace_node("down", "schedule", None, lookahead=2)


def test_role_loops_run_their_units_once():
    """The verifier's model of the printed role loops (decomposition.role_loop_units): with and without
    lookahead the same units in the same order, each read once and none at or past the unit count."""
    from argus_cutlass.verify.decomposition import role_loop_units

    for la in (0, 1):
        assert role_loop_units(2, 2, 5, 23, la) == ([2, 12, 22], [2, 12, 22])
        assert role_loop_units(7, 1, 8, 7, la) == ([], [])
    with pytest.raises(TypeError):
        role_loop_units(0, 1, 1, 1)   # lookahead is required: no default loop form


@pytest.mark.nvcc
@pytest.mark.parametrize("dtype,unroll,lookahead,small_t,pdl,narrow", [
    ("bf16", 1, 0, False, 0, False), ("fp16", 1, 0, False, 0, False), ("bf16", 4, 0, False, 0, False),
    ("bf16", 4, 1, False, 8, False), ("bf16", 4, 1, True, 4, False), ("bf16", 4, 0, True, 1, True)])
def test_layer_compiles(tmp_path, dtype, unroll, lookahead, small_t, pdl, narrow):
    """The layer compiles for sm_90a without spills; ``pdl`` > 0: programmatic launches with that many
    k-tiles of weights prefetched before the wait; ``narrow``: both GEMMs' 64-column n-tiles (gate+up: 32
    gate + 32 up columns) with 12 stages, the finest small-T units of ``space.KNOBS``, weights loaded
    evict-first."""
    from argus_cutlass.build.nvcc import compile_cu
    from argus_cutlass.errors import ToolchainError

    try:
        from argus_cutlass.build.toolchain import find_toolchain

        find_toolchain()
    except ToolchainError as exc:
        pytest.skip(f"no nvcc/CUTLASS: {exc}")
    from argus_cutlass.kernels.moe.heuristics import small_t_config

    base = small_t_config(dtype) if small_t else MoEConfig(dtype=dtype)
    k = generate(base.replace(gather_unroll=unroll, gather_slices=4 if unroll > 1 else 1, work_lookahead=lookahead,
                              pdl=bool(pdl), weight_prefetch=pdl if pdl > 1 else 0,
                              **(dict(gu_tile_n=64, dn_tile_n=64, gu_stages=12, dn_stages=12,
                                      weights_evict_first=True) if narrow else {})),
                 MoEProblem(16, 64, 6, 2048, 1408, dtype), smt=False)
    art = compile_cu(k.source, k.name, "shared", key_parts=(f"program={k.fingerprint}",))
    assert art.path.exists() if hasattr(art.path, "exists") else art.path
    log = getattr(art, "log", "") or ""
    assert "C7510" not in log
    # ptxas's report (kept with the artifact, also on a cache hit): every kernel, none spilling (the
    # read-ahead Work lives in the producer's few registers)
    assert len(art.functions) >= 6 and art.spill_bytes == 0, (art.functions, art.spill_bytes)


@pytest.mark.nvcc
def test_handoff_layer_compiles():
    """The small-T layer with the handoff (the workspace's tile_ready region, route_scan launched programmatically
    with kScanThreads) compiles for sm_90a without spills."""
    from argus_cutlass.build.nvcc import compile_cu
    from argus_cutlass.errors import ToolchainError
    from argus_cutlass.kernels.moe.heuristics import small_t_config

    try:
        from argus_cutlass.build.toolchain import find_toolchain

        find_toolchain()
    except ToolchainError as exc:
        pytest.skip(f"no nvcc/CUTLASS: {exc}")
    k = generate(small_t_config().replace(pdl=True, handoff=True), MoEProblem(16, 64, 6, 2048, 1408), smt=False)
    assert "w.tile_ready = o; o = align_up(o + w.max_tiles * int64_t(sizeof(int32_t)));" in k.source
    art = compile_cu(k.source, k.name, "shared", key_parts=(f"program={k.fingerprint}",))
    assert len(art.functions) >= 6 and art.spill_bytes == 0, (art.functions, art.spill_bytes)


def test_api_bad_inputs_named():
    torch = pytest.importorskip("torch")
    from torch._subclasses.fake_tensor import FakeTensorMode

    from argus_cutlass.errors import ProblemError
    from argus_cutlass.kernels.moe.library import check_inputs

    x = torch.zeros(4, 64, dtype=torch.bfloat16)
    ids = torch.zeros(4, 2, dtype=torch.int64)
    w = torch.zeros(4, 2)
    w13 = torch.zeros(8, 128, 64, dtype=torch.bfloat16)
    w2 = torch.zeros(8, 64, 64, dtype=torch.bfloat16)
    with pytest.raises(ProblemError, match="x is on cpu"):
        check_inputs(x, ids, w, w13, w2)
    with FakeTensorMode():  # CUDA tensors without a GPU: the shape and dtype rules after the device rule
        x, ids, w, w13, w2 = (t.to("cuda") for t in (torch.zeros(4, 64, dtype=torch.bfloat16),
                                                     torch.zeros(4, 2, dtype=torch.int64), torch.zeros(4, 2),
                                                     torch.zeros(8, 128, 64, dtype=torch.bfloat16),
                                                     torch.zeros(8, 64, 64, dtype=torch.bfloat16)))
        with pytest.raises(ProblemError, match="w2 has shape"):
            check_inputs(x, ids, w, w13, torch.zeros(8, 64, 32, dtype=torch.bfloat16, device="cuda"))
        with pytest.raises(ProblemError, match="topk_ids has dtype"):
            check_inputs(x, ids.float(), w, w13, w2)


@pytest.mark.parametrize("ids,weights,skip,needle", [
    ([[0, 1], [2, 8]], None, False, r"topk_ids\[1, 1\] = 8 is outside \[0, E=8\)"),
    ([[0, 1], [-1, 2]], None, False, r"topk_ids\[1, 0\] = -1 is outside \[0, E=8\)"),
    ([[0, 1], [-2, 2]], None, True, r"topk_ids\[1, 0\] = -2 is outside \[0, E=8\) and is not -1 padding"),
    ([[0, 1], [3, 3]], None, False, r"topk_ids\[1, 1\] = 3 repeats topk_ids\[1, 0\] \(1 token\(s\)"),
    ([[5, -1, 5]], None, True, r"topk_ids\[0, 2\] = 5 repeats topk_ids\[0, 0\]"),
    ([[0, 1], [2, 3]], [[0.5, float("nan")], [0.5, 0.5]], False, r"topk_weights\[0, 1\] = nan is not finite"),
    ([[0, 1], [2, 3]], [[0.5, 0.5], [float("inf"), 0.5]], False, r"topk_weights\[1, 0\] = inf is not finite"),
])
def test_routing_values_refused_by_name(ids, weights, skip, needle):
    """Review (adversarial user): the torch op and ``api.moe`` checked only the id range; an expert twice in a token's
    slots (the rule ``problem.routing`` states, the kernels' proofs assume) and NaN / inf weights were accepted.
    The check runs on tensors of any device (CPU here: the GPU test ``test_bad_inputs_named`` runs it on CUDA)."""
    torch = pytest.importorskip("torch")
    from argus_cutlass.errors import ProblemError
    from argus_cutlass.kernels.moe.library import check_routing_values

    t_ids = torch.tensor(ids, dtype=torch.int32)
    t_w = torch.full(t_ids.shape, 0.5) if weights is None else torch.tensor(weights)
    with pytest.raises(ProblemError, match=needle) as info:
        check_routing_values(t_ids, t_w, 8, skip_padding=skip)
    assert info.value.rule == "moe.input"


def test_routing_values_take_distinct_ids_and_padding_slots_with_any_weight():
    """-1 padding slots (``skip_padding``) may repeat and carry any weight: the kernel adds nothing for them."""
    torch = pytest.importorskip("torch")
    from argus_cutlass.kernels.moe.library import check_routing_values

    ids = torch.tensor([[7, 0, 3], [-1, -1, 2], [1, -1, 0]], dtype=torch.int64)
    w = torch.tensor([[0.2, 0.3, 0.5], [float("nan"), float("inf"), 1.0], [0.5, float("nan"), 0.5]])
    check_routing_values(ids, w, 8, skip_padding=True)
    check_routing_values(ids[:1], w[:1].double(), 8)


# ---- red-team holes (2026-12-01): each closed by a rule with a counterexample ----------------------


def _hit(mutant_id: str):
    m = load_moe_catalogue()[mutant_id]
    rep = verify_moe_mutant(m, smt=False)
    hits = [v for v in rep.violations if v.rule == m.rule]
    assert hits and hits[0].counterexample is not None, (mutant_id, [v.rule for v in rep.violations])
    return hits[0], hits[0].counterexample


def test_swiglu_store_coordinate_identity():
    """Hole 1: a gate+up row offset (a bijection of the h tile) is caught at the thread / register."""
    for mid, off in (("gu_row_offset", 1), ("gu_row_offset_8", 8)):
        v, c = _hit(mid)
        assert c.thread["threadIdx"] == 128 and c.register == "accum[0]"
        assert c.element["row"] == 0 and c.element["m"] == off and "h(0, 0)" in c.expected
    layer = base_layer(load_moe_catalogue()["gu_row_offset"])
    rep = verify_moe(layer.replace_node("gate_up", "epilogue", row_offset=63), smt=False)   # -1 modulo the atom
    assert "moe.swiglu" in {v.rule for v in rep.violations}
    # a negative offset is refused by the DSL: C's % keeps the sign, the model's Python % does not
    from argus_cutlass.errors import DslError

    with pytest.raises(DslError, match=r"row_offset -1: expected an int in \[0, 2\^30\)"):
        layer.replace_node("gate_up", "epilogue", row_offset=-1)


def test_layer_dtype_agrees_with_the_gemms():
    """Hole 2: the layer's Element and the GEMMs' tensors share one dtype; h is down's A."""
    v, c = _hit("layer_dtype_fp16")
    assert c.expected == "fp16" and c.actual == "bf16" and "gate_up.gA" in c.element["tensor"]
    layer = _layer("qwen3-30b-a3b")
    bad = layer.replace_node("down", "tensor", "gA", dtype="fp16")
    assert "moe.dtype" in {x.rule for x in verify_moe(bad, smt=False).violations}


def test_index_expressions_are_printed_from_the_nodes():
    """Hole 3: the printed index is ctype(variable) * the node's factors; factors that are not the
    kernel's product, fixed TMA types and the -1 sentinel are refused; bounds use T-1 / rows-1."""
    from argus_cutlass.dsl.moe_ir import INDEX_SITES
    from argus_cutlass.errors import ConfigError

    v, c = _hit("xs_offset_factors_rows")
    assert c.expected == "rows * H" and c.actual == "rows"
    src = render_moe(mutant_layer(load_moe_catalogue()["xs_offset_factors_rows"]))
    assert "int32_t(prow))[v]" in src   # printed from the node: no * kHidden
    layer = _layer("qwen3-30b-a3b")
    assert {i.name for i in layer.indices} == set(INDEX_SITES)
    with pytest.raises(ConfigError):
        render_moe(layer.replace_node("index", None, "x_offset", factors=("Q", "H")))
    # x_offset int32 is no overflow at H = 2048 ((2^20 - 1) * 2048 < 2^31) but is at H = 4096
    ok = verify_moe(layer.replace_node("index", None, "x_offset", ctype="int32_t"), smt=False)
    assert "moe.index_width" not in {x.rule for x in ok.violations}
    v, c = _hit("x_offset_int32")
    assert c.element["T"] == 2**19 and c.thread["cta"] == 2**19
    v, c = _hit("permuted_row_uint32")
    assert "4294967295" in c.actual
    rep = verify_moe(layer.replace_node("index", None, "w13_row", ctype="int64_t"), smt=False)
    assert "moe.index_width" in {x.rule for x in rep.violations}
    # every index node's C type reaches the printed code
    base = render_moe(layer)
    for ix in layer.indices:
        other = "int64_t" if ix.ctype != "int64_t" else "int32_t"
        assert render_moe(layer.replace_node("index", None, ix.name, ctype=other)) != base, ix.name


def test_combine_accumulates_in_fp32():
    """Hole 4."""
    v, c = _hit("combine_acc_bf16")
    assert c.expected.startswith("257") and c.actual.startswith("256") and c.thread["role"] == "combine"


def test_launch_limits():
    """Hole 5: threads and chunk are whole warps <= 1024; E <= 1024 in the verifier and the problem."""
    from argus_cutlass.errors import ProblemError

    for mid in ("combine_threads_2048", "route_chunk_2048", "experts_2000"):
        _hit(mid)
    layer = _layer("qwen3-30b-a3b")
    for bad in (layer.replace_node("combine", threads=0), layer.replace_node("combine", threads=-32),
                layer.replace_node("routing", chunk=1), layer.replace_node("routing", chunk=4096)):
        assert "moe.launch" in {x.rule for x in verify_moe(bad, smt=False).violations}
    with pytest.raises(ProblemError) as info:
        MoEProblem(16, 2000, 2, 256, 512).validate()
    assert info.value.rule == "problem.experts" and "experts=2000" in str(info.value)


def test_rank_and_routing_counterexamples_name_the_thread():
    """Hole 6 (rank 'block' refused by the rule) and hole 8 (routing counterexamples name the
    routing kernel's CTA and thread)."""
    v, c = _hit("rank_block")
    assert c.thread["role"] == "route_permute" and "block" in c.actual
    for mid, role in (("rank_off_by_one", "route_permute"), ("clamp_invalid_ids", "route_permute"),
                      ("scan_inclusive", "route_scan")):
        v, c = _hit(mid)
        assert c.thread["role"] == role and {"cta", "threadIdx", "warp", "lane"} <= set(c.thread), mid
        if role == "route_permute":
            s = c.element["token"] * 2 + c.element["slot"]
            assert (c.thread["cta"], c.thread["threadIdx"]) == divmod(s, 256)


def test_padded_rows_stay_int32_whatever_the_index_nodes_say(tmp_path):
    """Red team, session 18: tokens_bits 28 with every index node widened to int64 verified, but the
    route_scan's counts, the grouped GEMMs' M and their A / D TMA row coordinates stay 32-bit: the
    padded row count must fit int32 for T <= 2^tokens_bits (moe.index_width)."""
    from argus_cutlass.testing.mutants_moe import load_moe_catalogue, mutant_layer

    base = (Path(__file__).resolve().parents[2] / "argus_cutlass" / "testing" / "mutants_moe.toml").read_text()
    head = base[: base.index("[[mutant]]")]   # the catalogue's bases
    widen = ", ".join(f'{{ part = "index", key = "{n}", set = {{ ctype = "int64_t" }} }}'
                      for n in ("routed_row", "permuted_row", "block_count", "tile_unit"))
    (tmp_path / "m.toml").write_text(head + f"""
[[mutant]]
id = "tokens_bits_28_int64"
class = "index_width"
base = "qwen"
rule = "moe.index_width"
story = "T up to 2^28 at k = 8: the padded rows pass 2^31"
edit = [{{ part = "layer", set = {{ tokens_bits = 28 }} }}, {widen}]
""")
    wide = mutant_layer(load_moe_catalogue(tmp_path / "m.toml")["tokens_bits_28_int64"])
    assert {ix.ctype for ix in wide.indices if ix.name == "tile_unit"} == {"int64_t"}
    msgs = [v.message for v in verify_moe(wide, smt=False).violations if v.rule == "moe.index_width"]
    assert len(msgs) == 1 and "padded rows reach" in msgs[0] and "int32" in msgs[0], msgs


def test_timed_floor_counts_the_activated_experts_of_the_timed_routing():
    """The floor the CLI and the report print is the timed routing's: experts with no row are not read."""
    from argus_cutlass.kernels.moe.check import timed_counts, timed_floor_ms

    qwen, mixtral = MoEProblem.for_model("qwen3-30b-a3b", 16), MoEProblem.for_model("mixtral", 16)
    active = 85   # experts the timed routing of Qwen3-30B-A3B T = 16 activates (session 23's bench floor, 0.187 ms)
    assert qwen.active_experts(timed_counts(qwen)) == active < qwen.experts
    assert timed_floor_ms(qwen) == pytest.approx(timed_floor_ms(qwen, 4.8e12) * 4.8 / 4.3)
    assert timed_floor_ms(qwen) == pytest.approx(
        (active * 3 * 768 * 2048 * 2 + 2 * 16 * 2048 * 2) / 4.3e12 * 1e3)
    assert timed_floor_ms(mixtral) == pytest.approx(mixtral.floor_ms(hbm_bytes_per_s=4.3e12))   # all 8 routed


def test_copy_bandwidth_refuses_an_l2_sized_buffer():
    """copy_bytes_per_s measures HBM: a buffer L2 could hold, or no iteration, is refused before any GPU work."""
    from argus_cutlass.kernels.moe.check import copy_bytes_per_s

    for nbytes, iters in ((64 * 2**20, 20), (2**30, 0)):
        with pytest.raises(ValueError, match="256 MiB"):
            copy_bytes_per_s(nbytes, iters)


def test_timed_counts_are_the_timed_inputs_routing():
    """The counts behind the printed floor come from the very ids the timed runs feed the layer."""
    torch = pytest.importorskip("torch")
    from argus_cutlass.kernels.moe.check import timed_counts, timed_inputs

    for p in (MoEProblem(16, 128, 8, 256, 128), MoEProblem(300, 64, 6, 256, 128)):
        _, ids, _, _, _ = timed_inputs(p, device="cpu")
        got = torch.bincount(ids.reshape(-1).long(), minlength=p.experts).tolist()
        assert got == timed_counts(p).tolist()


def test_weights_evict_first_reaches_only_the_weight_loads():
    """MoEConfig.weights_evict_first: both grouped GEMMs' B (weights) load nodes carry cache_hint evict_first and
    their printed TMA loads use it; the token (A) loads stay evict_normal; off, every load is evict_normal."""
    import re

    p = MoEProblem(16, 64, 6, 2048, 1408)
    base = MoEConfig(tile_m=64, gu_stages=5, dn_stages=8)
    hints = {}
    for ef in (False, True):
        cfg = base.replace(weights_evict_first=ef)
        layer = build_layer(cfg, p)
        assert {layer.gate_up.load_into("sB").cache_hint, layer.down.load_into("sB").cache_hint} == \
            {"evict_first" if ef else "evict_normal"}
        assert {layer.gate_up.load_into("sA").cache_hint, layer.down.load_into("sA").cache_hint} == {"evict_normal"}
        src = generate(cfg, p, smt=False).source
        hints[ef] = re.findall(r"kCacheHint([AB]) = static_cast<uint64_t>\(cute::TMA::CacheHintSm90::(\w+)\)", src)
        assert src.count("kCacheHintB, dst") == 2 and src.count("kCacheHintA, dst") == 2   # used by each load
    assert hints[False] == [("A", "EVICT_NORMAL"), ("B", "EVICT_NORMAL")] * 2
    assert hints[True] == [("A", "EVICT_NORMAL"), ("B", "EVICT_FIRST")] * 2


# ---- the gate+up -> down handoff per m-tile (layer node handoff, rule moe.handoff) -----------------------


@pytest.mark.parametrize("small_t", [False, True])
@pytest.mark.parametrize("pdl", [False, True])
def test_handoff_prints_the_release_acquire_pair(small_t, pdl):
    """handoff: gate+up's store thread signals each unit after its h stores are complete (wait_group 0, not
    .read), fenced, with red.release.gpu on tile_ready[tm]; down's producer spins on ld.acquire.gpu of
    tile_ready[tm] up to kHandoffTarget = the gate+up n-blocks per m-tile, fences, then loads; route_scan
    zeroes the counters it owns; with pdl down lets the next kernel launch first and waits for gate+up last.
    The layer verifies with the moe.handoff proof; without handoff nothing of it is printed."""
    import re

    from argus_cutlass.kernels.moe.heuristics import small_t_config

    p = MoEProblem(300, 16, 4, 256, 512)
    base = (small_t_config() if small_t else MoEConfig()).replace(pdl=pdl)
    plain, ho = build_layer(base, p), build_layer(base.replace(handoff=True), p)
    assert ho.handoff and ho.name == plain.name + "_ho"
    src, old = render_moe(ho), render_moe(plain)
    assert "tile_ready" not in old and "handoff" not in old
    code = "\n".join(ln for ln in src.splitlines() if not ln.lstrip().startswith("//")) + "\n"
    gu, dn = code.index("namespace " + ho.kernel_name() + "_gu"), code.index("namespace " + ho.kernel_name() + "_dn")
    gu_text, dn_text = code[gu:dn], code[dn:code.index(ho.kernel_name() + "_ns")]
    signal = re.search(r"handoff_signal\(Params const& p, int tm\) \{\n(.*?)\n\}", gu_text, re.S).group(1)
    assert signal.split("\n") == ['  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");',
                                  '  asm volatile("fence.proxy.async.global;" ::: "memory");',
                                  '  asm volatile("red.release.gpu.global.add.s32 [%0], 1;" :: "l"(p.tile_ready + tm) : "memory");']
    assert gu_text.count("handoff_signal(p, w.tm);") == 1 and "handoff_wait" not in gu_text
    if small_t:   # ping-pong: signalled after the epilogue turn is handed on (the other group does not wait for it)
        assert gu_text.index("bar_arrive(order_barrier(1, (cwg + 1) % 2)") < gu_text.index("handoff_signal(p, w.tm);")
    else:   # cooperative: only a unit that stored its tile signals
        assert "if (w.stores && store_thread) handoff_signal(p, w.tm);" in gu_text
    target = -(-p.ffn // ho.gate_up.epilogue.tile_n)
    assert f"constexpr int kHandoffTarget = {target};" in dn_text and ho.handoff_target() == target
    assert 'ld.acquire.gpu.global.b32' in dn_text and "handoff_wait(p, w.tm);" in dn_text
    assert dn_text.index("handoff_wait(p, w.tm);") < dn_text.index("load_A(&p.tma_a")
    assert "handoff_signal" not in dn_text
    assert "tile_ready[base + i] = 0;" in code and "tile_expert[base + i] = e;" in code
    if pdl:
        body = dn_text[dn_text.index("gemm_kernel(CUTE_GRID_CONSTANT"):]
        assert body.count("griddepcontrol.launch_dependents") == 1 and body.count("griddepcontrol.wait") == 1
        assert body.index("griddepcontrol.launch_dependents") < body.index("producer_mainloop(") < body.index(
            "griddepcontrol.wait")
    else:
        assert "griddepcontrol" not in code
    rep = verify_moe(ho)
    assert rep.ok, [v.format() for v in rep.violations]
    pr = next(pr for pr in rep.proofs if pr.rule == "moe.handoff")
    assert f"kHandoffTarget = {target}" in pr.summary and pr.points > 0


@pytest.mark.parametrize("change,expect", [
    ({"handoff_target_delta": -1}, "may still be storing"),
    ({"handoff_target_delta": 1}, "waits forever"),
    ({"handoff_signal": "read"}, "wait_group.read"),
    ({"handoff_fence": False}, "fence.proxy.async"),
    ({"handoff_zero": False}, "does not zero tile_ready"),
])
def test_handoff_rule_catches_each_planted_mistake(change, expect):
    """Each wrong choice of the handoff is refused by moe.handoff with a counterexample (the m-tile, and the
    thread: the store thread of the unit, the scan thread, or the down producer); the early-read ones also
    by moe.pdl (down's pre-wait accesses of h are then unordered)."""
    from argus_cutlass.kernels.moe.heuristics import small_t_config

    layer = build_layer(small_t_config().replace(pdl=True, handoff=True), MoEProblem(64, 8, 2, 256, 512))
    rep = verify_moe(dataclasses.replace(layer, **change), smt=False)
    assert not rep.ok
    v = next(v for v in rep.violations if v.rule == "moe.handoff")
    assert expect in v.message, v.message
    assert v.counterexample is not None and "m_tile" in v.counterexample.element and v.counterexample.thread
    if change.get("handoff_target_delta", 0) >= 0:
        assert "moe.pdl" in {x.rule for x in rep.violations}


def test_handoff_fields_need_the_handoff():
    """The handoff's choices without handoff print nothing: the DSL refuses them, naming the field."""
    from argus_cutlass.errors import DslError

    layer = build_layer(MoEConfig(), MoEProblem(64, 8, 2, 256, 512))
    for change in ({"handoff_fence": False}, {"handoff_zero": False}, {"handoff_signal": "read"},
                   {"handoff_target_delta": 1}, {"handoff_backoff_ns": 64}, {"handoff_timeout_ms": 60_000}):
        with pytest.raises(DslError, match=next(iter(change))):
            dataclasses.replace(layer, **change)


def test_handoff_spin_times_out_instead_of_hanging():
    """handoff_timeout_ms: the builder prints the shortest time-out moe.handoff accepts (10x the longest wait of a
    correct run, at least 10 s); past it the down producer traps (%globaltimer, __trap) instead of hanging the GPU.
    A shorter one is refused with a counterexample; 0 (no time-out) and the back-off are printed as chosen."""
    import re

    from argus_cutlass.dsl.moe_ir import MIN_HANDOFF_TIMEOUT_MS
    from argus_cutlass.errors import DslError
    from argus_cutlass.kernels.moe.heuristics import small_t_config

    layer = build_layer(small_t_config().replace(pdl=True, handoff=True), MoEProblem(64, 8, 2, 256, 512))
    want = layer.handoff_min_timeout_ms()
    assert layer.handoff_timeout_ms == want >= max(MIN_HANDOFF_TIMEOUT_MS, 10 * layer.handoff_wait_bound_ms())
    src = render_moe(layer)
    wait = re.search(r"handoff_wait\(Params const& p, int tm\) \{\n(.*?)\n\}", src, re.S).group(1)
    assert f"kHandoffTimeoutNs = {want}ull * 1000000ull;" in src and "kHandoffBackoffNs = 128;" in src
    assert wait.count("%%globaltimer") == 2 and "if (now - start > kHandoffTimeoutNs) __trap();" in wait
    assert wait.index("if (v >= kHandoffTarget) break;") < wait.index("__trap()")
    pr = next(pr for pr in verify_moe(layer, smt=False).proofs if pr.rule == "moe.handoff")
    assert f"time-out {want} ms" in pr.summary
    # a time-out a slow but correct call can reach: refused, naming the bound
    rep = verify_moe(dataclasses.replace(layer, handoff_timeout_ms=100), smt=False)
    v = next(v for v in rep.violations if v.rule == "moe.handoff")
    assert "traps after spinning 100 ms" in v.message and v.counterexample.thread["role"] == "down producer"
    assert f">= {want} ms" in v.counterexample.expected
    # no time-out, no back-off: nothing of them printed, the layer verifies
    bare = dataclasses.replace(layer, handoff_timeout_ms=0, handoff_backoff_ns=0)
    text = render_moe(bare)
    assert "__trap" not in text and "globaltimer" not in text and "__nanosleep" not in text
    rep = verify_moe(bare, smt=False)
    assert rep.ok and "unbounded spin" in next(p.summary for p in rep.proofs if p.rule == "moe.handoff")
    for change in ({"handoff_backoff_ns": 2_000_000}, {"handoff_backoff_ns": -1}, {"handoff_timeout_ms": -5},
                   {"handoff_timeout_ms": 1 << 31}, {"handoff_timeout_ms": True}):
        with pytest.raises(DslError, match=next(iter(change))):
            dataclasses.replace(layer, **change)
    # the bound grows with the layer: Mixtral at T = 2^20 runs gate+up for seconds
    mix = build_layer(MoEConfig(handoff=True), MoEProblem.for_model("mixtral", 16))
    assert mix.handoff_wait_bound_ms() > 5_000 and mix.handoff_timeout_ms >= 50_000


def test_pdl_chain_with_the_handoff_matches_the_printed_kernels():
    """moe.pdl's table with the handoff: route_scan also writes tile_ready (its pointer parameter), both
    grouped GEMMs get tile_ready from run() (gate+up adds, down reads)."""
    import re

    from argus_cutlass.verify.moe import pdl_chain

    layer = build_layer(MoEConfig(pdl=True, handoff=True), MoEProblem(64, 8, 2, 256, 512))
    src = render_moe(layer)
    chain = {n: (set(r), set(w)) for n, r, w in pdl_chain(layer)}
    m = re.search(r"__global__ void __launch_bounds__\([^)]*\) route_scan\(([^)]*)\)", src)
    assert "int32_t* tile_ready" in m.group(1) and "tile_ready" in chain["route_scan"][1]
    run = src[src.index("inline int run("):]
    for part, ns in (("gate_up", "_gu"), ("down", "_dn")):
        args = [a.strip() for a in re.search(ns + r"::run_grouped\(([^;]*)\);", run).group(1).split(",")]
        assert args[-2] == "tile_ready", (part, args)
    assert "tile_ready" in chain["gate_up"][1] and "tile_ready" in chain["down"][0]


def test_pdl_rule_follows_an_early_trigger():
    """moe.pdl with a kernel that triggers launch_dependents before its wait (the down GEMM with the handoff):
    the next kernel may then launch while the one before the early kernel still runs, so its pre-wait accesses
    are checked against both. Made visible on real chain buffers: with gate+up also triggering early, the handoff
    layer's down (whose accesses all come before its wait) reading xs, which route_permute writes two launches
    back, is no longer ordered."""
    from argus_cutlass.verify.moe import _check_pdl, pdl_chain, pdl_early_trigger

    layer = build_layer(MoEConfig(pdl=True, handoff=True), MoEProblem(64, 8, 2, 256, 512))
    names = [n for n, _r, _w in pdl_chain(layer)]
    assert pdl_early_trigger(layer) == tuple(n == "down" for n in names)
    proofs, bad = _check_pdl(layer)
    assert proofs and not bad
    early = tuple(n in ("gate_up", "down") for n in names)
    proofs, bad = _check_pdl(layer, early=early)
    assert not proofs and "down (call 0) writes xs before its griddepcontrol.wait" in bad[0].message
    assert "route_permute (call 0)" in bad[0].message


def test_grouped_epilogue_prints_out_equals_acc():
    """The grouped GEMMs' epilogue contract, printed from the programs and proved by epilogue.source: out = acc
    (params alpha 1 / beta 0 printed as p.alpha / p.beta), C never read (source path none: kReadC false, the
    host passes C = nullptr). A scaled output, a beta, or a C path are refused with a counterexample."""
    import re

    layer = build_layer(MoEConfig(), MoEProblem(64, 8, 2, 256, 512))
    src = render_moe(layer)
    assert re.findall(r"p\.alpha = ([^;]*);", src) == ["1.0f", "1.0f"]
    assert re.findall(r"p\.beta = ([^;]*);", src) == ["0.0f", "0.0f"]
    assert src.count("constexpr bool kReadC = false;") == 2 and "kReadC = true" not in src
    rep = verify_moe(layer, smt=False)
    proofs = [p.summary for p in rep.proofs if p.rule == "epilogue.source"]
    assert len(proofs) == 2 and all("out = acc" in s for s in proofs)
    assert sum("no C load to mask" in p.summary for p in rep.proofs if p.rule == "residue.source") == 2
    assert rep.complete and not rep.unknowns
    for part, kind, change, words in (("down", "params", {"alpha": 0.5}, "alpha = 0.5"),
                                      ("gate_up", "params", {"beta": 1.0}, "prints beta = 1.0, which its C path"),
                                      ("down", "source", {"path": "gmem"}, "source path is 'gmem'"),
                                      ("down", "source", {"row_offset": 3, "residue_mask": False}, "row_offset 3")):
        bad = layer.replace_node(part, kind, None, **change)
        text = render_moe(bad)
        assert text != src   # the edit reaches the printed code
        v = next(v for v in verify_moe(bad, smt=False).violations if v.rule == "epilogue.source")
        assert words in v.message and f"[{part}]" in v.message and v.counterexample is not None


def test_grouped_extents_are_printed_from_the_programs():
    """run_grouped's N and K are printed from each grouped program's params n_size / k_size (auditor, session 39:
    they were template literals, so moe.handoff's signal count only restated the target's expression). Wrong
    extents are refused by moe.launch; on a handoff layer the signal count then differs from kHandoffTarget
    too (moe.handoff); a name that is no layer size cannot be printed."""
    import re

    from argus_cutlass.errors import ConfigError

    layer = build_layer(MoEConfig(pdl=True, handoff=True), MoEProblem(64, 8, 2, 256, 512))
    calls = re.findall(r"run_grouped\((\w+), \w+, \w+, int\(w.padded_rows\), (\w+), (\w+),", render_moe(layer))
    assert calls == [("xs", "kFfn", "kHidden"), ("h", "kHidden", "kFfn")]
    assert verify_moe(layer, smt=False).ok
    for part, change, rules in (("gate_up", {"n_size": "2I"}, {"moe.launch", "moe.handoff"}),
                                ("gate_up", {"k_size": "I"}, {"moe.launch"}),
                                ("down", {"n_size": "I", "k_size": "H"}, {"moe.launch"})):
        bad = layer.replace_node(part, "params", None, **change)
        assert render_moe(bad) != render_moe(layer)
        rep = verify_moe(bad, smt=False)
        assert rules <= {v.rule for v in rep.violations}, (part, change, [v.rule for v in rep.violations])
        v = next(v for v in rep.violations if v.rule == "moe.launch")
        assert f"{part}: run_grouped is called with (N, K)" in v.message and v.counterexample is not None
    for name in ("T", "N_blocks"):   # N_blocks is a printed constant of the index nodes, not a layer size
        with pytest.raises(ConfigError, match="not layer sizes"):
            render_moe(layer.replace_node("down", "params", None, n_size=name))


def test_gather_refuses_a_row_tail_it_would_not_copy():
    """moe.gather: the printed gather copies kHidden / kVec whole 16-byte vectors per row, so an H that is not a
    multiple of the vector would leave the row's last columns unwritten (auditor, session 39: the rule counted
    only whole vectors and passed it); the layer's static_assert states the same in bytes."""
    layer = build_layer(MoEConfig(), MoEProblem(64, 8, 2, 256, 512))
    v = next(v for v in verify_moe(dataclasses.replace(layer, hidden=260), smt=False).violations
             if v.rule == "moe.gather")
    assert "columns [256, 260) are never written" in v.message and v.counterexample.element["col"] == 256
    assert "(kHidden * int(sizeof(Element))) % 16 == 0" in render_moe(layer)


def test_handoff_counters_fit_their_workspace_buffer():
    """moe.handoff: route_scan zeroes tile_ready[j] wherever it writes tile_expert[j], and the workspace gives
    tile_ready max_tiles counters (tile_expert E more): a scan whose writes run past max_tiles (here an inclusive
    scan on groups of 65 rows at 64-row tiles, which fill every padded tile) is refused for tile_ready too."""
    from argus_cutlass.hw.routing import make_routing
    from argus_cutlass.kernels.moe.heuristics import small_t_config
    from argus_cutlass.verify.moe import _check_handoff

    layer = build_layer(small_t_config().replace(handoff=True, pdl=True), MoEProblem(260, 8, 2, 256, 512))
    ids, _ = make_routing("sizes", 260, 8, 2, sizes=[65] * 8)
    assert _check_handoff(layer, [("sizes65", ids)])[1] == []
    _, bad = _check_handoff(layer.replace_node("routing", scan="inclusive"), [("sizes65", ids)])
    assert "zeroes tile_ready[17] but the workspace holds 16 counters" in bad[0].message
    assert bad[0].counterexample.element == {"m_tile": 17, "tensor": "tile_ready"}


#: workspace_layout(T) of the template before the workspace node (session 40), printed by g++ from the rendered host
#: code: (T, padded_rows, max_tiles, tile_expert, tiles_m, permuted_row, xs, h, bytes) of the small layer (E 8, k 2,
#: H 256, I 512) and of the qwen-like small-T layer with the handoff (tile_ready at 17304064 for T = 2^20)
_LAYOUT_BEFORE_NODE = {
    "small": (build_layer(MoEConfig(), MoEProblem(64, 8, 2, 256, 512)),
              [(300, 1664, 13, 768, 1024, 1280, 3840, 855808, 2559744),
               (1048576, 2098176, 16392, 262656, 328448, 328704, 8717312, 1082983424, 3231515648)]),
}


def test_workspace_layout_is_the_nodes_and_keeps_its_offsets():
    """The host's workspace_layout is printed from the workspace node, one line per region, and gives the byte
    offsets the hand-written layout gave (pinned above; the g++ comparison of session 40 covered six layers)."""
    from argus_cutlass.kernels.moe.heuristics import small_t_config

    for layer, rows in _LAYOUT_BEFORE_NODE.values():
        for t, padded, tiles, te, tm, prow, xs, h, nbytes in rows:
            w = layer.workspace_layout(t)
            assert (w["padded_rows"], w["max_tiles"], w["tile_expert"], w["tiles_m"], w["permuted_row"], w["xs"],
                    w["h"], w["bytes"]) == (padded, tiles, te, tm, prow, xs, h, nbytes)
            assert w["out"] == w["xs"] and w["block_counts"] == 0
    ho = build_layer(small_t_config().replace(pdl=True, handoff=True), MoEProblem(64, 128, 8, 2048, 768))
    w = ho.workspace_layout(1 << 20)
    assert (w["tile_ready"], w["permuted_row"], w["bytes"]) == (17304064, 17828864, 47341440000)
    src = render_moe(ho)
    for r in ho.workspace.regions:
        line = f"w.{r.name} = w.{r.alias};" if r.alias else f"w.{r.name} = o; o = align_up(o + {r.count_cpp()} * "
        assert line in src, r.name
    assert "constexpr int64_t kWorkspaceAlign = 256;" in src and "w.max_tiles = w.padded_rows / 64;" in src
    assert "route_scan<<<1, kScanThreads" not in src   # the handoff layer launches programmatically
    assert "launch_programmatic(route_scan, 1, kScanThreads," in src
    plain = render_moe(build_layer(MoEConfig(), MoEProblem(64, 8, 2, 256, 512)))
    for text in ("constexpr int kScanThreads = 1024;", "__launch_bounds__(kScanThreads) route_scan(",
                 "__shared__ int tiles[kScanThreads];", "for (int d = 1; d < kScanThreads; d <<= 1)",
                 "route_scan<<<1, kScanThreads, 0, stream>>>"):
        assert text in plain, text
    assert "1024" not in plain[plain.index("route_scan("):plain.index("route_permute(")]


def test_workspace_rule_decides_every_token_count():
    """moe.workspace: the T's it enumerates decide all of [1, 2^tokens_bits] (the layout is periodic-affine from
    T0 = ceil(E / k)): checked against the full range on a small tokens_bits, for a correct node and a short one."""
    import numpy as np

    from argus_cutlass.verify.moe import _check_workspace, _tiles_need, workspace_needs, workspace_tokens

    layer = dataclasses.replace(build_layer(MoEConfig(tile_m=64), MoEProblem(64, 8, 2, 256, 512)), tokens_bits=16)
    assert workspace_tokens(layer).size < 1 << 16
    for count, ok in ((((("max_tiles",),)), True), ((("max_tiles",), (-1,)), False)):
        m = layer.replace_node("region", None, "tile_expert", count=count)
        ts = np.arange(1, (1 << 16) + 1, dtype=np.int64)
        full = bool((m.workspace.region("tile_expert").elements(m.workspace_quantities(ts))
                     >= workspace_needs(m, ts)["tile_expert"][0]).all())
        assert full == ok and (not _check_workspace(m, [])[1]) == ok
    # the worst routing reaches the bound: one row in each of min(T*k, E) groups, the rest in one
    from argus_cutlass.verify.moe import _worst_routing

    for t in (1, 3, 4, 61, 300):
        assert simulate_routing(layer, _worst_routing(layer, t))["tiles_m"] == int(_tiles_need(layer, t * 2))


def test_workspace_rule_bounds_the_host_arithmetic():
    """moe.workspace: the host's int64 offsets and the int grid / row arguments hold for every T, computed exactly on
    the enumerated T's (a count the numpy enumeration would wrap is refused); the workspace node's row parameters
    are bounded."""
    from argus_cutlass.errors import DslError

    layer = build_layer(MoEConfig(), MoEProblem(16, 8, 2, 256, 512))
    wide = layer.replace_node("region", None, "permuted_row", count=(("rows", 2**41),))
    v = next(v for v in verify_moe(wide, smt=False).violations if v.rule == "moe.workspace")
    assert "past int64" in v.message and v.counterexample.params["T"] == 2**20
    with pytest.raises(DslError, match=r"round_rows 1073741824 must be an int in \[1, 4096\]"):
        layer.replace_node("workspace", round_rows=2**30)


def test_workspace_and_scan_mutants_name_region_index_and_thread():
    cat = load_moe_catalogue()
    want = {"ws_tile_expert_short": ("tile_expert", 1), "ws_h_sized_by_hidden": ("h", 131071),
            "ws_tiles_m_empty": ("tiles_m", 0)}
    for mid, (region, index) in want.items():
        v = next(v for v in verify_moe_mutant(cat[mid], smt=False).violations if v.rule == "moe.workspace")
        assert v.counterexample.element["region"] == region and v.counterexample.element["index"] == index, mid
        assert v.counterexample.params["T"] == 1 and v.counterexample.thread, mid
    v = next(v for v in verify_moe_mutant(cat["ws_h_overlaps_xs"], smt=False).violations if v.rule == "moe.workspace")
    assert "reuses the bytes of 'xs'" in v.message and "in the same kernel" in v.message
    v = next(v for v in verify_moe_mutant(cat["scan_threads_below_experts"], smt=False).violations
             if v.rule == "moe.launch")
    assert v.counterexample.thread["threadIdx"] == 64 and v.counterexample.element == {"expert": 64}
    # a scan of any thread count >= E is an inclusive scan (no power of two, no whole warps needed: __syncthreads
    # waits for a partial warp too); above CUDA's 1024 threads per CTA it is refused
    layer = build_layer(MoEConfig(), MoEProblem(64, 8, 2, 256, 512))
    for st in (96, 100):
        assert verify_moe(layer.replace_node("routing", scan_threads=st), smt=False).ok, st
    from argus_cutlass.errors import DslError

    with pytest.raises(DslError, match="multiplies two run-time quantities"):
        layer.replace_node("region", None, "xs", count=(("padded_rows", "rows"),))


@pytest.mark.parametrize("delta", [-1, 1])
def test_layer_experts_must_be_the_weights_experts(delta):
    """A layer whose E (the routing's id range) differs from its weights' expert count (the B loads' ``experts``,
    the W13 / W2 tensor maps' rows) is refused by moe.launch naming the first id routed wrongly: E one short skips
    the last expert's ids (a lost term), one long routes ids past W13 (found by a fresh reviewer, session 42)."""
    layer = build_layer(MoEConfig(), MoEProblem(64, 8, 2, 256, 512))
    assert layer.gate_up.load_into("sB").experts == 8 == layer.down.load_into("sB").experts
    rep = verify_moe(layer.replace_node("layer", experts=8 + delta), smt=False)
    hits = [v for v in rep.violations if v.rule == "moe.launch"]
    assert {v.message.split(":")[0] for v in hits} == {"gate_up", "down"}
    c = hits[0].counterexample
    assert c.element["id"] == min(8, 8 + delta) and c.params == {"E": 8 + delta, "B experts": 8}
    for part in ("gate_up", "down"):   # the weights' count alone, too
        lb = layer.program(part).load_into("sB")
        rep = verify_moe(layer.replace_node(part, "load", lb.name, experts=7), smt=False)
        assert any(v.rule == "moe.launch" and v.message.startswith(part) for v in rep.violations), part
        rep = verify_moe(layer.replace_node(part, "load", lb.name, experts=0), smt=False)   # not stated at all
        assert any(v.rule == "moe.launch" and v.message.startswith(part) for v in rep.violations), part
    with pytest.raises(Exception, match="experts 3 and expert_rows 0"):   # a plain GEMM operand has no experts
        from argus_cutlass.kernels.gemm.config import GemmConfig
        from argus_cutlass.kernels.gemm.program import build_program

        p = build_program(GemmConfig())
        p.replace_node("load", p.load_into("sB").name, experts=3)


@pytest.mark.parametrize("change", [{"topk": 0}, {"topk": 17}, {"experts": 0}, {"hidden": -1}, {"ffn": True}])
def test_layer_node_refuses_sizes_no_layer_has(change):
    """The layer node's sizes are validated where the node is built (review, session 44: ``topk`` 0 reached the
    verifier, whose routing simulation raised a ProblemError mid-proof)."""
    from argus_cutlass.errors import DslError

    layer = build_layer(MoEConfig(), MoEProblem(64, 16, 1, 512, 256))
    with pytest.raises(DslError, match=next(iter(change))):
        layer.replace_node("layer", **change)
