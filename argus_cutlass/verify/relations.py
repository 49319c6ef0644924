"""The relation engine: every :class:`~argus_cutlass.dsl.ir.Relation` node of a program, evaluated.

A relation states consistency between nodes as data (``pipeline[mainloop].stages ==
tensor[sA].shape[2]``, ``loop[k].block_k == mma[mainloop].op.k``, ``tensor[sA] disjoint
tensor[sB]``...). The engine resolves both field paths with :meth:`Program.resolve` and
evaluates the relation; the rule and invariant come from the node, so a new consistency rule
needs no verifier code. Relations: ``==``, ``!=``, ``<=``, ``<``, ``>=``, ``>`` (ints; ``==`` and
``!=`` on any values), ``divides`` (lhs divides rhs), ``disjoint`` (two smem tensors' byte
ranges ``[base_bytes, base_bytes + size_bytes)`` do not overlap).

Outcomes: a relation that holds is one :class:`Proof` carrying both values; one that fails is a
:class:`Violation` of the node's rule with both values and the source line; a path that does not
resolve is a ``dsl.unknown_ref`` violation, a relation over values it cannot compare (a string
ordered, a non-tensor "disjoint") a ``dsl.relation`` violation.
"""

from __future__ import annotations

import operator
import re
from typing import Any

from argus_cutlass.dsl.ir import FAMILY_TAG_ASSERTIONS, Program, Relation, Tensor
from argus_cutlass.verify.catalogue import invariant_of
from argus_cutlass.verify.report import Counterexample, Proof, Violation

__all__ = ["check_references", "check_relations", "evaluate_relation"]

#: the grammar of a field path (``Program.resolve``): an int, or ``kind[key]`` / ``kind`` then fields
_PATH = re.compile(r"-?\d+|\w+(\[[^\]]+\])?(\.\w+|\[\d+\])*")

