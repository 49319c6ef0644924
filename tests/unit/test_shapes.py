"""agent/shapes.py: projection shapes from Hugging Face configs, shape files, the shipped set."""

from __future__ import annotations

import json

import pytest

from argus_cutlass.agent.shapes import (
    DEFAULT_M,
    FIELDS,
    GemmShape,
    load_model,
    load_shapes,
    merge_shapes,
    model_shape_set,
    projection_shapes,
    shipped_models,
    write_shapes,
)
from argus_cutlass.errors import ProblemError
from argus_cutlass.kernels.gemm.problem import GemmProblem

LLAMA3_8B = {
    "_name_or_path": "meta-llama/Meta-Llama-3-8B",
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
}


def _by_mnk(shapes):
    return {(s.m, s.n, s.k): s for s in shapes}


# ---- GemmShape --------------------------------------------------------------------------------


def test_gemm_shape_defaults_and_problem():
    s = GemmShape(100, 1024, 4096)
    assert (s.dtype, s.out_dtype, s.layout, s.name) == ("bf16", "bf16", "tn", "")
    assert GemmShape(1, 8, 8, "fp16").out_dtype == "fp16"
    assert GemmShape(1, 8, 8, "bf16", "fp32").out_dtype == "fp32"
    p = s.problem()
    assert p == GemmProblem(100, 1024, 4096, "bf16", "bf16", "tn")
    assert (p.lda, p.ldb, p.ldd) == (4096, 4096, 1024)
    assert s.label == "100x1024x4096_bf16_bf16_tn"
    assert s.to_dict() == {"m": 100, "n": 1024, "k": 4096, "dtype": "bf16", "out_dtype": "bf16",
                           "layout": "tn", "name": ""}


def test_merge_keeps_order_and_collects_names():
    merged = merge_shapes([
        GemmShape(1, 16, 16, name="a.x"), GemmShape(2, 16, 16, name="a.y"),
        GemmShape(1, 16, 16, name="b.x+a.x"), GemmShape(1, 16, 16, "fp16", name="c.x"),
    ])
    assert [(s.m, s.dtype, s.name) for s in merged] == [
        (1, "bf16", "a.x+b.x"), (2, "bf16", "a.y"), (1, "fp16", "c.x")]


# ---- projection_shapes -------------------------------------------------------------------------


def test_llama3_8b_projections_at_m1():
    shapes = projection_shapes(LLAMA3_8B, m_values=(1,), model_name="llama3-8b")
    by = _by_mnk(shapes)
    assert "llama3-8b.q_proj" in by[(1, 4096, 4096)].names
    assert "llama3-8b.o_proj" in by[(1, 4096, 4096)].names  # same GEMM, merged
    assert by[(1, 1024, 4096)].names == ("llama3-8b.k_proj", "llama3-8b.v_proj")
    assert by[(1, 6144, 4096)].names == ("llama3-8b.qkv_proj",)
    assert "llama3-8b.gate_proj" in by[(1, 14336, 4096)].names
    assert "llama3-8b.up_proj" in by[(1, 14336, 4096)].names
    assert by[(1, 28672, 4096)].names == ("llama3-8b.gate_up_proj",)
    assert by[(1, 4096, 14336)].names == ("llama3-8b.down_proj",)
    assert len(shapes) == 6  # no duplicate (m, n, k)
    assert all((s.dtype, s.out_dtype, s.layout) == ("bf16", "bf16", "tn") for s in shapes)


def test_default_m_values_and_name_from_config():
    shapes = projection_shapes(LLAMA3_8B)
    assert DEFAULT_M == (1, 8, 32, 64, 100, 256, 512, 1024, 3000, 8192)
    assert sorted({s.m for s in shapes}) == sorted(DEFAULT_M)
    assert len(shapes) == 6 * len(DEFAULT_M)
    assert shapes[0].name.startswith("meta-llama-3-8b.")  # last part of _name_or_path, lower case
    assert [s.m for s in shapes[:6]] == [1] * 6  # M order, then projection order


