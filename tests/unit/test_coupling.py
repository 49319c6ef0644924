"""The coupling test: what runs is what was proved (issue 9, Deliver 2).

Generated from the IR's own field list. For a few base programs of each family (GEMM and
attention) and for **every node** of
each (tensors, TMA loads and stores, MMA reads, MMAs, pipelines, loops, roles, named barriers,
turn orders, epilogue nodes, schedule, launch, tag assertions, relations, and the program's
scalar params) and **every leaf field** (:func:`argus_cutlass.dsl.ir.node_fields`; tags and
source locations aside), a type-appropriate mutation (int: ``+1``, doubled and ``-1`` (above 1); bool: flipped;
str: every other valid value of that field; tuple: a permutation, a first-element change and every later
integer element +1) is
applied with :meth:`Program.replace_node`, and one of these must hold:

* the DSL refuses the edit (``DslError``): the mutation cannot be stated, so it is covered;
* rendering refuses the program (``ConfigError`` rule ``render.program``): unprintable;
* the emitted ``.cu`` differs from the base's, after the program fingerprint (which hashes
  every field, and so differs trivially) is masked out of both texts, **in its compiled content**
  (comments and static_assert message strings removed), except for the explicit specification
  and label fields of :data:`SPEC_NODES` / :data:`LABEL_FIELDS` (tag assertions and relations are
  proof obligations the verifier decides; a role's or a store's name labels code), whose edits
  may change only the printed text.

A field whose mutation leaves the text unchanged is a **defect** (a field the template drops:
what the verifier proves about it never reaches the kernel); so is a mutation that makes the
renderer raise anything but ``render.program``. There is no exception list.

The ``nvcc``-marked test then compiles a few mutated programs whose change is caught by a
``static_assert`` printed from the program (pipeline arrivals, relation nodes) and requires the
compile to stop on that assertion's message.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import pytest

from argus_cutlass.dsl.ir import Program, Tag, node_fields
from argus_cutlass.errors import ConfigError, DslError
from argus_cutlass.kernels.attention.config import AttentionConfig
from argus_cutlass.kernels.attention.program import build_program as build_attention
from argus_cutlass.kernels.gemm.config import GemmConfig
from argus_cutlass.kernels.gemm.program import build_program
from argus_cutlass.render.attention import render_attention
from argus_cutlass.render.gemm import render_gemm

#: the base programs (kernel modes): cooperative tn 128x256 with a 2x1 cluster (B multicast),
#: ping-pong 64x128 (turn order, two epilogue barriers), swap-AB 64x16 with fp32 D (st.shared,
#: column-major D), nt 128x128 with a 1x2 cluster (MN-major operands, A multicast)
BASES: dict[str, GemmConfig] = {
    "coop_tn_128x256_c2x1": GemmConfig(tile_m=128, tile_n=256, cluster_m=2, cluster_n=1),
    "pingpong_64x128": GemmConfig(tile_m=64, tile_n=128, schedule="pingpong", cluster_m=1, epi_m=64),
    "swapab_64x16_fp32": GemmConfig(swap_ab=True, tile_m=64, tile_n=16, schedule="pingpong", cluster_m=1,
                                    epi_m=64, epi_n=16, out_dtype="fp32", stages=8),
    "nt_128x128_c1x2": GemmConfig(layout="nt", tile_m=128, tile_n=128, cluster_m=1, cluster_n=2),
    # four accumulator sets (the k loop's acc_zeroed / acc_summed not at their one-set defaults)
    "swapab_64x16_as4": GemmConfig(swap_ab=True, tile_m=64, tile_n=16, schedule="pingpong", cluster_m=1, epi_m=64,
                                   epi_n=16, stages=12, acc_sets=4),
    # split-K 4 with the nondeterministic reduction (the schedule node's reduction not at its default)
    "swapab_128x16_splitk4_nd": GemmConfig(swap_ab=True, tile_m=128, tile_n=16, cluster_m=1, epi_m=128, epi_n=16,
                                           stages=8, scheduler="splitk", splits=4, reduction="nondeterministic"),
    # attention: d=128 causal (2 warpgroups taking turns), d=64 (3 warpgroups), d=256 fp16 varlen
    # non-causal without turns (no turn order), d=96 (SW64 atoms) with the quad16 epilogue
    "attn_d128_causal": AttentionConfig(head_dim=128, causal=True, tile_m=128, tile_n=128),
    "attn_d64_3wg": AttentionConfig(head_dim=64, tile_m=192, tile_n=128),
    "attn_d256_varlen_fp16_noturns": AttentionConfig(head_dim=256, dtype="fp16", varlen=True, tile_m=128, tile_n=80,
                                                     pingpong=False),
    "attn_d96_quad16": AttentionConfig(head_dim=96, causal=True, tile_m=128, tile_n=144, epilogue="quad16"),
    # the any-alignment path: tn with A, B (K-contiguous) staged in and D staged out; swap-AB nn with fp32 D,
    # A and D staged (the kernel's B is the caller's A)
    "staged_tn_abd": GemmConfig(layout="tn", tile_m=128, tile_n=128, cluster_m=1),
    "staged_swapab_nn_ad": GemmConfig(layout="nn", swap_ab=True, tile_m=64, tile_n=32, schedule="pingpong",
                                      cluster_m=1, epi_m=64, epi_n=32, out_dtype="fp32"),
}
#: bases built with StageCopy nodes: base -> the caller operands they stage
STAGED: dict[str, tuple[str, ...]] = {"staged_tn_abd": ("A", "B", "D"), "staged_swapab_nn_ad": ("A", "D")}


def render(program: Program) -> str:
    """The family's renderer (the program's own family picks it)."""
    return render_attention(program) if program.family == "attention" else render_gemm(program)

#: Program attribute holding nodes -> (replace_node kind, the attribute that keys a node)
GROUPS: dict[str, tuple[str, str | None]] = {
    "tensors": ("tensor", "name"), "loads": ("load", "name"), "reads": ("read", "name"),
    "assertions": ("assertion", "name"), "pipelines": ("pipeline", "name"), "loops": ("loop", "name"),
    "mmas": ("mma", "name"), "stores": ("store", "name"), "roles": ("role", "kind"),
    "barriers": ("barrier", "name"), "orders": ("order", "name"), "relations": ("relation", "name"),
    "epilogue": ("epilogue", None), "source": ("source", None), "staging": ("staging", None),
    "schedule": ("schedule", None), "launch": ("launch", None), "converts": ("convert", "name"),
    "reductions": ("reduction", "name"), "mask": ("mask", None), "softmax": ("softmax", None),
    "output": ("output", None), "stage_copies": ("stage_copy", "name"),
}

#: valid values of enumerated string fields, by leaf field name (the last dotted component)
DOMAINS: dict[str, tuple[str, ...]] = {
    "space": ("gmem", "smem", "rmem"),
    "dtype": ("bf16", "fp16", "fp32"),
    "acc_dtype": ("fp32", "fp16"),
    "binding": ("A", "B", "C", "D", "q", "k", "v", "o", "lse"),
    "block_mode": ("m", "n", "none"),
    "cache_hint": ("evict_normal", "evict_first", "evict_last"),
    "advance": ("k", "mn", "none"),
    "head": ("", "q", "kv"),
    "share_axis": ("m", "n", ""),
    "slice_axis": ("m", "n", ""),
    "mask_axis": ("m", "n", ""),
    "rank_order": ("col", "row"),
    "kind": ("load", "load_multicast", "store", "producer", "consumer"),
    "mode": ("SS", "RS"),
    "a_major": ("K", "MN"),
    "b_major": ("K", "MN"),
    "rounding": ("ceil", "floor"),
    "oob_fill": ("zero", "nan"),
    "d_major": ("N", "M"),
    "path": ("gmem", "none"),
    "op": ("stmatrix", "st.shared"),
    "raster": ("along_m", "along_n"),
    "decomposition": ("persistent", "streamk", "splitk"),
    "reduction": ("deterministic", "nondeterministic"),
    "relation": ("==", "!=", "<=", "<", ">=", ">", "divides", "disjoint"),
    "layout": ("tn", "nt", "nn", "tt"),
    "family": ("gemm", "attention"),
    "store_mode": ("direct", "quad16"),
    "direction": ("in", "out"),
    "fill": ("zero", "none"),
    "map_extent": ("staged", "true"),
    "src_pitch": ("caller", "staged"),
    "dst_pitch": ("caller", "staged"),
    "rows": ("M", "N", "K"),
    "cols": ("M", "N", "K"),
}
#: string fields whose domain depends on the node type: (node type, field) -> domain
OWNER_DOMAINS = {("StageCopy", "operand"): ("A", "B", "C", "D")}
#: ``major`` means different things on different nodes
MAJOR_DOMAINS = {"Tensor": ("K", "M", "N", "D", "Lq", ""), "TmaLoad": ("K", "MN"), "TmaStore": ("K", "MN"),
                 "GmmaSmemAtom": ("K", "MN")}
#: valid values of the string elements of tuple fields: (node type, field) -> domain
ELEMENT_DOMAINS = {("Tensor", "shape"): ("M", "N", "K", "Lq", "Lk", "D"), ("TagAssertion", "lhs"): ("A", "B", "slot", "acc"),
                   ("TagAssertion", "rhs"): ("A", "B", "slot", "acc"),
                   ("TurnOrder", "points"): ("mainloop", "epilogue", "gemm")}
#: the role a kind value must keep (Role.kind vs TmaCopy.kind)
KIND_DOMAINS = {"Role": ("producer", "consumer"), "TmaCopy": ("load", "load_multicast", "store")}


@dataclass(frozen=True)
class Mutation:
    """One edit: ``Program.replace_node(kind, key, **{field: new})`` (``kind`` ``params`` edits a
    program param, ``program`` a scalar field of the Program itself)."""

    base: str
    kind: str
    key: str | None
    field: str
    old: Any
    new: Any

    def label(self) -> str:
        where = f"{self.kind}[{self.key}]" if self.key is not None else self.kind
        return f"{self.base}: {where}.{self.field} {self.old!r} -> {self.new!r}"


@dataclass(frozen=True)
class Outcome:
    """``changed`` / ``dsl_error`` / ``unprintable`` (covered), or ``unprinted`` / ``crash``
    (defects), with the error text."""

    mutation: Mutation
    outcome: str
    detail: str = ""

    @property
    def covered(self) -> bool:
        return self.outcome in ("changed", "dsl_error", "unprintable")


# ------------------------------------------------------------------------------------ mutations


def _leaf(node: Any, path: str) -> tuple[Any, Any, str]:
    """(owning object, value, attribute name) of the dotted field ``path`` of ``node``."""
    owner = node
    parts = path.split(".")
    for part in parts[:-1]:
        owner = getattr(owner, part)
    return owner, getattr(owner, parts[-1]), parts[-1]


def _is_tag_field(owner: Any, attr: str, value: Any) -> bool:
    """Tags are skipped (they name values; the verifier reads them, the kernel has no tags)."""
    if isinstance(value, Tag):
        return True
    if value is None and dataclasses.is_dataclass(owner):
        ann = {f.name: str(f.type) for f in dataclasses.fields(owner)}
        return "Tag" in ann.get(attr, "")
    return False


def _str_alternatives(owner: Any, attr: str, value: str, program: Program) -> list[str]:
    """Every other valid value of a string field: its domain, or (for names and references)
    the other names of the program's nodes of that kind, or a fresh name."""
    owner_t = type(owner).__name__
    if (owner_t, attr) in OWNER_DOMAINS:
        domain: tuple[str, ...] = OWNER_DOMAINS[(owner_t, attr)]
    elif attr == "major":
        domain = MAJOR_DOMAINS.get(owner_t, ("K", "MN"))
    elif attr == "kind" and owner_t in KIND_DOMAINS:
        domain = KIND_DOMAINS[owner_t]
    elif attr in DOMAINS:
        domain = DOMAINS[attr]
    else:
        names = sorted({getattr(n, "name", "") for grp in GROUPS
                        for n in _nodes(program, grp) if type(n).__name__ == owner_t} - {"", value})
        if attr in ("src", "dst", "acc", "buffers"):
            names = sorted({t.name for t in program.tensors} - {value})
        elif attr == "loads":
            names = sorted({ld.name for ld in program.loads} - {value})
        elif attr == "pipeline":
            names = sorted({x.name for x in program.pipelines} - {value}) or []
        elif attr in ("a", "b"):
            names = sorted({r.name for r in program.reads} - {value})
        elif attr in ("max", "sum"):
            names = sorted({r.name for r in program.reductions} - {value})
        elif attr == "lse":
            names = sorted({t.name for t in program.tensors} - {value})
        elif attr == "mma":
            names = sorted({m.name for m in program.mmas} - {value})
        elif attr == "barrier":
            names = sorted({b.name for b in program.barriers} - {value})
        elif attr in ("invariant",):
            names = sorted({"G1", "G2", "G3", "G4", "G5", "G6", "G7", "G8", "R8"} - {value})
        elif attr == "rule":
            names = sorted({x.rule for x in (*program.relations, *program.assertions)} - {value})
        elif attr in ("lhs", "rhs") and owner_t == "Relation":
            names = sorted({x.lhs for x in program.relations} | {x.rhs for x in program.relations} - {value})
        return (names[:2] if names else []) + [value + "_x"]
    return [v for v in domain if v != value]


