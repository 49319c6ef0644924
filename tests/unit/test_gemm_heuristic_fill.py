"""The large-M heuristic's wave-fill rule (issue 13 item 2): stream-K when the 128x256 tiles leave the
last wave of 132 SMs mostly idle (CPU only)."""

from __future__ import annotations

import pytest

from argus_cutlass.kernels.gemm.heuristics import (SM90_SMS, STREAMK_MIN_FILL, STREAMK_MIN_K_ITERS, default_config,
                                                   wave_fill)
from argus_cutlass.kernels.gemm.space import declared_subspace, feasible


@pytest.mark.parametrize("m,n,k", [(256, 4096, 14336), (512, 4096, 4096), (3000, 1024, 8192), (200, 8192, 1024)])
def test_under_filled_large_m_takes_stream_k_of_the_subspace(m, n, k):
    tiles = -(-m // 128) * -(-n // 256)
    assert wave_fill(tiles) < STREAMK_MIN_FILL
    cfg = default_config(m, n, k)
    assert (cfg.scheduler, cfg.tile_m, cfg.tile_n, cfg.cluster_m) == ("streamk", 128, 128, 1)
    assert cfg in declared_subspace() and feasible(cfg)[0]   # the sweep measures exactly this kernel


@pytest.mark.parametrize("m,n,k", [(512, 8192, 8192), (8192, 8192, 8192), (256, 14336, 4096), (4096, 5000, 5000),
                                   (1000, 5000, 72)])
def test_filled_waves_or_short_k_keep_the_persistent_tile(m, n, k):
    tiles = -(-m // 128) * -(-n // 256)
    assert wave_fill(tiles) >= STREAMK_MIN_FILL or -(-k // 64) < STREAMK_MIN_K_ITERS
    cfg = default_config(m, n, k)
    assert (cfg.scheduler, cfg.tile) == ("persistent", (128, 256, 64))


def test_small_m_rules_are_unchanged():
    assert default_config(16, 4096, 14336).swap_ab and default_config(100, 4096, 4096).tile == (64, 128, 64)
    assert wave_fill(SM90_SMS) == 1.0 and wave_fill(SM90_SMS + 1) == pytest.approx((SM90_SMS + 1) / (2 * SM90_SMS))


@pytest.mark.parametrize("flavor", [("bf16", "bf16", "tn"), ("fp16", "fp32", "nt"), ("bf16", "fp32", "tt"),
                                    ("fp16", "fp16", "nn")])
def test_sizing_program_has_the_full_programs_shared_memory(flavor):
    """fit_stages sizes with sizing_program (no relations, a seventh of the cost): its kSmemBytes must be the full
    program's for every declared configuration and for the depth above it, and fit_stages' answer the deepest that
    fits by the full program."""
    from argus_cutlass.kernels.gemm.heuristics import fit_stages
    from argus_cutlass.kernels.gemm.program import build_program, sizing_program
    from argus_cutlass.kernels.gemm.space import declared_subspace
    from argus_cutlass.plan.resources import SMEM_LIMIT_BYTES, smem_total_bytes

    for cfg in declared_subspace(*flavor):
        for c in (cfg, cfg.replace(stages=cfg.stages + 1)):
            assert smem_total_bytes(sizing_program(c)) == smem_total_bytes(build_program(c))
        assert smem_total_bytes(build_program(cfg)) <= SMEM_LIMIT_BYTES or cfg.stages == 2
        deeper = cfg.replace(stages=cfg.stages + 1)
        assert fit_stages(deeper).stages == cfg.stages if smem_total_bytes(build_program(deeper)) > SMEM_LIMIT_BYTES \
            else fit_stages(deeper).stages == deeper.stages
    assert not sizing_program(declared_subspace(*flavor)[0]).relations
