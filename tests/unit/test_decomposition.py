"""G4 scheduler decomposition (argus_cutlass.verify.decomposition): the CUTLASS SM90 walk order and the
split-K / stream-K unit division, pinned against values traced by hand through the C++ of the
nvidia-cutlass 4.2 headers, plus bijectivity / exact-division enumerations and the mutation knobs."""

from __future__ import annotations

import time

import numpy as np
import pytest

from argus_cutlass.verify.decomposition import (
    WorkUnit,
    check_division,
    check_units,
    check_walk,
    cutlass_tile_of_unit,
    cutlass_unit_of_tile,
    decomposition_plan,
    enumerate_division,
    enumerate_walk,
    log_swizzle_size,
    walk_geometry,
    work_units,
)


def _tiles(w) -> list[tuple[int, int]]:
    return list(zip(w.tm.tolist(), w.tn.tolist()))


def _ranges(units) -> list[list[tuple[int, int, int, bool]]]:
    return [[(p.tile, p.k_begin, p.k_end, p.stores_output) for p in ps] for ps in units]


# ---------------------------------------------------------------------------------------------
# walk order (sm90_tile_scheduler.hpp, static_tile_scheduler.hpp, tile_scheduler_params.h)
# ---------------------------------------------------------------------------------------------


def test_walk_is_bijective_on_all_small_grids():
    cases, problem = enumerate_walk(max_tiles=12)
    assert problem is None
    assert cases == 12 * 12 * 3 * 2 * 4          # grids x clusters {1x1, 2x1, 1x2} x rasters x swizzles


def test_walk_along_n_swizzle_2_hand_traced():
    # get_log_swizzle_size(4, 4, 2) = 1 (S = 2); AlongN: major = cluster_n = 1, minor = cluster_m = 1,
    # divmod_cluster_blk_major_ = 4. get_work_idx_m_and_n: offset = id & 1, extra = id >> 1,
    # (panel, n) = divmod(extra, 4), m = 2 * panel + offset.
    w = cutlass_tile_of_unit(np.arange(8), 4, 4, 1, 1, "along_n", 2)
    assert _tiles(w) == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2), (0, 3), (1, 3)]
    assert w.valid.all() and w.units == 16
    w = cutlass_tile_of_unit(np.arange(8, 12), 4, 4, 1, 1, "along_n", 2)
    assert _tiles(w) == [(2, 0), (3, 0), (2, 1), (3, 1)]      # extra = 4: second panel of two M rows


def test_walk_along_m_cluster_2x1_pads_m_hand_traced():
    # get_tiled_cta_shape_mnl rounds M = 3 up to 4 (cluster_m 2); swizzle 1; AlongM: major = cluster_m = 2,
    # minor = cluster_n = 1, clusters along M = 4 / 2 = 2: (id, m_off) = divmod(u, 2), (n, cm) = divmod(id, 2).
    w = cutlass_tile_of_unit(np.arange(8), 3, 5, 2, 1, "along_m", 1)
    assert _tiles(w) == [(0, 0), (1, 0), (2, 0), (3, 0), (0, 1), (1, 1), (2, 1), (3, 1)]
    assert w.valid.tolist() == [True, True, True, False, True, True, True, False]   # m = 3 is padding
    assert w.units == 4 * 5


def test_walk_cluster_1x2_swizzle_2_hand_traced():
    # log swizzle 1; blocks_n = round_up(4, 2 * 2) = 4; AlongN: major = cluster_n = 2, minor = 1, clusters
    # along N = 2. (id, n_off) = divmod(u, 2); offset = id & 1; (panel, cn) = divmod(id >> 1, 2).
    w = cutlass_tile_of_unit(np.arange(9), 4, 4, 1, 2, "along_n", 2)
    assert _tiles(w) == [(0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 0)]