#: the valid values of enumerated int fields, by leaf name (tried besides +1 and doubled)
INT_DOMAINS: dict[str, tuple[int, ...]] = {"swizzle_bytes": (16, 32, 64, 128), "l2_promotion": (0, 64, 128, 256),
                                          "elem_bits": (16, 32)}


def _int_alternatives(attr: str, value: int) -> list[int]:
    return [value + 1, 2 * value if value != 0 else -1, *([value - 1] if value > 1 else []), *INT_DOMAINS.get(attr, ())]


def _element_change(x: Any, owner: Any, attr: str, program: Program) -> list[Any]:
    if isinstance(x, bool):
        return [not x]
    if isinstance(x, int):
        return [x + 1]
    if isinstance(x, str):
        domain = ELEMENT_DOMAINS.get((type(owner).__name__, attr))
        if domain is not None:
            return [v for v in domain if v != x][:1]
        return _str_alternatives(owner, attr, x, program)[:1] or [x + "_x"]
    if isinstance(x, tuple):
        return [tuple(reversed(x))] if len(x) > 1 and tuple(reversed(x)) != x else [x + x]
    raise TypeError(f"no mutation for a tuple element of type {type(x).__name__}")


def alternatives(owner: Any, attr: str, value: Any, program: Program) -> list[Any]:
    """The mutated values of one leaf field (type-appropriate; never the value itself).

    Raises:
        TypeError: a field type this test does not know how to mutate (extend it, never skip).
    """
    if isinstance(value, bool):
        out: list[Any] = [not value]
    elif isinstance(value, int):
        out = _int_alternatives(attr, value)
    elif isinstance(value, str):
        out = _str_alternatives(owner, attr, value, program)
    elif value is None and attr == "view":
        # an RS read has no smem view: give it one (another read's), which makes it an SS read
        out = [r.view for r in program.reads if r.view is not None][:1]
    elif value == () and attr == "pairing":
        # the identity conversion is stated as (); a full-length pairing with two registers swapped
        n = program.tensor(owner.dst).shape[1] // 4
        out = [(1, 0) + tuple(range(2, n)), tuple(range(n))]
    elif value == () and attr == "shuffle":
        # the direct store exchanges nothing: give it the quad16 transpose (the renderer refuses it)
        out = [(2, 1)]
    elif value == () and attr == "acc_summed":
        # one accumulator set sums nothing after the loop: a set index (the DSL refuses any with acc_sets 1)
        out = [(1,)]
    elif isinstance(value, tuple):
        if not value:
            raise TypeError(f"{type(owner).__name__}.{attr} is an empty tuple: nothing to permute")
        out = []
        if len(value) > 1:
            rev = tuple(reversed(value))
            out.append(rev if rev != value else value[1:] + value[:1])
        out += [(new,) + value[1:] for new in _element_change(value[0], owner, attr, program)[:1]]
        # every later integer element +1 too (review sweep, session 44: a staging view's third mode, its stage
        # count, was neither printed nor checked)
        out += [value[:i] + (x + 1,) + value[i + 1:] for i, x in enumerate(value)
                if i and isinstance(x, int) and not isinstance(x, bool)]
    else:
        raise TypeError(f"no mutation for {type(owner).__name__}.{attr} of type {type(value).__name__}")
    seen: list[Any] = []
    for v in out:
        if v != value and v not in seen:
            seen.append(v)
    return seen


