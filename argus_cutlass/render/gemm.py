"""Print a verified GEMM :class:`~argus_cutlass.dsl.ir.Program` as CuTe C++ (``templates/gemm/``).

The template context is the program's nodes themselves plus the hardware encodings of their
fields (GMMA descriptor plans, tensor-map enum names, the staging view's CuTe type), each a pure
function of one node (``argus_cutlass.layout``). Nothing here reads a configuration.
"""

from __future__ import annotations

from argus_cutlass import __version__
from argus_cutlass.dsl.atoms import CPP_TYPE
from argus_cutlass.dsl.ir import Program
from argus_cutlass.errors import ConfigError
from argus_cutlass.render.env import render_template

GEMM_TEMPLATE = "gemm/kernel.cu.j2"

#: TMA swizzle mode (bytes) -> CUtensorMapSwizzle
TMA_SWIZZLE = {128: "CU_TENSOR_MAP_SWIZZLE_128B", 64: "CU_TENSOR_MAP_SWIZZLE_64B",
               32: "CU_TENSOR_MAP_SWIZZLE_32B", 16: "CU_TENSOR_MAP_SWIZZLE_NONE"}
#: k loop oob_fill -> CUtensorMapFloatOOBfill (NONE fills zeros; the NaN mode fills NaN)
OOB_FILL = {"zero": "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE", "nan": "CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA"}
#: L2 promotion (bytes) -> CUtensorMapL2promotion
L2_PROMOTION = {0: "CU_TENSOR_MAP_L2_PROMOTION_NONE", 64: "CU_TENSOR_MAP_L2_PROMOTION_L2_64B",
                128: "CU_TENSOR_MAP_L2_PROMOTION_L2_128B", 256: "CU_TENSOR_MAP_L2_PROMOTION_L2_256B"}
_CMP = {"==": "==", "!=": "!=", "<=": "<=", "<": "<", ">=": ">=", ">": ">"}


def _staging_layout(view, elem: str) -> str:  # noqa: ANN001 - SmemView
    """CuTe type of one staging stage: ``tile_to_shape(Atom, Shape<epi_m, epi_n>, Step<...>)``."""
    m, n = view.shape[0], view.shape[1]
    step = "cute::Step<cute::_1, cute::_2>" if view.atom.major == "K" else "cute::Step<cute::_2, cute::_1>"
    return (f"decltype(cute::tile_to_shape({view.atom.cpp(elem)}{{}}, cute::Shape<cute::_{m}, cute::_{n}>{{}}, "
            f"{step}{{}}))")


def relation_lines(program: Program) -> list[dict]:
    """The program's relation nodes as ``static_assert`` lines: numeric relations on their values,
    string relations through ``streq``, ``disjoint`` on the two smem tensors' byte ranges.

    Raises:
        ConfigError: ``render.program`` for a relation the template cannot state (a path that does
            not resolve, ``disjoint`` over something that is not an smem tensor).
    """
    out = []
    for r in program.relations:
        try:
            lhs, rhs = program.resolve(r.lhs), program.resolve(r.rhs)
        except KeyError as exc:
            raise ConfigError("render.program", f"relation {r.name!r}: {exc.args[0]}") from None
        line = {"invariant": r.invariant, "rule": r.rule, "name": r.name, "text": str(r)}
        if r.relation == "disjoint":
            if not all(getattr(t, "space", None) == "smem" for t in (lhs, rhs)):
                raise ConfigError("render.program", f"relation {r.name!r}: 'disjoint' relates two smem tensors")
            a0, b0 = lhs.base_bytes, rhs.base_bytes
            a1, b1 = a0 + lhs.size_bytes, b0 + rhs.size_bytes
            line.update(expr=f"({a1} <= {b0} || {b1} <= {a0})")
        elif all(isinstance(v, int) and not isinstance(v, bool) for v in (lhs, rhs)) and r.relation in _CMP:
            line.update(expr=f"{lhs} {_CMP[r.relation]} {rhs}")
        elif r.relation == "divides" and all(isinstance(v, int) for v in (lhs, rhs)):
            line.update(expr=f"{rhs} % {lhs} == 0")
        elif all(isinstance(v, str) for v in (lhs, rhs)) and r.relation in ("==", "!="):
            neg = "!" if r.relation == "!=" else ""
            line.update(expr=f'{neg}streq("{lhs}", "{rhs}")')
        else:
            raise ConfigError("render.program", f"relation {r.name!r}: cannot state {lhs!r} {r.relation} {rhs!r} "
                              "in C++")
        out.append(line)
    return out


def _named(nodes, name: str, what: str):  # noqa: ANN001, ANN202
    hit = [n for n in nodes if n.name == name]
    if len(hit) != 1:
        raise KeyError(f"{what} {name!r} ({len(hit)} such nodes)")
    return hit[0]


