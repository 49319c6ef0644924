"""The tile DSL: hardware atoms, the frozen program model (:mod:`.ir`) and its builder."""

from __future__ import annotations

from argus_cutlass.dsl.atoms import (
    GmmaOp,
    GmmaSmemAtom,
    Swizzle,
    TiledMma,
    TmaCopy,
    select_smem_atom,
)
from argus_cutlass.dsl.builder import ProgramBuilder
from argus_cutlass.dsl.ir import (
    DslProgram,
    MmaRead,
    PipelineSide,
    Program,
    SmemView,
    SourceLoc,
    Tag,
    TagAssertion,
    Tensor,
    TmaLoad,
    caller_loc,
)

__all__ = [
    "DslProgram", "GmmaOp", "GmmaSmemAtom", "MmaRead", "PipelineSide", "Program", "ProgramBuilder", "SmemView",
    "SourceLoc", "Swizzle", "Tag", "TagAssertion", "Tensor", "TiledMma", "TmaCopy", "TmaLoad", "caller_loc",
    "select_smem_atom",
]