def _nodes(program: Program, group: str) -> list[Any]:
    value = getattr(program, group)
    if value is None:
        return []
    return list(value) if isinstance(value, tuple) else [value]


def program_nodes(program: Program) -> list[tuple[str, str | None, Any]]:
    """Every node of ``program`` as ``(replace_node kind, key, node)``.

    Raises:
        AssertionError: the program holds nodes of a group this test cannot edit (a new node
            kind must get a ``replace_node`` kind here, not be skipped).
    """
    out: list[tuple[str, str | None, Any]] = []
    for f in dataclasses.fields(program):
        if f.name in ("family", "name", "params"):
            continue
        nodes = _nodes(program, f.name)
        if not nodes:
            continue
        assert f.name in GROUPS, f"program group {f.name!r} holds nodes the coupling test cannot edit"
        kind, keyattr = GROUPS[f.name]
        out += [(kind, getattr(n, keyattr) if keyattr else None, n) for n in nodes]
    return out


def mutations(base: str, program: Program) -> list[Mutation]:
    """Every mutation of every leaf field of every node of ``program`` (plus its params and its
    scalar ``family`` / ``name``)."""
    out: list[Mutation] = []
    for kind, key, node in program_nodes(program):
        for path in node_fields(node):
            owner, value, attr = _leaf(node, path)
            if _is_tag_field(owner, attr, value):
                continue
            out += [Mutation(base, kind, key, path, value, new) for new in alternatives(owner, attr, value, program)]
    for key, value in program.params:
        out += [Mutation(base, "params", None, key, value, new) for new in alternatives(program, key, value, program)]
    for attr in ("family", "name"):
        value = getattr(program, attr)
        out += [Mutation(base, "program", None, attr, value, new)
                for new in alternatives(program, attr, value, program)]
    return out


