"""The MoE coupling test: what runs is what was proved, field by field (mirrors test_coupling.py).

For five base layers (the small E=8 layer under the default configuration, the qwen-like
E=128, k=8 layer under the small-T configuration, the small layer with banded walks of 3 and 5
m-tiles, the small layer with its gather in 3 column slices, and the small layer with programmatic
launches and a weight prefetch) and **every field** of the MoE nodes -- the
routing and combine nodes, every :class:`~argus_cutlass.dsl.moe_ir.IndexWidth` node, the layer's
own scalar fields, ``pdl``, ``weight_prefetch`` and the handoff's fields (two more bases: the handoff on
both tile paths; two more: row-bounded tiles on both tile paths), the down -> combine handoff's fields (two more
bases: with the gate+up handoff and row-bounded 64-row tiles, alone on the 128-row tiles) -- and the MoE fields of the two grouped GEMM
programs (B's ``expert_rows``, ``expert_shift``, ``pair_offset``; A's and D's ``row_bound``, ``row_shift_delta``; the epilogue's ``act``, ``act_pair``, ``row_offset``,
``tile_n``; the schedule's ``decomposition``, ``step_delta`` and the banded walk's ``band_m``,
``band_start_delta``, ``band_full_rows``, ``band_swap``, and ``lookahead``), a type-appropriate mutation
(int: +1, -1 and doubled; bool: flipped; str: every other valid value; tuple: an element dropped
and replaced; the workspace node's scalar fields and every field of every region) is applied and one of these
must hold:

* the DSL refuses the edit (``DslError`` / ``KeyError`` / ``TypeError`` / ``ValueError``);
* rendering refuses it (``ConfigError`` ``render.program``, or a ``ProblemError``);
* the compiled content of the ``.cu`` differs from the base's (comments and static_assert
  messages removed, the kernel-name hash and fingerprints masked): a changed constant that a
  printed ``static_assert`` stops is a change too;
* the verifier rejects the layer.

A mutation that leaves the compiled text unchanged *and* verifies is a defect (a field no printed
code reads, or a verified claim about an unprinted value); so is a renderer crash.
"""

from __future__ import annotations

import dataclasses
import re
from functools import lru_cache
from typing import Any, Callable

import pytest

from argus_cutlass.dsl.moe_ir import COMBINE_HANDOFF_FIELDS, CTYPES, HANDOFF_FIELDS, REGION_CTYPES, MoELayer
from argus_cutlass.errors import ConfigError, DslError, ProblemError
from argus_cutlass.kernels.moe.config import MoEConfig
from argus_cutlass.kernels.moe.problem import MoEProblem
from argus_cutlass.kernels.moe.program import build_layer
from argus_cutlass.render.moe import render_moe
from argus_cutlass.verify.moe import verify_moe

DOMAINS = {"scan": ("exclusive", "inclusive"), "rank": ("stable", "block"), "invalid": ("skip", "clamp"),
           "row_map": ("permuted_row", "identity"), "acc_dtype": ("fp32", "bf16", "fp16"), "dtype": ("bf16", "fp16"),
           "ctype": tuple(CTYPES), "act": ("", "swiglu", "swiglu_swapped"),
           "decomposition": ("persistent", "streamk", "splitk", "grouped"), "handoff_signal": ("complete", "read"),
           "combine_handoff_signal": ("complete", "read"), "combine_handoff_slot": ("own", "first"),
           "combine_handoff_load": ("cg", "nc"),
           "elem": REGION_CTYPES, "row_bound": ("", "tile_rows"), "group_padding": ("after", "before"),
           "fused_scan": ("", "exclusive", "inclusive"), "fused_writers": ("first", "all")}
#: the schedule node's fields of the banded grouped walk
BAND_FIELDS = ("band_m", "band_start_delta", "band_full_rows", "band_swap", "lookahead")
#: MoE fields of the grouped GEMM programs: (part, replace_node kind, key getter, fields)
GEMM_FIELDS = (
    ("gate_up", "load", lambda p: p.load_into("sB").name, ("expert_rows", "expert_shift", "pair_offset")),
    ("down", "load", lambda p: p.load_into("sB").name, ("expert_rows", "expert_shift", "pair_offset")),
    ("gate_up", "epilogue", None, ("act", "act_pair", "row_offset", "tile_n")),
    ("down", "epilogue", None, ("act", "row_offset", "tile_n")),
    ("gate_up", "schedule", None, ("decomposition", "step_delta") + BAND_FIELDS),
    ("down", "schedule", None, ("decomposition", "step_delta") + BAND_FIELDS),
    # row-bounded tiles: the permuted rows' A load and the D store
    ("gate_up", "load", lambda p: p.load_into("sA").name, ("row_bound", "row_shift_delta")),
    ("down", "load", lambda p: p.load_into("sA").name, ("row_bound", "row_shift_delta")),
    ("gate_up", "store", lambda p: p.stores[0].name, ("row_bound", "row_shift_delta")),
    ("down", "store", lambda p: p.stores[0].name, ("row_bound", "row_shift_delta")),
)


