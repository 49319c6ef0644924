"""bench/profile_moe.py --vary: the cross product, refusals skipped and named, bad specs refused (no GPU, no torch: the
build is stubbed, the run stops there)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import profile_moe  # noqa: E402


class _Built(Exception):
    pass


@pytest.fixture
def built(monkeypatch):
    import argus_cutlass.generate as generate

    jobs = []

    def stop(pairs, **kw):
        jobs.extend(pairs)
        raise _Built

    monkeypatch.setattr(generate, "build_jobs", stop)
    return jobs


def _run(argv):
    with pytest.raises(_Built):
        profile_moe.main(["--out", "/tmp/unused", "--cells", "qwen3-30b-a3b:16", "--heuristic", *argv])


def test_cross_product_skips_what_the_verifier_refuses(built, capsys):
    _run(["--pdl", "0", "--vary", "gu_tile_n=64,128,256", "--vary", "gu_stages=5,12"])
    got = {(c.gu_tile_n, c.gu_stages) for c, _ in built}
    assert (64, 12) in got and (256, 5) in got and (256, 12) not in got   # 256 x 12 stages do not fit
    assert len(got) == len(built)   # distinct layers
    assert "skipped qwen3-30b-a3b:16 {'gu_tile_n': 256, 'gu_stages': 12}" in capsys.readouterr().out


def test_a_combination_the_config_model_refuses_is_skipped_not_fatal(built, capsys):
    # weight_prefetch 4 needs pdl: the pdl=0 copy is refused by MoEConfig, the pdl=1 copy runs
    _run(["--pdl", "4", "--vary", "pdl=0,1"])
    assert [(c.pdl, c.weight_prefetch) for c, _ in built] == [(True, 4)]
    assert "pdl=False" in capsys.readouterr().out


@pytest.mark.parametrize("spec", ["nosuch=1", "gu_tile_n=", "pdl=2", "gu_tile_n=x"])
def test_bad_vary_specs_are_refused(spec, capsys):
    with pytest.raises(SystemExit) as exc:
        profile_moe.main(["--out", "/tmp/unused", "--cells", "qwen3-30b-a3b:16", "--vary", spec])
    assert exc.value.code == 2 and f"--vary {spec!r}" in capsys.readouterr().err


def test_a_lookahead_takes_the_static_walk(built):
    """Review (session 46): the heuristic's small-T layers walk dynamically, which a work lookahead cannot (the
    first unit is known only after the ticket); ``--lookahead 0,1`` profiles both, the lookahead one static."""
    _run(["--lookahead", "0,1"])
    assert sorted((c.work_lookahead, c.dynamic_walk) for c, _ in built) == [(0, True), (1, False)]


@pytest.mark.parametrize("values", ["2", "x", ","])
def test_bad_lookahead_values_are_refused(values, capsys):
    with pytest.raises(SystemExit) as exc:
        profile_moe.main(["--out", "/tmp/unused", "--cells", "qwen3-30b-a3b:16", "--lookahead", values])
    assert exc.value.code == 2 and "--lookahead" in capsys.readouterr().err
