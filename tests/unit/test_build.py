"""Toolchain discovery, nvcc driver, log parsing and the content-addressed cache.

Tests marked ``nvcc`` run the real compiler (CI has it); they are skipped, with the
reason, only where no nvcc is found. The rest fake nvcc with a small shell script or by
replacing ``argus_cutlass.build.nvcc._run_nvcc``.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from argus_cutlass.build import cache, nvcc
from argus_cutlass.build.toolchain import (
    CutlassHeaders,
    Nvcc,
    Toolchain,
    find_cutlass,
    find_nvcc,
    parse_nvcc_version,
)
from argus_cutlass.errors import CompileError, ToolchainError

FAKE_VERSION = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 12.8, V12.8.93\n"

# Captured ptxas -v output of the default GEMM (names shortened) plus a C7510 report.
PTXAS_OK_LOG = textwrap.dedent("""\
    ptxas info    : 11 bytes gmem
    ptxas info    : Compiling entry function '_ZN7cutlass13device_kernelIN4gemmEEEvNT_6ParamsE' for 'sm_90a'
    ptxas info    : Function properties for _ZN7cutlass13device_kernelIN4gemmEEEvNT_6ParamsE
        0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
    ptxas info    : Used 168 registers, used 2 barriers
    ptxas info    : Compiling entry function '_Z6helperv' for 'sm_90a'
    ptxas info    : Function properties for _Z6helperv
        16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
    ptxas info    : Used 40 registers, used 0 barriers, 1024 bytes smem, 368 bytes cmem[0]
    ptxas info    : Compile time = 251.212 ms
""")
C7510_INFO = (
    "ptxas info    : (C7510) Potential Performance Loss: wgmma.mma_async instructions are "
    "serialized due to the presence of Extern calls in the function "
    "'_ZN7cutlass13device_kernelIN4gemmEEEvNT_6ParamsE'"
)
C7510_WARNING = (
    "ptxas /tmp/tmpxft_0001_k.ptx, line 812; warning : (C7510) Potential Performance Loss: "
    "wgmma.mma_async instructions are serialized due to insufficient register resources "
    "for the wgmma pipeline in the function '_Z4gemmv'"
)

TINY_KERNEL = textwrap.dedent("""\
    #include <cuda_runtime.h>
    __global__ void tiny_kernel(float* x) { x[threadIdx.x] *= 2.0f; }
    extern "C" int tiny(float* x, cudaStream_t s) { tiny_kernel<<<1, 32, 0, s>>>(x); return 0; }
