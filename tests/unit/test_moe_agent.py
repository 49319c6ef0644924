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
UNSEARCHED: set[str] = set()  # every MoEConfig field a technique names is searched (tile_k since session 18)


def test_loads_as_the_moe_family():
    assert FAMILIES["moe"][0] is MoEConfig
    assert MKB.family == "moe"
    assert {t.id for t in MKB.techniques} == {
        "small_t_weight_bound", "tile_m_padding", "tile_m_spill", "t_bucket", "band_walk", "swap_ab", "stages",
        "gather_slices", "gather_unroll", "work_lookahead", "pdl", "weight_prefetch", "grouped_stream_k",
        "weights_evict_first", "handoff", "fused_routing_combine", "row_bounded_tiles", "combine_handoff", "fused_routing",
        "dynamic_walk", "short_groups_large_t"}
    swap = MKB.get("swap_ab")
    assert not swap.available and swap.missing_knobs == ("swap_ab",) and "not built" in swap.why
    assert swap not in MKB.available
    sk = MKB.get("grouped_stream_k")   # not built either: context for a planner, never proposed
    assert not sk.available and "Not built" in sk.why and sk not in MKB.available
    fused = MKB.get("fused_routing_combine")   # not built; its measured ceiling is the context
    assert not fused.available and "Not built" in fused.why and "ceiling" in fused.effect
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
    for tid in ("gather_slices", "t_bucket"):   # derived, then timed (session 40: the slices end to end)
        assert "session 40" in MKB.get(tid).effect, tid
    assert "NOT measured per kernel" in MKB.get("gather_slices").effect   # what was not timed stays said
    assert "Measured (H200, session 22" in MKB.get("gather_unroll").effect   # timed: the numbers say so
    for tid in ("work_lookahead", "pdl", "weight_prefetch"):   # timed in session 23
        assert "Measured (H200, session 23" in MKB.get(tid).effect and "NOT yet" not in MKB.get(tid).effect, tid
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
    # padding_128: the 128-row m-tiles' expected padded rows over the routed rows (heuristics.expected_padding)
    assert round(moe_env(MoEProblem.for_model("qwen3-30b-a3b", 2048), MoEConfig())["padding_128"], 2) == 0.48
    assert big["padding_128"] < 0.05


def test_short_groups_technique_follows_the_heuristic():
    """The large-T short-group technique applies where the heuristic would set its flags and the incumbent lacks
    them, never at small T, never once taken (the heuristic's own configuration)."""
    from argus_cutlass.kernels.moe.heuristics import SHORT_GROUP_PADDING, expected_padding

    for model in ("qwen3-30b-a3b", "deepseek-v2-lite", "mixtral"):
        for t in (16, 256, 512, 1024, 2048, 4096, 8192):
            p = MoEProblem.for_model(model, t)
            short = t > 256 and expected_padding(p, 128) >= SHORT_GROUP_PADDING
            plain = {x.id for x in MKB.applicable(moe_env(p, MoEConfig()))}
            assert ("short_groups_large_t" in plain) == short, (model, t)
            assert "short_groups_large_t" not in {x.id for x in MKB.applicable(moe_env(p, default_config(p)))}


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


def test_tile_m_techniques_follow_the_rows_per_expert():
    """64-row tiles are proposed for few rows per expert, 128-row ones where a group outgrows 64 rows
    (heuristics.small_t_tile_m); never both for one incumbent, neither at large T."""
    def ids(p, tile_m):
        return {t.id for t in MKB.applicable(moe_env(p, MoEConfig(tile_m=tile_m)))}

    few, many = MoEProblem.for_model("qwen3-30b-a3b", 256), MoEProblem.for_model("mixtral", 256)   # 16 / 64 rows
    assert "tile_m_padding" in ids(few, 128) and "tile_m_spill" not in ids(few, 64)
    assert "tile_m_spill" in ids(many, 64) and "tile_m_padding" not in ids(many, 128)
    assert not ({"tile_m_padding", "tile_m_spill"} & (ids(MoEProblem.for_model("mixtral", 8192), 64)
                                                        | ids(MoEProblem.for_model("mixtral", 8192), 128)))
    # the same rule as the heuristic's (heuristics.small_t_tile_m) at every small T of a sweep: the technique
    # that would move away from the heuristic's tile never applies to it
    from argus_cutlass.kernels.moe.heuristics import small_t_tile_m

    for e, k in ((8, 1), (8, 2), (8, 8), (16, 4), (64, 6), (128, 8), (256, 8)):
        for t in (1, 16, 64, 65, 100, 128, 129, 200, 256):
            p = MoEProblem(t, e, k, 1024, 512)
            tm = small_t_tile_m(p)
            assert not ({"tile_m_padding", "tile_m_spill"} & ids(p, tm)), (e, k, t, tm)
            assert ({"tile_m_padding", "tile_m_spill"} & ids(p, 192 - tm)), (e, k, t, tm)


