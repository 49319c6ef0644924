"""The default MoE configuration (no tuned entries yet: those need the GPU)."""

from __future__ import annotations

from argus_cutlass.kernels.moe.config import MoEConfig
from argus_cutlass.kernels.moe.problem import MoEProblem

__all__ = ["default_config"]


def default_config(problem: MoEProblem) -> MoEConfig:
    """128-row cooperative tiles, gate+up 256 columns (128 of h), down 128 columns, 64-deep k stages.

    >>> default_config(MoEProblem(16, 8, 2, 4096, 14336)).tile_m
    128
    """
    return MoEConfig(dtype=problem.dtype)
