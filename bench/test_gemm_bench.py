"""GEMM benchmark against cuBLAS on the ANCHORS shape table (bf16, layout ``tn``).

Run on an H100/H200 with torch installed (cuBLAS is reached through ``torch.matmul``)::

    pytest bench/test_gemm_bench.py --benchmark-json=$OUT/bench.json

For every shape, in one process: the generated kernel is checked first (fresh random
inputs, D poisoned with NaN, fp32 reference), then the kernel and cuBLAS are timed
alternately, ``ROUNDS`` rounds each, with CUDA events (each round the median of ``ITERS``
launches after warm-up; the result is the median over rounds). When the
operands fit in L2 several copies are rotated so that each launch reads from HBM.
pytest-benchmark records batches of ``BATCH`` launches of our kernel; the per-launch
event medians, cuBLAS's, and their ratio go to ``extra_info`` and to the table printed
at the end (``ARGUS_BENCH_TABLE`` names a markdown file to write it to, ``--bench-out DIR`` writes
``DIR/gemm_bench.md``; the ratio and roofline plots go beside it).

Which configuration: ``ARGUS_BENCH_CONFIG=heuristic`` (default) uses
``kernels.gemm.heuristics.default_config``; ``costmodel`` the cost model's untuned choice
(:func:`argus_cutlass.agent.costmodel.costmodel_choice`, what ``argus-cutlass gemm`` runs on a shape
no table covers); ``tuned`` uses the agent's experience store. The
kernels are generated, verified, compiled and loaded by the orchestrator
(:func:`argus_cutlass.generate.build_many`, one parallel nvcc batch); the timing protocol below
is the benchmark's own (interleaved with cuBLAS, same process).
"""

from __future__ import annotations

import statistics

import pytest

from argus_cutlass.settings import settings

torch = pytest.importorskip("torch", reason="torch is not installed (the cuBLAS baseline is measured through it)")

pytestmark = pytest.mark.gpu

#: (M, N, K) from shared/ANCHORS.md
SHAPES = (
    (8192, 8192, 8192),
    (4096, 4096, 4096),
    (2048, 8192, 8192),
    (512, 8192, 8192),
    (128, 8192, 8192),
    (16, 8192, 8192),
    (1, 4096, 4096),
    (8192, 28672, 8192),
    (8192, 8192, 28672),
    (128, 28672, 8192),
    (4096, 10240, 8192),
    (64, 14336, 4096),
    (2048, 4096, 14336),
)
L2_BYTES = 60 * 1024 * 1024
HBM_BYTES_PER_S = 4.3e12
WARMUP = 10
ITERS = 50
BATCH = 10
ROUNDS = 5
RESULTS: list[dict] = []


def _config(m: int, n: int, k: int):
    mode = settings().bench_config
    if mode not in ("heuristic", "costmodel", "tuned"):
        raise pytest.UsageError(f"ARGUS_BENCH_CONFIG={mode!r} is not one of heuristic, costmodel, tuned")
    if mode == "costmodel":
        from argus_cutlass.agent.costmodel import costmodel_choice

        return costmodel_choice(m, n, k, "bf16", "bf16", "tn")
    if mode == "tuned":
        from argus_cutlass.agent.store import tuned_or_default

        return tuned_or_default("gemm", m, n, k, "bf16", "bf16", "tn")
    from argus_cutlass.kernels.gemm.heuristics import default_config

    return default_config(m, n, k, "bf16", "bf16", "tn")


@pytest.fixture(scope="session")
def libraries():
    from argus_cutlass.generate import build_many

    return build_many([_config(*s) for s in SHAPES])


