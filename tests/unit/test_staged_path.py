"""The any-alignment path on the CPU: the staging plan, the StageCopy nodes, the ``stage.*`` rules with
their counterexamples, the printed copies, the header, the record and the CLI's ``path`` line.

Issue 13 item 5: every problem cuBLAS runs is served; what breaks only TMA's 16-byte rules runs the
same verified TMA GEMM on aligned, zero-padded staged copies, and truly bad input stays an error.
"""

from __future__ import annotations

import json
import re

import pytest

from argus_cutlass.errors import ProblemError
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.problem import GemmProblem
from argus_cutlass.kernels.gemm.program import build_program, path_record, staging_workspace
from argus_cutlass.render.gemm import render_gemm
from argus_cutlass.verify import verify_gemm
from argus_cutlass.verify.stage_copy import check_stage_copies, copy_image

COOP = GemmConfig(tile_m=128, tile_n=128, cluster_m=1)
SWAP = GemmConfig(layout="nn", swap_ab=True, tile_m=64, tile_n=32, schedule="pingpong", cluster_m=1, epi_m=64,
                  epi_n=32, out_dtype="fp32")


# ------------------------------------------------------------------------------------------- the plan


@pytest.mark.parametrize("problem, staged, reason", [
    (GemmProblem(300, 4096, 4096, layout="nt"), ("A",), "lda=300: 600 bytes, not a multiple of 16"),
    (GemmProblem(4096, 33, 4096), ("D",), "ldd=33: 66 bytes, not a multiple of 16"),
    (GemmProblem(4096, 4096, 33), ("A", "B"), "lda=33: 66 bytes, not a multiple of 16"),
    (GemmProblem(7, 64, 64, layout="nt"), ("A",), "lda=7: 14 bytes, not a multiple of 16"),
    (GemmProblem(64, 64, 33, lda=40, ldb=40), ("A", "B"), "K=33: 66 bytes, not a multiple of 16"),
    (GemmProblem(64, 64, 64, ldd=69), ("D",), "ldd=69: 138 bytes, not a multiple of 16"),
    (GemmProblem(64, 36, 64, out_dtype="fp32", layout="tt", ldb=37), ("B",), "ldb=37: 74 bytes, not a multiple of 16"),
    (GemmProblem(64, 64, 64, unaligned=("A", "D")), ("A", "D"), "pointer A not 16-byte aligned"),
])
def test_staging_plan_names_the_operands_and_why(problem, staged, reason):
    plan = problem.staging()
    assert tuple(s.name for s in plan) == staged
    assert reason in plan[0].reasons
    assert problem.validate_any() is problem
    problem.validate(staged)  # the direct rules hold once those operands are staged
    if not problem.unaligned:
        with pytest.raises(ProblemError, match=r"tma\."):
            problem.validate()


def test_aligned_problems_take_the_direct_path():
    for p in (GemmProblem(256, 512, 128), GemmProblem(64, 64, 33, layout="nt"), GemmProblem(8, 8, 16, ldc=13)):
        assert p.staging() == () and p.staging_bytes() == 0
        p.validate()


def test_c_has_no_tma_rule():
    """C is read element by element by the epilogue (never by TMA): its leading dimension is free."""
    p = GemmProblem(64, 64, 64, ldc=67)
    assert p.violations() == [] and p.staging() == ()


@pytest.mark.parametrize("problem, rule, needle", [
    (GemmProblem(0, 64, 64), "problem.size", "M=0"),
    (GemmProblem(64, -1, 64), "problem.size", "N=-1"),
    (GemmProblem(64, 64, 64, lda=60), "problem.ld", "lda=60 is smaller than the contiguous extent K=64"),
    (GemmProblem(300, 64, 64, layout="nt", lda=299), "problem.ld", "lda=299"),
    (GemmProblem(64, 64, 64, ldd=63), "problem.ld", "ldd=63"),
    (GemmProblem(64, 64, 64, dtype="fp8"), "problem.dtype", "fp8"),
    (GemmProblem(64, 64, 64, unaligned=("Q",)), "problem.operand", "unaligned"),
])
def test_truly_bad_input_stays_refused(problem, rule, needle):
    with pytest.raises(ProblemError) as info:
        problem.validate_any()
    assert info.value.rule == rule and needle in str(info.value)


