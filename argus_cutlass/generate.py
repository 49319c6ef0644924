"""The one orchestrator: configure -> build program -> verify -> render -> compile -> load -> check -> time.

Every entry point runs its kernels through here: the CLI (``argus-cutlass gemm``), the Python API
(:mod:`argus_cutlass.api`), the agent (``agent/measure.py``, ``agent/tune.py``) and the benchmarks
(``bench/agent_eval.py``, ``bench/test_gemm_bench.py``). There is one function per stage:

=================  =========================================================================
stage              function (GEMM family, ``argus_cutlass.kernels.gemm``)
=================  =========================================================================
configure          :func:`configure`: experience store -> shipped table -> heuristic
build program      :func:`build`: ``kernels.gemm.program.build_program(cfg, problem)``
verify             :func:`verify` (``argus_cutlass.verify.verify_gemm``) and :func:`require_proved`
render             :func:`render`: ``render.gemm.render_gemm(program, proved lines)``
compile            :func:`compile_kernel` / :func:`compile_many`: nvcc through the content-addressed
                   cache (the key hashes the source and the program's full fingerprint)
load               :func:`load`: ``kernels.gemm.library.GemmKernelLibrary``
check              :func:`check`: ``kernels.gemm.check.run_and_check`` against the fp32 reference
time               :func:`time_kernel`: ``kernels.gemm.check.time_gemm``; :func:`baseline`: cuBLAS
                   (``timing``: per launch or from a CUDA graph over rotated operands: ``ROTATE_BYTES``,
                   ``MAX_SETS``, :func:`graph_calls`, :func:`torch_graph_ms`, re-exported for the benchmarks)
=================  =========================================================================

and two drivers: :func:`run` (one problem, every stage, for the CLI) and :func:`run_many` (a batch
of configurations for one problem, compiled in parallel, for the agent and the benchmarks).
:func:`generate` is the front half (build, verify, render) and :func:`build_many` the front half
plus compile and load, both used by the API and the tests.

The kernel name is the program's (:meth:`argus_cutlass.dsl.ir.Program.kernel_name`: a readable
label of the configuration and a hash of every node). A verifier ``unknown``, or an obligation the
verifier left undecided (no outcome recorded), blocks rendering unless ``allow_unknown`` is set
(:class:`~argus_cutlass.errors.UnprovedError` names what was not proved); checks deliberately skipped
(the SMT tier off or z3 missing) do not block, and the ``.cu`` header lists them as not checked. A
program is built for its problem: the symbolic-K proofs are stated for ``K < 2**bound_bits`` with
``bound_bits`` large enough for the problem's K, and the built kernel refuses a larger K (return
code 3, ``problem.k_range``). A GEMM problem that breaks only TMA's alignment rules (a leading
dimension or contiguous extent that is not a multiple of 16 bytes) is built with aligned
staging of those operands (``GemmProblem.staging``; the program's StageCopy nodes, verified by the
``stage.*`` rules); the record's ``path`` says which path the kernel runs and why.

>>> from argus_cutlass.kernels.gemm.config import GemmConfig
>>> kernel = generate(GemmConfig(layout="nt"), smt=False)
>>> kernel.name == kernel.program.kernel_name() and kernel.name.startswith("argus_gemm_sm90_bf16_bf16_nt_")
True
>>> f"int {kernel.name}(" in kernel.source and kernel.program.fingerprint()[:16] in kernel.source
True
"""

from __future__ import annotations

import functools
import hashlib
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from argus_cutlass.errors import (
    ArgusError,
    CompileError,
    ConfigError,
    DslError,
    UnprovedError,
    VerificationError,
    undecided_text,
    unknown_text,
)
from argus_cutlass.kernels.attention.config import AttentionConfig
from argus_cutlass.kernels.attention.problem import AttentionProblem
from argus_cutlass.kernels.gemm.baseline import torch_graph_ms
from argus_cutlass.kernels.gemm.check import GRAPH_CALLS, MAX_SETS, ROTATE_BYTES, graph_calls
from argus_cutlass.runtime.timing import DEFAULT_TIMING, TIMINGS
from argus_cutlass.settings import as_index, check_workers
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.problem import STAGEABLE, GemmProblem

#: a configuration / problem of any family
Config = GemmConfig | AttentionConfig
Problem = GemmProblem | AttentionProblem

__all__ = [
    "GeneratedKernel", "Options", "RunResult", "baseline", "build", "build_jobs", "build_many", "check", "compile_kernel",
    "compile_many", "configure", "generate", "kernel_cached", "kernel_label", "kernel_name", "load", "render", "require_proved", "run",
    "check_overrides", "parse_overrides", "run_many", "time_kernel", "verify", "with_overrides", "write_sources",
    # the time stage's rotation and graph rules, for benchmarks that interleave ours and cuBLAS in one process
    "DEFAULT_TIMING", "GRAPH_CALLS", "MAX_SETS", "ROTATE_BYTES", "TIMINGS", "graph_calls", "torch_graph_ms",
]

#: where a configuration came from (:func:`configure`)
CONFIG_SOURCES = ("store", "shipped", "heuristic", "costmodel", "forced", "given")
#: family -> the baseline :func:`baseline` times (the record's key prefix)
VENDOR = {"gemm": "cublas", "attention": "cudnn", "moe": "grouped_mm"}


def problem_flops(problem: Problem) -> float:
    """The problem's FLOP count (the MoE problem's is a method of its routing; uniform here)."""
    f = problem.flops
    return float(f() if callable(f) else f)


# ---------------------------------------------------------------------------------------- stages


def family_of(obj: Any) -> str:
    """``"attention"``, ``"moe"`` or ``"gemm"``: the family of a configuration, problem or program."""
    if isinstance(obj, (AttentionConfig, AttentionProblem)):
        return "attention"
    from argus_cutlass.kernels.moe.config import MoEConfig
    from argus_cutlass.kernels.moe.problem import MoEProblem

    if isinstance(obj, (MoEConfig, MoEProblem)):
        return "moe"
    fam = getattr(obj, "family", None)
    return fam if isinstance(fam, str) else "gemm"


