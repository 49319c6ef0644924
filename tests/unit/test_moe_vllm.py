"""bench/moe_vllm.py without a GPU: its arguments, its refusal without the (git-ignored) vLLM baseline folder, the
alignment comparison (with torch on the CPU when installed), and the baseline's align kernels under Triton's CPU
interpreter where this checkout has the folder, torch and triton (never in CI: the folder is not committed)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import moe_vllm  # noqa: E402

from argus_cutlass.kernels.moe.problem import MoEProblem  # noqa: E402


def test_default_cells_are_the_twelve_bench_cells():
    args, cells = moe_vllm.parse_args([])
    assert (args.rounds, args.iters, args.out, args.vllm_dir, args.graph, args.heuristic) == (5, 20, None, None, 0, False)
    assert len(cells) == 12
    assert cells[0] == ("mixtral:16", MoEProblem.for_model("mixtral", 16))
    assert {p.tokens for _, p in cells} == {16, 256, 2048, 8192}
    assert {c.partition(":")[0] for c, _ in cells} == {"mixtral", "qwen3-30b-a3b", "deepseek-v2-lite"}


def test_options_parse():
    args, cells = moe_vllm.parse_args(["--cells", "qwen3-30b-a3b:256,e8k2h1024i512:16", "--rounds", "3",
                                       "--iters", "7", "--out", "t.md", "--vllm-dir", "/x", "--graph", "8",
                                       "--heuristic"])
    assert [p for _, p in cells] == [MoEProblem.for_model("qwen3-30b-a3b", 256), MoEProblem(16, 8, 2, 1024, 512)]
    assert (args.rounds, args.iters, args.out, args.vllm_dir, args.graph, args.heuristic) == (3, 7, "t.md", "/x", 8, True)
    # the table's header line and its separator line have the same 19 columns (the copy-floor columns of session 47)
    assert moe_vllm.HEAD.splitlines()[0].count("|") - 1 == moe_vllm.HEAD.splitlines()[1].count("|") - 1 == 19


@pytest.mark.parametrize("argv, needle", [(["--cells", "qwen3:16"], "cell"), (["--cells", "mixtral"], "cell"),
                                          (["--rounds", "0"], "--rounds"), (["--cells", ","], "no cell"),
                                          (["--graph", "-1"], "--graph")])
def test_bad_arguments_named(argv, needle, capsys):
    with pytest.raises(SystemExit):
        moe_vllm.parse_args(argv)
    assert needle in capsys.readouterr().err


def _baseline(folder: Path, files=moe_vllm.BASELINE_FILES) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for f in files:
        (folder / f).write_text("")
    return folder


def test_baseline_folder_choice(tmp_path, monkeypatch):
    a, b, c = (_baseline(tmp_path / n) for n in "abc")
    monkeypatch.setattr(moe_vllm, "DEFAULT_DIR", c)
    assert moe_vllm.baseline_dir(str(a), {moe_vllm.ENV_DIR: str(b)}) == a.resolve()
    assert moe_vllm.baseline_dir(None, {moe_vllm.ENV_DIR: str(b)}) == b.resolve()
    assert moe_vllm.baseline_dir(None, {}) == c.resolve()


def test_absent_or_incomplete_baseline_refused_by_name(tmp_path, monkeypatch):
    monkeypatch.setattr(moe_vllm, "DEFAULT_DIR", tmp_path / "nowhere")
    with pytest.raises(moe_vllm.BaselineMissing, match=r"nowhere \(the default\) does not exist.*carry"):
        moe_vllm.baseline_dir(None, {})
    with pytest.raises(moe_vllm.BaselineMissing, match=r"ARGUS_VLLM_MOE_DIR"):
        moe_vllm.baseline_dir(None, {moe_vllm.ENV_DIR: str(tmp_path / "env")})
    part = _baseline(tmp_path / "part", ("__init__.py",))
    with pytest.raises(moe_vllm.BaselineMissing, match="lacks fused_moe.py, moe_align_block_size.py"):
        moe_vllm.baseline_dir(str(part))


def test_main_refuses_without_the_baseline_before_needing_torch(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)   # `import torch` fails: the refusal must come first
    monkeypatch.delenv(moe_vllm.ENV_DIR, raising=False)
    assert moe_vllm.main(["--cells", "mixtral:16", "--vllm-dir", str(tmp_path / "absent")]) == 2
    err = capsys.readouterr().err
    assert "vLLM baseline folder" in err and "absent" in err and "git-ignored" in err and "needs torch" not in err


def test_same_alignment_ignores_order_within_an_expert():
    np = pytest.importorskip("numpy")   # same_alignment reads torch tensors on the device, numpy arrays here
    t = np.array
    # 2 experts, blocks of 4, 5 routed ids (sentinel 5): expert 0 gets ids 0, 2, 4; expert 1 ids 1, 3
    a = (t([0, 2, 4, 5, 1, 3, 5, 5, 5, 5]), t([0, 1, 0]), t([8]))
    b = (t([4, 0, 5, 2, 3, 5, 1, 5, 7, 7]), t([0, 1, -1]), t([8]))
    assert moe_vllm.same_alignment(a, b, 4)
    assert not moe_vllm.same_alignment(a, (b[0], t([1, 0, 0]), b[2]), 4)
    assert not moe_vllm.same_alignment(a, (t([0, 2, 1, 5, 4, 3, 5, 5, 5, 5]), b[1], b[2]), 4)
    assert not moe_vllm.same_alignment(a, (b[0], b[1], t([12])), 4)
    # an expert over two blocks (expert 0: ids 0 1 2 4 6, sentinel 8): the atomics' order splits the ids over
    # its blocks differently from a serial scan -- the same alignment (session 46: flagged per block before)
    c = (t([0, 1, 2, 4, 6, 8, 8, 8, 3, 5, 7, 8]), t([0, 0, 1]), t([12]))
    d = (t([6, 2, 0, 8, 4, 1, 8, 8, 7, 3, 5, 8]), t([0, 0, 1]), t([12]))
    assert moe_vllm.same_alignment(c, d, 4)
    # ... but an id moved to the other expert is not
    e = (t([6, 2, 0, 8, 4, 1, 8, 3, 7, 8, 5, 8]), t([0, 0, 1]), t([12]))
    assert not moe_vllm.same_alignment(c, e, 4)


def test_baseline_align_under_the_triton_interpreter():
    """The baseline's align kernels against a loop over the documented outputs, on the CPU (selftest_cpu.py's
    check_align): only where this checkout has the git-ignored folder, torch and triton (numpy < 2.3: the
    interpreter's scalar loops break on newer numpy)."""
    folder = moe_vllm.DEFAULT_DIR
    if not (folder / "selftest_cpu.py").is_file():
        pytest.skip("no .baselines/vllm_moe in this checkout (git-ignored: never in CI)")
    for mod in ("torch", "triton", "numpy"):
        if importlib.util.find_spec(mod) is None:
            pytest.skip(f"{mod} is not installed")
    import numpy

    if tuple(int(v) for v in numpy.__version__.split(".")[:2]) >= (2, 3):
        pytest.skip("numpy >= 2.3 breaks Triton's interpreter")
    code = ("import sys; sys.argv = ['x']; sys.path.insert(0, sys.argv[0]); import runpy; "
            f"g = runpy.run_path({str(folder / 'selftest_cpu.py')!r}); g['check_align'](); g['check_configs']()")
    res = subprocess.run([sys.executable, "-c", code], env={**os.environ, "TRITON_INTERPRET": "1"},
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "align ok" in res.stdout and "configs ok" in res.stdout


def test_table_written_after_each_cell_says_when_partial():
    """moe_vllm rewrites its --out table after every cell (a run cut by its time limit keeps what it finished): the
    partial table says so on its first line, the final one does not; the timing line names the method."""
    import argparse

    part = moe_vllm._table(argparse.Namespace(graph=8), 3.0e12, ["qwen3-30b-a3b:16 vllm"], ["| a |"], partial=True)
    done = moe_vllm._table(argparse.Namespace(graph=0), 4.3e12, [], ["| a |", "| b |"])
    assert part.startswith("(partial:") and "CUDA graphs of 8" in part and "qwen3-30b-a3b:16 vllm" in part
    assert not done.startswith("(partial") and "per call, L2 flushed" in done and "4.30 TB/s" in done
    assert done.rstrip().splitlines()[-2:] == ["| a |", "| b |"] and moe_vllm.HEAD in done
