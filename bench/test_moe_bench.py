"""MoE layer benchmark against the torch ``_grouped_mm`` layer of ANCHORS.md, interleaved, same process.

Run on the H200 with torch (and pytest-benchmark only for its JSON, optional)::

    ARGUS_BENCH_TABLE=$OUT/moe_table.md pytest -q bench/test_moe_bench.py -s

Grid: the 3 ANCHORS shapes x T in {16, 256, 2048, 8192}, bf16, uniform routing. Per cell: our layer is
checked against fp32 first, then ours and the baseline are timed alternately for ``ROUNDS`` rounds
(each the median of CUDA-event timings with L2 flushed), the result the median of the rounds. The
table has the activated-weight floor at 4.3 TB/s (``MoEProblem.floor_ms`` on the measured routing's
counts) and the vLLM column of ANCHORS.md as a reference (measured in another run: compare ratios).
The layer timed is the one :func:`argus_cutlass.api.moe` runs: the configuration the orchestrator
picks for the cell's T (:func:`argus_cutlass.generate.configure`: the shipped tuned entry of the T
bucket, else ``kernels/moe/heuristics.py::default_config``; column ``config``: ``m64`` the small-T
path, ``m128`` the large-T one, each GEMM's n-tile x stages, the k extent, ``b<gu>x<dn>`` the m-tiles
per band of each GEMM's walk, ``g`` the gather slices, and where the configuration came from). ``ARGUS_MOE_BENCH_COMPARE=1`` also times, interleaved with the other two, the
128-row default in the small-T cells (column ``m128 ms``) and, in the cells whose layer walks in bands,
the same configuration with the unbanded walk (``gu_band_m = dn_band_m = 0``, the walk of every
layer before bands: column ``unbanded ms``), so a GPU session measures what the derived bands gain.
``ARGUS_MOE_BENCH_COMPARE=lookahead`` (or ``pdl``) times instead the same configuration with
``work_lookahead`` (the grouped GEMMs' producers reading their next unit's expert ahead, or not) or ``pdl``
(programmatic dependent launch) flipped, interleaved: column ``flipped ms``; ``pdlw8`` flips pdl together
with an 8-k-tile weight prefetch before the wait; ``evict`` flips ``weights_evict_first`` (the expert weights'
L2 cache hint), ``handoff`` the gate+up -> down handoff per m-tile. Any other value is refused.
"""

from __future__ import annotations

import os
import statistics

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the MoE baseline is the torch _grouped_mm layer)")

from argus_cutlass.kernels.moe.baseline import grouped_mm_layer  # noqa: E402
from argus_cutlass.kernels.moe.check import (  # noqa: E402
    run_and_check,
    time_fn,
    timed_floor_ms,
    timed_inputs,
)
from argus_cutlass.kernels.moe.problem import MODEL_SHAPES, MoEProblem  # noqa: E402
from moe_anchors import VLLM_MS, VLLM_RATIO  # noqa: E402  (bench/moe_anchors.py: ANCHORS.md's vLLM row)

pytestmark = pytest.mark.gpu

ROUNDS = 5
TOKENS = (16, 256, 2048, 8192)
ROWS: list[str] = []
#: ARGUS_MOE_BENCH_COMPARE: "" (ours and _grouped_mm only), "1" (also m128 and unbanded), "lookahead" / "pdl"
#: (also the same configuration with that knob flipped: column ``flipped ms``), "pdlw8" (pdl with 8 k-tiles of
#: weights prefetched before the wait, or neither), "evict" (the weights loaded evict-first, or not), "handoff"
#: (the gate+up -> down handoff per m-tile flipped)
COMPARE_MODES = ("", "1", "lookahead", "pdl", "pdlw8", "evict", "handoff")


