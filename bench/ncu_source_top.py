"""The hottest SASS lines of an ncu source page, by warp-stall samples (issue 11's small-T GEMM diagnosis).

    ncu --import REPORT.ncu-rep --page source --csv --print-source sass > src.csv
    python3 bench/ncu_source_top.py src.csv [--top 40]

``ncu --page source --csv`` writes one row per SASS instruction (per profiled kernel) with its address,
its text and PC-sampling counters. This prints the ``--top`` rows with the most stall samples (the column
whose header names warp-stall sampling over all samples; the not-issued one beside it when present), their
share of the kernel's samples and the instruction text, so a stall that sits at one place -- a barrier wait
at a unit boundary, a dependent global load, a TMA issue -- shows as a few lines holding most samples.
Column names differ between ncu versions: a file whose header has no stall-sampling column is refused
with the header it has, so the caller can name the column with ``--column``.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path


def hot_lines(rows: list[dict[str, str]], column: str, top: int) -> list[tuple[float, float, dict[str, str]]]:
    """``(samples, share, row)`` of the ``top`` rows by ``column`` (non-numbers count 0), share of the total.

    >>> rs = [{"Source": "BAR.SYNC", "S": "30"}, {"Source": "LDG", "S": "60"}, {"Source": "NOP", "S": ""}]
    >>> [(s, round(f, 2), r["Source"]) for s, f, r in hot_lines(rs, "S", 2)]
    [(60.0, 0.67, 'LDG'), (30.0, 0.33, 'BAR.SYNC')]
    """
    def num(v: str | None) -> float:
        try:
            return float((v or "").replace(",", ""))
        except ValueError:
            return 0.0

    total = sum(num(r.get(column)) for r in rows) or 1.0
    ranked = sorted(rows, key=lambda r: -num(r.get(column)))[:top]
    return [(num(r.get(column)), num(r.get(column)) / total, r) for r in ranked]


def stall_column(header: list[str]) -> str | None:
    """The all-samples warp-stall column of an ncu source page header, else None.

    >>> stall_column(["Address", "Source", "Warp Stall Sampling (Not-issued Samples)",
    ...               "Warp Stall Sampling (All Samples)"])
    'Warp Stall Sampling (All Samples)'
    """
    cands = [h for h in header if "stall" in h.lower() and "sampl" in h.lower()]
    return next((h for h in cands if "all samples" in h.lower()), cands[0] if cands else None)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="ncu --page source --csv output")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--column", default="", help="the samples column (default: the warp-stall sampling one)")
    args = ap.parse_args(argv)
    path = Path(args.csv)
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError as exc:
        ap.error(f"{path}: {exc}")
    # ncu may print "==PROF==" lines or a kernel title before the header: start at the first CSV header row
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"') and "Source" in ln), None)
    if start is None:
        print(f"{path}: no CSV header with a 'Source' column; first lines:", *lines[:5], sep="\n",
              file=sys.stderr)
        return 2
    reader = csv.DictReader(lines[start:])
    header = list(reader.fieldnames or [])
    column = args.column or stall_column(header)
    if not column or column not in header:
        print(f"{path}: no warp-stall sampling column (pass --column); the header is: {header}",
              file=sys.stderr)
        return 2
    rows = [r for r in reader if r.get("Source")]
    other = [h for h in header if h != column and "stall" in h.lower() and "sampl" in h.lower()]
    print(f"{len(rows)} instructions; column {column!r}" + (f"; beside it {other[0]!r}" if other else ""))
    for samples, share, r in hot_lines(rows, column, args.top):
        extra = f" {r.get(other[0], '')}" if other else ""
        text = r["Source"].strip()[:100]
        print(f"{share * 100:5.1f} % {samples:10.0f}{extra:>10}  {r.get('Address', '')}  {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
