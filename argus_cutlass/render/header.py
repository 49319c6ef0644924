"""The ``.h`` beside every generated ``.cu``: its ``extern "C"`` exports, every argument, the return codes.

One header per kernel file (``templates/headers/<family>.h.j2``), plain C and C++, so that a project can
vendor the pair (``<name>.cu`` + ``<name>.h``) and call the entry without copying a declaration out of
a comment. The return-code tables here are the ones the templates' ``enum ErrorCode`` print (a unit test
parses the rendered ``.cu`` and compares); code 9 is the architecture guard of every family
(``templates/common/arch_guard.j2``).

>>> from argus_cutlass.kernels.gemm.config import GemmConfig
>>> from argus_cutlass.kernels.gemm.program import build_program
>>> program = build_program(GemmConfig(layout="nt"))
>>> h = render_header(program)
>>> f"int {program.kernel_name()}(const void* A" in h and "_ERR_ARCH 9" in h
True
"""

from __future__ import annotations

from typing import Any

from argus_cutlass import __version__
from argus_cutlass.dsl.atoms import CPP_TYPE
from argus_cutlass.dsl.ir import DTYPE_BYTES
from argus_cutlass.errors import ConfigError

#: the architecture guard's return code, the same in every family
ARCH_ERROR = (9, "ARCH", "the current device has no sm_90a image of this file: it needs an sm_90 GPU "
              "(H100/H200) and a build with -gencode arch=compute_90a,code=sm_90a")

#: family -> ((code, macro suffix, meaning), ...): the ``kErr*`` enumerators of the family's template
ERROR_CODES: dict[str, tuple[tuple[int, str, str], ...]] = {
    "gemm": (
        (1, "SIZE", "M, N or K < 1"),
        (2, "NULL_C", "C is NULL but beta != 0"),
        (3, "K_RANGE", "K at or beyond the range the k-loop proofs hold for (regenerate for this K)"),
        (4, "ALIGN", "A, B or D is not 16-byte aligned (TMA global address rule; a staged operand needs only "
                     "element alignment), or C is not aligned to its element"),
        (5, "STRIDE", "a leading dimension times the element size is not a multiple of 16 bytes (TMA rule; not "
                      "checked for staged operands)"),
        (6, "TENSOR_MAP", "cuTensorMapEncodeTiled is unavailable or refused a tensor map"),
        (7, "ATTRIBUTE", "cudaFuncSetAttribute or the cluster occupancy query failed"),
        (8, "LD", "a leading dimension is smaller than its operand's contiguous extent"),
        ARCH_ERROR,
        (10, "NULL", "A, B or D is NULL"),
        (11, "ITER_SPACE", "stream-K / split-K only: output tiles x k-tiles >= 2^32 (CUTLASS's scheduler counts k-tile "
                           "positions in 32 bits)"),
    ),
    "attention": (
        (1, "SIZE", "batch, heads, kv_heads or a length < 1, or softmax_scale not finite and > 0"),
        (2, "HEADS", "heads is not a multiple of kv_heads"),
        (3, "ALIGN", "a pointer or a stride breaks TMA's 16-byte rule"),
        (4, "TENSOR_MAP", "cuTensorMapEncodeTiled is unavailable or refused a tensor map"),
        (5, "ATTRIBUTE", "cudaFuncSetAttribute or the occupancy query failed"),
        (6, "VARLEN", "a varlen kernel without cu_seqlens, or a fixed-length kernel given cu_seqlens"),
        (7, "RANGE", "a length at or beyond the range the mask proofs hold for"),
        ARCH_ERROR,
    ),
    "moe": (
        (1, "TOKENS", "T outside [1, 2^tokens_bits] (the range the index proofs hold for)"),
        (2, "WORKSPACE", "workspace is NULL, not {workspace_align}-byte aligned or smaller than workspace_bytes(T)"),
        (3, "ALIGN", "x, w13, w2 or y is not 16-byte aligned"),
        ARCH_ERROR,
        (10, "GATE_UP", "the gate+up grouped GEMM refused its launch (tensor map or attribute)"),
        (11, "DOWN", "the down grouped GEMM refused its launch (tensor map or attribute)"),
    ),
}

