"""GEMM shape sets: the shapes ``argus-cutlass tune`` is evaluated and run on.

Three sources of :class:`GemmShape` lists:

* :func:`projection_shapes` / :func:`load_model`: every linear projection of a transformer,
  read from a Hugging Face ``config.json`` (``argus-cutlass tune --model CONFIG.json``);
* :func:`load_shapes`: a JSON or CSV file of explicit shapes (``argus-cutlass tune --shapes FILE``);
* :func:`model_shape_set`: the union over the model configurations shipped in
  ``agent/models/`` (:func:`shipped_models`; sources in ``agent/models/SOURCES.md``), at the
  token counts :data:`DEFAULT_M`. This is the evaluation shape set of issue 13.

Projections as GEMMs
--------------------
A linear layer ``y = x W^T`` with ``x`` of M tokens x ``in`` features and the weight ``W``
stored ``out x in`` (PyTorch ``nn.Linear``) is the GEMM ``M = tokens``, ``N = out``,
``K = in``, layout ``tn``: A = x row-major (K contiguous), B = W stored N x K (K contiguous).
With ``H`` = ``hidden_size``, ``h`` = ``num_attention_heads``, ``g`` = ``num_key_value_heads``
(default ``h``), ``d`` = ``head_dim`` (default ``H / h``) and ``I`` = ``intermediate_size``:

================== ======================= ==========
projection         N                       K
================== ======================= ==========
``q_proj``         ``h*d``                 ``H``
``k_proj``         ``g*d``                 ``H``
``v_proj``         ``g*d``                 ``H``
``qkv_proj``       ``(h + 2g)*d`` (fused)  ``H``
``o_proj``         ``H``                   ``h*d``
``gate_proj``      ``I``                   ``H``
``up_proj``        ``I``                   ``H``
``gate_up_proj``   ``2I`` (fused)          ``H``
``down_proj``      ``H``                   ``I``
================== ======================= ==========

Mixture-of-experts models (``num_local_experts``, ``num_experts`` or ``n_routed_experts``)
add ``router`` (N = experts, K = H) and the per-expert MLP ``experts.gate_proj`` ...
``experts.down_proj`` with ``I`` = ``moe_intermediate_size`` (else ``intermediate_size``);
M is then the number of tokens routed to one expert. Their dense MLP is listed only when some
layers keep one (``mlp_only_layers`` non-empty or ``decoder_sparse_step`` > 1, the Qwen-MoE
keys); ``shared_expert_intermediate_size`` > 0 adds ``shared_expert.*``. A config that nests
the language model under ``text_config`` is read from there. Multi-head latent attention
(``kv_lora_rank``, DeepSeek) is refused: its projections are not the ones above.

Names
-----
A shape's ``name`` lists every projection it stands for, ``<model>.<projection>``, joined by
``+``: projections of identical (M, N, K) are merged (Llama-3-8B's ``q_proj`` and ``o_proj``
are both 4096 x 4096), within a model and, in :func:`model_shape_set`, across models.

>>> cfg = {"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
...        "num_key_value_heads": 8}
>>> for s in projection_shapes(cfg, m_values=(1,), model_name="llama3-8b"):
...     print(s.m, s.n, s.k, s.name)
1 4096 4096 llama3-8b.q_proj+llama3-8b.o_proj
1 1024 4096 llama3-8b.k_proj+llama3-8b.v_proj
1 6144 4096 llama3-8b.qkv_proj
1 14336 4096 llama3-8b.gate_proj+llama3-8b.up_proj
1 28672 4096 llama3-8b.gate_up_proj
1 4096 14336 llama3-8b.down_proj

Shape files
-----------
JSON: a list of objects, or ``{"shapes": [...]}``; CSV: a header row, then one shape a row
(blank lines and lines starting with ``#`` are skipped). Fields :data:`FIELDS`: ``m``, ``n``,
``k`` (required integers), ``dtype`` (default ``bf16``), ``out_dtype`` (default: ``dtype``),
``layout`` (default ``tn``), ``name``. ``dtype``, ``out_dtype`` and ``layout`` take exactly the
spellings the command line takes (``bfloat16``, ``float16``, ``half``, ``float32``, ``TN``, any case:
:mod:`argus_cutlass.kernels.spellings`). Every shape is checked with
:meth:`~argus_cutlass.kernels.gemm.problem.GemmProblem.validate_any` (what ``gemm`` runs: the direct
path or aligned staging); a bad entry raises :class:`~argus_cutlass.errors.ProblemError` naming
``file:line`` and the field or rule. Rows that list the same GEMM (same M, N, K, dtypes and layout,
whatever the spelling or name) are kept, and a :class:`DuplicateShapesWarning` names them (rule
``shapes.duplicate``; a tuner tunes such a GEMM once). :func:`write_shapes` writes either format.

Errors (the ``rule`` of the :class:`~argus_cutlass.errors.ProblemError`): ``shapes.file``
(missing or unreadable file, unknown format), ``shapes.syntax`` (invalid JSON or CSV
structure), ``shapes.field`` (a missing, unknown or malformed field), ``shapes.m_values``,
``shapes.config_key`` (a config key missing or malformed), ``shapes.config_unsupported``;
and the rules of ``GemmProblem.validate`` (``problem.dtype``, ``tma.contiguous_extent`` ...).
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from argus_cutlass.errors import ProblemError
from argus_cutlass.kernels.gemm.problem import INPUT_DTYPES, GemmProblem
from argus_cutlass.kernels.spellings import normalize_dtype, normalize_layout

#: the token counts (GEMM M) of the evaluation shape set: decode (1, 8), small and odd
#: batches (32, 64, 100), prefill chunks (256 ... 8192) and a ragged large one (3000)
DEFAULT_M: tuple[int, ...] = (1, 8, 32, 64, 100, 256, 512, 1024, 3000, 8192)
#: the fields of a shape file, in the order :func:`write_shapes` writes them
FIELDS: tuple[str, ...] = ("m", "n", "k", "dtype", "out_dtype", "layout", "name")
#: joins the projection names one shape stands for
NAME_SEP = "+"
#: the folder (inside ``argus_cutlass.agent``) holding the shipped model configs
MODELS_DIR = "models"

_REQUIRED = ("m", "n", "k")
#: keys naming the number of routed experts, in the order they are looked up
_EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")


@dataclass(frozen=True)
class GemmShape:
    """One GEMM of a shape set: ``D[M,N] = A[M,K] @ B[K,N]`` with its dtypes and layout.

    Args:
        m, n, k: problem sizes.
        dtype: A and B element type (``bf16`` or ``fp16``).
        out_dtype: C and D element type; ``None`` means ``dtype``.
        layout: ``tn`` (the default: ``y = x W^T``), ``nt``, ``nn`` or ``tt``.
        name: what the shape stands for, e.g. ``"llama3-8b.q_proj+llama3-8b.o_proj"``.

    The element types and the layout take every spelling the command line takes (``bfloat16``,
    ``half``, ``float32``, ``TN`` ...: :mod:`argus_cutlass.kernels.spellings`) and hold the canonical
    name. Construction checks nothing else; :meth:`problem` ``.validate()`` does.

    >>> GemmShape(8, 1024, 4096, "BFloat16", "float32", "NT").label
    '8x1024x4096_bf16_fp32_nt'

    >>> s = GemmShape(8, 1024, 4096, name="llama3-8b.k_proj")
    >>> s.out_dtype, s.label, s.names
    ('bf16', '8x1024x4096_bf16_bf16_tn', ('llama3-8b.k_proj',))
    >>> s.problem().validate().ldb
    4096
    """

    m: int
    n: int
    k: int
    dtype: str = "bf16"
    out_dtype: str | None = None
    layout: str = "tn"
    name: str = ""

    def __post_init__(self) -> None:
        # the spellings the command line accepts (bfloat16, half, TN ...) -> canonical names
        for f, norm in (("dtype", normalize_dtype), ("out_dtype", normalize_dtype), ("layout", normalize_layout)):
            value = getattr(self, f)
            if isinstance(value, str):
                object.__setattr__(self, f, norm(value))
        if self.out_dtype is None:
            object.__setattr__(self, "out_dtype", self.dtype)

    def problem(self) -> GemmProblem:
        """The :class:`~argus_cutlass.kernels.gemm.problem.GemmProblem` (packed leading dimensions)."""
        return GemmProblem(self.m, self.n, self.k, self.dtype, self.out_dtype, self.layout)

    @property
    def key(self) -> tuple[int, int, int, str, str, str]:
        """``(m, n, k, dtype, out_dtype, layout)``: what identifies the GEMM (the name does not)."""
        return (self.m, self.n, self.k, self.dtype, str(self.out_dtype), self.layout)

    @property
    def label(self) -> str:
        """``<M>x<N>x<K>_<dtype>_<out_dtype>_<layout>``, as in the tuning log file names."""
        return f"{self.m}x{self.n}x{self.k}_{self.dtype}_{self.out_dtype}_{self.layout}"

    @property
    def names(self) -> tuple[str, ...]:
        """The projection names this shape stands for (``name`` split at ``+``)."""
        return tuple(p for p in self.name.split(NAME_SEP) if p)

    def to_dict(self) -> dict[str, Any]:
        """The fields :data:`FIELDS` as a dict (what a JSON shape file holds)."""
        return {f: getattr(self, f) for f in FIELDS}


# ---- merging -------------------------------------------------------------------------------


def merge_shapes(shapes: Iterable[GemmShape]) -> list[GemmShape]:
    """Drop repeated GEMMs (same :attr:`GemmShape.key`), keeping first-seen order; the kept
    shape's name lists every name of its repeats once (joined by ``+``).

    >>> merged = merge_shapes([GemmShape(1, 8, 8, name="a.q"), GemmShape(1, 8, 8, name="b.q"),
    ...                        GemmShape(2, 8, 8, name="a.q"), GemmShape(1, 8, 8, name="a.q")])
    >>> [(s.m, s.name) for s in merged]
    [(1, 'a.q+b.q'), (2, 'a.q')]
    """
    order: dict[tuple, GemmShape] = {}
    names: dict[tuple, list[str]] = {}
    for s in shapes:
        if s.key not in order:
            order[s.key] = s
            names[s.key] = []
        for part in s.names:
            if part not in names[s.key]:
                names[s.key].append(part)
    return [
        GemmShape(s.m, s.n, s.k, s.dtype, s.out_dtype, s.layout, NAME_SEP.join(names[key]))
        for key, s in order.items()
    ]


# ---- model configs -------------------------------------------------------------------------


def _check_m_values(m_values: Iterable[int], source: str) -> tuple[int, ...]:
    ms = tuple(m_values)
    if not ms:
        raise ProblemError("shapes.m_values", f"{source}: no M values given")
    for m in ms:
        if not isinstance(m, int) or isinstance(m, bool) or m < 1:
            raise ProblemError("shapes.m_values", f"{source}: M={m!r} is not an integer >= 1")
    return ms


def _config_int(cfg: Mapping[str, Any], key: str, source: str, default: int | None = None,
                minimum: int = 1) -> int:
    """``cfg[key]`` as an integer >= minimum; ``default`` when absent or null (None: required)."""
    value = cfg.get(key)
    if value is None:
        if default is None:
            raise ProblemError(
                "shapes.config_key",
                f"{source}: missing key {key!r} (a Hugging Face config.json needs it to list the "
                "model's projections)",
                "pass the model's config.json (hidden_size, intermediate_size, num_attention_heads, "
                "optional num_key_value_heads and head_dim), or write the shapes to a file for --shapes",
            )
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ProblemError(
            "shapes.config_key", f"{source}: key {key!r} is {value!r}; expected an integer >= {minimum}")
    return value


def _model_name(cfg: Mapping[str, Any], fallback: str = "") -> str:
    path = cfg.get("_name_or_path")
    if isinstance(path, str) and path.strip("/"):
        return path.strip("/").rsplit("/", 1)[-1].lower()
    if fallback:
        return fallback
    model_type = cfg.get("model_type")
    return model_type if isinstance(model_type, str) and model_type else "model"


def _dense_mlp_in_moe(cfg: Mapping[str, Any], source: str) -> bool:
    """Whether some layers of a MoE model keep a dense MLP (Qwen-MoE ``mlp_only_layers`` and
    ``decoder_sparse_step``)."""
    only = cfg.get("mlp_only_layers")
    if only is not None and not isinstance(only, list):
        raise ProblemError(
            "shapes.config_key", f"{source}: key 'mlp_only_layers' is {only!r}; expected a list")
    step = _config_int(cfg, "decoder_sparse_step", source, default=1)
    return bool(only) or step > 1


def projection_shapes(
    config: Mapping[str, Any],
    m_values: Iterable[int] = DEFAULT_M,
    dtype: str = "bf16",
    model_name: str = "",
    *,
    source: str = "<config>",
) -> list[GemmShape]:
    """Every projection GEMM of a transformer (module docstring) at each M of ``m_values``.

    Args:
        config: a Hugging Face ``config.json`` as a dict.
        m_values: the token counts (GEMM M).
        dtype: the element type of every operand (``bf16`` or ``fp16``).
        model_name: the prefix of the names; default: the last part of ``_name_or_path``
            (lower case), else ``model_type``.
        source: how errors name the config (:func:`load_model` passes the file).

    Returns:
        The shapes in M order, then projection order; identical (M, N, K) merged.

    Raises:
        ProblemError: ``shapes.config_key`` naming a missing or malformed key and ``source``;
            ``shapes.config_unsupported``; ``shapes.m_values``; the rule of a shape that
            ``GemmProblem.validate`` refuses (e.g. ``problem.dtype``).
    """
    if not isinstance(config, Mapping):
        raise ProblemError(
            "shapes.config_key", f"{source}: a config must be a JSON object, not {type(config).__name__}")
    cfg = config
    text_config = cfg.get("text_config")
    if "hidden_size" not in cfg and isinstance(text_config, Mapping):
        cfg = {**text_config, "_name_or_path": cfg.get("_name_or_path") or text_config.get("_name_or_path")}
        source = f"{source} (text_config)"
    for key in ("kv_lora_rank", "q_lora_rank"):
        if cfg.get(key) is not None:
            raise ProblemError(
                "shapes.config_unsupported",
                f"{source}: {key!r} is set: multi-head latent attention (DeepSeek) has projections "
                "this reader does not list",
                "write the model's GEMM shapes to a file and pass it with --shapes",
            )
    ms = _check_m_values(m_values, source)
    name = model_name or _model_name(cfg)

    hidden = _config_int(cfg, "hidden_size", source)
    heads = _config_int(cfg, "num_attention_heads", source)
    kv_heads = _config_int(cfg, "num_key_value_heads", source, default=heads)
    if heads % kv_heads:
        raise ProblemError(
            "shapes.config_key",
            f"{source}: num_attention_heads={heads} is not a multiple of num_key_value_heads={kv_heads} "
            "(grouped-query attention shares each key/value head among a whole number of query heads)",
            "check the config.json: num_key_value_heads divides num_attention_heads",
        )
    if cfg.get("head_dim") is None and hidden % heads:
        raise ProblemError(
            "shapes.config_key",
            f"{source}: missing key 'head_dim', and hidden_size={hidden} is not a multiple of "
            f"num_attention_heads={heads} (head_dim defaults to their quotient)",
        )
    head_dim = _config_int(cfg, "head_dim", source, default=hidden // heads)

    q, kv = heads * head_dim, kv_heads * head_dim
    proj: list[tuple[str, int, int]] = [
        ("q_proj", q, hidden),
        ("k_proj", kv, hidden),
        ("v_proj", kv, hidden),
        ("qkv_proj", q + 2 * kv, hidden),
        ("o_proj", hidden, q),
    ]

    def mlp(prefix: str, inter: int) -> list[tuple[str, int, int]]:
        return [
            (f"{prefix}gate_proj", inter, hidden),
            (f"{prefix}up_proj", inter, hidden),
            (f"{prefix}gate_up_proj", 2 * inter, hidden),
            (f"{prefix}down_proj", hidden, inter),
        ]

    expert_key = next((k for k in _EXPERT_KEYS if cfg.get(k) is not None), None)
    experts = _config_int(cfg, expert_key, source, minimum=0) if expert_key else 0
    if experts:
        if cfg.get("moe_intermediate_size") is not None:
            expert_inter = _config_int(cfg, "moe_intermediate_size", source)
        else:
            expert_inter = _config_int(cfg, "intermediate_size", source)
        if _dense_mlp_in_moe(cfg, source):
            proj += mlp("", _config_int(cfg, "intermediate_size", source))
        proj.append(("router", experts, hidden))
        proj += mlp("experts.", expert_inter)
        shared = _config_int(cfg, "shared_expert_intermediate_size", source, default=0, minimum=0)
        if shared:
            proj += mlp("shared_expert.", shared)
    else:
        proj += mlp("", _config_int(cfg, "intermediate_size", source))

    shapes = merge_shapes(
        GemmShape(m, n, k, dtype, dtype, "tn", f"{name}.{pname}") for m in ms for pname, n, k in proj
    )
    for s in shapes:
        try:
            s.problem().validate_any()  # the direct path or aligned staging, as `gemm` runs it
        except ProblemError as e:
            raise ProblemError(e.rule, f"{source}: {s.name} ({s.label}): {e.message}", e.hint) from None
    return shapes


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")   # "-sig": a byte-order mark (a CSV Excel saved) is dropped
    except FileNotFoundError:
        raise ProblemError("shapes.file", f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ProblemError("shapes.file", f"{path}: cannot read it: {e}") from None


def _json_error(path: Path, e: json.JSONDecodeError) -> ProblemError:
    return ProblemError("shapes.syntax", f"{path}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}")


def load_model(
    path: str | Path,
    m_values: Iterable[int] = DEFAULT_M,
    dtype: str = "bf16",
    model_name: str = "",
) -> list[GemmShape]:
    """:func:`projection_shapes` of a Hugging Face ``config.json`` (or a folder holding one).

    The names' prefix is ``model_name``, else the file's stem (``llama3-8b.json`` ->
    ``llama3-8b``), else (a file called ``config.json``) the last part of ``_name_or_path``
    or the folder's name.

    Raises:
        ProblemError: ``shapes.file`` / ``shapes.syntax`` for an unreadable file; the errors of
            :func:`projection_shapes`, naming the file.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    text = _read_text(path)
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as e:
        raise _json_error(path, e) from None
    if not isinstance(cfg, dict):
        raise ProblemError("shapes.config_key", f"{path}: a config.json must hold a JSON object")
    if not model_name:
        model_name = path.stem if path.stem != "config" else _model_name(cfg, path.resolve().parent.name)
    return projection_shapes(cfg, m_values, dtype, model_name, source=str(path))