def test_head_dim_and_kv_heads_defaults():
    cfg = {"hidden_size": 1024, "intermediate_size": 4096, "num_attention_heads": 16}
    by = _by_mnk(projection_shapes(cfg, m_values=(8,), model_name="mha"))
    assert "mha.k_proj" in by[(8, 1024, 1024)].names  # kv heads = heads, head_dim = 64
    assert by[(8, 3072, 1024)].names == ("mha.qkv_proj",)
    # an explicit head_dim that is not hidden / heads (Qwen3-30B-A3B: 32 x 128 = 4096 != 2048)
    cfg = {"hidden_size": 2048, "intermediate_size": 6144, "num_attention_heads": 32,
           "num_key_value_heads": 4, "head_dim": 128}
    by = _by_mnk(projection_shapes(cfg, m_values=(1,), model_name="x"))
    assert by[(1, 4096, 2048)].names == ("x.q_proj",)
    assert by[(1, 2048, 4096)].names == ("x.o_proj",)
    assert by[(1, 4096 + 2 * 512, 2048)].names == ("x.qkv_proj",)


def test_fp16_dtype_propagates_and_bad_dtype_refused():
    assert {s.dtype for s in projection_shapes(LLAMA3_8B, (1,), dtype="fp16")} == {"fp16"}
    with pytest.raises(ProblemError) as info:
        projection_shapes(LLAMA3_8B, (1,), dtype="fp8")
    assert info.value.rule == "problem.dtype"


def test_missing_config_key_names_key_and_file(tmp_path):
    cfg = dict(LLAMA3_8B)
    del cfg["intermediate_size"]
    with pytest.raises(ProblemError) as info:
        projection_shapes(cfg, (1,))
    assert info.value.rule == "shapes.config_key"
    assert "'intermediate_size'" in str(info.value)
    path = tmp_path / "broken.json"
    path.write_text(json.dumps({k: v for k, v in LLAMA3_8B.items() if k != "hidden_size"}))
    with pytest.raises(ProblemError) as info:
        load_model(path)
    assert info.value.rule == "shapes.config_key"
    assert str(path) in str(info.value) and "'hidden_size'" in str(info.value)


@pytest.mark.parametrize("key, value", [("num_attention_heads", 0), ("hidden_size", "4096"),
                                        ("num_key_value_heads", True), ("head_dim", 12.5)])
def test_malformed_config_value(key, value):
    with pytest.raises(ProblemError) as info:
        projection_shapes({**LLAMA3_8B, key: value}, (1,))
    assert info.value.rule == "shapes.config_key"
    assert repr(key) in str(info.value)


@pytest.mark.parametrize("kv_heads", [64, 5])
def test_kv_heads_that_do_not_divide_the_heads_are_refused(kv_heads):
    """A config with more (or not a divisor of the) key/value heads than query heads is malformed (fuzz,
    session 21: it was accepted and its shapes tuned)."""
    with pytest.raises(ProblemError) as info:
        projection_shapes({**LLAMA3_8B, "num_key_value_heads": kv_heads}, (1,))
    assert info.value.rule == "shapes.config_key" and "num_key_value_heads" in str(info.value)


def test_head_dim_needed_when_hidden_not_divisible():
    cfg = {"hidden_size": 1000, "intermediate_size": 4096, "num_attention_heads": 16}
    with pytest.raises(ProblemError, match="head_dim"):
        projection_shapes(cfg, (1,))


def test_mla_config_refused():
    with pytest.raises(ProblemError) as info:
        projection_shapes({**LLAMA3_8B, "kv_lora_rank": 512}, (1,))
    assert info.value.rule == "shapes.config_unsupported"


@pytest.mark.parametrize("m_values", [(), (0,), (1, 2.5), (True,)])
def test_bad_m_values(m_values):
    with pytest.raises(ProblemError) as info:
        projection_shapes(LLAMA3_8B, m_values)
    assert info.value.rule == "shapes.m_values"


def test_text_config_is_read():
    cfg = {"_name_or_path": "org/VLM-1", "text_config": dict(LLAMA3_8B, _name_or_path="")}
    shapes = projection_shapes(cfg, (1,))
    assert (1, 6144, 4096) in _by_mnk(shapes)
    assert shapes[0].name.startswith("vlm-1.")


