"""``argus-cutlass``: generate, verify, build and run Hopper kernels.

Commands:
  ``argus-cutlass gemm --m M --n N --k K [--dtype bf16|fp16] [--out-dtype ...]
  [--layout tn|nt|nn|tt] [--out DIR]``
      pick a configuration, verify it, render ``DIR/<kernel>.cu``, compile it when
      nvcc exists, and on a Hopper GPU run it against an fp32 reference and time it
      beside cuBLAS. Writes ``DIR/<kernel>.json`` (config, verification, stage times).
  ``argus-cutlass attention --batch B --heads H [--kv-heads HK] --seqlen-q SQ --seqlen-k SK
  --head-dim D [--causal] [--dtype bf16|fp16] [--out DIR]``
      the same for FlashAttention forward: render, compile, check against an fp32 reference
      (outputs poisoned first) and time beside cuDNN (torch SDPA's cuDNN backend).
  ``argus-cutlass tune attention --batch B --heads H [--kv-heads HK] --seqlen-q SQ [--seqlen-k SK]
  --head-dim D [--causal] [--dtype bf16|fp16] [--budget N] [--out DIR]``
      compile the first N candidates of the attention search space in one parallel batch,
      measure them on a Hopper GPU, record the fastest in the experience store and write
      ``DIR/tune_attention.json`` (no nvcc: stops after rendering; no GPU: after compiling).
  ``argus-cutlass tune moe --tokens T --experts E --topk K --hidden H --ffn I [--dtype bf16|fp16]
  [--budget N] [--out DIR]``
      the same for an MoE layer (:mod:`argus_cutlass.agent.tune_moe`): the heuristic's configuration
      and its one-knob neighbours; the fastest is recorded under the problem's power-of-two T bucket.
  ``argus-cutlass tune --shapes FILE | --model CONFIG.json [--m-values 1,8,...] [--budget N]
  [--address ADDR] [--workers W] [--gpus G] [--no-resume] [--quiet] [--out DIR]``
      tune many GEMM shapes (a JSON/CSV file, or a Hugging Face config's projections): compiles on
      CPU workers, measurements on GPUs (through Ray when installed), each best recorded in the
      experience store; resumable from ``DIR/tune_journal.jsonl`` (:mod:`argus_cutlass.agent.tune_many`).
  ``argus-cutlass include-path [--dirs]``
      the CUTLASS/CuTe ``-I`` flags a generated ``.cu`` compiles with (the ``.h`` beside it documents the
      entry), e.g. ``nvcc ... $(argus-cutlass include-path) -c KERNEL.cu``.
  ``argus-cutlass verify CONFIG.json [--json] [--verbose]``
      verify one configuration: violations first, the proofs only with ``--verbose``; exit code 1 on a
      violation (or an unknown or undecided obligation, unless ``--allow-unknown``; checks skipped with
      ``--no-smt`` are listed, and do not fail).
  ``argus-cutlass table [--kernel gemm|attention|moe] [--json] [--m M --n N --k K | --batch B --heads H
  --seqlen-q SQ --head-dim D ...]``
      list the tuned entries (your experience store, then the shipped H200 table); given a problem, its key,
      the configuration it would get, and which key fields of the nearest entries missed.

Every stage runs through the orchestrator :mod:`argus_cutlass.generate`.

Exit codes: 0 success; 1 verification failure (a violation, or obligations left
unknown or undecided without ``--allow-unknown``) or numerical failure; 2 bad input or environment
(the message names the input and the rule).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from argus_cutlass.errors import ArgusError
# the element-type and layout spellings the command line takes, shared with the shape files of ``tune --shapes``
# (DTYPE_ALIASES is re-exported for the callers that read it here)
from argus_cutlass.kernels.spellings import DTYPE_ALIASES, normalize_dtype, normalize_layout  # noqa: F401


_STDOUT_CLOSED = False


def _print(msg: str) -> None:
    """Print a progress line; a closed stdout (``| head``) stops the printing, not the job."""
    global _STDOUT_CLOSED
    if _STDOUT_CLOSED:
        return
    try:
        print(msg, flush=True)
    except BrokenPipeError:
        _STDOUT_CLOSED = True
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def dtype_arg(text: str) -> str:
    """``--dtype``/``--out-dtype``: a known alias (``float16``, ``half``, ``bfloat16``, ``float32``, any
    case) becomes its canonical name; anything else passes through for the problem's own check
    (``problem.dtype``), which names the supported types (:func:`~argus_cutlass.kernels.spellings.normalize_dtype`,
    as the shape files read it).

    >>> dtype_arg("BFloat16"), dtype_arg("half"), dtype_arg("float32"), dtype_arg("int8")
    ('bf16', 'fp16', 'fp32', 'int8')
    """
    return normalize_dtype(text)


def layout_arg(text: str) -> str:
    """``--layout``: BLAS letters in any case (``TN`` = ``tn``; :func:`~argus_cutlass.kernels.spellings.normalize_layout`).

    >>> layout_arg("TN")
    'tn'
    """
    return normalize_layout(text)


#: what the command is doing now (named when Ctrl-C stops it)
_ACTIVITY = ["starting"]


def _doing(text: str) -> None:
    _ACTIVITY[0] = text


class _CompileTicker:
    """Progress while nvcc runs (one cold compile takes about 5-20 s): a tqdm elapsed-time bar on a terminal when
    tqdm is installed (the ``tune`` extra), else one line and, on a terminal, an elapsed-seconds
    counter; nothing with ``--quiet``."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self._stop = None
        self._thread = None

    def start(self, name: str) -> None:
        import threading
        import time

        if self.quiet:
            return
        tty = sys.stderr.isatty()
        bar = None
        if tty:
            try:
                from tqdm import tqdm

                bar = tqdm(total=None, desc=f"compiling {name[:48]}", bar_format="{desc}: {elapsed} (nvcc)",
                           file=sys.stderr, leave=False)
            except ImportError:
                bar = None
        if bar is None:
            print(f"compiling {name} with nvcc (about 5-20 s; Ctrl-C stops it) ...", file=sys.stderr,
                  flush=True)
        if not tty:
            return
        stop = threading.Event()
        t0 = time.monotonic()

        def tick() -> None:
            while not stop.wait(0.5):
                if bar is not None:
                    bar.refresh()
                else:
                    print(f"\r  nvcc running: {time.monotonic() - t0:5.0f} s", end="", file=sys.stderr, flush=True)
            if bar is not None:
                bar.close()
            else:
                print("\r" + " " * 30 + "\r", end="", file=sys.stderr, flush=True)

        self._stop, self._thread = stop, threading.Thread(target=tick, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._stop is not None:
            self._stop.set()
            self._thread.join(timeout=2)
            self._stop = self._thread = None


_SOURCE_TEXT = {
    "store": "tuned: your experience store",
    "shipped": "tuned: the shipped H200 table",
    "heuristic": "heuristic: no tuned entry for this shape bucket",
    "costmodel": "cost model: no tuned entry for this shape bucket",
    "forced": "heuristic: --heuristic",
}


def cmd_gemm(args: argparse.Namespace) -> int:
    """``gemm``: the orchestrator's :func:`~argus_cutlass.generate.run` with progress lines.

    Exit 0 when every stage that could run passed (no nvcc or no GPU stops early, still 0);
    1 when the verifier rejected the program, left obligations unproved (without
    ``--allow-unknown``) or the numerical check failed; bad input raises (exit 2).
    """
    import math

    from argus_cutlass.errors import ProblemError
    from argus_cutlass.generate import Options, check_overrides
    from argus_cutlass.kernels.gemm.problem import GemmProblem

    problem = GemmProblem(args.m, args.n, args.k, dtype=args.dtype, out_dtype=args.out_dtype, layout=args.layout)
    problem.validate_any()  # what breaks only TMA's alignment rules runs through aligned staging
    for flag, value in (("--alpha", args.alpha), ("--beta", args.beta)):
        if not math.isfinite(value):
            raise ProblemError("problem.scalar", f"{flag}={value}: alpha and beta must be finite numbers")
    check_overrides(problem, args.set)   # before the folder: a misspelt field leaves none behind
    options = Options(heuristic=args.heuristic, allow_unknown=args.allow_unknown, alpha=args.alpha,
                      beta=args.beta, seed=args.seed, timing=args.timing, overrides=tuple(args.set))
    return _run_job(problem, options, args)


def _run_job(problem: object, options: object, args: argparse.Namespace) -> int:
    """The orchestrator's :func:`~argus_cutlass.generate.run` of one ``gemm`` / ``attention`` / ``moe`` command with
    its progress lines, into the ``--out`` folder; a refusal that wrote nothing (e.g. a ``--set`` combination the
    configuration refuses) leaves no folder it created behind. Exit 0 when the result is ok, else 1."""
    from argus_cutlass.generate import run

    existed = Path(args.out).exists()
    out_dir = _output_dir(args.out)
    progress = _Progress(args.verbose, out_dir, args.quiet)
    try:
        result = run(problem, options=options, on_stage=progress, out_dir=out_dir)
    except BaseException:
        if not existed and out_dir.is_dir() and not any(out_dir.iterdir()):
            out_dir.rmdir()
        raise
    finally:
        progress.ticker.stop()
    for path in (out_dir / f"{result.name}.json",) if result.program is not None else ():
        _print(f"wrote     {path}")
    return 0 if result.ok else 1


def cmd_attention(args: argparse.Namespace) -> int:
    """``attention``: :func:`~argus_cutlass.generate.run` on an attention problem, exit codes as ``gemm``."""
    from argus_cutlass.generate import Options, check_overrides

    problem = _attention_problem(args)
    check_overrides(problem, args.set)
    options = Options(heuristic=args.heuristic, allow_unknown=args.allow_unknown, seed=args.seed,
                      overrides=tuple(args.set))
    return _run_job(problem, options, args)


def cmd_moe(args: argparse.Namespace) -> int:
    """``moe``: :func:`~argus_cutlass.generate.run` on an MoE layer problem (configure by T bucket,
    build, verify, render ``<name>.cu`` / ``.h``, compile, and on a Hopper GPU check against fp32 and
    time beside the torch ``_grouped_mm`` layer); exit codes as ``gemm``."""
    from argus_cutlass.generate import Options, check_overrides
    from argus_cutlass.kernels.moe.problem import MoEProblem

    problem = MoEProblem(args.tokens, args.experts, args.topk, args.hidden, args.ffn, args.dtype).validate()
    check_overrides(problem, args.set)   # after the problem's rules, before the folder: a refused problem leaves none
    options = Options(heuristic=args.heuristic, allow_unknown=args.allow_unknown, seed=args.seed,
                      overrides=tuple(args.set))
    return _run_job(problem, options, args)


def _attention_problem(args: argparse.Namespace):  # noqa: ANN202 - AttentionProblem
    """The validated attention problem of ``attention`` / ``tune attention`` options (``--kv-heads``
    defaults to ``--heads``, ``--seqlen-k`` to ``--seqlen-q``)."""
    from argus_cutlass.kernels.attention.problem import AttentionProblem

    return AttentionProblem(args.batch, args.heads, args.heads if args.kv_heads is None else args.kv_heads,
                            args.seqlen_q, args.seqlen_q if args.seqlen_k is None else args.seqlen_k,
                            args.head_dim, dtype=args.dtype, causal=args.causal,
                            softmax_scale=getattr(args, "softmax_scale", None)).validate()


def _add_attention_args(p: argparse.ArgumentParser, *, required: bool = True, dtype: bool = True) -> None:
    """The attention problem options shared by ``attention``, ``tune attention`` and ``table`` (there
    optional, and ``--dtype`` shared with the GEMM options)."""
    p.add_argument("--batch", type=int, required=required, help="batch size B")
    p.add_argument("--heads", type=int, required=required, help="query heads H")
    p.add_argument("--kv-heads", type=int, default=None, help="key/value heads HK dividing H (default H; 1 = MQA)")
    p.add_argument("--seqlen-q", type=int, required=required, help="query length SQ")
    p.add_argument("--seqlen-k", type=int, default=None, help="key/value length SK (default SQ)")
    p.add_argument("--head-dim", type=int, required=required, help="head dim D: 64, 96, 128, 192 or 256")
    p.add_argument("--causal", action="store_true", help="causal mask, bottom-right aligned when SQ != SK")
    if dtype:
        p.add_argument("--dtype", type=dtype_arg, default="bf16",
                       help="Q/K/V/O element type: bf16 or fp16 (also bfloat16, float16, half)")


class _Progress:
    """Prints one line per finished stage of :func:`argus_cutlass.generate.run`, shows progress while
    nvcc runs (not with ``quiet``) and keeps :data:`_ACTIVITY` up to date for a Ctrl-C message."""

    _NEXT = {"configure": "building and verifying the program", "build_program": "verifying the program",
             "verify": "rendering the .cu", "render": "writing the .cu", "write": "finding nvcc",
             "compile": "loading the kernel", "load": "checking the kernel against the fp32 reference",
             "check": "timing the kernel", "time": "timing the vendor baseline"}

    def __init__(self, verbose: bool, out_dir: Path, quiet: bool = False) -> None:
        self.verbose = verbose
        self.out_dir = out_dir
        self.ticker = _CompileTicker(quiet)

    def __call__(self, stage: str, r) -> None:  # noqa: ANN001 - RunResult
        if stage == "compile_start":
            _doing(f"compiling {r.name} with nvcc (the partial build was discarded; nothing was cached; the .cu, "
                   f"its .h and its .json report, status 'rendered', are in {self.out_dir})")
            self.ticker.start(r.name)
            return
        if stage == "compile":
            self.ticker.stop()
        _doing(self._NEXT.get(stage, f"after stage {stage}"))
        p = r.problem
        attention = hasattr(p, "head_dim")
        moe = hasattr(p, "experts")
        vendor = "cuDNN" if attention else ("torch _grouped_mm" if moe else "cuBLAS")
        if stage == "configure":
            if moe:
                _print(f"problem   moe tokens={p.tokens} experts={p.experts} topk={p.topk} hidden={p.hidden} "
                       f"ffn={p.ffn} {p.dtype}")
            elif attention:
                _print(f"problem   attention batch={p.batch} heads={p.heads}/{p.kv_heads} seqlen_q={p.seqlen_q} "
                       f"seqlen_k={p.seqlen_k} head_dim={p.head_dim} {p.dtype}{' causal' if p.causal else ''}")
            else:
                _print(f"problem   M={p.m} N={p.n} K={p.k} {p.dtype}->{p.out_dtype} layout {p.layout}")
        elif stage == "build_program" and r.program is not None:
            _print(f"config    {r.name} ({_SOURCE_TEXT[r.config_source]})")
            if r.config_source_detail and r.config_source != "forced":
                _print(f"why       {r.config_source_detail}")
            if r.config_overrides:
                _print(f"set       {', '.join(f'{k}={json.dumps(v)}' for k, v in r.config_overrides.items())} (--set)")
            if r.path is not None:
                _print(f"path      {r.path['text']}")
        elif stage == "build_program":
            _print(f"config    refused: {r.error}")
        elif stage == "verify":
            if r.status == "rejected":
                _print(r.report.format())
            elif r.status == "unproved":
                _print(f"NOT PROVED {r.error}")
            else:
                _print(f"verified  {_proof_summary(r.report)}")
                for line in r.report.proved if self.verbose else ():
                    _print(f"            {line}")
                for line in r.report.not_proved:
                    _print(f"UNPROVED  {line} (rendered anyway: --allow-unknown)")
                if r.report.skipped:
                    reasons = sorted({s.reason for s in r.report.skipped})
                    _print(f"skipped   {len(r.report.skipped)} check(s) not run ({'; '.join(reasons)}): not proved, "
                           "listed in the .cu header" + ("" if self.verbose else " (--verbose lists them)"))
                for line in r.report.skipped_lines if self.verbose else ():
                    _print(f"            {line}")
        elif stage == "write":
            _print(f"wrote     {self.out_dir / (r.name + '.cu')}")
            _print(f"wrote     {self.out_dir / (r.name + '.h')} (the C interface: include it to call the .cu)")
        elif stage == "compile":
            if "compile" in r.skipped:
                _print(f"no nvcc   {r.skipped['compile']}; wrote the .cu only (compile it with the command in "
                       "its header)")
            else:
                a = r.artifact
                _print(f"compiled  {a.path} ({'cache hit' if a.cached else f'{a.seconds:.1f} s'},"
                       f" {a.registers} registers, {a.spill_bytes} spill bytes)")
        elif stage == "run":
            why = r.skipped["run"]
            _print(f"{'not run ' if why.startswith('torch') else 'no GPU  '}  {why}; stopping after compile")
        elif stage == "check":
            c = r.check
            if moe:
                _print(f"check     {c.summary()}")
            elif attention:
                _print(f"check     {'PASS' if c.passed else 'FAIL'}: rel. error {c.rel_error:.2e} (tolerance "
                       f"{c.tolerance:.0e}), NaN outputs {c.nan_count}, LSE mismatches {c.lse_errors}, "
                       f"rows with no key {c.empty_rows} (wrong {c.empty_row_errors})")
            else:
                _print(f"check     {'PASS' if c.passed else 'FAIL'}: rel. error {c.rel_error:.2e}"
                       f" (tolerance {c.tolerance:.0e}), unwritten outputs {c.unwritten}")
        elif stage == "baseline":
            from argus_cutlass.generate import problem_flops

            flops = problem_flops(p)
            how = {"graph": " (per call, replayed from a CUDA graph, operands rotated)",
                   "launch": " (one launch between CUDA events, one operand set)"}.get(r.timing_method or "", "")
            line = f"time      {r.ms:.4f} ms{how} = {flops / r.ms / 1e9:.1f} TFLOP/s"
            if moe:
                from argus_cutlass.kernels.moe.check import ANCHOR_HBM_BYTES_PER_S, timed_counts, timed_floor_ms

                line += (f" ({r.ms / timed_floor_ms(p):.2f}x the activated-weight floor at "
                         f"{ANCHOR_HBM_BYTES_PER_S / 1e12:.1f} TB/s: "
                         f"{p.active_experts(timed_counts(p))} of {p.experts} experts routed)")
            if r.baseline_ms is not None:
                line += (f"; {vendor} {r.baseline_ms:.4f} ms = {flops / r.baseline_ms / 1e9:.1f} TFLOP/s; "
                         f"ratio {r.baseline_ms / r.ms:.3f}x")
            else:
                line += f"; {vendor} not measured ({r.skipped.get('baseline', 'torch is not installed')})"
            _print(line)


def _proof_summary(report) -> str:  # noqa: ANN001 - VerificationReport
    """``37 proofs of 30 obligations in 0.31 s: G1 x5, G3 x4, ... (engines arith, enum, z3)``: an obligation
    (the report's ``obligations``) may take several proofs (``proofs``: one per case, tier or part), and the
    per-invariant counts are proofs."""
    from collections import Counter

    by_invariant = Counter(p.invariant for p in report.proofs)
    engines = sorted({p.engine for p in report.proofs})
    seconds = max(report.elapsed_s, sum(report.tier_seconds.values()))  # wall time (the MoE layer's tiers overlap)
    parts = ", ".join(f"{inv} x{n}" if n > 1 else inv for inv, n in sorted(by_invariant.items()))
    if any("from the cache of verified programs" in n for n in report.notes):
        return (f"{len(report.proofs)} proofs of {len(report.obligations)} obligations, from the report cache "
                f"(proved {seconds:.2f} s when first verified; ARGUS_REPORT_CACHE=0 re-verifies): {parts}")
    return (f"{len(report.proofs)} proofs of {len(report.obligations)} obligations in {seconds:.2f} s: "
            f"{parts} (engines {', '.join(engines)}; --verbose lists them, the .json has them all)")


def _output_dir(path: str) -> Path:
    """Create the output folder; a path that cannot be a writable folder is a user error (``cli.out``)."""
    from argus_cutlass.settings import output_dir

    return output_dir(path)


def cmd_verify(args: argparse.Namespace) -> int:
    """``verify CONFIG.json``: a GemmConfig object or a ``gemm`` record (its ``config`` key).

    Prints the report (violations with counterexamples first, then proofs) and one line per
    tier (algebraic / enumeration / SMT: proofs, median time per obligation, total), or the
    JSON report with ``--json``. Exit 1 on a violation; bad input raises ConfigError (exit 2)
    naming the file and the line: not JSON, an unknown field, a value of the wrong type or below 1
    (``config.schema``), or fields no program can be built from (``smem.atom``, ``config.<field>``:
    :func:`~argus_cutlass.kernels.gemm.program.check_buildable`, naming the field, its value and the
    rule). With ``--json`` a bad input also prints
    ``{"ok": false, "error": {"rule": ..., "message": ...}}`` on stdout, so a program reading
    the output always gets JSON.
    """
    try:
        return _verify(args)
    except ArgusError as exc:
        if args.json:
            _print(json.dumps({"ok": False, "complete": False,
                               "error": {"rule": exc.rule, "message": str(exc)}}))
        raise


def _verify(args: argparse.Namespace) -> int:
    import re

    from pydantic import ValidationError

    from argus_cutlass.errors import ConfigError
    from argus_cutlass.generate import build, verify
    from argus_cutlass.kernels.gemm.config import GemmConfig

    src = args.config
    try:
        text = Path(src).read_text() if src != "-" else sys.stdin.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("config.read", f"{src}: cannot read ({exc.strerror or exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError("config.json", f"{src}:{exc.lineno}:{exc.colno}: not JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise ConfigError("config.json", f"{src}:1: expected a JSON object (a GemmConfig or a gemm record), "
                                         f"got {type(data).__name__}")
    data = data.get("config", data)  # accept a `gemm` record too
    if not isinstance(data, dict):
        raise ConfigError("config.json", f"{src}: 'config' must be a JSON object")

    def line_of(key: str) -> int:
        m = re.search(r'"' + re.escape(key) + r'"\s*:', text)
        return text.count("\n", 0, m.start()) + 1 if m else 1

    try:
        cfg = GemmConfig(**data)
    except ValidationError as exc:
        problems = []
        for e in exc.errors():
            key = str(e["loc"][0]) if e["loc"] else ""
            what = (f"unknown field '{key}' (known: {', '.join(GemmConfig.model_fields)})"
                    if e["type"] == "extra_forbidden" else f"field '{key}': {e['msg'].removeprefix('Value error, ')}")
            problems.append(f"{src}:{line_of(key)}: {what}")
        raise ConfigError("config.schema", "; ".join(problems)) from None
    try:
        program = build(cfg)
    except ConfigError as exc:
        if not exc.fields:
            raise
        # the line of the first named field the file sets (the others took GemmConfig's defaults)
        key = next((k for k in exc.fields if k in data), next(iter(exc.fields)))
        raise ConfigError(exc.rule, f"{src}:{line_of(key)}: {exc.message}", exc.hint, fields=exc.fields,
                          model=exc.model, text=exc.text) from None
    report = verify(program, smt=not args.no_smt, smt_timeout_ms=args.smt_timeout_ms)
    if args.json:
        _print(report.to_json())
    else:
        # the report lists violations and unknowns first, then one "  ok ..." line per proof
        lines = report.format().splitlines()
        proofs = [line for line in lines if line.startswith("  ok ")]
        for line in lines if args.verbose else [line for line in lines if not line.startswith("  ok ")]:
            _print(line)
        if proofs and not args.verbose:
            _print(f"({len(proofs)} proofs; --verbose lists them)")
        _print("tiers:")
        for line in report.tier_summary():
            _print(f"  {line}")
    return 0 if report.ok and (args.allow_unknown or report.complete) else 1


def cmd_include_path(args: argparse.Namespace) -> int:
    """``include-path``: the CUTLASS/CuTe include flags a generated ``.cu`` compiles with (``-I<include>
    -I<tools/util/include>``, as ``pybind11 --includes``), from ``CUTLASS_PATH`` or the nvidia-cutlass wheel;
    ``--dirs``: the directories, one a line. Missing headers raise ToolchainError (exit 2)."""
    from argus_cutlass.build.toolchain import find_cutlass

    headers = find_cutlass()
    if args.dirs:
        _print(str(headers.include))
        _print(str(headers.util_include))
    else:
        _print(" ".join(headers.include_flags()))
    return 0


def cmd_table(args: argparse.Namespace) -> int:
    """``table``: the tuned entries (your experience store, then the shipped H200 table) and, given a
    problem (``--m/--n/--k`` or the attention options), the key it has, the configuration it would get
    and, for the nearest entries, which key fields missed (:mod:`argus_cutlass.agent.table`)."""
    from argus_cutlass.agent.table import entries, explain, format_entries, format_explain
    from argus_cutlass.errors import ProblemError

    gemm_given = [f for f in ("m", "n", "k") if getattr(args, f) is not None]
    attn_names = ("batch", "heads", "kv_heads", "seqlen_q", "seqlen_k", "head_dim")
    attn_given = [f for f in attn_names if getattr(args, f) is not None] + (["causal"] if args.causal else [])
    if gemm_given and attn_given:
        raise ProblemError("table.problem", f"--{'/--'.join(gemm_given)} describe a GEMM and "
                           f"--{'/--'.join(f.replace('_', '-') for f in attn_given)} an attention problem: give one")
    problem = None
    if gemm_given:
        if len(gemm_given) != 3:
            raise ProblemError("table.problem", "a GEMM problem needs all of --m, --n and --k")
        if args.kernel not in (None, "gemm"):
            raise ProblemError("table.problem", f"--m/--n/--k describe a GEMM, not --kernel {args.kernel}")
        from argus_cutlass.kernels.gemm.problem import GemmProblem

        problem = GemmProblem(args.m, args.n, args.k, dtype=args.dtype,
                              out_dtype=args.out_dtype or (args.dtype if args.dtype in ("bf16", "fp16") else "bf16"),
                              layout=args.layout)
        problem.validate_any()  # what `gemm` runs: the direct path or aligned staging
    elif attn_given:
        missing = [f"--{f.replace('_', '-')}" for f in ("batch", "heads", "seqlen_q", "head_dim") if getattr(args, f) is None]
        if missing:
            raise ProblemError("table.problem", f"an attention problem needs {', '.join(missing)}")
        if args.kernel not in (None, "attention"):
            raise ProblemError("table.problem", f"the attention options describe attention, not --kernel {args.kernel}")
        args.softmax_scale = None
        problem = _attention_problem(args)
    if problem is None:
        rows = entries(args.kernel)
        if args.json:
            _print(json.dumps({"entries": rows}, indent=1, default=str))
        else:
            for line in format_entries(rows, args.kernel):
                _print(line)
        return 0
    ex = explain(problem, gpu=args.gpu)
    if args.json:
        _print(json.dumps(ex, indent=1, default=str))
    else:
        for line in format_explain(ex):
            _print(line)
    return 0


def _cmd_tune(args: argparse.Namespace) -> int:
    _no_shapes_with_kernel(args)
    from argus_cutlass.agent.tune import run_tune

    _doing(f"tuning the GEMM M={args.m} N={args.n} K={args.k} (nothing recorded in the experience store; "
           f"the tuning log so far is in {args.out})")

    return run_tune(args)


def _cmd_tune_shapes(args: argparse.Namespace) -> int:
    """``tune --shapes FILE`` / ``tune --model CONFIG.json``: :func:`argus_cutlass.agent.tune_many.run_tune_shapes`."""
    from argus_cutlass.agent.tune_many import run_tune_shapes

    named = argparse.Namespace(**{**vars(args), "budget": args.shapes_budget, "workers": args.shapes_workers,
                                  "out": args.shapes_out})
    return run_tune_shapes(named, say=_print)


def _no_shapes_with_kernel(args: argparse.Namespace) -> None:
    """``tune --shapes/--model`` tunes many GEMMs; with a kernel subcommand it would be ignored: refuse it."""
    from argus_cutlass.errors import ProblemError

    if getattr(args, "shapes", None) is not None or getattr(args, "model_config", None) is not None:
        raise ProblemError("tune.shapes", f"--shapes/--model tune many GEMM shapes; drop `{args.kernel}` and its "
                                          "options, or drop --shapes/--model")


def _add_moe_args(p: argparse.ArgumentParser) -> None:
    """The MoE layer problem options shared by ``moe`` and ``tune moe``."""
    p.add_argument("--tokens", type=int, required=True, help="T, tokens of the batch (1 .. 2^20)")
    p.add_argument("--experts", type=int, required=True, help="E, experts")
    p.add_argument("--topk", type=int, required=True,
                   help="k, experts per token (1 .. E: a token's experts are distinct)")
    p.add_argument("--hidden", type=int, required=True, help="H, model width (a multiple of 8)")
    p.add_argument("--ffn", type=int, required=True, help="I, expert intermediate width (a multiple of 8)")
    p.add_argument("--dtype", type=dtype_arg, default="bf16", help="bf16 or fp16 (also bfloat16, float16, half)")


def _add_tune_family_args(p: argparse.ArgumentParser, first: str, result_file: str) -> None:
    """The options of a family's measuring tune command (:mod:`argus_cutlass.agent.tune_family`)."""
    p.add_argument("--budget", type=int, default=8, help=f"candidates to compile and measure, {first} first (default 8)")
    p.add_argument("--seed", type=int, default=0, help="seed of the check inputs")
    p.add_argument("--workers", type=int, default=None, help="parallel compiles (default: CPU count)")
    p.add_argument("--out", default="out", help=f"output folder for {result_file} and the best .cu")
    p.add_argument("--quiet", action="store_true", default=argparse.SUPPRESS,
                   help="no progress line while the candidates compile")


def _cmd_tune_moe(args: argparse.Namespace) -> int:
    """``tune moe``: :func:`argus_cutlass.agent.tune_moe.run_tune_moe`."""
    _no_shapes_with_kernel(args)
    from argus_cutlass.agent.tune_moe import run_tune_moe
    from argus_cutlass.kernels.moe.problem import MoEProblem

    problem = MoEProblem(args.tokens, args.experts, args.topk, args.hidden, args.ffn, args.dtype).validate()
    _doing(f"tuning moe (up to {args.budget} candidates; nothing recorded in the experience store)")
    return run_tune_moe(args, say=_print, problem=problem)


def _cmd_tune_attention(args: argparse.Namespace) -> int:
    """``tune attention``: :func:`argus_cutlass.agent.tune_attention.run_tune_attention`."""
    _no_shapes_with_kernel(args)
    from argus_cutlass.agent.tune_attention import run_tune_attention

    _doing(f"tuning attention (up to {args.budget} candidates; nothing recorded in the experience store)")

    return run_tune_attention(args, say=_print, problem=_attention_problem(args))



def _add_problem_args(p: argparse.ArgumentParser) -> None:
    """The GEMM problem options shared by ``gemm`` and ``tune gemm``."""
    p.add_argument("--m", type=int, required=True, help="rows of A and D")
    p.add_argument("--n", type=int, required=True, help="columns of B and D")
    p.add_argument("--k", type=int, required=True, help="reduction length")
    p.add_argument("--dtype", type=dtype_arg, default="bf16",
                   help="A/B element type: bf16 or fp16 (also bfloat16, float16, half)")
    p.add_argument("--out-dtype", type=dtype_arg, default=None,
                   help="C/D element type: bf16, fp16 or fp32 (also float32; default: --dtype)")
    p.add_argument("--layout", type=layout_arg, default="tn",
                   help="tn, nt, nn or tt, any case (A then B; t = K-major A / N-major B)")


def build_parser() -> argparse.ArgumentParser:
    from argus_cutlass.runtime.timing import DEFAULT_TIMING, TIMINGS

    p = argparse.ArgumentParser(
        prog="argus-cutlass",
        description="Generate, verify, build and run NVIDIA Hopper (sm_90a) kernels.",
    )
    from argus_cutlass import __version__

    p.add_argument("--version", action="version", version=f"argus-cutlass {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    g = sub.add_parser("gemm", help="generate (and build, run) a GEMM kernel for one shape")
    _add_problem_args(g)
    g.add_argument("--alpha", type=float, default=1.0, help="scale of A @ B (default 1)")
    g.add_argument("--beta", type=float, default=0.0, help="scale of C (default 0: C is not read)")
    g.add_argument("--seed", type=int, default=0, help="seed of the random check inputs")
    g.add_argument("--timing", choices=TIMINGS, default=DEFAULT_TIMING,
                   help="graph (default): calls replayed from a CUDA graph over operands rotated through 3x the L2, "
                        "as a serving engine runs them; launch: one launch between CUDA events, one operand set "
                        "(a ~25 us kernel then also times the host's per-call cost); ours and cuBLAS alike")
    g.add_argument("--out", default="out", help="output folder (default: ./out)")
    g.add_argument("--quiet", action="store_true", help="no progress display while nvcc compiles")
    g.add_argument("--verbose", action="store_true", help="print every proved obligation")
    g.add_argument("--allow-unknown", action="store_true",
                   help="render and run a program whose verification left obligations unknown (not proved); "
                        "the .cu header lists them")
    g.add_argument("--heuristic", action="store_true",
                   help="use the fixed heuristic, not a tuned configuration from the experience store "
                        "or the shipped H200 table")
    g.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE[,FIELD=VALUE]",
                   help="change configuration fields of the chosen configuration (repeatable), e.g. stages=5,schedule=pingpong; "
                        "the result is verified like any other")
    g.set_defaults(func=cmd_gemm)

    a = sub.add_parser("attention", help="generate (and build, run) a FlashAttention forward kernel")
    _add_attention_args(a)
    a.add_argument("--softmax-scale", type=float, default=None, help="scale of Q K^T (default 1/sqrt(D))")
    a.add_argument("--seed", type=int, default=0, help="seed of the random check inputs")
    a.add_argument("--out", default="out", help="output folder (default: ./out)")
    a.add_argument("--quiet", action="store_true", help="no progress display while nvcc compiles")
    a.add_argument("--verbose", action="store_true", help="print every proved obligation")
    a.add_argument("--allow-unknown", action="store_true", help="as for gemm")
    a.add_argument("--heuristic", action="store_true", help="FA3's tile per head dim, not a tuned entry")
    a.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE[,FIELD=VALUE]",
                   help="change configuration fields of the chosen configuration (repeatable), e.g. tile_n=128; "
                        "the result is verified like any other")
    a.set_defaults(func=cmd_attention)

    mo = sub.add_parser("moe", help="generate (and build, run) a mixture-of-experts layer (SwiGLU experts)")
    _add_moe_args(mo)
    mo.add_argument("--seed", type=int, default=0, help="seed of the random check inputs")
    mo.add_argument("--out", default="out", help="output folder (default: ./out)")
    mo.add_argument("--quiet", action="store_true", help="no progress display while nvcc compiles")
    mo.add_argument("--verbose", action="store_true", help="list every proof")
    mo.add_argument("--allow-unknown", action="store_true", help="as for gemm")
    mo.add_argument("--heuristic", action="store_true",
                    help="the T bucket's heuristic configuration, not the shipped H200 table's entry")
    mo.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE[,FIELD=VALUE]",
                   help="change configuration fields of the chosen configuration (repeatable), e.g. row_bounded=false or gu_stages=6; "
                        "the result is verified like any other")
    mo.set_defaults(func=cmd_moe)

    t = sub.add_parser("tune", help="search kernel configurations for one shape (the agent), or fill the tuned "
                                    "table for many GEMM shapes (--shapes FILE / --model CONFIG.json)",
                       allow_abbrev=False)  # `tune gemm --m` must not read as an abbreviation of --model/--m-values
    t.add_argument("--shapes", default=None, metavar="FILE",
                   help="a JSON or CSV file of GEMM shapes: tune them all (compiles on CPU workers, measurements "
                        "on GPUs through Ray when installed), resumable, each best recorded in the experience store")
    t.add_argument("--model", dest="model_config", default=None, metavar="CONFIG.json",
                   help="a Hugging Face config.json: tune the GEMMs of its projections (for each of --m-values)")
    t.add_argument("--m-values", default=None, metavar="M,M,...",
                   help="token counts M for --model, comma-separated (e.g. 1,8,64,512,4096)")
    t.add_argument("--budget", dest="shapes_budget", type=int, default=16, metavar="N",
                   help="candidates per shape with --shapes/--model (default 16)")
    t.add_argument("--address", default=None, metavar="RAY",
                   help="join this Ray cluster (default: start a local one when Ray is installed)")
    t.add_argument("--workers", dest="shapes_workers", type=int, default=None, metavar="W",
                   help="compile workers with --shapes/--model (default: CPU count)")
    t.add_argument("--gpus", type=int, default=None, help="GPUs to measure on (default: all found; 0: compile only)")
    t.add_argument("--no-resume", action="store_true",
                   help="start afresh (the old journal is moved aside) instead of resuming OUT/tune_journal.jsonl")
    t.add_argument("--quiet", action="store_true", help="no progress bar or progress lines")
    t.add_argument("--out", dest="shapes_out", default="out", metavar="DIR",
                   help="with --shapes/--model: folder of tune_journal.jsonl and tune_summary.json (default ./out)")
    t.set_defaults(func=_cmd_tune_shapes)
    tsub = t.add_subparsers(dest="kernel", required=False)
    tg = tsub.add_parser("gemm", help="tune a GEMM")
    _add_problem_args(tg)
    tg.add_argument("--budget", type=int, default=16, help="most candidates to compile and measure (default 16)")
    tg.add_argument("--policy", default="default", help="default (offline, seeded; the default) or llm")
    tg.add_argument("--seed", type=int, default=0, help="seed of the policy and the check inputs")
    tg.add_argument("--base-url", default=None, help="OpenAI-compatible endpoint (or OPENAI_BASE_URL)")
    tg.add_argument("--model", default=None, help="model name (or ARGUS_LLM_MODEL)")
    tg.add_argument("--api-key", default=None, help="API key (or OPENAI_API_KEY)")
    tg.add_argument("--workers", type=int, default=None, help="parallel compiles (default: CPU count)")
    tg.add_argument("--out", default="out", help="output folder for the best .cu and the tuning log")
    # SUPPRESS: `tune --quiet gemm ...` (the parent's flag) is not reset by the subcommand's default
    tg.add_argument("--quiet", action="store_true", default=argparse.SUPPRESS,
                    help="no progress bar or per-candidate lines")
    tg.set_defaults(func=_cmd_tune)
    ta = tsub.add_parser("attention", help="measure the best candidates of the attention space for one problem")
    _add_attention_args(ta)
    _add_tune_family_args(ta, "FA3's configuration", "tune_attention.json")
    ta.set_defaults(func=_cmd_tune_attention)
    tm = tsub.add_parser("moe", help="measure the best candidates of the MoE space for one layer problem")
    _add_moe_args(tm)
    _add_tune_family_args(tm, "the heuristic's", "tune_moe.json")
    tm.set_defaults(func=_cmd_tune_moe)

    tb = sub.add_parser("table", help="list the tuned entries; with a problem, say why it would or would not "
                                      "use one",
                        description="The tuned entries configure() consults: your experience store (filled by "
                                    "`tune`), then the shipped H200 table, then the untuned rule (GEMM: the cost model, "
                                    "or the heuristic with ARGUS_GEMM_UNTUNED=heuristic; the other families: the "
                                    "heuristic). With --m/--n/--k (GEMM) "
                                    "or the attention options, print the problem's key, the configuration it would "
                                    "get and which key fields of the nearest entries missed.")
    tb.add_argument("--kernel", choices=("gemm", "attention", "moe"), default=None, help="one family (default all)")
    tb.add_argument("--json", action="store_true", help="machine-readable output")
    tb.add_argument("--gpu", default=None, help="GPU name of the key (default: this GPU, else NVIDIA H200)")
    tb.add_argument("--m", type=int, default=None, help="GEMM rows")
    tb.add_argument("--n", type=int, default=None, help="GEMM columns")
    tb.add_argument("--k", type=int, default=None, help="GEMM reduction length")
    tb.add_argument("--dtype", type=dtype_arg, default="bf16", help="element type (default bf16)")
    tb.add_argument("--out-dtype", type=dtype_arg, default=None, help="GEMM C/D element type (default: --dtype)")
    tb.add_argument("--layout", type=layout_arg, default="tn", help="GEMM layout, any case (default tn)")
    _add_attention_args(tb, required=False, dtype=False)
    tb.set_defaults(func=cmd_table)

    ip = sub.add_parser("include-path", help="print the CUTLASS/CuTe include flags a generated .cu compiles with",
                        description="Print -I flags for the CUTLASS/CuTe headers (CUTLASS_PATH, else the "
                                    "nvidia-cutlass wheel), for vendoring a generated .cu: "
                                    "nvcc ... $(argus-cutlass include-path) -c KERNEL.cu")
    ip.add_argument("--dirs", action="store_true", help="the directories, one a line (for CMake and friends)")
    ip.set_defaults(func=cmd_include_path)

    v = sub.add_parser("verify", help="verify a configuration (JSON file, or - for stdin)")
    v.add_argument("config", help="a JSON file (or - for stdin) holding a GemmConfig object, e.g. "
                                   "{\"tile_m\": 128, \"tile_n\": 128, \"cluster_m\": 1, \"stages\": 6}: "
                                   "fields not given take GemmConfig's defaults (tn bf16, 128x256x64, cluster 2x1, "
                                   "4 stages, cooperative); or a gemm record (its \"config\" key)")
    v.add_argument("--json", action="store_true",
                   help='machine-readable report: "ok" = no violation; "complete" = no SMT "unknown" and every '
                        'obligation proved, violated or skipped ("undecided" lists any other); violations with '
                        'counterexamples, proofs, skipped checks, tier times')
    v.add_argument("--no-smt", action="store_true", help="skip the SMT tier (z3); what it would check is listed as "
                                                         "SKIPPED (not proved)")
    v.add_argument("--verbose", action="store_true", help="list every proof (by default only violations, unknowns "
                                                          "and a count of the proofs)")
    v.add_argument("--allow-unknown", action="store_true",
                   help="exit 0 when the only findings are unknown (not proved) obligations")
    v.add_argument("--smt-timeout-ms", type=int, default=None,
                   help="per-query z3 timeout; a timeout is reported as unknown (default 5000)")
    v.set_defaults(func=cmd_verify)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _doing(f"running `{args.command}`")
    if getattr(args, "out_dtype", "x") is None:
        # D defaults to the input type; an unsupported --dtype is reported once, for --dtype
        args.out_dtype = args.dtype if args.dtype in ("bf16", "fp16") else "bf16"
    try:
        if getattr(args, "seed", None) is not None:  # every command's --seed, named as typed, before any build
            from argus_cutlass.settings import check_seed

            check_seed(args.seed)
        return args.func(args)
    except ArgusError as exc:
        print(f"argus-cutlass: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\nargus-cutlass: interrupted (Ctrl-C) while {_ACTIVITY[0]}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