_LAYOUT_A = {
    "t": ("row-major M x K (K contiguous): element (m, k) at A[m * lda + k]", "row pitch of A, >= K"),
    "n": ("column-major M x K (M contiguous; stored K x M): element (m, k) at A[k * lda + m]",
          "column pitch of A, >= M"),
}
_LAYOUT_B = {
    "n": ("K x N stored N x K row-major (K contiguous): element (k, n) at B[n * ldb + k]", "row pitch of the N x K storage, >= K"),
    "t": ("row-major K x N (N contiguous): element (k, n) at B[k * ldb + n]", "row pitch of B, >= N"),
}


def _common(name: str, family: str, fingerprint: str) -> dict[str, Any]:
    return {"name": name, "NAME": name.upper(), "family": family, "version": __version__,
            "fingerprint": fingerprint[:16],
            "codes": [c for c in ERROR_CODES[family]]}


def header_context(program: Any) -> dict[str, Any]:
    """The template variables of the header of ``program`` (a GEMM / attention Program or an MoE layer).

    Raises:
        ConfigError: ``render.program`` for a program of no known family.
    """
    family = getattr(program, "family", None) or "gemm"  # Program.family; the MoE layer's is "moe"
    ctx = _common(program.kernel_name(), family, program.fingerprint())
    if family == "gemm":
        from argus_cutlass.render.gemm import gemm_context

        g = gemm_context(program)
        layout = g["p"].param("layout")
        a_doc, lda_doc = _LAYOUT_A[layout[0]]
        b_doc, ldb_doc = _LAYOUT_B[layout[1]]
        in_dt, out_dt = g["gA"].dtype, g["gD"].dtype
        ctx.update(in_dtype=in_dt, out_dtype=out_dt, in_ctype=CPP_TYPE[in_dt], out_ctype=CPP_TYPE[out_dt],
                   layout=layout, a_doc=a_doc, b_doc=b_doc, lda_doc=lda_doc, ldb_doc=ldb_doc,
                   k_bound_bits=g["loop"].bound_bits, in_align=16 // DTYPE_BYTES[in_dt],
                   out_align=16 // DTYPE_BYTES[out_dt],
                   contiguous=f"{'K' if layout[0] == 't' else 'M'} of A, {'K' if layout[1] == 'n' else 'N'} of B, "
                              "N of C and D",
                   copies=g["copies"], staged=g["staged"], staged_mask=g["staged_mask"],
                   contiguous_of={"A": f"{'K' if layout[0] == 't' else 'M'} of A",
                                  "B": f"{'K' if layout[1] == 'n' else 'N'} of B", "D": "N of D"})
        return ctx
    if family == "attention":
        from argus_cutlass.render.attention import attention_context

        a = attention_context(program)
        dt = a["q"].dtype if "q" in a else program.param("dtype")
        ctx.update(dtype=dt, ctype=CPP_TYPE[dt], head_dim=a["D"], causal=bool(a["mask"].causal),
                   varlen=a["varlen"], length_bits=a["kv_loop"].bound_bits, align=16 // 2)
        return ctx
    if family == "moe":
        ctx.update(dtype=program.dtype, ctype=CPP_TYPE[program.dtype], experts=program.experts, topk=program.topk,
                   hidden=program.hidden, ffn=program.ffn, tokens_bits=program.tokens_bits,
                   workspace_align=program.workspace.align)
        # the workspace's alignment is the layer's Workspace node's (rule moe.workspace), not a header constant
        ctx["codes"] = [(c, m, t.format(workspace_align=program.workspace.align)) for c, m, t in ctx["codes"]]
        return ctx
    raise ConfigError("render.program", f"no header template for family {family!r}")


def render_header(program: Any) -> str:
    """The ``<name>.h`` text of ``program`` (see the module docstring).

    Raises:
        ConfigError: ``render.program`` when the template cannot print it.
    """
    from argus_cutlass.render.env import render_template

    ctx = header_context(program)
    return render_template(f"headers/{ctx['family']}.h.j2", ctx, ctx["family"], ctx["name"])
