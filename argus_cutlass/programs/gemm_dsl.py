"""The SM90 GEMM mainloop written in the DSL, for the verifier.

:func:`gemm_dsl_program` states, for one :class:`~argus_cutlass.programs.gemm.GemmProgram`:

* the gmem operands ``gA`` (tag ``A:(m,k)``) and ``gB`` (tag ``B:(n,k)``);
* the smem stage buffers ``sA``/``sB`` ((MN, K, stage), CuTe ``tile_to_shape`` of the
  GMMA atom; byte offsets follow CUTLASS's ``SharedStorage`` order: barriers, C, D, A, B);
* the TMA loads into them (tag function: gmem coordinate and producer iteration -> stage);
* the GMMA operand reads, each through its own smem layout object (normally the buffer's);
* the tag assertion of invariant G1: ``A.k == B.k`` at every MMA slot;
* the mbarrier pipeline between the TMA producer and the GMMA consumers (invariant G6),
  from :class:`~argus_cutlass.programs.gemm.PipelinePlan`;
* the k loop: ``ceil_div(K, tile_k)`` k-tiles of ``tile_k / 16`` GMMA k-blocks, TMA zero
  fill past K (invariant G3).
"""

from __future__ import annotations

from typing import Any

from argus_cutlass.dsl.ir import DslProgram, PipelineSide, ProgramBuilder, Tag
from argus_cutlass.layout.gmma import smem_layout
from argus_cutlass.plan.resources import smem_placement
from argus_cutlass.programs.gemm import GemmProgram, OperandPlan


def smem_offsets(program: GemmProgram) -> dict[str, int]:
    """Byte offset of each smem buffer (``C``, ``D``, ``A``, ``B``) in the CTA's shared memory,
    from the resource model's layout walk (:func:`argus_cutlass.plan.resources.smem_placement`)."""
    return smem_placement(program)[0]


#: CuTe register -> smem copy ops of the epilogue -> (PTX instruction, matrices, .trans)
_R2S_OPS = {
    "cute::SM90_U32x4_STSM_N": ("stmatrix", 4, False),
    "cute::SM90_U32x2_STSM_N": ("stmatrix", 2, False),
    "cute::SM90_U32x1_STSM_N": ("stmatrix", 1, False),
    "cute::SM90_U16x8_STSM_T": ("stmatrix", 4, True),
    "cute::SM90_U16x4_STSM_T": ("stmatrix", 2, True),
    "cute::SM90_U16x2_STSM_T": ("stmatrix", 1, True),
}


def r2s_instruction(copy_op: str) -> tuple[str, int, bool]:
    """The PTX store behind the epilogue's CuTe copy op ``copy_op``: ``(op, num, trans)``.

    CuTe ``cute/arch/copy_sm90.hpp``: ``SM90_U32x{1,2,4}_STSM_N`` is
    ``stmatrix.sync.aligned.x{1,2,4}.m8n8.shared.b16``, ``SM90_U16x{2,4,8}_STSM_T`` the same
    with ``.trans``; any other op (``AutoVectorizingCopy...``, 32-bit outputs) stores each
    element at its own address (``st.shared``).
    """
    return _R2S_OPS.get(copy_op, ("st.shared", 1, False))


