"""Print a verified :class:`~argus_cutlass.dsl.moe_ir.MoELayer` as one CuTe C++ file (``templates/moe/``).

The two grouped GEMMs are printed by the GEMM family's partials (``gemm/traits.j2``,
``gemm/mainloop.j2``, ``gemm/epilogue.j2``, ``gemm/kernel_body.j2``, ``gemm/host_maps.j2``) from the
context :func:`argus_cutlass.render.gemm.gemm_context` builds of each program, each in its own
namespace (``moe/gemm.j2``); the routing and combine kernels and the host entry are
``moe/layer.cu.j2``, printed from the layer's routing, combine and index nodes.
"""

from __future__ import annotations

from argus_cutlass import __version__
from argus_cutlass.dsl.atoms import CPP_TYPE
from argus_cutlass.dsl.moe_ir import FACTOR_CPP, HANDOFF_EDGES, INDEX_SITES, LAYER_SIZES, MoELayer, handoff_edge
from argus_cutlass.errors import ConfigError
from argus_cutlass.render.env import render_template
from argus_cutlass.render.gemm import gemm_context

__all__ = ["LAYER_TEMPLATE", "handoff_view", "index_expr", "moe_context", "render_moe"]

LAYER_TEMPLATE = "moe/layer.cu.j2"
#: each grouped GEMM's ticket counter (workspace region) under the dynamic walk
TICKETS = {"gate_up": "gu_tickets", "down": "dn_tickets"}
GEMM_PART_TEMPLATE = "moe/gemm.j2"


def handoff_view(layer: MoELayer, edge: str, part: str = "") -> dict:
    """What ``templates/moe/handoff.j2`` prints of handoff edge ``edge`` (:data:`~argus_cutlass.dsl.moe_ir.
    HANDOFF_EDGES`), every value read from the layer node's fields: ``node`` / ``rule`` / ``who`` / ``whom`` /
    ``tensor`` / ``counter`` (the edge), ``fn`` (the signal function's name, ``<edge>_signal``), ``const`` (the
    constants' prefix), ``signal`` / ``fence`` / ``backoff_ns`` / ``timeout_ms`` (the ``<edge>_*`` knobs), ``target`` (:meth:`MoELayer.handoff_target`),
    ``min_timeout_ms`` (:meth:`MoELayer.handoff_min_timeout_ms`), and ``signals``: whether grouped GEMM ``part``
    is the edge's signaller.

    Raises:
        KeyError: no such edge.
    """
    e = handoff_edge(edge)
    knob = lambda k: layer.edge_knob(edge, k)  # noqa: E731
    return {"node": e.name, "rule": e.rule, "who": e.who, "whom": e.whom, "tensor": e.tensor, "counter": e.counter,
            "fn": f"{e.name}_signal", "const": e.const,
            "signal": knob("signal"), "fence": knob("fence"), "backoff_ns": knob("backoff_ns"),
            "timeout_ms": knob("timeout_ms"), "target": layer.handoff_target(edge),
            "min_timeout_ms": layer.handoff_min_timeout_ms(edge), "signals": part == e.signaller}


def _gemm_text(layer: MoELayer, part: str, ns: str) -> str:
    program = layer.program(part)
    ctx = gemm_context(program)
    if program.family != "moe" or program.schedule.decomposition != "grouped":
        raise ConfigError("render.program", f"MoE part {part!r} is not a grouped GEMM of family moe")
    if program.launch is not None and program.launch.pdl:
        raise ConfigError("render.program", f"MoE part {part!r}: its launch node says pdl; a grouped GEMM is launched "
                          "programmatically by its layer node's pdl (rule moe.pdl), not its own")
    edges = [handoff_view(layer, e.name, part) for e in HANDOFF_EDGES
             if getattr(layer, e.name) and part in (e.signaller, e.waiter)]
    try:
        ctx.update(ns=ns, ix_tile_unit=layer.index("tile_unit"), units_expr=index_expr(layer, "tile_unit", "tiles_m"),
                   ix_b_row=layer.index("w13_row" if part == "gate_up" else "w2_row"), pdl=layer.pdl,
                   weight_prefetch=layer.weight_prefetch,
                   # the handoff edges this GEMM signals or waits on, in edge order (moe/handoff.j2): the gate+up ->
                   # down edge (gate+up signals, down waits), the down -> combine edge (down signals)
                   handoff_edges=edges, handoff_signals=[e for e in edges if e["signals"]],
                   handoff_wait=any(not e["signals"] for e in edges), L=layer,
                   epi_alpha=float(program.param("alpha")), epi_beta=float(program.param("beta")))
    except (KeyError, TypeError) as exc:   # TypeError: no alpha / beta param (float(None))
        raise ConfigError("render.program", f"MoE layer {layer.name!r}: {exc.args[0]}") from None
    return render_template(GEMM_PART_TEMPLATE, ctx, "MoE", program.name)


