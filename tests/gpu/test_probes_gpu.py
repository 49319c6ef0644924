"""Silicon agreement, one-hot probes: the generated kernels against the model's prediction.

For each operand major (K, MN) in every GMMA swizzle mode (SW128, SW64, SW32)
(:func:`argus_cutlass.testing.probes.swizzle_probe_configs`, fp16 in, fp32 out, ping-pong,
one CTA), the orchestrator builds the production kernel (:func:`argus_cutlass.generate.build_many`:
program, verifier, template, nvcc; the six builds in one parallel batch). One CTA tile runs over
M = tile_m, N = tile_n, K = tile_k x (stages + 1), so the pipeline wraps its stages once. Each
probe (:func:`~argus_cutlass.testing.probes.one_hot_inputs`: 8 positions per operand) puts a
single 1 in A, with B all ones, or a single 1 in B, with A all ones. The probe goes through
TMA, shared memory, the GMMA descriptor and the epilogue. D is poisoned with NaN first. The
GPU's D must equal :func:`~argus_cutlass.testing.probes.predict_tile` on the kernel's program
exactly: the model's gmem -> smem -> MMA slot map applied to the same inputs (0/1 inputs and
sums of at most K ones are exact in fp16 x fp16 -> fp32).

Run: ``pytest -q -m gpu tests/gpu/test_probes_gpu.py`` (``ARGUS_PROBE_OUT=x.json`` writes the
per-probe detail to ``x.json``).
"""

from __future__ import annotations

import numpy as np
import pytest

from argus_cutlass.testing.probes import one_hot_inputs, predict_tile, swizzle_probe_configs

pytestmark = pytest.mark.gpu

CONFIGS = swizzle_probe_configs("fp16", "fp32")
RESULTS: dict[str, dict] = {}
#: written to ARGUS_PROBE_OUT by tests/gpu/conftest.py
PROBE_SUFFIX = ""


@pytest.fixture(scope="module")
def probe_kernels(gpu_device):
    """``{kernel name: GemmKernelLibrary}`` of every probe configuration (verified, built in one batch)."""
    from argus_cutlass.generate import build_many

    return build_many(CONFIGS.values())


def _store(mat: np.ndarray, k_major: bool) -> np.ndarray:
    """Host storage of an operand given as (MN, K): K contiguous, or MN contiguous (K x MN)."""
    return np.ascontiguousarray(mat if k_major else mat.T).astype(np.float16)


def _run(lib, cfg, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The kernel's D (float64 ``(m, n)``) for A ``(m, k)`` and B ``(n, k)``, alpha 1, beta 0, C unused."""
    from argus_cutlass.kernels.gemm.config import a_is_k_major, b_is_k_major
    from argus_cutlass.kernels.gemm.problem import GemmProblem
    from argus_cutlass.runtime.cuda import DeviceBuffer, synchronize

    m, n, k = a.shape[0], b.shape[0], a.shape[1]
    p = GemmProblem(m, n, k, cfg.dtype, cfg.out_dtype, cfg.layout).validate()
    with DeviceBuffer.from_numpy(_store(a, a_is_k_major(cfg.layout))) as da, \
            DeviceBuffer.from_numpy(_store(b, b_is_k_major(cfg.layout))) as db, \
            DeviceBuffer(4 * m * n) as dd:
        dd.fill(0xFF)  # NaN
        lib.run(p, da, db, None, dd, 1.0, 0.0)
        synchronize()
        return dd.to_numpy(np.float32, (m, n)).astype(np.float64)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_one_hot_probes_agree_with_the_model(name, probe_kernels):
    from argus_cutlass.generate import build

    cfg = CONFIGS[name]
    program = build(cfg)
    assert cfg.out_dtype == "fp32" and not cfg.swap_ab  # D is fp32 and the problem's A is the kernel's A
    lib = probe_kernels[program.kernel_name()]
    m, n, k = cfg.tile_m, cfg.tile_n, cfg.tile_k * (cfg.stages + 1)
    agree, probes = 0, []
    for operand, mn, kk, a, b in one_hot_inputs(m, n, k):
        got = _run(lib, cfg, a, b)
        pred = predict_tile(program, a, b)
        assert pred.predictable.all()
        ok = bool(np.array_equal(got, pred.d))
        agree += ok
        probes.append({"operand": operand, "mn": mn, "k": kk, "agree": ok,
                       "gpu_nonzero": np.argwhere(got != 0)[:4].tolist(),
                       "model_nonzero": np.argwhere(pred.d != 0)[:4].tolist()})
    RESULTS[name] = {"kernel": program.kernel_name(), "probes": len(probes), "agree": agree, "detail": probes}
    bad = [p for p in probes if not p["agree"]]
    assert not bad, f"{len(bad)} of {len(probes)} probes disagree with the model, first: {bad[0]}"
