"""Lookups that explain themselves (issue 13 item 4), the same-architecture rule for other Hopper GPUs,
and the MoE tuned entries (issue 11 item 4): every table here is a temporary store or a faked shipped
table; no GPU and no measured number."""

from __future__ import annotations

import pytest

from argus_cutlass.agent import store as store_mod
from argus_cutlass.agent.planner import Problem
from argus_cutlass.agent.store import (
    ExperienceStore,
    Lookup,
    entry_key,
    gpu_arch,
    lookup_config,
    lookup_moe_config,
    make_entry,
    moe_entry,
    moe_key,
    moe_tokens_bucket,
    record_moe_best,
)
from argus_cutlass.kernels.gemm.heuristics import default_config
from argus_cutlass.kernels.moe.heuristics import default_config as moe_default
from argus_cutlass.kernels.moe.heuristics import small_t_config
from argus_cutlass.kernels.moe.problem import MoEProblem

H200 = "NVIDIA H200"
H100 = "NVIDIA H100 80GB HBM3"
SHAPE = (512, 8192, 8192)
#: a small-T MoE problem (qwen3-30b-a3b's layer at T = 100: bucket t128)
MOE = MoEProblem(100, 128, 8, 2048, 768)
#: MoEConfig changes the small-T configuration takes (verified) / refuses (gu_stages 12: smem)
MOE_GOOD, MOE_BAD = {"dn_stages": 6}, {"gu_stages": 12}


@pytest.fixture(autouse=True)
def heuristic_untuned(monkeypatch):
    """These tests pin the lookup of tuned entries and how a miss is explained; the untuned GEMM rule is the
    heuristic here so the fallback is known (the default, the cost model: tests/unit/test_costmodel_choice.py)."""
    monkeypatch.setenv("ARGUS_GEMM_UNTUNED", "heuristic")


@pytest.fixture
def st(tmp_path, monkeypatch):
    """An empty user store and an empty shipped table."""
    monkeypatch.setattr(store_mod, "shipped_entries", lambda: [])
    return ExperienceStore(tmp_path / "e.json")


def _ship(monkeypatch, *entries):
    monkeypatch.setattr(store_mod, "shipped_entries", lambda: list(entries))


def _gemm_entry(gpu, cfg):
    return make_entry(gpu, "gemm", Problem(*SHAPE), cfg, 0.1)


# ---- the result: (config, source) plus why ------------------------------------------------------


def test_lookup_unpacks_as_the_old_pair(st):
    lk = lookup_config("gemm", *SHAPE, gpu=H200, store=st)
    cfg, source = lk
    assert isinstance(lk, Lookup) and len(lk) == 2
    assert (lk[0], lk[1]) == (cfg, source) == (lk.config, lk.source)
    assert source == "heuristic" and cfg == default_config(*SHAPE) and lk.entry_key is None
    assert lk.key == entry_key(H200, "gemm", Problem(*SHAPE))


def test_a_miss_names_the_key_what_the_table_has_and_the_nearest_entry(st, monkeypatch):
    _ship(monkeypatch, *(make_entry(H200, "gemm", Problem(s, s, s), default_config(s, s, s), 0.2)
                         for s in (4096, 8192)))
    lk = lookup_config("gemm", 4096, 4096, 4096, "fp16", "fp16", "nt", gpu=H200, store=st)
    assert lk.source == "heuristic"
    assert lk.detail == (
        "no entry for key 'NVIDIA H200|gemm|fp16|fp16|nt|m4096_n4096_k4096' (shipped table has "
        "dtype bf16, out_dtype bf16, layout tn only; nearest: "
        "'NVIDIA H200|gemm|bf16|bf16|tn|m4096_n4096_k4096', differs in dtype, out_dtype, layout)")
    lk = lookup_config("gemm", 2000, 2000, 2000, gpu=H200, store=st)  # a bucket miss: the nearest bucket
    assert lk.detail == ("no entry for key 'NVIDIA H200|gemm|bf16|bf16|tn|m2048_n2048_k2048' (nearest: "
                         "'NVIDIA H200|gemm|bf16|bf16|tn|m4096_n4096_k4096', differs in bucket)")


def test_a_miss_with_no_entries_of_the_family_says_so(st):
    assert lookup_config("gemm", *SHAPE, gpu=H200, store=st).detail == (
        "no entry for key 'NVIDIA H200|gemm|bf16|bf16|tn|m512_n8192_k8192' (no tuned gemm entries: "
        "neither your experience store nor the shipped table has one)")


def test_the_real_shipped_table_explains_an_fp16_nn_miss():
    lk = lookup_config("gemm", 4096, 4096, 4096, "fp16", "fp16", "nn", gpu=H200,
                       store=ExperienceStore("/nonexistent/e.json"))
    assert lk.source == "heuristic"
    assert lk.detail.startswith(
        "no entry for key 'NVIDIA H200|gemm|fp16|fp16|nn|m4096_n4096_k4096' (shipped table "
        "has layout nt/tn only; nearest: "
        "'NVIDIA H200|gemm|fp16|fp16|nt|m4096_n4096_k4096', differs in layout)")   # nt and tn tie: see below


