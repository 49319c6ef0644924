"""CPU-side runtime: dtype bits, result comparison, pointer/stream handling, CUDA error
mapping, the reference kernel's rendering, and loading a built library through the GEMM's C ABI
(no GPU needed: the entries refuse bad arguments before any CUDA call)."""

from __future__ import annotations

import numpy as np
import pytest

from argus_cutlass.errors import DeviceError, LaunchError, ProblemError
from argus_cutlass.kernels.gemm import check
from argus_cutlass.kernels.gemm.library import GemmKernelLibrary
from argus_cutlass.kernels.gemm.problem import ERROR_CODES, GemmProblem
from argus_cutlass.kernels.gemm.reference import reference_name, render_reference
from argus_cutlass.runtime import cuda
from argus_cutlass.runtime.launch import device_pointer

# ---- dtype bits --------------------------------------------------------------------------


def test_bf16_round_to_nearest_even():
    x = np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, -0.0, np.inf], np.float32)
    bits = check.float32_to_bits(x, "bf16")
    # ties go to the even mantissa; above the tie rounds up
    assert bits.tolist() == [0x3F80, 0x3F80, 0x3F82, 0x3F81, 0x8000, 0x7F80]
    assert check.float32_to_bits(np.array([np.nan], np.float32), "bf16")[0] == 0x7FC0


def test_bf16_roundtrip_error_bound():
    x = np.random.default_rng(0).standard_normal(10000).astype(np.float32)
    y = check.bits_to_float32(check.float32_to_bits(x, "bf16"), "bf16")
    assert np.max(np.abs(y - x) / np.abs(x)) <= 2**-8
    z = check.bits_to_float32(check.float32_to_bits(y, "bf16"), "bf16")
    assert np.array_equal(y, z)  # bf16 values are exact


def test_fp16_and_fp32_bits():
    x = np.array([1.5, -2.25], np.float32)
    assert np.array_equal(check.bits_to_float32(check.float32_to_bits(x, "fp16"), "fp16"), x)
    assert np.array_equal(check.bits_to_float32(check.float32_to_bits(x, "fp32"), "fp32"), x)
    with pytest.raises(ProblemError):
        check.float32_to_bits(x, "fp8")


def test_random_operand_poisons_padding():
    op = GemmProblem(16, 16, 8, lda=16).operands()["A"]
    bits, vals = check.random_operand(op, np.random.default_rng(1))
    assert bits.shape == (16, 16) and bits.dtype == np.uint16
    assert np.all(np.isfinite(vals[:, :8])) and np.all(np.isnan(vals[:, 8:]))


@pytest.mark.parametrize("layout", ["tn", "nt", "nn", "tt"])
def test_numpy_reference_layouts(layout):
    p = GemmProblem(8, 16, 24, "bf16", "fp32", layout)
    ops = p.operands()
    rng = np.random.default_rng(2)
    A = rng.standard_normal((8, 24)).astype(np.float32)
    B = rng.standard_normal((24, 16)).astype(np.float32)
    a = A if layout[0] == "t" else A.T.copy()
    b = B.T.copy() if layout[1] == "n" else B
    assert a.shape == ops["A"].storage_shape and b.shape == ops["B"].storage_shape
    C = rng.standard_normal((8, 16)).astype(np.float32)
    out = check.numpy_reference(p, a, b, C, 0.5, 2.0)
    np.testing.assert_allclose(out, 0.5 * A @ B + 2.0 * C, rtol=1e-5, atol=1e-5)


# ---- comparison --------------------------------------------------------------------------


def _d_bits(p: GemmProblem, ref: np.ndarray) -> np.ndarray:
    d = np.full(p.operands()["D"].storage_shape, 0xFFFF, np.uint16)
    d[:, : p.n] = check.float32_to_bits(ref, p.out_dtype)
    return d


def test_compare_pass():
    p = GemmProblem(16, 24, 8, ldd=32)
    ref = np.random.default_rng(3).standard_normal((16, 24)).astype(np.float32)
    r = check.compare(p, _d_bits(p, ref), ref)
    assert r["passed"] and r["unwritten"] == 0 and r["out_of_bounds_writes"] == 0
    assert 0 < r["rel_error"] < 4e-3 and r["tolerance"] == 1e-2 and r["element_errors"] == 0


def test_compare_detects_unwritten_and_oob():
    p = GemmProblem(16, 24, 8, ldd=32)
    ref = np.ones((16, 24), np.float32)
    d = _d_bits(p, ref)
    d[5, 7] = 0xFFFF  # never written: still poison
    d[2, 30] = 0  # write into padding
    r = check.compare(p, d, ref)
    assert not r["passed"]
    assert r["unwritten"] == 1 and r["nan_count"] == 1 and r["out_of_bounds_writes"] == 1
    assert r["rel_error"] == float("inf")


