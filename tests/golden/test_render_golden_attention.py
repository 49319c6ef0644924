"""Golden-file test of the rendered attention kernels (``test_render_golden_attention.expected``).

Each configuration's program (``kernels.attention.program.build_program``) is printed by
``render.attention.render_attention`` with a fixed proof list, so this test pins the attention
templates and the program builder, not the verifier. Regenerate after an intended change with
``ARGUS_UPDATE_GOLDEN=1 pytest tests/golden`` and review the diff.
"""

from __future__ import annotations

from pathlib import Path

from argus_cutlass.kernels.attention.config import AttentionConfig
from argus_cutlass.kernels.attention.program import build_program
from argus_cutlass.render.attention import render_attention
from argus_cutlass.settings import settings

EXPECTED = Path(__file__).with_name("test_render_golden_attention.expected")

CONFIGS = (
    AttentionConfig(head_dim=128, causal=True, tile_m=128, tile_n=128),
    AttentionConfig(head_dim=64, dtype="fp16", tile_m=192, tile_n=128),
    AttentionConfig(head_dim=256, varlen=True, tile_m=128, tile_n=80, pingpong=False),
)
PROVED = ("FA5 mask.exact (example line)",)


def _render_all() -> str:
    return "".join(f"//==== {cfg!r}\n" + render_attention(build_program(cfg), PROVED) for cfg in CONFIGS)


def test_rendered_attention_sources_match_golden():
    actual = _render_all()
    if settings().update_golden:
        EXPECTED.write_text(actual)
    assert actual == EXPECTED.read_text(), (
        "rendered attention .cu differs from tests/golden/test_render_golden_attention.expected; if the change is "
        "intended, rerun with ARGUS_UPDATE_GOLDEN=1 and review the diff")


def test_attention_render_is_deterministic_and_names_its_proofs():
    program = build_program(CONFIGS[0])
    src = render_attention(program, PROVED)
    assert src == render_attention(build_program(CONFIGS[0]), PROVED)
    assert f"int {program.kernel_name()}(" in src and PROVED[0] in src
    assert program.fingerprint()[:16] in src
