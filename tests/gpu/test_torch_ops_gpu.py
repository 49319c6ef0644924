"""``argus_cutlass.torch`` on a Hopper GPU: numerics of each op against torch / the fp32 references,
``torch.compile(fullgraph=True)`` on CUDA tensors, and CUDA graph capture and replay after
:func:`~argus_cutlass.torch.precompile` (a capture before it raises instead of compiling).

Run on the device machine: ``pytest -q -m gpu tests/gpu/test_torch_ops_gpu.py`` (needs nvcc and a
CUDA build of torch >= 2.4). Error bound (STYLE 11): kernel error <= 2 x (same-precision torch
error) + atol, both against an fp32 reference.
"""

from __future__ import annotations

import warnings

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


def test_cuda_graph_capture_after_precompile(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))  # an empty disk cache: precompile must build
    a = torch.randn(48, 2048, device="cuda", dtype=torch.bfloat16)   # a shape no other test used
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
    # the replay reads the live inputs and writes every output: new inputs in place, outputs poisoned
    q.copy_(q.flip(0))
    x.copy_(x.flip(0))
    for t in (o, lse, y):
        t.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    o_new, lse_new = at.attention(q, q, q, cu_seqlens_q=cu, cu_seqlens_k=cu)
    torch.testing.assert_close(o, o_new)
    torch.testing.assert_close(lse, lse_new)
    ref = fp32_layer(x, ids, w, w13, w2)
    assert torch.isfinite(y).all() and (y.float() - ref).abs().max().item() <= 2e-2 * ref.abs().max().item() + 1e-2


# ---- the aligned staging path: what breaks only TMA's 16-byte rules runs (issue 13 item 5) ----------


@pytest.fixture
def staged_warnings(monkeypatch):
    """The staging warnings start afresh (they are said once per kernel and process)."""
    monkeypatch.setattr(at, "_STAGED_WARNED", set())


def _nan(*shape, dtype=torch.bfloat16):
    return torch.full(shape, float("nan"), device="cuda", dtype=dtype)