def configure(problem: Problem, *, heuristic: bool = False, gpu: str | None = None,
              store: Any = None) -> Any:
    """The configuration for ``problem``, where it came from, and why.

    Args:
        heuristic: skip the tables (source ``"forced"``).
        gpu: the GPU name of the keys (default: the current GPU, or ``NVIDIA H200`` without one).
        store: the user's :class:`~argus_cutlass.agent.store.ExperienceStore` (default: its path).

    Returns:
        a :class:`~argus_cutlass.agent.store.Lookup`, which unpacks as ``(config, source)``; source
        ``"store"`` (the user's experience store, filled by ``tune``), ``"shipped"``
        (``agent/tuned_h200.json``), ``"costmodel"`` (no usable tuned entry for the shape bucket, GEMM:
        :func:`argus_cutlass.agent.costmodel.costmodel_choice`, the default untuned rule),
        ``"heuristic"`` (no usable tuned entry: attention, MoE, a GEMM with ``ARGUS_GEMM_UNTUNED=heuristic``) or
        ``"forced"`` (``heuristic=True``); ``.detail`` says which key was found or missed and why
        (e.g. an H100 using an entry tuned on an H200). Every family looks up user store -> shipped
        table, exact GPU first, then another GPU of the same architecture; tuned entries are used
        only when the family's feasibility check accepts them.
    """
    from argus_cutlass.agent import store as tables

    if isinstance(problem, AttentionProblem):
        return tables.lookup_attention_config(problem, heuristic=heuristic, gpu=gpu, store=store)
    if family_of(problem) == "moe":
        return tables.lookup_moe_config(problem, heuristic=heuristic, gpu=gpu, store=store)
    from argus_cutlass.kernels.gemm.heuristics import default_config

    p = problem
    if heuristic:
        return tables.Lookup.forced(default_config(p.m, p.n, p.k, p.dtype, p.out_dtype, p.layout))
    return tables.lookup_config("gemm", p.m, p.n, p.k, p.dtype, p.out_dtype, p.layout, gpu=gpu, store=store)


def build(cfg: Config, problem: Problem | None = None) -> Any:
    """The DSL program of ``cfg`` for ``problem`` (``kernels.<family>.program.build_program``).

    Raises:
        ConfigError: the configuration has no program (e.g. ``smem.atom``), or the problem
            disagrees with it (``attention.problem``).
        DslError: a node of the program is malformed.
    """
    if isinstance(cfg, AttentionConfig):
        from argus_cutlass.kernels.attention.program import build_program as build_attention

        return build_attention(cfg, problem)
    if family_of(cfg) == "moe":
        from argus_cutlass.kernels.moe.program import build_layer

        if problem is None:
            raise ConfigError("moe.problem", "an MoE layer is built for its problem (E, k, H, I are compile-time)")
        return build_layer(cfg, problem)
    from argus_cutlass.kernels.gemm.program import build_program

    if isinstance(problem, GemmProblem) and problem.violations(STAGEABLE) == []:
        problem.check_walk(cfg)  # the printed scheduler counts the problem's work units in int
    return build_program(cfg, problem)


def gemm_build_problem(problem: GemmProblem) -> GemmProblem | None:
    """The problem a GEMM kernel must be built for to run ``problem``: None (the direct TMA path and
    the default proof range, K < 2^K_BOUND_BITS, shared by every such problem) unless its K needs a
    wider range or it needs aligned staging (``problem.staging()`` not empty: the program then gets
    the StageCopy nodes of those operands). The program depends on the build problem only through
    its proof range and its staged operands, so every problem with the same ones gets the same kernel.
    Requires a problem ``validate_any`` accepts.

    >>> gemm_build_problem(GemmProblem(4096, 4096, 4096)) is None
    True
    >>> gemm_build_problem(GemmProblem(300, 4096, 4096, layout="nt")).staging()[0].name
    'A'
    """
    from argus_cutlass.kernels.gemm.program import K_BOUND_BITS

    return problem if problem.k >= 2**K_BOUND_BITS or problem.staging() else None


def gemm_program_key(build_problem: GemmProblem | None) -> tuple[int | None, tuple[str, ...]]:
    """What a GEMM program depends on besides its configuration, for a build problem of
    :func:`gemm_build_problem`: the bits of K when it needs a wider proof range than the default
    (None: K < 2^K_BOUND_BITS) and the staged operands (``()``: the direct TMA path).

    >>> gemm_program_key(None), gemm_program_key(GemmProblem(4096, 33, 2**25))
    ((None, ()), (26, ('D',)))
    """
    from argus_cutlass.kernels.gemm.program import K_BOUND_BITS

    if build_problem is None:
        return None, ()
    k = build_problem.k
    return (k.bit_length() if k >= 2**K_BOUND_BITS else None), tuple(s.name for s in build_problem.staging())


@functools.lru_cache(maxsize=8192)
def kernel_name(cfg: GemmConfig, problem: GemmProblem | None = None) -> str:
    """The kernel name of ``cfg``'s program for ``problem`` (memoised).

    >>> kernel_name(GemmConfig())[:-8]
    'argus_gemm_sm90_bf16_bf16_tn_128x256x64_c2x1_s4_coop_e128x32_rn1_'
    """
    return build(cfg, problem).kernel_name()


def kernel_label(cfg: GemmConfig) -> str:
    """``argus_`` + the readable part of the kernel name, without the program hash: the names
    kernels had before they carried it (measured tables of that time are keyed by them).

    >>> kernel_label(GemmConfig())
    'argus_gemm_sm90_bf16_bf16_tn_128x256x64_c2x1_s4_coop_e128x32_rn1'
    """
    from argus_cutlass.kernels.gemm.program import program_label

    return f"argus_{program_label(cfg)}"


def _z3_installed() -> bool:
    from argus_cutlass.errors import ToolchainError
    from argus_cutlass.verify.smt import require_z3

    try:
        require_z3()
    except ToolchainError:
        return False
    return True


_Z3 = functools.cache(_z3_installed)


def verify(program: Any, *, smt: bool | None = True, smt_timeout_ms: int | None = None,
           notes: list[str] | None = None) -> Any:
    """The verifier's report on ``program`` (never raises for a bad program).

    Args:
        smt: run the z3 tier; ``None``: run it when z3-solver is installed, else skip it and
            append a note to ``notes``. With the tier off the report's ``skipped`` records name
            what it would have checked, with the reason (``--no-smt`` or z3-solver missing).
        smt_timeout_ms: per-query z3 timeout (default ``ARGUS_SMT_TIMEOUT_MS``); a timeout is an
            ``unknown``, never a proof.

    Raises:
        ToolchainError: ``toolchain.z3`` when ``smt`` is True and z3-solver is missing.
        ConfigError: ``config.smt_timeout`` when ``smt_timeout_ms`` is given and below 1 (the environment's
            value is checked by :func:`argus_cutlass.settings.settings`).
    """
    timeout = None if smt_timeout_ms is None else as_index(smt_timeout_ms)
    if smt_timeout_ms is not None and not (timeout is not None and timeout >= 1):
        raise ConfigError("config.smt_timeout", f"smt_timeout_ms {smt_timeout_ms!r} (--smt-timeout-ms "
                          f"{smt_timeout_ms} on the command line): a z3 timeout is a positive number of milliseconds",
                          hint="e.g. 5000 (the default); smt=False (--no-smt) turns the SMT tier off")
    if family_of(program) == "attention":
        from argus_cutlass.verify.attention import verify_attention as verify_family
    elif family_of(program) == "moe":
        from argus_cutlass.verify.moe import verify_moe as verify_family
    else:
        from argus_cutlass.verify import verify_gemm as verify_family
    no_z3 = False
    if smt is None:
        smt = _Z3()
        no_z3 = not smt
        if no_z3 and notes is not None:
            notes.append("SMT tier skipped (z3-solver is not installed); arithmetic and enumeration "
                         "tiers ran")
    smt_timeout_ms = timeout
    kwargs = {"smt": smt} if smt_timeout_ms is None else {"smt": smt, "smt_timeout_ms": smt_timeout_ms}
    from argus_cutlass.settings import settings

    cfg = settings()
    if not cfg.report_cache:
        return _skip_reason(verify_family(program, **kwargs), no_z3)
    fingerprint = program.fingerprint()
    key = hashlib.sha256(f"{fingerprint}|{_verifier_source_hash()}|{smt}|{smt_timeout_ms}".encode()).hexdigest()
    path = cfg.cache_dir / "reports" / f"{key}.json"
    cached = _cached_report(path, key, fingerprint, program.kernel_name())
    if cached is not None:
        return _skip_reason(cached, no_z3)
    report = verify_family(program, **kwargs)
    if report.verified and report.proofs:  # only complete proofs are reused; rejections are recomputed
        import json

        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            data = json.loads(report.to_json())
            data.update(cache_key=key, fingerprint=fingerprint)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
            os.replace(tmp, path)
        except OSError:
            pass  # a read-only cache only costs the next process a verification
    return _skip_reason(report, no_z3)


