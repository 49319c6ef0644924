"""Generic glue for built kernel libraries: device pointers and ``dlopen``-ed ``extern "C"`` functions.

A family's library class binds its own C ABI on top of these (the GEMM's is
:class:`argus_cutlass.kernels.gemm.library.GemmKernelLibrary`).
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

from argus_cutlass.errors import LaunchError


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
def has_device_data(t: Any) -> bool:
    """False for a torch tensor without memory behind it (a ``meta`` tensor, or a FakeTensor while
    ``torch.compile`` / ``torch.library`` trace an op): its data pointer cannot be read, so only the
    shape, dtype, stride and device rules can be checked."""
    device = getattr(t, "device", None)
    if device is not None and getattr(device, "type", None) == "meta":
        return False
    try:
        from torch._subclasses.fake_tensor import is_fake
    except ImportError:  # pragma: no cover - no torch (then no fake tensors either)
        return True
    return not is_fake(t)


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


class KernelLibrary:
    """A generated kernel's ``.so`` and the exports every family's C ABI shares: ``<name>`` (the
    entry, bound by the family's subclass), ``<name>_smem_bytes``, ``<name>_error_string`` and,
    when exported, ``<name>_threads``.

    Raises:
        LaunchError: ``launch.load`` (dlopen failed), ``launch.symbol`` (a required export is missing).
    """

    def __init__(self, path: Any, name: str) -> None:
        from pathlib import Path

        self.path = Path(path)
        self.name = name
        try:
            self._lib = load_library(str(self.path))
        except OSError as exc:
            raise LaunchError("launch.load", f"cannot load kernel library {self.path}: {exc}") from None
        self._smem = self._symbol(f"{name}_smem_bytes")
        self._smem.argtypes = []
        self._smem.restype = ctypes.c_int
        self._err = self._symbol(f"{name}_error_string")
        self._err.argtypes = [ctypes.c_int]
        self._err.restype = ctypes.c_char_p
        self._threads = self._optional(f"{name}_threads", [])

    def _symbol(self, symbol: str) -> Any:
        try:
            return getattr(self._lib, symbol)
        except AttributeError:
            raise LaunchError(
                "launch.symbol",
                f"{self.path} does not export {symbol!r}; was it built from a template with "
                f"kernel name {self.name!r}?",
            ) from None

    def _optional(self, symbol: str, argtypes: list[Any]) -> Any:
        fn = getattr(self._lib, symbol, None)
        if fn is not None:
            fn.argtypes = argtypes
            fn.restype = ctypes.c_int
        return fn

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

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r}, {self.name!r})"
