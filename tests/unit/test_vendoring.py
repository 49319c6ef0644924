"""Vendoring a generated kernel: the ``.h`` beside each ``.cu`` (all three families), ``argus-cutlass
include-path``, and the architecture guard in a multi-architecture build.

The CPU tests check the header against the rendered ``.cu`` (same exports, same return codes). The
``nvcc`` tests (CI has nvcc, no GPU) build the ``.cu`` into a fat binary with sm_80 and sm_90a images,
with the header pre-included so the compiler checks the declarations against the definitions,
compile a small host program against the header with the host compiler (C++, and the header alone
as C), link the two and run the program: without a GPU every call returns a documented code, and
the ptxas report shows the kernel body only in the sm_90a image.
"""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path

import pytest

from argus_cutlass.cli import main
from argus_cutlass.render.header import ARCH_ERROR, ERROR_CODES, render_header

FAMILIES = ("gemm", "attention", "moe")


@functools.cache
def _kernel(family: str):  # noqa: ANN202 - GeneratedKernel
    """One small verified kernel of ``family`` (built once per test session)."""
    from argus_cutlass.generate import configure, generate

    if family == "gemm":
        from argus_cutlass.kernels.gemm.problem import GemmProblem

        problem = GemmProblem(256, 256, 256)
        return generate(configure(problem, heuristic=True)[0], problem, smt=False)
    if family == "attention":
        from argus_cutlass.kernels.attention.problem import AttentionProblem

        problem = AttentionProblem(1, 2, 2, 256, 256, 128).validate()
        return generate(configure(problem, heuristic=True)[0], problem, smt=False)
    from argus_cutlass.kernels.moe.heuristics import default_config
    from argus_cutlass.kernels.moe.problem import MoEProblem

    problem = MoEProblem(64, 8, 2, 256, 512, "bf16").validate()
    return generate(default_config(problem), problem, smt=False)


def _snake(camel: str) -> str:
    """``NullC`` -> ``NULL_C``, ``TensorMap`` -> ``TENSOR_MAP`` (the template's enumerators as macros)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).upper()


def _entry_enum(family: str, source: str) -> dict[str, int]:
    """``kErr*`` -> code of the entry's ``enum ErrorCode`` in a rendered ``.cu`` (the MoE file also
    holds its grouped GEMMs' enums: the layer's is the one with ``kErrTokens``)."""
    enums = re.findall(r"enum ErrorCode \{(.*?)\};", source, re.S)
    body = next(e for e in enums if "kErrTokens" in e) if family == "moe" else enums[-1]
    return {name: int(code) for name, code in re.findall(r"\bkErr(\w+) = (\d+)", body)}


# ---- CPU: the header is the .cu's interface --------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_header_codes_are_the_entry_enum(family):
    """Every return code of the entry (its ``enum ErrorCode``) is a macro of the header with the same
    value, and the architecture guard's code 9 is in every family."""
    kernel = _kernel(family)
    enum = _entry_enum(family, kernel.source)
    assert {_snake(k): v for k, v in enum.items()} == {m: c for c, m, _ in ERROR_CODES[family]}
    assert enum["Arch"] == ARCH_ERROR[0] == 9
    header = kernel.header
    upper = kernel.name.upper()
    for code, macro, _text in ERROR_CODES[family]:
        assert f"#define {upper}_ERR_{macro} {code} " in header
    assert f"#define {upper}_OK 0" in header and f"#define {upper}_CUDA_ERROR_BASE 1000" in header
    assert "case kErrArch: return arch_error_text();" in kernel.source
    assert "arch_status()" in kernel.source and "__CUDA_ARCH_FEAT_SM90_ALL" in kernel.source
    assert "#error" not in kernel.source


@pytest.mark.parametrize("family", FAMILIES)
def test_header_declares_every_export_of_the_cu(family):
    """The header declares exactly the ``extern "C"`` functions the ``.cu`` defines, with the same
    parameter lists (modulo whitespace), and documents the arguments."""
    kernel = _kernel(family)
    name = kernel.name
    block = kernel.source[kernel.source.rindex('extern "C" {'):]
    defined = {m.group(1): " ".join(m.group(2).split())
               for m in re.finditer(rf"^\S[^\n(]* ({name}\w*)\(([^)]*)\) \{{", block, re.M)}
    declared = {m.group(1): " ".join(m.group(2).split())
                for m in re.finditer(rf"^\S[^\n(]* ({name}\w*)\(([^)]*)\);", kernel.header, re.M)}
    assert defined, block[:400]
    assert {k: (v or "void") for k, v in defined.items()} == declared
    header = kernel.header
    assert '#ifdef __cplusplus\nextern "C" {' in header and "#include <cuda_runtime_api.h>" in header
    assert "argus-cutlass include-path" in header and "compute_80" in header
    must = {"gemm": ("lda", "ldb", "ldc", "ldd", "16-byte aligned", "K contiguous", "stream"),
            "attention": ("strides", "HOST pointer", "seqused_k", "16-byte aligned", "stream"),
            "moe": ("workspace", "256-byte aligned", "(E, 2I, H)", "16-byte aligned", "stream")}[family]
    for word in must:
        assert word in header, word


