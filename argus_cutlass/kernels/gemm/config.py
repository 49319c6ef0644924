"""Frozen GEMM kernel configuration.

A :class:`GemmConfig` fixes every compile-time choice of one Hopper GEMM kernel
(CTA tile, cluster, pipeline stages, schedule, epilogue tile) plus the scheduler's
run-time knobs that the rendered ``.cu`` bakes in (raster order, swizzle).
Problem sizes (M, N, K) and leading dimensions stay run-time arguments.

Layout letters follow BLAS/cuBLAS: the first letter is A, the second B, and the
GEMM is ``D[M,N] = alpha * A[M,K] @ B[K,N] + beta * C[M,N]`` with D and C row-major
(N contiguous):

====== ============================ ============================
layout A (M x K)                    B (stored)
====== ============================ ============================
``tn`` row-major, K-major           N x K row-major, K-major
``nt`` column-major, M-major        K x N row-major, N-major
``nn`` column-major, M-major        N x K row-major, K-major
``tt`` row-major, K-major           K x N row-major, N-major
====== ============================ ============================
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from argus_cutlass.kernels.fields import not_a_bool

DType = Literal["bf16", "fp16"]
OutDType = Literal["bf16", "fp16", "fp32"]
GemmLayout = Literal["tn", "nt", "nn", "tt"]
Schedule = Literal["cooperative", "pingpong"]
Raster = Literal["along_m", "along_n"]
TileScheduler = Literal["persistent", "streamk", "splitk", "clusterk"]

#: bytes per element of each dtype name
DTYPE_BYTES: dict[str, int] = {"bf16": 2, "fp16": 2, "fp32": 4}


def a_is_k_major(layout: str) -> bool:
    """True when A (M x K) is stored with K contiguous (layout letter 't')."""
    return layout[0] == "t"


def b_is_k_major(layout: str) -> bool:
    """True when B is stored with K contiguous (N x K row-major, layout letter 'n')."""
    return layout[1] == "n"


def kernel_k_majors(layout: str, swap_ab: bool) -> tuple[bool, bool]:
    """K-majorness of the kernel's (mainloop) A and B operands.

    Without swap-AB the kernel's A is the problem's A. With swap-AB the kernel computes
    ``D^T = B @ A^T``: its A (M' x K, M' = N) is the problem's B and its B (N' x K,
    N' = M) the problem's A, each keeping its storage.

    >>> kernel_k_majors("nt", False), kernel_k_majors("nt", True), kernel_k_majors("tt", True)
    ((False, False), (False, False), (False, True))
    """
    a_k, b_k = a_is_k_major(layout), b_is_k_major(layout)
    return (b_k, a_k) if swap_ab else (a_k, b_k)


class GemmConfig(BaseModel):
    """One SM90 warp-specialized TMA + GMMA GEMM kernel.

    Attributes:
        dtype: A and B element type (``bf16`` or ``fp16``); accumulation is fp32.
        out_dtype: C and D element type.
        layout: operand majorness, see the module docstring.
        tile_m, tile_n, tile_k: CTA tile in elements.
        cluster_m, cluster_n: thread-block cluster shape (CTAs along M and N).
            A is multicast along N (``cluster_n > 1``), B along M.
        stages: mainloop shared-memory pipeline depth.
        schedule: ``cooperative`` (2 consumer warpgroups split the tile along M)
            or ``pingpong`` (2 consumer warpgroups alternate whole tiles).
        epi_m, epi_n: epilogue subtile (the unit of the smem + TMA store).
        raster: order in which the persistent scheduler walks output tiles.
        swizzle: scheduler swizzle (tiles walked in groups of this many, 1/2/4/8).
        scheduler: ``persistent`` (one output tile per work unit), ``streamk`` (the K
            loop of the last wave's tiles is split across CTAs, partial sums reduced in a
            global workspace) or ``splitk`` (every tile's K loop split ``splits`` ways).
            Both need the cooperative schedule.
            ``clusterk``: a cluster of ``splits`` CTAs shares each tile, each sums a contiguous part of
            its k loop, and the partial sums are added through distributed shared memory (no global
            workspace, no extra launch; cooperative, ``cluster_m = cluster_n = 1``; schedule node
            ``clusterk``, rules ``scheduler.bijection`` and ``scheduler.cluster_reduce``).
        splits: K splits per tile for ``splitk`` / ``clusterk`` (1 otherwise; ``clusterk``: 2..8 CTAs).
        reduction: how ``streamk`` / ``splitk`` add a tile's partial sums (CUTLASS ``ReductionMode``, schedule node
            ``reduction``): ``deterministic`` (the default; in k order, one partial after another) or
            ``nondeterministic`` (the middle partials add in any order once the first has stored: fewer serial
            waits, results that may differ in the last bits between runs). Only with ``streamk`` / ``splitk``
            (the DSL refuses it on a persistent schedule); both are proved by rule ``scheduler.bijection``.
        swap_ab: compute ``D^T[N,M] = B @ A^T`` (swap-AB, for small M): the kernel's M mode
            is the problem's N and its N mode the problem's M, so a small M sits on the
            GMMA N side (8..256, PTX ISA 9.7.15.5) instead of padding the 64-row GMMA M.
            ``tile_*``, ``cluster_*``, ``epi_*`` and ``raster`` then refer to the *kernel's*
            modes (``tile_n`` tiles the problem's M), and D is written through a
            column-major (M'-contiguous) view of the same row-major storage.
        acc_sets: independent fp32 accumulator sets per consumer warpgroup (a divisor of ``tile_k / 16``:
            1, 2, 4, or 8 with tile_k 128; the DSL refuses others): k-block ``b`` of a k-tile accumulates into
            set ``b % acc_sets``, and the sets are added into set 0 after the k loop (node ``KLoop.acc_sets``,
            rule ``k.acc_sets``). A chain of wgmmas into one accumulator waits on each other; narrow decode
            tiles (N = 16 / 32) may be bound by that chain's latency rather than by memory. Costs
            ``acc_sets - 1`` extra accumulator fragments of registers (rule ``registers`` counts them: 4 sets
            of a 128x256 cooperative tile do not fit).
        mma_in_flight: wgmma batches (one per k-tile) a consumer warpgroup leaves outstanding after issuing a
            k-tile's batch (``warpgroup_wait<mma_in_flight>``; CUTLASS ``K_PIPE_MMAS``, 1 there); the stage of
            k-tile ``i`` is released after k-tile ``i + mma_in_flight`` was issued (pipeline node
            ``release_lag`` = ``mma_in_flight``, rule ``pipeline.release``: a stage may be overwritten only
            after the wgmmas that read it retired, PTX ISA 9.7.15.7). More batches in flight keep the tensor
            cores fed across the consumer's per-k-tile barrier round; each holds one more stage out of the
            producer's reach.
        pdl: programmatic dependent launch (CUDA ``cudaLaunchAttributeProgrammaticStreamSerialization``; PTX ISA
            ``griddepcontrol``, sm_90): the kernel may start while the previous kernel of its stream is still
            running; its prologue (barrier init, tensor-map prefetch) touches no global memory, then it executes
            ``griddepcontrol.wait`` (the previous kernel complete and its memory visible) before any global
            access, and ``griddepcontrol.launch_dependents`` (a programmatic successor may start). Hides the launch
            and prologue of a short (decode) GEMM behind the kernel before it (launch node ``pdl``). Off by default:
            a stream whose previous kernel is not programmatic gains nothing, so the planner and the declared
            sub-space never turn it on (whether it pays depends on the caller's stream); set it by hand
            (``--set pdl=true``).

    Constraints are checked by :func:`argus_cutlass.verify.verify_gemm`, not here,
    so that a wrong configuration reaches the verifier and gets every violation
    reported at once. Here: the type of each field (an integer field refuses a bool) and
    sizes >= 1 (``mma_in_flight`` >= 0), as a pydantic ``ValidationError`` naming the field.
    What no program can be built from (e.g. a ``tile_k`` of 8, an ``epi_n`` that is not 16
    bytes wide, ``splits`` > 1 on the persistent scheduler) is refused when the program is
    built, by :func:`argus_cutlass.kernels.gemm.program.check_buildable`, with a
    :class:`~argus_cutlass.errors.ConfigError` naming the field, its value and the rule.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    dtype: DType = "bf16"
    out_dtype: OutDType = "bf16"
    layout: GemmLayout = "tn"
    tile_m: int = Field(128, gt=0)
    tile_n: int = Field(256, gt=0)
    tile_k: int = Field(64, gt=0)
    cluster_m: int = Field(2, gt=0)
    cluster_n: int = Field(1, gt=0)
    stages: int = Field(4, gt=0)
    schedule: Schedule = "cooperative"
    epi_m: int = Field(128, gt=0)
    epi_n: int = Field(32, gt=0)
    raster: Raster = "along_n"
    swizzle: Literal[1, 2, 4, 8] = 1
    scheduler: TileScheduler = "persistent"
    splits: int = Field(1, gt=0)
    reduction: Literal["deterministic", "nondeterministic"] = "deterministic"
    swap_ab: bool = False
    acc_sets: int = Field(1, gt=0)
    mma_in_flight: int = Field(1, ge=0)
    pdl: bool = False

    _integers = field_validator("tile_m", "tile_n", "tile_k", "cluster_m", "cluster_n", "stages", "epi_m", "epi_n",
                                "swizzle", "splits", "acc_sets", "mma_in_flight", mode="before")(not_a_bool)

    @property
    def tile(self) -> tuple[int, int, int]:
        return (self.tile_m, self.tile_n, self.tile_k)

    @property
    def cluster(self) -> tuple[int, int]:
        return (self.cluster_m, self.cluster_n)

    @property
    def kernel_k_majors(self) -> tuple[bool, bool]:
        """K-majorness of the kernel's A and B (see :func:`kernel_k_majors`)."""
        return kernel_k_majors(self.layout, self.swap_ab)

    def kernel_problem(self, m: int, n: int, k: int) -> tuple[int, int, int]:
        """The (M, N, K) the kernel runs for problem (m, n, k): (n, m, k) under swap-AB."""
        return (n, m, k) if self.swap_ab else (m, n, k)

    @property
    def consumer_warpgroups(self) -> int:
        """Math warpgroups: always 2 (cooperative splits a tile, ping-pong alternates tiles)."""
        return 2

    @property
    def threads(self) -> int:
        """Threads per CTA: one producer warpgroup plus two consumer warpgroups."""
        return 128 * (1 + self.consumer_warpgroups)

    @property
    def wg_tile_m(self) -> int:
        """Rows of the CTA tile owned by one consumer warpgroup at a time."""
        return self.tile_m // 2 if self.schedule == "cooperative" else self.tile_m

    def replace(self, **changes: object) -> GemmConfig:
        """A copy with ``changes`` applied (validated again)."""
        return GemmConfig(**{**self.model_dump(), **changes})