def test_a_tie_between_nearest_keys_does_not_depend_on_the_tables_order():
    """Two entries equally near the missed key (one field each): the key's text decides, in either entry order."""
    want = "NVIDIA H200|gemm|fp16|fp16|nn|m4096_n4096_k4096"
    keys = ["NVIDIA H200|gemm|fp16|fp16|tn|m4096_n4096_k4096", "NVIDIA H200|gemm|fp16|fp16|nt|m4096_n4096_k4096"]
    texts = {store_mod._miss_text(want, [("shipped", [(k, {}) for k in order])]) for order in (keys, keys[::-1])}
    assert len(texts) == 1 and "nearest: 'NVIDIA H200|gemm|fp16|fp16|nt|m4096_n4096_k4096'" in texts.pop()


def test_an_entry_found_but_refused_stale_or_mismatched_is_named(st, monkeypatch):
    heur = default_config(*SHAPE)
    key = entry_key(H200, "gemm", Problem(*SHAPE))
    shipped = heur.replace(swizzle=2)
    _ship(monkeypatch, _gemm_entry(H200, shipped))
    st.record_best(H200, "gemm", Problem(*SHAPE), heur.replace(raster="along_m"), 0.09)
    st.update(lambda d: d["entries"][key]["config"].update(stages=12))  # the verifier refuses 12 stages
    lk = lookup_config("gemm", *SHAPE, gpu=H200, store=st)
    assert (lk.config, lk.source, lk.entry_key) == (shipped, "shipped", key)
    assert lk.detail.startswith(f"entry {key!r} of your experience store skipped: "
                                "refused by the verifier (smem")
    assert lk.detail.endswith(f"; key {key!r} found in the shipped table (agent/tuned_h200.json)")

    st.update(lambda d: d["entries"][key]["config"].update(stages=4, no_such_knob=1))
    assert "skipped: stale (its config no longer parses: no_such_knob: Extra inputs are not permitted)" in \
        lookup_config("gemm", *SHAPE, gpu=H200, store=st).detail
    st.update(lambda d: d["entries"][key].update(config={**heur.model_dump(), "layout": "nt"}))
    assert "skipped: its config is bf16->bf16 nt, the problem bf16->bf16 tn" in \
        lookup_config("gemm", *SHAPE, gpu=H200, store=st).detail


# ---- other Hopper GPUs: the nearest sm_90 entry -----------------------------------------------


@pytest.mark.parametrize("name, arch", [
    ("NVIDIA H200", "sm_90"), ("NVIDIA H200 NVL", "sm_90"), ("NVIDIA H100 80GB HBM3", "sm_90"),
    ("NVIDIA H100 PCIe", "sm_90"), ("NVIDIA H100 NVL", "sm_90"), ("NVIDIA H800", "sm_90"),
    ("NVIDIA H20", "sm_90"), ("NVIDIA GH200 480GB", "sm_90"), ("nvidia h100", "sm_90"),
    ("NVIDIA A100-SXM4-80GB", None), ("NVIDIA B200", None), ("NVIDIA H2000", None),
    ("NVIDIA GeForce RTX 4090", None), ("", None),
])
def test_gpu_arch_reads_the_architecture_off_the_name(name, arch):
    assert gpu_arch(name) == arch


def test_an_h100_uses_the_h200_entry_and_says_so(st, monkeypatch):
    shipped = default_config(*SHAPE).replace(swizzle=2)
    _ship(monkeypatch, _gemm_entry(H200, shipped))
    lk = lookup_config("gemm", *SHAPE, gpu=H100, store=st)
    assert (lk.config, lk.source) == (shipped, "shipped")
    assert lk.key == f"{H100}|gemm|bf16|bf16|tn|m512_n8192_k8192"
    assert lk.entry_key == f"{H200}|gemm|bf16|bf16|tn|m512_n8192_k8192"
    assert lk.detail == (
        "no entry for key 'NVIDIA H100 80GB HBM3|gemm|bf16|bf16|tn|m512_n8192_k8192'; using "
        "'NVIDIA H200|gemm|bf16|bf16|tn|m512_n8192_k8192' of the shipped table (agent/tuned_h200.json): "
        "tuned on NVIDIA H200, used on NVIDIA H100 80GB HBM3 (same sm_90); "
        "re-tune for this GPU with argus-cutlass tune gemm")
    assert lookup_config("gemm", *SHAPE, gpu="NVIDIA GH200 480GB", store=st).source == "shipped"


