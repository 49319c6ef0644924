"""A built attention library (``.so``) loaded through its C ABI, and the tensor rules of its callers.

:class:`AttentionKernelLibrary` binds ``<name>``, ``<name>_smem_bytes``, ``<name>_threads``,
``<name>_head_dim``, ``<name>_causal`` (checked against the configuration at load) and ``<name>_error_string`` (:mod:`argus_cutlass.kernels.attention.problem`
gives the ABI). :meth:`AttentionKernelLibrary.forward` takes torch tensors, checks them
(:func:`problem_from_tensors`) and returns ``(o, lse)``; nothing the kernel would read or write out
of bounds reaches the GPU:

=========================  ==========================================================================
rule                       what is checked (before any launch)
=========================  ==========================================================================
``problem.tensor``         q, k, v are CUDA tensors of rank 4 (fixed) or 3 (varlen: packed rows)
``problem.dtype``          q, k, v (and ``out``) share the kernel's dtype; lengths arrays are int32
``problem.device``         every tensor is on the same CUDA device
``problem.shape``          batch, head dim and kv heads agree between q, k and v; ``out`` / ``lse``
                           have the shapes the kernel writes
``problem.layout``         the head dim is contiguous (stride 1)
``tma.stride_alignment``   every other stride is a multiple of 16 bytes (TMA's global-stride rule)
``tma.address_alignment``  every base address is 16-byte aligned
``problem.cu_seqlens``     ``batch + 1`` entries, starting at 0, non-decreasing, ending at the
                           tensor's row count (read on the host: one device-to-host copy)
``problem.seqused_k``      ``batch`` entries in ``0 ..`` the batch's stored key length
=========================  ==========================================================================
"""

from __future__ import annotations

import ctypes
import math
from pathlib import Path
from typing import Any

from argus_cutlass.errors import LaunchError, ProblemError
from argus_cutlass.kernels.attention.problem import (
    CUDA_ERROR_BASE,
    ENTRY_SIGNATURE,
    ERROR_CODES,
    TMA_ALIGN_BYTES,
    AttentionProblem,
)
from argus_cutlass.runtime.cuda import stream_handle
from argus_cutlass.runtime.launch import KernelLibrary, device_pointer, has_device_data

_CTYPES = {"const void*": ctypes.c_void_p, "void*": ctypes.c_void_p, "int": ctypes.c_int,
           "float": ctypes.c_float, "cudaStream_t": ctypes.c_void_p}
_ENTRY_ARGTYPES = [_CTYPES[t] for _, t in ENTRY_SIGNATURE]
_TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


def _torch() -> Any:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is optional
        from argus_cutlass.errors import ToolchainError

        raise ToolchainError("toolchain.torch", "the attention tensor API needs torch",
                             "pip install torch (a CUDA build)") from None
    return torch


