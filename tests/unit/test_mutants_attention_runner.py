"""The attention mutant silicon runner, CPU half (:mod:`argus_cutlass.testing.gpu_attention`).

Every mutant of ``argus_cutlass/testing/mutants_attention.toml`` is planned (with one baseline per
base configuration); each program is printed by the production template WITHOUT the verifier and
either prints or is refused with ``ConfigError("render.program")`` (outcome ``not_printable``);
the problems follow the mutant's configuration; the suite's bookkeeping (not printable, compile
failure with its ``static_assert``, run outcomes, the baseline gate, the table) is checked with
the nvcc and run steps replaced; a spawned child on a machine without torch / GPU reports an
``error`` row instead of hanging; and (``nvcc``) one printable mutant and its baseline compile.
"""

from __future__ import annotations

import json
from functools import lru_cache
from types import SimpleNamespace

import pytest

from argus_cutlass.errors import CompileError, ConfigError
from argus_cutlass.testing import gpu_attention as ga
from argus_cutlass.testing.mutants import load_catalogue

CATALOGUE = load_catalogue(family="attention")
MUTANTS = list(CATALOGUE.values())
#: the mutant whose build (with its baseline's) the nvcc test runs: d=64, the smallest tiles
NVCC_MUTANT = "row_max_lane16"
#: a mutant the printed static_assert stops at compile time (its owning rule's check)
STATIC_ASSERT_MUTANT = "mask_not_causal"


@lru_cache(maxsize=1)
def _jobs() -> tuple[ga.Job, ...]:
    return tuple(ga.plan_jobs())


@lru_cache(maxsize=None)
def _render(job_id: str) -> str | None:
    """The job's .cu, or None when the template refuses it (render.program)."""
    job = next(j for j in _jobs() if j.id == job_id)
    try:
        return ga.render_job(job)
    except ConfigError as exc:
        assert exc.rule == "render.program", (job_id, exc.rule, str(exc))
        return None


def test_every_mutant_is_planned_with_one_baseline_per_base():
    jobs = _jobs()
    bases = {m.config: m.base_name for m in MUTANTS}
    baselines = [j for j in jobs if j.mutant is None]
    assert [j.id for j in baselines] == [f"baseline_{n}" for n in dict.fromkeys(bases.values())]
    assert len(baselines) == len(bases) >= 4
    assert jobs[: len(baselines)] == tuple(baselines)  # baselines run first
    planned = {j.id: j for j in jobs if j.mutant is not None}
    assert list(planned) == list(CATALOGUE)
    base_fp = {j.config: j.program.fingerprint() for j in baselines}
    for m in MUTANTS:
        j = planned[m.id]
        assert j.config == m.config and j.base == m.base_name and j.mutant is m
        assert j.program.fingerprint() != base_fp[m.config]  # the edit is in the planned program
    assert len({j.name for j in jobs}) == len(jobs)  # kernel names never collide in the build


def test_rendering_without_the_verifier(monkeypatch):
    """Every program prints (or is refused with render.program) without the verifier running."""
    import argus_cutlass.verify.attention as va

    def no_verifier(*args, **kwargs):
        raise AssertionError("the silicon runner must not call the verifier")

    monkeypatch.setattr(va, "verify_attention", no_verifier)
    _render.cache_clear()
    outcome = {j.id: _render(j.id) is not None for j in _jobs()}
    not_printable = sorted(i for i, ok in outcome.items() if not ok)
    print(f"not printable: {not_printable}")
    assert all(outcome[j.id] for j in _jobs() if j.mutant is None), not_printable  # baselines print
    assert sum(outcome[m.id] for m in MUTANTS) >= 15, not_printable
    for j in _jobs():
        src = _render(j.id)
        if src is not None:
            assert j.name in src


