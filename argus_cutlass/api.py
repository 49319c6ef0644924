"""The Python entry points: configuration -> verified program -> source -> built kernel.

Thin, stable names over the orchestrator :mod:`argus_cutlass.generate` (which the CLI, the agent
and the benchmarks use too): nothing here runs a stage itself.

>>> from argus_cutlass.kernels.gemm.config import GemmConfig
>>> kernel = generate_gemm(GemmConfig(layout="nt"))
>>> kernel.name == kernel.program.kernel_name()
True
>>> "cute::SM90_TMA_LOAD_MULTICAST_2D" in kernel.source  # B is multicast across the 2x1 cluster
True
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from argus_cutlass.generate import GeneratedKernel, build_many as _build_many, compile_kernel, generate, load
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.problem import GemmProblem

__all__ = ["GeneratedKernel", "build_gemm", "build_many", "generate_gemm"]


def generate_gemm(cfg: GemmConfig, problem: GemmProblem | None = None, *, smt: bool = True,
                  allow_unknown: bool = False) -> GeneratedKernel:
    """Build, verify and render ``cfg`` (:func:`argus_cutlass.generate.generate`).

    Args:
        problem: the problem it will run: the symbolic-K proofs then cover its K (default:
            K < 2^24).
        smt: run the verifier's z3 tier (symbolic K, pipeline induction) too.
        allow_unknown: render even when some obligations came back ``unknown`` (the ``.cu``
            header lists them).

    Raises:
        ConfigError: the configuration has no program, or the template cannot print it.
        VerificationError: the verifier found a violation (``.report`` has all of them).
        UnprovedError: ``verify.unknown`` (no violation, but obligations not proved).
        ToolchainError: ``toolchain.z3`` when ``smt`` and z3-solver is not installed.
    """
    return generate(cfg, problem, smt=smt, allow_unknown=allow_unknown)


def build_gemm(kernel: GeneratedKernel | GemmConfig) -> Any:
    """Compile (through the content-addressed cache) and load a GEMM kernel.

    Returns:
        :class:`argus_cutlass.kernels.gemm.library.GemmKernelLibrary`, callable as
        ``lib(A, B, C, D, M, N, K, lda, ldb, ldc, ldd, alpha, beta, stream)``.

    Raises:
        ToolchainError: nvcc or the CUTLASS headers are missing.
        CompileError: nvcc/ptxas failed or warned C7510.
    """
    if isinstance(kernel, GemmConfig):
        kernel = generate_gemm(kernel)
    return load(kernel, compile_kernel(kernel))


def build_many(configs: Iterable[GemmConfig], max_workers: int | None = None) -> dict[str, Any]:
    """Compile several configurations in parallel; returns ``{kernel name: library}``
    (:func:`argus_cutlass.generate.build_many`)."""
    return _build_many(configs, workers=max_workers)