""")


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))


def _fake_nvcc(dir_: Path, version_text: str = FAKE_VERSION) -> Path:
    path = dir_ / "nvcc"
    path.write_text(f"#!/bin/sh\ncat <<'EOF'\n{version_text}EOF\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _fake_toolchain(tmp_path: Path) -> Toolchain:
    inc = tmp_path / "inc"
    return Toolchain(
        Nvcc("/fake/nvcc", (12, 8), FAKE_VERSION.strip()),
        CutlassHeaders(inc, inc / "util", "4.2.0", "test"),
    )


# ---- toolchain ---------------------------------------------------------------------------


def test_parse_nvcc_version():
    assert parse_nvcc_version(FAKE_VERSION) == (12, 8)
    with pytest.raises(ToolchainError) as info:
        parse_nvcc_version("something else")
    assert info.value.rule == "toolchain.nvcc_version"


def test_argus_nvcc_is_used(tmp_path, monkeypatch):
    fake = _fake_nvcc(tmp_path)
    monkeypatch.setenv("ARGUS_NVCC", str(fake))
    found = find_nvcc()
    assert found.path == str(fake.resolve())
    assert found.version == (12, 8)
    assert "release 12.8" in found.version_string


def test_cuda_home_is_searched(tmp_path, monkeypatch):
    (tmp_path / "cuda" / "bin").mkdir(parents=True)
    fake = _fake_nvcc(tmp_path / "cuda" / "bin")
    monkeypatch.delenv("ARGUS_NVCC", raising=False)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    assert find_nvcc().path == str(fake.resolve())


def test_missing_nvcc_names_what_and_how(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGUS_NVCC", str(tmp_path / "no-such-nvcc"))
    with pytest.raises(ToolchainError) as info:
        find_nvcc()
    err = info.value
    assert err.rule == "toolchain.nvcc"
    assert "ARGUS_NVCC" in str(err) and "no-such-nvcc" in str(err)
    assert "CUDA toolkit 12.4" in str(err) and "set ARGUS_NVCC" in str(err)


def test_nothing_on_path(tmp_path, monkeypatch):
    monkeypatch.delenv("ARGUS_NVCC", raising=False)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolchainError) as info:
        find_nvcc()
    assert info.value.rule == "toolchain.nvcc" and "nvcc not found" in str(info.value)


def test_old_nvcc_refused(tmp_path, monkeypatch):
    fake = _fake_nvcc(tmp_path, "Cuda compilation tools, release 11.8, V11.8.89\n")
    monkeypatch.setenv("ARGUS_NVCC", str(fake))
    with pytest.raises(ToolchainError) as info:
        find_nvcc()
    assert info.value.rule == "toolchain.nvcc_version" and "CUDA 11.8" in str(info.value)


def test_cutlass_from_wheel(monkeypatch):
    monkeypatch.delenv("CUTLASS_PATH", raising=False)
    headers = find_cutlass()
    assert headers.source == "nvidia-cutlass wheel"
    assert (headers.include / "cute" / "tensor.hpp").is_file()
    assert (headers.util_include / "cutlass" / "util").is_dir()
    assert headers.version.startswith("4.")


def test_cutlass_lookup_does_not_import_cutlass_library():
    code = ("import sys; from argus_cutlass.build.toolchain import find_cutlass; find_cutlass(); "
            "print('cutlass_library' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "CUTLASS_PATH"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "False"


def test_cutlass_path_override(tmp_path, monkeypatch):
    root = tmp_path / "cutlass"
    (root / "include" / "cutlass").mkdir(parents=True)
    (root / "include" / "cute").mkdir(parents=True)
    (root / "tools" / "util" / "include" / "cutlass" / "util").mkdir(parents=True)
    (root / "include" / "cutlass" / "cutlass.h").write_text("")
    (root / "include" / "cute" / "tensor.hpp").write_text("")
    (root / "include" / "cutlass" / "version.h").write_text(
        "#define CUTLASS_MAJOR 3\n#define CUTLASS_MINOR 9\n#define CUTLASS_PATCH 2\n")
    monkeypatch.setenv("CUTLASS_PATH", str(root))
    headers = find_cutlass()
    assert headers.source == "CUTLASS_PATH" and headers.version == "3.9.2"
    assert headers.include_flags() == (f"-I{root / 'include'}", f"-I{root / 'tools/util/include'}")


def test_cutlass_path_incomplete(tmp_path, monkeypatch):
    monkeypatch.setenv("CUTLASS_PATH", str(tmp_path))
    with pytest.raises(ToolchainError) as info:
        find_cutlass()
    assert info.value.rule == "toolchain.cutlass"
    assert "cutlass.h" in str(info.value) and "pip install nvidia-cutlass" in str(info.value)


def test_no_cutlass_at_all(monkeypatch):
    import importlib.util

    monkeypatch.delenv("CUTLASS_PATH", raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ToolchainError) as info:
        find_cutlass()
    assert info.value.rule == "toolchain.cutlass"
    assert "CUTLASS_PATH is unset" in str(info.value)
    assert "pip install nvidia-cutlass, or set CUTLASS_PATH" in str(info.value)


# ---- log parsing -------------------------------------------------------------------------


def test_parse_ptxas_resources():
    funcs = nvcc.parse_ptxas_resources(PTXAS_OK_LOG)
    assert [f.registers for f in funcs] == [168, 40]
    assert funcs[0].spill_store_bytes == 0 and funcs[0].stack_bytes == 0
    assert (funcs[1].stack_bytes, funcs[1].spill_store_bytes, funcs[1].spill_load_bytes) == (16, 8, 4)
    assert funcs[1].smem_bytes == 1024
    assert nvcc.parse_ptxas_resources("no ptxas here") == ()


@pytest.mark.parametrize("line", [C7510_INFO, C7510_WARNING])
def test_c7510_detected(line):
    log = PTXAS_OK_LOG + line + "\n"
    assert nvcc.find_c7510(log) == [line]
    with pytest.raises(CompileError) as info:
        nvcc.check_c7510(log, "my_kernel")
    err = info.value
    assert err.rule == "ptxas.C7510"
    assert "serialized the wgmma.mma_async instructions of my_kernel" in str(err)
    assert "(C7510) Potential Performance Loss" in str(err)
    assert err.log == log


def test_no_c7510_in_clean_log():
    assert nvcc.find_c7510(PTXAS_OK_LOG) == []
    nvcc.check_c7510(PTXAS_OK_LOG)


def test_relevant_lines_keeps_errors_not_noise():
    noise = [f'          detected during instantiation of "cute::foo<{i}>" at line {i}' for i in range(500)]
    log = "\n".join(
        noise[:200]
        + ['k.cu(42): error: identifier "undefined_thing" is undefined',
           "      undefined_thing();", "      ^", ""]
        + noise[200:]
        + ["1 error detected in the compilation of \"k.cu\"."]
    )
    text = nvcc.relevant_lines(log)
    assert 'k.cu(42): error: identifier "undefined_thing" is undefined' in text
    assert "undefined_thing();" in text
    assert "1 error detected" in text
    assert len(text.splitlines()) < 20


# ---- compile_cu with a fake nvcc (no compiler needed) -------------------------------------


def _fake_run(log_text: str, calls: list, rc: int = 0):
    def run(cmd, timeout_s):
        calls.append(cmd)
        out = Path(cmd[cmd.index("-o") + 1])
        if rc == 0:
            out.write_bytes(b"\x7fELF fake")
        return subprocess.CompletedProcess(cmd, rc, stdout="", stderr=log_text)

    return run


def test_compile_cu_caches_and_parses(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(nvcc, "_run_nvcc", _fake_run(PTXAS_OK_LOG, calls))
    tc = _fake_toolchain(tmp_path)
    first = nvcc.compile_cu("// src", "k1", "shared", toolchain=tc)
    assert not first.cached and len(calls) == 1
    assert (first.registers, first.spill_bytes, first.stack_bytes) == (168, 12, 16)
    assert first.path.read_bytes() == b"\x7fELF fake"
    assert first.log_path.parent == first.path.parent and "Used 168 registers" in first.log_path.read_text()
    assert (first.path.parent / "k1.cu").read_text() == "// src"
    cmd = calls[0]
    for flag in ("-std=c++17", "-O3", "-DNDEBUG", "--expt-relaxed-constexpr",
                 "-gencode=arch=compute_90a,code=sm_90a", "--shared", "-fPIC", "-v"):
        assert flag in cmd
    assert f"-I{tc.cutlass.include}" in cmd and f"-I{tc.cutlass.util_include}" in cmd

    second = nvcc.compile_cu("// src", "k1", "shared", toolchain=tc)
    assert second.cached and len(calls) == 1  # nvcc did not run again
    assert second.path == first.path and second.registers == 168 and second.key == first.key

    nvcc.compile_cu("// src changed", "k1", "shared", toolchain=tc)
    nvcc.compile_cu("// src", "k1", "shared", ("-lineinfo",), toolchain=tc)
    nvcc.compile_cu("// src", "k1", "cubin", toolchain=tc)
    assert len(calls) == 4  # source, flags and kind are all in the key
    assert "-cubin" in calls[3] and "--shared" not in calls[3]
    other = nvcc.compile_cu("// src", "k1", "shared", toolchain=tc, key_parts=("program=abc",))
    assert len(calls) == 5 and not other.cached and other.key != first.key  # the program fingerprint too
    assert "program=abc" not in calls[4]  # a key part, not a flag


def test_orchestrator_keys_the_cache_by_program_fingerprint(tmp_path, monkeypatch):
    """Two programs that print the same source still get two cache entries: the orchestrator
    hashes the program's full fingerprint into the key (STYLE (b) 4)."""
    from argus_cutlass.generate import GeneratedKernel, compile_kernel

    calls: list = []
    monkeypatch.setattr(nvcc, "_run_nvcc", _fake_run(PTXAS_OK_LOG, calls))
    tc = _fake_toolchain(tmp_path)

    class _Program:
        def __init__(self, fp: str) -> None:
            self.fp = fp

        def fingerprint(self) -> str:
            return self.fp

    a = GeneratedKernel("kern", None, None, _Program("a" * 64), None, "// same source")
    b = GeneratedKernel("kern", None, None, _Program("b" * 64), None, "// same source")
    first, again, other = (compile_kernel(k, toolchain=tc) for k in (a, a, b))
    assert again.cached and again.key == first.key
    assert not other.cached and other.key != first.key and len(calls) == 2


