"""The GEMM's vendor baseline: cuBLAS through torch, timed in the same process as our kernel.

torch is optional: :func:`cublas_time` returns ``None`` when it is not installed.
"""

from __future__ import annotations

import statistics
from typing import Any

from argus_cutlass.errors import DeviceError, ProblemError
from argus_cutlass.kernels.gemm.problem import GemmProblem, layout_views, storage_rows
from argus_cutlass.runtime.timing import DEFAULT_TIMING, TIMINGS


def cublas_time(problem: GemmProblem, alpha: float = 1.0, beta: float = 0.0,
                warmup: int = 10, iters: int = 100, timing: str = DEFAULT_TIMING) -> float | None:
    """Median milliseconds of torch (cuBLAS) computing the same GEMM in the same layout,
    or ``None`` when torch is not installed.

    A and B are torch tensors with the problem's strides (``A.t()`` / ``B.t()`` views for
    the column-major / N x K cases). D has the input dtype (torch's matmul output) unless
    ``out_dtype == "fp32"`` and this torch supports ``torch.mm(..., out_dtype=...)``.
    ``timing`` as :func:`argus_cutlass.kernels.gemm.check.time_gemm` times our kernel, in this process (default
    :data:`~argus_cutlass.runtime.timing.DEFAULT_TIMING`, ``"graph"``): ``"graph"`` rotates :func:`~argus_cutlass.kernels.gemm.check.operand_sets` sets and replays
    :func:`~argus_cutlass.kernels.gemm.check.graph_calls` calls captured in a ``torch.cuda.CUDAGraph`` (about
    ``iters`` calls, at least 5 replays, each between ``torch.cuda.Event`` s), per call; ``"launch"``: one
    operand set, each launch between its own events on torch's current stream.

    Raises:
        ProblemError: ``problem.timing`` for an unknown ``timing``; a rule no path can run without
            (:meth:`~argus_cutlass.kernels.gemm.problem.GemmProblem.validate_any`), checked before torch is imported.
        DeviceError: ``device.torch`` when torch is installed but sees no CUDA device; ``baseline.vendor`` when
            torch's cuBLAS call or its graph capture raises (the vendor's failure, not a wrong problem).
    """
    from argus_cutlass.kernels.gemm.check import graph_calls, operand_sets

    if timing not in TIMINGS:
        raise ProblemError("problem.timing", f"timing={timing!r}: expected one of {', '.join(TIMINGS)}")
    problem.validate_any()   # cuBLAS takes any stride: the problems our aligned staging path runs too
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        raise DeviceError("device.torch", "torch.cuda.is_available() is False")
    m, n = problem.m, problem.n
    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    dt = tdt[problem.dtype]
    a_rows, b_rows = storage_rows(problem)
    out_dt = tdt[problem.out_dtype]
    count = operand_sets(problem, beta) if timing == "graph" else 1
    sets = []
    for _ in range(count):   # each set its own D too (written in place), as our kernel's sets
        a, b = layout_views(torch.randn(a_rows * problem.lda, device="cuda", dtype=dt),
                            torch.randn(b_rows * problem.ldb, device="cuda", dtype=dt), problem)
        sets.append((a, b, torch.randn(m, n, device="cuda", dtype=dt) if beta != 0 else None,
                     torch.empty(m, n, device="cuda", dtype=dt)))
    turn = [0]

    def mm(a: Any, b: Any, c: Any, d: Any) -> Any:
        if out_dt != dt:
            try:
                return torch.mm(a, b, out_dtype=out_dt)
            except TypeError:
                pass
        if c is not None:
            return torch.addmm(c, a, b, beta=beta, alpha=alpha, out=d)
        return torch.mm(a, b, out=d) if alpha == 1.0 else torch.mm(a, b, out=d).mul_(alpha)

    if count == 1:   # per launch: the direct call, no per-call Python beyond torch's
        def run_mm() -> Any:
            return mm(*sets[0])
    else:
        def run_mm() -> Any:
            s = sets[turn[0] % len(sets)]
            turn[0] += 1
            return mm(*s)

    try:   # what torch's cuBLAS call or its capture raises is the vendor's failure, named as such
        if timing == "graph":
            calls = graph_calls(len(sets))
            return torch_graph_ms(run_mm, calls, max(1, warmup // calls), max(5, -(-iters // calls)))
        for _ in range(max(0, warmup)):
            run_mm()
        pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                 for _ in range(iters)]
        for start, end in pairs:
            start.record()
            run_mm()
            end.record()
        torch.cuda.synchronize()
        return float(statistics.median(s.elapsed_time(e) for s, e in pairs))
    except RuntimeError as exc:
        if not vendor_failure(exc):
            raise   # a shape or argument error of our glue, or a sticky CUDA error: not the vendor's
        raise DeviceError("baseline.vendor", f"cuBLAS (torch) on {problem!r}, timing {timing!r}: "
                                             f"{type(exc).__name__}: {exc}") from exc


def vendor_failure(exc: BaseException) -> bool:
    """Whether torch's error is cuBLAS refusing or failing the call, or torch's graph capture of it failing (what
    :func:`cublas_time` reports as the vendor's failure, ``DeviceError baseline.vendor``); a shape or argument error
    of the glue around it, or a sticky CUDA error (an illegal address: the context is lost), is not.

    >>> vendor_failure(RuntimeError("CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling `cublasGemmEx( ...`"))
    True
    >>> vendor_failure(RuntimeError("operation not permitted when stream is capturing"))
    True
    >>> vendor_failure(RuntimeError("mat1 and mat2 shapes cannot be multiplied (300x1000 and 1024x1000)"))
    False
    >>> vendor_failure(RuntimeError("CUDA error: an illegal memory access was encountered"))
    False
    """
    text = str(exc).lower()
    if "illegal" in text or "misaligned" in text:
        return False
    return "cublas" in text or "capture" in text or "capturing" in text or "cuda graph" in text


def torch_graph_ms(fn: Any, calls: int, warmup: int, iters: int) -> float:
    """Median milliseconds per call of ``fn`` (work enqueued through torch) run ``calls`` times back to back from
    one ``torch.cuda.CUDAGraph``: 3 warm-up calls on a side stream (cuBLAS handles and workspaces outside the
    capture), ``calls`` calls captured (each may rotate its operands: the graph keeps each call's), ``warmup``
    replays, then ``iters`` replays each between its own ``torch.cuda.Event`` pair; the median replay over
    ``calls``. The torch twin of :func:`argus_cutlass.runtime.check.time_graph` (which captures through
    cuda-python and needs no torch, for our kernels); ``bench/agent_eval.py`` times both ours and cuBLAS with this
    one, inside one torch capture.

    ``fn`` must enqueue on torch's current stream (the capture stream while capturing).

    Raises:
        ValueError: ``calls`` or ``iters`` < 1.
        RuntimeError: torch's capture errors (e.g. a synchronous allocation inside ``fn``).
    """
    import torch

    if calls < 1 or iters < 1:
        raise ValueError(f"time_graph: calls={calls}, iters={iters}: both must be >= 1")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    for _ in range(max(0, warmup)):
        graph.replay()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for start, end in events:
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    ms = statistics.median(start.elapsed_time(end) for start, end in events) / calls
    del graph
    return float(ms)
