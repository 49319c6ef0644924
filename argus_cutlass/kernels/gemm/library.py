"""A built GEMM library (``.so``) loaded through its C ABI (:mod:`argus_cutlass.kernels.gemm.problem`).

:class:`GemmKernelLibrary` binds ``<name>``, ``<name>_smem_bytes``, ``<name>_error_string`` and,
when exported, ``<name>_threads``, ``<name>_grid`` and ``<name>_staged`` (a kernel of the any-alignment
path: the operands it stages on every call, which then need no TMA alignment). A non-zero return code becomes a
:class:`~argus_cutlass.errors.LaunchError` whose rule comes from
:data:`~argus_cutlass.kernels.gemm.problem.ERROR_CODES` (code 3, ``problem.k_range``: K outside
the range the kernel's proofs hold for). The generic CUDA glue (pointers, streams, ``dlopen``)
is :mod:`argus_cutlass.runtime.launch`.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

from argus_cutlass.errors import LaunchError
from argus_cutlass.kernels.gemm.config import DTYPE_BYTES
from argus_cutlass.kernels.gemm.problem import CUDA_ERROR_BASE, ENTRY_SIGNATURE, ERROR_CODES, GemmProblem
from argus_cutlass.runtime.cuda import stream_handle
from argus_cutlass.runtime.launch import KernelLibrary, device_pointer

_CTYPES = {"const void*": ctypes.c_void_p, "void*": ctypes.c_void_p, "int": ctypes.c_int,
           "int64_t": ctypes.c_int64, "float": ctypes.c_float, "cudaStream_t": ctypes.c_void_p}
_ENTRY_ARGTYPES = [_CTYPES[t] for _, t in ENTRY_SIGNATURE]
_INT32_MAX = 2**31 - 1


class GemmKernelLibrary(KernelLibrary):
    """A loaded GEMM kernel ``.so`` (a generated kernel or the reference GEMM).

    Args:
        path: the shared library (e.g. ``compile_cu(..., kind="shared").path``).
        name: the kernel name (the ``extern "C"`` symbol).
        k_bound_bits: the program's ``KLoop.bound_bits`` when known: :meth:`run` then refuses
            ``K >= 2**k_bound_bits`` before the call (the entry would return code 3).

    Raises:
        LaunchError: ``launch.load`` (dlopen failed), ``launch.symbol`` (missing export).
    """

    k_bound_bits: int | None = None
    staged: tuple[str, ...] = ()

    def __init__(self, path: str | Path, name: str, k_bound_bits: int | None = None) -> None:
        super().__init__(path, name)
        self.k_bound_bits = k_bound_bits
        self._entry = self._symbol(name)
        self._entry.argtypes = _ENTRY_ARGTYPES
        self._entry.restype = ctypes.c_int
        self._grid = self._optional(f"{name}_grid", [ctypes.c_int, ctypes.c_int])
        staged = self._optional(f"{name}_staged", [])
        mask = int(staged()) if staged is not None else 0
        #: the caller operands the entry stages on every call (``A``, ``B``, ``C``, ``D``; ``()``: direct TMA)
        self.staged = tuple(x for i, x in enumerate("ABCD") if mask >> i & 1)

    def grid(self, m: int, n: int) -> int | None:
        """Persistent CTAs the entry launches for an ``m x n`` problem on the current device
        (0 when the occupancy query fails), or None when ``<name>_grid`` is not exported."""
        return int(self._grid(int(m), int(n))) if self._grid is not None else None

    def __call__(self, A: Any, B: Any, C: Any, D: Any, M: int, N: int, K: int, lda: int, ldb: int,
                 ldc: int, ldd: int, alpha: float = 1.0, beta: float = 0.0, stream: Any = None) -> None:
        """Enqueue ``D = alpha * A @ B + beta * C`` on ``stream``.

        Args:
            A, B, C, D: device pointers (int, DeviceBuffer, CUDA torch tensor...); C may
                be None when ``beta == 0``.
            M, N, K: sizes (elements); lda..ldd: leading dimensions (elements).
            alpha, beta: fp32 scalars.
            stream: None/0 (legacy default stream), an int handle, a
                :class:`~argus_cutlass.runtime.cuda.Stream` or a torch stream.

        Raises:
            LaunchError: ``launch.args`` (sizes out of int32 range); a non-zero return code,
                with the code's rule (:data:`~argus_cutlass.kernels.gemm.problem.ERROR_CODES`,
                ``launch.cuda`` for a CUDA runtime error, ``launch.failed`` for an unknown code)
                and the kernel's error string.
        """
        for mode, v in (("M", M), ("N", N), ("K", K)):
            if not 0 <= int(v) <= _INT32_MAX:
                raise LaunchError("launch.args", f"{mode}={v} is outside 0..2**31-1")
        code = self._entry(
            device_pointer(A, "A"), device_pointer(B, "B"), device_pointer(C, "C"), device_pointer(D, "D"),
            int(M), int(N), int(K), int(lda), int(ldb), int(ldc), int(ldd),
            float(alpha), float(beta), stream_handle(stream),
        )
        if code != 0:
            rule, hint = _code_rule(code)
            raise LaunchError(
                rule,
                f"{self.name}(M={M}, N={N}, K={K}, lda={lda}, ldb={ldb}, ldc={ldc}, ldd={ldd}) "
                f"returned {code}: {self.error_string(code)}",
                hint,
            )

    def run(self, problem: GemmProblem, A: Any, B: Any, C: Any, D: Any, alpha: float = 1.0,
            beta: float = 0.0, stream: Any = None) -> None:
        """Validate ``problem`` (no ``tma.*`` rule for the operands this kernel stages), its K against
        the proved range and the pointers' alignment (16 bytes for the operands TMA maps in place, the
        element for C and the staged ones), then call the entry.

        Raises:
            ProblemError: the problem or a pointer breaks a rule (see
                :mod:`argus_cutlass.kernels.gemm.problem`), ``problem.k_range``.
            LaunchError: as :meth:`__call__`.
        """
        problem.validate(self.staged)
        if self.k_bound_bits is not None:
            problem.check_k_range(self.k_bound_bits)
        ptrs = {"A": device_pointer(A, "A"), "B": device_pointer(B, "B"),
                "C": device_pointer(C, "C"), "D": device_pointer(D, "D")}
        for name, ptr in ptrs.items():
            if name == "C" and ptr == 0 and beta == 0:
                continue
            elementwise = name == "C" or name in self.staged
            elem = DTYPE_BYTES[problem.out_dtype if name in "CD" else problem.dtype]
            problem.check_pointer(ptr, name, elem if elementwise else 16)
        self(ptrs["A"], ptrs["B"], ptrs["C"] or None, ptrs["D"], problem.m, problem.n, problem.k,
             problem.lda, problem.ldb, problem.ldc, problem.ldd, alpha, beta, stream)


def _code_rule(code: int) -> tuple[str, str | None]:
    """``(rule, hint)`` of a non-zero return code of the entry."""
    if code >= CUDA_ERROR_BASE:
        return "launch.cuda", "a CUDA runtime call failed: is this an sm_90 GPU, and is the pointer device memory?"
    if code in ERROR_CODES:
        rule = ERROR_CODES[code][0]
        if rule == "problem.k_range":
            return rule, ("the kernel was generated for a smaller K: generate it for this problem "
                          "(argus-cutlass gemm --k K, or argus_cutlass.generate.generate(cfg, problem))")
        if rule.startswith(("problem.", "tma.")):
            return rule, "check GemmProblem(...).validate() and check_pointer(): the Python checks name the input"
        return rule, None
    return "launch.failed", None