def test_cache_key_covers_versions():
    base = cache.cache_key("s", ["-O3"], "nvcc 12.8", "4.2.0", "shared")
    assert base != cache.cache_key("s", ["-O3"], "nvcc 12.9", "4.2.0", "shared")
    assert base != cache.cache_key("s", ["-O3"], "nvcc 12.8", "4.3.0", "shared")
    assert base != cache.cache_key("s", ["-O3"], "nvcc 12.8", "4.2.0", "ptx")
    assert base != cache.cache_key("s", ["-O2"], "nvcc 12.8", "4.2.0", "shared")
    assert base == cache.cache_key("s", ("-O3",), "nvcc 12.8", "4.2.0", "shared")


def test_c7510_fails_the_build(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(nvcc, "_run_nvcc", _fake_run(PTXAS_OK_LOG + C7510_INFO + "\n", calls))
    tc = _fake_toolchain(tmp_path)
    with pytest.raises(CompileError) as info:
        nvcc.compile_cu("// src", "slow_kernel", "shared", toolchain=tc)
    assert info.value.rule == "ptxas.C7510" and "slow_kernel" in str(info.value)
    # not cached: the next call runs nvcc again
    with pytest.raises(CompileError):
        nvcc.compile_cu("// src", "slow_kernel", "shared", toolchain=tc)
    assert len(calls) == 2


def test_timeout_is_a_compile_error(tmp_path, monkeypatch):
    def run(cmd, timeout_s):
        raise subprocess.TimeoutExpired(cmd, timeout_s, output=b"partial", stderr=b"")

    monkeypatch.setattr(nvcc, "_run_nvcc", run)
    monkeypatch.setenv("ARGUS_NVCC_TIMEOUT", "7")
    with pytest.raises(CompileError) as info:
        nvcc.compile_cu("// src", "k", "shared", toolchain=_fake_toolchain(tmp_path))
    assert info.value.rule == "nvcc.timeout" and "longer than 7 s" in str(info.value)
    assert "ARGUS_NVCC_TIMEOUT" in str(info.value)


def test_bad_name_and_kind(tmp_path):
    tc = _fake_toolchain(tmp_path)
    with pytest.raises(CompileError) as info:
        nvcc.compile_cu("", "not a name", "shared", toolchain=tc)
    assert info.value.rule == "nvcc.name"
    with pytest.raises(CompileError) as info:
        nvcc.compile_cu("", "k", "fatbin", toolchain=tc)
    assert info.value.rule == "nvcc.kind" and "'fatbin'" in str(info.value)


def test_compile_many_order_and_errors(tmp_path, monkeypatch):
    calls: list = []

    def run(cmd, timeout_s):
        calls.append(cmd)
        src = Path(cmd[-1]).read_text()
        if "bad" in src:
            return subprocess.CompletedProcess(cmd, 1, "", "x.cu(1): error: bad thing\n")
        Path(cmd[cmd.index("-o") + 1]).write_bytes(src.encode())
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(nvcc, "_run_nvcc", run)
    monkeypatch.setattr(nvcc, "find_toolchain", lambda: _fake_toolchain(tmp_path))
    jobs = [("// a", "ka", "shared"), nvcc.CompileJob("// bad", "kb", "ptx"),
            {"source": "// c", "name": "kc", "kind": "cubin"}]
    results = nvcc.compile_many(jobs, max_workers=3, return_exceptions=True)
    assert results[0].path.read_text() == "// a" and results[2].path.suffix == ".cubin"
    assert isinstance(results[1], CompileError) and "error: bad thing" in str(results[1])
    with pytest.raises(CompileError):
        nvcc.compile_many(jobs, max_workers=2)
    assert nvcc.compile_many([]) == []


# ---- cache atomicity ----------------------------------------------------------------------


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path):
    target = tmp_path / "d" / "f.bin"
    cache.atomic_write(target, b"one")
    cache.atomic_write(target, "two")
    assert target.read_text() == "two"
    assert sorted(p.name for p in target.parent.iterdir()) == ["f.bin"]


