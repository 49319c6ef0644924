"""bench/sweep_gemm.py (issue 13 item 1's sweep): the shape set, the resumable table, the score (CPU only)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sweep():
    sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("sweep_gemm", ROOT / "bench" / "sweep_gemm.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_shape_set_filters_m_and_carries_the_flavor(sweep):
    shapes = sweep.shape_set("models", [1, 8192], "fp16", "fp32", "nt")
    assert {s.m for s in shapes} == {1, 8192}
    assert all((s.dtype, s.out_dtype, s.layout) == ("fp16", "fp32", "nt") for s in shapes)
    keys = [(s.m, s.n, s.k) for s in shapes]
    assert len(keys) == len(set(keys))   # one entry per (M, N, K), names merged
    everything = sweep.shape_set("models", None, "bf16", "bf16", "tn")
    assert len(everything) >= 6 * 10   # at least 6 model configurations x the 10 M values of issue 13
    assert len(sweep.shape_set("bench", None, "bf16", "bf16", "tn")) == 13


def test_shapes_file_row_errors_name_the_row(sweep, tmp_path, capsys):
    bad = tmp_path / "s.csv"
    bad.write_text("m,n,k\n16,4096,4096\n0,4096,4096\n")
    with pytest.raises(SystemExit) as exc:
        sweep.main(["--table", str(tmp_path / "t.json"), "--shapes", str(bad)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "s.csv:3" in err and not (tmp_path / "t.json").exists()


def test_summary_scores_the_heuristic_choice_against_the_best(sweep):
    table = {"shapes": {
        "1x2x3": {"kernels": {"a": 1.0, "b": 1.029, "c": None}, "cublas_ms": 1.2, "heuristic": "b"},
        "4x5x6": {"kernels": {"a": 2.0, "b": 1.0}, "cublas_ms": 0.8, "heuristic": "a"},
        "7x8x9": {"kernels": {"a": 1.0}, "cublas_ms": None, "heuristic": "zzz"},   # choice not measured: left out
    }}
    s = sweep.summarize(table)
    assert s["shapes"] == 3 and s["within_tie"] == 1 and s["missing"] == 1   # an unmeasured choice is a miss
    assert s["min_vs_cublas_choice"] == pytest.approx(0.4)
    assert s["min_vs_cublas_best"] == pytest.approx(0.8)
    assert s["geomean_regret"] == pytest.approx((1.029 * 2.0) ** 0.5 - 1)
    assert sweep.summarize({"shapes": {}})["shapes"] == 0


def test_table_of_another_flavor_is_refused(sweep, tmp_path, capsys):
    t = tmp_path / "t.json"
    t.write_text(json.dumps({"flavor": {"dtype": "fp16", "out_dtype": "fp16", "layout": "tn"}, "shapes": {}}))
    with pytest.raises(SystemExit):
        sweep.main(["--table", str(t), "--shapes", "bench"])
    assert "holds" in capsys.readouterr().err
    assert json.loads(t.read_text())["flavor"]["dtype"] == "fp16"   # nothing lost


def test_summary_mode_reads_a_table_without_a_gpu(sweep, tmp_path, capsys):
    t = tmp_path / "t.json"
    t.write_text(json.dumps({"shapes": {"1x2x3": {"kernels": {"a": 1.0}, "cublas_ms": 1.1, "heuristic": "a"}}}))
    assert sweep.main(["--table", str(t), "--summary"]) == 0
    assert "1 shapes" in capsys.readouterr().out


def test_both_untuned_rules_are_scored_on_the_measured_table(sweep):
    """choices(): the heuristic's kernel and the calibrated cost model's pick among the measured kernels
    (issue 4's table: 13 shapes, the candidates keyed by label)."""
    table = json.loads((ROOT / "bench" / "data" / "agent_eval_table.json").read_text())
    from argus_cutlass.agent.costmodel import costmodel_choice
    from argus_cutlass.agent.measure import table_key

    picks = sweep.choices(table)
    assert len(picks) == 13 and all(set(p) == {"heuristic", "costmodel"} for p in picks.values())
    for key, p in picks.items():   # the runtime's own choice, by name when the table measured it
        m, n, k = map(int, key.split("x"))
        assert p["costmodel"] == table_key(costmodel_choice(m, n, k), table["shapes"][key]["kernels"])
    for rule in ("heuristic", "costmodel"):
        s = sweep.summarize(table, rule, picks=picks)
        assert s["shapes"] == 13 and 0 <= s["within_tie"] <= 13 - s["missing"] and s["geomean_regret"] >= 0
        assert s["geomean_vs_cublas_best"] >= s["geomean_vs_cublas_choice"]


def test_shape_entries_ship_each_shape_and_the_lookup_takes_the_nearest(sweep, tmp_path, monkeypatch):
    """One entry per swept shape (the kernel fastest there, its ms, the row's cuBLAS); entries of one bucket
    at several shapes all survive a merge, and the lookup takes the one measured nearest the problem."""
    from argus_cutlass.agent import store as store_mod
    from argus_cutlass.agent.planner import Problem
    from argus_cutlass.agent.store import ExperienceStore, entry_key, lookup_config, merge_entries, table_entry_key
    from argus_cutlass.kernels.gemm.config import GemmConfig

    a, b, c = GemmConfig(), GemmConfig(tile_n=128, cluster_m=1), GemmConfig(tile_n=128, cluster_m=1, stages=6)
    table = {"gpu": "NVIDIA H200", "flavor": {"dtype": "bf16", "out_dtype": "bf16", "layout": "tn"},
             "kernel_configs": {"a": a.model_dump(), "b": b.model_dump(), "c": c.model_dump()},
             "shapes": {   # 3000 and 4000 share the bucket m4096_n4096_k4096; "c" is missing on one of them
                 "3000x4096x4096": {"kernels": {"a": 1.00, "b": 1.05, "c": 0.90}, "cublas_ms": 1.1},
                 "4000x4096x4096": {"kernels": {"a": 1.30, "b": 1.20, "c": None}, "cublas_ms": 1.4},
                 "64x4096x4096": {"kernels": {"a": 0.30, "b": None}, "cublas_ms": 0.25}}}
    entries = sweep.shape_entries(table)
    by_shape = {tuple(e["shape"]): e for e in entries}
    assert set(by_shape) == {(3000, 4096, 4096), (4000, 4096, 4096), (64, 4096, 4096)}
    assert GemmConfig(**by_shape[3000, 4096, 4096]["config"]) == c and by_shape[3000, 4096, 4096]["ms"] == 0.90
    big = by_shape[4000, 4096, 4096]
    assert GemmConfig(**big["config"]) == b and big["ms"] == 1.20 and big["cublas_ms"] == 1.4
    assert table_entry_key(big) == entry_key("NVIDIA H200", "gemm", Problem(4000, 4096, 4096))
    merged = merge_entries({"entries": [dict(big, ms=9.0), {"key": "x"}]}, entries)
    assert len(merged["entries"]) == 4 and [e["ms"] for e in merged["entries"] if e.get("shape") == [4000, 4096, 4096]] == [1.2]
    # the lookup: the same bucket, the entry of the nearest measured shape, said in the detail
    monkeypatch.setattr(store_mod, "shipped_entries", lambda: list(merged["entries"]))
    none = ExperienceStore(str(tmp_path / "none.json"))
    near3000 = lookup_config("gemm", 2900, 4096, 4096, gpu="NVIDIA H200", store=none)
    assert near3000.source == "shipped" and near3000.config == c
    assert "measured at 3000x4096x4096" in near3000.detail
    assert lookup_config("gemm", 3900, 4096, 4096, gpu="NVIDIA H200", store=none).config == b
    exact = lookup_config("gemm", 4000, 4096, 4096, gpu="NVIDIA H200", store=none)
    assert exact.config == b and "measured at" not in exact.detail
    with pytest.raises(ValueError, match="kernel_configs"):
        sweep.shape_entries({"shapes": {}})


def test_a_fatal_shape_is_recorded_and_its_first_failing_kernel_excluded(sweep, tmp_path, monkeypatch):
    """A sticky CUDA error in one shape ends the run but must not block the next runs (review, session 19):
    the shape is recorded, the kernel that failed first is excluded from later builds, the table is whole."""
    import types

    import argus_cutlass.runtime.cuda as cuda

    shapes = tmp_path / "s.csv"
    shapes.write_text("m,n,k\n64,4096,4096\n128,4096,4096\n")
    built: list[list] = []

    def fake_build(cands, workers, log, notes):
        built.append(list(cands))
        return {f"k{i}": (c, None, None) for i, c in enumerate(cands[:3])}

    def fake_measure(libs, shape, warmup, iters, rounds, log, graph=False):
        if shape.m == 64:
            log.append({"kernel": "k1", "phase": "time", "shape": shape.label, "error": "illegal address"})
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return {"kernels": {nm: 1.0 for nm in libs}, "cublas_ms": 1.0, "names": list(shape.names)}

    monkeypatch.setattr(sweep.agent_eval, "_build", fake_build)
    monkeypatch.setattr(sweep, "measure_shape", fake_measure)
    monkeypatch.setattr(cuda, "require_sm90", lambda: types.SimpleNamespace(name="NVIDIA H200"))
    t = tmp_path / "t.json"
    assert sweep.main(["--table", str(t), "--shapes", str(shapes), "--exclude", "_no_such_kernel_"]) == 0
    table = json.loads(t.read_text())
    assert table["shapes"]["64x4096x4096"]["error"].startswith("fatal after kernel k1")
    assert "k1" in table["exclude"] and "_no_such_kernel_" in table["exclude"]
    assert "128x4096x4096" not in table["shapes"]   # the run stopped there
    assert sweep.main(["--table", str(t), "--shapes", str(shapes)]) == 0   # the next run goes on
    table = json.loads(t.read_text())
    assert table["shapes"]["128x4096x4096"]["kernels"] and len(built) == 2


def test_refine_retimes_the_finalists_and_resumes(sweep, tmp_path, monkeypatch):
    """--refine (issue 13 item 1: the one-pass sweep's spread on short kernels exceeds the 3 % score): only the
    kernels within --refine-within of a row's best (and the untuned choices) are rebuilt and re-timed; their new
    times replace the row's, the old ones are kept, and a refined row is not refined again."""
    import types

    import argus_cutlass.runtime.cuda as cuda
    from argus_cutlass.generate import kernel_name
    from argus_cutlass.kernels.gemm.space import declared_subspace

    space = [c for c in declared_subspace() if not c.swap_ab][:4]
    names = [kernel_name(c) for c in space]
    table = {"flavor": {"dtype": "bf16", "out_dtype": "bf16", "layout": "tn"},
             "kernel_configs": {nm: c.model_dump() for nm, c in zip(names, space)},
             "shapes": {"512x4096x4096": {"kernels": dict(zip(names, (1.0, 1.05, 1.5, None))), "cublas_ms": 1.0,
                                          "heuristic": names[2]},
                        "64x4096x4096": {"kernels": dict(zip(names, (2.0, 3.0, 2.1, 2.15))), "cublas_ms": 2.0,
                                         "heuristic": names[1]}}}
    t = tmp_path / "t.json"
    t.write_text(json.dumps(table))
    built, timed = [], []

    def fake_build(cands, workers, log, notes):
        built.append({kernel_name(c) for c in cands})
        return {kernel_name(c): (c, None, None) for c in cands}

    def fake_measure(libs, shape, warmup, iters, rounds, log, graph=False):
        timed.append((shape.m, sorted(libs), iters, rounds))
        # at M = 64 the sweep's best kernel fails to time: it must not keep its one-pass (lucky) time
        return {"kernels": {nm: None if (shape.m == 64 and nm == names[0]) else 0.5 for nm in libs},
                "cublas_ms": 0.9, "names": []}

    monkeypatch.setattr(sweep.agent_eval, "_build", fake_build)
    monkeypatch.setattr(sweep, "measure_shape", fake_measure)
    monkeypatch.setattr(cuda, "require_sm90", lambda: types.SimpleNamespace(name="NVIDIA H200"))
    monkeypatch.setattr(sweep, "choices", lambda tb: {k: {"heuristic": r.get("heuristic")} for k, r in tb["shapes"].items()})
    assert sweep.main(["--table", str(t), "--refine"]) == 0
    out = json.loads(t.read_text())
    assert [m for m, *_ in timed] == [64, 512]   # smallest M first
    assert timed[0][1] == sorted([names[0], names[2], names[3], names[1]])   # within 10 % + the heuristic's
    assert timed[1][1] == sorted([names[0], names[1], names[2]])             # 1.5 is the heuristic's; None never
    assert all(r == 5 for *_, r in timed)
    row = out["shapes"]["512x4096x4096"]
    assert row["kernels"][names[0]] == 0.5 and row["kernels_sweep"][names[0]] == 1.0 and row["kernels"][names[3]] is None
    assert row["cublas_ms"] == 0.9 and row["cublas_ms_sweep"] == 1.0 and row["refined"]["kernels"] == 3
    row = out["shapes"]["64x4096x4096"]
    assert row["kernels"][names[0]] is None and row["kernels_sweep"][names[0]] == 2.0
    assert row["refined"]["failed"] == [names[0]] and row["refined"]["kernels"] == 3
    assert sweep.main(["--table", str(t), "--refine"]) == 0   # nothing left to refine
    assert len(timed) == 2
    # a table without kernel_configs cannot be refined: said, not a silent success
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({k: v for k, v in table.items() if k != "kernel_configs"}))
    assert sweep.main(["--table", str(bare), "--refine"]) == 2


