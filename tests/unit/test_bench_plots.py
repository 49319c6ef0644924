"""bench/plots.py: the benchmarks' ratio and roofline plots, from the measured tables in bench/data."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "bench" / "data"


def _plots():
    spec = importlib.util.spec_from_file_location("plots", ROOT / "bench" / "plots.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("table,kind,n", [("bench_tuned_table.md", "gemm", 13),
                                          ("attention_bench_tuned_h200_s16.md", "attention", 24),
                                          ("moe_bench_h200_s16.md", "moe", 12)])
def test_tables_are_read_and_recognised(table, kind, n):
    plots = _plots()
    rows = plots.read_table(DATA / table)
    assert plots.kind_of(rows) == kind and len(rows) == n
    pts = plots.points(rows, kind)
    assert all(p["ratio"] > 0 for p in pts)
    if kind != "moe":  # intensity is FLOP / byte of operands and output: a 4096^3 bf16 GEMM is 4096 / 3
        assert all(0 < p["intensity"] < 1e5 and p["tflops"] > 0 for p in pts)
    if kind == "gemm":
        big = next(p for p in pts if p["label"] == "4096x4096x4096")
        assert big["intensity"] == pytest.approx(4096 / 3)


def test_plots_are_written(tmp_path):
    pytest.importorskip("matplotlib")
    plots = _plots()
    for table in ("bench_tuned_table.md", "attention_bench_tuned_h200_s16.md", "moe_bench_h200_s16.md"):
        paths = plots.write_plots(DATA / table, out_dir=tmp_path)
        assert [p.name for p in paths] == [f"{Path(table).stem}_ratio.png", f"{Path(table).stem}_roofline.png"]
        assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000 for p in paths)


def test_not_a_table_is_named(tmp_path):
    plots = _plots()
    bad = tmp_path / "x.md"
    bad.write_text("no table here\n")
    with pytest.raises(ValueError, match="x.md: no markdown table"):
        plots.read_table(bad)
    assert plots.main([str(bad)]) == 2
