"""Runtime on a real GPU: buffers, events, the fp32 reference kernel against numpy, and the
NaN poisoning that catches unwritten outputs. Run: ``pytest -q -m gpu tests/gpu``."""

from __future__ import annotations

import numpy as np
import pytest

from argus_cutlass.kernels.gemm import check
from argus_cutlass.kernels.gemm.problem import GemmProblem
from argus_cutlass.kernels.gemm.reference import reference_library
from argus_cutlass.runtime.cuda import DeviceBuffer, Event, Stream, device_info, synchronize

pytestmark = pytest.mark.gpu


def test_device_info_and_buffers(gpu_device):
    info = device_info()
    assert info.capability == (9, 0) and info.sm_count > 0 and info.name
    host = np.arange(1000, dtype=np.float32)
    with DeviceBuffer.from_numpy(host) as buf:
        assert buf.ptr % 256 == 0
        np.testing.assert_array_equal(buf.to_numpy(np.float32), host)
        buf.fill(0xFF)
        assert np.all(buf.to_numpy(np.uint8) == 0xFF)
        assert np.all(np.isnan(buf.to_numpy(np.float32)))


def test_events_time_something(gpu_device):
    buf = DeviceBuffer(64 << 20)
    stream = Stream()
    ms = check.time_kernel(lambda: buf.fill(1), warmup=2, iters=5, stream=None)
    assert ms >= 0.0
    start, end = Event(), Event()
    start.record(stream)
    end.record(stream)
    assert start.elapsed_ms(end) >= 0.0
    stream.destroy()
    buf.free()


def _reference_vs_numpy(problem: GemmProblem, alpha: float, beta: float, seed: int) -> float:
    ops = problem.operands()
    rng = np.random.default_rng(seed)
    a_bits, a = check.random_operand(ops["A"], rng)
    b_bits, b = check.random_operand(ops["B"], rng)
    c_bits, c = check.random_operand(ops["C"], rng)
    lib = reference_library(problem.dtype, problem.out_dtype, problem.layout)
    bufs = [DeviceBuffer.from_numpy(x) for x in (a_bits, b_bits, c_bits)]
    out = DeviceBuffer(problem.m * problem.ldd * 4)
    out.fill(0xFF)
    lib(*bufs, out, problem.m, problem.n, problem.k, problem.lda, problem.ldb, problem.ldc,
        problem.ldd, alpha, beta)
    synchronize()
    got = out.to_numpy(np.float32, (problem.m, problem.ldd))
    want = check.numpy_reference(problem, a, b, c if beta else None, alpha, beta)
    assert np.all(np.isnan(got[:, problem.n:])), "reference wrote into D's padding"
    for x in (*bufs, out):
        x.free()
    return float(np.linalg.norm(got[:, : problem.n] - want) / np.linalg.norm(want))


@pytest.mark.parametrize("layout", ["tn", "nt", "nn", "tt"])
@pytest.mark.parametrize("dtype, out_dtype", [("bf16", "bf16"), ("fp16", "fp32")])
def test_reference_kernel_matches_numpy(gpu_device, layout, dtype, out_dtype):
    # odd sizes and padded leading dimensions: the reference has no alignment rules
    p = GemmProblem(37, 45, 70, dtype, out_dtype, layout,
                    lda=(70 if layout[0] == "t" else 37) + 3, ldb=(70 if layout[1] == "n" else 45) + 5,
                    ldc=48, ldd=50)
    assert _reference_vs_numpy(p, alpha=0.75, beta=0.5, seed=1) < 1e-5
    assert _reference_vs_numpy(p, alpha=1.0, beta=0.0, seed=2) < 1e-5


class _ReferenceAsKernel:
    """The reference GEMM posing as a kernel under test (fp32 output), optionally
    writing only the first ``rows`` rows of D."""

    def __init__(self, problem: GemmProblem, rows: int | None = None):
        self.lib = reference_library(problem.dtype, problem.out_dtype, problem.layout)
        self.rows = rows

    def run(self, problem, A, B, C, D, alpha, beta, stream=None):
        m = problem.m if self.rows is None else self.rows
        self.lib(A, B, C, D, m, problem.n, problem.k, problem.lda, problem.ldb, problem.ldc,
                 problem.ldd, alpha, beta, stream)


