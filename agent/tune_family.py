"""The measuring run shared by ``argus-cutlass tune attention`` and ``tune moe``: one family's ranked
candidates through the orchestrator as one batch (:func:`argus_cutlass.generate.run_many`: build, verify,
render, one parallel compile, then on a Hopper GPU check and time each), a line per candidate, the
fastest measured one (the first, the heuristic's, unless another beats it by
:data:`MIN_GAIN`) recorded in the user's experience store (the family's ``record_*_best``) with the
vendor baseline's time beside it, its ``.cu`` / ``.h`` written, everything in ``DIR/<result_file>``.

Without nvcc the run stops after rendering (statuses ``rendered``); without a usable GPU (or torch) after
compiling (statuses ``compiled``); nothing is recorded then. The GEMM command (:mod:`.tune`) searches
adaptively with a policy instead and does not use this module.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from argus_cutlass.errors import ProblemError
from argus_cutlass.settings import check_output_path, check_seed, check_workers, output_dir


def check_options(args: Any) -> None:
    """Refuse a budget or a worker count below 1, a seed outside 0 .. 2**64-1 and an ``--out`` that is
    empty or a file, before any candidate is built.

    Raises:
        ProblemError: ``tune.budget`` / ``tune.workers`` / ``cli.seed`` / ``cli.out``.
    """
    if args.budget < 1:
        raise ProblemError("tune.budget", f"--budget {args.budget}: need at least 1 candidate")
    check_workers(getattr(args, "workers", None))
    check_seed(getattr(args, "seed", 0))
    check_output_path(args.out)


@dataclasses.dataclass(frozen=True)
class Family:
    """What differs between the families' tune commands.

    Attributes:
        result_file: the JSON written under ``--out``.
        knobs: one candidate's knobs as a short text (the progress line).
        baseline_name: the vendor baseline in the lines (``cuDNN``, ``torch _grouped_mm layer``).
        baseline_key: its time's key in the JSON (``cudnn_ms``, ``grouped_mm_ms``).
        record_best: ``(problem, cfg, ms, baseline_ms, gpu) -> bool`` (the store's ``record_*_best``).
        store_key: ``(gpu, problem) -> str`` (the store's key function).
        extra_row: more fields of a candidate's JSON row, ``(cfg) -> dict`` (default none).
        heuristic: ``(problem) -> config``, the family's untuned choice: the first candidate is kept
            under :data:`MIN_GAIN` only when it is this configuration (None: the first candidate is
            taken to be it).
    """

    result_file: str
    knobs: Callable[[Any], str]
    baseline_name: str
    baseline_key: str
    record_best: Callable[..., bool]
    store_key: Callable[[str, Any], str]
    extra_row: Callable[[Any], dict[str, Any]] = lambda cfg: {}
    heuristic: Callable[[Any], Any] | None = None


#: a candidate replaces the first one (the heuristic's configuration) only when it is at least this
#: fraction faster: the same MoE layer timed in two processes moved by 2-3 % (bench/RESULTS.md, session
#: 19: Qwen3 T=16 0.254 / 0.260 ms, Mixtral T=16 0.745 / 0.720 ms), so a smaller win is not shown and
#: would ship a configuration for noise.
MIN_GAIN = 0.02


def pick_best(ms: Sequence[float], first_is_heuristic: bool, min_gain: float = MIN_GAIN) -> int:
    """Index of the configuration to record among measured times ``ms`` (milliseconds, in candidate
    order): the fastest, unless ``first_is_heuristic`` and it beats ``ms[0]`` by less than ``min_gain``,
    then 0.

    >>> pick_best([1.00, 0.99, 1.2], True), pick_best([1.00, 0.97], True), pick_best([1.00, 0.99], False)
    (0, 1, 1)

    Raises:
        ValueError: ``ms`` is empty.
    """
    if not ms:
        raise ValueError("pick_best: no measured candidate")
    best = min(range(len(ms)), key=lambda i: ms[i])
    if first_is_heuristic and ms[best] > ms[0] * (1.0 - min_gain):
        return 0
    return best


def run_tune_family(args: Any, say: Callable[[str], None], problem: Any, configs: Sequence[Any], flops: float,
                    family: Family, record_extra: dict[str, Any], t0: float) -> int:
    """Measure ``configs`` of ``problem`` (``flops`` per run) and record the fastest (module docstring);
    ``args``: budget, seed, workers, out, and optionally quiet; ``record_extra``: the family's own fields
    of the JSON record. Returns the exit code: 0 when a candidate passed every stage that ran, else 1."""
    from argus_cutlass.agent.store import DEFAULT_GPU, gpu_name
    from argus_cutlass.build.toolchain import find_nvcc
    from argus_cutlass.errors import ArgusError, ToolchainError
    from argus_cutlass.generate import Options, baseline, run_many, write_sources

    out = output_dir(args.out)
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
    results = run_many(list(configs), problem, options=options)
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
        tflops = flops / r.ms / 1e9 if r.ms else None
        ms_text = f"{r.ms:.4f} ms" if r.ms is not None else "-"
        tf_text = f"{tflops:.1f} TFLOP/s" if tflops is not None else "-"
        line = f"[{i}/{len(configs)}] {r.status:<13} {ms_text:>11} {tf_text:>15}  {family.knobs(cfg)}  {r.name or ''}"
        if r.error is not None:
            line += f"\n            {r.error.rule}: {str(r.error).splitlines()[0][:200]}"
        say(line)
        rows.append({
            "rank": i, "kernel": r.name, "config": cfg.model_dump(), "status": r.status, **family.extra_row(cfg),
            "ms": r.ms, "tflops": tflops,
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
        first_is_heuristic = results[0] is measured[0][2] and (
            family.heuristic is None or configs[0] == family.heuristic(problem))
        ms, cfg, r = measured[pick_best([m[0] for m in measured], first_is_heuristic)]
        try:
            base_ms = baseline(problem)
        except ArgusError as exc:
            say(f"baseline  {family.baseline_name} skipped: {exc}")
        recorded = family.record_best(problem, cfg, ms, base_ms, gpu=gpu)
        cu, _ = write_sources(out, r.program, r.source or "")  # the .cu and its .h
        first_ms = results[0].ms if results[0].status == "ok" else None
        best = {"kernel": r.name, "config": cfg.model_dump(), "ms": ms, "tflops": flops / ms / 1e9,
                family.baseline_key: base_ms, "first_candidate_ms": first_ms, "cu": str(cu)}
        line = f"best      {r.name}: {ms:.4f} ms ({flops / ms / 1e9:.1f} TFLOP/s)"
        if first_ms and r is not results[0]:
            line += f" (the first candidate's {first_ms:.4f} ms)"
        elif (fastest := min(m[0] for m in measured)) < ms:
            line += f" (kept: the fastest other candidate, {fastest:.4f} ms, is less than {MIN_GAIN:.0%} faster)"
        if base_ms:
            line += f"; {family.baseline_name} {base_ms:.4f} ms (its time / ours {base_ms / ms:.3f})"
        say(line)
        say(f"store     {'recorded' if recorded else 'kept the faster stored entry'} under "
            f"{family.store_key(gpu, problem)}")
    record = {
        "problem": dataclasses.asdict(problem), "budget": args.budget, **record_extra,
        "stopped_after": stopped, "reason": reason, "candidates": rows, "best": best, family.baseline_key: base_ms,
        "recorded": recorded, "store_key": family.store_key(gpu, problem),
        "seconds": round(time.perf_counter() - t0, 2),
    }
    path = out / family.result_file
    path.write_text(json.dumps(record, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    say(f"wrote     {path}")
    return 0 if any(r.ok for r in results) else 1
