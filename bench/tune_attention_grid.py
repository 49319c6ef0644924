"""Tune the attention benchmark grid on a Hopper GPU and write the entries shipped in ``agent/tuned_h200.json``.

    python3 bench/tune_attention_grid.py --out OUTDIR [--limit 4] [--seqlens 512,2048] [--variants]
                                         [--epilogues direct,quad16]

For every cell of ``bench/test_attention_bench.py``'s grid (bf16, 16k tokens, D in {64, 128, 256},
S in {512, 2048, 8192, 16384}, causal and not): the first ``--limit`` candidates of
:func:`argus_cutlass.kernels.attention.space.candidates` (FA3's tile first) are generated, verified
and compiled in one parallel batch (:func:`argus_cutlass.generate.build_many`), each is checked against
the fp32 reference on a one-batch copy of the cell (O and LSE poisoned with NaN), then the passing ones
and cuDNN are timed alternately (``ROUNDS`` rounds, median of CUDA-event medians). Writes
``OUTDIR/tuned_attention.json`` (entries in the format of :func:`argus_cutlass.agent.store.attention_entry`)
and ``OUTDIR/tuned_attention.md`` (per cell: every candidate's time, the winner, cuDNN).

``--variants`` replaces the space's ranking by the tile-transition knobs around two bases, the
configured entry (:func:`argus_cutlass.generate.configure`) and FA3's tile: each with ``q_stages``
1 / 2 and ``prefetch_q`` off / on, each with every O epilogue of ``--epilogues`` (``direct``: 4-byte
stores from the accumulator layout; ``quad16``: 16-byte stores after the quad's lane exchange), where
the verifier's resource rules accept them.
``--seqlens`` restricts the grid to those sequence lengths.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the grid of test_attention_bench

ROUNDS = 3
WARMUP = 3
ITERS = 10


def main(argv: list[str] | None = None) -> int:
    import torch

    from argus_cutlass.agent.store import DEFAULT_GPU, attention_entry, gpu_name
    from argus_cutlass.generate import build_many, kernel_name
    from argus_cutlass.kernels.attention.baseline import cudnn_callable
    from argus_cutlass.kernels.attention.check import make_inputs, median_ms, run_and_check
    from argus_cutlass.kernels.attention.space import candidates
    from test_attention_bench import GRID, _problem

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--limit", type=int, default=4)
    ap.add_argument("--seqlens", default="", help="comma-separated S values of the grid to tune (default: all)")
    ap.add_argument("--variants", action="store_true",
                    help="candidates: q_stages x prefetch_q x epilogue around the configured entry and FA3's tile")
    ap.add_argument("--epilogue-only", action="store_true",
                    help="candidates: the configured entry with each of --epilogues (nothing else varied)")
    ap.add_argument("--epilogues", default="direct,quad16",
                    help="comma-separated O epilogues the --variants candidates take (AttentionConfig.epilogue)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    seqlens = {int(x) for x in args.seqlens.split(",") if x}
    cells = [(cell, _problem(*cell)) for cell in GRID if not seqlens or cell[1] in seqlens]
    epilogues = tuple(x for x in args.epilogues.split(",") if x)
    cands = {cell: (_epilogue_only(p, epilogues) if args.epilogue_only else
                    _variants(p, epilogues) if args.variants else candidates(p, limit=args.limit))
             for cell, p in cells}
    libs = build_many([c for cs in cands.values() for c in cs])
    print(f"built {len(libs)} kernels in {time.perf_counter() - t0:.0f} s", flush=True)
    gpu = gpu_name() or DEFAULT_GPU
    entries, lines = [], ["| D | S | causal | candidate (tile_m x tile_n, stages, pp, scheduler) | ms | TFLOP/s | "
                          "cuDNN ms | best |", "|---|---|---|---|---|---|---|---|"]
    for cell, p in cells:
        small = type(p)(1, p.heads, p.kv_heads, p.seqlen_q, p.seqlen_k, p.head_dim, p.dtype, p.causal)
        ins = make_inputs(p, seed=1)
        o = torch.empty(ins.q.shape, dtype=ins.q.dtype, device="cuda")
        lse = torch.empty((p.batch, p.heads, p.seqlen_q), dtype=torch.float32, device="cuda")
        fns, cfg_of = {}, {}
        for i, cfg in enumerate(cands[cell]):
            lib = libs[kernel_name(cfg)]
            chk = run_and_check(lib, small, seed=7)
            if not chk.passed:
                print(f"FAIL {cell} {lib.name}: {chk.summary()}", flush=True)
                continue
            fns[f"c{i}"] = (lambda lib=lib: lib.forward(ins.q, ins.k, ins.v, out=o, lse=lse, problem=p))
            cfg_of[f"c{i}"] = (cfg, lib.name)
        cudnn = cudnn_callable(p)
        if cudnn is not None:
            fns["cudnn"] = cudnn
        times: dict[str, list[float]] = {k: [] for k in fns}
        for _ in range(ROUNDS):
            for k, fn in fns.items():
                times[k].append(median_ms(fn, WARMUP, ITERS))
        med = {k: statistics.median(v) for k, v in times.items()}
        ours = {k: v for k, v in med.items() if k != "cudnn"}
        best = min(ours, key=ours.get)
        cfg, name = cfg_of[best]
        entries.append(attention_entry(gpu, p, cfg, ours[best], med.get("cudnn")))
        for k in ours:
            c, n = cfg_of[k]
            lines.append(f"| {p.head_dim} | {p.seqlen_q} | {'yes' if p.causal else 'no'} | {c.tile_m}x{c.tile_n}, "
                         f"s{c.stages}, q{c.q_stages}{', pf' if c.prefetch_q else ''}, {'pp' if c.pingpong else 'no pp'}, "
                         f"{'' if c.epilogue == 'direct' else c.epilogue + ', '}"
                         f"{'dynamic' if c.dynamic_scheduler else 'static'} | {ours[k]:.3f} | "
                         f"{p.flops / ours[k] / 1e9:.0f} | {med.get('cudnn', float('nan')):.3f} | "
                         f"{'**best**' if k == best else ''} |")
        print(f"{cell}: best {name} {ours[best]:.3f} ms, cuDNN {med.get('cudnn', float('nan')):.3f} ms", flush=True)
        torch.cuda.empty_cache()
    what = (f"the configured entry with each epilogue of {','.join(epilogues)}" if args.epilogue_only else
            "q_stages x prefetch_q x epilogue around the configured entry and FA3's tile" if args.variants else
            f"the first {args.limit} candidates of kernels.attention.space")
    note = (f"measured by bench/tune_attention_grid.py on {gpu} ({time.strftime('%Y-%m-%d')}): the best of "
            f"{what} per cell, interleaved with cuDNN")
    (out / "tuned_attention.json").write_text(json.dumps({"note": note, "entries": entries}, indent=1) + "\n")
    (out / "tuned_attention.md").write_text("\n".join(lines) + "\n")
    print(f"done in {time.perf_counter() - t0:.0f} s", flush=True)
    return 0


def _epilogue_only(p, epilogues: tuple[str, ...]) -> list:  # noqa: ANN001
    """The configured entry (``generate.configure``) with each feasible epilogue of ``epilogues``."""
    from argus_cutlass.generate import configure
    from argus_cutlass.kernels.attention.space import feasible

    base = configure(p)[0]
    return [c for c in (base.replace(epilogue=e) for e in epilogues) if feasible(c)[0]]


def _variants(p, epilogues: tuple[str, ...] = ("direct", "quad16")) -> list:  # noqa: ANN001
    """q_stages x prefetch_q x ``epilogues`` around the configured entry, FA3's tile and the widest kv
    block (up to the configured one) that fits two Q stages (feasible ones, one per program)."""
    from argus_cutlass.generate import configure
    from argus_cutlass.kernels.attention.heuristics import default_config
    from argus_cutlass.kernels.attention.space import feasible, program_name

    out, seen = [], set()
    bases = [configure(p)[0], default_config(p.head_dim, p.dtype, p.causal, p.varlen)]
    # and the widest kv block (up to the configured one) that leaves smem for a second Q stage
    fits = [n for n in range(bases[0].tile_n, 47, -16) if feasible(bases[0].replace(tile_n=n, q_stages=2))[0]]
    if fits:
        bases.append(bases[0].replace(tile_n=fits[0]))
    for base in bases:
        for q in (1, 2):
            for pf in (False, True):
                for epi in epilogues:
                    cfg = base.replace(q_stages=q, prefetch_q=pf, epilogue=epi)
                    if feasible(cfg)[0] and program_name(cfg) not in seen:
                        seen.add(program_name(cfg))
                        out.append(cfg)
    return out


if __name__ == "__main__":
    sys.exit(main())
