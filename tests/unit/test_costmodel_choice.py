"""The cost model's untuned GEMM choice (issue 13 item 1): agent.costmodel.costmodel_choice and
ARGUS_GEMM_UNTUNED (CPU only)."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from argus_cutlass.agent.costmodel import (SWAP_AB_MAX_M, Residuals, calibrated, calibrated_residuals,
                                           costmodel_choice, predict_ms, ranked, structure_key)
from argus_cutlass.agent.measure import table_key
from argus_cutlass.agent.store import ExperienceStore, lookup_config
from argus_cutlass.errors import ProblemError
from argus_cutlass.kernels.gemm.heuristics import default_config
from argus_cutlass.kernels.gemm.space import declared_subspace, feasible

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("m,n,k,layout", [(1, 4096, 4096, "tn"), (16, 14336, 4096, "tn"), (300, 4096, 14336, "nt"),
                                          (3000, 10240, 8192, "tn"), (8192, 1024, 4096, "nn")])
def test_analytic_choice_is_the_best_predicted_feasible_point_of_the_declared_subspace(m, n, k, layout):
    cfg = costmodel_choice(m, n, k, "bf16", "bf16", layout, residuals=None)
    space = declared_subspace("bf16", "bf16", layout)
    assert cfg in space and feasible(cfg)[0]
    assert m <= SWAP_AB_MAX_M or not cfg.swap_ab
    params = calibrated()
    eligible = [c for c in space if (m <= SWAP_AB_MAX_M or not c.swap_ab) and feasible(c)[0]]
    assert predict_ms(cfg, m, n, k, params) == min(predict_ms(c, m, n, k, params) for c in eligible)


@pytest.mark.parametrize("m,n,k,layout", [(1, 4096, 4096, "tn"), (100, 5000, 3000, "tn"), (3000, 10240, 8192, "nt"),
                                          (8192, 1024, 4096, "tn"), (48, 6000, 9000, "tn"), (2000, 3000, 20000, "tn"),
                                          (5, 50000, 7000, "nn"), (700, 2500, 1536, "tn")])
@pytest.mark.parametrize("analytic_weight", [None, 0.75, 0.0])
def test_corrected_choice_is_the_least_corrected_prediction(m, n, k, layout, analytic_weight):
    """The shipped residuals (and the same with analytic_weight a = 0.75 / 0): the choice minimises the weighted
    mean, over the nearest calibration shapes p within the radius that measured its structure (weights
    1 / (0.5 + d)), of log measured(p) + a * (log predict(shape) - log predict(p)), computed here independently
    of Residuals, blended with the shipped Trend's modelled residual (its weight scaled by the nearest calibration
    shape's distance over ``full_at``)."""
    from argus_cutlass.agent.costmodel import trend_features

    res = calibrated_residuals()
    assert res is not None and res.flavor == ("bf16", "bf16", "tn") and res.radius == 3.0
    # the shipped hyper-parameters (session 20; session 24's search did not beat them held out: Residuals)
    assert (res.neighbours, res.m_weight, res.analytic_weight) == (3, 2.0, 1.0)
    if analytic_weight is not None:
        res = dataclasses.replace(res, analytic_weight=analytic_weight)
    a = res.analytic_weight
    d = np.sqrt((((np.log2(res.points.astype(float)) - np.log2([m, n, k])) * [2.0, 1.0, 1.0]) ** 2).sum(1))
    near = [i for i in np.argsort(d, kind="stable")[:3] if d[i] <= 3.0]
    if not near:
        assert costmodel_choice(m, n, k, "bf16", "bf16", layout, residuals=res) == costmodel_choice(
            m, n, k, "bf16", "bf16", layout, residuals=None)
        return
    params = calibrated()
    scored = []
    for c in declared_subspace("bf16", "bf16", layout):
        if (c.swap_ab and m > SWAP_AB_MAX_M) or not feasible(c)[0]:
            continue
        j = res.configs.index(structure_key(c))
        seen = [(i, 1.0 / (0.5 + d[i])) for i in near if np.isfinite(res.values[i, j])]
        if seen:
            # res.values[i, j] + log predict(p) = log measured(p)
            logt = [res.values[i, j] + math.log(predict_ms(c, *map(int, res.points[i]), params)) for i, _ in seen]
            logp = [math.log(predict_ms(c, *map(int, res.points[i]), params)) for i, _ in seen]
            here = math.log(predict_ms(c, m, n, k, params))
            pred = sum(w * (t + a * (here - q)) for (_, w), t, q in zip(seen, logt, logp)) / sum(w for _, w in seen)
            blend = res.trend.weight * min(1.0, d[near[0]] / res.trend.full_at)
            modelled = res.trend.predict(structure_key(c), trend_features(c, m, n, k, params), m, n, k)
            if blend > 0 and modelled is not None:
                pred = (1 - blend) * pred + blend * (here + modelled)
            scored.append((pred, c))
    assert scored
    assert costmodel_choice(m, n, k, "bf16", "bf16", layout, residuals=res) == min(scored, key=lambda t: t[0])[1]


