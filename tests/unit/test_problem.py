"""GemmProblem: default leading dimensions and every validation rule, with message text."""

from __future__ import annotations

import pytest

from argus_cutlass.errors import ProblemError
from argus_cutlass.kernels.gemm.problem import GemmProblem


def _error(problem: GemmProblem) -> ProblemError:
    with pytest.raises(ProblemError) as info:
        problem.validate()
    return info.value


@pytest.mark.parametrize(
    "layout, lda, ldb",
    [("tn", 64, 64), ("nt", 32, 48), ("nn", 32, 64), ("tt", 64, 48)],
)
def test_default_leading_dimensions(layout, lda, ldb):
    # M=32, N=48, K=64: A 't' -> K, 'n' -> M; B 'n' (N x K) -> K, 't' (K x N) -> N; C/D -> N
    p = GemmProblem(32, 48, 64, "bf16", "bf16", layout)
    assert (p.lda, p.ldb, p.ldc, p.ldd) == (lda, ldb, 48, 48)
    assert p.validate() is p


def test_explicit_leading_dimensions_kept():
    p = GemmProblem(32, 48, 64, lda=128, ldb=72, ldc=56, ldd=64)
    assert (p.lda, p.ldb, p.ldc, p.ldd) == (128, 72, 56, 64)
    p.validate()


def test_operand_storage_shapes():
    ops = GemmProblem(32, 48, 64, "fp16", "fp32", "nt", ldd=52).operands()
    assert ops["A"].storage_shape == (64, 32)  # column-major M x K: K rows of M
    assert ops["B"].storage_shape == (64, 48)  # K x N row-major
    assert ops["D"].storage_shape == (32, 52)
    assert ops["D"].storage_bytes == 32 * 52 * 4


@pytest.mark.parametrize("mnk, bad", [((0, 8, 8), "M=0"), ((8, -1, 8), "N=-1"), ((8, 8, 0), "K=0")])
def test_size_rule(mnk, bad):
    err = _error(GemmProblem(*mnk))
    assert err.rule == "problem.size"
    assert bad in str(err) and ">= 1" in str(err)


def test_size_rule_int32_limit():
    err = _error(GemmProblem(2**31, 8, 8))
    assert err.rule == "problem.size" and "2**31-1" in str(err)


def test_dtype_rule():
    err = _error(GemmProblem(8, 8, 8, dtype="fp8"))
    assert err.rule == "problem.dtype"
    assert "dtype='fp8'" in str(err) and "bf16" in str(err)
    err = _error(GemmProblem(8, 8, 8, out_dtype="int8"))
    assert err.rule == "problem.dtype" and "out_dtype='int8'" in str(err) and "C and D" in str(err)


def test_layout_rule():
    err = _error(GemmProblem(8, 8, 8, layout="tx"))
    assert err.rule == "problem.layout"
    assert "layout='tx'" in str(err) and "'tn', 'nt', 'nn', 'tt'" in str(err)


def test_ld_rule():
    err = _error(GemmProblem(64, 64, 64, layout="tn", lda=56))
    assert err.rule == "problem.ld"
    text = str(err)
    assert "A (bf16, layout 'tn', row-major M x K" in text
    assert "lda=56 is smaller than the contiguous extent K=64" in text
    assert "lda >= 64" in text


def test_ld_rule_column_major_a_names_m():
    err = _error(GemmProblem(64, 64, 32, layout="nt", lda=32))
    assert err.rule == "problem.ld" and "contiguous extent M=64" in str(err)


def test_stride_alignment_rule():
    err = _error(GemmProblem(64, 64, 64, ldd=68 + 1))
    assert err.rule == "tma.stride_alignment"
    text = str(err)
    assert "D (bf16" in text and "ldd=69 x 2 bytes = 138 bytes is not a multiple of 16" in text
    assert "multiple of 8 elements, e.g. 72" in text


def test_stride_alignment_fp32_output():
    GemmProblem(64, 64, 64, out_dtype="fp32", ldd=68).validate()  # 272 bytes: fine
    err = _error(GemmProblem(64, 64, 64, out_dtype="fp32", ldd=66))
    assert err.rule == "tma.stride_alignment" and "ldd=66 x 4 bytes = 264 bytes" in str(err)


def test_contiguous_extent_m7_column_major_a():
    """The example from the design notes: M=7 with column-major A cannot use TMA."""
    err = _error(GemmProblem(7, 64, 64, "bf16", "bf16", "nt"))
    assert err.rule == "tma.contiguous_extent"
    text = str(err)
    assert "M=7" in text and "layout 'nt'" in text and "column-major" in text
    assert "not a multiple of 8 elements (16 bytes of bf16)" in text
    assert "pad M to a multiple of 8" in text and "row-major A (layout 'tt')" in text
    # a packed operand with a bad extent is one mistake, not two
    assert "stride_alignment" not in text


def test_contiguous_extent_row_major_a_is_fine_for_m7():
    GemmProblem(7, 64, 64, "bf16", "bf16", "tt").validate()