def test_an_exact_gpu_entry_wins_over_a_same_arch_one_in_either_source(st, monkeypatch):
    heur = default_config(*SHAPE)
    h200_cfg, h100_cfg = heur.replace(swizzle=2), heur.replace(raster="along_m")
    # shipped H200, user store H100: on the H100 its own (store) entry; on the H200 the shipped one
    _ship(monkeypatch, _gemm_entry(H200, h200_cfg))
    st.record_best(H100, "gemm", Problem(*SHAPE), h100_cfg, 0.2)
    assert lookup_config("gemm", *SHAPE, gpu=H100, store=st)[:2] == (h100_cfg, "store")
    assert lookup_config("gemm", *SHAPE, gpu=H200, store=st)[:2] == (h200_cfg, "shipped")
    # an exact entry in the shipped table beats a same-arch entry in the user store
    # on an H800 both are other sm_90 GPUs: the user store first
    assert lookup_config("gemm", *SHAPE, gpu="NVIDIA H800", store=st).source == "store"
    _ship(monkeypatch, _gemm_entry("NVIDIA H800", h200_cfg))
    assert lookup_config("gemm", *SHAPE, gpu="NVIDIA H800", store=st)[:2] == (h200_cfg, "shipped")


def test_a_refused_exact_entry_falls_to_the_same_arch_one_and_both_are_said(st, monkeypatch):
    heur = default_config(*SHAPE)
    _ship(monkeypatch, _gemm_entry(H200, heur.replace(swizzle=2)))
    st.record_best(H100, "gemm", Problem(*SHAPE), heur, 0.2)
    h100_key = entry_key(H100, "gemm", Problem(*SHAPE))
    st.update(lambda d: d["entries"][h100_key]["config"].update(stages=12))
    lk = lookup_config("gemm", *SHAPE, gpu=H100, store=st)
    assert lk.source == "shipped" and lk.entry_key == entry_key(H200, "gemm", Problem(*SHAPE))
    assert lk.detail.startswith(f"entry {h100_key!r} of your experience store skipped: refused by the "
                                "verifier")
    assert f"; no usable entry for key {h100_key!r}; using " in lk.detail and "(same sm_90)" in lk.detail


def test_an_unknown_gpu_name_matches_exactly_only(st, monkeypatch):
    _ship(monkeypatch, _gemm_entry(H200, default_config(*SHAPE).replace(swizzle=2)))
    lk = lookup_config("gemm", *SHAPE, gpu="NVIDIA A100-SXM4-80GB", store=st)
    assert lk.source == "heuristic"
    assert lk.detail == (
        "no entry for key 'NVIDIA A100-SXM4-80GB|gemm|bf16|bf16|tn|m512_n8192_k8192' (shipped table has gpu "
        "NVIDIA H200 only; 'NVIDIA A100-SXM4-80GB' is no known sm_90 GPU name, so only entries of exactly "
        "that name match; nearest: 'NVIDIA H200|gemm|bf16|bf16|tn|m512_n8192_k8192', differs in gpu)")


def test_attention_lookups_take_the_same_rules(st, monkeypatch):
    from argus_cutlass.agent.store import attention_entry, attention_key, lookup_attention_config
    from argus_cutlass.kernels.attention.heuristics import default_config as attn_default
    from argus_cutlass.kernels.attention.problem import AttentionProblem

    p = AttentionProblem(2, 16, 16, 3000, 3000, 128, causal=True)
    base = attn_default(128, "bf16", True, False)
    lk = lookup_attention_config(p, gpu=H100, store=st)
    assert lk.source == "heuristic" and lk.detail.startswith(f"no entry for key {attention_key(H100, p)!r}")
    _ship(monkeypatch, attention_entry(H200, p, base.replace(stages=base.stages), 1.0))
    lk = lookup_attention_config(p, gpu=H100, store=st)
    assert lk.source == "shipped"
    assert "same sm_90); re-tune for this GPU with argus-cutlass tune attention" in lk.detail
    forced = lookup_attention_config(p, heuristic=True, gpu=H100, store=st)
    assert forced.source == "forced" and "no table read" in forced.detail


# ---- MoE entries ---------------------------------------------------------------------------------


def test_moe_key_buckets_t_by_powers_of_two():
    assert moe_key(H200, MOE) == "NVIDIA H200|moe|bf16|e128k8h2048i768|t128"
    assert [moe_tokens_bucket(t) for t in (1, 64, 65, 128, 129, 256, 257, 2**20)] == \
        [1, 64, 128, 128, 256, 256, 512, 2**20]
    # no bucket straddles the heuristic's small/large boundary: one heuristic configuration per bucket
    for t in range(1, 2049):
        b = moe_tokens_bucket(t)
        assert moe_default(MoEProblem(t, 8, 2, 4096, 14336)) == moe_default(MoEProblem(b, 8, 2, 4096, 14336))