def test_refine_redo_retimes_refined_rows_once_per_label(sweep, tmp_path, monkeypatch, capsys):
    """--refine --redo LABEL (session 33: after a template change): rows already refined are re-timed, only
    at --m, each marked with the label and not re-timed again for it; the first times stay; --redo without
    --refine is refused."""
    import types

    import argus_cutlass.runtime.cuda as cuda
    from argus_cutlass.generate import kernel_name
    from argus_cutlass.kernels.gemm.space import declared_subspace

    space = [c for c in declared_subspace() if not c.swap_ab][:3]
    names = [kernel_name(c) for c in space]
    refined = {"within": 0.1, "rounds": 5, "iters": 20, "kernels": 2, "failed": []}
    table = {"flavor": {"dtype": "bf16", "out_dtype": "bf16", "layout": "tn"},
             "kernel_configs": {nm: c.model_dump() for nm, c in zip(names, space)},
             "shapes": {f"{m}x4096x4096": {"kernels": dict(zip(names, (1.0, 1.02, 1.5))), "cublas_ms": 1.0,
                                           "kernels_sweep": {names[0]: 1.1}, "cublas_ms_sweep": 1.1,
                                           "heuristic": names[0], "refined": dict(refined)} for m in (64, 512, 1024)}}
    t = tmp_path / "t.json"
    t.write_text(json.dumps(table))
    timed = []

    def fake_measure(libs, shape, warmup, iters, rounds, log, graph=False):
        timed.append((shape.m, sorted(libs)))
        return {"kernels": {nm: 0.9 for nm in libs}, "cublas_ms": 0.95, "names": []}

    monkeypatch.setattr(sweep.agent_eval, "_build", lambda cands, w, log, notes: {kernel_name(c): (c, None, None)
                                                                                  for c in cands})
    monkeypatch.setattr(sweep, "measure_shape", fake_measure)
    monkeypatch.setattr(cuda, "require_sm90", lambda: types.SimpleNamespace(name="NVIDIA H200"))
    monkeypatch.setattr(sweep, "choices", lambda tb: {k: {"heuristic": r.get("heuristic")} for k, r in tb["shapes"].items()})
    assert sweep.main(["--table", str(t), "--refine"]) == 0 and timed == []   # all refined: nothing without --redo
    assert sweep.main(["--table", str(t), "--refine", "--redo", "tpl2", "--m", "64,512", "--refine-within", "0.05"]) == 0
    assert timed == [(64, sorted(names[:2])), (512, sorted(names[:2]))]   # within 5 %; M 1024 kept out by --m
    out = json.loads(t.read_text())["shapes"]
    row = out["512x4096x4096"]
    assert row["redo"] == "tpl2" and row["kernels"][names[0]] == 0.9 and row["kernels"][names[2]] == 1.5
    assert row["kernels_sweep"][names[0]] == 1.1 and row["cublas_ms_sweep"] == 1.1 and row["cublas_ms"] == 0.95
    assert "redo" not in out["1024x4096x4096"]
    assert sweep._redo_note(json.loads(t.read_text())).startswith("; 2 rows' finalists re-timed after a template "
                                                                   "change (bench/sweep_gemm.py --refine --redo tpl2, within 5%")
    assert sweep._redo_note(table) == ""
    assert sweep.main(["--table", str(t), "--refine", "--redo", "tpl2"]) == 0   # only the row not yet redone
    assert [m for m, _ in timed] == [64, 512, 1024]
    with pytest.raises(SystemExit) as exc:
        sweep.main(["--table", str(t), "--redo", "tpl3"])
    assert exc.value.code == 2 and "--redo goes with --refine" in capsys.readouterr().err