def _event_median_ms(fn, sets: int, iters: int = ITERS) -> float:
    start = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(WARMUP):
        fn(i % sets)
    for i in range(iters):
        start[i].record()
        fn(i % sets)
        end[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(start, end))


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gemm_vs_cublas(shape, libraries, benchmark):
    from argus_cutlass.generate import kernel_name

    m, n, k = shape
    cfg = _config(m, n, k)
    lib = libraries[kernel_name(cfg)]
    operand_bytes = 2 * (m * k + n * k + m * n)
    sets = max(1, -(-3 * L2_BYTES // operand_bytes)) if operand_bytes < 3 * L2_BYTES else 1
    gen = torch.Generator(device="cuda").manual_seed(m * 31 + n * 7 + k)
    a = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(sets)]
    b = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(sets)]
    d = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    stream = torch.cuda.current_stream().cuda_stream

    def ours(i: int) -> None:
        lib(a[i], b[i], None, d[i], m, n, k, k, k, n, n, 1.0, 0.0, stream)

    def cublas(i: int) -> None:
        torch.matmul(a[i], b[i].t(), out=d[i])

    # correctness first: poisoned output, fp32 reference
    d[0].fill_(float("nan"))
    ours(0)
    torch.cuda.synchronize()
    ref = a[0].float() @ b[0].float().t()
    assert not torch.isnan(d[0]).any(), "kernel left outputs unwritten"
    rel = ((d[0].float() - ref).norm() / ref.norm()).item()
    assert rel < 1e-2, f"relative error {rel:.3e}"
    del ref

    # Alternate the two in ROUNDS rounds so that clock and temperature drift hit both alike, in ABBA
    # order (the one that runs first in a round alternates: a power-limited H200 clocks down within a
    # round, session 20's sweep saw cuBLAS rounds of one shape 2.41 / 2.84 / 3.29 ms); each round's
    # value is a median over ITERS launches, the result the median of rounds.
    ours_rounds, cublas_rounds = [], []
    for r in range(ROUNDS):
        for fn, out in ((ours, ours_rounds), (cublas, cublas_rounds))[:: 1 if r % 2 == 0 else -1]:
            out.append(_event_median_ms(fn, sets))
    ours_ms = statistics.median(ours_rounds)
    cublas_ms = statistics.median(cublas_rounds)
    flops = 2.0 * m * n * k
    floor_ms = (2 * n * k) / HBM_BYTES_PER_S * 1e3  # weight-read floor for small M
    row = {
        "shape": shape, "kernel": kernel_name(cfg),
        "ms": ours_ms, "ms_spread": max(ours_rounds) - min(ours_rounds),
        "cublas_ms": cublas_ms,
        "tflops": flops / ours_ms / 1e9, "cublas_tflops": flops / cublas_ms / 1e9,
        "ratio": cublas_ms / ours_ms,
        "weight_floor_ms": floor_ms,
    }
    RESULTS.append(row)
    benchmark.extra_info.update({k: (list(v) if isinstance(v, tuple) else v) for k, v in row.items()})

    def batch() -> None:
        for i in range(BATCH):
            ours(i % sets)
        torch.cuda.synchronize()

    benchmark.pedantic(batch, rounds=5, iterations=1, warmup_rounds=1)


def _results_table() -> str:
    lines = [
        "| M | N | K | kernel | ours TFLOP/s | cuBLAS TFLOP/s | ratio (cuBLAS time / ours) "
        "| ours ms | spread over rounds ms | weight-read floor ms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in RESULTS:
        m, n, k = r["shape"]
        lines.append(
            f"| {m} | {n} | {k} | `{r['kernel']}` | {r['tflops']:.0f} | {r['cublas_tflops']:.0f} | "
            f"{r['ratio']:.3f} | {r['ms']:.4f} | {r['ms_spread']:.4f} | {r['weight_floor_ms']:.4f} |"
        )
    return "\n".join(lines)


def write_table() -> None:
    """Print the results table and write it (with its plots) to ``ARGUS_BENCH_TABLE`` when set."""
    if not RESULTS:
        return
    table = _results_table()
    print("\n" + table)
    path = settings().bench_table
    if path:
        with open(path, "w") as f:
            f.write(table + "\n")
        from plots import plot_after_bench  # bench/plots.py: ratio and roofline plots beside the table

        plot_after_bench(path)


@pytest.fixture(scope="module", autouse=True)
def _print_table():
    # module scope: the table is written at this module's teardown, while ``--bench-out`` (bench/conftest.py)
    # still points ARGUS_BENCH_TABLE at this suite's file
    yield
    write_table()
