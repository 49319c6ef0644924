"""Options every command shares, checked where they are parsed (CPU only, before any build or GPU stage):
``--out`` (an empty path is not the current folder; a file is not a folder), ``--seed`` (0 .. 2**64-1)
and ``tune gemm``'s ``--workers`` (at least 1); and ``tune gemm`` on a shape ``gemm`` runs through
aligned staging. Each error names the option and the rule, exit code 2, no traceback.
"""

from __future__ import annotations

import argparse

import pytest

from argus_cutlass.cli import main
from argus_cutlass.errors import ProblemError
from argus_cutlass.kernels.gemm.config import GemmConfig

GEMM = ["gemm", "--m", "128", "--n", "128", "--k", "128"]
ATTENTION = ["attention", "--batch", "1", "--heads", "1", "--seqlen-q", "128", "--head-dim", "64"]
MOE = ["moe", "--tokens", "16", "--experts", "4", "--topk", "2", "--hidden", "256", "--ffn", "256"]
TUNE_GEMM = ["tune", "gemm", "--m", "128", "--n", "128", "--k", "128"]
TUNE_ATTENTION = ["tune", "attention", "--batch", "1", "--heads", "1", "--seqlen-q", "128", "--head-dim", "64"]
TUNE_MOE = ["tune", "moe", "--tokens", "16", "--experts", "4", "--topk", "2", "--hidden", "256", "--ffn", "256"]
TUNE_SHAPES = ["tune", "--shapes", "s.csv"]
WITH_OUT = [GEMM, ATTENTION, MOE, TUNE_GEMM, TUNE_ATTENTION, TUNE_MOE, TUNE_SHAPES]
WITH_SEED = [GEMM, ATTENTION, MOE, TUNE_GEMM, TUNE_ATTENTION, TUNE_MOE]


@pytest.fixture
def no_gpu_lookup(monkeypatch):
    """Fail the test if a command looks for a GPU: the input checks must come first."""
    import argus_cutlass.runtime.cuda as cuda

    def boom():
        raise AssertionError("the GPU was looked for before the input was checked")

    monkeypatch.setattr(cuda, "gpu_available", boom)


def _main(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.csv").write_text("m,n,k\n128,256,512\n")
    before = sorted(p.name for p in tmp_path.iterdir())
    rc = main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert sorted(p.name for p in tmp_path.iterdir()) == before, "a refused command wrote into the folder"
    return rc, err


# ---- --out ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("blank", ["", "  "])
@pytest.mark.parametrize("argv", WITH_OUT, ids=lambda a: " ".join(a[:2]))
def test_an_empty_out_is_refused_not_taken_as_the_current_folder(argv, blank, tmp_path, monkeypatch, capsys,
                                                                 no_gpu_lookup):
    rc, err = _main([*argv, "--out", blank], tmp_path, monkeypatch, capsys)
    assert rc == 2
    assert err.startswith("argus-cutlass: error: [cli.out] --out") and "empty or blank path" in err, err
    assert "hint: name a folder, e.g. --out out" in err


@pytest.mark.parametrize("argv", WITH_OUT, ids=lambda a: " ".join(a[:2]))
def test_an_out_that_is_a_file_is_refused_before_any_work(argv, tmp_path, monkeypatch, capsys, no_gpu_lookup):
    (tmp_path / "afile").write_text("not a folder")
    rc, err = _main([*argv, "--out", "afile"], tmp_path, monkeypatch, capsys)
    assert rc == 2 and "[cli.out] --out 'afile' cannot be used as the output folder: it is a file" in err, err
    rc, err = _main([*argv, "--out", "afile/sub"], tmp_path, monkeypatch, capsys)
    assert rc == 2 and "lies under 'afile', which is a file" in err, err


def test_the_python_api_refuses_an_empty_out_dir(tmp_path, monkeypatch):
    """The same rule where the API takes the folder: generate.run, tune_shapes, settings.output_dir."""
    from argus_cutlass.agent.shapes import GemmShape
    from argus_cutlass.agent.tune_many import tune_shapes
    from argus_cutlass.generate import Options, run
    from argus_cutlass.kernels.gemm.problem import GemmProblem
    from argus_cutlass.settings import output_dir

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ProblemError, match=r"\[cli.out\] out_dir '': an empty or blank path"):
        run(GemmProblem(128, 128, 128), options=Options(compile=False), out_dir="")
    with pytest.raises(ProblemError, match=r"\[cli.out\] out_dir '': an empty or blank path"):
        tune_shapes([GemmShape(128, 256, 512)], budget=1, out_dir="", backend="local", measure=lambda *a: 1.0)
    with pytest.raises(ProblemError, match=r"\[cli.out\] --out ''"):
        output_dir("")
    assert list(tmp_path.iterdir()) == []


# ---- --seed --------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", ["-1", str(2**64)])
@pytest.mark.parametrize("argv", WITH_SEED, ids=lambda a: " ".join(a[:2]))
def test_a_seed_outside_0_to_2_64_is_refused_before_any_build(argv, seed, tmp_path, monkeypatch, capsys,
                                                            no_gpu_lookup):
    rc, err = _main([*argv, "--seed", seed, "--out", "o"], tmp_path, monkeypatch, capsys)
    assert rc == 2 and err.startswith(f"argus-cutlass: error: [cli.seed] --seed {seed}: a seed must be"), err


