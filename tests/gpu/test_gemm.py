"""GEMM correctness on a Hopper GPU: every layout, both input dtypes, shapes no tile divides.

Run on the device machine: ``pytest -q -m gpu tests/gpu``. Each case draws fresh random
inputs, poisons D with NaN, runs the generated kernel and compares with the fp32
reference kernel (``argus_cutlass.runtime.check.run_and_check``).

Shapes: M in {1, 7, 128, 1000, 4096}, N in {8, 72, 4096, 5000}, K in {16, 72, 4096, 5000},
a sample of combinations. Shapes whose M-major A breaks TMA's 16-byte rule (M = 1 or 7
with layouts ``nt``/``nn``) are pinned to be refused with ``tma.contiguous_extent``.
"""

from __future__ import annotations

import zlib

import pytest

from argus_cutlass.errors import ProblemError
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.heuristics import default_config

pytestmark = pytest.mark.gpu

LAYOUTS = ("tn", "nt", "nn", "tt")
DTYPES = ("bf16", "fp16")
SHAPES = (
    (1, 4096, 4096),
    (7, 72, 16),
    (128, 8, 5000),
    (128, 5000, 72),
    (1000, 72, 4096),
    (1000, 5000, 72),
    (4096, 8, 16),
    (4096, 4096, 4096),
    (4096, 5000, 5000),
)
#: (dtype, out_dtype, layout, m, n, k, alpha, beta): output dtypes and the C path
EXTRA = (
    ("bf16", "fp32", "tn", 1000, 5000, 4096, 1.0, 0.0),
    ("fp16", "fp32", "nt", 128, 4096, 72, 0.5, 0.0),
    ("bf16", "fp16", "tt", 4096, 72, 5000, 1.0, 0.0),
    ("bf16", "bf16", "tn", 1000, 5000, 4096, 0.5, 2.0),
    ("fp16", "fp16", "nn", 7 * 8, 4096, 16, -1.0, 1.0),
)


#: explicit configurations for code paths the heuristic does not pick: the stream-K and
#: split-K tile schedulers (global-workspace reduction) and the ping-pong tile at large M
SCHEDULER_CASES = (
    (GemmConfig(tile_n=128, cluster_m=1, stages=6, scheduler="streamk"), 128, 4096, 8192),
    (GemmConfig(layout="nt", tile_n=128, cluster_m=1, stages=6, scheduler="splitk", splits=3), 256, 1000, 5000),
    (GemmConfig(dtype="fp16", out_dtype="fp16", layout="tt", tile_m=64, tile_n=128, cluster_m=1,
                stages=8, schedule="pingpong", epi_m=64), 1000, 5000, 72),
)

_SWAP_PP16 = GemmConfig(tile_m=64, tile_n=16, cluster_m=1, cluster_n=1, stages=8, schedule="pingpong",
                        epi_m=64, epi_n=16, swap_ab=True)
#: swap-AB kernels (D^T = B A^T through a column-major view of D): every layout, fp32 and
#: fp16 outputs, beta, residues in all three modes, and a 2x1 cluster (multicast of A)
SWAP_CASES = (
    (_SWAP_PP16, 1, 4096, 4096, 0.0),
    (_SWAP_PP16, 7, 1000, 72, 0.5),
    (_SWAP_PP16, 16, 5000, 5000, 0.0),
    (_SWAP_PP16.replace(layout="nt", dtype="fp16", out_dtype="fp32"), 16, 4096, 1000, 0.5),
    (_SWAP_PP16.replace(layout="nt", dtype="fp16", out_dtype="fp32"), 64, 1000, 520, 0.0),
    (GemmConfig(layout="tt", tile_m=128, tile_n=32, cluster_m=2, cluster_n=1, stages=6, epi_m=128, epi_n=32,
                swap_ab=True), 16, 4096, 4096, 0.0),
    (GemmConfig(layout="tt", tile_m=128, tile_n=32, cluster_m=2, cluster_n=1, stages=6, epi_m=128, epi_n=32,
                swap_ab=True), 33, 1000, 5000, 0.5),
    (GemmConfig(layout="nn", out_dtype="fp16", tile_m=64, tile_n=64, cluster_m=1, cluster_n=1, stages=8,
                schedule="pingpong", epi_m=64, epi_n=32, swap_ab=True), 64, 4096, 1000, 0.5),
    (GemmConfig(layout="nn", out_dtype="fp16", tile_m=64, tile_n=64, cluster_m=1, cluster_n=1, stages=8,
                schedule="pingpong", epi_m=64, epi_n=32, swap_ab=True), 24, 1000, 4096, 0.0),
)


def _refused(layout: str, m: int) -> bool:
    return layout[0] == "n" and m % 8 != 0


def _cases():
    for dtype in DTYPES:
        for layout in LAYOUTS:
            for m, n, k in SHAPES:
                yield (dtype, dtype, layout, m, n, k, 1.0, 0.0)
    yield from EXTRA


CASES = list(_cases())


