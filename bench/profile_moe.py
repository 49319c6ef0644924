"""Per-kernel time of MoE layers on a Hopper GPU (torch.profiler), for the profile RESULTS.md asks for.

    python3 bench/profile_moe.py --out OUTDIR [--cells mixtral:8192,qwen3-30b-a3b:16] [--iters 10]
    ncu --profile-from-start off --section SpeedOfLight --section MemoryWorkloadAnalysis \\
        python3 bench/profile_moe.py --out OUTDIR --cells qwen3-30b-a3b:16 --ncu

Each cell is ``model:T`` (``MoEProblem.for_model``) or ``e<E>k<k>h<H>i<I>:T`` (any shape, e.g.
``e128k8h2048i3072:16``) with the orchestrator's configuration
(``generate.configure``; ``--unbanded`` sets both band fields to 0, the walk of session 16, keeping
the other fields; ``--unroll 1,4`` profiles each cell with each gather unroll, ``--lookahead 0,1`` with and
without the grouped GEMMs' work lookahead, ``--pdl 0,1`` with and without programmatic dependent launch;
``--vary FIELD=V1,V2`` any MoEConfig field, repeatable, a cross product; a combination the configuration model or
the verifier refuses is skipped and named).
The layers are built in
one parallel batch (``generate.build_jobs``), warmed up, then run ``--iters`` times with a 256 MB buffer
written between runs (L2 flushed: every run reads its weights from HBM; ``--flush read`` reads the buffer
instead, leaving clean lines in L2 where writing it leaves dirty ones the next kernel's reads must write back);
the profiler's device time per
kernel (routing count / scan / permute, gate+up GEMM, down GEMM, combine, and the flush itself) is
averaged, beside the layer's end-to-end time (CUDA events, median of ``--iters`` runs, each after a
flush): their difference is launch gaps and bubbles (with ``pdl`` the kernels overlap and a kernel's time
includes its wait for the previous one, so the per-kernel sum can exceed the layer time: compare the layer
times across pdl on / off, not the sums). Writes ``OUTDIR/moe_profile.json`` and prints a
table. ``--ncu``: one run of each layer between ``cudaProfilerStart`` / ``Stop`` for ncu's
``--profile-from-start off``, nothing else. Needs torch and a Hopper GPU.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for moe_profile.json")
    ap.add_argument("--cells", default="mixtral:8192,qwen3-30b-a3b:16,deepseek-v2-lite:16,qwen3-30b-a3b:2048",
                    help="comma-separated model:T (models: MoEProblem.for_model) or eEkKhHiI:T (any shape)")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--unbanded", action="store_true", help="gu_band_m = dn_band_m = 0 (the unbanded walk; --bands 0x0)")
    ap.add_argument("--bands", default="",
                    help="comma-separated GUxDN band pairs (e.g. 0x0,1x1,2x2): each cell is profiled with each")
    ap.add_argument("--unroll", default="",
                    help="comma-separated gather_unroll values (e.g. 1,4): each cell is profiled with each "
                         "(--vary gather_unroll=...)")
    ap.add_argument("--lookahead", default="",
                    help="comma-separated work_lookahead values (0,1): each cell is profiled with each (a "
                         "lookahead takes the static walk: dynamic_walk off)")
    ap.add_argument("--pdl", default="",
                    help="comma-separated pdl values (0: off, 1: programmatic dependent launch, 4 / 8 / 16: pdl with "
                         "that many k-tiles of weights prefetched before the wait; a prefetch takes the static walk "
                         "and the three routing kernels): each cell with each")
    ap.add_argument("--vary", action="append", default=[], metavar="FIELD=V1,V2",
                    help="any MoEConfig field and comma-separated values (e.g. gu_tile_n=64,128,256; repeatable): each "
                         "cell with each value (cross product over --vary options); a combination the verifier's "
                         "feasibility check refuses is skipped and named")
    ap.add_argument("--heuristic", action="store_true",
                    help="every cell with kernels.moe.heuristics.default_config (no shipped entry), so cells of "
                         "different shapes run one configuration rule")
    ap.add_argument("--flush", default="zero", choices=("zero", "read"),
                    help="how L2 is flushed before each run: zero (write 256 MB, triton.testing.do_bench's way and "
                    "every bench of this project: L2 is left full of dirty lines the next kernel's reads write back) "
                    "or read (read 256 MB: L2 is left full of clean lines)")
    ap.add_argument("--ncu", action="store_true", help="one run per layer inside cudaProfilerStart/Stop")
    args = ap.parse_args(argv)

    from argus_cutlass.errors import ArgusError
    from argus_cutlass.generate import build_jobs, configure
    from argus_cutlass.kernels.moe.check import timed_counts, timed_inputs

    try:
        cells = [(m, int(t)) for m, t in (c.split(":") for c in args.cells.split(",") if c)]
        problems = [cell_problem(m, t) for m, t in cells]
        for p in problems:
            p.validate()   # a bad shape is refused here, naming the rule, not inside the nvcc batch
    except (ValueError, ArgusError) as exc:
        ap.error(f"--cells {args.cells!r}: expected model:T or eEkKhHiI:T, comma-separated ({exc})")
    configs = [configure(p, heuristic=args.heuristic)[0] for p in problems]
    if args.unbanded:   # the same as --bands 0x0
        args.bands = "0x0"
    if args.bands:
        try:
            bands = [tuple(int(v) for v in b.split("x")) for b in args.bands.split(",") if b]
            assert all(len(b) == 2 for b in bands)
        except (ValueError, AssertionError):
            ap.error(f"--bands {args.bands!r}: expected GUxDN[,GUxDN...] (integers, e.g. 0x0,1x1)")
        cells = [c for c in cells for _ in bands]
        problems = [p for p in problems for _ in bands]
        configs = [c.replace(gu_band_m=g, dn_band_m=d) for c in configs for g, d in bands]
    if args.pdl:   # pdl and weight_prefetch together (MoEConfig.with_pdl: pdl off takes the combine handoff off with
        # it, a weight prefetch the fused routing and the dynamic walk; one field each would be a refused combination)
        try:
            values = [int(u) for u in args.pdl.split(",") if u]
            if not set(values) <= {0, 1, 4, 8, 16}:
                raise ValueError(f"pdl values {values}")
            configs_v = [c.with_pdl(bool(v), v if v > 1 else 0) for c in configs for v in values]
        except ValueError as exc:
            ap.error(f"--pdl {args.pdl!r}: expected values of 0, 1, 4, 8, 16 ({exc.__class__.__name__})")
        cells = [c for c in cells for _ in values]
        problems = [p for p in problems for _ in values]
        configs = configs_v
    if args.lookahead:   # a lookahead takes the static walk (MoEConfig.with_lookahead), as a prefetch does above
        try:
            values = [int(u) for u in args.lookahead.split(",") if u]
            if not values or not set(values) <= {0, 1}:
                raise ValueError(f"lookahead values {values}")
        except ValueError as exc:
            ap.error(f"--lookahead {args.lookahead!r}: expected values of 0, 1 ({exc.__class__.__name__})")
        configs = [c.with_lookahead(v) for c in configs for v in values]
        cells = [c for c in cells for _ in values]
        problems = [p for p in problems for _ in values]
    # --unroll: one MoEConfig field, the same cross product as --vary
    args.vary = ([f"gather_unroll={args.unroll}"] if args.unroll else []) + args.vary
    if args.vary:
        from argus_cutlass.kernels.fields import field_value

        from argus_cutlass.kernels.moe.config import MoEConfig
        from argus_cutlass.kernels.moe.space import feasible

        fields = [spec.partition("=")[0] for spec in args.vary]
        # each element: (cell, problem, config or None, why refused); a combination MoEConfig or the verifier
        # refuses is skipped and named, never the end of the run
        rows = [(c, p, cfg, "") for c, p, cfg in zip(cells, problems, configs)]
        for spec, field in zip(args.vary, fields):
            values_raw = [v for v in spec.partition("=")[2].split(",") if v.strip()]
            try:
                if not values_raw:
                    raise ValueError("expected FIELD=V1,V2 with at least one value")
                values = [field_value(MoEConfig, field, v) for v in values_raw]   # typed by MoEConfig's field
            except ValueError as exc:
                ap.error(f"--vary {spec!r}: {exc}")
            grown = []
            for cell, p, cfg, why in rows:
                for v in values:
                    if cfg is None:
                        grown.append((cell, p, None, why))
                        continue
                    try:
                        grown.append((cell, p, cfg.replace(**{field: v}), ""))
                    except (ValueError, ArgusError) as exc:   # e.g. weight_prefetch without pdl
                        grown.append((cell, p, None, f"{field}={v}: {str(exc).splitlines()[0][:200]}"))
            rows = grown
        kept = []
        for cell, p, cfg, why in rows:
            if cfg is not None and not feasible(cfg, p):
                why = (f"{ {f: getattr(cfg, f) for f in fields} }: kernels.moe.space.feasible refuses it "
                       "(the verifier: e.g. shared memory)")
                cfg = None
            if cfg is None:
                print(f"-- skipped {cell[0]}:{cell[1]} {why}")
            else:
                kept.append((cell, p, cfg))
        cells, problems, configs = [r[0] for r in kept], [r[1] for r in kept], [r[2] for r in kept]
        if not configs:
            ap.error(f"--vary {' '.join(args.vary)}: every combination was refused (above)")
    # one parallel nvcc batch (the disk cache then serves moe_kernel below), unbanded layers too
    build_jobs(list(zip(configs, problems)))
    import torch   # the runs (the options above are checked without it)

    from argus_cutlass.api import moe_kernel

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    flush_buf = torch.ones(256 << 20, dtype=torch.uint8, device="cuda")
    flush_sink = torch.empty(1, dtype=torch.int64, device="cuda")

    def flush() -> None:   # --flush: write 256 MB (dirty L2) or read them (clean L2; a one-element result)
        if args.flush == "zero":
            flush_buf.zero_()
        else:
            flush_sink.copy_(flush_buf.view(torch.int64).sum().view(1))
    result = {}
    for (model, tokens), p, cfg in zip(cells, problems, configs):
        lib = moe_kernel(p, cfg)
        x, ids, w, w13, w2 = timed_inputs(p)
        ws = torch.empty(lib.workspace_bytes(tokens), dtype=torch.uint8, device="cuda")

        def run() -> None:
            lib.forward(x, ids, w, w13, w2, workspace=ws, padding="unchecked")

        for _ in range(3):
            run()
        torch.cuda.synchronize()
        if args.ncu:
            torch.cuda.profiler.start()
            run()
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
            continue
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(args.iters):
                flush()
                run()
            torch.cuda.synchronize()
        # the layer end to end (CUDA events around each run, L2 flushed before it, outside the profiler): what
        # the per-kernel sum below misses is launch gaps and bubbles between the layer's kernels
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(args.iters)]
        for a, b in ev:
            flush()
            a.record()
            run()
            b.record()
        torch.cuda.synchronize()
        layer_us = sorted(a.elapsed_time(b) * 1e3 for a, b in ev)[len(ev) // 2]
        per: dict[str, list[float]] = collections.defaultdict(list)
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                per[_short(e.name, lib.name)].append(e.device_time_total)
        rows = {k: {"calls": len(v), "mean_us": sum(v) / len(v)} for k, v in per.items()}
        layer_sum = sum(r["mean_us"] * r["calls"] for k, r in rows.items() if k.startswith(("gu::", "dn::", "ns::"))) / args.iters
        # keyed by the layer's name (unique per configuration and problem), so no two profiled layers collide
        result[f"{model}:{tokens}:{lib.name}"] = {
            "kernel": lib.name, "config": cfg.model_dump(), "kernels": rows, "layer_us": layer_us, "flush": args.flush,
            "kernels_sum_us": layer_sum}
        print(f"== {model} T={tokens} bands {cfg.gu_band_m}x{cfg.dn_band_m} unroll {cfg.gather_unroll} "
              f"lookahead {cfg.work_lookahead} pdl {int(cfg.pdl)} prefetch {cfg.weight_prefetch} flush {args.flush} {lib.name}: "
              f"layer {layer_us:.1f} us (events, median), its kernels {layer_sum:.1f} us (profiler)")
        # the grouped GEMMs' activated-weight throughput (each activated expert's W13 / W2 read once)
        active = p.active_experts(timed_counts(p))   # the routing of timed_inputs above
        w2_bytes = active * p.hidden * p.ffn * p.element_bytes
        wbytes = {"gu::": 2 * w2_bytes, "dn::": w2_bytes}
        for k, r in sorted(rows.items(), key=lambda kv: -kv[1]["mean_us"] * kv[1]["calls"]):
            # (with pdl a kernel is timed from its early launch, its wait included: no rate then)
            tput = next((f"  {b / r['mean_us'] / 1e6:.2f} TB/s of activated weights ({active} experts)"
                         for pre, b in wbytes.items() if k.startswith(pre) and r["mean_us"] > 0 and not cfg.pdl), "")
            print(f"   {r['mean_us']:9.1f} us x{r['calls']:3d}  {k}{tput}")
    if not args.ncu:
        (out / "moe_profile.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


def cell_problem(model: str, tokens: int):
    """The MoE problem of a ``--cells`` entry: a model of ``MoEProblem.for_model`` or ``e<E>k<k>h<H>i<I>``.

    >>> cell_problem("e128k8h2048i3072", 16).ffn, cell_problem("mixtral", 16).experts
    (3072, 8)
    """
    import re

    from argus_cutlass.kernels.moe.problem import MoEProblem

    m = re.fullmatch(r"e(\d+)k(\d+)h(\d+)i(\d+)", model)
    if m:
        e, k, h, i = (int(v) for v in m.groups())
        return MoEProblem(tokens, e, k, h, i)
    return MoEProblem.for_model(model, tokens)


def _short(name: str, layer: str) -> str:
    """``gu::gemm_kernel`` for ``<layer>_gu::gemm_kernel(...)``; torch's own kernels keep 60 chars."""
    if name.startswith(layer):
        return name[len(layer):].lstrip("_").split("(")[0]
    return name[:60]


if __name__ == "__main__":
    sys.exit(main())
