"""The any-alignment path on a Hopper GPU: problems the direct TMA path refuses, run through aligned staging.

Run on the device machine: ``pytest -q -m gpu tests/gpu/test_gemm_staged.py``. Each case is a problem that
breaks a TMA rule (M=300 with column-major A, N=33 with row-major D, K=33, odd lda / ldb / ldc / ldd, an
unaligned base pointer); its kernel is generated for it (``generate.build_jobs``: the program gets the
StageCopy nodes ``GemmProblem.staging`` names, verified by the ``stage.*`` rules), compiled and loaded,
and run on fresh random inputs against the fp32 reference GEMM. D is poisoned with NaN bytes first over
its whole ``(M + 2) x ldd`` allocation: every element of ``M x N`` must be written and match the reference,
and every other element (the padding columns ``[N, ldd)`` of each row and two guard rows past M) must
still hold the poison. Padding columns of A, B and C hold NaN, so a copy that reads them poisons D.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from argus_cutlass.errors import ProblemError
from argus_cutlass.kernels.gemm.check import compare, random_operand
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.heuristics import default_config
from argus_cutlass.kernels.gemm.problem import GemmProblem
from argus_cutlass.runtime.check import BITS_DTYPE, POISON_BYTE
from argus_cutlass.runtime.cuda import DeviceBuffer, synchronize

pytestmark = pytest.mark.gpu

#: (label, problem, beta, staged operands expected); alpha is 1 (0.5 where beta != 0)
CASES = (
    ("m300_colmajor_a", GemmProblem(300, 1024, 1000, layout="nt"), 0.0, ("A",)),
    ("m1_colmajor_a", GemmProblem(1, 520, 72, layout="nn"), 0.0, ("A",)),
    ("n33_rowmajor_d", GemmProblem(1000, 33, 1024, layout="tn"), 0.0, ("D",)),
    ("n33_rowmajor_b_and_d", GemmProblem(520, 33, 256, layout="tt"), 0.0, ("B", "D")),
    ("k33_kmajor_a_b", GemmProblem(1000, 1000, 33, layout="tn"), 0.0, ("A", "B")),
    ("k33_kmajor_a_only", GemmProblem(256, 512, 33, layout="tt"), 0.0, ("A",)),
    ("odd_lda_ldb_ldd", GemmProblem(256, 264, 128, layout="tn", lda=131, ldb=133, ldc=264, ldd=271), 0.0,
     ("A", "B", "D")),
    ("k33_padded_ld_extent_only", GemmProblem(128, 128, 33, layout="tn", lda=40, ldb=48), 0.0, ("A", "B")),
    ("beta_staged_d_odd_ldc", GemmProblem(520, 33, 256, layout="tn", ldc=35, ldd=37), 0.5, ("D",)),
    ("beta_staged_abd_fp32_out", GemmProblem(300, 33, 72, "fp16", "fp32", "nt", ldc=41, ldd=39), 1.0,
     ("A", "B", "D")),
    ("unaligned_a_pointer", GemmProblem(256, 256, 256, layout="tn", unaligned=("A",)), 0.0, ("A",)),
)
#: explicit configurations on staged problems -- swap-AB (the kernel's A is the caller's B), cluster-K: (label,
#: config, problem, beta)
CONFIG_CASES = (
    ("swapab_m7_nn", GemmConfig(layout="nn", tile_m=64, tile_n=16, cluster_m=1, cluster_n=1, stages=8,
                                schedule="pingpong", epi_m=64, epi_n=16, swap_ab=True),
     GemmProblem(7, 4096, 1000, layout="nn"), 0.5),
    # session 29: cluster-K (the k loop split over a 4-CTA cluster, partial sums in distributed shared memory) on
    # staged problems, without and with swap-AB (session 30: both pass on the H200)
    ("clusterk4_m300_colmajor_a", GemmConfig(layout="nt", tile_m=128, tile_n=16, cluster_m=1, cluster_n=1, stages=8,
                                             epi_m=128, epi_n=16, scheduler="clusterk", splits=4),
     GemmProblem(300, 8, 4096, layout="nt"), 0.5),
    ("clusterk8_swapab_n33_rowmajor_d", GemmConfig(tile_m=128, tile_n=16, cluster_m=1, cluster_n=1, stages=8, epi_m=128,
                                                   epi_n=16, scheduler="clusterk", splits=8, swap_ab=True),
     GemmProblem(16, 33, 4096, layout="tn"), 0.0),
)
#: guard rows of D past M (they must keep the poison)
GUARD_ROWS = 2


@pytest.fixture(scope="module")
def libraries():
    """label -> (library, problem, beta): every case's kernel generated for its problem, built in one batch."""
    from argus_cutlass.generate import build, build_jobs

    jobs = {}
    for label, problem, beta, _ in CASES:
        p = problem
        jobs[label] = (default_config(p.m, p.n, p.k, p.dtype, p.out_dtype, p.layout), problem, beta)
    for label, cfg, problem, beta in CONFIG_CASES:
        jobs[label] = (cfg, problem, beta)
    libs = build_jobs([(cfg, p) for cfg, p, _ in jobs.values()])
    return {label: (libs[build(cfg, p).kernel_name()], p, beta) for label, (cfg, p, beta) in jobs.items()}