def test_swizzle_clamp_and_padding_hand_traced():
    # 5 x 7 tiles, max_swizzle 8: min(5, 7) = 5 < 6 -> log 2 (S = 4); both modes rounded up to 8
    assert walk_geometry(5, 7, 1, 1, "along_n", 8) == (8, 8, 2, "along_n", 64)
    w = cutlass_tile_of_unit(np.arange(28, 36), 5, 7, 1, 1, "along_n", 8)
    assert _tiles(w) == [(0, 7), (1, 7), (2, 7), (3, 7), (4, 0), (5, 0), (6, 0), (7, 0)]
    assert w.valid.tolist() == [False] * 4 + [True, False, False, False]
    # 3 x 3 tiles, swizzle 2: padded to 4 x 4, 7 of 16 units write nothing
    w = cutlass_tile_of_unit(np.arange(16), 3, 3, 1, 1, "along_n", 2)
    assert w.valid.astype(int).tolist() == [1, 1, 1, 1, 1, 1, 0, 0, 1, 0, 1, 0, 1, 0, 0, 0]
    # past blocks_per_problem_: invalid_work_tile
    w = cutlass_tile_of_unit(16, 3, 3, 1, 1, "along_n", 2)
    assert (int(w.tm), int(w.tn), bool(w.valid)) == (-1, -1, False)


@pytest.mark.parametrize("m, n, max_swizzle, log", [
    (5, 5, 8, 2), (6, 6, 8, 3), (6, 9, 4, 2), (2, 9, 8, 1), (1, 9, 8, 0), (6, 6, 2, 1), (9, 9, 1, 0),
])
def test_log_swizzle_size(m, n, max_swizzle, log):
    assert log_swizzle_size(m, n, max_swizzle) == log


def test_raster_heuristic():
    # get_rasterization_order on the padded grid: AlongM iff tiles_n > tiles_m
    assert walk_geometry(2, 5, raster="heuristic").raster == "along_m"
    assert walk_geometry(5, 2, raster="heuristic").raster == "along_n"
    assert walk_geometry(4, 4, raster="heuristic").raster == "along_n"
    assert walk_geometry(3, 4, raster="heuristic", max_swizzle=4).raster == "along_n"   # both padded to 4


def test_inverse_walk_round_trips():
    for args in [(4, 4, 1, 1, "along_n", 2), (3, 5, 2, 1, "along_m", 1), (7, 9, 1, 2, "along_n", 8)]:
        w = cutlass_tile_of_unit(np.arange(walk_geometry(*args).units), *args)
        assert (cutlass_unit_of_tile(w.tm, w.tn, *args) == np.arange(w.units)).all()
    assert int(cutlass_unit_of_tile(1, 3, 4, 4, 1, 1, "along_n", 2)) == 7


def test_swizzle_off_by_one_is_caught():
    p = check_walk(4, 4, 1, 1, "along_n", 2, swizzle_off_by_one=True)
    assert p is not None and p.kind == "tile_repeated" and p.tile == (0, 0) and p.units == (0, 1)
    _, p = enumerate_walk(swizzle_off_by_one=True)
    assert p is not None and p.kind == "tile_missed" and p.tile == (0, 1)
    assert p.params == {"tiles_m": 1, "tiles_n": 2, "cluster_m": 1, "cluster_n": 1, "raster": "along_m",
                        "max_swizzle": 1, "swizzle_off_by_one": True}


# ---------------------------------------------------------------------------------------------
# split-K (sm90_tile_scheduler_stream_k.hpp, tile_scheduler_params.h)
# ---------------------------------------------------------------------------------------------


