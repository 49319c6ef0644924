"""bench/timing_spread.py: how well two timings of the same kernels agree (no GPU)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import timing_spread  # noqa: E402


def _table(rows, timing=None):
    return {"shapes": rows, **({"timing": timing} if timing else {})}


def test_spread_removes_the_row_shift_and_counts_pairs_past_three_percent():
    a = _table({"1x8x8": {"kernels": {"k1": 1.0, "k2": 2.0, "k3": 4.0, "dead": None}, "cublas_ms": 1.0},
                "2x8x8": {"kernels": {"k1": 1.0, "k2": 1.1}}})
    b = _table({"1x8x8": {"kernels": {"k1": 1.1, "k2": 2.2, "k3": 4.84}, "cublas_ms": 1.0},   # all 10 % slower, k3 21 %
                "2x8x8": {"kernels": {"k1": 1.2, "k2": 1.1}}})                                # the best swaps
    rows = timing_spread.pairs(a, b)
    s = timing_spread.spread(rows)
    assert s["rows"] == 2 and len(s["raw"]) == 5
    assert len(s["shifted"]) == 3   # row 2 has two kernels: its median shift would halve its difference
    assert sorted(round(x, 3) for x in s["shifted"])[-1] == pytest.approx(math.log(1.21 / 1.1), abs=1e-3)
    assert s["a_best_in_b"] == 1   # row 2's A-best (k1) is 9 % behind k2 in B
    assert s["b_best_in_a"] == 1   # row 2's B-best (k2) is 10 % behind k1 in A
    assert s["signed"] == pytest.approx(math.log(1.1), abs=1e-9)


def test_a_graph_table_counts_only_rows_already_retimed_from_graphs():
    g = _table({"1x8x8": {"timing": "graph", "kernels": {"k": 1.0}}, "2x8x8": {"kernels": {"k": 5.0}}}, "graph")
    ev = _table({"1x8x8": {"kernels": {"k": 1.1}}, "2x8x8": {"kernels": {"k": 1.0}}})
    assert [k for k, *_ in timing_spread.pairs(g, ev)] == ["1x8x8"]
    assert [k for k, *_ in timing_spread.pairs(ev, g)] == ["1x8x8"]
    # one table against a field of its own rows (the per-launch times a graph refine kept)
    g["shapes"]["1x8x8"]["kernels_events"] = {"k": 1.2}
    assert timing_spread.pairs(g, g, "kernels_events")[0][2] == {"k": 1.2}


def test_main_reports_and_refuses_a_lone_table_without_field(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(_table({"1x8x8": {"kernels": {"k": 1.0, "j": 2.0}, "cublas_ms": 1.0}})))
    b.write_text(json.dumps(_table({"1x8x8": {"kernels": {"k": 1.01, "j": 2.5}, "cublas_ms": 1.0}})))
    assert timing_spread.main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "1 rows" in out and "kernels: 2 pairs" in out and "apart by more than 3 %: 1 (50.0 %)" in out
    assert "cuBLAS (cublas_ms against cublas_ms): 1 pairs" in out and "on 1 of 1 rows" in out
    with pytest.raises(SystemExit):
        timing_spread.main([str(a)])
    assert "give two tables" in capsys.readouterr().err
    c = tmp_path / "c.json"
    c.write_text(json.dumps(_table({"9x8x8": {"kernels": {"k": 1.0}}})))
    assert timing_spread.main([str(a), str(c)]) == 1
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    with pytest.raises(SystemExit):
        timing_spread.main([str(a), str(bad)])
    assert "not a sweep table" in capsys.readouterr().err
    # one table against the per-launch times it kept: cuBLAS compared with the matching field
    g = tmp_path / "g.json"
    g.write_text(json.dumps(_table({"1x8x8": {"timing": "graph", "kernels": {"k": 1.0}, "cublas_ms": 1.0,
                                              "kernels_events": {"k": 1.2}, "cublas_ms_events": 1.1}}, "graph")))
    assert timing_spread.main([str(g), "--field", "kernels_events"]) == 0
    assert "cuBLAS (cublas_ms_events against cublas_ms): 1 pairs" in capsys.readouterr().out
