"""Silicon runner of the attention mutant suite: build every mutant WITHOUT the verifier and run it.

The attention twin of :mod:`argus_cutlass.testing.gpu`. For each mutant of the attention catalogue
(:func:`~argus_cutlass.testing.mutants.load_catalogue` with ``family="attention"``) and one baseline
per base configuration the mutants use:

1. **plan** (:func:`plan_jobs`): the (mutated) program, its configuration ``m.config`` and the
   problems of that configuration (:func:`problems_for`);
2. **print** (:func:`render_job`): :func:`~argus_cutlass.render.attention.render_attention` with no
   proof lines, never the verifier; a program the template cannot print
   (``ConfigError("render.program")``) is the outcome ``not_printable``;
3. **build** (:func:`build_jobs`): every printed ``.cu`` through
   :func:`~argus_cutlass.build.nvcc.compile_many` (parallel nvcc, the content-addressed cache);
   a refused build is ``compile_fail`` with the printed ``static_assert`` messages that fired;
4. **run** (:func:`run_job`): each built kernel in a **spawned child process**
   (:class:`~argus_cutlass.kernels.attention.library.AttentionKernelLibrary` +
   :func:`~argus_cutlass.kernels.attention.check.run_and_check`: NaN-padded Q/K/V, NaN in KV slots
   past ``seqused_k``, O / LSE poisoned with NaN, fp32 reference). The child reports each problem
   before it starts; a problem with no result ``kernel_timeout_s`` seconds later is ``hung`` and
   the child is killed (a hung kernel's context dies with it).

Outcomes per problem, and of a kernel (the most severe over its problems, in this order):

``hung``          no result before the deadline (the child is killed; later problems are not run);
``crashed``       the child died, CUDA reported a fault (illegal address...) or the entry refused
                  the launch (``LaunchError``); later problems are not run after a CUDA fault;
``wrong``         a check failed: NaN / unwritten O, element or norm mismatch, LSE mismatch,
                  an empty row not exactly 0 / ``-inf``, or a write into the head-dim padding;
``error``         the runner could not run the kernel (no torch, no sm_90 GPU, library not
                  loadable, child silent while starting): no verdict;
``benign``        every check of every problem passed.

Before any run: ``not_printable`` (the template refused the program) and ``compile_fail``.
The baselines must all be ``benign`` (and the first one again after the mutants, id
``<baseline>_after``), else the mutant outcomes mean nothing (:func:`bad_baselines`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from argus_cutlass.errors import CompileError, ConfigError
from argus_cutlass.kernels.attention.config import AttentionConfig
from argus_cutlass.kernels.attention.problem import AttentionProblem
from argus_cutlass.testing import gpu as gemm_runner
from argus_cutlass.testing.gpu import Job, static_assert_messages
from argus_cutlass.testing.mutants import Mutant

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "OUTCOMES",
    "SHOWN",
    "Build",
    "Job",
    "Result",
    "bad_baselines",
    "build_jobs",
    "markdown_table",
    "overall",
    "plan_jobs",
    "problems_for",
    "render_job",
    "run_job",
    "run_suite",
    "write_results",
]

#: seconds a problem may run (inputs, kernel, reference, compare) before the kernel counts as hung
DEFAULT_TIMEOUT_S = 20.0
#: seconds a child may take to start (spawn, import torch, initialise CUDA, load the library)
SETUP_TIMEOUT_S = 180.0
#: every outcome, most severe run outcome first (:func:`overall` picks the first one present)
OUTCOMES = ("hung", "crashed", "wrong", "error", "benign", "compile_fail", "not_printable")
#: outcomes that show a mutant on silicon (or stop it at compile time)
SHOWN = ("wrong", "hung", "crashed", "compile_fail")
#: batch, query heads and kv heads of the fixed-length problems (GQA 2:1)
BATCH, HEADS, KV_HEADS = 2, 4, 2
#: varlen batches: lengths mixing 0, 1, 129 and 1000 (Lq < Lk, Lq > Lk: rows with no key when causal)
VARLEN_Q = (0, 1, 129, 1000, 129, 1000)
VARLEN_K = (129, 1, 1000, 1000, 0, 77)
#: keys used per varlen batch (<= VARLEN_K; NaN stored past it)
VARLEN_USED = (0, 1, 517, 1000, 0, 77)


def problems_for(cfg: AttentionConfig) -> list[tuple[str, AttentionProblem]]:
    """The labelled problems a kernel of ``cfg`` runs (its head dim, dtype, mask and length mode).

    Fixed lengths: batch 2, 4 query heads on 2 kv heads, ``(Lq, Lk)`` = (1000, 1000), (333, 1000),
    (1000, 77); a ``seqused_k`` problem (batches using 0, 77 and 517 of 1000 stored keys); and
    ``multi_tile``: 32 query heads on 4 kv heads (8:1), 1000 x 1000, several hundred tiles, more
    than one per CTA (the persistent walk and the pipeline states across tiles). Varlen: packed
    batches of :data:`VARLEN_Q` / :data:`VARLEN_K` queries / keys, with and without
    :data:`VARLEN_USED`, and with 8:1 GQA.

    >>> [label for label, _ in problems_for(AttentionConfig(head_dim=64))]
    ['sq1000_sk1000', 'sq333_sk1000', 'sq1000_sk77', 'seqused_k', 'multi_tile']
    >>> [p.describe() for _, p in problems_for(AttentionConfig(causal=True, varlen=True))][:1]
    ['b6 h4/2 varlen(6) d128 bf16 causal']
    """
    d, dt, causal = cfg.head_dim, cfg.dtype, cfg.causal
    if cfg.varlen:
        out = [
            ("varlen", AttentionProblem.varlen_problem(VARLEN_Q, VARLEN_K, HEADS, KV_HEADS, d, dt, causal)),
            ("varlen_seqused_k", AttentionProblem.varlen_problem(
                VARLEN_Q, VARLEN_K, HEADS, KV_HEADS, d, dt, causal, seqused_k=VARLEN_USED)),
            ("varlen_gqa8", AttentionProblem.varlen_problem(VARLEN_Q, VARLEN_K, 16, 2, d, dt, causal)),
        ]
    else:
        out = [(f"sq{sq}_sk{sk}", AttentionProblem(BATCH, HEADS, KV_HEADS, sq, sk, d, dt, causal))
               for sq, sk in ((1000, 1000), (333, 1000), (1000, 77))]
        out.append(("seqused_k", AttentionProblem(3, HEADS, KV_HEADS, 333, 1000, d, dt, causal,
                                                  seqused_k=(0, 77, 517))))
        out.append(("multi_tile", AttentionProblem(BATCH, 32, 4, 1000, 1000, d, dt, causal)))
    return [(label, p.validate()) for label, p in out]


@dataclass
class Build:
    """One job's print and build: the ``.so`` (None when not printable or not built), nvcc's wall
    seconds, ptxas resources, the failure (``render.program`` / nvcc rule and message) and every
    ``static_assert`` message that fired."""

    id: str
    so_path: str | None
    seconds: float = 0.0
    cached: bool = False
    registers: int | None = None
    spill_bytes: int | None = None
    printable: bool = True
    rule: str = ""
    error: str = ""
    static_asserts: list[str] = field(default_factory=list)


@dataclass
class Result:
    """One job's outcome (see the module docstring) with one row per problem run."""

    id: str
    cls: str
    rule: str
    base: str
    outcome: str
    problems: list[dict[str, Any]]
    build: dict[str, Any]
    story: str = ""
    benign_reason: str = ""

    @property
    def shown(self) -> bool:
        return self.outcome in SHOWN


