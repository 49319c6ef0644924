"""The fixed configuration heuristic used when no tuned configuration is known.

Rules of thumb for sm_90 (H100/H200, 132 SMs), from the sweeps recorded in
``bench/RESULTS.md`` (bf16, layout ``tn``, interleaved with cuBLAS):

* M <= 32 (decode; memory-bound weight read): swap-AB (``D^T = B A^T``) with a kernel tile
  of 64 (over N) x 16 or 32 (over M) ping-pong, 12 stages: N/64 CTAs each stream 64 rows
  of B through 12 x 8 KiB stages, and the M rows ride on a 16/32-wide GMMA N instead of
  64 padded rows. 16x8192x8192: 0.0363 ms against 0.0451 for 64x128 without swap.
* N <= 32 with M > 32 (a narrow output, e.g. a router or a small head): the same kernel tile
  without the swap, 64 (over M) x 16 or 32 (over N), ping-pong, 12 stages: the narrow dimension
  rides the GMMA N, M/64 CTAs each stream 64 rows of A. The mirror of the measured M <= 32 rule,
  not measured itself (the default 128x256 tile would leave most of each tile empty and give only
  M/128 CTAs).
* 32 < M <= 64: a 64x128x64 ping-pong tile, no cluster, 8 stages; N/128 CTAs stream
  disjoint slices of B with many bytes in flight.
* 64 < M <= 128: 64x128x64 ping-pong with a 2x1 cluster (B multicast to the two M tiles),
  8 stages (128x8192x8192: 0.0392 ms, 128x128 cooperative 0.0464); 128x256x64 cooperative
  without cluster when N alone gives enough tiles to fill the GPU (N >= 100 * 256).
* larger M: a 128x256x64 cooperative tile with a 2x1 cluster (B multicast along M), 4
  stages, the persistent scheduler walking along N; with a scheduler swizzle of 4 once
  both tile counts are >= 8 (it lost half the speed at 4 tile rows).
* larger M whose 128x256 tiles fill the last wave of the 132 SMs to less than
  :data:`STREAMK_MIN_FILL` (e.g. 256x4096x14336: 32 tiles, a quarter of the SMs busy), with at
  least :data:`STREAMK_MIN_K_ITERS` k-blocks to share: 128x128x64 cooperative with the stream-K
  scheduler, no cluster (the sub-space's point), which spreads the k-blocks of all tiles evenly over
  the SMs. Measured where the tiles under-fill the GPU (issue 4's table, H200: 128x8192x8192 and
  128x28672x8192 under the 128x256 2x1 tile: 2.10x / 1.49x the best time, stream-K 128x128 1.24x /
  1.10x; issue 13: tuning 256x4096x14336 to stream-K took it from 0.36x to 0.79x cuBLAS); at a full
  wave the persistent tile stays (512x8192x8192, 128 tiles: 1.01x against stream-K's 1.39x).

The agent (``argus_cutlass.agent``) replaces this with tuned choices.
"""

from __future__ import annotations

from argus_cutlass.kernels.gemm.config import GemmConfig

#: streaming multiprocessors of an H100/H200 SXM
SM90_SMS = 132
#: below this fill of the last wave (tiles / (132 x waves)) the large-M rule takes stream-K
STREAMK_MIN_FILL = 0.75
#: stream-K needs this many k-blocks (of 64) per tile to have work to spread
STREAMK_MIN_K_ITERS = 8