_ORDERED = {"<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt}


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _show(x: Any) -> str:
    if isinstance(x, Tensor):
        return f"{x.name} [{x.base_bytes}, {x.base_bytes + x.size_bytes})" if x.space == "smem" else x.name
    return repr(x) if isinstance(x, str) else str(x)


def evaluate_relation(program: Program, rel: Relation) -> tuple[bool | None, str, Any, Any]:
    """``(holds, text, lhs value, rhs value)``; ``holds`` is None when the relation cannot be
    evaluated, with ``text`` naming why (an unknown path starts with ``unknown_ref:``)."""
    values = []
    for path in (rel.lhs, rel.rhs):
        if not isinstance(path, str) or not _PATH.fullmatch(path.strip()):
            return None, f"unknown_ref:malformed field path {path!r}", None, None
        try:
            values.append(program.resolve(path))
        except KeyError as exc:
            return None, f"unknown_ref:{exc.args[0] if exc.args else path}", None, None
    lhs, rhs = values
    r = rel.relation
    if r in ("==", "!="):
        same = lhs == rhs
        holds = same if r == "==" else not same
        return holds, f"{_show(lhs)} {r} {_show(rhs)}", lhs, rhs
    if r in _ORDERED:
        if not (_is_int(lhs) and _is_int(rhs)):
            return None, f"relation {r} needs two ints, got {_show(lhs)} and {_show(rhs)}", lhs, rhs
        return _ORDERED[r](lhs, rhs), f"{lhs} {r} {rhs}", lhs, rhs
    if r == "divides":
        if not (_is_int(lhs) and _is_int(rhs)) or lhs == 0:
            return None, f"divides needs a non-zero int and an int, got {_show(lhs)} and {_show(rhs)}", lhs, rhs
        return rhs % lhs == 0, f"{lhs} divides {rhs} ({rhs} % {lhs} = {rhs % lhs})", lhs, rhs
    if r == "disjoint":
        if not (isinstance(lhs, Tensor) and isinstance(rhs, Tensor) and lhs.space == rhs.space == "smem"):
            return None, f"disjoint needs two smem tensors, got {_show(lhs)} and {_show(rhs)}", lhs, rhs
        a0, a1 = lhs.base_bytes, lhs.base_bytes + lhs.size_bytes
        b0, b1 = rhs.base_bytes, rhs.base_bytes + rhs.size_bytes
        overlap = min(a1, b1) - max(a0, b0)
        text = f"{_show(lhs)} and {_show(rhs)}" + (f" overlap by {overlap} bytes" if overlap > 0 else " are disjoint")
        return overlap <= 0, text, lhs, rhs
    return None, f"relation {r!r} is not one of ==, !=, <=, <, >=, >, divides, disjoint", lhs, rhs


def check_relations(program: Program) -> tuple[list[Proof], list[Violation]]:
    """Evaluate every relation node of ``program`` (see the module docstring)."""
    proofs: list[Proof] = []
    violations: list[Violation] = []
    for rel in program.relations:
        try:
            holds, text, _lhs, _rhs = evaluate_relation(program, rel)
        except Exception as exc:  # noqa: BLE001 - a malformed node is a violation, never a crash
            holds, text = None, f"cannot evaluate: {type(exc).__name__}: {exc}"
        where = str(rel.loc)
        if holds is None:
            if text.startswith("unknown_ref:"):
                violations.append(Violation("dsl.unknown_ref", "DSL", f"relation {rel} ({rel.rule}): "
                                            f"{text.removeprefix('unknown_ref:')}",
                                            "name an existing node and field (Program.resolve paths)", where))
            else:
                violations.append(Violation("dsl.relation", "DSL", f"relation {rel} ({rel.rule}): {text}",
                                            "relate values of comparable kinds", where))
        elif holds:
            proofs.append(Proof(rel.rule, rel.invariant, "arith", f"{rel}: {text}", 1))
        else:
            violations.append(Violation(rel.rule, rel.invariant, f"{rel} fails: {text}",
                                        "the two nodes must agree (the relation is the program's own "
                                        "consistency statement)", where))
    return proofs, violations


def check_required_assertions(program: Program) -> tuple[list[Proof], list[Violation]]:
    """``mma.operand_identity``: the program states every tag assertion of its family's
    :data:`~argus_cutlass.dsl.ir.FAMILY_TAG_ASSERTIONS` (each then checked slot by slot by its rule;
    red team, session 18: ``A.m == slot.m`` restated as ``A.m == A.m`` let a wrong A block verify)."""
    need = [(lhs, rel, rhs, at) for at, lhs, rel, rhs, _inv, _rule in FAMILY_TAG_ASSERTIONS.get(program.family, ())]
    if not need:
        return [], []
    have = {(tuple(a.lhs), a.relation, tuple(a.rhs), a.at) for a in program.assertions}
    missing = [n for n in need if n not in have]
    if not missing:
        return [Proof("mma.operand_identity", "G1", "arith", f"the program states the {len(need)} tag assertions "
                      f"of family {program.family!r}", len(need))], []
    out = []
    for (l, rel, r, at) in missing:
        text = f"{l[0]}.{l[1]} {rel} {r[0]}.{r[1]} at {at}"
        out.append(Violation("mma.operand_identity", "G1", f"the program does not state the tag assertion {text} "
                             f"of family {program.family!r} (dropped or restated): the operand identity it carries "
                             "goes unchecked", "keep the family's tag assertions (dsl.ir.FAMILY_TAG_ASSERTIONS)", "",
                             Counterexample("G1", "mma.operand_identity", "arith", at, "", -1, -1, -1, {}, {}, "",
                                            {}, text, "no such assertion",
                                            f"{len(program.assertions)} assertions: "
                                            + "; ".join(str(a) for a in program.assertions)[:400])))
    return [], out


def check_required_relations(program: Program) -> tuple[list[Proof], list[Violation]]:
    """Every consistency relation of the program's family (:data:`~argus_cutlass.dsl.ir.FAMILY_RELATIONS`) is
    stated, with its rule and invariant (each then checked by :func:`check_relations`): a program that drops
    or restates one verifies nothing there (session 20: a GEMM program built without its relations verified
    clean). Each missing relation is a violation of its own rule."""
    from argus_cutlass.dsl.ir import FAMILY_RELATIONS

    need = FAMILY_RELATIONS.get(program.family, ())
    if not need:
        return [], []
    have = {(r.lhs, r.relation, r.rhs, r.invariant, r.rule) for r in program.relations}
    missing = [n for n in need if n not in have]
    if not missing:
        return [Proof("dsl.relation", "DSL", "arith", f"the program states the {len(need)} relations of family "
                      f"{program.family!r}", len(need))], []
    return [], [Violation(rule, inv, f"the program does not state the relation {lhs} {rel} {rhs} of family "
                          f"{program.family!r} (dropped or restated): the consistency it carries goes unchecked "
                          "and unprinted", "keep the family's relations (dsl.ir.FAMILY_RELATIONS)")
                for lhs, rel, rhs, inv, rule in missing]


def check_smem_disjoint(program: Program) -> tuple[list[Proof], list[Violation]]:
    """``smem.disjoint``: every two shared-memory tensors occupy disjoint byte ranges ``[base_bytes,
    base_bytes + size_bytes)``, whatever relations the program states (a TMA load into one buffer
    must never overwrite another that an MMA, a store or a copy reads)."""
    import itertools

    sm = [t for t in program.tensors if t.space == "smem"]
    bad = []
    for a, b in itertools.combinations(sm, 2):
        overlap = min(a.base_bytes + a.size_bytes, b.base_bytes + b.size_bytes) - max(a.base_bytes, b.base_bytes)
        if overlap > 0:
            lo = max(a.base_bytes, b.base_bytes)
            bad.append(Violation(
                "smem.disjoint", invariant_of("smem.disjoint"), f"smem tensors {a.name} [{a.base_bytes}, {a.base_bytes + a.size_bytes}) and "
                f"{b.name} [{b.base_bytes}, {b.base_bytes + b.size_bytes}) overlap by {overlap} bytes",
                "place every smem buffer in its own byte range", str(b.loc),
                Counterexample(invariant_of("smem.disjoint"), "smem.disjoint", "arith", "smem placement", str(b.loc), -1, -1, -1, {}, {}, "",
                               {a.name: lo - a.base_bytes, b.name: lo - b.base_bytes},
                               f"byte {lo} in one buffer", f"byte {lo} in both {a.name} and {b.name}",
                               f"{a.name}.base_bytes {a.base_bytes}, {b.name}.base_bytes {b.base_bytes}",
                               element={"tensor": f"{a.name}/{b.name}", "byte": lo})))
    if bad:
        return [], bad
    return [Proof("smem.disjoint", invariant_of("smem.disjoint"), "arith", f"{len(sm)} smem tensors in pairwise disjoint byte ranges",
                  len(sm) * (len(sm) - 1) // 2)], []


def check_references(program: Program) -> tuple[list[Proof], list[Violation]]:
    """``dsl.unknown_ref`` / ``pipeline.buffers``: every name a node refers to exists and means what
    the node says (a load's source and destination tensors and its pipeline, the pipeline's loads
    and buffers, the MMA's reads and accumulator, the staging step's source, a tag assertion's MMA).
    The builder checks these when the program is built; an edit (``replace_node``) can break them."""
    tensors = {t.name for t in program.tensors}
    bad: list[tuple[str, str, str]] = []  # (rule, message, where)
    for ld in program.loads:
        for what in ("src", "dst"):
            if getattr(ld, what) not in tensors:
                bad.append(("dsl.unknown_ref", f"{ld.name}: {what} tensor {getattr(ld, what)!r} does not exist",
                            str(ld.loc)))
    pipes = {p.name: p for p in program.pipelines}
    for ld in program.loads:
        if program.pipelines and ld.pipeline not in pipes:
            bad.append(("dsl.unknown_ref", f"{ld.name} completes on pipeline {ld.pipeline!r}, which does not exist "
                        f"(have {sorted(pipes)})", str(ld.loc)))
    for pipe in program.pipelines:
        mine = [ld for ld in program.loads if ld.pipeline == pipe.name]
        if tuple(pipe.loads) != tuple(ld.name for ld in mine):
            bad.append(("pipeline.buffers", f"pipeline {pipe.name!r} lists loads {tuple(pipe.loads)}, but the loads "
                        f"completing on it are {tuple(ld.name for ld in mine)}", str(pipe.loc)))
        if tuple(pipe.buffers) != tuple(ld.dst for ld in mine):
            bad.append(("pipeline.buffers", f"pipeline {pipe.name!r} guards buffers {tuple(pipe.buffers)}, but its "
                        f"loads fill {tuple(ld.dst for ld in mine)}", str(pipe.loc)))
    reads = {r.name: r for r in program.reads}
    for r in program.reads:
        if r.src not in tensors:
            bad.append(("dsl.unknown_ref", f"MMA read {r.name}: source {r.src!r} does not exist", str(r.loc)))
    for m in program.mmas:
        for field, operand in (("a", "A"), ("b", "B")):
            name = getattr(m, field)
            r = reads.get(name)
            if r is None:
                bad.append(("dsl.unknown_ref", f"MMA {m.name!r}: operand {operand} read {name!r} does not exist "
                            f"(have {sorted(reads)})", str(m.loc)))
            elif r.operand != operand or r.mma != m.name:
                bad.append(("dsl.unknown_ref", f"MMA {m.name!r}: {field} = {name!r} reads operand {r.operand} for MMA "
                            f"{r.mma!r}", str(m.loc)))
        if m.acc not in tensors:
            bad.append(("dsl.unknown_ref", f"MMA {m.name!r}: accumulator {m.acc!r} does not exist", str(m.loc)))
    mmas = {m.name for m in program.mmas}
    for a in program.assertions:
        at = a.at if isinstance(a.at, str) else ""
        if at.split(".")[0] not in mmas:
            bad.append(("dsl.unknown_ref", f"tag assertion {a.name!r}: program point {a.at!r} names no MMA "
                        f"(have {sorted(mmas)})", str(a.loc)))
    for st in program.stores:
        for what in ("src", "dst"):
            if getattr(st, what) not in tensors:
                bad.append(("dsl.unknown_ref", f"{st.name}: {what} tensor {getattr(st, what)!r} does not exist",
                            str(st.loc)))
    if program.source is not None and program.source.src not in tensors:
        bad.append(("dsl.unknown_ref", f"the C source reads {program.source.src!r}, which does not exist",
                    str(program.source.loc)))
    if program.staging is not None:
        stg = program.staging
        if stg.dst not in tensors:
            bad.append(("dsl.unknown_ref", f"the staging buffer {stg.dst!r} does not exist", str(stg.loc)))
        if program.barriers and stg.barrier not in {b.name for b in program.barriers}:
            bad.append(("dsl.unknown_ref", f"the staging step syncs on named barrier {stg.barrier!r}, which does not "
                        "exist", str(stg.loc)))
    if bad:
        return [], [Violation(rule, "G6" if rule == "pipeline.buffers" else "DSL", msg,
                              "refer to nodes by the names they were declared with", where)
                    for rule, msg, where in bad]
    return [], []