def plan_jobs(mutants: Sequence[Mutant] | None = None) -> list[Job]:
    """Baselines (one per base configuration the mutants use, first) then the mutants (default:
    the whole attention catalogue); :func:`argus_cutlass.testing.gpu.plan_jobs` for the family."""
    return gemm_runner.plan_jobs(mutants, family="attention")


def render_job(job: Job) -> str:
    """The job's ``.cu``, printed by the production template WITHOUT the verifier (no proof lines).

    Raises:
        ConfigError: ``render.program`` when the template cannot print the (mutated) program.
    """
    from argus_cutlass.render.attention import render_attention

    return render_attention(job.program, ())


def build_jobs(jobs: Sequence[Job], work: str | Path, *, workers: int | None = None,
               use_cache: bool = True) -> dict[str, Build]:
    """Print every job (``<work>/<id>.cu``) and compile the printable ones in parallel
    (``workers`` nvcc processes, default the CPU count; through the content-addressed cache
    unless ``use_cache`` is False). A failed build's full log is ``<work>/<id>.log``.

    Raises:
        ToolchainError: nvcc or the CUTLASS headers are missing (before any build).
    """
    from argus_cutlass.build.nvcc import CompileJob, compile_many

    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    builds: dict[str, Build] = {}
    printed: list[tuple[Job, str]] = []
    for job in jobs:
        try:
            source = render_job(job)
        except ConfigError as exc:
            builds[job.id] = Build(job.id, None, printable=False, rule=exc.rule, error=str(exc))
            continue
        (work / f"{job.id}.cu").write_text(source)
        printed.append((job, source))
    compile_jobs = [CompileJob.for_program(src, job.name, job.program.fingerprint()) for job, src in printed]
    artifacts = compile_many(compile_jobs, workers, use_cache=use_cache, return_exceptions=True)
    for (job, _), art in zip(printed, artifacts):
        if isinstance(art, CompileError):
            (work / f"{job.id}.log").write_text(art.log)
            builds[job.id] = Build(job.id, None, rule=art.rule, error=str(art)[:3000],
                                   static_asserts=static_assert_messages(art.log))
        else:
            builds[job.id] = Build(job.id, str(art.path), art.seconds, art.cached, art.registers,
                                   art.spill_bytes)
    return builds