@pytest.mark.parametrize("layout, a_doc, lda", [
    ("tn", "row-major M x K (K contiguous): element (m, k) at A[m * lda + k]", "row pitch of A, >= K"),
    ("nt", "column-major M x K (M contiguous; stored K x M): element (m, k) at A[k * lda + m]",
     "column pitch of A, >= M"),
])
def test_gemm_header_leading_dimensions_follow_the_layout(layout, a_doc, lda):
    from argus_cutlass.generate import generate
    from argus_cutlass.kernels.gemm.config import GemmConfig

    h = render_header(generate(GemmConfig(layout=layout), smt=False).program)
    assert f"A      device pointer, {a_doc}" in h and f"lda    {lda}" in h
    assert f"layout {layout} (BLAS letters" in h


def test_cli_writes_the_header_beside_the_cu(tmp_path, capsys, monkeypatch):
    """``argus-cutlass gemm`` writes ``<name>.h`` next to ``<name>.cu`` (compile skipped here: no nvcc)."""
    from argus_cutlass.errors import ToolchainError
    import argus_cutlass.build.toolchain as toolchain

    def no_nvcc():
        raise ToolchainError("toolchain.nvcc", "nvcc not found (test)")

    monkeypatch.setattr(toolchain, "find_nvcc", no_nvcc)
    rc = main(["gemm", "--m", "256", "--n", "256", "--k", "256", "--heuristic", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    cu = next(tmp_path.glob("*.cu"))
    h = cu.with_suffix(".h")
    assert h.is_file() and f"wrote     {h}" in out
    assert f"int {cu.stem}(const void* A" in h.read_text()
    assert not list(tmp_path.glob(".*.tmp"))


def test_include_path_prints_the_cutlass_flags(capsys):
    from argus_cutlass.build.toolchain import find_cutlass

    headers = find_cutlass()
    assert main(["include-path"]) == 0
    assert capsys.readouterr().out.strip() == f"-I{headers.include} -I{headers.util_include}"
    assert main(["include-path", "--dirs"]) == 0
    assert capsys.readouterr().out.split("\n")[:2] == [str(headers.include), str(headers.util_include)]


def test_include_path_without_headers_names_the_input(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("CUTLASS_PATH", str(tmp_path / "nowhere"))
    rc = main(["include-path"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "CUTLASS_PATH=" in err and "nowhere" in err and "Traceback" not in err


# ---- nvcc: a fat binary, a host program against the header ----------------------------------

_CALLS = {
    # (a call with a bad size -> the size code, a call with valid sizes and aligned fake pointers)
    "gemm": ("{n}(A, A, nullptr, A, 0, 256, 256, 256, 256, 256, 256, 1.f, 0.f, 0)",
             "{n}(A, A, nullptr, A, 256, 256, 256, 256, 256, 256, 256, 1.f, 0.f, 0)", "SIZE"),
    "attention": ("{n}(A, A, A, A, nullptr, 0, 2, 2, 256, 256, 0, 0, nullptr, nullptr, nullptr, strides, .1f, 0)",
                  "{n}(A, A, A, A, nullptr, 1, 2, 2, 256, 256, 0, 0, nullptr, nullptr, nullptr, strides, .1f, 0)",
                  "SIZE"),
    "moe": ("{n}(A, ids, w, A, A, A, A, 0, 0, 0)",
            "{n}(A, ids, w, A, A, A, A, {n}_workspace_bytes(64), 64, 0)", "TOKENS"),
}

_PROGRAM = """#include "{n}.h"
#include <cstdio>

int main() {{
  void* A = reinterpret_cast<void*>(uintptr_t(1) << 20);  // aligned, never dereferenced on the host
  const int32_t* ids = static_cast<const int32_t*>(A);
  const float* w = static_cast<const float*>(A);
  int64_t strides[12] = {{131072, 256, 128, 131072, 256, 128, 131072, 256, 128, 131072, 256, 128}};
  (void)strides; (void)ids; (void)w;
  int rc = {bad};
  std::printf("bad_size %d %d\\n", rc, {N}_ERR_{size});
  std::printf("arch_text %s\\n", {n}_error_string({N}_ERR_ARCH));
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {{
    rc = {good};
    std::printf("no_device %d %s\\n", rc, {n}_error_string(rc));
  }}
  return 0;
}}
"""


def _ptxas_by_arch(log: str, function: str) -> dict[str, str]:
    """arch -> the ptxas lines of the entry function whose name contains ``function``."""
    out: dict[str, str] = {}
    current = None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '([^']+)' for '(sm_\w+)'", line)
        if m:
            current = m.group(2) if function in m.group(1) else None
            if current:
                out[current] = ""
        elif current and "ptxas info" in line and "Function properties" not in line:
            out[current] += line + "\n"
        elif current and "bytes stack frame" in line:
            out[current] += line + "\n"
    return out


def _run(cmd: list[str], cwd: Path) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}"
    return proc.stdout + proc.stderr


@pytest.mark.nvcc
@pytest.mark.parametrize("family", FAMILIES)
def test_host_program_links_against_a_multi_arch_build(family, tmp_path):
    """The vendoring story end to end, no GPU needed: ``.cu`` + ``.h`` in a fat binary (sm_80 and
    sm_90a), the header checked against the definitions (``-include``), compiled as C and as C++ by
    the host compiler, linked, run."""
    from argus_cutlass.build.toolchain import find_toolchain
    from argus_cutlass.generate import write_sources

    tc = find_toolchain()
    kernel = _kernel(family)
    n = kernel.name
    cu, h = write_sources(tmp_path, kernel.program, kernel.source)
    flags = ["-std=c++17", "-O3", "--expt-relaxed-constexpr", *tc.cutlass.include_flags()]
    log = _run([tc.nvcc.path, *flags, "-gencode", "arch=compute_80,code=sm_80", "-gencode",
                "arch=compute_90a,code=sm_90a", "-Xptxas", "-v", "-include", h.name, "-c", cu.name, "-o", "k.o"],
               tmp_path)
    # the guard: the marker's static smem only in the image without sm_90a, the kernel body only in sm_90a
    marker = _ptxas_by_arch(log, "arch_marker")
    assert set(marker) == {"sm_80", "sm_90a"}, log[-2000:]
    assert "16 bytes smem" in marker["sm_80"] and "bytes smem" not in marker["sm_90a"], marker
    body = _ptxas_by_arch(log, {"gemm": "gemm_kernel", "attention": "attention_kernel", "moe": "gemm_kernel"}[family])
    regs = {arch: int(re.search(r"Used (\d+) registers", text).group(1)) for arch, text in body.items()}
    assert regs["sm_90a"] >= 128 > regs["sm_80"], regs
    bad, good, size = _CALLS[family]
    (tmp_path / "main.cpp").write_text(_PROGRAM.format(n=n, N=n.upper(), bad=bad.format(n=n), good=good.format(n=n),
                                                       size=size))
    (tmp_path / "check.c").write_text(f'#include "{h.name}"\nint main(void) {{ return {n}_error_string(0) == 0; }}\n')
    _run([tc.nvcc.path, "-x", "c", "-c", "check.c", "-o", "check.o"], tmp_path)
    _run([tc.nvcc.path, "-x", "c++", "-std=c++17", "-c", "main.cpp", "-o", "main.o"], tmp_path)
    _run([tc.nvcc.path, "-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90a,code=sm_90a",
          "main.o", "k.o", "-o", "prog"], tmp_path)
    out = _run([str(tmp_path / "prog")], tmp_path)
    got, want = re.search(r"bad_size (\d+) (\d+)", out).groups()
    assert got == want != "0", out
    assert "no sm_90a image for the current device" in out
    from argus_cutlass.runtime.cuda import gpu_available

    if not gpu_available():
        code = int(re.search(r"no_device (\d+)", out).group(1))
        assert code >= 1000, out  # a CUDA error code (no driver / no device), never a crash


@pytest.mark.nvcc
def test_plain_arch_sm90a_compiles_the_kernel_body(tmp_path):
    """``nvcc -arch=sm_90a`` (nvcc 12 and 13) defines __CUDA_ARCH_FEAT_SM90_ALL: the body is compiled."""
    from argus_cutlass.build.toolchain import find_toolchain

    tc = find_toolchain()
    kernel = _kernel("gemm")
    cu, _h = write_sources_once(tmp_path, kernel)
    log = _run([tc.nvcc.path, "-std=c++17", "-O3", "--expt-relaxed-constexpr", *tc.cutlass.include_flags(),
                "-arch=sm_90a", "-Xptxas", "-v", "-c", cu.name, "-o", "k.o"], tmp_path)
    body = _ptxas_by_arch(log, "gemm_kernel")
    assert list(body) == ["sm_90a"] and int(re.search(r"Used (\d+) registers", body["sm_90a"]).group(1)) >= 128
    assert "bytes smem" not in _ptxas_by_arch(log, "arch_marker")["sm_90a"]


def write_sources_once(out: Path, kernel) -> tuple[Path, Path]:  # noqa: ANN001
    from argus_cutlass.generate import write_sources

    return write_sources(out, kernel.program, kernel.source)