#: the reason a Skipped record gives when ``verify(smt=None)`` found no z3 (the verifier's own says --no-smt)
Z3_MISSING = "SMT tier skipped: z3-solver not installed"


def _skip_reason(report: Any, no_z3: bool) -> Any:
    """``report`` with its ``skipped`` records' reason saying z3-solver is missing when ``no_z3`` (the
    verifier only knows the tier was off; ``smt=None`` without z3 is why)."""
    if not no_z3 or not report.skipped:
        return report
    import dataclasses

    return dataclasses.replace(report, skipped=tuple(dataclasses.replace(s, reason=Z3_MISSING)
                                                     for s in report.skipped))


@functools.lru_cache(maxsize=1)
def _verifier_source_hash() -> str:
    """A hash of the code and data a verification depends on: every module of the package (the
    verifier, the hardware model, the layout algebra, the DSL), the invariant catalogues and the z3
    and numpy versions. A cached report is reused only when this and the program's fingerprint are
    the same."""
    import argus_cutlass
    import numpy
    from argus_cutlass import invariants

    try:
        import z3

        z3_version = z3.get_version_string()
    except ImportError:
        z3_version = "none"
    h = hashlib.sha256(f"{argus_cutlass.__version__}|z3 {z3_version}|numpy {numpy.__version__}".encode())
    for root, pattern in ((Path(argus_cutlass.__file__).parent, "**/*.py"), (Path(invariants.__file__).parent, "*.toml")):
        for f in sorted(root.glob(pattern)):
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def _cached_report(path: Path, key: str, fingerprint: str, kernel: str) -> Any:
    """The verified report stored at ``path`` for exactly this key, program fingerprint and kernel, or
    None: absent, unreadable, written for another key or program, or not a complete proof (any
    violation, unknown, undecided obligation or not-proved line, or no proof at all) -- such a file is
    never trusted. Its ``skipped`` records (the SMT tier off) come back with it."""
    import json

    from argus_cutlass.verify.report import Obligation, Proof, Skipped, VerificationReport

    try:
        d = json.loads(path.read_text())
        if (d.get("cache_key") != key or d.get("fingerprint") != fingerprint or d.get("kernel") != kernel
                or d.get("verified") is not True or d.get("violations") or d.get("unknowns")
                or d.get("not_proved") or d.get("undecided") or not d.get("proofs") or not d.get("obligations")):
            return None
        report = VerificationReport(
            kernel=d["kernel"], obligations=tuple(Obligation(**o) for o in d["obligations"]),
            proofs=tuple(Proof(**p) for p in d["proofs"]), violations=(), elapsed_s=float(d["elapsed_s"]),
            notes=tuple(d.get("notes", ())) + ("report from the cache of verified programs (same program "
                                                "fingerprint, same verifier source); ARGUS_REPORT_CACHE=0 re-verifies",),
            unknowns=(), tier_seconds=dict(d.get("tier_seconds", {})),
            skipped=tuple(Skipped(**s) for s in d.get("skipped", ())))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return report if report.verified else None


def require_proved(report: Any, *, allow_unknown: bool = False) -> None:
    """Refuse a report that does not license rendering.

    A report whose only gaps are ``skipped`` records (the SMT tier off: ``--no-smt``, or z3-solver
    missing under ``smt=None``) is ``complete`` and passes; its ``.cu`` header lists them
    (:func:`proof_lines`).

    Raises:
        VerificationError: a violation (``.report`` has all of them).
        UnprovedError: no violation, but the report is not ``complete`` and ``allow_unknown`` is
            False: ``verify.undecided`` when an obligation has no outcome at all (a verifier defect),
            else ``verify.unknown`` (SMT timeouts...); the message names each obligation.
    """
    if not report.ok:
        raise VerificationError(report)
    if not report.complete and not allow_unknown:
        raise UnprovedError(report)


def proof_lines(report: Any) -> tuple[str, ...]:
    """The lines the ``.cu`` header lists: every proof, then every check deliberately skipped
    (``SKIPPED (not checked: <reason>)``), then every obligation not proved (present only when the
    caller allowed ``unknown``: unknowns and undecided obligations). Only proofs read as proved."""
    return (tuple(report.proved)
            + tuple(f"SKIPPED (not checked): {line}" for line in report.skipped_lines)
            + tuple(f"NOT PROVED (allowed by --allow-unknown): {unknown_text(u)}" for u in report.unknowns)
            + tuple(f"NOT PROVED (allowed by --allow-unknown): {undecided_text(o)}" for o in report.undecided))


def render(program: Any, report: Any) -> str:
    """The ``.cu`` source of a verified ``program`` (:func:`argus_cutlass.render.gemm.render_gemm`).

    Raises:
        ConfigError: ``render.program``: the template cannot print this program (stream-K and
            split-K until the template has them).
    """
    if family_of(program) == "attention":
        from argus_cutlass.render.attention import render_attention

        return render_attention(program, proof_lines(report))
    if family_of(program) == "moe":
        from argus_cutlass.render.moe import render_moe

        return render_moe(program, proof_lines(report))
    from argus_cutlass.render.gemm import render_gemm

    return render_gemm(program, proof_lines(report))


@dataclass(frozen=True)
class GeneratedKernel:
    """A verified, rendered GEMM kernel (not yet compiled).

    Attributes:
        name: ``program.kernel_name()`` (the ``extern "C"`` symbol and the file names).
        config: the configuration; problem: the problem it was built for (None: any K < 2^24).
        program: the DSL program that was verified and printed.
        report: the verifier's report; source: the ``.cu`` text.
    """

    name: str
    config: Config
    problem: Problem | None
    program: Any
    report: Any
    source: str

    @property
    def fingerprint(self) -> str:
        """The program's full fingerprint (sha256 of every node)."""
        return self.program.fingerprint()

    @property
    def header(self) -> str:
        """The ``<name>.h`` text: the ``extern "C"`` exports of :attr:`source`, every argument and
        return code documented (:func:`argus_cutlass.render.header.render_header`)."""
        from argus_cutlass.render.header import render_header

        return render_header(self.program)

    @property
    def k_bound_bits(self) -> int | None:
        """The k-loop proofs hold for ``K < 2**k_bound_bits``."""
        loop = getattr(self.program, "kloop", None)
        return None if loop is None else loop.bound_bits


