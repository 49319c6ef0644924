"""The attention check/time harness: a built kernel against the fp32 reference, and its time.

Inputs of :func:`make_inputs`: Q, K, V drawn from N(0, 1) and rounded to the dtype, stored as views
of buffers whose head stride is ``head_dim + 8`` with NaN in the 8 padding elements (a kernel that
reads past the head dim sees NaN). With ``seqused_k`` every stored key slot past it holds NaN in K
and V (the issue's KV-cache rule: such slots must never reach the output). O (and its padding) and
LSE are filled with NaN before the run, so an element the kernel never wrote is NaN.

Tolerances of :func:`compare` (O in the input dtype, against fp32; P is rounded to the input dtype
before the second GEMM in the kernel):

=====  ==================  ======================================================================
dtype  rel. Frobenius      element-wise ``|O - R| <= tol * (|R| + rms(R))``
=====  ==================  ======================================================================
bf16   2e-2                2^-4 (P and O each rounded to an 8-bit significand)
fp16   4e-3                2^-6
=====  ==================  ======================================================================

LSE: ``|LSE - R| <= 1e-3 * (1 + |R|)`` on rows that see a key; exactly ``-inf`` on rows that see
none, whose O rows must be exactly 0.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

from argus_cutlass.kernels.attention.problem import AttentionProblem

TOLERANCE = {"bf16": 2e-2, "fp16": 4e-3}
ELEMENT_TOLERANCE = {"bf16": 2.0 ** -4, "fp16": 2.0 ** -6}
LSE_TOLERANCE = 1e-3
PAD = 8


@dataclass
class AttentionInputs:
    """Device tensors of one problem (views into NaN-padded buffers)."""

    q: Any
    k: Any
    v: Any
    cu_seqlens_q: Any = None
    cu_seqlens_k: Any = None
    seqused_k: Any = None
    buffers: list[Any] = field(default_factory=list)


def _padded(shape: tuple[int, ...], dtype: Any, device: Any, gen: Any) -> tuple[Any, Any]:
    import torch

    buf = torch.full((*shape[:-1], shape[-1] + PAD), math.nan, dtype=dtype, device=device)
    view = buf[..., : shape[-1]]
    view.copy_(torch.randn(shape, generator=gen, device=device, dtype=torch.float32).to(dtype))
    return view, buf


def make_inputs(problem: AttentionProblem, seed: int = 0, device: str = "cuda") -> AttentionInputs:
    """Fresh random Q, K, V (and lengths arrays) for ``problem`` on ``device``."""
    import torch

    from argus_cutlass.kernels.attention.library import torch_dtype

    p = problem.validate()
    dt = torch_dtype(p.dtype)
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    if p.varlen:
        qshape = (p.total_q, p.heads, p.head_dim)
        kshape = (p.total_k, p.kv_heads, p.head_dim)
    else:
        qshape = (p.batch, p.seqlen_q, p.heads, p.head_dim)
        kshape = (p.batch, p.seqlen_k, p.kv_heads, p.head_dim)
    q, qb = _padded(qshape, dt, device, gen)
    k, kb = _padded(kshape, dt, device, gen)
    v, vb = _padded(kshape, dt, device, gen)
    ins = AttentionInputs(q, k, v, buffers=[qb, kb, vb])
    if p.varlen:
        def cum(lens: tuple[int, ...]) -> Any:
            return torch.tensor([0, *itertools.accumulate(lens)], dtype=torch.int32, device=device)

        ins.cu_seqlens_q = cum(p.seqlens_q)  # type: ignore[arg-type]
        ins.cu_seqlens_k = cum(p.seqlens_k)  # type: ignore[arg-type]
    if p.seqused_k is not None:
        ins.seqused_k = torch.tensor(p.seqused_k, dtype=torch.int32, device=device)
        sk = p.seqlens_k if p.seqlens_k is not None else (p.seqlen_k,) * p.batch
        start = 0
        for b, (used, stored) in enumerate(zip(p.seqused_k, sk)):
            if p.varlen:
                k[start + used:start + stored] = math.nan
                v[start + used:start + stored] = math.nan
                start += stored
            else:
                k[b, used:] = math.nan
                v[b, used:] = math.nan
    return ins


@dataclass(frozen=True)
class AttentionCheckResult:
    """Outcome of :func:`run_and_check` (fields as in :func:`compare`)."""

    passed: bool
    rel_error: float
    tolerance: float
    element_errors: int
    max_abs_error: float
    nan_count: int
    out_of_bounds_writes: int
    lse_errors: int
    lse_max_error: float
    empty_rows: int
    empty_row_errors: int
    problem: AttentionProblem
    seed: int

    def as_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in ("passed", "tolerance", "element_errors", "max_abs_error", "nan_count",
                                           "out_of_bounds_writes", "lse_errors", "lse_max_error", "empty_rows",
                                           "empty_row_errors", "seed")}
        d["rel_error"] = self.rel_error if math.isfinite(self.rel_error) else None
        d["problem"] = self.problem.describe()
        return d

    def summary(self) -> str:
        status = "PASS" if self.passed else "FAIL"
        return (f"{status} {self.problem.describe()} seed={self.seed}: rel_error={self.rel_error:.3e} "
                f"(tol {self.tolerance:.0e}), max_abs={self.max_abs_error:.3e}, bad_elems={self.element_errors}, "
                f"nan={self.nan_count}, oob_writes={self.out_of_bounds_writes}, lse_bad={self.lse_errors} "
                f"(max {self.lse_max_error:.2e}), empty_rows={self.empty_rows} (bad {self.empty_row_errors})")


def compare(problem: AttentionProblem, o: Any, o_pad: Any, lse: Any, ref_o: Any, ref_lse: Any) -> dict[str, Any]:
    """Compare the kernel's O (input dtype), its padding and LSE with the fp32 reference."""
    import torch

    d = o.double()
    r = ref_o.double()
    nan_count = int((~torch.isfinite(d)).sum())
    oob = int((~torch.isnan(o_pad)).sum())  # padding must still hold the NaN poison
    finite = torch.isfinite(d)
    diff = torch.where(finite, d - r, torch.zeros_like(d))
    max_abs = float(diff.abs().max()) if diff.numel() else 0.0
    if nan_count:
        rel = math.inf
    else:
        denom = float(torch.linalg.vector_norm(r))
        num = float(torch.linalg.vector_norm(d - r))
        rel = num / denom if denom > 0 else (0.0 if num == 0 else math.inf)
    rms = float(torch.sqrt((r * r).mean())) if r.numel() else 0.0
    bad = int((diff.abs() > ELEMENT_TOLERANCE[problem.dtype] * (r.abs() + rms)).sum())
    # LSE: finite rows within tolerance; rows with no key exactly -inf (and their O rows exactly 0)
    seen = torch.isfinite(ref_lse)
    lse_diff = torch.where(seen, (lse.double() - ref_lse.double()).abs(), torch.zeros_like(lse, dtype=torch.float64))
    lse_diff = torch.where(torch.isnan(lse_diff), torch.full_like(lse_diff, math.inf), lse_diff)
    lse_bad = int((lse_diff > LSE_TOLERANCE * (1 + ref_lse.double().abs().nan_to_num(0.0))).sum())
    lse_max = float(lse_diff.max()) if lse_diff.numel() else 0.0
    empty = ~seen
    empty_rows = int(empty.sum())
    empty_bad = int((empty & ~(torch.isneginf(lse))).sum())
    if empty_rows:
        # O rows of the empty LSE rows: LSE (B, H, S) -> O (B, S, H); varlen (H, T) -> (T, H)
        mask = empty.permute(0, 2, 1) if not problem.varlen else empty.permute(1, 0)
        empty_bad += int((d[mask] != 0).any(dim=-1).sum())
    tol = TOLERANCE[problem.dtype]
    return {
        "passed": nan_count == 0 and oob == 0 and rel <= tol and bad == 0 and lse_bad == 0 and empty_bad == 0,
        "rel_error": rel, "tolerance": tol, "element_errors": bad, "max_abs_error": max_abs,
        "nan_count": nan_count, "out_of_bounds_writes": oob, "lse_errors": lse_bad, "lse_max_error": lse_max,
        "empty_rows": empty_rows, "empty_row_errors": empty_bad,
    }