def test_options_check_the_seed_and_the_workers():
    from argus_cutlass.generate import Options

    assert Options(seed=2**64 - 1).seed == 2**64 - 1 and Options(workers=1).workers == 1
    for seed in (-1, 2**64, 1.5, True):
        with pytest.raises(ProblemError, match=r"\[cli.seed\] Options.seed"):
            Options(seed=seed)
    for workers in (0, -3):
        with pytest.raises(ProblemError, match=r"\[tune.workers\] Options.workers"):
            Options(workers=workers)


# ---- tune gemm ------------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", ["0", "-2"])
def test_tune_gemm_refuses_fewer_than_one_worker_before_the_gpu(workers, tmp_path, monkeypatch, capsys,
                                                                no_gpu_lookup):
    rc, err = _main([*TUNE_GEMM, "--workers", workers, "--out", "o"], tmp_path, monkeypatch, capsys)
    assert rc == 2 and f"[tune.workers] --workers {workers}: need at least 1 compile process" in err, err


def _tune_args(**kw):
    base = dict(m=128, n=128, k=128, dtype="bf16", out_dtype=None, layout="tn", budget=4, policy="default",
                seed=0, base_url=None, model=None, api_key=None, workers=None, out="out")
    base.update(kw)
    return argparse.Namespace(**base)


@pytest.mark.parametrize("m,n,k,layout,staged", [(300, 4096, 4096, "nt", "A"), (4096, 33, 4096, "tn", "D")])
def test_tune_gemm_takes_what_gemm_runs_through_aligned_staging(m, n, k, layout, staged, tmp_path, monkeypatch,
                                                                capsys):
    """A shape that breaks only TMA's 16-byte rules is tuned through aligned staging, as `gemm` runs it: the
    input checks pass and the command goes on to look for the GPU (none here: device.none, exit 2)."""
    import argus_cutlass.runtime.cuda as cuda
    from argus_cutlass.agent.tune import run_tune, validate_inputs

    problem = validate_inputs(_tune_args(m=m, n=n, k=k, layout=layout, out=str(tmp_path / "o")))
    assert [s.name for s in problem.staging()] == [staged]
    monkeypatch.setattr(cuda, "gpu_available", lambda: cuda.GpuAvailability(False, "no driver (test)"))
    assert run_tune(_tune_args(m=m, n=n, k=k, layout=layout, out=str(tmp_path / "o"))) == 2
    assert "[device.none]" in capsys.readouterr().err


def test_a_tuning_episode_on_a_staged_shape_writes_a_staged_kernel(tmp_path):
    """The episode (policy, verifier, best .cu) runs on a staged problem; measurements simulated."""
    from argus_cutlass.agent.costmodel import predict_ms
    from argus_cutlass.agent.planner import DefaultPolicy, Measurement, Problem
    from argus_cutlass.agent.tune import tune

    p = Problem(300, 512, 512, layout="nt")

    def evaluate(cfgs):
        return [Measurement("ok", predict_ms(c, p.m, p.n, p.k)) for c in cfgs]

    res = tune(p, DefaultPolicy(seed=0), evaluate, tmp_path, budget=2, batch=2, quiet=True)
    assert res.best is not None
    cus = [x.name for x in tmp_path.glob("*.cu")]
    assert len(cus) == 1 and "_stgA_" in cus[0], cus


def test_a_staged_shape_gets_the_cost_models_candidate_that_gemm_runs_there(monkeypatch):
    """``gemm`` without a tuned entry runs the cost model's first choice on the aligned-staging path too (session
    44; before, the heuristic's), so ``tune`` measures that choice there as on the direct path: the candidate is
    what ``lookup_config`` would run (review, session 35: an episode must not label another pick as gemm's)."""
    from argus_cutlass.agent.planner import Problem, untuned_choice
    from argus_cutlass.agent.store import ExperienceStore, lookup_config
    from argus_cutlass.kernels.gemm.space import GemmSpace

    monkeypatch.delenv("ARGUS_GEMM_UNTUNED", raising=False)
    staged, direct = Problem(300, 4096, 4096, layout="nt"), Problem(304, 4096, 4096, layout="nt")
    assert staged.validate_any().staging() and not direct.validate_any().staging()
    for p in (staged, direct):
        (choice,) = untuned_choice(p, GemmSpace("bf16", "bf16", "nt"))
        lk = lookup_config("gemm", p.m, p.n, p.k, layout="nt", gpu="no-such-gpu",
                           store=ExperienceStore("/nonexistent/x.json"))
        assert lk.source == "costmodel" and lk.config == choice


def test_tune_gemm_still_refuses_what_no_path_runs(tmp_path):
    from argus_cutlass.agent.tune import validate_inputs

    with pytest.raises(ProblemError, match=r"\[problem.size\]"):
        validate_inputs(_tune_args(n=0, out=str(tmp_path)))
    with pytest.raises(ProblemError, match=r"\[problem.layout\]"):
        validate_inputs(_tune_args(layout="xx", out=str(tmp_path)))