def test_unknown_knob_or_variable_is_refused():
    row = {"id": "x", "title": "x", "knobs": ["tile_n"], "effect": "e", "risks": ["stages"], "source": "s"}
    with pytest.raises(ValidationError, match="not MoEConfig fields"):
        Technique.model_validate(row, context={"family": "moe"})
    row = {**row, "knobs": ["tile_m"], "requires": [{"var": "seqlen_q", "op": "<", "value": 1}]}
    with pytest.raises(ValidationError, match="unknown precondition variable"):
        Technique.model_validate(row, context={"family": "moe"})


# ---- the candidates and argus-cutlass tune moe ----------------------------------------------------


def test_candidates_start_from_the_heuristic_and_stay_feasible_and_distinct():
    from argus_cutlass.kernels.moe.space import candidates, feasible

    for p in (MoEProblem.for_model("mixtral", 256), MoEProblem(3000, 16, 2, 512, 384)):
        cs = candidates(p, 8)
        assert cs[0] == default_config(p) and len(cs) == len(set(cs)) == 8
        assert all(feasible(c, p) for c in cs)
        if p.tokens <= 256:   # small T (here 128-row tiles, heuristics.small_t_tile_m): the weight stream first,
            # the other gate+up n-tile at the same depth (refused here: it does not fit), then with its stages
            # scaled to about the same shared memory
            assert cs[0].tile_m == 128 and cs[1].gu_tile_n != cs[0].gu_tile_n
            assert {k for k, v in cs[1].model_dump().items() if v != getattr(cs[0], k)} <= {"gu_tile_n", "gu_stages"}
            assert (cs[1].tile_m + cs[1].gu_tile_n) * cs[1].gu_stages <= (cs[0].tile_m + cs[0].gu_tile_n) * cs[0].gu_stages
        else:   # the measured movers first: joint bands half / double, then unbanded (RESULTS.md issue 11)
            assert cs[1].gu_band_m == cs[1].dn_band_m != cs[0].gu_band_m
            assert (0, 0) in [(c.gu_band_m, c.dn_band_m) for c in cs[1:4]]
        for c in cs[1:]:   # each a change of the heuristic's configuration
            assert c != cs[0]
    assert candidates(MoEProblem(16, 8, 2, 512, 256), 1) == [default_config(MoEProblem(16, 8, 2, 512, 256))]


