"""bench/ncu_source_top.py: the hottest SASS lines of an ncu source page (CPU only)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("ncu_source_top", ROOT / "bench" / "ncu_source_top.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


PAGE = '''==PROF== Connected to process 1
"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)"
"0x10","SYNCS.PHASECHK.TRANS64 P0, [R2+URZ], R3","700","650"
"0x20","LDG.E R4, desc[UR4][R6.64]","200","190"
"0x30","HGMMA.64x128x16.F32.BF16","100","20"
'''


def test_the_hottest_lines_come_first_with_their_share(tmp_path, capsys):
    f = tmp_path / "src.csv"
    f.write_text(PAGE)
    assert _tool().main([str(f), "--top", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("3 instructions") and "All Samples" in out[0]
    assert "70.0 %" in out[1] and "SYNCS.PHASECHK" in out[1] and "650" in out[1]
    assert "20.0 %" in out[2] and "LDG.E" in out[2] and len(out) == 3


def test_a_page_without_a_stall_column_is_refused_with_its_header(tmp_path, capsys):
    f = tmp_path / "src.csv"
    f.write_text('"Address","Source","Instructions Executed"\n"0x10","NOP","5"\n')
    assert _tool().main([str(f)]) == 2
    assert "Instructions Executed" in capsys.readouterr().err
    assert _tool().main([str(f), "--column", "Instructions Executed"]) == 0
