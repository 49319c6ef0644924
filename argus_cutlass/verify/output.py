"""G2, G4 and G8: where accumulators go, that every output is written once, and residues.

Rules (VERIFIER.md catalogue):

* ``output.bijection`` (G4): the accumulator partition (consumer warpgroup, thread,
  register) -> tile coordinate is a bijection onto the output tile. Checked by enumeration.
* ``epilogue.coordinate`` (G2): the epilogue stores each register at the coordinate its
  accumulator holds. Checked by enumeration; the counterexample names the thread and the
  register.
* ``residue.store`` (G8, store side): for every residue of M and N modulo the tile, no
  store lands outside ``M x N`` (``EpilogueStore.residue_mask``: without it the D tensor map is
  padded to whole tiles and the stores past M or N land). The load side of G8 is
  ``residue.load`` (TMA zero fill of k >= K) and ``residue.source`` (masked C loads). M and N
  residue loads of A and B need no fill: their outputs are the ones masked here.
* ``epilogue.source`` (G2): ``beta * C`` reads C from gmem at each accumulator's own
  coordinate (path ``gmem``, row offset 0, the C tensor of the accumulator's (M, N) modes and
  D's majorness).
* ``epilogue.tma_store`` (G2): the TMA store, box by box as the kernel issues it, sends every
  staged element (at the staging *view*'s offset) to its own (m, n) of the subtile.
* ``scheduler.bijection`` (G4): the persistent scheduler gives every work unit to exactly one
  CTA, maps units one-to-one onto output tiles, and (stream-K / split-K) divides every tile's
  k loop exactly. The enumeration covers unit counts up to 48 with every grid up to the unit
  count + 1; CUTLASS's walk (:func:`~argus_cutlass.verify.decomposition.check_walk`: cluster
  rounding, swizzle clamp and padding, cluster-major blocks, the inverse map) on every tile
  grid up to 12 x 12 for the program's raster, swizzle and cluster; and CUTLASS's stream-K /
  split-K unit division with its Deterministic fixup
  (:func:`~argus_cutlass.verify.decomposition.enumerate_division`) on all small tile, k-tile
  and grid counts. A closed-form argument (Euclidean division) covers unit ownership for every
  unit count and grid when the step is the grid size. (A z3 formulation with a symbolic step
  needs nonlinear ``urem`` and timed out at 10 s, so the general case is argued, not solved.)
  The MoE ``grouped`` walk (``templates/moe/work.j2``) is checked as printed instead of CUTLASS's:
  every unit of ``tiles_m * tiles_n`` gets its own tile of the grid for every ``tiles_m`` in
  ``[0, 2 band_m + 2]`` (at least ``MAX_TILES``: full bands, every partial last band, fewer m-tiles
  than a band, none) and ``tiles_n`` up to ``MAX_TILES``
  (:func:`~argus_cutlass.verify.decomposition.check_grouped_walk`), and for all sizes by the band
  decomposition argument (:func:`~argus_cutlass.verify.decomposition.grouped_walk_all_sizes`).
  ``clusterk`` (a cluster of ``splits`` CTAs per output tile): cluster ``c = blockIdx.x / splits``
  takes unit ``c`` (grid = units x splits CTAs; the ownership enumeration above, stepping by the
  cluster count + ``step_delta``, is that cluster index walk), and the ranks' k ranges
  (:meth:`~argus_cutlass.dsl.ir.TileSchedule.cluster_k_range`) cover ``[0, k_tiles)`` exactly once
  for every ``k_tiles`` in ``[1, 4 splits + 3]`` (enum; all ``k_tiles`` by the balanced Euclidean
  division: contiguous ranges from 0 to ``k_tiles``).
* ``scheduler.cluster_reduce`` (G4, ``clusterk`` only): the partial sums of a cluster meet in rank 0
  exactly once each. The reduction is simulated for every ``k_tiles`` in ``[1, 2 splits + 1]``: rank
  ``r``'s partial is the k-tiles of its range (undefined when it has none and does not write zeros),
  ranks >= 1 write it to their ``reduce_buffer``, rank 0 adds the buffers of ranks ``reduce_from ..
  splits - 1`` (its own buffer is never written: reading it is undefined data); rank 0's sum must hold
  every rank's k-tiles exactly once and nothing undefined (with the exact division of
  ``scheduler.bijection``: every k-tile of ``[0, k_tiles)`` once). The two cluster barriers are a
  happens-before model: every buffer write precedes rank 0's remote read of it, and that read precedes
  the owner's exit (``reduce_release``; else the owner may exit and release its shared memory first:
  a race). The buffer is an smem fp32 tensor that holds the consumer threads' thread-major writes
  (register ``i`` of consumer thread ``t`` at ``i * threads + t``).

The accumulator layout is CuTe's ``CLayout_64xN`` (``layout.gmma.gmma_c_layout``, PTX ISA
9.7.15.4). The scheduler is transcribed from CUTLASS 4.2 ``sm90_tile_scheduler.hpp`` and
``sm90_tile_scheduler_stream_k.hpp`` (:mod:`argus_cutlass.verify.decomposition` lists what is
modelled exactly and what is an input, e.g. the launch grid).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from argus_cutlass.dsl.ir import DTYPE_BYTES, Program, TileSchedule
from argus_cutlass.verify.absint import accumulator_partition, consumer_thread, view_layout
from argus_cutlass.verify.decomposition import (
    GroupedWalk,
    Problem,
    enumerate_grouped_walk,
    grouped_walk_all_sizes,
    grouped_walk_bound,
    role_loop_units,
)
from argus_cutlass.verify.report import Counterexample, Proof, Unknown, Violation

__all__ = ["accumulator_map", "check_cluster_reduce", "check_epilogue", "check_schedule", "check_schedule_all_sizes",
           "check_source", "check_tma_store", "check_uniformity", "cluster_k_cover", "grouped_walk_violation",
           "schedule_units"]

#: enumeration bounds of scheduler.bijection
MAX_UNITS = 48
MAX_TILES = 12
#: the unit counts up to which the grouped roles' printed loops are enumerated (every grid and CTA)
ROLE_LOOP_UNITS = 24


def cluster_k_bound(splits: int) -> int:
    """``scheduler.bijection``'s clusterk enumeration: every ``k_tiles`` in ``[1, 4 splits + 3]`` (fewer
    k-tiles than ranks, every remainder 0..splits-1 at quotients 0..4)."""
    return 4 * splits + 3


def cluster_reduce_bound(splits: int) -> int:
    """``scheduler.cluster_reduce``'s enumeration: every ``k_tiles`` in ``[1, 2 splits + 1]`` (ranks
    without a k-tile, every remainder, whole quotients 1 and 2)."""
    return 2 * splits + 1


def accumulator_map(program: Program) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every accumulator register of one output tile of ``program``'s epilogue
    (:func:`~argus_cutlass.verify.absint.accumulator_partition`): ``(wg, thread, reg, m, n)``."""
    e = program.epilogue
    return accumulator_partition(e.tile_m, e.tile_n, e.op_m, e.op_n, e.warpgroups)


