"""bench/sweep_gemm.py --merge-shipped into a scratch copy of the shipped table (no GPU): one note per flavor that
counts the flavor's entries after the merge, --keep-existing keeps what is there, other flavors untouched."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import sweep_gemm  # noqa: E402

from argus_cutlass.kernels.gemm.config import GemmConfig  # noqa: E402


def _table(shapes: dict[str, dict[str, float]]) -> dict:
    a = GemmConfig(dtype="fp16", out_dtype="fp16", layout="nt", tile_n=128)
    b = GemmConfig(dtype="fp16", out_dtype="fp16", layout="nt", tile_n=256)
    return {"flavor": {"dtype": "fp16", "out_dtype": "fp16", "layout": "nt"}, "gpu": "NVIDIA H200",
            "restricted": {"from": "/somewhere/gemm_sweep_bf16_bf16_tn_h200.json", "within": 0.1},
            "kernel_configs": {"ka": a.model_dump(), "kb": b.model_dump()},
            "shapes": {key: {"kernels": ks, "cublas_ms": 1.0} for key, ks in shapes.items()}}


def test_merge_notes_the_flavors_total_and_keeps_existing(tmp_path, monkeypatch):
    root = tmp_path / "root"
    (root / "agent").mkdir(parents=True)
    other = {"kernel": "gemm", "dtype": "bf16", "out_dtype": "bf16", "layout": "tn", "key": "x", "shape": [1, 2, 3]}
    (root / "agent" / "tuned_h200.json").write_text(json.dumps({"note": "n", "note_gemm_sweep": "history",
                                                                "entries": [other]}))
    monkeypatch.setattr(sweep_gemm, "ROOT", root)
    t1 = tmp_path / "gemm_sweep_fp16_fp16_nt_h200.json"
    t1.write_text(json.dumps(_table({"8x4096x4096": {"ka": 0.02, "kb": 0.03}})))
    assert sweep_gemm.main(["--table", str(t1), "--merge-shipped", "--keep-existing"]) == 0
    doc = json.loads((root / "agent" / "tuned_h200.json").read_text())
    mine = [e for e in doc["entries"] if e.get("dtype") == "fp16"]
    assert len(mine) == 1 and mine[0]["ms"] == 0.02 and mine[0]["config"]["tile_n"] == 128
    note = doc["note_gemm_sweep_fp16_fp16_nt"]
    assert note.startswith("1 GEMM entries in this flavor after merging 1 on ") and t1.name in note
    assert "within 10% of each shape's best in gemm_sweep_bf16_bf16_tn_h200.json (--from-table)" in note
    assert doc["note_gemm_sweep"] == "history" and other in doc["entries"]   # the bf16 tn flavor untouched
    # a resumed table: one more shape, the first one re-timed; --keep-existing adds only the new shape
    t1.write_text(json.dumps(_table({"8x4096x4096": {"ka": 0.05, "kb": 0.04}, "64x4096x4096": {"ka": 0.03}})))
    assert sweep_gemm.main(["--table", str(t1), "--merge-shipped", "--keep-existing"]) == 0
    doc = json.loads((root / "agent" / "tuned_h200.json").read_text())
    mine = sorted((e["shape"], e["ms"]) for e in doc["entries"] if e.get("dtype") == "fp16")
    assert mine == [([8, 4096, 4096], 0.02), ([64, 4096, 4096], 0.03)]
    assert doc["note_gemm_sweep_fp16_fp16_nt"].startswith("2 GEMM entries in this flavor after merging 1 on ")
    # without --keep-existing the re-timed shape's entry is replaced by the table's best
    assert sweep_gemm.main(["--table", str(t1), "--merge-shipped"]) == 0
    doc = json.loads((root / "agent" / "tuned_h200.json").read_text())
    assert sorted((e["shape"], e["ms"]) for e in doc["entries"] if e.get("dtype") == "fp16") == \
        [([8, 4096, 4096], 0.04), ([64, 4096, 4096], 0.03)]