def test_atomic_write_failure_keeps_old_file(tmp_path, monkeypatch):
    target = tmp_path / "f.bin"
    cache.atomic_write(target, b"old")

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        cache.atomic_write(target, b"new")
    monkeypatch.undo()
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]  # temp file removed


def test_incomplete_entry_is_not_a_hit(tmp_path):
    art = tmp_path / "built.so"
    art.write_bytes(b"so")
    stored = cache.store("k" * 64, "kern", "shared", art, "log", "src", {"seconds": 1.0})
    assert cache.lookup("k" * 64)["path"] == stored["path"]
    assert json.loads((Path(stored["path"]).parent / "meta.json").read_text())["name"] == "kern"
    (Path(stored["path"]).parent / "meta.json").unlink()  # a crash before the last write
    assert cache.lookup("k" * 64) is None


# ---- real nvcc ----------------------------------------------------------------------------


def test_every_tile_width_of_the_space_prints_an_mma_type_its_includes_declare():
    """Each tile_n of the search space (wgmma N) renders with an MMA type the printed headers declare: CuTe's alias
    ``cute::SM90_64xNx16_...`` for N in its default set (cute/atom/mma_traits_sm90_gmma.hpp), else the arch struct
    ``cute::SM90::GMMA::MMA_64xNx16_...`` with cute/arch/mma_sm90_gmma_ext.hpp included (session 30: the alias of an
    extended N compiled nowhere, the verifier had accepted it). Render only; the nvcc checks below compile two."""
    from argus_cutlass.dsl.atoms import GMMA_BASE_N
    from argus_cutlass.kernels.gemm.config import GemmConfig
    from argus_cutlass.kernels.gemm.program import build_program
    from argus_cutlass.kernels.gemm.space import GemmSpace
    from argus_cutlass.render.gemm import render_gemm

    ext = '#include "cute/arch/mma_sm90_gmma_ext.hpp"'
    widths = GemmSpace().fragments["tile_n"].domain()
    assert any(n not in GMMA_BASE_N for n in widths)
    for n in widths:
        epi_n = max(e for e in (8, 16, 32) if n % e == 0)
        src = render_gemm(build_program(GemmConfig(tile_n=n, cluster_m=1, stages=3, epi_n=epi_n)))
        if n in GMMA_BASE_N:
            assert f"using MmaOp = cute::SM90_64x{n}x16_F32BF16BF16_SS<" in src and ext not in src, n
        else:
            assert f"using MmaOp = cute::SM90::GMMA::MMA_64x{n}x16_F32BF16BF16_SS<" in src and ext in src, n