def test_run_and_check_passes_on_identical_kernel(gpu_device):
    p = GemmProblem(64, 96, 128, "bf16", "fp32", "nt", ldd=104)
    res = check.run_and_check(_ReferenceAsKernel(p), p, alpha=1.5, beta=-0.5, seed=7)
    assert res.passed, res.summary()
    assert res.rel_error < 1e-6 and res.unwritten == 0 and res.out_of_bounds_writes == 0


def test_poisoning_detects_unwritten_rows(gpu_device):
    p = GemmProblem(64, 96, 128, "fp16", "fp32", "tn")
    res = check.run_and_check(_ReferenceAsKernel(p, rows=63), p, seed=3)
    assert not res.passed
    assert res.unwritten == 96 and res.nan_count == 96  # the last row of D was never written
    assert res.rel_error == float("inf")


def test_poisoning_detects_a_kernel_that_does_nothing(gpu_device):
    class Nothing:
        def run(self, *args, **kwargs):
            pass

    p = GemmProblem(32, 32, 32, "bf16", "bf16", "tn")
    res = check.run_and_check(Nothing(), p, seed=0)
    assert not res.passed and res.unwritten == 32 * 32


def test_reference_kernel_covers_more_rows_than_one_grid(gpu_device):
    """The reference grid-strides over M: 65535 x 16 rows fit one launch, more rows still get
    computed (here 1048576 + 32 rows, N = 8, K = 8)."""
    p = GemmProblem(2**20 + 32, 8, 8, "bf16", "fp32", "tn")
    assert _reference_vs_numpy(p, alpha=1.0, beta=0.0, seed=4) < 1e-5


def test_a_captured_graph_runs_the_work_only_when_launched(gpu_device):
    """runtime.cuda.Graph (session 27): capturing the reference GEMM on a stream does not run it (D stays
    poisoned); each launch of the graph does (D then matches numpy); check.time_graph times it per call."""
    from argus_cutlass.runtime.cuda import Graph

    problem = GemmProblem(64, 96, 128, "bf16", "fp32", "tn")
    ops = problem.operands()
    rng = np.random.default_rng(3)
    a_bits, a = check.random_operand(ops["A"], rng)
    b_bits, b = check.random_operand(ops["B"], rng)
    lib = reference_library(problem.dtype, problem.out_dtype, problem.layout)
    bufs = [DeviceBuffer.from_numpy(x) for x in (a_bits, b_bits)]
    out = DeviceBuffer(problem.m * problem.ldd * 4)
    out.fill(0xFF)
    stream = Stream()

    def call() -> None:
        lib(bufs[0], bufs[1], None, out, problem.m, problem.n, problem.k, problem.lda, problem.ldb, problem.ldd,
            problem.ldd, 1.0, 0.0, stream)

    graph = Graph(call, stream)
    stream.synchronize()
    assert np.all(np.isnan(out.to_numpy(np.float32))), "capturing ran the work"
    graph.launch(stream)
    stream.synchronize()
    got = out.to_numpy(np.float32, (problem.m, problem.ldd))[:, : problem.n]
    want = check.numpy_reference(problem, a, b, None, 1.0, 0.0)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-5
    graph.destroy()
    # time_graph runs every captured call on every launch: D += A @ B (C is D) from D = 0 gives D = count x A @ B
    # with count = 3 warm-up calls + (1 warm-up + 3 timed launches) x 4 captured calls = 19
    from argus_cutlass.runtime.check import time_graph

    out.copy_from(np.zeros(problem.m * problem.ldd, dtype=np.float32))

    def accumulate() -> None:
        lib(bufs[0], bufs[1], out, out, problem.m, problem.n, problem.k, problem.lda, problem.ldb, problem.ldd,
            problem.ldd, 1.0, 1.0, stream)

    ms = time_graph(accumulate, stream, calls=4, warmup=1, iters=3)
    stream.synchronize()
    assert ms > 0.0
    got = out.to_numpy(np.float32, (problem.m, problem.ldd))[:, : problem.n]
    assert np.linalg.norm(got - 19 * want) / np.linalg.norm(19 * want) < 1e-5
    with pytest.raises(Exception) as exc:
        Graph(call, None)
    assert "default stream" in str(exc.value)
    stream.destroy()
    for x in (*bufs, out):
        x.free()
