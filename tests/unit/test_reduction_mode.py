"""The schedule node's reduction (CUTLASS ReductionMode) of stream-K / split-K GEMMs: stated in GemmConfig, refused
where nothing is reduced, proved by rule scheduler.bijection's fixup simulation in its own mode, printed into the
host launch, part of the kernel's name and of the cost model's structure key; the default changes nothing."""

from __future__ import annotations

import pytest

from argus_cutlass.agent.costmodel import structure_key
from argus_cutlass.errors import ConfigError
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
    assert any("the nondeterministic fixup simulated" in s for s in proofs), proofs
    assert feasible(nd)[0]


def test_the_verifier_simulates_the_fixup_in_the_nodes_mode(monkeypatch):
    """The proof text is written from the mode the division check ran in, and that mode is the node's."""
    import argus_cutlass.verify.decomposition as decomposition
    import argus_cutlass.verify.output as output

    seen = []
    real = decomposition.enumerate_division

    def spy(mode, **kw):
        seen.append(kw.get("reduction"))
        return real(mode, **kw)

    monkeypatch.setattr(decomposition, "enumerate_division", spy)
    output._division_cases.cache_clear()
    try:
        verify_gemm(build_program(SPLIT.replace(reduction="nondeterministic")))
        verify_gemm(build_program(SPLIT))
    finally:
        output._division_cases.cache_clear()
    assert seen == ["nondeterministic", "deterministic"]




def test_nothing_to_reduce_is_refused_naming_the_rule():
    with pytest.raises(ConfigError) as exc:
        build_program(GemmConfig(reduction="nondeterministic"))
    assert exc.value.rule == "config.reduction"
    assert "GemmConfig reduction='nondeterministic' (with scheduler='persistent')" in str(exc.value)
    ok, why = feasible(GemmConfig(reduction="nondeterministic"))
    assert not ok and any("only stream-K and split-K reduce partial tiles" in w for w in why)


def test_the_default_kernel_is_unchanged_and_the_mode_is_not_searched_yet():
    assert build_program(SPLIT).kernel_name().endswith("_splitk4_swapab_2bea79cd")   # the name of sessions <= 25
    assert structure_key(SPLIT.replace(reduction="nondeterministic"), stages=False) == structure_key(SPLIT, stages=False) + "_nd"
    assert "reduction" not in knob_values(SPLIT.replace(reduction="nondeterministic"))


@pytest.mark.parametrize("mode", ["split_k", "stream_k"])
@pytest.mark.parametrize("mistake", ["nd_middle_no_wait", "nd_final_waits_first"])
def test_planted_nondeterministic_fixup_mistakes_are_caught(mode, mistake):
    """The nondeterministic waits leave the order of a tile's partials free, so the fixup is simulated with the CTAs
    visited forward and in reverse: a middle partial that adds before the first one stored, or a storing piece that
    waits only for the first partial, ends in a tile written without some k-tile (on stream-K only the reverse
    schedule shows it). The correct model passes every case."""
    from argus_cutlass.verify.decomposition import enumerate_division

    assert enumerate_division(mode, reduction="nondeterministic")[1] is None
    cases, problem = enumerate_division(mode, reduction="nondeterministic", fixup_mistake=mistake)
    assert problem is not None and problem.kind == "incomplete_store" and problem.params["fixup_mistake"] == mistake
    with pytest.raises(ValueError):
        enumerate_division(mode, reduction="nondeterministic", fixup_mistake="nd_typo")