def test_moe_layer_with_an_extended_wgmma_n_includes_its_header():
    """The MoE layer prints its grouped GEMMs with gemm/traits.j2: an n-tile outside CuTe's default wgmma N set
    (gu_tile_n 160) prints the arch struct, and the layer includes cute/arch/mma_sm90_gmma_ext.hpp (session 30: it
    did not); the default tiles do not include it."""
    from argus_cutlass.kernels.moe.config import MoEConfig
    from argus_cutlass.kernels.moe.problem import MoEProblem
    from argus_cutlass.kernels.moe.program import build_layer
    from argus_cutlass.render.moe import render_moe

    problem = MoEProblem(tokens=64, experts=8, topk=2, hidden=256, ffn=256)
    ext = '#include "cute/arch/mma_sm90_gmma_ext.hpp"'
    src = render_moe(build_layer(MoEConfig(gu_tile_n=160, dn_tile_n=160, epi_n=16, gu_stages=4, dn_stages=4), problem))
    assert ext in src and "cute::SM90::GMMA::MMA_64x160x16_F32BF16BF16_SS<" in src
    assert ext not in render_moe(build_layer(MoEConfig(), problem))


@pytest.mark.nvcc
@pytest.mark.parametrize(
    "cfg_args",
    [
        {},  # the large-problem default: 128x256 cooperative, cluster 2x1
        # fp32 output (its smem model differs) with M-major A / N-major B
        {"out_dtype": "fp32", "layout": "nt", "stages": 3},
        # the small-M ping-pong tile, fp16
        {"dtype": "fp16", "out_dtype": "fp16", "layout": "tt", "tile_m": 64, "tile_n": 128,
         "cluster_m": 1, "stages": 8, "schedule": "pingpong", "epi_m": 64},
        # a decode tile with four accumulator sets (KLoop.acc_sets): the sets' registers statically indexed
        {"swap_ab": True, "tile_m": 64, "tile_n": 16, "cluster_m": 1, "stages": 12, "schedule": "pingpong",
         "epi_m": 64, "epi_n": 16, "acc_sets": 4},
        # split-K with the nondeterministic reduction (host ReductionMode::Nondeterministic)
        {"swap_ab": True, "tile_m": 128, "tile_n": 16, "cluster_m": 1, "stages": 8, "epi_m": 128, "epi_n": 16,
         "scheduler": "splitk", "splits": 4, "reduction": "nondeterministic"},
        # wgmma N outside CuTe's default set (session 30: the verifier accepted N = 56 / 112 / 168, nvcc failed on
        # the alias that only cute/atom/mma_traits_sm90_gmma_ext.hpp declares; the arch struct is printed now)
        {"tile_m": 128, "tile_n": 112, "cluster_m": 1, "stages": 7, "epi_n": 16},
        {"swap_ab": True, "tile_m": 64, "tile_n": 56, "cluster_m": 1, "stages": 12, "schedule": "pingpong",
         "epi_m": 64, "epi_n": 8},
    ],
    ids=["coop-bf16-tn", "coop-fp32out-nt", "pingpong-fp16-tt", "swapab-acc-sets-4", "swapab-splitk4-nd",
         "coop-extended-n112", "swapab-extended-n56"],
)
def test_gemm_compiles_to_ptx_with_wgmma_and_tma(cfg_args):
    """The front end also evaluates the template's static_asserts (the program's relations, the
    CuTe layouts against the node sizes)."""
    from argus_cutlass.kernels.gemm.config import GemmConfig
    from argus_cutlass.kernels.gemm.program import build_program
    from argus_cutlass.render.gemm import render_gemm

    program = build_program(GemmConfig(**cfg_args))
    art = nvcc.compile_cu(render_gemm(program), program.kernel_name(), "ptx")
    ptx = art.path.read_text()
    assert f"wgmma.mma_async.sync.aligned.m64n{program.mma.op.n}k16" in ptx
    assert "cp.async.bulk.tensor" in ptx
    assert art.path.suffix == ".ptx" and not art.cached