def shipped_models() -> dict[str, dict[str, Any]]:
    """The model configs shipped in ``agent/models/`` (file stem -> config), sorted by name."""
    folder = resources.files("argus_cutlass.agent").joinpath(MODELS_DIR)
    out: dict[str, dict[str, Any]] = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".json"):
            out[entry.name.removesuffix(".json")] = json.loads(entry.read_text("utf-8"))
    return out


def model_shape_set(m_values: Iterable[int] = DEFAULT_M, dtype: str = "bf16") -> list[GemmShape]:
    """The evaluation shape set: every projection of every shipped model (:func:`shipped_models`)
    at each M, merged across models (a shape's name lists every model projection it covers).

    >>> shapes = model_shape_set(m_values=(1,))
    >>> any(s.key[:3] == (1, 14336, 4096) and "mixtral-8x7b.experts.gate_proj" in s.names
    ...     for s in shapes)
    True
    """
    ms = _check_m_values(m_values, "model_shape_set")
    shapes: list[GemmShape] = []
    for name, cfg in shipped_models().items():
        shapes += projection_shapes(cfg, ms, dtype, name, source=f"{MODELS_DIR}/{name}.json")
    return merge_shapes(shapes)


# ---- shape files -----------------------------------------------------------------------------


def _file_format(path: Path, text: str) -> str:
    suffix = path.suffix.lower()
    if suffix in (".json", ".csv"):
        return suffix[1:]
    head = text.lstrip()[:1]
    if head in ("[", "{"):
        return "json"
    if head:
        return "csv"
    raise ProblemError("shapes.file", f"{path}: the file is empty")