def test_moe_entry_recorded_is_used_for_its_bucket(st):
    tuned = small_t_config().replace(**MOE_GOOD)
    assert lookup_moe_config(MOE, gpu=H200, store=st)[:2] == (moe_default(MOE), "heuristic")
    assert record_moe_best(MOE, tuned, 0.05, 0.07, gpu=H200, store=st)
    assert not record_moe_best(MOE, small_t_config(), 0.06, gpu=H200, store=st)  # slower: kept
    e = st.read()["entries"][moe_key(H200, MOE)]
    assert (e["kernel"], e["ms"], e["grouped_mm_ms"], e["problem"]["tokens"]) == ("moe", 0.05, 0.07, 100)
    assert e["tflops"] == pytest.approx(MOE.flops() / 0.05e-3 / 1e12)
    lk = lookup_moe_config(MoEProblem(120, 128, 8, 2048, 768), gpu=H200, store=st)  # same bucket t128
    assert (lk.config, lk.source) == (tuned, "store")
    assert lk.detail == "key 'NVIDIA H200|moe|bf16|e128k8h2048i768|t128' found in your experience store"
    assert lookup_moe_config(MoEProblem(129, 128, 8, 2048, 768), gpu=H200, store=st).source == "heuristic"
    fp16 = MoEProblem(100, 128, 8, 2048, 768, "fp16")   # no fp16 entry: the bf16 one, run as fp16 (below)
    assert lookup_moe_config(fp16, gpu=H200, store=st)[:2] == (tuned.replace(dtype="fp16"), "store")
    lk = lookup_moe_config(MOE, gpu=H100, store=st)  # an H200 entry on an H100
    assert lk.source == "store"
    assert "tuned on NVIDIA H200, used on NVIDIA H100 80GB HBM3 (same sm_90)" in lk.detail


def test_moe_lookup_order_is_gemms_store_then_shipped(st, monkeypatch):
    shipped, user = small_t_config().replace(**MOE_GOOD), small_t_config().replace(gu_stages=4)
    _ship(monkeypatch, moe_entry(H200, MOE, shipped, 0.05))
    assert lookup_moe_config(MOE, gpu=H200, store=st)[:2] == (shipped, "shipped")
    record_moe_best(MOE, user, 0.06, gpu=H200, store=st)
    assert lookup_moe_config(MOE, gpu=H200, store=st)[:2] == (user, "store")


@pytest.mark.parametrize("config, why", [
    ({**small_t_config().model_dump(), **MOE_BAD},
     "refused by the verifier (the layer does not verify for this problem)"),
    ({**small_t_config().model_dump(), "tile_m": 96}, "stale (its config no longer parses: tile_m: "),
    ({"tile_m": 64, "knob_removed_since": 3}, "stale (its config no longer parses: knob_removed_since: "),
    ({**small_t_config().model_dump(), "dtype": "fp16"}, "its config is fp16, the problem bf16"),
])
def test_moe_entry_refused_or_stale_is_skipped_and_named(st, config, why):
    key = moe_key(H200, MOE)
    st.keep_faster(key, {**moe_entry(H200, MOE, small_t_config(), 0.05), "config": config})
    lk = lookup_moe_config(MOE, gpu=H200, store=st)
    assert lk[:2] == (moe_default(MOE), "heuristic")
    assert lk.detail.startswith(f"entry {key!r} of your experience store skipped: {why}")


def test_moe_entry_written_before_a_new_config_field_still_parses(st):
    """Fields a later MoEConfig adds take their defaults: an entry holding only older fields is used."""
    old = {k: v for k, v in small_t_config().replace(**MOE_GOOD).model_dump().items()
           if k in ("dtype", "tile_m", "gu_tile_n", "dn_tile_n", "tile_k", "gu_stages", "dn_stages")}
    st.keep_faster(moe_key(H200, MOE), {**moe_entry(H200, MOE, small_t_config(), 0.05), "config": old})
    lk = lookup_moe_config(MOE, gpu=H200, store=st)
    assert lk.source == "store" and lk.config.dn_stages == MOE_GOOD["dn_stages"]


def test_moe_miss_says_there_are_no_moe_entries(st):
    lk = lookup_moe_config(MOE, gpu=H200, store=st)
    assert lk.detail == (
        "no entry for key 'NVIDIA H200|moe|bf16|e128k8h2048i768|t128' (no tuned moe entries: "
        "neither your experience store nor the shipped table has one)")
    assert lookup_moe_config(MOE, heuristic=True, gpu=H200, store=st)[:2] == (moe_default(MOE), "forced")


# ---- the orchestrator, the report and the table ----------------------------------------------------


def test_configure_routes_moe_to_its_table(st):
    from argus_cutlass.generate import configure

    record_moe_best(MOE, small_t_config().replace(**MOE_GOOD), 0.05, gpu=H200, store=st)
    cfg, source = configure(MOE, gpu=H200, store=st)
    assert source == "store" and cfg.dn_stages == MOE_GOOD["dn_stages"]
    assert configure(MOE, heuristic=True, gpu=H200, store=st).source == "forced"
    assert configure(Problem(*SHAPE), heuristic=True).detail.startswith("the heuristic was asked for")


def test_the_report_carries_the_detail(tmp_path, monkeypatch):
    from argus_cutlass.generate import Options, run
    from argus_cutlass.kernels.gemm.problem import GemmProblem

    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(store_mod, "gpu_name", lambda: H100)
    _ship(monkeypatch, _gemm_entry(H200, default_config(*SHAPE).replace(swizzle=2)))
    rec = run(GemmProblem(*SHAPE), options=Options(smt=False, compile=False)).record()
    assert rec["config_source"] == "shipped"
    assert rec["config_source_detail"].endswith(
        "(same sm_90); re-tune for this GPU with argus-cutlass tune gemm")


