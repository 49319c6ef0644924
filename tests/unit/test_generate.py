"""The orchestrator (``argus_cutlass.generate``): stages, statuses, artifacts, and that every entry
point goes through it.

Most tests replace the verifier stage with a stand-in (a report with a chosen outcome), so that
they pin the orchestration, not the verifier's verdicts; ``test_generate_with_the_verifier`` runs
the real one. No GPU is needed: without one the drivers stop after compiling.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import argus_cutlass.generate as gen
from argus_cutlass.build import nvcc
from argus_cutlass.errors import ConfigError, DeviceError, UnprovedError, VerificationError
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.problem import GemmProblem
from argus_cutlass.verify.report import Proof, Unknown, VerificationReport, Violation

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = GemmProblem(256, 512, 128)
GOOD = GemmConfig(tile_n=128, cluster_m=1, stages=4)
#: a configuration whose program cannot be built (rule smem.atom: a 4-element K-major tile is 8 bytes)
NO_PROGRAM = GemmConfig(tile_k=4)


def _stand_in(outcome_of):
    """A verifier stage whose report for a program is ``outcome_of(program)``: ``ok``, ``bad`` or ``unknown``."""

    def verify(program, **_):
        proofs = (Proof("mma.k_agreement", "G1", "enum", "A.k == B.k at every slot"),)
        outcome = outcome_of(program)
        bad = (Violation("smem.capacity", "R1", "too much shared memory"),) if outcome == "bad" else ()
        unk = (Unknown("pipeline.parity", "G6", "consumer wait parity", "timeout", 5),) if outcome == "unknown" else ()
        return VerificationReport(program.kernel_name(), (), proofs, bad, 0.01, (), unk)

    return verify


@pytest.fixture
def no_nvcc(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGUS_NVCC", str(tmp_path / "no-nvcc-here"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))


def test_generate_names_the_kernel_by_its_program(monkeypatch):
    monkeypatch.setattr(gen, "verify", _stand_in(lambda p: "ok"))
    kernel = gen.generate(GOOD, PROBLEM)
    assert kernel.name == kernel.program.kernel_name() == gen.kernel_name(GOOD, PROBLEM)
    assert kernel.program == gen.build(GOOD, PROBLEM) and kernel.k_bound_bits == 24
    assert f"int {kernel.name}(const void* A" in kernel.source
    assert "//   - G1 mma.k_agreement: A.k == B.k at every slot" in kernel.source
    assert kernel.fingerprint[:16] in kernel.source
    edited = kernel.program.replace_node("pipeline", "mainloop", **{"consumer.start_phase": 1})
    assert edited.kernel_name() != kernel.name  # any node edit renames the kernel


def test_violation_and_unknown_block_rendering(monkeypatch):
    monkeypatch.setattr(gen, "verify", _stand_in(lambda p: "bad"))
    with pytest.raises(VerificationError) as info:
        gen.generate(GOOD)
    assert info.value.rule == "smem.capacity"
    monkeypatch.setattr(gen, "verify", _stand_in(lambda p: "unknown"))
    with pytest.raises(UnprovedError) as info:
        gen.generate(GOOD)
    text = str(info.value)
    assert info.value.rule == "verify.unknown" and "1 obligation(s) not proved" in text
    assert "G6 pipeline.parity: consumer wait parity (timeout)" in text and "--allow-unknown" in text
    kernel = gen.generate(GOOD, allow_unknown=True)
    assert "NOT PROVED (allowed by --allow-unknown): G6 pipeline.parity" in kernel.source


def test_run_without_nvcc_stops_after_render_and_records_everything(monkeypatch, tmp_path, no_nvcc):
    monkeypatch.setattr(gen, "verify", _stand_in(lambda p: "ok"))
    stages = []
    result = gen.run(PROBLEM, GOOD, on_stage=lambda s, r: stages.append((s, r.status)), out_dir=tmp_path)
    assert result.ok and result.status == "rendered" and "no-nvcc-here" in result.skipped["compile"]
    assert [s for s, _ in stages] == ["configure", "build_program", "verify", "render", "write", "compile"]
    assert (tmp_path / f"{result.name}.cu").read_text() == result.source
    record = json.loads((tmp_path / f"{result.name}.json").read_text())
    assert record["kernel"] == result.name and record["config"] == GOOD.model_dump()
    assert record["program"] == {"fingerprint": result.program.fingerprint(), "k_bound_bits": 24}
    assert record["status"] == "rendered" and record["compile"] == {"skipped": result.skipped["compile"]}
    assert set(record["stage_seconds"]) == {"build_program", "verify", "render"}


def test_run_records_a_rejection_and_raises_for_a_config_without_program(monkeypatch, tmp_path):
    monkeypatch.setattr(gen, "verify", _stand_in(lambda p: "bad"))
    result = gen.run(PROBLEM, GOOD, out_dir=tmp_path)
    assert result.status == "rejected" and not result.ok and result.source is None
    assert not list(tmp_path.glob("*.cu"))
    record = json.loads((tmp_path / f"{result.name}.json").read_text())
    assert record["verification"]["ok"] is False and record["error"]["rule"] == "smem.capacity"
    with pytest.raises(VerificationError):
        result.raise_for_status()
    with pytest.raises(ConfigError) as info:
        gen.run(PROBLEM, NO_PROGRAM)
    assert info.value.rule == "smem.atom"


def _fake_nvcc_run(fail_names):
    """``_run_nvcc`` stand-in: a build fails when its output name is in ``fail_names``."""

    def run(cmd, timeout_s):
        out = Path(cmd[cmd.index("-o") + 1])
        if out.stem in fail_names:
            return subprocess.CompletedProcess(cmd, 1, stdout="", stderr=f"{out.stem}.cu(1): error: planted\n")
        out.write_bytes(b"\x7fELF fake")
        log = ("ptxas info    : Compiling entry function '_Z4gemm' for 'sm_90a'\n"
               "ptxas info    : Used 168 registers, used 2 barriers\n")
        return subprocess.CompletedProcess(cmd, 0, stdout="", stderr=log)

    return run


def test_run_many_turns_every_expected_failure_into_a_status(monkeypatch, tmp_path):
    """One batch: no program, a violation, an unknown, a failed build, a good build; nothing raises."""
    from argus_cutlass.runtime import cuda

    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))
    outcome = {gen.kernel_name(GOOD.replace(stages=3)): "bad", gen.kernel_name(GOOD.replace(stages=5)): "unknown"}
    monkeypatch.setattr(gen, "verify", _stand_in(lambda p: outcome.get(p.kernel_name(), "ok")))
    broken = GOOD.replace(stages=6)
    monkeypatch.setattr(nvcc, "_run_nvcc", _fake_nvcc_run({gen.kernel_name(broken)}))
    monkeypatch.setattr(cuda, "gpu_available", lambda: cuda.GpuAvailability(False, "no driver (test)"))
    configs = [NO_PROGRAM, GOOD.replace(stages=3), GOOD.replace(stages=5), broken, GOOD]
    results = gen.run_many(configs, PROBLEM, options=gen.Options(workers=1))
    assert [r.status for r in results] == ["rejected", "rejected", "unproved", "compile_error", "compiled"]
    assert results[0].error.rule == "smem.atom" and results[0].program is None
    assert results[1].error.rule == "smem.capacity" and results[2].error.rule == "verify.unknown"
    assert results[3].error.rule == "nvcc.compile" and "planted" in str(results[3].error)
    assert results[4].artifact.registers == 168 and results[4].skipped["run"] == "no driver (test)"
    assert [r.config for r in results] == configs


def test_agent_measurements_come_from_the_orchestrator(monkeypatch):
    from argus_cutlass.agent.measure import measurement

    r = gen.RunResult(PROBLEM, GOOD, status="compile_error", error=ConfigError("nvcc.compile", "boom"))
    assert measurement(r).status == "compile_error" and "[nvcc.compile] boom" in measurement(r).feedback
    assert measurement(gen.RunResult(PROBLEM, GOOD, status="ok", ms=0.5)).ms == 0.5
    assert measurement(gen.RunResult(PROBLEM, GOOD, status="unproved", error=ConfigError("verify.unknown", "x"))
                       ).status == "verify_failed"
    assert measurement(gen.RunResult(PROBLEM, GOOD, status="compiled")).status == "invalid"


#: entry points that must run kernels through the orchestrator: they may not import a stage's
#: implementation (program builder, verifier, renderer, nvcc driver, library, check harness) themselves
ENTRY_POINTS = ("argus_cutlass/cli.py", "argus_cutlass/api.py", "agent/measure.py", "agent/tune.py",
                "bench/agent_eval.py", "bench/test_gemm_bench.py")
STAGE_MODULES = ("argus_cutlass.kernels.gemm.program", "argus_cutlass.verify", "argus_cutlass.render.gemm",
                 "argus_cutlass.build.nvcc", "argus_cutlass.kernels.gemm.library", "argus_cutlass.kernels.gemm.check",
                 "argus_cutlass.kernels.gemm.baseline")


@pytest.mark.parametrize("path", ENTRY_POINTS)
def test_entry_points_do_not_write_the_flow_again(path):
    tree = ast.parse((ROOT / path).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "argus_cutlass.generate" in imported, f"{path} does not use the orchestrator"
    own = sorted(m for m in imported if m and m.startswith(STAGE_MODULES))
    assert not own, f"{path} runs stages itself: {own}"


def test_generate_with_the_verifier():
    """The real verifier on the default program: no violation, the proofs in the header, and the
    same source from a cold second verification (the compile cache hits only if it is)."""
    from argus_cutlass.verify import clear_caches

    kernel = gen.generate(GemmConfig(), smt=False)
    assert kernel.report.ok and kernel.report.proofs
    for line in kernel.report.proved:
        assert f"//   - {line}" in kernel.source
    clear_caches()
    assert gen.generate(GemmConfig(), smt=False).source == kernel.source


@pytest.mark.parametrize("exc", [DeviceError("baseline.vendor", "cuBLAS (torch): CUBLAS_STATUS_NOT_SUPPORTED"),
                                 DeviceError("device.torch", "torch.cuda.is_available() is False")])
def test_a_failing_vendor_baseline_keeps_our_checked_and_timed_result(monkeypatch, exc):
    """The baseline runs after our kernel is checked and timed: its failure (cuBLAS's call raising, no torch
    device: a DeviceError) is recorded as the skipped baseline, and the status, check and time stand (session 28:
    cublas_time refused a staged problem and the exception discarded the whole run). Any other exception is a
    bug of ours and propagates."""
    def boom(*a, **k):
        raise exc

    monkeypatch.setattr(gen, "load", lambda kernel, artifact: object())
    monkeypatch.setattr(gen, "check", lambda lib, p, **k: type("C", (), {"passed": True})())
    monkeypatch.setattr(gen, "time_kernel", lambda lib, p, **k: 0.25)
    monkeypatch.setattr(gen, "baseline", boom)
    r = gen.RunResult(PROBLEM, GOOD)
    gen._back(r, gen._Clock(r, None), gen.Options())
    assert (r.status, r.ms, r.baseline_ms, r.error) == ("ok", 0.25, None, None)
    assert type(exc).__name__ in r.skipped["baseline"] and exc.rule in r.skipped["baseline"]
    assert "baseline" in r.stage_seconds


def test_a_bug_in_the_baseline_glue_is_not_taken_for_the_vendors_failure(monkeypatch):
    def bug(*a, **k):
        raise RuntimeError("shape '[300, 1000]' is invalid for input of size 4")

    monkeypatch.setattr(gen, "load", lambda kernel, artifact: object())
    monkeypatch.setattr(gen, "check", lambda lib, p, **k: type("C", (), {"passed": True})())
    monkeypatch.setattr(gen, "time_kernel", lambda lib, p, **k: 0.25)
    monkeypatch.setattr(gen, "baseline", bug)
    r = gen.RunResult(PROBLEM, GOOD)
    with pytest.raises(RuntimeError, match="invalid for input"):
        gen._back(r, gen._Clock(r, None), gen.Options())


def test_cublas_time_takes_what_the_staging_path_runs_and_refuses_what_no_path_runs(monkeypatch):
    """cuBLAS runs any stride: a problem only our aligned staging path runs (M = 300 with a column-major A) is
    not refused (None: no torch), while a leading dimension below its extent is, before torch is imported (session 28: cublas_time validated the direct TMA path's rules and refused the first)."""
    from argus_cutlass.errors import ProblemError
    from argus_cutlass.kernels.gemm.baseline import cublas_time

    staged = GemmProblem(300, 1024, 1000, layout="nt")
    assert staged.staging() and cublas_time.__defaults__[-1] == gen.DEFAULT_TIMING == "graph"
    monkeypatch.setitem(sys.modules, "torch", None)   # as without torch: the problem passes validation first
    assert cublas_time(staged) is None
    with pytest.raises(ProblemError):
        cublas_time(GemmProblem(64, 64, 64, lda=32))
    with pytest.raises(ProblemError, match="problem.timing"):
        cublas_time(staged, timing="wall")


def test_a_graph_that_cannot_be_captured_falls_back_to_per_launch_timing(monkeypatch):
    """Graph timing is the default: when the calls cannot be captured (DeviceError device.graph: e.g. a host path
    that allocates synchronously), the run is timed one launch between events instead, cuBLAS the same way, the
    record says so; any other DeviceError while timing is a launch error, as before."""
    from argus_cutlass.errors import DeviceError as DE

    seen = []

    def timed(lib, p, timing, **k):
        seen.append(("ours", timing))
        if timing == "graph":
            raise DE("device.graph", "cudaStreamEndCapture failed: cudaErrorStreamCaptureInvalidated")
        return 0.5

    monkeypatch.setattr(gen, "load", lambda kernel, artifact: object())
    monkeypatch.setattr(gen, "check", lambda lib, p, **k: type("C", (), {"passed": True})())
    monkeypatch.setattr(gen, "time_kernel", timed)
    monkeypatch.setattr(gen, "baseline", lambda p, timing, **k: seen.append(("cublas", timing)) or 0.6)
    r = gen.RunResult(PROBLEM, GOOD)
    gen._back(r, gen._Clock(r, None), gen.Options())
    assert seen == [("ours", "graph"), ("ours", "launch"), ("cublas", "launch")]
    assert (r.status, r.ms, r.baseline_ms, r.timing_method) == ("ok", 0.5, 0.6, "launch")
    assert any("could not be captured" in n for n in r.notes)

    def broken(lib, p, timing, **k):
        raise DE("device.cuda_call", "cudaGraphLaunch failed: cudaErrorLaunchFailure")

    monkeypatch.setattr(gen, "time_kernel", broken)
    r = gen.RunResult(PROBLEM, GOOD)
    gen._back(r, gen._Clock(r, None), gen.Options())
    assert r.status == "launch_error" and r.error.rule == "device.cuda_call"