def _int_field(value: Any, field: str, where: str, from_text: bool) -> int:
    if from_text and isinstance(value, str):
        text = value.strip()
        # ASCII decimal digits after at most one sign ("++128" and "²" pass str.isdigit but not int())
        if re.fullmatch(r"[+-]?[0-9]+", text):   # a negative one is an integer, not a size: the size rule names it
            return int(text)
        raise ProblemError("shapes.field", f"{where}: field {field!r} is {value!r}, not an integer")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProblemError("shapes.field", f"{where}: field {field!r} is {value!r}, not an integer")
    return value


def _shape_from_fields(fields: Mapping[str, Any], where: str, from_text: bool) -> GemmShape:
    unknown = [f for f in fields if f not in FIELDS]
    if unknown:
        raise ProblemError(
            "shapes.field", f"{where}: unknown field {unknown[0]!r}; the fields are {', '.join(FIELDS)}")
    for f in _REQUIRED:
        if fields.get(f) in (None, ""):
            raise ProblemError("shapes.field", f"{where}: missing field {f!r} (m, n and k are required)")
    m, n, k = (_int_field(fields[f], f, where, from_text) for f in _REQUIRED)
    opt: dict[str, str | None] = {}
    for f in ("dtype", "out_dtype", "layout", "name"):
        value = fields.get(f)
        if isinstance(value, str):
            value = value.strip()
        if value in (None, ""):
            continue
        if not isinstance(value, str):
            raise ProblemError("shapes.field", f"{where}: field {f!r} is {value!r}, not a string")
        opt[f] = value
    shape = GemmShape(
        m, n, k, opt.get("dtype") or "bf16", opt.get("out_dtype"), opt.get("layout") or "tn",
        opt.get("name") or "")
    problem = shape.problem()
    if "out_dtype" not in opt and shape.dtype not in INPUT_DTYPES:
        # out_dtype defaults to dtype: an unsupported dtype is reported once, for dtype (as the CLI does)
        problem = GemmProblem(shape.m, shape.n, shape.k, shape.dtype, INPUT_DTYPES[0], shape.layout)
    try:
        problem.validate_any()  # the direct path or aligned staging, as `gemm` runs it
    except ProblemError as e:
        raise ProblemError(e.rule, f"{where}: {e.message}", e.hint) from None
    return shape