def _run(lib, problem: GemmProblem, beta: float, seed: int) -> dict:
    """Run ``lib`` once; returns the comparison fields plus the poison checks of D's whole allocation."""
    from argus_cutlass.kernels.gemm.reference import reference_library

    alpha = 0.5 if beta else 1.0
    ops = problem.operands()
    rng = np.random.default_rng(seed)
    a_bits, _ = random_operand(ops["A"], rng)
    b_bits, _ = random_operand(ops["B"], rng)
    elem = {"A": a_bits.itemsize, "D": np.dtype(BITS_DTYPE[problem.out_dtype]).itemsize}
    shift = elem["A"] if "A" in problem.unaligned else 0  # an unaligned A: one element past a 256-byte base
    a_buf = DeviceBuffer(a_bits.nbytes + shift)
    a_buf.copy_from(np.frombuffer(b"\0" * shift + a_bits.tobytes(), np.uint8))
    b_buf = DeviceBuffer.from_numpy(b_bits)
    c_buf = DeviceBuffer.from_numpy(random_operand(ops["C"], rng)[0]) if beta else None
    d_op = ops["D"]
    d_rows = problem.m + GUARD_ROWS
    d_buf = DeviceBuffer(d_rows * d_op.ld * elem["D"])
    r_buf = DeviceBuffer(problem.m * problem.n * 4)
    bufs = [a_buf, b_buf, d_buf, r_buf] + ([c_buf] if c_buf is not None else [])
    try:
        d_buf.fill(POISON_BYTE)
        r_buf.fill(POISON_BYTE)
        synchronize()
        a_ptr = a_buf.ptr + shift
        lib.run(problem, a_ptr, b_buf, c_buf, d_buf, alpha, beta)
        ref_lib = reference_library(problem.dtype, problem.out_dtype, problem.layout)
        ref_lib(a_ptr, b_buf, c_buf, r_buf, problem.m, problem.n, problem.k, problem.lda, problem.ldb, problem.ldc,
                problem.n, alpha, beta)
        synchronize()
        d_bits = d_buf.to_numpy(BITS_DTYPE[problem.out_dtype], (d_rows, d_op.ld))
        ref = r_buf.to_numpy(np.float32, (problem.m, problem.n))
    finally:
        for buf in bufs:
            buf.free()
    poison = d_bits.dtype.type(int.from_bytes(bytes([POISON_BYTE]) * d_bits.itemsize, "little"))
    out = compare(problem, d_bits[: problem.m], ref)
    out["guard_rows_written"] = int(np.count_nonzero(d_bits[problem.m:] != poison))
    out["padding_written"] = int(np.count_nonzero(d_bits[: problem.m, problem.n:] != poison))
    return out


def _check(label: str, libraries) -> None:
    lib, problem, beta = libraries[label]
    for rep in range(2):  # twice: the stream-ordered workspace is allocated and freed per call
        r = _run(lib, problem, beta, zlib.crc32(f"{label}{rep}".encode()) & 0xFFFF)
        assert r["unwritten"] == 0, f"{label}: {r['unwritten']} outputs of M x N left NaN"
        assert r["padding_written"] == 0, f"{label}: {r['padding_written']} elements of D's padding [N, ldd) written"
        assert r["guard_rows_written"] == 0, f"{label}: {r['guard_rows_written']} elements past row M written"
        assert r["passed"], (f"{label}: relative error {r['rel_error']:.3e} (tolerance {r['tolerance']:.0e}), "
                             f"{r['element_errors']} element errors, max abs {r['max_abs_error']:.3e}")


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_staged_problem_matches_fp32_reference(case, libraries, gpu_device):
    label, problem, _, staged = case
    lib = libraries[label][0]
    assert tuple(s.name for s in problem.staging()) == staged
    assert lib.staged == staged, f"{label}: the kernel stages {lib.staged}, the problem needs {staged}"
    if not problem.unaligned:  # the direct path refuses it (a TMA rule); an unaligned pointer is a call-time fact
        with pytest.raises(ProblemError, match=r"tma\."):
            problem.validate()
    _check(label, libraries)


@pytest.mark.parametrize("case", CONFIG_CASES, ids=[c[0] for c in CONFIG_CASES])
def test_staged_config_matches_fp32_reference(case, libraries, gpu_device):
    label, cfg, problem, _ = case
    staged = tuple(s.name for s in problem.staging())
    assert staged and libraries[label][0].staged == staged, f"{label}: the kernel stages {libraries[label][0].staged}"
    _check(label, libraries)


def test_staged_kernel_runs_aligned_problems_too(libraries, gpu_device):
    """A staged kernel stages on every call: an aligned problem of the same configuration runs through the
    same copies and matches the reference."""
    lib, problem, _ = libraries["n33_rowmajor_d"]
    aligned = GemmProblem(problem.m, 64, problem.k, problem.dtype, problem.out_dtype, problem.layout)
    r = _run(lib, aligned, 0.0, 7)
    assert r["passed"] and r["padding_written"] == 0 and r["guard_rows_written"] == 0, r


def test_staged_entry_refuses_bad_input_with_clear_codes(libraries, gpu_device):
    """Bad input stays an error on the staged path: ld smaller than the extent (code 8), a null
    operand (code 10), zero sizes (code 1)."""
    from argus_cutlass.errors import LaunchError

    lib, p, _ = libraries["m300_colmajor_a"]
    with DeviceBuffer(4 << 20) as buf:
        for args, code in (((p.m, p.n, p.k, p.m - 1, p.ldb, p.ldc, p.ldd), 8),
                           ((0, p.n, p.k, p.lda, p.ldb, p.ldc, p.ldd), 1)):
            with pytest.raises(LaunchError, match=f"returned {code}"):
                lib(buf, buf, None, buf, *args)
        with pytest.raises(LaunchError, match="returned 10"):
            lib(buf, None, None, buf, p.m, p.n, p.k, p.lda, p.ldb, p.ldc, p.ldd)