def test_refine_redo_on_a_graph_table_and_finalists_that_no_longer_build(sweep, tmp_path, monkeypatch, capsys):
    """Review of session 33: --redo on a graph-timed table keeps each row graph-timed (its per-launch
    kernels_events untouched), the first graph times in kernels_graph_first and the first refined record in
    refined_first; a row none of whose finalists builds on the changed template loses their times (kept apart,
    named in redo_failed) and is marked done; --m filters --refine without --redo too; a bad --m is refused."""
    import types

    import argus_cutlass.runtime.cuda as cuda
    from argus_cutlass.generate import kernel_name
    from argus_cutlass.kernels.gemm.space import declared_subspace

    space = [c for c in declared_subspace() if not c.swap_ab][:3]
    names = [kernel_name(c) for c in space]
    first = {"within": 0.2, "rounds": 5, "iters": 200, "kernels": 3, "failed": []}

    def row(times):
        return {"kernels": dict(zip(names, times)), "cublas_ms": 0.03, "timing": "graph", "heuristic": names[0],
                "kernels_events": {names[0]: 0.05}, "cublas_ms_events": 0.06, "refined": dict(first)}

    table = {"flavor": {"dtype": "bf16", "out_dtype": "bf16", "layout": "tn"}, "timing": "graph",
             "kernel_configs": {nm: c.model_dump() for nm, c in zip(names, space)},
             "shapes": {"1x4096x4096": row((0.030, 0.031, 0.05)), "8x4096x4096": row((0.040, 0.041, 0.05))}}
    t = tmp_path / "g.json"
    t.write_text(json.dumps(table))
    timed = []

    def fake_build(cands, workers, log, notes):   # names[1] (the M = 8 row's only finalist) no longer builds
        return {kernel_name(c): (c, None, None) for c in cands if kernel_name(c) != names[1]}

    def fake_measure(libs, shape, warmup, iters, rounds, log, graph=False):
        assert graph
        timed.append((shape.m, sorted(libs)))
        return {"kernels": {nm: 0.025 for nm in libs}, "cublas_ms": 0.029, "names": []}

    monkeypatch.setattr(sweep.agent_eval, "_build", fake_build)
    monkeypatch.setattr(sweep, "measure_shape", fake_measure)
    monkeypatch.setattr(cuda, "require_sm90", lambda: types.SimpleNamespace(name="NVIDIA H200"))
    monkeypatch.setattr(sweep, "choices", lambda tb: {k: {"heuristic": r.get("heuristic")} for k, r in tb["shapes"].items()})
    monkeypatch.setattr(sweep, "finalists", lambda r, within, extra: [names[0], names[1]] if r["kernels"][names[0]] < 0.035
                        else [names[1]])
    assert sweep.main(["--table", str(t), "--refine", "--graph", "--redo", "s", "--m", "1"]) == 0
    assert timed == [(1, [names[0]])]   # --m 1: the M = 8 row waits; names[1] did not build
    out = json.loads(t.read_text())["shapes"]
    r1 = out["1x4096x4096"]
    assert r1["redo"] == "s" and r1["timing"] == "graph" and r1["kernels_events"] == {names[0]: 0.05}
    assert r1["kernels"][names[0]] == 0.025 and r1["kernels_graph_first"][names[0]] == 0.030
    assert r1["cublas_ms"] == 0.029 and r1["cublas_ms_graph_first"] == 0.03 and r1["cublas_ms_events"] == 0.06
    assert r1["refined_first"] == first and r1["refined"]["within"] == 0.1 and r1["refined"]["failed"] == [names[1]]
    assert r1["kernels"][names[1]] is None and r1["kernels_graph_first"][names[1]] == 0.031
    assert sweep.main(["--table", str(t), "--refine", "--graph", "--redo", "s"]) == 0
    assert len(timed) == 1   # the M = 8 row's only finalist did not build: nothing timed
    r8 = json.loads(t.read_text())["shapes"]["8x4096x4096"]
    assert r8["redo"] == "s" and r8["redo_failed"] == [names[1]] and r8["kernels"][names[1]] is None
    assert r8["kernels_graph_first"][names[1]] == 0.041 and r8["kernels"][names[0]] == 0.040
    assert r8["timing"] == "graph" and r8["kernels_events"] == {names[0]: 0.05} and r8["refined"] == first
    assert sweep.main(["--table", str(t), "--refine", "--graph", "--redo", "s"]) == 0 and len(timed) == 1   # done
    with pytest.raises(SystemExit) as exc:
        sweep.main(["--table", str(t), "--refine", "--graph", "--m", "1,x"])
    assert exc.value.code == 2 and "--m '1,x': expected comma-separated integers" in capsys.readouterr().err


