"""``argus_cutlass.torch`` on a CPU machine: the custom ops' fake implementations (shapes, dtypes,
strides) on FakeTensors of device ``cuda``, ``torch.compile(fullgraph=True)`` tracing, layout and
leading-dimension inference for the four GEMM layouts, the capture-without-precompile error,
the bad-input messages and the GEMM's aligned staging path (what breaks only TMA's 16-byte rules runs
a staged kernel: the build problem, the kernel key, precompile, the warning). Nothing here runs a
kernel (``tests/gpu/test_torch_ops_gpu.py`` does)."""

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
    ("gemm", lambda: (cuda(K, 300).t(), cuda(K, 33), None, None)),  # staged A and D: the fake does not care
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


def test_gemm_rules_no_path_runs_name_the_tensor(fake):
    """What no path can run stays an error naming the tensor: rows that overlap (lda < K)."""
    a = cuda(M * K).as_strided((M, K), (64, 1))
    _raises("problem.ld", r"gemm\(a \(256, 128\) strides \(64, 1\).*A \(bf16, layout 'tt'.*lda=64 is smaller than "
            r"the contiguous extent K=128", at.gemm, a, cuda(K, N))


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


def test_an_argument_of_the_wrong_python_type_is_named_before_torchs_schema_check(fake):
    """Review (adversarial user): ``gemm(a, b, out_dtype="bf16")`` was torch's "Expected a value of type
    'Optional[int]' for argument 'out_dtype'"; a float bias, a list ``x`` or ``cu_seqlens_q`` the same kind of
    schema error. Each is now the op's own error naming the argument."""
    a, b = cuda(M, K), cuda(K, N)
    _raises("problem.dtype", r"out_dtype 'bf16' is a str, not a torch.dtype", at.gemm, a, b, out_dtype="bf16")
    _raises("problem.tensor", r"bias must be a torch tensor, got float", at.gemm, a, b, bias=1.0)
    _raises("problem.tensor", r"out must be a torch tensor, got list", at.gemm, a, b, out=[0])
    q = cuda(300, 8, 128)
    _raises("problem.tensor", r"v must be a torch tensor, got str", at.attention, q, q, "v")
    _raises("problem.tensor", r"cu_seqlens_q must be a torch tensor, got list", at.attention, q, q, q,
            cu_seqlens_q=[0, 300], cu_seqlens_k=[0, 300])
    x, ids, w, w13, w2 = _moe_inputs()
    _raises("moe.input", r"x must be a torch tensor, got list", at.moe, [[0.0]], ids, w, w13, w2)
    _raises("moe.input", r"w2 must be a torch tensor, got NoneType", at.moe, x, ids, w, w13, None)


def test_precompile_refuses_bad_problems():
    _raises("problem.size", r"M=0", at.precompile, GemmProblem(0, 16, 16))
    with pytest.raises(TypeError, match="precompile takes GemmProblem"):
        at.precompile("gemm 16x16x16")


def test_attention_tma_stride_rule_names_the_tensor(fake):
    """A head-dim slice of a wider buffer (row pitch 132 bf16 = 264 bytes) breaks TMA's stride rule at trace time."""
    k = cuda(2, 256, 2, 128)
    _raises("tma.stride_alignment", r"q", at.attention, cuda(2, 128, 8, 132)[..., :128], k, k)


def test_moe_tma_extent_rule_through_the_op(fake):
    """H = 1020 bf16 (2040 bytes) is not a multiple of 16 bytes: refused by the fake implementation (trace time)."""
    x, ids, w, _w13, _w2 = _moe_inputs()
    _raises("tma.contiguous_extent", r"1020", at.moe, cuda(64, 1020), ids, w, cuda(8, 1024, 1020), cuda(8, 1020, 512))


def _no_device_rule(monkeypatch):
    """Let CPU tensors through ``_check_tensor``'s device rule, so the address rule can be shown without a GPU."""
    def check(t, name, rank, device=None):
        assert isinstance(t, torch.Tensor) and t.dim() == rank

    monkeypatch.setattr(at, "_check_tensor", check)


# ---- dispatch: GEMM per shape, attention per shape bucket ---------------------------------------------


