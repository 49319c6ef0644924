"""The planted-mistake suite, CPU half (issue 9, Deliver 5).

For every mutant of ``argus_cutlass/testing/mutants.toml`` (an edit of the GEMM program):
the verifier rejects it, its owning rule is among the violations, and each violation of that
rule carries a counterexample record (data-flow rules: a concrete failing point; resource and
consistency rules: the offending numbers); the mutant's baseline program verifies clean; the
mutated program's ``.cu`` differs from the baseline's (the edit is in the emitted kernel).
The catalogue loader refuses malformed entries with a message naming the entry.
"""

from __future__ import annotations

import re
from functools import lru_cache

import pytest

from argus_cutlass.errors import ConfigError
from argus_cutlass.render.gemm import render_gemm
from argus_cutlass.testing.mutants import (
    CLASSES,
    RESOURCE_RULES,
    baseline_program,
    load_catalogue,
    mutant_program,
    parse_catalogue,
    verify_mutant,
)

CATALOGUE = load_catalogue()
MUTANTS = list(CATALOGUE.values())
#: one mutant per distinct base program: configuration and staged operands (its baseline is what the
#: test verifies)
BASES = list({(m.config, m.staged): m for m in MUTANTS}.values())

#: the classes the issue asks the suite to cover
REQUIRED_CLASSES = {
    "operand_identity", "consistency", "descriptor_advance", "k_tiles", "residue_fill", "arrival_count",
    "tx_bytes", "multicast", "tma_kind", "c_source", "tma_store", "gmma_flags", "descriptor_layout",
    "phase_wrap", "phase_start", "pipeline_carry", "release_order", "epilogue_map", "residue_mask",
    "epilogue_r2s", "store_pipeline", "warpgroup_uniformity", "scheduler", "named_barrier", "turn_order",
    "registers",
}


@lru_cache(maxsize=None)
def _report(mutant_id: str):
    return verify_mutant(CATALOGUE[mutant_id])


def _masked(program, text: str) -> str:
    """The .cu text with the program fingerprint masked (it hashes every field)."""
    fp = program.fingerprint()
    return text.replace(fp[:16], "<FP>").replace(f"_{fp[:8]}", "_<HASH>")


_VALUE = r"-?\d+|'[^']*'"


def _carries_numbers(violation, values: list[str]) -> bool:
    """A resource / consistency violation states the offending values: one of the mutant's
    edited values and at least one other (what the rule required), in its message or record."""
    text = violation.message
    if violation.counterexample is not None:
        text += f" {violation.counterexample.expected} {violation.counterexample.actual}"
    tokens = [t.strip("'") for t in re.findall(_VALUE, text)]
    return any(v in tokens for v in values) and len(tokens) >= 2


def test_catalogue_size_and_classes():
    assert len(MUTANTS) >= 40
    assert REQUIRED_CLASSES <= {m.cls for m in MUTANTS}, REQUIRED_CLASSES - {m.cls for m in MUTANTS}
    assert set(CLASSES) >= {m.cls for m in MUTANTS}
    assert all(m.story and m.rule for m in MUTANTS)


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.id for m in MUTANTS])
def test_mutant_is_in_the_emitted_kernel(mutant):
    """The edit changes the printed .cu (fingerprint masked): the silicon run builds the mistake."""
    base, mutated = baseline_program(mutant), mutant_program(mutant)
    assert _masked(mutated, render_gemm(mutated)) != _masked(base, render_gemm(base))


@pytest.mark.parametrize("mutant", BASES, ids=[f"{m.base_name}" for m in BASES])
def test_baseline_verifies_clean(mutant):
    from argus_cutlass.verify import verify_gemm

    report = verify_gemm(baseline_program(mutant))
    assert report.ok, report.format()


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.id for m in MUTANTS])
def test_mutant_rejected_by_its_rule_with_a_record(mutant):
    report = _report(mutant.id)
    assert not report.ok, f"{mutant.id} verified: {mutant.story}"
    violated = report.rules_violated()
    assert mutant.rule in violated, f"{mutant.id}: expected rule {mutant.rule}, got {violated}\n{report.format()}"
    mine = [v for v in report.violations if v.rule == mutant.rule]
    if mutant.rule in RESOURCE_RULES:
        base = baseline_program(mutant)
        values = [str(v) for e in mutant.edits for v in e.resolved(base).values()]
        assert any(_carries_numbers(v, values) for v in mine), (mutant.id, values, [v.message for v in mine])
    else:
        for v in mine:
            cex = v.counterexample
            assert cex is not None, f"{mutant.id}: {v.rule} violation has no counterexample record: {v}"
            assert cex.rule == mutant.rule and cex.expected != cex.actual, cex


def test_relative_edit_values_resolve_on_the_base():
    m = CATALOGUE["smem_sb_overlaps_sa"]
    assert mutant_program(m).tensor("sB").base_bytes == baseline_program(m).tensor("sA").base_bytes + 32768
    t = CATALOGUE["tx_bytes_short_16"]
    assert mutant_program(t).pipeline.tx_bytes == baseline_program(t).pipeline.tx_bytes - 16