def test_residuals_decide_the_ranking():
    """A calibration that measured one structure 100x faster than predicted near the shape makes it the choice;
    removing that shape (cross-validation) takes the correction away."""
    space = declared_subspace()
    keys = tuple(structure_key(c) for c in space)
    target = next(c for c in space if c.tile_m == 64 and c.tile_n == 64 and not c.swap_ab and c.cluster_m == 1)
    vals = np.zeros((2, len(keys)))
    vals[0, keys.index(structure_key(target))] = math.log(0.01)
    res = Residuals(("bf16", "bf16", "tn"), keys, np.array([[4096, 4096, 4096], [8, 64, 64]]), vals)
    assert costmodel_choice(4096, 4096, 4096, residuals=res) == target
    assert res.corrections(4096, 4096, 4096)[structure_key(target)] < math.log(0.1)
    rest = res.without([(4096, 4096, 4096)])
    assert len(rest.points) == 1 and costmodel_choice(4096, 4096, 4096, residuals=rest) != target
    # a structure measured at none of the nearest shapes is not ranked; a kernel of the measured structure at another
    # depth (the 64x64 ping-pong tile at 8 and 13 stages since session 35) borrows the measured depth's correction
    vals2 = np.full((1, len(keys)), np.nan)
    vals2[0, keys.index(structure_key(target))] = 0.0
    only = Residuals(("bf16", "bf16", "tn"), keys, np.array([[4096, 4096, 4096]]), vals2)
    depths = [c for c in space if structure_key(c, stages=False) == structure_key(target, stages=False)]
    assert len(depths) == 2 and target in depths
    assert sorted((c for _, c in ranked(4096, 4096, 4096, residuals=only)), key=lambda c: c.stages) == depths
    # round trip through the file format
    assert Residuals.from_json(res.to_json()).corrections(100, 200, 300) == pytest.approx(res.corrections(100, 200, 300), abs=1e-3)
    assert Residuals.from_json(res.to_json()).analytic_weight == res.analytic_weight == 1.0
    # analytic_weight < 1 changes the ranking (the neighbours' measured times weigh more than the model's scaling)
    shipped = calibrated_residuals()
    measured_only = dataclasses.replace(shipped, analytic_weight=0.0)
    assert [c for _, c in ranked(100, 5000, 3000, residuals=measured_only)] != \
        [c for _, c in ranked(100, 5000, 3000, residuals=shipped)]
    # a file without the session-24 keys keeps the hyper-parameters it was written under (3 neighbours, M weight 2, a = 1)
    old = {key: v for key, v in res.to_json().items() if key not in ("neighbours", "m_weight", "analytic_weight")}
    assert (lambda r: (r.neighbours, r.m_weight, r.analytic_weight))(Residuals.from_json(old)) == (3, 2.0, 1.0)


@pytest.mark.parametrize("m,n,k", [(1 << 20, 4096, 4096), (1, 128, 128), (100, 100, 100)])
def test_shapes_far_from_every_calibration_shape_take_the_analytic_choice(m, n, k):
    """No residual extrapolated across regimes: beyond the radius (weighted log2 distance 3) of every
    calibration shape the corrections are empty and the ranking is the analytic one; within it, they are not."""
    res = calibrated_residuals()
    d = np.sqrt((((np.log2(res.points.astype(float)) - np.log2([m, n, k])) * [res.m_weight, 1.0, 1.0]) ** 2).sum(1))
    assert d.min() > res.radius
    assert res.corrections(m, n, k) == {}
    assert ranked(m, n, k) == ranked(m, n, k, residuals=None)
    assert res.corrections(8192, 65536, 8192)  # 0.19 from 8192x57344x8192: corrected
    assert Residuals.from_json({**res.to_json(), "radius": None}).corrections(m, n, k)  # null: no cutoff


def test_shipped_residuals_match_the_sweep_and_the_shipped_parameters():
    """agent/costmodel_h200.json's residuals are log(measured / predict_ms) under the same file's parameters, of
    the bf16 tn sweep's rows with its graph-timed table's rows laid over them (session 28: `--residuals SWEEP
    --residuals GRAPH_TABLE`, each shape's row from the last table that timed it): refitting the parameters or
    re-timing a table without recomputing the residuals (calibrate_costmodel.py --residuals) fails here."""
    res = calibrated_residuals()
    data = ROOT / "bench" / "data"
    table = json.loads((data / "gemm_sweep_bf16_bf16_tn_h200.json").read_text())
    graph = json.loads((data / "gemm_sweep_bf16_bf16_tn_graph_h200.json").read_text())
    timed = {key: row for key, row in graph["shapes"].items() if row.get("timing") == "graph"}
    assert len(timed) > 300 and set(timed) <= set(table["shapes"])
    table = {**table, "shapes": {**table["shapes"], **timed}}
    assert res.configs == tuple(structure_key(c) for c in declared_subspace(*res.flavor))
    assert {f"{m}x{n}x{k}" for m, n, k in res.points.tolist()} == set(table["shapes"])
    rng = np.random.default_rng(0)
    params = calibrated()
    space = declared_subspace(*res.flavor)
    checked = 0
    for i in rng.choice(len(res.points), 40, replace=False):
        m, n, k = (int(x) for x in res.points[i])
        kernels = table["shapes"][f"{m}x{n}x{k}"]["kernels"]
        for j in rng.choice(len(space), 12, replace=False):
            name = table_key(space[j], kernels)
            t = kernels.get(name) if name else None
            if t:
                assert res.values[i, j] == pytest.approx(math.log(t / predict_ms(space[j], m, n, k, params)), abs=1e-3)
                checked += 1
            else:
                assert math.isnan(res.values[i, j])
    assert checked > 20


