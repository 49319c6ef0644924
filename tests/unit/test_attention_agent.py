"""The agent knows attention: the search space, the knowledge base, the store and ``tune attention`` (CPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from pydantic import ValidationError

from argus_cutlass.agent.kb import Technique, attention_env, load_knowledge
from argus_cutlass.agent.store import (
    ExperienceStore,
    attention_key,
    lookup_attention_config,
    record_attention_best,
)
from argus_cutlass.kernels.attention.config import AttentionConfig
from argus_cutlass.kernels.attention.heuristics import default_config
from argus_cutlass.kernels.attention.problem import AttentionProblem
from argus_cutlass.kernels.attention.space import (
    KNOBS,
    AttentionSpace,
    admissible,
    candidates,
    estimate,
    feasible,
    knob_values,
    program_name,
)
from argus_cutlass.verify.catalogue import all_invariants

GPU = "NVIDIA H200"
AKB = load_knowledge("knowledge_attention.toml")


# ---- the search space --------------------------------------------------------------------------------


def test_space_declares_the_knobs_and_fa3_defaults():
    space = AttentionSpace(head_dim=128)
    assert tuple(space.fragments) == KNOBS
    assert space.fragments["tile_m"].domain() == (64, 128, 192)
    assert space.fragments["tile_n"].domain() == tuple(range(48, 257, 16))
    assert set(space.fragments["stages"].domain()) == {2, 3}
    assert set(space.fragments["scheduler"].domain()) == {"static", "dynamic"}
    assert set(space.fragments["q_stages"].domain()) == {1, 2}
    assert space.size == 3 * 14 * 2 * 2 * 2 * 2 * 2 - 14 * 2 * 2 * 2 * 2  # less ping-pong with one warpgroup
    assert not admissible({"tile_m": 64, "pingpong": True})
    for d in (64, 96, 128, 192, 256):
        for causal in (False, True):
            s = AttentionSpace(head_dim=d, causal=causal)
            heur = default_config(d, causal=causal)
            assert knob_values(s.default()) == knob_values(heur)
            assert s.contains(heur) and s.contains(s.default())
    assert not AttentionSpace(head_dim=64).contains(default_config(128))


@pytest.mark.parametrize("problem", [
    AttentionProblem(2, 16, 16, 2048, 2048, 128),
    AttentionProblem(2, 16, 8, 2048, 2048, 128, causal=True),
    AttentionProblem(8, 16, 16, 512, 512, 64),
    AttentionProblem(1, 8, 8, 1000, 3000, 256, causal=True),
    AttentionProblem.varlen_problem([100, 3000, 700], [100, 3000, 700], 8, 8, 96),
], ids=lambda p: p.describe())
def test_candidates_are_feasible_distinct_and_fa3_first(problem):
    heur = default_config(problem.head_dim, problem.dtype, problem.causal, problem.varlen)
    ranked = candidates(problem)
    assert len(ranked) >= 8
    assert program_name(ranked[0]) == program_name(heur)  # the heuristic's kernel comes first
    space = AttentionSpace.for_problem(problem)
    assert all(space.contains(c) and feasible(c)[0] for c in ranked)
    assert len({program_name(c) for c in ranked}) == len(ranked)
    assert candidates(problem, limit=3) == ranked[:3]
    # the whole verifier (no SMT) accepts the first ones
    top = candidates(problem, limit=3, verify=True)
    assert top == ranked[:3]
    assert all(feasible(c, full=True)[0] for c in top)


def test_infeasible_configs_are_filtered_with_their_rule():
    space = AttentionSpace(head_dim=256)
    ok, reasons = feasible(space.config(tile_n=256, stages=3))
    assert not ok and any(r.startswith("smem.capacity") for r in reasons)
    p = AttentionProblem(1, 8, 8, 4096, 4096, 256)
    ranked = candidates(p)
    assert space.config(tile_n=256, stages=3) not in ranked
    assert len(ranked) < sum(1 for _ in space.enumerate())  # the smem and register limits bite at d = 256


def test_estimate_favours_the_dynamic_scheduler_under_a_causal_mask():
    causal = AttentionProblem(4, 16, 16, 4096, 4096, 128, causal=True)
    s = AttentionSpace.for_problem(causal)
    assert estimate(s.config(scheduler="dynamic"), causal) < estimate(s.config(scheduler="static"), causal)
    full = AttentionProblem(4, 16, 16, 4096, 4096, 128)
    f = AttentionSpace.for_problem(full)
    assert estimate(f.config(scheduler="static"), full) <= estimate(f.config(scheduler="dynamic"), full)
    assert estimate(f.config(pingpong=False), full) > estimate(f.config(), full)


# ---- the knowledge base ------------------------------------------------------------------------------


def test_attention_kb_loads_with_attention_knobs():
    assert AKB.family == "attention"
    fields = set(AttentionConfig.model_fields)
    for t in AKB.techniques:
        assert t.effect and t.source and t.title and t.risks, t.id
        assert set(t.knobs) <= fields, t.id
        assert not set(t.missing_knobs) & fields, t.id
    for t in AKB.available:
        assert set(t.knobs) <= set(KNOBS), f"{t.id}: an available technique moves searched knobs only"
    ids = {t.id for t in AKB.techniques}
    assert {"tile_n_per_head_dim", "consumer_warpgroups", "pingpong", "pipeline_stages",
            "dynamic_scheduler_causal", "cluster_2x1", "intra_warpgroup_overlap"} <= ids


def test_attention_kb_risks_name_invariants_or_rules():
    from argus_cutlass.verify import RULES
    from argus_cutlass.verify.attention import OBLIGATIONS

    invs = all_invariants()
    known = {i.id for i in invs} | {r for i in invs for r in i.rules} | set(RULES) | set(OBLIGATIONS)
    for t in AKB.techniques:
        unknown = [r for r in t.risks if r not in known]
        assert not unknown, f"{t.id}: {unknown}"
    assert any(r.startswith("FA") for t in AKB.techniques for r in t.risks)


def test_unavailable_attention_techniques():
    cl = AKB.get("cluster_2x1")
    assert not cl.available and cl.missing_knobs == ("cluster",) and "1-CTA" in cl.why
    intra = AKB.get("intra_warpgroup_overlap")
    assert not intra.available and intra.why
    env = attention_env(AttentionProblem(2, 16, 16, 4096, 4096, 128), default_config(128))
    assert cl not in AKB.applicable(env)


def test_attention_preconditions():
    causal = AttentionProblem(2, 16, 16, 4096, 4096, 128, causal=True)
    full = AttentionProblem(2, 16, 16, 4096, 4096, 128)
    env_c = attention_env(causal, default_config(128, causal=True))
    env_f = attention_env(full, default_config(128))
    sched = AKB.get("dynamic_scheduler_causal")
    assert sched.applicable(env_c) and not sched.applicable(env_f)
    assert env_f["tiles"] == 16 * 2 * 32 and env_f["waves"] == pytest.approx(1024 / 132)
    pp = AKB.get("pingpong")
    assert pp.applicable(env_f) and not pp.applicable(attention_env(full, default_config(128).replace(tile_m=64)))
    small = attention_env(AttentionProblem(1, 4, 4, 512, 512, 128), default_config(128))
    assert AKB.get("smaller_tiles_small_grid").applicable(small)
    assert not AKB.get("smaller_tiles_small_grid").applicable(env_f)


def test_family_context_checks_knobs_and_variables():
    row = {"id": "x", "title": "x", "knobs": ["pingpong"], "effect": "e", "risks": ["turn.order"], "source": "s"}
    Technique.model_validate(row, context={"family": "attention"})
    with pytest.raises(ValidationError):
        Technique(**row)  # GEMM by default: pingpong is not a GemmConfig field
    with pytest.raises(ValidationError):
        Technique.model_validate({**row, "knobs": ["swap_ab"]}, context={"family": "attention"})
    with pytest.raises(ValidationError):
        Technique.model_validate({**row, "requires": [{"var": "m", "op": "<", "value": 1}]},
                                 context={"family": "attention"})
    assert load_knowledge().family == "gemm" and load_knowledge().get("swap_ab").available


# ---- the experience store ----------------------------------------------------------------------------


def test_store_round_trip(tmp_path):
    st = ExperienceStore(tmp_path / "e.json")
    p = AttentionProblem(2, 16, 16, 3000, 3000, 128, causal=True)
    cfg, source = lookup_attention_config(p, gpu=GPU, store=st)
    assert source in ("heuristic", "shipped")
    tuned = candidates(p, limit=3)[2]
    assert record_attention_best(p, tuned, 2.0, 2.5, gpu=GPU, store=st)
    assert not record_attention_best(p, default_config(128, causal=True), 3.0, gpu=GPU, store=st)  # slower: kept
    cfg, source = lookup_attention_config(p, gpu=GPU, store=st)
    assert (cfg, source) == (tuned, "store")
    e = st.read()["entries"][attention_key(GPU, p)]
    assert e["kernel"] == "attention" and e["ms"] == 2.0 and e["cudnn_ms"] == 2.5
    assert e["tflops"] == pytest.approx(p.flops / 2.0e-3 / 1e12)
    # the same bucket (key length rounded up to 4096) finds it; the other mask does not
    assert lookup_attention_config(AttentionProblem(1, 8, 8, 4000, 4000, 128, causal=True), gpu=GPU,
                                   store=st)[1] == "store"
    assert lookup_attention_config(AttentionProblem(2, 16, 16, 3000, 3000, 128), gpu=GPU, store=st)[1] != "store"


# ---- argus-cutlass tune attention --------------------------------------------------------------------


def _tune(tmp_path, budget, env_extra=None):
    env = dict(os.environ)
    env["ARGUS_CACHE_DIR"] = str(tmp_path / "cache")
    env.update(env_extra or {})
    proc = subprocess.run(
        [sys.executable, "-m", "argus_cutlass.cli", "tune", "attention", "--batch", "2", "--heads", "8",
         "--seqlen-q", "1024", "--head-dim", "128", "--causal", "--budget", str(budget), "--out", "out"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900,
    )
    data = json.loads((tmp_path / "out" / "tune_attention.json").read_text()) if proc.returncode in (0, 1) else None
    return proc, data


def test_tune_attention_without_nvcc_stops_after_rendering(tmp_path):
    proc, data = _tune(tmp_path, 2, {"ARGUS_NVCC": str(tmp_path / "no-nvcc-here"), "CUDA_HOME": str(tmp_path),
                                     "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert "stopped after rendering" in proc.stdout
    assert proc.stdout.count("rendered") >= 2
    assert data["stopped_after"] == "render" and not data["recorded"] and data["best"] is None
    assert [c["status"] for c in data["candidates"]] == ["rendered", "rendered"]
    p = AttentionProblem(2, 8, 8, 1024, 1024, 128, causal=True)
    assert data["candidates"][0]["kernel"] == program_name(default_config(128, causal=True))
    assert [AttentionConfig(**c["config"]) for c in data["candidates"]] == candidates(p, limit=2)
    assert not (tmp_path / "cache" / "agent" / "experience.json").exists()


def test_tune_attention_refuses_bad_input(tmp_path, capsys):
    from argus_cutlass.cli import main

    rc = main(["tune", "attention", "--batch", "1", "--heads", "8", "--seqlen-q", "128", "--head-dim", "80",
               "--out", str(tmp_path / "o")])
    assert rc == 2 and "attention.head_dim" in capsys.readouterr().err
    rc = main(["tune", "attention", "--batch", "1", "--heads", "8", "--seqlen-q", "128", "--head-dim", "128",
               "--budget", "0", "--out", str(tmp_path / "o")])
    assert rc == 2 and "tune.budget" in capsys.readouterr().err


@pytest.mark.nvcc
def test_tune_attention_compiles_its_candidates(tmp_path):
    proc, data = _tune(tmp_path, 1)
    assert proc.returncode == 0, proc.stderr
    statuses = [c["status"] for c in data["candidates"]]
    assert len(statuses) == 1 and statuses[0] in ("compiled", "ok"), proc.stdout
    if statuses[0] == "compiled":  # no usable GPU here
        assert data["stopped_after"] == "compile" and "stopped after compiling" in proc.stdout
        assert not data["recorded"]
    else:  # measured on a Hopper GPU: the best is in the store
        assert data["best"]["ms"] > 0 and data["recorded"]
        store = json.loads((tmp_path / "cache" / "agent" / "experience.json").read_text())
        assert data["store_key"] in store["entries"]
