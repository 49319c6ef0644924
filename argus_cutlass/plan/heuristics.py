"""The fixed configuration heuristic used when no tuned configuration is known.

Rules of thumb for sm_90 (H100/H200, 132 SMs), measured with ``bench/``:

* large problems (M >= 256): a 128x256x64 cooperative tile, cluster 2x1 (B multicast
  along M), 4 stages: the tile CUTLASS and cuBLAS favour for bf16 at this size;
* small M (M <= 128, a memory-bound weight read): a 64-row ping-pong tile so that
  N/tile_n CTAs read disjoint slices of B, with a deeper pipeline to keep more bytes
  in flight.

The agent (``argus_cutlass.agent``) replaces this with tuned choices.
"""

from __future__ import annotations

from argus_cutlass.plan.config import GemmConfig

#: streaming multiprocessors of an H100/H200 SXM
SM90_SMS = 132


def default_config(m: int, n: int, k: int, dtype: str = "bf16", out_dtype: str = "bf16",
                   layout: str = "tn") -> GemmConfig:
    """A configuration for the (M, N, K) problem; always passes the verifier.

    Args:
        m, n, k: problem size in elements (>= 1).
        dtype: ``bf16`` or ``fp16`` (A and B).
        out_dtype: ``bf16``, ``fp16`` or ``fp32`` (C and D).
        layout: ``tn``, ``nt``, ``nn`` or ``tt`` (see :mod:`argus_cutlass.plan.config`).
    """
    common = {"dtype": dtype, "out_dtype": out_dtype, "layout": layout}
    if m <= 128:
        tile_n = 128 if n >= 128 * SM90_SMS // 2 else 64
        cfg = GemmConfig(
            **common, tile_m=64, tile_n=tile_n, tile_k=64, cluster_m=1, cluster_n=1,
            stages=8, schedule="pingpong", epi_m=64, epi_n=32,
        )
    else:
        cfg = GemmConfig(**common)
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
