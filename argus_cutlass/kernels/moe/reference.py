"""References of the MoE layer with SwiGLU experts (the formula of :mod:`.problem`).

:func:`moe_reference_numpy` computes in float64 on the CPU (small tests);
:func:`moe_reference_torch` in fp32 with torch on any device (the GPU checks to come). Both loop
over experts: gather the rows routed to ``e``, apply gate+up, ``silu(gate) * up`` and down, and add
``weight * row`` into the token's output. Neither needs the routing to be valid beyond ids in
[0, E); check it with :meth:`~.problem.MoEProblem.check_routing` first.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _shapes(x_shape: tuple, ids_shape: tuple, w_shape: tuple, w13_shape: tuple, w2_shape: tuple) -> tuple[int, ...]:
    if len(x_shape) != 2 or len(w13_shape) != 3 or len(w2_shape) != 3:
        raise ValueError(f"x {x_shape} must be (T, H), w13 {w13_shape} (E, 2I, H), w2 {w2_shape} (E, H, I)")
    t, h = x_shape
    e, i2, h13 = w13_shape
    if h13 != h or i2 % 2 or tuple(w2_shape) != (e, h, i2 // 2):
        raise ValueError(f"inconsistent shapes: x {tuple(x_shape)}, w13 {tuple(w13_shape)} (E, 2I, H), "
                         f"w2 {tuple(w2_shape)} (E, H, I)")
    if len(ids_shape) != 2 or ids_shape[0] != t or tuple(w_shape) != tuple(ids_shape):
        raise ValueError(f"ids {tuple(ids_shape)} and weights {tuple(w_shape)} must both be (T={t}, k)")
    return t, h, e, i2 // 2


def silu_numpy(g: np.ndarray) -> np.ndarray:
    """``g * sigmoid(g)``, with sigmoid written through tanh so that no exp overflows."""
    return g * (0.5 * (1.0 + np.tanh(0.5 * g)))


def moe_reference_numpy(x: Any, ids: Any, weights: Any, w13: Any, w2: Any) -> np.ndarray:
    """``y`` (T, H) float64 for numpy inputs (any float dtype; computed in float64)."""
    x = np.asarray(x, dtype=np.float64)
    ids = np.asarray(ids).astype(np.int64)
    weights = np.asarray(weights, dtype=np.float64)
    w13 = np.asarray(w13, dtype=np.float64)
    w2 = np.asarray(w2, dtype=np.float64)
    t, h, e_, i = _shapes(x.shape, ids.shape, weights.shape, w13.shape, w2.shape)
    y = np.zeros((t, h), dtype=np.float64)
    for e in range(e_):
        tok, slot = np.nonzero(ids == e)
        if tok.size == 0:
            continue
        gu = x[tok] @ w13[e].T                      # (n, 2I)
        hid = silu_numpy(gu[:, :i]) * gu[:, i:]     # (n, I)
        out = hid @ w2[e].T                         # (n, H)
        np.add.at(y, tok, weights[tok, slot][:, None] * out)
    return y


def moe_reference_torch(x: Any, ids: Any, weights: Any, w13: Any, w2: Any) -> Any:
    """``y`` (T, H) fp32 for torch tensors on one device (TF32 off for the products)."""
    import torch

    _shapes(tuple(x.shape), tuple(ids.shape), tuple(weights.shape), tuple(w13.shape), tuple(w2.shape))
    i = w13.shape[1] // 2
    xf = x.float()
    ids = ids.long()
    wf = weights.float()
    y = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for e in range(w13.shape[0]):
            tok, slot = torch.nonzero(ids == e, as_tuple=True)
            if tok.numel() == 0:
                continue
            gu = xf[tok] @ w13[e].float().t()
            hid = torch.nn.functional.silu(gu[:, :i]) * gu[:, i:]
            out = hid @ w2[e].float().t()
            y.index_add_(0, tok, wf[tok, slot].unsqueeze(1) * out)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev
    return y