_GOOD = """
[base.b]
tile_m = 64
tile_n = 128
cluster_m = 1
schedule = "pingpong"
epi_m = 64
[[mutant]]
id = "x"
class = "phase_start"
base = "b"
rule = "pipeline.parity"
story = "s"
edit = [{ node = "pipeline", key = "mainloop", set = { "consumer.start_phase" = 1 } }]
"""


@pytest.mark.parametrize("old, new, message", [
    ('story = "s"', 'story = "s"\nexpect = "wrong"', r"unknown field\(s\) \['expect'\]"),
    ("tile_m = 64", "tile_mm = 64", r"unknown GemmConfig field\(s\) \['tile_mm'\]"),
    ('class = "phase_start"', 'class = "phase"', "class 'phase' is not one of"),
    ('rule = "pipeline.parity"', 'rule = "pipeline.phase"', "rule 'pipeline.phase' is not a verifier rule"),
    ('base = "b"', 'base = "c"', "base 'c' is not a \\[base.\\*\\] table"),
    ('node = "pipeline"', 'node = "pipe"', "edit node 'pipe' is not one of"),
    ('"consumer.start_phase" = 1', '"consumer.start_phase" = 0', "the edits change no field"),
    ('"consumer.start_phase" = 1', '"consumer.start_phases" = 1', "has no field 'start_phases'"),
    ('key = "mainloop"', 'key = "main"', "no pipeline 'main'"),
    ('id = "x"', 'id = "X y"', "must match"),
])
def test_malformed_catalogue_is_refused_with_the_entry_named(old, new, message):
    parse_catalogue(_GOOD)  # the unedited text is valid
    assert old in _GOOD
    with pytest.raises(ConfigError, match=message) as info:
        parse_catalogue(_GOOD.replace(old, new, 1))
    assert info.value.rule == "mutants.catalogue"


def test_duplicate_id_and_dsl_refusal():
    entry = _GOOD[_GOOD.index("[[mutant]]"):]
    with pytest.raises(ConfigError, match="duplicate id 'x'"):
        parse_catalogue(_GOOD + entry)
    refused = _GOOD.replace('node = "pipeline", key = "mainloop", set = { "consumer.start_phase" = 1 }',
                            'node = "loop", key = "k", set = { rounding = "round" }')
    with pytest.raises(ConfigError, match="the DSL refuses the edit"):
        parse_catalogue(refused)


# ------------------------------------------------------------------- the silicon runner, on the CPU


def test_runner_plans_one_baseline_per_base_config():
    from argus_cutlass.testing.gpu import plan_jobs

    jobs = plan_jobs()
    baselines = [j for j in jobs if j.mutant is None]
    assert len(baselines) == len(BASES) and jobs[: len(baselines)] == baselines
    assert len({j.name for j in jobs}) == len(jobs)  # every kernel has its own name (fingerprint)
    assert all(j.program.fingerprint() != baselines[0].program.fingerprint() for j in jobs[1:])


def test_runner_kills_a_silent_child_and_reports_hung():
    """The run happens in a child process; one that sends nothing in time is killed."""
    import time

    from argus_cutlass.testing.gpu import run_job

    m = CATALOGUE["k_tiles_floor"]
    t0 = time.perf_counter()
    rows = run_job("/nonexistent.so", "argus_x", m.config, setup_timeout_s=0.0, kernel_timeout_s=0.001)
    assert [r["outcome"] for r in rows] == ["hung"] and "killed" in rows[0]["detail"]
    assert time.perf_counter() - t0 < 60


def test_classify_counts_wrong_nan_and_out_of_bounds():
    import numpy as np

    from argus_cutlass.testing.gpu import classify

    ref = np.arange(1.0, 13.0).reshape(3, 4)
    assert classify(ref * (1 + 1e-3), ref, 0, "bf16")["outcome"] == "benign"  # within bf16 rounding
    assert classify(ref * (1 + 1e-3), ref, 0, "fp32")["outcome"] == "wrong"   # not within fp32's
    d = ref.copy()
    d[0, 0], d[2, 3] = np.nan, 100.0
    c = classify(d, ref, 0, "fp32")
    assert (c["outcome"], c["bad"], c["nan"], c["max_abs_err"]) == ("wrong", 2, 1, 88.0)
    assert classify(ref, ref, 3, "fp32")["outcome"] == "wrong"  # a write past the matrix


def test_static_assert_messages_from_an_nvcc_log():
    from argus_cutlass.testing.gpu import static_assert_messages

    log = ('k.cu(215): error: static assertion failed with "G6 pipeline.buffers: a == b"\n'
           "  static_assert(5 == 4, \"G6 pipeline.buffers: a == b\");\nk.cu(9): error: identifier x is undefined\n")
    assert static_assert_messages(log) == ["G6 pipeline.buffers: a == b"]
