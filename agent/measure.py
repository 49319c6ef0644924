"""Evaluators: measure a batch of verified configurations.

* :class:`GpuEvaluator` renders each config, compiles the batch in parallel through
  :func:`argus_cutlass.build.nvcc.compile_many` (shared content-addressed cache), checks
  numerics with :func:`~argus_cutlass.runtime.check.run_and_check` on a bounded problem
  and times the real problem with :func:`~argus_cutlass.runtime.check.time_gemm`.
* :class:`TableEvaluator` replays a measured table (the evaluation script, tests).

Expected failures (compile error, ptxas C7510, wrong numerics, refused launch) become a
:class:`~argus_cutlass.agent.planner.Measurement` with that status and the feedback text;
they never raise.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from argus_cutlass.agent.planner import Measurement, Problem

from argus_cutlass.kernels.gemm.config import GemmConfig

#: the numerics check runs on at most this many rows / columns / K (residues kept)
CHECK_MAX = (1024, 1024, 2048)


def check_shape(problem: Problem) -> tuple[int, int, int]:
    """A bounded problem for the numerics check: each size clipped to :data:`CHECK_MAX`
    (multiples of 8, so the TMA alignment of a valid problem is kept)."""
    return tuple(min(x, cap) for x, cap in zip((problem.m, problem.n, problem.k), CHECK_MAX))  # type: ignore[return-value]


def generate(cfg: GemmConfig, notes: list[str] | None = None) -> Any:
    """:func:`argus_cutlass.api.generate_gemm` (full verifier, then render). When the z3
    tier cannot be imported (``z3-solver`` missing on the machine) the arithmetic and
    enumeration tiers still run and a note is appended to ``notes``.

    Raises:
        VerificationError: a violation; ConfigError: the config cannot be instantiated.
    """
    from argus_cutlass.api import generate_gemm

    smt = _z3_installed()
    if not smt and notes is not None and not any("SMT tier skipped" in n for n in notes):
        notes.append("SMT tier skipped (z3-solver is not installed); arithmetic and enumeration tiers ran")
    return generate_gemm(cfg, smt=smt)


@functools.cache
def _z3_installed() -> bool:
    """Whether the verifier's SMT tier can run here (decided once per process, so a machine
    without z3 does not verify every candidate twice)."""
    from argus_cutlass.errors import ToolchainError
    from argus_cutlass.verify.smt import require_z3

    try:
        require_z3()
    except ToolchainError:
        return False
    return True


class GpuEvaluator:
    """Compile, check and time configs for ``problem`` on the current GPU.

    Args:
        problem: the GEMM to tune.
        workers: parallel nvcc processes (default: CPU count).
        warmup, iters: timing launches (median of ``iters`` CUDA-event intervals, ms).
    """

    def __init__(self, problem: Problem, workers: int | None = None, warmup: int = 10, iters: int = 50) -> None:
        self.problem = problem
        self.workers = workers
        self.warmup = warmup
        self.iters = iters
        self.sources: dict[GemmConfig, str] = {}
        self.notes: list[str] = []

    def __call__(self, configs: list[GemmConfig]) -> list[Measurement]:
        from argus_cutlass.build.nvcc import compile_many
        from argus_cutlass.errors import ArgusError, CompileError, VerificationError

        results: dict[int, Measurement] = {}
        jobs, idx = [], []
        for i, cfg in enumerate(configs):
            try:
                kernel = generate(cfg, self.notes)
            except (VerificationError, ArgusError) as exc:
                results[i] = Measurement("verify_failed", None, str(exc)[:2000])
                continue
            self.sources[cfg] = kernel.source
            jobs.append((kernel.source, kernel.name, "shared"))
            idx.append((i, kernel.name))
        artifacts = compile_many(jobs, max_workers=self.workers, return_exceptions=True) if jobs else []
        for (i, name), art in zip(idx, artifacts):
            if isinstance(art, CompileError):
                results[i] = Measurement("compile_error", None, f"[{art.rule}] {art.message}"[:2000])
                continue
            results[i] = self._measure(configs[i], art, name)
        return [results[i] for i in range(len(configs))]

    def _measure(self, cfg: GemmConfig, artifact: Any, name: str) -> Measurement:
        from argus_cutlass.errors import DeviceError, LaunchError, ProblemError
        from argus_cutlass.runtime.check import run_and_check, time_gemm
        from argus_cutlass.runtime.launch import GemmKernelLibrary
        from argus_cutlass.kernels.gemm.problem import GemmProblem

        p = self.problem
        try:
            lib = GemmKernelLibrary(artifact.path, name)
            chk = run_and_check(lib, GemmProblem.for_config(cfg, *check_shape(p)))
            if not chk.passed:
                return Measurement("check_failed", None, chk.summary())
            ms = time_gemm(lib, GemmProblem.for_config(cfg, p.m, p.n, p.k), warmup=self.warmup, iters=self.iters)
        except (LaunchError, ProblemError, DeviceError) as exc:
            return Measurement("launch_error", None, str(exc)[:2000])
        return Measurement("ok", ms)


class TableEvaluator:
    """Replays measured times: ``table[kernel_name(cfg)] = ms`` (None or inf = failed).

    A config missing from the table is reported as ``invalid`` (not measured).
    """

    def __init__(self, table: Mapping[str, float | None]) -> None:
        self.table = dict(table)

    def __call__(self, configs: list[GemmConfig]) -> list[Measurement]:
        from argus_cutlass.render.naming import kernel_name

        out = []
        for cfg in configs:
            name = kernel_name(cfg)
            if name not in self.table:
                out.append(Measurement("invalid", None, f"{name} is not in the measured table"))
                continue
            ms = self.table[name]
            if ms is None or ms == float("inf"):
                out.append(Measurement("check_failed", None, "failed in the measured table"))
            else:
                out.append(Measurement("ok", float(ms)))
        return out
