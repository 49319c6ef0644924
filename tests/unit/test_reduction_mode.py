"""The schedule node's reduction (CUTLASS ReductionMode) of stream-K / split-K GEMMs: stated in GemmConfig, refused
where nothing is reduced, proved by rule scheduler.bijection's fixup simulation in its own mode, printed into the
host launch, part of the kernel's name and of the cost model's structure key; the default changes nothing."""

from __future__ import annotations

import pytest

from argus_cutlass.agent.costmodel import structure_key
from argus_cutlass.errors import DslError
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.program import build_program
from argus_cutlass.kernels.gemm.space import feasible, knob_values
from argus_cutlass.render.gemm import render_gemm
from argus_cutlass.verify import verify_gemm

SPLIT = GemmConfig(swap_ab=True, tile_m=128, tile_n=16, cluster_m=1, epi_m=128, epi_n=16, stages=8,
                   scheduler="splitk", splits=4)


@pytest.mark.parametrize("cfg", [SPLIT, SPLIT.replace(scheduler="streamk", splits=1)], ids=["splitk4", "streamk"])
def test_nondeterministic_is_proved_in_its_own_mode_and_printed(cfg):
    nd = cfg.replace(reduction="nondeterministic")
    det_p, nd_p = build_program(cfg), build_program(nd)
    assert nd_p.schedule.reduction == "nondeterministic" and det_p.schedule.reduction == "deterministic"
    assert "_nd_" in nd_p.kernel_name() and "_nd" not in det_p.kernel_name()
    host = [ln.strip() for ln in render_gemm(nd_p).splitlines() if ln.strip().startswith("args.reduction_mode")]
    assert host == ["args.reduction_mode = cutlass::gemm::kernel::detail::ReductionMode::Nondeterministic;"]
    assert "ReductionMode::Deterministic;" in render_gemm(det_p)
    proofs = [p.summary for p in verify_gemm(nd_p).proofs if p.rule == "scheduler.bijection"]
    assert any("after the Nondeterministic fixup" in s for s in proofs), proofs
    assert feasible(nd)[0]


def test_nothing_to_reduce_is_refused_naming_the_rule():
    with pytest.raises(DslError) as exc:
        build_program(GemmConfig(reduction="nondeterministic"))
    assert "reduction 'nondeterministic' with decomposition 'persistent'" in str(exc.value)
    ok, why = feasible(GemmConfig(reduction="nondeterministic"))
    assert not ok and any("only stream-K and split-K reduce partial tiles" in w for w in why)


def test_the_default_kernel_is_unchanged_and_the_mode_is_not_searched_yet():
    assert build_program(SPLIT).kernel_name().endswith("_splitk4_swapab_2bea79cd")   # the name of sessions <= 25
    assert structure_key(SPLIT.replace(reduction="nondeterministic"), stages=False) == structure_key(SPLIT, stages=False) + "_nd"
    assert "reduction" not in knob_values(SPLIT.replace(reduction="nondeterministic"))
