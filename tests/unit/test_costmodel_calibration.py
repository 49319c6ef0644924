"""The cost model's calibrated constants (issue 13, item 1): shipped as data, fitted by
``bench/calibrate_costmodel.py`` from measured tables."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from argus_cutlass.agent import costmodel
from argus_cutlass.agent.costmodel import CostParams, calibrated, predict_ms
from argus_cutlass.kernels.gemm.config import GemmConfig

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "bench" / "data" / "agent_eval_table.json"


def _script():
    spec = importlib.util.spec_from_file_location("calibrate_costmodel", ROOT / "bench" / "calibrate_costmodel.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_shipped_calibration_is_read_and_complete():
    data = json.loads((Path(costmodel.__file__).with_name(costmodel.CALIBRATION_FILE)).read_text())
    assert set(data["params"]) == set(CostParams.fields())
    assert calibrated() == CostParams(**data["params"])
    assert "held out" in data["note"]  # the file says how well it does on shapes it did not see


def test_defaults_are_the_hand_set_model():
    big, small = GemmConfig(), GemmConfig(tile_m=64, tile_n=64, cluster_m=1, schedule="pingpong", epi_m=64)
    d = CostParams()
    assert predict_ms(big, 8192, 8192, 8192, d) < predict_ms(small, 8192, 8192, 8192, d)
    # a parameter moves the prediction: the launch cost is added once
    slow = CostParams(launch_s=d.launch_s + 1e-3)
    assert predict_ms(big, 256, 256, 256, slow) == pytest.approx(predict_ms(big, 256, 256, 256, d) + 1.0, rel=1e-6)


def test_unknown_parameter_in_the_file_is_refused(tmp_path, monkeypatch):
    bad = tmp_path / costmodel.CALIBRATION_FILE
    bad.write_text(json.dumps({"params": {"peak_flops": 1e15, "warp_speed": 9}}))
    monkeypatch.setattr(costmodel, "__file__", str(tmp_path / "costmodel.py"))
    costmodel.reload_calibration()
    try:
        with pytest.raises(ValueError, match="warp_speed"):
            calibrated()
    finally:
        monkeypatch.undo()
        costmodel.reload_calibration()


@pytest.mark.skipif(importlib.util.find_spec("scipy") is None, reason="the fit uses scipy")
def test_fit_recovers_a_planted_model():
    """A synthetic table made by the model itself with constants far from the defaults (a slow
    epilogue and launch): the defaults then pick badly on some shape, and the fit must pick better --
    it fails if the fit does not move the parameters the data determine."""
    import numpy as np

    cal = _script()
    data = cal.load_tables([str(TABLE)])
    truth = CostParams(epilogue_bytes_per_s_per_sm=2.5e10, launch_s=1.2e-5, l2_bytes_per_s_per_sm=1.5e11)
    synthetic = [(mnk, shapes, np.array([predict_ms(s, *mnk, truth) for s in shapes])) for mnk, shapes, _ in data]
    before = cal.regrets(synthetic, cal.predictions(synthetic, CostParams()))
    assert max(before) > 0.03  # the planted constants change some shape's pick
    fitted = cal.fit(synthetic, CostParams(), maxiter=300)
    after = cal.regrets(synthetic, cal.predictions(synthetic, fitted))
    assert sum(after) < 0.5 * sum(before)


def test_bad_table_is_named(tmp_path):
    cal = _script()
    bad = tmp_path / "t.json"
    bad.write_text("{}")
    with pytest.raises(SystemExit, match="t.json: not a measured table"):
        cal.load_tables([str(bad)])