def test_extend_times_added_configurations_beside_the_finalists_and_resumes(sweep, tmp_path, monkeypatch, capsys):
    """--extend (after the declared sub-space grew): on each row that lacks them, the selected declared
    configurations are timed in the same rounds as the row's finalists; swap-AB ones only where M <=
    SWAP_AB_MAX_M; --m keeps some M; the re-timed finalists keep their first times; an extended row is not
    extended again; a selector matching nothing is refused naming it."""
    import types

    import argus_cutlass.runtime.cuda as cuda
    from argus_cutlass.agent.costmodel import SWAP_AB_MAX_M
    from argus_cutlass.generate import kernel_name
    from argus_cutlass.kernels.gemm.space import declared_subspace

    space = declared_subspace()
    plain = [c for c in space if not c.swap_ab][:3]
    swap = [c for c in space if c.swap_ab and "128x16x64_c1x1_s12_coop" in kernel_name(c)]
    assert len(swap) == 1
    names = [kernel_name(c) for c in plain]
    added = kernel_name(swap[0])
    big = f"{SWAP_AB_MAX_M * 8}x4096x4096"
    table = {"flavor": {"dtype": "bf16", "out_dtype": "bf16", "layout": "tn"},
             "kernel_configs": {nm: c.model_dump() for nm, c in zip(names, plain)},
             "shapes": {"1x4096x4096": {"kernels": dict(zip(names, (0.03, 0.05, 0.031))), "cublas_ms": 0.03,
                                        "heuristic": names[1]},
                        "8x4096x4096": {"kernels": dict(zip(names, (0.04, 0.05, 0.06))), "cublas_ms": 0.04,
                                        "heuristic": names[0]},
                        big: {"kernels": dict(zip(names, (1.0, 1.2, 1.3))), "cublas_ms": 1.0, "heuristic": names[0]}}}
    t = tmp_path / "t.json"
    t.write_text(json.dumps(table))
    built, timed = [], []

    def fake_build(cands, workers, log, notes):
        built.append(sorted(kernel_name(c) for c in cands))
        return {kernel_name(c): (c, None, None) for c in cands}

    def fake_measure(libs, shape, warmup, iters, rounds, log, graph=False):
        timed.append((shape.m, sorted(libs), rounds))
        return {"kernels": {nm: (0.02 if nm == added else 0.029) for nm in libs}, "cublas_ms": 0.028, "names": []}

    monkeypatch.setattr(sweep.agent_eval, "_build", fake_build)
    monkeypatch.setattr(sweep, "measure_shape", fake_measure)
    monkeypatch.setattr(cuda, "require_sm90", lambda: types.SimpleNamespace(name="NVIDIA H200"))
    monkeypatch.setattr(sweep, "choices", lambda tb: {k: {"heuristic": r.get("heuristic")} for k, r in tb["shapes"].items()})
    assert sweep.main(["--table", str(t), "--extend", "128x16x64_c1x1_s12_coop", "--m", "1,8192"]) == 0
    out = json.loads(t.read_text())
    # M = 8 kept out by --m; the big row is past SWAP_AB_MAX_M: a swap-AB configuration does not apply there
    assert [m for m, *_ in timed] == [1] and timed[0][2] == 5
    assert timed[0][1] == sorted([added, names[0], names[1], names[2]])   # added + within 10 % + the heuristic's
    row = out["shapes"]["1x4096x4096"]
    assert row["kernels"][added] == 0.02 and row["kernels"][names[0]] == 0.029
    assert row["kernels_sweep"][names[0]] == 0.03 and row["cublas_ms_sweep"] == 0.03 and row["cublas_ms"] == 0.028
    assert row["extended"][0]["added"] == [added] and added in out["kernel_configs"]
    assert added not in out["shapes"]["8x4096x4096"]["kernels"] and added not in out["shapes"][big]["kernels"]
    assert sweep.main(["--table", str(t), "--extend", "128x16x64_c1x1_s12_coop", "--m", "1"]) == 0   # done: skipped
    assert len(timed) == 1 and "extending 0 shapes" in capsys.readouterr().out
    assert sweep.main(["--table", str(t), "--extend", "128x16x64_c1x1_s12_coop"]) == 0   # now the M = 8 row
    assert [m for m, *_ in timed] == [1, 8]
    assert json.loads(t.read_text())["shapes"]["1x4096x4096"]["kernels_sweep"][names[0]] == 0.03   # first kept
    with pytest.raises(SystemExit) as exc:
        sweep.main(["--table", str(t), "--extend", "nosuchkernel"])
    assert exc.value.code == 2 and "'nosuchkernel' matches no kernel" in capsys.readouterr().err
    # the merge note says which rows hold configurations added later (their times: other rounds than the sweep's)
    note = sweep._extended_note(json.loads(t.read_text()))
    assert note.startswith("; 2 rows extended (bench/sweep_gemm.py --extend) with 1 configuration added")
    assert sweep._extended_note(table) == ""


def test_extend_retimes_a_selected_kernel_already_on_the_row_and_refine_keeps_first_times(sweep, tmp_path, monkeypatch):
    """Review, session 25: a selected kernel the row already holds is re-timed, not added again (its first time
    kept in kernels_sweep); a later --refine keeps the first recorded times instead of replacing the dict; a
    table without kernel_configs is refused."""
    import types

    import argus_cutlass.runtime.cuda as cuda
    from argus_cutlass.generate import kernel_name
    from argus_cutlass.kernels.gemm.space import declared_subspace

    swap = [c for c in declared_subspace() if c.swap_ab][:2]
    a, b = (kernel_name(c) for c in swap)
    table = {"flavor": {"dtype": "bf16", "out_dtype": "bf16", "layout": "tn"},
             "kernel_configs": {a: swap[0].model_dump()},
             "shapes": {"1x4096x4096": {"kernels": {a: 0.030}, "cublas_ms": 0.03, "heuristic": a}}}
    t = tmp_path / "t.json"
    t.write_text(json.dumps(table))
    times = iter([0.040, 0.045])

    def fake_measure(libs, shape, warmup, iters, rounds, log, graph=False):
        v = next(times)
        return {"kernels": {nm: v for nm in libs}, "cublas_ms": 0.031, "names": []}

    monkeypatch.setattr(sweep.agent_eval, "_build", lambda cands, w, log, notes: {kernel_name(c): (c, None, None)
                                                                                  for c in cands})
    monkeypatch.setattr(sweep, "measure_shape", fake_measure)
    monkeypatch.setattr(cuda, "require_sm90", lambda: types.SimpleNamespace(name="NVIDIA H200"))
    monkeypatch.setattr(sweep, "choices", lambda tb: {k: {"heuristic": r.get("heuristic")} for k, r in tb["shapes"].items()})
    assert sweep.main(["--table", str(t), "--extend", f"{a},{b}"]) == 0
    row = json.loads(t.read_text())["shapes"]["1x4096x4096"]
    assert row["extended"][-1]["added"] == [b] and row["extended"][-1]["retimed"] == [a]
    assert row["kernels"] == {a: 0.040, b: 0.040} and row["kernels_sweep"] == {a: 0.030}
    assert sweep.main(["--table", str(t), "--refine"]) == 0
    row = json.loads(t.read_text())["shapes"]["1x4096x4096"]
    assert row["kernels"] == {a: 0.045, b: 0.045}
    assert row["kernels_sweep"] == {a: 0.030, b: 0.040} and row["cublas_ms_sweep"] == 0.03   # the first ones
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({k: v for k, v in table.items() if k != "kernel_configs"}))
    assert sweep.main(["--table", str(bare), "--extend", a]) == 2


