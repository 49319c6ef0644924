"""Load a built kernel library (``.so``) and call its ``extern "C"`` entry.

Every library built from ``gemm_sm90.cu.j2`` (and the reference GEMM of
:mod:`argus_cutlass.kernels.gemm.reference`) exports, for its kernel name ``<name>``::

    int <name>(const void* A, const void* B, const void* C, void* D,
               int M, int N, int K, int64_t lda, int64_t ldb, int64_t ldc, int64_t ldd,
               float alpha, float beta, cudaStream_t stream);   // 0 on success
    int <name>_smem_bytes();          // dynamic shared memory per CTA (bytes)
    int <name>_threads();             // threads per CTA
    const char* <name>_error_string(int code);

The call is stream-ordered: it returns once the kernel is enqueued.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path
from typing import Any

from argus_cutlass.errors import LaunchError
from argus_cutlass.runtime.cuda import stream_handle
from argus_cutlass.kernels.gemm.problem import GemmProblem

_ENTRY_ARGTYPES = (
    [ctypes.c_void_p] * 4
    + [ctypes.c_int] * 3
    + [ctypes.c_int64] * 4
    + [ctypes.c_float] * 2
    + [ctypes.c_void_p]
)
_INT32_MAX = 2**31 - 1


def device_pointer(obj: Any, name: str = "pointer") -> int:
    """The device address of ``obj`` as an int.

    Accepts None (null), an int, a :class:`~argus_cutlass.runtime.cuda.DeviceBuffer`
    (anything with an int ``.ptr``), a torch tensor or anything with ``.data_ptr()``,
    or an object exposing ``__cuda_array_interface__``. torch is never imported.

    Raises:
        LaunchError: ``launch.pointer`` for a CPU tensor or an unsupported object.
    """
    if obj is None:
        return 0
    if isinstance(obj, bool):
        raise LaunchError("launch.pointer", f"{name} is a bool, not a device pointer")
    if isinstance(obj, int):
        return obj
    if hasattr(obj, "data_ptr"):
        if getattr(obj, "is_cuda", True) is False:
            raise LaunchError(
                "launch.pointer",
                f"{name} is a tensor on {getattr(obj, 'device', 'the CPU')}; the kernel needs GPU memory",
                "move it with .cuda()",
            )
        return int(obj.data_ptr())
    ptr = getattr(obj, "ptr", None)
    if isinstance(ptr, int):
        return ptr
    iface = getattr(obj, "__cuda_array_interface__", None)
    if isinstance(iface, dict) and "data" in iface:
        return int(iface["data"][0])
    raise LaunchError(
        "launch.pointer",
        f"{name}: cannot take a device pointer from {type(obj).__name__}",
        "pass an int address, a DeviceBuffer or a CUDA torch tensor",
    )



@functools.cache
def load_library(path: str) -> ctypes.CDLL:
    """The shared library at ``path``, loaded once per process (``RTLD_LOCAL``).

    Raises:
        OSError: the file cannot be loaded.
    """
    return ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)


def load_function(path: str, symbol: str, argtypes: list[Any] | None = None, restype: Any = ctypes.c_int) -> Any:
    """The ``extern "C"`` function ``symbol`` of the library at ``path`` (loaded once), with its
    ctypes ``argtypes`` (left unset when None) and ``restype``.

    Raises:
        OSError: the library cannot be loaded; AttributeError: no such symbol.
    """
    fn = getattr(load_library(str(path)), symbol)
    if argtypes is not None:
        fn.argtypes = argtypes
    fn.restype = restype
    return fn


class GemmKernelLibrary:
    """A loaded kernel ``.so`` exporting ``<name>``, ``<name>_smem_bytes`` and
    ``<name>_error_string`` (``<name>_threads`` is optional).

    Args:
        path: the shared library (e.g. ``compile_cu(..., kind="shared").path``).
        name: the kernel name (the ``extern "C"`` symbol).

    Raises:
        LaunchError: ``launch.load`` (dlopen failed), ``launch.symbol`` (missing export).
    """

    def __init__(self, path: str | Path, name: str) -> None:
        self.path = Path(path)
        self.name = name
        try:
            self._lib = ctypes.CDLL(str(self.path), mode=ctypes.RTLD_LOCAL)
        except OSError as exc:
            raise LaunchError("launch.load", f"cannot load kernel library {self.path}: {exc}") from None
        self._entry = self._symbol(name)
        self._entry.argtypes = _ENTRY_ARGTYPES
        self._entry.restype = ctypes.c_int
        self._smem = self._symbol(f"{name}_smem_bytes")
        self._smem.argtypes = []
        self._smem.restype = ctypes.c_int
        self._err = self._symbol(f"{name}_error_string")
        self._err.argtypes = [ctypes.c_int]
        self._err.restype = ctypes.c_char_p
        self._threads = getattr(self._lib, f"{name}_threads", None)
        if self._threads is not None:
            self._threads.argtypes = []
            self._threads.restype = ctypes.c_int

    def _symbol(self, symbol: str) -> Any:
        try:
            return getattr(self._lib, symbol)
        except AttributeError:
            raise LaunchError(
                "launch.symbol",
                f"{self.path} does not export {symbol!r}; was it built from a template with "
                f"kernel name {self.name!r}?",
            ) from None

    def smem_bytes(self) -> int:
        """Dynamic shared memory one CTA uses (bytes)."""
        return int(self._smem())

    def threads(self) -> int | None:
        """Threads per CTA, or None when the library does not export ``<name>_threads``."""
        return int(self._threads()) if self._threads is not None else None

    def error_string(self, code: int) -> str:
        """The kernel's text for a return code of the entry."""
        raw = self._err(int(code))
        return raw.decode(errors="replace") if raw else f"error {code}"

    def __call__(
        self,
        A: Any,
        B: Any,
        C: Any,
        D: Any,
        M: int,
        N: int,
        K: int,
        lda: int,
        ldb: int,
        ldc: int,
        ldd: int,
        alpha: float = 1.0,
        beta: float = 0.0,
        stream: Any = None,
    ) -> None:
        """Enqueue ``D = alpha * A @ B + beta * C`` on ``stream``.

        Args:
            A, B, C, D: device pointers (int, DeviceBuffer, CUDA torch tensor...); C may
                be None when ``beta == 0``.
            M, N, K: sizes (elements); lda..ldd: leading dimensions (elements).
            alpha, beta: fp32 scalars.
            stream: None/0 (legacy default stream), an int handle, a
                :class:`~argus_cutlass.runtime.cuda.Stream` or a torch stream.

        Raises:
            LaunchError: ``launch.args`` (sizes out of int32 range),
                ``launch.failed`` (non-zero return; message has the kernel's error string).
        """
        for mode, v in (("M", M), ("N", N), ("K", K)):
            if not 0 <= int(v) <= _INT32_MAX:
                raise LaunchError("launch.args", f"{mode}={v} is outside 0..2**31-1")
        code = self._entry(
            device_pointer(A, "A"), device_pointer(B, "B"), device_pointer(C, "C"),
            device_pointer(D, "D"),
            int(M), int(N), int(K), int(lda), int(ldb), int(ldc), int(ldd),
            float(alpha), float(beta), stream_handle(stream),
        )
        if code != 0:
            raise LaunchError(
                "launch.failed",
                f"{self.name}(M={M}, N={N}, K={K}, lda={lda}, ldb={ldb}, ldc={ldc}, ldd={ldd}) "
                f"returned {code}: {self.error_string(code)}",
                _code_hint(code),
            )

    def run(
        self,
        problem: GemmProblem,
        A: Any,
        B: Any,
        C: Any,
        D: Any,
        alpha: float = 1.0,
        beta: float = 0.0,
        stream: Any = None,
    ) -> None:
        """Validate ``problem`` and the pointers' TMA alignment, then call the entry.

        Raises:
            ProblemError: the problem or a pointer breaks a rule (see
                :mod:`argus_cutlass.kernels.gemm.problem`).
            LaunchError: as :meth:`__call__`.
        """
        problem.validate()
        ptrs = {"A": device_pointer(A, "A"), "B": device_pointer(B, "B"),
                "C": device_pointer(C, "C"), "D": device_pointer(D, "D")}
        for name, ptr in ptrs.items():
            if name == "C" and ptr == 0 and beta == 0:
                continue
            problem.check_pointer(ptr, name)
        self(ptrs["A"], ptrs["B"], ptrs["C"] or None, ptrs["D"], problem.m, problem.n, problem.k,
             problem.lda, problem.ldb, problem.ldc, problem.ldd, alpha, beta, stream)

    def __repr__(self) -> str:
        return f"GemmKernelLibrary({str(self.path)!r}, {self.name!r})"


def _code_hint(code: int) -> str | None:
    if 100 <= code < 200:
        return ("CUTLASS can_implement refused the arguments: check GemmProblem(...).validate() "
                "(TMA alignment of extents, leading dimensions and pointers)")
    if code >= 1000:
        return "a CUDA runtime call failed: is this an sm_90 GPU, and is the pointer device memory?"
    return None
