"""An fp32 SIMT reference GEMM, built through the same nvcc/cache path as the kernels.

It computes ``D = alpha * A @ B + beta * C`` with one thread per output element, fp32
products and an fp32 sum in k order, and writes an **fp32** D (row-major M x N, ``ldd``).
A and B are bf16 or fp16 in any of the four layouts; C is in the GEMM's output dtype.
Its ``extern "C"`` entry has the GEMM entry's signature and return codes (the C ABI of
:mod:`argus_cutlass.kernels.gemm.problem`: 1 size, 2 null C, ``1000 + cudaError_t``), so
:class:`~argus_cutlass.kernels.gemm.library.GemmKernelLibrary` loads it. Unlike the generated
kernels it has no alignment rules: any sizes >= 0 and leading dimensions work.
"""

from __future__ import annotations

from functools import cache

from argus_cutlass import __version__
from argus_cutlass.errors import ProblemError
from argus_cutlass.kernels.gemm.config import a_is_k_major, b_is_k_major
from argus_cutlass.kernels.gemm.library import GemmKernelLibrary
from argus_cutlass.kernels.gemm.problem import INPUT_DTYPES, LAYOUTS, OUTPUT_DTYPES
from argus_cutlass.render.env import template_environment

REFERENCE_TEMPLATE = "reference_gemm.cu.j2"
_CPP = {"bf16": "__nv_bfloat16", "fp16": "__half", "fp32": "float"}


def reference_name(dtype: str, out_dtype: str, layout: str) -> str:
    """``argus_reference_gemm_<dtype>_<out_dtype>_<layout>`` (``out_dtype`` is C's type).

    Raises:
        ProblemError: ``problem.dtype`` / ``problem.layout`` for unknown names.
    """
    if dtype not in INPUT_DTYPES:
        raise ProblemError("problem.dtype", f"reference GEMM: dtype={dtype!r} not in {INPUT_DTYPES}")
    if out_dtype not in OUTPUT_DTYPES:
        raise ProblemError("problem.dtype", f"reference GEMM: out_dtype={out_dtype!r} not in {OUTPUT_DTYPES}")
    if layout not in LAYOUTS:
        raise ProblemError("problem.layout", f"reference GEMM: layout={layout!r} not in {LAYOUTS}")
    return f"argus_reference_gemm_{dtype}_{out_dtype}_{layout}"


def render_reference(dtype: str, out_dtype: str, layout: str) -> tuple[str, str]:
    """``(name, source)`` of the reference GEMM for A/B ``dtype``, C ``out_dtype``, ``layout``."""
    name = reference_name(dtype, out_dtype, layout)
    src = template_environment().get_template(REFERENCE_TEMPLATE).render(
        name=name,
        version=__version__,
        dtype=dtype,
        out_dtype=out_dtype,
        a_k_major=a_is_k_major(layout),
        b_k_major=b_is_k_major(layout),
        cpp_in=_CPP[dtype],
        cpp_out=_CPP[out_dtype],
    )
    return name, src


@cache
def reference_library(dtype: str, out_dtype: str, layout: str) -> GemmKernelLibrary:
    """Build (or fetch from the cache) and load the reference GEMM.

    Raises:
        ToolchainError, CompileError: from :func:`~argus_cutlass.build.nvcc.compile_cu`.
        LaunchError: the library cannot be loaded.
    """
    from argus_cutlass.build.nvcc import compile_cu

    name, src = render_reference(dtype, out_dtype, layout)
    art = compile_cu(src, name, kind="shared")
    return GemmKernelLibrary(art.path, name)