def test_untuned_gemm_takes_the_cost_model_unless_asked(monkeypatch):
    none = ExperienceStore("/nonexistent/x.json")
    monkeypatch.delenv("ARGUS_GEMM_UNTUNED", raising=False)
    # (bucket m512_n8192_k512, K aligned for TMA: no shipped entry; the model-shape sweep's buckets are shipped since session 21)
    lk = lookup_config("gemm", 300, 5000, 304, gpu="NVIDIA H200", store=none)
    assert lk.source == "costmodel" and lk.config == costmodel_choice(300, 5000, 304)
    assert "cost model's first choice" in lk.detail and "no entry for key" in lk.detail
    assert "measured on" not in lk.detail   # bf16 tn: the calibration's own flavor
    # (fp16 -> fp32 nn: no shipped entry of either 2-byte dtype in that layout; nt and tn fall back to the bf16 entries since session 24)
    other = lookup_config("gemm", 320, 5000, 3000, "fp16", "fp32", "nn", gpu="NVIDIA H200", store=none)
    assert other.source == "costmodel" and other.detail.endswith("its corrections were measured on bf16 bf16 tn only")
    monkeypatch.setenv("ARGUS_GEMM_UNTUNED", "heuristic")
    lk = lookup_config("gemm", 300, 5000, 304, gpu="NVIDIA H200", store=none)
    assert lk.source == "heuristic" and lk.config == default_config(300, 5000, 304)
    # a tuned entry still wins over either untuned rule
    assert lookup_config("gemm", 4096, 4096, 4096, gpu="NVIDIA H200", store=none).source == "shipped"


def test_staged_problem_takes_the_cost_models_choice_and_says_so(monkeypatch):
    """A problem on the aligned-staging path (session 44): the cost model's first choice for its GEMM (the same
    TMA kernel over the staged copies), the detail naming the staged operands; ARGUS_GEMM_UNTUNED=heuristic still
    takes the heuristic's."""
    monkeypatch.delenv("ARGUS_GEMM_UNTUNED", raising=False)
    none = ExperienceStore("/nonexistent/x.json")
    lk = lookup_config("gemm", 4096, 33, 4096, gpu="NVIDIA H200", store=none)
    assert lk.source == "costmodel" and lk.config == costmodel_choice(4096, 33, 4096)
    assert "aligned-staging path (staged D)" in lk.detail
    monkeypatch.setenv("ARGUS_GEMM_UNTUNED", "heuristic")
    lk = lookup_config("gemm", 4096, 33, 4096, gpu="NVIDIA H200", store=none)
    assert lk.source == "heuristic" and lk.config == default_config(4096, 33, 4096)


def test_cross_validation_holds_each_projection_out(tmp_path):
    """bench/calibrate_costmodel.py --cv on a small sweep table: the held-out choice of a shape never uses its
    own projection group's residuals: poisoning them (one configuration measured 1000x faster than predicted)
    changes no held-out choice, while the same poison does change the in-sample choice."""
    sys.path.insert(0, str(ROOT / "bench"))
    import calibrate_costmodel

    full = json.loads((ROOT / "bench" / "data" / "gemm_sweep_bf16_bf16_tn_h200.json").read_text())
    keep = ["1024x4096x4096", "8192x4096x4096", "1024x14336x4096", "8192x14336x4096"]
    small = {**full, "shapes": {k: full["shapes"][k] for k in keep}}
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(small))
    params = calibrated()
    res = calibrate_costmodel.residuals_of(str(path), params)
    assert len(res.points) == 4
    out = calibrate_costmodel.cross_validate(str(path), params, res)
    assert out["groups"] == 2 and out["held_out"]["shapes"] == 4
    for row in out["held_out"]["rows"]:
        m, n, k = map(int, row["shape"].split("x"))
        other = res.without([p for p in res.points.tolist() if p[1:] == [n, k]])
        assert other.trend is None  # refitted on the rest, as cross_validate does
        other = calibrate_costmodel.with_trend(other, params, res.trend.weight, res.trend.alpha)
        expect = costmodel_choice(m, n, k, params=params, residuals=other)
        assert row["choice"] == table_key(expect, small["shapes"][row["shape"]]["kernels"])
    # poison the 4096 x 4096 projection's own rows: its held-out choices must not move
    target = next(j for j, key in enumerate(res.configs) if key.startswith("64x64x64_c1x1_pingpong_along_n1"))
    vals = res.values.copy()
    own = [i for i, p in enumerate(res.points.tolist()) if p[1:] == [4096, 4096]]
    vals[own, target] = math.log(1e-3)
    poisoned = calibrate_costmodel.with_trend(Residuals(res.flavor, res.configs, res.points, vals), params)
    out2 = calibrate_costmodel.cross_validate(str(path), params, poisoned, radius=0.0)
    before = {r["shape"]: r["choice"] for r in out["held_out"]["rows"]}
    after = {r["shape"]: r["choice"] for r in out2["held_out"]["rows"]}
    mine = [key for key in keep if key.endswith("x4096x4096")]
    assert {key: after[key] for key in mine} == {key: before[key] for key in mine}
    # the poison is strong enough to move every choice that sees it: the other projection's, and in-sample
    assert all(after[key] != before[key] for key in keep if key not in mine)
    pick = costmodel_choice(1024, 4096, 4096, params=params, residuals=poisoned)
    assert structure_key(pick) == res.configs[target]