@pytest.mark.parametrize("base", sorted({m.base_name for m in MUTANTS}))
def test_problems_follow_the_base_configuration(base):
    cfg = next(m.config for m in MUTANTS if m.base_name == base)
    probs = ga.problems_for(cfg)
    assert len(probs) >= 3 and len({label for label, _ in probs}) == len(probs)
    for _, p in probs:
        assert (p.head_dim, p.causal, p.varlen, p.dtype) == (cfg.head_dim, cfg.causal, cfg.varlen, cfg.dtype)
        assert p.heads > p.kv_heads  # grouped-query attention
    assert any(p.seqused_k is not None for _, p in probs)
    if cfg.varlen:
        lens = {x for _, p in probs for x in (*p.seqlens_q, *p.seqlens_k)}
        assert {0, 1, 129, 1000} <= lens
    else:
        pairs = {(p.seqlen_q, p.seqlen_k) for _, p in probs}
        assert {(1000, 1000), (333, 1000), (1000, 77)} <= pairs
        big = max(probs, key=lambda lp: lp[1].batch * lp[1].heads * -(-lp[1].seqlen_q // cfg.tile_m))[1]
        assert big.batch * big.heads * -(-big.seqlen_q // cfg.tile_m) > 132  # more tiles than the H200's SMs


def test_suite_bookkeeping_without_gpu(tmp_path, monkeypatch):
    """not_printable, compile_fail (+ static_assert), run outcomes, the baseline gate and the table,
    with the template refusal, nvcc and the child replaced."""
    ids = ["row_max_lane4", "no_rescale", "mask_not_causal", "q_producer_phase0"]
    chosen = [CATALOGUE[i] for i in ids]
    real_render = ga.render_job

    def render(job):
        if job.id == "row_max_lane4":
            raise ConfigError("render.program", "the attention template cannot print program 'x': test")
        return real_render(job)

    names = {j.name: j.id for j in ga.plan_jobs(chosen)}

    def compile_many(jobs, max_workers=None, *, use_cache=True, return_exceptions=False):
        out = []
        for j in jobs:
            if names[j.name] == "mask_not_causal":
                log = 'k.cu(9): error: static assertion failed with "mask.exact: causal mask"\n'
                out.append(CompileError("nvcc.compile", "nvcc failed building k:\nk.cu(9): error", log=log))
            else:
                out.append(SimpleNamespace(path=tmp_path / f"{j.name}.so", seconds=1.0, cached=False,
                                           registers=168, spill_bytes=0))
        return out

    outcomes = {"no_rescale": "wrong", "q_producer_phase0": "hung"}

    def run_job(so_path, name, cfg, problems=None, *, seed=0, kernel_timeout_s=20.0):
        jid = names[name]
        labels = [lbl for lbl, _ in ga.problems_for(cfg)]
        o = outcomes.get(jid, "benign")
        return [{"problem": labels[0], "outcome": "benign", "check": {
                    "passed": True, "rel_error": 1e-3, "element_errors": 0, "nan_count": 0,
                    "out_of_bounds_writes": 0, "lse_errors": 0, "empty_rows": 0, "empty_row_errors": 0}},
                {"problem": labels[1], "outcome": o, "detail": "no result 20 s after the start"}]

    monkeypatch.setattr(ga, "render_job", render)
    monkeypatch.setattr("argus_cutlass.build.nvcc.compile_many", compile_many)
    monkeypatch.setattr(ga, "run_job", run_job)
    results = ga.run_suite(chosen, work=tmp_path / "work", log=lambda s: None)
    by = {r.id: r for r in results}
    assert [r.id for r in results][-1].endswith("_after") and by[results[-1].id].cls == "baseline"
    assert by["row_max_lane4"].outcome == "not_printable"
    assert by["row_max_lane4"].build["rule"] == "render.program"
    assert by["mask_not_causal"].outcome == "compile_fail"
    assert by["mask_not_causal"].build["static_asserts"] == ["mask.exact: causal mask"]
    work = tmp_path / "work"
    assert (work / "mask_not_causal.log").is_file() and (work / "no_rescale.cu").is_file()
    assert by["no_rescale"].outcome == "wrong" and by["q_producer_phase0"].outcome == "hung"
    assert ga.bad_baselines(results) == []
    j, md = ga.write_results(results, tmp_path / "out")
    rows = json.loads(j.read_text())
    assert {r["id"] for r in rows} >= set(ids) and all("problems" in r for r in rows)
    table = md.read_text()
    assert table.count("\n") == len(results) + 2
    assert "static_assert: mask.exact: causal mask" in table and "| not_printable |" in table
    outcomes["baseline_d128"] = "crashed"
    assert "baseline_d128" in ga.bad_baselines(ga.run_suite(chosen, work=tmp_path / "w2", log=lambda s: None))


def test_spawned_child_reports_instead_of_hanging(tmp_path):
    """Here (no torch or no GPU, and no library) the child's setup fails: one ``error`` row, fast."""
    cfg = MUTANTS[0].config
    rows = ga.run_job(str(tmp_path / "missing.so"), "no_such_kernel", cfg, ga.problems_for(cfg)[:1],
                      kernel_timeout_s=5, setup_timeout_s=120)
    assert len(rows) == 1 and rows[0]["problem"] == "setup" and rows[0]["outcome"] == "error", rows
    assert ga.overall(rows) == "error"


@pytest.mark.nvcc
def test_a_printable_mutant_and_its_baseline_compile(tmp_path, monkeypatch):
    """The d=64 baseline and one of its mutants build; a mutant the printed ``static_assert``
    stops (``mask_not_causal``, seconds: the front end) is compile_fail with its message."""
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))
    m = CATALOGUE[NVCC_MUTANT]
    jobs = ga.plan_jobs([m])
    assert [j.id for j in jobs] == [f"baseline_{m.base_name}", m.id]
    stopped = [j for j in ga.plan_jobs([CATALOGUE[STATIC_ASSERT_MUTANT]]) if j.mutant is not None]
    builds = ga.build_jobs([*jobs, *stopped], tmp_path / "work", workers=2)
    for j in jobs:
        b = builds[j.id]
        assert b.printable and b.so_path is not None, (j.id, b.rule, b.error[:3000], b.static_asserts)
        assert b.registers is not None and b.registers <= 255
    work = tmp_path / "work"
    assert (work / f"{m.id}.cu").read_text() != (work / f"baseline_{m.base_name}.cu").read_text()
    b = builds[STATIC_ASSERT_MUTANT]
    assert b.printable and b.so_path is None and b.rule == "nvcc.compile", b
    assert any("mask.exact" in msg for msg in b.static_asserts), (b.static_asserts, b.error[:3000])
