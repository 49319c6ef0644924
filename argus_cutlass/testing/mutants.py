"""The planted-mistake suites: mutants of each family's program, read from data catalogues
(``mutants.toml`` for GEMM, ``mutants_attention.toml`` for attention: :data:`FAMILIES`).

A mutant is one realistic kernel mistake written as edits of the program that the family's
``build_program`` (e.g. :func:`argus_cutlass.kernels.gemm.program.build_program`) states for a base
configuration::

    program = build_program(GemmConfig(**base))    # AttentionConfig(**base) for attention
    for edit in mutant.edits:
        program = program.replace_node(edit.node, edit.key, **edit.changes)

The templates print the program, so the edit *is* the mistake in the emitted ``.cu``: the
silicon runner (:mod:`argus_cutlass.testing.gpu`) builds the production template from the
mutated program without the verifier, and the verifier (:func:`verify_mutant`) must reject
it with the mutant's owning ``rule``.

Catalogue format (``argus_cutlass/testing/mutants.toml``)::

    [base.coop]                      # named base configurations: the family's config fields
    tile_m = 128
    ...
    staged = ["A", "B"]              # GEMM only, optional: the caller operands the program stages
                                     # (the any-alignment path's StageCopy nodes)
    [[mutant]]
    id = "a_block_mode_n"            # unique, [a-z0-9_]
    class = "operand_identity"       # one of CLASSES
    base = "coop"                    # a [base.*] name, or an inline table of GemmConfig fields
    rule = "mma.operand_identity"    # the verifier rule that must reject it (one of RULES)
    story = "..."                    # one line: what goes wrong on silicon
    edit = [{ node = "load", key = "tma_sA", set = { block_mode = "n" } }]
    benign_reason = "..."            # only where silicon may not show it: the race / UB

An edit value is a literal (TOML arrays become tuples), or a table ``{ add = n }`` (the base
program's value of that field plus ``n``) or ``{ from = "path", add = n }`` (the value at
:meth:`Program.resolve` path ``path`` of the base program, plus ``n``).

>>> cat = load_catalogue()
>>> len(cat) >= 40 and len({m.cls for m in cat.values()}) >= 15
True
>>> m = cat["a_block_mode_n"]
>>> (m.rule, mutant_program(m).load_into("sA").block_mode, baseline_program(m).load_into("sA").block_mode)
('mma.operand_identity', 'n', 'm')
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from argus_cutlass.dsl.ir import SINGLE_NODES, Program
from argus_cutlass.errors import ConfigError, DslError

__all__ = [
    "CATALOGUE_PATH",
    "FAMILIES",
    "CLASSES",
    "DATA_FLOW_RULES",
    "RESOURCE_RULES",
    "RULES",
    "Edit",
    "Mutant",
    "baseline_program",
    "load_catalogue",
    "mutant_program",
    "verify_mutant",
]

#: the catalogue shipped with the package (GEMM)
CATALOGUE_PATH = Path(__file__).with_name("mutants.toml")


@dataclass(frozen=True)
class Family:
    """How to build and verify one family's programs: its config class, ``build_program`` and
    ``verify_<family>`` (module paths, imported on use) and its shipped catalogue."""

    name: str
    config: str
    build: str
    verify: str
    catalogue: Path

    def _load(self, path: str) -> Any:
        import importlib

        module, _, attr = path.rpartition(".")
        return getattr(importlib.import_module(module), attr)

    def config_class(self) -> Any:
        return self._load(self.config)

    def build_program(self, cfg: Any, staged: tuple[str, ...] = ()) -> Program:
        if staged:
            return self._load(self.build)(cfg, staged=staged)
        return self._load(self.build)(cfg)

    def verify_program(self, program: Program, **kwargs: Any) -> Any:
        return self._load(self.verify)(program, **kwargs)


#: the families with a mutant catalogue
FAMILIES: dict[str, Family] = {
    "gemm": Family("gemm", "argus_cutlass.kernels.gemm.config.GemmConfig",
                   "argus_cutlass.kernels.gemm.program.build_program", "argus_cutlass.verify.verify_gemm",
                   CATALOGUE_PATH),
    "attention": Family("attention", "argus_cutlass.kernels.attention.config.AttentionConfig",
                        "argus_cutlass.kernels.attention.program.build_program",
                        "argus_cutlass.verify.attention.verify_attention",
                        Path(__file__).with_name("mutants_attention.toml")),
}

#: verifier rules whose violations carry a counterexample record (a concrete failing point)
DATA_FLOW_RULES = (
    "mma.operand_identity", "mma.k_agreement", "gmma.descriptor", "k.coverage", "k.acc_sets", "residue.load", "residue.store",
    "pipeline.tx_bytes", "pipeline.arrivals", "pipeline.release", "pipeline.protocol", "pipeline.state",
    "pipeline.stage", "pipeline.parity", "pipeline.carry", "tma.image", "tma.multicast", "epilogue.coordinate",
    "epilogue.stmatrix", "epilogue.tma_store", "epilogue.source", "epilogue.stage_reuse", "output.bijection",
    "scheduler.bijection", "scheduler.cluster_reduce", "scheduler.slot_release", "warpgroup.uniform", "barrier.named", "turn.order",
    # the any-alignment path's staging copies (G9)
    "stage.cover", "stage.zero", "stage.writeback",
    # attention (invariants/attention.toml)
    "mask.exact", "kv.coverage", "softmax.online", "output.row", "head.map", "reduction.rows", "fragment.convert",
    "mma.rs_operand",
)
#: verifier rules over numbers (resources and consistency relations): their violations carry the numbers
RESOURCE_RULES = (
    "mma.dtype", "mma.major", "mma.tile", "loop.step", "pipeline.buffers", "pipeline.wrap", "cluster.consistency",
    "epilogue.partition", "smem.capacity", "smem.alignment", "smem.disjoint", "registers", "roles.registers",
    "stage.align",
)
#: every rule a mutant may name as its owner
RULES = DATA_FLOW_RULES + RESOURCE_RULES

#: mistake classes (issue 9, Deliver 5)
CLASSES = (
    "operand_identity", "consistency", "descriptor_advance", "k_tiles", "residue_fill", "arrival_count",
    "tx_bytes", "multicast", "tma_kind", "c_source", "tma_store", "gmma_flags", "descriptor_layout",
    "phase_wrap", "phase_start", "pipeline_carry", "release_order", "epilogue_map", "residue_mask",
    "epilogue_r2s", "store_pipeline", "warpgroup_uniformity", "scheduler", "named_barrier", "turn_order",
    "registers", "staging",
    # attention (issue 10): the FlashAttention catalogue's classes
    "row_reduction", "rescale", "p_to_pv", "kv_pairing", "output_row", "gqa_head", "causal_mask", "length_mask",
    "kv_pipeline",
)

#: Program.replace_node kinds an edit may name
NODE_KINDS = ("tensor", "load", "store", "read", "mma", "pipeline", "loop", "role", "barrier", "order",
              "assertion", "relation", "convert", "reduction", "stage_copy", "params") + SINGLE_NODES
_SINGLE = SINGLE_NODES + ("params",)
_MUTANT_KEYS = {"id", "class", "base", "rule", "story", "edit", "benign_reason"}
_REQUIRED = ("id", "class", "base", "rule", "story", "edit")
_EDIT_KEYS = {"node", "key", "set"}


def _frozen(value: Any) -> Any:
    """TOML arrays -> tuples (node fields are tuples), recursively."""
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return {k: _frozen(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class Edit:
    """``Program.replace_node(node, key, **changes)``; a change value may be relative
    (``{"add": n}``, ``{"from": path, "add": n}``), resolved on the base program."""

    node: str
    key: str | None
    changes: tuple[tuple[str, Any], ...]

    def resolved(self, base: Program) -> dict[str, Any]:
        """The literal field values of this edit on ``base``.

        Raises:
            KeyError: a field or path that the base program does not have.
        """
        out: dict[str, Any] = {}
        for field, value in self.changes:
            if isinstance(value, dict):
                if "from" in value:
                    start = base.resolve(value["from"])
                else:
                    start = _field_value(base, self.node, self.key, field)
                value = start + value.get("add", 0)
            out[field] = value
        return out


@dataclass(frozen=True)
class Mutant:
    """One planted mistake (see the module docstring for the fields' meaning).

    Attributes:
        base_name: the ``[base.*]`` name, or ``"inline"``.
        config: the base configuration the edits apply to.
    """

    id: str
    cls: str
    base_name: str
    config: Any
    edits: tuple[Edit, ...]
    rule: str
    story: str
    benign_reason: str = ""
    family: str = "gemm"
    #: the caller operands the base program stages (GEMM's any-alignment path; ``()``: direct)
    staged: tuple[str, ...] = ()

    @property
    def data_flow(self) -> bool:
        """The owning rule is a data-flow rule (its violation carries a counterexample)."""
        return self.rule in DATA_FLOW_RULES


def _field_value(program: Program, node: str, key: str | None, field: str) -> Any:
    """The current value of ``field`` (dotted) of node ``node[key]``."""
    if node == "params":
        return program.param(field)
    if node in _SINGLE:
        value: Any = getattr(program, node)
    else:
        value = program.resolve(f"{node}[{key}]")
    for part in field.split("."):
        value = getattr(value, part)
    return value


def _fail(where: str, message: str) -> None:
    raise ConfigError("mutants.catalogue", f"{where}: {message}")


def _staged(where: str, fields: Any, family: str) -> tuple[str, ...]:
    """A base table's ``staged`` operands (GEMM only)."""
    staged = fields.get("staged", []) if isinstance(fields, dict) else []
    if staged and (family != "gemm" or not isinstance(staged, list) or set(staged) - {"A", "B", "D"}):
        _fail(where, f"staged = {staged!r}: a GEMM base stages a list of operands from A, B, D")
    return tuple(staged)


def _config(where: str, fields: Any, family: str = "gemm") -> Any:
    cls = FAMILIES[family].config_class()
    what = cls.__name__
    if not isinstance(fields, dict):
        _fail(where, f"a base configuration must be a table of {what} fields, got {fields!r}")
    fields = {k: v for k, v in fields.items() if k != "staged"}
    unknown = sorted(set(fields) - set(cls.model_fields))
    if unknown:
        _fail(where, f"unknown {what} field(s) {unknown}; known: {sorted(cls.model_fields)}")
    try:
        return cls(**fields)
    except ValueError as exc:  # pydantic's ValidationError
        _fail(where, f"invalid {what}: {exc}")
    raise AssertionError("unreachable")


def _parse_edit(where: str, raw: Any) -> Edit:
    if not isinstance(raw, dict):
        _fail(where, f"an edit must be a table {{node, key, set}}, got {raw!r}")
    unknown = sorted(set(raw) - _EDIT_KEYS)
    if unknown:
        _fail(where, f"unknown edit field(s) {unknown}; an edit has {sorted(_EDIT_KEYS)}")
    node = raw.get("node")
    if node not in NODE_KINDS:
        _fail(where, f"edit node {node!r} is not one of {list(NODE_KINDS)}")
    key = raw.get("key")
    if node in _SINGLE and key is not None:
        _fail(where, f"edit of the single node {node!r} takes no key (got {key!r})")
    if node not in _SINGLE and not isinstance(key, str):
        _fail(where, f"edit of a {node!r} node needs key = the node's name")
    changes = raw.get("set")
    if not isinstance(changes, dict) or not changes:
        _fail(where, "edit needs a non-empty table set = { field = value, ... }")
    for field, value in changes.items():
        if isinstance(value, dict) and (not value or set(value) - {"add", "from"}):
            _fail(where, f"edit value of {field!r}: a table value is {{add = n}} or {{from = path, add = n}}")
    return Edit(node, key, tuple(sorted(_frozen(changes).items())))


def parse_catalogue(text: str, *, check_edits: bool = True, family: str = "gemm") -> dict[str, Mutant]:
    """The mutants of a catalogue text, in file order.

    Args:
        family: the family whose configurations and programs the catalogue edits (:data:`FAMILIES`).
        check_edits: also apply every edit to its base program and require that it changes a
            field (a catalogue entry whose edit is a no-op or that the DSL refuses is not a mutant).

    Raises:
        ConfigError: ``mutants.catalogue`` naming the entry and the problem (unknown field,
            class or rule, duplicate id, an edit the base program cannot take...).
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        _fail("mutants.toml", f"not valid TOML: {exc}")
    unknown = sorted(set(data) - {"base", "mutant"})
    if unknown:
        _fail("mutants.toml", f"unknown top-level key(s) {unknown}; expected [base.*] and [[mutant]]")
    if family not in FAMILIES:
        _fail("mutants catalogue", f"family {family!r} is not one of {sorted(FAMILIES)}")
    bases = {name: _config(f"[base.{name}]", fields, family) for name, fields in data.get("base", {}).items()}
    staged_of = {name: _staged(f"[base.{name}]", fields, family) for name, fields in data.get("base", {}).items()}
    out: dict[str, Mutant] = {}
    for i, raw in enumerate(data.get("mutant", [])):
        where = f"mutant #{i + 1} ({raw.get('id', '?')})"
        extra = sorted(set(raw) - _MUTANT_KEYS)
        if extra:
            _fail(where, f"unknown field(s) {extra}; a mutant has {sorted(_MUTANT_KEYS)}")
        missing = [k for k in _REQUIRED if k not in raw]
        if missing:
            _fail(where, f"missing field(s) {missing}")
        mid = raw["id"]
        if not isinstance(mid, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", mid):
            _fail(where, f"id {mid!r} must match [a-z][a-z0-9_]*")
        if mid in out:
            _fail(where, f"duplicate id {mid!r}")
        if raw["class"] not in CLASSES:
            _fail(where, f"class {raw['class']!r} is not one of {list(CLASSES)}")
        if raw["rule"] not in RULES:
            _fail(where, f"rule {raw['rule']!r} is not a verifier rule; known: {list(RULES)}")
        base = raw["base"]
        if isinstance(base, str):
            if base not in bases:
                _fail(where, f"base {base!r} is not a [base.*] table; have {sorted(bases)}")
            name, cfg, staged = base, bases[base], staged_of[base]
        else:
            name, cfg, staged = "inline", _config(where, base, family), _staged(where, base, family)
        edits = raw["edit"]
        if not isinstance(edits, list) or not edits:
            _fail(where, "edit must be a non-empty array of {node, key, set} tables")
        for field in ("story", "benign_reason"):
            if not isinstance(raw.get(field, ""), str) or (field == "story" and not raw[field].strip()):
                _fail(where, f"{field} must be a non-empty string")
        m = Mutant(mid, raw["class"], name, cfg, tuple(_parse_edit(where, e) for e in edits), raw["rule"],
                   " ".join(raw["story"].split()), " ".join(raw.get("benign_reason", "").split()), family, staged)
        if check_edits:
            _check(m, where)
        out[mid] = m
    return out


def _check(m: Mutant, where: str) -> None:
    base = baseline_program(m)
    try:
        mutated = mutant_program(m)
    except DslError as exc:
        _fail(where, f"the DSL refuses the edit, so it is not a mutant: {exc}")
    if mutated.fingerprint() == base.fingerprint():
        _fail(where, "the edits change no field of the program")


@lru_cache(maxsize=8)
def load_catalogue(path: str | Path | None = None, family: str = "gemm") -> dict[str, Mutant]:
    """A family's catalogue (default: the shipped one, :data:`FAMILIES`), validated (see
    :func:`parse_catalogue`)."""
    if family not in FAMILIES:
        _fail("mutants catalogue", f"family {family!r} is not one of {sorted(FAMILIES)}")
    p = Path(path) if path is not None else FAMILIES[family].catalogue
    return parse_catalogue(p.read_text("utf-8"), family=family)


@lru_cache(maxsize=64)
def _base(family: str, cfg: Any, staged: tuple[str, ...] = ()) -> Program:
    return FAMILIES[family].build_program(cfg, staged)


def baseline_program(m: Mutant) -> Program:
    """The unmutated program of the mutant's base configuration (and staged operands)."""
    return _base(m.family, m.config, m.staged)


