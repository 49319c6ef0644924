"""bench/moe_ceilings.py: its two text patches still apply to what the production template prints (a template change
that moves the patched lines makes the patch refuse, naming what it did not find), and each adds exactly its mode
switch (no GPU, no nvcc: the patched text is checked, not compiled)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import moe_ceilings  # noqa: E402

from argus_cutlass.generate import configure  # noqa: E402
from argus_cutlass.kernels.moe.problem import MoEProblem  # noqa: E402
from argus_cutlass.kernels.moe.program import build_layer  # noqa: E402
from argus_cutlass.render.moe import render_moe  # noqa: E402


@pytest.fixture(scope="module", params=[("qwen3-30b-a3b", 16), ("mixtral", 256)])
def layer_text(request):
    p = MoEProblem.for_model(*request.param)
    layer = build_layer(configure(p, gpu="NVIDIA H200")[0].replace(row_bounded=False), p)   # as main() builds them
    return layer.kernel_name(), render_moe(layer)


def test_launch_patch_guards_the_four_launches(layer_text):
    name, src = layer_text
    out = moe_ceilings.patch_launches(src, name)
    assert out.count("if (!(g_host_mode & 1)) ") == 3 and out.count("if (!(g_host_mode & 2)) ") == 1
    assert f'extern "C" void {name}_set_mode(int m)' in out
    # nothing else changed: removing the additions gives the printed text back
    back = out.replace("if (!(g_host_mode & 1)) ", "").replace("if (!(g_host_mode & 2)) ", "")
    back = back.replace("static int g_host_mode = 0;\n", "")
    assert back.split(f'\nextern "C" void {name}_set_mode')[0] == src


def test_padding_patch_redirects_both_gemms(layer_text):
    name, src = layer_text
    out = moe_ceilings.patch_padding(src, name)
    assert out.count("(g_pad_mode & 1) ? 0 : w.tm * kTileAMn") == 2   # gate+up's xs, down's h
    assert out.count("((g_pad_mode & 2) ? 0 : m_base)") == 2          # gate+up's h, down's out
    assert out.count("__device__ int g_pad_mode = 0;") == 1


def test_patches_refuse_text_they_do_not_know():
    with pytest.raises(ValueError, match="found 0 of the 4 launches"):
        moe_ceilings.patch_launches("namespace k_ns {\n}\n", "k")
    with pytest.raises(ValueError, match="expected one gate\\+up namespace"):
        moe_ceilings.patch_padding("namespace k_gu {\n}\n", "k")