def test_gemm_dispatch_configures_once_per_shape(monkeypatch):
    """Every GEMM shape gets the configuration ``configure`` (store, shipped tuned table, the untuned rule)
    gives that shape -- what ``argus-cutlass gemm`` runs for it -- looked up once per process; another
    shape of the same power-of-two bucket is looked up for itself (the shipped table holds entries measured
    at several shapes of a bucket, and the lookup takes the one measured nearest). Kernels are per
    configuration: shapes with the same configuration share one."""
    import argus_cutlass.generate as gen

    calls = []
    real = gen.configure

    def counting(problem, **kw):
        calls.append((problem.m, problem.n, problem.k))
        return real(problem, **kw)

    monkeypatch.setattr(gen, "configure", counting)
    monkeypatch.setattr(api, "_GEMM_CONFIGS", {})
    monkeypatch.setenv("ARGUS_CACHE_DIR", "/nonexistent/argus-empty-store")  # only the shipped table
    small, big = GemmProblem(3000, 4096, 4096), GemmProblem(4096, 4096, 4096)
    cfg = api.gemm_config(small)
    assert api.gemm_config(small) is cfg and calls == [(3000, 4096, 4096)]
    assert cfg == real(small)[0] and real(small)[1] == "shipped"
    big_cfg = api.gemm_config(big)
    assert calls == [(3000, 4096, 4096), (4096, 4096, 4096)] and big_cfg == real(big)[0]
    # the leading dimensions and pointers of a call do not change its configuration, only its kernel's staging
    assert api.gemm_config(GemmProblem(3000, 4096, 4096, ldd=4104)) is cfg and len(calls) == 2
    # 4000 x 4096 x 4096: the bucket's entry measured nearest is 4096^3's; the same configuration, the same
    # loaded-kernel key
    same = GemmProblem(4000, 4096, 4096)
    assert api.gemm_config(same) == big_cfg and len(calls) == 3
    assert api._gemm_key(api.gemm_config(same), api._gemm_build_problem(same)) == \
        api._gemm_key(big_cfg, api._gemm_build_problem(big))


def test_attention_dispatch_configures_once_per_bucket(monkeypatch):
    from argus_cutlass.kernels.attention.problem import AttentionProblem
    import argus_cutlass.generate as gen

    calls = []
    real = gen.configure

    def counting(problem, **kw):
        calls.append(problem.seqlen_k)
        return real(problem, **kw)

    monkeypatch.setattr(gen, "configure", counting)
    monkeypatch.setattr(api, "_ATTENTION_CONFIGS", {})
    monkeypatch.setenv("ARGUS_CACHE_DIR", "/nonexistent/argus-empty-store")
    p1, p2 = (AttentionProblem(2, 16, 16, s, s, 128, causal=True).validate() for s in (2000, 1100))
    cfg = api._configured(p1)
    assert api._configured(p2) is cfg and calls == [2000]
    assert real(p1)[1] == "shipped" and real(p1)[0] == cfg
    api._configured(AttentionProblem(2, 16, 16, 8000, 8000, 128, causal=True).validate())
    assert calls == [2000, 8000]


def test_capture_uses_the_kernel_precompiled_for_the_shape(fake, capturing, monkeypatch):
    """precompile(a shape) serves that shape inside a capture (no build, no error); a shape whose
    configuration was not built (here another layout) raises NotPrecompiledError."""
    built = []

    class StubLib:
        def run(self, problem, *args, **kw):
            built.append(problem)

    monkeypatch.setattr("argus_cutlass.generate.build_jobs", lambda jobs, **kw: _stub_build(jobs, StubLib))
    assert at.precompile(GemmProblem(200, 400, 128, "bf16", "bf16", "tt")) == 1
    _refuses_to_build(monkeypatch)
    monkeypatch.setattr(at, "_stream", lambda t: 0)
    monkeypatch.setattr(torch.cuda, "device", lambda d: _Null())
    at._gemm_into(cuda(200, 128), cuda(128, 400), None, cuda(200, 400))
    assert [(p.m, p.n, p.k) for p in built] == [(200, 400, 128)]
    with pytest.raises(NotPrecompiledError):  # layout tn (a K-major B), whose kernel was not built
        at._gemm_into(cuda(200, 128), cuda(400, 128).t(), None, cuda(200, 400))


# ---- the aligned staging path -----------------------------------------------------------------------
# Issue 13 item 5 / issue 12: a call that breaks only TMA's 16-byte rules runs a staged kernel (with a
# warning naming the tensor and the rule) instead of being refused; what no path runs stays an error.


def _buf(rows, cols, off=0, dtype=BF16):
    """A rows x cols CPU tensor with memory, ``off`` elements into its storage (off 1: a 2-byte misaligned base)."""
    return torch.empty(rows * cols + 8, dtype=dtype)[off:off + rows * cols].view(rows, cols)


