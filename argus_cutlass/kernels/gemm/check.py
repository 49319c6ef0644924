"""The GEMM check/time harness: run a built GEMM against the fp32 reference kernel, and time it.

Numerics of :func:`run_and_check`
---------------------------------
Inputs are drawn from N(0, 1) in fp32 and rounded (round-to-nearest-even) to the input
dtype; the kernel under test and the reference GEMM read the *same* quantized values, so
the difference between them is only (a) the fp32 summation order and (b) the rounding of
D to ``out_dtype``. The relative Frobenius error ``||D - R||_F / ||R||_F`` must be at most

=========  =========  ==================================================================
out dtype  tolerance  why
=========  =========  ==================================================================
bf16       2e-2       8-bit significand: unit roundoff 2**-8 ~ 3.9e-3, RMS ~ 2.3e-3; x9 margin
fp16       5e-3       11-bit significand: unit roundoff 2**-11 ~ 4.9e-4, RMS ~ 2.8e-4; x18
fp32       1e-3       only summation order differs (bf16/fp16 inputs, fp32 accumulate)
=========  =========  ==================================================================

Poisoning: D is filled with 0xFF bytes (a NaN in bf16, fp16 and fp32) before the run,
so an element the kernel never wrote shows up as NaN (``nan_count``); padding columns
of D (``ldd > N``) must still hold the poison afterwards (``out_of_bounds_writes``).
Padding of A, B and C (leading dimension > contiguous extent) holds NaN too, so a kernel
that reads outside the logical matrix produces NaN.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from argus_cutlass.errors import ProblemError
from argus_cutlass.kernels.gemm.problem import GemmProblem, Operand
from argus_cutlass.runtime.check import BITS_DTYPE, POISON_BYTE, bits_to_float32, float32_to_bits, time_kernel
from argus_cutlass.runtime.cuda import DeviceBuffer, synchronize
from argus_cutlass.runtime.timing import DEFAULT_TIMING, TIMINGS  # the timings time_gemm knows and its default

#: relative Frobenius error allowed for each output dtype (see the module docstring)
#: bound on ``||D - R||_F / ||R||_F`` by output dtype: about 6x (bf16, measured 1.66e-3 on the H200),
#: 15x (fp16, 2e-4) and 70x (fp32, 1.4e-6) the error of a correct kernel
TOLERANCE: dict[str, float] = {"bf16": 1e-2, "fp16": 3e-3, "fp32": 1e-4}
#: element-wise bound ``|D - R| <= tol * (|R| + rms(R))``: 8x the unit roundoff of the output type
#: (bf16 2^-9, fp16 2^-11), so one wrong subtile or register fails even when the norm hides it
ELEMENT_TOLERANCE: dict[str, float] = {"bf16": 2.0 ** -6, "fp16": 2.0 ** -8, "fp32": 1e-4}


def random_operand(op: Operand, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``(bits, values)`` for one operand's storage ``(rows, ld)``: N(0,1) rounded to
    ``op.dtype`` in the logical columns, NaN in the padding columns. ``values`` is fp32."""
    vals = np.full(op.storage_shape, np.nan, dtype=np.float32)
    vals[:, : op.cols] = rng.standard_normal((op.rows, op.cols), dtype=np.float32)
    bits = float32_to_bits(vals, op.dtype)
    return bits, bits_to_float32(bits, op.dtype)


def logical(op: Operand, storage: np.ndarray) -> np.ndarray:
    """The GEMM-mode view of an operand's ``(rows, ld)`` fp32 storage: A as M x K,
    B as K x N, C/D as M x N."""
    mat = storage[:, : op.cols]
    if op.name == "A":
        return mat if op.contiguous_mode == "K" else mat.T
    if op.name == "B":
        return mat.T if op.contiguous_mode == "K" else mat
    return mat


def numpy_reference(problem: GemmProblem, a: np.ndarray, b: np.ndarray, c: np.ndarray | None,
                    alpha: float, beta: float) -> np.ndarray:
    """``alpha * A @ B + beta * C`` in float64 from fp32 storage arrays; returns M x N fp32."""
    ops = problem.operands()
    A = logical(ops["A"], a).astype(np.float64)
    B = logical(ops["B"], b).astype(np.float64)
    out = alpha * (A @ B)
    if beta != 0:
        if c is None:
            raise ProblemError("problem.beta", "beta != 0 needs C")
        out = out + beta * logical(ops["C"], c).astype(np.float64)
    return out.astype(np.float32)


