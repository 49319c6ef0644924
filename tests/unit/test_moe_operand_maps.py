"""The grouped GEMMs' operand encoding is the one the MoE host prints (red team of issue 11's classes).

``templates/moe/gemm.j2::run_grouped`` prints its tensor maps instead of reading them from the program:
A (xs / h) and B (W13 / W2) K-major, D (h / out) N-major, the caller's xs / h, W13 / W2, h / out in the
kernel's A / B / D slots. A grouped program of another layout or with swap-AB passes every GEMM rule
(they check the program against its *own* maps) and, before ``moe.group_tiles`` compared the program's
encoding with the printed one, every MoE rule: the kernel then reads element (m, k) from row k, column m.
The paired-halves remap of gate+up's B is printed per TMA box (the box start decides gate or up), so
a box straddling the halves reads gate rows where the up rows belong; ``moe.group_tiles`` modelled it
row by row and passed it.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from argus_cutlass.kernels.moe.config import MoEConfig
from argus_cutlass.kernels.moe.problem import MoEProblem
from argus_cutlass.kernels.moe.program import build_layer, gemm_configs, grouped_program
from argus_cutlass.testing.mutants_moe import load_moe_catalogue, verify_moe_mutant
from argus_cutlass.verify.moe import _b_rows, verify_moe

RED_TEAM = ("gu_xs_m_major", "dn_w2_n_major", "dn_swap_ab", "gu_pair_box_straddles")


def _small():
    return MoEConfig(), MoEProblem(64, 8, 2, 256, 512)


@pytest.mark.parametrize("mutant_id", RED_TEAM)
def test_red_team_mutants_rejected_with_counterexamples(mutant_id):
    m = load_moe_catalogue()[mutant_id]
    rep = verify_moe_mutant(m, smt=False)
    hits = [v for v in rep.violations if v.rule == "moe.group_tiles"]
    assert hits and hits[0].counterexample is not None, [v.rule for v in rep.violations]
    cex = hits[0].counterexample
    assert cex.element and (cex.expected != cex.actual)


@pytest.mark.parametrize("part", ["gate_up", "down"])
@pytest.mark.parametrize("layout,swap", [("tn", True), ("nn", False), ("tt", False), ("nt", False),
                                         ("tt", True), ("nn", True)])
def test_every_encoding_but_the_printed_one_is_refused(part, layout, swap):
    cfg, prob = _small()
    i = ("gate_up", "down").index(part)
    gcfg = gemm_configs(cfg)[i].replace(layout=layout, swap_ab=swap)
    layer = dataclasses.replace(build_layer(cfg, prob), **{part: grouped_program(cfg, prob, part, gcfg)})
    rep = verify_moe(layer, smt=False)
    hits = [v for v in rep.violations if v.rule == "moe.group_tiles"]
    assert hits and hits[0].counterexample is not None and "run_grouped" in hits[0].message


def test_grouped_program_is_build_layers():
    cfg, prob = _small()
    layer = build_layer(cfg, prob)
    assert grouped_program(cfg, prob, "gate_up").fingerprint() == layer.gate_up.fingerprint()
    assert grouped_program(cfg, prob, "down").fingerprint() == layer.down.fingerprint()


def test_pair_remap_is_modelled_per_box():
    """Boxes inside one half: the row-wise remap; a box across the halves: the box's start decides."""
    layer = build_layer(*_small())
    lb = layer.gate_up.load_into("sB")
    half, pair = lb.tile_mn // 2, lb.pair_offset
    r = np.arange(lb.tile_mn)
    rowwise = 1 * lb.expert_rows + 2 * half + np.where(r < half, r, r - half + pair)
    for box in ((64, 128), (64, 64), (64, 32)):
        ld = dataclasses.replace(lb, copy=dataclasses.replace(lb.copy, box=box))
        assert (_b_rows(ld, 1, 2, lb.tile_mn) == rowwise).all(), box
    whole = dataclasses.replace(lb, copy=dataclasses.replace(lb.copy, box=(64, lb.tile_mn)))
    assert (_b_rows(whole, 1, 2, lb.tile_mn) == 1 * lb.expert_rows + 2 * half + r).all()
