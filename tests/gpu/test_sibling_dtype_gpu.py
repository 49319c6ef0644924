"""fp16 problems of shipped buckets run the shipped bf16 entry retyped to fp16 (agent/store.py ``_Sibling``):
the lookup says so, and the layer / attention it builds matches the fp32 reference on silicon."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("model,tokens", [("qwen3-30b-a3b", 16), ("mixtral", 256)])
def test_moe_fp16_runs_the_bf16_shipped_entry(model, tokens):
    from argus_cutlass.agent.store import ExperienceStore, lookup_moe_config
    from argus_cutlass.api import moe_kernel
    from argus_cutlass.kernels.moe.check import run_and_check
    from argus_cutlass.kernels.moe.problem import MoEProblem

    p = MoEProblem.for_model(model, tokens, dtype="fp16")
    lk = lookup_moe_config(p, store=ExperienceStore("/nonexistent/argus_store.json"), gpu="NVIDIA H200")
    assert lk.source == "shipped" and lk.config.dtype == "fp16" and "|bf16|" in lk.entry_key, lk.detail
    chk = run_and_check(moe_kernel(p, lk.config, smt=False), p, routing="skewed", seed=3)
    assert chk.ok, chk


def test_attention_fp16_runs_the_bf16_shipped_entry():
    from argus_cutlass.agent.store import ExperienceStore, lookup_attention_config
    from argus_cutlass.generate import build_many
    from argus_cutlass.kernels.attention.check import run_and_check
    from argus_cutlass.kernels.attention.problem import AttentionProblem

    p = AttentionProblem(2, 16, 16, 2048, 2048, 128, "fp16", causal=True)   # the d128 causal s2048 bucket
    lk = lookup_attention_config(p, store=ExperienceStore("/nonexistent/argus_store.json"), gpu="NVIDIA H200")
    assert lk.source == "shipped" and lk.config.dtype == "fp16" and "|bf16|" in lk.entry_key, lk.detail
    lib = next(iter(build_many([lk.config]).values()))
    res = run_and_check(lib, p, seed=5)
    assert res.passed, res.summary()
