"""The verifier proves the programs ``build_program`` makes, for a spread of configurations: no
violation, no ``unknown`` (no false alarm), every rule family proved, from the program alone."""

from __future__ import annotations

import json

import numpy as np
import pytest

from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.program import build_program
from argus_cutlass.verify import check_gemm, invariant_of, tag_image, verify_gemm
from argus_cutlass.verify.absint import view_layout

#: correct programs of every kind the template prints (issue 9's list plus the old suite's spread)
ACCEPTED = [
    GemmConfig(),  # bf16 tn 128x256x64 cooperative, cluster 2x1, 4 stages
    GemmConfig(cluster_m=1),
    GemmConfig(layout="nt", cluster_m=1, stages=3),
    GemmConfig(layout="nn", dtype="fp16", out_dtype="fp16", cluster_m=1, cluster_n=2, stages=3),
    GemmConfig(layout="tt", out_dtype="fp32", cluster_m=1, stages=3),
    GemmConfig(tile_m=64, tile_n=128, schedule="pingpong", epi_m=64, cluster_m=2, stages=7),
    GemmConfig(tile_m=128, tile_n=128, schedule="pingpong", epi_m=64, cluster_m=1, stages=6),
    GemmConfig(tile_m=64, tile_n=16, schedule="pingpong", epi_m=64, epi_n=16, swap_ab=True, out_dtype="fp32",
               cluster_m=1, stages=12),
    GemmConfig(tile_n=128, tile_k=128, cluster_m=1, stages=3),
    GemmConfig(epi_n=16),
    GemmConfig(epi_n=64),
    GemmConfig(layout="nt", tile_m=256, tile_n=128, epi_n=64, cluster_m=2, stages=3),
    GemmConfig(tile_m=128, tile_n=128, cluster_m=2, cluster_n=2, stages=4, raster="along_m", swizzle=4),
    GemmConfig(layout="tt", dtype="fp16", tile_m=64, tile_n=128, schedule="pingpong", epi_m=64, cluster_m=1,
               cluster_n=2, stages=7),
]

#: rules every GEMM program's report proves
CORE_RULES = {"smem.capacity", "smem.alignment", "smem.disjoint", "registers", "roles.registers", "tma.box_extent",
              "tma.box_inner_bytes", "tma.map", "gmma.n", "gmma.m_tile", "epilogue.tile", "cluster", "stages",
              "tile_scheduler", "tma.image", "mma.k_agreement", "mma.operand_identity", "gmma.descriptor",
              "k.coverage", "residue.load", "pipeline.tx_bytes", "pipeline.arrivals", "pipeline.release",
              "pipeline.protocol", "pipeline.state", "pipeline.stage", "pipeline.parity", "pipeline.carry",
              "pipeline.buffers", "pipeline.wrap", "loop.step", "mma.dtype", "mma.major", "mma.tile",
              "cluster.consistency", "epilogue.partition", "warpgroup.uniform", "output.bijection",
              "epilogue.coordinate", "residue.store", "epilogue.source", "residue.source", "epilogue.tma_store",
              "epilogue.stmatrix", "epilogue.stage_reuse", "scheduler.bijection"}


def _id(c: GemmConfig) -> str:
    return (f"{c.dtype}-{c.out_dtype}-{c.layout}-{c.tile_m}x{c.tile_n}x{c.tile_k}-{c.schedule}"
            f"-c{c.cluster_m}x{c.cluster_n}-s{c.stages}-e{c.epi_m}x{c.epi_n}{'-swap' if c.swap_ab else ''}")


def test_accepted_configs_are_distinct():
    assert len({_id(c) for c in ACCEPTED}) == len(ACCEPTED) >= 12


@pytest.mark.parametrize("cfg", ACCEPTED, ids=_id)
def test_verifier_proves_the_program(cfg):
    report = check_gemm(build_program(cfg))
    assert report.ok and report.complete and report.verified, report.format()
    assert not report.unknowns and not report.not_proved
    rules = {p.rule for p in report.proofs}
    assert CORE_RULES <= rules, sorted(CORE_RULES - rules)
    if cfg.cluster_m * cfg.cluster_n > 1:
        assert "tma.multicast" in rules
    # every proved rule has a catalogue entry
    assert all(invariant_of(r) != "?" for r in rules), sorted(r for r in rules if invariant_of(r) == "?")
    assert any(line.startswith("G1 mma.operand_identity: A.m == slot.m at all") for line in report.proved)


@pytest.mark.parametrize("cfg", ACCEPTED[:6], ids=_id)
def test_tma_image_is_bijective_and_equals_the_mma_view(cfg):
    """Two derivations agree: the TMA boxes' image (as the producer issues them) == the MMA's own
    view (CuTe tile_to_shape of the GMMA atom): every read slot finds the tile element it names."""
    program = build_program(cfg)
    for op in ("A", "B"):
        read = program.read(op)
        load = program.load_into(read.src)
        img = tag_image(program, load)
        assert img.outside == img.collisions == img.unwritten == img.foreign == 0
        S = program.stages
        mn, k, s = np.meshgrid(np.arange(read.tile_mn), np.arange(read.tile_k), np.arange(S), indexing="ij")
        off = np.asarray(view_layout(read.view)(mn, k, s))
        f_mn, f_k, f_it = img.fields
        assert (img.fields[f_mn][off] == mn).all() and (img.fields[f_k][off] == k + s * load.tile_k).all()
        assert (img.fields[f_it][off] == s).all()


def test_report_json_and_text():
    report = verify_gemm(build_program(GemmConfig()))
    data = json.loads(report.to_json())
    assert data["ok"] is True and data["complete"] is True and data["verified"] is True
    assert data["violations"] == [] and data["not_proved"] == []
    assert "smem.capacity" in {p["rule"] for p in data["proofs"]}
    text = report.format()
    assert ": verified (" in text.splitlines()[0]
    # kSmemBytes = barrier_bytes + 2 x 4 x 8 + 1024 with barrier_bytes = 64 + 128 + 16 KiB of buffers
    assert "214080 <= 232448 bytes (4 stages; kSmemBytes = barrier_bytes 212992 + 64 + 1024)" in text
    assert report.kernel == build_program(GemmConfig()).kernel_name()


def test_symbolic_proofs_state_their_range():
    """A K beyond 2^24 needs a program built for it (bound_bits from the problem); the proofs say so."""
    class P:
        k = 1 << 25

    small = verify_gemm(build_program(GemmConfig()))
    big = verify_gemm(build_program(GemmConfig(), P()))
    assert any("for all K in [1, 2^24)" in p.summary for p in small.proofs if p.rule == "k.coverage")
    assert any("for all K in [1, 2^27)" in p.summary for p in big.proofs if p.rule == "k.coverage")
    assert any("all i < 2^27" in p.summary for p in big.proofs if p.rule == "pipeline.stage")


def test_verifier_reads_only_the_program():
    """Two programs of one config that differ in a single node field get different verdicts: the
    verifier reads the node, not a configuration beside it."""
    p = build_program(GemmConfig())
    assert verify_gemm(p, smt=False).ok
    q = p.replace_node("pipeline", "mainloop", consumer_arrivals=2)
    # the empty barrier completes twice per release: the producer overwrites a stage still to be read
    assert set(verify_gemm(q, smt=False).rules_violated()) == {"pipeline.arrivals", "pipeline.protocol"}