def test_pointer_checks_for_staged_operands():
    GemmProblem.check_pointer(0x1002, "A", 2)  # staged / C: element alignment only
    with pytest.raises(ProblemError) as info:
        GemmProblem.check_pointer(0x1001, "A", 2)
    assert info.value.rule == "problem.element_alignment" and "A=0x1001" in str(info.value)
    with pytest.raises(ProblemError) as info:
        GemmProblem.check_pointer(0, "D", 2)
    assert info.value.rule == "problem.pointer"
    with pytest.raises(ProblemError) as info:
        GemmProblem.check_pointer(0x1002, "B")
    assert info.value.rule == "tma.address_alignment"


def test_library_run_validates_with_the_kernels_staging():
    from argus_cutlass.kernels.gemm.library import GemmKernelLibrary

    class Lib(GemmKernelLibrary):
        def __init__(self, staged=()):
            self.calls, self.k_bound_bits, self.staged = [], None, staged

        def __call__(self, *args):
            self.calls.append(args)

    p = GemmProblem(300, 64, 64, layout="nt")
    with pytest.raises(ProblemError, match=r"tma\.contiguous_extent"):  # a direct kernel refuses it
        Lib().run(p, 0x1000, 0x2000, None, 0x3000)
    lib = Lib(("A",))
    lib.run(p, 0x1002, 0x2000, None, 0x3000)  # A staged: any element-aligned pointer
    assert lib.calls[0][:7] == (0x1002, 0x2000, None, 0x3000, 300, 64, 64)
    with pytest.raises(ProblemError, match=r"tma\.address_alignment"):
        lib.run(p, 0x1000, 0x2002, None, 0x3000)  # B is mapped in place
    lib.run(p, 0x1000, 0x2000, 0x4002, 0x3000, beta=1.0)  # C: element alignment
    with pytest.raises(ProblemError, match=r"problem\.ld"):
        lib.run(GemmProblem(300, 64, 64, layout="nt", lda=10), 0x1000, 0x2000, None, 0x3000)


# ------------------------------------------------------------------------------------- the program


def test_program_stages_what_the_problem_needs():
    p = GemmProblem(300, 4096, 4096, layout="nt")
    prog = build_program(GemmConfig(layout="nt"), p)
    (c,) = prog.stage_copies
    assert (c.operand, c.direction, c.rows, c.cols, c.align, c.fill, c.map_extent) == ("A", "in", "K", "M", 8, "zero",
                                                                                       "staged")
    assert "_stgA_" in prog.kernel_name()
    # a problem the direct path runs gets the program (and the name) it always had
    cfg = GemmConfig(layout="nt")
    aligned = GemmProblem(256, 4096, 4096, layout="nt")
    assert build_program(cfg, aligned).kernel_name() == build_program(cfg).kernel_name()
    # D is staged out, with no zero fill
    d = build_program(COOP, GemmProblem(4096, 33, 4096)).stage_copies[0]
    assert (d.operand, d.direction, d.fill, d.src_pitch, d.dst_pitch) == ("D", "out", "none", "staged", "caller")


