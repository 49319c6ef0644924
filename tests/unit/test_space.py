"""The typed GEMM search space (generic fragments from ``plan/fragments.py``) and the single
feasibility function (build the program, run the verifier)."""

from __future__ import annotations

import random

import pytest

from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.space import (
    EnumFragment,
    GemmSpace,
    IntRangeFragment,
    derive,
    feasible,
    knob_values,
)
from argus_cutlass.kernels.gemm.program import build_program
from argus_cutlass.verify import verify_gemm


def small_space() -> GemmSpace:
    frags = {
        "tile_m": EnumFragment((64, 128), 128),
        "tile_n": EnumFragment((128, 256), 256),
        "tile_k": EnumFragment((64, 128), 64),
        "cluster": EnumFragment(((1, 1), (2, 1)), (2, 1)),
        "stages": IntRangeFragment(3, 6, 4),
        "schedule": EnumFragment(("cooperative", "pingpong"), "cooperative"),
        "raster": EnumFragment(("along_n",), "along_n"),
        "swizzle": EnumFragment((1,), 1),
        "epi_n": EnumFragment((32,), 32),
        "decomposition": EnumFragment((("persistent", 1),), ("persistent", 1)),
    }
    return GemmSpace(fragments=frags)


def test_fragments_are_generic_and_shared():
    """The fragment classes live in ``plan/`` (family-free) and the GEMM space re-exports them;
    ``plan/`` imports neither a family nor the verifier."""
    import ast
    import importlib.util
    from pathlib import Path

    from argus_cutlass.plan import fragments

    assert EnumFragment is fragments.EnumFragment and IntRangeFragment is fragments.IntRangeFragment
    plan_dir = Path(importlib.util.find_spec("argus_cutlass.plan").origin).parent
    for path in plan_dir.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert not name.startswith(("argus_cutlass.verify", "argus_cutlass.kernels")), (path.name, name)


def test_fragment_defaults_and_neighbours():
    f = EnumFragment((64, 128, 256), 128)
    assert f.neighbours(128) == [64, 256]
    assert f.neighbours(64) == [128]
    assert f.neighbours(999) == [128]  # outside the domain: back to the default
    r = IntRangeFragment(2, 8, 4)
    assert r.domain() == (2, 3, 4, 5, 6, 7, 8)
    assert r.neighbours(8) == [7]
    with pytest.raises(ValueError):
        EnumFragment((1, 2), 3)
    with pytest.raises(ValueError):
        IntRangeFragment(2, 8, 9)


def test_full_space_matches_issue_fragments():
    s = GemmSpace()
    f = s.fragments
    assert f["tile_m"].domain() == (64, 128, 256)
    # 16 and 32 for swap-AB; the widths between the powers of two (session 30) fill whole waves of SMs
    assert f["tile_n"].domain() == (16, 32, 56, 64, 80, 96, 104, 112, 128, 160, 168, 192, 256)
    assert f["epi_n"].domain() == (8, 16, 32, 64)
    assert f["swap_ab"].domain() == (False, True)
    assert f["stages"].domain() == tuple(range(2, 13))
    assert f["tile_k"].domain() == (64, 128)
    assert set(f["cluster"].domain()) == {(1, 1), (2, 1), (1, 2)}
    assert set(f["swizzle"].domain()) == {1, 2, 4, 8}
    assert set(f["schedule"].domain()) == {"cooperative", "pingpong"}
    assert set(f["raster"].domain()) == {"along_m", "along_n"}
    assert {d[0] for d in f["decomposition"].domain()} == {"persistent", "streamk", "splitk", "clusterk"}
    assert s.size == len(s.all)