def _json_array_offsets(text: str, data: Any) -> list[int]:
    """Character offsets of the entries of the shapes array in ``text`` (already valid JSON)."""
    dec = json.JSONDecoder()

    def ws(i: int) -> int:
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
        return i

    def array(i: int) -> list[int]:  # text[i] == "["
        offsets: list[int] = []
        i = ws(i + 1)
        while text[i] != "]":
            offsets.append(i)
            _, i = dec.raw_decode(text, i)
            i = ws(i)
            if text[i] == ",":
                i = ws(i + 1)
        return offsets

    i = ws(0)
    if isinstance(data, list):
        return array(i)
    i = ws(i + 1)  # inside the top-level object
    found: list[int] = []
    while text[i] != "}":
        key, i = dec.raw_decode(text, i)
        i = ws(ws(i) + 1)  # past ":"
        if key == "shapes" and text[i] == "[":
            found = array(i)  # the last "shapes" wins, as in json.loads
        _, i = dec.raw_decode(text, i)
        i = ws(i)
        if text[i] == ",":
            i = ws(i + 1)
    return found


class _JsonObject(dict):
    """A JSON object that remembers the keys it was given more than once (``json`` keeps the last one silently:
    ``{"m": 64, "m": 65}`` was the shape M = 65)."""

    repeated: tuple[str, ...] = ()

    @classmethod
    def of_pairs(cls, pairs: list[tuple[str, Any]]) -> _JsonObject:
        obj = cls(pairs)
        if len(obj) != len(pairs):
            seen: set[str] = set()
            obj.repeated = tuple(dict.fromkeys(k for k, _ in pairs if k in seen or seen.add(k)))
        return obj