def test_compare_detects_wrong_values():
    p = GemmProblem(16, 24, 8, out_dtype="fp32")
    ref = np.random.default_rng(4).standard_normal((16, 24)).astype(np.float32)
    d = check.float32_to_bits(ref * 1.01, "fp32")
    r = check.compare(p, d, ref)
    assert not r["passed"] and 9e-3 < r["rel_error"] < 1.1e-2 and r["tolerance"] == 1e-4


def test_compare_detects_one_wrong_element_the_norm_hides():
    p = GemmProblem(64, 64, 8)
    ref = np.random.default_rng(5).standard_normal((64, 64)).astype(np.float32)
    wrong = ref.copy()
    wrong[3, 5] += 0.5  # one register stored wrong: far under the norm bound, far over the element bound
    r = check.compare(p, _d_bits(p, wrong), ref)
    assert r["rel_error"] < r["tolerance"] and r["element_errors"] == 1 and not r["passed"]


def test_check_result_summary_and_dict():
    p = GemmProblem(16, 24, 8)
    ref = np.ones((16, 24), np.float32)
    res = check.CheckResult(problem=p, alpha=1.0, beta=0.0, seed=3, **check.compare(p, _d_bits(p, ref), ref))
    assert res.summary().startswith("PASS 16x24x8 bf16->bf16 tn")
    d = res.as_dict()
    assert d["passed"] and d["problem"]["layout"] == "tn" and d["unwritten"] == 0


def test_runtime_keeps_only_generic_glue():
    """GEMM specifics live in kernels/gemm; runtime/ imports no family (layers point down)."""
    import ast
    import importlib.util
    from pathlib import Path

    runtime_dir = Path(importlib.util.find_spec("argus_cutlass.runtime").origin).parent
    for name in ("__init__.py", "cuda.py", "launch.py", "check.py"):
        tree = ast.parse((runtime_dir / name).read_text())
        mods = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not [m for m in mods if m.startswith(("argus_cutlass.kernels", "argus_cutlass.generate"))], name
    assert check.float32_to_bits is __import__("argus_cutlass.runtime.check", fromlist=["x"]).float32_to_bits


def test_time_kernel_needs_iterations():
    with pytest.raises(DeviceError) as info:
        check.time_kernel(lambda: None, warmup=0, iters=0)
    assert info.value.rule == "device.timing"


# ---- pointers and streams ----------------------------------------------------------------


class _FakeTensor:
    def __init__(self, ptr, is_cuda=True):
        self._ptr, self.is_cuda, self.device = ptr, is_cuda, "cuda:0" if is_cuda else "cpu"

    def data_ptr(self):
        return self._ptr


class _FakeBuffer:
    ptr = 0x2000


def test_device_pointer_kinds():
    assert device_pointer(None) == 0
    assert device_pointer(0x1000) == 0x1000
    assert device_pointer(_FakeBuffer()) == 0x2000
    assert device_pointer(_FakeTensor(0x3000)) == 0x3000

    class Cai:
        __cuda_array_interface__ = {"data": (0x4000, False), "shape": (1,)}

    assert device_pointer(Cai()) == 0x4000


def test_device_pointer_refusals():
    with pytest.raises(LaunchError) as info:
        device_pointer(_FakeTensor(0x3000, is_cuda=False), "A")
    assert info.value.rule == "launch.pointer" and "A is a tensor on cpu" in str(info.value)
    with pytest.raises(LaunchError) as info:
        device_pointer("0x1000", "B")
    assert "B: cannot take a device pointer from str" in str(info.value)


def test_stream_handle_kinds():
    class TorchStream:
        cuda_stream = 1234

    assert cuda.stream_handle(None) == 0
    assert cuda.stream_handle(77) == 77
    assert cuda.stream_handle(TorchStream()) == 1234
    with pytest.raises(DeviceError) as info:
        cuda.stream_handle(object())
    assert info.value.rule == "device.stream"


# ---- CUDA error mapping ------------------------------------------------------------------


def test_check_names_call_and_cuda_error():
    rt = cuda.cudart()
    assert cuda.check("cudaFoo", (rt.cudaError_t.cudaSuccess, 5)) == 5
    assert cuda.check("cudaFoo", (rt.cudaError_t.cudaSuccess,)) is None
    with pytest.raises(DeviceError) as info:
        cuda.check("cudaMalloc(64)", (rt.cudaError_t.cudaErrorMemoryAllocation, None))
    assert info.value.rule == "device.cuda_call"
    assert "cudaMalloc(64) failed: cudaErrorMemoryAllocation: out of memory" in str(info.value)


def test_gpu_available_never_raises():
    status = cuda.gpu_available()
    ok, why = status
    assert bool(status) is ok
    assert ok or why  # a reason whenever there is no GPU


