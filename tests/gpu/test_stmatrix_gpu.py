"""Silicon agreement of the epilogue's register -> smem transfer function (stmatrix).

Two kinds of probe run ``templates/stmatrix_probe.cu.j2`` (inline PTX, no CUTLASS; one nvcc
build for the whole module) on the GPU:

* **instruction probes**: ``stmatrix .x1/.x2/.x4``, with and without ``.trans``, 4 warps x 3
  instructions, random register words and a random permutation of 16-byte row slots per
  lane (lanes >= 8 num get addresses too, which the model says are unused). The GPU's smem
  image must equal :func:`argus_cutlass.verify.staging.predict_image` word for word.
* **program probes**: the stmatrix stores of epilogue subtile 0 (stage 0) of real programs
  (``build_program(cfg)``: row-major bf16/fp16 with swizzled staging, cooperative and
  ping-pong; swap-AB column-major staging with ``.trans``), of the catalogue's ``epilogue_r2s``
  mutants (``mutant_program(m)``) and of one ``.trans`` mutant planted here
  (``row_lane_skew = 2`` on a swap-AB program). The tables come from
  :func:`argus_cutlass.verify.staging.probe_tables`. The image must equal the model's
  prediction; for the correct programs that is the image the staging layout wants
  (``sD(m, n)`` holds the code of ``(m, n)``), for the mutants it is not, and the verifier
  rejects them with ``epilogue.stmatrix``.

A mutant whose row addresses are not 16-byte aligned (``swap_stsm_missing_trans``: row-major
stmatrix into column-major staging) is not run: a misaligned stmatrix is undefined in PTX and
may fault the context; the verifier rejects it on alignment, with no image to compare.

Run: ``pytest -q -m gpu tests/gpu/test_stmatrix_gpu.py`` (``ARGUS_PROBE_OUT=x.json`` also
writes ``x_stmatrix.json``).
"""

from __future__ import annotations

import numpy as np
import pytest

from argus_cutlass.dsl.ir import Program
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.program import build_program
from argus_cutlass.runtime.probe_kernels import STMATRIX_PROBE, build_probe
from argus_cutlass.runtime.probe_kernels import run_stmatrix_probe as run_probe
from argus_cutlass.testing.mutants import load_catalogue, mutant_program
from argus_cutlass.verify import verify_gemm
from argus_cutlass.verify.staging import check_staging, predict_image, probe_tables, staging_map

pytestmark = pytest.mark.gpu
RESULTS: dict[str, dict] = {}
#: written to ARGUS_PROBE_OUT by tests/gpu/conftest.py
PROBE_SUFFIX = "_stmatrix"

PROGRAMS = {
    "bf16_coop_128x256_epi128x32": GemmConfig(tile_m=128, tile_n=256, epi_n=32),
    "bf16_pp_64x128_epi64x64": GemmConfig(tile_m=64, tile_n=128, schedule="pingpong", epi_m=64, epi_n=64),
    "fp16_coop_128x128_epi128x16": GemmConfig(dtype="fp16", out_dtype="fp16", tile_m=128, tile_n=128,
                                              epi_n=16),
    "swap_64x32_trans": GemmConfig(swap_ab=True, tile_m=64, tile_n=32, schedule="pingpong", epi_m=64,
                                   epi_n=32, stages=8),
    "swap_64x16_trans": GemmConfig(swap_ab=True, tile_m=64, tile_n=16, schedule="pingpong", epi_m=64,
                                   epi_n=16, stages=8),
    "swap_128x64_trans": GemmConfig(swap_ab=True, tile_m=128, tile_n=64, epi_m=128, epi_n=64),
}
#: mutants planted here on a program above (staging-node edits), besides the catalogue's
PLANTED = {"swap_row_lane_skew_2": ("swap_64x32_trans", {"row_lane_skew": 2})}


def _aligned(program: Program) -> bool:
    """Whether every stmatrix row address of the program is 16-byte aligned (PTX requires it)."""
    return not staging_map(program).misaligned


def _mutants() -> list:
    params = []
    for m in load_catalogue().values():
        if m.cls != "epilogue_r2s":
            continue
        marks = () if _aligned(mutant_program(m)) else pytest.mark.skip(
            reason="misaligned stmatrix row addresses: undefined in PTX (may fault the context); "
                   "the verifier rejects them on alignment, there is no image to compare")
        params.append(pytest.param(m.id, marks=marks, id=m.id))
    return params + [pytest.param(k, id=k) for k in PLANTED]