def mutant_program(m: Mutant) -> Program:
    """The base program with the mutant's edits applied (relative values resolved on the base).

    Raises:
        ConfigError: ``mutants.catalogue`` when an edit names a node or field the program lacks.
        argus_cutlass.errors.DslError: the DSL refuses an edit.
    """
    base = baseline_program(m)
    program = base
    for e in m.edits:
        try:
            changes = e.resolved(base)
            if "kind" in changes or "key" in changes:
                _fail(f"mutant {m.id}", "an edit cannot set a field named 'kind' or 'key' through "
                      "Program.replace_node(kind, key, **changes)")
            program = (program.replace_node("params", **changes) if e.node == "params"
                       else program.replace_node(e.node, e.key, **changes))
        except KeyError as exc:
            _fail(f"mutant {m.id}", f"edit {e.node}[{e.key}]: {exc.args[0] if exc.args else exc}")
    return program


def verify_mutant(m: Mutant | str, **kwargs: Any) -> Any:
    """The family's verifier (``verify_gemm``, ``verify_attention``) on the mutated program (the
    report; never raises for a rejected program). A string names a GEMM mutant. ``kwargs`` go to
    the verifier (e.g. ``smt=False``)."""
    mutant = load_catalogue()[m] if isinstance(m, str) else m
    return FAMILIES[mutant.family].verify_program(mutant_program(mutant), **kwargs)
