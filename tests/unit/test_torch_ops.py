"""``argus_cutlass.torch`` on a CPU machine: the custom ops' fake implementations (shapes, dtypes,
strides) on FakeTensors of device ``cuda``, ``torch.compile(fullgraph=True)`` tracing, layout and
leading-dimension inference for the four GEMM layouts, the capture-without-precompile error and
the bad-input messages. Nothing here runs a kernel (``tests/gpu/test_torch_ops_gpu.py`` does)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not hasattr(torch.library, "custom_op"):
    pytest.skip("torch < 2.4 has no torch.library.custom_op", allow_module_level=True)

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

from argus_cutlass import api  # noqa: E402
from argus_cutlass.errors import NotPrecompiledError, ProblemError  # noqa: E402
from argus_cutlass.kernels.gemm.problem import GemmProblem  # noqa: E402

at = pytest.importorskip("argus_cutlass.torch")

BF16 = torch.bfloat16


@pytest.fixture
def fake():
    with FakeTensorMode() as mode:
        yield mode


def cuda(*shape, dtype=BF16):
    return torch.empty(*shape, device="cuda", dtype=dtype)


def _operand(rows, cols, major):
    """A rows x cols tensor, row-major or column-major (a transposed view)."""
    return cuda(rows, cols) if major == "row" else cuda(cols, rows).t()


# ---- GEMM layout inference ------------------------------------------------------------------------

M, N, K = 256, 512, 128
#: layout letters (A, B) -> (a's storage, b's storage, lda, ldb) for packed tensors
LAYOUTS = {
    "tn": ("row", "col", K, K),
    "nt": ("col", "row", M, N),
    "nn": ("col", "col", M, K),
    "tt": ("row", "row", K, N),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_gemm_layout_from_strides(fake, layout):
    a_major, b_major, lda, ldb = LAYOUTS[layout]
    a, b = _operand(M, K, a_major), _operand(K, N, b_major)
    p = at.gemm_problem(a, b)
    assert (p.layout, p.lda, p.ldb, p.ldc, p.ldd) == (layout, lda, ldb, N, N)
    assert (p.m, p.n, p.k, p.dtype, p.out_dtype) == (M, N, K, "bf16", "bf16")


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_gemm_leading_dims_of_padded_views(fake, layout):
    """A slice of a wider buffer keeps its row pitch as the leading dimension."""
    a_major, b_major, _, _ = LAYOUTS[layout]
    a = cuda(M, K + 64)[:, :K] if a_major == "row" else cuda(K, M + 64)[:, :M].t()
    b = cuda(K, N + 64)[:, :N] if b_major == "row" else cuda(N, K + 64)[:, :K].t()
    out = cuda(M, N + 32)[:, :N]
    p = at.gemm_problem(a, b, out=out)
    want_lda = K + 64 if a_major == "row" else M + 64
    want_ldb = N + 64 if b_major == "row" else K + 64
    assert (p.layout, p.lda, p.ldb, p.ldd) == (layout, want_lda, want_ldb, N + 32)


def test_gemm_problem_matches_gemmproblem_defaults(fake):
    p = at.gemm_problem(cuda(M, K), cuda(N, K).t(), out_dtype=torch.float32)
    assert p == GemmProblem(M, N, K, "bf16", "fp32", "tn")


# ---- fake implementations and tracing -------------------------------------------------------------


@pytest.mark.parametrize("out_dtype", [None, torch.float16, torch.float32])
def test_gemm_fake_output(fake, out_dtype):
    a, b = cuda(M, K, dtype=torch.float16), cuda(N, K, dtype=torch.float16).t()
    y = at.gemm(a, b, out_dtype=out_dtype)
    assert tuple(y.shape) == (M, N) and y.stride() == (N, 1) and y.device.type == "cuda"
    assert y.dtype == (out_dtype or torch.float16)


def test_gemm_out_returns_out(fake):
    out = cuda(M, N, dtype=torch.float32)
    assert at.gemm(cuda(M, K), cuda(K, N), out=out, bias=cuda(N, dtype=torch.float32)) is out


def test_attention_fake_outputs(fake):
    q, k = cuda(2, 300, 8, 128), cuda(2, 400, 2, 128)
    o, lse = at.attention(q, k, k, causal=True)
    assert (tuple(o.shape), o.dtype, o.stride()) == (tuple(q.shape), BF16, q.contiguous().stride())
    assert (tuple(lse.shape), lse.dtype, lse.stride()) == ((2, 8, 300), torch.float32, (2400, 300, 1))


def test_attention_fake_outputs_varlen(fake):
    q, k = cuda(700, 8, 64), cuda(900, 8, 64)
    cu = torch.empty(4, device="cuda", dtype=torch.int32)
    o, lse = at.attention(q, k, k, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=300, max_seqlen_k=400)
    assert tuple(o.shape) == (700, 8, 64) and (tuple(lse.shape), lse.stride()) == ((8, 700), (700, 1))


def _moe_inputs(t=64, e=8, k=2, h=1024, i=512):
    return (cuda(t, h), torch.empty(t, k, device="cuda", dtype=torch.int64),
            torch.empty(t, k, device="cuda", dtype=torch.float32), cuda(e, 2 * i, h), cuda(e, h, i))


def test_moe_fake_output(fake):
    y = at.moe(*_moe_inputs())
    assert (tuple(y.shape), y.dtype, y.stride()) == ((64, 1024), BF16, (1024, 1))


def test_compile_fullgraph_traces_every_op(fake):
    """Dynamo + AOT autograd trace all four ops in one graph (a graph break would raise)."""
    seen = []

    def backend(gm, example_inputs):
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm

    def model(a, b, bias, out, q, k, v, x, ids, w, w13, w2):
        y = at.gemm(a, b, bias=bias, out_dtype=torch.float32).relu()
        at.gemm(a, b, out=out)
        o, lse = at.attention(q, k, v, causal=True)
        z = at.moe(x, ids, w, w13, w2)
        return y, out * 2, o.float().sum() + lse.sum(), z

    args = (cuda(M, K), cuda(N, K).t(), cuda(N, dtype=torch.float32), cuda(M, N), cuda(1, 256, 4, 128),
            cuda(1, 256, 4, 128), cuda(1, 256, 4, 128), *_moe_inputs())
    y, out2, s, z = torch.compile(model, fullgraph=True, backend=backend)(*args)
    assert (tuple(y.shape), y.dtype, tuple(z.shape)) == ((M, N), torch.float32, (64, 1024))
    for op in ("argus.gemm", "argus.gemm_out", "argus.attention", "argus.moe"):
        assert op in seen, seen


def test_compile_aot_eager_functionalizes_out(fake):
    """aot_eager traces the mutating ``gemm_out`` (declared ``Tensor(a!) out``) without a break."""
    f = torch.compile(lambda a, b, o: at.gemm(a, b, out=o) + 1, fullgraph=True, backend="aot_eager")
    assert tuple(f(cuda(M, K), cuda(K, N), cuda(M, N)).shape) == (M, N)


def test_gemm_out_schema_declares_mutation():
    schema = torch.ops.argus.gemm_out.default._schema
    out = [a for a in schema.arguments if a.name == "out"][0]
    assert out.alias_info is not None and out.alias_info.is_write
    assert not any(a.alias_info is not None for a in torch.ops.argus.gemm.default._schema.arguments)


@pytest.mark.parametrize("op,args", [
    ("gemm", lambda: (cuda(M, K), cuda(K, N), None, None)),
    ("gemm_out", lambda: (cuda(M, K), cuda(N, K).t(), cuda(N, dtype=torch.float32), cuda(M, N, dtype=torch.float32))),
    ("attention", lambda: (cuda(2, 128, 4, 64), cuda(2, 256, 2, 64), cuda(2, 256, 2, 64), None, None, None, True,
                           None, None, None)),
    ("moe", lambda: _moe_inputs()),
])
def test_opcheck_on_fake_tensors(fake, op, args):
    """torch.library.opcheck's schema, autograd-registration, fake-tensor and dynamic-shape AOT checks.
    Under FakeTensorMode the "real" run is the fake one: this checks the schema against the fake
    implementation (and the dynamic-shape trace), not the kernel (the GPU tests do)."""
    result = torch.library.opcheck(getattr(torch.ops.argus, op).default, args())
    assert set(result.values()) == {"SUCCESS"}, result


# ---- capture without precompile -----------------------------------------------------------------


_CACHES = (api._GEMM_LIBS, api._ATTENTION_LIBS, api._MOE_LIBS)


@pytest.fixture
def capturing(monkeypatch):
    """Pretend a CUDA graph capture is running, with nothing built in this process."""
    monkeypatch.setattr(at, "_capturing", lambda: True)
    saved = [dict(c) for c in _CACHES]
    for c in _CACHES:
        c.clear()
    yield
    for c, kept in zip(_CACHES, saved):
        c.clear()
        c.update(kept)


def _refuses_to_build(monkeypatch):
    """Make any build attempt fail the test loudly."""
    def boom(*a, **k):
        raise AssertionError("a kernel was generated/compiled inside the (simulated) capture")
    monkeypatch.setattr(api, "generate", boom)
    monkeypatch.setattr(api, "compile_kernel", boom)


def test_capture_gemm_without_precompile_raises(fake, capturing, monkeypatch):
    _refuses_to_build(monkeypatch)
    with pytest.raises(NotPrecompiledError) as err:
        at._gemm_into(cuda(M, K), cuda(K, N), None, cuda(M, N))
    msg = str(err.value)
    assert err.value.rule == "capture.not_precompiled"
    assert "GEMM kernel for M=256 N=512 K=128" in msg and "precompile" in msg and "capture" in msg


def test_capture_attention_without_precompile_raises(fake, capturing, monkeypatch):
    _refuses_to_build(monkeypatch)
    q, k = cuda(700, 8, 64), cuda(900, 8, 64)
    cu = torch.empty(4, device="cuda", dtype=torch.int32)  # never read inside the capture
    with pytest.raises(NotPrecompiledError, match=r"(?s)attention kernel for b3 h8/8 varlen\(3\) d64.*precompile"):
        at._attention_impl(q, k, k, cu, cu, None, False, None, None, None)


def test_capture_moe_without_precompile_raises(fake, capturing, monkeypatch):
    _refuses_to_build(monkeypatch)
    with pytest.raises(NotPrecompiledError, match=r"(?s)MoE kernel for T=64 E=8 k=2 H=1024 I=512 bf16.*precompile"):
        at._moe_impl(*_moe_inputs())


def test_capture_finds_a_precompiled_kernel(fake, capturing, monkeypatch):
    """After precompile the capture path takes the loaded kernel: precompile fills the same cache
    the dispatch reads (the build itself is replaced by a stub library here)."""
    built = []

    class StubLib:
        def run(self, problem, *args, **kw):
            built.append(problem)

    monkeypatch.setattr("argus_cutlass.generate.build_jobs", lambda jobs, **kw: _stub_build(jobs, StubLib))
    a, b, out = cuda(M, K), cuda(K, N), cuda(M, N)
    assert at.precompile(at.gemm_problem(a, b)) == 1
    assert at.precompile([at.gemm_problem(a, b)]) == 0  # already loaded
    monkeypatch.setattr(at, "_stream", lambda t: 0)
    monkeypatch.setattr(torch.cuda, "device", lambda d: _Null())
    at._gemm_into(a, b, None, out)
    assert built and built[0].layout == "tt"


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _stub_build(jobs, lib_cls):
    from argus_cutlass.generate import build

    return {build(c, p).kernel_name(): lib_cls() for c, p in jobs}


# ---- bad input ------------------------------------------------------------------------------------


def _raises(rule, pattern, fn, *args, **kw):
    with pytest.raises(ProblemError, match=pattern) as err:
        fn(*args, **kw)
    assert err.value.rule == rule
    assert "Traceback" not in str(err.value)


def test_gemm_cpu_tensor_is_named():
    _raises("problem.device", r"a is on cpu; the kernels need CUDA tensors", at.gemm,
            torch.zeros(16, 16, dtype=BF16), torch.zeros(16, 16, dtype=BF16))


def test_gemm_bad_inputs(fake):
    a, b = cuda(M, K), cuda(K, N)
    _raises("problem.dtype", r"a has dtype torch.float32", at.gemm, cuda(M, K, dtype=torch.float32), b)
    _raises("problem.dtype", r"b has dtype torch.float16, a torch.bfloat16", at.gemm, a,
            cuda(K, N, dtype=torch.float16))
    _raises("problem.shape", r"K disagrees \(128 vs 64\)", at.gemm, a, cuda(64, N))
    _raises("problem.layout", r"a \(M x K = \(256, 64\)\) has strides \(128, 2\): neither K .* nor M",
            at.gemm, cuda(M, K)[:, ::2], cuda(64, N))
    _raises("problem.layout", r"out has strides .*last mode \(N\) must be contiguous", at.gemm, a, b,
            out=cuda(N, M).t())
    _raises("problem.shape", r"out has shape \(256, 256\)", at.gemm, a, b, out=cuda(M, M))
    _raises("problem.shape", r"bias has shape \(256,\): not broadcastable", at.gemm, a, b, bias=cuda(M))
    _raises("problem.dtype", r"out_dtype torch.int32", at.gemm, a, b, out_dtype=torch.int32)


def test_gemm_tma_rules_name_the_tensor(fake):
    """A K of 100 bf16 (200 bytes) breaks the 16-byte rule of a row-major a."""
    _raises("tma.contiguous_extent", r"gemm\(a \(256, 100\).*A \(bf16, layout 'tt'.*K=100 is not a multiple of 8",
            at.gemm, cuda(M, 100), cuda(100, N))
    _raises("tma.stride_alignment", r"lda=130", at.gemm, cuda(M, 130)[:, :K], cuda(K, N))


def test_attention_bad_inputs(fake):
    q, k = cuda(2, 128, 8, 128), cuda(2, 256, 2, 128)
    _raises("problem.device", r"q is on cpu", at.attention, torch.zeros(2, 128, 8, 128, dtype=BF16), k, k)
    _raises("problem.dtype", r"k has dtype torch.float16, q torch.bfloat16", at.attention, q,
            cuda(2, 256, 2, 128, dtype=torch.float16), k)
    _raises("problem.layout", r"q's head dim is not contiguous", at.attention,
            cuda(2, 128, 128, 8).transpose(2, 3), k, k)
    _raises("problem.shape", r"v has shape \(2, 255, 2, 128\), k \(2, 256, 2, 128\)", at.attention, q, k,
            cuda(2, 255, 2, 128))
    _raises("attention.head_dim", r"head_dim=80", at.attention, cuda(2, 128, 8, 80), cuda(2, 256, 2, 80),
            cuda(2, 256, 2, 80))
    _raises("problem.heads", r"heads=8 is not a multiple of kv_heads=3", at.attention, q,
            cuda(2, 256, 3, 128), cuda(2, 256, 3, 128))
    cu = torch.empty(3, device="cuda", dtype=torch.int64)
    _raises("problem.dtype", r"cu_seqlens_q has dtype torch.int64", at.attention, cuda(300, 8, 128),
            cuda(300, 8, 128), cuda(300, 8, 128), cu_seqlens_q=cu, cu_seqlens_k=cu)


def test_moe_bad_inputs(fake):
    x, ids, w, w13, w2 = _moe_inputs()
    _raises("moe.input", r"w2 has shape \(8, 1024, 256\), expected \(E, H, I\) = \(8, 1024, 512\)", at.moe,
            x, ids, w, w13, cuda(8, 1024, 256))
    _raises("moe.input", r"topk_ids has dtype torch.float32", at.moe, x, w, w, w13, w2)
    _raises("moe.input", r"x has strides .*last mode must be contiguous", at.moe, cuda(1024, 64).t(), ids, w,
            w13, w2)
    _raises("moe.input", r"x is on cpu", at.moe, torch.zeros(64, 1024, dtype=BF16), ids, w, w13, w2)


def test_precompile_refuses_bad_problems():
    _raises("problem.size", r"M=0", at.precompile, GemmProblem(0, 16, 16))
    with pytest.raises(TypeError, match="precompile takes GemmProblem"):
        at.precompile("gemm 16x16x16")
