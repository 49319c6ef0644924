"""bench/explore_tiles.py and bench/cublas_kernels.py: their CPU paths (plan resolution, mirroring cuBLAS's nvjet
kernels, the rows below a ratio, bad arguments); the timing itself needs a GPU."""

from __future__ import annotations

import doctest
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import cublas_kernels  # noqa: E402
import explore_tiles  # noqa: E402

from argus_cutlass.generate import kernel_name  # noqa: E402
from argus_cutlass.kernels.gemm.space import declared_subspace, feasible  # noqa: E402


def _table(tmp_path, rows: dict) -> str:
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"shapes": rows, "kernel_configs": {}}))
    return str(p)


def test_docstring_examples():
    assert doctest.testmod(explore_tiles).failed == 0


def test_resolve_copies_a_declared_kernel_with_fields_changed_and_names_bad_specs(tmp_path):
    space = {kernel_name(c): c for c in declared_subspace()}
    cfg = explore_tiles.resolve("64x64x64_c1x1_s8_pp_e64x32_rn1_swapab:tile_n=104,epi_n=8,stages=9", "100x4096x4096",
                                space, None)
    assert (cfg.tile_m, cfg.tile_n, cfg.epi_n, cfg.stages, cfg.swap_ab) == (64, 104, 8, 9, True) and feasible(cfg)[0]
    with pytest.raises(ValueError, match="matches 0 kernels|matches no kernel"):
        explore_tiles.resolve("nosuch", "1x8x8", space, None)
    with pytest.raises(ValueError, match=r"matches [1-9]\d+ kernels"):
        explore_tiles.resolve("128x128x64", "1x8x8", space, None)
    with pytest.raises(ValueError, match="'best' needs --table"):
        explore_tiles.resolve("best", "1x8x8", space, None)
    best = next(nm for nm in space if "128x96x64" in nm)
    t = _table(tmp_path, {"8x8x8": {"kernels": {best: 0.01, next(iter(space)): 0.02}, "cublas_ms": 0.01}})
    assert explore_tiles.resolve("best", "8x8x8", space, t) == space[best]
    with pytest.raises(ValueError, match="tile_n"):
        explore_tiles.resolve("64x64x64_c1x1_s8_pp_e64x32_rn1_swapab:tile_n=many", "1x8x8", space, None)


@pytest.mark.parametrize("kernel,m,expect", [
    # cuBLAS's tile is (over N) x (over M): a 128-row M tile is our cooperative tile_m
    ("nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_TNT", 512, None),               # 320 > 256: no wgmma N
    ("nvjet_sm90_tst_168x128_64x5_1x2_h_bz_TNN", 256, dict(tile_m=128, tile_n=168, cluster_m=2, cluster_n=1,
                                                             swap_ab=False, epi_n=8)),
    ("nvjet_sm90_tst_64x64_64x13_2x1_v_bz_splitK_TNT", 256, None),              # split-K of a 64-row tile: refused
    ("nvjet_sm90_tst_128x128_64x6_2x1_v_bz_splitK_TNT", 256, dict(tile_m=128, tile_n=128, scheduler="splitk",
                                                                    splits=2, cluster_n=2)),
    ("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT", 8, dict(tile_m=64, tile_n=8, swap_ab=True, cluster_m=4, epi_n=8)),
    ("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT", 1024, None),                     # swap-AB only up to M = 256
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float>", 8, None),
])
def test_mirror_specs_map_nvjet_names_to_feasible_configurations(kernel, m, expect):
    specs = explore_tiles.mirror_specs(kernel, m)
    if expect is None:
        assert specs == []
        return
    (spec,) = specs
    cfg = explore_tiles.resolve(spec, f"{m}x4096x4096", {kernel_name(c): c for c in declared_subspace()}, None)
    assert all(getattr(cfg, f) == v for f, v in expect.items()), (spec, cfg)
    assert feasible(cfg)[0]


def test_plan_from_cublas_takes_the_rows_below_and_only_those(tmp_path):
    names = [kernel_name(c) for c in declared_subspace()]
    t = _table(tmp_path, {"512x5120x8192": {"kernels": {names[0]: 0.070}, "cublas_ms": 0.060},   # 0.857: below
                          "100x4096x4096": {"kernels": {names[1]: 0.010}, "cublas_ms": 0.012}})  # 1.2: not
    k = tmp_path / "k.json"
    k.write_text(json.dumps({"512x5120x8192": {"nvjet_sm90_tst_168x128_64x5_1x2_h_bz_TNN": [57.1, 1.0]},
                             "100x4096x4096": {"nvjet_sm90_tst_64x56_64x14_1x2_h_bz_TNT": [11.2, 1.0]}}))
    plan = explore_tiles.plan_from_cublas(str(k), t, 0.9)
    assert list(plan) == ["512x5120x8192"] and plan["512x5120x8192"][-1] == "best" and len(plan["512x5120x8192"]) == 2
    assert cublas_kernels.shapes_below(t, 0.9) == ["512x5120x8192"]


@pytest.mark.parametrize("script,argv,msg", [
    (explore_tiles, [], "give --plan"),
    (explore_tiles, ["--mirror-cublas", "k.json"], "needs --table and --plan-out"),
    (explore_tiles, ["--plan", "/nonexistent.json"], "--plan /nonexistent.json"),
    # cublas_kernels names them before it needs torch
    (cublas_kernels, [], "give --shape or --table"),
    (cublas_kernels, ["--shape", "8x8"], "expected MxNxK of positive integers"),
    (cublas_kernels, ["--shape", "8x0x8"], "expected MxNxK of positive integers"),
], ids=lambda v: v.__name__ if hasattr(v, "__name__") else None)
def test_bad_arguments_are_named(script, argv, msg, capsys):
    with pytest.raises(SystemExit) as exc:
        script.main(argv)
    assert exc.value.code == 2 and msg in capsys.readouterr().err
