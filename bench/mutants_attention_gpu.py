"""Build every planted mistake of the attention mutant catalogue WITHOUT the verifier; run it on a Hopper GPU.

    python3 bench/mutants_attention_gpu.py --out OUTDIR [--ids a,b] [--classes x,y] [--timeout 20] [--jobs N]

Writes ``OUTDIR/mutants_attention_gpu.json`` (per kernel: id, class, rule, outcome, per-problem
check results, build) and ``OUTDIR/mutants_attention_gpu.md`` (the table), and prints one line
per kernel. Outcomes and problems: :mod:`argus_cutlass.testing.gpu_attention`. Needs torch with
CUDA and nvcc. The exit status is 1 when a baseline is not correct (then the mutant outcomes mean
nothing), else 0.

On the lent H200 (no package index), install the carried wheels first, e.g.::

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/pydantic*.whl ...
    PYTHONPATH=/tmp/site:. python3 bench/mutants_attention_gpu.py --out $OUT
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

try:  # the installed package (its templates/agent data); else the checkout, in place
    import argus_cutlass.templates  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from argus_cutlass.testing.gpu_attention import (  # noqa: E402
    DEFAULT_TIMEOUT_S,
    bad_baselines,
    run_suite,
    write_results,
)
from argus_cutlass.testing.mutants import load_catalogue  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory for mutants_attention_gpu.json / .md")
    ap.add_argument("--work", default="/tmp/argus_attention_mutants",
                    help="directory for the .cu files and nvcc logs")
    ap.add_argument("--ids", default="", help="comma-separated mutant ids (default: all)")
    ap.add_argument("--classes", default="", help="comma-separated mutant classes (default: all)")
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                    help="seconds one problem may run before the kernel is hung")
    ap.add_argument("--jobs", type=int, default=None, help="parallel nvcc processes (default: CPU count)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-cache", action="store_true", help="rebuild every kernel (skip the nvcc cache)")
    args = ap.parse_args(argv)

    cat = load_catalogue(family="attention")
    ids = [s for s in args.ids.split(",") if s]
    unknown = sorted(set(ids) - set(cat))
    if unknown:
        ap.error(f"unknown mutant id(s) {unknown}")
    classes = [s for s in args.classes.split(",") if s]
    chosen = [m for m in cat.values() if (not ids or m.id in ids) and (not classes or m.cls in classes)]
    if not chosen:
        ap.error("no mutant selected")
    t0 = time.perf_counter()
    results = run_suite(chosen, work=args.work, workers=args.jobs, kernel_timeout_s=args.timeout,
                        seed=args.seed, use_cache=not args.no_cache, log=lambda s: print(s, flush=True))
    j, md = write_results(results, args.out)
    base = [r for r in results if r.cls == "baseline"]
    mutants = [r for r in results if r.cls != "baseline"]
    shown = [r for r in mutants if r.shown]
    benign = [r for r in mutants if r.outcome == "benign"]
    unprintable = [r.id for r in mutants if r.outcome == "not_printable"]
    documented = sum(1 for r in benign if r.benign_reason)
    listed = f" {unprintable}" if unprintable else ""
    print(f"{len(shown)} of {len(mutants)} mutants shown on silicon, {len(benign)} benign ({documented} "
          f"with a documented reason), {len(unprintable)} not printable{listed}; "
          f"{time.perf_counter() - t0:.0f} s; {j}, {md}")
    bad = bad_baselines(base)
    if bad:
        print(f"BASELINE NOT CORRECT: {bad}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
