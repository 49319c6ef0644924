"""``argus_cutlass.torch`` on a Hopper GPU: numerics of each op against torch / the fp32 references,
``torch.compile(fullgraph=True)`` on CUDA tensors, and CUDA graph capture and replay after
:func:`~argus_cutlass.torch.precompile` (a capture before it raises instead of compiling).

Run on the device machine: ``pytest -q -m gpu tests/gpu/test_torch_ops_gpu.py`` (needs nvcc and a
CUDA build of torch >= 2.4). Error bound (STYLE 11): kernel error <= 2 x (same-precision torch
error) + atol, both against an fp32 reference.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not hasattr(torch.library, "custom_op"):
    pytest.skip("torch < 2.4 has no torch.library.custom_op", allow_module_level=True)

import argus_cutlass.torch as at  # noqa: E402
from argus_cutlass import api  # noqa: E402
from argus_cutlass.errors import NotPrecompiledError, ProblemError  # noqa: E402

pytestmark = pytest.mark.gpu


def _close(got, ref32, same_precision, atol):
    err = (got.float() - ref32).abs().max().item()
    base = (same_precision.float() - ref32).abs().max().item()
    assert err <= 2 * base + atol, f"max error {err} vs torch's {base} (+{atol})"


def _operand(rows, cols, major, dtype=torch.bfloat16, pad=0):
    if major == "row":
        return torch.randn(rows, cols + pad, device="cuda", dtype=dtype)[:, :cols]
    return torch.randn(cols, rows + pad, device="cuda", dtype=dtype)[:, :rows].t()


@pytest.mark.parametrize("layout", ["tn", "nt", "nn", "tt"])
@pytest.mark.parametrize("m,n,k", [(256, 512, 128), (16, 4096, 1024), (1000, 72, 264)])
def test_gemm_layouts_vs_torch(layout, m, n, k):
    torch.manual_seed(0)
    a = _operand(m, k, "row" if layout[0] == "t" else "col", pad=8)
    b = _operand(k, n, "row" if layout[1] == "t" else "col", pad=8)
    assert at.gemm_problem(a, b).layout == layout
    y = at.gemm(a, b)
    assert y.shape == (m, n) and y.dtype == torch.bfloat16 and y.stride() == (n, 1)
    _close(y, a.float() @ b.float(), a @ b, 1e-2)


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16])
def test_gemm_bias_and_out(out_dtype):
    torch.manual_seed(1)
    a = torch.randn(300, 256, device="cuda", dtype=torch.float16)
    w = torch.randn(512, 256, device="cuda", dtype=torch.float16)
    bias = torch.randn(512, device="cuda")
    ref = a.float() @ w.float().t() + bias
    y = at.gemm(a, w.t(), bias=bias, out_dtype=out_dtype)
    assert y.dtype == out_dtype
    _close(y, ref, (a @ w.t()).to(out_dtype) + bias.to(out_dtype), 2e-2)
    out = torch.full((300, 512), float("nan"), device="cuda", dtype=out_dtype)
    assert at.gemm(a, w.t(), bias=bias, out=out) is out
    _close(out, ref, (a @ w.t()).to(out_dtype) + bias.to(out_dtype), 2e-2)
    full = torch.randn(300, 512, device="cuda", dtype=out_dtype)  # a full (M, N) bias is the epilogue's C
    _close(at.gemm(a, w.t(), bias=full, out_dtype=out_dtype), a.float() @ w.float().t() + full.float(),
           (a @ w.t()).to(out_dtype) + full, 2e-2)


def test_attention_vs_reference():
    from argus_cutlass.kernels.attention.reference import attention_reference

    torch.manual_seed(2)
    q = torch.randn(2, 300, 8, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(2, 500, 2, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(2, 500, 2, 128, device="cuda", dtype=torch.bfloat16)
    from argus_cutlass.kernels.attention.library import problem_from_tensors

    o, lse = at.attention(q, k, v, causal=True)
    problem = problem_from_tensors(q, k, v, causal=True)
    o_ref, lse_ref = attention_reference(problem, q, k, v)
    assert (o.shape, lse.shape) == (q.shape, (2, 8, 300))
    assert (o.float() - o_ref).abs().max().item() < 2e-2
    finite = torch.isfinite(lse_ref)
    assert torch.equal(finite, torch.isfinite(lse))
    assert (lse[finite] - lse_ref[finite]).abs().max().item() < 1e-3


def test_moe_vs_fp32_layer():
    from argus_cutlass.kernels.moe.check import fp32_layer, make_inputs
    from argus_cutlass.kernels.moe.problem import MoEProblem

    x, ids, w, w13, w2 = make_inputs(MoEProblem(100, 8, 2, 1024, 512), seed=3)
    y = at.moe(x, ids, w, w13, w2)
    ref = fp32_layer(x, ids, w, w13, w2)
    assert y.shape == x.shape and y.dtype == x.dtype
    assert (y.float() - ref).abs().max().item() <= 2e-2 * ref.abs().max().item() + 1e-2


def test_compile_fullgraph_on_cuda():
    torch.manual_seed(4)
    a = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1024, 512, device="cuda", dtype=torch.bfloat16)
    q = torch.randn(1, 256, 4, 64, device="cuda", dtype=torch.bfloat16)

    def model(a, w, q):
        y = at.gemm(a, w.t(), out_dtype=torch.float32).relu()
        o, _ = at.attention(q, q, q)
        return y, o

    y, o = torch.compile(model, fullgraph=True)(a, w, q)
    y_eager, o_eager = model(a, w, q)
    torch.testing.assert_close(y, y_eager)
    torch.testing.assert_close(o, o_eager)
    # and both against references computed without our ops (the comparison above only shows that
    # compiling changed nothing)
    ref_y = (a.float() @ w.float().t()).relu()
    assert (y - ref_y).abs().max().item() <= 2e-2 * ref_y.abs().max().item() + 1e-2
    qt = q.transpose(1, 2).float()
    ref_o = torch.nn.functional.scaled_dot_product_attention(qt, qt, qt).transpose(1, 2)
    assert (o.float() - ref_o).abs().max().item() <= 2e-2 * ref_o.abs().max().item() + 1e-2


def test_cuda_graph_capture_after_precompile():
    a = torch.randn(48, 2048, device="cuda", dtype=torch.bfloat16)   # a bucket no other test used
    w = torch.randn(3072, 2048, device="cuda", dtype=torch.bfloat16)
    api._GEMM_LIBS.clear()
    g = torch.cuda.CUDAGraph()
    with pytest.raises(NotPrecompiledError, match="precompile"), torch.cuda.graph(g):
        at.gemm(a, w.t())
    assert at.precompile(at.gemm_problem(a, w.t())) == 1
    out = torch.empty(48, 3072, device="cuda", dtype=torch.bfloat16)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        at.gemm(a, w.t(), out=out)
    a.copy_(torch.randn_like(a))
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    _close(out, a.float() @ w.float().t(), a @ w.t(), 1e-2)


def test_cuda_graph_capture_varlen_attention_and_moe():
    from argus_cutlass.kernels.attention.problem import AttentionProblem
    from argus_cutlass.kernels.moe.check import fp32_layer, make_inputs
    from argus_cutlass.kernels.moe.problem import MoEProblem

    cu = torch.tensor([0, 100, 350], device="cuda", dtype=torch.int32)
    q = torch.randn(350, 4, 64, device="cuda", dtype=torch.bfloat16)
    moe_p = MoEProblem(64, 8, 2, 1024, 512)
    x, ids, w, w13, w2 = make_inputs(moe_p, seed=5)
    at.precompile(AttentionProblem.varlen_problem((100, 250), (100, 250), 4, 4, 64), moe_p)
    o_eager, _ = at.attention(q, q, q, cu_seqlens_q=cu, cu_seqlens_k=cu)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        o, lse = at.attention(q, q, q, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=250, max_seqlen_k=250)
        y = at.moe(x, ids, w, w13, w2)
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(o, o_eager)
    ref = fp32_layer(x, ids, w, w13, w2)
    assert (y.float() - ref).abs().max().item() <= 2e-2 * ref.abs().max().item() + 1e-2


def test_misaligned_view_is_refused_before_launch():
    a = torch.randn(256, 136, device="cuda", dtype=torch.bfloat16)[:, 1:129]  # base address off by 2 bytes
    with pytest.raises(ProblemError) as err:
        at.gemm(a, torch.randn(128, 256, device="cuda", dtype=torch.bfloat16))
    assert err.value.rule in ("tma.address_alignment", "tma.stride_alignment")
