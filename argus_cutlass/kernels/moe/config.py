"""Frozen configuration of one MoE layer's kernels (routing, gate+up, down, combine).

A :class:`MoEConfig` fixes every compile-time choice of the four kernels of
:mod:`argus_cutlass.kernels.moe.program`; the problem's E, k, H, I and dtype are compile-time
constants of the generated file too, T stays a run-time argument (proved up to 2^20).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from argus_cutlass.dsl.ir import MAX_BAND_M
from argus_cutlass.kernels.fields import not_a_bool

__all__ = ["MAX_GATHER_SLICES", "MoEConfig"]

#: the largest ``gather_slices`` (64 slices of a 16-byte-vector row: H >= 512 keeps every slice non-empty)
MAX_GATHER_SLICES = 64


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
        gu_band_m, dn_band_m: the walk of each GEMM's persistent scheduler over its ``tiles_m``
            m-tiles (all experts' groups; data, written by the routing kernel) x ``tiles_n``
            n-blocks, ``units = tiles_m * tiles_n`` either way. 0 (the default, every earlier
            kernel's walk): unit ``u`` is m-tile ``u % tiles_m``, n-block ``u / tiles_m``, so a wave
            of CTAs covers every m-tile at one n-block and A is read again for each n-block.
            ``band_m`` >= 1: the m-tiles are cut into bands of ``band_m`` consecutive m-tiles (the
            last band holds ``rows = min(band_m, tiles_m - b * band_m)``), each walked m-fastest
            then n before the next band: ``b = u / (band_m * tiles_n)``, ``local = u - b * band_m *
            tiles_n``, m-tile ``b * band_m + local % rows``, n-block ``local / rows`` (Triton's
            ``GROUP_M``). A wave of 132 CTAs then reads ``band_m`` m-tiles of A and about ``132 /
            band_m`` n-blocks of B, which stay in L2. Rule: an int in [0, 64]; the walk is proved a
            bijection for every tiles_m (``scheduler.bijection``, ``moe.group_tiles``). ``band_m``
            1 is a walk too (one m-tile's n-blocks consecutive), not the default walk.
        gather_slices: CTAs per routing chunk of the permute kernel's gather (its grid's y extent).
            CTA ``(x, y)`` ranks chunk ``x``'s routed rows as every y does (the rank reads only
            ids, offsets and block_counts, which the kernel does not write, so every y computes the
            same rows; only ``y == 0`` stores the row map) and copies the 16-byte vectors of
            columns ``[y S, min((y + 1) S, H))`` of each row, ``S = ceil(ceil(H / vec) / slices) *
            vec`` (``vec`` = 8 elements of 16 bytes). 1 (the default): today's kernel, one CTA per
            chunk copying whole rows (same ``.cu``, kernel name and output). Rule: an int in
            [1, 64]; every element of every real row of xs written exactly once
            (``moe.gather``).
        gather_unroll: 16-byte vectors each permute-kernel thread loads before storing them (1, 2,
            4 or 8): the gather is a latency-bound copy when few CTAs run it (small T: one chunk x
            ``gather_slices`` CTAs), so more loads in flight per thread shorten it. 1 (the field's
            default): the loop of earlier kernels (same ``.cu``, name and output); the heuristic and
            every shipped entry take 4 (``heuristics.GATHER_UNROLL``, measured session 22). Every thread copies the same
            vectors either way (``moe.gather`` enumerates the printed loop).
        work_lookahead: 0 or 1, both grouped GEMMs' schedule node ``lookahead``: with 1 the producer
            reads its next unit's expert (``tile_expert``, device memory) before issuing the current
            unit's TMA loads, so that dependent load is not paid between two units' loads (the weight
            stream of a short unit, e.g. Qwen3's down GEMM with K = I = 768, lasts ~10 us). 0 (the
            default): the loop of earlier kernels (same ``.cu``). Measured on the H200 (session 23): no
            effect on any grouped GEMM (within 2 us), so 0 everywhere.
        pdl: programmatic dependent launch of the layer's kernels (layer node ``pdl``, rule
            ``moe.pdl``): every kernel after ``route_count`` may start while the previous one
            finishes and waits for it (``griddepcontrol.wait``) before its first global access,
            so each launch and prologue overlaps the previous kernel's tail (six kernels per layer;
            at small T the layer lasts 0.25-0.9 ms). False (the default): plain stream order (same
            ``.cu``). Measured on the H200 (session 23): 1-2 % faster at T <= 256, up to 8 % slower at
            T >= 2048, so the small-T heuristic sets it (``heuristics.SMALL_T_PDL``).
        weight_prefetch: with ``pdl``, k-tiles of its first unit's weights each grouped GEMM's
            producer prefetches into L2 before its wait (layer node ``weight_prefetch``): the
            weight stream starts while the previous kernel (the permute before gate+up, gate+up's
            tail before down) still runs. 0 (the default): none. Measured on the H200 (session 23): 8
            k-tiles moved no layer beyond run-to-run noise.
        weights_evict_first: both grouped GEMMs load the expert weights (W13, W2: the B operand) with
            L2 eviction priority ``evict_first`` (load node ``cache_hint``; PTX ``.L2::cache_hint``),
            the tokens (A) with ``evict_normal``: at small T each weight byte is read once, so weight
            lines should replace each other in L2 rather than the lines already there (the tokens, the
            other layers' activations, or the dirty lines a benchmark's L2 flush leaves, whose
            write-back would share HBM with the weight stream). False (the default): every load
            ``evict_normal`` (same ``.cu``). Measured on the H200 (session 25, device step moe-flush, T = 16):
            no gain under the benchmark's written L2 flush (gate+up -2 to +10 us, mixed), 1-17 us faster
            under a read flush; default off (bench/RESULTS.md session 25).
        handoff: the down GEMM starts each m-tile once gate+up has stored that m-tile's h rows (per-m-tile
            counters, release / acquire at GPU scope; layer node ``handoff``, rule ``moe.handoff``), instead
            of waiting for the whole gate+up kernel: with ``pdl`` the down CTAs, placed on the SMs gate+up's
            CTAs leave, run the units of finished m-tiles (A and W2 loads) during gate+up's last units (H200,
            session 38: at T = 16 gate+up's CTAs leave over ~39 us (Qwen3) to ~143 us (Mixtral) before the last
            one; the layer 0.4-1.3 % faster). False (the default): the kernels of earlier layers (same ``.cu``).
        row_bounded: both grouped GEMMs load A (xs, h) and store D (h, out) through 3-D tensor maps ``(K or N,
            tile_m rows, m-tiles)``, each m-tile's boxes placed ``tile_m - valid`` rows into it (``valid`` = its
            routed rows, a ``tile_rows`` table route_scan writes beside ``tile_expert``; the permute puts each
            group's padding rows before its routed rows; load / store node ``row_bound``, routing node
            ``tile_rows`` and ``group_padding``): the box rows past the m-tile are out of the map's bounds, so the
            loads zero-fill them without reading memory and the stores do not write them. At small T an
            m-tile holds 1-4 routed rows of 64, and the padding rows' loads and stores were ~85 MB beside 802 MB of
            weights at Qwen3-30B-A3B T = 16 (H200, session 40, ncu). False (the default): 2-D maps over the whole
            padded tiles (same ``.cu``).
        combine_handoff: the combine reads each term's row of ``out`` once the down GEMM has stored that row's m-tile
            (per-m-tile counters ``out_ready``, release / acquire at GPU scope; layer node ``combine_handoff``, rule
            ``moe.combine_handoff``), instead of waiting for the whole down kernel: the combine CTAs, launched
            programmatically on the SMs down's CTAs leave, add the terms of finished m-tiles during down's last
            units (H200, session 38, Qwen3-30B-A3B T = 16 with pdl: down ends at 230.3 us, the combine 6.6 us later, its
            first CTA resident from 218.1 us and waiting; bench/data/moe_small_t_variants_h200_s38.log). Needs ``pdl``. Measured (H200, session 42, ``moe-ab
            combine_handoff=false,true``): 0.6-1.0 % faster on Qwen3-30B-A3B / DeepSeek-V2-Lite at T = 16 and 256, set
            in those shipped entries; the heuristic leaves it off. False (the default): the kernels of earlier layers
            (same ``.cu``).
        fused_routing: when the run-time T gives one routing chunk (``T * k <= route_chunk``) the host launches ONE
            routing kernel, ``route_fused`` (grid ``1 x gather_slices``), instead of route_count, route_scan and
            route_permute: each CTA loads the chunk's ids, builds the expert histogram in shared memory, scans it
            with route_scan's formulas and ranks and gathers its slice of x as route_permute does; CTA y == 0 alone
            writes the tables (routing node ``fused``, rules moe.offsets / moe.bijection / moe.gather / moe.pdl /
            moe.launch / moe.workspace cover both paths and their mixes over consecutive calls). Needs E <=
            ``route_chunk`` (one expert per thread of the CTA) and no ``weight_prefetch`` (the prefetch reads tables
            route_fused, the kernel right before gate+up, writes). Other T keep the three kernels; the output is
            bitwise the same. Measured (H200, session 42): 1.3-1.8 % faster at T = 16 on Qwen3-30B-A3B /
            DeepSeek-V2-Lite (set in those shipped entries), 0.2 % on Mixtral; the heuristic leaves it off. False (the default): the three kernels for every T
            (same ``.cu``).
        dynamic_walk: both grouped GEMMs walk their units dynamically: the producer's elected thread takes tickets
            ``t = atomicAdd(counter, 1)`` from a per-GEMM counter in the workspace (``gu_tickets`` / ``dn_tickets``,
            zeroed every call by route_scan or route_fused) and computes the static walk's unit ``t`` (the same
            banded m-tile-major order, handoff targets and row-bounded shifts), publishing each unit (and an end
            marker once ``t >= units``) to the consumer warpgroups through a ring of smem slots with its own
            mbarriers (schedule node ``slot_bytes`` / ``slot_stages``, rule ``moe.dynamic_walk``). CTAs that start
            early (the down GEMM's, placed by programmatic dependent launch as gate+up's CTAs leave) or stream
            faster take more units, instead of each CTA's fixed share ``c, c + grid, ...``. Not with
            ``weight_prefetch`` (the prefetch reads the first unit before the wait; a ticket is taken only after
            it) nor ``work_lookahead``. False (the default): the static walk (same ``.cu``). Built and verified,
            NOT yet measured on the H200.
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
    gu_band_m: int = Field(0, ge=0, le=MAX_BAND_M)
    dn_band_m: int = Field(0, ge=0, le=MAX_BAND_M)
    gather_slices: int = Field(1, ge=1, le=MAX_GATHER_SLICES)
    gather_unroll: Literal[1, 2, 4, 8] = 1
    work_lookahead: Literal[0, 1] = 0
    pdl: bool = False
    weight_prefetch: Literal[0, 4, 8, 16] = 0
    weights_evict_first: bool = False
    handoff: bool = False
    row_bounded: bool = False
    combine_handoff: bool = False
    fused_routing: bool = False
    dynamic_walk: bool = False

    _integers = field_validator("tile_m", "gu_tile_n", "dn_tile_n", "tile_k", "gu_stages", "dn_stages", "epi_n",
                                "route_chunk", "combine_threads", "gu_band_m", "dn_band_m", "gather_slices",
                                "gather_unroll", "work_lookahead", "weight_prefetch", mode="before")(not_a_bool)

    @model_validator(mode="after")
    def _combinations(self) -> MoEConfig:
        """Fields that need or exclude each other; every broken pair is named (review, session 44: the first one
        alone named a pair the user had not just set)."""
        broken = []
        if self.weight_prefetch and not self.pdl:
            broken.append(f"weight_prefetch={self.weight_prefetch} needs pdl=True (the prefetch runs before "
                          "griddepcontrol.wait, which only a programmatic launch has)")
        if self.fused_routing and self.weight_prefetch:
            broken.append(f"fused_routing=True with weight_prefetch={self.weight_prefetch}: gate+up's prefetch "
                          "reads tiles_m and tile_expert before its griddepcontrol.wait, and route_fused, the kernel "
                          "right before it, writes them (rule moe.pdl); leave one off")
        if self.dynamic_walk and (self.weight_prefetch or self.work_lookahead):
            broken.append(f"dynamic_walk=True with weight_prefetch={self.weight_prefetch} / work_lookahead="
                          f"{self.work_lookahead}: with tickets a CTA's first unit is known only after its "
                          "atomicAdd (after griddepcontrol.wait), and the producer takes its next ticket itself; "
                          "leave them at 0")
        if self.combine_handoff and not self.pdl:
            broken.append("combine_handoff=True needs pdl=True (the combine overlaps the down GEMM only when it is "
                          "launched programmatically; its griddepcontrol.wait exists only then)")
        if broken:
            raise ValueError("; and ".join(broken))
        return self

    @property
    def schedule(self) -> str:
        """``cooperative`` for 128-row tiles, ``pingpong`` for 64-row tiles."""
        return "cooperative" if self.tile_m == 128 else "pingpong"

    def replace(self, **changes: object) -> MoEConfig:
        """A copy with ``changes`` applied (validated again)."""
        return MoEConfig(**{**self.model_dump(), **changes})

    def with_pdl(self, pdl: bool, weight_prefetch: int = 0) -> MoEConfig:
        """A copy launched with programmatic dependent launch ``pdl`` and ``weight_prefetch`` k-tiles prefetched
        before the wait, the fields that depend on them following: the combine handoff only with pdl, the fused
        routing and the dynamic walk only without a prefetch (each pair is refused by this model's rules; e.g. to
        flip pdl on a shipped small-T entry, which has them).

        >>> MoEConfig(pdl=True, combine_handoff=True, fused_routing=True).with_pdl(False).combine_handoff
        False
        >>> c = MoEConfig(pdl=True, fused_routing=True, dynamic_walk=True).with_pdl(True, 8)
        >>> c.fused_routing, c.dynamic_walk, c.weight_prefetch
        (False, False, 8)
        """
        return self.replace(pdl=pdl, weight_prefetch=weight_prefetch, combine_handoff=self.combine_handoff and pdl,
                            fused_routing=self.fused_routing and not weight_prefetch,
                            dynamic_walk=self.dynamic_walk and not weight_prefetch)

    def with_lookahead(self, work_lookahead: int) -> MoEConfig:
        """A copy whose grouped GEMMs' producers read ``work_lookahead`` units ahead, the dynamic walk following:
        only without a lookahead (the dynamic walk's first unit is known only after its ticket; the pair is
        refused by this model's rules).

        >>> c = MoEConfig(dynamic_walk=True).with_lookahead(1)
        >>> c.work_lookahead, c.dynamic_walk
        (1, False)
        """
        return self.replace(work_lookahead=work_lookahead, dynamic_walk=self.dynamic_walk and not work_lookahead)
