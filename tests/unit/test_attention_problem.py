"""The attention problem rules, flops, the orchestrator's attention path and the ``attention`` command
(CPU only: nvcc hidden, no GPU)."""

from __future__ import annotations

import json

import pytest

from argus_cutlass.cli import main
from argus_cutlass.errors import ProblemError
from argus_cutlass.kernels.attention.config import AttentionConfig
from argus_cutlass.kernels.attention.problem import AttentionProblem


@pytest.mark.parametrize("kwargs, rule", [
    (dict(head_dim=80), "attention.head_dim"),
    (dict(heads=6, kv_heads=4), "problem.heads"),
    (dict(dtype="fp32"), "problem.dtype"),
    (dict(seqlen_q=0), "problem.size"),
    (dict(batch=0), "problem.size"),
    (dict(seqlen_k=1 << 24), "problem.length_range"),
    (dict(seqused_k=(5, 2000)), "problem.seqused_k"),
    (dict(seqused_k=(5,)), "problem.seqused_k"),
    (dict(softmax_scale=float("nan")), "problem.softmax_scale"),
])
def test_bad_problems_are_refused_with_their_rule(kwargs, rule):
    base = dict(batch=2, heads=8, kv_heads=2, seqlen_q=100, seqlen_k=1000, head_dim=128)
    with pytest.raises(ProblemError) as exc:
        AttentionProblem(**{**base, **kwargs}).validate()
    assert exc.value.rule == rule
    assert "Traceback" not in str(exc.value)


def test_varlen_lengths_and_flops():
    p = AttentionProblem.varlen_problem((0, 1, 129, 3), (5, 1, 300, 0), heads=4, kv_heads=2, head_dim=64,
                                        causal=True, seqused_k=(3, 1, 200, 0)).validate()
    assert p.varlen and p.batch == 4 and p.seqlen_q == 129 and p.seqlen_k == 300
    assert p.lengths() == [(0, 3), (1, 1), (129, 200), (3, 0)]
    assert p.total_q == 133 and p.total_k == 306
    # the field's count: 4 Lq Lk D per head, halved when causal
    assert p.flops == 4 * (1 * 1 + 129 * 200) * 64 * 4 * 0.5
    # exact pairs under the bottom-right mask: row i of batch 2 sees keys j <= i + 71
    assert p.attended_pairs() == 1 + sum(min(200, i + 72) for i in range(129))


def test_varlen_lengths_must_match_the_batch():
    with pytest.raises(ProblemError) as exc:
        AttentionProblem(2, 4, 4, 10, 10, 128, seqlens_q=(3, 4, 5), seqlens_k=(1, 2)).validate()
    assert exc.value.rule == "problem.seqlens"


def test_the_problem_must_match_the_kernel_configuration():
    from argus_cutlass.errors import ConfigError
    from argus_cutlass.kernels.attention.program import build_program

    with pytest.raises(ConfigError) as exc:
        build_program(AttentionConfig(head_dim=128), AttentionProblem(1, 4, 4, 10, 10, 64))
    assert exc.value.rule == "attention.problem"


def test_orchestrator_configures_builds_verifies_and_renders_attention():
    from argus_cutlass.generate import Options, family_of, run

    p = AttentionProblem(2, 16, 2, 1000, 1000, 128, causal=True)
    r = run(p, options=Options(compile=False))
    assert r.status == "rendered" and family_of(r.program) == "attention"
    assert r.config.causal and r.config.dynamic_scheduler
    rec = r.record()
    assert rec["family"] == "attention" and rec["problem"]["head_dim"] == 128
    assert rec["verification"]["ok"] is True
    # the dynamic scheduler's quantities reach the .cu from the verified program
    assert f"constexpr int kSmemUnitSlots = {r.program.schedule.slot_bytes};" in r.source
    assert "atomicAdd(p.tile_counter, kFetchStep)" in r.source


def test_static_kernels_print_no_dynamic_scheduler():
    from argus_cutlass.generate import generate

    k = generate(AttentionConfig(head_dim=64, tile_m=192), smt=False)
    assert k.program.schedule.decomposition == "persistent" and "kSmemUnitSlots" not in k.source


