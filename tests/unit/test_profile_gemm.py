"""bench/profile_gemm.py: kernel selection over the declared sub-space and its refusals (no GPU)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from argus_cutlass.kernels.gemm.config import GemmConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import profile_gemm  # noqa: E402

from argus_cutlass.generate import kernel_name  # noqa: E402
from argus_cutlass.kernels.gemm.space import declared_subspace  # noqa: E402


def test_selectors_pick_the_decode_split_family():
    names = [kernel_name(c) for c in declared_subspace()]
    got = profile_gemm.select(names, "128x16x64+splitk2,128x16x64+splitk4,128x16x64+streamk")
    assert len(got) == 3 and all("128x16x64" in g for g in got)
    assert {("splitk2" in g, "splitk4" in g, "streamk" in g) for g in got} == {(1, 0, 0), (0, 1, 0), (0, 0, 1)}
    assert got == [n for n in names if n in got]   # the sub-space's order, no duplicates
    assert profile_gemm.select(names, "splitk2,128x16x64+splitk2") == profile_gemm.select(names, "splitk2")


@pytest.mark.parametrize("argv,msg", [(["--shape", "1x4096", "--kernels", "x"], "expected MxNxK"),
                                      (["--shape", "0x8x8", "--kernels", "x"], "sizes must be >= 1"),
                                      (["--shape", "1x4096x4096", "--kernels", "nosuch"], "'nosuch' matches no kernel"),
                                      (["--shape", "1x4096x4096", "--kernels", "swapab+!"], "has an empty part"),
                                      (["--shape", "1x4096x4096", "--kernels", "pp++as2"], "has an empty part")])
def test_bad_arguments_are_named(argv, msg, capsys):
    with pytest.raises(SystemExit) as exc:
        profile_gemm.main(argv)
    assert exc.value.code == 2 and msg in capsys.readouterr().err


def test_also_adds_verified_copies_and_names_the_refused(monkeypatch, capsys):
    import agent_eval

    built = []

    def fake_build(configs, workers, log, notes):
        built.extend(configs)
        return {}

    monkeypatch.setattr(agent_eval, "_build", fake_build)
    rc = profile_gemm.main(["--shape", "1x4096x14336", "--kernels", "64x16x64_c1x1_s12_pp+!_as",
                            "--also", "stages=22", "--also", "stages=24"])
    assert rc == 1   # nothing built (the fake), said so
    assert [c.stages for c in built] == [12, 22]   # 24 stages do not fit: refused, not built
    out = capsys.readouterr().out
    assert "s24_pp" in out and "smem.capacity" in out and "no kernel built" in out
    # a copy the DSL itself refuses (nothing to reduce on a persistent kernel) is named, not a crash
    built.clear()
    assert profile_gemm.main(["--shape", "1x4096x14336", "--kernels", "64x16x64_c1x1_s12_pp+!_as",
                              "--also", "reduction=nondeterministic"]) == 1
    out = capsys.readouterr().out
    assert [c.reduction for c in built] == ["deterministic"]
    assert "_nd_swapab: refused by the verifier" in out and "only stream-K and split-K reduce" in out
    with pytest.raises(SystemExit):
        profile_gemm.main(["--shape", "1x4096x14336", "--kernels", "64x16x64_c1x1_s12_pp+!_as", "--also", "stagez=3"])


def test_report_after_timing_names_floor_and_cublas(monkeypatch, capsys):
    """The report after the timed rounds (stubbed): floor from B's bytes (N x K bf16 at 4.3 TB/s), each kernel's
    ratio to it and to cuBLAS, sorted fastest first."""
    import agent_eval

    monkeypatch.setattr(agent_eval, "_build", lambda configs, workers, log, notes:
                        {kernel_name(c): (c, None, None) for c in configs})
    monkeypatch.setattr(agent_eval, "measure_shape", lambda libs, shape, *a, **kw: {
        "cublas_ms": 0.040, "kernels": {nm: (0.030 if i else 0.035) for i, nm in enumerate(libs)}})
    rc = profile_gemm.main(["--shape", "1x4096x14336", "--kernels", "64x16x64_c1x1_s12_pp+!_as", "--also", "stages=22"])
    out = capsys.readouterr().out
    assert rc == 0
    floor_us = 4096 * 14336 * 2 / profile_gemm.HBM_BYTES_PER_S * 1e6
    assert f"weight-read floor {floor_us:.1f} us" in out and "cuBLAS 40.0 us" in out
    lines = [ln for ln in out.splitlines() if ln.startswith("  argus_gemm")]
    assert len(lines) == 2 and "s22_pp" in lines[0] and "30.0 us" in lines[0] and "cuBLAS / ours 1.333" in lines[0]


def test_best_of_takes_the_tables_fastest_kernel_by_name_without_fingerprint(monkeypatch, tmp_path, capsys):
    """--best-of TABLE: the row's fastest kernel, matched without its fingerprint (a table from older code still
    names it); a missing row, file or kernel is an error naming it. --graph prints the graph-replay timing after
    the per-launch one; the host's cost per call is printed beside each."""
    import json

    import agent_eval

    names = [kernel_name(c) for c in declared_subspace() if c.swap_ab][:2]
    stale = names[1].rsplit("_", 1)[0] + "_0badf00d"   # the same kernel under another fingerprint
    t = tmp_path / "t.json"
    t.write_text(json.dumps({"shapes": {"1x4096x14336": {"kernels": {names[0]: 0.040, stale: 0.035, "x": None}}}}))
    got = []

    def fake_measure(libs, shape, *a, graph=False, host_calls=0):
        got.append((sorted(libs), graph, host_calls))
        return {"cublas_ms": 0.040, "kernels": {nm: 0.030 if graph else 0.036 for nm in libs},
                **({"host_us": {"cublas": 15.0, **{nm: 12.5 for nm in libs}}} if host_calls else {})}

    monkeypatch.setattr(agent_eval, "_build", lambda configs, workers, log, notes:
                        {kernel_name(c): (c, None, None) for c in configs})
    monkeypatch.setattr(agent_eval, "measure_shape", fake_measure)
    assert profile_gemm.main(["--shape", "1x4096x14336", "--best-of", str(t), "--graph"]) == 0
    assert got == [([names[1]], False, 100), ([names[1]], True, 0)]
    out = capsys.readouterr().out
    assert "host 15.0 us per call" in out and "36.0 us" in out and "host 12.5 us per call" in out
    assert "graph replay: 1x4096x14336" in out and "30.0 us" in out
    for argv, msg in ((["--shape", "8x4096x14336", "--best-of", str(t)], "no timed kernel on row 8x4096x14336"),
                      (["--shape", "1x4096x14336", "--best-of", str(tmp_path / "none.json")], "not a readable sweep table"),
                      (["--shape", "1x4096x14336"], "give --kernels, --best-of or both")):
        with pytest.raises(SystemExit):
            profile_gemm.main(argv)
        assert msg in capsys.readouterr().err
    t.write_text(json.dumps({"shapes": {"1x4096x14336": {"kernels": {"argus_gemm_nosuch_12345678": 0.01}}}}))
    with pytest.raises(SystemExit):
        profile_gemm.main(["--shape", "1x4096x14336", "--best-of", str(t)])
    assert "argus_gemm_nosuch_12345678 is neither in the declared sub-space" in capsys.readouterr().err
    # a best kernel outside today's declared sub-space (an older sweep's) is rebuilt from the table's kernel_configs
    old = GemmConfig(tile_m=64, tile_n=16, stages=12, schedule="pingpong", epi_m=64, epi_n=16)
    assert kernel_name(old) not in {kernel_name(c) for c in declared_subspace()}
    t.write_text(json.dumps({"kernel_configs": {"argus_gemm_old_12345678": old.model_dump()},
                             "shapes": {"1x4096x14336": {"kernels": {"argus_gemm_old_12345678": 0.01}}}}))
    got.clear()
    assert profile_gemm.main(["--shape", "1x4096x14336", "--best-of", str(t)]) == 0
    assert got == [([kernel_name(old)], False, 100)] and "rebuilt from its kernel_configs" in capsys.readouterr().out
