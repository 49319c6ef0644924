"""Evaluators: measure a batch of verified configurations.

* :class:`GpuEvaluator` runs the batch through the orchestrator
  (:func:`argus_cutlass.generate.run_many`: verify, render, compile in parallel through the
  shared content-addressed cache, check numerics on a bounded problem, time the real problem).
* :class:`TableEvaluator` replays a measured table (the evaluation script, tests).

Expected failures (verifier, compile error, ptxas C7510, wrong numerics, refused launch) become a
:class:`~argus_cutlass.agent.planner.Measurement` with that status and the feedback text;
they never raise.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from argus_cutlass.agent.planner import Measurement, Problem

from argus_cutlass.kernels.gemm.config import GemmConfig

#: the numerics check runs on at most this many rows / columns / K (residues kept)
CHECK_MAX = (1024, 1024, 2048)

#: orchestrator status -> Measurement status
_STATUS = {"rejected": "verify_failed", "unproved": "verify_failed", "render_error": "compile_error",
           "compile_error": "compile_error", "launch_error": "launch_error", "check_failed": "check_failed",
           "ok": "ok"}


def check_shape(problem: Problem) -> tuple[int, int, int]:
    """A bounded problem for the numerics check: each size clipped to :data:`CHECK_MAX`
    (multiples of 8, so the TMA alignment of a valid problem is kept, and clipping never adds an operand
    to stage: a kernel of the aligned-staging path stages its operands whatever their alignment)."""
    return tuple(min(x, cap) for x, cap in zip((problem.m, problem.n, problem.k), CHECK_MAX))  # type: ignore[return-value]


def measurement(result: Any) -> Measurement:
    """The :class:`Measurement` of one :class:`~argus_cutlass.generate.RunResult`."""
    status = _STATUS.get(result.status)
    if status is None:  # stopped early (no GPU): nothing was measured
        return Measurement("invalid", None, f"not measured: {result.status} ({result.skipped})")
    if status == "ok":
        return Measurement("ok", result.ms)
    if status == "check_failed":
        return Measurement(status, None, "; ".join(c.summary() for c in result.checks if not c.passed)[:2000])
    err = result.error
    text = f"[{err.rule}] {err.message}" if status == "compile_error" else str(err)
    return Measurement(status, None, text[:2000])


class GpuEvaluator:
    """Compile, check and time configs for ``problem`` on the current GPU.

    Args:
        problem: the GEMM to tune.
        workers: parallel nvcc processes (default: CPU count).
        warmup, iters: timing launches (:class:`argus_cutlass.generate.Options`; GEMMs are timed with its default
            timing, :data:`argus_cutlass.runtime.timing.DEFAULT_TIMING`).

    The verifier's SMT tier runs when z3-solver is installed (else a note in :attr:`notes`).
    """

    def __init__(self, problem: Problem, workers: int | None = None, warmup: int = 10, iters: int = 50) -> None:
        self.problem = problem
        self.workers = workers
        self.warmup = warmup
        self.iters = iters
        self.sources: dict[GemmConfig, str] = {}
        self.notes: list[str] = []

    def __call__(self, configs: list[GemmConfig]) -> list[Measurement]:
        from argus_cutlass.generate import Options, run_many

        options = Options(smt=None, baseline=False, check_shapes=(check_shape(self.problem),),
                          warmup=self.warmup, iters=self.iters, workers=self.workers)
        results = run_many(configs, self.problem, options=options)
        for r in results:
            if r.source is not None:
                self.sources[r.config] = r.source
            self.notes += [n for n in r.notes if n not in self.notes]
        return [measurement(r) for r in results]


class TableEvaluator:
    """Replays measured times: ``table[kernel name] = ms`` (None or inf = failed).

    A configuration is looked up by its program's kernel name
    (:func:`argus_cutlass.generate.kernel_name`), then by the name kernels had before names
    carried the program's hash (:func:`argus_cutlass.generate.kernel_label`), so tables measured then
    still replay. A config missing from the table is reported as ``invalid`` (not measured).
    """

    def __init__(self, table: Mapping[str, float | None]) -> None:
        self.table = dict(table)

    def __call__(self, configs: list[GemmConfig]) -> list[Measurement]:
        from argus_cutlass.generate import kernel_label

        out = []
        for cfg in configs:
            name = table_key(cfg, self.table)
            if name is None:
                out.append(Measurement("invalid", None, f"{kernel_label(cfg)} is not in the measured table"))
                continue
            ms = self.table[name]
            if ms is None or ms == float("inf"):
                out.append(Measurement("check_failed", None, "failed in the measured table"))
            else:
                out.append(Measurement("ok", float(ms)))
        return out


def table_key(cfg: GemmConfig, table: Mapping[str, Any]) -> str | None:
    """The key of ``cfg`` in a measured table: its kernel name, else its label (older tables)."""
    from argus_cutlass.errors import ArgusError
    from argus_cutlass.generate import kernel_label, kernel_name

    try:
        name = kernel_name(cfg)
    except ArgusError:
        name = None
    if name is not None and name in table:
        return name
    label = kernel_label(cfg)
    return label if label in table else None