def gemm_dsl_program(program: GemmProgram, *, mma_atoms: dict[str, Any] | None = None) -> DslProgram:
    """The mainloop of ``program`` as a :class:`DslProgram`.

    Args:
        program: the instantiated GEMM.
        mma_atoms: optional ``{"A"|"B": GmmaSmemAtom}`` giving the MMA side a different smem
            atom than the buffer (models a descriptor/TMA mismatch; the verifier must reject it).

    Raises:
        argus_cutlass.layout.LayoutError: an operand tile is not a multiple of its smem atom.
    """
    cfg = program.config
    stages = program.pipeline.stages
    offsets = smem_offsets(program)
    b = ProgramBuilder(f"gemm_{cfg.layout}_{cfg.tile_m}x{cfg.tile_n}x{cfg.tile_k}", stages)
    stage_tag = Tag("stage", ("iter",))
    g = {
        "A": b.tensor("gA", "gmem", (cfg.tile_m, cfg.tile_k), cfg.dtype, tag=Tag("A", ("m", "k"))),
        "B": b.tensor("gB", "gmem", (cfg.tile_n, cfg.tile_k), cfg.dtype, tag=Tag("B", ("n", "k"))),
    }
    smem = {}
    for op in (program.a, program.b):
        smem[op.name] = b.tensor(
            f"s{op.name}", "smem", (op.tile_mn, op.tile_k, stages), cfg.dtype,
            layout=smem_layout(op, stages), base_bytes=offsets[op.name],
            swizzle_bytes=op.smem_atom.swizzle_bytes,
        )
    cluster = (cfg.cluster_m, cfg.cluster_n)
    # A is shared by the CTAs of a cluster row (same m, cluster_n of them), B by a cluster column
    load_a = b.tma_load(g["A"], smem["A"], program.a.tma, major=program.a.major,
                        tile_mn=program.a.tile_mn, tile_k=program.a.tile_k, stage_tag=stage_tag,
                        cluster=cluster, share_axis="n" if program.a.tma.multicast > 1 else "")
    load_b = b.tma_load(g["B"], smem["B"], program.b.tma, major=program.b.major,
                        tile_mn=program.b.tile_mn, tile_k=program.b.tile_k, stage_tag=stage_tag,
                        cluster=cluster, share_axis="m" if program.b.tma.multicast > 1 else "")
    pipe = program.pipeline
    readers = cfg.cluster_m + cfg.cluster_n - 1  # CTAs reading a stage's multicast data
    b.pipeline((load_a, load_b), tx_bytes=pipe.tx_bytes, producer_arrivals=pipe.producer_arrivals,
               consumer_arrivals=pipe.consumer_arrivals,
               consumer_arrivers=cfg.consumer_warpgroups * readers,
               producer=PipelineSide(pipe.producer_start_phase, pipe.stages),
               consumer=PipelineSide(pipe.consumer_start_phase, pipe.stages))
    overrides = mma_atoms or {}
    mma = program.tiled_mma
    layout_a = smem["A"].layout if "A" not in overrides else smem_layout(program.a, stages, overrides["A"])
    layout_b = smem["B"].layout if "B" not in overrides else smem_layout(program.b, stages, overrides["B"])
    b.mma_read("A", smem["A"], layout_a, mma.op, tile_mn=cfg.tile_m, tile_k=cfg.tile_k,
               warpgroups=mma.atoms_m)
    b.mma_read("B", smem["B"], layout_b, mma.op, tile_mn=cfg.tile_n, tile_k=cfg.tile_k,
               warpgroups=mma.atoms_n)
    b.k_loop(tile_k=cfg.tile_k, block_k=mma.op.k, k_blocks=cfg.tile_k // mma.op.k)
    b.epilogue_store(tile_m=cfg.tile_m, tile_n=cfg.tile_n, op=mma.op, warpgroups=mma.atoms_m,
                     d_major=program.epilogue.d_major)
    e = program.epilogue
    d_stages = e.stages_c if e.reuse_smem_c else e.stages_d  # CUTLASS SmemLayoutD's stage count
    d_plan = OperandPlan("D", "K" if e.d_major == "N" else "MN", e.epi_m, e.epi_n, e.smem_atom_d, e.tma_store_d, 1)
    s_d = b.tensor("sD", "smem", (e.epi_m, e.epi_n, d_stages), cfg.out_dtype, layout=smem_layout(d_plan, d_stages),
                   base_bytes=offsets["D"], swizzle_bytes=e.smem_atom_d.swizzle_bytes)
    g_d = b.tensor("gD", "gmem", (e.epi_m, e.epi_n), cfg.out_dtype, tag=Tag("D", ("m", "n")))
    op, num, trans = r2s_instruction(e.copy_r2s)
    # CUTLASS PipelineTmaStore<StagesC, StagesD - 1> (smem reuse) / <StagesD>: producer_acquire waits
    # until at most StagesD - 1 committed TMA stores are in flight
    b.smem_stage("accum", s_d, op=op, num=num, trans=trans, store_wait=max(e.stages_d - 1, 0))
    b.tma_store(s_d, g_d, e.tma_store_d, major=d_plan.major, tile_mn=e.epi_m, tile_k=e.epi_n)
    b.tile_schedule(raster=cfg.raster, swizzle=cfg.swizzle, decomposition=cfg.scheduler, cluster_m=cfg.cluster_m,
                    cluster_n=cfg.cluster_n, splits=cfg.splits)
    b.assert_tags("mainloop.gemm", ("A", "k"), "==", ("B", "k"), invariant="G1",
                  rule="mma.k_agreement")
    return b.build()