def test_table_explains_a_same_arch_match_and_lists_moe_entries(st, monkeypatch):
    from argus_cutlass.agent.table import entries, explain, format_entries, format_explain

    _ship(monkeypatch, _gemm_entry(H200, default_config(*SHAPE).replace(swizzle=2)),
          moe_entry(H200, MOE, small_t_config().replace(**MOE_GOOD), 0.05))
    text = "\n".join(format_explain(explain(Problem(*SHAPE), gpu=H100, store=st)))
    assert "would use    the shipped H200 table" in text
    assert "why          no entry for key 'NVIDIA H100 80GB HBM3|gemm|" in text
    assert "matches [shipped] entry of NVIDIA H200 (same architecture)" in text and "(not used" not in text
    ex = explain(MOE, gpu=H200, store=st)
    assert ex["chosen"]["source"] == "shipped" and ex["problem_key"]["tokens"] == "t128"
    lines = format_entries(entries("moe", store=st), "moe")
    assert lines[0].startswith("moe: 1 entries; key = gpu | kernel | dtype | shape | tokens")
    assert lines[1].startswith("  [shipped] NVIDIA H200 | bf16 | e128k8h2048i768 | t128: 64-row tiles")


def test_api_configures_moe_once_per_bucket(monkeypatch):
    import argus_cutlass.generate as gen
    from argus_cutlass import api

    calls = []
    monkeypatch.setattr(gen, "configure", lambda p: calls.append(p.tokens) or (moe_default(p), "heuristic"))
    monkeypatch.setattr(api, "_MOE_CONFIGS", {})
    for t in (100, 120, 128, 129, 100):
        p = MoEProblem(t, 128, 8, 2048, 768)
        assert api._moe_config(p) == moe_default(p)
    assert calls == [100, 129]


def test_fp16_without_an_entry_runs_the_bf16_entry_of_its_shape_and_says_so(tmp_path, monkeypatch):
    """bf16 and fp16 share wgmma's rate and layouts: an fp16 GEMM with no entry of its own takes the bf16
    entry of the same key (printed as fp16, verified as fp16), and the detail names both keys; a layout the
    shipped table has in neither dtype has no such sibling and stays untuned. (Since session 25 the shipped
    table holds all eight flavors, so the fp16 -> fp32 nt entries are taken out of it here.)"""
    from argus_cutlass.agent import store as store_mod
    from argus_cutlass.agent.store import ExperienceStore, lookup_config

    fl = ("fp16", "fp32", "nt")
    kept = tuple(e for e in store_mod.shipped_entries() if (e.get("dtype"), e.get("out_dtype"), e.get("layout")) != fl)
    assert len(kept) < len(store_mod.shipped_entries())   # the flavor is shipped: the test takes it out
    monkeypatch.setattr(store_mod, "_shipped_table", lambda: kept)
    none = ExperienceStore(str(tmp_path / "none.json"))
    bf = lookup_config("gemm", 256, 4096, 14336, "bf16", "fp32", "nt", gpu="NVIDIA H200", store=none)
    fp = lookup_config("gemm", 256, 4096, 14336, "fp16", "fp32", "nt", gpu="NVIDIA H200", store=none)
    assert bf.source == fp.source == "shipped"
    assert fp.config == bf.config.replace(dtype="fp16")
    assert fp.key.split("|")[2:5] == ["fp16", "fp32", "nt"] and fp.entry_key == bf.entry_key
    assert "no entry for key" in fp.detail and "not measured in fp16" in fp.detail
    own = lookup_config("gemm", 3000, 4096, 14336, "fp16", "fp16", "tn", gpu="NVIDIA H200", store=none)
    assert own.source == "shipped" and own.entry_key.split("|")[2:5] == ["fp16", "fp16", "tn"]   # its own entry
    for args in (("fp16", "fp16", "nn"), ("fp16", "fp32", "tt")):
        lk = lookup_config("gemm", 3000, 4096, 14336, *args, gpu="NVIDIA H200", store=none)
        assert lk.source == "heuristic" and lk.entry_key is None   # this file's untuned rule (the fixture)


@pytest.mark.parametrize("bad", [[None, 64, 64], ["x", 64, 64], [float("nan"), 64, 64], [[1], 64, 64]])
def test_a_malformed_shape_in_the_store_is_ranked_last_not_a_crash(tmp_path, bad):
    """Review, session 21: the nearest-shape ordering read every store entry's ``shape`` with ``int()``, so
    one hand-edited entry (of any bucket) made every GEMM lookup raise TypeError / ValueError. Such an
    entry is now ordered after the well-formed ones of its key, and still used when it is the only one."""
    from argus_cutlass.agent.store import ExperienceStore, lookup_config, make_entry
    from argus_cutlass.kernels.gemm.config import GemmConfig

    st = ExperienceStore(tmp_path / "e.json")
    cfg = GemmConfig(tile_n=128, cluster_m=1)
    e = {**make_entry("NVIDIA H200", "gemm", Problem(64, 64, 64), cfg, 1.0), "shape": bad}
    st.update(lambda d: d["entries"].__setitem__("NVIDIA H200|gemm|bf16|bf16|tn|m64_n64_k64", e))
    assert lookup_config("gemm", 4096, 4096, 4096, gpu="NVIDIA H200", store=st).source == "shipped"
    own = lookup_config("gemm", 64, 64, 64, gpu="NVIDIA H200", store=st)
    assert own.source == "store" and own.config == cfg and "measured at" not in own.detail


