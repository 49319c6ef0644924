"""bench/moe_ab.py: its cells and --vary parse into problems and typed MoEConfig values, bad ones refused by name
(no GPU: the parsing only)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import moe_ab  # noqa: E402

from argus_cutlass.kernels.moe.problem import MoEProblem  # noqa: E402


def test_cells_and_values_parse():
    assert moe_ab.parse_cell("qwen3-30b-a3b:16") == MoEProblem.for_model("qwen3-30b-a3b", 16)
    assert moe_ab.parse_cell("e8k2h1024i512:256") == MoEProblem(256, 8, 2, 1024, 512)
    assert moe_ab.parse_vary("row_bounded=false,true") == ("row_bounded", [False, True])
    assert moe_ab.parse_vary("gu_stages=5,8") == ("gu_stages", [5, 8])


@pytest.mark.parametrize("cell", ["qwen3:16", "mixtral", "e8k2h1024:16", "e8k9h1024i512:16"])
def test_bad_cells_named(cell):
    with pytest.raises(ValueError, match="cell"):
        moe_ab.parse_cell(cell)


@pytest.mark.parametrize("spec", ["row_bounded=true", "no_such_field=1,2", "gu_stages", "gu_stages=a,b"])
def test_bad_vary_named(spec):
    with pytest.raises(ValueError):
        moe_ab.parse_vary(spec)


def test_variants_parse_several_fields_each():
    assert moe_ab.parse_variants("-;tile_k=128;row_bounded=true,gu_stages=5") == [
        ("-", {}), ("tile_k=128", {"tile_k": 128}),
        ("row_bounded=true,gu_stages=5", {"row_bounded": True, "gu_stages": 5})]


@pytest.mark.parametrize("spec", ["-", "-;no_such_field=1", "-;gu_stages=a", "-;gu_stages"])
def test_bad_variants_named(spec):
    with pytest.raises(ValueError, match="--variants"):
        moe_ab.parse_variants(spec)


def test_main_refuses_bad_arguments_by_name(capsys):
    with pytest.raises(SystemExit):
        moe_ab.main(["--vary", "row_bounded=true"])
    assert "at least two values" in capsys.readouterr().err


def test_main_without_torch_says_what_it_needs(capsys, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_torch(name, *a, **k):
        if name == "torch":
            raise ImportError("no torch")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    with pytest.raises(SystemExit):
        moe_ab.main(["--vary", "row_bounded=false,true", "--cells", "e8k2h512i256:16"])
    assert "needs torch" in capsys.readouterr().err