# ------------------------------------------------------------------------------------ one run


def _child(conn: Any, so_path: str, name: str, cfg: AttentionConfig,
           problems: Sequence[tuple[str, AttentionProblem]], seed: int) -> None:
    """Run ``problems`` on the library in this (spawned) process; messages to the parent:
    ``{"ready": ...}`` after the setup, ``{"start": label}`` before each problem, one result row
    per problem, then None."""
    started = False
    try:
        import torch

        from argus_cutlass.errors import LaunchError, ProblemError
        from argus_cutlass.kernels.attention.check import run_and_check
        from argus_cutlass.kernels.attention.library import AttentionKernelLibrary

        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")
        cap = torch.cuda.get_device_capability()
        if cap != (9, 0):
            raise RuntimeError(f"device {torch.cuda.get_device_name()} is sm_{cap[0]}{cap[1]}, not sm_90")
        x = torch.ones(64, 64, device="cuda")
        float((x @ x).sum())  # CUDA context and cuBLAS up before the first deadline
        lib = AttentionKernelLibrary(so_path, name, cfg)
        conn.send({"ready": True, "device": torch.cuda.get_device_name(), "smem_bytes": lib.smem_bytes(),
                   "threads": lib.threads()})
        for label, problem in problems:
            row: dict[str, Any] = {"problem": label, "describe": problem.describe()}
            conn.send({"start": label})
            started = True
            t0 = time.perf_counter()
            try:
                res = run_and_check(lib, problem, seed)
            except ProblemError as exc:  # the runner's problem set, not the kernel
                conn.send({**row, "outcome": "error", "detail": f"{exc.rule}: {exc}"[:2000]})
                continue
            except LaunchError as exc:
                conn.send({**row, "outcome": "crashed", "detail": f"{exc.rule}: {exc}"[:2000]})
                if exc.rule == "launch.cuda":
                    break
                continue
            except RuntimeError as exc:  # torch: a device fault (illegal address...), sticky
                conn.send({**row, "outcome": "crashed", "detail": f"{type(exc).__name__}: {exc}"[:2000]})
                break
            conn.send({**row, "outcome": "benign" if res.passed else "wrong", "summary": res.summary(),
                       "check": res.as_dict(), "seconds": time.perf_counter() - t0})
    except BaseException as exc:  # noqa: BLE001 - a fault is a result; before any problem it is the runner's
        conn.send({"problem": "?" if started else "setup", "outcome": "crashed" if started else "error",
                   "detail": f"{type(exc).__name__}: {str(exc)[:2000]}"})
    finally:
        conn.send(None)
        conn.close()
        os._exit(0)  # skip interpreter teardown: a hung kernel's context dies with the process


def run_job(so_path: str, name: str, cfg: AttentionConfig,
            problems: Sequence[tuple[str, AttentionProblem]] | None = None, *, seed: int = 0,
            kernel_timeout_s: float = DEFAULT_TIMEOUT_S, setup_timeout_s: float = SETUP_TIMEOUT_S
            ) -> list[dict[str, Any]]:
    """Run one built kernel over ``problems`` (default :func:`problems_for` ``cfg``) in a child
    started with ``multiprocessing``'s ``spawn`` (a fresh interpreter: no CUDA state inherited).
    The parent never initialises CUDA. One row per problem run (``problem``, ``outcome``, and
    ``summary`` / ``check`` or ``detail``); the run stops at a hung problem or a CUDA fault.

    A problem with no result ``kernel_timeout_s`` seconds after the child announced it is
    ``hung`` and the child is killed; a child silent for ``setup_timeout_s`` while starting is an
    ``error`` row (problem ``setup``).
    """
    from argus_cutlass.testing.gpu import run_child_protocol

    probs = tuple(problems_for(cfg) if problems is None else problems)
    return run_child_protocol(_child, (so_path, name, cfg, probs, seed), setup_timeout_s=setup_timeout_s,
                              problem_timeout_s=lambda _problem: kernel_timeout_s)


def overall(rows: Sequence[dict[str, Any]]) -> str:
    """A kernel's outcome over its problem rows: the most severe present (:data:`OUTCOMES`
    order), ``benign`` only when every row is, ``error`` for no rows.

    >>> overall([{"outcome": "benign"}, {"outcome": "wrong"}, {"outcome": "hung"}])
    'hung'
    >>> overall([{"outcome": "benign"}]), overall([])
    ('benign', 'error')
    """
    present = {r["outcome"] for r in rows}
    for o in OUTCOMES:
        if o != "benign" and o in present:
            return o
    return "benign" if rows else "error"


