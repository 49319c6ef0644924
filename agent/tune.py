"""``argus-cutlass tune gemm``: search configurations for one GEMM shape on the GPU.

Writes to ``--out``:

* ``<kernel>.cu``: the best verified, measured kernel;
* ``tune_<M>x<N>x<K>_<dtype>_<out>_<layout>.jsonl``: the tuning log, one JSON object per
  line, written as it happens (a ``start`` line, one line per candidate with its action,
  config, status, time in ms, reward and feedback, rejected LLM replies, an ``end`` line).

Exit codes: 0 a best kernel was found; 1 every candidate failed; 2 bad input or no GPU
(tuning needs measurements: inputs are validated first, then the GPU is required).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from argus_cutlass.agent.planner import (
    NON_TECHNIQUE_ACTIONS,
    DefaultPolicy,
    EpisodeResult,
    Evaluator,
    Policy,
    Problem,
    Step,
    run_episode,
)

from argus_cutlass.errors import ArgusError, ProblemError
from argus_cutlass.kernels.gemm.space import GemmSpace

POLICIES = ("default", "llm")


class TuneLog:
    """Append-only JSON-lines log, flushed after every line (kept when the run fails)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._f: TextIO = open(path, "a", encoding="utf-8")

    def write(self, event: str, **fields: Any) -> None:
        self._f.write(json.dumps({"event": event, "time": time.time(), **fields}, default=str) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


class _Progress:
    """tqdm when importable, else one plain line per measured candidate; nothing when ``quiet``."""

    def __init__(self, total: int, stream: TextIO | None = None, quiet: bool = False) -> None:
        self.stream = stream if stream is not None else sys.stderr  # the stderr of now, not of the import
        self.quiet = quiet
        self.bar: Any = None
        if not quiet:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, desc="tune", unit="cand", file=stream)
            except ImportError:
                pass
        self.total = total
        self.done = 0

    def step(self, step: Step) -> None:
        if self.quiet:
            return
        ms = f"{step.ms:.4f} ms" if step.ms is not None else step.status
        if step.measured:
            self.done += 1
        if self.bar is not None:
            if step.measured:
                self.bar.update(1)
            self.bar.set_postfix_str(f"{step.action.technique}: {ms}")
        else:
            print(f"[{self.done}/{self.total}] {step.action.technique}: {ms}", file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def validate_inputs(args: Any) -> Problem:
    """The problem of ``args`` after every input check.

    A problem that breaks only TMA's alignment rules (``tma.*``: e.g. M=300 with a column-major A, N=33)
    is tuned as ``argus-cutlass gemm`` runs it, through aligned staging (``GemmProblem.validate_any``):
    every candidate is built, verified, checked and timed with the staging copies.

    Raises:
        ProblemError: sizes, dtypes, layout or leading dimensions (``argus_cutlass.kernels.gemm.problem`` rules);
            ``tune.budget`` / ``tune.policy`` / ``tune.workers`` / ``cli.seed`` / ``cli.out`` for the tuning flags.
        LLMError: ``llm.settings`` when the llm policy lacks its endpoint, model or key.
    """
    from argus_cutlass.agent.tune_family import check_options

    out_dtype = args.out_dtype or args.dtype
    problem = Problem(args.m, args.n, args.k, args.dtype, out_dtype, args.layout)
    problem.validate_any()  # the direct path or aligned staging, as `gemm` runs it
    check_options(args)  # budget, workers, seed, --out: the tune commands' one check, before the GPU is looked for
    if args.policy not in POLICIES:
        raise ProblemError("tune.policy", f"--policy {args.policy!r}: use one of {POLICIES}")
    if args.policy == "llm":
        from argus_cutlass.agent.llm import resolve_settings

        resolve_settings(args.base_url, args.model, args.api_key)
    return problem


def make_policy(args: Any, log: TuneLog | None = None, values: Any = None) -> Policy:
    """The policy named by ``args.policy`` (LLM settings checked here)."""
    if args.policy == "llm":
        from argus_cutlass.agent.llm import LLMPolicy

        def on_reject(text: str, error: str) -> None:
            if log is not None:
                log.write("llm_rejected", reply=text[:2000], error=error)

        return LLMPolicy(args.base_url, args.model, args.api_key, values=values, on_reject=on_reject)
    return DefaultPolicy(values=values, seed=args.seed)


def tune(problem: Problem, policy: Policy, evaluate: Evaluator, out: Path, budget: int,
         batch: int = 4, log: TuneLog | None = None, sources: dict | None = None,
         quiet: bool = False, seed_untuned: bool = True) -> EpisodeResult:
    """Run one episode and write the log and the best ``.cu`` to ``out``.

    ``sources`` maps configs to their rendered source (the GPU evaluator's); the best one is
    rendered again when absent. ``quiet``: no progress bar or per-candidate lines on stderr.
    ``seed_untuned``: the second candidate measured is what ``argus-cutlass gemm`` runs without a tuned entry
    (:func:`~argus_cutlass.agent.planner.untuned_choice`), so with a budget of 2 or more the episode's best is never
    slower than it (when that choice is a feasible point of the space; it is measured only then).
    """
    from argus_cutlass.generate import generate

    out.mkdir(parents=True, exist_ok=True)
    own_log = log is None
    log = log or TuneLog(out / log_name(problem))
    progress = _Progress(budget, quiet=quiet)
    log.write("start", problem=problem.__dict__, policy=policy.name, budget=budget)

    def on_step(step: Step) -> None:
        log.write("candidate", **step.as_dict(problem))
        progress.step(step)

    try:
        result = run_episode(problem, GemmSpace(problem.dtype, problem.out_dtype, problem.layout),
                             policy, evaluate, budget, batch=batch, log=on_step, seed_untuned=seed_untuned)
    finally:
        progress.close()
    best_path = None
    if result.best is not None:
        src = (sources or {}).get(result.best) or generate(result.best, problem, smt=None).source
        from argus_cutlass.generate import build, write_sources

        best_path, _ = write_sources(out, build(result.best, problem), src)  # the .cu and its .h
    log.write("end", best=result.best.model_dump() if result.best else None, best_ms=result.best_ms,
              measured=len(result.measured), cu=str(best_path) if best_path else None)
    if own_log:
        log.close()
    return result


def best_name(cfg: Any, problem: Problem) -> str:
    """The kernel name of ``cfg``'s program for ``problem`` (the best ``.cu`` is named after it)."""
    from argus_cutlass.generate import kernel_name

    return kernel_name(cfg, problem)


def log_name(problem: Problem) -> str:
    p = problem
    return f"tune_{p.m}x{p.n}x{p.k}_{p.dtype}_{p.out_dtype}_{p.layout}.jsonl"


def run_tune(args: Any) -> int:
    """The ``tune gemm`` command (args: m, n, k, dtype, out_dtype, layout, budget, policy, seed,
    base_url, model, api_key, workers, out, and optionally quiet). Returns the exit code.

    Raises:
        ArgusError: bad input (ProblemError), LLM settings or endpoint (LLMError); the CLI
            prints it and exits 2. The tuning log written so far stays on disk.
    """
    from argus_cutlass.agent.measure import GpuEvaluator
    from argus_cutlass.agent.store import ExperienceStore

    from argus_cutlass.runtime.cuda import gpu_available, require_sm90
    from argus_cutlass.settings import output_dir

    problem = validate_inputs(args)
    ok, why = gpu_available()
    if not ok:
        print(f"argus-cutlass tune: error: [device.none] tuning needs measurements on a Hopper GPU, "
              f"and none is usable here: {why}\n  hint: run on an H100/H200 machine; "
              "`argus-cutlass gemm` generates the heuristic kernel without a GPU", file=sys.stderr)
        return 2
    info = require_sm90()
    out = output_dir(args.out)
    log = TuneLog(out / log_name(problem))
    store = ExperienceStore()
    values = store.action_values(info.name, "gemm", problem)
    try:
        policy = make_policy(args, log, values)
        evaluator = GpuEvaluator(problem, workers=args.workers)
        result = tune(problem, policy, evaluator, out, args.budget, batch=min(4, args.budget),
                      log=log, sources=evaluator.sources, quiet=getattr(args, "quiet", False))
    except ArgusError as exc:
        log.write("error", rule=exc.rule, message=str(exc))
        raise
    finally:
        log.close()
    rewards = [(s.action.technique, s.reward) for s in result.steps
               if s.action.technique not in NON_TECHNIQUE_ACTIONS]
    if rewards:
        store.add_rewards(info.name, "gemm", problem, rewards)
    if result.best is None:
        print("argus-cutlass tune: every candidate failed; see the tuning log "
              f"{out / log_name(problem)}", file=sys.stderr)
        return 1
    from argus_cutlass.generate import DEFAULT_TIMING, baseline

    cublas_ms = None
    try:
        cublas_ms = baseline(problem)  # a planner Problem is a GemmProblem
    except ArgusError as exc:
        print(f"argus-cutlass tune: cuBLAS baseline skipped: {exc}", file=sys.stderr)
    store.record_best(info.name, "gemm", problem, result.best, result.best_ms, cublas_ms,  # type: ignore[arg-type]
                      timing=DEFAULT_TIMING)   # GpuEvaluator and baseline() time with the default
    name = best_name(result.best, problem)
    tflops = problem.flops / (result.best_ms * 1e-3) / 1e12  # type: ignore[operator]
    line = f"best {name}: {result.best_ms:.4f} ms ({tflops:.0f} TFLOP/s)"
    if cublas_ms:
        line += f"; cuBLAS {cublas_ms:.4f} ms (ratio cuBLAS/ours {cublas_ms / result.best_ms:.3f})"  # type: ignore[operator]
    print(line)
    print(f"wrote {out / (name + '.cu')} and {out / log_name(problem)}")
    return 0