def _extents(layer: MoELayer, part: str) -> str:
    """``N, K`` of grouped GEMM ``part`` as printed in ``run_grouped``'s call: the program's params ``n_size`` /
    ``k_size`` (layer sizes, :data:`FACTOR_CPP`'s constants).

    Raises:
        ConfigError: ``render.program`` when a param is missing or names no printed size.
    """
    prog = layer.program(part)
    names = (prog.param("n_size"), prog.param("k_size"))
    if any(n not in LAYER_SIZES for n in names):
        raise ConfigError("render.program", f"MoE part {part!r}: extents (n_size, k_size) {names} are not layer sizes "
                          f"({', '.join(LAYER_SIZES)})")
    return ", ".join(FACTOR_CPP[n] for n in names)


def index_expr(layer: MoELayer, name: str, var: str) -> str:
    """The C++ text of index ``name`` with ``var`` its variable, printed from the node:
    ``ctype(var) * constant ...`` (the constants named by ``factors[1:]``, :data:`FACTOR_CPP`).

    Raises:
        ConfigError: ``render.program`` when the node is missing, or its first factor is not the
            site's variable, or a factor has no printed constant.
    """
    try:
        node = layer.index(name)
    except KeyError as exc:
        raise ConfigError("render.program", f"MoE layer {layer.name!r}: {exc.args[0]}") from None
    site = INDEX_SITES.get(name)
    if site is None or not node.factors or node.factors[0] != site.factors[0]:
        raise ConfigError("render.program", f"index {name!r}: factors {node.factors} do not start with the "
                          f"variable the kernel indexes by ({site.factors[0] if site else '?'!r})")
    unknown = [f for f in node.factors[1:] if f not in FACTOR_CPP]
    if unknown:
        raise ConfigError("render.program", f"index {name!r}: factor(s) {unknown} have no printed constant "
                          f"(known: {sorted(FACTOR_CPP)})")
    return f"{node.ctype}({var})" + "".join(f" * {FACTOR_CPP[f]}" for f in node.factors[1:])


def moe_context(layer: MoELayer, verified: tuple[str, ...] = ()) -> dict:
    """The template variables of ``layer`` (exposed for tests).

    Raises:
        ConfigError: ``render.program`` when a part cannot be printed.
    """
    name = layer.kernel_name()
    for needed in INDEX_SITES:
        index_expr(layer, needed, "v")  # every printed index is a node the renderer can print
    gu_ns, dn_ns = f"{name}_gu", f"{name}_dn"
    return {
        "name": name, "version": __version__, "verified": list(verified), "L": layer, "W": layer.workspace,
        "cpp": CPP_TYPE,
        "fingerprint": layer.fingerprint()[:16], "gu_ns": gu_ns, "dn_ns": dn_ns,
        "ix": {i.name: i for i in layer.indices},
        "extents": {part: _extents(layer, part) for part in ("gate_up", "down")},
        "ixp": lambda n, v: index_expr(layer, n, v),
        "gate_up_text": _gemm_text(layer, "gate_up", gu_ns), "down_text": _gemm_text(layer, "down", dn_ns),
        # the down -> combine handoff as moe/handoff.j2 prints it (the combine's wait; None without it)
        "CH": handoff_view(layer, "combine_handoff") if layer.combine_handoff else None,
        # a grouped GEMM with a row_bound load or store takes the routing's tile_rows table (run_grouped's argument)
        **{f"{pre}_row_bound": layer.program(part).row_bounded for pre, part in (("gu", "gate_up"), ("dn", "down"))},
        # a wgmma N outside CuTe's default set in either GEMM: its arch struct's header (gemm/traits.j2 prints it)
        "mma_extended": any(layer.program(part).mma.op.extended_shape for part in ("gate_up", "down")),
        # the ticket counters of the grouped GEMMs with the dynamic walk (route_scan / route_fused zero them, each
        # GEMM's run_grouped takes its own; rule moe.dynamic_walk)
        "tickets": [TICKETS[part] for part in layer.dynamic_parts()],
        "tickets_args": "".join(f", {TICKETS[part]}" for part in layer.dynamic_parts()),
    }


def render_moe(layer: MoELayer, verified: tuple[str, ...] = ()) -> str:
    """The self-contained ``.cu`` source of ``layer``; ``verified`` lists the proved invariants.

    Raises:
        ConfigError: ``render.program`` when the templates cannot print the layer.
    """
    return render_template(LAYER_TEMPLATE, moe_context(layer, verified), "MoE", layer.name)
