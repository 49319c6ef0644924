"""Bad configuration input gets a clear error naming the field, its value and the rule (never a line of a
program builder, never a traceback); every declared and every shipped configuration is still accepted.

Two layers: the configuration models (pydantic) refuse a wrong type, a bool where an integer goes and a size
below 1; the program builders refuse what no program can be built from (GEMM:
:func:`argus_cutlass.kernels.gemm.program.check_buildable`; attention: ``attention.head_dim`` /
``attention.tile``; MoE: ``moe.config`` and the grouped GEMMs' refusals told in MoEConfig's fields). Everything
else stays the verifier's (e.g. ``tile_n=24`` builds and is reported by rule ``epilogue.tile``).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from argus_cutlass.cli import main
from argus_cutlass.errors import ConfigError
from argus_cutlass.generate import build
from argus_cutlass.kernels.attention.config import HEAD_DIMS, AttentionConfig
from argus_cutlass.kernels.gemm import program as gemm_program
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.program import build_program
from argus_cutlass.kernels.moe.config import MoEConfig
from argus_cutlass.kernels.moe.problem import MoEProblem

ROOT = Path(__file__).resolve().parents[2]
MOE_PROBLEM = MoEProblem(16, 8, 2, 512, 1024)

#: (changes to GemmConfig(), rule, the field at fault, words of the rule broken)
GEMM_BAD = [
    ({"tile_n": 1}, "config.tile_n", "tile_n", ["(with cluster_m=2)", "TMA multicast", "at least cluster_m"]),
    ({"tile_m": 1, "cluster_m": 1, "cluster_n": 2}, "config.tile_m", "tile_m", ["(with cluster_n=2)", "at least cluster_n"]),
    ({"epi_n": 5}, "smem.atom", "epi_n", ["10 bytes, not a multiple of 16", "PTX ISA 9.7.15.5.1"]),
    ({"epi_m": 12, "swap_ab": True}, "smem.atom", "epi_m", ["M-major under swap-AB", "24 bytes"]),
    ({"epi_n": 6, "out_dtype": "fp32"}, "smem.atom", "epi_n", ["24 bytes, not a multiple of 16"]),
    ({"tile_k": 5}, "smem.atom", "tile_k", ["K-major", "10 bytes, not a multiple of 16"]),
    ({"tile_m": 100, "layout": "nt"}, "smem.atom", "tile_m", ["M-major", "200 bytes"]),
    ({"tile_n": 100, "layout": "tt"}, "smem.atom", "tile_n", ["N-major", "200 bytes"]),
    ({"tile_k": 8}, "config.tile_k", "tile_k", ["at least 16", "PTX ISA 9.7.15.5"]),
    ({"acc_sets": 3}, "config.acc_sets", "acc_sets", ["(with tile_k=64)", "must divide", "4 k-blocks"]),
    ({"cluster_m": 17, "cluster_n": 1}, "config.cluster_m", "cluster_m", ["17 CTAs", "ctaMask", "PTX ISA 9.7.9.25"]),
    ({"cluster_n": 9}, "config.cluster_n", "cluster_n", ["2x9 cluster has 18 CTAs"]),
    ({"splits": 2}, "config.splits", "splits", ["(with scheduler='persistent')", "'splitk' or 'clusterk'"]),
    ({"scheduler": "clusterk", "splits": 9, "cluster_m": 1}, "config.splits", "splits", ["2..8", "portable"]),
    ({"scheduler": "clusterk", "splits": 4}, "config.cluster_m", "cluster_m", ["cluster_m = cluster_n = 1"]),
    ({"scheduler": "clusterk", "splits": 4, "cluster_m": 1, "schedule": "pingpong"}, "config.schedule", "schedule",
     ["cooperative kernel"]),
    ({"reduction": "nondeterministic"}, "config.reduction", "reduction", ["only stream-K and split-K"]),
]


def _clean(text: str) -> None:
    """A user-facing message: no traceback, no builder line (``program.py:213``) in place of the field."""
    assert "Traceback" not in text and ".py:" not in text and "[dsl." not in text


@pytest.mark.parametrize("changes, rule, field, words", GEMM_BAD, ids=[str(c) for c, *_ in GEMM_BAD])
def test_gemm_unbuildable_field_is_named(changes, rule, field, words):
    cfg = GemmConfig(**changes)
    with pytest.raises(ConfigError) as info:
        build(cfg)
    err = info.value
    text = str(err)
    assert err.rule == rule and next(iter(err.fields)) == field and err.model == "GemmConfig"
    assert f"GemmConfig {field}={getattr(cfg, field)!r}" in text
    for w in words:
        assert w in text, (w, text)
    _clean(text)
    # the same refusal through the search's feasibility function (a reason, not an exception)
    from argus_cutlass.kernels.gemm.space import feasible

    ok, reasons = feasible(cfg)
    assert not ok and reasons[0].startswith(f"{rule}: GemmConfig {field}=")


@pytest.mark.parametrize("changes", [{"tile_n": 24}, {"tile_m": 96}, {"epi_n": 24}, {"stages": 1}, {"tile_k": 24},
                                     {"cluster_m": 3}, {"mma_in_flight": 9}, {"tile_n": 8, "layout": "nt"}])
def test_gemm_rules_of_the_verifier_stay_the_verifier_s(changes):
    """A configuration that builds is not refused at the boundary: the verifier reports it, every violation at
    once (tile_n 24 breaks epilogue.tile, not a construction rule)."""
    from argus_cutlass.verify import verify_gemm

    report = verify_gemm(build_program(GemmConfig(**changes)), smt=False)
    assert not report.ok


@pytest.mark.parametrize("changes, words", [
    ({"tile_n": 0}, "tile_n"), ({"stages": -1}, "stages"), ({"tile_k": 64.5}, "tile_k"), ({"epi_n": "wide"}, "epi_n"),
    ({"tile_n": True}, "tile_n"), ({"swizzle": 3}, "swizzle"), ({"mma_in_flight": -1}, "mma_in_flight"),
])
def test_gemm_model_refuses_wrong_types_and_sizes(changes, words):
    with pytest.raises(ValidationError) as info:
        GemmConfig(**changes)
    assert words in str(info.value)


def _cli(capsys, tmp_path, text, *flags):
    path = tmp_path / "cfg.json"
    path.write_text(text)
    rc = main(["verify", "--no-smt", *flags, str(path)])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err, path


@pytest.mark.parametrize("text, line, rule, head, words", [
    ('{"tile_n": 1}', 1, "config.tile_n", "GemmConfig tile_n=1 (with cluster_m=2)", "at least cluster_m"),
    ('{\n  "tile_m": 128,\n  "epi_n": 5\n}', 3, "smem.atom", "GemmConfig epi_n=5", "not a multiple of 16"),
    ('{"stages": 4,\n "acc_sets": 3}', 2, "config.acc_sets", "GemmConfig acc_sets=3 (with tile_k=64)", "must divide"),
    ('{"cluster_m": 1,\n "scheduler": "splitk",\n "splits": 2,\n "tile_k": 8}', 4, "config.tile_k", "GemmConfig tile_k=8",
     "at least 16"),
    ('{"config": {"cluster_m": 1,\n "splits": 4}}', 2, "config.splits", "GemmConfig splits=4", "'splitk' or 'clusterk'"),
    # cluster_n (a default) is named beside cluster_m: the line is the named field's the file sets
    ('{"tile_m": 128,\n "cluster_m": 17}', 2, "config.cluster_m", "GemmConfig cluster_m=17", "ctaMask"),
])
def test_cli_verify_names_the_field_and_exits_2(tmp_path, capsys, text, line, rule, head, words):
    rc, out, err, path = _cli(capsys, tmp_path, text)
    assert rc == 2 and out == ""
    assert err.startswith(f"argus-cutlass: error: [{rule}] {path}:{line}: {head}") and words in err
    _clean(err.replace(f"{path}:{line}:", ""))


@pytest.mark.parametrize("text, words", [
    ('{"tile_n": 0}', "field 'tile_n': Input should be greater than 0"),
    ('{"tile_k": true}', "field 'tile_k': True is a boolean, not an integer"),
    ('{"stages": 2.5}', "field 'stages': Input should be a valid integer"),
])
def test_cli_verify_refuses_bad_values(tmp_path, capsys, text, words):
    rc, out, err, path = _cli(capsys, tmp_path, text)
    assert rc == 2 and out == "" and "[config.schema]" in err and f"{path}:1: {words}" in err


def test_cli_verify_json_reports_the_field(tmp_path, capsys):
    rc, out, err, _ = _cli(capsys, tmp_path, '{"epi_n": 5}', "--json")
    data = json.loads(out)
    assert rc == 2 and data["ok"] is False and data["error"]["rule"] == "smem.atom"
    assert "GemmConfig epi_n=5" in data["error"]["message"] and "[smem.atom]" in err


def test_a_refusal_the_checks_do_not_state_still_names_the_fields(monkeypatch):
    """The safety net (``_built_from``): with check_buildable out of the way, the DSL's own refusal of the
    tile-scheduler node comes back as a ConfigError naming the fields that node is built from."""
    monkeypatch.setattr(gemm_program, "check_buildable", lambda cfg: None)
    with pytest.raises(ConfigError) as info:
        build_program(GemmConfig(splits=2))
    err = info.value
    assert err.rule == "config.node" and err.fields["splits"] == 2 and err.fields["scheduler"] == "persistent"
    assert "the DSL refuses a node these fields build: [dsl.operand]" in str(err)
    assert "splits=2 needs decomposition" in str(err) and "program.py:" not in str(err)  # no line of our file


# ---- attention -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("changes, rule, field, words", [
    ({"head_dim": 1}, "attention.head_dim", "head_dim", ["[64, 96, 128, 192, 256]"]),
    ({"head_dim": 100}, "attention.head_dim", "head_dim", ["built for head dims"]),
    ({"tile_m": 96}, "attention.tile", "tile_m", ["a multiple of 64", "PTX ISA 9.7.15.5"]),
    ({"tile_n": 8}, "attention.tile", "tile_n", ["a multiple of 16"]),
    ({"tile_n": 24}, "attention.tile", "tile_n", ["a multiple of 16"]),
    ({"tile_n": 272}, "attention.tile", "tile_n", ["up to 256"]),
    ({"tile_m": 320}, "attention.tile", "tile_m", ["(with pingpong=True)", "5 consumer warpgroups need 10 named barriers",
                                                   "PTX ISA 9.7.13.1"]),
    ({"tile_m": 576, "pingpong": False}, "attention.tile", "tile_m", ["9 consumer warpgroups need 9"]),
])
def test_attention_unbuildable_field_is_named(changes, rule, field, words):
    cfg = AttentionConfig(**changes)
    with pytest.raises(ConfigError) as info:
        build(cfg)
    text = str(info.value)
    assert info.value.rule == rule and next(iter(info.value.fields)) == field
    assert f"AttentionConfig {field}={getattr(cfg, field)!r}" in text
    for w in words:
        assert w in text, (w, text)
    _clean(text)


@pytest.mark.parametrize("changes, field", [({"head_dim": 0}, "head_dim"), ({"tile_m": 0}, "tile_m"),
                                            ({"stages": 0}, "stages"), ({"q_stages": 3}, "q_stages"),
                                            ({"tile_m": True}, "tile_m"), ({"tile_n": 16.5}, "tile_n")])
def test_attention_model_refuses_wrong_types_and_sizes(changes, field):
    with pytest.raises(ValidationError) as info:
        AttentionConfig(**changes)
    assert field in str(info.value)


# ---- MoE -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("changes, rule, field, words", [
    ({"tile_k": 8}, "config.tile_k", "tile_k", ["at least 16", "(the gate_up grouped GEMM)"]),
    ({"tile_k": 5}, "smem.atom", "tile_k", ["10 bytes, not a multiple of 16"]),
    ({"epi_n": 4, "gu_tile_n": 32, "dn_tile_n": 32}, "smem.atom", "epi_n", ["8 bytes, not a multiple of 16"]),
    ({"gu_tile_n": 48}, "moe.config", "gu_tile_n", ["a multiple of 32"]),
    ({"gu_tile_n": 96}, "moe.config", "epi_n", ["(with gu_tile_n=96)", "gu_tile_n / 2 = 48", "epi_n must divide"]),
    ({"dn_tile_n": 40}, "moe.config", "epi_n", ["(with dn_tile_n=40)", "epi_n must divide"]),
])
def test_moe_unbuildable_field_is_named(changes, rule, field, words):
    cfg = MoEConfig(**changes)
    with pytest.raises(ConfigError) as info:
        build(cfg, MOE_PROBLEM)
    err = info.value
    text = str(err)
    assert err.rule == rule and next(iter(err.fields)) == field and err.model == "MoEConfig"
    assert set(err.fields) <= set(MoEConfig.model_fields), err.fields
    assert f"MoEConfig {field}={getattr(cfg, field)!r}" in text
    for w in words:
        assert w in text, (w, text)
    _clean(text)


def test_moe_tells_a_grouped_gemm_error_in_its_own_fields():
    from argus_cutlass.kernels.moe.program import _moe_field_error

    err = _moe_field_error(ConfigError.of_fields("config.tile_n", "GemmConfig", {"tile_n": 8, "stages": 2},
                                                 "tile_n and stages too small"), "down")
    assert err.rule == "config.dn_tile_n" and err.fields == {"dn_tile_n": 8, "dn_stages": 2}
    assert str(err) == ("[config.dn_tile_n] MoEConfig dn_tile_n=8 (with dn_stages=2): dn_tile_n and dn_stages too "
                        "small (the down grouped GEMM)")
    kept = ConfigError.of_fields("config.cluster_m", "GemmConfig", {"cluster_m": 17}, "x")
    assert _moe_field_error(kept, "gate_up") is kept   # no MoEConfig field to name it by


@pytest.mark.parametrize("changes, field", [({"gu_stages": 0}, "gu_stages"), ({"epi_n": 2.5}, "epi_n"),
                                            ({"gu_tile_n": True}, "gu_tile_n"), ({"work_lookahead": True}, "work_lookahead")])
def test_moe_model_refuses_wrong_types_and_sizes(changes, field):
    with pytest.raises(ValidationError) as info:
        MoEConfig(**changes)
    assert field in str(info.value)


# ---- what must still be accepted -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype, out_dtype", [("bf16", "bf16"), ("bf16", "fp32"), ("fp16", "fp16"), ("fp16", "bf16"),
                                              ("bf16", "fp16"), ("fp16", "fp32")])
def test_every_declared_gemm_config_builds(dtype, out_dtype):
    from argus_cutlass.kernels.gemm.space import declared_subspace

    n = 0
    for layout in ("tn", "nt", "nn", "tt"):
        for cfg in declared_subspace(dtype, out_dtype, layout):
            build_program(cfg)
            n += 1
    assert n >= 4 * 106


def test_every_attention_space_config_builds():
    from argus_cutlass.kernels.attention.space import AttentionSpace

    seen = set()
    for head_dim, causal in itertools.product(HEAD_DIMS, (False, True)):
        for cfg in AttentionSpace(head_dim, causal).all:
            key = (cfg.head_dim, cfg.tile_m, cfg.tile_n, cfg.pingpong, cfg.causal)
            if key not in seen:   # stages, q_stages, epilogue and scheduler pass no construction rule
                seen.add(key)
                build(cfg)
    assert len(seen) > 50


def test_the_moe_knob_grid_builds_where_the_epilogue_divides():
    from argus_cutlass.kernels.moe.space import KNOBS

    for tm, tk, gu, dn, epi in itertools.product(*(KNOBS[k] for k in ("tile_m", "tile_k", "gu_tile_n", "dn_tile_n",
                                                                       "epi_n"))):
        cfg = MoEConfig(tile_m=tm, tile_k=tk, gu_tile_n=gu, dn_tile_n=dn, epi_n=epi)
        if (gu // 2) % epi or dn % epi:   # rule moe.config, as before
            with pytest.raises(ConfigError, match="moe.config"):
                build(cfg, MOE_PROBLEM)
        else:
            build(cfg, MOE_PROBLEM)


def test_every_shipped_entry_builds():
    entries = json.loads((ROOT / "agent" / "tuned_h200.json").read_text())["entries"]
    gemm = {json.dumps(e["config"], sort_keys=True) for e in entries if e["kernel"] == "gemm"}
    for text in gemm:
        build_program(GemmConfig(**json.loads(text)))
    kinds = {"gemm": len(gemm)}
    for e in entries:
        if e["kernel"] == "attention":
            build(AttentionConfig(**e["config"]))
        elif e["kernel"] == "moe":
            build(MoEConfig(**e["config"]), MoEProblem(**e["problem"]))
        kinds[e["kernel"]] = kinds.get(e["kernel"], 0) + 1
    assert set(kinds) == {"gemm", "attention", "moe"}, kinds
