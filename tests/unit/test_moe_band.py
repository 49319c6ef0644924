"""The banded grouped walk of the MoE GEMMs (MoEConfig ``gu_band_m`` / ``dn_band_m``, schedule node
``band_m``): the model, its proofs (``scheduler.bijection`` enum + arith, ``moe.group_tiles`` enum + z3),
the planted mistakes, the printed C++ (compiled on the host against the model), names, heuristic."""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess

import numpy as np
import pytest

from argus_cutlass.errors import DslError
from argus_cutlass.kernels.moe.config import MoEConfig
from argus_cutlass.kernels.moe.heuristics import (
    BANDS,
    GATHER_UNROLL,
    SINGLE_TILE_GU_N,
    SMALL_T,
    SMALL_T_COMBINE_HANDOFF, SMALL_T_DYNAMIC_WALK,
    SMALL_T_FUSED_ROUTING,
    SMALL_T_HANDOFF,
    SMALL_T_ROW_BOUNDED_TILE_M,
    SMALL_T_PDL,
    band_for,
    default_bands,
    default_config,
    small_t_config,
    wave_rows,
)
from argus_cutlass.kernels.moe.problem import MODEL_SHAPES, MoEProblem
from argus_cutlass.kernels.moe.program import build_layer, layer_label
from argus_cutlass.render.moe import render_moe
from argus_cutlass.testing.mutants_moe import load_moe_catalogue, mutant_layer, verify_moe_mutant
from argus_cutlass.verify.decomposition import (
    GroupedWalk,
    check_grouped_walk,
    enumerate_grouped_walk,
    grouped_tile_of_unit,
    grouped_walk_all_sizes,
)
from argus_cutlass.verify.moe import verify_moe

SMALL = MoEProblem(64, 8, 2, 256, 512)
BAND_MUTANTS = ("gu_band_full_rows", "dn_band_swap", "gu_band_start_off_by_one")


def _spec(u: int, tiles_m: int, tiles_n: int, band_m: int) -> tuple[int, int]:
    """The walk as the issue states it, one unit at a time (band_m 0: the unbanded walk)."""
    if band_m == 0:
        return u % tiles_m, u // tiles_m
    b = u // (band_m * tiles_n)
    local = u - b * band_m * tiles_n
    rows = min(band_m, tiles_m - b * band_m)
    return b * band_m + local % rows, local // rows


@pytest.mark.parametrize("band_m", [0, 1, 2, 3, 5, 8, 16, 32, 64])
def test_model_is_the_stated_walk_and_a_bijection(band_m):
    """The law, over the whole small domain: every tiles_m in [0, 2 band_m + 3] (partial last bands,
    tiles_m < band_m, tiles_m = 0) and tiles_n in 1..7, unit by unit against the stated formula, and
    every tile of [0, tiles_m) x [0, tiles_n) exactly once."""
    walk = GroupedWalk(band_m)
    for tiles_m in range(0, 2 * band_m + 4):
        for tiles_n in range(1, 8):
            u = np.arange(tiles_m * tiles_n)
            tm, tn, _ = grouped_tile_of_unit(u, tiles_m, tiles_n, walk)
            want = [_spec(int(x), tiles_m, tiles_n, band_m) for x in u]
            assert list(zip(tm.tolist(), tn.tolist())) == want, (tiles_m, tiles_n)
            assert sorted(want) == list(itertools.product(range(tiles_m), range(tiles_n)))
            assert check_grouped_walk(tiles_m, tiles_n, walk) is None