def wave_fill(tiles: int, sms: int = SM90_SMS) -> float:
    """The busy fraction of the SM-waves that ``tiles`` output tiles take (1.0: whole waves).

    >>> wave_fill(32), wave_fill(128), wave_fill(140)
    (0.24242424242424243, 0.9696969696969697, 0.5303030303030303)
    """
    waves = -(-tiles // sms)
    return tiles / (sms * waves)


def default_config(m: int, n: int, k: int, dtype: str = "bf16", out_dtype: str = "bf16",
                   layout: str = "tn") -> GemmConfig:
    """A configuration for the (M, N, K) problem, with its stages fitted to shared memory.

    Args:
        m, n, k: problem size in elements (>= 1).
        dtype: ``bf16`` or ``fp16`` (A and B).
        out_dtype: ``bf16``, ``fp16`` or ``fp32`` (C and D).
        layout: ``tn``, ``nt``, ``nn`` or ``tt`` (see :mod:`argus_cutlass.kernels.gemm.config`).

    >>> default_config(8192, 8192, 8192).tile
    (128, 256, 64)
    >>> c = default_config(16, 8192, 8192)
    >>> c.swap_ab, c.tile, c.schedule
    (True, (64, 16, 64), 'pingpong')
    >>> c = default_config(8192, 24, 4096)   # the mirror: the narrow N on the GMMA N, no swap
    >>> c.swap_ab, c.tile
    (False, (64, 32, 64))
    """
    common = {"dtype": dtype, "out_dtype": out_dtype, "layout": layout}
    if m <= 32:
        tile_n = 16 if m <= 16 else 32
        cfg = GemmConfig(**common, tile_m=64, tile_n=tile_n, cluster_m=1, cluster_n=1, stages=12,
                         schedule="pingpong", epi_m=64, epi_n=tile_n, swap_ab=True)
    elif n <= 32:
        tile_n = 16 if n <= 16 else 32
        cfg = GemmConfig(**common, tile_m=64, tile_n=tile_n, cluster_m=1, cluster_n=1, stages=12,
                         schedule="pingpong", epi_m=64, epi_n=tile_n)
    elif m <= 64:
        cfg = GemmConfig(**common, tile_m=64, tile_n=128, cluster_m=1, cluster_n=1, stages=8,
                         schedule="pingpong", epi_m=64, epi_n=32)
    elif m <= 128 and n < 100 * 256:
        cfg = GemmConfig(**common, tile_m=64, tile_n=128, cluster_m=2, cluster_n=1, stages=8,
                         schedule="pingpong", epi_m=64, epi_n=32)
    elif m <= 128:
        cfg = GemmConfig(**common, tile_m=128, tile_n=256, cluster_m=1, cluster_n=1,
                         stages=6, schedule="cooperative")
    elif wave_fill(-(-m // 128) * -(-n // 256)) < STREAMK_MIN_FILL and -(-k // 64) >= STREAMK_MIN_K_ITERS:
        cfg = GemmConfig(**common, tile_m=128, tile_n=128, tile_k=64, cluster_m=1, cluster_n=1, stages=8,
                         schedule="cooperative", epi_m=128, epi_n=32, raster="along_n", swizzle=1,
                         scheduler="streamk", splits=1)
    else:
        swizzle = 4 if (m // 128 >= 8 and n // 256 >= 8) else 1
        cfg = GemmConfig(**common, swizzle=swizzle, raster="along_n")
    return fit_stages(cfg)


def fit_stages(cfg: GemmConfig) -> GemmConfig:
    """``cfg`` with its stage count lowered until its program's shared memory fits sm_90's
    232448 bytes (:func:`argus_cutlass.plan.resources.smem_total_bytes`: the template's
    ``kSmemBytes``, read from the program's smem tensors and mbarriers).

    Stops at 2 stages (the verifier reports a config that does not fit even then).

    >>> fit_stages(GemmConfig(stages=9)).stages  # 4 x 48 KiB + 16 KiB staging + barriers + 1 KiB
    4
    """
    from argus_cutlass.kernels.gemm.program import sizing_program
    from argus_cutlass.plan.resources import SMEM_LIMIT_BYTES, smem_total_bytes

    while cfg.stages > 2 and smem_total_bytes(sizing_program(cfg)) > SMEM_LIMIT_BYTES:
        cfg = cfg.replace(stages=cfg.stages - 1)
    return cfg
