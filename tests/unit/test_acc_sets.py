"""Accumulator sets of the GEMM k loop (KLoop.acc_sets, GemmConfig.acc_sets; rule k.acc_sets): the DSL's
well-formedness, the verifier's proof and its counterexamples, and what the template prints (no GPU)."""

from __future__ import annotations

import pytest

from argus_cutlass.errors import ConfigError
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.program import build_program
from argus_cutlass.render.gemm import render_gemm
from argus_cutlass.verify import verify_gemm
from argus_cutlass.verify.absint import check_acc_sets

DECODE = GemmConfig(swap_ab=True, tile_m=64, tile_n=16, schedule="pingpong", cluster_m=1, epi_m=64, epi_n=16,
                    stages=12)


@pytest.mark.parametrize("sets", [1, 2, 4])
def test_sets_verify_and_keep_the_one_set_kernel_unchanged(sets):
    program = build_program(DECODE.replace(acc_sets=sets))
    rep = verify_gemm(program, smt=False)
    assert rep.ok, rep.format()
    assert any(p.rule == "k.acc_sets" for p in rep.proofs)
    loop = program.kloop
    assert (loop.acc_sets, loop.acc_zeroed, loop.acc_summed) == (sets, sets, tuple(range(1, sets)))
    text = render_gemm(program)
    if sets == 1:   # the default prints what it printed before the field existed: same name, no set code
        assert program.kernel_name().endswith("_swapab_217d10cc") and "kAccSets" not in text
    else:
        assert f"_as{sets}_" in program.kernel_name() and f"constexpr int kAccSets = {sets};" in text
        assert "float part[kAccSets - 1][kRepsM][kAccRegs];" in text and "kb < kAccZeroed" in text


def test_sets_must_divide_the_k_blocks():
    """Refused when the program is built, naming the field (config.acc_sets), not a line of program.py."""
    with pytest.raises(ConfigError) as exc:
        build_program(DECODE.replace(acc_sets=3))
    assert exc.value.rule == "config.acc_sets" and exc.value.fields == {"acc_sets": 3, "tile_k": DECODE.tile_k}
    assert "GemmConfig acc_sets=3" in str(exc.value) and "acc_sets must divide" in str(exc.value)


@pytest.mark.parametrize("change,needle", [
    ({"acc_zeroed": 1}, "set 1 is never started with ScaleOut::Zero"),
    ({"acc_summed": (1, 2)}, "k-block 3 of k-tile 0"),
    ({"acc_summed": (1, 2, 3, 3)}, "reaches D 2 times"),
    ({"acc_summed": (2, 1, 3)}, None),   # any order of the sums is fine (fp32 addition order aside)
])
def test_wrong_zeroing_or_summing_is_a_counterexample(change, needle):
    program = build_program(DECODE.replace(acc_sets=4))
    program = program.replace_node("loop", "k", **change)
    proofs, violations = check_acc_sets(program)
    if needle is None:
        assert proofs and not violations
        return
    assert not proofs and len(violations) == 1
    v = violations[0]
    assert needle in v.message and v.counterexample is not None and v.counterexample.rule == "k.acc_sets"
    assert v.counterexample.thread and v.counterexample.register   # a concrete thread and register of D


def test_rezeroing_a_set_loses_its_first_block():
    program = build_program(DECODE.replace(acc_sets=2))
    program = program.replace_node("loop", "k", acc_zeroed=3)
    _, violations = check_acc_sets(program)
    assert violations and "k-block 0 of k-tile 0" in violations[0].message and "0 times" in violations[0].message


def test_register_rule_counts_every_set():
    """Review, session 25: each set is a whole accumulator fragment; a wide tile's sets overflow the consumer's
    setmaxnreg budget and rule ``registers`` refuses it (ptxas would serialize the wgmmas, C7510)."""
    from argus_cutlass.kernels.gemm.space import feasible
    from argus_cutlass.plan.resources import accumulator_registers

    assert accumulator_registers(build_program(DECODE.replace(acc_sets=4))) == 4 * 16 // 2
    ok, why = feasible(GemmConfig(tile_m=128, tile_n=256, acc_sets=4))
    assert not ok and any(w.startswith("registers:") and "x 4 accumulator sets" in w for w in why)
    assert feasible(GemmConfig(tile_m=128, tile_n=256))[0]