def test_split_k_10_by_3_hand_traced():
    # set_params_basic: big_units_ = 10 % 3 = 1, divmod_k_tiles_per_sk_unit_ = 10 / 3 = 3.
    # get_current_work_iter_start_possible_update_work_tile_k_remaining, split-K branch:
    #   (split, tile) = divmod(u, tiles)  [divmod_clusters_mnl_, cluster 1]
    #   unit_iter_start = 10 * tile + 3 * split, then + split and one more k-tile if split < big_units_,
    #   else + big_units_  ->  split 0: [0, 4), split 1: [4, 7), split 2: [7, 10).
    # update_output_tile_id_and_work_tile_k: K_idx = start - 10 * tile; compute_epilogue: K_idx + count == 10.
    units = work_units(2, 10, 4, 1, "split_k", 3)
    assert _ranges(units) == [
        [(0, 0, 4, False), (0, 7, 10, True)],      # CTA 0: units 0 and 4
        [(1, 0, 4, False), (1, 7, 10, True)],      # CTA 1: units 1 and 5
        [(0, 4, 7, False)],                        # CTA 2: unit 2
        [(1, 4, 7, False)],                        # CTA 3: unit 3
    ]
    assert [p.unit for p in units[0]] == [0, 4]
    assert check_units(units, 2, 10) is None


def test_split_k_cluster_2_and_clamp():
    # cluster 2: the two CTAs of a cluster take tiles 2c and 2c + 1 with the same k range
    assert _ranges(work_units(4, 5, 4, 2, "split_k", 2)) == [
        [(0, 0, 3, False), (0, 3, 5, True)], [(1, 0, 3, False), (1, 3, 5, True)],
        [(2, 0, 3, False), (2, 3, 5, True)], [(3, 0, 3, False), (3, 3, 5, True)]]
    # adjust_split_count: splits <= k_tiles and <= sm_count
    assert decomposition_plan(3, 2, 8, 1, "split_k", 4).splits == 2
    assert decomposition_plan(3, 20, 8, 1, "split_k", 4, sm_count=3).splits == 3
    assert decomposition_plan(3, 20, 8, 1, "split_k", 1).mode == "data_parallel"


def test_split_k_division_exact_for_small_sizes():
    assert enumerate_division("split_k") == (4320, None)
    assert enumerate_division("split_k", reduction="nondeterministic") == (4320, None)


def test_split_k_drop_remainder_is_caught():
    _, p = enumerate_division("split_k", drop_remainder=True)
    assert p is not None and p.kind == "k_tile_missed"
    assert (p.tile, p.k_tile) == (0, 2)
    assert (p.params["tiles"], p.params["k_tiles"], p.params["grid"], p.params["splits"]) == (1, 3, 2, 2)
    p = check_division(2, 10, 4, 1, "split_k", 3, drop_remainder=True)
    assert p is not None and p.kind == "k_tile_missed" and (p.tile, p.k_tile) == (0, 9)


def test_split_k_overlap_and_epilogue_on_first_are_caught():
    _, p = enumerate_division("split_k", overlap=1)
    assert p is not None and p.kind == "k_tile_repeated" and (p.tile, p.k_tile, p.ctas) == (0, 1, (0, 1))
    _, p = enumerate_division("split_k", epilogue_on_first=True)
    assert p is not None and p.kind == "incomplete_store" and (p.tile, p.k_tile) == (0, 1)
    assert p.ctas == (0, 1)


# ---------------------------------------------------------------------------------------------
# stream-K
# ---------------------------------------------------------------------------------------------


def test_stream_k_with_data_parallel_tiles_hand_traced():
    # 9 tiles, 20 k-tiles, grid 4, one group. get_num_sk_tiles: full_waves 2 -> 1 dp wave (4 tiles),
    # sk_tiles = 5; get_num_sk_units = min(4, 100 // 8) = 4. Group k space 100, 25 per unit, no big units.
    # Starts 0, 25, 50, 75 -> min-iters shifts (start % 20 < 8: back to the tile start; > 12: on to the next
    # tile; the same for ends) -> [0, 20), [20, 50), [50, 80), [80, 100), each walked backwards.
    # Data-parallel units 4..7 are tiles 5..8.
    plan = decomposition_plan(9, 20, 4, max_groups_problem=1)
    assert (plan.mode, plan.sk_tiles, plan.sk_units, plan.dp_units, plan.groups, plan.units) == (
        "stream_k", 5, 4, 4, 1, 8)
    assert _ranges(work_units(9, 20, 4, max_groups_problem=1)) == [
        [(0, 0, 20, True), (5, 0, 20, True)],
        [(2, 0, 10, False), (1, 0, 20, True), (6, 0, 20, True)],
        [(3, 0, 20, True), (2, 10, 20, True), (7, 0, 20, True)],
        [(4, 0, 20, True), (8, 0, 20, True)],
    ]
    assert check_division(9, 20, 4, max_groups_problem=1) is None