def test_contiguous_extent_k_for_k_major_operands():
    err = _error(GemmProblem(64, 64, 60, layout="tn"))
    assert err.rule == "tma.contiguous_extent"
    text = str(err)
    assert "2 problems" in text
    assert "A (bf16, layout 'tn'" in text and "B (bf16, layout 'tn'" in text and "K=60" in text


def test_contiguous_extent_n_for_d_and_n_major_b():
    err = _error(GemmProblem(64, 12, 64, out_dtype="fp32", layout="tt"))
    assert err.rule == "tma.contiguous_extent"
    assert "B (bf16, layout 'tt', stored K x N" in str(err) and "N=12" in str(err)
    assert "layout 'tn'" in str(err)  # suggests K-major B
    err = _error(GemmProblem(64, 20, 64))
    assert err.rule == "tma.contiguous_extent" and "D (bf16" in str(err) and "N=20" in str(err)
    GemmProblem(64, 12, 64, out_dtype="fp32", layout="tn").validate()  # 12 fp32 = 48 bytes: fine


def test_all_violations_listed():
    p = GemmProblem(64, 64, 64, lda=60, ldd=65)
    rules = [e.rule for e in p.violations()]
    assert rules == ["problem.ld", "tma.stride_alignment"]


def test_check_pointer():
    GemmProblem.check_pointer(0x7F0000001000, "A")
    with pytest.raises(ProblemError) as info:
        GemmProblem.check_pointer(0x7F0000001008, "B")
    assert info.value.rule == "tma.address_alignment"
    assert "B=0x7f0000001008 is not 16-byte aligned" in str(info.value)
    assert "mod 16 = 8" in str(info.value)
    with pytest.raises(ProblemError) as info:
        GemmProblem.check_pointer(0, "D")
    assert info.value.rule == "problem.pointer" and "D is a null pointer" in str(info.value)


def test_for_config():
    from argus_cutlass.kernels.gemm.config import GemmConfig

    p = GemmProblem.for_config(GemmConfig(layout="nt", out_dtype="fp32"), 128, 256, 64)
    assert (p.layout, p.dtype, p.out_dtype, p.lda, p.ldb) == ("nt", "bf16", "fp32", 128, 256)
    assert p.flops == 2 * 128 * 256 * 64


def test_c_abi_matches_the_host_template():
    """ERROR_CODES and ENTRY_SIGNATURE are the C ABI that templates/gemm/host.j2 and kernel.cu.j2
    print: every enumerator of ``enum ErrorCode`` (1..8, 10, 11, and 9: the architecture guard) has its code
    here, the error strings agree, and the entry's parameter list is the signature."""
    import re
    from importlib import resources

    from argus_cutlass.kernels.gemm.problem import ENTRY_SIGNATURE, ERROR_CODES

    host = resources.files("argus_cutlass.templates").joinpath("gemm").joinpath("host.j2").read_text()
    enum = dict((name, int(code)) for name, code in re.findall(r"\b(kErr\w+) = (\d+),", host))
    assert sorted(enum.values()) == sorted(ERROR_CODES) == [*range(1, 12)]
    for name, code in enum.items():
        if code == 9:  # the architecture guard's text is arch_error_text() (templates/common/arch_guard.j2)
            assert f"case {name}: return arch_error_text();" in host
            continue
        text = re.search(rf"case {name}: return \"([^\"]+)\";", host).group(1)
        if code != 3:  # code 3's text names the proved bound (2^{{ bound_bits }})
            assert text == ERROR_CODES[code][1], (code, text)
    kernel = resources.files("argus_cutlass.templates").joinpath("gemm").joinpath("kernel.cu.j2").read_text()
    entry = re.search(r"int \{\{ name \}\}\(([^)]*)\) \{", kernel).group(1)
    params = [" ".join(p.split()) for p in entry.split(",")]
    assert params == [f"{t} {n}" for n, t in ENTRY_SIGNATURE]


def test_k_range():
    p = GemmProblem(64, 64, 2**24 - 1)
    p.check_k_range(24)
    with pytest.raises(ProblemError) as info:
        GemmProblem(64, 64, 2**24).check_k_range(24)
    assert info.value.rule == "problem.k_range"
    assert "K=16777216 >= 2^24" in str(info.value) and "generate the kernel for this problem" in str(info.value)


@pytest.mark.parametrize("cluster", [dict(cluster_m=3), dict(cluster_n=5), dict(cluster_m=3, cluster_n=3)])
def test_a_cluster_that_is_no_power_of_two_is_the_verifiers_not_a_traceback(cluster):
    """Review (adversarial user): ``gemm --set cluster_m=3`` was a ValueError traceback from the walk count
    (``check_walk``, run before the program is built); there is no walk to count, the program is built and
    the verifier's rule ``cluster`` rejects it."""
    from argus_cutlass.generate import build, verify
    from argus_cutlass.kernels.gemm.config import GemmConfig

    problem, cfg = GemmProblem(1, 1, 1), GemmConfig().replace(**cluster)
    assert problem.check_walk(cfg) is None
    report = verify(build(cfg, problem), smt=False)
    assert "cluster" in {v.rule for v in report.violations}
