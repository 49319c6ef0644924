"""CUTLASS SM90 tile-scheduler decomposition, transcribed as pure Python/numpy (invariant G4).

G4 asks that the output partition is bijective, and so is the tile scheduler. This module
restates, in its own code, what the CUTLASS 4.2 SM90 schedulers compute, and checks it by
enumeration. Sources (all under ``include/cutlass/gemm/kernel/``):

* **Walk order** -- ``sm90_tile_scheduler.hpp`` (``PersistentTileSchedulerSm90::get_work_idx_m_and_n``),
  ``static_tile_scheduler.hpp`` (``StaticPersistentTileScheduler``: the constructor's linear index,
  ``get_current_work_for_linear_idx``, ``advance_to_next_work``, ``get_linear_idx_from_m_and_n``) and
  ``tile_scheduler_params.h`` (``PersistentTileSchedulerSm90Params::initialize``,
  ``get_tiled_cta_shape_mnl``, ``get_log_swizzle_size``, ``get_rasterization_order``).
  :func:`cutlass_tile_of_unit` maps a linear work index to an output tile; :func:`check_walk` checks
  that the valid units cover the tile grid exactly once (and that the CUTLASS inverse agrees).
* **Unit division** -- ``sm90_tile_scheduler_stream_k.hpp`` (``PersistentTileSchedulerSm90StreamK::
  assign_work``, ``get_current_work_iter_start_possible_update_work_tile_k_remaining``,
  ``update_output_tile_id_and_work_tile_k``, ``continue_current_work_for_linear_idx``,
  ``compute_epilogue``, ``requires_fixup``, ``fixup_helper``) and ``tile_scheduler_params.h``
  (``PersistentTileSchedulerSm90StreamKParams::select_decomposition_mode``, ``get_num_sk_tiles``,
  ``get_num_sk_units``, ``calculate_groups``, ``set_params_basic``, ``set_params_stream_k``,
  ``adjust_split_count``). :func:`decomposition_plan` reproduces the host-side choice of
  data-parallel / split-K / stream-K and its sizes; :func:`work_units` lists, per CTA, the
  (tile, k range) pieces it executes; :func:`check_units` / :func:`check_division` check exact
  k coverage, one storing unit per tile, and simulate the fixup turnstile.

Modelled exactly (integer arithmetic of the C++ restated): cluster rounding of the tile grid,
the swizzle clamp by problem size and the swizzle/cluster padding, both raster orders and the
raster heuristic, the cluster-major blocking and swizzle of the walk and its inverse; split-K's
``k_tiles % splits`` "big units" first; stream-K's data-parallel/stream-K tile split by waves
(including the Heuristic tail-wave rule), the number of stream-K units
(``min_iters_per_sk_unit_ = 8``), the grouping (``max_sk_groups_ = 8``, ideal/fallback groups),
big groups and big units, the start/end shifts that keep every split >= 8 k-tiles, the backward
walk of a stream-K unit over its tiles, data-parallel tiles after the stream-K tiles, the
``is_valid() == (k_tile_count > 0)`` exit of the persistent loop, ``is_final_split`` as the unit that
stores D, and the Deterministic turnstile (``wait_eq(lock, K_idx)`` then ``arrive_inc(k_tile_count)``).

Simplified or taken as inputs (stated honestly):

* Batch ``L = 1`` (``divmod_batch_`` is not modelled).
* The launch grid (``get_grid_shape`` / ``get_max_cta_occupancy`` / ``max_active_clusters``) is an
  input: ``grid`` = number of persistent CTAs (``ctas_per_wave``), a multiple of the cluster size.
* A CTA's position in its cluster is derived from its linear index (``unit % cluster``), as the
  stream-K scheduler's ``get_current_work_cta_m_n_in_cluster`` does. The basic scheduler reads
  ``block_id_in_cluster()`` instead; both agree when the grid is a multiple of the cluster shape
  (which a cluster launch requires).
* Units whose tile lies in the cluster/swizzle padding are *not skipped* by CUTLASS: they are
  valid work (``linear_idx < blocks_per_problem_``), their TMA loads are zero-filled and their stores
  clipped, so they write nothing. They are reported with ``valid = False``.
* Separate reduction is not modelled: ``should_perform_separate_reduction`` returns ``false`` in this
  CUTLASS ("temporarily disabled"), so ``separate_reduction_units_ == 0`` and ``tile_peer_range`` is unused.
* ``ktile_start_alignment_count`` is 1: ``PersistentTileSchedulerSm90StreamK::to_underlying_arguments``
  does not forward it, so the odd-k-tile alignment branches are dead on SM90 and are left out.
* ``calculate_groups`` needs ``problem_blocks_{m,n} / cluster_{m,n}`` along the raster mode; it is an
  input (``max_groups_problem``, default 8 = a problem at least 8 clusters wide along the raster).
* ``adjust_split_count`` clamps by ``hw_info.sm_count``: input ``sm_count`` (default ``grid``).
* One lock per output tile (CUTLASS keeps one per tile and consumer warpgroup, ``lock_idx = tile *
  num_barriers + barrier_idx``; each warpgroup follows the same protocol on its own lock).
* Nondeterministic reduction: its waits (``wait_lt(lock, 1)`` for middle partials) are modelled,
  not the order of its atomic adds. The fixup simulation runs one fair schedule with every CTA
  resident (a persistent launch); in Deterministic mode the lock sequence is forced, so the
  outcome does not depend on the schedule.
* Not modelled: SM100 schedulers, CUTLASS's grouped (ptr-array) scheduler, dynamic persistence (CLC).

Section D is not CUTLASS's: the MoE family's grouped walk (``templates/moe/work.j2``: m-tiles are
data, optionally cut into bands of ``band_m`` m-tiles walked m-fastest), :func:`grouped_tile_of_unit`
and :func:`check_grouped_walk`, with the all-sizes argument :func:`grouped_walk_all_sizes`.

Mutation knobs (for showing the checks catch real bugs): ``swizzle_off_by_one`` on the walk;
``drop_remainder``, ``overlap``, ``no_end_adjust`` and ``epilogue_on_first`` on :func:`work_units`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "DecompositionPlan", "GroupedWalk", "MAX_SK_GROUPS", "MIN_ITERS_PER_SK_UNIT", "MODES", "Problem", "RASTERS",
    "REDUCTIONS", "FIXUP_MISTAKES", "TileWalk", "WalkGeometry", "WorkUnit", "check_division", "check_grouped_walk", "check_units",
    "check_walk", "cutlass_tile_of_unit", "cutlass_unit_of_tile", "decomposition_plan", "enumerate_division",
    "enumerate_grouped_walk", "enumerate_walk", "grouped_tile_of_unit", "grouped_walk_all_sizes",
    "grouped_walk_bound", "log_swizzle_size", "role_loop_units", "walk_geometry", "work_units",
]

#: our raster names -> CUTLASS RasterOrder (``heuristic`` = RasterOrderOptions::Heuristic)
RASTERS = ("along_m", "along_n", "heuristic")
#: our decomposition names -> CUTLASS DecompositionMode
MODES = ("data_parallel", "split_k", "stream_k", "heuristic")
#: CUTLASS ReductionMode
REDUCTIONS = ("deterministic", "nondeterministic")
#: planted mistakes of the nondeterministic fixup's waits (:func:`check_units`' ``fixup_mistake``)
FIXUP_MISTAKES = ("", "nd_middle_no_wait", "nd_final_waits_first")
#: ``PersistentTileSchedulerSm90StreamKParams::min_iters_per_sk_unit_``
MIN_ITERS_PER_SK_UNIT = 8
#: ``PersistentTileSchedulerSm90StreamKParams::max_sk_groups_``
MAX_SK_GROUPS = 8


# ---------------------------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Problem:
    """A concrete counterexample found by a check.

    ``check`` is ``"walk"`` or ``"division"``; ``kind`` a stable tag (``tile_missed``,
    ``k_tile_repeated``, ``no_store``, ``incomplete_store``, ``deadlock``...); ``tile`` is ``(tm, tn)``
    for the walk and the linear output-tile index for the division; ``k_tile`` the k-tile index;
    ``ctas`` / ``units`` the CTAs (initial linear index) and linear work indices involved;
    ``params`` every argument needed to reproduce it.
    """

    check: str
    kind: str
    message: str
    params: dict[str, Any]
    tile: int | tuple[int, int] | None = None
    k_tile: int | None = None
    ctas: tuple[int, ...] = ()
    units: tuple[int, ...] = ()


class WalkGeometry(NamedTuple):
    """What ``PersistentTileSchedulerSm90Params::initialize`` derives from the tile grid.

    ``blocks_m`` / ``blocks_n``: CTA tiles per mode after rounding up to the cluster shape and
    then to ``swizzle * cluster`` (``problem_blocks_m/n``); ``log_swizzle``: ``log_swizzle_size_``;
    ``raster``: the resolved order (``along_m`` / ``along_n``); ``units``: ``blocks_per_problem_``,
    the number of linear work indices the scheduler walks (L = 1)."""

    blocks_m: int
    blocks_n: int
    log_swizzle: int
    raster: str
    units: int


class TileWalk(NamedTuple):
    """Result of :func:`cutlass_tile_of_unit`: int64 arrays shaped like ``unit`` (``tm``, ``tn``:
    CTA-tile coordinates, -1 for ``unit >= units``), ``valid`` (bool: the tile is inside the real
    ``tiles_m x tiles_n`` grid) and ``units`` (the total linear units the scheduler walks)."""

    tm: np.ndarray
    tn: np.ndarray
    valid: np.ndarray
    units: int


class WorkUnit(NamedTuple):
    """One (tile, k range) piece a CTA executes, in execution order.

    ``cta``: the CTA's initial linear index (``0 <= cta < grid``); ``unit``: the linear work index
    (CUTLASS ``linear_idx``); ``tile``: the linear output-tile index in walk order (map it to
    ``(tm, tn)`` with :func:`cutlass_tile_of_unit`); ``[k_begin, k_end)``: k-tile indices within the
    tile (CUTLASS ``K_idx`` and ``K_idx + k_tile_count``); ``stores_output``: the piece writes D
    (``compute_epilogue``: data-parallel or final split) rather than a partial to the workspace."""

    cta: int
    unit: int
    tile: int
    k_begin: int
    k_end: int
    stores_output: bool


@dataclasses.dataclass(frozen=True)
class DecompositionPlan:
    """The host-side decision of ``PersistentTileSchedulerSm90StreamKParams`` (``select_decomposition_mode``
    then ``set_params``).

    ``mode``: resolved ``data_parallel`` / ``split_k`` / ``stream_k``; ``splits``: ``divmod_splits_``
    (1 unless split-K); ``sk_tiles`` / ``sk_units``: stream-K output tiles and units (the first
    ``sk_tiles`` tiles in walk order; units ``[0, sk_units)``); ``dp_units``: data-parallel units
    (tiles ``[sk_tiles, tiles)``, units ``[sk_units, units)``); ``groups`` / ``big_groups``: stream-K
    groups and those with one extra cluster tile; ``units``: total linear work indices
    (``units_per_problem_ * splits``)."""

    tiles: int
    k_tiles: int
    grid: int
    cluster_size: int
    mode: str
    splits: int
    sk_tiles: int
    sk_units: int
    dp_units: int
    groups: int
    big_groups: int
    units: int


# ---------------------------------------------------------------------------------------------
# argument checks
# ---------------------------------------------------------------------------------------------


def _positive(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _pow2(name: str, value: int) -> None:
    _positive(name, value)
    if value & (value - 1):
        raise ValueError(f"{name} must be a power of two, got {value!r}")


def _choice(name: str, value: str, options: Sequence[str]) -> None:
    if value not in options:
        raise ValueError(f"{name} must be one of {', '.join(options)}; got {value!r}")


# ---------------------------------------------------------------------------------------------
# A. walk order of PersistentTileSchedulerSm90
# ---------------------------------------------------------------------------------------------


def log_swizzle_size(ctas_m: int, ctas_n: int, max_swizzle: int) -> int:
    """``log2`` of the swizzle actually used: ``PersistentTileSchedulerSm90Params::get_log_swizzle_size``.

    The requested ``max_swizzle`` is clamped by the smaller tile-grid mode (after cluster rounding):
    8 needs ``min(ctas_m, ctas_n) >= 6``, 4 needs ``>= 3``, 2 needs ``>= 2``; otherwise 1. Returns 0..3.
    """
    smaller = min(ctas_m, ctas_n)
    if max_swizzle >= 8 and smaller >= 6:
        return 3
    if max_swizzle >= 4 and smaller >= 3:
        return 2
    if max_swizzle >= 2 and smaller >= 2:
        return 1
    return 0


def _round_up(a: int, b: int) -> int:
    return (a + b - 1) // b * b


def walk_geometry(tiles_m: int, tiles_n: int, cluster_m: int = 1, cluster_n: int = 1,
                  raster: str = "along_n", max_swizzle: int = 1) -> WalkGeometry:
    """Padded tile grid, swizzle and raster of the persistent scheduler for a ``tiles_m x tiles_n``
    CTA-tile grid.

    Source: ``tile_scheduler_params.h``, ``PersistentTileSchedulerSm90Params::get_tiled_cta_shape_mnl``
    (round each mode up to the cluster), ``initialize`` (clamp the swizzle with
    ``get_log_swizzle_size`` on the cluster-rounded grid, round each mode up to ``swizzle * cluster``,
    ``blocks_per_problem_ = blocks_m * blocks_n``) and ``get_rasterization_order`` (Heuristic: along M
    when the padded grid has more N tiles than M tiles, else along N).

    Raises ValueError for non-positive ``tiles_m`` / ``tiles_n``, a cluster extent that is not a power
    of two (CUTLASS divides by it with ``FastDivmodU64Pow2``), ``max_swizzle`` not a power of two, or
    an unknown ``raster``.
    """
    _positive("tiles_m", tiles_m)
    _positive("tiles_n", tiles_n)
    _pow2("cluster_m", cluster_m)
    _pow2("cluster_n", cluster_n)
    _pow2("max_swizzle", max_swizzle)
    _choice("raster", raster, RASTERS)
    ctas_m = _round_up(tiles_m, cluster_m)
    ctas_n = _round_up(tiles_n, cluster_n)
    log = log_swizzle_size(ctas_m, ctas_n, max_swizzle)
    blocks_m = _round_up(ctas_m, (1 << log) * cluster_m)
    blocks_n = _round_up(ctas_n, (1 << log) * cluster_n)
    if raster == "heuristic":
        raster = "along_m" if blocks_n > blocks_m else "along_n"
    return WalkGeometry(blocks_m, blocks_n, log, raster, blocks_m * blocks_n)


def _divisors(g: WalkGeometry, cluster_m: int, cluster_n: int) -> tuple[int, int, int]:
    """(major, minor, clusters along major) of ``initialize``: AlongN walks N-clusters fastest."""
    if g.raster == "along_n":
        return cluster_n, cluster_m, g.blocks_n // cluster_n
    return cluster_m, cluster_n, g.blocks_m // cluster_m


def cutlass_tile_of_unit(unit: int | np.ndarray, tiles_m: int, tiles_n: int, cluster_m: int = 1,
                         cluster_n: int = 1, raster: str = "along_n", max_swizzle: int = 1, *,
                         swizzle_off_by_one: bool = False) -> TileWalk:
    """Output CTA tile ``(tm, tn)`` of linear work index ``unit`` (scalar or int array, any shape).

    Transcribes ``StaticPersistentTileScheduler::get_current_work_for_linear_idx`` and
    ``PersistentTileSchedulerSm90::get_work_idx_m_and_n`` (``sm90_tile_scheduler.hpp``) with the
    parameters of :func:`walk_geometry`. With ``major``/``minor`` the cluster extents along / across
    the raster (AlongN: major = cluster_n, minor = cluster_m) and ``S = 2**log_swizzle``::

        minor_off = unit % minor              # CTA position across the raster inside its cluster
        cluster_id, major_off = divmod(unit // minor, major)
        offset, extra = cluster_id % S, cluster_id // S
        panel, cluster_major = divmod(extra, clusters_along_major)
        minor_idx = (panel * S + offset) * minor + minor_off
        major_idx = cluster_major * major + major_off
        (tm, tn) = (minor_idx, major_idx) if AlongN else (major_idx, minor_idx)

    i.e. clusters are walked in panels ``S`` clusters wide across the raster, column by column along it.
    A CTA with initial index ``c`` executes units ``c, c + grid, ...`` (``advance_to_next_work``), and
    stops at ``unit >= units``. Units in the padding (``tm >= tiles_m`` or ``tn >= tiles_n``) are
    executed by CUTLASS but write nothing (TMA zero fill, clipped stores): ``valid`` is False for them.

    ``swizzle_off_by_one`` (mutation): the swizzle mask is ``S`` instead of ``S - 1``.

    Returns :class:`TileWalk`. Raises ValueError as :func:`walk_geometry`, or for a negative unit.
    """
    g = walk_geometry(tiles_m, tiles_n, cluster_m, cluster_n, raster, max_swizzle)
    u = np.asarray(unit, dtype=np.int64)
    if u.size and int(u.min()) < 0:
        raise ValueError(f"unit must be >= 0, got {int(u.min())}")
    major, minor, clusters_major = _divisors(g, cluster_m, cluster_n)
    s = 1 << g.log_swizzle
    minor_off = u % minor
    cluster_id, major_off = np.divmod(u // minor, major)
    offset = cluster_id & (s if swizzle_off_by_one else s - 1)
    extra = cluster_id >> g.log_swizzle
    panel, cluster_major = np.divmod(extra, clusters_major)
    minor_idx = (panel * s + offset) * minor + minor_off
    major_idx = cluster_major * major + major_off
    tm, tn = (minor_idx, major_idx) if g.raster == "along_n" else (major_idx, minor_idx)
    inside = u < g.units
    tm = np.where(inside, tm, -1)
    tn = np.where(inside, tn, -1)
    valid = inside & (tm < tiles_m) & (tn < tiles_n)
    return TileWalk(tm, tn, valid, g.units)


def cutlass_unit_of_tile(tm: int | np.ndarray, tn: int | np.ndarray, tiles_m: int, tiles_n: int,
                         cluster_m: int = 1, cluster_n: int = 1, raster: str = "along_n",
                         max_swizzle: int = 1) -> np.ndarray:
    """Linear work index of CTA tile ``(tm, tn)`` (int64 array, broadcast shape): the inverse walk
    ``StaticPersistentTileScheduler::get_linear_idx_from_m_and_n`` (``static_tile_scheduler.hpp``),
    which the stream-K scheduler uses to index its per-tile locks (``output_tile_index``).

    Raises ValueError as :func:`walk_geometry`, or for negative coordinates.
    """
    g = walk_geometry(tiles_m, tiles_n, cluster_m, cluster_n, raster, max_swizzle)
    m = np.asarray(tm, dtype=np.int64)
    n = np.asarray(tn, dtype=np.int64)
    if (m.size and int(m.min()) < 0) or (n.size and int(n.min()) < 0):
        raise ValueError("tm and tn must be >= 0")
    major, minor, clusters_major = _divisors(g, cluster_m, cluster_n)
    minor_idx, major_idx = (m, n) if g.raster == "along_n" else (n, m)
    minor_off = minor_idx % minor
    cluster_minor = (minor_idx - minor_off) // minor
    cluster_major, major_off = np.divmod(major_idx, major)
    s = 1 << g.log_swizzle
    extra = (cluster_minor >> g.log_swizzle) * clusters_major + cluster_major
    cluster_id = (extra << g.log_swizzle) | (cluster_minor & (s - 1))
    return (cluster_id * major + major_off) * minor + minor_off


def check_walk(tiles_m: int, tiles_n: int, cluster_m: int = 1, cluster_n: int = 1, raster: str = "along_n",
               max_swizzle: int = 1, *, swizzle_off_by_one: bool = False) -> Problem | None:
    """Check that the walk of :func:`cutlass_tile_of_unit` is a bijection, by enumerating every unit.

    Checked, in order: (1) every real tile of ``tiles_m x tiles_n`` is the tile of exactly one valid
    unit (``tile_missed`` / ``tile_repeated``, smallest ``(tm, tn)`` in row-major order first); (2) no
    unit lands outside the padded grid and the padded grid is covered once (``padding_not_bijective``);
    (3) the CUTLASS inverse ``get_linear_idx_from_m_and_n`` returns the unit (``inverse_mismatch``);
    (4) the ``cluster_m * cluster_n`` consecutive units of one cluster get one aligned cluster of tiles
    (``cluster_split``; TMA multicast relies on it).

    Returns None when all hold, else a :class:`Problem` naming the tile and the units. Raises
    ValueError as :func:`walk_geometry`.
    """
    params: dict[str, Any] = {"tiles_m": tiles_m, "tiles_n": tiles_n, "cluster_m": cluster_m,
                              "cluster_n": cluster_n, "raster": raster, "max_swizzle": max_swizzle}
    if swizzle_off_by_one:
        params["swizzle_off_by_one"] = True
    g = walk_geometry(tiles_m, tiles_n, cluster_m, cluster_n, raster, max_swizzle)
    units = np.arange(g.units, dtype=np.int64)
    w = cutlass_tile_of_unit(units, tiles_m, tiles_n, cluster_m, cluster_n, raster, max_swizzle,
                             swizzle_off_by_one=swizzle_off_by_one)
    where = f"{tiles_m}x{tiles_n} tiles, cluster {cluster_m}x{cluster_n}, {g.raster}, swizzle {1 << g.log_swizzle}"
    vm, vn = w.tm[w.valid], w.tn[w.valid]
    counts = np.bincount(vm * tiles_n + vn, minlength=tiles_m * tiles_n)
    bad = np.flatnonzero(counts != 1)
    if bad.size:
        t = int(bad[0])
        tile = (t // tiles_n, t % tiles_n)
        hit = tuple(int(x) for x in units[w.valid & (w.tm == tile[0]) & (w.tn == tile[1])])
        kind = "tile_missed" if not hit else "tile_repeated"
        msg = (f"tile {tile} is the tile of no unit ({where})" if not hit else
               f"tile {tile} is the tile of units {list(hit)} ({where}): computed and stored {len(hit)} times")
        return Problem("walk", kind, msg, params, tile=tile, units=hit)
    inside = (w.tm >= 0) & (w.tm < g.blocks_m) & (w.tn >= 0) & (w.tn < g.blocks_n)
    pad_counts = np.bincount(np.where(inside, w.tm * g.blocks_n + w.tn, g.units), minlength=g.units + 1)
    if not inside.all() or (pad_counts[:-1] != 1).any():
        u = int(units[~inside][0]) if not inside.all() else int(
            units[(w.tm * g.blocks_n + w.tn) == int(np.flatnonzero(pad_counts[:-1] != 1)[0])][0])
        tile = (int(w.tm[u]), int(w.tn[u]))
        return Problem("walk", "padding_not_bijective",
                       f"unit {u} maps to tile {tile}, not a once-covered tile of the padded "
                       f"{g.blocks_m}x{g.blocks_n} grid ({where})", params, tile=tile, units=(u,))
    back = cutlass_unit_of_tile(w.tm, w.tn, tiles_m, tiles_n, cluster_m, cluster_n, raster, max_swizzle)
    wrong = np.flatnonzero(back != units)
    if wrong.size:
        u = int(wrong[0])
        tile = (int(w.tm[u]), int(w.tn[u]))
        return Problem("walk", "inverse_mismatch",
                       f"unit {u} -> tile {tile} -> unit {int(back[u])} by get_linear_idx_from_m_and_n ({where})",
                       params, tile=tile, units=(u, int(back[u])))
    cs = cluster_m * cluster_n
    cm_, cn_ = (w.tm // cluster_m).reshape(-1, cs), (w.tn // cluster_n).reshape(-1, cs)
    split = np.flatnonzero((cm_ != cm_[:, :1]).any(axis=1) | (cn_ != cn_[:, :1]).any(axis=1))
    if split.size:
        c = int(split[0])
        us = tuple(range(c * cs, (c + 1) * cs))
        tiles = [(int(w.tm[u]), int(w.tn[u])) for u in us]
        return Problem("walk", "cluster_split",
                       f"units {list(us)} of one cluster get tiles {tiles}, not one aligned "
                       f"{cluster_m}x{cluster_n} cluster tile ({where})", params, tile=tiles[0], units=us)
    return None


def enumerate_walk(max_tiles: int = 12, clusters: Iterable[tuple[int, int]] = ((1, 1), (2, 1), (1, 2)),
                   rasters: Iterable[str] = ("along_m", "along_n"), swizzles: Iterable[int] = (1, 2, 4, 8), *,
                   swizzle_off_by_one: bool = False) -> tuple[int, Problem | None]:
    """Run :func:`check_walk` on every tile grid ``1..max_tiles`` x ``1..max_tiles`` for every cluster
    shape, raster and swizzle (grids in increasing order, so the first problem is a smallest one).

    Returns ``(cases_checked, first_problem_or_None)``; stops at the first problem. Raises ValueError
    for ``max_tiles < 1`` or bad entries (as :func:`walk_geometry`).
    """
    _positive("max_tiles", max_tiles)
    clusters, rasters, swizzles = list(clusters), list(rasters), list(swizzles)
    cases = 0
    for tm in range(1, max_tiles + 1):
        for tn in range(1, max_tiles + 1):
            for cm, cn in clusters:
                for raster in rasters:
                    for sw in swizzles:
                        cases += 1
                        p = check_walk(tm, tn, cm, cn, raster, sw, swizzle_off_by_one=swizzle_off_by_one)
                        if p is not None:
                            return cases, p
    return cases, None


# ---------------------------------------------------------------------------------------------
# B. stream-K / split-K unit division (PersistentTileSchedulerSm90StreamK)
# ---------------------------------------------------------------------------------------------


def _adjust_split_count(splits: int, sm_count: int, k_tiles: int) -> int:
    """``PersistentTileSchedulerSm90StreamKParams::adjust_split_count`` with alignment count 1."""
    return min(splits, sm_count, k_tiles)


def _num_sk_tiles(tiles: int, ctas_per_wave: int, cluster_size: int, k_tiles: int, mode: str) -> int:
    """``get_num_sk_tiles``: the last (up to) two waves go to stream-K when the last wave is partial."""
    if mode in ("data_parallel", "split_k"):
        return 0
    full_waves = tiles // ctas_per_wave
    total_waves = -(-tiles // ctas_per_wave)
    dp_waves = full_waves - 1 if full_waves > 1 else 0
    sk_tiles = tiles - dp_waves * ctas_per_wave
    if full_waves == total_waves or k_tiles <= MIN_ITERS_PER_SK_UNIT:
        return 0
    if mode == "heuristic" and 2 * (tiles - full_waves * ctas_per_wave) >= ctas_per_wave:
        return 0
    return sk_tiles // cluster_size * cluster_size


def _num_sk_units(cluster_size: int, ctas_per_sk_wave: int, sk_tiles: int, k_tiles: int) -> int:
    """``get_num_sk_units``: one wave of units, fewer if a unit would get < 8 k-tiles."""
    min_sized = k_tiles * sk_tiles // MIN_ITERS_PER_SK_UNIT // cluster_size * cluster_size
    return min(ctas_per_sk_wave, min_sized)


def _calculate_groups(max_groups_problem: int, cluster_size: int, sk_tiles: int, sk_units: int,
                      k_tiles: int) -> int:
    """``calculate_groups``: the most groups (<= 8) dividing the stream-K clusters and cluster tiles with
    >= 8 k-tiles per unit; else the largest 'valid' (clusters divide) count; else 1."""
    groups = min(max_groups_problem, MAX_SK_GROUPS)
    sk_cluster_tiles = sk_tiles // cluster_size
    sk_cluster_units = sk_units // cluster_size

    def too_small(g: int) -> bool:
        return (sk_cluster_tiles // g) * cluster_size * k_tiles // (sk_units // g) < MIN_ITERS_PER_SK_UNIT

    fallback = 0
    while groups > 1 and not (sk_cluster_units % groups == 0 and sk_cluster_tiles % groups == 0
                              and not too_small(groups)):
        if fallback == 0 and sk_cluster_units % groups == 0 and not too_small(groups):
            fallback = groups
        groups -= 1
    if groups == 1 and fallback > 0:
        groups = fallback
    return groups


def decomposition_plan(tiles: int, k_tiles: int, grid: int, cluster_size: int = 1, mode: str = "stream_k",
                       splits: int = 1, *, sm_count: int | None = None,
                       max_groups_problem: int | None = None) -> DecompositionPlan:
    """The decomposition CUTLASS's stream-K scheduler picks on the host.

    ``tiles``: output CTA tiles in walk order (``blocks_m * blocks_n`` of :func:`walk_geometry`, a multiple
    of ``cluster_size``); ``k_tiles``: k-tiles per output tile (``ceil(K / tile_k)``); ``grid``: persistent
    CTAs launched (``ctas_per_wave``; the stream-K scheduler's grid is not truncated by the problem size);
    ``mode``: ``split_k`` (``splits`` > 1), ``stream_k``, ``data_parallel`` or ``heuristic``.

    Source: ``tile_scheduler_params.h``, ``PersistentTileSchedulerSm90StreamKParams::select_decomposition_mode``
    (SplitK or Heuristic with splits > 1 -> split-K with ``adjust_split_count``: splits clamped to
    ``sm_count`` and ``k_tiles``; otherwise stream-K tiles = the last one or two waves when the last wave is
    partial and ``k_tiles > 8`` (Heuristic: only when the tail wave is under half full), stream-K units =
    ``min(grid, k_tiles * sk_tiles // 8)`` in whole clusters, data-parallel when there are none; Heuristic
    turns stream-K into split-K with ``sk_units / sk_tiles`` splits when that divides evenly) and
    ``set_params`` / ``set_params_basic`` / ``set_params_stream_k``.

    Raises ValueError for non-positive sizes, ``cluster_size`` not a power of two, ``tiles`` or ``grid`` not
    multiples of ``cluster_size``, ``splits < 1``, ``splits > 1`` with ``stream_k`` / ``data_parallel``
    (``can_implement`` is false), or an unknown ``mode``.
    """
    _positive("tiles", tiles)
    _positive("k_tiles", k_tiles)
    _positive("grid", grid)
    _pow2("cluster_size", cluster_size)
    _positive("splits", splits)
    _choice("mode", mode, MODES)
    if tiles % cluster_size:
        raise ValueError(f"tiles ({tiles}) must be a multiple of cluster_size ({cluster_size}): "
                         "get_tiled_cta_shape_mnl pads the grid to whole clusters")
    if grid % cluster_size:
        raise ValueError(f"grid ({grid}) must be a multiple of cluster_size ({cluster_size})")
    if splits > 1 and mode in ("stream_k", "data_parallel"):
        raise ValueError(f"splits ({splits}) > 1 needs mode split_k or heuristic (can_implement is false)")
    sm = grid if sm_count is None else sm_count
    _positive("sm_count", sm)
    mgp = MAX_SK_GROUPS if max_groups_problem is None else max_groups_problem
    _positive("max_groups_problem", mgp)

    def basic(s: int) -> DecompositionPlan:
        resolved = "split_k" if s > 1 else "data_parallel"
        return DecompositionPlan(tiles, k_tiles, grid, cluster_size, resolved, s, 0, 0, tiles if s == 1 else 0, 1, 0,
                                 tiles * s)

    if mode == "split_k" or (mode == "heuristic" and splits > 1):
        return basic(_adjust_split_count(splits, sm, k_tiles))
    ctas_per_wave = grid // cluster_size * cluster_size
    sk_tiles = _num_sk_tiles(tiles, grid, cluster_size, k_tiles, mode)
    sk_units = _num_sk_units(cluster_size, ctas_per_wave, sk_tiles, k_tiles)
    if mode == "data_parallel" or (mode == "heuristic" and sk_tiles == 0) or sk_units == 0:
        return basic(1)
    groups = _calculate_groups(mgp, cluster_size, sk_tiles, sk_units, k_tiles)
    if mode == "heuristic" and sk_tiles < sk_units and sk_units % sk_tiles == 0:
        return basic(sk_units // sk_tiles)
    dp_units = tiles - sk_tiles
    big_groups = (sk_tiles // cluster_size) % groups
    return DecompositionPlan(tiles, k_tiles, grid, cluster_size, "stream_k", 1, sk_tiles, sk_units, dp_units,
                             groups, big_groups, dp_units + sk_units)


def _unit_pieces(plan: DecompositionPlan, cta: int, u: int, drop_remainder: bool, overlap: int,
                 no_end_adjust: bool, epilogue_on_first: bool) -> list[WorkUnit]:
    """The pieces of linear unit ``u`` in execution order; ``[]`` when the unit is invalid
    (``k_tile_count == 0``), which ends the CTA's persistent loop."""
    k = plan.k_tiles
    cs = plan.cluster_size

    if plan.splits == 1 and u >= plan.sk_units:                 # assign_work: data-parallel work
        return [WorkUnit(cta, u, u - plan.sk_units + plan.sk_tiles, 0, k, True)]
    # get_current_work_iter_start_possible_update_work_tile_k_remaining
    in_cluster = u % cs
    cluster_idx, group = divmod(u // cs, plan.groups)
    split_k = plan.splits > 1
    if split_k:
        split, cluster_idx = divmod(cluster_idx, plan.tiles // cs)   # divmod_clusters_mnl_
        per_split = k // plan.splits
        start = k * cluster_idx + per_split * split
        lhs, rhs = split, (0 if drop_remainder else k % plan.splits)   # big_units_
        k_in_group = 0
    else:
        cluster_tiles = plan.sk_tiles // cs // plan.groups + (1 if group < plan.big_groups else 0)
        k_in_group = cluster_tiles * cs * k
        units_per_group = plan.sk_units // plan.groups
        per_split = k_in_group // units_per_group
        big_units = (k_in_group - per_split * units_per_group) // cs
        start = per_split * cluster_idx
        lhs, rhs, split = cluster_idx, big_units, 0
    count = per_split
    if lhs < rhs:
        start += lhs
        count += 1
    else:
        start += rhs
    if not split_k:
        head = start % k
        if head < MIN_ITERS_PER_SK_UNIT:                  # take over the short start of this tile
            start -= head
            count += head
        elif head > k - MIN_ITERS_PER_SK_UNIT:            # shed the short end of this tile
            start += k - head
            count -= k - head
        tail = (start + count) % k
        if no_end_adjust:
            pass
        elif tail < MIN_ITERS_PER_SK_UNIT:
            count -= tail
        elif tail > k - MIN_ITERS_PER_SK_UNIT:
            count += k - tail
    if overlap and ((split_k and split < plan.splits - 1) or (not split_k and start + count < k_in_group)):
        count += overlap
    if count == 0:
        return []
    if count < 0:                                         # uint32 wrap in CUTLASS: flagged by check_units
        return [WorkUnit(cta, u, -1, start, start + count, False)]
    pieces = []
    remaining = count
    while remaining > 0:                                  # update_output_tile_id_and_work_tile_k, backwards
        last = start + remaining - 1
        tile_in_group = last // k
        tile_start = tile_in_group * k
        tile = (tile_in_group * plan.groups + group) * cs + in_cluster
        kb = max(tile_start, start) - tile_start
        ke = min(tile_start + k, last + 1) - tile_start
        final = kb == 0 if epilogue_on_first else ke == k       # is_final_split
        pieces.append(WorkUnit(cta, u, tile, kb, ke, final))
        remaining -= ke - kb
    return pieces


def work_units(tiles: int, k_tiles: int, grid: int, cluster_size: int = 1, mode: str = "stream_k",
               splits: int = 1, *, sm_count: int | None = None, max_groups_problem: int | None = None,
               drop_remainder: bool = False, overlap: int = 0, no_end_adjust: bool = False,
               epilogue_on_first: bool = False) -> list[list[WorkUnit]]:
    """Per CTA, the ordered (tile, k range) pieces it executes: ``result[cta]`` for ``cta in range(grid)``.

    CTA ``c`` takes linear units ``c, c + grid, ...`` below ``plan.units`` (``advance_to_next_work``) and
    leaves its loop at the first invalid unit (``WorkTileInfo::is_valid``: ``k_tile_count > 0``). A
    data-parallel unit ``u >= sk_units`` is tile ``u - sk_units + sk_tiles``, all k-tiles. A split-K unit
    ``u`` (cluster index ``c = u // cluster_size``) is split ``c // (tiles / cluster_size)`` of tile
    ``(c % (tiles / cluster_size)) * cluster_size + u % cluster_size``, with the first ``k_tiles % splits``
    splits one k-tile longer. A stream-K unit ``u`` of group ``g = c % groups`` gets the ``(c // groups)``-th
    equal share (big units first) of its group's k-iteration space (cluster tiles ``g, g + groups, ...``
    times ``k_tiles``), moved so no split of a tile is under 8 k-tiles, then walks it backwards tile by
    tile. ``stores_output`` is ``is_final_split`` (``K_idx + k_tile_count == k_tiles``).

    Source: ``sm90_tile_scheduler_stream_k.hpp``, ``PersistentTileSchedulerSm90StreamK::assign_work``,
    ``get_current_work_iter_start_possible_update_work_tile_k_remaining``,
    ``update_output_tile_id_and_work_tile_k``, ``continue_current_work_for_linear_idx``, ``compute_epilogue``;
    plan from :func:`decomposition_plan`.

    Mutation knobs: ``drop_remainder`` (split-K: every split gets ``k_tiles // splits``, the remainder is
    lost); ``overlap=n`` (a split-K / stream-K unit that has a successor in its tile / group reaches ``n``
    k-tiles into its successor's range); ``no_end_adjust`` (stream-K: the start of a unit is moved to
    avoid short splits but the end of its predecessor is not); ``epilogue_on_first`` (the first split,
    not the final one, computes the epilogue).

    Raises ValueError as :func:`decomposition_plan`, or for ``overlap < 0``.
    """
    plan = decomposition_plan(tiles, k_tiles, grid, cluster_size, mode, splits, sm_count=sm_count,
                              max_groups_problem=max_groups_problem)
    return _units_of_plan(plan, drop_remainder=drop_remainder, overlap=overlap, no_end_adjust=no_end_adjust,
                          epilogue_on_first=epilogue_on_first)


def _units_of_plan(plan: DecompositionPlan, *, drop_remainder: bool = False, overlap: int = 0,
                   no_end_adjust: bool = False, epilogue_on_first: bool = False) -> list[list[WorkUnit]]:
    """:func:`work_units` for a computed plan (the persistent loop of every CTA)."""
    if overlap < 0:
        raise ValueError(f"overlap must be >= 0, got {overlap}")
    out: list[list[WorkUnit]] = []
    for cta in range(plan.grid):
        pieces: list[WorkUnit] = []
        for u in range(cta, plan.units, plan.grid):
            got = _unit_pieces(plan, cta, u, drop_remainder, overlap, no_end_adjust, epilogue_on_first)
            if not got:
                break
            pieces.extend(got)
        out.append(pieces)
    return out


# ---------------------------------------------------------------------------------------------
# C. division checks
# ---------------------------------------------------------------------------------------------


def _owners(units_by_cta: Sequence[Sequence[WorkUnit]], tile: int, k: int) -> list[WorkUnit]:
    return [p for ps in units_by_cta for p in ps if p.tile == tile and p.k_begin <= k < p.k_end]


def check_units(units_by_cta: Sequence[Sequence[WorkUnit]], tiles: int, k_tiles: int, *,
                reduction: str = "deterministic", params: dict[str, Any] | None = None,
                fixup_mistake: str = "") -> Problem | None:
    """Check a division (``units_by_cta[cta]`` = pieces in execution order, as from :func:`work_units`).

    Checked, in order (each failure is reported at its smallest tile, then k-tile):

    1. every piece has ``0 <= tile < tiles`` and ``0 <= k_begin < k_end <= k_tiles`` (``malformed_unit``);
    2. every ``(tile, k)`` in ``[0, tiles) x [0, k_tiles)`` is computed exactly once
       (``k_tile_missed`` / ``k_tile_repeated``, naming the CTAs);
    3. every tile has exactly one piece with ``stores_output`` (``no_store`` / ``multiple_stores``);
    4. the fixup of ``fixup_helper`` (``sm90_tile_scheduler_stream_k.hpp``), simulated with all CTAs
       resident: a whole-tile piece needs no fixup; a partial with ``k_begin == 0`` stores to the
       workspace, a later partial waits ``lock == k_begin`` (Deterministic; Nondeterministic:
       ``lock >= 1``) and adds; every partial then adds its k-tile count to the lock; the storing piece
       waits ``lock == k_begin`` and adds the workspace to its accumulators. Fails with ``deadlock``
       (no CTA can proceed), ``double_reduction`` or ``incomplete_store`` (the epilogue would write a
       sum lacking some k-tile). In Deterministic mode the finalizing piece thus adds every other
       partial of its tile exactly once, in increasing k order.

    ``fixup_mistake`` (mutation knob, "" in a correct kernel) plants a wrong wait in the nondeterministic fixup:
    ``nd_middle_no_wait`` (a middle partial adds before the first one has stored: the store then overwrites it) or
    ``nd_final_waits_first`` (the storing piece waits only for the first partial).

    Returns None or a :class:`Problem`. Raises ValueError for an unknown ``reduction`` or non-positive sizes.
    """
    _positive("tiles", tiles)
    _choice("fixup_mistake", fixup_mistake, FIXUP_MISTAKES)
    _positive("k_tiles", k_tiles)
    _choice("reduction", reduction, REDUCTIONS)
    params = dict(params or {})
    full = (1 << k_tiles) - 1
    for ps in units_by_cta:
        for p in ps:
            if not (0 <= p.tile < tiles and 0 <= p.k_begin < p.k_end <= k_tiles):
                return Problem("division", "malformed_unit",
                               f"CTA {p.cta} unit {p.unit}: tile {p.tile}, k [{p.k_begin}, {p.k_end}) is not a "
                               f"non-empty k range of one of {tiles} tiles x {k_tiles} k-tiles", params,
                               tile=p.tile, k_tile=p.k_begin, ctas=(p.cta,), units=(p.unit,))
    cover = [0] * tiles
    twice = [0] * tiles
    stores = [0] * tiles
    for ps in units_by_cta:
        for p in ps:
            m = ((1 << p.k_end) - 1) ^ ((1 << p.k_begin) - 1)
            twice[p.tile] |= cover[p.tile] & m
            cover[p.tile] |= m
            stores[p.tile] += p.stores_output
    for t in range(tiles):
        bad = twice[t] | (full & ~cover[t])
        if bad:
            k = (bad & -bad).bit_length() - 1
            own = _owners(units_by_cta, t, k)
            ctas = tuple(p.cta for p in own)
            us = tuple(p.unit for p in own)
            if not own:
                return Problem("division", "k_tile_missed",
                               f"tile {t} k-tile {k} is computed by no CTA (k-tiles of each tile must be summed "
                               "exactly once)", params, tile=t, k_tile=k)
            ranges = ", ".join(f"CTA {p.cta} unit {p.unit} k [{p.k_begin}, {p.k_end})" for p in own)
            return Problem("division", "k_tile_repeated",
                           f"tile {t} k-tile {k} is computed {len(own)} times: {ranges}", params, tile=t,
                           k_tile=k, ctas=ctas, units=us)
    for t in range(tiles):
        if stores[t] != 1:
            own = [p for ps in units_by_cta for p in ps if p.tile == t and (p.stores_output or not stores[t])]
            kind = "no_store" if stores[t] == 0 else "multiple_stores"
            what = "no piece writes D" if stores[t] == 0 else f"{stores[t]} pieces write D"
            return Problem("division", kind,
                           f"tile {t}: {what} (pieces: " + ", ".join(
                               f"CTA {p.cta} k [{p.k_begin}, {p.k_end})" for p in own) + ")",
                           params, tile=t, ctas=tuple(p.cta for p in own), units=tuple(p.unit for p in own))
    # Deterministic: the lock sequence is forced, one schedule decides. Nondeterministic: the order in which the
    # partials pass their waits is free; the forward schedule lets the first piece of a tile run first, the reverse
    # one lets later pieces try first (a middle partial that does not wait for the first one's store, or a final
    # piece that waits for too little, shows only there)
    orders = ("forward", "reverse") if reduction == "nondeterministic" else ("forward",)
    for order in orders:
        p = _simulate_fixup(units_by_cta, tiles, k_tiles, reduction, params, order, fixup_mistake)
        if p is not None:
            return p
    return None


def _simulate_fixup(units_by_cta: Sequence[Sequence[WorkUnit]], tiles: int, k_tiles: int, reduction: str,
                    params: dict[str, Any], order: str = "forward", mistake: str = "") -> Problem | None:
    """Step 4 of :func:`check_units` (k-tile sets as bit masks), every CTA resident, each round visiting the CTAs
    in ``order`` (``forward``: CTA 0 first; ``reverse``: the last CTA first)."""
    full = (1 << k_tiles) - 1
    lock = [0] * tiles
    workspace = [0] * tiles
    at = [0] * len(units_by_cta)
    left = sum(len(ps) for ps in units_by_cta)
    ctas = list(enumerate(units_by_cta))
    if order == "reverse":
        ctas.reverse()
    while left:
        moved = False
        for c, ps in ctas:
            while at[c] < len(ps):
                p = ps[at[c]]
                t, kb, ke = p.tile, p.k_begin, p.k_end
                own = ((1 << ke) - 1) ^ ((1 << kb) - 1)
                whole = kb == 0 and ke == k_tiles                  # requires_fixup is false
                if not whole:
                    if p.stores_output or kb != 0:
                        if p.stores_output:                        # wait_eq(lock, K_idx), both modes
                            ready = lock[t] >= 1 if mistake == "nd_final_waits_first" else lock[t] == kb
                        elif reduction == "deterministic":         # wait_eq(lock, K_idx)
                            ready = lock[t] == kb
                        else:                                      # wait_lt(lock, 1): the first has stored
                            ready = mistake == "nd_middle_no_wait" or lock[t] >= 1
                        if not ready:
                            break
                    if p.stores_output:
                        if own & workspace[t]:
                            return _double(p, own & workspace[t], params)
                        total = own | workspace[t]
                        if total != full:
                            miss = full & ~total
                            k = (miss & -miss).bit_length() - 1
                            late = _owners(units_by_cta, t, k)
                            return Problem(
                                "division", "incomplete_store",
                                f"CTA {p.cta} writes D tile {t} from k-tiles {_ranges(total)} only: k-tile {k} "
                                f"(CTA {[q.cta for q in late]}) is not yet reduced", params, tile=t, k_tile=k,
                                ctas=(p.cta,) + tuple(q.cta for q in late),
                                units=(p.unit,) + tuple(q.unit for q in late))
                    else:
                        if kb == 0:
                            workspace[t] = own                      # BlockStripedReduce::store
                        else:
                            if own & workspace[t]:
                                return _double(p, own & workspace[t], params)
                            workspace[t] |= own                     # BlockStripedReduce::reduce
                        lock[t] += ke - kb                          # arrive_inc(k_tile_count)
                at[c] += 1
                left -= 1
                moved = True
        if not moved:
            stuck = [(c, ps[at[c]]) for c, ps in enumerate(units_by_cta) if at[c] < len(ps)]
            c, p = stuck[0]
            def wait(q: WorkUnit) -> str:
                return ("lock >= 1" if reduction == "nondeterministic" and not q.stores_output
                        else f"lock == {q.k_begin}")
            desc = "; ".join(f"CTA {c2} at tile {q.tile} k [{q.k_begin}, {q.k_end}) waits {wait(q)}, "
                             f"lock is {lock[q.tile]}" for c2, q in stuck[:4])
            return Problem("division", "deadlock", f"no CTA can proceed: {desc}", params, tile=p.tile,
                           k_tile=p.k_begin, ctas=tuple(c2 for c2, _ in stuck), units=tuple(q.unit for _, q in stuck))
    return None


def _double(p: WorkUnit, both: int, params: dict[str, Any]) -> Problem:
    k = (both & -both).bit_length() - 1
    return Problem("division", "double_reduction",
                   f"CTA {p.cta} adds k-tile {k} of tile {p.tile} to a workspace that already holds it", params,
                   tile=p.tile, k_tile=k, ctas=(p.cta,), units=(p.unit,))


def _ranges(mask: int) -> str:
    out, k = [], 0
    while mask >> k:
        if (mask >> k) & 1:
            j = k
            while (mask >> j) & 1:
                j += 1
            out.append(f"[{k}, {j})")
            k = j
        else:
            k += 1
    return " ".join(out) or "{}"


def check_division(tiles: int, k_tiles: int, grid: int, cluster_size: int = 1, mode: str = "stream_k",
                   splits: int = 1, *, reduction: str = "deterministic", sm_count: int | None = None,
                   max_groups_problem: int | None = None, **knobs: Any) -> Problem | None:
    """:func:`work_units` then :func:`check_units`; the problem's ``params`` hold every argument (and the
    resolved plan's mode, splits, sk_tiles, sk_units, groups).

    ``knobs`` are the mutation keywords of :func:`work_units`. Raises ValueError as :func:`work_units`
    and :func:`check_units`.
    """
    plan = decomposition_plan(tiles, k_tiles, grid, cluster_size, mode, splits, sm_count=sm_count,
                              max_groups_problem=max_groups_problem)
    fixup_mistake = knobs.pop("fixup_mistake", "")
    units = _units_of_plan(plan, **knobs)
    params: dict[str, Any] = {"tiles": tiles, "k_tiles": k_tiles, "grid": grid, "cluster_size": cluster_size,
                              "mode": mode, "splits": splits, "reduction": reduction}
    if sm_count is not None:
        params["sm_count"] = sm_count
    if max_groups_problem is not None:
        params["max_groups_problem"] = max_groups_problem
    params.update({k: v for k, v in {**knobs, "fixup_mistake": fixup_mistake}.items() if v})
    params["plan"] = {"mode": plan.mode, "splits": plan.splits, "sk_tiles": plan.sk_tiles,
                      "sk_units": plan.sk_units, "groups": plan.groups}
    return check_units(units, tiles, k_tiles, reduction=reduction, params=params, fixup_mistake=fixup_mistake)


def enumerate_division(mode: str, max_tiles: int = 12, max_k_tiles: int | None = None, max_grid: int | None = None,
                       splits: int | Iterable[int] | None = None, *, cluster_sizes: Iterable[int] = (1, 2),
                       max_groups_problem: Iterable[int] = (1, 8), reduction: str = "deterministic",
                       **knobs: Any) -> tuple[int, Problem | None]:
    """Run :func:`check_division` for every ``cluster_size``, ``tiles <= max_tiles``, ``k_tiles <= max_k_tiles``,
    ``grid <= max_grid`` (multiples of the cluster size), split count and ``max_groups_problem``, in that
    nesting order, smallest first; stop at the first problem.

    Defaults per mode (each run stays near 0.25 s on one core): ``split_k``: ``max_k_tiles`` 16,
    ``max_grid`` 6, ``splits`` 2..4; ``stream_k``: 32, 8, 1; ``heuristic``: 24, 6, 1 and 2;
    ``data_parallel``: 16, 6, 1. ``splits`` may be an int or an iterable.
    For split-K and data-parallel, ``max_groups_problem`` is irrelevant and not iterated; for stream-K, ``k_tiles <= 8`` gives no stream-K work (data-parallel) and is still counted.

    Returns ``(cases_checked, first_problem_or_None)``. Raises ValueError for bad bounds or as
    :func:`check_division`.
    """
    _choice("mode", mode, MODES)
    deep = mode in ("stream_k", "heuristic")
    max_k_tiles = max_k_tiles if max_k_tiles is not None else (32 if mode == "stream_k" else 24 if deep else 16)
    max_grid = max_grid if max_grid is not None else (8 if mode == "stream_k" else 6)
    _positive("max_tiles", max_tiles)
    _positive("max_k_tiles", max_k_tiles)
    _positive("max_grid", max_grid)
    if splits is None:
        split_list = {"split_k": [2, 3, 4], "heuristic": [1, 2]}.get(mode, [1])
    elif isinstance(splits, int):
        split_list = [splits]
    else:
        split_list = list(splits)
    mgps: list[int | None] = list(max_groups_problem) if deep else [None]
    cases = 0
    for cs in cluster_sizes:
        for tiles in range(cs, max_tiles + 1, cs):
            for k in range(1, max_k_tiles + 1):
                for grid in range(cs, max_grid + 1, cs):
                    for s in split_list:
                        for mgp in mgps:
                            cases += 1
                            p = check_division(tiles, k, grid, cs, mode, s, reduction=reduction,
                                               max_groups_problem=mgp, **knobs)
                            if p is not None:
                                return cases, p
    return cases, None


# ---------------------------------------------------------------------------------------------
# D. the MoE grouped walk (ours: templates/moe/work.j2, TileSchedule decomposition "grouped")
# ---------------------------------------------------------------------------------------------


class GroupedWalk(NamedTuple):
    """The fields of a grouped :class:`~argus_cutlass.dsl.ir.TileSchedule` that its walk reads
    (:meth:`of` takes them from the node): ``band_m`` 0 is the unbanded walk, ``band_m`` >= 1 the
    banded one; ``band_start_delta`` / ``band_full_rows`` / ``band_swap`` are the mistakes the node
    can state (0 / False / False in a correct kernel)."""

    band_m: int = 0
    raster: str = "along_m"
    band_start_delta: int = 0
    band_full_rows: bool = False
    band_swap: bool = False

    @classmethod
    def of(cls, schedule: Any) -> GroupedWalk:
        """The walk of a schedule node (any object with the fields)."""
        return cls(schedule.band_m, schedule.raster, schedule.band_start_delta, schedule.band_full_rows,
                   schedule.band_swap)

    @property
    def correct_form(self) -> bool:
        """No mistake field is set (the form :func:`grouped_walk_all_sizes` argues about)."""
        return not (self.band_start_delta or self.band_full_rows or self.band_swap)

    def describe(self) -> str:
        if not self.band_m:
            return f"unbanded {self.raster} walk"
        extra = [f"band start {self.band_start_delta:+d}"] if self.band_start_delta else []
        extra += ["rows = band_m in every band"] if self.band_full_rows else []
        extra += ["m-tile / n-block swapped (local / rows, local % rows)"] if self.band_swap else []
        return f"bands of {self.band_m} m-tiles" + (f" ({', '.join(extra)})" if extra else "")


def grouped_tile_of_unit(unit: int | np.ndarray, tiles_m: int, tiles_n: int,
                         walk: GroupedWalk = GroupedWalk()) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(tm, tn, rows)`` of each unit under the printed grouped walk (``templates/moe/work.j2``
    ``Scheduler::current``; C++ ``/`` and ``%`` on non-negative ints), int64 arrays shaped like
    ``unit``. ``rows`` is the unit's band height (``tiles_m`` for the unbanded walk); where it is
    < 1 the kernel divides by it (no tile: ``tm = tn = -1``).

    >>> [tuple(int(v) for v in x) for x in grouped_tile_of_unit(np.arange(6), 3, 2, GroupedWalk(2))[:2]]
    [(0, 1, 0, 1, 2, 2), (0, 0, 1, 1, 0, 1)]
    """
    u = np.asarray(unit, dtype=np.int64)
    if not walk.band_m:
        if walk.raster == "along_n":
            div = max(tiles_n, 1)
            return u // div, u % div, np.full_like(u, tiles_m)
        div = max(tiles_m, 1)
        return u % div, u // div, np.full_like(u, tiles_m)
    span = walk.band_m * tiles_n
    band = u // span
    local = u - band * span
    first = band * walk.band_m + walk.band_start_delta
    rows = np.full_like(u, walk.band_m) if walk.band_full_rows else np.minimum(walk.band_m, tiles_m - first)
    ok = rows >= 1
    r = np.where(ok, rows, 1)
    q, m = local // r, local % r
    tm = np.where(ok, first + (q if walk.band_swap else m), -1)
    tn = np.where(ok, m if walk.band_swap else q, -1)
    return tm, tn, rows


def check_grouped_walk(tiles_m: int, tiles_n: int, walk: GroupedWalk = GroupedWalk()) -> Problem | None:
    """The grouped walk of ``walk`` over ``units = tiles_m * tiles_n`` is a bijection onto
    ``[0, tiles_m) x [0, tiles_n)``, checked unit by unit. Problems, first found first: ``band_rows``
    (a unit's band has ``rows < 1``: the kernel divides by zero), ``tile_outside`` (a unit's tile is
    outside the grid: its expert is read past ``tiles_m``, or an n-block past N), ``tile_missed`` /
    ``tile_repeated`` (smallest tile in row-major order). Each names the unit(s), the band and the tile.
    """
    params: dict[str, Any] = {"tiles_m": tiles_m, "tiles_n": tiles_n, "band_m": walk.band_m,
                              "band_start_delta": walk.band_start_delta}
    units = np.arange(tiles_m * tiles_n, dtype=np.int64)
    if not units.size:
        return None
    tm, tn, rows = grouped_tile_of_unit(units, tiles_m, tiles_n, walk)
    where = f"{tiles_m}x{tiles_n} tiles, {walk.describe()}"
    span = max(1, walk.band_m * tiles_n)

    def band_of(u: int) -> str:
        if not walk.band_m:
            return ""
        b = u // span
        return f" (band {b}: local {u - b * span}, rows {int(rows[u])})"

    low = np.flatnonzero(rows < 1)
    if low.size:
        u = int(low[0])
        return Problem("walk", "band_rows", f"unit {u}{band_of(u)}: the band height rows = {int(rows[u])} < 1, so "
                       f"local % rows divides by {'zero' if rows[u] == 0 else 'a negative'} ({where})",
                       {**params, "unit": u, "rows": int(rows[u])}, tile=(-1, -1), units=(u,))
    out = np.flatnonzero((tm < 0) | (tm >= tiles_m) | (tn < 0) | (tn >= tiles_n))
    if out.size:
        u = int(out[0])
        tile = (int(tm[u]), int(tn[u]))
        return Problem("walk", "tile_outside", f"unit {u}{band_of(u)} -> tile (m-tile {tile[0]}, n-block {tile[1]}), "
                       f"outside the {tiles_m} x {tiles_n} tile grid ({where})", {**params, "unit": u},
                       tile=tile, units=(u,))
    counts = np.bincount(tm * tiles_n + tn, minlength=tiles_m * tiles_n)
    bad = np.flatnonzero(counts != 1)
    if bad.size:
        t = int(bad[0])
        tile = (t // tiles_n, t % tiles_n)
        hit = tuple(int(x) for x in units[(tm == tile[0]) & (tn == tile[1])])
        if not hit:
            return Problem("walk", "tile_missed", f"tile (m-tile {tile[0]}, n-block {tile[1]}) is the tile of no unit "
                           f"({where}): never computed", params, tile=tile)
        return Problem("walk", "tile_repeated", f"tile (m-tile {tile[0]}, n-block {tile[1]}) is the tile of units "
                       f"{list(hit)}{band_of(hit[0])} ({where}): computed and stored {len(hit)} times", params,
                       tile=tile, units=hit)
    return None


def grouped_walk_bound(walk: GroupedWalk, max_tiles: int = 12) -> int:
    """The largest ``tiles_m`` :func:`enumerate_grouped_walk` checks: every band shape (full bands,
    each partial last band, ``tiles_m < band_m``, ``tiles_m = 0``) and two full bands before a
    partial one, at least ``max_tiles``."""
    return max(max_tiles, 2 * walk.band_m + 2)


def enumerate_grouped_walk(walk: GroupedWalk, max_tiles: int = 12) -> tuple[int, int, Problem | None]:
    """:func:`check_grouped_walk` on every ``tiles_m`` in ``[0, grouped_walk_bound]`` and ``tiles_n``
    in ``[1, max_tiles]`` (increasing, so the first problem is a smallest one): ``(grids, units
    checked, first problem)``."""
    grids = points = 0
    for tiles_m in range(grouped_walk_bound(walk, max_tiles) + 1):
        for tiles_n in range(1, max_tiles + 1):
            p = check_grouped_walk(tiles_m, tiles_n, walk)
            if p is not None:
                return grids, points, p
            grids += 1
            points += tiles_m * tiles_n
    return grids, points, None


def role_loop_units(first: int, stride: int, step: int, units: int, lookahead: int) -> tuple[list[int], list[int]]:
    """The units one role's printed loop runs and the units whose work it reads, in order
    (``templates/gemm/mainloop.j2`` ``producer_mainloop``: ``stride`` 1, ``lookahead`` the schedule
    node's; ``templates/gemm/kernel_body.j2`` consumer loop: ``stride`` = ``consumer_stride``,
    ``lookahead`` 0). The role starts at unit ``first`` and advances
    by ``stride * step``; ``Scheduler::current`` (``templates/moe/work.j2``) reads unit ``u``'s work
    (the m-tile's expert, from device memory) only when ``u < units``. ``lookahead`` 1 is the
    printed form ``Work next = current(); for (w = next; w.valid; w = next) { advance; next =
    current(); ... }``: unit ``u + stride * step``'s work is read before unit ``u`` runs.

    >>> role_loop_units(1, 1, 4, 10, 1)
    ([1, 5, 9], [1, 5, 9])
    """
    runs: list[int] = []
    reads: list[int] = []

    def current(u: int) -> int | None:
        if u < units:
            reads.append(u)
            return u
        return None

    u = first
    if lookahead:
        nxt = current(u)
        w = nxt
        while w is not None:
            u += stride * step
            nxt = current(u)
            runs.append(w)
            w = nxt
    else:
        w = current(u)
        while w is not None:
            runs.append(w)
            u += stride * step
            w = current(u)
    return runs, reads


def grouped_walk_all_sizes(walk: GroupedWalk) -> str | None:
    """The argument that the grouped walk is a bijection for every ``tiles_m >= 0`` and ``tiles_n >=
    1`` (text), or None when ``walk`` states a mistake (then only the enumeration speaks)."""
    if not walk.correct_form:
        return None
    if not walk.band_m:
        return ("unbanded walk: tiles_m = 0 has no unit; otherwise (u mod tiles_m, u div tiles_m) is Euclidean "
                "division of u in [0, tiles_m tiles_n) by tiles_m: a bijection onto [0, tiles_m) x [0, tiles_n)")
    b = walk.band_m
    return (f"bands of B = {b}: write tiles_m = q B + r (0 <= r < B). Band j < q holds units [j B tiles_n, "
            f"(j+1) B tiles_n) with local in [0, B tiles_n) and rows = min(B, tiles_m - j B) = B, so (local mod B, "
            "local div B) is Euclidean division: a bijection onto [0, B) x [0, tiles_n), placed at m-tiles "
            "[j B, (j+1) B); when r > 0 the last band j = q holds units [q B tiles_n, tiles_m tiles_n), local in "
            "[0, r tiles_n), rows = r: Euclidean division by r onto m-tiles [q B, tiles_m) x [0, tiles_n). The "
            "bands' unit ranges partition [0, tiles_m tiles_n) and their m-tile ranges partition [0, tiles_m), "
            "so the walk is a bijection for every tiles_m >= 0 (0: no unit) and tiles_n >= 1")
