"""bench/slim_z3_wheel.py: the device carry's z3 wheel without the duplicate library, the binary and the headers."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import slim_z3_wheel  # noqa: E402

KEEP = ("z3/__init__.py", "z3/z3core.py", "z3/lib/libz3.so", "z3_solver-4.13.4.0.dist-info/METADATA")
DROP = ("z3/lib/libz3.so.4.13", "z3_solver-4.13.4.0.data/data/bin/z3", "z3/include/z3_api.h")


def _wheel(folder: Path, members=KEEP + DROP) -> Path:
    path = folder / "z3_solver-4.13.4.0-py3-none-manylinux_2_17_x86_64.whl"
    record = "".join(f"{m},sha256=x,1\n" for m in members) + "z3_solver-4.13.4.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for m in members:
            z.writestr(m, b"\0" * 4096 if "lib" in m or "bin" in m else b"x")
        z.writestr("z3_solver-4.13.4.0.dist-info/RECORD", record)
    return path


def test_slim_drops_the_duplicates_and_their_record_lines(tmp_path):
    path = _wheel(tmp_path)
    before, after = slim_z3_wheel.slim(path)
    assert after < before and [p.name for p in tmp_path.iterdir()] == [path.name]   # nothing left beside it
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        record = z.read("z3_solver-4.13.4.0.dist-info/RECORD").decode()
    assert set(KEEP) <= names and not names & set(DROP)
    assert all(m in record for m in KEEP) and not any(m + "," in record for m in DROP)
    assert slim_z3_wheel.slim(path)[1] == after   # idempotent


def test_refuses_another_wheel_or_one_without_the_library(tmp_path):
    other = tmp_path / "pydantic-2.0-py3-none-any.whl"
    other.write_bytes(b"")
    with pytest.raises(SystemExit, match="not a z3_solver"):
        slim_z3_wheel.slim(other)
    with pytest.raises(SystemExit, match="no z3/lib/libz3.so"):
        slim_z3_wheel.slim(_wheel(tmp_path, KEEP[:2]))
