"""Run the silicon probe kernels (no CUTLASS; inline PTX) on a Hopper GPU.

* ``templates/stmatrix_probe.cu.j2``: issues ``stmatrix.sync.aligned.m8n8.x{num}[.trans].shared.b16``
  with host-given register words and per-lane row addresses and returns the shared-memory
  image (compared with :func:`argus_cutlass.verify.staging.stmatrix_store` by
  ``tests/gpu/test_stmatrix_gpu.py``).
* ``templates/multicast_probe.cu.j2``: one thread-block cluster whose CTAs multicast slices of
  a tile with host-given slices, source blocks and ``ctaMask`` values, and returns every CTA's
  tile and whether its mbarrier completed (compared with
  :func:`argus_cutlass.verify.multicast.probe_tables` by ``tests/gpu/test_multicast_gpu.py``).
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from argus_cutlass import __version__

__all__ = ["MULTICAST_PROBE", "STMATRIX_PROBE", "build_probe", "render_probe", "run_multicast_probe",
           "run_stmatrix_probe"]

#: C identifiers of the probes' host entries (= their templates' stems)
STMATRIX_PROBE = "argus_stmatrix_probe"
MULTICAST_PROBE = "argus_multicast_probe"
_TEMPLATES = {STMATRIX_PROBE: "stmatrix_probe.cu.j2", MULTICAST_PROBE: "multicast_probe.cu.j2"}


def render_probe(name: str) -> str:
    """The ``.cu`` source of probe ``name`` (:data:`STMATRIX_PROBE` or :data:`MULTICAST_PROBE`).

    Raises:
        KeyError: an unknown probe name.
    """
    from argus_cutlass.render.env import template_environment

    return template_environment().get_template(_TEMPLATES[name]).render(name=name, version=__version__)


def build_probe(name: str) -> Any:
    """Compile probe ``name`` into a shared library (content-addressed cache) and return the
    :class:`~argus_cutlass.build.nvcc.Artifact`.

    Raises:
        argus_cutlass.errors.CompileError: nvcc failed; argus_cutlass.errors.ToolchainError: no nvcc.
    """
    from argus_cutlass.build.nvcc import compile_cu

    return compile_cu(render_probe(name), name, "shared")


def _call(name: str, so_path: str | None, *args: Any) -> None:
    from argus_cutlass.runtime.launch import load_function

    code = load_function(str(so_path or build_probe(name).path), name)(*args)
    if code != 0:
        raise RuntimeError(f"{name} returned {code}")


def run_stmatrix_probe(regs: np.ndarray, rows: np.ndarray, num: int, trans: bool, smem_bytes: int,
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
    out = np.zeros(smem_bytes // 2, dtype=np.uint16)
    with DeviceBuffer.from_numpy(np.ascontiguousarray(regs, dtype=np.uint32)) as dr, \
            DeviceBuffer.from_numpy(np.ascontiguousarray(rows, dtype=np.uint32)) as drow, \
            DeviceBuffer.from_numpy(out) as dout:
        i = ctypes.c_int
        _call(STMATRIX_PROBE, so_path, ctypes.c_void_p(int(dr)), ctypes.c_void_p(int(drow)), i(threads // 32),
              i(instrs), i(num), i(int(trans)), i(smem_bytes), ctypes.c_void_p(int(dout)), ctypes.c_void_p(None))
        synchronize()
        return dout.to_numpy(np.uint16, (smem_bytes // 2,))


def run_multicast_probe(src: np.ndarray, slice_: np.ndarray, src_block: np.ndarray, mask: np.ndarray,
                        cluster: tuple[int, int], rows_per_slice: int, max_polls: int = 200_000,
                        so_path: str | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Launch one cluster of the multicast probe and return every CTA's tile and barrier state.

    Args:
        src: ``(blocks, tile_rows, 8)`` uint16 source rows (16 bytes each).
        slice_, src_block, mask: ``(ranks,)`` int, per ``%cluster_ctarank``: the slice each CTA
            issues, the source block it copies it from and its 16-bit ``ctaMask``.
        cluster: ``(cluster_m, cluster_n)`` (cluster dims x, y; at most 8 CTAs).
        rows_per_slice: rows one CTA copies.
        max_polls: ``mbarrier.try_wait`` polls before a CTA gives up (a missing delivery).

    Returns:
        ``(tiles, completed, ranks)``: ``(ranks, tile_rows, 8)`` uint16 (0xFFFF where nothing
        arrived), ``(ranks,)`` bool (the barrier completed), ``(ranks,)`` int (the rank each CTA
        read from ``%cluster_ctarank``, for checking the launch).

    Raises:
        ValueError: table shapes disagree; argus_cutlass.errors.CudaError: no usable sm_90 GPU;
        RuntimeError: the entry returned an error code.
    """
    from argus_cutlass.runtime.cuda import DeviceBuffer, require_sm90, synchronize

    cm, cn = cluster
    ranks = cm * cn
    _, tile_rows, width = src.shape
    if width != 8 or any(np.asarray(a).shape != (ranks,) for a in (slice_, src_block, mask)):
        raise ValueError(f"src {src.shape} must be (blocks, tile_rows, 8) and the tables ({ranks},)")
    require_sm90()
    tables = [np.ascontiguousarray(a, dtype=np.int32) for a in (slice_, src_block, mask)]
    out = np.zeros((ranks, tile_rows, 8), dtype=np.uint16)
    status = np.zeros((ranks, 2), dtype=np.int32)
    with DeviceBuffer.from_numpy(np.ascontiguousarray(src, dtype=np.uint16)) as ds, \
            DeviceBuffer.from_numpy(tables[0]) as dsl, DeviceBuffer.from_numpy(tables[1]) as dsb, \
            DeviceBuffer.from_numpy(tables[2]) as dmk, DeviceBuffer.from_numpy(out) as dout, \
            DeviceBuffer.from_numpy(status) as dst:
        i, p = ctypes.c_int, ctypes.c_void_p
        _call(MULTICAST_PROBE, so_path, p(int(ds)), p(int(dsl)), p(int(dsb)), p(int(dmk)), i(cm), i(cn),
              i(tile_rows), i(rows_per_slice), ctypes.c_longlong(max_polls), p(int(dout)), p(int(dst)), p(None))
        synchronize()
        tiles = dout.to_numpy(np.uint16, (ranks, tile_rows, 8))
        st = dst.to_numpy(np.int32, (ranks, 2))
    return tiles, st[:, 0].astype(bool), st[:, 1]
