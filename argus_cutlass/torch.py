"""The kernel families as torch ops: :func:`gemm`, :func:`attention`, :func:`moe` and :func:`precompile`.

Each op is a ``torch.library`` custom op in the ``argus`` namespace with a fake (meta)
implementation that states its outputs' shapes, dtypes and strides and checks the inputs' static
rules, so ``torch.compile(fullgraph=True)`` traces it without a graph break and a CUDA graph can
capture it:

=====================  ==================================================================  ==========
op                     schema (abridged)                                                   mutates
=====================  ==================================================================  ==========
``argus::gemm``        ``(a, b, bias?, out_dtype?) -> Tensor`` (M x N, row-major)          nothing
``argus::gemm_out``    ``(a, b, bias?, Tensor(a!) out) -> ()``                             ``out``
``argus::attention``   ``(q, k, v, cu_seqlens_q?, cu_seqlens_k?, seqused_k?, causal,       nothing
                       softmax_scale?, max_seqlen_q?, max_seqlen_k?) -> (o, lse)``
``argus::moe``         ``(x, topk_ids, topk_weights, w13, w2) -> y``                       nothing
=====================  ==================================================================  ==========

Dispatch: at each call the op reads the problem from the tensors (GEMM: the layout letters and
leading dimensions from the strides, :func:`gemm_problem`), takes its configuration from the
orchestrator (:func:`argus_cutlass.generate.configure`; GEMM once per shape and process,
:func:`argus_cutlass.api.gemm_config`; attention and MoE once per shape bucket, ``api.attention_kernel``,
``api.moe_kernel``) and the
kernel built for that configuration (GEMM: and for the call's staging plan,
:func:`argus_cutlass.api.gemm_kernel_key`; loaded once per process; a first use compiles it through
the disk cache). Inside a CUDA graph capture nothing is built: a kernel that is not loaded yet raises
:class:`~argus_cutlass.errors.NotPrecompiledError`; call :func:`precompile` with the shapes first.
Inside a capture the ops also skip the host reads of their index tensors (attention
``cu_seqlens`` / ``seqused_k``, MoE ``topk_ids``): the kernels bound every index themselves.

Bad input (a CPU tensor, an unsupported dtype, a non-contiguous last mode, shapes that disagree)
raises :class:`~argus_cutlass.errors.ProblemError` naming the tensor and the rule, at trace time for
the static rules and before any launch for the rest. A GEMM whose strides, extents or addresses
break only TMA's 16-byte rules is no error: it runs through aligned staging (a kernel that copies
those operands, with a warning once per kernel; :func:`gemm`). Attention and MoE still refuse such
tensors. Forward only: no autograd formula is registered.

Needs torch >= 2.4 (``torch.library.custom_op``); importing this module without torch raises
:class:`~argus_cutlass.errors.ToolchainError`.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterable
from typing import Any

from argus_cutlass import api
from argus_cutlass.errors import ProblemError, ToolchainError
from argus_cutlass.kernels.gemm.problem import STAGEABLE, TMA_ALIGN_BYTES, GemmProblem

try:
    import torch
except ImportError:  # pragma: no cover - exercised only without torch
    raise ToolchainError("toolchain.torch", "argus_cutlass.torch needs torch (>= 2.4)",
                         "pip install torch (a CUDA build)") from None

if not hasattr(torch.library, "custom_op"):  # pragma: no cover - torch < 2.4
    raise ToolchainError("toolchain.torch", f"argus_cutlass.torch needs torch >= 2.4 (torch.library.custom_op); "
                         f"this is torch {torch.__version__}", "pip install -U torch")

__all__ = ["attention", "gemm", "gemm_problem", "moe", "precompile"]

_IN_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16"}
_OUT_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}


def _capturing() -> bool:
    """True inside a CUDA graph capture on the current stream (then nothing may be built or read back)."""
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _stream(t: Any) -> int:
    return torch.cuda.current_stream(t.device).cuda_stream


# ---- GEMM ---------------------------------------------------------------------------------------


def _storage_order(t: Any, name: str, rows: str, cols: str) -> tuple[str, int]:
    """``("row", ld)`` when ``t``'s second mode is contiguous, ``("col", ld)`` when its first is (a
    transposed view); a mode of extent 1 may have any stride."""
    r, c = (int(x) for x in t.shape)
    sr, sc = (int(x) for x in t.stride())
    if sc == 1 and (sr >= c or r == 1):
        return "row", sr if r > 1 else c
    if sr == 1 and (sc >= r or c == 1):
        return "col", sc if c > 1 else r
    if c == 1 and (sr >= 1 or r == 1):
        return "row", sr if r > 1 else 1
    if sc == 1:  # overlapping rows: GemmProblem.validate names the leading dimension
        return "row", sr
    raise ProblemError(
        "problem.layout",
        f"{name} ({rows} x {cols} = {tuple(t.shape)}) has strides {tuple(t.stride())}: neither {cols} (row-major) "
        f"nor {rows} (column-major, a transposed view) is contiguous", f"pass {name}.contiguous()")


def _check_args(rule: str, required: dict[str, Any], optional: dict[str, Any] | None = None) -> None:
    """Refuse, before torch's schema check of an op's arguments (its message names C++ types: a string
    ``out_dtype`` was "Expected a value of type 'Optional[int]'"), a ``required`` argument that is not a tensor
    and an ``optional`` one that is neither a tensor nor None.

    Raises:
        ProblemError: ``rule`` naming the argument and the type it got.
    """
    for name, t in [*required.items(), *(optional or {}).items()]:
        if not isinstance(t, torch.Tensor) and (t is not None or name in required):
            raise ProblemError(rule, f"{name} must be a torch tensor, got {type(t).__name__}")


def _check_tensor(t: Any, name: str, rank: int, device: Any = None) -> None:
    _check_args("problem.tensor", {name: t})
    if t.device.type != "cuda":
        raise ProblemError("problem.device", f"{name} is on {t.device}; the kernels need CUDA tensors",
                           f"move it with {name}.cuda()")
    if device is not None and t.device != device:
        raise ProblemError("problem.device", f"{name} is on {t.device}, a on {device}: all tensors on one device")
    if t.dim() != rank:
        raise ProblemError("problem.tensor", f"{name} has shape {tuple(t.shape)}: expected {rank} dimensions")


def gemm_problem(a: Any, b: Any, *, out_dtype: Any = None, bias: Any = None, out: Any = None) -> GemmProblem:
    """The validated :class:`~argus_cutlass.kernels.gemm.problem.GemmProblem` of ``a @ b`` (+ bias)
    written into ``out`` (or a new row-major M x N tensor): the layout letters and leading
    dimensions come from the strides, and ``unaligned`` names the operands (``A`` = a, ``B`` = b,
    ``D`` = out) whose first element is not 16-byte aligned (read on tensors with memory; empty while
    tracing). It is checked with :meth:`GemmProblem.validate_any`: TMA's 16-byte rules are no error
    (``problem.staging()`` names the operands the kernel will stage, see :func:`gemm`).

    Args:
        a: ``(M, K)`` bf16/fp16 CUDA tensor; row-major (K contiguous: layout ``t.``, lda =
            ``a.stride(0)``) or column-major (M contiguous, e.g. ``x.t()``: ``n.``, lda = ``a.stride(1)``).
        b: ``(K, N)``, a's dtype; row-major (N contiguous: ``.t``, ldb = ``b.stride(0)``) or
            column-major (K contiguous, e.g. ``w.t()`` of an N x K weight: ``.n``, ldb = ``b.stride(1)``).
        out_dtype: bf16, fp16 or fp32 (default a's dtype; ``out``'s when given).
        bias: broadcastable to ``(M, N)`` (e.g. ``(N,)``), any floating dtype.
        out: ``(M, N)`` with a contiguous last mode (ldd = ``out.stride(0)``).

    Raises:
        ProblemError: naming the tensor: ``problem.tensor`` / ``problem.device`` /
            ``problem.dtype`` / ``problem.shape`` / ``problem.layout``, or a rule of
            :meth:`GemmProblem.validate_any` (``problem.ld``, overlapping rows; ``problem.size``,
            ``problem.k_range``; A/B/D there are a/b/out).

    >>> import torch
    >>> from torch._subclasses.fake_tensor import FakeTensorMode
    >>> with FakeTensorMode():
    ...     p = gemm_problem(torch.empty(1000, 300, dtype=torch.bfloat16, device="cuda").t(),  # M=300, M-major
    ...                      torch.empty(1000, 512, dtype=torch.bfloat16, device="cuda"))
    >>> (p.layout, p.lda, [s.text() for s in p.staging()])
    ('nt', 300, ['A (lda=300: 600 bytes, not a multiple of 16)'])
    """
    _check_tensor(a, "a", 2)
    _check_tensor(b, "b", 2, a.device)
    if a.dtype not in _IN_DTYPES:
        raise ProblemError("problem.dtype", f"a has dtype {a.dtype}; the kernels take torch.bfloat16 or torch.float16")
    if b.dtype != a.dtype:
        raise ProblemError("problem.dtype", f"b has dtype {b.dtype}, a {a.dtype}: a and b must agree")
    m, k = (int(x) for x in a.shape)
    k2, n = (int(x) for x in b.shape)
    if k2 != k:
        raise ProblemError("problem.shape", f"a is {tuple(a.shape)} (M x K) and b is {tuple(b.shape)} (K x N): "
                           f"K disagrees ({k} vs {k2})")
    if out is not None:
        _check_tensor(out, "out", 2, a.device)
        if out_dtype is not None and out.dtype != out_dtype:
            raise ProblemError("problem.dtype", f"out has dtype {out.dtype}, out_dtype is {out_dtype}")
        out_dtype = out.dtype
    out_dtype = a.dtype if out_dtype is None else out_dtype
    if out_dtype not in _OUT_DTYPES:
        raise ProblemError("problem.dtype", f"out_dtype {out_dtype} is not one of torch.bfloat16, torch.float16, "
                           "torch.float32")
    ldd = n
    if out is not None:
        if tuple(out.shape) != (m, n):
            raise ProblemError("problem.shape", f"out has shape {tuple(out.shape)}; a @ b is {(m, n)}")
        if n > 1 and out.stride(1) != 1:
            raise ProblemError("problem.layout", f"out has strides {tuple(out.stride())}: its last mode (N) must be "
                               "contiguous (the kernel writes row-major D)", "pass a row-major out")
        ldd = int(out.stride(0)) if m > 1 else n
    if bias is not None:
        if not isinstance(bias, torch.Tensor):
            raise ProblemError("problem.tensor", f"bias must be a torch tensor, got {type(bias).__name__}")
        if bias.device != a.device:
            raise ProblemError("problem.device", f"bias is on {bias.device}, a on {a.device}")
        if not bias.dtype.is_floating_point:
            raise ProblemError("problem.dtype", f"bias has dtype {bias.dtype}: expected a floating dtype")
        try:
            shape = torch.broadcast_shapes(tuple(bias.shape), (m, n))
        except RuntimeError:
            shape = None
        if shape != (m, n):
            raise ProblemError("problem.shape", f"bias has shape {tuple(bias.shape)}: not broadcastable to "
                               f"a @ b's {(m, n)}")
    orders = {}
    for name, t, rows, cols in (("a", a, "M", "K"), ("b", b, "K", "N")):
        orders[name] = _storage_order(t, name, rows, cols)
    (ao, lda), (bo, ldb) = orders["a"], orders["b"]
    layout = ("t" if ao == "row" else "n") + ("t" if bo == "row" else "n")
    problem = GemmProblem(m, n, k, _IN_DTYPES[a.dtype], _OUT_DTYPES[out_dtype], layout, lda, ldb, ldd, ldd,
                          unaligned=_unaligned(A=a, B=b, D=out))
    errs = problem.violations(STAGEABLE)
    if errs:
        where = (f"gemm(a {tuple(a.shape)} strides {tuple(a.stride())}, b {tuple(b.shape)} strides "
                 f"{tuple(b.stride())}; layout {layout!r}, A = a, B = b, D = out)")
        ProblemError.raise_all([ProblemError(e.rule, f"{where}: {e.message}", e.hint) for e in errs], where)
    return problem


#: the argument of :func:`gemm` each operand of the C ABI is
_TENSOR_NAMES = {"A": "a", "B": "b", "D": "out"}


def _unaligned(**operands: Any) -> tuple[str, ...]:
    """The operands (``A``, ``B``, ``D``, in that order) whose first element is not 16-byte aligned
    (TMA's global-address rule: the kernel stages them). A tensor without memory (a FakeTensor while
    tracing, a meta tensor) has no address to read: it counts as aligned, and the real call reads it."""
    from argus_cutlass.runtime.launch import has_device_data

    return tuple(name for name in STAGEABLE
                 if (t := operands.get(name)) is not None and t.numel() and has_device_data(t)
                 and t.data_ptr() % TMA_ALIGN_BYTES)


def _direct_c(bias: Any, out: Any) -> bool:
    """Whether ``bias`` can be the kernel's C as it is: a full (M, N) tensor of D's dtype with a
    contiguous last mode and a row pitch >= N. C is read element by element by the epilogue (never
    through TMA), so any pitch and any (element-aligned) address serve."""
    if bias is None or tuple(bias.shape) != tuple(out.shape) or bias.dtype != out.dtype:
        return False
    m, n = (int(x) for x in out.shape)
    return (n == 1 or bias.stride(1) == 1) and (m == 1 or bias.stride(0) >= n)


#: the kernel keys (:func:`argus_cutlass.api.gemm_kernel_key`) whose staging :func:`gemm` has warned about
_STAGED_WARNED: set[Any] = set()


def _warn_staged(problem: GemmProblem, tensors: dict[str, Any]) -> None:
    """Say once per staged kernel which tensors break which TMA rule and that they are copied."""
    plan = problem.staging()
    if not plan:
        return
    key = api.gemm_kernel_key(problem)
    if key in _STAGED_WARNED:
        return
    _STAGED_WARNED.add(key)
    parts = []
    for s in plan:
        name, t = _TENSOR_NAMES[s.name], tensors[s.name]
        for reason, rule in zip(s.reasons, s.rules):
            if rule == "tma.address_alignment":
                reason = (f"starts at 0x{t.data_ptr():x}, not {TMA_ALIGN_BYTES}-byte aligned (a view at element "
                          f"offset {t.storage_offset()})")
            parts.append(f"{name}: {reason} ({rule})")
    names = ", ".join(s.name for s in plan[:-1]) + (" and " if len(plan) > 1 else "") + plan[-1].name
    warnings.warn(
        f"{'; '.join(parts)}; argus_cutlass.torch.gemm stages {names} through an aligned copy (slower: an extra "
        f"pass over each, and a stream-ordered workspace, {problem.staging_bytes()} bytes for this call). "
        f"For the direct TMA path give every leading dimension and contiguous extent a multiple of "
        f"{TMA_ALIGN_BYTES} bytes and start each tensor at a {TMA_ALIGN_BYTES}-byte aligned address "
        "(said once per kernel)", UserWarning, stacklevel=3)


def _gemm_into(a: Any, b: Any, bias: Any, out: Any) -> None:
    problem = gemm_problem(a, b, bias=bias, out=out)
    m, n = problem.m, problem.n
    c, beta = None, 0.0
    if bias is not None:
        if _direct_c(bias, out):
            c, beta = bias, 1.0
            problem = dataclasses.replace(problem, ldc=int(bias.stride(0)) if m > 1 else n)
        else:
            # The documented fallback: D starts as the broadcast bias (rounded to D's dtype) and the
            # epilogue adds it as C = D with beta = 1 (each element of C is read by the tile that then
            # writes the same element of D, so the in-place epilogue is exact).
            out.copy_(bias.expand(m, n))
            c, beta = out, 1.0
    lib = api.gemm_kernel(problem, build=not _capturing())
    _warn_staged(problem, {"A": a, "B": b, "D": out})
    with torch.cuda.device(a.device):
        lib.run(problem, a, b, c, out, 1.0, beta, stream=_stream(a))


@torch.library.custom_op("argus::gemm", mutates_args=(),
                         schema="(Tensor a, Tensor b, Tensor? bias, ScalarType? out_dtype) -> Tensor")
def _gemm_op(a, b, bias, out_dtype):  # noqa: ANN001, ANN202 - the schema types it
    problem = gemm_problem(a, b, out_dtype=out_dtype, bias=bias)
    out = torch.empty((problem.m, problem.n), dtype=_torch_out(problem), device=a.device)
    _gemm_into(a, b, bias, out)
    return out


@_gemm_op.register_fake
def _gemm_fake(a, b, bias, out_dtype):  # noqa: ANN001, ANN202
    problem = gemm_problem(a, b, out_dtype=out_dtype, bias=bias)
    return a.new_empty((problem.m, problem.n), dtype=_torch_out(problem))


@torch.library.custom_op("argus::gemm_out", mutates_args=("out",),
                         schema="(Tensor a, Tensor b, Tensor? bias, Tensor(a!) out) -> ()")
def _gemm_out_op(a, b, bias, out):  # noqa: ANN001, ANN202
    _gemm_into(a, b, bias, out)


@_gemm_out_op.register_fake
def _gemm_out_fake(a, b, bias, out):  # noqa: ANN001, ANN202
    gemm_problem(a, b, bias=bias, out=out)


def _torch_out(problem: GemmProblem) -> Any:
    return {v: k for k, v in _OUT_DTYPES.items()}[problem.out_dtype]


def gemm(a: Any, b: Any, *, out_dtype: Any = None, bias: Any = None, out: Any = None) -> Any:
    """``a @ b (+ bias)`` with fp32 accumulation through a generated kernel (``argus::gemm``, or
    ``argus::gemm_out`` writing ``out`` in place and returning it).

    Args:
        a, b, out_dtype, bias, out: as :func:`gemm_problem` (any of the four layouts ``tn``, ``nt``,
            ``nn``, ``tt`` from the strides; no copy of a or b is made).

    Returns:
        ``(M, N)`` row-major tensor of ``out_dtype`` (``out`` itself when given).

    Raises:
        ProblemError: as :func:`gemm_problem`; NotPrecompiledError: inside a CUDA graph capture
            for a shape whose kernel :func:`precompile` did not build; and the build errors of
            :func:`argus_cutlass.api.gemm_kernel` on a first use.

    Bias: a full ``(M, N)`` bias of D's dtype with a contiguous last mode (any row pitch >= N, any
    address) is the epilogue's C (``beta = 1``). Any other broadcastable bias (e.g. ``(N,)``) is first
    written into D (rounded to D's dtype) and added by the epilogue as ``C = D``: one extra M x N
    write, no extra allocation.

    Alignment: TMA needs every leading dimension and contiguous extent of a, b and out to be a
    multiple of 16 bytes and their first elements 16-byte aligned. A call that breaks any of these
    (e.g. a column-major ``a`` with M = 300 bf16, lda = 600 bytes; N = 33; a view ``x[:, 1:]``) is
    not refused: it runs a kernel of the aligned staging path (``_stgA`` / ``_stgB`` / ``_stgD`` in
    its name, :meth:`GemmProblem.staging` says which operands and why) that copies those operands
    into zero-padded, aligned buffers of a stream-ordered workspace (``cudaMallocAsync``, legal in a
    CUDA graph capture) around the same verified TMA GEMM, and writes exactly the ``M x N`` region of
    ``out`` (its padding is not touched). That is slower (an extra pass over each staged operand),
    so it warns once per kernel (``UserWarning`` naming the tensor and the rule). The kernel is
    chosen per shape *and* staging plan: an aligned call never runs a staged kernel.
    :func:`precompile` of :func:`gemm_problem` on the real tensors builds the staged kernel for a
    capture.
    """
    _check_tensor(a, "a", 2)  # before torch's schema check, so a non-tensor gets our message
    _check_tensor(b, "b", 2, a.device)
    _check_args("problem.tensor", {}, {"bias": bias, "out": out})
    if out_dtype is not None and not isinstance(out_dtype, torch.dtype):
        raise ProblemError("problem.dtype", f"out_dtype {out_dtype!r} is a {type(out_dtype).__name__}, not a "
                           "torch.dtype: torch.bfloat16, torch.float16 or torch.float32")
    if out is not None:
        torch.ops.argus.gemm_out(a, b, bias, out)
        return out
    return torch.ops.argus.gemm(a, b, bias, out_dtype)


# ---- attention -----------------------------------------------------------------------------------


def _attention_problem(q: Any, k: Any, v: Any, causal: bool, softmax_scale: Any, cu_seqlens_q: Any,
                       cu_seqlens_k: Any, max_seqlen_q: Any, max_seqlen_k: Any, seqused_k: Any,
                       read_lengths: bool) -> Any:
    from argus_cutlass.kernels.attention.library import problem_from_tensors

    return problem_from_tensors(q, k, v, causal=causal, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                                seqused_k=seqused_k, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
                                softmax_scale=softmax_scale, read_lengths=read_lengths)


_ATTENTION_SCHEMA = ("(Tensor q, Tensor k, Tensor v, Tensor? cu_seqlens_q, Tensor? cu_seqlens_k, Tensor? seqused_k, "
                     "bool causal, float? softmax_scale, int? max_seqlen_q, int? max_seqlen_k) -> (Tensor, Tensor)")


def _attention_impl(q: Any, k: Any, v: Any, cu_seqlens_q: Any, cu_seqlens_k: Any, seqused_k: Any, causal: bool,
                    softmax_scale: Any, max_seqlen_q: Any, max_seqlen_k: Any) -> tuple[Any, Any]:
    """The real ``argus::attention``: configured and built through :func:`argus_cutlass.api.attention`."""
    capturing = _capturing()
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    if varlen and capturing and q.shape[0] == 0:
        _attention_problem(q, k, v, causal, softmax_scale, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           seqused_k, False)
        return _attention_outputs(q, cu_seqlens_q)
    o, lse = api.attention(q, k, v, causal=causal, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                           max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, seqused_k=seqused_k,
                           softmax_scale=softmax_scale, build=not capturing, read_lengths=not capturing)
    return o, lse


@torch.library.custom_op("argus::attention", mutates_args=(), schema=_ATTENTION_SCHEMA)
def _attention_op(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, causal, softmax_scale,  # noqa: ANN001, ANN202
                  max_seqlen_q, max_seqlen_k):
    return _attention_impl(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, causal, softmax_scale, max_seqlen_q,
                           max_seqlen_k)


def _attention_outputs(q: Any, cu_seqlens_q: Any) -> tuple[Any, Any]:
    """Empty ``(o, lse)`` as the kernel library allocates them: o contiguous like q, lse fp32
    ``(batch, heads, seqlen_q)`` or, varlen, ``(heads, total_q)``."""
    if cu_seqlens_q is not None:
        lse_shape = (q.shape[1], q.shape[0])
    else:
        lse_shape = (q.shape[0], q.shape[2], q.shape[1])
    return q.new_empty(q.shape), q.new_empty(lse_shape, dtype=torch.float32)


@_attention_op.register_fake
def _attention_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, causal, softmax_scale,  # noqa: ANN001, ANN202
                    max_seqlen_q, max_seqlen_k):
    _attention_problem(q, k, v, causal, softmax_scale, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                       seqused_k, False)
    return _attention_outputs(q, cu_seqlens_q)


def attention(q: Any, k: Any, v: Any, *, causal: bool = False, softmax_scale: float | None = None,
              cu_seqlens_q: Any = None, cu_seqlens_k: Any = None, max_seqlen_q: int | None = None,
              max_seqlen_k: int | None = None, seqused_k: Any = None) -> tuple[Any, Any]:
    """FlashAttention forward (``argus::attention``): ``(o, lse)``.

    Args:
        q: ``(batch, seqlen_q, heads, head_dim)`` bf16/fp16 CUDA tensor, or packed ``(total_q, heads,
            head_dim)`` with ``cu_seqlens_q``; k, v: ``(batch, seqlen_k, kv_heads, head_dim)`` or packed;
            kv_heads divides heads; head_dim in 64, 96, 128, 192, 256, contiguous; other strides
            multiples of 16 bytes.
        causal: bottom-right aligned causal mask.
        cu_seqlens_q, cu_seqlens_k: int32 ``(batch + 1,)`` (varlen); seqused_k: int32 ``(batch,)``.
        max_seqlen_q, max_seqlen_k: varlen maxima (read from cu_seqlens when None; inside a CUDA
            graph capture, where nothing is read back, the packed row counts are used as bounds:
            pass them there, or the shape bucket, hence the kernel, may differ from the one
            :func:`precompile` built).
        softmax_scale: default ``1 / sqrt(head_dim)``.

    Returns:
        ``o`` (q's shape and dtype, contiguous) and ``lse`` (fp32, natural log, contiguous
        ``(batch, heads, seqlen_q)``, or ``(heads, total_q)`` with varlen).

    Raises:
        ProblemError: a tensor rule of :mod:`argus_cutlass.kernels.attention.library` (names the
            tensor); NotPrecompiledError: inside a capture, for a kernel :func:`precompile` did not build.
    """
    _check_args("problem.tensor", {"q": q, "k": k, "v": v},
                {"cu_seqlens_q": cu_seqlens_q, "cu_seqlens_k": cu_seqlens_k, "seqused_k": seqused_k})
    return torch.ops.argus.attention(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, bool(causal),
                                     None if softmax_scale is None else float(softmax_scale),
                                     max_seqlen_q, max_seqlen_k)


# ---- MoE -------------------------------------------------------------------------------------------


def _moe_impl(x: Any, topk_ids: Any, topk_weights: Any, w13: Any, w2: Any) -> Any:
    """The real ``argus::moe``: configured and built through :func:`argus_cutlass.api.moe`."""
    capturing = _capturing()
    return api.moe(x, topk_ids, topk_weights, w13, w2, padding="unchecked" if capturing else "refuse",
                   build=not capturing)


@torch.library.custom_op("argus::moe", mutates_args=(),
                         schema="(Tensor x, Tensor topk_ids, Tensor topk_weights, Tensor w13, Tensor w2) -> Tensor")
def _moe_op(x, topk_ids, topk_weights, w13, w2):  # noqa: ANN001, ANN202
    return _moe_impl(x, topk_ids, topk_weights, w13, w2)


@_moe_op.register_fake
def _moe_fake(x, topk_ids, topk_weights, w13, w2):  # noqa: ANN001, ANN202
    from argus_cutlass.kernels.moe.library import check_inputs

    check_inputs(x, topk_ids, topk_weights, w13, w2, padding="unchecked")
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def moe(x: Any, topk_ids: Any, topk_weights: Any, w13: Any, w2: Any) -> Any:
    """One MoE layer with SwiGLU experts (``argus::moe``): ``y`` ``(T, H)``, x's dtype, contiguous.

    Args:
        x: ``(T, H)`` bf16/fp16, contiguous; topk_ids: ``(T, k)`` integer ids in [0, E);
        topk_weights: ``(T, k)`` floating; w13: ``(E, 2I, H)`` (gate rows, then up rows); w2: ``(E, H, I)``.

    Raises:
        ProblemError: ``moe.input`` naming the tensor (:func:`argus_cutlass.kernels.moe.library.check_inputs`);
            ids outside [0, E) (and an expert twice in a token's slots, a non-finite weight) are
            refused outside a capture (read on the host); inside one the kernel skips ids outside [0, E).
            NotPrecompiledError: inside a capture, for a layer not precompiled.
    """
    _check_args("moe.input", {"x": x, "topk_ids": topk_ids, "topk_weights": topk_weights, "w13": w13, "w2": w2})
    return torch.ops.argus.moe(x, topk_ids, topk_weights, w13, w2)


# ---- ahead of time -----------------------------------------------------------------------------


def precompile(*problems: Any, workers: int | None = None) -> int:
    """Build the kernels of ``problems`` in parallel (through the orchestrator's ``build_jobs`` and the
    disk cache) and load them, so that later calls of the same shapes (GEMM; attention and MoE: shape
    buckets), in a CUDA graph capture too, find them; returns how many kernels were built (0 when all
    were loaded already).

    Args:
        problems: :class:`~argus_cutlass.kernels.gemm.problem.GemmProblem` (e.g. from
            :func:`gemm_problem` on example tensors, or ``GemmProblem(M, N, K, "bf16", "bf16", "tn")``),
            :class:`~argus_cutlass.kernels.attention.problem.AttentionProblem`,
            :class:`~argus_cutlass.kernels.moe.problem.MoEProblem`, or iterables of them.

    Raises:
        ProblemError: a problem breaks a rule; ToolchainError / CompileError / VerificationError: a build failed.
    """
    flat: list[Any] = []
    for p in problems:
        if isinstance(p, Iterable) and not isinstance(p, (str, bytes)):
            flat.extend(p)
        else:
            flat.append(p)
    return api.precompile(flat, workers=workers)
