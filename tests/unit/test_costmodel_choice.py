"""The cost model's untuned GEMM choice (issue 13 item 1): agent.costmodel.costmodel_choice and
ARGUS_GEMM_UNTUNED (CPU only)."""

from __future__ import annotations

import pytest

from argus_cutlass.agent.costmodel import SWAP_AB_MAX_M, calibrated, costmodel_choice, predict_ms
from argus_cutlass.agent.store import ExperienceStore, lookup_config
from argus_cutlass.errors import ProblemError
from argus_cutlass.kernels.gemm.heuristics import default_config
from argus_cutlass.kernels.gemm.space import declared_subspace, feasible


@pytest.mark.parametrize("m,n,k,layout", [(1, 4096, 4096, "tn"), (16, 14336, 4096, "tn"), (300, 4096, 14336, "nt"),
                                          (3000, 10240, 8192, "tn"), (8192, 1024, 4096, "nn")])
def test_choice_is_the_best_predicted_feasible_point_of_the_declared_subspace(m, n, k, layout):
    cfg = costmodel_choice(m, n, k, "bf16", "bf16", layout)
    space = declared_subspace("bf16", "bf16", layout)
    assert cfg in space and feasible(cfg)[0]
    assert m <= SWAP_AB_MAX_M or not cfg.swap_ab
    params = calibrated()
    eligible = [c for c in space if (m <= SWAP_AB_MAX_M or not c.swap_ab) and feasible(c)[0]]
    assert predict_ms(cfg, m, n, k, params) == min(predict_ms(c, m, n, k, params) for c in eligible)


def test_untuned_gemm_takes_the_heuristic_unless_asked(monkeypatch):
    none = ExperienceStore("/nonexistent/x.json")
    monkeypatch.delenv("ARGUS_GEMM_UNTUNED", raising=False)
    lk = lookup_config("gemm", 300, 5000, 3000, gpu="NVIDIA H200", store=none)
    assert lk.source == "heuristic" and lk.config == default_config(300, 5000, 3000)
    monkeypatch.setenv("ARGUS_GEMM_UNTUNED", "costmodel")
    lk = lookup_config("gemm", 300, 5000, 3000, gpu="NVIDIA H200", store=none)
    assert lk.source == "costmodel" and lk.config == costmodel_choice(300, 5000, 3000)
    assert "cost model's first choice" in lk.detail and "no entry for key" in lk.detail
    # a tuned entry still wins over either untuned rule
    assert lookup_config("gemm", 4096, 4096, 4096, gpu="NVIDIA H200", store=none).source == "shipped"


def test_bad_untuned_rule_is_refused_by_name(monkeypatch):
    from argus_cutlass.settings import settings

    monkeypatch.setenv("ARGUS_GEMM_UNTUNED", "fastest")
    with pytest.raises(ProblemError) as exc:
        settings()
    assert exc.value.rule == "settings.gemm_untuned" and "ARGUS_GEMM_UNTUNED='fastest'" in str(exc.value)


def test_table_explains_a_costmodel_choice(monkeypatch, capsys, tmp_path):
    """argus-cutlass table on an untuned shape under ARGUS_GEMM_UNTUNED=costmodel (review, session 19: it
    raised KeyError 'costmodel')."""
    from argus_cutlass.cli import main

    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("ARGUS_GEMM_UNTUNED", "costmodel")
    assert main(["table", "--m", "7", "--n", "4104", "--k", "1032", "--gpu", "NVIDIA H200"]) == 0
    assert "cost model's first choice" in capsys.readouterr().out
