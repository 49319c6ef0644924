"""The attention kernel reports the mask it applies (``<name>_causal``) and the library refuses a kernel
whose mask is not the configuration's (red team, session 18: a coordinated edit of the program's spec
param ``causal`` and its mask node verifies, since the program then proves what it computes; the
boundary with the caller's configuration is where that edit is caught)."""

from __future__ import annotations

import dataclasses

import pytest

from argus_cutlass.errors import LaunchError
from argus_cutlass.kernels.attention.config import AttentionConfig
from argus_cutlass.kernels.attention.program import build_program
from argus_cutlass.render.attention import render_attention


def test_the_source_and_the_header_export_the_mask():
    from argus_cutlass.generate import generate

    k = generate(AttentionConfig(head_dim=64, causal=False), None, smt=False)
    assert f"int {k.name}_causal() {{ return {k.name}_ns::kCausal ? 1 : 0; }}" in k.source
    from argus_cutlass.render.header import render_header

    assert f"int {k.name}_causal(void);" in render_header(k.program)


@pytest.mark.nvcc
def test_a_kernel_whose_spec_and_mask_were_both_flipped_is_refused_at_load():
    from argus_cutlass.build.nvcc import compile_cu
    from argus_cutlass.kernels.attention.library import AttentionKernelLibrary
    from argus_cutlass.verify.attention import verify_attention

    cfg = AttentionConfig(head_dim=64, causal=True)
    p = build_program(cfg)
    flipped = dataclasses.replace(p, params=tuple((k, False if k == "causal" else v) for k, v in p.params))
    flipped = flipped.replace_node("mask", None, causal=False)
    assert verify_attention(flipped, smt=False).ok   # the program proves what it now computes
    so = compile_cu(render_attention(flipped), flipped.kernel_name(), use_cache=False).path
    with pytest.raises(LaunchError) as exc:
        AttentionKernelLibrary(so, flipped.kernel_name(), cfg)
    assert exc.value.rule == "launch.kernel" and "causal=False" in str(exc.value)
    AttentionKernelLibrary(so, flipped.kernel_name(), cfg.model_copy(update={"causal": False}))   # its own config loads