def test_calibration_set_is_apart_from_the_model_shapes(sweep):
    """random:COUNT:SEED (issue 13 item 1: calibrate on shapes the acceptance set does not hold): no projection of
    the model shape set, TMA-aligned, the same set for the same seed, a new one for another seed."""
    from argus_cutlass.agent.shapes import model_shape_set

    shapes = sweep.shape_set("random:25:3", None, "bf16", "bf16", "tn")
    proj = {(s.n, s.k) for s in shapes}
    assert len(proj) == 25 and not proj & {(s.n, s.k) for s in model_shape_set([1])}
    assert len(shapes) == 25 * 10 and all(s.n % 64 == 0 and s.k % 64 == 0 and 256 <= min(s.n, s.k) for s in shapes)
    assert {(s.m, s.n, s.k) for s in sweep.shape_set("random:25:3", None, "bf16", "bf16", "tn")} == \
        {(s.m, s.n, s.k) for s in shapes}
    assert {(s.n, s.k) for s in sweep.shape_set("random:25:4", None, "bf16", "bf16", "tn")} != proj
    for bad in ("random:0", "random:x", "random:3:1:2"):
        with pytest.raises(SystemExit, match="random:COUNT"):
            sweep.shape_set(bad, None, "bf16", "bf16", "tn")


def test_bucket_holdout_scores_both_ways_of_serving_an_unswept_shape(sweep):
    """Three shapes of one bucket: held out, 3000 is served by 4000's best ("b": 1.05 / 0.90 of its best "c")
    and by the bucket-wide pick of the others; a bucket of one shape is not scored."""
    table = {"shapes": {
        "3000x4096x4096": {"kernels": {"a": 1.00, "b": 1.05, "c": 0.90}},
        "4000x4096x4096": {"kernels": {"a": 1.30, "b": 1.20, "c": 1.25}},
        "2100x4096x4096": {"kernels": {"a": 0.70, "b": 0.80, "c": 0.71}},
        "64x4096x4096": {"kernels": {"a": 0.30}}}}
    got = sweep.bucket_holdout(table)
    assert got["nearest"][0] == 3 and got["bucket"][0] == 3
    # nearest other shape (|log2| ratios: 3000-4000 0.415, 3000-2100 0.515) and its best kernel:
    # 3000 -> 4000's "b": 1.05 / 0.90; 4000 -> 3000's "c": 1.25 / 1.20; 2100 -> 3000's "c": 0.71 / 0.70
    ratios = [1.05 / 0.90, 1.25 / 1.20, 0.71 / 0.70]
    assert got["nearest"][1] == sum(r <= 1.03 for r in ratios)
    assert got["nearest"][2] == pytest.approx(math.exp(sum(map(math.log, ratios)) / 3) - 1)


def test_decode_floor_counts_decode_shapes_whose_weights_exceed_l2(sweep):
    """Issue 13 item 2 offline: only M <= 64 with 2 N K bytes > L2; time over 2 N K / 4.3 TB/s, per rule and cuBLAS."""
    floor = 2 * 8192 * 28672 / 4.3e12 * 1e3   # 470 MB: ~0.109 ms
    table = {"shapes": {
        "8x8192x28672": {"kernels": {"a": 1.10 * floor, "b": 1.30 * floor}, "cublas_ms": 1.50 * floor},
        "8x4096x4096": {"kernels": {"a": 0.001}, "cublas_ms": 0.001},        # 32 MB of weights: fits in L2
        "128x8192x28672": {"kernels": {"a": 0.2}, "cublas_ms": 0.2}}}        # not decode
    got = sweep.decode_floor(table, {"8x8192x28672": {"rule": "b"}})
    assert set(got) == {"sweep's best", "rule", "cuBLAS"}
    assert got["sweep's best"][:2] == (1, 1) and got["sweep's best"][2] == pytest.approx(1.10)
    assert got["rule"][:2] == (1, 0) and got["cuBLAS"][3] == pytest.approx(1.50)


def test_from_table_sweeps_each_shape_over_the_reference_finalists_in_this_flavor(sweep, tmp_path, monkeypatch):
    """Issue 13 item 4's other flavors: per shape only the reference row's finalists (retargeted) and the
    flavor's two untuned choices are timed; a shape the reference lacks gets the whole sub-space."""
    import types

    import argus_cutlass.runtime.cuda as cuda
    from argus_cutlass.agent.costmodel import costmodel_choice
    from argus_cutlass.kernels.gemm.config import GemmConfig
    from argus_cutlass.kernels.gemm.heuristics import default_config

    a, b, c = sweep.agent_eval.subspace("bf16", "bf16", "tn")[:3]
    ref = tmp_path / "ref.json"
    ref.write_text(json.dumps({"flavor": {"dtype": "bf16", "out_dtype": "bf16", "layout": "tn"},
                               "kernel_configs": {"a": a.model_dump(), "b": b.model_dump(), "c": c.model_dump()},
                               "shapes": {"64x4096x4096": {"kernels": {"a": 1.0, "b": 1.05, "c": 1.5}}}}))
    shapes = tmp_path / "s.csv"
    shapes.write_text("m,n,k\n64,4096,4096\n128,4096,4096\n")
    measured: dict[str, set] = {}

    def fake_build(cands, workers, log, notes):
        return {f"k{i}": (cfg, None, None) for i, cfg in enumerate(cands)}

    def fake_measure(libs, shape, warmup, iters, rounds, log, graph=False):
        measured[f"{shape.m}x{shape.n}x{shape.k}"] = {cfg for cfg, _, _ in libs.values()}
        return {"kernels": {nm: 1.0 for nm in libs}, "cublas_ms": 1.0, "names": list(shape.names)}

    monkeypatch.setattr(sweep.agent_eval, "_build", fake_build)
    monkeypatch.setattr(sweep, "measure_shape", fake_measure)
    monkeypatch.setattr(cuda, "require_sm90", lambda: types.SimpleNamespace(name="NVIDIA H200"))
    t = tmp_path / "t.json"
    assert sweep.main(["--table", str(t), "--shapes", str(shapes), "--dtype", "fp16", "--from-table", str(ref)]) == 0
    fl = {"dtype": "fp16", "out_dtype": "fp16", "layout": "tn"}
    want = {a.replace(**fl), b.replace(**fl), default_config(64, 4096, 4096, "fp16", "fp16", "tn")}
    cm = costmodel_choice(64, 4096, 4096, "fp16", "fp16", "tn")
    want |= {cm} if cm is not None else set()
    assert measured["64x4096x4096"] == want   # c (1.5x the best) is not a finalist
    assert set(sweep.agent_eval.subspace("fp16", "fp16", "tn")) <= measured["128x4096x4096"]   # not in ref: whole
    table = json.loads(t.read_text())
    assert table["restricted"] == {"from": str(ref), "within": 0.10} and table["flavor"] == fl
    # an fp32 output: a finalist whose depth the flavor cannot stage becomes the flavor's declared twin
    deep = GemmConfig(tile_m=128, tile_n=192, stages=5, epi_m=128, epi_n=32)
    ref2 = {"kernel_configs": {"d": deep.model_dump()}, "shapes": {"1x1x1": {"kernels": {"d": 1.0}}}}
    fl32 = {"dtype": "bf16", "out_dtype": "fp32", "layout": "tn"}
    declared32 = sweep.agent_eval.subspace("bf16", "fp32", "tn")
    (got,) = sweep.from_table_configs(ref2, "1x1x1", fl32, declared=declared32)
    assert (got.tile_n, got.out_dtype) == (192, "fp32") and got in declared32 and got.stages < 5
    with pytest.raises(SystemExit):   # resuming a restricted table without its reference is refused
        sweep.main(["--table", str(t), "--shapes", str(shapes), "--dtype", "fp16"])
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(SystemExit):
        sweep.main(["--table", str(tmp_path / "u.json"), "--shapes", str(shapes), "--from-table", str(bad)])