@pytest.mark.parametrize("layout", ["tn", "nt", "tt", "nn"])
def test_declared_odd_multiples_of_8_only_along_k_major_operands(layout):
    """A declared tile width that is an odd multiple of 8 spans a K-major operand (the kernel's B: the problem's B,
    or under swap-AB its A): along an MN-major one the program would fall back to the unswizzled interleaved smem
    atom, never timed."""
    from argus_cutlass.kernels.gemm.space import declared_subspace

    odd = [c for c in declared_subspace("bf16", "bf16", layout) if c.tile_n % 16]
    for c in odd:
        assert (layout[0] if c.swap_ab else layout[1]) == ("t" if c.swap_ab else "n"), c
    assert len(odd) == 2 * (layout[1] == "n") + 2 * (layout[0] == "t")


def test_epilogue_subtile_divides_the_tile_and_is_8_wide_only_on_odd_multiples_of_8():
    """admissible: every point's epi_n divides its tile_n (the verifier's epilogue.tile), 8 exactly where tile_n is
    an odd multiple of 8 (56, 104, 168); each such width has points, each verified one feasible."""
    s = GemmSpace()
    pairs = {(c.tile_n, c.epi_n) for c in s.all}
    assert all(tn % en == 0 and (en == 8) == (tn % 16 != 0) for tn, en in pairs)
    assert {tn for tn, en in pairs if en == 8} == {56, 104, 168}
    assert {tn for tn, _ in pairs} == set(s.fragments["tile_n"].domain())
    c = next(c for c in s.all if c.tile_n == 104 and c.swap_ab and c.schedule == "pingpong" and c.stages == 9
             and c.tile_k == 64 and (c.cluster_m, c.cluster_n) == (1, 1))
    assert feasible(c)[0]


def test_enumeration_is_the_filtered_cartesian_product_and_admissible_reads_only_the_coupled_fragments():
    """enumerate() caches admissible() per combination of COUPLED_FRAGMENTS: on a small space with every fragment
    varied it yields exactly the filtered product, in its order; and admissible() gives the same verdict on the full
    values as on their coupled part (a rule reading another fragment would break the cache)."""
    import itertools

    from argus_cutlass.kernels.gemm.space import COUPLED_FRAGMENTS, admissible, default_fragments

    full = default_fragments()
    small = {n: (EnumFragment(f.domain()[:3], f.domain()[0]) if isinstance(f, EnumFragment)
                 else IntRangeFragment(4, 5, 4)) for n, f in full.items()}
    small["tile_n"] = EnumFragment((32, 56, 64, 112), 64)
    small["epi_n"] = EnumFragment((8, 16, 32), 32)
    s = GemmSpace(fragments=small)
    names = list(small)
    plain = [s.config(**dict(zip(names, c))) for c in itertools.product(*(small[n].domain() for n in names))
             if admissible(dict(zip(names, c)))]
    assert list(s.enumerate()) == plain and len(plain) == s.size > 0
    rng = random.Random(3)
    for _ in range(2000):
        values = {n: f.random(rng) for n, f in full.items()}
        assert admissible(values) == admissible({n: values[n] for n in COUPLED_FRAGMENTS}), values


def test_decomposition_needs_the_cooperative_schedule():
    s = GemmSpace()
    assert all(c.schedule == "cooperative" for c in s.all if c.scheduler != "persistent")
    assert all(c.splits == 1 for c in s.all if c.scheduler not in ("splitk", "clusterk"))
    # cluster-K: its cluster is the k split, never beside a multicast cluster
    assert all((c.cluster_m, c.cluster_n) == (1, 1) for c in s.all if c.scheduler == "clusterk")
    ck = s.default().replace(cluster_m=1, scheduler="clusterk", splits=4)
    assert s.contains(ck) and not s.contains(ck.replace(cluster_m=2))
    assert not s.contains(ck.replace(swizzle=4))   # one tile per cluster: padding units would be idle clusters
    assert not s.contains(ck.replace(splits=3))   # not a listed pair
    pp = s.config(schedule="pingpong", tile_m=64)
    assert s.contains(pp) and not s.contains(pp.replace(scheduler="streamk"))
    assert s.contains(s.default().replace(scheduler="splitk", splits=4))
    assert not s.contains(s.default().replace(scheduler="splitk", splits=3))  # not a listed pair
    assert not s.contains(s.default().replace(splits=2))  # splits without split-K
    # the space's constraint is the verifier's rule R9 (tile_scheduler)
    ok, reasons = feasible(pp.replace(scheduler="streamk"))
    assert not ok and any(r.startswith("tile_scheduler:") for r in reasons)