@lru_cache(maxsize=None)
def base(which: str) -> MoELayer:
    from argus_cutlass.kernels.moe.heuristics import small_t_config

    if which == "small":
        return build_layer(MoEConfig(), MoEProblem(64, 8, 2, 256, 512))
    if which == "small_banded":
        return build_layer(MoEConfig(gu_band_m=3, dn_band_m=5), MoEProblem(64, 8, 2, 256, 512))
    if which == "small_sliced":   # the gather in 3 column slices of H = 256 (11 + 11 + 10 vectors)
        return build_layer(MoEConfig(gather_slices=3), MoEProblem(64, 8, 2, 256, 512))
    if which == "small_pdl":   # programmatic launches, 4 k-tiles of weights prefetched before the wait
        return build_layer(MoEConfig(pdl=True, weight_prefetch=4), MoEProblem(64, 8, 2, 256, 512))
    if which == "small_handoff":   # the gate+up -> down handoff per m-tile, programmatic launches
        return build_layer(MoEConfig(pdl=True, handoff=True), MoEProblem(64, 8, 2, 256, 512))
    if which == "qwen_small_t_handoff":   # the same on the 64-row ping-pong tiles
        return build_layer(small_t_config().replace(pdl=True, handoff=True), MoEProblem(64, 128, 8, 2048, 768))
    if which == "small64_rb":   # row-bounded tiles (3-D maps, boxes shifted by the routing's tile_rows table)
        return build_layer(small_t_config().replace(row_bounded=True), MoEProblem(64, 8, 2, 256, 512))
    if which == "small128_rb_handoff":   # the same on 128-row tiles with programmatic launches and the handoff
        return build_layer(small_t_config(tile_m=128).replace(row_bounded=True, pdl=True, handoff=True,
                                                              weight_prefetch=4), MoEProblem(64, 8, 2, 256, 512))
    if which == "small64_rb_both_handoffs":   # 64-row row-bounded tiles, gate+up -> down and down -> combine handoffs
        return build_layer(small_t_config().replace(row_bounded=True, pdl=True, handoff=True, combine_handoff=True),
                           MoEProblem(64, 8, 2, 256, 512))
    if which == "small_combine_handoff":   # the default 128-row tiles with only the down -> combine handoff
        return build_layer(MoEConfig(pdl=True, combine_handoff=True), MoEProblem(64, 8, 2, 256, 512))
    if which == "small_fused":   # the fused routing of one-chunk calls (routing node fused)
        return build_layer(MoEConfig(fused_routing=True), MoEProblem(64, 8, 2, 256, 512))
    if which == "small64_fused_all":   # fused, both handoffs, row-bounded tiles, the gather in 4 slices
        return build_layer(small_t_config().replace(row_bounded=True, pdl=True, handoff=True, combine_handoff=True,
                                                    gather_slices=4, fused_routing=True), MoEProblem(64, 8, 2, 256, 512))
    return build_layer(small_t_config(), MoEProblem(64, 128, 8, 2048, 768))


def _alts(name: str, v: Any) -> list[Any]:
    if isinstance(v, bool):
        return [not v]
    if isinstance(v, int):
        return sorted({v + 1, v - 1, 2 * v if v else 1} - {v})
    if isinstance(v, str):
        return [a for a in DOMAINS.get(name, (v + "_x",)) if a != v]
    if isinstance(v, tuple):
        out = [v[:-1]] if len(v) > 1 else []
        return out + [("k",) + v[1:], v + ("E",)]
    return []