def test_stream_k_empty_unit_ends_cta_hand_traced():
    # 2 tiles x 12 k-tiles over 3 units of 8: unit 1 starts at 8 (> 12 - 8: moves to 12) and ends at 16
    # (16 % 12 = 4 < 8: back to 12) -> 0 k-tiles, is_valid() is false and CTA 1 leaves its loop.
    assert _ranges(work_units(2, 12, 3, max_groups_problem=1)) == [[(0, 0, 12, True)], [], [(1, 0, 12, True)]]


def test_stream_k_groups_and_heuristic_hand_traced():
    # 5 tiles, 16 k-tiles, grid 4 (Heuristic: tail 1 < 4 / 2 -> stream-K). calculate_groups: 4 groups
    # (4 units divisible, 5 cluster tiles not: fallback), big_groups = 5 % 4 = 1: group 0 owns tiles 0 and 4.
    plan = decomposition_plan(5, 16, 4, mode="heuristic")
    assert (plan.mode, plan.sk_tiles, plan.sk_units, plan.groups, plan.big_groups) == ("stream_k", 5, 4, 4, 1)
    assert _ranges(work_units(5, 16, 4, mode="heuristic")) == [
        [(4, 0, 16, True), (0, 0, 16, True)], [(1, 0, 16, True)], [(2, 0, 16, True)], [(3, 0, 16, True)]]
    # Heuristic: 1 stream-K tile, 2 units (16 // 8), 2 % 1 == 0 -> split-K with 2 splits
    plan = decomposition_plan(1, 16, 4, mode="heuristic")
    assert (plan.mode, plan.splits, plan.units) == ("split_k", 2, 2)
    # Heuristic: tail wave at least half full -> data-parallel
    assert decomposition_plan(7, 16, 4, mode="heuristic").mode == "data_parallel"
    # StreamK with k_tiles <= 8 or no wave quantization -> data-parallel
    assert decomposition_plan(3, 8, 2).mode == "data_parallel"
    assert decomposition_plan(4, 20, 2).mode == "data_parallel"


@pytest.mark.parametrize("mode, cases", [("stream_k", 7680), ("heuristic", 8640), ("data_parallel", 1440)])
def test_division_exact_for_small_sizes(mode, cases):
    t0 = time.perf_counter()
    assert enumerate_division(mode) == (cases, None)
    assert time.perf_counter() - t0 < 3.0          # ~0.15-0.25 s on one core; generous for CI
    assert enumerate_division(mode, reduction="nondeterministic") == (cases, None)


def test_stream_k_overlap_is_caught():
    _, p = enumerate_division("stream_k", overlap=1)
    assert p is not None and p.kind == "k_tile_repeated"
    assert (p.tile, p.k_tile, p.ctas, p.units) == (0, 8, (0, 1), (0, 1))
    assert (p.params["tiles"], p.params["k_tiles"], p.params["grid"]) == (1, 16, 2)
    assert "CTA 0 unit 0 k [0, 9), CTA 1 unit 1 k [8, 16)" in p.message


def test_stream_k_missing_end_adjust_is_caught():
    _, p = enumerate_division("stream_k", no_end_adjust=True)
    assert p is not None and p.kind == "k_tile_missed" and (p.tile, p.k_tile) == (0, 8)
    assert (p.params["tiles"], p.params["k_tiles"], p.params["grid"]) == (2, 12, 3)