def generate(cfg: Config, problem: Problem | None = None, *, smt: bool | None = True,
             smt_timeout_ms: int | None = None, allow_unknown: bool = False,
             notes: list[str] | None = None) -> GeneratedKernel:
    """Build, verify and render ``cfg`` (for ``problem`` when given).

    Raises:
        ConfigError: the configuration has no program, or the template cannot print it.
        VerificationError: a violation; UnprovedError: an ``unknown`` or an undecided obligation
            without ``allow_unknown``.
        ToolchainError: ``toolchain.z3`` when ``smt`` is True and z3-solver is missing.
    """
    program = build(cfg, problem)
    report = verify(program, smt=smt, smt_timeout_ms=smt_timeout_ms, notes=notes)
    require_proved(report, allow_unknown=allow_unknown)
    return GeneratedKernel(program.kernel_name(), cfg, problem, program, report, render(program, report))


def write_sources(out_dir: str | Path, program: Any, source: str) -> tuple[Path, Path]:
    """Write ``<name>.cu`` and ``<name>.h`` (:func:`argus_cutlass.render.header.render_header`) of a
    rendered ``program`` into ``out_dir``, each to a temporary name first, then renamed.

    Returns:
        the two paths ``(cu, h)``.
    """
    import os

    from argus_cutlass.render.header import render_header

    out = Path(out_dir)
    name = program.kernel_name()
    paths = (out / f"{name}.cu", out / f"{name}.h")
    for path, text in zip(paths, (source, render_header(program))):
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    return paths


def _job(kernel: GeneratedKernel) -> Any:
    from argus_cutlass.build.nvcc import CompileJob

    return CompileJob.for_program(kernel.source, kernel.name, kernel.fingerprint)


def compile_kernel(kernel: GeneratedKernel, *, toolchain: Any = None) -> Any:
    """nvcc ``kernel`` into a shared library through the content-addressed cache.

    Raises:
        ToolchainError: nvcc or the CUTLASS headers are missing.
        CompileError: nvcc/ptxas failed or warned C7510.
    """
    from argus_cutlass.build.nvcc import compile_cu

    job = _job(kernel)
    return compile_cu(job.source, job.name, job.kind, toolchain=toolchain, key_parts=job.key_parts)


def kernel_cached(kernel: GeneratedKernel, *, toolchain: Any = None) -> bool:
    """Whether :func:`compile_kernel` of ``kernel`` would be served by the cache (nvcc would not run).

    Raises:
        ToolchainError: nvcc or the CUTLASS headers are missing.
    """
    from argus_cutlass.build.nvcc import is_cached

    job = _job(kernel)
    return is_cached(job.source, job.kind, toolchain=toolchain, key_parts=job.key_parts)


def _reference_job(dtype: str, out_dtype: str, layout: str) -> Any:
    from argus_cutlass.build.nvcc import CompileJob
    from argus_cutlass.kernels.gemm.reference import render_reference

    name, src = render_reference(dtype, out_dtype, layout)
    return CompileJob(src, name, "shared")


def compile_reference(dtype: str, out_dtype: str, layout: str) -> Any:
    """nvcc the fp32 reference GEMM of a dtype/layout into the cache (the numerics check loads it
    from there); returns the artifact.

    Raises:
        ToolchainError, CompileError: as :func:`compile_kernel`.
    """
    from argus_cutlass.build.nvcc import compile_cu

    job = _reference_job(dtype, out_dtype, layout)
    return compile_cu(job.source, job.name, job.kind)


def compile_many(kernels: Sequence[GeneratedKernel], *, workers: int | None = None,
                 reference: tuple[str, str, str] | None = None) -> list[Any]:
    """Compile ``kernels`` in parallel (one nvcc per worker); a failed build's
    :class:`~argus_cutlass.errors.CompileError` takes its place in the list.

    Args:
        reference: ``(dtype, out_dtype, layout)``: also build the fp32 reference GEMM in the same
            batch (the numerics check then finds it in the cache); not part of the result.

    Raises:
        ToolchainError: nvcc or the headers are missing (once, before any build).
    """
    from argus_cutlass.build.nvcc import compile_many as nvcc_many

    jobs = [_job(k) for k in kernels]
    if reference is not None and jobs:
        jobs.append(_reference_job(*reference))
    if not jobs:
        return []
    return list(nvcc_many(jobs, max_workers=workers, return_exceptions=True))[: len(kernels)]


def load(kernel: GeneratedKernel, artifact: Any) -> Any:
    """The built library of ``kernel`` (refuses a problem outside its proved K range).

    Raises:
        LaunchError: ``launch.load`` / ``launch.symbol``.
    """
    if isinstance(kernel.config, AttentionConfig):
        from argus_cutlass.kernels.attention.library import AttentionKernelLibrary

        return AttentionKernelLibrary(artifact.path, kernel.name, kernel.config)
    if family_of(kernel.config) == "moe":
        from argus_cutlass.kernels.moe.library import MoEKernelLibrary

        return MoEKernelLibrary(artifact.path, kernel.name, kernel.program)
    from argus_cutlass.kernels.gemm.library import GemmKernelLibrary

    return GemmKernelLibrary(artifact.path, kernel.name, kernel.k_bound_bits)


def check(lib: Any, problem: Problem, *, alpha: float = 1.0, beta: float = 0.0, seed: int = 0) -> Any:
    """Run ``lib`` once on random inputs against the fp32 reference (GEMM:
    :func:`argus_cutlass.kernels.gemm.check.run_and_check`; attention:
    :func:`argus_cutlass.kernels.attention.check.run_and_check`, outputs poisoned with NaN first);
    a mismatch is in the result, not raised.

    Raises:
        ProblemError, LaunchError, DeviceError: bad problem, refused or failed launch.
    """
    if isinstance(problem, AttentionProblem):
        from argus_cutlass.kernels.attention.check import run_and_check as check_attention

        return check_attention(lib, problem, seed=seed)
    if family_of(problem) == "moe":
        from argus_cutlass.kernels.moe.check import run_and_check as check_moe

        return check_moe(lib, problem, seed=seed)
    from argus_cutlass.kernels.gemm.check import run_and_check

    return run_and_check(lib, problem, alpha=alpha, beta=beta, seed=seed)


