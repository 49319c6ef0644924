"""``argus-cutlass tune moe``: measure the best candidates of the MoE space for one layer problem.

The candidates are the first ``--budget`` configurations of
:func:`argus_cutlass.kernels.moe.space.candidates` (the heuristic's configuration for the problem's T
first, then its one-knob neighbours: both walks' bands, the gather slices, the other bucket's tile,
the pipeline depths). They go through the orchestrator as one batch (:func:`argus_cutlass.generate.run_many`:
build, verify, render, one parallel compile, then on a Hopper GPU check against the fp32 layer and
time each), one line is printed per candidate, the fastest measured one is recorded in the user's
experience store under :func:`argus_cutlass.agent.store.moe_key` (the problem's power-of-two T
bucket; ``argus-cutlass moe`` and ``argus_cutlass.torch.moe`` then pick it up, source ``store``) and
its ``.cu`` is written. Everything goes to ``DIR/tune_moe.json``.

Without nvcc the run stops after rendering (statuses ``rendered``); without a usable GPU (or torch) after
compiling (statuses ``compiled``); nothing is recorded then.

Exit codes: 0 at least one candidate passed every stage that ran; 1 none did; 2 bad input (raised as
an :class:`~argus_cutlass.errors.ArgusError`, printed by the CLI).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from typing import Any

from argus_cutlass.agent.tune_attention import check_options
from argus_cutlass.settings import output_dir

RESULT_FILE = "tune_moe.json"


def _knobs(cfg: Any) -> str:
    return (f"m{cfg.tile_m} gu{cfg.gu_tile_n}x{cfg.gu_stages} dn{cfg.dn_tile_n}x{cfg.dn_stages} "
            f"bands {cfg.gu_band_m}/{cfg.dn_band_m} gather {cfg.gather_slices} epi {cfg.epi_n}")


def run_tune_moe(args: Any, say: Any = print, *, problem: Any, configs: list[Any] | None = None) -> int:
    """The ``tune moe`` command for the validated ``problem`` (an MoEProblem; args: budget, seed,
    workers, out, and optionally quiet); ``say`` prints a progress line; ``configs``: the candidates
    when the caller already has them (default :func:`~argus_cutlass.kernels.moe.space.candidates`).
    Returns the exit code."""
    from argus_cutlass.agent.store import DEFAULT_GPU, gpu_name, moe_key, record_moe_best
    from argus_cutlass.build.toolchain import find_nvcc
    from argus_cutlass.errors import ArgusError, ToolchainError
    from argus_cutlass.generate import Options, baseline, run_many, write_sources
    from argus_cutlass.kernels.moe.space import candidates

    check_options(args)
    out = output_dir(args.out)
    t0 = time.perf_counter()
    p = problem
    say(f"problem   moe T={p.tokens} E={p.experts} k={p.topk} H={p.hidden} I={p.ffn} {p.dtype}")
    if configs is None:
        configs = candidates(p, args.budget)   # each verified: about 0.3-0.5 s a candidate
    say(f"space     measuring {len(configs)} feasible candidates (the heuristic's first, then its one-knob "
        "neighbours)")

    stopped, reason = None, None
    try:
        find_nvcc()
        compile_ = True
    except ToolchainError as exc:
        compile_, stopped, reason = False, "render", exc.message
    options = Options(smt=None, compile=compile_, baseline=False, seed=args.seed, workers=args.workers)
    if compile_ and configs and not getattr(args, "quiet", False):
        print(f"compiling {len(configs)} candidates with nvcc, then measuring them (about 5-10 s a compile, "
              "in parallel, unless cached; Ctrl-C stops it; --quiet hides this line) ...",
              file=sys.stderr, flush=True)
    results = run_many(configs, p, options=options)
    if not compile_:
        for r in results:
            if "compile" in r.skipped:
                r.skipped["compile"] = reason or "nvcc not found"
    else:
        why = next((r.skipped["run"] for r in results if "run" in r.skipped), None)
        if why is not None and not any(r.ms is not None for r in results):
            stopped, reason = "compile", why

    rows = []
    for i, (cfg, r) in enumerate(zip(configs, results), 1):
        ms_text = f"{r.ms:.4f} ms" if r.ms is not None else "-"
        tf_text = f"{p.flops() / r.ms / 1e9:.1f} TFLOP/s" if r.ms else "-"
        line = f"[{i}/{len(configs)}] {r.status:<13} {ms_text:>11} {tf_text:>15}  {_knobs(cfg)}  {r.name or ''}"
        if r.error is not None:
            line += f"\n            {r.error.rule}: {str(r.error).splitlines()[0][:200]}"
        say(line)
        rows.append({
            "rank": i, "kernel": r.name, "config": cfg.model_dump(), "status": r.status, "ms": r.ms,
            "tflops": p.flops() / r.ms / 1e9 if r.ms else None,
            "error": {"rule": r.error.rule, "message": str(r.error)} if r.error is not None else None,
            "skipped": dict(r.skipped), "stage_seconds": dict(r.stage_seconds),
        })

    measured = [(r.ms, cfg, r) for cfg, r in zip(configs, results) if r.status == "ok" and r.ms is not None]
    best: dict[str, Any] | None = None
    recorded = False
    gpu = gpu_name() or DEFAULT_GPU
    base_ms = None
    if stopped == "render":
        say(f"no nvcc   {reason}; stopped after rendering (statuses 'rendered'); nothing measured or recorded")
    elif stopped == "compile":
        say(f"no GPU    {reason}; stopped after compiling (statuses 'compiled'); nothing measured or recorded")
    if measured:
        ms, cfg, r = min(measured, key=lambda m: m[0])
        try:
            base_ms = baseline(p)
        except ArgusError as exc:
            say(f"baseline  torch _grouped_mm layer skipped: {exc}")
        recorded = record_moe_best(p, cfg, ms, base_ms, gpu=gpu)
        cu, _ = write_sources(out, r.program, r.source or "")
        default_ms = results[0].ms if results and results[0].status == "ok" else None
        best = {"kernel": r.name, "config": cfg.model_dump(), "ms": ms, "grouped_mm_ms": base_ms,
                "heuristic_ms": default_ms, "cu": str(cu)}
        line = f"best      {r.name}: {ms:.4f} ms ({p.flops() / ms / 1e9:.1f} TFLOP/s)"
        if default_ms:
            line += f" (the heuristic's {default_ms:.4f} ms)"
        if base_ms:
            line += f"; torch _grouped_mm layer {base_ms:.4f} ms ({base_ms / ms:.2f}x)"
        say(line)
        say(f"store     {'recorded' if recorded else 'kept the faster stored entry'} under {moe_key(gpu, p)}")
    record = {
        "problem": dataclasses.asdict(p), "budget": args.budget, "stopped_after": stopped, "reason": reason,
        "candidates": rows, "best": best, "grouped_mm_ms": base_ms, "recorded": recorded,
        "store_key": moe_key(gpu, p), "seconds": round(time.perf_counter() - t0, 2),
    }
    path = out / RESULT_FILE
    path.write_text(json.dumps(record, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    say(f"wrote     {path}")
    return 0 if any(r.ok for r in results) else 1
