"""GEMM correctness on a Hopper GPU: every layout, both input dtypes, shapes no tile divides.

Run on the device machine: ``pytest -q -m gpu tests/gpu``. The kernels are generated, verified,
compiled (one parallel batch) and loaded by the orchestrator (``argus_cutlass.generate``); each
case draws fresh random inputs, poisons D with NaN, runs the kernel and compares with the fp32
reference kernel (``argus_cutlass.kernels.gemm.check.run_and_check``).

Shapes: M in {1, 7, 128, 1000, 4096}, N in {8, 72, 4096, 5000}, K in {16, 72, 4096, 5000},
a sample of combinations. Shapes whose M-major A breaks TMA's 16-byte rule (M = 1 or 7
with layouts ``nt``/``nn``) are pinned to be refused with ``tma.contiguous_extent``.
"""

from __future__ import annotations

import zlib

import pytest

from argus_cutlass.errors import ConfigError, ProblemError
from argus_cutlass.generate import kernel_name
from argus_cutlass.kernels.gemm.check import run_and_check
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.heuristics import default_config
from argus_cutlass.kernels.gemm.problem import GemmProblem

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
#: split-K tile schedulers (global-workspace reduction) and the ping-pong tile at large M. A
#: configuration the GEMM template cannot print yet (``ConfigError`` ``render.program``) is skipped
#: with that reason, never dropped.
SCHEDULER_CASES = (
    (GemmConfig(tile_n=128, cluster_m=1, stages=6, scheduler="streamk"), 128, 4096, 8192),
    (GemmConfig(layout="nt", tile_n=128, cluster_m=1, stages=6, scheduler="splitk", splits=3), 256, 1000, 5000),
    (GemmConfig(dtype="fp16", out_dtype="fp16", layout="tt", tile_m=64, tile_n=128, cluster_m=1,
                stages=8, schedule="pingpong", epi_m=64), 1000, 5000, 72),
    # session 30: tile widths between the powers of two (wgmma N 80 / 112 / 160 / 168, CuTe's extended shapes),
    # residues in every mode (N not a multiple of the width), split-K, 2-CTA clusters, an 8-wide epilogue subtile
    (GemmConfig(tile_n=112, cluster_m=1, stages=7, epi_n=16), 1000, 5000, 4104),
    (GemmConfig(layout="nt", out_dtype="fp32", tile_n=80, cluster_m=1, stages=6, epi_n=16), 296, 1000, 520),
    (GemmConfig(tile_n=168, cluster_m=2, stages=5, epi_n=8), 520, 5000, 2000),
    (GemmConfig(dtype="fp16", out_dtype="fp16", layout="tt", tile_n=160, cluster_m=1, stages=5, scheduler="splitk",
                splits=2), 256, 5000, 5000),
    (GemmConfig(tile_m=256, tile_n=160, cluster_m=1, cluster_n=2, stages=4), 520, 10240, 1000),
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
    # decode: swap-AB with K split over the SMs (the declared sub-space's issue 13 item 2 points;
    # not on silicon before session 19's successor): stream-K and split-K, residues in M, N and K
    (_SWAP_SK16 := GemmConfig(tile_m=128, tile_n=16, cluster_m=1, cluster_n=1, stages=8, epi_m=128, epi_n=16,
                              swap_ab=True, scheduler="streamk"), 16, 4096, 14336, 0.0),
    (_SWAP_SK16, 7, 1000, 5000, 0.5),
    (_SWAP_SK16.replace(scheduler="splitk", splits=4), 16, 4096, 14336, 0.0),
    (_SWAP_SK16.replace(scheduler="splitk", splits=2, layout="nt", dtype="fp16", out_dtype="fp32"), 24, 1000, 4104, 0.5),
    (_SWAP_SK16.replace(tile_n=32, epi_n=32, scheduler="streamk", layout="tt"), 33, 5000, 2000, 0.0),
    # session 25: several accumulator sets (KLoop.acc_sets; k-block b into set b % S, summed after the loop) and
    # 128-deep k-tiles on the decode tiles; K residues (1064 = 16 k-tiles of 64 + 40), a persistent walk over
    # more tiles than CTAs (N = 14336: 224 tiles of 64), split-K
    (_SWAP_PP16.replace(stages=12, acc_sets=4), 1, 14336, 1064, 0.0),
    (_SWAP_PP16.replace(acc_sets=2, layout="nt", dtype="fp16", out_dtype="fp32"), 16, 1000, 5000, 0.5),
    (_SWAP_SK16.replace(scheduler="splitk", splits=4, acc_sets=4), 16, 4096, 14336, 0.0),
    (_SWAP_SK16.replace(acc_sets=4), 7, 1000, 5000, 0.5),   # stream-K: units start mid-tile
    (_SWAP_PP16.replace(tile_k=128, stages=11), 7, 4096, 4104, 0.0),
    (_SWAP_PP16.replace(tile_k=128, stages=8, acc_sets=4), 16, 14336, 1064, 0.5),
    # session 26: the nondeterministic reduction (middle partials added atomically after the first one's store)
    (_SWAP_SK16.replace(scheduler="splitk", splits=4, reduction="nondeterministic"), 16, 4096, 14336, 0.0),
    (_SWAP_SK16.replace(reduction="nondeterministic"), 7, 1000, 5000, 0.5),   # stream-K: units start mid-tile
    (_SWAP_SK16.replace(scheduler="splitk", splits=2, tile_k=128, stages=6, acc_sets=2,
                        reduction="nondeterministic"), 16, 4096, 14336, 0.0),
    # session 30: swap-AB tiles of 56 and 104 rows of M (wgmma N 56 / 104, an 8-wide epilogue subtile)
    (_SWAP_PP16.replace(tile_n=56, epi_n=8, stages=12), 100, 4096, 4096, 0.0),
    (_SWAP_PP16.replace(tile_n=104, epi_n=8, stages=9, layout="tt", dtype="fp16", out_dtype="fp32"), 100, 1000, 520,
     0.5),
    # session 45: the launch node pdl (programmatic launch; griddepcontrol.wait before any global access) on the
    # decode paths: persistent, stream-K and split-K (CUTLASS's workspace), cluster-K
    (_SWAP_PP16.replace(pdl=True), 7, 4096, 4104, 0.5),
    (_SWAP_SK16.replace(pdl=True), 16, 4096, 14336, 0.0),
    (_SWAP_SK16.replace(scheduler="splitk", splits=4, pdl=True), 7, 1000, 5000, 0.5),
    (_SWAP_SK16.replace(scheduler="clusterk", splits=4, pdl=True), 16, 4096, 14336, 0.0),
)


