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


# ---- --bench-out DIR (bench/conftest.py) ---------------------------------------------------------

_FAKE_FIXTURE_SUITE = '''import os, shutil, pytest
from plots import plot_after_bench

@pytest.fixture(scope="module", autouse=True)
def _table():  # the GEMM suite's style: a module fixture writes the table at teardown
    yield
    path = os.environ.get("ARGUS_BENCH_TABLE")
    if path:
        shutil.copy({src!r}, path)
        plot_after_bench(path)

def test_cell():
    pass
'''

_FAKE_TEARDOWN_SUITE = '''import os, shutil
from plots import plot_after_bench

def teardown_module(module):  # the attention and MoE suites' style
    path = os.environ.get("ARGUS_BENCH_TABLE")
    if path:
        shutil.copy({src!r}, path)
        plot_after_bench(path)

def test_cell():
    pass

def test_verify_table_goes_to_the_folder():
    assert os.environ.get("ARGUS_VERIFY_BENCH_TABLE") == os.environ.get("EXPECT_VERIFY_TABLE")
'''


def _fake_bench(tmp_path: Path) -> Path:
    import shutil

    bench = tmp_path / "bench"
    bench.mkdir()
    for name in ("conftest.py", "plots.py"):
        shutil.copy(ROOT / "bench" / name, bench / name)
    (bench / "test_a_gemm_bench.py").write_text(_FAKE_FIXTURE_SUITE.format(src=str(DATA / "bench_tuned_table.md")))
    (bench / "test_b_moe_bench.py").write_text(_FAKE_TEARDOWN_SUITE.format(src=str(DATA / "moe_bench_h200_s16.md")))
    return bench


def _pytest(args: list[str], cwd: Path, **env: str):
    import os
    import subprocess
    import sys

    full = {k: v for k, v in os.environ.items() if k not in ("ARGUS_BENCH_TABLE", "ARGUS_VERIFY_BENCH_TABLE")}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=300, check=False, env={**full, **env})


def test_bench_out_writes_each_suites_table_and_plots(tmp_path):
    """``pytest bench/ --bench-out DIR``: each suite's table lands in ``DIR/<suite>.md`` (not one shared
    file), its two plots beside it, whether the suite writes from a module fixture or teardown_module."""
    pytest.importorskip("matplotlib")
    bench = _fake_bench(tmp_path)
    out = tmp_path / "results" / "new"  # created by the option
    proc = _pytest([str(bench), "--bench-out", str(out)], tmp_path, EXPECT_VERIFY_TABLE=str(out / "verify_bench.md"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (out / "a_gemm_bench.md").read_text() == (DATA / "bench_tuned_table.md").read_text()
    assert (out / "b_moe_bench.md").read_text() == (DATA / "moe_bench_h200_s16.md").read_text()
    for suite in ("a_gemm_bench", "b_moe_bench"):
        for plot in ("ratio", "roofline"):
            png = out / f"{suite}_{plot}.png"
            assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
    assert f"wrote {out / 'a_gemm_bench_ratio.png'}" in proc.stdout


def test_bench_table_env_var_still_works_and_a_bad_folder_is_named(tmp_path):
    pytest.importorskip("matplotlib")
    bench = _fake_bench(tmp_path)
    table = tmp_path / "gemm.md"
    proc = _pytest([str(bench / "test_a_gemm_bench.py")], tmp_path, ARGUS_BENCH_TABLE=str(table))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert table.read_text() == (DATA / "bench_tuned_table.md").read_text()
    assert (tmp_path / "gemm_ratio.png").is_file() and (tmp_path / "gemm_roofline.png").is_file()
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    proc = _pytest([str(bench), "--bench-out", str(blocker / "sub")], tmp_path)
    assert proc.returncode == 4 and f"--bench-out {blocker / 'sub'}: not a writable folder" in proc.stderr, proc.stderr


def _bench_module(name: str, monkeypatch):
    """Import a GPU bench module on the CPU (it needs torch to import; its tests are not run here)."""
    pytest.importorskip("torch")
    pytest.importorskip("matplotlib")
    monkeypatch.syspath_prepend(str(ROOT / "bench"))  # the suites import plots.py as pytest does
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_gpu_suites_tables_are_plotted(tmp_path, monkeypatch):
    """The three GPU suites' own table writers, fed rows of the shape their tests record: each writes the
    table named by ARGUS_BENCH_TABLE and both plots beside it (bench/plots.py recognises every header)."""
    plots = _plots()
    gemm = _bench_module("test_gemm_bench", monkeypatch)
    monkeypatch.setattr(gemm, "RESULTS", [
        {"shape": (4096, 4096, 4096), "kernel": "k1", "tflops": 700.0, "cublas_tflops": 650.0, "ratio": 1.077,
         "ms": 0.196, "ms_spread": 0.001, "weight_floor_ms": 0.0078},
        {"shape": (16, 8192, 8192), "kernel": "k2", "tflops": 60.0, "cublas_tflops": 50.0, "ratio": 1.2,
         "ms": 0.036, "ms_spread": 0.001, "weight_floor_ms": 0.031}])
    attn = _bench_module("test_attention_bench", monkeypatch)
    monkeypatch.setattr(attn, "RESULTS", [
        {"head_dim": 128, "seqlen": s, "causal": c, "ms": 1.0, "tflops": 500.0, "cudnn_ms": 1.1,
         "cudnn_tflops": 450.0, "speedup_vs_cudnn": 1.1} for s in (512, 8192) for c in (False, True)])
    moe = _bench_module("test_moe_bench", monkeypatch)
    rows = [ln for ln in (DATA / "moe_bench_h200_s17.md").read_text().splitlines()[2:] if ln.startswith("|")]
    monkeypatch.setattr(moe, "ROWS", rows)
    for name, write, kind in (("gemm_bench", gemm.write_table, "gemm"),
                              ("attention_bench", lambda: attn.teardown_module(attn), "attention"),
                              ("moe_bench", lambda: moe.teardown_module(moe), "moe")):
        path = tmp_path / f"{name}.md"
        monkeypatch.setenv("ARGUS_BENCH_TABLE", str(path))
        write()
        assert plots.kind_of(plots.read_table(path)) == kind
        assert (tmp_path / f"{name}_ratio.png").is_file() and (tmp_path / f"{name}_roofline.png").is_file()