def mutations(layer: MoELayer) -> list[tuple[str, Callable[[], MoELayer]]]:
    out: list[tuple[str, Callable[[], MoELayer]]] = []
    for part in ("routing", "combine"):
        node = getattr(layer, part)
        for f in dataclasses.fields(node):
            if f.name == "loc":
                continue
            for a in _alts(f.name, getattr(node, f.name)):
                out.append((f"{part}.{f.name} -> {a!r}", lambda p=part, n=f.name, a=a: layer.replace_node(p, **{n: a})))
    for ix in layer.indices:
        for f in ("ctype", "factors"):
            for a in _alts(f, getattr(ix, f)):
                out.append((f"index[{ix.name}].{f} -> {a!r}",
                            lambda k=ix.name, f=f, a=a: layer.replace_node("index", None, k, **{f: a})))
    for f in ("experts", "topk", "hidden", "ffn", "dtype", "tokens_bits", "pdl", "weight_prefetch", *HANDOFF_FIELDS,
              *COMBINE_HANDOFF_FIELDS):
        for a in _alts(f, getattr(layer, f)):
            out.append((f"layer.{f} -> {a!r}", lambda f=f, a=a: layer.replace_node("layer", **{f: a})))
    out.append(("layer.name -> 'renamed'", lambda: dataclasses.replace(layer, name="renamed")))
    # the workspace node: its scalar fields, and every field of every region (a count: one more / one fewer
    # element, a product dropped, a factor appended; an alias: every other region, or none)
    ws = layer.workspace
    for f in ("align", "group_rows", "round_rows", "tile_rows"):
        for a in _alts(f, getattr(ws, f)):
            out.append((f"workspace.{f} -> {a!r}", lambda f=f, a=a: layer.replace_node("workspace", **{f: a})))
    names = [r.name for r in ws.regions]
    for r in ws.regions:
        alts: list[tuple[str, Any]] = [("name", r.name + "_x"), *(("elem", e) for e in REGION_CTYPES if e != r.elem),
                                       ("count", r.count + ((1,),)), ("count", r.count + ((-1,),)),
                                       ("count", r.count[:-1]), ("count", (r.count[0] + ("k",),) + r.count[1:]),
                                       *(("alias", n) for n in ["", *names] if n != r.alias)]
        for f, a in alts:
            out.append((f"region[{r.name}].{f} -> {a!r}",
                        lambda k=r.name, f=f, a=a: layer.replace_node("region", None, k, **{f: a})))
    for part, kind, key_of, fields in GEMM_FIELDS:
        prog = layer.program(part)
        key = key_of(prog) if key_of else None
        node = prog.resolve(f"{kind}[{key}]" if key else kind)
        for f in fields:
            for a in _alts(f, getattr(node, f)):
                out.append((f"{part}.{kind}.{f} -> {a!r}",
                            lambda p=part, k=kind, key=key, f=f, a=a: layer.replace_node(p, k, key, **{f: a})))
    return out


def _masked_code(layer: MoELayer, text: str) -> str:
    """The compiled content of ``text``: fingerprints and the kernel-name hash masked, comments
    and static_assert messages removed."""
    fp = layer.fingerprint()
    text = text.replace(fp[:16], "<FP>").replace(f"_{fp[:8]}", "_<HASH>")
    for part in ("gate_up", "down"):
        pfp = layer.program(part).fingerprint()
        text = text.replace(pfp[:16], "<PFP>").replace(pfp[:8], "<PH>")
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'(static_assert\([^;]*),\s*"(?:[^"\\]|\\.)*"\s*\);', r"\1);", text)
    return "\n".join(ln.rstrip() for ln in text.splitlines() if ln.strip())


def classify(layer: MoELayer, make: Callable[[], MoELayer]) -> tuple[str, str]:
    """``(outcome, detail)``: ``dsl_error`` / ``unprintable`` / ``changed`` / ``rejected`` (covered),
    ``unprinted`` / ``crash`` (defects)."""
    try:
        m = make()
    except (DslError, KeyError, TypeError, ValueError) as exc:
        return "dsl_error", str(exc)[:120]
    try:
        text = render_moe(m)
    except (ConfigError, ProblemError) as exc:
        if isinstance(exc, ProblemError) or exc.rule == "render.program":
            return "unprintable", str(exc)[:120]
        return "crash", f"{exc.rule}: {str(exc)[:120]}"
    except Exception as exc:  # noqa: BLE001 - any other renderer failure is a defect
        return "crash", f"{type(exc).__name__}: {str(exc)[:120]}"
    if _masked_code(m, text) != _masked_code(layer, render_moe(layer)):
        return "changed", ""
    try:
        rep = verify_moe(m, smt=False)
    except Exception as exc:  # noqa: BLE001 - verify_moe never raises for a bad layer
        return "crash", f"verify: {type(exc).__name__}: {exc}"
    if not rep.ok:
        return "rejected", ",".join(sorted({v.rule for v in rep.violations}))
    return "unprinted", "compiled text unchanged and the verifier accepts"


@pytest.mark.parametrize("which", ["small", "qwen_small_t", "small_banded", "small_sliced", "small_pdl", "small_handoff",
                                   "qwen_small_t_handoff", "small64_rb", "small128_rb_handoff",
                                   "small64_rb_both_handoffs", "small_combine_handoff", "small_fused",
                                   "small64_fused_all"])
def test_every_moe_field_is_coupled(which):
    layer = base(which)
    muts = mutations(layer)
    assert len(muts) > 60
    defects = []
    for label, make in muts:
        outcome, detail = classify(layer, make)
        if outcome in ("unprinted", "crash"):
            defects.append(f"{label}: {outcome} ({detail})")
    assert not defects, "\n".join(defects)


def test_coupling_detects_an_unprinted_field():
    """The classifier itself: a field the template drops would be reported (not silently covered)."""
    layer = base("small")
    assert classify(layer, lambda: layer) == ("unprinted", "compiled text unchanged and the verifier accepts")
    assert classify(layer, lambda: layer.replace_node("combine", terms=1))[0] == "changed"
