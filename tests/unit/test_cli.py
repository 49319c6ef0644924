"""The main command, ``argus-cutlass gemm``: outputs, exit codes and bad-input messages.

Bad input must produce one clear message naming the input and the rule, on stderr, with
exit code 2 and no Python traceback. An ``unknown`` verification result blocks rendering
(exit 1, naming what was not proved) unless ``--allow-unknown``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from argus_cutlass.cli import main


def _run(args, tmp_path, env_extra=None):
    """Run the CLI in a subprocess (as a user would) and return (rc, stdout, stderr)."""
    import os

    env = dict(os.environ)
    env["ARGUS_CACHE_DIR"] = str(tmp_path / "cache")
    env.update(env_extra or {})
    proc = subprocess.run(
        [sys.executable, "-m", "argus_cutlass.cli", *args],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900,
    )
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.parametrize(
    "args,rule,needle",
    [
        (["--m", "0", "--n", "8", "--k", "16"], "problem.size", "M=0"),
        (["--m", "8", "--n", "-3", "--k", "16"], "problem.size", "N=-3"),
        (["--m", "8", "--n", "8", "--k", "16", "--dtype", "fp8"], "problem.dtype", "dtype='fp8'"),
        (["--m", "8", "--n", "8", "--k", "16", "--out-dtype", "int8"], "problem.dtype", "out_dtype='int8'"),
        (["--m", "8", "--n", "8", "--k", "16", "--layout", "xy"], "problem.layout", "'xy'"),
        # M=7 with column-major A and K=12 break only TMA's alignment rules: they run through aligned
        # staging now (tests/unit/test_staged_path.py), no longer refused
        (["--m", "8", "--n", "8", "--k", "16", "--alpha", "nan"], "problem.scalar", "--alpha=nan"),
        (["--m", "8", "--n", "8", "--k", "16", "--beta", "inf"], "problem.scalar", "--beta=inf"),
    ],
)
def test_bad_input_is_refused_with_rule_and_no_traceback(args, rule, needle, tmp_path, capsys):
    rc = main(["gemm", *args, "--out", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert rc == 2
    assert f"[{rule}]" in err and needle in err, err
    assert "Traceback" not in err + out
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_without_nvcc_writes_the_cu_and_json_and_exits_zero(tmp_path):
    rc, out, err = _run(
        ["gemm", "--m", "256", "--n", "512", "--k", "128", "--out", "out"], tmp_path,
        {"ARGUS_NVCC": str(tmp_path / "no-nvcc-here"), "CUDA_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert rc == 0, err
    assert "no nvcc" in out and "Traceback" not in out + err
    cu = list((tmp_path / "out").glob("*.cu"))
    js = list((tmp_path / "out").glob("*.json"))
    assert len(cu) == 1 and len(js) == 1 and cu[0].stem == js[0].stem
    record = json.loads(js[0].read_text())
    assert record["kernel"] == cu[0].stem and record["status"] == "rendered"
    assert record["verification"]["ok"] is True
    assert "skipped" in record["compile"]
    assert set(record["stage_seconds"]) >= {"build_program", "verify", "render"}
    source = cu[0].read_text()
    assert f'int {cu[0].stem}(' in source
    # the kernel is named by its program: the readable label and the program's hash
    assert cu[0].stem.startswith("argus_gemm_sm90_bf16_bf16_tn_") and cu[0].stem[-8:] in record["program"]["fingerprint"]
    assert record["program"]["fingerprint"][:16] in source


def test_verification_failure_exits_one_with_the_rule(tmp_path, capsys):
    cfg = tmp_path / "bad.json"
    cfg.write_text(json.dumps({"tile_n": 264, "stages": 7}))
    rc = main(["verify", str(cfg)])
    out, err = capsys.readouterr()
    assert rc == 1
    assert "smem.capacity" in out and "gmma.n" in out
    assert "Traceback" not in out + err


@pytest.mark.nvcc
def test_main_job_compiles_and_stops_cleanly_without_gpu(tmp_path):
    """End to end on a machine without a GPU: verify, render, compile; then a clear stop, exit 0."""
    from argus_cutlass.runtime.cuda import gpu_available

    if gpu_available():
        pytest.skip("a GPU is present: tests/gpu covers the run")
    rc, out, err = _run(["gemm", "--m", "4096", "--n", "4096", "--k", "4096", "--out", "out"], tmp_path)
    assert rc == 0, err
    assert "compiled" in out and "0 spill bytes" in out
    assert "no GPU" in out and "stopping after compile" in out
    record = json.loads(next((tmp_path / "out").glob("*.json")).read_text())
    assert record["compile"]["spill_bytes"] == 0
    assert record["compile"]["registers"] > 0
    assert "skipped" in record["run"]


def test_unusable_output_folder_is_a_user_error(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    rc = main(["gemm", "--m", "256", "--n", "256", "--k", "64", "--out", str(blocker / "out")])
    out, err = capsys.readouterr()
    assert rc == 2
    assert "[cli.out]" in err and "cannot be used as the output folder" in err
    assert "Traceback" not in out + err


def test_layout_error_states_the_blas_letters(capsys):
    assert main(["gemm", "--m", "8", "--n", "8", "--k", "16", "--layout", "xx"]) == 2
    err = capsys.readouterr().err
    assert "B 'n' = stored N x K (K-major), 't' = stored K x N (N-major)" in err


def test_verify_output_into_a_closed_pipe_is_not_a_traceback(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text('{"tile_n": 128, "cluster_m": 1, "stages": 6}')
    for extra in ([], ["--json"]):
        proc = subprocess.run(f"{sys.executable} -m argus_cutlass.cli verify {extra and extra[0] or ''} {cfg} | head -1",
                              shell=True, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stdout.strip()


def _unknown_report(program, **_):
    """A report with one undecided obligation and no violation (a stand-in verifier)."""
    from argus_cutlass.verify.report import Proof, Unknown, VerificationReport

    return VerificationReport(program.kernel_name(), (), (Proof("mma.k_agreement", "G1", "enum", "A.k == B.k"),),
                              (), 0.01, (), (Unknown("pipeline.parity", "G6", "consumer wait parity", "timeout", 5),))


def _no_nvcc(monkeypatch, tmp_path):
    monkeypatch.setenv("ARGUS_NVCC", str(tmp_path / "no-nvcc-here"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))


def test_unknown_blocks_rendering_unless_allowed(tmp_path, monkeypatch, capsys):
    import argus_cutlass.generate as gen

    _no_nvcc(monkeypatch, tmp_path)
    monkeypatch.setattr(gen, "verify", lambda program, **kw: _unknown_report(program))
    args = ["gemm", "--m", "256", "--n", "512", "--k", "128", "--heuristic"]
    rc = main([*args, "--out", str(tmp_path / "strict")])
    out, err = capsys.readouterr()
    assert rc == 1 and "Traceback" not in out + err
    assert "[verify.unknown]" in out and "G6 pipeline.parity: consumer wait parity (timeout)" in out
    assert not list((tmp_path / "strict").glob("*.cu"))  # not rendered
    record = json.loads(next((tmp_path / "strict").glob("*.json")).read_text())
    assert record["status"] == "unproved" and record["error"]["rule"] == "verify.unknown"

    rc = main([*args, "--allow-unknown", "--out", str(tmp_path / "allowed")])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "UNPROVED  G6 pipeline.parity" in out
    source = next((tmp_path / "allowed").glob("*.cu")).read_text()
    assert "NOT PROVED (allowed by --allow-unknown): G6 pipeline.parity: consumer wait parity (timeout)" in source


def _gap_report(program, *, decided: bool):
    """A report with no violation and no unknown whose pipeline.parity obligation is skipped (``decided``) or has
    no outcome at all (a verifier defect)."""
    from argus_cutlass.verify.report import Obligation, Proof, Skipped, VerificationReport

    skipped = (Skipped("pipeline.parity", "G6", "wait parity for all iteration counts (SMT)",
                       "SMT tier off (smt=False, --no-smt)"),) if decided else ()
    return VerificationReport(program.kernel_name(),
                              (Obligation("mma.k_agreement", "G1", "A.k == B.k"),
                               Obligation("pipeline.parity", "G6", "consumer waits (i/S)&1")),
                              (Proof("mma.k_agreement", "G1", "enum", "A.k == B.k"),), (), 0.01, skipped=skipped)


def test_undecided_blocks_rendering_and_skipped_does_not(tmp_path, monkeypatch, capsys):
    """An obligation with no outcome stops the run (verify.undecided, naming it); the same obligation skipped
    (the SMT tier off) renders, and the .cu header lists it as not checked."""
    import argus_cutlass.generate as gen

    _no_nvcc(monkeypatch, tmp_path)
    args = ["gemm", "--m", "256", "--n", "512", "--k", "128", "--heuristic"]
    monkeypatch.setattr(gen, "verify", lambda program, **kw: _gap_report(program, decided=False))
    rc = main([*args, "--out", str(tmp_path / "undecided")])
    out, err = capsys.readouterr()
    assert rc == 1 and "Traceback" not in out + err
    assert "[verify.undecided]" in out and "G6 pipeline.parity: consumer waits (i/S)&1 (undecided: " in out
    assert not list((tmp_path / "undecided").glob("*.cu"))
    record = json.loads(next((tmp_path / "undecided").glob("*.json")).read_text())
    assert record["status"] == "unproved" and record["error"]["rule"] == "verify.undecided"

    monkeypatch.setattr(gen, "verify", lambda program, **kw: _gap_report(program, decided=True))
    rc = main([*args, "--out", str(tmp_path / "skipped")])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "skipped   1 check(s) not run (SMT tier off (smt=False, --no-smt))" in out
    source = next((tmp_path / "skipped").glob("*.cu")).read_text()
    assert ("//   - SKIPPED (not checked): G6 pipeline.parity: wait parity for all iteration counts (SMT) "
            "(not checked: SMT tier off (smt=False, --no-smt))") in source
    assert "//   - G6 pipeline.parity" not in source


def test_program_is_built_for_the_problems_k(tmp_path, monkeypatch, capsys):
    """K beyond 2^24: the program (and so the proofs and the kernel's K check) is stated for it."""
    import argus_cutlass.generate as gen
    from argus_cutlass.verify.report import VerificationReport

    _no_nvcc(monkeypatch, tmp_path)
    seen = []

    def fake_verify(program, **_):
        seen.append(program.kloop.bound_bits)
        return VerificationReport(program.kernel_name())

    monkeypatch.setattr(gen, "verify", fake_verify)
    for k, bits in ((4096, 24), (2**24 + 8, 26)):
        out = tmp_path / str(k)
        assert main(["gemm", "--m", "256", "--n", "256", "--k", str(k), "--heuristic", "--out", str(out)]) == 0
        record = json.loads(next(out.glob("*.json")).read_text())
        assert record["program"]["k_bound_bits"] == bits == seen[-1]
        assert f"K >= 2^{bits}: outside the range the k-loop proofs hold for" in next(out.glob("*.cu")).read_text()
    capsys.readouterr()


_NO_NVCC = lambda tmp_path: {"ARGUS_NVCC": str(tmp_path / "no-nvcc-here"), "CUDA_HOME": str(tmp_path),  # noqa: E731
                             "PATH": "/usr/bin:/bin"}


def test_set_changes_the_chosen_configuration_and_is_verified(tmp_path):
    """``--set FIELD=VALUE`` changes the configuration the command chose; the changed layer is built, verified
    and printed like any other, and the record and the progress lines say what was set."""
    rc, out, err = _run(["moe", "--tokens", "16", "--experts", "8", "--topk", "2", "--hidden", "512", "--ffn", "256",
                         "--set", "row_bounded=false", "--set", "gu_stages=6", "--out", "out"], tmp_path,
                        _NO_NVCC(tmp_path))
    assert rc == 0, err
    assert "set       row_bounded=false, gu_stages=6 (--set)" in out
    record = json.loads(next((tmp_path / "out").glob("*.json")).read_text())
    assert record["config_overrides"] == {"row_bounded": False, "gu_stages": 6}
    assert record["config"]["row_bounded"] is False and record["config"]["gu_stages"] == 6
    assert record["verification"]["ok"] is True
    assert "_s6x8_" in record["kernel"] and "_rb" not in record["kernel"]


@pytest.mark.parametrize("family,args,needle", [
    ("moe", ["--tokens", "16", "--experts", "8", "--topk", "2", "--hidden", "512", "--ffn", "256"],
     "'no_field' is not a MoEConfig field"),
    ("gemm", ["--m", "128", "--n", "128", "--k", "128"], "stages='abc'"),
    ("gemm-pdl", ["--m", "128", "--n", "128", "--k", "128"], "pdl='maybe': Input should be a valid boolean"),
    ("attention", ["--batch", "1", "--heads", "8", "--seqlen-q", "256", "--head-dim", "128"],
     "'tile_x' is not a AttentionConfig field"),
])
def test_set_refuses_a_bad_field_by_name_before_any_folder(family, args, needle, tmp_path, capsys):
    bad = {"moe": "no_field=1", "gemm": "stages=abc", "gemm-pdl": "pdl=maybe", "attention": "tile_x=1"}[family]
    rc = main([family.split("-")[0], *args, "--set", bad, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and "[config.override]" in err and needle in err and "Traceback" not in err
    if family.startswith("gemm"):   # a known field with a bad value: what the field takes (session 45 walkthrough)
        assert {"gemm": "(stages takes an integer)", "gemm-pdl": "(pdl takes true or false)"}[family] in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("sets,needle", [
    (["stages=true"], "stages='true': a boolean (stages takes an integer)"),
    (["tile_n=false"], "tile_n='false': a boolean (tile_n takes an integer)"),
    (["stages=4,stages=5"], "stages is set twice, to 4 and to 5"),
    (["stages=4", "schedule=pingpong,stages=6"], "stages is set twice, to 4 and to 6"),
])
def test_set_refuses_a_boolean_integer_and_a_field_set_twice(sets, needle, tmp_path, capsys):
    """Review (adversarial user): ``--set stages=true`` built a 1-stage kernel (lax pydantic reads true as 1) and
    ``--set stages=4,stages=5`` silently took the last; both are refused by name before any folder."""
    argv = ["gemm", "--m", "128", "--n", "128", "--k", "128", "--out", str(tmp_path / "out")]
    for spec in sets:
        argv += ["--set", spec]
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and "[config.override]" in err and needle in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


def test_set_takes_a_field_repeated_with_its_value():
    from argus_cutlass.generate import parse_overrides
    from argus_cutlass.kernels.moe.config import MoEConfig

    assert parse_overrides(MoEConfig, ["gu_stages=6", "gu_stages=6,pdl=1", "pdl=true"]) == {"gu_stages": 6, "pdl": True}


def test_set_takes_a_boolean_for_an_optional_bool_field():
    """Review (session 46): the boolean-for-an-integer refusal caught ``bool | None`` fields too
    (``AttentionConfig.longest_first``): true / false are that field's values."""
    from argus_cutlass.generate import parse_overrides
    from argus_cutlass.kernels.attention.config import AttentionConfig

    assert parse_overrides(AttentionConfig, ["longest_first=false"]) == {"longest_first": False}
    assert parse_overrides(AttentionConfig, ["longest_first=true"]) == {"longest_first": True}


def test_set_refuses_a_combination_the_model_refuses(tmp_path, capsys):
    """A combination the configuration model (MoE: config.override) or the program builder (GEMM: the field's own
    rule) refuses: exit 2, named, and the folder the command made for it removed again."""
    rc = main(["moe", "--tokens", "16", "--experts", "8", "--topk", "2", "--hidden", "512", "--ffn", "256",
               "--set", "pdl=false,weight_prefetch=8", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and "[config.override]" in err and "weight_prefetch=8 needs pdl=True" in err
    assert not (tmp_path / "out").exists()
    rc = main(["gemm", "--m", "256", "--n", "256", "--k", "128", "--set", "splits=4", "--out", str(tmp_path / "g")])
    err = capsys.readouterr().err
    assert rc == 2 and "[config.splits]" in err and "splits=4" in err and not (tmp_path / "g").exists()
    (tmp_path / "kept").mkdir()   # a folder the user made stays
    assert main(["gemm", "--m", "256", "--n", "256", "--k", "128", "--set", "splits=4", "--out",
                 str(tmp_path / "kept")]) == 2
    assert (tmp_path / "kept").is_dir()
