"""bench/read_floor.py (the attainable weight-read floor): its size selection and report on a table (no GPU), and
its read kernel through the project's nvcc driver (CI has nvcc)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import read_floor  # noqa: E402


TABLE = {"shapes": {
    "1x4096x14336": {"kernels": {"a": 0.035, "b": 0.033, "c": None}, "cublas_ms": 0.040},
    "1x4096x4096": {"kernels": {"a": 0.010}, "cublas_ms": 0.011},        # 32 MB: fits the L2, not a decode floor
    "8x4096x14336": {"kernels": {"a": 0.036}, "cublas_ms": 0.041},       # another M: not taken at --m 1
    "1x57344x8192": {"kernels": {}, "cublas_ms": None},                   # no time: the report says so
    "1x5120x8192": {"kernels": {"a": 0.0256}, "cublas_ms": 0.0365},
}}


def test_sizes_are_the_rows_at_m_with_weights_past_the_l2_smallest_first():
    assert read_floor.weight_sizes(TABLE, 1) == [(5120, 8192), (4096, 14336), (57344, 8192)]
    assert read_floor.weight_sizes(TABLE, 8) == [(4096, 14336)]
    assert read_floor.weight_sizes(TABLE, 64) == []


def test_report_takes_the_tables_best_and_names_a_row_without_times():
    best = read_floor.table_best(TABLE, 1, 4096, 14336)
    assert best == {"cublas_ms": 0.040, "gemm_best": "b", "gemm_ms": 0.033}
    assert read_floor.table_best(TABLE, 1, 57344, 8192) == {"cublas_ms": None}
    r = {"n": 4096, "k": 14336, "bytes": 2 * 4096 * 14336, "floor_ms": 0.0273, "best_read_ms": 0.030,
         "best_read": "b2t512u8", "empty_ms": 0.002, **best}
    line = read_floor.report_line(r)
    assert "b2t512u8" in line and " 1.099 " in line and " 33.0 " in line and line.rstrip().endswith("40.0")
    assert read_floor.report_line({**r, "gemm_ms": None, "cublas_ms": None}).endswith(" -")


def test_a_table_path_that_does_not_exist_is_named(capsys):
    with pytest.raises(SystemExit) as exc:
        read_floor.main(["--table", "/nonexistent/t.json"])
    assert exc.value.code == 2 and "/nonexistent/t.json: no such file" in capsys.readouterr().err


@pytest.mark.nvcc
def test_the_read_kernel_compiles_for_sm90a():
    import ctypes

    lib = read_floor.build()
    assert isinstance(lib, ctypes.CDLL) and lib.read_xor_launch and lib.empty_launch
