"""Plots of the benchmark tables: the ratio to the baseline per shape, and a roofline of achieved vs peak.

    python3 bench/plots.py TABLE.md [--kind gemm|attention|moe] [--out DIR]

Reads the markdown table a benchmark writes (``ARGUS_BENCH_TABLE``: ``bench/test_gemm_bench.py``,
``bench/test_attention_bench.py``, ``bench/test_moe_bench.py``; the kind is recognised from the header
when not given) and writes next to it (or into ``--out``):

* ``<table>_ratio.png``: per shape, baseline time / our time (cuBLAS, cuDNN, or the torch
  ``_grouped_mm`` layer; > 1 means we are faster), with the parity line (and, for MoE, the ratio
  vLLM's tuned Triton kernel reaches, from ``ANCHORS.md``, that the issue asks us to beat);
* ``<table>_roofline.png``: achieved TFLOP/s against arithmetic intensity (FLOP per byte of the
  operands and the output, read once), under the H200's dense bf16 peak and HBM bandwidth; for MoE,
  whose cost at small T is reading the activated experts' weights, our time over that floor instead.

The benchmarks call :func:`write_plots` after writing their table when matplotlib is installed
(``pip install matplotlib``); without it they say so and write the table only.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

#: H200 SXM: dense bf16 tensor peak (FLOP/s) and HBM3e bandwidth (bytes/s), the datasheet's numbers
PEAK_FLOPS = 989e12
HBM_BYTES_PER_S = 4.8e12
#: the attention grid of bench/test_attention_bench.py (ANCHORS.md): tokens per batch x hidden
ATTENTION_TOKENS, ATTENTION_HIDDEN = 16384, 2048


def read_table(path: str | Path) -> list[dict[str, str]]:
    """The rows of the first markdown table in ``path`` as ``{header: cell}`` dicts.

    Raises:
        ValueError: the file has no markdown table (the message names the file).
    """
    lines = [ln.strip() for ln in Path(path).read_text().splitlines()]
    rows, head = [], None
    for ln in lines:
        if not ln.startswith("|"):
            if head is not None and rows:
                break
            continue
        cells = [c.strip() for c in ln.strip("|").split("|")]
        if head is None:
            head = cells
        elif set(ln.replace("|", "").strip()) <= {"-", ":", " "}:
            continue
        else:
            rows.append(dict(zip(head, cells)))
    if head is None or not rows:
        raise ValueError(f"{path}: no markdown table")
    return rows


def kind_of(rows: list[dict[str, str]]) -> str:
    """``gemm``, ``attention`` or ``moe`` from the table's header."""
    keys = set(rows[0])
    if {"M", "N", "K"} <= keys:
        return "gemm"
    if {"D", "S"} <= keys:
        return "attention"
    if "model" in keys:
        return "moe"
    raise ValueError(f"unknown benchmark table (header {sorted(keys)})")


def _f(x: str) -> float:
    try:
        return float(x.strip("`* "))
    except ValueError:
        return float("nan")


def points(rows: list[dict[str, str]], kind: str) -> list[dict]:
    """Per row: ``label``, ``ratio`` (baseline time / ours), and for gemm / attention ``tflops`` and
    ``intensity`` (FLOP / byte); for MoE ``floor_ratio`` (ours / weight floor) and ``vllm_ratio``."""
    out = []
    for r in rows:
        if kind == "gemm":
            m, n, k = (int(r[x]) for x in ("M", "N", "K"))
            flops, nbytes = 2.0 * m * n * k, 2.0 * (m * k + n * k + m * n)
            out.append({"label": f"{m}x{n}x{k}", "ratio": _f(r["ratio (cuBLAS time / ours)"]),
                        "tflops": _f(r["ours TFLOP/s"]), "base_tflops": _f(r["cuBLAS TFLOP/s"]),
                        "intensity": flops / nbytes})
        elif kind == "attention":
            d, s, causal = int(r["D"]), int(r["S"]), r["causal"] == "yes"
            tflops = _f(r["ours TFLOP/s"])
            flops = tflops * 1e12 * _f(r["ours ms"]) * 1e-3
            nbytes = 4 * ATTENTION_TOKENS * ATTENTION_HIDDEN * 2.0  # Q, K, V, O once
            out.append({"label": f"d{d} s{s}{' causal' if causal else ''}", "ratio": _f(r["cuDNN time / ours"]),
                        "tflops": tflops, "base_tflops": _f(r["cuDNN TFLOP/s"]), "intensity": flops / nbytes})
        else:
            need = r.get("speedup needed (ANCHORS vLLM ratio)", "-")
            out.append({"label": f"{r['model']} T{r['T']}", "ratio": _f(r["speedup"]),
                        "floor_ratio": _f(r["ours / floor"]), "vllm_ratio": _f(need) if need != "-" else None})
    return out


