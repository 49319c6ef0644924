"""Edge inputs found by fuzzing the problem layers (session fuzz, .dev/fuzz/): huge sizes whose kernel int
arithmetic would overflow are refused with ProblemError naming the input; K near the documented 2^30 limit builds."""

from __future__ import annotations

import pytest

from argus_cutlass.errors import ProblemError
from argus_cutlass.kernels.attention.problem import AttentionProblem
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.problem import MAX_MN, GemmProblem
from argus_cutlass.kernels.gemm.program import build_program


@pytest.mark.parametrize("k", [2**29, 2**30 - 1])
def test_gemm_k_below_2_30_builds(k: int) -> None:
    """problem.k_range accepts K < 2^30; the program's k loop must then state a proof range the IR allows
    (bound_bits <= 30), not fail with a DslError."""
    p = GemmProblem(8, 8, k).validate_any()
    loop = build_program(GemmConfig(), p).kloop
    assert loop.bound_bits == 30 and k < 2**loop.bound_bits


@pytest.mark.parametrize("m, n", [(2**31 - 1, 1), (1, 2**31 - 1), (MAX_MN + 1, 8)])
def test_gemm_mn_near_int_max_refused(m: int, n: int) -> None:
    """(M + kTileM - 1) / kTileM in the printed make_walk is int: M or N within a tile of 2^31 overflowed."""
    with pytest.raises(ProblemError) as info:
        GemmProblem(m, n, 8).validate_any()
    mode = "M" if m > MAX_MN else "N"
    assert info.value.rule == "problem.size" and f"{mode}={max(m, n)}" in str(info.value)
    GemmProblem(MAX_MN, 1, 8).validate_any()


def test_gemm_work_units_overflow_refused() -> None:
    """Walk::units (blocks_m * blocks_n) is int: a problem whose tiles exceed 2^31-1 is refused for the config."""
    from argus_cutlass.generate import build

    cfg = GemmConfig(tile_m=128, tile_n=128, cluster_m=1)
    p = GemmProblem(2**24, 2**24, 64).validate_any()
    with pytest.raises(ProblemError) as info:
        build(cfg, p)
    assert info.value.rule == "problem.size" and "16777216 x 16777216" in str(info.value)
    build(cfg, GemmProblem(2**20, 2**20, 64))  # 2^26 units: fine


def test_cli_gemm_huge_m_exit_2(tmp_path, capsys, monkeypatch) -> None:
    from argus_cutlass.cli import main

    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))  # a regression must not touch the user's cache

    rc = main(["gemm", "--m", str(2**31 - 1), "--n", "1", "--k", "8", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "[problem.size] M=2147483647" in err and "Traceback" not in err


@pytest.mark.parametrize("batch, heads, sq", [(2**20, 2**11, 1), (2**31 - 1, 1, 1), (2**16, 2**16, 100)])
def test_attention_tile_count_overflow_refused(batch: int, heads: int, sq: int) -> None:
    """p.tiles = m_blocks * heads * batch is int in the printed host code."""
    with pytest.raises(ProblemError) as info:
        AttentionProblem(batch, heads, heads, sq, sq, 64).validate()
    assert info.value.rule == "problem.size" and f"batch={batch}" in str(info.value)
    AttentionProblem(4096, 64, 8, 65536, 65536, 64).validate()


@pytest.mark.parametrize("hidden,ffn", [(2**29, 8), (8, 2**17), (2**16 + 8, 256)])
def test_moe_wider_than_the_verified_width_is_refused_at_once(hidden, ffn):
    """A fuzzed H = 2^29 layer passed validation and then ran in the verifier for over 18 minutes (it runs
    every grouped-walk tile on its routings): H or I past 2^16 is refused by rule problem.width, naming
    the input; 2^16 itself is accepted."""
    from argus_cutlass.errors import ProblemError
    from argus_cutlass.kernels.moe.problem import MoEProblem

    with pytest.raises(ProblemError) as info:
        MoEProblem(5, 1, 1, hidden, ffn).validate()
    assert info.value.rule == "problem.width" and ("hidden" if hidden > 2**16 else "ffn") in str(info.value)
    MoEProblem(5, 1, 1, 2**16, 2**16).validate()


def test_gemm_walk_keeps_headroom_for_the_persistent_step() -> None:
    """Review, session 21: the persistent scheduler steps ``u += (gridDim.x + kStepDelta) *
    kConsumerStride`` in int (templates/gemm/work.j2), so a walk of up to 2^31 - 1 units overflowed past
    its last unit; like attention's MAX_TILES the count keeps 2^16 of headroom. 42966 x 49981 tiles of
    128 x 256 = 2^31 - 2 units."""
    from argus_cutlass.generate import build

    cfg = GemmConfig(tile_m=128, tile_n=256, cluster_m=1, cluster_n=1, swizzle=1)
    p = GemmProblem(42966 * 128, 49981 * 256, 64).validate_any()
    with pytest.raises(ProblemError) as info:
        build(cfg, p)
    assert info.value.rule == "problem.size" and "2147483646 work units" in str(info.value)