def apply(program: Program, m: Mutation) -> Program:
    """The program with mutation ``m`` (``DslError`` when the DSL refuses it)."""
    if m.kind == "program":
        return dataclasses.replace(program, **{m.field: m.new})
    if m.kind == "params":
        return program.replace_node("params", **{m.field: m.new})
    if m.field in ("kind", "key"):
        # replace_node(kind, key, **changes) cannot take a field named like its own parameters
        # (Role.kind): edit the node the same way by hand (dataclasses.replace re-runs its checks)
        group = next(g for g, (k, _) in GROUPS.items() if k == m.kind)
        keyattr = GROUPS[group][1]
        nodes = tuple(dataclasses.replace(n, **{m.field: m.new}) if getattr(n, keyattr) == m.key else n
                      for n in getattr(program, group))
        return dataclasses.replace(program, **{group: nodes})
    return program.replace_node(m.kind, m.key, **{m.field: m.new})


# ---------------------------------------------------------------------------------------- render


def normalized(program: Program, text: str) -> str:
    """``text`` with the program's fingerprint masked (the kernel name's hash suffix and the
    header's 16 hex digits): every field edit changes the fingerprint, so an unmasked
    comparison could never fail."""
    fp = program.fingerprint()
    return text.replace(fp[:16], "<FINGERPRINT>").replace(f"_{fp[:8]}", "_<HASH>")


