"""The fp32 reference of attention forward (torch, any device), used by the checks.

One (batch, head) at a time: ``S = scale * Q K^T`` in fp32 (TF32 off), the bottom-right causal
mask and the length mask (keys past ``seqused_k``) as ``-inf``, ``LSE = logsumexp(S)`` per row and
``O = softmax(S) V``; a row with no unmasked key gets ``O = 0`` and ``LSE = -inf``. Masked key
columns are dropped before the product, so NaN stored in KV-cache slots past ``seqused_k`` never
reaches the reference (it must not reach the kernel's output either).
"""

from __future__ import annotations

import math
from typing import Any

from argus_cutlass.kernels.attention.problem import AttentionProblem


def _ranges(problem: AttentionProblem) -> list[tuple[int, int, int, int, int]]:
    """Per batch: ``(q_start, Lq, k_start, Lk_stored, Lk_used)`` in the rows of the q/k tensors."""
    p = problem
    out = []
    q0 = k0 = 0
    sq = p.seqlens_q if p.seqlens_q is not None else (p.seqlen_q,) * p.batch
    sk = p.seqlens_k if p.seqlens_k is not None else (p.seqlen_k,) * p.batch
    for b, ((lq, used), lk) in enumerate(zip(p.lengths(), sk)):
        out.append((q0 if p.varlen else 0, lq, k0 if p.varlen else 0, lk, used))
        q0 += sq[b]
        k0 += lk
    return out


def attention_reference(problem: AttentionProblem, q: Any, k: Any, v: Any) -> tuple[Any, Any]:
    """``(O, LSE)`` in fp32 for torch tensors laid out as :func:`~argus_cutlass.kernels.attention.library.problem_from_tensors`
    describes (fixed ``(B, S, H, D)`` or packed varlen ``(T, H, D)``).

    Returns:
        O fp32 with q's shape, LSE fp32 ``(B, H, Sq)`` (fixed) or ``(H, total_q)`` (varlen).
    """
    import torch

    p = problem
    group = p.heads // p.kv_heads
    o = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    lse_shape = (p.heads, q.shape[0]) if p.varlen else (p.batch, p.heads, q.shape[1])
    lse = torch.full(lse_shape, -math.inf, dtype=torch.float32, device=q.device)
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for b, (q0, lq, k0, _, used) in enumerate(_ranges(p)):
            if lq == 0 or used == 0:
                continue
            for h in range(p.heads):
                hk = h // group
                if p.varlen:
                    qs = q[q0:q0 + lq, h].float()
                    ks = k[k0:k0 + used, hk].float()
                    vs = v[k0:k0 + used, hk].float()
                else:
                    qs = q[b, :lq, h].float()
                    ks = k[b, :used, hk].float()
                    vs = v[b, :used, hk].float()
                s = (qs @ ks.T) * p.scale
                if p.causal:
                    rows = torch.arange(lq, device=q.device)[:, None]
                    cols = torch.arange(used, device=q.device)[None, :]
                    s = s.masked_fill(cols > rows + (used - lq), -math.inf)
                row_lse = torch.logsumexp(s, dim=-1)
                seen = torch.isfinite(row_lse)
                prob = torch.where(seen[:, None], torch.exp(s - torch.where(seen, row_lse, 0.0)[:, None]), 0.0)
                out = prob @ vs
                if p.varlen:
                    o[q0:q0 + lq, h] = out
                    lse[h, q0:q0 + lq] = row_lse
                else:
                    o[b, :lq, h] = out
                    lse[b, h, :lq] = row_lse
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev
    return o, lse