def _load_json(path: Path, text: str) -> list[tuple[GemmShape, str]]:
    try:
        data = json.loads(text, object_pairs_hook=_JsonObject.of_pairs)
    except json.JSONDecodeError as e:
        raise _json_error(path, e) from None
    if isinstance(data, dict) and isinstance(data.get("shapes"), list):
        entries = data["shapes"]
    elif isinstance(data, list):
        entries = data
    else:
        hint = None
        if isinstance(data, dict) and "hidden_size" in data:
            hint = "this looks like a Hugging Face config.json: pass it with --model (load_model)"
        raise ProblemError(
            "shapes.syntax",
            f"{path}: expected a JSON list of shapes or an object {{\"shapes\": [...]}}", hint)
    offsets = _json_array_offsets(text, data)
    shapes = []
    for i, entry in enumerate(entries):
        line = text.count("\n", 0, offsets[i]) + 1 if i < len(offsets) else 0
        where = f"{path}:{line} (shapes[{i}])" if line else f"{path}: shapes[{i}]"   # several entries may share a line
        if not isinstance(entry, dict):
            raise ProblemError(
                "shapes.syntax", f"{where}: a shape must be a JSON object with m, n, k, not {entry!r}")
        if getattr(entry, "repeated", ()):   # as a CSV header's column that appears twice
            raise ProblemError("shapes.field", f"{where}: field {entry.repeated[0]!r} appears twice in one shape")
        shapes.append((_shape_from_fields(entry, where, from_text=False), f"line {line}" if line else f"shapes[{i}]"))
    return shapes


