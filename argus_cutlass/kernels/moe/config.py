"""Frozen configuration of one MoE layer's kernels (routing, gate+up, down, combine).

A :class:`MoEConfig` fixes every compile-time choice of the four kernels of
:mod:`argus_cutlass.kernels.moe.program`; the problem's E, k, H, I and dtype are compile-time
constants of the generated file too, T stays a run-time argument (proved up to 2^20).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["MoEConfig"]


class MoEConfig(BaseModel):
    """The kernels of one MoE layer.

    Attributes:
        tile_m: rows of a grouped-GEMM tile (both GEMMs): 128 (two consumer warpgroups split the
            tile, cooperative) or 64 (one warpgroup per tile, ping-pong). Every expert's group of
            routed rows starts at a multiple of ``tile_m`` in the permuted buffers (padded layout),
            so no tile holds rows of two experts.
        gu_tile_n: columns of the gate+up tile: ``gu_tile_n / 2`` gate columns and the same
            ``gu_tile_n / 2`` up columns of one expert (paired halves), so the SwiGLU epilogue
            writes ``gu_tile_n / 2`` columns of h.
        dn_tile_n: columns (of H) of the down tile.
        tile_k: k extent of a pipeline stage (both GEMMs).
        gu_stages, dn_stages: mainloop pipeline depth of each GEMM.
        epi_n: epilogue subtile width (divides both GEMMs' output tiles).
        route_chunk: routed rows (token, slot) per CTA of the count and permute kernels (also
            their threads per CTA).
        combine_threads: threads per CTA of the combine kernel (one CTA per token).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    dtype: Literal["bf16", "fp16"] = "bf16"
    tile_m: Literal[64, 128] = 128
    gu_tile_n: int = Field(256, gt=0)
    dn_tile_n: int = Field(128, gt=0)
    tile_k: int = Field(64, gt=0)
    gu_stages: int = Field(4, gt=0)
    dn_stages: int = Field(5, gt=0)
    epi_n: int = Field(32, gt=0)
    route_chunk: Literal[128, 256, 512, 1024] = 256
    combine_threads: Literal[64, 128, 256, 512] = 128

    @property
    def schedule(self) -> str:
        """``cooperative`` for 128-row tiles, ``pingpong`` for 64-row tiles."""
        return "cooperative" if self.tile_m == 128 else "pingpong"

    def replace(self, **changes: object) -> MoEConfig:
        """A copy with ``changes`` applied (validated again)."""
        return MoEConfig(**{**self.model_dump(), **changes})
