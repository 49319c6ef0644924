"""Cluster-K GEMMs on a Hopper GPU (schedule node ``clusterk``, session 29): a cluster of ``splits`` CTAs
shares one output tile, each sums a contiguous part of its k loop, and the partial sums are added through
distributed shared memory (``ld.shared::cluster`` after ``barrier.cluster``) before rank 0 stores D.

Each case: fresh random inputs, D poisoned with NaN, compared with the fp32 reference kernel
(``argus_cutlass.kernels.gemm.check.run_and_check``), launched twice (nothing of one launch may leak into
the next). Cases cover swap-AB and not, every layout, fp16 / fp32 / bf16 outputs, beta, residues in M, N
and K, k-tiles fewer than the cluster's ranks (ranks that sum nothing contribute zeros), 2 accumulator sets
and 128-deep k-tiles. Run on the device: ``pytest -q -m gpu tests/gpu/test_gemm_clusterk.py``.
"""

from __future__ import annotations

import zlib

import pytest

from argus_cutlass.generate import kernel_name
from argus_cutlass.kernels.gemm.check import run_and_check
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.problem import GemmProblem

pytestmark = pytest.mark.gpu

_SWAP16 = GemmConfig(tile_m=128, tile_n=16, cluster_m=1, cluster_n=1, stages=8, epi_m=128, epi_n=16, swap_ab=True,
                     scheduler="clusterk", splits=4)
_PLAIN16 = _SWAP16.replace(swap_ab=False)

#: (config, m, n, k, beta)
CASES = (
    (_SWAP16, 16, 4096, 14336, 0.0),
    (_SWAP16.replace(splits=8), 7, 1000, 5000, 0.5),
    (_SWAP16.replace(splits=8), 1, 1000, 72, 0.5),               # 2 k-tiles over 8 ranks: 6 sum nothing
    (_SWAP16.replace(splits=2, layout="nt", dtype="fp16", out_dtype="fp32"), 24, 1000, 4104, 0.5),
    (_SWAP16.replace(tile_n=32, epi_n=32, layout="tt", acc_sets=2), 33, 5000, 2000, 0.0),
    (_SWAP16.replace(splits=8, layout="nn", out_dtype="fp16", tile_k=128, stages=5), 8, 8, 4096, 0.0),
    (_PLAIN16, 512, 8, 4096, 0.0),
    (_PLAIN16.replace(layout="nt", tile_n=32, epi_n=32, splits=8), 1000, 40, 3000, 0.5),
    (GemmConfig(tile_m=128, tile_n=128, cluster_m=1, stages=4, scheduler="clusterk", splits=2), 300, 1000, 136, 0.5),
)


def _id(case) -> str:
    cfg, m, n, k, beta = case
    return (f"{'swapab-' if cfg.swap_ab else ''}{cfg.layout}-{cfg.dtype}-{cfg.out_dtype}-{cfg.tile_m}x{cfg.tile_n}x"
            f"{cfg.tile_k}-clusterk{cfg.splits}{f'-as{cfg.acc_sets}' if cfg.acc_sets > 1 else ''}-{m}x{n}x{k}-b{beta}")


@pytest.fixture(scope="module")
def kernels():
    """Every kernel of CASES: generated, verified and compiled in one parallel batch, by kernel name."""
    from argus_cutlass.generate import build_many

    return build_many([cfg for cfg, *_ in CASES])


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_cluster_k_matches_fp32_reference(case, kernels, gpu_device):
    cfg, m, n, k, beta = case
    problem = GemmProblem(m, n, k, dtype=cfg.dtype, out_dtype=cfg.out_dtype, layout=cfg.layout).validate()
    lib = kernels[kernel_name(cfg)]
    seed = zlib.crc32(_id(case).encode()) & 0xFFFF
    for s in (seed, seed + 1):   # twice: no state of one launch may leak into the next
        result = run_and_check(lib, problem, alpha=1.0, beta=beta, seed=s)
        assert result.unwritten == 0 and result.passed, result.summary()
