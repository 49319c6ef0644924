"""Render a verified :class:`~argus_cutlass.programs.gemm.GemmProgram` to CuTe C++.

Jinja2 with ``StrictUndefined``: a template variable the renderer did not supply is an
error, never an empty string. Every C++ type in the output is printed from the DSL
objects the verifier checked.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

import jinja2

from argus_cutlass import __version__
from argus_cutlass.dsl.atoms import CPP_TYPE
from argus_cutlass.kernels.gemm.config import a_is_k_major, b_is_k_major
from argus_cutlass.plan.resources import SMEM_LIMIT_BYTES, smem_bytes
from argus_cutlass.programs.gemm import GemmProgram
from argus_cutlass.render.naming import kernel_name

GEMM_TEMPLATE = "gemm_sm90.cu.j2"

_KERNEL_SCHEDULE = {
    "cooperative": "cutlass::gemm::KernelTmaWarpSpecializedCooperative",
    "pingpong": "cutlass::gemm::KernelTmaWarpSpecializedPingpong",
}
_RASTER = {
    "along_m": "cutlass::gemm::kernel::detail::RasterOrderOptions::AlongM",
    "along_n": "cutlass::gemm::kernel::detail::RasterOrderOptions::AlongN",
}
_TILE_SCHEDULER = {
    "persistent": "cutlass::gemm::PersistentScheduler",
    "streamk": "cutlass::gemm::StreamKScheduler",
    "splitk": "cutlass::gemm::StreamKScheduler",
}
_K_MAJOR_STRIDE = "cute::Stride<int64_t, cute::Int<1>, int64_t>"
_MN_MAJOR_STRIDE = "cute::Stride<cute::Int<1>, int64_t, int64_t>"


@lru_cache(maxsize=1)
def template_environment() -> jinja2.Environment:
    """The Jinja2 environment over the ``argus_cutlass.templates`` package (StrictUndefined)."""
    loader = jinja2.FunctionLoader(
        lambda name: resources.files("argus_cutlass.templates").joinpath(name).read_text()
    )
    return jinja2.Environment(
        loader=loader,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


def gemm_context(program: GemmProgram, verified: tuple[str, ...] = ()) -> dict:
    """The template variables for ``program`` (exposed for golden tests)."""
    c = program.config
    a, b, e = program.a, program.b, program.epilogue
    a_k, b_k = a_is_k_major(c.layout), b_is_k_major(c.layout)  # the problem's operands
    ka_k, kb_k = c.kernel_k_majors  # the kernel's operands
    # Stride values of the problem's A and B over run()'s arguments (M, N, K are the problem's).
    user_a = ("cute::make_stride(lda, cute::Int<1>{}, int64_t(lda) * M)"
              if a_k else "cute::make_stride(cute::Int<1>{}, lda, int64_t(lda) * K)")
    user_b = ("cute::make_stride(ldb, cute::Int<1>{}, int64_t(ldb) * N)"
              if b_k else "cute::make_stride(cute::Int<1>{}, ldb, int64_t(ldb) * K)")
    return {
        "name": kernel_name(c),
        "version": __version__,
        "verified": list(verified),
        "dtype": c.dtype,
        "out_dtype": c.out_dtype,
        "a_k_major": a_k,
        "b_k_major": b_k,
        "swap_ab": c.swap_ab,
        "cpp_a": CPP_TYPE[c.dtype],
        "cpp_b": CPP_TYPE[c.dtype],
        "cpp_out": CPP_TYPE[c.out_dtype],
        "stride_a": _K_MAJOR_STRIDE if ka_k else _MN_MAJOR_STRIDE,
        "stride_b": _K_MAJOR_STRIDE if kb_k else _MN_MAJOR_STRIDE,
        "stride_a_value": user_b if c.swap_ab else user_a,
        "stride_b_value": user_a if c.swap_ab else user_b,
        "stride_cd": _MN_MAJOR_STRIDE if e.d_major == "M" else _K_MAJOR_STRIDE,
        "tile_m": c.tile_m, "tile_n": c.tile_n, "tile_k": c.tile_k,
        "cluster_m": c.cluster_m, "cluster_n": c.cluster_n,
        "stages": c.stages,
        "schedule": c.schedule,
        "kernel_schedule": _KERNEL_SCHEDULE[c.schedule],
        "raster": c.raster,
        "raster_cpp": _RASTER[c.raster],
        "swizzle": c.swizzle,
        "tile_scheduler": _TILE_SCHEDULER[c.scheduler],
        "scheduler": c.scheduler,
        "splits": c.splits,
        "tiled_mma": program.tiled_mma.cpp(),
        "mma_threads": program.tiled_mma.threads,
        "mma_tile": program.tiled_mma.shape_mnk,
        "smem_atom_a": a.smem_atom.cpp(c.dtype),
        "smem_atom_b": b.smem_atom.cpp(c.dtype),
        "atom_a_shape": _cute_atom_shape(a),
        "atom_b_shape": _cute_atom_shape(b),
        "tma_a": a.tma.cpp(),
        "tma_b": b.tma.cpp(),
        "epi_m": e.epi_m, "epi_n": e.epi_n,
        "stages_c": e.stages_c, "stages_d": e.stages_d,
        "fragment_size": e.fragment_size,
        "reuse_smem_c": "true" if e.reuse_smem_c else "false",
        "delay_tma_store": "true" if e.delay_tma_store else "false",
        "smem_atom_c": e.smem_atom_c.cpp(c.out_dtype),
        "smem_atom_d": e.smem_atom_d.cpp(c.out_dtype),
        "copy_r2s": e.copy_r2s,
        "copy_s2r": e.copy_s2r,
        "copy_atom_c": e.copy_atom_c,
        "tx_bytes": program.pipeline.tx_bytes,
        "smem_elems_a": c.tile_m * c.tile_k * c.stages,
        "smem_elems_b": c.tile_n * c.tile_k * c.stages,
        "smem_limit": SMEM_LIMIT_BYTES,
        "smem_model_bytes": smem_bytes(program).total,
    }


def _cute_atom_shape(op) -> tuple[int, int]:
    # CuTe's GMMA atoms are indexed (MN, K) for both majors.
    return op.smem_atom.shape_mn_k


def render_gemm(program: GemmProgram, verified: tuple[str, ...] = ()) -> str:
    """The self-contained ``.cu`` source of ``program``.

    ``verified`` lists the invariants the verifier proved; they are written into the
    file's header comment.
    """
    return template_environment().get_template(GEMM_TEMPLATE).render(**gemm_context(program, verified))