def test_moe_dense_mlp_only_when_some_layers_keep_it():
    moe = {"hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768,
           "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
           "num_experts": 128, "decoder_sparse_step": 1, "mlp_only_layers": []}
    by = _by_mnk(projection_shapes(moe, (64,), model_name="q"))
    assert by[(64, 768, 2048)].names == ("q.experts.gate_proj", "q.experts.up_proj")
    assert by[(64, 2048, 768)].names == ("q.experts.down_proj",)
    assert by[(64, 128, 2048)].names == ("q.router",)
    assert (64, 6144, 2048) not in by  # every layer is sparse: no dense MLP
    by = _by_mnk(projection_shapes({**moe, "mlp_only_layers": [0]}, (64,), model_name="q"))
    assert by[(64, 6144, 2048)].names == ("q.gate_proj", "q.up_proj")
    by = _by_mnk(projection_shapes({**moe, "shared_expert_intermediate_size": 5632}, (64,), model_name="q"))
    assert "q.shared_expert.gate_proj" in by[(64, 5632, 2048)].names


# ---- load_model / shipped models ---------------------------------------------------------------


def test_load_model_names(tmp_path):
    (tmp_path / "llama3-8b.json").write_text(json.dumps(LLAMA3_8B))
    assert load_model(tmp_path / "llama3-8b.json", (1,))[0].name.startswith("llama3-8b.")
    folder = tmp_path / "snapshot"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA3_8B))
    assert load_model(folder, (1,))[0].name.startswith("meta-llama-3-8b.")  # a folder, its config.json
    assert load_model(folder / "config.json", (1,), model_name="l3")[0].name.startswith("l3.")
    with pytest.raises(ProblemError) as info:
        load_model(tmp_path / "absent.json")
    assert info.value.rule == "shapes.file"
    (tmp_path / "bad.json").write_text('{"hidden_size": 4096,\n "x": }')
    with pytest.raises(ProblemError) as info:
        load_model(tmp_path / "bad.json")
    assert info.value.rule == "shapes.syntax" and "bad.json:2:" in str(info.value)


def test_shipped_models():
    models = shipped_models()
    assert len(models) >= 6
    assert {"llama3-8b", "llama3-70b", "qwen3-8b", "mistral-7b-v0.3", "gemma2-9b", "mixtral-8x7b",
            "qwen3-30b-a3b"} <= set(models)
    for name, cfg in models.items():
        assert isinstance(cfg.get("_name_or_path"), str) and "/" in cfg["_name_or_path"], name
        assert isinstance(cfg.get("model_type"), str), name
    # the published numbers (agent/models/SOURCES.md)
    assert (models["llama3-70b"]["hidden_size"], models["llama3-70b"]["intermediate_size"]) == (8192, 28672)
    assert (models["gemma2-9b"]["head_dim"], models["gemma2-9b"]["num_attention_heads"]) == (256, 16)
    assert models["qwen3-30b-a3b"]["moe_intermediate_size"] == 768


def test_model_shape_set_validates_and_covers_every_model():
    shapes = model_shape_set()
    assert len({s.key for s in shapes}) == len(shapes)  # merged across models
    assert {s.m for s in shapes} == set(DEFAULT_M)
    for s in shapes:
        s.problem().validate()
    names = [n for s in shapes for n in s.names]
    for model in shipped_models():
        assert any(n.startswith(f"{model}.") for n in names), model
    # Llama-3-8B and Mistral-7B share every dense shape: one GEMM, both names
    qkv = _by_mnk(shapes)[(1, 6144, 4096)]
    assert {"llama3-8b.qkv_proj", "mistral-7b-v0.3.qkv_proj"} <= set(qkv.names)


def test_mixtral_expert_shapes():
    shapes = model_shape_set(m_values=(1, 3000))
    by = _by_mnk(shapes)
    for m in (1, 3000):
        assert "mixtral-8x7b.experts.gate_proj" in by[(m, 14336, 4096)].names
        assert "mixtral-8x7b.experts.down_proj" in by[(m, 4096, 14336)].names
        assert "mixtral-8x7b.router" in by[(m, 8, 4096)].names
    mixtral = [n for s in shapes for n in s.names if n.startswith("mixtral-8x7b.")]
    assert "mixtral-8x7b.gate_proj" not in mixtral  # no dense MLP in Mixtral


# ---- shape files --------------------------------------------------------------------------------


SAMPLE = [
    GemmShape(1, 4096, 4096, name="llama3-8b.q_proj+llama3-8b.o_proj"),
    GemmShape(100, 1024, 4096, "fp16", "fp32", "tn", "k, v"),
    GemmShape(3000, 14336, 4096, layout="nt"),
]


