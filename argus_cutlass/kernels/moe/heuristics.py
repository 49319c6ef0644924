"""The MoE configuration by T bucket (the fallback when the tuned table has no entry for the
problem's power-of-two T bucket: :func:`argus_cutlass.agent.store.lookup_moe_config`).

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
  (8 stages) for the long K = I loops. Both walks use bands of :func:`small_t_band` m-tiles: the
  most m-tiles one expert's group can fill, ``ceil(T' / 64)`` for the T bucket's power of two T'
  (a token routes to an expert at most once, so a group holds at most T rows): 1 up to T = 64, 2 up
  to 128, 4 up to 256. Two effects decide the walk when the weights dominate the traffic:
  (1) unbanded, the walk sweeps every m-tile at one n-block while the weights stream through L2 and
  evict A before the next n-block, so A is re-read from DRAM per n-block (ncu, H200, session 17,
  Qwen3 T=16, unbanded: gate+up moved 638 MB for 536 MB of activated W13, L2 hit rate 6.9%);
  (2) a band narrower than an expert's group splits the expert's m-tiles into different waves, and
  its weight tiles, read together by all its m-tiles under the unbanded walk, are then read once
  per m-tile. Measured (H200, session 18, ``bench/profile_moe.py --bands``, L2 flushed, gate+up +
  down GEMM time): Mixtral T=256 (64 rows per expert on average, often 2 m-tiles) unbanded 819 us,
  bands of 1 955 us, bands of 4 825 us; Qwen3 T=256 unbanded 382 us, 1: 332 us, 4: 335 us; at T=16
  (one m-tile per expert) bands of 1 beat the unbanded walk in all three anchor models (bench:
  Mixtral 0.745 vs 0.769 ms, Qwen3 0.254 vs 0.281, DeepSeek 0.296 vs 0.321).
  The permute kernel's gather is cut into :func:`gather_slices_for` column slices per routing
  chunk (``MoEConfig.gather_slices``). The 64-row tiles' gate+up unit is ``SINGLE_TILE_GU_N`` = 128
  W13 rows, not 256: half the unit, half the tail of the last units (measured, see the constant).
  Where the typical group outgrows 64 rows (:func:`small_t_tile_m`: the 64-row tile's expected weight
  passes, :func:`expected_m_tiles`, ``SPILL_RATIO`` times the 128-row tile's; Mixtral at T = 256, 64 rows
  per expert on average) the bucket takes 128-row cooperative tiles instead (``small_t_config(tile_m=128)``):
  each further m-tile of a group re-streams the expert's weights.
* ``T > 256``: the 128-row cooperative default, each GEMM's walk banded by :func:`band_for` (the
  bands depend on H, I and the tiles, not on T); the gather sliced by the same rule as at small T; where the
  groups are short (a tile or two: :func:`expected_padding` >= ``SHORT_GROUP_PADDING``) the dynamic walk, and
  row-bounded tiles unless gate+up is wide (``SHORT_GROUP_ROW_BOUNDED_GU_BLOCKS``).

Gather slices (:func:`gather_slices_for`): the permute kernel runs ``chunks = ceil(T k /
route_chunk)`` CTAs of ``route_chunk`` threads, one for T k <= 256 (ncu, H200, session 17: Qwen3 T = 16,
one CTA copying 128 rows x 4 KB = 512 KB in 16.5 us; torch.profiler, session 18: Mixtral T = 2048, 16 CTAs
of 256 rows x 8 KB, 134 us of a 3 ms layer). Cutting each row into ``slices`` column slices, one CTA
each, divides the copy per CTA by ``slices``. At small T the copy is latency-bound: a thread's
``GATHER_UNROLL`` 16-byte loads are in flight together, then stored, then the next step's, so the copy
lasts about one DRAM round trip per step. The rule takes the fewest slices (a power of two) that give
every thread ONE step: ``rows x row vectors / slices <= route_chunk x GATHER_UNROLL`` per CTA
(``rows`` = the chunk's routed rows at the T bucket's power of two, so one bucket keeps one
configuration); no slice row narrower than one whole 128-byte line (``GATHER_SLICE_BYTES``: every
load and store stays whole lines, at most ``H * elem_bytes / 128`` slices: 32 for H = 2048 bf16, 64
for H = 4096); at most ``MAX_GATHER_SLICES``; and no more CTAs than one resident wave
(``chunks x slices <= WAVE_CTAS x 2048 / route_chunk``: 1056 CTAs of 256 threads on 132 SMs of 2048
threads each), so large T, where the copy is bandwidth-bound with many chunks, is not cut further than
the SMs hold at once. Measured (H200, session 40, shipped small-T entries vs the same with slices
changed, 8 interleaved rounds of 20-call medians, L2 flushed; ``bench/data/moe_gather_slices_h200_s40.log``):
Qwen3 T = 16 8 -> 32 slices 244.9 -> 241.3 us, DeepSeek T = 16 8 -> 32 263.8 -> 260.9, Qwen3 / DeepSeek
T = 256 8 -> 32 -1.5 %; Mixtral T = 16 (the rule's 16 unchanged) 32 / 64 slices within +-0.4 %. The
rule until session 39 (``WAVE_CTAS // chunks``, slices of at least 512 B) gave 8 / 8 / 16 at T = 16.

Bands (:func:`band_for`, derived from the L2 argument; measured session 18 against the unbanded walk,
bench ``unbanded ms`` column: Mixtral T = 8192 9.87 vs 11.71 ms, T = 2048 3.03 vs 3.10; Qwen3 T = 2048
0.584 vs 0.793, T = 8192 1.48 vs 1.78; DeepSeek T = 2048 0.691 vs 0.927, T = 8192 1.81 vs 2.21): the persistent walk runs
``WAVE_CTAS`` (132, the H200's SMs) consecutive units at a time. With ``band_m`` m-tiles per band
a wave reads ``band_m`` m-tiles of A (``tile_m`` rows of K each) and ``ceil(132 / band_m)``
n-blocks of B (``b_rows`` rows of K each: 256 for gate+up, the gate and up halves, 128 for down),
or, when a band holds fewer than 132 units, every n-block of ``ceil(132 / tiles_n)`` m-tiles.
The unbanded walk reads up to 132 m-tiles of A per wave and then reads A again for the next
n-block: once A outgrows L2 (60 MB; Mixtral T = 8192: 134 MB of xs, 470 MB of h), every n-block
re-reads it from DRAM. :func:`band_for` picks the power of two in 1..32 with the least per-wave
traffic, the smaller on a tie (no more than needed), near ``sqrt(132 b_rows / tile_m)``.

>>> from argus_cutlass.kernels.moe.problem import MoEProblem
>>> default_config(MoEProblem(16, 8, 2, 4096, 14336)).tile_m, default_config(MoEProblem(2048, 8, 2, 4096, 14336)).tile_m
(64, 128)
>>> c = default_config(MoEProblem(8192, 8, 2, 4096, 14336))
>>> c.gu_band_m, c.dn_band_m
(16, 8)
"""

