"""The MoE configuration by T bucket (no tuned entries yet: those need the GPU).

T is a run-time argument of a compiled layer, but the configuration is chosen per call from the
problem's T (:func:`argus_cutlass.api.moe` keys its compiled layers by configuration, so each T
bucket has its own layer, built once). The choice is host-side and needs no device value, so a
CUDA graph captured at one T replays that bucket's layer.

Buckets (``SMALL_T``):

* ``T <= 256`` (decode / small prefill, bound by reading the activated experts' weights): 64-row
  m-tiles (ping-pong: one consumer warpgroup per tile, the two alternate tiles), groups padded to
  64 rows. Against the 128-row default this halves the token rows each unit streams beside its
  weight tile (gate+up: 64 x K of xs per 256 x K of W13, 25 % instead of 50 %; down 64 x K per
  128 x K of W2), halves the padded MMA work, and the smaller A stage buys a deeper down pipeline
  (8 stages) for the long K = I loops.
* ``T > 256``: the 128-row cooperative default.

>>> from argus_cutlass.kernels.moe.problem import MoEProblem
>>> default_config(MoEProblem(16, 8, 2, 4096, 14336)).tile_m, default_config(MoEProblem(2048, 8, 2, 4096, 14336)).tile_m
(64, 128)
"""

from __future__ import annotations

from argus_cutlass.kernels.moe.config import MoEConfig
from argus_cutlass.kernels.moe.problem import MoEProblem

__all__ = ["SMALL_T", "default_config", "small_t_config"]

#: the largest T of the small-T bucket
SMALL_T = 256


def small_t_config(dtype: str = "bf16") -> MoEConfig:
    """The small-T configuration: 64-row ping-pong tiles, gate+up 256 columns (128 of h) x 5 stages
    (40 KiB each), down 128 columns x 8 stages (24 KiB each).

    >>> small_t_config().schedule
    'pingpong'
    """
    return MoEConfig(dtype=dtype, tile_m=64, gu_tile_n=256, dn_tile_n=128, gu_stages=5, dn_stages=8)


def default_config(problem: MoEProblem) -> MoEConfig:
    """The configuration of ``problem``'s T bucket: :func:`small_t_config` for ``T <= SMALL_T``,
    else 128-row cooperative tiles, gate+up 256 columns (128 of h), down 128, 64-deep k stages.
    """
    if problem.tokens <= SMALL_T:
        return small_t_config(problem.dtype)
    return MoEConfig(dtype=problem.dtype)