def test_the_entry_measured_nearest_wins_whichever_table_holds_it(st, monkeypatch):
    """A bucket with a user entry measured at 4096^3 and shipped entries at 3000 x 4096^2 and 4096^3: the
    problem's own shape wins (shipped 3000 for 3000; the user's 4096^3 over the shipped one at the same
    distance), and a shape between them takes the nearer measurement."""
    from argus_cutlass.kernels.gemm.config import GemmConfig

    mine = GemmConfig(tile_n=128, cluster_m=1)
    ship_3000, ship_4096 = GemmConfig(tile_m=64, tile_n=128, schedule="pingpong", epi_m=64, cluster_m=1), GemmConfig()
    _ship(monkeypatch, make_entry(H200, "gemm", Problem(3000, 4096, 4096), ship_3000, 0.15),
          make_entry(H200, "gemm", Problem(4096, 4096, 4096), ship_4096, 0.2))
    st.keep_faster(entry_key(H200, "gemm", Problem(4096, 4096, 4096)),
                   make_entry(H200, "gemm", Problem(4096, 4096, 4096), mine, 0.19))
    pick = {m: lookup_config("gemm", m, 4096, 4096, gpu=H200, store=st) for m in (3000, 4096, 3100, 3900)}
    assert (pick[3000].source, pick[3000].config) == ("shipped", ship_3000)
    assert (pick[4096].source, pick[4096].config) == ("store", mine)
    assert pick[3100].config == ship_3000 and "measured at 3000x4096x4096" in pick[3100].detail
    assert (pick[3900].source, pick[3900].config) == ("store", mine)


# ---- the sibling dtype rule for MoE and attention ---------------------------------------------------
#
# bf16 and fp16 share wgmma's rate and shared-memory layouts: a problem with no usable entry of its own
# runs the entry of its key in the other 2-byte type, its configuration's dtype replaced and checked for
# the problem in the problem's dtype (as GEMM's test above).

#: an attention bucket of the shipped table (bf16 d128 causal s2048), in fp16
ATTN16 = dict(batch=8, heads=16, kv_heads=16, seqlen_q=2048, seqlen_k=2048, head_dim=128, dtype="fp16",
              causal=True)
SIBLING_TEXT = ("bf16 and fp16 are both 2-byte types with the same tensor-core rate, so its configuration "
                "runs as fp16; not measured in fp16: tune with `")
SHIPPED_TABLE = "the shipped table (agent/tuned_h200.json)"


def _attn(**changes):
    from argus_cutlass.kernels.attention.problem import AttentionProblem

    return AttentionProblem(**{**ATTN16, **changes})


def test_an_fp16_moe_bench_cell_runs_the_bf16_shipped_entry(tmp_path):
    none = ExperienceStore(tmp_path / "none.json")
    bf = lookup_moe_config(MoEProblem.for_model("mixtral", 16), gpu=H200, store=none)
    fp = lookup_moe_config(MoEProblem.for_model("mixtral", 16, dtype="fp16"), gpu=H200, store=none)
    assert bf.source == fp.source == "shipped" and bf.config.dtype == "bf16"   # bf16 unchanged
    assert bf.detail == f"key 'NVIDIA H200|moe|bf16|e8k2h4096i14336|t16' found in {SHIPPED_TABLE}"
    assert fp.config == bf.config.replace(dtype="fp16") and fp.entry_key == bf.entry_key == bf.key
    assert fp.key == "NVIDIA H200|moe|fp16|e8k2h4096i14336|t16"
    assert fp.detail == (
        "no entry for key 'NVIDIA H200|moe|fp16|e8k2h4096i14336|t16'; using the bf16 entry "
        f"'NVIDIA H200|moe|bf16|e8k2h4096i14336|t16' of {SHIPPED_TABLE}: {SIBLING_TEXT}"
        "argus-cutlass tune moe --tokens 16 --experts 8 --topk 2 --hidden 4096 --ffn 14336 --dtype fp16`")


def test_an_fp16_attention_problem_runs_the_bf16_shipped_entry_of_its_bucket(tmp_path):
    from argus_cutlass.agent.store import attention_key, lookup_attention_config

    none = ExperienceStore(tmp_path / "none.json")
    bf = lookup_attention_config(_attn(dtype="bf16"), gpu=H200, store=none)
    fp = lookup_attention_config(_attn(), gpu=H200, store=none)
    assert bf.source == fp.source == "shipped" and bf.config.dtype == "bf16" and bf.detail.startswith("key ")
    assert fp.config == bf.config.replace(dtype="fp16") and fp.entry_key == bf.key
    assert fp.detail == (
        f"no entry for key {attention_key(H200, _attn())!r}; using the bf16 entry {bf.key!r} of "
        f"{SHIPPED_TABLE}: {SIBLING_TEXT}argus-cutlass tune attention --batch 8 --heads 16 --seqlen-q 2048 "
        "--head-dim 128 --causal --dtype fp16`")
    h100 = lookup_attention_config(_attn(), gpu=H100, store=none)   # the same-arch pass, then the sibling
    assert h100.source == "shipped" and h100.entry_key == bf.key
    assert f"of {SHIPPED_TABLE}, tuned on NVIDIA H200: bf16 and fp16" in h100.detail
    # a bucket no bf16 entry covers (head dim 96): the heuristic, today's detail
    d96 = lookup_attention_config(_attn(head_dim=96), gpu=H200, store=none)
    assert d96.source == "heuristic" and d96.entry_key is None
    assert d96.detail == (
        "no entry for key 'NVIDIA H200|attention|fp16|d96|causal|fixed|s2048' (shipped table has dtype bf16, "
        "head_dim d64/d128/d256 only; nearest: 'NVIDIA H200|attention|bf16|d128|causal|fixed|s2048', differs "
        "in dtype, head_dim)")