from __future__ import annotations

import functools
import math

from argus_cutlass.dsl.ir import DTYPE_BYTES
from argus_cutlass.kernels.moe.config import MAX_GATHER_SLICES, MoEConfig
from argus_cutlass.kernels.moe.problem import MoEProblem

__all__ = ["BANDS", "GATHER_SLICE_BYTES", "GATHER_UNROLL", "SINGLE_TILE_GU_N", "SMALL_T", "SMALL_T_COMBINE_HANDOFF", "SMALL_T_DYNAMIC_WALK", "SMALL_T_FUSED_ROUTING", "SMALL_T_HANDOFF", "SMALL_T_ROW_BOUNDED_TILE_M",
           "SMALL_T_PDL", "SM_THREADS", "SPILL_RATIO", "SHORT_GROUP_PADDING", "SHORT_GROUP_ROW_BOUNDED_GU_BLOCKS", "WAVE_CTAS", "band_for", "default_bands", "default_config",
           "expected_down_units", "expected_m_tiles", "expected_padding", "gate_up_blocks",
           "gather_slices_for",
           "small_t_band", "small_t_config", "small_t_tile_m", "tokens_bucket", "wave_rows"]

#: the largest T of the small-T bucket
SMALL_T = 256
#: 16-byte vectors in flight per permute-kernel thread (``MoEConfig.gather_unroll``). Measured (H200,
#: session 22, ``bench/profile_moe.py --unroll 1,4``, torch.profiler, route_permute mean of 10 calls):
#: 4 against the plain loop is 1.14-1.82x faster on every sliced cell of the 12 bench cells (Qwen3
#: T = 16 11.5 -> 6.3 us, Mixtral T = 2048 42.7 -> 25.0 us) and equal (1.00x) with one slice (Qwen3 and
#: DeepSeek T = 8192); log bench/data/moe_gather_h200_s22.log
GATHER_UNROLL = 4
#: programmatic dependent launch (``MoEConfig.pdl``) in the small-T bucket only. Measured (H200, session 23,
#: two runs: ``bench/profile_moe.py --pdl 0,1,8`` and ``moe-bench pdl``, the shipped layers with pdl flipped,
#: interleaved, end-to-end events): at T <= 256, 1.0-2.3 % faster in 5 of 6 cells in both runs (Qwen3 T = 16
#: 249.4 -> 243.9 us and 0.250 -> 0.246 ms; Mixtral T = 256 0.5 % slower in both); at T >= 2048 equal to
#: 8 % slower (bench: Mixtral T = 8192 10.02 -> 10.80 ms, DeepSeek T = 8192 1.62 -> 1.72 ms; not explained).
#: The 8-k-tile weight prefetch before the wait moved no cell beyond run-to-run noise (<= 0.7 %), so it
#: stays 0. Logs bench/data/moe_pdl_h200_s23.log, bench/data/moe_bench_h200_s23.md
SMALL_T_PDL = True
#: the gate+up -> down handoff per m-tile (``MoEConfig.handoff``) in the small-T bucket only. Measured (H200,
#: session 38, an ad-hoc script (not kept): the shipped entries with handoff off / on, 10 interleaved rounds of
#: 20-call medians by ``kernels.moe.check.time_fn``, L2 flushed before each call, pdl on): Qwen3 T = 16 239.2 -> 236.6 us,
#: DeepSeek-V2-Lite T = 16 260.9 -> 258.6, Mixtral T = 16 701.2 -> 697.1, Qwen3 T = 256 349.4 -> 346.2, DeepSeek
#: T = 256 316.1 -> 313.2 (each round's spread <= 0.6 us), Mixtral T = 256 (128-row tiles) 788.2 vs 787.8 (equal).
#: The timelines show why the gain is small: gate+up's CTAs leave over its last ~39 us (Qwen3) and the down CTAs
#: placed on the freed SMs run the units of finished m-tiles then (h and W2 loads), but gate+up's last units slow by
#: about as much (its end 157.2 -> 160.6 us): HBM is mostly busy in that tail. Not measured at T > 256 (off there). Log bench/data/moe_handoff_h200_s38.log
SMALL_T_HANDOFF = True
#: row-bounded tiles (``MoEConfig.row_bounded``: the grouped GEMMs load and store only each m-tile's routed rows)
#: in the small-T bucket on the 64-row tiles only. Measured (H200, session 41, ``.dev`` script ``rb_time.py``, kept as
#: bench/data/moe_row_bounded_h200_s41.log: the shipped entries with row_bounded off / on, 8 interleaved rounds of
#: 20-call medians by ``kernels.moe.check.time_fn``, L2 flushed before each call): 64-row tiles Qwen3-30B-A3B T = 16
#: 236.2 -> 220.5 us (-6.6 %), DeepSeek-V2-Lite T = 16 259.3 -> 252.6 (-2.6 %), Mixtral T = 16 698.6 -> 695.4 (-0.5 %),
#: Qwen3 T = 256 343.2 -> 326.5 (-4.9 %), DeepSeek T = 256 311.4 -> 302.5 (-2.9 %); the one 128-row cell, Mixtral
#: T = 256, 788.0 -> 934.4 us (+18.6 %, every round slower; not explained: its 128-row A boxes are half out of
#: bounds on average, and no profile ran), so the 128-row tiles keep the 2-D maps. Of the five 64-row cells Mixtral
#: T = 16 gained nothing beyond its rounds' spread (base 698.1-700.2 us, row-bounded 691.6-699.7), so its shipped entry
#: (the tuner's 2 % rule) keeps the 2-D maps; the rule takes the 64-row tiles as a whole (none measured slower)
SMALL_T_ROW_BOUNDED_TILE_M = (64,)
#: the down -> combine handoff per m-tile (``MoEConfig.combine_handoff``, needs pdl) in the small-T bucket. Measured
#: (H200, session 42, ``bash bench/device_pending.sh $OUT moe-ab combine_handoff=false,true ...``: the shipped
#: entries, every layer checked against fp32 first, 8 interleaved rounds of 20-call medians, L2 flushed):
#: Qwen3-30B-A3B T = 16 220.3 -> 218.1 us (-1.0 %), DeepSeek-V2-Lite T = 16 246.6 -> 245.2 (-0.6 %), Qwen3 T = 256
#: 322.2 -> 319.4 (-0.9 %), DeepSeek T = 256 296.3 -> 294.3 (-0.7 %); session 43 (``moe-variants``, the same method)
#: Mixtral T = 16 with row-bounded tiles and fused routing too: 697.9 -> 690.0 us (-1.1 %); heuristic layers (session
#: 43, ``moe-variants``): E16 k4 H4096 I4096 T = 16 434.0 -> 431.4 us (-0.6 %), Mixtral T = 256 757.1 -> 752.9 (-0.6 %,
#: rounds spread 744-807), but T = 1 Qwen3-30B-A3B 44.0 -> 45.8 us (+4.1 %) and E64 k8 H2048 I1024 50.2 -> 51.9
#: (+3.4 %), E8 k2 H1024 I512 T = 64 27.6 -> 27.8 (+0.9 %). Its gain is the combine's tail after down's last unit
#: (~6.6 us at Qwen3 T = 16): there is a tail to overlap only when the down GEMM has more than one wave of units
#: (the three slower layers have 64-128 down units for 132 CTAs, all ending together, and the combine's spin
#: only adds its polling), so it is set where :func:`expected_down_units` exceeds ``WAVE_CTAS``; it also needs a
#: banded down walk (every small-T walk is banded: :func:`small_t_band` >= 1). Logs
#: bench/data/moe_combine_handoff_ab_h200_s42.log, moe_variants_mixtral16_h200_s43.log,
#: moe_variants_ch_fr_heuristic_h200_s43.log
SMALL_T_COMBINE_HANDOFF = True
#: one routing kernel for calls whose routed rows fit one routing chunk (``MoEConfig.fused_routing``: the host still
#: launches the three routing kernels for larger T, so it is free where it does not apply) in the small-T bucket,
#: where E fits one chunk (thread e owns expert e; the configuration refuses E > route_chunk). Measured (H200,
#: session 42, ``moe-ab fused_routing=false,true``, the method above): Qwen3-30B-A3B T = 16 221.0 -> 217.1 us
#: (-1.8 %), DeepSeek-V2-Lite T = 16 246.9 -> 243.6 (-1.3 %), Mixtral T = 16 678.3 -> 677.0 (-0.2 %); with the
#: combine handoff on, Qwen3 T = 16 218.1 -> 214.8, DeepSeek T = 16 245.5 -> 241.8. Log
#: bench/data/moe_fused_routing_ab_h200_s42.log, moe_fused_routing_on_ch_ab_h200_s42.log; session 43 (heuristic
#: layers, with the combine handoff on in both): T = 1 Qwen3-30B-A3B 45.8 -> 43.1 us, E64 k8 H2048 I1024 51.9 -> 49.1,
#: E8 k2 H1024 I512 T = 64 27.8 -> 25.1 (-9.8 %), E16 k4 H4096 I4096 T = 16 431.4 -> 430.7 (log
#: moe_variants_ch_fr_heuristic_h200_s43.log)
SMALL_T_FUSED_ROUTING = True
#: the dynamic (atomic-ticket) walk of both grouped GEMMs (``MoEConfig.dynamic_walk``) in the small-T bucket where
#: the down GEMM has more than one wave of units (:func:`expected_down_units` > ``WAVE_CTAS``: with one wave every
#: CTA takes at most one unit and a ticket only adds its round trip). Why: with pdl the down GEMM's CTAs start
#: staggered as gate+up's CTAs leave (H200 timeline, session 38, Mixtral T = 16: over ~143 us), yet a static walk
#: gives each the same share; tickets give the early CTAs more. Measured on an **H100 80GB HBM3** (session 46; the
#: H200 was not lent in sessions 45-46), ``bash bench/device_pending.sh $OUT moe-variants "-;dynamic_walk=true"
#: <cells>``: the shipped entries against the same with the dynamic walk, both checked against fp32 on uniform and
#: skewed routing, 8 interleaved rounds of 20-call medians, L2 flushed: Mixtral T = 16 1001.2 -> 993.4 us (-0.8 %),
#: Qwen3-30B-A3B T = 16 300.0 -> 293.8 (-2.1 %), DeepSeek-V2-Lite T = 16 340.6 -> 332.0 (-2.5 %), Mixtral T = 256
#: 1071.9 -> 1067.6 (-0.4 %), Qwen3 T = 256 457.0 -> 451.7 (-1.2 %), DeepSeek T = 256 423.9 -> 419.2 (-1.1 %); in
#: each cell every round of the dynamic walk below every reference round. Above the bucket it was mixed (T = 2048:
#: Qwen3 -7.6 %, DeepSeek -0.9 %, Mixtral +3.7 % with rounds spread over 2.46-2.94 ms; T = 8192 +0.5 .. +2.6 %):
#: left off there (the large-T bucket takes it where groups are short: ``SHORT_GROUP_PADDING``). A third H100 machine
#: (session 47, the same command): Mixtral T = 16 -0.7 %, Qwen3 T = 16 -1.9 %, DeepSeek T = 16 -2.4 %, Qwen3 /
#: DeepSeek T = 256 -1.3 / -1.2 %. The H200 (session 48, the five cells it takes): Mixtral T = 16 -0.9 %, Qwen3 /
#: DeepSeek T = 16 -1.9 / -1.8 %, T = 256 -0.8 / -0.9 %, every round below every reference round (the shipped H200
#: entries carry it since). Logs bench/data/moe_variants_dynamic_walk_h100_s46*.log, *_h100_s47_small.log,
#: *_h200_s48.log
SMALL_T_DYNAMIC_WALK = True
#: gate+up n-tile (W13 rows per unit: half gate, half up) of the small-T bucket's 64-row tiles. A grouped GEMM of
#: short units pays about one unit's time at its fair share of HBM as a tail (the last units finish unevenly):
#: ~34 us for a 256-row unit of H = 2048 (1 MB), half that at 128 rows. Measured (H200, session 25,
#: ``bench/profile_moe.py --vary gu_tile_n=64,128,256 --vary gu_stages=5,8,12``, device step moe-narrow, T = 16,
#: pdl off, one pass): 128 x 5 stages against 256 x 5, gate+up kernel 157.2 -> 147.4 us (Qwen3), 176.0 -> 162.9
#: (DeepSeek-V2-Lite), 475.2 -> 464.6 (Mixtral; the same 256 x 5 kernel timed 471.8-475.2 us in this session's
#: runs, so 7-11 us there); 64 columns at their best depth 149.1 / 164.4 / 472.3. At T = 256 (bands of 4 / 2,
#: session 37, ``--vary gu_tile_n=128,256`` on the shipped entries, pdl off, 10 runs): gate+up 219.6 -> 213.2 us
#: (Qwen3), 199.4 -> 190.7 (DeepSeek), layers 362.3 -> 353.9 / 328.7 -> 318.1 us; Mixtral's 64-row gate+up the
#: other way (560.8 vs 568.1 us), which the 128-row rule below takes out of this bucket (``small_t_tile_m``).
#: Logs bench/data/moe_narrow_h200_s25.log, bench/data/moe_t256_variants_h200_s37.log
SINGLE_TILE_GU_N = 128
#: the 128-row small-T tile is taken when the 64-row tile's expected m-tiles per expert (the passes over an
#: expert's weights) are at least this many times the 128-row tile's (:func:`small_t_tile_m`). Measured (H200,
#: session 37, ``bench/profile_moe.py --heuristic --pdl 0 --vary tile_m=64,128 ...``, the best down GEMM of each
#: tile, 10 runs): ratio 1.47 (Mixtral T = 256; E16 k4 H4096 I4096 T = 256) -> the 128-row layer 10 % / 7.5 % faster
#: (868 -> 779 us, 508 -> 470 us), 1.68 (E8 k4 H2048 I4096 T = 256) -> 21 % faster (216 -> 171 us), 1.00 (Qwen3
#: T = 256, 16 rows per expert) -> 10 % slower (352 -> 390 us: twice the padded rows and tile work, the same weight
#: passes). 1.25 is midway between the measured sides (interpolated, not measured near it). Log
#: bench/data/moe_small_t_tiles_h200_s37.log
SPILL_RATIO = 1.25
#: above the small-T bucket, the 128-row layer takes the dynamic walk and row-bounded tiles where the expected
#: padded rows of its m-tiles are at least this share of the routed rows (:func:`expected_padding` at 128 rows,
#: uniform routing at the T bucket: 1/3 at 192 rows per expert on average, 0.24 at 256). Why: where groups are a
#: tile or two long, many m-tiles are partly empty -- row-bounded tiles neither load nor store their padded rows,
#: and units of uneven cost (full and nearly empty m-tiles) leave a static walk's CTAs finishing unevenly, which
#: the tickets even out. Measured on an **H100 80GB HBM3** (session 47, the H200 not lent; ``bash
#: bench/device_pending.sh $OUT moe-variants "-;dynamic_walk=true,row_bounded=true;dynamic_walk=true" <cells>``,
#: the configuration as picked (shipped entry or heuristic) against the same with the two flags, checked against
#: fp32 on uniform and skewed routing, 8 interleaved rounds of 20-call medians, L2 flushed), padding share -> change
#: of both flags: Qwen3-30B-A3B T = 512 3.0 -> -10.6 %, T = 1024 1.0 -> -7.7 %, E128 k8 H4096 I1536 T = 1024 1.0 ->
#: -8.5 %, E64 k8 H2048 I1024 T = 1024 0.48 -> -10.1 %, Qwen3 T = 2048 0.48 -> -12.2 %, Mixtral T = 512 0.48 ->
#: -2.6 %, DeepSeek-V2-Lite T = 1024 0.33 -> -4.4 %, T = 2048 0.33 -> -2.5 %; E64 k8 H2048 I1024 T = 2048 0.24 ->
#: +1.2 %, Qwen3 T = 4096 0.24 -> +0.9 %, T = 8192 0.12 -> +3.1 %, Mixtral T = 2048 0.12 -> +6.1 %: every cell at
#: 1/3 or more faster, every cell at 0.24 or less slower; 0.3 lies between (not measured nearer). The dynamic walk
#: alone gained less on 7 of the 8 (Mixtral T = 512 -3.5 % against -2.6 %). The eight off-bench and mid-T cells ran
#: that command (``moe_variants_midT_h100_s47.log``, ``moe_variants_pad_h100_s47_*.log``); the four T = 2048 / 8192
#: bench cells ran ``"-;dynamic_walk=true,handoff=true,row_bounded=true;handoff=true,row_bounded=true;
#: dynamic_walk=true,row_bounded=true;..."`` (``moe_variants_large_rb_dw_h100_s47.log``: the "both flags" figures are
#: its ``dynamic_walk=true,row_bounded=true`` rows) and their dynamic-walk-alone figures come from separate runs
#: (``moe_variants_t2048{,_dw}_h100_s47.log``; Mixtral T = 2048: session 46). On the H200 (session 48,
#: ``moe_variants_t2048_h200_s48.log``) the T = 2048 cells did not repeat the H100's gains: Qwen3 (0.48) -0.9 % with
#: both flags, DeepSeek-V2-Lite (0.33) +2.4 % (the walk alone -1.0 %), rounds drifting and overlapping: the rule's
#: cells are still to be run on an H200.
SHORT_GROUP_PADDING = 0.3
#: with short groups, row-bounded tiles only where the gate+up GEMM has at most this many n-blocks
#: (:func:`gate_up_blocks`: the units that load each m-tile's A box). Where A boxes are loaded by many
#: n-blocks they are re-read from L2, so the padded rows row-bounded tiles skip cost little, while every partly
#: out-of-bounds box is a box the TMA unit handles: the wide gate+up of Mixtral (112 n-blocks at 256 columns) is
#: the one measured loser -- H100 session 47: T = 512 dynamic walk alone -3.5 %, with row-bounded tiles -2.6 %; ncu
#: of the T = 256 layer, gate+up 689.6 -> 710.5 us with fewer bytes (``bench/data/moe_rb_ncu_h100_s47.txt``); H200
#: session 41: T = 256 +18.6 % -- while 6, 8, 11 and 12 n-blocks (Qwen3, E64 k8 I1024, DeepSeek-V2-Lite, E128 k8
#: I1536) gained 1.3-7.5 points over the dynamic walk alone. 32 lies between 12 and 112 (interpolated: no shape
#: measured between; the down GEMM's 32 n-blocks of E128 k8 H4096 gained)
SHORT_GROUP_ROW_BOUNDED_GU_BLOCKS = 32
#: CTAs of one wave of the persistent walk (the H200's 132 SMs, one CTA each)
WAVE_CTAS = 132
#: the band sizes the heuristic chooses from (powers of two)
BANDS = (1, 2, 4, 8, 16, 32)
#: the narrowest row slice of the sliced gather, bytes: one whole 128-byte line (L2 / DRAM sector group),
#: so every load and store of a slice row covers whole lines (session 40; 512, a warp-wide sweep, until then)
GATHER_SLICE_BYTES = 128
#: threads one SM holds (sm_90: 2048 resident threads per SM, CUDA C++ Programming Guide, compute capability
#: 9.0 table): the sliced gather launches at most ``WAVE_CTAS * SM_THREADS // route_chunk`` CTAs
SM_THREADS = 2048


