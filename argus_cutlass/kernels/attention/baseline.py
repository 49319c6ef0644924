"""The attention family's vendor baseline: cuDNN's fused attention through torch SDPA
(``torch.nn.attention.sdpa_kernel(SDPBackend.CUDNN_ATTENTION)``), timed in our process.

torch lays SDPA tensors out as ``(batch, heads, seq, dim)``; the baseline passes ``(batch, seq, heads,
dim)`` storage transposed, the layout our kernels read, so both read the same bytes. Causal masks:
SDPA's ``is_causal`` is top-left aligned, ours bottom-right, so a causal baseline needs
``seqlen_q == seqlen_k``. Variable lengths, ``seqused_k`` and a causal mask with different lengths
have no baseline (:func:`cudnn_support` says why).
"""

from __future__ import annotations

from typing import Any

from argus_cutlass.kernels.attention.problem import AttentionProblem


def cudnn_support(problem: AttentionProblem) -> str | None:
    """None when cuDNN (SDPA) computes the same attention as ours, else why not."""
    if problem.varlen:
        return "variable lengths (SDPA's cuDNN backend takes padded batches only)"
    if problem.seqused_k is not None:
        return "seqused_k has no SDPA equivalent"
    if problem.causal and problem.seqlen_q != problem.seqlen_k:
        return "SDPA's causal mask is top-left aligned; ours is bottom-right (differs when seqlen_q != seqlen_k)"
    return None


def sdpa_inputs(problem: AttentionProblem, seed: int = 0) -> tuple[Any, Any, Any]:
    """Random ``(B, H, S, D)`` views of ``(B, S, H, D)`` storage for SDPA (k, v with kv_heads)."""
    import torch

    from argus_cutlass.kernels.attention.library import torch_dtype

    p = problem
    g = torch.Generator(device="cuda")
    g.manual_seed(seed)
    dt = torch_dtype(p.dtype)
    q = torch.randn(p.batch, p.seqlen_q, p.heads, p.head_dim, device="cuda", generator=g).to(dt).transpose(1, 2)
    k = torch.randn(p.batch, p.seqlen_k, p.kv_heads, p.head_dim, device="cuda", generator=g).to(dt).transpose(1, 2)
    v = torch.randn(p.batch, p.seqlen_k, p.kv_heads, p.head_dim, device="cuda", generator=g).to(dt).transpose(1, 2)
    return q, k, v


def cudnn_callable(problem: AttentionProblem, seed: int = 0) -> Any:
    """A no-argument function running cuDNN attention on fresh inputs for ``problem`` (None when
    :func:`cudnn_support` refuses the problem or torch has no cuDNN attention)."""
    try:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return None
    if cudnn_support(problem) is not None:
        return None
    q, k, v = sdpa_inputs(problem, seed)
    gqa = problem.heads != problem.kv_heads
    scale = problem.scale

    def run() -> Any:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=problem.causal, scale=scale,
                                                                    enable_gqa=gqa)

    try:
        run()
        torch.cuda.synchronize()
    except RuntimeError:
        return None
    return run


def cudnn_time(problem: AttentionProblem, warmup: int = 10, iters: int = 50) -> float | None:
    """Median milliseconds of cuDNN attention on ``problem`` (None without torch or a cuDNN
    equivalent, see :func:`cudnn_support`)."""
    from argus_cutlass.kernels.attention.check import median_ms

    fn = cudnn_callable(problem)
    return None if fn is None else median_ms(fn, warmup, iters)
