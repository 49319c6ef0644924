"""Silicon agreement on *wrong* programs: the layout mutants' GPU output equals the model's.

For the baseline mutant kernel and every layout mutant (TMA/GMMA swizzle mismatch on A or
B, GMMA reading B with the wrong major), one 64x64 output tile runs over
K = 64 x (stages + 1), so the 4 stages wrap once. The inputs are one-hot probes: a single 1
in A with B all ones, or a single 1 in B with A all ones, 8 each, plus one random bf16
input. The kernel is built without the verifier. Its D must equal
:func:`argus_cutlass.verify.probes.predict_tile` on the *mutated* DSL program, i.e. the
model's gmem -> TMA box -> smem -> descriptor -> MMA slot map, which the verifier uses to
reject these programs. One-hot runs must match exactly; the random run must match to fp32
accumulation tolerance.

Run: ``pytest -q -m gpu tests/gpu/test_mutant_probes_gpu.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

from argus_cutlass.runtime.mutants import build_mutants, kernel_name_of, run_with_inputs
from argus_cutlass.verify.mutants import BASELINE_CONFIG, CATALOGUE
from argus_cutlass.verify.probes import one_hot_inputs, predict_tile

pytestmark = pytest.mark.gpu

LAYOUT_CLASSES = ("swizzle_mismatch", "major_flag")
IDS = ["baseline"] + [m.id for m in CATALOGUE.values() if m.cls in LAYOUT_CLASSES and m.knobs is not None]
RESULTS: dict[str, dict] = {}
#: written to ARGUS_PROBE_OUT by tests/gpu/conftest.py
PROBE_SUFFIX = "_mutants"


@pytest.fixture(scope="module")
def built(gpu_device):
    return build_mutants(IDS)


def _dsl(mutant_id: str):
    if mutant_id == "baseline":
        from argus_cutlass.programs.gemm import build_gemm_program
        from argus_cutlass.programs.gemm_dsl import gemm_dsl_program

        return gemm_dsl_program(build_gemm_program(BASELINE_CONFIG))
    return CATALOGUE[mutant_id].build_verifier_program()[1]


@pytest.mark.parametrize("mutant_id", IDS)
def test_gpu_output_equals_the_models_prediction(mutant_id, built):
    art = built[mutant_id]
    assert not isinstance(art, Exception), f"build failed: {art}"
    dsl = _dsl(mutant_id)
    cfg = BASELINE_CONFIG
    m, n, k = cfg.tile_m, cfg.tile_n, cfg.tile_k * (cfg.stages + 1)
    rows = []
    for operand, mn, kk, a, b in one_hot_inputs(m, n, k):
        got = run_with_inputs(art.path, kernel_name_of(mutant_id), a, b)
        pred = predict_tile(dsl, a, b)
        rows.append({"probe": f"{operand}[{mn},{kk}]", "agree": bool(np.array_equal(got, pred.d)),
                     "predictable": bool(pred.predictable.all()),
                     "differs_from_gemm": bool(not np.array_equal(pred.d, a @ b.T))})
    rng = np.random.default_rng(7)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32).astype(np.float64)
    b = rng.uniform(-1, 1, (n, k)).astype(np.float32).astype(np.float64)
    from argus_cutlass.runtime.mutants import bf16_values

    a, b = bf16_values(a), bf16_values(b)
    got = run_with_inputs(art.path, kernel_name_of(mutant_id), a, b)
    pred = predict_tile(dsl, a, b)
    random_err = float(np.max(np.abs(got - pred.d)))
    gemm_err = float(np.max(np.abs(got - a @ b.T)))
    RESULTS[mutant_id] = {"probes": len(rows), "agree": sum(r["agree"] for r in rows),
                          "probes_differing_from_gemm": sum(r["differs_from_gemm"] for r in rows),
                          "random_max_err_vs_model": random_err, "random_max_err_vs_gemm": gemm_err,
                          "detail": rows}
    bad = [r for r in rows if not r["agree"]]
    assert not bad, f"{len(bad)} of {len(rows)} probes disagree with the model: {bad[:3]}"
    assert random_err < 1e-3, f"random input: GPU vs model max error {random_err}"
    if mutant_id != "baseline":
        assert gemm_err > 1.0  # and the mutant really computes something else than the GEMM

