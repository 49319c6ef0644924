"""One GEMM problem: sizes, dtypes, layout and leading dimensions, with the TMA rules.

``D[M,N] = alpha * A[M,K] @ B[K,N] + beta * C[M,N]``; layout letters as in
:mod:`argus_cutlass.kernels.gemm.config` (first letter A, second B, BLAS convention):

====== ================================== ================================== ==========
layout A (M x K)                          B                                  default ld
====== ================================== ================================== ==========
``t.`` row-major, K contiguous            \\-                                 lda = K
``n.`` column-major, M contiguous         \\-                                 lda = M
``.n`` \\-                                 stored N x K row-major, K contig.  ldb = K
``.t`` \\-                                 stored K x N row-major, N contig.  ldb = N
====== ================================== ================================== ==========

C and D are row-major M x N (N contiguous); ``ldc = ldd = N`` by default. Leading
dimensions are in elements.

Rules checked by :meth:`GemmProblem.validate` (the ``rule`` of the raised
:class:`~argus_cutlass.errors.ProblemError`):

``problem.size``           M, N, K >= 1 and < 2**31 (the entry takes ``int``); M, N <= 2**31 - 2**16 (the kernel's
                           tile coordinates are ``int``); :meth:`GemmProblem.check_walk`: a kernel's work
                           units (tiles padded to clusters and swizzle blocks) <= 2**31 - 2**16
``problem.k_range``        K < 2**30 (the k-loop proofs are stated over 31-bit words)
``problem.dtype``          dtype in bf16/fp16, out_dtype in bf16/fp16/fp32
``problem.layout``         one of tn, nt, nn, tt
``problem.ld``             each leading dimension >= its tensor's contiguous extent
``tma.stride_alignment``   ld * element bytes is a multiple of 16 (cuTensorMapEncodeTiled:
                           every global stride must be a multiple of 16 bytes)
``tma.contiguous_extent``  the contiguous extent (K for K-major A, M for M-major A, K or N
                           for B, N for C/D) is a multiple of 16 bytes, i.e. of 8 bf16/fp16
                           or 4 fp32 elements (CUTLASS ``can_implement``: TMA alignment)
``tma.address_alignment``  base pointers are 16-byte aligned (:meth:`GemmProblem.check_pointer`)

C is read element by element by the epilogue (``beta * C``, never by TMA): no ``tma.*`` rule applies
to it (its pointer need only be aligned to its element).

The any-alignment path
----------------------
The ``tma.*`` rules are the *direct* path's: the TMA GEMM reads the caller's A and B and writes D in
place. Every problem that breaks only ``tma.*`` rules runs through **aligned staging** instead
(:meth:`GemmProblem.staging` names the operands and why; :meth:`GemmProblem.validate_any` keeps
refusing what no path can run: ``problem.size``, ``problem.k_range``, ``problem.dtype``,
``problem.layout``, ``problem.ld``, null pointers). A staged A or B is copied by the generated entry
into a stream-ordered buffer (``cudaMallocAsync``) with leading dimension ``round_up(extent, 16
bytes)`` and zero padding; a staged D is written by the GEMM into such a buffer and copied back into
exactly the ``M x N`` region of the caller's D (the program's
:class:`~argus_cutlass.dsl.ir.StageCopy` nodes, rules ``stage.*`` of ``invariants/gemm.toml``). The
staged kernel stages those operands on every call, whatever their alignment; the C ABI is the same.

The C ABI
---------
Every generated GEMM (``templates/gemm/host.j2`` and ``kernel.cu.j2``) and the reference GEMM
(``templates/reference_gemm.cu.j2``) export, for the kernel name ``<name>``::

    int <name>(const void* A, const void* B, const void* C, void* D,
               int M, int N, int K, int64_t lda, int64_t ldb, int64_t ldc, int64_t ldd,
               float alpha, float beta, cudaStream_t stream);   // 0 on success
    int <name>_smem_bytes();                // dynamic shared memory per CTA (bytes)
    int <name>_threads();                   // threads per CTA
    int <name>_grid(int M, int N);          // persistent CTAs launched (generated GEMMs only)
    const char* <name>_error_string(int code);

The entry is stream-ordered (it returns once the kernel is enqueued); C may be null when
``beta == 0``. Its return codes are :data:`ERROR_CODES` (``1000 + cudaError_t`` for a failed
CUDA runtime call). Code 3 is the proof range: the k-loop proofs of a program hold for
``K < 2**bound_bits`` (its :class:`~argus_cutlass.dsl.ir.KLoop`), and the entry refuses a larger K.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from dataclasses import dataclass

from argus_cutlass.errors import ProblemError
from argus_cutlass.kernels.gemm.config import DTYPE_BYTES, a_is_k_major, b_is_k_major

INPUT_DTYPES = ("bf16", "fp16")
OUTPUT_DTYPES = ("bf16", "fp16", "fp32")
LAYOUTS = ("tn", "nt", "nn", "tt")
#: TMA: global address and every global stride must be multiples of this many bytes
TMA_ALIGN_BYTES = 16
_INT32_MAX = 2**31 - 1
#: the largest K a kernel's k-loop proofs can be stated for (``KLoop.bound_bits`` <= 30)
MAX_K = 2**30
#: the largest M and N: the kernel rounds them up to whole tiles and scheduler blocks (at most 8 swizzle x 16
#: cluster CTAs of up to 256 rows, 2**15) and computes those coordinates in ``int``
MAX_MN = 2**31 - 2**16
#: the most work units a kernel's walk may have: ``Walk::units`` and the persistent loop's
#: ``u += step * kConsumerStride`` (``templates/gemm/work.j2``, step = gridDim.x + kStepDelta) are int,
#: so the last unit plus a step must fit (2^16 of headroom, as attention's ``MAX_TILES``)
MAX_WALK_UNITS = 2**31 - 2**16

#: argument types of the ``extern "C"`` entry, in order (the names are the C parameters)
ENTRY_SIGNATURE: tuple[tuple[str, str], ...] = (
    ("A", "const void*"), ("B", "const void*"), ("C", "const void*"), ("D", "void*"),
    ("M", "int"), ("N", "int"), ("K", "int"),
    ("lda", "int64_t"), ("ldb", "int64_t"), ("ldc", "int64_t"), ("ldd", "int64_t"),
    ("alpha", "float"), ("beta", "float"), ("stream", "cudaStream_t"),
)
#: the entry's return codes (``enum ErrorCode`` of ``templates/gemm/host.j2``): code ->
#: (rule, meaning). The rules are the Python checks that refuse the same input first.
ERROR_CODES: dict[int, tuple[str, str]] = {
    1: ("problem.size", "M, N and K must be >= 1"),
    2: ("problem.pointer", "C is null but beta != 0"),
    3: ("problem.k_range", "K is outside the range the verifier proved the k loop for"),
    4: ("tma.address_alignment",
        "A, B or D is not 16-byte aligned (TMA global address rule), or a pointer is not aligned to its element"),
    5: ("tma.stride_alignment",
        "a leading dimension times the element size is not a multiple of 16 bytes (TMA stride rule)"),
    6: ("launch.tensor_map", "cuTensorMapEncodeTiled is unavailable or refused a tensor map"),
    7: ("launch.attribute", "cudaFuncSetAttribute or the cluster occupancy query failed"),
    8: ("problem.ld", "a leading dimension is smaller than its operand's contiguous extent"),
    9: ("launch.arch", "the current device has no sm_90a image of the kernel (architecture guard)"),
    10: ("problem.pointer", "A, B or D is null"),
    11: ("problem.iteration_space", "output tiles x k-tiles >= 2^32: CUTLASS's stream-K / split-K scheduler counts "
                                    "k-tile positions in 32 bits"),
}
#: a return code at or above this is ``1000 + cudaError_t``
CUDA_ERROR_BASE = 1000
#: operands the aligned-staging path copies: A and B before the GEMM, D after it (C is read element
#: by element by the epilogue, so no TMA rule applies to it)
STAGEABLE = ("A", "B", "D")
#: byte alignment of each staged buffer inside the entry's staging workspace (cudaMallocAsync
#: returns at least 256-byte aligned memory, like cudaMalloc)
STAGE_BASE_ALIGN = 256


@dataclass(frozen=True)
class Operand:
    """Storage of one operand (row-major storage view, in elements).

    Attributes:
        name: ``A``, ``B``, ``C`` or ``D``.
        dtype: element type name.
        rows, cols: the stored matrix (cols contiguous), e.g. A 'n' is stored K x M.
        ld: leading dimension (elements between rows of the storage view), >= cols.
        contiguous_mode: the GEMM mode that is contiguous (``M``, ``N`` or ``K``).
        description: human text, e.g. ``"column-major M x K (M contiguous)"``.
    """

    name: str
    dtype: str
    rows: int
    cols: int
    ld: int
    contiguous_mode: str
    description: str

    @property
    def elem_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def storage_elems(self) -> int:
        """Elements to allocate: ``rows * ld``."""
        return self.rows * self.ld

    @property
    def storage_bytes(self) -> int:
        return self.storage_elems * self.elem_bytes

    @property
    def storage_shape(self) -> tuple[int, int]:
        """``(rows, ld)``: the padded row-major host array holding this operand."""
        return (self.rows, self.ld)


@dataclass(frozen=True)
class StagedOperand:
    """One operand the any-alignment path stages (:meth:`GemmProblem.staging`).

    Attributes:
        name: ``A``, ``B`` or ``D``.
        rows, cols: the size names of its storage (``cols`` contiguous), e.g. column-major A: K, M.
        reasons: why the direct TMA path refuses it, e.g. ``lda=300: 600 bytes, not a multiple of 16``.
        staged_ld: the staged leading dimension for this problem (elements).
        staged_bytes: the staging buffer's bytes for this problem (``rows x staged_ld`` elements).
        rules: the ``tma.*`` rule of each reason, in the same order (``tma.stride_alignment``,
            ``tma.contiguous_extent``, ``tma.address_alignment``).

    >>> [s.text() for s in GemmProblem(300, 4096, 4096, layout="nt").staging()]
    ['A (lda=300: 600 bytes, not a multiple of 16)']
    >>> GemmProblem(300, 4096, 4096, layout="nt").staging()[0].rules
    ('tma.stride_alignment',)
    """

    name: str
    rows: str
    cols: str
    reasons: tuple[str, ...]
    staged_ld: int
    staged_bytes: int
    rules: tuple[str, ...] = ()

    def text(self) -> str:
        """``A (lda=300: 600 bytes, not a multiple of 16)``."""
        return f"{self.name} ({'; '.join(self.reasons)})"


@dataclass(frozen=True)
class GemmProblem:
    """``D[M,N] = alpha * A[M,K] @ B[K,N] + beta * C[M,N]`` on sm_90a.

    Args:
        m, n, k: problem sizes (elements).
        dtype: A and B element type, ``bf16`` or ``fp16``.
        out_dtype: C and D element type, ``bf16``, ``fp16`` or ``fp32``.
        layout: ``tn``, ``nt``, ``nn`` or ``tt`` (module docstring).
        lda, ldb, ldc, ldd: leading dimensions in elements; ``None`` means packed.
        unaligned: the operands (``A``, ``B``, ``D``) whose base pointer is not 16-byte aligned,
            known at call time (the torch API passes them): the any-alignment path stages them too.

    Construction does not check anything; call :meth:`validate`.

    >>> p = GemmProblem(256, 512, 128, "bf16", "bf16", "nt")
    >>> (p.lda, p.ldb, p.ldc, p.ldd)
    (256, 512, 512, 512)
    """

    m: int
    n: int
    k: int
    dtype: str = "bf16"
    out_dtype: str = "bf16"
    layout: str = "tn"
    lda: int | None = None
    ldb: int | None = None
    ldc: int | None = None
    ldd: int | None = None
    unaligned: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        layout_ok = isinstance(self.layout, str) and self.layout in LAYOUTS
        defaults = {
            "lda": (self.k if a_is_k_major(self.layout) else self.m) if layout_ok else None,
            "ldb": (self.k if b_is_k_major(self.layout) else self.n) if layout_ok else None,
            "ldc": self.n,
            "ldd": self.n,
        }
        for attr, value in defaults.items():
            if getattr(self, attr) is None:
                object.__setattr__(self, attr, value)

    @classmethod
    def for_config(cls, config, m: int, n: int, k: int, **lds: int) -> GemmProblem:  # noqa: ANN001
        """A problem with the dtypes and layout of a :class:`~argus_cutlass.kernels.gemm.config.GemmConfig`."""
        return cls(m, n, k, config.dtype, config.out_dtype, config.layout, **lds)

    # ---- operands --------------------------------------------------------------------

    def operands(self) -> dict[str, Operand]:
        """Storage description of A, B, C, D (requires a valid dtype and layout)."""
        m, n, k = self.m, self.n, self.k
        if a_is_k_major(self.layout):
            a = Operand("A", self.dtype, m, k, self.lda, "K", "row-major M x K (K contiguous)")
        else:
            a = Operand("A", self.dtype, k, m, self.lda, "M", "column-major M x K (M contiguous)")
        if b_is_k_major(self.layout):
            b = Operand("B", self.dtype, n, k, self.ldb, "K", "stored N x K row-major (K contiguous)")
        else:
            b = Operand("B", self.dtype, k, n, self.ldb, "N", "stored K x N row-major (N contiguous)")
        c = Operand("C", self.out_dtype, m, n, self.ldc, "N", "row-major M x N (N contiguous)")
        d = Operand("D", self.out_dtype, m, n, self.ldd, "N", "row-major M x N (N contiguous)")
        return {"A": a, "B": b, "C": c, "D": d}

    @property
    def flops(self) -> int:
        """``2 * M * N * K`` (multiply-adds count twice)."""
        return 2 * self.m * self.n * self.k

    # ---- validation ------------------------------------------------------------------

    def violations(self, staged: Iterable[str] = ()) -> list[ProblemError]:
        """Every rule this problem breaks on the direct TMA path (empty when it is valid), in a fixed
        order; the operands named in ``staged`` run through aligned staging, so no ``tma.*`` rule
        applies to them."""
        errs: list[ProblemError] = []
        for mode, value in (("M", self.m), ("N", self.n), ("K", self.k)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                errs.append(ProblemError("problem.size", f"{mode}={value!r}: M, N and K must be integers >= 1"))
            elif value > _INT32_MAX:
                errs.append(ProblemError(
                    "problem.size", f"{mode}={value} exceeds 2**31-1 (the kernel entry takes 32-bit sizes)"))
            elif mode != "K" and value > MAX_MN:
                errs.append(ProblemError(
                    "problem.size", f"{mode}={value} > 2**31 - 2**16: the kernel computes its tile coordinates "
                    f"({mode} rounded up to whole tiles and scheduler blocks) in 32-bit int",
                    f"split {mode} into chunks of at most {MAX_MN} and run one GEMM per chunk"))
            elif mode == "K" and value >= MAX_K:
                errs.append(ProblemError(
                    "problem.k_range", f"K={value} >= 2**30: the k-loop proofs are stated over 31-bit words "
                    "(K < 2^30), the widest the kernel's int32 k-tile arithmetic allows",
                    "split the reduction into chunks of K < 2^30 and add the partial products (beta = 1)"))
        if self.dtype not in INPUT_DTYPES:
            errs.append(ProblemError(
                "problem.dtype", f"dtype={self.dtype!r} is not supported for A and B; expected one of {INPUT_DTYPES}"))
        if self.out_dtype not in OUTPUT_DTYPES:
            errs.append(ProblemError(
                "problem.dtype",
                f"out_dtype={self.out_dtype!r} is not supported for C and D; expected one of {OUTPUT_DTYPES}"))
        if self.layout not in LAYOUTS:
            errs.append(ProblemError(
                "problem.layout",
                f"layout={self.layout!r} is not one of {LAYOUTS} (first letter A, second B, BLAS "
                "convention: A 't' = row-major M x K, 'n' = column-major; B 'n' = stored N x K "
                "(K-major), 't' = stored K x N (N-major))"))
        if not isinstance(self.unaligned, tuple) or set(self.unaligned) - set(STAGEABLE):
            errs.append(ProblemError(
                "problem.operand", f"unaligned={self.unaligned!r}: expected a tuple of operand names from {STAGEABLE} "
                "(C is read element by element and needs no staging)"))
        if errs:
            return errs  # operand checks need valid sizes, dtypes and layout
        ops = self.operands()
        staged = set(staged)
        for op in ops.values():
            errs.extend(e for e in self._operand_violations(op)
                        if not (op.name in staged and e.rule.startswith("tma.")))
        return errs

    def _operand_violations(self, op: Operand) -> list[ProblemError]:
        errs: list[ProblemError] = []
        ld_name = f"ld{op.name.lower()}"
        where = f"{op.name} ({op.dtype}, layout {self.layout!r}, {op.description})"
        if not isinstance(op.ld, int) or isinstance(op.ld, bool) or op.ld < op.cols:
            errs.append(ProblemError(
                "problem.ld",
                f"{where}: {ld_name}={op.ld!r} is smaller than the contiguous extent "
                f"{op.contiguous_mode}={op.cols}",
                f"use {ld_name} >= {op.cols}",
            ))
            return errs
        per16 = TMA_ALIGN_BYTES // op.elem_bytes
        extent_bad = op.cols % per16 != 0
        # C has D's extent (N); report it once, for D.
        if extent_bad and op.name != "C":
            errs.append(ProblemError(
                "tma.contiguous_extent",
                f"{where}: {op.contiguous_mode}={op.cols} is not a multiple of {per16} elements "
                f"({TMA_ALIGN_BYTES} bytes of {op.dtype}); CUTLASS can_implement requires the "
                "contiguous extent of every TMA tensor to be 16-byte aligned",
                self._extent_hint(op, per16),
            ))
        # A packed operand with a bad extent has a bad stride too: that is the same mistake. C is
        # read element by element by the epilogue, never by TMA: its stride is free.
        packed = op.ld == op.cols
        if (op.ld * op.elem_bytes) % TMA_ALIGN_BYTES and not (extent_bad and packed) and op.name != "C":
            errs.append(ProblemError(
                "tma.stride_alignment",
                f"{where}: {ld_name}={op.ld} x {op.elem_bytes} bytes = {op.ld * op.elem_bytes} bytes "
                f"is not a multiple of {TMA_ALIGN_BYTES} (a TMA tensor map's global strides must be)",
                f"use {ld_name} a multiple of {per16} elements, e.g. {_round_up(op.ld, per16)}",
            ))
        return errs

    def _extent_hint(self, op: Operand, per16: int) -> str:
        pad = f"pad {op.contiguous_mode} to a multiple of {per16} (e.g. {_round_up(op.cols, per16)})"
        if op.name == "A":
            if op.contiguous_mode == "M":
                return f"{pad} or use row-major A (layout 't{self.layout[1]}')"
            return f"{pad} or use column-major A (layout 'n{self.layout[1]}') if M is a multiple of {per16}"
        if op.name == "B":
            if op.contiguous_mode == "N":
                return f"{pad} or use K-major B stored N x K (layout '{self.layout[0]}n')"
            return f"{pad} or use B stored K x N (layout '{self.layout[0]}t') if N is a multiple of {per16}"
        return pad

    def check_k_range(self, bound_bits: int) -> None:
        """Check that K lies in the range a kernel's k-loop proofs hold for (``K < 2**bound_bits``,
        the program's ``KLoop.bound_bits``); the entry returns code 3 otherwise.

        Raises:
            ProblemError: ``problem.k_range`` naming K, the bound and the fix.
        """
        if isinstance(self.k, int) and self.k >= 2**bound_bits:
            raise ProblemError(
                "problem.k_range",
                f"K={self.k} >= 2^{bound_bits}: the kernel's k-loop proofs hold for K < 2^{bound_bits} only",
                "generate the kernel for this problem (argus-cutlass gemm --k K, or "
                "argus_cutlass.generate.generate(cfg, problem)): the proofs are then stated for its K",
            )

    def launched_units(self, config: Any) -> int:
        """The work units the printed scheduler of ``config``'s kernel walks for this problem (``make_walk`` of
        ``templates/gemm/scheduler.j2``, modelled by the verifier's
        :func:`~argus_cutlass.verify.decomposition.walk_geometry`: output tiles padded to whole clusters and
        swizzle blocks), times the CTAs per unit a cluster-K kernel launches (``templates/gemm/host.j2``: one
        unit per cluster of ``splits`` CTAs; 1 for the others)."""
        from argus_cutlass.verify.decomposition import walk_geometry

        km, kn = (self.n, self.m) if config.swap_ab else (self.m, self.n)
        units = walk_geometry(-(-km // config.tile_m), -(-kn // config.tile_n), config.cluster_m, config.cluster_n,
                              max_swizzle=config.swizzle).units
        return units * (config.splits if config.scheduler == "clusterk" else 1)

    def check_walk(self, config: Any) -> None:
        """Check that the work units the printed scheduler of ``config``'s kernel walks for this problem
        (:meth:`launched_units`; a cluster-K kernel's grid of units x splits CTAs) fit its 32-bit ``int``
        count. Requires a problem :meth:`validate_any` accepts. A cluster extent that is not a power of two has
        no walk to count (``--set cluster_m=3`` was a ValueError traceback here): the verifier's rule
        ``cluster`` rejects that program, naming the field.

        Raises:
            ProblemError: ``problem.size`` naming M, N, the tile and the count.
        """
        if any(c < 1 or c & (c - 1) for c in (config.cluster_m, config.cluster_n)):
            return
        units = self.launched_units(config)
        if units > MAX_WALK_UNITS:
            raise ProblemError(
                "problem.size", f"M x N = {self.m} x {self.n}: the kernel's {config.tile_m} x {config.tile_n} tiles "
                f"(cluster {config.cluster_m} x {config.cluster_n}, swizzle {config.swizzle}) make {units} work units"
                + (f" (CTAs: a cluster of {config.splits} per unit)" if config.scheduler == "clusterk" else "") + ", "
                "more than the scheduler's 32-bit count leaves room for (2**31 - 2**16: the persistent loop "
                "steps past the last unit in int)",
                "split M or N and run one GEMM per part, or use larger tiles")

    def validate(self, staged: Iterable[str] = ()) -> GemmProblem:
        """Check every rule of the direct TMA path (none of the ``tma.*`` rules for the operands in
        ``staged``: a kernel that stages them); returns ``self`` when valid.

        Raises:
            ProblemError: the first violation's rule; the message lists all of them.
        """
        ProblemError.raise_all(self.violations(staged),
                               f"this {type(self).__name__} (M={self.m}, N={self.n}, K={self.k})")
        return self

    def validate_any(self) -> GemmProblem:
        """Check the rules no path can run without (everything but ``tma.*``: sizes, K range,
        dtypes, layout, leading dimensions >= their extents); returns ``self``. What breaks only
        ``tma.*`` rules runs through aligned staging (:meth:`staging`).

        Raises:
            ProblemError: the first violation's rule; the message lists all of them.

        >>> GemmProblem(300, 4096, 4096, layout="nt").validate_any().m
        300
        """
        return self.validate(STAGEABLE)

    def staging(self) -> tuple[StagedOperand, ...]:
        """The operands the direct TMA path refuses and the any-alignment path stages, in A, B, D
        order: a leading dimension that is not a multiple of 16 bytes (``tma.stride_alignment``), a
        contiguous extent that is not (``tma.contiguous_extent``), or a base pointer named in
        :attr:`unaligned` (``tma.address_alignment``, known only at call time). Empty: the direct
        path runs. Requires a problem :meth:`validate_any` accepts.

        >>> [s.text() for s in GemmProblem(4096, 33, 4096).staging()]
        ['D (ldd=33: 66 bytes, not a multiple of 16)']
        >>> [s.text() for s in GemmProblem(64, 64, 33).staging()]
        ['A (lda=33: 66 bytes, not a multiple of 16)', 'B (ldb=33: 66 bytes, not a multiple of 16)']
        >>> GemmProblem(64, 64, 33, layout="nt").staging()  # K is no operand's contiguous extent
        ()
        """
        unaligned = set(self.unaligned)
        ops = self.operands()
        out = []
        for name in STAGEABLE:
            op = ops[name]
            per16 = TMA_ALIGN_BYTES // op.elem_bytes
            ld_name = f"ld{name.lower()}"
            reasons, rules = [], []
            if (op.ld * op.elem_bytes) % TMA_ALIGN_BYTES:
                reasons.append(f"{ld_name}={op.ld}: {op.ld * op.elem_bytes} bytes, not a multiple of {TMA_ALIGN_BYTES}")
                rules.append("tma.stride_alignment")
            if op.cols % per16 and op.ld != op.cols:
                reasons.append(f"{op.contiguous_mode}={op.cols}: {op.cols * op.elem_bytes} bytes, not a multiple of "
                               f"{TMA_ALIGN_BYTES}")
                rules.append("tma.contiguous_extent")
            if name in unaligned:
                reasons.append(f"pointer {name} not {TMA_ALIGN_BYTES}-byte aligned")
                rules.append("tma.address_alignment")
            if reasons:
                outer = {"A": ("M", "K"), "B": ("N", "K"), "D": ("M", "N")}[name]
                rows = outer[1] if op.contiguous_mode == outer[0] else outer[0]
                sld = _round_up(op.cols, per16)
                out.append(StagedOperand(name, rows, op.contiguous_mode, tuple(reasons), sld,
                                         op.rows * sld * op.elem_bytes, tuple(rules)))
        return tuple(out)

    def staging_bytes(self) -> int:
        """Bytes of the staging workspace the entry allocates for this problem, as its host code
        computes it (buffer ``i`` at ``round_up(end of buffer i-1, STAGE_BASE_ALIGN)``; the same sum as
        :func:`argus_cutlass.kernels.gemm.program.staging_workspace` of the staged program); 0 on
        the direct path."""
        end = 0
        for s in self.staging():
            end = _round_up(end, STAGE_BASE_ALIGN) + s.staged_bytes
        return end

    @staticmethod
    def check_pointer(ptr: int, name: str, align: int = TMA_ALIGN_BYTES) -> None:
        """Check a device pointer: for TMA (``align`` 16), or for element-wise access (``align`` = the
        element size: C, and the operands a staged kernel copies).

        Raises:
            ProblemError: ``problem.pointer`` (null), ``tma.address_alignment`` (not 16-byte aligned),
                ``problem.element_alignment`` (not aligned to its element).
        """
        if not ptr:
            raise ProblemError("problem.pointer", f"{name} is a null pointer")
        if align < TMA_ALIGN_BYTES and ptr % align:
            raise ProblemError("problem.element_alignment",
                               f"{name}=0x{ptr:x} is not aligned to its {align}-byte element (address mod {align} "
                               f"= {ptr % align})", "pass a pointer to an element of the tensor")
        if align >= TMA_ALIGN_BYTES and ptr % TMA_ALIGN_BYTES:
            raise ProblemError(
                "tma.address_alignment",
                f"{name}=0x{ptr:x} is not {TMA_ALIGN_BYTES}-byte aligned (address mod 16 = "
                f"{ptr % TMA_ALIGN_BYTES}); a TMA tensor map's global address must be",
                "pass the start of an allocation (cudaMalloc and torch give 256-byte alignment) "
                "or a view whose offset is a multiple of 16 bytes",
            )


def _round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def storage_rows(problem: GemmProblem) -> tuple[int, int]:
    """Rows of A's and B's storage in ``problem``'s layout (each row holds ``lda`` / ``ldb`` elements):
    A is M x K row-major (``t``) or K x M (``n``); B is N x K (``n``) or K x N (``t``)."""
    m, n, k = problem.m, problem.n, problem.k
    return (m if problem.layout[0] == "t" else k), (n if problem.layout[1] == "n" else k)


def layout_views(a_flat: Any, b_flat: Any, problem: GemmProblem) -> tuple[Any, Any]:
    """``(A, B)``: the M x K and K x N torch views of flat buffers of at least :func:`storage_rows` x
    ``lda`` / ``ldb`` elements, with ``problem``'s strides (what cuBLAS is called on)."""
    m, n, k = problem.m, problem.n, problem.k
    a_rows, b_rows = storage_rows(problem)
    a = a_flat[: a_rows * problem.lda].view(a_rows, problem.lda)
    b = b_flat[: b_rows * problem.ldb].view(b_rows, problem.ldb)
    a = a[:, :k] if problem.layout[0] == "t" else a[:, :m].t()
    b = b[:, :k].t() if problem.layout[1] == "n" else b[:, :n]
    return a, b

