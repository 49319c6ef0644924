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
