"""A built MoE layer: :class:`MoEKernelLibrary` (ctypes over the ``.so``) and the input rules.

:func:`check_inputs` is the bad-input gate of :func:`argus_cutlass.api.moe`: every tensor is named
in its error, and nothing reaches the GPU unless the rules hold (shapes, dtypes, devices, E / k
agreement, the 16-byte rule of TMA on every row pitch, ids in [0, E) or -1 padding by choice, distinct
per token, finite weights: :func:`check_routing_values`).
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

from argus_cutlass.errors import LaunchError, ProblemError
from argus_cutlass.kernels.moe.problem import MoEProblem, routing_value_errors
from argus_cutlass.runtime.launch import has_device_data

__all__ = ["MoEKernelLibrary", "check_inputs", "check_routing_values"]

_DTYPES = {"torch.bfloat16": "bf16", "torch.float16": "fp16"}


def _dtype(t: Any) -> str | None:
    return _DTYPES.get(str(getattr(t, "dtype", "")))


def check_inputs(x: Any, topk_ids: Any, topk_weights: Any, w13: Any, w2: Any, *,
                 padding: str = "refuse") -> MoEProblem:
    """The :class:`MoEProblem` of torch tensors ``x`` (T, H), ``topk_ids`` (T, k) integer,
    ``topk_weights`` (T, k) floating, ``w13`` (E, 2I, H), ``w2`` (E, H, I), all on one CUDA device,
    x / w13 / w2 one dtype (bf16 or fp16), each row-contiguous (last stride 1).

    Args:
        padding: ``"refuse"`` (an id outside [0, E) is an error) or ``"skip"`` (ids of -1 are
            padding slots that add nothing; other out-of-range ids are still refused). Checking
            the ids (and that each token's experts are distinct and its routed weights finite,
            :func:`check_routing_values`) reads them on the host (one synchronisation); pass
            ``padding="unchecked"`` to skip the check inside CUDA graph capture (the kernel then
            skips every id outside [0, E): no out-of-bounds access is possible either way).

    Raises:
        ProblemError: ``moe.input`` naming the tensor and what is wrong; or a rule of
            :meth:`MoEProblem.validate` (``tma.contiguous_extent`` for H or I not a multiple of 8).
    """
    named = {"x": x, "topk_ids": topk_ids, "topk_weights": topk_weights, "w13": w13, "w2": w2}
    for name, t in named.items():
        if not (hasattr(t, "shape") and hasattr(t, "device") and hasattr(t, "dtype")):
            raise ProblemError("moe.input", f"{name} is a {type(t).__name__}, expected a torch tensor")
    want_dims = {"x": 2, "topk_ids": 2, "topk_weights": 2, "w13": 3, "w2": 3}
    for name, t in named.items():
        if t.dim() != want_dims[name]:
            raise ProblemError("moe.input", f"{name} has shape {tuple(t.shape)}: expected {want_dims[name]} dimensions")
    dev = x.device
    if dev.type != "cuda":
        raise ProblemError("moe.input", f"x is on {dev}: the layer runs on a CUDA device")
    for name, t in named.items():
        if t.device != dev:
            raise ProblemError("moe.input", f"{name} is on {t.device}, x on {dev}: all tensors on one device")
    dt = _dtype(x)
    if dt is None:
        raise ProblemError("moe.input", f"x has dtype {x.dtype}: expected torch.bfloat16 or torch.float16")
    for name in ("w13", "w2"):
        if named[name].dtype != x.dtype:
            raise ProblemError("moe.input", f"{name} has dtype {named[name].dtype}, x has {x.dtype}: one dtype")
    if topk_ids.dtype.is_floating_point or topk_ids.dtype.is_complex or str(topk_ids.dtype) == "torch.bool":
        raise ProblemError("moe.input", f"topk_ids has dtype {topk_ids.dtype}: expected an integer tensor",
                           "pass the router's indices (torch.topk(...).indices)")
    if not topk_weights.dtype.is_floating_point:
        raise ProblemError("moe.input", f"topk_weights has dtype {topk_weights.dtype}: expected a floating tensor")
    t_, h = (int(v) for v in x.shape)
    e_, i2, h13 = (int(v) for v in w13.shape)
    if tuple(topk_ids.shape) != tuple(topk_weights.shape):
        raise ProblemError("moe.input", f"topk_ids {tuple(topk_ids.shape)} and topk_weights "
                           f"{tuple(topk_weights.shape)} differ: both are (T, k)")
    if int(topk_ids.shape[0]) != t_:
        raise ProblemError("moe.input", f"topk_ids has {int(topk_ids.shape[0])} rows, x has T = {t_}")
    k = int(topk_ids.shape[1])
    if h13 != h:
        raise ProblemError("moe.input", f"w13 has shape {tuple(w13.shape)}: its last mode must be H = {h} (x)")
    if i2 % 2:
        raise ProblemError("moe.input", f"w13 has {i2} rows per expert: expected 2I (gate rows, then up rows)")
    i = i2 // 2
    if tuple(w2.shape) != (e_, h, i):
        raise ProblemError("moe.input", f"w2 has shape {tuple(w2.shape)}, expected (E, H, I) = {(e_, h, i)} from "
                           f"w13 {tuple(w13.shape)} and x {tuple(x.shape)}")
    for name, t in named.items():
        if t.numel() and t.stride(-1) != 1:
            raise ProblemError("moe.input", f"{name} has strides {tuple(t.stride())}: its last mode must be "
                               "contiguous (call .contiguous())")
    for name in ("x", "w13", "w2"):
        t = named[name]
        if not t.is_contiguous():
            raise ProblemError("moe.input", f"{name} has strides {tuple(t.stride())}: expected a contiguous tensor")
        if has_device_data(t) and t.data_ptr() % 16:
            raise ProblemError("tma.alignment", f"{name}'s data pointer is not 16-byte aligned (TMA global address rule)")
    prob = MoEProblem(t_, e_, k, h, i, dt).validate()
    if padding not in ("refuse", "skip", "unchecked"):
        raise ProblemError("moe.input", f"padding={padding!r}: expected 'refuse', 'skip' or 'unchecked'")
    if padding != "unchecked" and topk_ids.numel():
        check_routing_values(topk_ids, topk_weights, e_, skip_padding=padding == "skip")
    return prob


def check_routing_values(topk_ids: Any, topk_weights: Any, experts: int, *, skip_padding: bool = False) -> None:
    """The router's values (torch tensors ``(T, k)`` of any device, shapes and dtypes already checked) against
    :func:`~argus_cutlass.kernels.moe.problem.routing_value_errors`' rules (ids in [0, E) or ``-1`` padding with
    ``skip_padding``, no expert twice in a token, finite routed weights): whether any is broken is found on the
    tensors' device and read with one synchronisation; only then are they copied to the host for the message.

    Raises:
        ProblemError: ``moe.input`` naming the first bad ``topk_ids[t, j]`` or ``topk_weights[t, j]`` and the rule.
    """
    import torch

    ids = topk_ids.long()
    pad = (ids == -1) if skip_padding else torch.zeros_like(ids, dtype=torch.bool)
    key = torch.where(pad, -2 - torch.arange(ids.shape[1], device=ids.device), ids)   # padding slots never repeat
    srt = key.sort(dim=1).values
    flags = torch.stack([(((ids < 0) | (ids >= experts)) & ~pad).any(), (srt[:, 1:] == srt[:, :-1]).any(),
                         (~torch.isfinite(topk_weights) & ~pad).any()])
    if any(flags.tolist()):
        errs = routing_value_errors(ids.cpu().numpy(), topk_weights.detach().float().cpu().numpy(), experts,
                                    skip_padding=skip_padding, rule="moe.input")
        raise errs[0]


class MoEKernelLibrary:
    """The built ``.so`` of one MoE layer: ``lib(x, ids, weights, w13, w2, y, workspace, T, stream)``.

    Symbols (``templates/moe/layer.cu.j2``): ``<name>``, ``<name>_workspace_bytes``,
    ``<name>_padded_rows``, ``<name>_error_string``.

    Raises:
        LaunchError: ``launch.load`` / ``launch.symbol`` when the library or a symbol is missing.
    """

    def __init__(self, path: str | Path, name: str, layer: Any) -> None:
        try:
            self._dll = ctypes.CDLL(str(path))
        except OSError as exc:
            raise LaunchError("launch.load", f"cannot load {path}: {exc}") from None
        self.name, self.layer, self.path = name, layer, str(path)
        try:
            self._run = getattr(self._dll, name)
            self._ws = getattr(self._dll, f"{name}_workspace_bytes")
            self._err = getattr(self._dll, f"{name}_error_string")
        except AttributeError as exc:
            raise LaunchError("launch.symbol", f"{path} lacks a symbol of {name}: {exc}") from None
        vp, i32, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64
        self._run.argtypes = [vp, vp, vp, vp, vp, vp, vp, i64, i32, vp]
        self._run.restype = i32
        self._ws.argtypes = [i32]
        self._ws.restype = i64
        self._err.argtypes = [i32]
        self._err.restype = ctypes.c_char_p

    def workspace_bytes(self, tokens: int) -> int:
        """Bytes of device workspace for ``tokens`` tokens."""
        return int(self._ws(int(tokens)))

    def __call__(self, x: Any, ids32: Any, weights32: Any, w13: Any, w2: Any, y: Any, workspace: Any,
                 tokens: int, stream: int = 0) -> None:
        """Launch the layer (stream-ordered; no host synchronisation). ``ids32`` int32 and
        ``weights32`` fp32 (T, k) contiguous; ``workspace`` a uint8 tensor of at least
        :meth:`workspace_bytes`.

        Raises:
            LaunchError: ``launch.refused`` with the entry's error text.
        """
        rc = self._run(x.data_ptr(), ids32.data_ptr(), weights32.data_ptr(), w13.data_ptr(), w2.data_ptr(),
                       y.data_ptr(), workspace.data_ptr(), workspace.numel(), int(tokens), int(stream))
        if rc:
            raise LaunchError("launch.refused", f"{self.name} returned {rc}: {self._err(rc).decode()}")

    def forward(self, x: Any, topk_ids: Any, topk_weights: Any, w13: Any, w2: Any, *, workspace: Any = None,
                padding: str = "refuse") -> Any:
        """``y`` (T, H) in x's dtype: the layer on torch tensors (see :func:`check_inputs`).

        Raises:
            ProblemError: a bad input (named); LaunchError: the entry refused the launch.
        """
        import torch

        prob = check_inputs(x, topk_ids, topk_weights, w13, w2, padding=padding)
        lay = self.layer
        got = (prob.experts, prob.topk, prob.hidden, prob.ffn, prob.dtype)
        built = (lay.experts, lay.topk, lay.hidden, lay.ffn, lay.dtype)
        if got != built:
            raise ProblemError("moe.input", f"the tensors describe (E, k, H, I, dtype) = {got}, this kernel was built "
                               f"for {built}")
        ids32 = topk_ids.to(torch.int32).contiguous()
        w32 = topk_weights.to(torch.float32).contiguous()
        need = self.workspace_bytes(prob.tokens)
        if workspace is None or workspace.numel() < need:
            workspace = torch.empty(need, dtype=torch.uint8, device=x.device)
        y = torch.empty_like(x)
        self(x, ids32, w32, w13, w2, y, workspace, prob.tokens, torch.cuda.current_stream(x.device).cuda_stream)
        return y