@pytest.mark.nvcc
@pytest.mark.parametrize("release", [True, False], ids=["release-barrier", "mutant-no-release"])
def test_cluster_k_compiles_with_its_reduction_as_the_program_states(release):
    """Cluster-K (schedule node clusterk): the partial sums go through distributed shared memory (``mapa`` +
    ``ld.shared::cluster``) between cluster barriers with release / acquire semantics; the node's
    ``reduce_release`` decides whether the second barrier is in the kernel (the mutant without it compiles to
    one barrier pair: the field reaches the .cu)."""
    from argus_cutlass.kernels.gemm.config import GemmConfig
    from argus_cutlass.kernels.gemm.program import build_program
    from argus_cutlass.render.gemm import render_gemm

    program = build_program(GemmConfig(swap_ab=True, tile_m=128, tile_n=16, cluster_m=1, stages=8, epi_m=128,
                                       epi_n=16, scheduler="clusterk", splits=8))
    if not release:
        program = program.replace_node("schedule", reduce_release=False)
    art = nvcc.compile_cu(render_gemm(program), program.kernel_name(), "ptx")
    ptx = art.path.read_text()
    assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor" in ptx
    assert "mapa.shared::cluster" in ptx and "ld.shared::cluster.f32" in ptx
    assert ptx.count("barrier.cluster.arrive.release") == (2 if release else 1)
    assert ptx.count("barrier.cluster.wait.acquire") == (2 if release else 1)


