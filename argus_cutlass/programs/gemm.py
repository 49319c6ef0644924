"""The SM90 GEMM program: every hardware object one configuration instantiates.

:func:`build_gemm_program` turns a :class:`~argus_cutlass.kernels.gemm.config.GemmConfig`
into a :class:`GemmProgram`: smem layout atoms, TMA copies, the tiled GMMA, the
mainloop pipeline and the epilogue. The verifier checks this object and the
renderer prints it; nothing downstream re-derives a choice.

Shapes are by mode (M, N, K) of the *kernel*: A is (M, K), B is (N, K), D and C are
(M, N), row-major (N contiguous), or column-major under swap-AB, where the kernel's
(M, N) is the problem's (N, M) and its A the problem's B.
"""

from __future__ import annotations

from dataclasses import dataclass

from argus_cutlass.dsl.atoms import (
    GmmaOp,
    GmmaSmemAtom,
    TiledMma,
    TmaCopy,
    select_smem_atom,
)
from argus_cutlass.kernels.gemm.config import DTYPE_BYTES, GemmConfig


@dataclass(frozen=True)
class OperandPlan:
    """How one mainloop operand (A or B) travels gmem -> smem -> GMMA."""

    name: str  # "A" or "B"
    major: str  # "K" or "MN"
    tile_mn: int
    tile_k: int
    smem_atom: GmmaSmemAtom
    tma: TmaCopy
    #: TMA boxes issued per stage per CTA
    boxes_per_stage: int

    @property
    def stage_bytes(self) -> int:
        return self.tile_mn * self.tile_k * self.smem_atom.elem_bits // 8


@dataclass(frozen=True)
class PipelinePlan:
    """The mainloop mbarrier pipeline (CUTLASS ``PipelineTmaAsync``).

    One *full* barrier per stage (producer arrives once with ``expect_tx`` of
    ``tx_bytes``, TMA completes the bytes) and one *empty* barrier per stage
    (every consumer warpgroup of every CTA that reads the stage's multicast data
    arrives). Phases start at 0 for the consumer and 1 for the producer's first pass.
    """

    stages: int
    tx_bytes: int
    producer_arrivals: int
    consumer_arrivals: int
    producer_start_phase: int = 1
    consumer_start_phase: int = 0


@dataclass(frozen=True)
class EpiloguePlan:
    """The TMA warp-specialized epilogue (``cutlass::epilogue::Sm90TmaWarpSpecialized``).

    ``d_major`` is the contiguous mode of C and D in the kernel's (M, N): ``"N"``
    (row-major) or ``"M"`` (column-major, swap-AB).
    """

    d_major: str
    epi_m: int
    epi_n: int
    stages_c: int
    stages_d: int
    fragment_size: int
    reuse_smem_c: bool
    delay_tma_store: bool
    smem_atom_c: GmmaSmemAtom
    smem_atom_d: GmmaSmemAtom
    copy_r2s: str  # CuTe copy op storing accumulators to smem
    copy_s2r: str  # CuTe copy op loading C from smem
    copy_atom_c: str  # Copy_Atom used to retile accumulators
    tma_load_c: TmaCopy
    tma_store_d: TmaCopy