def time_kernel(lib: Any, problem: Problem, *, alpha: float = 1.0, beta: float = 0.0, warmup: int = 10,
                iters: int = 100, timing: str = DEFAULT_TIMING) -> float:
    """Median milliseconds of one call (``kernels.<family>.check.time_*``); ``timing`` (GEMM: ``"graph"``, the
    default, rotated operands replayed from a CUDA graph, or ``"launch"``, one launch between CUDA events:
    :func:`argus_cutlass.kernels.gemm.check.time_gemm`) is the GEMM's; attention and MoE keep their own."""
    if isinstance(problem, AttentionProblem):
        from argus_cutlass.kernels.attention.check import time_attention

        return time_attention(lib, problem, warmup=warmup, iters=iters)
    if family_of(problem) == "moe":
        from argus_cutlass.kernels.moe.check import time_layer

        return time_layer(lib, problem, warmup=warmup, iters=iters)
    from argus_cutlass.kernels.gemm.check import time_gemm

    return time_gemm(lib, problem, alpha=alpha, beta=beta, warmup=warmup, iters=iters, timing=timing)


def baseline(problem: Problem, *, alpha: float = 1.0, beta: float = 0.0, warmup: int = 10,
             iters: int = 100, timing: str = DEFAULT_TIMING) -> float | None:
    """Median milliseconds of the vendor library on the same problem (GEMM: cuBLAS,
    :func:`argus_cutlass.kernels.gemm.baseline.cublas_time`; attention: cuDNN through torch SDPA,
    :func:`argus_cutlass.kernels.attention.baseline.cudnn_time`; MoE: the torch ``_grouped_mm`` layer,
    :func:`argus_cutlass.kernels.moe.check.time_baseline`); None without torch or an equivalent
    vendor call."""
    if isinstance(problem, AttentionProblem):
        from argus_cutlass.kernels.attention.baseline import cudnn_time

        return cudnn_time(problem, warmup=warmup, iters=iters)
    if family_of(problem) == "moe":
        from argus_cutlass.kernels.moe.check import time_baseline

        return time_baseline(problem, warmup=warmup, iters=iters)
    from argus_cutlass.kernels.gemm.baseline import cublas_time

    return cublas_time(problem, alpha=alpha, beta=beta, warmup=warmup, iters=iters, timing=timing)


def build_many(configs: Iterable[Config], problem: Problem | None = None, *,
               workers: int | None = None, smt: bool | None = True) -> dict[str, Any]:
    """Generate (each distinct config verified once), compile in parallel and load several
    configurations; returns ``{kernel name: GemmKernelLibrary}``.

    Raises:
        the first error of :func:`generate` or of a build (``CompileError``).
    """
    return build_jobs([(c, problem) for c in dict.fromkeys(configs)], workers=workers, smt=smt)


def build_jobs(jobs: Iterable[tuple[Config, Problem | None]], *, workers: int | None = None,
               smt: bool | None = True, names: dict[tuple[Config, Problem | None], str] | None = None
               ) -> dict[str, Any]:
    """:func:`build_many` for ``(config, problem)`` pairs of any families and problems (one
    parallel compile batch); returns ``{kernel name: library}`` (pairs that give the same
    program are built once). ``names``, when given, receives each pair's kernel name (so a caller
    maps its pairs to libraries without building the programs again).
    :func:`argus_cutlass.torch.precompile` builds through this.

    Raises:
        ProblemError: ``build.workers`` when ``workers`` is not None and not an integer >= 1 (before
            any verification); the first error of :func:`generate` or of a build (``CompileError``).
    """
    check_workers(workers, "workers", "build.workers")
    kernels: dict[str, GeneratedKernel] = {}
    for cfg, problem in dict.fromkeys(jobs):
        kernel = generate(cfg, problem, smt=smt)
        kernels.setdefault(kernel.name, kernel)
        if names is not None:
            names[(cfg, problem)] = kernel.name
    artifacts = compile_many(list(kernels.values()), workers=workers)
    for art in artifacts:
        if isinstance(art, CompileError):
            raise art
    return {name: load(k, a) for (name, k), a in zip(kernels.items(), artifacts)}


# ---------------------------------------------------------------------------------------- drivers


@dataclass(frozen=True)
class Options:
    """What :func:`run` / :func:`run_many` do.

    Attributes:
        smt, smt_timeout_ms: verifier tiers (see :func:`verify`; ``smt=None`` runs z3 when installed).
        allow_unknown: render a program with ``unknown`` or undecided obligations (listed in the ``.cu``
            header); checks skipped with the SMT tier off never need it.
        heuristic: :func:`configure` uses the fixed heuristic, not a tuned configuration.
        compile: compile (else stop after rendering); run: check and time on the GPU when there is one.
        time, baseline: time our kernel / cuBLAS after a passing check.
        alpha, beta, seed: the check's epilogue scalars and input seed (timing uses them too); the seed is an
            integer from 0 to 2**64-1 (``cli.seed``, :func:`argus_cutlass.settings.check_seed`).
        check_shapes: ``(m, n, k)`` sizes to check numerics on (the problem's dtypes and layout),
            e.g. a bounded copy of a large problem; default: the problem itself.
        warmup, iters: timing launches (ms): per launch the median of ``iters`` CUDA-event intervals; from a
            graph (``timing``) the median of ``max(5, ceil(iters / calls))`` replays of ``calls`` calls, per call.
        timing: how a GEMM and cuBLAS are timed (:func:`argus_cutlass.kernels.gemm.check.time_gemm`): ``"graph"``
            (the default, :data:`DEFAULT_TIMING`: operands rotated over 3x the L2, calls replayed from a CUDA graph,
            as a serving engine runs them) or ``"launch"`` (one operand set, each launch between CUDA events).
        workers: parallel nvcc processes (:func:`run_many`; default: CPU count; at least 1, ``tune.workers``).
        overrides: ``FIELD=VALUE`` changes (``"row_bounded=true"``, ``"stages=5"``) :func:`run` applies to the
            configuration it configured or was given, each value typed by that configuration model's field
            (:func:`argus_cutlass.kernels.fields.field_value`); the result is built and verified like any other.
    """

    smt: bool | None = True
    smt_timeout_ms: int | None = None
    allow_unknown: bool = False
    heuristic: bool = False
    compile: bool = True
    run: bool = True
    time: bool = True
    baseline: bool = True
    alpha: float = 1.0
    beta: float = 0.0
    seed: int = 0
    check_shapes: tuple[tuple[int, int, int], ...] | None = None
    warmup: int = 10
    iters: int = 100
    timing: str = DEFAULT_TIMING
    workers: int | None = None
    overrides: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        from argus_cutlass.errors import ProblemError

        from argus_cutlass.settings import check_seed, check_workers

        if self.timing not in TIMINGS:
            raise ProblemError("problem.timing", f"Options.timing={self.timing!r}: expected one of {', '.join(TIMINGS)}")
        check_seed(self.seed, "Options.seed")   # before any build: numpy refuses a negative seed only in the check
        check_workers(self.workers, "Options.workers")


#: outcomes of a run, in stage order (``pending``: still running; ``ok``: checked and timed)
STATUSES = ("pending", "rejected", "unproved", "render_error", "rendered", "compile_error", "compiled",
            "launch_error", "check_failed", "checked", "ok")


