"""The agent knows MoE: ``agent/knowledge_moe.toml`` in the technique schema, against MoEConfig (CPU)."""

from __future__ import annotations

import tomllib
from importlib import resources

import pytest
from pydantic import ValidationError

from argus_cutlass.agent.kb import FAMILIES, Technique, load_knowledge, moe_env
from argus_cutlass.kernels.moe.config import MoEConfig
from argus_cutlass.kernels.moe.heuristics import default_config
from argus_cutlass.kernels.moe.problem import MoEProblem
from argus_cutlass.kernels.moe.space import KNOBS

MKB = load_knowledge("knowledge_moe.toml")
SMALL_T_ONLY = {"small_t_weight_bound", "tile_m_padding"}
#: MoEConfig fields a technique may name that the search space (space.KNOBS) does not search
UNSEARCHED = {"tile_k"}  # technique "stages": the k extent sets the stage size, 64 everywhere today


def test_loads_as_the_moe_family():
    assert FAMILIES["moe"][0] is MoEConfig
    assert MKB.family == "moe"
    assert {t.id for t in MKB.techniques} == {
        "small_t_weight_bound", "tile_m_padding", "t_bucket", "band_walk", "swap_ab", "stages",
        "gather_slices"}
    swap = MKB.get("swap_ab")
    assert not swap.available and swap.missing_knobs == ("swap_ab",) and "not built" in swap.why
    assert swap not in MKB.available
    for t in MKB.techniques:
        assert t.risks and t.source and t.effect


def test_the_file_is_package_data_in_the_technique_schema():
    text = resources.files("argus_cutlass.agent").joinpath("knowledge_moe.toml").read_text("utf-8")
    data = tomllib.loads(text)
    assert set(data) == {"family", "technique"}  # no ad-hoc [[fact]] / [[entry]] tables left


def test_every_knob_is_a_searched_moe_config_field():
    assert UNSEARCHED <= set(MoEConfig.model_fields) and not (UNSEARCHED & set(KNOBS))
    for t in MKB.techniques:
        for knob in t.knobs:
            assert knob in MoEConfig.model_fields, (t.id, knob)
            assert knob in KNOBS or knob in UNSEARCHED, (t.id, knob)
        for knob in t.missing_knobs:
            assert knob not in MoEConfig.model_fields, (t.id, knob)


def test_derived_defaults_say_so():
    """Each derived default states what was measured and what was not yet."""
    for tid in ("gather_slices", "t_bucket"):   # large-T gather slices: derived, not yet timed
        assert "NOT yet measured" in MKB.get(tid).effect, tid
    band = MKB.get("band_walk").effect
    assert "derived, then measured" in band and "unbanded ms" in band and "session 18" in band
    assert "18.5 GB" in MKB.get("band_walk").effect  # the ncu numbers stay
    assert "16.5 us" in MKB.get("gather_slices").effect
    t_bucket = MKB.get("t_bucket").effect
    assert "Mixtral 16 / 8" in t_bucket and "dn_stages 8" in t_bucket  # both former bucket entries


def test_moe_env_variables():
    p = MoEProblem.for_model("qwen3-30b-a3b", 16)
    env = moe_env(p, MoEConfig())
    assert (env["tokens"], env["experts"], env["topk"], env["hidden"], env["ffn"]) == (16, 128, 8, 2048, 768)
    assert env["routed_rows"] == 128 and env["rows_per_expert"] == 1.0
    assert env["small_t"] is True and env["bucket"] == "small"
    assert env["tile_m"] == 128 and env["gather_slices"] == 1
    big = moe_env(MoEProblem.for_model("mixtral", 8192), MoEConfig())
    assert big["small_t"] is False and big["bucket"] == "large" and big["rows_per_expert"] == 2048.0
    assert moe_env(MoEProblem.for_model("mixtral", 256), MoEConfig())["small_t"] is True
    assert moe_env(MoEProblem.for_model("mixtral", 257), MoEConfig())["small_t"] is False


def test_applicable_on_small_and_large_t():
    small = {t.id for t in MKB.applicable(moe_env(MoEProblem.for_model("qwen3-30b-a3b", 16), MoEConfig()))}
    assert SMALL_T_ONLY <= small and {"band_walk", "stages", "t_bucket"} <= small
    assert "swap_ab" not in small  # unavailable: never proposed
    large = {t.id for t in MKB.applicable(moe_env(MoEProblem.for_model("mixtral", 8192), MoEConfig()))}
    assert not (SMALL_T_ONLY & large)
    assert {"band_walk", "stages", "t_bucket", "gather_slices"} <= large   # gather slices fill a wave at any T
    # the heuristic's small-T configuration already took the small-T techniques
    p = MoEProblem.for_model("qwen3-30b-a3b", 16)
    done = {t.id for t in MKB.applicable(moe_env(p, default_config(p)))}
    assert not ({"tile_m_padding", "gather_slices", "band_walk"} & done)


def test_unknown_knob_or_variable_is_refused():
    row = {"id": "x", "title": "x", "knobs": ["tile_n"], "effect": "e", "risks": ["stages"], "source": "s"}
    with pytest.raises(ValidationError, match="not MoEConfig fields"):
        Technique.model_validate(row, context={"family": "moe"})
    row = {**row, "knobs": ["tile_m"], "requires": [{"var": "seqlen_q", "op": "<", "value": 1}]}
    with pytest.raises(ValidationError, match="unknown precondition variable"):
        Technique.model_validate(row, context={"family": "moe"})
