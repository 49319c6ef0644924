"""Run the stmatrix silicon probe (``templates/stmatrix_probe.cu.j2``) on a Hopper GPU.

The probe issues ``stmatrix.sync.aligned.m8n8.x{num}[.trans].shared.b16`` with host-given
register words and per-lane row addresses and returns the shared-memory image, so that the
verifier's transfer function (:func:`argus_cutlass.verify.staging.stmatrix_store`) can be
compared with the hardware (``tests/gpu/test_stmatrix_gpu.py``).
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import numpy as np

from argus_cutlass import __version__

__all__ = ["PROBE_NAME", "build_probe", "render_probe", "run_probe"]

#: C identifier of the probe's host entry
PROBE_NAME = "argus_stmatrix_probe"
TEMPLATE = "stmatrix_probe.cu.j2"


def render_probe() -> str:
    """The probe's ``.cu`` source."""
    from argus_cutlass.render.render import template_environment

    return template_environment().get_template(TEMPLATE).render(name=PROBE_NAME, version=__version__)


def build_probe() -> Any:
    """Compile the probe into a shared library (content-addressed cache).

    Returns the :class:`~argus_cutlass.build.nvcc.Artifact`.

    Raises:
        argus_cutlass.errors.CompileError: nvcc failed; argus_cutlass.errors.ToolchainError: no nvcc.
    """
    from argus_cutlass.build.nvcc import compile_cu

    return compile_cu(render_probe(), PROBE_NAME, "shared")


@functools.cache
def _entry(so_path: str) -> Any:
    lib = ctypes.CDLL(so_path, mode=ctypes.RTLD_LOCAL)
    fn = getattr(lib, PROBE_NAME)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_int] * 5 + [ctypes.c_void_p, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    return fn


def run_probe(regs: np.ndarray, rows: np.ndarray, num: int, trans: bool, smem_bytes: int,
              so_path: str | None = None) -> np.ndarray:
    """Issue the stores on the GPU and return the shared-memory image.

    Args:
        regs: ``(threads, instrs, 4)`` uint32 register words (``threads`` a multiple of 32).
        rows: ``(threads, instrs)`` uint32 row byte offsets (16-byte aligned, inside the buffer).
        num: 1, 2 or 4 matrices; trans: the ``.trans`` qualifier.
        smem_bytes: buffer size (bytes, multiple of 16, <= 232448).
        so_path: a built probe library (default: :func:`build_probe`).

    Returns:
        ``(smem_bytes // 2,)`` uint16 image (0xFFFF where nothing was stored).

    Raises:
        ValueError: table shapes disagree; argus_cutlass.errors.CudaError: no usable sm_90 GPU;
        RuntimeError: the entry returned an error code.
    """
    from argus_cutlass.runtime.cuda import DeviceBuffer, require_sm90, synchronize

    threads, instrs = rows.shape
    if regs.shape != (threads, instrs, 4) or threads % 32:
        raise ValueError(f"regs {regs.shape} / rows {rows.shape}: expected (threads, instrs, 4) / (threads, instrs) "
                         "with threads a multiple of 32")
    require_sm90()
    fn = _entry(str(so_path or build_probe().path))
    out = np.zeros(smem_bytes // 2, dtype=np.uint16)
    with DeviceBuffer.from_numpy(np.ascontiguousarray(regs, dtype=np.uint32)) as dr, \
            DeviceBuffer.from_numpy(np.ascontiguousarray(rows, dtype=np.uint32)) as drow, \
            DeviceBuffer.from_numpy(out) as dout:
        code = fn(int(dr), int(drow), threads // 32, instrs, num, int(trans), smem_bytes, int(dout), None)
        if code != 0:
            raise RuntimeError(f"{PROBE_NAME} returned {code}")
        synchronize()
        return dout.to_numpy(np.uint16, (smem_bytes // 2,))