def test_a_sweep_whose_kernels_all_fail_records_no_shape(sweep, tmp_path, monkeypatch, capsys):
    """Nothing built (e.g. every kernel failing its numerics check): no shape row, so a resumed run redoes them."""
    import types

    import argus_cutlass.runtime.cuda as cuda

    shapes = tmp_path / "s.csv"
    shapes.write_text("m,n,k\n64,4096,4096\n")
    monkeypatch.setattr(sweep.agent_eval, "_build", lambda cands, workers, log, notes: {})
    monkeypatch.setattr(cuda, "require_sm90", lambda: types.SimpleNamespace(name="NVIDIA H200"))
    t = tmp_path / "t.json"
    assert sweep.main(["--table", str(t), "--shapes", str(shapes)]) == 2
    assert json.loads(t.read_text())["shapes"] == {} and "no kernel passed" in capsys.readouterr().err


def test_refine_graph_makes_its_own_table_and_never_mixes_timings(sweep, tmp_path, monkeypatch, capsys):
    """--refine --graph (session 27: one launch between CUDA events times a ~25 us decode kernel partly by the host):
    a new table is made from --from-table's rows at --m with weights of at least --min-weight-mb, each row's
    finalists re-timed from CUDA graphs; the row's per-launch times move to kernels_events (its kernels hold only
    graph times), resumable; a per-launch refine of a graph table and a graph refine of a per-launch table are
    refused; the shipped-table merge skips the rows not yet re-timed."""
    import types

    import argus_cutlass.runtime.cuda as cuda
    from argus_cutlass.generate import kernel_name
    from argus_cutlass.kernels.gemm.space import declared_subspace

    space = [c for c in declared_subspace() if c.swap_ab][:3]
    names = [kernel_name(c) for c in space]
    src = {"flavor": {"dtype": "bf16", "out_dtype": "bf16", "layout": "tn"},
           "kernel_configs": {nm: c.model_dump() for nm, c in zip(names, space)},
           "shapes": {"1x8192x8192": {"kernels": dict(zip(names, (0.040, 0.043, 0.060))), "cublas_ms": 0.045},
                      "8x8192x8192": {"kernels": dict(zip(names, (0.041, 0.050, 0.055))), "cublas_ms": 0.046},
                      "1x2048x2048": {"kernels": dict(zip(names, (0.005, 0.006, 0.007))), "cublas_ms": 0.006},
                      "256x8192x8192": {"kernels": dict(zip(names, (0.1, 0.2, 0.3))), "cublas_ms": 0.1}}}
    s = tmp_path / "src.json"
    s.write_text(json.dumps(src))
    g = tmp_path / "g.json"
    timed = []

    def fake_measure(libs, shape, warmup, iters, rounds, log, graph=False):
        timed.append((shape.m, shape.n, sorted(libs), graph))
        return {"kernels": {nm: 0.030 + 0.001 * i for i, nm in enumerate(sorted(libs))}, "cublas_ms": 0.035, "names": []}

    monkeypatch.setattr(sweep.agent_eval, "_build", lambda cands, w, log, notes:
                        {kernel_name(c): (c, None, None) for c in cands})
    monkeypatch.setattr(sweep, "measure_shape", fake_measure)
    monkeypatch.setattr(cuda, "require_sm90", lambda: types.SimpleNamespace(name="NVIDIA H200"))
    monkeypatch.setattr(sweep, "choices", lambda tb: {})
    argv = ["--table", str(g), "--refine", "--graph", "--from-table", str(s), "--m", "1,8", "--min-weight-mb", "60",
            "--refine-within", "0.2"]
    assert sweep.main(argv) == 0
    out = json.loads(g.read_text())
    assert out["timing"] == "graph" and sorted(out["shapes"]) == ["1x8192x8192", "8x8192x8192"]   # 8 MB, M 256 out
    assert [(m, n, graph) for m, n, _, graph in timed] == [(1, 8192, True), (8, 8192, True)]
    assert timed[0][2] == sorted(names[:2]) and timed[1][2] == [names[0]]   # within 20 % of the per-launch best
    row = out["shapes"]["1x8192x8192"]
    assert row["timing"] == "graph" and set(row["kernels"]) == set(names[:2]) and row["cublas_ms"] == 0.035
    assert row["kernels_events"] == src["shapes"]["1x8192x8192"]["kernels"] and row["cublas_ms_events"] == 0.045
    assert "kernels_sweep" not in row   # per-launch times live in kernels_events only
    assert sweep.main(argv) == 0 and len(timed) == 2   # resumable: nothing left
    # the table grows by the rows it lacks (here the small weights at M 1); its re-timed rows stay as they are
    assert sweep.main(argv[:-4] + ["--min-weight-mb", "0", "--refine-within", "0.2"]) == 0
    grown = json.loads(g.read_text())
    assert sorted(grown["shapes"]) == ["1x2048x2048", "1x8192x8192", "8x8192x8192"]
    assert [(m, n) for m, n, _, _ in timed[2:]] == [(1, 2048)] and grown["shapes"]["1x8192x8192"] == row
    # only a graph-timed table grows; --graph only with --refine; a graph table is not swept per launch
    for bad, msg in ((["--table", str(s), "--refine", "--graph", "--from-table", str(s)], "not a graph-timed table"),
                     (["--table", str(s), "--graph", "--summary"], "--graph goes with --refine"),
                     (["--table", str(g), "--m", "1"], "filled by --refine --graph and --extend only"),
                     (["--table", str(tmp_path / "n.json"), "--refine", "--graph", "--from-table", str(s), "--m", "x"],
                      "--m 'x': expected comma-separated integers")):
        with pytest.raises(SystemExit):
            sweep.main(bad)
        assert msg in capsys.readouterr().err
    # a source of another flavor does not grow it; kernels declared since the table was made join its configs
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**src, "flavor": {"dtype": "fp16", "out_dtype": "fp16", "layout": "tn"}}))
    with pytest.raises(SystemExit):
        sweep.main(["--table", str(g), "--refine", "--graph", "--from-table", str(other)])
    assert "a graph table holds one flavor" in capsys.readouterr().err
    newer = tmp_path / "newer.json"
    extra = next(c for c in declared_subspace() if c.swap_ab and c.acc_sets == 2)
    newer.write_text(json.dumps({**src, "kernel_configs": {**src["kernel_configs"], kernel_name(extra): extra.model_dump()}}))
    assert sweep.main(["--table", str(g), "--refine", "--graph", "--from-table", str(newer), "--m", "1",
                       "--min-weight-mb", "60"]) == 0
    assert kernel_name(extra) in json.loads(g.read_text())["kernel_configs"]
    # the summary of a graph table reads only its re-timed rows
    grown["shapes"]["4x8192x8192"] = {"kernels": {names[0]: 0.001}, "cublas_ms": 0.1}   # per-launch, not re-timed
    assert set(sweep.timed_view(grown)["shapes"]) == {"1x2048x2048", "1x8192x8192", "8x8192x8192"}
    # a row whose finalists all fail to build keeps no per-launch time, cuBLAS included
    monkeypatch.setattr(sweep.agent_eval, "_build", lambda cands, w, log, notes: {})
    h = tmp_path / "h.json"
    assert sweep.main(["--table", str(h), "--refine", "--graph", "--from-table", str(s), "--m", "1",
                       "--min-weight-mb", "60"]) == 0
    row = json.loads(h.read_text())["shapes"]["1x8192x8192"]
    assert row["timing"] == "graph" and row["kernels"] == {} and row["cublas_ms"] is None
    assert row["cublas_ms_events"] == 0.045 and row["kernels_events"] == src["shapes"]["1x8192x8192"]["kernels"]
    # the two timings never meet in one table
    assert sweep.main(["--table", str(g), "--refine"]) == 2
    assert sweep.main(["--table", str(s), "--refine", "--graph"]) == 2
    assert "never mixes" in capsys.readouterr().err
    # a graph table's row not yet re-timed (per-launch times) is not shipped
    out["shapes"]["8x8192x8192"] = {"kernels": src["shapes"]["8x8192x8192"]["kernels"], "cublas_ms": 0.046}
    entries = sweep.shape_entries(out)
    assert [e["shape"][0] for e in entries] == [1] and entries[0]["ms"] == 0.030


