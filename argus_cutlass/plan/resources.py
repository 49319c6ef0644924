"""Resource model of one tile program: shared memory and registers, read from its nodes.

Units: bytes for memory, 32-bit registers per thread for registers. Everything here is a pure
function of a :class:`~argus_cutlass.dsl.ir.Program` (this package never imports the verifier;
the verifier's resource rules, ``argus_cutlass.verify.rules``, and the cost model read these).

Sources: CUDA C++ Programming Guide, "Compute capabilities" table (sm_90: 227 KiB = 232448 bytes
of shared memory per block, 64K registers per SM and per block, 255 per thread; registers are
allocated per warp in units of 256, i.e. 8 per thread); the generated kernel's shared-memory
layout (``templates/gemm/traits.j2``: buffers at their ``base_bytes``, then ``2 x stages``
8-byte mbarriers at ``barrier_bytes``, plus 1 KiB to align the dynamic base to 1024 bytes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: sm_90 opt-in dynamic shared memory per block (bytes)
SMEM_LIMIT_BYTES = 232448
#: registers of one SM (and the most one CTA can hold)
REGISTERS_PER_SM = 65536
#: bytes of one mbarrier
MBARRIER_BYTES = 8
#: slack the kernel reserves to align its dynamic shared memory base to 1024 bytes
BASE_ALIGN_BYTES = 1024
#: most registers per thread (PTX ``setmaxnreg`` and the ISA limit)
MAX_THREAD_REGISTERS = 255

__all__ = [
    "BASE_ALIGN_BYTES",
    "MAX_THREAD_REGISTERS",
    "MBARRIER_BYTES",
    "REGISTERS_PER_SM",
    "SMEM_LIMIT_BYTES",
    "SmemBreakdown",
    "accumulator_registers",
    "barrier_region",
    "launch_register_cap",
    "smem_breakdown",
    "smem_buffers",
    "slot_ring_region",
    "smem_total_bytes",
    "swizzle_alignment",
]


def swizzle_alignment(swizzle_bytes: int) -> int:
    """Base-address alignment a swizzled smem buffer needs (bytes): the swizzle period.

    The pattern repeats every 8 rows of ``swizzle_bytes``; GMMA descriptors and TMA assume it
    starts at an address multiple of that period (PTX ISA 9.7.15.5.1, matrix descriptor "base
    offset" = 0), and a TMA tensor copy needs a 128-byte aligned smem address (PTX ISA 9.7.9.25).

    >>> swizzle_alignment(128), swizzle_alignment(64), swizzle_alignment(16)
    (1024, 512, 128)
    """
    return max(128, 8 * swizzle_bytes)


def smem_buffers(program: Any) -> list[tuple[str, int, int]]:
    """``(name, base_bytes, size_bytes)`` of every smem tensor of ``program``, in declaration order."""
    return [(t.name, t.base_bytes, t.size_bytes) for t in program.tensors if t.space == "smem"]


def barrier_region(program: Any) -> tuple[int, int]:
    """``[start, end)`` bytes of the mainloop pipeline's ``2 x stages`` mbarriers (full, then empty)."""
    pipe = program.pipeline
    return pipe.barrier_bytes, pipe.barrier_bytes + 2 * pipe.stages * MBARRIER_BYTES


def slot_ring_region(program: Any) -> tuple[int, int]:
    """``[start, end)`` bytes of the dynamic grouped walk's unit ring (schedule node ``slot_bytes``, its
    ``slot_stages`` full / empty mbarriers and int32 slots; ``(0, 0)`` for every other scheduler)."""
    sch = getattr(program, "schedule", None)
    ring = getattr(sch, "slot_ring_bytes", 0) if sch is not None else 0
    return (sch.slot_bytes, sch.slot_bytes + ring) if ring else (0, 0)


def smem_total_bytes(program: Any) -> int:
    """Dynamic shared memory the generated kernel asks for: ``kSmemBytes = barrier_bytes +
    2 * stages * 8 + 1024`` (``templates/gemm/traits.j2``); with the dynamic grouped walk's unit ring
    the ring's end instead of the barriers' when it lies past them (``kSmemUnitRing + kUnitRingBytes + 1024``)."""
    return max(barrier_region(program)[1], slot_ring_region(program)[1]) + BASE_ALIGN_BYTES


@dataclass(frozen=True)
class SmemBreakdown:
    """Shared-memory bytes of one CTA: per buffer, padding between them, barriers, base alignment.

    ``stage_bytes`` maps each pipeline buffer to the bytes of one of its stages.
    """

    buffers: dict[str, int]
    stage_bytes: dict[str, int]
    stages: int
    padding: int
    barriers: int
    align: int

    @property
    def total(self) -> int:
        return sum(self.buffers.values()) + self.padding + self.barriers + self.align

    @property
    def per_stage(self) -> int:
        """Bytes one more pipeline stage costs (buffer stages + its two mbarriers)."""
        return sum(self.stage_bytes.values())

    @property
    def epilogue(self) -> int:
        """Bytes of the smem buffers outside the pipeline (the epilogue's staging)."""
        return sum(v for k, v in self.buffers.items() if k not in self.stage_bytes)

    def describe(self) -> str:
        parts = " + ".join(f"{k} {v}" for k, v in self.buffers.items())
        return (f"{parts} + padding {self.padding} + barriers {self.barriers} + base alignment {self.align} "
                f"= {self.total} bytes")


def smem_breakdown(program: Any) -> SmemBreakdown:
    """The CTA's shared memory by part; ``total`` equals :func:`smem_total_bytes` (the buffers end
    at or before ``barrier_bytes``; rule ``smem.disjoint`` checks that they do)."""
    pipe = program.pipeline
    bufs = {name: size for name, _, size in smem_buffers(program)}
    stage = {}
    for name in pipe.buffers:
        t = program.tensor(name)
        stage[name] = t.size_bytes // max(1, int(t.shape[-1]))
    padding = pipe.barrier_bytes - sum(bufs.values())
    barriers = max(barrier_region(program)[1], slot_ring_region(program)[1]) - pipe.barrier_bytes
    return SmemBreakdown(bufs, stage, pipe.stages, padding, barriers, BASE_ALIGN_BYTES)


def accumulator_registers(program: Any) -> int:
    """fp32 accumulator registers per consumer thread: ``reps_m`` 64 x N GMMA atoms of ``N / 2``
    registers each (PTX ISA 9.7.15.4, the m64nNk16 D fragment), times the k loop's accumulator sets
    (:attr:`~argus_cutlass.dsl.ir.KLoop.acc_sets`: each set is a whole fragment of its own)."""
    mma = program.mma
    loop = program.kloop
    sets = loop.acc_sets if loop is not None else 1
    return sets * mma.reps_m * mma.op.n // 2


def launch_register_cap(threads: int, min_blocks: int = 1) -> int:
    """Registers per thread ``nvcc`` allots under ``__launch_bounds__(threads, min_blocks)``: the
    SM's 65536 registers over the (warp-rounded) threads, rounded down to the allocation unit of 8
    and capped at 255.

    >>> launch_register_cap(384)
    168
    """
    warps_threads = -(-threads // 32) * 32
    per = REGISTERS_PER_SM // max(1, warps_threads * min_blocks)
    return min(MAX_THREAD_REGISTERS, per // 8 * 8)


#: the former name of :func:`smem_breakdown` (``.total`` is the CTA's dynamic shared memory)
smem_bytes = smem_breakdown
