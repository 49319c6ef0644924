"""Golden-file test of the rendered CuTe C++ (one ``.expected`` file for this module).

Regenerate after an intended template change with ``ARGUS_UPDATE_GOLDEN=1 pytest tests/golden``
and review the diff.
"""

from __future__ import annotations

from pathlib import Path

from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.programs.gemm import build_gemm_program
from argus_cutlass.render.render import render_gemm
from argus_cutlass.settings import settings

EXPECTED = Path(__file__).with_name("test_render_golden.expected")

CONFIGS = (
    GemmConfig(),
    GemmConfig(dtype="fp16", out_dtype="fp32", layout="nt", tile_m=64, tile_n=128, cluster_m=1,
               cluster_n=2, stages=6, schedule="pingpong", epi_m=64, epi_n=32, raster="along_m", swizzle=2),
    GemmConfig(layout="tt", out_dtype="fp16", tile_m=128, tile_n=128, cluster_m=1, stages=5),
    GemmConfig(tile_n=128, cluster_m=1, stages=6, scheduler="splitk", splits=3),
    GemmConfig(layout="nn", tile_m=64, tile_n=16, cluster_m=1, stages=8, schedule="pingpong", epi_m=64,
               epi_n=16, swap_ab=True),
)
#: a fixed proof list, so that this test pins the template and not the verifier
PROVED = ("G1 k agreement (example line)",)


def _render_all() -> str:
    parts = []
    for cfg in CONFIGS:
        parts.append(f"//==== {cfg!r}\n" + render_gemm(build_gemm_program(cfg), PROVED))
    return "".join(parts)


def test_rendered_sources_match_golden():
    actual = _render_all()
    if settings().update_golden:
        EXPECTED.write_text(actual)
    expected = EXPECTED.read_text()
    assert actual == expected, (
        "rendered .cu differs from tests/golden/test_render_golden.expected; "
        "if the change is intended, rerun with ARGUS_UPDATE_GOLDEN=1 and review the diff"
    )


def test_render_is_deterministic_and_self_contained():
    src = render_gemm(build_gemm_program(CONFIGS[0]), PROVED)
    assert src == render_gemm(build_gemm_program(CONFIGS[0]), PROVED)
    includes = [line for line in src.splitlines() if line.startswith("#include")]
    assert includes, "no includes rendered"
    for line in includes:
        header = line.split()[1].strip('"<>')
        assert header.startswith(("cute/", "cutlass/")) or header in {"cstdint", "cuda_runtime.h"}, line
    assert 'extern "C"' in src
    # no CUTLASS automatic choice (StageCountAuto, EpilogueTileAuto, KernelScheduleAuto, builders)
    assert "Auto" not in src.replace("AutoVectorizingCopy", ""), "a CUTLASS Auto type was rendered"
    assert "CollectiveBuilder" not in src
