"""``argus-cutlass tune attention``: measure the best candidates of the attention space for one problem.

The candidates are the first ``--budget`` configurations of
:func:`argus_cutlass.kernels.attention.space.candidates` (FA3's configuration first, then the analytic
order). They go through the orchestrator as one batch (:func:`argus_cutlass.generate.run_many`: build,
verify, render, one parallel compile, then on a Hopper GPU check and time each), one line is printed per
candidate, the fastest measured one is recorded in the user's experience store under
:func:`argus_cutlass.agent.store.attention_key` (``argus-cutlass attention`` then picks it up, source
``store``) and its ``.cu`` is written. Everything goes to ``DIR/tune_attention.json``.

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

from argus_cutlass.errors import ProblemError
from argus_cutlass.settings import output_dir

RESULT_FILE = "tune_attention.json"


def check_options(args: Any) -> None:
    """Refuse a budget or a worker count below 1."""
    if args.budget < 1:
        raise ProblemError("tune.budget", f"--budget {args.budget}: need at least 1 candidate")
    if getattr(args, "workers", None) is not None and args.workers < 1:
        raise ProblemError("tune.workers", f"--workers {args.workers}: need at least 1 compile process")


def _knobs(cfg: Any) -> str:
    from argus_cutlass.kernels.attention.space import knob_values

    v = knob_values(cfg)
    return (f"{v['tile_m']}x{v['tile_n']} s{v['stages']} {'pingpong' if v['pingpong'] else 'free'} "
            f"{v['scheduler']}")


def run_tune_attention(args: Any, say: Any = print, *, problem: Any) -> int:
    """The ``tune attention`` command for the validated ``problem`` (an AttentionProblem; args:
    budget, seed, workers, out, and optionally quiet); ``say`` prints a progress line (the CLI passes its
    own printer). Returns the exit code."""
    _say = say
    from argus_cutlass.agent.store import DEFAULT_GPU, attention_key, gpu_name, record_attention_best
    from argus_cutlass.build.toolchain import find_nvcc
    from argus_cutlass.errors import ArgusError, ToolchainError
    from argus_cutlass.generate import Options, baseline, run_many
    from argus_cutlass.kernels.attention.space import AttentionSpace, candidates, estimate

    check_options(args)
    out = output_dir(args.out)
    t0 = time.perf_counter()
    space = AttentionSpace.for_problem(problem)
    ranked = candidates(problem)
    configs = ranked[: args.budget]
    p = problem
    _say(f"problem   attention batch={p.batch} heads={p.heads}/{p.kv_heads} seqlen_q={p.seqlen_q} "
         f"seqlen_k={p.seqlen_k} head_dim={p.head_dim} {p.dtype}{' causal' if p.causal else ''}")
    _say(f"space     {space.size} configurations, {len(ranked)} distinct feasible; measuring the first "
         f"{len(configs)} (FA3's first, then the analytic order)")

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
    results = run_many(configs, problem, options=options)
    if not compile_:
        for r in results:
            if "compile" in r.skipped:
                r.skipped["compile"] = reason or "nvcc not found"
    else:
        why = next((r.skipped["run"] for r in results if "run" in r.skipped), None)
        if why is not None and not any(r.ms is not None for r in results):
            stopped, reason = "compile", why

    first = estimate(configs[0], problem) if configs else 1.0
    rows = []
    for i, (cfg, r) in enumerate(zip(configs, results), 1):
        tflops = p.flops / r.ms / 1e9 if r.ms else None
        ms_text = f"{r.ms:.4f} ms" if r.ms is not None else "-"
        tf_text = f"{tflops:.1f} TFLOP/s" if tflops is not None else "-"
        line = f"[{i}/{len(configs)}] {r.status:<13} {ms_text:>11} {tf_text:>15}  {_knobs(cfg)}  {r.name or ''}"
        if r.error is not None:
            line += f"\n            {r.error.rule}: {str(r.error).splitlines()[0][:200]}"
        _say(line)
        rows.append({
            "rank": i, "kernel": r.name, "config": cfg.model_dump(), "status": r.status,
            "estimate": round(estimate(cfg, problem) / first, 4) if first else None,
            "ms": r.ms, "tflops": tflops,
            "error": {"rule": r.error.rule, "message": str(r.error)} if r.error is not None else None,
            "skipped": dict(r.skipped), "stage_seconds": dict(r.stage_seconds),
        })

    measured = [(r.ms, cfg, r) for cfg, r in zip(configs, results) if r.status == "ok" and r.ms is not None]
    best: dict[str, Any] | None = None
    recorded = False
    gpu = gpu_name() or DEFAULT_GPU
    cudnn_ms = None
    if stopped == "render":
        _say(f"no nvcc   {reason}; stopped after rendering (statuses 'rendered'); nothing measured or recorded")
    elif stopped == "compile":
        _say(f"no GPU    {reason}; stopped after compiling (statuses 'compiled'); nothing measured or recorded")
    if measured:
        ms, cfg, r = min(measured, key=lambda m: m[0])
        try:
            cudnn_ms = baseline(problem)
        except ArgusError as exc:
            _say(f"cuDNN     baseline skipped: {exc}")
        recorded = record_attention_best(problem, cfg, ms, cudnn_ms, gpu=gpu)
        from argus_cutlass.generate import write_sources

        cu, _ = write_sources(out, r.program, r.source or "")  # the .cu and its .h
        best = {"kernel": r.name, "config": cfg.model_dump(), "ms": ms, "tflops": p.flops / ms / 1e9,
                "cudnn_ms": cudnn_ms, "cu": str(cu)}
        line = f"best      {r.name}: {ms:.4f} ms ({p.flops / ms / 1e9:.1f} TFLOP/s)"
        if cudnn_ms:
            line += f"; cuDNN {cudnn_ms:.4f} ms (ratio cuDNN/ours {cudnn_ms / ms:.3f})"
        _say(line)
        _say(f"store     {'recorded' if recorded else 'kept the faster stored entry'} under "
             f"{attention_key(gpu, problem)}")
    record = {
        "problem": dataclasses.asdict(problem), "budget": args.budget,
        "space": {"head_dim": space.head_dim, "causal": space.causal, "varlen": space.varlen, "dtype": space.dtype,
                  "size": space.size, "feasible": len(ranked)},
        "stopped_after": stopped, "reason": reason, "candidates": rows, "best": best, "cudnn_ms": cudnn_ms,
        "recorded": recorded, "store_key": attention_key(gpu, problem),
        "seconds": round(time.perf_counter() - t0, 2),
    }
    path = out / RESULT_FILE
    path.write_text(json.dumps(record, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    _say(f"wrote     {path}")
    return 0 if any(r.ok for r in results) else 1
