"""The explicit configurations of the GEMM GPU tests are valid on a machine without a GPU: every problem passes
the TMA rules (a case with M = 300 and a column-major A was refused on the H200 in session 31 before its kernel
ran: the case was wrong, not the kernel) and every configuration passes the verifier's fast tiers, so a GPU run
spends its time on kernels."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from argus_cutlass.kernels.gemm.space import feasible
from argus_cutlass.kernels.gemm.problem import GemmProblem


def _gpu_module():
    path = Path(__file__).resolve().parents[1] / "gpu" / "test_gemm.py"
    spec = importlib.util.spec_from_file_location("gpu_test_gemm_cases", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_MOD = _gpu_module()
_EXPLICIT = [(c[0], c[1], c[2], c[3]) for c in _MOD.SCHEDULER_CASES + _MOD.SWAP_CASES]


@pytest.mark.parametrize("case", _EXPLICIT, ids=lambda c: f"{c[0].layout}-{c[1]}x{c[2]}x{c[3]}-{c[0].tile_m}x{c[0].tile_n}")
def test_gpu_case_problem_and_config_are_accepted(case):
    cfg, m, n, k = case
    GemmProblem(m, n, k, dtype=cfg.dtype, out_dtype=cfg.out_dtype, layout=cfg.layout).validate()
    ok, why = feasible(cfg)
    assert ok, why
