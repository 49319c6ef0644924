"""Deterministic kernel names from a configuration (cutlass_library ``procedural_name`` style)."""

from __future__ import annotations

from argus_cutlass.kernels.gemm.config import GemmConfig

_SCHEDULE = {"cooperative": "coop", "pingpong": "pp"}
_RASTER = {"along_m": "m", "along_n": "n"}


def kernel_name(cfg: GemmConfig) -> str:
    """A C identifier that encodes every field of ``cfg``; equal configs give equal names.

    >>> kernel_name(GemmConfig())
    'argus_gemm_sm90_bf16_bf16_tn_128x256x64_c2x1_s4_coop_e128x32_rn1'
    """
    c = cfg
    return (
        f"argus_gemm_sm90_{c.dtype}_{c.out_dtype}_{c.layout}_"
        f"{c.tile_m}x{c.tile_n}x{c.tile_k}_c{c.cluster_m}x{c.cluster_n}_s{c.stages}_"
        f"{_SCHEDULE[c.schedule]}_e{c.epi_m}x{c.epi_n}_r{_RASTER[c.raster]}{c.swizzle}"
        f"{_scheduler_suffix(c)}{'_swapab' if c.swap_ab else ''}"
    )


def _scheduler_suffix(c: GemmConfig) -> str:
    if c.scheduler == "streamk":
        return "_streamk"
    if c.scheduler == "splitk":
        return f"_splitk{c.splits}"
    return ""
