"""The mutation suite's CPU half: every mutant the verifier models is rejected with its declared
invariant and a counterexample; the baseline is accepted; every GPU mutant renders with its knobs;
the baseline mutant kernel compiles with nvcc."""

from __future__ import annotations

import pytest

from argus_cutlass.errors import VerificationError
from argus_cutlass.programs.gemm import build_gemm_program
from argus_cutlass.runtime.mutants import gpu_mutants, kernel_name_of, render_mutant
from argus_cutlass.verify import check_gemm
from argus_cutlass.verify.mutants import (
    BASELINE_CONFIG,
    BASELINE_KNOBS,
    CATALOGUE,
    knobs_of,
    verify_mutant,
)

MODELLED = [m for m in CATALOGUE.values() if m.verifier is not None]
UNMODELLED = [m for m in CATALOGUE.values() if m.verifier is None]
GPU = gpu_mutants()


def _b(v: bool) -> str:
    return "true" if v else "false"


def knob_lines(knobs: dict) -> list[str]:
    """The C++ line each knob must render to (independent of the template's formatting)."""
    k = knobs
    return [
        f"constexpr int kTileK = {k['tile_k']};",
        f"constexpr int kBoxK = {k['box_k']};",
        f"constexpr int kStages = {k['stages']};",
        f"constexpr int kConsumerWrap = {k['consumer_wrap']};",
        f"constexpr int kConsumerStartPhase = {k['consumer_start_phase']};",
        f"constexpr int kProducerStartPhase = {k['producer_start_phase']};",
        f"constexpr int kTxBytesDelta = {k['tx_bytes_delta']};",
        f"constexpr int kEmptyArrivals = {k['empty_arrivals']};",
        f"constexpr bool kCarryAcrossTiles = {_b(k['carry_across_tiles'])};",
        f"constexpr bool kProducerCarryAcrossTiles = {_b(k['producer_carry_across_tiles'])};",
        f"constexpr int kKTilesDelta = {k['k_tiles_delta']};",
        f"constexpr int kEpiRowOffset = {k['epi_row_offset']};",
        f"constexpr bool kResidueMask = {_b(k['residue_mask'])};",
        f"constexpr bool kReleaseBeforeRetire = {_b(k['release_before_retire'])};",
        f"constexpr int kWarp3StageSkew = {k['warp3_stage_skew']};",
        f"using TmaAtomA = GMMA::Layout_K_{k['tma_swizzle_a']}_Atom<Element>;",
        f"using MmaAtomA = GMMA::Layout_K_{k['mma_swizzle_a']}_Atom<Element>;",
        f"using TmaAtomB = GMMA::Layout_K_{k['tma_swizzle_b']}_Atom<Element>;",
        f"using MmaAtomB = GMMA::Layout_{k['mma_major_b']}_{k['mma_swizzle_b']}_Atom<Element>;",
        f"SM90_64x{k['tile_n']}x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::{k['mma_major_b']}>",
        f"int const tile_stride = {k['tile_stride']};",
    ]


def test_catalogue_size_and_classes():
    assert len(CATALOGUE) >= 24
    classes = {m.cls for m in CATALOGUE.values()}
    assert len(classes) >= 10, classes
    assert {"swizzle_mismatch", "major_flag", "stage_modulo", "phase_start", "arrival_count", "tx_bytes",
            "epilogue_map", "residue_mask", "tma_box", "scheduler", "k_loop", "pipeline_reset"} <= classes
    assert len(GPU) >= 20 and all(m.expect_gpu in {"wrong", "hang", "wrong or hang", "maybe benign"}
                                  for m in CATALOGUE.values())


def test_baseline_accepted():
    report = check_gemm(build_gemm_program(BASELINE_CONFIG))
    assert report.ok and report.complete


