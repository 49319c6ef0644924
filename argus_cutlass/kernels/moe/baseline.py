"""The MoE layer's torch baseline of ``ANCHORS.md``: sort by expert, two ``torch._grouped_mm``.

:func:`grouped_mm_layer` is what a PyTorch user gets without a custom kernel (torchtitan's
grouped-GEMM path): it needs torch with ``torch._grouped_mm`` (2.8 or newer, whose CUDA kernel
takes bf16 on SM90 and accepts groups of any size) and bf16 tensors on a CUDA device. torch is
imported lazily; this module is not exercised on the CPU. Timing helpers come with the kernels.
"""

from __future__ import annotations

from typing import Any


def grouped_mm_layer(x: Any, ids: Any, weights: Any, w13: Any, w2: Any) -> Any:
    """``y`` (T, H) in x's dtype for x (T, H), ids / weights (T, k), w13 (E, 2I, H), w2 (E, H, I).

    1. Sort the ``T * k`` routed rows by expert (stable) and gather ``x`` in that order.
    2. ``gu = _grouped_mm(xs, w13^T, offs)`` with ``offs`` the int32 cumulative group ends;
       ``h = silu(gu[:, :I]) * gu[:, I:]``.
    3. ``out = _grouped_mm(h, w2^T, offs)``.
    4. ``y.index_add_(0, token, weight * out)`` in fp32, cast to x's dtype.
    """
    import torch

    t, k = ids.shape
    e_, i2, _ = w13.shape
    i = i2 // 2
    flat = ids.reshape(-1).long()
    order = torch.argsort(flat, stable=True)                 # permuted row -> t*k + j
    token = order // k
    offs = torch.cumsum(torch.bincount(flat, minlength=e_), 0).to(torch.int32)
    xs = x[token]
    gu = torch._grouped_mm(xs, w13.transpose(-2, -1), offs=offs)   # (T*k, 2I)
    h = torch.nn.functional.silu(gu[:, :i]) * gu[:, i:]
    out = torch._grouped_mm(h.contiguous(), w2.transpose(-2, -1), offs=offs)  # (T*k, H)
    y = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    y.index_add_(0, token, weights.reshape(-1)[order].float().unsqueeze(1) * out.float())
    return y.to(x.dtype)
