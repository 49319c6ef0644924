"""One attention-forward problem: sizes, lengths, mask and dtype, with the rules the kernel needs.

``O[b, i, h, :] = sum_j softmax_j(scale * Q[b, i, h, :] . K[b, j, h // g, :] + mask(i, j)) V[b, j, h // g, :]``
with ``g = heads // kv_heads`` (grouped-query attention; MQA is ``kv_heads == 1``) and
``LSE[b, h, i] = ln sum_j exp(scale * s_ij)`` over the unmasked keys (``-inf`` for a row that sees
none; its O row is 0).

Lengths
-------
Fixed lengths: Q is ``(batch, seqlen_q, heads, head_dim)`` and K, V are ``(batch, seqlen_k, kv_heads,
head_dim)``, any strides with a contiguous head dim. Variable lengths (``varlen``): Q is packed
``(total_q, heads, head_dim)`` with ``cu_seqlens_q`` (``batch + 1`` int32 offsets, starting at 0,
non-decreasing, ending at ``total_q``), K and V likewise with ``cu_seqlens_k``. In both modes an
optional ``seqused_k`` (``batch`` int32) limits the keys of batch ``b`` to its first
``seqused_k[b]`` (KV-cache slots past it are never read into a result: the kernel masks them and
zeroes their V rows). Causal masks are bottom-right aligned: row ``i`` sees keys
``j <= i + (Lk - Lq)`` where ``Lk`` is the batch's used key length.

Rules checked by :meth:`AttentionProblem.validate` (the ``rule`` of the raised
:class:`~argus_cutlass.errors.ProblemError`):

=========================  ==========================================================================
``attention.head_dim``     head_dim in 64, 96, 128, 192, 256 (FlashAttention-3's set)
``problem.dtype``          bf16 or fp16
``problem.size``           batch, heads, kv_heads >= 1; lengths >= 0 (>= 1 with fixed lengths);
                           everything < 2**31 (the entry takes ``int``)
                           and batch x heads x ceil(seqlen_q / 64) <= 2**31 - 2**16 (the kernel's
                           int count of tiles)
``problem.heads``          heads is a multiple of kv_heads
``problem.length_range``   every length < 2**24 (the mask proofs are stated for lengths < 2^24;
                           the entry returns code 7 beyond)
``problem.seqlens``        per-batch lengths: one per batch, >= 0
``problem.seqused_k``      one per batch, 0 <= seqused_k[b] <= the batch's stored key length
=========================  ==========================================================================

The tensor rules (contiguous head dim, 16-byte strides and addresses, matching dtypes and
devices, ``cu_seqlens`` agreeing with the tensors) are in :mod:`argus_cutlass.kernels.attention.library`.

The C ABI
---------
Every generated attention kernel (``templates/attention/host.j2``) exports, for its name ``<name>``::

    int <name>(const void* q, const void* k, const void* v, void* o, float* lse,
               int batch, int heads, int kv_heads, int seqlen_q, int seqlen_k, int total_q, int total_k,
               const int* cu_seqlens_q, const int* cu_seqlens_k, const int* seqused_k,
               const int64_t* strides, float softmax_scale, cudaStream_t stream);   // 0 on success
    int <name>_smem_bytes(); int <name>_threads(); int <name>_head_dim();
    const char* <name>_error_string(int code);

``strides`` holds 12 element strides: q, k, v, o, each as (batch, row, head) (batch stride 0 with
varlen). ``seqlen_q`` / ``seqlen_k`` are the lengths (fixed) or their maxima over the batch
(varlen); ``total_q`` / ``total_k`` the packed row counts (varlen). LSE is ``(batch, heads,
seqlen_q)`` (fixed) or ``(heads, total_q)`` (varlen), fp32, contiguous. The entry is
stream-ordered; its return codes are :data:`ERROR_CODES` (``1000 + cudaError_t`` for a failed CUDA
runtime call).
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

from argus_cutlass.errors import ProblemError
from argus_cutlass.kernels.attention.config import HEAD_DIMS

DTYPES = ("bf16", "fp16")
_INT32_MAX = 2**31 - 1
#: lengths are < 2**LENGTH_BOUND_BITS: the kernels' mask and coverage proofs are stated for this range
#: (``kernels.attention.program`` builds its k loop with it; the entry returns code 7 beyond)
LENGTH_BOUND_BITS = 24
TMA_ALIGN_BYTES = 16
#: the smallest query tile of the attention kernels (``AttentionConfig.tile_m``: 64, 128 or 192)
MIN_TILE_M = 64
#: the most (query block, head, batch) tiles: the host computes ``m_blocks * heads * batch`` and the
#: persistent loop ``t += gridDim.x`` in 32-bit int (2^16 of headroom for the step)
MAX_TILES = 2**31 - 2**16

#: the entry's ``(name, C type)`` arguments, in order
ENTRY_SIGNATURE: tuple[tuple[str, str], ...] = (
    ("q", "const void*"), ("k", "const void*"), ("v", "const void*"), ("o", "void*"), ("lse", "void*"),
    ("batch", "int"), ("heads", "int"), ("kv_heads", "int"), ("seqlen_q", "int"), ("seqlen_k", "int"),
    ("total_q", "int"), ("total_k", "int"), ("cu_seqlens_q", "const void*"), ("cu_seqlens_k", "const void*"),
    ("seqused_k", "const void*"), ("strides", "const void*"), ("softmax_scale", "float"),
    ("stream", "cudaStream_t"),
)

#: return codes of the entry (``templates/attention/host.j2``): code -> (rule, meaning)
ERROR_CODES: dict[int, tuple[str, str]] = {
    1: ("problem.size", "batch, heads, kv_heads or a length < 1, or a softmax scale that is not finite and > 0"),
    2: ("problem.heads", "heads is not a multiple of kv_heads"),
    3: ("tma.stride_alignment", "a pointer or a stride breaks TMA's 16-byte rule"),
    4: ("tma.tensor_map", "cuTensorMapEncodeTiled is unavailable or refused a tensor map"),
    5: ("launch.attribute", "cudaFuncSetAttribute or the occupancy query failed"),
    6: ("problem.varlen", "a varlen kernel without cu_seqlens, or a fixed-length kernel given cu_seqlens"),
    7: ("problem.length_range", "a length at or beyond 2^24, the range the mask proofs hold for"),
}
CUDA_ERROR_BASE = 1000


def _is_int(x: object) -> bool:
    """An integer (Python or numpy), not a bool and not a float."""
    if isinstance(x, bool) or isinstance(x, float):
        return False
    try:
        operator.index(x)  # int, numpy integer
    except TypeError:
        return False
    return True


def _is_real(x: object) -> bool:
    return not isinstance(x, bool) and isinstance(x, (int, float)) or type(x).__module__ == "numpy" and \
        hasattr(x, "dtype") and x.dtype.kind in "iuf"


#: fp32's range for the kernel's ``softmax_scale * log2(e)`` (normal numbers)
_FP32_MIN_NORMAL, _FP32_MAX = 1.1754943508222875e-38, 3.4028234663852886e38


@dataclass(frozen=True)
class AttentionProblem:
    """Sizes of one attention forward (see the module docstring for the tensors).

    Attributes:
        batch, heads, kv_heads: B, H (query heads) and HK (key/value heads, dividing H).
        seqlen_q, seqlen_k: the lengths (fixed), or their maxima over the batch (varlen; derived
            from ``seqlens_q`` / ``seqlens_k`` when those are given).
        head_dim: D (64, 96, 128, 192 or 256).
        dtype: ``bf16`` or ``fp16`` (Q, K, V and O).
        causal: bottom-right aligned causal mask.
        seqlens_q, seqlens_k: per-batch lengths (varlen), or None (fixed lengths).
        seqused_k: per-batch used key lengths, or None (all stored keys are used).
        softmax_scale: the scale of ``Q K^T`` (default ``1 / sqrt(head_dim)``).
    """

    batch: int
    heads: int
    kv_heads: int
    seqlen_q: int
    seqlen_k: int
    head_dim: int
    dtype: str = "bf16"
    causal: bool = False
    seqlens_q: tuple[int, ...] | None = None
    seqlens_k: tuple[int, ...] | None = None
    seqused_k: tuple[int, ...] | None = None
    softmax_scale: float | None = None

    @classmethod
    def varlen_problem(cls, seqlens_q: list[int] | tuple[int, ...], seqlens_k: list[int] | tuple[int, ...],
                       heads: int, kv_heads: int, head_dim: int, dtype: str = "bf16", causal: bool = False,
                       seqused_k: list[int] | tuple[int, ...] | None = None,
                       softmax_scale: float | None = None) -> AttentionProblem:
        """A packed variable-length problem from per-batch lengths (``batch = len(seqlens_q)``)."""
        sq, sk = tuple(seqlens_q), tuple(seqlens_k)
        for name, seq in (("seqlens_q", sq), ("seqlens_k", sk)):
            if not all(_is_int(x) and int(x) >= 0 for x in seq):
                raise ProblemError("problem.seqlens", f"{name}={list(seq)} must hold integers >= 0")
        return cls(len(sq), heads, kv_heads, max(sq, default=0), max(sk, default=0), head_dim, dtype, causal,
                   sq, sk, None if seqused_k is None else tuple(seqused_k), softmax_scale)

    # ---- derived --------------------------------------------------------------------

    @property
    def varlen(self) -> bool:
        """Packed variable-length batches (``cu_seqlens``)."""
        return self.seqlens_q is not None

    @property
    def scale(self) -> float:
        """The softmax scale (``1 / sqrt(head_dim)`` unless given)."""
        return float(self.softmax_scale) if self.softmax_scale is not None else 1.0 / math.sqrt(self.head_dim)

    def lengths(self) -> list[tuple[int, int]]:
        """``(Lq, Lk)`` per batch, Lk the used key length (``seqused_k`` when given)."""
        sq = self.seqlens_q if self.seqlens_q is not None else (self.seqlen_q,) * self.batch
        sk = self.seqlens_k if self.seqlens_k is not None else (self.seqlen_k,) * self.batch
        used = self.seqused_k if self.seqused_k is not None else sk
        return [(q, min(u, k)) for q, k, u in zip(sq, sk, used)]

    @property
    def total_q(self) -> int:
        return sum(self.seqlens_q) if self.seqlens_q is not None else self.batch * self.seqlen_q

    @property
    def total_k(self) -> int:
        return sum(self.seqlens_k) if self.seqlens_k is not None else self.batch * self.seqlen_k

    @property
    def flops(self) -> float:
        """The field's count (FlashAttention papers, cuDNN, ``ANCHORS.md``): ``4 * Lq * Lk * D`` per
        (batch, head) for the two GEMMs, halved when causal."""
        pairs = sum(q * k for q, k in self.lengths())
        return 4.0 * pairs * self.head_dim * self.heads * (0.5 if self.causal else 1.0)

    def attended_pairs(self) -> int:
        """Exact number of unmasked (query, key) pairs per head (bottom-right causal mask)."""
        total = 0
        for lq, lk in self.lengths():
            if not self.causal:
                total += lq * lk
                continue
            shift = lk - lq
            for i in range(lq):
                total += max(0, min(lk, i + shift + 1))
        return total

    # ---- validation ------------------------------------------------------------------

    def violations(self) -> list[ProblemError]:
        """Every rule this problem breaks (empty when it is valid), in a fixed order."""
        errs: list[ProblemError] = []
        if not isinstance(self.causal, bool):
            errs.append(ProblemError("problem.causal", f"causal={self.causal!r} must be True or False"))
        for name in ("seqlens_q", "seqlens_k", "seqused_k"):
            seq = getattr(self, name)
            if seq is not None and not isinstance(seq, (tuple, list)):
                errs.append(ProblemError("problem.seqused_k" if name == "seqused_k" else "problem.seqlens",
                                         f"{name}={seq!r} must be a tuple of per-batch lengths"))
        if self.softmax_scale is not None and not _is_real(self.softmax_scale):
            errs.append(ProblemError("problem.softmax_scale",
                                     f"softmax_scale={self.softmax_scale!r} must be a real number"))
        if errs:
            return errs
        if not _is_int(self.head_dim) or self.head_dim not in HEAD_DIMS:
            errs.append(ProblemError(
                "attention.head_dim", f"head_dim={self.head_dim!r}: the attention kernels are built for head dims "
                f"{list(HEAD_DIMS)}", "pad Q, K and V with zeros to the next supported head dim and pass softmax_scale=1/sqrt(your "
                "head dim) (zero columns change neither Q K^T nor O's first columns)"))
        if self.dtype not in DTYPES:
            errs.append(ProblemError("problem.dtype", f"dtype={self.dtype!r}: Q, K, V must be one of {DTYPES}"))
        for name in ("batch", "heads", "kv_heads"):
            v = getattr(self, name)
            if not _is_int(v) or v < 1 or v > _INT32_MAX:
                errs.append(ProblemError("problem.size", f"{name}={v!r} must be an integer in 1..2**31-1"))
        lo = 0 if self.varlen else 1
        for name in ("seqlen_q", "seqlen_k"):
            v = getattr(self, name)
            if not _is_int(v) or v < lo:
                errs.append(ProblemError("problem.size", f"{name}={v!r} must be an integer >= {lo}"))
            elif v >= 2**LENGTH_BOUND_BITS:
                errs.append(ProblemError(
                    "problem.length_range", f"{name}={v} >= 2^{LENGTH_BOUND_BITS}: the kernels' mask and coverage "
                    f"proofs hold for lengths < 2^{LENGTH_BOUND_BITS}",
                    "split the sequence (attention over chunks combined by their LSE)"))
        if errs:
            return errs
        tiles = self.batch * self.heads * -(-self.seqlen_q // MIN_TILE_M)
        if tiles > MAX_TILES:
            errs.append(ProblemError(
                "problem.size", f"batch={self.batch} x heads={self.heads} x ceil(seqlen_q={self.seqlen_q} / "
                f"{MIN_TILE_M}) = {tiles} work tiles > 2^31 - 2^16: the kernel counts its (query block, head, batch) "
                "tiles in 32-bit int", "split the batch (or the heads) over several calls"))
        if self.heads % self.kv_heads:
            errs.append(ProblemError(
                "problem.heads", f"heads={self.heads} is not a multiple of kv_heads={self.kv_heads} (grouped-query "
                "attention maps query head h to kv head h // (heads // kv_heads))"))
        if (self.seqlens_q is None) != (self.seqlens_k is None):
            errs.append(ProblemError("problem.seqlens", "give both seqlens_q and seqlens_k (varlen) or neither"))
            return errs
        for name in ("seqlens_q", "seqlens_k", "seqused_k"):
            seq = getattr(self, name)
            if seq is None:
                continue
            rule = "problem.seqused_k" if name == "seqused_k" else "problem.seqlens"
            if len(seq) != self.batch:
                errs.append(ProblemError(rule, f"{name} has {len(seq)} entries for batch={self.batch}"))
            elif any(not _is_int(x) or x < 0 for x in seq):
                errs.append(ProblemError(rule, f"{name}={list(seq)} must hold integers >= 0"))
        if errs:
            return errs
        if self.varlen:
            for name, seq, mx in (("seqlens_q", self.seqlens_q, self.seqlen_q),
                                  ("seqlens_k", self.seqlens_k, self.seqlen_k)):
                if max(seq, default=0) > mx:  # type: ignore[arg-type]
                    errs.append(ProblemError("problem.seqlens", f"max({name})={max(seq)} exceeds the stated maximum "  # type: ignore[arg-type]
                                             f"{mx}"))
            for name, total in (("total_q", self.total_q), ("total_k", self.total_k)):
                if total > _INT32_MAX:
                    errs.append(ProblemError("problem.size", f"{name}={total} exceeds 2**31-1"))
        if self.seqused_k is not None:
            stored = self.seqlens_k if self.seqlens_k is not None else (self.seqlen_k,) * self.batch
            bad = [(b, u, s) for b, (u, s) in enumerate(zip(self.seqused_k, stored)) if u > s]
            if bad:
                b, u, s = bad[0]
                errs.append(ProblemError(
                    "problem.seqused_k", f"seqused_k[{b}]={u} exceeds the {s} keys stored for batch {b}"))
        if self.softmax_scale is not None:
            scale = float(self.softmax_scale)
            if not (math.isfinite(scale) and scale > 0):
                errs.append(ProblemError("problem.softmax_scale", f"softmax_scale={self.softmax_scale!r} must be "
                                         "finite and > 0"))
            elif not _FP32_MIN_NORMAL <= scale * 1.4426950408889634 <= _FP32_MAX:
                errs.append(ProblemError("problem.softmax_scale", f"softmax_scale={self.softmax_scale!r}: the kernel "
                                         "computes in fp32, where scale * log2(e) must be a normal number "
                                         "(1.2e-38 .. 3.4e38)"))
        return errs

    def validate(self) -> AttentionProblem:
        """Check every rule; returns ``self`` when valid.

        Raises:
            ProblemError: the first violation's rule; the message lists all of them.
        """
        ProblemError.raise_all(self.violations(), f"this {type(self).__name__}")
        return self

    def describe(self) -> str:
        """A short label, e.g. ``b2 h16/8 sq1000 sk1000 d128 bf16 causal``."""
        lens = (f"varlen({len(self.seqlens_q or ())})" if self.varlen else f"sq{self.seqlen_q} sk{self.seqlen_k}")
        return (f"b{self.batch} h{self.heads}/{self.kv_heads} {lens} d{self.head_dim} {self.dtype}"
                f"{' causal' if self.causal else ''}{' seqused' if self.seqused_k is not None else ''}")