def test_epilogue_rows_derived_from_schedule():
    assert derive({"schedule": "pingpong"})["epi_m"] == 64
    assert derive({"schedule": "cooperative", "cluster": (1, 2)}) == {
        "schedule": "cooperative", "epi_m": 128, "cluster_m": 1, "cluster_n": 2}
    s = GemmSpace()
    assert all(c.epi_m == (128 if c.schedule == "cooperative" else 64) for c in s.all[:500])
    bad = s.default().replace(epi_m=64)  # cooperative with 64-row epilogue: not a space point
    assert not s.contains(bad)


def test_enumerate_sample_contains_roundtrip():
    s = small_space()
    cfgs = list(s.enumerate())
    # tile_m x schedule: 64 only with ping-pong (cooperative splits tile_m over 2 warpgroups of 64)
    assert len(cfgs) == s.size == 3 * 2 * 2 * 2 * 4
    assert not any(c.schedule == "cooperative" and c.tile_m == 64 for c in cfgs)
    assert len(set(cfgs)) == len(cfgs)
    assert all(s.contains(c) for c in cfgs)
    assert all(s.config(**knob_values(c)) == c for c in cfgs)
    rng1, rng2 = random.Random(3), random.Random(3)
    a = [s.sample(rng1) for _ in range(20)]
    assert a == [s.sample(rng2) for _ in range(20)]
    assert all(s.contains(c) for c in a)
    assert not s.contains(s.default().replace(tile_n=192))
    assert not s.contains(s.default().replace(dtype="fp16"))


def test_neighbours_move_one_fragment():
    s = small_space()
    base = s.default()
    for nb in s.neighbours(base):
        assert s.contains(nb)
        diff = {k for k, v in nb.model_dump().items() if v != getattr(base, k)} - {"epi_m"}
        assert len(diff) == 1 or diff == {"cluster_m"} or diff == {"schedule"}


def test_moves_change_only_named_fields():
    s = small_space()
    base = s.default()
    moves = s.moves(base, ["tile_m", "tile_n"])
    assert moves and base not in moves
    for c in moves:
        diff = {k for k, v in c.model_dump().items() if v != getattr(base, k)}
        assert diff and diff <= {"tile_m", "tile_n"}
    sched = s.moves(base, ["schedule"])
    assert [c.schedule for c in sched] == ["pingpong"] and sched[0].epi_m == 64


def test_explicit_subspace():
    a = GemmConfig()
    b = GemmConfig(cluster_m=1)
    s = GemmSpace.from_configs([a, b, a])
    assert s.size == 2 and list(s.enumerate()) == [a, b]
    assert s.contains(b) and not s.contains(GemmConfig(cluster_n=2, cluster_m=1))
    assert s.moves(a, ["cluster_m", "cluster_n"]) == [b]
    with pytest.raises(ValueError):
        GemmSpace.from_configs([])


@pytest.mark.parametrize("cfg", [c for c in small_space().enumerate() if c.stages in (3, 6)][::3],
                         ids=lambda c: f"{c.tile_m}x{c.tile_n}x{c.tile_k}_{c.schedule[:4]}_s{c.stages}_c{c.cluster_m}")
def test_feasible_is_the_verifier(cfg):
    ok, reasons = feasible(cfg)
    report = verify_gemm(build_program(cfg), smt=False)
    assert ok == report.ok
    assert [r.split(":")[0] for r in reasons] == report.rules_violated()


def test_feasible_names_rules():
    ok, reasons = feasible(GemmConfig(stages=9))
    assert not ok and reasons[0].startswith("smem.capacity:") and "232448" in reasons[0]
    ok, reasons = feasible(GemmConfig(tile_m=64, schedule="cooperative", epi_m=128))
    assert not ok and {"gmma.m_tile", "epilogue.tile"} <= {r.split(":")[0] for r in reasons}
    assert feasible(GemmConfig()) == (True, ())
    assert feasible(GemmConfig(), smt=True) == (True, ())