@dataclass(eq=False)
class RunResult:
    """Every artifact of one configuration's run; fields after the stage that stopped it are None.

    Attributes:
        status: one of :data:`STATUSES`: ``rejected`` (a violation, or no program),
            ``unproved`` (``unknown`` without ``allow_unknown``), ``render_error``, ``rendered``
            (no nvcc, or ``compile=False``), ``compile_error``, ``compiled`` (no GPU, or
            ``run=False``), ``launch_error``, ``check_failed``, ``checked`` (``time=False``), ``ok``.
        error: the expected failure behind ``rejected`` / ``unproved`` / ``*_error`` (an ArgusError).
        skipped: stage -> why it did not run (``compile``: no nvcc; ``run``: no GPU; ``baseline``).
        checks: one CheckResult per checked shape; ms / baseline_ms: median milliseconds.
        stage_seconds: wall seconds per stage (``configure``, ``build_program``, ``verify``,
            ``render``, ``compile``, ``load``, ``check``, ``time``, ``baseline``).
        notes: remarks of the stages (e.g. the SMT tier skipped).
        config_source / config_source_detail: where the configuration came from (one of
            :data:`CONFIG_SOURCES`) and why, one line (:attr:`argus_cutlass.agent.store.Lookup.detail`:
            the key found or missed; None for a given configuration).
        config_overrides: the typed ``Options.overrides`` applied to it (empty: none).
    """

    problem: Problem
    config: Config | None = None
    config_source: str = "given"
    config_source_detail: str | None = None
    config_overrides: dict[str, Any] = field(default_factory=dict)
    status: str = "pending"
    error: ArgusError | None = None
    program: Any = None
    report: Any = None
    source: str | None = None
    kernel: GeneratedKernel | None = None
    artifact: Any = None
    library: Any = None
    checks: list[Any] = field(default_factory=list)
    ms: float | None = None
    baseline_ms: float | None = None
    #: how ``ms`` / ``baseline_ms`` were timed (GEMM: ``Options.timing``; None for the other families' own)
    timing_method: str | None = None
    skipped: dict[str, str] = field(default_factory=dict)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str | None:
        """The kernel name (None when no program was built)."""
        return None if self.program is None else self.program.kernel_name()

    @property
    def path(self) -> dict[str, Any] | None:
        """GEMM: which path the kernel runs and why (``direct``, or ``staged`` with each staged operand's
        reasons and the workspace per call: ``kernels.gemm.program.path_record``); None before a program
        exists and for the other families."""
        if self.program is None or family_of(self.problem) != "gemm":
            return None
        from argus_cutlass.kernels.gemm.program import path_record

        return path_record(self.problem, self.program)

    @property
    def ok(self) -> bool:
        """Nothing went wrong: every stage that ran passed (skipped stages are fine)."""
        return self.status in ("rendered", "compiled", "checked", "ok")

    @property
    def check(self) -> Any:
        """The first (or only) CheckResult."""
        return self.checks[0] if self.checks else None

    def raise_for_status(self) -> RunResult:
        """Raise the stored error of a failed run (``check_failed`` as ``CheckFailed``); returns self."""
        if self.ok:
            return self
        if self.error is not None:
            raise self.error
        raise ArgusError("check.failed", "; ".join(c.summary() for c in self.checks if not c.passed))

    def record(self) -> dict[str, Any]:
        """The JSON record the CLI writes beside the ``.cu`` (``<kernel>.json``)."""
        import json

        import dataclasses

        p = self.problem
        family = family_of(p)
        vendor = VENDOR[family]
        rec: dict[str, Any] = {
            "kernel": self.name,
            "family": family,
            "status": self.status,
            "problem": dataclasses.asdict(p) if family != "gemm" else {
                "m": p.m, "n": p.n, "k": p.k, "dtype": p.dtype, "out_dtype": p.out_dtype, "layout": p.layout,
                "lda": p.lda, "ldb": p.ldb, "ldc": p.ldc, "ldd": p.ldd},
            "config": self.config.model_dump() if self.config is not None else None,
            "config_source": self.config_source,
            "config_source_detail": self.config_source_detail,
            "config_overrides": self.config_overrides,
            "stage_seconds": dict(self.stage_seconds),
        }
        if self.program is not None:
            loop = getattr(self.program, "kloop", None)  # the MoE layer has none of its own
            rec["program"] = {"fingerprint": self.program.fingerprint(),
                              "k_bound_bits": None if loop is None else loop.bound_bits}
            if self.path is not None:
                rec["path"] = self.path
        if self.report is not None:
            rec["verification"] = json.loads(self.report.to_json())
        if self.error is not None:
            rec["error"] = {"rule": self.error.rule, "message": str(self.error)}
        if "compile" in self.skipped:
            rec["compile"] = {"skipped": self.skipped["compile"]}
        elif self.artifact is not None:
            a = self.artifact
            rec["compile"] = {"cached": a.cached, "seconds": round(a.seconds, 2), "registers": a.registers,
                              "spill_bytes": a.spill_bytes, "path": str(a.path)}
        if "run" in self.skipped:
            rec["run"] = {"skipped": self.skipped["run"]}
        if self.checks:
            checks = [c.as_dict() for c in self.checks]
            rec["check"] = checks[0] if len(checks) == 1 else checks
        if self.ms is not None:
            flops = problem_flops(p)
            timing: dict[str, Any] = {"ms": self.ms, "tflops": flops / self.ms / 1e9,
                                      **({"method": self.timing_method} if self.timing_method else {})}
            if self.baseline_ms is not None:
                timing.update({f"{vendor}_ms": self.baseline_ms, f"{vendor}_tflops": flops / self.baseline_ms / 1e9,
                               f"speedup_vs_{vendor}": self.baseline_ms / self.ms})
            if family == "moe":
                from argus_cutlass.kernels.moe.check import timed_counts, timed_floor_ms

                # the floor of the timed routing's activated experts (not every expert: issue 11's bar)
                timing["weight_floor_ms_4p3"] = timed_floor_ms(p)
                timing["activated_experts"] = p.active_experts(timed_counts(p))
            if "baseline" in self.skipped:
                timing[f"{vendor}_skipped"] = self.skipped["baseline"]
            rec["timing"] = timing
        if self.notes:
            rec["notes"] = list(self.notes)
        return rec


Hook = Callable[[str, RunResult], None]