def run_suite(mutants: Sequence[Mutant] | None = None, *, work: str | Path = "/tmp/argus_attention_mutants",
              workers: int | None = None, kernel_timeout_s: float = DEFAULT_TIMEOUT_S, seed: int = 0,
              use_cache: bool = True, log: Any = print) -> list[Result]:
    """Plan, print, build (parallel) and run the baselines and ``mutants`` (default: the attention
    catalogue).

    Returns one :class:`Result` per job, baselines first, then a final re-run of the first
    baseline (id ``<baseline>_after``) showing the GPU was still sound after the mutants.
    """
    jobs = plan_jobs(mutants)
    t0 = time.perf_counter()
    builds = build_jobs(jobs, work, workers=workers, use_cache=use_cache)
    built = sum(b.so_path is not None for b in builds.values())
    unprintable = sum(not b.printable for b in builds.values())
    log(f"built {built}/{len(jobs)} ({unprintable} not printable) in {time.perf_counter() - t0:.1f} s")
    results: list[Result] = []
    for i, job in enumerate([*jobs, jobs[0]]):
        b = builds[job.id]
        rid = job.id if i < len(jobs) else f"{job.id}_after"
        m = job.mutant
        rows: list[dict[str, Any]] = []
        if not b.printable:
            outcome = "not_printable"
        elif b.so_path is None:
            outcome = "compile_fail"
        else:
            rows = run_job(b.so_path, job.name, job.config, seed=seed, kernel_timeout_s=kernel_timeout_s)
            outcome = overall(rows)
        res = Result(rid, m.cls if m else "baseline", m.rule if m else "-", job.base, outcome, rows,
                     asdict(b), m.story if m else "", m.benign_reason if m else "")
        results.append(res)
        log(f"{rid:36s} {outcome:14s} {_numbers(res)}")
    return results


def bad_baselines(results: Sequence[Result]) -> list[str]:
    """Ids of the baselines (and the ``_after`` re-run) that are not ``benign``: when any, the
    mutant outcomes of the run mean nothing."""
    return [r.id for r in results if r.cls == "baseline" and r.outcome != "benign"]


def _row_text(row: dict[str, Any]) -> str:
    c = row.get("check")
    if c is None:
        return f"{row['problem']}: {row['outcome']} {row.get('detail', '')[:160]}"
    rel = c.get("rel_error")
    rel_text = "inf" if rel is None else f"{rel:.1e}"
    text = (f"{row['problem']}: {'PASS' if c['passed'] else 'FAIL'} rel {rel_text}, "
            f"bad {c['element_errors']}, NaN {c['nan_count']}, oob {c['out_of_bounds_writes']}, "
            f"lse_bad {c['lse_errors']}")
    if c.get("empty_rows"):
        text += f", empty {c['empty_rows']} (bad {c['empty_row_errors']})"
    return text


def _numbers(r: Result) -> str:
    if not r.problems:  # not printed or not built
        sa = r.build.get("static_asserts") or []
        if sa:
            return f"static_assert: {sa[0]}"
        lines = [ln.strip() for ln in r.build.get("error", "").splitlines() if ln.strip()]
        first = next((ln for ln in lines if "error" in ln.lower()), lines[0] if lines else "")
        return f"{r.build.get('rule', '')}: {first[:200]}" if first else r.build.get("rule", "")
    return "; ".join(_row_text(row) for row in r.problems)


def markdown_table(results: Sequence[Result]) -> str:
    """The results as a markdown table: id, class, rule, outcome, per-problem numbers, and the
    catalogue's benign reason for a benign mutant."""
    lines = ["| mutant | class | rule | silicon | per problem | benign reason |", "|---|---|---|---|---|---|"]
    for r in results:
        note = " ".join(_numbers(r).replace("|", "/").split())
        reason = " ".join(r.benign_reason.replace("|", "/").split()) if r.outcome == "benign" else ""
        lines.append(f"| `{r.id}` | {r.cls} | `{r.rule}` | {r.outcome} | {note} | {reason} |")
    return "\n".join(lines) + "\n"


def write_results(results: Sequence[Result], out: str | Path,
                  stem: str = "mutants_attention_gpu") -> tuple[Path, Path]:
    """``<out>/<stem>.json`` (every field) and ``<out>/<stem>.md`` (the table)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    j, md = out / f"{stem}.json", out / f"{stem}.md"
    j.write_text(json.dumps([asdict(r) for r in results], indent=1, default=str))
    md.write_text(markdown_table(results))
    return j, md