def test_cross_validation_writes_its_picks_and_scores_redone_rows_only(tmp_path):
    """Session 45: --cv --picks-out writes each shape's held-out choice (kernel name and configuration, as
    sweep_gemm --refine --picks reads them); --cv-redone LABEL scores only the rows re-timed under that label, on
    only the kernels re-timed there (redo_kernels), and holds out each group WHOLE: on the graph table, with only
    one projection of a three-projection group re-timed, its choices are the full run's (review, session 45: the
    group was filtered before its projections were held out, and 7 of 9 choices differed)."""
    sys.path.insert(0, str(ROOT / "bench"))
    import calibrate_costmodel
    import sweep_gemm

    from argus_cutlass.generate import kernel_name

    path = ROOT / "bench" / "data" / "gemm_sweep_bf16_bf16_tn_graph_h200.json"
    full = json.loads(path.read_text())
    params = calibrated()
    res = calibrate_costmodel.residuals_of([str(ROOT / "bench" / "data" / "gemm_sweep_bf16_bf16_tn_h200.json"),
                                            str(path)], params)
    group = next(g for g in calibrate_costmodel.projection_groups(
        [tuple(int(x) for x in k.split("x")) for k in calibrate_costmodel._timed_rows(full)])
        if {(n, k) for _, n, k in g} >= {(4096, 14336), (4096, 12288)})
    marked = {f"{m}x{n}x{k}" for m, n, k in group if (n, k) == (4096, 14336)}
    assert marked and len({(n, k) for _, n, k in group}) >= 2
    part_table = {**full, "shapes": {key: dict(r) for key, r in full["shapes"].items()}}
    for key in marked:   # re-timed under "cv": two of its kernels, one made the fastest
        row = part_table["shapes"][key]
        keep = sorted((nm for nm, v in row["kernels"].items() if v), key=row["kernels"].get)[:2]
        row.update(redo="cv", redo_kernels=keep, kernels={**row["kernels"], keep[1]: row["kernels"][keep[0]] * 0.5})
    tpath = tmp_path / "graph_cv.json"
    tpath.write_text(json.dumps(part_table))
    out = calibrate_costmodel.cross_validate(str(path), params, res)
    part = calibrate_costmodel.cross_validate(str(tpath), params, res, redone="cv")
    assert {r["shape"] for r in part["held_out"]["rows"]} == marked
    assert {k: out["configs"][k] for k in marked} == {k: part["configs"][k] for k in marked}
    for r in part["held_out"]["rows"]:   # scored against the re-timed kernels only: keep[1] is now the best
        row = part_table["shapes"][r["shape"]]
        best = min(row["redo_kernels"], key=row["kernels"].get)
        assert best == row["redo_kernels"][1]
        assert (r["regret"] is None) == (r["choice"] not in row["redo_kernels"])
    # the picks file round-trips through sweep_gemm's loader (checked against the table)
    picks_file = tmp_path / "picks.json"
    assert calibrate_costmodel.main(["--cv", str(path), "--cv-residuals", str(ROOT / "bench" / "data" /
                                     "gemm_sweep_bf16_bf16_tn_h200.json"), "--cv-residuals", str(path),
                                     "--picks-out", str(picks_file)]) == 0
    picks = sweep_gemm.load_picks(picks_file, full)
    assert {k: v[0] for k, v in picks.items()} == {k: kernel_name(c) for k, c in out["configs"].items()}


