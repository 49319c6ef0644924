"""MoE layer (issue 11): programs, verifier rules, mutants, rendering, compile check (CPU)."""

from __future__ import annotations

import dataclasses
import shutil

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
    from argus_cutlass.kernels.moe.routing import RoutingPlan, make_routing

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


@pytest.mark.nvcc
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_layer_compiles(tmp_path, dtype):
    from argus_cutlass.build.nvcc import compile_cu
    from argus_cutlass.errors import ToolchainError

    try:
        from argus_cutlass.build.toolchain import find_toolchain

        find_toolchain()
    except ToolchainError as exc:
        pytest.skip(f"no nvcc/CUTLASS: {exc}")
    k = generate(MoEConfig(dtype=dtype), MoEProblem(16, 64, 6, 2048, 1408, dtype), smt=False)
    art = compile_cu(k.source, k.name, "shared", key_parts=(f"program={k.fingerprint}",))
    assert art.path.exists() if hasattr(art.path, "exists") else art.path
    log = getattr(art, "log", "") or ""
    assert "C7510" not in log


def test_api_bad_inputs_named():
    torch = pytest.importorskip("torch")
    from argus_cutlass.errors import ProblemError
    from argus_cutlass.kernels.moe.library import check_inputs

    x = torch.zeros(4, 64, dtype=torch.bfloat16)
    ids = torch.zeros(4, 2, dtype=torch.int64)
    w = torch.zeros(4, 2)
    w13 = torch.zeros(8, 128, 64, dtype=torch.bfloat16)
    w2 = torch.zeros(8, 64, 64, dtype=torch.bfloat16)
    with pytest.raises(ProblemError, match="x is on cpu"):
        check_inputs(x, ids, w, w13, w2)
    with pytest.raises(ProblemError, match="w2 has shape"):
        check_inputs(x, ids, w, w13, torch.zeros(8, 64, 32, dtype=torch.bfloat16))
    with pytest.raises(ProblemError, match="topk_ids has dtype"):
        check_inputs(x, ids.float(), w, w13, w2)
