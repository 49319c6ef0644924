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
from argus_cutlass.render.env import template_environment

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


def _relations(program: Program) -> list[dict]:
    """The program's relation nodes as static_assert lines (numeric relations and smem disjointness)."""
    out = []
    for r in program.relations:
        try:
            lhs, rhs = program.resolve(r.lhs), program.resolve(r.rhs)
        except KeyError:
            continue  # the verifier reports it (dsl.unknown_ref); nothing to print
        if r.relation == "disjoint":
            a0, b0 = lhs.base_bytes, rhs.base_bytes
            a1, b1 = a0 + lhs.size_bytes, b0 + rhs.size_bytes
            out.append({"lhs_value": f"({a1} <= {b0} || {b1} <= {a0})", "op": "==", "rhs_value": "true",
                        "invariant": r.invariant, "rule": r.rule, "text": str(r)})
        elif r.relation in _CMP and all(isinstance(v, int) and not isinstance(v, bool) for v in (lhs, rhs)):
            out.append({"lhs_value": lhs, "op": _CMP[r.relation], "rhs_value": rhs, "invariant": r.invariant,
                        "rule": r.rule, "text": str(r)})
        elif r.relation == "divides" and all(isinstance(v, int) for v in (lhs, rhs)):
            out.append({"lhs_value": f"({rhs} % {lhs})", "op": "==", "rhs_value": 0, "invariant": r.invariant,
                        "rule": r.rule, "text": str(r)})
    return out


def gemm_context(program: Program, verified: tuple[str, ...] = ()) -> dict:
    """The template variables of ``program`` (exposed for golden tests).

    Raises:
        ConfigError: ``render.program`` when the program lacks a node the GEMM template prints,
            or a read's view has no GMMA descriptor (the verifier rejects such programs first).
    """
    from argus_cutlass.layout.gmma_desc import DescriptorError, descriptor_plan

    p = program
    try:
        mma = p.mma
        ra, rb = p.read("A"), p.read("B")
        la, lb = p.load_into(ra.src), p.load_into(rb.src)
        ctx = {
            "name": p.kernel_name(), "version": __version__, "verified": list(verified), "p": p,
            "fingerprint": p.fingerprint()[:16], "cpp": CPP_TYPE,
            "gA": p.tensor(la.src), "gB": p.tensor(lb.src), "gC": p.tensor(p.source.src), "gD": p.tensor(p.stores[0].dst),
            "sA": p.tensor(la.dst), "sB": p.tensor(lb.dst), "sD": p.tensor(p.staging.dst), "acc": p.tensor(mma.acc),
            "la": la, "lb": lb, "ra": ra, "rb": rb, "mma": mma, "pipe": p.pipeline, "loop": p.kloop,
            "st": p.stores[0], "stg": p.staging, "epi": p.epilogue, "src": p.source, "sched": p.schedule,
            "launch": p.launch, "producer": p.role("producer"), "consumer": p.role("consumer"),
            "bar_epi": p.barrier(p.staging.barrier), "order": p.orders[0] if p.orders else None,
        }
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
    except DescriptorError as exc:
        raise ConfigError("render.program", f"no GMMA descriptor for a read of {p.name!r}: {exc}") from None
    order = ctx["order"]
    if order is not None:
        ctx["order_ids"] = [[p.barrier(b).id for b in row] for row in order.barriers]
        ctx["order_threads"] = p.barrier(order.barriers[0][0]).threads
    ctx["relations"] = _relations(p)
    return ctx


def render_gemm(program: Program, verified: tuple[str, ...] = ()) -> str:
    """The self-contained ``.cu`` source of ``program``; ``verified`` lists the proved invariants
    (written into the file's header).

    Raises:
        ConfigError: see :func:`gemm_context`.
    """
    return template_environment().get_template(GEMM_TEMPLATE).render(**gemm_context(program, verified))
