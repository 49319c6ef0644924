"""Issue 12's command line, benchmarks and packaging on the CPU: ``table``, dtype/layout spellings,
``verify`` ordering, compile progress and Ctrl-C, the bench skips, the ``llm`` extra, ``pip install .``."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from argus_cutlass.agent.store import shipped_entries
from argus_cutlass.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def empty_store(monkeypatch, tmp_path):
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))


# ---- table -------------------------------------------------------------------------------------


def test_table_lists_the_shipped_entries(capsys, empty_store):
    assert main(["table", "--kernel", "gemm"]) == 0
    out = capsys.readouterr().out
    n_gemm = sum(e["kernel"] == "gemm" for e in shipped_entries())
    assert n_gemm > 13 and out.startswith(f"gemm: {n_gemm} entries; key = gpu | kernel | dtype | out_dtype | layout | bucket")
    assert "[shipped] NVIDIA H200 | bf16 | bf16 | tn | m4096_n4096_k4096 (measured at 4096x4096x4096): 128x256x64" in out
    assert "cooperative cluster-K 8 (a cluster of 8 CTAs splits K)" in out   # how many ways its k loop is split
    assert "cuBLAS" in out and "attention" not in out
    assert main(["table", "--kernel", "moe"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("moe: 12 entries; key = gpu | kernel | dtype | shape | tokens")
    assert "[shipped] NVIDIA H200 | bf16 | e8k2h4096i14336 | t256: 128-row tiles" in out and "_grouped_mm" in out


def test_table_takes_what_gemm_runs_and_lists_the_nearest_first(capsys, empty_store):
    # a misaligned shape runs through aligned staging in `gemm`, so `table` explains it too
    assert main(["table", "--m", "300", "--n", "4096", "--k", "4096", "--layout", "nt", "--gpu", "NVIDIA H200"]) == 0
    assert "problem key  NVIDIA H200 | gemm | bf16 | bf16 | nt |" in capsys.readouterr().out
    # the list's first entry is the one the `why` line names as nearest
    assert main(["table", "--m", "16", "--n", "8192", "--k", "4096", "--gpu", "NVIDIA H200"]) == 0
    out = capsys.readouterr().out
    nearest = out.split("nearest: '")[1].split("'")[0].replace("|", " | ")
    first = out.split("no entry matches; the nearest")[1].splitlines()[1]
    assert first.startswith(f"  [shipped] {nearest} (measured at ") and ": missed bucket" in first


def test_table_json_is_machine_readable(capsys, empty_store):
    assert main(["table", "--kernel", "attention", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["entries"]
    assert rows and {r["kernel"] for r in rows} == {"attention"}
    assert set(rows[0]["key"]) == {"gpu", "kernel", "dtype", "head_dim", "mask", "lengths", "bucket"}


def test_table_explains_a_match_and_a_miss(capsys, empty_store):
    assert main(["table", "--m", "4000", "--n", "4096", "--k", "4096", "--gpu", "NVIDIA H200"]) == 0
    out = capsys.readouterr().out
    assert "problem key  NVIDIA H200 | gemm | bf16 | bf16 | tn | m4096_n4096_k4096" in out
    assert "would use    the shipped H200 table" in out and "matches [shipped] entry" in out
    # (nn: a layout the shipped table has no entry of; it holds tn and, since session 24, nt)
    assert main(["table", "--m", "256", "--n", "256", "--k", "256", "--layout", "NN", "--gpu", "NVIDIA H200"]) == 0
    out = capsys.readouterr().out
    assert "would use    the cost model's first choice (no usable tuned entry" in out and "no entry matches" in out
    assert "missed layout: tn != nn" in out and "bucket: " in out
    assert main(["table", "--batch", "2", "--heads", "16", "--seqlen-q", "2000", "--head-dim", "128", "--causal",
                 "--gpu", "NVIDIA H200"]) == 0
    out = capsys.readouterr().out
    assert "| d128 | causal | fixed | s2048" in out and "matches [shipped] entry" in out
    assert "(not used" not in out


@pytest.mark.parametrize("argv, words", [
    (["--m", "4", "--batch", "2"], ["--m describe a GEMM", "--batch an attention problem"]),
    (["--m", "4"], ["needs all of --m, --n and --k"]),
    (["--m", "64", "--n", "64", "--k", "64", "--dtype", "int8"], ["[problem.dtype]", "int8"]),
    (["--batch", "2", "--heads", "2"], ["needs --seqlen-q, --head-dim"]),
    (["--kernel", "moe", "--m", "64", "--n", "64", "--k", "64"], ["not --kernel moe"]),
])
def test_table_bad_input_names_it(capsys, empty_store, argv, words):
    assert main(["table", *argv]) == 2
    err = capsys.readouterr().err
    assert all(w in err for w in words), err
    assert "Traceback" not in err


# ---- spellings ---------------------------------------------------------------------------------


def test_layout_letters_and_dtype_aliases(capsys, monkeypatch, tmp_path):
    from argus_cutlass.errors import ToolchainError
    import argus_cutlass.build.toolchain as toolchain

    def no_nvcc():
        raise ToolchainError("toolchain.nvcc", "nvcc not found (test)")

    monkeypatch.setattr(toolchain, "find_nvcc", no_nvcc)
    rc = main(["gemm", "--m", "256", "--n", "256", "--k", "256", "--layout", "TN", "--dtype", "float16",
               "--out-dtype", "Float32", "--heuristic", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0 and "fp16->fp32 layout tn" in out
    from argus_cutlass.cli import dtype_arg

    assert [dtype_arg(x) for x in ("bfloat16", "BF16", "half", "fp16", "float32", "fp32")] == \
        ["bf16", "bf16", "fp16", "fp16", "fp32", "fp32"]


# ---- verify: violations first, proofs with --verbose ----------------------------------------


def test_verify_prints_proofs_only_with_verbose(capsys, tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"tile_m": 128, "tile_n": 128, "cluster_m": 1, "stages": 4}))
    assert main(["verify", str(cfg), "--no-smt"]) == 0
    out = capsys.readouterr().out
    assert "  ok " not in out and "proofs; --verbose lists them)" in out
    assert main(["verify", str(cfg), "--no-smt", "--verbose"]) == 0
    assert "  ok " in capsys.readouterr().out
    cfg.write_text(json.dumps({"tile_n": 264, "stages": 7}))
    assert main(["verify", str(cfg), "--no-smt"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert "REJECTED" in lines[0] and lines[1].startswith("[")  # the first violation right after the head


# ---- compile: Ctrl-C is not a compiler failure -----------------------------------------------


def test_nvcc_interrupted_by_ctrl_c_raises_keyboardinterrupt_and_caches_nothing(monkeypatch, tmp_path):
    from argus_cutlass.build import nvcc
    from argus_cutlass.build.toolchain import CutlassHeaders, Nvcc, Toolchain

    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))
    tc = Toolchain(Nvcc("/bin/true", (13, 0), "release 13.0"), CutlassHeaders(tmp_path, tmp_path, "4", "test"))

    def killed(cmd, timeout_s):
        return subprocess.CompletedProcess(cmd, 2, "", "nvcc error   : 'cudafe++' died due to signal 2 \n")

    monkeypatch.setattr(nvcc, "_run_nvcc", killed)
    with pytest.raises(KeyboardInterrupt):
        nvcc.compile_cu("int x;", "k_interrupted", "shared", toolchain=tc)
    assert not (tmp_path / "kernels" / "failed").exists()


def test_ctrl_c_during_a_compile_says_what_was_interrupted(capsys, monkeypatch, tmp_path):
    import argus_cutlass.generate as gen
    from argus_cutlass.build.toolchain import CutlassHeaders, Nvcc, Toolchain

    monkeypatch.setattr(gen, "_toolchain_or_skip", lambda r: Toolchain(Nvcc("nvcc", (13, 0), ""),
                                                                       CutlassHeaders(tmp_path, tmp_path, "4", "t")))

    def interrupted(kernel, toolchain=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(gen, "compile_kernel", interrupted)
    rc = main(["gemm", "--m", "256", "--n", "256", "--k", "256", "--heuristic", "--out", str(tmp_path)])
    captured = capsys.readouterr()
    assert rc == 130
    assert "interrupted (Ctrl-C) while compiling argus_gemm_sm90_" in captured.err
    assert "nothing was cached" in captured.err and "nvcc failed" not in captured.err
    assert "compiling argus_gemm" in captured.err  # the progress line came first (stderr is not a terminal)
    rc = main(["gemm", "--m", "256", "--n", "256", "--k", "256", "--heuristic", "--quiet", "--out", str(tmp_path)])
    captured = capsys.readouterr()
    assert rc == 130 and "30-60 s" not in captured.err


def test_no_compiling_line_on_a_cache_hit(capsys, monkeypatch, tmp_path):
    """The "compiling ... with nvcc" progress line is printed only when nvcc will run: a cache hit
    (``generate.kernel_cached``) loads the stored library without it."""
    import argus_cutlass.generate as gen
    from argus_cutlass.build.nvcc import Artifact
    from argus_cutlass.build.toolchain import CutlassHeaders, Nvcc, Toolchain

    monkeypatch.setattr(gen, "_toolchain_or_skip", lambda r: Toolchain(Nvcc("nvcc", (13, 0), ""),
                                                                       CutlassHeaders(tmp_path, tmp_path, "4", "t")))
    monkeypatch.setattr(gen, "_gpu_or_skip", lambda r: r.skipped.update(run="no GPU (this test)") or False)
    monkeypatch.setattr(gen, "compile_kernel", lambda kernel, toolchain=None: Artifact(
        tmp_path / "k.so", "", 0.0, True, kernel.name))
    for hit in (True, False):
        monkeypatch.setattr(gen, "kernel_cached", lambda kernel, toolchain=None, hit=hit: hit)
        rc = main(["gemm", "--m", "256", "--n", "256", "--k", "256", "--heuristic", "--out", str(tmp_path)])
        err = capsys.readouterr().err
        assert rc == 0 and ("compiling argus_gemm" in err) == (not hit), (hit, err)


@pytest.mark.parametrize("argv", [
    ["tune", "--quiet", "gemm", "--m", "256", "--n", "256", "--k", "256"],
    ["tune", "gemm", "--m", "256", "--n", "256", "--k", "256", "--quiet"],
    ["tune", "attention", "--batch", "1", "--heads", "2", "--seqlen-q", "256", "--head-dim", "128", "--quiet"],
    ["tune", "--quiet", "--shapes", "s.json"],
])
def test_tune_accepts_quiet_before_or_after_the_kernel(argv):
    from argus_cutlass.cli import build_parser

    assert build_parser().parse_args(argv).quiet is True
    assert build_parser().parse_args([a for a in argv if a != "--quiet"]).quiet is False


def test_tune_progress_lines_and_quiet(tmp_path, capsys, monkeypatch):
    """``tune gemm``'s per-candidate progress (a tqdm bar, or plain lines without tqdm) on stderr; none with quiet."""
    from argus_cutlass.agent.planner import DefaultPolicy, Measurement, Problem
    from argus_cutlass.agent.tune import tune

    monkeypatch.setitem(sys.modules, "tqdm", None)  # the plain-line fallback, whether or not tqdm is installed
    p = Problem(1024, 1024, 1024)

    def evaluate(cfgs):
        return [Measurement("ok", 1.0 + i) for i, _ in enumerate(cfgs)]

    tune(p, DefaultPolicy(seed=0), evaluate, tmp_path / "a", budget=3, batch=1)
    err = capsys.readouterr().err
    assert "[1/3]" in err and "[3/3]" in err, err
    tune(p, DefaultPolicy(seed=0), evaluate, tmp_path / "b", budget=3, batch=1, quiet=True)
    assert capsys.readouterr().err == ""