@lru_cache(maxsize=None)
def base_program(base: str) -> Program:
    cfg = BASES[base]
    if base in STAGED:
        return build_program(cfg, staged=STAGED[base])
    return build_attention(cfg) if isinstance(cfg, AttentionConfig) else build_program(cfg)


@lru_cache(maxsize=None)
def base_text(base: str) -> str:
    p = base_program(base)
    return normalized(p, render(p))


def outcome(m: Mutation) -> Outcome:
    """Apply ``m`` to its base program, render, and classify (see the module docstring)."""
    base = base_program(m.base)
    try:
        mutated = apply(base, m)
    except DslError as exc:
        return Outcome(m, "dsl_error", str(exc))
    try:
        text = render(mutated)
    except ConfigError as exc:
        if exc.rule == "render.program":
            return Outcome(m, "unprintable", str(exc))
        return Outcome(m, "crash", f"ConfigError {exc.rule}: {exc}")
    except Exception as exc:  # noqa: BLE001 - any other exception is the renderer crashing: a defect
        return Outcome(m, "crash", f"{type(exc).__name__}: {exc}")
    if normalized(mutated, text) == base_text(m.base):
        return Outcome(m, "unprinted", "the emitted .cu is byte-identical (fingerprint masked)")
    if code_of(normalized(mutated, text)) == code_of(base_text(m.base)) and not is_spec_field(m):
        return Outcome(m, "comment_only", "only comments or static_assert messages change; the compiled code does not")
    return Outcome(m, "changed")