def test_stream_k_epilogue_on_first_is_caught():
    _, p = enumerate_division("stream_k", epilogue_on_first=True)
    assert p is not None and p.kind == "incomplete_store" and (p.tile, p.k_tile, p.ctas) == (0, 8, (0, 1))


def test_walk_and_division_compose_to_a_bijection():
    # 3 x 5 tiles, cluster 2 x 1, along M: 20 padded tiles; every real tile is stored once
    g = walk_geometry(3, 5, 2, 1, "along_m", 1)
    stored = [p.tile for ps in work_units(g.units, 24, 6, 2, "stream_k") for p in ps if p.stores_output]
    w = cutlass_tile_of_unit(np.array(stored), 3, 5, 2, 1, "along_m", 1)
    real = sorted(zip(w.tm[w.valid].tolist(), w.tn[w.valid].tolist()))
    assert real == [(m, n) for m in range(3) for n in range(5)]


# ---------------------------------------------------------------------------------------------
# check_units on hand-made divisions
# ---------------------------------------------------------------------------------------------


def test_check_units_finds_deadlock():
    # CTA 0 finalises tile 0 (waits lock == 2) before its partial of tile 1; CTA 1 the other way round
    units = [[WorkUnit(0, 0, 0, 2, 4, True), WorkUnit(0, 0, 1, 0, 2, False)],
             [WorkUnit(1, 1, 1, 2, 4, True), WorkUnit(1, 1, 0, 0, 2, False)]]
    p = check_units(units, 2, 4)
    assert p is not None and p.kind == "deadlock" and p.ctas == (0, 1)
    # swapping CTA 1's order removes the cycle
    assert check_units([units[0], units[1][::-1]], 2, 4) is None


def test_check_units_finds_store_errors():
    two = [[WorkUnit(0, 0, 0, 0, 2, True)], [WorkUnit(1, 1, 0, 2, 4, True)]]
    p = check_units(two, 1, 4)
    assert p is not None and p.kind == "multiple_stores" and p.ctas == (0, 1)
    none = [[WorkUnit(0, 0, 0, 0, 2, False)], [WorkUnit(1, 1, 0, 2, 4, False)]]
    p = check_units(none, 1, 4)
    assert p is not None and p.kind == "no_store" and p.tile == 0
    bad = [[WorkUnit(0, 0, 0, 3, 3, True)]]
    assert check_units(bad, 1, 4).kind == "malformed_unit"


# ---------------------------------------------------------------------------------------------
# argument errors
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("call, name", [
    (lambda: work_units(4, 8, 4, 1, "split_k", 0), "splits"),
    (lambda: work_units(3, 8, 4, 2, "split_k", 2), "tiles"),
    (lambda: work_units(4, 8, 3, 2, "split_k", 2), "grid"),
    (lambda: work_units(4, 8, 4, 3), "cluster_size"),
    (lambda: work_units(4, 8, 4, 1, "stream_k", 2), "splits"),
    (lambda: work_units(4, 8, 4, 1, "streamk"), "mode"),
    (lambda: work_units(4, 8, 4, overlap=-1), "overlap"),
    (lambda: work_units(4, 0, 4), "k_tiles"),
    (lambda: cutlass_tile_of_unit(0, 4, 4, 1, 1, "along_n", 3), "max_swizzle"),
    (lambda: cutlass_tile_of_unit(0, 4, 4, 3, 1, "along_n", 1), "cluster_m"),
    (lambda: cutlass_tile_of_unit(0, 4, 4, 1, 1, "diagonal", 1), "raster"),
    (lambda: cutlass_tile_of_unit(-1, 4, 4), "unit"),
    (lambda: check_walk(0, 4), "tiles_m"),
    (lambda: check_units([], 1, 4, reduction="atomic"), "reduction"),
])
def test_bad_arguments_raise_value_error(call, name):
    with pytest.raises(ValueError, match=name):
        call()