#: (label, tensors (a, b, out or None) on FakeTensors of device cuda, layout, staged operands, a reason)
STAGED_CALLS = {
    "m300_colmajor_a": (lambda: (cuda(K, 300).t(), cuda(K, N), None), "nt", ("A",),
                        "lda=300: 600 bytes, not a multiple of 16"),
    "n33_out": (lambda: (cuda(M, K), cuda(33, K).t(), None), "tn", ("D",), "ldd=33: 66 bytes, not a multiple of 16"),
    "n33_padded_out_view": (lambda: (cuda(M, K), cuda(33, K).t(), cuda(M, 40)[:, :33]), "tn", ("D",),
                            "N=33: 66 bytes, not a multiple of 16"),
    "k100_rowmajor_a": (lambda: (cuda(M, 100), cuda(100, N), None), "tt", ("A",),
                        "lda=100: 200 bytes, not a multiple of 16"),
    "lda130_view": (lambda: (cuda(M, 130)[:, :K], cuda(K, N), None), "tt", ("A",),
                    "lda=130: 260 bytes, not a multiple of 16"),
}


@pytest.mark.parametrize("label", sorted(STAGED_CALLS))
def test_gemm_tma_rules_become_a_staged_kernel(fake, label):
    """The op traces (the fake implementation does not care about alignment), the problem names the
    staged operands and why, its build problem is itself (the program gets those StageCopy nodes: a
    ``_stg`` kernel name) and its kernel key carries the staging plan."""
    from argus_cutlass.generate import build

    make, layout, staged, reason = STAGED_CALLS[label]
    a, b, out = make()
    y = at.gemm(a, b, out=out)
    assert tuple(y.shape) == (a.shape[0], b.shape[1]) and (out is None or y is out)
    p = at.gemm_problem(a, b, out=out)
    assert p.layout == layout and p.unaligned == ()  # no pointer to read while tracing
    assert tuple(s.name for s in p.staging()) == staged and reason in p.staging()[0].reasons
    bp = api._gemm_build_problem(p)
    assert bp is p
    cfg, kbits, key_staged = api.gemm_kernel_key(p)
    assert (kbits, key_staged) == (None, staged)
    assert f"_stg{''.join(staged)}_" in build(cfg, bp).kernel_name()


def test_aligned_and_staged_calls_of_one_bucket_get_their_own_kernels():
    """One configuration per shape, one kernel per (configuration, proof range, staging plan): an aligned
    call keeps the direct kernel (build problem None), an A-staged and a D-staged call of the same shape do
    not share a cache entry, and two A-staged calls of different sizes do when their configurations agree."""
    aligned = GemmProblem(512, 256, 512, layout="nt")
    a_staged = GemmProblem(300, 256, 512, layout="nt")                    # lda = 300: 600 bytes
    a_ptr = GemmProblem(512, 256, 512, layout="nt", unaligned=("A",))     # a misaligned base pointer
    d_staged = GemmProblem(512, 256, 512, layout="nt", ldd=260)
    assert len({api.gemm_shape_key(p) for p in (aligned, a_ptr, d_staged)}) == 1
    assert api._gemm_build_problem(aligned) is None
    keys = {p: api.gemm_kernel_key(p) for p in (aligned, a_staged, a_ptr, d_staged)}
    assert [k[2] for k in keys.values()] == [(), ("A",), ("A",), ("D",)]
    assert (keys[a_staged] == keys[a_ptr]) == (api.gemm_config(a_staged) == api.gemm_config(a_ptr))
    assert len({keys[aligned], keys[a_ptr], keys[d_staged]}) == 3


def test_gemm_problem_reads_misaligned_pointers(monkeypatch):
    """On tensors with memory, ``unaligned`` names the operands whose first element is not 16-byte
    aligned (a view starting 2 bytes into its storage), and validation accepts the problem."""
    _no_device_rule(monkeypatch)
    for which in ("A", "B", "D"):
        a, b, out = _buf(M, K, which == "A"), _buf(K, N, which == "B"), _buf(M, N, which == "D")
        p = at.gemm_problem(a, b, out=out)
        assert p.unaligned == (which,) and [s.name for s in p.staging()] == [which]
        assert "pointer %s not 16-byte aligned" % which in p.staging()[0].reasons


@pytest.fixture
def stub_kernels(capturing, monkeypatch):
    """precompile builds stub libraries that record (kernel name, problem, beta) per run; no stream or
    device context is touched; the staging warnings start afresh; CPU tensors pass the device rule."""
    runs = []

    class StubLib:
        def __init__(self, name):
            self.name = name

        def run(self, problem, A, B, C, D, alpha=1.0, beta=0.0, stream=None):
            runs.append((self.name, problem, beta))

    def stub_build(jobs, **kw):
        from argus_cutlass.generate import build

        return {build(c, p).kernel_name(): StubLib(build(c, p).kernel_name()) for c, p in jobs}

    monkeypatch.setattr("argus_cutlass.generate.build_jobs", stub_build)
    monkeypatch.setattr(at, "_stream", lambda t: 0)
    monkeypatch.setattr(torch.cuda, "device", lambda d: _Null())
    monkeypatch.setattr(at, "_STAGED_WARNED", set())
    _no_device_rule(monkeypatch)
    return runs