# ---- check ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckResult:
    """Outcome of :func:`run_and_check`.

    Attributes:
        passed: ``nan_count == 0 and out_of_bounds_writes == 0 and rel_error <= tolerance and
            element_errors == 0``.
        rel_error: ``||D - R||_F / ||R||_F`` over the M x N output (inf if any NaN).
        tolerance: the bound for ``out_dtype`` (:data:`TOLERANCE`).
        element_errors: elements with ``|D - R| > ELEMENT_TOLERANCE * (|R| + rms(R))``.
        max_abs_error: max |D - R| over finite elements.
        unwritten: elements of D (M x N) that still hold the exact poison bit pattern.
        nan_count: non-finite elements of D (M x N): the unwritten ones plus any computed
            NaN/inf.
        out_of_bounds_writes: padding elements of D (columns N..ldd-1) that lost the poison.
        problem, alpha, beta, seed: what was run.
    """

    passed: bool
    rel_error: float
    tolerance: float
    element_errors: int
    max_abs_error: float
    unwritten: int
    nan_count: int
    out_of_bounds_writes: int
    problem: GemmProblem
    alpha: float
    beta: float
    seed: int

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready fields (the problem as a dict of its constructor arguments)."""
        p = self.problem
        return {
            "passed": self.passed,
            "rel_error": self.rel_error if np.isfinite(self.rel_error) else None,
            "tolerance": self.tolerance,
            "max_abs_error": self.max_abs_error,
            "unwritten": self.unwritten,
            "nan_count": self.nan_count,
            "out_of_bounds_writes": self.out_of_bounds_writes,
            "problem": {"m": p.m, "n": p.n, "k": p.k, "dtype": p.dtype, "out_dtype": p.out_dtype,
                        "layout": p.layout, "lda": p.lda, "ldb": p.ldb, "ldc": p.ldc, "ldd": p.ldd},
            "alpha": self.alpha,
            "beta": self.beta,
            "seed": self.seed,
        }

    def summary(self) -> str:
        p = self.problem
        status = "PASS" if self.passed else "FAIL"
        return (f"{status} {p.m}x{p.n}x{p.k} {p.dtype}->{p.out_dtype} {p.layout} "
                f"alpha={self.alpha:g} beta={self.beta:g} seed={self.seed}: "
                f"rel_error={self.rel_error:.3e} (tol {self.tolerance:.0e}), "
                f"max_abs={self.max_abs_error:.3e}, unwritten={self.unwritten}, nan={self.nan_count}, "
                f"oob_writes={self.out_of_bounds_writes}")


def compare(problem: GemmProblem, d_bits: np.ndarray, ref: np.ndarray) -> dict[str, Any]:
    """Compare D's raw storage bits ``(M, ldd)`` with the fp32 reference ``(M, N)``.

    Returns the fields of :class:`CheckResult` other than problem/alpha/beta/seed.
    """
    n = problem.n
    d_all = bits_to_float32(d_bits, problem.out_dtype)
    d = d_all[:, :n].astype(np.float64)
    r = ref[:, :n].astype(np.float64)
    poison = np.array(
        [int.from_bytes(bytes([POISON_BYTE]) * np.dtype(BITS_DTYPE[problem.out_dtype]).itemsize, "little")],
        dtype=BITS_DTYPE[problem.out_dtype],
    )[0]
    oob = int(np.count_nonzero(d_bits[:, n:] != poison)) if d_bits.shape[1] > n else 0
    unwritten = int(np.count_nonzero(d_bits[:, :n] == poison))
    nan_count = int(np.count_nonzero(~np.isfinite(d)))
    finite = np.isfinite(d) & np.isfinite(r)
    diff = np.where(finite, d - r, 0.0)
    max_abs = float(np.max(np.abs(diff))) if diff.size else 0.0
    if nan_count or not np.all(np.isfinite(r)):
        rel = float("inf")
    else:
        denom = float(np.linalg.norm(r))
        num = float(np.linalg.norm(d - r))
        rel = num / denom if denom > 0 else (0.0 if num == 0 else float("inf"))
    tol = TOLERANCE[problem.out_dtype]
    rms = float(np.sqrt(np.mean(r * r))) if r.size else 0.0
    bad_elems = int(np.count_nonzero(np.abs(diff) > ELEMENT_TOLERANCE[problem.out_dtype] * (np.abs(r) + rms)))
    return {
        "passed": nan_count == 0 and oob == 0 and rel <= tol and bad_elems == 0,
        "rel_error": rel,
        "tolerance": tol,
        "element_errors": bad_elems,
        "max_abs_error": max_abs,
        "unwritten": unwritten,
        "nan_count": nan_count,
        "out_of_bounds_writes": oob,
    }


def run_and_check(
    lib: Any,
    problem: GemmProblem,
    alpha: float = 1.0,
    beta: float = 0.0,
    seed: int = 0,
    *,
    reference: Any = None,
    stream: Any = None,
) -> CheckResult:
    """Run ``lib`` once on fresh random inputs and compare with the fp32 reference GEMM.

    Args:
        lib: a :class:`~argus_cutlass.kernels.gemm.library.GemmKernelLibrary` (anything with
            ``run(problem, A, B, C, D, alpha, beta, stream)``).
        problem: sizes, dtypes, layout, leading dimensions (validated first, without the ``tma.*``
            rules of the operands ``lib`` stages: ``lib.staged``).
        alpha, beta: epilogue scalars; C is allocated and filled only when ``beta != 0``.
        seed: numpy RNG seed for A, B, C.
        reference: the reference library (default:
            :func:`~argus_cutlass.kernels.gemm.reference.reference_library` for the problem's
            dtypes and layout; built on first use).
        stream: stream for both launches (default: legacy default stream).

    Returns:
        a :class:`CheckResult`; a numerical mismatch is reported there, not raised.

    Raises:
        ProblemError: the problem or a pointer breaks a rule.
        LaunchError: the kernel refused the arguments or failed to launch.
        DeviceError: a CUDA call failed (including asynchronous kernel faults).
    """
    problem.validate(getattr(lib, "staged", ()))
    if reference is None:
        from argus_cutlass.kernels.gemm.reference import reference_library

        reference = reference_library(problem.dtype, problem.out_dtype, problem.layout)
    ops = problem.operands()
    rng = np.random.default_rng(seed)
    a_bits, _ = random_operand(ops["A"], rng)
    b_bits, _ = random_operand(ops["B"], rng)
    buffers = [DeviceBuffer.from_numpy(a_bits), DeviceBuffer.from_numpy(b_bits)]
    c_buf = None
    if beta != 0:
        c_bits, _ = random_operand(ops["C"], rng)
        c_buf = DeviceBuffer.from_numpy(c_bits)
        buffers.append(c_buf)
    d_op = ops["D"]
    d_buf = DeviceBuffer(d_op.storage_bytes)
    r_buf = DeviceBuffer(problem.m * problem.n * 4)
    buffers += [d_buf, r_buf]
    try:
        d_buf.fill(POISON_BYTE)
        r_buf.fill(POISON_BYTE)
        synchronize()
        lib.run(problem, buffers[0], buffers[1], c_buf, d_buf, alpha, beta, stream)
        reference(buffers[0], buffers[1], c_buf, r_buf, problem.m, problem.n, problem.k,
                  problem.lda, problem.ldb, problem.ldc, problem.n, alpha, beta, stream)
        synchronize()
        d_bits = d_buf.to_numpy(BITS_DTYPE[problem.out_dtype], d_op.storage_shape)
        ref = r_buf.to_numpy(np.float32, (problem.m, problem.n))
    finally:
        for buf in buffers:
            buf.free()
    return CheckResult(problem=problem, alpha=float(alpha), beta=float(beta), seed=seed,
                       **compare(problem, d_bits, ref))



# ---- timing ---------------------------------------------------------------------------


#: bytes of operands :func:`time_gemm` and :func:`~argus_cutlass.kernels.gemm.baseline.cublas_time` rotate over in
#: graph timing: 3 x the H200's 60 MB L2, so each call reads its operands from HBM, as a serving loop that runs other
#: layers between two calls of this one sees them (issue 13 item 2: "rotate buffers when timing")
ROTATE_BYTES = 3 * 60 * 2**20
#: at most this many operand sets
MAX_SETS = 48
#: calls captured per graph: at least this many, a whole number of rotations of the operand sets
GRAPH_CALLS = 16


def operand_sets(problem: GemmProblem, beta: float = 0.0) -> int:
    """How many operand sets (A, B, C when ``beta != 0``, D) graph timing rotates over: enough for
    :data:`ROTATE_BYTES`, at least 1, at most :data:`MAX_SETS`.

    >>> operand_sets(GemmProblem(1, 4096, 14336)), operand_sets(GemmProblem(8192, 8192, 8192))
    (2, 1)
    """
    ops = problem.operands()
    per_set = sum(ops[n].storage_bytes for n in (("A", "B", "C", "D") if beta != 0 else ("A", "B", "D")))
    return max(1, min(MAX_SETS, -(-ROTATE_BYTES // per_set)))


def graph_calls(sets: int) -> int:
    """Calls captured per graph for ``sets`` rotated operand sets: a whole number of rotations, at least
    :data:`GRAPH_CALLS`.

    >>> graph_calls(1), graph_calls(3), graph_calls(48)
    (16, 18, 48)
    """
    return sets * -(-GRAPH_CALLS // sets)


def time_gemm(lib: Any, problem: GemmProblem, alpha: float = 1.0, beta: float = 0.0,
              warmup: int = 10, iters: int = 100, seed: int = 0, timing: str = DEFAULT_TIMING) -> float:
    """Median milliseconds of one ``lib`` call on ``problem`` (random inputs, own buffers), on a fresh
    non-blocking :class:`~argus_cutlass.runtime.cuda.Stream`.

    ``timing``:

    * ``"graph"`` (the default, :data:`DEFAULT_TIMING`; GPU tests first passed on an H200 in session 28): the operands rotated over :func:`operand_sets` sets (each call
      reads them from HBM, not from the L2 the previous call filled), :func:`graph_calls` calls captured into one
      CUDA graph and replayed (:func:`~argus_cutlass.runtime.check.time_graph`: about ``iters`` calls in all, at
      least 5 replays), per call: how a serving engine replays a layer, without the host's per-call path, which
      made per-launch times of ~25 us decode kernels vary by 15 % between device calls (``bench/RESULTS.md``,
      session 27);
    * ``"launch"``: one operand set, each of ``iters`` launches between its own CUDA events
      (:func:`~argus_cutlass.runtime.check.time_kernel`; the L2 warm from the previous launch).

    TFLOP/s = ``problem.flops / ms / 1e9``.

    Raises:
        ProblemError: ``timing`` is not one of :data:`TIMINGS` (rule ``problem.timing``); as :func:`run_and_check`.
        LaunchError, DeviceError: as :func:`run_and_check`.
    """
    from argus_cutlass.runtime.check import time_graph
    from argus_cutlass.runtime.cuda import Stream

    if timing not in TIMINGS:
        raise ProblemError("problem.timing", f"timing={timing!r}: expected one of {', '.join(TIMINGS)}")
    problem.validate(getattr(lib, "staged", ()))
    ops = problem.operands()
    rng = np.random.default_rng(seed)
    names = ("A", "B", "C") if beta != 0 else ("A", "B")
    host = {name: random_operand(ops[name], rng)[0] for name in names}
    count = operand_sets(problem, beta) if timing == "graph" else 1
    sets = []
    stream = Stream()
    try:
        for _ in range(count):
            bufs = {name: DeviceBuffer.from_numpy(host[name]) for name in names}
            bufs["D"] = DeviceBuffer(ops["D"].storage_bytes)
            sets.append(bufs)
        lib.run(problem, sets[0]["A"], sets[0]["B"], sets[0].get("C"), sets[0]["D"], alpha, beta, stream)
        stream.synchronize()
        p = problem
        ptrs = [(b["A"].ptr, b["B"].ptr, b["C"].ptr if "C" in b else None, b["D"].ptr) for b in sets]
        turn = [0]

        def launch(a: int, b_: int, c: int | None, d: int) -> None:
            lib(a, b_, c, d, p.m, p.n, p.k, p.lda, p.ldb, p.ldc, p.ldd, alpha, beta, stream.handle)

        if timing == "launch":   # one set, no rotation
            return time_kernel(lambda: launch(*ptrs[0]), warmup=warmup, iters=iters, stream=stream)

        def call() -> None:
            launch(*ptrs[turn[0] % len(ptrs)])
            turn[0] += 1

        calls = graph_calls(len(ptrs))
        return time_graph(call, stream, calls=calls, warmup=max(1, warmup // calls), iters=max(5, -(-iters // calls)))
    finally:
        stream.synchronize()
        stream.destroy()
        for bufs in sets:
            for buf in bufs.values():
                buf.free()
