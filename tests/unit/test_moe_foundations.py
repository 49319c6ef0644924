"""The MoE family's foundations on the CPU (numpy only): problem rules, router-output checks, the
routing plan's invariants and tiles for every generator, and the float64 reference."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from argus_cutlass.errors import ConfigError, ProblemError
from argus_cutlass.kernels.moe.problem import MODEL_SHAPES, MoEProblem
from argus_cutlass.kernels.moe.reference import moe_reference_numpy
from argus_cutlass.hw.routing import ROUTING_KINDS, RoutingPlan, make_routing, tile_violations

BASE = dict(tokens=256, experts=8, topk=2, hidden=4096, ffn=14336)


# ---- problem rules -------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, rule", [
    (dict(tokens=0), "problem.size"),
    (dict(experts=0), "problem.size"),
    (dict(hidden=-8), "problem.size"),
    (dict(ffn=8.0), "problem.size"),
    (dict(topk=True), "problem.size"),
    (dict(tokens=2**20 + 1), "problem.token_range"),
    (dict(topk=9), "problem.topk"),
    (dict(dtype="fp32"), "problem.dtype"),
    (dict(hidden=4100), "tma.contiguous_extent"),
    (dict(ffn=1404), "tma.contiguous_extent"),
])
def test_bad_problems_are_refused_with_their_rule(kwargs, rule):
    p = MoEProblem(**{**BASE, **kwargs})
    with pytest.raises(ProblemError) as exc:
        p.validate()
    assert exc.value.rule == rule
    assert [e.rule for e in p.violations()][0] == rule


def test_token_range_has_a_hint_and_the_bound_is_inclusive():
    MoEProblem(**{**BASE, "tokens": 2**20}).validate()
    err = MoEProblem(**{**BASE, "tokens": 2**20 + 1}).violations()[0]
    assert err.rule == "problem.token_range" and err.hint and "2^20" in err.hint


def test_several_violations_are_all_listed():
    p = MoEProblem(tokens=4, experts=2, topk=3, hidden=12, ffn=20)
    assert [e.rule for e in p.violations()] == ["problem.topk", "tma.contiguous_extent", "tma.contiguous_extent"]
    with pytest.raises(ProblemError) as exc:
        p.validate()
    assert exc.value.rule == "problem.topk" and "3 problems" in str(exc.value)


@pytest.mark.parametrize("model", sorted(MODEL_SHAPES))
def test_model_shapes_are_valid_problems(model):
    e, k, h, i = MODEL_SHAPES[model]
    p = MoEProblem.for_model(model, 4096).validate()
    assert (p.experts, p.topk, p.hidden, p.ffn) == (e, k, h, i)


def test_model_shapes_are_the_anchors():
    assert MODEL_SHAPES == {"mixtral": (8, 2, 4096, 14336), "qwen3-30b-a3b": (128, 8, 2048, 768),
                            "deepseek-v2-lite": (64, 6, 2048, 1408)}
    with pytest.raises(ProblemError) as exc:
        MoEProblem.for_model("gpt-oss", 1)
    assert exc.value.rule == "problem.model"


def test_flops_bytes_and_floor():
    p = MoEProblem(tokens=4, experts=8, topk=2, hidden=64, ffn=32)
    assert p.flops() == 2 * 8 * (2 * 32 * 64 + 64 * 32)
    counts = [3, 0, 0, 5, 0, 0, 0, 0]
    assert p.flops(counts) == p.flops()
    assert p.flops([1, 0, 0, 0, 0, 0, 0, 0]) == 2 * (3 * 32 * 64)
    assert p.active_experts(counts) == 2
    assert p.weight_bytes_read(counts) == 2 * 3 * 32 * 64 * 2
    assert p.weight_bytes_read() == 8 * 3 * 32 * 64 * 2  # min(E, T*k) = 8
    assert MoEProblem(tokens=1, experts=128, topk=8, hidden=64, ffn=32).active_experts() == 8
    ms = p.floor_ms(counts, hbm_bytes_per_s=1e9)
    assert ms == pytest.approx((p.weight_bytes_read(counts) + 2 * 4 * 64 * 2) / 1e9 * 1e3)
    # Mixtral at one token: two experts' weights at 4.8 TB/s, about 147 us
    mix = MoEProblem.for_model("mixtral", 1)
    assert mix.floor_ms([1, 1, 0, 0, 0, 0, 0, 0]) == pytest.approx(2 * 3 * 14336 * 4096 * 2 / 4.8e12 * 1e3, rel=1e-3)
    with pytest.raises(ProblemError):
        p.floor_ms(counts, hbm_bytes_per_s=0)


# ---- router output checks ---------------------------------------------------------------------

def _problem(t=4, e=8, k=2):
    return MoEProblem(tokens=t, experts=e, topk=k, hidden=64, ffn=32)


def test_valid_routing_passes():
    ids, w = make_routing("uniform", 16, 8, 2, seed=1)
    p = _problem(16, 8, 2)
    assert p.check_routing(ids, w) is p
    assert p.routing_violations(ids.astype(np.int64), w.astype(np.float64)) == []


@pytest.mark.parametrize("mutate, words", [
    (lambda ids, w: (ids[:3], w[:3]), "shape"),
    (lambda ids, w: (ids[:, :1], w), "shape"),
    (lambda ids, w: (ids, w[:, :1]), "topk_weights has shape"),
    (lambda ids, w: (ids.astype(np.float32), w), "integers"),
    (lambda ids, w: (np.where(np.arange(8).reshape(4, 2) == 5, 8, ids), w), "topk_ids[2, 1] = 8"),
    (lambda ids, w: (np.where(np.arange(8).reshape(4, 2) == 2, -1, ids), w), "topk_ids[1, 0] = -1"),
    (lambda ids, w: (np.array([[0, 1], [2, 3], [5, 5], [6, 6]]), w), "topk_ids[2, 1] = 5 repeats topk_ids[2, 0]"),
    (lambda ids, w: (ids, np.where(np.arange(8).reshape(4, 2) == 7, np.nan, w)), "topk_weights[3, 1]"),
    (lambda ids, w: (ids, np.where(np.arange(8).reshape(4, 2) == 0, np.inf, w)), "topk_weights[0, 0]"),
])
def test_bad_routing_is_refused_naming_the_first_bad_pair(mutate, words):
    ids, w = make_routing("uniform", 4, 8, 2, seed=3)
    bad_ids, bad_w = mutate(ids, w)
    with pytest.raises(ProblemError) as exc:
        _problem().check_routing(bad_ids, bad_w)
    assert exc.value.rule == "problem.routing"
    assert words in str(exc.value)


def test_duplicate_expert_names_the_later_slot():
    ids = np.array([[1, 2, 3], [4, 0, 4]], dtype=np.int32)
    errs = _problem(2, 8, 3).routing_violations(ids, np.ones((2, 3), np.float32))
    assert len(errs) == 1 and "topk_ids[1, 2] = 4 repeats topk_ids[1, 0]" in errs[0].message


# ---- routing plans ------------------------------------------------------------------------------

def _cases():
    for kind, t, k, e in itertools.product(("uniform", "skewed", "zero_experts", "all_to_one"), (1, 16, 256),
                                           (1, 2, 6, 8), (8, 64)):
        if k > e or (kind == "zero_experts" and k >= e):
            continue
        yield kind, t, k, e, None
    yield "sizes", 323, 1, 3, (128, 130, 65)
    yield "sizes", 256, 2, 5, (128, 130, 65, 0, 189)
    yield "sizes", 130, 3, 8, (128, 130, 0, 0, 65, 0, 67, 0)


CASES = list(_cases())


@pytest.mark.parametrize("kind, t, k, e, sizes", CASES)
def test_generated_routing_is_valid_and_its_plan_holds(kind, t, k, e, sizes):
    ids, w = make_routing(kind, t, e, k, seed=t * 31 + k, sizes=sizes)
    assert ids.dtype == np.int32 and ids.shape == (t, k) and w.dtype == np.float32 and w.shape == (t, k)
    assert np.allclose(w.sum(axis=1), 1.0, atol=1e-6) and (w > 0).all()
    MoEProblem(tokens=t, experts=e, topk=k, hidden=64, ffn=32).check_routing(ids, w)
    plan = RoutingPlan.from_ids(ids, e)
    assert plan.check(stable=True) == []
    assert plan.offsets.dtype == np.int64 and plan.permuted_row.dtype == np.int64
    assert plan.offsets[0] == 0 and plan.offsets[-1] == t * k
    # the rows of the permuted order, read through source, are sorted by expert
    assert (np.diff(plan.expert_of_row()) >= 0).all()
    if kind == "sizes":
        assert list(plan.counts) == list(sizes) + [0] * (e - len(sizes))
    if kind == "zero_experts":
        assert (plan.counts == 0).any()
        if e - 2 >= max(k, e // 2):
            assert plan.counts[0] == 0 and plan.counts[-1] == 0
    if kind == "all_to_one":
        assert (ids[:, 0] == 0).all() and plan.counts[0] == t
    if kind == "skewed" and t >= 16:
        assert plan.counts.max() >= 0.7 * t


def test_the_stable_order_is_by_expert_then_token_then_slot():
    ids = np.array([[2, 0], [0, 1], [2, 1]])
    plan = RoutingPlan.from_ids(ids, 4)
    assert list(plan.counts) == [2, 2, 2, 0] and list(plan.offsets) == [0, 2, 4, 6, 6]
    # (t, j) -> s = t*k + j: expert 0: s=1, 2; expert 1: s=3, 5; expert 2: s=0, 4
    assert list(plan.source) == [1, 2, 3, 5, 0, 4]
    assert plan.permuted_row.tolist() == [[4, 0], [1, 2], [5, 3]]


def _swap_rows(plan, s1, s2):
    pr = plan.permuted_row.copy().reshape(-1)
    pr[s1], pr[s2] = pr[s2], pr[s1]
    return dataclasses.replace(plan, permuted_row=pr.reshape(plan.permuted_row.shape))


def test_swapped_permuted_rows_are_caught_with_a_counterexample():
    ids, _ = make_routing("uniform", 16, 8, 2, seed=5)
    plan = RoutingPlan.from_ids(ids, 8)
    flat = ids.reshape(-1)
    s1 = 0
    s2 = int(np.flatnonzero(flat != flat[0])[0])
    bad = _swap_rows(plan, s1, s2).check()
    kinds = {v.split(":")[0] for v in bad}
    assert "inverse" in kinds and "group" in kinds and "bijection" not in kinds
    inv = next(v for v in bad if v.startswith("inverse"))
    assert f"(token {s1 // 2}, slot {s1 % 2})" in inv
    grp = next(v for v in bad if v.startswith("group"))
    assert "outside [off_" in grp


def test_swapping_rows_of_one_group_keeps_the_invariants_but_not_the_stable_order():
    ids = np.array([[3, 1], [3, 0], [2, 3]])
    plan = RoutingPlan.from_ids(ids, 4)
    # (0, 0) and (1, 0) both go to expert 3: swap their rows and fix source
    p2 = _swap_rows(plan, 0, 2)
    src = plan.source.copy()
    r0, r1 = plan.permuted_row[0, 0], plan.permuted_row[1, 0]
    src[r0], src[r1] = src[r1], src[r0]
    p2 = dataclasses.replace(p2, source=src)
    assert p2.check() == []
    stable = p2.check(stable=True)
    assert len(stable) == 1 and stable[0].startswith("stable: row")


def test_a_duplicated_row_breaks_the_bijection():
    ids, _ = make_routing("uniform", 16, 8, 2, seed=6)
    plan = RoutingPlan.from_ids(ids, 8)
    pr = plan.permuted_row.copy()
    pr[3, 1] = pr[0, 0]
    bad = dataclasses.replace(plan, permuted_row=pr).check()
    bij = [v for v in bad if v.startswith("bijection")]
    assert bij and "both map to row" in bij[0] and "gets no (token, slot)" in bij[0]
    pr[3, 1] = 32
    bad = dataclasses.replace(plan, permuted_row=pr).check()
    assert any(v.startswith("bijection") and "row 32, outside [0, 32)" in v for v in bad)


@pytest.mark.parametrize("e, delta, moves_a_row", [(1, 1, True), (4, -1, True), (3, -1, False), (8, 1, False),
                                                  (0, 1, True)])
def test_an_offset_off_by_one_is_caught(e, delta, moves_a_row):
    ids, _ = make_routing("sizes", 64, 8, 2, seed=7, sizes=(16, 20, 0, 30, 10, 12, 0, 40))
    plan = RoutingPlan.from_ids(ids, 8)
    off = plan.offsets.copy()
    off[e] += delta
    bad = dataclasses.replace(plan, offsets=off).check()
    assert bad and all(v.split(":")[0] in ("offsets", "group") for v in bad)
    assert any(v.startswith("offsets") for v in bad)
    # a boundary moved into a non-empty group leaves one of its rows outside [off_e, off_{e+1})
    assert any(v.startswith("group") and "routes to expert" in v for v in bad) == moves_a_row


def test_wrong_counts_and_bad_shapes_are_caught():
    ids, _ = make_routing("uniform", 8, 4, 2, seed=8)
    plan = RoutingPlan.from_ids(ids, 4)
    cnt = plan.counts.copy()
    cnt[0] += 1
    cnt[1] -= 1
    bad = dataclasses.replace(plan, counts=cnt).check()
    assert any(v.startswith("counts: count_0=") for v in bad)
    bad = dataclasses.replace(plan, source=plan.source[:-1]).check()
    assert bad == ["shape: source has shape (15,), expected (16,)"]


def test_from_ids_refuses_bad_ids():
    with pytest.raises(ProblemError) as exc:
        RoutingPlan.from_ids(np.array([[0, 4]]), 4)
    assert exc.value.rule == "problem.routing" and "topk_ids[0, 1]=4" in str(exc.value)
    with pytest.raises(ProblemError):
        RoutingPlan.from_ids(np.array([0.0, 1.0]), 4)


@pytest.mark.parametrize("kwargs, rule", [
    (dict(kind="zero_experts", tokens=4, experts=4, topk=4), "problem.routing"),
    (dict(kind="sizes", tokens=4, experts=2, topk=1), "problem.routing"),
    (dict(kind="sizes", tokens=4, experts=2, topk=1, sizes=(3, 2)), "problem.routing"),
    (dict(kind="sizes", tokens=4, experts=2, topk=2, sizes=(5, 3)), "problem.routing"),
    (dict(kind="sizes", tokens=4, experts=2, topk=1, sizes=(1, 1, 2)), "problem.routing"),
    (dict(kind="zipf", tokens=4, experts=2, topk=1), "problem.routing"),
    (dict(kind="uniform", tokens=4, experts=2, topk=3), "problem.topk"),
    (dict(kind="uniform", tokens=0, experts=2, topk=1), "problem.size"),
])
def test_make_routing_refuses_what_it_cannot_realise(kwargs, rule):
    with pytest.raises(ProblemError) as exc:
        make_routing(**kwargs)
    assert exc.value.rule == rule


def test_generators_are_seeded():
    for kind in ROUTING_KINDS:
        kw = dict(sizes=(8, 8)) if kind == "sizes" else {}
        a = make_routing(kind, 8, 4 if kind != "sizes" else 2, 2, seed=11, **kw)
        b = make_routing(kind, 8, 4 if kind != "sizes" else 2, 2, seed=11, **kw)
        assert all(np.array_equal(x, y) for x, y in zip(a, b))


# ---- tiles ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("tile_m", [1, 16, 64, 128, 256])
@pytest.mark.parametrize("kind, t, k, e, sizes", [c for c in CASES if c[1] != 1 or c[0] == "sizes"][::3])
def test_tiles_never_straddle_groups_and_cover_every_row_once(kind, t, k, e, sizes, tile_m):
    ids, _ = make_routing(kind, t, e, k, seed=t + k, sizes=sizes)
    plan = RoutingPlan.from_ids(ids, e)
    tiles = plan.tiles(tile_m)
    assert tile_violations(plan, tiles, tile_m) == []
    assert len(tiles) == sum(-(-int(c) // tile_m) for c in plan.counts)
    assert {ex for ex, _, _ in tiles} == {ex for ex in range(e) if plan.counts[ex] > 0}


def test_tiles_of_sizes_128_130_65():
    ids, _ = make_routing("sizes", 323, 3, 1, sizes=(128, 130, 65))
    plan = RoutingPlan.from_ids(ids, 3)
    assert plan.tiles(128) == [(0, 0, 128), (1, 128, 128), (1, 256, 2), (2, 258, 65)]
    assert plan.tiles(64) == [(0, 0, 64), (0, 64, 64), (1, 128, 64), (1, 192, 64), (1, 256, 2), (2, 258, 64),
                              (2, 322, 1)]


def test_bad_tiles_are_caught():
    ids, _ = make_routing("sizes", 323, 4, 1, sizes=(128, 0, 130, 65))
    plan = RoutingPlan.from_ids(ids, 4)
    straddle = [(0, 0, 128), (2, 128, 128), (2, 256, 67)]   # the last runs into group 3
    assert any("leave group 2" in v for v in tile_violations(plan, straddle, 128))
    empty = plan.tiles(128) + [(1, 128, 1)]
    assert any("expert 1 has no row" in v for v in tile_violations(plan, empty, 128))
    missing = plan.tiles(128)[:-1]
    assert any(v.startswith("cover: row 258 is in no tile") for v in tile_violations(plan, missing, 128))
    twice = plan.tiles(128) + [(3, 300, 5)]
    assert any(v.startswith("cover: row 300 is in 2 tiles") for v in tile_violations(plan, twice, 128))
    assert any("expected 1..64" in v for v in tile_violations(plan, plan.tiles(128), 64))
    with pytest.raises(ConfigError):
        plan.tiles(0)


# ---- reference --------------------------------------------------------------------------------------

def _naive(x, ids, weights, w13, w2):
    t_, k_ = ids.shape
    i = w13.shape[1] // 2
    y = np.zeros((t_, x.shape[1]))
    for t in range(t_):
        for j in range(k_):
            e = int(ids[t, j])
            g = np.array([sum(x[t, c] * w13[e, r, c] for c in range(x.shape[1])) for r in range(i)])
            u = np.array([sum(x[t, c] * w13[e, i + r, c] for c in range(x.shape[1])) for r in range(i)])
            h = g / (1.0 + np.exp(-g)) * u
            y[t] += weights[t, j] * np.array([sum(h[r] * w2[e, c, r] for r in range(i))
                                              for c in range(x.shape[1])])
    return y


@pytest.mark.parametrize("kind, t, e, k", [("uniform", 5, 4, 2), ("zero_experts", 6, 6, 2),
                                           ("all_to_one", 3, 5, 3), ("skewed", 7, 3, 1)])
def test_numpy_reference_equals_a_naive_per_token_loop(kind, t, e, k):
    rng = np.random.default_rng(t * e + k)
    h, i = 8, 16
    x = rng.standard_normal((t, h)).astype(np.float32)
    w13 = (rng.standard_normal((e, 2 * i, h)) / np.sqrt(h)).astype(np.float32)
    w2 = (rng.standard_normal((e, h, i)) / np.sqrt(i)).astype(np.float32)
    ids, wts = make_routing(kind, t, e, k, seed=1)
    y = moe_reference_numpy(x, ids, wts, w13, w2)
    assert y.dtype == np.float64 and y.shape == (t, h)
    ref = _naive(x.astype(np.float64), ids, wts.astype(np.float64), w13.astype(np.float64), w2.astype(np.float64))
    np.testing.assert_allclose(y, ref, rtol=1e-12, atol=1e-12)


def test_numpy_reference_is_linear_in_the_weights_and_rejects_bad_shapes():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 8))
    w13 = rng.standard_normal((3, 16, 8))
    w2 = rng.standard_normal((3, 8, 8))
    ids = np.array([[0, 1], [1, 2], [2, 0], [0, 2]])
    w = rng.random((4, 2))
    y = moe_reference_numpy(x, ids, w, w13, w2)
    y0 = moe_reference_numpy(x, ids, w * np.array([1.0, 0.0]), w13, w2)
    y1 = moe_reference_numpy(x, ids, w * np.array([0.0, 1.0]), w13, w2)
    np.testing.assert_allclose(y, y0 + y1, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError):
        moe_reference_numpy(x, ids, w, w13, w2[:, :, :4])
    with pytest.raises(ValueError):
        moe_reference_numpy(x, ids[:3], w[:3], w13, w2)