def write_plots(table: str | Path, kind: str | None = None, out_dir: str | Path | None = None) -> list[Path]:
    """Write the two plots of ``table`` (see the module doc); returns their paths.

    Raises:
        ImportError: matplotlib is not installed. ValueError: not a benchmark table.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = Path(table)
    rows = read_table(table)
    kind = kind or kind_of(rows)
    pts = points(rows, kind)
    out = Path(out_dir) if out_dir is not None else table.parent
    out.mkdir(parents=True, exist_ok=True)
    base = {"gemm": "cuBLAS", "attention": "cuDNN", "moe": "torch _grouped_mm layer"}[kind]
    paths = []

    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * len(pts) + 2), 4.2))
    xs = range(len(pts))
    ratios = [p["ratio"] for p in pts]
    ax.bar(xs, ratios, color=["#3a7d44" if r >= 1 else "#b5523b" for r in ratios])
    ax.axhline(1.0, color="black", lw=0.8)
    if kind == "moe":
        need = [p["vllm_ratio"] for p in pts]
        if any(v is not None for v in need):
            ax.scatter(list(xs), [v if v is not None else float("nan") for v in need], marker="_", s=300,
                       color="#1f4e9c", label="vLLM Triton's ratio (to beat)", zorder=3)
            ax.legend(loc="upper left", fontsize=8)
    ax.set_xticks(list(xs), [p["label"] for p in pts], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel(f"{base} time / our time")
    ax.set_title(f"{table.stem}: speed relative to {base} (> 1: faster)", fontsize=9)
    fig.tight_layout()
    paths.append(out / f"{table.stem}_ratio.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    if kind == "moe":
        ax.bar(xs, [p["floor_ratio"] for p in pts], color="#6b5b95")
        ax.axhline(1.0, color="black", lw=0.8)
        ax.axhline(1.15, color="#b5523b", lw=0.8, ls="--", label="1.15x (the issue's bar at T <= 256)")
        ax.set_xticks(list(xs), [p["label"] for p in pts], rotation=60, ha="right", fontsize=7)
        ax.set_ylabel("our time / activated-weight read at 4.3 TB/s")
        ax.set_title(f"{table.stem}: distance to the weight-read floor", fontsize=9)
        ax.legend(fontsize=8)
    else:
        lo = min(p["intensity"] for p in pts) / 2
        hi = max(p["intensity"] for p in pts) * 2
        grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
        ax.loglog(grid, [min(PEAK_FLOPS, HBM_BYTES_PER_S * x) / 1e12 for x in grid], color="black", lw=1,
                  label="H200 roofline (989 TFLOP/s, 4.8 TB/s)")
        ax.scatter([p["intensity"] for p in pts], [p["tflops"] for p in pts], label="ours", zorder=3)
        ax.scatter([p["intensity"] for p in pts], [p["base_tflops"] for p in pts], marker="x", label=base, zorder=3)
        ax.set_xlabel("arithmetic intensity (FLOP / byte, operands and output read once)")
        ax.set_ylabel("TFLOP/s")
        ax.set_title(f"{table.stem}: achieved vs peak", fontsize=9)
        ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(out / f"{table.stem}_roofline.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    return paths


def plot_after_bench(table: str | Path) -> None:
    """For the benchmarks' teardown: write the plots of their table, or say why not."""
    try:
        for path in write_plots(table):
            print(f"wrote {path}")
    except ImportError:
        print("no plots: matplotlib is not installed (pip install matplotlib)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("table", help="a benchmark's markdown table (ARGUS_BENCH_TABLE)")
    ap.add_argument("--kind", choices=("gemm", "attention", "moe"), default=None)
    ap.add_argument("--out", default=None, help="folder for the plots (default: the table's)")
    args = ap.parse_args(argv)
    try:
        paths = write_plots(args.table, args.kind, args.out)
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {args.table}: {exc}", file=sys.stderr)
        return 2
    except ImportError:
        print("error: matplotlib is not installed (pip install matplotlib)", file=sys.stderr)
        return 2
    for p in paths:
        print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
