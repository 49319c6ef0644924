"""The planted-mistake suite on silicon (a subset; the whole catalogue: ``bench/mutants_gpu.py``).

Each mutant's program is printed by the production template and built WITHOUT the verifier
(:mod:`argus_cutlass.testing.gpu`); every run is a child process with a deadline. The
baselines (the unmutated program of each base configuration, before and after the mutants)
must be correct, and every mutant must show on silicon (wrong, hung, crashed, or stopped at
compile time by a printed ``static_assert``) or be benign with a documented race or undefined
behaviour in its catalogue entry (``benign_reason``).

``ARGUS_MUTANT_OUT=/path/x.json`` keeps the results (and ``x.md``, the table);
``ARGUS_MUTANT_TIMEOUT`` is the seconds a kernel may run before it counts as hung.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from argus_cutlass.settings import settings
from argus_cutlass.testing.gpu import SHOWN, run_suite, write_results
from argus_cutlass.testing.mutants import load_catalogue

pytestmark = pytest.mark.gpu

#: one or more mutants of each kind of silicon failure: wrong data (operand identity, k tiles,
#: residue store), compile-time stop (pipeline vs buffers), hangs (tx bytes, multicast mask),
#: races (release lag), phases (ping-pong start phase), swap-AB staging
SUBSET = ["a_block_mode_n", "k_tiles_floor", "epi_residue_mask_off", "pipeline_stages_gt_buffers",
          "tx_bytes_one_box_short", "mcast_mask_without_self", "release_lag_0", "pp_consumer_phase_1",
          "swap_stsm_missing_trans"]


@pytest.fixture(scope="module")
def results(gpu_device, tmp_path_factory):
    cat = load_catalogue()
    out = run_suite([cat[i] for i in SUBSET], work=tmp_path_factory.mktemp("mutants"),
                    kernel_timeout_s=settings().mutant_timeout_s)
    if settings().mutant_out:
        path = Path(settings().mutant_out)
        write_results(out, path.parent, path.stem)
    return out


def test_baselines_are_correct(results):
    base = [r for r in results if r.cls == "baseline"]
    assert len(base) >= 2 and base[-1].id.endswith("_after")
    for r in base:
        assert r.outcome == "benign", (r.id, r.outcome, r.shapes, r.build.get("error", "")[:2000])
        assert all(row["bad"] == 0 and row["nan"] == 0 and row["out_of_bounds"] == 0 for row in r.shapes)


def test_each_mutant_shows_or_is_a_documented_race(results):
    mutants = [r for r in results if r.cls != "baseline"]
    assert {r.id for r in mutants} == set(SUBSET)
    table = "\n".join(f"{r.id:32s} {r.outcome:12s} {r.shapes or r.build.get('static_asserts')}" for r in mutants)
    for r in mutants:
        assert r.outcome in SHOWN or (r.outcome == "benign" and r.benign_reason), table
    compile_fails = [r for r in mutants if r.outcome == "compile_fail"]
    assert all(r.build["static_asserts"] for r in compile_fails), table  # stopped by a printed static_assert
    assert sum(r.outcome in ("wrong", "hung", "crashed") for r in mutants) >= 5, table