@pytest.mark.parametrize("suffix", [".json", ".csv"])
def test_round_trip(tmp_path, suffix):
    path = write_shapes(SAMPLE, tmp_path / f"shapes{suffix}")
    assert load_shapes(path) == SAMPLE
    both = model_shape_set(m_values=(1, 100))
    assert load_shapes(write_shapes(both, tmp_path / f"set{suffix}")) == both


def test_json_forms(tmp_path):
    p = tmp_path / "a.json"
    p.write_text(json.dumps([{"m": 8, "n": 1024, "k": 4096}]))
    assert load_shapes(p) == [GemmShape(8, 1024, 4096)]
    entry = {"m": 8, "n": 1024, "k": 4096, "out_dtype": "fp32"}
    p.write_text(json.dumps({"comment": "x", "shapes": [entry]}))
    assert load_shapes(p) == [GemmShape(8, 1024, 4096, out_dtype="fp32")]
    p2 = tmp_path / "noext"
    p2.write_text(json.dumps([{"m": 8, "n": 16, "k": 16}]))
    assert load_shapes(p2) == [GemmShape(8, 16, 16)]


def test_csv_minimal_with_comments_and_defaults(tmp_path):
    p = tmp_path / "s.csv"
    p.write_text("# token counts of the decode step\nM, N, K, layout\n\n1,4096,4096,\n8, 1024, 4096, nt\n")
    assert load_shapes(p) == [GemmShape(1, 4096, 4096), GemmShape(8, 1024, 4096, layout="nt")]


def test_bad_csv_row_names_line_and_field(tmp_path):
    p = tmp_path / "s.csv"
    p.write_text("m,n,k,dtype\n1,4096,4096,bf16\n8,four,4096,bf16\n")
    with pytest.raises(ProblemError) as info:
        load_shapes(p)
    assert info.value.rule == "shapes.field"
    assert f"{p}:3:" in str(info.value) and "'n'" in str(info.value)


@pytest.mark.parametrize("cell", ["-1", "0", " -4096"])
def test_a_csv_size_below_one_names_the_size_rule_and_the_line(tmp_path, cell):
    """A negative or zero size is an integer: the message names the >= 1 rule and the line (fuzz, session 21:
    -1 was reported as 'not an integer')."""
    p = tmp_path / "s.csv"
    p.write_text(f"m,n,k\n1,4096,4096\n{cell},4096,4096\n")
    with pytest.raises(ProblemError) as info:
        load_shapes(p)
    assert info.value.rule == "problem.size" and f"{p}:3:" in str(info.value) and ">= 1" in str(info.value)


def test_misaligned_shapes_are_tuned_through_staging(tmp_path):
    """K = 4095 and N = 4100 break TMA's 16-byte rule: ``gemm`` runs them through aligned staging, so a shapes file
    takes it too (``validate_any``), and the plan names the staged operands."""
    p = tmp_path / "s.csv"
    p.write_text("m,n,k\n1,4100,4095\n")
    (shape,) = load_shapes(p)
    assert [s.name for s in shape.problem().staging()] == ["A", "B", "D"]  # N = 4100: 8200-byte rows of D too


def test_a_csv_with_a_byte_order_mark_reads(tmp_path):
    """Excel's "CSV UTF-8" starts with a byte-order mark; its first column is still ``m`` (red team, session 34:
    refused as the unknown column '\\ufeffm')."""
    p = tmp_path / "s.csv"
    p.write_bytes(b"\xef\xbb\xbfm,n,k\n8,4096,4096\n")
    (shape,) = load_shapes(p)
    assert (shape.m, shape.n, shape.k) == (8, 4096, 4096)


@pytest.mark.parametrize("text, rule, needle", [
    ("m,n,k\n1,4096\n", "shapes.syntax", ":2:"),                   # too few cells
    ("m,n,k,dtpye\n1,16,16,bf16\n", "shapes.field", "'dtpye'"),     # unknown column
    ("m,n\n1,16\n", "shapes.field", "'k'"),                         # missing column
    ("m,n,k\n1,16,\n", "shapes.field", "'k'"),                      # empty required cell
    ("m,n,k\n1,16,1.5\n", "shapes.field", "'k'"),                   # not an integer
    ("m,n,k\n++128,16,16\n", "shapes.field", "'m'"),                # two signs (a traceback before session 34)
    ("m,n,k\n1,16,\u00b2\n", "shapes.field", "'k'"),               # a digit str.isdigit knows, int() does not
    ("m,n,k\n1,-+5,16\n", "shapes.field", "'n'"),
    ("m,n,k,dtype\n1,16,16,fp8\n", "problem.dtype", ":2:"),        # GemmProblem rule, with the line
    ("m,n,k\n1,16,2147483648\n", "problem.size", ":2:"),            # K past the entry's int
    ("m,n,k\n0,16,16\n", "problem.size", ":2:"),
    ("m,n,k\n", "shapes.syntax", "no shapes"),
    ("# only a comment\n", "shapes.syntax", "no header"),
])
def test_bad_csv(tmp_path, text, rule, needle):
    p = tmp_path / "s.csv"
    p.write_text(text)
    with pytest.raises(ProblemError) as info:
        load_shapes(p)
    assert info.value.rule == rule
    assert needle in str(info.value)