def _mutant(name: str) -> Program:
    if name in PLANTED:
        key, changes = PLANTED[name]
        return build_program(PROGRAMS[key]).replace_node("staging", None, **changes)
    return mutant_program(load_catalogue()[name])


@pytest.fixture(scope="module")
def probe_so(gpu_device):
    return str(build_probe(STMATRIX_PROBE).path)


@pytest.mark.parametrize("trans", [False, True])
@pytest.mark.parametrize("num", [1, 2, 4])
def test_instruction_probe(num, trans, probe_so):
    rng = np.random.default_rng(100 * num + int(trans))
    warps, instrs = 4, 3
    slots = warps * instrs * num * 8  # 16-byte rows actually used
    smem_bytes = 16 * (slots + 64)
    regs = rng.integers(0, 0xFFFE, size=(32 * warps, instrs, 4), dtype=np.uint32)
    regs |= rng.integers(0, 0xFFFE, size=regs.shape, dtype=np.uint32) << 16
    perm = rng.permutation(slots + 64)[:slots].reshape(warps, instrs, num, 8)
    rows = np.zeros((32 * warps, instrs), dtype=np.uint32)
    for w in range(warps):
        for q in range(instrs):
            used = 16 * perm[w, q].reshape(-1)
            rows[32 * w: 32 * w + 32, q] = np.resize(used, 32)  # lanes >= 8 num repeat used rows
            # and an unused lane may name any aligned row: the model says it is ignored
            if num < 4:
                rows[32 * w + 8 * num: 32 * w + 32, q] = 16 * rng.integers(0, slots + 64, size=32 - 8 * num)
    want = predict_image(regs, rows, num, trans, smem_bytes)
    got = run_probe(regs, rows, num, trans, smem_bytes, so_path=probe_so)
    RESULTS[f"x{num}{'.trans' if trans else ''}"] = {"words": int(want.size),
                                                     "written": int((want != 0xFFFF).sum()),
                                                     "agree": int((got == want).sum())}
    assert (want != 0xFFFF).sum() == 32 * warps * instrs * num * 2  # every element written once
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, (f"{bad.size} words differ; first word {bad[0]}: GPU {got[bad[0]]:#06x} "
                           f"model {want[bad[0]]:#06x}")


@pytest.mark.parametrize("key", list(PROGRAMS))
def test_program_probe(key, probe_so):
    program = build_program(PROGRAMS[key])
    assert program.staging.op == "stmatrix" and program.staging.trans == PROGRAMS[key].swap_ab
    _, violations = check_staging(program)
    assert not violations, violations[0].message  # the verifier accepts the correct program's staging
    t = probe_tables(program)
    got = run_probe(t.regs, t.rows, t.num, t.trans, t.smem_bytes, so_path=probe_so)
    RESULTS[key] = {"instr": f"x{t.num}{'.trans' if t.trans else ''}", "words": int(got.size),
                    "agree_with_model": bool(np.array_equal(got, t.predicted)),
                    "equals_staging_layout": bool(np.array_equal(got, t.intended))}
    assert np.array_equal(got, t.predicted), f"{int((got != t.predicted).sum())} words differ from the model"
    assert np.array_equal(got, t.intended)  # the correct program stages every (m, n) at sD(m, n)


@pytest.mark.parametrize("mutant", _mutants())
def test_mutant_program_probe(mutant, probe_so):
    program = _mutant(mutant)
    t = probe_tables(program)
    got = run_probe(t.regs, t.rows, t.num, t.trans, t.smem_bytes, so_path=probe_so)
    misplaced = int((got != t.intended).sum())
    RESULTS[f"mutant_{mutant}"] = {"instr": f"x{t.num}{'.trans' if t.trans else ''}",
                                   "agree_with_model": bool(np.array_equal(got, t.predicted)),
                                   "words_away_from_staging_layout": misplaced}
    assert np.array_equal(got, t.predicted), f"{int((got != t.predicted).sum())} words differ from the model"
    assert misplaced > 0  # the hardware really misplaces the accumulators
    assert "epilogue.stmatrix" in {v.rule for v in verify_gemm(program, smt=False).violations}