def test_precompile_builds_the_staged_kernel_a_capture_finds(stub_kernels, monkeypatch):
    """A misaligned ``a`` (2 bytes into its storage): precompile of gemm_problem on the real tensors
    builds the A-staged kernel; inside the (simulated) capture the call runs it, warning once per kernel
    with the tensor, the address and the rule; an aligned call of the same shape needs its own direct
    kernel (not built here: NotPrecompiledError), it never gets the staged one."""
    a, b, out = _buf(M, K, 1), _buf(K, N), _buf(M, N)
    p = at.gemm_problem(a, b, out=out)
    assert at.precompile(p) == 1 and at.precompile(p) == 0
    _refuses_to_build(monkeypatch)
    with pytest.warns(UserWarning) as rec:
        at._gemm_into(a, b, None, out)
    msgs = [str(w.message) for w in rec if "aligned copy" in str(w.message)]
    assert len(msgs) == 1, msgs
    assert msgs[0].startswith(f"a: starts at 0x{a.data_ptr():x}, not 16-byte aligned (a view at element offset 1) "
                              "(tma.address_alignment); argus_cutlass.torch.gemm stages A through an aligned copy "
                              "(slower"), msgs[0]
    assert f"{M * K * 2} bytes for this call" in msgs[0]
    name, problem, _ = stub_kernels[-1]
    assert "_stgA_" in name and problem.unaligned == ("A",)
    import warnings

    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        at._gemm_into(_buf(M - 8, K, 1), b, None, _buf(M - 8, N))  # same kernel, another shape: no new warning
    assert not [w for w in again if "aligned copy" in str(w.message)]
    assert stub_kernels[-1][0] == name
    with pytest.raises(NotPrecompiledError):
        at._gemm_into(_buf(M, K), b, None, out)


def test_staging_warning_names_the_stride_rule(stub_kernels):
    """A column-major ``a`` with M = 300 (lda = 600 bytes) and a 33-column ``out`` inside a wider buffer."""
    a, b, out = _buf(K, 300).t(), _buf(33, K).t(), _buf(300, 40)[:, :33]  # b K-major: ldb = K, aligned
    at.precompile(at.gemm_problem(a, b, out=out))
    with pytest.warns(UserWarning, match=r"^a: lda=300: 600 bytes, not a multiple of 16 \(tma.stride_alignment\); "
                      r"out: N=33: 66 bytes, not a multiple of 16 \(tma.contiguous_extent\); argus_cutlass.torch.gemm "
                      r"stages A and D through an aligned copy \(slower"):
        at._gemm_into(a, b, None, out)
    assert "_stgAD_" in stub_kernels[-1][0]


def test_bias_is_c_at_any_pitch(stub_kernels):
    """A full (M, N) bias of D's dtype is the epilogue's C whatever its row pitch (C is read element by
    element, never through TMA); an expanded bias (row stride 0) is written into D first."""
    a, b, out = _buf(M, K), _buf(K, N), _buf(M, N)
    at.precompile(at.gemm_problem(a, b, out=out))
    bias = _buf(M, N + 3)[:, :N]  # ldc = 515: 1030 bytes
    assert at._direct_c(bias, out) and at._direct_c(_buf(M, N, 1), out)
    at._gemm_into(a, b, bias, out)
    name, problem, beta = stub_kernels[-1]
    assert (problem.ldc, beta, problem.staging()) == (N + 3, 1.0, ()) and "_stg" not in name
    expanded = torch.zeros(N, dtype=BF16).expand(M, N)
    assert not at._direct_c(expanded, out) and not at._direct_c(bias.float(), out)
    at._gemm_into(a, b, expanded, out)
    assert stub_kernels[-1][1].ldc == N and stub_kernels[-1][2] == 1.0


def test_precompile_of_a_staged_gemm_problem(stub_kernels):
    """``precompile(GemmProblem)`` of a problem the direct path refuses builds its staged kernel."""
    p = GemmProblem(300, 4096, 4096, layout="nt")
    assert at.precompile(p) == 1
    assert api.gemm_kernel_key(p) in api._GEMM_LIBS and "_stgA_" in api._GEMM_LIBS[api.gemm_kernel_key(p)].name


def test_torch_module_doctests():
    """argus_cutlass.torch's docstring examples (not in test_doctests: it needs torch)."""
    import doctest

    result = doctest.testmod(at, optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    assert result.attempted >= 1 and result.failed == 0