def test_seed_and_workers_take_any_integer_type_but_a_bool():
    """``Options.seed`` / ``workers`` take numpy integers as before the range checks (review, session 35:
    ``isinstance(x, int)`` had refused ``numpy.int64``); a bool, a float or a string is refused."""
    import numpy as np

    from argus_cutlass.settings import check_seed, check_workers

    assert check_seed(np.int64(3)) == 3 and type(check_seed(np.uint64(2**64 - 1))) is int
    assert check_workers(np.int32(2)) == 2 and check_workers(None) is None
    for bad in (True, 1.5, "3", -1):
        with pytest.raises(ProblemError, match=r"\[cli.seed\]"):
            check_seed(bad)
    for bad in (False, 2.0, 0, np.int64(-2)):
        with pytest.raises(ProblemError, match=r"\[tune.workers\]"):
            check_workers(bad)


@pytest.mark.parametrize("workers", [0, -1, 1.5, True])
def test_build_entry_points_refuse_fewer_than_one_worker_before_any_work(workers, monkeypatch):
    """``workers=0`` is refused (it once meant the CPU count, silently) by every build entry point, naming
    the argument, before a program is verified or nvcc is looked for."""
    from argus_cutlass import api, generate
    from argus_cutlass.build import nvcc

    def no_work(*a, **k):
        raise AssertionError("work started before the workers check")

    monkeypatch.setattr(generate, "generate", no_work)
    monkeypatch.setattr(nvcc, "find_toolchain", no_work)
    with pytest.raises(ProblemError, match=r"\[build.workers\] max_workers .*need at least 1 compile process"):
        api.build_many([GemmConfig()], max_workers=workers)
    with pytest.raises(ProblemError, match=r"\[build.workers\] workers .*need at least 1 compile process"):
        generate.build_jobs([(GemmConfig(), None)], workers=workers)
    with pytest.raises(ProblemError, match=r"\[build.workers\] max_workers .*need at least 1 compile process"):
        nvcc.compile_many([("x", "k", "gemm")], max_workers=workers)


# ---- environment variables (argus_cutlass.settings) -----------------------------------------------


@pytest.mark.parametrize("var,value", [("ARGUS_NVCC_TIMEOUT", "abc"), ("ARGUS_NVCC_TIMEOUT", "nan"),
                                       ("ARGUS_NVCC_TIMEOUT", "-5"), ("ARGUS_NVCC_TIMEOUT", "0"),
                                       ("ARGUS_NVCC_TIMEOUT", "inf"), ("ARGUS_MUTANT_TIMEOUT", "x")])
def test_a_timeout_variable_that_is_not_positive_seconds_is_named(var, value, tmp_path, monkeypatch, capsys,
                                                                   no_gpu_lookup):
    """Review (adversarial user): ``abc`` was a ValueError traceback from settings() (ARGUS_MUTANT_TIMEOUT's too, on
    every command), ``nan`` one from inside subprocess, ``-5`` an nvcc "timeout" before nvcc ran."""
    monkeypatch.setenv(var, value)
    rc, err = _main([*GEMM, "--out", "o"], tmp_path, monkeypatch, capsys)
    assert rc == 2 and f"[settings.seconds] {var}={value!r} is not a positive, finite number of seconds" in err, err


@pytest.mark.parametrize("value,on", [("0", False), ("false", False), ("OFF", False), ("no", False), ("1", True),
                                      ("True", True), ("", True)])
def test_report_cache_takes_the_usual_on_off_spellings(value, on, monkeypatch):
    from argus_cutlass.settings import settings

    monkeypatch.setenv("ARGUS_REPORT_CACHE", value)
    assert settings().report_cache is on


def test_report_cache_refuses_a_value_that_is_neither_on_nor_off(tmp_path, monkeypatch, capsys, no_gpu_lookup):
    """``ARGUS_REPORT_CACHE=false`` was read as on (only ``0`` turned it off); an unknown value is named."""
    monkeypatch.setenv("ARGUS_REPORT_CACHE", "maybe")
    rc, err = _main([*GEMM, "--out", "o"], tmp_path, monkeypatch, capsys)
    assert rc == 2 and "[settings.flag] ARGUS_REPORT_CACHE='maybe' is neither on nor off" in err, err


def test_a_cache_dir_that_is_a_file_is_named_not_a_traceback(tmp_path, monkeypatch):
    """``ARGUS_CACHE_DIR=/etc/passwd`` was a NotADirectoryError traceback from the kernel cache's mkdir."""
    from argus_cutlass.build.cache import cache_root
    from argus_cutlass.errors import ToolchainError

    afile = tmp_path / "afile"
    afile.write_text("not a folder")
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(afile))
    with pytest.raises(ToolchainError) as info:
        cache_root()
    assert info.value.rule == "cache.dir" and f"ARGUS_CACHE_DIR={str(afile)!r}" in str(info.value)
    assert "Not a directory" in str(info.value) and "writable folder" in str(info.value)