def test_bad_json_entries_name_line(tmp_path):
    p = tmp_path / "s.json"
    p.write_text('{"shapes": [\n  {"m": 1, "n": 16, "k": 16},\n  {"m": 1, "n": 16, "k": "16"}\n]}\n')
    with pytest.raises(ProblemError) as info:
        load_shapes(p)
    assert info.value.rule == "shapes.field" and f"{p}:3 (shapes[1]):" in str(info.value) and "'k'" in str(info.value)
    p.write_text('[\n {"m": 1, "n": 16, "k": 16, "layout": "xx"}\n]')
    with pytest.raises(ProblemError) as info:
        load_shapes(p)
    assert info.value.rule == "problem.layout" and f"{p}:2 (shapes[0]):" in str(info.value)
    p.write_text('[{"m": 1, "n": 16, "k": 16}, {"m": 1, "n": 16}]')   # one line, as json.dump writes: the entry named
    with pytest.raises(ProblemError) as info:
        load_shapes(p)
    assert f"{p}:1 (shapes[1]):" in str(info.value) and "'k'" in str(info.value)
    p.write_text('[{"m": 1, "n": 16, "k": 16, "lda": 32}]')
    with pytest.raises(ProblemError, match="unknown field 'lda'"):
        load_shapes(p)
    p.write_text('[{"m": true, "n": 16, "k": 16}]')
    with pytest.raises(ProblemError, match="'m'"):
        load_shapes(p)
    p.write_text('[1, 2]')
    with pytest.raises(ProblemError, match="JSON object"):
        load_shapes(p)
    p.write_text('[{"m": 1,}]')
    with pytest.raises(ProblemError) as info:
        load_shapes(p)
    assert info.value.rule == "shapes.syntax" and f"{p}:1:" in str(info.value)
    p.write_text(json.dumps(LLAMA3_8B))
    with pytest.raises(ProblemError) as info:
        load_shapes(p)
    assert "--model" in str(info.value)


def test_a_json_field_given_twice_in_one_shape_is_refused(tmp_path):
    """Review (adversarial user): ``{"m": 64, "m": 65}`` was silently the shape M = 65 (json keeps the last key);
    as a CSV header's repeated column, it is refused, naming the row and the field."""
    p = tmp_path / "s.json"
    p.write_text('[\n {"m": 64, "n": 64, "k": 64},\n {"m": 64, "n": 64, "k": 64, "m": 65}\n]')
    with pytest.raises(ProblemError) as info:
        load_shapes(p)
    assert info.value.rule == "shapes.field" and f"{p}:3 (shapes[1]): field 'm' appears twice" in str(info.value)
    p.write_text('{"shapes": [{"m": 64, "n": 64, "k": 64, "name": "a"}]}')
    assert [s.name for s in load_shapes(p)] == ["a"]


def test_missing_file_and_bad_suffix(tmp_path):
    with pytest.raises(ProblemError) as info:
        load_shapes(tmp_path / "nope.csv")
    assert info.value.rule == "shapes.file"
    with pytest.raises(ProblemError) as info:
        write_shapes(SAMPLE, tmp_path / "s.txt")
    assert info.value.rule == "shapes.file"
    assert FIELDS[:3] == ("m", "n", "k")


# ---- spellings and duplicate rows (red team, session 35) -----------------------------------------


