"""Generic numerics and timing glue (no torch needed): dtype bit conversions and CUDA-event timing.

A family's check harness builds on these (the GEMM's is :mod:`argus_cutlass.kernels.gemm.check`).
"""

from __future__ import annotations

import statistics
from typing import Any, Callable

import numpy as np

from argus_cutlass.errors import DeviceError, ProblemError
from argus_cutlass.runtime.cuda import Event, Graph, capture_handle, stream_handle

#: fill byte used to poison outputs and padding (NaN in bf16, fp16 and fp32)
POISON_BYTE = 0xFF
#: numpy storage type of each dtype's raw bits
BITS_DTYPE = {"bf16": np.uint16, "fp16": np.uint16, "fp32": np.uint32}


# ---- dtype conversion (numpy has no bf16) ---------------------------------------------


def float32_to_bits(x: np.ndarray, dtype: str) -> np.ndarray:
    """fp32 values -> the raw bits of ``dtype`` (uint16 for bf16/fp16, uint32 for fp32).

    bf16 uses round-to-nearest-even on the fp32 bit pattern (NaN stays a quiet NaN);
    fp16 uses numpy's float16 cast (also round-to-nearest-even).

    >>> float32_to_bits(np.array([1.0, -2.0, 1.00390625], np.float32), "bf16").tolist()
    [16256, 49152, 16256]
    """
    x = np.asarray(x, dtype=np.float32)
    if dtype == "bf16":
        bits = x.view(np.uint32).astype(np.uint64)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        out = rounded.astype(np.uint16)
        out[np.isnan(x)] = 0x7FC0
        return out
    if dtype == "fp16":
        return x.astype(np.float16).view(np.uint16)
    if dtype == "fp32":
        return x.view(np.uint32).copy()
    raise ProblemError("problem.dtype", f"unknown dtype {dtype!r}")


def bits_to_float32(bits: np.ndarray, dtype: str) -> np.ndarray:
    """The raw bits of ``dtype`` -> fp32 values (exact)."""
    if dtype == "bf16":
        return (bits.astype(np.uint32) << 16).view(np.float32)
    if dtype == "fp16":
        return bits.view(np.float16).astype(np.float32)
    if dtype == "fp32":
        return bits.view(np.float32).copy()
    raise ProblemError("problem.dtype", f"unknown dtype {dtype!r}")



# ---- timing ---------------------------------------------------------------------------


def time_kernel(fn: Callable[[], Any], warmup: int = 10, iters: int = 100, stream: Any = None) -> float:
    """Median milliseconds of ``fn()`` measured with CUDA events on ``stream``.

    ``fn`` must enqueue its work on ``stream`` (e.g. ``lambda: lib(..., stream=s)``).
    Each iteration is bracketed by its own pair of events; the L2 cache is not flushed
    (back-to-back runs of the same problem, as a serving loop sees them).

    Raises:
        DeviceError: ``device.timing`` when ``iters < 1``; CUDA failures.
    """
    if iters < 1:
        raise DeviceError("device.timing", f"iters={iters}: need at least one timed iteration")
    for _ in range(max(0, warmup)):
        fn()
    handle = stream_handle(stream)
    events = [(Event(), Event()) for _ in range(iters)]
    for start, end in events:
        start.record(handle)
        fn()
        end.record(handle)
    times = [start.elapsed_ms(end) for start, end in events]
    for start, end in events:
        start.destroy()
        end.destroy()
    return float(statistics.median(times))


def time_graph(fn: Callable[[], Any], stream: Any, calls: int = 16, warmup: int = 3, iters: int = 10) -> float:
    """Median milliseconds per call of ``fn`` run ``calls`` times back to back from one CUDA graph
    (:class:`~argus_cutlass.runtime.cuda.Graph`): how a serving engine replays a decode step, and what the kernel
    costs without the host's per-call path (one launch between events times a kernel of tens of microseconds partly
    by the host: 23.6 us from a graph against 25.9-29.8 us per launch for one decode GEMM in three device calls,
    ``bench/RESULTS.md`` session 27). ``fn`` is called 3 times on ``stream`` (warm-up: lazy attribute setting,
    workspace pools), then ``calls`` times while capturing (each call may rotate its operands: the graph keeps
    each call's arguments), the graph launched ``warmup`` times, then ``iters`` launches each between its own
    pair of events; returns the median launch over ``calls``.

    ``fn`` must enqueue its work on ``stream``, a non-default stream. (Its GPU test,
    ``tests/gpu/test_runtime_gpu.py::test_a_captured_graph_runs_the_work_only_when_launched``, first passed on an
    H200 in session 28; its torch twin is :func:`argus_cutlass.kernels.gemm.baseline.torch_graph_ms`.)

    Raises:
        DeviceError: ``device.timing`` when ``calls`` or ``iters`` < 1; ``device.stream`` for the default
            stream; CUDA failures (a capture ``fn`` breaks, e.g. by synchronizing).
    """
    if calls < 1 or iters < 1:
        raise DeviceError("device.timing", f"calls={calls}, iters={iters}: both must be >= 1")
    handle = capture_handle(stream)
    for _ in range(3):
        fn()

    def record() -> None:
        for _ in range(calls):
            fn()

    graph = Graph(record, handle)
    try:   # each launch of the graph between its own events (time_kernel), per call
        return time_kernel(lambda: graph.launch(handle), warmup=warmup, iters=iters, stream=handle) / calls
    finally:
        graph.destroy()