def test_shipped_table_has_attention_entries_for_the_bench_grid():
    from argus_cutlass.agent.store import ExperienceStore, lookup_attention_config

    store = ExperienceStore("/nonexistent/experience.json")
    for d in (64, 128, 256):
        for s in (512, 2048, 8192, 16384):
            for causal in (False, True):
                p = AttentionProblem(16384 // s, 2048 // d, 2048 // d, s, s, d, causal=causal)
                cfg, source = lookup_attention_config(p, store=store, gpu="NVIDIA H200")
                assert source == "shipped", (d, s, causal)
                assert (cfg.head_dim, cfg.causal) == (d, causal)


def _no_nvcc(monkeypatch, tmp_path):
    monkeypatch.setenv("ARGUS_NVCC", str(tmp_path / "no-nvcc-here"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))


def test_attention_command_writes_cu_and_json_without_nvcc(tmp_path, monkeypatch, capsys):
    _no_nvcc(monkeypatch, tmp_path)
    code = main(["attention", "--batch", "2", "--heads", "8", "--kv-heads", "1", "--seqlen-q", "1",
                 "--seqlen-k", "1000", "--head-dim", "256", "--causal", "--dtype", "fp16", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "no nvcc" in out and "verified" in out
    cu = list(tmp_path.glob("argus_attn_fwd_sm90_fp16_d256_causal_*.cu"))
    js = list(tmp_path.glob("argus_attn_fwd_sm90_fp16_d256_causal_*.json"))
    assert len(cu) == 1 and len(js) == 1
    rec = json.loads(js[0].read_text())
    assert rec["problem"]["kv_heads"] == 1 and rec["compile"]["skipped"]
    assert 'extern "C"' in cu[0].read_text()


@pytest.mark.parametrize("args, rule", [
    (["--head-dim", "80"], "attention.head_dim"),
    (["--head-dim", "128", "--heads", "6", "--kv-heads", "4"], "problem.heads"),
    (["--head-dim", "128", "--dtype", "fp8"], "problem.dtype"),
])
def test_attention_command_bad_input_is_one_line(args, rule, tmp_path, capsys):
    base = {"--batch": "1", "--heads": "8", "--seqlen-q": "64"}
    argv = ["attention"] + [x for k, v in base.items() if k not in args for x in (k, v)] + args + ["--out",
                                                                                                  str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"[{rule}]" in err and "Traceback" not in err


@pytest.mark.parametrize("kwargs, rule", [
    (dict(softmax_scale="0.1"), "problem.softmax_scale"),
    (dict(softmax_scale=True), "problem.softmax_scale"),
    (dict(softmax_scale=1e39), "problem.softmax_scale"),   # inf in fp32
    (dict(softmax_scale=1e-46), "problem.softmax_scale"),  # 0 in fp32
    (dict(seqused_k=5), "problem.seqused_k"),
    (dict(causal="no"), "problem.causal"),
    (dict(head_dim=128.0), "attention.head_dim"),
])
def test_wrong_types_are_problem_errors_not_tracebacks(kwargs, rule):
    base = dict(batch=2, heads=8, kv_heads=2, seqlen_q=100, seqlen_k=1000, head_dim=128)
    with pytest.raises(ProblemError) as exc:
        AttentionProblem(**{**base, **kwargs}).validate()
    assert exc.value.rule == rule


def test_numpy_integers_are_sizes():
    np = pytest.importorskip("numpy")
    assert AttentionProblem(np.int64(2), 8, 2, 100, 100, 128).validate().batch == 2


def test_kv_heads_zero_is_refused_not_defaulted(tmp_path, monkeypatch, capsys):
    _no_nvcc(monkeypatch, tmp_path)
    code = main(["attention", "--batch", "1", "--heads", "16", "--kv-heads", "0", "--seqlen-q", "64",
                 "--head-dim", "128", "--out", str(tmp_path)])
    assert code == 2 and "[problem.size] kv_heads=0" in capsys.readouterr().err


def test_read_only_output_folder_is_a_user_error(tmp_path, monkeypatch, capsys):
    import os

    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    code = main(["attention", "--batch", "1", "--heads", "8", "--seqlen-q", "64", "--head-dim", "128",
                 "--out", str(ro)])
    assert code == 2 and "[cli.out]" in capsys.readouterr().err


def test_several_errors_name_the_problem_briefly():
    """Several broken rules are listed under a short subject, not the dataclass repr (a user typed
    flags, not ``softmax_scale=None``)."""
    from argus_cutlass.errors import ProblemError
    from argus_cutlass.kernels.attention.problem import AttentionProblem

    with pytest.raises(ProblemError) as info:
        AttentionProblem(1, 8, 8, 0, 0, 64).validate()
    msg = str(info.value)
    assert "2 problems with this AttentionProblem:" in msg and "softmax_scale" not in msg
    assert "seqlen_q=0" in msg and "seqlen_k=0" in msg