def _load_csv(path: Path, text: str) -> list[tuple[GemmShape, str]]:
    reader = csv.reader(io.StringIO(text, newline=""))
    header: list[str] | None = None
    shapes = []
    for row in reader:
        line = reader.line_num
        if not any(cell.strip() for cell in row) or row[0].lstrip().startswith("#"):
            continue
        if header is None:
            header = [cell.strip().lower() for cell in row]
            unknown = [c for c in header if c not in FIELDS]
            if unknown:
                raise ProblemError(
                    "shapes.field",
                    f"{path}:{line}: unknown column {unknown[0]!r} in the header; the columns are "
                    f"{', '.join(FIELDS)} (m, n, k required)")
            missing = [c for c in _REQUIRED if c not in header]
            if missing:
                raise ProblemError(
                    "shapes.field",
                    f"{path}:{line}: the header has no column {missing[0]!r} (m, n, k are required)")
            if len(set(header)) != len(header):
                raise ProblemError("shapes.field", f"{path}:{line}: a column appears twice in the header")
            continue
        if len(row) != len(header):
            raise ProblemError(
                "shapes.syntax", f"{path}:{line}: {len(row)} cells, but the header has {len(header)} columns")
        shapes.append((_shape_from_fields(dict(zip(header, row)), f"{path}:{line}", from_text=True), f"line {line}"))
    if header is None:
        raise ProblemError("shapes.syntax", f"{path}: no header row (expected e.g. 'm,n,k,dtype,layout')")
    return shapes