def _swap_id(c) -> str:
    cfg = c[0]
    extra = ((f"-k{cfg.tile_k}" if cfg.tile_k != 64 else "") + (f"-as{cfg.acc_sets}" if cfg.acc_sets != 1 else "")
             + (f"-{cfg.scheduler}{cfg.splits if cfg.scheduler == 'splitk' else ''}" if cfg.scheduler != "persistent" else "")
             + ("-nd" if cfg.reduction != "deterministic" else "") + ("-pdl" if cfg.pdl else ""))
    return (f"swapab-{cfg.layout}-{cfg.dtype}-{cfg.out_dtype}-{cfg.tile_m}x{cfg.tile_n}{extra}-{c[1]}x{c[2]}x{c[3]}"
            f"-b{c[4]}")


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
    (through the cache), by kernel name; a configuration the template cannot print yet maps to
    its ConfigError."""
    from argus_cutlass.generate import build_many

    configs = [default_config(m, n, k, dtype, out_dtype, layout)
               for dtype, out_dtype, layout, m, n, k, _, _ in CASES if not _refused(layout, m)]
    printable, unprintable = [], {}
    for cfg in configs + [cfg for cfg, *_ in SCHEDULER_CASES + SWAP_CASES]:
        try:
            render_check(cfg)
            printable.append(cfg)
        except ConfigError as exc:
            if exc.rule != "render.program":
                raise
            unprintable[kernel_name(cfg)] = exc
    return {**build_many(printable), **unprintable}


def render_check(cfg: GemmConfig) -> None:
    """Raise the renderer's ConfigError for a program the template cannot print (no verifier)."""
    from argus_cutlass.kernels.gemm.program import build_program
    from argus_cutlass.render.gemm import render_gemm

    render_gemm(build_program(cfg))


def _library(kernels, cfg: GemmConfig):
    lib = kernels[kernel_name(cfg)]
    if isinstance(lib, ConfigError):
        pytest.skip(f"not printed by the GEMM template yet: {lib}")
    return lib


def _id(case) -> str:
    dtype, out_dtype, layout, m, n, k, alpha, beta = case
    return f"{dtype}-{out_dtype}-{layout}-{m}x{n}x{k}-a{alpha}-b{beta}"


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_gemm_matches_fp32_reference(case, kernels, gpu_device):
    dtype, out_dtype, layout, m, n, k, alpha, beta = case
    problem = GemmProblem(m, n, k, dtype=dtype, out_dtype=out_dtype, layout=layout)
    if _refused(layout, m):
        with pytest.raises(ProblemError, match=r"tma\.contiguous_extent") as info:
            problem.validate()
        assert f"M={m}" in str(info.value)
        return
    problem.validate()
    lib = _library(kernels, default_config(m, n, k, dtype, out_dtype, layout))
    result = run_and_check(lib, problem, alpha=alpha, beta=beta, seed=zlib.crc32(_id(case).encode()) & 0xFFFF)
    assert result.unwritten == 0, f"{result.unwritten} outputs left NaN"
    assert result.passed, f"relative error {result.rel_error:.3e} > {result.tolerance:.1e}"


@pytest.mark.parametrize("case", SCHEDULER_CASES,
                         ids=lambda c: f"{c[0].scheduler}-{c[0].schedule}-{c[0].tile_m}x{c[0].tile_n}-{c[1]}x{c[2]}x{c[3]}")