def small_t_config(dtype: str = "bf16", tile_m: int = 64) -> MoEConfig:
    """The small-T configuration of ``tile_m``-row tiles. 64 (default): ping-pong tiles, gate+up 256 columns
    (128 of h) x 5 stages (40 KiB each), down 128 columns x 8 stages (24 KiB each). 128 (where an expert's group
    outgrows 64 rows, :func:`small_t_tile_m`): cooperative tiles, gate+up 128 columns x 5 stages (32 KiB each),
    down 256 columns x 4 stages (48 KiB each; measured, H200 session 37: the fastest down GEMM of 128 / 256
    columns x 4 / 6 stages on all three shapes the rule picks 128 rows for, 247 / 149 / 49 us against 251 / 152 /
    58 us at 128 x 6). Unbanded walks (:func:`default_config` gives both walks bands of :func:`small_t_band`).

    Raises:
        ValueError: ``tile_m`` is not 64 or 128.

    >>> small_t_config().schedule, small_t_config(tile_m=128).schedule
    ('pingpong', 'cooperative')
    """
    if tile_m == 64:
        return MoEConfig(dtype=dtype, tile_m=64, gu_tile_n=256, dn_tile_n=128, gu_stages=5, dn_stages=8)
    if tile_m == 128:
        return MoEConfig(dtype=dtype, tile_m=128, gu_tile_n=128, dn_tile_n=256, gu_stages=5, dn_stages=4)
    raise ValueError(f"tile_m={tile_m!r}: the small-T configurations have 64- or 128-row tiles")