def dtype_name(t: Any) -> str | None:
    """``bf16`` / ``fp16`` for a torch dtype, else None."""
    torch = _torch()
    return {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(t)


def torch_dtype(name: str) -> Any:
    """The torch dtype of ``bf16`` / ``fp16``."""
    return getattr(_torch(), _TORCH_DTYPES[name])


def _strides(t: Any, varlen: bool) -> tuple[int, int, int]:
    """(batch, row, head) element strides of a (B, S, H, D) or packed (T, H, D) tensor; a mode of
    extent 1 gets a canonical stride (its stride never moves an address)."""
    if varlen:
        rows, heads, d = t.shape
        s_row, s_head = t.stride(0), t.stride(1)
        return (0, s_row if rows > 1 else heads * d, s_head if heads > 1 else d)
    b, rows, heads, d = t.shape
    s_b, s_row, s_head = t.stride(0), t.stride(1), t.stride(2)
    return (s_b if b > 1 else 0, s_row if rows > 1 else heads * d, s_head if heads > 1 else d)


def _check_lengths_tensor(name: str, arr: Any, want: int, device: Any) -> None:
    """The rules of an int32 lengths array that need no read of its values: type, dtype, device,
    rank, contiguity and ``want`` entries."""
    torch = _torch()
    rule = "problem.seqused_k" if name == "seqused_k" else "problem.cu_seqlens"
    if not isinstance(arr, torch.Tensor):
        raise ProblemError(rule, f"{name} must be a torch int32 tensor, got {type(arr).__name__}")
    if arr.dtype != torch.int32:
        raise ProblemError("problem.dtype", f"{name} has dtype {arr.dtype}; the kernel reads int32")
    if arr.device != device:
        raise ProblemError("problem.device", f"{name} is on {arr.device}, q on {device}")
    if arr.dim() != 1 or not arr.is_contiguous():
        raise ProblemError(rule, f"{name} must be a contiguous 1-D tensor, got shape {tuple(arr.shape)}")
    if arr.numel() != want:
        raise ProblemError(rule, f"{name} has {arr.numel()} entries; expected {want}")


def _check_lengths(name: str, arr: Any, batch: int, rows: int | None, device: Any) -> list[int]:
    """Host copy of an int32 lengths array, checked against ``batch`` (+1 for cu_seqlens)."""
    rule = "problem.seqused_k" if name == "seqused_k" else "problem.cu_seqlens"
    _check_lengths_tensor(name, arr, batch if rows is None else batch + 1, device)
    vals = [int(x) for x in arr.tolist()]
    if rows is not None:
        if vals[0] != 0:
            raise ProblemError(rule, f"{name}[0]={vals[0]}: cumulative lengths start at 0")
        drops = [i for i in range(batch) if vals[i + 1] < vals[i]]
        if drops:
            i = drops[0]
            raise ProblemError(rule, f"{name} is not non-decreasing: {name}[{i}]={vals[i]} > {name}[{i + 1}]="
                               f"{vals[i + 1]}")
        if vals[-1] != rows:
            raise ProblemError(rule, f"{name}[-1]={vals[-1]} disagrees with the tensor's {rows} packed rows")
    elif any(x < 0 for x in vals):
        raise ProblemError(rule, f"{name}={vals} holds a negative length")
    return vals


def problem_from_tensors(q: Any, k: Any, v: Any, *, causal: bool = False, cu_seqlens_q: Any = None,
                         cu_seqlens_k: Any = None, seqused_k: Any = None, max_seqlen_q: int | None = None,
                         max_seqlen_k: int | None = None, softmax_scale: float | None = None,
                         read_lengths: bool = True) -> AttentionProblem:
    """The validated :class:`AttentionProblem` of torch tensors (see the module docstring's rules).

    Args:
        q: ``(batch, seqlen_q, heads, head_dim)``, or packed ``(total_q, heads, head_dim)`` with
            ``cu_seqlens_q``; k, v: likewise with ``kv_heads`` (dividing heads).
        cu_seqlens_q, cu_seqlens_k: int32 ``(batch + 1,)`` (both or neither).
        seqused_k: int32 ``(batch,)``: keys of batch b past ``seqused_k[b]`` are not attended.
        max_seqlen_q, max_seqlen_k: varlen maxima (computed from cu_seqlens when None; checked
            to be at least the real maxima).
        read_lengths: False: do not read ``cu_seqlens_*`` / ``seqused_k`` on the host (inside a
            CUDA graph capture, or on FakeTensors while tracing): their dtype, device and shape are
            checked, not their values; the problem's per-batch lengths are then placeholders equal
            to ``max_seqlen_q`` / ``max_seqlen_k`` (default: the packed row counts, an upper bound).

    Raises:
        ProblemError: a rule of the module docstring or of :mod:`~argus_cutlass.kernels.attention.problem`.
    """
    torch = _torch()
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ProblemError("problem.tensor", f"{name} must be a torch tensor, got {type(t).__name__}")
        if not t.is_cuda:
            raise ProblemError("problem.device", f"{name} is on {t.device}; the kernel needs CUDA tensors",
                               "move it with .cuda()")
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    if varlen and (cu_seqlens_q is None or cu_seqlens_k is None):
        raise ProblemError("problem.cu_seqlens", "give both cu_seqlens_q and cu_seqlens_k (varlen) or neither")
    rank = 3 if varlen else 4
    layout = "(total, heads, head_dim) with cu_seqlens" if varlen else "(batch, seq, heads, head_dim)"
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != rank:
            raise ProblemError("problem.tensor", f"{name} has shape {tuple(t.shape)}; expected {layout}")
    for name, t in (("k", k), ("v", v)):
        if t.device != q.device:
            raise ProblemError("problem.device", f"{name} is on {t.device}, q on {q.device}")
        if t.dtype != q.dtype:
            raise ProblemError("problem.dtype", f"{name} has dtype {t.dtype}, q {q.dtype}; q, k and v must agree")
    dt = dtype_name(q.dtype)
    if dt is None:
        raise ProblemError("problem.dtype", f"q has dtype {q.dtype}; the kernels take torch.bfloat16 or torch.float16")
    d = q.shape[-1]
    heads, kv_heads = q.shape[-2], k.shape[-2]
    if k.shape[-1] != d or v.shape[-1] != d:
        raise ProblemError("problem.shape", f"head dims differ: q {d}, k {k.shape[-1]}, v {v.shape[-1]}")
    if v.shape[:-1] != k.shape[:-1]:
        raise ProblemError("problem.shape", f"v has shape {tuple(v.shape)}, k {tuple(k.shape)}; they must agree")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.stride(-1) != 1 and t.shape[-1] > 1:
            raise ProblemError("problem.layout", f"{name}'s head dim is not contiguous (stride {t.stride(-1)})",
                               f"pass {name}.contiguous()")
        _check_tma(name, t, varlen)
    if varlen and not read_lengths:
        batch = cu_seqlens_q.numel() - 1 if isinstance(cu_seqlens_q, torch.Tensor) else 0
        for name, arr, want in (("cu_seqlens_q", cu_seqlens_q, batch + 1), ("cu_seqlens_k", cu_seqlens_k, batch + 1),
                                ("seqused_k", seqused_k, batch)):
            if arr is not None:
                _check_lengths_tensor(name, arr, want, q.device)
        if batch < 1:
            raise ProblemError("problem.cu_seqlens", "cu_seqlens_q must hold at least 2 entries (batch >= 1)")
        mq = q.shape[0] if max_seqlen_q is None else max_seqlen_q
        mk = k.shape[0] if max_seqlen_k is None else max_seqlen_k
        problem = AttentionProblem(batch, heads, kv_heads, mq, mk, d, dt, causal, (mq,) * batch, (mk,) * batch,
                                   None, softmax_scale)
    elif varlen:
        cq = _check_lengths("cu_seqlens_q", cu_seqlens_q, cu_seqlens_q.numel() - 1, q.shape[0], q.device)
        batch = len(cq) - 1
        if batch < 1:
            raise ProblemError("problem.cu_seqlens", "cu_seqlens_q must hold at least 2 entries (batch >= 1)")
        ck = _check_lengths("cu_seqlens_k", cu_seqlens_k, batch, k.shape[0], q.device)
        sq = tuple(b - a for a, b in zip(cq, cq[1:]))
        sk = tuple(b - a for a, b in zip(ck, ck[1:]))
        used = None if seqused_k is None else tuple(_check_lengths("seqused_k", seqused_k, batch, None, q.device))
        for name, given, real in (("max_seqlen_q", max_seqlen_q, max(sq)), ("max_seqlen_k", max_seqlen_k, max(sk))):
            if given is not None and given < real:
                raise ProblemError("problem.cu_seqlens", f"{name}={given} is below the longest sequence ({real})")
        problem = AttentionProblem(batch, heads, kv_heads, max(sq) if max_seqlen_q is None else max_seqlen_q,
                                   max(sk) if max_seqlen_k is None else max_seqlen_k, d, dt, causal, sq, sk, used,
                                   softmax_scale)
    else:
        batch = q.shape[0]
        if k.shape[0] != batch:
            raise ProblemError("problem.shape", f"q has batch {batch}, k {k.shape[0]}")
        if seqused_k is None:
            used = None
        elif read_lengths:
            used = tuple(_check_lengths("seqused_k", seqused_k, batch, None, q.device))
        else:
            _check_lengths_tensor("seqused_k", seqused_k, batch, q.device)
            used = None
        problem = AttentionProblem(batch, heads, kv_heads, q.shape[1], k.shape[1], d, dt, causal, None, None, used,
                                   softmax_scale)
    return problem.validate()


def _check_tma(name: str, t: Any, varlen: bool) -> None:
    eb = t.element_size()
    for mode, s in zip(("batch", "row", "head"), _strides(t, varlen)):
        if (s * eb) % TMA_ALIGN_BYTES:
            raise ProblemError(
                "tma.stride_alignment",
                f"{name}'s {mode} stride {s} x {eb} bytes = {s * eb} bytes is not a multiple of {TMA_ALIGN_BYTES} "
                "(a TMA tensor map's global strides must be)", f"pass {name}.contiguous()")
    if t.numel() and has_device_data(t) and t.data_ptr() % TMA_ALIGN_BYTES:
        raise ProblemError("tma.address_alignment",
                           f"{name} starts at 0x{t.data_ptr():x}, not {TMA_ALIGN_BYTES}-byte aligned",
                           "pass the start of an allocation or a view at a 16-byte offset")


class AttentionKernelLibrary(KernelLibrary):
    """A loaded attention kernel ``.so`` (the shared exports: :class:`~argus_cutlass.runtime.launch.KernelLibrary`).

    Args:
        path: the shared library; name: the kernel name (the ``extern "C"`` symbol).
        config: the :class:`~argus_cutlass.kernels.attention.config.AttentionConfig` it was built
            from (its head dim, dtype, mask and length mode are checked against each call).

    Raises:
        LaunchError: ``launch.load`` (dlopen failed), ``launch.symbol`` (missing export),
            ``launch.kernel`` (the built kernel's mask is not the configuration's causal flag).
    """

    def __init__(self, path: str | Path, name: str, config: Any) -> None:
        super().__init__(path, name)
        self.config = config
        self._entry = self._symbol(name)
        self._entry.argtypes = _ENTRY_ARGTYPES
        self._entry.restype = ctypes.c_int
        causal = self._symbol(f"{name}_causal")
        causal.restype = ctypes.c_int
        # the mask the built kernel applies (its mask node, static_asserted equal to the program's spec) is the
        # configuration's: a program whose spec and mask were both changed verifies, and is refused here
        if bool(causal()) != bool(config.causal):
            raise LaunchError("launch.kernel", f"{self.path} applies causal={bool(causal())}, the configuration asks "
                              f"for causal={bool(config.causal)}", "generate the kernel from this configuration")

    def __call__(self, q: Any, k: Any, v: Any, o: Any, lse: Any, batch: int, heads: int, kv_heads: int,
                 seqlen_q: int, seqlen_k: int, total_q: int, total_k: int, cu_seqlens_q: Any, cu_seqlens_k: Any,
                 seqused_k: Any, strides: Any, softmax_scale: float, stream: Any = None) -> None:
        """Enqueue the kernel with raw arguments (see the C ABI); ``strides`` is a pointer to 12
        host int64 values or a ctypes array of them.

        Raises:
            LaunchError: a non-zero return code, with its rule (:data:`ERROR_CODES`).
        """
        if not isinstance(strides, ctypes.Array):
            strides = (ctypes.c_int64 * 12)(*[int(s) for s in strides])
        code = self._entry(
            device_pointer(q, "q"), device_pointer(k, "k"), device_pointer(v, "v"), device_pointer(o, "o"),
            device_pointer(lse, "lse"), int(batch), int(heads), int(kv_heads), int(seqlen_q), int(seqlen_k),
            int(total_q), int(total_k), device_pointer(cu_seqlens_q, "cu_seqlens_q"),
            device_pointer(cu_seqlens_k, "cu_seqlens_k"), device_pointer(seqused_k, "seqused_k"),
            ctypes.cast(strides, ctypes.c_void_p), float(softmax_scale), stream_handle(stream))
        if code != 0:
            if code >= CUDA_ERROR_BASE:
                rule = "launch.cuda"
            else:
                rule = ERROR_CODES.get(code, ("launch.failed", ""))[0]
            raise LaunchError(rule, f"{self.name}(batch={batch}, heads={heads}, kv_heads={kv_heads}, "
                              f"seqlen_q={seqlen_q}, seqlen_k={seqlen_k}) returned {code}: {self.error_string(code)}")

    def check_problem(self, problem: AttentionProblem) -> None:
        """Refuse a problem this kernel was not built for.

        Raises:
            ProblemError: ``problem.kernel`` naming the field that differs.
        """
        c = self.config
        for field, want, got in (("head_dim", c.head_dim, problem.head_dim), ("dtype", c.dtype, problem.dtype),
                                 ("causal", c.causal, problem.causal), ("varlen", c.varlen, problem.varlen)):
            if want != got:
                raise ProblemError("problem.kernel", f"kernel {self.name} is built for {field}={want!r}, the "
                                   f"problem has {field}={got!r}", "generate a kernel for this problem")

    def forward(self, q: Any, k: Any, v: Any, *, causal: bool | None = None, cu_seqlens_q: Any = None,
                cu_seqlens_k: Any = None, seqused_k: Any = None, max_seqlen_q: int | None = None,
                max_seqlen_k: int | None = None, softmax_scale: float | None = None, out: Any = None,
                lse: Any = None, stream: Any = None, problem: AttentionProblem | None = None) -> tuple[Any, Any]:
        """``(o, lse)`` of attention over torch tensors (stream-ordered, no synchronization
        other than the host read of the ``cu_seqlens`` / ``seqused_k`` checks).

        Args:
            q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k,
                softmax_scale: as :func:`problem_from_tensors`; causal: default the kernel's.
            out: ``o`` to write (q's shape and dtype, head dim contiguous, 16-byte strides);
                default a new contiguous tensor.
            lse: fp32 ``(batch, heads, seqlen_q)`` (fixed) or ``(heads, total_q)`` (varlen),
                contiguous; default a new tensor.
            stream: default torch's current stream on q's device.
            problem: skip the tensor checks and use this (already validated) problem.

        Returns:
            ``(o, lse)``: o like q; lse fp32 as above (natural log; ``-inf`` for a row that sees no key).

        Raises:
            ProblemError: a tensor rule (module docstring) or ``problem.kernel``.
            LaunchError: the entry refused the arguments.
        """
        torch = _torch()
        if causal is None:
            causal = self.config.causal
        if problem is None:
            problem = problem_from_tensors(q, k, v, causal=causal, cu_seqlens_q=cu_seqlens_q,
                                           cu_seqlens_k=cu_seqlens_k, seqused_k=seqused_k, max_seqlen_q=max_seqlen_q,
                                           max_seqlen_k=max_seqlen_k, softmax_scale=softmax_scale)
        self.check_problem(problem)
        p = problem
        lse_shape = (p.heads, q.shape[0]) if p.varlen else (p.batch, p.heads, p.seqlen_q)
        if out is None:
            out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        else:
            if tuple(out.shape) != tuple(q.shape) or out.dtype != q.dtype or out.device != q.device:
                raise ProblemError("problem.shape", f"out is {tuple(out.shape)} {out.dtype} on {out.device}; expected "
                                   f"{tuple(q.shape)} {q.dtype} on {q.device}")
            if out.stride(-1) != 1:
                raise ProblemError("problem.layout", "out's head dim is not contiguous")
            _check_tma("out", out, p.varlen)
        if lse is None:
            lse = torch.empty(lse_shape, dtype=torch.float32, device=q.device)
        elif tuple(lse.shape) != lse_shape or lse.dtype != torch.float32 or not lse.is_contiguous() \
                or lse.device != q.device:
            raise ProblemError("problem.shape", f"lse must be a contiguous float32 tensor of shape {lse_shape} on "
                               f"{q.device}, got {tuple(lse.shape)} {lse.dtype}")
        if p.total_q == 0 or p.batch == 0:
            return out, lse
        if p.total_k == 0 or all(lk == 0 for _, lk in p.lengths()):
            out.zero_()
            lse.fill_(-math.inf)
            return out, lse
        strides = []
        for t in (q, k, v, out):
            strides.extend(_strides(t, p.varlen))
        if stream is None:
            stream = torch.cuda.current_stream(q.device).cuda_stream
        with torch.cuda.device(q.device):
            self(q, k, v, out, lse, p.batch, p.heads, p.kv_heads, max(1, p.seqlen_q), max(1, p.seqlen_k),
                 q.shape[0] if p.varlen else 0, k.shape[0] if p.varlen else 0,
                 cu_seqlens_q if p.varlen else None, cu_seqlens_k if p.varlen else None, seqused_k, strides,
                 p.scale, stream)
        return out, lse