def test_extend_of_a_graph_table_times_from_graphs_on_its_retimed_rows_only(sweep, tmp_path, monkeypatch):
    """Session 28: kernels declared after a graph-timed table was made are timed into it from CUDA graphs (beside
    the row's finalists and cuBLAS, one process), on its re-timed rows only; the row's other kernels keep their
    graph times, the re-timed ones' first graph times are kept, its per-launch times stay in kernels_events."""
    import types

    import argus_cutlass.runtime.cuda as cuda
    from argus_cutlass.generate import kernel_name
    from argus_cutlass.kernels.gemm.space import declared_subspace

    swap = [c for c in declared_subspace() if c.swap_ab]
    a, b, c, new = (kernel_name(x) for x in swap[:4])
    events = {a: 0.05, b: 0.06, c: 0.09}
    g = tmp_path / "g.json"
    g.write_text(json.dumps({
        "flavor": {"dtype": "bf16", "out_dtype": "bf16", "layout": "tn"}, "timing": "graph",
        "kernel_configs": {nm: x.model_dump() for nm, x in zip((a, b, c), swap[:3])},
        "shapes": {"1x8192x8192": {"timing": "graph", "kernels": {a: 0.040, b: 0.041, c: 0.060}, "cublas_ms": 0.045,
                                   "kernels_events": events, "cublas_ms_events": 0.05},
                   "8x8192x8192": {"kernels": events, "cublas_ms": 0.05}}}))   # not yet re-timed: left alone
    timed = []

    def fake_measure(libs, shape, warmup, iters, rounds, log, graph=False):
        timed.append((shape.m, sorted(libs), graph))
        return {"kernels": {nm: (0.030 if nm == new else 0.039) for nm in libs}, "cublas_ms": 0.044, "names": []}

    monkeypatch.setattr(sweep.agent_eval, "_build", lambda cands, w, log, notes:
                        {kernel_name(x): (x, None, None) for x in cands})
    monkeypatch.setattr(sweep, "measure_shape", fake_measure)
    monkeypatch.setattr(cuda, "require_sm90", lambda: types.SimpleNamespace(name="NVIDIA H200"))
    monkeypatch.setattr(sweep, "choices", lambda tb: {})
    sel = new.replace("argus_gemm_sm90_bf16_bf16_tn_", "").rsplit("_", 1)[0]
    assert sweep.main(["--table", str(g), "--extend", sel, "--refine-within", "0.1"]) == 0
    assert timed == [(1, sorted([new, a, b]), True)]   # the added one + the finalists within 10 %, from graphs
    row = json.loads(g.read_text())["shapes"]["1x8192x8192"]
    assert row["kernels"] == {a: 0.039, b: 0.039, c: 0.060, new: 0.030} and row["cublas_ms"] == 0.044
    assert row["kernels_graph_first"] == {a: 0.040, b: 0.041} and row["cublas_ms_graph_first"] == 0.045
    assert row["kernels_events"] == events and "kernels_sweep" not in row and row["timing"] == "graph"
    assert "timing" not in json.loads(g.read_text())["shapes"]["8x8192x8192"]


def test_from_table_compares_kernel_configurations_not_their_dicts(sweep, tmp_path, monkeypatch, capsys):
    """Session 28: a graph table written before GemmConfig.reduction existed omits that default in its
    kernel_configs; growing it from a newer per-launch table is not a clash, while a kernel name configured
    differently is refused naming it."""
    import types

    import argus_cutlass.runtime.cuda as cuda
    from argus_cutlass.generate import kernel_name
    from argus_cutlass.kernels.gemm.space import declared_subspace

    c = next(x for x in declared_subspace() if x.swap_ab)
    nm = kernel_name(c)
    old = {f: v for f, v in c.model_dump().items() if f != "reduction"}
    src = {"flavor": {"dtype": "bf16", "out_dtype": "bf16", "layout": "tn"}, "kernel_configs": {nm: c.model_dump()},
           "shapes": {"1x8192x8192": {"kernels": {nm: 0.04}, "cublas_ms": 0.05}}}
    g = {**src, "timing": "graph", "kernel_configs": {nm: old}, "shapes": {}}
    s, t = tmp_path / "s.json", tmp_path / "g.json"
    s.write_text(json.dumps(src))
    t.write_text(json.dumps(g))
    monkeypatch.setattr(sweep.agent_eval, "_build", lambda cands, w, log, notes:
                        {kernel_name(x): (x, None, None) for x in cands})
    monkeypatch.setattr(sweep, "measure_shape", lambda libs, shape, *a, graph=False, **k:
                        {"kernels": {n: 0.03 for n in libs}, "cublas_ms": 0.04, "names": []})
    monkeypatch.setattr(cuda, "require_sm90", lambda: types.SimpleNamespace(name="NVIDIA H200"))
    monkeypatch.setattr(sweep, "choices", lambda tb: {})
    argv = ["--table", str(t), "--refine", "--graph", "--from-table", str(s), "--m", "1", "--min-weight-mb", "0"]
    assert sweep.main(argv) == 0
    assert json.loads(t.read_text())["shapes"]["1x8192x8192"]["timing"] == "graph"
    t.write_text(json.dumps({**g, "kernel_configs": {nm: {**old, "stages": old["stages"] + 1}}}))
    with pytest.raises(SystemExit):
        sweep.main(argv)
    assert "kernel names configured differently" in capsys.readouterr().err