def test_workspace_is_what_the_entry_allocates():
    p = GemmProblem(300, 33, 72, "fp16", "fp32", "nt")
    prog = build_program(GemmConfig(layout="nt", dtype="fp16", out_dtype="fp32"), p)
    a, b, d = 72 * 304 * 2, 72 * 40 * 2, 300 * 36 * 4  # K x round_up(M, 8), K x round_up(N, 8), M x round_up(N, 4)
    off_b = -(-a // 256) * 256
    off_d = -(-(off_b + b) // 256) * 256
    assert staging_workspace(prog, p) == off_d + d
    assert p.staging_bytes() == off_d + d  # what the torch warning reports is what the entry allocates
    for q in (GemmProblem(7, 33, 5, "bf16", "bf16", "nt"), GemmProblem(300, 4096, 4096, "bf16", "bf16", "nt"),
              GemmProblem(4096, 33, 4096), GemmProblem(64, 64, 33, "fp16", "fp32", "tt")):
        cfg = GemmConfig(layout=q.layout, dtype=q.dtype, out_dtype=q.out_dtype, tile_m=128, tile_n=128, cluster_m=1)
        assert q.staging_bytes() == staging_workspace(build_program(cfg, q), q), q
    rec = path_record(p, prog)
    assert rec["kind"] == "staged" and [s["operand"] for s in rec["staged"]] == ["A", "B", "D"]
    assert rec["staged"][2]["staged_ld"] == 36 and rec["workspace_bytes"] == off_d + d
    assert path_record(GemmProblem(256, 256, 256), build_program(COOP))["kind"] == "direct"


# ------------------------------------------------------------------------------------- the verifier


@pytest.mark.parametrize("cfg, staged", [
    (COOP, ("A", "B", "D")),
    (GemmConfig(layout="nt", tile_m=128, tile_n=128, cluster_m=1), ("A", "B", "D")),
    (GemmConfig(layout="tt", dtype="fp16", out_dtype="fp32", tile_m=128, tile_n=128, cluster_m=1), ("A", "B", "D")),
    (SWAP, ("A", "D")),
    (GemmConfig(tile_n=128, cluster_m=1, stages=6, scheduler="streamk"), ("D",)),
])
def test_staged_programs_verify_with_g9_proofs(cfg, staged):
    report = verify_gemm(build_program(cfg, staged=staged), smt=False)
    assert report.ok, report.format()
    g9 = {(p.rule, p.summary.split(":")[0]) for p in report.proofs if p.invariant == "G9"}
    for name in staged:
        rules = {"stage.align", "stage.writeback"} if name == "D" else {"stage.align", "stage.cover", "stage.zero"}
        assert {(r, f"stage_{name}") for r in rules} <= g9, g9


def _violation(staged, key, **changes):
    prog = build_program(COOP, staged=staged).replace_node("stage_copy", key, **changes)
    report = verify_gemm(prog, smt=False)
    assert not report.ok
    return report.violations[0], report


def test_stage_zero_counterexample_names_the_padded_k():
    v, report = _violation(("A", "B"), "stage_A", fill="none")
    assert v.rule == "stage.zero" and report.rules_violated() == ["stage.zero"]
    cex = v.counterexample
    assert cex.invariant == "G9" and cex.program_point.startswith("stage_A (copy in")
    assert "A'(m=0, k=1)" in v.message and "padded k >= K" in v.message
    assert cex.params == {"M": 1, "K": 1, "lda": 1, "lda_staged": 8} and cex.element["tensor"] == "A'"
    assert "program.py" in cex.where


def test_stage_cover_counterexample_names_thread_and_element():
    v, _ = _violation(("A",), "stage_A", col_delta=-1)
    cex = v.counterexample
    assert v.rule == "stage.cover" and "it must hold A(m=0, k=0)" in v.message
    assert cex.thread["threadIdx"] == 0 and "stage_A copy kernel" in cex.thread["role"]
    assert "threadIdx.x=0" in cex.format() and cex.slot == {"r": 0, "c": 0}
    v, _ = _violation(("A",), "stage_A", src_pitch="staged")
    assert v.rule == "stage.cover" and "outside the" in v.message
    v, _ = _violation(("B",), "stage_B", rows="K", cols="N")
    assert v.rule == "stage.cover" and "B is stored N x K" in v.message


def test_stage_align_counterexample_names_the_stride():
    v, _ = _violation(("A",), "stage_A", align=4)
    assert v.rule == "stage.align" and "72 bytes" not in v.message and "8 bytes, not a multiple of 16" in v.message
    v, _ = _violation(("B",), "stage_B", map_extent="true")
    assert v.rule == "stage.align" and "contiguous extent K=1" in v.message
    v, _ = _violation(("A",), "stage_A", base_align=8)
    assert v.rule == "stage.align" and "base_align=8" in v.message


@pytest.mark.parametrize("changes, needle", [
    ({"fill": "zero"}, "writes D(1, 0)"),
    ({"src_pitch": "caller"}, "the GEMM stored D(1, 0) at D'(1, 0)"),
    ({"row_delta": 1}, "past the last row M=1"),
    ({"direction": "in", "src_pitch": "caller", "dst_pitch": "staged"}, "nothing copies D' back"),
])
def test_stage_writeback_counterexamples(changes, needle):
    v, _ = _violation(("D",), "stage_D", **changes)
    assert v.rule == "stage.writeback" and needle in v.message, v.message
    assert v.counterexample is not None and v.counterexample.element["tensor"] == "D"


def test_writeback_of_an_input_is_refused():
    v, _ = _violation(("A",), "stage_A", direction="out", src_pitch="staged", dst_pitch="caller")
    assert v.rule == "stage.writeback" and "an input the GEMM only reads" in v.message


def test_copy_stages_a_tma_operand_in_its_own_type():
    """A copy in another element type, or a copy of C (read element by element, null when beta = 0),
    is refused by stage.cover, and the printed copy asserts its element size."""
    import dataclasses

    from argus_cutlass.dsl.ir import StageCopy

    p = build_program(GemmConfig(layout="tn"), None, staged=("A",))
    sa = p.stage_copies[0]
    wrong = dataclasses.replace(p, stage_copies=(dataclasses.replace(sa, dtype="fp32", align=4),))
    rep = verify_gemm(wrong, smt=False)
    assert [v.rule for v in rep.violations] == ["stage.cover"] and "holds bf16" in rep.violations[0].message
    sc = StageCopy("stage_C", "C", "in", "bf16", "M", "N", 8, "zero", "staged", "caller", "staged", sa.loc)
    rep = verify_gemm(dataclasses.replace(p, stage_copies=(sa, sc)), smt=False)
    assert [v.rule for v in rep.violations] == ["stage.cover"] and "null when beta = 0" in rep.violations[0].message
    assert "static_assert(sizeof(stage_A_t) == sizeof(ElementA)" in render_gemm(p)


def test_copy_model_covers_the_grid_stride_wrap():
    """The model walks the loops as printed: at grid_x * threads + threads + 1 columns and grid_y + 2 rows
    the blocks wrap, and still every element is visited once."""
    node = build_program(COOP, staged=("A",)).stage_copies[0]
    for rows, cols in ((1, node.grid_x * node.threads + node.threads + 1), (node.grid_y + 2, 1)):
        img = copy_image(node, rows, cols, cols)
        assert img.r.size == rows * node.staged_ld(cols)
        assert len(set(zip(img.r.tolist(), img.c.tolist()))) == img.r.size
    assert img.grid == (1, node.grid_y) and img.by.max() == node.grid_y - 1


def test_check_runs_fast_enough():
    import time

    prog = build_program(COOP, staged=("A", "B", "D"))
    t0 = time.perf_counter()
    proofs, violations = check_stage_copies(prog)
    assert not violations and len(proofs) == 8
    assert time.perf_counter() - t0 < 10.0


# ---------------------------------------------------------------------------------------- the .cu


def test_staged_cu_prints_the_nodes():
    prog = build_program(COOP, staged=("A", "B", "D"))
    src = render_gemm(prog)
    for name in ("stage_A", "stage_B", "stage_D"):
        assert f"constexpr int64_t {name}_align = 8;" in src and f"inline cudaError_t {name}_copy(" in src
    assert "cudaMallocAsync(&ws.ptr, ws_bytes, stream)" in src and "cudaFreeAsync(ptr, stream)" in src
    assert "void const* ptr_a = stage_A_buf;" in src and "int64_t const ld_d = stage_D_ld;" in src
    assert "make_map<ElementA>(&p.tma_a, ptr_a, stage_A_ext," in src and "uint64_t(stage_D_ext)" in src
    # copies in before the GEMM launch, the copy back after it
    launch = src.index("cudaLaunchKernelEx(&cfg, gemm_kernel, p)")
    assert src.index("stage_A_copy(A, lda") < launch < src.index("stage_D_copy(D, ldd")
    assert re.search(r"int argus_\w+_staged\(\) \{ return 11; \}", src)  # A | B | D
    # staged operands need element alignment only; the rest keep TMA's rules
    assert "!aligned_elem<ElementA>(A) || !aligned_elem<ElementB>(B) || !aligned_elem<ElementD>(D)" in src
    direct = render_gemm(build_program(COOP))
    assert "stage_copy" not in direct and "_staged()" not in direct and "cudaMallocAsync" not in direct
    assert "if (A == nullptr || B == nullptr || D == nullptr) return kErrNull;" in direct
    assert "if (lda < K || ldb < K || ldd < N || (beta != 0.0f && ldc < N)) return kErrLd;" in direct


def test_swap_ab_binds_the_staged_caller_operand():
    """Under swap-AB the kernel's B is the caller's A: it is the kernel's B that reads stage_A."""
    src = render_gemm(build_program(SWAP, staged=("A", "D")))
    assert "void const* ptr_b = stage_A_buf;" in src and "void const* ptr_a = B;" in src
    assert "void* ptr_d = stage_D_buf;" in src


def test_header_documents_staging_and_memory():
    from argus_cutlass.render.header import render_header

    prog = build_program(GemmConfig(layout="nt"), GemmProblem(300, 4096, 4096, layout="nt"))
    h = render_header(prog)
    name = prog.kernel_name()
    assert "this entry copies A through aligned buffers" in h and "A: K x round_up(M, 8) bf16" in h
    assert "Extra device memory" in h and "cudaMallocAsync" in h
    assert f"int {name}_staged(void);" in h
    assert "TMA rules on B, D (mapped in place)" in h
    assert "staged()" not in render_header(build_program(GemmConfig(layout="nt")))


# ----------------------------------------------------------------------------- orchestrator and CLI


@pytest.mark.parametrize("problem, text", [
    (GemmProblem(300, 4096, 4096, layout="nt"), "staged: A (lda=300: 600 bytes, not a multiple of 16)"),
    (GemmProblem(4096, 33, 4096), "staged: D (ldd=33: 66 bytes, not a multiple of 16)"),
    (GemmProblem(4096, 4096, 33), "staged: A (lda=33: 66 bytes, not a multiple of 16); B (ldb=33: 66 bytes"),
])
def test_run_records_which_path_ran(problem, text, tmp_path):
    from argus_cutlass.generate import Options, run

    r = run(problem, options=Options(compile=False, smt=False, heuristic=True), out_dir=tmp_path)
    assert r.status == "rendered", r.error
    rec = json.loads((tmp_path / f"{r.name}.json").read_text())
    assert rec["path"]["kind"] == "staged" and rec["path"]["text"].startswith(text)
    assert rec["problem"]["lda"] == problem.lda and any(p["invariant"] == "G9" for p in rec["verification"]["proofs"])
    assert (tmp_path / f"{r.name}.cu").exists() and "_staged" in (tmp_path / f"{r.name}.h").read_text()


def test_cli_prints_the_path(tmp_path, capsys, monkeypatch):
    from argus_cutlass.cli import main

    monkeypatch.setenv("ARGUS_NVCC", str(tmp_path / "no-nvcc-here"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    rc = main(["gemm", "--m", "7", "--n", "64", "--k", "64", "--layout", "nt", "--heuristic", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "path      staged: A (lda=7: 14 bytes, not a multiple of 16); workspace 1024 bytes per call" in out
    assert "G9" in out


# ------------------------------------------------------------------------------------------- nvcc


@pytest.mark.nvcc
def test_staged_kernels_compile_for_sm90a():
    from argus_cutlass.build.nvcc import CompileJob, compile_many

    progs = [build_program(COOP, staged=("A", "B", "D")), build_program(SWAP, staged=("A", "D")),
             build_program(GemmConfig(tile_n=128, cluster_m=1, stages=6, scheduler="streamk"), staged=("D",)),
             build_program(GemmConfig(layout="tt", dtype="fp16", out_dtype="fp16", tile_m=128, tile_n=128,
                                      cluster_m=1), staged=("A", "B", "D"))]
    results = compile_many([CompileJob(render_gemm(p), p.kernel_name(), "shared") for p in progs],
                           return_exceptions=True)
    for p, res in zip(progs, results, strict=True):
        assert not isinstance(res, Exception), f"{p.kernel_name()}: {res}"
        # staging adds host code and a copy kernel; the GEMM kernel is the direct one (CUTLASS's stream-K
        # scheduler state spills in the direct kernel too)
        assert res.spill_bytes == 0 or p.schedule.decomposition == "streamk"