def test_a_shape_file_takes_exactly_the_command_lines_spellings(tmp_path):
    """dtype / out_dtype / layout go through the CLI's own normalisation (argus_cutlass.kernels.spellings): every
    alias --dtype/--out-dtype/--layout take is taken by a CSV and a JSON file too, and read as the CLI reads it."""
    from argus_cutlass.cli import DTYPE_ALIASES, dtype_arg, layout_arg
    from argus_cutlass.kernels.gemm.problem import INPUT_DTYPES

    inputs = [a for a, canon in DTYPE_ALIASES.items() if canon in INPUT_DTYPES]
    outputs = list(DTYPE_ALIASES)
    rows = [(a.upper() if i % 2 else a, o, lay) for i, (a, o, lay) in
            enumerate(zip(inputs * 3, outputs * 2, ["TN", "nt", " Nn ", "tT"] * 4))]
    want = [GemmShape(128, 256, 512, dtype_arg(a), dtype_arg(o), layout_arg(lay)) for a, o, lay in rows]
    csv = tmp_path / "s.csv"
    csv.write_text("m,n,k,dtype,out_dtype,layout\n" + "".join(f"128,256,512,{a},{o},{lay}\n" for a, o, lay in rows))
    js = tmp_path / "s.json"
    js.write_text(json.dumps([{"m": 128, "n": 256, "k": 512, "dtype": a, "out_dtype": o, "layout": lay}
                              for a, o, lay in rows]))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the rows repeat GEMMs on purpose
        for path in (csv, js):
            got = load_shapes(path)
            assert got == want
            assert {(s.dtype, s.layout) for s in got} <= {(d, lay) for d in INPUT_DTYPES
                                                          for lay in ("tn", "nt", "nn", "tt")}


@pytest.mark.parametrize("text, rule, needles", [
    ("m,n,k,dtype\n1,16,16,bf16\n1,16,16,int8\n", "problem.dtype", [":3:", "dtype='int8'"]),
    ("m,n,k,out_dtype\n1,16,16,double\n", "problem.dtype", [":2:", "out_dtype='double'"]),
    ("m,n,k,layout\n1,16,16,TX\n", "problem.layout", [":2:", "layout='tx'"]),
])
def test_an_unknown_spelling_names_the_row_and_the_field(tmp_path, text, rule, needles):
    p = tmp_path / "s.csv"
    p.write_text(text)
    with pytest.raises(ProblemError) as info:
        load_shapes(p)
    assert info.value.rule == rule and all(n in str(info.value) for n in needles), str(info.value)
    # out_dtype defaults to dtype: an unknown dtype is reported once, for dtype (as the CLI does)
    assert "out_dtype='int8'" not in str(info.value)


def test_duplicate_rows_are_kept_with_a_warning_naming_them(tmp_path):
    from argus_cutlass.agent.shapes import DuplicateShapesWarning

    p = tmp_path / "s.csv"
    p.write_text("m,n,k,dtype,layout,name\n128,256,512,bf16,tn,a\n64,64,64,bf16,tn,b\n"
                 "128,256,512,bfloat16,TN,c\n64,64,64,fp16,tn,d\n128,256,512,,,e\n")
    with pytest.warns(DuplicateShapesWarning) as caught:
        shapes = load_shapes(p)
    assert len(shapes) == 5 and len(caught) == 1  # all the rows, in file order; one warning
    w = caught[0].message
    assert str(w) == f"{p}: lines 2, 4 and 6 list the same GEMM 128x256x512_bf16_bf16_tn; it is tuned once"
    assert w.rows == {"128x256x512_bf16_bf16_tn": ["line 2", "line 4", "line 6"]}
    j = tmp_path / "s.json"
    j.write_text('{"shapes": [\n {"m": 8, "n": 64, "k": 64},\n {"m": 8, "n": 64, "k": 64, "layout": "TN"},\n'
                 ' {"m": 1, "n": 64, "k": 64},\n {"m": 1, "n": 64, "k": 64}\n]}\n')
    with pytest.warns(DuplicateShapesWarning, match=r"lines 2 and 3 list the same GEMM 8x64x64_bf16_bf16_tn; "
                                                      r"lines 4 and 5 list the same GEMM 1x64x64_bf16_bf16_tn; each"):
        assert len(load_shapes(j)) == 4


def test_distinct_rows_give_no_warning(tmp_path):
    import warnings

    p = tmp_path / "s.csv"
    p.write_text("m,n,k,dtype,out_dtype\n128,256,512,bf16,bf16\n128,256,512,bf16,fp32\n128,256,512,fp16,\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(load_shapes(p)) == 3