@dataclass(frozen=True)
class GemmProgram:
    """Everything the verifier checks and the renderer prints for one config."""

    config: GemmConfig
    a: OperandPlan
    b: OperandPlan
    tiled_mma: TiledMma
    pipeline: PipelinePlan
    epilogue: EpiloguePlan

    @property
    def epi_subtiles(self) -> int:
        c = self.config
        return (c.tile_m // c.epi_m) * (c.tile_n // c.epi_n)


def _operand(name: str, k_major: bool, tile_mn: int, tile_k: int, elem_bits: int,
             multicast: int) -> OperandPlan:
    major = "K" if k_major else "MN"
    atom = select_smem_atom(major, elem_bits, tile_mn, tile_k)
    contiguous = atom.contiguous_elems
    if k_major:
        inner = min(contiguous, tile_k)
        outer = tile_mn // multicast if tile_mn % multicast == 0 else tile_mn
        boxes = max(1, tile_k // inner)
    else:
        inner = min(contiguous, tile_mn // multicast if tile_mn % multicast == 0 else tile_mn)
        outer = tile_k
        boxes = max(1, (tile_mn // multicast) // inner) if tile_mn % multicast == 0 else 1
    kind = "load_multicast" if multicast > 1 else "load"
    tma = TmaCopy(kind, (inner, outer), elem_bits, atom.swizzle_bytes, multicast)
    return OperandPlan(name, major, tile_mn, tile_k, atom, tma, boxes)


def _epilogue(cfg: GemmConfig) -> EpiloguePlan:
    # Mirrors the documented policy of CUTLASS's sm90 TMA epilogue builder,
    # written out so that the template receives concrete values.
    out_bits = DTYPE_BYTES[cfg.out_dtype] * 8
    epi_tiles = (cfg.tile_m // max(cfg.epi_m, 1)) * (cfg.tile_n // max(cfg.epi_n, 1))
    threads = 256 if cfg.schedule == "cooperative" else 128
    fragment = (cfg.epi_m * cfg.epi_n) // threads
    reuse = out_bits > 8  # C and D share one dtype here
    stages_d = min(epi_tiles, 2)
    stages_c = max(min(epi_tiles, 4), stages_d + 1) if reuse else min(epi_tiles, 4)
    m_major = cfg.swap_ab  # D^T through D's row-major storage is column-major
    # CUTLASS sm90_get_epilogue_smem_swizzle_layout_atom: an MN-major GMMA atom for
    # column-major C/D, a K-major one (N contiguous) for row-major.
    atom = select_smem_atom("MN" if m_major else "K", out_bits, cfg.epi_m, cfg.epi_n)
    if out_bits == 16:
        # sm90_get_smem_store_op_for_accumulator: transposing stmatrix for column-major D
        wide = cfg.epi_n % 16 == 0
        if m_major:
            r2s, s2r = (("cute::SM90_U16x8_STSM_T", "cute::SM75_U16x8_LDSM_T") if wide
                        else ("cute::SM90_U16x4_STSM_T", "cute::SM75_U16x4_LDSM_T"))
        else:
            r2s, s2r = (("cute::SM90_U32x4_STSM_N", "cute::SM75_U32x4_LDSM_N") if wide
                        else ("cute::SM90_U32x2_STSM_N", "cute::SM75_U32x2_LDSM_N"))
    else:
        r2s = "cute::AutoVectorizingCopyWithAssumedAlignment<128>"
        s2r = "cute::AutoVectorizingCopyWithAssumedAlignment<128>"
    copy_atom_c = (
        "cute::Copy_Atom<cute::SM90_U32x4_STSM_N, cutlass::half_t>"
        if cfg.epi_n % 16 == 0
        else "cute::Copy_Atom<cute::SM90_U32x2_STSM_N, cutlass::half_t>"
    )
    if m_major:
        box = (min(atom.contiguous_elems, cfg.epi_m), cfg.epi_n)
    else:
        box = (min(atom.contiguous_elems, cfg.epi_n), cfg.epi_m)
    tma_c = TmaCopy("load", box, out_bits, atom.swizzle_bytes)
    tma_d = TmaCopy("store", box, out_bits, atom.swizzle_bytes)
    return EpiloguePlan(
        d_major="M" if m_major else "N", epi_m=cfg.epi_m, epi_n=cfg.epi_n, stages_c=stages_c, stages_d=stages_d,
        fragment_size=fragment, reuse_smem_c=reuse, delay_tma_store=False,
        smem_atom_c=atom, smem_atom_d=atom, copy_r2s=r2s, copy_s2r=s2r,
        copy_atom_c=copy_atom_c, tma_load_c=tma_c, tma_store_d=tma_d,
    )


def build_gemm_program(cfg: GemmConfig) -> GemmProgram:
    """Instantiate the hardware objects of ``cfg`` (no checking; see ``verify_gemm``).

    Raises:
        argus_cutlass.errors.ConfigError: the config cannot even be instantiated
            (e.g. an operand tile whose contiguous extent is not 16-byte divisible).
    """
    from argus_cutlass.errors import ConfigError

    elem_bits = DTYPE_BYTES[cfg.dtype] * 8
    try:
        a_k, b_k = cfg.kernel_k_majors
        a = _operand("A", a_k, cfg.tile_m, cfg.tile_k, elem_bits, cfg.cluster_n)
        b = _operand("B", b_k, cfg.tile_n, cfg.tile_k, elem_bits, cfg.cluster_m)
        epi = _epilogue(cfg)
    except ValueError as exc:
        raise ConfigError("smem.atom", str(exc)) from None
    atoms_m = 2 if cfg.schedule == "cooperative" else 1
    op = GmmaOp(64, cfg.tile_n, 16, cfg.dtype, a.major, b.major)
    tiled = TiledMma(op, atoms_m, 1)
    consumer_arrivals = (cfg.cluster_m + cfg.cluster_n - 1) * 2  # both consumer WGs of every reader CTA
    pipe = PipelinePlan(
        stages=cfg.stages,
        tx_bytes=a.stage_bytes + b.stage_bytes,
        producer_arrivals=1,
        consumer_arrivals=consumer_arrivals,
    )
    return GemmProgram(cfg, a, b, tiled, pipe, epi)