class DuplicateShapesWarning(UserWarning):
    """A shape file lists the same GEMM (same M, N, K, dtypes and layout, whatever the spelling or the
    name) on several rows: it is kept (a tuner merges the rows and tunes it once), and the warning
    names the rows. ``rows`` maps each repeated :attr:`GemmShape.label` to its rows (``"line 4"``, or
    ``"shapes[3]"`` where a JSON line is unknown). The CLI prints it as
    ``argus-cutlass: warning: [shapes.duplicate] ...``."""

    rule = "shapes.duplicate"

    def __init__(self, message: str, rows: dict[str, list[str]]) -> None:
        super().__init__(message)
        self.rows = rows


#: the most repeated GEMMs one :class:`DuplicateShapesWarning` lists (the rest are counted)
_MAX_DUPLICATES_LISTED = 10


def _rows_text(rows: list[str]) -> str:
    """``["line 2", "line 4", "line 7"]`` -> ``"lines 2, 4 and 7"``."""
    if all(r.startswith("line ") for r in rows):
        nums = [r.removeprefix("line ") for r in rows]
        return "lines " + (", ".join(nums[:-1]) + " and " + nums[-1])
    return ", ".join(rows[:-1]) + " and " + rows[-1]


def duplicate_rows(path: str | Path, rows: Sequence[tuple[GemmShape, str]]) -> DuplicateShapesWarning | None:
    """The :class:`DuplicateShapesWarning` of a file's ``(shape, row)`` pairs, or None when every GEMM
    is listed once.

    >>> w = duplicate_rows("s.csv", [(GemmShape(8, 64, 64), "line 2"), (GemmShape(1, 64, 64), "line 3"),
    ...                              (GemmShape(8, 64, 64, "bfloat16", layout="TN"), "line 4")])
    >>> str(w)
    's.csv: lines 2 and 4 list the same GEMM 8x64x64_bf16_bf16_tn; it is tuned once'
    """
    seen: dict[tuple, list[str]] = {}
    labels: dict[tuple, str] = {}
    for shape, row in rows:
        seen.setdefault(shape.key, []).append(row)
        labels.setdefault(shape.key, shape.label)
    repeated = {labels[key]: r for key, r in seen.items() if len(r) > 1}
    if not repeated:
        return None
    parts = [f"{_rows_text(r)} list the same GEMM {label}" for label, r in repeated.items()]
    more = len(parts) - _MAX_DUPLICATES_LISTED
    text = "; ".join(parts[:_MAX_DUPLICATES_LISTED]) + (f"; and {more} more repeated GEMMs" if more > 0 else "")
    each = "it is" if len(parts) == 1 else "each is"
    return DuplicateShapesWarning(f"{path}: {text}; {each} tuned once", repeated)