@pytest.fixture(scope="session")
def kernels():
    """Every kernel of CASES, SCHEDULER_CASES and SWAP_CASES, compiled in one parallel batch
    (through the cache), by kernel name."""
    from argus_cutlass.api import build_many

    configs = [default_config(m, n, k, dtype, out_dtype, layout)
               for dtype, out_dtype, layout, m, n, k, _, _ in CASES if not _refused(layout, m)]
    configs += [cfg for cfg, *_ in SCHEDULER_CASES + SWAP_CASES]
    return build_many(configs)


def _id(case) -> str:
    dtype, out_dtype, layout, m, n, k, alpha, beta = case
    return f"{dtype}-{out_dtype}-{layout}-{m}x{n}x{k}-a{alpha}-b{beta}"


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_gemm_matches_fp32_reference(case, kernels, gpu_device):
    from argus_cutlass.render.naming import kernel_name
    from argus_cutlass.runtime.check import run_and_check
    from argus_cutlass.kernels.gemm.problem import GemmProblem

    dtype, out_dtype, layout, m, n, k, alpha, beta = case
    problem = GemmProblem(m, n, k, dtype=dtype, out_dtype=out_dtype, layout=layout)
    if _refused(layout, m):
        with pytest.raises(ProblemError, match=r"tma\.contiguous_extent") as info:
            problem.validate()
        assert f"M={m}" in str(info.value)
        return
    problem.validate()
    lib = kernels[kernel_name(default_config(m, n, k, dtype, out_dtype, layout))]
    result = run_and_check(lib, problem, alpha=alpha, beta=beta, seed=zlib.crc32(_id(case).encode()) & 0xFFFF)
    assert result.unwritten == 0, f"{result.unwritten} outputs left NaN"
    assert result.passed, f"relative error {result.rel_error:.3e} > {result.tolerance:.1e}"


@pytest.mark.parametrize("case", SCHEDULER_CASES, ids=lambda c: f"{c[0].scheduler}-{c[0].schedule}-{c[1]}x{c[2]}x{c[3]}")
def test_tile_schedulers_match_fp32_reference(case, kernels, gpu_device):
    from argus_cutlass.render.naming import kernel_name
    from argus_cutlass.runtime.check import run_and_check
    from argus_cutlass.kernels.gemm.problem import GemmProblem

    cfg, m, n, k = case
    problem = GemmProblem(m, n, k, dtype=cfg.dtype, out_dtype=cfg.out_dtype, layout=cfg.layout)
    for seed, beta in ((1, 0.0), (2, 0.5)):  # twice: the workspace must be reset between launches
        result = run_and_check(kernels[kernel_name(cfg)], problem, alpha=1.0, beta=beta, seed=seed)
        assert result.unwritten == 0 and result.passed, result.summary()


@pytest.mark.parametrize(
    "case", SWAP_CASES,
    ids=lambda c: f"swapab-{c[0].layout}-{c[0].dtype}-{c[0].out_dtype}-{c[0].tile_m}x{c[0].tile_n}-{c[1]}x{c[2]}x{c[3]}-b{c[4]}")
def test_swap_ab_matches_fp32_reference(case, kernels, gpu_device):
    """Swap-AB kernels compute the problem's D (row-major M x N), not its transpose."""
    from argus_cutlass.render.naming import kernel_name
    from argus_cutlass.runtime.check import run_and_check
    from argus_cutlass.kernels.gemm.problem import GemmProblem

    cfg, m, n, k, beta = case
    problem = GemmProblem(m, n, k, dtype=cfg.dtype, out_dtype=cfg.out_dtype, layout=cfg.layout).validate()
    lib = kernels[kernel_name(cfg)]
    result = run_and_check(lib, problem, alpha=1.0, beta=beta, seed=zlib.crc32(kernel_name(cfg).encode()) & 0xFFFF)
    assert result.unwritten == 0 and result.passed, result.summary()


def test_smem_model_bounds_the_real_kernel(kernels):
    """The verifier's shared-memory model is an upper bound within 1 KiB of sizeof(SharedStorage)."""
    from argus_cutlass.plan.resources import smem_bytes
    from argus_cutlass.programs.gemm import build_gemm_program
    from argus_cutlass.render.naming import kernel_name

    seen = 0
    for dtype, out_dtype, layout, m, n, k, _, _ in CASES:
        if _refused(layout, m):
            continue
        cfg = default_config(m, n, k, dtype, out_dtype, layout)
        real = kernels[kernel_name(cfg)].smem_bytes()
        model = smem_bytes(build_gemm_program(cfg)).total
        assert real <= model <= real + 1024, (kernel_name(cfg), real, model)
        seen += 1
    assert seen > 0


def test_smem_model_bounds_the_swap_ab_kernels(kernels):
    """Same bound for the column-major (swap-AB) epilogues, whose MN-major C/D atoms
    change the epilogue's alignment padding."""
    from argus_cutlass.plan.resources import smem_bytes
    from argus_cutlass.programs.gemm import build_gemm_program
    from argus_cutlass.render.naming import kernel_name

    for cfg, *_ in SWAP_CASES:
        real = kernels[kernel_name(cfg)].smem_bytes()
        model = smem_bytes(build_gemm_program(cfg)).total
        assert real <= model <= real + 1024, (kernel_name(cfg), real, model)
