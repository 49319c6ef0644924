"""Thin helpers over the CUDA runtime of cuda-python (no torch needed).

``cuda.bindings.runtime`` (cuda-python 12.6+) is used, or the older ``cuda.cudart``.
Every call goes through :func:`check`, which turns a non-success code into a
:class:`~argus_cutlass.errors.DeviceError` naming the call and CUDA's error string.
cuda-python is imported on first use, never at module import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from argus_cutlass.errors import DeviceError

_CUDART: Any = None


def cudart() -> Any:
    """The cuda-python runtime module (``cuda.bindings.runtime`` or ``cuda.cudart``).

    Raises:
        DeviceError: ``device.cuda_python`` when cuda-python is not installed.
    """
    global _CUDART
    if _CUDART is None:
        try:
            from cuda.bindings import runtime as rt
        except ImportError:
            try:
                from cuda import cudart as rt  # cuda-python < 12.6
            except ImportError:
                raise DeviceError(
                    "device.cuda_python",
                    "cuda-python is not installed (neither cuda.bindings.runtime nor cuda.cudart)",
                    "pip install cuda-python",
                ) from None
        _CUDART = rt
    return _CUDART


def error_string(code: Any) -> str:
    """``"cudaErrorX: text"`` for a ``cudaError_t`` (or its int value)."""
    rt = cudart()
    err = code if isinstance(code, rt.cudaError_t) else rt.cudaError_t(int(code))
    try:
        _, name = rt.cudaGetErrorName(err)
        _, text = rt.cudaGetErrorString(err)
        return f"{name.decode()}: {text.decode()}"
    except Exception:  # noqa: BLE001 - best effort for the message only
        return f"cudaError {int(err)}"


def check(call: str, result: Any) -> Any:
    """Unpack a cuda-python result tuple ``(err, *values)``.

    Returns:
        ``None``, the single value, or a tuple of values.

    Raises:
        DeviceError: ``device.cuda_call`` naming ``call`` and the CUDA error string.
    """
    if isinstance(result, tuple):
        err, values = result[0], result[1:]
    else:
        err, values = result, ()
    if int(err) != 0:
        raise DeviceError("device.cuda_call", f"{call} failed: {error_string(err)}")
    if not values:
        return None
    return values[0] if len(values) == 1 else values


class GpuAvailability(NamedTuple):
    """Result of :func:`gpu_available`: truthy exactly when ``ok``; unpacks as ``(ok, reason)``."""

    ok: bool
    reason: str

    def __bool__(self) -> bool:
        return self.ok


def nvidia_driver_present() -> bool:
    """True when this machine has an NVIDIA kernel driver (``/dev/nvidiactl``, ``/proc/driver/nvidia``)
    or a loadable ``libcuda.so.1``; False on a machine without any NVIDIA GPU (never raises)."""
    import ctypes
    import os

    if os.path.exists("/dev/nvidiactl") or os.path.exists("/proc/driver/nvidia/version"):
        return True
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def gpu_available() -> GpuAvailability:
    """Whether cuda-python, a driver and at least one GPU are present (never raises).

    Use it as a bool (``if gpu_available():``) or unpack it:
    ``ok, why = gpu_available()`` where ``why`` says what is missing (``""`` when ok).
    """
    try:
        rt = cudart()
    except DeviceError as exc:
        return GpuAvailability(False, exc.message)
    try:
        err, count = rt.cudaGetDeviceCount()
    except Exception as exc:  # noqa: BLE001 - any failure means "no usable GPU"
        return GpuAvailability(False, f"cudaGetDeviceCount raised {type(exc).__name__}: {exc}")
    if int(err) != 0:
        if not nvidia_driver_present():
            # cudart says "driver version is insufficient" when there is no driver at all: say what is missing
            return GpuAvailability(False, "no NVIDIA GPU or driver on this machine (no /dev/nvidiactl, no "
                                          "libcuda.so.1)")
        return GpuAvailability(False, f"cudaGetDeviceCount failed: {error_string(err)}")
    if count == 0:
        return GpuAvailability(False, "the CUDA driver reports 0 devices")
    return GpuAvailability(True, "")


@dataclass(frozen=True)
class DeviceInfo:
    """Attributes: index, name, compute capability ``(major, minor)``, SM count,
    global memory (bytes), max opt-in shared memory per block (bytes)."""

    index: int
    name: str
    capability: tuple[int, int]
    sm_count: int
    total_memory_bytes: int
    smem_per_block_optin_bytes: int

    @property
    def arch(self) -> str:
        return f"sm_{self.capability[0]}{self.capability[1]}"


def device_info(device: int | None = None) -> DeviceInfo:
    """Properties of ``device`` (default: the current device).

    Raises:
        DeviceError: ``device.none`` when there is no GPU/driver; ``device.cuda_call``.
    """
    rt = cudart()
    err, count = rt.cudaGetDeviceCount()
    if int(err) != 0 or count == 0:
        raise DeviceError(
            "device.none",
            f"no CUDA GPU is usable ({error_string(err) if int(err) else '0 devices'})",
            "run on a machine with an NVIDIA H100/H200 and its driver",
        )
    if device is None:
        device = check("cudaGetDevice", rt.cudaGetDevice())
    prop = check("cudaGetDeviceProperties", rt.cudaGetDeviceProperties(device))
    name = prop.name.decode(errors="replace") if isinstance(prop.name, bytes) else str(prop.name)
    return DeviceInfo(
        index=int(device),
        name=name.rstrip("\x00"),
        capability=(int(prop.major), int(prop.minor)),
        sm_count=int(prop.multiProcessorCount),
        total_memory_bytes=int(prop.totalGlobalMem),
        smem_per_block_optin_bytes=int(prop.sharedMemPerBlockOptin),
    )


def require_sm90(device: int | None = None) -> DeviceInfo:
    """The device's info, checking that it can run sm_90a code.

    Raises:
        DeviceError: ``device.arch`` naming the GPU when it is not compute capability 9.0.
    """
    info = device_info(device)
    if info.capability != (9, 0):
        raise DeviceError(
            "device.arch",
            f"GPU {info.index} is {info.name} ({info.arch}); argus_cutlass builds sm_90a "
            "kernels (wgmma, TMA, clusters), which run only on compute capability 9.0",
            "use an NVIDIA H100 or H200",
        )
    return info


def synchronize() -> None:
    """``cudaDeviceSynchronize``; raises DeviceError with any asynchronous error."""
    check("cudaDeviceSynchronize", cudart().cudaDeviceSynchronize())


class DeviceBuffer:
    """``nbytes`` of device memory from ``cudaMalloc`` (256-byte aligned), freed by
    :meth:`free`, on ``with`` exit, or when garbage-collected.

    Attributes:
        ptr: device address (int).
        nbytes: size in bytes.
    """

    def __init__(self, nbytes: int) -> None:
        if nbytes <= 0:
            raise DeviceError("device.alloc", f"cannot allocate {nbytes} bytes (must be >= 1)")
        self.nbytes = int(nbytes)
        self.ptr = int(check(f"cudaMalloc({nbytes})", cudart().cudaMalloc(self.nbytes)))

    @classmethod
    def from_numpy(cls, array: np.ndarray) -> DeviceBuffer:
        """A new buffer holding the bytes of ``array`` (made C-contiguous first)."""
        buf = cls(max(1, array.nbytes))
        buf.copy_from(array)
        return buf

    def copy_from(self, array: np.ndarray, stream: Any = None) -> None:
        """Copy ``array``'s bytes (C order) to the start of the buffer.

        Synchronous when ``stream`` is None, else ``cudaMemcpyAsync`` on it.

        Raises:
            DeviceError: ``device.copy`` when the array is larger than the buffer.
        """
        host = np.ascontiguousarray(array)
        self._check_size(host.nbytes, "copy_from")
        rt = cudart()
        kind = rt.cudaMemcpyKind.cudaMemcpyHostToDevice
        if stream is None:
            check("cudaMemcpy(HtoD)", rt.cudaMemcpy(self.ptr, host.ctypes.data, host.nbytes, kind))
        else:
            check("cudaMemcpyAsync(HtoD)",
                  rt.cudaMemcpyAsync(self.ptr, host.ctypes.data, host.nbytes, kind, stream_handle(stream)))
            check("cudaStreamSynchronize", rt.cudaStreamSynchronize(stream_handle(stream)))

    def to_numpy(self, dtype: Any = np.uint8, shape: tuple[int, ...] | None = None) -> np.ndarray:
        """Copy the buffer (or its first ``prod(shape)`` elements) to a new host array.

        Synchronous (``cudaMemcpy`` waits for prior work on the legacy default stream).
        """
        dt = np.dtype(dtype)
        if shape is None:
            shape = (self.nbytes // dt.itemsize,)
        out = np.empty(shape, dtype=dt)
        self._check_size(out.nbytes, "to_numpy")
        rt = cudart()
        kind = rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
        check("cudaMemcpy(DtoH)", rt.cudaMemcpy(out.ctypes.data, self.ptr, out.nbytes, kind))
        return out

    def fill(self, byte: int) -> None:
        """Set every byte to ``byte`` (0..255) with ``cudaMemset``.

        ``fill(0xFF)`` poisons bf16, fp16 and fp32 data with NaN bit patterns.
        """
        if not 0 <= byte <= 255:
            raise DeviceError("device.fill", f"fill byte must be 0..255, got {byte}")
        check("cudaMemset", cudart().cudaMemset(self.ptr, byte, self.nbytes))

    def free(self) -> None:
        if getattr(self, "ptr", 0):
            ptr, self.ptr = self.ptr, 0
            try:
                cudart().cudaFree(ptr)
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass

    def _check_size(self, nbytes: int, what: str) -> None:
        if nbytes > self.nbytes:
            raise DeviceError(
                "device.copy", f"{what}: {nbytes} bytes do not fit in a {self.nbytes}-byte buffer"
            )

    def __int__(self) -> int:
        return self.ptr

    def __enter__(self) -> DeviceBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.free()

    def __del__(self) -> None:
        self.free()

    def __repr__(self) -> str:
        return f"DeviceBuffer(ptr=0x{self.ptr:x}, nbytes={self.nbytes})"


class Stream:
    """A CUDA stream (``cudaStreamCreateWithFlags(cudaStreamNonBlocking)``).

    ``handle`` is the ``cudaStream_t`` as an int (pass it to a kernel entry).
    """

    def __init__(self) -> None:
        rt = cudart()
        self._stream = check("cudaStreamCreateWithFlags",
                             rt.cudaStreamCreateWithFlags(rt.cudaStreamNonBlocking))
        self.handle = int(self._stream)

    def synchronize(self) -> None:
        check("cudaStreamSynchronize", cudart().cudaStreamSynchronize(self._stream))

    def destroy(self) -> None:
        if getattr(self, "handle", 0):
            self.handle = 0
            try:
                cudart().cudaStreamDestroy(self._stream)
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass

    def __int__(self) -> int:
        return self.handle

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    def __del__(self) -> None:
        self.destroy()


def stream_handle(stream: Any) -> int:
    """The ``cudaStream_t`` value of ``stream`` as an int.

    Accepts None / 0 (the legacy default stream), an int, a :class:`Stream`, a torch
    stream (anything with ``.cuda_stream``), or a cuda-python stream object.
    """
    if stream is None:
        return 0
    if isinstance(stream, int):
        return stream
    if isinstance(stream, Stream):
        return stream.handle
    if hasattr(stream, "cuda_stream"):
        return int(stream.cuda_stream)
    try:
        return int(stream)
    except (TypeError, ValueError):
        raise DeviceError(
            "device.stream", f"cannot use {type(stream).__name__} as a CUDA stream"
        ) from None


class Event:
    """A CUDA event for timing (``cudaEventCreate``)."""

    def __init__(self) -> None:
        self._event = check("cudaEventCreate", cudart().cudaEventCreate())

    def record(self, stream: Any = None) -> None:
        check("cudaEventRecord", cudart().cudaEventRecord(self._event, stream_handle(stream)))

    def synchronize(self) -> None:
        check("cudaEventSynchronize", cudart().cudaEventSynchronize(self._event))

    def elapsed_ms(self, end: Event) -> float:
        """Milliseconds from this event to ``end`` (both recorded; waits for ``end``)."""
        end.synchronize()
        return float(check("cudaEventElapsedTime", cudart().cudaEventElapsedTime(self._event, end._event)))

    def destroy(self) -> None:
        ev, self._event = getattr(self, "_event", None), None
        if ev is not None:
            try:
                cudart().cudaEventDestroy(ev)
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass

    def __del__(self) -> None:
        self.destroy()


def _graph_call(call: str, result: Any) -> Any:
    """:func:`check` of a capture / instantiation call, its failure named ``device.graph``."""
    try:
        return check(call, result)
    except DeviceError as exc:
        raise DeviceError("device.graph", exc.message) from None


def capture_handle(stream: Any) -> int:
    """:func:`stream_handle` of a stream a CUDA graph can be captured from.

    Raises:
        DeviceError: ``device.stream`` for the legacy default stream (stream 0: it cannot be captured).
    """
    handle = stream_handle(stream)
    if handle == 0:
        raise DeviceError("device.stream", "a CUDA graph cannot be captured from the legacy default stream "
                          "(stream 0): pass a Stream")
    return handle


class Graph:
    """The work a callable enqueues on a stream, captured once into an executable CUDA graph and launched as a
    whole (CUDA Programming Guide, "CUDA Graphs", stream capture: ``cudaStreamBeginCapture`` in thread-local mode,
    ``cudaStreamEndCapture``, ``cudaGraphInstantiate``; ``cudaGraphLaunch`` per :meth:`launch`).

    Capturing does not run the work; each launch runs every captured operation with the arguments it had at
    capture (pointers, sizes). The stream must not be the legacy default stream (it cannot be captured).

    Raises:
        DeviceError: ``device.stream`` for the default stream; ``device.graph`` when capture or instantiation fails
            (e.g. the callable synchronized or allocated with ``cudaMalloc`` while capturing: the stream is left
            usable, so a caller may time the work another way); ``device.cuda_call`` when a launch fails.
    """

    def __init__(self, record: Any, stream: Any) -> None:
        self._exec = None
        handle = capture_handle(stream)
        import gc

        rt = cudart()
        # a DeviceBuffer freed by the garbage collector while capturing would call cudaFree, which a thread-local
        # capture forbids (it invalidates the capture): collect first, and not during the capture (as torch does)
        gc.collect()
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            _graph_call("cudaStreamBeginCapture", rt.cudaStreamBeginCapture(
                handle, rt.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal))
            try:
                record()
            except BaseException:
                ended = rt.cudaStreamEndCapture(handle)   # leave the stream usable; drop the partial graph
                if int(ended[0]) == 0 and ended[1] is not None:
                    rt.cudaGraphDestroy(ended[1])
                raise
            graph = _graph_call("cudaStreamEndCapture", rt.cudaStreamEndCapture(handle))
        finally:
            if was_enabled:
                gc.enable()
        try:
            self._exec = _graph_call("cudaGraphInstantiate", rt.cudaGraphInstantiate(graph, 0))
        finally:
            rt.cudaGraphDestroy(graph)

    def launch(self, stream: Any) -> None:
        """Enqueue one run of the captured work on ``stream``."""
        check("cudaGraphLaunch", cudart().cudaGraphLaunch(self._exec, stream_handle(stream)))

    def destroy(self) -> None:
        ex, self._exec = getattr(self, "_exec", None), None
        if ex is not None:
            try:
                cudart().cudaGraphExecDestroy(ex)
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass

    def __del__(self) -> None:
        self.destroy()