def gemm_context(program: Program, verified: tuple[str, ...] = ()) -> dict:
    """The template variables of ``program`` (exposed for golden tests).

    Raises:
        ConfigError: ``render.program`` when the program lacks a node the GEMM template prints,
            or a read's view has no GMMA descriptor (the verifier rejects such programs first).
    """
    from argus_cutlass.layout.algebra import LayoutError
    from argus_cutlass.layout.gmma_desc import DescriptorError, descriptor_plan

    p = program
    try:
        # follow the program's own references: every name below is a field the template obeys
        mma = p.mma
        ra, rb = _named(p.reads, mma.a, "MMA read"), _named(p.reads, mma.b, "MMA read")
        if (ra.operand, rb.operand) != ("A", "B") or ra.mma != mma.name or rb.mma != mma.name:
            raise KeyError(f"MMA {mma.name!r} reads {ra.name!r} ({ra.operand}, of {ra.mma!r}) and {rb.name!r} "
                           f"({rb.operand}, of {rb.mma!r}): expected its own A and B reads")
        la, lb = p.load_into(ra.src), p.load_into(rb.src)
        if p.family not in ("gemm", "moe"):
            raise KeyError(f"family {p.family!r}: this is the GEMM template (and the grouped GEMMs' partials)")
        if (p.family == "moe") != (p.schedule.decomposition == "grouped"):
            raise KeyError(f"family {p.family!r} with decomposition {p.schedule.decomposition!r}: the grouped "
                           "scheduler is the MoE family's, and the MoE family's GEMMs are grouped")
        pipe = _named(p.pipelines, la.pipeline, "pipeline")
        if lb.pipeline != pipe.name or sorted(pipe.loads) != sorted((la.name, lb.name)):
            raise KeyError(f"pipeline {pipe.name!r} (loads {pipe.loads}) is not the one loads {la.name!r}/{lb.name!r} "
                           "complete on")
        for ld in (la, lb):
            if ld.block_mode not in ("m", "n") or (ld.advance, ld.head, ld.block_shift) != ("k", "", 0):
                raise KeyError(f"load {ld.name!r}: block_mode {ld.block_mode!r}, advance {ld.advance!r}, head "
                               f"{ld.head!r}, block_shift {ld.block_shift}: a GEMM load takes the output tile's m or "
                               "n block and advances along k, with no head mode and no shift")
        if p.schedule.longest_first:
            raise KeyError("schedule.longest_first walks attention's query blocks; the GEMM walk is CUTLASS's raster")
        if p.schedule.decomposition == "dynamic" or (p.schedule.slot_bytes != -1 and not (
                p.family == "moe" and p.schedule.dynamic_grouped)):
            raise KeyError("the dynamic scheduler (unit slots in smem) belongs to the attention template and the MoE "
                           "family's grouped GEMMs (the dynamic walk)")
        if p.mask is not None or p.softmax is not None or p.output is not None:
            raise KeyError("mask / softmax / row output nodes belong to the attention family")
        by_name = {la.name: la, lb.name: lb}
        if tuple(by_name[x].dst for x in pipe.loads) != tuple(pipe.buffers):
            raise KeyError(f"pipeline {pipe.name!r}: buffers {pipe.buffers} are not its loads' destinations in order")
        loop = p.kloop
        epi, stg, src = p.epilogue, p.staging, p.source
        if epi.acc != mma.acc or stg.src != mma.acc:
            raise KeyError(f"the epilogue stores {epi.acc!r} / stages {stg.src!r}, the MMA accumulates {mma.acc!r}")
        stores = [x for x in p.stores if x.src == stg.dst]
        if len(stores) != 1 or stores[0].dst != epi.dst:
            raise KeyError(f"no single TMA store from the staging buffer {stg.dst!r} to {epi.dst!r}")
        st = stores[0]
        ctx = {
            "name": p.kernel_name(), "version": __version__, "verified": list(verified), "p": p,
            "fingerprint": p.fingerprint()[:16], "cpp": CPP_TYPE,
            "gA": p.tensor(la.src), "gB": p.tensor(lb.src), "gC": p.tensor(src.src), "gD": p.tensor(epi.dst),
            "sA": p.tensor(la.dst), "sB": p.tensor(lb.dst), "sD": p.tensor(stg.dst), "acc": p.tensor(mma.acc),
            "la": la, "lb": lb, "ra": ra, "rb": rb, "mma": mma, "pipe": pipe, "loop": loop,
            "st": st, "stg": stg, "epi": epi, "src": src, "sched": p.schedule, "pdl": bool(p.launch.pdl), "weight_prefetch": 0,
            "handoff_wait": False, "handoff_edges": (), "handoff_signals": (), "row_bound": p.row_bounded,
            "launch": p.launch, "producer": p.role("producer"), "consumer": p.role("consumer"),
            "bar_epi": p.barrier(stg.barrier), "order": p.orders[0] if p.orders else None,
        }
        for t in ("gA", "gB", "gC", "gD"):
            g = ctx[t]
            if g.space != "gmem":
                raise KeyError(f"{g.name!r} is a {g.space} tensor where the kernel binds a gmem one")
            if g.tag is not None and tuple(x.lower() for x in g.shape) != tuple(g.tag.fields):
                raise KeyError(f"{g.name!r}: modes {g.shape} are not its tag's fields {g.tag.fields} in order")
        # the caller's layout letters follow from the operands' contiguous modes and bindings (a
        # program binding both operands to one argument is printed as stated: the verifier's
        # operand-identity rule rejects it)
        caller = {ctx["gA"].binding: ctx["gA"], ctx["gB"].binding: ctx["gB"]}
        letters = (("t" if caller["A"].major == "K" else "n") + ("n" if caller["B"].major == "K" else "t")
                   if set(caller) == {"A", "B"} else p.param("layout"))
        if p.param("layout") != letters:
            raise KeyError(f"param layout {p.param('layout')!r} disagrees with the operands (A {caller['A'].major}-major, "
                           f"B {caller['B'].major}-major: {letters!r})")
        # schedule node clusterk: the smem tensor its ranks' partial sums meet in (reduce_buffer)
        ctx["sR"] = p.tensor(p.schedule.reduce_buffer) if p.schedule.decomposition == "clusterk" else None
        if ctx["sR"] is not None and (ctx["sR"].space != "smem" or ctx["sR"].dtype != "fp32"):
            raise KeyError(f"reduce_buffer {ctx['sR'].name!r} is a {ctx['sR'].space} {ctx['sR'].dtype} tensor where "
                           "the cluster-K reduction writes fp32 partial sums to smem")
        for t in ("sA", "sB", "sD"):
            if ctx[t].space != "smem":
                raise KeyError(f"{ctx[t].name!r} is a {ctx[t].space} tensor where the kernel stages in smem")
        if ctx["acc"].space != "rmem":
            raise KeyError(f"the accumulator {mma.acc!r} is not a register tensor")
    except (KeyError, IndexError, AttributeError, TypeError) as exc:
        raise ConfigError("render.program", f"the GEMM template cannot print program {p.name!r}: {exc}") from None
    try:
        ctx["enc"] = {
            "desc_a": descriptor_plan(ra, mma.atoms_m, mma.reps_m),
            "desc_b": descriptor_plan(rb),
            "tma_swizzle": TMA_SWIZZLE,
            "oob_fill": OOB_FILL,
            "l2": L2_PROMOTION,
            "staging_layout": _staging_layout(p.staging.view, p.tensor(p.staging.dst).dtype),
        }
        for copy in (la.copy, lb.copy, st.copy):
            if copy.swizzle_bytes not in TMA_SWIZZLE or copy.l2_promotion not in L2_PROMOTION:
                raise ValueError(f"TMA copy swizzle {copy.swizzle_bytes} / L2 promotion {copy.l2_promotion} has no "
                                 "tensor-map encoding")
    except (DescriptorError, LayoutError, KeyError, ValueError, AttributeError, TypeError) as exc:
        raise ConfigError("render.program", f"no hardware encoding for a node of {p.name!r}: {exc}") from None
    order = ctx["order"]
    try:
        if order is not None:
            rows = {point: row for point, row in zip(order.points, order.barriers)}
            ctx["order_rows"] = [[p.barrier(b) for b in rows[point]] for point in ("mainloop", "epilogue")]
            ctx["bar_epi1"] = p.barrier(stg.barrier + ".1")
    except KeyError as exc:
        raise ConfigError("render.program", f"turn order {order.name!r}: {exc.args[0]}") from None
    ctx["relations"] = relation_lines(p)
    # the any-alignment path: the StageCopy nodes (templates/gemm/stage.j2), by the argument they stage
    layout = p.param("layout")
    ctx["copies"] = list(p.stage_copies)
    ctx["staged"] = [c.operand for c in p.stage_copies]
    ctx["staged_node"] = {c.operand: c for c in p.stage_copies}
    ctx["staged_mask"] = sum(1 << "ABCD".index(c.operand) for c in {c.operand: c for c in p.stage_copies}.values())
    ctx["storage"] = {"A": ("M", "K") if layout[0] == "t" else ("K", "M"),
                      "B": ("N", "K") if layout[1] == "n" else ("K", "N"), "D": ("M", "N")}
    return ctx


def render_gemm(program: Program, verified: tuple[str, ...] = ()) -> str:
    """The self-contained ``.cu`` source of ``program``; ``verified`` lists the proved invariants
    (written into the file's header).

    Raises:
        ConfigError: ``render.program`` when the template cannot print the program (see
            :func:`gemm_context`); never another exception for a program it is given.
    """
    return render_template(GEMM_TEMPLATE, gemm_context(program, verified), "GEMM", program.name)