def test_cross_validation_groups_near_twin_projections():
    """--cv holds out projections within CV_RADIUS of each other together (review, session 20: a near twin such as
    K = 3584 beside 4096 left in the training rows inflated the exact-projection score from 59 % to 67 %)."""
    sys.path.insert(0, str(ROOT / "bench"))
    import calibrate_costmodel

    shapes = [(m, n, k) for m in (1, 64) for n, k in ((4096, 4096), (4096, 3584), (14336, 4096), (512, 4096))]
    groups = calibrate_costmodel.projection_groups(shapes)
    as_sets = sorted(sorted({(n, k) for _, n, k in g}) for g in groups)
    assert as_sets == [[(512, 4096)], [(4096, 3584), (4096, 4096)], [(14336, 4096)]]
    assert all(len(g) == 2 * len({(n, k) for _, n, k in g}) for g in groups)   # every M of each projection
    assert len(calibrate_costmodel.projection_groups(shapes, 0.0)) == 4


def test_invalid_problem_is_refused_by_name_not_a_traceback(monkeypatch):
    """review, session 20: N = 0 reached the cost model and raised ZeroDivisionError."""
    from argus_cutlass.errors import ProblemError

    monkeypatch.delenv("ARGUS_GEMM_UNTUNED", raising=False)
    for m, n, k in ((4096, 0, 4096), (4096, 4096, -8), (0, 1, 1)):
        with pytest.raises(ProblemError) as exc:
            lookup_config("gemm", m, n, k, gpu="NVIDIA H200", store=ExperienceStore("/nonexistent/x.json"))
        assert exc.value.rule == "problem.size"
    with pytest.raises(ProblemError) as exc:
        lookup_config("attention", 128, 128, 128, gpu="NVIDIA H200", store=ExperienceStore("/nonexistent/x.json"))
    assert exc.value.rule == "lookup.kernel" and "lookup_attention_config" in str(exc.value)


def test_bad_untuned_rule_is_refused_by_name(monkeypatch):
    from argus_cutlass.settings import settings

    monkeypatch.setenv("ARGUS_GEMM_UNTUNED", "fastest")
    with pytest.raises(ProblemError) as exc:
        settings()
    assert exc.value.rule == "settings.gemm_untuned" and "ARGUS_GEMM_UNTUNED='fastest'" in str(exc.value)


def test_table_explains_a_costmodel_choice(monkeypatch, capsys, tmp_path):
    """argus-cutlass table on an untuned shape under ARGUS_GEMM_UNTUNED=costmodel (review, session 19: it
    raised KeyError 'costmodel')."""
    from argus_cutlass.cli import main

    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("ARGUS_GEMM_UNTUNED", "costmodel")
    assert main(["table", "--m", "7", "--n", "4104", "--k", "200", "--gpu", "NVIDIA H200"]) == 0
    assert "cost model's first choice" in capsys.readouterr().out