def test_an_own_entry_wins_over_the_siblings_in_either_table(st, monkeypatch):
    """The problem's own key first, in both tables and on both GPU passes: a user-store fp16 entry wins over a
    shipped bf16 one, a shipped fp16 entry over a user-store bf16 one."""
    from argus_cutlass.agent.store import attention_entry, lookup_attention_config, record_attention_best
    from argus_cutlass.kernels.attention.space import candidates

    fp16 = MoEProblem(100, 128, 8, 2048, 768, "fp16")
    shipped, mine = small_t_config().replace(**MOE_GOOD), small_t_config().replace(gu_stages=4, dtype="fp16")
    _ship(monkeypatch, moe_entry(H200, MOE, shipped, 0.05))
    assert lookup_moe_config(fp16, gpu=H200, store=st)[:2] == (shipped.replace(dtype="fp16"), "shipped")
    record_moe_best(fp16, mine, 0.06, gpu=H200, store=st)
    lk = lookup_moe_config(fp16, gpu=H200, store=st)
    assert lk[:2] == (mine, "store")
    assert lk.detail == f"key {moe_key(H200, fp16)!r} found in your experience store"

    bf, fp = candidates(_attn(dtype="bf16"), limit=2), candidates(_attn(), limit=2)
    _ship(monkeypatch, attention_entry(H200, _attn(), fp[1], 1.0))
    record_attention_best(_attn(dtype="bf16"), bf[0], 1.0, gpu=H200, store=st)
    lk = lookup_attention_config(_attn(), gpu=H200, store=st)
    assert lk[:2] == (fp[1], "shipped") and lk.detail.startswith("key 'NVIDIA H200|attention|fp16|")
    _ship(monkeypatch)   # no shipped fp16 entry: the user's bf16 one, as fp16
    lk = lookup_attention_config(_attn(), gpu=H200, store=st)
    assert lk[:2] == (bf[0].replace(dtype="fp16"), "store")
    assert "of your experience store: bf16 and fp16" in lk.detail


def test_an_entry_refused_in_the_problems_dtype_leaves_the_heuristic_and_says_why(st, monkeypatch):
    """The sibling's configuration is checked as the problem's type: a check refusing fp16 only refuses the
    entry for the fp16 problem (still used for bf16); the detail is the miss of the problem's own key, then
    the sibling entry skipped and why."""
    from argus_cutlass.kernels.moe import space as moe_space

    tuned = small_t_config().replace(**MOE_GOOD)
    _ship(monkeypatch, moe_entry(H200, MOE, tuned, 0.05))
    real = moe_space.feasible
    monkeypatch.setattr(moe_space, "feasible", lambda cfg, p: cfg.dtype != "fp16" and real(cfg, p))
    fp16 = MoEProblem(100, 128, 8, 2048, 768, "fp16")
    assert lookup_moe_config(MOE, gpu=H200, store=st)[:2] == (tuned, "shipped")
    lk = lookup_moe_config(fp16, gpu=H200, store=st)
    assert lk[:2] == (moe_default(fp16), "heuristic") and lk.entry_key is None
    assert lk.detail == (
        "no entry for key 'NVIDIA H200|moe|fp16|e128k8h2048i768|t128' (shipped table has dtype bf16 only; "
        "nearest: 'NVIDIA H200|moe|bf16|e128k8h2048i768|t128', differs in dtype); entry "
        f"'NVIDIA H200|moe|bf16|e128k8h2048i768|t128' of {SHIPPED_TABLE} skipped: run as fp16, refused by "
        "the verifier (the layer does not verify for this problem)")
    # refused by the real rules in both types (gu_stages 12: shared memory), and a stale entry: named likewise
    monkeypatch.setattr(moe_space, "feasible", real)
    bad = {**tuned.model_dump(), **MOE_BAD}
    st.keep_faster(moe_key(H200, MOE), {**moe_entry(H200, MOE, tuned, 0.04), "config": bad})
    _ship(monkeypatch, {**moe_entry(H200, MOE, tuned, 0.05), "config": {"tile_m": 96, "dtype": "bf16"}})
    lk = lookup_moe_config(fp16, gpu=H200, store=st)
    assert lk.source == "heuristic"
    sib = "entry 'NVIDIA H200|moe|bf16|e128k8h2048i768|t128' of"
    assert f"{sib} your experience store skipped: run as fp16, refused by the verifier" in lk.detail
    assert f"{sib} {SHIPPED_TABLE} skipped: run as fp16, stale (its config no longer parses: tile_m: " \
        in lk.detail


