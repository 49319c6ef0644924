"""Tune the MoE benchmark grid on a Hopper GPU and write the entries shipped in ``agent/tuned_h200.json``.

    python3 bench/tune_moe_grid.py --out OUTDIR [--budget 6] [--cells mixtral:256,qwen3-30b-a3b:16]
    python3 bench/tune_moe_grid.py --merge OUTDIR/tuned_moe.json   # on the development machine

For every cell of ``bench/test_moe_bench.py``'s grid (the three ANCHORS models x T in {16, 256, 2048,
8192}, bf16): the first ``--budget`` candidates of :func:`argus_cutlass.kernels.moe.space.candidates`
(the heuristic's configuration first, then its one-knob neighbours) of every cell are generated,
verified and compiled in one parallel batch (:func:`argus_cutlass.generate.build_jobs`), then each cell
runs ``argus-cutlass tune moe`` (:func:`argus_cutlass.agent.tune_moe.run_tune_moe`: each candidate
checked against the fp32 layer with its output poisoned, then timed; the torch ``_grouped_mm`` layer
timed beside the best) with the experience store under ``OUTDIR/cache``. Writes
``OUTDIR/tuned_moe.json`` (the store's MoE entries, the format of
:func:`argus_cutlass.agent.store.moe_entry`) and ``OUTDIR/tuned_moe.md`` (per cell: every candidate's
time, the heuristic's, the winner).

``--merge FILE`` puts FILE's MoE entries into ``agent/tuned_h200.json`` (an entry of the same key is
replaced; GEMM and attention entries are kept) and exits; it needs no GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import types
from pathlib import Path

SHIPPED = Path(__file__).resolve().parents[1] / "agent" / "tuned_h200.json"
TOKENS = (16, 256, 2048, 8192)


def merge(path: Path, shipped: Path = SHIPPED) -> int:
    """Replace / add ``path``'s MoE entries (its ``entries``: a list, or a user store's key -> entry
    dict) in ``shipped``; returns how many were written.

    Raises:
        ValueError: ``path`` is not a JSON object with ``entries``.
    """
    try:
        entries = json.loads(path.read_text())["entries"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a tuned_moe.json / experience store (a JSON object with 'entries'): "
                         f"{exc}") from None
    if isinstance(entries, dict):
        entries = list(entries.values())
    from argus_cutlass.agent.store import merge_entries

    new = [e for e in entries if isinstance(e, dict) and e.get("kernel") == "moe" and e.get("key")]
    shipped.write_text(json.dumps(merge_entries(json.loads(shipped.read_text()), new), indent=1) + "\n")
    return len(new)


def write_results(out: Path, lines: list[str]) -> list[dict]:
    """Write ``out/tuned_moe.json`` (the MoE entries of the run's experience store) and ``out/tuned_moe.md``
    (``lines``); returns the entries."""
    from argus_cutlass.agent.store import ExperienceStore

    entries = [e for e in ExperienceStore().read()["entries"].values() if e.get("kernel") == "moe"]
    (out / "tuned_moe.json").write_text(json.dumps({"entries": entries}, indent=1) + "\n")
    (out / "tuned_moe.md").write_text("\n".join(lines) + "\n")
    return entries


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="folder for tuned_moe.json, tuned_moe.md, the store and the best .cu files")
    ap.add_argument("--budget", type=int, default=6, help="candidates per cell (default 6)")
    ap.add_argument("--cells", default="", help="comma-separated model:T (default: the bench grid)")
    ap.add_argument("--merge", default=None, metavar="FILE", help="merge FILE's MoE entries into agent/tuned_h200.json")
    args = ap.parse_args(argv)
    if args.merge:
        if not Path(args.merge).is_file():
            ap.error(f"--merge {args.merge}: no such file")
        try:
            n = merge(Path(args.merge))
        except ValueError as exc:
            ap.error(f"--merge: {exc}")
        print(f"merged {n} MoE entries into {SHIPPED}")
        return 0
    if not args.out:
        ap.error("--out is required (or --merge FILE)")
    if args.budget < 1:
        ap.error(f"--budget {args.budget}: need at least 1 candidate per cell")
    out = Path(args.out).resolve()
    os.environ["ARGUS_CACHE_DIR"] = str(out / "cache")   # the store and the kernel cache of this run

    from argus_cutlass.agent.tune_moe import run_tune_moe
    from argus_cutlass.errors import ArgusError
    from argus_cutlass.generate import build_jobs
    from argus_cutlass.kernels.moe.problem import MODEL_SHAPES, MoEProblem
    from argus_cutlass.kernels.moe.space import candidates

    if args.cells:
        try:
            cells = [(m, int(t)) for m, t in (c.split(":") for c in args.cells.split(",") if c)]
        except ValueError:
            ap.error(f"--cells {args.cells!r}: expected model:T[,model:T...]")
    else:
        cells = [(m, t) for m in sorted(MODEL_SHAPES) for t in TOKENS]
    try:
        problems = [MoEProblem.for_model(m, t).validate() for m, t in cells]
    except ArgusError as exc:
        ap.error(f"--cells {args.cells!r}: {exc}")
    t0 = time.perf_counter()
    per_cell = [candidates(p, args.budget) for p in problems]
    print(f"planned {sum(map(len, per_cell))} candidates in {time.perf_counter() - t0:.0f} s", flush=True)
    jobs = [(c, p) for p, cs in zip(problems, per_cell) for c in cs]
    print(f"building {len(jobs)} layers for {len(cells)} cells in one parallel batch ...", flush=True)
    t0 = time.perf_counter()
    build_jobs(jobs)
    print(f"built in {time.perf_counter() - t0:.0f} s", flush=True)
    lines = ["| model | T | candidate | status | ms | config |", "|---|---|---|---|---|---|"]
    entries: list[dict] = []
    for (model, tokens), p, cs in zip(cells, problems, per_cell):
        cell_out = out / f"{model}_t{tokens}"
        ns = types.SimpleNamespace(budget=args.budget, seed=0, workers=None, out=str(cell_out), quiet=True)
        run_tune_moe(ns, say=lambda s, m=model, t=tokens: print(f"{m} T={t}: {s}", flush=True), problem=p,
                     configs=cs)
        data = json.loads((cell_out / "tune_moe.json").read_text())
        best = (data.get("best") or {}).get("kernel")
        for c in data["candidates"]:
            cfg = c["config"]
            label = (f"m{cfg['tile_m']} gu{cfg['gu_tile_n']}x{cfg['gu_stages']} dn{cfg['dn_tile_n']}x{cfg['dn_stages']} "
                     f"b{cfg['gu_band_m']}x{cfg['dn_band_m']} g{cfg['gather_slices']} epi{cfg['epi_n']}")
            ms = f"{c['ms']:.4f}" if c["ms"] else "-"
            mark = (" (heuristic)" if c["rank"] == 1 else "") + (" (best)" if c["kernel"] == best else "")
            lines.append(f"| {model} | {tokens} | {c['rank']}{mark} | {c['status']} | {ms} | {label} |")
        entries = write_results(out, lines)   # after every cell: a run cut short keeps the cells it finished
    print("\n".join(lines))
    print(f"wrote {out / 'tuned_moe.json'} ({len(entries)} entries) and {out / 'tuned_moe.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