class _Clock:
    def __init__(self, result: RunResult, hook: Hook | None) -> None:
        self.result, self.hook = result, hook

    def stage(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.result.stage_seconds[name] = round(self.result.stage_seconds.get(name, 0.0)
                                                    + time.perf_counter() - t0, 4)

    def done(self, name: str) -> None:
        if self.hook is not None:
            self.hook(name, self.result)


def _front(result: RunResult, clock: _Clock, options: Options) -> bool:
    """build program -> verify -> render into ``result``; False when the run stops here."""
    r = result
    try:
        r.program = clock.stage("build_program", build, r.config, r.problem)
    except (ConfigError, DslError) as exc:
        r.status, r.error = "rejected", exc
        clock.done("build_program")
        return False
    clock.done("build_program")
    r.report = clock.stage("verify", verify, r.program, smt=options.smt,
                           smt_timeout_ms=options.smt_timeout_ms, notes=r.notes)
    try:
        require_proved(r.report, allow_unknown=options.allow_unknown)
    except (VerificationError, UnprovedError) as exc:
        r.status = "rejected" if isinstance(exc, VerificationError) else "unproved"
        r.error = exc
        clock.done("verify")
        return False
    clock.done("verify")
    try:
        r.source = clock.stage("render", render, r.program, r.report)
    except ConfigError as exc:
        r.status, r.error = "render_error", exc
        clock.done("render")
        return False
    r.kernel = GeneratedKernel(r.program.kernel_name(), r.config, r.problem, r.program, r.report, r.source)
    r.status = "rendered"
    clock.done("render")
    return True


def _check_problems(problem: Problem, options: Options) -> list[Problem]:
    if not options.check_shapes or isinstance(problem, AttentionProblem):
        return [problem]
    p = problem
    return [GemmProblem(m, n, k, p.dtype, p.out_dtype, p.layout) for m, n, k in options.check_shapes]


def _back(result: RunResult, clock: _Clock, options: Options) -> None:
    """load -> check -> time -> baseline on a compiled ``result`` (GPU present)."""
    from argus_cutlass.errors import DeviceError, LaunchError, ProblemError

    r = result
    try:
        r.library = clock.stage("load", load, r.kernel, r.artifact)
        clock.done("load")
        for p in _check_problems(r.problem, options):
            r.checks.append(clock.stage("check", check, r.library, p, alpha=options.alpha, beta=options.beta,
                                        seed=options.seed))
        clock.done("check")
        if not all(c.passed for c in r.checks):
            r.status = "check_failed"
            return
        r.status = "checked"
        if not options.time:
            return
        timing = options.timing
        try:
            r.ms = clock.stage("time", time_kernel, r.library, r.problem, alpha=options.alpha, beta=options.beta,
                               warmup=options.warmup, iters=options.iters, timing=timing)
        except DeviceError as exc:   # the calls could not be captured into a graph: timed one launch each instead
            if timing != "graph" or exc.rule != "device.graph":
                raise
            timing = "launch"
            r.notes.append(f"timing: the calls could not be captured into a CUDA graph ({exc.message}); timed one "
                           "launch between CUDA events instead, cuBLAS too")
            r.ms = clock.stage("time", time_kernel, r.library, r.problem, alpha=options.alpha, beta=options.beta,
                               warmup=options.warmup, iters=options.iters, timing=timing)
        r.timing_method = timing if family_of(r.problem) == "gemm" else None
        r.status = "ok"
        clock.done("time")
    except (LaunchError, ProblemError, DeviceError) as exc:
        r.status, r.error = "launch_error", exc
        clock.done("error")
        return
    if options.baseline:
        try:
            ms = clock.stage("baseline", baseline, r.problem, alpha=options.alpha, beta=options.beta,
                             warmup=options.warmup, iters=options.iters, timing=r.timing_method or options.timing)
        except DeviceError as exc:   # the vendor call failed (e.g. cuBLAS's "baseline.vendor"): our result stands
            r.skipped["baseline"] = f"the vendor baseline failed: {type(exc).__name__}: {exc}"
            clock.done("baseline")
            return
        if ms is None:
            if isinstance(r.problem, AttentionProblem):
                from argus_cutlass.kernels.attention.baseline import cudnn_support

                r.skipped["baseline"] = cudnn_support(r.problem) or "torch with cuDNN attention is not available"
            elif family_of(r.problem) == "moe":
                r.skipped["baseline"] = "torch with torch._grouped_mm is not available"
            else:
                r.skipped["baseline"] = "torch is not installed"
        r.baseline_ms = ms
        clock.done("baseline")


def _toolchain_or_skip(result: RunResult) -> Any:
    """The toolchain, or None with ``skipped["compile"]`` when nvcc is missing (CUTLASS headers
    missing is an error: the user asked for a compile and has nvcc)."""
    from argus_cutlass.build.toolchain import Toolchain, find_cutlass, find_nvcc
    from argus_cutlass.errors import ToolchainError

    try:
        nvcc = find_nvcc()
    except ToolchainError as exc:
        result.skipped["compile"] = exc.message
        return None
    return Toolchain(nvcc=nvcc, cutlass=find_cutlass())


def _gpu_or_skip(result: RunResult) -> bool:
    from argus_cutlass.runtime.cuda import gpu_available, require_sm90

    ok, why = gpu_available()
    if not ok:
        result.skipped["run"] = why
        return False
    if family_of(result.problem) in ("attention", "moe"):
        try:
            import torch  # noqa: F401 - the attention / MoE check, tensors and baseline are torch's
        except ImportError:
            result.skipped["run"] = (f"torch is not installed (the {family_of(result.problem)} check runs on torch "
                                     "tensors)")
            return False
    require_sm90()
    return True


def _validate(problem: Problem) -> None:
    """Refuse a problem no path can run: a GEMM problem that breaks only TMA's alignment rules is
    built with aligned staging (``GemmProblem.validate_any``; ``build`` reads its staging plan)."""
    if isinstance(problem, GemmProblem):
        problem.validate_any()
    else:
        problem.validate()


def parse_overrides(model: type, overrides: Sequence[str]) -> dict[str, Any]:
    """The ``FIELD=VALUE`` strings ``overrides`` as ``{field: value}``, each typed and checked by the configuration
    model ``model``'s field alone (:func:`argus_cutlass.kernels.fields.assignments`); the model's cross-field rules
    run in :func:`with_overrides`.

    Raises:
        ConfigError: ``config.override``: not ``FIELD=VALUE``, a field ``model`` does not have, a value its type
            refuses, or a field given two different values (``--set stages=4 --set stages=5``; the message names
            the override).

    >>> from argus_cutlass.kernels.gemm.config import GemmConfig
    >>> parse_overrides(GemmConfig, ["stages=5,schedule=pingpong"])
    {'stages': 5, 'schedule': 'pingpong'}
    """
    from argus_cutlass.kernels.fields import assignments

    changes: dict[str, Any] = {}
    for spec in overrides:
        try:
            changes.update(assignments(model, spec, changes))
        except ValueError as exc:
            raise ConfigError("config.override", f"override {spec!r}: {exc}",
                              f"FIELD=VALUE with FIELD one of {model.__name__}'s fields and VALUE of its type") from None
    return changes


def check_overrides(problem: Problem, overrides: Sequence[str]) -> dict[str, Any]:
    """:func:`parse_overrides` against the configuration model of ``problem``'s family (:func:`family_of`): what a
    front end checks before it makes anything (the combination with the chosen configuration is checked when
    :func:`run` applies them).

    Raises:
        ConfigError: ``config.override`` (:func:`parse_overrides`).
    """
    from argus_cutlass.kernels.moe.config import MoEConfig

    model = {"gemm": GemmConfig, "attention": AttentionConfig, "moe": MoEConfig}[family_of(problem)]
    return parse_overrides(model, overrides)


def with_overrides(config: Config, overrides: Sequence[str]) -> tuple[Config, dict[str, Any]]:
    """``config`` with the ``FIELD=VALUE`` ``overrides`` applied (:attr:`Options.overrides`), and the typed changes.

    Raises:
        ConfigError: ``config.override``: a string that is not ``FIELD=VALUE``, a field the configuration model does
            not have, a value its type refuses, or a combination its cross-field rules refuse (the message names the
            override and the rule).

    >>> from argus_cutlass.kernels.moe.config import MoEConfig
    >>> cfg, changes = with_overrides(MoEConfig(tile_m=64), ["row_bounded=true", "gu_stages=6"])
    >>> cfg.row_bounded, cfg.gu_stages, changes
    (True, 6, {'row_bounded': True, 'gu_stages': 6})
    """
    from pydantic import ValidationError

    model = type(config)
    changes = parse_overrides(model, overrides)
    try:
        return config.replace(**changes), changes
    except ValidationError as exc:
        rule = exc.errors()[0]["msg"] if exc.errors() else str(exc)
        text = ", ".join(f"{k}={v!r}" for k, v in changes.items())
        raise ConfigError("config.override", f"{model.__name__} with {text}: {rule}") from None


def run(problem: Problem, config: Config | None = None, *, options: Options = Options(),
        on_stage: Hook | None = None, out_dir: str | Path | None = None) -> RunResult:
    """Every stage for one problem: configure (unless ``config`` is given), build, verify, render,
    compile (when nvcc exists), load, check and time (on a Hopper GPU), cuBLAS beside it.

    Args:
        on_stage: called as ``on_stage(stage, result)`` after each stage (progress printing), and
            with ``"compile_start"`` just before nvcc runs (not on a cache hit: nvcc does not run).
        out_dir: write ``<kernel>.cu`` and ``<kernel>.h`` (:func:`write_sources`) after rendering and ``<kernel>.json`` (:meth:`RunResult.record`)
            at the end, also when the verifier rejected the program.

    Returns:
        the :class:`RunResult`; a rejected, unproved or numerically wrong kernel is a status,
        not an exception.

    Raises:
        ProblemError: the problem is invalid for every path (checked first; a GEMM problem that breaks
            only TMA's alignment rules runs through aligned staging: ``GemmProblem.staging``);
            ``cli.out`` for an ``out_dir`` that is empty or a file (:func:`argus_cutlass.settings.check_output_path`).
        ConfigError: the configuration has no program (e.g. ``smem.atom``) or the template cannot
            print it (``render.program``); ``config.override``: an ``Options.overrides`` entry the
            configuration model refuses (:func:`with_overrides`).
        ToolchainError: the CUTLASS headers are missing (with nvcc present), or z3 (``smt=True``).
        CompileError, LaunchError, DeviceError: a build or a launch failed, or the GPU is not a Hopper.
    """
    _validate(problem)
    if out_dir is not None:
        from argus_cutlass.settings import check_output_path

        check_output_path(out_dir, "out_dir")  # "" would silently mean the current folder
    result = RunResult(problem)
    clock = _Clock(result, on_stage)
    if config is None:
        looked = clock.stage("configure", configure, problem, heuristic=options.heuristic)
        result.config, result.config_source = looked.config, looked.source
        result.config_source_detail = looked.detail
    else:
        result.config = config
    if options.overrides:
        result.config, result.config_overrides = with_overrides(result.config, options.overrides)
    clock.done("configure")
    out = Path(out_dir) if out_dir is not None else None
    try:
        if not _front(result, clock, options):
            if result.program is None or result.status == "render_error":
                raise result.error  # type: ignore[misc]  # no program, or not printable: an error
            return result
        if out is not None:
            write_sources(out, result.program, result.source or "")
            clock.done("write")
        if not options.compile:
            result.skipped["compile"] = "compile=False"
            return result
        toolchain = _toolchain_or_skip(result)
        if toolchain is None:
            clock.done("compile")
            return result
        if not kernel_cached(result.kernel, toolchain=toolchain):
            clock.done("compile_start")  # progress: nvcc starts (about 5-20 s); nothing said on a cache hit
        result.artifact = clock.stage("compile", compile_kernel, result.kernel, toolchain=toolchain)
        result.status = "compiled"
        clock.done("compile")
        if not options.run:
            result.skipped["run"] = "run=False"
            return result
        if not _gpu_or_skip(result):
            clock.done("run")
            return result
        _back(result, clock, options)
        if result.status == "launch_error":
            raise result.error  # type: ignore[misc]
        return result
    finally:
        if out is not None and result.program is not None:
            import json

            text = json.dumps(result.record(), indent=2, sort_keys=True)
            (out / f"{result.name}.json").write_text(text + "\n")


def run_many(configs: Sequence[Config], problem: Problem, *, options: Options = Options(),
             on_stage: Hook | None = None) -> list[RunResult]:
    """:func:`run` for a batch of configurations of one problem, compiled in parallel; every
    expected failure (rejected, unproved, render, compile, launch, check) is a status of its
    result, never an exception. Without a GPU (or with ``run=False``) the results stop at
    ``compiled``.

    Raises:
        ProblemError: the problem is invalid. ToolchainError: nvcc or the headers are missing.
        DeviceError: the GPU is not a Hopper. ConfigError: ``config.override`` (:func:`with_overrides`).
    """
    _validate(problem)
    results = [RunResult(problem, cfg) for cfg in configs]
    for r in results:   # Options.overrides as run applies them (a refused override raises: it is the caller's input)
        if options.overrides:
            r.config, r.config_overrides = with_overrides(r.config, options.overrides)
    clocks = [_Clock(r, on_stage) for r in results]
    front = [(r, c) for r, c in zip(results, clocks) if _front(r, c, options)]
    if not options.compile or not front:
        for r, _ in front:
            r.skipped["compile"] = "compile=False"
        return results
    reference = (problem.dtype, problem.out_dtype, problem.layout) \
        if options.run and isinstance(problem, GemmProblem) else None
    t0 = time.perf_counter()
    artifacts = compile_many([r.kernel for r, _ in front], workers=options.workers,  # type: ignore[misc]
                             reference=reference)
    share = round((time.perf_counter() - t0) / len(front), 4)  # one parallel batch: its wall time, shared
    for (r, c), art in zip(front, artifacts):
        r.stage_seconds["compile"] = share
        if isinstance(art, CompileError):
            r.status, r.error = "compile_error", art
        else:
            r.artifact, r.status = art, "compiled"
        c.done("compile")
    compiled = [(r, c) for r, c in front if r.status == "compiled"]
    if not options.run or not compiled:
        for r, _ in compiled:
            r.skipped["run"] = "run=False"
        return results
    first = compiled[0][0]
    if not _gpu_or_skip(first):
        for r, _ in compiled[1:]:
            r.skipped["run"] = first.skipped["run"]
        return results
    for r, c in compiled:
        _back(r, c, options)
    return results