def test_an_attention_entry_refused_as_fp16_and_a_refused_own_entry(st, monkeypatch):
    from argus_cutlass.agent.store import attention_entry, attention_key, lookup_attention_config
    from argus_cutlass.kernels.attention import space as attn_space
    from argus_cutlass.kernels.attention.heuristics import default_config as attn_default

    base = attn_default(128, "bf16", True, False)
    _ship(monkeypatch, attention_entry(H200, _attn(dtype="bf16"), base, 1.0))
    real = attn_space.feasible
    monkeypatch.setattr(attn_space, "feasible",
                        lambda cfg: (False, ("R0 fp16 refused",)) if cfg.dtype == "fp16" else real(cfg))
    lk = lookup_attention_config(_attn(), gpu=H200, store=st)
    assert lk[:2] == (attn_default(128, "fp16", True, False), "heuristic")
    sib = attention_key(H200, _attn(dtype="bf16"))
    assert lk.detail.endswith(f"entry {sib!r} of {SHIPPED_TABLE} skipped: run as fp16, refused by the "
                              "verifier (R0 fp16 refused)")
    assert lk.detail.startswith(f"no entry for key {attention_key(H200, _attn())!r} (")
    # the problem's own entry refused (a hand-edited head dim), the sibling used: both said
    monkeypatch.setattr(attn_space, "feasible", real)
    own = attention_key(H200, _attn())
    st.keep_faster(own, {**attention_entry(H200, _attn(), base, 1.0),
                         "config": {**base.model_dump(), "dtype": "fp16", "head_dim": 64}})
    lk = lookup_attention_config(_attn(), gpu=H200, store=st)
    assert lk[:2] == (base.replace(dtype="fp16"), "shipped")
    assert lk.detail.startswith(
        f"entry {own!r} of your experience store skipped: its config is (head_dim, dtype, causal, varlen) "
        f"(64, 'fp16', True, False), the problem (128, 'fp16', True, False); no usable entry for key "
        f"{own!r}; using the bf16 entry {sib!r} of {SHIPPED_TABLE}: {SIBLING_TEXT}")


def test_a_varlen_problem_says_how_its_own_entry_is_recorded(st):
    from argus_cutlass.agent.store import lookup_attention_config, record_attention_best
    from argus_cutlass.kernels.attention.heuristics import default_config as attn_default
    from argus_cutlass.kernels.attention.problem import AttentionProblem

    def varlen(dtype):
        return AttentionProblem.varlen_problem([100, 2000], [100, 2000], 8, 8, 128, dtype, True)

    cfg = attn_default(128, "bf16", True, True)
    record_attention_best(varlen("bf16"), cfg, 1.0, gpu=H200, store=st)
    lk = lookup_attention_config(varlen("fp16"), gpu=H200, store=st)
    assert lk[:2] == (cfg.replace(dtype="fp16"), "store")
    assert lk.detail.endswith(
        "not measured in fp16: `argus-cutlass tune attention` measures fixed lengths only; record a varlen "
        "measurement with argus_cutlass.agent.store.record_attention_best")


def test_gemm_keeps_its_sibling_wording(st, monkeypatch):
    """GEMM's detail of the rule is as before the rule covered attention and MoE: a refused fp16 entry of its
    own is not named when the bf16 one is used (``_Sibling.explain``)."""
    bf = default_config(*SHAPE).replace(swizzle=2)
    fp = Problem(*SHAPE, "fp16", "fp16")
    stale = {**make_entry(H200, "gemm", fp, bf.replace(dtype="fp16", out_dtype="fp16"), 0.1),
             "config": {"tile_m": 96}}
    _ship(monkeypatch, _gemm_entry(H200, bf), stale)
    lk = lookup_config("gemm", *SHAPE, "fp16", "fp16", gpu=H200, store=st)
    assert lk[:2] == (bf.replace(dtype="fp16", out_dtype="fp16"), "shipped")
    assert lk.detail.startswith(f"no entry for key {entry_key(H200, 'gemm', fp)!r}; using the bf16 entry ")


def test_the_run_report_and_the_cli_explain_an_fp16_moe_layer(tmp_path, monkeypatch):
    from argus_cutlass.generate import Options, run

    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(store_mod, "gpu_name", lambda: None)
    p = MoEProblem.for_model("mixtral", 16, dtype="fp16")
    rec = run(p, options=Options(smt=False, compile=False)).record()
    assert rec["config_source"] == "shipped" and rec["config"]["dtype"] == "fp16"
    assert rec["config_source_detail"].startswith(
        "no entry for key 'NVIDIA H200|moe|fp16|e8k2h4096i14336|t16'; using the bf16 entry "
        "'NVIDIA H200|moe|bf16|e8k2h4096i14336|t16' of the shipped table")