def test_unbanded_walk_is_the_old_walk_and_band_one_is_not():
    tm, tn, _ = grouped_tile_of_unit(np.arange(12), 4, 3, GroupedWalk(0))
    assert tm.tolist() == [u % 4 for u in range(12)] and tn.tolist() == [u // 4 for u in range(12)]
    tm1, tn1, _ = grouped_tile_of_unit(np.arange(12), 4, 3, GroupedWalk(1))
    assert tm1.tolist() == [u // 3 for u in range(12)] and tn1.tolist() == [u % 3 for u in range(12)]
    # a band of at least tiles_m m-tiles is the unbanded walk
    tm8, tn8, _ = grouped_tile_of_unit(np.arange(12), 4, 3, GroupedWalk(8))
    assert (tm8 == tm).all() and (tn8 == tn).all()


@pytest.mark.parametrize("fields,kind", [({"band_full_rows": True}, "tile_outside"),
                                         ({"band_swap": True}, "tile_outside"),
                                         ({"band_start_delta": 1}, "band_rows"),
                                         ({"band_start_delta": -1}, "tile_outside")])
def test_wrong_walks_are_caught_naming_unit_and_tile(fields, kind):
    walk = GroupedWalk(4, **fields)
    assert grouped_walk_all_sizes(walk) is None
    grids, _, p = enumerate_grouped_walk(walk)
    assert p is not None and p.kind == kind and p.units, p
    assert re.search(r"unit \d+ \(band \d+: local \d+, rows -?\d+\)", p.message), p.message
    u = p.units[0]
    tm, tn, rows = grouped_tile_of_unit(np.array([u]), p.params["tiles_m"], p.params["tiles_n"], walk)
    if kind == "tile_outside":
        assert p.tile == (int(tm[0]), int(tn[0])) and f"m-tile {p.tile[0]}, n-block {p.tile[1]}" in p.message
    else:
        assert int(rows[0]) < 1 and "divides by zero" in p.message


def test_the_full_rows_mistake_hides_until_the_last_band_is_partial():
    """rows = band_m is right while tiles_m is a multiple of band_m: only a partial last band shows it."""
    walk = GroupedWalk(4, band_full_rows=True)
    assert all(check_grouped_walk(tm, tn, walk) is None for tm in (4, 8, 12) for tn in range(1, 6))
    p = check_grouped_walk(6, 3, walk)
    assert p is not None and p.kind == "tile_outside" and p.tile[0] >= 6


def test_banded_layer_verifies_with_the_z3_proof_for_every_tiles_m():
    layer = build_layer(MoEConfig(gu_band_m=3, dn_band_m=16), SMALL)
    rep = verify_moe(layer, smt=True)
    assert rep.ok and not rep.unknowns, [v.format() for v in rep.violations]
    smt = [p.summary for p in rep.proofs if p.rule == "moe.group_tiles" and p.engine == "smt"]
    assert len(smt) == 2 and all("for every tiles_m in [0, 16400]" in s for s in smt), smt
    sched = [p for p in rep.proofs if p.rule == "scheduler.bijection"]
    assert {p.engine for p in sched} == {"enum", "arith"}
    assert any("tiles_m in [0, 34]" in p.summary for p in sched)  # 2 * 16 + 2 for the down GEMM's bands
    assert any("bands of B = 3" in p.summary and p.engine == "arith" for p in sched)


@pytest.mark.parametrize("mutant_id", BAND_MUTANTS)
def test_band_mutants_rejected_with_counterexamples(mutant_id):
    m = load_moe_catalogue()[mutant_id]
    assert mutant_layer(m).program("gate_up" if mutant_id.startswith("gu") else "down").schedule.band_m == 3
    rep = verify_moe_mutant(m, smt=True)
    hits = [v for v in rep.violations if v.rule == "scheduler.bijection"]
    assert hits and hits[0].counterexample is not None, [v.rule for v in rep.violations]
    cex = hits[0].counterexample
    assert {"unit", "m_tile", "n_block"} <= set(cex.element) and "tiles_m" in cex.params
    assert f"unit {cex.element['unit']}" in hits[0].message
    # the layer rule rejects it too: on the routings (enum) and for all tiles_m (z3)
    engines = {v.counterexample.engine for v in rep.violations if v.rule == "moe.group_tiles"}
    assert engines == {"enum", "smt"}, engines


def test_band_fields_are_refused_where_they_mean_nothing():
    from argus_cutlass.kernels.gemm.config import GemmConfig
    from argus_cutlass.kernels.gemm.program import build_program

    gemm = build_program(GemmConfig())
    with pytest.raises(DslError, match="band_m=2 needs decomposition 'grouped'"):
        gemm.replace_node("schedule", band_m=2)
    layer = build_layer(MoEConfig(), SMALL)
    with pytest.raises(DslError, match="need band_m >= 1"):
        layer.replace_node("gate_up", "schedule", None, band_swap=True)
    banded = build_layer(MoEConfig(gu_band_m=4), SMALL)
    for bad, words in (({"band_m": 65}, r"in \[0, 64\]"), ({"band_m": -1}, r"in \[0, 64\]"),
                       ({"raster": "along_n"}, "along_m"), ({"swizzle": 2}, "prints no swizzle")):
        with pytest.raises(DslError, match=words):
            banded.replace_node("gate_up", "schedule", None, **bad)
    with pytest.raises(ValueError):
        MoEConfig(dn_band_m=65)


def test_names_change_with_the_band_and_old_names_stay():
    base = build_layer(MoEConfig(), SMALL)
    # (session 39: the grouped programs' source path none and params alpha, beta, n_size, k_size moved it from 31c63b47;
    # session 40: the workspace node moved it from 40754ce2; session 42: the weights' B load node states its experts,
    # moved from 86bb9975)
    assert base.kernel_name() == "argus_moe_sm90_bf16_e8k2_h256_i512_m128_gu256_dn128_k64_s4x5_e066df1e"
    names = {build_layer(MoEConfig(gu_band_m=g, dn_band_m=d), SMALL).kernel_name()
             for g, d in ((0, 0), (1, 0), (0, 1), (4, 8), (8, 4))}
    assert len(names) == 5
    assert layer_label(MoEConfig(gu_band_m=4, dn_band_m=8), SMALL).endswith("_s4x5_b4x8")
    prog = base.program("gate_up")
    assert prog.replace_node("schedule", band_m=0).fingerprint() == prog.fingerprint()
    assert prog.replace_node("schedule", band_m=2).fingerprint() != prog.fingerprint()


def test_printed_walk_comes_from_the_node():
    unbanded = render_moe(build_layer(MoEConfig(), SMALL))
    assert "kBandM" not in unbanded and "w.tm = int(u % Unit(tiles_m));" in unbanded
    src = render_moe(build_layer(MoEConfig(gu_band_m=3, dn_band_m=5), SMALL))
    assert src.count("constexpr int kBandM = 3;") == 1 and src.count("constexpr int kBandM = 5;") == 1
    assert src.count("w.tm = first + local % rows;") == 2
    for mid, text in (("gu_band_full_rows", "int const rows = kBandM;"),
                      ("dn_band_swap", "w.tm = first + local / rows;"),
                      ("gu_band_start_off_by_one", "int const first = band * kBandM +1;")):
        assert text in render_moe(mutant_layer(load_moe_catalogue()[mid])), mid


_HOST = """#include <cstdint>
#include <cstdio>
using Unit = int32_t;
constexpr int kBandM = {band};
struct Work {{ bool valid; int tm, tn; }};
static Work walk(Unit u, int tiles_m, int tiles_n) {{
  Work w{{true, 0, 0}};
{body}
  return w;
}}
int main() {{
  for (int tiles_m = 0; tiles_m <= {max_m}; ++tiles_m)
    for (int tiles_n = 1; tiles_n <= 6; ++tiles_n)
      for (Unit u = 0; u < Unit(tiles_m) * tiles_n; ++u) {{
        Work w = walk(u, tiles_m, tiles_n);
        std::printf("%d %d %d %d %d\\n", tiles_m, tiles_n, int(u), w.tm, w.tn);
      }}
  return 0;
}}
"""


def _printed_walk(src: str, band: int) -> str:
    """The walk statements of the GEMM with ``kBandM = band`` in the rendered layer (between the
    Work's validity test and the expert lookup)."""
    ns = src[src.index(f"constexpr int kBandM = {band};"):]
    body = ns[ns.index("if (w.valid) {") + len("if (w.valid) {"):ns.index("w.expert = tile_expert[w.tm];")]
    return body


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
@pytest.mark.parametrize("mutant_id", [None, "gu_band_full_rows"])
def test_printed_walk_compiled_on_the_host_is_the_model(tmp_path, mutant_id):
    """What runs is what was proved: the walk statements cut out of the rendered .cu, compiled with
    g++ and run on every tiles_m in [0, 2 band_m + 3] x tiles_n in 1..6, equal the verifier's model
    unit by unit (the correct walk, and a planted mistake's wrong walk)."""
    if mutant_id is None:
        layer, walk = build_layer(MoEConfig(gu_band_m=3), SMALL), GroupedWalk(3)
    else:
        layer = mutant_layer(load_moe_catalogue()[mutant_id])
        walk = GroupedWalk.of(layer.gate_up.schedule)
    body = _printed_walk(render_moe(layer), 3)
    max_m = 2 * 3 + 3
    cpp = tmp_path / "walk.cpp"
    cpp.write_text(_HOST.format(band=3, body=body, max_m=max_m))
    subprocess.run(["g++", "-std=c++17", "-O1", "-o", str(tmp_path / "walk"), str(cpp)], check=True,
                   capture_output=True, text=True)
    out = subprocess.run([str(tmp_path / "walk")], check=True, capture_output=True, text=True).stdout
    got = np.array([[int(x) for x in ln.split()] for ln in out.splitlines()])
    for tiles_m in range(max_m + 1):
        for tiles_n in range(1, 7):
            sel = got[(got[:, 0] == tiles_m) & (got[:, 1] == tiles_n)]
            tm, tn, _ = grouped_tile_of_unit(sel[:, 2], tiles_m, tiles_n, walk)
            assert (sel[:, 3] == tm).all() and (sel[:, 4] == tn).all(), (tiles_m, tiles_n)
    assert (mutant_id is None) == all(check_grouped_walk(m, n, walk) is None
                                      for m in range(max_m + 1) for n in range(1, 7))


def test_heuristic_bands_from_the_wave_traffic():
    # the argmin of the per-wave traffic over BANDS, the smaller on a tie
    for tile_m, b_rows, tiles_n in itertools.product((64, 128), (128, 256), (2, 6, 11, 16, 32, 112)):
        got = band_for(tile_m, b_rows, tiles_n)
        costs = {b: wave_rows(b, tile_m, b_rows, tiles_n) for b in BANDS}
        assert costs[got] == min(costs.values()) and got == min(b for b in BANDS if costs[b] == costs[got])
    want = {"mixtral": (16, 8), "qwen3-30b-a3b": (1, 1), "deepseek-v2-lite": (1, 1)}
    from argus_cutlass.kernels.moe.heuristics import gather_slices_for

    for model in sorted(MODEL_SHAPES):
        for t in (16, 256, 2048, 8192):
            cfg = default_config(MoEProblem.for_model(model, t))
            p = MoEProblem.for_model(model, t)
            chunks = -(-t * p.topk // 256)
            if t <= SMALL_T:
                # small T: bands of the most m-tiles one expert can fill (T / tile_m rounded up,
                # T a power of two here) and the gather in heuristics.gather_slices_for column slices; 128-row tiles
                # only for Mixtral at T = 256 (64 rows per expert on average: heuristics.small_t_tile_m)
                tile_m = 128 if (model, t) == ("mixtral", 256) else 64
                band = max(1, t // tile_m)
                want_cfg = small_t_config(tile_m=tile_m).replace(
                    gu_band_m=band, dn_band_m=band, gather_slices=gather_slices_for(p), gather_unroll=GATHER_UNROLL,
                    pdl=SMALL_T_PDL, handoff=SMALL_T_HANDOFF, row_bounded=tile_m in SMALL_T_ROW_BOUNDED_TILE_M,
                    # more than one wave of down units, all but Mixtral T = 256 (8 x 1 m-tile x 16 = 128 units)
                    combine_handoff=SMALL_T_PDL and SMALL_T_COMBINE_HANDOFF and (model, t) != ("mixtral", 256),
                    fused_routing=SMALL_T_FUSED_ROUTING and p.experts <= 256,   # E within one 256-row routing chunk
                    # the dynamic walk by the same wave rule as the combine handoff
                    dynamic_walk=SMALL_T_DYNAMIC_WALK and (model, t) != ("mixtral", 256))
                if tile_m == 64:   # the narrower gate+up unit (heuristics.SINGLE_TILE_GU_N)
                    want_cfg = want_cfg.replace(gu_tile_n=SINGLE_TILE_GU_N)
                assert cfg == want_cfg, (model, t)
            else:
                # large T: at most one resident wave of gather CTAs (132 SMs x 2048 / 256 threads)
                assert cfg.gather_slices == gather_slices_for(p) and chunks * cfg.gather_slices <= 1056, (model, t)
                assert cfg.gather_unroll == GATHER_UNROLL == 4, (model, t)
                assert (cfg.gu_band_m, cfg.dn_band_m) == want[model] == default_bands(MoEConfig(), MoEProblem.for_model(
                    model, t)), (model, t)
    # Mixtral gate+up: a band of 16 reads 16 m-tiles and 9 n-blocks per wave instead of 2 and 112
    assert wave_rows(16, 128, 256, 112) * 6 < wave_rows(1, 128, 256, 112)


@pytest.mark.parametrize("model", sorted(MODEL_SHAPES))
def test_default_large_t_layers_verify(model):
    p = MoEProblem.for_model(model, 8192)
    rep = verify_moe(build_layer(default_config(p), p), smt=True)
    assert rep.ok and not rep.unknowns, [v.format() for v in rep.violations]
    assert sum(1 for x in rep.proofs if x.rule == "moe.group_tiles" and x.engine == "smt") == 2


def test_banded_silicon_problems_reach_a_partial_last_band():
    """bench/mutants_moe_gpu.py's banded problems (its seed 11): tiles_m is not a multiple of the band
    of 3, experts are empty, and the skewed one has more gate+up units than 132 CTAs."""
    from argus_cutlass.hw.routing import make_routing
    from argus_cutlass.testing.mutants_moe import GPU_PROBLEMS, base_layer, gpu_problems_of
    from argus_cutlass.verify.moe import simulate_routing

    cat = load_moe_catalogue()
    layer = base_layer(cat["gu_band_full_rows"], gpu=True)
    for mid in BAND_MUTANTS:
        assert "small_banded_skewed" in gpu_problems_of(cat[mid])
    for name in ("small_banded_uniform300", "small_banded_skewed", "small_banded_sizes"):
        g = GPU_PROBLEMS[name]
        ids, _ = make_routing(g.routing, g.tokens, 8, 2, seed=11, sizes=g.sizes)
        sim = simulate_routing(layer, ids)
        assert sim["tiles_m"] % 3 != 0, name
        if name == "small_banded_skewed":
            assert sim["tiles_m"] * (512 // 128) > 132
        if name == "small_banded_sizes":
            assert (sim["counts"] == 0).sum() == 3


def test_bench_compare_row_is_parsed_by_the_plots(tmp_path, monkeypatch):
    """A compare run's row (``unbanded ms`` last) and an earlier session's 11-column rows both read
    under the bench's header (bench/plots.py)."""
    pytest.importorskip("torch")
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    monkeypatch.syspath_prepend(str(root / "bench"))
    spec = importlib.util.spec_from_file_location("bench_test_moe_bench_band", root / "bench" / "test_moe_bench.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    plots_spec = importlib.util.spec_from_file_location("plots_band", root / "bench" / "plots.py")
    plots = importlib.util.module_from_spec(plots_spec)
    plots_spec.loader.exec_module(plots)
    old = [ln for ln in (root / "bench/data/moe_bench_h200_s17.md").read_text().splitlines()[2:] if ln.startswith("|")]
    new = "| mixtral | 8192 | m128_b16x8 | 9.100 | - | 11.021 | 1.21 | 9.581 | 1.13 | 0.687 | 13.25 | 11.564 |"
    monkeypatch.setattr(mod, "ROWS", old[:2] + [new])
    table = tmp_path / "moe.md"
    monkeypatch.setenv("ARGUS_BENCH_TABLE", str(table))
    monkeypatch.setattr(plots, "write_plots", lambda t: [])
    monkeypatch.setitem(__import__("sys").modules, "plots", plots)
    mod.teardown_module(mod)
    rows = plots.read_table(table)
    assert plots.kind_of(rows) == "moe" and rows[-1]["unbanded ms"] == "11.564" and rows[-1]["config"] == "m128_b16x8"
    pts = plots.points(rows, "moe")
    assert pts[-1]["ratio"] == pytest.approx(1.21) and pts[0]["floor_ratio"] > 0


def test_default_config_is_one_per_power_of_two_bucket():
    """Every T of a power-of-two bucket (the tuned table's key, api.moe's layer cache) gets the same
    configuration: bands and gather slices are computed at the bucket's T, not at T."""
    import random

    rng = random.Random(7)
    for model in sorted(MODEL_SHAPES):
        for bucket in (1, 2, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 32768):
            lo = bucket // 2 + 1 if bucket > 1 else 1
            ts = {lo, bucket} | {rng.randint(lo, bucket) for _ in range(6)}
            cfgs = {default_config(MoEProblem.for_model(model, t)) for t in ts}
            assert len(cfgs) == 1, (model, bucket, sorted(ts))