def check_epilogue(program: Program) -> tuple[list[Proof], list[Violation]]:
    """``output.bijection`` (G4), ``epilogue.coordinate`` (G2) and ``residue.store`` (G8).

    ``epilogue.coordinate`` also requires the epilogue to store the MMA's accumulator into the
    tensor the TMA store writes (``EpilogueStore.acc`` / ``dst``)."""
    e = program.epilogue
    where = str(e.loc)
    proofs: list[Proof] = []
    violations: list[Violation] = []
    mma = program.mma
    dst = program.stores[0].dst if program.stores else e.dst
    wrong = []
    if mma is not None and e.acc != mma.acc:
        wrong.append(f"the epilogue stores register tensor {e.acc!r}, but the MMA accumulates into {mma.acc!r}")
    if e.dst != dst:
        wrong.append(f"the epilogue stores to {e.dst!r}, but the TMA store writes {dst!r}")
    if e.act and program.family == "gemm":
        wrong.append(f"the epilogue applies activation {e.act!r}: a GEMM stores alpha * acc (+ beta * C), no "
                     "activation (the fused SwiGLU is the MoE gate+up epilogue's, rule moe.swiglu)")
    if mma is not None and (e.tile_m, e.tile_n) != (mma.tile_m, mma.op.n):
        wrong.append(f"the epilogue partitions a {e.tile_m}x{e.tile_n} tile, but the MMA accumulates "
                     f"{mma.tile_m}x{mma.op.n} (the kernel's tile: {mma.atoms_m} warpgroups x {mma.reps_m} x "
                     f"{mma.op.m} rows)")
    for msg in wrong:
        violations.append(Violation("epilogue.coordinate", "G2", msg, "store the MMA's accumulator to D", where))
    wg, th, reg, m, n = accumulator_map(program)
    cells = e.tile_m * e.tile_n
    counts = np.bincount(m * e.tile_n + n, minlength=cells)
    if counts.size == cells and (counts == 1).all():
        proofs.append(Proof("output.bijection", "G4", "enum",
                            f"{e.warpgroups} warpgroup(s) x 128 threads x {reg.max() + 1} registers cover the "
                            f"{e.tile_m}x{e.tile_n} tile exactly once (CLayout_64x{e.op_n})", int(m.size)))
    else:
        violations.append(Violation("output.bijection", "G4",
                                    f"accumulators cover {int((counts > 0).sum())} of {cells} tile elements, "
                                    f"{int((counts > 1).sum())} twice", None, where))
    # G2: the store coordinate of every register is its accumulator's coordinate
    sm, sn = (m // e.op_m) * e.op_m + (m % e.op_m + e.row_offset) % e.op_m, n
    bad = np.flatnonzero((sm != m) | (sn != n))
    if bad.size:
        i = int(bad[np.lexsort((reg[bad], th[bad], wg[bad]))][0])
        w, t = int(wg[i]), int(th[i])
        cex = Counterexample(
            "G2", "epilogue.coordinate", "enum", "epilogue.store", where, -1, -1, -1,
            {"m": int(m[i]), "n": int(n[i])}, consumer_thread(w, t), f"accum[{int(reg[i])}]", {},
            f"store at D({int(m[i])},{int(n[i])}) (the accumulator's coordinate)",
            f"stored at D({int(sm[i])},{int(sn[i])}) (row offset {e.row_offset})",
            f"CLayout_64x{e.op_n} (thread, value) -> (m, n); epilogue map shifted by {e.row_offset} rows "
            f"(mod {e.op_m}: still a bijection onto the tile, VERIFIER.md pitfall 2)",
            element={"tensor": "D", "m": int(sm[i]), "n": int(sn[i])},
            chain=(f"accum[{int(reg[i])}] of thread {128 * (1 + w) + t}", f"D({int(m[i])},{int(n[i])}) expected",
                   f"D({int(sm[i])},{int(sn[i])}) written"))
        violations.append(Violation(
            "epilogue.coordinate", "G2",
            f"{bad.size} of {m.size} registers are stored away from their accumulator's coordinate; first: "
            f"threadIdx.x={128 * (1 + w) + t} accum[{int(reg[i])}] holds D({int(m[i])},{int(n[i])}) "
            f"but stores D({int(sm[i])},{int(sn[i])})",
            "the epilogue must partition D with the MMA's accumulator layout (partition_C of the same TiledMma)",
            where, cex))
    else:
        proofs.append(Proof("epilogue.coordinate", "G2", "enum",
                            f"all {m.size} accumulator registers are stored at their own (m, n)", int(m.size)))
    # G8: residues. A tile at the M/N edge keeps rows < rm, columns < rn (rm, rn in [1, tile]).
    in_tile = (sm >= 0) & (sm < e.tile_m) & (sn >= 0) & (sn < e.tile_n)
    if e.residue_mask:
        proofs.append(Proof("residue.store", "G8", "enum",
                            f"stores predicated on m < M and n < N: no store leaves D for any of the "
                            f"{e.tile_m}x{e.tile_n} residues (M mod {e.tile_m}, N mod {e.tile_n})",
                            e.tile_m * e.tile_n))
    else:
        # smallest residue first: rm = 1 (M = tile_m + 1); any store with row >= 1 of the edge tile leaks
        out = np.flatnonzero(in_tile & (sm >= 1))
        if out.size:
            i = int(out[np.lexsort((reg[out], th[out], wg[out]))][0])
            w, t = int(wg[i]), int(th[i])
            mm_g = e.tile_m + int(sm[i])
            cex = Counterexample(
                "G8", "residue.store", "enum", "epilogue.store", where, -1, -1, -1,
                {"m": int(sm[i]), "n": int(sn[i])}, consumer_thread(w, t), f"accum[{int(reg[i])}]", {},
                f"no store: row {mm_g} >= M = {e.tile_m + 1}",
                f"D({mm_g},{int(sn[i])}) written, outside the {e.tile_m + 1} x N output",
                "edge tile of a residue problem: rows [M - M mod tile_m, M) are valid, the rest must be masked",
                element={"tensor": "D", "m": mm_g, "n": int(sn[i])},
                params={"M": e.tile_m + 1, "N": e.tile_n, "tile_m_residue": 1})
            violations.append(Violation(
                "residue.store", "G8",
                f"stores are not masked: with M = {e.tile_m + 1} (residue 1) threadIdx.x={128 * (1 + w) + t} "
                f"writes D({mm_g},{int(sn[i])}) past the last row",
                "predicate every epilogue store on the global coordinate (TMA store clips; a direct store "
                "needs an explicit m < M && n < N)", where, cex))
    return proofs, violations


def schedule_units(units: int, grid: int, step: int) -> np.ndarray:
    """How many times each unit in ``[0, units)`` is taken when CTA ``c < grid`` takes
    ``c, c + step, ...`` (``step >= 1``)."""
    counts = np.zeros(units, dtype=np.int64)
    for c in range(min(grid, units)):
        counts[c::step] += 1
    return counts


def _walk_violation(sch: TileSchedule, p: Problem) -> Violation:
    tile = p.tile if isinstance(p.tile, tuple) else (-1, -1)
    cex = Counterexample(
        "G4", "scheduler.bijection", "enum", "tile_scheduler", str(sch.loc), -1, -1, -1,
        {"tm": int(tile[0]), "tn": int(tile[1])}, {"cta": int(p.units[0]) if p.units else 0}, "", {},
        f"tile {tile} is the tile of exactly one work unit", p.message,
        "CUTLASS PersistentTileSchedulerSm90::get_work_idx_m_and_n (cluster-major, swizzled raster)",
        params={k: v for k, v in p.params.items() if isinstance(v, int)},
        chain=tuple(f"unit {u}" for u in p.units) + (f"tile {tile}",))
    return Violation("scheduler.bijection", "G4", f"the tile walk is not a bijection: {p.message}",
                     "walk units with CUTLASS's own raster/swizzle (log2 of max_swizzle_size, cluster-major blocks)",
                     str(sch.loc), cex)


def _division_violation(sch: TileSchedule, p: Problem) -> Violation:
    cex = Counterexample(
        "G4", "scheduler.bijection", "enum", "tile_scheduler", str(sch.loc), -1, -1, -1,
        {"tile": int(p.tile) if isinstance(p.tile, int) else -1, **({"cta": int(p.ctas[0])} if p.ctas else {})},
        {"cta": int(p.ctas[0]) if p.ctas else 0}, "", {},
        "every (tile, k-tile) computed by exactly one unit, and one unit per tile stores D after reducing the "
        "others' partials", p.message,
        f"{sch.decomposition} unit division (CUTLASS PersistentTileSchedulerSm90StreamK, {sch.reduction.capitalize()})",
        k_tile=p.k_tile if p.k_tile is not None else -1,
        params={k: v for k, v in p.params.items() if isinstance(v, int) and not isinstance(v, bool)},
        chain=tuple(f"CTA {c}" for c in p.ctas) + tuple(f"unit {u}" for u in p.units))
    return Violation("scheduler.bijection", "G4", f"the {sch.decomposition} division is not exact: {p.message}",
                     "divide each tile's k-tiles among units as CUTLASS does (big units first, no overlap)",
                     str(sch.loc), cex)


def cluster_k_cover(sch: TileSchedule) -> tuple[int, tuple[int, int, tuple[int, ...], tuple[tuple[int, int], ...]] | None]:
    """The clusterk k split of ``sch`` (:meth:`TileSchedule.cluster_k_range`, honouring its
    ``split_remainder``) on every ``k_tiles`` in ``[1, cluster_k_bound(splits)]``: ``(cases checked, first
    problem)``; a problem is ``(k_tiles, k_tile, ranks that sum it, every rank's (k_start, k_count))`` for
    the smallest ``k_tiles`` and then the smallest k-tile that no rank, several ranks, or a rank outside
    ``[0, k_tiles)`` sums.

    >>> from argus_cutlass.dsl.ir import SourceLoc
    >>> s = TileSchedule("along_n", 1, 0, "clusterk", SourceLoc("x", 1), splits=4, reduce_buffer="sR")
    >>> cluster_k_cover(s)
    (19, None)
    >>> cluster_k_cover(dataclasses.replace(s, split_remainder=False))[1][:3]
    (1, 0, ())
    """
    cases = 0
    for k_tiles in range(1, cluster_k_bound(sch.splits) + 1):
        ranges = tuple(sch.cluster_k_range(r, k_tiles) for r in range(sch.splits))
        takers: dict[int, list[int]] = {}
        for r, (start, count) in enumerate(ranges):
            for k in range(start, start + count):
                takers.setdefault(k, []).append(r)
        cases += 1
        bad = sorted(k for k in set(range(k_tiles)) | set(takers)
                     if len(takers.get(k, ())) != 1 or not 0 <= k < k_tiles)
        if bad:
            return cases, (k_tiles, bad[0], tuple(takers.get(bad[0], ())), ranges)
    return cases, None


def _cluster_k_violation(sch: TileSchedule, problem: tuple[int, int, tuple[int, ...],
                                                             tuple[tuple[int, int], ...]]) -> Violation:
    """The ``scheduler.bijection`` violation of a clusterk k split (:func:`cluster_k_cover`): the rank
    as the CTA (the one that sums the k-tile twice or outside, or the one that should sum a dropped
    k-tile under the balanced split), the k-tile, ``k_tiles`` and ``splits``."""
    k_tiles, k, takers, ranges = problem
    s = sch.splits
    if not 0 <= k < k_tiles:
        rank, actual = takers[0], f"k-tile {k} (outside [0, {k_tiles})) summed by rank(s) {list(takers)}"
    elif takers:
        rank, actual = takers[1], f"k-tile {k} summed by ranks {list(takers)}: added twice into D"
    else:
        right = dataclasses.replace(sch, split_remainder=True)
        rank = next(r for r in range(s) if right.cluster_k_range(r, k_tiles)[0] <= k
                    < sum(right.cluster_k_range(r, k_tiles)))
        actual = f"k-tile {k} summed by no rank (rank {rank} should: D misses A(:, k) B(k, :) of that k-tile)"
    spans = tuple(f"rank {r}: k-tiles [{a}, {a + n})" for r, (a, n) in enumerate(ranges))
    cex = Counterexample(
        "G4", "scheduler.bijection", "enum", "tile_scheduler", str(sch.loc), -1, -1, -1,
        {"tile": 0, "cta": rank}, {"cta": rank, "rank": rank}, "", {},
        f"every k-tile of [0, {k_tiles}) summed by exactly one rank of the {s}-CTA cluster", actual,
        f"clusterk k split (Scheduler::current: k_tiles / {s} each, the first k_tiles % {s} ranks one more; "
        f"split_remainder {sch.split_remainder})",
        k_tile=k, element={"k_tile": k, "rank": rank}, params={"k_tiles": k_tiles, "splits": s}, chain=spans)
    return Violation("scheduler.bijection", "G4",
                     f"the clusterk k split is not exact: with k_tiles = {k_tiles} over {s} ranks, {actual}",
                     "give rank r the k-tiles [r q + min(r, rem), + q + (r < rem)) with q, rem = divmod(k_tiles, "
                     "splits): the remainder goes to the first ranks", str(sch.loc), cex)


@functools.lru_cache(maxsize=8)
def _first_ownership_problem(step_delta: int) -> tuple[int, int, int] | None:
    """The first ``(units, grid, unit)`` (smallest units, then grid) where CTAs stepping by
    ``grid + step_delta`` do not take every unit exactly once; None when none up to
    ``MAX_UNITS``. Cached: it depends on the step only."""
    for units in range(1, MAX_UNITS + 1):
        for grid in range(1, units + 2):
            step = grid + step_delta
            counts = np.zeros(units, dtype=np.int64) if step < 1 else schedule_units(units, grid, step)
            bad = np.flatnonzero(counts != 1)
            if bad.size:
                return units, grid, int(bad[0])
    return None


@functools.lru_cache(maxsize=64)
def _walk_cases(cluster_m: int, cluster_n: int, raster: str, swizzle: int,
                walk_mutation: str) -> tuple[int, Problem | None]:
    """:func:`~argus_cutlass.verify.decomposition.check_walk` on every tile grid up to
    ``MAX_TILES`` squared: ``(grids checked, first problem)``. Cached per walk parameters."""
    from argus_cutlass.verify.decomposition import check_walk

    grids = 0
    for tm in range(1, MAX_TILES + 1):
        for tn in range(1, MAX_TILES + 1):
            p = check_walk(tm, tn, cluster_m, cluster_n, raster, swizzle,
                           swizzle_off_by_one=walk_mutation == "swizzle_off_by_one")
            if p is not None:
                return grids, p
            grids += 1
    return grids, None


@functools.lru_cache(maxsize=64)
def _division_cases(mode: str, cluster_size: int, splits: int,
                    mutation: tuple[tuple[str, object], ...],
                    reduction: str = "deterministic") -> tuple[int, Problem | None, str]:
    """:func:`~argus_cutlass.verify.decomposition.enumerate_division` for one cluster size, with
    bounds in whole clusters (so an 8-CTA cluster gets as many grid and tile counts as a single
    CTA): tiles up to 12 clusters and grids up to 8 (stream-K) / 6 (split-K) clusters, or 6 and 4
    clusters for clusters of 4 CTAs and more (time). Cached: it depends on nothing else."""
    from argus_cutlass.verify.decomposition import enumerate_division

    small = cluster_size <= 2
    tiles = (12 if small else 6) * cluster_size
    grid = ((8 if mode == "stream_k" else 6) if small else 4) * cluster_size
    cases, p = enumerate_division(mode, max_tiles=tiles, max_grid=grid, cluster_sizes=(cluster_size,),
                                  splits=splits or None, reduction=reduction, **dict(mutation))
    return cases, p, (f"the {reduction} fixup simulated; tiles <= {tiles}, grids <= {grid} CTAs "
                      f"(clusters of {cluster_size})")


def check_schedule(program: Program) -> (tuple[list[Proof], list[Violation]]
                                         | tuple[list[Proof], list[Violation], list[Unknown]]):
    """``scheduler.bijection`` (G4) by enumeration (see the module docstring): unit ownership,
    CUTLASS's walk on every tile grid up to ``MAX_TILES`` squared, and, for stream-K /
    split-K, the unit division (:mod:`argus_cutlass.verify.decomposition`)."""
    sch = program.schedule
    where = str(sch.loc)
    owner_problem = _first_ownership_problem(sch.step_delta)
    if owner_problem is not None:
        units, grid, w = owner_problem
        step = grid + sch.step_delta
        takers = [c for c in range(min(grid, units)) if step >= 1 and w >= c and (w - c) % step == 0]
        if step < 1:
            actual = f"step {step}: CTA 0 never leaves unit 0 (the kernel does not terminate)"
        elif len(takers) > 1:
            actual = f"unit {w} taken by CTAs {takers} (computed and stored twice, a race on D)"
        else:
            actual = f"unit {w} taken by no CTA (output tile never written)"
        cex = Counterexample(
            "G4", "scheduler.bijection", "enum", "tile_scheduler", where, -1, -1, -1, {"unit": w},
            {"cta": w % grid}, "", {}, f"unit {w} taken by CTA {w % grid} only",
            actual, f"CTA c takes units c, c + {step}, ... (grid {grid}, step = grid {sch.step_delta:+d})",
            params={"units": units, "grid": grid, "step": step})
        return [], [Violation(
            "scheduler.bijection", "G4",
            f"the persistent scheduler steps by {step} with {grid} CTAs: with {units} work units, "
            f"{actual}", "step by the grid size (gridDim.x) so each unit has exactly one owner", where, cex)]
    if sch.decomposition == "grouped":
        return _check_grouped_schedule(sch)
    if any(x & (x - 1) for x in (sch.cluster_m, sch.cluster_n)):
        return [], [], [Unknown("scheduler.bijection", "G4",
                                f"G4 scheduler.bijection: the tile walk of a {sch.cluster_m}x{sch.cluster_n} cluster",
                                "not modelled: the walk model covers power-of-two cluster extents only", 0)]
    grids, p = _walk_cases(sch.cluster_m, sch.cluster_n, sch.raster, sch.swizzle, "")
    if p is not None:
        return [], [_walk_violation(sch, p)]
    text = (f"each of <= {MAX_UNITS} work units has exactly one CTA for every grid <= units + 1; CUTLASS's "
            f"{sch.raster} swizzle-{sch.swizzle} walk (cluster {sch.cluster_m}x{sch.cluster_n}) is a bijection "
            f"on all {grids} tile grids up to {MAX_TILES}x{MAX_TILES}")
    points = MAX_UNITS * (MAX_UNITS + 3) // 2 + grids
    if sch.decomposition in ("streamk", "splitk"):
        mode = "stream_k" if sch.decomposition == "streamk" else "split_k"
        cs = sch.cluster_m * sch.cluster_n
        cases, p, bounds = _division_cases(mode, cs, sch.splits if mode == "split_k" else 0, (), sch.reduction)
        if p is not None:
            return [], [_division_violation(sch, p)]
        if cases == 0:
            return [], [], [Unknown("scheduler.bijection", "G4", f"{sch.decomposition} division", "no case enumerated",
                                    0)]
        text += (f"; the {sch.decomposition} division computes every (tile, k-tile) once and stores each tile "
                 f"once after its fixup, in all {cases} cases ({bounds})")
        points += cases
    if sch.decomposition == "clusterk":
        cases, bad = cluster_k_cover(sch)
        if bad is not None:
            return [], [_cluster_k_violation(sch, bad)]
        text += (f"; clusterk: cluster c = blockIdx.x / {sch.splits} takes unit c (grid = units x {sch.splits} CTAs, "
                 "one unit per cluster; the ownership enumeration above, stepping by the cluster count + "
                 f"step_delta {sch.step_delta}, is the cluster index walk) and its {sch.splits} ranks' k ranges "
                 f"(cluster_k_range) cover [0, k_tiles) exactly once for every k_tiles in [1, "
                 f"{cluster_k_bound(sch.splits)}] ({cases} cases; all k_tiles: the balanced Euclidean division "
                 f"k_tiles = {sch.splits} q + rem, 0 <= rem < {sch.splits}, gives rank r the contiguous range "
                 "starting at r q + min(r, rem) of q + (r < rem) k-tiles, so rank r + 1 starts where rank r ends, "
                 f"rank 0 at 0, and rank {sch.splits - 1} ends at {sch.splits} q + rem = k_tiles)")
        points += cases
    return [Proof("scheduler.bijection", "G4", "enum", text, points)], []


@functools.lru_cache(maxsize=64)
def _grouped_cases(walk: GroupedWalk) -> tuple[int, int, Problem | None]:
    """:func:`~argus_cutlass.verify.decomposition.enumerate_grouped_walk` (cached per walk)."""
    return enumerate_grouped_walk(walk, MAX_TILES)


def grouped_walk_violation(sch: TileSchedule, p: Problem, engine: str = "enum") -> Violation:
    """The ``scheduler.bijection`` violation of a grouped walk's problem ``p`` (unit, band, tile)."""
    tile = p.tile if isinstance(p.tile, tuple) else (-1, -1)
    u = p.units[0] if p.units else -1
    walk = GroupedWalk.of(sch)
    cex = Counterexample(
        "G4", "scheduler.bijection", engine, "tile_scheduler", str(sch.loc), -1, -1, -1,
        {"tm": int(tile[0]), "tn": int(tile[1]), **({"unit": int(u)} if u >= 0 else {})}, {}, "", {},
        f"every unit of [0, tiles_m * tiles_n) has its own tile of [0, {p.params['tiles_m']}) x "
        f"[0, {p.params['tiles_n']})", p.message,
        f"templates/moe/work.j2 Scheduler::current, {walk.describe()}",
        element={"unit": int(u), "m_tile": int(tile[0]), "n_block": int(tile[1])},
        params={k: v for k, v in p.params.items() if isinstance(v, int) and not isinstance(v, bool)},
        chain=tuple(f"unit {x}" for x in p.units) + (f"tile {tile}",))
    return Violation("scheduler.bijection", "G4", f"the grouped walk is not a bijection: {p.message}",
                     "band b starts at m-tile b * band_m, holds rows = min(band_m, tiles_m - b * band_m) m-tiles, "
                     "and unit local of the band is m-tile first + local % rows, n-block local / rows",
                     str(sch.loc), cex)


def _check_grouped_schedule(sch: TileSchedule) -> tuple[list[Proof], list[Violation]]:
    """``scheduler.bijection`` of the MoE grouped walk by enumeration (unit ownership was checked
    by the caller): the printed walk on every tiles_m in ``[0, grouped_walk_bound]`` and tiles_n in
    ``[1, MAX_TILES]``."""
    walk = GroupedWalk.of(sch)
    if (sch.cluster_m, sch.cluster_n) != (1, 1):
        return [], [Violation("scheduler.bijection", "G4", f"the grouped walk gives each CTA its own tile, but the "
                              f"schedule states a {sch.cluster_m}x{sch.cluster_n} cluster (adjacent m-tiles may "
                              "belong to different experts: no operand is shared across a cluster)",
                              "use cluster 1x1 for the grouped walk (moe/scheduler.j2 static_asserts it)",
                              str(sch.loc))]
    grids, pts, p = _grouped_cases(walk)
    if p is not None:
        return [], [grouped_walk_violation(sch, p)]
    loops, bad = _role_loop_cases(sch.lookahead, sch.consumer_stride)
    if bad is not None:
        return [], [Violation("scheduler.bijection", "G4", f"the grouped roles' loops with lookahead {sch.lookahead}: "
                              f"{bad}", "each role runs units first, first + stride * step, ... below the unit "
                              "count and reads each one's work once, before or when it runs it", str(sch.loc))]
    bound = grouped_walk_bound(walk, MAX_TILES)
    ahead = (" (lookahead 1 in the producer: it reads its next unit's expert before issuing the current unit's "
             "loads)" if sch.lookahead else "")
    text = (f"each of <= {MAX_UNITS} work units has exactly one CTA for every grid <= units + 1; the grouped "
            f"walk ({walk.describe()}) maps units [0, tiles_m * tiles_n) one-to-one onto the tile grid for all "
            f"{grids} grids tiles_m in [0, {bound}] x tiles_n in [1, {MAX_TILES}]; the printed producer and "
            f"consumer loops{ahead} run exactly their CTA's units in order and read each unit's expert once, "
            f"only for units < tiles_m * tiles_n ({loops} role loops: every unit count <= {ROLE_LOOP_UNITS}, grid, CTA "
            "and warpgroup)")
    return [Proof("scheduler.bijection", "G4", "enum", text, MAX_UNITS * (MAX_UNITS + 3) // 2 + pts + loops)], []


@functools.lru_cache(maxsize=8)
def _role_loop_cases(lookahead: int, consumer_stride: int) -> tuple[int, str | None]:
    """The roles' printed loops (:func:`~argus_cutlass.verify.decomposition.role_loop_units`: the
    producer's with ``lookahead``, the consumers' always plain) against the walk's ownership (CTA
    ``c`` of ``grid`` owns units ``c + i * grid``; a consumer warpgroup ``w`` of ``consumer_stride``
    every ``stride``-th of them from its ``w``-th) for every unit count up to ``ROLE_LOOP_UNITS`` and
    grid up to ``units + 1``: ``(loops checked, first problem text)``. The model is tied to the
    printed text by ``tests/unit/test_moe_layer.py::test_work_lookahead_prints_the_read_ahead_loop``,
    which pins both loop forms line by line."""
    n = 0
    for units in range(ROLE_LOOP_UNITS + 1):
        for grid in range(1, units + 2):
            for cta in range(grid):
                owned = list(range(cta, units, grid))
                roles = [("producer", 0, 1)] + [(f"consumer warpgroup {w}", w, consumer_stride)
                                                 for w in range(consumer_stride)]
                for role, first, stride in roles:
                    runs, reads = role_loop_units(cta + first * grid, stride, grid, units,
                                                  lookahead if role == "producer" else 0)
                    want = owned[first::stride]
                    n += 1
                    if runs != want or sorted(reads) != want or len(set(reads)) != len(reads):
                        return n, (f"{role} of CTA {cta} (grid {grid}, {units} units) runs {runs} and reads the work "
                                   f"of {reads}; it owns {want}")
    return n, None


def check_schedule_all_sizes(program: Program) -> tuple[list[Proof], list[Violation]]:
    """``scheduler.bijection`` for every unit count and grid (arith): with ``step == grid``,
    CTA ``c`` takes unit ``w`` iff ``w = c + i * grid``, ``c < grid``, which is Euclidean division
    of ``w`` by ``grid``: it exists and is unique for every ``w``. Any other step fails
    already in the enumeration's small cases (``step < grid``: units ``c2`` and ``c1 + step``
    coincide; ``step > grid``: unit ``grid`` is never taken)."""
    sch = program.schedule
    if sch.step_delta != 0:
        return [], []
    if sch.decomposition == "grouped":
        walk_text = grouped_walk_all_sizes(GroupedWalk.of(sch))
        if walk_text is None:
            return [], []
        return [Proof("scheduler.bijection", "G4", "arith",
                      "step == grid: unit w belongs to CTA w mod grid at round w div grid for every unit count and "
                      f"grid; {walk_text}", 0)], []
    text = ("step == grid: unit w belongs to CTA w mod grid at round w div grid (Euclidean division: "
            "exists and unique) for every unit count and grid")
    if sch.decomposition == "clusterk":
        if not sch.split_remainder:
            return [], []
        text = ("step == clusters: unit w belongs to cluster w mod clusters at round w div clusters (Euclidean "
                "division: exists and unique) for every unit count and cluster count (the host launches units x "
                f"{sch.splits} CTAs: round 0 only)"
                + f"; clusterk's k split for every k_tiles: with k_tiles = {sch.splits} q + rem (0 <= rem < "
                f"{sch.splits}) rank r starts at r q + min(r, rem) and sums q + (r < rem) k-tiles, so rank r + 1 "
                f"starts where rank r ends, rank 0 starts at 0 and rank {sch.splits - 1} ends at {sch.splits} q + "
                "rem = k_tiles: the ranks' ranges are contiguous, disjoint and cover [0, k_tiles)")
    return [Proof("scheduler.bijection", "G4", "arith", text, 0)], []


#: the program point of the clusterk reduction (templates/gemm/work.j2 ``Scheduler::fixup_cluster``)
REDUCE_POINT = "tile_scheduler.fixup_cluster"


def _reduce_cex(sch: TileSchedule, rank: int, thread: dict[str, int], register: str, expected: str, actual: str,
                k_tiles: int, *, k_tile: int = -1, element: dict | None = None, smem: dict | None = None,
                trace: tuple[str, ...] = ()) -> Counterexample:
    return Counterexample(
        "G4", "scheduler.cluster_reduce", "enum", REDUCE_POINT, str(sch.loc), -1, -1, -1, {"rank": rank},
        {**thread, "cta": rank, "rank": rank}, register, smem or {}, expected, actual,
        f"clusterk reduction of a {sch.splits}-CTA cluster (ranks >= 1 write {sch.reduce_buffer!r}; barrier.cluster "
        f"arrive.release / wait.acquire; rank 0 adds ranks {sch.reduce_from} .. {sch.splits - 1} through "
        f"ld.shared::cluster; reduce_zero_empty {sch.reduce_zero_empty}, reduce_release {sch.reduce_release})",
        k_tile=k_tile, element=element or {},
        params={"splits": sch.splits, "k_tiles": k_tiles, "reduce_from": sch.reduce_from} if k_tiles else
        {"splits": sch.splits, "reduce_from": sch.reduce_from},
        trace=trace)


def _reduce_buffer_problem(program: Program, sch: TileSchedule, threads: int,
                           regs: int) -> tuple[str, str, Counterexample] | None:
    """The reduce buffer against the writes of :func:`check_cluster_reduce` (register ``i`` of consumer
    thread ``t`` at fp32 element ``i * threads + t``): ``(message, hint, counterexample)`` or None."""
    name = sch.reduce_buffer
    need = regs * threads
    try:
        t = program.tensor(name)
    except KeyError:
        t = None
    numel = (math.prod(t.shape) if t is not None and all(isinstance(x, int) for x in t.shape) else -1)
    if t is None or t.space != "smem" or t.dtype != "fp32":
        what = ("no tensor of the program" if t is None else
                f"a tensor in {t.space}, {t.dtype}, shape {t.shape}")
        cex = _reduce_cex(sch, 1, consumer_thread(0, 0), "accum[0]",
                          f"{name!r}: an smem fp32 tensor of >= {need} elements",
                          f"{name!r} is {what}: rank 1's fp32 store of accum[0] (st.shared.f32 at element 0) has no "
                          "fp32 shared-memory buffer to land in", 0,
                          element={"tensor": name, "rank": 1, "index": 0},
                          trace=(f"rank 1: red[0 * {threads} + 0] = acc[0] (threadIdx.x=128)",))
        return (f"the clusterk reduce_buffer {name!r} is {what}; the ranks' partial sums are fp32 accumulators "
                "written to shared memory", "name an smem fp32 tensor of tile_m x tile_n elements (sR)", cex)
    if numel < need:
        idx = max(numel, 0)
        i, tt = divmod(idx, threads)
        w, th = divmod(tt, 128)
        cex = _reduce_cex(sch, 1, consumer_thread(w, th), f"accum[{i}]",
                          f"every write at an element < {numel} of {name!r}",
                          f"register {i} of consumer thread {tt} writes element {i} * {threads} + {tt} = {idx}, "
                          f"past the {numel} elements of {name!r} (smem byte {t.base_bytes + 4 * idx}, beyond its "
                          f"last byte {t.base_bytes + 4 * numel - 1}: another buffer or the mbarriers)", 0,
                          element={"tensor": name, "rank": 1, "index": idx}, smem={name: idx},
                          trace=(f"rank 1: red[{i} * {threads} + {tt}] = acc[{i}] (threadIdx.x={128 * (1 + w) + th})",))
        return (f"the clusterk reduce_buffer {name!r} holds {numel} fp32 elements, but {threads} consumer threads "
                f"write {regs} accumulator registers each ({need} = the {program.epilogue.tile_m}x"
                f"{program.epilogue.tile_n} tile): register {i} of thread {tt} writes element {idx} outside it",
                "size the reduce buffer to the whole tile (tile_m x tile_n fp32)", cex)
    return None


def _reduce_happens_before(splits: int, peers: tuple[int, ...], release: bool,
                           acquire: bool = True) -> list[tuple[str, int]]:
    """The two cluster barriers as a happens-before graph: events ``W r`` (rank r >= 1 writes its buffer),
    ``A b r`` / ``Q b r`` (rank r arrives at / returns from the wait of cluster barrier b), ``R p`` (rank 0
    reads rank p's buffer), ``X r`` (rank r exits; its shared memory is released). Program order within a
    rank; every arrive of a barrier phase before every wait of it. Returns the ordering problems
    ``(kind, peer)``: ``write`` (rank 0 may read rank p's buffer before p wrote it) or ``exit`` (rank p
    may exit before rank 0 read its buffer). ``acquire`` / ``release``: whether the first / second barrier is in
    the kernel (schedule node ``reduce_acquire`` / ``reduce_release``)."""
    barriers = ((1,) if acquire else ()) + ((2,) if release else ())
    seq: dict[int, list[str]] = {}
    for r in range(splits):
        ev = [f"W {r}"] if r else []
        if acquire:
            ev += [f"A 1 {r}", f"Q 1 {r}"]
        if r == 0:
            ev += [f"R {p}" for p in peers]
        if release:
            ev += [f"A 2 {r}", f"Q 2 {r}"]
        seq[r] = ev + [f"X {r}"]
    succ: dict[str, set[str]] = {e: set() for ev in seq.values() for e in ev}
    for ev in seq.values():
        for a, b in zip(ev, ev[1:]):
            succ[a].add(b)
    for b in barriers:
        for r in range(splits):
            for q in range(splits):
                succ[f"A {b} {r}"].add(f"Q {b} {q}")

    @functools.cache
    def after(e: str) -> frozenset[str]:
        out: set[str] = set()
        for n in succ[e]:
            out |= {n} | after(n)
        return frozenset(out)

    bad: list[tuple[str, int]] = []
    for p in peers:
        if p == 0:
            continue
        if f"R {p}" not in after(f"W {p}"):
            bad.append(("write", p))
        if f"X {p}" not in after(f"R {p}"):
            bad.append(("exit", p))
    return bad


def check_cluster_reduce(program: Program) -> tuple[list[Proof], list[Violation]]:
    """``scheduler.cluster_reduce`` (G4): the clusterk reduction (see the module docstring), for a
    ``clusterk`` schedule only (nothing for the others): the reduce buffer, the reduction simulated for
    every ``k_tiles`` in ``[1, cluster_reduce_bound(splits)]``, and the barriers' happens-before order."""
    sch = program.schedule
    if sch is None or sch.decomposition != "clusterk":
        return [], []
    where = str(sch.loc)
    e = program.epilogue
    threads = 128 * e.warpgroups
    regs = -(-e.tile_m * e.tile_n // threads)
    violations: list[Violation] = []
    buf = _reduce_buffer_problem(program, sch, threads, regs)
    if buf is not None:
        message, hint, cex = buf
        violations.append(Violation("scheduler.cluster_reduce", "G4", message, hint, where, cex))
    # the reduction, simulated: a partial is a multiset of k-tiles, or None (undefined data)
    s, peers = sch.splits, tuple(range(sch.reduce_from, sch.splits))
    bound = cluster_reduce_bound(s)
    cases = 0
    for k_tiles in range(1, bound + 1):
        cases += 1
        ranges = [sch.cluster_k_range(r, k_tiles) for r in range(s)]
        summed: dict[int, int] = {}
        for start, count in ranges:
            for k in range(start, start + count):
                summed[k] = summed.get(k, 0) + 1
        # rank r's partial: its k-tiles, or None where the mainloop never initialised its accumulators
        partial = [None if count == 0 and not sch.reduce_zero_empty else {k: 1 for k in range(start, start + count)}
                   for start, count in ranges]
        final: dict[int, int] = dict(partial[0] or {})
        undefined: list[tuple[int, str, str]] = []
        if partial[0] is None:
            undefined.append((0, "rank 0 has no k-tile and does not zero its accumulators: its own partial is "
                                 "uninitialised registers", "rank 0: acc[0] never written by the mainloop"))
        for r in peers:   # the printed peer loop: r = reduce_from .. splits - 1
            if r == 0:
                undefined.append((0, f"rank 0 reads its own {sch.reduce_buffer!r} (peer loop r = 0), which no rank "
                                     "writes (only ranks >= 1 store their partial sums): uninitialised shared memory",
                                  f"rank 0: acc[0] += ld.shared::cluster {sch.reduce_buffer}[0] of rank 0"))
                continue
            part = partial[r]
            if part is None:
                undefined.append((r, f"rank {r} has no k-tile (k_count 0) and writes its uninitialised accumulator "
                                     f"registers to {sch.reduce_buffer!r} (reduce_zero_empty false); rank 0 adds them",
                                  f"rank {r}: {sch.reduce_buffer}[0] = acc[0], never written by the mainloop"))
                continue
            for k, n in part.items():
                final[k] = final.get(k, 0) + n
        if undefined:
            r, actual, step = undefined[0]
            cex = _reduce_cex(sch, r, consumer_thread(0, 0), "accum[0]",
                              f"rank 0's sum of the {s} ranks' partials, every value defined", actual, k_tiles,
                              element={"tensor": sch.reduce_buffer, "rank": r, "index": 0},
                              smem={sch.reduce_buffer: 0},
                              trace=(step, "cluster barrier: arrive.release / wait.acquire",
                                     "rank 0 adds the value into acc[0] and stores D"))
            violations.append(Violation(
                "scheduler.cluster_reduce", "G4",
                f"the clusterk reduction adds undefined data: with k_tiles = {k_tiles} over {s} ranks, {actual}",
                "rank 0 adds ranks 1 .. splits - 1 only, and a rank without k-tiles writes zeros", where, cex))
            break
        wrong = sorted(k for k in set(summed) | set(final) if final.get(k, 0) != summed.get(k, 0))
        if wrong:
            k = wrong[0]
            owner = next(r for r, (a, n) in enumerate(ranges) if a <= k < a + n)
            got = final.get(k, 0)
            added = f"ranks {', '.join(map(str, peers))}" if peers else "no other rank"
            actual = (f"k-tile {k} (rank {owner}'s partial) is {'missing from' if got == 0 else f'{got} times in'} "
                      f"rank 0's sum: rank 0 adds {added} to its own")
            wg, th, reg, am, an = accumulator_map(program)   # consumer thread 0's accum[0]: its (m, n) of D
            i0 = int(np.flatnonzero((wg == 0) & (th == 0) & (reg == 0))[0])
            m0, n0 = int(am[i0]), int(an[i0])
            cex = _reduce_cex(sch, 0, consumer_thread(0, 0), "accum[0]", f"k-tile {k} in rank 0's sum once (rank "
                              f"{owner} summed it)", actual, k_tiles, k_tile=k,
                              element={"tensor": "D", "m": m0, "n": n0, "k_tile": k, "rank": owner},
                              trace=tuple(f"rank {r}: k-tiles [{a}, {a + n})" for r, (a, n) in enumerate(ranges))
                              + (f"rank 0: peer loop r = {sch.reduce_from} .. {s - 1}",))
            violations.append(Violation(
                "scheduler.cluster_reduce", "G4",
                f"the clusterk reduction does not add every rank's partial once: with k_tiles = {k_tiles} over {s} "
                f"ranks, {actual}", "rank 0 adds the buffers of ranks 1 .. splits - 1 (peer loop from 1)",
                where, cex))
            break
    for kind, p in _reduce_happens_before(s, peers, sch.reduce_release, sch.reduce_acquire)[:1]:
        if kind == "exit":
            actual = (f"rank {p} passes the only cluster barrier, returns and exits (its shared memory is released) "
                      f"while rank 0 may still read {sch.reduce_buffer}[0] of rank {p} through ld.shared::cluster: "
                      "it reads released shared memory (a race)")
            trace = (f"rank {p}: {sch.reduce_buffer}[0] = acc[0]; barrier.cluster.arrive.release; "
                     "barrier.cluster.wait.acquire",
                     f"rank {p}: returns from fixup_cluster, CTA exits (no second cluster barrier)",
                     f"rank 0: peer loop r = {p}: ld.shared::cluster {sch.reduce_buffer}[0] of rank {p}")
            hint = ("keep every rank resident until rank 0 read it: a second barrier.cluster arrive.release / "
                    "wait.acquire after rank 0's reads (cluster.sync() before exit, CUDA Programming Guide, "
                    "Distributed Shared Memory)")
        else:
            actual = (f"rank 0 may read {sch.reduce_buffer}[0] of rank {p} before rank {p} wrote it: no cluster "
                      "barrier orders the write before the read")
            trace = (f"rank 0: ld.shared::cluster {sch.reduce_buffer}[0] of rank {p}",
                     f"rank {p}: {sch.reduce_buffer}[0] = acc[0]")
            hint = "barrier.cluster.arrive.release / wait.acquire between the writes and rank 0's reads"
        cex = _reduce_cex(sch, p, consumer_thread(0, 0), "accum[0]",
                          f"rank 0's read of rank {p}'s {sch.reduce_buffer}[0] after rank {p}'s write and before "
                          f"rank {p} exits", actual, 0,
                          element={"tensor": sch.reduce_buffer, "rank": p, "index": 0},
                          smem={sch.reduce_buffer: 0}, trace=trace)
        violations.append(Violation("scheduler.cluster_reduce", "G4", f"the clusterk reduction races: {actual}",
                                    hint, where, cex))
    if violations:
        return [], violations
    text = (f"clusterk: the {s} ranks' partial sums meet in rank 0 once each: for every k_tiles in [1, {bound}] "
            f"({cases} cases) rank 0's sum of its own partial and the {sch.reduce_buffer!r} buffers of ranks "
            f"{sch.reduce_from} .. {s - 1} holds every k-tile a rank summed exactly once and no undefined value "
            "(ranks without a k-tile write zeros; rank 0's own buffer is never read), so with scheduler.bijection's "
            "exact k split every k-tile of [0, k_tiles) once; the cluster barriers order every rank's writes before "
            "rank 0's remote reads (arrive.release / wait.acquire) and those reads before the rank exits (the "
            f"second barrier); {sch.reduce_buffer!r} (smem fp32, {math.prod(program.tensor(sch.reduce_buffer).shape)}"
            f" elements) holds the {threads} consumer threads' {regs} registers each, thread-major (i * {threads} + t)")
    return [Proof("scheduler.cluster_reduce", "G4", "enum", text, cases + len(peers))], []


def check_uniformity(program: Program) -> tuple[list[Proof], list[Violation]]:
    """``warpgroup.uniform`` (G7): every warp of a consumer warpgroup passes ``wgmma`` the
    descriptor of the same stage (and so the same start address) at every iteration.

    PTX ISA 9.7.15.5: ``wgmma.mma_async`` is issued by all 4 warps of the warpgroup with the
    same descriptor values; a warp that selects another stage's descriptor makes the
    instruction's operands non-uniform (undefined behaviour). Checked by enumeration over the
    stages (the stage a warp uses is ``(i mod S + skew[w]) mod S``, periodic in ``i``).
    """
    proofs: list[Proof] = []
    violations: list[Violation] = []
    S = program.stages
    for read in program.reads:
        skew = read.warp_stage_skew
        if len(skew) != 4:
            violations.append(Violation("warpgroup.uniform", "G7", f"operand {read.operand}: warp_stage_skew {skew} "
                                        f"has {len(skew)} entries; a warpgroup has 4 warps", None, str(read.loc)))
            continue
        if skew[0] % S:
            i = 0
            cex = Counterexample(
                "G6", "pipeline.stage", "enum", "mainloop.gemm", str(read.loc), i, 0, 0, {},
                {"cta": 0, "threadIdx": 128, "warpgroup": 0, "warp": 4, "lane": 0}, f"{read.operand} descriptor", {},
                "stage 0 (the stage whose full barrier iteration 0 waited on)",
                f"warp 0 passes the descriptor of stage {skew[0] % S}", f"stage per warp = (i mod {S} + skew[w]) mod "
                f"{S}, skew = {skew}", params={"i": i})
            violations.append(Violation(
                "pipeline.stage", "G6", f"operand {read.operand}: the MMA reads stage (i mod {S} + {skew[0]}) mod {S}, "
                f"not the stage i mod {S} the consumer waited for (iteration 0 reads stage {skew[0] % S})",
                "read the stage of the pipeline state the consumer waited on", str(read.loc), cex))
        for i in range(S):
            used = [(i + s_) % S for s_ in skew]
            bad = [w for w in range(len(used)) if used[w] != used[0]]
            if bad:
                w = bad[0]
                cex = Counterexample(
                    "G7", "warpgroup.uniform", "enum", "mainloop.gemm", str(read.loc), i, used[0], 0, {},
                    {"cta": 0, "threadIdx": 128 + 32 * w, "warpgroup": 0, "warp": 4 + w, "lane": 0},
                    f"{read.operand} descriptor", {}, f"stage {used[0]} (warp 0's descriptor)",
                    f"warp {w} of the warpgroup passes the descriptor of stage {used[w]}",
                    f"stage per warp = (i mod {S} + skew[w]) mod {S}, skew = {skew}",
                    params={"i": i})
                violations.append(Violation(
                    "warpgroup.uniform", "G7",
                    f"operand {read.operand}: at iteration {i} warp {w} of the consumer warpgroup selects stage "
                    f"{used[w]} while warp 0 selects {used[0]}: wgmma's descriptors are not warpgroup-uniform",
                    "compute the stage (and descriptor) from warpgroup-uniform values only (the pipeline state)",
                    str(read.loc), cex))
                break
        else:
            proofs.append(Proof("warpgroup.uniform", "G7", "enum",
                                f"operand {read.operand}: all 4 warps pass the same stage's descriptor at every "
                                f"iteration (skew {skew})", S * len(skew)))
    return proofs, violations


def check_tma_store(program: Program) -> tuple[list[Proof], list[Violation]]:
    """``epilogue.tma_store`` (G2): the epilogue stages accumulator (m, n) of a subtile at the
    staging view's ``(m, n, stage)`` offset (:mod:`.staging`), and the TMA store, box by box as the
    kernel issues it (:func:`~argus_cutlass.hw.semantics.tma_store_box_coords`: box ``b`` at
    ``b * inner * outer`` elements of the stage, swizzled on the absolute address), must send
    exactly that element to gmem (m, n) and every (m, n) of the subtile once. The store's
    majorness must be D's (``"K"`` for a row-major D), and its stated subtile (``tile_mn x tile_k``, from which its
    box count is taken) the staging buffer's. PTX ISA 9.7.9.25."""
    from argus_cutlass.hw.semantics import (
        INT_OPS,
        TMA_SWIZZLE_BITS,
        box_element_offset,
        swizzle,
        tma_store_box_coords,
    )

    proofs: list[Proof] = []
    violations: list[Violation] = []
    e = program.epilogue
    node = program.staging
    for st in program.stores:
        t = program.tensor(st.src)
        where = str(st.loc)
        gd = program.tensor(st.dst)
        want_major = "K" if (e.d_major if e is not None else gd.major) == "N" else "MN"
        # (message, hint, the first (m, n) of the subtile the finding concerns)
        wrong: list[tuple[str, str, tuple[int, int]]] = []
        majorness = "print the store from D's own majorness"
        if gd.space != "gmem" or gd.tag is None or gd.tag.name != "D" or tuple(gd.shape) != ("M", "N"):
            wrong.append((f"the TMA store writes {gd.name} ({gd.space}, shape {gd.shape}, tag {gd.tag}), not the "
                          "gmem output D:(m,n) over (M, N)", majorness, (0, 0)))
        elif gd.binding != "D":
            wrong.append((f"D ({gd.name}) is bound to the caller's argument {gd.binding!r}: the TMA store writes the "
                          f"output into {gd.binding} (or its staged copy) at its leading dimension, and D is never "
                          "written", majorness, (0, 0)))
        if gd.dtype != t.dtype or st.copy.elem_bits != 8 * t.elem_bytes:
            wrong.append((f"the TMA store copies {st.copy.elem_bits}-bit elements of the {t.dtype} staging buffer "
                          f"{t.name} to {gd.dtype} {gd.name}", majorness, (0, 0)))
        if e is not None and gd.major != e.d_major:
            wrong.append((f"D ({st.dst}) is {gd.major}-contiguous but the epilogue partitions a "
                          f"{e.d_major}-contiguous D", majorness, (0, 0)))
        if st.major != want_major:
            wrong.append((f"the TMA store is {st.major}-major, but D is {e.d_major if e else gd.major}-contiguous "
                          f"({want_major}-major boxes)", majorness, (0, 0)))
        if node is None or node.view is None:
            wrong.append(("the staging step has no smem view to read the staged elements through", majorness, (0, 0)))
        em0, en0 = (int(t.shape[0]), int(t.shape[1])) if len(t.shape) >= 2 else (1, 1)
        if node is not None and node.view is not None and tuple(node.view.shape) != tuple(int(x) for x in t.shape):
            # the stage offsets are printed from the buffer (kStageBytesD): a view of other stages printed nothing
            # (review sweep, session 44)
            vm, vn = int(node.view.shape[0]), int(node.view.shape[1])
            wrong.append((f"the staging view {node.view.shape} is not the staging buffer {t.name}'s {tuple(t.shape)} "
                          "(subtile and stages)", "build the staging view from the staging buffer's shape",
                          (min(vm, em0 - 1), 0) if vm != em0 else (0, min(vn, en0 - 1))))
        if (st.tile_mn, st.tile_k) != (em0, en0):
            # the boxes are counted from tile_mn x tile_k (rounded up to whole boxes): a subtile stated smaller than
            # the staged one printed the same boxes, so the node's own subtile must be the staging buffer's
            wrong.append((f"the TMA store states a {st.tile_mn}x{st.tile_k} subtile, but the staging buffer {t.name} "
                          f"holds {em0}x{en0} subtiles (every staged element is stored once)",
                          "state the store's subtile (tile_mn x tile_k) as the staging buffer's",
                          (min(st.tile_mn, em0 - 1), 0) if st.tile_mn != em0 else (0, min(st.tile_k, en0 - 1))))
        if wrong:
            violations += [Violation("epilogue.tma_store", "G2", w, hint, where,
                                     Counterexample("G2", "epilogue.tma_store", "arith", "epilogue.tma_store", where,
                                                    -1, 0, -1, {"m": mm, "n": nn}, {}, "", {},
                                                    f"staged D({mm},{nn}) lands at the caller's D({mm},{nn}), once", w,
                                                    f"store {st.name}: {st.src} -> {gd.name} (binding {gd.binding}, "
                                                    f"{gd.dtype}, {gd.major}-contiguous, subtile {st.tile_mn}x"
                                                    f"{st.tile_k}; staging buffer {tuple(t.shape)})",
                                                    element={"tensor": "D", "m": mm, "n": nn}))
                           for w, hint, (mm, nn) in wrong]
            continue
        lay = view_layout(node.view)
        stages = int(t.shape[2])
        em, en = int(t.shape[0]), int(t.shape[1])
        stage_elems = em * en
        inner, outer = st.copy.box[0], st.copy.box[1]
        b, j, i = (x.ravel() for x in np.meshgrid(np.arange(st.boxes), np.arange(outer), np.arange(inner),
                                                  indexing="ij"))
        gm, gn = tma_store_box_coords(st, b, i, j)
        copy_eb = max(1, st.copy.elem_bits // 8)
        problem = None
        count = 0
        for s_ in range(stages):
            addr = t.base_bytes + s_ * stage_elems * t.elem_bytes + box_element_offset(b, i, j, inner, outer) * copy_eb
            addr = swizzle(INT_OPS, TMA_SWIZZLE_BITS.get(st.copy.swizzle_bytes, 0), 4, 3, addr)
            got = (addr - t.base_bytes) // t.elem_bytes
            inside = (gm >= 0) & (gm < em) & (gn >= 0) & (gn < en)
            want = np.where(inside, np.asarray(lay(np.clip(gm, 0, em - 1), np.clip(gn, 0, en - 1), s_), dtype=np.int64),
                            -1)
            hits = np.bincount(np.where(inside, gm * en + gn, stage_elems), minlength=stage_elems + 1)[:stage_elems]
            bad = np.flatnonzero(~inside | (want != got))
            count += want.size
            if bad.size or (hits != 1).any():
                if bad.size:
                    x = int(bad[0])
                    mm, nn = int(gm[x]), int(gn[x])
                    if not inside[x]:
                        actual = (f"box {int(b[x])} element ({int(i[x])}, {int(j[x])}) is stored to D({mm},{nn}), "
                                  f"outside the {em}x{en} subtile (another subtile's elements)")
                    else:
                        actual = f"it sends smem elem {int(got[x])} to D({mm},{nn})"
                    problem = (s_, mm, nn, int(want[x]), int(got[x]), actual)
                else:
                    z = int(np.flatnonzero(hits != 1)[0])
                    mm, nn = z // en, z % en
                    problem = (s_, mm, nn, int(lay(mm, nn, s_)), -1,
                               f"D({mm},{nn}) of the subtile is stored {int(hits[z])} times")
                break
        if problem is not None:
            s0, mm, nn, w_off, g_off, actual = problem
            cex = Counterexample(
                "G2", "epilogue.tma_store", "enum", "epilogue.tma_store", where, -1, s0, -1,
                {"m": mm, "n": nn}, consumer_thread(0, 0), "TMA store (issued by the store thread)", {"D": w_off},
                f"the TMA store sends smem elem {w_off} (where D({mm},{nn}) was staged) to D({mm},{nn})", actual,
                f"staging view {node.view.atom.name} {node.view.shape} vs TMA store box {st.copy.box} "
                f"SW{st.copy.swizzle_bytes} {st.major}-major",
                element={"tensor": "D", "m": mm, "n": nn},
                chain=(f"accum D({mm},{nn})", f"sD elem {w_off} (stage {s0})",
                       f"TMA store reads sD elem {g_off}", f"gmem D({mm},{nn})"))
            violations.append(Violation(
                "epilogue.tma_store", "G2",
                f"the TMA store of stage {s0} does not send each staged element to its own (m, n): {actual}",
                "build the TMA store from the staging buffer's own view (same swizzle and box)", where, cex))
        else:
            proofs.append(Proof("epilogue.tma_store", "G2", "enum",
                                f"TMA store: {st.boxes} boxes {st.copy.box} SW{st.copy.swizzle_bytes} send every "
                                f"staged "
                                f"element of all {stages} {em}x{en} stages of {st.src} to its own (m, n)", count))
    return proofs, violations


def _check_grouped_source(program: Program) -> tuple[list[Proof], list[Violation]]:
    """``epilogue.source`` for an MoE grouped GEMM (family ``moe``): the layer's rules (``moe.swiglu``,
    ``moe.combine``) take each GEMM's output as exactly its accumulator, ``out = acc``: the printed
    ``p.alpha`` / ``p.beta`` (program params ``alpha`` / ``beta``, ``templates/moe/gemm.j2``) are 1 and 0, the
    source node reads no C (``path == "none"``: ``kReadC = false``; the host passes no C) and keeps its other
    printed constants at their defaults (``kCRowOffset = 0``, ``kCResidueMask = true``)."""
    src = program.source
    alpha, beta, path = program.param("alpha"), program.param("beta"), src.path
    bad = []
    if alpha != 1.0:
        bad.append((f"the grouped epilogue scales its output by alpha = {alpha!r}: every out(m, n) is alpha * acc, "
                    "so the combine sums scaled expert outputs", "out(0,0) = acc(0,0)", f"out(0,0) = {alpha!r} * acc(0,0)"))
    if beta != 0.0:
        bad.append((f"the grouped epilogue adds beta = {beta!r} times C, and the host passes no C (nullptr)"
                    if path == "gmem" else f"the grouped epilogue prints beta = {beta!r}, which its C path "
                    f"{path!r} never applies: a printed scalar that says out = acc + {beta!r} * C while out = acc",
                    "out(0,0) = acc(0,0)", f"out(0,0) = acc(0,0) + {beta!r} * C(0,0), C = nullptr"
                    if path == "gmem" else f"beta = {beta!r} printed, unused"))
    if src.row_offset or not src.residue_mask:
        bad.append((f"the grouped epilogue's source node prints row_offset {src.row_offset} and residue_mask "
                    f"{src.residue_mask} (kCRowOffset / kCResidueMask): a C path that never runs must keep the "
                    "defaults (0, masked), so the printed constants say what the proof says",
                    "kCRowOffset = 0, kCResidueMask = true",
                    f"kCRowOffset = {src.row_offset}, kCResidueMask = {str(src.residue_mask).lower()}"))
    if path != "none":
        bad.append((f"the grouped epilogue's source path is {path!r}: it would read C, which the MoE host never "
                    "passes (C = nullptr); a proof of beta * C would describe a path that never runs",
                    "C never read (source path none)", f"C source path {path!r}"))
    if bad:
        where = str(src.loc)
        return [], [Violation("epilogue.source", "G2", msg, "out = acc: alpha 1, beta 0, source path none", where,
                              Counterexample("G2", "epilogue.source", "enum", "epilogue.source", where, -1, -1, -1,
                                             {"m": 0, "n": 0}, {}, "", {}, expected, actual,
                                             f"program params alpha {alpha!r}, beta {beta!r}; source path {path!r}",
                                             element={"tensor": "out", "m": 0, "n": 0}))
                    for msg, expected, actual in bad]
    return [Proof("epilogue.source", "G2", "arith", "grouped epilogue: out = acc (alpha 1, beta 0 printed from the "
                  "program's params; C never read: source path none)", 1),
            Proof("residue.source", "G8", "arith", "grouped epilogue: no C load to mask (source path none)", 1)], []


def check_source(program: Program) -> tuple[list[Proof], list[Violation]]:
    """``epilogue.source`` (G2) and ``residue.source`` (G8): the epilogue reads ``C`` for
    ``beta * C`` from gmem at each accumulator's own coordinate (``path == "gmem"``, ``row_offset
    == 0``, a gmem tensor tagged ``C`` over the accumulator's (M, N) modes with D's majorness:
    the kernel indexes it as D), and masks the loads to ``M x N`` (``residue_mask``; without it an
    edge tile reads past the last row of C). ``templates/gemm/epilogue.j2`` (``epi_value``)."""
    if program.family == "moe":   # out = acc, C never read: the layer's contract (its own checks)
        return _check_grouped_source(program)
    src = program.source
    e = program.epilogue
    where = str(src.loc)
    bad = []
    try:
        c = program.tensor(src.src)
    except KeyError:
        c = None
    d_major = e.d_major if e is not None else "N"
    d_dtype = next((program.tensor(st.dst).dtype for st in program.stores), None)
    if src.path != "gmem":
        bad.append((f"C source path {src.path!r}: C is never read, so D = alpha * acc drops beta * C for every beta "
                    "!= 0", "C(0,0) read at accumulator D(0,0)", "D(0,0) = alpha * acc(0,0): beta * C(0,0) missing"))
    if src.row_offset:
        bad.append((f"the epilogue reads C at row m + {src.row_offset} for accumulator row m: D(0,0) gets beta * "
                    f"C({src.row_offset},0)", "C(0,0) added to D(0,0)", f"C({src.row_offset},0) added to D(0,0)"))
    if c is None or c.space != "gmem" or c.tag is None or c.tag.name != "C" or tuple(c.shape) != ("M", "N"):
        what = "no tensor" if c is None else f"{c.name} ({c.space}, shape {c.shape}, tag {c.tag})"
        bad.append((f"the epilogue reads C from {what}, not a gmem C:(m,n) tensor over (M, N)",
                    "C(0,0) read from gmem C", f"read from {what}"))
    elif c.binding != "C":
        bad.append((f"C ({c.name}) is bound to the caller's argument {c.binding!r}, not C: beta * C adds the "
                    f"caller's {c.binding} (at its leading dimension)", "C(0,0) read from the caller's C",
                    f"{c.binding}(0,0) read"))
    elif c.dtype not in ("bf16", "fp16", "fp32"):
        bad.append((f"C ({c.name}) has dtype {c.dtype!r}: not a type the epilogue can read",
                    "C(0,0) read as bf16/fp16/fp32", f"C read as {c.dtype!r}"))
    elif d_dtype is not None and c.dtype != d_dtype:
        bad.append((f"C ({c.name}) is read as {c.dtype} but the caller's C has D's type {d_dtype} (out_dtype): "
                    f"every C element is misread ({DTYPE_BYTES[c.dtype]} bytes for {DTYPE_BYTES[d_dtype]})",
                    f"C(0,0) read as {d_dtype}", f"C(0,0) read as {c.dtype}"))
    elif c.major != d_major:
        bad.append((f"C ({c.name}) is {c.major}-contiguous but the epilogue indexes it as D, {d_major}-contiguous: "
                    "C is read transposed", "C(0,1) read for D(0,1)", "C(1,0) read for D(0,1)"))
    proofs: list[Proof] = []
    violations: list[Violation] = []
    mma = program.mma
    if mma is not None:
        from argus_cutlass.verify.absint import accumulator_thread

        thread, register = accumulator_thread(mma, 0, 0)
    else:
        thread, register = {}, ""
    for msg, expected, actual in bad:
        cex = Counterexample("G2", "epilogue.source", "enum", "epilogue.source", where, -1, -1, -1, {"m": 0, "n": 0},
                             thread, register, {}, expected, actual,
                             f"source path {src.path}, row offset {src.row_offset}, tensor {src.src}",
                             element={"tensor": "C", "m": src.row_offset, "n": 0})
        violations.append(Violation("epilogue.source", "G2", msg, "read C[m, n] for accumulator (m, n) from gmem",
                                    where, cex))
    if not bad:
        proofs.append(Proof("epilogue.source", "G2", "enum", f"beta * C reads {src.src}(m, n) ({d_major}-contiguous) "
                            "for every accumulator (m, n)", 1))
    if src.residue_mask:
        proofs.append(Proof("residue.source", "G8", "arith", "C loads predicated on m < M and n < N for every "
                            "residue of M and N", 1))
    else:
        tm = e.tile_m if e is not None else 1
        cex = Counterexample("G8", "residue.source", "arith", "epilogue.source", where, -1, -1, -1, {"m": 1, "n": 0},
                             thread, register, {}, f"no load of C({tm + 1},0): row {tm + 1} >= M = {tm + 1}",
                             f"C({tm + 1},0) loaded, past the last row of C", "edge tile of M = tile_m + 1",
                             element={"tensor": "C", "m": tm + 1, "n": 0}, params={"M": tm + 1})
        violations.append(Violation("residue.source", "G8",
                                    f"C loads are not masked: with M = {tm + 1} the edge tile reads C({tm + 1},0), "
                                    "past "
                                    "the last row (out of bounds)", "predicate every C load on m < M && n < N",
                                    where, cex))
    return proofs, violations
