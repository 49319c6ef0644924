"""The epilogue's register -> smem step: stmatrix semantics, ``epilogue.stmatrix`` (G2),
``epilogue.stage_reuse`` (G6), the GPU probe tables, and the probe kernel's compile check."""

from __future__ import annotations

import re

import numpy as np
import pytest
from argus_cutlass.agent.store import shipped_entries

from argus_cutlass.errors import DslError
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.program import build_program
from argus_cutlass.verify.staging import (
    check_stage_reuse,
    check_staging,
    predict_image,
    probe_tables,
    staging_map,
    stmatrix_store,
)

ROW_MAJOR = GemmConfig(tile_m=64, tile_n=128, schedule="pingpong", epi_m=64, epi_n=64)
COL_MAJOR = GemmConfig(swap_ab=True, tile_m=64, tile_n=32, schedule="pingpong", epi_m=64, epi_n=32, stages=8)


def _dsl(cfg: GemmConfig, **changes):
    """The program of ``cfg`` with its staging node edited."""
    program = build_program(cfg)
    return program.replace_node("staging", **changes) if changes else program


def test_stmatrix_semantics_hand_values():
    rows = 16 * np.arange(32)  # lane L supplies row L % 8 of matrix L // 8 at byte 16 L
    d = stmatrix_store(rows, 4, trans=False)
    # lane 5 holds fragment row 1, columns 2, 3 of every matrix
    assert d[5, 0, 0] == 16 * 1 + 2 * 2 and d[5, 0, 1] == 16 * 1 + 2 * 3
    assert d[5, 3, 1] == 16 * (8 * 3 + 1) + 2 * 3
    t = stmatrix_store(rows, 4, trans=True)
    # transposed: fragment (1, 3) of matrix 2 goes to row 3, position 1
    assert t[5, 2, 1] == 16 * (8 * 2 + 3) + 2 * 1
    # x1 stores one matrix: 64 distinct 2-byte words inside rows 0..7
    x1 = stmatrix_store(rows, 1, trans=False)
    assert x1.shape == (32, 1, 2) and np.unique(x1).size == 64 and x1.max() < 128


def test_stmatrix_rejects_bad_arguments():
    with pytest.raises(ValueError, match="one address per lane"):
        stmatrix_store(np.zeros(16), 4, False)
    with pytest.raises(ValueError, match=".x1, .x2 or .x4"):
        stmatrix_store(np.zeros(32, dtype=np.int64), 3, False)


@pytest.mark.parametrize("cfg", [ROW_MAJOR, COL_MAJOR, GemmConfig(), GemmConfig(out_dtype="fp32"),
                                 GemmConfig(dtype="fp16", out_dtype="fp16", epi_n=16), GemmConfig(epi_n=8),
                                 GemmConfig(epi_n=24, tile_n=192)],
                         ids=["row", "col", "default", "fp32_out", "fp16_epi16", "epi8_x2", "epi24_x2"])
def test_correct_programs_are_accepted(cfg):
    dsl = _dsl(cfg)
    proofs, bad = check_staging(dsl)
    assert not bad and proofs[0].rule == "epilogue.stmatrix" and proofs[0].points == cfg.tile_m * cfg.tile_n
    assert check_stage_reuse(dsl)[0] and not check_stage_reuse(dsl)[1]
    sm = staging_map(dsl)
    # the staging map is a bijection per subtile: each (subtile, sD element) written once
    cells = np.unique(np.stack([sm.subtile, sm.got]), axis=1)
    assert cells.shape[1] == sm.m.size


def test_shipped_configs_are_accepted():
    entries = [e for e in shipped_entries() if e.get("kernel") == "gemm"]
    assert len(entries) >= 13
    for e in entries:
        cfg = GemmConfig(**e["config"])
        _, bad = check_staging(_dsl(cfg))
        assert not bad, (cfg, bad[0].message)


@pytest.mark.parametrize("cfg,changes,first", [
    (ROW_MAJOR, {"row_lane_skew": 1}, ("D(0,0)", "sD(8,0)")),
    (ROW_MAJOR, {"matrix_order": (1, 0, 3, 2)}, ("D(0,0)", "sD(8,0)")),
    (COL_MAJOR, {"row_lane_skew": 1}, ("D(0,0)", "sD(8,0)")),
])
def test_misplaced_stores_are_rejected_with_the_first_register(cfg, changes, first):
    _, bad = check_staging(_dsl(cfg, **changes))
    assert [v.rule for v in bad] == ["epilogue.stmatrix"]
    v = bad[0]
    assert first[0] in v.message and first[1] in v.message
    c = v.counterexample
    assert c.invariant == "G2" and c.thread["threadIdx"] == 128 and c.element == {"tensor": "D", "m": 0, "n": 0}
    assert any("row address from lane" in step for step in c.chain)


def test_missing_trans_is_a_misaligned_row():
    _, bad = check_staging(_dsl(COL_MAJOR, trans=False))
    assert bad and "not 16-byte aligned" in bad[0].message and bad[0].counterexample.thread["lane"] == 1