def test_non_hopper_gpu_refused(monkeypatch):
    fake = cuda.DeviceInfo(0, "NVIDIA A100-SXM4-80GB", (8, 0), 108, 80 << 30, 166912)
    monkeypatch.setattr(cuda, "device_info", lambda device=None: fake)
    with pytest.raises(DeviceError) as info:
        cuda.require_sm90()
    text = str(info.value)
    assert info.value.rule == "device.arch"
    assert "NVIDIA A100-SXM4-80GB (sm_80)" in text and "H100 or H200" in text


def test_device_buffer_size_rule():
    with pytest.raises(DeviceError) as info:
        cuda.DeviceBuffer(0)
    assert info.value.rule == "device.alloc"


# ---- reference kernel --------------------------------------------------------------------


@pytest.mark.parametrize(
    "layout, a_index, b_index",
    [("tn", "A[m * lda + k]", "B[n * ldb + k]"), ("nt", "A[k * lda + m]", "B[k * ldb + n]"),
     ("nn", "A[k * lda + m]", "B[n * ldb + k]"), ("tt", "A[m * lda + k]", "B[k * ldb + n]")],
)
def test_reference_render_layouts(layout, a_index, b_index):
    name, src = render_reference("fp16", "fp32", layout)
    assert name == f"argus_reference_gemm_fp16_fp32_{layout}"
    assert a_index in src and b_index in src
    assert "using ElementAB = __half;" in src and "using ElementC = float;" in src
    assert f'int {name}(const void* A, const void* B, const void* C, void* D' in src
    assert f"{name}_error_string" in src and f"{name}_smem_bytes" in src


def test_reference_name_refuses_unknown():
    with pytest.raises(ProblemError) as info:
        reference_name("bf16", "bf16", "xx")
    assert info.value.rule == "problem.layout"


@pytest.mark.nvcc
def test_load_reference_library(tmp_path, monkeypatch):
    from argus_cutlass.build.nvcc import compile_cu

    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))
    name, src = render_reference("bf16", "bf16", "tn")
    art = compile_cu(src, name, "shared")
    lib = GemmKernelLibrary(art.path, name)
    assert lib.smem_bytes() == 0 and lib.threads() == 256 and lib.grid(8, 8) is None  # no <name>_grid
    assert lib.error_string(2) == "C is null but beta != 0" == ERROR_CODES[2][1]
    with pytest.raises(LaunchError) as info:  # refused before any CUDA call: no GPU needed
        lib(0x1000, 0x2000, None, 0x3000, 8, 8, 8, 8, 8, 8, 8, 1.0, 1.0)
    assert info.value.rule == "problem.pointer"  # the ABI's code 2
    assert "returned 2: C is null but beta != 0" in str(info.value)
    with pytest.raises(LaunchError) as info:
        GemmKernelLibrary(art.path, "no_such_kernel")
    assert info.value.rule == "launch.symbol" and "'no_such_kernel'" in str(info.value)


def test_load_missing_library(tmp_path):
    with pytest.raises(LaunchError) as info:
        GemmKernelLibrary(tmp_path / "missing.so", "k")
    assert info.value.rule == "launch.load" and "missing.so" in str(info.value)


def test_run_validates_problem_and_pointers():
    class Lib(GemmKernelLibrary):
        def __init__(self, k_bound_bits=None):
            self.calls = []
            self.k_bound_bits = k_bound_bits

        def __call__(self, *args):
            self.calls.append(args)

    lib = Lib()
    p = GemmProblem(64, 64, 64)
    lib.run(p, 0x1000, 0x2000, None, 0x3000)
    assert lib.calls[0][:7] == (0x1000, 0x2000, None, 0x3000, 64, 64, 64)
    with pytest.raises(ProblemError) as info:
        lib.run(p, 0x1008, 0x2000, None, 0x3000)
    assert info.value.rule == "tma.address_alignment" and "A=0x1008" in str(info.value)
    with pytest.raises(ProblemError) as info:
        lib.run(GemmProblem(7, 64, 64, layout="nt"), 0x1000, 0x2000, None, 0x3000)
    assert info.value.rule == "tma.contiguous_extent"
    with pytest.raises(ProblemError) as info:
        lib.run(p, 0x1000, 0x2000, None, 0x3000, beta=1.0)
    assert info.value.rule == "problem.pointer" and "C is a null pointer" in str(info.value)
    with pytest.raises(ProblemError) as info:  # K outside the range the kernel's proofs hold for
        Lib(k_bound_bits=24).run(GemmProblem(64, 64, 2**24), 0x1000, 0x2000, None, 0x3000)
    assert info.value.rule == "problem.k_range" and "K=16777216 >= 2^24" in str(info.value)
    Lib(k_bound_bits=25).run(GemmProblem(64, 64, 2**24), 0x1000, 0x2000, None, 0x3000)


