"""MoE layer benchmark against the torch ``_grouped_mm`` layer of ANCHORS.md, interleaved, same process.

Run on the H200 with torch (and pytest-benchmark only for its JSON, optional)::

    ARGUS_BENCH_TABLE=$OUT/moe_table.md pytest -q bench/test_moe_bench.py -s

Grid: the 3 ANCHORS shapes x T in {16, 256, 2048, 8192}, bf16, uniform routing. Per cell: our layer is
checked against fp32 first, then ours and the baseline are timed alternately for ``ROUNDS`` rounds
(each the median of CUDA-event timings with L2 flushed), the result the median of the rounds. The
table has the activated-weight floor at 4.3 TB/s (``MoEProblem.floor_ms`` on the measured routing's
counts) and the vLLM column of ANCHORS.md as a reference (measured in another run: compare ratios).
The layer timed is the one :func:`argus_cutlass.api.moe` runs: the configuration
``kernels/moe/heuristics.py::default_config`` picks for the cell's T (column ``config``: ``m64`` the
small-T path for T <= 256, ``m128`` the large-T default). ``ARGUS_MOE_BENCH_COMPARE=1`` also times
the 128-row default in the small-T cells (column ``m128 ms``), interleaved with the other two.
"""

from __future__ import annotations

import os
import statistics

import pytest

torch = pytest.importorskip("torch")

from argus_cutlass.kernels.moe.baseline import grouped_mm_layer  # noqa: E402
from argus_cutlass.kernels.moe.check import make_inputs, run_and_check, time_fn  # noqa: E402
from argus_cutlass.kernels.moe.problem import MODEL_SHAPES, MoEProblem  # noqa: E402

pytestmark = pytest.mark.gpu

ROUNDS = 5
TOKENS = (16, 256, 2048, 8192)
#: ANCHORS.md, vLLM Triton fused MoE (ms), for the ratio column only
VLLM_MS = {("mixtral", 16): 0.677, ("mixtral", 256): 0.771, ("mixtral", 2048): 2.762, ("mixtral", 8192): 9.581,
           ("qwen3-30b-a3b", 16): 0.216, ("qwen3-30b-a3b", 256): 0.351, ("qwen3-30b-a3b", 2048): 0.502,
           ("qwen3-30b-a3b", 8192): 1.424, ("deepseek-v2-lite", 16): 0.242, ("deepseek-v2-lite", 256): 0.318,
           ("deepseek-v2-lite", 2048): 0.577, ("deepseek-v2-lite", 8192): 1.888}
#: ANCHORS.md: _grouped_mm time / vLLM time (our speedup over _grouped_mm must exceed it in every cell)
VLLM_RATIO = {("mixtral", 16): 1.91, ("mixtral", 256): 1.73, ("mixtral", 2048): 1.27, ("mixtral", 8192): 1.13,
              ("qwen3-30b-a3b", 16): 2.17, ("qwen3-30b-a3b", 256): 2.24, ("qwen3-30b-a3b", 2048): 2.48,
              ("qwen3-30b-a3b", 8192): 2.27, ("deepseek-v2-lite", 16): 2.55, ("deepseek-v2-lite", 256): 2.11,
              ("deepseek-v2-lite", 2048): 1.83, ("deepseek-v2-lite", 8192): 1.66}
ROWS: list[str] = []


@pytest.mark.parametrize("tokens", TOKENS)
@pytest.mark.parametrize("model", sorted(MODEL_SHAPES))
def test_moe_cell(model, tokens):
    from argus_cutlass.api import moe_kernel

    from argus_cutlass.generate import configure
    from argus_cutlass.kernels.moe.config import MoEConfig

    p = MoEProblem.for_model(model, tokens)
    cfg = configure(p)[0]  # the orchestrator's choice (the T bucket's heuristic: no tuned MoE entries)
    lib = moe_kernel(p, cfg, smt=None)  # the full verifier, its SMT tier included when z3 is installed
    chk = run_and_check(lib, p)
    assert chk.ok, chk
    x, ids, w, w13, w2 = make_inputs(p, seed=1)
    ws = torch.empty(lib.workspace_bytes(tokens), dtype=torch.uint8, device="cuda")
    alt = None
    if os.environ.get("ARGUS_MOE_BENCH_COMPARE") and cfg.tile_m != 128:
        alt = moe_kernel(p, MoEConfig(dtype=p.dtype), smt=False)
        ws_alt = torch.empty(alt.workspace_bytes(tokens), dtype=torch.uint8, device="cuda")
    ours, base, other = [], [], []
    for _ in range(ROUNDS):
        ours.append(time_fn(lambda: lib.forward(x, ids, w, w13, w2, workspace=ws, padding="unchecked"), iters=20))
        base.append(time_fn(lambda: grouped_mm_layer(x, ids, w, w13, w2), iters=20))
        if alt is not None:
            other.append(time_fn(lambda: alt.forward(x, ids, w, w13, w2, workspace=ws_alt, padding="unchecked"),
                                 iters=20))
    o, b = statistics.median(ours), statistics.median(base)
    m128 = f"{statistics.median(other):.3f}" if other else "-"
    counts = torch.bincount(ids.reshape(-1).long(), minlength=p.experts).tolist()
    floor = p.floor_ms(counts, hbm_bytes_per_s=4.3e12)
    v = VLLM_MS.get((model, tokens))
    need = VLLM_RATIO.get((model, tokens))
    ROWS.append(f"| {model} | {tokens} | m{cfg.tile_m} | {o:.3f} | {m128} | {b:.3f} | {b / o:.2f} | "
                f"{v if v else '-'} | {need if need else '-'} | {floor:.3f} | {o / floor:.2f} |")
    print(ROWS[-1])


def teardown_module(module):
    table = os.environ.get("ARGUS_BENCH_TABLE")
    head = ("| model | T | config | ours ms | m128 ms | _grouped_mm ms | speedup | vLLM ms (ANCHORS) | "
            "speedup needed (ANCHORS vLLM ratio) | floor ms | ours / floor |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|\n")
    if table and ROWS:
        with open(table, "w") as f:
            f.write(head + "\n".join(ROWS) + "\n")
        from plots import plot_after_bench  # bench/plots.py: ratio and roofline plots beside the table

        plot_after_bench(table)
