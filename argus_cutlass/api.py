"""The Python entry points: configuration -> verified program -> source -> built kernel.

>>> from argus_cutlass.kernels.gemm.config import GemmConfig
>>> kernel = generate_gemm(GemmConfig(layout="nt"))
>>> kernel.name
'argus_gemm_sm90_bf16_bf16_nt_128x256x64_c2x1_s4_coop_e128x32_rn1'
>>> "cute::SM90_TMA_LOAD_MULTICAST" in kernel.source
True
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.programs.gemm import GemmProgram, build_gemm_program
from argus_cutlass.render.naming import kernel_name
from argus_cutlass.render.render import render_gemm


@dataclass(frozen=True)
class GeneratedKernel:
    """A verified, rendered GEMM kernel (not yet compiled)."""

    name: str
    config: GemmConfig
    program: GemmProgram
    report: object  # argus_cutlass.verify.report.VerificationReport
    source: str


def generate_gemm(cfg: GemmConfig, *, smt: bool = True) -> GeneratedKernel:
    """Build, verify and render ``cfg``.

    Args:
        smt: run the verifier's z3 tier (symbolic K, pipeline induction) too.

    Raises:
        ConfigError: the configuration cannot be instantiated.
        VerificationError: the verifier found a violation (``.report`` has all of them).
        ToolchainError: ``toolchain.z3`` when ``smt`` and z3-solver is not installed.
    """
    from argus_cutlass.verify import check_gemm

    program = build_gemm_program(cfg)
    report = check_gemm(program, smt=smt)
    source = render_gemm(program, tuple(report.proved))
    return GeneratedKernel(kernel_name(cfg), cfg, program, report, source)


def build_gemm(kernel: GeneratedKernel | GemmConfig):
    """Compile (through the content-addressed cache) and load a GEMM kernel.

    Returns:
        argus_cutlass.runtime.launch.GemmKernelLibrary, callable as
        ``lib(A, B, C, D, M, N, K, lda, ldb, ldc, ldd, alpha, beta, stream)``.

    Raises:
        ToolchainError: nvcc or the CUTLASS headers are missing.
        CompileError: nvcc/ptxas failed or warned C7510.
    """
    from argus_cutlass.build.nvcc import compile_cu
    from argus_cutlass.runtime.launch import GemmKernelLibrary

    if isinstance(kernel, GemmConfig):
        kernel = generate_gemm(kernel)
    artifact = compile_cu(kernel.source, kernel.name, "shared")
    return GemmKernelLibrary(artifact.path, kernel.name)


def build_many(configs: Iterable[GemmConfig], max_workers: int | None = None) -> dict[str, object]:
    """Compile several configurations in parallel; returns ``{kernel name: library}``."""
    from argus_cutlass.build.nvcc import compile_many
    from argus_cutlass.runtime.launch import GemmKernelLibrary

    kernels = {k.name: k for k in (generate_gemm(c) for c in dict.fromkeys(configs))}  # each config verified once
    jobs = [(k.source, k.name, "shared") for k in kernels.values()]
    artifacts = compile_many(jobs, max_workers=max_workers)
    return {name: GemmKernelLibrary(a.path, name) for name, a in zip(kernels, artifacts)}
