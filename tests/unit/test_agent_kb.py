"""The knowledge base: loads, is consistent with GemmConfig, the invariants and the verifier."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from argus_cutlass.agent.kb import Technique, load_knowledge, problem_env
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.space import GemmSpace
from argus_cutlass.verify import RULES, load_invariants

KB = load_knowledge()


def test_kb_has_enough_techniques_with_sources():
    assert len(KB.techniques) >= 15
    for t in KB.techniques:
        assert t.effect and t.source and t.title


def test_every_knob_is_a_gemmconfig_field():
    fields = set(GemmConfig.model_fields)
    for t in KB.techniques:
        assert set(t.knobs) <= fields, t.id
        assert not set(t.missing_knobs) & fields, f"{t.id}: missing knob that exists"


def test_available_knobs_are_searched_by_the_space():
    searched = set(GemmSpace().fragments) | {"cluster_m", "cluster_n", "epi_m", "scheduler", "splits"}
    for t in KB.available:
        assert set(t.knobs) <= searched, t.id


def test_risks_name_real_invariants_or_rules():
    ids = {inv.id for inv in load_invariants()}
    for t in KB.techniques:
        unknown = [r for r in t.risks if r not in ids and r not in RULES and r != "tma.image"]
        assert not unknown, f"{t.id}: {unknown}"


def test_missing_kernel_features_are_unavailable():
    t = KB.get("register_reallocation")
    assert not t.available and t.why and t.missing_knobs
    assert not t.applicable(problem_env(16, 8192, 8192, GemmConfig()))


def test_swap_ab_applies_to_small_m_only():
    t = KB.get("swap_ab")
    assert t.available and set(t.knobs) == {"swap_ab", "tile_n", "epi_n"}
    assert t.applicable(problem_env(16, 8192, 8192, GemmConfig()))
    assert not t.applicable(problem_env(4096, 8192, 8192, GemmConfig()))
    assert {"pipeline_depth", "cta_tile", "cluster_multicast_b", "cooperative_schedule", "pingpong_schedule",
            "raster_order", "scheduler_swizzle", "epilogue_subtile", "tile_k"} <= {t.id for t in KB.available}


def test_accumulator_sets_apply_to_narrow_swap_ab_tiles_only():
    t = KB.get("acc_sets")
    decode = GemmConfig(tile_m=64, tile_n=16, schedule="pingpong", epi_m=64, epi_n=16, swap_ab=True, stages=12)
    assert t.available and t.knobs == ("acc_sets",) and "G3" in t.risks   # G3: rule k.acc_sets
    assert t.applicable(problem_env(1, 4096, 14336, decode))
    assert not t.applicable(problem_env(1, 4096, 14336, decode.replace(swap_ab=False)))
    assert not t.applicable(problem_env(64, 4096, 14336, decode.replace(tile_n=64, epi_n=32)))


def test_split_k_and_stream_k_use_the_scheduler_knobs():
    """The kernel has the stream-K / split-K scheduler now: the techniques are available,
    their knobs are GemmConfig fields, and they apply only where they can help."""
    assert set(KB.get("split_k").knobs) == {"scheduler", "splits"}
    assert KB.get("stream_k").knobs == ("scheduler",)
    small_mn = problem_env(128, 4096, 8192, GemmConfig(tile_n=128, cluster_m=1))
    assert KB.get("split_k").applicable(small_mn) and KB.get("stream_k").applicable(small_mn)
    big = problem_env(8192, 8192, 8192, GemmConfig())
    assert not KB.get("split_k").applicable(big)
    pp = problem_env(128, 4096, 8192, GemmConfig(tile_m=64, schedule="pingpong", epi_m=64))
    assert not KB.get("split_k").applicable(pp) and not KB.get("stream_k").applicable(pp)


def test_preconditions():
    small = problem_env(16, 8192, 8192, GemmConfig())
    big = problem_env(8192, 8192, 8192, GemmConfig())
    assert KB.get("small_m_weight_streaming").applicable(small)
    assert not KB.get("small_m_weight_streaming").applicable(big)
    assert big["tiles"] == 64 * 32 and big["tiles_m"] == 64
    assert KB.get("scheduler_swizzle").applicable(big)
    pp = problem_env(4096, 4096, 4096, GemmConfig(tile_m=64, schedule="pingpong", epi_m=64))
    assert KB.get("cooperative_schedule").applicable(pp) and not KB.get("pingpong_schedule").applicable(pp)
    assert KB.get("pingpong_schedule").applicable(big) and not KB.get("cooperative_schedule").applicable(big)


def test_bad_rows_are_rejected():
    row = dict(id="x", title="x", knobs=["not_a_field"], effect="e", risks=["R1"], source="s")
    with pytest.raises(ValidationError, match="not GemmConfig fields"):
        Technique(**row)
    with pytest.raises(ValidationError, match="unknown precondition variable"):
        Technique(**{**row, "knobs": ["stages"], "requires": [{"var": "q", "op": "<", "value": 1}]})
    with pytest.raises(ValidationError, match="unavailable needs"):
        Technique(**{**row, "knobs": [], "available": False})
    with pytest.raises(KeyError, match="unknown technique"):
        KB.get("nope")
