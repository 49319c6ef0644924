"""The verifier accepts the shipped program for a spread of configurations."""

from __future__ import annotations

import json

import numpy as np
import pytest

from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.programs.gemm import build_gemm_program
from argus_cutlass.programs.gemm_dsl import gemm_dsl_program
from argus_cutlass.verify import check_gemm, tag_image, verify_gemm

ACCEPTED = [
    GemmConfig(),  # bf16 tn 128x256x64 cooperative, cluster 2x1, 4 stages
    GemmConfig(layout="nt", cluster_m=1, stages=3),
    GemmConfig(layout="nn", dtype="fp16", out_dtype="fp16", cluster_m=1, cluster_n=2, stages=3),
    GemmConfig(layout="tt", out_dtype="fp32", cluster_m=1, stages=3),
    GemmConfig(tile_m=128, tile_n=128, schedule="pingpong", epi_m=64, cluster_m=1, stages=6),
    GemmConfig(layout="nt", tile_m=128, tile_n=128, schedule="pingpong", epi_m=64, cluster_m=2, stages=5),
    GemmConfig(tile_m=64, tile_n=128, schedule="pingpong", epi_m=64, cluster_m=1, stages=7),
    GemmConfig(layout="tt", dtype="fp16", tile_m=64, tile_n=128, schedule="pingpong", epi_m=64,
               cluster_m=1, cluster_n=2, stages=7),
    GemmConfig(tile_m=64, tile_n=256, schedule="pingpong", epi_m=64, cluster_m=1, stages=5),
    GemmConfig(layout="nn", tile_m=64, tile_n=256, schedule="pingpong", epi_m=64, cluster_m=2, stages=4),
    GemmConfig(layout="tn", dtype="fp16", out_dtype="fp32", tile_m=128, tile_n=128, cluster_m=1,
               cluster_n=2, stages=5),
    GemmConfig(layout="nt", tile_m=256, tile_n=128, epi_n=64, cluster_m=2, stages=3),
]


def _id(c: GemmConfig) -> str:
    return (f"{c.dtype}-{c.out_dtype}-{c.layout}-{c.tile_m}x{c.tile_n}x{c.tile_k}-{c.schedule}"
            f"-c{c.cluster_m}x{c.cluster_n}-s{c.stages}")


def test_accepted_configs_are_distinct():
    assert len({_id(c) for c in ACCEPTED}) == len(ACCEPTED) >= 10


@pytest.mark.parametrize("cfg", ACCEPTED, ids=_id)
def test_verifier_accepts(cfg):
    report = check_gemm(build_gemm_program(cfg))
    assert report.ok, report.format()
    rules = {p.rule for p in report.proofs}
    assert {"smem.capacity", "registers", "mma.k_agreement", "tma.box_extent", "tma.image"} <= rules
    assert any(line.startswith("G1 mma.k_agreement: A.k == B.k at all") for line in report.proved)
    assert report.elapsed_s < 0.5


@pytest.mark.parametrize("cfg", ACCEPTED[:6], ids=_id)
def test_tma_image_is_bijective_and_equals_cute_smem_layout(cfg):
    """Two derivations agree: the TMA box model's image == the CuTe tile_to_shape layout."""
    program = build_gemm_program(cfg)
    dsl = gemm_dsl_program(program)
    for op in ("A", "B"):
        read = dsl.read(op)
        load = dsl.load_into(read.src)
        img = tag_image(dsl, load)
        assert img.outside == 0 and img.collisions == 0
        mn, k, s = np.meshgrid(np.arange(read.tile_mn), np.arange(read.tile_k),
                               np.arange(dsl.stages), indexing="ij")
        t = dsl.tensor(load.dst)
        tma = load.write_offsets(mn, k, s, t.base_bytes, t.elem_bytes)
        assert (tma == read.layout(mn, k, s)).all()


def test_report_json_and_text():
    report = verify_gemm(build_gemm_program(GemmConfig()))
    data = json.loads(report.to_json())
    assert data["ok"] is True and data["violations"] == []
    assert "smem.capacity" in {p["rule"] for p in data["proofs"]}
    text = report.format()
    assert "verified" in text and "230400 <= 232448 bytes" in text
