"""CPU checks of ``bench/agent_eval.py``: the declared sub-space and the replay logic on a
synthetic measured table (no GPU)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("agent_eval", Path(__file__).with_name("agent_eval.py"))
ae = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(ae)  # type: ignore[union-attr]


def test_shapes_are_the_benchmark_table():
    shapes = ae.bench_shapes()
    assert (8192, 8192, 8192) in shapes and (1, 4096, 4096) in shapes and len(shapes) == 13


def test_subspace_is_small_and_distinct():
    from argus_cutlass.generate import kernel_name

    cands = ae.subspace()
    names = {kernel_name(c) for c in cands}
    assert len(names) == len(cands) == 81  # <= ~80 kernels: ~3 min of nvcc on 16 cores
    assert sum(c.swap_ab and c.scheduler != "persistent" for c in cands) == 6   # decode: swap-AB with K split
    assert {(c.raster, c.swizzle) for c in cands} == {("along_n", 1), ("along_m", 1), ("along_n", 4)}
    assert {(c.scheduler, c.splits) for c in cands} == {("persistent", 1), ("streamk", 1), ("splitk", 2), ("splitk", 4)}
    from argus_cutlass.kernels.gemm.heuristics import default_config

    for shape in ((8192, 8192, 8192), (128, 8192, 8192), (16, 8192, 8192)):
        assert default_config(*shape) in cands  # the heuristic is a point of the sub-space


def _synthetic_table(cands, fail=()):
    from argus_cutlass.agent.costmodel import predict_ms
    from argus_cutlass.generate import kernel_name

    shapes = {}
    for s in ae.bench_shapes()[:6]:
        ks = {}
        for c in cands:
            name = kernel_name(c)
            h = int(hashlib.sha256((name + str(s)).encode()).hexdigest()[:8], 16) / 2**32
            ks[name] = None if name in fail else predict_ms(c, *s) * (0.8 + 0.4 * h)
        good = [v for v in ks.values() if v]
        shapes[ae.shape_key(s)] = {"kernels": ks, "cublas_ms": min(good) * 1.1}
    return {"candidates": [c.model_dump() for c in cands], "shapes": shapes, "declared": len(cands), "pruned": 0}


@pytest.fixture(scope="module")
def table():
    from argus_cutlass.generate import kernel_name

    cands = ae.subspace()[:20]
    return _synthetic_table(cands, fail={kernel_name(cands[3])})


def test_replay_counts_and_ratios(table):
    res = ae.replay(table, budget=8, seeds=2, random_seeds=20)
    n = len(table["candidates"])
    for key, row in res["rows"].items():
        ms = {k: v for k, v in table["shapes"][key]["kernels"].items() if v}
        assert row["best_ms"] == min(ms.values())
        assert row["measured_ok"] == n - 1
        assert row["exhaustive_count"] == n
        assert 1 <= row["random_count"] <= n and 1 <= row["policy_count"] <= n + 1
        assert row["ratio_exhaustive"] == pytest.approx(1.1)
        assert row["ratio_policy"] <= row["ratio_exhaustive"] + 1e-12
    s = res["summary"]
    assert s["geomean_vs_cublas"]["exhaustive"] == pytest.approx(1.1)
    assert s["median_count"]["default_policy"] <= s["median_count"]["exhaustive"]
    assert math.isfinite(s["geomean_vs_cublas"]["default_policy"])
    assert ae.replay(table, budget=8, seeds=2, random_seeds=20) == res  # deterministic


def test_replay_count_when_best_found_first():
    """A table where one kernel is 2x faster than all others: random needs ~N/2 draws."""
    from argus_cutlass.generate import kernel_name

    cands = ae.subspace()[:10]
    names = [kernel_name(c) for c in cands]
    t = {"candidates": [c.model_dump() for c in cands],
         "shapes": {"4096x4096x4096": {"kernels": {nm: (0.5 if i == 7 else 1.0) for i, nm in enumerate(names)},
                                       "cublas_ms": 0.5}}}
    r = ae.replay(t, budget=4, seeds=1, random_seeds=200)["rows"]["4096x4096x4096"]
    assert r["best_kernel"] == names[7] and r["ratio_exhaustive"] == 1.0
    assert 4 <= r["random_count"] <= 7  # expected position of one item among 10: 5.5


def test_tuned_entries_roundtrip_through_the_store(table, tmp_path, monkeypatch):
    from argus_cutlass.agent import store as store_mod

    res = ae.replay(table, budget=8, seeds=1, random_seeds=5)
    doc = json.loads(json.dumps(ae.tuned_entries(res, "NVIDIA H200")))
    assert len(doc["entries"]) == len(res["rows"])
    monkeypatch.setattr(store_mod, "shipped_entries", lambda: doc["entries"])
    st = store_mod.ExperienceStore(tmp_path / "e.json")
    for key, row in res["rows"].items():
        m, n, k = map(int, key.split("x"))
        cfg = store_mod.tuned_or_default("gemm", m, n, k, gpu="NVIDIA H200", store=st)
        assert cfg.model_dump() == row["best_config"]
    text = ae.format_summary(res)
    assert "random" in text.splitlines()[-2] and "geomean" in text.splitlines()[-1]


def test_main_replay_mode_writes_outputs(table, tmp_path, capsys):
    src = tmp_path / "table.json"
    src.write_text(json.dumps(table))
    assert ae.main(["--out", str(tmp_path / "out"), "--replay", str(src), "--seeds", "1"]) == 0
    out = capsys.readouterr().out
    assert "default policy" in out.splitlines()[-2]
    for f in ("agent_eval_summary.json", "tuned_h200.json"):
        assert (tmp_path / "out" / f).exists()


def test_replay_of_an_empty_table_does_not_crash():
    res = ae.replay({"candidates": [], "shapes": {}})
    assert res["rows"] == {} and "exhaustive" in ae.format_summary(res)
