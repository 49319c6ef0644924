"""The mutation suite's GPU half: the hand-written mutant kernel is correct unmutated, and the
planted mistakes, built WITHOUT the verifier, are shown wrong or hung on a Hopper GPU.

Every run is a child process with a timeout (a hung kernel becomes verdict ``hang``).
Set ``ARGUS_MUTANT_OUT=/path/summary.json`` to keep the per-mutant results.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from argus_cutlass.runtime.mutants import (
    MUTANT_SHAPE,
    build_mutants,
    gpu_mutants,
    run_mutant,
    summary_json,
)
from argus_cutlass.settings import settings

pytestmark = pytest.mark.gpu

#: (M, N, K, grid): residues on M, N and K with 30 tiles over 8 CTAs; an exact multiple with
#: 32 tiles over 4 CTAs and 16 k-tiles; a single k-tile per output tile (6 tiles, 2 CTAs)
BASELINE_SHAPES = [MUTANT_SHAPE, (256, 512, 1024, 4), (130, 192, 64, 2)]
#: child-process limit per run, seconds (cuda-python start-up plus well under 1 s of GPU work)
TIMEOUT_S = settings().mutant_timeout_s
#: mutants that must be shown wrong or hung
MIN_SHOWN = 8


@pytest.fixture(scope="module")
def built(gpu_device):
    """Every GPU mutant and the baseline, compiled in one parallel compile_many call."""
    ids = ["baseline"] + [m.id for m in gpu_mutants()]
    return build_mutants(ids, max_workers=os.cpu_count())


@pytest.mark.parametrize("shape", BASELINE_SHAPES, ids=["residues", "multiple", "one_k_tile"])
def test_baseline_is_correct(built, shape):
    art = built["baseline"]
    assert not isinstance(art, Exception), f"baseline failed to build: {art}"
    run = run_mutant("baseline", art.path, shape, timeout_s=TIMEOUT_S)
    assert run.verdict == "correct", f"{shape}: {run.summary()}\n{run.detail}"
    assert run.unwritten == 0 and run.oob_writes == 0


def test_mutants_are_shown_wrong_or_hung(built):
    base = built["baseline"]
    assert not isinstance(base, Exception), f"baseline failed to build: {base}"
    baseline_run = run_mutant("baseline", base.path, MUTANT_SHAPE, timeout_s=TIMEOUT_S)
    assert baseline_run.verdict == "correct", baseline_run.summary()
    from argus_cutlass.runtime.mutants import MutantRun

    runs = [baseline_run]
    for m in gpu_mutants():
        art = built[m.id]
        if isinstance(art, Exception):
            runs.append(MutantRun(m.id, "error", MUTANT_SHAPE, detail=f"build failed: {art}"))
            continue
        runs.append(run_mutant(m.id, art.path, MUTANT_SHAPE, timeout_s=TIMEOUT_S))
    out = settings().mutant_out
    if out:
        Path(out).write_text(summary_json(runs))
    report = "\n".join(f"{r.id:28s} {r.summary()}" for r in runs)
    print(report)
    builds_failed = [r.id for r in runs if r.detail.startswith("build failed")]
    assert not builds_failed, report
    shown = [r for r in runs[1:] if r.verdict in ("wrong", "hang")]
    assert len(shown) >= MIN_SHOWN, report