def test_return_codes_map_to_their_rules():
    from argus_cutlass.kernels.gemm.library import _code_rule

    assert _code_rule(3)[0] == "problem.k_range" and "generate it for this problem" in _code_rule(3)[1]
    assert [_code_rule(c)[0] for c in (1, 2, 4, 5, 6, 7)] == [
        "problem.size", "problem.pointer", "tma.address_alignment", "tma.stride_alignment", "launch.tensor_map",
        "launch.attribute"]
    assert _code_rule(1002)[0] == "launch.cuda" and _code_rule(99)[0] == "launch.failed"


def test_graph_timing_refuses_bad_arguments_before_touching_the_gpu():
    """runtime.check.time_graph / runtime.cuda.Graph (session 27): no calls or iterations, or the legacy default
    stream (it cannot be captured), are refused by rule, naming the value, before any CUDA call."""
    from argus_cutlass.runtime.check import time_graph
    from argus_cutlass.runtime.cuda import Graph

    for calls, iters in ((0, 5), (4, 0)):
        with pytest.raises(DeviceError) as exc:
            time_graph(lambda: None, 7, calls=calls, iters=iters)
        assert exc.value.rule == "device.timing" and f"calls={calls}, iters={iters}" in str(exc.value)
    with pytest.raises(DeviceError) as exc:
        Graph(lambda: None, 0)
    assert exc.value.rule == "device.stream" and "default stream" in str(exc.value)


def test_gemm_timing_names_an_unknown_mode():
    from argus_cutlass.kernels.gemm.baseline import cublas_time
    from argus_cutlass.kernels.gemm.check import operand_sets, time_gemm
    from argus_cutlass.kernels.gemm.problem import GemmProblem

    for fn in (lambda: time_gemm(None, GemmProblem(8, 64, 64), timing="events"),
               lambda: cublas_time(GemmProblem(8, 64, 64), timing="events")):
        with pytest.raises(ProblemError) as exc:
            fn()
        assert exc.value.rule == "problem.timing" and "'events'" in str(exc.value)
    # rotation: enough sets for 3x the L2, one for a problem larger than that, at most 48
    assert operand_sets(GemmProblem(1, 4096, 14336)) == 2 and operand_sets(GemmProblem(8192, 8192, 8192)) == 1
    assert operand_sets(GemmProblem(8, 64, 64)) == 48 and operand_sets(GemmProblem(8, 64, 64), beta=1.0) == 48


def test_graph_capture_order_and_a_failing_record_end_the_capture(monkeypatch):
    """runtime.cuda.Graph against a recording fake of the CUDA runtime: begin capture (thread-local) -> the work ->
    end -> instantiate -> the graph destroyed (the exec kept) -> launch -> exec destroyed; an exception in the work
    still ends the capture, drops the partial graph and reaches the caller; the collector is back on after."""
    import gc
    import types

    calls = []

    class Err(int):
        pass

    ok = Err(0)
    fake = types.SimpleNamespace(
        cudaStreamCaptureMode=types.SimpleNamespace(cudaStreamCaptureModeThreadLocal="TL"),
        cudaStreamBeginCapture=lambda h, mode: calls.append(("begin", h, mode)) or (ok,),
        cudaStreamEndCapture=lambda h: calls.append(("end", h)) or (ok, "graph"),
        cudaGraphInstantiate=lambda g, flags: calls.append(("instantiate", g, flags)) or (ok, "exec"),
        cudaGraphDestroy=lambda g: calls.append(("destroy", g)) or (ok,),
        cudaGraphLaunch=lambda e, h: calls.append(("launch", e, h)) or (ok,),
        cudaGraphExecDestroy=lambda e: calls.append(("exec_destroy", e)) or (ok,))
    monkeypatch.setattr(cuda, "_CUDART", fake)
    g = cuda.Graph(lambda: calls.append(("work",)), 7)
    g.launch(7)
    g.destroy()
    assert calls == [("begin", 7, "TL"), ("work",), ("end", 7), ("instantiate", "graph", 0), ("destroy", "graph"),
                     ("launch", "exec", 7), ("exec_destroy", "exec")]
    calls.clear()

    def broken() -> None:
        raise KeyError("inside the capture")

    with pytest.raises(KeyError):
        cuda.Graph(broken, 7)
    assert calls == [("begin", 7, "TL"), ("end", 7), ("destroy", "graph")] and gc.isenabled()
    # a capture the work invalidated (e.g. a synchronous allocation) fails at its end: device.graph, so that a
    # caller can tell it from a failing launch and time the work another way
    fake.cudaError_t = Err
    fake.cudaStreamEndCapture = lambda h: (Err(901), None)
    with pytest.raises(DeviceError) as info:
        cuda.Graph(lambda: None, 7)
    assert info.value.rule == "device.graph" and "cudaStreamEndCapture failed" in str(info.value)