def test_staged_colmajor_a_with_m300(staged_warnings):
    """A column-major ``a`` with M = 300 (lda = 600 bytes): A is staged, the result matches the fp32 reference."""
    torch.manual_seed(10)
    a = torch.randn(256, 300, device="cuda", dtype=torch.bfloat16).t()
    w = torch.randn(512, 256, device="cuda", dtype=torch.bfloat16)
    p = at.gemm_problem(a, w.t())
    assert (p.layout, p.lda, [s.name for s in p.staging()]) == ("nn", 300, ["A"])
    with pytest.warns(UserWarning, match=r"^a: lda=300: 600 bytes.*\(tma.stride_alignment\).*stages A through"):
        y = at.gemm(a, w.t())
    _close(y, a.float() @ w.float().t(), a @ w.t(), 1e-2)


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_staged_n33_into_a_padded_out_view(staged_warnings, out_dtype):
    """N = 33 written into a 33-column view of a NaN-poisoned 40-column buffer: D is staged, the M x N region
    matches the fp32 reference and the padding columns keep their NaN; a full-shape bias at an odd row
    pitch is the epilogue's C."""
    torch.manual_seed(11)
    a = torch.randn(1000, 264, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(33, 264, device="cuda", dtype=torch.bfloat16)
    full = _nan(1000, 40, dtype=out_dtype)
    out = full[:, :33]
    assert [s.name for s in at.gemm_problem(a, w.t(), out=out).staging()] == ["D"]
    with pytest.warns(UserWarning, match=r"^out: N=33: 66 bytes|^out: N=33: 132 bytes"):
        assert at.gemm(a, w.t(), out=out) is out
    ref = a.float() @ w.float().t()
    _close(out, ref, (a @ w.t()).to(out_dtype), 1e-2)
    assert torch.isnan(full[:, 33:]).all()
    bias = torch.randn(1000, 35, device="cuda", dtype=out_dtype)[:, :33]  # ldc = 35: C needs no alignment
    full.fill_(float("nan"))
    at.gemm(a, w.t(), bias=bias, out=out)
    _close(out, ref + bias.float(), (a @ w.t()).to(out_dtype) + bias, 2e-2)
    assert torch.isnan(full[:, 33:]).all()
    y = at.gemm(a, w.t(), out_dtype=out_dtype)  # a new (1000, 33) output: ldd = 33, staged too
    assert y.shape == (1000, 33) and y.stride() == (33, 1)
    _close(y, ref, (a @ w.t()).to(out_dtype), 1e-2)


def test_staged_misaligned_pointers(staged_warnings):
    """``a`` sliced 2 bytes into its rows and ``out`` 2 bytes into a poisoned buffer: A and D are staged; the
    elements of the buffer before and after ``out`` keep their NaN."""
    torch.manual_seed(12)
    a = torch.randn(256, 136, device="cuda", dtype=torch.bfloat16)[:, 1:129]
    b = torch.randn(128, 256, device="cuda", dtype=torch.bfloat16)
    buf = _nan(256 * 256 + 16)
    out = buf[1:1 + 256 * 256].view(256, 256)
    assert a.data_ptr() % 16 and out.data_ptr() % 16
    p = at.gemm_problem(a, b, out=out)
    assert p.unaligned == ("A", "D") and [s.name for s in p.staging()] == ["A", "D"]
    with pytest.warns(UserWarning, match=r"^a: starts at 0x[0-9a-f]+, not 16-byte aligned.*out: starts at"):
        at.gemm(a, b, out=out)
    _close(out, a.float() @ b.float(), a @ b, 1e-2)
    assert torch.isnan(buf[0]) and torch.isnan(buf[1 + 256 * 256:]).all()
    ac = a.clone()  # the aligned call of the same shape runs the direct kernel, no warning
    assert at.gemm_problem(ac, b).staging() == () and api.gemm_kernel_key(at.gemm_problem(ac, b))[2] == ()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*aligned copy", category=UserWarning)
        y = at.gemm(ac, b)
    _close(y, a.float() @ b.float(), a @ b, 1e-2)


def test_cuda_graph_capture_of_a_staged_kernel(staged_warnings):
    """precompile(gemm_problem(...)) builds the staged kernel; a capture runs it (its workspace is a
    stream-ordered allocation node) and the replay reads the live inputs."""
    torch.manual_seed(13)
    a = torch.randn(512, 300, device="cuda", dtype=torch.bfloat16).t()   # M = 300, column-major: A staged
    w = torch.randn(100, 512, device="cuda", dtype=torch.bfloat16)
    full = _nan(300, 104)
    out = full[:, :100]                                                  # N = 100 (200 bytes) in a padded view
    p = at.gemm_problem(a, w.t(), out=out)
    assert [s.name for s in p.staging()] == ["A", "D"]
    at.precompile(p)
    g = torch.cuda.CUDAGraph()
    with pytest.warns(UserWarning, match="aligned copy"), torch.cuda.graph(g):
        at.gemm(a, w.t(), out=out)
    a.copy_(torch.randn_like(a))
    full.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    _close(out, a.float() @ w.float().t(), a @ w.t(), 1e-2)
    assert torch.isnan(full[:, 100:]).all()


def test_what_no_path_runs_is_refused_before_launch():
    """Overlapping rows (lda = 64 < K = 128) stay an error naming the tensor and the rule, never a launch failure."""
    a = torch.randn(256 * 128, device="cuda", dtype=torch.bfloat16).as_strided((256, 128), (64, 1))
    with pytest.raises(ProblemError) as err:
        at.gemm(a, torch.randn(128, 256, device="cuda", dtype=torch.bfloat16))
    assert err.value.rule == "problem.ld" and "lda=64 is smaller than the contiguous extent K=128" in str(err.value)