def test_stage_reuse_needs_one_stage_of_slack():
    program = _dsl(ROW_MAJOR)
    stages = program.tensor("sD").shape[2]
    assert program.staging.store_wait == stages - 1
    _, bad = check_stage_reuse(program.replace_node("staging", store_wait=stages))
    assert bad and bad[0].invariant == "G6" and bad[0].counterexample.params["store_wait"] == stages
    assert f"subtile {stages} overwrites stage 0" in bad[0].message


def test_stage_reuse_per_schedule():
    """Cooperative: one store thread, the counter runs on. Ping-pong: two store threads share sD and
    must take turns at the epilogue (the turn order); without it group 1 overwrites group 0's stage."""
    import dataclasses

    coop = check_stage_reuse(build_program(GemmConfig()))[0][0].summary
    assert "one store thread, the subtile counter runs on across tiles" in coop
    pp = build_program(ROW_MAJOR)
    assert "2 groups take turns at the epilogue" in check_stage_reuse(pp)[0][0].summary
    _, bad = check_stage_reuse(dataclasses.replace(pp, orders=()))
    assert bad and "share the staging buffer without taking turns" in bad[0].message


def test_probe_tables_predict_the_staging_image():
    good = probe_tables(_dsl(ROW_MAJOR))
    assert np.array_equal(good.predicted, good.intended) and (good.intended != 0xFFFF).all()
    bad = probe_tables(_dsl(ROW_MAJOR, row_lane_skew=1))
    assert not np.array_equal(bad.predicted, bad.intended)
    assert np.array_equal(np.sort(bad.predicted), np.sort(bad.intended))  # same values, other places
    with pytest.raises(ValueError, match="outside"):
        predict_image(good.regs, good.rows, good.num, good.trans, good.smem_bytes // 2)


def test_dsl_rejects_bad_staging_nodes():
    from argus_cutlass.dsl.builder import ProgramBuilder

    b = ProgramBuilder("p")
    sd = b.tensor("sD", "smem", (64, 32, 2), "bf16")
    with pytest.raises(DslError) as info:
        b.smem_stage("accum", sd, op="stmatrix", num=3)
    assert info.value.rule == "dsl.operand" and ".x2 or .x4" in str(info.value)
    assert "test_staging.py" in str(info.value)  # at the author's source line
    with pytest.raises(DslError, match="permutation"):
        b.smem_stage("accum", sd, op="stmatrix", num=4, matrix_order=(0, 0, 1, 2))
    with pytest.raises(DslError, match="expected 'stmatrix' or 'st.shared'"):
        b.smem_stage("accum", sd, op="st.global")


def test_staging_from_another_register_tensor_is_rejected():
    _, bad = check_staging(_dsl(ROW_MAJOR, src="acc2"))
    assert bad and "stores register tensor 'acc2', but the MMA accumulates into 'accum'" in bad[0].message


@pytest.mark.parametrize("changes,text", [
    ({"matrix_order": (0, 0, 1, 1)}, "permutation"),
    ({"num": 1, "matrix_order": (0,)}, ".x2 or .x4"),
    ({"store_wait": -1}, "integer >= 0"),
    ({"epi_n": 24}, "must be an smem (64, 24, stages) tensor"),
    ({"op": "st.global"}, "expected 'stmatrix' or 'st.shared'"),
])
def test_replace_staging_validates_like_the_builder(changes, text):
    with pytest.raises(DslError, match=re.escape(text)):
        _dsl(ROW_MAJOR).replace_node("staging", **changes)


@pytest.mark.nvcc
def test_probe_kernels_compile():
    from argus_cutlass.runtime.probe_kernels import MULTICAST_PROBE, STMATRIX_PROBE, build_probe

    for name in (STMATRIX_PROBE, MULTICAST_PROBE):
        art = build_probe(name)
        assert art.path.exists() and art.registers is not None


def test_probe_tables_when_a_warp_owns_two_blocks_of_a_subtile():
    # ping-pong 128-row tile staged 128 rows at a time: warp w holds rows 16w.. and 64 + 16w..
    dsl = _dsl(GemmConfig(schedule="pingpong"))
    t = probe_tables(dsl)
    assert t.regs.shape == (128, 4, 4)  # 2 blocks x 2 column groups per warp
    assert np.array_equal(t.predicted, t.intended)


def test_predict_image_rejects_malformed_tables():
    good = probe_tables(_dsl(ROW_MAJOR))
    with pytest.raises(ValueError, match="whole warps"):
        predict_image(good.regs, good.rows[:16], good.num, good.trans, good.smem_bytes)
    with pytest.raises(ValueError, match="expected"):
        predict_image(good.regs[:, :1], good.rows, good.num, good.trans, good.smem_bytes)
    with pytest.raises(ValueError, match="16-byte aligned"):
        predict_image(good.regs, good.rows + 2, good.num, good.trans, good.smem_bytes)
    with pytest.raises(ValueError, match="integers"):
        stmatrix_store(np.zeros(32, dtype=np.float64), 4, False)
