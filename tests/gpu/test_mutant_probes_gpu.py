"""Silicon agreement on *wrong* programs: the descriptor-layout mutants compute what the model says.

For each base program of the ``descriptor_layout`` mutants whose wgmma major flags still agree
with the views they read (TMA writes one swizzle, the descriptors read another) and for each
such mutant, the production template prints
the program, nvcc builds it WITHOUT the verifier, and one output tile (M = tile_m,
N = tile_n, K = tile_k x (stages + 1), so the stages wrap once) runs on one-hot probes (a
single 1 in A with B all ones, and the converse) and on one random input. The kernel's D must
equal :func:`argus_cutlass.testing.probes.predict_tile` on the *mutated* program: the model's
gmem -> TMA box -> smem -> descriptor -> MMA slot map, which the verifier uses to reject these
programs. One-hot runs must match exactly (sums of ones are exact in bf16); the random run to
bf16 rounding of D.

A view whose major disagrees with the instruction's major flag (``view_b_major_mn``) is left
out: the model reads a view as the hardware would only when the flag agrees, and the verifier
rejects the disagreement itself (``mma.major``) without a data prediction. On the H200 that
mutant's D matched the model on 7 of 16 probes (bench/data/mutants_probes_h200.json).

Run: ``pytest -q -m gpu tests/gpu/test_mutant_probes_gpu.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

from argus_cutlass.testing.gpu import build_jobs, plan_jobs, run_job
from argus_cutlass.testing.mutants import load_catalogue

pytestmark = pytest.mark.gpu

LAYOUT_CLASS = "descriptor_layout"
MUTANTS = [m for m in load_catalogue().values() if m.cls == LAYOUT_CLASS and m.rule != "mma.major"]
JOBS = plan_jobs(MUTANTS)
RESULTS: dict[str, dict] = {}
#: written to ARGUS_PROBE_OUT by tests/gpu/conftest.py
PROBE_SUFFIX = "_mutants"


@pytest.fixture(scope="module")
def built(gpu_device, tmp_path_factory):
    return build_jobs(JOBS, tmp_path_factory.mktemp("probes"))


def _run(build, job, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The kernel's D for A (M x K) and B (N x K), C = 0."""
    m, k = a.shape
    rows = run_job(build.so_path, job.name, job.config, [("probe", (m, b.shape[0], k))], inputs=(a, b.T))
    assert rows and "d" in rows[0], rows
    return rows[0]["d"]


@pytest.mark.parametrize("job", JOBS, ids=[j.id for j in JOBS])
def test_gpu_tile_equals_the_models_prediction(job, built):
    from argus_cutlass.testing.probes import one_hot_inputs, predict_tile

    build = built[job.id]
    assert build.so_path, f"build failed: {build.error[:2000]}"
    cfg = job.config
    assert not cfg.swap_ab
    m, n, k = cfg.tile_m, cfg.tile_n, cfg.tile_k * (cfg.stages + 1)
    rows = []
    for operand, mn, kk, a, b in one_hot_inputs(m, n, k):
        got = _run(build, job, a, b)
        pred = predict_tile(job.program, a, b)
        rows.append({"probe": f"{operand}[{mn},{kk}]", "agree": bool(np.array_equal(got, pred.d)),
                     "predictable": bool(pred.predictable.all()),
                     "differs_from_gemm": bool(not np.array_equal(pred.d, a @ b.T))})
    rng = np.random.default_rng(7)
    from argus_cutlass.runtime.check import bits_to_float32, float32_to_bits

    def bf16(x: np.ndarray) -> np.ndarray:
        return bits_to_float32(float32_to_bits(x.astype(np.float32), "bf16"), "bf16").astype(np.float64)

    a, b = bf16(rng.uniform(-1, 1, (m, k))), bf16(rng.uniform(-1, 1, (n, k)))
    got = _run(build, job, a, b)
    pred = predict_tile(job.program, a, b)
    err_model = float(np.max(np.abs(got - pred.d) / (np.abs(pred.d) + 1.0)))
    err_gemm = float(np.max(np.abs(got - a @ b.T)))
    RESULTS[job.id] = {"probes": len(rows), "agree": sum(r["agree"] for r in rows),
                       "probes_differing_from_gemm": sum(r["differs_from_gemm"] for r in rows),
                       "random_rel_err_vs_model": err_model, "random_max_err_vs_gemm": err_gemm, "detail": rows}
    bad = [r for r in rows if not r["agree"]]
    assert not bad, f"{len(bad)} of {len(rows)} probes disagree with the model: {bad[:3]}"
    assert err_model < 1e-2, f"random input: GPU vs model relative error {err_model}"
    if job.mutant is not None:
        assert err_gemm > 1.0  # and the mutant really computes something other than the GEMM
