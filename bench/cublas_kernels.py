"""Which kernels cuBLAS runs on a set of GEMM shapes (the name of each kernel gives its tile, cluster and
k split), with their GPU durations, from torch's profiler (CUPTI): what our declared sub-space lacks where
cuBLAS wins.

    python3 bench/cublas_kernels.py --table bench/data/gemm_sweep_bf16_bf16_tn_graph_h200.json --below 0.9 \
        --out cublas_kernels.json
    python3 bench/cublas_kernels.py --shape 512x1024x5120 --shape 256x768x2048

Operands are the sweep's (``layout_views`` of a :class:`GemmProblem`, fresh random bf16 / fp16 values);
each shape runs ``--iters`` times after a warm-up; per shape the output lists each kernel name with its
mean duration in microseconds (profiler events) and the number of launches per GEMM.
Needs a CUDA GPU and torch.
"""
from __future__ import annotations

import argparse
import collections
import json
import sys


def shapes_below(table: str, below: float) -> list[str]:
    """The rows of a sweep table whose best kernel is slower than ``below`` x cuBLAS (cuBLAS / ours)."""
    t = json.load(open(table))
    out = []
    for key, row in t["shapes"].items():
        ks = [v for v in (row.get("kernels") or {}).values() if v]
        if ks and row.get("cublas_ms") and row["cublas_ms"] / min(ks) < below:
            out.append((row["cublas_ms"] / min(ks), key))
    return [k for _, k in sorted(out)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", action="append", default=[], help="MxNxK (repeatable)")
    ap.add_argument("--table", help="a sweep table (bench/data/gemm_sweep_*.json): its rows below --below")
    ap.add_argument("--below", type=float, default=0.9, help="cuBLAS / ours below this (with --table)")
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    ap.add_argument("--layout", default="tn")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--out", help="write the result as JSON here")
    args = ap.parse_args(argv)
    try:
        shapes = list(args.shape) + (shapes_below(args.table, args.below) if args.table else [])
        for s in args.shape:
            if len(s.split("x")) != 3 or min(int(v) for v in s.split("x")) < 1:
                raise ValueError(f"--shape {s!r}: expected MxNxK of positive integers")
    except (OSError, ValueError, KeyError) as exc:
        ap.error(str(exc))
    if not shapes:
        ap.error("give --shape or --table" + (f" (no row of {args.table} is below --below {args.below})"
                                              if args.table else ""))
    try:
        import torch
    except ImportError:
        ap.error("needs torch (a CUDA build) and a GPU: cuBLAS is reached through torch.mm")
    from torch.profiler import ProfilerActivity, profile

    from argus_cutlass.kernels.gemm.problem import GemmProblem, layout_views, storage_rows

    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    result: dict[str, dict[str, list[float]]] = {}
    for s in shapes:
        m, n, k = (int(v) for v in s.split("x"))
        p = GemmProblem(m=m, n=n, k=k, dtype=args.dtype, out_dtype=args.dtype, layout=args.layout)
        ar, br = storage_rows(p)
        a_flat = torch.randn(ar * p.lda, device="cuda").to(dt)
        b_flat = torch.randn(br * p.ldb, device="cuda").to(dt)
        a, b = layout_views(a_flat, b_flat, p)
        for _ in range(5):
            torch.mm(a, b)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(args.iters):
                torch.mm(a, b)
            torch.cuda.synchronize()
        per: dict[str, list[float]] = collections.defaultdict(list)
        for ev in prof.events():
            if ev.device_type.name == "CUDA":
                per[ev.name].append(ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total)
        result[s] = {nm: [round(sum(v) / len(v), 2), round(len(v) / args.iters, 2)] for nm, v in per.items()}
        print(s, " | ".join(f"{nm[:110]} {us} us x{c}" for nm, (us, c) in result[s].items()), flush=True)
    if args.out:
        json.dump(result, open(args.out, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
