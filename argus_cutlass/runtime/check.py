"""Generic numerics and timing glue (no torch needed): dtype bit conversions and CUDA-event timing.

A family's check harness builds on these (the GEMM's is :mod:`argus_cutlass.kernels.gemm.check`).
"""

from __future__ import annotations

import statistics
from typing import Any, Callable

import numpy as np

from argus_cutlass.errors import DeviceError, ProblemError
from argus_cutlass.runtime.cuda import Event, stream_handle

#: fill byte used to poison outputs and padding (NaN in bf16, fp16 and fp32)
POISON_BYTE = 0xFF
#: numpy storage type of each dtype's raw bits
BITS_DTYPE = {"bf16": np.uint16, "fp16": np.uint16, "fp32": np.uint32}


# ---- dtype conversion (numpy has no bf16) ---------------------------------------------


def float32_to_bits(x: np.ndarray, dtype: str) -> np.ndarray:
    """fp32 values -> the raw bits of ``dtype`` (uint16 for bf16/fp16, uint32 for fp32).

    bf16 uses round-to-nearest-even on the fp32 bit pattern (NaN stays a quiet NaN);
    fp16 uses numpy's float16 cast (also round-to-nearest-even).

    >>> float32_to_bits(np.array([1.0, -2.0, 1.00390625], np.float32), "bf16").tolist()
    [16256, 49152, 16256]
    """
    x = np.asarray(x, dtype=np.float32)
    if dtype == "bf16":
        bits = x.view(np.uint32).astype(np.uint64)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        out = rounded.astype(np.uint16)
        out[np.isnan(x)] = 0x7FC0
        return out
    if dtype == "fp16":
        return x.astype(np.float16).view(np.uint16)
    if dtype == "fp32":
        return x.view(np.uint32).copy()
    raise ProblemError("problem.dtype", f"unknown dtype {dtype!r}")


def bits_to_float32(bits: np.ndarray, dtype: str) -> np.ndarray:
    """The raw bits of ``dtype`` -> fp32 values (exact)."""
    if dtype == "bf16":
        return (bits.astype(np.uint32) << 16).view(np.float32)
    if dtype == "fp16":
        return bits.view(np.float16).astype(np.float32)
    if dtype == "fp32":
        return bits.view(np.float32).copy()
    raise ProblemError("problem.dtype", f"unknown dtype {dtype!r}")



# ---- timing ---------------------------------------------------------------------------


def time_kernel(fn: Callable[[], Any], warmup: int = 10, iters: int = 100, stream: Any = None) -> float:
    """Median milliseconds of ``fn()`` measured with CUDA events on ``stream``.

    ``fn`` must enqueue its work on ``stream`` (e.g. ``lambda: lib(..., stream=s)``).
    Each iteration is bracketed by its own pair of events; the L2 cache is not flushed
    (back-to-back runs of the same problem, as a serving loop sees them).

    Raises:
        DeviceError: ``device.timing`` when ``iters < 1``; CUDA failures.
    """
    if iters < 1:
        raise DeviceError("device.timing", f"iters={iters}: need at least one timed iteration")
    for _ in range(max(0, warmup)):
        fn()
    handle = stream_handle(stream)
    events = [(Event(), Event()) for _ in range(iters)]
    for start, end in events:
        start.record(handle)
        fn()
        end.record(handle)
    times = [start.elapsed_ms(end) for start, end in events]
    for start, end in events:
        start.destroy()
        end.destroy()
    return float(statistics.median(times))