def load_shapes(path: str | Path) -> list[GemmShape]:
    """The shapes of a JSON or CSV shape file (module docstring), in file order.

    The format follows the suffix (``.json``, ``.csv``), else the first character. Element types and
    layouts take the command line's spellings (``bfloat16``, ``half``, ``float32``, ``TN`` ...). Rows
    that list the same GEMM are all returned (a tuner tunes it once) and a
    :class:`DuplicateShapesWarning` names them.

    Raises:
        ProblemError: ``shapes.file``, ``shapes.syntax``, ``shapes.field`` naming ``file:line``
            and the field; a ``GemmProblem.validate`` rule naming ``file:line``.
    """
    import warnings

    path = Path(path)
    text = _read_text(path)
    fmt = _file_format(path, text)
    rows = _load_json(path, text) if fmt == "json" else _load_csv(path, text)
    if not rows:
        raise ProblemError("shapes.syntax", f"{path}: the file lists no shapes")
    dup = duplicate_rows(path, rows)
    if dup is not None:
        warnings.warn(dup, stacklevel=2)
    return [shape for shape, _ in rows]


def write_shapes(shapes: Sequence[GemmShape], path: str | Path) -> Path:
    """Write ``shapes`` as JSON (``{"shapes": [...]}``) or CSV (header :data:`FIELDS`), by the
    suffix of ``path``; :func:`load_shapes` reads it back to the same list.

    Raises:
        ProblemError: ``shapes.file`` for a suffix other than ``.json`` / ``.csv``.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".json":
        text = json.dumps({"shapes": [s.to_dict() for s in shapes]}, indent=1) + "\n"
    elif suffix == ".csv":
        buf = io.StringIO(newline="")
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(FIELDS)
        for s in shapes:
            writer.writerow([getattr(s, f) for f in FIELDS])
        text = buf.getvalue()
    else:
        raise ProblemError("shapes.file", f"{path}: write shapes to a .json or .csv file")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
