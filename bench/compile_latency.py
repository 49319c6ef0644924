"""Compile latency of one kernel per family (issue 13 item 6: a cold compile <= 20 s on the device's
cores, a cache hit <= 50 ms in a running process), measured with a fresh compile cache.

    python3 bench/compile_latency.py [--out OUTDIR]

In one process, with ``ARGUS_CACHE_DIR`` pointed at a new empty folder (set before argus_cutlass is
imported): for the default GEMM 4096^3, the attention d128 causal 1x16x2048 and the Qwen3-30B-A3B T = 16
MoE layer, :func:`argus_cutlass.generate.run` with ``compile=True, run=False`` twice in a row. The first
run's ``compile`` stage is a cold nvcc build of that one kernel (no other build running); the second is
the cache hit of a running process. Each run's stage seconds (configure, build, verify, render, compile)
and the CPU count are printed as a table and written to ``OUTDIR/compile_latency.json``. Runs where nvcc
is (CI, the device); no GPU needed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=".", help="folder for compile_latency.json")
    args = ap.parse_args(argv)
    cache = tempfile.mkdtemp(prefix="argus_cold_cache_")
    os.environ["ARGUS_CACHE_DIR"] = cache   # before argus_cutlass reads its settings

    from argus_cutlass.generate import Options, run
    from argus_cutlass.kernels.attention.problem import AttentionProblem
    from argus_cutlass.kernels.gemm.problem import GemmProblem
    from argus_cutlass.kernels.moe.problem import MoEProblem

    problems = {
        "gemm 4096^3 bf16": GemmProblem(4096, 4096, 4096),
        "attention d128 causal 1x16x2048": AttentionProblem(1, 16, 16, 2048, 2048, 128, causal=True),
        "moe qwen3-30b-a3b T=16": MoEProblem.for_model("qwen3-30b-a3b", 16),
    }
    opts = Options(smt=False, run=False)
    rows = []
    for label, problem in problems.items():
        for attempt in ("cold", "cache hit"):
            t0 = time.perf_counter()
            r = run(problem, options=opts)
            wall = time.perf_counter() - t0
            stages = {k: round(v, 3) for k, v in r.stage_seconds.items()}
            rows.append({"kernel": label, "run": attempt, "name": r.name, "wall_s": round(wall, 3),
                         "compile_s": stages.get("compile"), "stages": stages, "status": str(r.status)})
            print(f"{label:34s} {attempt:9s} compile {stages.get('compile')!s:>8} s  wall {wall:7.2f} s  {r.status}",
                  flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compile_latency.json").write_text(json.dumps({"cpus": os.cpu_count(), "cache_dir": cache, "rows": rows},
                                                         indent=1) + "\n")
    print(f"cpus {os.cpu_count()}; fresh cache {cache}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