#: fields that are specifications or labels, not kernel quantities: an edit may change only the
#: comments and static_assert messages that print them. Tag assertions and relations are proof
#: obligations (the verifier decides them; the .cu lists them and asserts the relations' values);
#: a role's, a store's and a turn order's names only label code (references by name are followed by the renderer,
#: so a broken reference is refused, not hidden).
SPEC_NODES = ("assertion", "relation")
LABEL_FIELDS = {("role", "name"), ("store", "name"), ("order", "name"), ("mask", "name"), ("softmax", "name"),
                ("output", "name")}


def is_spec_field(m: Mutation) -> bool:
    return m.kind in SPEC_NODES or (m.kind, m.field) in LABEL_FIELDS


def code_of(text: str) -> str:
    """The compiled content of a .cu text: without comments, and with each static_assert's
    message string dropped (its condition stays)."""
    import re

    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'(static_assert\([^;]*),\s*"(?:[^"\\]|\\.)*"\s*\);', r"\1);", text)
    return "\n".join(line.rstrip() for line in text.splitlines() if line.strip())


def _cases() -> list[tuple[str, str, str | None]]:
    out = []
    for base in BASES:
        p = base_program(base)
        out += [(base, kind, key) for kind, key, _ in program_nodes(p)]
        out.append((base, "params", None))
        out.append((base, "program", None))
    return out


CASES = _cases()


def _case_id(case: tuple[str, str, str | None]) -> str:
    base, kind, key = case
    return f"{base}-{kind}" + (f"[{key}]" if key is not None else "")


# ----------------------------------------------------------------------------------------- tests


def test_bases_render_and_the_mask_is_specific():
    """The base programs render, and masking the fingerprint leaves a text that still names
    every constant (the mask removes only the hash, so two bases still differ)."""
    texts = {b: base_text(b) for b in BASES}
    assert len(set(texts.values())) == len(BASES)
    for b, t in texts.items():
        assert "<FINGERPRINT>" in t and "_<HASH>" in t, b
        assert base_program(b).fingerprint()[:8] not in t, b


def test_every_leaf_field_has_a_mutation():
    """Each non-tag leaf of each node gets at least one mutation (a new field type fails
    ``alternatives`` with TypeError instead of being skipped)."""
    for base in BASES:
        p = base_program(base)
        muts = mutations(base, p)
        covered = {(m.kind, m.key, m.field) for m in muts}
        for kind, key, node in program_nodes(p):
            for path in node_fields(node):
                owner, value, attr = _leaf(node, path)
                if not _is_tag_field(owner, attr, value):
                    assert (kind, key, path) in covered, f"{base}: {kind}[{key}].{path} has no mutation"


def test_alternatives_are_type_appropriate():
    p = base_program("coop_tn_128x256_c2x1")
    pipe = p.pipeline
    assert alternatives(pipe, "stages", 4, p) == [5, 8, 3]   # value - 1 too (review, session 44: a store's subtile -1)
    assert alternatives(pipe.consumer, "carry_across_tiles", True, p) == [False]
    assert alternatives(p.epilogue, "row_offset", 0, p) == [1, -1]
    assert alternatives(p.kloop, "oob_fill", "zero", p) == ["nan"]
    assert alternatives(p.staging, "matrix_order", (0, 1, 2, 3), p) == [(3, 2, 1, 0), (1, 1, 2, 3), (0, 2, 2, 3),
                                                                         (0, 1, 3, 3), (0, 1, 2, 4)]
    with pytest.raises(TypeError, match="no mutation"):
        alternatives(pipe, "stages", 1.5, p)


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_every_field_mutation_changes_the_kernel_or_is_refused(case):
    """Every mutation of every field of this node changes the emitted .cu (fingerprint masked),
    or is refused by the DSL or by the renderer (``render.program``)."""
    base, kind, key = case
    muts = [m for m in mutations(base, base_program(base)) if m.kind == kind and m.key == key]
    assert muts, f"{_case_id(case)}: no mutation generated"
    bad = [o for o in map(outcome, muts) if not o.covered]
    if bad:
        pytest.fail("fields the emitted .cu does not carry (defects):\n" + "\n".join(
            f"  {o.outcome}: {o.mutation.label()}" + (f" ({o.detail[:200]})" if o.outcome == "crash" else "")
            for o in bad), pytrace=False)


