"""The model's numeric prediction of a CTA tile (argus_cutlass.testing.probes)."""

from __future__ import annotations

import numpy as np
import pytest

from argus_cutlass.dsl.atoms import GmmaSmemAtom
from argus_cutlass.dsl.ir import SmemView
from argus_cutlass.kernels.gemm.program import build_program
from argus_cutlass.verify import verify_gemm
from argus_cutlass.testing.probes import one_hot_probes, operand_sources, predict_tile, swizzle_probe_configs

#: both majors and every swizzle mode (SW128 / SW64 / SW32) on the operand that varies
CONFIGS = swizzle_probe_configs("bf16", "bf16")


def _dsl(cfg, mma_atoms=None):
    """The program of ``cfg``; ``mma_atoms`` gives operands' MMA reads another smem atom (the view the
    descriptor reads through), leaving the TMA side alone."""
    program = build_program(cfg)
    for op, atom in (mma_atoms or {}).items():
        program = program.replace_node("read", op, view=SmemView(atom, program.read(op).view.shape))
    return program


@pytest.mark.parametrize("name", list(CONFIGS))
def test_consistent_program_predicts_the_gemm(name):
    cfg = CONFIGS[name]
    dsl = _dsl(cfg)
    swz = {dsl.read(o).src: dsl.read(o).view.swizzle_bytes for o in "AB"}
    assert int(name.split("SW")[1]) in swz.values()
    rng = np.random.default_rng(1)
    k = cfg.tile_k * (cfg.stages + 1)  # wraps the stages once
    a, b = rng.standard_normal((cfg.tile_m, k)), rng.standard_normal((cfg.tile_n, k))
    pred = predict_tile(dsl, a, b)
    assert pred.predictable.all()
    np.testing.assert_allclose(pred.d, a @ b.T, rtol=0, atol=1e-10)
    # every slot reads its own (mn, k): the sources are the identity
    mn, kk = operand_sources(dsl, "A")
    assert (mn == np.arange(cfg.tile_m)[:, None, None]).all() and (kk == np.arange(cfg.tile_k)[None, :, None]).all()


@pytest.mark.parametrize("sw", [64, 32])
def test_swizzle_mismatch_predicts_a_specific_wrong_tile(sw):
    cfg = CONFIGS["K-SW128"]
    bad = _dsl(cfg, mma_atoms={"A": GmmaSmemAtom("K", sw, 16)})
    a = np.zeros((64, 64))
    a[5, 17] = 1.0
    pred = predict_tile(bad, a, np.ones((64, 64)))
    assert pred.predictable.all()
    rows = np.nonzero(pred.d[:, 0])[0]
    # a one-hot A element is read by exactly one slot, in another row than its own
    assert len(rows) == 1 and rows[0] != 5 and pred.d[rows[0], 0] == 1.0
    assert (pred.d == pred.d[:, :1]).all()  # B is all ones: every column alike


def test_shape_mismatch_is_an_error():
    dsl = _dsl(CONFIGS["K-SW128"])
    with pytest.raises(ValueError, match="do not fit tile 64x64x64"):
        predict_tile(dsl, np.zeros((64, 60)), np.zeros((64, 60)))


def test_probe_configs_are_verified_and_probes_spread():
    for cfg in swizzle_probe_configs().values():
        assert verify_gemm(build_program(cfg)).ok
    probes = one_hot_probes(64, 320)
    assert len(set(probes)) == 8 and len({k // 8 for _, k in probes}) == 8  # distinct 16-byte chunks


def test_one_hot_inputs_put_a_single_one_in_one_operand():
    from argus_cutlass.testing.probes import one_hot_inputs

    probes = list(one_hot_inputs(64, 32, 80))
    assert [p[0] for p in probes] == ["A"] * 8 + ["B"] * 8
    for operand, mn, kk, a, b in probes:
        hot, ones = (a, b) if operand == "A" else (b, a)
        assert hot.sum() == 1.0 and hot[mn, kk] == 1.0 and (ones == 1.0).all()
        assert a.shape == (64, 80) and b.shape == (32, 80)
