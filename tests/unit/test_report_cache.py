"""The cache of verified reports (issue 13, item 6): a program proved before, by the same verifier
source, is not verified again in a new process; anything else is."""

from __future__ import annotations

import pytest

from argus_cutlass import generate as gen
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.program import build_program


@pytest.fixture
def cache_on(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGUS_REPORT_CACHE", "1")
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_verified_report_is_reused_and_equal(cache_on):
    p = build_program(GemmConfig(stages=3))
    first = gen.verify(p, smt=False)
    assert first.verified and len(list((cache_on / "reports").glob("*.json"))) == 1
    again = gen.verify(p, smt=False)
    assert again.verified and again.proved == first.proved and again.obligations == first.obligations
    assert "from the cache" in again.notes[-1]
    # the SMT tier's Skipped records come back with it: the cached report is complete, not fully proved
    assert first.skipped and again.skipped == first.skipped and again.complete and not again.undecided
    assert gen.proof_lines(again) == gen.proof_lines(first)


def test_other_program_smt_flag_or_verifier_source_reverify(cache_on, monkeypatch):
    p = build_program(GemmConfig(stages=3))
    gen.verify(p, smt=False)
    hits = []
    real = gen._cached_report
    monkeypatch.setattr(gen, "_cached_report", lambda *a: hits.append(real(*a)) or hits[-1])
    gen.verify(build_program(GemmConfig(stages=4)), smt=False)       # another fingerprint
    gen.verify(p, smt=True)                                            # another tier set
    monkeypatch.setattr(gen, "_verifier_source_hash", lambda: "another verifier source")
    fresh = gen.verify(p, smt=False)                                   # another verifier
    assert hits == [None, None, None]
    assert "from the cache" not in " ".join(fresh.notes)
    monkeypatch.undo()
    monkeypatch.setenv("ARGUS_REPORT_CACHE", "1")
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(cache_on))
    assert "from the cache" in gen.verify(p, smt=False).notes[-1]      # the first one is still there


@pytest.mark.parametrize("poison", ["rejected", "other_program", "no_proofs", "not_json"])
def test_a_planted_file_is_never_a_proof(cache_on, poison):
    import json

    p = build_program(GemmConfig(stages=3))
    gen.verify(p, smt=False)
    (path,) = (cache_on / "reports").glob("*.json")
    d = json.loads(path.read_text())
    if poison == "rejected":
        d.update(verified=False, violations=[{"rule": "smem.capacity"}])
    elif poison == "other_program":
        d.update(fingerprint="0" * 64, kernel="someone_else")
    elif poison == "no_proofs":
        d.update(proofs=[])
    path.write_text("{" if poison == "not_json" else json.dumps(d))
    again = gen.verify(p, smt=False)
    assert again.verified and again.kernel == p.kernel_name() and len(again.proofs) > 10
    assert "from the cache" not in " ".join(again.notes)  # verified afresh (and the file rewritten)


def test_rejections_are_not_cached(cache_on):
    p = build_program(GemmConfig()).replace_node("pipeline", "mainloop", **{"consumer.start_phase": 1})
    bad = gen.verify(p, smt=False)
    assert not bad.ok
    assert not (cache_on / "reports").exists() or not list((cache_on / "reports").glob("*.json"))


def test_off_by_default_in_the_test_suite():
    import os

    assert os.environ.get("ARGUS_REPORT_CACHE") == "0"