def test_tune_attention_says_it_compiles_unless_quiet(tmp_path, capsys, monkeypatch):
    import argus_cutlass.build.toolchain as toolchain
    import argus_cutlass.generate as gen

    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(toolchain, "find_nvcc", lambda: None)
    monkeypatch.setattr(gen, "run_many", lambda configs, problem, options: [gen.RunResult(problem, c) for c in configs])
    argv = ["tune", "attention", "--batch", "1", "--heads", "2", "--seqlen-q", "256", "--head-dim", "128",
            "--budget", "2", "--out", str(tmp_path)]
    main(argv)
    assert "compiling 2 candidates with nvcc" in capsys.readouterr().err
    main(argv + ["--quiet"])
    assert "compiling" not in capsys.readouterr().err


def test_ctrl_c_while_tuning_says_what_was_interrupted(capsys, monkeypatch, tmp_path):
    import argus_cutlass.agent.tune as agent_tune

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(agent_tune, "run_tune", interrupted)
    rc = main(["tune", "gemm", "--m", "256", "--n", "512", "--k", "128", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 130 and "interrupted (Ctrl-C) while tuning the GEMM M=256 N=512 K=128" in err, err
    assert "nothing recorded in the experience store" in err


# ---- benchmarks: skip before compiling -------------------------------------------------------


def _bench_conftest():
    spec = importlib.util.spec_from_file_location("bench_conftest", ROOT / "bench" / "conftest.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def test_bench_skip_reason_on_a_machine_without_gpu(monkeypatch):
    import argus_cutlass.runtime.cuda as cuda

    monkeypatch.setattr(cuda, "nvidia_driver_present", lambda: False)
    ok, why = cuda.gpu_available()
    if ok:
        pytest.skip("a GPU is usable here")
    assert "no NVIDIA GPU or driver" in why and "insufficient" not in why
    reason = _bench_conftest().hopper_missing()
    assert reason.startswith("needs a Hopper (sm_90) GPU: no NVIDIA GPU or driver")


def test_bench_gpu_items_skip_before_any_fixture_runs(tmp_path):
    """A gpu-marked benchmark whose module fixture would compile is skipped at collection: the fixture
    never runs, and the reason names the missing GPU."""
    from argus_cutlass.runtime.cuda import gpu_available

    if gpu_available():
        pytest.skip("a GPU is usable here")
    shutil.copy(ROOT / "bench" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_fake_bench.py").write_text(
        "import pytest\npytestmark = pytest.mark.gpu\n\n"
        "@pytest.fixture(scope='module')\ndef libraries(tmp_path_factory):\n"
        f"    open({str(tmp_path / 'COMPILED')!r}, 'w').close()\n\n"
        "def test_cell(libraries):\n    pass\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(tmp_path)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 skipped" in proc.stdout and "needs a Hopper (sm_90) GPU" in proc.stdout
    assert not (tmp_path / "COMPILED").exists()


# ---- packaging --------------------------------------------------------------------------------


def test_llm_policy_without_openai_says_which_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "openai", None)
    from argus_cutlass.agent.llm import LLMError, _openai

    with pytest.raises(LLMError) as info:
        _openai()
    assert info.value.rule == "llm.missing" and "pip install '.[llm]'" in str(info.value)
    text = (ROOT / "setup.py").read_text()
    assert '"llm": ["openai>=1.0"]' in text and "install_requires" in text
    core = text[text.index("install_requires"):text.index("extras_require")]
    assert "openai" not in core


def test_pip_install_leaves_no_build_artefacts(tmp_path):
    """``pip install .`` of a copy of the sources: the copy has no build/ and no *.egg-info afterwards."""
    src = tmp_path / "src"
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "setup.py", "pyproject.toml", "README.md", "argus_cutlass", "agent",
                            "templates", "invariants"], cwd=ROOT, capture_output=True, text=True, check=True)
    for rel in files.stdout.split():
        if (ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / rel, src / rel)
    before = {p.relative_to(src) for p in src.rglob("*")}
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(tmp_path / "site"),
                           str(src)], capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0 and ("Could not find a version" in proc.stderr or "No matching distribution" in proc.stderr):
        pytest.skip(f"the build backend cannot be installed here: {proc.stderr.strip()[-200:]}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    after = {p.relative_to(src) for p in src.rglob("*") if "__pycache__" not in p.parts}
    assert not [p for p in after - before if p.parts[0] == "build" or p.name.endswith(".egg-info")], after - before
    assert (tmp_path / "site" / "argus_cutlass" / "templates" / "headers" / "gemm.h.j2").is_file()
    assert (tmp_path / "site" / "argus_cutlass" / "templates" / "common" / "arch_guard.j2").is_file()


@pytest.mark.parametrize("gpu", ["NVIDIA H200", "NVIDIA H100 80GB HBM3"])
def test_table_marks_only_the_entry_measured_nearest_as_used(capsys, empty_store, gpu):
    """Review, session 21: a bucket of the shipped table holds entries of several measured shapes, often of
    one configuration (m8192_n8192_k8192: 8192^3 and 8192x5120x8192, the same kernel). ``table`` marked
    every entry with the chosen configuration as used; only the one the lookup took (measured nearest) is,
    and the why line names its shape on the same-architecture pass too."""
    assert main(["table", "--m", "8000", "--n", "5000", "--k", "8000", "--gpu", gpu]) == 0
    out = capsys.readouterr().out
    matches = [ln for ln in out.splitlines() if ln.startswith("  matches [shipped] entry")]
    used = [ln for ln in matches if "(not used" not in ln]
    assert len(matches) == 3 and len(used) == 1 and "measured at 8192x5120x8192:" in used[0], out
    assert "measured at 8192x5120x8192, the nearest shape of the bucket" in out
