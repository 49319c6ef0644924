"""The MoE search space: typed knobs of :class:`~argus_cutlass.kernels.moe.config.MoEConfig` (tuned
entries, keyed by a power-of-two T bucket, live in the agent's table: ``agent/tuned_h200.json``, from
``bench/tune_moe_grid.py``). Each knob has a default and its allowed values; the feasibility function is the verifier (a configuration is feasible when its layer verifies).

>>> sorted(KNOBS)[:3]
['combine_handoff', 'combine_threads', 'dn_band_m']
>>> len(list(enumerate_space(limit=4)))
4
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator

from argus_cutlass.kernels.moe.config import MoEConfig

__all__ = ["KNOBS", "T_BUCKETS", "UNMEASURED_TILE_N", "bucket_of", "candidates", "enumerate_space", "feasible",
           "with_tile_k", "with_tile_n"]

#: T buckets of the heuristic (tuned entries key on finer power-of-two buckets,
#: :func:`argus_cutlass.agent.store.moe_tokens_bucket`): name -> (lowest T, highest T)
T_BUCKETS: dict[str, tuple[int, int]] = {"small": (1, 256), "large": (257, 2**20)}


def bucket_of(tokens: int) -> str:
    """The T bucket of ``tokens``.

    >>> bucket_of(1), bucket_of(256), bucket_of(257)
    ('small', 'small', 'large')
    """
    for name, (lo, hi) in T_BUCKETS.items():
        if lo <= tokens <= hi:
            return name
    raise ValueError(f"T={tokens} is outside every bucket {T_BUCKETS}")

#: knob -> allowed values (the default first). ``tile_m`` 64: ping-pong tiles, groups padded to 64 rows (the small-T
#: path, :func:`argus_cutlass.kernels.moe.heuristics.small_t_config`); 128: cooperative tiles (the large-T path, and
#: the small-T one where an expert's group outgrows 64 rows, ``heuristics.small_t_tile_m``).
#: ``gu_band_m`` / ``dn_band_m``: 0 the unbanded walk, else m-tiles per band of the grouped walk
#: (powers of two; the large-T heuristic derives them per shape: ``heuristics.band_for``).
#: ``tile_k``: k extent of a pipeline stage (both GEMMs); 128 doubles each TMA row segment to 256
#: bytes and each stage's size, so :func:`candidates` halves the stage counts with it.
#: ``gu_tile_n`` / ``dn_tile_n`` 64 (session 24): the finest units, for the small-T GEMMs whose measured time is a
#: fixed ~27 us plus the weight bytes at 4.1 TB/s and whose SMs idle 8-15 % at the walk's end (bench/RESULTS.md
#: session 24; vLLM's tuned H200 Triton configuration for E = 128, N = 768 at M <= 32 streams 64-column blocks);
#: gate+up 64 holds 32 gate + 32 up columns, and ``gu_stages`` 10 / 12 keep its bytes in flight. Measured (session 25,
#: moe-narrow, T = 16): 64 no faster than 128 (which beat 256), so it stays behind the other moves.
#: ``gather_slices``: column slices (grid y CTAs) per routing chunk of the permute kernel's gather
#: (the heuristic derives them from the chunk count and H at every T: ``heuristics.gather_slices_for``,
#: up to ``MAX_GATHER_SLICES``). ``gather_unroll``: 16-byte loads in flight per thread of that gather (4 in
#: the heuristic and the shipped entries since session 22's measurement, 1 the plain loop).
#: ``work_lookahead``: the grouped GEMMs' producers read their next unit's expert ahead (1) or not (0; measured
#: in session 23: no effect, so 0 in the heuristic and the shipped kernels). ``pdl``: programmatic dependent
#: launch of the layer's kernels (the small-T heuristic sets it, session 23: 1-2 % faster at T <= 256, up to 8 %
#: slower at T >= 2048); ``weight_prefetch``: with pdl, k-tiles of the grouped GEMMs' first weights prefetched
#: into L2 before the wait (0 in the heuristic: no measurable effect in session 23). ``weights_evict_first``: the
#: grouped GEMMs load the expert weights with L2 priority evict-first (session 25: no gain under the bench's flush; proposed after
#: the measured moves at small T). ``handoff``: the down GEMM starts each m-tile once gate+up stored it (session 38:
#: 0.6-1.1 % faster on 5 of the 6 small-T bench cells, equal on the sixth; the small-T heuristic sets it).
#: ``row_bounded``: the grouped GEMMs load and store only each m-tile's routed rows (3-D tensor maps, session 41).
#: ``combine_handoff``: the combine reads each term's row once down stored its m-tile (needs pdl; session 42: 0.6-1.0 %
#: faster at small T, in the shipped small-T entries and the small-T heuristic; :func:`_neighbours` proposes it last)
#: ``fused_routing``: one routing kernel instead of three for calls with one routing chunk (T * k <= route_chunk;
#: session 42: 1.3-1.8 % faster at T = 16 for H = 2048; proposed after the other moves, before the combine handoff,
#: without a weight prefetch; the small-T heuristic sets it where E fits one routing chunk).
#: ``dynamic_walk``: the grouped GEMMs take their units by atomic tickets instead of the static ``c, c + grid, ...``
#: (built in session 43; measured on an H100 in sessions 46-47: -0.4 .. -2.5 % at small T, -0.8 .. -7.7 % at large T
#: with short groups; on the H200 in session 48: -0.8 .. -1.9 % at small T, 0.0 / -1.0 % at Qwen3 / DeepSeek T = 2048;
#: the heuristic sets it there, ``heuristics.SHORT_GROUP_PADDING``; proposed after every other
#: move, except at large T where the heuristic set it: turned off first; never with a weight prefetch or lookahead).
KNOBS: dict[str, tuple] = {
    "tile_m": (128, 64),
    "tile_k": (64, 128),
    "gu_tile_n": (256, 128, 64),
    "dn_tile_n": (128, 256, 64),
    "gu_stages": (4, 3, 5, 6, 8, 10, 12),
    "dn_stages": (5, 4, 6, 8, 10, 12),
    "epi_n": (32, 64),
    "route_chunk": (256, 512, 1024),
    "combine_threads": (128, 256),
    "gu_band_m": (0, 1, 2, 4, 8, 16, 32),
    "dn_band_m": (0, 1, 2, 4, 8, 16, 32),
    "gather_slices": (1, 2, 4, 8, 16, 32, 64),
    "gather_unroll": (1, 4, 2, 8),
    "work_lookahead": (0, 1),
    "pdl": (False, True),
    "weight_prefetch": (0, 8, 4, 16),
    "weights_evict_first": (False, True),
    "handoff": (False, True),
    "row_bounded": (False, True),
    "combine_handoff": (False, True),
    "fused_routing": (False, True),
    "dynamic_walk": (False, True),
}


def enumerate_space(dtype: str = "bf16", limit: int | None = None) -> Iterator[MoEConfig]:
    """Every valid configuration of the knob grid (default-first order; combinations MoEConfig refuses,
    e.g. a weight prefetch without pdl, left out), at most ``limit``."""
    from pydantic import ValidationError

    names = list(KNOBS)
    n = 0
    for values in itertools.product(*(KNOBS[k] for k in names)):
        if limit is not None and n >= limit:
            return
        try:
            cfg = MoEConfig(dtype=dtype, **dict(zip(names, values)))
        except ValidationError:
            continue
        n += 1
        yield cfg


@functools.lru_cache(maxsize=65536)
def feasible(cfg: MoEConfig, problem: object) -> bool:
    """True when the layer of ``cfg`` builds and verifies for ``problem`` (smem, stages, tiles...).
    Memoised per (config, problem), both frozen, like the GEMM and attention ``feasible``: the lookup
    of a tuned entry asks it on every ``generate.run`` / ``api.moe`` call of a T bucket."""
    from argus_cutlass.errors import ArgusError
    from argus_cutlass.kernels.moe.program import build_layer
    from argus_cutlass.verify.moe import verify_moe

    try:
        return verify_moe(build_layer(cfg, problem), smt=False).ok
    except ArgusError:
        return False


def with_tile_k(cfg: MoEConfig, tile_k: int) -> MoEConfig:
    """``cfg`` with k stages ``tile_k`` deep and both stage counts scaled by ``cfg.tile_k / tile_k``
    (at least 2): about the same shared memory per pipeline.

    >>> c = with_tile_k(MoEConfig(tile_m=64, gu_stages=5, dn_stages=8), 128)
    >>> c.tile_k, c.gu_stages, c.dn_stages
    (128, 2, 4)
    """
    return cfg.replace(tile_k=tile_k, gu_stages=max(2, cfg.gu_stages * cfg.tile_k // tile_k),
                       dn_stages=max(2, cfg.dn_stages * cfg.tile_k // tile_k))


#: n-tiles in :data:`KNOBS` that no device measurement has shown faster (session 25, moe-narrow: 64 columns gained
#: nothing over 128): :func:`_neighbours` proposes them after the other moves, so a small tuning budget spends
#: itself on those first
UNMEASURED_TILE_N = (64,)


def with_tile_n(cfg: MoEConfig, gemm: str, tile_n: int) -> MoEConfig:
    """``cfg`` with GEMM ``gemm``'s (``"gu"`` or ``"dn"``) n-tile ``tile_n`` and its stage count scaled to
    about the same shared memory (a stage holds ``tile_m + tile_n`` rows of ``tile_k``), rounded down to
    a value of :data:`KNOBS` (at least its smallest).

    >>> c = with_tile_n(MoEConfig(tile_m=64, gu_tile_n=256, gu_stages=5), "gu", 128)
    >>> c.gu_tile_n, c.gu_stages
    (128, 8)
    """
    old_n, stages = getattr(cfg, f"{gemm}_tile_n"), getattr(cfg, f"{gemm}_stages")
    want = stages * (cfg.tile_m + old_n) // (cfg.tile_m + tile_n)
    allowed = sorted(KNOBS[f"{gemm}_stages"])
    scaled = max([v for v in allowed if v <= want] or [allowed[0]])
    return cfg.replace(**{f"{gemm}_tile_n": tile_n, f"{gemm}_stages": scaled})


def _neighbours(cfg: MoEConfig, small: bool | None = None) -> Iterator[MoEConfig]:
    """One-knob moves from ``cfg``, the knobs ``bench/RESULTS.md`` issue 11 measured moving the layer
    most first: both walks' bands (unbanded, half, double), the gather slices (half, double), the gather
    unroll (4 from 1, 1 from any other), the grouped GEMMs' work lookahead and programmatic dependent
    launch (neither measured yet), the
    other bucket's tile (with that bucket's tiles and stages), the other k extent (stages scaled to
    the same shared memory), then the pipeline depths, the n-tiles, the epilogue width and each
    walk's band alone; last the fused routing and, with pdl, the down -> combine handoff (both measured 0.2-1.8 %
    faster at small T in session 42 and set by the small-T heuristic: the moves turn them off there).

    On the small-T path (``small``: T <= 256, 64- or 128-row tiles) the weights are most of the traffic, and the moves that change
    how they stream come first: each GEMM's other measured n-tile(s) at the same depth (where it fits) and
    with its stages scaled to the same shared memory (:func:`with_tile_n`; the n-tiles of :data:`UNMEASURED_TILE_N` and the weights' evict-first hint come
    after every other move; the n-tile sets the number of units, hence the last wave's fill over
    the ~E(1 - (1 - k/E)^T) activated experts, and the bytes in flight), the other k extent, then the
    moves above (session 18's profile: Qwen3 / DeepSeek T = 16 GEMMs at 78-82 % of HBM bandwidth,
    Mixtral's 94-98 %; the bands and slices moved the small-T layer by at most ~10 %).

    ``small``: ``cfg`` is for the small-T bucket (T <= ``heuristics.SMALL_T``; its tile may have 64 or 128 rows,
    ``heuristics.small_t_tile_m``); None reads it from the tile (64 rows: small T)."""
    if small is None:
        small = cfg.tile_m == 64
    def near(knob: str) -> list:
        values = KNOBS[knob]
        v = getattr(cfg, knob)
        if knob in ("gu_band_m", "dn_band_m"):   # unbanded, half, double (from unbanded: 1 and 2); at
            # large T half and double first (the unbanded walk lost in all 8 large-T cells measured, s18-19)
            moves = (([x for x in (v // 2, v * 2) if x] + [0]) if not small else (0, v // 2, v * 2)) if v else (1, 2)
        elif knob == "gather_slices":
            moves = (v // 2, v * 2)
        elif knob == "gather_unroll":   # one move: 4 from the plain loop, back to 1 from any other
            moves = (4,) if v == 1 else (1,)
        else:   # the knob's listed alternatives, nearest in value first
            moves = sorted(values, key=lambda x: (abs(x - v), x))
        return list(dict.fromkeys(x for x in moves if x in values and x != v))

    if small:   # small T: the weight stream first (docstring)
        for gemm in ("gu", "dn"):
            for v in near(f"{gemm}_tile_n"):
                if v not in UNMEASURED_TILE_N:   # the same depth first (refused where it does not fit), then
                    # the depth of about the same shared memory
                    yield cfg.replace(**{f"{gemm}_tile_n": v})
                    yield with_tile_n(cfg, gemm, v)
        for k in near("tile_k"):
            yield with_tile_k(cfg, k)
    if not small and (cfg.dynamic_walk or cfg.row_bounded):   # large T, the short-group flags set (heuristics.
        # SHORT_GROUP_PADDING, its gains measured on an H100, not repeated on the H200 at T = 2048): the static walk and the 2-D maps first, so a small tuning
        # budget on another GPU measures the rule against what it replaced
        if cfg.dynamic_walk:
            yield cfg.replace(dynamic_walk=False)
        for v in near("row_bounded"):
            yield cfg.replace(row_bounded=v)
    for band in near("gu_band_m"):   # both walks together
        if band in KNOBS["dn_band_m"]:
            yield cfg.replace(gu_band_m=band, dn_band_m=band)
    for v in near("gather_slices"):
        yield cfg.replace(gather_slices=v)
    for v in near("gather_unroll"):
        yield cfg.replace(gather_unroll=v)
    for v in near("work_lookahead") if not cfg.dynamic_walk else ():
        yield cfg.replace(work_lookahead=v)
    for v in near("pdl"):   # off again: no prefetch nor combine handoff either (they need pdl)
        yield cfg.replace(pdl=v, weight_prefetch=cfg.weight_prefetch if v and not (cfg.fused_routing or cfg.dynamic_walk) else 0,
                          combine_handoff=cfg.combine_handoff and v)
    if cfg.pdl and not cfg.fused_routing and not cfg.dynamic_walk:
        for v in near("weight_prefetch"):
            yield cfg.replace(weight_prefetch=v)
    for v in near("handoff"):
        yield cfg.replace(handoff=v)
    for v in near("row_bounded"):
        yield cfg.replace(row_bounded=v)
    from argus_cutlass.kernels.moe.heuristics import SINGLE_TILE_GU_N, SMALL_T_ROW_BOUNDED_TILE_M, small_t_config

    # the other small-T tile (64 <-> 128 rows, heuristics.small_t_tile_m: session 37 measured either 7-21 % faster
    # depending on the rows per expert) as the heuristic builds it (its n-tiles and depths, the 64-row tile's
    # 128-column gate+up unit, bands covering the same rows), then the large-T default; at large T the small-T tile
    if small:
        def rows_band(b: int) -> int:   # the band of the other tile over the same rows (0: unbanded stays)
            return 0 if not b else max(1, min(max(KNOBS["gu_band_m"]), b * 2 if cfg.tile_m == 128 else b // 2))

        other = small_t_config(cfg.dtype, 128 if cfg.tile_m == 64 else 64)
        if other.tile_m == 64:
            other = other.replace(gu_tile_n=SINGLE_TILE_GU_N)
        # (config, bands, row-bounded tiles as the heuristic sets them: SMALL_T_ROW_BOUNDED_TILE_M on small-T tiles)
        others = [(other, rows_band(cfg.gu_band_m), rows_band(cfg.dn_band_m), other.tile_m in SMALL_T_ROW_BOUNDED_TILE_M),
                  (MoEConfig(dtype=cfg.dtype), cfg.gu_band_m, cfg.dn_band_m, False)]
    else:
        other = small_t_config(cfg.dtype)
        others = [(other, cfg.gu_band_m, cfg.dn_band_m, other.tile_m in SMALL_T_ROW_BOUNDED_TILE_M)]
    for other, gu_band, dn_band, row_bounded in others:
        yield other.replace(gu_band_m=gu_band, dn_band_m=dn_band, gather_slices=cfg.gather_slices,
            gather_unroll=cfg.gather_unroll, work_lookahead=cfg.work_lookahead, pdl=cfg.pdl,
            weight_prefetch=cfg.weight_prefetch, weights_evict_first=cfg.weights_evict_first, handoff=cfg.handoff,
            row_bounded=row_bounded, combine_handoff=cfg.combine_handoff, fused_routing=cfg.fused_routing,
            dynamic_walk=cfg.dynamic_walk)
    for k in near("tile_k"):
        yield with_tile_k(cfg, k)
    if small:   # the moves no measurement backs yet, after every move one does (small budgets)
        for gemm in ("gu", "dn"):
            for v in near(f"{gemm}_tile_n"):
                if v in UNMEASURED_TILE_N:
                    yield with_tile_n(cfg, gemm, v)
        for v in near("weights_evict_first"):
            yield cfg.replace(weights_evict_first=v)
    for knob in ("gu_stages", "dn_stages", "gu_tile_n", "dn_tile_n", "epi_n", "gu_band_m", "dn_band_m"):
        for v in near(knob):   # then each walk's band alone
            yield cfg.replace(**{knob: v})
    for v in near("fused_routing"):   # the fused routing of one-chunk calls (session 42: -0.2 .. -1.8 % at T = 16; after
        # the other moves, before the combine handoff); it refuses a weight prefetch (route_fused writes the tables the prefetch reads)
        yield cfg.replace(fused_routing=v, weight_prefetch=0 if v else cfg.weight_prefetch)
    if cfg.pdl:   # the down -> combine handoff (session 42: -0.6 .. -1.0 % at small T; after every other move)
        for v in near("combine_handoff"):
            yield cfg.replace(combine_handoff=v)
    for v in near("dynamic_walk"):   # the dynamic (atomic-ticket) walk (sessions 46-48, H100 and H200: -0.4 .. -2.5 %
        # at small T, set by the small-T heuristic where down has more than one wave, and by the large-T one where groups
        # are short; the move turns it off there)
        yield cfg.replace(dynamic_walk=v, weight_prefetch=0 if v else cfg.weight_prefetch,
                          work_lookahead=0 if v else cfg.work_lookahead)


def candidates(problem: object, budget: int) -> list[MoEConfig]:
    """Up to ``budget`` distinct feasible configurations for ``problem`` (an MoEProblem): the
    heuristic's (:func:`argus_cutlass.kernels.moe.heuristics.default_config`) first, then its
    one-knob neighbours (:func:`_neighbours`), then theirs, each kept when :func:`feasible`.

    >>> from argus_cutlass.kernels.moe.problem import MoEProblem
    >>> cs = candidates(MoEProblem(16, 8, 2, 512, 256), 3)
    >>> len(cs), (cs[0].gu_tile_n, cs[0].gu_stages), (cs[1].gu_tile_n, cs[1].gu_stages)   # small T: n-tile first
    (3, (128, 5), (256, 5))
    >>> cs = candidates(MoEProblem(4096, 8, 2, 512, 256), 2)
    >>> cs[0].gu_band_m, cs[1].gu_band_m, cs[1].dn_band_m   # large T: the bands first (half, double, none)
    (1, 2, 2)
    """
    from argus_cutlass.kernels.moe.heuristics import SMALL_T, default_config

    first = default_config(problem)
    small = problem.tokens <= SMALL_T
    out: list[MoEConfig] = []
    seen: set[MoEConfig] = set()
    frontier = [first]
    while frontier and len(out) < budget:
        nxt: list[MoEConfig] = []
        for cfg in frontier:
            for c in ([cfg] if cfg is first and not out else []) + list(_neighbours(cfg, small)):
                if c in seen:
                    continue
                seen.add(c)
                if feasible(c, problem):
                    out.append(c)
                    nxt.append(c)
                if len(out) >= budget:
                    return out
        frontier = nxt
    return out