@pytest.mark.parametrize("tokens", TOKENS)
@pytest.mark.parametrize("model", sorted(MODEL_SHAPES))
def test_moe_cell(model, tokens):
    from argus_cutlass.api import moe_kernel

    from argus_cutlass.generate import configure
    from argus_cutlass.kernels.moe.config import MoEConfig

    p = MoEProblem.for_model(model, tokens)
    cfg, source = configure(p)  # the orchestrator's choice: a tuned entry of the T bucket, else the heuristic
    lib = moe_kernel(p, cfg, smt=None)  # the full verifier, its SMT tier included when z3 is installed
    chk = run_and_check(lib, p)
    assert chk.ok, chk
    x, ids, w, w13, w2 = timed_inputs(p)   # the routing the floor below counts
    ws = torch.empty(lib.workspace_bytes(tokens), dtype=torch.uint8, device="cuda")
    compare = os.environ.get("ARGUS_MOE_BENCH_COMPARE", "")
    if compare not in COMPARE_MODES:
        raise ValueError(f"ARGUS_MOE_BENCH_COMPARE={compare!r}: expected one of {sorted(COMPARE_MODES)}")
    alts: dict[str, MoEConfig] = {}
    if compare == "1" and cfg.tile_m != 128:
        alts["m128"] = MoEConfig(dtype=p.dtype)
    if compare == "1" and (cfg.gu_band_m or cfg.dn_band_m):
        alts["unbanded"] = cfg.replace(gu_band_m=0, dn_band_m=0)
    if compare == "lookahead":   # the same configuration with the other work_lookahead (a lookahead takes the static
        # walk: MoEConfig.with_lookahead)
        alts["flipped"] = cfg.with_lookahead(1 - cfg.work_lookahead)
    if compare == "pdl":   # the same configuration with programmatic dependent launch flipped
        alts["flipped"] = cfg.with_pdl(not cfg.pdl)
    if compare == "pdlw8":   # ... with pdl and 8 k-tiles of weights prefetched before the wait, or neither
        alts["flipped"] = cfg.with_pdl(False) if cfg.pdl else cfg.with_pdl(True, 8)
    if compare == "evict":   # the same configuration with the weights' L2 cache hint flipped
        alts["flipped"] = cfg.replace(weights_evict_first=not cfg.weights_evict_first)
    if compare == "handoff":   # the same configuration with the gate+up -> down handoff flipped
        alts["flipped"] = cfg.replace(handoff=not cfg.handoff)
    runs = {}
    for key, alt_cfg in alts.items():
        alt = moe_kernel(p, alt_cfg, smt=False)
        assert run_and_check(alt, p).ok, (key, alt_cfg)
        runs[key] = (alt, torch.empty(alt.workspace_bytes(tokens), dtype=torch.uint8, device="cuda"))
    ours, base = [], []
    other: dict[str, list[float]] = {key: [] for key in runs}
    timed = [(ours, lambda: lib.forward(x, ids, w, w13, w2, workspace=ws, padding="unchecked")),
             (base, lambda: grouped_mm_layer(x, ids, w, w13, w2))]
    timed += [(other[key], lambda a=alt, wa=ws_alt: a.forward(x, ids, w, w13, w2, workspace=wa, padding="unchecked"))
              for key, (alt, ws_alt) in runs.items()]
    for r in range(ROUNDS):   # the order reversed every other round (ABBA): drift within a round hits all alike
        for out, fn in timed[:: 1 if r % 2 == 0 else -1]:
            out.append(time_fn(fn, iters=20))
    o, b = statistics.median(ours), statistics.median(base)
    m128, unbanded, flip = (f"{statistics.median(other[key]):.3f}" if other.get(key) else "-"
                            for key in ("m128", "unbanded", "flipped"))
    label = (f"m{cfg.tile_m} gu{cfg.gu_tile_n}x{cfg.gu_stages} dn{cfg.dn_tile_n}x{cfg.dn_stages} k{cfg.tile_k} "
             f"b{cfg.gu_band_m}x{cfg.dn_band_m} g{cfg.gather_slices}u{cfg.gather_unroll}"
             f"{' la' if cfg.work_lookahead else ''}{' pdl' if cfg.pdl else ''}"
             f"{f' w{cfg.weight_prefetch}' if cfg.weight_prefetch else ''}{' ho' if cfg.handoff else ''} ({source})")
    floor = timed_floor_ms(p)   # the activated experts of timed_inputs' routing, at the anchors' 4.3 TB/s
    v = VLLM_MS.get((model, tokens))
    need = VLLM_RATIO.get((model, tokens))
    ROWS.append(f"| {model} | {tokens} | {label} | {o:.3f} | {m128} | {b:.3f} | {b / o:.2f} | "
                f"{v if v else '-'} | {need if need else '-'} | {floor:.3f} | {o / floor:.2f} | {unbanded} | {flip} |")
    print(ROWS[-1])


def teardown_module(module):
    table = os.environ.get("ARGUS_BENCH_TABLE")
    # new columns last: tables of earlier sessions (11 and 12 columns) keep their first columns' meaning; the
    # 13th was "other lookahead ms" for one commit of session 22 (no table measured with it)
    head = ("| model | T | config | ours ms | m128 ms | _grouped_mm ms | speedup | vLLM ms (ANCHORS) | "
            "speedup needed (ANCHORS vLLM ratio) | floor ms | ours / floor | unbanded ms | flipped ms |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    if table and ROWS:
        with open(table, "w") as f:
            f.write(head + "\n".join(ROWS) + "\n")
        from plots import plot_after_bench  # bench/plots.py: ratio and roofline plots beside the table

        plot_after_bench(table)
