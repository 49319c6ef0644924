"""Resource model of one GEMM program: shared memory and registers.

Units: bytes for memory, 32-bit registers per thread for registers.

Sources: CUDA C++ Programming Guide, "Compute capabilities" table (sm_90: 227 KiB
= 232448 bytes of shared memory per block, 64K registers per SM, 255 per thread);
CUTLASS ``sm90_gemm_tma_warpspecialized_cooperative.hpp`` (the ``SharedStorage``
layout: epilogue and mainloop tensors, then pipeline barriers) and
``cutlass/detail/layout.hpp::alignment_for_swizzle`` (1024 bytes for a 128-byte swizzle).
"""

from __future__ import annotations

from dataclasses import dataclass

from argus_cutlass.kernels.gemm.config import DTYPE_BYTES

#: sm_90 opt-in dynamic shared memory per block (bytes)
SMEM_LIMIT_BYTES = 232448
#: registers per consumer thread after CUTLASS's setmaxnreg split (2 consumer warpgroups)
CONSUMER_REGISTERS = 232


def _round_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def swizzle_alignment(swizzle_bytes: int) -> int:
    """Base-address alignment a swizzled smem buffer needs (bytes).

    The swizzle pattern repeats every 8 rows of ``swizzle_bytes``; GMMA descriptors
    and TMA assume the pattern starts at an address multiple of that period
    (PTX ISA 9.7.15.5.1, matrix descriptor "base offset" = 0).
    """
    return max(128, 8 * swizzle_bytes)


@dataclass(frozen=True)
class SmemBreakdown:
    """Shared-memory bytes of one CTA, by buffer, including alignment padding."""

    a: int
    b: int
    c: int
    d: int
    barriers: int
    padding: int

    @property
    def total(self) -> int:
        return self.a + self.b + self.c + self.d + self.barriers + self.padding

    def describe(self) -> str:
        return (
            f"A {self.a} + B {self.b} + C {self.c} + D {self.d} + barriers {self.barriers}"
            f" + padding {self.padding} = {self.total} bytes"
        )


def smem_placement(program) -> tuple[dict[str, int], SmemBreakdown]:  # noqa: ANN001 - GemmProgram (import cycle)
    """Byte offset of each smem buffer and the CTA's total, from one walk of the layout.

    Barriers come first (full + empty mbarrier per mainloop stage and per epilogue
    C stage, plus the scheduler and load-order barriers), then the buffers in order
    (epilogue C, D, then mainloop A, B), each at its swizzle alignment.

    Returns:
        ``({"C", "D", "A", "B"} -> byte offset, breakdown)``. When the epilogue reuses C's
        buffer for D, ``D`` is ``C``'s offset.
    """
    cfg = program.config
    e = program.epilogue
    out_b = DTYPE_BYTES[cfg.out_dtype]
    stages = program.pipeline.stages
    a_bytes = program.a.stage_bytes * stages
    b_bytes = program.b.stage_bytes * stages
    c_bytes = e.epi_m * e.epi_n * out_b * e.stages_c
    d_bytes = 0 if e.reuse_smem_c else e.epi_m * e.epi_n * out_b * e.stages_d
    barriers = 16 * stages + 16 * e.stages_c + 64
    # CUTLASS 4.2 GemmUniversal SharedStorage: the pipeline barriers, then TensorStorage =
    # {epilogue TensorStorage, mainloop TensorStorage}. The epilogue's TensorStorage is its
    # C/D buffers followed by the fusion callbacks' storage, which is an empty struct for
    # LinearCombination and so still occupies one byte; the struct is rounded up to its
    # alignment (the C/D swizzle alignment), which costs one whole alignment period after
    # the C/D buffers (measured with sizeof(SharedStorage): a 64x16 column-major bf16
    # epilogue, and every fp32-output config).
    epi_align = max(swizzle_alignment(e.smem_atom_c.swizzle_bytes), swizzle_alignment(e.smem_atom_d.swizzle_bytes))
    fusion = 1
    offset = barriers  # CUTLASS places the pipeline barriers before the tensors
    padding = 0
    offsets: dict[str, int] = {}
    for name, size, align in (
        ("C", c_bytes, swizzle_alignment(e.smem_atom_c.swizzle_bytes)),
        ("D", d_bytes, swizzle_alignment(e.smem_atom_d.swizzle_bytes)),
        ("", fusion, 1),
        ("", -1, epi_align),  # end of the epilogue's TensorStorage
        ("A", a_bytes, swizzle_alignment(program.a.smem_atom.swizzle_bytes)),
        ("B", b_bytes, swizzle_alignment(program.b.smem_atom.swizzle_bytes)),
    ):
        if size == 0:
            continue
        aligned = _round_up(offset, align)
        padding += aligned - offset
        if name:
            offsets[name] = aligned
        offset = aligned + max(size, 0)
    padding += _round_up(offset, 16) - offset
    offsets.setdefault("D", offsets["C"])  # ReuseSmemC: D is staged in C's buffer
    return offsets, SmemBreakdown(a_bytes, b_bytes, c_bytes, d_bytes, barriers, padding + fusion)


def smem_bytes(program) -> SmemBreakdown:  # noqa: ANN001 - GemmProgram (import cycle)
    """Upper bound on the CTA's shared memory for ``program`` (see :func:`smem_placement`)."""
    return smem_placement(program)[1]


def accumulator_registers(program) -> int:  # noqa: ANN001
    """fp32 accumulator registers per consumer thread (tile owned by one warpgroup / 128)."""
    cfg = program.config
    return cfg.wg_tile_m * cfg.tile_n // 128
