"""The tile DSL: hardware atoms and the frozen IR (tensors, tags, tag functions, assertions)."""

from __future__ import annotations

from argus_cutlass.dsl.atoms import (
    GmmaOp,
    GmmaSmemAtom,
    Swizzle,
    TiledMma,
    TmaCopy,
    select_smem_atom,
)
from argus_cutlass.dsl.ir import (
    DslProgram,
    MmaRead,
    ProgramBuilder,
    SourceLoc,
    Tag,
    TagAssertion,
    Tensor,
    TmaLoad,
    caller_loc,
)

__all__ = [
    "DslProgram", "GmmaOp", "GmmaSmemAtom", "MmaRead", "ProgramBuilder", "SourceLoc", "Swizzle",
    "Tag", "TagAssertion", "Tensor", "TiledMma", "TmaCopy", "TmaLoad", "caller_loc",
    "select_smem_atom",
]