@functools.lru_cache(maxsize=1024)
def expected_m_tiles(problem: MoEProblem, tile_m: int) -> float:
    """Expected ``tile_m``-row m-tiles per expert, summed over the E experts, under uniform routing at the T
    bucket's power of two ``T'`` (:func:`tokens_bucket`): an expert's group is Binomial(``T'``, k / E) rows (a
    token routes to an expert at most once), and each m-tile of a group streams the expert's whole weights, so
    this counts the weight passes of a grouped GEMM.

    >>> p = MoEProblem.for_model("mixtral", 256)   # 64 rows per expert on average
    >>> round(expected_m_tiles(p, 64) / expected_m_tiles(p, 128), 2)
    1.47
    """
    n, q = tokens_bucket(problem.tokens), min(1.0, problem.topk / problem.experts)
    if q >= 1.0:
        return problem.experts * float(-(-n // tile_m))
    # log-space pmf over mean +- 12 standard deviations (+ 2 rows; the rest holds < 1e-12 of the mass even at a
    # mean of one row)
    mean, sd = n * q, math.sqrt(n * q * (1.0 - q))
    lo, hi = max(1, int(mean - 12 * sd) - 1), min(n, int(mean + 12 * sd) + 2)
    log_norm = math.lgamma(n + 1)
    total = sum(math.exp(log_norm - math.lgamma(x + 1) - math.lgamma(n - x + 1) + x * math.log(q)
                         + (n - x) * math.log1p(-q)) * -(-x // tile_m) for x in range(lo, hi + 1))
    return problem.experts * total


def expected_padding(problem: MoEProblem, tile_m: int) -> float:
    """Expected padded rows of ``tile_m``-row m-tiles as a share of the routed rows, under uniform routing at the T
    bucket's power of two ``T'``: ``expected_m_tiles * tile_m / (T' k) - 1`` (0 when every group fills whole tiles).

    >>> round(expected_padding(MoEProblem.for_model("qwen3-30b-a3b", 2048), 128), 2)   # 128 rows per expert
    0.48
    >>> round(expected_padding(MoEProblem.for_model("mixtral", 8192), 128), 2)   # 2048 rows per expert
    0.03
    """
    routed = tokens_bucket(problem.tokens) * problem.topk
    return expected_m_tiles(problem, tile_m) * tile_m / routed - 1.0


def expected_down_units(problem: MoEProblem, cfg: MoEConfig) -> float:
    """Expected units of the down GEMM's walk: :func:`expected_m_tiles` at ``cfg.tile_m`` rows times its n-blocks
    (``ceil(H / cfg.dn_tile_n)``), at the T bucket under uniform routing. At most ``WAVE_CTAS`` means one wave of
    the persistent grid: every unit ends at about the same time.

    >>> from argus_cutlass.kernels.moe.config import MoEConfig
    >>> round(expected_down_units(MoEProblem.for_model("qwen3-30b-a3b", 1), MoEConfig(tile_m=64)))   # 8 experts x 16
    128
    >>> expected_down_units(MoEProblem.for_model("qwen3-30b-a3b", 16), MoEConfig(tile_m=64)) > WAVE_CTAS
    True
    """
    return expected_m_tiles(problem, cfg.tile_m) * -(-problem.hidden // cfg.dn_tile_n)


def small_t_tile_m(problem: MoEProblem) -> int:
    """64, or 128 when the 64-row tile would stream the experts' weights ``SPILL_RATIO`` times as often as the
    128-row tile (:func:`expected_m_tiles`): the typical group outgrows one 64-row m-tile, and each further m-tile
    re-reads the expert's weights (L2 serves part of it: Mixtral T = 256's 64-row gate+up GEMM moved its
    activated weights at 3.3 TB/s, the 128-row one at 3.75).

    >>> [small_t_tile_m(MoEProblem.for_model(m, 256)) for m in ("mixtral", "qwen3-30b-a3b", "deepseek-v2-lite")]
    [128, 64, 64]
    >>> small_t_tile_m(MoEProblem.for_model("mixtral", 128))   # 32 rows per expert on average
    64
    """
    return 128 if expected_m_tiles(problem, 64) >= SPILL_RATIO * expected_m_tiles(problem, 128) else 64


def wave_rows(band_m: int, tile_m: int, b_rows: int, tiles_n: int, ctas: int = WAVE_CTAS) -> int:
    """Rows of K elements that one wave of ``ctas`` consecutive units reads under bands of ``band_m``
    m-tiles (A: ``tile_m`` rows per m-tile; B: ``b_rows`` rows per n-block), a wave starting at a
    band's first unit: ``band_m`` m-tiles x ``ceil(ctas / band_m)`` n-blocks while a band holds at
    least ``ctas`` units, else every n-block of ``ceil(ctas / tiles_n)`` m-tiles.

    >>> wave_rows(16, 128, 256, 112), wave_rows(1, 128, 256, 112)   # Mixtral gate+up
    (4352, 28928)
    """
    if band_m * tiles_n >= ctas:
        m_tiles, n_blocks = band_m, -(-ctas // band_m)
    else:
        m_tiles, n_blocks = -(-ctas // tiles_n), tiles_n
    return m_tiles * tile_m + n_blocks * b_rows


def band_for(tile_m: int, b_rows: int, tiles_n: int, ctas: int = WAVE_CTAS) -> int:
    """The band (m-tiles) of :data:`BANDS` with the least :func:`wave_rows`, the smallest on a tie.

    >>> band_for(128, 256, 112), band_for(128, 128, 32), band_for(128, 256, 6)
    (16, 8, 1)
    """
    return min(BANDS, key=lambda b: (wave_rows(b, tile_m, b_rows, tiles_n, ctas), b))


def default_bands(cfg: MoEConfig, problem: MoEProblem) -> tuple[int, int]:
    """``(gu_band_m, dn_band_m)`` of :func:`band_for` for ``cfg``'s tiles on ``problem``: gate+up
    reads ``gu_tile_n`` W13 rows per n-block over ``ceil(I / (gu_tile_n / 2))`` n-blocks, down
    ``dn_tile_n`` W2 rows over ``ceil(H / dn_tile_n)``."""
    dn_n = -(-problem.hidden // cfg.dn_tile_n)
    return band_for(cfg.tile_m, cfg.gu_tile_n, gate_up_blocks(cfg, problem)), band_for(cfg.tile_m, cfg.dn_tile_n, dn_n)


def gate_up_blocks(cfg: MoEConfig, problem: MoEProblem) -> int:
    """n-blocks of the gate+up GEMM: ``ceil(I / (gu_tile_n / 2))`` (each unit's W13 rows are half gate, half up),
    the units that load each m-tile's A box.

    >>> from argus_cutlass.kernels.moe.config import MoEConfig
    >>> gate_up_blocks(MoEConfig(), MoEProblem.for_model("mixtral", 512))   # I = 14336, 128 h columns a unit
    112
    """
    return -(-problem.ffn // (cfg.gu_tile_n // 2))


def small_t_band(problem: MoEProblem, tile_m: int = 64) -> int:
    """Bands (m-tiles) of the small-T walks: ``ceil(T' / tile_m)`` for ``T'`` the power of two at or
    above T (the T bucket of the tuned table), in [1, max(BANDS)]: the most m-tiles one expert's group
    can fill, since a token routes to an expert at most once (module docstring).

    >>> [small_t_band(MoEProblem(t, 8, 2, 4096, 14336)) for t in (1, 16, 64, 65, 128, 200, 256)]
    [1, 1, 1, 2, 2, 4, 4]
    """
    return max(1, min(BANDS[-1], -(-tokens_bucket(problem.tokens) // tile_m)))


def tokens_bucket(tokens: int) -> int:
    """T rounded up to a power of two: the T bucket of the heuristic's bands and gather slices and
    of the tuned table's MoE key (:func:`argus_cutlass.agent.store.moe_key`), so one bucket gets one
    configuration.

    Why powers of two: an expert receives at most T routed rows (a token's k experts are distinct)
    and T * k / E on average, so the m-tiles per expert, the activated experts and the grid's fill
    all move with T by factors; a power-of-two bucket keeps every T of a bucket within 2x of the
    others. The small/large boundary (``T <= SMALL_T``) is a bucket edge, so no bucket straddles it;
    and serving stacks capture CUDA graphs at powers of two (batch 1, 2, 4, ...), one entry each.

    >>> [tokens_bucket(t) for t in (1, 2, 3, 256, 257, 4096, 5000)]
    [1, 2, 4, 256, 512, 4096, 8192]
    """
    return 1 << (max(1, int(tokens)) - 1).bit_length()


def gather_slices_for(problem: MoEProblem, route_chunk: int = 256) -> int:
    """Gather slices per routing chunk: the fewest (a power of two) that leave each permute thread one
    step of ``GATHER_UNROLL`` 16-byte vectors, at most ``H * elem_bytes / GATHER_SLICE_BYTES`` (whole
    128-byte lines per slice row) and ``MAX_GATHER_SLICES``, with ``chunks x slices`` at most one
    resident wave (``WAVE_CTAS * SM_THREADS // route_chunk``), at least 1. Rows and chunks are
    counted at the power-of-two T bucket (:func:`tokens_bucket`), so every T of a bucket gets the
    same value (the module docstring derives the rule and gives the measurement).

    >>> [gather_slices_for(MoEProblem.for_model(m, 16)) for m in ("qwen3-30b-a3b", "deepseek-v2-lite", "mixtral")]
    [32, 32, 16]
    >>> [gather_slices_for(MoEProblem.for_model("mixtral", t)) for t in (1, 256, 2048, 8192, 20000)]
    [1, 64, 64, 16, 4]
    >>> [gather_slices_for(MoEProblem.for_model("qwen3-30b-a3b", t)) for t in (256, 2048, 8192)]
    [32, 16, 4]
    """
    routed = tokens_bucket(problem.tokens) * problem.topk
    chunks = max(1, -(-routed // route_chunk))
    rows = min(routed, route_chunk)   # routed rows of one chunk (the last one may hold fewer)
    row_vecs = problem.hidden * DTYPE_BYTES[problem.dtype] // 16
    step = route_chunk * GATHER_UNROLL   # vectors one CTA copies in one step of its threads
    want = -(-rows * row_vecs // step)
    widest = problem.hidden * DTYPE_BYTES[problem.dtype] // GATHER_SLICE_BYTES
    resident = WAVE_CTAS * SM_THREADS // route_chunk // chunks
    cap = max(1, min(widest, MAX_GATHER_SLICES, resident))
    # the power of two at or above want, but no more than the largest power of two within the caps
    return min(1 << (max(1, want) - 1).bit_length(), 1 << (cap.bit_length() - 1))


def default_config(problem: MoEProblem) -> MoEConfig:
    """The configuration of ``problem``'s T bucket: for ``T <= SMALL_T`` :func:`small_t_config` of
    :func:`small_t_tile_m` rows (64-row tiles with a gate+up unit of ``SINGLE_TILE_GU_N`` columns; 128-row
    tiles where an expert's group outgrows 64 rows) with bands of :func:`small_t_band`, else 128-row
    cooperative tiles, gate+up 256 columns
    (128 of h), down 128, 64-deep k stages and each GEMM's walk in bands of :func:`default_bands`
    (which depend on H, I and the tiles, not on T); both with :func:`gather_slices_for` gather slices
    and ``GATHER_UNROLL`` vectors in flight per gather thread; programmatic dependent launch
    (``SMALL_T_PDL``), the gate+up -> down handoff per m-tile (``SMALL_T_HANDOFF``), the down -> combine
    handoff (``SMALL_T_COMBINE_HANDOFF``, with pdl, where the down GEMM has more than one wave of units:
    :func:`expected_down_units` > ``WAVE_CTAS``), fused routing for one-chunk calls where E fits a routing chunk
    (``SMALL_T_FUSED_ROUTING``), the dynamic walk where the down GEMM has more than one wave of units
    (``SMALL_T_DYNAMIC_WALK``) and, on the 64-row tiles, row-bounded tiles (``SMALL_T_ROW_BOUNDED_TILE_M``) in the
    small-T bucket only; above it the dynamic walk where the 128-row m-tiles' expected padding
    (:func:`expected_padding`) is at least ``SHORT_GROUP_PADDING`` of the routed rows, and there row-bounded tiles too
    where gate+up has at most ``SHORT_GROUP_ROW_BOUNDED_GU_BLOCKS`` n-blocks.
    """
    if problem.tokens <= SMALL_T:
        tile_m = small_t_tile_m(problem)
        cfg = small_t_config(problem.dtype, tile_m)
        band = small_t_band(problem, tile_m)
        if tile_m == 64:
            cfg = cfg.replace(gu_tile_n=SINGLE_TILE_GU_N)
        waves = expected_down_units(problem, cfg) > WAVE_CTAS   # a tail for the handoff / the tickets to take
        return cfg.replace(gu_band_m=band, dn_band_m=band,
                           gather_slices=gather_slices_for(problem, cfg.route_chunk), gather_unroll=GATHER_UNROLL,
                           pdl=SMALL_T_PDL, handoff=SMALL_T_HANDOFF, row_bounded=tile_m in SMALL_T_ROW_BOUNDED_TILE_M,
                           combine_handoff=SMALL_T_PDL and SMALL_T_COMBINE_HANDOFF and waves,
                           fused_routing=SMALL_T_FUSED_ROUTING and problem.experts <= cfg.route_chunk,
                           dynamic_walk=SMALL_T_DYNAMIC_WALK and waves)
    cfg = MoEConfig(dtype=problem.dtype)
    gu, dn = default_bands(cfg, problem)
    short = expected_padding(problem, cfg.tile_m) >= SHORT_GROUP_PADDING   # groups a tile or two long
    return cfg.replace(gu_band_m=gu, dn_band_m=dn, gather_slices=gather_slices_for(problem, cfg.route_chunk),
                       gather_unroll=GATHER_UNROLL, dynamic_walk=short,
                       row_bounded=short and gate_up_blocks(cfg, problem) <= SHORT_GROUP_ROW_BOUNDED_GU_BLOCKS)