def _tune_moe(tmp_path, budget, env_extra=None):
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ)
    env["ARGUS_CACHE_DIR"] = str(tmp_path / "cache")
    env.update(env_extra or {})
    proc = subprocess.run(
        [sys.executable, "-m", "argus_cutlass.cli", "tune", "moe", "--tokens", "100", "--experts", "8", "--topk", "2",
         "--hidden", "512", "--ffn", "256", "--budget", str(budget), "--out", "out"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900,
    )
    path = tmp_path / "out" / "tune_moe.json"
    return proc, (json.loads(path.read_text()) if path.exists() else None)


def test_tune_moe_without_nvcc_stops_after_rendering(tmp_path):
    from argus_cutlass.kernels.moe.space import candidates

    proc, data = _tune_moe(tmp_path, 2, {"ARGUS_NVCC": str(tmp_path / "no-nvcc-here"), "CUDA_HOME": str(tmp_path),
                                         "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert "stopped after rendering" in proc.stdout
    assert data["stopped_after"] == "render" and not data["recorded"] and data["best"] is None
    assert [c["status"] for c in data["candidates"]] == ["rendered", "rendered"]
    p = MoEProblem(100, 8, 2, 512, 256)
    assert [MoEConfig(**c["config"]) for c in data["candidates"]] == candidates(p, 2)
    assert data["store_key"].endswith("|moe|bf16|e8k2h512i256|t128")
    assert not (tmp_path / "cache" / "agent" / "experience.json").exists()


def test_tune_moe_refuses_bad_input(tmp_path, capsys):
    from argus_cutlass.cli import main

    base = ["tune", "moe", "--tokens", "16", "--experts", "8", "--topk", "2", "--hidden", "512", "--out", str(tmp_path)]
    assert main(base + ["--ffn", "250"]) == 2 and "ffn=250" in capsys.readouterr().err   # I not a multiple of 8
    assert main(base + ["--ffn", "256", "--budget", "0"]) == 2 and "tune.budget" in capsys.readouterr().err


@pytest.mark.nvcc
def test_tune_moe_compiles_its_candidates(tmp_path):
    import json

    proc, data = _tune_moe(tmp_path, 2)
    assert proc.returncode == 0, proc.stderr
    statuses = [c["status"] for c in data["candidates"]]
    assert len(statuses) == 2 and set(statuses) <= {"compiled", "ok"}, proc.stdout
    if "ok" not in statuses:   # no usable GPU here
        assert data["stopped_after"] == "compile" and "stopped after compiling" in proc.stdout
        assert not data["recorded"]
    else:   # measured on a Hopper GPU: the best is in the store, and the lookup finds it
        assert data["best"]["ms"] > 0 and data["recorded"]
        store = json.loads((tmp_path / "cache" / "agent" / "experience.json").read_text())
        assert data["store_key"] in store["entries"]


def test_tune_moe_grid_merge_replaces_moe_entries_only(tmp_path):
    """bench/tune_moe_grid.py --merge: an MoE entry of the same key is replaced, others are kept."""
    import importlib.util
    import json
    from pathlib import Path

    from argus_cutlass.agent.store import moe_entry

    spec = importlib.util.spec_from_file_location(
        "tune_moe_grid", Path(__file__).resolve().parents[2] / "bench" / "tune_moe_grid.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    p = MoEProblem.for_model("mixtral", 256)
    old = moe_entry("NVIDIA H200", p, default_config(p), 1.0)
    gemm = {"gpu": "NVIDIA H200", "kernel": "gemm", "shape": [1, 2, 3]}
    shipped = tmp_path / "tuned.json"
    shipped.write_text(json.dumps({"note": "n", "gpu": "NVIDIA H200", "entries": [gemm, old]}))
    new = moe_entry("NVIDIA H200", p, default_config(p).replace(gu_band_m=0, dn_band_m=0), 0.8)
    other = moe_entry("NVIDIA H200", MoEProblem.for_model("mixtral", 16), default_config(p), 0.7)
    src = tmp_path / "tuned_moe.json"
    src.write_text(json.dumps({"entries": [new, other]}))
    assert mod.merge(src, shipped) == 2
    table = json.loads(shipped.read_text())
    assert table["note"] == "n" and table["entries"][0] == gemm
    assert [e["ms"] for e in table["entries"][1:]] == [0.8, 0.7]


def test_tune_keeps_the_heuristic_unless_another_candidate_is_clearly_faster():
    """agent.tune_family.pick_best: a win under MIN_GAIN (the run-to-run spread) keeps the first candidate."""
    from argus_cutlass.agent.tune_family import MIN_GAIN, pick_best

    assert pick_best([2.944, 2.981, 2.932], True) == 0                  # 0.4 % faster: noise, keep the heuristic
    assert pick_best([0.683, 0.896, 0.661, 0.660], True) == 3           # 3.5 % faster: recorded
    assert pick_best([1.0, 1.0 - MIN_GAIN * 1.01], True) == 1
    assert pick_best([1.0, 1.0 - MIN_GAIN * 0.99], True) == 0
    assert pick_best([1.0, 0.999], False) == 1                          # the first was not measured: the fastest
    assert pick_best([0.9, 1.0], True) == 0
    with pytest.raises(ValueError, match="no measured candidate"):
        pick_best([], True)


def test_small_t_tile_move_builds_the_other_tile_as_the_heuristic_would():
    """The tuner's move between the small-T tiles (64 <-> 128 rows) gives the other tile's heuristic layer:
    its n-tiles and depths, the 64-row tile's 128-column gate+up unit, bands over the same rows."""
    from argus_cutlass.kernels.moe.heuristics import (SINGLE_TILE_GU_N, SMALL_T_ROW_BOUNDED_TILE_M, small_t_band,
                                                      small_t_config)
    from argus_cutlass.kernels.moe.space import _neighbours

    for model, other_m in (("mixtral", 64), ("qwen3-30b-a3b", 128)):
        p = MoEProblem.for_model(model, 256)
        cfg = default_config(p)
        moved = [c for c in _neighbours(cfg, True) if c.tile_m == other_m and c.gu_tile_n <= 128]
        band = small_t_band(p, other_m)
        want = small_t_config(cfg.dtype, other_m).replace(
            gu_band_m=band, dn_band_m=band, gather_slices=cfg.gather_slices, gather_unroll=cfg.gather_unroll,
            pdl=cfg.pdl, handoff=cfg.handoff, row_bounded=other_m in SMALL_T_ROW_BOUNDED_TILE_M,
            combine_handoff=cfg.combine_handoff, fused_routing=cfg.fused_routing,
            dynamic_walk=cfg.dynamic_walk)
        if other_m == 64:
            want = want.replace(gu_tile_n=SINGLE_TILE_GU_N)
        assert moved and moved[0] == want, (model, moved[:1], want)
