"""Frozen attention-forward kernel configuration.

An :class:`AttentionConfig` fixes every compile-time choice of one Hopper FlashAttention forward
kernel: the head dim, dtype, mask kind and length mode it is built for, the CTA tile (query rows x
keys per kv block), the K/V pipeline depth, and the consumer warpgroups' schedule. Batch, heads,
kv heads, lengths, strides and the softmax scale stay run-time arguments of the entry.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from argus_cutlass.kernels.fields import not_a_bool

DType = Literal["bf16", "fp16"]
#: head dims the family builds (FlashAttention-3's set; others get ``attention.head_dim``)
HEAD_DIMS: tuple[int, ...] = (64, 96, 128, 192, 256)


class AttentionConfig(BaseModel):
    """One SM90 warp-specialized FlashAttention forward kernel.

    Attributes:
        dtype: Q, K, V and O element type (``bf16`` or ``fp16``); S, P's softmax and O accumulate
            in fp32, P is converted to ``dtype`` for the second GEMM.
        head_dim: D (64, 96, 128, 192 or 256), the K of ``S = Q K^T`` and the N of ``O = P V``.
        causal: mask keys after the row's diagonal (bottom-right aligned when the lengths differ).
        varlen: packed variable-length batches (``cu_seqlens_q`` / ``cu_seqlens_k``) instead of
            ``(batch, seq, heads, dim)`` tensors.
        tile_m: query rows per CTA tile: 64 per consumer warpgroup (128: 2, 192: 3).
        tile_n: keys per kv block (a multiple of 16, at most 256): the N of ``S = Q K^T`` and
            the K of ``O += P V``.
        stages: smem stages of the K and the V pipelines.
        q_stages: smem stages of the Q pipeline (1 or 2). With 2 the producer loads the next tile's
            Q while the consumers still work on this tile (it costs ``tile_m x head_dim`` elements of
            smem), so a tile starts without waiting for its Q: worth most when tiles have few kv blocks.
        prefetch_q: the producer warms L2 with the next tile's Q (``cp.async.bulk.prefetch.tensor``,
            PTX ISA 9.7.9.26) while this tile runs, so the Q load that follows the release of Q's
            stage hits L2 instead of HBM. A hint: it moves no data into shared memory.
        pingpong: the consumer warpgroups take turns issuing their GEMMs (FA3's inter-warpgroup
            overlap through named barriers); without it they issue freely.
        longest_first: the persistent scheduler starts with the last query blocks (the most keys
            under a causal mask). ``None``: on for causal kernels.
        epilogue: how O leaves the registers. ``direct``: each thread stores its accumulator pairs
            where the wgmma left them (4-byte stores; a warp store covers 8 rows x 16 bytes, half of
            each 32-byte sector). ``quad16``: the 4 lanes of a quad (one row) exchange their packed
            pairs with ``__shfl_xor_sync`` (a 4x4 transpose of 32-bit words in two butterfly stages)
            so each lane stores 16 contiguous bytes of its row (a warp store covers 8 rows x 64
            bytes: whole sectors, 4x fewer store instructions, no smem). Both proved by rule
            ``output.row`` (FA4) on the program's store map.
        scheduler: ``static`` (CTA ``c`` takes tiles ``c, c + grid, ...``) or ``dynamic`` (the
            producer fetches the next tile from a global counter with ``atomicAdd`` and hands it to
            the consumers through the Q stage: tiles of unequal work balance across SMs, FA3's
            causal scheduler). ``None``: dynamic for causal kernels.

    Constraints (smem, registers, GMMA shapes) are checked by the verifier, not here, so a wrong
    configuration reaches it and gets every violation reported at once. Here: field types (an
    integer field refuses a bool) and sizes >= 1; what no program can be built from (a head dim
    outside :data:`HEAD_DIMS`, ``tile_m`` not a multiple of 64 or with more consumer warpgroups than
    named barriers, ``tile_n`` not a multiple of 16 up to 256) is refused when the program is built
    (:func:`argus_cutlass.kernels.attention.program.build_program`: ``attention.head_dim`` /
    ``attention.tile``, naming the field and its value).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    dtype: DType = "bf16"
    head_dim: int = Field(128, gt=0)
    causal: bool = False
    varlen: bool = False
    tile_m: int = Field(128, gt=0)
    tile_n: int = Field(128, gt=0)
    stages: int = Field(2, gt=0)
    q_stages: int = Field(1, ge=1, le=2)
    prefetch_q: bool = False
    pingpong: bool = True
    longest_first: bool | None = None
    scheduler: Literal["static", "dynamic"] | None = None
    epilogue: Literal["direct", "quad16"] = "direct"

    _integers = field_validator("head_dim", "tile_m", "tile_n", "stages", "q_stages", mode="before")(not_a_bool)

    def __repr_args__(self) -> Any:
        # the default epilogue is left out, so configurations written before the knob print as they did
        return [(k, v) for k, v in super().__repr_args__() if not (k == "epilogue" and v == "direct")]

    @property
    def consumer_warpgroups(self) -> int:
        """Math warpgroups: one per 64 query rows of the tile."""
        return max(1, self.tile_m // 64)

    @property
    def threads(self) -> int:
        """Threads per CTA: one producer warpgroup plus the consumer warpgroups."""
        return 128 * (1 + self.consumer_warpgroups)

    @property
    def walk_longest_first(self) -> bool:
        return self.causal if self.longest_first is None else self.longest_first

    @property
    def dynamic_scheduler(self) -> bool:
        """Tiles come from a global atomic counter (``scheduler``, default: causal kernels)."""
        return self.causal if self.scheduler is None else self.scheduler == "dynamic"

    def replace(self, **changes: object) -> AttentionConfig:
        """A copy with ``changes`` applied (validated again)."""
        return AttentionConfig(**{**self.model_dump(), **changes})