def test_declared_decode_configurations_round_trip_their_knobs_and_are_feasible():
    """Session 26's decode additions (128-deep k-tiles, 2 accumulator sets) are in the declared sub-space of
    every flavor, the verifier accepts each, and ``acc_sets`` is a searched knob (knob_values / derive keep it:
    the planner's moves reach the same kernel the sweep measured)."""
    from argus_cutlass.agent.costmodel import structure_key
    from argus_cutlass.kernels.gemm.space import UNSEARCHED_FIELDS, declared_subspace

    assert "acc_sets" in GemmSpace().fragments and "acc_sets" not in UNSEARCHED_FIELDS
    for flavor in (("bf16", "bf16", "tn"), ("fp16", "fp32", "nt")):
        space = declared_subspace(*flavor)
        decode = [c for c in space if c.swap_ab and (c.tile_k == 128 or c.acc_sets > 1)]
        assert {(c.tile_m, c.tile_n, c.tile_k, c.acc_sets) for c in decode} == {
            (64, 16, 128, 1), (64, 32, 128, 1), (64, 64, 128, 1), (128, 16, 128, 1), (64, 16, 64, 2), (64, 16, 128, 2),
            (64, 32, 128, 2)}   # the last: session 27 (gemm-k128b)
        # the sets are part of the key; nt lacks the odd multiples of 8 along its MN-major operands (168; 56, 104)
        n = {"tn": 113, "nt": 109}[flavor[2]]
        assert len(space) == n and len({structure_key(c) for c in space}) == n
        for cfg in decode:
            assert feasible(cfg)[0], cfg
            assert GemmConfig(**{**derive(knob_values(cfg)), "dtype": cfg.dtype, "out_dtype": cfg.out_dtype,
                                 "layout": cfg.layout}) == cfg


def test_accumulator_sets_only_on_narrow_swap_ab_pingpong_tiles_and_the_planner_skips_twins():
    """acc_sets 2 is a point of the space only where it was measured to matter (one warpgroup's chain of narrow
    wgmmas: swap-AB ping-pong, tile_n <= 32); the planner's ranking, which cannot tell twins differing only in
    acc_sets apart (same predicted time), takes one of each."""
    from argus_cutlass.agent.planner import Problem, ranked_feasible
    from argus_cutlass.kernels.gemm.space import admissible

    space = GemmSpace()
    twos = [c for c in space.all if c.acc_sets > 1]
    assert twos and all(c.swap_ab and c.schedule == "pingpong" and c.tile_n <= 32 for c in twos)
    assert {c.acc_sets for c in space.all} == {1, 2} and space.size == len(space.all)
    assert not admissible({"acc_sets": 2, "swap_ab": True, "schedule": "cooperative", "tile_m": 128, "tile_n": 16})
    decode = GemmConfig(swap_ab=True, tile_m=64, tile_n=16, schedule="pingpong", cluster_m=1, epi_m=64, epi_n=16,
                        stages=12)
    twins = [decode, decode.replace(acc_sets=2), decode.replace(stages=8), decode.replace(stages=8, acc_sets=2)]
    picked = ranked_feasible(space, Problem(1, 4096, 14336), set(), candidates=twins, limit=4)
    assert len(picked) == 2 and len({c.replace(acc_sets=1) for c in picked}) == 2


def test_pdl_is_not_a_point_of_the_searched_space():
    """Session 45 review: the launch node pdl is set by hand (whether it pays depends on the caller's stream), so
    the searched space holds no pdl configuration, as it holds no mma_in_flight 2 one; its twin without pdl is in."""
    cfg = next(iter(GemmSpace().enumerate()))
    assert GemmSpace().contains(cfg) and not GemmSpace().contains(cfg.replace(pdl=True))
    assert not GemmSpace().contains(cfg.replace(mma_in_flight=2))
