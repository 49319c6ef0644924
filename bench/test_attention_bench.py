"""Attention forward benchmark against cuDNN (torch SDPA's cuDNN backend) on the ANCHORS grid.

Run on an H100/H200 with torch installed::

    pytest bench/test_attention_bench.py --benchmark-json=$OUT/attention.json

Grid (``../shared/ANCHORS.md``): bf16, 16k tokens per batch (``B = 16384 / S``), ``H = 2048 / D``
heads (no GQA), D in {64, 128, 256}, S in {512, 2048, 8192, 16384}, causal and not. For every cell,
in one process: our kernel is checked first (fresh random inputs, O and LSE poisoned with NaN, fp32
reference on a bounded copy of the cell: its first batch), then ours and cuDNN are timed
alternately, ``ROUNDS`` rounds each (each round the median of ``ITERS`` CUDA-event timed launches
after warm-up; the result is the median over rounds). Q, K, V and O of a cell are 4 x 64 MiB, beyond
the 60 MB L2, so no buffer rotation is needed. TFLOP/s use the field's count (``4 B H S^2 D``,
halved when causal). ``ARGUS_BENCH_CONFIG=heuristic`` uses FA3's tile per head dim instead of the
configured (tuned) one; ``ARGUS_BENCH_TABLE`` names a markdown file for the table (``--bench-out DIR``:
``DIR/attention_bench.md``), written at the module's teardown with its ratio and roofline plots beside it.
"""

from __future__ import annotations

import math
import os
import statistics

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (cuDNN attention is measured through torch SDPA)")

pytestmark = pytest.mark.gpu

TOKENS = 16384
HIDDEN = 2048
GRID = [(d, s, c) for d in (64, 128, 256) for s in (512, 2048, 8192, 16384) for c in (False, True)]
WARMUP = 5
ITERS = 20
ROUNDS = 3
RESULTS: list[dict] = []


def _problem(d: int, s: int, causal: bool):
    from argus_cutlass.kernels.attention.problem import AttentionProblem

    h = HIDDEN // d
    return AttentionProblem(TOKENS // s, h, h, s, s, d, "bf16", causal)


def _config(p):
    from argus_cutlass.generate import configure

    if os.environ.get("ARGUS_BENCH_CONFIG", "tuned") == "heuristic":
        from argus_cutlass.kernels.attention.heuristics import default_config

        return default_config(p.head_dim, p.dtype, p.causal)
    return configure(p)[0]


@pytest.fixture(scope="module")
def libraries():
    from argus_cutlass.generate import build_many

    return build_many([_config(_problem(*cell)) for cell in GRID])


def _median_rounds(fns: dict, rounds: int = ROUNDS) -> dict[str, float]:
    from argus_cutlass.kernels.attention.check import median_ms

    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(median_ms(fn, WARMUP, ITERS))
    return {k: statistics.median(v) for k, v in times.items()}


@pytest.mark.parametrize("cell", GRID, ids=[f"d{d}-s{s}-{'causal' if c else 'full'}" for d, s, c in GRID])
def test_attention_vs_cudnn(benchmark, libraries, cell):
    from argus_cutlass.generate import kernel_name
    from argus_cutlass.kernels.attention.baseline import cudnn_callable
    from argus_cutlass.kernels.attention.check import make_inputs, run_and_check

    p = _problem(*cell)
    cfg = _config(p)
    lib = libraries[kernel_name(cfg)]
    small = type(p)(1, p.heads, p.kv_heads, p.seqlen_q, p.seqlen_k, p.head_dim, p.dtype, p.causal)
    chk = run_and_check(lib, small, seed=7)
    assert chk.passed, chk.summary()
    ins = make_inputs(p, seed=1)
    o = torch.empty(ins.q.shape, dtype=ins.q.dtype, device="cuda")
    lse = torch.empty((p.batch, p.heads, p.seqlen_q), dtype=torch.float32, device="cuda")

    def ours() -> None:
        lib.forward(ins.q, ins.k, ins.v, out=o, lse=lse, problem=p)

    cudnn = cudnn_callable(p)
    fns = {"ours": ours} if cudnn is None else {"ours": ours, "cudnn": cudnn}
    med = _median_rounds(fns)
    row = {"head_dim": p.head_dim, "seqlen": p.seqlen_q, "causal": p.causal, "batch": p.batch, "heads": p.heads,
           "kernel": lib.name, "ms": med["ours"], "tflops": p.flops / med["ours"] / 1e9,
           "check_rel_error": chk.rel_error}
    if "cudnn" in med:
        row.update(cudnn_ms=med["cudnn"], cudnn_tflops=p.flops / med["cudnn"] / 1e9,
                   speedup_vs_cudnn=med["cudnn"] / med["ours"])
    RESULTS.append(row)
    benchmark.extra_info.update(row)
    def ours_synced() -> None:  # pytest-benchmark times on the host: wait for the kernel each call
        ours()
        torch.cuda.synchronize()

    benchmark.pedantic(ours_synced, rounds=5, iterations=5, warmup_rounds=1)


def teardown_module(module) -> None:  # noqa: ANN001
    if not RESULTS:
        return
    lines = ["| D | S | causal | ours ms | ours TFLOP/s | cuDNN ms | cuDNN TFLOP/s | cuDNN time / ours |",
             "|---|---|---|---|---|---|---|---|"]
    ratios = []
    for r in RESULTS:
        sp = r.get("speedup_vs_cudnn")
        if sp:
            ratios.append(sp)
        lines.append(f"| {r['head_dim']} | {r['seqlen']} | {'yes' if r['causal'] else 'no'} | {r['ms']:.3f} | "
                     f"{r['tflops']:.0f} | {r.get('cudnn_ms', float('nan')):.3f} | "
                     f"{r.get('cudnn_tflops', float('nan')):.0f} | {sp or float('nan'):.3f} |")
    if ratios:
        geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        lines.append(f"\ngeomean cuDNN time / ours = {geo:.3f} over {len(ratios)} cells "
                     f"(min {min(ratios):.3f}, max {max(ratios):.3f})")
    text = "\n".join(lines)
    print("\n" + text)
    path = os.environ.get("ARGUS_BENCH_TABLE")
    if path:
        with open(path, "w") as fh:
            fh.write(text + "\n")
        from plots import plot_after_bench  # bench/plots.py: ratio and roofline plots beside the table

        plot_after_bench(path)