@pytest.mark.nvcc
def test_real_cache_hit_runs_no_nvcc(monkeypatch):
    first = nvcc.compile_cu(TINY_KERNEL, "tiny", "shared")
    assert not first.cached and first.registers is not None and first.spill_bytes == 0

    def no_nvcc(cmd, timeout_s):
        raise AssertionError("nvcc ran on a cache hit")

    monkeypatch.setattr(nvcc, "_run_nvcc", no_nvcc)
    second = nvcc.compile_cu(TINY_KERNEL, "tiny", "shared")
    assert second.cached and second.path == first.path and second.registers == first.registers


@pytest.mark.nvcc
def test_broken_source_shows_error_lines():
    broken = TINY_KERNEL.replace("x[threadIdx.x] *= 2.0f;", "x[threadIdx.x] *= undefined_thing;")
    with pytest.raises(CompileError) as info:
        nvcc.compile_cu(broken, "tiny_broken", "shared")
    err = info.value
    text = str(err)
    assert err.rule == "nvcc.compile"
    assert "[nvcc.compile] nvcc failed building tiny_broken (shared, exit" in text
    assert 'identifier "undefined_thing" is undefined' in text
    log_path = Path(text.rsplit("full log: ", 1)[1].splitlines()[0])
    assert log_path.is_file() and "undefined_thing" in log_path.read_text()
    assert "undefined_thing" in err.log
    assert len(text.splitlines()) < 20


@pytest.mark.nvcc
@pytest.mark.parametrize("kind,cfg_args", [
    ("shared", {"swap_ab": True, "tile_m": 64, "tile_n": 16, "cluster_m": 1, "stages": 8, "schedule": "pingpong",
                "epi_m": 64, "epi_n": 16}),
    ("ptx", {"swap_ab": True, "tile_m": 128, "tile_n": 16, "cluster_m": 1, "stages": 8, "epi_m": 128, "epi_n": 16,
             "scheduler": "clusterk", "splits": 4}),
    ("ptx", {"tile_m": 128, "tile_n": 128, "cluster_m": 2, "stages": 6, "scheduler": "streamk", "cluster_n": 1}),
], ids=["swapab-persistent-so", "swapab-clusterk4", "coop-streamk-cluster2"])
def test_pdl_gemm_compiles_with_griddepcontrol_and_a_programmatic_launch(kind, cfg_args):
    """Launch node ``pdl`` (GemmConfig.pdl, session 45): the kernel waits (griddepcontrol.wait) after its prologue and
    before its roles, then lets a programmatic successor launch; the host adds the programmatic-serialization launch
    attribute after the cluster one. The same configuration without pdl prints neither."""
    from argus_cutlass.kernels.gemm.config import GemmConfig
    from argus_cutlass.kernels.gemm.program import build_program
    from argus_cutlass.render.gemm import render_gemm

    plain = render_gemm(build_program(GemmConfig(**cfg_args)))
    program = build_program(GemmConfig(**cfg_args, pdl=True))
    src = render_gemm(program)
    assert "griddepcontrol" not in plain and "ProgrammaticStreamSerialization" not in plain
    body = src[src.index("__global__ void"):]
    wait = body.index("griddepcontrol.wait;")
    assert body.index("fence_barrier_init") < wait < body.index("producer_mainloop(")   # after the prologue
    assert wait < body.index("griddepcontrol.launch_dependents;")
    assert src.count("cudaLaunchAttributeProgrammaticStreamSerialization") == 1
    art = nvcc.compile_cu(src, program.kernel_name(), kind)
    if kind == "ptx":
        ptx = art.path.read_text()
        assert "griddepcontrol.wait" in ptx and "griddepcontrol.launch_dependents" in ptx
        assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor" in ptx
    else:
        assert art.path.suffix == ".so" and art.spill_bytes == 0


