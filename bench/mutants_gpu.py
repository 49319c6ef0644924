"""Build every planted mistake of the mutant catalogue WITHOUT the verifier and run it on a Hopper GPU.

    python3 bench/mutants_gpu.py --out OUTDIR [--ids a,b] [--classes x,y] [--timeout 10] [--jobs N]

Writes ``OUTDIR/mutants_gpu.json`` (per mutant: id, class, rule, outcome, per-shape numbers,
build) and ``OUTDIR/mutants_gpu.md`` (the table), and prints one line per kernel. Outcomes and
shapes: :mod:`argus_cutlass.testing.gpu`. The exit status is 1 when a baseline is not correct
(then the mutant outcomes mean nothing), else 0.

On the lent H200 (no package index), install the carried wheels first, e.g.::

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/pydantic*.whl ...
    PYTHONPATH=/tmp/site:. python3 bench/mutants_gpu.py --out $OUT
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

from argus_cutlass.testing.gpu import SHAPES, run_suite, write_results  # noqa: E402
from argus_cutlass.testing.mutants import load_catalogue  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory for mutants_gpu.json / .md")
    ap.add_argument("--work", default="/tmp/argus_mutants", help="directory for the .cu / .so / nvcc logs")
    ap.add_argument("--ids", default="", help="comma-separated mutant ids (default: all)")
    ap.add_argument("--classes", default="", help="comma-separated mutant classes (default: all)")
    ap.add_argument("--shapes", default="", help=f"comma-separated shape names of {[s for s, _ in SHAPES]}")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds a kernel may run before it is hung")
    ap.add_argument("--jobs", type=int, default=None, help="parallel nvcc processes (default: CPU count)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    cat = load_catalogue()
    ids = [s for s in args.ids.split(",") if s]
    unknown = sorted(set(ids) - set(cat))
    if unknown:
        ap.error(f"unknown mutant id(s) {unknown}")
    classes = [s for s in args.classes.split(",") if s]
    chosen = [m for m in cat.values() if (not ids or m.id in ids) and (not classes or m.cls in classes)]
    if not chosen:
        ap.error("no mutant selected")
    names = [s for s in args.shapes.split(",") if s]
    shapes = [s for s in SHAPES if not names or s[0] in names]
    t0 = time.perf_counter()
    results = run_suite(chosen, work=args.work, shapes=shapes, workers=args.jobs, kernel_timeout_s=args.timeout,
                        seed=args.seed, log=lambda s: print(s, flush=True))
    j, md = write_results(results, args.out)
    base = [r for r in results if r.cls == "baseline"]
    shown = [r for r in results if r.cls != "baseline" and r.shown]
    benign = [r for r in results if r.cls != "baseline" and r.outcome == "benign"]
    print(f"{len(shown)} of {len(results) - len(base)} mutants shown on silicon, {len(benign)} benign "
          f"({sum(1 for r in benign if r.benign_reason)} with a documented reason); "
          f"{time.perf_counter() - t0:.0f} s; {j}, {md}")
    bad_base = [r.id for r in base if r.outcome != "benign"]
    if bad_base:
        print(f"BASELINE NOT CORRECT: {bad_base}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