# --------------------------------------------------------------------------------- static_asserts

#: mutations a printed static_assert must stop at compile time: (base, kind, key, field, new value
#: as a function of the base program, the static_assert message the compile must fail on)
STATIC_ASSERT_CASES = [
    ("coop_tn_128x256_c2x1", "pipeline", "mainloop", "consumer_arrivers",
     lambda p: p.pipeline.consumer_arrivers + 1, "G6 pipeline.arrivals"),
    ("coop_tn_128x256_c2x1", "pipeline", "mainloop", "stages",
     lambda p: p.pipeline.stages + 1, "G6 pipeline.buffers: pipeline[mainloop].stages == tensor[sA].shape[2]"),
    ("pingpong_64x128", "loop", "k", "block_k",
     lambda p: 2 * p.kloop.block_k, "G3 loop.step: loop[k].block_k == mma[mainloop].op.k"),
    ("nt_128x128_c1x2", "schedule", None, "cluster_n",
     lambda p: p.schedule.cluster_n + 1, "G5 cluster.consistency"),
    ("pingpong_64x128", "tensor", "sB", "base_bytes",
     lambda p: p.tensor("sA").base_bytes, "R8 smem.disjoint: tensor[sA] disjoint tensor[sB]"),
    ("attn_d128_causal", "pipeline", "k", "consumer_arrivers",
     lambda p: p.resolve("pipeline[k].consumer_arrivers") + 1, "G6 pipeline.arrivals"),
    ("attn_d128_causal", "mask", None, "causal", lambda p: False, "FA5 mask.exact"),
    ("attn_d64_3wg", "loop", "kv", "block_k",
     lambda p: 2 * p.resolve("loop[kv].block_k"), "G3 loop.step: loop[kv].block_k == mma[pv].op.k"),
    ("staged_tn_abd", "stage_copy", "stage_A", "align", lambda p: 4,
     "G9 stage.align: the staged leading dimension is a multiple of 16 bytes"),
    # session 44 (review): a subtile stated one row smaller printed the same box count
    ("pingpong_64x128", "store", "tma_store_sD", "tile_mn", lambda p: p.stores[0].tile_mn - 1,
     "G2 epilogue.tma_store: the store's subtile (tile_mn x tile_k) is one staging stage"),
    # session 44 (review sweep): view stage counts neither printed nor checked
    ("coop_tn_128x256_c2x1", "staging", None, "view.shape", lambda p: p.staging.view.shape[:2] + (3,),
     "G2 epilogue.tma_store: the staging view is the staging buffer's (subtile and stages)"),
    ("pingpong_64x128", "read", "gmma_A", "view.shape", lambda p: p.read("A").view.shape[:2] + (5,),
     "G1 gmma.descriptor: read gmma_A's smem view covers the pipeline's stages"),
]


def _static_assert_program(case) -> tuple[Program, str]:
    base, kind, key, field, value, message = case
    p = base_program(base)
    return p.replace_node(kind, key, **{field: value(p)}), message


@pytest.mark.parametrize("case", STATIC_ASSERT_CASES, ids=[f"{c[0]}-{c[1]}.{c[3]}" for c in STATIC_ASSERT_CASES])
def test_static_assert_is_printed(case):
    """CPU half of the compile test: the mutated program prints the static_assert whose
    message the compile must stop on, and the base prints it too (with values that hold)."""
    mutated, message = _static_assert_program(case)
    assert message in render(mutated)
    assert message in render(base_program(case[0]))


@pytest.mark.nvcc
def test_static_asserts_stop_the_compile():
    """nvcc stops each mutated program at the static_assert printed for the mutated field
    (``static assertion failed with "<message>"``), not at some other error."""
    from argus_cutlass.build.nvcc import CompileJob, compile_many
    from argus_cutlass.errors import CompileError

    progs = [_static_assert_program(c) for c in STATIC_ASSERT_CASES]
    jobs = [CompileJob(render(p), p.kernel_name(), "shared") for p, _ in progs]
    results = compile_many(jobs, return_exceptions=True)
    for (p, message), res in zip(progs, results, strict=True):
        assert isinstance(res, CompileError), f"{p.kernel_name()} compiled although {message!r} should fail"
        failed = [line for line in res.log.splitlines() if "static assertion failed" in line]
        assert any(message in line for line in failed), (message, failed[:4], res.message[:2000])