def test_a_launch_node_pdl_is_refused_where_the_template_does_not_print_it():
    """Launch node pdl reaches the .cu of a GEMM only: an attention program, or a grouped GEMM part of an MoE layer
    (whose programmatic launch is its layer node's, rule moe.pdl), with a launch node that says pdl is refused at
    render (render.program) rather than printed without it."""

    from argus_cutlass.errors import ConfigError
    from argus_cutlass.kernels.attention.config import AttentionConfig
    from argus_cutlass.kernels.attention.program import build_program as build_attention
    from argus_cutlass.render.attention import render_attention

    prog = build_attention(AttentionConfig(head_dim=128, causal=True, tile_m=128, tile_n=128))
    render_attention(prog)
    with pytest.raises(ConfigError) as exc:
        render_attention(prog.replace_node("launch", None, pdl=True))
    assert exc.value.rule == "render.program" and "pdl" in str(exc.value)

    from argus_cutlass.kernels.moe.config import MoEConfig
    from argus_cutlass.kernels.moe.problem import MoEProblem
    from argus_cutlass.kernels.moe.program import build_layer
    from argus_cutlass.render.moe import render_moe

    layer = build_layer(MoEConfig(), MoEProblem(tokens=64, experts=8, topk=2, hidden=256, ffn=256))
    render_moe(layer)
    bad = layer.replace_node("gate_up", "launch", None, pdl=True)
    assert bad.program("gate_up").launch.pdl
    with pytest.raises(ConfigError) as exc:
        render_moe(bad)
    assert exc.value.rule == "render.program" and "layer node's pdl" in str(exc.value)


@pytest.mark.nvcc
def test_stream_k_entry_refuses_an_iteration_space_past_32_bits(tmp_path, monkeypatch):
    """Adversarial review, session 45: CUTLASS 4.2's stream-K / split-K scheduler keeps k-tile positions in uint32_t;
    the entry refuses (code 11, rule problem.iteration_space) a problem whose output tiles x k-tiles reach 2^32,
    before any CUDA call (here with fake pointers and no GPU), and accepts the size below it up to the first CUDA
    call (the architecture guard, code 9 or a CUDA error, on a machine without a GPU). A persistent kernel prints no
    such check."""
    from argus_cutlass.errors import LaunchError
    from argus_cutlass.kernels.gemm.config import GemmConfig
    from argus_cutlass.kernels.gemm.library import GemmKernelLibrary
    from argus_cutlass.kernels.gemm.program import build_program
    from argus_cutlass.render.gemm import render_gemm

    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))
    cfg = GemmConfig(tile_n=128, cluster_m=1, stages=6, scheduler="splitk", splits=2)
    program = build_program(cfg)
    src = render_gemm(program)
    assert "kErrIterSpace" in src and "return kErrIterSpace" in src
    assert "return kErrIterSpace" not in render_gemm(build_program(GemmConfig()))
    lib = GemmKernelLibrary(nvcc.compile_cu(src, program.kernel_name(), "shared").path, program.kernel_name())
    m = n = 2**16   # 512 x 512 tiles of 128 x 128 = 2^18; K = 2^20: 2^14 k-tiles of 64 -> 2^32
    with pytest.raises(LaunchError) as info:
        lib(0x1000, 0x2000, None, 0x3000, m, n, 2**20, 2**20, 2**20, n, n, 1.0, 0.0)
    assert info.value.rule == "problem.iteration_space" and "returned 11" in str(info.value)
    with pytest.raises(LaunchError) as info:   # one k-tile fewer: past this check, stopped at the first CUDA call
        lib(0x1000, 0x2000, None, 0x3000, m, n, 2**20 - 64, 2**20, 2**20, n, n, 1.0, 0.0)
    assert info.value.rule != "problem.iteration_space"
