"""The fixed configuration heuristic used when no tuned configuration is known.

Rules of thumb for sm_90 (H100/H200, 132 SMs), from the sweeps recorded in
``bench/RESULTS.md`` (bf16, layout ``tn``, interleaved with cuBLAS):

* M <= 64 (memory-bound weight read): a 64x128x64 ping-pong tile, no cluster, 8 stages;
  N/128 CTAs stream disjoint slices of B with many bytes in flight.
* 64 < M <= 128: a 128x128x64 cooperative tile, no cluster; 128x256 when N alone gives
  enough tiles to fill the GPU (N >= 100 * 256).
* larger M: a 128x256x64 cooperative tile with a 2x1 cluster (B multicast along M), 4
  stages, the persistent scheduler walking along N; with a scheduler swizzle of 4 once
  both tile counts are >= 8 (it lost half the speed at 4 tile rows).

The agent (``argus_cutlass.agent``) replaces this with tuned choices.
"""

from __future__ import annotations

from argus_cutlass.plan.config import GemmConfig

#: streaming multiprocessors of an H100/H200 SXM
SM90_SMS = 132


def default_config(m: int, n: int, k: int, dtype: str = "bf16", out_dtype: str = "bf16",
                   layout: str = "tn") -> GemmConfig:
    """A configuration for the (M, N, K) problem, with its stages fitted to shared memory.

    Args:
        m, n, k: problem size in elements (>= 1).
        dtype: ``bf16`` or ``fp16`` (A and B).
        out_dtype: ``bf16``, ``fp16`` or ``fp32`` (C and D).
        layout: ``tn``, ``nt``, ``nn`` or ``tt`` (see :mod:`argus_cutlass.plan.config`).

    >>> default_config(8192, 8192, 8192).tile
    (128, 256, 64)
    >>> default_config(16, 8192, 8192).schedule
    'pingpong'
    """
    common = {"dtype": dtype, "out_dtype": out_dtype, "layout": layout}
    if m <= 64:
        cfg = GemmConfig(**common, tile_m=64, tile_n=128, cluster_m=1, cluster_n=1, stages=8,
                         schedule="pingpong", epi_m=64, epi_n=32)
    elif m <= 128:
        tile_n = 256 if n >= 100 * 256 else 128
        cfg = GemmConfig(**common, tile_m=128, tile_n=tile_n, cluster_m=1, cluster_n=1,
                         stages=6, schedule="cooperative")
    else:
        swizzle = 4 if (m // 128 >= 8 and n // 256 >= 8) else 1
        cfg = GemmConfig(**common, swizzle=swizzle, raster="along_n")
    return fit_stages(cfg)


def fit_stages(cfg: GemmConfig) -> GemmConfig:
    """``cfg`` with its stage count lowered until the shared-memory model fits sm_90.

    Stops at 2 stages (the verifier reports a config that does not fit even then).
    """
    from argus_cutlass.plan.resources import SMEM_LIMIT_BYTES, smem_bytes
    from argus_cutlass.programs.gemm import build_gemm_program

    while cfg.stages > 2 and smem_bytes(build_gemm_program(cfg)).total > SMEM_LIMIT_BYTES:
        cfg = cfg.replace(stages=cfg.stages - 1)
    return cfg