def run_and_check(lib: Any, problem: AttentionProblem, seed: int = 0) -> AttentionCheckResult:
    """Run ``lib`` once on fresh random inputs (O and LSE poisoned with NaN first) and compare with
    :func:`~argus_cutlass.kernels.attention.reference.attention_reference`.

    Raises:
        ProblemError, LaunchError: bad problem or refused launch. A mismatch is in the result.
    """
    import torch

    from argus_cutlass.kernels.attention.reference import attention_reference

    p = problem.validate()
    ins = make_inputs(p, seed)
    o_buf = torch.full((*ins.q.shape[:-1], p.head_dim + PAD), math.nan, dtype=ins.q.dtype, device=ins.q.device)
    o = o_buf[..., : p.head_dim]
    lse_shape = (p.heads, p.total_q) if p.varlen else (p.batch, p.heads, p.seqlen_q)
    lse = torch.full(lse_shape, math.nan, dtype=torch.float32, device=ins.q.device)
    torch.cuda.synchronize()
    lib.forward(ins.q, ins.k, ins.v, cu_seqlens_q=ins.cu_seqlens_q, cu_seqlens_k=ins.cu_seqlens_k,
                seqused_k=ins.seqused_k, softmax_scale=p.softmax_scale, out=o, lse=lse, problem=p)
    torch.cuda.synchronize()
    ref_o, ref_lse = attention_reference(p, ins.q, ins.k, ins.v)
    res = compare(p, o, o_buf[..., p.head_dim:], lse, ref_o, ref_lse)
    return AttentionCheckResult(problem=p, seed=seed, **res)


def time_attention(lib: Any, problem: AttentionProblem, warmup: int = 10, iters: int = 50, seed: int = 0) -> float:
    """Median milliseconds of one launch on ``problem`` (CUDA events per launch, after warm-up).

    TFLOP/s = ``problem.flops / ms / 1e9``.
    """
    import torch

    p = problem.validate()
    ins = make_inputs(p, seed)
    o = torch.empty(ins.q.shape, dtype=ins.q.dtype, device=ins.q.device)
    lse_shape = (p.heads, p.total_q) if p.varlen else (p.batch, p.heads, p.seqlen_q)
    lse = torch.empty(lse_shape, dtype=torch.float32, device=ins.q.device)

    def call() -> None:
        lib.forward(ins.q, ins.k, ins.v, cu_seqlens_q=ins.cu_seqlens_q, cu_seqlens_k=ins.cu_seqlens_k,
                    seqused_k=ins.seqused_k, out=o, lse=lse, problem=p)

    return median_ms(call, warmup, iters)


def median_ms(fn: Any, warmup: int = 10, iters: int = 50) -> float:
    """Median CUDA-event milliseconds of ``fn()`` on torch's current stream."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for a, b in events:  # enqueued back to back: the GPU never waits for the host between launches
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    times = sorted(a.elapsed_time(b) for a, b in events)
    return times[len(times) // 2]