@pytest.mark.nvcc
@pytest.mark.parametrize("m,n,k,dtype,out_dtype,layout", [
    (8, 14336, 4096, "bf16", "fp32", "nt"),     # decode: a swap-AB choice under another output type and layout
    (3, 5120, 1048576 // 16, "fp16", "fp16", "tt"),
    (1000, 4096, 14336, "fp16", "fp32", "tn"),
    (8192, 3584, 4096, "bf16", "bf16", "nn"),
])
def test_untuned_choices_of_unmeasured_flavors_compile(m, n, k, dtype, out_dtype, layout):
    """The default untuned rule ranks flavors the calibration never measured with bf16 tn corrections: their
    choices go through the same verifier and must compile for sm_90a (the template's static_asserts included)."""
    from argus_cutlass.build import nvcc
    from argus_cutlass.kernels.gemm.program import build_program
    from argus_cutlass.render.gemm import render_gemm

    cfg = costmodel_choice(m, n, k, dtype, out_dtype, layout)
    assert cfg is not None and (cfg.dtype, cfg.out_dtype, cfg.layout) == (dtype, out_dtype, layout)
    program = build_program(cfg)
    ptx = nvcc.compile_cu(render_gemm(program), program.kernel_name(), "ptx").path.read_text()
    assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor" in ptx


@pytest.mark.parametrize("m,n,k,dtype,out_dtype,layout", [
    (300, 4096, 4096, "bf16", "bf16", "nt"),    # column-major A, lda = 300
    (8, 50257, 4096, "bf16", "bf16", "tn"),     # an odd vocabulary: ldd = 50257 (swap-AB at decode)
    (64, 64, 33, "fp16", "fp32", "tn"),         # K = 33: A and B staged
    (1, 1, 1, "bf16", "bf16", "tn"),            # everything staged
    (3000, 4095, 1024, "bf16", "fp32", "tn"),   # D staged, a full-size GEMM
])
def test_staged_problems_untuned_choice_builds_and_verifies_on_the_staged_program(m, n, k, dtype, out_dtype, layout,
                                                                                  monkeypatch):
    """The untuned choice of a problem on the aligned-staging path is the cost model's for the direct problem
    (session 44); the configuration it returns must build and pass the whole verifier (SMT tier included) as the
    staged program, with the StageCopy nodes of the problem's staged operands (:func:`generate.build` with
    :func:`generate.gemm_build_problem`, as the orchestrator does)."""
    from argus_cutlass.generate import build, gemm_build_problem
    from argus_cutlass.kernels.gemm.problem import GemmProblem
    from argus_cutlass.verify import verify_gemm

    monkeypatch.delenv("ARGUS_GEMM_UNTUNED", raising=False)
    problem = GemmProblem(m, n, k, dtype, out_dtype, layout).validate_any()
    lk = lookup_config("gemm", m, n, k, dtype, out_dtype, layout, gpu="no-such-gpu",
                       store=ExperienceStore("/nonexistent/x.json"))
    assert lk.source == "costmodel" and problem.staging()
    program = build(lk.config, gemm_build_problem(problem))
    staged = {c.operand for c in program.stage_copies}
    assert staged == {s.name for s in problem.staging()}
    report = verify_gemm(program, smt=True)
    assert report.ok and not report.unknowns, [v.rule for v in report.violations]


def test_residuals_of_several_tables_take_each_shapes_row_from_the_last_that_timed_it(tmp_path):
    """calibrate_costmodel --residuals A --residuals B (session 28: the per-launch sweep, then its graph-timed
    table): a shape's residuals come from B when B re-timed it (a graph table's rows not yet re-timed do not
    count), else from A; a table of another flavor is refused naming it."""
    sys.path.insert(0, str(ROOT / "bench"))
    import calibrate_costmodel

    full = json.loads((ROOT / "bench" / "data" / "gemm_sweep_bf16_bf16_tn_h200.json").read_text())
    keep = ["1024x4096x4096", "8192x4096x4096"]
    a = {**full, "shapes": {k: full["shapes"][k] for k in keep}}
    halved = {nm: v and v / 2 for nm, v in full["shapes"][keep[0]]["kernels"].items()}
    b = {**a, "timing": "graph", "shapes": {keep[0]: {"timing": "graph", "kernels": halved},
                                            keep[1]: {"kernels": {nm: 1e-6 for nm in halved}}}}   # not re-timed
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    pa.write_text(json.dumps(a))
    pb.write_text(json.dumps(b))
    params = calibrated()
    only_a = calibrate_costmodel.residuals_of(str(pa), params)
    both = calibrate_costmodel.residuals_of([str(pa), str(pb)], params)
    rows = {tuple(p): i for i, p in enumerate(both.points.tolist())}
    i0, i1 = rows[(1024, 4096, 4096)], rows[(8192, 4096, 4096)]
    seen = np.isfinite(only_a.values[i0])
    assert seen.sum() > 5
    assert np.allclose(both.values[i0][seen], only_a.values[i0][seen] - math.log(2))   # B's halved times
    assert np.array_equal(np.isfinite(both.values[i1]), np.isfinite(only_a.values[i1]))
    assert np.allclose(both.values[i1][np.isfinite(both.values[i1])], only_a.values[i1][np.isfinite(only_a.values[i1])])
    other = tmp_path / "fp16.json"
    other.write_text(json.dumps({**a, "flavor": {"dtype": "fp16", "out_dtype": "fp16", "layout": "tn"}}))
    with pytest.raises(SystemExit, match="fp16.json: a fp16_fp16_tn table"):
        calibrate_costmodel.residuals_of([str(pa), str(other)], params)


def _planted_trend_residuals(space, points):
    """Residuals whose values follow a known linear trend: per structure an intercept, a shared slope on log2 M,
    and a shared slope on the last wave's fill (a Trend feature)."""
    from argus_cutlass.agent.costmodel import trend_features

    keys = tuple(structure_key(c) for c in space)
    params = calibrated()
    vals = np.zeros((len(points), len(space)))
    for i, (m, n, k) in enumerate(points):
        for j, c in enumerate(space):
            fill = trend_features(c, m, n, k, params)[3]
            vals[i, j] = 0.01 * (j % 7) + 0.03 * math.log2(m) - 0.2 * fill
    return Residuals(("bf16", "bf16", "tn"), keys, np.array(points, dtype=np.int64), vals)


def test_trend_fit_recovers_a_planted_linear_residual_and_round_trips():
    from argus_cutlass.agent.costmodel import Trend, trend_features

    space = [c for c in declared_subspace() if not c.swap_ab][:12]
    pts = [(m, n, k) for m in (64, 256, 1024, 4096) for n in (1024, 4096, 14336) for k in (2048, 8192)]
    res = _planted_trend_residuals(space, pts)
    trend = Trend.fit(res, space, calibrated(), alpha=1e-6)
    params = calibrated()
    for m, n, k in [(512, 2048, 4096), (2048, 8192, 3000)]:  # not calibration shapes
        for j, c in enumerate(space):
            want = 0.01 * (j % 7) + 0.03 * math.log2(m) - 0.2 * trend_features(c, m, n, k, params)[3]
            got = trend.predict(structure_key(c), trend_features(c, m, n, k, params), m, n, k)
            assert got == pytest.approx(want, abs=0.02)
    again = Trend.from_json(json.loads(json.dumps(trend.to_json())))
    f = trend_features(space[3], 700, 3000, 5000, params)
    assert again.predict(structure_key(space[3]), f, 700, 3000, 5000) == pytest.approx(
        trend.predict(structure_key(space[3]), f, 700, 3000, 5000), abs=1e-4)
    assert trend.predict("no_such_structure", f, 700, 3000, 5000) is None
    with pytest.raises(ValueError, match="configs do not match"):
        Trend.fit(res, space[::-1], calibrated())
    with pytest.raises(ValueError, match="feature slopes"):
        Trend.from_json({**trend.to_json(), "shared": [0.0]})


def test_trend_weighs_nothing_at_a_measured_shape_and_its_weight_away_from_them():
    from argus_cutlass.agent.costmodel import Trend

    space = declared_subspace()
    keys = tuple(structure_key(c) for c in space)
    target = next(c for c in space if c.tile_m == 64 and c.tile_n == 64 and not c.swap_ab and c.cluster_m == 1)
    vals = np.zeros((1, len(keys)))
    res = Residuals(("bf16", "bf16", "tn"), keys, np.array([[1024, 4096, 4096]]), vals)
    # a trend that makes the target 100x faster everywhere
    per_key = np.zeros((len(keys), 4))
    per_key[keys.index(structure_key(target)), 0] = math.log(0.01)
    trend = Trend(keys, per_key, np.zeros(8), np.zeros(8), np.zeros(9), 0.0, weight=0.5, full_at=0.5)
    with_trend = dataclasses.replace(res, trend=trend)
    assert trend.weight_at(0.0) == 0.0 and trend.weight_at(0.25) == pytest.approx(0.25) and trend.weight_at(3) == 0.5
    # at the measured shape the measurement alone ranks; 1.4 away (K x 2.6) the trend moves the choice
    assert costmodel_choice(1024, 4096, 4096, residuals=with_trend) == costmodel_choice(1024, 4096, 4096, residuals=res)
    assert costmodel_choice(1024, 4096, 4096, residuals=res) != target
    assert costmodel_choice(1024, 4096, 10752, residuals=with_trend) == target
    assert costmodel_choice(1024, 4096, 10752, residuals=res) != target
    # the file format keeps it; cross-validation's without() drops it (fitted on the dropped shapes too)
    assert Residuals.from_json(with_trend.to_json()).trend.weight_at(3) == 0.5
    assert with_trend.without([(1024, 4096, 4096)]).trend is None


def test_shipped_calibration_has_a_trend_and_cross_validation_refits_it(monkeypatch):
    sys.path.insert(0, str(ROOT / "bench"))
    import calibrate_costmodel
    from argus_cutlass.agent.costmodel import Trend

    shipped = calibrated_residuals()
    assert shipped.trend is not None and 0 < shipped.trend.weight <= 1
    assert set(shipped.trend.keys) <= set(shipped.configs)
    fits = []
    real = Trend.fit.__func__

    def counting(cls, res, *a, **kw):
        fits.append(len(res.points))
        return real(cls, res, *a, **kw)

    monkeypatch.setattr(Trend, "fit", classmethod(counting))
    small = shipped.without([tuple(p) for p in shipped.points.tolist()[40:]])
    small = calibrate_costmodel.with_trend(small, calibrated())
    assert small.trend is not None and fits == [40]
    assert calibrate_costmodel.with_trend(small, calibrated(), weight=0).trend is None


def test_a_malformed_trend_section_is_refused_with_the_rule_it_breaks():
    from argus_cutlass.agent.costmodel import Trend

    good = calibrated_residuals().trend.to_json()
    Trend.from_json(json.loads(json.dumps(good)))
    for bad, rule in [({"shared": [None] + good["shared"][1:]}, "not a finite number"),
                      ({"bias": float("nan")}, "not a finite number"),
                      ({"features": good["features"][::-1]}, "refit it"),
                      ({"weight": 5.0}, r"weight must be in \[0, 1\]"),
                      ({"full_at": 0.0}, "full_at must be > 0")]:
        with pytest.raises(ValueError, match=rule):
            Trend.from_json({**good, **bad})


def test_trend_predictions_stay_inside_the_fitted_residual_range():
    from argus_cutlass.agent.costmodel import trend_features

    trend = calibrated_residuals().trend
    lo, hi = trend.clip
    assert math.isfinite(lo) and math.isfinite(hi) and lo < 0 < hi
    params = calibrated()
    seen = []
    for c in declared_subspace():
        key = structure_key(c)
        for m, n, k in [(20000, 131072, 4096), (1, 64, 1 << 17), (8192, 8192, 8192)]:
            v = trend.predict(key, trend_features(c, m, n, k, params), m, n, k)
            if v is not None:
                seen.append(v)
    assert seen and all(lo <= v <= hi for v in seen)
    assert min(seen) == lo or max(seen) == hi  # the far shapes do reach the clamp (the test can fail)


def test_trend_fits_per_family_slopes_and_reads_files_without_them():
    """A residual whose wave-fill slope differs between two tile families (session 48): the per-family slopes recover
    it, round-trip through JSON, and a trend section written before them still loads (no family terms)."""
    from argus_cutlass.agent.costmodel import Trend, trend_family, trend_features

    params = calibrated()
    space = [c for c in declared_subspace() if not c.swap_ab][:12]
    fams = sorted({trend_family(c) for c in space})
    assert len(fams) >= 2
    pts = [(m, n, k) for m in (64, 256, 1024, 4096) for n in (1024, 4096, 14336) for k in (2048, 8192)]
    slope = {f: (-0.3 if i % 2 else 0.2) for i, f in enumerate(fams)}
    vals = np.array([[0.01 * (j % 5) + slope[trend_family(c)] * trend_features(c, m, n, k, params)[3]
                      for j, c in enumerate(space)] for m, n, k in pts])
    res = Residuals(("bf16", "bf16", "tn"), tuple(structure_key(c) for c in space), np.array(pts, dtype=np.int64), vals)
    trend = Trend.fit(res, space, params, alpha=1e-6)
    assert trend.families == tuple(fams) and trend.per_family.shape == (len(fams), 6)
    for m, n, k in [(512, 2048, 4096), (2048, 8192, 3000)]:  # not calibration shapes
        for j, c in enumerate(space):
            f = trend_features(c, m, n, k, params)
            assert trend.predict(structure_key(c), f, m, n, k) == pytest.approx(
                0.01 * (j % 5) + slope[trend_family(c)] * f[3], abs=0.02)
    again = Trend.from_json(json.loads(json.dumps(trend.to_json())))
    f = trend_features(space[3], 700, 3000, 5000, params)
    assert again.predict(structure_key(space[3]), f, 700, 3000, 5000) == pytest.approx(
        trend.predict(structure_key(space[3]), f, 700, 3000, 5000), abs=1e-4)
    old = {key: v for key, v in trend.to_json().items()
           if key not in ("family_features", "families", "key_family", "per_family")}
    assert Trend.from_json(old).per_family is None
    with pytest.raises(ValueError, match="per-family slopes on"):
        Trend.from_json({**trend.to_json(), "family_features": ["waves"]})
    with pytest.raises(ValueError, match="11 family indices for 12 keys"):
        dataclasses.replace(trend, key_family=trend.key_family[:-1])


@pytest.mark.parametrize("edit, match", [
    (lambda t: t.pop("per_family"), "per-family section incomplete: family_features, families, key_family given, "
                                    "per_family missing"),
    (lambda t: t.update(per_family=None), "per_family missing or null"),
    (lambda t: t.pop("families"), "families missing"),
    (lambda t: t["key_family"].__setitem__(0, -1), r"key_family\[0\] = -1 is not an integer in \[0, "),
    (lambda t: t["key_family"].__setitem__(1, True), r"key_family\[1\] = True is not an integer"),
    (lambda t: t["key_family"].__setitem__(2, 1.7), r"key_family\[2\] = 1.7 is not an integer"),
    (lambda t: t["key_family"].pop(), "family indices for"),
    (lambda t: t["per_family"].pop(), "expected .* rows"),
    (lambda t: t["per_family"][0].pop(), "expected .* rows"),
    (lambda t: t.update(per_family=[x for row in t["per_family"] for x in row]), "expected .* rows"),
    (lambda t: t["families"].__setitem__(1, t["families"][0]), "a family named twice|is of family"),
    (lambda t: t["families"].__setitem__(0, 7), "every family is a name"),
])
def test_malformed_per_family_section_is_refused_by_name(edit, match):
    """The shipped trend's per-family fields are all-or-none (the rest was fitted with them: a trend run without them
    is a model nobody fitted), integer indices in range, one row of slopes per family, each key's index naming its
    own family; each break is a ValueError naming the field."""
    from argus_cutlass.agent.costmodel import Trend

    trend = json.loads((Path(__file__).resolve().parents[2] / "agent" / "costmodel_h200.json").read_text())
    trend = trend["residuals"]["trend"]
    assert Trend.from_json(json.loads(json.dumps(trend))).per_family is not None
    bad = json.loads(json.dumps(trend))
    edit(bad)
    with pytest.raises(ValueError, match=match):
        Trend.from_json(bad)


def test_key_index_naming_another_family_is_refused():
    """An index that points at another family's slopes is caught against the key's own family (family_of_key)."""
    from argus_cutlass.agent.costmodel import Trend, family_of_key

    trend = json.loads((Path(__file__).resolve().parents[2] / "agent" / "costmodel_h200.json").read_text())
    trend = trend["residuals"]["trend"]
    i = next(i for i, k in enumerate(trend["keys"]) if trend["families"][trend["key_family"][i]] == family_of_key(k))
    trend["key_family"][i] = (trend["key_family"][i] + 1) % len(trend["families"])
    with pytest.raises(ValueError, match=rf"key_family\[{i}\]: key .* is of family"):
        Trend.from_json(trend)
    with pytest.raises(ValueError, match="expected a JSON object, got list"):
        Trend.from_json([1, 2])
