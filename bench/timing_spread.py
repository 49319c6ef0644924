"""How well two timings of the same kernels agree: the run-to-run spread that decides whether issue 13's "within
3 % of the sweep's best" can be scored on a table at all.

    python3 bench/timing_spread.py TABLE_A TABLE_B            # two bench/sweep_gemm.py tables (e.g. one graph-timed
                                                              # table measured twice)
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


#: rows with fewer kernels timed in both than this are left out of the shifted spread (with one kernel the row's
#: median shift is its whole difference, with two half of it: the spread would read low)
MIN_SHIFT_KERNELS = 3


def spread(rows: list[tuple[str, dict, dict]]) -> dict[str, Any]:
    """The agreement of :func:`pairs`' rows: ``raw`` (every kernel timed in both) and ``shifted`` (the row's
    median log ratio removed, rows of at least :data:`MIN_SHIFT_KERNELS` kernels) lists of ``|log ratio|``;
    ``signed``, the median signed log ratio (B over A); ``a_best_in_b`` (rows where A's best is within
    :data:`TIE` of B's best, judged in B's times) and ``b_best_in_a`` (the other way).

    >>> s = spread([("1x2x3", {"a": 1.0, "b": 2.0, "c": 3.0}, {"a": 1.1, "b": 2.2, "c": 3.3})])
    >>> round(max(s["raw"]), 4), round(max(s["shifted"]), 4), s["a_best_in_b"], round(s["signed"], 4)
    (0.0953, 0.0, 1, 0.0953)
    """
    raw, shifted, signed, a_in_b, b_in_a = [], [], [], 0, 0
    for _, ka, kb in rows:
        common = [nm for nm in ka if nm in kb]
        logs = [math.log(kb[nm] / ka[nm]) for nm in common]
        signed += logs
        raw += [abs(x) for x in logs]
        if len(common) >= MIN_SHIFT_KERNELS:
            mid = statistics.median(logs)
            shifted += [abs(x - mid) for x in logs]
        a_in_b += kb[min(common, key=ka.get)] <= (1 + TIE) * min(kb[nm] for nm in common)
        b_in_a += ka[min(common, key=kb.get)] <= (1 + TIE) * min(ka[nm] for nm in common)
    return {"raw": raw, "shifted": shifted, "signed": statistics.median(signed) if signed else 0.0,
            "a_best_in_b": a_in_b, "b_best_in_a": b_in_a, "rows": len(rows)}


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
    if not all(isinstance(d, dict) and isinstance(d.get("shapes"), dict) for d in docs):
        ap.error("a table is not a sweep table (a JSON object with a 'shapes' object)")
    a, b = docs[0], docs[-1]
    rows = pairs(a, b, args.field)
    if not rows:
        print("no row with a kernel timed in both")
        return 1
    s = spread(rows)
    # cuBLAS: B's time in the field that goes with --field (kernels_events -> cublas_ms_events, ...)
    cub_field = "cublas_ms" + args.field[len("kernels"):] if args.field.startswith("kernels") else "cublas_ms"
    cub = [abs(math.log(b["shapes"][k][cub_field] / a["shapes"][k]["cublas_ms"])) for k, _, _ in rows
           if a["shapes"][k].get("cublas_ms") and b["shapes"][k].get(cub_field)]
    print(f"{s['rows']} rows; B / A median {100 * (math.exp(s['signed']) - 1):+.2f} %")
    print(_line("kernels", s["raw"]))
    print(_line(f"kernels, each row's median shift removed (rows of >= {MIN_SHIFT_KERNELS} kernels)", s["shifted"]))
    if cub:
        print(_line(f"cuBLAS ({cub_field} against cublas_ms)", cub))
    print(f"A's best within 3 % of B's best, in B's times, on {s['a_best_in_b']} of {s['rows']} rows; "
          f"B's best within 3 % of A's best, in A's times, on {s['b_best_in_a']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
