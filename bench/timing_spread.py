"""How well two timings of the same kernels agree: the run-to-run spread that decides whether issue 13's "within
3 % of the sweep's best" can be scored on a table at all.

    python3 bench/timing_spread.py TABLE_A TABLE_B            # two bench/sweep_gemm.py tables (e.g. one graph-timed
                                                              # table measured twice, on two machines)
    python3 bench/timing_spread.py TABLE --field kernels_sweep  # one table: its re-timed kernels against the times
                                                              # they replaced (--refine keeps them in kernels_sweep)

For every row both hold and every kernel timed in both: ``|log(t_b / t_a)|``, also after removing the row's median
shift (a machine a little faster everywhere is not noise in a ranking); prints the median, the 90th percentile and
the share of pairs apart by more than 3 %, the same for cuBLAS, and on how many rows A's best kernel is within 3 %
of B's best in B. No GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

#: issue 13's tie: a pick within 3 % of the best counts as right
TIE = 0.03


def pairs(a: dict[str, Any], b: dict[str, Any], field_b: str = "kernels") -> list[tuple[str, dict, dict]]:
    """``(row key, kernels of A, kernels of B)`` for the rows both tables hold with at least one kernel timed in
    both (``field_b``: the row field of B holding its times). In a graph-timed table (``timing: graph``, made by
    ``sweep_gemm.py --refine --graph``) only the rows already re-timed from graphs count."""
    def timed(table: dict, row: dict) -> bool:   # a graph-timed table's rows not yet re-timed hold per-launch times
        return table.get("timing") != "graph" or row.get("timing") == "graph"

    out = []
    for key, ra in a.get("shapes", {}).items():
        rb = b.get("shapes", {}).get(key)
        if not rb or not timed(a, ra) or (field_b == "kernels" and not timed(b, rb)):
            continue
        ka = {nm: v for nm, v in ra.get("kernels", {}).items() if v}
        kb = {nm: v for nm, v in rb.get(field_b, {}).items() if v}
        if set(ka) & set(kb):
            out.append((key, ka, kb))
    return out


def spread(rows: list[tuple[str, dict, dict]]) -> dict[str, Any]:
    """The agreement of :func:`pairs`' rows: ``raw`` and ``shifted`` (row median removed) lists of
    ``|log ratio|``, and ``best_kept`` (rows where A's best is within :data:`TIE` of B's best in B).

    >>> s = spread([("1x2x3", {"a": 1.0, "b": 2.0}, {"a": 1.1, "b": 2.2})])
    >>> round(max(s["raw"]), 4), round(max(s["shifted"]), 4), s["best_kept"]
    (0.0953, 0.0, 1)
    """
    raw, shifted, kept = [], [], 0
    for _, ka, kb in rows:
        common = [nm for nm in ka if nm in kb]
        logs = [math.log(kb[nm] / ka[nm]) for nm in common]
        mid = statistics.median(logs)
        raw += [abs(x) for x in logs]
        shifted += [abs(x - mid) for x in logs]
        best_a = min(common, key=ka.get)
        kept += kb[best_a] <= (1 + TIE) * min(kb[nm] for nm in common)
    return {"raw": raw, "shifted": shifted, "best_kept": kept, "rows": len(rows)}


def _line(name: str, xs: list[float]) -> str:
    if not xs:
        return f"{name}: none"
    xs = sorted(xs)
    over = sum(x > math.log(1 + TIE) for x in xs)
    return (f"{name}: {len(xs)} pairs, median {100 * statistics.median(xs):.2f} %, 90th percentile "
            f"{100 * xs[int(0.9 * (len(xs) - 1))]:.2f} %, apart by more than 3 %: {over} ({100 * over / len(xs):.1f} %)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tables", nargs="+", help="two sweep tables, or one with --field")
    ap.add_argument("--field", default="kernels", help="the row field of the second table (or of the one table) "
                    "to compare with its kernels, e.g. kernels_sweep or kernels_events")
    args = ap.parse_args(argv)
    if len(args.tables) not in (1, 2) or (len(args.tables) == 1 and args.field == "kernels"):
        ap.error("give two tables, or one table and --field")
    try:
        docs = [json.loads(Path(p).read_text()) for p in args.tables]
    except (OSError, ValueError) as exc:
        ap.error(f"cannot read a table: {exc}")
    a, b = docs[0], docs[-1]
    rows = pairs(a, b, args.field)
    if not rows:
        print("no row with a kernel timed in both")
        return 1
    s = spread(rows)
    cub = [abs(math.log(b["shapes"][k].get("cublas_ms") / a["shapes"][k].get("cublas_ms"))) for k, _, _ in rows
           if len(args.tables) == 2 and a["shapes"][k].get("cublas_ms") and b["shapes"][k].get("cublas_ms")]
    print(f"{s['rows']} rows")
    print(_line("kernels", s["raw"]))
    print(_line("kernels, each row's median shift removed", s["shifted"]))
    if cub:
        print(_line("cuBLAS", cub))
    print(f"A's best kernel within 3 % of B's best in B on {s['best_kept']} of {s['rows']} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