def test_tile_schedulers_match_fp32_reference(case, kernels, gpu_device):
    cfg, m, n, k = case
    problem = GemmProblem(m, n, k, dtype=cfg.dtype, out_dtype=cfg.out_dtype, layout=cfg.layout)
    lib = _library(kernels, cfg)
    for seed, beta in ((1, 0.0), (2, 0.5)):  # twice: the workspace must be reset between launches
        result = run_and_check(lib, problem, alpha=1.0, beta=beta, seed=seed)
        assert result.unwritten == 0 and result.passed, result.summary()


@pytest.mark.parametrize("case", SWAP_CASES, ids=_swap_id)
def test_swap_ab_matches_fp32_reference(case, kernels, gpu_device):
    """Swap-AB kernels compute the problem's D (row-major M x N), not its transpose."""
    cfg, m, n, k, beta = case
    problem = GemmProblem(m, n, k, dtype=cfg.dtype, out_dtype=cfg.out_dtype, layout=cfg.layout).validate()
    lib = _library(kernels, cfg)
    result = run_and_check(lib, problem, alpha=1.0, beta=beta, seed=zlib.crc32(kernel_name(cfg).encode()) & 0xFFFF)
    assert result.unwritten == 0 and result.passed, result.summary()


@pytest.mark.parametrize("pdl", [False, True], ids=["plain", "pdl"])
def test_back_to_back_launches_read_the_previous_output(pdl, kernels, gpu_device):
    """Launch node pdl (session 45): a chain X_{i+1} = X_i W of 8 GEMMs launched back to back on one stream
    without a synchronization, each reading the output the launch before it writes. A programmatic launch may
    start early but must wait (griddepcontrol.wait) before its loads: every step, checked against its fp32
    product of the X_i the chain actually produced, matches; an early read would see the poisoned (NaN) or the
    stale buffer. Run plain too (the same check without pdl)."""
    import torch

    cfg = _SWAP_PP16.replace(pdl=pdl)
    lib = _library(kernels, cfg)
    m, n = 16, 4096   # K = N: the output of one step is the A of the next
    problem = GemmProblem(m, n, n, dtype="bf16", out_dtype="bf16", layout="tn").validate()
    g = torch.Generator(device="cuda").manual_seed(45)
    w = (torch.randn(n, n, generator=g, device="cuda") / n ** 0.5).to(torch.bfloat16)   # B: N x K, K-major
    xs = [torch.randn(m, n, generator=g, device="cuda").to(torch.bfloat16)]
    xs += [torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16) for _ in range(8)]
    stream = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(stream):
        for i in range(8):
            lib.run(problem, xs[i], w, None, xs[i + 1], 1.0, 0.0, stream)
    stream.synchronize()
    for i in range(8):
        ref = xs[i].float() @ w.float().t()
        got = xs[i + 1].float()
        assert not torch.isnan(got).any(), f"step {i}: NaN left (read before the previous launch wrote)"
        err = ((got - ref).abs().max() / ref.abs().max()).item()
        assert err < 2e-2, f"step {i}: relative error {err:.3e}"


def test_smem_model_is_the_real_kernels(kernels):
    """The resource model's shared memory (read from the program) is exactly what each built
    kernel asks for (``<name>_smem_bytes()``, the template's kSmemBytes), and fits sm_90."""
    from argus_cutlass.kernels.gemm.program import build_program
    from argus_cutlass.plan.resources import SMEM_LIMIT_BYTES, smem_total_bytes

    seen = 0
    cfgs = [default_config(m, n, k, dtype, out_dtype, layout)
            for dtype, out_dtype, layout, m, n, k, _, _ in CASES if not _refused(layout, m)]
    for cfg in cfgs + [c for c, *_ in SCHEDULER_CASES + SWAP_CASES]:
        lib = kernels[kernel_name(cfg)]
        if isinstance(lib, ConfigError):
            continue
        model = smem_total_bytes(build_program(cfg))
        assert lib.smem_bytes() == model <= SMEM_LIMIT_BYTES, (kernel_name(cfg), lib.smem_bytes(), model)
        seen += 1
    assert seen > 0


def test_kernel_refuses_k_beyond_its_proofs(kernels, gpu_device):
    """A kernel built for K < 2^24 refuses K = 2^24 (return code 3, rule problem.k_range), both in
    the Python check before the call and in the entry itself; the message says how to fix it."""
    from argus_cutlass.errors import LaunchError

    cfg = default_config(4096, 4096, 4096)
    lib = _library(kernels, cfg)
    big = GemmProblem(128, 128, 2**24)
    with pytest.raises(ProblemError, match=r"problem\.k_range"):
        lib.run(big, 0x1000, 0x2000, None, 0x3000)
    with pytest.raises(LaunchError) as info:  # the entry refuses before touching the pointers
        lib(0x1000, 0x2000, None, 0x3000, 128, 128, 2**24, 2**24, 2**24, 128, 128, 1.0, 0.0)
    assert info.value.rule == "problem.k_range" and "returned 3" in str(info.value)
    assert "generate it for this problem" in str(info.value)