def test_refine_picks_retimes_each_rows_held_out_choice_beside_its_finalists(sweep, tmp_path, monkeypatch, capsys):
    """Session 45 (issue 13 item 1 scored in one process): --refine --picks FILE adds each row's named choice to
    the row's finalists, also a kernel the row never timed (its configuration joins kernel_configs), so the choice
    and the row's best are timed interleaved in one process; the file's errors name the row; --picks needs
    --refine."""
    import types

    import argus_cutlass.runtime.cuda as cuda
    from argus_cutlass.generate import kernel_name
    from argus_cutlass.kernels.gemm.space import declared_subspace

    space = [c for c in declared_subspace() if not c.swap_ab][:3]
    names = [kernel_name(c) for c in space]
    table = {"flavor": {"dtype": "bf16", "out_dtype": "bf16", "layout": "tn"}, "timing": "graph",
             "kernel_configs": {nm: c.model_dump() for nm, c in zip(names[:2], space[:2])},
             "shapes": {"1x4096x4096": {"kernels": {names[0]: 0.030, names[1]: 0.05}, "cublas_ms": 0.03,
                                        "timing": "graph"}}}
    t = tmp_path / "g.json"
    t.write_text(json.dumps(table))
    picks = tmp_path / "p.json"
    picks.write_text(json.dumps({"picks": {"1x4096x4096": {"kernel": names[2], "config": space[2].model_dump()}}}))
    timed = []

    def fake_build(cands, workers, log, notes):
        return {kernel_name(c): (c, None, None) for c in cands}

    def fake_measure(libs, shape, warmup, iters, rounds, log, graph=False):
        timed.append(sorted(libs))
        return {"kernels": {nm: 0.02 + 0.001 * i for i, nm in enumerate(sorted(libs))}, "cublas_ms": 0.029, "names": []}

    monkeypatch.setattr(sweep.agent_eval, "_build", fake_build)
    monkeypatch.setattr(sweep, "measure_shape", fake_measure)
    monkeypatch.setattr(cuda, "require_sm90", lambda: types.SimpleNamespace(name="NVIDIA H200"))
    monkeypatch.setattr(sweep, "choices", lambda tb: {k: {} for k in tb["shapes"]})
    assert sweep.main(["--table", str(t), "--refine", "--graph", "--redo", "cv", "--refine-within", "0.05",
                       "--picks", str(picks)]) == 0
    assert timed == [sorted([names[0], names[2]])]   # the finalist (names[1] is 67 % off) and the pick
    out = json.loads(t.read_text())
    row = out["shapes"]["1x4096x4096"]
    assert row["redo"] == "cv" and row["kernels"][names[2]] and out["kernel_configs"][names[2]] == space[2].model_dump()
    assert row["redo_kernels"] == sorted([names[0], names[2]], key=[names[0], names[2]].index)
    # the file's errors name the row and the rule; nothing is timed
    row_key = "1x4096x4096"
    other = space[0].replace(out_dtype="fp32")
    bad = [({"picks": {"1x0x4": {"kernel": names[0], "config": space[0].model_dump()}}}, "row '1x0x4'"),
           ({"picks": {"01x4096x4096": {"kernel": names[0], "config": space[0].model_dump()}}}, "without leading zeros"),
           ({"picks": {"8x8x8": {"kernel": names[0], "config": space[0].model_dump()}}}, "not a row of the table"),
           ({"picks": {row_key: {"kernel": names[0], "config": {"tile_m": "x"}}}}, f"row {row_key}: no valid 'config'"),
           ({"picks": {row_key: {"kernel": kernel_name(other), "config": other.model_dump()}}},
            "is bf16 -> fp32 tn, the table bf16 -> bf16 tn"),
           ({"picks": {row_key: {"kernel": names[1], "config": space[0].model_dump()}}}, "is not its configuration's"),
           ({"nothing": 1}, "expected a JSON object with a 'picks' object")]
    for doc, words in bad:
        picks.write_text(json.dumps(doc))
        assert sweep.main(["--table", str(t), "--refine", "--graph", "--redo", "cv2", "--picks", str(picks)]) == 2
        assert words in capsys.readouterr().err
    assert len(timed) == 1
    with pytest.raises(SystemExit):
        sweep.main(["--table", str(t), "--summary", "--picks", str(picks)])
    assert "--picks goes with --refine" in capsys.readouterr().err
    # a table timed on another GPU model is not re-timed here
    out["gpu"] = "NVIDIA H100 80GB HBM3"
    t.write_text(json.dumps(out))
    assert sweep.main(["--table", str(t), "--refine", "--graph", "--redo", "cv3"]) == 2
    assert "was timed on NVIDIA H100 80GB HBM3, this is NVIDIA H200" in capsys.readouterr().err


def test_repeatability_scores_the_first_timings_pick_by_the_second(sweep):
    """The 3 % criterion's own repeatability: the kernel a row's first graph timing ranks fastest, scored by the
    later timing; rows without two timings of two common kernels are left out; on the shipped graph table it
    is below 100 % (the measurement's noise, not a model's)."""
    t = {"shapes": {"a": {"kernels": {"x": 1.0, "y": 1.05}, "kernels_graph_first": {"x": 1.1, "y": 1.0}},
                    "b": {"kernels": {"x": 1.0, "y": 1.02}, "kernels_graph_first": {"x": 1.1, "y": 1.0}},
                    "c": {"kernels": {"x": 1.0, "y": None}, "kernels_graph_first": {"x": 1.1, "y": 1.0}},
                    "d": {"kernels": {"x": 1.0}}}}
    assert sweep.repeatability(t) == (2, 1)
    assert sweep.repeatability({"shapes": {"d": {"kernels": {"x": 1.0}}}}) is None
    shipped = json.loads((ROOT / "bench" / "data" / "gemm_sweep_bf16_bf16_tn_graph_h200.json").read_text())
    rows, hits = sweep.repeatability(shipped)
    assert rows > 300 and hits < rows
    assert "repeatability of the 3% criterion" in sweep.report(shipped)