@pytest.mark.parametrize("mutant", MODELLED, ids=[m.id for m in MODELLED])
def test_modelled_mutant_rejected_with_counterexample(mutant):
    assert mutant.rule and mutant.invariant
    report = verify_mutant(mutant)
    assert not report.ok
    violated = report.rules_violated()
    assert mutant.rule in violated, report.format()
    assert set(mutant.extra_rules) <= set(violated), report.format()
    mine = [v for v in report.violations if v.rule == mutant.rule]
    assert all(v.invariant == mutant.invariant for v in mine)
    # a concrete failing point for the declared invariant (for pipeline.arrivals, an
    # arithmetic rule, it comes from the protocol enumeration of the same invariant)
    cexs = [v.counterexample for v in report.violations
            if v.invariant == mutant.invariant and v.counterexample is not None]
    assert cexs and all(c.invariant == mutant.invariant for c in cexs)
    program, dsl = mutant.build_verifier_program()
    with pytest.raises(VerificationError) as info:
        check_gemm(program, dsl)
    assert mutant.rule in info.value.report.rules_violated()


def test_every_mutant_has_a_verifier_side():
    """Each planted mistake is modelled: epilogue map, residue mask and scheduler step too
    (G2, G8, G4 over the DSL's epilogue store and tile schedule)."""
    assert not UNMODELLED, [m.id for m in UNMODELLED]
    assert {"epilogue.coordinate", "residue.store", "scheduler.bijection"} <= {m.rule for m in CATALOGUE.values()}


def test_baseline_renders_its_knobs():
    src = render_mutant("baseline")
    assert f'extern "C" int {kernel_name_of("baseline")}(' in src
    for line in knob_lines(BASELINE_KNOBS):
        assert line in src, line
    assert "{{" not in src and "{%" not in src


@pytest.mark.parametrize("mutant", GPU, ids=[m.id for m in GPU])
def test_mutant_renders_its_knobs(mutant):
    src = render_mutant(mutant)
    base = render_mutant("baseline")
    knobs = knobs_of(mutant.knobs)
    for line in knob_lines(knobs):
        assert line in src, line
    changed = [line for line in knob_lines(knobs) if line not in base]
    assert changed, f"{mutant.id} renders the same knobs as the baseline"
    assert f"mutant {mutant.id}" in src and kernel_name_of(mutant.id) in src


def test_knob_errors():
    with pytest.raises(KeyError, match="no mutant-kernel knob"):
        knobs_of({"stage": 3})
    with pytest.raises(ValueError, match="SW128"):
        knobs_of({"mma_swizzle_a": "SW256"})
    with pytest.raises(ValueError, match="no GPU realisation"):
        render_mutant("k_blocks_missing")
    with pytest.raises(KeyError):
        render_mutant("no_such_mutant")


@pytest.mark.nvcc
def test_baseline_mutant_kernel_compiles():
    from argus_cutlass.runtime.mutants import build_mutants

    art = build_mutants(["baseline"])["baseline"]
    assert not isinstance(art, Exception), art
    assert art.path.is_file() and art.spill_bytes == 0
    assert art.registers is not None and art.registers <= 255


def test_hung_child_is_reported_as_hang_and_killed():
    """The run happens in a child process; past the timeout it is killed and reported."""
    from argus_cutlass.runtime.mutants import run_mutant

    run = run_mutant("baseline", "/nonexistent.so", timeout_s=0.05)
    assert run.verdict == "hang" and "child killed" in run.detail and run.misbehaves


def test_compare_counts_wrong_unwritten_and_out_of_bounds():
    import numpy as np

    from argus_cutlass.runtime.mutants import compare

    ref = np.arange(12, dtype=np.float64).reshape(3, 4)
    guard = np.full(8, np.nan, np.float32)
    assert compare(ref.astype(np.float32), ref, guard)["verdict"] == "correct"
    d = ref.astype(np.float32)
    d[0, 0], d[2, 3] = np.nan, 100.0
    guard[1] = 0.0
    c = compare(d, ref, guard)
    assert (c["verdict"], c["bad"], c["unwritten"], c["oob_writes"], c["max_err"]) == ("wrong", 2, 1, 1, 89.0)
